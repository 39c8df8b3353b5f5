// ckpt: inspect, verify, convert and reshard checkpoints (shardlight's, and PyTorch DCP directories).
//
//   bazel run //tools/ckpt -- inspect DIR
//   bazel run //tools/ckpt -- verify DIR
//   bazel run //tools/ckpt -- [--buffer_mib=N] [--progress=auto|always|never] consolidate DIR OUT
//   bazel run //tools/ckpt -- --world_size=N [--shard=KEY=DIM,...] [--layout=FILE] [--prefix=P]
//                             [--optimizer_states] [--global_step] import IN.pt OUT_DIR
//     (IN a PyTorch DCP directory: resharded into OUT_DIR, --world_size and --shard only)
//   bazel run //tools/ckpt -- [--lightning] [--prefix=P] export DIR OUT.pt
//   bazel run //tools/ckpt -- --format=dcp [--world_size=N] [--shard=KEY=DIM,...] [--layout=FILE]
//                             [--prefix=P] [--rename=OLD=NEW,...] export IN OUT_DIR
//     (IN a checkpoint, a PyTorch DCP directory or a torch.save file: OUT_DIR a DCP directory)
//   bazel run //tools/ckpt -- --world_size=M [--shard=KEY=DIM,...] [--layout=FILE] reshard IN OUT
//   bazel run //tools/ckpt -- [--buffer_mib=N] diff A B
//
// Every DIR, IN, A and B may be a checkpoint directory or a checkpoint root
// (`latest` and step-<N>/): a root resolves to its newest good step, which is
// named on stderr (checkpoint_input.h).
//
// Exit codes: 0 success (diff: equal), 1 a bad or unreadable checkpoint (diff:
// or different), 2 bad usage.
#include <sys/stat.h>

#include <deque>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "sharded/checkpoint/interop/dcp/dcp_checkpoint.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "flags/strict_flags.h"
#include "tools/ckpt/checkpoint_input.h"
#include "tools/ckpt/ckpt_commands.h"
#include "tools/ckpt/dcp_export_command.h"
#include "tools/ckpt/interop_commands.h"
#include "tools/ckpt/layout_commands.h"
#include "tools/ckpt/upload_commands.h"

ABSL_FLAG(int, buffer_mib, 64, "consolidate, diff: MiB of the window full tensors are assembled in (1..4096)");
ABSL_FLAG(std::string, progress, "auto", "consolidate: progress lines on stderr: auto (outputs >= 256 MiB), always, never");

ABSL_FLAG(std::string, format, "torch", "export: torch (a torch.save file) or dcp (a PyTorch distributed checkpoint directory)");
ABSL_FLAG(std::vector<std::string>, rename, {}, "export --format=dcp: OLD=NEW[,OLD=NEW...]: a key beginning with OLD gets NEW instead (first match, after --prefix)");
ABSL_FLAG(int, world_size, 1, "import, reshard, export --format=dcp: ranks the checkpoint is written for (1..65536)");
ABSL_FLAG(std::vector<std::string>, shard, {}, "import, reshard, export --format=dcp: KEY=DIM[,KEY=DIM...]: chunk KEY along DIM over the ranks");
ABSL_FLAG(std::string, layout, "", "import, reshard: a file of KEY=DIM lines ('#' comments), as --shard");
ABSL_FLAG(std::string, prefix, "", "import: prepended to every key; export: only keys under it, without it");
ABSL_FLAG(bool, optimizer_states, false, "import (Lightning): accepted and unneeded: import carries every entry (optimizer_states among them)");
ABSL_FLAG(bool, global_step, false, "import (Lightning): also write global_step as an int value at --global_step_key");
ABSL_FLAG(std::string, global_step_key, "global_step", "import: the key global_step goes to (trainer.step for the Trainer)");
ABSL_FLAG(bool, abort, false, "uploads: abort each unfinished upload listed");
ABSL_FLAG(bool, lightning, false, "export: a Lightning .ckpt {state_dict, global_step, ...} Lightning 2.x resumes from (step from trainer.step or global_step)");

