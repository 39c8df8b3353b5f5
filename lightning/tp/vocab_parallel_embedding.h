// VocabParallelEmbedding: an embedding table [vocab, dim] whose rows are split
// over the TP dim of a TpMesh (mesh member "weight", Shard(0), torch.chunk:
// uneven and empty slices allowed). Each TP rank looks up the ids in its row
// range, writes zeros for the others, and the TP group sums the results, so
// every TP rank gets the full [..., dim] embedding. Backward: each rank's
// table slice gets the gradient of its own rows only.
//
// The table can also serve as a tied output head: Logits(x) gives this rank's
// slice of x W^T (the vocabulary columns it owns), for
// VocabParallelCrossEntropy.
#ifndef SHARDLIGHT_LIGHTNING_TP_VOCAB_PARALLEL_EMBEDDING_H_
#define SHARDLIGHT_LIGHTNING_TP_VOCAB_PARALLEL_EMBEDDING_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "lightning/sharded_module.h"
#include "lightning/tp/tp_mesh.h"

namespace shardlight::lightning::tp {

struct EmbeddingOptions {
  int64_t vocab = 0;
  int64_t dim = 0;
  double init_std = 0.02;
  uint64_t seed = 0;
};

class VocabParallelEmbedding : public ShardedModule {
 public:
  // Collective. InvalidArgument (on every rank: the sizes are the same
  // everywhere) when vocab or dim < 1 or the vocabulary is smaller than the
  // TP size (a rank would own no row).
  static absl::StatusOr<std::shared_ptr<VocabParallelEmbedding>> Create(const TpMesh& tp,
                                                                        const EmbeddingOptions& options);
  // ids (int64, any shape, values in [0, vocab)) -> [..., dim].
  at::Tensor Forward(const at::Tensor& ids);
  // x [..., dim] -> [..., local vocab] (tied head).
  at::Tensor Logits(const at::Tensor& x);
  sharded::mesh::MeshTensor& weight() { return *mesh_tensor("weight"); }
  int64_t vocab_start() const { return start_; }
  int64_t local_vocab() const { return local_; }

 private:
  explicit VocabParallelEmbedding(TpMesh tp) : ShardedModule("VocabParallelEmbedding"), tp_(std::move(tp)) {}
  TpMesh tp_;
  int64_t start_ = 0, local_ = 0;
};

// The first vocabulary id of this TP rank's slice and its length, for a
// vocabulary of `vocab` split as torch.chunk splits it.
std::pair<int64_t, int64_t> VocabRange(const TpMesh& tp, int64_t vocab);

// InvalidArgument when `vocab` < TP size.
absl::Status CheckVocabFitsTp(const TpMesh& tp, int64_t vocab);

}  // namespace shardlight::lightning::tp

#endif  // SHARDLIGHT_LIGHTNING_TP_VOCAB_PARALLEL_EMBEDDING_H_
