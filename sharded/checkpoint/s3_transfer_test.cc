// How checkpoints move over S3, seen from the server's side: every request
// passes a logging front (sharded/checkpoint/storage/s3/testing/s3_front.py, one port per rank) on its
// way to a real SeaweedFS on loopback. A resharding load issues ranged GETs
// for exactly the byte ranges each rank's shards overlap, several in flight
// per rank, ranges a small gap apart joined into one GET (a load of many
// small tensors makes a few GETs, not one per tensor); a large data file
// goes up as a multipart upload with parts in flight together; small
// entries go up in one object per rank. Loads are
// right at several world sizes with uneven and empty shards, and transient
// faults (503 SlowDown, 500, dropped connections) at the front are retried
// through a whole save and load. Persistent faults and a skewed clock fail
// every rank, naming the object, in bounded time.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/interop/dcp/dcp_writer.h"
#include "sharded/checkpoint/storage/s3/s3_storage.h"
#include "sharded/checkpoint/storage/s3/testing/s3_front.h"
#include "sharded/checkpoint/storage/s3/testing/seaweedfs_test.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::checkpoint {
namespace {

using s3::testing::Exchange;
using s3::testing::S3Front;
using simulate::RankContext;
using simulate::SimulatedCluster;

std::vector<testing::TensorSpec> Model(int world) { return testing::UnevenModel(world); }

class S3TransferTest : public s3::testing::SeaweedFsTest {
 protected:
  std::string Url(const std::string& prefix) const { return absl::StrCat("s3://", bucket_, "/", prefix); }

  // A front with `ports` ports before the server.
  std::unique_ptr<S3Front> Front(int ports, std::vector<std::string> faults = {}) {
    s3::testing::S3FrontOptions options;
    options.ports = ports;
    options.faults = std::move(faults);
    auto front = S3Front::Start(server_->endpoint(), options);
    EXPECT_TRUE(front.ok()) << front.status();
    return front.ok() ? *std::move(front) : nullptr;
  }
  // A storage whose requests go through port `i` of `front`.
  std::shared_ptr<Storage> Through(const S3Front& front, int i, s3::S3StorageOptions options = {},
                                   s3::S3ClientOptions client_options = {}) {
    return std::make_shared<s3::S3Storage>(s3::S3Client::Create(front.Via(server_->config(), i), client_options),
                                           options);
  }

  // Runs `body` on `world` ranks, each with storage[rank % storage.size()]; every rank's status.
  std::vector<absl::Status> OnEveryRank(int world, const std::vector<std::shared_ptr<Storage>>& storage,
                                        const std::function<absl::Status(RankContext&, std::shared_ptr<Storage>)>& body) {
    std::vector<absl::Status> out(world);
    SimulatedCluster cluster(world, testing::Options());
    (void)cluster.Run([&](RankContext& ctx) -> absl::Status {
      out[ctx.rank] = body(ctx, storage[static_cast<size_t>(ctx.rank) % storage.size()]);
      return absl::OkStatus();
    });
    return out;
  }

