// ShardedModule: a torch::nn::Module that can hold ShardedTensor members, and
// the two ShardedTensor state-dict hooks.
//
// Sharded members live on any ShardedModule of a tree and are keyed like
// parameters ("child.grandchild.name"). They reach the state dict only through
// the hooks, which a LightningModule registers on itself in its constructor
// when the feature gate allows (see lightning_module.h); the hooks then cover
// every ShardedModule below it.
//
// RegisterShardedTensor fails with FailedPrecondition naming the missing
// capability when the gate said no, InvalidArgument for a bad or clashing
// name, AlreadyExists for a duplicate.
#ifndef SHARDLIGHT_LIGHTNING_SHARDED_MODULE_H_
#define SHARDLIGHT_LIGHTNING_SHARDED_MODULE_H_

#include <torch/nn/module.h>

#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "lightning/gate/feature_gate.h"
#include "lightning/state_dict_hooks.h"
#include "sharded/sharded_tensor.h"

namespace shardlight::lightning {

class ShardedModule : public torch::nn::Module, public StateDictHookHost {
 public:
  // `gate` decides whether sharded members may be registered here.
  explicit ShardedModule(std::string name = "ShardedModule", const FeatureDecision& gate = ShardedFeature());

  absl::Status RegisterShardedTensor(const std::string& name, sharded::ShardedTensor tensor);
  // nullptr when there is no such member.
  // The pointer stays valid for the module's lifetime (members are never
  // moved: optimizers and load commits hold on to them).
  sharded::ShardedTensor* sharded_tensor(const std::string& name);
  const std::deque<std::pair<std::string, sharded::ShardedTensor>>& sharded_tensors() const { return sharded_; }

  const FeatureDecision& gate() const { return gate_; }

  // True for a module that registered the ShardedTensor hooks on itself (a
  // LightningModule): an enclosing module's hooks leave its subtree to it.
  virtual bool OwnsShardedHooks() const { return false; }

 private:
  FeatureDecision gate_;
  std::deque<std::pair<std::string, sharded::ShardedTensor>> sharded_;  // deque: stable addresses
};

// Every sharded member of the tree under `root`, with its full key. With
// `skip_hook_owners`, subtrees below `root` whose root OwnsShardedHooks() are
// left out: their own hooks cover them.
std::vector<std::pair<std::string, sharded::ShardedTensor*>> ShardedMembers(torch::nn::Module& root,
                                                                            const std::string& prefix,
                                                                            bool skip_hook_owners = false);

// The state-dict hook: adds every sharded member of the tree under `module`.
absl::Status AddShardedMembersToStateDict(torch::nn::Module& module, StateDict& dict, const std::string& prefix);

// The load pre-hook: takes the entries of the tree's sharded members out of
// `dict` and stages their values into the members -- resharding (a
// collective: every rank must load together) when the stored layout differs,
// slicing locally when the entry is a dense full tensor. A member without an
// entry is reported missing. Global shape or dtype mismatch fails naming the key.
absl::Status RestoreShardedMembersBeforeLoad(torch::nn::Module& module, StateDict& dict, const std::string& prefix,
                                             LoadReport& report);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_SHARDED_MODULE_H_
