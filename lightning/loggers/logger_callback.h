// LoggerCallback: writes each step's scalars to ScalarLoggers (CSV,
// TensorBoard) on rank 0, through the Trainer's Callback interface.
//
// Per logged step (every `every` steps and the last): "loss" (the global
// loss), "steps_per_sec" since the previous logged step, "tokens_per_sec"
// when tokens_per_step > 0, every `sources` scalar (e.g. the learning rate),
// and whatever Log() added since the previous row (e.g. validation metrics).
//
// Errors:
//  - OnTrainStart, on every rank, before training: a log directory that is a
//    file or not writable is InvalidArgument naming it and the logger
//    (CheckLogDir); on rank 0 a logger whose file cannot be created fails the
//    same way. Each rank decides from its own view of the file system (on one
//    machine or a shared file system, the same verdict everywhere).
//  - A logger that fails mid-run (disk full) prints one line on `errors`
//    naming the logger, its file and the step, writes nothing more, and
//    training goes on: checkpoints are written apart from logs and never
//    touched by a logger. failure() returns the first such error.
#ifndef SHARDLIGHT_LIGHTNING_LOGGERS_LOGGER_CALLBACK_H_
#define SHARDLIGHT_LIGHTNING_LOGGERS_LOGGER_CALLBACK_H_

#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "lightning/callback.h"
#include "lightning/loggers/scalar_logger.h"

namespace shardlight::lightning::loggers {

struct LoggerOptions {
  int64_t every = 1;            // log every N steps (and the last)
  double tokens_per_step = 0;   // global tokens per step; > 0 logs "tokens_per_sec"
  // Called on every rank at each logged step (they may be collective); only
  // rank 0 writes what they return.
  std::vector<std::function<Scalars(int64_t step)>> sources;
  std::ostream* errors = &std::cerr;  // where a mid-run failure is reported (rank 0)
};

class LoggerCallback : public Callback {
 public:
  LoggerCallback(std::vector<std::shared_ptr<ScalarLogger>> loggers, LoggerOptions options = {});

  absl::Status OnTrainStart(const TrainState& state) override;
  absl::Status OnStepEnd(const TrainState& state, int64_t step, double loss) override;

  // Adds a named scalar to the next row written (any rank may call it; only
  // rank 0's are written).
  void Log(const std::string& name, double value) { pending_.emplace_back(name, value); }

  // The first mid-run failure of a logger (OK if none).
  const absl::Status& failure() const { return failure_; }

 private:
  std::vector<std::shared_ptr<ScalarLogger>> loggers_;
  LoggerOptions options_;
  Scalars pending_;
  absl::Status failure_;
  std::chrono::steady_clock::time_point last_time_;
  int64_t last_step_ = 0;
};

}  // namespace shardlight::lightning::loggers

#endif  // SHARDLIGHT_LIGHTNING_LOGGERS_LOGGER_CALLBACK_H_
