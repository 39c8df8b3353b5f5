// Precision: Lightning 2.x's Trainer(precision=...) for TrainerOptions::
// precision.
//
//   "32-true"     (default) float32 parameters, optimizer state and compute.
//   "bf16-mixed"  parameters and optimizer state float32; TrainingStep and
//                 ValidationStep run under CPU autocast to bfloat16
//                 (autocast_compat.h; the backward pass and the optimizer
//                 outside it), as Lightning's MixedPrecision plugin on CPU.
//   "bf16-true"   the module's floating parameters and buffers are converted
//                 to bfloat16 before the strategy lays them out (so the
//                 optimizer state is bfloat16 too) and every floating tensor
//                 of a batch is converted to bfloat16 before the step sees
//                 it, as Lightning's HalfPrecision("bf16-true") plugin.
// The same under every strategy (ddp, fsdp, model_parallel): the autocast
// scope is the Trainer's, around the module's step, not the strategy's.
//
// Errors (ParsePrecision and CheckPrecisionSupported, which the Trainer calls before anything
// collective, so every rank fails alike before training): InvalidArgument
// naming the string -- Lightning's other modes ("16-mixed", "16-true",
// "64-true", "transformer-engine", ...) as not supported (float16 autocast
// on CPU is not what LibTorch's CPU autocast does in 1.13), anything else as
// unknown, with the three accepted. Lightning's short aliases ("32", "bf16",
// 32, 16) are refused too: say the full name.
#ifndef SHARDLIGHT_LIGHTNING_PRECISION_H_
#define SHARDLIGHT_LIGHTNING_PRECISION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lightning/lightning_module.h"
#include "lightning/trainer.h"

namespace shardlight::lightning {

enum class Precision { k32True, kBf16Mixed, kBf16True };

absl::StatusOr<Precision> ParsePrecision(const std::string& name);

// Whether this build can run `precision` under the strategy named `strategy`
// ("ddp", "fsdp", "model_parallel"): on LibTorch 1.13, whose gloo
// collectives carry no bfloat16, bf16-true under fsdp (its all-gather) and
// bf16-mixed / bf16-true under model_parallel (its TP all-reduce of
// activations) are InvalidArgument naming the mode, the strategy and why.
absl::Status CheckPrecisionSupported(Precision precision, const std::string& name, const std::string& strategy);

// bf16-true: the module's floating parameters and buffers to bfloat16, in
// place (the tensors keep their identity). FailedPrecondition naming a
// sharded member when the module has one (not converted yet).
absl::Status ConvertModuleToBf16(LightningModule& module);

// bf16-true: `data` with every floating tensor of each batch in bfloat16.
std::unique_ptr<DataSource> Bf16Batches(const DataSource& data);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_PRECISION_H_
