#include "sharded/checkpoint/format/checkpoint_reader.h"

#include <algorithm>
#include <set>
#include <string_view>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/format/dtype_names.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/checkpoint/format/safetensors.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {
namespace {

// Starts an error of CheckFile that already names its key.
constexpr char kOwnKeyMark[] = "\x01";

// The position of `shard` among `tensor`'s shards (it is one of them).
size_t ShardNumber(const IndexTensor& tensor, const IndexShard& shard) {
  return static_cast<size_t>(&shard - tensor.shards.data());
}

}  // namespace

absl::StatusOr<std::string> ReadIndexText(Storage& storage, const std::string& dir) {
  const std::string path = JoinPath(dir, kIndexFileName);
  auto error = [](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("checkpoint index: ", s.message()));
  };
  int64_t limit = kMaxIndexBytes;
  {
    auto file = File::OpenForRead(storage, path);
    if (!file.ok()) return error(file.status());
    auto size = file->Size();
    if (!size.ok()) return error(size.status());
    if (*size > kIndexBytesWithoutData) {
      // Larger indexes must be in proportion to the data they describe.
      auto names = storage.List(dir);
      if (!names.ok()) return error(names.status());
      int64_t data = 0;
      for (const std::string& name : *names) {
        if (!absl::StartsWith(name, "data-") || !absl::EndsWith(name, ".safetensors")) continue;
        auto f = File::OpenForRead(storage, JoinPath(dir, name));
        auto n = f.ok() ? f->Size() : absl::StatusOr<int64_t>(0);
        if (n.ok()) data += std::min(*n, kMaxIndexBytes);
      }
      const int64_t proportionate = kIndexBytesWithoutData + kIndexBytesPerDataByte * data;
      if (*size > std::min(limit, proportionate)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint index ", Quote(path), " has ", *size, " bytes, more than an index of a checkpoint with ",
            data, " bytes of data files can need (", kIndexBytesWithoutData, " + ", kIndexBytesPerDataByte,
            " per data byte); refused unread"));
      }
    }
  }
  auto text = ReadWholeFile(storage, path, limit);
  if (!text.ok()) return error(text.status());
  return text;
}

absl::StatusOr<CheckpointReader> CheckpointReader::Open(const std::string& dir, Storage& storage) {
  const std::string path = JoinPath(dir, kIndexFileName);
  if (!storage.Exists(path)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint at '", dir, "': ", kIndexFileName, " is missing"));
  }
  SL_ASSIGN_OR_RETURN(auto text, ReadIndexText(storage, dir));
  // ParseIndex in its two halves, the text freed between them: the decoded
  // index no longer points into it, and at many ranks and shards the text is
  // a third of what a rank holds at this peak.
  auto index = DecodeIndex(text, path);
  const int64_t index_bytes = static_cast<int64_t>(text.size());
  std::string().swap(text);
  SL_RETURN_IF_ERROR(index.status());
  SL_RETURN_IF_ERROR(ValidateIndex(*index, path));
  CheckpointReader reader;
  reader.storage_ = &storage;
  reader.dir_ = dir;
  reader.index_bytes_ = index_bytes;
  reader.index_ = std::make_unique<CheckpointIndex>(*std::move(index));  // its lookup tables move along
  reader.IndexShardsByFile();
  return reader;
}

CheckpointReader CheckpointReader::OpenForeign(const std::string& dir, Storage& storage, CheckpointIndex index,
                                               int64_t index_bytes, std::string format,
                                               std::unique_ptr<ForeignDataFiles> files) {
  CheckpointReader reader;
  reader.storage_ = &storage;
  reader.dir_ = dir;
  reader.index_bytes_ = index_bytes;
  reader.format_ = std::move(format);
  reader.foreign_ = std::move(files);
  reader.index_ = std::make_unique<CheckpointIndex>(std::move(index));
  reader.index_->Reindex();
  reader.IndexShardsByFile();
  return reader;
}

