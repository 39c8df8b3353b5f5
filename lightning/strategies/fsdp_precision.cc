#include "lightning/strategies/fsdp_precision.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sharded/agreement.h"
#include "sharded/dtype_table.h"
#include "sharded/no_throw.h"

namespace shardlight::lightning {
namespace {

constexpr std::pair<const char*, c10::ScalarType> kShortNames[] = {
    {"bf16", c10::ScalarType::BFloat16},
    {"fp16", c10::ScalarType::Half},
    {"fp32", c10::ScalarType::Float},
    {"fp64", c10::ScalarType::Double},
};

std::string Name(c10::ScalarType dtype) {
  const sharded::DtypeInfo* info = sharded::FindDtype(dtype);
  return info != nullptr ? info->torch_name : c10::toString(dtype);
}

// [2, 3] of 0.5 times [3, 2] of 2: every output 3 and every gradient of the
// left operand (d sum / d a) 4, all exact in any floating dtype.
absl::Status ProbeCompute(c10::ScalarType dtype) {
  absl::Status probed = sharded::NoThrow([&]() -> absl::Status {
    at::AutoGradMode grad(true);
    const auto options = at::TensorOptions().dtype(dtype);
    at::Tensor a = at::full({2, 3}, 0.5, options).requires_grad_(true);
    const at::Tensor b = at::full({3, 2}, 2.0, options);
    const at::Tensor y = at::matmul(a, b);
    y.sum().backward();
    if (y.scalar_type() != dtype || !at::equal(y.to(at::kDouble), at::full({2, 2}, 3.0, at::kDouble)) ||
        !a.grad().defined() || !at::equal(a.grad().to(at::kDouble), at::full({2, 3}, 4.0, at::kDouble))) {
      return absl::InternalError("matmul or its backward gave wrong values");
    }
    return absl::OkStatus();
  });
  if (probed.ok()) return probed;
  return absl::InvalidArgumentError(absl::StrCat("fsdp param_dtype ", Name(dtype),
                                                 ": this build cannot compute in it (a probe's matmul: ",
                                                 probed.message(), ")"));
}

}  // namespace

absl::StatusOr<c10::ScalarType> ParseFloatDtype(absl::string_view name, absl::string_view what) {
  for (const auto& [short_name, dtype] : kShortNames) {
    if (name == short_name) return dtype;
  }
  const sharded::DtypeInfo* info = sharded::FindDtypeByTorchName(name);
  if (info == nullptr || !c10::isFloatingType(info->dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", name, "' is not a floating dtype; want bf16, fp16, ",
                                                   "fp32 or fp64 (or torch's name: bfloat16, float32, ...)"));
  }
  return info->dtype;
}

absl::Status CheckFsdpPolicy(const std::optional<c10::ScalarType>& param_dtype,
                             const std::optional<c10::ScalarType>& reduce_dtype) {
  for (const auto& [what, dtype] : {std::pair{"param_dtype", param_dtype}, std::pair{"reduce_dtype", reduce_dtype}}) {
    if (dtype && !c10::isFloatingType(*dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("fsdp ", what, " ", Name(*dtype), " is not a floating dtype"));
    }
  }
  if (param_dtype) return ProbeCompute(*param_dtype);
  return absl::OkStatus();
}

absl::Status CheckPolicyWithPrecision(const std::optional<c10::ScalarType>& param_dtype,
                                      const std::string& precision) {
  if (!param_dtype || precision == "32-true") return absl::OkStatus();
  const bool bf16 = *param_dtype == c10::ScalarType::BFloat16;
  if (precision == "bf16-mixed" && (bf16 || *param_dtype == c10::ScalarType::Float)) return absl::OkStatus();
  if (precision == "bf16-true" && bf16) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "fsdp param_dtype ", Name(*param_dtype), " contradicts precision '", precision, "', which computes in bfloat16",
      precision == "bf16-true" ? " with bfloat16 parameters; use param_dtype bfloat16 or precision 32-true"
                               : "; use param_dtype bfloat16 or float32, or precision 32-true"));
}

absl::Status ProbeReduceDtype(c10d::ProcessGroup& pg, c10::ScalarType dtype, bool reduce_scatter) {
  const int w = pg.getSize();
  const int rank = pg.getRank();
  absl::Status mine = absl::OkStatus();
  if (w > 1) {
    // Rank r sends r + 1 to every slot: each slot sums to w (w + 1) / 2.
    mine = sharded::NoThrow([&]() -> absl::Status {
      const auto options = at::TensorOptions().dtype(dtype);
      std::vector<at::Tensor> slots;
      for (int j = 0; j < w; ++j) slots.push_back(at::full({2}, rank + 1.0, options));
      at::Tensor summed;
      if (reduce_scatter) {
        std::vector<at::Tensor> output = {at::zeros({2}, options)};
        std::vector<std::vector<at::Tensor>> input = {slots};
        pg.reduce_scatter(output, input)->wait();
        summed = output[0];
      } else {
        std::vector<at::Tensor> all = {slots[0]};
        pg.allreduce(all)->wait();
        summed = all[0];
      }
      if (summed.scalar_type() != dtype ||
          !at::equal(summed.to(at::kDouble), at::full({2}, w * (w + 1) / 2.0, at::kDouble))) {
        return absl::InternalError("the sum came back wrong");
      }
      return absl::OkStatus();
    });
    if (!mine.ok()) {
      mine = absl::InvalidArgumentError(absl::StrCat("fsdp reduce_dtype ", Name(dtype), ": this process group cannot ",
                                                     reduce_scatter ? "reduce_scatter " : "allreduce ", Name(dtype),
                                                     " tensors (", mine.message(), ")"));
    }
  }
  return sharded::Agree(pg, mine, "fsdp reduce_dtype probe");
}

}  // namespace shardlight::lightning
