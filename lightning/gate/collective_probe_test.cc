#include "lightning/gate/collective_probe.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "sharded/compat/c10d_compat.h"
#include "sharded/compat/c10d_testing.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning {
namespace {

using ::shardlight::simulate::ClusterOptions;
using ::shardlight::simulate::FailedRank;
using ::shardlight::simulate::RankContext;
using ::shardlight::simulate::SimulatedCluster;
using ::testing::HasSubstr;

constexpr std::chrono::milliseconds kProbeTimeout{10000};

ClusterOptions FastOptions() {
  ClusterOptions options;
  options.collective_timeout = std::chrono::seconds(10);
  return options;
}

// A real c10d::ProcessGroup that forwards to the rank's Gloo group, except
// that it can refuse one collective (as a backend without it does) or corrupt
// the result of one (adds 1 to the first output tensor once it is done).
class FaultyProcessGroup : public c10d::ProcessGroup {
 public:
  FaultyProcessGroup(c10::intrusive_ptr<c10d::ProcessGroup> inner, std::string refuse, std::string corrupt)
      : ProcessGroup(inner->getRank(), inner->getSize()),
        inner_(std::move(inner)),
        refuse_(std::move(refuse)),
        corrupt_(std::move(corrupt)) {}

  const std::string getBackendName() const override { return "faulty-gloo"; }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
                                           const c10d::AllgatherOptions& opts) override {
    Refuse("allgather");
    return Corrupt("allgather", inner_->allgather(out, in, opts), out[0][0]);
  }
  // alltoall_base in 1.x, all_to_all_single in 2.x (sharded/compat).
  c10::intrusive_ptr<c10d::Work> SHARDLIGHT_C10D_ALL_TO_ALL_SINGLE(at::Tensor& out, at::Tensor& in,
                                                                   std::vector<int64_t>& out_splits,
                                                                   std::vector<int64_t>& in_splits,
                                                                   const c10d::AllToAllOptions& opts) override {
    Refuse("alltoall_base");
    return Corrupt("alltoall_base", sharded::compat::AllToAllSingle(*inner_, out, in, out_splits, in_splits), out);
  }
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    Refuse("broadcast");
    return Corrupt("broadcast", inner_->broadcast(tensors, opts), tensors[0]);
  }
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
                                        const c10d::GatherOptions& opts) override {
    Refuse("gather");
    auto work = inner_->gather(out, in, opts);
    return out.empty() ? work : Corrupt("gather", work, out[0][0]);  // only the root has output
  }
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& out, std::vector<std::vector<at::Tensor>>& in,
                                         const c10d::ScatterOptions& opts) override {
    Refuse("scatter");
    return Corrupt("scatter", inner_->scatter(out, in, opts), out[0]);
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    Refuse("barrier");
    return inner_->barrier(opts);
  }

 private:
  void Refuse(const char* collective) const {
    TORCH_CHECK(refuse_ != collective, "ProcessGroup ", getBackendName(), " does not support ", collective);
  }
  c10::intrusive_ptr<c10d::Work> Corrupt(const char* collective, c10::intrusive_ptr<c10d::Work> work,
                                         at::Tensor output) const {
    if (corrupt_ == collective) {
      work->wait();
      output.add_(1);
    }
    return work;
  }

  c10::intrusive_ptr<c10d::ProcessGroup> inner_;
  std::string refuse_;
  std::string corrupt_;
};

// Each rank's probe result as text, so every rank's outcome can be checked.
std::vector<std::string> ProbeThroughFaultyGroup(int world_size, const std::string& refuse,
                                                 const std::string& corrupt) {
  SimulatedCluster cluster(world_size, FastOptions());
  auto statuses = cluster.Run([&](RankContext& ctx) {
    auto faulty = c10::make_intrusive<FaultyProcessGroup>(ctx.pg, refuse, corrupt);
    return ProbeCollectives(*faulty, kProbeTimeout).ToString();
  });
  EXPECT_TRUE(statuses.ok()) << statuses.status();
  return statuses.ok() ? *statuses : std::vector<std::string>(world_size);
}

