// `ckpt export --format=dcp IN OUT`: a PyTorch distributed checkpoint (DCP)
// directory that torch.distributed.checkpoint.load reads, written from a
// shardlight checkpoint, a DCP directory or a torch.save / Lightning file,
// for --world_size ranks, with the non-tensor values (a step, an LR
// scheduler's state, optimizer hyper-parameters) as torch's own dcp.save
// writes them, and the key names a PyTorch job expects (--prefix, --rename).
// One process, no process group (dcp_offline_writer.h). Returns the process
// exit code: 0 written, 1 bad input or a failed write (OUT's earlier
// checkpoint left as it was), 2 a --shard key IN does not hold.
#ifndef SHARDLIGHT_TOOLS_CKPT_DCP_EXPORT_COMMAND_H_
#define SHARDLIGHT_TOOLS_CKPT_DCP_EXPORT_COMMAND_H_

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace shardlight::tools::ckpt {

struct DcpExportOptions {
  int world_size = 1;
  // IN's keys: chunk along DIM (else a tensor IN holds sharded is chunked
  // along the dim it was saved sharded on; one it holds whole stays whole).
  std::map<std::string, int64_t> shard_dims;
  // Only keys under it, without it (tensors and values).
  std::string prefix;
  // Then the first rule whose OLD begins the key replaces OLD by NEW.
  std::vector<std::pair<std::string, std::string>> renames;
};

// "OLD=NEW" items (--rename) into `renames`; InvalidArgument for an item
// without '=' or with an empty OLD.
absl::Status ParseRenames(const std::vector<std::string>& items, std::vector<std::pair<std::string, std::string>>* renames);

int ExportDcp(const std::string& in, const std::string& out_dir, const DcpExportOptions& options, std::ostream& out,
              std::ostream& err);

}  // namespace shardlight::tools::ckpt

#endif  // SHARDLIGHT_TOOLS_CKPT_DCP_EXPORT_COMMAND_H_
