// Placement: where one shard lives, "rank:R/cpu" or "rank:R/cuda:N".
//
// The rank is the shard's owner in the process group; the device is kept so a
// CUDA run needs no format change. ParsePlacement returns InvalidArgument
// quoting the malformed string.
#ifndef SHARDLIGHT_SHARDED_PLACEMENT_H_
#define SHARDLIGHT_SHARDED_PLACEMENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardlight::sharded {

enum class DeviceKind { kCpu, kCuda };

struct Placement {
  int rank = 0;
  DeviceKind device = DeviceKind::kCpu;
  int device_index = 0;  // meaningful for kCuda only

  static Placement Cpu(int rank) { return Placement{rank, DeviceKind::kCpu, 0}; }
  static Placement Cuda(int rank, int index) { return Placement{rank, DeviceKind::kCuda, index}; }

  // "rank:R/cpu" or "rank:R/cuda:N".
  std::string ToString() const;
  // "cpu" or "cuda:N", as c10::Device spells it.
  std::string DeviceString() const;

  friend bool operator==(const Placement& a, const Placement& b) {
    return a.rank == b.rank && a.device == b.device &&
           (a.device == DeviceKind::kCpu || a.device_index == b.device_index);
  }
  friend bool operator!=(const Placement& a, const Placement& b) { return !(a == b); }
};

// Parses "rank:R/cpu" or "rank:R/cuda:N" (R, N non-negative decimal integers).
absl::StatusOr<Placement> ParsePlacement(absl::string_view text);

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_PLACEMENT_H_
