// Runs a fuzz target over its seed corpus and over simple variants of every
// seed (each prefix at a few cut points, each byte flipped in the first 64),
// so the suite exercises every parser on hostile input on every build, with
// the compiler the suite uses. The libFuzzer binaries explore further.
// Usage: <target>_corpus_test DIR...; fails on an empty corpus.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_target.h"

namespace {

void Run(const std::string& input) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

long Variants(const std::string& seed) {
  long runs = 0;
  Run(seed);
  ++runs;
  for (size_t cut : {size_t{0}, size_t{1}, seed.size() / 4, seed.size() / 2, seed.size() * 3 / 4, seed.size() - 1}) {
    if (cut < seed.size()) {
      Run(seed.substr(0, cut));
      ++runs;
    }
  }
  for (size_t i = 0; i < std::min<size_t>(seed.size(), 64); ++i) {
    for (unsigned char flip : {0x01, 0x80, 0xff}) {
      std::string mutated = seed;
      mutated[i] = static_cast<char>(static_cast<unsigned char>(mutated[i]) ^ flip);
      Run(mutated);
      ++runs;
    }
  }
  return runs;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::filesystem::path> seeds;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(argv[i], ec)) {
      if (entry.is_regular_file()) seeds.push_back(entry.path());
    }
    if (ec) {
      std::fprintf(stderr, "cannot list corpus '%s': %s\n", argv[i], ec.message().c_str());
      return 1;
    }
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "no seed files in the corpus directories given\n");
    return 1;
  }
  std::sort(seeds.begin(), seeds.end());
  long runs = 0;
  for (const auto& path : seeds) {
    std::ifstream in(path, std::ios::binary);
    const std::string seed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    runs += Variants(seed);
  }
  std::printf("%zu seeds, %ld inputs, no crash and every property held\n", seeds.size(), runs);
  return 0;
}
