// WriteDcpCheckpoint's writer: a PyTorch distributed checkpoint (DCP) written
// by one process, without a process group, for any world size -- what
// `ckpt export --format=dcp` writes. The directory is what SaveDcpCheckpoint
// (dcp_writer.h) would write from that many ranks: rank r's data file holds
// the chunks rank r owns (a tensor chunked along a dim as torch.chunk splits
// it, empty chunks left out; an unchunked tensor whole in rank 0's file), and
// rank 0's file also the non-tensor values, as torch.save payloads that
// dcp.load rebuilds (dcp_files.h). The same commit: data files under names
// unique to the write, fsynced, then .metadata under a temporary name,
// renamed into place, the directory fsynced; then the .distcp files the new
// .metadata does not name are removed. A failure before the commit removes
// what this write wrote and leaves an earlier checkpoint as it was.
//
// Memory: one chunk at a time (each is produced whole by its source).
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_DCP_DCP_OFFLINE_WRITER_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_DCP_DCP_OFFLINE_WRITER_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sharded/checkpoint/format/data_file.h"
#include "sharded/checkpoint/storage/storage.h"
#include "sharded/plain_value.h"

namespace shardlight::sharded::checkpoint::dcp {

struct DcpWriteStats {
  int files = 0;
  int64_t bytes_written = 0;
  int removed = 0;  // stale data files of an earlier checkpoint
};

class OfflineDcpWriter {
 public:
  // `world_size` in 1..65536; `storage` null: DefaultStorage().
  OfflineDcpWriter(std::string dir, int world_size, Storage* storage = nullptr);

  // A tensor of `dtype` and global `sizes` whose bytes `fill` produces (a
  // contiguous CPU tile, global offsets) during Commit; `dim` < 0: whole in
  // rank 0's file, else chunked along `dim` over the ranks. InvalidArgument
  // naming the key: a key added before, a dtype DCP cannot hold, `dim` out
  // of range.
  absl::Status AddTensor(const std::string& key, c10::ScalarType dtype, std::vector<int64_t> sizes, RegionFill fill,
                         int64_t dim);

  // A non-tensor value (PlainValue::Validate's errors; a key added before).
  absl::Status AddValue(const std::string& key, PlainValue value);

  // Writes every rank's data file and commits .metadata. Call once.
  // FailedPrecondition when the directory holds a shardlight checkpoint
  // (index.json: loads would read that one); the sources' and I/O errors.
  absl::Status Commit(DcpWriteStats* stats = nullptr);

 private:
  struct Pending {
    std::string key;
    bool is_value = false;
    c10::ScalarType dtype = c10::ScalarType::Float;
    std::vector<int64_t> sizes;
    RegionFill fill;
    int64_t dim = -1;
    PlainValue value;
  };
  absl::Status CheckNewKey(const std::string& key);
  absl::Status CommitUnsafe(DcpWriteStats* stats, std::vector<std::string>* written);

  std::string dir_;
  int world_size_;
  Storage* storage_;
  std::vector<Pending> pending_;
  std::set<std::string> keys_;
  bool committed_ = false;
};

}  // namespace shardlight::sharded::checkpoint::dcp

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_DCP_DCP_OFFLINE_WRITER_H_
