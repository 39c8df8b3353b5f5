// torch.__config__.show() text, the build description the gate reads.
// Property: every USE_* flag it reports is also an entry as written.
#include "absl/strings/string_view.h"
#include "lightning/gate/build_settings.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardlight::lightning;
  auto settings = ParseBuildSettings(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!settings.ok()) return 0;
  for (const auto& [name, on] : settings->use_flags) {
    FUZZ_CHECK(settings->Flag(name).has_value() && *settings->Flag(name) == on);
  }
  return 0;
}
