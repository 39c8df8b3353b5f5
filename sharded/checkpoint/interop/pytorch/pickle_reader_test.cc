// The restricted pickle reader on hand-made pickles: what it builds, what it
// leaves opaque, and that malformed input (every truncation of a valid
// pickle included) is an error, never a crash.
#include "sharded/checkpoint/interop/pytorch/pickle_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
  const PickleNode& root = g->node(g->root);
  ASSERT_EQ(root.kind, PickleKind::kDict);
  ASSERT_EQ(root.items.size(), 2u);
  EXPECT_EQ(g->node(root.items[0]).text, "w");
  const PickleNode& t = g->node(root.items[1]);
  ASSERT_EQ(t.kind, PickleKind::kTensor);
  EXPECT_EQ(t.storage_offset, 1);
  EXPECT_EQ(t.sizes, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(t.strides, (std::vector<int64_t>{1, 2}));
  const PickleNode& s = g->node(t.storage);
  EXPECT_EQ(s.kind, PickleKind::kStorage);
  EXPECT_EQ(s.text, "0");
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
  const PickleNode& root = g->node(g->root);
  ASSERT_EQ(root.items.size(), 4u);
  EXPECT_EQ(g->node(root.items[1]).kind, PickleKind::kObject);
  EXPECT_EQ(g->node(root.items[1]).text, "__main__.AttributeDict");
  EXPECT_EQ(g->node(root.items[3]).text, "os.system");
}

TEST(PickleReader, WideIntegersAndCycles) {
  auto g = ReadPickle(Bytes({0x8a, 9, 1, 0, 0, 0, 0, 0, 0, 0, 1, '.'}));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->node(g->root).kind, PickleKind::kObject);
  g = ReadPickle(Bytes({0x8a, 9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '.'}));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->node(g->root).integer, -1);
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

}  // namespace
}  // namespace shardlight::sharded::checkpoint::pytorch
