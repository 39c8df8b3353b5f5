#include "tools/ckpt/interop_commands.h"

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
      << HumanBytes(report->data_bytes) << "\n";
  if (report->global_step) out << "global_step " << *report->global_step << " -> " << options.global_step_key << "\n";
  for (const std::string& s : report->skipped) out << "skipped  " << s << "\n";
  if (report->skipped_count > static_cast<int64_t>(report->skipped.size())) {
    out << "skipped  ... and " << report->skipped_count - static_cast<int64_t>(report->skipped.size()) << " more entries\n";
  }
  for (const std::string& s : report->not_stored) out << "not stored (not a tensor)  " << s << "\n";
  if (report->not_stored_count > static_cast<int64_t>(report->not_stored.size())) {
    out << "not stored (not a tensor)  ... and " << report->not_stored_count - static_cast<int64_t>(report->not_stored.size())
        << " more values\n";
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
  out << "\n";
  for (const std::string& key : report->values_not_exported) {
    out << "not exported  '" << key << "': the Lightning layout's own key\n";
  }
  return 0;
}

}  // namespace shardlight::tools::ckpt
