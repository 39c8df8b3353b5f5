// LoadCheckpoint: plan and check everything, agree, read, agree.
#include <algorithm>
#include <chrono>
#include <iterator>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "sharded/mismatch.h"
#include "sharded/box.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/format/checkpoint_reader.h"
#include "sharded/checkpoint/format/entry_reader.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/checkpoint/interop/open_checkpoint.h"
#include "sharded/agreement.h"
#include "sharded/no_throw.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {
namespace {

// A box of a destination tensor on this rank.
struct Destination : Box {
  at::Tensor tensor;
};

// One overlap of a checkpoint shard and a destination box.
struct ReadOp {
  const std::string* key;
  const IndexTensor* tensor;
  const IndexShard* shard;
  const File* file;
  const Destination* dst;
  Box region;  // the overlap, global coordinates
};

// This rank's destination boxes of `value`, checked against the checkpoint's
// view of the tensor.
absl::Status DestinationsOf(const std::string& key, const StateValue& value, const IndexTensor& saved,
                            std::vector<Destination>* out) {
  c10::ScalarType dtype;
  c10::IntArrayRef shape;
  if (const at::Tensor* dense = std::get_if<at::Tensor>(&value)) {
    if (!dense->defined()) {
      return absl::InvalidArgumentError(absl::StrCat("key ", Quote(key), ": the tensor to fill is undefined"));
    }
    dtype = dense->scalar_type();
    shape = dense->sizes();
    Destination d;
    d.offsets.assign(shape.size(), 0);
    d.sizes.assign(shape.begin(), shape.end());
    d.tensor = *dense;
    out->push_back(std::move(d));
  } else {
    const ShardedTensor& st = std::get<ShardedTensor>(value);
    dtype = st.dtype();
    shape = st.sizes();
    for (const Shard& s : st.local_shards()) out->push_back({s.metadata, s.tensor});
  }
  if (dtype == saved.dtype && shape.equals(saved.shape)) return absl::OkStatus();  // no facts to spell out
  return CheckSizeAndDtype(key, {"the checkpoint", saved.shape, saved.dtype},
                           {"the tensor to fill", shape.vec(), dtype});
}

// "'a', 'b', 'c', 'd', 'e' and 3 more", or "none".
std::string KeyList(const std::vector<std::string>& keys) {
  if (keys.empty()) return "none";
  const size_t shown = std::min<size_t>(keys.size(), 5);
  std::string list;
  for (size_t i = 0; i < shown; ++i) absl::StrAppend(&list, i ? ", " : "", Quote(keys[i]));
  if (keys.size() > shown) absl::StrAppend(&list, " and ", keys.size() - shown, " more");
  return list;
}

bool Selected(const std::string& key, const LoadOptions& options, const std::unordered_set<std::string>& keys) {
  if (options.keys.empty() && options.key_prefixes.empty()) return true;
  if (keys.count(key) > 0) return true;
  for (const std::string& prefix : options.key_prefixes) {
    if (absl::StartsWith(key, prefix)) return true;
  }
  return false;
}

std::string MappedName(const std::string& key, const LoadOptions& options) {
  auto it = options.rename.find(key);
  if (it != options.rename.end()) return it->second;
  absl::string_view rest = key;
  if (!options.strip_prefix.empty()) absl::ConsumePrefix(&rest, options.strip_prefix);
  return absl::StrCat(options.add_prefix, rest);
}

// The selected checkpoint tensors under the names they load into.
struct Selection {
  // No key filter and no remapping: every tensor under its own key, which
  // the index's lookup finds (no map of its own).
  bool identity = false;
  std::unordered_map<std::string, const IndexTensor*> mapped;  // otherwise
  // The selected values under their mapped names (always filled).
  std::unordered_map<std::string, const IndexValue*> values;

  const IndexTensor* Find(const CheckpointIndex& index, const std::string& name) const {
    if (identity) return index.Find(name);
    auto it = mapped.find(name);
    return it == mapped.end() ? nullptr : it->second;
  }
};

bool SelectsAllUnchanged(const LoadOptions& options) {
  return options.keys.empty() && options.key_prefixes.empty() && options.rename.empty() &&
         options.strip_prefix.empty() && options.add_prefix.empty();
}

// MappedName, refused when it is not a valid key.
absl::StatusOr<std::string> CheckedMappedName(const std::string& key, const LoadOptions& options) {
  std::string name = MappedName(key, options);
  if (name != key) {
    absl::Status s = ValidateKey(name);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("LoadOptions maps checkpoint key ", Quote(key), " to an invalid key: ", s.message()));
    }
  }
  return name;
}