  static absl::Status Save(const std::vector<testing::TensorSpec>& specs, int salt, const std::string& dir,
                           RankContext& ctx, std::shared_ptr<Storage> storage) {
    SL_ASSIGN_OR_RETURN(StateDict state, testing::MakeState(specs, salt, ctx.pg));
    SaveOptions options;
    options.storage = std::move(storage);
    return SaveCheckpoint(state, dir, *ctx.pg, options);
  }
  static absl::Status LoadAndCheck(const std::vector<testing::TensorSpec>& specs, int salt, const std::string& dir,
                                   RankContext& ctx, std::shared_ptr<Storage> storage) {
    SL_ASSIGN_OR_RETURN(StateDict state, testing::MakeState(specs, -1, ctx.pg));
    LoadOptions options;
    options.storage = std::move(storage);
    SL_RETURN_IF_ERROR(LoadCheckpoint(state, dir, *ctx.pg, options));
    return testing::CheckState(state, salt);
  }
  static void ExpectAllOk(const std::vector<absl::Status>& statuses, const std::string& what) {
    for (size_t r = 0; r < statuses.size(); ++r) EXPECT_TRUE(statuses[r].ok()) << what << ", rank " << r << ": " << statuses[r];
  }
};

// W=1 saves a 2 MiB tensor (one data file, one entry); W=4 loads it, each
// rank a quarter: 512 KiB, two checksum blocks. Each rank's port sees
// ranged GETs of the data file tiling exactly its quarter (after the
// file's header), in 128 KiB pieces, several in flight at once.
TEST_F(S3TransferTest, EachRankGetsExactlyTheRangesItsShardsOverlap) {
  const std::string dir = Url("ranges");
  auto saving = std::make_shared<s3::S3Storage>(client_);
  const auto specs = [](int world) {
    return std::vector<testing::TensorSpec>{
        {"w", {1024, 512}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(0, world)}};
  };
  ExpectAllOk(OnEveryRank(1, {saving}, [&](RankContext& ctx, auto s) { return Save(specs(1), 3, dir, ctx, s); }),
              "save");
  auto listed = client_->ListObjects(bucket_, "ranges/data-");
  ASSERT_TRUE(listed.ok() && listed->objects.size() == 1u) << listed.status();
  const s3::ObjectInfo data = listed->objects[0];
  constexpr int64_t kQuarter = int64_t{512} << 10;
  const int64_t entry_begin = data.size - 4 * kQuarter;  // the one entry ends the file
  ASSERT_GT(entry_begin, 0);

  std::unique_ptr<S3Front> front = Front(4);
  ASSERT_NE(front, nullptr);
  s3::S3StorageOptions options;
  options.read_piece_bytes = int64_t{128} << 10;
  options.reads_in_flight = 4;
  std::vector<std::shared_ptr<Storage>> per_rank;
  for (int r = 0; r < 4; ++r) per_rank.push_back(Through(*front, r, options));
  ExpectAllOk(OnEveryRank(4, per_rank, [&](RankContext& ctx, auto s) { return LoadAndCheck(specs(4), 3, dir, ctx, s); }),
              "load");

  const std::vector<Exchange> log = front->Log();
  const std::string data_path = absl::StrCat("/", bucket_, "/", data.key);
  for (int r = 0; r < 4; ++r) {
    const int port = front->ports()[r];
    std::map<int64_t, int64_t> entry_ranges;  // first -> last, within the entry
    int64_t bytes = 0;
    for (const Exchange& e : log) {
      if (e.port != port || e.method != "GET" || e.path != data_path) continue;
      const auto [first, last] = e.Range();
      ASSERT_GE(first, 0) << "an unranged GET of the data file on rank " << r;
      EXPECT_EQ(e.bytes_out, last - first + 1);
      bytes += e.bytes_out;
      if (first >= entry_begin) {
        EXPECT_TRUE(entry_ranges.emplace(first, last).second) << "rank " << r << " read bytes " << first << " twice";
      } else {
        EXPECT_LT(last, entry_begin) << "a header read of rank " << r << " runs into the data";
      }
    }
    // The ranges tile [entry_begin + r Q, entry_begin + (r + 1) Q) exactly.
    int64_t at = entry_begin + r * kQuarter;
    for (const auto& [first, last] : entry_ranges) {
      EXPECT_EQ(first, at) << "rank " << r;
      EXPECT_LE(last - first + 1, options.read_piece_bytes) << "rank " << r;
      at = last + 1;
    }
    EXPECT_EQ(at, entry_begin + (r + 1) * kQuarter) << "rank " << r;
    EXPECT_LE(bytes, kQuarter + entry_begin) << "rank " << r << " read more than its quarter and the header";
    const int most = S3Front::MostAtOnce(
        log, [&](const Exchange& e) { return e.port == port && e.method == "GET" && e.path == data_path; });
    EXPECT_GE(most, 2) << "rank " << r << "'s ranged GETs never overlapped in time";
    std::fprintf(stderr, "rank %d: %zu ranged GETs of its quarter, at most %d at once, %lld bytes in all\n", r,
                 entry_ranges.size(), most, static_cast<long long>(bytes));
  }
}

// Saves at 1, 3 and 4 ranks, loads at other world sizes, with read pieces
// of odd sizes (smaller than a block, not aligned to anything): every value
// arrives, uneven and empty shards included.
TEST_F(S3TransferTest, ReshardingLoadsAreRightAtSeveralWorldSizes) {
  s3::S3StorageOptions options;
  options.read_piece_bytes = 97;
  options.reads_in_flight = 3;
  auto storage = std::make_shared<s3::S3Storage>(client_, options);
  const std::vector<std::pair<int, std::vector<int>>> plans = {{1, {3, 5}}, {3, {1, 4}}, {4, {2, 5}}};
  for (const auto& [save_world, load_worlds] : plans) {
    const std::string dir = Url(absl::StrCat("w", save_world));
    ExpectAllOk(OnEveryRank(save_world, {storage},
                            [&](RankContext& ctx, auto s) { return Save(Model(save_world), save_world, dir, ctx, s); }),
                absl::StrCat("save at ", save_world));
    for (int w : load_worlds) {
      ExpectAllOk(OnEveryRank(w, {storage},
                              [&](RankContext& ctx, auto s) { return LoadAndCheck(Model(w), save_world, dir, ctx, s); }),
                  absl::StrCat("load at ", w, " of a save at ", save_world));
    }
  }
}

// A 24 MiB data file per rank goes up as a multipart upload of 5 MiB parts
// (and a 9 MiB last one),
// several in flight at once; 300 small entries go up as one object per
// rank, as the POSIX save writes one file per rank.
TEST_F(S3TransferTest, LargeFilesUploadPartsInParallelSmallEntriesGoInOneObject) {
  std::unique_ptr<S3Front> front = Front(2);
  ASSERT_NE(front, nullptr);
  s3::S3StorageOptions options;
  options.part_bytes = int64_t{5} << 20;
  options.parts_in_flight = 4;
  const std::vector<std::shared_ptr<Storage>> per_rank = {Through(*front, 0, options), Through(*front, 1, options)};
  const auto big = [](int world) {
    return std::vector<testing::TensorSpec>{
        {"big", {4096, 3072}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(0, world)}};
  };
  const std::string dir = Url("big");
  ExpectAllOk(OnEveryRank(2, per_rank, [&](RankContext& ctx, auto s) { return Save(big(2), 5, dir, ctx, s); }),
              "save");
  std::vector<Exchange> log = front->Log();
  for (int r = 0; r < 2; ++r) {
    const int port = front->ports()[r];
    auto is_part = [&](const Exchange& e) {
      return e.port == port && e.method == "PUT" && absl::StrContains(e.query, "partNumber=");
    };
    int parts = 0;
    for (const Exchange& e : log) parts += is_part(e) ? 1 : 0;
    // Three parts go while two fill the buffer (24 -> 19 -> 14 -> 9 MiB), the
    // last 9 MiB at the close.
    EXPECT_EQ(parts, 4) << "rank " << r << ": 24 MiB in 5 MiB parts";
    const int most = S3Front::MostAtOnce(log, is_part);
    EXPECT_GE(most, 2) << "rank " << r << "'s parts never overlapped in time";
    std::fprintf(stderr, "rank %d: %d parts, at most %d at once\n", r, parts, most);
  }
  EXPECT_TRUE(client_->ListMultipartUploads(bucket_, "")->empty());
  ExpectAllOk(OnEveryRank(3, {std::make_shared<s3::S3Storage>(client_)},
                          [&](RankContext& ctx, auto s) { return LoadAndCheck(big(3), 5, dir, ctx, s); }),
              "load at 3");

  std::vector<testing::TensorSpec> small;
  for (int i = 0; i < 300; ++i) {
    small.push_back({absl::StrCat("p", i), {3, 4}, c10::ScalarType::Float,
                     i % 2 ? std::optional<ShardingSpec>(ChunkShardingSpec::OnRanks(0, 2)) : std::nullopt});
  }
  const std::string small_dir = Url("small");
  const size_t before = front->Log().size();
  ExpectAllOk(OnEveryRank(2, per_rank, [&](RankContext& ctx, auto s) { return Save(small, 6, small_dir, ctx, s); }),
              "save of small entries");
  log = front->Log();
  std::set<std::string> data_objects;
  int data_puts = 0;
  for (size_t i = before; i < log.size(); ++i) {
    const Exchange& e = log[i];
    if (e.method == "PUT" && absl::StrContains(e.path, "/small/data-")) {
      ++data_puts;
      data_objects.insert(e.path);
      EXPECT_TRUE(e.query.empty()) << "a multipart request for small entries: " << e.query;
    }
  }
  EXPECT_EQ(data_puts, static_cast<int>(data_objects.size())) << "one PUT per data object";
  EXPECT_LE(data_objects.size(), 2u);
  EXPECT_GE(data_objects.size(), 1u);
}

// 1500 small tensors, every other one dense: the save's rank 0 file holds
// the dense ones between its own shards, so a rank loading at another world
// size wants ranges of that file a few dozen bytes apart. Saved at W=2 and
// loaded at W=3 through the front: every value arrives, and each rank's
// GETs of the data files are a handful (ranges a small gap apart share
// one), where the same load joining only touching ranges
// (read_join_gap_bytes = 0) costs a rank a GET per dense tensor.
TEST_F(S3TransferTest, ManySmallTensorsLoadInAFewJoinedGets) {
  constexpr int kTensors = 1500;
  const auto small = [](int world) {
    std::vector<testing::TensorSpec> specs;
    for (int i = 0; i < kTensors; ++i) {
      specs.push_back({absl::StrCat("t", i), {6, 4}, c10::ScalarType::Float,
                       i % 2 ? std::optional<ShardingSpec>(ChunkShardingSpec::OnRanks(0, world)) : std::nullopt});
    }
    return specs;
  };
  const std::string dir = Url("many");
  auto saving = std::make_shared<s3::S3Storage>(client_);
  ExpectAllOk(OnEveryRank(2, {saving}, [&](RankContext& ctx, auto s) { return Save(small(2), 9, dir, ctx, s); }),
              "save");

  // Each rank's ranged GETs of the data files, loading with `options`.
  const auto load_counting_gets = [&](s3::S3StorageOptions options) {
    std::unique_ptr<S3Front> front = Front(3);
    std::vector<int> gets(3, 0);
    if (front == nullptr) return gets;
    std::vector<std::shared_ptr<Storage>> per_rank;
    for (int r = 0; r < 3; ++r) per_rank.push_back(Through(*front, r, options));
    ExpectAllOk(OnEveryRank(3, per_rank, [&](RankContext& ctx, auto s) { return LoadAndCheck(small(3), 9, dir, ctx, s); }),
                absl::StrCat("load with read_join_gap_bytes ", options.read_join_gap_bytes));
    for (const Exchange& e : front->Log()) {
      for (int r = 0; r < 3; ++r) {
        if (e.port == front->ports()[r] && e.method == "GET" && absl::StrContains(e.path, "/many/data-")) ++gets[r];
      }
    }
    return gets;
  };
  const std::vector<int> joined = load_counting_gets({});
  std::vector<int> unjoined;
  {
    s3::S3StorageOptions options;
    options.read_join_gap_bytes = 0;
    unjoined = load_counting_gets(options);
  }
  for (int r = 0; r < 3; ++r) {
    std::fprintf(stderr, "rank %d: %d GETs of the data files joined, %d with gap 0\n", r, joined[r], unjoined[r]);
    // Two data files: a header read and a few pieces each.
    EXPECT_LE(joined[r], 8) << "rank " << r << " made a GET per few tensors, not per few MiB";
  }
  // Rank 2 needs none of rank 0's shards: every dense tensor is a range of
  // its own there.
  EXPECT_GE(unjoined[2], kTensors / 2) << "the control load joined ranges across gaps: the test shows nothing";
}

// A save makes its directory once. W ranks PUTting the same directory
// marker at once held one of them a second on SeaweedFS (an idle 0.5 GiB
// save at W=4 spent 1.0 of its 5.1 s there, by SHARDLIGHT_S3_TRACE): on an
// object store rank 0 alone makes it, in shardlight's save and the DCP
// writer, and the other ranks write only after the save's first agreement.
TEST_F(S3TransferTest, ASaveMakesItsDirectoryOnceFromRankZero) {
  constexpr int kWorld = 4;
  std::unique_ptr<S3Front> front = Front(kWorld);
  ASSERT_NE(front, nullptr);
  std::vector<std::shared_ptr<Storage>> per_rank;
  for (int r = 0; r < kWorld; ++r) per_rank.push_back(Through(*front, r));
  const std::string dir = Url("once"), dcp_dir = Url("once-dcp");
  ExpectAllOk(OnEveryRank(kWorld, per_rank, [&](RankContext& ctx, auto s) { return Save(Model(kWorld), 5, dir, ctx, s); }),
              "save");
  ExpectAllOk(OnEveryRank(kWorld, per_rank,
                          [&](RankContext& ctx, auto s) -> absl::Status {
                            SL_ASSIGN_OR_RETURN(StateDict state, testing::MakeState(Model(kWorld), 5, ctx.pg));
                            SaveOptions options;
                            options.storage = std::move(s);
                            return dcp::SaveDcpCheckpoint(state, dcp_dir, *ctx.pg, options);
                          }),
              "DCP save");
  for (const std::string name : {"/once/", "/once-dcp/"}) {
    std::vector<int> ports;
    for (const Exchange& e : front->Log()) {
      if (e.method == "PUT" && absl::EndsWith(e.path, name)) ports.push_back(e.port);
    }
    ASSERT_EQ(ports.size(), 1u) << "PUTs of the directory marker '" << name << "'";
    EXPECT_EQ(ports[0], front->ports()[0]) << "the marker '" << name << "' came from another rank than 0";
  }
  auto plain = std::make_shared<s3::S3Storage>(client_);
  ExpectAllOk(OnEveryRank(3, {plain}, [&](RankContext& ctx, auto s) { return LoadAndCheck(Model(3), 5, dir, ctx, s); }),
              "load");
}

// 503 SlowDown on every third GET, 500 on every fourth HEAD and a dropped
// connection on every second data PUT (twice): the save and the resharding
// load both succeed, and the faults did happen.
TEST_F(S3TransferTest, TransientFaultsThroughASaveAndALoadAreRetried) {
  std::unique_ptr<S3Front> front = Front(1, {"^GET ,503,3", "^HEAD ,500,4", "^PUT .*/data-,drop,2,2"});
  ASSERT_NE(front, nullptr);
  const std::string dir = Url("faults");
  auto storage = Through(*front, 0);
  ExpectAllOk(OnEveryRank(3, {storage}, [&](RankContext& ctx, auto s) { return Save(Model(3), 7, dir, ctx, s); }),
              "save");
  ExpectAllOk(OnEveryRank(2, {storage}, [&](RankContext& ctx, auto s) { return LoadAndCheck(Model(2), 7, dir, ctx, s); }),
              "load");
  std::map<std::string, int> faults;
  for (const Exchange& e : front->Log()) {
    if (!e.fault.empty()) ++faults[e.fault];
  }
  EXPECT_GT(faults["503"], 0);
  EXPECT_GT(faults["500"], 0);
  EXPECT_EQ(faults["drop"], 2);
}

// A server that answers every data write with 503 SlowDown: every rank
// fails within the deadline, naming the object and SlowDown.
TEST_F(S3TransferTest, PersistentSlowDownFailsEveryRankWithinTheDeadline) {
  std::unique_ptr<S3Front> front = Front(1, {"^PUT .*/data-,503,1"});
  ASSERT_NE(front, nullptr);
  s3::S3ClientOptions client_options;
  client_options.deadline = absl::Seconds(3);
  auto storage = Through(*front, 0, {}, client_options);
  const std::string dir = Url("slow");
  const absl::Time t0 = absl::Now();
  const std::vector<absl::Status> saved =
      OnEveryRank(3, {storage}, [&](RankContext& ctx, auto s) { return Save(Model(3), 1, dir, ctx, s); });
  EXPECT_LT(absl::Now() - t0, absl::Seconds(20));
  for (const absl::Status& s : saved) {
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(absl::StrContains(s.message(), dir + "/data-")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "SlowDown")) << s;
  }
  EXPECT_FALSE(HasCommittedCheckpoint(dir, storage.get()));
}

