// Saves a deterministic state dict from W simulated ranks as a PyTorch
// distributed checkpoint (SaveDcpCheckpoint), and the same dict in
// shardlight's own format (the reference the test exports for Python), with
// non-tensor values (a step, param_groups, bytes, text): row-
// and column-sharded tensors of several dtypes (uneven, and with empty
// shards), dense tensors, a 0-d tensor. Saved twice into the DCP directory:
// the second save replaces the first atomically and removes its files.
//   dcp_save_check W DCP_DIR REFERENCE_DIR
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/interop/dcp/dcp_writer.h"
#include "sharded/checkpoint/interop/pytorch/torch_file.h"
#include "sharded/factories.h"
#include "sharded/state_dict.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace {

namespace cp = shardlight::sharded::checkpoint;
namespace sh = shardlight::sharded;

absl::StatusOr<sh::StateDict> MakeDict(int world, const sh::ProcessGroupPtr& pg, uint64_t seed) {
  sh::StateDict d;
  auto rows = [&](int64_t dim) { return sh::ChunkShardingSpec::OnRanks(dim, world); };
  SL_ASSIGN_OR_RETURN(auto emb, sh::Randn(rows(0), {37, 8}, seed, {c10::kFloat, false}, pg));
  SL_ASSIGN_OR_RETURN(auto proj, sh::Randn(rows(1), {6, 10}, seed + 1, {c10::kDouble, false}, pg));
  SL_ASSIGN_OR_RETURN(auto bias, sh::Randn(rows(0), {10}, seed + 2, {c10::kBFloat16, false}, pg));
  SL_ASSIGN_OR_RETURN(auto few, sh::Full(rows(0), {2, 3}, static_cast<int64_t>(seed), {c10::kLong, false}, pg));
  SL_ASSIGN_OR_RETURN(auto none, sh::Zeros(rows(0), {0, 4}, {c10::kFloat, false}, pg));
  SL_RETURN_IF_ERROR(d.Insert("emb.weight", std::move(emb)));
  SL_RETURN_IF_ERROR(d.Insert("proj.weight", std::move(proj)));
  SL_RETURN_IF_ERROR(d.Insert("proj.bias", std::move(bias)));
  SL_RETURN_IF_ERROR(d.Insert("few", std::move(few)));
  SL_RETURN_IF_ERROR(d.Insert("none", std::move(none)));
  at::manual_seed(seed);
  SL_RETURN_IF_ERROR(d.Insert("half", at::randn({3, 5}).to(at::kHalf)));
  SL_RETURN_IF_ERROR(d.Insert("u8", at::arange(9, at::kByte)));
  SL_RETURN_IF_ERROR(d.Insert("flags", at::arange(5, at::kLong).remainder(2).to(at::kBool)));
  SL_RETURN_IF_ERROR(d.Insert("scalar", at::full({}, 3.25)));
  SL_RETURN_IF_ERROR(d.Insert("i32", at::arange(-3, 4, at::kInt)));
  // Non-tensor values, as a resume holds them (dcp.load rebuilds each).
  using V = sh::PlainValue;
  SL_RETURN_IF_ERROR(d.InsertValue("step", V::Int(static_cast<int64_t>(seed) * 1000 + (int64_t{1} << 40))));
  SL_RETURN_IF_ERROR(d.InsertValue("optim.param_groups.0.lr", V::Float(2.5e-4 * static_cast<double>(seed))));
  SL_RETURN_IF_ERROR(d.InsertValue("optim.param_groups.0.betas", V::Tuple({V::Float(0.9), V::Float(0.95)})));
  SL_RETURN_IF_ERROR(d.InsertValue("optim.param_groups.0.params", V::List({V::Int(0), V::Int(-1)})));
  SL_RETURN_IF_ERROR(d.InsertValue("optim.param_groups.0.foreach", V::None()));
  SL_RETURN_IF_ERROR(d.InsertValue("run", V::Str("run-\xce\xb1 'q'")));
  SL_RETURN_IF_ERROR(d.InsertValue("loader", V::Bytes(std::string("\x00\xff\x80\n", 4))));
  SL_RETURN_IF_ERROR(d.InsertValue("sched", V::Dict({V::Str("last_epoch"), V::Int(5), V::Str("verbose"), V::Bool(false),
                                                     V::Int(3), V::List({})})));
  return d;
}

