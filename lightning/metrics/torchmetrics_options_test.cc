// The torchmetrics-compatible options on both LibTorch legs (the torch 2.x
// leg also compares with the real torchmetrics: torchmetrics_parity_test):
// Accuracy's first-maximum ties and `average`, the NaN strategies.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "lightning/metrics/accuracy.h"
#include "lightning/metrics/cat_metric.h"
#include "lightning/metrics/mean_metric.h"

namespace shardlight::lightning::metrics {
namespace {

double Value(Metric& m) { return *m.ComputeScalar(); }

// Row 0 ties classes 0 and 2 (target 2): argmax takes 0, a miss. Row 1 is
// class 1, right. Class 3 occurs nowhere; class 2 is only a target.
TEST(AccuracyOptionsTest, TiesTakeTheFirstMaximumAndAverageFollowsTorchmetrics) {
  const at::Tensor scores = at::tensor({1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0}, at::kFloat).reshape({2, 4});
  const at::Tensor target = at::tensor({int64_t{2}, int64_t{1}});
  auto micro = *Accuracy::Create(4, 1, Average::kMicro);
  auto macro = *Accuracy::Create(4, 1, Average::kMacro);
  auto none = *Accuracy::Create(4, 1, Average::kNone);
  for (Accuracy* a : {micro.get(), macro.get(), none.get()}) ASSERT_TRUE(a->Update(scores, target).ok());
  EXPECT_DOUBLE_EQ(Value(*micro), 0.5);
  // Classes 0 (predicted only: 0), 1 (1) and 2 (0) count; 3 does not.
  EXPECT_DOUBLE_EQ(Value(*macro), 1.0 / 3);
  EXPECT_TRUE(at::equal(std::get<at::Tensor>(*none->Compute()), at::tensor({0.0, 1.0, 0.0, 0.0}, at::kDouble)));
  EXPECT_FALSE(none->ComputeScalar().ok());
  EXPECT_EQ(ParseAverage("samples").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NanStrategyTest, EachStrategyAsTorchmetricsNamesIt) {
  const at::Tensor values = at::tensor({1.0, std::nan(""), 3.0}, at::kFloat);
  MeanMetric warn;  // the default: dropped, one warning line
  testing::internal::CaptureStderr();
  ASSERT_TRUE(warn.Update(values).ok());
  ASSERT_TRUE(warn.Update(values).ok());
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "metric 'MeanMetric': dropped 1 NaN (or NaN-weighted) value(s) (nan_strategy \"warn\"; "
                 "\"ignore\" drops them silently)\n");
  EXPECT_DOUBLE_EQ(Value(warn), 2.0);
  MeanMetric ignore(NanStrategy::Ignore());
  ASSERT_TRUE(ignore.Update(values, at::tensor({1.0, 1.0, std::nan("")}, at::kDouble)).ok());
  EXPECT_DOUBLE_EQ(Value(ignore), 1.0);  // a NaN weight drops its value too
  MeanMetric replace(*NanStrategy::Parse("-1"));
  ASSERT_TRUE(replace.Update(values).ok());
  EXPECT_DOUBLE_EQ(Value(replace), 1.0);
  MeanMetric disable(NanStrategy::Disable());
  ASSERT_TRUE(disable.Update(values).ok());
  EXPECT_TRUE(std::isnan(Value(disable)));
  CatMetric error(NanStrategy::Error());
  const absl::Status s = error.Update(values);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("metric 'CatMetric': values hold 1 NaN"), std::string::npos) << s;
  EXPECT_FALSE(error.Compute().ok());  // poisoned until Reset
  EXPECT_EQ(NanStrategy::Parse("drop").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NanStrategy::Parse("2.5")->Name(), "2.5");
}

}  // namespace
}  // namespace shardlight::lightning::metrics
