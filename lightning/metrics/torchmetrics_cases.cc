// Writes the cases of torchmetrics_parity_test as JSON (argv[1]): the data --
// scores with ties, classes absent from the targets (one of them also never
// predicted), NaN values, ignored tokens -- and every shardlight metric's
// value on it at W = 1..4 thread-ranks, rank r holding rows [begin, end) of
// an uneven split with rank 1 empty (W > 1). torchmetrics_parity.py feeds the
// same rows to the real torchmetrics and compares.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lightning/metrics/accuracy.h"
#include "lightning/metrics/cat_metric.h"
#include "lightning/metrics/confusion_matrix.h"
#include "lightning/metrics/mean_metric.h"
#include "lightning/metrics/mean_squared_error.h"
#include "lightning/metrics/perplexity.h"
#include "sharded/status_macros.h"
#include "simulate/core/simulated_cluster.h"

namespace shardlight::lightning::metrics {
namespace {

constexpr int64_t kRows = 199, kClasses = 7, kSeq = 5, kVocab = 11;

std::string Json(const at::Tensor& t) {
  const at::Tensor flat = t.to(at::kDouble).contiguous().reshape({-1});
  std::ostringstream out;
  out << "{\"shape\": [";
  for (int64_t i = 0; i < t.dim(); ++i) out << (i ? ", " : "") << t.size(i);
  out << "], \"values\": [";
  char buf[32];
  for (int64_t i = 0; i < flat.numel(); ++i) {
    const double v = flat[i].item<double>();
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    out << (i ? ", " : "") << (std::isnan(v) ? "NaN" : buf);
  }
  out << "]}";
  return out.str();
}

// Rank r's rows [begin, end): uneven (quadratic) and rank 1 empty when W > 1.
std::pair<int64_t, int64_t> Slice(int64_t n, int rank, int w) {
  auto b = [&](int r) { return n * r * r / (int64_t{w} * w); };
  if (w > 1 && rank == 1) return {b(2), b(2)};
  if (w > 1 && rank == 0) return {0, b(2)};
  return {b(rank), b(rank + 1)};
}

struct Data {
  at::Tensor tied_scores, scores, target, logits, tokens, values, weights, preds_f, target_f;
};

Data Make() {
  auto gen = at::detail::createCPUGenerator(46);
  Data d;
  // Scores in {0, 1, 2}: most rows have tied maxima. Targets avoid classes 5
  // and 6; class 6 is never a maximum (its score is -1), class 5 sometimes.
  d.tied_scores = at::randint(3, {kRows, kClasses}, gen, at::kLong).to(at::kFloat);
  d.tied_scores.select(1, 6).fill_(-1);
  d.target = at::randint(5, {kRows}, gen, at::kLong);
  d.scores = at::randn({kRows, kClasses}, gen, at::kFloat);  // no ties: for top_k = 3
  d.logits = at::randn({kRows, kSeq, kVocab}, gen, at::kFloat);
  d.tokens = at::randint(kVocab, {kRows, kSeq}, gen, at::kLong);
  d.tokens.masked_fill_(at::rand({kRows, kSeq}, gen).lt(0.3), -100);
  d.values = at::randn({kRows}, gen, at::kFloat);
  d.values.masked_fill_(at::rand({kRows}, gen).lt(0.1), std::nan(""));
  d.weights = at::rand({kRows}, gen, at::kFloat);
  d.preds_f = at::randn({kRows}, gen, at::kFloat);
  d.target_f = at::randn({kRows}, gen, at::kFloat);
  return d;
}

// One case: a metric, how a rank feeds it its rows, and how to read it.
struct Case {
  std::string name;
  std::function<std::shared_ptr<Metric>()> make;
  std::function<absl::Status(Metric&, const Data&, int64_t, int64_t)> update;
};

template <typename M>
M& As(Metric& m) { return static_cast<M&>(m); }

at::Tensor Rows(const at::Tensor& t, int64_t b, int64_t e) { return t.narrow(0, b, e - b); }

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const char* avg : {"micro", "macro", "weighted", "none"}) {
    const Average average = *ParseAverage(avg);
    cases.push_back({absl::StrCat("accuracy_top1_", avg), [=] { return *Accuracy::Create(kClasses, 1, average); },
                     [](Metric& m, const Data& d, int64_t b, int64_t e) {
                       return As<Accuracy>(m).Update(Rows(d.tied_scores, b, e), Rows(d.target, b, e));
                     }});
    cases.push_back({absl::StrCat("accuracy_top3_", avg), [=] { return *Accuracy::Create(kClasses, 3, average); },
                     [](Metric& m, const Data& d, int64_t b, int64_t e) {
                       return As<Accuracy>(m).Update(Rows(d.scores, b, e), Rows(d.target, b, e));
                     }});
  }
  cases.push_back({"confusion_matrix", [] { return *ConfusionMatrix::Create(kClasses); },
                   [](Metric& m, const Data& d, int64_t b, int64_t e) {
                     return As<ConfusionMatrix>(m).Update(Rows(d.tied_scores, b, e), Rows(d.target, b, e));
                   }});
  cases.push_back({"perplexity_logits", [] { return std::make_shared<Perplexity>(-100); },
                   [](Metric& m, const Data& d, int64_t b, int64_t e) {
                     return As<Perplexity>(m).Update(Rows(d.logits, b, e), Rows(d.tokens, b, e));
                   }});
  cases.push_back({"perplexity_losses", [] { return std::make_shared<Perplexity>(-100); },
                   [](Metric& m, const Data& d, int64_t b, int64_t e) {
                     const at::Tensor logits = Rows(d.logits, b, e), tokens = Rows(d.tokens, b, e);
                     const at::Tensor losses =
                         at::cross_entropy_loss(logits.reshape({-1, kVocab}), tokens.reshape({-1}), {},
                                                at::Reduction::None, -100)
                             .reshape(tokens.sizes());
                     return As<Perplexity>(m).Update(losses, tokens);
                   }});
  cases.push_back({"mean_squared_error", [] { return std::make_shared<MeanSquaredError>(); },
                   [](Metric& m, const Data& d, int64_t b, int64_t e) {
                     return As<MeanSquaredError>(m).Update(Rows(d.preds_f, b, e), Rows(d.target_f, b, e));
                   }});
  for (const char* strategy : {"warn", "ignore", "disable", "error", "2.5"}) {
    const NanStrategy nan = *NanStrategy::Parse(strategy);
    // torchmetrics 1.9 drops MeanMetric's weights under "disable" (nan_strategy.h): unweighted there.
    const bool weighted = std::string(strategy) != "disable";
    cases.push_back({absl::StrCat("mean_", strategy), [=] { return std::make_shared<MeanMetric>(nan); },
                     [=](Metric& m, const Data& d, int64_t b, int64_t e) {
                       return As<MeanMetric>(m).Update(Rows(d.values, b, e),
                                                       weighted ? Rows(d.weights, b, e) : at::Tensor());
                     }});
    cases.push_back({absl::StrCat("cat_", strategy), [=] { return std::make_shared<CatMetric>(nan); },
                     [](Metric& m, const Data& d, int64_t b, int64_t e) {
                       return As<CatMetric>(m).Update(Rows(d.values, b, e));
                     }});
  }
  return cases;
}

