#include "sharded/checkpoint/format/json_stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/utf8.h"

namespace shardlight::sharded::checkpoint {
namespace {

// Keys an object holds before its duplicate check moves to a hash set.
constexpr size_t kLinearKeys = 16;
// Bytes of the current token an error quotes at most.
constexpr size_t kQuotedBytes = 40;

// Error texts quote raw input, which may be invalid UTF-8.
std::string EscapeBytes(absl::string_view text) {
  std::string out;
  for (char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(ch);
    } else {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", c));
    }
  }
  return out;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Length of the UTF-8 sequence at p (RFC 3629: no overlongs, surrogates or
// code points above U+10FFFF), or 0 with *bad at its first bad byte.
size_t Utf8Length(const char* p, const char* end, const char** bad) {
  auto byte = [](const char* q) { return static_cast<unsigned char>(*q); };
  const unsigned char c = byte(p);
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    *bad = p;
    return 0;
  }
  for (size_t k = 1; k < n; ++k) {
    if (p + k >= end || byte(p + k) < (k == 1 ? lo : 0x80) || byte(p + k) > (k == 1 ? hi : 0xBF)) {
      *bad = p + k;
      return 0;
    }
  }
  return n;
}

// Four hex digits at p, or -1.
int Hex4(const char* p, const char* end) {
  if (end - p < 4) return -1;
  int v = 0;
  for (int k = 0; k < 4; ++k) {
    const char h = p[k];
    int d;
    if (h >= '0' && h <= '9') {
      d = h - '0';
    } else if (h >= 'a' && h <= 'f') {
      d = h - 'a' + 10;
    } else if (h >= 'A' && h <= 'F') {
      d = h - 'A' + 10;
    } else {
      return -1;
    }
    v = v * 16 + d;
  }
  return v;
}

}  // namespace

JsonReader::JsonReader(absl::string_view text, const JsonLimits& limits, std::string display_name)
    : begin_(text.data()),
      p_(text.data()),
      end_(text.data() + text.size()),
      limits_(limits),
      display_name_(std::move(display_name)) {
  frames_.resize(static_cast<size_t>(std::max(limits_.max_depth, 0)));
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") {
    Fail("starts with a UTF-8 byte-order mark, which JSON here does not allow");
  }
}

bool JsonReader::Fail(absl::string_view what) {
  if (status_.ok()) status_ = absl::InvalidArgumentError(absl::StrCat(display_name_, ": ", what));
  p_ = end_;  // nothing more is read
  return false;
}

absl::string_view JsonReader::Rest() {
  if (!status_.ok()) return {};
  SkipSpace();
  return absl::string_view(p_, static_cast<size_t>(end_ - p_));
}

void JsonReader::SkipSpace() {
  while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
}

bool JsonReader::SyntaxError(const char* at, absl::string_view what, const char* token_begin) {
  if (!status_.ok()) return false;
  const char* line_start = begin_;
  int64_t line = 1;
  for (const char* q = begin_; q < at; ++q) {
    if (*q == '\n') {
      ++line;
      line_start = q + 1;
    }
  }
  const char* quote_end = std::min(at + 1, end_);
  const char* quote_begin = std::max(token_begin, quote_end - static_cast<ptrdiff_t>(kQuotedBytes));
  return Fail(absl::StrCat("parse error at line ", line, ", column ", at - line_start + 1, " (byte ", at - begin_,
                           "): syntax error ", what, "; last read: '",
                           EscapeBytes(absl::string_view(quote_begin, quote_end - quote_begin)), "'"));
}

bool JsonReader::Unexpected(const char* context) {
  if (!status_.ok()) return false;
  if (p_ >= end_) return SyntaxError(end_, absl::StrCat("while parsing ", context, " - unexpected end of input"), end_);
  const char c = *p_;
  if (c == 't' || c == 'f' || c == 'n') {
    const absl::string_view word = c == 't' ? "true" : c == 'f' ? "false" : "null";
    for (size_t k = 0; k < word.size(); ++k) {
      if (p_ + k >= end_ || p_[k] != word[k]) {
        return SyntaxError(std::min(p_ + k, end_), absl::StrCat("while parsing ", context, " - invalid literal"), p_);
      }
    }
    return SyntaxError(p_ + word.size() - 1, absl::StrCat("while parsing ", context, " - unexpected literal"), p_);
  }
  const char* kind = c == '"'                  ? "unexpected string literal"
                     : c == '-' || IsDigit(c)  ? "unexpected number literal"
                     : absl::string_view("{}[],:").find(c) != absl::string_view::npos ? "unexpected character"
                                                                                     : "invalid literal";
  return SyntaxError(p_, absl::StrCat("while parsing ", context, " - ", kind), p_);
}