class ProbeTest : public ::testing::TestWithParam<int> {};

TEST_P(ProbeTest, EveryCollectiveWorksOnGloo) {
  SimulatedCluster cluster(GetParam(), FastOptions());
  absl::Status status = cluster.Run([](RankContext& ctx) { return ProbeCollectives(*ctx.pg, kProbeTimeout); });
  EXPECT_TRUE(status.ok()) << status;
}

// Every rank refuses alltoall_base, as a backend that lacks it does.
TEST_P(ProbeTest, NamesTheCollectiveTheBackendRefuses) {
  for (const std::string& s : ProbeThroughFaultyGroup(GetParam(), "alltoall_base", "")) {
    EXPECT_EQ(s,
              "FAILED_PRECONDITION: collective probe: alltoall_base failed: LibTorch error: "
              "ProcessGroup faulty-gloo does not support alltoall_base");
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ProbeTest, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return absl::StrCat("W", info.param); });

class ProbeFaultTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ProbeFaultTest, RefusedCollectiveIsNamedOnEveryRank) {
  const std::string c = GetParam();
  for (const std::string& s : ProbeThroughFaultyGroup(3, c, "")) {
    EXPECT_EQ(s, absl::StrCat("FAILED_PRECONDITION: collective probe: ", c,
                              " failed: LibTorch error: ProcessGroup faulty-gloo does not support ", c));
  }
}

INSTANTIATE_TEST_SUITE_P(Collectives, ProbeFaultTest,
                         ::testing::Values("allgather", "alltoall_base", "broadcast", "gather", "scatter",
                                           "barrier"));

class ProbeCorruptionTest : public ::testing::TestWithParam<std::string> {};

// Rank 0 sees every corrupted output (it is gather's root).
TEST_P(ProbeCorruptionTest, WrongResultIsNamed) {
  const std::string c = GetParam();
  std::vector<std::string> statuses = ProbeThroughFaultyGroup(3, "", c);
  EXPECT_THAT(statuses[0],
              HasSubstr(absl::StrCat("FAILED_PRECONDITION: collective probe: ", c, " failed: wrong data in ")));
}

INSTANTIATE_TEST_SUITE_P(DataCollectives, ProbeCorruptionTest,
                         ::testing::Values("allgather", "alltoall_base", "broadcast", "gather", "scatter"));

TEST(ProbeFailureTest, WrongDataMessageShowsExpectedAndActual) {
  for (const std::string& s : ProbeThroughFaultyGroup(3, "", "broadcast")) {
    EXPECT_EQ(s,
              "FAILED_PRECONDITION: collective probe: broadcast failed: wrong data in the tensor: expected "
              "[7002, 7002, 7002], got [7003, 7003, 7003]");
  }
}

// A rank that arrives late: the punctual rank's probe gives up after its
// timeout, naming the first collective, well before the group's own timeout.
TEST(ProbeFailureTest, LateRankTimesOutNamingTheCollective) {
  SimulatedCluster cluster(2, FastOptions());
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = cluster.Run([](RankContext& ctx) {
    if (ctx.rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    return ProbeCollectives(*ctx.pg, std::chrono::milliseconds(200));
  });
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_EQ(FailedRank(status), 0) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("collective probe: allgather failed: LibTorch error: Operation timed out!"));
  EXPECT_LT(elapsed, std::chrono::seconds(8));
}

TEST(ProbeFailureTest, NonPositiveTimeoutIsInvalid) {
  SimulatedCluster cluster(1, FastOptions());
  absl::Status status =
      cluster.Run([](RankContext& ctx) { return ProbeCollectives(*ctx.pg, std::chrono::milliseconds(0)); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("probe timeout must be positive"));
}

}  // namespace
}  // namespace shardlight::lightning