absl::Status Main(const std::string& path) {
  const Data d = Make();
  std::ostringstream out;
  out << "{\"rows\": " << kRows << ", \"classes\": " << kClasses << ",\n \"data\": {"
      << "\"tied_scores\": " << Json(d.tied_scores) << ",\n \"scores\": " << Json(d.scores)
      << ",\n \"target\": " << Json(d.target) << ",\n \"logits\": " << Json(d.logits)
      << ",\n \"tokens\": " << Json(d.tokens) << ",\n \"values\": " << Json(d.values)
      << ",\n \"weights\": " << Json(d.weights) << ",\n \"preds_f\": " << Json(d.preds_f)
      << ",\n \"target_f\": " << Json(d.target_f) << "},\n \"results\": [";
  bool first = true;
  for (int w = 1; w <= 4; ++w) {
    std::vector<std::pair<int64_t, int64_t>> slices;
    for (int r = 0; r < w; ++r) slices.push_back(Slice(kRows, r, w));
    for (const Case& c : Cases()) {
      std::string value;
      std::mutex mu;
      simulate::SimulatedCluster cluster(w);
      const absl::Status status = cluster.Run([&](simulate::RankContext& ctx) -> absl::Status {
        std::shared_ptr<Metric> m = c.make();
        SL_RETURN_IF_ERROR(m->Bind(ctx.pg));
        const auto [b, e] = slices[ctx.rank];
        (void)c.update(*m, d, b, e);  // a rejected update fails Compute on every rank
        SL_ASSIGN_OR_RETURN(sharded::StateValue v, m->Compute());
        const at::Tensor t = std::holds_alternative<at::Tensor>(v) ? std::get<at::Tensor>(v)
                                                                   : *std::get<sharded::ShardedTensor>(v).FullTensor();
        std::lock_guard<std::mutex> lock(mu);
        if (ctx.rank == 0) value = Json(t);
        return absl::OkStatus();
      });
      std::string error = status.ok() ? "" : std::string(status.message());
      for (char& ch : error) if (ch == '"' || ch == '\\' || ch == '\n') ch = '\'';
      out << (first ? "\n  " : ",\n  ") << "{\"world\": " << w << ", \"case\": \"" << c.name << "\", \"slices\": [";
      for (int r = 0; r < w; ++r) out << (r ? ", " : "") << "[" << slices[r].first << ", " << slices[r].second << "]";
      out << "], \"value\": " << (status.ok() ? value : "null") << ", \"error\": \"" << error << "\"}";
      first = false;
    }
  }
  out << "\n]}\n";
  std::ofstream file(path);
  file << out.str();
  if (!file.good()) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace
}  // namespace shardlight::lightning::metrics

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: torchmetrics_cases OUT.json\n";
    return 2;
  }
  const absl::Status s = shardlight::lightning::metrics::Main(argv[1]);
  if (!s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  return 0;
}
