#include "lightning/sharded_module.h"

#include <ATen/core/grad_mode.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/box_exchange.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {

using sharded::ShardedTensor;

ShardedModule::ShardedModule(std::string name, const FeatureDecision& gate)
    : torch::nn::Module(std::move(name)), gate_(gate) {}

absl::Status ShardedModule::RegisterShardedTensor(const std::string& name, ShardedTensor tensor) {
  if (!gate_.sharded_supported) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot register sharded tensor \"", name, "\": this build lacks ShardedTensor support (missing: ",
        gate_.missing.empty() ? "none listed" : absl::StrJoin(gate_.missing, ", "), "): ", gate_.reason));
  }
  if (name.empty() || absl::StrContains(name, ".")) {
    return absl::InvalidArgumentError(absl::StrCat("sharded tensor name \"", name, "\" must be non-empty without '.'"));
  }
  if (named_parameters(false).contains(name) || named_buffers(false).contains(name) ||
      named_children().contains(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sharded tensor name \"", name, "\" clashes with a parameter, buffer or child module"));
  }
  if (sharded_tensor(name) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("sharded tensor \"", name, "\" is already registered"));
  }
  if (!tensor.process_group()) {
    return absl::InvalidArgumentError(absl::StrCat("sharded tensor \"", name, "\" has no process group"));
  }
  sharded_.emplace_back(name, std::move(tensor));
  return absl::OkStatus();
}

ShardedTensor* ShardedModule::sharded_tensor(const std::string& name) {
  for (auto& [n, t] : sharded_) {
    if (n == name) return &t;
  }
  return nullptr;
}

namespace {

void CollectMembers(torch::nn::Module& m, const std::string& path, bool is_root, bool skip_hook_owners,
                    std::vector<std::pair<std::string, ShardedTensor*>>& out) {
  auto* sm = dynamic_cast<ShardedModule*>(&m);
  if (sm != nullptr && !is_root && skip_hook_owners && sm->OwnsShardedHooks()) return;
  if (sm != nullptr) {
    for (const auto& member : sm->sharded_tensors()) {
      out.emplace_back(path + member.first, sm->sharded_tensor(member.first));
    }
  }
  for (const auto& child : m.named_children()) {
    CollectMembers(*child.value(), absl::StrCat(path, child.key(), "."), false, skip_hook_owners, out);
  }
}

}  // namespace

std::vector<std::pair<std::string, ShardedTensor*>> ShardedMembers(torch::nn::Module& root, const std::string& prefix,
                                                                   bool skip_hook_owners) {
  std::vector<std::pair<std::string, ShardedTensor*>> out;
  CollectMembers(root, prefix, true, skip_hook_owners, out);
  return out;
}

absl::Status AddShardedMembersToStateDict(torch::nn::Module& module, StateDict& dict, const std::string& prefix) {
  for (auto& [key, tensor] : ShardedMembers(module, prefix, /*skip_hook_owners=*/true)) {
    SL_RETURN_IF_ERROR(dict.Insert(key, *tensor));
  }
  return absl::OkStatus();
}

namespace {

// The member's own layout as a spec, so a stored tensor can be resharded to it.
sharded::EnumerableShardingSpec LayoutOf(const ShardedTensor& t) {
  return sharded::EnumerableShardingSpec{t.metadata().shards};
}

absl::Status CheckCompatible(const std::string& key, const std::vector<int64_t>& sizes, c10::ScalarType dtype,
                             const ShardedTensor& member) {
  if (sizes != member.sizes()) {
    return absl::InvalidArgumentError(absl::StrCat("size mismatch for key \"", key, "\": the state dict has ",
                                                   sharded::ShapeToString(sizes), ", the module has ",
                                                   sharded::ShapeToString(member.sizes())));
  }
  if (dtype != member.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("dtype mismatch for key \"", key, "\": the state dict has ",
                                                   c10::toString(dtype), ", the module has ",
                                                   c10::toString(member.dtype())));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RestoreShardedMembersBeforeLoad(torch::nn::Module& module, StateDict& dict, const std::string& prefix,
                                             LoadReport& report) {
  for (auto& [key, member] : ShardedMembers(module, prefix, /*skip_hook_owners=*/true)) {
    sharded::StateValue* value = dict.Find(key);
    if (value == nullptr) {
      report.missing_keys.push_back(key);
      continue;
    }
    // `sources` holds, per local shard of the member, the tensor to copy in.
    std::vector<at::Tensor> sources;
    if (auto* dense = std::get_if<at::Tensor>(value)) {
      // A full (consolidated) tensor present on every rank: slice locally.
      SL_RETURN_IF_ERROR(CheckCompatible(key, dense->sizes().vec(), dense->scalar_type(), *member));
      const std::vector<int64_t> origin(dense->dim(), 0);
      for (const auto& shard : member->local_shards()) {
        sources.push_back(sharded::RegionView(*dense, origin, shard.metadata.offsets, shard.metadata.sizes));
      }
    } else {
      ShardedTensor& stored = std::get<ShardedTensor>(*value);
      SL_RETURN_IF_ERROR(CheckCompatible(key, stored.sizes(), stored.dtype(), *member));
      if (stored.process_group()->getSize() != member->process_group()->getSize()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "key \"", key, "\" was sharded over ", stored.process_group()->getSize(),
            " ranks but the module's member is over ", member->process_group()->getSize(),
            "; load it from a checkpoint or a consolidated (dense) state dict"));
      }
      ShardedTensor source = stored;
      if (stored.metadata().shards != member->metadata().shards) {
        auto moved = stored.Reshard(LayoutOf(*member));
        if (!moved.ok()) {
          return absl::Status(moved.status().code(),
                              absl::StrCat("resharding key \"", key, "\": ", moved.status().message()));
        }
        source = *std::move(moved);
      }
      for (const auto& shard : source.local_shards()) sources.push_back(shard.tensor);
    }
    dict.Erase(key);  // `value` is dangling from here on
    report.loaded_keys.push_back(key);
    report.commits.push_back([member = member, sources = std::move(sources)] {
      at::NoGradGuard no_grad;
      auto& shards = member->local_shards();
      for (size_t i = 0; i < shards.size(); ++i) shards[i].tensor.copy_(sources[i]);
    });
  }
  return absl::OkStatus();
}

}  // namespace shardlight::lightning
