#include "lightning/metrics/perplexity.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::metrics {

Perplexity::Perplexity(std::optional<int64_t> ignore_index)
    : MeanMetric("Perplexity", NanStrategy::Disable()), ignore_index_(ignore_index) {}

std::string Perplexity::Describe() const {
  return absl::StrCat("ignore_index=", ignore_index_ ? absl::StrCat(*ignore_index_) : "none");
}

absl::Status Perplexity::Update(const at::Tensor& token_losses) { return MeanMetric::Update(token_losses); }

absl::Status Perplexity::Update(const at::Tensor& preds, const at::Tensor& target) {
  SL_RETURN_IF_ERROR(CheckUsable());
  if (!preds.defined() || !target.defined() || !at::isFloatingType(preds.scalar_type()) ||
      target.scalar_type() != at::kLong) {
    return Reject(absl::InvalidArgumentError("preds must be floating and target int64"));
  }
  const bool logits = preds.dim() == target.dim() + 1;
  if (logits ? preds.sizes().slice(0, target.dim()) != target.sizes() : preds.sizes() != target.sizes()) {
    return Reject(absl::InvalidArgumentError(absl::StrCat(
        "preds [", absl::StrJoin(preds.sizes(), ", "), "] must be logits [..., vocab] over target [",
        absl::StrJoin(target.sizes(), ", "), "] or per-token losses of target's shape")));
  }
  at::NoGradGuard no_grad;
  const at::Tensor ids = target.reshape({-1});
  const at::Tensor keep = ignore_index_ ? ids.ne(*ignore_index_) : at::ones_like(ids, at::kBool);
  at::Tensor losses;
  if (logits) {
    const int64_t vocab = preds.size(-1);
    const at::Tensor kept_ids = ids.masked_select(keep);
    if (kept_ids.numel() > 0 && (kept_ids.min().item<int64_t>() < 0 || kept_ids.max().item<int64_t>() >= vocab)) {
      return Reject(absl::InvalidArgumentError(absl::StrCat("target holds a token id outside [0, ", vocab, ")",
                                                            ignore_index_ ? " that is not ignore_index" : "")));
    }
    const at::Tensor log_probs = preds.reshape({-1, vocab}).to(at::kDouble).log_softmax(1);
    losses = -log_probs.index({keep}).gather(1, kept_ids.unsqueeze(1)).squeeze(1);
  } else {
    losses = preds.reshape({-1}).masked_select(keep);
  }
  return MeanMetric::Update(losses);
}

absl::StatusOr<sharded::StateValue> Perplexity::ComputeValue() {
  SL_ASSIGN_OR_RETURN(sharded::StateValue mean, MeanMetric::ComputeValue());
  return sharded::StateValue(std::get<at::Tensor>(mean).exp());
}

}  // namespace shardlight::lightning::metrics
