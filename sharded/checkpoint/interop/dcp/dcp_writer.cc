#include "sharded/checkpoint/interop/dcp/dcp_writer.h"

#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_split.h"
#include "sharded/agreement.h"
#include "sharded/checkpoint/format/file_names.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/checkpoint/interop/dcp/dcp_files.h"
#include "sharded/checkpoint/interop/dcp/dcp_metadata.h"
#include "sharded/checkpoint/interop/pytorch/torch_export.h"
#include "sharded/checkpoint/save_protocol.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "sharded/no_throw.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint::dcp {
namespace {

// One chunk this rank writes.
struct Chunk {
  std::string key;
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
  at::Tensor tensor;  // the chunk's values
  int64_t offset = 0;  // its payload in the rank's data file
  int64_t length = 0;
};

// A chunk record as the ranks exchange it: "<len>:<key> <offsets> <sizes> <offset> <length>\n".
std::string IntList(const std::vector<int64_t>& v) { return v.empty() ? "-" : absl::StrJoin(v, ","); }

std::string Encode(const std::string& file, const std::vector<Chunk>& chunks) {
  std::string out = absl::StrCat(file.size(), ":", file, "\n");
  for (const Chunk& c : chunks) {
    absl::StrAppend(&out, c.key.size(), ":", c.key, " ", IntList(c.offsets), " ", IntList(c.sizes), " ", c.offset, " ",
                    c.length, "\n");
  }
  return out;
}

struct Record {
  std::string file;
  std::vector<int64_t> offsets, sizes;
  int64_t offset = 0, length = 0;
};

absl::StatusOr<std::vector<int64_t>> Ints(absl::string_view text) {
  std::vector<int64_t> out;
  if (text == "-") return out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v)) return absl::InternalError(absl::StrCat("bad chunk record field '", part, "'"));
    out.push_back(v);
  }
  return out;
}

// Every rank's records, by key in arrival order.
absl::Status Decode(const std::string& blob, std::map<std::string, std::vector<Record>>* by_key) {
  absl::string_view rest = blob;
  auto take_sized = [&](std::string* out) -> bool {
    const size_t colon = rest.find(':');
    size_t n = 0;
    if (colon == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, colon), &n) || colon + 1 + n > rest.size()) {
      return false;
    }
    *out = std::string(rest.substr(colon + 1, n));
    rest.remove_prefix(colon + 1 + n);
    return true;
  };
  std::string file;
  if (!take_sized(&file) || !absl::ConsumePrefix(&rest, "\n")) return absl::InternalError("bad chunk records");
  while (!rest.empty()) {
    std::string key;
    if (!take_sized(&key) || !absl::ConsumePrefix(&rest, " ")) return absl::InternalError("bad chunk record");
    const size_t eol = rest.find('\n');
    if (eol == absl::string_view::npos) return absl::InternalError("bad chunk record");
    std::vector<absl::string_view> f = absl::StrSplit(rest.substr(0, eol), ' ');
    rest.remove_prefix(eol + 1);
    if (f.size() != 4) return absl::InternalError("bad chunk record");
    Record r;
    r.file = file;
    SL_ASSIGN_OR_RETURN(r.offsets, Ints(f[0]));
    SL_ASSIGN_OR_RETURN(r.sizes, Ints(f[1]));
    if (!absl::SimpleAtoi(f[2], &r.offset) || !absl::SimpleAtoi(f[3], &r.length)) {
      return absl::InternalError("bad chunk record");
    }
    (*by_key)[key].push_back(std::move(r));
  }
  return absl::OkStatus();
}

