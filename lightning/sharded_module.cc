#include "lightning/sharded_module.h"

#include <ATen/core/grad_mode.h>

#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/mismatch.h"
#include "sharded/agreement.h"
#include "sharded/no_throw.h"
#include "sharded/stable_hash.h"
#include "sharded/status_macros.h"
#include "sharded/tensor_region.h"

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
  SL_RETURN_IF_ERROR(sharded::CheckSizeAndDtype(key, {"the state dict", sizes, dtype},
                                                {"the module", member.sizes(), member.dtype()}));
  return absl::OkStatus();
}

}  // namespace

namespace {

// One member's part of a load: where its values come from.
struct MemberLoad {
  std::string key;
  ShardedTensor* member;
  std::vector<at::Tensor> sources;           // per local shard, when no reshard is needed
  std::optional<ShardedTensor> to_reshard;  // the stored tensor, when its layout differs
};

// Local checks of one member against its entry; no communication.
absl::Status PlanMember(const std::string& key, ShardedTensor* member, const sharded::StateValue& value,
                        MemberLoad& load) {
  load.key = key;
  load.member = member;
  if (const auto* dense = std::get_if<at::Tensor>(&value)) {
    // A full (consolidated) tensor present on every rank: slice locally.
    SL_RETURN_IF_ERROR(CheckCompatible(key, dense->sizes().vec(), dense->scalar_type(), *member));
    const sharded::Box whole = sharded::Box::Whole(dense->sizes().vec());
    for (const auto& shard : member->local_shards()) {
      load.sources.push_back(sharded::RegionView(*dense, whole, shard.metadata));
    }
    return absl::OkStatus();
  }
  const ShardedTensor& stored = std::get<ShardedTensor>(value);
  SL_RETURN_IF_ERROR(CheckCompatible(key, stored.sizes(), stored.dtype(), *member));
  if (stored.process_group()->getSize() != member->process_group()->getSize()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key \"", key, "\" was sharded over ", stored.process_group()->getSize(),
        " ranks but the module's member is over ", member->process_group()->getSize(),
        "; load it from a checkpoint or a consolidated (dense) state dict"));
  }
  if (stored.metadata().shards != member->metadata().shards) {
    load.to_reshard = stored;
  } else {
    for (const auto& shard : stored.local_shards()) load.sources.push_back(shard.tensor);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RestoreShardedMembersBeforeLoad(torch::nn::Module& module, StateDict& dict, const std::string& prefix,
                                             LoadReport& report) {
  auto members = ShardedMembers(module, prefix, /*skip_hook_owners=*/true);
  if (members.empty()) return absl::OkStatus();
  // Step 1: every local check, and which keys each rank would reshard.
  std::vector<MemberLoad> loads;
  std::vector<std::string> missing;
  std::string plan;  // the keys this rank loads, and which it reshards
  absl::Status local = sharded::NoThrow([&]() -> absl::Status {
    for (auto& [key, member] : members) {
      const sharded::StateValue* value = dict.Find(key);
      if (value == nullptr) {
        missing.push_back(key);
        continue;
      }
      loads.emplace_back();
      SL_RETURN_IF_ERROR(PlanMember(key, member, *value, loads.back()));
      absl::StrAppend(&plan, key, loads.back().to_reshard ? " reshard\n" : "\n");
    }
    return absl::OkStatus();
  });
  // Step 2: ranks agree before any of them enters a reshard (a collective).
  c10d::ProcessGroup& pg = *members.front().second->process_group();
  SL_RETURN_IF_ERROR(sharded::AgreeOn(pg, local.ok() ? absl::StatusOr<uint64_t>(sharded::StableHash(plan)) : local,
                                      {"load of sharded members", "keys to load and reshard"}));
  // Step 3: reshard, in the same order on every rank; stage the copies.
  for (MemberLoad& load : loads) {
    if (load.to_reshard) {
      auto moved = load.to_reshard->Reshard(LayoutOf(*load.member));
      if (!moved.ok()) {
        return absl::Status(moved.status().code(),
                            absl::StrCat("resharding key \"", load.key, "\": ", moved.status().message()));
      }
      for (const auto& shard : moved->local_shards()) load.sources.push_back(shard.tensor);
    }
    dict.Erase(load.key);
    report.loaded_keys.push_back(load.key);
    report.commits.push_back([member = load.member, sources = std::move(load.sources)] {
      at::NoGradGuard no_grad;
      const auto& shards = member->local_shards();
      for (size_t i = 0; i < shards.size(); ++i) shards[i].tensor.copy_(sources[i]);
    });
  }
  report.missing_keys.insert(report.missing_keys.end(), missing.begin(), missing.end());
  return absl::OkStatus();
}

}  // namespace shardlight::lightning
