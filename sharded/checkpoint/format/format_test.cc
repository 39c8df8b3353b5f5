// The pieces of the on-disk format: names, dtypes, safetensors headers, the
// index and its validation, row-major tiles.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <stdexcept>

#include <c10/util/Exception.h>

#include "absl/strings/match.h"
#include "sharded/checkpoint/format/dtype_names.h"
#include "sharded/checkpoint/format/file_names.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/format/names.h"
#include "sharded/checkpoint/storage/posix_file.h"
#include "sharded/checkpoint/format/row_major_tiles.h"
#include "sharded/checkpoint/format/safetensors.h"

namespace shardlight::sharded::checkpoint {
namespace {

using ::testing::HasSubstr;

IndexShard MakeShard(Box box, int rank, std::optional<std::string> file, std::optional<std::string> entry,
                     int64_t begin, int64_t end, BlockCrcs crcs) {
  IndexShard s;
  static_cast<Box&>(s) = std::move(box);
  s.rank = rank;
  s.set_named_file(std::move(file));
  s.set_named_entry(std::move(entry));
  s.begin = begin;
  s.end = end;
  s.block_crcs = std::move(crcs);
  return s;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return JoinPath(dir ? dir : "/tmp", name);
}

TEST(NamesTest, KeysThatCouldNamePathsAreRefused) {
  for (const char* ok : {"w", "encoder.layer0.weight", "a-b_c.1", "x.y:z"}) EXPECT_TRUE(ValidateKey(ok).ok()) << ok;
  for (const char* bad : {"", "../x", "a/b", "..", "a..b", "a\\b", "/abs"}) {
    absl::Status s = ValidateKey(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(std::string(ValidateKey("a/../../etc").message()), HasSubstr("'a/../../etc'"));
  EXPECT_FALSE(ValidateKey(std::string("a\nb")).ok());
  EXPECT_FALSE(ValidateKey(std::string(1025, 'k')).ok());
  for (const char* ok : {"data-1-r00000.safetensors", "index.json"}) EXPECT_TRUE(ValidateFileName(ok).ok()) << ok;
  for (const char* bad : {"", ".", "..", "../x", "a/b", ".hidden", "x y"}) EXPECT_FALSE(ValidateFileName(bad).ok()) << bad;
}

TEST(NamesTest, KeysMustBeStrictUtf8) {
  // Valid: ASCII, 2-, 3- and 4-byte forms at the edges of their ranges.
  for (const char* ok : {"poids.\xc3\xa9", "\xc2\x80", "\xe0\xa0\x80", "\xed\x9f\xbf", "\xee\x80\x80",
                         "\xef\xbf\xbf", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf", "\xe6\x9d\x83\xe9\x87\x8d"}) {
    EXPECT_TRUE(IsValidUtf8(ok)) << Quote(ok);
    EXPECT_TRUE(ValidateKey(ok).ok()) << Quote(ok);
  }
  struct Bad {
    const char* text;
    size_t offset;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"w\xff", 1},                  // never a UTF-8 byte
           {"\x80", 0},                   // lone continuation byte
           {"a\xc3", 1},                  // truncated 2-byte form
           {"\xe6\x9d", 0},              // truncated 3-byte form
           {"\xc0\xaf", 0},              // overlong '/'
           {"\xc1\xbf", 0},              // overlong
           {"\xe0\x80\xaf", 0},         // overlong 3-byte
           {"\xf0\x80\x80\xaf", 0},    // overlong 4-byte
           {"x\xed\xa0\x80", 1},        // surrogate U+D800
           {"\xed\xbf\xbf", 0},         // surrogate U+DFFF
           {"\xf4\x90\x80\x80", 0},    // U+110000
           {"\xf5\x80\x80\x80", 0},    // beyond any code point
           {"\xc3\xa9\xc3(", 2}}) {      // bad continuation after a good character
    size_t offset = 99;
    EXPECT_FALSE(IsValidUtf8(bad.text, &offset)) << Quote(bad.text);
    EXPECT_EQ(offset, bad.offset) << Quote(bad.text);
    absl::Status s = ValidateKey(bad.text);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << Quote(bad.text);
    EXPECT_THAT(std::string(s.message()), HasSubstr("not valid UTF-8")) << Quote(bad.text);
  }
  // The key is named, escaped: the message itself is printable ASCII.
  EXPECT_EQ(ValidateKey("w\xff").message(), "state dict key 'w\\xff' is not valid UTF-8 (bad byte at offset 1)");
}

TEST(NamesTest, DtypeNamesAreSafetensorsSpellings) {
  EXPECT_EQ(DtypeName(c10::ScalarType::Float), "F32");
  EXPECT_EQ(DtypeName(c10::ScalarType::Double), "F64");
  EXPECT_EQ(DtypeName(c10::ScalarType::BFloat16), "BF16");
  EXPECT_EQ(DtypeName(c10::ScalarType::Long), "I64");
  EXPECT_EQ(DtypeName(c10::ScalarType::Bool), "BOOL");
  EXPECT_EQ(DtypeName(c10::ScalarType::ComplexFloat), "C64");
  EXPECT_EQ(DtypeName(c10::ScalarType::ComplexDouble), "C128");
  EXPECT_EQ(DtypeName(c10::ScalarType::QInt8), "");
  EXPECT_EQ(DtypeFromName("C64"), c10::ScalarType::ComplexFloat);
  EXPECT_THAT(UnknownDtypeMessage("Q4"), HasSubstr("unknown dtype 'Q4'"));
  EXPECT_EQ(DtypeFromName("BF16"), c10::ScalarType::BFloat16);
  EXPECT_FALSE(DtypeFromName("f32").has_value());
  EXPECT_FALSE(DtypeFromName("Q4").has_value());
}

TEST(FileNamesTest, GenerationsAreFreshAndNamesRecognised) {
  const std::string a = NewGeneration(), b = NewGeneration();
  EXPECT_NE(a, b);
  EXPECT_EQ(a.size(), 16u);
  EXPECT_TRUE(ValidateFileName(DataFileName(a, 3)).ok());
  EXPECT_FALSE(ValidateFileName(TempDataFileName(a, 3)).ok());  // an index can never name a temp file
  EXPECT_TRUE(IsCheckpointFileName(DataFileName(a, 3)));
  EXPECT_TRUE(IsCheckpointFileName(TempIndexFileName(a)));
  EXPECT_TRUE(IsCheckpointFileName(TempDataFileName(a, 12)));
  EXPECT_FALSE(IsCheckpointFileName("index.json"));
  EXPECT_FALSE(IsCheckpointFileName("notes.txt"));
  // Other tools' files in the same directory are never taken for leftovers.
  EXPECT_FALSE(IsCheckpointFileName("data-00001-of-00002.safetensors"));
  EXPECT_FALSE(IsCheckpointFileName("data-model.safetensors"));
  EXPECT_FALSE(IsCheckpointFileName("data-" + a + "-r00001.safetensors.bak"));
  EXPECT_FALSE(IsCheckpointFileName(".tmp-notes"));
}

// Writes `header` plus `data_bytes` zero bytes to a file and reads it back.
absl::StatusOr<SafetensorsHeader> RoundTrip(const std::string& header, int64_t data_bytes, const std::string& name) {
  const std::string path = TempPath(name);
  RemoveFile(path).IgnoreError();
  {
    std::ofstream out(path, std::ios::binary);
    out << header << std::string(static_cast<size_t>(data_bytes), '\0');
  }
  auto file = File::OpenForRead(path);
  if (!file.ok()) return file.status();
  return ReadSafetensorsHeader(*file, *file->Size(), name);
}

std::string RawHeader(const std::string& json) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xFF);
  return out + json;
}

TEST(SafetensorsTest, EncodeThenReadRoundTrips) {
  std::vector<SafetensorsEntry> entries = {{"a", "F32", {2, 3}, 0, 0}, {"b/shard-0", "BOOL", {0}, 0, 0},
                                           {"c", "BF16", {}, 0, 0}};
  auto data = AssignDataOffsets(entries);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(*data, 24 + 0 + 2);
  const std::string header = EncodeSafetensorsHeader(entries, {{"format", "x"}});
  EXPECT_EQ(header.size() % 8, 0u);
  auto read = RoundTrip(header, *data, "roundtrip.safetensors");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->data_start(), static_cast<int64_t>(header.size()));
  EXPECT_EQ(read->metadata.at("format"), "x");
  ASSERT_EQ(read->entries.size(), 3u);
  const SafetensorsEntry* c = read->Find("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->dtype, "BF16");
  EXPECT_TRUE(c->shape.empty());
  EXPECT_EQ(c->begin, 24);
  EXPECT_EQ(c->end, 26);
}

// A load checks a data file's header against the index without building the
// header: the writer's calls, on the text, say whether it is exactly what
// they would write. Any changed, missing or extra byte is a mismatch.
TEST(SafetensorsTest, AHeaderIsCheckedAgainstTheWritersSpelling) {
  std::vector<SafetensorsEntry> entries = {{"a", "F32", {2, 3}, 0, 0}, {"q\"uote\\d\n", "BOOL", {0}, 0, 0},
                                           {"c", "BF16", {}, 0, 0}, {"w/shard-12", "I64", {123456789, 1}, 0, 0}};
  ASSERT_TRUE(AssignDataOffsets(entries).ok());
  for (const std::map<std::string, std::string>& metadata :
       std::vector<std::map<std::string, std::string>>{{}, {{"format", "x"}, {"r\"ank", "1"}}}) {
    const std::string header = EncodeSafetensorsHeader(entries, metadata);
    auto matches = [&](absl::string_view text) {
      SafetensorsHeaderWriter check(text, metadata);
      for (const SafetensorsEntry& e : entries) check.Add(e.name, e.dtype, e.shape, e.begin, e.end);
      return std::move(check).Matches();
    };
    const std::string json = header.substr(8);
    EXPECT_TRUE(matches(json));
    for (size_t i = 0; i < json.size(); ++i) {
      std::string changed = json;
      changed[i] = changed[i] == '1' ? '2' : '1';
      EXPECT_FALSE(matches(changed)) << "byte " << i << " changed";
      EXPECT_FALSE(matches(absl::string_view(json).substr(0, i))) << "cut at " << i;
    }
    EXPECT_FALSE(matches(json + " "));
    EXPECT_FALSE(matches(json + "        "));
    // One entry fewer is a mismatch too.
    SafetensorsHeaderWriter fewer(json, metadata);
    for (size_t k = 0; k + 1 < entries.size(); ++k) {
      fewer.Add(entries[k].name, entries[k].dtype, entries[k].shape, entries[k].begin, entries[k].end);
    }
    EXPECT_FALSE(std::move(fewer).Matches());
  }
}

TEST(SafetensorsTest, HostileHeadersAreRefusedBeforeAllocation) {
  // A length far beyond the file: refused from the 8-byte prefix alone.
  std::string huge(8, '\0');
  huge[5] = 0x10;  // 2^44
  auto r = RoundTrip(huge + "{}", 0, "huge.safetensors");
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("header length 17592186044416 is larger than the file"));
  r = RoundTrip("abc", 0, "short.safetensors");
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("too short"));
  auto bad = [](const std::string& json, int64_t data) {
    auto h = RoundTrip(RawHeader(json), data, "bad.safetensors");
    return std::string(h.status().message());
  };
  // Syntax errors say where (issue 15, defect 5), raw bytes escaped.
  EXPECT_THAT(bad("{not json", 0), HasSubstr("parse error at line 1, column 3"));
  EXPECT_THAT(bad("{\"w\xff\":1", 0), ::testing::AllOf(HasSubstr("column 4"), HasSubstr("\\xff")));
  EXPECT_THAT(bad("[1]", 0), HasSubstr("header is not a JSON object"));
  EXPECT_THAT(bad(R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", 1), HasSubstr("unknown dtype 'Q4'"));
  EXPECT_THAT(bad(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 8), HasSubstr("need 8"));
  EXPECT_THAT(bad(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4), HasSubstr("out of range"));
  EXPECT_THAT(bad(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
              HasSubstr("overlap"));
  EXPECT_THAT(bad(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), HasSubstr("shape"));
  EXPECT_THAT(bad(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), HasSubstr("begin <= end"));
  EXPECT_THAT(bad(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8),
              HasSubstr("overflow"));
  EXPECT_THAT(bad(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}})", 8),
              HasSubstr("out of range"));
}

