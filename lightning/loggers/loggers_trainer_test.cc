// Loggers and the progress bar inside Trainer.Fit on thread-ranks.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lightning/loggers/csv_logger.h"
#include "lightning/loggers/logged_fit_model.h"
#include "lightning/loggers/logger_callback.h"
#include "lightning/loggers/progress_bar.h"
#include "lightning/loggers/tensorboard_logger.h"
#include "lightning/loggers/tfevents.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning::loggers {
namespace {

namespace fs = std::filesystem;
using simulate::RankContext;
using simulate::SimulatedCluster;

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path dir = fs::path(tmp != nullptr ? tmp : "/tmp") / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string FileContents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Run {
  std::vector<double> losses;
  absl::Status failure;
};

// Every rank's Fit with its own loggers in `logs` (as a user writes it).
absl::StatusOr<Run> FitLogged(RankContext& ctx, const std::string& logs, const std::string& ckpt, int64_t steps,
                              std::ostream* errors) {
  LoggedModel model;
  TrainerOptions options;
  options.max_steps = steps;
  options.checkpoint_dir = ckpt;
  options.checkpoint_every = 2;
  LoggerOptions lo;
  lo.tokens_per_step = 64;
  lo.sources = {[](int64_t step) { return Scalars{{"lr", 0.5 / step}}; }};
  lo.errors = errors;
  auto logger = std::make_shared<LoggerCallback>(
      std::vector<std::shared_ptr<ScalarLogger>>{std::make_shared<CsvLogger>(logs),
                                                 std::make_shared<TensorBoardLogger>(logs)},
      lo);
  logger->Log("val_loss", 7.25);  // e.g. from a validation hook: written with the next row
  Trainer trainer(options, {logger});
  SL_ASSIGN_OR_RETURN(FitResult r, trainer.Fit(model, StepData(), ctx.pg));
  return Run{r.losses, logger->failure()};
}

std::vector<std::vector<std::string>> CsvRows(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  for (absl::string_view line : absl::StrSplit(FileContents(path), '\n', absl::SkipEmpty())) {
    rows.push_back(absl::StrSplit(line, ','));
  }
  return rows;
}

TEST(LoggersTrainerTest, RankZeroWritesEveryStepsScalars) {
  for (int w : {1, 3}) {
    const std::string logs = FreshDir(absl::StrCat("logs", w));
    SimulatedCluster cluster(w);
    auto runs = cluster.Run([&](RankContext& ctx) { return FitLogged(ctx, logs, "", 4, nullptr); });
    ASSERT_TRUE(runs.ok()) << runs.status();
    const auto rows = CsvRows(logs + "/metrics.csv");
    ASSERT_EQ(rows.size(), 5u) << FileContents(logs + "/metrics.csv");
    EXPECT_EQ(rows[0], (std::vector<std::string>{"step", "loss", "steps_per_sec", "tokens_per_sec", "lr",
                                                  "val_loss"}));
    for (int64_t s = 1; s <= 4; ++s) {
      const auto& row = rows[s];
      ASSERT_EQ(row.size(), 6u);
      EXPECT_EQ(row[0], absl::StrCat(s));
      EXPECT_EQ(std::stod(row[1]), (*runs)[0].losses[s - 1]) << "w=" << w << " step " << s;  // 17 digits: exact
      EXPECT_NEAR(std::stod(row[3]), 64 * std::stod(row[2]), 1e-9 * std::stod(row[3]));
      EXPECT_EQ(std::stod(row[4]), 0.5 / s);
      EXPECT_EQ(row[5], s == 1 ? "7.25" : "");  // logged once
    }
    // One event file: only rank 0 wrote.
    int events = 0;
    for (const auto& e : fs::directory_iterator(logs)) {
      if (e.path().filename().string().find("tfevents") != std::string::npos) {
        ++events;
        EXPECT_EQ(FileContents(e.path().string()).substr(0, 12 + 4 + 22).size(), 38u);
      }
    }
    EXPECT_EQ(events, 1) << "w=" << w;
  }
}

// A log directory that is a file, or that cannot be created: the same error
// on every rank, before any step ran or any checkpoint was written.
TEST(LoggersTrainerTest, BadLogDirectoryFailsEveryRankBeforeTraining) {
  const std::string root = FreshDir("badlogs");
  const std::string file = root + "/a_file";
  std::ofstream(file) << "x";
  for (const auto& [dir, want] : std::vector<std::pair<std::string, std::string>>{
           {file, absl::StrCat("log directory ", file, " of the CSV logger: it is a file, not a directory")},
           {"/proc/shardlight_logs", "log directory /proc/shardlight_logs of the CSV logger: cannot create it"}}) {
    SimulatedCluster cluster(3);
    std::vector<absl::Status> statuses(3);
    const std::string ckpt = root + "/ckpt";
    auto ran = cluster.Run([&](RankContext& ctx) -> absl::Status {
      statuses[ctx.rank] = FitLogged(ctx, dir, ckpt, 4, nullptr).status();
      return absl::OkStatus();
    });
    ASSERT_TRUE(ran.ok()) << ran;
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(statuses[r].code(), absl::StatusCode::kInvalidArgument) << statuses[r];
      EXPECT_NE(statuses[r].message().find(want), std::string::npos) << "rank " << r << ": " << statuses[r];
    }
    EXPECT_FALSE(fs::exists(ckpt)) << "a checkpoint was written";
  }
}

