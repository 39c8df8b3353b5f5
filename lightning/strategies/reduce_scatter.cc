#include "lightning/strategies/reduce_scatter.h"

#include "sharded/agreement.h"
#include "sharded/collectives.h"
#include "sharded/no_throw.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {
namespace {

// c10d's flat reduce-scatter under its one name every LibTorch has (1.13's
// only; 2.x keeps it, deprecated, as an alias of reduce_scatter_single).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
c10::intrusive_ptr<c10d::Work> FlatReduceScatter(c10d::ProcessGroup& pg, at::Tensor& output, at::Tensor& input) {
  return pg._reduce_scatter_base(output, input);
}
#pragma GCC diagnostic pop

}  // namespace

absl::StatusOr<bool> ProbeReduceScatter(c10d::ProcessGroup& pg) {
  const int w = pg.getSize();
  const int rank = pg.getRank();
  if (w == 1) return true;
  // Rank r sends (r + 1) * (j + 1) to slot j: slot j sums to (j + 1) * w (w + 1) / 2.
  bool works = false;
  sharded::NoThrow([&]() -> absl::Status {
    std::vector<at::Tensor> output = {at::zeros({1}, at::kFloat)};
    std::vector<std::vector<at::Tensor>> input(1);
    for (int j = 0; j < w; ++j) input[0].push_back(at::full({1}, (rank + 1.0) * (j + 1.0), at::kFloat));
    pg.reduce_scatter(output, input)->wait();
    works = output[0].item<double>() == (rank + 1.0) * w * (w + 1) / 2.0;
    return absl::OkStatus();
  }).IgnoreError();  // a throw (not supported) is the answer "no"
  SL_ASSIGN_OR_RETURN(const std::vector<std::string> all,
                      sharded::AgreeAndGather(pg, {absl::OkStatus(), 0, works ? "1" : "0"},
                                              {"fsdp reduce_scatter probe"}));
  for (const std::string& answer : all) {
    if (answer != "1") return false;
  }
  return true;
}

absl::StatusOr<bool> ProbeFlatReduceScatter(c10d::ProcessGroup& pg, c10::ScalarType dtype) {
  const int w = pg.getSize();
  const int rank = pg.getRank();
  if (w == 1) return true;
  // As ProbeReduceScatter, the slots laid end to end in one tensor.
  bool works = false;
  sharded::NoThrow([&]() -> absl::Status {
    at::Tensor output = at::zeros({1}, at::TensorOptions().dtype(dtype));
    at::Tensor input = at::arange(1, w + 1, at::TensorOptions().dtype(dtype)).mul(rank + 1.0);
    FlatReduceScatter(pg, output, input)->wait();
    works = output.scalar_type() == dtype && output.item<double>() == (rank + 1.0) * w * (w + 1) / 2.0;
    return absl::OkStatus();
  }).IgnoreError();  // a throw (not supported) is the answer "no"
  SL_ASSIGN_OR_RETURN(const std::vector<std::string> all,
                      sharded::AgreeAndGather(pg, {absl::OkStatus(), 0, works ? "1" : "0"},
                                              {"fsdp _reduce_scatter_base probe"}));
  for (const std::string& answer : all) {
    if (answer != "1") return false;
  }
  return true;
}

absl::StatusOr<at::Tensor> ReduceScatterFlat(c10d::ProcessGroup& pg, at::Tensor flat, ReduceScatterPath path,
                                             absl::string_view op) {
  const int w = pg.getSize();
  const int64_t n = flat.numel() / w;
  if (w == 1) return flat;
  if (path == ReduceScatterPath::kFlat) {
    at::Tensor output = at::empty({n}, flat.options());
    SL_RETURN_IF_ERROR(sharded::RunCollective(pg, op, [&] { return FlatReduceScatter(pg, output, flat); }));
    return output;
  }
  if (path == ReduceScatterPath::kList) {
    std::vector<at::Tensor> slots;
    for (int r = 0; r < w; ++r) slots.push_back(flat.narrow(0, r * n, n));
    return ReduceScatterSlots(pg, std::move(slots), true, op);
  }
  std::vector<at::Tensor> all = {flat};
  SL_RETURN_IF_ERROR(sharded::RunCollective(pg, op, [&] { return pg.allreduce(all); }));
  return all[0].narrow(0, pg.getRank() * n, n);
}

absl::StatusOr<at::Tensor> ReduceScatterSlots(c10d::ProcessGroup& pg, std::vector<at::Tensor> slots,
                                              bool reduce_scatter, absl::string_view op) {
  const int w = pg.getSize();
  if (w == 1) return slots[0];
  if (reduce_scatter) {
    std::vector<at::Tensor> output = {at::empty_like(slots[0])};
    std::vector<std::vector<at::Tensor>> input = {std::move(slots)};
    SL_RETURN_IF_ERROR(sharded::RunCollective(pg, op, [&] { return pg.reduce_scatter(output, input); }));
    return output[0];
  }
  const int64_t n = slots[0].numel();
  std::vector<at::Tensor> all = {at::cat(slots)};
  SL_RETURN_IF_ERROR(sharded::RunCollective(pg, op, [&] { return pg.allreduce(all); }));
  return all[0].narrow(0, pg.getRank() * n, n);
}

}  // namespace shardlight::lightning