// The key filter and the remapping of LoadOptions, checked.
absl::StatusOr<Selection> SelectAndMap(const CheckpointIndex& index, const LoadOptions& options,
                                       const std::string& dir) {
  Selection selection;
  const std::unordered_set<std::string> keys(options.keys.begin(), options.keys.end());
  for (const IndexValue& v : index.values) {
    if (!Selected(v.key, options, keys)) continue;
    SL_ASSIGN_OR_RETURN(std::string name, CheckedMappedName(v.key, options));
    auto [it, inserted] = selection.values.emplace(std::move(name), &v);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("LoadOptions maps checkpoint keys ", Quote(it->second->key),
                                                     " and ", Quote(v.key), " both to ", Quote(it->first)));
    }
  }
  if (SelectsAllUnchanged(options) && !index.tensors.empty()) {
    selection.identity = true;
    return selection;
  }
  for (const std::string& key : options.keys) {
    if (index.Find(key) == nullptr && index.FindValue(key) == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("LoadOptions::keys names ", Quote(key), ", which is not in the checkpoint at '", dir, "'"));
    }
  }
  for (const auto& [from, to] : options.rename) {
    if (index.Find(from) == nullptr && index.FindValue(from) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("LoadOptions::rename maps ", Quote(from), " to ", Quote(to),
                                                     " but the checkpoint at '", dir, "' has no key ", Quote(from)));
    }
  }
  std::unordered_map<std::string, const IndexTensor*>& mapped = selection.mapped;
  mapped.reserve(index.tensors.size());
  for (const IndexTensor& t : index.tensors) {
    if (!Selected(t.key, options, keys)) continue;
    SL_ASSIGN_OR_RETURN(std::string name, CheckedMappedName(t.key, options));
    if (selection.values.count(name) > 0) {
      return absl::InvalidArgumentError(absl::StrCat("LoadOptions maps checkpoint key ", Quote(t.key),
                                                     " (a tensor) and a value both to ", Quote(name)));
    }
    auto [it, inserted] = mapped.emplace(std::move(name), &t);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(
          "LoadOptions maps checkpoint keys ", Quote(it->second->key), " and ", Quote(t.key), " both to ",
          Quote(it->first), " (rename, strip_prefix, add_prefix): a key can be loaded from one tensor only"));
    }
  }
  if (mapped.empty() && selection.values.empty()) {
    return absl::NotFoundError(absl::StrCat("the key filter (LoadOptions::keys ", KeyList(options.keys),
                                            ", key_prefixes ", KeyList(options.key_prefixes),
                                            ") selects no key of the checkpoint at '", dir, "'"));
  }
  return selection;
}

// File order, then byte order: sequential reads, and tiles of one entry in
// a row so their shared boundary blocks are read once. What a stable sort by
// (file name, begin, region offsets) gives, in time linear in the ops when
// each file's ops come in byte order (as a load in the save's key order
// finds them): grouped by file (one file's ops share one File), and a
// group sorted only when it is out of order.
void SortByFileAndOffset(const CheckpointIndex& index, std::vector<ReadOp>* ops) {
  absl::flat_hash_map<const File*, size_t> group_of;  // groups in order of first appearance
  std::vector<std::vector<ReadOp>> groups;
  const File* last = nullptr;
  size_t g = 0;
  for (ReadOp& op : *ops) {
    if (op.file != last || groups.empty()) {
      auto [it, added] = group_of.try_emplace(op.file, groups.size());
      if (added) groups.emplace_back();
      g = it->second;
      last = op.file;
    }
    groups[g].push_back(std::move(op));
  }
  std::vector<size_t> order(groups.size());
  std::vector<std::string> names(groups.size());
  for (size_t g = 0; g < order.size(); ++g) {
    order[g] = g;
    names[g] = ShardFileName(index, *groups[g][0].shard);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return names[a] < names[b]; });
  auto in_file_order = [](const ReadOp& a, const ReadOp& b) {
    return std::tie(a.shard->begin, a.region.offsets) < std::tie(b.shard->begin, b.region.offsets);
  };
  ops->clear();
  for (size_t g : order) {
    std::vector<ReadOp>& group = groups[g];
    if (!std::is_sorted(group.begin(), group.end(), in_file_order)) {
      std::stable_sort(group.begin(), group.end(), in_file_order);
    }
    std::move(group.begin(), group.end(), std::back_inserter(*ops));
  }
}

