#include "sharded/checkpoint/interop/dcp/dcp_files.h"

#include <caffe2/serialize/inline_container.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/checkpoint/interop/dcp/dcp_metadata.h"
#include "sharded/checkpoint/interop/pytorch/torch_export.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint::dcp {
namespace {

using pytorch::TorchPickleWriter;

constexpr char kMetaModule[] = "torch.distributed.checkpoint.metadata";
constexpr char kTempMetadata[] = ".metadata.tmp";

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * std::max<int64_t>(sizes[d], 1);
  return strides;
}

// A torch.save zip of `pickle` and the records `more` adds, written to
// `file` from `pos`; returns its length.
template <typename More>
absl::StatusOr<int64_t> AppendZip(File& file, int64_t pos, const std::string& pickle, More more) {
  const int64_t start = pos;
  absl::Status io;
  {
    caffe2::serialize::PyTorchStreamWriter zip([&](const void* bytes, size_t n) {
      if (io.ok()) io = file.WriteAt(bytes, static_cast<int64_t>(n), pos);
      pos += static_cast<int64_t>(n);
      return n;
    });
    zip.writeRecord("data.pkl", pickle.data(), pickle.size());
    zip.writeRecord("byteorder", "little", 6);
    more(zip);
    zip.writeEndOfFile();
  }
  SL_RETURN_IF_ERROR(io);
  return pos - start;
}

void Size(TorchPickleWriter& w, const std::vector<int64_t>& v) {
  w.Global("torch", "Size");
  w.Mark();
  w.Mark();
  for (int64_t x : v) w.Int(x);
  w.Tuple();
  w.Tuple();
  w.Reduce();
}

// An instance of a DCP dataclass: cls.__new__(cls), then its fields (the
// caller pushes name/value pairs between Begin and End).
void BeginObject(TorchPickleWriter& w, const char* module, const char* cls) {
  w.Global(module, cls);
  w.EmptyTuple();
  w.NewObj();
  w.EmptyDict();
  w.Mark();
}
void EndObject(TorchPickleWriter& w) {
  w.SetItems();
  w.Build();
}

void Properties(TorchPickleWriter& w, c10::ScalarType dtype, const std::vector<int64_t>& size) {
  w.Global(kMetaModule, "TensorProperties");
  w.EmptyTuple();
  w.NewObj();
  // __setstate__'s tuple: dtype, layout, requires_grad, memory format, pin_memory, strides.
  w.Mark();
  w.Global("torch", DcpDtypeName(dtype));
  w.Global("torch.serialization", "_get_layout");
  w.Mark();
  w.String("torch.strided");
  w.Tuple();
  w.Reduce();
  w.Bool(false);
  w.Global("builtins", "getattr");
  w.Mark();
  w.Global(kMetaModule, "_MEM_FORMAT_ENCODING");
  w.String("TORCH_CONTIGUOUS_FORMAT");
  w.Tuple();
  w.Reduce();
  w.Bool(false);
  w.Mark();
  for (int64_t s : ContiguousStrides(size)) w.Int(s);
  w.Tuple();
  w.Tuple();
  w.Build();
}

void StorageInfo(TorchPickleWriter& w, const DcpItem& p) {
  BeginObject(w, "torch.distributed.checkpoint.filesystem", "_StorageInfo");
  w.String("relative_path");
  w.String(p.file);
  w.String("offset");
  w.Int(p.offset);
  w.String("length");
  w.Int(p.length);
  EndObject(w);
}

}  // namespace

absl::StatusOr<int64_t> AppendTensorPayload(File& file, int64_t pos, const std::string& key, const at::Tensor& chunk) {
  const at::Tensor data = chunk.detach().to(at::kCPU).contiguous();
  const std::vector<int64_t> sizes = data.sizes().vec();
  TorchPickleWriter pickle;
  if (!pickle.Tensor(data.scalar_type(), "0", data.numel(), 0, sizes, ContiguousStrides(sizes))) {
    return absl::InvalidArgumentError(absl::StrCat("key ", Quote(key), ": dtype has no torch storage class"));
  }
  return AppendZip(file, pos, pickle.Finish(), [&](caffe2::serialize::PyTorchStreamWriter& zip) {
    static const char kEmpty = 0;
    const size_t n = static_cast<size_t>(data.numel() * data.element_size());
    zip.writeRecord("data/0", n == 0 ? &kEmpty : data.data_ptr(), n);
  });
}

absl::StatusOr<int64_t> AppendValuePayload(File& file, int64_t pos, const PlainValue& value) {
  TorchPickleWriter pickle;
  pickle.Value(value);
  return AppendZip(file, pos, pickle.Finish(), [](caffe2::serialize::PyTorchStreamWriter&) {});
}

