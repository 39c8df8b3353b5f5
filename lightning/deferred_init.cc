#include "lightning/deferred_init.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/intrusive_ptr.h>

#include <mutex>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/no_throw.h"

namespace shardlight::lightning {
namespace {

struct Deferred {
  // Weak: the registry never keeps a parameter alive, and while the entry
  // exists the TensorImpl's address is not reused (its memory outlives a
  // weak reference), so the key cannot name another tensor.
  c10::weak_intrusive_ptr<c10::TensorImpl> impl;
  std::vector<int64_t> sizes;
  RowInitializer init;
};

class Registry {
 public:
  static Registry& Get() {
    static Registry* registry = new Registry;  // never destroyed: used from any thread until exit
    return *registry;
  }
  void Add(const at::Tensor& param, std::vector<int64_t> sizes, RowInitializer init) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = it->second.impl.expired() ? entries_.erase(it) : std::next(it);
    }
    entries_.insert_or_assign(
        param.unsafeGetTensorImpl(),
        Deferred{c10::weak_intrusive_ptr<c10::TensorImpl>(param.getIntrusivePtr()), std::move(sizes), std::move(init)});
  }
  // The entry of `param` (a copy: the initialiser runs without the lock).
  std::optional<Deferred> Find(const at::Tensor& param) {
    if (!param.defined()) return std::nullopt;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(param.unsafeGetTensorImpl());
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }
  void Remove(const at::Tensor& param) {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.erase(param.unsafeGetTensorImpl());
  }
  bool Empty() {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_.empty();
  }

 private:
  std::mutex mu_;
  std::unordered_map<const c10::TensorImpl*, Deferred> entries_;
};

std::string SizesString(const std::vector<int64_t>& sizes) { return absl::StrCat("[", absl::StrJoin(sizes, ", "), "]"); }

}  // namespace

absl::Status DeferParameter(at::Tensor& param, RowInitializer init, std::optional<std::vector<int64_t>> sizes) {
  if (!param.defined()) return absl::InvalidArgumentError("DeferParameter: the parameter is undefined");
  if (!param.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat("DeferParameter: deferred parameters are CPU tensors, not ",
                                                   param.device().str()));
  }
  if (!init) return absl::InvalidArgumentError("DeferParameter: no initialiser");
  std::vector<int64_t> global = sizes ? *std::move(sizes) : param.sizes().vec();
  for (int64_t s : global) {
    if (s < 0) return absl::InvalidArgumentError(absl::StrCat("DeferParameter: negative size in ", SizesString(global)));
  }
  // Every dim 0: no storage, and the same number of dims as the parameter
  // (fsdp's plan tells 0-dim parameters from the others by it).
  const at::Tensor placeholder = at::empty(std::vector<int64_t>(global.size(), 0), param.options());
  Registry::Get().Add(param, std::move(global), std::move(init));
  param.set_data(placeholder);
  return absl::OkStatus();
}

at::Tensor RegisterDeferredParameter(torch::nn::Module& module, const std::string& name, std::vector<int64_t> sizes,
                                     at::ScalarType dtype, RowInitializer init, bool requires_grad) {
  at::Tensor param = module.register_parameter(
      name, at::empty(std::vector<int64_t>(sizes.size(), 0), at::TensorOptions().dtype(dtype)), requires_grad);
  const absl::Status deferred = DeferParameter(param, std::move(init), std::move(sizes));
  TORCH_CHECK(deferred.ok(), "RegisterDeferredParameter \"", name, "\": ", deferred.ToString());
  return param;
}

bool IsDeferred(const at::Tensor& param) { return Registry::Get().Find(param).has_value(); }

std::vector<int64_t> MaterializedSizes(const at::Tensor& param) {
  std::optional<Deferred> d = Registry::Get().Find(param);
  return d ? d->sizes : param.sizes().vec();
}

absl::Status FillDeferredRows(const at::Tensor& param, const std::string& key, int64_t first_row, at::Tensor rows) {
  std::optional<Deferred> d = Registry::Get().Find(param);
  if (!d) return absl::FailedPreconditionError(absl::StrCat("parameter \"", key, "\" is not deferred"));
  const std::vector<int64_t>& sizes = d->sizes;
  const int64_t count = sizes.empty() ? 1 : rows.dim() > 0 ? rows.size(0) : -1;
  bool fits = rows.defined() && rows.dim() == static_cast<int64_t>(sizes.size()) && first_row >= 0;
  for (size_t i = 1; fits && i < sizes.size(); ++i) fits = rows.size(static_cast<int64_t>(i)) == sizes[i];
  if (fits) fits = sizes.empty() ? first_row == 0 : first_row + count <= sizes[0];
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat(
        "deferred parameter \"", key, "\" of sizes ", SizesString(sizes), ": cannot fill ",
        rows.defined() ? SizesString(rows.sizes().vec()) : "an undefined tensor", " at row ", first_row));
  }
  if (rows.scalar_type() != param.scalar_type()) {
    return absl::InvalidArgumentError(absl::StrCat("deferred parameter \"", key, "\" is ",
                                                   c10::toString(param.scalar_type()), "; rows given in ",
                                                   c10::toString(rows.scalar_type())));
  }
  const absl::Status filled = sharded::NoThrow([&]() -> absl::Status {
    at::NoGradGuard no_grad;
    return d->init(rows, first_row);
  });
  if (!filled.ok()) {
    return absl::Status(filled.code(), absl::StrCat("initialising deferred parameter \"", key, "\" rows [", first_row,
                                                    ", ", first_row + count, "): ", filled.message()));
  }
  return absl::OkStatus();
}

void FinishDeferred(at::Tensor& param, const at::Tensor& data) {
  Registry::Get().Remove(param);
  param.set_data(data);
}

absl::Status MaterializeDeferred(torch::nn::Module& module) {
  if (Registry::Get().Empty()) return absl::OkStatus();
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    at::Tensor& param = item.value();
    std::optional<Deferred> d = Registry::Get().Find(param);
    if (!d) continue;
    at::Tensor full = at::empty(d->sizes, param.options());
    absl::Status filled = FillDeferredRows(param, item.key(), 0, full);
    if (!filled.ok()) return filled;
    FinishDeferred(param, full);
  }
  return absl::OkStatus();
}

absl::Status CheckMaterialized(const torch::nn::Module& module) {
  if (Registry::Get().Empty()) return absl::OkStatus();
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    std::optional<Deferred> d = Registry::Get().Find(item.value());
    if (!d) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        module.name(), "'s parameter \"", item.key(), "\" ", SizesString(d->sizes),
        " is deferred and was never materialised: fit the module with the Trainer (its strategy's Setup and "
        "MaterializeDeferred fill it) or call lightning::MaterializeDeferred before the forward"));
  }
  return absl::OkStatus();
}

}  // namespace shardlight::lightning
