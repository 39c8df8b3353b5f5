#include "lightning/strategies/fsdp_tp_layout.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

namespace shardlight::lightning::fsdp_tp_internal {
namespace {

using sharded::mesh::DeviceMesh;
using sharded::mesh::MeshPlacement;

struct Registry {
  std::mutex mu;
  std::vector<std::weak_ptr<const DeviceMesh>> layouts;  // weak: the members keep their view alive
};

Registry& Layouts() {
  static Registry* registry = new Registry();  // never destroyed: ranks may still ask at exit
  return *registry;
}

}  // namespace

void RegisterLayout(const sharded::mesh::MeshPtr& layout) {
  Registry& r = Layouts();
  const std::lock_guard<std::mutex> lock(r.mu);
  r.layouts.erase(std::remove_if(r.layouts.begin(), r.layouts.end(),
                                 [](const std::weak_ptr<const DeviceMesh>& w) { return w.expired(); }),
                  r.layouts.end());
  r.layouts.push_back(layout);
}

bool HeldByFsdpTp(const sharded::mesh::MeshTensor& member) {
  const sharded::mesh::MeshPtr& mesh = member.mesh();
  if (mesh == nullptr || mesh->ndim() != 2 || member.placements().size() != 2 ||
      member.placements()[1] != MeshPlacement::Shard(0)) {
    return false;
  }
  Registry& r = Layouts();
  const std::lock_guard<std::mutex> lock(r.mu);
  // A live entry at the member's address is its mesh: the member holds it, so no other object can be there.
  return std::any_of(r.layouts.begin(), r.layouts.end(),
                     [&](const std::weak_ptr<const DeviceMesh>& w) { return w.lock().get() == mesh.get(); });
}

}  // namespace shardlight::lightning::fsdp_tp_internal
