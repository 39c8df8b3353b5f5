// torch.save files made here (PyTorchStreamWriter + our pickle writer, so
// each can be broken on purpose): import, export round trips, and every
// refusal -- each with nothing written to OUT.
#include <caffe2/serialize/inline_container.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/format/checkpoint_reader.h"
#include "sharded/checkpoint/storage/posix_file.h"
#include "sharded/checkpoint/interop/pytorch/torch_export.h"
#include "sharded/checkpoint/interop/pytorch/pickle_values.h"
#include "sharded/checkpoint/interop/pytorch/torch_file.h"
#include "sharded/checkpoint/interop/pytorch/torch_import.h"
#include "sharded/dtype_table.h"

namespace shardlight::sharded::checkpoint::pytorch {
namespace {

using ::testing::HasSubstr;

std::string Tmp(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return absl::StrCat(t ? t : "/tmp", "/", name);
}

void WriteZip(const std::string& path, const std::string& pickle, const std::map<std::string, std::string>& records) {
  caffe2::serialize::PyTorchStreamWriter zip(path);
  zip.writeRecord("data.pkl", pickle.data(), pickle.size());
  zip.writeRecord("byteorder", "little", 6);
  for (const auto& [name, bytes] : records) zip.writeRecord(name, bytes.data(), bytes.size());
  zip.writeEndOfFile();
}

std::string FloatBytes(int n) {  // 0, 1, ..., n-1 as float32
  std::string s(static_cast<size_t>(n) * 4, '\0');
  for (int i = 0; i < n; ++i) {
    float v = static_cast<float>(i);
    std::memcpy(&s[static_cast<size_t>(i) * 4], &v, 4);
  }
  return s;
}

// {"w": view(offset, sizes, strides) of storage "0" with `numel` floats, "b": 0-d}
std::string Pickle(int64_t numel, int64_t offset, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  TorchPickleWriter p;
  p.EmptyDict();
  p.Mark();
  p.String("w");
  p.Tensor(c10::kFloat, "0", numel, offset, sizes, strides);
  p.String("b");
  p.Tensor(c10::kFloat, "0", numel, 2, {}, {});
  p.SetItems();
  return p.Finish();
}

TEST(TorchFile, ViewsShareTheirStorage) {
  const std::string in = Tmp("view.pt");
  WriteZip(in, Pickle(6, 1, {2, 2}, {1, 2}), {{"data/0", FloatBytes(6)}});
  auto f = TorchFile::Open(in);
  ASSERT_TRUE(f.ok()) << f.status();
  auto sel = SelectEntries((*f)->graph(), {});
  ASSERT_TRUE(sel.ok());
  ASSERT_EQ(sel->tensors.size(), 2u);
  auto w = (*f)->Tensor(sel->tensors[0].node, "w");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(at::equal(*w, at::tensor({1.f, 3.f, 2.f, 4.f}).reshape({2, 2})));
  auto b = (*f)->Tensor(sel->tensors[1].node, "b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->dim(), 0);
  EXPECT_EQ(b->item<float>(), 2.f);
}

TEST(TorchFile, ImportThenExportRoundTrips) {
  const std::string in = Tmp("rt.pt");
  WriteZip(in, Pickle(6, 1, {2, 2}, {1, 2}), {{"data/0", FloatBytes(6)}});
  ImportOptions options;
  options.world_size = 3;
  options.key_prefix = "model.";
  options.shard_dims = {{"w", 1}};
  auto report = ImportTorchFile(in, Tmp("rt_ckpt"), options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->tensors, 2);
  EXPECT_EQ(report->sharded, 1);
  auto reader = CheckpointReader::Open(Tmp("rt_ckpt"));
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(reader->index().world_size, 3);
  EXPECT_TRUE(reader->index().Find("model.w")->sharded);
  ExportOptions eo;
  eo.prefix = "model.";
  auto exported = ExportTorchFile(Tmp("rt_ckpt"), Tmp("rt_out.pt"), eo);
  ASSERT_TRUE(exported.ok()) << exported.status();
  auto f = TorchFile::Open(Tmp("rt_out.pt"));
  ASSERT_TRUE(f.ok()) << f.status();
  auto sel = SelectEntries((*f)->graph(), {});
  ASSERT_TRUE(sel.ok());
  ASSERT_EQ(sel->tensors.size(), 2u);
  EXPECT_EQ(sel->tensors[0].key, "w");
  EXPECT_TRUE(at::equal(*(*f)->Tensor(sel->tensors[0].node, "w"), at::tensor({1.f, 3.f, 2.f, 4.f}).reshape({2, 2})));
}

// Every dtype of the table (C32 through _rebuild_tensor_v3 on every leg;
// float8 and uint16..64 too where this LibTorch has them), as random bytes.
TEST(TorchFile, EveryExportedDtypeComesBack) {
  OfflineCheckpointWriter writer(Tmp("dtypes_ckpt"), 2);
  std::vector<c10::ScalarType> dtypes;
  std::map<std::string, at::Tensor> want;
  uint32_t seed = 1;
  for (const DtypeInfo& d : KnownDtypes()) {
    at::Tensor t = at::empty({3, 4}, at::TensorOptions().dtype(d.dtype));
    auto* bytes = static_cast<unsigned char*>(t.data_ptr());
    for (int64_t i = 0; i < t.numel() * t.element_size(); ++i) {
      seed = seed * 1664525u + 1013904223u;
      bytes[i] = static_cast<unsigned char>(d.dtype == c10::kBool ? (seed >> 16) % 2 : seed >> 24);
    }
    dtypes.push_back(d.dtype);
    want[d.torch_name] = t;
    ASSERT_TRUE(writer.AddDense(d.torch_name, t).ok()) << d.torch_name;
  }
  ASSERT_TRUE(writer.AddDense("trainer.step", at::full({1}, 17, at::kLong)).ok());
  ASSERT_TRUE(writer.Commit().ok());
  ExportOptions eo;
  eo.lightning = true;
  auto exported = ExportTorchFile(Tmp("dtypes_ckpt"), Tmp("dtypes.ckpt"), eo);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(exported->global_step, 17);
  auto f = TorchFile::Open(Tmp("dtypes.ckpt"));
  ASSERT_TRUE(f.ok()) << f.status();
  SelectOptions so;
  so.global_step = true;
  auto sel = SelectEntries((*f)->graph(), so);
  ASSERT_TRUE(sel.ok()) << sel.status();
  EXPECT_TRUE(sel->lightning);
  EXPECT_EQ(sel->global_step, 17);
  ASSERT_EQ(sel->tensors.size(), dtypes.size());
  for (const SelectedTensor& t : sel->tensors) {
    auto got = (*f)->Tensor(t.node, t.key);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->scalar_type(), want[t.key].scalar_type()) << t.key;
    ASSERT_EQ(got->sizes(), want[t.key].sizes()) << t.key;
    const at::Tensor g = got->contiguous();
    EXPECT_EQ(std::memcmp(g.data_ptr(), want[t.key].data_ptr(), g.numel() * g.element_size()), 0) << t.key;
  }
}

// Non-tensor values export beside the tensors (Lightning: at the top level,
// but for a name the layout owns) and read back as the same PlainValues
// through the restricted reader; bytes as protocol 2 spells them.
TEST(TorchFile, ValuesExportAndReadBack) {
  using V = PlainValue;
  const std::vector<std::pair<std::string, V>> values = {
      {"step", V::Int(int64_t{1} << 40)},
      {"lr", V::Float(2.5e-4)},
      {"betas", V::Tuple({V::Float(0.9), V::Float(-0.0)})},
      {"run", V::Str("run-\xce\xb1 'q'")},
      {"loader", V::Bytes(std::string("\x00\xff\x80\xc3\n", 5))},
      {"empty", V::Bytes("")},
      {"sched", V::Dict({V::Str("last_epoch"), V::Int(-5), V::Int(3), V::List({V::None(), V::Bool(true)})})},
      {"global_step", V::Int(9)},
  };
  OfflineCheckpointWriter writer(Tmp("values_ckpt"), 1);
  ASSERT_TRUE(writer.AddDense("w", at::ones({2})).ok());
  for (const auto& [key, value] : values) ASSERT_TRUE(writer.AddValue(key, value).ok()) << key;
  ASSERT_TRUE(writer.Commit().ok());
  for (const bool lightning : {false, true}) {
    ExportOptions eo;
    eo.lightning = lightning;
    const std::string out = Tmp(lightning ? "values.ckpt" : "values.pt");
    auto exported = ExportTorchFile(Tmp("values_ckpt"), out, eo);
    ASSERT_TRUE(exported.ok()) << exported.status();
    EXPECT_EQ(exported->values, static_cast<int64_t>(values.size()) - (lightning ? 1 : 0));
    EXPECT_TRUE(exported->values_not_exported.empty());
    // Lightning: the int value global_step is the step (not a value beside it).
    if (lightning) EXPECT_EQ(exported->global_step, 9);
    auto f = TorchFile::Open(out);
    ASSERT_TRUE(f.ok()) << f.status();
    const PickleGraph& g = (*f)->graph();
    std::map<std::string, V> got;
    const absl::Span<const int> items = g.items(g.root());
    for (size_t i = 0; i + 1 < items.size(); i += 2) {
      const std::string key(g.text(items[i]));
      if (key == "state_dict" || key == "loops" || g.kind(items[i + 1]) == PickleKind::kTensor) continue;
      auto v = PlainValueOf(g, items[i + 1]);
      ASSERT_TRUE(v.ok()) << v.status();
      got[key] = *v;
    }
    for (const auto& [key, value] : values) {
      if (lightning && key == "global_step") continue;
      ASSERT_EQ(got.count(key), 1u) << key;
      EXPECT_EQ(got[key], value) << key << ": " << got[key].Repr() << " vs " << value.Repr();
    }
    EXPECT_TRUE(SelectEntries(g, {}).ok());  // values are listed, not refused
  }
}

// What a pickle's tree is, as a value: tensors as 'tensor' (collected in
// order into `tensors`), plain values as themselves.
PlainValue Shape(TorchFile& f, int id, std::vector<at::Tensor>* tensors) {
  const PickleGraph& g = f.graph();
  const PickleKind k = g.kind(id);
  if (k == PickleKind::kTensor) {
    auto t = f.Tensor(id, "t");
    EXPECT_TRUE(t.ok()) << t.status();
    tensors->push_back(t.ok() ? *t : at::Tensor());
    return PlainValue::Str("tensor");
  }
  if (k != PickleKind::kList && k != PickleKind::kTuple && k != PickleKind::kDict) {
    auto v = PlainValueOf(g, id);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : PlainValue::Str("?");
  }
  std::vector<PlainValue> items;
  for (int item : g.items(id)) items.push_back(Shape(f, item, tensors));
  return k == PickleKind::kList ? PlainValue::List(items) : k == PickleKind::kTuple ? PlainValue::Tuple(items) : PlainValue::Dict(items);
}

// A Lightning-style file: state_dict, optimizer state with int keys and a
// tuple, scheduler and loop state (keys with dots), a callback's tensor
// under a key with spaces and quotes, a top-level tuple mixing both.
std::string NestedLightning(std::map<std::string, std::string>* records) {
  TorchPickleWriter p;
  int storages = 0;
  auto tensor = [&](int64_t n) {
    const std::string key = std::to_string(storages++);
    p.Tensor(c10::kFloat, key, n, 0, {n}, {1});
    (*records)["data/" + key] = FloatBytes(static_cast<int>(n));
  };
  auto dict = [&](const std::vector<std::pair<std::string, std::function<void()>>>& entries) {
    p.EmptyDict();
    p.Mark();
    for (const auto& [key, write] : entries) {
      p.String(key);
      write();
    }
    p.SetItems();
  };
  dict({{"epoch", [&] { p.Int(3); }},
        {"global_step", [&] { p.Int(12); }},
        {"pytorch-lightning_version", [&] { p.String("2.6.6"); }},
        {"state_dict", [&] { dict({{"inp.weight", [&] { tensor(6); }}, {"inp.bias", [&] { tensor(2); }}}); }},
        {"optimizer_states", [&] {
           p.EmptyList();
           p.Mark();
           p.EmptyDict();
           p.Mark();
           p.String("state");
           p.EmptyDict();
           p.Mark();
           p.Int(0);
           dict({{"step", [&] { tensor(1); }}, {"exp_avg", [&] { tensor(6); }}});
           p.SetItems();
           p.String("param_groups");
           p.Value(PlainValue::List({PlainValue::Dict({PlainValue::Str("lr"), PlainValue::Float(0.01),
                                                      PlainValue::Str("betas"),
                                                      PlainValue::Tuple({PlainValue::Float(0.9), PlainValue::Float(0.999)}),
                                                      PlainValue::Str("params"), PlainValue::List({PlainValue::Int(0)})})}));
           p.SetItems();
           p.Appends();
         }},
        {"lr_schedulers", [&] { p.Value(*ParsePlainValue("[{'last_epoch': 12, '_last_lr': [0.01]}]")); }},
        {"loops", [&] { p.Value(*ParsePlainValue("{'fit_loop': {'epoch_loop.state_dict': {'_batches_that_stepped': 12}, 'state_dict': {}}}")); }},
        {"callbacks", [&] {
           dict({{"Check{'every': 6, 'x': None}", [&] { dict({{"kth_value", [&] { tensor(1); }}, {"dirpath", [&] { p.String("/tmp"); }}}); }}});
         }},
        {"pair", [&] {
           p.Mark();
           tensor(3);
           p.Int(7);
           p.Tuple();
         }}});
  return p.Finish();
}

TEST(TorchFile, ImportAndExportKeepTheNestingAndEveryValue) {
  std::map<std::string, std::string> records;
  const std::string pickle = NestedLightning(&records);
  WriteZip(Tmp("nested.ckpt"), pickle, records);
  ImportOptions options;
  options.world_size = 2;
  options.key_prefix = "model.";
  options.shard_dims = {{"inp.weight", 0}};
  options.global_step = true;
  options.global_step_key = "trainer.step";
  auto report = ImportTorchFile(Tmp("nested.ckpt"), Tmp("nested_ckpt"), options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->lightning);
  EXPECT_EQ(report->tensors, 6);
  EXPECT_EQ(report->sharded, 1);
  EXPECT_EQ(report->values, 9);  // epoch .. pair.1, and trainer.step
  EXPECT_TRUE(report->structure);
  EXPECT_EQ(report->not_carried_count, 0) << report->not_carried[0];
  auto reader = CheckpointReader::Open(Tmp("nested_ckpt"));
  ASSERT_TRUE(reader.ok()) << reader.status();
  const CheckpointIndex& index = reader->index();
  for (const char* key : {"model.inp.weight", "model.inp.bias", "optimizer_states.0.state.0.step",
                          "optimizer_states.0.state.0.exp_avg", "callbacks.Check{'every': 6, 'x': None}.kth_value",
                          "pair.0"}) {
    EXPECT_NE(index.Find(key), nullptr) << key;
  }
  ASSERT_NE(index.FindValue("optimizer_states.0.param_groups"), nullptr);
  EXPECT_EQ(index.FindValue("optimizer_states.0.param_groups")->value.Repr(),
            "[{'lr': 0.01, 'betas': (0.9, 0.999), 'params': [0]}]");
  ASSERT_NE(index.FindValue("loops"), nullptr);
  EXPECT_EQ(index.FindValue("loops")->value.Repr(),
            "{'fit_loop': {'epoch_loop.state_dict': {'_batches_that_stepped': 12}, 'state_dict': {}}}");
  ASSERT_NE(index.FindValue("trainer.step"), nullptr);
  EXPECT_EQ(index.FindValue("trainer.step")->value, PlainValue::Int(12));
  EXPECT_EQ(index.FindValue("global_step")->value, PlainValue::Int(12));
  EXPECT_EQ(index.FindValue("pair.1")->value, PlainValue::Int(7));

  // The export is the file again: the same tree, the same tensors, and the
  // one entry the import added (trainer.step) at the end of the top level.
  auto exported = ExportTorchFile(Tmp("nested_ckpt"), Tmp("nested_out.ckpt"), {});
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_TRUE(exported->rebuilt);
  EXPECT_EQ(exported->tensors, 6);
  auto before = TorchFile::Open(Tmp("nested.ckpt"));
  auto after = TorchFile::Open(Tmp("nested_out.ckpt"));
  ASSERT_TRUE(before.ok() && after.ok());
  std::vector<at::Tensor> want, got;
  PlainValue want_shape = Shape(**before, (*before)->graph().root(), &want);
  const PlainValue got_shape = Shape(**after, (*after)->graph().root(), &got);
  std::vector<PlainValue> items = want_shape.items();
  items.push_back(PlainValue::Str("trainer.step"));
  items.push_back(PlainValue::Int(12));
  want_shape = PlainValue::Dict(items);
  EXPECT_EQ(got_shape, want_shape) << got_shape.Repr() << "\nvs\n" << want_shape.Repr();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(at::equal(got[i], want[i])) << i;

  // With --prefix (or --lightning) the export is the flat layout, as before.
  ExportOptions flat;
  flat.prefix = "model.";
  auto weights = ExportTorchFile(Tmp("nested_ckpt"), Tmp("nested_weights.pt"), flat);
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_FALSE(weights->rebuilt);
  EXPECT_EQ(weights->tensors, 2);
}

TEST(TorchFile, ImportListsWhatItCannotCarryAndKeepsTheRest) {
  TorchPickleWriter p;  // {"w": tensor, "opt": SGD(), "cb": {"/tmp/best.ckpt": tensor, "n": 1}, "l": [SGD(), 2]}
  p.EmptyDict();
  p.Mark();
  p.String("w");
  p.Tensor(c10::kFloat, "0", 6, 0, {6}, {1});
  p.String("opt");
  p.Global("torch.optim.sgd", "SGD");
  p.EmptyTuple();
  p.Reduce();
  p.String("cb");
  p.EmptyDict();
  p.Mark();
  p.String("/tmp/best.ckpt");
  p.Tensor(c10::kFloat, "0", 6, 1, {1}, {1});
  p.String("n");
  p.Int(1);
  p.SetItems();
  p.String("l");
  p.EmptyList();
  p.Mark();
  p.Global("torch.optim.sgd", "SGD");
  p.EmptyTuple();
  p.Reduce();
  p.Int(2);
  p.Appends();
  p.SetItems();
  WriteZip(Tmp("class.pt"), p.Finish(), {{"data/0", FloatBytes(6)}});
  auto report = ImportTorchFile(Tmp("class.pt"), Tmp("class_ckpt"), {});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->tensors, 1);
  EXPECT_EQ(report->values, 2);  // cb.n, l.1
  ASSERT_EQ(report->not_carried_count, 3);
  EXPECT_EQ(report->not_carried[0], "opt: torch.optim.sgd.SGD");
  EXPECT_THAT(report->not_carried[1], HasSubstr("cb./tmp/best.ckpt: "));
  EXPECT_EQ(report->not_carried[2], "l.0: torch.optim.sgd.SGD");
  // The export: what was carried, in its place (a list keeps the place with None).
  auto exported = ExportTorchFile(Tmp("class_ckpt"), Tmp("class_out.pt"), {});
  ASSERT_TRUE(exported.ok()) << exported.status();
  auto f = TorchFile::Open(Tmp("class_out.pt"));
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<at::Tensor> tensors;
  EXPECT_EQ(Shape(**f, (*f)->graph().root(), &tensors).Repr(), "{'w': 'tensor', 'cb': {'n': 1}, 'l': [None, 2]}");
}

// Each bad input: the error names the problem and OUT never appears.
void ExpectRefused(const std::string& in, const std::string& needle, ImportOptions options = {}) {
  const std::string out = Tmp("never");
  auto r = ImportTorchFile(in, out, options);
  EXPECT_FALSE(r.ok()) << in;
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(needle)) << in;
  EXPECT_FALSE(PathExists(out)) << in;
  EXPECT_FALSE(PathExists(out + ".tmp-import-" + std::to_string(::getpid()))) << in;
}

