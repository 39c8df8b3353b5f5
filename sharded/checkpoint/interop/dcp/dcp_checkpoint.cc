#include "sharded/checkpoint/interop/dcp/dcp_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "sharded/checkpoint/format/dtype_names.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/checkpoint/interop/pytorch/torch_save_payload.h"
#include "sharded/shard_metadata.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint::dcp {
namespace {

using pytorch::PayloadTensor;
using pytorch::PickleGraph;
using pytorch::PickleKind;
using pytorch::TorchSavePayload;

// "__3_0.distcp" was written by rank 3; -1 for any other name.
int RankOfFile(const std::string& name) {
  absl::string_view n = name;
  if (!absl::ConsumePrefix(&n, "__") || !absl::ConsumeSuffix(&n, ".distcp")) return -1;
  const size_t underscore = n.find('_');
  int rank = -1;
  if (underscore == absl::string_view::npos || !absl::SimpleAtoi(n.substr(0, underscore), &rank)) return -1;
  return rank;
}

std::string ChunkWhere(const std::string& key, absl::Span<const int64_t> offsets) {
  return absl::StrCat("key ", Quote(key), " chunk at [", absl::StrJoin(offsets, ", "), "]");
}

// Locates a chunk's payload on the chunk's first use: its zip directory and
// data.pkl are read then, and only its own. Until then the shard's byte range
// is the whole payload's (IndexOf).
class DcpDataFiles : public ForeignDataFiles {
 public:
  explicit DcpDataFiles(std::string dir) : dir_(std::move(dir)) {}

  absl::Status Locate(const File& file, const std::string& name, const IndexTensor& tensor,
                      IndexShard* shard) override {
    const std::string display =
        absl::StrCat(ChunkWhere(tensor.key, shard->offsets), ": DCP file ", Quote(JoinPath(dir_, name)));
    SL_ASSIGN_OR_RETURN(const TorchSavePayload payload,
                        TorchSavePayload::Open(file, shard->begin, shard->end - shard->begin, display));
    SL_ASSIGN_OR_RETURN(const PayloadTensor t, payload.Tensor(payload.graph().root(), "its payload"));
    if (t.dtype != tensor.dtype || !SameDims(t.sizes, shard->sizes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          display, ": the payload holds a ", DtypeName(t.dtype), " tensor of sizes ", ShapeToString(t.sizes),
          "; .metadata says ", DtypeName(tensor.dtype), " ", ShapeToString(shard->sizes)));
    }
    shard->begin = t.begin;
    shard->end = t.end;
    shard->set_dim_order(t.dim_order);
    return absl::OkStatus();
  }

 private:
  std::string dir_;
};

// The index of a DCP checkpoint: one shard per chunk.
absl::StatusOr<CheckpointIndex> IndexOf(const DcpMetadata& md, const std::string& display) {
  CheckpointIndex index;
  index.block_bytes = kDcpReadBlockBytes;
  std::unordered_map<std::string, int> ranks;  // file -> rank
  for (const DcpTensor& t : md.tensors) {
    for (const DcpChunk& c : t.chunks) ranks.emplace(c.item.file, RankOfFile(c.item.file));
  }
  int max_rank = 0;
  for (const auto& [name, rank] : ranks) max_rank = std::max(max_rank, rank);
  index.world_size = max_rank + 1;
  for (const auto& [name, rank] : ranks) index.files.push_back({name, std::max(rank, 0), 0, 0});
  std::sort(index.files.begin(), index.files.end(),
            [](const IndexFile& a, const IndexFile& b) { return a.name < b.name; });
  std::unordered_set<std::string> keys;
  for (const DcpTensor& t : md.tensors) {
    if (absl::Status s = ValidateKey(t.key); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(display, ": ", s.message()));
    }
    if (!keys.insert(t.key).second) {
      return absl::InvalidArgumentError(absl::StrCat(display, ": key ", Quote(t.key), " is listed twice"));
    }
    IndexTensor it;
    it.key = t.key;
    it.dtype = t.dtype;
    it.shape = t.size;
    it.sharded = !(t.chunks.size() == 1 && t.chunks[0].sizes == t.size);
    for (const DcpChunk& c : t.chunks) {
      IndexShard s;
      s.offsets.assign(c.offsets.begin(), c.offsets.end());
      s.sizes.assign(c.sizes.begin(), c.sizes.end());
      s.rank = std::max(ranks[c.item.file], 0);
      s.set_named_file(c.item.file);
      s.set_named_entry(absl::StrCat(t.key, "@", absl::StrJoin(c.offsets, ",")));
      s.begin = c.item.offset;  // the whole payload until the chunk is located in it (DcpDataFiles)
      s.end = c.item.offset + c.item.length;
      it.shards.push_back(std::move(s));
    }
    // The tiling alone: DCP holds dtypes a ShardedTensor does not (any dtype
    // loads into a dense tensor).
    ShardedTensorMetadata tiling = it.Metadata();
    tiling.properties.dtype = c10::ScalarType::Float;
    if (absl::Status s = tiling.Validate(); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(display, ": key ", Quote(t.key), ": the chunks do not tile the tensor: ", s.message()));
    }
    index.tensors.push_back(std::move(it));
  }
  return index;
}

