#include "tools/ckpt/ckpt_commands.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <iomanip>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sharded/box.h"
#include "sharded/shard_metadata.h"
#include "sharded/checkpoint/format/checkpoint_reader.h"
#include "sharded/checkpoint/format/dtype_names.h"
#include "sharded/checkpoint/format/entry_reader.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "sharded/checkpoint/storage/posix_file.h"
#include "sharded/checkpoint/format/row_major_tiles.h"
#include "sharded/checkpoint/format/safetensors.h"
#include "sharded/checkpoint/interop/dcp/dcp_checkpoint.h"
#include "sharded/checkpoint/interop/open_checkpoint.h"
#include "tools/ckpt/tensor_regions.h"

namespace shardlight::tools::ckpt {
namespace {

using sharded::checkpoint::CheckpointIndex;
using sharded::checkpoint::CheckpointReader;
using sharded::checkpoint::DtypeBytes;
using sharded::checkpoint::DtypeName;
using sharded::checkpoint::EntryReader;
using sharded::checkpoint::File;
using sharded::checkpoint::IndexShard;
using sharded::checkpoint::IndexTensor;
using sharded::checkpoint::JoinPath;
using sharded::checkpoint::Quote;

constexpr int64_t kAutoProgressBytes = int64_t{256} << 20;

// Byte size of a tensor of `shape`; an error when the shape is negative or
// the size overflows int64 (a hostile or damaged index).
absl::StatusOr<int64_t> CheckedBytes(const std::vector<int64_t>& shape, c10::ScalarType dtype) {
  auto n = sharded::CheckedNumElements(shape);
  if (!n.ok()) return n.status();
  const int64_t elem = DtypeBytes(dtype);
  if (*n > INT64_MAX / elem) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", sharded::ShapeToString(shape), ": byte size overflows"));
  }
  return *n * elem;
}

int64_t SaturatingAdd(int64_t a, int64_t b) { return b > INT64_MAX - a ? INT64_MAX : a + b; }

// One row of the inspect table, from an index that may be damaged: every
// size is checked, and a tensor that is not sound is "(invalid)" with the
// reason in `problem`.
std::vector<std::string> InspectRow(const IndexTensor& t, int64_t* bytes, std::string* problem) {
  absl::Status valid = sharded::checkpoint::ValidateKey(t.key);
  auto volume = sharded::CheckedNumElements(t.shape);
  auto total = CheckedBytes(t.shape, t.dtype);
  if (valid.ok() && !total.ok()) valid = total.status();
  // Coverage: the shards' share of the elements; Validate decides whether
  // they tile the tensor exactly.
  int64_t covered = 0;
  for (const IndexShard& s : t.shards) {
    auto n = sharded::CheckedNumElements(s.sizes);
    if (valid.ok() && !n.ok()) valid = absl::InvalidArgumentError(absl::StrCat("shard sizes: ", n.status().message()));
    if (n.ok()) covered = SaturatingAdd(covered, *n);
  }
  if (valid.ok() && t.sharded) valid = t.Metadata().Validate();
  if (valid.ok() && !t.sharded &&
      (t.shards.size() != 1 || !sharded::SameDims(t.shards[0].sizes, t.shape) ||
       !sharded::SameDims(t.shards[0].offsets, std::vector<int64_t>(t.shape.size(), 0)))) {
    valid = absl::InvalidArgumentError("a dense tensor needs exactly one shard covering it");
  }
  std::string coverage = "(invalid)";
  if (volume.ok()) {
    coverage = *volume == 0 ? "100%"
                            : absl::StrFormat("%.0f%%", 100.0 * static_cast<double>(covered) / static_cast<double>(*volume));
    if (!valid.ok()) coverage += " (invalid)";
  }
  *bytes = total.ok() ? *total : -1;
  if (!valid.ok()) *problem = absl::StrCat("key ", Quote(t.key), ": ", valid.message());
  // Keys of a damaged index are shown quoted when they are not plain keys
  // (control characters must not reach the terminal raw).
  const bool plain_key = sharded::checkpoint::ValidateKey(t.key).ok();
  return {plain_key ? t.key : Quote(t.key), t.sharded ? "sharded" : "dense", DtypeName(t.dtype),
          sharded::ShapeToString(t.shape), std::to_string(t.shards.size()), coverage,
          total.ok() ? HumanBytes(*total) : "(invalid)"};
}

std::string Pad(const std::string& s, size_t width) { return s.size() >= width ? s : s + std::string(width - s.size(), ' '); }

void PrintTable(const std::vector<std::vector<std::string>>& rows, std::ostream& out) {
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) line += (c + 1 < row.size() ? Pad(row[c], widths[c] + 2) : row[c]);
    out << line << "\n";
  }
}

