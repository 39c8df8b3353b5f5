// SaveCheckpoint: write, agree, rename, commit. One comment per protocol step.
#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/format/checkpoint_reader.h"
#include "sharded/checkpoint/format/data_file.h"
#include "sharded/checkpoint/format/dtype_names.h"
#include "sharded/checkpoint/format/file_names.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/checkpoint/save_protocol.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "sharded/checkpoint/storage/storage.h"
#include "sharded/agreement.h"
#include "sharded/no_throw.h"
#include "sharded/stable_hash.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {
namespace {

// Deletes a file when the save leaves early (error or exception) before the
// file has been handed over.
class RemoveOnExit {
 public:
  explicit RemoveOnExit(Storage& storage) : storage_(storage) {}
  RemoveOnExit(const RemoveOnExit&) = delete;
  RemoveOnExit& operator=(const RemoveOnExit&) = delete;
  ~RemoveOnExit() {
    if (!path_.empty()) storage_.Remove(path_).IgnoreError();
  }
  void Arm(std::string path) { path_ = std::move(path); }
  void Release() { path_.clear(); }

 private:
  Storage& storage_;
  std::string path_;
};

std::string EntryNameOf(const std::string& key, int shard) {
  // Keys never hold '/', so "key/shard-N" cannot collide with another key.
  return shard < 0 ? key : absl::StrCat(key, "/shard-", shard);
}

// This rank's contribution to the index: its file and its entries, one
// line each, fields separated by tabs. Keys and entry names hold no control
// character (ValidateKey), so neither separator can occur inside a field.
std::string RecordsPayload(const std::string& file_name, const WrittenFile& written, const SavePlan& plan) {
  std::string out = absl::StrCat(file_name, "\t", written.bytes, "\t", written.header_bytes, "\n");
  out.reserve(out.size() + written.entries.size() * 96);
  for (size_t i = 0; i < written.entries.size(); ++i) {
    const WrittenEntry& e = written.entries[i];
    absl::StrAppend(&out, plan.refs[i].first, "\t", plan.refs[i].second, "\t", e.name, "\t", e.begin, "\t", e.end, "\t");
    AppendCrcHex(e.block_crcs, &out);
    out.push_back('\n');
  }
  return out;
}

struct Record {
  absl::string_view key;  // into the payload
  int shard = 0;          // -1 for a dense tensor
  const std::string* file = nullptr;  // the IndexFile's name
  std::string entry;
  int64_t begin = 0, end = 0;
  BlockCrcs crcs;
  bool taken = false;
};

// The next `n` tab-separated fields of `line`, the last one ending it.
template <size_t n>
bool SplitFields(absl::string_view line, std::array<absl::string_view, n>* fields) {
  for (size_t i = 0; i + 1 < n; ++i) {
    const size_t tab = line.find('\t');
    if (tab == absl::string_view::npos) return false;
    (*fields)[i] = line.substr(0, tab);
    line.remove_prefix(tab + 1);
  }
  if (line.find('\t') != absl::string_view::npos) return false;
  (*fields)[n - 1] = line;
  return true;
}

// Rank `rank`'s records, in its payload's order. `file` and `payload` must
// stay where they are while `records` is used.
absl::Status DecodeRecords(const std::string& payload, int rank, IndexFile* file, std::vector<Record>* records) {
  auto bad = [&](absl::string_view what) {
    return absl::InternalError(absl::StrCat("unreadable shard records from rank ", rank, ": ", what));
  };
  if (payload.empty() || payload.back() != '\n') return bad("not newline-terminated");
  absl::string_view rest(payload.data(), payload.size() - 1);  // without the last newline
  auto next_line = [&rest] {
    const size_t nl = rest.find('\n');
    absl::string_view line = rest.substr(0, nl);
    rest = nl == absl::string_view::npos ? absl::string_view() : rest.substr(nl + 1);
    return line;
  };
  std::array<absl::string_view, 3> head;
  if (!SplitFields(next_line(), &head) || !absl::SimpleAtoi(head[1], &file->bytes) ||
      !absl::SimpleAtoi(head[2], &file->header_bytes)) {
    return bad("bad file line");
  }
  file->name = std::string(head[0]);
  file->rank = rank;
  records->reserve(static_cast<size_t>(std::count(rest.begin(), rest.end(), '\n')) + 1);
  std::array<absl::string_view, 6> f;
  for (size_t i = 1; !rest.empty(); ++i) {
    Record r;
    r.file = &file->name;
    if (!SplitFields(next_line(), &f) || !absl::SimpleAtoi(f[1], &r.shard) || !absl::SimpleAtoi(f[3], &r.begin) ||
        !absl::SimpleAtoi(f[4], &r.end) || !DecodeCrcHex(f[5], &r.crcs)) {
      return bad(absl::StrCat("bad entry line ", i));
    }
    r.key = f[0];
    r.entry = std::string(f[2]);
    records->push_back(std::move(r));
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointIndex> BuildIndex(const StateDict& state_dict, const std::vector<std::string>& payloads,
                                           const std::string& generation, int64_t block_bytes) {
  CheckpointIndex index;
  index.world_size = static_cast<int>(payloads.size());
  index.generation = generation;
  index.block_bytes = block_bytes;
  std::vector<std::vector<Record>> records(payloads.size());  // per rank
  index.files.resize(payloads.size());  // never resized again: records point at the names
  for (int r = 0; r < static_cast<int>(payloads.size()); ++r) {
    SL_RETURN_IF_ERROR(DecodeRecords(payloads[r], r, &index.files[r], &records[r]));
  }
  // Every rank reports its shards in state-dict order, the order they are
  // taken in here: each is the next record of its rank. Any other order
  // (never written by PlanSave) falls back to a lookup of all records, the
  // last of equal ones winning.
  std::vector<size_t> next(payloads.size(), 0);
  absl::flat_hash_map<std::pair<absl::string_view, int>, Record*> all;
  ShardNamer namer(generation);
  auto take = [&](const IndexTensor& t, int shard, int rank, IndexShard* out) -> absl::Status {
    const std::string& key = t.key;
    Record* found = nullptr;
    if (rank >= 0 && rank < static_cast<int>(records.size()) && next[rank] < records[rank].size()) {
      Record& candidate = records[rank][next[rank]];
      if (candidate.key == key && candidate.shard == shard && !candidate.taken) {
        found = &candidate;
        ++next[rank];
      }
    }
    if (found == nullptr) {
      if (all.empty()) {
        for (auto& of_rank : records) {
          for (Record& r : of_rank) all[{r.key, r.shard}] = &r;
        }
      }
      auto it = all.find(std::make_pair(absl::string_view(key), shard));
      if (it != all.end() && !it->second->taken) found = it->second;
    }
    if (found == nullptr) {
      return absl::InternalError(absl::StrCat("key ", Quote(key), ": no rank reported shard ", shard));
    }
    found->taken = true;
    namer.Name(t, shard < 0 ? 0 : static_cast<size_t>(shard), *found->file, found->entry, out);
    out->begin = found->begin;
    out->end = found->end;
    out->block_crcs = std::move(found->crcs);
    return absl::OkStatus();
  };
  index.tensors.reserve(state_dict.size());
  for (const auto& [key, value] : state_dict.entries()) {
    IndexTensor t;
    t.key = key;
    if (const at::Tensor* dense = std::get_if<at::Tensor>(&value)) {
      t.sharded = false;
      t.dtype = dense->scalar_type();
      t.shape = dense->sizes().vec();
      IndexShard s;
      s.offsets.assign(t.shape.size(), 0);
      s.sizes.assign(t.shape.begin(), t.shape.end());
      s.rank = 0;
      SL_RETURN_IF_ERROR(take(t, -1, 0, &s));
      t.shards.push_back(std::move(s));
    } else {
      const ShardedTensorMetadata& m = std::get<ShardedTensor>(value).metadata();
      t.sharded = true;
      t.dtype = m.properties.dtype;
      t.shape = m.sizes;
      t.shards.reserve(m.shards.size());
      for (size_t i = 0; i < m.shards.size(); ++i) {
        IndexShard s;
        static_cast<Box&>(s) = m.shards[i];
        s.rank = m.shards[i].placement.rank;
        SL_RETURN_IF_ERROR(take(t, static_cast<int>(i), s.rank, &s));
        t.shards.push_back(std::move(s));
      }
    }
    index.tensors.push_back(std::move(t));
  }
  index.values.reserve(state_dict.values().size());
  for (const auto& [key, value] : state_dict.values()) index.values.push_back({key, value});
  index.Reindex();
  return index;
}

// Rank 0, after the commit: the save files in `dir` that the committed
// `index` does not name, each group told to `on_removed` with its reason --
// those of the `replaced` checkpoint apart from the rest (`others_why`). A
// failure part-way still tells what went before it.
absl::StatusOr<int> RemoveStaleFiles(Storage& storage, const std::string& dir, const CheckpointIndex& index,
                                     const std::set<std::string>& replaced, const std::string& others_why,
                                     const RemovalLog& on_removed) {
  SL_ASSIGN_OR_RETURN(const std::vector<std::string> names, storage.List(dir));
  int of_replaced = 0;
  int others = 0;
  absl::Status status;
  for (const std::string& name : names) {
    if (!IsCheckpointFileName(name) || index.FindFile(name) != nullptr) continue;
    status = storage.Remove(JoinPath(dir, name));
    if (!status.ok()) break;
    ++(replaced.count(name) > 0 ? of_replaced : others);
  }
  if (on_removed && of_replaced > 0) {
    on_removed(RemovalLine(of_replaced, dir, "the files of the checkpoint this save replaced"));
  }
  if (on_removed && others > 0) on_removed(RemovalLine(others, dir, others_why));
  SL_RETURN_IF_ERROR(status);
  return of_replaced + others;
}

// Rank 0, before the commit: the data files of the checkpoint the save is
// about to replace (what its index names), and why the other files a
// cleanup will find in `dir` are stale.
std::set<std::string> ReplacedFiles(Storage& storage, const std::string& dir, std::string* others_why) {
  std::set<std::string> names;
  const absl::Status read = NoThrow([&]() -> absl::Status {
    SL_ASSIGN_OR_RETURN(const CheckpointReader reader, CheckpointReader::Open(dir, storage));
    for (const IndexFile& file : reader.index().files) names.insert(file.name);
    return absl::OkStatus();
  });
  if (read.ok()) {
    *others_why = "no index named them (leftovers of saves that never committed)";
  } else if (absl::IsNotFound(read)) {
    *others_why = "the directory had no index (leftovers of a save that never committed)";
  } else {
    *others_why = absl::StrCat("no readable index named them (the index this save replaced could not be read: ",
                               read.message(), ")");
  }
  return names;
}

// Rank 0: writes the index under a temporary name, renames it over
// index.json -- the commit point -- and makes the rename durable. Only then
// are the files the new index does not name removed: were the rename lost
// (a crash before the directory reached the disk), the old index would come
// back and need its files. On an object store (Storage::RenameIsCopy) the
// commit into a `dir` that had no index when the save began (`exclusive`)
// creates index.json exclusively instead (below).
absl::Status CommitIndex(Storage& storage, const StateDict& state_dict, const std::vector<std::string>& payloads,
                         const std::string& dir, const std::string& generation, const SaveOptions& options,
                         bool exclusive) {
  SL_ASSIGN_OR_RETURN(CheckpointIndex index, BuildIndex(state_dict, payloads, generation, options.checksum_block_bytes));
  index.run = options.run;
  SL_RETURN_IF_ERROR(ValidateIndex(index, "new index"));  // never commit what a load would refuse
  const std::string text = SerializeIndex(index);
  const std::string temp = JoinPath(dir, TempIndexFileName(generation));
  std::string others_why;
  const std::set<std::string> replaced =
      options.remove_stale_files && options.on_removed ? ReplacedFiles(storage, dir, &others_why) : std::set<std::string>();
  const std::string index_path = JoinPath(dir, kIndexFileName);
  RemoveOnExit guard(storage);
  if (exclusive) {
    // An object store, and no index here when the save began: the index is created
    // under its own name, exclusively (S3: one PUT with If-None-Match: *),
    // which is the commit point. A save that committed first wins; this one
    // then fails, never overwriting it.
    const absl::Status put = WriteNewFile(storage, index_path, text);
    if (absl::IsAlreadyExists(put)) {
      return absl::AlreadyExistsError(absl::StrCat(
          "another save committed '", dir, "' first (", kIndexFileName,
          " appeared during this save and the store refused to replace it): this save did not commit (",
          put.message(), ")"));
    }
    SL_RETURN_IF_ERROR(put);
  } else {
    {
      SL_ASSIGN_OR_RETURN(File file, File::CreateNew(storage, temp));
      guard.Arm(temp);
      SL_RETURN_IF_ERROR(file.WriteAt(text.data(), static_cast<int64_t>(text.size()), 0));
      SL_RETURN_IF_ERROR(file.Sync());
      SL_RETURN_IF_ERROR(file.Close());
    }
    SL_RETURN_IF_ERROR(storage.Rename(temp, index_path));
    guard.Release();
  }
  // Committed: from here a failure must not be reported as "nothing saved".
  const absl::Status s = NoThrow([&] { return storage.SyncDirectory(dir); });
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("the new checkpoint is committed (", kIndexFileName,
                                               " was renamed into place) but may not be durable: ", s.message(),
                                               "; the previous checkpoint's files were kept"));
  }
  if (options.remove_stale_files) {
    NoThrow([&] {  // best effort: leftovers go at the next save
      return RemoveStaleFiles(storage, dir, index, replaced, others_why, options.on_removed).status();
    }).IgnoreError();
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<at::Tensor> TensorsToWrite(const std::vector<StateDict::Entry>& entries, int rank) {
  std::vector<at::Tensor> tensors;
  for (const auto& [key, value] : entries) {
    if (const at::Tensor* dense = std::get_if<at::Tensor>(&value)) {
      if (rank == 0 && dense->defined()) tensors.push_back(*dense);  // an undefined one fails the plan
      continue;
    }
    // A ShardedTensor holds exactly its rank's shards in metadata order
    // (its invariant): PlanSave's loop below visits these, without the scan
    // of every shard's placement that it needs for the entry names.
    for (const Shard& shard : std::get<ShardedTensor>(value).local_shards()) tensors.push_back(shard.tensor);
  }
  return tensors;
}

// Appends what the fingerprint covers of one shard (its box and placement)
// to `text`, numbers separated so that no two layouts spell alike.
void AppendShardFacts(const ShardMetadata& shard, std::string* text) {
  for (int64_t v : shard.offsets) absl::StrAppend(text, v, ",");
  text->push_back('+');
  for (int64_t v : shard.sizes) absl::StrAppend(text, v, ",");
  absl::StrAppend(text, "@", shard.placement.rank, "/", static_cast<int>(shard.placement.device), ":",
                  shard.placement.device == DeviceKind::kCpu ? 0 : shard.placement.device_index, ";");
}

absl::StatusOr<SavePlan> PlanSave(const StateDict& state_dict, int rank, int world) {
  SavePlan plan;
  plan.fingerprint = kStableHashSeed;
  // Each key's part of the fingerprint, spelled into one reused buffer.
  std::string facts;
  auto k = [](const std::string& key) { return absl::StrCat("key ", Quote(key), ": "); };  // errors only
  for (const auto& [key, value] : state_dict.entries()) {
    SL_RETURN_IF_ERROR(ValidateKey(key));
    facts.clear();
    if (const at::Tensor* dense = std::get_if<at::Tensor>(&value)) {
      if (!dense->defined()) return absl::InvalidArgumentError(k(key) + "the tensor is undefined");
      if (DtypeName(dense->scalar_type()).empty()) {
        return absl::InvalidArgumentError(absl::StrCat(k(key), "dtype ", c10::toString(dense->scalar_type()),
                                                       " cannot be checkpointed"));
      }
      absl::StrAppend(&facts, key, "|dense|", DtypeName(dense->scalar_type()), "|");
      for (int64_t d : dense->sizes()) absl::StrAppend(&facts, d, ",");
      plan.fingerprint = StableHash(facts, plan.fingerprint);
      if (rank == 0) {  // dense tensors are written once
        plan.entries.push_back({key, *dense});
        plan.refs.emplace_back(key, -1);
      }
      continue;
    }
    const ShardedTensor& st = std::get<ShardedTensor>(value);
    const ShardedTensorMetadata& m = st.metadata();
    if (DtypeName(m.properties.dtype).empty() || !IsSupportedDtype(m.properties.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(k(key), "dtype ", c10::toString(m.properties.dtype),
                                                     " cannot be checkpointed"));
    }
    absl::StrAppend(&facts, key, "|sharded|", DtypeName(m.properties.dtype), "|");
    for (int64_t d : m.sizes) absl::StrAppend(&facts, d, ",");
    facts.push_back('|');
    for (size_t i = 0; i < m.shards.size(); ++i) {
      if (m.shards[i].placement.rank >= world) {
        return absl::InvalidArgumentError(absl::StrCat(k(key), "shard ", i, " is placed on ",
                                                       m.shards[i].placement.ToString(), " but the process group has ",
                                                       world, " ranks"));
      }
      AppendShardFacts(m.shards[i], &facts);
    }
    plan.fingerprint = StableHash(facts, plan.fingerprint);
    // A ShardedTensor holds exactly its rank's shards, in metadata order:
    // those of this rank when its group ranks like the save's.
    if (st.process_group()->getRank() != rank) {
      return absl::InvalidArgumentError(absl::StrCat(k(key), "the tensor is rank ", st.process_group()->getRank(),
                                                     " of its process group but this rank saves as rank ", rank));
    }
    const std::vector<Shard>& local = st.local_shards();
    size_t next = 0;  // the local shard of the next shard on this rank
    for (size_t i = 0; i < m.shards.size(); ++i) {
      if (m.shards[i].placement.rank != rank) continue;
      if (next == local.size()) {
        return absl::InternalError(absl::StrCat(k(key), "the tensor holds ", local.size(),
                                                " local shards, fewer than its metadata places on rank ", rank));
      }
      const Shard& shard = local[next++];
      plan.entries.push_back({EntryNameOf(key, static_cast<int>(i)), shard.tensor});
      plan.refs.emplace_back(key, static_cast<int>(i));
    }
  }
  // Values (FORMAT.md): in the index, written by rank 0; every rank's must
  // be the same, so the fingerprint covers their text.
  int64_t value_bytes = 0;
  for (const auto& [key, value] : state_dict.values()) {
    SL_RETURN_IF_ERROR(ValidateKey(key));
    if (absl::Status s = value.Validate(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(k(key), "the value cannot be checkpointed: ", s.message()));
    }
    facts.clear();
    absl::StrAppend(&facts, key, "|value|");
    value.AppendRepr(&facts);
    value_bytes += static_cast<int64_t>(facts.size() - key.size() - 7);
    plan.fingerprint = StableHash(facts, plan.fingerprint);
  }
  if (value_bytes > kMaxValuesBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the state dict's values take ", value_bytes,
                                                   " bytes of text, more than a checkpoint holds (", kMaxValuesBytes,
                                                   "): store large state as a tensor"));
  }
  return plan;
}

absl::Status SaveCheckpoint(const StateDict& state_dict, const std::string& dir, c10d::ProcessGroup& pg,
                            const SaveOptions& options, SaveStats* stats) {
  const absl::StatusOr<SavePlan> plan = NoThrow([&] { return PlanSave(state_dict, pg.getRank(), pg.getSize()); });
  return RunSave(state_dict, plan, dir, pg, options, /*source=*/nullptr, stats);
}

absl::Status RunSave(const StateDict& state_dict, const absl::StatusOr<SavePlan>& plan, const std::string& dir,
                     c10d::ProcessGroup& pg, const SaveOptions& options, EntryByteSource* source, SaveStats* stats) {
  const int rank = pg.getRank();
  const auto started = std::chrono::steady_clock::now();
  Storage& storage = StorageOrDefault(options.storage.get());
  const std::string what = absl::StrCat("checkpoint save to '", dir, "'");
  if (options.checksum_block_bytes < kMinBlockBytes || options.checksum_block_bytes > kMaxBlockBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": checksum_block_bytes must be in [", kMinBlockBytes, ", ", kMaxBlockBytes, "]"));
  }

  // Every rank-local phase runs through NoThrow: a rank that threw would
  // skip the next agreement and leave its peers waiting for it.

  // Step 1: each rank checks its part of the dict and the directory; ranks
  // agree on the dict's structure and take rank 0's generation.
  std::string proposal;
  const bool direct = storage.RenameIsCopy(dir);
  bool index_existed = false;  // rank 0's look, for an object store's commit
  absl::Status mine = NoThrow([&]() -> absl::Status {
    SL_RETURN_IF_ERROR(plan.status());
    // On an object store rank 0 alone makes the directory (its marker): the
    // others write nothing before the agreement below, and W ranks PUTting
    // the same marker at once stalled one of them for 1 s on SeaweedFS.
    if (!direct || rank == 0) SL_RETURN_IF_ERROR(storage.MakeDirectories(dir));
    if (rank == 0) proposal = NewGeneration();
    if (rank == 0 && direct) index_existed = storage.Exists(JoinPath(dir, kIndexFileName));
    return absl::OkStatus();
  });
  const AgreementContext context{what, "state dict (its keys, shapes, dtypes and shard layouts, and its values)"};
  SL_ASSIGN_OR_RETURN(std::vector<std::string> step1,
                      AgreeAndGather(pg, {mine, plan.ok() ? plan->fingerprint : 0, proposal}, context));
  const std::string generation = step1[0];

  // Step 2: this rank's data file, under a temporary name, fsynced; on an
  // object store (no rename) under its final name, unique to this save and
  // invisible to loads until an index names it.
  const std::string final_name = DataFileName(generation, rank);
  const std::string temp = direct ? JoinPath(dir, final_name) : JoinPath(dir, TempDataFileName(generation, rank));
  RemoveOnExit guard(storage);
  int64_t bytes_written = 0;
  std::string payload;
  const auto data_started = std::chrono::steady_clock::now();
  mine = NoThrow([&]() -> absl::Status {
    DataFileOptions file_options;
    file_options.block_bytes = options.checksum_block_bytes;
    file_options.buffer_bytes = options.buffer_bytes;
    file_options.storage = &storage;
    file_options.source = source;
    file_options.metadata = {{"format", "shardlight.checkpoint"},
                             {"version", std::to_string(kFormatVersion)},
                             {"rank", std::to_string(rank)}};
    SL_ASSIGN_OR_RETURN(const WrittenFile written, WriteDataFile(temp, plan->entries, file_options));
    guard.Arm(temp);
    bytes_written = written.bytes;
    payload = RecordsPayload(final_name, written, *plan);
    return absl::OkStatus();
  });
  const std::chrono::duration<double> data_time = std::chrono::steady_clock::now() - data_started;

  // Step 3: ranks agree every file is durable and send rank 0 their shard
  // records (no other rank holds every rank's).
  SL_ASSIGN_OR_RETURN(const std::vector<std::string> records, AgreeAndGatherTo(pg, 0, {mine, 0, payload}, context));

  // Step 4: each rank moves its file to its final name; still invisible, as
  // no index names it yet. From here on a failure leaves it for the next
  // save's cleanup rather than racing a commit.
  mine = NoThrow([&]() -> absl::Status {
    if (!direct) SL_RETURN_IF_ERROR(storage.Rename(temp, JoinPath(dir, final_name)));
    guard.Release();
    return storage.SyncDirectory(dir);
  });
  SL_RETURN_IF_ERROR(Agree(pg, mine, what));

  // Step 5: rank 0 commits the index, last, then removes stale files.
  mine = absl::OkStatus();
  if (rank == 0) {
    mine = NoThrow([&] {
      return CommitIndex(storage, state_dict, records, dir, generation, options, direct && !index_existed);
    });
  }

  // Step 6: every rank returns rank 0's outcome. A save that lost the race
  // for an object store's index removes its own data file.
  absl::Status done = Agree(pg, mine, what);
  if (direct && absl::IsAlreadyExists(done)) storage.Remove(JoinPath(dir, final_name)).IgnoreError();
  if (done.ok() && stats != nullptr) {
    stats->bytes_written = bytes_written;
    stats->data_seconds = data_time.count();
    stats->metadata_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() - data_time.count();
  }
  return done;
}

absl::StatusOr<int> RemoveUnreferencedFiles(const std::string& dir, Storage* storage, const RemovalLog& on_removed) {
  Storage& st = StorageOrDefault(storage);
  SL_ASSIGN_OR_RETURN(const CheckpointReader reader, CheckpointReader::Open(dir, st));
  SL_RETURN_IF_ERROR(st.SyncDirectory(dir));
  return NoThrow([&]() -> absl::StatusOr<int> {
    return RemoveStaleFiles(st, dir, reader.index(), {},
                            "the committed checkpoint does not reference them (left by a save that failed, or was "
                            "killed after its commit)",
                            on_removed);
  });
}

std::string RemovalLine(int files, const std::string& dir, const std::string& why) {
  return absl::StrCat("removed ", files, files == 1 ? " file" : " files", " in '", dir, "': ", why);
}

}  // namespace shardlight::sharded::checkpoint
