#include "lightning/torch_checkpoint.h"

#include <ATen/ATen.h>

#include <iostream>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lightning/state_dict_hooks.h"
#include "sharded/agreement.h"
#include "sharded/checkpoint/interop/dcp/dcp_checkpoint.h"
#include "sharded/checkpoint/interop/dcp/dcp_writer.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "sharded/dtype_table.h"
#include "sharded/no_throw.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {
namespace {

namespace ckpt = sharded::checkpoint;
using sharded::PlainValue;

constexpr char kOptimizerPrefix[] = "optimizer.";

// The optimizer's parameters, in the module's state-dict order.
absl::StatusOr<std::vector<std::string>> ParamKeys(const sharded::StateDict& model, const Optimizer& optimizer) {
  std::set<std::string> trainable;
  for (const DenseTrainable& d : optimizer.trainables().dense) trainable.insert(d.key);
  for (const ShardedTrainable& s : optimizer.trainables().sharded) trainable.insert(s.key);
  std::vector<std::string> keys;
  for (const auto& [key, value] : model.entries()) {
    if (trainable.count(key) > 0) keys.push_back(key);
  }
  if (keys.size() != trainable.size()) {
    return absl::InternalError("a parameter the optimizer updates is not in the module's state dict");
  }
  return keys;
}

// The optimizer's per-parameter state names: its "optimizer.<first param>.<name>" entries.
std::vector<std::string> StateNames(const sharded::StateDict& optimizer_state, const std::vector<std::string>& params) {
  std::vector<std::string> names;
  if (params.empty()) return names;
  const std::string prefix = absl::StrCat(kOptimizerPrefix, params.front(), ".");
  for (const auto& [key, value] : optimizer_state.entries()) {
    if (!absl::StartsWith(key, prefix)) continue;
    const std::string name = key.substr(prefix.size());
    if (!absl::StrContains(name, '.')) names.push_back(name);
  }
  return names;
}

NamedTensor Named(const std::string& key, const sharded::StateValue& value) {
  if (const auto* dense = std::get_if<at::Tensor>(&value)) {
    return {key, c10::toString(dense->scalar_type()), dense->sizes().vec()};
  }
  const auto& st = std::get<sharded::ShardedTensor>(value);
  return {key, c10::toString(st.dtype()), st.sizes()};
}

// The optimizer's one step count (int64 [1]), shared.
absl::StatusOr<at::Tensor> StepCount(sharded::StateDict& optimizer_state) {
  const sharded::StateValue* count = optimizer_state.Find(absl::StrCat(kOptimizerPrefix, kTorchStepName));
  if (count == nullptr || !std::holds_alternative<at::Tensor>(*count)) {
    return absl::FailedPreconditionError(
        "the optimizer keeps no step count ('optimizer.step'), which torch's optimizer state holds per parameter");
  }
  return std::get<at::Tensor>(*count);
}

// Length-prefixed fields, so that any key or repr travels whole.
void Put(std::string* out, absl::string_view field) { absl::StrAppend(out, field.size(), ":", field); }
bool Take(absl::string_view* in, std::string* field) {
  const size_t colon = in->find(':');
  size_t n = 0;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(in->substr(0, colon), &n) || in->size() - colon - 1 < n) {
    return false;
  }
  *field = std::string(in->substr(colon + 1, n));
  in->remove_prefix(colon + 1 + n);
  return true;
}

}  // namespace

std::vector<std::string> DcpListing::Keys() const {
  std::vector<std::string> keys;
  for (const NamedTensor& t : tensors) keys.push_back(t.key);
  for (const auto& [key, value] : values) keys.push_back(key);
  return keys;
}

absl::StatusOr<sharded::StateDict> TorchNamedStateDict(LightningModule& module, Optimizer& optimizer, int64_t step) {
  SL_ASSIGN_OR_RETURN(sharded::StateDict model, StateDictOf(module));
  sharded::StateDict state;
  SL_RETURN_IF_ERROR(optimizer.AddStateTo(state, kOptimizerPrefix));
  SL_ASSIGN_OR_RETURN(const std::vector<std::string> params, ParamKeys(model, optimizer));
  SL_ASSIGN_OR_RETURN(const at::Tensor count, StepCount(state));
  sharded::StateDict out;
  for (const auto& [key, value] : model.entries()) SL_RETURN_IF_ERROR(out.Insert(kTorchModelPrefix + key, value));
  const std::vector<std::string> names = StateNames(state, params);
  for (const std::string& p : params) {
    if (optimizer.ParamGroupOf(p).empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the optimizer reports no settings for parameter '", p,
          "' (Optimizer::ParamGroupOf): it has no torch.optim counterpart to save under torch's names"));
    }
    for (const std::string& name : names) {
      SL_RETURN_IF_ERROR(out.Insert(absl::StrCat(kTorchStatePrefix, p, ".", name),
                                    *state.Find(absl::StrCat(kOptimizerPrefix, p, ".", name))));
    }
    // torch's AdamW keeps its step as a 0-dim float32 tensor per parameter.
    SL_RETURN_IF_ERROR(out.Insert(absl::StrCat(kTorchStatePrefix, p, ".", kTorchStepName),
                                  at::scalar_tensor(count.item<double>(), at::kFloat)));
  }
  const auto fields_of = [&](const std::string& p) { return optimizer.ParamGroupOf(p); };
  for (auto& [key, value] : FlattenParamGroups(GroupParams(params, fields_of))) {
    SL_RETURN_IF_ERROR(out.InsertValue(key, value));
  }
  SL_RETURN_IF_ERROR(out.InsertValue(kTorchStepName, PlainValue::Int(step)));
  return out;
}

