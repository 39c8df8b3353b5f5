// LightningModule: the base class of a model trained by shardlight's Trainer.
//
// Its constructor asks the feature gate whether this build supports
// ShardedTensor state dicts. If so it registers the two ShardedTensor hooks
// on itself (they cover sharded members anywhere in its tree); if not it
// records why (gate().reason; printed to stderr when SHARDLIGHT_DEBUG is set), and registering a sharded member fails with
// an error naming the missing capability. Dense-only modules behave the same
// either way.
//
// ConfigureShardedModel() runs once a process group exists (the Trainer calls
// it on every rank): that is where sharded members are created, since a
// module is constructed before any group is up.
#ifndef SHARDLIGHT_LIGHTNING_LIGHTNING_MODULE_H_
#define SHARDLIGHT_LIGHTNING_LIGHTNING_MODULE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "lightning/feature_gate.h"
#include "lightning/sharded_module.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::lightning {

// What ConfigureShardedModel gets: the group and the run's seed.
struct ShardedContext {
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 0;
};

class LightningModule : public ShardedModule {
 public:
  explicit LightningModule(std::string name = "LightningModule", const FeatureDecision& gate = ShardedFeature());

  // Creates sharded members; the default creates none.
  virtual absl::Status ConfigureShardedModel(const ShardedContext& ctx);

  bool sharded_hooks_registered() const { return hooks_registered_; }

 private:
  bool hooks_registered_ = false;
  HookHandle state_dict_hook_;
  HookHandle load_pre_hook_;
};

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_LIGHTNING_MODULE_H_