// Python's repr of a float: the shortest digits that read back as the same
// double, fixed-point for exponents -4..15, else "1e-08" style ("0.1",
// "100.0", "1e+16", "inf").
std::string FloatRepr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string sci;
  for (int precision = 0; precision <= 16; ++precision) {
    sci = absl::StrFormat("%.*e", precision, v);
    if (std::strtod(sci.c_str(), nullptr) == v) break;
  }
  const bool negative = sci[0] == '-';
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int exp = std::atoi(sci.c_str() + e + 1);
  std::string out = negative ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else {
      std::string whole = digits.substr(0, std::min(digits.size(), static_cast<size_t>(exp) + 1));
      whole.resize(static_cast<size_t>(exp) + 1, '0');
      const std::string frac = digits.size() > whole.size() ? digits.substr(whole.size()) : "0";
      out += whole + "." + frac;
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  return out + absl::StrFormat("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
}

// Python's repr of a plain value; an error for anything else.
class Repr {
 public:
  explicit Repr(const PickleGraph& g) : g_(g) {}
  absl::Status Append(int id, int depth, std::string* out) {
    if (depth > 64) return absl::InvalidArgumentError("nested deeper than 64 levels");
    if (++visits_ > (1 << 20)) return absl::InvalidArgumentError("more than 2^20 parts");
    switch (g_.kind(id)) {
      case PickleKind::kNone: absl::StrAppend(out, "None"); return absl::OkStatus();
      case PickleKind::kBool: absl::StrAppend(out, g_.boolean(id) ? "True" : "False"); return absl::OkStatus();
      case PickleKind::kInt: absl::StrAppend(out, g_.integer(id)); return absl::OkStatus();
      case PickleKind::kFloat: absl::StrAppend(out, FloatRepr(g_.real(id))); return absl::OkStatus();
      case PickleKind::kString: absl::StrAppend(out, Quote(g_.text(id))); return absl::OkStatus();
      case PickleKind::kList:
      case PickleKind::kTuple: {
        const bool list = g_.kind(id) == PickleKind::kList;
        const auto items = g_.items(id);
        absl::StrAppend(out, list ? "[" : "(");
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) absl::StrAppend(out, ", ");
          SL_RETURN_IF_ERROR(Append(items[i], depth + 1, out));
        }
        absl::StrAppend(out, !list && items.size() == 1 ? ",)" : (list ? "]" : ")"));
        return absl::OkStatus();
      }
      case PickleKind::kDict: {
        const auto items = g_.items(id);
        absl::StrAppend(out, "{");
        for (size_t i = 0; i + 1 < items.size(); i += 2) {
          if (i) absl::StrAppend(out, ", ");
          SL_RETURN_IF_ERROR(Append(items[i], depth + 1, out));
          absl::StrAppend(out, ": ");
          SL_RETURN_IF_ERROR(Append(items[i + 1], depth + 1, out));
        }
        absl::StrAppend(out, "}");
        return absl::OkStatus();
      }
      default: {
        const PickleKind k = g_.kind(id);
        return absl::InvalidArgumentError(absl::StrCat(
            "it holds a ", k == PickleKind::kObject || k == PickleKind::kGlobal ? g_.text(id) : pytorch::PickleKindName(k),
            " (only None, bools, ints, floats, strings and lists, tuples and dicts of them are read)"));
      }
    }
  }

 private:
  const PickleGraph& g_;
  int64_t visits_ = 0;
};

}  // namespace

bool IsDcpCheckpoint(const std::string& dir, Storage& storage) {
  return storage.Exists(JoinPath(dir, kDcpMetadataFileName));
}

absl::StatusOr<DcpMetadata> ReadDcpMetadata(const std::string& dir, Storage& storage) {
  const std::string path = JoinPath(dir, kDcpMetadataFileName);
  if (!storage.Exists(path)) {
    return absl::NotFoundError(absl::StrCat("no DCP checkpoint at '", dir, "': ", kDcpMetadataFileName, " is missing"));
  }
  auto text = ReadWholeFile(storage, path, kMaxDcpMetadataBytes);
  if (!text.ok()) {
    return absl::Status(text.status().code(), absl::StrCat("DCP metadata ", Quote(path), ": ", text.status().message()));
  }
  return ParseDcpMetadata(*text, absl::StrCat("DCP metadata ", Quote(path)));
}

absl::StatusOr<CheckpointReader> OpenDcpCheckpoint(const std::string& dir, Storage& storage) {
  SL_ASSIGN_OR_RETURN(const DcpMetadata md, ReadDcpMetadata(dir, storage));
  SL_ASSIGN_OR_RETURN(CheckpointIndex index,
                      IndexOf(md, absl::StrCat("DCP metadata ", Quote(JoinPath(dir, kDcpMetadataFileName)))));
  return CheckpointReader::OpenForeign(dir, storage, std::move(index), md.bytes, kDcpFormatName,
                                       std::make_unique<DcpDataFiles>(dir));
}

absl::StatusOr<std::vector<DcpPlainValue>> ReadDcpValues(const std::string& dir, Storage& storage,
                                                         const DcpMetadata& metadata) {
  std::vector<DcpPlainValue> out;
  std::unordered_map<std::string, File> open;
  for (const DcpValue& v : metadata.values) {
    auto it = open.find(v.item.file);
    if (it == open.end()) {
      auto f = File::OpenForRead(storage, JoinPath(dir, v.item.file));
      if (!f.ok()) {
        return absl::Status(f.status().code(), absl::StrCat("key ", Quote(v.key), ": DCP file ",
                                                            Quote(JoinPath(dir, v.item.file)), ": ", f.status().message()));
      }
      it = open.emplace(v.item.file, *std::move(f)).first;
    }
    const std::string display =
        absl::StrCat("key ", Quote(v.key), ": DCP file ", Quote(JoinPath(dir, v.item.file)));
    SL_ASSIGN_OR_RETURN(const TorchSavePayload payload,
                        TorchSavePayload::Open(it->second, v.item.offset, v.item.length, display));
    DcpPlainValue value;
    value.key = v.key;
    const PickleGraph& g = payload.graph();
    if (g.kind(g.root()) == PickleKind::kInt) value.integer = g.integer(g.root());
    if (g.kind(g.root()) == PickleKind::kBool) value.integer = g.boolean(g.root()) ? 1 : 0;
    Repr repr(g);
    if (absl::Status s = repr.Append(g.root(), 0, &value.repr); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(display, ": ", s.message()));
    }
    out.push_back(std::move(value));
  }
  return out;
}

}  // namespace shardlight::sharded::checkpoint::dcp
