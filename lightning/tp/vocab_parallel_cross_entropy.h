// VocabParallelCrossEntropy: the cross-entropy of logits whose vocabulary
// (last) dim is split over the TP group (a column-parallel head's output),
// computed without gathering the full logits: per token, the TP group agrees
// on the maximum logit (allreduce MAX), then sums the exponentials and the
// target's logit (one allreduce SUM of both), so each rank moves 3 numbers per
// token instead of its slice of the vocabulary.
//
// Backward needs no communication: d loss_i / d logit_ij = softmax_ij -
// [j == target_i], and each rank holds the softmax of its own columns.
#ifndef SHARDLIGHT_LIGHTNING_TP_VOCAB_PARALLEL_CROSS_ENTROPY_H_
#define SHARDLIGHT_LIGHTNING_TP_VOCAB_PARALLEL_CROSS_ENTROPY_H_

#include <ATen/ATen.h>

#include <cstdint>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::lightning::tp {

// local_logits [N, local vocab] (this rank's columns [vocab_start,
// vocab_start + local vocab) of the logits), targets [N] int64 in [0, vocab):
// the per-token loss [N], the same on every TP rank. Collective over
// tp_group; throws like tp_collectives.h on a failed collective.
at::Tensor VocabParallelCrossEntropy(const at::Tensor& local_logits, const at::Tensor& targets, int64_t vocab_start,
                                     c10d::ProcessGroup& tp_group);

}  // namespace shardlight::lightning::tp

#endif  // SHARDLIGHT_LIGHTNING_TP_VOCAB_PARALLEL_CROSS_ENTROPY_H_
