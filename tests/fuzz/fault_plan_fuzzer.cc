// The --fault flag's plans. Property: an accepted plan prints to a text that
// parses back to the same plan.
#include "absl/strings/string_view.h"
#include "simulate/core/fault_plan.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardlight::simulate;
  auto plan = ParseFaultPlan(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!plan.ok()) return 0;
  auto again = ParseFaultPlan(plan->ToString());
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->ToString() == plan->ToString());
  FUZZ_CHECK(again->kind == plan->kind && again->rank == plan->rank && again->step == plan->step &&
             again->delay == plan->delay);
  return 0;
}
