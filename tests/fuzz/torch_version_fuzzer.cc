// Version strings (torch.__version__, NGC's "1.10.0a0+ecc3718"). Properties:
// the canonical spelling parses back to an equal version and is a fixed
// point, and comparison is reflexive.
#include <string>

#include "absl/strings/string_view.h"
#include "lightning/gate/torch_version.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardlight::lightning;
  auto version = ParseTorchVersion(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!version.ok()) return 0;
  const std::string canonical = version->ToString();
  auto again = ParseTorchVersion(canonical);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(*again == *version);
  FUZZ_CHECK(again->ToString() == canonical);
  FUZZ_CHECK(Compare(*version, *version) == 0);
  return 0;
}
