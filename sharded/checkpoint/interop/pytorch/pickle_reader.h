// A restricted reader of Python pickles, for the data.pkl record of files
// written by torch.save (and so PyTorch Lightning .ckpt files).
//
// It interprets the pickle opcodes into a graph of plain records and never
// executes code or constructs a Python class: a GLOBAL only names something.
// Exactly these callables are understood when a pickle calls them (REDUCE):
//   torch._utils._rebuild_tensor_v2   -> a tensor record (storage, offset,
//                                        sizes, strides, requires_grad)
//   torch._utils._rebuild_tensor_v3   -> the same, of the torch.<dtype> it
//                                        names (float8, uint16..64, complex32;
//                                        an opaque object saying why for a
//                                        dtype sharded/dtype_table.h lacks)
//   torch._utils._rebuild_parameter   -> the tensor it wraps
//   collections.OrderedDict           -> a dict
// and persistent ids ('storage', torch.<T>Storage, key, location, numel)
// become storage records for the whitelisted storage classes (those of
// sharded/dtype_table.h, and torch.storage.UntypedStorage: bytes). Anything else a
// pickle builds (REDUCE of another callable, NEWOBJ, INST, OBJ, sets) becomes
// an opaque record carrying only the class name; items and state given to it
// are discarded, unless ReadPickle is asked to keep them (ObjectState::kKeep,
// for readers of pickled dataclasses such as DCP's .metadata: then an
// object's arguments and BUILD state are recorded, never applied). Callers
// decide whether an opaque record is an error (inside the entries they
// import), a whitelisted class they decode from what was recorded, or
// something to skip and report.
//
// Malformed input (truncation, bad opcodes, stack underflow, memo misses,
// ill-typed arguments to a whitelisted callable) is InvalidArgument naming the
// byte offset. Resource use is bounded by the input size and PickleLimits:
// every opcode builds at most one node, texts (names included) may hold at
// most twice the input plus 1 MiB, so the graph is a small multiple of the
// pickle (pickle_reader_test measures it: a torch.save-style state dict of
// 100k one-element tensors builds ~3.7 bytes of graph per pickle byte, a
// list of Nones 4 bytes per None).
// ReadPickle takes bytes and touches nothing else: a fuzzing entry point.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_PICKLE_READER_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_PICKLE_READER_H_

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace shardlight::sharded::checkpoint::pytorch {

enum class PickleKind : uint8_t {
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,   // str (UTF-8 as pickled)
  kBytes,    // bytes, bytearray
  kList,
  kTuple,
  kDict,     // dict or OrderedDict, insertion order
  kGlobal,   // a named module attribute (only ever a name)
  kStorage,  // a persistent storage reference
  kTensor,
  kObject,   // anything else: opaque, only its class name is kept
};

// The name of a kind for messages ("dict", "tensor", ...).
const char* PickleKindName(PickleKind kind);

// A tensor record, as _rebuild_tensor_v2/v3 declared it (unchecked: TorchFile
// checks it against its storage). storage_offset and strides count elements
// of `dtype`, which may differ from the storage's (an UntypedStorage is bytes).
struct PickleTensor {
  int storage = -1;  // node id of its kStorage
  int64_t storage_offset = 0;
  absl::Span<const int64_t> sizes;
  absl::Span<const int64_t> strides;
  bool requires_grad = false;
  c10::ScalarType dtype = c10::ScalarType::Float;
};

// A persistent storage reference ('storage', torch.<T>Storage, key, location,
// numel); an UntypedStorage is kByte, numel its bytes.
struct PickleStorage {
  absl::string_view key;  // its record is data/<key>
  absl::string_view location;
  c10::ScalarType dtype = c10::ScalarType::Float;
  int64_t numel = 0;
};

// What a pickle built, as compact records: each node is 16 bytes; texts,
// tuple items, tensor dims live in shared arenas, a list or dict owns one
// vector of its items; None, True, False, () and each int in [0, 1024) are
// one node each, however
// often they occur. Ids are ints in [0, size()); shared (memoized) objects
// are one node. Accessors take a node of the kind they name (the kind is
// checked by the caller; another kind reads as empty/zero).
class PickleGraph {
 public:
  int root() const { return root_; }
  // Bytes of the input up to and including the STOP opcode (what follows
  // it, Python's pickle.load leaves unread).
  int64_t pickle_bytes() const { return pickle_bytes_; }
  int size() const { return static_cast<int>(nodes_.size()); }
  PickleKind kind(int id) const { return nodes_[static_cast<size_t>(id)].kind; }
  bool boolean(int id) const;           // kBool
  int64_t integer(int id) const;        // kInt
  double real(int id) const;            // kFloat
  // kString/kBytes: the bytes; kGlobal/kObject: "module.qualname"; kStorage: its key.
  absl::string_view text(int id) const;
  // kList/kTuple: element ids; kDict: key0, value0, key1, value1, ...
  absl::Span<const int> items(int id) const;
  PickleStorage storage(int id) const;  // kStorage
  PickleTensor tensor(int id) const;    // kTensor
  // kObject read with ObjectState::kKeep: the tuple it was called or
  // constructed with, and the state BUILD gave it; -1 when none (always -1
  // for a graph read with kDiscard).
  int object_arguments(int id) const;
  int object_state(int id) const;
  // Bytes the graph holds (capacities): what its per-node cost is measured by.
  int64_t MemoryBytes() const;

 private:
  friend class PickleBuilder;
  struct Node {
    PickleKind kind = PickleKind::kNone;
    bool flag = false;  // kBool: the value
    uint32_t a = 0;     // texts: length; kTuple: count; kList/kDict/kStorage/kTensor: side-table index
    int64_t b = 0;      // kInt: value; kFloat: bits; texts: arena offset; kTuple: first item in tuple_items_
  };
  struct Storage {
    uint64_t key = 0, location = 0;  // text_ offsets
    uint32_t key_len = 0, location_len = 0;
    int64_t numel = 0;
    c10::ScalarType dtype = c10::ScalarType::Float;
  };
  struct Tensor {
    int storage = -1;
    uint32_t sizes = 0, strides = 0;  // counts; dims_[dims .. dims + sizes + strides)
    uint64_t dims = 0;
    int64_t storage_offset = 0;
    bool requires_grad = false;
    c10::ScalarType dtype = c10::ScalarType::Float;
  };
  static constexpr uint32_t kNoItems = 0xFFFFFFFFu;  // a list/dict nothing was added to

  std::vector<Node> nodes_;
  std::string text_;
  std::vector<int> tuple_items_;
  std::vector<std::vector<int>> containers_;
  std::vector<Storage> storages_;
  std::vector<Tensor> tensors_;
  std::vector<int64_t> dims_;
  std::unordered_map<int, std::pair<int, int>> object_parts_;  // kKeep: object -> {arguments, state}
  int root_ = -1;
  int64_t pickle_bytes_ = 0;
};

struct PickleLimits {
  int64_t max_stack = 1 << 20;   // entries on the stack (marks included)
  int64_t max_memo = 1 << 22;    // memo slots
  int64_t max_nodes = 1 << 26;   // records built
};

// What ReadPickle records of an opaque object (kObject): only its class name
// (kDiscard), or also its arguments and state (kKeep; see object_arguments).
enum class ObjectState { kDiscard, kKeep };

absl::StatusOr<PickleGraph> ReadPickle(absl::string_view bytes, const PickleLimits& limits = {},
                                       ObjectState objects = ObjectState::kDiscard);

// The dtype of a whitelisted storage class ("torch.FloatStorage"; kByte for
// "torch.storage.UntypedStorage"), or false when it is not one.
bool StorageClassDtype(absl::string_view qualified_name, c10::ScalarType* dtype);

}  // namespace shardlight::sharded::checkpoint::pytorch

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_PICKLE_READER_H_