absl::Status SaveTorchNamedDcp(LightningModule& module, Optimizer& optimizer, int64_t step, const std::string& dir,
                               c10d::ProcessGroup& pg, const ckpt::SaveOptions& options) {
  sharded::StateDict dict;
  const absl::Status made = sharded::NoThrow([&]() -> absl::Status {
    SL_ASSIGN_OR_RETURN(dict, TorchNamedStateDict(module, optimizer, step));
    return absl::OkStatus();
  });
  SL_RETURN_IF_ERROR(sharded::Agree(pg, made, "save under torch's names"));
  return ckpt::dcp::SaveDcpCheckpoint(dict, dir, pg, options);
}

absl::StatusOr<DcpListing> ListDcpCheckpoint(const std::string& dir, ckpt::Storage* storage, c10d::ProcessGroup& pg) {
  std::string mine;
  const absl::Status read = sharded::NoThrow([&]() -> absl::Status {
    if (pg.getRank() != 0) return absl::OkStatus();
    ckpt::Storage& from = ckpt::StorageOrDefault(storage);
    SL_ASSIGN_OR_RETURN(const ckpt::dcp::DcpMetadata md, ckpt::dcp::ReadDcpMetadata(dir, from));
    SL_ASSIGN_OR_RETURN(const std::vector<ckpt::dcp::DcpPlainValue> values, ckpt::dcp::ReadDcpValues(dir, from, md));
    for (const ckpt::dcp::DcpTensor& t : md.tensors) {
      for (const std::string& field : {std::string("T"), t.key, std::string(c10::toString(t.dtype)),
                                       absl::StrJoin(t.size, ",")}) {
        Put(&mine, field);
      }
    }
    for (const ckpt::dcp::DcpPlainValue& v : values) {
      if (!v.not_carried.empty()) continue;
      for (const std::string& field : {std::string("V"), v.key, v.repr}) Put(&mine, field);
    }
    return absl::OkStatus();
  });
  SL_ASSIGN_OR_RETURN(const std::vector<std::string> all,
                      sharded::AgreeAndGather(pg, {read, 0, mine}, {absl::StrCat("resume from '", dir, "'")}));
  DcpListing listing;
  absl::string_view in = all[0];
  std::string kind, key, text;
  while (Take(&in, &kind) && Take(&in, &key) && Take(&in, &text)) {
    if (kind == "V") {
      // A repr that does not read back (none should) is left out like a value that is not plain.
      absl::StatusOr<PlainValue> value = sharded::ParsePlainValue(text);
      if (value.ok()) listing.values.emplace_back(key, *std::move(value));
      continue;
    }
    std::string sizes;
    if (!Take(&in, &sizes)) break;
    NamedTensor t{key, text, {}};
    for (absl::string_view size : absl::StrSplit(sizes, ',', absl::SkipEmpty())) {
      t.sizes.emplace_back();
      if (!absl::SimpleAtoi(size, &t.sizes.back())) return absl::InternalError("bad size in a DCP listing");
    }
    listing.tensors.push_back(std::move(t));
  }
  if (!in.empty()) return absl::InternalError("a DCP listing that does not parse");
  return listing;
}