// A clock an hour off (S3 allows 15 minutes): every rank's save and load
// fail at once, naming the location, RequestTimeTooSkewed and the clock.
TEST_F(S3TransferTest, ASkewedClockFailsEveryRankNamingIt) {
  const std::string dir = Url("skew");
  auto good = std::make_shared<s3::S3Storage>(client_);
  ExpectAllOk(OnEveryRank(2, {good}, [&](RankContext& ctx, auto s) { return Save(Model(2), 1, dir, ctx, s); }), "save");
  s3::S3ClientOptions skewed;
  skewed.clock_offset = absl::Hours(1);
  auto storage = std::make_shared<s3::S3Storage>(s3::S3Client::Create(server_->config(), skewed));
  const absl::Time t0 = absl::Now();
  const std::vector<absl::Status> saved =
      OnEveryRank(3, {storage}, [&](RankContext& ctx, auto s) { return Save(Model(3), 2, dir + "2", ctx, s); });
  const std::vector<absl::Status> loaded =
      OnEveryRank(3, {storage}, [&](RankContext& ctx, auto s) { return LoadAndCheck(Model(3), 1, dir, ctx, s); });
  EXPECT_LT(absl::Now() - t0, absl::Seconds(20));
  for (const auto* statuses : {&saved, &loaded}) {
    for (const absl::Status& s : *statuses) {
      EXPECT_FALSE(s.ok());
      EXPECT_TRUE(absl::StrContains(s.message(), "s3://" + bucket_ + "/skew")) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), "RequestTimeTooSkewed")) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), "clock")) << s;
    }
  }
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint
