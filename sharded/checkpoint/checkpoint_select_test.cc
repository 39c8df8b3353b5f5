// Selective loads: a key filter, key remapping, the strict report of missing
// and unexpected keys, the errors of bad options (the same on every rank,
// nothing written), and a load of one key that never reads another key's
// bytes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/storage/counting_storage.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/storage/posix_file.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::checkpoint {
namespace {

using simulate::RankContext;
using simulate::SimulatedCluster;
using testing::TensorSpec;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Saved at W = 3: a model and its optimizer state, uneven and empty shards.
std::vector<TensorSpec> Saved() {
  return {
      {"model.layer0.w", {7, 4}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(0, 3)},  // 3, 3, 1 rows
      {"model.layer0.b", {4}, c10::ScalarType::Float, std::nullopt},
      {"model.layer1.w", {2, 3}, c10::ScalarType::Double, ChunkShardingSpec::OnRanks(0, 3)},  // 1, 1, 0 rows
      {"optim.layer0.w.exp_avg", {7, 4}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(1, 3)},
  };
}

SaveOptions SmallBlocks() {
  SaveOptions o;
  o.checksum_block_bytes = 256;
  return o;
}

const std::string& SavedDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(testing::FreshDir("select_saved_w3"));
    SimulatedCluster cluster(3, testing::Options());
    absl::Status s = cluster.Run([&](RankContext& ctx) -> absl::Status {
      auto state = testing::MakeState(Saved(), /*salt=*/2, ctx.pg);
      if (!state.ok()) return state.status();
      return SaveCheckpoint(*state, *d, *ctx.pg, SmallBlocks());
    });
    EXPECT_TRUE(s.ok()) << s;
    return d;
  }();
  return *dir;
}

// The saved tensor `saved_key` laid out for a load at `world` under `key`.
TensorSpec Renamed(const std::string& saved_key, const std::string& key, int world) {
  for (TensorSpec t : Saved()) {
    if (t.key != saved_key) continue;
    t.key = key;
    if (t.spec) t.spec = ChunkShardingSpec::OnRanks(0, world);
    return t;
  }
  ADD_FAILURE() << saved_key;
  return {};
}

// Loads into a sentinel dict of `specs` with `options`; per rank: the
// status, whether the dict was left untouched, and the stats.
struct Outcome {
  absl::Status status;
  bool untouched = false;
  LoadStats stats;
  StateDict dict;
};

std::vector<Outcome> Load(int world, const std::vector<TensorSpec>& specs, const LoadOptions& options) {
  SimulatedCluster cluster(world, testing::Options());
  auto out = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<Outcome> {
    auto dict = testing::MakeState(specs, /*salt=*/-1, ctx.pg);
    if (!dict.ok()) return dict.status();
    Outcome o;
    o.status = LoadCheckpoint(*dict, SavedDir(), *ctx.pg, options, &o.stats);
    o.untouched = testing::AllSentinel(*dict);
    o.dict = *std::move(dict);
    return o;
  });
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *std::move(out) : std::vector<Outcome>();
}

// The values `key` of `dict` must hold: those saved under `saved_key`.
absl::Status HoldsSaved(const StateDict& dict, const std::string& key, const std::string& saved_key) {
  StateDict one;
  one.Set(saved_key, *dict.Find(key));
  return testing::CheckState(one, /*salt=*/2);
}

TEST(CheckpointSelectTest, ModelPrefixStrippedIntoAnotherWorldSize) {
  LoadOptions options;
  options.key_prefixes = {"model."};
  options.strip_prefix = "model.";
  for (int world : {1, 2, 4}) {
    SCOPED_TRACE(absl::StrCat("W=", world));
    const std::vector<TensorSpec> specs = {Renamed("model.layer0.w", "layer0.w", world),
                                           Renamed("model.layer0.b", "layer0.b", world),
                                           Renamed("model.layer1.w", "layer1.w", world)};
    for (const Outcome& o : Load(world, specs, options)) {
      ASSERT_TRUE(o.status.ok()) << o.status;
      EXPECT_TRUE(HoldsSaved(o.dict, "layer0.w", "model.layer0.w").ok());
      EXPECT_TRUE(HoldsSaved(o.dict, "layer0.b", "model.layer0.b").ok());
      EXPECT_TRUE(HoldsSaved(o.dict, "layer1.w", "model.layer1.w").ok());
      EXPECT_TRUE(o.stats.missing_keys.empty());
      EXPECT_TRUE(o.stats.unexpected_keys.empty());
    }
  }
}