// What this rank writes: its non-empty local shards; dense tensors and
// tensors without elements on rank 0, whole.
absl::StatusOr<std::vector<Chunk>> ChunksOf(const StateDict& state_dict, int rank) {
  std::vector<Chunk> out;
  for (const auto& [key, value] : state_dict.entries()) {
    if (const at::Tensor* dense = std::get_if<at::Tensor>(&value)) {
      if (DcpDtypeName(dense->scalar_type()).empty()) {
        return absl::InvalidArgumentError(absl::StrCat("key ", Quote(key), ": dtype ", c10::toString(dense->scalar_type()),
                                                       " cannot be saved in a DCP checkpoint"));
      }
      if (rank == 0) out.push_back({key, std::vector<int64_t>(dense->dim(), 0), dense->sizes().vec(), *dense});
      continue;
    }
    const ShardedTensor& st = std::get<ShardedTensor>(value);
    if (DcpDtypeName(st.dtype()).empty()) {
      return absl::InvalidArgumentError(absl::StrCat("key ", Quote(key), ": dtype ", c10::toString(st.dtype()),
                                                     " cannot be saved in a DCP checkpoint"));
    }
    int64_t total = 1;
    for (int64_t s : st.sizes()) total *= s;
    if (total == 0) {
      if (rank == 0) {
        out.push_back({key, std::vector<int64_t>(st.sizes().size(), 0), st.sizes(),
                       at::empty(st.sizes(), at::TensorOptions().dtype(st.dtype()))});
      }
      continue;
    }
    for (const Shard& s : st.local_shards()) {
      if (s.tensor.numel() == 0) continue;
      out.push_back({key, {s.metadata.offsets.begin(), s.metadata.offsets.end()},
                     {s.metadata.sizes.begin(), s.metadata.sizes.end()}, s.tensor});
    }
  }
  return out;
}

// Writes every chunk as a torch.save payload, back to back (rank 0: then
// every non-tensor value), and fsyncs.
absl::Status WriteDataFile(Storage& storage, const std::string& path, std::vector<Chunk>& chunks,
                           const std::vector<StateDict::ValueEntry>& values, std::vector<DcpItem>* value_payloads) {
  SL_ASSIGN_OR_RETURN(File file, File::CreateNew(storage, path));
  int64_t pos = 0;
  for (Chunk& c : chunks) {
    c.offset = pos;
    SL_ASSIGN_OR_RETURN(c.length, AppendTensorPayload(file, pos, c.key, c.tensor));
    pos += c.length;
  }
  const std::string name(path.substr(path.find_last_of('/') + 1));
  for (const auto& [key, value] : values) {
    DcpItem p{name, pos, 0};
    SL_ASSIGN_OR_RETURN(p.length, AppendValuePayload(file, pos, value));
    pos += p.length;
    value_payloads->push_back(p);
  }
  SL_RETURN_IF_ERROR(file.Sync());
  return file.Close();
}

}  // namespace