// A torch.save of a dtype this LibTorch lacks (1.13: float8, uint16..64):
// refused naming the key, the dtype and the release that has it.
TEST(TorchFile, DtypesThisLibTorchLacksAreRefusedByName) {
  const std::string why = UnavailableDtypeMessage("float8_e4m3fn");
  if (why.empty()) GTEST_SKIP() << "this LibTorch has float8_e4m3fn (the loaded case is EveryExportedDtypeComesBack)";
  TorchPickleWriter p;  // {"w": _rebuild_tensor_v3(UntypedStorage of 4 bytes, 0, (4,), (1,), False, {}, float8)}
  p.EmptyDict();
  p.Mark();
  p.String("w");
  p.Global("torch._utils", "_rebuild_tensor_v3");
  p.Mark();
  p.Mark();
  p.String("storage");
  p.Global("torch.storage", "UntypedStorage");
  p.String("0");
  p.String("cpu");
  p.Int(4);
  p.Tuple();
  p.PersistentId();
  p.Int(0);
  p.Mark();
  p.Int(4);
  p.Tuple();
  p.Mark();
  p.Int(1);
  p.Tuple();
  p.Bool(false);
  p.EmptyDict();
  p.Global("torch", "float8_e4m3fn");
  p.Tuple();
  p.Reduce();
  p.SetItems();
  const std::string in = Tmp("float8.pt");
  WriteZip(in, p.Finish(), {{"data/0", std::string(4, '\x38')}});
  ExpectRefused(in, why);
}

