#include "lightning/state_dict_hooks.h"

#include <ATen/core/grad_mode.h>

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/mismatch.h"
#include "sharded/shard_metadata.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {

struct StateDictHookHost::Hooks {
  int next_id = 0;
  std::map<int, StateDictHook> state_dict;  // ordered by id: registration order
  std::map<int, LoadPreHook> load_pre;
};

void HookHandle::Remove() {
  std::shared_ptr<void> list = list_.lock();
  if (!list) return;
  auto* hooks = static_cast<StateDictHookHost::Hooks*>(list.get());
  if (load_) {
    hooks->load_pre.erase(id_);
  } else {
    hooks->state_dict.erase(id_);
  }
  list_.reset();
}

StateDictHookHost::StateDictHookHost() : hooks_(std::make_shared<Hooks>()) {}

HookHandle StateDictHookHost::AddStateDictHook(StateDictHook hook) {
  const int id = hooks_->next_id++;
  hooks_->state_dict.emplace(id, std::move(hook));
  return HookHandle(hooks_, id, /*load=*/false);
}

HookHandle StateDictHookHost::AddLoadPreHook(LoadPreHook hook) {
  const int id = hooks_->next_id++;
  hooks_->load_pre.emplace(id, std::move(hook));
  return HookHandle(hooks_, id, /*load=*/true);
}

size_t StateDictHookHost::num_state_dict_hooks() const { return hooks_->state_dict.size(); }
size_t StateDictHookHost::num_load_pre_hooks() const { return hooks_->load_pre.size(); }

absl::Status StateDictHookHost::RunStateDictHooks(torch::nn::Module& self, StateDict& dict,
                                                  const std::string& prefix) const {
  // A copy: a hook may remove itself (or another) through its handle.
  const auto hooks = hooks_->state_dict;
  for (const auto& [id, hook] : hooks) SL_RETURN_IF_ERROR(hook(self, dict, prefix));
  return absl::OkStatus();
}

absl::Status StateDictHookHost::RunLoadPreHooks(torch::nn::Module& self, StateDict& dict,
                                                const std::string& prefix, LoadReport& report) const {
  const auto hooks = hooks_->load_pre;
  for (const auto& [id, hook] : hooks) SL_RETURN_IF_ERROR(hook(self, dict, prefix, report));
  return absl::OkStatus();
}

namespace {

void Collect(torch::nn::Module& module, const std::string& prefix,
             std::vector<std::pair<std::string, torch::nn::Module*>>& out) {
  out.emplace_back(prefix, &module);
  for (const auto& child : module.named_children()) {
    Collect(*child.value(), absl::StrCat(prefix, child.key(), "."), out);
  }
}

// Parameters then buffers, module by module, as torch names them.
std::vector<std::pair<std::string, at::Tensor>> DenseEntries(torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> entries;
  for (const auto& [prefix, m] : ModulesWithPrefixes(module)) {
    for (const auto& p : m->named_parameters(/*recurse=*/false)) entries.emplace_back(prefix + p.key(), p.value());
    for (const auto& b : m->named_buffers(/*recurse=*/false)) entries.emplace_back(prefix + b.key(), b.value());
  }
  return entries;
}

std::string KeyList(const std::vector<std::string>& keys) {
  return keys.empty() ? "none" : absl::StrCat("\"", absl::StrJoin(keys, "\", \""), "\"");
}

}  // namespace

std::vector<std::pair<std::string, torch::nn::Module*>> ModulesWithPrefixes(torch::nn::Module& root) {
  std::vector<std::pair<std::string, torch::nn::Module*>> out;
  Collect(root, "", out);
  return out;
}

absl::StatusOr<StateDict> StateDictOf(torch::nn::Module& module) {
  StateDict dict;
  for (auto& [name, tensor] : DenseEntries(module)) {
    SL_RETURN_IF_ERROR(dict.Insert(name, tensor.detach()));
  }
  for (const auto& [prefix, m] : ModulesWithPrefixes(module)) {
    if (auto* host = dynamic_cast<StateDictHookHost*>(m)) SL_RETURN_IF_ERROR(host->RunStateDictHooks(*m, dict, prefix));
  }
  return dict;
}

absl::StatusOr<LoadReport> LoadStateDict(torch::nn::Module& module, StateDict dict, bool strict) {
  LoadReport report;
  // Step 1: pre-hooks, which may consume their entries (and stage commits).
  for (const auto& [prefix, m] : ModulesWithPrefixes(module)) {
    if (auto* host = dynamic_cast<StateDictHookHost*>(m)) {
      SL_RETURN_IF_ERROR(host->RunLoadPreHooks(*m, dict, prefix, report));
    }
  }
  // Step 2: check every dense entry before touching any.
  std::set<std::string> expected;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // destination, source
  // A dense parameter a pre-hook loaded (one a strategy holds sharded) is done.
  const std::set<std::string> hooked(report.loaded_keys.begin(), report.loaded_keys.end());
  for (auto& [name, dest] : DenseEntries(module)) {
    expected.insert(name);
    if (hooked.count(name) > 0) continue;
    const sharded::StateValue* value = dict.Find(name);
    if (value == nullptr) {
      report.missing_keys.push_back(name);
      continue;
    }
    if (sharded::IsSharded(*value)) {
      return absl::InvalidArgumentError(absl::StrCat("key \"", name, "\" holds a sharded tensor but the module's \"",
                                                     name, "\" is a dense parameter or buffer"));
    }
    const at::Tensor& src = std::get<at::Tensor>(*value);
    SL_RETURN_IF_ERROR(sharded::CheckSizeAndDtype(name, {"the state dict", src.sizes().vec(), src.scalar_type()},
                                                  {"the module", dest.sizes().vec(), dest.scalar_type()}));
    copies.emplace_back(dest, src);
    report.loaded_keys.push_back(name);
  }
  for (const auto& [name, value] : dict.entries()) {
    if (expected.count(name) == 0) report.unexpected_keys.push_back(name);
  }
  if (strict && (!report.missing_keys.empty() || !report.unexpected_keys.empty())) {
    return absl::InvalidArgumentError(absl::StrCat("strict load: missing keys: ", KeyList(report.missing_keys),
                                                   "; unexpected keys: ", KeyList(report.unexpected_keys)));
  }
  // Step 3: everything checked out; write.
  at::NoGradGuard no_grad;
  for (auto& commit : report.commits) commit();
  report.commits.clear();
  for (auto& [dest, src] : copies) dest.copy_(src);
  return report;
}

}  // namespace shardlight::lightning
