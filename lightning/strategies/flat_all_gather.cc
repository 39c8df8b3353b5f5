#include "lightning/strategies/flat_all_gather.h"

#include <string>
#include <vector>

#include "sharded/agreement.h"
#include "sharded/compat/c10d_compat.h"
#include "sharded/no_throw.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {

absl::StatusOr<bool> ProbeFlatAllGather(c10d::ProcessGroup& pg) {
  const int w = pg.getSize();
  const int rank = pg.getRank();
  if (w == 1) return true;
  bool works = false;
  sharded::NoThrow([&]() -> absl::Status {
    // Rank r sends {r + 1, 2r + 1, 3r + 1} (mod 256); the output starts as 0xff.
    at::Tensor input = at::arange(1, 4, at::kLong).mul(rank).add(1).remainder(256).to(at::kByte);
    at::Tensor output = at::full({3 * w}, 255, at::TensorOptions().dtype(at::kByte));
    sharded::compat::AllGatherSingle(pg, output, input)->wait();
    const at::Tensor ranks = at::arange(w, at::kLong).repeat_interleave(3);
    const at::Tensor want = at::arange(1, 4, at::kLong).repeat(w).mul(ranks).add(1).remainder(256).to(at::kByte);
    works = at::equal(output, want);
    return absl::OkStatus();
  }).IgnoreError();  // a throw (not supported) is the answer "no"
  SL_ASSIGN_OR_RETURN(const std::vector<std::string> all,
                      sharded::AgreeAndGather(pg, {absl::OkStatus(), 0, works ? "1" : "0"},
                                              {"fsdp flat all-gather probe"}));
  for (const std::string& answer : all) {
    if (answer != "1") return false;
  }
  return true;
}

}  // namespace shardlight::lightning
