#include "tools/ckpt/layout_commands.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sharded/checkpoint/format/checkpoint_reader.h"
#include "sharded/checkpoint/interop/open_checkpoint.h"
#include "sharded/checkpoint/format/dtype_names.h"
#include "sharded/checkpoint/format/entry_reader.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/checkpoint/offline/offline_writer.h"
#include "sharded/checkpoint/format/row_major_tiles.h"
#include "sharded/no_throw.h"
#include "sharded/shard_metadata.h"
#include "tools/ckpt/ckpt_commands.h"
#include "tools/ckpt/tensor_regions.h"

namespace shardlight::tools::ckpt {
namespace {

using sharded::checkpoint::CheckpointReader;
using sharded::checkpoint::DtypeBytes;
using sharded::checkpoint::DtypeName;
using sharded::checkpoint::EntryReader;
using sharded::checkpoint::IndexTensor;


// The largest |a - b| and |a - b| / max(|a|, |b|) over a pair of tiles
// (complex: over their real and imaginary parts).
struct Difference {
  double max_abs = 0;
  double max_rel = 0;
  bool differs = false;
};

void Accumulate(const at::Tensor& a, const at::Tensor& b, Difference* d) {
  d->differs = true;
  // A complex tensor compares part by part (real, imaginary).
  const at::Tensor x = (a.is_complex() ? at::view_as_real(a) : a).to(at::kDouble);
  const at::Tensor y = (b.is_complex() ? at::view_as_real(b) : b).to(at::kDouble);
  const at::Tensor abs_diff = (x - y).abs();
  const at::Tensor scale = at::maximum(x.abs(), y.abs());
  const at::Tensor rel = at::where(scale > 0, abs_diff / scale, at::zeros_like(abs_diff));
  d->max_abs = std::max(d->max_abs, abs_diff.max().item<double>());
  d->max_rel = std::max(d->max_rel, rel.max().item<double>());
  if (at::isnan(abs_diff).any().item<bool>()) d->max_abs = d->max_rel = std::nan("");
}

// The two tile windows, allocated once for every key (a fresh allocation
// per key would fault its pages in again each time).
struct Windows {
  explicit Windows(int64_t bytes)
      : size(std::max<int64_t>(bytes, 16)), a(new char[static_cast<size_t>(size)]), b(new char[static_cast<size_t>(size)]) {}
  int64_t size;
  std::unique_ptr<char[]> a, b;
};

// Compares one key present in both checkpoints, tile by tile.
absl::StatusOr<Difference> CompareTensor(CheckpointReader& ra, EntryReader& ea, const IndexTensor& ta,
                                         CheckpointReader& rb, EntryReader& eb, const IndexTensor& tb,
                                         Windows& windows) {
  const int64_t elem = DtypeBytes(ta.dtype);
  const int64_t window = windows.size;
  char* const wa = windows.a.get();
  char* const wb = windows.b.get();
  Difference d;
  absl::Status s = sharded::checkpoint::ForEachRowMajorTile(
      ta.shape, window / elem, [&](const std::vector<int64_t>& off, const std::vector<int64_t>& size) -> absl::Status {
        const auto options = at::TensorOptions().dtype(ta.dtype);
        at::Tensor a = at::from_blob(wa, size, options);
        at::Tensor b = at::from_blob(wb, size, options);
        absl::Status r = FillRegion(ra, ea, ta, a, off);
        if (r.ok()) r = FillRegion(rb, eb, tb, b, off);
        if (!r.ok()) return r;
        if (std::memcmp(wa, wb, static_cast<size_t>(a.numel() * elem)) == 0) return absl::OkStatus();
        return sharded::NoThrow([&] {
          Accumulate(a, b, &d);
          return absl::OkStatus();
        });
      });
  if (!s.ok()) return s;
  return d;
}

std::string Describe(const IndexTensor& t) { return absl::StrCat(DtypeName(t.dtype), " ", sharded::ShapeToString(t.shape)); }

}  // namespace

int Reshard(const std::string& in_dir, const std::string& out_dir, const ReshardOptions& options, std::ostream& out,
            std::ostream& err) {
  auto reader = sharded::checkpoint::OpenCheckpointForRead(in_dir);
  if (!reader.ok()) {
    err << "ckpt: " << reader.status().message() << "\n";
    return 1;
  }
  std::map<std::string, const IndexTensor*> by_key;
  for (const IndexTensor& t : reader->index().tensors) by_key[t.key] = &t;
  for (const auto& [key, dim] : options.shard_dims) {
    if (by_key.count(key) == 0) {
      err << "ckpt: --shard/--layout names key " << sharded::checkpoint::Quote(key) << ", which is not in " << in_dir
          << "\n";
      return 2;
    }
  }
  // Every tensor is a source: Commit reads each output tile from the input's
  // shards as it writes it (checksums checked on the way in, computed on the
  // way out), so memory stays at the writer's and the reader's buffers.
  sharded::checkpoint::OfflineWriterOptions writer_options;
  writer_options.run = reader->index().run;  // the same run's state, on another layout
  sharded::checkpoint::OfflineCheckpointWriter writer(out_dir, options.world_size, writer_options);
  EntryReader entries(kReaderBufferBytes, nullptr);
  CheckpointReader& in = *reader;
  int64_t bytes = 0;
  absl::Status s = in.CheckEveryFile();
  for (const IndexTensor& t : in.index().tensors) {
    if (!s.ok()) break;
    bytes += sharded::CheckedNumElements(t.shape).value_or(0) * DtypeBytes(t.dtype);
    sharded::checkpoint::TensorSource source;
    source.dtype = t.dtype;
    source.sizes = t.shape;
    source.fill = [&in, &entries, &t](const std::vector<int64_t>& offsets, const at::Tensor& tile) {
      return FillRegion(in, entries, t, tile, offsets);
    };
    const auto dim = options.shard_dims.find(t.key);
    if (dim != options.shard_dims.end()) {
      s = writer.AddChunked(t.key, std::move(source), dim->second);
    } else if (t.sharded && !t.shape.empty()) {
      s = writer.AddChunked(t.key, std::move(source), SavedShardDim(t));
    } else {
      s = writer.AddDense(t.key, std::move(source));
    }
  }
  // The non-tensor values go along; what cannot (a foreign format's class
  // instances, keys this format refuses) is named, never dropped unsaid.
  for (const sharded::checkpoint::IndexValue& v : in.index().values) {
    if (s.ok()) s = writer.AddValue(v.key, v.value);
  }
  if (s.ok()) s = writer.Commit();
  if (!s.ok()) {
    err << "ckpt: reshard failed: " << s.message() << "\n";
    return 1;
  }
  out << "wrote " << out_dir << ": " << reader->index().tensors.size() << " tensors";
  if (!in.index().values.empty()) out << " and " << in.index().values.size() << " non-tensor entries";
  out << " for " << options.world_size << " ranks, " << HumanBytes(bytes) << "\n";
  if (!in.index().not_carried.empty()) {
    out << "not carried: " << in.index().not_carried.size() << " non-tensor entries:\n";
    for (const auto& [key, why] : in.index().not_carried) {
      out << "  " << sharded::checkpoint::Quote(key) << ": " << why << "\n";
    }
  }
  return 0;
}

namespace {

// A value's repr for a DIFFER line, cut to a line's worth.
std::string ShortRepr(const sharded::PlainValue& v) {
  std::string r = v.Repr();
  constexpr size_t kMax = 72;
  if (r.size() > kMax) r = r.substr(0, kMax) + "...";
  return r;
}

// The non-tensor values, after the tensors and in A's order: "equal",
// "DIFFER  KEY: A vs B" (same kind and contents, floats by bits), "ONLY-A",
// "ONLY-B". An entry either side holds but cannot read (a foreign format's
// class instance) is listed as not compared and counts neither way.
// Returns the number equal; adds the differing ones to *differ.
int DiffValues(const sharded::checkpoint::CheckpointIndex& a, const sharded::checkpoint::CheckpointIndex& b,
               std::ostream& out, int* differ) {
  int equal = 0;
  for (const sharded::checkpoint::IndexValue& va : a.values) {
    const sharded::checkpoint::IndexValue* vb = b.FindValue(va.key);
    if (vb == nullptr) {
      out << "ONLY-A  " << va.key << "\n";
      ++*differ;
    } else if (va.value != vb->value) {
      out << "DIFFER  " << va.key << ": " << ShortRepr(va.value) << " vs " << ShortRepr(vb->value) << "\n";
      ++*differ;
    } else {
      out << "equal   " << va.key << "\n";
      ++equal;
    }
  }
  for (const sharded::checkpoint::IndexValue& vb : b.values) {
    if (a.FindValue(vb.key) == nullptr) {
      out << "ONLY-B  " << vb.key << "\n";
      ++*differ;
    }
  }
  for (const auto* side : {&a, &b}) {
    for (const auto& [key, why] : side->not_carried) {
      out << "not compared  " << sharded::checkpoint::Quote(key) << " (" << (side == &a ? "A" : "B") << "): " << why
          << "\n";
    }
  }
  return equal;
}

}  // namespace

int Diff(const std::string& a_dir, const std::string& b_dir, const DiffOptions& options, std::ostream& out,
         std::ostream& err) {
  auto a = sharded::checkpoint::OpenCheckpointForRead(a_dir);
  if (!a.ok()) {
    err << "ckpt: " << a.status().message() << "\n";
    return 1;
  }
  auto b = sharded::checkpoint::OpenCheckpointForRead(b_dir);
  if (!b.ok()) {
    err << "ckpt: " << b.status().message() << "\n";
    return 1;
  }
  std::map<std::string, const IndexTensor*> in_b;
  for (const IndexTensor& t : b->index().tensors) in_b[t.key] = &t;
  EntryReader ea(kReaderBufferBytes, nullptr);
  EntryReader eb(kReaderBufferBytes, nullptr);
  Windows windows(options.buffer_bytes / 2);
  int differ = 0, equal = 0;
  for (const IndexTensor& ta : a->index().tensors) {
    const auto it = in_b.find(ta.key);
    if (it == in_b.end()) {
      out << "ONLY-A  " << ta.key << "\n";
      ++differ;
      continue;
    }
    const IndexTensor& tb = *it->second;
    in_b.erase(it);
    if (ta.dtype != tb.dtype || ta.shape != tb.shape) {
      out << "DIFFER  " << ta.key << ": " << Describe(ta) << " vs " << Describe(tb) << "\n";
      ++differ;
      continue;
    }
    auto d = CompareTensor(*a, ea, ta, *b, eb, tb, windows);
    if (!d.ok()) {
      err << "ckpt: diff failed: " << d.status().message() << "\n";
      return 1;
    }
    if (!d->differs) {
      out << "equal   " << ta.key << "\n";
      ++equal;
    } else {
      out << "DIFFER  " << ta.key << absl::StrFormat(": max abs %.6g, max rel %.6g", d->max_abs, d->max_rel) << "\n";
      ++differ;
    }
  }
  for (const IndexTensor& tb : b->index().tensors) {
    if (in_b.count(tb.key) != 0) {
      out << "ONLY-B  " << tb.key << "\n";
      ++differ;
    }
  }
  const int equal_tensors = equal;
  const int equal_values = DiffValues(a->index(), b->index(), out, &differ);
  equal += equal_values;
  if (differ > 0) {
    out << differ << " keys differ, " << equal << " equal\n";
    return 1;
  }
  out << "EQUAL: " << equal_tensors << " tensors bit for bit";
  if (equal_values > 0) out << ", " << equal_values << " non-tensor entries equal";
  out << "\n";
  return 0;
}

}  // namespace shardlight::tools::ckpt
