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

absl::StatusOr<std::vector<std::string>> AllgatherStrings(c10d::ProcessGroup& pg,
                                                          const std::string& mine) {
  const int w = pg.getSize();
  // Step 1: every rank learns every length.
  std::vector<at::Tensor> len_in = {at::full({1}, static_cast<int64_t>(mine.size()), at::kLong)};
  std::vector<std::vector<at::Tensor>> len_out(1);
  for (int r = 0; r < w; ++r) len_out[0].push_back(at::empty({1}, at::kLong));
  absl::Status s = RunCollective(pg, "allgather of lengths", [&] { return pg.allgather(len_out, len_in); });
  if (!s.ok()) return s;
  int64_t max_len = 1;  // Gloo wants non-empty buffers
  for (auto& t : len_out[0]) max_len = std::max(max_len, t.item<int64_t>());
  // Step 2: bytes, padded to the longest.
  std::vector<at::Tensor> in = {at::zeros({max_len}, at::kByte)};
  std::memcpy(in[0].data_ptr(), mine.data(), mine.size());
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < w; ++r) out[0].push_back(at::empty({max_len}, at::kByte));
  s = RunCollective(pg, "allgather of bytes", [&] { return pg.allgather(out, in); });
  if (!s.ok()) return s;
  std::vector<std::string> all(w);
  for (int r = 0; r < w; ++r) {
    const int64_t n = len_out[0][r].item<int64_t>();
    all[r].assign(static_cast<const char*>(out[0][r].data_ptr()), n);
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
