#include "sharded/plain_value.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sharded/utf8.h"

namespace shardlight::sharded {
namespace {

// The code point of the UTF-8 sequence at text[*i] (advancing *i), or -1 when
// it is not valid (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF).
int32_t NextCodePoint(absl::string_view text, size_t* i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t b0 = byte(*i);
  int n;
  int32_t cp;
  if (b0 < 0x80) {
    ++*i;
    return b0;
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 1, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 2, cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 3, cp = b0 & 0x07;
  } else {
    return -1;
  }
  if (*i + static_cast<size_t>(n) >= text.size()) return -1;  // truncated
  for (int k = 1; k <= n; ++k) {
    const uint8_t b = byte(*i + static_cast<size_t>(k));
    if ((b & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (b & 0x3F);
  }
  if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return -1;
  }
  *i += static_cast<size_t>(n) + 1;
  return cp;
}

// Python's str.isprintable for the characters that matter in practice:
// controls, the separators and format characters (Unicode categories Cc,
// Cf, Zl, Zp, Zs but for the space), private use and noncharacters.
// (Python also escapes unassigned code points; without its Unicode tables
// they are shown as themselves.)
bool Printable(int32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
  if (cp < 0x600) return true;
  if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x180E || cp == 0x1680) {
    return false;
  }
  if ((cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F) ||
      cp == 0x3000) {
    return false;
  }
  if ((cp >= 0xE000 && cp <= 0xF8FF) || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB) || cp >= 0xFFFE) {
    return cp < 0x10000 ? false : (cp != 0xE0001 && !(cp >= 0xE0020 && cp <= 0xE007F) && cp < 0xF0000 &&
                                   (cp & 0xFFFE) != 0xFFFE);
  }
  return true;
}

void AppendQuoted(absl::string_view text, bool bytes, std::string* out) {
  const bool has_single = text.find('\'') != absl::string_view::npos;
  const bool has_double = text.find('"') != absl::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  if (bytes) out->push_back('b');
  out->push_back(quote);
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == quote || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
      ++i;
      continue;
    }
    if (c == '\n' || c == '\r' || c == '\t') {
      out->push_back('\\');
      out->push_back(c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
      ++i;
      continue;
    }
    const uint8_t u = static_cast<uint8_t>(c);
    if (bytes || u < 0x80) {
      if (u < 0x20 || u >= 0x7F) {
        absl::StrAppendFormat(out, "\\x%02x", u);
      } else {
        out->push_back(c);
      }
      ++i;
      continue;
    }
    const size_t start = i;
    const int32_t cp = NextCodePoint(text, &i);
    if (cp < 0) {  // not UTF-8 (Validate refuses it): shown byte by byte
      absl::StrAppendFormat(out, "\\x%02x", u);
      i = start + 1;
    } else if (Printable(cp)) {
      out->append(text.data() + start, i - start);
    } else if (cp <= 0xFF) {
      absl::StrAppendFormat(out, "\\x%02x", cp);
    } else if (cp <= 0xFFFF) {
      absl::StrAppendFormat(out, "\\u%04x", cp);
    } else {
      absl::StrAppendFormat(out, "\\U%08x", cp);
    }
  }
  out->push_back(quote);
}

bool IsUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    if (NextCodePoint(text, &i) < 0) return false;
  }
  return true;
}

