// s3://bucket/prefix locations given with no Storage in the options, against
// a real S3 server (SeaweedFS on loopback, reached through the AWS_*
// variables): SaveCheckpoint and LoadCheckpoint, a checkpoint root with
// retention, the async checkpointer and the DCP writer and reader all pick S3
// from the location alone (storage/default_storage.h), and reshard on load.
// Without credentials, every rank fails naming the variable and the location.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "sharded/checkpoint/async/async_checkpointer.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/interop/dcp/dcp_writer.h"
#include "sharded/checkpoint/roots/checkpoint_root.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "sharded/checkpoint/storage/fault_injecting_storage.h"
#include "sharded/checkpoint/storage/s3/testing/seaweedfs_test.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::checkpoint {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;

std::vector<testing::TensorSpec> Model(int world) { return testing::UnevenModel(world); }

// Loads `dir` (a root when `root`) on `world` ranks and checks the values of `salt`.
absl::Status LoadAndCheck(const std::string& dir, int world, int salt, bool root) {
  SimulatedCluster cluster(world, testing::Options());
  return cluster.Run([&](RankContext& ctx) -> absl::Status {
    SL_ASSIGN_OR_RETURN(StateDict state, testing::MakeState(Model(world), -1, ctx.pg));
    if (root) {
      SL_RETURN_IF_ERROR(LoadCheckpointFromRoot(state, dir, *ctx.pg).status());
    } else {
      SL_RETURN_IF_ERROR(LoadCheckpoint(state, dir, *ctx.pg));
    }
    return testing::CheckState(state, salt);
  });
}

class S3LocationTest : public s3::testing::SeaweedFsTest {
 protected:
  void SetUp() override {
    SeaweedFsTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ExportAwsEnvironment();
  }
  std::string Url(const std::string& prefix) const { return absl::StrCat("s3://", bucket_, "/", prefix); }
  // The keys under `prefix`, relative to it.
  std::set<std::string> Keys(const std::string& prefix) {
    std::set<std::string> out;
    auto listed = client_->ListObjects(bucket_, prefix);
    EXPECT_TRUE(listed.ok()) << listed.status();
    if (listed.ok()) {
      for (const s3::ObjectInfo& o : listed->objects) out.insert(o.key.substr(prefix.size()));
    }
    return out;
  }
};

TEST_F(S3LocationTest, SaveAndLoadReshardAtAnS3UrlWithNoStorageGiven) {
  const std::string dir = Url("plain/ckpt");
  SimulatedCluster cluster(4, testing::Options());
  ASSERT_TRUE(cluster
                  .Run([&](RankContext& ctx) -> absl::Status {
                    SL_ASSIGN_OR_RETURN(StateDict state, testing::MakeState(Model(4), 3, ctx.pg));
                    return SaveCheckpoint(state, dir, *ctx.pg);
                  })
                  .ok());
  EXPECT_TRUE(Keys("plain/ckpt/").count("index.json"));
  EXPECT_TRUE(HasCommittedCheckpoint(dir));
  for (int world : {1, 3, 5}) {
    const absl::Status loaded = LoadAndCheck(dir, world, 3, /*root=*/false);
    EXPECT_TRUE(loaded.ok()) << "W=" << world << ": " << loaded;
  }
}

TEST_F(S3LocationTest, RootRetentionKeepsTheNewestStepsOnS3) {
  const std::string root = Url("root");
  SimulatedCluster cluster(3, testing::Options());
  ASSERT_TRUE(cluster
                  .Run([&](RankContext& ctx) -> absl::Status {
                    for (int step = 1; step <= 4; ++step) {
                      SL_ASSIGN_OR_RETURN(StateDict state, testing::MakeState(Model(3), step, ctx.pg));
                      RootSaveOptions options;
                      options.keep_last = 2;
                      SL_RETURN_IF_ERROR(SaveToCheckpointRoot(state, root, step, *ctx.pg, options));
                    }
                    return absl::OkStatus();
                  })
                  .ok());
  std::set<std::string> steps;
  for (const std::string& key : Keys("root/")) {
    if (absl::StartsWith(key, "step-")) steps.insert(key.substr(0, key.find('/')));
  }
  EXPECT_EQ(steps, (std::set<std::string>{"step-000003", "step-000004"}));
  EXPECT_TRUE(Keys("root/").count("latest"));
  const absl::Status loaded = LoadAndCheck(root, 2, 4, /*root=*/true);
  EXPECT_TRUE(loaded.ok()) << loaded;
}

