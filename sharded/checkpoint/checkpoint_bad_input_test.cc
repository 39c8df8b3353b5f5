// Every kind of bad checkpoint fails the load on every rank with the same
// error naming the file and key, and leaves the tensors to fill untouched.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/checkpoint_testing.h"
#include "sharded/checkpoint/format/crc32c.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/storage/posix_file.h"
#include "sharded/dtype_table.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::checkpoint {
namespace {

namespace fs = std::filesystem;
using simulate::RankContext;
using simulate::SimulatedCluster;
using testing::MakeState;
using testing::TensorSpec;
using ::testing::HasSubstr;

std::vector<TensorSpec> Layout() {
  EnumerableShardingSpec grid;  // two shards on each rank
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) grid.shards.push_back({{i * 3, j * 2}, {3, 2}, Placement::Cpu((i + j) % 2)});
  }
  return {{"w", {10, 4}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(0, 2)},
          {"g", {6, 4}, c10::ScalarType::Long, grid},
          {"d", {4, 4}, c10::ScalarType::Float, std::nullopt}};
}

// A good checkpoint saved at W = 2 (once); each case corrupts a copy.
const std::string& Pristine() {
  static const std::string* dir = [] {
    auto* d = new std::string(testing::FreshDir("pristine"));
    SimulatedCluster cluster(2, testing::Options());
    absl::Status s = cluster.Run([&](RankContext& ctx) -> absl::Status {
      auto state = MakeState(Layout(), 1, ctx.pg);
      if (!state.ok()) return state.status();
      SaveOptions options;
      options.checksum_block_bytes = 64;
      return SaveCheckpoint(*state, *d, *ctx.pg, options);
    });
    EXPECT_TRUE(s.ok()) << s;
    return d;
  }();
  return *dir;
}

std::string CopyOfPristine(const std::string& name) {
  const std::string dir = testing::FreshDir(name);
  for (const auto& entry : fs::directory_iterator(Pristine())) fs::copy(entry.path(), fs::path(dir) / entry.path().filename());
  return dir;
}

nlohmann::json ReadIndexJson(const std::string& dir) {
  std::ifstream in(JoinPath(dir, kIndexFileName));
  return nlohmann::json::parse(in);
}

// Without index_crc32c (optional: FORMAT.md), so the edit is what is tested.
void WriteIndexJson(const std::string& dir, nlohmann::json j) {
  j.erase(kIndexChecksumField);
  std::ofstream(JoinPath(dir, kIndexFileName)) << j.dump(1);
}

// The data file rank `rank` wrote.
std::string DataFile(const std::string& dir, int rank) {
  return ReadIndexJson(dir)["files"][rank]["name"].get<std::string>();
}

