// ValidateIndexNaming: the names FORMAT.md fixes, checked so that an index
// edited by hand (or by an attacker) cannot point a shard at another shard's
// entry or at a file of another save.
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "sharded/checkpoint/format/file_names.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/format/names.h"

namespace shardlight::sharded::checkpoint {
namespace {

bool IsGeneration(const std::string& g) {
  if (g.size() != 16) return false;
  for (char c : g) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Whether `entry` is "<key>/shard-<k>" (sharded) or "<key>", without
// building either.
bool IsEntryName(absl::string_view entry, const std::string& key, bool sharded, size_t k) {
  if (!sharded) return entry == key;
  return absl::ConsumePrefix(&entry, key) && absl::ConsumePrefix(&entry, "/shard-") &&
         entry == absl::AlphaNum(k).Piece();
}

}  // namespace

absl::Status ValidateIndexNaming(const CheckpointIndex& index, const std::string& display_name) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint index ", Quote(display_name), ": ", what));
  };
  if (!IsGeneration(index.generation)) {
    return bad(absl::StrCat("generation ", Quote(index.generation), " is not 16 lowercase hex digits"));
  }
  for (const IndexFile& f : index.files) {
    const std::string want = DataFileName(index.generation, f.rank);
    if (f.name != want) {
      return bad(absl::StrCat("file ", Quote(f.name), " of rank ", f.rank, " is not named for generation ",
                              index.generation, " (expected ", Quote(want), ")"));
    }
  }
  absl::flat_hash_map<int, std::string> file_of_rank;  // DataFileName, made once per rank
  for (const IndexTensor& t : index.tensors) {
    for (size_t k = 0; k < t.shards.size(); ++k) {
      const IndexShard& s = t.shards[k];
      if (!IsEntryName(s.entry, t.key, t.sharded, k)) {
        const std::string want = t.sharded ? absl::StrCat(t.key, "/shard-", k) : t.key;
        return bad(absl::StrCat("key ", Quote(t.key), ": shard ", k, " names entry ", Quote(s.entry), "; expected ",
                                Quote(want)));
      }
      auto [name, added] = file_of_rank.try_emplace(s.rank);
      if (added) name->second = DataFileName(index.generation, s.rank);
      if (s.file != name->second) {
        return bad(absl::StrCat("key ", Quote(t.key), ": shard ", k, " of rank ", s.rank, " is in file ",
                                Quote(s.file), ", not in its rank's file"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace shardlight::sharded::checkpoint
