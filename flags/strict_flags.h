// Command-line parsing for shardlight's binaries with the usage-error exit code.
//
// absl::ParseCommandLine exits 1 on a malformed value or an unknown flag; our
// binaries promise exit code 2 for bad usage (1 means the job itself failed).
// ParseFlagsOrExit checks every "--name=value" first, reports the bad one by
// name, exits 2, and only then hands argv to Abseil.
#ifndef SHARDLIGHT_FLAGS_STRICT_FLAGS_H_
#define SHARDLIGHT_FLAGS_STRICT_FLAGS_H_

#include <string>
#include <vector>

namespace shardlight::tools::flags {

// Returns the positional arguments (argv[0] first), as absl::ParseCommandLine.
std::vector<char*> ParseFlagsOrExit(int argc, char** argv);

// For binaries that take flags only: as ParseFlagsOrExit, and a positional
// word (a stray "steps=3", a flag missing its dashes) exits 2 naming it.
void ParseOnlyFlagsOrExit(int argc, char** argv);

// Exposed for tests: the error for one argument, or "" when it is acceptable.
std::string CheckFlagArgument(const std::string& arg);

}  // namespace shardlight::tools::flags

#endif  // SHARDLIGHT_FLAGS_STRICT_FLAGS_H_
