#include "sharded/rank_monitor.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sharded/no_throw.h"

namespace shardlight::sharded {
namespace {

std::mutex registry_mu;
std::map<const c10d::ProcessGroup*, std::shared_ptr<RankMonitor>>& Registry() {
  static auto* registry = new std::map<const c10d::ProcessGroup*, std::shared_ptr<RankMonitor>>();
  return *registry;
}

std::string RankList(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

// The record of the first loss: "2" or "2,3".
constexpr char kLostKey[] = "monitor/lost";

std::vector<uint8_t> Bytes(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }

std::optional<std::vector<int>> DecodeLoss(const std::vector<uint8_t>& bytes) {
  std::vector<int> ranks;
  for (absl::string_view part : absl::StrSplit(std::string(bytes.begin(), bytes.end()), ',')) {
    int rank = 0;
    if (!absl::SimpleAtoi(part, &rank)) return std::nullopt;
    ranks.push_back(rank);
  }
  if (ranks.empty()) return std::nullopt;
  return ranks;
}

bool Contains(const std::vector<int>& ranks, int rank) {
  return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}

}  // namespace

RankMonitor::RankMonitor(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, RankMonitorOptions options)
    : store_(std::move(store)), rank_(rank), world_size_(world_size), options_(options) {
  beat_ = std::thread([this] { Beat(); });
}

RankMonitor::~RankMonitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  beat_.join();
}

std::string RankMonitor::Key(const char* kind, int rank) const { return absl::StrCat("monitor/", kind, "/", rank); }

void RankMonitor::Beat() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    const absl::Status beat = NoThrow([&] {
      store_->add(Key("beat", rank_), 1);
      // Kept as soon as it is recorded: this rank may lose the store before
      // its own collective fails.
      if (!SeenLoss().has_value()) FirstLoss({});
      return absl::OkStatus();
    });
    if (!beat.ok()) return;  // the store is gone; Explain reports it
    lock.lock();
    stop_cv_.wait_for(lock, options_.heartbeat, [this] { return stop_; });
  }
}

int64_t RankMonitor::Arrive() {
  ++arrivals_;
  // A store that fails here fails Explain too, which says so.
  (void)NoThrow([&] {
    store_->add(Key("arrive", rank_), 1);
    return absl::OkStatus();
  });
  return arrivals_;
}

std::string RankMonitor::Explain() {
  auto read_all = [&](const char* kind) {
    std::vector<int64_t> values(world_size_);
    for (int r = 0; r < world_size_; ++r) values[r] = store_->add(Key(kind, r), 0);
    return values;
  };
  auto explained = NoThrow([&]() -> absl::StatusOr<std::string> {
    // Marks this rank as one that saw the failure: when it exits afterwards
    // its peers do not mistake it for the rank that was lost.
    store_->add(Key("failed", rank_), 1);
    // Arrivals as of the failure: a late rank may arrive while we watch.
    const std::vector<int64_t> arrived = read_all("arrive");
    const std::vector<int64_t> before = read_all("beat");
    std::this_thread::sleep_for(options_.heartbeat * 3);
    const std::vector<int64_t> after = read_all("beat");
    const std::vector<int64_t> failed = read_all("failed");
    std::vector<int> gone, behind;
    for (int r = 0; r < world_size_; ++r) {
      if (r == rank_) continue;
      if (after[r] == before[r]) {
        if (failed[r] == 0) gone.push_back(r);  // else it left after seeing the failure
      } else if (arrived[r] < arrivals_) {
        behind.push_back(r);
      }
    }
    std::vector<std::string> parts;
    // Empty only when no rank is gone here and none is recorded.
    if (const std::optional<std::vector<int>> first = FirstLoss(gone)) parts.push_back(Sentence(*first, gone));
    if (!behind.empty()) {
      parts.push_back(absl::StrCat(RankList(behind), " had not arrived at collective #", arrivals_));
    }
    return absl::StrJoin(parts, "; ");
  });
  if (explained.ok()) return *explained;
  if (const std::optional<std::vector<int>> seen = SeenLoss()) {
    return absl::StrCat(Sentence(*seen, {}), "; then the store stopped answering");
  }
  if (options_.store_host_rank && *options_.store_host_rank != rank_) {
    return absl::StrCat("rank ", *options_.store_host_rank,
                        " is gone (the store it hosted stopped answering before any rank recorded a loss, so whether "
                        "another rank was lost first cannot be known)");
  }
  return "the store stopped answering before any rank recorded a loss, so the missing ranks cannot be named";
}

std::string RankMonitor::Sentence(const std::vector<int>& first, const std::vector<int>& gone) const {
  std::string text = absl::StrCat(RankList(first), first.size() == 1 ? " is" : " are", " gone (no heartbeat for ",
                                  (options_.heartbeat * 3).count(), " ms)");
  std::vector<int> later;
  for (int r : gone) {
    if (!Contains(first, r)) later.push_back(r);
  }
  if (!later.empty()) absl::StrAppend(&text, "; after that ", RankList(later), " went too");
  return text;
}

std::optional<std::vector<int>> RankMonitor::FirstLoss(const std::vector<int>& gone) {
  std::vector<uint8_t> record;
  if (!gone.empty()) {
    // One record wins: the reply is the record now in place, ours or an earlier one.
    record = store_->compareSet(kLostKey, {}, Bytes(absl::StrJoin(gone, ",")));
  } else if (store_->check({kLostKey})) {
    record = store_->get(kLostKey);
  }
  std::optional<std::vector<int>> first = DecodeLoss(record);
  if (!first.has_value()) return std::nullopt;
  {
    std::lock_guard<std::mutex> lock(loss_mu_);
    if (!seen_loss_.has_value()) seen_loss_ = first;
  }
  store_->set(Key("seen", rank_), Bytes("1"));
  return first;
}

std::optional<std::vector<int>> RankMonitor::SeenLoss() {
  std::lock_guard<std::mutex> lock(loss_mu_);
  return seen_loss_;
}

bool RankMonitor::LossSeenByAll() {
  const absl::StatusOr<bool> all = NoThrow([&]() -> absl::StatusOr<bool> {
    const std::optional<std::vector<int>> first = FirstLoss({});
    if (!first.has_value()) return false;
    for (int r = 0; r < world_size_; ++r) {
      if (!Contains(*first, r) && !store_->check({Key("seen", r)})) return false;
    }
    return true;
  });
  return all.ok() && *all;
}

std::shared_ptr<RankMonitor> RankMonitor::Of(const c10d::ProcessGroup& pg) {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = Registry().find(&pg);
  return it == Registry().end() ? nullptr : it->second;
}

std::unique_ptr<RankMonitor::Attachment> RankMonitor::Attach(const c10d::ProcessGroup& pg,
                                                             std::shared_ptr<RankMonitor> monitor) {
  std::lock_guard<std::mutex> lock(registry_mu);
  Registry()[&pg] = std::move(monitor);
  return std::make_unique<Attachment>(&pg);
}

RankMonitor::Attachment::~Attachment() {
  std::shared_ptr<RankMonitor> released;  // destroyed outside the lock (joins the heartbeat)
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = Registry().find(pg_);
  if (it != Registry().end()) {
    released = std::move(it->second);
    Registry().erase(it);
  }
}

}  // namespace shardlight::sharded
