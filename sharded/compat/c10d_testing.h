// For test doubles of c10d::ProcessGroup (a group that forwards to a real one
// and refuses or corrupts one collective): the name of the virtual method of
// the uneven all-to-all in this LibTorch, which the double overrides. Pair it
// with compat::AllToAllSingle to forward. And what a test double of a
// c10d::Store must add. Tests only.
#ifndef SHARDLIGHT_SHARDED_COMPAT_C10D_TESTING_H_
#define SHARDLIGHT_SHARDED_COMPAT_C10D_TESTING_H_

#include <torch/csrc/api/include/torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#define SHARDLIGHT_C10D_ALL_TO_ALL_SINGLE all_to_all_single
#else
#define SHARDLIGHT_C10D_ALL_TO_ALL_SINGLE alltoall_base
#endif

// For test doubles of c10d::Store: LibTorch 2.x stores must clone themselves
// (a pure virtual there, absent in 1.13); a double returns itself. Put it in
// the double's public section.
#if TORCH_VERSION_MAJOR >= 2
#define SHARDLIGHT_C10D_STORE_CLONE \
  c10::intrusive_ptr<c10d::Store> clone() override { return c10::intrusive_ptr<c10d::Store>::reclaim_copy(this); }
#else
#define SHARDLIGHT_C10D_STORE_CLONE
#endif

#endif  // SHARDLIGHT_SHARDED_COMPAT_C10D_TESTING_H_
