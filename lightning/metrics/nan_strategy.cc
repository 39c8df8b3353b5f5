#include "lightning/metrics/nan_strategy.h"

#include <cmath>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace shardlight::lightning::metrics {

absl::StatusOr<NanStrategy> NanStrategy::Parse(std::string_view text) {
  if (text == "warn") return Warn();
  if (text == "ignore") return Ignore();
  if (text == "error") return Error();
  if (text == "disable") return Disable();
  double value = 0;
  if (absl::SimpleAtod(std::string(text), &value) && std::isfinite(value)) return Replace(value);
  return absl::InvalidArgumentError(absl::StrCat("nan_strategy \"", std::string(text),
                                                 "\" is none of warn, ignore, error, disable or a finite number"));
}

std::string NanStrategy::Name() const {
  switch (kind_) {
    case Kind::kWarn:
      return "warn";
    case Kind::kIgnore:
      return "ignore";
    case Kind::kError:
      return "error";
    case Kind::kDisable:
      return "disable";
    case Kind::kReplace:
      break;
  }
  return absl::StrCat(value_);
}

absl::StatusOr<std::pair<at::Tensor, at::Tensor>> NanStrategy::Apply(const at::Tensor& values,
                                                                     const at::Tensor& weights,
                                                                     const std::string& metric,
                                                                     bool* warned) const {
  if (kind_ == Kind::kDisable) return std::make_pair(values, weights);
  const at::Tensor nan = values.isnan().logical_or(weights.isnan());
  const int64_t count = nan.sum().item<int64_t>();
  if (count == 0) return std::make_pair(values, weights);
  switch (kind_) {
    case Kind::kError:
      return absl::InvalidArgumentError(
          absl::StrCat("values hold ", count, " NaN (or NaN-weighted) value(s) and nan_strategy is \"error\""));
    case Kind::kReplace:
      return std::make_pair(values.masked_fill(nan, value_), weights.masked_fill(nan, 1.0));
    case Kind::kWarn:
      if (!*warned) {
        std::cerr << "metric '" << metric << "': dropped " << count
                  << " NaN (or NaN-weighted) value(s) (nan_strategy \"warn\"; \"ignore\" drops them silently)\n";
        *warned = true;
      }
      break;
    default:
      break;
  }
  const at::Tensor keep = nan.logical_not();
  return std::make_pair(values.masked_select(keep), weights.masked_select(keep));
}

}  // namespace shardlight::lightning::metrics
