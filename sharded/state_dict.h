// StateDict: an ordered map from dotted names ("encoder.layer0.weight") to a
// dense tensor or a ShardedTensor -- what modules save and load, and what a
// checkpoint stores.
//
// Insertion order is kept (it is the order parameters were registered in, and
// the order a checkpoint lists its keys). Insert fails with AlreadyExists on a
// duplicate name and InvalidArgument on an empty name; Find returns nullptr
// when absent.
//
// Beside the tensors it carries non-tensor values (plain_value.h: a step, a
// learning rate, a scheduler's state), in their own insertion order: the
// *Value methods. A name is a tensor's or a value's, never both: Insert and
// InsertValue fail with AlreadyExists on a name the other holds; Set and
// SetValue replace whatever the name held. size(), entries(), Keys() and
// Contains() are about the tensors only; values(), ValueKeys() and
// FindValue() about the values.
#ifndef SHARDLIGHT_SHARDED_STATE_DICT_H_
#define SHARDLIGHT_SHARDED_STATE_DICT_H_

#include <ATen/ATen.h>

#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "sharded/plain_value.h"
#include "sharded/sharded_tensor.h"

namespace shardlight::sharded {

using StateValue = std::variant<at::Tensor, ShardedTensor>;

class StateDict {
 public:
  using Entry = std::pair<std::string, StateValue>;
  using ValueEntry = std::pair<std::string, PlainValue>;

  absl::Status Insert(std::string name, StateValue value);
  // Replaces the value of `name`, or inserts it at the end.
  void Set(std::string name, StateValue value);
  const StateValue* Find(const std::string& name) const;
  StateValue* Find(const std::string& name);
  bool Contains(const std::string& name) const { return index_.count(name) > 0; }
  // Removes `name`; returns false if it was absent.
  bool Erase(const std::string& name);

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const std::vector<Entry>& entries() const { return entries_; }
  std::vector<std::string> Keys() const;

  absl::Status InsertValue(std::string name, PlainValue value);
  void SetValue(std::string name, PlainValue value);
  const PlainValue* FindValue(const std::string& name) const;
  PlainValue* FindValue(const std::string& name);
  bool ContainsValue(const std::string& name) const { return value_index_.count(name) > 0; }
  bool EraseValue(const std::string& name);
  const std::vector<ValueEntry>& values() const { return values_; }
  std::vector<std::string> ValueKeys() const;

 private:
  void Reindex();
  void ReindexValues();

  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
  std::vector<ValueEntry> values_;
  std::unordered_map<std::string, size_t> value_index_;
};

inline bool IsSharded(const StateValue& v) { return std::holds_alternative<ShardedTensor>(v); }

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_STATE_DICT_H_
