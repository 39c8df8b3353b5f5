// Non-tensor values (FORMAT.md "values") beside tensors: saved at one world
// size and loaded at others (uneven and empty shards), covered by the
// index's checksum and the agreement, selected and renamed like tensors,
// and refused with clear errors when hostile or mismatched.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/storage/posix_file.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::checkpoint {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;
using testing::TensorSpec;
using ::testing::HasSubstr;
using V = PlainValue;

// What a resume needs of an optimizer and a scheduler, and a data loader's
// pickled state.
std::vector<StateDict::ValueEntry> Values() {
  return {
      {"step", V::Int(1234)},
      {"optim.param_groups", V::List({V::Dict({V::Str("lr"), V::Float(3e-4), V::Str("betas"),
                                               V::Tuple({V::Float(0.9), V::Float(0.999)}), V::Str("weight_decay"),
                                               V::Float(0.0), V::Str("params"), V::List({V::Int(0), V::Int(1)})})})},
      {"lr_scheduler", V::Dict({V::Str("last_epoch"), V::Int(7), V::Str("_last_lr"), V::List({V::Float(1e-5)}),
                                V::Str("name"), V::Str("cosine-\xce\xb1"), V::Str("done"), V::Bool(false)})},
      {"dataloader.dp_rank_0", V::Bytes(std::string("\x80\x04\x95\x00\x00K\x07.", 8))},
      {"nothing", V::None()},
      {"loss", V::Float(std::nan(""))},
  };
}

std::vector<TensorSpec> Layout(int world) {
  // 5 rows over `world` ranks: uneven, and empty shards at 6 ranks.
  return {{"w", {5, 3}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(0, world)},
          {"b", {3}, c10::ScalarType::Double, std::nullopt}};
}

absl::Status SaveWithValues(const std::string& dir, int world) {
  SimulatedCluster cluster(world, testing::Options());
  return cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto state = testing::MakeState(Layout(world), 1, ctx.pg);
    if (!state.ok()) return state.status();
    for (const auto& [key, value] : Values()) {
      if (absl::Status s = state->InsertValue(key, value); !s.ok()) return s;
    }
    return SaveCheckpoint(*state, dir, *ctx.pg);
  });
}

// Each rank's loaded values, in the state dict's order, as repr lines (and
// the unexpected keys).
absl::StatusOr<std::vector<std::string>> LoadValues(const std::string& dir, int world, const LoadOptions& options,
                                                    const std::vector<std::string>& value_keys,
                                                    bool tensors_loaded = true) {
  SimulatedCluster cluster(world, testing::Options());
  return cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::string> {
    auto state = testing::MakeState(Layout(world), -1, ctx.pg);
    if (!state.ok()) return state.status();
    for (const std::string& key : value_keys) state->SetValue(key, V::Str("unset"));
    LoadStats stats;
    absl::Status s = LoadCheckpoint(*state, dir, *ctx.pg, options, &stats);
    if (!s.ok()) return s;
    s = tensors_loaded ? testing::CheckState(*state, 1) : absl::OkStatus();
    if (!s.ok()) return s;
    std::string out;
    for (const auto& [key, value] : state->values()) absl::StrAppend(&out, key, "=", value.Repr(), "\n");
    for (const std::string& key : stats.unexpected_keys) absl::StrAppend(&out, "unexpected ", key, "\n");
    return out;
  });
}

std::vector<std::string> AllKeys() {
  std::vector<std::string> keys;
  for (const auto& [key, value] : Values()) keys.push_back(key);
  return keys;
}

std::string IndexText(const std::string& dir) { return testing::FileContents(JoinPath(dir, kIndexFileName)); }

void WriteIndexText(const std::string& dir, const std::string& text) {
  std::ofstream(JoinPath(dir, kIndexFileName), std::ios::binary | std::ios::trunc) << text;
}

// Replaces `from` by `to` in the index and reseals it: the edit, not the
// checksum, is what a load then meets.
void EditIndex(const std::string& dir, const std::string& from, const std::string& to) {
  const std::string text = UnsealIndex(IndexText(dir));
  ASSERT_THAT(text, HasSubstr(from));
  WriteIndexText(dir, SealIndex(absl::StrReplaceAll(text, {{from, to}})));
}

class ValuesAtWorldSizes : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(ValuesAtWorldSizes, EveryRankLoadsEveryValue) {
  const auto [save_world, load_world] = GetParam();
  const std::string dir = testing::FreshDir(absl::StrCat("values_", save_world, "_", load_world));
  ASSERT_TRUE(SaveWithValues(dir, save_world).ok());
  // The load's state dict lists the values in another order: each is found by key.
  std::vector<std::string> keys = AllKeys();
  std::reverse(keys.begin(), keys.end());
  auto loaded = LoadValues(dir, load_world, {}, keys);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::string want;
  for (const std::string& key : keys) {
    for (const auto& [k, value] : Values()) {
      if (k == key) absl::StrAppend(&want, key, "=", value.Repr(), "\n");
    }
  }
  for (const std::string& rank : *loaded) EXPECT_EQ(rank, want);
}

