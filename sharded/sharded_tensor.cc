#include "sharded/sharded_tensor.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sharded/agreement.h"
#include "sharded/collectives.h"
#include "sharded/stable_hash.h"
#include "sharded/tensor_region.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded {
namespace {

at::TensorOptions OptionsFor(const TensorProperties& p) {
  return at::TensorOptions().dtype(p.dtype).layout(p.layout);
}

// Checks one local shard's tensor against its metadata; `what` names it.
absl::Status CheckLocalShard(const Shard& shard, const std::string& what, int rank,
                             const TensorProperties* expected) {
  const ShardMetadata& m = shard.metadata;
  if (!shard.tensor.defined()) return absl::InvalidArgumentError(absl::StrCat(what, " has no tensor"));
  if (m.placement.rank != rank) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is placed on ", m.placement.ToString(),
                                                   " but was given to rank ", rank));
  }
  const std::vector<int64_t> tensor_sizes = shard.tensor.sizes().vec();
  if (!SameDims(tensor_sizes, m.sizes)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": tensor sizes ", ShapeToString(tensor_sizes),
                                                   " differ from its metadata sizes ", ShapeToString(m.sizes)));
  }
  const bool on_cuda = shard.tensor.device().is_cuda();
  if (on_cuda != (m.placement.device == DeviceKind::kCuda)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": tensor is on ", shard.tensor.device().str(),
                                                   " but its placement is ", m.placement.ToString()));
  }
  if (expected != nullptr) {
    if (shard.tensor.scalar_type() != expected->dtype) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": dtype ", c10::toString(shard.tensor.scalar_type()),
                                                     " differs from the tensor's ", c10::toString(expected->dtype)));
    }
    if (shard.tensor.requires_grad() != expected->requires_grad) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": requires_grad=", shard.tensor.requires_grad(),
                                                     " differs from the tensor's ", expected->requires_grad));
    }
  }
  return absl::OkStatus();
}

// --- The metadata each rank contributes to InitFromLocalShards, as the
// payload of its verdict (agreement.h carries errors):
//   <global sizes>
//   <dtype> <requires_grad> <layout> <memory_format>
//   one line per shard: <offsets>;<sizes>;<placement>
std::string JoinInts(absl::Span<const int64_t> v) { return absl::StrJoin(v, ","); }

template <typename Ints>
bool SplitInts(absl::string_view text, Ints* out) {
  out->clear();
  if (text.empty()) return true;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v)) return false;
    out->push_back(v);
  }
  return true;
}

std::string EncodeLocal(const std::vector<int64_t>& global_sizes, const TensorProperties& props,
                        const std::vector<Shard>& shards) {
  std::string out = absl::StrCat(JoinInts(global_sizes), "\n", static_cast<int>(props.dtype), " ",
                                 props.requires_grad ? 1 : 0, " ", static_cast<int>(props.layout), " ",
                                 static_cast<int>(props.memory_format), "\n");
  for (const Shard& s : shards) {
    absl::StrAppend(&out, JoinInts(s.metadata.offsets), ";", JoinInts(s.metadata.sizes), ";",
                    s.metadata.placement.ToString(), "\n");
  }
  return out;
}

struct RankContribution {
  std::vector<int64_t> global_sizes;
  TensorProperties props;
  bool has_props = false;  // false when the rank holds no shard to take them from
  std::vector<ShardMetadata> shards;
};

