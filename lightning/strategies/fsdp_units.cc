#include "lightning/strategies/fsdp_units.h"

#include <map>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lightning/state_dict_hooks.h"

namespace shardlight::lightning {

absl::StatusOr<std::vector<UnitPlan>> PlanUnits(torch::nn::Module& root, const std::vector<std::string>& units) {
  std::map<std::string, torch::nn::Module*> submodules;
  for (const auto& [prefix, m] : ModulesWithPrefixes(root)) {
    if (!prefix.empty()) submodules.emplace(prefix.substr(0, prefix.size() - 1), m);
  }
  std::vector<UnitPlan> plan;
  std::map<std::string, size_t> index;  // unit name -> its place in `plan`
  for (const std::string& unit : units) {
    if (unit.empty() || submodules.count(unit) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("fsdp unit \"", unit, "\" names no submodule of ", root.name(),
                                                     " (units are dotted paths such as \"blocks.0\")"));
    }
    if (!index.emplace(unit, plan.size()).second) {
      return absl::InvalidArgumentError(absl::StrCat("fsdp unit \"", unit, "\" is named twice"));
    }
    plan.push_back({unit, submodules.at(unit), {}});
  }
  index.emplace("", plan.size());
  plan.push_back({"", &root, {}});
  // Bottom-up: the longest unit path that contains the key's module.
  auto owner = [&](const std::string& key) -> size_t {
    size_t best = index.at("");
    size_t best_length = 0;
    for (const auto& [name, i] : index) {
      if (!name.empty() && name.size() > best_length && absl::StartsWith(key, name + ".")) {
        best = i;
        best_length = name.size();
      }
    }
    return best;
  };
  auto shown = [&](size_t unit) { return plan[unit].name.empty() ? std::string("the root") : plan[unit].name; };
  std::unordered_map<const void*, std::pair<std::string, size_t>> seen;  // tensor -> (key, unit)
  for (const auto& [prefix, m] : ModulesWithPrefixes(root)) {
    for (const auto& p : m->named_parameters(/*recurse=*/false)) {
      const at::Tensor& param = p.value();
      if (!param.requires_grad() || param.dim() == 0) continue;
      const std::string key = prefix + p.key();
      const size_t unit = owner(key);
      const auto [it, fresh] = seen.emplace(param.unsafeGetTensorImpl(), std::make_pair(key, unit));
      if (!fresh) {
        const auto& [first_key, first_unit] = it->second;
        if (first_unit != unit) {
          return absl::InvalidArgumentError(absl::StrCat(
              "fsdp: parameter \"", first_key, "\" (unit ", shown(first_unit), ") and \"", key, "\" (unit ",
              shown(unit), ") are one tensor: a parameter in two units"));
        }
        return absl::InvalidArgumentError(absl::StrCat("fsdp: parameters \"", first_key, "\" and \"", key,
                                                       "\" are one tensor; shared parameters are not supported yet"));
      }
      plan[unit].params.push_back({key, param});
    }
  }
  return plan;
}

}  // namespace shardlight::lightning
