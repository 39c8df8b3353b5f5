#include "lightning/strategies/fsdp_unit.h"

#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace shardlight::lightning {
namespace fsdp_internal {
namespace {

std::mutex registry_mutex;
std::unordered_map<const torch::nn::Module*, UnitEntry>& Registry() {
  static auto* registry = new std::unordered_map<const torch::nn::Module*, UnitEntry>();
  return *registry;
}

}  // namespace

void RegisterUnit(const torch::nn::Module* module, UnitHooks* hooks, int unit) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  Registry()[module] = {hooks, unit};
}

void UnregisterUnits(const UnitHooks* hooks) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (auto it = Registry().begin(); it != Registry().end();) {
    it = it->second.hooks == hooks ? Registry().erase(it) : std::next(it);
  }
}

std::optional<UnitEntry> FindUnit(const torch::nn::Module* module) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  const auto it = Registry().find(module);
  if (it == Registry().end()) return std::nullopt;
  return it->second;
}

}  // namespace fsdp_internal

namespace {

// Identity on the unit's output whose backward runs first in the unit's
// backward: the run gathers the unit's parameters there. The module is
// looked up again at backward time, so a graph that outlives its run does
// nothing.
struct UnitBackwardEntry : public torch::autograd::Function<UnitBackwardEntry> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& output, int64_t module) {
    ctx->saved_data["module"] = module;
    return output.view_as(output);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* module = reinterpret_cast<const torch::nn::Module*>(ctx->saved_data["module"].toInt());
    if (const auto entry = fsdp_internal::FindUnit(module)) entry->hooks->BeforeBackward(entry->unit);
    return {grads[0], at::Tensor()};
  }
};

}  // namespace

at::Tensor RunFsdpUnit(torch::nn::Module& unit, const std::function<at::Tensor()>& forward) {
  const auto entry = fsdp_internal::FindUnit(&unit);
  if (!entry) return forward();
  entry->hooks->EnterForward(entry->unit);
  at::Tensor output = forward();
  entry->hooks->ExitForward(entry->unit);
  if (!output.defined() || !output.requires_grad()) return output;
  return UnitBackwardEntry::apply(output, static_cast<int64_t>(reinterpret_cast<intptr_t>(&unit)));
}

}  // namespace shardlight::lightning
