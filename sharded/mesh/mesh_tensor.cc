#include "sharded/mesh/mesh_tensor.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/agreement.h"
#include "sharded/box_exchange.h"
#include "sharded/collectives.h"
#include "sharded/global_random.h"
#include "sharded/mesh/mesh_exchange.h"
#include "sharded/sharding_spec.h"
#include "sharded/stable_hash.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::mesh {
namespace {

std::string SizesString(absl::Span<const int64_t> sizes) { return absl::StrCat("[", absl::StrJoin(sizes, ", "), "]"); }

// The fingerprint ranks compare before a collective on a mesh tensor.
uint64_t LayoutFingerprint(const DeviceMesh& mesh, const std::vector<int64_t>& sizes, c10::ScalarType dtype,
                           const Placements& placements) {
  uint64_t h = StableHash(mesh.name());
  h = StableHash(mesh.ShapeString(), h);
  h = StableHash(SizesString(sizes), h);
  h = StableHash(c10::toString(dtype), h);
  return StableHash(PlacementsString(placements), h);
}

at::Tensor Region(const at::Tensor& local, const Box& local_box, const Box& box) {
  at::Tensor t = local;
  for (size_t d = 0; d < box.sizes.size(); ++d) {
    t = t.narrow(static_cast<int64_t>(d), box.offsets[d] - local_box.offsets[d], box.sizes[d]);
  }
  return t;
}

// t /= n; integer dtypes truncate (exact for the means of Partial(avg) parts
// that are integers).
void DivideBy(at::Tensor& t, int64_t n) {
  if (c10::isIntegralType(t.scalar_type(), /*includeBool=*/true)) {
    t.div_(n, "trunc");
  } else {
    t.div_(n);
  }
}

// Reduces `acc` with the n - 1 other parts stacked in `others` (flattened).
void Reduce(at::Tensor& acc, const at::Tensor& others, PartialOp op, int64_t n) {
  const std::vector<int64_t> shape = acc.sizes().vec();
  switch (op) {
    case PartialOp::kSum:
      acc.add_(others.sum(0).view(shape));
      break;
    case PartialOp::kAvg:
      acc.add_(others.sum(0).view(shape));
      DivideBy(acc, n);
      break;
    case PartialOp::kMax:
      acc = at::maximum(acc, others.amax(0).view(shape));
      break;
    case PartialOp::kMin:
      acc = at::minimum(acc, others.amin(0).view(shape));
      break;
  }
}

// One mesh tensor's state while Redistribute moves it one mesh dim at a time.
struct State {
  const DeviceMesh& mesh;
  const std::vector<int64_t>& sizes;
  Placements placements;
  at::Tensor local;
  RedistributeStats* stats;

  Box BoxOf(const std::vector<int64_t>& coords, const Placements& p) const {
    return MeshLocalBox(mesh.shape(), coords, p, sizes);
  }
  std::vector<int64_t> Member(int dim, int64_t k) const {
    std::vector<int64_t> c = mesh.coords();
    c[dim] = k;
    return c;
  }

  // Shard -> Shard/Replicate along `dim`: an exchange of boxes in its
  // sub-group (an all-gather or an all-to-all, each element sent once).
  absl::Status Exchange(int dim, const Placements& next) {
    std::vector<ExchangeBox> sources, destinations;
    const int me = static_cast<int>(mesh.coords()[dim]);
    at::Tensor out = at::empty(BoxOf(mesh.coords(), next).sizes, local.options());
    for (int64_t k = 0; k < mesh.size(dim); ++k) {
      ExchangeBox s;
      static_cast<Box&>(s) = BoxOf(Member(dim, k), placements);
      s.rank = static_cast<int>(k);
      if (k == me) s.tensor = local;
      sources.push_back(std::move(s));
      ExchangeBox d;
      static_cast<Box&>(d) = BoxOf(Member(dim, k), next);
      d.rank = static_cast<int>(k);
      if (k == me) d.tensor = out;
      destinations.push_back(std::move(d));
    }
    ExchangeStats es;
    SL_RETURN_IF_ERROR(ExchangeBoxes(*mesh.group(dim), local.scalar_type(), sources, destinations, &es));
    stats->bytes_sent += es.bytes_sent;
    stats->bytes_received += es.bytes_received;
    stats->bytes_copied_locally += es.bytes_copied_locally;
    local = out;
    return absl::OkStatus();
  }

