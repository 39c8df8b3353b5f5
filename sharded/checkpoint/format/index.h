// The global index of a checkpoint (index.json, written by rank 0 last): the
// format version, the world size at save, optionally what run produced it
// (run_record.h), and for every key whether it is
// dense or sharded, its global shape and dtype, and every shard with its box,
// file, entry, absolute byte range and per-block CRC32C checksums.
//
// ParseIndex is the one gate an index passes before it is used: a newer
// format version is FailedPrecondition; an index_crc32c that does not match
// the text is DataLoss; any other inconsistency (bad key or
// file name, unknown dtype, shards that overlap or leave a gap, byte ranges
// outside their file or overlapping each other, checksum counts that do not
// match) is InvalidArgument naming the key. See FORMAT.md.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_INDEX_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_INDEX_H_

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sharded/box.h"
#include "sharded/plain_value.h"
#include "sharded/checkpoint/format/run_record.h"
#include "sharded/shard_metadata.h"

namespace shardlight::sharded::checkpoint {

constexpr int64_t kFormatVersion = 1;
constexpr char kIndexFileName[] = "index.json";
// An index larger than this is refused before it is read.
constexpr int64_t kMaxIndexBytes = int64_t{256} << 20;
// The range of checksum block sizes a save writes and an index may hold. The
// cap bounds what a reader allocates for a (possibly hostile) index: its
// buffer holds 4 blocks.
constexpr int64_t kMinBlockBytes = 64;
constexpr int64_t kMaxBlockBytes = int64_t{64} << 20;
// The most text the "values" member may hold (its values' repr, all
// together): a save with more fails, a reader refuses more.
constexpr int64_t kMaxValuesBytes = int64_t{1} << 20;

struct IndexFile {
  std::string name;  // plain name inside the checkpoint directory
  int rank = 0;      // the rank that wrote it
  int64_t bytes = 0;         // the file's size
  int64_t header_bytes = 0;  // its safetensors header length N
};

// A shard's checksums, inline up to 2 (no heap block for a shard of at most
// two checksum blocks, as most shards of a checkpoint of many tensors are).
using BlockCrcs = absl::InlinedVector<uint32_t, 2>;

// A shard's box of the tensor and where its bytes are.
struct IndexShard : Box {
  int rank = 0;        // owner at save
  int64_t begin = 0;   // absolute byte range in the file
  int64_t end = 0;
  BlockCrcs block_crcs;  // CRC32C of each block_bytes block of [begin, end)

  // The data file and the entry in its header that hold the bytes, when they
  // are not the names this format derives: a shard lives in its rank's file,
  // data-<generation>-r<rank>.safetensors, under the entry "<key>" (dense) or
  // "<key>/shard-<k>" (sharded), and then these are unset. A foreign format
  // (DCP) sets both; decoding an index that names any other keeps the name,
  // which ValidateIndex then refuses. Read them through ShardFileName /
  // ShardEntryName, set them through ShardNamer.
  const std::optional<std::string>& named_file() const { return stated().file; }
  const std::optional<std::string>& named_entry() const { return stated().entry; }
  void set_named_file(std::optional<std::string> name);
  void set_named_entry(std::optional<std::string> name);
  // Foreign formats only (a DCP item saved as a transposed or channels_last
  // view): the bytes are row-major over these dims in this order (EntrySource).
  // Empty: row-major, as this format always writes.
  const std::vector<int64_t>& dim_order() const { return stated().dim_order; }
  void set_dim_order(std::vector<int64_t> order);

 private:
  // What a shard states beyond this format's derived facts: out of line, so
  // a shard of this format (most of an index's records, millions at scale)
  // holds one null pointer for it instead of ~100 bytes.
  struct Stated {
    std::optional<std::string> file;
    std::optional<std::string> entry;
    std::vector<int64_t> dim_order;
  };
  // Owns a Stated; copied with the shard.
  struct StatedPtr {
    std::unique_ptr<Stated> p;
    StatedPtr() = default;
    StatedPtr(const StatedPtr& o) : p(o.p ? std::make_unique<Stated>(*o.p) : nullptr) {}
    StatedPtr& operator=(const StatedPtr& o) {
      p = o.p ? std::make_unique<Stated>(*o.p) : nullptr;
      return *this;
    }
    StatedPtr(StatedPtr&&) noexcept = default;
    StatedPtr& operator=(StatedPtr&&) noexcept = default;
  };
  static const Stated& NoneStated();
  const Stated& stated() const { return stated_.p ? *stated_.p : NoneStated(); }
  Stated& MutableStated();
  void DropIfEmpty();

