// The DCP reader on a directory real torch 2.15 wrote (testdata/README.md):
// loads at several world sizes bit-equal to Python's tensors, its values,
// and damaged copies of it, each a clear error naming what is wrong.
#include "sharded/checkpoint/interop/dcp/dcp_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/checkpoint.h"
#include "sharded/checkpoint/interop/pytorch/torch_file.h"
#include "sharded/dtype_table.h"
#include "sharded/factories.h"
#include "sharded/state_dict.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::sharded::checkpoint::dcp {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const char kFixture[] = "sharded/checkpoint/interop/dcp/testdata/w4";

const char kDtypesFixture[] = "sharded/checkpoint/interop/dcp/testdata/dtypes_w2";

std::vector<std::pair<std::string, at::Tensor>> Reference(const std::string& fixture = kFixture) {
  auto file = pytorch::TorchFile::Open(fixture + "/reference.pt");
  EXPECT_TRUE(file.ok()) << file.status();
  auto sel = pytorch::SelectEntries((*file)->graph(), {});
  EXPECT_TRUE(sel.ok()) << sel.status();
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& t : sel->tensors) out.emplace_back(t.key, (*file)->Tensor(t.node, t.key)->contiguous().clone());
  return out;
}

bool BitEqual(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const at::Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
}

// A copy of the fixture to damage.
std::string Copy() {
  static int n = 0;
  const fs::path dir = fs::path(testing::TempDir()) / ("dcp" + std::to_string(n++));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(kFixture)) fs::copy_file(e.path(), dir / e.path().filename());
  return dir.string();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(DcpCheckpointTest, MetadataListsEveryKeyInSaveOrder) {
  auto md = ReadDcpMetadata(kFixture, PosixStorage());
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_EQ(md->version, "1.0.0");
  std::vector<std::string> keys;
  for (const DcpTensor& t : md->tensors) keys.push_back(t.key);
  EXPECT_THAT(keys, ::testing::UnorderedElementsAre("emb.weight", "proj.weight", "proj.bias", "few", "counts", "mask",
                                                    "norm.scale", "half", "i32", "i16", "i8", "u8", "scalar", "grid"));
  auto find = [&](const std::string& key) -> const DcpTensor& {
    for (const DcpTensor& t : md->tensors) {
      if (t.key == key) return t;
    }
    ADD_FAILURE() << "no key " << key;
    return md->tensors.front();
  };
  const DcpTensor& emb = find("emb.weight");
  EXPECT_EQ(emb.size, (std::vector<int64_t>{37, 8}));
  ASSERT_EQ(emb.chunks.size(), 4u);  // torch.chunk rows 10, 10, 10, 7
  EXPECT_EQ(emb.chunks[3].offsets, (std::vector<int64_t>{30, 0}));
  EXPECT_EQ(emb.chunks[3].sizes, (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(emb.chunks[3].item.file, "__3_0.distcp");
  EXPECT_EQ(find("grid").chunks.size(), 4u);  // the (2, 2) mesh's tiles
  EXPECT_EQ(find("half").chunks.size(), 1u);  // a plain tensor: one chunk
  auto values = ReadDcpValues(kFixture, PosixStorage(), *md);
  ASSERT_TRUE(values.ok()) << values.status();
  std::string lines;
  for (const auto& v : *values) lines += v.key + " = " + v.repr + "\n";
  EXPECT_EQ(lines, ReadAll(std::string(kFixture) + "/values.txt"));
  for (const auto& v : *values) {
    if (v.key == "step") {
      EXPECT_EQ(v.integer, 42);
    }
  }
}

// Loads at W' ranks, sharded where a ShardedTensor can hold the dtype, and
// checks every tensor against Python's.
void LoadAndCheck(const std::string& dir, int world, const std::string& fixture = kFixture) {
  const auto ref = Reference(fixture);
  simulate::SimulatedCluster cluster(world);
  absl::Status s = cluster.Run([&](simulate::RankContext& ctx) -> absl::Status {
    StateDict fill;
    for (const auto& [key, full] : ref) {
      if (full.dim() >= 1 && IsSupportedDtype(full.scalar_type())) {
        auto st = Zeros(ChunkShardingSpec::OnRanks(full.dim() - 1, world), full.sizes().vec(),
                        {full.scalar_type(), false}, ctx.pg);
        if (!st.ok()) return st.status();
        if (absl::Status i = fill.Insert(key, *std::move(st)); !i.ok()) return i;
      } else if (absl::Status i = fill.Insert(key, at::zeros(full.sizes(), full.options())); !i.ok()) {
        return i;
      }
    }
    LoadStats stats;
    if (absl::Status l = LoadCheckpoint(fill, dir, *ctx.pg, {}, &stats); !l.ok()) return l;
    for (const auto& [key, full] : ref) {
      const StateValue* v = fill.Find(key);
      at::Tensor got = std::holds_alternative<at::Tensor>(*v) ? std::get<at::Tensor>(*v)
                                                              : *std::get<ShardedTensor>(*v).FullTensor();
      if (!BitEqual(got, full)) return absl::InternalError("key '" + key + "' differs");
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << "W'=" << world << ": " << s;
}

TEST(DcpCheckpointTest, LoadsAtOtherWorldSizesBitEqual) {
  for (int world : {1, 2, 3, 5}) LoadAndCheck(kFixture, world);
}

// Each of 2 ranks loads `key` alone into a float32 tensor of `sizes` full of
// 7s: every rank's status (the test fails if a destination changed).
std::vector<absl::Status> LoadOfOneKeyOnTwoRanks(const std::string& dir, const std::string& key,
                                                 const std::vector<int64_t>& sizes) {
  simulate::SimulatedCluster cluster(2);
  std::vector<absl::Status> got(2);
  absl::Status s = cluster.Run([&](simulate::RankContext& ctx) -> absl::Status {
    StateDict fill;
    at::Tensor t = at::full(sizes, 7.0);
    (void)fill.Insert(key, t);
    LoadOptions options;
    options.keys = {key};
    options.strict = false;
    got[ctx.rank] = LoadCheckpoint(fill, dir, *ctx.pg, options);
    if (!at::equal(t, at::full(sizes, 7.0))) return absl::InternalError("the destination changed");
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  return got;
}

// Every dtype real torch 2.x's DCP wrote, strided payloads included: bit-equal
// where this LibTorch has the dtypes; else every rank fails naming the key
// and the dtype, and no destination changes.
TEST(DcpCheckpointTest, EveryDtypeTorchWroteLoadsOrIsRefusedByName) {
  const std::string why = UnavailableDtypeMessage("uint16");  // the first key .metadata lists
  if (why.empty()) {
    for (int world : {1, 3}) LoadAndCheck(kDtypesFixture, world, kDtypesFixture);
    return;
  }
  for (const absl::Status& r : LoadOfOneKeyOnTwoRanks(kDtypesFixture, "float32", {9, 5})) {
    EXPECT_FALSE(r.ok());
    EXPECT_THAT(std::string(r.message()), HasSubstr("key 'uint16'"));
    EXPECT_THAT(std::string(r.message()), HasSubstr(why));
  }
}

absl::Status LoadStatus(const std::string& dir) {
  auto reader = OpenDcpCheckpoint(dir, PosixStorage());
  if (!reader.ok()) return reader.status();
  return reader->CheckEveryFile();
}

TEST(DcpCheckpointTest, AClassOutsideTheWhitelistIsRefusedByName) {
  const std::string dir = Copy();
  std::string md = ReadAll(dir + "/.metadata");
  // The class name StorageMeta alone (SHORT_BINUNICODE of 11 bytes), not
  // the "StorageMeta" inside TensorStorageMetadata.
  const size_t at = md.find("\x8c\x0bStorageMeta");
  ASSERT_NE(at, std::string::npos);
  md.replace(at + 2, 11, "StorageMetX");
  WriteAll(dir + "/.metadata", md);
  absl::Status s = LoadStatus(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("torch.distributed.checkpoint.metadata.StorageMetX"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("nothing was run"));
}

TEST(DcpCheckpointTest, TruncatedMetadataIsAnErrorNamingTheFile) {
  const std::string dir = Copy();
  const std::string md = ReadAll(dir + "/.metadata");
  for (size_t n : {size_t{0}, size_t{1}, md.size() / 2, md.size() - 1}) {
    WriteAll(dir + "/.metadata", md.substr(0, n));
    absl::Status s = LoadStatus(dir);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_THAT(std::string(s.message()), HasSubstr(".metadata")) << n;
  }
}

// Bytes after the pickle's STOP (torch's pickle.load would ignore them): an
// error naming the file and how many; the untouched file loads.
TEST(DcpCheckpointTest, BytesAfterTheMetadataPickleAreAnErrorNamingTheFile) {
  const std::string dir = Copy();
  const std::string md = ReadAll(dir + "/.metadata");
  EXPECT_TRUE(LoadStatus(dir).ok());
  for (const std::string& tail : {std::string(1, '\0'), std::string("garbage appended"), md}) {
    WriteAll(dir + "/.metadata", md + tail);
    absl::Status s = LoadStatus(dir);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << tail.size();
    EXPECT_THAT(std::string(s.message()), HasSubstr(dir + "/.metadata")) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(absl::StrCat(tail.size(), " bytes after the pickle's STOP"))) << s;
  }
}

TEST(DcpCheckpointTest, TruncatedOrMissingDataFilesNameTheFileAndKey) {
  const std::string dir = Copy();
  const std::string data = ReadAll(dir + "/__3_0.distcp");
  WriteAll(dir + "/__3_0.distcp", data.substr(0, data.size() - 100));
  absl::Status s = LoadStatus(dir);
  EXPECT_THAT(std::string(s.message()), HasSubstr("__3_0.distcp"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("key '"));
  fs::remove(dir + "/__3_0.distcp");
  s = LoadStatus(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("__3_0.distcp"));
}

TEST(DcpCheckpointTest, DamagedPayloadsAreErrorsNotWrongValues) {
  const std::string dir = Copy();
  std::string data = ReadAll(dir + "/__1_0.distcp");
  // Every zip end record of the file's payloads broken: each payload is
  // then not a torch.save archive.
  for (size_t at = data.find("PK\x05\x06"); at != std::string::npos; at = data.find("PK\x05\x06", at + 1)) data[at] = 'X';
  WriteAll(dir + "/__1_0.distcp", data);
  absl::Status s = LoadStatus(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("__1_0.distcp"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("no zip end record"));
}

// Loads `key` alone into a dense tensor on one rank.
absl::StatusOr<at::Tensor> LoadOneKey(const std::string& dir, const std::string& key, const at::Tensor& like) {
  simulate::SimulatedCluster cluster(1);
  at::Tensor dst = at::zeros(like.sizes(), like.options());
  absl::Status s = cluster.Run([&](simulate::RankContext& ctx) -> absl::Status {
    StateDict fill;
    if (absl::Status i = fill.Insert(key, dst); !i.ok()) return i;
    LoadOptions options;
    options.keys = {key};
    options.strict = false;
    return LoadCheckpoint(fill, dir, *ctx.pg, options);
  });
  if (!s.ok()) return s;
  return dst;
}

TEST(DcpCheckpointTest, ALoadLocatesOnlyThePayloadsOfTheKeysItReads) {
  const std::string dir = Copy();
  auto md = ReadDcpMetadata(dir, PosixStorage());
  ASSERT_TRUE(md.ok()) << md.status();
  // Two keys with a chunk each in one file: `kept` is loaded, `broken`'s
  // payload has its zip end record destroyed.
  const DcpTensor* kept = nullptr;
  const DcpChunk* broken = nullptr;
  std::string broken_key;
  for (const DcpTensor& a : md->tensors) {
    for (const DcpTensor& b : md->tensors) {
      if (&a == &b || a.chunks.size() != 1 || kept != nullptr) continue;
      for (const DcpChunk& c : b.chunks) {
        if (c.item.file == a.chunks[0].item.file && broken == nullptr) {
          kept = &a;
          broken = &c;
          broken_key = b.key;
        }
      }
    }
  }
  ASSERT_NE(kept, nullptr) << "no file holds chunks of two keys";
  const std::string path = dir + "/" + broken->item.file;
  std::string data = ReadAll(path);
  const std::string payload = data.substr(broken->item.offset, broken->item.length);
  const size_t end_record = payload.rfind("PK\x05\x06");
  ASSERT_NE(end_record, std::string::npos);
  data[broken->item.offset + end_record] = 'X';
  WriteAll(path, data);

  at::Tensor want;
  for (const auto& [key, full] : Reference()) {
    if (key == kept->key) want = full;
  }
  ASSERT_TRUE(want.defined()) << kept->key;
  auto got = LoadOneKey(dir, kept->key, want);
  ASSERT_TRUE(got.ok()) << kept->key << " (" << broken->item.file << " also holds the broken " << broken_key
                        << "): " << got.status();
  EXPECT_TRUE(BitEqual(*got, want)) << kept->key;
  // The broken payload is an error as soon as it is needed, naming its key and file.
  absl::Status s = LoadStatus(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("key '" + broken_key + "'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr(broken->item.file));
}

TEST(DcpCheckpointTest, LoadOfADamagedCheckpointFailsOnEveryRankAndWritesNothing) {
  const std::string dir = Copy();
  fs::remove(dir + "/__2_0.distcp");
  for (const absl::Status& r : LoadOfOneKeyOnTwoRanks(dir, "emb.weight", {37, 8})) {
    EXPECT_EQ(r.code(), absl::StatusCode::kNotFound) << r;
    EXPECT_THAT(std::string(r.message()), HasSubstr("__2_0.distcp"));
  }
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint::dcp