const std::vector<std::string> kTableHeader = {"key", "kind", "dtype", "shape", "shards", "coverage", "bytes"};

// A PyTorch distributed checkpoint: its .metadata as the same table, and its
// non-tensor entries.
int InspectDcp(const std::string& dir, std::ostream& out, std::ostream& err) {
  namespace dcp = sharded::checkpoint::dcp;
  sharded::checkpoint::Storage& storage = sharded::checkpoint::DefaultStorage();
  auto md = dcp::ReadDcpMetadata(dir, storage);
  auto reader = md.ok() ? dcp::OpenDcpCheckpoint(dir, storage) : md.status();
  auto values = md.ok() ? dcp::ReadDcpValues(dir, storage, *md) : md.status();
  if (!reader.ok()) {
    err << "ckpt: " << reader.status().message() << "\n";
    return 1;
  }
  const CheckpointIndex& index = reader->index();
  std::vector<std::vector<std::string>> rows = {kTableHeader};
  int64_t total = 0;
  std::vector<std::string> problems;
  for (const IndexTensor& t : index.tensors) {
    int64_t bytes = 0;
    std::string problem;
    rows.push_back(InspectRow(t, &bytes, &problem));
    if (!problem.empty()) problems.push_back(problem);
    total = SaturatingAdd(total, std::max<int64_t>(bytes, 0));
  }
  out << "checkpoint " << dir << "\n"
      << "  " << dcp::kDcpFormatName << " (torch.distributed.checkpoint), version "
      << (md->version.empty() ? "not recorded" : md->version) << ", saved by " << index.world_size << " rank"
      << (index.world_size == 1 ? "" : "s") << "\n"
      << "  " << index.tensors.size() << " tensors, " << HumanBytes(total) << " in " << index.files.size()
      << " data files; no checksums\n";
  if (values.ok()) {
    out << "  " << values->size() << " non-tensor entries" << (values->empty() ? "" : ":") << "\n";
    for (const auto& v : *values) out << "    " << v.key << " = " << v.repr << "\n";
    int not_carried = 0;
    for (const auto& v : *values) not_carried += v.not_carried.empty() ? 0 : 1;
    if (not_carried > 0) {
      out << "  " << not_carried << " of them not carried by import (no plain value, or a key shardlight refuses)\n";
    }
  } else {
    problems.push_back(std::string(values.status().message()));
  }
  out << "\n";
  PrintTable(rows, out);
  if (!problems.empty()) {
    out << "\n";
    for (const std::string& p : problems) out << "problem: " << p << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

std::string HumanBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = -1;
  while (v >= 1024 && unit < 3) {
    v /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", v, kUnits[unit]);
}

int Inspect(const std::string& dir, std::ostream& out, std::ostream& err) {
  const std::string path = JoinPath(dir, sharded::checkpoint::kIndexFileName);
  if (!sharded::checkpoint::DefaultStorage().Exists(path)) {
    if (sharded::checkpoint::dcp::IsDcpCheckpoint(dir, sharded::checkpoint::DefaultStorage())) {
      return InspectDcp(dir, out, err);
    }
    err << "ckpt: no checkpoint at '" << dir << "': " << sharded::checkpoint::kIndexFileName << " is missing (nor is "
        << sharded::checkpoint::dcp::kDcpMetadataFileName << ", a PyTorch distributed checkpoint's)\n";
    return 1;
  }
  auto text = sharded::checkpoint::ReadIndexText(sharded::checkpoint::DefaultStorage(), dir);
  if (!text.ok()) {
    err << "ckpt: " << text.status().message() << "\n";
    return 1;
  }
  // Decoded without the cross-checks, so a damaged index is still shown.
  auto index = sharded::checkpoint::DecodeIndex(*text, path, /*check_checksum=*/false);
  if (!index.ok()) {
    err << "ckpt: " << index.status().message() << "\n";
    return 1;
  }
  std::vector<std::vector<std::string>> rows;
  rows.push_back(kTableHeader);
  std::vector<std::string> problems;
  int64_t total = 0;
  bool total_known = true;
  for (const IndexTensor& t : index->tensors) {
    int64_t bytes = 0;
    std::string problem;
    rows.push_back(InspectRow(t, &bytes, &problem));
    if (!problem.empty()) problems.push_back(problem);
    if (bytes < 0 || bytes > INT64_MAX - total) {
      total_known = false;
    } else {
      total += bytes;
    }
  }
  out << "checkpoint " << dir << "\n"
      << "  format version " << index->version << ", saved by " << index->world_size << " rank"
      << (index->world_size == 1 ? "" : "s") << ", generation " << index->generation << "\n"
      << "  " << index->tensors.size() << " tensors, " << (total_known ? HumanBytes(total) : "(invalid) bytes")
      << " in " << index->files.size() << " data files; crc32c per " << HumanBytes(index->block_bytes)
      << " block\n";
  // What produced it (run_record.h; decoding checked its names and values).
  std::string run;
  for (const auto& [name, value] : index->run) absl::StrAppend(&run, run.empty() ? "" : ", ", name, "=", value);
  out << "  run: " << (run.empty() ? "not recorded" : run) << "\n";
  // The non-tensor values (FORMAT.md), in the state dict's order, as Python's repr.
  if (!index->values.empty()) {
    out << "  " << index->values.size() << " non-tensor entries:\n";
    for (const auto& v : index->values) out << "    " << v.key << " = " << v.value.Repr() << "\n";
  }
  out << "\n";
  PrintTable(rows, out);
  absl::Status whole = index->sealed ? sharded::checkpoint::CheckIndexChecksum(*text, path) : absl::OkStatus();
  if (whole.ok()) whole = sharded::checkpoint::ValidateIndex(*index, path);
  if (!whole.ok() || !problems.empty()) {
    out << "\n";
    for (const std::string& p : problems) out << "problem: " << p << "\n";
    if (!whole.ok()) out << "problem: " << whole.message() << "\n";
    return 1;
  }
  return 0;
}

int Verify(const std::string& dir, std::ostream& out, std::ostream& err) {
  auto reader = sharded::checkpoint::OpenCheckpointForRead(dir);
  if (!reader.ok()) {
    err << "ckpt: " << reader.status().message() << "\n";
    return 1;
  }
  sharded::checkpoint::ReadStats stats;
  EntryReader entries(kReaderBufferBytes, &stats);
  // Every listed file first, whether or not a tensor needs it: each must hold
  // exactly the entries the index places in it.
  std::set<std::string> bad_files;
  for (const sharded::checkpoint::IndexFile& f : reader->index().files) {
    auto file = reader->OpenDataFile(f.name, "");
    if (!file.ok()) {
      bad_files.insert(f.name);
      out << "FAILED  data file " << f.name << ": " << file.status().message() << "\n";
    }
  }
  int failures = 0;
  int64_t shards = 0;
  for (const IndexTensor& t : reader->index().tensors) {
    absl::Status status;
    for (const IndexShard& s : t.shards) {
      ++shards;
      const std::string file_name = ShardFileName(reader->index(), s);
      if (bad_files.count(file_name) != 0) {
        status = absl::DataLossError(absl::StrCat("data file ", Quote(file_name), " failed its check (above)"));
        break;
      }
      auto file = reader->OpenShard(t, s, t.key);
      if (!file.ok()) {
        status = file.status();
        break;
      }
      status = entries.Verify(reader->SourceOf(t, s, *file), s.offsets, s.sizes);
      if (!status.ok()) {
        status = absl::Status(status.code(), absl::StrCat("key ", Quote(t.key), ": ", status.message()));
        break;
      }
    }
    if (status.ok()) {
      out << "ok      " << t.key << "\n";
    } else {
      ++failures;
      out << "FAILED  " << t.key << ": " << status.message() << "\n";
    }
  }
  if (!bad_files.empty()) {
    out << bad_files.size() << " of " << reader->index().files.size() << " data files failed their checks\n";
  }
  if (failures > 0 || !bad_files.empty()) {
    out << failures << " of " << reader->index().tensors.size() << " tensors failed verification\n";
    return 1;
  }
  if (!reader->checksummed()) {
    // A foreign format without checksums: every payload was located and
    // matched its metadata, and every byte read; nothing says the bytes are
    // the ones saved. Its non-tensor entries must read as plain values.
    namespace dcp = sharded::checkpoint::dcp;
    auto md = dcp::ReadDcpMetadata(dir, sharded::checkpoint::DefaultStorage());
    auto values = md.ok() ? dcp::ReadDcpValues(dir, sharded::checkpoint::DefaultStorage(), *md) : md.status();
    if (!values.ok()) {
      out << "FAILED  " << values.status().message() << "\n";
      return 1;
    }
    out << "OK: " << reader->index().tensors.size() << " tensors, " << shards << " shards, " << values->size()
        << " non-tensor entries, " << HumanBytes(stats.bytes_read) << " in " << reader->files_opened()
        << " files read; a " << reader->format()
        << " checkpoint has no checksums: its structure and every payload were checked, not the bytes' values\n";
    for (const auto& [key, why] : reader->index().not_carried) {
      out << "note: non-tensor entry " << sharded::checkpoint::Quote(key) << " is not carried by import: " << why
          << "\n";
    }
    return 0;
  }
  out << "OK: " << reader->index().tensors.size() << " tensors, " << shards << " shards, ";
  if (!reader->index().values.empty()) out << reader->index().values.size() << " non-tensor entries, ";
  out << HumanBytes(stats.bytes_read) << " in " << reader->files_opened() << " files verified\n";
  return 0;
}

namespace {

absl::Status ConsolidateInto(CheckpointReader& reader, File& file, const ConsolidateOptions& options,
                             std::ostream& err) {
  const CheckpointIndex& index = reader.index();
  std::vector<sharded::checkpoint::SafetensorsEntry> layout;
  for (const IndexTensor& t : index.tensors) layout.push_back({t.key, DtypeName(t.dtype), t.shape, 0, 0});
  auto data_bytes = sharded::checkpoint::AssignDataOffsets(layout);
  if (!data_bytes.ok()) return data_bytes.status();
  const std::string header = sharded::checkpoint::EncodeSafetensorsHeader(
      layout, {{"format", "shardlight.consolidated"}, {"source_generation", index.generation}});
  absl::Status s = file.WriteAt(header.data(), static_cast<int64_t>(header.size()), 0);
  if (!s.ok()) return s;
  const bool show = options.progress == Progress::kAlways ||
                    (options.progress == Progress::kAuto && *data_bytes >= kAutoProgressBytes);
  int64_t done = 0;
  int last_percent = -1;
  auto progress = [&] {
    const int percent = *data_bytes == 0 ? 100 : static_cast<int>(100 * done / *data_bytes);
    if (!show || percent / 5 == last_percent / 5) return;
    last_percent = percent;
    err << "consolidate: " << HumanBytes(done) << " / " << HumanBytes(*data_bytes) << " (" << percent << "%)\n";
  };
  const int64_t window_bytes = std::max<int64_t>(options.buffer_bytes, 64);
  std::unique_ptr<char[]> window(new char[static_cast<size_t>(window_bytes)]);
  EntryReader entries(kReaderBufferBytes, nullptr);
  const int64_t start = static_cast<int64_t>(header.size());
  progress();
  for (size_t i = 0; i < index.tensors.size(); ++i) {
    const IndexTensor& t = index.tensors[i];
    const int64_t elem = DtypeBytes(t.dtype);
    int64_t pos = start + layout[i].begin;
    // One row-major tile of the full tensor at a time: every shard that
    // overlaps it fills its part, then the tile is appended.
    s = sharded::checkpoint::ForEachRowMajorTile(
        t.shape, window_bytes / elem, [&](const std::vector<int64_t>& off, const std::vector<int64_t>& size) {
          at::Tensor tile = at::from_blob(window.get(), size, at::TensorOptions().dtype(t.dtype));
          absl::Status c = FillRegion(reader, entries, t, tile, off);
          if (!c.ok()) return c;
          const int64_t n = tile.numel() * elem;
          absl::Status w = file.WriteAt(window.get(), n, pos);
          pos += n;
          done += n;
          progress();
          return w;
        });
    if (!s.ok()) return s;
  }
  s = file.Sync();
  if (!s.ok()) return s;
  return file.Close();
}

}  // namespace

int Consolidate(const std::string& dir, const std::string& out_path, const ConsolidateOptions& options,
                std::ostream& out, std::ostream& err) {
  auto reader = sharded::checkpoint::OpenCheckpointForRead(dir);
  if (!reader.ok()) {
    err << "ckpt: " << reader.status().message() << "\n";
    return 1;
  }
  const std::string temp = absl::StrCat(out_path, ".tmp-", ::getpid());
  sharded::checkpoint::RemoveFile(temp).IgnoreError();
  auto file = File::CreateNew(temp);
  absl::Status s = reader->CheckEveryFile();
  if (s.ok()) s = file.status();
  if (s.ok()) s = ConsolidateInto(*reader, *file, options, err);
  if (s.ok()) s = sharded::checkpoint::RenameFile(temp, out_path);
  if (!s.ok()) {
    sharded::checkpoint::RemoveFile(temp).IgnoreError();
    err << "ckpt: consolidate failed: " << s.message() << "\n";
    return 1;
  }
  int64_t total = 0;  // the consolidated data, which fits in int64
  for (const IndexTensor& t : reader->index().tensors) total = SaturatingAdd(total, *CheckedBytes(t.shape, t.dtype));
  out << "wrote " << out_path << ": " << reader->index().tensors.size() << " tensors, " << HumanBytes(total) << "\n";
  return 0;
}

}  // namespace shardlight::tools::ckpt
