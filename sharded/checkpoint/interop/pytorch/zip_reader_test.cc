// ZipReader on zips made here (stored and deflated records, zip64, lying
// directories): declared sizes are checked before a byte is read, a deflated
// record stops at its declared size, and every damage is an error naming the
// record, never a crash.
#include "sharded/checkpoint/interop/pytorch/zip_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <optional>
#include <utility>

#include "sharded/checkpoint/storage/in_memory_storage.h"

namespace shardlight::sharded::checkpoint::pytorch {
namespace {

using ::testing::HasSubstr;

void Put(std::string* s, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

std::string Deflate(const std::string& data) {
  z_stream z;
  std::memset(&z, 0, sizeof z);
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

struct Entry {
  Entry(std::string n, std::string d, bool z = false, std::optional<uint64_t> lie = std::nullopt)
      : name(std::move(n)), data(std::move(d)), deflate(z), declared(lie) {}
  std::string name;
  std::string data;
  bool deflate;
  std::optional<uint64_t> declared;  // a lie about the uncompressed size
};

// A zip of `entries`, zip64 end records when asked.
std::string MakeZip(const std::vector<Entry>& entries, bool zip64 = false) {
  std::string out, dir;
  for (const Entry& e : entries) {
    const std::string payload = e.deflate ? Deflate(e.data) : e.data;
    const uint32_t crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(e.data.data()),
                                                     static_cast<uInt>(e.data.size())));
    const uint64_t size = e.declared.value_or(e.data.size()), offset = out.size();
    const uint16_t method = e.deflate ? 8 : 0;
    out += "PK\x03\x04";
    Put(&out, 20, 2), Put(&out, 0, 2), Put(&out, method, 2), Put(&out, 0, 4), Put(&out, crc, 4);
    Put(&out, payload.size(), 4), Put(&out, size, 4), Put(&out, e.name.size(), 2), Put(&out, 0, 2);
    out += e.name + payload;
    dir += "PK\x01\x02";
    Put(&dir, 20, 2), Put(&dir, 20, 2), Put(&dir, 0, 2), Put(&dir, method, 2), Put(&dir, 0, 4), Put(&dir, crc, 4);
    Put(&dir, payload.size(), 4), Put(&dir, size, 4), Put(&dir, e.name.size(), 2), Put(&dir, 0, 2), Put(&dir, 0, 2);
    Put(&dir, 0, 2), Put(&dir, 0, 2), Put(&dir, 0, 4), Put(&dir, offset, 4);
    dir += e.name;
  }
  const uint64_t dir_offset = out.size();
  out += dir;
  uint64_t count = entries.size(), size = dir.size(), offset = dir_offset;
  if (zip64) {
    const uint64_t end64 = out.size();
    out += "PK\x06\x06";
    Put(&out, 44, 8), Put(&out, 45, 2), Put(&out, 45, 2), Put(&out, 0, 4), Put(&out, 0, 4);
    Put(&out, count, 8), Put(&out, count, 8), Put(&out, size, 8), Put(&out, offset, 8);
    out += "PK\x06\x07";
    Put(&out, 0, 4), Put(&out, end64, 8), Put(&out, 1, 4);
    count = 0xFFFF, size = 0xFFFFFFFF, offset = 0xFFFFFFFF;
  }
  out += "PK\x05\x06";
  Put(&out, 0, 2), Put(&out, 0, 2), Put(&out, count, 2), Put(&out, count, 2), Put(&out, size, 4), Put(&out, offset, 4);
  Put(&out, 0, 2);
  return out;
}

absl::StatusOr<ZipReader> OpenBytes(InMemoryStorage& storage, const std::string& bytes) {
  EXPECT_TRUE(storage.MakeDirectories("/z").ok());
  storage.Remove("/z/t.zip").IgnoreError();
  auto f = File::CreateNew(storage, "/z/t.zip");
  EXPECT_TRUE(f.ok());
  EXPECT_TRUE(f->WriteAt(bytes.data(), static_cast<int64_t>(bytes.size()), 0).ok());
  EXPECT_TRUE(f->Close().ok());
  auto r = File::OpenForRead(storage, "/z/t.zip");
  if (!r.ok()) return r.status();
  return ZipReader::Open(std::move(*r), "t.zip");
}

std::string Read(const ZipReader& z, const std::string& name, absl::Status* status) {
  const ZipRecord* r = z.Find(name);
  if (r == nullptr) {
    *status = absl::NotFoundError(name);
    return "";
  }
  std::string out(r->size, '\0');
  *status = z.ReadInto(*r, out.data(), out.size());
  return out;
}

std::string Ramp(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7 + i / 251) & 0xFF);
  return s;
}

