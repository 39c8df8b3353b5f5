#include "lightning/loggers/logger_callback.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::loggers {

LoggerCallback::LoggerCallback(std::vector<std::shared_ptr<ScalarLogger>> loggers, LoggerOptions options)
    : loggers_(std::move(loggers)), options_(std::move(options)) {
  if (options_.every < 1) options_.every = 1;
}

absl::Status LoggerCallback::OnTrainStart(const TrainState& state) {
  for (const auto& logger : loggers_) SL_RETURN_IF_ERROR(CheckLogDir(logger->dir(), logger->kind(), state.rank));
  if (state.rank == 0) {
    for (const auto& logger : loggers_) {
      if (absl::Status s = logger->Open(); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("log directory ", logger->dir(), " of the ", logger->kind(),
                                                       ": ", s.message()));
      }
    }
  }
  last_time_ = std::chrono::steady_clock::now();
  last_step_ = state.start_step;
  return absl::OkStatus();
}

absl::Status LoggerCallback::OnStepEnd(const TrainState& state, int64_t step, double loss) {
  if (step % options_.every != 0 && step != state.max_steps) return absl::OkStatus();
  Scalars row = {{"loss", loss}};
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - last_time_).count();
  if (seconds > 0 && step > last_step_) {
    const double steps_per_sec = (step - last_step_) / seconds;
    row.emplace_back("steps_per_sec", steps_per_sec);
    if (options_.tokens_per_step > 0) row.emplace_back("tokens_per_sec", steps_per_sec * options_.tokens_per_step);
  }
  last_time_ = now;
  last_step_ = step;
  for (const auto& source : options_.sources) {
    for (auto& scalar : source(step)) row.push_back(std::move(scalar));
  }
  for (auto& scalar : pending_) row.push_back(std::move(scalar));
  pending_.clear();
  if (state.rank != 0) return absl::OkStatus();
  for (auto it = loggers_.begin(); it != loggers_.end();) {
    if (absl::Status s = (*it)->Write(step, row); !s.ok()) {
      const absl::Status failed = absl::Status(
          s.code(), absl::StrCat((*it)->kind(), " at ", (*it)->dir(), " failed at step ", step, ": ", s.message(),
                                 "; it logs nothing more, training goes on"));
      if (options_.errors != nullptr) *options_.errors << failed.message() << "\n" << std::flush;
      if (failure_.ok()) failure_ = failed;
      it = loggers_.erase(it);
    } else {
      ++it;
    }
  }
  return absl::OkStatus();
}

}  // namespace shardlight::lightning::loggers
