// The Trainer with checkpoint_dir = s3://bucket/prefix (no Storage given: the
// location picks S3, configured from the AWS_* variables), against a real S3
// server (SeaweedFS on loopback): a checkpoint root with keep_last on the
// bucket, synchronous and asynchronous, and a resume at another world size
// from the newest step. Missing or wrong credentials and a missing bucket
// fail every rank at the start of Fit, naming the variable or S3's error,
// before a step is trained.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lightning/callback.h"
#include "lightning/trainer.h"
#include "sharded/checkpoint/storage/s3/testing/seaweedfs_test.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/embedding_mlp.h"

namespace shardlight {
namespace {

using lightning::FitResult;
using lightning::Trainer;
using lightning::TrainerOptions;
using simulate::EmbeddingMlp;
using simulate::RankContext;
using simulate::SimulatedCluster;
using simulate::SyntheticRegression;

constexpr uint64_t kSeed = 29;

absl::StatusOr<FitResult> Train(RankContext& ctx, int64_t max_steps, const std::string& dir, bool async) {
  EmbeddingMlp module;
  TrainerOptions options;
  options.max_steps = max_steps;
  options.seed = kSeed;
  options.checkpoint_dir = dir;
  options.checkpoint_every = 2;
  options.keep_last = 2;
  options.async_checkpoint = async;
  options.groups = ctx.groups;  // the async checkpointer's own group
  SyntheticRegression data(96, 32, kSeed);
  return Trainer(options).Fit(module, data, ctx.pg);
}

class TrainerS3Test : public sharded::checkpoint::s3::testing::SeaweedFsTest,
                      public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    SeaweedFsTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ExportAwsEnvironment();
  }
  // The step directories under `prefix`/.
  std::set<std::string> Steps(const std::string& prefix) {
    std::set<std::string> out;
    auto listed = client_->ListObjects(bucket_, prefix + "/");
    EXPECT_TRUE(listed.ok()) << listed.status();
    if (!listed.ok()) return out;
    for (const auto& o : listed->objects) {
      const std::string rest = o.key.substr(prefix.size() + 1);
      if (absl::StartsWith(rest, "step-")) out.insert(rest.substr(0, rest.find('/')));
    }
    return out;
  }
};

TEST_P(TrainerS3Test, FitsIntoAnS3RootAndResumesAtAnotherWorldSize) {
  const bool async = GetParam();
  const std::string root = absl::StrCat("s3://", bucket_, "/run");
  SimulatedCluster two(2);
  auto straight = two.Run([&](RankContext& ctx) { return Train(ctx, 12, "", false); });
  ASSERT_TRUE(straight.ok()) << straight.status();

  auto first = two.Run([&](RankContext& ctx) { return Train(ctx, 8, root, async); });
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)[0].checkpoints_saved, 4);
  EXPECT_EQ(Steps("run"), (std::set<std::string>{"step-000006", "step-000008"}));

  // The same world size continues bit for bit as the straight run.
  auto resumed = two.Run([&](RankContext& ctx) { return Train(ctx, 10, root, async); });
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)[0].start_step, 8);
  EXPECT_EQ((*resumed)[0].resumed_from, root + "/step-000008");
  ASSERT_EQ((*resumed)[0].losses.size(), 2u);
  for (int i = 0; i < 2; ++i) EXPECT_EQ((*resumed)[0].losses[i], (*straight)[0].losses[8 + i]) << "step " << 9 + i;
  EXPECT_EQ(Steps("run"), (std::set<std::string>{"step-000008", "step-000010"}));

  // Another world size resumes from the newest step, resharded.
  SimulatedCluster three(3);
  auto again = three.Run([&](RankContext& ctx) { return Train(ctx, 12, root, async); });
  ASSERT_TRUE(again.ok()) << again.status();
  for (const FitResult& r : *again) {
    EXPECT_EQ(r.start_step, 10);
    EXPECT_EQ(r.resumed_from, root + "/step-000010");
  }
  EXPECT_EQ(Steps("run"), (std::set<std::string>{"step-000010", "step-000012"}));
}

// Counts the steps trained.
class StepCounter : public lightning::Callback {
 public:
  absl::Status OnStepEnd(const lightning::TrainState&, int64_t, double) override {
    ++steps;
    return absl::OkStatus();
  }
  std::atomic<int> steps{0};
};

class TrainerS3SetupTest : public sharded::checkpoint::s3::testing::SeaweedFsTest {};

TEST_F(TrainerS3SetupTest, UnusableCredentialsFailEveryRankBeforeTheFirstStep) {
  struct Case {
    const char* variable;  // null: none changed
    const char* value;     // null: unset
    std::string location;
    std::string named;
  };
  const std::string root = absl::StrCat("s3://", bucket_, "/run");
  const std::vector<Case> cases = {
      {"AWS_ACCESS_KEY_ID", nullptr, root, "AWS_ACCESS_KEY_ID"},
      {"AWS_SECRET_ACCESS_KEY", "not-the-secret", root, "SignatureDoesNotMatch"},
      {nullptr, nullptr, "s3://no-such-bucket-here/run", "NoSuchBucket"},
  };
  for (const Case& c : cases) {
    ExportAwsEnvironment();
    if (c.variable != nullptr && c.value == nullptr) unsetenv(c.variable);
    if (c.variable != nullptr && c.value != nullptr) setenv(c.variable, c.value, 1);
    auto counter = std::make_shared<StepCounter>();
    SimulatedCluster two(2);
    std::vector<absl::Status> per_rank(2);
    (void)two.Run([&](RankContext& ctx) -> absl::Status {
      EmbeddingMlp module;
      TrainerOptions options;
      options.max_steps = 4;
      options.seed = kSeed;
      options.checkpoint_dir = c.location;
      options.checkpoint_every = 2;
      SyntheticRegression data(96, 32, kSeed);
      per_rank[ctx.rank] = Trainer(options, {counter}).Fit(module, data, ctx.pg).status();
      return per_rank[ctx.rank];
    });
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_FALSE(per_rank[rank].ok()) << c.named << ", rank " << rank;
      EXPECT_TRUE(absl::StrContains(per_rank[rank].message(), c.named)) << per_rank[rank];
      EXPECT_TRUE(absl::StrContains(per_rank[rank].message(), c.location)) << per_rank[rank];
    }
    EXPECT_EQ(counter->steps.load(), 0) << c.named << ": steps were trained before the failure";
  }
  ExportAwsEnvironment();
}

INSTANTIATE_TEST_SUITE_P(SyncAndAsync, TrainerS3Test, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "Async" : "Sync"; });

}  // namespace
}  // namespace shardlight
