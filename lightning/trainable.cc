#include "lightning/trainable.h"

#include "lightning/sharded_module.h"
#include "lightning/state_dict_hooks.h"

namespace shardlight::lightning {

std::vector<at::Tensor> Trainables::LocalTensors() const {
  std::vector<at::Tensor> out;
  for (const auto& d : dense) out.push_back(d.param);
  for (const auto& s : sharded) {
    for (const auto& shard : s.member->local_shards()) out.push_back(shard.tensor);
  }
  return out;
}

Trainables TrainablesOf(torch::nn::Module& module) {
  Trainables t;
  auto* root = dynamic_cast<ShardedModule*>(&module);
  for (const auto& [prefix, m] : ModulesWithPrefixes(module)) {
    for (const auto& p : m->named_parameters(/*recurse=*/false)) {
      const std::string key = prefix + p.key();
      if (root != nullptr && root->sharded_parameter(key) != nullptr) continue;  // its shard stands in, below
      if (p.value().requires_grad()) t.dense.push_back({key, p.value()});
    }
  }
  if (root != nullptr) {
    for (auto& [key, shard] : root->sharded_parameters()) t.sharded.push_back({key, root->sharded_parameter(key)});
  }
  for (auto& [key, member] : ShardedMembers(module, "")) {
    if (member->metadata().properties.requires_grad) t.sharded.push_back({key, member});
  }
  return t;
}

}  // namespace shardlight::lightning