TEST(ZipReader, ReadsStoredAndDeflatedRecordsUnderTheTopFolder) {
  InMemoryStorage storage;
  const std::string data = Ramp(3 << 20);
  auto z = OpenBytes(storage, MakeZip({{"archive/data.pkl", "pickle"},
                                       {"archive/data/0", data, true},
                                       {"archive/data/1", data}}));
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->top_folder(), "archive/");
  absl::Status s;
  EXPECT_EQ(Read(*z, "data/0", &s), data);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(Read(*z, "data/1", &s), data);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(*z->ReadSmall("data.pkl", 100), "pickle");
  EXPECT_TRUE(absl::IsNotFound(z->ReadSmall("nope", 100).status()));
  EXPECT_THAT(z->ReadSmall("data/0", 100).status().message(),
              HasSubstr("record 'archive/data/0' declares 3145728 bytes, more than the 100 allowed"));
}

TEST(ZipReader, ADeflatedInputLargerThanOneChunkInflatesWhole) {
  InMemoryStorage storage;
  std::string noise(3 << 20, '\0');  // incompressible: its deflate stream spans several input chunks
  uint32_t x = 12345;
  for (char& c : noise) c = static_cast<char>((x = x * 1103515245u + 12345u) >> 24);
  auto z = OpenBytes(storage, MakeZip({{"a/x", noise, true}}));
  ASSERT_TRUE(z.ok()) << z.status();
  ASSERT_GT(z->Find("x")->compressed_size, ZipReader::kInputChunk);
  absl::Status s;
  EXPECT_EQ(Read(*z, "x", &s), noise);
  EXPECT_TRUE(s.ok()) << s;
}

TEST(ZipReader, TheDeclaredSizeIsCheckedBeforeAnythingIsRead) {
  InMemoryStorage storage;
  auto z = OpenBytes(storage, MakeZip({{"a/x", std::string(1000, 'x'), true}}));
  ASSERT_TRUE(z.ok()) << z.status();
  char small[24];
  EXPECT_THAT(z->ReadInto(*z->Find("x"), small, sizeof small).message(),
              HasSubstr("'t.zip': record 'a/x' declares 1000 bytes in the zip directory, but 24 are expected"));
}

TEST(ZipReader, ABombStopsAtItsDeclaredSize) {
  InMemoryStorage storage;
  // 64 MiB of zeros (~64 KiB deflated) whose directory declares 24 bytes.
  auto z = OpenBytes(storage, MakeZip({{"a/x", std::string(64 << 20, '\0'), true, 24}}));
  ASSERT_TRUE(z.ok()) << z.status();
  char out[24];
  EXPECT_THAT(z->ReadInto(*z->Find("x"), out, sizeof out).message(),
              HasSubstr("record 'a/x' inflates to more than the 24 bytes it declares"));
  // ... and one that inflates to fewer bytes than it declares.
  z = OpenBytes(storage, MakeZip({{"a/x", std::string(1000, 'y'), true, 1001}}));
  ASSERT_TRUE(z.ok()) << z.status();
  std::string big(1001, '\0');
  EXPECT_THAT(z->ReadInto(*z->Find("x"), big.data(), big.size()).message(), HasSubstr("record 'a/x' inflates to 1000 bytes, not the 1001 it declares"));
}