TEST(TorchFile, BadInputIsRefusedAndWritesNothing) {
  const std::string good = Tmp("good.pt");
  WriteZip(good, Pickle(6, 1, {2, 2}, {1, 2}), {{"data/0", FloatBytes(6)}});
  std::ifstream g(good, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(g)), std::istreambuf_iterator<char>());
  auto write = [](const std::string& name, const std::string& b) {
    std::ofstream(Tmp(name), std::ios::binary) << b;
    return Tmp(name);
  };

  ExpectRefused(write("truncated.pt", bytes.substr(0, bytes.size() / 2)), "truncated or corrupt zip");
  std::string cd = bytes;  // the central directory's signature
  cd[cd.rfind("PK\x01\x02")] = 'X';
  ExpectRefused(write("corrupt.pt", cd), "truncated or corrupt zip");
  ExpectRefused(write("text.pt", "this is not a checkpoint at all, just text"), "no zip signature");
  ExpectRefused(write("legacy.pt", "\x80\x02\x8a\x0alegacy-magic"), "legacy (pre-1.6");
  ExpectRefused(Tmp("missing-file.pt"), "missing-file.pt");

  WriteZip(Tmp("no_record.pt"), Pickle(6, 1, {2, 2}, {1, 2}), {});
  ExpectRefused(Tmp("no_record.pt"), "storage record 'no_record/data/0' is missing");
  WriteZip(Tmp("overrun.pt"), Pickle(6, 3, {2, 2}, {1, 2}), {{"data/0", FloatBytes(6)}});
  ExpectRefused(Tmp("overrun.pt"), "overrun storage '0' of 6 elements");
  WriteZip(Tmp("short_record.pt"), Pickle(6, 1, {2, 2}, {1, 2}), {{"data/0", FloatBytes(5)}});
  ExpectRefused(Tmp("short_record.pt"), "declares 20 bytes in the zip directory but the pickle declares 6 elements");
  WriteZip(Tmp("bad_pickle.pt"), Pickle(6, 1, {2, 2}, {1, 2}).substr(0, 30), {{"data/0", FloatBytes(6)}});
  ExpectRefused(Tmp("bad_pickle.pt"), "data.pkl: pickle: truncated");

  ImportOptions typo;
  typo.shard_dims = {{"nope", 0}};
  ExpectRefused(good, "--shard names key 'nope'", typo);
  ImportOptions bad_dim;
  bad_dim.shard_dims = {{"w", 2}};
  ExpectRefused(good, "cannot shard dim 2", bad_dim);
  ImportOptions not_lightning;
  not_lightning.global_step = true;
  ExpectRefused(good, "not a Lightning checkpoint", not_lightning);
}

