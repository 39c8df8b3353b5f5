#include "sharded/checkpoint/names.h"

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

absl::Status ValidateKey(absl::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("state dict key is empty");
  if (key.size() > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("state dict key ", Quote(key), " is longer than 1024 bytes"));
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