TEST(SafetensorsTest, HeaderLengthIsCheckedAgainstTheFile) {
  auto length = [](const std::string& bytes) -> absl::StatusOr<int64_t> {
    const std::string path = TempPath("length.safetensors");
    RemoveFile(path).IgnoreError();
    std::ofstream(path, std::ios::binary) << bytes;
    auto file = File::OpenForRead(path);
    if (!file.ok()) return file.status();
    int64_t read = 0;
    auto n = ReadSafetensorsHeaderLength(*file, *file->Size(), "f", &read);
    EXPECT_EQ(read, bytes.size() < 8 ? 0 : 8);  // the prefix, never the header
    return n;
  };
  EXPECT_EQ(*length(RawHeader("{}      ")), 8);
  EXPECT_EQ(*length(RawHeader("")), 0);
  EXPECT_THAT(std::string(length("abc").status().message()), HasSubstr("data file 'f': has 3 bytes, too short"));
  std::string huge(8, '\0');
  huge[7] = '\x80';  // 2^63: above INT64_MAX, as a signed value it would be negative
  EXPECT_THAT(std::string(length(huge + "{}").status().message()),
              HasSubstr("header length 9223372036854775808 is larger than the file (10 bytes)"));
  EXPECT_THAT(std::string(length(RawHeader("{}").substr(0, 9)).status().message()),
              HasSubstr("header length 2 is larger than the file (9 bytes)"));
}