absl::StatusOr<std::string> DcpMetadataPickle(const std::vector<DcpEntry>& entries) {
  TorchPickleWriter w;
  BeginObject(w, kMetaModule, "Metadata");
  w.String("state_dict_metadata");
  w.EmptyDict();
  w.Mark();
  for (const DcpEntry& e : entries) {
    w.String(e.key);
    if (e.is_value) {
      // A dataclass without fields: Python pickles it with no state (no BUILD).
      w.Global(kMetaModule, "BytesStorageMetadata");
      w.EmptyTuple();
      w.NewObj();
      continue;
    }
    if (e.chunks.empty()) return absl::InternalError(absl::StrCat("key ", Quote(e.key), ": no rank wrote a chunk"));
    BeginObject(w, kMetaModule, "TensorStorageMetadata");
    w.String("properties");
    Properties(w, e.dtype, e.size);
    w.String("size");
    Size(w, e.size);
    w.String("chunks");
    w.EmptyList();
    w.Mark();
    for (const DcpChunk& c : e.chunks) {
      BeginObject(w, kMetaModule, "ChunkStorageMetadata");
      w.String("offsets");
      Size(w, c.offsets);
      w.String("sizes");
      Size(w, c.sizes);
      EndObject(w);
    }
    w.Appends();
    EndObject(w);
  }
  w.SetItems();
  w.String("planner_data");  // flat keys: each its own one-part path
  w.EmptyDict();
  w.Mark();
  for (const DcpEntry& e : entries) {
    w.String(e.key);
    w.Mark();
    w.String(e.key);
    w.Tuple();
  }
  w.SetItems();
  w.String("storage_data");
  w.EmptyDict();
  w.Mark();
  for (const DcpEntry& e : entries) {
    if (e.is_value) {
      BeginObject(w, kMetaModule, "MetadataIndex");
      w.String("fqn");
      w.String(e.key);
      w.String("offset");
      w.None();
      w.String("index");
      w.None();
      EndObject(w);
      StorageInfo(w, e.value);
      continue;
    }
    for (size_t i = 0; i < e.chunks.size(); ++i) {
      BeginObject(w, kMetaModule, "MetadataIndex");
      w.String("fqn");
      w.String(e.key);
      w.String("offset");
      Size(w, e.chunks[i].offsets);
      w.String("index");
      w.Int(static_cast<int64_t>(i));
      EndObject(w);
      StorageInfo(w, e.chunks[i].item);
    }
  }
  w.SetItems();
  w.String("storage_meta");
  w.None();
  w.String("version");
  w.String("1.0.0");
  EndObject(w);
  return w.Finish();
}

absl::Status CommitDcpMetadata(Storage& storage, const std::string& dir, const std::string& pickle, bool exclusive,
                               bool* committed) {
  *committed = false;
  const std::string metadata = JoinPath(dir, kDcpMetadataFileName);
  if (exclusive) {
    // An object store, no .metadata when the save began: it is created exclusively
    // (S3: If-None-Match: *); a save that committed first wins.
    const absl::Status put = WriteNewFile(storage, metadata, pickle);
    if (absl::IsAlreadyExists(put)) {
      return absl::AlreadyExistsError(
          absl::StrCat("another save committed '", dir, "' first: this save did not commit (", put.message(), ")"));
    }
    SL_RETURN_IF_ERROR(put);
  } else {
    const std::string temp = JoinPath(dir, kTempMetadata);
    SL_RETURN_IF_ERROR(storage.Remove(temp));  // a leftover of an earlier crash
    SL_RETURN_IF_ERROR(WriteNewFile(storage, temp, pickle));
    SL_RETURN_IF_ERROR(storage.Rename(temp, metadata));
  }
  *committed = true;
  absl::Status durable = storage.SyncDirectory(dir);
  if (!durable.ok()) {
    return absl::Status(durable.code(),
                        absl::StrCat("the DCP checkpoint is committed but may not be durable: ", durable.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> RemoveStaleDcpFiles(Storage& storage, const std::string& dir, const std::set<std::string>& keep) {
  SL_ASSIGN_OR_RETURN(const std::vector<std::string> names, storage.List(dir));
  int removed = 0;
  for (const std::string& name : names) {
    if (!absl::StartsWith(name, "__") || !absl::EndsWith(name, ".distcp") || keep.count(name) > 0) continue;
    SL_RETURN_IF_ERROR(storage.Remove(JoinPath(dir, name)));
    ++removed;
  }
  return removed;
}

}  // namespace shardlight::sharded::checkpoint::dcp
