// The restricted pickle reader on hand-made pickles: what it builds, what it
// leaves opaque, and that malformed input (every truncation of a valid
// pickle included) is an error, never a crash.
#include "sharded/checkpoint/interop/pytorch/pickle_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "sharded/checkpoint/interop/pytorch/torch_export.h"
#include "sharded/checkpoint/interop/pytorch/torch_file.h"

namespace shardlight::sharded::checkpoint::pytorch {
namespace {

using ::testing::HasSubstr;
using namespace std::string_literals;

std::string Bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(static_cast<char>(c));
  return s;
}

// {"w": tensor over storage "0" (6 floats): offset 1, sizes [2, 2], strides [1, 2]}
std::string OneTensorPickle() {
  TorchPickleWriter p;
  p.EmptyDict();
  p.Mark();
  p.String("w");
  p.Tensor(c10::kFloat, "0", 6, 1, {2, 2}, {1, 2});
  p.SetItems();
  return p.Finish();
}

TEST(PickleReader, ReadsATensorRecord) {
  auto g = ReadPickle(OneTensorPickle());
  ASSERT_TRUE(g.ok()) << g.status();
  const int root = g->root();
  ASSERT_EQ(g->kind(root), PickleKind::kDict);
  ASSERT_EQ(g->items(root).size(), 2u);
  EXPECT_EQ(g->text(g->items(root)[0]), "w");
  const int tensor = g->items(root)[1];
  ASSERT_EQ(g->kind(tensor), PickleKind::kTensor);
  const PickleTensor t = g->tensor(tensor);
  EXPECT_EQ(t.storage_offset, 1);
  EXPECT_EQ(std::vector<int64_t>(t.sizes.begin(), t.sizes.end()), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(std::vector<int64_t>(t.strides.begin(), t.strides.end()), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(g->kind(t.storage), PickleKind::kStorage);
  const PickleStorage s = g->storage(t.storage);
  EXPECT_EQ(s.key, "0");
  EXPECT_EQ(s.location, "cpu");
  EXPECT_EQ(s.dtype, c10::kFloat);
  EXPECT_EQ(s.numel, 6);
}

TEST(PickleReader, EveryTruncationIsAnError) {
  const std::string good = OneTensorPickle();
  for (size_t n = 0; n < good.size(); ++n) {
    auto g = ReadPickle(good.substr(0, n));
    EXPECT_FALSE(g.ok()) << n;
  }
}

TEST(PickleReader, MalformedInput) {
  EXPECT_THAT(ReadPickle(Bytes({0x80, 2, 0xff})).status().message(), HasSubstr("unknown opcode 0xff"));
  EXPECT_THAT(ReadPickle("R.").status().message(), HasSubstr("stack underflow"));
  EXPECT_THAT(ReadPickle("h\x05.").status().message(), HasSubstr("memo key 5 was never stored"));
  EXPECT_THAT(ReadPickle(Bytes({'X', 0xff, 0xff, 0xff, 0x7f, 'a'})).status().message(), HasSubstr("overruns"));
  EXPECT_THAT(ReadPickle(Bytes({0x80, 9})).status().message(), HasSubstr("protocol 9"));
  EXPECT_THAT(ReadPickle("e.").status().message(), HasSubstr("MARK"));
  EXPECT_THAT(ReadPickle("}K\x01" "a.").status().message(), HasSubstr("items added to a dict"));
  // A persistent id naming a storage class outside the whitelist.
  TorchPickleWriter p;
  p.Mark();
  p.String("storage");
  p.Global("os", "system");
  p.String("0");
  p.String("cpu");
  p.Int(1);
  p.Tuple();
  std::string s = p.Finish();
  s.insert(s.size() - 1, "Q");
  EXPECT_THAT(ReadPickle(s).status().message(), HasSubstr("storage class os.system is not supported"));
  // _rebuild_tensor_v2 called with the wrong arguments.
  EXPECT_THAT(ReadPickle("ctorch._utils\n_rebuild_tensor_v2\n(K\x01tR.").status().message(),
              HasSubstr("_rebuild_tensor_v2 needs"));
}

TEST(PickleReader, UnknownClassesStayOpaque) {
  // AttributeDict-like: GLOBAL, EMPTY_TUPLE, NEWOBJ, then items and state.
  const std::string pickle = "\x80\x02}(X\x01\0\0\0h"s + "c__main__\nAttributeDict\n)\x81"s +
                             "(X\x02\0\0\0lrG?\xb9\x99\x99\x99\x99\x99\x9au}b"s +  // SETITEMS, BUILD are dropped
                             "X\x01\0\0\0fcos\nsystem\nX\x02\0\0\0lsR"s +            // a call is only named
                             "u."s;
  auto g = ReadPickle(pickle);
  ASSERT_TRUE(g.ok()) << g.status();
  const absl::Span<const int> root = g->items(g->root());
  ASSERT_EQ(root.size(), 4u);
  EXPECT_EQ(g->kind(root[1]), PickleKind::kObject);
  EXPECT_EQ(g->text(root[1]), "__main__.AttributeDict");
  EXPECT_EQ(g->text(root[3]), "os.system");
}

// A dataclass as pickle writes one (NEWOBJ, then BUILD with its fields):
// only named by default; its arguments and state recorded with kKeep, and
// still never applied.
TEST(PickleReader, KeptObjectsRecordArgumentsAndState) {
  TorchPickleWriter p;
  p.Global("pkg", "Point");
  p.Mark();
  p.Int(7);
  p.Tuple();
  p.NewObj();
  p.EmptyDict();
  p.Mark();
  p.String("x");
  p.Int(3);
  p.SetItems();
  p.Build();
  const std::string bytes = p.Finish();
  auto dropped = ReadPickle(bytes);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(dropped->kind(dropped->root()), PickleKind::kObject);
  EXPECT_EQ(dropped->object_arguments(dropped->root()), -1);
  EXPECT_EQ(dropped->object_state(dropped->root()), -1);
  auto kept = ReadPickle(bytes, {}, ObjectState::kKeep);
  ASSERT_TRUE(kept.ok()) << kept.status();
  const int root = kept->root();
  EXPECT_EQ(kept->text(root), "pkg.Point");
  const int args = kept->object_arguments(root);
  ASSERT_GE(args, 0);
  ASSERT_EQ(kept->kind(args), PickleKind::kTuple);
  ASSERT_EQ(kept->items(args).size(), 1u);
  EXPECT_EQ(kept->integer(kept->items(args)[0]), 7);
  const int state = kept->object_state(root);
  ASSERT_GE(state, 0);
  ASSERT_EQ(kept->kind(state), PickleKind::kDict);
  EXPECT_EQ(kept->text(kept->items(state)[0]), "x");
  EXPECT_EQ(kept->integer(kept->items(state)[1]), 3);
}

TEST(PickleReader, WideIntegersAndCycles) {
  auto g = ReadPickle(Bytes({0x8a, 9, 1, 0, 0, 0, 0, 0, 0, 0, 1, '.'}));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->kind(g->root()), PickleKind::kObject);
  g = ReadPickle(Bytes({0x8a, 9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '.'}));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->integer(g->root()), -1);
  // {"a": l} where l contains itself: selecting it stops at the depth limit.
  g = ReadPickle(std::string("}X\x01\0\0\0a]q\x01h\x01" "as.", 15));
  ASSERT_TRUE(g.ok()) << g.status();
  auto selected = SelectEntries(*g, {});
  EXPECT_THAT(selected.status().message(), HasSubstr("nested deeper"));
}

TEST(SelectEntries, LightningSkipsWhatItDoesNotImport) {
  TorchPickleWriter p;
  p.EmptyDict();
  p.Mark();
  p.String("epoch");
  p.Int(3);
  p.String("global_step");
  p.Int(42);
  p.String("state_dict");
  p.EmptyDict();
  p.Mark();
  p.String("layer.w");
  p.Tensor(c10::kFloat, "0", 1, 0, {}, {});
  p.String("layer.n");
  p.Int(7);
  p.SetItems();
  p.String("hyper_parameters");
  p.Global("pytorch_lightning.utilities.parsing", "AttributeDict");
  p.EmptyTuple();
  p.Reduce();
  p.SetItems();
  auto g = ReadPickle(p.Finish());
  ASSERT_TRUE(g.ok()) << g.status();
  SelectOptions options;
  options.global_step = true;
  auto s = SelectEntries(*g, options);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->lightning);
  ASSERT_EQ(s->tensors.size(), 1u);
  EXPECT_EQ(s->tensors[0].key, "layer.w");
  EXPECT_EQ(s->global_step, 42);
  EXPECT_THAT(s->skipped, ::testing::ElementsAre("epoch: int", "hyper_parameters: pytorch_lightning.utilities.parsing.AttributeDict"));
  EXPECT_THAT(s->not_stored, ::testing::ElementsAre("layer.n: int"));
  options.optimizer_states = true;
  EXPECT_THAT(SelectEntries(*g, options).status().message(), HasSubstr("no optimizer_states"));

