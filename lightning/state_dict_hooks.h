// State dicts of torch::nn::Module trees, with per-module hooks.
//
// StateDictOf(module) collects parameters and buffers under dotted names
// ("encoder.layer0.weight"), then runs the state-dict hooks of every hook host
// in the tree, each with that module's prefix ("encoder."). LoadStateDict runs
// the load pre-hooks first (they may consume entries), then checks every dense
// entry against its parameter/buffer, and only when everything checks out
// copies the values in: a failed load changes nothing.
//
// Hooks receive their module as an argument, so a hook never needs to hold a
// reference to it: a module registering hooks on itself is still destroyed
// when its owner lets go. HookHandle::Remove() unregisters a hook; a handle
// that outlives its host is harmless.
#ifndef SHARDLIGHT_LIGHTNING_STATE_DICT_HOOKS_H_
#define SHARDLIGHT_LIGHTNING_STATE_DICT_HOOKS_H_

#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharded/state_dict.h"

namespace shardlight::lightning {

using sharded::StateDict;

// What a load did and found; hooks add to it.
struct LoadReport {
  std::vector<std::string> missing_keys;     // expected, absent from the dict
  std::vector<std::string> unexpected_keys;  // in the dict, expected by nobody
  std::vector<std::string> loaded_keys;      // consumed by a hook or copied
  // Staged writes, run in order once every check has passed.
  std::vector<std::function<void()>> commits;
};

using StateDictHook =
    std::function<absl::Status(torch::nn::Module& module, StateDict& dict, const std::string& prefix)>;
using LoadPreHook = std::function<absl::Status(torch::nn::Module& module, StateDict& dict,
                                               const std::string& prefix, LoadReport& report)>;

class HookHandle {
 public:
  HookHandle() = default;
  // Unregisters the hook; a no-op when already removed or the host is gone.
  void Remove();

 private:
  friend class StateDictHookHost;
  HookHandle(std::weak_ptr<void> list, int id, bool load) : list_(std::move(list)), id_(id), load_(load) {}
  std::weak_ptr<void> list_;
  int id_ = -1;
  bool load_ = false;
};

// A module that can carry hooks: mix into a torch::nn::Module subclass.
class StateDictHookHost {
 public:
  StateDictHookHost();
  virtual ~StateDictHookHost() = default;

  HookHandle AddStateDictHook(StateDictHook hook);
  HookHandle AddLoadPreHook(LoadPreHook hook);
  size_t num_state_dict_hooks() const;
  size_t num_load_pre_hooks() const;

  // Run by StateDictOf / LoadStateDict.
  absl::Status RunStateDictHooks(torch::nn::Module& self, StateDict& dict, const std::string& prefix) const;
  absl::Status RunLoadPreHooks(torch::nn::Module& self, StateDict& dict, const std::string& prefix,
                               LoadReport& report) const;

 private:
  friend class HookHandle;
  struct Hooks;
  std::shared_ptr<Hooks> hooks_;
};

// Every module of the tree rooted at `root` (root first, then depth-first in
// registration order) with its prefix: "" for the root, "child.grand." below.
// Works for a root that is not owned by a shared_ptr.
std::vector<std::pair<std::string, torch::nn::Module*>> ModulesWithPrefixes(torch::nn::Module& root);

// Parameters and buffers, then every hook host's state-dict hooks.
absl::StatusOr<StateDict> StateDictOf(torch::nn::Module& module);

// Loads `dict` (taken by value: pre-hooks consume entries). Strict: any
// missing or unexpected key fails with both lists. Shape or dtype mismatch
// fails naming the key, in either mode. On error nothing was changed.
absl::StatusOr<LoadReport> LoadStateDict(torch::nn::Module& module, StateDict dict, bool strict = true);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_STATE_DICT_HOOKS_H_
