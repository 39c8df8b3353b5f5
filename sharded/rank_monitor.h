// RankMonitor: names the ranks behind a collective that failed or timed out.
//
// A Gloo timeout says only "timed out"; a lost peer says "Connection closed
// by peer [addr]". Neither says which rank. A monitor attached to a process
// group keeps two counters per rank in the store the group was made on:
//   arrivals -- bumped by every collective (RunCollective) before it waits, so
//               the ranks whose count is below this rank's had not arrived;
//   heartbeat -- bumped every `heartbeat` by a thread while the rank lives, so
//               a rank whose count stands still is gone (killed, or its group
//               torn down) -- unless it had itself reported the failure
//               (Explain marks the caller), which makes it a symptom, not
//               the cause.
// When a wait fails, Explain() turns those counters into one sentence for the
// error. Every rank runs it, so every rank's error names the same ranks.
// The counters assume every rank of the group waits on the same collectives
// in the same order (true of every shardlight entry point).
//
// The first loss is recorded: the first rank whose Explain finds ranks gone
// writes them to the store (compare-and-set, so one record wins), and every
// rank names that record first, whatever order the failure reaches it in --
// a rank that notices late may see later losses too, such as the store
// host's exit. Each rank's heartbeat reads the record as soon as it appears
// and keeps it ("seen"): a rank that loses the store afterwards still names
// the first loss. The store host leaves only once every survivor has seen it
// (LossSeenByAll, DistributedContext::Leave), or its bounded wait ends.
#ifndef SHARDLIGHT_SHARDED_RANK_MONITOR_H_
#define SHARDLIGHT_SHARDED_RANK_MONITOR_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace shardlight::sharded {

struct RankMonitorOptions {
  std::chrono::milliseconds heartbeat{200};
  // The rank whose process hosts the store, if one does (a TCPStore served
  // by rank 0): when the store stops answering, that rank is the lost one.
  std::optional<int> store_host_rank;
};

class RankMonitor {
 public:
  // `store` is private to this group (a PrefixStore); the monitor uses keys
  // under "monitor/".
  RankMonitor(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, RankMonitorOptions options = {});
  ~RankMonitor();  // stops the heartbeat: peers then see this rank as gone
  RankMonitor(const RankMonitor&) = delete;
  RankMonitor& operator=(const RankMonitor&) = delete;

  // Records that this rank reached its next collective wait; returns its number.
  int64_t Arrive();
  // Collectives this rank has arrived at so far. Read by the rank's own
  // thread, like Arrive.
  int64_t arrivals() const { return arrivals_; }
  // After a failed wait: "ranks 2, 3 had not arrived at collective #17",
  // "rank 1 is gone (no heartbeat for 600 ms)", or "" when the counters show
  // nothing (every rank arrived and lives). Takes about 3 heartbeats. The
  // recorded first loss comes first; when the store stops answering, the
  // first loss this rank has seen, else the store host as the lost rank
  // (saying that an earlier loss cannot be known), else that nothing can be
  // named.
  std::string Explain();

  // Whether a loss is recorded and every rank outside it has seen the
  // record: then a store host may stop serving without its exit being
  // blamed. False also when the store does not answer.
  bool LossSeenByAll();

  // The monitor attached to `pg`, or null.
  static std::shared_ptr<RankMonitor> Of(const c10d::ProcessGroup& pg);
  // Attaches `monitor` to `pg` until the returned handle is destroyed.
  class Attachment {
   public:
    Attachment(const c10d::ProcessGroup* pg) : pg_(pg) {}
    ~Attachment();
    Attachment(const Attachment&) = delete;
    Attachment& operator=(const Attachment&) = delete;

   private:
    const c10d::ProcessGroup* pg_;
  };
  static std::unique_ptr<Attachment> Attach(const c10d::ProcessGroup& pg, std::shared_ptr<RankMonitor> monitor);

 private:
  void Beat();
  std::string Key(const char* kind, int rank) const;
  // The first loss (the ranks the recording rank found gone): the record if
  // there is one -- with `gone` non-empty, `gone` recorded unless a record
  // exists -- kept in seen_loss_ and marked seen in the store; nullopt when
  // nothing is recorded. Throws when the store fails.
  std::optional<std::vector<int>> FirstLoss(const std::vector<int>& gone);
  // The first loss this rank has kept, without the store.
  std::optional<std::vector<int>> SeenLoss();
  // "rank 2 is gone (...)", then the ranks of `gone` outside `first`.
  std::string Sentence(const std::vector<int>& first, const std::vector<int>& gone) const;

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, world_size_;
  RankMonitorOptions options_;
  int64_t arrivals_ = 0;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by mu_
  std::mutex loss_mu_;
  std::optional<std::vector<int>> seen_loss_;  // guarded by loss_mu_
  std::thread beat_;
};

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_RANK_MONITOR_H_
