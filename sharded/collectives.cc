#include "sharded/collectives.h"

#include <c10/util/Exception.h>

#include <cstring>
#include <exception>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sharded/rank_monitor.h"

namespace shardlight::sharded {

absl::Status WaitFor(c10d::ProcessGroup& pg, const c10::intrusive_ptr<c10d::Work>& work, const char* op) {
  // With a monitor attached, this wait counts as this rank's arrival, and a
  // failure is explained by who had not arrived or is gone.
  const std::shared_ptr<RankMonitor> monitor = RankMonitor::Of(pg);
  if (monitor) monitor->Arrive();
  std::string error;
  try {
    work->wait();
    return absl::OkStatus();
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    error = e.what();
  }
  const std::string who = monitor ? monitor->Explain() : std::string();
  return absl::UnavailableError(absl::StrCat(op, " failed: ", who.empty() ? "" : absl::StrCat(who, ": "), error));
}

namespace {

// Issues a collective, catching errors thrown at issue time as well.
template <typename F>
absl::Status Collective(c10d::ProcessGroup& pg, const char* op, F&& issue) {
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = issue();
  } catch (const c10::Error& e) {
    return absl::UnavailableError(absl::StrCat(op, " failed: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(op, " failed: ", e.what()));
  }
  return WaitFor(pg, work, op);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> AllgatherStrings(c10d::ProcessGroup& pg,
                                                          const std::string& mine) {
  const int w = pg.getSize();
  // Step 1: every rank learns every length.
  std::vector<at::Tensor> len_in = {at::full({1}, static_cast<int64_t>(mine.size()), at::kLong)};
  std::vector<std::vector<at::Tensor>> len_out(1);
  for (int r = 0; r < w; ++r) len_out[0].push_back(at::empty({1}, at::kLong));
  absl::Status s = Collective(pg, "allgather of lengths", [&] { return pg.allgather(len_out, len_in); });
  if (!s.ok()) return s;
  int64_t max_len = 1;  // Gloo wants non-empty buffers
  for (auto& t : len_out[0]) max_len = std::max(max_len, t.item<int64_t>());
  // Step 2: bytes, padded to the longest.
  std::vector<at::Tensor> in = {at::zeros({max_len}, at::kByte)};
  std::memcpy(in[0].data_ptr(), mine.data(), mine.size());
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < w; ++r) out[0].push_back(at::empty({max_len}, at::kByte));
  s = Collective(pg, "allgather of bytes", [&] { return pg.allgather(out, in); });
  if (!s.ok()) return s;
  std::vector<std::string> all(w);
  for (int r = 0; r < w; ++r) {
    const int64_t n = len_out[0][r].item<int64_t>();
    all[r].assign(static_cast<const char*>(out[0][r].data_ptr()), n);
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
  return Collective(pg, "alltoall", [&] {
    return pg.alltoall_base(recv_view, send_view, out_splits, in_splits);
  });
}

absl::Status AgreeOn(c10d::ProcessGroup& pg, const absl::StatusOr<uint64_t>& local, const std::string& what) {
  // "ok <fingerprint>" or "error <code> <message>".
  const std::string mine = local.ok() ? absl::StrCat("ok ", *local)
                                      : absl::StrCat("error ", static_cast<int>(local.status().code()), " ",
                                                     local.status().message());
  auto all = AllgatherStrings(pg, mine);
  if (!all.ok()) return all.status();
  for (int r = 0; r < pg.getSize(); ++r) {
    const std::string& v = (*all)[r];
    if (!absl::StartsWith(v, "error ")) continue;
    const size_t space = v.find(' ', 6);
    int code = static_cast<int>(absl::StatusCode::kUnknown);
    if (space == std::string::npos || !absl::SimpleAtoi(v.substr(6, space - 6), &code)) {
      return absl::InternalError(absl::StrCat("rank ", r, ": malformed verdict"));
    }
    return absl::Status(static_cast<absl::StatusCode>(code), absl::StrCat("rank ", r, ": ", v.substr(space + 1)));
  }
  for (int r = 1; r < pg.getSize(); ++r) {
    if ((*all)[r] != (*all)[0]) {
      return absl::InvalidArgumentError(
          absl::StrCat("ranks disagree on the ", what, ": rank 0 and rank ", r, " passed different values"));
    }
  }
  return absl::OkStatus();
}

uint64_t StableHash(absl::string_view text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace shardlight::sharded
