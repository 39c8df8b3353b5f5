#include "sharded/checkpoint/staging.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/row_major_tiles.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {
namespace {

// Pieces small enough that several fit the budget (the copy of one overlaps
// the write of another), large enough that per-piece costs vanish.
constexpr int64_t kMaxPieceBytes = int64_t{8} << 20;
constexpr int64_t kMinPieceBytes = int64_t{16} << 10;

int64_t PieceBytesFor(int64_t budget) {
  return std::clamp<int64_t>(budget / 4, kMinPieceBytes, kMaxPieceBytes);
}

}  // namespace

StagingArea::StagingArea(int64_t budget_bytes)
    : piece_bytes_(PieceBytesFor(budget_bytes)),
      max_slots_(static_cast<int>(std::max<int64_t>(1, budget_bytes / PieceBytesFor(budget_bytes)))) {
  slots_.reserve(static_cast<size_t>(max_slots_));  // a slot's entry never moves while the writer looks it up
}

int64_t StagingArea::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(slots_.size()) * piece_bytes_;
}

void StagingArea::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  queued_.clear();
  reading_ = -1;
  aborted_ = absl::OkStatus();
  free_.clear();
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) free_.push_back(i);
}

void StagingArea::Abort(const absl::Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.ok()) aborted_ = why.ok() ? absl::CancelledError("staging aborted") : why;
  }
  changed_.notify_all();
}

absl::StatusOr<int> StagingArea::AcquireSlot() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] {
    return !aborted_.ok() || !free_.empty() || static_cast<int>(slots_.size()) < max_slots_;
  });
  if (!aborted_.ok()) return aborted_;
  if (free_.empty()) {
    slots_.emplace_back(new char[static_cast<size_t>(piece_bytes_)]);
    return static_cast<int>(slots_.size()) - 1;
  }
  const int slot = free_.back();
  free_.pop_back();
  return slot;
}

void StagingArea::Push(size_t entry, int slot, int64_t size) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued_.push_back({entry, slot, size});
  }
  changed_.notify_all();
}

absl::Status StagingArea::Stage(size_t entry, const at::Tensor& tensor) {
  const int64_t elem = static_cast<int64_t>(tensor.element_size());
  if (tensor.is_cpu() && tensor.is_contiguous()) {
    const char* p = static_cast<const char*>(tensor.data_ptr());
    const int64_t total = tensor.numel() * elem;
    for (int64_t pos = 0; pos < total; pos += piece_bytes_) {
      SL_ASSIGN_OR_RETURN(const int slot, AcquireSlot());
      const int64_t n = std::min(piece_bytes_, total - pos);
      std::memcpy(slots_[static_cast<size_t>(slot)].get(), p + pos, static_cast<size_t>(n));
      Push(entry, slot, n);
    }
    return absl::OkStatus();
  }
  // Non-contiguous or on a device: row-major tiles, each copied into a slot.
  at::NoGradGuard no_grad;
  return ForEachRowMajorTile(
      tensor.sizes().vec(), piece_bytes_ / elem,
      [&](const std::vector<int64_t>& off, const std::vector<int64_t>& size) -> absl::Status {
        SL_ASSIGN_OR_RETURN(const int slot, AcquireSlot());
        at::Tensor src = tensor;
        for (size_t d = 0; d < off.size(); ++d) src = src.narrow(static_cast<int64_t>(d), off[d], size[d]);
        at::Tensor staged = at::from_blob(slots_[static_cast<size_t>(slot)].get(), size,
                                          at::TensorOptions().dtype(tensor.scalar_type()));
        staged.copy_(src);
        Push(entry, slot, staged.numel() * elem);
        return absl::OkStatus();
      });
}

absl::StatusOr<EntryByteSource::Piece> StagingArea::Next(size_t entry) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return !aborted_.ok() || !queued_.empty(); });
  if (!aborted_.ok()) return aborted_;
  const Queued q = queued_.front();
  if (q.entry != entry) {
    return absl::InternalError(absl::StrCat("staging: the writer wants entry ", entry, " but entry ", q.entry, " is next"));
  }
  queued_.pop_front();
  reading_ = q.slot;
  return Piece{slots_[static_cast<size_t>(q.slot)].get(), q.size};
}

void StagingArea::Release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reading_ >= 0) free_.push_back(reading_);
    reading_ = -1;
  }
  changed_.notify_all();
}

}  // namespace shardlight::sharded::checkpoint
