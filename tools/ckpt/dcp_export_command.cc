#include "tools/ckpt/dcp_export_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/format/checkpoint_reader.h"
#include "sharded/checkpoint/format/dtype_names.h"
#include "sharded/checkpoint/format/entry_reader.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/checkpoint/interop/dcp/dcp_offline_writer.h"
#include "sharded/checkpoint/interop/open_checkpoint.h"
#include "sharded/checkpoint/interop/pytorch/torch_file.h"
#include "sharded/checkpoint/interop/pytorch/torch_import.h"
#include "sharded/shard_metadata.h"
#include "tools/ckpt/ckpt_commands.h"
#include "tools/ckpt/tensor_regions.h"

namespace shardlight::tools::ckpt {
namespace {

namespace cp = sharded::checkpoint;

// The output name of IN's `key`; nullopt when --prefix leaves it out.
std::optional<std::string> OutputKey(const std::string& key, const DcpExportOptions& options) {
  if (!absl::StartsWith(key, options.prefix)) return std::nullopt;
  std::string name = key.substr(options.prefix.size());
  for (const auto& [from, to] : options.renames) {
    if (absl::StartsWith(name, from)) {
      name = to + name.substr(from.size());
      break;
    }
  }
  if (name.empty()) return std::nullopt;
  return name;
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A torch.save / Lightning file: imported (restricted reader, nothing run)
// into a scratch checkpoint beside OUT, removed afterwards.
struct ScratchImport {
  std::string dir;
  ~ScratchImport() {
    if (!dir.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }
};

}  // namespace

absl::Status ParseRenames(const std::vector<std::string>& items,
                          std::vector<std::pair<std::string, std::string>>* renames) {
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--rename item '", item, "' is not OLD=NEW with a non-empty OLD"));
    }
    renames->emplace_back(item.substr(0, eq), item.substr(eq + 1));
  }
  return absl::OkStatus();
}

int ExportDcp(const std::string& in, const std::string& out_dir, const DcpExportOptions& options, std::ostream& out,
              std::ostream& err) {
  ScratchImport scratch;
  std::string source = in;
  if (IsRegularFile(in)) {
    scratch.dir = absl::StrCat(out_dir, ".import-", ::getpid());
    cp::pytorch::ImportOptions import;
    auto report = cp::pytorch::ImportTorchFile(in, scratch.dir, import);
    if (!report.ok()) {
      err << "ckpt: export failed: " << report.status().message() << "\n";
      return 1;
    }
    for (const std::string& s : report->not_carried) out << "not carried  " << s << "\n";
    source = scratch.dir;
  }
  auto reader = cp::OpenCheckpointForRead(source);
  if (!reader.ok()) {
    err << "ckpt: " << reader.status().message() << "\n";
    return 1;
  }
  cp::CheckpointReader& rd = *reader;
  for (const auto& [key, dim] : options.shard_dims) {
    bool found = false;
    for (const cp::IndexTensor& t : rd.index().tensors) found = found || t.key == key;
    if (!found) {
      err << "ckpt: --shard/--layout names key " << cp::Quote(key) << ", which is not in " << in << "\n";
      return 2;
    }
  }
  cp::dcp::OfflineDcpWriter writer(out_dir, options.world_size);
  cp::EntryReader entries(kReaderBufferBytes, nullptr);
  absl::Status s = rd.CheckEveryFile();
  int64_t tensors = 0, values = 0, bytes = 0;
  for (const cp::IndexTensor& t : rd.index().tensors) {
    if (!s.ok()) break;
    const std::optional<std::string> name = OutputKey(t.key, options);
    if (!name) continue;
    ++tensors;
    bytes += sharded::CheckedNumElements(t.shape).value_or(0) * cp::DtypeBytes(t.dtype);
    int64_t dim = -1;
    const auto chosen = options.shard_dims.find(t.key);
    if (chosen != options.shard_dims.end()) {
      dim = chosen->second;
    } else if (t.sharded && !t.shape.empty()) {
      dim = SavedShardDim(t);
    }
    s = writer.AddTensor(
        *name, t.dtype, t.shape,
        [&rd, &entries, &t](const std::vector<int64_t>& offsets, const at::Tensor& tile) {
          return FillRegion(rd, entries, t, tile, offsets);
        },
        dim);
  }
  for (const cp::IndexValue& v : rd.index().values) {
    if (!s.ok()) break;
    const std::optional<std::string> name = OutputKey(v.key, options);
    // The nesting a torch.save import recorded: DCP keys are flat.
    if (!name || v.key == cp::pytorch::kStructureKey) continue;
    ++values;
    s = writer.AddValue(*name, v.value);
  }
  cp::dcp::DcpWriteStats stats;
  if (s.ok()) s = writer.Commit(&stats);
  if (!s.ok()) {
    err << "ckpt: export failed: " << s.message() << "\n";
    return 1;
  }
  out << "wrote " << out_dir << " (PyTorch DCP): " << tensors << " tensors";
  if (values > 0) out << " and " << values << " non-tensor entries";
  out << " for " << options.world_size << " ranks, " << HumanBytes(bytes) << "\n";
  if (stats.removed > 0) {
    out << "removed " << stats.removed << " data files of an earlier DCP checkpoint in " << out_dir << "\n";
  }
  if (!rd.index().not_carried.empty()) {
    out << "not carried: " << rd.index().not_carried.size() << " non-tensor entries:\n";
    for (const auto& [key, why] : rd.index().not_carried) out << "  " << cp::Quote(key) << ": " << why << "\n";
  }
  return 0;
}

}  // namespace shardlight::tools::ckpt
