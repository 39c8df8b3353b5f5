// Export of a shardlight checkpoint as a file Python's torch.load opens
// (PyTorch >= 1.6 zip format; also under torch.load(..., weights_only=True)):
// a dict of key -> tensor, every tensor whole, dtypes and shapes preserved,
// and key -> value for the non-tensor values (plain Python objects);
// or, with `lightning`, PyTorch Lightning's layout
// {"state_dict": {...}, "global_step": N} plus what Lightning 2.x's
// Trainer.fit(ckpt_path=...) needs to resume from it: "pytorch-lightning_version"
// "2.0.0", "loops" (the fit loop's optimizer-step and logger-step counters at
// N) and empty "optimizer_states" and "lr_schedulers" (they start fresh).
// A checkpoint `ckpt import` made of a torch.save or Lightning file (it holds
// the import's record of the file's nesting, torch_file.h's kStructureKey)
// exports without `lightning` and `prefix` as that file was: the same nested
// dicts, lists and tuples, each entry from its tensor or value, and the
// checkpoint's entries the record does not name at the end of the top level.
//
// Memory: one full tensor at a time (plus the reader's buffer): the zip
// writer takes each storage record in one piece, so the largest tensor is
// the bound. OUT is written under a temporary name and renamed into place;
// on failure it is left as it was.
//
// TorchPickleWriter is the pickle half, exposed for tests and other writers.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_TORCH_EXPORT_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_TORCH_EXPORT_H_

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sharded/plain_value.h"

namespace shardlight::sharded::checkpoint::pytorch {

// Protocol-2 pickle opcodes for the shapes torch.save writes (and the
// dataclass instances of a DCP .metadata).
class TorchPickleWriter {
 public:
  TorchPickleWriter();  // writes PROTO 2
  void Mark();
  void EmptyDict();
  void SetItems();  // pops to the mark, into the dict below it
  void String(const std::string& s);
  void Int(int64_t v);
  void Bool(bool v);
  void Global(const std::string& module, const std::string& name);
  void Tuple();  // pops to the mark
  void EmptyTuple();
  void Reduce();
  void None();
  void EmptyList();
  void Appends();  // pops to the mark, into the list below it
  void NewObj();   // cls, args -> cls.__new__(cls, *args)
  void Build();    // obj, state -> obj with its state set
  void PersistentId();  // BINPERSID: the tuple on top is a persistent id
  void Float(double v);  // BINFLOAT
  void Bytes(const std::string& b);  // _codecs.encode(latin-1 text, 'latin1'), as protocol 2 writes bytes
  // A plain value as Python's pickle.dumps would rebuild it: None, bool,
  // int, float, str, bytes, list, tuple, dict (nested).
  void Value(const PlainValue& v);
  // torch._utils._rebuild_tensor_v2 of storage `key` (a record data/<key>)
  // of `storage_numel` elements; _rebuild_tensor_v3 over an UntypedStorage
  // for a dtype without a legacy storage class (float8, uint16..64,
  // complex32). false for a dtype sharded/dtype_table.h does not hold.
  bool Tensor(c10::ScalarType dtype, const std::string& storage_key, int64_t storage_numel, int64_t offset,
              const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides);
  // Appends STOP and returns the pickle.
  std::string Finish();

 private:
  std::string out_;
};

// "torch.FloatStorage"'s "FloatStorage" for a dtype; "" when none (then
// torch.save writes a torch.storage.UntypedStorage).
std::string StorageClassName(c10::ScalarType dtype);

struct ExportOptions {
  bool lightning = false;
  // When non-empty, only keys starting with it are exported, without it
  // ("model." turns a Trainer checkpoint into the module's state dict).
  std::string prefix;
  // Lightning: the first of these keys the checkpoint holds (an int value,
  // or a one-element integer tensor, as earlier releases of the Trainer saved it)
  // gives "global_step" (0 when none) and is not exported itself.
  std::vector<std::string> global_step_keys = {"trainer.step", "global_step"};
  int64_t buffer_bytes = int64_t{64} << 20;  // the checkpoint reader's buffer
};

struct ExportReport {
  int64_t tensors = 0;
  // Non-tensor values written (beside the tensors; Lightning: at the top
  // level), and those not written: in Lightning's layout, a value named as
  // one of the layout's own keys ("global_step", "state_dict", ...).
  int64_t values = 0;
  std::vector<std::string> values_not_exported;
  // Whether the nesting an import recorded was written back (see below).
  bool rebuilt = false;
  int64_t data_bytes = 0;
  std::optional<int64_t> global_step;
};

absl::StatusOr<ExportReport> ExportTorchFile(const std::string& dir, const std::string& out_path,
                                             const ExportOptions& options);

}  // namespace shardlight::sharded::checkpoint::pytorch

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_TORCH_EXPORT_H_
