// RunFsdpUnit: how a module's forward enters an FSDP unit. LibTorch C++ has
// no module forward hooks, so a module that wants FsdpStrategy to gather a
// unit's parameters only around that unit (ZeRO-3 inside the step, as
// fully_shard does) runs the unit's forward through this call:
//
//   at::Tensor h = RunFsdpUnit(*blocks_[0], [&] { return blocks_[0]->forward(x); });
//
// `unit` is the submodule FsdpOptions::units names ("blocks.0"); `forward`
// runs it and returns its output. Under FsdpStrategy with
// FsdpOptions::per_unit, the call all-gathers the unit's parameters before
// `forward` (or waits for the prefetch issued at the previous unit), frees
// them after it unless reshard_after_forward is off, and ties a hook to the
// output so that backward gathers them again before the unit's backward and
// reduce-scatters the unit's gradients right after it. Anywhere else (ddp,
// fsdp gathering the whole model, a submodule that is not a unit, no
// Trainer at all) it is plain `forward()`: a module written with it runs
// unchanged under every strategy.
//
// What per-unit FSDP asks of the module (as FSDP2 does): every rank's forward
// enters every unit once, in FsdpOptions::units order; a unit's parameters
// are used only inside its RunFsdpUnit; the loss depends on every unit's
// output and every unit parameter gets a gradient. A rank that breaks this
// fails the step on every rank, naming the unit (the error is agreed with
// the step's verdict, nothing hangs).
//
// Throws (inside the module's forward or backward, which the Trainer turns
// into the step's status): when another rank's step failed -- the step then
// fails on every rank with that rank's error -- or when a collective fails.
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_UNIT_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_UNIT_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <functional>
#include <optional>

namespace shardlight::lightning {

at::Tensor RunFsdpUnit(torch::nn::Module& unit, const std::function<at::Tensor()>& forward);

namespace fsdp_internal {

// What a per-unit FSDP run does at the points RunFsdpUnit and autograd reach.
// Each may throw (see above).
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void EnterForward(int unit) = 0;    // before the unit's forward
  virtual void ExitForward(int unit) = 0;     // after it
  virtual void BeforeBackward(int unit) = 0;  // the gradient of its output arrived
  virtual void GradAccumulated(int unit) = 0; // one of its parameters' gradient accumulated
};

struct UnitEntry {
  UnitHooks* hooks;
  int unit;
};

// The registry RunFsdpUnit consults: a run registers its units' submodules
// for its lifetime (each rank of the simulator has modules of its own).
void RegisterUnit(const torch::nn::Module* module, UnitHooks* hooks, int unit);
void UnregisterUnits(const UnitHooks* hooks);
std::optional<UnitEntry> FindUnit(const torch::nn::Module* module);

}  // namespace fsdp_internal
}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_UNIT_H_