// Random damage to a valid header (flipped bytes, cut text): every result is
// either an error or a header whose entries really lie inside the data,
// sized by dtype and shape, without overlap. Run under --config=asan too.
TEST(SafetensorsTest, DamagedHeadersAreErrorsOrStillConsistent) {
  std::vector<SafetensorsEntry> entries = {{"a", "F32", {2, 3}, 0, 0}, {"b", "I64", {4}, 0, 0}, {"c", "BOOL", {0}, 0, 0}};
  auto data = AssignDataOffsets(entries);
  ASSERT_TRUE(data.ok());
  const std::string json = EncodeSafetensorsHeader(entries, {{"k", "v"}}).substr(8);
  std::mt19937 rng(5);
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string damaged = json;
    if (trial % 3 == 0) {
      damaged.resize(rng() % damaged.size());
    } else {
      for (int k = 0; k < 1 + trial % 4; ++k) damaged[rng() % damaged.size()] = static_cast<char>(rng());
    }
    auto header = ParseSafetensorsHeader(damaged, *data, "damaged");
    if (!header.ok()) continue;
    ++accepted;
    int64_t end = 0;
    for (const SafetensorsEntry& e : header->entries) {
      ASSERT_TRUE(DtypeFromName(e.dtype).has_value());
      ASSERT_LE(e.begin, e.end);
      ASSERT_LE(e.end, *data);
      int64_t n = DtypeBytes(*DtypeFromName(e.dtype));
      for (int64_t d : e.shape) n *= d;
      ASSERT_EQ(e.end - e.begin, n);
      if (e.end > e.begin) {
        ASSERT_GE(e.begin, end) << "overlap accepted";
        end = e.end;
      }
    }
  }
  EXPECT_GT(accepted, 0);  // some damage is harmless (inside the metadata)
}

CheckpointIndex SmallIndex() {
  CheckpointIndex index;
  index.world_size = 2;
  index.generation = "0123456789abcdef";
  index.block_bytes = 64;
  index.files = {{"data-0123456789abcdef-r00000.safetensors", 0, 1000, 200}, {"data-0123456789abcdef-r00001.safetensors", 1, 1000, 200}};
  IndexTensor w;
  w.key = "w";
  w.sharded = true;
  w.dtype = c10::ScalarType::Float;
  w.shape = {10, 4};
  // Names unset: the ones FORMAT.md derives (IndexShard).
  w.shards = {MakeShard({{0, 0}, {5, 4}}, 0, std::nullopt, std::nullopt, 208, 288, {1, 2}),
              MakeShard({{5, 0}, {5, 4}}, 1, std::nullopt, std::nullopt, 208, 288, {3, 4})};
  IndexTensor b;
  b.key = "b";
  b.dtype = c10::ScalarType::Long;
  b.shape = {3};
  b.shards = {MakeShard({{0}, {3}}, 0, std::nullopt, std::nullopt, 288, 312, {0xdeadbeef})};
  index.tensors = {w, b};
  index.Reindex();
  return index;
}

