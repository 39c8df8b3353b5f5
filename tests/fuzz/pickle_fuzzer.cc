// The pickle stream of a torch.save file (data.pkl), the importer's most
// exposed parser. Limits are small so each input is cheap. Property: an
// accepted graph's root and every reference point at nodes that exist.
#include "absl/strings/string_view.h"
#include "sharded/checkpoint/interop/pytorch/pickle_reader.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardlight::sharded::checkpoint::pytorch;
  PickleLimits limits;
  limits.max_stack = 1 << 12;
  limits.max_memo = 1 << 12;
  limits.max_nodes = 1 << 14;
  auto graph = ReadPickle(absl::string_view(reinterpret_cast<const char*>(data), size), limits);
  if (!graph.ok()) return 0;
  const int n = static_cast<int>(graph->nodes.size());
  FUZZ_CHECK(n <= limits.max_nodes);
  FUZZ_CHECK(graph->root >= 0 && graph->root < n);
  for (const PickleNode& node : graph->nodes) {
    for (int item : node.items) FUZZ_CHECK(item >= 0 && item < n);
  }
  return 0;
}
