#include "sharded/checkpoint/async/staging.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/format/row_major_tiles.h"
#include "sharded/status_macros.h"

namespace shardlight::sharded::checkpoint {
namespace {

// Pieces small enough that several fit the budget (the copy of one overlaps
// the write of another), large enough that per-piece costs vanish.
constexpr int64_t kMaxPieceBytes = int64_t{8} << 20;
constexpr int64_t kMinPieceBytes = int64_t{16} << 10;
// Where a piece may start in a slot (a tile copied in place is typed memory).
constexpr int64_t kAlign = 64;

int64_t PieceBytesFor(int64_t budget) {
  return std::clamp<int64_t>(budget / 4, kMinPieceBytes, kMaxPieceBytes) / kAlign * kAlign;
}

int64_t AlignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Copies a piece into a slot (`to` is kAlign-aligned) without reading the
// slot's lines first: on x86-64, non-temporal stores (SSE2, in every x86-64
// CPU), then a fence, so the writer, which learns of the piece through the
// area's mutex, sees every byte. A slot is cold when a snapshot fills it, and
// ordinary stores would read each line before writing it; glibc's memcpy
// streams only copies above a large threshold (240 MiB on the project's VM),
// far above a piece. Measured there: 512 MiB staged in 8 MiB pieces 28 ms
// with these stores, 48 ms with memcpy (one memcpy of all 512 MiB: 44 ms).
void CopyToSlot(char* to, const char* from, size_t n) {
#if defined(__x86_64__)
  // Streaming stores need 16-byte alignment; pieces start kAlign-aligned,
  // so this is only a guard.
  if (reinterpret_cast<uintptr_t>(to) % 16 != 0) {
    std::memcpy(to, from, n);
    return;
  }
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + i + 48), d);
  }
  if (i < n) std::memcpy(to + i, from + i, n - i);
  _mm_sfence();
#else
  std::memcpy(to, from, n);
#endif
}

// Lookahead for StageAll: a tensor's TensorImpl, then its StorageImpl, pulled
// into the cache before Stage reads them. With many small tensors those
// reads, not the bytes, are most of a snapshot (each misses the cache once
// the state outgrows it). Prefetches never fault, so a tensor with no storage
// is harmless here.
constexpr size_t kHeaderLookahead = 16;
constexpr size_t kStorageLookahead = 8;

void PrefetchImpl(const at::Tensor& t) {
  const char* impl = reinterpret_cast<const char*>(t.unsafeGetTensorImpl());
  for (int line = 0; line < 3; ++line) __builtin_prefetch(impl + 64 * line);
}

void PrefetchStorage(const at::Tensor& t) {
  if (!t.defined()) return;
  __builtin_prefetch(t.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl());
}

}  // namespace

StagingArea::StagingArea(int64_t budget_bytes)
    : piece_bytes_(PieceBytesFor(budget_bytes)),
      max_slots_(static_cast<int>(std::max<int64_t>(1, budget_bytes / PieceBytesFor(budget_bytes)))) {
  slots_.reserve(static_cast<size_t>(max_slots_));  // a slot's entry never moves while the writer looks it up
}

void StagingArea::FreeMemory::operator()(char* p) const { std::free(p); }

std::unique_ptr<char, StagingArea::FreeMemory> StagingArea::NewSlotMemory() const {
  // piece_bytes_ is a multiple of kAlign, as aligned_alloc wants.
  char* p = static_cast<char*>(std::aligned_alloc(kAlign, static_cast<size_t>(piece_bytes_)));
  if (p == nullptr) throw std::bad_alloc();
  return std::unique_ptr<char, FreeMemory>(p);
}

int64_t StagingArea::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(slots_.size()) * piece_bytes_;
}

int64_t StagingArea::PackedBytes(const std::vector<int64_t>& entry_bytes) const {
  // As Stage fills: pieces packed, each 64-byte aligned, none across a slot end.
  int64_t slots = 0;
  int64_t pos = piece_bytes_;  // no slot yet
  for (int64_t bytes : entry_bytes) {
    while (bytes > 0) {
      if (pos >= piece_bytes_) ++slots, pos = 0;
      const int64_t n = std::min(bytes, piece_bytes_ - pos);
      bytes -= n;
      pos = AlignUp(pos + n);
    }
  }
  return slots * piece_bytes_ - (slots > 0 ? piece_bytes_ - std::min(pos, piece_bytes_) : 0);
}

void StagingArea::Reserve(int64_t bytes) {
  const int64_t want = std::min<int64_t>(max_slots_, (std::max<int64_t>(bytes, 0) + piece_bytes_ - 1) / piece_bytes_);
  int64_t have = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    have = static_cast<int64_t>(slots_.size());
  }
  for (int64_t i = have; i < want; ++i) {
    // Outside the lock: the page faults are the slow part.
    std::unique_ptr<char, FreeMemory> memory = NewSlotMemory();
    std::memset(memory.get(), 0, static_cast<size_t>(std::min(piece_bytes_, bytes - i * piece_bytes_)));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (static_cast<int64_t>(slots_.size()) >= want) return;  // a save allocated the rest meanwhile
      slots_.push_back({std::move(memory), 0});
      free_.push_back(static_cast<int>(slots_.size()) - 1);
    }
    changed_.notify_all();
  }
}

void StagingArea::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  queued_.clear();
  reading_ = -1;
  aborted_ = absl::OkStatus();
  free_.clear();
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    slots_[static_cast<size_t>(i)].holds = 0;
    free_.push_back(i);
  }
  fill_slot_ = -1;
  fill_pos_ = 0;
  slots_filled_ = 0;
  draining_ = false;
}

