#include "lightning/torch_names.h"

#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardlight::lightning {
namespace {

using sharded::PlainValue;

std::string Quote(const std::string& s) { return absl::StrCat("'", s, "'"); }
std::string SizesText(const std::vector<int64_t>& sizes) { return absl::StrCat("[", absl::StrJoin(sizes, ", "), "]"); }

// "<a>.<b>" at its last dot; false when there is none.
bool SplitLast(const std::string& s, std::string* head, std::string* tail) {
  const size_t dot = s.rfind('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == s.size()) return false;
  *head = s.substr(0, dot);
  *tail = s.substr(dot + 1);
  return true;
}

absl::Status Bad(const std::string& what) { return absl::FailedPreconditionError(what); }

// The checkpoint entry `key` must be `dtype` and `sizes` (what it stands for: `role`).
absl::Status CheckEntry(const NamedTensor& entry, const std::string& dtype, const std::vector<int64_t>& sizes,
                        const std::string& role) {
  if (entry.sizes != sizes) {
    return Bad(absl::StrCat("checkpoint's ", Quote(entry.key), " has sizes ", SizesText(entry.sizes), ", ", role,
                            " has ", SizesText(sizes)));
  }
  if (entry.dtype != dtype) {
    return Bad(absl::StrCat("checkpoint's ", Quote(entry.key), " is ", entry.dtype, ", ", role, " is ", dtype));
  }
  return absl::OkStatus();
}

bool IsNumber(const PlainValue& v) {
  return v.kind() == PlainValue::Kind::kInt || v.kind() == PlainValue::Kind::kFloat;
}
double NumberOf(const PlainValue& v) {
  return v.kind() == PlainValue::Kind::kInt ? static_cast<double>(v.integer()) : v.real();
}

// Equal settings: numbers by value, lists and tuples item by item, the rest exactly.
bool SameSetting(const PlainValue& a, const PlainValue& b) {
  if (IsNumber(a) && IsNumber(b)) return NumberOf(a) == NumberOf(b);
  const auto sequence = [](const PlainValue& v) {
    return v.kind() == PlainValue::Kind::kList || v.kind() == PlainValue::Kind::kTuple;
  };
  if (sequence(a) && sequence(b)) {
    if (a.items().size() != b.items().size()) return false;
    for (size_t i = 0; i < a.items().size(); ++i) {
      if (!SameSetting(a.items()[i], b.items()[i])) return false;
    }
    return true;
  }
  return a == b;
}

// torch.optim fields that choose how torch computes the update, not what it is.
bool IsHowTorchComputes(const std::string& field) {
  return field == "foreach" || field == "fused" || field == "capturable" || field == "differentiable";
}

struct CheckpointGroup {
  ParamGroupFields fields;
  const PlainValue* params = nullptr;
};

}  // namespace

bool HasTorchOptimizerNames(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    if (absl::StartsWith(key, kTorchStatePrefix) || absl::StartsWith(key, kTorchGroupsPrefix)) return true;
  }
  return false;
}

