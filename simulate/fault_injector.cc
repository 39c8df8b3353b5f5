#include "simulate/fault_injector.h"

#include <optional>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lightning/trainer.h"
#include "sharded/checkpoint/roots/checkpoint_root.h"
#include "sharded/checkpoint/storage/fault_injecting_storage.h"

namespace shardlight::simulate {

FaultInjector::FaultInjector(FaultPlan plan, std::chrono::milliseconds collective_timeout, int64_t checkpoint_every)
    : plan_(plan), collective_timeout_(collective_timeout), checkpoint_every_(checkpoint_every) {}

absl::Status FaultInjector::OnTrainStart(const lightning::TrainState& state) {
  rank_ = state.rank;
  max_steps_ = state.max_steps;
  last_save_step_ = state.start_step;
  return absl::OkStatus();
}

absl::Status FaultInjector::OnStepEnd(const lightning::TrainState& state, int64_t step, double) {
  if (state.rank != plan_.rank || step != plan_.step) return absl::OkStatus();
  switch (plan_.kind) {
    case FaultKind::kCrash:
      return absl::AbortedError(absl::StrCat("injected crash of rank ", plan_.rank, " after step ", step));
    case FaultKind::kDelay:
      std::this_thread::sleep_for(plan_.delay);
      return absl::OkStatus();
    case FaultKind::kTimeout:
      // Peers give up after the collective timeout, then this rank reports
      // itself as the one that stalled.
      std::this_thread::sleep_for(collective_timeout_ + std::chrono::milliseconds(500));
      return absl::AbortedError(absl::StrCat("injected stall of rank ", plan_.rank, " after step ", step,
                                             ": held past the ", collective_timeout_.count(),
                                             " ms collective timeout"));
    case FaultKind::kSaveCrash:
    case FaultKind::kSaveDelay:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

std::shared_ptr<sharded::checkpoint::Storage> FaultInjector::SaveStorage() {
  using sharded::checkpoint::StorageOp;
  return std::make_shared<sharded::checkpoint::FaultInjectingStorage>(
      sharded::checkpoint::PosixStorage(), [this](StorageOp op, const std::string& path) {
        const bool data_file_sync = op == StorageOp::kSync && absl::StrContains(path, "/.tmp-") &&
                                    absl::EndsWith(path, ".safetensors");
        const bool save_fault = plan_.kind == FaultKind::kSaveCrash || plan_.kind == FaultKind::kSaveDelay;
        if (!save_fault || rank_ != plan_.rank || !data_file_sync) return absl::OkStatus();
        // The save of step K: a root's step directory names its step; in a
        // plain directory this is the next save of the schedule.
        int64_t scheduled = last_save_step_ + 1;
        while (scheduled < max_steps_ && !lightning::CheckpointsAfterStep(scheduled, max_steps_, checkpoint_every_)) {
          ++scheduled;
        }
        last_save_step_ = scheduled;
        const std::string dir = path.substr(0, path.rfind('/'));
        const std::optional<int64_t> root_step =
            sharded::checkpoint::ParseStepDirName(absl::string_view(dir).substr(dir.rfind('/') + 1));
        if (root_step.value_or(scheduled) != plan_.step || fired_.exchange(true)) return absl::OkStatus();
        if (plan_.kind == FaultKind::kSaveDelay) {
          std::this_thread::sleep_for(plan_.delay);
          return absl::OkStatus();
        }
        return absl::AbortedError(absl::StrCat("injected crash of rank ", plan_.rank, " during the save of step ",
                                               plan_.step, " (data written, not committed)"));
      });
}

}  // namespace shardlight::simulate
