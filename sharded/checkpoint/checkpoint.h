// Distributed checkpoints of a StateDict: every rank saves its own shards,
// the commit is atomic, and a load on any world size and any sharding spec
// reads only the bytes each rank needs. The on-disk format is FORMAT.md.
//
// Save (collective): each rank writes one safetensors data file under a
// temporary name and fsyncs it; the ranks agree that every write succeeded;
// each renames its file to its final (per-save unique) name; rank 0 writes
// index.json under a temporary name, fsyncs it and renames it into place
// last, then fsyncs the directory. Until that rename the previous checkpoint
// in the directory is the one a load sees; a save that dies part-way leaves
// only unreferenced files, which the next successful save removes (and
// names, SaveOptions::on_removed). The previous checkpoint's files are
// removed only once the rename is durable.
// Dense tensors are written once, by rank 0. An exception on one rank (from
// the storage, a tensor copy, ...) is that rank's error like any other: it
// never leaves its peers waiting. All file operations go through the options'
// Storage (storage.h; POSIX by default), in the order above.
//
// Load (collective): the state dict to fill carries the target layout --
// ShardedTensors already created with the loading job's spec and world size,
// dense tensors preallocated. Each rank reads the byte ranges overlapping its
// own shards (plus, for dense tensors, the whole tensor), straight into the
// destination where the layouts allow, checking per-block CRC32C. Peak extra
// memory per rank is one buffer (LoadOptions::buffer_bytes, which must hold 4
// of the checkpoint's checksum blocks), for any size.
//
// Errors are the same on every rank and name the failing rank, file and key.
// A load checks the index, every data file it needs and every shape before
// it writes a byte, so a bad checkpoint (missing or truncated file, bad
// header, unknown dtype, shape mismatch, newer format, shards that do not
// cover a tensor, bad key) leaves the destination untouched. A checksum
// mismatch is found while reading: by default the tensors read before it
// keep their new values and the corrupt range is unspecified; with
// LoadOptions::verify_before_write every needed block is checked before
// anything is written (an extra read of the same bytes).
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_CHECKPOINT_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sharded/checkpoint/format/run_record.h"
#include "sharded/checkpoint/storage/storage.h"
#include "sharded/state_dict.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::sharded::checkpoint {

// Receives the lines of RemovalLine.
using RemovalLog = std::function<void(const std::string& line)>;

// "removed 3 files in '<dir>': <why>" ("1 file"): how every cleanup of a
// save or a resume says what it removed.
std::string RemovalLine(int files, const std::string& dir, const std::string& why);

struct SaveOptions {
  // CRC32C granularity, 64 B .. 64 MiB. Smaller blocks make partial
  // (resharding) loads read fewer extra bytes; larger ones make the index
  // smaller (4 bytes/block). A load needs a buffer of 4 blocks.
  int64_t checksum_block_bytes = 256 << 10;
  // Staging buffer for tensors that are not contiguous CPU memory.
  int64_t buffer_bytes = 16 << 20;
  // After the commit, rank 0 deletes data and temporary files in the
  // directory that the new index does not reference (earlier checkpoints,
  // leftovers of failed saves), once the commit is durable.
  bool remove_stale_files = true;
  // Where the files go; null: DefaultStorage() (storage/default_storage.h: s3:// on S3, else POSIX). Each rank may pass its own.
  std::shared_ptr<Storage> storage;
  // What produced this checkpoint, recorded in the index as "run" (rank 0's;
  // empty: none). See run_record.h; an invalid record fails the save.
  RunRecord run;
  // Told, on rank 0, of every file the save removes besides its own
  // temporary ones (the stale files above; in a root, the step directories
  // retention deletes): one line each time, how many files, where and why
  // (RemovalLine). Nothing disappears unannounced when it prints them (the
  // Trainer does, on rank 0's output). Null: nobody is told.
  RemovalLog on_removed;
};

struct SaveStats {
  int64_t bytes_written = 0;  // this rank's data file
  // Wall time on this rank: writing and syncing its data file, and the rest
  // (planning, the agreements, the commit): the metadata's cost apart.
  double data_seconds = 0;
  double metadata_seconds = 0;
};

// Collective. Fails on every rank with the same error (naming the failing
// rank) for: a bad key (see names.h), a dtype that cannot be saved, ranks
// passing different keys or layouts, any I/O error or an exception; nothing
// is committed. The one exception to "nothing is committed": when the fsync
// of the directory after the commit fails, the error says the new checkpoint
// is committed but may not be durable, and the previous one's files are kept.
absl::Status SaveCheckpoint(const StateDict& state_dict, const std::string& dir, c10d::ProcessGroup& pg,
                            const SaveOptions& options = {}, SaveStats* stats = nullptr);

