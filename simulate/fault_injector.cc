#include "simulate/fault_injector.h"

#include <optional>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/checkpoint_root.h"
#include "sharded/checkpoint/fault_injecting_storage.h"

namespace shardlight::simulate {

FaultInjector::FaultInjector(FaultPlan plan, std::chrono::milliseconds collective_timeout)
    : plan_(plan), collective_timeout_(collective_timeout) {}

absl::Status FaultInjector::OnStepEnd(const lightning::TrainState& state, int64_t step, double) {
  rank_ = state.rank;
  last_step_ = step;
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
        // The save of step K: a root's step directory names its step (a
        // background save may end while training is steps further); a plain
        // checkpoint's save is the one after step K ended.
        const bool save_fault = plan_.kind == FaultKind::kSaveCrash || plan_.kind == FaultKind::kSaveDelay;
        if (!save_fault || rank_ != plan_.rank || !data_file_sync) return absl::OkStatus();
        const std::string dir = path.substr(0, path.rfind('/'));
        const std::optional<int64_t> root_step =
            sharded::checkpoint::ParseStepDirName(absl::string_view(dir).substr(dir.rfind('/') + 1));
        if (root_step.value_or(last_step_) != plan_.step || fired_.exchange(true)) return absl::OkStatus();
        if (plan_.kind == FaultKind::kSaveDelay) {
          std::this_thread::sleep_for(plan_.delay);
          return absl::OkStatus();
        }
        return absl::AbortedError(absl::StrCat("injected crash of rank ", plan_.rank, " during the save of step ",
                                               plan_.step, " (data written, not committed)"));
      });
}

}  // namespace shardlight::simulate
