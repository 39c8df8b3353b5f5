// A 3-rank Trainer.Fit of 6 steps logging to CSV and TensorBoard in argv[1]
// (loss, steps/s, tokens/s, lr, and a val_loss every 2 steps): the files
// tensorboard_read_test hands to the real tensorboard reader.
#include <iostream>
#include <memory>

#include "lightning/loggers/csv_logger.h"
#include "lightning/loggers/logged_fit_model.h"
#include "lightning/loggers/logger_callback.h"
#include "lightning/loggers/tensorboard_logger.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning::loggers {
namespace {

absl::Status Main(const std::string& dir) {
  simulate::SimulatedCluster cluster(3);
  return cluster.Run([&](simulate::RankContext& ctx) -> absl::Status {
    LoggedModel model;
    TrainerOptions options;
    options.max_steps = 6;
    LoggerOptions lo;
    lo.tokens_per_step = 96;
    LoggerCallback* self = nullptr;
    lo.sources = {[&](int64_t step) {
      if (step % 2 == 0) self->Log("val_loss", 1.0 / (1 + step));  // as a validation hook would
      return Scalars{{"lr", 1e-3 * step}};
    }};
    auto logger = std::make_shared<LoggerCallback>(
        std::vector<std::shared_ptr<ScalarLogger>>{std::make_shared<CsvLogger>(dir),
                                                   std::make_shared<TensorBoardLogger>(dir)},
        lo);
    self = logger.get();
    SL_RETURN_IF_ERROR(Trainer(options, {logger}).Fit(model, StepData(), ctx.pg).status());
    return logger->failure();
  });
}

}  // namespace
}  // namespace shardlight::lightning::loggers

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: logged_fit DIR\n";
    return 2;
  }
  const absl::Status s = shardlight::lightning::loggers::Main(argv[1]);
  if (!s.ok()) std::cerr << s << "\n";
  return s.ok() ? 0 : 1;
}
