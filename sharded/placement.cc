#include "sharded/placement.h"

#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/strip.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace shardlight::sharded {
namespace {

// Strict non-negative decimal: no sign, no spaces, no empty string.
bool ParseIndex(absl::string_view digits, int* out) {
  if (digits.empty() || digits.size() > 9) return false;
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return absl::SimpleAtoi(digits, out);
}

}  // namespace

std::string Placement::DeviceString() const {
  return device == DeviceKind::kCpu ? std::string("cpu") : absl::StrCat("cuda:", device_index);
}

std::string Placement::ToString() const { return absl::StrCat("rank:", rank, "/", DeviceString()); }

absl::StatusOr<Placement> ParsePlacement(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("malformed placement \"", absl::CHexEscape(text),
                                                   "\": ", why,
                                                   " (want \"rank:R/cpu\" or \"rank:R/cuda:N\")"));
  };
  absl::string_view rest = text;
  if (!absl::ConsumePrefix(&rest, "rank:")) return bad("missing \"rank:\" prefix");
  const size_t slash = rest.find('/');
  if (slash == absl::string_view::npos) return bad("missing \"/device\"");
  Placement p;
  if (!ParseIndex(rest.substr(0, slash), &p.rank)) return bad("rank is not a non-negative integer");
  absl::string_view device = rest.substr(slash + 1);
  if (device == "cpu") {
    p.device = DeviceKind::kCpu;
  } else if (absl::ConsumePrefix(&device, "cuda:")) {
    p.device = DeviceKind::kCuda;
    if (!ParseIndex(device, &p.device_index)) return bad("cuda index is not a non-negative integer");
  } else {
    return bad("device must be \"cpu\" or \"cuda:N\"");
  }
  return p;
}

}  // namespace shardlight::sharded