// Overwrites `n` bytes at `offset` of `path`.
void Poke(const std::string& path, int64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Rewrites the header JSON of a data file in place (same length, padded).
void EditHeader(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(path, std::ios::binary);
  unsigned char prefix[8];
  in.read(reinterpret_cast<char*>(prefix), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(prefix[i]) << (8 * i);
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  in.close();
  nlohmann::json header = nlohmann::json::parse(text);
  header.erase("__metadata__");  // makes room for longer numbers
  edit(header);
  std::string out = header.dump();
  ASSERT_LE(out.size(), n) << "edited header does not fit";
  out.append(n - out.size(), ' ');
  Poke(path, 8, out);
}

struct Outcome {
  absl::StatusCode code;
  std::string message;
  bool untouched;
};

// Loads `dir` at `world` into sentinel-filled tensors; every rank's outcome.
std::vector<Outcome> LoadOnEveryRank(const std::string& dir, int world, std::vector<TensorSpec> layout = Layout(),
                                     LoadOptions options = {}) {
  for (TensorSpec& t : layout) {
    if (t.spec && std::holds_alternative<ChunkShardingSpec>(*t.spec)) t.spec = ChunkShardingSpec::OnRanks(0, world);
    if (t.spec && std::holds_alternative<EnumerableShardingSpec>(*t.spec)) t.spec = ChunkShardingSpec::OnRanks(1, world);
  }
  SimulatedCluster cluster(world, testing::Options());
  auto outcomes = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<Outcome> {
    auto state = MakeState(layout, -1, ctx.pg);
    if (!state.ok()) return state.status();
    absl::Status s = LoadCheckpoint(*state, dir, *ctx.pg, options);
    return Outcome{s.code(), std::string(s.message()), testing::AllSentinel(*state)};
  });
  EXPECT_TRUE(outcomes.ok()) << outcomes.status();
  return outcomes.ok() ? *outcomes : std::vector<Outcome>();
}

// Every rank failed with one message holding every needle; nothing written.
void ExpectFailsEverywhere(const std::vector<Outcome>& outcomes, const std::vector<std::string>& needles,
                           bool untouched = true) {
  ASSERT_FALSE(outcomes.empty());
  std::cout << "  message: " << outcomes[0].message << "\n";  // what a user sees, in the test log
  for (size_t r = 0; r < outcomes.size(); ++r) {
    EXPECT_NE(outcomes[r].code, absl::StatusCode::kOk) << "rank " << r;
    EXPECT_EQ(outcomes[r].message, outcomes[0].message) << "rank " << r;
    for (const std::string& needle : needles) EXPECT_THAT(outcomes[r].message, HasSubstr(needle)) << "rank " << r;
    if (untouched) {
      EXPECT_TRUE(outcomes[r].untouched) << "rank " << r << " had its tensors changed";
    }
  }
}

TEST(BadCheckpointTest, PristineCopyLoads) {
  const std::string dir = CopyOfPristine("good");
  for (const Outcome& o : LoadOnEveryRank(dir, 3)) {
    EXPECT_EQ(o.code, absl::StatusCode::kOk) << o.message;
    EXPECT_FALSE(o.untouched);
  }
}

TEST(BadCheckpointTest, MissingIndex) {
  const std::string dir = testing::FreshDir("empty");
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2), {"no checkpoint at", "index.json is missing"});
}

TEST(BadCheckpointTest, MissingDataFile) {
  const std::string dir = CopyOfPristine("missing");
  const std::string file = DataFile(dir, 1);
  fs::remove(fs::path(dir) / file);
  // At W = 3 every rank needs rank 1's file for 'g' (reloaded as column chunks).
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 3), {"failed on rank 0", "key 'g'", file, "is missing"});
}

TEST(BadCheckpointTest, TruncatedDataFile) {
  const std::string dir = CopyOfPristine("truncated");
  const std::string file = DataFile(dir, 1);
  const auto size = fs::file_size(fs::path(dir) / file);
  fs::resize_file(fs::path(dir) / file, size - 10);
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2), {"key 'g'", file, "is truncated",
                                                  absl::StrCat("it has ", size - 10, " bytes; the index expects ", size)});
}

TEST(BadCheckpointTest, FlippedByteIsAChecksumError) {
  const std::string dir = CopyOfPristine("flipped");
  const nlohmann::json index = ReadIndexJson(dir);
  // A byte in the middle of rank 1's shard of 'w'.
  const nlohmann::json& shard = index["tensors"][0]["shards"][1];
  ASSERT_EQ(index["tensors"][0]["key"], "w");
  const std::string file = shard["file"].get<std::string>();
  const int64_t middle = (shard["byte_range"][0].get<int64_t>() + shard["byte_range"][1].get<int64_t>()) / 2;
  std::ifstream in(JoinPath(dir, file), std::ios::binary);
  in.seekg(middle);
  char byte = static_cast<char>(in.get());
  in.close();
  Poke(JoinPath(dir, file), middle, std::string(1, static_cast<char>(byte ^ 0x01)));
  // Default: found while reading, reported everywhere.
  // The entry's name is derived, not stored: spelled for the message.
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2), {"key 'w'", file, "entry 'w/shard-1'", "checksum mismatch"},
                        /*untouched=*/false);
  // verify_before_write: found before any tensor changes.
  LoadOptions verify;
  verify.verify_before_write = true;
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2, Layout(), verify), {"key 'w'", file, "checksum mismatch"});
}

TEST(BadCheckpointTest, HeaderLengthLargerThanTheFile) {
  const std::string dir = CopyOfPristine("huge_header");
  const std::string file = DataFile(dir, 0);
  Poke(JoinPath(dir, file), 0, std::string("\x00\x00\x00\x00\x00\x10\x00\x00", 8));  // 2^44 bytes
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2), {file, "header length 17592186044416 is larger than the file"});
}

