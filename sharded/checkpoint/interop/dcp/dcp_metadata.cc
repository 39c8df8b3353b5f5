#include "sharded/checkpoint/interop/dcp/dcp_metadata.h"

#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/checkpoint/format/dtype_names.h"
#include "sharded/checkpoint/interop/pytorch/pickle_reader.h"
#include "sharded/dtype_table.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint::dcp {
namespace {

using pytorch::PickleGraph;
using pytorch::PickleKind;

constexpr char kMetadata[] = "torch.distributed.checkpoint.metadata.Metadata";
constexpr char kTensorMeta[] = "torch.distributed.checkpoint.metadata.TensorStorageMetadata";
constexpr char kBytesMeta[] = "torch.distributed.checkpoint.metadata.BytesStorageMetadata";
constexpr char kChunkMeta[] = "torch.distributed.checkpoint.metadata.ChunkStorageMetadata";
constexpr char kProperties[] = "torch.distributed.checkpoint.metadata.TensorProperties";
constexpr char kIndex[] = "torch.distributed.checkpoint.metadata.MetadataIndex";
constexpr char kStorageInfo[] = "torch.distributed.checkpoint.filesystem._StorageInfo";
constexpr char kSize[] = "torch.Size";

// Every class an object of the pickle may have.
bool Whitelisted(const std::string& name) {
  static const std::set<std::string> kClasses = {
      kMetadata, kTensorMeta, kBytesMeta, kChunkMeta, kProperties, kIndex, kStorageInfo, kSize,
      "torch.distributed.checkpoint.metadata.StorageMeta", "torch.serialization._get_layout", "builtins.getattr",
      "pathlib.Path", "pathlib.PosixPath", "pathlib.PurePosixPath", "pathlib.WindowsPath", "pathlib.PureWindowsPath"};
  return kClasses.count(name) > 0;
}

class Decoder {
 public:
  Decoder(const PickleGraph& g, const std::string& display) : g_(g), display_(display) {}

  absl::Status Bad(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(display_, ": ", what));
  }
  PickleKind K(int id) const { return g_.kind(id); }
  std::string T(int id) const { return std::string(g_.text(id)); }
  bool Is(int id, PickleKind kind) const { return id >= 0 && K(id) == kind; }
  bool IsObject(int id, const char* cls) const { return Is(id, PickleKind::kObject) && g_.text(id) == cls; }

  // An object of class `cls`: its state dict's fields by name.
  absl::StatusOr<std::map<std::string, int>> Fields(int id, const char* cls, const std::string& what) const {
    if (!IsObject(id, cls)) return Bad(absl::StrCat(what, " is ", Describe(id), "; expected a ", cls));
    const int state = g_.object_state(id);
    std::map<std::string, int> fields;
    if (state < 0) return fields;  // no BUILD: every field at its default
    if (K(state) != PickleKind::kDict) return Bad(absl::StrCat(what, ": its state is ", Describe(state), ", not a dict"));
    const auto items = g_.items(state);
    for (size_t i = 0; i + 1 < items.size(); i += 2) {
      if (K(items[i]) != PickleKind::kString) return Bad(absl::StrCat(what, ": a field name that is not a str"));
      fields[T(items[i])] = items[i + 1];
    }
    return fields;
  }

  std::string Describe(int id) const {
    if (id < 0) return "missing";
    if (K(id) == PickleKind::kObject || K(id) == PickleKind::kGlobal) return absl::StrCat("a ", g_.text(id));
    return absl::StrCat("a ", pytorch::PickleKindName(K(id)));
  }

  static int Get(const std::map<std::string, int>& fields, const char* name) {
    auto it = fields.find(name);
    return it == fields.end() ? -1 : it->second;
  }

  absl::StatusOr<int64_t> Int(int id, const std::string& what) const {
    if (!Is(id, PickleKind::kInt)) return Bad(absl::StrCat(what, " is ", Describe(id), ", not an int"));
    return g_.integer(id);
  }
  absl::StatusOr<std::string> Str(int id, const std::string& what) const {
    if (!Is(id, PickleKind::kString)) return Bad(absl::StrCat(what, " is ", Describe(id), ", not a str"));
    return T(id);
  }
  bool IsNone(int id) const { return id < 0 || K(id) == PickleKind::kNone; }

