#include "lightning/tp/vocab_parallel_embedding.h"

#include "absl/strings/str_cat.h"
#include "lightning/tp/tp_collectives.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::tp {

std::pair<int64_t, int64_t> VocabRange(const TpMesh& tp, int64_t vocab) { return tp.LocalRange(vocab); }

absl::Status CheckVocabFitsTp(const TpMesh& tp, int64_t vocab) {
  if (vocab < tp.tp_size()) {
    return absl::InvalidArgumentError(absl::StrCat("a vocabulary of ", vocab, " cannot be split over ", tp.tp_size(),
                                                   " tensor-parallel ranks (it must have at least one id per rank)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<VocabParallelEmbedding>> VocabParallelEmbedding::Create(const TpMesh& tp,
                                                                                       const EmbeddingOptions& o) {
  if (o.vocab < 1 || o.dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("VocabParallelEmbedding: vocab and dim must be >= 1, not ", o.vocab, " and ", o.dim));
  }
  SL_RETURN_IF_ERROR(CheckVocabFitsTp(tp, o.vocab));
  std::shared_ptr<VocabParallelEmbedding> layer(new VocabParallelEmbedding(tp));
  SL_ASSIGN_OR_RETURN(sharded::mesh::MeshTensor w,
                      MakeParameter(tp, {{o.vocab, o.dim}, 0, ParamInit::kNormal, o.init_std, o.seed}));
  std::tie(layer->start_, layer->local_) = VocabRange(tp, o.vocab);
  SL_RETURN_IF_ERROR(layer->RegisterMeshTensor("weight", std::move(w)));
  return layer;
}

at::Tensor VocabParallelEmbedding::Forward(const at::Tensor& ids) {
  const at::Tensor& w = weight().local();
  if (local_ == 0) {
    // An empty slice (torch.chunk's trailing pieces): contributes zeros, and
    // its (empty) table still joins the graph so its gradient is defined.
    std::vector<int64_t> sizes = ids.sizes().vec();
    sizes.push_back(w.size(1));
    return ReduceFromTp(at::zeros(sizes, w.options()) + w.sum(), tp_.tp_group());
  }
  const at::Tensor mine = (ids >= start_) & (ids < start_ + local_);
  // Ids outside the slice look up row 0 and are zeroed after.
  const at::Tensor local_ids = at::where(mine, ids - start_, at::zeros_like(ids));
  at::Tensor rows = at::embedding(w, local_ids) * mine.unsqueeze(-1).to(w.scalar_type());
  return ReduceFromTp(rows, tp_.tp_group());
}

at::Tensor VocabParallelEmbedding::Logits(const at::Tensor& x) {
  return at::matmul(CopyToTp(x, tp_.tp_group()), weight().local().t());
}

}  // namespace shardlight::lightning::tp
