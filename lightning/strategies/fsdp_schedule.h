// The order of one micro-batch's collectives under per-unit FSDP, as a list
// every rank walks alike: the points where the module's forward and autograd
// reach the run (a unit's forward, the gradient of its output, the end of
// its gradients) and between them the collectives issued and waited there.
//
// It is what makes a failure safe. Every unit collective carries a failure
// flag; a rank whose step fails walks the rest of the list (skipping the
// points) issuing its collectives with the flag set, and every rank -- the
// failed one too -- stops at the first collective it waits on that carries a
// flag, after waiting the ones it had issued. All ranks issue the same
// collectives up to that point, so none is left in one, and the step's
// verdict is agreed right after. A rank whose forward or backward deviates
// from the list (a unit skipped, entered twice or out of order) fails the
// same way, naming the unit.
#ifndef SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_SCHEDULE_H_
#define SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_SCHEDULE_H_

#include <string>
#include <vector>

namespace shardlight::lightning {

struct FsdpEvent {
  enum class Kind { kPoint, kIssue, kWait };
  // kPoint: where the module reached the run.
  enum class Point { kEnter, kBackward, kGradsDone };
  // kIssue / kWait: which collective. kBoundary is a tiny allreduce at the
  // start of each micro-batch and of ReduceGradients (the same collective,
  // so a rank that failed between two micro-batches meets its peers in
  // whichever they are in).
  enum class Op { kBoundary, kGather, kReduceScatter };
  Kind kind;
  Point point = Point::kEnter;
  Op op = Op::kBoundary;
  int unit = 0;
  bool operator==(const FsdpEvent& o) const {
    return kind == o.kind && unit == o.unit && (kind == Kind::kPoint ? point == o.point : op == o.op);
  }
};

// One micro-batch over units 0..n-1 (n = reshard_after_forward.size(), in
// FsdpOptions::units order). Forward: each unit's gather (with prefetch the
// next unit's is issued once the current one's has arrived). With
// `with_grad`, backward in reverse order: a unit resharded after forward is
// gathered again when its output's gradient arrives (with prefetch the one
// before it is issued there too), and its gradients are reduce-scattered
// once all have accumulated.
std::vector<FsdpEvent> MicroBatchEvents(const std::vector<bool>& reshard_after_forward, bool with_grad,
                                        bool prefetch);

// "the forward of unit "blocks.0"", "the all-gather of unit ..." for messages.
std::string DescribeEvent(const FsdpEvent& e, const std::vector<std::string>& unit_names);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_STRATEGIES_FSDP_SCHEDULE_H_