// Step 1 on one rank: every check that can fail before a byte is written.
// The values a load sets once its tensors are in: the state dict's key and
// the checkpoint's value.
using ValueAssignments = std::vector<std::pair<std::string, const IndexValue*>>;

absl::Status Plan(const StateDict& to_fill, CheckpointReader& reader, const LoadOptions& options,
                  std::vector<Destination>* destinations, std::vector<ReadOp>* ops, ValueAssignments* values,
                  LoadStats* report) {
  const CheckpointIndex& index = reader.index();
  SL_ASSIGN_OR_RETURN(const Selection selection, SelectAndMap(index, options, reader.dir()));
  // Per key of `to_fill` (in its order): its checkpoint tensor, or null.
  std::vector<const IndexTensor*> sources;
  sources.reserve(to_fill.size());
  std::vector<std::pair<size_t, size_t>> ranges;  // per key: [first, last) destination
  destinations->clear();
  size_t found = 0;
  for (const auto& [key, value] : to_fill.entries()) {
    const IndexTensor* saved = selection.Find(index, key);
    // A key found is valid: it is the index's (ValidateIndex) or a name
    // SelectAndMap checked. Only a key not found is checked here.
    if (saved == nullptr) SL_RETURN_IF_ERROR(ValidateKey(key));
    sources.push_back(saved);
    const size_t first = destinations->size();
    if (saved == nullptr) {
      auto value = selection.values.find(key);
      if (value != selection.values.end()) {
        return absl::InvalidArgumentError(absl::StrCat("key ", Quote(key), ": the checkpoint holds a value (",
                                                       PlainKindName(value->second->value.kind()),
                                                       "), the state dict to fill a tensor"));
      }
      report->missing_keys.push_back(key);
    } else {
      ++found;
      SL_RETURN_IF_ERROR(DestinationsOf(key, value, *saved, destinations));
    }
    ranges.emplace_back(first, destinations->size());
  }
  // Names are unique on both sides: when every selected tensor was found,
  // none is unexpected.
  for (const auto& [key, value] : to_fill.values()) {
    auto it = selection.values.find(key);
    if (it != selection.values.end()) {
      values->emplace_back(key, it->second);
    } else if (selection.Find(index, key) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", Quote(key), ": the checkpoint holds a tensor, the state dict to fill a value"));
    } else {
      SL_RETURN_IF_ERROR(ValidateKey(key));
      report->missing_keys.push_back(key);
    }
  }
  // A state dict without values loads tensors only, as before values
  // existed: the checkpoint's values are not unexpected to it.
  for (const auto& [name, value] : selection.values) {
    if (to_fill.values().empty()) break;
    if (!to_fill.ContainsValue(name) && !to_fill.Contains(name)) report->unexpected_keys.push_back(value->key);
  }
  if (selection.identity) {
    if (found < index.tensors.size()) {
      for (const IndexTensor& t : index.tensors) {
        if (!to_fill.Contains(t.key)) report->unexpected_keys.push_back(t.key);
      }
    }
  } else {
    for (const auto& [name, tensor] : selection.mapped) {
      if (!to_fill.Contains(name)) report->unexpected_keys.push_back(tensor->key);
    }
  }
  std::sort(report->missing_keys.begin(), report->missing_keys.end());
  std::sort(report->unexpected_keys.begin(), report->unexpected_keys.end());
  if (options.strict && (!report->missing_keys.empty() || !report->unexpected_keys.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "strict load from '", reader.dir(), "': missing keys (in the state dict to fill, not loaded): ",
        KeyList(report->missing_keys), "; unexpected keys (selected in the checkpoint, not in the state dict): ",
        KeyList(report->unexpected_keys), " (LoadOptions::strict = false loads the keys both have)"));
  }
  // Pointers into `destinations` are taken only now that it stops growing.
  size_t key_index = 0;
  for (const auto& entry : to_fill.entries()) {
    const std::string& key = entry.first;
    if (sources[key_index] == nullptr) {
      ++key_index;
      continue;
    }
    const IndexTensor& saved = *sources[key_index];
    for (size_t d = ranges[key_index].first; d < ranges[key_index].second; ++d) {
      const Destination& dst = (*destinations)[d];
      if (dst.NumElements() == 0) continue;
      for (const IndexShard& shard : saved.shards) {
        if (shard.NumElements() == 0) continue;
        // (A 0-d tensor's one element always intersects: empty boxes of no dims.)
        std::optional<Box> region = Intersect(shard, dst);
        if (!region) continue;
        SL_ASSIGN_OR_RETURN(const File* file, reader.OpenShard(saved, shard, key));
        ops->push_back({&key, &saved, &shard, file, &dst, *std::move(region)});
      }
    }
    ++key_index;
  }
  SortByFileAndOffset(index, ops);
  return absl::OkStatus();
}

