#include "sharded/mesh/device_mesh.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sharded/agreement.h"
#include "sharded/process_groups.h"
#include "sharded/stable_hash.h"
#include "sharded/status_macros.h"
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

namespace shardlight::sharded::mesh {

absl::StatusOr<std::vector<int64_t>> ParseMeshShape(const std::string& text) {
  std::vector<int64_t> shape;
  for (absl::string_view part : absl::StrSplit(text, 'x')) {
    int64_t size = 0;
    if (!absl::SimpleAtoi(part, &size) || size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("mesh shape '", text, "' is not sizes >= 1 joined by 'x' (e.g. 2x4): bad size '", part, "'"));
    }
    shape.push_back(size);
  }
  return shape;
}

absl::Status ValidateMeshShape(const std::vector<int64_t>& shape, int world_size) {
  if (shape.empty()) return absl::InvalidArgumentError("device mesh shape is empty");
  int64_t product = 1;
  for (int64_t s : shape) {
    if (s < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("device mesh ", absl::StrJoin(shape, "x"), " has a dimension of size ", s));
    }
    product *= s;
  }
  if (product != world_size) {
    return absl::InvalidArgumentError(absl::StrCat("device mesh ", absl::StrJoin(shape, "x"), " has ", product,
                                                   " ranks but the world has ", world_size));
  }
  return absl::OkStatus();
}

std::vector<int64_t> DeviceMesh::CoordsOf(int rank) const {
  std::vector<int64_t> c(shape_.size());
  for (int i = 0; i < ndim(); ++i) c[i] = (rank / strides_[i]) % shape_[i];
  return c;
}

int DeviceMesh::RankAt(const std::vector<int64_t>& coords) const {
  int64_t r = 0;
  for (int i = 0; i < ndim(); ++i) r += coords[i] * strides_[i];
  return static_cast<int>(r);
}

absl::StatusOr<MeshPtr> DeviceMesh::Permuted(const std::vector<int>& order) const {
  std::vector<bool> seen(shape_.size(), false);
  bool permutation = order.size() == shape_.size();
  for (int d : order) {
    if (!permutation || d < 0 || d >= ndim() || seen[d]) {
      permutation = false;
      break;
    }
    seen[d] = true;
  }
  if (!permutation) {
    return absl::InvalidArgumentError(absl::StrCat("device mesh '", name_, "' (", ShapeString(),
                                                   "): dims order {", absl::StrJoin(order, ", "),
                                                   "} is not a permutation of its ", ndim(), " dims"));
  }
  auto mesh = std::shared_ptr<DeviceMesh>(new DeviceMesh());
  for (int d : order) {
    mesh->shape_.push_back(shape_[d]);
    mesh->coords_.push_back(coords_[d]);
    mesh->strides_.push_back(strides_[d]);
    mesh->groups_.push_back(groups_[d]);
  }
  mesh->rank_ = rank_;
  mesh->world_size_ = world_size_;
  mesh->name_ = absl::StrCat(name_, "(dims ", absl::StrJoin(order, ","), ")");
  mesh->world_ = world_;
  return MeshPtr(std::move(mesh));
}

std::string DeviceMesh::ShapeString() const { return absl::StrJoin(shape_, "x"); }

namespace {
absl::StatusOr<uint64_t> AsVerdict(const absl::Status& status) {
  if (!status.ok()) return status;
  return uint64_t{0};
}
}  // namespace

absl::StatusOr<MeshPtr> DeviceMesh::Create(const MeshContext& ctx, std::vector<int64_t> shape,
                                           const std::string& name) {
  if (!ctx.world) return absl::InvalidArgumentError("device mesh: no world group");
  absl::StatusOr<uint64_t> fingerprint = AsVerdict(ValidateMeshShape(shape, ctx.world_size));
  if (fingerprint.ok()) {
    fingerprint = StableHash(absl::StrJoin(shape, "x"), StableHash(name));
  }
  SL_RETURN_IF_ERROR(AgreeOn(*ctx.world, fingerprint,
                             AgreementContext{absl::StrCat("device mesh '", name, "' creation"), "mesh shape"}));
  auto mesh = std::shared_ptr<DeviceMesh>(new DeviceMesh());
  mesh->shape_ = std::move(shape);
  mesh->rank_ = ctx.rank;
  mesh->world_size_ = ctx.world_size;
  mesh->name_ = name;
  mesh->world_ = ctx.world;
  mesh->strides_.assign(mesh->shape_.size(), 1);
  for (int i = mesh->ndim() - 2; i >= 0; --i) mesh->strides_[i] = mesh->strides_[i + 1] * mesh->shape_[i + 1];
  mesh->coords_ = mesh->CoordsOf(ctx.rank);
  // One group per slice along each dim, keyed by the coordinates that stay
  // fixed in it (dim i's own coordinate replaced by '*').
  absl::Status local = absl::OkStatus();
  for (int i = 0; i < mesh->ndim(); ++i) {
    std::vector<std::string> key;
    for (int j = 0; j < mesh->ndim(); ++j) key.push_back(j == i ? "*" : std::to_string(mesh->coords_[j]));
    GlooGroupOptions options;
    options.timeout = ctx.timeout;
    options.threads = 1;
    options.device = ctx.gloo_device;
    options.bind_address = ctx.gloo_bind_address;
    auto store = c10::make_intrusive<c10d::PrefixStore>(
        absl::StrCat("mesh/", name, "/", mesh->ShapeString(), "/dim", i, "/", absl::StrJoin(key, ","), "/"),
        ctx.store);
    auto group = MakeGlooGroup(store, static_cast<int>(mesh->coords_[i]), static_cast<int>(mesh->shape_[i]), options);
    if (!group.ok()) {
      local = group.status();
      break;
    }
    mesh->groups_.push_back(*group);
  }
  // Every rank learns whether every sub-group came up.
  SL_RETURN_IF_ERROR(Agree(*ctx.world, local, absl::StrCat("device mesh '", name, "' sub-groups")));
  return MeshPtr(std::move(mesh));
}

}  // namespace shardlight::sharded::mesh