  // What `ckpt import` selects: every plain entry a value, the class listed,
  // the nesting recorded (state_dict's keys under the prefix).
  SelectOptions carry;
  carry.carry_values = true;
  carry.key_prefix = "model.";
  auto c = SelectEntries(*g, carry);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->tensors.size(), 1u);
  EXPECT_EQ(c->tensors[0].key, "model.layer.w");
  EXPECT_EQ(c->tensors[0].prefix_bytes, 6u);
  std::vector<std::string> values;
  for (const SelectedValue& v : c->values) values.push_back(v.key + "=" + v.value.Repr());
  EXPECT_THAT(values, ::testing::ElementsAre("epoch=3", "global_step=42", "model.layer.n=7"));
  EXPECT_THAT(c->not_carried,
              ::testing::ElementsAre("hyper_parameters: pytorch_lightning.utilities.parsing.AttributeDict"));
  ASSERT_TRUE(c->structure.has_value());
  EXPECT_EQ(c->structure->Repr(),
            "{'version': 1, 'lightning': True, 'prefix': 'model.', 'tree': {'epoch': None, 'global_step': None, "
            "'state_dict': {'layer.w': None, 'layer.n': None}}}");
}

TEST(SelectEntries, RefusesClassesInsideImportedEntries) {
  TorchPickleWriter p;
  p.EmptyDict();
  p.Mark();
  p.String("enc");
  p.EmptyDict();
  p.Mark();
  p.String("cfg");
  p.Global("argparse", "Namespace");
  p.EmptyTuple();
  p.Reduce();
  p.SetItems();
  p.SetItems();
  auto g = ReadPickle(p.Finish());
  ASSERT_TRUE(g.ok()) << g.status();
  auto s = SelectEntries(*g, {});
  EXPECT_THAT(s.status().message(), HasSubstr("at 'enc.cfg': refusing an instance of 'argparse.Namespace'"));
  // A list at the root is not a state dict.
  g = ReadPickle("](K\x01K\x02" "e.");
  ASSERT_TRUE(g.ok());
  EXPECT_THAT(SelectEntries(*g, {}).status().message(), HasSubstr("holds a list, not a dict"));
}