absl::Status ValidateAt(const PlainValue& v, int depth, bool as_key) {
  if (depth > kMaxPlainValueDepth) {
    return absl::InvalidArgumentError(absl::StrCat("nested deeper than ", kMaxPlainValueDepth, " levels"));
  }
  switch (v.kind()) {
    case PlainValue::Kind::kStr:
      if (!IsUtf8(v.text())) return absl::InvalidArgumentError("a str that is not valid UTF-8 (bytes hold bytes)");
      return absl::OkStatus();
    case PlainValue::Kind::kList:
    case PlainValue::Kind::kDict:
      if (as_key) {
        return absl::InvalidArgumentError(
            absl::StrCat("a dict key is a ", PlainKindName(v.kind()), " (keys must be hashable)"));
      }
      [[fallthrough]];
    case PlainValue::Kind::kTuple:
      for (size_t i = 0; i < v.items().size(); ++i) {
        const bool key = as_key || (v.kind() == PlainValue::Kind::kDict && i % 2 == 0);
        if (absl::Status s = ValidateAt(v.items()[i], depth + 1, key); !s.ok()) return s;
      }
      return absl::OkStatus();
    default:
      return absl::OkStatus();
  }
}

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  absl::StatusOr<PlainValue> ParseAll() {
    PlainValue v;
    if (absl::Status s = Parse(0, &v); !s.ok()) return s;
    SkipSpaces();
    if (pos_ != text_.size()) return Error("text after the value");
    if (absl::Status s = ValidateAt(v, 0, false); !s.ok()) return s;
    return v;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("not a plain value at byte ", pos_, ": ", what));
  }
  void SkipSpaces() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  bool Consume(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  absl::Status Parse(int depth, PlainValue* out) {
    if (depth > kMaxPlainValueDepth) return Error(absl::StrCat("nested deeper than ", kMaxPlainValueDepth, " levels"));
    SkipSpaces();
    if (pos_ >= text_.size()) return Error("the text ends where a value should be");
    const char c = text_[pos_];
    if (Consume("None")) return (*out = PlainValue::None(), absl::OkStatus());
    if (Consume("True")) return (*out = PlainValue::Bool(true), absl::OkStatus());
    if (Consume("False")) return (*out = PlainValue::Bool(false), absl::OkStatus());
    if (c == '\'' || c == '"') return ParseQuoted(false, out);
    if (c == 'b' && pos_ + 1 < text_.size() && (text_[pos_ + 1] == '\'' || text_[pos_ + 1] == '"')) {
      ++pos_;
      return ParseQuoted(true, out);
    }
    if (c == '[' || c == '(' || c == '{') return ParseContainer(depth, out);
    return ParseNumber(out);
  }

  absl::Status ParseNumber(PlainValue* out) {
    if (Consume("nan")) return (*out = PlainValue::Float(std::nan("")), absl::OkStatus());
    if (Consume("inf")) return (*out = PlainValue::Float(INFINITY), absl::OkStatus());
    if (Consume("-inf")) return (*out = PlainValue::Float(-INFINITY), absl::OkStatus());
    const size_t start = pos_;
    bool is_float = false;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    const size_t digits = pos_;
    while (pos_ < text_.size()) {
      const char d = text_[pos_];
      if (d >= '0' && d <= '9') {
        ++pos_;
      } else if (d == '.' || d == 'e' || d == 'E' || ((d == '+' || d == '-') && is_float &&
                                                     (text_[pos_ - 1] == 'e' || text_[pos_ - 1] == 'E'))) {
        is_float = true;
        ++pos_;
      } else {
        break;
      }
    }
    if (pos_ == digits || !(text_[digits] >= '0' && text_[digits] <= '9')) {
      pos_ = start;
      return Error("not None, True, False, a number, a quoted text or a bracket");
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (is_float) {
      double v = 0;
      auto [end, ec] = std::from_chars(first, last, v);
      if (ec != std::errc() || end != last) {
        pos_ = start;
        return Error("a malformed float");
      }
      *out = PlainValue::Float(v);
      return absl::OkStatus();
    }
    int64_t v = 0;
    auto [end, ec] = std::from_chars(first, last, v);
    if (ec != std::errc() || end != last) {
      pos_ = start;
      return Error("an int outside [-2^63, 2^63)");
    }
    *out = PlainValue::Int(v);
    return absl::OkStatus();
  }

  absl::Status Hex(int digits, int32_t* cp) {
    *cp = 0;
    for (int k = 0; k < digits; ++k, ++pos_) {
      if (pos_ >= text_.size()) return Error("a truncated escape");
      const char h = text_[pos_];
      int v;
      if (h >= '0' && h <= '9') {
        v = h - '0';
      } else if (h >= 'a' && h <= 'f') {
        v = h - 'a' + 10;
      } else if (h >= 'A' && h <= 'F') {
        v = h - 'A' + 10;
      } else {
        return Error("a bad hex digit in an escape");
      }
      *cp = (*cp << 4) | v;
    }
    return absl::OkStatus();
  }

  absl::Status ParseQuoted(bool bytes, PlainValue* out) {
    const char quote = text_[pos_++];
    std::string value;
    while (true) {
      if (pos_ >= text_.size()) return Error("an unterminated quoted text");
      const char c = text_[pos_];
      if (c == quote) {
        ++pos_;
        break;
      }
      if (c != '\\') {
        if (bytes && (static_cast<uint8_t>(c) < 0x20 || static_cast<uint8_t>(c) >= 0x7F)) {
          return Error("a bytes literal holds a byte that is not printable ASCII");
        }
        value.push_back(c);
        ++pos_;
        continue;
      }
      if (++pos_ >= text_.size()) return Error("a truncated escape");
      const char e = text_[pos_++];
      int32_t cp = 0;
      switch (e) {
        case '\\': case '\'': case '"': value.push_back(e); continue;
        case 'n': value.push_back('\n'); continue;
        case 'r': value.push_back('\r'); continue;
        case 't': value.push_back('\t'); continue;
        case 'x': if (absl::Status s = Hex(2, &cp); !s.ok()) return s; break;
        case 'u': if (bytes) return Error("\\u in a bytes literal"); if (absl::Status s = Hex(4, &cp); !s.ok()) return s; break;
        case 'U': if (bytes) return Error("\\U in a bytes literal"); if (absl::Status s = Hex(8, &cp); !s.ok()) return s; break;
        default: --pos_; return Error("an unknown escape");
      }
      if (bytes) {
        value.push_back(static_cast<char>(cp));
      } else if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return Error("an escape of a surrogate or of no code point");
      } else {
        AppendUtf8(static_cast<uint32_t>(cp), &value);
      }
    }
    *out = bytes ? PlainValue::Bytes(std::move(value)) : PlainValue::Str(std::move(value));
    return absl::OkStatus();
  }

  absl::Status ParseContainer(int depth, PlainValue* out) {
    const char open = text_[pos_++];
    const char close = open == '[' ? ']' : open == '(' ? ')' : '}';
    std::vector<PlainValue> items;
    bool trailing_comma = false;
    SkipSpaces();
    while (true) {
      SkipSpaces();
      if (pos_ < text_.size() && text_[pos_] == close) {
        ++pos_;
        break;
      }
      if (!items.empty() && !trailing_comma) return Error(absl::StrCat("expected ',' or '", std::string(1, close), "'"));
      PlainValue item;
      if (absl::Status s = Parse(depth + 1, &item); !s.ok()) return s;
      items.push_back(std::move(item));
      SkipSpaces();
      if (open == '{') {
        if (pos_ >= text_.size() || text_[pos_] != ':') return Error("expected ':' after a dict key");
        ++pos_;
        PlainValue value;
        if (absl::Status s = Parse(depth + 1, &value); !s.ok()) return s;
        items.push_back(std::move(value));
        SkipSpaces();
      }
      trailing_comma = pos_ < text_.size() && text_[pos_] == ',';
      if (trailing_comma) ++pos_;
    }
    if (open == '(' && items.size() == 1 && !trailing_comma) {
      return Error("a parenthesized value without a comma (a 1-tuple is written (x,))");
    }
    *out = open == '[' ? PlainValue::List(std::move(items))
                       : open == '(' ? PlainValue::Tuple(std::move(items)) : PlainValue::Dict(std::move(items));
    return absl::OkStatus();
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

PlainValue PlainValue::Bool(bool v) {
  PlainValue p;
  p.kind_ = Kind::kBool;
  p.int_ = v ? 1 : 0;
  return p;
}

PlainValue PlainValue::Int(int64_t v) {
  PlainValue p;
  p.kind_ = Kind::kInt;
  p.int_ = v;
  return p;
}

PlainValue PlainValue::Float(double v) {
  PlainValue p;
  p.kind_ = Kind::kFloat;
  p.real_ = v;
  return p;
}

PlainValue PlainValue::Str(std::string utf8) {
  PlainValue p;
  p.kind_ = Kind::kStr;
  p.text_ = std::move(utf8);
  return p;
}

PlainValue PlainValue::Bytes(std::string bytes) {
  PlainValue p;
  p.kind_ = Kind::kBytes;
  p.text_ = std::move(bytes);
  return p;
}

PlainValue PlainValue::List(std::vector<PlainValue> items) {
  PlainValue p;
  p.kind_ = Kind::kList;
  p.items_ = std::move(items);
  return p;
}

PlainValue PlainValue::Tuple(std::vector<PlainValue> items) {
  PlainValue p;
  p.kind_ = Kind::kTuple;
  p.items_ = std::move(items);
  return p;
}

PlainValue PlainValue::Dict(std::vector<PlainValue> keys_and_values) {
  PlainValue p;
  p.kind_ = Kind::kDict;
  p.items_ = std::move(keys_and_values);
  if (p.items_.size() % 2 != 0) p.items_.pop_back();
  return p;
}

const PlainValue* PlainValue::Find(absl::string_view key) const {
  if (kind_ != Kind::kDict) return nullptr;
  for (size_t i = 0; i + 1 < items_.size(); i += 2) {
    if (items_[i].kind_ == Kind::kStr && items_[i].text_ == key) return &items_[i + 1];
  }
  return nullptr;
}

bool PlainValue::operator==(const PlainValue& o) const {
  if (kind_ != o.kind_ || int_ != o.int_ || text_ != o.text_ || items_ != o.items_) return false;
  return std::memcmp(&real_, &o.real_, sizeof real_) == 0;
}

const char* PlainKindName(PlainValue::Kind kind) {
  switch (kind) {
    case PlainValue::Kind::kNone: return "NoneType";
    case PlainValue::Kind::kBool: return "bool";
    case PlainValue::Kind::kInt: return "int";
    case PlainValue::Kind::kFloat: return "float";
    case PlainValue::Kind::kStr: return "str";
    case PlainValue::Kind::kBytes: return "bytes";
    case PlainValue::Kind::kList: return "list";
    case PlainValue::Kind::kTuple: return "tuple";
    case PlainValue::Kind::kDict: return "dict";
  }
  return "?";
}

std::string FloatRepr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // The shortest round-tripping digits, in scientific form: d[.ddd]e[+-]x.
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v, std::chars_format::scientific);
  const std::string sci(buffer, ec == std::errc() ? end : buffer);
  const bool negative = !sci.empty() && sci[0] == '-';
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int exp = std::atoi(sci.c_str() + e + 1);
  std::string out = negative ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else {
      std::string whole = digits.substr(0, std::min(digits.size(), static_cast<size_t>(exp) + 1));
      whole.resize(static_cast<size_t>(exp) + 1, '0');
      const std::string frac = digits.size() > whole.size() ? digits.substr(whole.size()) : "0";
      out += whole + "." + frac;
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  return out + absl::StrFormat("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
}

void PlainValue::AppendRepr(std::string* out) const {
  switch (kind_) {
    case Kind::kNone: out->append("None"); return;
    case Kind::kBool: out->append(int_ ? "True" : "False"); return;
    case Kind::kInt: absl::StrAppend(out, int_); return;
    case Kind::kFloat: out->append(FloatRepr(real_)); return;
    case Kind::kStr:
    case Kind::kBytes: AppendQuoted(text_, kind_ == Kind::kBytes, out); return;
    case Kind::kList:
    case Kind::kTuple: {
      const bool list = kind_ == Kind::kList;
      out->push_back(list ? '[' : '(');
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i) out->append(", ");
        items_[i].AppendRepr(out);
      }
      out->append(list ? "]" : items_.size() == 1 ? ",)" : ")");
      return;
    }
    case Kind::kDict:
      out->push_back('{');
      for (size_t i = 0; i + 1 < items_.size(); i += 2) {
        if (i) out->append(", ");
        items_[i].AppendRepr(out);
        out->append(": ");
        items_[i + 1].AppendRepr(out);
      }
      out->push_back('}');
      return;
  }
}

std::string PlainValue::Repr() const {
  std::string out;
  AppendRepr(&out);
  return out;
}

absl::Status PlainValue::Validate() const { return ValidateAt(*this, 0, false); }

absl::StatusOr<PlainValue> ParsePlainValue(absl::string_view text) { return Parser(text).ParseAll(); }

}  // namespace shardlight::sharded
