// The launcher environment (torchrun, Open MPI, Slurm variables). The input
// is NAME=VALUE records separated by NUL bytes. Property: an accepted
// placement has 0 <= rank < world size and a port in range.
#include <string>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "lightning/cluster/environment.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardlight::lightning::cluster;
  EnvMap env;
  for (absl::string_view record :
       absl::StrSplit(absl::string_view(reinterpret_cast<const char*>(data), size), '\0')) {
    const size_t eq = record.find('=');
    if (eq == absl::string_view::npos) continue;
    env[std::string(record.substr(0, eq))] = std::string(record.substr(eq + 1));
  }
  auto placement = DetectEnvironment(env);
  if (!placement.ok()) return 0;
  FUZZ_CHECK(placement->rank >= 0 && placement->rank < placement->world_size);
  FUZZ_CHECK(placement->master_port >= 0 && placement->master_port <= 65535);
  return 0;
}