std::string JsonReader::PathText(size_t n) const {
  if (n == 0) return "the top level";
  std::string path;
  for (size_t j = 0; j < n; ++j) {
    if (frames_[j].array) {
      path += "/[]";
    } else {
      absl::StrAppend(&path, "/", frames_[j].key);
    }
  }
  return Quote(path);
}

bool JsonReader::Open(bool array, bool kept) {
  ++p_;  // the bracket
  if (depth_ >= frames_.size()) {
    return Fail(absl::StrCat("nesting is deeper than ", limits_.max_depth, " levels at ", PathText(depth_)));
  }
  Frame& f = frames_[depth_++];
  f.array = array;
  f.kept = kept;
  f.first = true;
  f.count = 0;
  f.key = {};
  f.keys.clear();
  if (!f.many_keys.empty()) f.many_keys.clear();
  return true;
}

bool JsonReader::Peek(Type* type) {
  if (!status_.ok()) return false;
  SkipSpace();
  if (p_ >= end_) return Unexpected("a value");
  switch (*p_) {
    case '{': *type = Type::kObject; return true;
    case '[': *type = Type::kArray; return true;
    case '"': *type = Type::kString; return true;
    case 't':
    case 'f': *type = Type::kBool; return true;
    case 'n': *type = Type::kNull; return true;
    default:
      if (*p_ == '-' || IsDigit(*p_)) {
        *type = Type::kNumber;
        return true;
      }
      return Unexpected("a value");
  }
}

bool JsonReader::BeginObject(bool kept) {
  if (!status_.ok()) return false;
  SkipSpace();
  if (p_ >= end_ || *p_ != '{') return Unexpected("a value");
  return Open(/*array=*/false, kept);
}

bool JsonReader::BeginArray(bool kept) {
  if (!status_.ok()) return false;
  SkipSpace();
  if (p_ >= end_ || *p_ != '[') return Unexpected("a value");
  return Open(/*array=*/true, kept);
}

bool JsonReader::AddKey(Frame& f, absl::string_view key) {
  bool repeated;
  if (f.many_keys.empty() && f.keys.size() < kLinearKeys) {
    repeated = std::find(f.keys.begin(), f.keys.end(), key) != f.keys.end();
    if (!repeated) f.keys.push_back(key);
  } else {
    if (f.many_keys.empty()) {
      f.many_keys.insert(f.keys.begin(), f.keys.end());
      f.keys.clear();
    }
    repeated = !f.many_keys.insert(key).second;
  }
  if (repeated) {
    return Fail(absl::StrCat("key ", Quote(key), " appears twice in the object at ", PathText(depth_ - 1)));
  }
  return true;
}

bool JsonReader::NextKey(absl::string_view* key) {
  if (!status_.ok()) return false;
  Frame& f = frames_[depth_ - 1];
  SkipSpace();
  if (p_ < end_ && *p_ == '}') {
    ++p_;
    --depth_;
    return false;
  }
  if (!f.first) {
    if (p_ >= end_ || *p_ != ',') return Unexpected("an object - expected ',' or '}'; found");
    ++p_;
    SkipSpace();
  }
  f.first = false;
  if (p_ >= end_ || *p_ != '"') return Unexpected("an object key - expected a string; found");
  absl::string_view k;
  bool escaped = false;
  if (!LexString(&k, &escaped)) return false;
  if (escaped) {
    escaped_keys_.emplace_back(k);
    k = escaped_keys_.back();
  }
  SkipSpace();
  if (p_ >= end_ || *p_ != ':') return Unexpected("an object - expected ':'; found");
  ++p_;
  f.key = k;
  if (f.kept && !AddKey(f, k)) return false;
  *key = k;
  return true;
}

