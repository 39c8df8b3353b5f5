#include "lightning/metrics/metric.h"

#include <ATen/core/grad_mode.h>

#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/mismatch.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/agreement.h"
#include "sharded/collectives.h"
#include "sharded/stable_hash.h"
#include "sharded/factories.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::metrics {
namespace {

// The identity of a reduction: what a state holds before any update.
at::Tensor Identity(Reduction reduction, const std::vector<int64_t>& shape, c10::ScalarType dtype) {
  const auto options = at::TensorOptions().dtype(dtype);
  switch (reduction) {
    case Reduction::kMin:
      return at::isFloatingType(dtype) ? at::full(shape, std::numeric_limits<double>::infinity(), options)
                                       : at::full(shape, std::numeric_limits<int64_t>::max(), options);
    case Reduction::kMax:
      return at::isFloatingType(dtype) ? at::full(shape, -std::numeric_limits<double>::infinity(), options)
                                       : at::full(shape, std::numeric_limits<int64_t>::min(), options);
    case Reduction::kCat: {
      std::vector<int64_t> rows = {0};
      rows.insert(rows.end(), shape.begin(), shape.end());
      return at::empty(rows, options);
    }
    case Reduction::kSum:
    case Reduction::kMean:
      break;
  }
  return at::zeros(shape, options);
}

c10d::ReduceOp OpOf(Reduction reduction) {
  switch (reduction) {
    case Reduction::kMin:
      return c10d::ReduceOp::MIN;
    case Reduction::kMax:
      return c10d::ReduceOp::MAX;
    default:
      return c10d::ReduceOp::SUM;
  }
}

// Collective: the element-wise reduction of `local` over the group.
absl::Status Allreduce(c10d::ProcessGroup& pg, at::Tensor& local, Reduction reduction, const std::string& what) {
  if (pg.getSize() == 1) return absl::OkStatus();
  std::vector<at::Tensor> buf = {local.reshape({-1}).clone()};
  if (buf[0].numel() == 0) return absl::OkStatus();
  c10d::AllreduceOptions options;
  options.reduceOp = OpOf(reduction);
  SL_RETURN_IF_ERROR(sharded::RunCollective(pg, what, [&] { return pg.allreduce(buf, options); }));
  local.copy_(buf[0].view(local.sizes()));
  return absl::OkStatus();
}

// Collective: every rank's element counts, as a [W, W] int64 matrix (row = sender).
absl::StatusOr<at::Tensor> AllgatherCounts(c10d::ProcessGroup& pg, const at::Tensor& mine, const char* what) {
  const int w = pg.getSize();
  if (w == 1) return mine.reshape({1, -1}).clone();
  std::vector<at::Tensor> in = {mine.contiguous()};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < w; ++r) out[0].push_back(at::empty_like(in[0]));
  SL_RETURN_IF_ERROR(sharded::RunCollective(pg, what, [&] { return pg.allgather(out, in); }));
  return at::stack(out[0]);
}

// Collective: every rank's rows, concatenated in rank order.
absl::StatusOr<at::Tensor> AllgatherRows(c10d::ProcessGroup& pg, const at::Tensor& rows, const std::string& what) {
  const int w = pg.getSize();
  if (w == 1) return rows;
  SL_ASSIGN_OR_RETURN(at::Tensor counts,
                      AllgatherCounts(pg, at::full({1}, rows.size(0), at::kLong), "allgather of row counts"));
  const int64_t max_rows = std::max<int64_t>(1, counts.max().item<int64_t>());  // Gloo wants non-empty buffers
  std::vector<int64_t> padded_shape = rows.sizes().vec();
  padded_shape[0] = max_rows;
  std::vector<at::Tensor> in = {at::zeros(padded_shape, rows.options())};
  in[0].narrow(0, 0, rows.size(0)).copy_(rows);
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < w; ++r) out[0].push_back(at::empty_like(in[0]));
  SL_RETURN_IF_ERROR(sharded::RunCollective(pg, what, [&] { return pg.allgather(out, in); }));
  std::vector<at::Tensor> parts;
  for (int r = 0; r < w; ++r) parts.push_back(out[0][r].narrow(0, 0, counts[r][0].item<int64_t>()));
  return at::cat(parts);
}

