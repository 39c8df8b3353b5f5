#include "sharded/checkpoint/checkpoint_reader.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/dtype_names.h"
#include "sharded/checkpoint/names.h"
#include "sharded/checkpoint/safetensors.h"

namespace shardlight::sharded::checkpoint {

absl::StatusOr<CheckpointReader> CheckpointReader::Open(const std::string& dir, Storage& storage) {
  const std::string path = JoinPath(dir, kIndexFileName);
  if (!storage.Exists(path)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint at '", dir, "': ", kIndexFileName, " is missing"));
  }
  auto text = ReadWholeFile(storage, path, kMaxIndexBytes);
  if (!text.ok()) return absl::Status(text.status().code(), absl::StrCat("checkpoint index: ", text.status().message()));
  auto index = ParseIndex(*text, path);
  if (!index.ok()) return index.status();
  CheckpointReader reader;
  reader.storage_ = &storage;
  reader.dir_ = dir;
  reader.index_bytes_ = static_cast<int64_t>(text->size());
  reader.index_ = std::make_unique<CheckpointIndex>(*std::move(index));
  reader.index_->Reindex();  // the move left the lookup tables pointing at the same positions
  for (const IndexTensor& t : reader.index_->tensors) {
    for (const IndexShard& s : t.shards) reader.shards_by_file_[s.file].emplace_back(&t, &s);
  }
  return reader;
}

absl::Status CheckpointReader::CheckFile(const File& file, const IndexFile& expected) {
  auto size = file.Size();
  if (!size.ok()) return size.status();
  const std::string name = Quote(expected.name);
  if (*size >= 8) {  // a shorter file is reported as truncated below
    auto n = ReadSafetensorsHeaderLength(file, *size, expected.name, &header_bytes_read_);
    if (!n.ok()) return n.status();
    if (*size == expected.bytes && *n != expected.header_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("data file ", name, ": header length ", *n,
                                                     " differs from the index's ", expected.header_bytes));
    }
  }
  if (*size < expected.bytes) {
    return absl::DataLossError(absl::StrCat("data file ", name, " is truncated: it has ", *size,
                                            " bytes; the index expects ", expected.bytes));
  }
  if (*size > expected.bytes) {
    return absl::DataLossError(absl::StrCat("data file ", name, " has ", *size, " bytes; the index expects ",
                                            expected.bytes, " (was it modified after the save?)"));
  }
  // Length and size match the index: the header costs what the save wrote.
  auto header = ReadSafetensorsHeader(file, *size, expected.name,
                                      std::min(expected.header_bytes, kMaxSafetensorsHeaderBytes), &header_bytes_read_);
  if (!header.ok()) return header.status();
  // One lookup per shard: SafetensorsHeader::Find is a scan, which over a
  // file of n entries would make this check O(n^2).
  std::unordered_map<std::string_view, const SafetensorsEntry*> by_name;
  by_name.reserve(header->entries.size());
  for (const SafetensorsEntry& e : header->entries) by_name.emplace(e.name, &e);
  for (const auto& [tensor, shard] : shards_by_file_[expected.name]) {
    const auto found = by_name.find(shard->entry);
    const SafetensorsEntry* e = found == by_name.end() ? nullptr : found->second;
    const std::string what = absl::StrCat("data file ", name, ": entry ", Quote(shard->entry));
    if (e == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, " is missing from the file's header"));
    if (e->dtype != DtypeName(tensor->dtype) || e->shape != shard->sizes ||
        header->data_start() + e->begin != shard->begin || header->data_start() + e->end != shard->end) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " disagrees with the index: header has ", e->dtype, " ", ShapeToString(e->shape), " at bytes [",
          header->data_start() + e->begin, ", ", header->data_start() + e->end, "), index has ",
          DtypeName(tensor->dtype), " ", ShapeToString(shard->sizes), " at [", shard->begin, ", ", shard->end, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<const File*> CheckpointReader::OpenDataFile(const std::string& name, const std::string& key) {
  auto it = files_.find(name);
  if (it != files_.end()) return it->second.get();
  const IndexFile* expected = index_->FindFile(name);
  const std::string prefix = absl::StrCat("key ", Quote(key), ": ");
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
  absl::Status s = CheckFile(*file, *expected);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
  auto owned = std::make_unique<File>(*std::move(file));
  const File* out = owned.get();
  files_.emplace(name, std::move(owned));
  return out;
}

EntrySource CheckpointReader::SourceOf(const IndexTensor& tensor, const IndexShard& shard, const File* file) const {
  EntrySource src;
  src.file = file;
  src.file_name = shard.file;
  src.entry_name = shard.entry;
  src.dtype = tensor.dtype;
  src.offsets = shard.offsets;
  src.sizes = shard.sizes;
  src.begin = shard.begin;
  src.block_bytes = index_->block_bytes;
  src.block_crcs = &shard.block_crcs;
  return src;
}

}  // namespace shardlight::sharded::checkpoint
