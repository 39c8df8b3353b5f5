// Test support for checkpoint tests on the simulated cluster: fresh
// directories, state dicts described by (key, sizes, dtype, spec) and filled
// with per-key reference values, and bit-exact checks of a loaded dict.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_CHECKPOINT_TESTING_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_CHECKPOINT_TESTING_H_

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sharded/checkpoint/storage/storage.h"
#include "sharded/sharded_tensor.h"
#include "sharded/sharding_spec.h"
#include "sharded/state_dict.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::checkpoint::testing {

struct TensorSpec {
  std::string key;
  std::vector<int64_t> sizes;
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::optional<ShardingSpec> spec;  // std::nullopt: a dense tensor
};

// Collective timeout short enough that a hang fails the test quickly.
simulate::ClusterOptions Options();

// $TEST_TMPDIR/name, created empty.
std::string FreshDir(const std::string& name);

// The bytes of the file at `path` ("" when it cannot be read).
std::string FileContents(const std::string& path);

// The ways an entry (an index.json, a `latest`) can be there and still not
// be readable: what a resume must report, never take for "no checkpoint".
enum class BrokenEntry { kDanglingLink, kLinkLoop, kDirectory, kFifo, kNotAnIndex, kUnreadable };
inline constexpr BrokenEntry kBrokenEntries[] = {BrokenEntry::kDanglingLink, BrokenEntry::kLinkLoop,
                                                 BrokenEntry::kDirectory,    BrokenEntry::kFifo,
                                                 BrokenEntry::kNotAnIndex,   BrokenEntry::kUnreadable};
// "dangling_link", "link_loop", ...: a test-name part.
std::string BrokenEntryName(BrokenEntry kind);

// Replaces the file at `path` by a broken entry of `kind` (kNotAnIndex: a
// JSON file that is no checkpoint index; kUnreadable: the file stays, and
// the storage UnreadableThrough(path) returns refuses to open it, as EACCES
// would for a user other than root). Returns the words a load's error must
// hold to say why it failed.
std::string BreakEntry(const std::string& path, BrokenEntry kind);

// POSIX storage on which opening `path` for reading fails with
// PermissionDenied ("cannot open '<path>': Permission denied").
std::shared_ptr<Storage> UnreadableThrough(const std::string& path);

// Every entry under `dir`, recursively and without following links:
// relative path -> its bytes, "link to <target>", "directory" or "fifo".
// Equal snapshots: nothing was written, replaced or removed.
std::map<std::string, std::string> DirectorySnapshot(const std::string& dir);

// The global values of `key`: every element distinct (within the dtype's
// range) and different for different keys and salts.
at::Tensor KeyedReference(const std::string& key, const std::vector<int64_t>& sizes, c10::ScalarType dtype, int salt);

// A small model for `world` ranks with uneven shards, and empty ones at
// W >= 3 (37 rows over the ranks; "empty" has 2 rows), mixed dtypes, a
// dense tensor and a 0-d one.
std::vector<TensorSpec> UnevenModel(int world);

// This rank's state dict: reference values (salt >= 0) or every element set
// to a sentinel (salt < 0) for a dict to load into.
absl::StatusOr<StateDict> MakeState(const std::vector<TensorSpec>& specs, int salt,
                                    const c10::intrusive_ptr<c10d::ProcessGroup>& pg);

// OK when every tensor of `state` holds exactly (bit for bit) the reference
// values of `salt`; otherwise an error naming the first key that differs.
absl::Status CheckState(const StateDict& state, int salt);

// Whether every element of every tensor of `state` is still the sentinel.
bool AllSentinel(const StateDict& state);

// Byte-for-byte equality of two tensors' values (shapes and dtypes included).
bool BitEqual(const at::Tensor& a, const at::Tensor& b);

}  // namespace shardlight::sharded::checkpoint::testing

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_CHECKPOINT_TESTING_H_
