// TorchFile: the zip container, the restricted pickle, checked tensors; and
// SelectEntries, which walks the pickle's records without building any.
#include "sharded/checkpoint/interop/pytorch/torch_file.h"

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/checkpoint/interop/pytorch/pickle_values.h"
#include "sharded/checkpoint/storage/posix_file.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint::pytorch {
namespace {

constexpr int kMaxDepth = 64;                // nesting inside a selected entry
constexpr int64_t kMaxVisits = int64_t{1} << 24;  // records visited (shared records count per path)
constexpr int64_t kVisitSlack = 1 << 16;          // ... and at most twice the graph's edges plus this
constexpr int64_t kMaxDims = 64;
constexpr size_t kMaxKeyBytes = 1024;            // ValidateKey's limit: a longer path is refused while walking
constexpr size_t kMaxListed = 32;                // not_stored / skipped lines kept; the rest are counted
// A record other than a storage (data.pkl, byteorder) may declare at most
// max(the file's size, this): a compressed pickle cannot ask for more.
constexpr uint64_t kMaxSmallRecord = uint64_t{64} << 20;

std::string ExceptionText(const std::exception& e) {
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e)) return c10e->what_without_backtrace();
  return e.what();
}

std::string Join(const std::string& path, const std::string& part) { return path.empty() ? part : path + "." + part; }

// Each record of a tree is visited once; shared records once per path. A
// graph that shares records to multiply its paths (a list of itself, twice,
// nested) would otherwise make a tiny pickle select millions of keys.
int64_t VisitLimit(const PickleGraph& g) {
  int64_t edges = 0;
  for (int id = 0; id < g.size(); ++id) edges += static_cast<int64_t>(g.items(id).size());
  return std::min(kMaxVisits, 2 * (edges + g.size()) + kVisitSlack);
}

class Walker {
 public:
  Walker(const PickleGraph& g, Selection* out, std::string prefix)
      : g_(g), out_(out), max_visits_(VisitLimit(g)), prefix_(std::move(prefix)) {}

  // The bounds every visited path keeps: visits, depth, key length.
  absl::Status Check(const std::string& path, int depth) {
    if (++visits_ > max_visits_) {
      return absl::InvalidArgumentError(absl::StrCat("the pickle's structure is too large to import (more than ",
                                                     max_visits_, " paths through its ", g_.size(), " records)"));
    }
    if (depth > kMaxDepth) {
      return absl::InvalidArgumentError(absl::StrCat("at ", Quote(path), ": nested deeper than ", kMaxDepth, " levels"));
    }
    if (path.size() > kMaxKeyBytes) {
      return absl::InvalidArgumentError(absl::StrCat("at ", Quote(path.substr(0, 64)), "...: a key longer than ",
                                                     kMaxKeyBytes, " bytes"));
    }
    return absl::OkStatus();
  }

  // Lists `path` as not carried, saying why; false: its skeleton.
  PlainValue NotCarried(const std::string& path, absl::string_view why) {
    if (++out_->not_carried_count <= static_cast<int64_t>(kMaxListed)) {
      out_->not_carried.push_back(absl::StrCat(path.empty() ? "<root>" : path, ": ", why));
    }
    return PlainValue::Bool(false);
  }