absl::StatusOr<RankContribution> DecodeLocal(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (lines.size() < 3 || !lines.back().empty()) return absl::InternalError("malformed shard exchange payload");
  lines.pop_back();
  RankContribution c;
  if (!SplitInts(lines[0], &c.global_sizes)) return absl::InternalError("malformed global sizes");
  std::vector<std::string> p = absl::StrSplit(lines[1], ' ');
  int v[4];
  if (p.size() != 4 || !absl::SimpleAtoi(p[0], &v[0]) || !absl::SimpleAtoi(p[1], &v[1]) ||
      !absl::SimpleAtoi(p[2], &v[2]) || !absl::SimpleAtoi(p[3], &v[3])) {
    return absl::InternalError("malformed tensor properties");
  }
  c.props = {static_cast<c10::ScalarType>(v[0]), v[1] != 0, static_cast<c10::Layout>(v[2]),
             static_cast<c10::MemoryFormat>(v[3])};
  for (size_t i = 2; i < lines.size(); ++i) {
    std::vector<std::string> f = absl::StrSplit(lines[i], ';');
    ShardMetadata m;
    if (f.size() != 3 || !SplitInts(f[0], &m.offsets) || !SplitInts(f[1], &m.sizes)) {
      return absl::InternalError("malformed shard line");
    }
    SL_ASSIGN_OR_RETURN(m.placement, ParsePlacement(f[2]));
    c.shards.push_back(std::move(m));
  }
  c.has_props = !c.shards.empty();
  return c;
}


// Every shard of `metadata` as an exchange box; this rank's carry `local`'s
// tensors (which are this rank's shards in metadata order).
std::vector<ExchangeBox> BoxesOf(const ShardedTensorMetadata& metadata, const std::vector<Shard>& local, int rank) {
  std::vector<ExchangeBox> boxes;
  size_t next = 0;
  for (const ShardMetadata& m : metadata.shards) {
    ExchangeBox b{m, m.placement.rank, at::Tensor()};
    if (m.placement.rank == rank) b.tensor = local[next++].tensor;
    boxes.push_back(std::move(b));
  }
  return boxes;
}

// Fills freshly allocated shards of `target` from `sources`, then wraps them.
absl::StatusOr<ShardedTensor> ExchangeInto(c10d::ProcessGroup& pg, ShardedTensor::ProcessGroupPtr pg_ptr,
                                           const std::vector<ExchangeBox>& sources, ShardedTensorMetadata target,
                                           ExchangeStats* stats) {
  std::vector<Shard> shards = AllocateLocalShards(target, pg.getRank());
  SL_RETURN_IF_ERROR(
      ExchangeBoxes(pg, target.properties.dtype, sources, BoxesOf(target, shards, pg.getRank()), stats));
  for (Shard& s : shards) s.tensor.set_requires_grad(target.properties.requires_grad);
  return ShardedTensor::InitFromLocalShardsAndGlobalMetadata(std::move(shards), std::move(target),
                                                              std::move(pg_ptr));
}

}  // namespace

absl::StatusOr<uint64_t> LayoutHash(const absl::StatusOr<ShardedTensorMetadata>& metadata) {
  if (!metadata.ok()) return metadata.status();
  return StableHash(metadata->LayoutString());
}

std::vector<Shard> AllocateLocalShards(const ShardedTensorMetadata& metadata, int rank) {
  std::vector<Shard> shards;
  for (int i : metadata.ShardsOnRank(rank)) {
    const ShardMetadata& m = metadata.shards[i];
    at::Tensor t = at::empty(m.sizes, OptionsFor(metadata.properties).device(m.placement.DeviceString()));
    shards.push_back({t, m});
  }
  return shards;
}

absl::StatusOr<ShardedTensor> ShardedTensor::InitFromLocalShardsAndGlobalMetadata(
    std::vector<Shard> local_shards, ShardedTensorMetadata metadata, ProcessGroupPtr pg) {
  if (!pg) return absl::InvalidArgumentError("no process group");
  SL_RETURN_IF_ERROR(metadata.Validate());
  const int rank = pg->getRank();
  for (size_t i = 0; i < metadata.shards.size(); ++i) {
    if (metadata.shards[i].placement.rank >= pg->getSize()) {
      return absl::InvalidArgumentError(absl::StrCat("shard ", i, " is placed on ",
                                                     metadata.shards[i].placement.ToString(),
                                                     " but the process group has ", pg->getSize(), " ranks"));
    }
  }
  const std::vector<int> mine = metadata.ShardsOnRank(rank);
  if (mine.size() != local_shards.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " was given ", local_shards.size(),
                                                   " local shards; the metadata places ", mine.size(), " on it"));
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    const std::string what = absl::StrCat("local shard ", i);
    SL_RETURN_IF_ERROR(CheckLocalShard(local_shards[i], what, rank, &metadata.properties));
    if (!(local_shards[i].metadata == metadata.shards[mine[i]])) {
      return absl::InvalidArgumentError(absl::StrCat(what, " (", local_shards[i].metadata.ToString(),
                                                     ") differs from the global metadata's shard ", mine[i], " (",
                                                     metadata.shards[mine[i]].ToString(), ")"));
    }
  }
  return ShardedTensor(std::move(metadata), std::move(local_shards), std::move(pg));
}

