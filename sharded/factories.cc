#include "sharded/factories.h"

#include <ATen/core/grad_mode.h>

#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sharded/agreement.h"
#include "sharded/global_random.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded {
namespace {

using Fill = std::function<void(Shard&)>;

// The one path every factory takes: layout, agreement, allocation, fill.
// `precheck` is the factory's own verdict on its arguments; it is shared like
// the layout's, so a bad argument on one rank fails every rank.
absl::StatusOr<ShardedTensor> Create(const ShardingSpec& spec, const std::vector<int64_t>& sizes,
                                     const ShardedOptions& options, ProcessGroupPtr pg, const Fill& fill,
                                     absl::Status precheck = absl::OkStatus()) {
  if (!pg) return absl::InvalidArgumentError("no process group");
  TensorProperties props;
  props.dtype = options.dtype;
  props.requires_grad = options.requires_grad;
  absl::StatusOr<ShardedTensorMetadata> layout =
      precheck.ok() ? BuildMetadata(spec, sizes, props, pg->getSize()) : precheck;
  SL_RETURN_IF_ERROR(AgreeOn(*pg, LayoutHash(layout), {"sharded tensor factory", "sharded tensor layout"}));
  ShardedTensorMetadata metadata = *std::move(layout);
  std::vector<Shard> shards = AllocateLocalShards(metadata, pg->getRank());
  {
    at::NoGradGuard no_grad;
    for (Shard& s : shards) {
      if (fill) fill(s);
    }
  }
  for (Shard& s : shards) s.tensor.set_requires_grad(options.requires_grad);
  return ShardedTensor::InitFromLocalShardsAndGlobalMetadata(std::move(shards), std::move(metadata),
                                                              std::move(pg));
}

absl::Status RequireFloating(c10::ScalarType dtype, const char* what) {
  if (dtype == c10::ScalarType::Float || dtype == c10::ScalarType::Double || dtype == c10::ScalarType::BFloat16) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " needs a floating dtype (float32, float64, bfloat16), not ", c10::toString(dtype)));
}

absl::StatusOr<ShardedTensor> Random(const ShardingSpec& spec, const std::vector<int64_t>& sizes, uint64_t seed,
                                     RandomKind kind, const ShardedOptions& options, ProcessGroupPtr pg) {
  return Create(
      spec, sizes, options, std::move(pg),
      [&](Shard& s) { FillGlobalRandom(s.tensor, s.metadata.offsets, sizes, seed, kind); },
      RequireFloating(options.dtype, kind == RandomKind::kUniform ? "rand" : "randn"));
}

}  // namespace

absl::StatusOr<ShardedTensor> Empty(const ShardingSpec& spec, const std::vector<int64_t>& sizes,
                                    const ShardedOptions& options, ProcessGroupPtr pg) {
  return Create(spec, sizes, options, std::move(pg), nullptr);
}

absl::StatusOr<ShardedTensor> Full(const ShardingSpec& spec, const std::vector<int64_t>& sizes,
                                   const c10::Scalar& value, const ShardedOptions& options, ProcessGroupPtr pg) {
  return Create(spec, sizes, options, std::move(pg), [&](Shard& s) { s.tensor.fill_(value); });
}

absl::StatusOr<ShardedTensor> Zeros(const ShardingSpec& spec, const std::vector<int64_t>& sizes,
                                    const ShardedOptions& options, ProcessGroupPtr pg) {
  return Full(spec, sizes, 0, options, std::move(pg));
}

absl::StatusOr<ShardedTensor> Ones(const ShardingSpec& spec, const std::vector<int64_t>& sizes,
                                   const ShardedOptions& options, ProcessGroupPtr pg) {
  return Full(spec, sizes, 1, options, std::move(pg));
}

absl::StatusOr<ShardedTensor> Rand(const ShardingSpec& spec, const std::vector<int64_t>& sizes, uint64_t seed,
                                   const ShardedOptions& options, ProcessGroupPtr pg) {
  return Random(spec, sizes, seed, RandomKind::kUniform, options, std::move(pg));
}

absl::StatusOr<ShardedTensor> Randn(const ShardingSpec& spec, const std::vector<int64_t>& sizes, uint64_t seed,
                                    const ShardedOptions& options, ProcessGroupPtr pg) {
  return Random(spec, sizes, seed, RandomKind::kNormal, options, std::move(pg));
}

}  // namespace shardlight::sharded