  // Partial -> Shard along `dim`: each member receives the others' parts of
  // its own piece (one all-to-all) and reduces them: a reduce-scatter.
  absl::Status ReduceScatter(int dim, const Placements& next, PartialOp op) {
    const int64_t n = mesh.size(dim);
    const int64_t me = mesh.coords()[dim];
    const Box mine_now = BoxOf(mesh.coords(), placements);
    const Box mine_next = BoxOf(mesh.coords(), next);
    const int64_t elem = local.element_size();
    std::vector<at::Tensor> parts;
    std::vector<int64_t> send_counts(n, 0), recv_counts(n, 0);
    for (int64_t k = 0; k < n; ++k) {
      if (k == me) continue;
      at::Tensor part = Region(local, mine_now, BoxOf(Member(dim, k), next)).contiguous().reshape({-1});
      send_counts[k] = part.numel() * elem;
      recv_counts[k] = mine_next.NumElements() * elem;
      parts.push_back(part);
    }
    at::Tensor send = parts.empty() ? at::empty({0}, local.options()) : at::cat(parts);
    at::Tensor recv = at::empty({mine_next.NumElements() * (n - 1)}, local.options());
    SL_RETURN_IF_ERROR(AllToAllBytes(*mesh.group(dim), send.view(at::kByte), send_counts, recv.view(at::kByte),
                                     recv_counts));
    at::Tensor out = Region(local, mine_now, mine_next).clone(at::MemoryFormat::Contiguous);
    if (n > 1) Reduce(out, recv.view({n - 1, mine_next.NumElements()}), op, n);
    for (int64_t c : send_counts) stats->bytes_sent += c;
    for (int64_t c : recv_counts) stats->bytes_received += c;
    local = out;
    return absl::OkStatus();
  }

  absl::Status AllReduce(int dim, PartialOp op) {
    // A copy: the source tensor's local piece must stay as it was.
    at::Tensor t = local.clone(at::MemoryFormat::Contiguous);
    std::vector<at::Tensor> tensors{t};
    c10d::ProcessGroup& pg = *mesh.group(dim);
    c10d::AllreduceOptions options;
    // Gloo has no average: a sum, divided below.
    options.reduceOp = op == PartialOp::kMax   ? c10d::ReduceOp::MAX
                       : op == PartialOp::kMin ? c10d::ReduceOp::MIN
                                               : c10d::ReduceOp::SUM;
    SL_RETURN_IF_ERROR(RunCollective(pg, "mesh allreduce", [&] { return pg.allreduce(tensors, options); }));
    const int64_t n = mesh.size(dim);
    if (op == PartialOp::kAvg) DivideBy(t, n);
    const int64_t moved = t.numel() * t.element_size() * 2 * (n - 1) / n;
    stats->bytes_sent += moved;
    stats->bytes_received += moved;
    local = t;
    return absl::OkStatus();
  }

