// The view of a tensor that holds one box of a global tensor, narrowed to a
// region (another box) inside it: how box geometry meets tensor memory.
#ifndef SHARDLIGHT_SHARDED_TENSOR_REGION_H_
#define SHARDLIGHT_SHARDED_TENSOR_REGION_H_

#include <ATen/ATen.h>

#include "sharded/box.h"

namespace shardlight::sharded {

// `tensor` holds `held`; returns the view of `region` (inside `held`), no copy.
inline at::Tensor RegionView(const at::Tensor& tensor, const Box& held, const Box& region) {
  at::Tensor view = tensor;
  for (size_t d = 0; d < region.offsets.size(); ++d) {
    view = view.narrow(static_cast<int64_t>(d), region.offsets[d] - held.offsets[d], region.sizes[d]);
  }
  return view;
}

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_TENSOR_REGION_H_