TEST(CheckpointSelectTest, OneKeyRenamedAndPrefixAdded) {
  LoadOptions options;
  options.keys = {"model.layer1.w", "optim.layer0.w.exp_avg"};
  options.rename = {{"optim.layer0.w.exp_avg", "moment"}};
  options.add_prefix = "net.";
  const std::vector<TensorSpec> specs = {Renamed("model.layer1.w", "net.model.layer1.w", 3),
                                         Renamed("optim.layer0.w.exp_avg", "moment", 3)};
  for (const Outcome& o : Load(3, specs, options)) {
    ASSERT_TRUE(o.status.ok()) << o.status;
    EXPECT_TRUE(HoldsSaved(o.dict, "net.model.layer1.w", "model.layer1.w").ok());
    EXPECT_TRUE(HoldsSaved(o.dict, "moment", "optim.layer0.w.exp_avg").ok());
  }
}

TEST(CheckpointSelectTest, StrictReportsMissingAndUnexpectedOnEveryRankAndWritesNothing) {
  LoadOptions options;
  options.key_prefixes = {"model."};
  const std::vector<TensorSpec> specs = {Renamed("model.layer0.w", "model.layer0.w", 2),
                                         Renamed("model.layer0.b", "absent", 2)};
  const std::vector<Outcome> strict = Load(2, specs, options);
  ASSERT_EQ(strict.size(), 2u);
  for (const Outcome& o : strict) {
    EXPECT_EQ(o.status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(o.status.message()),
                HasSubstr("missing keys (in the state dict to fill, not loaded): 'absent'; unexpected keys (selected "
                          "in the checkpoint, not in the state dict): 'model.layer0.b', 'model.layer1.w'"));
    EXPECT_EQ(o.status.message(), strict[0].status.message());
    EXPECT_TRUE(o.untouched);
  }
  options.strict = false;
  for (const Outcome& o : Load(2, specs, options)) {
    ASSERT_TRUE(o.status.ok()) << o.status;
    EXPECT_THAT(o.stats.missing_keys, ElementsAre("absent"));
    EXPECT_THAT(o.stats.unexpected_keys, ElementsAre("model.layer0.b", "model.layer1.w"));
    EXPECT_TRUE(HoldsSaved(o.dict, "model.layer0.w", "model.layer0.w").ok());
    StateDict absent;
    absent.Set("absent", *o.dict.Find("absent"));
    EXPECT_TRUE(testing::AllSentinel(absent));  // a missing key keeps its values
  }
}

// Bad options: the same clear error on every rank, and nothing written.
void ExpectRefused(const LoadOptions& options, absl::StatusCode code, const std::string& words) {
  const std::vector<TensorSpec> specs = {Renamed("model.layer0.w", "model.layer0.w", 3)};
  const std::vector<Outcome> out = Load(3, specs, options);
  ASSERT_EQ(out.size(), 3u);
  for (const Outcome& o : out) {
    EXPECT_EQ(o.status.code(), code) << o.status;
    EXPECT_THAT(std::string(o.status.message()), HasSubstr(words));
    EXPECT_EQ(o.status.message(), out[0].status.message());
    EXPECT_TRUE(o.untouched);
  }
}

TEST(CheckpointSelectTest, RenameOfTwoKeysToOneIsRefused) {
  LoadOptions options;
  options.rename = {{"model.layer0.b", "model.layer0.w"}};
  ExpectRefused(options, absl::StatusCode::kInvalidArgument,
                "maps checkpoint keys 'model.layer0.w' and 'model.layer0.b' both to 'model.layer0.w'");
}

TEST(CheckpointSelectTest, StripPrefixAndRenameOntoOneKeyAreRefused) {
  LoadOptions options;
  options.strip_prefix = "model.layer0.";  // model.layer0.w -> w
  options.rename = {{"model.layer1.w", "w"}};
  ExpectRefused(options, absl::StatusCode::kInvalidArgument,
                "maps checkpoint keys 'model.layer0.w' and 'model.layer1.w' both to 'w'");
}

