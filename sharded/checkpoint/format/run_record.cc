#include "sharded/checkpoint/format/run_record.h"

#include <set>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardlight::sharded::checkpoint {
namespace {

constexpr size_t kMaxNameBytes = 64;
constexpr size_t kMaxValueBytes = 1024;

bool IsNameByte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == '-';
}

}  // namespace

absl::Status ValidateRunRecord(const RunRecord& record) {
  if (record.size() > kMaxRunRecordMembers) {
    return absl::InvalidArgumentError(
        absl::StrCat("run record has ", record.size(), " members; at most ", kMaxRunRecordMembers));
  }
  for (const auto& [name, value] : record) {
    bool good_name = !name.empty() && name.size() <= kMaxNameBytes;
    for (char c : name) good_name = good_name && IsNameByte(c);
    if (!good_name) {
      return absl::InvalidArgumentError(absl::StrCat("run record name \"", absl::CHexEscape(name),
                                                     "\" is not 1..64 bytes of [A-Za-z0-9_.-]"));
    }
    bool good_value = value.size() <= kMaxValueBytes;
    for (char c : value) good_value = good_value && c >= ' ' && c <= '~';
    if (!good_value) {
      return absl::InvalidArgumentError(absl::StrCat("run record value of \"", name,
                                                     "\" is not printable ASCII of at most 1024 bytes"));
    }
  }
  return absl::OkStatus();
}

std::string DescribeRunDifference(const RunRecord& saved, const RunRecord& current) {
  std::set<std::string> names;
  for (const auto& member : saved) names.insert(member.first);
  for (const auto& member : current) names.insert(member.first);
  auto value = [](const RunRecord& r, const std::string& name) {
    auto it = r.find(name);
    return it == r.end() ? std::string("(none)") : it->second;
  };
  std::vector<std::string> diffs;
  for (const std::string& name : names) {
    const std::string there = value(saved, name), here = value(current, name);
    if (there != here) diffs.push_back(absl::StrCat(name, " ", there, " there, ", here, " here"));
  }
  return absl::StrJoin(diffs, "; ");
}

}  // namespace shardlight::sharded::checkpoint
