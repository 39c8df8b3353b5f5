#include "simulate/reshard_scenario.h"

#include <iomanip>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lightning/state_dict_hooks.h"
#include "sharded/box.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/factories.h"
#include "simulate/embedding_mlp.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/training_run.h"

namespace shardlight::simulate {
namespace {

using sharded::ChunkShardingSpec;
using sharded::ShardingSpec;

// Elements this rank owned before and does not own after.
int64_t LeavingElements(const sharded::ShardedTensorMetadata& from, const sharded::ShardedTensorMetadata& to,
                        int rank) {
  int64_t kept = 0, owned = 0;
  for (const auto& a : from.shards) {
    if (a.placement.rank != rank) continue;
    owned += a.NumElements();
    for (const auto& b : to.shards) {
      if (b.placement.rank != rank) continue;
      if (std::optional<sharded::Box> both = sharded::Intersect(a, b)) kept += both->NumElements();
    }
  }
  return owned - kept;
}

struct Hop {
  std::string name;
  std::vector<int64_t> sent, minimum;
};

}  // namespace

absl::Status RunReshardScenario(const ScenarioOptions& options, std::ostream& out) {
  const int w = options.world_size;
  const std::vector<int64_t> sizes = {1000, 96};  // 1000 rows: uneven over most world sizes
  sharded::EnumerableShardingSpec grid;  // uneven blocks, several per rank
  const int64_t rows[] = {0, 130, 410, 700, 1000};
  const int64_t cols[] = {0, 40, 96};
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 2; ++j) {
      grid.shards.push_back({{rows[i], cols[j]}, {rows[i + 1] - rows[i], cols[j + 1] - cols[j]},
                             sharded::Placement::Cpu((i * 2 + j * 3) % w)});
    }
  }
  const std::vector<std::pair<std::string, ShardingSpec>> path = {
      {"chunk dim 1", ChunkShardingSpec::OnRanks(1, w)},
      {"uneven grid (8 blocks)", grid},
      {"chunk dim 0", ChunkShardingSpec::OnRanks(0, w)},
  };
  ClusterOptions cluster_options;
  cluster_options.collective_timeout = options.collective_timeout;
  SimulatedCluster cluster(w, cluster_options);
  auto hops = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::vector<Hop>> {
    auto st = sharded::Rand(ChunkShardingSpec::OnRanks(0, w), sizes, options.seed, {}, ctx.pg);
    if (!st.ok()) return st.status();
    auto reference = st->FullTensor();
    if (!reference.ok()) return reference.status();
    std::vector<Hop> out;
    sharded::ShardedTensor current = *st;
    for (const auto& [name, spec] : path) {
      sharded::ExchangeStats stats;
      auto next = current.Reshard(spec, &stats);
      if (!next.ok()) return next.status();
      auto full = next->FullTensor();
      if (!full.ok()) return full.status();
      if (!at::equal(*full, *reference)) return absl::DataLossError(absl::StrCat("values differ after ", name));
      Hop hop{name, {stats.bytes_sent}, {LeavingElements(current.metadata(), next->metadata(), ctx.rank) * 4}};
      out.push_back(hop);
      current = *std::move(next);
    }
    return out;
  });
  if (!hops.ok()) return hops.status();
  out << "reshard: " << sizes[0] << "x" << sizes[1] << " float32 on " << w
      << " ranks, from chunk dim 0; every layout's global tensor checked\n\n"
      << std::left << std::setw(26) << "to" << "per rank: KiB sent / minimum KiB (ratio)\n";
  bool all_minimal = true;
  for (size_t h = 0; h < path.size(); ++h) {
    out << std::left << std::setw(26) << path[h].first;
    for (int r = 0; r < w; ++r) {
      const Hop& hop = (*hops)[r][h];
      const double ratio = hop.minimum[0] == 0 ? (hop.sent[0] == 0 ? 1.0 : 0.0)
                                               : static_cast<double>(hop.sent[0]) / hop.minimum[0];
      all_minimal = all_minimal && hop.sent[0] == hop.minimum[0];
      out << "  r" << r << " " << std::fixed << std::setprecision(1) << hop.sent[0] / 1024.0 << "/"
          << hop.minimum[0] / 1024.0 << " (" << std::setprecision(2) << ratio << ")";
    }
    out << "\n";
  }
  out << "\nevery element moved at most once, and only when its owner changed: " << (all_minimal ? "yes" : "NO")
      << "\n";
  return all_minimal ? absl::OkStatus() : absl::InternalError("a reshard sent more than the minimum");
}

absl::Status RunRoundtripScenario(const ScenarioOptions& options, std::ostream& out) {
  TempDir temp;
  const std::string dir = options.checkpoint_dir.empty() ? temp.path() : options.checkpoint_dir;
  if (dir.empty()) return absl::InternalError("could not create a temporary checkpoint directory");
  ClusterOptions cluster_options;
  cluster_options.collective_timeout = options.collective_timeout;
  SimulatedCluster cluster(options.world_size, cluster_options);
  struct Row {
    size_t keys = 0;
    int64_t local_table_rows = 0;
    int64_t bytes_written = 0, bytes_read = 0;
    bool equal = false;
  };
  auto rows = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<Row> {
    Row row;
    auto build = [&](uint64_t seed) -> absl::StatusOr<std::unique_ptr<EmbeddingMlp>> {
      auto m = std::make_unique<EmbeddingMlp>();
      absl::Status s = m->ConfigureShardedModel({ctx.pg, ctx.rank, ctx.world_size, seed});
      if (!s.ok()) return s;
      return m;
    };
    auto saved = build(options.seed);
    auto fresh = build(options.seed + 1);
    if (!saved.ok()) return saved.status();
    if (!fresh.ok()) return fresh.status();
    auto dict = lightning::StateDictOf(**saved);
    if (!dict.ok()) return dict.status();
    row.keys = dict->size();
    sharded::checkpoint::SaveStats save_stats;
    absl::Status s = sharded::checkpoint::SaveCheckpoint(*dict, dir, *ctx.pg, {}, &save_stats);
    if (!s.ok()) return s;
    // Loading into the fresh module's own state dict fills it in place.
    auto target = lightning::StateDictOf(**fresh);
    if (!target.ok()) return target.status();
    sharded::checkpoint::LoadStats load_stats;
    s = sharded::checkpoint::LoadCheckpoint(*target, dir, *ctx.pg, {}, &load_stats);
    if (!s.ok()) return s;
    for (const auto& shard : (*fresh)->table()->local_shards()) row.local_table_rows += shard.metadata.sizes[0];
    row.bytes_written = save_stats.bytes_written;
    row.bytes_read = load_stats.total_bytes_read();
    bool equal = true;
    auto a = (*saved)->parameters(), b = (*fresh)->parameters();
    for (size_t i = 0; i < a.size(); ++i) equal = equal && at::equal(a[i], b[i]);
    auto ta = (*saved)->table()->FullTensor(), tb = (*fresh)->table()->FullTensor();
    if (!ta.ok()) return ta.status();
    if (!tb.ok()) return tb.status();
    row.equal = equal && at::equal(*ta, *tb);
    return row;
  });
  if (!rows.ok()) return rows.status();
  out << "roundtrip: EmbeddingMlp state dict -> checkpoint in " << dir << " -> a fresh module (other seed)\n\n"
      << "rank  keys  table_rows  bytes_written  bytes_read  equal\n";
  bool all_equal = true;
  for (int r = 0; r < options.world_size; ++r) {
    const Row& row = (*rows)[r];
    all_equal = all_equal && row.equal;
    out << std::right << std::setw(4) << r << std::setw(6) << row.keys << std::setw(12) << row.local_table_rows
        << std::setw(15) << row.bytes_written << std::setw(12) << row.bytes_read << "  "
        << (row.equal ? "yes" : "NO") << "\n";
  }
  out << "\nloaded model equals saved: " << (all_equal ? "yes" : "NO") << "\n";
  return all_equal ? absl::OkStatus() : absl::DataLossError("the loaded model differs from the saved one");
}

}  // namespace shardlight::simulate
