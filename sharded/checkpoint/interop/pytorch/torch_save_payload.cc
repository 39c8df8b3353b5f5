#include "sharded/checkpoint/interop/pytorch/torch_save_payload.h"

#include <algorithm>
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

absl::StatusOr<std::vector<int64_t>> TorchSavePayload::DenseDimOrder(const PickleTensor& t, int64_t numel,
                                                                     const std::string& what) const {
  const size_t dims = t.sizes.size();
  auto layout = [&] { return absl::StrCat("strides (", absl::StrJoin(t.strides, ", "), ") for sizes (",
                                          absl::StrJoin(t.sizes, ", "), ")"); };
  for (size_t d = 0; d < dims; ++d) {
    if (t.strides[d] < 0) return Bad(display_, absl::StrCat(what, " has a negative stride: ", layout()));
    if (t.strides[d] == 0 && t.sizes[d] > 1 && numel > 0) {
      return Bad(display_, absl::StrCat(what, " is an expanded view (a zero stride): ", layout(),
                                        "; DCP never writes one"));
    }
  }
  if (numel <= 1) return std::vector<int64_t>();
  // Dims of one element go first (they move nothing); the others from the
  // largest stride down, which must then be the row-major strides of the
  // permuted sizes: any other layout overlaps or leaves holes.
  std::vector<int64_t> order;
  for (size_t d = 0; d < dims; ++d) {
    if (t.sizes[d] == 1) order.push_back(static_cast<int64_t>(d));
  }
  const size_t ones = order.size();
  for (size_t d = 0; d < dims; ++d) {
    if (t.sizes[d] != 1) order.push_back(static_cast<int64_t>(d));
  }
  std::stable_sort(order.begin() + static_cast<std::ptrdiff_t>(ones), order.end(),
                   [&](int64_t a, int64_t b) { return t.strides[a] > t.strides[b]; });
  int64_t expected = 1;
  for (size_t j = dims; j-- > ones;) {
    if (t.strides[order[j]] != expected) {
      return absl::UnimplementedError(absl::StrCat(display_, ": ", what, " is stored with ", layout(),
                                                   ", which is not a dense layout (its elements overlap or leave "
                                                   "holes); such layouts are not read"));
    }
    expected *= t.sizes[order[j]];  // at most numel: no overflow
  }
  bool row_major = true;
  for (size_t j = ones; j < dims; ++j) row_major = row_major && (j == ones || order[j] > order[j - 1]);
  if (row_major) return std::vector<int64_t>();
  return order;
}

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
  const int64_t storage_element = static_cast<int64_t>(c10::elementSize(storage.dtype));
  if (storage.numel < 0 || storage.numel > INT64_MAX / storage_element ||
      record->size != storage.numel * storage_element) {
    return Bad(display_, absl::StrCat(what, ": storage record 'data/", storage.key, "' holds ", record->size,
                                      " bytes but its storage declares ", storage.numel, " elements of ",
                                      storage_element, " bytes"));
  }
  // The tensor's dtype may differ from its storage's (v3 over an UntypedStorage of bytes).
  const int64_t element = static_cast<int64_t>(c10::elementSize(t.dtype));
  if (record->size % element != 0) {
    return Bad(display_, absl::StrCat(what, ": its storage of ", record->size, " bytes is not a whole number of ",
                                      c10::toString(t.dtype), " elements"));
  }
  const int64_t storage_numel = record->size / element;
  if (t.sizes.size() != t.strides.size()) {
    return Bad(display_, absl::StrCat(what, ": ", t.sizes.size(), " sizes but ", t.strides.size(), " strides"));
  }
  const std::vector<int64_t> sizes(t.sizes.begin(), t.sizes.end());
  const absl::StatusOr<int64_t> counted = CheckedNumElements(sizes);
  if (!counted.ok()) return Bad(display_, absl::StrCat(what, ": ", counted.status().message()));
  const int64_t numel = *counted;
  SL_ASSIGN_OR_RETURN(std::vector<int64_t> dim_order, DenseDimOrder(t, numel, what));
  if (t.storage_offset < 0 || numel > storage_numel || t.storage_offset > storage_numel - numel) {
    return Bad(display_, absl::StrCat(what, ": ", numel, " elements at storage offset ", t.storage_offset,
                                      " overrun its storage of ", storage_numel));
  }
  PayloadTensor out;
  out.dtype = t.dtype;
  out.sizes.assign(t.sizes.begin(), t.sizes.end());
  out.dim_order = std::move(dim_order);
  out.begin = record->begin + t.storage_offset * element;
  out.end = out.begin + numel * element;
  return out;
}

}  // namespace shardlight::sharded::checkpoint::pytorch
