#include "sharded/agreement.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sharded/collectives.h"
#include "sharded/no_throw.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded {
namespace {

// The wire form of a verdict, the only one:
//   "+" <fingerprint> ":" <payload>   or   "-" <status code> ":" <message>
std::string Encode(const Verdict& v) {
  return v.status.ok() ? absl::StrCat("+", v.fingerprint, ":", v.payload)
                       : absl::StrCat("-", static_cast<int>(v.status.code()), ":", v.status.message());
}

struct Decoded {
  bool ok = false;
  int64_t number = 0;  // fingerprint (ok) or status code
  std::string rest;    // payload (ok) or message
};

Decoded Decode(const std::string& wire) {
  Decoded d;
  const size_t colon = wire.find(':');
  uint64_t fingerprint = 0;
  int code = 0;
  if (!wire.empty() && colon != std::string::npos) {
    d.rest = wire.substr(colon + 1);
    const std::string number = wire.substr(1, colon - 1);
    if (wire[0] == '+' && absl::SimpleAtoi(number, &fingerprint)) {
      d.ok = true;
      d.number = static_cast<int64_t>(fingerprint);
      return d;
    }
    if (wire[0] == '-' && absl::SimpleAtoi(number, &code)) {
      d.number = code;
      return d;
    }
  }
  d.rest = "malformed verdict";
  d.number = static_cast<int>(absl::StatusCode::kInternal);
  return d;
}

absl::StatusCode ClampedCode(int64_t code) {
  if (code <= 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) return absl::StatusCode::kUnknown;
  return static_cast<absl::StatusCode>(code);
}

// The single place where an agreement's collective is issued and waited on.
absl::StatusOr<std::vector<std::string>> ExchangeVerdicts(c10d::ProcessGroup& pg, const std::string& wire) {
  return NoThrow([&] { return AllgatherStrings(pg, wire); });
}

}  // namespace

absl::StatusOr<std::vector<std::string>> AgreeAndGather(c10d::ProcessGroup& pg, const Verdict& mine,
                                                        const AgreementContext& context) {
  auto all = ExchangeVerdicts(pg, Encode(mine));
  if (!all.ok() && !mine.status.ok()) {
    // This rank's own failure is the root cause; the peers may have gone.
    return absl::Status(mine.status.code(),
                        absl::StrCat(context.op, " failed on rank ", pg.getRank(), ": ", mine.status.message(),
                                     " (the other ranks could not be told: ", all.status().message(), ")"));
  }
  if (!all.ok()) {
    return absl::UnavailableError(absl::StrCat(context.op, ": ranks could not agree (", all.status().message(), ")"));
  }
  std::vector<Decoded> verdicts;
  for (const std::string& wire : *all) verdicts.push_back(Decode(wire));
  int first_failed = -1;
  int failed = 0;
  for (int r = 0; r < static_cast<int>(verdicts.size()); ++r) {
    if (verdicts[r].ok) continue;
    ++failed;
    if (first_failed < 0) first_failed = r;
  }
  if (first_failed >= 0) {
    const Decoded& v = verdicts[first_failed];
    std::string text = absl::StrCat(context.op, " failed on rank ", first_failed, ": ", v.rest);
    if (failed > 1) absl::StrAppend(&text, " (", failed - 1, " other rank", failed > 2 ? "s" : "", " failed too)");
    return absl::Status(ClampedCode(v.number), text);
  }
  for (int r = 1; r < static_cast<int>(verdicts.size()); ++r) {
    if (verdicts[r].number != verdicts[0].number) {
      return absl::InvalidArgumentError(absl::StrCat(context.op, ": ranks disagree on the ", context.subject,
                                                     ": rank 0 and rank ", r, " passed different values"));
    }
  }
  std::vector<std::string> payloads;
  payloads.reserve(verdicts.size());
  for (Decoded& v : verdicts) payloads.push_back(std::move(v.rest));
  return payloads;
}

absl::StatusOr<std::vector<std::string>> AgreeAndGatherTo(c10d::ProcessGroup& pg, int root, const Verdict& mine,
                                                          const AgreementContext& context) {
  const Verdict head{mine.status, mine.fingerprint, std::to_string(mine.payload.size())};
  SL_ASSIGN_OR_RETURN(const std::vector<std::string> sizes, AgreeAndGather(pg, head, context));
  std::vector<int64_t> lengths(sizes.size());
  for (size_t r = 0; r < sizes.size(); ++r) {
    if (!absl::SimpleAtoi(sizes[r], &lengths[r]) || lengths[r] < 0) {
      // Every rank decodes the same verdicts, so every rank fails alike.
      return absl::InternalError(absl::StrCat(context.op, ": rank ", r, " sent a malformed payload length"));
    }
  }
  auto all = NoThrow([&] { return GatherStrings(pg, mine.payload, lengths, root); });
  if (!all.ok()) {
    return absl::Status(all.status().code() == absl::StatusCode::kInvalidArgument ? absl::StatusCode::kInternal
                                                                                   : absl::StatusCode::kUnavailable,
                        absl::StrCat(context.op, ": ranks could not agree (", all.status().message(), ")"));
  }
  return all;
}

std::optional<int> AgreedFailingRank(const absl::Status& status) {
  int rank = 0;
  static constexpr absl::string_view kNeedle = " failed on rank ";
  const absl::string_view message = status.message();
  const size_t at = message.find(kNeedle);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view digits = message.substr(at + kNeedle.size());
  size_t n = 0;
  while (n < digits.size() && n < 9 && digits[n] >= '0' && digits[n] <= '9') ++n;
  if (n == 0 || !absl::SimpleAtoi(digits.substr(0, n), &rank)) return std::nullopt;
  return rank;
}

absl::Status Agree(c10d::ProcessGroup& pg, const absl::Status& mine, absl::string_view op) {
  return AgreeAndGather(pg, {mine, 0, ""}, {std::string(op)}).status();
}

absl::Status AgreeOn(c10d::ProcessGroup& pg, const absl::StatusOr<uint64_t>& fingerprint,
                     const AgreementContext& context) {
  const Verdict mine{fingerprint.status(), fingerprint.ok() ? *fingerprint : 0, ""};
  return AgreeAndGather(pg, mine, context).status();
}

}  // namespace shardlight::sharded
