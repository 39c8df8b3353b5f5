#include "lightning/sharded_module.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/mesh/mesh_checkpoint.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {

using sharded::ShardedTensor;

ShardedModule::ShardedModule(std::string name, const FeatureDecision& gate)
    : torch::nn::Module(std::move(name)), gate_(gate) {}

absl::Status ShardedModule::CheckNewMember(const std::string& kind, const std::string& name) {
  if (!gate_.sharded_supported) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot register ", kind, " \"", name, "\": this build lacks ShardedTensor support (missing: ",
        gate_.missing.empty() ? "none listed" : absl::StrJoin(gate_.missing, ", "), "): ", gate_.reason));
  }
  if (name.empty() || absl::StrContains(name, ".")) {
    return absl::InvalidArgumentError(absl::StrCat(kind, " name \"", name, "\" must be non-empty without '.'"));
  }
  if (named_parameters(false).contains(name) || named_buffers(false).contains(name) ||
      named_children().contains(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kind, " name \"", name, "\" clashes with a parameter, buffer or child module"));
  }
  if (sharded_tensor(name) != nullptr || mesh_tensor(name) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("a member \"", name, "\" is already registered"));
  }
  return absl::OkStatus();
}

absl::Status ShardedModule::RegisterShardedTensor(const std::string& name, ShardedTensor tensor) {
  SL_RETURN_IF_ERROR(CheckNewMember("sharded tensor", name));
  sharded_.emplace_back(name, std::move(tensor));
  return absl::OkStatus();
}

absl::Status ShardedModule::RegisterMeshTensor(const std::string& name, sharded::mesh::MeshTensor tensor) {
  SL_RETURN_IF_ERROR(CheckNewMember("mesh tensor", name));
  mesh_.emplace_back(name, std::move(tensor));
  return absl::OkStatus();
}

sharded::mesh::MeshTensor* ShardedModule::mesh_tensor(const std::string& name) {
  for (auto& [n, t] : mesh_) {
    if (n == name) return &t;
  }
  return nullptr;
}

absl::Status ShardedModule::HoldParameterSharded(const std::string& key, ShardedTensor shard) {
  if (key.empty()) return absl::InvalidArgumentError("a parameter held sharded needs a key");
  if (sharded_parameter(key) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("parameter \"", key, "\" is already held sharded"));
  }
  sharded_parameters_.emplace_back(key, std::move(shard));
  return absl::OkStatus();
}

ShardedTensor* ShardedModule::sharded_parameter(const std::string& key) {
  for (auto& [k, t] : sharded_parameters_) {
    if (k == key) return &t;
  }
  return nullptr;
}

ShardedTensor* ShardedModule::sharded_tensor(const std::string& name) {
  for (auto& [n, t] : sharded_) {
    if (n == name) return &t;
  }
  return nullptr;
}

namespace {

// Members of one kind under `m`, keyed by path; `find` looks one up by name.
template <typename T, typename List, typename Find>
void CollectMembers(torch::nn::Module& m, const std::string& path, bool is_root, bool skip_hook_owners, List list,
                    Find find, std::vector<std::pair<std::string, T*>>& out) {
  auto* sm = dynamic_cast<ShardedModule*>(&m);
  if (sm != nullptr && !is_root && skip_hook_owners && sm->OwnsShardedHooks()) return;
  if (sm != nullptr) {
    for (const auto& member : list(*sm)) out.emplace_back(path + member.first, find(*sm, member.first));
  }
  for (const auto& child : m.named_children()) {
    CollectMembers<T>(*child.value(), absl::StrCat(path, child.key(), "."), false, skip_hook_owners, list, find,
                      out);
  }
}

}  // namespace

std::vector<std::pair<std::string, ShardedTensor*>> ShardedMembers(torch::nn::Module& root, const std::string& prefix,
                                                                   bool skip_hook_owners) {
  std::vector<std::pair<std::string, ShardedTensor*>> out;
  CollectMembers<ShardedTensor>(
      root, prefix, true, skip_hook_owners, [](ShardedModule& sm) -> const auto& { return sm.sharded_tensors(); },
      [](ShardedModule& sm, const std::string& name) { return sm.sharded_tensor(name); }, out);
  return out;
}

std::vector<std::pair<std::string, sharded::mesh::MeshTensor*>> MeshMembers(torch::nn::Module& root,
                                                                           const std::string& prefix,
                                                                           bool skip_hook_owners) {
  std::vector<std::pair<std::string, sharded::mesh::MeshTensor*>> out;
  CollectMembers<sharded::mesh::MeshTensor>(
      root, prefix, true, skip_hook_owners, [](ShardedModule& sm) -> const auto& { return sm.mesh_tensors(); },
      [](ShardedModule& sm, const std::string& name) { return sm.mesh_tensor(name); }, out);
  return out;
}

absl::Status AddShardedMembersToStateDict(torch::nn::Module& module, StateDict& dict, const std::string& prefix) {
  for (auto& [key, tensor] : ShardedMembers(module, prefix, /*skip_hook_owners=*/true)) {
    SL_RETURN_IF_ERROR(dict.Insert(key, *tensor));
  }
  for (auto& [key, tensor] : MeshMembers(module, prefix, /*skip_hook_owners=*/true)) {
    auto view = sharded::mesh::ViewForSave(*tensor);
    if (!view.ok()) {
      return absl::Status(view.status().code(), absl::StrCat("mesh member \"", key, "\": ", view.status().message()));
    }
    SL_RETURN_IF_ERROR(dict.Insert(key, *std::move(view)));
  }
  if (auto* sm = dynamic_cast<ShardedModule*>(&module)) {
    for (const auto& [key, shard] : sm->sharded_parameters()) dict.Set(prefix + key, shard);
  }
  return absl::OkStatus();
}

}  // namespace shardlight::lightning