TEST(BadCheckpointTest, OverlappingOffsetsInAHeader) {
  const std::string dir = CopyOfPristine("overlap_header");
  const std::string file = DataFile(dir, 0);
  EditHeader(JoinPath(dir, file), [](nlohmann::json& h) {
    h["d"]["data_offsets"] = {0, 64};  // on top of 'w/shard-0'
  });
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2), {file, "'d'", "overlap"});
}

TEST(BadCheckpointTest, OutOfRangeOffsetsInAHeader) {
  const std::string dir = CopyOfPristine("range_header");
  const std::string file = DataFile(dir, 0);
  EditHeader(JoinPath(dir, file), [](nlohmann::json& h) { h["d"]["data_offsets"] = {100000, 100064}; });
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2), {file, "'d'", "out of range"});
}

TEST(BadCheckpointTest, OverlappingByteRangesInTheIndex) {
  const std::string dir = CopyOfPristine("overlap_index");
  nlohmann::json index = ReadIndexJson(dir);
  nlohmann::json& dense = index["tensors"][2]["shards"][0];
  ASSERT_EQ(index["tensors"][2]["key"], "d");
  const int64_t w0 = index["tensors"][0]["shards"][0]["byte_range"][0].get<int64_t>();
  dense["byte_range"] = {w0, w0 + 64};
  WriteIndexJson(dir, index);
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2), {"key 'd'", "index.json", "overlap key 'w'"});
}

TEST(BadCheckpointTest, UnknownDtype) {
  const std::string dir = CopyOfPristine("dtype_index");
  nlohmann::json index = ReadIndexJson(dir);
  index["tensors"][0]["dtype"] = "F4";
  WriteIndexJson(dir, index);
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2), {"key 'w'", "index.json", "unknown dtype 'F4'"});
  // A dtype a newer LibTorch has (float8 on 1.13): every rank says which release.
  const std::string why = UnavailableDtypeMessage("F8_E4M3");
  if (!why.empty()) {
    const std::string dir3 = CopyOfPristine("dtype_newer");
    nlohmann::json newer = ReadIndexJson(dir3);
    newer["tensors"][0]["dtype"] = "F8_E4M3";
    WriteIndexJson(dir3, newer);
    ExpectFailsEverywhere(LoadOnEveryRank(dir3, 2), {"key 'w'", "index.json", why});
  }

  const std::string dir2 = CopyOfPristine("dtype_header");
  const std::string file = DataFile(dir2, 0);
  EditHeader(JoinPath(dir2, file), [](nlohmann::json& h) { h["d"]["dtype"] = "Q4"; });
  ExpectFailsEverywhere(LoadOnEveryRank(dir2, 2), {file, "'d'", "unknown dtype 'Q4'"});
}

TEST(BadCheckpointTest, ShapeMismatches) {
  const std::string dir = CopyOfPristine("shape");
  std::vector<TensorSpec> bigger = Layout();
  bigger[0].sizes = {11, 4};
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2, bigger), {"size mismatch for key \"w\": the checkpoint has [10, 4], the tensor to fill has [11, 4]"});
  std::vector<TensorSpec> other_dtype = Layout();
  other_dtype[2].dtype = c10::ScalarType::Double;
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2, other_dtype), {"dtype mismatch for key \"d\": the checkpoint has Float, the tensor to fill has Double"});
  // The header and the index disagree on an entry's shape (same byte count).
  const std::string file = DataFile(dir, 0);
  EditHeader(JoinPath(dir, file), [](nlohmann::json& h) { h["d"]["shape"] = {16}; });
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2), {file, "entry 'd'", "disagrees with the index"});
}

TEST(BadCheckpointTest, NewerFormatVersion) {
  const std::string dir = CopyOfPristine("newer");
  nlohmann::json index = ReadIndexJson(dir);
  index["version"] = kFormatVersion + 1;
  WriteIndexJson(dir, index);
  const auto outcomes = LoadOnEveryRank(dir, 2);
  ExpectFailsEverywhere(outcomes, {"index.json", "format version 2", "upgrade shardlight"});
  EXPECT_EQ(outcomes[0].code, absl::StatusCode::kFailedPrecondition);
}

TEST(BadCheckpointTest, KeysAndFilesThatEscapeTheDirectory) {
  const std::string dir = CopyOfPristine("escape_key");
  nlohmann::json index = ReadIndexJson(dir);
  index["tensors"][2]["key"] = "../../d";
  WriteIndexJson(dir, index);
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2), {"index.json", "'../../d'"});

  const std::string dir2 = CopyOfPristine("escape_file");
  index = ReadIndexJson(dir2);
  const std::string outside = "../" + fs::path(dir2).filename().string() + "/" + DataFile(dir2, 0);
  index["files"][0]["name"] = outside;
  for (auto& t : index["tensors"]) {
    for (auto& s : t["shards"]) {
      if (s["file"] == DataFile(dir2, 0)) s["file"] = outside;
    }
  }
  WriteIndexJson(dir2, index);
  ExpectFailsEverywhere(LoadOnEveryRank(dir2, 2), {"index.json", "not a plain name"});

  // The state dict to fill may not carry such keys either.
  std::vector<TensorSpec> layout = Layout();
  layout.push_back({"a/b", {1}, c10::ScalarType::Float, std::nullopt});
  ExpectFailsEverywhere(LoadOnEveryRank(CopyOfPristine("escape_fill"), 2, layout), {"'a/b'", "path separator"});
}

TEST(BadCheckpointTest, ShardsThatDoNotCoverATensor) {
  const std::string dir = CopyOfPristine("gap");
  nlohmann::json index = ReadIndexJson(dir);
  ASSERT_EQ(index["tensors"][1]["key"], "g");
  index["tensors"][1]["shards"].erase(3);
  WriteIndexJson(dir, index);
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2), {"key 'g'", "index.json", "do not tile the tensor", "gap"});
}

TEST(BadCheckpointTest, CorruptIndexJson) {
  const std::string dir = CopyOfPristine("corrupt_index");
  fs::resize_file(fs::path(dir) / kIndexFileName, 100);
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2), {"index.json", "parse error at line 5"});
}

// Issue 15, defect 1: a FIFO in place of the index or a data file made open(2)
// wait for a writer forever. The load now fails at once on every rank.
TEST(BadCheckpointTest, FifoInPlaceOfAFileFailsAtOnce) {
  const std::string dir = CopyOfPristine("fifo_index");
  fs::remove(fs::path(dir) / kIndexFileName);
  ASSERT_EQ(::mkfifo(JoinPath(dir, kIndexFileName).c_str(), 0644), 0);
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2), {"index.json", "is a FIFO, not a regular file"});

  const std::string dir2 = CopyOfPristine("fifo_data");
  const std::string file = DataFile(dir2, 1);
  fs::remove(fs::path(dir2) / file);
  ASSERT_EQ(::mkfifo(JoinPath(dir2, file).c_str(), 0644), 0);
  ExpectFailsEverywhere(LoadOnEveryRank(dir2, 2), {file, "is a FIFO, not a regular file"});

  const std::string dir3 = CopyOfPristine("dir_data");
  fs::remove(fs::path(dir3) / file);
  fs::create_directory(fs::path(dir3) / file);
  ExpectFailsEverywhere(LoadOnEveryRank(dir3, 2), {file, "is a directory, not a regular file"});
}

// Issue 28: an index.json that is there but cannot be read -- each kind, at
// several world sizes -- is a committed checkpoint whose load fails on every
// rank naming the entry and why (never NotFound, "no checkpoint here"), and
// neither the load nor the cleanup a resume runs changes a file.
class BrokenIndexTest : public ::testing::TestWithParam<std::tuple<testing::BrokenEntry, int>> {};

TEST_P(BrokenIndexTest, IsACheckpointThatFailsOnEveryRankAndNothingChanges) {
  const auto [kind, world] = GetParam();
  const std::string dir = CopyOfPristine(absl::StrCat("broken_", testing::BrokenEntryName(kind), "_", world));
  const std::string index = JoinPath(dir, kIndexFileName);
  const std::string why = testing::BreakEntry(index, kind);
  LoadOptions options;
  if (kind == testing::BrokenEntry::kUnreadable) options.storage = testing::UnreadableThrough(index);
  const auto before = testing::DirectorySnapshot(dir);
  EXPECT_TRUE(HasCommittedCheckpoint(dir, options.storage.get())) << "a broken index is not 'no checkpoint'";
  const std::vector<Outcome> outcomes = LoadOnEveryRank(dir, world, Layout(), options);
  ExpectFailsEverywhere(outcomes, {index, why});
  for (const Outcome& o : outcomes) EXPECT_NE(o.code, absl::StatusCode::kNotFound) << o.message;
  EXPECT_FALSE(RemoveUnreferencedFiles(dir, options.storage.get()).ok());
  EXPECT_EQ(testing::DirectorySnapshot(dir), before);
}

