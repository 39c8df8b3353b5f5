// Slurm host lists ("node[01-04,07]", "rack[1-2]-n[01-02]") from
// SLURM_JOB_NODELIST. Properties: the expansion respects its bound and its
// first host is what FirstSlurmHost returns without expanding.
#include "absl/strings/string_view.h"
#include "lightning/cluster/slurm_hostlist.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardlight::lightning::cluster;
  const absl::string_view list(reinterpret_cast<const char*>(data), size);
  auto hosts = ExpandSlurmHostlist(list, 4096);
  auto first = FirstSlurmHost(list);
  if (!hosts.ok()) return 0;
  FUZZ_CHECK(hosts->size() <= 4096);
  if (!hosts->empty()) FUZZ_CHECK(first.ok() && *first == hosts->front());
  return 0;
}