// The CSV file fails mid-run (disk full: /dev/full behind its rewrite): one
// line names it, the TensorBoard logger and training go on, and the
// checkpoints are whole (a resume continues from the last one).
TEST(LoggersTrainerTest, LoggerFailingMidRunLeavesTrainingAndCheckpointsIntact) {
  const std::string logs = FreshDir("fulllogs");
  const std::string ckpt = FreshDir("fullckpt");
  fs::create_symlink("/dev/full", logs + "/metrics.csv.tmp");
  SimulatedCluster cluster(2);
  std::ostringstream errors;
  auto runs = cluster.Run([&](RankContext& ctx) { return FitLogged(ctx, logs, ckpt, 4, &errors); });
  ASSERT_TRUE(runs.ok()) << runs.status();
  EXPECT_EQ((*runs)[0].losses.size(), 4u);
  const std::string want = absl::StrCat("CSV logger at ", logs, " failed at step 1: cannot write ", logs,
                                        "/metrics.csv.tmp: No space left on device; it logs nothing more");
  EXPECT_NE(errors.str().find(want), std::string::npos) << errors.str();
  EXPECT_NE((*runs)[0].failure.message().find(want), std::string::npos) << (*runs)[0].failure;
  EXPECT_TRUE((*runs)[1].failure.ok());  // rank 1 writes nothing
  // A resume from the checkpoint goes on to step 6.
  SimulatedCluster again(2);
  auto resumed = again.Run([&](RankContext& ctx) -> absl::StatusOr<int64_t> {
    LoggedModel model;
    TrainerOptions options;
    options.max_steps = 6;
    options.checkpoint_dir = ckpt;
    SL_ASSIGN_OR_RETURN(FitResult r, Trainer(options).Fit(model, StepData(), ctx.pg));
    return r.start_step;
  });
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)[0], 4);
}

absl::StatusOr<std::string> Progress(ProgressBar::Mode mode, int64_t every) {
  std::ostringstream out;
  SimulatedCluster cluster(2);
  SL_RETURN_IF_ERROR(cluster
                         .Run([&](RankContext& ctx) -> absl::Status {
                           LoggedModel model;
                           TrainerOptions options;
                           options.max_steps = 5;
                           std::ostringstream mine;
                           auto bar = std::make_shared<ProgressBar>(ctx.rank == 0 ? out : mine, every, mode);
                           SL_RETURN_IF_ERROR(Trainer(options, {bar}).Fit(model, StepData(), ctx.pg).status());
                           if (!mine.str().empty()) return absl::InternalError("rank 1 printed progress");
                           return absl::OkStatus();
                         }));
  return out.str();
}

TEST(ProgressBarTest, PlainLinesOffATerminalAndABarOnOne) {
  // An ostringstream is no terminal: kAuto gives lines.
  auto lines = Progress(ProgressBar::Mode::kAuto, 2);
  ASSERT_TRUE(lines.ok()) << lines.status();
  const std::vector<std::string> got = absl::StrSplit(*lines, '\n', absl::SkipEmpty());
  ASSERT_EQ(got.size(), 3u) << *lines;  // steps 2, 4 and the last
  EXPECT_EQ(got[0].rfind("step 2/5  loss ", 0), 0u) << got[0];
  EXPECT_NE(got[0].find(" steps/s  ETA "), std::string::npos) << got[0];
  EXPECT_EQ(got[2].rfind("step 5/5  loss ", 0), 0u) << got[2];
  EXPECT_NE(got[2].find("ETA 0:00"), std::string::npos) << got[2];
  auto bar = Progress(ProgressBar::Mode::kBar, 2);
  ASSERT_TRUE(bar.ok()) << bar.status();
  const std::vector<std::string> redraws = absl::StrSplit(*bar, '\r', absl::SkipEmpty());
  ASSERT_EQ(redraws.size(), 5u) << *bar;  // every step, in place
  EXPECT_EQ(redraws[0].rfind("[####................]  1/5  loss ", 0), 0u) << redraws[0];
  EXPECT_EQ(redraws[4].rfind("[####################]  5/5  loss ", 0), 0u) << redraws[4];
  EXPECT_EQ(bar->back(), '\n');
  EXPECT_EQ(bar->find('\n'), bar->size() - 1);
  EXPECT_EQ(FormatEta(3723), "1:02:03");
  EXPECT_EQ(FormatEta(-1), "?");
}

}  // namespace
}  // namespace shardlight::lightning::loggers
