#include "tools/train/die_in.h"

#include <signal.h>

#include <iostream>
#include <memory>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace shardlight::tools {

absl::StatusOr<DieIn> ParseDieIn(absl::string_view text) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' ", why, " (all-gather:rank=R,step=K,unit=U[,n=N] or reduce-scatter:rank=R,step=K,unit=U)"));
  };
  const std::vector<absl::string_view> parts = absl::StrSplit(text, absl::MaxSplits(':', 1));
  if (parts.size() != 2) return bad("has no ':'");
  DieIn die;
  die.collective = std::string(parts[0]);
  if (die.collective != "all-gather" && die.collective != "reduce-scatter") {
    return bad(absl::StrCat("names the collective '", parts[0], "', not all-gather or reduce-scatter"));
  }
  bool rank = false, step = false, n = false;
  for (absl::string_view field : absl::StrSplit(parts[1], ',')) {
    const std::vector<absl::string_view> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[1].empty()) return bad(absl::StrCat("has the field '", field, "', not name=value"));
    if (kv[0] == "rank" && !rank) {
      rank = absl::SimpleAtoi(kv[1], &die.rank) && die.rank >= 0;
      if (!rank) return bad(absl::StrCat("has rank '", kv[1], "', not a rank >= 0"));
    } else if (kv[0] == "step" && !step) {
      step = absl::SimpleAtoi(kv[1], &die.step) && die.step >= 0;
      if (!step) return bad(absl::StrCat("has step '", kv[1], "', not a step >= 0"));
    } else if (kv[0] == "unit" && die.unit.empty()) {
      die.unit = std::string(kv[1]);
    } else if (kv[0] == "n" && !n) {
      n = true;
      const int most = die.collective == "all-gather" ? 2 : 1;
      if (!absl::SimpleAtoi(kv[1], &die.n) || die.n < 1 || die.n > most) {
        return bad(absl::StrCat("has n '", kv[1], "': a unit's all-gather is 1 (the forward's) or 2 (the backward's), ",
                                "its reduce-scatter 1"));
      }
    } else {
      return bad(absl::StrCat("has the field '", kv[0], "' unknown or twice"));
    }
  }
  if (!rank || !step || die.unit.empty()) return bad("lacks rank, step or unit");
  return die;
}

std::function<void(const std::string&, const std::string&, int64_t)> DieInHook(const DieIn& die, int rank) {
  if (rank != die.rank) return nullptr;
  auto seen = std::make_shared<int>(0);  // the matching collectives of die.step so far
  return [die, rank, seen](const std::string& collective, const std::string& unit, int64_t step) {
    if (collective != die.collective || unit != die.unit || step != die.step || ++*seen != die.n) return;
    std::cerr << absl::StrCat("train: rank ", rank, ": --die_in: killed in the ", collective, " #", die.n, " of unit ",
                              unit, " at step ", die.step, "\n")
              << std::flush;
    raise(SIGKILL);
  };
}

}  // namespace shardlight::tools
