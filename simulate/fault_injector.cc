#include "simulate/fault_injector.h"

#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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
        if (plan_.kind != FaultKind::kSaveCrash || rank_ != plan_.rank || last_step_ != plan_.step ||
            !data_file_sync) {
          return absl::OkStatus();
        }
        return absl::AbortedError(absl::StrCat("injected crash of rank ", plan_.rank, " during the save of step ",
                                               plan_.step, " (data written, not committed)"));
      });
}

}  // namespace shardlight::simulate
