// FSDP's transient buffers (a unit's gathered slots and full parameters, the
// flat gradient buffer it reduce-scatters) come and go once per unit per
// step, at the same few sizes. Through glibc's malloc they fragment the heap:
// its dynamic mmap threshold rises to the first freed block's size, after
// which every buffer below 32 MiB comes from the heap, which keeps what it
// freed (measured: 1.12-1.24x PyTorch FSDP2's peak RSS at W=4, all of it heap
// kept, none live). A BufferPool maps its blocks itself (anonymous mmap,
// outside malloc's heap and threshold) and reuses a freed block for the next
// request of its size: inside a step each size is mapped once, whichever
// unit asks, and what the pool holds is at most the largest set of buffers
// live at once; ReleaseFree (FSDP calls it when a step's gradients are
// reduced) gives the free blocks back to the system. Its blocks are unmapped
// when the pool and every tensor using them are gone.
// Thread-safe (a storage may be released on any thread).
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_BUFFER_POOL_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_BUFFER_POOL_H_

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace shardlight::lightning::fsdp_internal {

class BufferPool {
 public:
  BufferPool();
  ~BufferPool();  // unmaps the free blocks; blocks still in use are unmapped when released
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // `bytes` of CPU memory (uninitialised, page-aligned): a free block of the
  // same page-rounded size, else a new mapping. Releasing the DataPtr returns
  // the block. Zero bytes: a null DataPtr. Throws c10::Error naming the size
  // when the system refuses the mapping (as at::empty does when out of memory).
  at::DataPtr Take(size_t bytes);

  // A contiguous CPU tensor of `sizes` and `dtype` on a pooled block (uninitialised).
  at::Tensor Empty(at::IntArrayRef sizes, c10::ScalarType dtype);

  // Unmaps the free blocks (FSDP: at the end of each step, so that between
  // steps a rank holds no transient buffer; the next step maps its set once).
  void ReleaseFree();

  // Bytes of the blocks mapped now: in use and free.
  int64_t mapped_bytes() const;
  // Bytes of the free blocks.
  int64_t free_bytes() const;

  struct State;  // the blocks; shared with the leases of blocks in use

 private:
  std::shared_ptr<State> state_;
};

// `sizes` of `options` (uninitialised): from `pool` when it is set and the
// options are on the CPU, else at::empty.
at::Tensor EmptyFrom(BufferPool* pool, at::IntArrayRef sizes, const at::TensorOptions& options);

}  // namespace shardlight::lightning::fsdp_internal

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_BUFFER_POOL_H_