INSTANTIATE_TEST_SUITE_P(EveryKind, BrokenIndexTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kBrokenEntries), ::testing::Values(1, 2, 3)),
                         [](const auto& info) {
                           return absl::StrCat(testing::BrokenEntryName(std::get<0>(info.param)), "_w",
                                               std::get<1>(info.param));
                         });

// Issue 15, defect 3: a data file holding an entry the index does not list
// (an index emptied of a tensor) is refused, naming the entry.
TEST(BadCheckpointTest, EntriesTheIndexDoesNotListAreRefused) {
  const std::string dir = CopyOfPristine("unlisted_entry");
  nlohmann::json index = ReadIndexJson(dir);
  ASSERT_EQ(index["tensors"][2]["key"], "d");
  index["tensors"].erase(2);
  WriteIndexJson(dir, index);
  std::vector<TensorSpec> layout = Layout();
  layout.pop_back();  // 'd' is not asked for either
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2, layout),
                        {DataFile(dir, 0), "holds 4 entries; the index lists 3", "entry 'd' is not in the index"});
}

// Issue 15, defect 3: __metadata__ must say which rank wrote the file.
TEST(BadCheckpointTest, MetadataOfAnotherRankIsRefused) {
  const std::string dir = CopyOfPristine("metadata_rank");
  const std::string path = JoinPath(dir, DataFile(dir, 0));
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = bytes.find("\"rank\":\"0\"");
  ASSERT_NE(at, std::string::npos);
  Poke(path, static_cast<int64_t>(at), "\"rank\":\"1\"");
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2), {DataFile(dir, 0), "__metadata__ rank is '1'; expected '0'"});
}

// Issue 15, defect 3: a BOOL byte of 2 (checksum fixed up) loaded as true.
TEST(BadCheckpointTest, BoolBytesOtherThanZeroOrOneAreRefused) {
  const std::string dir = testing::FreshDir("bool_two");
  SimulatedCluster cluster(1, testing::Options());
  ASSERT_TRUE(cluster.Run([&](RankContext& ctx) -> absl::Status {
                StateDict state;
                state.Set("m", at::zeros({5}, at::kBool));
                return SaveCheckpoint(state, dir, *ctx.pg);
              }).ok());
  nlohmann::json index = ReadIndexJson(dir);
  nlohmann::json& shard = index["tensors"][0]["shards"][0];
  const int64_t begin = shard["byte_range"][0].get<int64_t>();
  Poke(JoinPath(dir, shard["file"].get<std::string>()), begin + 3, std::string(1, '\x02'));
  const char bytes[5] = {0, 0, 0, 2, 0};
  shard["crc32c"] = EncodeCrcHex({Crc32c(bytes, 5)});
  WriteIndexJson(dir, index);
  auto status = cluster.Run([&](RankContext& ctx) -> absl::Status {
    StateDict state;
    state.Set("m", at::zeros({5}, at::kBool));
    return LoadCheckpoint(state, dir, *ctx.pg);
  });
  EXPECT_THAT(std::string(status.message()), HasSubstr("BOOL byte 3 of the entry is 2, not 0 or 1"));
}

// Issue 15, defects 2 and 4: an index far larger than the data it could
// describe is refused before it is read.
TEST(BadCheckpointTest, IndexOutOfProportionToTheDataIsRefusedUnread) {
  const std::string dir = CopyOfPristine("huge_index");
  std::ofstream(JoinPath(dir, kIndexFileName)) << std::string(size_t{3} << 20, '[');
  const auto outcomes = LoadOnEveryRank(dir, 2);
  ExpectFailsEverywhere(outcomes, {"index.json", "has 3145728 bytes, more than an index of a checkpoint with",
                                   "refused unread"});
  EXPECT_EQ(outcomes[0].code, absl::StatusCode::kFailedPrecondition);
}

