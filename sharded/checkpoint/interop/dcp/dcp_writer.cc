#include "sharded/checkpoint/interop/dcp/dcp_writer.h"

#include <caffe2/serialize/inline_container.h>

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
#include "sharded/checkpoint/interop/dcp/dcp_metadata.h"
#include "sharded/checkpoint/interop/pytorch/torch_export.h"
#include "sharded/checkpoint/save_protocol.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "sharded/no_throw.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint::dcp {
namespace {

using pytorch::TorchPickleWriter;

constexpr char kMetaModule[] = "torch.distributed.checkpoint.metadata";
constexpr char kTempMetadata[] = ".metadata.tmp";

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

// Writes every chunk as a torch.save payload, back to back, and fsyncs.
absl::Status WriteDataFile(Storage& storage, const std::string& path, std::vector<Chunk>& chunks) {
  SL_ASSIGN_OR_RETURN(File file, File::CreateNew(storage, path));
  int64_t pos = 0;
  absl::Status io;
  for (Chunk& c : chunks) {
    const at::Tensor data = c.tensor.detach().to(at::kCPU).contiguous();
    std::vector<int64_t> strides(c.sizes.size(), 1);
    for (size_t d = c.sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * std::max<int64_t>(c.sizes[d], 1);
    TorchPickleWriter pickle;
    if (!pickle.Tensor(data.scalar_type(), "0", data.numel(), 0, c.sizes, strides)) {
      return absl::InvalidArgumentError(absl::StrCat("key ", Quote(c.key), ": dtype has no torch storage class"));
    }
    const std::string pkl = pickle.Finish();
    c.offset = pos;
    {
      caffe2::serialize::PyTorchStreamWriter zip([&](const void* bytes, size_t n) {
        if (io.ok()) io = file.WriteAt(bytes, static_cast<int64_t>(n), pos);
        pos += static_cast<int64_t>(n);
        return n;
      });
      zip.writeRecord("data.pkl", pkl.data(), pkl.size());
      zip.writeRecord("byteorder", "little", 6);
      static const char kEmpty = 0;
      const size_t n = static_cast<size_t>(data.numel() * data.element_size());
      zip.writeRecord("data/0", n == 0 ? &kEmpty : data.data_ptr(), n);
      zip.writeEndOfFile();
    }
    SL_RETURN_IF_ERROR(io);
    c.length = pos - c.offset;
  }
  SL_RETURN_IF_ERROR(file.Sync());
  return file.Close();
}

void Size(TorchPickleWriter& w, const std::vector<int64_t>& v) {
  w.Global("torch", "Size");
  w.Mark();
  w.Mark();
  for (int64_t x : v) w.Int(x);
  w.Tuple();
  w.Tuple();
  w.Reduce();
}

// An instance of a DCP dataclass: cls.__new__(cls), then its fields (the
// caller pushes name/value pairs between Begin and End).
void BeginObject(TorchPickleWriter& w, const char* module, const char* cls) {
  w.Global(module, cls);
  w.EmptyTuple();
  w.NewObj();
  w.EmptyDict();
  w.Mark();
}
void EndObject(TorchPickleWriter& w) {
  w.SetItems();
  w.Build();
}

void Properties(TorchPickleWriter& w, c10::ScalarType dtype, const std::vector<int64_t>& size) {
  w.Global(kMetaModule, "TensorProperties");
  w.EmptyTuple();
  w.NewObj();
  // __setstate__'s tuple: dtype, layout, requires_grad, memory format, pin_memory, strides.
  w.Mark();
  w.Global("torch", DcpDtypeName(dtype));
  w.Global("torch.serialization", "_get_layout");
  w.Mark();
  w.String("torch.strided");
  w.Tuple();
  w.Reduce();
  w.Bool(false);
  w.Global("builtins", "getattr");
  w.Mark();
  w.Global(kMetaModule, "_MEM_FORMAT_ENCODING");
  w.String("TORCH_CONTIGUOUS_FORMAT");
  w.Tuple();
  w.Reduce();
  w.Bool(false);
  std::vector<int64_t> strides(size.size(), 1);
  for (size_t d = size.size(); d-- > 1;) strides[d - 1] = strides[d] * std::max<int64_t>(size[d], 1);
  w.Mark();
  for (int64_t s : strides) w.Int(s);
  w.Tuple();
  w.Tuple();
  w.Build();
}

struct KeyInfo {
  std::string key;
  c10::ScalarType dtype;
  std::vector<int64_t> size;
};

// The pickled Metadata of the whole checkpoint.
absl::StatusOr<std::string> MetadataPickle(const std::vector<KeyInfo>& keys,
                                           const std::map<std::string, std::vector<Record>>& records) {
  TorchPickleWriter w;
  BeginObject(w, kMetaModule, "Metadata");
  w.String("state_dict_metadata");
  w.EmptyDict();
  w.Mark();
  for (const KeyInfo& k : keys) {
    auto it = records.find(k.key);
    if (it == records.end()) return absl::InternalError(absl::StrCat("key ", Quote(k.key), ": no rank wrote a chunk"));
    w.String(k.key);
    BeginObject(w, kMetaModule, "TensorStorageMetadata");
    w.String("properties");
    Properties(w, k.dtype, k.size);
    w.String("size");
    Size(w, k.size);
    w.String("chunks");
    w.EmptyList();
    w.Mark();
    for (const Record& r : it->second) {
      BeginObject(w, kMetaModule, "ChunkStorageMetadata");
      w.String("offsets");
      Size(w, r.offsets);
      w.String("sizes");
      Size(w, r.sizes);
      EndObject(w);
    }
    w.Appends();
    EndObject(w);
  }
  w.SetItems();
  w.String("planner_data");  // flat keys: each its own one-part path
  w.EmptyDict();
  w.Mark();
  for (const KeyInfo& k : keys) {
    w.String(k.key);
    w.Mark();
    w.String(k.key);
    w.Tuple();
  }
  w.SetItems();
  w.String("storage_data");
  w.EmptyDict();
  w.Mark();
  for (const KeyInfo& k : keys) {
    const std::vector<Record>& chunks = records.at(k.key);
    for (size_t i = 0; i < chunks.size(); ++i) {
      const Record& r = chunks[i];
      BeginObject(w, kMetaModule, "MetadataIndex");
      w.String("fqn");
      w.String(k.key);
      w.String("offset");
      Size(w, r.offsets);
      w.String("index");
      w.Int(static_cast<int64_t>(i));
      EndObject(w);
      BeginObject(w, "torch.distributed.checkpoint.filesystem", "_StorageInfo");
      w.String("relative_path");
      w.String(r.file);
      w.String("offset");
      w.Int(r.offset);
      w.String("length");
      w.Int(r.length);
      EndObject(w);
    }
  }
  w.SetItems();
  w.String("storage_meta");
  w.None();
  w.String("version");
  w.String("1.0.0");
  EndObject(w);
  return w.Finish();
}

// Rank 0, after the commit: .distcp files the new .metadata does not name.
absl::Status RemoveStale(Storage& storage, const std::string& dir, const std::set<std::string>& keep,
                         const RemovalLog& on_removed) {
  SL_ASSIGN_OR_RETURN(const std::vector<std::string> names, storage.List(dir));
  int removed = 0;
  for (const std::string& name : names) {
    if (!absl::StartsWith(name, "__") || !absl::EndsWith(name, ".distcp") || keep.count(name) > 0) continue;
    SL_RETURN_IF_ERROR(storage.Remove(JoinPath(dir, name)));
    ++removed;
  }
  if (removed > 0 && on_removed) {
    on_removed(RemovalLine(removed, dir, "data files of an earlier DCP checkpoint (or a failed save) that the new "
                                         ".metadata does not name"));
  }
  return absl::OkStatus();
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
    SL_RETURN_IF_ERROR(storage.MakeDirectories(dir));
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
  mine = NoThrow([&]() -> absl::Status {
    SL_RETURN_IF_ERROR(WriteDataFile(storage, JoinPath(dir, file_name), chunks));
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
      std::vector<KeyInfo> keys;
      for (const auto& [key, value] : state_dict.entries()) {
        if (const at::Tensor* dense = std::get_if<at::Tensor>(&value)) {
          keys.push_back({key, dense->scalar_type(), dense->sizes().vec()});
        } else {
          const ShardedTensor& st = std::get<ShardedTensor>(value);
          keys.push_back({key, st.dtype(), st.sizes()});
        }
      }
      SL_ASSIGN_OR_RETURN(const std::string pickle, MetadataPickle(keys, by_key));
      const std::string metadata = JoinPath(dir, kDcpMetadataFileName);
      if (exclusive) {
        // An object store, no .metadata when the save began: it is created exclusively
        // (S3: If-None-Match: *); a save that committed first wins.
        const absl::Status put = WriteNewFile(storage, metadata, pickle);
        if (absl::IsAlreadyExists(put)) {
          return absl::AlreadyExistsError(absl::StrCat("another save committed '", dir,
                                                       "' first: this save did not commit (", put.message(), ")"));
        }
        SL_RETURN_IF_ERROR(put);
      } else {
        const std::string temp = JoinPath(dir, kTempMetadata);
        SL_RETURN_IF_ERROR(storage.Remove(temp));  // a leftover of an earlier crash
        SL_RETURN_IF_ERROR(WriteNewFile(storage, temp, pickle));
        SL_RETURN_IF_ERROR(storage.Rename(temp, metadata));
      }
      absl::Status durable = storage.SyncDirectory(dir);
      if (!durable.ok()) {
        return absl::Status(durable.code(), absl::StrCat("the DCP checkpoint is committed but may not be durable: ",
                                                         durable.message()));
      }
      return RemoveStale(storage, dir, files, options.on_removed);
    });
  }
  // A save that lost the race for an object store's .metadata removes its own data file.
  const absl::Status done = Agree(pg, mine, what);
  if (absl::IsAlreadyExists(done) && storage.RenameIsCopy(dir)) storage.Remove(JoinPath(dir, file_name)).IgnoreError();
  return done;
}

}  // namespace shardlight::sharded::checkpoint::dcp
