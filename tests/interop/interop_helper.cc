// The C++ side of python_interop_test.sh, on a simulated cluster of 3 ranks.
//
//   interop_helper check_train CKPT EXPECT_DIR OUT_DIR KEY=DIM,... STEPS LR
//     loads CKPT (imported from Python) with the listed keys sharded, checks
//     every value against Python's raw dumps in EXPECT_DIR (on every rank),
//     runs STEPS of x <- x - LR * x on every floating tensor (the SGD step of
//     0.5 * |x|^2, which Python recomputes on its own), and saves to OUT_DIR.
//   interop_helper resume IMPORTED TRAIN_DIR EXPECT_DIR STEPS
//     an EmbeddingMlp takes its weights and step from IMPORTED (a Lightning
//     import with --prefix=model. --global_step_key=trainer.step), checked
//     against EXPECT_DIR; the Trainer then resumes from a copy of the import
//     in TRAIN_DIR (weights only: a fresh optimizer) and runs STEPS more steps.
// Exits 0 when every check passes; prints the first failure otherwise.
#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lightning/trainer.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/factories.h"
#include "sharded/status_macros.h"
#include "simulate/embedding_mlp.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight {
namespace {

struct Expected {
  std::string key;
  c10::ScalarType dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

absl::StatusOr<std::vector<Expected>> ReadExpected(const std::string& dir) {
  static const std::map<std::string, c10::ScalarType> kDtypes = {
      {"F32", c10::kFloat}, {"F64", c10::kDouble}, {"F16", c10::kHalf}, {"BF16", c10::kBFloat16}, {"I64", c10::kLong},
      {"I32", c10::kInt},   {"I8", c10::kChar},    {"U8", c10::kByte},  {"BOOL", c10::kBool}};
  std::ifstream manifest(dir + "/manifest.txt");
  if (!manifest) return absl::NotFoundError("no " + dir + "/manifest.txt");
  std::vector<Expected> out;
  std::string line;
  while (std::getline(manifest, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 2 || kDtypes.count(f[1]) == 0) return absl::InvalidArgumentError("bad manifest line: " + line);
    Expected e{f[0], kDtypes.at(f[1]), {}, {}};
    for (size_t i = 2; i < f.size(); ++i) e.shape.push_back(std::stoll(f[i]));
    std::ifstream bin(dir + "/" + e.key + ".bin", std::ios::binary);
    std::stringstream ss;
    ss << bin.rdbuf();
    e.bytes = ss.str();
    out.push_back(std::move(e));
  }
  return out;
}

absl::Status CheckValue(const Expected& e, const at::Tensor& got) {
  const at::Tensor c = got.contiguous();
  if (c.scalar_type() != e.dtype || c.sizes().vec() != e.shape ||
      static_cast<size_t>(c.numel() * c.element_size()) != e.bytes.size() ||
      (c.numel() > 0 && std::memcmp(c.data_ptr(), e.bytes.data(), e.bytes.size()) != 0)) {
    return absl::InternalError("key '" + e.key + "' differs from what Python saved");
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> Full(const sharded::StateValue& v) {
  if (const at::Tensor* t = std::get_if<at::Tensor>(&v)) return *t;
  return std::get<sharded::ShardedTensor>(v).FullTensor();
}

int CheckTrain(const std::string& ckpt, const std::string& expect_dir, const std::string& out_dir,
               const std::string& shards, int steps, double lr) {
  auto expected = ReadExpected(expect_dir);
  if (!expected.ok()) {
    std::cerr << expected.status() << "\n";
    return 1;
  }
  std::map<std::string, int64_t> dims;
  for (absl::string_view s : absl::StrSplit(shards, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(s, '=');
    dims[kv.first] = std::stoll(kv.second);
  }
  simulate::SimulatedCluster cluster(3);
  absl::Status s = cluster.Run([&](simulate::RankContext& ctx) -> absl::Status {
    sharded::StateDict state;
    for (const Expected& e : *expected) {
      auto dim = dims.find(e.key);
      if (dim == dims.end()) {
        SL_RETURN_IF_ERROR(state.Insert(e.key, at::zeros(e.shape, at::TensorOptions().dtype(e.dtype))));
        continue;
      }
      auto t = sharded::Zeros(sharded::ChunkShardingSpec::OnRanks(dim->second, 3), e.shape, {e.dtype, false}, ctx.pg);
      if (!t.ok()) return t.status();
      SL_RETURN_IF_ERROR(state.Insert(e.key, std::move(*t)));
    }
    SL_RETURN_IF_ERROR(sharded::checkpoint::LoadCheckpoint(state, ckpt, *ctx.pg));
    for (const Expected& e : *expected) {
      auto full = Full(*state.Find(e.key));
      if (!full.ok()) return full.status();
      SL_RETURN_IF_ERROR(CheckValue(e, *full));
    }
    // "Training": SGD on 0.5 * |x|^2, whose gradient is x, on every local value.
    for (auto& [key, value] : state.entries()) {
      std::vector<at::Tensor> locals;  // handles: the in-place update reaches the state
      if (const at::Tensor* t = std::get_if<at::Tensor>(&value)) {
        locals.push_back(*t);
      } else {
        for (const auto& shard : std::get<sharded::ShardedTensor>(value).local_shards()) locals.push_back(shard.tensor);
      }
      for (at::Tensor& t : locals) {
        if (!at::isFloatingType(t.scalar_type())) continue;
        for (int i = 0; i < steps; ++i) t.sub_(t.mul(lr));
      }
    }
    return sharded::checkpoint::SaveCheckpoint(state, out_dir, *ctx.pg);
  });
  if (!s.ok()) {
    std::cerr << "check_train: " << s << "\n";
    return 1;
  }
  std::cout << "check_train: " << expected->size() << " tensors equal on 3 ranks; trained " << steps << " steps\n";
  return 0;
}

int Resume(const std::string& imported, const std::string& train_dir, const std::string& expect_dir, int steps) {
  auto expected = ReadExpected(expect_dir);
  if (!expected.ok()) {
    std::cerr << expected.status() << "\n";
    return 1;
  }
  std::vector<int64_t> starts(3, -1);
  std::error_code ec;
  std::filesystem::copy(imported, train_dir, std::filesystem::copy_options::recursive, ec);
  if (ec) {
    std::cerr << "resume: copying " << imported << " to " << train_dir << ": " << ec.message() << "\n";
    return 1;
  }
  simulate::SimulatedCluster cluster(3);
  absl::Status s = cluster.Run([&](simulate::RankContext& ctx) -> absl::Status {
    // The imported weights are the ones Python wrote.
    {
      simulate::EmbeddingMlp module;
      SL_RETURN_IF_ERROR(module.ConfigureShardedModel({ctx.pg, ctx.rank, 3, /*seed=*/1}));
      auto optimizer = module.ConfigureOptimizers();
      if (!optimizer.ok()) return optimizer.status();
      at::Tensor step = at::zeros({1}, at::kLong);
      auto all = lightning::TrainingStateDict(module, **optimizer, step);
      if (!all.ok()) return all.status();
      sharded::StateDict from_import;  // shares storage with `all`
      for (const auto& [key, value] : all->entries()) {
        if (key.rfind("model.", 0) == 0) SL_RETURN_IF_ERROR(from_import.Insert(key, value));
      }
      sharded::checkpoint::LoadOptions weights;  // the import also carries Lightning's other entries
      weights.key_prefixes = {"model."};
      SL_RETURN_IF_ERROR(sharded::checkpoint::LoadCheckpoint(from_import, imported, *ctx.pg, weights));
      for (const Expected& e : *expected) {
        auto full = Full(*from_import.Find(e.key));
        if (!full.ok()) return full.status();
        SL_RETURN_IF_ERROR(CheckValue(e, *full));
      }
    }
    // The Trainer resumes from the import itself (weights only: a fresh
    // optimizer), in a copy so the import stays as it was.
    simulate::EmbeddingMlp module;
    lightning::TrainerOptions options;
    options.seed = 1;
    options.checkpoint_dir = train_dir;  // a copy of the import, made before the ranks start
    options.max_steps = 40 + steps;
    lightning::Trainer trainer(options);
    simulate::SyntheticRegression data(96, 32, 1);
    auto fit = trainer.Fit(module, data, ctx.pg);
    if (!fit.ok()) return fit.status();
    starts[ctx.rank] = fit->start_step;
    return absl::OkStatus();
  });
  if (!s.ok()) {
    std::cerr << "resume: " << s << "\n";
    return 1;
  }
  if (starts != std::vector<int64_t>(3, 40)) {
    std::cerr << "resume: the Trainer did not resume at global_step 40 (rank 0 started at " << starts[0] << ")\n";
    return 1;
  }
  std::cout << "resume: weights equal on 3 ranks; the Trainer resumed at step 40 and ran " << steps << " steps\n";
  return 0;
}

}  // namespace
}  // namespace shardlight

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  if (a.size() == 7 && a[0] == "check_train") {
    return shardlight::CheckTrain(a[1], a[2], a[3], a[4], std::stoi(a[5]), std::stod(a[6]));
  }
  if (a.size() == 5 && a[0] == "resume") return shardlight::Resume(a[1], a[2], a[3], std::stoi(a[4]));
  std::cerr << "usage: interop_helper check_train CKPT EXPECT OUT KEY=DIM,... STEPS LR | resume IMPORTED TRAIN EXPECT STEPS\n";
  return 2;
}
