#include "simulate/core/simulated_cluster.h"

#include <signal.h>
#include <sys/resource.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sharded/agreement.h"
#include "sharded/no_throw.h"
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "sharded/process_groups.h"
#include "sharded/rank_monitor.h"

namespace shardlight::simulate {
namespace {

constexpr char kRankPayload[] = "shardlight.dev/rank";
// Thread-ranks share one process: a short heartbeat keeps explanations quick.
constexpr std::chrono::milliseconds kHeartbeat{50};

// A full mesh of W ranks holds about W*(W-1) sockets in this one process.
void RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

std::optional<int> FailedRank(const absl::Status& status) {
  auto payload = status.GetPayload(kRankPayload);
  int rank = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &rank)) return std::nullopt;
  return rank;
}

struct SimulatedCluster::Shared {
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();
  std::shared_ptr<gloo::transport::Device> device;
};

SimulatedCluster::SimulatedCluster(int world_size, ClusterOptions options)
    : world_size_(world_size), options_(options), shared_(std::make_unique<Shared>()) {
  RaiseOpenFileLimit();
  // Gloo's TCP pairs can write to a peer that has just closed (a failed
  // rank's group is torn down on purpose); without this the whole process
  // dies of SIGPIPE instead of the write returning EPIPE. Python ignores
  // SIGPIPE for PyTorch; a C++ process must do it itself.
  signal(SIGPIPE, SIG_IGN);
}

SimulatedCluster::~SimulatedCluster() = default;

absl::Status SimulatedCluster::RunRanks(const std::function<absl::Status(RankContext&)>& body) {
  if (world_size_ < 1 || world_size_ > kMaxWorldSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size ", world_size_, " is outside [1, ", kMaxWorldSize, "]"));
  }
  if (options_.collective_timeout <= std::chrono::milliseconds(0)) {
    return absl::InvalidArgumentError("collective_timeout must be positive");
  }
  if (!shared_->device) {
    // One loopback device serves every rank; each process group still opens
    // its own pairs to every peer.
    shared_->device = c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  shared_->store->setTimeout(options_.collective_timeout);
  // A fresh prefix per run: keys of an earlier (possibly failed) run never
  // collide with this one's rendezvous.
  auto run_store =
      c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("run", runs_++, "/"), shared_->store);

  // The reported failure is the first root cause: a peer that merely lost
  // its connection or timed out (Unavailable, DeadlineExceeded) is reported
  // only when no rank failed for a reason of its own.
  // When ranks return one agreed error, the rank it names as failing is the
  // one reported, whichever rank returned first.
  std::mutex mu;
  absl::Status first_failure, first_symptom;  // guarded by mu
  int first_failure_rank = -1;
  std::vector<absl::Status> failures(static_cast<size_t>(world_size_));  // guarded by mu
  auto prefixed = [](int rank, const absl::Status& status) {
    absl::Status out(status.code(), absl::StrCat("rank ", rank, ": ", status.message()));
    status.ForEachPayload([&](absl::string_view url, const absl::Cord& value) { out.SetPayload(url, value); });
    out.SetPayload(kRankPayload, absl::Cord(std::to_string(rank)));
    return out;
  };
  auto record_failure = [&](int rank, absl::Status status) {
    const bool symptom = status.code() == absl::StatusCode::kUnavailable ||
                         status.code() == absl::StatusCode::kDeadlineExceeded;
    std::lock_guard<std::mutex> lock(mu);
    failures[static_cast<size_t>(rank)] = status;
    absl::Status& slot = symptom ? first_symptom : first_failure;
    if (!slot.ok()) return;
    slot = prefixed(rank, status);
    if (!symptom) first_failure_rank = rank;
  };

  auto rank_main = [&](int rank) {
    RankContext ctx;
    std::unique_ptr<sharded::RankMonitor::Attachment> monitor;
    ctx.rank = rank;
    ctx.world_size = world_size_;
    ctx.store = c10::make_intrusive<c10d::PrefixStore>("user/", run_store);
    absl::Status status = sharded::NoThrow([&]() -> absl::Status {
      sharded::GlooGroupOptions options;
      options.timeout = options_.collective_timeout;
      options.device = shared_->device;
      options.threads = options_.threads_per_rank;
      auto pg = sharded::MakeGlooGroup(c10::make_intrusive<c10d::PrefixStore>("pg/", run_store), rank, world_size_,
                                       options);
      if (!pg.ok()) return pg.status();
      ctx.pg = *pg;
      ctx.groups = std::make_shared<const sharded::GroupFactory>(run_store, rank, world_size_, options);
      // Names the ranks behind a failed collective (see rank_monitor.h).
      monitor = sharded::RankMonitor::Attach(
          *ctx.pg, std::make_shared<sharded::RankMonitor>(c10::make_intrusive<c10d::PrefixStore>("monitor/", run_store),
                                                          rank, world_size_, sharded::RankMonitorOptions{kHeartbeat, {}}));
      // Gloo finishes connecting pairs lazily; without this barrier a rank
      // whose body needs no communication can close its group while a peer
      // is still handshaking ("Connection closed by peer").
      ctx.pg->barrier()->wait();
      return body(ctx);
    });
    if (!status.ok()) record_failure(rank, std::move(status));
    // Dropping the group closes this rank's connections: peers still waiting
    // on it fail now rather than at the collective timeout; its heartbeat stops.
    monitor.reset();
    ctx.groups.reset();
    ctx.pg.reset();
    ctx.store.reset();
  };

  std::vector<std::thread> threads;
  threads.reserve(world_size_);
  for (int r = 0; r < world_size_; ++r) threads.emplace_back(rank_main, r);
  for (auto& t : threads) t.join();
  if (first_failure.ok()) return first_symptom;
  const std::optional<int> named = sharded::AgreedFailingRank(failures[static_cast<size_t>(first_failure_rank)]);
  if (named && *named != first_failure_rank && *named >= 0 && *named < world_size_ &&
      !failures[static_cast<size_t>(*named)].ok()) {
    return prefixed(*named, failures[static_cast<size_t>(*named)]);
  }
  return first_failure;
}

}  // namespace shardlight::simulate
