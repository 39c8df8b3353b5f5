// The ckpt tool's interop commands, as functions over streams: import (a
// torch.save / Lightning file into a shardlight checkpoint) and export (a
// checkpoint into a file Python's torch.load opens). Each returns the process
// exit code: 0 success, 1 bad input or a failed write (OUT left as it was).
#ifndef SHARDLIGHT_TOOLS_CKPT_INTEROP_COMMANDS_H_
#define SHARDLIGHT_TOOLS_CKPT_INTEROP_COMMANDS_H_

#include <ostream>
#include <string>

#include "sharded/checkpoint/interop/pytorch/torch_export.h"
#include "sharded/checkpoint/interop/pytorch/torch_import.h"

namespace shardlight::tools::ckpt {

int ImportTorch(const std::string& in, const std::string& out_dir,
                const sharded::checkpoint::pytorch::ImportOptions& options, std::ostream& out, std::ostream& err);

int ExportTorch(const std::string& dir, const std::string& out_path,
                const sharded::checkpoint::pytorch::ExportOptions& options, std::ostream& out, std::ostream& err);

}  // namespace shardlight::tools::ckpt

#endif  // SHARDLIGHT_TOOLS_CKPT_INTEROP_COMMANDS_H_