absl::StatusOr<ShardedTensor> ShardedTensor::InitFromLocalShards(std::vector<Shard> local_shards,
                                                                 const std::vector<int64_t>& global_sizes,
                                                                 ProcessGroupPtr pg) {
  if (!pg) return absl::InvalidArgumentError("no process group");
  const int rank = pg->getRank();
  // Step 1: local checks. A failing rank still joins the exchange so that
  // every rank learns about it instead of waiting for it.
  absl::Status local;
  TensorProperties props;
  for (size_t i = 0; i < local_shards.size() && local.ok(); ++i) {
    const Shard& s = local_shards[i];
    if (i == 0 && s.tensor.defined()) {
      props = {s.tensor.scalar_type(), s.tensor.requires_grad(), s.tensor.layout(),
               s.tensor.is_contiguous() ? c10::MemoryFormat::Contiguous : c10::MemoryFormat::Preserve};
    }
    local = CheckLocalShard(s, absl::StrCat("local shard ", i), rank, i == 0 ? nullptr : &props);
  }
  // Step 2: every rank gets every rank's metadata, or the first rank's error.
  const Verdict mine{local, 0, local.ok() ? EncodeLocal(global_sizes, props, local_shards) : ""};
  SL_ASSIGN_OR_RETURN(std::vector<std::string> all, AgreeAndGather(*pg, mine, {"InitFromLocalShards"}));
  // Step 3: the same checks, on the same data, on every rank.
  std::vector<RankContribution> contributions;
  for (int r = 0; r < pg->getSize(); ++r) {
    SL_ASSIGN_OR_RETURN(RankContribution c, DecodeLocal(all[r]));
    contributions.push_back(std::move(c));
  }
  ShardedTensorMetadata metadata;
  metadata.sizes = contributions[0].global_sizes;
  int props_rank = -1;
  for (int r = 0; r < pg->getSize(); ++r) {
    RankContribution& c = contributions[r];
    if (c.global_sizes != metadata.sizes) {
      return absl::InvalidArgumentError(absl::StrCat("ranks disagree on the global sizes: rank 0 passed ",
                                                     ShapeToString(metadata.sizes), ", rank ", r, " passed ",
                                                     ShapeToString(c.global_sizes)));
    }
    if (c.has_props) {
      if (props_rank < 0) {
        metadata.properties = c.props;
        props_rank = r;
      } else if (c.props.dtype != metadata.properties.dtype) {
        return absl::InvalidArgumentError(absl::StrCat("dtype differs between ranks: rank ", props_rank, " has ",
                                                       c10::toString(metadata.properties.dtype), ", rank ", r,
                                                       " has ", c10::toString(c.props.dtype)));
      } else if (c.props.requires_grad != metadata.properties.requires_grad) {
        return absl::InvalidArgumentError(absl::StrCat("requires_grad differs between ranks: rank ", props_rank,
                                                       " has ", metadata.properties.requires_grad, ", rank ", r,
                                                       " has ", c.props.requires_grad));
      }
    }
    for (auto& s : c.shards) metadata.shards.push_back(std::move(s));
  }
  metadata.properties.memory_format = c10::MemoryFormat::Contiguous;
  SL_RETURN_IF_ERROR(metadata.Validate());
  return ShardedTensor(std::move(metadata), std::move(local_shards), std::move(pg));
}