  // A selected entry: tensors collected, allowed scalars noted, others refused.
  absl::Status Flatten(int id, const std::string& path, int depth) {
    SL_RETURN_IF_ERROR(Check(path, depth));
    const PickleKind kind = g_.kind(id);
    switch (kind) {
      case PickleKind::kTensor:
        out_->tensors.push_back({prefix_ + path, id, prefix_.size()});
        return absl::OkStatus();
      case PickleKind::kNone:
      case PickleKind::kBool:
      case PickleKind::kInt:
      case PickleKind::kFloat:
      case PickleKind::kString:
      case PickleKind::kBytes:
        if (++out_->not_stored_count <= static_cast<int64_t>(kMaxListed)) {
          out_->not_stored.push_back(absl::StrCat(path, ": ", PickleKindName(kind)));
        }
        return absl::OkStatus();
      case PickleKind::kList:
      case PickleKind::kTuple: {
        const absl::Span<const int> items = g_.items(id);
        for (size_t i = 0; i < items.size(); ++i) {
          SL_RETURN_IF_ERROR(Flatten(items[i], Join(path, std::to_string(i)), depth + 1));
        }
        return absl::OkStatus();
      }
      case PickleKind::kDict: {
        const absl::Span<const int> items = g_.items(id);
        for (size_t i = 0; i + 1 < items.size(); i += 2) {
          const int k = items[i];
          std::string part;
          if (g_.kind(k) == PickleKind::kString) {
            part = std::string(g_.text(k).substr(0, kMaxKeyBytes + 1));
          } else if (g_.kind(k) == PickleKind::kInt) {
            part = std::to_string(g_.integer(k));
          } else {
            return absl::InvalidArgumentError(absl::StrCat("at ", Quote(path), ": a dict key of type ",
                                                           PickleKindName(g_.kind(k)), " (only str and int keys are imported)"));
          }
          SL_RETURN_IF_ERROR(Flatten(items[i + 1], Join(path, part), depth + 1));
        }
        return absl::OkStatus();
      }
      case PickleKind::kObject:
        return absl::InvalidArgumentError(absl::StrCat("at ", Quote(path), ": refusing an instance of ", Quote(std::string(g_.text(id))),
                                                       " (only tensors, dicts, lists, tuples, numbers, strings and None "
                                                       "are imported)"));
      default:
        return absl::InvalidArgumentError(absl::StrCat("at ", Quote(path), ": refusing a ", PickleKindName(kind),
                                                       " value (only tensors, dicts, lists, tuples, numbers, strings and "
                                                       "None are imported)"));
    }
  }

  // carry_values: the skeleton of node `id` at `path` (see kStructureKey):
  // tensors and plain subtrees are selected, anything else is listed. A
  // container at an `expand`ed place (the root, Lightning's state_dict) is
  // taken apart even when it is plain: its entries are the keys.
  absl::StatusOr<PlainValue> Carry(int id, const std::string& path, const std::string& prefix, int depth,
                                   bool expand) {
    SL_RETURN_IF_ERROR(Check(path, depth));
    const PickleKind kind = g_.kind(id);
    const bool container = kind == PickleKind::kList || kind == PickleKind::kTuple || kind == PickleKind::kDict;
    if (kind == PickleKind::kTensor || (!expand && Plain(id, 0))) {
      const std::string key = prefix + path;
      if (absl::Status s = ValidateKey(key); !s.ok()) return NotCarried(path, s.message());
      if (kind == PickleKind::kTensor) {
        out_->tensors.push_back({key, id, prefix.size()});
        return PlainValue::None();
      }
      if (size_[static_cast<size_t>(id)] > values_left_) {
        return NotCarried(path, absl::StrCat("its text takes about ", size_[static_cast<size_t>(id)], " bytes, more than the ",
                                             values_left_, " left to the checkpoint's values (large state "
                                             "belongs in a tensor)"));
      }
      auto value = PlainValueOf(g_, id);
      if (!value.ok()) return NotCarried(path, value.status().message());
      if (absl::Status s = value->Validate(); !s.ok()) return NotCarried(path, s.message());
      const int64_t bytes = static_cast<int64_t>(value->Repr().size());
      if (bytes > values_left_) {
        return NotCarried(path, absl::StrCat("its text takes ", bytes, " bytes, more than the ", values_left_,
                                             " left to the checkpoint's values (large state belongs in a tensor)"));
      }
      values_left_ -= bytes;
      out_->values.push_back({key, *std::move(value)});
      return PlainValue::None();
    }
    if (kind == PickleKind::kObject && absl::StartsWith(g_.text(id), "a ")) {  // a tensor of a dtype not stored (pickle_reader.cc)
      return absl::InvalidArgumentError(absl::StrCat("at ", Quote(path), ": refusing ", g_.text(id)));
    }
    if (!container) {
      return NotCarried(path, kind == PickleKind::kObject || kind == PickleKind::kGlobal ? std::string(g_.text(id))
                                                                                        : PickleKindName(kind));
    }
    const absl::Span<const int> items = g_.items(id);
    std::vector<PlainValue> skeleton;
    if (kind != PickleKind::kDict) {
      for (size_t i = 0; i < items.size(); ++i) {
        SL_ASSIGN_OR_RETURN(PlainValue child, Carry(items[i], Join(path, std::to_string(i)), prefix, depth + 1, false));
        if (structure_) skeleton.push_back(std::move(child));
      }
      return kind == PickleKind::kList ? PlainValue::List(std::move(skeleton)) : PlainValue::Tuple(std::move(skeleton));
    }
    for (size_t i = 0; i + 1 < items.size(); i += 2) {
      const int k = items[i];
      PlainValue name;
      std::string part;
      if (g_.kind(k) == PickleKind::kString) {
        part = std::string(g_.text(k).substr(0, kMaxKeyBytes + 1));
        name = PlainValue::Str(part);
      } else if (g_.kind(k) == PickleKind::kInt) {
        part = std::to_string(g_.integer(k));
        name = PlainValue::Int(g_.integer(k));
      } else {
        NotCarried(Join(path, absl::StrCat("<", PickleKindName(g_.kind(k)), " key>")),
                   "a dict key that is no str or int, in a dict that holds tensors");
        continue;
      }
      SL_ASSIGN_OR_RETURN(PlainValue child, Carry(items[i + 1], Join(path, part), prefix, depth + 1, false));
      if (structure_ && !(child.kind() == PlainValue::Kind::kBool && !child.boolean())) {
        skeleton.push_back(std::move(name));
        skeleton.push_back(std::move(child));
      }
    }
    return PlainValue::Dict(std::move(skeleton));
  }