// At save: bad keys and ranks that disagree fail everywhere and write nothing.
TEST(BadSaveTest, BadKeysAndDisagreeingRanksWriteNothing) {
  // A key that is not UTF-8 cannot be stored in JSON: without the check, rank
  // 0 (which writes dense tensors) would throw while writing its header.
  const std::vector<std::string> needles = {"'../evil'", "ranks disagree on the state dict",
                                            "failed on rank 0: state dict key 'w\\xff' is not valid UTF-8"};
  for (int variant = 0; variant < 3; ++variant) {
    const std::string dir = testing::FreshDir(absl::StrCat("bad_save", variant));
    SimulatedCluster cluster(2, testing::Options());
    auto messages = cluster.Run([&](RankContext& ctx) -> std::string {
      StateDict state;
      state.Set("ok", at::ones({2}));
      if (variant == 0) state.Set("../evil", at::ones({2}));
      if (variant == 1 && ctx.rank == 1) state.Set("only_on_rank_1", at::ones({2}));
      if (variant == 2) state.Set("w\xff", at::ones({2}));
      return std::string(SaveCheckpoint(state, dir, *ctx.pg).message());
    });
    ASSERT_TRUE(messages.ok()) << messages.status();
    for (const std::string& m : *messages) {
      EXPECT_EQ(m, (*messages)[0]);
      EXPECT_THAT(m, HasSubstr(needles[variant]));
    }
    EXPECT_TRUE(fs::is_empty(dir)) << "variant " << variant;  // no data, index or .tmp file
  }
}

TEST(BadCheckpointTest, KeysToFillThatAreNotUtf8) {
  std::vector<TensorSpec> layout = Layout();
  layout.push_back({"d\xc0\xae", {1}, c10::ScalarType::Float, std::nullopt});  // an overlong '.'
  ExpectFailsEverywhere(LoadOnEveryRank(CopyOfPristine("utf8_fill"), 2, layout),
                        {"failed on rank 0", "state dict key 'd\\xc0\\xae' is not valid UTF-8"});
}

// A hostile index cannot make a rank allocate more than LoadOptions::buffer_bytes.
TEST(BadCheckpointTest, ChecksumBlocksLargerThanTheCapOrTheBuffer) {
  const std::string dir = CopyOfPristine("huge_blocks");
  nlohmann::json index = ReadIndexJson(dir);
  index["checksum"]["block_bytes"] = int64_t{1} << 30;  // the old limit: 4 GiB of buffer per rank
  for (auto& t : index["tensors"]) {
    for (auto& s : t["shards"]) {
      if (s["byte_range"][0] != s["byte_range"][1]) s["crc32c"] = "00000000";  // one block per shard
    }
  }
  WriteIndexJson(dir, index);
  ExpectFailsEverywhere(LoadOnEveryRank(dir, 2), {"failed on rank 0", "index.json", "checksum.block_bytes = 1073741824"});

  // Within the cap, the buffer must still hold 4 blocks (64 B here).
  LoadOptions small;
  small.buffer_bytes = 255;
  ExpectFailsEverywhere(LoadOnEveryRank(CopyOfPristine("small_buffer"), 2, Layout(), small),
                        {"failed on rank 0", "index.json", "checksum block size 64 needs a read buffer of 4 blocks",
                         "LoadOptions::buffer_bytes is 255"});
  small.buffer_bytes = 256;
  for (const Outcome& o : LoadOnEveryRank(CopyOfPristine("small_buffer_ok"), 2, Layout(), small)) {
    EXPECT_EQ(o.code, absl::StatusCode::kOk) << o.message;
  }
}

// An exception on one rank while copying (here: a destination whose elements
// alias, which copy_ refuses) is that rank's error on every rank, not a hang.
TEST(BadCheckpointTest, ExceptionWhileCopyingFailsEveryRank) {
  const std::string dir = CopyOfPristine("throwing_copy");
  SimulatedCluster cluster(2, testing::Options());
  auto outcomes = cluster.Run([&](RankContext& ctx) -> absl::StatusOr<std::string> {
    auto state = MakeState(Layout(), -1, ctx.pg);
    if (!state.ok()) return state.status();
    if (ctx.rank == 1) state->Set("d", at::zeros({1}, at::kFloat).expand({4, 4}));
    return std::string(LoadCheckpoint(*state, dir, *ctx.pg).message());
  });
  ASSERT_TRUE(outcomes.ok()) << outcomes.status();
  for (const std::string& m : *outcomes) {
    EXPECT_EQ(m, (*outcomes)[0]);
    EXPECT_THAT(m, HasSubstr("failed on rank 1: LibTorch error: "));
    EXPECT_THAT(m, ::testing::Not(HasSubstr("Exception raised from")));  // no backtrace
  }
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint
