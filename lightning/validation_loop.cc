#include "lightning/validation_loop.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lightning/strategies/gradient_reduction.h"
#include "sharded/agreement.h"
#include "sharded/no_throw.h"
#include "sharded/stable_hash.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {
namespace {

std::string KeysOf(const std::map<std::string, double>& values) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : values) keys.push_back(key);
  return absl::StrJoin(keys, ", ");
}

}  // namespace

absl::StatusOr<std::map<std::string, double>> RunValidation(LightningModule& module, const DataSource& val_data,
                                                            int64_t batches, StrategyRun& parallel,
                                                            const Trainables& trainables, const StepContext& ctx) {
  const std::string op = absl::StrCat("validation at step ", ctx.step);
  SL_RETURN_IF_ERROR(parallel.BeforeStep(ctx.step));
  std::map<std::string, double> sums;
  const absl::Status local = sharded::NoThrow([&]() -> absl::Status {
    at::NoGradGuard no_grad;
    for (int64_t b = 0; b < batches; ++b) {
      SL_ASSIGN_OR_RETURN(const ValidationLog logged, module.ValidationStep(val_data.GetBatch(b), ctx));
      std::map<std::string, double> values;
      for (const auto& [key, value] : logged) {
        if (!value.defined() || value.numel() != 1) {
          return absl::InvalidArgumentError(absl::StrCat("ValidationStep logged '", key, "' with ",
                                                         value.defined() ? value.numel() : 0,
                                                         " elements at batch ", b, "; want a scalar"));
        }
        values[key] = value.detach().to(at::kDouble).item<double>();
      }
      if (b > 0 && KeysOf(values) != KeysOf(sums)) {
        return absl::InvalidArgumentError(absl::StrCat("ValidationStep logged {", KeysOf(values), "} at batch ", b,
                                                       " but {", KeysOf(sums), "} at batch 0"));
      }
      for (const auto& [key, value] : values) sums[key] += value;
    }
    return absl::OkStatus();
  });
  // The verdict travels with the strategy's reduction (nothing to reduce but
  // fsdp reshards its parameters there).
  SL_RETURN_IF_ERROR(parallel.ReduceGradients(trainables, local, op));
  const std::string keys = KeysOf(sums);
  SL_RETURN_IF_ERROR(sharded::AgreeOn(parallel.loss_group(), sharded::StableHash(keys),
                                      {op, absl::StrCat("ValidationStep's logged keys {", keys, "}")}));
  std::vector<double> flat;
  for (const auto& [key, value] : sums) flat.push_back(value);
  at::Tensor reduced = at::tensor(flat, at::kDouble);
  if (!flat.empty()) SL_RETURN_IF_ERROR(AllreduceWithVerdict(parallel.loss_group(), reduced, absl::OkStatus(), op));
  std::map<std::string, double> means;
  int64_t i = 0;
  for (const auto& [key, value] : sums) means[key] = reduced[i++].item<double>() / static_cast<double>(batches);
  return means;
}

absl::Status CheckMonitoredKeys(LightningModule& module, const DataSource& val_data, int64_t batches,
                                StrategyRun& parallel, const Trainables& trainables, const StepContext& ctx,
                                const std::vector<std::string>& monitored) {
  SL_ASSIGN_OR_RETURN(const auto metrics,
                      RunValidation(module, val_data, batches, parallel, trainables, ctx));
  for (const std::string& key : monitored) {
    if (metrics.count(key) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("monitor '", key, "' is not logged by ValidationStep (it logs: ",
                                                     metrics.empty() ? "nothing" : KeysOf(metrics), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace shardlight::lightning