TEST(ZipReader, ADirectoryDeclaringMoreThanDeflateCanProduceIsRefusedAtOpen) {
  InMemoryStorage storage;
  auto z = OpenBytes(storage, MakeZip({{"a/x", "tiny", true, uint64_t{3} << 30}}));
  EXPECT_THAT(z.status().message(), HasSubstr("more than deflate can produce (corrupt, or a zip bomb)"));
}

TEST(ZipReader, CorruptDataFailsItsCrc) {
  InMemoryStorage storage;
  std::string zip = MakeZip({{"a/x", "hello, world"}});
  zip[std::string("PK\x03\x04").size() + 26 + 3] ^= 1;  // a byte of the stored data
  auto z = OpenBytes(storage, zip);
  ASSERT_TRUE(z.ok()) << z.status();
  absl::Status s;
  Read(*z, "x", &s);
  EXPECT_THAT(s.message(), HasSubstr("record 'a/x' fails its CRC-32 check"));
  {  // the fuzzing mode reads it as it is
    auto f = File::OpenForRead(storage, "/z/t.zip");
    ASSERT_TRUE(f.ok());
    auto unchecked = ZipReader::Open(std::move(*f), "t.zip", /*check_crc=*/false);
    ASSERT_TRUE(unchecked.ok());
    EXPECT_EQ(Read(*unchecked, "x", &s), "iello, world");  // the flipped first byte
    EXPECT_TRUE(s.ok()) << s;
  }
  zip = MakeZip({{"a/x", std::string(5000, 'q'), true}});
  zip[34 + 5] ^= 0x55;  // inside the deflate stream
  z = OpenBytes(storage, zip);
  ASSERT_TRUE(z.ok()) << z.status();
  std::string out(5000, '\0');
  EXPECT_FALSE(z->ReadInto(*z->Find("x"), out.data(), out.size()).ok());
}

TEST(ZipReader, Zip64EndRecordsAreRead) {
  InMemoryStorage storage;
  auto z = OpenBytes(storage, MakeZip({{"a/x", "one"}, {"a/y", "two", true}}, /*zip64=*/true));
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->records().size(), 2u);
  EXPECT_EQ(*z->ReadSmall("y", 3), "two");
}

TEST(ZipReader, InconsistentDirectoriesAreRefused) {
  InMemoryStorage storage;
  EXPECT_THAT(OpenBytes(storage, MakeZip({{"x", "1"}})).status().message(), HasSubstr("not in a top folder"));
  EXPECT_THAT(OpenBytes(storage, MakeZip({{"a/x", "1"}, {"a/x", "2"}})).status().message(),
              HasSubstr("record 'a/x' appears twice"));
  EXPECT_THAT(OpenBytes(storage, "PK\x03\x04 not a zip at all, but long enough").status().message(),
              HasSubstr("no zip end record"));
  // A record whose local header offset points past the data.
  std::string zip = MakeZip({{"a/x", "12345"}});
  const size_t dir = zip.find("PK\x01\x02");
  zip[dir + 42] = 0x7f;
  EXPECT_THAT(OpenBytes(storage, zip).status().message(), HasSubstr("lies outside the file's data"));
}

TEST(ZipReader, EveryTruncationIsAnErrorNotACrash) {
  InMemoryStorage storage;
  const std::string zip = MakeZip({{"a/data.pkl", "pickle bytes"}, {"a/data/0", std::string(300, 'z'), true}});
  for (size_t n = 0; n < zip.size(); ++n) {
    auto z = OpenBytes(storage, zip.substr(0, n));
    if (!z.ok()) continue;  // most prefixes: no end record
    for (const ZipRecord& r : z->records()) {
      std::string out(r.size, '\0');
      z->ReadInto(r, out.data(), out.size()).IgnoreError();
    }
  }
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint::pytorch