void CheckpointReader::IndexShardsByFile() {
  // Consecutive shards mostly share a file: a map lookup only when it
  // changes. In this format a shard's file is its rank's (ValidateIndex), so
  // a change of rank is the change of file, found in the index's list by
  // rank without a name built or compared; a foreign format's names are
  // compared.
  const std::string* last_name = nullptr;
  int last_rank = -1;
  std::vector<std::pair<const IndexTensor*, IndexShard*>>* last = nullptr;
  for (IndexTensor& t : index_->tensors) {
    for (IndexShard& s : t.shards) {
      const bool same = last != nullptr && (foreign_ == nullptr ? s.rank == last_rank
                                                                 : s.named_file() && *s.named_file() == *last_name);
      if (!same) {
        const IndexFile* listed = foreign_ == nullptr ? index_->FileOf(s) : nullptr;
        auto it = listed != nullptr ? shards_by_file_.try_emplace(listed->name).first
                                    : shards_by_file_.try_emplace(ShardFileName(*index_, s)).first;
        last_name = &it->first;
        last = &it->second;
        last_rank = s.rank;
      }
      last->emplace_back(&t, &s);
      if (foreign_ != nullptr) foreign_shards_.emplace(&s, std::make_pair(&s, false));
    }
  }
}

absl::Status CheckpointReader::CheckFile(const File& file, const IndexFile& expected) {
  SL_ASSIGN_OR_RETURN(const int64_t size, file.Size());
  const std::string name = Quote(expected.name);
  if (size >= 8) {  // a shorter file is reported as truncated below
    SL_ASSIGN_OR_RETURN(const auto n, ReadSafetensorsHeaderLength(file, size, expected.name, &header_bytes_read_));
    if (size == expected.bytes && n != expected.header_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("data file ", name, ": header length ", n,
                                                     " differs from the index's ", expected.header_bytes));
    }
  }
  if (size < expected.bytes) {
    return absl::DataLossError(absl::StrCat("data file ", name, " is truncated: it has ", size,
                                            " bytes; the index expects ", expected.bytes));
  }
  if (size > expected.bytes) {
    return absl::DataLossError(absl::StrCat("data file ", name, " has ", size, " bytes; the index expects ",
                                            expected.bytes, " (was it modified after the save?)"));
  }
  // Length and size match the index: the header costs what the save wrote.
  const auto& placed = shards_by_file_[expected.name];
  absl::StatusOr<SafetensorsHeader> header = absl::UnknownError("unread");
  if (expected.header_bytes <= kMaxSafetensorsHeaderBytes) {
    std::string text(static_cast<size_t>(expected.header_bytes), '\0');
    absl::Status s = file.ReadAt(text.data(), expected.header_bytes, 8);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("data file ", name, ": ", s.message()));
    header_bytes_read_ += expected.header_bytes;
    // A header spelled exactly as a save writes the index's entries holds
    // exactly them: no parse needed. Anything else is parsed and checked.
    if (HeaderIsAsSaved(text, placed, expected)) return absl::OkStatus();
    header = ParseSafetensorsHeader(text, size - 8 - expected.header_bytes, expected.name);
  } else {
    header = ReadSafetensorsHeader(file, size, expected.name, kMaxSafetensorsHeaderBytes, &header_bytes_read_);
  }
  SL_RETURN_IF_ERROR(header.status());
  // One lookup per shard: SafetensorsHeader::Find is a scan, which over a
  // file of n entries would make this check O(n^2).
  std::unordered_map<std::string_view, const SafetensorsEntry*> by_name;
  by_name.reserve(header->entries.size());
  for (const SafetensorsEntry& e : header->entries) by_name.emplace(e.name, &e);
  std::string scratch;
  for (const auto& [tensor, shard] : shards_by_file_[expected.name]) {
    const absl::string_view entry = ShardEntryName(*tensor, ShardNumber(*tensor, *shard), &scratch);
    const auto found = by_name.find(std::string_view(entry.data(), entry.size()));
    const SafetensorsEntry* e = found == by_name.end() ? nullptr : found->second;
    const std::string what =
        absl::StrCat(kOwnKeyMark, "key ", Quote(tensor->key), ": data file ", name, ": entry ", Quote(entry));
    if (e == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, " is missing from the file's header"));
    if (e->dtype != DtypeName(tensor->dtype) || !SameDims(e->shape, shard->sizes) ||
        header->data_start() + e->begin != shard->begin || header->data_start() + e->end != shard->end) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " disagrees with the index: header has ", e->dtype, " ", ShapeToString(e->shape), " at bytes [",
          header->data_start() + e->begin, ", ", header->data_start() + e->end, "), index has ",
          DtypeName(tensor->dtype), " ", ShapeToString(shard->sizes), " at [", shard->begin, ", ", shard->end, ")"));
    }
  }
  // Every entry is accounted for: names are unique on both sides, so equal
  // counts mean the file holds exactly what the index places in it.
  if (header->entries.size() != placed.size()) {
    std::set<std::string> listed;
    for (const auto& [tensor, shard] : placed) listed.insert(ShardEntryName(*tensor, ShardNumber(*tensor, *shard)));
    std::string extra;
    for (const SafetensorsEntry& e : header->entries) {
      if (listed.count(e.name) == 0) {
        extra = e.name;
        break;
      }
    }
    return absl::InvalidArgumentError(absl::StrCat("data file ", name, " holds ", header->entries.size(),
                                                   " entries; the index lists ", placed.size(), " (entry ",
                                                   Quote(extra), " is not in the index)"));
  }
  return CheckFileMetadata(header->metadata, expected);
}

std::map<std::string, std::string> CheckpointReader::ExpectedMetadata(const IndexFile& expected) const {
  return {{"format", "shardlight.checkpoint"},
          {"version", std::to_string(index_->version)},
          {"rank", std::to_string(expected.rank)}};
}

bool CheckpointReader::HeaderIsAsSaved(absl::string_view text,
                                       const std::vector<std::pair<const IndexTensor*, IndexShard*>>& placed,
                                       const IndexFile& expected) const {
  const int64_t data_start = 8 + expected.header_bytes;
  SafetensorsHeaderWriter check(text, ExpectedMetadata(expected));
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::string dtype_name, scratch;
  for (const auto& [tensor, shard] : placed) {
    if (tensor->dtype != dtype) {
      dtype = tensor->dtype;
      dtype_name = DtypeName(dtype);
    }
    check.Add(ShardEntryName(*tensor, ShardNumber(*tensor, *shard), &scratch), dtype_name, shard->sizes,
              shard->begin - data_start, shard->end - data_start);
  }
  return std::move(check).Matches();
}

absl::Status CheckpointReader::CheckFileMetadata(const std::map<std::string, std::string>& metadata,
                                                 const IndexFile& expected) {
  const std::map<std::string, std::string> want = ExpectedMetadata(expected);
  for (const auto& [field, value] : want) {
    auto it = metadata.find(field);
    if (it == metadata.end() || it->second != value) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data file ", Quote(expected.name), ": __metadata__ ", field, " is ",
          it == metadata.end() ? std::string("missing") : Quote(it->second), "; expected ", Quote(value)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<const File*> CheckpointReader::OpenDataFile(const std::string& name, const std::string& key) {
  // Consecutive calls mostly ask for the same file: one compare, no lookup.
  if (last_file_ != nullptr && name == last_file_->first) return last_file_->second.get();
  auto it = files_.find(name);
  if (it != files_.end()) {
    last_file_ = &*it;
    return it->second.get();
  }
  const IndexFile* expected = index_->FindFile(name);
  const std::string prefix = key.empty() ? "" : absl::StrCat("key ", Quote(key), ": ");
  if (expected == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "data file ", Quote(name), " is not in the index"));
  }
  const std::string path = JoinPath(dir_, name);
  auto file = File::OpenForRead(*storage_, path);
  if (!file.ok()) {
    return absl::Status(file.status().code(), absl::StrCat(prefix, "data file ", Quote(name),
                                                           absl::IsNotFound(file.status()) ? " is missing: " : ": ",
                                                           file.status().message()));
  }
  absl::Status s = foreign_ != nullptr ? absl::OkStatus() : CheckFile(*file, *expected);
  if (!s.ok()) {
    // An entry's error names the key at fault; a file's, the key that needed it.
    if (absl::StartsWith(s.message(), kOwnKeyMark)) {
      return absl::Status(s.code(), s.message().substr(std::string_view(kOwnKeyMark).size()));
    }
    return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
  }
  auto owned = std::make_unique<File>(*std::move(file));
  const File* out = owned.get();
  last_file_ = &*files_.emplace(name, std::move(owned)).first;
  if (foreign_ == nullptr) {
    // Ranks are below the world size (<= 2^20, ValidateIndex): bounded.
    const size_t r = static_cast<size_t>(expected->rank);
    if (file_of_rank_.size() <= r) file_of_rank_.resize(r + 1, nullptr);
    file_of_rank_[r] = out;
  }
  return out;
}

absl::StatusOr<const File*> CheckpointReader::OpenShard(const IndexTensor& tensor, const IndexShard& shard,
                                                         const std::string& key) {
  // This format: a shard is in its rank's file (ValidateIndex), found once
  // open without a name compared or looked up.
  if (foreign_ == nullptr && static_cast<size_t>(shard.rank) < file_of_rank_.size() &&
      file_of_rank_[static_cast<size_t>(shard.rank)] != nullptr) {
    return file_of_rank_[static_cast<size_t>(shard.rank)];
  }
  std::string derived;  // this format's name, built only until the file is open
  const std::string& file_name = shard.named_file() ? *shard.named_file() : (derived = ShardFileName(*index_, shard));
  SL_ASSIGN_OR_RETURN(const File* file, OpenDataFile(file_name, key));
  if (foreign_ == nullptr) return file;
  const auto it = foreign_shards_.find(&shard);
  if (it == foreign_shards_.end()) {
    return absl::InternalError(absl::StrCat("key ", Quote(tensor.key), ": a shard of file ", Quote(file_name),
                                            " that is not this reader's index's"));
  }
  auto& [owned, located] = it->second;
  if (!located) {
    SL_RETURN_IF_ERROR(foreign_->Locate(*file, file_name, tensor, owned));
    located = true;
  }
  return file;
}

absl::Status CheckpointReader::CheckEveryFile() {
  for (const IndexFile& f : index_->files) {
    SL_RETURN_IF_ERROR(OpenDataFile(f.name, "").status());
    if (foreign_ == nullptr) continue;
    for (const auto& [tensor, shard] : shards_by_file_[f.name]) {
      SL_RETURN_IF_ERROR(OpenShard(*tensor, *shard, "").status());
    }
  }
  return absl::OkStatus();
}

EntrySource CheckpointReader::SourceOf(const IndexTensor& tensor, const IndexShard& shard, const File* file) const {
  EntrySource src;
  src.file = file;
  if (shard.named_file()) {
    src.file_name = *shard.named_file();
  } else if (const IndexFile* f = index_->FileOf(shard); f != nullptr) {
    src.file_name = f->name;
  }
  if (shard.named_entry()) {
    src.entry_name = *shard.named_entry();
  } else {
    src.entry_name = tensor.key;
    if (tensor.sharded) src.entry_shard = ShardNumber(tensor, shard);
  }
  src.dtype = tensor.dtype;
  src.offsets = shard.offsets;
  src.sizes = shard.sizes;
  src.dim_order = shard.dim_order();
  src.begin = shard.begin;
  src.block_bytes = index_->block_bytes;
  src.block_crcs = foreign_ != nullptr ? nullptr : shard.block_crcs.data();
  return src;
}

}  // namespace shardlight::sharded::checkpoint
