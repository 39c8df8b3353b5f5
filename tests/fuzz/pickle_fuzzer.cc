// The pickle stream of a torch.save file (data.pkl), the importer's most
// exposed parser. Limits are small so each input is cheap. Properties: an
// accepted graph's root and every reference point at nodes that exist, a
// tensor's storage is a storage, and the graph stays a bounded multiple of
// the input (issue 26: texts at most twice the input plus 1 MiB).
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
  const int n = graph->size();
  FUZZ_CHECK(n <= limits.max_nodes);
  FUZZ_CHECK(n <= static_cast<int>(size));  // at most one node per opcode
  FUZZ_CHECK(graph->root() >= 0 && graph->root() < n);
  for (int id = 0; id < n; ++id) {
    for (int item : graph->items(id)) FUZZ_CHECK(item >= 0 && item < n);
    if (graph->kind(id) == PickleKind::kTensor) {
      const PickleTensor t = graph->tensor(id);
      FUZZ_CHECK(t.storage >= 0 && t.storage < n && graph->kind(t.storage) == PickleKind::kStorage);
    }
  }
  FUZZ_CHECK(graph->MemoryBytes() <= 64 * static_cast<int64_t>(size) + (int64_t{2} << 20));
  return 0;
}
