// Placements ("rank:R/cpu", "rank:R/cuda:N") as users and files spell them.
// Property: an accepted placement prints to a text that parses back to it.
#include <string>

#include "absl/strings/string_view.h"
#include "sharded/placement.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardlight::sharded;
  auto placement = ParsePlacement(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!placement.ok()) return 0;
  auto again = ParsePlacement(placement->ToString());
  FUZZ_CHECK(again.ok() && *again == *placement);
  return 0;
}
