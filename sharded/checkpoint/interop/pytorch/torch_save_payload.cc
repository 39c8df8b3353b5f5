#include "sharded/checkpoint/interop/pytorch/torch_save_payload.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/shard_metadata.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint::pytorch {
namespace {

absl::Status Bad(const std::string& display, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(display, ": ", what));
}

}  // namespace

absl::StatusOr<TorchSavePayload> TorchSavePayload::Open(const File& file, int64_t begin, int64_t length,
                                                        const std::string& display, ObjectState objects) {
  if (begin < 0 || length < 0) return Bad(display, "a negative byte range");
  SL_ASSIGN_OR_RETURN(ZipReader zip, ZipReader::OpenRange(file, static_cast<uint64_t>(begin),
                                                          static_cast<uint64_t>(length), display));
  TorchSavePayload p(std::move(zip));
  p.display_ = display;
  if (p.zip_.Find("byteorder") != nullptr) {
    SL_ASSIGN_OR_RETURN(const std::string order, p.zip_.ReadSmall("byteorder", 16));
    if (order != "little") return Bad(display, absl::StrCat("byte order '", order, "': only little-endian archives are read"));
  }
  if (p.zip_.Find("data.pkl") == nullptr) {
    return Bad(display, "no data.pkl record: not a torch.save archive (or a legacy pre-1.6 one)");
  }
  SL_ASSIGN_OR_RETURN(const std::string bytes, p.zip_.ReadSmall("data.pkl", kMaxPayloadPickleBytes));
  auto graph = ReadPickle(bytes, PickleLimits(), objects);
  if (!graph.ok()) return Bad(display, absl::StrCat("data.pkl: ", graph.status().message()));
  p.graph_ = *std::move(graph);
  return p;
}

absl::StatusOr<PayloadRecord> TorchSavePayload::Record(const std::string& name) const {
  const ZipRecord* r = zip_.Find(name);
  if (r == nullptr) return absl::NotFoundError(absl::StrCat(display_, ": no record '", zip_.top_folder(), name, "'"));
  SL_ASSIGN_OR_RETURN(const uint64_t begin, zip_.StoredDataOffset(*r));
  return PayloadRecord{static_cast<int64_t>(begin), static_cast<int64_t>(r->size)};
}

absl::StatusOr<PayloadTensor> TorchSavePayload::Tensor(int node, const std::string& what) const {
  if (graph_.kind(node) != PickleKind::kTensor) {
    return Bad(display_, absl::StrCat(what, " is a ", PickleKindName(graph_.kind(node)), ", not a tensor"));
  }
  const PickleTensor t = graph_.tensor(node);
  const PickleStorage storage = graph_.storage(t.storage);
  auto record = Record(absl::StrCat("data/", storage.key));
  if (!record.ok()) return Bad(display_, absl::StrCat(what, ": ", record.status().message()));
  const int64_t element = static_cast<int64_t>(c10::elementSize(storage.dtype));
  if (storage.numel < 0 || record->size != storage.numel * element) {
    return Bad(display_, absl::StrCat(what, ": storage record 'data/", storage.key, "' holds ", record->size,
                                      " bytes but its storage declares ", storage.numel, " elements of ", element,
                                      " bytes"));
  }
  if (t.sizes.size() != t.strides.size()) {
    return Bad(display_, absl::StrCat(what, ": ", t.sizes.size(), " sizes but ", t.strides.size(), " strides"));
  }
  const std::vector<int64_t> sizes(t.sizes.begin(), t.sizes.end());
  const absl::StatusOr<int64_t> counted = CheckedNumElements(sizes);
  if (!counted.ok()) return Bad(display_, absl::StrCat(what, ": ", counted.status().message()));
  const int64_t numel = *counted;
  if (numel > 0) {
    int64_t expected = 1;
    for (size_t i = t.sizes.size(); i-- > 0;) {
      if (t.sizes[i] != 1 && t.strides[i] != expected) {
        return absl::UnimplementedError(absl::StrCat(display_, ": ", what, " is stored with strides (",
                                                     absl::StrJoin(t.strides, ", "), ") for sizes (",
                                                     absl::StrJoin(t.sizes, ", "),
                                                     "), not row-major; such layouts are not read"));
      }
      expected *= t.sizes[i];
    }
  }
  if (t.storage_offset < 0 || numel > storage.numel || t.storage_offset > storage.numel - numel) {
    return Bad(display_, absl::StrCat(what, ": ", numel, " elements at storage offset ", t.storage_offset,
                                      " overrun its storage of ", storage.numel));
  }
  PayloadTensor out;
  out.dtype = storage.dtype;
  out.sizes.assign(t.sizes.begin(), t.sizes.end());
  out.begin = record->begin + t.storage_offset * element;
  out.end = out.begin + numel * element;
  return out;
}

}  // namespace shardlight::sharded::checkpoint::pytorch