// The read buffer holds 4 checksum blocks (see EntryReader); the index's
// block size must not make it exceed LoadOptions::buffer_bytes. Every rank
// reads the same index, so every rank fails alike.
absl::Status CheckBufferFits(const CheckpointReader& reader, const LoadOptions& options) {
  const int64_t block = reader.index().block_bytes;  // <= kMaxBlockBytes: validated
  if (options.buffer_bytes < 4 * block) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint index ", Quote(JoinPath(reader.dir(), kIndexFileName)), ": checksum block size ", block,
        " needs a read buffer of 4 blocks (", 4 * block, " bytes); LoadOptions::buffer_bytes is ",
        options.buffer_bytes));
  }
  return absl::OkStatus();
}

absl::Status Fail(const ReadOp& op, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("key ", Quote(*op.key), ": ", s.message()));
}

// Tells each file which byte ranges the pass over `ops` will read, in
// order, so that an object store fetches exactly those, several at once.
void HintReads(CheckpointReader& reader, const std::vector<ReadOp>& ops) {
  std::vector<std::pair<const File*, std::vector<ByteRange>>> per_file;
  for (const ReadOp& op : ops) {
    if (per_file.empty() || per_file.back().first != op.file) per_file.push_back({op.file, {}});
    const ByteRange span =
        EntryReader::SpanOf(reader.SourceOf(*op.tensor, *op.shard, op.file), op.region.offsets, op.region.sizes);
    if (span.second > span.first) per_file.back().second.push_back(span);
  }
  for (auto& [file, ranges] : per_file) file->WillRead(std::move(ranges));
}

// Reads and checks every block the copies will need; writes nothing.
absl::Status VerifyAll(CheckpointReader& reader, const std::vector<ReadOp>& ops, EntryReader& entries) {
  for (const ReadOp& op : ops) {
    absl::Status s = entries.Verify(reader.SourceOf(*op.tensor, *op.shard, op.file), op.region.offsets, op.region.sizes);
    if (!s.ok()) return Fail(op, s);
  }
  return absl::OkStatus();
}

// Entries at most this large are read together with their neighbours in
// the file (EntryReader::CopyAdjacent); larger ones go straight into their
// destinations.
constexpr int64_t kCoalescedEntryBytes = int64_t{256} << 10;

absl::Status CopyAll(CheckpointReader& reader, const std::vector<ReadOp>& ops, EntryReader& entries) {
  std::vector<EntryRun> runs;
  std::vector<const ReadOp*> run_ops;  // the op of each run
  auto flush = [&]() -> absl::Status {
    size_t failed = 0;
    absl::Status s = entries.CopyAdjacent(runs, &failed);
    if (!s.ok()) return Fail(*run_ops[failed], s);
    runs.clear();
    run_ops.clear();
    return absl::OkStatus();
  };
  for (const ReadOp& op : ops) {
    EntrySource src = reader.SourceOf(*op.tensor, *op.shard, op.file);
    char* whole = op.shard->end - op.shard->begin <= kCoalescedEntryBytes
                      ? EntryReader::WholeEntryDestination(src, op.dst->tensor, op.dst->offsets, op.region.offsets,
                                                           op.region.sizes)
                      : nullptr;
    const bool follows = !runs.empty() && runs.back().src.file == src.file && op.shard->begin == run_ops.back()->shard->end;
    if (!runs.empty() && (whole == nullptr || !follows)) SL_RETURN_IF_ERROR(flush());
    if (whole != nullptr) {
      runs.push_back({src, whole});
      run_ops.push_back(&op);
      continue;
    }
    absl::Status s = entries.Copy(src, op.dst->tensor, op.dst->offsets, op.region.offsets, op.region.sizes);
    if (!s.ok()) return Fail(op, s);
  }
  return runs.empty() ? absl::OkStatus() : flush();
}

}  // namespace