int64_t StagingArea::staged_bytes() const {
  return slots_filled_ == 0 ? 0 : (slots_filled_ - 1) * piece_bytes_ + fill_pos_;
}

void StagingArea::Seal() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
  }
  changed_.notify_all();
}

void StagingArea::WaitUntilDraining() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return !aborted_.ok() || draining_; });
}

void StagingArea::Abort(const absl::Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.ok()) aborted_ = why.ok() ? absl::CancelledError("staging aborted") : why;
  }
  changed_.notify_all();
}

void StagingArea::DropHold(int slot) {
  if (--slots_[static_cast<size_t>(slot)].holds == 0) free_.push_back(slot);
}

absl::Status StagingArea::MakeRoom(int64_t bytes) {
  if (fill_slot_ >= 0 && piece_bytes_ - fill_pos_ >= bytes) return absl::OkStatus();
  std::unique_lock<std::mutex> lock(mu_);
  if (fill_slot_ >= 0) DropHold(fill_slot_);
  fill_slot_ = -1;
  const auto has_room = [&] {
    return !aborted_.ok() || !free_.empty() || static_cast<int>(slots_.size()) < max_slots_;
  };
  if (!has_room()) {
    draining_ = true;  // from now on: the writer makes the room
    changed_.notify_all();
    changed_.wait(lock, has_room);
  }
  SL_RETURN_IF_ERROR(aborted_);
  if (free_.empty()) {
    slots_.push_back({NewSlotMemory(), 0});
    fill_slot_ = static_cast<int>(slots_.size()) - 1;
  } else {
    fill_slot_ = free_.back();
    free_.pop_back();
  }
  slots_[static_cast<size_t>(fill_slot_)].holds = 1;  // the producer's
  fill_pos_ = 0;
  ++slots_filled_;
  return absl::OkStatus();
}

void StagingArea::Push(size_t entry, int64_t size) {
  bool draining = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++slots_[static_cast<size_t>(fill_slot_)].holds;
    queued_.push_back({entry, fill_slot_, fill_pos_, size});
    draining = draining_;
  }
  fill_pos_ = AlignUp(fill_pos_ + size);
  // Only a draining writer waits for queued pieces (Next); before that a
  // wake-up per piece would cost the snapshot a futex call and the writer a
  // context switch for every small tensor.
  if (draining) changed_.notify_all();
}

absl::Status StagingArea::Stage(size_t entry, const at::Tensor& tensor) {
  const int64_t elem = static_cast<int64_t>(tensor.element_size());
  if (tensor.is_cpu() && tensor.is_contiguous()) {
    const char* p = static_cast<const char*>(tensor.data_ptr());
    const int64_t total = tensor.numel() * elem;
    for (int64_t pos = 0; pos < total;) {
      SL_RETURN_IF_ERROR(MakeRoom(std::min<int64_t>(kAlign, total - pos)));
      // The slot's memory never moves, and only the producer writes there.
      char* to = slots_[static_cast<size_t>(fill_slot_)].memory.get() + fill_pos_;
      const int64_t n = std::min(piece_bytes_ - fill_pos_, total - pos);
      CopyToSlot(to, p + pos, static_cast<size_t>(n));
      Push(entry, n);
      pos += n;
    }
    return absl::OkStatus();
  }
  // Non-contiguous or on a device: row-major tiles, each copied in place.
  at::NoGradGuard no_grad;
  return ForEachRowMajorTile(
      tensor.sizes().vec(), piece_bytes_ / elem,
      [&](const std::vector<int64_t>& off, const std::vector<int64_t>& size) -> absl::Status {
        int64_t bytes = elem;
        for (int64_t n : size) bytes *= n;
        SL_RETURN_IF_ERROR(MakeRoom(bytes));
        at::Tensor src = tensor;
        for (size_t d = 0; d < off.size(); ++d) src = src.narrow(static_cast<int64_t>(d), off[d], size[d]);
        at::Tensor staged = at::from_blob(slots_[static_cast<size_t>(fill_slot_)].memory.get() + fill_pos_, size,
                                          at::TensorOptions().dtype(tensor.scalar_type()));
        staged.copy_(src);
        Push(entry, bytes);
        return absl::OkStatus();
      });
}

absl::Status StagingArea::StageAll(const std::vector<at::Tensor>& tensors) {
  const size_t n = tensors.size();
  for (size_t i = 0; i < std::min(n, kHeaderLookahead); ++i) PrefetchImpl(tensors[i]);
  for (size_t i = 0; i < n; ++i) {
    if (i + kHeaderLookahead < n) PrefetchImpl(tensors[i + kHeaderLookahead]);
    if (i + kStorageLookahead < n) PrefetchStorage(tensors[i + kStorageLookahead]);
    SL_RETURN_IF_ERROR(Stage(i, tensors[i]));
  }
  return absl::OkStatus();
}

absl::StatusOr<EntryByteSource::Piece> StagingArea::Next(size_t entry) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return !aborted_.ok() || (!queued_.empty() && draining_); });
  SL_RETURN_IF_ERROR(aborted_);
  const Queued q = queued_.front();
  if (q.entry != entry) {
    return absl::InternalError(absl::StrCat("staging: the writer wants entry ", entry, " but entry ", q.entry, " is next"));
  }
  queued_.pop_front();
  reading_ = q.slot;
  return Piece{slots_[static_cast<size_t>(q.slot)].memory.get() + q.offset, q.size};
}

void StagingArea::Release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reading_ >= 0) DropHold(reading_);
    reading_ = -1;
  }
  changed_.notify_all();
}

}  // namespace shardlight::sharded::checkpoint
