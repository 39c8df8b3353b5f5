#include "lightning/cluster/slurm_hostlist.h"

#include <cstdint>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace shardlight::lightning::cluster {
namespace {

struct Range {
  uint64_t low = 0, high = 0;
  size_t width = 0;  // zero-padded width ("01-04" pads to 2)
};

// A host pattern: literal text and bracket groups, alternating.
struct Pattern {
  std::vector<std::string> literals;      // literals.size() == groups.size() + 1
  std::vector<std::vector<Range>> groups;
};

absl::Status Bad(absl::string_view list, size_t pos, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad Slurm host list '", list, "' at position ", pos, ": ", what));
}

absl::StatusOr<Range> ParseRange(absl::string_view list, size_t pos, absl::string_view text) {
  const size_t dash = text.find('-');
  absl::string_view lo = text.substr(0, dash);
  absl::string_view hi = dash == absl::string_view::npos ? lo : text.substr(dash + 1);
  auto all_digits = [](absl::string_view s) {
    if (s.empty() || s.size() > 18) return false;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
    }
    return true;
  };
  if (!all_digits(lo) || !all_digits(hi)) return Bad(list, pos, absl::StrCat("'", text, "' is not N or N-M"));
  Range r;
  if (!absl::SimpleAtoi(lo, &r.low) || !absl::SimpleAtoi(hi, &r.high)) return Bad(list, pos, "number too large");
  if (r.high < r.low) return Bad(list, pos, absl::StrCat("range '", text, "' descends"));
  r.width = lo.size() > 1 && lo[0] == '0' ? lo.size() : 0;
  return r;
}

// Splits the list at top-level commas and parses each pattern.
absl::StatusOr<std::vector<Pattern>> Parse(absl::string_view list) {
  std::vector<Pattern> patterns;
  Pattern current;
  current.literals.emplace_back();
  size_t i = 0;
  auto finish = [&](size_t pos) -> absl::Status {
    if (current.groups.empty() && current.literals.back().empty()) return Bad(list, pos, "empty host name");
    patterns.push_back(std::move(current));
    current = Pattern();
    current.literals.emplace_back();
    return absl::OkStatus();
  };
  if (list.empty()) return Bad(list, 0, "the list is empty");
  while (i < list.size()) {
    const char c = list[i];
    if (c == ',') {
      if (auto s = finish(i); !s.ok()) return s;
      ++i;
    } else if (c == '[') {
      const size_t close = list.find(']', i);
      const size_t nested = list.find('[', i + 1);
      if (close == absl::string_view::npos || (nested != absl::string_view::npos && nested < close)) {
        return Bad(list, i, "'[' without its ']'");
      }
      std::vector<Range> group;
      absl::string_view body = list.substr(i + 1, close - i - 1);
      size_t start = 0;
      while (true) {
        const size_t comma = body.find(',', start);
        absl::string_view part = body.substr(start, comma == absl::string_view::npos ? body.npos : comma - start);
        auto range = ParseRange(list, i + 1 + start, part);
        if (!range.ok()) return range.status();
        group.push_back(*range);
        if (comma == absl::string_view::npos) break;
        start = comma + 1;
      }
      current.groups.push_back(std::move(group));
      current.literals.emplace_back();
      i = close + 1;
    } else if (c == ']') {
      return Bad(list, i, "']' without its '['");
    } else if (static_cast<unsigned char>(c) <= ' ' || static_cast<unsigned char>(c) >= 0x7f) {
      return Bad(list, i, "a host name holds only printable ASCII");
    } else {
      current.literals.back().push_back(c);
      ++i;
    }
  }
  if (auto s = finish(i); !s.ok()) return s;
  return patterns;
}

std::string Number(uint64_t value, size_t width) {
  std::string digits = std::to_string(value);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

// Appends every host of `p` (last group varying fastest) until `max_hosts`.
absl::Status Expand(const Pattern& p, absl::string_view list, size_t max_hosts, std::vector<std::string>& out) {
  std::vector<std::pair<size_t, uint64_t>> cursor(p.groups.size(), {0, 0});  // (range, offset)
  for (size_t g = 0; g < p.groups.size(); ++g) cursor[g] = {0, p.groups[g][0].low};
  while (true) {
    if (out.size() >= max_hosts) {
      return absl::ResourceExhaustedError(
          absl::StrCat("Slurm host list '", list, "' expands to more than ", max_hosts, " hosts"));
    }
    std::string host = p.literals[0];
    for (size_t g = 0; g < p.groups.size(); ++g) {
      absl::StrAppend(&host, Number(cursor[g].second, p.groups[g][cursor[g].first].width), p.literals[g + 1]);
    }
    out.push_back(std::move(host));
    // Advance like an odometer, last group first.
    size_t g = p.groups.size();
    while (g > 0) {
      --g;
      auto& [range, value] = cursor[g];
      if (value < p.groups[g][range].high) {
        ++value;
        break;
      }
      if (range + 1 < p.groups[g].size()) {
        ++range;
        value = p.groups[g][range].low;
        break;
      }
      cursor[g] = {0, p.groups[g][0].low};
      if (g == 0) return absl::OkStatus();
    }
    if (p.groups.empty()) return absl::OkStatus();
  }
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandSlurmHostlist(absl::string_view list, size_t max_hosts) {
  auto patterns = Parse(list);
  if (!patterns.ok()) return patterns.status();
  std::vector<std::string> hosts;
  for (const Pattern& p : *patterns) {
    if (auto s = Expand(p, list, max_hosts, hosts); !s.ok()) return s;
  }
  return hosts;
}

absl::StatusOr<std::string> FirstSlurmHost(absl::string_view list) {
  auto patterns = Parse(list);
  if (!patterns.ok()) return patterns.status();
  const Pattern& p = patterns->front();
  std::string host = p.literals[0];
  for (size_t g = 0; g < p.groups.size(); ++g) {
    absl::StrAppend(&host, Number(p.groups[g][0].low, p.groups[g][0].width), p.literals[g + 1]);
  }
  return host;
}

}  // namespace shardlight::lightning::cluster
