// A training state under PyTorch's own names (torch_names.h) in a PyTorch
// distributed checkpoint (DCP) directory: what a PyTorch FSDP2 (or DDP) user
// writes with
//   dcp.save({"model": get_model_state_dict(model),
//             "optim": get_optimizer_state_dict(model, opt)})
// and reads back with get_state_dict, dcp.load and set_state_dict.
//
// SaveTorchNamedDcp writes one from a module and its optimizer (on any
// strategy's layout; fsdp's shards stay shards), so that such a PyTorch run at
// any world size loads it. The Trainer's resume from a DCP directory reads
// one (trainer.h, "From PyTorch") through ListDcpCheckpoint,
// LoadTorchNamedDcp and CheckTorchParamGroups.
#ifndef SHARDLIGHT_LIGHTNING_TORCH_CHECKPOINT_H_
#define SHARDLIGHT_LIGHTNING_TORCH_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lightning/lightning_module.h"
#include "lightning/optimizer.h"
#include "lightning/torch_names.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/state_dict.h"

namespace shardlight::lightning {

// The state of (module, optimizer) under torch's names, sharing storage with
// them: model.<fqn>, optim.state.<fqn>.<name> (the optimizer's per-parameter
// state), optim.state.<fqn>.step (a 0-dim float32 tensor: the optimizer's
// step count, one copy per parameter as torch keeps it), the values
// optim.param_groups.<i>.<field> (Optimizer::ParamGroupOf, grouped by equal
// settings) and "step" (an int: the training step, which a resume prefers to
// the optimizer's count). FailedPrecondition when the optimizer reports no
// settings for a parameter (no torch counterpart) or keeps no "step". Local.
absl::StatusOr<sharded::StateDict> TorchNamedStateDict(LightningModule& module, Optimizer& optimizer,
                                                       int64_t step);

// Collective: TorchNamedStateDict (its error agreed) saved with
// SaveDcpCheckpoint (dcp_writer.h) into `dir`.
absl::Status SaveTorchNamedDcp(LightningModule& module, Optimizer& optimizer, int64_t step, const std::string& dir,
                               c10d::ProcessGroup& pg, const sharded::checkpoint::SaveOptions& options = {});

// What a DCP directory holds: its tensors (key, dtype, global sizes) and its
// plain values (those that are not, e.g. class instances, are left out).
struct DcpListing {
  std::vector<NamedTensor> tensors;
  ParamGroupFields values;
  std::vector<std::string> Keys() const;  // tensors' then values'
};

// Collective: rank 0 reads .metadata and the values, every rank gets them
// (rank 0's read error is every rank's).
absl::StatusOr<DcpListing> ListDcpCheckpoint(const std::string& dir, sharded::checkpoint::Storage* storage,
                                             c10d::ProcessGroup& pg);

// Collective: loads a checkpoint under torch's names into the module (through
// LoadStateDict: its load hooks run) and the optimizer's state, and sets the
// optimizer's step count and `step` (int64 [1]: the int value "trainer.step",
// "step" or "global_step" where there is one, else the optimizer's count).
// Before anything is read, on every rank alike: FailedPrecondition naming the
// key (PlanTorchLoad) for a checkpoint of another model or optimizer, or an
// optimizer without a "step"; after the read: unequal per-parameter steps
// (OneStep). `load.strict` is ignored (other entries are not the run's).
absl::Status LoadTorchNamedDcp(LightningModule& module, Optimizer& optimizer, const at::Tensor& step,
                               c10d::ProcessGroup& pg, const std::string& dir, const DcpListing& listing,
                               sharded::checkpoint::LoadOptions load);

// The checkpoint's param_groups against the run's settings
// (CompareParamGroups with Optimizer::ParamGroupOf; the LR at the resumed
// step: call it after the LR schedule is set there). A difference is
// FailedPrecondition listing them, unless `allow_different_run` (rank 0 then
// prints each and the run goes on with its own settings). Local: every rank
// holds the same listing and decides alike.
absl::Status CheckTorchParamGroups(const DcpListing& listing, LightningModule& module, const Optimizer& optimizer,
                                   int rank, const std::string& dir, bool allow_different_run);

// The module's state dict as fresh tensors of its layout: `model` under its
// own keys, the same tensors in `target` under "model." (trainer.cc).
absl::Status FreshModelState(LightningModule& module, sharded::StateDict* model, sharded::StateDict* target);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_TORCH_CHECKPOINT_H_