bool JsonReader::NextElement() {
  if (!status_.ok()) return false;
  Frame& f = frames_[depth_ - 1];
  SkipSpace();
  if (p_ < end_ && *p_ == ']') {
    ++p_;
    --depth_;
    return false;
  }
  if (!f.first) {
    if (p_ >= end_ || *p_ != ',') return Unexpected("an array - expected ',' or ']'; found");
    ++p_;
  }
  f.first = false;
  return true;
}

bool JsonReader::CountElement() {
  Frame& f = frames_[depth_ - 1];
  if (++f.count > limits_.max_array_length) {
    return Fail(absl::StrCat("the array at ", PathText(depth_ - 1), " has more than ", limits_.max_array_length,
                             " elements"));
  }
  return true;
}

bool JsonReader::LexString(absl::string_view* out, bool* escaped) {
  const char* open = p_;
  const char* start = p_ + 1;
  const char* q = start;
  std::string* dst = nullptr;  // set once an escape is seen
  const char* copied = start;  // text before this is in *dst
  while (true) {
    if (q >= end_) return SyntaxError(end_, "while parsing a string - missing closing quote", open);
    const unsigned char c = static_cast<unsigned char>(*q);
    if (c == '"') break;
    if (c == '\\') {
      if (dst == nullptr) {
        dst = &scratch_;
        dst->clear();
      }
      dst->append(copied, q);
      if (q + 1 >= end_) return SyntaxError(end_, "while parsing a string - missing closing quote", open);
      const char e = q[1];
      const char* simple = "\"\\/bfnrt";
      const char* decoded = "\"\\/\b\f\n\r\t";
      if (const char* s = std::char_traits<char>::find(simple, 8, e)) {
        dst->push_back(decoded[s - simple]);
        q += 2;
      } else if (e == 'u') {
        int cp = Hex4(q + 2, end_);
        if (cp < 0) return SyntaxError(q + 1, "while parsing a string - '\\u' must be followed by 4 hex digits", open);
        const char* next = q + 6;
        if (cp >= 0xDC00 && cp <= 0xDFFF) {
          return SyntaxError(q + 5, "while parsing a string - a low surrogate must follow a high one", open);
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          const int low = next + 1 < end_ && next[0] == '\\' && next[1] == 'u' ? Hex4(next + 2, end_) : -1;
          if (low < 0xDC00 || low > 0xDFFF) {
            return SyntaxError(std::min(next, end_ - 1),
                               "while parsing a string - a high surrogate must be followed by a low one", open);
          }
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          next += 6;
        }
        AppendUtf8(static_cast<uint32_t>(cp), dst);
        q = next;
      } else {
        return SyntaxError(q + 1, "while parsing a string - invalid escape", open);
      }
      copied = q;
      continue;
    }
    if (c < 0x20) {
      return SyntaxError(q, absl::StrFormat("while parsing a string - control character U+%04X must be escaped", c),
                         open);
    }
    if (c < 0x80) {
      ++q;
      continue;
    }
    const char* bad = nullptr;
    const size_t n = Utf8Length(q, end_, &bad);
    if (n == 0) return SyntaxError(std::min(bad, end_ - 1), "while parsing a string - invalid UTF-8", open);
    q += n;
  }
  if (dst != nullptr) {
    dst->append(copied, q);
    *out = *dst;
  } else {
    *out = absl::string_view(start, q - start);
  }
  if (escaped != nullptr) *escaped = dst != nullptr;
  p_ = q + 1;
  return true;
}

bool JsonReader::ReadString(absl::string_view* out) {
  if (!status_.ok()) return false;
  SkipSpace();
  if (p_ >= end_ || *p_ != '"') return Unexpected("a value - expected a string; found");
  return LexString(out, nullptr);
}

