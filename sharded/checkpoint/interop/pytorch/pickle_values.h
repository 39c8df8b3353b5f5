// Plain values out of a restricted pickle (pickle_reader.h): the non-tensor
// entries of DCP checkpoints and torch.save files as PlainValue
// (sharded/plain_value.h) -- None, bools, ints, floats, str, bytes (protocol
// 3+'s BINBYTES and protocol 2's _codecs.encode(str, 'latin1') alike) and
// lists, tuples and dicts of them.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_PICKLE_VALUES_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_PICKLE_VALUES_H_

#include "absl/status/statusor.h"
#include "sharded/checkpoint/interop/pytorch/pickle_reader.h"
#include "sharded/plain_value.h"

namespace shardlight::sharded::checkpoint::pytorch {

// The value of node `id` of `graph`. InvalidArgument saying what else it
// holds, for anything that is no plain value: "it holds a
// torch.optim.lr_scheduler.StepLR (only None, bools, ...)", a tensor, a
// storage; a dict key that is a list or a dict; a str that is not UTF-8;
// nesting deeper than kMaxPlainValueDepth (a list that holds itself); more
// than 2^20 parts (a pickle that shares one object many times over).
absl::StatusOr<PlainValue> PlainValueOf(const PickleGraph& graph, int id);

}  // namespace shardlight::sharded::checkpoint::pytorch

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_INTEROP_PYTORCH_PICKLE_VALUES_H_
