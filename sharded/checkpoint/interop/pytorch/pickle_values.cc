#include "sharded/checkpoint/interop/pytorch/pickle_values.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace shardlight::sharded::checkpoint::pytorch {
namespace {

constexpr int64_t kMaxParts = int64_t{1} << 20;

class Converter {
 public:
  explicit Converter(const PickleGraph& g) : g_(g) {}

  absl::StatusOr<PlainValue> Convert(int id, int depth) {
    if (depth > kMaxPlainValueDepth) {
      return absl::InvalidArgumentError(absl::StrCat("nested deeper than ", kMaxPlainValueDepth, " levels"));
    }
    if (++parts_ > kMaxParts) return absl::InvalidArgumentError(absl::StrCat("more than ", kMaxParts, " parts"));
    switch (g_.kind(id)) {
      case PickleKind::kNone: return PlainValue::None();
      case PickleKind::kBool: return PlainValue::Bool(g_.boolean(id));
      case PickleKind::kInt: return PlainValue::Int(g_.integer(id));
      case PickleKind::kFloat: return PlainValue::Float(g_.real(id));
      case PickleKind::kString: return PlainValue::Str(std::string(g_.text(id)));
      case PickleKind::kBytes: return PlainValue::Bytes(std::string(g_.text(id)));
      case PickleKind::kList:
      case PickleKind::kTuple:
      case PickleKind::kDict: {
        std::vector<PlainValue> items;
        items.reserve(g_.items(id).size());
        for (int item : g_.items(id)) {
          auto v = Convert(item, depth + 1);
          if (!v.ok()) return v.status();
          items.push_back(*std::move(v));
        }
        const PickleKind k = g_.kind(id);
        return k == PickleKind::kList ? PlainValue::List(std::move(items))
                                      : k == PickleKind::kTuple ? PlainValue::Tuple(std::move(items))
                                                                : PlainValue::Dict(std::move(items));
      }
      default: {
        const PickleKind k = g_.kind(id);
        return absl::InvalidArgumentError(absl::StrCat(
            "it holds a ", k == PickleKind::kObject || k == PickleKind::kGlobal ? g_.text(id) : PickleKindName(k),
            " (only None, bools, ints, floats, str, bytes and lists, tuples and dicts of them are carried)"));
      }
    }
  }

 private:
  const PickleGraph& g_;
  int64_t parts_ = 0;
};

}  // namespace

absl::StatusOr<PlainValue> PlainValueOf(const PickleGraph& graph, int id) {
  auto v = Converter(graph).Convert(id, 0);
  if (!v.ok()) return v.status();
  if (absl::Status s = v->Validate(); !s.ok()) return s;
  return v;
}

}  // namespace shardlight::sharded::checkpoint::pytorch