absl::Status LoadTorchNamedDcp(LightningModule& module, Optimizer& optimizer, const at::Tensor& step,
                               c10d::ProcessGroup& pg, const std::string& dir, const DcpListing& listing,
                               ckpt::LoadOptions load) {
  const auto misfit = [&](const absl::Status& s) {
    return absl::FailedPreconditionError(
        absl::StrCat("the PyTorch DCP checkpoint in '", dir, "' does not fit this run: ", s.message()));
  };
  // Local and alike on every rank (the listing is shared): a checkpoint of another model fails here.
  sharded::StateDict model;
  sharded::StateDict fresh;
  SL_RETURN_IF_ERROR(FreshModelState(module, &model, &fresh));
  sharded::StateDict state;
  SL_RETURN_IF_ERROR(optimizer.AddStateTo(state, kOptimizerPrefix));
  SL_ASSIGN_OR_RETURN(const std::vector<std::string> params, ParamKeys(model, optimizer));
  RunNames run{{}, params, StateNames(state, params)};
  for (const auto& [key, value] : model.entries()) run.model.push_back(Named(key, value));
  std::vector<std::string> value_keys;
  for (const auto& [key, value] : listing.values) value_keys.push_back(key);
  const absl::StatusOr<TorchLoadPlan> plan = PlanTorchLoad(listing.tensors, value_keys, run);
  if (!plan.ok()) return misfit(plan.status());
  absl::StatusOr<at::Tensor> count = StepCount(state);
  if (!count.ok()) return misfit(count.status());

  sharded::StateDict target;
  for (const auto& [from, to] : plan->tensors) {
    const sharded::StateValue* into = absl::StartsWith(to, kTorchModelPrefix) ? fresh.Find(to) : state.Find(to);
    if (into == nullptr) return absl::InternalError(absl::StrCat("no entry '", to, "' to load '", from, "' into"));
    SL_RETURN_IF_ERROR(target.Insert(from, *into));
  }
  std::vector<std::pair<std::string, at::Tensor>> steps;
  for (const std::string& key : plan->steps) {
    const NamedTensor* entry = nullptr;
    for (const NamedTensor& t : listing.tensors) entry = t.key == key ? &t : entry;
    const sharded::DtypeInfo* dtype = nullptr;
    for (const sharded::DtypeInfo& d : sharded::KnownDtypes()) {
      if (entry != nullptr && entry->dtype == c10::toString(d.dtype)) dtype = &d;
    }
    if (dtype == nullptr) return misfit(absl::InvalidArgumentError(absl::StrCat("'", key, "' has no known dtype")));
    steps.emplace_back(key, at::scalar_tensor(0, dtype->dtype));
    SL_RETURN_IF_ERROR(target.Insert(key, steps.back().second));
  }
  load.strict = false;  // its other entries (param_groups, a data loader's state) are not tensors of this run
  SL_RETURN_IF_ERROR(ckpt::LoadCheckpoint(target, dir, pg, load));
  const absl::Status loaded =
      sharded::NoThrow([&] { return LoadStateDict(module, std::move(model), /*strict=*/true).status(); });
  SL_RETURN_IF_ERROR(sharded::Agree(pg, loaded, "resume"));

  std::vector<std::pair<std::string, double>> counts;
  for (const auto& [key, t] : steps) counts.emplace_back(key, t.item<double>());
  const absl::StatusOr<int64_t> one = OneStep(counts);
  if (!one.ok()) return misfit(one.status());
  count->fill_(*one);
  // The training step: an int the user saved beside the state, else the optimizer's count.
  int64_t trained = *one;
  for (const char* name : {"global_step", kTorchStepName, "trainer.step"}) {  // the last found wins
    for (const auto& [key, value] : listing.values) {
      if (key == name && value.kind() == PlainValue::Kind::kInt) trained = value.integer();
    }
  }
  step.fill_(trained);
  return absl::OkStatus();
}

absl::Status CheckTorchParamGroups(const DcpListing& listing, LightningModule& module, const Optimizer& optimizer,
                                   int rank, const std::string& dir, bool allow_different_run) {
  SL_ASSIGN_OR_RETURN(const sharded::StateDict model, StateDictOf(module));
  SL_ASSIGN_OR_RETURN(const std::vector<std::string> params, ParamKeys(model, optimizer));
  const absl::StatusOr<std::vector<std::string>> differ = CompareParamGroups(
      listing.values, params, [&](const std::string& p) { return optimizer.ParamGroupOf(p); });
  if (!differ.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the PyTorch DCP checkpoint in '", dir, "' does not fit this run: ", differ.status().message()));
  }
  if (differ->empty()) return absl::OkStatus();
  if (!allow_different_run) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the PyTorch DCP checkpoint in '", dir, "' was trained with other optimizer settings than this run's: ",
        absl::StrJoin(*differ, "; "),
        "; resume it anyway, with this run's settings, with allow_different_run (--allow_different_run)"));
  }
  if (rank == 0) {
    for (const std::string& line : *differ) {
      std::cout << "resume: " << line << "; this run's is kept (allow_different_run)\n";
    }
  }
  return absl::OkStatus();
}

}  // namespace shardlight::lightning
