// SimulatedCluster: runs one function on W thread-ranks of this process.
//
// Each rank gets its own c10d::ProcessGroupGloo over one shared in-memory
// c10d::HashStore, under a fresh key prefix per Run, so multi-rank code (the
// same code that runs multi-process or on NCCL) is tested deterministically in
// one process. A rank fails by throwing or by returning a non-OK status; Run
// returns the first root cause with the rank that raised it (a peer's
// Unavailable or DeadlineExceeded -- it only lost its connection or timed out
// -- is returned when no rank failed otherwise). The failed
// rank's process group is destroyed at once, so peers blocked in a collective
// with it fail within milliseconds instead of waiting for the Gloo timeout, and
// every other hang is bounded by the collective timeout. The cluster is
// reusable after a failed run. Constructing one sets SIGPIPE to ignored for
// the process (a write to a closed peer must fail, not kill the process).
#ifndef SHARDLIGHT_SIMULATE_CORE_SIMULATED_CLUSTER_H_
#define SHARDLIGHT_SIMULATE_CORE_SIMULATED_CLUSTER_H_

#include <chrono>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharded/process_groups.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace shardlight::simulate {

struct ClusterOptions {
  // Bound on every collective and on the store rendezvous. Keep it short in
  // tests: a rank that never arrives turns into an error after this long.
  std::chrono::milliseconds collective_timeout{std::chrono::seconds(30)};
  // Gloo worker threads per rank's process group.
  int threads_per_rank = 1;
};

// What a rank's function sees.
struct RankContext {
  int rank = 0;
  int world_size = 1;
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  // This run's store (fresh prefix per Run), for sub-groups such as a device
  // mesh's rows and columns.
  c10::intrusive_ptr<c10d::Store> store;
  // Further groups over the same ranks (same store, own prefix), e.g. an
  // AsyncCheckpointer's: groups->Make("name") is collective.
  std::shared_ptr<const sharded::GroupFactory> groups;
};

// The rank that raised the error Run returned, if the error came from a rank.
std::optional<int> FailedRank(const absl::Status& status);

class SimulatedCluster {
 public:
  // world_size must be in [1, kMaxWorldSize]; otherwise Run returns
  // InvalidArgument.
  static constexpr int kMaxWorldSize = 64;
  explicit SimulatedCluster(int world_size, ClusterOptions options = {});
  ~SimulatedCluster();
  SimulatedCluster(const SimulatedCluster&) = delete;
  SimulatedCluster& operator=(const SimulatedCluster&) = delete;

  int world_size() const { return world_size_; }
  const ClusterOptions& options() const { return options_; }

  // Runs `fn(RankContext&)` on every rank and waits for all of them.
  // - fn returns void or absl::Status: Run returns absl::Status.
  // - fn returns T or absl::StatusOr<T>: Run returns
  //   absl::StatusOr<std::vector<T>> indexed by rank.
  // On failure the status is the first failing rank's error, its message
  // prefixed with "rank R: " (see FailedRank).
  template <typename F>
  auto Run(F&& fn);

  // The type-erased core: body(ctx) for every rank.
  absl::Status RunRanks(const std::function<absl::Status(RankContext&)>& body);

 private:
  int world_size_;
  ClusterOptions options_;
  int runs_ = 0;
  struct Shared;
  std::unique_ptr<Shared> shared_;
};

namespace internal {
template <typename R>
struct IsStatusOr : std::false_type {
  using type = R;
};
template <typename T>
struct IsStatusOr<absl::StatusOr<T>> : std::true_type {
  using type = T;
};
}  // namespace internal

template <typename F>
auto SimulatedCluster::Run(F&& fn) {
  using R = std::invoke_result_t<F&, RankContext&>;
  if constexpr (std::is_void_v<R>) {
    return RunRanks([&](RankContext& ctx) {
      fn(ctx);
      return absl::OkStatus();
    });
  } else if constexpr (std::is_same_v<R, absl::Status>) {
    return RunRanks([&](RankContext& ctx) { return fn(ctx); });
  } else {
    using T = typename internal::IsStatusOr<R>::type;
    std::vector<std::optional<T>> slots(world_size_);
    absl::Status status = RunRanks([&](RankContext& ctx) -> absl::Status {
      if constexpr (internal::IsStatusOr<R>::value) {
        R result = fn(ctx);
        if (!result.ok()) return result.status();
        slots[ctx.rank].emplace(*std::move(result));
      } else {
        slots[ctx.rank].emplace(fn(ctx));
      }
      return absl::OkStatus();
    });
    absl::StatusOr<std::vector<T>> out;
    if (!status.ok()) {
      out = status;
      return out;
    }
    std::vector<T> values;
    values.reserve(slots.size());
    for (auto& slot : slots) values.push_back(std::move(*slot));
    out = std::move(values);
    return out;
  }
}

}  // namespace shardlight::simulate

#endif  // SHARDLIGHT_SIMULATE_CORE_SIMULATED_CLUSTER_H_
