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

}  // namespace
}  // namespace shardlight::sharded
