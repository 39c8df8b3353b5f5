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
#include "sharded/checkpoint/interop/pytorch/pickle_values.h"
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
  const std::string display = absl::StrCat("DCP metadata ", Quote(JoinPath(dir, kDcpMetadataFileName)));
  SL_ASSIGN_OR_RETURN(CheckpointIndex index, IndexOf(md, display));
  // The plain values, as this format's own index holds them; the others
  // (and keys this format cannot hold) are named, never dropped unsaid.
  SL_ASSIGN_OR_RETURN(const std::vector<DcpPlainValue> values, ReadDcpValues(dir, storage, md));
  for (const DcpPlainValue& v : values) {
    if (!v.not_carried.empty()) {
      index.not_carried.push_back({v.key, v.not_carried});
    } else if (absl::Status s = ValidateKey(v.key); !s.ok()) {
      index.not_carried.push_back({v.key, std::string(s.message())});
    } else if (index.Find(v.key) != nullptr || index.FindValue(v.key) != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(display, ": key ", Quote(v.key), " is listed twice"));
    } else {
      index.values.push_back({v.key, v.value});
      index.Reindex();
    }
  }
  if (absl::Status s = ValidateIndexValues(index, display); !s.ok()) return s;
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
    auto plain = pytorch::PlainValueOf(g, g.root());
    if (plain.ok()) {
      value.value = *std::move(plain);
      value.repr = value.value.Repr();
      if (value.value.kind() == PlainValue::Kind::kInt || value.value.kind() == PlainValue::Kind::kBool) {
        value.integer = value.value.integer();
      }
    } else {
      value.not_carried = std::string(plain.status().message());
      value.repr = absl::StrCat("<not carried: ", value.not_carried, ">");
    }
    out.push_back(std::move(value));
  }
  return out;
}

}  // namespace shardlight::sharded::checkpoint::dcp
