#include "sharded/checkpoint/async/async_checkpointer.h"

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sharded/agreement.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/checkpoint/roots/checkpoint_root.h"
#include "sharded/checkpoint/save_protocol.h"
#include "sharded/no_throw.h"
#include "sharded/stable_hash.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {

// What the background half reads: a copy of the dict's entries (its
// structure, for the plan and the index; the tensors' bytes are never read
// there), the tensors the snapshot staged, in order, and the step's check.
// The writer makes the dict and the plan from the copy (Plan, off the
// training thread) and writes from the staging area; the plan's entries are
// shape-and-dtype-only meta tensors, so the writer never touches the
// training tensors' bytes.
struct AsyncCheckpointer::WriteJob {
  std::vector<StateDict::Entry> entries;  // moved into `structure` by Plan
  std::vector<StateDict::ValueEntry> values;  // the values (a step, a schedule): copied, moved likewise
  std::vector<at::Tensor> staged;         // TensorsToWrite, as the snapshot staged them
  absl::Status step_ok;
  // This rank's packed snapshot, for the next save's Reserve: set by the
  // training thread once staged, read by the writer after its save (where the
  // writer drained during the snapshot it may still be 0: every slot of the
  // budget exists then anyway).
  std::atomic<int64_t> staged_bytes{0};
  StateDict structure;
  absl::StatusOr<SavePlan> plan = absl::UnknownError("the save was not planned");

  // On the writer's thread.
  void Plan(int rank, int world);
};

namespace {

// The staging memory a snapshot of `tensors` fills.
int64_t BytesToStage(const StagingArea& staging, const std::vector<at::Tensor>& tensors) {
  std::vector<int64_t> bytes;
  bytes.reserve(tensors.size());
  for (const at::Tensor& t : tensors) bytes.push_back(t.numel() * static_cast<int64_t>(t.element_size()));
  return staging.PackedBytes(bytes);
}

// PlanSave of the snapshot's structure, which must name exactly the tensors
// the snapshot staged, with meta tensors in place of the training tensors.
absl::StatusOr<SavePlan> WriterPlan(const StateDict& structure, const std::vector<at::Tensor>& staged, int rank,
                                    int world) {
  SL_ASSIGN_OR_RETURN(SavePlan plan, PlanSave(structure, rank, world));
  if (plan.entries.size() != staged.size()) {
    return absl::InternalError(absl::StrCat("async save: the plan writes ", plan.entries.size(),
                                            " entries but the snapshot staged ", staged.size()));
  }
  for (size_t i = 0; i < staged.size(); ++i) {
    EntryToWrite& e = plan.entries[i];
    if (!e.tensor.is_same(staged[i])) {
      return absl::InternalError(absl::StrCat("async save: entry ", Quote(e.name),
                                              " is not the tensor the snapshot staged in its place"));
    }
    e.tensor = at::empty(e.tensor.sizes(), at::TensorOptions().dtype(e.tensor.scalar_type()).device(at::kMeta));
  }
  return plan;
}

}  // namespace

void AsyncCheckpointer::WriteJob::Plan(int rank, int world) {
  plan = NoThrow([&]() -> absl::StatusOr<SavePlan> {
    for (StateDict::Entry& entry : entries) {
      SL_RETURN_IF_ERROR(structure.Insert(std::move(entry.first), std::move(entry.second)));
    }
    entries.clear();
    for (StateDict::ValueEntry& value : values) {
      SL_RETURN_IF_ERROR(structure.InsertValue(std::move(value.first), std::move(value.second)));
    }
    values.clear();
    SL_RETURN_IF_ERROR(step_ok);
    return WriterPlan(structure, staged, rank, world);
  });
}

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
  const absl::StatusOr<int64_t> bytes = NoThrow([&]() -> absl::StatusOr<int64_t> {
    return BytesToStage(staging_, TensorsToWrite(state_dict.entries(), group_->getRank()));
  });
  if (!bytes.ok()) return;  // Save reports it
  JoinReserver();
  reserver_ = std::thread([this, bytes = *bytes] { staging_.Reserve(bytes); });
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
  // The training thread's part: copy the structure, stage the bytes. The
  // plan (checks, the fingerprint the ranks agree on) is the writer's.
  job->entries = state_dict.entries();
  job->values = state_dict.values();
  if (step < 0) job->step_ok = absl::InvalidArgumentError(absl::StrCat("step ", step, " is negative"));
  absl::Status staged = NoThrow([&]() -> absl::Status {
    job->staged = TensorsToWrite(job->entries, rank);
    return absl::OkStatus();
  });
  current_ = handle;
  writer_ = std::thread([this, handle, job] {
    // The writer starts once the snapshot is taken (or needs room): on ranks
    // that share cores, its planning beside the copy would slow the copy,
    // and the save's first agreement waits for every rank's writer, so no
    // rank writes while another is still taking its snapshot.
    staging_.WaitUntilDraining();
    job->Plan(group_->getRank(), group_->getSize());
    Write(*handle, *job);
  });
  // The snapshot: every byte staged (or, past the budget, written) before
  // training may change it. A failed copy fails the writer, hence the save.
  // Sealed (or aborted) in every case: the writer waits for it.
  if (staged.ok() && job->step_ok.ok()) {
    staged = NoThrow([&]() -> absl::Status { return staging_.StageAll(job->staged); });
    job->staged_bytes = staging_.staged_bytes();
  }
  if (staged.ok()) {
    staging_.Seal();  // a bad step stages nothing: the writer reports it
  } else {
    staging_.Abort(staged);
  }
  return handle;
}

void AsyncCheckpointer::Write(AsyncSaveHandle& handle, const WriteJob& job) {
  SaveStats stats;
  const auto save_one = [&](const std::string& dir) {
    return RunSave(job.structure, job.plan, dir, *group_, options_.save, &staging_, &stats);
  };
  absl::Status status = NoThrow([&]() -> absl::Status {
    if (options_.keep_last == 0) return save_one(location_);
    RootSaveOptions root;
    root.keep_last = options_.keep_last;
    root.save = options_.save;
    return SaveToCheckpointRootWith(location_, handle.step(), *group_, root, save_one);
  });
  // A snapshot still waiting for a slot (the save ended early) gives up.
  staging_.Abort(status.ok() ? absl::CancelledError("the save has ended") : status);
  handle.Finish(std::move(status), stats.bytes_written);
  // Off the training thread: the next save of this size finds its staging
  // memory resident (a no-op once it is).
  if (job.plan.ok()) staging_.Reserve(job.staged_bytes);
}

absl::Status AsyncCheckpointer::Wait() {
  if (current_ == nullptr) return absl::OkStatus();
  const absl::Status status = current_->Wait();
  JoinWriter();
  return status;
}

}  // namespace shardlight::sharded::checkpoint
