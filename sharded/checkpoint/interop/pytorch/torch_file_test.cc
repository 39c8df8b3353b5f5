// torch.save files made here (PyTorchStreamWriter + our pickle writer, so
// each can be broken on purpose): import, export round trips, and every
// refusal -- each with nothing written to OUT.
#include <caffe2/serialize/inline_container.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
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
    EXPECT_EQ(exported->values_not_exported, lightning ? std::vector<std::string>{"global_step"} : std::vector<std::string>{});
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

  TorchPickleWriter p;  // a class instance inside the imported dict
  p.EmptyDict();
  p.Mark();
  p.String("opt");
  p.Global("torch.optim.sgd", "SGD");
  p.EmptyTuple();
  p.Reduce();
  p.SetItems();
  WriteZip(Tmp("class.pt"), p.Finish(), {});
  ExpectRefused(Tmp("class.pt"), "at 'opt': refusing an instance of 'torch.optim.sgd.SGD'");

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
