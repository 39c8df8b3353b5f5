// The load pre-hook of ShardedModule (sharded_module.h): sharded and mesh
// members take their values out of a state dict, all checks and the
// collectives first, the writes staged as commits.
#include <ATen/core/grad_mode.h>

#include <deque>
#include <optional>

#include "absl/strings/str_cat.h"
#include "lightning/sharded_module.h"
#include "sharded/agreement.h"
#include "sharded/mesh/mesh_checkpoint.h"
#include "sharded/mismatch.h"
#include "sharded/no_throw.h"
#include "sharded/stable_hash.h"
#include "sharded/status_macros.h"
#include "sharded/tensor_region.h"

namespace shardlight::lightning {

using sharded::ShardedTensor;

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
  size_t target = 0;  // index into the targets planned
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

namespace {

using Targets = std::vector<std::pair<std::string, ShardedTensor*>>;

// Steps shared by both kinds of member, for the layouts `targets` the values
// go to: every local check (after `prepared`, the caller's own), an agreement
// on which keys load and reshard before any rank enters a collective, then the
// reshards in the same order on every rank. Leaves each load's sources (this
// rank's shards of its target, in order) and updates `dict` and `report`.
absl::Status PlanAgreeReshard(const Targets& targets, const absl::Status& prepared, c10d::ProcessGroup& pg,
                              const std::string& what, StateDict& dict, std::vector<MemberLoad>& loads,
                              LoadReport& report) {
  std::vector<std::string> missing;
  std::string plan;  // the keys this rank loads, and which it reshards
  absl::Status local = prepared;
  if (local.ok()) {
    local = sharded::NoThrow([&]() -> absl::Status {
      for (size_t i = 0; i < targets.size(); ++i) {
        const auto& [key, target] = targets[i];
        const sharded::StateValue* value = dict.Find(key);
        if (value == nullptr) {
          missing.push_back(key);
          continue;
        }
        loads.emplace_back();
        loads.back().target = i;
        SL_RETURN_IF_ERROR(PlanMember(key, target, *value, loads.back()));
        absl::StrAppend(&plan, key, loads.back().to_reshard ? " reshard\n" : "\n");
      }
      return absl::OkStatus();
    });
  }
  SL_RETURN_IF_ERROR(sharded::AgreeOn(pg, local.ok() ? absl::StatusOr<uint64_t>(sharded::StableHash(plan)) : local,
                                      {what, "keys to load and reshard"}));
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
  }
  report.missing_keys.insert(report.missing_keys.end(), missing.begin(), missing.end());
  return absl::OkStatus();
}

void CopySources(const ShardedTensor& into, const std::vector<at::Tensor>& sources) {
  at::NoGradGuard no_grad;
  const auto& shards = into.local_shards();
  for (size_t i = 0; i < shards.size(); ++i) shards[i].tensor.copy_(sources[i]);
}

absl::Status RestoreSharded(torch::nn::Module& module, StateDict& dict, const std::string& prefix,
                            LoadReport& report) {
  Targets members = ShardedMembers(module, prefix, /*skip_hook_owners=*/true);
  if (auto* sm = dynamic_cast<ShardedModule*>(&module)) {
    for (auto& [key, shard] : sm->sharded_parameters()) members.emplace_back(prefix + key, sm->sharded_parameter(key));
  }
  if (members.empty()) return absl::OkStatus();
  std::vector<MemberLoad> loads;
  SL_RETURN_IF_ERROR(PlanAgreeReshard(members, absl::OkStatus(), *members.front().second->process_group(),
                                      "load of sharded members", dict, loads, report));
  for (MemberLoad& load : loads) {
    report.commits.push_back(
        [member = load.member, sources = std::move(load.sources)] { CopySources(*member, sources); });
  }
  return absl::OkStatus();
}

// A mesh member loads through a staging copy of its layout: the checkpoint
// view of the copy (one owner per distinct box) takes the values like a
// sharded member, then the owners fill the other replicas (CompleteLoad, a
// collective); only the commit touches the member.
struct MeshStaging {
  sharded::mesh::MeshTensor* member;
  sharded::mesh::MeshTensor copy;
  ShardedTensor view;
};

absl::Status RestoreMesh(torch::nn::Module& module, StateDict& dict, const std::string& prefix, LoadReport& report) {
  const auto members = MeshMembers(module, prefix, /*skip_hook_owners=*/true);
  if (members.empty()) return absl::OkStatus();
  std::deque<MeshStaging> staging;  // stable: targets point into it
  Targets targets;
  const absl::Status prepared = sharded::NoThrow([&]() -> absl::Status {
    for (const auto& [key, member] : members) {
      sharded::mesh::MeshTensor copy = member->EmptyLike();
      SL_ASSIGN_OR_RETURN(ShardedTensor view, sharded::mesh::ViewForLoad(copy));
      staging.push_back(MeshStaging{member, std::move(copy), std::move(view)});
      targets.emplace_back(key, &staging.back().view);
    }
    return absl::OkStatus();
  });
  std::vector<MemberLoad> loads;
  SL_RETURN_IF_ERROR(PlanAgreeReshard(targets, prepared, *members.front().second->mesh()->world(),
                                      "load of mesh members", dict, loads, report));
  for (MemberLoad& load : loads) {
    MeshStaging& s = staging[load.target];
    CopySources(s.view, load.sources);
    if (absl::Status done = sharded::mesh::CompleteLoad(s.copy); !done.ok()) {
      return absl::Status(done.code(), absl::StrCat("loading mesh key \"", load.key, "\": ", done.message()));
    }
    report.commits.push_back([member = s.member, values = s.copy.local()] {
      at::NoGradGuard no_grad;
      member->local().copy_(values);
    });
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RestoreShardedMembersBeforeLoad(torch::nn::Module& module, StateDict& dict, const std::string& prefix,
                                             LoadReport& report) {
  SL_RETURN_IF_ERROR(RestoreSharded(module, dict, prefix, report));
  return RestoreMesh(module, dict, prefix, report);
}

}  // namespace shardlight::lightning
