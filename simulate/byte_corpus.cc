#include "simulate/byte_corpus.h"

#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"

namespace shardlight::simulate {

int64_t SampleOffset(uint64_t seed, int64_t index, int64_t size, int64_t window) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(index);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z = z ^ (z >> 31);
  return static_cast<int64_t>(z % static_cast<uint64_t>(size - window + 1));
}

absl::StatusOr<ByteCorpus> ByteCorpus::Load(const std::string& path, int64_t context) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("corpus '", path, "' is missing or unreadable"));
  const std::vector<char> text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::NotFoundError(absl::StrCat("corpus '", path, "' could not be read"));
  if (context < 1 || static_cast<int64_t>(text.size()) < context + 1) {
    return absl::InvalidArgumentError(absl::StrCat("corpus '", path, "' holds ", text.size(),
                                                   " bytes; a context of ", context, " needs at least ", context + 1));
  }
  at::Tensor bytes = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
  std::copy(text.begin(), text.end(), reinterpret_cast<char*>(bytes.data_ptr<uint8_t>()));
  return ByteCorpus(bytes.to(at::kLong), context, path);
}

std::pair<at::Tensor, at::Tensor> ByteCorpus::Samples(uint64_t seed, int64_t first, int64_t count) const {
  at::Tensor windows = at::empty({count, context_ + 1}, at::kLong);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t start = SampleOffset(seed, first + i, size(), context_ + 1);
    windows[i].copy_(bytes_.narrow(0, start, context_ + 1));
  }
  return {windows.narrow(1, 0, context_).contiguous(), windows.narrow(1, 1, context_).contiguous()};
}

}  // namespace shardlight::simulate