ShardedTensor ShardedTensor::ZerosLike(bool requires_grad) const {
  std::vector<Shard> shards;
  for (const Shard& s : local_shards()) {
    shards.push_back({at::zeros_like(s.tensor).detach().set_requires_grad(requires_grad), s.metadata});
  }
  ShardedTensorMetadata copy = metadata();
  copy.properties.requires_grad = requires_grad;
  return ShardedTensor(std::move(copy), std::move(shards), pg_);
}

std::vector<ExchangeBox> ShardedTensor::SourceBoxes() const {
  return BoxesOf(metadata(), local_shards(), pg_->getRank());
}

absl::StatusOr<std::optional<at::Tensor>> ShardedTensor::Gather(int dst) const {
  absl::StatusOr<uint64_t> verdict = StableHash(absl::StrCat("gather to ", dst));
  if (dst < 0 || dst >= pg_->getSize()) {
    verdict = absl::InvalidArgumentError(
        absl::StrCat("gather destination rank ", dst, " is outside the group of ", pg_->getSize()));
  }
  SL_RETURN_IF_ERROR(AgreeOn(*pg_, verdict, {"gather", "gather destination"}));
  std::optional<at::Tensor> full;
  ExchangeBox dest{Box::Whole(sizes()), dst, at::Tensor()};
  if (pg_->getRank() == dst) {
    full = at::empty(sizes(), OptionsFor(metadata().properties).device(FullTensorDevice()));
    dest.tensor = *full;
  }
  SL_RETURN_IF_ERROR(ExchangeBoxes(*pg_, dtype(), SourceBoxes(), {dest}));
  return full;
}

c10::Device ShardedTensor::FullTensorDevice() const {
  if (!local_shards().empty()) return local_shards()[0].tensor.device();
  const int rank = pg_->getRank();
  for (const ShardMetadata& m : metadata().shards) {
    if (m.placement.rank == rank) return c10::Device(m.placement.DeviceString());
  }
  if (!metadata().shards.empty()) return c10::Device(metadata().shards[0].placement.DeviceString());
  return c10::Device(c10::kCPU);
}

// FullTensor is an allgather of each rank's shards packed into equal,
// padded slots. When shard r is the row block starting at row r * slot_rows
// (a dim-0 chunk spec, uneven or not), the slots laid end to end *are* the
// full tensor, so the gathered bytes land in place with no unpacking.
absl::StatusOr<at::Tensor> ShardedTensor::FullTensor() const {
  at::NoGradGuard no_grad;
  const int w = pg_->getSize();
  std::vector<int64_t> rank_elems(w, 0), rank_shards(w, 0);
  for (const ShardMetadata& m : metadata().shards) {
    rank_elems[m.placement.rank] += m.NumElements();
    ++rank_shards[m.placement.rank];
  }
  const int64_t slot = std::max<int64_t>(1, *std::max_element(rank_elems.begin(), rank_elems.end()));
  const int64_t total = metadata().NumElements();
  int64_t row = 1;  // elements per dim-0 row
  for (size_t d = 1; d < sizes().size(); ++d) row *= sizes()[d];
  bool in_place = !sizes().empty() && row > 0 && slot % row == 0;
  for (const ShardMetadata& m : metadata().shards) {
    if (!in_place) break;
    for (size_t d = 1; d < sizes().size(); ++d) in_place = in_place && m.sizes[d] == sizes()[d];
    in_place = in_place && (m.NumElements() == 0 || m.offsets[0] * row == m.placement.rank * slot) &&
               rank_shards[m.placement.rank] == 1;
  }
  // The slots and the result live where this rank's shards do, so CUDA
  // shards go through NCCL and stay on the GPU: its own shard's device, else
  // its placement's, else (a rank with no shard) the first shard's.
  at::TensorOptions options = OptionsFor(metadata().properties).device(FullTensorDevice());
  at::Tensor slots = at::empty({static_cast<int64_t>(w) * slot}, options);
  // Step 1: this rank's shards, packed into its slot (metadata order); a
  // single contiguous shard that fills the slot is sent as it is.
  at::Tensor mine;
  if (local_shards().size() == 1 && local_shards()[0].tensor.is_contiguous() &&
      local_shards()[0].tensor.numel() == slot) {
    mine = local_shards()[0].tensor.view({slot});
  } else {
    mine = at::empty({slot}, options);
    int64_t pos = 0;
    for (const Shard& s : local_shards()) {
      const int64_t n = s.tensor.numel();
      mine.narrow(0, pos, n).view(s.tensor.sizes()).copy_(s.tensor);
      pos += n;
    }
  }
  // Step 2: one allgather of equal-size byte slots.
  std::vector<at::Tensor> in = {ByteView(mine)};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < w; ++r) out[0].push_back(ByteView(slots.narrow(0, r * slot, slot)));
  SL_RETURN_IF_ERROR(RunCollective(*pg_, "allgather", [&] { return pg_->allgather(out, in); }));
  if (in_place) return slots.narrow(0, 0, total).view(sizes());
  // Step 3: otherwise copy each shard out of its owner's slot.
  at::Tensor full = at::empty(sizes(), options);
  const Box whole = Box::Whole(sizes());
  std::vector<int64_t> cursor(w, 0);
  for (const ShardMetadata& m : metadata().shards) {
    const int r = m.placement.rank;
    const int64_t n = m.NumElements();
    RegionView(full, whole, m).copy_(slots.narrow(0, r * slot + cursor[r], n).view(m.sizes));
    cursor[r] += n;
  }
  return full;
}