// [None] * n as Python pickles it: EMPTY_LIST, then APPENDS of 1000.
std::string NonesPickle(int64_t n) {
  std::string p = "\x80\x02]q\x00"s;
  for (int64_t done = 0; done < n;) {
    const int64_t batch = std::min<int64_t>(1000, n - done);
    p += "(" + std::string(static_cast<size_t>(batch), 'N') + "e";
    done += batch;
  }
  return p + ".";
}

TEST(PickleReader, RepeatedImmutablesAreOneNode) {
  auto g = ReadPickle(NonesPickle(100000));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->size(), 2);  // the list and one None
  EXPECT_EQ(g->items(g->root()).size(), 100000u);
  g = ReadPickle("(K\x05K\x05\x88\x88))t.");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->size(), 4);  // 5, True, (), the tuple
  EXPECT_EQ(g->items(g->root()).size(), 6u);
  EXPECT_TRUE(g->boolean(g->items(g->root())[2]));
}

// The per-node cost (issue 26): measured on a pickle as torch.save writes a
// state dict of one-element tensors and on a list of Nones, bounded here.
TEST(PickleReader, TheGraphIsASmallMultipleOfThePickle) {
  constexpr int kTensors = 100000;
  TorchPickleWriter p;
  p.EmptyDict();
  p.Mark();
  for (int i = 0; i < kTensors; ++i) {
    p.String("layer" + std::to_string(i) + ".weight");
    p.Tensor(c10::kFloat, std::to_string(i), 1, 0, {1}, {1});
  }
  p.SetItems();
  const std::string pickle = p.Finish();
  auto g = ReadPickle(pickle);
  ASSERT_TRUE(g.ok()) << g.status();
  const double per_byte = static_cast<double>(g->MemoryBytes()) / static_cast<double>(pickle.size());
  std::printf("state dict of %d tensors: pickle %zu bytes, %d nodes, graph %lld bytes (%.1f per node, %.0f per "
              "tensor, %.2f per pickle byte)\n",
              kTensors, pickle.size(), g->size(), static_cast<long long>(g->MemoryBytes()),
              static_cast<double>(g->MemoryBytes()) / g->size(), static_cast<double>(g->MemoryBytes()) / kTensors,
              per_byte);
  EXPECT_LT(per_byte, 4.0);
  const std::string nones = NonesPickle(2000000);
  auto n = ReadPickle(nones);  // a fresh graph: assigning into `g` would keep g's arenas
  ASSERT_TRUE(n.ok()) << n.status();
  std::printf("[None] * 2000000: pickle %zu bytes, graph %lld bytes\n", nones.size(),
              static_cast<long long>(n->MemoryBytes()));
  EXPECT_LT(n->MemoryBytes(), 5 * static_cast<int64_t>(nones.size()));  // one 4-byte item per None (and doubling)
}

