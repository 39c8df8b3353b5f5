// ExportTorchFile: the pickle first (it only names storages), then one
// storage record per tensor, each read whole from the checkpoint.
#include "sharded/checkpoint/interop/pytorch/torch_export.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <unistd.h>

#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/format/checkpoint_reader.h"
#include "sharded/checkpoint/interop/open_checkpoint.h"
#include "sharded/checkpoint/interop/pytorch/torch_file.h"
#include "sharded/checkpoint/format/entry_reader.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/checkpoint/storage/posix_file.h"
#include "sharded/dtype_table.h"
#include "sharded/status_macros.h"
#include "sharded/utf8.h"

namespace shardlight::sharded::checkpoint::pytorch {
namespace {

void AppendLe(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// Every byte the zip writer produces goes to `file` in order; an I/O error is
// kept (the zip writer is never made to throw from its destructor).
struct ZipSink {
  File* file;
  int64_t pos = 0;
  absl::Status status;
  size_t Write(const void* data, size_t n) {
    if (status.ok()) status = file->WriteAt(data, static_cast<int64_t>(n), pos);
    pos += static_cast<int64_t>(n);
    return n;
  }
};

struct Item {
  const IndexTensor* tensor;
  std::string name;
};

absl::StatusOr<at::Tensor> ReadWhole(CheckpointReader& reader, EntryReader& entries, const IndexTensor& t) {
  at::Tensor full = at::empty(t.shape, at::TensorOptions().dtype(t.dtype));
  const std::vector<int64_t> origin(t.shape.size(), 0);
  for (const IndexShard& sh : t.shards) {
    if (sh.NumElements() == 0) continue;
    SL_ASSIGN_OR_RETURN(auto f, reader.OpenShard(t, sh, t.key));
    absl::Status s = entries.Copy(reader.SourceOf(t, sh, f), full, origin, sh.offsets, sh.sizes);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("key ", Quote(t.key), ": ", s.message()));
  }
  return full;
}

absl::Status WriteZip(CheckpointReader& reader, const std::vector<Item>& items, const std::string& pickle,
                      const ExportOptions& options, File& file, ExportReport* report) {
  ZipSink sink{&file, 0, absl::OkStatus()};
  EntryReader entries(options.buffer_bytes, nullptr);
  caffe2::serialize::PyTorchStreamWriter zip([&](const void* data, size_t n) { return sink.Write(data, n); });
  zip.writeRecord("data.pkl", pickle.data(), pickle.size());
  zip.writeRecord("byteorder", "little", 6);
  for (size_t i = 0; i < items.size() && sink.status.ok(); ++i) {
    auto full = ReadWhole(reader, entries, *items[i].tensor);
    if (!full.ok()) {
      zip.writeEndOfFile();
      return full.status();
    }
    const int64_t n = full->numel() * static_cast<int64_t>(full->element_size());
    static const char kEmpty = 0;
    zip.writeRecord(absl::StrCat("data/", i), n == 0 ? &kEmpty : full->data_ptr(), static_cast<size_t>(n));
    report->data_bytes += n;
  }
  zip.writeEndOfFile();
  SL_RETURN_IF_ERROR(sink.status);
  SL_RETURN_IF_ERROR(file.Sync());
  return file.Close();
}

}  // namespace

std::string StorageClassName(c10::ScalarType dtype) {
  const DtypeInfo* d = FindDtype(dtype);
  return d == nullptr ? "" : d->storage_class;
}

TorchPickleWriter::TorchPickleWriter() { out_ = "\x80\x02"; }
void TorchPickleWriter::Mark() { out_.push_back('('); }
void TorchPickleWriter::EmptyDict() { out_.push_back('}'); }
void TorchPickleWriter::SetItems() { out_.push_back('u'); }
void TorchPickleWriter::Tuple() { out_.push_back('t'); }
void TorchPickleWriter::EmptyTuple() { out_.push_back(')'); }
void TorchPickleWriter::Reduce() { out_.push_back('R'); }
void TorchPickleWriter::Bool(bool v) { out_.push_back(v ? '\x88' : '\x89'); }
void TorchPickleWriter::None() { out_.push_back('N'); }
void TorchPickleWriter::EmptyList() { out_.push_back(']'); }
void TorchPickleWriter::Appends() { out_.push_back('e'); }
void TorchPickleWriter::NewObj() { out_.push_back('\x81'); }
void TorchPickleWriter::Build() { out_.push_back('b'); }
void TorchPickleWriter::PersistentId() { out_.push_back('Q'); }

void TorchPickleWriter::Float(double v) {
  out_.push_back('G');  // BINFLOAT: big-endian IEEE 754 double
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
}

void TorchPickleWriter::Bytes(const std::string& b) {
  // As protocol 2 spells bytes: _codecs.encode(text, 'latin1'), the text
  // holding one code point per byte (torch.load's weights_only reader takes
  // this, not BINBYTES).
  std::string latin1;
  for (unsigned char c : b) AppendUtf8(c, &latin1);
  Global("_codecs", "encode");
  Mark();
  String(latin1);
  String("latin1");
  Tuple();
  Reduce();
}

void TorchPickleWriter::Value(const PlainValue& v) {
  switch (v.kind()) {
    case PlainValue::Kind::kNone: return None();
    case PlainValue::Kind::kBool: return Bool(v.boolean());
    case PlainValue::Kind::kInt: return Int(v.integer());
    case PlainValue::Kind::kFloat: return Float(v.real());
    case PlainValue::Kind::kStr: return String(v.text());
    case PlainValue::Kind::kBytes: return Bytes(v.text());
    case PlainValue::Kind::kList:
      EmptyList();
      if (v.items().empty()) return;
      Mark();
      for (const PlainValue& item : v.items()) Value(item);
      return Appends();
    case PlainValue::Kind::kTuple:
      Mark();
      for (const PlainValue& item : v.items()) Value(item);
      return Tuple();
    case PlainValue::Kind::kDict:
      EmptyDict();
      if (v.items().empty()) return;
      Mark();
      for (const PlainValue& item : v.items()) Value(item);
      return SetItems();
  }
}

void TorchPickleWriter::String(const std::string& s) {
  out_.push_back('X');  // BINUNICODE
  AppendLe(out_, s.size(), 4);
  out_ += s;
}

void TorchPickleWriter::Int(int64_t v) {
  if (v >= INT32_MIN && v <= INT32_MAX) {
    out_.push_back('J');  // BININT
    AppendLe(out_, static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
  } else {
    out_ += "\x8a\x08";  // LONG1, 8 bytes two's complement
    AppendLe(out_, static_cast<uint64_t>(v), 8);
  }
}

void TorchPickleWriter::Global(const std::string& module, const std::string& name) {
  out_ += absl::StrCat("c", module, "\n", name, "\n");
}

bool TorchPickleWriter::Tensor(c10::ScalarType dtype, const std::string& storage_key, int64_t storage_numel,
                               int64_t offset, const std::vector<int64_t>& sizes,
                               const std::vector<int64_t>& strides) {
  // A dtype with a legacy storage class: _rebuild_tensor_v2 over it; any
  // other (float8, uint16..64, complex32), as torch.save writes them:
  // _rebuild_tensor_v3 over an UntypedStorage of bytes, naming the dtype.
  const DtypeInfo* d = FindDtype(dtype);
  if (d == nullptr) return false;
  const bool typed = *d->storage_class != '\0';
  Global("torch._utils", typed ? "_rebuild_tensor_v2" : "_rebuild_tensor_v3");
  Mark();
  Mark();  // the persistent id: ('storage', class, key, location, numel)
  String("storage");
  if (typed) {
    Global("torch", d->storage_class);
  } else {
    Global("torch.storage", "UntypedStorage");
  }
  String(storage_key);
  String("cpu");
  Int(typed ? storage_numel : storage_numel * static_cast<int64_t>(c10::elementSize(dtype)));
  Tuple();
  PersistentId();
  Int(offset);
  Mark();
  for (int64_t s : sizes) Int(s);
  Tuple();
  Mark();
  for (int64_t s : strides) Int(s);
  Tuple();
  Bool(false);
  Global("collections", "OrderedDict");  // backward hooks: OrderedDict()
  EmptyTuple();
  Reduce();
  if (!typed) Global("torch", d->torch_name);
  Tuple();
  Reduce();
  return true;
}

std::string TorchPickleWriter::Finish() {
  out_.push_back('.');
  return out_;
}

namespace {

// The keys Lightning 2.x's Trainer.fit(ckpt_path=...) needs besides
// state_dict (items of the open top-level dict):
//  - "pytorch-lightning_version": the checkpoint format the file follows,
//    2.0.0 (the loop key names below are 2.0's); a later Lightning migrates it.
//  - "loops": the fit loop's progress, from which Lightning takes its
//    global_step (optimizer steps completed, automatic optimization) and the
//    logger step (_batches_that_stepped); every other counter starts at 0.
//  - "optimizer_states", "lr_schedulers": empty lists, so the optimizers and
//    schedulers start fresh (without the keys Lightning refuses the file).
void WriteLightningResumeKeys(TorchPickleWriter& pickle, int64_t global_step) {
  pickle.String("pytorch-lightning_version");
  pickle.String("2.0.0");
  pickle.String("loops");
  pickle.EmptyDict();
  pickle.Mark();
  pickle.String("fit_loop");
  pickle.EmptyDict();
  pickle.Mark();
  pickle.String("epoch_loop.state_dict");
  pickle.EmptyDict();
  pickle.Mark();
  pickle.String("_batches_that_stepped");
  pickle.Int(global_step);
  pickle.SetItems();
  pickle.String("epoch_loop.automatic_optimization.optim_progress");
  pickle.EmptyDict();
  pickle.Mark();
  pickle.String("optimizer");
  pickle.EmptyDict();
  pickle.Mark();
  pickle.String("step");  // {total: {ready, completed}, current: {}}
  pickle.EmptyDict();
  pickle.Mark();
  pickle.String("total");
  pickle.EmptyDict();
  pickle.Mark();
  pickle.String("ready");
  pickle.Int(global_step);
  pickle.String("completed");
  pickle.Int(global_step);
  pickle.SetItems();
  pickle.String("current");
  pickle.EmptyDict();
  pickle.SetItems();
  pickle.String("zero_grad");  // {total: {}, current: {}}
  pickle.EmptyDict();
  pickle.Mark();
  pickle.String("total");
  pickle.EmptyDict();
  pickle.String("current");
  pickle.EmptyDict();
  pickle.SetItems();
  pickle.SetItems();  // optimizer
  pickle.SetItems();  // optim_progress
  pickle.SetItems();  // fit_loop
  pickle.SetItems();  // loops
  pickle.String("optimizer_states");
  pickle.EmptyList();
  pickle.String("lr_schedulers");
  pickle.EmptyList();
}

// Tensor `t` as storage record data/<storage>, whole and contiguous.
absl::Status WriteTensor(TorchPickleWriter& pickle, const IndexTensor& t, size_t storage) {
  std::vector<int64_t> strides(t.shape.size(), 1);
  int64_t numel = 1;
  for (size_t d = t.shape.size(); d-- > 0;) {
    strides[d] = numel;
    numel *= t.shape[d];
  }
  if (!pickle.Tensor(t.dtype, std::to_string(storage), numel, 0, t.shape, strides)) {
    return absl::InvalidArgumentError(absl::StrCat("key ", Quote(t.key), ": dtype ", c10::toString(t.dtype),
                                                   " has no torch storage class"));
  }
  return absl::OkStatus();
}

// The nesting an import recorded (torch_file.h, kStructureKey), rebuilt:
// each entry from the tensor or value under its dotted key; the
// checkpoint's entries the record does not name (added after the import)
// at the end of the top-level dict.
class NestingWriter {
 public:
  NestingWriter(const CheckpointIndex& index, TorchPickleWriter& pickle, std::vector<Item>* items)
      : index_(index), pickle_(pickle), items_(items) {}

  absl::Status Root(const PlainValue& record) {
    const PlainValue* tree = record.Find("tree");
    const PlainValue* prefix = record.Find("prefix");
    const PlainValue* lightning = record.Find("lightning");
    if (tree == nullptr || tree->kind() != PlainValue::Kind::kDict || prefix == nullptr ||
        prefix->kind() != PlainValue::Kind::kStr || lightning == nullptr ||
        lightning->kind() != PlainValue::Kind::kBool) {
      return Bad("is not {'version': 1, 'lightning': bool, 'prefix': str, 'tree': dict}");
    }
    pickle_.EmptyDict();
    pickle_.Mark();
    const std::vector<PlainValue>& items = tree->items();
    for (size_t i = 0; i + 1 < items.size(); i += 2) {
      SL_ASSIGN_OR_RETURN(const std::string part, Part(items[i]));
      pickle_.Value(items[i]);
      if (lightning->boolean()) {
        const bool state_dict = part == "state_dict";
        SL_RETURN_IF_ERROR(Node(items[i + 1], state_dict ? "" : part, state_dict ? prefix->text() : "", 0));
      } else {
        SL_RETURN_IF_ERROR(Node(items[i + 1], part, prefix->text(), 0));
      }
    }
    for (const IndexTensor& t : index_.tensors) {
      if (used_.count(t.key) == 0) SL_RETURN_IF_ERROR(Entry(t.key));
    }
    for (const IndexValue& v : index_.values) {
      if (used_.count(v.key) == 0 && v.key != kStructureKey) SL_RETURN_IF_ERROR(Entry(v.key));
    }
    pickle_.SetItems();
    return absl::OkStatus();
  }

  int64_t values() const { return values_; }

 private:
  absl::Status Bad(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("the checkpoint's ", kStructureKey, " (the nesting its import ",
                                                   "recorded) ", what));
  }

  absl::StatusOr<std::string> Part(const PlainValue& key) const {
    if (key.kind() == PlainValue::Kind::kStr) return key.text();
    if (key.kind() == PlainValue::Kind::kInt) return std::to_string(key.integer());
    return Bad("has a dict key " + key.Repr() + " (only str and int)");
  }

  // A top-level entry the record does not name: key -> its tensor or value.
  absl::Status Entry(const std::string& key) {
    pickle_.String(key);
    return Leaf(key);
  }

  absl::Status Leaf(const std::string& key) {
    if (!used_.insert(key).second) return Bad("names key " + Quote(key) + " twice");
    if (const IndexTensor* t = index_.Find(key)) {
      items_->push_back({t, key});
      return WriteTensor(pickle_, *t, items_->size() - 1);
    }
    if (const IndexValue* v = index_.FindValue(key)) {
      pickle_.Value(v->value);
      ++values_;
      return absl::OkStatus();
    }
    return Bad("names key " + Quote(key) + ", which the checkpoint does not hold (export with --prefix for a flat dict)");
  }

  absl::Status Node(const PlainValue& node, const std::string& path, const std::string& prefix, int depth) {
    if (depth > kMaxPlainValueDepth) return Bad("is nested too deep");
    const auto join = [&](const std::string& part) { return path.empty() ? part : path + "." + part; };
    const std::vector<PlainValue>& items = node.items();
    switch (node.kind()) {
      case PlainValue::Kind::kNone:
        return Leaf(prefix + path);
      case PlainValue::Kind::kBool:  // an entry the import did not carry: its place in a list
        pickle_.None();
        return absl::OkStatus();
      case PlainValue::Kind::kList:
      case PlainValue::Kind::kTuple:
        if (node.kind() == PlainValue::Kind::kList) pickle_.EmptyList();
        pickle_.Mark();
        for (size_t i = 0; i < items.size(); ++i) SL_RETURN_IF_ERROR(Node(items[i], join(std::to_string(i)), prefix, depth + 1));
        if (node.kind() == PlainValue::Kind::kList) {
          pickle_.Appends();
        } else {
          pickle_.Tuple();
        }
        return absl::OkStatus();
      case PlainValue::Kind::kDict:
        pickle_.EmptyDict();
        pickle_.Mark();
        for (size_t i = 0; i + 1 < items.size(); i += 2) {
          SL_ASSIGN_OR_RETURN(const std::string part, Part(items[i]));
          pickle_.Value(items[i]);
          SL_RETURN_IF_ERROR(Node(items[i + 1], join(part), prefix, depth + 1));
        }
        pickle_.SetItems();
        return absl::OkStatus();
      default:
        return Bad(absl::StrCat("holds a ", PlainKindName(node.kind()), " at ", Quote(path)));
    }
  }

  const CheckpointIndex& index_;
  TorchPickleWriter& pickle_;
  std::vector<Item>* items_;
  std::set<std::string> used_;
  int64_t values_ = 0;
};

}  // namespace

absl::StatusOr<ExportReport> ExportTorchFile(
const std::string& dir, const std::string& out_path,
                                             const ExportOptions& options) {
  SL_ASSIGN_OR_RETURN(auto reader, OpenCheckpointForRead(dir));
  SL_RETURN_IF_ERROR(reader.CheckEveryFile());
  const CheckpointIndex& index = reader.index();
  ExportReport report;
  const IndexTensor* step = nullptr;
  std::string step_value;  // the key of an int value that gave the step
  if (options.lightning) {
    for (const std::string& key : options.global_step_keys) {
      const IndexValue* v = index.FindValue(key);
      if (v != nullptr && v->value.kind() == PlainValue::Kind::kInt) {
        report.global_step = v->value.integer();
        step_value = key;
        break;
      }
      if ((step = index.Find(key)) != nullptr) break;
    }
    if (step != nullptr) {
      int64_t n = 1;
      for (int64_t d : step->shape) n *= d;
      if (n != 1 || !c10::isIntegralType(step->dtype, /*includeBool=*/false)) {
        return absl::InvalidArgumentError(absl::StrCat("key ", Quote(step->key), " is not a one-element integer tensor"));
      }
      EntryReader entries(options.buffer_bytes, nullptr);
      SL_ASSIGN_OR_RETURN(auto value, ReadWhole(reader, entries, *step));
      report.global_step = value.to(at::kLong).reshape({-1})[0].item<int64_t>();
    }
  }
  std::vector<Item> items;
  TorchPickleWriter pickle;
  const IndexValue* nesting = index.FindValue(kStructureKey);
  if (!options.lightning && options.prefix.empty() && nesting != nullptr) {
    // An import's file: its nesting as the import recorded it.
    NestingWriter writer(index, pickle, &items);
    SL_RETURN_IF_ERROR(writer.Root(nesting->value));
    report.values = writer.values();
    report.rebuilt = true;
  } else {
    for (const IndexTensor& t : index.tensors) {
      if (&t == step || t.key.compare(0, options.prefix.size(), options.prefix) != 0) continue;
      if (t.key.size() == options.prefix.size()) continue;
      items.push_back({&t, t.key.substr(options.prefix.size())});
    }
    if (options.lightning) {
      pickle.EmptyDict();
      pickle.Mark();
      pickle.String("state_dict");
    }
    pickle.EmptyDict();
    pickle.Mark();
    for (size_t i = 0; i < items.size(); ++i) {
      pickle.String(items[i].name);
      SL_RETURN_IF_ERROR(WriteTensor(pickle, *items[i].tensor, i));
    }
    // The non-tensor values (a step, a scheduler's state, ...): beside the
    // tensors; in Lightning's layout at the top level (its module state_dict
    // holds tensors only), except under the names the layout itself uses.
    std::vector<const IndexValue*> values;
    for (const IndexValue& v : index.values) {
      if (v.key.size() <= options.prefix.size() || v.key.compare(0, options.prefix.size(), options.prefix) != 0) continue;
      if (v.key == step_value || v.key == kStructureKey) continue;
      const std::string name = v.key.substr(options.prefix.size());
      if (options.lightning && (name == "state_dict" || name == "global_step" || name == "pytorch-lightning_version" ||
                                name == "loops" || name == "optimizer_states" || name == "lr_schedulers")) {
        report.values_not_exported.push_back(v.key);
        continue;
      }
      values.push_back(&v);
    }
    auto write_values = [&] {
      for (const IndexValue* v : values) {
        pickle.String(v->key.substr(options.prefix.size()));
        pickle.Value(v->value);
      }
    };
    if (!options.lightning) write_values();
    pickle.SetItems();
    if (options.lightning) {
      const int64_t global_step = report.global_step.value_or(0);
      pickle.String("global_step");
      pickle.Int(global_step);
      WriteLightningResumeKeys(pickle, global_step);
      write_values();
      pickle.SetItems();
    }
    report.values = static_cast<int64_t>(values.size());
  }
  const std::string bytes = pickle.Finish();
  report.tensors = static_cast<int64_t>(items.size());

  const std::string temp = absl::StrCat(out_path, ".tmp-", ::getpid());
  RemoveFile(temp).IgnoreError();
  SL_ASSIGN_OR_RETURN(auto file, File::CreateNew(temp));
  absl::Status s;
  try {
    s = WriteZip(reader, items, bytes, options, file, &report);
  } catch (const std::exception& e) {
    s = absl::InternalError(absl::StrCat("writing the zip container failed: ", e.what()));
  }
  if (s.ok()) s = RenameFile(temp, out_path);
  if (!s.ok()) {
    RemoveFile(temp).IgnoreError();
    return absl::Status(s.code(), absl::StrCat("export to '", out_path, "': ", s.message()));
  }
  return report;
}

}  // namespace shardlight::sharded::checkpoint::pytorch
