#include "lightning/strategies/fsdp_schedule.h"

#include "absl/strings/str_cat.h"

namespace shardlight::lightning {
namespace {

FsdpEvent PointAt(FsdpEvent::Point point, int unit) { return {FsdpEvent::Kind::kPoint, point, FsdpEvent::Op::kBoundary, unit}; }
FsdpEvent Issue(FsdpEvent::Op op, int unit) { return {FsdpEvent::Kind::kIssue, FsdpEvent::Point::kEnter, op, unit}; }
FsdpEvent Wait(FsdpEvent::Op op, int unit) { return {FsdpEvent::Kind::kWait, FsdpEvent::Point::kEnter, op, unit}; }

}  // namespace

std::vector<FsdpEvent> MicroBatchEvents(const std::vector<bool>& reshard_after_forward, bool with_grad,
                                        bool prefetch) {
  using Op = FsdpEvent::Op;
  using Point = FsdpEvent::Point;
  const int n = static_cast<int>(reshard_after_forward.size());
  std::vector<FsdpEvent> events;
  for (int u = 0; u < n; ++u) {
    events.push_back(PointAt(Point::kEnter, u));
    if (u == 0) {
      events.push_back(Issue(Op::kBoundary, 0));
      events.push_back(Wait(Op::kBoundary, 0));
    }
    if (!prefetch || u == 0) events.push_back(Issue(Op::kGather, u));
    events.push_back(Wait(Op::kGather, u));
    if (prefetch && u + 1 < n) events.push_back(Issue(Op::kGather, u + 1));
  }
  if (!with_grad) return events;
  for (int j = n - 1; j >= 0; --j) {
    events.push_back(PointAt(Point::kBackward, j));
    if (reshard_after_forward[j]) {
      if (!prefetch || j == n - 1) events.push_back(Issue(Op::kGather, j));
      events.push_back(Wait(Op::kGather, j));
    }
    if (prefetch && j > 0 && reshard_after_forward[j - 1]) events.push_back(Issue(Op::kGather, j - 1));
    events.push_back(PointAt(Point::kGradsDone, j));
    events.push_back(Issue(Op::kReduceScatter, j));
    events.push_back(Wait(Op::kReduceScatter, j));
  }
  return events;
}

std::string DescribeEvent(const FsdpEvent& e, const std::vector<std::string>& unit_names) {
  const std::string unit = absl::StrCat("unit \"", e.unit < static_cast<int>(unit_names.size()) ? unit_names[e.unit] : "?", "\"");
  if (e.kind == FsdpEvent::Kind::kPoint) {
    switch (e.point) {
      case FsdpEvent::Point::kEnter:
        return absl::StrCat("the forward of ", unit);
      case FsdpEvent::Point::kBackward:
        return absl::StrCat("the backward of ", unit);
      case FsdpEvent::Point::kGradsDone:
        return absl::StrCat("the gradients of ", unit);
    }
  }
  switch (e.op) {
    case FsdpEvent::Op::kBoundary:
      return "the micro-batch boundary";
    case FsdpEvent::Op::kGather:
      return absl::StrCat("the all-gather of ", unit);
    case FsdpEvent::Op::kReduceScatter:
      return absl::StrCat("the reduce-scatter of ", unit);
  }
  return "?";
}

}  // namespace shardlight::lightning
