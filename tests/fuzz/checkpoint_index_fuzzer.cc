// The checkpoint's index.json from a hostile directory. Property: an accepted
// index serialises and parses back to the same index (its values included).
#include <string>

#include "sharded/checkpoint/format/index.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardlight::sharded::checkpoint;
  const std::string json(reinterpret_cast<const char*>(data), size);
  auto index = ParseIndex(json, "fuzz/index.json");
  if (!index.ok()) return 0;
  const std::string again = SerializeIndex(*index);
  auto reparsed = ParseIndex(again, "fuzz/index.json (serialised)");
  FUZZ_CHECK(reparsed.ok());
  FUZZ_CHECK(SerializeIndex(*reparsed) == again);
  for (const IndexTensor& t : index->tensors) FUZZ_CHECK(index->Find(t.key) != nullptr);
  FUZZ_CHECK(reparsed->values.size() == index->values.size());
  for (size_t i = 0; i < index->values.size(); ++i) {
    FUZZ_CHECK(reparsed->values[i].key == index->values[i].key);
    FUZZ_CHECK(reparsed->values[i].value == index->values[i].value);
    FUZZ_CHECK(index->FindValue(index->values[i].key) != nullptr);
  }
  return 0;
}
