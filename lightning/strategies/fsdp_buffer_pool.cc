#include "lightning/strategies/fsdp_buffer_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <c10/util/Exception.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace shardlight::lightning::fsdp_internal {

struct BufferPool::State {
  mutable std::mutex mu;
  bool open = true;  // false once the pool is destroyed: released blocks are unmapped
  std::multimap<size_t, void*> free;  // by page-rounded size
  int64_t mapped = 0;
  int64_t free_bytes = 0;
};

namespace {

size_t PageRounded(size_t bytes) {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

// What a pooled DataPtr's deleter needs: the block and whom to give it back to.
struct Lease {
  std::shared_ptr<BufferPool::State> state;
  void* block;
  size_t size;  // page-rounded
};

// A pooled DataPtr's deleter: the block back to the free list, or unmapped
// when the pool is gone.
void GiveBack(void* ctx) {
  std::unique_ptr<Lease> lease(static_cast<Lease*>(ctx));  // deleted after the lock is released
  {
    std::lock_guard<std::mutex> lock(lease->state->mu);
    if (lease->state->open) {
      lease->state->free.emplace(lease->size, lease->block);
      lease->state->free_bytes += static_cast<int64_t>(lease->size);
      return;
    }
    lease->state->mapped -= static_cast<int64_t>(lease->size);
  }
  munmap(lease->block, lease->size);
}

}  // namespace

BufferPool::BufferPool() : state_(std::make_shared<State>()) {}

BufferPool::~BufferPool() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->open = false;
  }
  ReleaseFree();
}

void BufferPool::ReleaseFree() {
  std::vector<std::pair<size_t, void*>> unmap;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    unmap.assign(state_->free.begin(), state_->free.end());
    state_->free.clear();
    state_->mapped -= state_->free_bytes;
    state_->free_bytes = 0;
  }
  for (const auto& [size, block] : unmap) munmap(block, size);
}

at::DataPtr BufferPool::Take(size_t bytes) {
  const at::Device cpu(at::kCPU);
  if (bytes == 0) return at::DataPtr(nullptr, cpu);
  const size_t size = PageRounded(bytes);
  void* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->free.find(size);
    if (it != state_->free.end()) {
      block = it->second;
      state_->free.erase(it);
      state_->free_bytes -= static_cast<int64_t>(size);
    }
  }
  if (block == nullptr) {
    block = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TORCH_CHECK(block != MAP_FAILED, "fsdp buffer pool: mapping ", size, " bytes failed: ", std::strerror(errno));
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->mapped += static_cast<int64_t>(size);
  }
  return at::DataPtr(block, new Lease{state_, block, size}, &GiveBack, cpu);
}

at::Tensor BufferPool::Empty(at::IntArrayRef sizes, c10::ScalarType dtype) {
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  at::Storage storage(at::Storage::use_byte_size_t(), bytes, Take(bytes), /*allocator=*/nullptr, /*resizable=*/false);
  return at::empty({0}, at::TensorOptions().dtype(dtype)).set_(storage, 0, sizes, c10::contiguous_strides(sizes));
}

int64_t BufferPool::mapped_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->mapped;
}

int64_t BufferPool::free_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->free_bytes;
}

at::Tensor EmptyFrom(BufferPool* pool, at::IntArrayRef sizes, const at::TensorOptions& options) {
  if (pool == nullptr || options.device().type() != at::kCPU) return at::empty(sizes, options);
  return pool->Empty(sizes, c10::typeMetaToScalarType(options.dtype()));
}

}  // namespace shardlight::lightning::fsdp_internal
