// ckpt: inspect, verify and consolidate shardlight checkpoints.
//
//   bazel run //tools/ckpt -- inspect DIR
//   bazel run //tools/ckpt -- verify DIR
//   bazel run //tools/ckpt -- [--buffer_mib=N] [--progress=auto|always|never] consolidate DIR OUT
//
// Exit codes: 0 success, 1 a bad or unreadable checkpoint, 2 bad usage.
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "tools/flags/strict_flags.h"
#include "tools/ckpt/ckpt_commands.h"

ABSL_FLAG(int, buffer_mib, 64, "consolidate: MiB of the window full tensors are assembled in (1..4096)");
ABSL_FLAG(std::string, progress, "auto", "consolidate: progress lines on stderr: auto (outputs >= 256 MiB), always, never");

namespace {

constexpr char kUsage[] =
    "usage: ckpt [flags] inspect DIR | verify DIR | consolidate DIR OUT\n"
    "  inspect      a table of the checkpoint's keys, shapes, dtypes, shard counts and coverage\n"
    "  verify       checks every shard's checksums; exits 1 on any failure\n"
    "  consolidate  writes every tensor, whole, into one safetensors file OUT (bounded memory)";

int UsageError(const std::string& message) {
  std::cerr << "ckpt: " << message << "\n" << kUsage << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> args = shardlight::tools::flags::ParseFlagsOrExit(argc, argv);
  const int buffer_mib = absl::GetFlag(FLAGS_buffer_mib);
  if (buffer_mib < 1 || buffer_mib > 4096) return UsageError("--buffer_mib must be in [1, 4096]");
  shardlight::tools::ckpt::ConsolidateOptions options;
  options.buffer_bytes = static_cast<int64_t>(buffer_mib) << 20;
  const std::string progress = absl::GetFlag(FLAGS_progress);
  if (progress == "auto") {
    options.progress = shardlight::tools::ckpt::Progress::kAuto;
  } else if (progress == "always") {
    options.progress = shardlight::tools::ckpt::Progress::kAlways;
  } else if (progress == "never") {
    options.progress = shardlight::tools::ckpt::Progress::kNever;
  } else {
    return UsageError("--progress must be auto, always or never, not '" + progress + "'");
  }
  if (args.size() < 2) return UsageError("no command given");
  const std::string command = args[1];
  const size_t operands = args.size() - 2;
  if (command == "inspect" || command == "verify") {
    if (operands != 1) return UsageError(command + " takes one operand, DIR");
    return command == "inspect" ? shardlight::tools::ckpt::Inspect(args[2], std::cout, std::cerr)
                                : shardlight::tools::ckpt::Verify(args[2], std::cout, std::cerr);
  }
  if (command == "consolidate") {
    if (operands != 2) return UsageError("consolidate takes two operands, DIR and OUT");
    return shardlight::tools::ckpt::Consolidate(args[2], args[3], options, std::cout, std::cerr);
  }
  return UsageError("unknown command '" + command + "'");
}