struct LoadOptions {
  // The bounded buffer partial blocks and strided regions go through: the
  // load's peak extra memory. It must hold 4 of the checkpoint's checksum
  // blocks (SaveOptions::checksum_block_bytes); a smaller one fails the load.
  int64_t buffer_bytes = 16 << 20;

  // Selective load. A checkpoint key is selected when it is one of `keys` or
  // starts with one of `key_prefixes`; with both empty, every key is. A key
  // of `keys` that the checkpoint lacks, or a filter that selects nothing,
  // fails the load (NotFound). Only the selected keys' bytes are read.
  std::vector<std::string> keys;
  std::vector<std::string> key_prefixes;
  // Remapping of the selected checkpoint keys to keys of the state dict to
  // fill: a key in `rename` takes its mapped name; any other loses
  // `strip_prefix` when it starts with it, then gains `add_prefix`. A rename
  // of a key the checkpoint lacks, a mapped name that is not a valid key, or
  // two checkpoint keys mapped to one name fail the load (InvalidArgument).
  std::map<std::string, std::string> rename;
  std::string strip_prefix;
  std::string add_prefix;
  // Keys of the state dict to fill that no selected checkpoint key maps to
  // are missing; selected checkpoint keys whose name is not in the state
  // dict are unexpected. Strict: either fails the load (InvalidArgument
  // "strict load: missing keys: ...; unexpected keys: ..."). Otherwise the
  // missing keys keep their values, the unexpected ones are not read, and
  // both lists are in LoadStats. Values (StateDict::values()) count like
  // tensors, but for one rule: a state dict without any value loads tensors
  // only, and the checkpoint's values are not unexpected to it.
  bool strict = true;
  // Check every needed block before writing any destination byte.
  bool verify_before_write = false;
  // Where the files are; null: DefaultStorage() (storage/default_storage.h: s3:// on S3, else POSIX).
  std::shared_ptr<Storage> storage;
};

struct LoadStats {
  int64_t data_bytes_read = 0;    // from data files (checked blocks)
  int64_t header_bytes_read = 0;  // safetensors headers of the files opened
  int64_t index_bytes_read = 0;
  int64_t bytes_loaded = 0;  // written into this rank's destination tensors
  int files_opened = 0;
  // Wall time on this rank: reading (and verifying) the bytes it loads, and
  // the rest (the index, the plan, the agreements).
  double data_seconds = 0;
  double metadata_seconds = 0;
  // Pieces read: one per overlap of a saved shard with a destination box of
  // this rank (a whole small tensor is one piece).
  int64_t pieces_read = 0;
  // The state dict's keys nothing was loaded into, and the selected
  // checkpoint keys (as the index names them) that were not loaded; sorted.
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
  int64_t total_bytes_read() const { return data_bytes_read + header_bytes_read + index_bytes_read; }
};

// Collective. Fills every tensor of `to_fill` from the checkpoint in `dir`,
// the tensor under the same key or the selected key mapped to it (see
// LoadOptions), with the same global shape and dtype; dense and sharded may
// be mixed either way. Each value of `to_fill` (StateDict::values();
// FORMAT.md "values") is set likewise, once the tensors are in; a key that
// is a tensor on one side and a value on the other fails the load. Every bad option is found before a byte is written,
// and every rank returns the same error.
absl::Status LoadCheckpoint(StateDict& to_fill, const std::string& dir, c10d::ProcessGroup& pg,
                            const LoadOptions& options = {}, LoadStats* stats = nullptr);

// Whether `dir` holds a committed checkpoint: an index entry is in place,
// whatever it is. An index that cannot be read (a dangling symbolic link, a
// link loop, a directory, a FIFO, an unreadable or invalid file) still counts:
// it is a checkpoint a load must report as broken, never "no checkpoint
// here" to start over in (and so clean up). Only a directory without an
// index entry (empty, missing, or holding a save that never committed) has
// none. Local: no communication, and no check of the contents
// (LoadCheckpoint does that, and names what is wrong). A null `storage` is
// DefaultStorage() (s3:// on S3, else POSIX).
bool HasCommittedCheckpoint(const std::string& dir, Storage* storage = nullptr);

// Removes the files the committed index in `dir` does not reference, with the
// care a save's commit takes: only names of the exact form a save gives its
// data and temporary files (file_names.h), and only after the index has been
// read and validated and the directory fsynced (so a lost rename cannot
// bring back an index that needs them). What a save killed after its commit,
// or a failed save, left behind. Local: call it from one rank (the Trainer's
// rank 0 does after a resume). Returns the number of files removed, and
// tells `on_removed` (RemovalLine) when there were any; an unreadable or
// invalid index (NotFound when there is none) removes nothing.
absl::StatusOr<int> RemoveUnreferencedFiles(const std::string& dir, Storage* storage = nullptr,
                                            const RemovalLog& on_removed = nullptr);

}  // namespace shardlight::sharded::checkpoint

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_CHECKPOINT_H_