at::Tensor AsBytes(const at::Tensor& t) { return t.contiguous().view(at::kByte).reshape({-1}); }

}  // namespace

const char* ReductionName(Reduction reduction) {
  switch (reduction) {
    case Reduction::kSum:
      return "sum";
    case Reduction::kMean:
      return "mean";
    case Reduction::kMin:
      return "min";
    case Reduction::kMax:
      return "max";
    case Reduction::kCat:
      return "cat";
  }
  return "?";
}

Metric::Metric(std::string name) : ShardedModule(std::move(name)) {
  // Plain functions of the module: the hooks keep no reference to it.
  state_dict_hook_ = AddStateDictHook([](torch::nn::Module& m, StateDict& dict, const std::string& prefix) {
    return static_cast<Metric&>(m).AddToStateDict(dict, prefix);
  });
  load_pre_hook_ = AddLoadPreHook(
      [](torch::nn::Module& m, StateDict& dict, const std::string& prefix, LoadReport& report) {
        return static_cast<Metric&>(m).RestoreFromStateDict(dict, prefix, report);
      });
}

void Metric::AddState(const std::string& name, std::vector<int64_t> shape, c10::ScalarType dtype,
                      Reduction reduction) {
  if (name.empty() || absl::StrContains(name, ".") || Find(name) != nullptr) {
    if (declaration_error_.ok()) {
      declaration_error_ = absl::InvalidArgumentError(
          absl::StrCat("metric '", this->name(), "': state name \"", name, "\" is empty, has a '.' or is taken"));
    }
    return;
  }
  State& s = states_.emplace_back();
  s.name = name;
  s.reduction = reduction;
  s.shape = std::move(shape);
  s.dtype = dtype;
  ResetState(s);
}

void Metric::AddShardedState(const std::string& name, std::vector<int64_t> sizes, c10::ScalarType dtype,
                             int64_t chunk_dim) {
  ShardedState& s = sharded_states_.emplace_back();
  s.name = name;
  s.sizes = std::move(sizes);
  s.dtype = dtype;
  s.chunk_dim = chunk_dim;
}

void Metric::ResetState(State& s) {
  s.global = Identity(s.reduction, s.shape, s.dtype);
  s.local = Identity(s.reduction, s.shape, s.dtype);
  s.pending_rows.clear();
  if (s.reduction == Reduction::kMean) {
    s.global_weight = at::zeros(s.shape, at::kDouble);
    s.local_weight = at::zeros(s.shape, at::kDouble);
  }
}

void Metric::Reset() {
  at::NoGradGuard no_grad;
  for (State& s : states_) {
    // In place where the shape allows: a state dict built earlier shares these tensors.
    if (s.reduction == Reduction::kCat) {
      ResetState(s);
      continue;
    }
    s.global.copy_(Identity(s.reduction, s.shape, s.dtype));
    s.local.copy_(s.global);
    if (s.reduction == Reduction::kMean) {
      s.global_weight.zero_();
      s.local_weight.zero_();
    }
  }
  for (ShardedState& s : sharded_states_) {
    s.pending_indices.clear();
    s.pending_values.clear();
    if (auto* t = sharded_tensor(s.name)) {
      for (auto& shard : t->local_shards()) shard.tensor.zero_();
    }
  }
  error_ = absl::OkStatus();
}