TEST(CheckpointSelectTest, FilterThatSelectsNothingIsRefused) {
  LoadOptions options;
  options.key_prefixes = {"encoder."};
  ExpectRefused(options, absl::StatusCode::kNotFound, "key_prefixes 'encoder.') selects no key of the checkpoint");
}

TEST(CheckpointSelectTest, FilterOrRenameOfAnAbsentKeyIsRefused) {
  LoadOptions options;
  options.keys = {"model.layer0.w", "model.layer9.w"};
  ExpectRefused(options, absl::StatusCode::kNotFound, "LoadOptions::keys names 'model.layer9.w', which is not in");
  options = {};
  options.rename = {{"model.nope", "x"}};
  ExpectRefused(options, absl::StatusCode::kInvalidArgument, "has no key 'model.nope'");
}

TEST(CheckpointSelectTest, MappedNameMustBeAValidKey) {
  LoadOptions options;
  options.rename = {{"model.layer0.b", "bad/key"}};
  ExpectRefused(options, absl::StatusCode::kInvalidArgument, "maps checkpoint key 'model.layer0.b' to an invalid key");
}

// A load of one key reads none of the other keys' bytes, and about its own.
TEST(CheckpointSelectTest, OneKeyReadsOnlyItsOwnBytes) {
  const std::string dir = testing::FreshDir("select_bytes");
  const std::vector<TensorSpec> saved = {
      {"a", {64, 40}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(0, 3)},
      {"b", {50, 40}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(1, 3)},
      {"c", {30, 40}, c10::ScalarType::Float, std::nullopt},
  };
  SimulatedCluster save_cluster(3, testing::Options());
  ASSERT_TRUE(save_cluster
                  .Run([&](RankContext& ctx) -> absl::Status {
                    auto state = testing::MakeState(saved, /*salt=*/4, ctx.pg);
                    if (!state.ok()) return state.status();
                    return SaveCheckpoint(*state, dir, *ctx.pg, SmallBlocks());
                  })
                  .ok());
  auto text = ReadWholeFile(PosixStorage(), JoinPath(dir, kIndexFileName), kMaxIndexBytes);
  ASSERT_TRUE(text.ok());
  auto index = ParseIndex(*text, "index");
  ASSERT_TRUE(index.ok()) << index.status();

  auto counting = std::make_shared<CountingStorage>(PosixStorage(), /*keep_ranges=*/true);
  LoadOptions options;
  options.keys = {"b"};
  options.storage = counting;
  SimulatedCluster load_cluster(2, testing::Options());
  const std::vector<TensorSpec> target = {{"b", {50, 40}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(0, 2)}};
  ASSERT_TRUE(load_cluster
                  .Run([&](RankContext& ctx) -> absl::Status {
                    auto dict = testing::MakeState(target, /*salt=*/-1, ctx.pg);
                    if (!dict.ok()) return dict.status();
                    absl::Status s = LoadCheckpoint(*dict, dir, *ctx.pg, options);
                    if (!s.ok()) return s;
                    StateDict renamed;
                    renamed.Set("b", *dict->Find("b"));
                    return testing::CheckState(renamed, /*salt=*/4);
                  })
                  .ok());
  const int64_t tensor_bytes = 50 * 40 * 4;
  int64_t data_bytes = 0;
  for (const ReadRange& r : counting->reads()) {
    const std::string name = r.path.substr(r.path.rfind('/') + 1);
    const IndexFile* file = index->FindFile(name);
    if (file == nullptr) continue;  // the index itself
    if (r.offset + r.bytes <= 8 + file->header_bytes) continue;  // the file's header
    data_bytes += r.bytes;
    for (const IndexTensor& t : index->tensors) {
      if (t.key == "b") continue;
      for (const IndexShard& s : t.shards) {
        EXPECT_FALSE(ShardFileName(*index, s) == name && r.offset < s.end && s.begin < r.offset + r.bytes)
            << "read [" << r.offset << ", " << r.offset + r.bytes << ") of " << name << " overlaps key " << t.key;
      }
    }
  }
  EXPECT_GE(data_bytes, tensor_bytes);
  EXPECT_LE(data_bytes, tensor_bytes * 11 / 10);
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint
