#include "sharded/checkpoint/async/async_checkpointer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "sharded/agreement.h"
#include "sharded/checkpoint/roots/checkpoint_root.h"
#include "sharded/checkpoint/save_protocol.h"
#include "sharded/no_throw.h"
#include "sharded/stable_hash.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {

// What the background half reads: the dict's structure (for the index; its
// tensors' bytes are never read there) and a plan whose entries are
// shape-and-dtype-only meta tensors, so the writer never touches the
// training tensors.
struct AsyncCheckpointer::WriteJob {
  StateDict structure;
  absl::StatusOr<SavePlan> plan;
  int64_t staged_bytes = 0;  // this rank's, for the next save's Reserve
};

namespace {

// The staging memory a snapshot of `plan` fills.
int64_t BytesToStage(const StagingArea& staging, const SavePlan& plan) {
  std::vector<int64_t> bytes;
  bytes.reserve(plan.entries.size());
  for (const EntryToWrite& e : plan.entries) {
    if (e.tensor.defined()) bytes.push_back(e.tensor.numel() * static_cast<int64_t>(e.tensor.element_size()));
  }
  return staging.PackedBytes(bytes);
}

absl::StatusOr<SavePlan> WithoutBytes(const absl::StatusOr<SavePlan>& plan) {
  if (!plan.ok()) return plan.status();
  SavePlan out = *plan;
  for (EntryToWrite& e : out.entries) {
    e.tensor = at::empty(e.tensor.sizes(), at::TensorOptions().dtype(e.tensor.scalar_type()).device(at::kMeta));
  }
  return out;
}

}  // namespace

bool AsyncSaveHandle::Done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

absl::Status AsyncSaveHandle::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  finished_.wait(lock, [&] { return done_; });
  reported_ = true;
  return status_;
}

int64_t AsyncSaveHandle::bytes_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_written_;
}

bool AsyncSaveHandle::reported() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reported_;
}

void AsyncSaveHandle::Finish(absl::Status status, int64_t bytes_written) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(status);
    bytes_written_ = bytes_written;
    done_ = true;
  }
  finished_.notify_all();
}

absl::StatusOr<std::unique_ptr<AsyncCheckpointer>> AsyncCheckpointer::Create(
    std::string location, c10::intrusive_ptr<c10d::ProcessGroup> group, AsyncCheckpointOptions options) {
  if (!group) return absl::InvalidArgumentError("an AsyncCheckpointer needs its own process group; got none");
  absl::Status mine;
  if (location.empty()) {
    mine = absl::InvalidArgumentError("the checkpoint location is empty");
  } else if (options.keep_last < 0) {
    mine = absl::InvalidArgumentError(absl::StrCat("keep_last is ", options.keep_last, "; want >= 0"));
  } else if (options.staging_budget_bytes < StagingArea::kMinBudgetBytes) {
    mine = absl::InvalidArgumentError(absl::StrCat("staging_budget_bytes is ", options.staging_budget_bytes,
                                                   "; want >= ", StagingArea::kMinBudgetBytes));
  }
  const absl::StatusOr<uint64_t> fingerprint =
      mine.ok() ? absl::StatusOr<uint64_t>(StableHash(absl::StrCat(location, "|", options.keep_last)))
                : absl::StatusOr<uint64_t>(mine);
  SL_RETURN_IF_ERROR(AgreeOn(*group, fingerprint,
                             {absl::StrCat("async checkpointer for '", location, "'"), "location and keep_last"}));
  return std::unique_ptr<AsyncCheckpointer>(new AsyncCheckpointer(std::move(location), std::move(group), std::move(options)));
}

AsyncCheckpointer::AsyncCheckpointer(std::string location, c10::intrusive_ptr<c10d::ProcessGroup> group,
                                     AsyncCheckpointOptions options)
    : location_(std::move(location)),
      group_(std::move(group)),
      options_(std::move(options)),
      staging_(options_.staging_budget_bytes) {}

AsyncCheckpointer::~AsyncCheckpointer() {
  JoinWriter();
  JoinReserver();
}

