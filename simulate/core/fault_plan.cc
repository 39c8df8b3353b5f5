#include "simulate/core/fault_plan.h"

#include <map>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace shardlight::simulate {
namespace {

const std::map<std::string, FaultKind>& Kinds() {
  static const auto* kinds = new std::map<std::string, FaultKind>{
      {"crash", FaultKind::kCrash}, {"save-crash", FaultKind::kSaveCrash},
      {"delay", FaultKind::kDelay}, {"timeout", FaultKind::kTimeout}, {"save-delay", FaultKind::kSaveDelay}};
  return *kinds;
}

bool HasDelay(FaultKind kind) { return kind == FaultKind::kDelay || kind == FaultKind::kSaveDelay; }

}  // namespace

std::string FaultPlan::ToString() const {
  std::string name;
  for (const auto& [n, k] : Kinds()) {
    if (k == kind) name = n;
  }
  std::string out = absl::StrCat(name, ":rank=", rank, ",step=", step);
  if (HasDelay(kind)) absl::StrAppend(&out, ",ms=", delay.count());
  return out;
}

absl::StatusOr<FaultPlan> ParseFaultPlan(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("malformed fault plan \"", absl::CHexEscape(text), "\": ", why,
                                                   " (want KIND:rank=R,step=K[,ms=M] with KIND one of crash, "
                                                   "save-crash, delay, save-delay, timeout)"));
  };
  // Printable ASCII only: SimpleAtoi would otherwise take "step=2\n" or
  // "step= 2" as 2, and a pasted plan with a stray space must not run.
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c <= ' ' || c >= 0x7f) return bad(absl::StrCat("byte ", i, " is a space, a control character or not ASCII"));
  }
  std::vector<absl::string_view> head = absl::StrSplit(text, absl::MaxSplits(':', 1));
  if (head.size() != 2) return bad("missing ':'");
  auto kind = Kinds().find(std::string(head[0]));
  if (kind == Kinds().end()) return bad(absl::StrCat("unknown kind \"", head[0], "\""));
  FaultPlan plan;
  plan.kind = kind->second;
  bool have_rank = false, have_step = false, have_ms = false;
  for (absl::string_view field : absl::StrSplit(head[1], ',')) {
    std::vector<absl::string_view> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
    int64_t v = 0;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[1], &v) || v < 0) {
      return bad(absl::StrCat("field \"", field, "\" is not NAME=non-negative integer"));
    }
    if (kv[0] == "rank" && !have_rank && v < 64) {
      plan.rank = static_cast<int>(v);
      have_rank = true;
    } else if (kv[0] == "step" && !have_step && v >= 1) {
      plan.step = v;
      have_step = true;
    } else if (kv[0] == "ms" && !have_ms && HasDelay(plan.kind) && v <= 600000) {
      plan.delay = std::chrono::milliseconds(v);
      have_ms = true;
    } else {
      return bad(absl::StrCat("unexpected, repeated or out-of-range field \"", field, "\""));
    }
  }
  if (!have_rank || !have_step) return bad("rank= and step= are required");
  if (HasDelay(plan.kind) && !have_ms) return bad(absl::StrCat(head[0], " needs ms="));
  return plan;
}

}  // namespace shardlight::simulate
