#include "sharded/checkpoint/agreement.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/no_throw.h"
#include "sharded/collectives.h"

namespace shardlight::sharded::checkpoint {

absl::StatusOr<std::vector<std::string>> AgreeAndGather(c10d::ProcessGroup& pg, const absl::Status& mine,
                                                        const std::string& payload, const std::string& what) {
  // Wire form: "+" payload, or "-" code ":" message.
  const std::string wire = mine.ok() ? absl::StrCat("+", payload)
                                     : absl::StrCat("-", static_cast<int>(mine.code()), ":", mine.message());
  auto all = NoThrow([&] { return AllgatherStrings(pg, wire); });
  if (!all.ok()) {
    return absl::UnavailableError(absl::StrCat(what, ": ranks could not agree (", all.status().message(), ")",
                                               mine.ok() ? "" : absl::StrCat("; this rank had failed: ", mine.message())));
  }
  int first_failed = -1;
  int failed = 0;
  for (int r = 0; r < static_cast<int>(all->size()); ++r) {
    if ((*all)[r].empty() || (*all)[r][0] != '+') {
      ++failed;
      if (first_failed < 0) first_failed = r;
    }
  }
  if (first_failed >= 0) {
    const std::string& w = (*all)[first_failed];
    const size_t colon = w.find(':');
    int code = static_cast<int>(absl::StatusCode::kUnknown);
    std::string message = w;
    if (w.size() > 1 && colon != std::string::npos && absl::SimpleAtoi(w.substr(1, colon - 1), &code)) {
      message = w.substr(colon + 1);
    }
    if (code <= 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
      code = static_cast<int>(absl::StatusCode::kUnknown);
    }
    std::string text = absl::StrCat(what, " failed on rank ", first_failed, ": ", message);
    if (failed > 1) absl::StrAppend(&text, " (", failed - 1, " other rank", failed > 2 ? "s" : "", " failed too)");
    return absl::Status(static_cast<absl::StatusCode>(code), text);
  }
  std::vector<std::string> payloads;
  payloads.reserve(all->size());
  for (std::string& w : *all) payloads.push_back(w.substr(1));
  return payloads;
}

absl::Status Agree(c10d::ProcessGroup& pg, const absl::Status& mine, const std::string& what) {
  return AgreeAndGather(pg, mine, "", what).status();
}

}  // namespace shardlight::sharded::checkpoint
