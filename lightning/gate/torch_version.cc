#include "lightning/gate/torch_version.h"

#include <algorithm>
#include <cctype>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardlight::lightning {
namespace {


absl::Status Invalid(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid torch version \"", absl::CHexEscape(text), "\": ", why));
}

class Cursor {
 public:
  explicit Cursor(absl::string_view s) : s_(s) {}
  bool Done() const { return pos_ >= s_.size(); }
  size_t pos() const { return pos_; }
  // The character `ahead` places on, or '\0' past the end.
  char Peek(size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0'; }
  bool Consume(absl::string_view literal) {
    if (s_.substr(pos_, literal.size()) != literal) return false;
    pos_ += literal.size();
    return true;
  }
  // Reads a run of digits; returns its length (0: none there). `*value` is
  // -1 when the number does not fit in int64_t (any length that fits does).
  size_t Digits(int64_t* value) {
    size_t start = pos_;
    int64_t v = 0;
    while (absl::ascii_isdigit(Peek())) {
      const int d = Peek() - '0';
      if (v >= 0) v = v > (INT64_MAX - d) / 10 ? -1 : v * 10 + d;
      ++pos_;
    }
    *value = v;
    return pos_ - start;
  }
  void Advance() { ++pos_; }

 private:
  absl::string_view s_;
  size_t pos_ = 0;
};

std::string Where(const Cursor& c) {
  if (c.Done()) return "at the end";
  // Escaped: the byte may be anything, and the message goes to logs.
  return absl::StrCat("'", absl::CHexEscape(std::string(1, c.Peek())), "' at position ", c.pos());
}

// Number after a segment marker (the "0" of "a0", "20210809" of ".dev20210809").
absl::Status RequireNumber(absl::string_view text, Cursor& c, absl::string_view what,
                           int64_t* out) {
  size_t n = c.Digits(out);
  if (n == 0) return Invalid(text, absl::StrCat(what, " needs a number, found ", Where(c)));
  if (*out < 0) return Invalid(text, absl::StrCat(what, " number is larger than 2^63 - 1"));
  return absl::OkStatus();
}

// Local segments compare as numbers when all digits (after alphanumerics).
int CompareLocalSegment(const std::string& a, const std::string& b) {
  bool a_num = std::all_of(a.begin(), a.end(), absl::ascii_isdigit);
  bool b_num = std::all_of(b.begin(), b.end(), absl::ascii_isdigit);
  if (a_num != b_num) return a_num ? 1 : -1;
  if (!a_num) return a < b ? -1 : (a > b ? 1 : 0);
  absl::string_view x = a, y = b;
  x.remove_prefix(std::min(x.find_first_not_of('0'), x.size()));
  y.remove_prefix(std::min(y.find_first_not_of('0'), y.size()));
  if (x.size() != y.size()) return x.size() < y.size() ? -1 : 1;
  return x < y ? -1 : (x > y ? 1 : 0);
}

template <typename T>
int Cmp(const T& a, const T& b) {
  return a < b ? -1 : (b < a ? 1 : 0);
}

}  // namespace

std::string TorchVersion::Local() const { return absl::StrJoin(local_, "."); }

TorchVersion TorchVersion::BaseVersion() const {
  TorchVersion base;
  base.epoch_ = epoch_;
  base.release_ = release_;
  return base;
}

std::string TorchVersion::ToString() const {
  std::string out = epoch_ != 0 ? absl::StrCat(epoch_, "!") : "";
  absl::StrAppend(&out, absl::StrJoin(release_, "."));
  if (pre_) {
    static constexpr const char* kSpelling[] = {"a", "b", "rc"};
    absl::StrAppend(&out, kSpelling[static_cast<int>(pre_->kind)], pre_->number);
  }
  if (post_) absl::StrAppend(&out, ".post", *post_);
  if (dev_) absl::StrAppend(&out, ".dev", *dev_);
  if (!local_.empty()) absl::StrAppend(&out, "+", Local());
  return out;
}