  // Whether the skeleton is built (not for a flat dict: see kStructureKey).
  void set_structure(bool on) { structure_ = on; }
  void set_values_bytes(int64_t n) { values_left_ = n; }

  // Whether node `id` is a plain value (no tensor, storage or class
  // instance below it), and its text's size estimated in size_[id]: once
  // per node, however often it is shared.
  bool Plain(int id, int depth) {
    if (plain_.empty()) {
      plain_.assign(static_cast<size_t>(g_.size()), -1);
      size_.assign(static_cast<size_t>(g_.size()), 0);
    }
    int8_t& known = plain_[static_cast<size_t>(id)];
    if (known >= 0) return known == 1;
    if (depth > kMaxPlainValueDepth) return false;  // a list that holds itself: listed by PlainValueOf's error
    int64_t size = 0;
    bool plain = true;
    switch (g_.kind(id)) {
      case PickleKind::kNone:
      case PickleKind::kBool:
        size = 5;
        break;
      case PickleKind::kInt:
        size = static_cast<int64_t>(std::to_string(g_.integer(id)).size());
        break;
      case PickleKind::kFloat:
        size = 24;  // the longest repr of a double
        break;
      case PickleKind::kString:
      case PickleKind::kBytes:
        size = 3 + static_cast<int64_t>(g_.text(id).size());  // escapes make more: the Repr decides (Carry)
        break;
      case PickleKind::kList:
      case PickleKind::kTuple:
      case PickleKind::kDict:
        size = 2;
        known = 0;  // while visiting: a cycle reads as not plain
        for (int child : g_.items(id)) {
          plain = Plain(child, depth + 1) && plain;
          size = std::min<int64_t>(size + size_[static_cast<size_t>(child)] + 2, int64_t{1} << 30);
        }
        break;
      default:
        plain = false;
    }
    size_[static_cast<size_t>(id)] = static_cast<uint32_t>(std::min<int64_t>(size, int64_t{1} << 30));
    known = plain ? 1 : 0;
    return plain;
  }

  // An entry that is not imported: the names of the classes it holds.
  void Classes(int id, int depth, std::set<std::string>* names) {
    if (++visits_ > max_visits_ || depth > kMaxDepth) return;
    if (g_.kind(id) == PickleKind::kObject && names->size() < kMaxListed) names->insert(std::string(g_.text(id)));
    for (int child : g_.items(id)) Classes(child, depth + 1, names);
  }

 private:
  const PickleGraph& g_;
  Selection* out_;
  const int64_t max_visits_;
  const std::string prefix_;  // Flatten's keys
  int64_t visits_ = 0;
  bool structure_ = false;
  int64_t values_left_ = 0;
  std::vector<int8_t> plain_;  // per node: -1 unknown, 0, 1 (Plain)
  std::vector<uint32_t> size_;  // per plain node: its text's estimated size (at most 2^30)
};

