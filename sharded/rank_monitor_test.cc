#include "sharded/rank_monitor.h"

#include <atomic>
#include <memory>
#include <stdexcept>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sharded/compat/c10d_testing.h"
#include <torch/csrc/distributed/c10d/HashStore.hpp>

namespace shardlight::sharded {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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

// The store a rank hosts (a TCPStore served by rank 0): once Stop() -- the
// host exited -- every operation fails, as a client's would.
class HostedStore : public c10d::Store {
 public:
  SHARDLIGHT_C10D_STORE_CLONE
  void Stop() { stopped_ = true; }
  // The store itself, which outlives Stop(): what the test waits on.
  c10d::HashStore& inner() { return *inner_; }

  void set(const std::string& key, const std::vector<uint8_t>& value) override { Live().set(key, value); }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    return Live().compareSet(key, expected, desired);
  }
  std::vector<uint8_t> get(const std::string& key) override { return Live().get(key); }
  int64_t add(const std::string& key, int64_t value) override { return Live().add(key, value); }
  bool deleteKey(const std::string& key) override { return Live().deleteKey(key); }
  bool check(const std::vector<std::string>& keys) override { return Live().check(keys); }
  int64_t getNumKeys() override { return Live().getNumKeys(); }
  void wait(const std::vector<std::string>& keys) override { Live().wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    Live().wait(keys, timeout);
  }

 private:
  c10d::HashStore& Live() {
    if (stopped_) throw std::runtime_error("Connection reset by peer (the store host exited)");
    return *inner_;
  }
  c10::intrusive_ptr<c10d::HashStore> inner_ = c10::make_intrusive<c10d::HashStore>();
  std::atomic<bool> stopped_{false};
};

// A slower heartbeat than kBeat: these tests name exactly the lost ranks, so
// a live rank's beat must not miss a whole window on a loaded machine.
constexpr std::chrono::milliseconds kLoadedBeat{100};

std::vector<std::unique_ptr<RankMonitor>> HostedMonitors(const c10::intrusive_ptr<HostedStore>& store, int w) {
  std::vector<std::unique_ptr<RankMonitor>> m;
  for (int r = 0; r < w; ++r) {
    m.push_back(std::make_unique<RankMonitor>(store, r, w, RankMonitorOptions{kLoadedBeat, 0}));
  }
  return m;
}

// Waits (bounded, on the store's own event) until `ranks` have read the
// recorded first loss -- what the store host waits for before it leaves.
void WaitUntilSeenBy(HostedStore& store, const std::vector<int>& ranks) {
  std::vector<std::string> keys;
  for (int r : ranks) keys.push_back("monitor/seen/" + std::to_string(r));
  store.inner().wait(keys, std::chrono::seconds(20));
}

// Issue 49: rank 2 is lost; rank 0, which hosts the store, names it and
// exits once every survivor has read that; a rank that notices only then
// (rank 0's exit broke its collective) still names rank 2, not rank 0.
TEST(RankMonitor, TheStoreHostLeavingAfterTheFirstLossKeepsTheBlame) {
  auto store = c10::make_intrusive<HostedStore>();
  auto m = HostedMonitors(store, 4);
  for (auto& x : m) x->Arrive();
  m[2].reset();  // killed
  EXPECT_THAT(m[0]->Explain(), HasSubstr("rank 2 is gone (no heartbeat for"));
  WaitUntilSeenBy(*store, {1, 3});
  EXPECT_TRUE(m[0]->LossSeenByAll());
  store->Stop();
  m[0].reset();  // the host exits
  for (int r : {1, 3}) {
    const std::string why = m[r]->Explain();
    EXPECT_THAT(why, HasSubstr("rank 2 is gone")) << "rank " << r;
    EXPECT_THAT(why, Not(HasSubstr("rank 0 is gone"))) << "rank " << r;
  }
}

// Whoever notices first records the loss; a later loss, and the exit of a
// rank that reported the failure, do not change whom every rank names first.
TEST(RankMonitor, EveryRankNamesTheFirstLossWhateverOrderTheyNoticeIn) {
  auto store = c10::make_intrusive<HostedStore>();
  auto m = HostedMonitors(store, 5);
  for (auto& x : m) x->Arrive();
  m[2].reset();
  EXPECT_THAT(m[3]->Explain(), HasSubstr("rank 2 is gone"));
  m[3].reset();  // exits after its error: not a loss
  WaitUntilSeenBy(*store, {0, 1, 4});
  m[4].reset();  // a second loss, after the first
  for (int r : {1, 0}) {
    const std::string why = m[r]->Explain();
    EXPECT_THAT(why, HasSubstr("rank 2 is gone")) << "rank " << r << ": " << why;
    EXPECT_LT(why.find("rank 2"), why.find("rank 4")) << "rank " << r << ": " << why;
    EXPECT_THAT(why, Not(HasSubstr("rank 3"))) << "rank " << r << ": " << why;
  }
}

// The store host lost first: nothing could be recorded; the survivors name
// the host, and say why they cannot know more.
TEST(RankMonitor, AStoreHostLostFirstIsNamed) {
  auto store = c10::make_intrusive<HostedStore>();
  auto m = HostedMonitors(store, 3);
  for (auto& x : m) x->Arrive();
  EXPECT_FALSE(m[0]->LossSeenByAll());
  store->Stop();
  m[0].reset();
  for (int r : {1, 2}) {
    const std::string why = m[r]->Explain();
    EXPECT_THAT(why, HasSubstr("rank 0 is gone (the store it hosted stopped answering")) << why;
    EXPECT_THAT(why, HasSubstr("cannot be known")) << why;
  }
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
