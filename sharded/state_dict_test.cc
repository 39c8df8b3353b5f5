#include "sharded/state_dict.h"

#include <gtest/gtest.h>

namespace shardlight::sharded {
namespace {

TEST(StateDictTest, KeepsInsertionOrderAndRejectsDuplicates) {
  StateDict d;
  ASSERT_TRUE(d.Insert("b.weight", at::ones({2})).ok());
  ASSERT_TRUE(d.Insert("a.bias", at::zeros({1})).ok());
  ASSERT_TRUE(d.Insert("c", at::full({3}, 2.0)).ok());
  EXPECT_EQ(d.Keys(), (std::vector<std::string>{"b.weight", "a.bias", "c"}));
  absl::Status dup = d.Insert("a.bias", at::ones({1}));
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(dup.message(), "state dict already has key \"a.bias\"");
  EXPECT_EQ(d.Insert("", at::ones({1})).code(), absl::StatusCode::kInvalidArgument);
}

TEST(StateDictTest, FindSetErase) {
  StateDict d;
  d.Set("x", at::ones({2}));
  d.Set("y", at::zeros({2}));
  d.Set("x", at::full({2}, 5.0));  // replaces in place
  EXPECT_EQ(d.Keys(), (std::vector<std::string>{"x", "y"}));
  ASSERT_NE(d.Find("x"), nullptr);
  EXPECT_EQ(std::get<at::Tensor>(*d.Find("x"))[0].item<float>(), 5.0f);
  EXPECT_FALSE(IsSharded(*d.Find("x")));
  EXPECT_EQ(d.Find("z"), nullptr);
  EXPECT_TRUE(d.Erase("x"));
  EXPECT_FALSE(d.Erase("x"));
  EXPECT_EQ(d.Keys(), (std::vector<std::string>{"y"}));
  ASSERT_NE(d.Find("y"), nullptr);  // index still right after the erase
  EXPECT_EQ(std::get<at::Tensor>(*d.Find("y"))[1].item<float>(), 0.0f);
}

TEST(StateDictTest, ValuesBesideTensors) {
  StateDict d;
  ASSERT_TRUE(d.Insert("w", at::ones({2})).ok());
  ASSERT_TRUE(d.InsertValue("step", PlainValue::Int(7)).ok());
  ASSERT_TRUE(d.InsertValue("lr", PlainValue::Float(0.1)).ok());
  EXPECT_EQ(d.InsertValue("w", PlainValue::None()).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(d.Insert("step", at::ones({1})).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(d.InsertValue("", PlainValue::None()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.size(), 1u);
  EXPECT_EQ(d.ValueKeys(), (std::vector<std::string>{"step", "lr"}));
  EXPECT_EQ(d.FindValue("step")->integer(), 7);
  EXPECT_EQ(d.FindValue("w"), nullptr);
  d.SetValue("w", PlainValue::Str("now a value"));  // replaces the tensor
  EXPECT_FALSE(d.Contains("w"));
  EXPECT_EQ(d.ValueKeys(), (std::vector<std::string>{"step", "lr", "w"}));
  d.Set("step", at::zeros({1}));  // and back
  EXPECT_FALSE(d.ContainsValue("step"));
  EXPECT_TRUE(d.EraseValue("lr"));
  EXPECT_FALSE(d.EraseValue("lr"));
  EXPECT_EQ(d.ValueKeys(), (std::vector<std::string>{"w"}));
  EXPECT_EQ(d.FindValue("w")->text(), "now a value");
}

}  // namespace
}  // namespace shardlight::sharded