// carry_values: everything, with the structure record when the file is more
// than a flat dict of str keys.
absl::Status CarryAll(const PickleGraph& graph, const SelectOptions& options, Walker& walker, Selection& out) {
  const int root = graph.root();
  const absl::Span<const int> root_items = graph.items(root);
  bool flat = !out.lightning;
  for (size_t i = 0; flat && i + 1 < root_items.size(); i += 2) {
    const int v = root_items[i + 1];
    flat = graph.kind(root_items[i]) == PickleKind::kString &&
           (graph.kind(v) == PickleKind::kTensor || walker.Plain(v, 0));
  }
  walker.set_structure(!flat);
  walker.set_values_bytes(options.max_values_bytes);
  PlainValue tree;
  if (!out.lightning) {
    SL_ASSIGN_OR_RETURN(tree, walker.Carry(root, "", options.key_prefix, 0, /*expand=*/true));
  } else {
    // Every top-level entry: state_dict's keys at key_prefix, the others
    // under their own names.
    std::vector<PlainValue> items;
    for (size_t i = 0; i + 1 < root_items.size(); i += 2) {
      const int k = root_items[i];
      if (graph.kind(k) != PickleKind::kString) {
        walker.NotCarried(absl::StrCat("<", PickleKindName(graph.kind(k)), " key>"), "a top-level key that is no str");
        continue;
      }
      const std::string name(graph.text(k).substr(0, kMaxKeyBytes + 1));
      const bool state_dict = name == "state_dict";
      auto child = state_dict ? walker.Carry(root_items[i + 1], "", options.key_prefix, 0, true)
                              : walker.Carry(root_items[i + 1], name, "", 0, false);
      if (!child.ok()) {
        return state_dict ? absl::Status(child.status().code(), absl::StrCat("state_dict: ", child.status().message()))
                          : child.status();
      }
      if (child->kind() == PlainValue::Kind::kBool && !child->boolean()) continue;
      items.push_back(PlainValue::Str(name));
      items.push_back(*std::move(child));
    }
    tree = PlainValue::Dict(std::move(items));
  }
  if (!flat) {
    out.structure = PlainValue::Dict({PlainValue::Str("version"), PlainValue::Int(1), PlainValue::Str("lightning"),
                                      PlainValue::Bool(out.lightning), PlainValue::Str("prefix"),
                                      PlainValue::Str(options.key_prefix), PlainValue::Str("tree"), std::move(tree)});
    // A record the index could not hold (the fuzzer found one) fails the
    // import by name instead of writing an invalid value.
    if (absl::Status s = out.structure->Validate(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("the pickle's nesting cannot be recorded: ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Selection> SelectEntries(const PickleGraph& graph, const SelectOptions& options) {
  Selection out;
  if (graph.root() < 0 || graph.root() >= graph.size()) return absl::InvalidArgumentError("the pickle has no root object");
  const int root = graph.root();
  const PickleKind root_kind = graph.kind(root);
  if (root_kind != PickleKind::kDict) {
    return absl::InvalidArgumentError(absl::StrCat("the file holds a ", PickleKindName(root_kind),
                                                   root_kind == PickleKind::kObject ? " " + Quote(std::string(graph.text(root))) : "",
                                                   ", not a dict of tensors"));
  }
  const absl::Span<const int> root_items = graph.items(root);
  std::map<absl::string_view, int> top;  // str keys of the root dict
  for (size_t i = 0; i + 1 < root_items.size(); i += 2) {
    if (graph.kind(root_items[i]) == PickleKind::kString) top.emplace(graph.text(root_items[i]), root_items[i + 1]);
  }
  out.lightning = top.count("state_dict") != 0 &&
                  (top.count("global_step") != 0 || top.count("epoch") != 0 || top.count("pytorch-lightning_version") != 0);
  Walker walker(graph, &out, options.key_prefix);
  if (options.global_step && out.lightning) {
    auto it = top.find("global_step");
    if (it == top.end() || graph.kind(it->second) != PickleKind::kInt) {
      return absl::InvalidArgumentError("the checkpoint has no integer global_step");
    }
    out.global_step = graph.integer(it->second);
  }
  if (options.carry_values) {
    SL_RETURN_IF_ERROR(CarryAll(graph, options, walker, out));  // the walker fills `out`
    return out;
  }
  if (!out.lightning) {
    SL_RETURN_IF_ERROR(walker.Flatten(root, "", 0));
    return out;
  }
  std::set<std::string> selected = {"state_dict"};
  absl::Status s = walker.Flatten(top["state_dict"], "", 0);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat("state_dict: ", s.message()));
  if (options.optimizer_states) {
    if (top.count("optimizer_states") == 0) return absl::InvalidArgumentError("the checkpoint has no optimizer_states");
    selected.insert("optimizer_states");
    SL_RETURN_IF_ERROR(walker.Flatten(top["optimizer_states"], "optimizer_states", 0));
  }
  if (options.global_step) selected.insert("global_step");
  for (size_t i = 0; i + 1 < root_items.size(); i += 2) {
    const int k = root_items[i];
    const std::string name = graph.kind(k) == PickleKind::kString ? std::string(graph.text(k).substr(0, kMaxKeyBytes))
                                                                   : absl::StrCat("<", PickleKindName(graph.kind(k)), " key>");
    if (selected.count(name) != 0) continue;
    if (++out.skipped_count > static_cast<int64_t>(kMaxListed)) continue;
    std::set<std::string> classes;
    walker.Classes(root_items[i + 1], 0, &classes);
    out.skipped.push_back(absl::StrCat(name, ": ", classes.empty() ? PickleKindName(graph.kind(root_items[i + 1]))
                                                                   : absl::StrJoin(classes, ", ")));
  }
  return out;
}

TorchFile::~TorchFile() = default;

absl::StatusOr<std::unique_ptr<TorchFile>> TorchFile::Open(const std::string& path) { return Open(PosixStorage(), path); }

absl::StatusOr<std::unique_ptr<TorchFile>> TorchFile::Open(Storage& storage, const std::string& path, bool check_crc) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "': ", what));
  };
  std::unique_ptr<TorchFile> f(new TorchFile());
  f->path_ = path;
  SL_ASSIGN_OR_RETURN(File file, File::OpenForRead(storage, path));
  SL_ASSIGN_OR_RETURN(const int64_t size, file.Size());
  char magic[4] = {0, 0, 0, 0};
  if (size >= 4 && !file.ReadAt(magic, 4, 0).ok()) return bad("unreadable");
  if (size >= 2 && static_cast<uint8_t>(magic[0]) == 0x80 && static_cast<uint8_t>(magic[1]) <= 5) {
    return bad("a legacy (pre-1.6, non-zip) torch.save file; re-save it with torch.save(obj, path) in PyTorch >= 1.6");
  }
  if (size < 22 || std::string(magic, 4) != std::string("PK\x03\x04", 4)) {
    return bad(absl::StrCat("not a torch.save zip file (", size < 22 ? "too short to be a zip" : "no zip signature", ")"));
  }
  auto zip = ZipReader::Open(std::move(file), path, check_crc);
  if (!zip.ok()) return absl::InvalidArgumentError(absl::StrCat("a truncated or corrupt zip container: ", zip.status().message()));
  f->zip_ = std::make_unique<ZipReader>(std::move(*zip));
  const uint64_t max_small = std::max(static_cast<uint64_t>(size), kMaxSmallRecord);
  auto order = f->zip_->ReadSmall("byteorder", 64);
  if (order.ok() && *order != "little") return bad("byte order '" + Quote(*order) + "' is not supported (only little-endian)");
  if (!order.ok() && !absl::IsNotFound(order.status())) return order.status();
  auto pickle = f->zip_->ReadSmall("data.pkl", max_small);
  if (absl::IsNotFound(pickle.status())) return bad("no data.pkl record: not a file written by torch.save");
  SL_RETURN_IF_ERROR(pickle.status());
  auto graph = ReadPickle(*pickle);
  if (!graph.ok()) return bad("data.pkl: " + std::string(graph.status().message()));
  f->graph_ = std::move(*graph);
  return f;
}

