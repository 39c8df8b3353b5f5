#include "sharded/checkpoint/format/names.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardlight::sharded::checkpoint {

std::string Quote(absl::string_view text) {
  constexpr size_t kMax = 200;
  std::string out = "'";
  for (size_t i = 0; i < text.size() && i < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", c));
    }
  }
  if (text.size() > kMax) out += "...";
  out += "'";
  return out;
}

bool IsValidUtf8(absl::string_view text, size_t* bad_offset) {
  size_t i = 0;
  const size_t n = text.size();
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  auto continuation = [&](size_t k, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return k < n && byte(k) >= lo && byte(k) <= hi;
  };
  while (i < n) {
    const unsigned char c = byte(i);
    size_t length = 0;
    if (c < 0x80) {
      length = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {  // C0, C1: overlong two-byte forms
      length = continuation(i + 1) ? 2 : 0;
    } else if (c >= 0xE0 && c <= 0xEF) {
      // E0: second byte A0.. (no overlongs); ED: ..9F (no surrogates).
      const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80;
      const unsigned char hi = c == 0xED ? 0x9F : 0xBF;
      length = continuation(i + 1, lo, hi) && continuation(i + 2) ? 3 : 0;
    } else if (c >= 0xF0 && c <= 0xF4) {
      // F0: second byte 90.. (no overlongs); F4: ..8F (at most U+10FFFF).
      const unsigned char lo = c == 0xF0 ? 0x90 : 0x80;
      const unsigned char hi = c == 0xF4 ? 0x8F : 0xBF;
      length = continuation(i + 1, lo, hi) && continuation(i + 2) && continuation(i + 3) ? 4 : 0;
    }  // 80..BF (a lone continuation byte), F5..FF: never valid first bytes
    if (length == 0) {
      if (bad_offset != nullptr) *bad_offset = i;
      return false;
    }
    i += length;
  }
  return true;
}

absl::Status ValidateKey(absl::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("state dict key is empty");
  if (key.size() > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("state dict key ", Quote(key), " is longer than 1024 bytes"));
  }
  // JSON (the index, safetensors headers) holds only UTF-8: a key that is not
  // would fail the save part-way, so it is refused up front.
  if (size_t bad = 0; !IsValidUtf8(key, &bad)) {
    return absl::InvalidArgumentError(
        absl::StrCat("state dict key ", Quote(key), " is not valid UTF-8 (bad byte at offset ", bad, ")"));
  }
  for (char ch : key) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat("state dict key ", Quote(key), " holds a control character"));
    }
    if (c == '/' || c == '\\') {
      return absl::InvalidArgumentError(
          absl::StrCat("state dict key ", Quote(key), " holds a path separator; keys may not name paths"));
    }
  }
  if (absl::StrContains(key, "..")) {
    return absl::InvalidArgumentError(
        absl::StrCat("state dict key ", Quote(key), " holds \"..\"; keys may not name paths"));
  }
  return absl::OkStatus();
}

absl::Status ValidateFileName(absl::string_view name) {
  bool ok = !name.empty() && name.size() <= 255 && name[0] != '.';
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
          c == '-')) {
      ok = false;
    }
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "file name ", Quote(name), " is not a plain name inside the checkpoint directory ([A-Za-z0-9._-], no leading '.')"));
  }
  return absl::OkStatus();
}

}  // namespace shardlight::sharded::checkpoint
