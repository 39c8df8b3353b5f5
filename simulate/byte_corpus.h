// ByteCorpus: a text file as byte-level tokens (vocabulary 256) and the
// deterministic batches the LM job trains on.
//
// Sample i (a global index, the same whatever the mesh) is the window of
// context + 1 bytes starting at SampleOffset(seed, i): its first `context`
// bytes are the input ids and the window shifted by one the targets. Step s
// of a run with global batch B trains samples s*B .. s*B+B-1, and data-
// parallel rank d of D takes its torch.chunk of them, so every mesh sees the
// same global batch at every step. The offset is a splitmix64 hash (written
// out in SampleOffset so another implementation -- the PyTorch peer script --
// reproduces it exactly).
//
// The default corpus is /usr/share/common-licenses/GPL-3 (the GNU GPL v3
// text, 35 KB of English, shipped by Debian's Essential package base-files,
// so it is on every Debian system; the document may be copied verbatim).
#ifndef SHARDLIGHT_SIMULATE_BYTE_CORPUS_H_
#define SHARDLIGHT_SIMULATE_BYTE_CORPUS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace shardlight::simulate {

inline constexpr char kDefaultCorpus[] = "/usr/share/common-licenses/GPL-3";

// The first byte of sample `index` in a corpus of `size` bytes with windows
// of `window` bytes: splitmix64(seed * 0x9E3779B97F4A7C15 + index) mod
// (size - window + 1).
int64_t SampleOffset(uint64_t seed, int64_t index, int64_t size, int64_t window);

class ByteCorpus {
 public:
  // NotFound when the file is missing or unreadable, InvalidArgument when it
  // holds fewer than context + 1 bytes (empty included), naming the path.
  static absl::StatusOr<ByteCorpus> Load(const std::string& path, int64_t context);

  // Samples [first, first + count): (ids [count, context], targets [count,
  // context]), int64.
  std::pair<at::Tensor, at::Tensor> Samples(uint64_t seed, int64_t first, int64_t count) const;

  int64_t size() const { return bytes_.numel(); }
  int64_t context() const { return context_; }
  const std::string& path() const { return path_; }

 private:
  ByteCorpus(at::Tensor bytes, int64_t context, std::string path)
      : bytes_(std::move(bytes)), context_(context), path_(std::move(path)) {}
  at::Tensor bytes_;  // int64 [size]
  int64_t context_;
  std::string path_;
};

}  // namespace shardlight::simulate

#endif  // SHARDLIGHT_SIMULATE_BYTE_CORPUS_H_