TEST_F(S3LocationTest, AsyncSavesIntoAnS3Root) {
  const std::string root = Url("async");
  SimulatedCluster cluster(2, testing::Options());
  const absl::Status saved = cluster.Run([&](RankContext& ctx) -> absl::Status {
    SL_ASSIGN_OR_RETURN(auto group, ctx.groups->Make("async_checkpoint"));
    AsyncCheckpointOptions options;
    options.keep_last = 1;
    options.staging_budget_bytes = 64 << 10;
    SL_ASSIGN_OR_RETURN(auto checkpointer, AsyncCheckpointer::Create(root, group, options));
    for (int step = 1; step <= 3; ++step) {
      SL_ASSIGN_OR_RETURN(StateDict state, testing::MakeState(Model(2), 10 + step, ctx.pg));
      SL_ASSIGN_OR_RETURN(auto handle, checkpointer->Save(state, step));
      SL_RETURN_IF_ERROR(handle->Wait());
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(saved.ok()) << saved;
  std::set<std::string> steps;
  for (const std::string& key : Keys("async/")) {
    if (absl::StartsWith(key, "step-")) steps.insert(key.substr(0, key.find('/')));
  }
  EXPECT_EQ(steps, (std::set<std::string>{"step-000003"}));
  const absl::Status loaded = LoadAndCheck(root, 3, 13, /*root=*/true);
  EXPECT_TRUE(loaded.ok()) << loaded;
}

TEST_F(S3LocationTest, DcpSaveAndLoadOnS3) {
  const std::string dir = Url("dcp/ckpt");
  SimulatedCluster cluster(2, testing::Options());
  const absl::Status saved = cluster.Run([&](RankContext& ctx) -> absl::Status {
    SL_ASSIGN_OR_RETURN(StateDict state, testing::MakeState(Model(2), 5, ctx.pg));
    return dcp::SaveDcpCheckpoint(state, dir, *ctx.pg);
  });
  ASSERT_TRUE(saved.ok()) << saved;
  EXPECT_TRUE(Keys("dcp/ckpt/").count(".metadata"));
  EXPECT_FALSE(Keys("dcp/ckpt/").count("index.json"));
  const absl::Status loaded = LoadAndCheck(dir, 3, 5, /*root=*/false);
  EXPECT_TRUE(loaded.ok()) << loaded;
}

// Item 3 of issue 48: 16 independent jobs (two ranks each) save the same
// step at once. The index is created with If-None-Match: *, so exactly one
// commits; every other fails on every rank saying another save committed
// first, and removes its data files; what loads is the winner's.
TEST_F(S3LocationTest, SixteenRacingSavesCommitExactlyOnce) {
  constexpr int kWriters = 16;
  const std::string dir = Url("race/step-7");
  std::vector<std::vector<absl::Status>> outcomes(kWriters, std::vector<absl::Status>(2));
  // Every save has looked at the location (found it empty) before any
  // commits: each rank waits, at its data file's creation, for all 32.
  std::mutex mu;
  std::condition_variable all_there;
  int arrived = 0;
  auto together = std::make_shared<FaultInjectingStorage>(DefaultStorage(), [&](StorageOp op, const std::string& path) {
    if (op != StorageOp::kCreateNew || !absl::StrContains(path, "/data-")) return absl::OkStatus();
    std::unique_lock<std::mutex> lock(mu);
    ++arrived;
    all_there.notify_all();
    if (!all_there.wait_for(lock, std::chrono::seconds(60), [&] { return arrived == 2 * kWriters; })) {
      return absl::DeadlineExceededError("the racing saves did not all reach their data files within 60 s");
    }
    return absl::OkStatus();
  });
  simulate::ClusterOptions options = testing::Options();
  options.collective_timeout = std::chrono::seconds(120);  // 32 ranks on a small machine
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      SimulatedCluster cluster(2, options);
      (void)cluster.Run([&](RankContext& ctx) -> absl::Status {
        auto state = testing::MakeState(Model(2), 100 + w, ctx.pg);
        SaveOptions save;
        save.storage = together;
        outcomes[w][ctx.rank] = state.ok() ? SaveCheckpoint(*state, dir, *ctx.pg, save) : state.status();
        return absl::OkStatus();
      });
    });
  }
  for (std::thread& t : writers) t.join();
  int winner = -1;
  for (int w = 0; w < kWriters; ++w) {
    EXPECT_EQ(outcomes[w][0].code(), outcomes[w][1].code()) << outcomes[w][0] << " / " << outcomes[w][1];
    if (outcomes[w][0].ok()) {
      EXPECT_EQ(winner, -1) << "writers " << winner << " and " << w << " both committed";
      winner = w;
      continue;
    }
    for (const absl::Status& s : outcomes[w]) {
      EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), "another save committed '" + dir + "' first")) << s;
    }
  }
  ASSERT_NE(winner, -1) << "no writer committed";
  const absl::Status loaded = LoadAndCheck(dir, 3, 100 + winner, /*root=*/false);
  EXPECT_TRUE(loaded.ok()) << loaded;
  // The winner's two data files and its index (and the directory marker):
  // the losers removed theirs, and nothing went under a temporary name.
  std::set<std::string> data;
  for (const std::string& key : Keys("race/step-7/")) {
    EXPECT_FALSE(absl::StrContains(key, ".tmp")) << key;
    if (absl::StartsWith(key, "data-")) data.insert(key);
  }
  EXPECT_EQ(data.size(), 2u) << ::testing::PrintToString(data);
}