  // Changes mesh dim `dim` to `q`, the other dims fixed. The caller makes
  // sure no later mesh dim shards a tensor dim this step touches, so the
  // sub-group along `dim` holds all the data the step needs.
  absl::Status Step(int dim, const MeshPlacement& q) {
    const MeshPlacement p = placements[dim];
    if (p == q) return absl::OkStatus();
    Placements next = placements;
    next[dim] = q;
    ++stats->steps;
    if (p.is_replicate()) {
      if (q.is_shard()) {  // a local slice, no communication
        local = Region(local, BoxOf(mesh.coords(), placements), BoxOf(mesh.coords(), next))
                    .clone(at::MemoryFormat::Contiguous);
      } else if (q.op == PartialOp::kSum && mesh.coords()[dim] != 0) {  // the value at coordinate 0
        local = at::zeros_like(local);
      }  // avg, max, min: every part is the value
    } else if (p.is_shard()) {
      if (q.is_partial()) {
        SL_RETURN_IF_ERROR(Step(dim, MeshPlacement::Replicate()));
        return Step(dim, q);
      }
      SL_RETURN_IF_ERROR(Exchange(dim, next));
    } else {  // Partial
      if (q.is_partial()) {  // another op: through the value
        SL_RETURN_IF_ERROR(Step(dim, MeshPlacement::Replicate()));
        return Step(dim, q);
      }
      if (q.is_replicate()) {
        SL_RETURN_IF_ERROR(AllReduce(dim, p.op));
      } else {
        SL_RETURN_IF_ERROR(ReduceScatter(dim, next, p.op));
      }
    }
    placements = std::move(next);
    return absl::OkStatus();
  }
};

// The later mesh dims that shard a tensor dim which changing mesh dim `i`
// to `q` touches: they hold part of what the step on dim i's sub-group needs.
std::vector<int> Blocking(const Placements& current, int i, const MeshPlacement& q) {
  std::vector<int64_t> touched;
  if (current[i].is_shard()) touched.push_back(current[i].dim);
  if (q.is_shard()) touched.push_back(q.dim);
  std::vector<int> blocking;
  for (int j = i + 1; j < static_cast<int>(current.size()); ++j) {
    const MeshPlacement& c = current[j];
    if (c.is_shard() && std::find(touched.begin(), touched.end(), c.dim) != touched.end()) blocking.push_back(j);
  }
  return blocking;
}

// Whether the step-by-step plan (Redistribute's loop) would meet a blocked step.
bool NeedsNestedGather(Placements current, const Placements& target) {
  for (int i = static_cast<int>(current.size()) - 1; i >= 0; --i) {
    if (current[i] == target[i]) continue;
    if (!Blocking(current, i, target[i]).empty()) return true;
    current[i] = target[i];
  }
  return false;
}

int ChangedDims(const Placements& a, const Placements& b) {
  int n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

bool HasPartial(const Placements& placements) {
  return std::any_of(placements.begin(), placements.end(), [](const MeshPlacement& p) { return p.is_partial(); });
}

}  // namespace

std::string MeshPlacement::ToString() const {
  switch (kind) {
    case Kind::kShard:
      return absl::StrCat("Shard(", dim, ")");
    case Kind::kReplicate:
      return "Replicate()";
    case Kind::kPartial:
      switch (op) {
        case PartialOp::kSum:
          return "Partial(sum)";
        case PartialOp::kAvg:
          return "Partial(avg)";
        case PartialOp::kMax:
          return "Partial(max)";
        case PartialOp::kMin:
          return "Partial(min)";
      }
  }
  return "?";
}

std::string PlacementsString(const Placements& placements) {
  return absl::StrCat("[", absl::StrJoin(placements, ", ", [](std::string* out, const MeshPlacement& p) {
                        out->append(p.ToString());
                      }),
                      "]");
}

absl::Status ValidatePlacements(const std::vector<int64_t>& mesh_shape, const Placements& placements,
                                const std::vector<int64_t>& global_sizes) {
  if (placements.size() != mesh_shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat("placements ", PlacementsString(placements), " have ",
                                                   placements.size(), " entries for a ", mesh_shape.size(),
                                                   "-d device mesh ", absl::StrJoin(mesh_shape, "x")));
  }
  for (int64_t s : global_sizes) {
    if (s < 0) return absl::InvalidArgumentError(absl::StrCat("negative size in ", SizesString(global_sizes)));
  }
  for (const MeshPlacement& p : placements) {
    if (p.is_shard() && (p.dim < 0 || p.dim >= static_cast<int64_t>(global_sizes.size()))) {
      return absl::InvalidArgumentError(absl::StrCat("placement ", p.ToString(), " is out of range for a tensor of ",
                                                     global_sizes.size(), " dims ", SizesString(global_sizes)));
    }
  }
  return absl::OkStatus();
}