INSTANTIATE_TEST_SUITE_P(SaveLoad, ValuesAtWorldSizes,
                         ::testing::Values(std::make_pair(1, 1), std::make_pair(2, 3), std::make_pair(3, 2),
                                           std::make_pair(6, 4)));

TEST(CheckpointValuesTest, IndexHoldsThemInSaveOrderAsPythonReprs) {
  const std::string dir = testing::FreshDir("values_index");
  ASSERT_TRUE(SaveWithValues(dir, 2).ok());
  const std::string text = IndexText(dir);
  EXPECT_THAT(text, HasSubstr("\n \"values\": [\n  {\"key\": \"step\", \"value\": \"1234\"},\n"));
  EXPECT_THAT(text, HasSubstr("{\"key\": \"dataloader.dp_rank_0\", \"value\": \"b'\\\\x80\\\\x04\\\\x95\\\\x00\\\\x00K\\\\x07.'\"}"));
  EXPECT_THAT(text, HasSubstr("'name': 'cosine-\xce\xb1'"));
  auto index = ParseIndex(text, "index");
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->values.size(), Values().size());
  for (size_t i = 0; i < Values().size(); ++i) {
    EXPECT_EQ(index->values[i].key, Values()[i].first);
    EXPECT_EQ(index->values[i].value, Values()[i].second) << index->values[i].key;
  }
  EXPECT_EQ(index->FindValue("step")->value.integer(), 1234);
  EXPECT_EQ(index->Find("step"), nullptr);
}

TEST(CheckpointValuesTest, AStateDictWithoutValuesWritesTheIndexAsBefore) {
  const std::string dir = testing::FreshDir("values_none");
  SimulatedCluster cluster(2, testing::Options());
  ASSERT_TRUE(cluster.Run([&](RankContext& ctx) -> absl::Status {
                       auto state = testing::MakeState(Layout(2), 1, ctx.pg);
                       if (!state.ok()) return state.status();
                       return SaveCheckpoint(*state, dir, *ctx.pg);
                     }).ok());
  EXPECT_THAT(IndexText(dir), ::testing::Not(HasSubstr("values")));
  auto loaded = LoadValues(dir, 2, {}, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)[0], "");
}

TEST(CheckpointValuesTest, SelectionRenameAndStrictnessApplyToValues) {
  const std::string dir = testing::FreshDir("values_select");
  ASSERT_TRUE(SaveWithValues(dir, 2).ok());
  // Strict: a value of the checkpoint the state dict lacks is unexpected.
  auto strict = LoadValues(dir, 2, {}, {"step"});
  EXPECT_THAT(std::string(strict.status().message()), HasSubstr("unexpected keys (selected in the checkpoint, not in "
                                                                "the state dict): 'dataloader.dp_rank_0', 'loss'"));
  LoadOptions lenient;
  lenient.strict = false;
  auto some = LoadValues(dir, 2, lenient, {"step", "absent"});
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_THAT((*some)[1], ::testing::StartsWith("step=1234\nabsent='unset'\nunexpected dataloader.dp_rank_0\n"));
  LoadOptions renamed;
  renamed.strict = false;
  renamed.rename = {{"step", "trainer.step"}};
  renamed.key_prefixes = {"w", "b", "st"};
  auto moved = LoadValues(dir, 2, renamed, {"trainer.step"});
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ((*moved)[0], "trainer.step=1234\n");
  LoadOptions only;
  only.strict = false;
  only.keys = {"loss"};  // a filter that selects only a value is not "nothing"
  auto loss = LoadValues(dir, 2, only, {"loss"}, /*tensors_loaded=*/false);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ((*loss)[0], "loss=nan\n");
}

TEST(CheckpointValuesTest, ATensorWhereAValueIsSavedIsAClearError) {
  const std::string dir = testing::FreshDir("values_kinds");
  ASSERT_TRUE(SaveWithValues(dir, 1).ok());
  SimulatedCluster cluster(2, testing::Options());
  auto results = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::string> {
    auto state = testing::MakeState(Layout(2), -1, ctx.pg);
    if (!state.ok()) return state.status();
    for (const std::string& key : AllKeys()) state->SetValue(key, V::None());
    state->Set("step", at::zeros({1}));
    const std::string first(LoadCheckpoint(*state, dir, *ctx.pg).message());
    state->SetValue("step", V::None());
    state->SetValue("w", V::None());
    return absl::StrCat(first, "|", LoadCheckpoint(*state, dir, *ctx.pg).message());
  });
  ASSERT_TRUE(results.ok()) << results.status();
  for (const std::string& rank : *results) {
    EXPECT_THAT(rank, HasSubstr("key 'step': the checkpoint holds a value (int), the state dict to fill a tensor"));
    EXPECT_THAT(rank, HasSubstr("key 'w': the checkpoint holds a tensor, the state dict to fill a value"));
  }
}

TEST(CheckpointValuesTest, RanksWithDifferentValuesCommitNothing) {
  const std::string dir = testing::FreshDir("values_disagree");
  SimulatedCluster cluster(3, testing::Options());
  const absl::Status s = cluster.Run([&](RankContext& ctx) -> absl::Status {
    auto state = testing::MakeState(Layout(3), 1, ctx.pg);
    if (!state.ok()) return state.status();
    state->SetValue("step", V::Int(ctx.rank == 2 ? 8 : 7));
    return SaveCheckpoint(*state, dir, *ctx.pg);
  });
  EXPECT_THAT(std::string(s.message()), HasSubstr("its values"));
  EXPECT_FALSE(HasCommittedCheckpoint(dir));
}

TEST(CheckpointValuesTest, ValuesThatCannotBeSavedFailTheSaveByKey) {
  struct Case {
    std::string key;
    V value;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"bad.str", V::Str("\xff"), "key 'bad.str': the value cannot be checkpointed: a str that is not valid UTF-8"},
      {"bad.key", V::Dict({V::List({}), V::None()}), "a dict key is a list (keys must be hashable)"},
      {"big", V::Bytes(std::string(kMaxValuesBytes / 4 + 1, '\0')), "more than a checkpoint holds (1048576)"},
      {"a/b", V::None(), "'a/b'"},
  };
  for (const Case& c : cases) {
    const std::string dir = testing::FreshDir("values_bad_save");
    SimulatedCluster cluster(2, testing::Options());
    const absl::Status s = cluster.Run([&](RankContext& ctx) -> absl::Status {
      StateDict state;
      state.SetValue(c.key, c.value);
      return SaveCheckpoint(state, dir, *ctx.pg);
    });
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.error)) << c.key;
    EXPECT_FALSE(HasCommittedCheckpoint(dir)) << c.key;
  }
}

// A flipped character in a value is the index checksum's to find; an index
// edited and resealed with a value this format never writes is refused by
// key. Nothing is written into the state dict either way.
TEST(CheckpointValuesTest, DamagedOrHostileValuesAreRefused) {
  struct Case {
    std::string from, to;
    bool reseal;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"\"1234\"", "\"1235\"", false, "checksum mismatch"},
      {"\"1234\"", "\"__import__('os')\"", true, "key 'step': value not a plain value at byte 0"},
      {"\"1234\"", "\"[[[[\"", true, "key 'step': value not a plain value at byte 4: the text ends"},
      {"{\"key\": \"step\", ", "{\"key\": \"w\", ", true, "key 'w': is both a tensor and a value"},
      {"{\"key\": \"nothing\", ", "{\"key\": \"step\", ", true, "key 'step': value listed twice"},
      {"{\"key\": \"step\", \"value\": \"1234\"}", "7", true, "values[0] is not an object"},
      {"{\"key\": \"step\", \"value\": \"1234\"}", "{\"key\": \"step\"}", true, "values[0] value is missing"},
      {"\"values\": [", "\"values\": {\"a\": 1}, \"x\": [", true, "values is not an array"},
  };
  for (const Case& c : cases) {
    const std::string dir = testing::FreshDir("values_hostile");
    ASSERT_TRUE(SaveWithValues(dir, 1).ok());
    if (c.reseal) {
      EditIndex(dir, c.from, c.to);
    } else {
      std::string text = IndexText(dir);
      text.replace(text.find(c.from), c.from.size(), c.to);
      WriteIndexText(dir, text);
    }
    SimulatedCluster cluster(2, testing::Options());
    auto results = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::string> {
      auto state = testing::MakeState(Layout(2), -1, ctx.pg);
      if (!state.ok()) return state.status();
      state->SetValue("step", V::Str("unset"));
      LoadOptions lenient;
      lenient.strict = false;
      const absl::Status s = LoadCheckpoint(*state, dir, *ctx.pg, lenient);
      if (s.ok()) return absl::InternalError("loaded");
      if (state->FindValue("step")->text() != "unset" || !testing::AllSentinel(*state)) {
        return absl::InternalError("the state dict was written");
      }
      return std::string(s.message());
    });
    ASSERT_TRUE(results.ok()) << c.to << ": " << results.status();
    for (const std::string& rank : *results) EXPECT_THAT(rank, HasSubstr(c.error)) << c.to;
  }
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint
