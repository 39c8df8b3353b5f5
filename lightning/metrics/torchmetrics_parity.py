"""Compares shardlight's metrics (torchmetrics_cases' JSON) with the real
torchmetrics 1.9.0 on the same data: for each world size, torchmetrics is fed
rank 0's rows, then rank 1's, ... (what its own distributed sync would pool),
and its value must equal shardlight's -- integer counts exactly, ratios to
float32 rounding (torchmetrics computes in float32, shardlight in double),
perplexity and means to 1e-5 relative (float32 softmax/log in torchmetrics).
An error under nan_strategy="error" must be an error on both sides.
Usage: torchmetrics_parity.py CASES.json"""
import json
import math
import sys
import warnings

import torch
import torchmetrics
from torchmetrics.aggregation import CatMetric, MeanMetric
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix
from torchmetrics.regression import MeanSquaredError
from torchmetrics.text import Perplexity

assert torchmetrics.__version__ == "1.9.0", torchmetrics.__version__


def tensor(j, dtype):
    return torch.tensor(j["values"], dtype=torch.float64).reshape(j["shape"]).to(dtype)


def peer(case, classes):
    """The torchmetrics metric of a case, and how it takes rows [b, e)."""
    kind, _, rest = case.partition("_")
    if case.startswith("accuracy_top"):
        top_k, average = int(rest[3]), rest.split("_", 1)[1]
        scores = "tied_scores" if top_k == 1 else "scores"
        return (MulticlassAccuracy(classes, top_k=top_k, average=average),
                lambda m, d, b, e: m.update(d[scores][b:e], d["target"][b:e]))
    if case == "confusion_matrix":
        return (MulticlassConfusionMatrix(classes),
                lambda m, d, b, e: m.update(d["tied_scores"][b:e], d["target"][b:e]))
    if case == "perplexity_logits":
        return Perplexity(ignore_index=-100), lambda m, d, b, e: m.update(d["logits"][b:e], d["tokens"][b:e])
    if case == "perplexity_losses":  # the same metric; shardlight was fed cross_entropy's per-token losses
        return Perplexity(ignore_index=-100), lambda m, d, b, e: m.update(d["logits"][b:e], d["tokens"][b:e])
    if case == "mean_squared_error":
        return MeanSquaredError(), lambda m, d, b, e: m.update(d["preds_f"][b:e], d["target_f"][b:e])
    strategy = rest if rest in ("warn", "ignore", "disable", "error") else float(rest)
    if kind == "mean":
        weighted = strategy != "disable"
        return (MeanMetric(nan_strategy=strategy),
                lambda m, d, b, e: m.update(d["values"][b:e], d["weights"][b:e] if weighted else None))
    return CatMetric(nan_strategy=strategy), lambda m, d, b, e: m.update(d["values"][b:e])


def main(path):
    with open(path) as f:
        cases = json.load(f)
    dtypes = {"target": torch.int64, "tokens": torch.int64}
    d = {k: tensor(v, dtypes.get(k, torch.float32)) for k, v in cases["data"].items()}
    # The data has what the comparison is about.
    tied = (d["tied_scores"] == d["tied_scores"].max(1, keepdim=True).values).sum(1) > 1
    assert tied.sum() > 50 and not (d["target"] >= 5).any() and (d["tokens"] == -100).any()
    assert d["values"].isnan().any()
    failures, checked = [], 0
    for r in cases["results"]:
        name = f"W={r['world']} {r['case']}"
        metric, update = peer(r["case"], cases["classes"])
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fresh = {k: v.clone() for k, v in d.items()}  # a float nan_strategy writes into its input
                for b, e in r["slices"]:
                    if e > b:
                        update(metric, fresh, b, e)
                want = metric.compute().double()
        except RuntimeError as err:
            if r["value"] is not None or "nan" not in r["error"].lower():
                failures.append(f"{name}: torchmetrics raised {err!r}, shardlight gave {r['value']} {r['error']!r}")
            checked += 1
            continue
        if r["value"] is None:
            failures.append(f"{name}: shardlight failed ({r['error']}), torchmetrics gave {str(want.tolist())[:300]}")
            continue
        got = tensor(r["value"], torch.float64)
        if r["case"] == "confusion_matrix":
            ok = torch.equal(got, want)
        elif r["case"].startswith("accuracy"):
            ok = got.shape == want.shape and torch.allclose(got.float().double(), want, rtol=0, atol=1e-7)
        else:
            ok = got.shape == want.shape and torch.allclose(got, want, rtol=1e-5, atol=1e-7, equal_nan=True)
        if not ok:
            failures.append(f"{name}: shardlight {str(got.tolist())[:300]} != torchmetrics {str(want.tolist())[:300]}")
        checked += 1
    for line in failures:
        print("MISMATCH", line)
    print(f"{checked} cases checked against torchmetrics {torchmetrics.__version__}, {len(failures)} mismatched")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
