#include "flags/strict_flags.h"

#include <cstdlib>
#include <iostream>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace shardlight::tools::flags {

std::string CheckFlagArgument(const std::string& arg) {
  if (!absl::StartsWith(arg, "-") || arg == "-" || arg == "--") return "";
  std::string body = arg.substr(absl::StartsWith(arg, "--") ? 2 : 1);
  const size_t eq = body.find('=');
  const std::string name = body.substr(0, eq);
  // Abseil's own usage flags (--help, --helpfull, ...) are handled by Abseil.
  if (absl::StartsWith(name, "help") || name == "version" || name == "only_check_args" ||
      name == "flagfile" || name == "fromenv" || name == "tryfromenv" || name == "undefok") {
    return "";
  }
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr && absl::StartsWith(name, "no")) {
    absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
    if (negated != nullptr && negated->IsOfType<bool>() && eq == std::string::npos) return "";
  }
  if (flag == nullptr) return absl::StrCat("unknown flag '--", name, "' (see --help)");
  if (eq == std::string::npos) {
    if (flag->IsOfType<bool>()) return "";
    return absl::StrCat("flag '--", name, "' needs a value: --", name, "=VALUE");
  }
  // Parse into a scratch copy: the flag keeps its value until Abseil sets it.
  const std::string saved = flag->CurrentValue();
  std::string error;
  const bool ok = flag->ParseFrom(body.substr(eq + 1), &error);
  std::string ignored;
  flag->ParseFrom(saved, &ignored);
  if (!ok) {
    return absl::StrCat("bad value '", body.substr(eq + 1), "' for --", name, ": ", error);
  }
  return "";
}

std::vector<char*> ParseFlagsOrExit(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    std::string error = CheckFlagArgument(arg);
    if (!error.empty()) {
      std::cerr << argv[0] << ": " << error << "\n";
      std::exit(2);
    }
  }
  return absl::ParseCommandLine(argc, argv);
}

void ParseOnlyFlagsOrExit(int argc, char** argv) {
  const std::vector<char*> positional = ParseFlagsOrExit(argc, argv);
  if (positional.size() > 1) {
    std::cerr << argv[0] << ": unexpected argument '" << absl::CHexEscape(positional[1])
              << "': this program takes --flags only (see --help)\n";
    std::exit(2);
  }
}

}  // namespace shardlight::tools::flags
