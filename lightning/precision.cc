#include "lightning/precision.h"

#include <ATen/core/grad_mode.h>

#include "absl/strings/str_cat.h"
#include "lightning/autocast_compat.h"
#include "lightning/trainable.h"

namespace shardlight::lightning {

absl::StatusOr<Precision> ParsePrecision(const std::string& name) {
  if (name == "32-true") return Precision::k32True;
  if (name == "bf16-mixed") return Precision::kBf16Mixed;
  if (name == "bf16-true") return Precision::kBf16True;
  for (const char* lightning : {"16-mixed", "16-true", "64-true", "transformer-engine", "transformer-engine-float16"}) {
    if (name == lightning) {
      return absl::InvalidArgumentError(absl::StrCat(
          "precision '", name, "' is Lightning's but not supported here; want 32-true, bf16-mixed or bf16-true"));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown precision '", name, "'; want 32-true, bf16-mixed or bf16-true (Lightning's full names)"));
}

absl::Status CheckPrecisionSupported(Precision precision, const std::string& name, const std::string& strategy) {
  const bool needs_bf16_collectives = (strategy == "fsdp" && precision == Precision::kBf16True) ||
                                      (strategy == "model_parallel" && precision != Precision::k32True);
  if (needs_bf16_collectives && !CollectivesCarryBf16()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "precision '", name, "' under ", strategy, " is not supported on LibTorch 1.13: its gloo collectives carry no "
        "bfloat16 (", strategy == "fsdp" ? "fsdp all-gathers the bf16 parameters" : "tensor parallel all-reduces bf16 "
        "activations", "); use ", strategy == "fsdp" ? "bf16-mixed or " : "", "32-true, or LibTorch >= 2"));
  }
  return absl::OkStatus();
}

absl::Status ConvertModuleToBf16(LightningModule& module) {
  const Trainables trainables = TrainablesOf(module);
  if (!trainables.sharded.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "precision 'bf16-true': ", module.name(), " has sharded members (e.g. '", trainables.sharded.front().key,
        "'), which bf16-true does not convert yet; use bf16-mixed"));
  }
  at::NoGradGuard no_grad;
  // Floating ones only, as torch's Module.to(dtype) (LibTorch's converts every tensor).
  for (at::Tensor t : module.parameters(/*recurse=*/true)) {
    if (t.is_floating_point()) t.set_data(t.to(at::kBFloat16));
  }
  for (at::Tensor t : module.buffers(/*recurse=*/true)) {
    if (t.is_floating_point()) t.set_data(t.to(at::kBFloat16));
  }
  return absl::OkStatus();
}

namespace {

class Bf16Data : public DataSource {
 public:
  explicit Bf16Data(const DataSource& data) : data_(data) {}
  Batch GetBatch(int64_t step) const override {
    Batch batch = data_.GetBatch(step);
    for (at::Tensor& t : batch) {
      if (t.defined() && t.is_floating_point()) t = t.to(at::kBFloat16);
    }
    return batch;
  }
  int64_t steps_per_epoch() const override { return data_.steps_per_epoch(); }

 private:
  const DataSource& data_;
};

}  // namespace

std::unique_ptr<DataSource> Bf16Batches(const DataSource& data) { return std::make_unique<Bf16Data>(data); }

}  // namespace shardlight::lightning
