// ValidateIndexNaming: the names FORMAT.md fixes, checked so that an index
// edited by hand (or by an attacker) cannot point a shard at another shard's
// entry or at a file of another save.
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "sharded/checkpoint/format/file_names.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/format/index_naming.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {
namespace {

bool IsGeneration(const std::string& g) {
  if (g.size() != 16) return false;
  for (char c : g) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::Status Bad(const std::string& display_name, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("checkpoint index ", Quote(display_name), ": ", what));
}

}  // namespace

namespace internal {

absl::Status ValidateFileNaming(const CheckpointIndex& index, const std::string& display_name) {
  if (!IsGeneration(index.generation)) {
    return Bad(display_name, absl::StrCat("generation ", Quote(index.generation), " is not 16 lowercase hex digits"));
  }
  for (const IndexFile& f : index.files) {
    const std::string want = DataFileName(index.generation, f.rank);
    if (f.name != want) {
      return Bad(display_name, absl::StrCat("file ", Quote(f.name), " of rank ", f.rank,
                                            " is not named for generation ", index.generation, " (expected ",
                                            Quote(want), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateShardNaming(const IndexTensor& t, size_t k, const IndexFile& file,
                                 const std::string& display_name) {
  const IndexShard& s = t.shards[k];
  if (s.named_entry() && !IsDerivedEntryName(*s.named_entry(), t.key, t.sharded, k)) {
    const std::string want = t.sharded ? absl::StrCat(t.key, "/shard-", k) : t.key;
    return Bad(display_name, absl::StrCat("key ", Quote(t.key), ": shard ", k, " names entry ", Quote(*s.named_entry()),
                                          "; expected ", Quote(want)));
  }
  if (file.rank != s.rank) {
    return Bad(display_name, absl::StrCat("key ", Quote(t.key), ": shard ", k, " of rank ", s.rank, " is in file ",
                                          Quote(file.name), ", not in its rank's file"));
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::Status ValidateIndexNaming(const CheckpointIndex& index, const std::string& display_name) {
  SL_RETURN_IF_ERROR(internal::ValidateFileNaming(index, display_name));
  absl::flat_hash_map<absl::string_view, const IndexFile*> files;  // views into `index`
  for (const IndexFile& f : index.files) files.emplace(f.name, &f);
  for (const IndexTensor& t : index.tensors) {
    for (size_t k = 0; k < t.shards.size(); ++k) {
      const IndexShard& s = t.shards[k];
      const std::string name = ShardFileName(index, s);
      const auto it = files.find(name);
      if (it == files.end()) {
        return Bad(display_name, absl::StrCat("key ", Quote(t.key), ": shard ", k, " of rank ", s.rank,
                                              " is in file ", Quote(name), ", not in its rank's file"));
      }
      SL_RETURN_IF_ERROR(internal::ValidateShardNaming(t, k, *it->second, display_name));
    }
  }
  return absl::OkStatus();
}

}  // namespace shardlight::sharded::checkpoint
