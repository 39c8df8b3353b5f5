// Test helper for ckpt_cli_test.sh: `make DIR` saves a small checkpoint at
// W = 3 on the simulated cluster (uneven, empty and several-per-rank shards,
// every dtype, dense tensors); `check FILE` confirms a consolidated
// safetensors file holds exactly those tensors; `load DIR W...` loads DIR on
// W thread-ranks for each W given (every sharded tensor chunked by rows) and
// checks the values.
// `make DIR SALT` saves other values (for diff); `big DIR MIB` writes a
// checkpoint of about MIB MiB for 3 ranks (32 MiB F32 tensors, chunked by
// rows) from one process. Exit 0 on success.
#include <algorithm>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/format/dtype_names.h"
#include "sharded/checkpoint/offline/offline_writer.h"
#include "sharded/checkpoint/storage/posix_file.h"
#include "sharded/checkpoint/format/safetensors.h"
#include "simulate/core/simulated_cluster.h"

namespace {

using shardlight::sharded::ChunkShardingSpec;
using shardlight::sharded::EnumerableShardingSpec;
using shardlight::sharded::Placement;
using shardlight::sharded::checkpoint::testing::TensorSpec;
namespace ckpt = shardlight::sharded::checkpoint;

constexpr int kSalt = 9;

std::vector<TensorSpec> Layout() {
  EnumerableShardingSpec grid;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 2; ++j) grid.shards.push_back({{i * 2, j * 5}, {2, 5}, Placement::Cpu((i + j) % 3)});
  }
  ChunkShardingSpec cols;
  cols.dim = 1;
  for (int r : {2, 1, 0, 2}) cols.placements.push_back(Placement::Cpu(r));
  return {{"embed.weight", {40, 8}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(0, 3)},
          {"proj.weight", {6, 10}, c10::ScalarType::BFloat16, cols},
          {"mask", {2}, c10::ScalarType::Bool, ChunkShardingSpec::OnRanks(0, 3)},  // one empty shard
          {"table", {6, 10}, c10::ScalarType::Long, grid},
          {"head.bias", {5}, c10::ScalarType::Double, std::nullopt},
          {"step", {}, c10::ScalarType::Long, std::nullopt}};
}

int Make(const std::string& dir, int salt) {
  shardlight::simulate::SimulatedCluster cluster(3, ckpt::testing::Options());
  absl::Status s = cluster.Run([&](shardlight::simulate::RankContext& ctx) -> absl::Status {
    auto state = ckpt::testing::MakeState(Layout(), salt, ctx.pg);
    if (!state.ok()) return state.status();
    ckpt::SaveOptions options;
    options.checksum_block_bytes = 64;
    options.run = {{"maker", "make_test_checkpoint"}, {"salt", std::to_string(salt)}};
    return ckpt::SaveCheckpoint(*state, dir, *ctx.pg, options);
  });
  if (!s.ok()) std::cerr << "make_test_checkpoint: " << s << "\n";
  return s.ok() ? 0 : 1;
}

int Check(const std::string& path) {
  auto file = ckpt::File::OpenForRead(path);
  if (!file.ok()) return std::cerr << file.status() << "\n", 1;
  auto header = ckpt::ReadSafetensorsHeader(*file, *file->Size(), path);
  if (!header.ok()) return std::cerr << header.status() << "\n", 1;
  if (header->entries.size() != Layout().size()) return std::cerr << "wrong number of entries\n", 1;
  for (const TensorSpec& t : Layout()) {
    const ckpt::SafetensorsEntry* e = header->Find(t.key);
    if (e == nullptr || e->dtype != ckpt::DtypeName(t.dtype) || e->shape != t.sizes) {
      return std::cerr << "entry " << t.key << " missing or wrong\n", 1;
    }
    at::Tensor got = at::empty(t.sizes, at::TensorOptions().dtype(t.dtype));
    absl::Status s = file->ReadAt(got.data_ptr(), e->end - e->begin, header->data_start() + e->begin);
    if (!s.ok()) return std::cerr << s << "\n", 1;
    if (!ckpt::testing::BitEqual(got, ckpt::testing::KeyedReference(t.key, t.sizes, t.dtype, kSalt))) {
      return std::cerr << "entry " << t.key << " holds the wrong values\n", 1;
    }
  }
  std::cout << "consolidated file matches\n";
  return 0;
}

int Load(const std::string& dir, int world) {
  std::vector<TensorSpec> layout = Layout();
  for (TensorSpec& t : layout) {
    if (t.spec.has_value()) t.spec = ChunkShardingSpec::OnRanks(0, world);
  }
  shardlight::simulate::SimulatedCluster cluster(world, ckpt::testing::Options());
  absl::Status s = cluster.Run([&](shardlight::simulate::RankContext& ctx) -> absl::Status {
    auto state = ckpt::testing::MakeState(layout, -1, ctx.pg);
    if (!state.ok()) return state.status();
    absl::Status loaded = ckpt::LoadCheckpoint(*state, dir, *ctx.pg);
    if (!loaded.ok()) return loaded;
    return ckpt::testing::CheckState(*state, kSalt);
  });
  if (!s.ok()) return std::cerr << "make_test_checkpoint: " << s << "\n", 1;
  std::cout << "loaded on " << world << " ranks: values match\n";
  return 0;
}

int Big(const std::string& dir, int mib) {
  constexpr int64_t kCols = 1024;
  constexpr int64_t kRows = (int64_t{32} << 20) / (kCols * 4);
  ckpt::OfflineCheckpointWriter writer(dir, 3);
  for (int i = 0; i < std::max(1, mib / 32); ++i) {
    at::Tensor t = at::arange(kRows * kCols, at::kFloat).reshape({kRows, kCols}).add_(i);
    absl::Status s = writer.AddChunked(absl::StrCat("layer", i, ".weight"), t, 0);
    if (!s.ok()) return std::cerr << s << "\n", 1;
  }
  absl::Status s = writer.Commit();
  if (!s.ok()) return std::cerr << s << "\n", 1;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "make") return Make(argv[2], kSalt);
  if (argc == 4 && std::string(argv[1]) == "make") return Make(argv[2], std::stoi(argv[3]));
  if (argc == 4 && std::string(argv[1]) == "big") return Big(argv[2], std::stoi(argv[3]));
  if (argc >= 4 && std::string(argv[1]) == "load") {
    for (int i = 3; i < argc; ++i) {
      if (Load(argv[2], std::stoi(argv[i])) != 0) return 1;
    }
    return 0;
  }
  if (argc == 3 && std::string(argv[1]) == "check") return Check(argv[2]);
  std::cerr << "usage: make_test_checkpoint make DIR [SALT] | check FILE | load DIR WORLD... | big DIR MIB\n";
  return 2;
}
