// `ckpt export --format=dcp` (ExportDcp over dcp::OfflineDcpWriter) of a
// checkpoint 3 thread-ranks saved with uneven and empty shards, for 1, 2, 4
// and 5 ranks; each DCP directory loaded back by LoadCheckpoint (our DCP
// reader) on yet another number of ranks: every tensor bit-equal, every
// value equal.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/plain_value.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"
#include "tools/ckpt/dcp_export_command.h"

namespace shardlight::tools::ckpt {
namespace {

namespace cp = sharded::checkpoint;
using sharded::PlainValue;
using simulate::RankContext;
using simulate::SimulatedCluster;

std::vector<std::pair<std::string, PlainValue>> Values() {
  return {{"trainer.step", PlainValue::Int(12)},
          {"optimizer.hyper_parameters", *sharded::ParsePlainValue("{'lr': 0.001, 'betas': (0.9, 0.95), 'eps': 1e-08}")},
          {"run", PlainValue::Str("run-\xce\xb1")},
          {"loader", PlainValue::Bytes(std::string("\x00\xff\x80", 3))}};
}

TEST(DcpExport, EveryWorldSizeReadsBackBitEqualOnAnother) {
  const std::string saved = cp::testing::FreshDir("dcp_export_w3");
  ASSERT_TRUE(SimulatedCluster(3, cp::testing::Options()).Run([&](RankContext& ctx) -> absl::Status {
    SL_ASSIGN_OR_RETURN(sharded::StateDict state, cp::testing::MakeState(cp::testing::UnevenModel(3), 1, ctx.pg));
    for (const auto& [key, value] : Values()) SL_RETURN_IF_ERROR(state.InsertValue(key, value));
    return cp::SaveCheckpoint(state, saved, *ctx.pg);
  }).ok());
  for (const auto& [write, read] : std::vector<std::pair<int, int>>{{1, 3}, {2, 5}, {4, 2}, {5, 4}}) {
    const std::string dir = cp::testing::FreshDir(absl::StrCat("dcp_export_to_", write));
    DcpExportOptions options;
    options.world_size = write;
    std::ostringstream out, err;
    ASSERT_EQ(ExportDcp(saved, dir, options, out, err), 0) << err.str();
    EXPECT_NE(out.str().find(absl::StrCat("for ", write, " rank")), std::string::npos) << out.str();
    const absl::Status loaded = SimulatedCluster(read, cp::testing::Options()).Run([&](RankContext& ctx) -> absl::Status {
      SL_ASSIGN_OR_RETURN(sharded::StateDict state, cp::testing::MakeState(cp::testing::UnevenModel(read), -1, ctx.pg));
      for (const auto& [key, value] : Values()) SL_RETURN_IF_ERROR(state.InsertValue(key, PlainValue()));
      SL_RETURN_IF_ERROR(cp::LoadCheckpoint(state, dir, *ctx.pg));
      SL_RETURN_IF_ERROR(cp::testing::CheckState(state, 1));
      for (const auto& [key, value] : Values()) {
        if (*state.FindValue(key) != value) {
          return absl::InternalError(absl::StrCat(key, ": ", state.FindValue(key)->Repr(), ", want ", value.Repr()));
        }
      }
      return absl::OkStatus();
    });
    EXPECT_TRUE(loaded.ok()) << "saved at W=3, exported for W'=" << write << ", loaded at W''=" << read << ": "
                             << loaded;
  }
}

}  // namespace
}  // namespace shardlight::tools::ckpt