  // torch.Size((a, b, ...)), or a plain tuple or list of ints.
  absl::StatusOr<std::vector<int64_t>> Size(int id, const std::string& what) const {
    int seq = id;
    if (IsObject(id, kSize)) {
      const int args = g_.object_arguments(id);
      if (!Is(args, PickleKind::kTuple) || g_.items(args).size() != 1) {
        return Bad(absl::StrCat(what, ": torch.Size without its one argument"));
      }
      seq = g_.items(args)[0];
    }
    if (!Is(seq, PickleKind::kTuple) && !Is(seq, PickleKind::kList)) {
      return Bad(absl::StrCat(what, " is ", Describe(id), ", not a size"));
    }
    std::vector<int64_t> out;
    for (int e : g_.items(seq)) {
      if (K(e) != PickleKind::kInt || g_.integer(e) < 0) {
        return Bad(absl::StrCat(what, " holds ", Describe(e), "; sizes are non-negative ints"));
      }
      out.push_back(g_.integer(e));
    }
    return out;
  }

  absl::StatusOr<c10::ScalarType> Dtype(int properties, const std::string& key) const {
    const std::string what = absl::StrCat("key '", key, "': TensorProperties");
    if (!IsObject(properties, kProperties)) return Bad(absl::StrCat(what, " is ", Describe(properties)));
    const int state = g_.object_state(properties);
    int dtype = -1;
    if (Is(state, PickleKind::kTuple) && !g_.items(state).empty()) {
      dtype = g_.items(state)[0];  // (dtype, layout, requires_grad, memory_format, pin_memory[, strides])
    } else if (Is(state, PickleKind::kDict)) {
      SL_ASSIGN_OR_RETURN(auto fields, Fields(properties, kProperties, what));
      dtype = Get(fields, "dtype");
    }
    if (!Is(dtype, PickleKind::kGlobal)) return Bad(absl::StrCat(what, " has no dtype"));
    c10::ScalarType out;
    if (!DcpDtype(g_.text(dtype), &out)) {
      const std::string why = UnavailableDtypeMessage(g_.text(dtype));
      return absl::InvalidArgumentError(absl::StrCat(display_, ": key '", key, "' has dtype ", g_.text(dtype), ", ",
                                                     why.empty() ? "which a shardlight checkpoint cannot hold" : why));
    }
    return out;
  }

  absl::StatusOr<DcpItem> Item(int info, const std::string& what) const {
    SL_ASSIGN_OR_RETURN(auto fields, Fields(info, kStorageInfo, what));
    DcpItem item;
    SL_ASSIGN_OR_RETURN(item.file, Str(Get(fields, "relative_path"), what + ": relative_path"));
    SL_ASSIGN_OR_RETURN(item.offset, Int(Get(fields, "offset"), what + ": offset"));
    SL_ASSIGN_OR_RETURN(item.length, Int(Get(fields, "length"), what + ": length"));
    if (item.file.empty() || item.file == "." || item.file == ".." || absl::StrContains(item.file, '/') ||
        absl::StrContains(item.file, '\0') || item.file == kDcpMetadataFileName) {
      return Bad(absl::StrCat(what, ": relative_path '", item.file, "' is not a data file of the checkpoint directory"));
    }
    if (item.offset < 0 || item.length < 0 || item.offset > INT64_MAX - item.length) {
      return Bad(absl::StrCat(what, ": bytes [", item.offset, ", +", item.length, ") are not a byte range"));
    }
    const int transforms = Get(fields, "transform_descriptors");
    if (!IsNone(transforms) && !g_.items(transforms).empty()) {
      std::vector<std::string> names;
      for (int t : g_.items(transforms)) names.push_back(K(t) == PickleKind::kString ? T(t) : Describe(t));
      return absl::UnimplementedError(absl::StrCat(display_, ": ", what, " is stored through transforms (",
                                                   absl::StrJoin(names, ", "),
                                                   "); only plain FileSystemWriter payloads are read"));
    }
    return item;
  }

  absl::StatusOr<DcpMetadata> Run() {
    for (int id = 0; id < g_.size(); ++id) {
      if (K(id) == PickleKind::kObject && !Whitelisted(T(id))) {
        return Bad(absl::StrCat("the pickle builds a ", g_.text(id),
                                ", which is not one of DCP's metadata classes (nothing was run)"));
      }
    }
    SL_ASSIGN_OR_RETURN(auto top, Fields(g_.root(), kMetadata, "the pickle's root"));
    DcpMetadata out;
    const int version = Get(top, "version");
    if (!IsNone(version)) {
      SL_ASSIGN_OR_RETURN(out.version, Str(version, "version"));
      if (!absl::StartsWith(out.version, "1.")) {
        return absl::FailedPreconditionError(absl::StrCat(display_, ": DCP format version ", out.version,
                                                          "; this reader knows 1.x"));
      }
    }
    // planner_data: each key's path in the nested state dict, (str|int, ...).
    const int planner = Get(top, "planner_data");
    if (!IsNone(planner)) {
      if (K(planner) != PickleKind::kDict) return Bad(absl::StrCat("planner_data is ", Describe(planner), ", not a dict"));
      const auto paths = g_.items(planner);
      for (size_t i = 0; i + 1 < paths.size(); i += 2) {
        SL_ASSIGN_OR_RETURN(const std::string key, Str(paths[i], "a planner_data key"));
        const int path = paths[i + 1];
        bool ok = K(path) == PickleKind::kTuple || K(path) == PickleKind::kList;
        for (size_t j = 0; ok && j < g_.items(path).size(); ++j) {
          const PickleKind k = K(g_.items(path)[j]);
          ok = k == PickleKind::kString || k == PickleKind::kInt;
        }
        if (!ok) {
          return Bad(absl::StrCat("planner_data of key '", key, "' is ", Describe(paths[i + 1]),
                                  ", not a path of names and indices"));
        }
      }
    }
    // storage_data: (key, chunk offsets) -> payload.
    std::unordered_map<std::string, DcpItem> items;
    const int storage = Get(top, "storage_data");
    if (!Is(storage, PickleKind::kDict)) return Bad(absl::StrCat("storage_data is ", Describe(storage), ", not a dict"));
    const auto entries = g_.items(storage);
    for (size_t i = 0; i + 1 < entries.size(); i += 2) {
      SL_ASSIGN_OR_RETURN(auto index, Fields(entries[i], kIndex, "a storage_data key"));
      SL_ASSIGN_OR_RETURN(const std::string fqn, Str(Get(index, "fqn"), "a storage_data key's fqn"));
      std::string id = fqn;
      const int offset = Get(index, "offset");
      if (!IsNone(offset)) {
        SL_ASSIGN_OR_RETURN(auto offsets, Size(offset, absl::StrCat("storage_data key '", fqn, "': offset")));
        id = ChunkId(fqn, offsets);
      }
      SL_ASSIGN_OR_RETURN(DcpItem item, Item(entries[i + 1], absl::StrCat("key '", fqn, "'")));
      if (!items.emplace(id, std::move(item)).second) {
        return Bad(absl::StrCat("storage_data lists key '", fqn, "' at the same offset twice"));
      }
    }
    const int sd = Get(top, "state_dict_metadata");
    if (!Is(sd, PickleKind::kDict)) return Bad(absl::StrCat("state_dict_metadata is ", Describe(sd), ", not a dict"));
    size_t used = 0;
    const auto keys = g_.items(sd);
    for (size_t i = 0; i + 1 < keys.size(); i += 2) {
      SL_ASSIGN_OR_RETURN(const std::string key, Str(keys[i], "a state_dict_metadata key"));
      const int value = keys[i + 1];
      const std::string k = absl::StrCat("key '", key, "'");
      if (IsObject(value, kBytesMeta)) {
        auto it = items.find(key);
        if (it == items.end()) return Bad(absl::StrCat(k, " (a pickled value) has no storage_data entry"));
        out.values.push_back({key, it->second});
        ++used;
        continue;
      }
      SL_ASSIGN_OR_RETURN(auto fields, Fields(value, kTensorMeta, k));
      DcpTensor t;
      t.key = key;
      SL_ASSIGN_OR_RETURN(t.dtype, Dtype(Get(fields, "properties"), key));
      SL_ASSIGN_OR_RETURN(t.size, Size(Get(fields, "size"), k + ": size"));
      const int chunks = Get(fields, "chunks");
      if (!Is(chunks, PickleKind::kList)) return Bad(absl::StrCat(k, ": chunks is not a list"));
      for (int c : g_.items(chunks)) {
        SL_ASSIGN_OR_RETURN(auto cf, Fields(c, kChunkMeta, k + ": a chunk"));
        DcpChunk chunk;
        SL_ASSIGN_OR_RETURN(chunk.offsets, Size(Get(cf, "offsets"), k + ": a chunk's offsets"));
        SL_ASSIGN_OR_RETURN(chunk.sizes, Size(Get(cf, "sizes"), k + ": a chunk's sizes"));
        if (chunk.offsets.size() != t.size.size() || chunk.sizes.size() != t.size.size()) {
          return Bad(absl::StrCat(k, ": a chunk of ", chunk.sizes.size(), " dims in a tensor of ", t.size.size()));
        }
        for (size_t d = 0; d < t.size.size(); ++d) {
          if (chunk.offsets[d] > t.size[d] || chunk.sizes[d] > t.size[d] - chunk.offsets[d]) {
            return Bad(absl::StrCat(k, ": the chunk at [", absl::StrJoin(chunk.offsets, ", "), "] of sizes [",
                                    absl::StrJoin(chunk.sizes, ", "), "] exceeds the tensor's size [",
                                    absl::StrJoin(t.size, ", "), "]"));
          }
        }
        auto it = items.find(ChunkId(key, chunk.offsets));
        if (it == items.end()) {
          return Bad(absl::StrCat(k, ": the chunk at [", absl::StrJoin(chunk.offsets, ", "),
                                  "] has no storage_data entry"));
        }
        chunk.item = it->second;
        ++used;
        t.chunks.push_back(std::move(chunk));
      }
      out.tensors.push_back(std::move(t));
    }
    if (used != items.size()) {
      return Bad(absl::StrCat("storage_data has ", items.size(), " entries but state_dict_metadata names ", used));
    }
    return out;
  }

 private:
  static std::string ChunkId(const std::string& fqn, const std::vector<int64_t>& offsets) {
    return absl::StrCat(fqn, std::string(1, '\0'), absl::StrJoin(offsets, ","));
  }

  const PickleGraph& g_;
  const std::string& display_;
};

}  // namespace

bool DcpDtype(absl::string_view torch_name, c10::ScalarType* dtype) {
  const DtypeInfo* d = FindDtypeByTorchName(torch_name);
  if (d == nullptr || !absl::StartsWith(torch_name, "torch.")) return false;
  *dtype = d->dtype;
  return true;
}

std::string DcpDtypeName(c10::ScalarType dtype) {
  const DtypeInfo* d = FindDtype(dtype);
  return d == nullptr ? "" : d->torch_name;
}

absl::StatusOr<DcpMetadata> ParseDcpMetadata(absl::string_view bytes, const std::string& display) {
  auto graph = pytorch::ReadPickle(bytes, pytorch::PickleLimits(), pytorch::ObjectState::kKeep);
  if (!graph.ok()) return absl::InvalidArgumentError(absl::StrCat(display, ": ", graph.status().message()));
  // torch's pickle.load would stop at STOP and ignore the rest; no DCP writer
  // writes anything after it, so more bytes mean a damaged or concatenated
  // file, refused rather than read as if whole.
  if (graph->pickle_bytes() != static_cast<int64_t>(bytes.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        display, ": ", static_cast<int64_t>(bytes.size()) - graph->pickle_bytes(),
        " bytes after the pickle's STOP opcode (at byte ", graph->pickle_bytes() - 1,
        "): .metadata is one pickle and nothing else; the file is damaged or something was appended to it"));
  }
  SL_ASSIGN_OR_RETURN(DcpMetadata out, Decoder(*graph, display).Run());
  out.bytes = static_cast<int64_t>(bytes.size());
  return out;
}

}  // namespace shardlight::sharded::checkpoint::dcp