absl::Status SaveDcpCheckpoint(const StateDict& state_dict, const std::string& dir, c10d::ProcessGroup& pg,
                               const SaveOptions& options) {
  const int rank = pg.getRank();
  Storage& storage = StorageOrDefault(options.storage.get());
  const std::string what = absl::StrCat("DCP checkpoint save to '", dir, "'");
  const absl::StatusOr<SavePlan> plan = NoThrow([&] { return PlanSave(state_dict, rank, pg.getSize()); });

  // Step 1: every rank's part is sound, the ranks agree on the structure,
  // and they take rank 0's generation.
  std::vector<Chunk> chunks;
  std::string proposal;
  bool exclusive = false;  // rank 0: an object store, and no .metadata when the save began
  absl::Status mine = NoThrow([&]() -> absl::Status {
    SL_RETURN_IF_ERROR(plan.status());
    SL_ASSIGN_OR_RETURN(chunks, ChunksOf(state_dict, rank));
    // As the shardlight save: on an object store rank 0 alone makes the
    // directory, before the agreement (one marker PUT, not W racing ones).
    if (!storage.RenameIsCopy(dir) || rank == 0) SL_RETURN_IF_ERROR(storage.MakeDirectories(dir));
    if (rank == 0) {
      if (storage.Exists(JoinPath(dir, kIndexFileName))) {
        return absl::FailedPreconditionError(absl::StrCat(
            "'", dir, "' holds a shardlight checkpoint (", kIndexFileName,
            "), which loads would read instead of the DCP one; save the DCP checkpoint to another directory"));
      }
      proposal = NewGeneration();
      exclusive = storage.RenameIsCopy(dir) && !storage.Exists(JoinPath(dir, kDcpMetadataFileName));
    }
    return absl::OkStatus();
  });
  const AgreementContext context{what, "state dict (its keys, shapes, dtypes and shard layouts)"};
  SL_ASSIGN_OR_RETURN(const std::vector<std::string> step1,
                      AgreeAndGather(pg, {mine, plan.ok() ? plan->fingerprint : 0, proposal}, context));

  // Step 2: this rank's data file, under a name no earlier save used, fsynced.
  const std::string file_name = absl::StrCat("__", rank, "_", step1[0], ".distcp");
  std::string records;
  std::vector<DcpItem> value_payloads;  // rank 0's
  static const std::vector<StateDict::ValueEntry> kNoValues;
  mine = NoThrow([&]() -> absl::Status {
    SL_RETURN_IF_ERROR(WriteDataFile(storage, JoinPath(dir, file_name), chunks,
                                     rank == 0 ? state_dict.values() : kNoValues, &value_payloads));
    records = Encode(file_name, chunks);
    return storage.SyncDirectory(dir);
  });

  // Step 3: the ranks agree every file is durable and send rank 0 their chunks.
  SL_ASSIGN_OR_RETURN(const std::vector<std::string> all, AgreeAndGatherTo(pg, 0, {mine, 0, records}, context));

  // Step 4: rank 0 commits .metadata last, then removes stale data files.
  mine = absl::OkStatus();
  if (rank == 0) {
    mine = NoThrow([&]() -> absl::Status {
      std::map<std::string, std::vector<Record>> by_key;
      std::set<std::string> files;
      for (size_t r = 0; r < all.size(); ++r) {
        SL_RETURN_IF_ERROR(Decode(all[r], &by_key));
        files.insert(absl::StrCat("__", r, "_", step1[0], ".distcp"));
      }
      std::vector<DcpEntry> entries;
      for (const auto& [key, value] : state_dict.entries()) {
        DcpEntry e;
        e.key = key;
        if (const at::Tensor* dense = std::get_if<at::Tensor>(&value)) {
          e.dtype = dense->scalar_type();
          e.size = dense->sizes().vec();
        } else {
          const ShardedTensor& st = std::get<ShardedTensor>(value);
          e.dtype = st.dtype();
          e.size = st.sizes();
        }
        auto it = by_key.find(key);
        if (it != by_key.end()) {
          for (const Record& r : it->second) e.chunks.push_back({r.offsets, r.sizes, {r.file, r.offset, r.length}});
        }
        entries.push_back(std::move(e));
      }
      for (size_t i = 0; i < state_dict.values().size(); ++i) {
        DcpEntry e;
        e.key = state_dict.values()[i].first;
        e.is_value = true;
        e.value = value_payloads.at(i);
        entries.push_back(std::move(e));
      }
      SL_ASSIGN_OR_RETURN(const std::string pickle, DcpMetadataPickle(entries));
      bool committed = false;
      SL_RETURN_IF_ERROR(CommitDcpMetadata(storage, dir, pickle, exclusive, &committed));
      SL_ASSIGN_OR_RETURN(const int removed, RemoveStaleDcpFiles(storage, dir, files));
      if (removed > 0 && options.on_removed) options.on_removed(RemovalLine(removed, dir, kStaleDcpFilesWhy));
      return absl::OkStatus();
    });
  }
  // A save that lost the race for an object store's .metadata removes its own data file.
  const absl::Status done = Agree(pg, mine, what);
  if (absl::IsAlreadyExists(done) && storage.RenameIsCopy(dir)) storage.Remove(JoinPath(dir, file_name)).IgnoreError();
  return done;
}

}  // namespace shardlight::sharded::checkpoint::dcp
