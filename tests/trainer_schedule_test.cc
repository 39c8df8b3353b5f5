// AdamW and LR schedules in the Trainer (issue 46, item 3): the schedule's
// factors follow torch's LambdaLR / LinearLR / CosineAnnealingLR / StepLR
// rules; its state and AdamW's (sharded where its parameter is) are in the
// checkpoint, and a run resumed mid-way at another world size continues with
// exactly the learning rates, and the losses, of the uninterrupted run; bad
// schedule or step options fail on every rank naming the option.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lightning/lr_schedule.h"
#include "lightning/optimizer.h"
#include "lightning/trainer.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/format/checkpoint_reader.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"
#include "simulate/embedding_mlp.h"

namespace shardlight {
namespace {

using lightning::LrSchedule;
using lightning::LrScheduleOptions;
using sharded::checkpoint::testing::FreshDir;
using simulate::RankContext;
using simulate::SimulatedCluster;
using ::testing::HasSubstr;

constexpr uint64_t kSeed = 5;

// EmbeddingMlp (a sharded table and dense layers) trained by AdamW with a schedule.
class ScheduledMlp : public simulate::EmbeddingMlp {
 public:
  explicit ScheduledMlp(LrScheduleOptions schedule, double weight_decay = 0.05)
      : schedule_(schedule), weight_decay_(weight_decay) {}
  absl::StatusOr<lightning::OptimizerConfig> ConfigureOptimizersAndSchedule() override {
    lightning::AdamWOptions adamw;
    adamw.lr = 0.02;
    adamw.weight_decay = weight_decay_;
    auto optimizer = lightning::AdamW::Create(lightning::TrainablesOf(*this), adamw);
    if (!optimizer.ok()) return optimizer.status();
    auto schedule = LrSchedule::Create(schedule_);
    if (!schedule.ok()) return schedule.status();
    return lightning::OptimizerConfig{*std::move(optimizer), *std::move(schedule)};
  }

