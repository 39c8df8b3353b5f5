#include "sharded/rank_monitor.h"

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include <torch/csrc/distributed/c10d/HashStore.hpp>

namespace shardlight::sharded {
namespace {

using ::testing::HasSubstr;

constexpr std::chrono::milliseconds kBeat{20};

std::vector<std::unique_ptr<RankMonitor>> Monitors(c10::intrusive_ptr<c10d::Store> store, int w) {
  std::vector<std::unique_ptr<RankMonitor>> m;
  for (int r = 0; r < w; ++r) m.push_back(std::make_unique<RankMonitor>(store, r, w, RankMonitorOptions{kBeat, {}}));
  return m;
}

TEST(RankMonitor, NamesTheRanksThatHadNotArrived) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto m = Monitors(store, 4);
  for (int r = 0; r < 4; ++r) m[r]->Arrive();  // collective #1: everyone
  m[0]->Arrive();                             // collective #2: ranks 0 and 1 only
  m[1]->Arrive();
  EXPECT_EQ(m[0]->Explain(), "ranks 2, 3 had not arrived at collective #2");
  EXPECT_EQ(m[2]->Explain(), "");  // from rank 2's side nobody is behind
}

TEST(RankMonitor, NamesARankWhoseHeartbeatStopped) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto m = Monitors(store, 3);
  for (auto& x : m) x->Arrive();
  m[1].reset();  // rank 1 dies
  EXPECT_THAT(m[0]->Explain(), HasSubstr("rank 1 is gone (no heartbeat for"));
  EXPECT_THAT(m[2]->Explain(), HasSubstr("rank 1 is gone"));
}

TEST(RankMonitor, AttachesToAGroupUntilTheHandleGoes) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  // Any object address serves as the key; a real group is not needed here.
  const auto* fake = reinterpret_cast<const c10d::ProcessGroup*>(&store);
  auto monitor = std::make_shared<RankMonitor>(store, 0, 1);
  {
    auto attachment = RankMonitor::Attach(*fake, monitor);
    EXPECT_EQ(RankMonitor::Of(*fake), monitor);
  }
  EXPECT_EQ(RankMonitor::Of(*fake), nullptr);
}

}  // namespace
}  // namespace shardlight::sharded