absl::StatusOr<at::Tensor> TorchFile::Tensor(int node, const std::string& key) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("'", path_, "': key ", Quote(key), ": ", what));
  };
  if (graph_.kind(node) != PickleKind::kTensor) return bad("not a tensor");
  const PickleTensor t = graph_.tensor(node);
  const PickleStorage s = graph_.storage(t.storage);
  const std::string storage_key(s.key);
  // The storage's element (a byte for an UntypedStorage) and the tensor's
  // (_rebuild_tensor_v3 names a dtype over bytes): offsets and strides count the latter.
  const int64_t elem = static_cast<int64_t>(c10::elementSize(s.dtype));
  const int64_t tensor_elem = static_cast<int64_t>(c10::elementSize(t.dtype));
  const std::string record = "data/" + storage_key;
  // The tensor must lie inside its storage: checked arithmetic throughout.
  if (t.sizes.size() != t.strides.size() || static_cast<int64_t>(t.sizes.size()) > kMaxDims) {
    return bad(absl::StrCat(t.sizes.size(), " sizes and ", t.strides.size(), " strides"));
  }
  int64_t numel = 1, last = t.storage_offset;
  bool empty = false;
  if (t.storage_offset < 0) return bad("a negative storage offset");
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    if (t.sizes[d] < 0 || t.strides[d] < 0) return bad("a negative size or stride");
    if (t.sizes[d] == 0) empty = true;
    if (__builtin_mul_overflow(numel, t.sizes[d], &numel)) return bad("its element count overflows");
  }
  for (size_t d = 0; d < t.sizes.size() && !empty; ++d) {
    int64_t span;
    if (__builtin_mul_overflow(t.sizes[d] - 1, t.strides[d], &span) || __builtin_add_overflow(last, span, &last)) {
      return bad("its extent overflows");
    }
  }
  int64_t want;
  if (__builtin_mul_overflow(s.numel, elem, &want)) return bad("its storage size overflows");
  if (want % tensor_elem != 0) {
    return bad(absl::StrCat("storage ", Quote(storage_key), " of ", want, " bytes is not a whole number of ",
                            c10::toString(t.dtype), " elements"));
  }
  const int64_t storage_numel = want / tensor_elem;
  if (!empty && last >= storage_numel) {
    return bad(absl::StrCat("sizes ", absl::StrJoin(t.sizes, "x"), " with strides (", absl::StrJoin(t.strides, ", "),
                            ") at offset ", t.storage_offset, " overrun storage ", Quote(storage_key), " of ",
                            storage_numel, " elements"));
  }
  auto it = storages_.find(storage_key);
  if (it == storages_.end()) {
    // The directory's size is checked against the pickle's before a byte is
    // allocated or inflated; the read then fills exactly that much.
    const ZipRecord* r = zip_->Find(record);
    if (r == nullptr) {
      return bad(absl::StrCat("storage record ", Quote(zip_->top_folder() + record), " is missing from the file"));
    }
    if (r->size != static_cast<uint64_t>(want)) {
      return bad(absl::StrCat("storage record ", Quote(r->name), " declares ", r->size, " bytes",
                              r->method != 0 ? " (deflated)" : "", " in the zip directory but the pickle declares ",
                              s.numel, " elements of ", elem, " bytes"));
    }
    c10::DataPtr data;
    try {
      data = c10::GetDefaultCPUAllocator()->allocate(static_cast<size_t>(want));
    } catch (const std::exception& e) {
      return absl::ResourceExhaustedError(
          absl::StrCat("'", path_, "': key ", Quote(key), ": cannot allocate ", want, " bytes: ", ExceptionText(e)));
    }
    absl::Status read = zip_->ReadInto(*r, data.get(), static_cast<uint64_t>(want));
    if (!read.ok()) return absl::Status(read.code(), absl::StrCat(read.message(), " (key ", Quote(key), ")"));
    at::Storage storage(at::Storage::use_byte_size_t(), want, std::move(data), nullptr, false);
    it = storages_.emplace(storage_key, std::move(storage)).first;
  } else if (static_cast<int64_t>(it->second.nbytes()) != want) {
    return bad(absl::StrCat("storage ", Quote(storage_key), " is declared with two different sizes or dtypes"));
  }
  try {
    at::Tensor out = at::empty({0}, at::TensorOptions().dtype(t.dtype));
    out.set_(it->second, t.storage_offset, at::IntArrayRef(t.sizes.data(), t.sizes.size()),
             at::IntArrayRef(t.strides.data(), t.strides.size()));
    return out;
  } catch (const std::exception& e) {
    return bad(ExceptionText(e));
  }
}

}  // namespace shardlight::sharded::checkpoint::pytorch