TEST(PickleReader, TextsAreBoundedByTheInput) {
  // Four memoized 300 KB strings, then STACK_GLOBAL of every pair, many times:
  // each distinct name is stored once; the distinct pairs exceed the budget.
  std::string p = "\x80\x04";
  for (int i = 0; i < 4; ++i) {
    p += "X";
    const uint32_t n = 300000;
    for (int b = 0; b < 4; ++b) p.push_back(static_cast<char>((n >> (8 * b)) & 0xFF));
    p += std::string(n, static_cast<char>('a' + i)) + "\x94" + "0";  // MEMOIZE, POP
  }
  std::string same = p;
  for (int k = 0; k < 1000; ++k) same += "h\x00h\x01\x93" "0"s;
  auto g = ReadPickle(same + "N.");
  ASSERT_TRUE(g.ok()) << g.status();
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) p += "h"s + static_cast<char>(i) + "h"s + static_cast<char>(j) + "\x93" "0"s;
  }
  EXPECT_THAT(ReadPickle(p + "N.").status().message(), HasSubstr("exceed twice the pickle's size"));
}

TEST(PickleReader, MemoKeysDenseSparseAndLimited) {
  // Dense (0, 1) and sparse (4000000000) keys both come back.
  auto g = ReadPickle("K\x07q\x00" "0K\x08r\x00\x28\x6b\xee" "0h\x00j\x00\x28\x6b\xee\x86."s);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->integer(g->items(g->root())[0]), 7);
  EXPECT_EQ(g->integer(g->items(g->root())[1]), 8);
  PickleLimits limits;
  limits.max_memo = 2;
  EXPECT_THAT(ReadPickle("Nq\x00q\x01q\x02."s, limits).status().message(), HasSubstr("the memo is too large"));
  EXPECT_TRUE(ReadPickle("Nq\x00q\x01q\x00q\x01."s, limits).ok());  // overwriting is no new slot
}

TEST(SelectEntries, SharedRecordsCannotMultiplyPaths) {
  // {"deep": x40} with x(k+1) = [x(k), x(k)]: 2^40 paths through 42 records.
  std::string p = "\x80\x02}X\x04\0\0\0deepN"s;
  for (int i = 0; i < 40; ++i) p += "q\x01h\x01\x86"s;  // MEMOIZE as 1, GET 1, TUPLE2
  p += "s.";
  auto g = ReadPickle(p);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_LT(g->size(), 50);
  EXPECT_THAT(SelectEntries(*g, {}).status().message(), HasSubstr("structure is too large to import"));
}

TEST(SelectEntries, LongKeysAndManyScalarsAreBounded) {
  TorchPickleWriter p;
  p.EmptyDict();
  p.Mark();
  p.String(std::string(2000, 'k'));
  p.Int(1);
  p.SetItems();
  auto g = ReadPickle(p.Finish());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(SelectEntries(*g, {}).status().message(), HasSubstr("a key longer than 1024 bytes"));
  // {"meta": [None] * 100000}: 32 listed, all counted.
  std::string nones = NonesPickle(100000);
  nones.pop_back();
  g = ReadPickle("\x80\x02}X\x04\0\0\0meta"s + nones.substr(2) + "s.");
  ASSERT_TRUE(g.ok()) << g.status();
  auto s = SelectEntries(*g, {});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->not_stored.size(), 32u);
  EXPECT_EQ(s->not_stored_count, 100000);
  EXPECT_EQ(s->not_stored[31], "meta.31: None");
}

TEST(SelectEntries, SkippedEntriesAreListedUpToALimitAndCounted) {
  TorchPickleWriter p;  // a Lightning file with 100 extra top-level entries
  p.EmptyDict();
  p.Mark();
  p.String("epoch");
  p.Int(1);
  p.String("state_dict");
  p.EmptyDict();
  for (int i = 0; i < 100; ++i) {
    p.String("extra" + std::to_string(i));
    p.Int(i);
  }
  p.SetItems();
  auto g = ReadPickle(p.Finish());
  ASSERT_TRUE(g.ok()) << g.status();
  auto s = SelectEntries(*g, {});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->lightning);
  EXPECT_EQ(s->skipped_count, 101);  // epoch and the 100 extras
  ASSERT_EQ(s->skipped.size(), 32u);
  EXPECT_EQ(s->skipped[0], "epoch: int");
  EXPECT_EQ(s->skipped[31], "extra30: int");
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint::pytorch
