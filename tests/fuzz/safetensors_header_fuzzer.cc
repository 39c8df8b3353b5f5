// The safetensors header of a data file: JSON with entry names, dtypes,
// shapes and data offsets, from a hostile file. Property: an accepted header
// lies inside the data region, its entries sorted and non-overlapping; the
// check a load makes of a header against its index (SafetensorsHeaderWriter
// on the text) accepts it exactly when it is spelled as the writer spells
// those entries.
#include <string>
#include <utility>

#include "sharded/checkpoint/format/safetensors.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardlight::sharded::checkpoint;
  if (size == 0) return 0;
  static const int64_t kDataBytes[] = {0, 16, 4096, int64_t{1} << 40};
  const int64_t data_bytes = kDataBytes[data[0] % 4];
  const std::string json(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto header = ParseSafetensorsHeader(json, data_bytes, "fuzz.safetensors");
  if (!header.ok()) return 0;
  int64_t previous_end = 0;
  for (const SafetensorsEntry& e : header->entries) {
    FUZZ_CHECK(e.begin >= previous_end && e.begin <= e.end && e.end <= data_bytes);
    FUZZ_CHECK(header->Find(e.name) != nullptr);
    previous_end = e.end;
  }
  const std::string spelled = EncodeSafetensorsHeader(header->entries, header->metadata).substr(8);
  for (const std::string* text : {&json, &spelled}) {
    SafetensorsHeaderWriter check(*text, header->metadata);
    for (const SafetensorsEntry& e : header->entries) check.Add(e.name, e.dtype, e.shape, e.begin, e.end);
    FUZZ_CHECK(std::move(check).Matches() == (*text == spelled));
  }
  return 0;
}