// The tensors of `path` (a torch.save file), in its order.
absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> ReadTorchFile(const std::string& path) {
  SL_ASSIGN_OR_RETURN(auto file, cp::pytorch::TorchFile::Open(path));
  SL_ASSIGN_OR_RETURN(const cp::pytorch::Selection sel, cp::pytorch::SelectEntries(file->graph(), {}));
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& t : sel.tensors) {
    SL_ASSIGN_OR_RETURN(at::Tensor v, file->Tensor(t.node, t.key));
    out.emplace_back(t.key, v.contiguous());
  }
  return out;
}

int SaveFrom(const std::string& reference, int world, const std::string& dir) {
  auto tensors = ReadTorchFile(reference);
  if (!tensors.ok()) {
    std::cerr << "dcp_save_check: " << reference << ": " << tensors.status() << "\n";
    return 1;
  }
  shardlight::simulate::SimulatedCluster cluster(world);
  absl::Status s = cluster.Run([&](shardlight::simulate::RankContext& ctx) -> absl::Status {
    sh::StateDict d;
    for (const auto& [key, full] : *tensors) {
      if (full.dim() == 0) {
        SL_RETURN_IF_ERROR(d.Insert(key, full));
        continue;
      }
      SL_ASSIGN_OR_RETURN(sh::ShardedTensor st, sh::Zeros(sh::ChunkShardingSpec::OnRanks(0, world), full.sizes().vec(),
                                                          {full.scalar_type(), false}, ctx.pg));
      for (const sh::Shard& shard : st.local_shards()) {
        shard.tensor.copy_(full.narrow(0, shard.metadata.offsets[0], shard.metadata.sizes[0]));
      }
      SL_RETURN_IF_ERROR(d.Insert(key, std::move(st)));
    }
    return cp::dcp::SaveDcpCheckpoint(d, dir, *ctx.pg);
  });
  if (!s.ok()) {
    std::cerr << "dcp_save_check: " << s << "\n";
    return 1;
  }
  std::cout << "dcp_save_check: saved " << tensors->size() << " tensors of " << reference << " at W=" << world << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int world = 0;
  if (argc == 5 && std::string(argv[1]) == "--from") {
    if (!absl::SimpleAtoi(argv[3], &world) || world < 1) {
      std::cerr << "usage: dcp_save_check --from REFERENCE.pt W DCP_DIR\n";
      return 2;
    }
    return SaveFrom(argv[2], world, argv[4]);
  }
  if (argc != 4 || !absl::SimpleAtoi(argv[1], &world) || world < 1) {
    std::cerr << "usage: dcp_save_check W DCP_DIR REFERENCE_DIR\n";
    return 2;
  }
  const std::string dir = argv[2], ref = argv[3];
  shardlight::simulate::SimulatedCluster cluster(world);
  absl::Status s = cluster.Run([&](shardlight::simulate::RankContext& ctx) -> absl::Status {
    // A first save with other values, replaced by the second.
    SL_ASSIGN_OR_RETURN(sh::StateDict first, MakeDict(world, ctx.pg, 1));
    SL_RETURN_IF_ERROR(cp::dcp::SaveDcpCheckpoint(first, dir, *ctx.pg));
    SL_ASSIGN_OR_RETURN(sh::StateDict d, MakeDict(world, ctx.pg, 7));
    cp::SaveOptions options;
    options.on_removed = [&](const std::string& line) { std::cout << "dcp_save_check: " << line << "\n"; };
    SL_RETURN_IF_ERROR(cp::dcp::SaveDcpCheckpoint(d, dir, *ctx.pg, options));
    return cp::SaveCheckpoint(d, ref, *ctx.pg);
  });
  if (!s.ok()) {
    std::cerr << "dcp_save_check: " << s << "\n";
    return 1;
  }
  std::cout << "dcp_save_check: saved at W=" << world << "\n";
  return 0;
}