absl::StatusOr<TorchVersion> ParseTorchVersion(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  if (s.empty()) return Invalid(text, "empty version string");
  Cursor c(s);
  TorchVersion v;
  int64_t n = 0;
  size_t digits = c.Digits(&n);
  if (digits == 0) return Invalid(text, absl::StrCat("expected a release number, found ", Where(c)));
  if (n < 0) return Invalid(text, "release number is larger than 2^63 - 1");
  if (c.Consume("!")) {  // that was the epoch
    v.epoch_ = n;
    digits = c.Digits(&n);
    if (digits == 0) return Invalid(text, absl::StrCat("expected a release after the epoch, found ", Where(c)));
    if (n < 0) return Invalid(text, "release number is larger than 2^63 - 1");
  }
  v.release_.push_back(n);
  // Release segments: ".N" repeated; ".post"/".dev" end them.
  while (c.Peek() == '.' && !absl::ascii_isalpha(c.Peek(1))) {
    c.Consume(".");
    digits = c.Digits(&n);
    if (digits == 0) return Invalid(text, absl::StrCat("empty release segment, found ", Where(c)));
    if (n < 0) return Invalid(text, "release number is larger than 2^63 - 1");
    v.release_.push_back(n);
  }
  // Pre-release: rc is tried first so "rc1" is not read as an unknown "r".
  static constexpr std::pair<absl::string_view, TorchVersion::PreKind> kPre[] = {
      {"rc", TorchVersion::PreKind::kRc},
      {"a", TorchVersion::PreKind::kAlpha},
      {"b", TorchVersion::PreKind::kBeta}};
  for (const auto& [spelling, kind] : kPre) {
    if (!c.Consume(spelling)) continue;
    int64_t number = 0;
    if (auto st = RequireNumber(text, c, absl::StrCat("pre-release '", spelling, "'"), &number); !st.ok()) return st;
    v.pre_ = TorchVersion::PreRelease{kind, number};
    break;
  }
  if (c.Consume(".post")) {
    int64_t number = 0;
    if (auto st = RequireNumber(text, c, "post-release", &number); !st.ok()) return st;
    v.post_ = number;
  }
  if (c.Consume(".dev")) {
    int64_t number = 0;
    if (auto st = RequireNumber(text, c, "dev release", &number); !st.ok()) return st;
    v.dev_ = number;
  }
  if (c.Consume("+")) {
    // Local label: alphanumeric segments; '-' and '_' normalise to '.'.
    std::string segment;
    while (true) {
      char ch = c.Peek();
      if (absl::ascii_isalnum(ch)) {
        segment.push_back(absl::ascii_tolower(ch));
        c.Advance();
        continue;
      }
      if (segment.empty()) {
        return Invalid(text, absl::StrCat("empty local label segment, found ", Where(c)));
      }
      // PEP 440 canonical form: numeric segments without leading zeros.
      if (std::all_of(segment.begin(), segment.end(), absl::ascii_isdigit)) {
        segment.erase(0, std::min(segment.find_first_not_of('0'), segment.size() - 1));
      }
      v.local_.push_back(std::move(segment));
      segment.clear();
      if (ch != '.' && ch != '-' && ch != '_') break;
      c.Advance();
    }
  }
  if (!c.Done()) return Invalid(text, absl::StrCat("unexpected ", Where(c)));
  return v;
}

int Compare(const TorchVersion& a, const TorchVersion& b) {
  if (int r = Cmp(a.epoch_, b.epoch_)) return r;
  size_t n = std::max(a.release_.size(), b.release_.size());
  for (size_t i = 0; i < n; ++i) {
    if (int r = Cmp(a.Segment(i), b.Segment(i))) return r;
  }
  // PEP 440 keys: a dev-only release sorts before every pre-release of it; a
  // final release after all of them.
  auto pre_key = [](const TorchVersion& v) {
    if (!v.pre_ && !v.post_ && v.dev_) return std::make_tuple(-1, int64_t{0});
    if (!v.pre_) return std::make_tuple(3, int64_t{0});
    return std::make_tuple(static_cast<int>(v.pre_->kind), v.pre_->number);
  };
  if (int r = Cmp(pre_key(a), pre_key(b))) return r;
  auto post_key = [](const TorchVersion& v) { return std::make_tuple(v.post_.has_value(), v.post_.value_or(0)); };
  if (int r = Cmp(post_key(a), post_key(b))) return r;
  auto dev_key = [](const TorchVersion& v) { return std::make_tuple(!v.dev_.has_value(), v.dev_.value_or(0)); };
  if (int r = Cmp(dev_key(a), dev_key(b))) return r;
  size_t m = std::min(a.local_.size(), b.local_.size());
  for (size_t i = 0; i < m; ++i) {
    if (int r = CompareLocalSegment(a.local_[i], b.local_[i])) return r;
  }
  return Cmp(a.local_.size(), b.local_.size());
}

}  // namespace shardlight::lightning