TEST(TorchFile, ImportIntoAnExistingCheckpointReplacesIt) {
  const std::string in = Tmp("replace.pt");
  WriteZip(in, Pickle(6, 1, {2, 2}, {1, 2}), {{"data/0", FloatBytes(6)}});
  const std::string out = Tmp("replace_ckpt");
  ASSERT_TRUE(ImportTorchFile(in, out, {}).ok());
  ImportOptions options;
  options.world_size = 2;
  ASSERT_TRUE(ImportTorchFile(in, out, options).ok());
  auto reader = CheckpointReader::Open(out);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(reader->index().world_size, 2);
  // A bad input leaves it as it was.
  WriteZip(Tmp("bad.pt"), Pickle(6, 1, {2, 2}, {1, 2}), {});
  EXPECT_FALSE(ImportTorchFile(Tmp("bad.pt"), out, {}).ok());
  auto again = CheckpointReader::Open(out);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->index().generation, reader->index().generation);
}

TEST(ShardSpecs, Parse) {
  std::map<std::string, int64_t> dims;
  EXPECT_TRUE(ParseShardSpecs({"embed.weight=0", "a=b=1"}, &dims).ok());
  EXPECT_EQ(dims["embed.weight"], 0);
  EXPECT_EQ(dims["a=b"], 1);
  EXPECT_THAT(ParseShardSpecs({"x"}, &dims).message(), HasSubstr("KEY=DIM"));
  EXPECT_THAT(ParseShardSpecs({"embed.weight=1"}, &dims).message(), HasSubstr("sharded twice"));
  std::ofstream(Tmp("layout.txt")) << "# layout\nfc.weight = 1\n\n  head=0  # rows\n";
  std::map<std::string, int64_t> from_file;
  ASSERT_TRUE(ReadShardLayoutFile(Tmp("layout.txt"), &from_file).ok());
  EXPECT_EQ(from_file.size(), 2u);
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint::pytorch
