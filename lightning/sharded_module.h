// ShardedModule: a torch::nn::Module that can hold ShardedTensor and mesh
// tensor (sharded/mesh/) members, and the two state-dict hooks that carry them.
//
// Sharded and mesh members live on any ShardedModule of a tree and are keyed
// like parameters ("child.grandchild.name"). They reach the state dict only
// through the hooks, which a LightningModule registers on itself in its
// constructor when the feature gate allows (see lightning_module.h); the hooks
// then cover every ShardedModule below it. A mesh member enters the state
// dict as its checkpoint view (mesh_checkpoint.h: each distinct box once,
// owned by one of its replicas), so checkpoints save and reshard it like any
// ShardedTensor; a mesh member with a Partial placement cannot be saved
// (StateDictOf fails with FailedPrecondition: redistribute it first).
//
// RegisterShardedTensor / RegisterMeshTensor fail with FailedPrecondition
// naming the missing capability when the gate said no, InvalidArgument for a
// bad or clashing name, AlreadyExists for a duplicate.
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
#include "sharded/mesh/mesh_tensor.h"
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

  absl::Status RegisterMeshTensor(const std::string& name, sharded::mesh::MeshTensor tensor);
  // nullptr when there is no such member; stable like sharded_tensor(). A
  // load copies into the member's local() in place.
  sharded::mesh::MeshTensor* mesh_tensor(const std::string& name);
  const std::deque<std::pair<std::string, sharded::mesh::MeshTensor>>& mesh_tensors() const { return mesh_; }

  // Dense parameters of this module's tree that a training strategy holds
  // sharded between steps (FSDP, lightning/strategies/fsdp_strategy.h),
  // keyed by their state-dict key relative to this module. Each stands in
  // for its parameter wherever state is kept: TrainablesOf lists it instead
  // of the parameter (so optimizer state is sharded like it), the state-dict
  // hook puts it under the parameter's key, and the load pre-hook loads (and
  // reshards) into it, after which the parameter's dense entry counts as
  // loaded. The parameter itself keeps its registration and shares the
  // shard's storage between steps. Only the module the hooks run on (a
  // LightningModule: the Trainer's root) consults its own.
  // InvalidArgument for an empty key, AlreadyExists for one held already.
  absl::Status HoldParameterSharded(const std::string& key, sharded::ShardedTensor shard);
  // nullptr when `key` is not held sharded; stable like sharded_tensor().
  sharded::ShardedTensor* sharded_parameter(const std::string& key);
  const std::deque<std::pair<std::string, sharded::ShardedTensor>>& sharded_parameters() const {
    return sharded_parameters_;
  }

  const FeatureDecision& gate() const { return gate_; }

  // True for a module that registered the ShardedTensor hooks on itself (a
  // LightningModule): an enclosing module's hooks leave its subtree to it.
  virtual bool OwnsShardedHooks() const { return false; }

 private:
  // Gate, name and duplicate checks shared by both kinds of member.
  absl::Status CheckNewMember(const std::string& kind, const std::string& name);

  FeatureDecision gate_;
  std::deque<std::pair<std::string, sharded::ShardedTensor>> sharded_;  // deque: stable addresses
  std::deque<std::pair<std::string, sharded::mesh::MeshTensor>> mesh_;
  std::deque<std::pair<std::string, sharded::ShardedTensor>> sharded_parameters_;
};

// Every sharded member of the tree under `root`, with its full key. With
// `skip_hook_owners`, subtrees below `root` whose root OwnsShardedHooks() are
// left out: their own hooks cover them.
std::vector<std::pair<std::string, sharded::ShardedTensor*>> ShardedMembers(torch::nn::Module& root,
                                                                            const std::string& prefix,
                                                                            bool skip_hook_owners = false);

// Every mesh member of the tree under `root`, as ShardedMembers.
std::vector<std::pair<std::string, sharded::mesh::MeshTensor*>> MeshMembers(torch::nn::Module& root,
                                                                           const std::string& prefix,
                                                                           bool skip_hook_owners = false);

// The state-dict hook: adds every sharded and mesh member of the tree under
// `module` (mesh members as their checkpoint views), and puts each parameter
// `module` holds sharded in place of its dense entry.
absl::Status AddShardedMembersToStateDict(torch::nn::Module& module, StateDict& dict, const std::string& prefix);

// The load pre-hook: takes the entries of the tree's sharded and mesh members
// out of `dict` and stages their values into the members -- resharding (a
// collective: every rank must load together) when the stored layout differs,
// slicing locally when the entry is a dense full tensor. A mesh member's
// values are assembled in a staging copy (its replicas filled from their
// owner, collective) before anything is committed. A member without an entry
// is reported missing. Global shape or dtype mismatch fails naming the key.
// The parameters `module` holds sharded load the same way, as sharded members.
absl::Status RestoreShardedMembersBeforeLoad(torch::nn::Module& module, StateDict& dict, const std::string& prefix,
                                             LoadReport& report);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_SHARDED_MODULE_H_