TEST_F(S3LocationTest, MissingCredentialsFailEveryRankNamingTheVariableAndLocation) {
  unsetenv("AWS_ACCESS_KEY_ID");
  const std::string dir = Url("nocreds");
  SimulatedCluster cluster(3, testing::Options());
  std::vector<absl::Status> per_rank(3);
  (void)cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto state = testing::MakeState(Model(3), 1, ctx.pg);
    if (!state.ok()) return state.status();
    per_rank[ctx.rank] = SaveCheckpoint(*state, dir, *ctx.pg);
    return per_rank[ctx.rank];
  });
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_FALSE(per_rank[rank].ok()) << "rank " << rank;
    EXPECT_TRUE(absl::StrContains(per_rank[rank].message(), "AWS_ACCESS_KEY_ID")) << per_rank[rank];
    EXPECT_TRUE(absl::StrContains(per_rank[rank].message(), dir)) << per_rank[rank];
  }
  ExportAwsEnvironment();
  EXPECT_TRUE(Keys("nocreds").empty());
}

// Wrong credentials and a missing bucket: every rank fails naming the
// location and S3's error code.
TEST_F(S3LocationTest, WrongSecretAndMissingBucketFailEveryRankNamingThem) {
  struct Case {
    std::string dir;
    const char* secret;
    std::string code;
  };
  const std::vector<Case> cases = {
      {Url("wrong-secret"), "not-the-secret", "SignatureDoesNotMatch"},
      {"s3://no-such-bucket-here/x", nullptr, "NoSuchBucket"},
  };
  for (const Case& c : cases) {
    if (c.secret != nullptr) setenv("AWS_SECRET_ACCESS_KEY", c.secret, 1);
    SimulatedCluster cluster(2, testing::Options());
    std::vector<absl::Status> per_rank(2);
    (void)cluster.Run([&](RankContext& ctx) -> absl::Status {
      auto state = testing::MakeState(Model(2), 1, ctx.pg);
      per_rank[ctx.rank] = state.ok() ? SaveCheckpoint(*state, c.dir, *ctx.pg) : state.status();
      return per_rank[ctx.rank];
    });
    ExportAwsEnvironment();
    for (const absl::Status& s : per_rank) {
      EXPECT_FALSE(s.ok()) << c.dir;
      EXPECT_TRUE(absl::StrContains(s.message(), c.dir)) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), c.code)) << s;
    }
  }
}

