// Loads a PyTorch distributed checkpoint (written by real torch.distributed.
// checkpoint) with LoadCheckpoint on W' simulated ranks, for each W' given,
// and checks every tensor bit-equal to the full tensors of a reference
// torch.save file written by the same Python job. Tensors of dtypes a
// ShardedTensor holds load row-sharded over the W' ranks (dims >= 1; every
// other one column-sharded when it has two dims), the rest dense. Then the
// checkpoint's non-tensor entries, one "key = repr" line each, must equal
// the expected file's lines (Python's repr of each value); "-" skips them
// (a checkpoint in shardlight's own format).
//   dcp_load_check DIR REFERENCE.pt W1,W2,... EXPECTED_VALUES|-
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/interop/dcp/dcp_checkpoint.h"
#include "sharded/checkpoint/interop/pytorch/torch_file.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "sharded/factories.h"
#include "sharded/shard_metadata.h"
#include "sharded/state_dict.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace {

namespace cp = shardlight::sharded::checkpoint;
namespace sh = shardlight::sharded;

struct Reference {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
};

absl::StatusOr<Reference> ReadReference(const std::string& path) {
  SL_ASSIGN_OR_RETURN(auto file, cp::pytorch::TorchFile::Open(path));
  SL_ASSIGN_OR_RETURN(const cp::pytorch::Selection sel, cp::pytorch::SelectEntries(file->graph(), {}));
  Reference ref;
  for (const auto& t : sel.tensors) {
    SL_ASSIGN_OR_RETURN(at::Tensor v, file->Tensor(t.node, t.key));
    ref.tensors.emplace_back(t.key, v.contiguous().clone());
  }
  return ref;
}

bool BitEqual(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const at::Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
}

absl::Status LoadAt(const std::string& dir, const Reference& ref, int world) {
  shardlight::simulate::SimulatedCluster cluster(world);
  return cluster.Run([&](shardlight::simulate::RankContext& ctx) -> absl::Status {
    sh::StateDict fill;
    int i = 0;
    for (const auto& [key, full] : ref.tensors) {
      const bool shardable = full.dim() >= 1 && sh::IsSupportedDtype(full.scalar_type());
      if (shardable) {
        const int64_t dim = (full.dim() == 2 && i++ % 2 == 1) ? 1 : 0;
        SL_ASSIGN_OR_RETURN(sh::ShardedTensor st,
                            sh::Zeros(sh::ChunkShardingSpec::OnRanks(dim, world), full.sizes().vec(),
                                      {full.scalar_type(), false}, ctx.pg));
        SL_RETURN_IF_ERROR(fill.Insert(key, std::move(st)));
      } else {
        SL_RETURN_IF_ERROR(fill.Insert(key, at::zeros(full.sizes(), full.options())));
      }
    }
    cp::LoadOptions options;
    options.strict = true;
    cp::LoadStats stats;
    SL_RETURN_IF_ERROR(cp::LoadCheckpoint(fill, dir, *ctx.pg, options, &stats));
    for (const auto& [key, full] : ref.tensors) {
      const sh::StateValue* v = fill.Find(key);
      at::Tensor got;
      if (const auto* st = std::get_if<sh::ShardedTensor>(v)) {
        SL_ASSIGN_OR_RETURN(got, st->FullTensor());
      } else {
        got = std::get<at::Tensor>(*v);
      }
      if (!BitEqual(got, full)) {
        return absl::InternalError(absl::StrCat("W'=", world, " rank ", ctx.rank, ": key '", key,
                                                "' differs from the reference"));
      }
    }
    if (ctx.rank == 0) {
      std::cout << "dcp_load_check: W'=" << world << ": " << ref.tensors.size() << " tensors bit-equal; rank 0 read "
                << stats.data_bytes_read << " data bytes in " << stats.files_opened << " files\n";
    }
    return absl::OkStatus();
  });
}

absl::Status CheckValues(const std::string& dir, const std::string& expected_path) {
  SL_ASSIGN_OR_RETURN(const cp::dcp::DcpMetadata md, cp::dcp::ReadDcpMetadata(dir, cp::DefaultStorage()));
  SL_ASSIGN_OR_RETURN(const auto values, cp::dcp::ReadDcpValues(dir, cp::DefaultStorage(), md));
  std::ifstream in(expected_path);
  std::vector<std::string> want;
  for (std::string line; std::getline(in, line);) want.push_back(line);
  std::vector<std::string> got;
  for (const auto& v : values) got.push_back(absl::StrCat(v.key, " = ", v.repr));
  if (got != want) {
    std::string msg = "non-tensor entries differ:";
    for (const auto& g : got) absl::StrAppend(&msg, "\n  got  ", g);
    for (const auto& w : want) absl::StrAppend(&msg, "\n  want ", w);
    return absl::InternalError(msg);
  }
  std::cout << "dcp_load_check: " << got.size() << " non-tensor entries equal to Python's repr\n";
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: dcp_load_check DCP_DIR REFERENCE.pt W1,W2,... EXPECTED_VALUES\n";
    return 2;
  }
  auto ref = ReadReference(argv[2]);
  if (!ref.ok()) {
    std::cerr << "dcp_load_check: reference: " << ref.status() << "\n";
    return 1;
  }
  for (absl::string_view w : absl::StrSplit(argv[3], ',')) {
    int world = 0;
    if (!absl::SimpleAtoi(w, &world) || world < 1) {
      std::cerr << "dcp_load_check: bad world size '" << w << "'\n";
      return 2;
    }
    if (absl::Status s = LoadAt(argv[1], *ref, world); !s.ok()) {
      std::cerr << "dcp_load_check: " << s << "\n";
      return 1;
    }
  }
  if (std::string(argv[4]) == "-") return 0;  // no values to check
  if (absl::Status s = CheckValues(argv[1], argv[4]); !s.ok()) {
    std::cerr << "dcp_load_check: " << s << "\n";
    return 1;
  }
  return 0;
}
