// The ckpt tool's commands across layouts, without a process group:
//   reshard: a checkpoint rewritten for another world size -- every sharded
//     tensor chunked (torch.chunk) along the dim it was saved split on, or
//     the dim a --shard/--layout entry gives; dense tensors stay dense. The
//     output loads on that many ranks; it is committed like a save
//     (OfflineCheckpointWriter), so OUT may be IN.
//   diff: two checkpoints compared tensor by tensor, whatever the layout
//     each was saved in, one bounded tile at a time: bit-equal, or the
//     largest absolute and relative difference per key.
// Exit codes: 0 success (diff: equal), 1 different (diff) or a bad or
// unreadable checkpoint, 2 bad usage (a --shard key not in the checkpoint).
#ifndef SHARDLIGHT_TOOLS_CKPT_LAYOUT_COMMANDS_H_
#define SHARDLIGHT_TOOLS_CKPT_LAYOUT_COMMANDS_H_

#include <cstdint>
#include <map>
#include <ostream>
#include <string>

namespace shardlight::tools::ckpt {

struct ReshardOptions {
  int world_size = 1;                         // ranks of the output, 1..65536
  std::map<std::string, int64_t> shard_dims;  // key -> dim to chunk along, overriding the saved layout
};

// Streams: each output tile is read from the input's shards while it is
// written, so memory stays bounded (the reader's and the writer's buffers)
// whatever the checkpoint's size.
int Reshard(const std::string& in_dir, const std::string& out_dir, const ReshardOptions& options, std::ostream& out,
            std::ostream& err);

struct DiffOptions {
  // Both tiles together (one per checkpoint); with the readers' buffers the
  // bound on the command's extra memory.
  int64_t buffer_bytes = int64_t{64} << 20;
};

// Prints "equal   KEY" or "DIFFER  KEY: ..." per key of A, "ONLY-B  KEY" for
// keys only B has, then a summary: tensors first, then the non-tensor values
// (DIFFER shows both reprs; an entry not carried by its reader, such as a
// DCP class instance, is listed as not compared).
int Diff(const std::string& a_dir, const std::string& b_dir, const DiffOptions& options, std::ostream& out,
         std::ostream& err);

}  // namespace shardlight::tools::ckpt

#endif  // SHARDLIGHT_TOOLS_CKPT_LAYOUT_COMMANDS_H_