absl::Status LoadCheckpoint(StateDict& to_fill, const std::string& dir, c10d::ProcessGroup& pg,
                            const LoadOptions& options, LoadStats* stats) {
  const std::string what = absl::StrCat("checkpoint load from '", dir, "'");
  using Clock = std::chrono::steady_clock;
  const Clock::time_point started = Clock::now();
  Clock::duration data_time{};
  // Every rank-local phase runs through NoThrow: a rank that threw would skip
  // the next agreement and leave its peers waiting for it.

  // Step 1: read the index, open and check every file this rank needs, match
  // every key's shape and dtype, and plan the reads.
  absl::StatusOr<CheckpointReader> reader = absl::UnknownError("not opened");
  std::vector<Destination> destinations;
  std::vector<ReadOp> ops;
  ValueAssignments values;
  LoadStats keys;  // the key lists
  absl::Status mine = NoThrow([&]() -> absl::Status {
    reader = OpenCheckpointForRead(dir, StorageOrDefault(options.storage.get()));
    SL_RETURN_IF_ERROR(reader.status());
    SL_RETURN_IF_ERROR(CheckBufferFits(*reader, options));
    return Plan(to_fill, *reader, options, &destinations, &ops, &values, &keys);
  });

  // Step 2: no rank writes a byte unless every rank's plan is sound.
  SL_RETURN_IF_ERROR(Agree(pg, mine, what));

  ReadStats read_stats;
  EntryReader entries(options.buffer_bytes, &read_stats);
  auto report = [&] {
    if (stats == nullptr) return;
    stats->data_bytes_read = read_stats.bytes_read;
    stats->header_bytes_read = reader->header_bytes_read();
    stats->index_bytes_read = reader->index_bytes();
    stats->bytes_loaded = read_stats.bytes_copied;
    stats->files_opened = reader->files_opened();
    stats->pieces_read = static_cast<int64_t>(ops.size());
    stats->missing_keys = keys.missing_keys;
    stats->unexpected_keys = keys.unexpected_keys;
    stats->data_seconds = std::chrono::duration<double>(data_time).count();
    stats->metadata_seconds = std::chrono::duration<double>(Clock::now() - started - data_time).count();
  };

  // Step 3 (verify_before_write): every rank checks every block it will
  // read, and no rank writes unless all are sound.
  if (options.verify_before_write) {
    const Clock::time_point verify_started = Clock::now();
    absl::Status verified = NoThrow([&] {
      HintReads(*reader, ops);
      return VerifyAll(*reader, ops, entries);
    });
    data_time += Clock::now() - verify_started;
    const absl::Status s = Agree(pg, verified, what);
    if (!s.ok()) {
      report();
      return s;
    }
  }

  // Step 4: read into the destinations, checking every block.
  const Clock::time_point copy_started = Clock::now();
  mine = NoThrow([&] {
    HintReads(*reader, ops);
    return CopyAll(*reader, ops, entries);
  });
  data_time += Clock::now() - copy_started;

  // Step 5: every rank returns the same outcome; the values are set once
  // the tensors are in.
  const absl::Status done = Agree(pg, mine, what);
  if (done.ok()) {
    for (const auto& [key, value] : values) to_fill.SetValue(key, value->value);
  }
  report();
  return done;
}

bool HasCommittedCheckpoint(const std::string& dir, Storage* storage) {
  return StorageOrDefault(storage).Exists(JoinPath(dir, kIndexFileName));
}

}  // namespace shardlight::sharded::checkpoint
