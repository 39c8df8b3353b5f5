// A PyTorch DCP .metadata file (a pickled Metadata dataclass): the DCP
// reader's first parser of outside input. Seeds are .metadata files written
// by real torch 2.15 dcp.save. Property: accepted metadata is consistent:
// every chunk lies inside its tensor and every payload is a plain file name
// with a byte range.
#include "absl/strings/string_view.h"
#include "sharded/checkpoint/interop/dcp/dcp_metadata.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardlight::sharded::checkpoint::dcp;
  auto md = ParseDcpMetadata(absl::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!md.ok()) return 0;
  auto check_item = [](const DcpItem& item) {
    FUZZ_CHECK(!item.file.empty() && item.file.find('/') == std::string::npos);
    FUZZ_CHECK(item.offset >= 0 && item.length >= 0 && item.offset <= INT64_MAX - item.length);
  };
  for (const DcpTensor& t : md->tensors) {
    for (const DcpChunk& c : t.chunks) {
      FUZZ_CHECK(c.offsets.size() == t.size.size() && c.sizes.size() == t.size.size());
      for (size_t d = 0; d < t.size.size(); ++d) {
        FUZZ_CHECK(c.offsets[d] >= 0 && c.sizes[d] >= 0 && c.offsets[d] + c.sizes[d] <= t.size[d]);
      }
      check_item(c.item);
    }
  }
  for (const DcpValue& v : md->values) check_item(v.item);
  return 0;
}