TEST(IndexTest, SerializeThenParseRoundTrips) {
  const CheckpointIndex index = SmallIndex();
  ASSERT_TRUE(ValidateIndex(index, "x").ok()) << ValidateIndex(index, "x");
  auto parsed = ParseIndex(SerializeIndex(index), "index.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->world_size, 2);
  EXPECT_EQ(parsed->block_bytes, 64);
  ASSERT_NE(parsed->Find("w"), nullptr);
  EXPECT_TRUE(parsed->Find("w")->sharded);
  EXPECT_EQ(parsed->Find("w")->shards[1].block_crcs, (BlockCrcs{3, 4}));
  EXPECT_EQ(parsed->Find("b")->shards[0].block_crcs, (BlockCrcs{0xdeadbeef}));
  EXPECT_EQ(parsed->Find("b")->dtype, c10::ScalarType::Long);
  EXPECT_EQ(parsed->FindFile("data-0123456789abcdef-r00001.safetensors")->rank, 1);
  EXPECT_EQ(parsed->Find("nope"), nullptr);
}

// Whether `p` points into the `size` bytes of `object`.
bool Inside(const void* p, const void* object, size_t size) {
  const auto* b = static_cast<const char*>(object);
  const auto* q = static_cast<const char*>(p);
  return q >= b && q < b + size;
}

// A load decodes every shard of the index on every rank: a shard of up to 4
// dims and 2 checksum blocks keeps its box and checksums in the record itself,
// no heap block of its own.
TEST(IndexTest, SmallShardsHoldTheirBoxAndChecksumsInline) {
  auto parsed = ParseIndex(SerializeIndex(SmallIndex()), "index.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  int shards = 0;
  for (const IndexTensor& t : parsed->tensors) {
    for (const IndexShard& s : t.shards) {
      EXPECT_TRUE(Inside(s.offsets.data(), &s, sizeof(s))) << t.key;
      EXPECT_TRUE(Inside(s.sizes.data(), &s, sizeof(s))) << t.key;
      EXPECT_TRUE(Inside(s.block_crcs.data(), &s, sizeof(s))) << t.key;
      ++shards;
    }
  }
  EXPECT_EQ(shards, 3);
}

// More dims and checksum blocks than fit inline round-trip the same.
TEST(IndexTest, ShardsOfManyDimsAndBlocksRoundTrip) {
  CheckpointIndex index;
  index.world_size = 2;
  index.generation = "0123456789abcdef";
  index.block_bytes = 64;
  index.files = {{"data-0123456789abcdef-r00000.safetensors", 0, 1000, 200},
                 {"data-0123456789abcdef-r00001.safetensors", 1, 1000, 200}};
  IndexTensor t;
  t.key = "deep";
  t.sharded = true;
  t.dtype = c10::ScalarType::Float;
  t.shape = {2, 1, 1, 1, 2, 40};  // 6 dims; each shard 80 floats = 5 blocks of 64 bytes
  t.shards = {MakeShard({{0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 2, 40}}, 0, "data-0123456789abcdef-r00000.safetensors",
               "deep/shard-0", 208, 528, {1, 2, 3, 4, 5}),
              MakeShard({{1, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 2, 40}}, 1, "data-0123456789abcdef-r00001.safetensors",
               "deep/shard-1", 208, 528, {6, 7, 8, 9, 10})};
  index.tensors = {t};
  index.Reindex();
  ASSERT_TRUE(ValidateIndex(index, "x").ok()) << ValidateIndex(index, "x");
  auto parsed = ParseIndex(SerializeIndex(index), "index.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const IndexTensor* deep = parsed->Find("deep");
  ASSERT_NE(deep, nullptr);
  ASSERT_EQ(deep->shards.size(), 2u);
  EXPECT_EQ(deep->shards[1].offsets, (Dims{1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(deep->shards[1].sizes, (Dims{1, 1, 1, 1, 2, 40}));
  EXPECT_EQ(deep->shards[1].block_crcs, (BlockCrcs{6, 7, 8, 9, 10}));
  EXPECT_EQ(deep->shards[0].block_crcs, (BlockCrcs{1, 2, 3, 4, 5}));
  EXPECT_EQ(SerializeIndex(*parsed), SerializeIndex(index));
}

std::string Invalid(void (*edit)(CheckpointIndex&)) {
  CheckpointIndex index = SmallIndex();
  edit(index);
  auto parsed = ParseIndex(SerializeIndex(index), "index.json");
  return parsed.ok() ? "OK" : std::string(parsed.status().message());
}

TEST(IndexTest, InconsistentIndexesNameTheKey) {
  EXPECT_THAT(Invalid([](CheckpointIndex& i) { i.version = 2; }), HasSubstr("newer"));
  EXPECT_THAT(Invalid([](CheckpointIndex& i) { i.tensors[0].key = "../w"; }), HasSubstr("'../w'"));
  EXPECT_THAT(Invalid([](CheckpointIndex& i) { i.tensors[0].shards.pop_back(); }),
              ::testing::AllOf(HasSubstr("key 'w'"), HasSubstr("gap")));
  EXPECT_THAT(Invalid([](CheckpointIndex& i) { i.tensors[0].shards[1].offsets = {4, 0}; }),
              ::testing::AllOf(HasSubstr("key 'w'"), HasSubstr("overlaps")));
  EXPECT_THAT(Invalid([](CheckpointIndex& i) { i.tensors[1].shards[0].begin = 280; i.tensors[1].shards[0].end = 304; }),
              ::testing::AllOf(HasSubstr("key 'b'"), HasSubstr("overlap key 'w'")));
  EXPECT_THAT(Invalid([](CheckpointIndex& i) { i.tensors[1].shards[0].end = 2000; }), HasSubstr("out of range"));
  EXPECT_THAT(Invalid([](CheckpointIndex& i) { i.tensors[0].shards[0].set_named_file("../../etc/passwd"); }),
              HasSubstr("not in the file list"));
  EXPECT_THAT(Invalid([](CheckpointIndex& i) {
                i.files[0].name = "../x";
                i.tensors[0].shards[0].set_named_file("../x");
                i.tensors[1].shards[0].set_named_file("../x");
              }),
              HasSubstr("not a plain name"));
  EXPECT_THAT(Invalid([](CheckpointIndex& i) { i.tensors[0].shards[0].block_crcs = {1}; }), HasSubstr("checksums"));
  EXPECT_THAT(Invalid([](CheckpointIndex& i) { i.tensors[1].shape = {4}; }),
              ::testing::AllOf(HasSubstr("key 'b'"), HasSubstr("dense")));
  EXPECT_THAT(Invalid([](CheckpointIndex& i) { i.tensors[0].shards[1].rank = 2; }), HasSubstr("world size"));
  // Checksum blocks above the cap: a reader would allocate 4 of them.
  auto huge_blocks = [](CheckpointIndex& i) {
    i.block_bytes = kMaxBlockBytes + 64;
    for (IndexTensor& t : i.tensors) {
      for (IndexShard& s : t.shards) s.block_crcs = {0};
    }
  };
  EXPECT_THAT(Invalid(huge_blocks), ::testing::AllOf(HasSubstr("'index.json'"), HasSubstr("block_bytes = 67108928")));
  CheckpointIndex index = SmallIndex();
  huge_blocks(index);
  EXPECT_THAT(std::string(ValidateIndex(index, "x").message()), HasSubstr("checksum block size 67108928 is outside"));
  index.block_bytes = kMaxBlockBytes;
  EXPECT_TRUE(ValidateIndex(index, "x").ok()) << ValidateIndex(index, "x");
  EXPECT_EQ(Invalid([](CheckpointIndex&) {}), "OK");
}

// Issue 15, defect 2: N MiB of '[' cost ~85 bytes per byte before it was
// refused; now the nesting limit stops the parse at the ninth '['.
TEST(IndexTest, DeepNestingIsRefusedAtTheLimit) {
  const std::string brackets(size_t{4} << 20, '[');
  auto index = ParseIndex(brackets, "deep.json");
  EXPECT_EQ(index.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(index.status().message()), HasSubstr("nesting is deeper than 8 levels"));
  auto header = ParseSafetensorsHeader(brackets, 0, "deep.safetensors");
  EXPECT_THAT(std::string(header.status().message()), HasSubstr("nesting is deeper than 4 levels"));
  // Unknown members are skipped, but their nesting still counts.
  std::string text = UnsealIndex(SerializeIndex(SmallIndex()));
  text.insert(1, "\"future\": [[[[[[[[[[1]]]]]]]]]],");
  EXPECT_THAT(std::string(ParseIndex(text, "i").status().message()), HasSubstr("nesting is deeper than 8 levels"));
}

// Issue 15, defect 3: JSON that nlohmann's DOM accepted silently.
TEST(IndexTest, DuplicateKeysAndByteOrderMarksAreRefused) {
  const std::string text = UnsealIndex(SerializeIndex(SmallIndex()));
  std::string twice = text;
  twice.insert(1, "\"world_size\": 9,");
  EXPECT_THAT(std::string(ParseIndex(twice, "i").status().message()),
              HasSubstr("key 'world_size' appears twice in the object at the top level"));
  std::string shard_twice = text;
  shard_twice.replace(shard_twice.find("\"rank\":0,\"file\""), 9, "\"rank\":0,\"rank\":1,");
  EXPECT_THAT(std::string(ParseIndex(shard_twice, "i").status().message()),
              HasSubstr("key 'rank' appears twice in the object at '/tensors/[]/shards/[]'"));
  EXPECT_THAT(std::string(ParseIndex("\xEF\xBB\xBF" + text, "i").status().message()), HasSubstr("byte-order mark"));

  auto bad = [](const std::string& json) {
    return std::string(ParseSafetensorsHeader(json, 8, "h.safetensors").status().message());
  };
  const std::string entry = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  EXPECT_THAT(bad(absl::StrCat(R"({"a":)", entry, R"(,"a":)", entry, "}")), HasSubstr("key 'a' appears twice"));
  EXPECT_THAT(bad(absl::StrCat("\xEF\xBB\xBF{\"a\":", entry, "}")), HasSubstr("byte-order mark"));
  EXPECT_TRUE(ParseSafetensorsHeader(absl::StrCat(R"({"a":)", entry, "}"), 8, "h").ok());
}

// Issue 15, defect 3: the index carries a CRC32C of its own text.
TEST(IndexTest, IndexChecksumCatchesAnyChangedCharacter) {
  const std::string sealed = SerializeIndex(SmallIndex());
  ASSERT_THAT(sealed, HasSubstr("\n \"index_crc32c\": \""));
  ASSERT_TRUE(ParseIndex(sealed, "i").ok()) << ParseIndex(sealed, "i").status();
  // A flipped digit of a byte range and a changed letter of a key: both
  // still valid JSON and (the key) a valid index without the checksum.
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{{"[208,288]", "[208,289]"},
                                                                                {"\"key\": \"b\"", "\"key\": \"c\""}}) {
    std::string changed = sealed;
    ASSERT_NE(changed.find(from), std::string::npos) << from;
    changed.replace(changed.find(from), from.size(), to);
    auto parsed = ParseIndex(changed, "i");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss) << from;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("checksum mismatch")) << from;
  }
  // Older indexes, without the line, are read (FORMAT.md, Compatibility).
  EXPECT_TRUE(ParseIndex(UnsealIndex(sealed), "i").ok());
  // The line anywhere but last is refused.
  std::string moved = UnsealIndex(sealed);
  moved.insert(1, "\"index_crc32c\": \"00000000\",");
  EXPECT_THAT(std::string(ParseIndex(moved, "i").status().message()), HasSubstr("index_crc32c is not the last line"));
}

// Issue 15, defect 3: FORMAT.md's names, enforced.
TEST(IndexTest, EntryAndFileNamesFollowTheFormat) {
  EXPECT_THAT(Invalid([](CheckpointIndex& i) {
                i.tensors[0].shards[0].set_named_entry("w/shard-1");
                i.tensors[0].shards[1].set_named_entry("w/shard-0");
              }),
              HasSubstr("key 'w': shard 0 names entry 'w/shard-1'; expected 'w/shard-0'"));
  EXPECT_THAT(Invalid([](CheckpointIndex& i) { i.tensors[1].shards[0].set_named_entry("b2"); }),
              HasSubstr("expected 'b'"));
  EXPECT_THAT(Invalid([](CheckpointIndex& i) { i.generation = "fedcba9876543210"; }),
              HasSubstr("is not named for generation fedcba9876543210"));
  EXPECT_THAT(Invalid([](CheckpointIndex& i) { i.generation = "G"; }), HasSubstr("is not 16 lowercase hex digits"));
  // A shard in another rank's file (both files listed, the bytes in range
  // and apart): the file's rank, not its name, is what ValidateIndex compares.
  auto in_rank0_file = [](CheckpointIndex& i) {
    IndexShard& s = i.tensors[0].shards[1];  // rank 1's
    s.set_named_file(i.files[0].name);
    s.begin = 312;
    s.end = 392;
  };
  const std::string want = "key 'w': shard 1 of rank 1 is in file 'data-0123456789abcdef-r00000.safetensors', not in "
                           "its rank's file";
  EXPECT_THAT(Invalid(in_rank0_file), HasSubstr(want));
  EXPECT_THAT(Invalid([](CheckpointIndex& i) {
                i.tensors[0].shards[1].set_named_file(i.files[1].name);
                i.tensors[0].shards[1].rank = 0;
              }),
              HasSubstr("shard 1 of rank 0 is in file 'data-0123456789abcdef-r00001.safetensors'"));
  // ValidateIndexNaming alone says the same.
  CheckpointIndex index = SmallIndex();
  EXPECT_TRUE(ValidateIndexNaming(index, "x").ok());
  in_rank0_file(index);
  EXPECT_THAT(std::string(ValidateIndexNaming(index, "x").message()), HasSubstr(want));
  index.tensors[0].shards[1].set_named_file("elsewhere.safetensors");
  EXPECT_THAT(std::string(ValidateIndexNaming(index, "x").message()),
              HasSubstr("shard 1 of rank 1 is in file 'elsewhere.safetensors', not in its rank's file"));
}

// Issue 15, defect 8: the optional record of what produced the checkpoint.
TEST(IndexTest, RunRecordRoundTripsIsOptionalAndIsCoveredByTheChecksum) {
  CheckpointIndex index = SmallIndex();
  EXPECT_THAT(SerializeIndex(index), ::testing::Not(HasSubstr("\"run\"")));
  auto without = ParseIndex(SerializeIndex(index), "i");
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_TRUE(without->run.empty());
  index.run = {{"seed", "1234"}, {"structure", "0123456789abcdef"}, {"model.lr", "0.05=x"}};
  const std::string sealed = SerializeIndex(index);
  EXPECT_THAT(sealed, HasSubstr(" \"run\": [\"model.lr=0.05=x\", \"seed=1234\", \"structure=0123456789abcdef\"],\n"));
  auto parsed = ParseIndex(sealed, "i");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->run, index.run);
  std::string changed = sealed;
  changed.replace(changed.find("seed=1234"), 9, "seed=1235");
  EXPECT_EQ(ParseIndex(changed, "i").status().code(), absl::StatusCode::kDataLoss);
}

TEST(IndexTest, BadRunRecordsAreRefusedNamingTheRule) {
  auto with_run = [](const std::string& run) {
    std::string text = UnsealIndex(SerializeIndex(SmallIndex()));
    text.replace(text.find(" \"files\""), 0, " \"run\": " + run + ",\n");
    auto parsed = ParseIndex(SealIndex(text), "i");
    return parsed.ok() ? std::string("OK") : std::string(parsed.status().message());
  };
  EXPECT_EQ(with_run(R"(["seed=1"])"), "OK");
  EXPECT_THAT(with_run(R"("seed=1")"), HasSubstr("run is not an array"));
  EXPECT_THAT(with_run(R"(["seed"])"), HasSubstr("run member 'seed' is not \"name=value\""));
  EXPECT_THAT(with_run(R"(["seed=1", "seed=2"])"), HasSubstr("run names 'seed' twice"));
  EXPECT_THAT(with_run(R"(["s d=1"])"), HasSubstr("is not 1..64 bytes of [A-Za-z0-9_.-]"));
  EXPECT_THAT(with_run(R"(["=1"])"), HasSubstr("is not 1..64 bytes"));
  EXPECT_THAT(with_run(R"(["seed=\n"])"), HasSubstr("value of \"seed\" is not printable ASCII"));
  EXPECT_THAT(with_run(R"([1])"), HasSubstr("an element of run"));
  std::string many = "[";
  for (int i = 0; i < 65; ++i) many += (i ? ",\"k" : "\"k") + std::to_string(i) + "=v\"";
  EXPECT_THAT(with_run(many + "]"), ::testing::Not(HasSubstr("OK")));
  CheckpointIndex bad = SmallIndex();
  bad.run = {{"bad name", "x"}};
  EXPECT_THAT(std::string(ValidateIndex(bad, "new index").message()), HasSubstr("run record name \"bad name\""));
}

TEST(RunRecordTest, DifferencesNameEachMember) {
  EXPECT_EQ(DescribeRunDifference({{"seed", "1"}, {"structure", "ab"}}, {{"seed", "1"}, {"structure", "ab"}}), "");
  EXPECT_EQ(DescribeRunDifference({{"seed", "1"}, {"lr", "0.1"}}, {{"seed", "99"}, {"batch", "8"}}),
            "batch (none) there, 8 here; lr 0.1 there, (none) here; seed 1 there, 99 here");
}

// Replaces every `from` in `text` with `to`.
std::string ReplaceAll(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

// The index as SerializeIndex spells it is decoded by a fast path (a whole
// tensor record, or a shard, read in one pass); any other spelling by the
// JSON reader. Both give the same index, and the same error for the same
// damage: each text is decoded as written, with its tensors respelled (extra
// whitespace: the reader reads the tensor, the fast path its shards), and
// with its shards respelled too (the reader reads everything).
TEST(IndexTest, TheWritersSpellingAndAnyOtherDecodeAlike) {
  CheckpointIndex index = SmallIndex();
  IndexTensor scalar;  // a 0-d tensor: empty boxes
  scalar.key = "step";
  scalar.dtype = c10::ScalarType::Long;
  scalar.shards = {MakeShard({{}, {}}, 0, "data-0123456789abcdef-r00000.safetensors", "step", 312, 320, {7})};
  index.tensors.push_back(scalar);
  index.Reindex();
  const std::string text = UnsealIndex(SerializeIndex(index));
  auto respell = [](const std::string& t, bool shards) {
    std::string out = ReplaceAll(t, "{\"key\": ", "{ \"key\": ");
    return shards ? ReplaceAll(out, "{\"offsets\":", "{ \"offsets\":") : out;
  };
  ASSERT_NE(respell(text, false), text);
  ASSERT_NE(respell(text, true), respell(text, false));
  // The generation after the tensors: their names wait for it.
  const std::string generation = ",\n \"generation\": \"0123456789abcdef\"";
  std::string late_generation = ReplaceAll(text, generation, "");
  late_generation.insert(late_generation.rfind("\n}\n"), generation);
  ASSERT_NE(late_generation.find(generation), text.find(generation));
  // Decodes alike: the canonical text back, from every spelling, and no
  // shard keeps a name this format derives (none is stored per shard).
  for (const std::string& variant :
       {text, respell(text, false), respell(text, true), late_generation,
        ReplaceAll(text, "\"key\": \"w\"", "\"key\": \"\\u0077\""),
        ReplaceAll(text, "\"entry\":\"w/shard-1\"", "\"entry\":\"w\\/shard-1\""),
        ReplaceAll(text, "\"file\":\"data-0123456789abcdef-r00001", "\"file\":\"\\u0064ata-0123456789abcdef-r00001")}) {
    auto parsed = ParseIndex(SealIndex(variant), "i");
    ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << variant;
    EXPECT_EQ(UnsealIndex(SerializeIndex(*parsed)), text) << variant;
    for (const IndexTensor& t : parsed->tensors) {
      for (size_t k = 0; k < t.shards.size(); ++k) {
        EXPECT_FALSE(t.shards[k].named_file().has_value()) << t.key << " " << k << "\n" << variant;
        EXPECT_FALSE(t.shards[k].named_entry().has_value()) << t.key << " " << k << "\n" << variant;
        EXPECT_EQ(ShardFileName(*parsed, t.shards[k]), parsed->files[t.shards[k].rank].name);
        EXPECT_EQ(parsed->FileOf(t.shards[k]), &parsed->files[t.shards[k].rank]);
        EXPECT_EQ(ShardEntryName(t, k), t.sharded ? absl::StrCat(t.key, "/shard-", k) : t.key);
      }
    }
  }
  // A name this format does not derive is kept as spelled (for the error
  // that refuses it).
  auto other = DecodeIndex(ReplaceAll(text, "\"entry\":\"w/shard-1\"", "\"entry\":\"w/shard-9\""), "i");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->tensors[0].shards[1].named_entry(), std::optional<std::string>("w/shard-9"));
  EXPECT_FALSE(other->tensors[0].shards[1].named_file().has_value());
  // Fails alike: near the writer's spelling, each damage refused with the
  // same message whichever path meets it first.
  const std::vector<std::pair<std::string, std::string>> damages = {
      {"\"dtype\": \"F32\"", "\"dtype\": \"Q4\""},
      {"\"shape\": [10,4]", "\"shape\": [10,4], \"shape\": [10,4]"},
      {"\"shape\": [10,4]", "\"shape\": [010,4]"},
      {"\"shape\": [10,4]", "\"shape\": [10,4.0]"},
      {"\"kind\": \"sharded\"", "\"kind\": \"shard\""},
      {"\"sizes\":[5,4],\"rank\":1", "\"sizes\":[5,4],\"rank\":-1"},
      {"\"byte_range\":[208,288]", "\"byte_range\":[208,288,1]"},
      {"\"crc32c\":\"00000001", "\"crc32c\":\"0000000X"},
      {"\"entry\":\"w/shard-0\"", "\"entry\":\"w/shard-0\\u0000\""},
      {"\"key\": \"w\"", "\"key\": \"w\x01\""},
  };
  for (const auto& [from, to] : damages) {
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    std::string damaged = text;
    damaged.replace(at, from.size(), to);
    // A syntax error's position moves with the added spaces: compared without
    // it (the message's "at line L, column C (byte B)").
    auto error = [](const std::string& t) {
      const absl::Status s = ParseIndex(SealIndex(t), "i").status();
      std::string message(s.message());
      const size_t at = message.find(" at line ");
      const size_t end = at == std::string::npos ? at : message.find(')', at);
      if (end != std::string::npos) message.erase(at, end + 1 - at);
      return std::make_pair(s.code(), message);
    };
    const auto fast = error(damaged);
    EXPECT_NE(fast.first, absl::StatusCode::kOk) << to;
    EXPECT_EQ(fast, error(respell(damaged, false))) << to;
    EXPECT_EQ(fast, error(respell(damaged, true))) << to;
  }
  // A name other than the derived one is kept whichever path decodes it
  // (the generation before or after the tensors), and refused by name.
  const std::vector<std::pair<std::string, std::string>> renamed = {
      {"\"entry\":\"w/shard-1\"", "names entry 'w/shard-9'; expected 'w/shard-1'"},
      {"\"file\":\"data-0123456789abcdef-r00001",
       "shard 1 of rank 1 is in file 'data-0123456789abcdef-r00000.safetensors', not in its rank's file"},
  };
  for (const auto& [from, want] : renamed) {
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    std::string damaged = text;
    damaged.replace(at, from.size(), absl::StrContains(from, "entry") ? "\"entry\":\"w/shard-9\""
                                                                       : "\"file\":\"data-0123456789abcdef-r00000");
    std::string late = ReplaceAll(damaged, generation, "");
    late.insert(late.rfind("\n}\n"), generation);
    for (const std::string& variant : {damaged, respell(damaged, false), respell(damaged, true), late}) {
      auto decoded = DecodeIndex(SealIndex(variant), "i");
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      const IndexShard& s = decoded->tensors[0].shards[1];
      EXPECT_EQ(s.named_entry().has_value(), absl::StrContains(from, "entry")) << variant;
      EXPECT_EQ(s.named_file().has_value(), absl::StrContains(from, "file")) << variant;
      EXPECT_FALSE(decoded->tensors[0].shards[0].named_file() || decoded->tensors[0].shards[0].named_entry());
      EXPECT_THAT(std::string(ParseIndex(SealIndex(variant), "i").status().message()), HasSubstr(want)) << variant;
    }
  }
}

// A shard's names as a save records them: unset when derived, kept when not.
TEST(IndexTest, ShardNamerKeepsOnlyNamesItDoesNotDerive) {
  const ShardNamer namer("0123456789abcdef");
  IndexTensor t;
  t.key = "w";
  t.sharded = true;
  IndexShard s;
  s.rank = 3;
  namer.Name(t, 2, "data-0123456789abcdef-r00003.safetensors", "w/shard-2", &s);
  EXPECT_FALSE(s.named_file() || s.named_entry());
  namer.Name(t, 2, "data-0123456789abcdef-r00002.safetensors", "w/shard-3", &s);
  EXPECT_EQ(s.named_file(), std::optional<std::string>("data-0123456789abcdef-r00002.safetensors"));
  EXPECT_EQ(s.named_entry(), std::optional<std::string>("w/shard-3"));
  namer.Name(t, 2, "data-0123456789abcdef-r00003.safetensors", "w/shard-2", &s);
  EXPECT_FALSE(s.named_file() || s.named_entry());  // reset again
  t.sharded = false;
  s.rank = 123456;  // beyond 5 digits, as DataFileName's %05d spells it
  namer.Name(t, 0, DataFileName("0123456789abcdef", 123456), "w", &s);
  EXPECT_FALSE(s.named_file() || s.named_entry());
  EXPECT_TRUE(namer.IsRankFile("data-0123456789abcdef-r00007.safetensors", 7));
  EXPECT_FALSE(namer.IsRankFile("data-0123456789abcdef-r0007.safetensors", 7));
  EXPECT_FALSE(namer.IsRankFile("data-0123456789abcdef-r00007.safetensors", -7));
  EXPECT_FALSE(namer.IsRankFile("data-0123456789abcdef-r00007.safetensorsx", 7));
}

// A shard of this format states nothing beyond its box, rank, bytes and
// checksums: the names and dim order a foreign format states live out of
// line, so an index of millions of shards holds no room for them. A copy
// carries them and is independent of the original.
TEST(IndexTest, AShardsStatedNamesAreOutOfLineAndCopiedWithIt) {
  // Box (2 x 40) + rank + byte range + two inline checksums + one pointer:
  // the names inline again (two optional strings, a vector) would be 208+.
  EXPECT_LE(sizeof(IndexShard), 144u);
  IndexShard s;
  s.rank = 1;
  EXPECT_FALSE(s.named_file() || s.named_entry());
  EXPECT_TRUE(s.dim_order().empty());
  s.set_named_file("a.distcp");
  s.set_named_entry("w@0,0");
  s.set_dim_order({1, 0});
  IndexShard copy = s;
  copy.set_named_file("b.distcp");
  copy.set_dim_order({});
  EXPECT_EQ(s.named_file(), std::optional<std::string>("a.distcp"));
  EXPECT_EQ(s.dim_order(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(copy.named_file(), std::optional<std::string>("b.distcp"));
  EXPECT_EQ(copy.named_entry(), std::optional<std::string>("w@0,0"));
  EXPECT_TRUE(copy.dim_order().empty());
  copy = s;
  EXPECT_EQ(copy.named_file(), std::optional<std::string>("a.distcp"));
  EXPECT_EQ(copy.dim_order(), (std::vector<int64_t>{1, 0}));
  IndexShard moved = std::move(copy);
  EXPECT_EQ(moved.named_entry(), std::optional<std::string>("w@0,0"));
  s.set_named_file(std::nullopt);
  s.set_named_entry(std::nullopt);
  s.set_dim_order({});
  EXPECT_FALSE(s.named_file() || s.named_entry());
  EXPECT_TRUE(s.dim_order().empty());
  EXPECT_EQ(moved.named_file(), std::optional<std::string>("a.distcp"));
}

// Issue 24 review: a hostile index's generation (checked only after
// decoding) must not cost memory per rank while it is decoded: a 256 KiB
// generation and 4096 shards on as many ranks decode within a bounded heap
// (the names are compared in place, none kept), then are refused.
TEST(IndexTest, ALongGenerationCostsNoMemoryPerRank) {
  CheckpointIndex index;
  index.world_size = 4096;
  index.generation = std::string(256 << 10, 'a');
  index.block_bytes = 64;
  index.files = {{"x", 0, 1000, 200}};
  for (int r = 0; r < 4096; ++r) {
    IndexTensor t;
    t.key = absl::StrCat("k", r);
    t.dtype = c10::ScalarType::Float;
    t.shape = {1};
    t.shards = {MakeShard({{0}, {1}}, r, std::string("x"), std::nullopt, 208, 212, {1})};
    index.tensors.push_back(std::move(t));
  }
  const std::string text = SerializeIndex(index);
  ASSERT_LT(text.size(), size_t{2} << 20);
  // In a child, so that its peak resident size is this decode's alone.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto parsed = ParseIndex(text, "i");
    _exit(!parsed.ok() && absl::StrContains(parsed.status().message(), "is not 16 lowercase hex digits") ? 0 : 1);
  }
  int status = 0;
  struct rusage usage {};
  ASSERT_EQ(wait4(child, &status, 0, &usage), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // Names kept per rank would be 4096 x 256 KiB = 1 GiB.
  EXPECT_LT(usage.ru_maxrss, 512 << 10) << "peak resident KiB";
}

TEST(IndexTest, MalformedJsonIsAnErrorNotACrash) {
  std::string text = UnsealIndex(SerializeIndex(SmallIndex()));  // edited below, resealed
  EXPECT_FALSE(ParseIndex(text.substr(0, text.size() / 2), "i").ok());
  EXPECT_THAT(std::string(ParseIndex(R"({"format":"other"})", "i").status().message()), HasSubstr("not a shardlight"));
  std::string unknown = text;
  unknown.replace(unknown.find("\"F32\""), 5, "\"Q4\"");
  EXPECT_THAT(std::string(ParseIndex(SealIndex(unknown), "i").status().message()),
              ::testing::AllOf(HasSubstr("key 'w'"), HasSubstr("unknown dtype 'Q4'")));
  std::string wrong_type = text;
  wrong_type.replace(wrong_type.find("\"world_size\": 2"), 15, "\"world_size\": \"2\"");
  EXPECT_THAT(std::string(ParseIndex(SealIndex(wrong_type), "i").status().message()), HasSubstr("world_size"));
  auto newer = ParseIndex(R"({"format":"shardlight.checkpoint","version":7,"anything":"new"})", "i");
  EXPECT_EQ(newer.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(RowMajorTilesTest, TilesCoverTheBoxInOrderWithinTheLimit) {
  for (const auto& sizes : std::vector<std::vector<int64_t>>{{10}, {3, 4, 5}, {2, 7}, {1, 1, 9}, {4, 0, 2}, {}}) {
    for (int64_t limit : {1, 3, 6, 20, 1000}) {
      int64_t expected_next = 0;  // row-major index of the next element
      bool contiguous = true;
      int64_t total = 0;
      const std::vector<int64_t> strides = RowMajorStrides(sizes);
      absl::Status s = ForEachRowMajorTile(sizes, limit, [&](const auto& off, const auto& size) {
        int64_t n = 1, first = 0;
        for (size_t d = 0; d < size.size(); ++d) {
          n *= size[d];
          first += off[d] * strides[d];
        }
        EXPECT_LE(n, std::max<int64_t>(limit, 1));
        contiguous &= first == expected_next;
        expected_next += n;
        total += n;
        return absl::OkStatus();
      });
      EXPECT_TRUE(s.ok());
      EXPECT_TRUE(contiguous);
      int64_t volume = 1;
      for (int64_t x : sizes) volume *= x;
      EXPECT_EQ(total, volume);
    }
  }
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint
