// Writing entries with WriteDataFile and reading arbitrary regions back with
// EntryReader through small buffers: values, bytes read, corruption.
#include "sharded/checkpoint/format/entry_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

#include "sharded/checkpoint/format/data_file.h"
#include "sharded/checkpoint/storage/posix_file.h"
#include "sharded/checkpoint/format/safetensors.h"

namespace shardlight::sharded::checkpoint {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kBlock = 64;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return JoinPath(dir ? dir : "/tmp", name);
}

// Random bytes (0/1 for bool): every byte of every element matters.
at::Tensor Reference(const std::vector<int64_t>& sizes, c10::ScalarType dtype, uint32_t seed = 1) {
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(dtype));
  std::mt19937 rng(seed);
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  for (int64_t i = 0; i < t.numel() * t.element_size(); ++i) {
    p[i] = static_cast<unsigned char>(dtype == c10::ScalarType::Bool ? rng() % 2 : rng());
  }
  return t;
}

// Values compared as bytes: random floats include NaNs, which at::equal
// never calls equal.
bool BitEqual(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  const at::Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
}

struct Written {
  File file;
  WrittenFile layout;
  std::vector<at::Tensor> tensors;
  std::vector<std::vector<int64_t>> offsets;  // global box of each entry
};

Written WriteEntries(const std::string& name, const std::vector<at::Tensor>& tensors,
                     const std::vector<std::vector<int64_t>>& offsets) {
  const std::string path = TempPath(name);
  RemoveFile(path).IgnoreError();
  std::vector<EntryToWrite> entries;
  for (size_t i = 0; i < tensors.size(); ++i) entries.push_back({"e" + std::to_string(i), tensors[i]});
  DataFileOptions options;
  options.block_bytes = kBlock;
  options.buffer_bytes = 256;  // forces the staging path into many tiles
  auto layout = WriteDataFile(path, entries, options);
  EXPECT_TRUE(layout.ok()) << layout.status();
  auto file = File::OpenForRead(path);
  EXPECT_TRUE(file.ok());
  return {*std::move(file), *layout, tensors, offsets};
}

EntrySource SourceOf(const Written& w, size_t i) {
  EntrySource s;
  s.file = &w.file;
  s.file_name = "f.safetensors";
  s.entry_name = w.layout.entries[i].name;
  s.dtype = w.tensors[i].scalar_type();
  s.offsets = w.offsets[i];
  s.sizes = absl::MakeConstSpan(w.tensors[i].sizes().data(), w.tensors[i].sizes().size());
  s.begin = w.layout.entries[i].begin;
  s.block_bytes = kBlock;
  s.block_crcs = w.layout.entries[i].block_crcs.data();
  return s;
}

at::Tensor Region(const at::Tensor& t, const std::vector<int64_t>& t_off, const std::vector<int64_t>& off,
                  const std::vector<int64_t>& size) {
  at::Tensor v = t;
  for (size_t d = 0; d < off.size(); ++d) v = v.narrow(static_cast<int64_t>(d), off[d] - t_off[d], size[d]);
  return v;
}

TEST(DataFileTest, FileIsSafetensorsWithTheTensorsBytes) {
  at::Tensor a = Reference({3, 5}, c10::ScalarType::Float);
  at::Tensor b = Reference({4, 6}, c10::ScalarType::Double).t();  // non-contiguous: staged
  Written w = WriteEntries("plain.safetensors", {a, b}, {{0, 0}, {0, 0}});
  auto size = w.file.Size();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, w.layout.bytes);
  auto header = ReadSafetensorsHeader(w.file, *size, "plain");
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->header_bytes, w.layout.header_bytes);
  const SafetensorsEntry* e1 = header->Find("e1");
  ASSERT_NE(e1, nullptr);
  EXPECT_EQ(e1->dtype, "F64");
  EXPECT_EQ(e1->shape, (std::vector<int64_t>{6, 4}));
  at::Tensor back = at::empty({6, 4}, at::kDouble);
  ASSERT_TRUE(w.file.ReadAt(back.data_ptr(), 6 * 4 * 8, header->data_start() + e1->begin).ok());
  EXPECT_TRUE(BitEqual(back, b));
  EXPECT_EQ(w.layout.entries[1].block_crcs.size(), 3u);  // 192 bytes in 64-byte blocks
}

// Random regions of random entries into destinations of every kind, through
// a buffer of a few blocks.
TEST(EntryReaderTest, RandomRegionsAreCopiedExactly) {
  std::mt19937_64 rng(11);
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const c10::ScalarType dtypes[] = {c10::ScalarType::Float, c10::ScalarType::Double, c10::ScalarType::BFloat16,
                                    c10::ScalarType::Long, c10::ScalarType::Bool};
  std::vector<at::Tensor> tensors;
  std::vector<std::vector<int64_t>> offsets;
  for (int i = 0; i < 12; ++i) {
    std::vector<int64_t> sizes, off;
    const int dims = static_cast<int>(uniform(1, 3));
    for (int d = 0; d < dims; ++d) {
      sizes.push_back(uniform(1, 13));
      off.push_back(uniform(0, 5));
    }
    tensors.push_back(Reference(sizes, dtypes[i % 5], static_cast<uint32_t>(i)));
    offsets.push_back(off);
  }
  Written w = WriteEntries("random.safetensors", tensors, offsets);
  for (int64_t buffer : {int64_t{0}, int64_t{5 * kBlock}, int64_t{1} << 20}) {
    ReadStats stats;
    EntryReader reader(buffer, &stats);
    for (int trial = 0; trial < 300; ++trial) {
      const size_t i = static_cast<size_t>(uniform(0, static_cast<int64_t>(tensors.size()) - 1));
      const at::Tensor& t = tensors[i];
      std::vector<int64_t> off, size, dst_off, dst_size;
      for (int64_t d = 0; d < t.dim(); ++d) {
        const int64_t lo = uniform(0, t.size(d) - 1);
        off.push_back(offsets[i][d] + lo);
        size.push_back(uniform(1, t.size(d) - lo));
        dst_off.push_back(off.back() - uniform(0, 2));
        dst_size.push_back(size.back() + (off.back() - dst_off.back()) + uniform(0, 2));
      }
      at::Tensor dst;
      switch (trial % 3) {
        case 0:  // contiguous
          dst = at::zeros(dst_size, t.options());
          break;
        case 1: {  // a transposed view: never contiguous when 2-d or more
          std::vector<int64_t> reversed(dst_size.rbegin(), dst_size.rend());
          dst = at::zeros(reversed, t.options());
          std::vector<int64_t> perm;
          for (int64_t d = t.dim() - 1; d >= 0; --d) perm.push_back(d);
          dst = dst.permute(perm);
          break;
        }
        default:  // a slice of a larger tensor
          std::vector<int64_t> bigger = dst_size;
          bigger.back() += 3;
          dst = at::zeros(bigger, t.options()).narrow(-1, 2, dst_size.back());
      }
      at::Tensor before = dst.clone();
      absl::Status s = reader.Copy(SourceOf(w, i), dst, dst_off, off, size);
      ASSERT_TRUE(s.ok()) << s;
      at::Tensor expected = before.clone();
      Region(expected, dst_off, off, size).copy_(Region(t, offsets[i], off, size));
      ASSERT_TRUE(BitEqual(dst, expected)) << "entry " << i << " trial " << trial << " buffer " << buffer;
    }
  }
}

// Entries stored row-major over permuted dims (DCP items of transposed and
// channels_last tensors): regions in the box's own coordinates, empty ones
// and uneven ones included, land exactly; Verify reads them too.
TEST(EntryReaderTest, PermutedEntriesAreCopiedExactly) {
  struct Case {
    std::vector<int64_t> sizes, offsets, order;
    c10::ScalarType dtype;
  };
  const Case cases[] = {
      {{9, 7}, {3, 0}, {1, 0}, c10::ScalarType::Float},                    // w.t()
      {{2, 3, 5, 4}, {0, 0, 0, 0}, {0, 2, 3, 1}, c10::ScalarType::Double},  // channels_last
      {{5, 1, 6}, {1, 0, 2}, {1, 2, 0}, c10::ScalarType::ComplexFloat},     // a one-element dim
      {{4, 0, 3}, {0, 0, 0}, {2, 0, 1}, c10::ScalarType::Short},            // empty
  };
  std::vector<at::Tensor> logical, stored;
  std::vector<std::vector<int64_t>> offsets;
  for (const Case& c : cases) {
    logical.push_back(Reference(c.sizes, c.dtype, static_cast<uint32_t>(logical.size() + 40)));
    stored.push_back(logical.back().permute(c.order).contiguous());
    offsets.push_back(c.offsets);
  }
  Written w = WriteEntries("permuted.safetensors", stored, offsets);
  std::mt19937_64 rng(5);
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  EntryReader reader(5 * kBlock, nullptr);
  for (size_t i = 0; i < std::size(cases); ++i) {
    EntrySource src = SourceOf(w, i);
    src.sizes = cases[i].sizes;
    src.dim_order = cases[i].order;
    EXPECT_EQ(EntryReader::WholeEntryDestination(src, at::zeros(cases[i].sizes, logical[i].options()),
                                                 cases[i].offsets, cases[i].offsets, cases[i].sizes),
              nullptr);
    const at::Tensor& t = logical[i];
    for (int trial = 0; trial < 60; ++trial) {
      std::vector<int64_t> off, size;
      for (int64_t d = 0; d < t.dim(); ++d) {
        const int64_t lo = t.size(d) == 0 ? 0 : uniform(0, t.size(d) - 1);
        off.push_back(cases[i].offsets[d] + lo);
        size.push_back(trial == 0 ? t.size(d) - lo : uniform(0, t.size(d) - lo));  // empty regions too
      }
      const int64_t last = t.dim() - 1;  // odd trials: a destination with its first and last dims swapped
      at::Tensor dst = trial % 2 == 0 ? at::zeros(t.sizes(), t.options())
                                      : at::zeros(t.sizes(), t.options()).transpose(0, last).contiguous().transpose(0, last);
      absl::Status s = reader.Copy(src, dst, cases[i].offsets, off, size);
      ASSERT_TRUE(s.ok()) << s;
      at::Tensor expected = at::zeros(t.sizes(), t.options());
      Region(expected, cases[i].offsets, off, size).copy_(Region(t, cases[i].offsets, off, size));
      ASSERT_TRUE(BitEqual(dst, expected)) << "case " << i << " trial " << trial;
      ASSERT_TRUE(reader.Verify(src, off, size).ok());
    }
  }
  // A dim_order that is not a permutation is refused, not followed.
  EntrySource bad = SourceOf(w, 0);
  bad.sizes = cases[0].sizes;
  const std::vector<int64_t> twice = {1, 1};
  bad.dim_order = twice;
  EXPECT_THAT(reader.Copy(bad, at::zeros({9, 7}), {3, 0}, {3, 0}, {9, 7}).message(), HasSubstr("not a permutation"));
}

TEST(EntryReaderTest, ContiguousRunsReadOnlyTheirBlocks) {
  at::Tensor t = Reference({100, 10}, c10::ScalarType::Float);  // 4000 bytes, 63 blocks of 64
  Written w = WriteEntries("runs.safetensors", {t}, {{0, 0}});
  ReadStats stats;
  EntryReader reader(8 * kBlock, &stats);
  at::Tensor dst = at::zeros({37, 10});
  ASSERT_TRUE(reader.Copy(SourceOf(w, 0), dst, {21, 0}, {21, 0}, {37, 10}).ok());
  EXPECT_TRUE(BitEqual(dst, t.narrow(0, 21, 37)));
  // 1480 bytes from entry byte 840: at most one partial block at each end.
  EXPECT_GE(stats.bytes_read, 1480);
  EXPECT_LE(stats.bytes_read, 1480 + 2 * kBlock);
  EXPECT_EQ(stats.bytes_copied, 1480);
  // A column strip: tiles share boundary blocks, each block read once.
  ReadStats strip_stats;
  EntryReader strip_reader(8 * kBlock, &strip_stats);
  at::Tensor column = at::zeros({100, 2});
  ASSERT_TRUE(strip_reader.Copy(SourceOf(w, 0), column, {0, 4}, {0, 4}, {100, 2}).ok());
  EXPECT_TRUE(BitEqual(column, t.narrow(1, 4, 2)));
  EXPECT_LE(strip_stats.bytes_read, 4000);
  // A wide strip: consecutive tiles share a block, which stays in the buffer.
  ReadStats wide_stats;
  EntryReader wide_reader(8 * kBlock, &wide_stats);
  at::Tensor wide = at::zeros({100, 8});
  ASSERT_TRUE(wide_reader.Copy(SourceOf(w, 0), wide, {0, 1}, {0, 1}, {100, 8}).ok());
  EXPECT_TRUE(BitEqual(wide, t.narrow(1, 1, 8)));
  EXPECT_LE(wide_stats.bytes_read, 4000);
}

TEST(EntryReaderTest, CorruptionIsDataLossNamingFileAndEntryAndVerifyWritesNothing) {
  at::Tensor t = Reference({50, 8}, c10::ScalarType::Long);  // 3200 bytes
  const std::string path = TempPath("corrupt.safetensors");
  Written w = WriteEntries("corrupt.safetensors", {t}, {{0, 0}});
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(w.layout.entries[0].begin + 1000);
    f.put('\x5a');
  }
  EntryReader reader(4 * kBlock, nullptr);
  absl::Status v = reader.Verify(SourceOf(w, 0), {0, 0}, {50, 8});
  EXPECT_EQ(v.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(v.message()), HasSubstr("'f.safetensors', entry 'e0': checksum mismatch in block 15"));
  // A region clear of the damaged block still loads.
  at::Tensor part = at::zeros({10, 8}, at::kLong);
  EXPECT_TRUE(reader.Copy(SourceOf(w, 0), part, {0, 0}, {0, 0}, {10, 8}).ok());
  EXPECT_TRUE(BitEqual(part, t.narrow(0, 0, 10)));
  at::Tensor all = at::full({50, 8}, -1, at::kLong);
  const at::Tensor untouched = all.clone();
  EXPECT_FALSE(reader.Verify(SourceOf(w, 0), {0, 0}, {50, 8}).ok());
  EXPECT_TRUE(BitEqual(all, untouched));
  EXPECT_EQ(reader.Copy(SourceOf(w, 0), all, {0, 0}, {0, 0}, {50, 8}).code(), absl::StatusCode::kDataLoss);
}

// Neighbouring whole entries are read together; a corrupt block in the
// middle one names it and leaves its destination (and those after) as they
// were, while the entries before it are in place.
TEST(EntryReaderTest, AdjacentEntriesAreReadTogetherAndCorruptionNamesTheEntry) {
  const std::vector<at::Tensor> tensors = {Reference({3, 5}, c10::ScalarType::Float, 1),
                                           Reference({40}, c10::ScalarType::Long, 2),
                                           Reference({2, 2}, c10::ScalarType::Bool, 3)};
  const std::string path = TempPath("adjacent.safetensors");
  Written w = WriteEntries("adjacent.safetensors", tensors, {{0, 0}, {0}, {0, 0}});
  auto destinations = [&] {
    std::vector<at::Tensor> out;
    for (const at::Tensor& t : tensors) out.push_back(at::zeros(t.sizes(), t.options()));
    return out;
  };
  auto runs_into = [&](std::vector<at::Tensor>& dst) {
    std::vector<EntryRun> runs;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const EntrySource src = SourceOf(w, i);
      char* p = EntryReader::WholeEntryDestination(src, dst[i], w.offsets[i], w.offsets[i], tensors[i].sizes().vec());
      EXPECT_NE(p, nullptr);
      runs.push_back({src, p});
    }
    return runs;
  };
  ReadStats stats;
  EntryReader reader(64 * kBlock, &stats);  // room for all three: one read
  std::vector<at::Tensor> dst = destinations();
  size_t failed = 99;
  ASSERT_TRUE(reader.CopyAdjacent(runs_into(dst), &failed).ok());
  for (size_t i = 0; i < tensors.size(); ++i) EXPECT_TRUE(BitEqual(dst[i], tensors[i])) << i;
  EXPECT_EQ(stats.bytes_read, 60 + 320 + 4);
  EXPECT_EQ(stats.bytes_copied, 60 + 320 + 4);
  // Not the whole entry, or not contiguous: no run.
  at::Tensor wide = at::zeros({3, 10});
  EXPECT_EQ(EntryReader::WholeEntryDestination(SourceOf(w, 0), wide, {0, 0}, {0, 0}, {3, 5}), nullptr);
  EXPECT_EQ(EntryReader::WholeEntryDestination(SourceOf(w, 0), dst[0], {0, 0}, {0, 0}, {2, 5}), nullptr);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(w.layout.entries[1].begin + 200);  // block 3 of entry 1
    f.put('\x5a');
  }
  dst = destinations();
  absl::Status s = reader.CopyAdjacent(runs_into(dst), &failed);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(failed, 1u);
  EXPECT_THAT(std::string(s.message()), HasSubstr("entry 'e1': checksum mismatch in block 3"));
  EXPECT_TRUE(BitEqual(dst[0], tensors[0]));
  EXPECT_TRUE(BitEqual(dst[1], at::zeros({40}, at::kLong)));
  EXPECT_TRUE(BitEqual(dst[2], at::zeros({2, 2}, at::kBool)));
}

}  // namespace
}  // namespace shardlight::sharded::checkpoint
