// InitDistributed with real TCPStores: each "process" is a thread here, but
// every byte goes through a TCPStore on a real port and Gloo over TCP, as it
// does across processes (tests/real_process_test.sh runs real processes).
#include "lightning/cluster/distributed.h"
#include "lightning/cluster/free_port.h"

#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sharded/collectives.h"
#include <ATen/ATen.h>

namespace shardlight::lightning::cluster {
namespace {

using ::testing::HasSubstr;

ProcessPlacement Place(int rank, int w, int port) {
  ProcessPlacement p;
  p.launcher = "test";
  p.rank = rank;
  p.world_size = w;
  p.master_addr = "127.0.0.1";
  p.master_port = port;
  return p;
}

TEST(Distributed, RanksJoinAndAllreduce) {
  for (int w : {1, 2, 3, 5}) {
    const int port = FreePort();
    std::vector<absl::Status> results(w);
    std::vector<float> sums(w, -1);
    std::vector<std::thread> threads;
    for (int r = 0; r < w; ++r) {
      threads.emplace_back([&, r] {
        DistributedOptions o;
        o.rendezvous_timeout = std::chrono::seconds(20);
        o.collective_timeout = std::chrono::seconds(20);
        auto ctx = InitDistributed(Place(r, w, port), o);
        if (!ctx.ok()) {
          results[r] = ctx.status();
          return;
        }
        std::vector<at::Tensor> t = {at::full({4}, static_cast<float>(r + 1))};
        results[r] = sharded::RunCollective(*(*ctx)->pg(), "allreduce", [&] { return (*ctx)->pg()->allreduce(t); });
        sums[r] = t[0][3].item<float>();
        if (results[r].ok()) results[r] = (*ctx)->Leave();
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < w; ++r) {
      ASSERT_TRUE(results[r].ok()) << "w=" << w << " rank " << r << ": " << results[r];
      EXPECT_EQ(sums[r], w * (w + 1) / 2.0f);
    }
  }
}

TEST(Distributed, RendezvousTimeoutNamesTheMissingRanks) {
  const int port = FreePort();
  std::vector<absl::Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {  // ranks 2 and 3 of 4 never start
    threads.emplace_back([&, r] {
      DistributedOptions o;
      o.rendezvous_timeout = std::chrono::milliseconds(3000);
      results[r] = InitDistributed(Place(r, 4, port), o).status();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].code(), absl::StatusCode::kDeadlineExceeded) << results[r];
    EXPECT_THAT(results[r].message(), HasSubstr(absl::StrCat("rendezvous at 127.0.0.1:", port)));
    EXPECT_THAT(results[r].message(), HasSubstr("ranks 2, 3 of 4 never joined"));
  }
}

TEST(Distributed, UnreachableStoreNamesAddressAndPort) {
  const int port = FreePort();  // nobody serves it
  DistributedOptions o;
  o.rendezvous_timeout = std::chrono::milliseconds(500);
  auto ctx = InitDistributed(Place(1, 2, port), o);
  ASSERT_FALSE(ctx.ok());
  EXPECT_THAT(ctx.status().message(), HasSubstr(absl::StrCat("could not reach the store at 127.0.0.1:", port)));
  EXPECT_THAT(ctx.status().message(), HasSubstr("within 1000 ms"));
}

TEST(Distributed, AStoreHostsPortInUseIsNamed) {
  const int port = FreePort();
  DistributedOptions o;
  o.rendezvous_timeout = std::chrono::milliseconds(500);
  std::unique_ptr<DistributedContext> first;
  std::thread host([&] {
    auto ctx = InitDistributed(Place(0, 1, port), o);
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    first = *std::move(ctx);
  });
  host.join();
  auto second = InitDistributed(Place(0, 1, port), o);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr(absl::StrCat("could not serve the store on port ", port)));
}

TEST(Distributed, BadOptionsAreRefused) {
  DistributedOptions o;
  o.backend = "mpi";
  EXPECT_THAT(InitDistributed(Place(0, 1, 1), o).status().message(), HasSubstr("backend 'mpi'"));
  o = {};
  o.backend = "nccl";
  EXPECT_THAT(InitDistributed(Place(0, 1, 1), o).status().message(), HasSubstr("nccl backend needs --device=cuda"));
  o = {};
  o.device = "tpu";
  EXPECT_THAT(InitDistributed(Place(0, 1, 1), o).status().message(), HasSubstr("device 'tpu'"));
}

TEST(Distributed, LocalAddressTowardLoopbackIsLoopback) {
  EXPECT_EQ(*LocalAddressToward("127.0.0.1", 29500), "127.0.0.1");
  EXPECT_FALSE(LocalAddressToward("no-such-host.invalid", 1).ok());
}

}  // namespace
}  // namespace shardlight::lightning::cluster
