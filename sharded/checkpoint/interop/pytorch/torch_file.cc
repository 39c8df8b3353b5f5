// TorchFile: the zip container, the restricted pickle, checked tensors; and
// SelectEntries, which walks the pickle's records without building any.
#include "sharded/checkpoint/interop/pytorch/torch_file.h"

#include <caffe2/serialize/inline_container.h>

#include <cstdio>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/checkpoint/storage/posix_file.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint::pytorch {
namespace {

constexpr int kMaxDepth = 64;                // nesting inside a selected entry
constexpr int64_t kMaxVisits = int64_t{1} << 24;  // records visited (shared records count per path)
constexpr int64_t kMaxDims = 64;

std::string ExceptionText(const std::exception& e) {
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e)) return c10e->what_without_backtrace();
  return e.what();
}

std::string Join(const std::string& path, const std::string& part) { return path.empty() ? part : path + "." + part; }

class Walker {
 public:
  Walker(const PickleGraph& g, Selection* out) : g_(g), out_(out) {}

  // A selected entry: tensors collected, allowed scalars noted, others refused.
  absl::Status Flatten(int id, const std::string& path, int depth) {
    if (++visits_ > kMaxVisits) return absl::InvalidArgumentError("the pickle's structure is too large to import");
    if (depth > kMaxDepth) {
      return absl::InvalidArgumentError(absl::StrCat("at ", Quote(path), ": nested deeper than ", kMaxDepth, " levels"));
    }
    const PickleNode& n = g_.node(id);
    switch (n.kind) {
      case PickleKind::kTensor:
        out_->tensors.push_back({path, id});
        return absl::OkStatus();
      case PickleKind::kNone:
      case PickleKind::kBool:
      case PickleKind::kInt:
      case PickleKind::kFloat:
      case PickleKind::kString:
        out_->not_stored.push_back(absl::StrCat(path, ": ", PickleKindName(n.kind)));
        return absl::OkStatus();
      case PickleKind::kList:
      case PickleKind::kTuple:
        for (size_t i = 0; i < n.items.size(); ++i) {
          SL_RETURN_IF_ERROR(Flatten(n.items[i], Join(path, std::to_string(i)), depth + 1));
        }
        return absl::OkStatus();
      case PickleKind::kDict:
        for (size_t i = 0; i + 1 < n.items.size(); i += 2) {
          const PickleNode& k = g_.node(n.items[i]);
          std::string part;
          if (k.kind == PickleKind::kString) {
            part = k.text;
          } else if (k.kind == PickleKind::kInt) {
            part = std::to_string(k.integer);
          } else {
            return absl::InvalidArgumentError(absl::StrCat("at ", Quote(path), ": a dict key of type ",
                                                           PickleKindName(k.kind), " (only str and int keys are imported)"));
          }
          SL_RETURN_IF_ERROR(Flatten(n.items[i + 1], Join(path, part), depth + 1));
        }
        return absl::OkStatus();
      case PickleKind::kObject:
        return absl::InvalidArgumentError(absl::StrCat("at ", Quote(path), ": refusing an instance of ", Quote(n.text),
                                                       " (only tensors, dicts, lists, tuples, numbers, strings and None "
                                                       "are imported)"));
      default:
        return absl::InvalidArgumentError(absl::StrCat("at ", Quote(path), ": refusing a ", PickleKindName(n.kind),
                                                       " value (only tensors, dicts, lists, tuples, numbers, strings and "
                                                       "None are imported)"));
    }
  }

  // An entry that is not imported: the names of the classes it holds.
  void Classes(int id, int depth, std::set<std::string>* names) {
    if (++visits_ > kMaxVisits || depth > kMaxDepth) return;
    const PickleNode& n = g_.node(id);
    if (n.kind == PickleKind::kObject) names->insert(n.text);
    for (int child : n.items) Classes(child, depth + 1, names);
  }

 private:
  const PickleGraph& g_;
  Selection* out_;
  int64_t visits_ = 0;
};

}  // namespace

