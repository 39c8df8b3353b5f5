#include "sharded/state_dict.h"

#include "absl/strings/str_cat.h"

namespace shardlight::sharded {

absl::Status StateDict::Insert(std::string name, StateValue value) {
  if (name.empty()) return absl::InvalidArgumentError("state dict key is empty");
  if (Contains(name) || ContainsValue(name)) {
    return absl::AlreadyExistsError(absl::StrCat("state dict already has key \"", name, "\""));
  }
  index_.emplace(name, entries_.size());
  entries_.emplace_back(std::move(name), std::move(value));
  return absl::OkStatus();
}

void StateDict::Set(std::string name, StateValue value) {
  auto it = index_.find(name);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  EraseValue(name);
  index_.emplace(name, entries_.size());
  entries_.emplace_back(std::move(name), std::move(value));
}

const StateValue* StateDict::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

StateValue* StateDict::Find(const std::string& name) {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

bool StateDict::Erase(const std::string& name) {
  auto it = index_.find(name);
  if (it == index_.end()) return false;
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(it->second));
  Reindex();
  return true;
}

std::vector<std::string> StateDict::Keys() const {
  std::vector<std::string> keys;
  keys.reserve(entries_.size());
  for (const auto& e : entries_) keys.push_back(e.first);
  return keys;
}

void StateDict::Reindex() {
  index_.clear();
  for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
}

absl::Status StateDict::InsertValue(std::string name, PlainValue value) {
  if (name.empty()) return absl::InvalidArgumentError("state dict key is empty");
  if (Contains(name) || ContainsValue(name)) {
    return absl::AlreadyExistsError(absl::StrCat("state dict already has key \"", name, "\""));
  }
  value_index_.emplace(name, values_.size());
  values_.emplace_back(std::move(name), std::move(value));
  return absl::OkStatus();
}

void StateDict::SetValue(std::string name, PlainValue value) {
  auto it = value_index_.find(name);
  if (it != value_index_.end()) {
    values_[it->second].second = std::move(value);
    return;
  }
  Erase(name);
  value_index_.emplace(name, values_.size());
  values_.emplace_back(std::move(name), std::move(value));
}

const PlainValue* StateDict::FindValue(const std::string& name) const {
  auto it = value_index_.find(name);
  return it == value_index_.end() ? nullptr : &values_[it->second].second;
}

PlainValue* StateDict::FindValue(const std::string& name) {
  auto it = value_index_.find(name);
  return it == value_index_.end() ? nullptr : &values_[it->second].second;
}

bool StateDict::EraseValue(const std::string& name) {
  auto it = value_index_.find(name);
  if (it == value_index_.end()) return false;
  values_.erase(values_.begin() + static_cast<std::ptrdiff_t>(it->second));
  ReindexValues();
  return true;
}

std::vector<std::string> StateDict::ValueKeys() const {
  std::vector<std::string> keys;
  keys.reserve(values_.size());
  for (const auto& e : values_) keys.push_back(e.first);
  return keys;
}

void StateDict::ReindexValues() {
  value_index_.clear();
  for (size_t i = 0; i < values_.size(); ++i) value_index_.emplace(values_[i].first, i);
}

}  // namespace shardlight::sharded