absl::StatusOr<TorchLoadPlan> PlanTorchLoad(const std::vector<NamedTensor>& checkpoint,
                                            const std::vector<std::string>& value_keys, const RunNames& run) {
  std::unordered_map<std::string, const NamedTensor*> held;
  for (const NamedTensor& t : checkpoint) held[t.key] = &t;
  std::unordered_map<std::string, const NamedTensor*> model;
  for (const NamedTensor& m : run.model) model[m.key] = &m;
  TorchLoadPlan plan;
  std::set<std::string> planned;
  for (const NamedTensor& m : run.model) {
    const std::string key = kTorchModelPrefix + m.key;
    const auto it = held.find(key);
    if (it == held.end()) return Bad(absl::StrCat("checkpoint lacks ", Quote(key), " (the model's ", Quote(m.key), ")"));
    if (absl::Status s = CheckEntry(*it->second, m.dtype, m.sizes, absl::StrCat("the model's ", Quote(m.key))); !s.ok()) {
      return s;
    }
    plan.tensors.emplace_back(key, key);
    planned.insert(key);
  }
  for (const std::string& p : run.params) {
    const auto param = model.find(p);
    if (param == model.end()) return absl::InternalError(absl::StrCat("parameter ", Quote(p), " is not in the model"));
    for (const std::string& name : run.state_names) {
      const std::string key = absl::StrCat(kTorchStatePrefix, p, ".", name);
      const std::string role = absl::StrCat(name, " of parameter ", Quote(p));
      const auto it = held.find(key);
      if (it == held.end()) return Bad(absl::StrCat("checkpoint lacks ", Quote(key), " (", role, ")"));
      if (absl::Status s = CheckEntry(*it->second, param->second->dtype, param->second->sizes, role); !s.ok()) return s;
      plan.tensors.emplace_back(key, absl::StrCat("optimizer.", p, ".", name));
      planned.insert(key);
    }
    const std::string step = absl::StrCat(kTorchStatePrefix, p, ".", kTorchStepName);
    const auto it = held.find(step);
    if (it == held.end()) {
      return Bad(absl::StrCat("checkpoint lacks ", Quote(step), " (the step count of parameter ", Quote(p), ", a 0-dim tensor)"));
    }
    if (!it->second->sizes.empty()) {
      return Bad(absl::StrCat("checkpoint's ", Quote(step), " has sizes ", SizesText(it->second->sizes),
                              ", a step count is a 0-dim tensor"));
    }
    plan.steps.push_back(step);
    planned.insert(step);
  }
  // What the checkpoint holds beyond the run: another model's parameters or another optimizer's state.
  std::vector<std::string> keys;
  for (const NamedTensor& t : checkpoint) keys.push_back(t.key);
  keys.insert(keys.end(), value_keys.begin(), value_keys.end());
  const std::set<std::string> params(run.params.begin(), run.params.end());
  for (const std::string& key : keys) {
    if (planned.count(key) > 0) continue;
    if (absl::StartsWith(key, kTorchModelPrefix)) {
      return Bad(absl::StrCat("checkpoint holds ", Quote(key), ", and this model has no ",
                              Quote(key.substr(sizeof(kTorchModelPrefix) - 1))));
    }
    if (!absl::StartsWith(key, kTorchStatePrefix)) continue;
    std::string fqn, name;
    if (!SplitLast(key.substr(sizeof(kTorchStatePrefix) - 1), &fqn, &name) || params.count(fqn) == 0) {
      return Bad(absl::StrCat("checkpoint holds ", Quote(key), ", optimizer state of a parameter this model does not have",
                              fqn.empty() ? "" : absl::StrCat(" (", Quote(fqn), ")")));
    }
    return Bad(absl::StrCat("checkpoint holds ", Quote(key), ": state ", Quote(name), " of parameter ", Quote(fqn),
                            ", which this run's optimizer does not keep (it keeps ",
                            absl::StrJoin(run.state_names, ", "), " and one step)"));
  }
  return plan;
}

absl::StatusOr<int64_t> OneStep(const std::vector<std::pair<std::string, double>>& steps) {
  for (const auto& [key, value] : steps) {
    if (!std::isfinite(value) || value < 0 || value != std::floor(value) || value > 9.0e15) {
      return Bad(absl::StrCat("checkpoint's ", Quote(key), " is ", value, ", not a step count (an integer >= 0)"));
    }
  }
  for (const auto& [key, value] : steps) {
    if (value != steps.front().second) {
      return Bad(absl::StrCat("checkpoint's ", Quote(key), " is ", value, " and ", Quote(steps.front().first), " is ",
                              steps.front().second,
                              ": torch keeps a step count per parameter, this run's optimizer one for all "
                              "(unequal counts, from a parameter without a gradient at some step, do not map)"));
    }
  }
  return steps.empty() ? 0 : static_cast<int64_t>(steps.front().second);
}

std::vector<TorchParamGroup> GroupParams(const std::vector<std::string>& params,
                                         const std::function<ParamGroupFields(const std::string&)>& fields_of) {
  std::vector<TorchParamGroup> groups;
  for (const std::string& p : params) {
    ParamGroupFields fields = fields_of(p);
    TorchParamGroup* into = nullptr;
    for (TorchParamGroup& g : groups) {
      if (g.fields == fields) into = &g;
    }
    if (into == nullptr) {
      groups.push_back({std::move(fields), {}});
      into = &groups.back();
    }
    into->params.push_back(p);
  }
  return groups;
}

ParamGroupFields FlattenParamGroups(const std::vector<TorchParamGroup>& groups) {
  ParamGroupFields flat;
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string prefix = absl::StrCat(kTorchGroupsPrefix, i, ".");
    for (const auto& [name, value] : groups[i].fields) flat.emplace_back(prefix + name, value);
    std::vector<PlainValue> names;
    for (const std::string& p : groups[i].params) names.push_back(PlainValue::Str(p));
    flat.emplace_back(prefix + kTorchParamsField, PlainValue::List(std::move(names)));
  }
  return flat;
}

absl::StatusOr<std::vector<std::string>> CompareParamGroups(
    const ParamGroupFields& values, const std::vector<std::string>& params,
    const std::function<ParamGroupFields(const std::string&)>& fields_of) {
  // The checkpoint's groups by id (an index, or an fqn in the flattened form), in order.
  std::vector<std::string> order;
  std::map<std::string, CheckpointGroup> groups;
  for (const auto& [key, value] : values) {
    if (!absl::StartsWith(key, kTorchGroupsPrefix)) continue;
    std::string id, field;
    if (!SplitLast(key.substr(sizeof(kTorchGroupsPrefix) - 1), &id, &field)) {
      return Bad(absl::StrCat("checkpoint's ", Quote(key), " is not optim.param_groups.<group>.<field>"));
    }
    if (groups.count(id) == 0) order.push_back(id);
    CheckpointGroup& g = groups[id];
    if (field == kTorchParamsField) {
      g.params = &value;
    } else {
      g.fields.emplace_back(field, value);
    }
  }
  const std::set<std::string> known(params.begin(), params.end());
  std::map<std::string, std::string> group_of;  // fqn -> group id
  for (const std::string& id : order) {
    std::vector<std::string> members;
    const PlainValue* list = groups[id].params;
    if (list == nullptr) {
      members.push_back(id);  // flattened form: the group is its parameter's
    } else {
      bool names = list->kind() == PlainValue::Kind::kList || list->kind() == PlainValue::Kind::kTuple;
      for (size_t i = 0; names && i < list->items().size(); ++i) {
        names = list->items()[i].kind() == PlainValue::Kind::kStr;
        if (names) members.push_back(list->items()[i].text());
      }
      if (!names) {
        return Bad(absl::StrCat("checkpoint's ", Quote(absl::StrCat(kTorchGroupsPrefix, id, ".", kTorchParamsField)),
                                " is ", list->Repr(), ", not a list of parameter names"));
      }
    }
    for (const std::string& fqn : members) {
      if (known.count(fqn) == 0) {
        return Bad(absl::StrCat("checkpoint's param_groups ", Quote(id), " names ", Quote(fqn),
                                ", a parameter this model does not have"));
      }
      if (!group_of.emplace(fqn, id).second) {
        return Bad(absl::StrCat("checkpoint's param_groups ", Quote(group_of[fqn]), " and ", Quote(id),
                                " both name parameter ", Quote(fqn)));
      }
    }
  }
  // Differences, one line per (group, field, this run's value) with the parameters it concerns.
  std::vector<std::string> lines;
  std::map<std::string, std::vector<std::string>> differing;  // line head -> parameters
  std::vector<std::string> heads;
  for (const std::string& p : params) {
    const auto owner = group_of.find(p);
    if (owner == group_of.end()) {
      return Bad(absl::StrCat("checkpoint's param_groups do not name parameter ", Quote(p)));
    }
    const CheckpointGroup& g = groups[owner->second];
    for (const auto& [name, mine] : fields_of(p)) {
      if (IsHowTorchComputes(name)) continue;
      for (const auto& [field, theirs] : g.fields) {
        if (field != name || SameSetting(mine, theirs)) continue;
        const std::string head = absl::StrCat(kTorchGroupsPrefix, owner->second, ".", field, " is ", theirs.Repr(),
                                              ", this run's ", name, " is ", mine.Repr());
        if (differing.count(head) == 0) heads.push_back(head);
        differing[head].push_back(p);
      }
    }
  }
  for (const std::string& head : heads) {
    const std::vector<std::string>& ps = differing[head];
    lines.push_back(absl::StrCat(head, " (parameter ", Quote(ps.front()),
                                 ps.size() > 1 ? absl::StrCat(" and ", ps.size() - 1, " more") : "", ")"));
  }
  return lines;
}

}  // namespace shardlight::lightning
