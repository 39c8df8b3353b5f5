#include "lightning/model_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {

absl::StatusOr<std::shared_ptr<ModelCheckpoint>> ModelCheckpoint::Create(ModelCheckpointOptions options) {
  const auto bad = [](const std::string& what) { return absl::InvalidArgumentError("ModelCheckpoint: " + what); };
  if (options.monitor.empty()) return bad("monitor is empty; name a key ValidationStep logs");
  if (options.mode != "min" && options.mode != "max") return bad("mode is '" + options.mode + "'; want min or max");
  if (options.save_top_k < -1) return bad(absl::StrCat("save_top_k is ", options.save_top_k, "; want >= -1"));
  return std::shared_ptr<ModelCheckpoint>(new ModelCheckpoint(std::move(options)));
}

std::string ModelCheckpoint::Describe() const {
  return absl::StrCat("ModelCheckpoint(monitor='", options_.monitor, "', mode='", options_.mode,
                      "', save_top_k=", options_.save_top_k, ")");
}

size_t ModelCheckpoint::KthIndex() const {
  // Python's max (mode min) / min (mode max) keep the first of equal values.
  size_t kth = 0;
  for (size_t i = 1; i < best_.size(); ++i) {
    const bool worse = options_.mode == "min" ? best_[i].second > best_[kth].second : best_[i].second < best_[kth].second;
    if (worse) kth = i;
  }
  return kth;
}

absl::Status ModelCheckpoint::OnValidationEnd(const TrainState&, int64_t step,
                                              const std::map<std::string, double>& metrics) {
  entered_ = -1;
  const auto it = metrics.find(options_.monitor);
  if (it == metrics.end()) {
    std::vector<std::string> logged;
    for (const auto& [key, value] : metrics) logged.push_back(key);
    return absl::InvalidArgumentError(absl::StrCat(Describe(), ": monitor '", options_.monitor,
                                                   "' is not logged by ValidationStep (it logs: ",
                                                   absl::StrJoin(logged, ", "), ")"));
  }
  double current = it->second;
  const int64_t k = options_.save_top_k;
  if (k == 0) return absl::OkStatus();
  if (k > 0 && static_cast<int64_t>(best_.size()) >= k) {
    const size_t kth = KthIndex();
    // torch.lt / torch.gt: a tie, or a NaN, is not better.
    const bool better = options_.mode == "min" ? current < best_[kth].second : current > best_[kth].second;
    if (!better) return absl::OkStatus();
    best_.erase(best_.begin() + static_cast<std::ptrdiff_t>(kth));
  }
  if (std::isnan(current)) {
    current = options_.mode == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  }
  best_.emplace_back(step, current);
  entered_ = step;
  return absl::OkStatus();
}

std::vector<int64_t> ModelCheckpoint::BestSteps() const {
  std::vector<int64_t> steps;
  for (const auto& [step, score] : best_) steps.push_back(step);
  std::sort(steps.begin(), steps.end());
  return steps;
}

int64_t ModelCheckpoint::best_model_step() const {
  if (best_.empty()) return -1;
  size_t best = 0;
  for (size_t i = 1; i < best_.size(); ++i) {
    const bool better = options_.mode == "min" ? best_[i].second < best_[best].second : best_[i].second > best_[best].second;
    if (better) best = i;
  }
  return best_[best].first;
}

void ModelCheckpoint::Bind(int64_t max_steps, int64_t val_check_interval) {
  const int64_t validations = val_check_interval > 0 ? max_steps / val_check_interval : 0;
  const int64_t capacity = std::max<int64_t>(1, options_.save_top_k >= 0 ? options_.save_top_k : validations);
  steps_ = at::full({capacity}, -1, at::kLong);
  scores_ = at::full({capacity}, std::numeric_limits<double>::quiet_NaN(), at::kDouble);
}

absl::Status ModelCheckpoint::AddStateTo(sharded::StateDict& dict, const std::string& prefix) {
  if (!steps_.defined()) return absl::FailedPreconditionError(Describe() + " is not bound to a run");
  if (static_cast<int64_t>(best_.size()) > steps_.size(0)) {
    return absl::InternalError(absl::StrCat(Describe(), " keeps ", best_.size(), " steps, more than its state's ",
                                            steps_.size(0)));
  }
  steps_.fill_(-1);
  scores_.fill_(std::numeric_limits<double>::quiet_NaN());
  for (size_t i = 0; i < best_.size(); ++i) {
    steps_[static_cast<int64_t>(i)].fill_(best_[i].first);
    scores_[static_cast<int64_t>(i)].fill_(best_[i].second);
  }
  SL_RETURN_IF_ERROR(dict.Insert(prefix + "best_steps", steps_));
  return dict.Insert(prefix + "best_scores", scores_);
}

void ModelCheckpoint::RestoreFromState() {
  Reset();
  for (int64_t i = 0; i < steps_.size(0); ++i) {
    const int64_t step = steps_[i].item<int64_t>();
    if (step >= 0) best_.emplace_back(step, scores_[i].item<double>());
  }
}

}  // namespace shardlight::lightning