// Item 4 of issue 48: the real server process is KILLed in the middle of a
// save (at a data file's upload) and of a load (at a data read). Every rank
// fails, in bounded time, naming the bucket and the object; after a restart
// on the same data the previous checkpoint loads.
class S3CrashTest : public S3LocationTest {
 protected:
  // A storage over DefaultStorage() that KILLs the server the first time
  // `op` reaches a data file.
  std::shared_ptr<Storage> KillingAt(StorageOp op) {
    return std::make_shared<FaultInjectingStorage>(DefaultStorage(), [this, op](StorageOp o, const std::string& path) {
      if (o == op && absl::StrContains(path, "/data-") && !killed_.exchange(true)) {
        const absl::Status crashed = server_->Crash();
        if (!crashed.ok()) return crashed;
      }
      return absl::OkStatus();
    });
  }
  // Runs `body` on `world` ranks; every rank's status.
  std::vector<absl::Status> OnEveryRank(int world, const std::function<absl::Status(RankContext&)>& body) {
    std::vector<absl::Status> out(world);
    SimulatedCluster cluster(world, testing::Options());
    (void)cluster.Run([&](RankContext& ctx) -> absl::Status {
      out[ctx.rank] = body(ctx);
      return absl::OkStatus();
    });
    return out;
  }
  void ExpectFailedNaming(const std::vector<absl::Status>& statuses, const std::string& what) {
    for (size_t rank = 0; rank < statuses.size(); ++rank) {
      EXPECT_FALSE(statuses[rank].ok()) << what << ", rank " << rank;
      EXPECT_TRUE(absl::StrContains(statuses[rank].message(), "s3://" + bucket_ + "/")) << statuses[rank];
    }
  }
  // Restarts the server and waits (up to 60 s) until every object under
  // `prefix` reads back: weed answers ListBuckets before its volume server
  // has re-registered, and GETs meanwhile answer 500.
  void RestartAndWaitReadable(const std::string& prefix) {
    const absl::Status restarted = server_->Restart();
    ASSERT_TRUE(restarted.ok()) << restarted;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    absl::Status last;
    do {
      last = absl::OkStatus();
      auto listed = client_->ListObjects(bucket_, prefix);
      if (!listed.ok()) last = listed.status();
      for (size_t i = 0; last.ok() && i < listed->objects.size(); ++i) {
        last = client_->GetObject(bucket_, listed->objects[i].key).status();
      }
      if (last.ok()) return;
      absl::SleepFor(absl::Milliseconds(250));
    } while (absl::Now() < deadline);
    FAIL() << "the restarted server does not serve " << prefix << " within 60 s: " << last;
  }
  std::atomic<bool> killed_{false};
};

TEST_F(S3CrashTest, ServerKilledMidSaveLeavesThePreviousCheckpoint) {
  const std::string dir = Url("crash/save");
  SimulatedCluster cluster(3, testing::Options());
  ASSERT_TRUE(cluster
                  .Run([&](RankContext& ctx) -> absl::Status {
                    SL_ASSIGN_OR_RETURN(StateDict state, testing::MakeState(Model(3), 1, ctx.pg));
                    return SaveCheckpoint(state, dir, *ctx.pg);
                  })
                  .ok());
  const std::shared_ptr<Storage> killing = KillingAt(StorageOp::kSync);
  const absl::Time t0 = absl::Now();
  const std::vector<absl::Status> saved = OnEveryRank(3, [&](RankContext& ctx) -> absl::Status {
    SL_ASSIGN_OR_RETURN(StateDict state, testing::MakeState(Model(3), 2, ctx.pg));
    SaveOptions options;
    options.storage = killing;
    return SaveCheckpoint(state, dir, *ctx.pg, options);
  });
  EXPECT_LT(absl::Now() - t0, absl::Seconds(90));
  ASSERT_TRUE(killed_.load()) << "the save never reached a data file's sync";
  ExpectFailedNaming(saved, "save with the server killed");
  std::fprintf(stderr, "the save with the server killed: %s\n", saved[0].ToString().c_str());

  RestartAndWaitReadable("crash/save/");
  const absl::Status loaded = LoadAndCheck(dir, 2, 1, /*root=*/false);
  EXPECT_TRUE(loaded.ok()) << loaded;
}

TEST_F(S3CrashTest, ServerKilledMidLoadFailsEveryRankThenLoadsAfterARestart) {
  const std::string dir = Url("crash/load");
  SimulatedCluster cluster(2, testing::Options());
  ASSERT_TRUE(cluster
                  .Run([&](RankContext& ctx) -> absl::Status {
                    SL_ASSIGN_OR_RETURN(StateDict state, testing::MakeState(Model(2), 4, ctx.pg));
                    return SaveCheckpoint(state, dir, *ctx.pg);
                  })
                  .ok());
  const std::shared_ptr<Storage> killing = KillingAt(StorageOp::kRead);
  const absl::Time t0 = absl::Now();
  const std::vector<absl::Status> loaded = OnEveryRank(3, [&](RankContext& ctx) -> absl::Status {
    SL_ASSIGN_OR_RETURN(StateDict state, testing::MakeState(Model(3), -1, ctx.pg));
    LoadOptions options;
    options.storage = killing;
    return LoadCheckpoint(state, dir, *ctx.pg, options);
  });
  EXPECT_LT(absl::Now() - t0, absl::Seconds(90));
  ASSERT_TRUE(killed_.load()) << "the load never read a data file";
  ExpectFailedNaming(loaded, "load with the server killed");
  std::fprintf(stderr, "the load with the server killed: %s\n", loaded[0].ToString().c_str());

  RestartAndWaitReadable("crash/load/");
  const absl::Status again = LoadAndCheck(dir, 3, 4, /*root=*/false);
  EXPECT_TRUE(again.ok()) << again;
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint
