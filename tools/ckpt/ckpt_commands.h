// The ckpt tool's commands, as functions over streams so they are testable
// without a process: inspect (a table of the index), verify (every checksum
// of every shard), consolidate (one safetensors file of full tensors,
// streamed through a bounded buffer). Each returns the process exit code:
// 0 success, 1 a bad or unreadable checkpoint.
#ifndef SHARDLIGHT_TOOLS_CKPT_CKPT_COMMANDS_H_
#define SHARDLIGHT_TOOLS_CKPT_CKPT_COMMANDS_H_

#include <cstdint>
#include <ostream>
#include <string>

namespace shardlight::tools::ckpt {

int Inspect(const std::string& dir, std::ostream& out, std::ostream& err);

int Verify(const std::string& dir, std::ostream& out, std::ostream& err);

enum class Progress { kAuto, kAlways, kNever };

struct ConsolidateOptions {
  // The window one tile of a full tensor is assembled in; with the reader's
  // own buffer, the bound on the command's extra memory.
  int64_t buffer_bytes = int64_t{64} << 20;
  // kAuto prints progress lines for outputs of at least 256 MiB.
  Progress progress = Progress::kAuto;
};

// Writes OUT atomically (a temporary name, fsync, rename); on failure OUT is
// left as it was.
int Consolidate(const std::string& dir, const std::string& out_path, const ConsolidateOptions& options,
                std::ostream& out, std::ostream& err);

// "1.5 GiB", "240 B".
std::string HumanBytes(int64_t bytes);

}  // namespace shardlight::tools::ckpt

#endif  // SHARDLIGHT_TOOLS_CKPT_CKPT_COMMANDS_H_
