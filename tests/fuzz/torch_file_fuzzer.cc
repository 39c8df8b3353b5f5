// A whole torch.save file (issue 26): the zip container (our ZipReader, its
// directory and every record, stored or deflated), data.pkl, the selection
// and every selected tensor. Properties: an opened file's records lie inside
// it; a tensor that is built has the dtype its pickle names (its storage's,
// or _rebuild_tensor_v3's over an UntypedStorage) and lies inside it;
// no read allocates more than its record declares (the rss limit and ASan
// catch the rest).
#include <string>

#include "sharded/checkpoint/storage/in_memory_storage.h"
#include "sharded/checkpoint/interop/pytorch/torch_file.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardlight::sharded::checkpoint;
  using namespace shardlight::sharded::checkpoint::pytorch;
  InMemoryStorage storage;
  {
    FUZZ_CHECK(storage.MakeDirectories("/m").ok());
    auto f = File::CreateNew(storage, "/m/in.pt");
    FUZZ_CHECK(f.ok());
    FUZZ_CHECK(f->WriteAt(data, static_cast<int64_t>(size), 0).ok());
    FUZZ_CHECK(f->Close().ok());
  }
  // Without CRC checks: a mutated data.pkl or storage reaches the pickle
  // reader and the tensor checks (CRC failures are tested in zip_reader_test).
  auto file = TorchFile::Open(storage, "/m/in.pt", /*check_crc=*/false);
  if (!file.ok()) return 0;
  // What `ckpt import` selects (values carried, nesting recorded) must never
  // fail but with a status, and each value it carries must be valid.
  SelectOptions carry;
  carry.carry_values = true;
  auto carried = SelectEntries((*file)->graph(), carry);
  if (carried.ok()) {
    for (const SelectedValue& v : carried->values) FUZZ_CHECK(v.value.Validate().ok());
    if (carried->structure) FUZZ_CHECK(carried->structure->Validate().ok());
  }
  auto selection = SelectEntries((*file)->graph(), {});
  if (!selection.ok()) return 0;
  for (const SelectedTensor& t : selection->tensors) {
    auto tensor = (*file)->Tensor(t.node, t.key);
    if (!tensor.ok()) continue;
    const PickleStorage s = (*file)->graph().storage((*file)->graph().tensor(t.node).storage);
    FUZZ_CHECK(tensor->scalar_type() == (*file)->graph().tensor(t.node).dtype);
    FUZZ_CHECK(tensor->storage().nbytes() == static_cast<size_t>(s.numel) * c10::elementSize(s.dtype));
    FUZZ_CHECK(tensor->storage().nbytes() <= size * 1032 + 1024);  // never more than deflate can produce
    // Every element readable (ASan): a copy, which every dtype has (sum does not).
    if (tensor->numel() > 0 && tensor->numel() <= (1 << 20)) tensor->contiguous().clone();
  }
  return 0;
}
