// Deferred initialisation: a module registers a parameter by its sizes and
// an initialiser instead of a filled tensor, so that a model larger than one
// rank can be built on every rank and each rank allocates only what it keeps.
//
// A deferred parameter is the module's registered variable with a
// placeholder for data: a tensor of the parameter's dtype and number of dims
// whose every dim is 0 (a 0-dim parameter: one element), so it holds no
// storage. Its sizes and initialiser live in a registry beside it. The
// initialiser fills any dim-0 row range of the parameter, so the values must
// be a function of the global element index (sharded::FillGlobalRandom) for
// a row range to equal the same rows of the whole tensor.
//
// Who materialises it. Under fsdp/hsdp, FsdpStrategy::Setup allocates this
// rank's dim-0 chunk and fills only it (FillDeferredRows, then
// FinishDeferred). The Trainer then calls MaterializeDeferred(module) after
// the strategy's Setup, which fills every parameter still deferred (ddp,
// model_parallel, parameters fsdp leaves dense) whole. Outside the Trainer a
// caller does the same before its first forward.
//
// The registered variable keeps its identity throughout (its data is swapped
// with set_data), so layers that hold it (torch::nn::Linear::weight) and
// autograd see the materialised values. Conversions of the placeholder's
// dtype (set_data(p.to(dtype)), as bf16-true does) carry over: rows are
// filled in the placeholder's dtype at the time of materialisation.
//
// CPU only. Thread-safe (thread-ranks each defer their own module's
// parameters).
#ifndef SHARDLIGHT_LIGHTNING_DEFERRED_INIT_H_
#define SHARDLIGHT_LIGHTNING_DEFERRED_INIT_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace shardlight::lightning {

// Fills `rows` -- rows [first_row, first_row + rows.size(0)) of the
// parameter, of its dtype, sizes [count, sizes[1:]...] (a 0-dim parameter:
// a 0-dim tensor, first_row 0) -- in place. An error (returned or thrown)
// fails the materialisation, named.
using RowInitializer = std::function<absl::Status(at::Tensor& rows, int64_t first_row)>;

// Makes `param` (a registered variable, e.g. a torch::nn::Linear's weight)
// deferred: records `sizes` (its sizes when materialised; default its
// current ones) and `init`, and frees its data for the placeholder. Keeps
// dtype and requires_grad. InvalidArgument: an undefined or non-CPU tensor,
// a null initialiser, a negative size.
absl::Status DeferParameter(at::Tensor& param, RowInitializer init, std::optional<std::vector<int64_t>> sizes = {});

// Registers on `module` a deferred parameter `name` of `sizes` and `dtype`
// (requires_grad: `requires_grad`) and returns the registered variable.
// Throws as Module::register_parameter does (a duplicate name).
at::Tensor RegisterDeferredParameter(torch::nn::Module& module, const std::string& name, std::vector<int64_t> sizes,
                                     at::ScalarType dtype, RowInitializer init, bool requires_grad = true);

// Whether `param` is deferred (not yet materialised).
bool IsDeferred(const at::Tensor& param);

// The sizes `param` will have: its registered ones when deferred, else its own.
std::vector<int64_t> MaterializedSizes(const at::Tensor& param);

// Fills `rows` with rows [first_row, ...) of the deferred `param` (`key`
// names it in errors). FailedPrecondition: `param` is not deferred.
// InvalidArgument: `rows` has another dtype than the placeholder, other
// trailing sizes, or runs past the parameter's dim 0. The initialiser's
// error, prefixed "initialising deferred parameter \"<key>\" rows [a, b): ".
absl::Status FillDeferredRows(const at::Tensor& param, const std::string& key, int64_t first_row, at::Tensor rows);

// Ends the deferral of `param`: its data becomes `data` (set_data; the
// caller's fill of it, e.g. this rank's shard) and the registry forgets it.
void FinishDeferred(at::Tensor& param, const at::Tensor& data);

// Materialises every parameter of `module` (recursively) still deferred,
// whole, in registration order. The first initialiser's error (as
// FillDeferredRows names it); the parameters before it are materialised.
absl::Status MaterializeDeferred(torch::nn::Module& module);

// FailedPrecondition naming the first deferred parameter of `module` (its
// key) when any is left: to check before a forward, which would otherwise
// compute with an empty placeholder. Cheap when nothing is deferred.
absl::Status CheckMaterialized(const torch::nn::Module& module);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_DEFERRED_INIT_H_