  StatedPtr stated_;
};

struct IndexTensor {
  std::string key;
  bool sharded = false;
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> shape;
  std::vector<IndexShard> shards;  // one covering the whole tensor when dense

  // The shards as ShardedTensorMetadata (placements on their save ranks).
  ShardedTensorMetadata Metadata() const;
};

// A non-tensor entry of the state dict (FORMAT.md, "values").
struct IndexValue {
  std::string key;
  PlainValue value;
};

struct CheckpointIndex {
  int64_t version = kFormatVersion;
  int world_size = 1;
  std::string generation;  // unique per save; part of every data file name
  int64_t block_bytes = 0;
  std::vector<IndexFile> files;
  std::vector<IndexTensor> tensors;  // state dict order
  std::vector<IndexValue> values;    // the state dict's values, in their order (none before they existed)
  // A foreign format's non-tensor entries that are no value this format
  // holds (a class instance, a key it refuses): key and why, to be named by
  // whoever converts it. Never in this format's own index.
  std::vector<std::pair<std::string, std::string>> not_carried;
  // What produced the checkpoint ("run", optional: empty when the save did
  // not say, as in indexes written before it existed).
  RunRecord run;
  bool sealed = false;  // whether the text carried index_crc32c (DecodeIndex)

  // nullptr when absent. Valid after ParseIndex or Reindex.
  const IndexTensor* Find(const std::string& key) const;
  const IndexFile* FindFile(const std::string& name) const;
  const IndexValue* FindValue(const std::string& key) const;
  // The listed file that holds `shard` (its named_file, else its rank's
  // file), without building a name; nullptr when the list has none.
  const IndexFile* FileOf(const IndexShard& shard) const;
  void Reindex();

 private:
  absl::flat_hash_map<std::string, size_t> tensor_index_;
  absl::flat_hash_map<std::string, size_t> file_index_;
  absl::flat_hash_map<std::string, size_t> value_index_;
  // Position in `files` of each rank's file named as this format derives it
  // (kNoFile: none).
  static constexpr size_t kNoFile = ~size_t{0};
  std::vector<size_t> file_of_rank_;
};

// The name of the data file that holds `shard`: its named_file, else its
// rank's file's as this format derives it from the index's generation.
std::string ShardFileName(const CheckpointIndex& index, const IndexShard& shard);
// The entry name of shard `k` of `tensor`: its named_entry, else "<key>"
// (dense) or "<key>/shard-<k>" (sharded). The view points into `tensor` or
// into `scratch` (written only for a derived sharded name).
absl::string_view ShardEntryName(const IndexTensor& tensor, size_t k, std::string* scratch);
std::string ShardEntryName(const IndexTensor& tensor, size_t k);

// Sets a shard's names from the ones an index or a save record spells: each
// left unset when it is the one this format derives (IndexShard), so that a
// checkpoint of many shards stores no name per shard. Compares names in
// place: it builds and keeps none (whatever the generation's length).
class ShardNamer {
 public:
  explicit ShardNamer(absl::string_view generation);
  // `tensor`'s key and kind are set; `shard` is its shard `k` (not
  // necessarily in tensor.shards yet), its rank set.
  void Name(const IndexTensor& tensor, size_t k, absl::string_view file, absl::string_view entry,
            IndexShard* shard) const;
  // Whether `file` is `rank`'s file as this format names it
  // (data-<generation>-r<rank, at least 5 digits>.safetensors).
  bool IsRankFile(absl::string_view file, int rank) const;
  const std::string& generation() const { return generation_; }
  // Whether JSON spells the generation as is (printable ASCII, no quote or
  // backslash; FORMAT.md's 16 hex digits are), so that a decoder may compare
  // a file name with its text in place.
  bool plain() const { return plain_; }
  // `rank`'s digits in a data file name (zero-padded to 5), in `buffer`.
  static constexpr size_t kRankDigitsBuffer = 32;
  static absl::string_view RankDigits(int rank, char (&buffer)[kRankDigitsBuffer]);
  // `rank`'s whole file name, kept for the ranks of a real job when the
  // generation is plain and of FORMAT.md's length (what a decoder of many
  // shards compares most); else nullptr. Bounded: at most kKeptRanks names
  // of a short generation, whatever a hostile index holds.
  const std::string* KeptRankFile(int rank) const;