namespace {

constexpr char kUsage[] =
    "usage: ckpt [flags] inspect DIR | verify DIR | consolidate DIR OUT | reshard IN OUT | diff A B\n"
    "                    | import IN.pt OUT_DIR | export DIR OUT.pt | uploads s3://BUCKET/PREFIX\n"
    "  inspect      a table of the checkpoint's keys, shapes, dtypes, shard counts and coverage\n"
    "  verify       checks every shard's checksums; exits 1 on any failure\n"
    "  consolidate  writes every tensor, whole, into one safetensors file OUT (bounded memory)\n"
    "  reshard      rewrites IN for --world_size ranks into OUT (each tensor chunked on its saved dim, or --shard/--layout)\n"
    "  diff         compares A and B tensor by tensor across layouts, then value by value; exits 0 if\n"
    "               bit-equal, 1 if not\n"
    "  import       a torch.save state dict or Lightning .ckpt into a checkpoint (restricted reader, no code run)\n"
    "  export       the checkpoint as a file Python's torch.load opens (--lightning: a Lightning .ckpt);\n"
    "               --format=dcp: IN (a checkpoint, DCP directory or torch.save file) as a DCP directory for --world_size ranks\n"
    "  uploads      the unfinished S3 multipart uploads under the location (a crashed save's); --abort aborts them";

// --shard, then --layout, into `dims` (import and reshard).
absl::Status ShardDims(std::map<std::string, int64_t>* dims) {
  absl::Status s = shardlight::sharded::checkpoint::pytorch::ParseShardSpecs(absl::GetFlag(FLAGS_shard), dims);
  if (s.ok() && !absl::GetFlag(FLAGS_layout).empty()) {
    s = shardlight::sharded::checkpoint::pytorch::ReadShardLayoutFile(absl::GetFlag(FLAGS_layout), dims);
  }
  return s;
}

bool IsFile(const char* path) {
  struct stat st;
  return ::stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int UsageError(const std::string& message) {
  std::cerr << "ckpt: " << message << "\n" << kUsage << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::deque<std::string> resolved_inputs;  // what args point into
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
  // The checkpoints a command reads (its first operand; both for diff),
  // once the operands are right: a root resolves to one of its steps.
  const bool one_operand = command == "inspect" || command == "verify";
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "torch" && format != "dcp") return UsageError("--format must be torch or dcp, not '" + format + "'");
  if (command != "export" && (format != "torch" || !absl::GetFlag(FLAGS_rename).empty())) {
    return UsageError("--format and --rename are export's");
  }
  // export --format=dcp also reads a torch.save file: only a directory is resolved.
  const bool export_dcp = command == "export" && format == "dcp";
  const bool reads = one_operand || command == "consolidate" || command == "reshard" || command == "diff" ||
                     (command == "export" && !(export_dcp && operands == 2 && IsFile(args[2])));
  const size_t inputs = command == "diff" ? 2 : 1;
  for (size_t i = 0; reads && operands == (one_operand ? 1u : 2u) && i < inputs; ++i) {
    auto resolved = shardlight::tools::ckpt::ResolveCheckpointInput(args[2 + i], std::cerr);
    if (!resolved.ok()) {
      std::cerr << "ckpt: " << resolved.status().message() << "\n";
      return 1;
    }
    resolved_inputs.push_back(*resolved);
    args[2 + i] = resolved_inputs.back().data();
  }
  if (command == "inspect" || command == "verify") {
    if (operands != 1) return UsageError(command + " takes one operand, DIR");
    return command == "inspect" ? shardlight::tools::ckpt::Inspect(args[2], std::cout, std::cerr)
                                : shardlight::tools::ckpt::Verify(args[2], std::cout, std::cerr);
  }
  if (command == "consolidate") {
    if (operands != 2) return UsageError("consolidate takes two operands, DIR and OUT");
    return shardlight::tools::ckpt::Consolidate(args[2], args[3], options, std::cout, std::cerr);
  }
  if (command == "reshard" || command == "import") {
    if (operands != 2) return UsageError(command + " takes two operands, IN and OUT");
  }
  if (command == "reshard") {
    shardlight::tools::ckpt::ReshardOptions reshard;
    reshard.world_size = absl::GetFlag(FLAGS_world_size);
    if (reshard.world_size < 1 || reshard.world_size > 65536) return UsageError("--world_size must be in [1, 65536]");
    if (absl::Status s = ShardDims(&reshard.shard_dims); !s.ok()) return UsageError(std::string(s.message()));
    return shardlight::tools::ckpt::Reshard(args[2], args[3], reshard, std::cout, std::cerr);
  }
  if (command == "diff") {
    if (operands != 2) return UsageError("diff takes two operands, A and B");
    shardlight::tools::ckpt::DiffOptions diff;
    diff.buffer_bytes = options.buffer_bytes;
    return shardlight::tools::ckpt::Diff(args[2], args[3], diff, std::cout, std::cerr);
  }
  if (command == "import" &&
      shardlight::sharded::checkpoint::dcp::IsDcpCheckpoint(args[2], shardlight::sharded::checkpoint::DefaultStorage())) {
    // A PyTorch distributed checkpoint: resharded into shardlight's format.
    if (!absl::GetFlag(FLAGS_prefix).empty() || absl::GetFlag(FLAGS_global_step) ||
        absl::GetFlag(FLAGS_optimizer_states)) {
      return UsageError("import of a PyTorch DCP directory takes --world_size and --shard only (its keys stay as saved)");
    }
    shardlight::tools::ckpt::ReshardOptions reshard;
    reshard.world_size = absl::GetFlag(FLAGS_world_size);
    if (reshard.world_size < 1 || reshard.world_size > 65536) return UsageError("--world_size must be in [1, 65536]");
    if (absl::Status s = ShardDims(&reshard.shard_dims); !s.ok()) return UsageError(std::string(s.message()));
    return shardlight::tools::ckpt::Reshard(args[2], args[3], reshard, std::cout, std::cerr);
  }
  if (command == "import") {
    shardlight::sharded::checkpoint::pytorch::ImportOptions import;
    import.world_size = absl::GetFlag(FLAGS_world_size);
    if (import.world_size < 1 || import.world_size > 65536) return UsageError("--world_size must be in [1, 65536]");
    if (absl::Status s = ShardDims(&import.shard_dims); !s.ok()) return UsageError(std::string(s.message()));
    import.key_prefix = absl::GetFlag(FLAGS_prefix);
    import.optimizer_states = absl::GetFlag(FLAGS_optimizer_states);
    import.global_step = absl::GetFlag(FLAGS_global_step);
    import.global_step_key = absl::GetFlag(FLAGS_global_step_key);
    return shardlight::tools::ckpt::ImportTorch(args[2], args[3], import, std::cout, std::cerr);
  }
  if (export_dcp) {
    if (operands != 2) return UsageError("export takes two operands, IN and OUT_DIR");
    if (absl::GetFlag(FLAGS_lightning)) return UsageError("--lightning is export --format=torch's");
    shardlight::tools::ckpt::DcpExportOptions dcp;
    dcp.world_size = absl::GetFlag(FLAGS_world_size);
    if (dcp.world_size < 1 || dcp.world_size > 65536) return UsageError("--world_size must be in [1, 65536]");
    if (absl::Status s = ShardDims(&dcp.shard_dims); !s.ok()) return UsageError(std::string(s.message()));
    if (absl::Status s = shardlight::tools::ckpt::ParseRenames(absl::GetFlag(FLAGS_rename), &dcp.renames); !s.ok()) {
      return UsageError(std::string(s.message()));
    }
    dcp.prefix = absl::GetFlag(FLAGS_prefix);
    return shardlight::tools::ckpt::ExportDcp(args[2], args[3], dcp, std::cout, std::cerr);
  }
  if (command == "export") {
    if (operands != 2) return UsageError("export takes two operands, DIR and OUT");
    shardlight::sharded::checkpoint::pytorch::ExportOptions exp;
    exp.lightning = absl::GetFlag(FLAGS_lightning);
    exp.prefix = absl::GetFlag(FLAGS_prefix);
    exp.buffer_bytes = options.buffer_bytes;
    return shardlight::tools::ckpt::ExportTorch(args[2], args[3], exp, std::cout, std::cerr);
  }
  if (command == "uploads") {
    if (operands != 1) return UsageError("uploads takes one operand, s3://BUCKET/PREFIX");
    return shardlight::tools::ckpt::Uploads(args[2], absl::GetFlag(FLAGS_abort), std::cout, std::cerr);
  }
  return UsageError("unknown command '" + command + "'");
}
