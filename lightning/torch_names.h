// The names PyTorch gives a training state that a user saves as
//   dcp.save({"model": get_model_state_dict(model),
//             "optim": get_optimizer_state_dict(model, opt)})
// (torch.distributed.checkpoint.state_dict; DCP flattens the nested dicts and
// lists with dots), beside shardlight's names for the same state
// (TrainingStateDict: "model.", "optimizer."):
//
//   model.<fqn>                   <-> model.<fqn>
//   optim.state.<fqn>.<name>      <-> optimizer.<fqn>.<name>  (AdamW: exp_avg,
//                                     exp_avg_sq; each of its parameter's
//                                     dtype and global sizes)
//   optim.state.<fqn>.step        <-> optimizer.step: torch keeps a step per
//                                     parameter (a 0-dim float32 tensor),
//                                     shardlight's optimizers one (int64 [1]):
//                                     all must be equal (OneStep)
//   optim.param_groups.<i>.<field> <-> the optimizer's settings for each
//                                     parameter (Optimizer::ParamGroupOf):
//                                     written, and compared on a resume, not
//                                     loaded (CompareParamGroups); "params"
//                                     lists the group's fqns
//
// Reading also takes get_optimizer_state_dict's flattened form
// (flatten_optimizer_state_dict=True): optim.param_groups.<fqn>.<field>.
// No LibTorch here: keys, dtype names and sizes only.
#ifndef SHARDLIGHT_LIGHTNING_TORCH_NAMES_H_
#define SHARDLIGHT_LIGHTNING_TORCH_NAMES_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "sharded/plain_value.h"

namespace shardlight::lightning {

inline constexpr char kTorchModelPrefix[] = "model.";
inline constexpr char kTorchStatePrefix[] = "optim.state.";
inline constexpr char kTorchGroupsPrefix[] = "optim.param_groups.";
inline constexpr char kTorchStepName[] = "step";
inline constexpr char kTorchParamsField[] = "params";

// A param_groups entry's fields (lr, betas, ...) in order.
using ParamGroupFields = std::vector<std::pair<std::string, sharded::PlainValue>>;

// Whether a checkpoint with these keys (tensors and values) holds an
// optimizer state under torch's names: a key under "optim.state." or
// "optim.param_groups.".
bool HasTorchOptimizerNames(const std::vector<std::string>& keys);

// A tensor entry: its key, dtype (LibTorch's name: "Float", "Double") and
// global sizes.
struct NamedTensor {
  std::string key;
  std::string dtype;
  std::vector<int64_t> sizes;
};

// What a run holds: its model state dict (keys without a prefix), the
// parameters its optimizer updates (fqns, a subset of the model's keys) and
// the names of the optimizer's per-parameter state (AdamW: exp_avg,
// exp_avg_sq), each of its parameter's dtype and sizes.
struct RunNames {
  std::vector<NamedTensor> model;
  std::vector<std::string> params;
  std::vector<std::string> state_names;
};

// Checkpoint key -> the run's key, and the step entries to read.
struct TorchLoadPlan {
  std::vector<std::pair<std::string, std::string>> tensors;
  std::vector<std::string> steps;  // optim.state.<fqn>.step, in the run's parameter order
};

// Checks a checkpoint's tensor entries (and the keys of its values) against
// the run, before anything is read: FailedPrecondition naming the first key
// that is missing (a model entry, a parameter's state or step), extra (under
// "model." or "optim.state.": a parameter this run lacks, or state this
// optimizer does not keep, e.g. amsgrad's max_exp_avg_sq), of other sizes or
// of another dtype (a step: a 0-dim tensor of any dtype).
absl::StatusOr<TorchLoadPlan> PlanTorchLoad(const std::vector<NamedTensor>& checkpoint,
                                            const std::vector<std::string>& value_keys, const RunNames& run);

// The one step count of per-parameter steps (key, value), in order: an
// integer >= 0 equal for every parameter; else FailedPrecondition naming the
// key (unequal steps: shardlight's optimizers keep one for all parameters).
absl::StatusOr<int64_t> OneStep(const std::vector<std::pair<std::string, double>>& steps);

struct TorchParamGroup {
  ParamGroupFields fields;
  std::vector<std::string> params;
};

// The param_groups a run's settings make: parameters with equal fields share
// a group, groups in the order of their first parameter.
std::vector<TorchParamGroup> GroupParams(const std::vector<std::string>& params,
                                         const std::function<ParamGroupFields(const std::string&)>& fields_of);

// As DCP stores them: "optim.param_groups.<i>.<field>" for each field in
// order, then ".params" (a list of str).
ParamGroupFields FlattenParamGroups(const std::vector<TorchParamGroup>& groups);

// The checkpoint's param_groups (its values under "optim.param_groups.")
// against the run's settings for each parameter: one line per difference,
// naming the parameter, the field and both values (numbers compare by value:
// 1 equals 1.0). Only the fields both hold are compared, and never foreach,
// fused, capturable or differentiable: they say how torch computes, not what
// (a run writes torch.s defaults for them, None or False). FailedPrecondition when a parameter is in no group
// or in two, a group names a parameter this run lacks, or "params" is not a
// list of str.
absl::StatusOr<std::vector<std::string>> CompareParamGroups(
    const ParamGroupFields& values, const std::vector<std::string>& params,
    const std::function<ParamGroupFields(const std::string&)>& fields_of);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_TORCH_NAMES_H_
