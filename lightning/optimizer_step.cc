#include "lightning/optimizer_step.h"

#include <ATen/core/grad_mode.h>

#include "absl/strings/str_cat.h"
#include "lightning/autocast_compat.h"
#include "sharded/no_throw.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {

absl::Status AccumulateMicroBatches(LightningModule& module, const DataSource& data, const StepContext& ctx,
                                    int64_t accumulate, at::Tensor* loss, bool autocast) {
  return sharded::NoThrow([&]() -> absl::Status {
    double sum = 0;
    for (int64_t i = 0; i < accumulate; ++i) {
      const Batch batch = data.GetBatch(MicroBatchIndex(ctx.step, accumulate, i));
      absl::StatusOr<at::Tensor> stepped;
      {
        const CpuAutocast scope(autocast);
        stepped = module.TrainingStep(batch, ctx);
      }
      SL_ASSIGN_OR_RETURN(at::Tensor micro, std::move(stepped));
      if (!micro.defined() || micro.numel() != 1) {
        return absl::InvalidArgumentError(absl::StrCat("TrainingStep returned a loss with ",
                                                       micro.defined() ? micro.numel() : 0,
                                                       " elements; want a scalar"));
      }
      if (micro.requires_grad()) (accumulate == 1 ? micro : micro / static_cast<double>(accumulate)).backward();
      sum += micro.detach().to(at::kDouble).item<double>();
    }
    *loss = at::full({}, sum / static_cast<double>(accumulate), at::kDouble);
    return absl::OkStatus();
  });
}

}  // namespace shardlight::lightning