 private:
  static constexpr int kKeptRanks = 4096;
  std::string generation_;
  bool plain_;
  mutable std::vector<std::string> kept_;  // by rank, filled as met
};

// Whether `entry` is the name this format derives for shard `k` of a tensor
// with `key` ("<key>/shard-<k>" when sharded, else "<key>").
bool IsDerivedEntryName(absl::string_view entry, absl::string_view key, bool sharded, size_t k);

// Number of checksum blocks of an entry of `bytes` bytes.
inline int64_t NumBlocks(int64_t bytes, int64_t block_bytes) { return (bytes + block_bytes - 1) / block_bytes; }

// Checksums as the index spells them: 8 lowercase hex digits each.
std::string EncodeCrcHex(absl::Span<const uint32_t> crcs);
void AppendCrcHex(absl::Span<const uint32_t> crcs, std::string* out);
bool DecodeCrcHex(absl::string_view hex, std::vector<uint32_t>* crcs);
bool DecodeCrcHex(absl::string_view hex, BlockCrcs* crcs);

// The index's text, ending with its index_crc32c line (SealIndex).
std::string SerializeIndex(const CheckpointIndex& index);

// The member that holds the CRC32C of the index's own text (FORMAT.md).
constexpr char kIndexChecksumField[] = "index_crc32c";

// Appends the index_crc32c line to an index text that ends "\n ]\n}\n" (as
// SerializeIndex writes it before sealing): the checksum covers every byte
// before that line. Tools and tests that edit an index reseal it with this.
std::string SealIndex(std::string unsealed);
// The inverse: `sealed` without its index_crc32c line (unchanged when it has
// none).
std::string UnsealIndex(std::string sealed);

// `display_name` names the index in errors (its path).
absl::StatusOr<CheckpointIndex> ParseIndex(const std::string& json, const std::string& display_name);

// Only the decoding half of ParseIndex (types, names of fields, the version,
// the index's own checksum): for tools that show a damaged index before
// reporting what is wrong with it. Streams: its memory is a small multiple of
// what the index describes, nesting deeper than 8 levels, duplicate keys and
// a byte-order mark are refused (json_stream.h). Callable on any byte buffer.
// `check_checksum` false skips CheckIndexChecksum (`sealed` still says
// whether there is one).
absl::StatusOr<CheckpointIndex> DecodeIndex(const std::string& json, const std::string& display_name,
                                            bool check_checksum = true);

// DataLoss when index_crc32c does not match the text; InvalidArgument when it
// is not the text's last line in the form SealIndex writes.
absl::Status CheckIndexChecksum(const std::string& json, const std::string& display_name);

// Every check ParseIndex makes after decoding the JSON.
absl::Status ValidateIndex(const CheckpointIndex& index, const std::string& display_name);

// The values part of ValidateIndex: valid keys, each once and none a
// tensor's, valid values (PlainValue::Validate), at most kMaxValuesBytes of
// text.
absl::Status ValidateIndexValues(const CheckpointIndex& index, const std::string& display_name);

// The naming part of ValidateIndex: a 16-hex-digit generation, every file
// named data-<generation>-r<rank>.safetensors, every shard in its rank's file
// under the entry "<key>/shard-<i>" (a dense tensor: "<key>").
absl::Status ValidateIndexNaming(const CheckpointIndex& index, const std::string& display_name);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_FORMAT_INDEX_H_
