#include "lightning/gate/collective_probe.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "sharded/compat/c10d_compat.h"
#include "sharded/no_throw.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {
namespace {

absl::Status Failed(absl::string_view collective, absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat("collective probe: ", collective, " failed: ", why));
}

std::string Show(const at::Tensor& t) {
  at::Tensor flat = t.to(at::kCPU).reshape({-1}).contiguous();
  std::vector<int64_t> values(flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + flat.numel());
  return absl::StrCat("[", absl::StrJoin(values, ", "), "]");
}

// Launches one collective and waits for it; a throw or timeout names it.
template <typename Launch>
absl::Status Run(absl::string_view name, std::chrono::milliseconds timeout, Launch&& launch) {
  absl::Status s = sharded::NoThrow([&]() -> absl::Status {
    c10::intrusive_ptr<c10d::Work> work = launch();
    if (!work) return absl::InternalError("the process group returned no work");
    work->wait(timeout);  // throws "Operation timed out!" after `timeout`
    return absl::OkStatus();
  });
  return s.ok() ? s : Failed(name, s.message());
}

absl::Status Expect(absl::string_view name, absl::string_view what, const at::Tensor& got, const at::Tensor& want) {
  if (got.sizes() == want.sizes() && at::equal(got.to(at::kCPU), want)) return absl::OkStatus();
  return Failed(name, absl::StrCat("wrong data in ", what, ": expected ", Show(want), ", got ", Show(got)));
}

}  // namespace

absl::Status ProbeCollectives(c10d::ProcessGroup& pg, std::chrono::milliseconds timeout, at::Device device) {
  if (timeout <= std::chrono::milliseconds(0)) return absl::InvalidArgumentError("probe timeout must be positive");
  const int rank = pg.getRank();
  const int w = pg.getSize();
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  auto full = [&](int64_t n, int64_t value) { return at::full({n}, value, opts); };
  auto cpu_full = [](int64_t n, int64_t value) { return at::full({n}, value, at::kLong); };

  // allgather: every rank contributes 100 + rank.
  std::vector<at::Tensor> ag_in = {full(2, 100 + rank)};
  std::vector<std::vector<at::Tensor>> ag_out(1);
  for (int r = 0; r < w; ++r) ag_out[0].push_back(full(2, -1));
  SL_RETURN_IF_ERROR(Run("allgather", timeout, [&] { return pg.allgather(ag_out, ag_in); }));
  for (int r = 0; r < w; ++r) {
    SL_RETURN_IF_ERROR(Expect("allgather", absl::StrCat("rank ", r, "'s slot"), ag_out[0][r], cpu_full(2, 100 + r)));
  }

  // alltoall_base with uneven splits, as resharding uses it: rank sends d + 1
  // copies of 1000 * rank + d to rank d, so it receives rank + 1 from each.
  std::vector<int64_t> in_splits(w), out_splits(w, rank + 1);
  at::Tensor a2a_in = at::empty({w * (w + 1) / 2}, opts);
  for (int d = 0, offset = 0; d < w; offset += d + 1, ++d) {
    in_splits[d] = d + 1;
    a2a_in.narrow(0, offset, d + 1).fill_(1000 * rank + d);
  }
  at::Tensor a2a_out = full(w * (rank + 1), -1);
  SL_RETURN_IF_ERROR(
      Run("alltoall_base", timeout, [&] { return sharded::compat::AllToAllSingle(pg, a2a_out, a2a_in, out_splits, in_splits); }));
  at::Tensor a2a_want = at::empty({w * (rank + 1)}, at::kLong);
  for (int s = 0; s < w; ++s) a2a_want.narrow(0, s * (rank + 1), rank + 1).fill_(1000 * s + rank);
  SL_RETURN_IF_ERROR(Expect("alltoall_base", "the output", a2a_out, a2a_want));

  // broadcast from the last rank, so a root other than 0 is exercised.
  const int bcast_root = w - 1;
  std::vector<at::Tensor> bcast = {full(3, rank == bcast_root ? 7000 + bcast_root : -1)};
  c10d::BroadcastOptions bcast_opts;
  bcast_opts.rootRank = bcast_root;
  SL_RETURN_IF_ERROR(Run("broadcast", timeout, [&] { return pg.broadcast(bcast, bcast_opts); }));
  SL_RETURN_IF_ERROR(Expect("broadcast", "the tensor", bcast[0], cpu_full(3, 7000 + bcast_root)));

  // gather to rank 0: only the root passes output buffers.
  std::vector<at::Tensor> gather_in = {full(1, 200 + rank)};
  std::vector<std::vector<at::Tensor>> gather_out;
  if (rank == 0) {
    gather_out.resize(1);
    for (int r = 0; r < w; ++r) gather_out[0].push_back(full(1, -1));
  }
  SL_RETURN_IF_ERROR(Run("gather", timeout, [&] { return pg.gather(gather_out, gather_in); }));
  for (int r = 0; rank == 0 && r < w; ++r) {
    SL_RETURN_IF_ERROR(Expect("gather", absl::StrCat("rank ", r, "'s slot"), gather_out[0][r], cpu_full(1, 200 + r)));
  }

  // scatter from the last rank: rank r receives 300 + r.
  std::vector<at::Tensor> scatter_out = {full(2, -1)};
  std::vector<std::vector<at::Tensor>> scatter_in;
  c10d::ScatterOptions scatter_opts;
  scatter_opts.rootRank = w - 1;
  if (rank == w - 1) {
    scatter_in.resize(1);
    for (int r = 0; r < w; ++r) scatter_in[0].push_back(full(2, 300 + r));
  }
  SL_RETURN_IF_ERROR(Run("scatter", timeout, [&] { return pg.scatter(scatter_out, scatter_in, scatter_opts); }));
  SL_RETURN_IF_ERROR(Expect("scatter", "the output", scatter_out[0], cpu_full(2, 300 + rank)));

  return Run("barrier", timeout, [&] { return pg.barrier(); });
}

}  // namespace shardlight::lightning
