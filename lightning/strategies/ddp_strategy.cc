#include "lightning/strategies/ddp_strategy.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "lightning/strategies/gradient_reduction.h"

namespace shardlight::lightning {
namespace {

class DdpRun : public StrategyRun {
 public:
  explicit DdpRun(c10::intrusive_ptr<c10d::ProcessGroup> pg) : pg_(std::move(pg)) {}
  absl::Status BeforeStep(int64_t) override { return absl::OkStatus(); }
  absl::Status ReduceGradients(const Trainables& trainables, const absl::Status& local,
                               absl::string_view op) override {
    return AllreduceDenseGrads(trainables, *pg_, local, op);
  }
  c10d::ProcessGroup& loss_group() override { return *pg_; }

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StrategyRun>> DdpStrategy::Setup(LightningModule& module,
                                                                const ShardedContext& ctx) const {
  if (!module.sharded_parameters().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        module.name(), "'s parameters are held sharded by an earlier fsdp Fit (e.g. \"",
        module.sharded_parameters().front().first,
        "\"); fit it with FsdpStrategy, or resume a fresh module from a checkpoint under ddp"));
  }
  return std::unique_ptr<StrategyRun>(new DdpRun(ctx.pg));
}

}  // namespace shardlight::lightning
