#include "tools/ckpt/interop_commands.h"

#include "sharded/checkpoint/interop/pytorch/torch_file.h"
#include "tools/ckpt/ckpt_commands.h"

namespace shardlight::tools::ckpt {

namespace pt = sharded::checkpoint::pytorch;

int ImportTorch(const std::string& in, const std::string& out_dir, const pt::ImportOptions& options,
                std::ostream& out, std::ostream& err) {
  auto report = pt::ImportTorchFile(in, out_dir, options);
  if (!report.ok()) {
    err << "ckpt: import failed: " << report.status().message() << "\n";
    return 1;
  }
  out << "imported " << in << (report->lightning ? " (Lightning checkpoint)" : "") << " into " << out_dir << ": "
      << report->tensors << " tensors (" << report->sharded << " sharded over " << options.world_size << " ranks), "
      << HumanBytes(report->data_bytes) << ", " << report->values << " values\n";
  if (report->global_step) out << "global_step " << *report->global_step << " -> " << options.global_step_key << "\n";
  if (report->structure) out << "nesting recorded under " << pt::kStructureKey << " (export writes it back)\n";
  if (!report->structure_note.empty()) {
    out << "nesting not recorded: " << report->structure_note << " (export writes a flat dict)\n";
  }
  for (const std::string& s : report->not_carried) out << "not carried  " << s << "\n";
  if (report->not_carried_count > static_cast<int64_t>(report->not_carried.size())) {
    out << "not carried  ... and " << report->not_carried_count - static_cast<int64_t>(report->not_carried.size())
        << " more entries\n";
  }
  return 0;
}

int ExportTorch(const std::string& dir, const std::string& out_path, const pt::ExportOptions& options,
                std::ostream& out, std::ostream& err) {
  auto report = pt::ExportTorchFile(dir, out_path, options);
  if (!report.ok()) {
    err << "ckpt: export failed: " << report.status().message() << "\n";
    return 1;
  }
  out << "wrote " << out_path << (options.lightning ? " (Lightning layout)" : "") << ": " << report->tensors
      << " tensors";
  if (report->values > 0) out << " and " << report->values << " non-tensor entries";
  out << ", " << HumanBytes(report->data_bytes);
  if (options.lightning) out << ", global_step " << report->global_step.value_or(0);
  if (report->rebuilt) out << ", nested as the imported file was";
  out << "\n";
  for (const std::string& key : report->values_not_exported) {
    out << "not exported  '" << key << "': the Lightning layout's own key\n";
  }
  return 0;
}

}  // namespace shardlight::tools::ckpt
