// Writes DistributedSampler's epoch orders (sizes 1..200, seeds, epochs) as
// JSON lines {"size", "seed", "epoch", "order"} to argv[1], for
// torch_randperm_test to compare with the real torch.randperm.
#include <fstream>
#include <iostream>

#include "absl/strings/str_join.h"
#include "lightning/data/distributed_sampler.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: torch_randperm_cases OUT\n";
    return 2;
  }
  std::ofstream out(argv[1]);
  for (int64_t size : {1, 2, 23, 200, 5000}) {
    for (uint64_t seed : {0, 11, 123456789}) {
      for (int64_t epoch : {0, 1, 7}) {
        auto sampler = shardlight::lightning::data::DistributedSampler::Create({size, 1, 1, 0, true, seed});
        if (!sampler.ok()) return 1;
        const at::Tensor order = sampler->EpochOrder(epoch);
        const int64_t* p = order.data_ptr<int64_t>();
        out << "{\"size\": " << size << ", \"seed\": " << seed << ", \"epoch\": " << epoch << ", \"order\": ["
            << absl::StrJoin(p, p + order.numel(), ", ") << "]}\n";
      }
    }
  }
  return out.good() ? 0 : 1;
}
