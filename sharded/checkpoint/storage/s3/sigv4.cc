#include "sharded/checkpoint/storage/s3/sigv4.h"

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/checkpoint/storage/s3/digest.h"

namespace shardlight::sharded::checkpoint::s3 {
namespace {

bool Unreserved(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' || c == '~';
}

// A header value as SigV4 signs it: outer whitespace trimmed, inner runs of
// spaces collapsed to one (the suite's get-header-value-trim).
std::string CanonicalHeaderValue(absl::string_view value) {
  value = absl::StripAsciiWhitespace(value);
  std::string out;
  out.reserve(value.size());
  bool in_space = false;
  for (char c : value) {
    if (c == ' ' || c == '\t') {
      in_space = true;
      continue;
    }
    if (in_space) out.push_back(' ');
    in_space = false;
    out.push_back(c);
  }
  return out;
}

bool HasHeader(const SigV4Request& request, absl::string_view name) {
  return std::any_of(request.headers.begin(), request.headers.end(),
                     [&](const auto& h) { return absl::EqualsIgnoreCase(h.first, name); });
}

}  // namespace

std::string UriEncode(absl::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (Unreserved(c) || (keep_slash && c == '/')) {
      out.push_back(c);
    } else {
      const auto b = static_cast<unsigned char>(c);
      out.push_back('%');
      out.push_back(kHex[b >> 4]);
      out.push_back(kHex[b & 0xf]);
    }
  }
  return out;
}

std::string CanonicalQueryString(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [name, value] : query) encoded.emplace_back(UriEncode(name, false), UriEncode(value, false));
  // Sorted by encoded name, then value: the byte order SigV4 specifies.
  std::sort(encoded.begin(), encoded.end());
  return absl::StrJoin(encoded, "&", [](std::string* out, const auto& p) { absl::StrAppend(out, p.first, "=", p.second); });
}

std::string AmzDate(absl::Time t) { return absl::FormatTime("%Y%m%dT%H%M%SZ", t, absl::UTCTimeZone()); }

SigV4Signature SignV4(const SigV4Request& request, const SigV4Credentials& credentials,
                      absl::string_view region, absl::string_view service, absl::string_view amz_date) {
  // Lower-cased names, sorted; repeated names join their values with commas.
  std::map<std::string, std::string> headers;
  for (const auto& [name, value] : request.headers) {
    std::string& slot = headers[absl::AsciiStrToLower(name)];
    absl::StrAppend(&slot, slot.empty() ? "" : ",", CanonicalHeaderValue(value));
  }
  std::string canonical_headers;
  std::vector<absl::string_view> names;
  for (const auto& [name, value] : headers) {
    absl::StrAppend(&canonical_headers, name, ":", value, "\n");
    names.push_back(name);
  }

  SigV4Signature s;
  s.signed_headers = absl::StrJoin(names, ";");
  s.canonical_request = absl::StrCat(request.method, "\n", UriEncode(request.path, true), "\n",
                                     CanonicalQueryString(request.query), "\n", canonical_headers, "\n",
                                     s.signed_headers, "\n", request.payload_hash);
  const absl::string_view date = amz_date.substr(0, 8);
  const std::string scope = absl::StrCat(date, "/", region, "/", service, "/aws4_request");
  s.string_to_sign = absl::StrCat("AWS4-HMAC-SHA256\n", amz_date, "\n", scope, "\n", Sha256Hex(s.canonical_request));

  std::string key = HmacSha256(absl::StrCat("AWS4", credentials.secret_access_key), date);
  key = HmacSha256(key, region);
  key = HmacSha256(key, service);
  key = HmacSha256(key, "aws4_request");
  s.signature = HexEncode(HmacSha256(key, s.string_to_sign));
  s.authorization = absl::StrCat("AWS4-HMAC-SHA256 Credential=", credentials.access_key_id, "/", scope,
                                 ", SignedHeaders=", s.signed_headers, ", Signature=", s.signature);
  return s;
}

SigV4Signature AddSigV4Authorization(SigV4Request& request, const SigV4Credentials& credentials,
                                     absl::string_view region, absl::string_view service, absl::Time now) {
  const std::string amz_date = AmzDate(now);
  request.headers.emplace_back("x-amz-date", amz_date);
  if (service == "s3" && !HasHeader(request, "x-amz-content-sha256")) {
    request.headers.emplace_back("x-amz-content-sha256", request.payload_hash);
  }
  if (!credentials.session_token.empty()) {
    request.headers.emplace_back("x-amz-security-token", credentials.session_token);
  }
  SigV4Signature s = SignV4(request, credentials, region, service, amz_date);
  request.headers.emplace_back("Authorization", s.authorization);
  return s;
}

}  // namespace shardlight::sharded::checkpoint::s3