void AsyncCheckpointer::JoinWriter() {
  if (writer_.joinable()) writer_.join();
}

void AsyncCheckpointer::JoinReserver() {
  if (reserver_.joinable()) reserver_.join();
}

void AsyncCheckpointer::Reserve(const StateDict& state_dict) {
  const absl::StatusOr<SavePlan> plan =
      NoThrow([&] { return PlanSave(state_dict, group_->getRank(), group_->getSize()); });
  if (!plan.ok()) return;  // Save reports it
  JoinReserver();
  reserver_ = std::thread([this, bytes = BytesToStage(staging_, *plan)] { staging_.Reserve(bytes); });
}

std::string AsyncCheckpointer::DirForStep(int64_t step) const {
  return options_.keep_last > 0 ? JoinPath(location_, StepDirName(step)) : location_;
}

absl::StatusOr<std::shared_ptr<AsyncSaveHandle>> AsyncCheckpointer::Save(const StateDict& state_dict, int64_t step) {
  // One save in flight: the previous one ends first; an unreported failure
  // is reported here, and nothing new starts.
  if (current_ != nullptr) {
    const bool reported = current_->reported();
    const absl::Status previous = current_->Wait();
    JoinWriter();
    if (!previous.ok() && !reported) return previous;
  }
  const int rank = group_->getRank();
  staging_.Reset();
  auto handle = std::make_shared<AsyncSaveHandle>(step, DirForStep(step));
  auto job = std::make_shared<WriteJob>();
  job->structure = state_dict;
  absl::StatusOr<SavePlan> plan = NoThrow([&] { return PlanSave(state_dict, rank, group_->getSize()); });
  if (plan.ok() && step < 0) plan = absl::InvalidArgumentError(absl::StrCat("step ", step, " is negative"));
  job->plan = NoThrow([&] { return WithoutBytes(plan); });
  if (plan.ok()) job->staged_bytes = BytesToStage(staging_, *plan);
  current_ = handle;
  writer_ = std::thread([this, handle, job] { Write(*handle, *job); });
  // The snapshot: every byte staged (or, past the budget, written) before
  // training may change it. A failed copy fails the writer, hence the save.
  // Sealed (or aborted) in every case: the writer waits for it.
  absl::Status staged = absl::OkStatus();
  if (plan.ok() && job->plan.ok()) {
    staged = NoThrow([&]() -> absl::Status {
      for (size_t i = 0; i < plan->entries.size(); ++i) SL_RETURN_IF_ERROR(staging_.Stage(i, plan->entries[i].tensor));
      return absl::OkStatus();
    });
  }
  if (staged.ok()) {
    staging_.Seal();  // a failed plan stages nothing: the writer reports it
  } else {
    staging_.Abort(staged);
  }
  return handle;
}

void AsyncCheckpointer::Write(AsyncSaveHandle& handle, const WriteJob& job) {
  // The save's first agreement waits for every rank's writer, so no rank
  // writes while another is still taking its snapshot (ranks that share
  // cores would slow each other's copy), unless a snapshot needs room.
  staging_.WaitUntilDraining();
  SaveStats stats;
  const auto save_one = [&](const std::string& dir) {
    return RunSave(job.structure, job.plan, dir, *group_, options_.save, &staging_, &stats);
  };
  absl::Status status = NoThrow([&]() -> absl::Status {
    if (options_.keep_last == 0) return save_one(location_);
    return SaveToCheckpointRootWith(location_, handle.step(), *group_, {options_.keep_last, options_.save}, save_one);
  });
  // A snapshot still waiting for a slot (the save ended early) gives up.
  staging_.Abort(status.ok() ? absl::CancelledError("the save has ended") : status);
  handle.Finish(std::move(status), stats.bytes_written);
  // Off the training thread: the next save of this size finds its staging
  // memory resident (a no-op once it is).
  staging_.Reserve(job.staged_bytes);
}

absl::Status AsyncCheckpointer::Wait() {
  if (current_ == nullptr) return absl::OkStatus();
  const absl::Status status = current_->Wait();
  JoinWriter();
  return status;
}

}  // namespace shardlight::sharded::checkpoint
