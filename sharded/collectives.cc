#include "sharded/collectives.h"

#include <algorithm>
#include <cstring>

#include "sharded/compat/c10d_compat.h"
#include "sharded/rank_monitor.h"

namespace shardlight::sharded {

namespace internal {

void ArriveAtCollective(c10d::ProcessGroup& pg) {
  if (auto monitor = RankMonitor::Of(pg)) monitor->Arrive();
}

absl::Status CollectiveFailed(c10d::ProcessGroup& pg, absl::string_view op, const absl::Status& error) {
  auto monitor = RankMonitor::Of(pg);
  const std::string who = monitor ? monitor->Explain() : std::string();
  return absl::UnavailableError(
      absl::StrCat(op, " failed: ", who.empty() ? "" : absl::StrCat(who, ": "), error.message()));
}

}  // namespace internal

namespace {

// AllgatherStrings' first exchange carries, for each rank, a slot of this
// many bytes: the string's length (8 bytes), then as much of the string as
// fits. Agreement verdicts ("+<fingerprint>:<payload>") fit.
constexpr int64_t kSlotBytes = 256;
constexpr int64_t kInlineBytes = kSlotBytes - 8;

}  // namespace

absl::StatusOr<std::vector<std::string>> AllgatherStrings(c10d::ProcessGroup& pg,
                                                          const std::string& mine) {
  const int w = pg.getSize();
  const int rank = pg.getRank();
  const int64_t length = static_cast<int64_t>(mine.size());
  // Step 1: rank 0 gathers every rank's slot, then sends all of them to
  // every rank (one exchange to the RankMonitor). Two collectives whose
  // latency does not grow with a ring's hops: Gloo's allgather passes the
  // data around the ring, one hop after another, each a wake-up of the next
  // rank (4 processes on 2 cores: 3.7 ms against 1.2 ms for a gather and a
  // broadcast).
  std::vector<at::Tensor> slot = {at::zeros({kSlotBytes}, at::kByte)};
  char* own = static_cast<char*>(slot[0].data_ptr());
  std::memcpy(own, &length, sizeof(length));
  std::memcpy(own + sizeof(length), mine.data(), static_cast<size_t>(std::min(length, kInlineBytes)));
  std::vector<at::Tensor> slots = {at::empty({w * kSlotBytes}, at::kByte)};
  std::vector<std::vector<at::Tensor>> gathered;
  if (rank == 0) {
    gathered.resize(1);
    for (int r = 0; r < w; ++r) gathered[0].push_back(slots[0].narrow(0, r * kSlotBytes, kSlotBytes));
  }
  c10d::GatherOptions gather_options;
  gather_options.rootRank = 0;
  absl::Status s =
      RunCollective(pg, "gather of string slots", [&] { return pg.gather(gathered, slot, gather_options); });
  if (!s.ok()) return s;
  c10d::BroadcastOptions broadcast_options;
  broadcast_options.rootRank = 0;
  s = ContinueCollective(pg, "broadcast of string slots", [&] { return pg.broadcast(slots, broadcast_options); });
  if (!s.ok()) return s;
  const char* all_slots = static_cast<const char*>(slots[0].data_ptr());
  std::vector<int64_t> lengths(static_cast<size_t>(w));
  int64_t max_rest = 0;  // the longest part that did not fit in a slot
  for (int r = 0; r < w; ++r) {
    std::memcpy(&lengths[r], all_slots + r * kSlotBytes, sizeof(int64_t));
    if (lengths[r] < 0) {
      return absl::InternalError(absl::StrCat("allgather of strings: rank ", r, " sent length ", lengths[r]));
    }
    max_rest = std::max(max_rest, lengths[r] - kInlineBytes);
  }
  std::vector<std::string> all(static_cast<size_t>(w));
  for (int r = 0; r < w; ++r) {
    const char* inline_bytes = all_slots + r * kSlotBytes + sizeof(int64_t);
    all[r].assign(inline_bytes, static_cast<size_t>(std::min(lengths[r], kInlineBytes)));
  }
  if (max_rest <= 0) return all;
  // Step 2, only when a string is longer than its slot (every rank knows
  // that from step 1): the rest of each string, padded to the longest rest.
  std::vector<at::Tensor> in = {at::zeros({max_rest}, at::kByte)};
  if (length > kInlineBytes) {
    std::memcpy(in[0].data_ptr(), mine.data() + kInlineBytes, static_cast<size_t>(length - kInlineBytes));
  }
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < w; ++r) out[0].push_back(at::empty({max_rest}, at::kByte));
  s = RunCollective(pg, "allgather of bytes", [&] { return pg.allgather(out, in); });
  if (!s.ok()) return s;
  for (int r = 0; r < w; ++r) {
    if (lengths[r] <= kInlineBytes) continue;
    all[r].append(static_cast<const char*>(out[0][r].data_ptr()), static_cast<size_t>(lengths[r] - kInlineBytes));
  }
  return all;
}

absl::StatusOr<std::vector<std::string>> GatherStrings(c10d::ProcessGroup& pg, const std::string& mine,
                                                       const std::vector<int64_t>& lengths, int root) {
  const int w = pg.getSize();
  const int rank = pg.getRank();
  if (static_cast<int>(lengths.size()) != w || root < 0 || root >= w ||
      lengths[static_cast<size_t>(rank)] != static_cast<int64_t>(mine.size())) {
    return absl::InvalidArgumentError(absl::StrCat("gather of strings: ", lengths.size(), " lengths for ", w,
                                                   " ranks, root ", root, ", this rank's string of ", mine.size(),
                                                   " bytes"));
  }
  int64_t max_len = 1;  // Gloo wants non-empty buffers
  for (int64_t n : lengths) max_len = std::max(max_len, n);
  std::vector<at::Tensor> in = {at::empty({max_len}, at::kByte)};
  char* bytes = static_cast<char*>(in[0].data_ptr());
  std::memcpy(bytes, mine.data(), mine.size());
  std::memset(bytes + mine.size(), 0, static_cast<size_t>(max_len) - mine.size());
  std::vector<std::vector<at::Tensor>> out;
  if (rank == root) {
    out.resize(1);
    for (int r = 0; r < w; ++r) out[0].push_back(at::empty({max_len}, at::kByte));
  }
  c10d::GatherOptions options;
  options.rootRank = root;
  absl::Status s = RunCollective(pg, "gather of bytes", [&] { return pg.gather(out, in, options); });
  if (!s.ok()) return s;
  std::vector<std::string> all;
  if (rank != root) return all;
  all.resize(static_cast<size_t>(w));
  for (int r = 0; r < w; ++r) {
    all[r].assign(static_cast<const char*>(out[0][r].data_ptr()), static_cast<size_t>(lengths[r]));
    out[0][r] = at::Tensor();  // freed as it is copied: the root holds about one copy at a time
  }
  return all;
}

at::Tensor ByteView(const at::Tensor& contiguous) {
  // The view holds the tensor (its deleter owns a reference), so a collective
  // still in flight when the caller lets go of it writes into live memory.
  return at::from_blob(contiguous.data_ptr(), {contiguous.numel() * static_cast<int64_t>(contiguous.element_size())},
                       [keep = contiguous](void*) {}, at::TensorOptions().dtype(at::kByte).device(contiguous.device()));
}

absl::Status AllToAllBytes(c10d::ProcessGroup& pg, at::Tensor send,
                           const std::vector<int64_t>& send_counts, at::Tensor recv,
                           const std::vector<int64_t>& recv_counts) {
  int64_t send_total = 0, recv_total = 0;
  for (int64_t c : send_counts) send_total += c;
  for (int64_t c : recv_counts) recv_total += c;
  // Gloo wants each buffer's length to equal the sum of its splits.
  at::Tensor send_view = send.narrow(0, 0, send_total);
  at::Tensor recv_view = recv.narrow(0, 0, recv_total);
  std::vector<int64_t> out_splits = recv_counts;
  std::vector<int64_t> in_splits = send_counts;
  return RunCollective(pg, "alltoall", [&] {
    return compat::AllToAllSingle(pg, recv_view, send_view, out_splits, in_splits);
  });
}

}  // namespace shardlight::sharded
