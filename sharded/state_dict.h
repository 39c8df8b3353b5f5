// StateDict: an ordered map from dotted names ("encoder.layer0.weight") to a
// dense tensor or a ShardedTensor -- what modules save and load, and what a
// checkpoint stores.
//
// Insertion order is kept (it is the order parameters were registered in, and
// the order a checkpoint lists its keys). Insert fails with AlreadyExists on a
// duplicate name and InvalidArgument on an empty name; Find returns nullptr
// when absent.
#ifndef SHARDLIGHT_SHARDED_STATE_DICT_H_
#define SHARDLIGHT_SHARDED_STATE_DICT_H_

#include <ATen/ATen.h>

#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "sharded/sharded_tensor.h"

namespace shardlight::sharded {

using StateValue = std::variant<at::Tensor, ShardedTensor>;

class StateDict {
 public:
  using Entry = std::pair<std::string, StateValue>;

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

 private:
  void Reindex();

  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
};

inline bool IsSharded(const StateValue& v) { return std::holds_alternative<ShardedTensor>(v); }

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_STATE_DICT_H_
