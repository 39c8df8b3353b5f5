// ImportTorchFile: read and check everything, then write through the
// offline writer into a temporary directory, then rename it into place.
#include "sharded/checkpoint/interop/pytorch/torch_import.h"

#include <unistd.h>

#include <cerrno>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/checkpoint/storage/posix_file.h"
#include "sharded/checkpoint/interop/pytorch/torch_file.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint::pytorch {
namespace {

// Removes a directory the import created, with what it holds.
void RemoveTree(const std::string& dir) {
  auto names = ListDirectory(dir);
  if (names.ok()) {
    for (const std::string& n : *names) RemoveFile(JoinPath(dir, n)).IgnoreError();
  }
  ::rmdir(dir.c_str());
}

struct ToWrite {
  std::string key;
  std::string source_key;  // the key in the file, which shard_dims names
  at::Tensor tensor;
};

absl::Status Write(const std::vector<ToWrite>& tensors, const std::vector<SelectedValue>& values,
                   const std::string& dir, const ImportOptions& options, int64_t* sharded) {
  OfflineCheckpointWriter writer(dir, options.world_size, options.writer);
  for (const auto& [key, source_key, tensor] : tensors) {
    auto dim = options.shard_dims.find(source_key);
    SL_RETURN_IF_ERROR(dim == options.shard_dims.end() ? writer.AddDense(key, tensor)
                                                       : writer.AddChunked(key, tensor, dim->second));
    if (dim != options.shard_dims.end()) ++*sharded;
  }
  for (const SelectedValue& v : values) SL_RETURN_IF_ERROR(writer.AddValue(v.key, v.value));
  return writer.Commit();
}

}  // namespace

absl::StatusOr<ImportReport> ImportTorchFile(const std::string& in_path, const std::string& out_dir,
                                             const ImportOptions& options) {
  if (options.world_size < 1 || options.world_size > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", options.world_size, " is not in [1, 65536]"));
  }
  // Read and check the whole input first.
  SL_ASSIGN_OR_RETURN(auto file, TorchFile::Open(in_path));
  SelectOptions select;
  select.carry_values = true;
  select.global_step = options.global_step;
  select.key_prefix = options.key_prefix;
  auto selection = SelectEntries(file->graph(), select);
  if (!selection.ok()) {
    return absl::Status(selection.status().code(), absl::StrCat("'", in_path, "': ", selection.status().message()));
  }
  if (options.global_step && !selection->lightning) {
    return absl::InvalidArgumentError(absl::StrCat("'", in_path, "' is not a Lightning checkpoint: it has no "
                                                   "global_step to import"));
  }
  ImportReport report;
  report.lightning = selection->lightning;
  report.global_step = selection->global_step;
  report.not_carried = selection->not_carried;
  report.not_carried_count = selection->not_carried_count;
  std::vector<ToWrite> tensors;
  std::set<std::string> keys;
  auto claim = [&](const std::string& key) -> absl::Status {
    if (keys.insert(key).second) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("'", in_path, "': two entries flatten to key ", Quote(key)));
  };
  for (const SelectedTensor& t : selection->tensors) {
    SL_RETURN_IF_ERROR(claim(t.key));
    SL_ASSIGN_OR_RETURN(at::Tensor tensor, file->Tensor(t.node, t.key));
    report.data_bytes += tensor.numel() * static_cast<int64_t>(tensor.element_size());
    tensors.push_back({t.key, t.key.substr(t.prefix_bytes), tensor});
  }
  std::vector<SelectedValue> values = std::move(selection->values);
  for (const SelectedValue& v : values) SL_RETURN_IF_ERROR(claim(v.key));
  // --global_step: the step (also) as an int value under global_step_key
  // (the Trainer's "trainer.step"); the file's own global_step is a value already.
  if (selection->global_step && keys.count(options.global_step_key) == 0) {
    values.push_back({options.global_step_key, PlainValue::Int(*selection->global_step)});
    SL_RETURN_IF_ERROR(claim(options.global_step_key));
  }
  report.values = static_cast<int64_t>(values.size());
  if (selection->structure) {
    int64_t bytes = 0;
    for (const SelectedValue& v : values) bytes += static_cast<int64_t>(v.value.Repr().size());
    const int64_t structure = static_cast<int64_t>(selection->structure->Repr().size());
    if (keys.count(kStructureKey) != 0) {
      report.structure_note = absl::StrCat("the file has its own entry ", Quote(kStructureKey));
    } else if (bytes + structure > kMaxValuesBytes) {
      report.structure_note = absl::StrCat("its record takes ", structure, " bytes, more than the values' ",
                                           kMaxValuesBytes - bytes, " left");
    } else {
      values.push_back({kStructureKey, *std::move(selection->structure)});
      report.structure = true;
    }
  }
  std::set<std::string> source_keys;
  for (const ToWrite& t : tensors) source_keys.insert(t.source_key);
  for (const auto& [key, dim] : options.shard_dims) {
    if (source_keys.count(key) == 0 || key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--shard names key ", Quote(key), ", which '", in_path,
                                                     "' does not hold"));
    }
  }
  report.tensors = static_cast<int64_t>(tensors.size());
  // The tensors hold their storages: the pickle's graph, the zip directory
  // and the selection go before the writer builds its index.
  file.reset();
  selection = Selection();

  // Then write: straight into an existing directory (its atomic commit), or
  // into a temporary sibling renamed into place.
  if (PathExists(out_dir)) {
    SL_RETURN_IF_ERROR(Write(tensors, values, out_dir, options, &report.sharded));
    return report;
  }
  std::string parent = out_dir;
  while (parent.size() > 1 && parent.back() == '/') parent.pop_back();
  const std::string temp = absl::StrCat(parent, ".tmp-import-", ::getpid());
  RemoveTree(temp);
  absl::Status s = Write(tensors, values, temp, options, &report.sharded);
  if (s.ok()) s = RenameFile(temp, parent);
  if (!s.ok()) {
    RemoveTree(temp);
    return s;
  }
  const size_t slash = parent.find_last_of('/');
  SyncDirectory(slash == std::string::npos ? "." : (slash == 0 ? "/" : parent.substr(0, slash))).IgnoreError();
  return report;
}

absl::Status ParseShardSpecs(const std::vector<std::string>& specs, std::map<std::string, int64_t>* dims) {
  for (const std::string& spec : specs) {
    const size_t eq = spec.rfind('=');
    int64_t dim;
    if (eq == std::string::npos || eq == 0 || !absl::SimpleAtoi(spec.substr(eq + 1), &dim) || dim < 0) {
      return absl::InvalidArgumentError(absl::StrCat("shard spec ", Quote(spec), " is not KEY=DIM with DIM >= 0"));
    }
    const std::string key = spec.substr(0, eq);
    if (!dims->emplace(key, dim).second) return absl::InvalidArgumentError("key " + Quote(key) + " is sharded twice");
  }
  return absl::OkStatus();
}

absl::Status ReadShardLayoutFile(const std::string& path, std::map<std::string, int64_t>* dims) {
  SL_ASSIGN_OR_RETURN(auto text, ReadWholeFile(path, int64_t{16} << 20));
  std::vector<std::string> specs;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (!line.empty()) specs.emplace_back(line);
  }
  absl::Status s = ParseShardSpecs(specs, dims);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat("layout file '", path, "': ", s.message()));
  return s;
}

}  // namespace shardlight::sharded::checkpoint::pytorch