absl::StatusOr<ShardedTensor> ShardedTensor::Reshard(const ShardingSpec& spec, ExchangeStats* stats) const {
  absl::StatusOr<ShardedTensorMetadata> target = BuildMetadata(spec, sizes(), metadata().properties, pg_->getSize());
  SL_RETURN_IF_ERROR(AgreeOn(*pg_, LayoutHash(target), {"reshard", "reshard target layout"}));
  return ExchangeInto(*pg_, pg_, SourceBoxes(), *std::move(target), stats);
}

absl::StatusOr<ShardedTensor> ShardedTensor::Scatter(const at::Tensor& full, int src, const ShardingSpec& spec,
                                                     const std::vector<int64_t>& global_sizes,
                                                     const TensorProperties& properties, ProcessGroupPtr pg) {
  if (!pg) return absl::InvalidArgumentError("no process group");
  // Every rank's checks (the source's tensor only on the source) become one
  // shared verdict, so bad input fails every rank rather than leaving peers waiting.
  absl::StatusOr<ShardedTensorMetadata> target = BuildMetadata(spec, global_sizes, properties, pg->getSize());
  if (src < 0 || src >= pg->getSize()) {
    target = absl::InvalidArgumentError(
        absl::StrCat("scatter source rank ", src, " is outside the group of ", pg->getSize()));
  } else if (target.ok() && pg->getRank() == src) {
    if (!full.defined() || full.sizes().vec() != global_sizes) {
      target = absl::InvalidArgumentError(absl::StrCat("scatter source tensor has sizes ",
                                                       full.defined() ? ShapeToString(full.sizes().vec()) : "(undefined)",
                                                       ", want ", ShapeToString(global_sizes)));
    } else if (full.scalar_type() != properties.dtype) {
      target = absl::InvalidArgumentError(absl::StrCat("scatter source tensor has dtype ",
                                                       c10::toString(full.scalar_type()), ", want ",
                                                       c10::toString(properties.dtype)));
    }
  }
  absl::StatusOr<uint64_t> verdict = LayoutHash(target);
  if (verdict.ok()) verdict = StableHash(absl::StrCat("src ", src), *verdict);
  SL_RETURN_IF_ERROR(AgreeOn(*pg, verdict, {"scatter", "scatter source and target layout"}));
  ExchangeBox source{Box::Whole(global_sizes), src, pg->getRank() == src ? full : at::Tensor()};
  c10d::ProcessGroup& group = *pg;
  return ExchangeInto(group, std::move(pg), {source}, *std::move(target), nullptr);
}

}  // namespace shardlight::sharded