absl::StatusOr<Selection> SelectEntries(const PickleGraph& graph, const SelectOptions& options) {
  Selection out;
  if (graph.root < 0 || graph.root >= static_cast<int>(graph.nodes.size())) {
    return absl::InvalidArgumentError("the pickle has no root object");
  }
  const PickleNode& root = graph.node(graph.root);
  if (root.kind != PickleKind::kDict) {
    return absl::InvalidArgumentError(absl::StrCat("the file holds a ", PickleKindName(root.kind),
                                                   root.kind == PickleKind::kObject ? " " + Quote(root.text) : "",
                                                   ", not a dict of tensors"));
  }
  std::map<std::string, int> top;  // str keys of the root dict
  for (size_t i = 0; i + 1 < root.items.size(); i += 2) {
    const PickleNode& k = graph.node(root.items[i]);
    if (k.kind == PickleKind::kString) top.emplace(k.text, root.items[i + 1]);
  }
  out.lightning = top.count("state_dict") != 0 &&
                  (top.count("global_step") != 0 || top.count("epoch") != 0 || top.count("pytorch-lightning_version") != 0);
  Walker walker(graph, &out);
  if (!out.lightning) {
    absl::Status s = walker.Flatten(graph.root, "", 0);
    if (!s.ok()) return s;
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
  if (options.global_step) {
    auto it = top.find("global_step");
    if (it == top.end() || graph.node(it->second).kind != PickleKind::kInt) {
      return absl::InvalidArgumentError("the checkpoint has no integer global_step");
    }
    selected.insert("global_step");
    out.global_step = graph.node(it->second).integer;
  }
  for (size_t i = 0; i + 1 < root.items.size(); i += 2) {
    const PickleNode& k = graph.node(root.items[i]);
    const std::string name = k.kind == PickleKind::kString ? k.text : absl::StrCat("<", PickleKindName(k.kind), " key>");
    if (selected.count(name) != 0) continue;
    std::set<std::string> classes;
    walker.Classes(root.items[i + 1], 0, &classes);
    const PickleNode& v = graph.node(root.items[i + 1]);
    out.skipped.push_back(absl::StrCat(name, ": ", classes.empty() ? PickleKindName(v.kind) : absl::StrJoin(classes, ", ")));
  }
  return out;
}

TorchFile::~TorchFile() = default;

absl::StatusOr<std::unique_ptr<TorchFile>> TorchFile::Open(const std::string& path) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "': ", what));
  };
  std::unique_ptr<TorchFile> f(new TorchFile());
  f->path_ = path;
  {
    auto file = File::OpenForRead(path);
    if (!file.ok()) return file.status();
    SL_ASSIGN_OR_RETURN(auto size, file->Size());
    char magic[4] = {0, 0, 0, 0};
    if (size >= 4 && !file->ReadAt(magic, 4, 0).ok()) return bad("unreadable");
    if (size >= 2 && static_cast<uint8_t>(magic[0]) == 0x80 && static_cast<uint8_t>(magic[1]) <= 5) {
      return bad("a legacy (pre-1.6, non-zip) torch.save file; re-save it with torch.save(obj, path) in PyTorch >= 1.6");
    }
    if (size < 22 || std::string(magic, 4) != std::string("PK\x03\x04", 4)) {
      return bad(absl::StrCat("not a torch.save zip file (", size < 22 ? "too short to be a zip" : "no zip signature",
                              ")"));
    }
  }
  std::string pickle;
  try {
    f->zip_ = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
    if (!f->zip_->hasRecord("data.pkl")) return bad("no data.pkl record: not a file written by torch.save");
    if (f->zip_->hasRecord("byteorder")) {
      auto [data, n] = f->zip_->getRecord("byteorder");
      const std::string order(static_cast<const char*>(data.get()), n);
      if (order != "little") return bad("byte order '" + Quote(order) + "' is not supported (only little-endian)");
    }
    auto [data, n] = f->zip_->getRecord("data.pkl");
    pickle.assign(static_cast<const char*>(data.get()), n);
  } catch (const std::exception& e) {
    return bad("a truncated or corrupt zip container: " + ExceptionText(e));
  }
  auto graph = ReadPickle(pickle);
  if (!graph.ok()) return bad("data.pkl: " + std::string(graph.status().message()));
  f->graph_ = std::move(*graph);
  return f;
}

absl::StatusOr<at::Tensor> TorchFile::Tensor(int node, const std::string& key) {
  const PickleNode& t = graph_.node(node);
  const PickleNode& s = graph_.node(t.storage);
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("'", path_, "': key ", Quote(key), ": ", what));
  };
  const int64_t elem = static_cast<int64_t>(c10::elementSize(s.dtype));
  const std::string record = "data/" + s.text;
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
  if (!empty && last >= s.numel) {
    return bad(absl::StrCat("sizes ", absl::StrJoin(t.sizes, "x"), " with strides (", absl::StrJoin(t.strides, ", "),
                            ") at offset ", t.storage_offset, " overrun storage ", Quote(s.text), " of ", s.numel,
                            " elements"));
  }
  auto it = storages_.find(s.text);
  if (it == storages_.end()) {
    int64_t want;
    if (__builtin_mul_overflow(s.numel, elem, &want)) return bad("its storage size overflows");
    try {
      if (!zip_->hasRecord(record)) return bad(absl::StrCat("storage record ", Quote(record), " is missing from the file"));
      auto [data, n] = zip_->getRecord(record);
      if (static_cast<int64_t>(n) != want) {
        return bad(absl::StrCat("storage record ", Quote(record), " holds ", n, " bytes but the pickle declares ",
                                s.numel, " elements of ", elem, " bytes"));
      }
      at::Storage storage(at::Storage::use_byte_size_t(), want, std::move(data), nullptr, false);
      it = storages_.emplace(s.text, std::move(storage)).first;
    } catch (const std::exception& e) {
      return bad(absl::StrCat("storage record ", Quote(record), " is unreadable (corrupt zip?): ", ExceptionText(e)));
    }
  } else if (static_cast<int64_t>(it->second.nbytes()) != s.numel * elem) {
    return bad(absl::StrCat("storage ", Quote(s.text), " is declared with two different sizes or dtypes"));
  }
  try {
    at::Tensor out = at::empty({0}, at::TensorOptions().dtype(s.dtype));
    out.set_(it->second, t.storage_offset, t.sizes, t.strides);
    return out;
  } catch (const std::exception& e) {
    return bad(ExceptionText(e));
  }
}

}  // namespace shardlight::sharded::checkpoint::pytorch
