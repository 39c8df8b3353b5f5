// Which FSDP unit holds each parameter: the plan FsdpStrategy::Setup makes
// from FsdpOptions::units before it touches anything, so that a bad unit list
// fails on every rank (each computes the same error from the same module)
// before any collective.
//
// Like fully_shard applied bottom-up: a parameter belongs to the innermost
// unit whose submodule contains it; the root unit ("") holds what no unit
// claims. Only parameters with requires_grad and at least one dim are
// sharded (dim 0 is the one split); the others stay dense on every rank.
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_UNITS_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_UNITS_H_

#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shardlight::lightning {

struct UnitParameter {
  std::string key;  // state-dict key from the root
  at::Tensor param;  // the registered variable
};

struct UnitPlan {
  std::string name;  // the submodule's path; "" for the root
  torch::nn::Module* module = nullptr;  // that submodule (the root for "")
  std::vector<UnitParameter> params;  // registration order
};

// The named units (in the order given, each with its parameters) then the
// root. InvalidArgument, naming the unit or the parameters: a unit that is
// empty or names no submodule of `root`, a unit named twice, and one tensor
// registered under two keys (in two units: "a parameter in two units";
// within one unit: shared parameters are not supported yet).
absl::StatusOr<std::vector<UnitPlan>> PlanUnits(torch::nn::Module& root, const std::vector<std::string>& units);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_UNITS_H_