bool JsonReader::ReadNumber(Number* out) {
  if (!status_.ok()) return false;
  SkipSpace();
  const char* s = p_;
  const char* q = p_;
  const bool negative = q < end_ && *q == '-';
  if (negative) ++q;
  if (q >= end_ || !IsDigit(*q)) {
    if (!negative) return Unexpected("a value - expected a number; found");
    return SyntaxError(std::min(q, end_ - 1), "while parsing a number - expected a digit after '-'", s);
  }
  const char* digits = q;
  if (*q == '0') {
    ++q;
  } else {
    while (q < end_ && IsDigit(*q)) ++q;
  }
  const char* digits_end = q;
  bool integral = true;
  if (q < end_ && *q == '.') {
    ++q;
    if (q >= end_ || !IsDigit(*q)) {
      return SyntaxError(std::min(q, end_ - 1), "while parsing a number - expected a digit after '.'", s);
    }
    while (q < end_ && IsDigit(*q)) ++q;
    integral = false;
  }
  if (q < end_ && (*q == 'e' || *q == 'E')) {
    ++q;
    if (q < end_ && (*q == '+' || *q == '-')) ++q;
    if (q >= end_ || !IsDigit(*q)) {
      return SyntaxError(std::min(q, end_ - 1), "while parsing a number - expected a digit in the exponent", s);
    }
    while (q < end_ && IsDigit(*q)) ++q;
    integral = false;
  }
  p_ = q;
  out->kind = Number::kFloat;
  if (!integral) return true;
  uint64_t magnitude = 0;
  for (const char* d = digits; d < digits_end; ++d) {
    const uint64_t digit = static_cast<uint64_t>(*d - '0');
    if (magnitude > (UINT64_MAX - digit) / 10) return true;  // too large: a float, as nlohmann reads it
    magnitude = magnitude * 10 + digit;
  }
  if (!negative) {
    out->kind = Number::kUint;
    out->u = magnitude;
  } else if (magnitude <= uint64_t{1} << 63) {
    out->kind = Number::kInt;
    out->i = magnitude == uint64_t{1} << 63 ? INT64_MIN : -static_cast<int64_t>(magnitude);
  }
  return true;
}

bool JsonReader::LexLiteral(absl::string_view word) {
  if (static_cast<size_t>(end_ - p_) >= word.size() && absl::string_view(p_, word.size()) == word) {
    p_ += word.size();
    return true;
  }
  return Unexpected("a value");
}

bool JsonReader::ReadBool(bool* out) {
  if (!status_.ok()) return false;
  SkipSpace();
  if (p_ < end_ && *p_ == 't') {
    *out = true;
    return LexLiteral("true");
  }
  if (p_ < end_ && *p_ == 'f') {
    *out = false;
    return LexLiteral("false");
  }
  return Unexpected("a value - expected a boolean; found");
}

bool JsonReader::ReadNull() {
  if (!status_.ok()) return false;
  SkipSpace();
  if (p_ < end_ && *p_ == 'n') return LexLiteral("null");
  return Unexpected("a value - expected null; found");
}

bool JsonReader::Skip(bool kept) {
  Type type;
  if (!Peek(&type)) return false;
  switch (type) {
    case Type::kObject: {
      if (!BeginObject(kept)) return false;
      absl::string_view key;
      while (NextKey(&key)) {
        const bool keep = kept && limits_.keep_nested != nullptr && limits_.keep_nested(key);
        if (!Skip(keep)) return false;
      }
      return ok();
    }
    case Type::kArray: {
      if (!BeginArray(kept)) return false;
      while (NextElement()) {
        if (kept && !CountElement()) return false;
        if (!Skip(kept)) return false;
      }
      return ok();
    }
    case Type::kString: {
      absl::string_view s;
      return ReadString(&s);
    }
    case Type::kNumber: {
      Number n;
      return ReadNumber(&n);
    }
    case Type::kBool: {
      bool b;
      return ReadBool(&b);
    }
    case Type::kNull:
      return ReadNull();
  }
  return false;
}

bool JsonReader::End() {
  if (!status_.ok()) return false;
  SkipSpace();
  if (p_ < end_) return SyntaxError(p_, "while parsing the end - expected the end of the input", p_);
  return true;
}

void AppendJsonString(std::string* out, absl::string_view text) {
  out->push_back('"');
  size_t plain = 0;  // start of the run not yet appended
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out->append(text.data() + plain, i - plain);
    plain = i + 1;
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      default: absl::StrAppend(out, absl::StrFormat("\\u%04x", c));
    }
  }
  out->append(text.data() + plain, text.size() - plain);
  out->push_back('"');
}

}  // namespace shardlight::sharded::checkpoint
