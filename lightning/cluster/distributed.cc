#include "lightning/cluster/distributed.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/no_throw.h"
#include "sharded/process_groups.h"
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace shardlight::lightning::cluster {
namespace {

std::string Endpoint(const ProcessPlacement& p) { return absl::StrCat(p.master_addr, ":", p.master_port); }

// Connects to (or, on the hosting rank, serves) the job's TCPStore.
absl::StatusOr<c10::intrusive_ptr<c10d::Store>> OpenStore(const ProcessPlacement& p, const DistributedOptions& o) {
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(p.master_port);
  store_options.isServer = p.rank == 0 && p.store_mode == StoreMode::kRankZeroHosts;
  store_options.waitWorkers = false;  // the join below waits, naming who is missing
  // LibTorch 1.13 truncates the connect timeout to whole seconds (under a
  // second it never connects): round up.
  store_options.timeout = std::max<std::chrono::milliseconds>(
      std::chrono::ceil<std::chrono::seconds>(o.rendezvous_timeout), std::chrono::seconds(1));
  auto store = sharded::NoThrow([&]() -> absl::StatusOr<c10::intrusive_ptr<c10d::Store>> {
    c10::intrusive_ptr<c10d::Store> tcp = c10::make_intrusive<c10d::TCPStore>(p.master_addr, store_options);
    if (p.store_mode == StoreMode::kAgentHosts) tcp = c10::make_intrusive<c10d::PrefixStore>(p.store_prefix, tcp);
    return c10::intrusive_ptr<c10d::Store>(c10::make_intrusive<c10d::PrefixStore>("shardlight/", tcp));
  });
  if (store.ok()) return store;
  if (store_options.isServer) {
    return absl::UnavailableError(absl::StrCat("rank 0 could not serve the store on port ", p.master_port,
                                               " (is the port in use?): ", store.status().message()));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "rank ", p.rank, " could not reach the store at ", Endpoint(p), " within ", store_options.timeout.count(),
      " ms (is ", p.store_mode == StoreMode::kAgentHosts ? "the launcher" : "rank 0",
      " running, and are MASTER_ADDR and MASTER_PORT right?): ", store.status().message()));
}

// Every rank announces itself and waits for all the others, bounded.
absl::Status Join(c10d::Store& store, const ProcessPlacement& p, std::chrono::milliseconds timeout) {
  std::vector<std::string> keys;
  for (int r = 0; r < p.world_size; ++r) keys.push_back(absl::StrCat("join/", r));
  // The rank that serves the store waits a little longer, so the others can
  // still read the store when they time out and name who is missing.
  const bool hosts = p.rank == 0 && p.store_mode == StoreMode::kRankZeroHosts;
  const auto deadline = std::chrono::steady_clock::now() + timeout +
                        (hosts ? std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(2))
                               : std::chrono::milliseconds(0));
  const absl::Status joined = sharded::NoThrow([&]() -> absl::Status {
    store.set(keys[p.rank], std::vector<uint8_t>{1});
    while (!store.check(keys)) {
      if (std::chrono::steady_clock::now() >= deadline) {
        std::vector<int> missing;
        for (int r = 0; r < p.world_size; ++r) {
          if (!store.check({keys[r]})) missing.push_back(r);
        }
        return absl::DeadlineExceededError(absl::StrCat(
            "rendezvous at ", Endpoint(p), " timed out after ", timeout.count(), " ms: ",
            missing.size() == 1 ? "rank " : "ranks ", absl::StrJoin(missing, ", "), " of ", p.world_size,
            " never joined"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return absl::OkStatus();
  });
  if (joined.ok() || joined.code() == absl::StatusCode::kDeadlineExceeded) return joined;
  return absl::UnavailableError(absl::StrCat(
      "the store at ", Endpoint(p), p.store_mode == StoreMode::kRankZeroHosts ? " (served by rank 0)" : "",
      " failed during the rendezvous: ", joined.message()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> LocalAddressToward(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) return absl::InvalidArgumentError(absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  std::string local;
  for (addrinfo* a = found; a != nullptr && local.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    // A connected UDP socket only picks a route and a source address.
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* raw = addr.ss_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&addr)->sin_addr)
                                                  : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr);
      if (inet_ntop(addr.ss_family, raw, text, sizeof(text)) != nullptr) local = text;
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (local.empty()) return absl::UnavailableError(absl::StrCat("no route from this host to ", host));
  return local;
}

absl::StatusOr<std::unique_ptr<DistributedContext>> InitDistributed(const ProcessPlacement& placement,
                                                                   const DistributedOptions& options) {
  if (options.device != "cpu" && options.device != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("device '", options.device, "' is not cpu or cuda"));
  }
  std::string backend = options.backend;
  if (backend == "auto") backend = options.device == "cuda" ? "nccl" : "gloo";
  if (backend != "gloo" && backend != "nccl") {
    return absl::InvalidArgumentError(absl::StrCat("backend '", options.backend, "' is not gloo, nccl or auto"));
  }
  if (backend == "nccl" && options.device != "cuda") {
    return absl::InvalidArgumentError("the nccl backend needs --device=cuda");
  }
  if (options.rendezvous_timeout.count() <= 0 || options.collective_timeout.count() <= 0) {
    return absl::InvalidArgumentError("the rendezvous and collective timeouts must be positive");
  }
  std::unique_ptr<DistributedContext> ctx(new DistributedContext());
  ctx->placement_ = placement;
  ctx->options_ = options;
  ctx->backend_ = backend;
  auto store = OpenStore(placement, options);
  if (!store.ok()) return store.status();
  ctx->store_ = *store;
  if (auto s = Join(*ctx->store_, placement, options.rendezvous_timeout); !s.ok()) return s;

  auto group_store = c10::make_intrusive<c10d::PrefixStore>("pg/", ctx->store_);
  // Gloo's options serve the main group (gloo backend) and the factory's.
  sharded::GlooGroupOptions gloo;
  gloo.timeout = options.collective_timeout;
  if (!options.gloo_interface.empty()) {
    auto device = sharded::GlooDeviceForInterface(options.gloo_interface);
    if (!device.ok()) return device.status();
    gloo.device = *device;
    gloo.bind_address = options.gloo_interface;
  } else {
    auto local = LocalAddressToward(placement.master_addr, placement.master_port);
    if (!local.ok()) return local.status();
    gloo.bind_address = *local;
  }
  absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> pg;
  if (backend == "nccl") {
    pg = sharded::MakeNcclGroup(group_store, placement.rank, placement.world_size, options.collective_timeout, gloo);
  } else {
    pg = sharded::MakeGlooGroup(group_store, placement.rank, placement.world_size, gloo);
    ctx->gloo_ = gloo;
  }
  if (!pg.ok()) {
    return absl::Status(pg.status().code(),
                        absl::StrCat("store ", Endpoint(placement), ": ", pg.status().message()));
  }
  ctx->pg_ = *pg;
  ctx->groups_ = std::make_shared<const sharded::GroupFactory>(ctx->store_, placement.rank, placement.world_size, gloo);
  ctx->store_->setTimeout(options.collective_timeout);
  sharded::RankMonitorOptions monitor_options;
  if (placement.store_mode == StoreMode::kRankZeroHosts) monitor_options.store_host_rank = 0;
  auto monitor = std::make_shared<sharded::RankMonitor>(
      c10::make_intrusive<c10d::PrefixStore>("monitor/", ctx->store_), placement.rank, placement.world_size,
      monitor_options);
  ctx->monitor_ = sharded::RankMonitor::Attach(*ctx->pg_, std::move(monitor));
  return ctx;
}

absl::Status DistributedContext::Leave(std::optional<std::chrono::milliseconds> max_wait) {
  if (left_) return absl::OkStatus();
  left_ = true;
  const absl::Status left = sharded::NoThrow([&]() -> absl::Status {
    store_->add("leave", 1);
    if (placement_.rank != 0 || placement_.store_mode != StoreMode::kRankZeroHosts) return absl::OkStatus();
    const std::chrono::milliseconds wait = max_wait.value_or(options_.collective_timeout);
    const auto deadline = std::chrono::steady_clock::now() + wait;
    // After a loss the lost ranks never leave: the store may go once every
    // survivor has read the record of the first loss (it names that, not
    // this rank's exit, when its own collective then fails).
    const std::shared_ptr<sharded::RankMonitor> monitor = sharded::RankMonitor::Of(*pg_);
    int64_t done = 0;
    while ((done = store_->add("leave", 0)) < placement_.world_size && !(monitor && monitor->LossSeenByAll())) {
      if (std::chrono::steady_clock::now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("rank 0 stopped waiting for the other ranks to finish after ",
                                                        wait.count(), " ms (",
                                                        placement_.world_size - done, " still running)"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return absl::OkStatus();
  });
  if (left.ok() || left.code() == absl::StatusCode::kDeadlineExceeded) return left;
  return absl::UnavailableError(absl::StrCat("the store failed while leaving: ", left.message()));
}

// The group is released, never shut down here (issue 49). LibTorch 2.x's
// "destroy_process_group() was not called before program exit" comes from
// ProcessGroupNCCL's destructor only (libtorch_cuda; Gloo groups say
// nothing): it warns unless the group was shut down first. Shutting the group
// down here would break every ShardedTensor that outlives this context --
// each holds the group to run its collectives (Gather, Reshard, a save), and
// a shut-down NCCL group fails them -- and c10d has no hook at the release
// of the last holder, where a shutdown would be safe. So the group lives as
// long as its last holder and, on NCCL under 2.x, warns once when it goes.
DistributedContext::~DistributedContext() {
  monitor_.reset();  // stops the heartbeat before the group and the store go
  groups_.reset();
  pg_.reset();
  store_.reset();
}

}  // namespace shardlight::lightning::cluster