Metric::State* Metric::Find(const std::string& name) {
  for (State& s : states_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const Metric::State* Metric::Find(const std::string& name) const {
  for (const State& s : states_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

absl::Status Metric::Bind(ProcessGroupPtr pg) {
  if (!pg) return absl::InvalidArgumentError(absl::StrCat("metric '", name(), "': Bind needs a process group"));
  if (pg_) return absl::FailedPreconditionError(absl::StrCat("metric '", name(), "' is already bound"));
  // Ranks must agree on what they are about to create.
  SL_RETURN_IF_ERROR(sharded::AgreeOn(*pg, declaration_error_.ok() ? absl::StatusOr<uint64_t>(Fingerprint())
                                                                    : absl::StatusOr<uint64_t>(declaration_error_),
                                      sharded::AgreementContext{"metric bind",
                                                                absl::StrCat("declaration of metric '", name(), "'")}));
  for (ShardedState& s : sharded_states_) {
    sharded::ShardedOptions options;
    options.dtype = s.dtype;
    SL_ASSIGN_OR_RETURN(sharded::ShardedTensor t,
                        sharded::Zeros(sharded::ChunkShardingSpec::OnRanks(s.chunk_dim, pg->getSize()), s.sizes,
                                       options, pg));
    SL_RETURN_IF_ERROR(RegisterShardedTensor(s.name, std::move(t)));
  }
  pg_ = std::move(pg);
  return absl::OkStatus();
}

at::Tensor& Metric::Local(const std::string& name) { return Find(name)->local; }

void Metric::AddToMean(const std::string& name, const at::Tensor& weighted_sum, const at::Tensor& weight) {
  State* s = Find(name);
  s->local.add_(weighted_sum.to(s->dtype));
  s->local_weight.add_(weight.to(at::kDouble));
}

void Metric::Append(const std::string& name, const at::Tensor& rows) {
  State* s = Find(name);
  if (rows.size(0) > 0) s->pending_rows.push_back(rows.detach().to(s->dtype).contiguous());
}

void Metric::AccumulateSharded(const std::string& name, const at::Tensor& indices, const at::Tensor& values) {
  for (ShardedState& s : sharded_states_) {
    if (s.name != name || indices.size(0) == 0) continue;
    s.pending_indices.push_back(indices.to(at::kLong).contiguous());
    s.pending_values.push_back(values.to(s.dtype).contiguous());
  }
}

at::Tensor Metric::Global(const std::string& name) const {
  const State* s = Find(name);
  if (s->reduction == Reduction::kMean) return s->global.to(at::kDouble) / s->global_weight;
  return s->global;
}

at::Tensor Metric::MeanWeight(const std::string& name) const { return Find(name)->global_weight; }

sharded::ShardedTensor* Metric::Sharded(const std::string& name) { return sharded_tensor(name); }

absl::Status Metric::Reject(const absl::Status& status) {
  absl::Status named(status.code(), absl::StrCat("metric '", name(), "': ", status.message()));
  if (error_.ok()) error_ = named;
  return named;
}

absl::Status Metric::CheckUsable() const {
  if (!declaration_error_.ok()) return declaration_error_;
  if (!error_.ok()) {
    return absl::Status(error_.code(), absl::StrCat(error_.message(), " (the metric is poisoned until Reset)"));
  }
  return absl::OkStatus();
}

uint64_t Metric::Fingerprint() const {
  std::string text = absl::StrCat(name(), "|", Describe());
  for (const State& s : states_) {
    absl::StrAppend(&text, "|", s.name, ":", ReductionName(s.reduction), ":", c10::toString(s.dtype), ":",
                    absl::StrJoin(s.shape, "x"));
  }
  for (const ShardedState& s : sharded_states_) {
    absl::StrAppend(&text, "|sharded ", s.name, ":", c10::toString(s.dtype), ":", absl::StrJoin(s.sizes, "x"), "/",
                    s.chunk_dim);
  }
  return sharded::StableHash(text);
}

absl::Status Metric::SyncDense(State& s) {
  const std::string what = absl::StrCat("metric '", name(), "' state '", s.name, "'");
  if (s.reduction == Reduction::kCat) {
    std::vector<int64_t> empty_shape = {0};
    empty_shape.insert(empty_shape.end(), s.shape.begin(), s.shape.end());
    at::Tensor mine = s.pending_rows.empty() ? at::empty(empty_shape, at::TensorOptions().dtype(s.dtype))
                                             : at::cat(s.pending_rows);
    at::Tensor all = mine;
    if (pg_) {
      SL_ASSIGN_OR_RETURN(all, AllgatherRows(*pg_, mine, "allgather of " + what));
    }
    if (all.size(0) > 0) s.global = at::cat({s.global, all});
    s.pending_rows.clear();
    return absl::OkStatus();
  }
  if (pg_) {
    SL_RETURN_IF_ERROR(Allreduce(*pg_, s.local, s.reduction, "allreduce of " + what));
    if (s.reduction == Reduction::kMean) {
      SL_RETURN_IF_ERROR(Allreduce(*pg_, s.local_weight, Reduction::kSum, "allreduce of " + what + " weight"));
    }
  }
  // Folded in place: a state dict taken earlier shares `global`.
  switch (s.reduction) {
    case Reduction::kMin:
      s.global.copy_(at::minimum(s.global, s.local));
      break;
    case Reduction::kMax:
      s.global.copy_(at::maximum(s.global, s.local));
      break;
    default:
      s.global.add_(s.local);
      break;
  }
  s.local.copy_(Identity(s.reduction, s.shape, s.dtype));
  if (s.reduction == Reduction::kMean) {
    s.global_weight.add_(s.local_weight);
    s.local_weight.zero_();
  }
  return absl::OkStatus();
}

absl::Status Metric::SyncSharded(ShardedState& s) {
  sharded::ShardedTensor* t = sharded_tensor(s.name);
  if (t == nullptr || !pg_) {
    return absl::FailedPreconditionError(
        absl::StrCat("metric '", name(), "': sharded state '", s.name, "' needs Bind(process group) first"));
  }
  const int w = pg_->getSize();
  const int64_t ndim = static_cast<int64_t>(s.sizes.size());
  at::Tensor idx = s.pending_indices.empty() ? at::empty({0, ndim}, at::kLong) : at::cat(s.pending_indices);
  at::Tensor val = s.pending_values.empty() ? at::empty({0}, at::TensorOptions().dtype(s.dtype))
                                            : at::cat(s.pending_values);
  // Step 1: group the pending pairs by the rank owning their shard.
  const auto& shards = t->metadata().shards;
  std::vector<at::Tensor> idx_by_rank(w), val_by_rank(w);
  for (int r = 0; r < w; ++r) {
    idx_by_rank[r] = at::empty({0, ndim}, at::kLong);
    val_by_rank[r] = at::empty({0}, val.options());
  }
  for (const auto& shard : shards) {
    at::Tensor inside = at::ones({idx.size(0)}, at::kBool);
    for (int64_t d = 0; d < ndim; ++d) {
      at::Tensor col = idx.select(1, d);
      inside &= (col >= shard.offsets[d]) & (col < shard.offsets[d] + shard.sizes[d]);
    }
    const int r = shard.placement.rank;
    idx_by_rank[r] = at::cat({idx_by_rank[r], idx.index({inside})});
    val_by_rank[r] = at::cat({val_by_rank[r], val.index({inside})});
  }
  at::Tensor send_counts = at::empty({w}, at::kLong);
  for (int r = 0; r < w; ++r) send_counts[r] = idx_by_rank[r].size(0);
  // Step 2: every rank learns how many pairs it receives from each sender.
  SL_ASSIGN_OR_RETURN(at::Tensor counts, AllgatherCounts(*pg_, send_counts, "allgather of sharded update counts"));
  const int me = pg_->getRank();
  at::Tensor recv_idx, recv_val;
  if (w == 1) {
    recv_idx = idx_by_rank[0];
    recv_val = val_by_rank[0];
  } else {
    // Step 3: the pairs travel to their owners (indices, then values).
    int64_t recv_n = 0;
    std::vector<int64_t> send_n(w), recv_from(w);
    for (int r = 0; r < w; ++r) {
      send_n[r] = counts[me][r].item<int64_t>();
      recv_from[r] = counts[r][me].item<int64_t>();
      recv_n += recv_from[r];
    }
    recv_idx = at::empty({recv_n, ndim}, at::kLong);
    recv_val = at::empty({recv_n}, val.options());
    auto scaled = [](std::vector<int64_t> n, int64_t bytes) {
      for (auto& x : n) x *= bytes;
      return n;
    };
    // Gloo wants non-empty buffers: pad by one element each way.
    auto padded = [](const at::Tensor& bytes) { return at::cat({bytes, at::zeros({8}, at::kByte)}); };
    at::Tensor recv_idx_bytes = at::empty({recv_n * ndim * 8 + 8}, at::kByte);
    SL_RETURN_IF_ERROR(sharded::AllToAllBytes(*pg_, padded(AsBytes(at::cat(idx_by_rank))), scaled(send_n, ndim * 8),
                                              recv_idx_bytes, scaled(recv_from, ndim * 8)));
    const int64_t vbytes = static_cast<int64_t>(c10::elementSize(s.dtype));
    at::Tensor recv_val_bytes = at::empty({recv_n * vbytes + 8}, at::kByte);
    SL_RETURN_IF_ERROR(sharded::AllToAllBytes(*pg_, padded(AsBytes(at::cat(val_by_rank))), scaled(send_n, vbytes),
                                              recv_val_bytes, scaled(recv_from, vbytes)));
    AsBytes(recv_idx).copy_(recv_idx_bytes.narrow(0, 0, recv_n * ndim * 8));
    AsBytes(recv_val).copy_(recv_val_bytes.narrow(0, 0, recv_n * vbytes));
  }
  // Step 4: each rank adds what it received into its own shards.
  at::NoGradGuard no_grad;
  for (auto& shard : t->local_shards()) {
    at::Tensor inside = at::ones({recv_idx.size(0)}, at::kBool);
    for (int64_t d = 0; d < ndim; ++d) {
      at::Tensor col = recv_idx.select(1, d);
      inside &= (col >= shard.metadata.offsets[d]) & (col < shard.metadata.offsets[d] + shard.metadata.sizes[d]);
    }
    at::Tensor mine = recv_idx.index({inside});
    c10::List<c10::optional<at::Tensor>> where;
    for (int64_t d = 0; d < ndim; ++d) where.push_back(mine.select(1, d) - shard.metadata.offsets[d]);
    shard.tensor.index_put_(where, recv_val.index({inside}), /*accumulate=*/true);
  }
  s.pending_indices.clear();
  s.pending_values.clear();
  return absl::OkStatus();
}

absl::Status Metric::Sync() {
  at::NoGradGuard no_grad;
  const absl::Status usable = CheckUsable();
  if (pg_) {
    SL_RETURN_IF_ERROR(sharded::AgreeOn(
        *pg_, usable.ok() ? absl::StatusOr<uint64_t>(Fingerprint()) : absl::StatusOr<uint64_t>(usable),
        sharded::AgreementContext{"metric sync", absl::StrCat("configuration of metric '", name(), "'")}));
  } else {
    SL_RETURN_IF_ERROR(usable);
  }
  for (State& s : states_) SL_RETURN_IF_ERROR(SyncDense(s));
  for (ShardedState& s : sharded_states_) SL_RETURN_IF_ERROR(SyncSharded(s));
  return absl::OkStatus();
}

absl::StatusOr<sharded::StateValue> Metric::Compute() {
  SL_RETURN_IF_ERROR(Sync());
  return ComputeValue();
}

absl::StatusOr<double> Metric::ComputeScalar() {
  SL_ASSIGN_OR_RETURN(sharded::StateValue value, Compute());
  const at::Tensor* dense = std::get_if<at::Tensor>(&value);
  if (dense == nullptr || dense->numel() != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("metric '", name(), "' has no one-number value; override ComputeScalar"));
  }
  return dense->item<double>();
}

int64_t Metric::StateBytes() const {
  int64_t bytes = 0;
  auto add = [&](const at::Tensor& t) {
    if (t.defined()) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  };
  for (const State& s : states_) {
    add(s.global);
    add(s.local);
    add(s.global_weight);
    add(s.local_weight);
    for (const auto& r : s.pending_rows) add(r);
  }
  for (const ShardedState& s : sharded_states_) {
    for (const auto& t : s.pending_indices) add(t);
    for (const auto& t : s.pending_values) add(t);
  }
  for (const auto& member : sharded_tensors()) {
    for (const auto& shard : member.second.local_shards()) add(shard.tensor);
  }
  return bytes;
}

// ------------------------------------------------------------ state dicts

absl::Status Metric::AddToStateDict(StateDict& dict, const std::string& prefix) {
  SL_RETURN_IF_ERROR(Sync());
  for (const State& s : states_) {
    SL_RETURN_IF_ERROR(dict.Insert(prefix + s.name, s.global));
    if (s.reduction == Reduction::kMean) {
      SL_RETURN_IF_ERROR(dict.Insert(prefix + s.name + ".weight", s.global_weight));
    }
    if (s.reduction == Reduction::kCat) {
      SL_RETURN_IF_ERROR(dict.Insert(prefix + s.name + ".rows", at::full({1}, s.global.size(0), at::kLong)));
    }
  }
  return absl::OkStatus();
}

namespace {

// The dense tensor under `key`, checked against what the state expects.
absl::StatusOr<at::Tensor> TakeDense(StateDict& dict, const std::string& key, const std::vector<int64_t>& shape,
                                     c10::ScalarType dtype, bool any_rows) {
  const sharded::StateValue* value = dict.Find(key);
  const at::Tensor* dense = value ? std::get_if<at::Tensor>(value) : nullptr;
  if (dense == nullptr) return absl::InvalidArgumentError(absl::StrCat("key \"", key, "\" is not a dense tensor"));
  std::vector<int64_t> got = dense->sizes().vec();
  if (any_rows && !got.empty()) got.erase(got.begin());
  if (got != shape || (any_rows && dense->dim() == 0)) {
    return sharded::MismatchError("size", key, "the state dict", sharded::ShapeToString(dense->sizes().vec()),
                                  "the metric", absl::StrCat(any_rows ? "[rows, " : "[", absl::StrJoin(shape, ", "), "]"));
  }
  if (dense->scalar_type() != dtype) {
    return sharded::MismatchError("dtype", key, "the state dict", c10::toString(dense->scalar_type()), "the metric",
                                  c10::toString(dtype));
  }
  return *dense;
}

}  // namespace

absl::Status Metric::RestoreFromStateDict(StateDict& dict, const std::string& prefix, LoadReport& report) {
  for (State& s : states_) {
    std::vector<std::string> keys = {prefix + s.name};
    if (s.reduction == Reduction::kMean) keys.push_back(prefix + s.name + ".weight");
    if (s.reduction == Reduction::kCat) keys.push_back(prefix + s.name + ".rows");
    bool missing = false;
    for (const auto& key : keys) {
      if (!dict.Contains(key)) {
        report.missing_keys.push_back(key);
        missing = true;
      }
    }
    if (missing) continue;
    SL_ASSIGN_OR_RETURN(at::Tensor value, TakeDense(dict, keys[0], s.shape, s.dtype, s.reduction == Reduction::kCat));
    at::Tensor weight;
    if (s.reduction == Reduction::kMean) {
      SL_ASSIGN_OR_RETURN(weight, TakeDense(dict, keys[1], s.shape, at::kDouble, false));
    }
    if (s.reduction == Reduction::kCat) {
      SL_ASSIGN_OR_RETURN(at::Tensor rows, TakeDense(dict, keys[1], {1}, at::kLong, false));
      if (rows[0].item<int64_t>() != value.size(0)) {
        return absl::InvalidArgumentError(absl::StrCat("key \"", keys[1], "\" says ", rows[0].item<int64_t>(),
                                                       " rows but \"", keys[0], "\" has ", value.size(0)));
      }
    }
    value = value.clone();
    if (weight.defined()) weight = weight.clone();
    for (const auto& key : keys) {
      dict.Erase(key);
      report.loaded_keys.push_back(key);
    }
    State* state = &s;  // states_ is a deque: stable
    report.commits.push_back([state, value, weight] {
      at::NoGradGuard no_grad;
      if (state->reduction == Reduction::kCat) {
        state->global = value;
      } else {
        state->global.copy_(value);
      }
      state->local = Identity(state->reduction, state->shape, state->dtype);
      state->pending_rows.clear();
      if (weight.defined()) {
        state->global_weight.copy_(weight);
        state->local_weight.zero_();
      }
    });
  }
  // Sharded states are loaded by the enclosing LightningModule's hook; pairs
  // buffered before the load belong to the state it replaces.
  if (!sharded_states_.empty()) {
    report.commits.push_back([this] {
      for (ShardedState& sharded : sharded_states_) {
        sharded.pending_indices.clear();
        sharded.pending_values.clear();
      }
    });
  }
  return absl::OkStatus();
}

std::vector<std::string> Metric::CatRowsKeys(const std::string& prefix) const {
  std::vector<std::string> keys;
  for (const State& s : states_) {
    if (s.reduction == Reduction::kCat) keys.push_back(prefix + s.name + ".rows");
  }
  return keys;
}

absl::Status Metric::ResizeCatState(const std::string& prefix, const std::string& rows_key, int64_t rows) {
  for (State& s : states_) {
    if (s.reduction != Reduction::kCat || prefix + s.name + ".rows" != rows_key) continue;
    if (rows < 0) return absl::InvalidArgumentError(absl::StrCat("key \"", rows_key, "\" holds ", rows, " rows"));
    std::vector<int64_t> shape = {rows};
    shape.insert(shape.end(), s.shape.begin(), s.shape.end());
    s.global = at::zeros(shape, at::TensorOptions().dtype(s.dtype));
    s.local = Identity(s.reduction, s.shape, s.dtype);
    s.pending_rows.clear();
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("no cat state for key \"", rows_key, "\""));
}

// ------------------------------------------------------------ module trees

std::vector<std::pair<std::string, Metric*>> MetricsOf(torch::nn::Module& root) {
  std::vector<std::pair<std::string, Metric*>> out;
  for (auto& [prefix, module] : ModulesWithPrefixes(root)) {
    if (auto* metric = dynamic_cast<Metric*>(module)) out.emplace_back(prefix, metric);
  }
  return out;
}

absl::Status BindMetrics(torch::nn::Module& root, Metric::ProcessGroupPtr pg) {
  for (auto& [prefix, metric] : MetricsOf(root)) {
    if (!metric->process_group()) SL_RETURN_IF_ERROR(metric->Bind(pg));
  }
  return absl::OkStatus();
}

absl::Status PrepareCheckpointLoad(torch::nn::Module& root, const std::string& key_prefix, const std::string& dir,
                                   c10d::ProcessGroup& pg, std::shared_ptr<sharded::checkpoint::Storage> storage) {
  StateDict rows;
  std::vector<std::tuple<Metric*, std::string, std::string>> where;  // metric, its key prefix, rows key
  for (auto& [prefix, metric] : MetricsOf(root)) {
    for (const auto& key : metric->CatRowsKeys(key_prefix + prefix)) {
      SL_RETURN_IF_ERROR(rows.Insert(key, at::zeros({1}, at::kLong)));
      where.emplace_back(metric, key_prefix + prefix, key);
    }
  }
  if (rows.empty()) return absl::OkStatus();
  sharded::checkpoint::LoadOptions options;
  options.keys = rows.Keys();  // only the row counts now; the Trainer loads the rest
  options.storage = std::move(storage);
  SL_RETURN_IF_ERROR(sharded::checkpoint::LoadCheckpoint(rows, dir, pg, options));
  for (auto& [metric, prefix, key] : where) {
    const at::Tensor& n = std::get<at::Tensor>(*rows.Find(key));
    SL_RETURN_IF_ERROR(metric->ResizeCatState(prefix, key, n[0].item<int64_t>()));
  }
  return absl::OkStatus();
}

}  // namespace shardlight::lightning::metrics
