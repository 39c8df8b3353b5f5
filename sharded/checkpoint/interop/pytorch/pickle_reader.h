// A restricted reader of Python pickles, for the data.pkl record of files
// written by torch.save (and so PyTorch Lightning .ckpt files).
//
// It interprets the pickle opcodes into a graph of plain records and never
// executes code or constructs a Python class: a GLOBAL only names something.
// Exactly these callables are understood when a pickle calls them (REDUCE):
//   torch._utils._rebuild_tensor_v2   -> a tensor record (storage, offset,
//                                        sizes, strides, requires_grad)
//   torch._utils._rebuild_parameter   -> the tensor it wraps
//   collections.OrderedDict           -> a dict
// and persistent ids ('storage', torch.<T>Storage, key, location, numel)
// become storage records for the whitelisted storage classes. Anything else a
// pickle builds (REDUCE of another callable, NEWOBJ, INST, OBJ, sets) becomes
// an opaque record carrying only the class name; items and state given to it
// are discarded (unless ReadPickle is asked to keep them, ObjectState::kKeep,
// for readers of pickled dataclasses such as DCP's .metadata). Callers decide
// whether an opaque record is an error (inside the entries they import), a
// class they decode from its recorded arguments and state (whitelisted by
// name, never run), or something to skip and report.
//
// Malformed input (truncation, bad opcodes, stack underflow, memo misses,
// ill-typed arguments to a whitelisted callable) is InvalidArgument naming the
// byte offset. Resource use is bounded by the input size and PickleLimits.
// ReadPickle takes bytes and touches nothing else: a fuzzing entry point.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_PICKLE_READER_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_PICKLE_READER_H_

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardlight::sharded::checkpoint::pytorch {

enum class PickleKind {
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

struct PickleNode {
  PickleKind kind = PickleKind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  // kString/kBytes: the bytes; kGlobal/kObject: "module.qualname";
  // kStorage: the storage key (its record is data/<key>).
  std::string text;
  // kList/kTuple: element ids; kDict: key0, value0, key1, value1, ...;
  // kObject read with ObjectState::kKeep: {arguments, state}, the tuple it
  // was called or constructed with and the state BUILD gave it (-1 when
  // none); otherwise empty.
  std::vector<int> items;
  // kStorage
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::string location;
  int64_t numel = 0;
  // kTensor
  int storage = -1;  // node id of its kStorage
  int64_t storage_offset = 0;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  bool requires_grad = false;
};

struct PickleGraph {
  std::vector<PickleNode> nodes;  // ids index this; shared (memoized) objects are one node
  int root = -1;
  const PickleNode& node(int id) const { return nodes[static_cast<size_t>(id)]; }
};

struct PickleLimits {
  int64_t max_stack = 1 << 20;   // entries on the stack (marks included)
  int64_t max_memo = 1 << 22;    // memo slots
  int64_t max_nodes = 1 << 26;   // records built
};

// What ReadPickle records of an opaque object (kObject): only its class name
// (kDiscard), or also its arguments and state (kKeep, see PickleNode::items).
// Nothing is ever applied or run either way.
enum class ObjectState { kDiscard, kKeep };

absl::StatusOr<PickleGraph> ReadPickle(absl::string_view bytes, const PickleLimits& limits = {},
                                       ObjectState objects = ObjectState::kDiscard);

// The dtype of a whitelisted storage class ("torch.FloatStorage"), or
// nullopt-like false when it is not one.
bool StorageClassDtype(absl::string_view qualified_name, c10::ScalarType* dtype);

}  // namespace shardlight::sharded::checkpoint::pytorch

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_PICKLE_READER_H_