bool HoldsZerosForValue(const Placements& placements, const std::vector<int64_t>& coords) {
  for (size_t i = 0; i < placements.size(); ++i) {
    if (placements[i].is_partial() && placements[i].op == PartialOp::kSum && coords[i] != 0) return true;
  }
  return false;
}

Box MeshLocalBox(const std::vector<int64_t>& mesh_shape, const std::vector<int64_t>& coords,
                 const Placements& placements, const std::vector<int64_t>& global_sizes) {
  Box box = Box::Whole(global_sizes);
  for (size_t i = 0; i < placements.size(); ++i) {
    if (!placements[i].is_shard()) continue;
    const int64_t d = placements[i].dim;
    const auto range = ChunkRanges(box.sizes[d], mesh_shape[i])[coords[i]];
    box.offsets[d] += range.first;
    box.sizes[d] = range.second;
  }
  return box;
}

Box MeshTensor::LocalBox() const { return MeshLocalBox(mesh_->shape(), mesh_->coords(), placements_, sizes_); }

namespace {

// FromLocal's local check: the placements fit, and `local` is this rank's box.
absl::Status CheckLocalPiece(const at::Tensor& local, const DeviceMesh& mesh, const Placements& placements,
                             const std::vector<int64_t>& global_sizes) {
  SL_RETURN_IF_ERROR(ValidatePlacements(mesh.shape(), placements, global_sizes));
  if (!local.defined()) return absl::InvalidArgumentError("local tensor is undefined");
  const Box box = MeshLocalBox(mesh.shape(), mesh.coords(), placements, global_sizes);
  if (!SameDims(local.sizes(), box.sizes)) {
    return absl::InvalidArgumentError(absl::StrCat("local tensor of sizes ", SizesString(local.sizes()),
                                                   " does not match its box ", SizesString(box.sizes), " of ",
                                                   SizesString(global_sizes), " under ",
                                                   PlacementsString(placements)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MeshTensor> MeshTensor::FromLocal(at::Tensor local, MeshPtr mesh, Placements placements,
                                                 std::vector<int64_t> global_sizes) {
  absl::StatusOr<uint64_t> verdict = AsVerdict(CheckLocalPiece(local, *mesh, placements, global_sizes));
  if (verdict.ok()) verdict = LayoutFingerprint(*mesh, global_sizes, local.scalar_type(), placements);
  SL_RETURN_IF_ERROR(AgreeOn(*mesh->world(), verdict, AgreementContext{"mesh tensor from local", "layout"}));
  return MeshTensor(local.contiguous(), std::move(mesh), std::move(placements), std::move(global_sizes));
}

absl::StatusOr<MeshTensor> MeshTensor::FromLocalAgreed(at::Tensor local, MeshPtr mesh, Placements placements,
                                                       std::vector<int64_t> global_sizes) {
  SL_RETURN_IF_ERROR(CheckLocalPiece(local, *mesh, placements, global_sizes));
  if (!local.is_contiguous()) return absl::InvalidArgumentError("local tensor is not contiguous");
  return MeshTensor(std::move(local), std::move(mesh), std::move(placements), std::move(global_sizes));
}

absl::StatusOr<MeshTensor> MeshTensor::Distribute(const at::Tensor& full, MeshPtr mesh, Placements placements) {
  const std::vector<int64_t> sizes = full.sizes().vec();
  absl::StatusOr<uint64_t> verdict = AsVerdict(ValidatePlacements(mesh->shape(), placements, sizes));
  if (verdict.ok()) verdict = LayoutFingerprint(*mesh, sizes, full.scalar_type(), placements);
  SL_RETURN_IF_ERROR(AgreeOn(*mesh->world(), verdict, AgreementContext{"mesh tensor distribute", "layout"}));
  const Box box = MeshLocalBox(mesh->shape(), mesh->coords(), placements, sizes);
  at::Tensor local = Region(full, Box::Whole(sizes), box).clone(at::MemoryFormat::Contiguous);
  if (HoldsZerosForValue(placements, mesh->coords())) local.zero_();
  return MeshTensor(local, std::move(mesh), std::move(placements), sizes);
}

absl::StatusOr<MeshTensor> MeshFactory(MeshPtr mesh, Placements placements, std::vector<int64_t> sizes,
                                       const MeshFactoryOptions& options) {
  absl::StatusOr<uint64_t> verdict = AsVerdict(ValidatePlacements(mesh->shape(), placements, sizes));
  const bool random = options.init == MeshInit::kRand || options.init == MeshInit::kRandn;
  if (verdict.ok() && random && !c10::isFloatingType(options.dtype)) {
    verdict = absl::InvalidArgumentError(
        absl::StrCat("random init needs a floating dtype, not ", c10::toString(options.dtype)));
  }
  if (verdict.ok()) {
    verdict = StableHash(absl::StrCat(static_cast<int>(options.init), "/", options.seed, "/",
                                      options.value.toDouble()),
                         LayoutFingerprint(*mesh, sizes, options.dtype, placements));
  }
  SL_RETURN_IF_ERROR(AgreeOn(*mesh->world(), verdict, AgreementContext{"mesh tensor factory", "layout"}));
  const Box box = MeshLocalBox(mesh->shape(), mesh->coords(), placements, sizes);
  at::Tensor local = at::empty(box.sizes, at::TensorOptions().dtype(options.dtype));
  switch (options.init) {
    case MeshInit::kEmpty:
      break;
    case MeshInit::kZeros:
      local.zero_();
      break;
    case MeshInit::kOnes:
      local.fill_(1);
      break;
    case MeshInit::kFull:
      local.fill_(options.value);
      break;
    case MeshInit::kRand:
    case MeshInit::kRandn:
      FillGlobalRandom(local, box.offsets, sizes, options.seed,
                       options.init == MeshInit::kRand ? RandomKind::kUniform : RandomKind::kNormal);
      break;
  }
  if (options.init != MeshInit::kEmpty && HoldsZerosForValue(placements, mesh->coords())) local.zero_();
  return MeshTensor(local, std::move(mesh), std::move(placements), std::move(sizes));
}

absl::StatusOr<MeshTensor> MeshTensor::Redistribute(const Placements& target, RedistributeStats* stats) const {
  absl::StatusOr<uint64_t> verdict = AsVerdict(ValidatePlacements(mesh_->shape(), target, sizes_));
  if (verdict.ok()) {
    verdict = StableHash(PlacementsString(target), LayoutFingerprint(*mesh_, sizes_, dtype(), placements_));
  }
  SL_RETURN_IF_ERROR(AgreeOn(*mesh_->world(), verdict,
                             AgreementContext{"mesh tensor redistribute", "source and target layouts"}));
  RedistributeStats local_stats;
  State state{*mesh_, sizes_, placements_, local_, stats ? stats : &local_stats};
  // Values only (no addends), and more than one mesh dim changes or two mesh
  // dims shard one tensor dim: one exchange on the whole mesh moves the
  // minimum, where the steps below could gather what is then sliced away.
  if (!HasPartial(placements_) && !HasPartial(target) &&
      (ChangedDims(placements_, target) > 1 || NeedsNestedGather(placements_, target))) {
    SL_ASSIGN_OR_RETURN(at::Tensor moved, ExchangeOnMesh(*mesh_, sizes_, local_, placements_, target, state.stats));
    return MeshTensor(moved, mesh_, target, sizes_);
  }
  // Last mesh dim first: a step on dim i is a sub-group collective when no
  // later mesh dim shards the tensor dims it touches. When one does (nested
  // sharding of one tensor dim), those later dims are gathered first
  // (largest first) and sliced again afterwards (local, smallest first).
  for (int i = mesh_->ndim() - 1; i >= 0; --i) {
    const MeshPlacement p = state.placements[i];
    const MeshPlacement q = target[i];
    if (p == q) continue;
    const std::vector<int> blocking = Blocking(state.placements, i, q);
    Placements saved = state.placements;
    for (auto it = blocking.rbegin(); it != blocking.rend(); ++it) {
      SL_RETURN_IF_ERROR(state.Step(*it, MeshPlacement::Replicate()));
    }
    SL_RETURN_IF_ERROR(state.Step(i, q));
    for (int j : blocking) SL_RETURN_IF_ERROR(state.Step(j, saved[j]));
  }
  return MeshTensor(state.local, mesh_, target, sizes_);
}

absl::StatusOr<at::Tensor> MeshTensor::FullTensor() const {
  SL_ASSIGN_OR_RETURN(MeshTensor replicated,
                      Redistribute(Placements(mesh_->ndim(), MeshPlacement::Replicate())));
  return replicated.local_;
}

absl::StatusOr<ShardedTensor> MeshTensor::ToShardedTensor() const {
  absl::Status mine = absl::OkStatus();
  if (mesh_->ndim() != 1 || !placements_[0].is_shard()) {
    mine = absl::InvalidArgumentError(absl::StrCat("only a 1-d mesh with Shard(d) converts to a ShardedTensor, not ",
                                                   PlacementsString(placements_), " on ", mesh_->ShapeString()));
  }
  SL_RETURN_IF_ERROR(Agree(*mesh_->world(), mine, "mesh tensor to ShardedTensor"));
  ChunkShardingSpec spec = ChunkShardingSpec::OnRanks(placements_[0].dim, mesh_->world_size());
  TensorProperties props;
  props.dtype = dtype();
  SL_ASSIGN_OR_RETURN(ShardedTensorMetadata meta, BuildMetadata(spec, sizes_, props, mesh_->world_size()));
  std::vector<Shard> shards;
  for (int idx : meta.ShardsOnRank(mesh_->rank())) shards.push_back(Shard{local_, meta.shards[idx]});
  return ShardedTensor::InitFromLocalShardsAndGlobalMetadata(std::move(shards), std::move(meta), mesh_->world());
}

absl::StatusOr<MeshTensor> MeshTensor::FromShardedTensor(const ShardedTensor& st, MeshPtr mesh) {
  // The 1-d layout the shards must have: chunks along some dim, shard i on rank i.
  absl::StatusOr<uint64_t> verdict = uint64_t{0};
  std::optional<int64_t> dim;
  const ShardedTensorMetadata& meta = st.metadata();
  if (mesh->ndim() != 1 || mesh->world_size() != st.process_group()->getSize()) {
    verdict = absl::InvalidArgumentError(absl::StrCat("a ShardedTensor over ", st.process_group()->getSize(),
                                                      " ranks needs a 1-d mesh of that size, not ",
                                                      mesh->ShapeString()));
  } else {
    for (int64_t d = 0; d < static_cast<int64_t>(meta.sizes.size()) && !dim; ++d) {
      TensorProperties props = meta.properties;
      auto chunked = BuildMetadata(ChunkShardingSpec::OnRanks(d, mesh->world_size()), meta.sizes, props,
                                   mesh->world_size());
      if (!chunked.ok() || chunked->shards.size() != meta.shards.size()) continue;
      bool same = true;
      for (size_t s = 0; s < meta.shards.size() && same; ++s) same = chunked->shards[s] == meta.shards[s];
      if (same) dim = d;
    }
    if (!dim) {
      verdict = absl::InvalidArgumentError(absl::StrCat("ShardedTensor layout ", meta.LayoutString(),
                                                        " is not a torch.chunk split with shard i on rank i"));
    } else {
      verdict = LayoutFingerprint(*mesh, meta.sizes, meta.properties.dtype, {MeshPlacement::Shard(*dim)});
    }
  }
  SL_RETURN_IF_ERROR(AgreeOn(*mesh->world(), verdict, AgreementContext{"mesh tensor from ShardedTensor", "layout"}));
  const auto on_me = meta.ShardsOnRank(mesh->rank());
  at::Tensor local = on_me.empty() ? at::empty({0}, at::TensorOptions().dtype(meta.properties.dtype))
                                   : st.local_shards()[0].tensor;
  return MeshTensor(local, std::move(mesh), Placements{MeshPlacement::Shard(*dim)}, meta.sizes);
}

}  // namespace shardlight::sharded::mesh
