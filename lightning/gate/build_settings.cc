#include "lightning/gate/build_settings.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace shardlight::lightning {
namespace {

constexpr absl::string_view kMarker = "Build settings:";

absl::Status Malformed(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("malformed at::show_config() build settings: ", why));
}

// Length of a KEY at the start of `s` (letters, digits, '_'; not a digit
// first), or 0.
size_t KeyLength(absl::string_view s) {
  size_t n = 0;
  while (n < s.size() && (absl::ascii_isalnum(s[n]) || s[n] == '_')) ++n;
  if (n == 0 || absl::ascii_isdigit(s[0])) return 0;
  return n;
}

// Splits at every ", " that is followed by "KEY=".
std::vector<absl::string_view> SplitEntries(absl::string_view line) {
  std::vector<absl::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i + 1 < line.size(); ++i) {
    if (line[i] != ',' || line[i + 1] != ' ') continue;
    absl::string_view rest = line.substr(i + 2);
    size_t key = KeyLength(rest);
    if (key == 0 || key >= rest.size() || rest[key] != '=') continue;
    out.push_back(line.substr(start, i - start));
    start = i + 2;
  }
  out.push_back(line.substr(start));
  return out;
}

std::optional<bool> ParseBool(absl::string_view value) {
  std::string v = absl::AsciiStrToUpper(value);
  if (v == "ON" || v == "1" || v == "TRUE" || v == "YES") return true;
  if (v == "OFF" || v == "0" || v == "FALSE" || v == "NO") return false;
  return std::nullopt;
}

}  // namespace

std::optional<bool> BuildSettings::Flag(absl::string_view name) const {
  auto it = use_flags.find(std::string(name));
  if (it == use_flags.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> BuildSettings::Entry(absl::string_view key) const {
  auto it = entries.find(std::string(key));
  if (it == entries.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<BuildSettings> ParseBuildSettings(absl::string_view show_config) {
  size_t at = show_config.find(kMarker);
  if (at == absl::string_view::npos) {
    return Malformed(absl::StrCat("no \"", kMarker, "\" line in \"",
                                  absl::CHexEscape(show_config.substr(0, 80)), "\""));
  }
  absl::string_view line = show_config.substr(at + kMarker.size());
  line = line.substr(0, line.find('\n'));
  line = absl::StripAsciiWhitespace(line);
  if (absl::EndsWith(line, ",")) line.remove_suffix(1);  // the library ends the list with ", "
  if (line.empty()) return Malformed("the \"Build settings:\" line is empty");

  BuildSettings settings;
  for (absl::string_view entry : SplitEntries(line)) {
    size_t eq = entry.find('=');
    size_t key_len = KeyLength(entry);
    if (eq == absl::string_view::npos || key_len == 0 || key_len != eq) {
      return Malformed(absl::StrCat("entry \"", absl::CHexEscape(entry), "\" is not KEY=VALUE"));
    }
    std::string key(entry.substr(0, eq));
    std::string value(absl::StripAsciiWhitespace(entry.substr(eq + 1)));
    if (!settings.entries.emplace(key, value).second) {
      return Malformed(absl::StrCat("key ", key, " appears twice"));
    }
    if (absl::StartsWith(key, "USE_")) {
      std::optional<bool> flag = ParseBool(value);
      if (!flag) {
        return Malformed(absl::StrCat(key, "=", absl::CHexEscape(value), " is not ON/OFF/1/0"));
      }
      settings.use_flags[key] = *flag;
    }
  }
  auto version = settings.entries.find("TORCH_VERSION");
  if (version == settings.entries.end()) return Malformed("no TORCH_VERSION= entry");
  absl::StatusOr<TorchVersion> parsed = ParseTorchVersion(version->second);
  if (!parsed.ok()) return Malformed(absl::StrCat("TORCH_VERSION: ", parsed.status().message()));
  settings.torch_version = *std::move(parsed);
  return settings;
}

}  // namespace shardlight::lightning