 private:
  LrScheduleOptions schedule_;
  double weight_decay_;
};

LrScheduleOptions WarmupCosine(int64_t warmup) {
  LrScheduleOptions o;
  o.kind = LrScheduleOptions::Kind::kWarmupCosine;
  o.warmup_steps = warmup;
  o.warmup_start_factor = 0.1;
  o.min_lr_factor = 0.05;
  return o;
}

struct Trained {
  std::vector<double> losses, lrs;
  int64_t start_step = 0;
};

absl::StatusOr<Trained> Train(RankContext& ctx, LrScheduleOptions schedule, int64_t max_steps, const std::string& dir,
                          lightning::TrainerOptions options = {}, double weight_decay = 0.05) {
  ScheduledMlp module(schedule, weight_decay);
  options.max_steps = max_steps;
  options.seed = kSeed;
  options.checkpoint_dir = dir;
  simulate::SyntheticRegression data(96, 24, kSeed);
  auto fit = lightning::Trainer(options).Fit(module, data, ctx.pg);
  if (!fit.ok()) return fit.status();
  return Trained{fit->losses, fit->lrs, fit->start_step};
}

// The resumed run continues the uninterrupted one from step 5: the same
// learning rates, and the same losses (to float rounding).
void ExpectContinues(const Trained& r, const Trained& s, const std::string& what) {
  ASSERT_EQ(r.start_step, 5) << what;
  ASSERT_EQ(r.lrs.size(), 7u) << what;
  for (size_t i = 0; i < r.lrs.size(); ++i) {
    EXPECT_EQ(r.lrs[i], s.lrs[5 + i]) << "lr of step " << 5 + i << " " << what;
    EXPECT_NEAR(r.losses[i], s.losses[5 + i], 1e-5 * std::abs(s.losses[5 + i])) << "loss of step " << 5 + i << " " << what;
  }
}

TEST(LrScheduleTest, FactorsFollowTorchsRules) {
  LrScheduleOptions o = WarmupCosine(4);
  o.total_steps = 12;
  auto cosine = LrSchedule::Create(o);
  ASSERT_TRUE(cosine.ok()) << cosine.status();
  auto module = std::make_shared<simulate::EmbeddingMlp>();
  auto sgd = lightning::Sgd::Create(lightning::TrainablesOf(*module), {0.5, 0.0, 0.0});
  ASSERT_TRUE(sgd.ok());
  ASSERT_TRUE((*cosine)->Bind(**sgd, 100).ok());
  EXPECT_DOUBLE_EQ((*sgd)->lr(), 0.5 * 0.1);                   // LambdaLR applies factor(0) at once
  EXPECT_DOUBLE_EQ((*cosine)->Factor(2), 0.1 + 0.9 * 2 / 4.0);  // LinearLR
  EXPECT_DOUBLE_EQ((*cosine)->Factor(4), 1.0);                  // the cosine's top
  EXPECT_DOUBLE_EQ((*cosine)->Factor(8), 0.05 + 0.95 * 0.5);    // half way: (1 + cos(pi/2)) / 2
  EXPECT_DOUBLE_EQ((*cosine)->Factor(12), 0.05);                // eta_min
  EXPECT_DOUBLE_EQ((*cosine)->Factor(30), 0.05);                // held past total_steps
  ASSERT_TRUE((*cosine)->Step(**sgd).ok());
  EXPECT_DOUBLE_EQ((*sgd)->lr(), 0.5 * (0.1 + 0.9 / 4));
  LrScheduleOptions decay;
  decay.kind = LrScheduleOptions::Kind::kStepDecay;
  decay.step_size = 3;
  decay.gamma = 0.5;
  auto step_decay = LrSchedule::Create(decay);
  ASSERT_TRUE(step_decay.ok());
  EXPECT_EQ((*step_decay)->Factor(2), 1.0);
  EXPECT_EQ((*step_decay)->Factor(3), 0.5);
  EXPECT_EQ((*step_decay)->Factor(7), 0.25);
  auto constant = LrSchedule::Create({});
  ASSERT_TRUE(constant.ok());
  EXPECT_EQ((*constant)->Factor(1000), 1.0);
}

TEST(LrScheduleTest, BadOptionsNameTheOption) {
  LrScheduleOptions o;
  o.step_size = 0;
  EXPECT_THAT(LrSchedule::Create(o).status().message(), HasSubstr("step_size"));
  o = WarmupCosine(5);
  o.total_steps = 4;
  EXPECT_THAT(LrSchedule::Create(o).status().message(), HasSubstr("warmup_steps 5 exceeds total_steps 4"));
  o = WarmupCosine(2);
  o.min_lr_factor = 1.5;
  EXPECT_THAT(LrSchedule::Create(o).status().message(), HasSubstr("min_lr_factor"));
  EXPECT_THAT(lightning::AdamW::Create({}, {0.1, 1.0}).status().message(), HasSubstr("beta1"));
}

TEST(TrainerScheduleTest, TheLearningRatesFollowTheSchedule) {
  SimulatedCluster cluster(2);
  auto run = cluster.Run([&](RankContext& ctx) { return Train(ctx, WarmupCosine(3), 9, ""); });
  ASSERT_TRUE(run.ok()) << run.status();
  auto schedule = LrSchedule::Create(WarmupCosine(3));
  ASSERT_TRUE(schedule.ok());
  auto module = std::make_shared<simulate::EmbeddingMlp>();
  auto probe = lightning::Sgd::Create(lightning::TrainablesOf(*module), {0.02, 0.0, 0.0});
  ASSERT_TRUE(probe.ok());
  ASSERT_TRUE((*schedule)->Bind(**probe, 9).ok());
  for (const Trained& rank : *run) {
    ASSERT_EQ(rank.lrs.size(), 9u);
    for (int64_t t = 0; t < 9; ++t) EXPECT_DOUBLE_EQ(rank.lrs[t], 0.02 * (*schedule)->Factor(t)) << t;
  }
}

TEST(TrainerScheduleTest, ResumeAtAnotherWorldSizeContinuesTheSameLearningRates) {
  // The cosine ends at step 12 in both runs (total_steps; 0 would end it at each Fit's max_steps).
  LrScheduleOptions schedule = WarmupCosine(4);
  schedule.total_steps = 12;
  for (const auto& [before, after] : std::vector<std::pair<int, int>>{{2, 3}, {4, 1}}) {
    SimulatedCluster first(before);
    auto straight = first.Run([&](RankContext& ctx) { return Train(ctx, schedule, 12, ""); });
    ASSERT_TRUE(straight.ok()) << straight.status();
    const std::string dir = FreshDir(absl::StrCat("schedule_", before, "_", after));
    auto part = first.Run([&](RankContext& ctx) { return Train(ctx, schedule, 5, dir); });
    ASSERT_TRUE(part.ok()) << part.status();
    // The checkpoint of step 5 holds the schedule's state (values) and AdamW's, the table's sharded.
    sharded::StateDict saved;
    std::vector<std::string> others;
    ASSERT_TRUE(first.Run([&](RankContext& ctx) -> absl::Status {
      sharded::StateDict mine;  // each rank its own (a load sets the values)
      for (const char* key : {"lr_scheduler.last_step", "lr_scheduler.base_lr", "trainer.step"}) {
        SL_RETURN_IF_ERROR(mine.InsertValue(key, sharded::PlainValue()));
      }
      sharded::checkpoint::LoadOptions load;
      load.strict = false;
      sharded::checkpoint::LoadStats stats;
      SL_RETURN_IF_ERROR(sharded::checkpoint::LoadCheckpoint(mine, dir, *ctx.pg, load, &stats));
      if (ctx.rank == 0) {
        others = stats.unexpected_keys;
        saved = mine;
      }
      return absl::OkStatus();
    }).ok());
    EXPECT_EQ(*saved.FindValue("lr_scheduler.last_step"), sharded::PlainValue::Int(5));
    EXPECT_EQ(*saved.FindValue("lr_scheduler.base_lr"), sharded::PlainValue::Float(0.02));
    EXPECT_EQ(*saved.FindValue("trainer.step"), sharded::PlainValue::Int(5));
    EXPECT_THAT(others, ::testing::IsSupersetOf({std::string("optimizer.table.exp_avg"),
                                                std::string("optimizer.table.exp_avg_sq"),
                                                std::string("optimizer.step")}));
    SimulatedCluster second(after);
    auto resumed = second.Run([&](RankContext& ctx) { return Train(ctx, schedule, 12, dir); });
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    ExpectContinues((*resumed)[0], (*straight)[0], absl::StrCat("W=", before, "->", after));
  }
}

// The step, the schedule's state and AdamW's hyper-parameters are values in
// the checkpoint (not tensors); a resume with other hyper-parameters says so.
TEST(TrainerScheduleTest, StepScheduleAndHyperParametersAreValues) {
  LrScheduleOptions schedule = WarmupCosine(4);
  schedule.total_steps = 12;
  SimulatedCluster cluster(2);
  const std::string dir = FreshDir("schedule_values");
  ASSERT_TRUE(cluster.Run([&](RankContext& ctx) { return Train(ctx, schedule, 5, dir); }).ok());
  auto reader = sharded::checkpoint::CheckpointReader::Open(dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const sharded::checkpoint::CheckpointIndex& index = reader->index();
  for (const char* key : {"trainer.step", "lr_scheduler.last_step", "lr_scheduler.base_lr"}) {
    EXPECT_EQ(index.Find(key), nullptr) << key << " is a tensor";
  }
  ASSERT_NE(index.FindValue("trainer.step"), nullptr);
  EXPECT_EQ(index.FindValue("trainer.step")->value, sharded::PlainValue::Int(5));
  EXPECT_EQ(index.FindValue("lr_scheduler.last_step")->value, sharded::PlainValue::Int(5));
  EXPECT_EQ(index.FindValue("lr_scheduler.base_lr")->value, sharded::PlainValue::Float(0.02));
  ASSERT_NE(index.FindValue("optimizer.hyper_parameters"), nullptr);
  const sharded::PlainValue* hyper = &index.FindValue("optimizer.hyper_parameters")->value;
  ASSERT_NE(hyper->Find("lr"), nullptr);
  EXPECT_GT(hyper->Find("lr")->real(), 0);  // the scheduled rate at step 5
  EXPECT_LE(hyper->Find("lr")->real(), 0.02);
  EXPECT_THAT(hyper->Repr(), HasSubstr("'betas': (0.9, 0.999), 'eps': 1e-08, 'weight_decay': 0.05}"));
  // Resumed with another weight decay: said on rank 0, and the run goes on.
  ::testing::internal::CaptureStdout();
  auto resumed = cluster.Run([&](RankContext& ctx) { return Train(ctx, schedule, 7, dir, {}, 0.1); });
  const std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)[0].start_step, 5);
  EXPECT_THAT(out, HasSubstr("the optimizer's hyper-parameters differ from those saved in " + dir +
                             " (weight_decay 0.05 saved, 0.1 now): this run's are used"));
}

// A checkpoint an earlier release wrote: the step and the schedule's state
// as one-element tensors (trainer.step and lr_scheduler.last_step int64 [1],
// lr_scheduler.base_lr float64 [1]), no values. It still resumes, with the
// uninterrupted run's learning rates and losses.
TEST(TrainerScheduleTest, ACheckpointOfAnEarlierReleaseStillResumes) {
  LrScheduleOptions schedule = WarmupCosine(4);
  schedule.total_steps = 12;
  SimulatedCluster cluster(2);
  auto straight = cluster.Run([&](RankContext& ctx) { return Train(ctx, schedule, 12, ""); });
  ASSERT_TRUE(straight.ok()) << straight.status();
  const std::string now = FreshDir("schedule_now"), old = FreshDir("schedule_earlier");
  ASSERT_TRUE(cluster.Run([&](RankContext& ctx) { return Train(ctx, schedule, 5, now); }).ok());
  auto reader = sharded::checkpoint::CheckpointReader::Open(now);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const sharded::checkpoint::CheckpointIndex index = reader->index();
  ASSERT_TRUE(cluster.Run([&](RankContext& ctx) -> absl::Status {
    sharded::StateDict all;  // every entry, dense
    for (const auto& t : index.tensors) {
      SL_RETURN_IF_ERROR(all.Insert(t.key, at::empty(t.shape, at::TensorOptions().dtype(t.dtype))));
    }
    for (const auto& v : index.values) SL_RETURN_IF_ERROR(all.InsertValue(v.key, sharded::PlainValue()));
    SL_RETURN_IF_ERROR(sharded::checkpoint::LoadCheckpoint(all, now, *ctx.pg));
    sharded::StateDict earlier;
    for (const auto& [key, value] : all.entries()) SL_RETURN_IF_ERROR(earlier.Insert(key, value));
    const auto integer = [&](const char* key) { return at::full({1}, all.FindValue(key)->integer(), at::kLong); };
    SL_RETURN_IF_ERROR(earlier.Insert("trainer.step", integer("trainer.step")));
    SL_RETURN_IF_ERROR(earlier.Insert("lr_scheduler.last_step", integer("lr_scheduler.last_step")));
    SL_RETURN_IF_ERROR(earlier.Insert("lr_scheduler.base_lr",
                                      at::full({1}, all.FindValue("lr_scheduler.base_lr")->real(), at::kDouble)));
    sharded::checkpoint::SaveOptions save;
    save.run = index.run;  // the same run
    return sharded::checkpoint::SaveCheckpoint(earlier, old, *ctx.pg, save);
  }).ok());
  auto earlier = sharded::checkpoint::CheckpointReader::Open(old);
  ASSERT_TRUE(earlier.ok()) << earlier.status();
  ASSERT_TRUE(earlier->index().values.empty());
  ASSERT_NE(earlier->index().Find("trainer.step"), nullptr);
  auto resumed = cluster.Run([&](RankContext& ctx) { return Train(ctx, schedule, 12, old); });
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  ExpectContinues((*resumed)[0], (*straight)[0], "from an earlier release's checkpoint");
}

TEST(TrainerScheduleTest, BadOptionsFailOnEveryRankNamingTheOption) {
  SimulatedCluster cluster(3);
  auto expect = [&](const LrScheduleOptions& schedule, int64_t max_steps, lightning::TrainerOptions options,
                    const std::string& message) {
    std::vector<absl::Status> got(3);
    ASSERT_TRUE(cluster.Run([&](RankContext& ctx) {
      got[ctx.rank] = Train(ctx, schedule, max_steps, "", options).status();
    }).ok());
    for (const absl::Status& rank : got) {
      ASSERT_FALSE(rank.ok()) << message;
      EXPECT_THAT(std::string(rank.message()), HasSubstr(message));
    }
  };
  expect(WarmupCosine(8), 6, {}, "warmup_steps 8 exceeds max_steps 6");
  lightning::TrainerOptions o;
  o.accumulate_grad_batches = 0;
  expect({}, 6, o, "accumulate_grad_batches is 0");
  o = {};
  o.gradient_clip_norm = 1;
  o.gradient_clip_value = 0.5;
  expect({}, 6, o, "are both set");
  o = {};
  o.gradient_clip_value = -1;
  expect({}, 6, o, "gradient_clip_value is -1");
}

}  // namespace
}  // namespace shardlight
