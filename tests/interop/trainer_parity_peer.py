"""The real pytorch_lightning side of //tests/interop:trainer_parity_test.

  lightning OUT.json [PRECISION]
                       Trainer.fit (precision: 32-true by default, or bf16-mixed) of Net (weights and data from closed-form torch formulas that
                       trainer_parity_run.cc computes alike) with accumulate_grad_batches=2,
                       gradient_clip_val=1.0, AdamW + a LambdaLR warm-up/cosine stepped every
                       optimizer step, validation every 4 batches (2 optimizer steps) and
                       ModelCheckpoint(monitor="val_loss", save_top_k=2, save_last=True); writes each
                       step's loss (the mean of its 2 micro-batch losses) and lr, each validation's
                       val_loss, ModelCheckpoint's best_k_models and the files it left.
  compare OURS THEIRS [TOLERANCE]
                       shardlight's run (trainer_parity_run's JSON) against Lightning's: loss and lr
                       of every step and val_loss of every validation within fp32 relative 1e-6, the
                       two steps of lowest val_loss are those ModelCheckpoint kept, our
                       ModelCheckpoint's best_k_models are Lightning's, and the checkpoints each
                       leaves on disk are the same steps (its last.ckpt = our `latest`).
"""

import json
import math
import os
import re
import sys
import tempfile

# The constants both sides share (trainer_parity_run.cc has the same).
STEPS, MICRO, ROWS, ACCUMULATE = 8, 4, 4, 2
VAL_BATCHES, VAL_ROWS = 3, 5
LR, WEIGHT_DECAY, WARMUP, START, MIN = 0.02, 0.05, 3, 0.1, 0.05


def factor(t):
    # shardlight's LrSchedule kWarmupCosine (lightning/lr_schedule.h), total_steps = STEPS.
    if t < WARMUP:
        return START + (1 - START) * t / WARMUP
    p = min(1.0, (t - WARMUP) / (STEPS - WARMUP))
    return MIN + (1 - MIN) * (1 + math.cos(math.pi * p)) / 2


def main():
    if sys.argv[1] == "compare":
        return compare(sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 1e-6)
    precision = sys.argv[3] if len(sys.argv) > 3 else "32-true"
    import torch
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint

    def closed_form(n, offset):
        return torch.sin(torch.arange(n, dtype=torch.float64) * 0.37 + offset) * 0.3

    def rows(n, offset):
        x = torch.cos(torch.arange(n * 4, dtype=torch.float64) * 0.11 + offset).reshape(n, 4).float()
        return x, torch.sin(x.sum(1) * 1.3) * 3

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.l1 = torch.nn.Linear(4, 8)
            self.l2 = torch.nn.Linear(8, 1)
            with torch.no_grad():
                for i, p in enumerate([self.l1.weight, self.l1.bias, self.l2.weight, self.l2.bias]):
                    p.copy_(closed_form(p.numel(), i).float().reshape(p.shape))
            self.micro, self.lrs, self.vals = [], [], []

        def loss(self, batch):
            x, y = batch
            return (self.l2(torch.tanh(self.l1(x))).reshape(-1) - y).pow(2).mean()

        def training_step(self, batch, i):
            loss = self.loss(batch)
            if i % ACCUMULATE == 0:
                self.lrs.append(self.optimizers().param_groups[0]["lr"])
            self.micro.append(loss.item())
            return loss

        def validation_step(self, batch, i):
            self.log("val_loss", self.loss(batch))

        def on_validation_epoch_end(self):
            self.vals.append([self.global_step, self.trainer.callback_metrics["val_loss"].item()])

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    train = torch.utils.data.TensorDataset(*rows(STEPS * ACCUMULATE * MICRO, 0.0))
    val = torch.utils.data.TensorDataset(*rows(VAL_BATCHES * VAL_ROWS, 0.5))
    net = Net()
    with tempfile.TemporaryDirectory() as d:
        keep = ModelCheckpoint(dirpath=d, monitor="val_loss", save_top_k=2, filename="{step}", save_last=True)
        trainer = pl.Trainer(max_steps=STEPS, accumulate_grad_batches=ACCUMULATE, gradient_clip_val=1.0,
                             val_check_interval=2 * ACCUMULATE, num_sanity_val_steps=0, callbacks=[keep],
                             logger=False, enable_progress_bar=False, enable_model_summary=False,
                             accelerator="cpu", devices=1, deterministic=True, precision=precision)
        trainer.fit(net, torch.utils.data.DataLoader(train, batch_size=MICRO),
                    torch.utils.data.DataLoader(val, batch_size=VAL_ROWS))
        kept = sorted(int(re.search(r"step=(\d+)", os.path.basename(p)).group(1)) for p in keep.best_k_models)
        best_k = sorted([int(re.search(r"step=(\d+)", os.path.basename(p)).group(1)), float(v)]
                        for p, v in keep.best_k_models.items())
        # What it left on disk: the step files, and last.ckpt (its global_step).
        files = sorted(os.listdir(d))
        on_disk = sorted(int(m.group(1)) for m in (re.fullmatch(r"step=(\d+)\.ckpt", f) for f in files) if m)
        last = torch.load(os.path.join(d, "last.ckpt"), map_location="cpu", weights_only=False)["global_step"]
    losses = [sum(net.micro[i:i + ACCUMULATE]) / ACCUMULATE for i in range(0, len(net.micro), ACCUMULATE)]
    with open(sys.argv[2], "w") as f:
        json.dump({"losses": losses, "lrs": net.lrs, "validations": net.vals, "kept": kept, "best_k": best_k,
                   "files": files, "on_disk": on_disk, "last": last}, f)


TOLERANCE = 1e-6


def close(a, b):
    return abs(a - b) <= TOLERANCE * max(abs(a), abs(b), 1e-30)


def compare(ours_path, theirs_path, tolerance):
    global TOLERANCE
    TOLERANCE = tolerance
    worst = 0.0
    ours, theirs = (json.load(open(p)) for p in (ours_path, theirs_path))
    bad = []
    for what in ("losses", "lrs"):
        if len(ours[what]) != len(theirs[what]):
            bad.append(f"{what}: {len(ours[what])} steps, Lightning {len(theirs[what])}")
            continue
        for step, (a, b) in enumerate(zip(ours[what], theirs[what])):
            rel = abs(a - b) / max(abs(b), 1e-30)
            worst = max(worst, rel)
            print(f"{what[:-1]:5} step {step}: shardlight {a!r} Lightning {b!r} rel {rel:.2e}")
            if not close(a, b):
                bad.append(f"{what} step {step}: {a!r} != {b!r}")
    if [v[0] for v in ours["validations"]] != [v[0] for v in theirs["validations"]]:
        bad.append(f"validated after steps {[v[0] for v in ours['validations']]}, Lightning "
                   f"{[v[0] for v in theirs['validations']]}")
    else:
        for (step, a), (_, b) in zip(ours["validations"], theirs["validations"]):
            print(f"val_loss after step {step}: shardlight {a!r} Lightning {b!r}")
            if not close(a, b):
                bad.append(f"val_loss after step {step}: {a!r} != {b!r}")
    best = sorted(step for step, _ in sorted(ours["validations"], key=lambda v: v[1])[:2])
    print(f"best 2 steps by val_loss: shardlight {best}, Lightning's ModelCheckpoint kept {theirs['kept']}")
    if best != theirs["kept"]:
        bad.append(f"best steps {best} != Lightning's {theirs['kept']}")
    # Our ModelCheckpoint(monitor="val_loss", save_top_k=2) against Lightning's: the same best_k_models
    # (steps, val_loss within 1e-6), and the same checkpoints left on disk: our committed step-N
    # directories are Lightning's step=N.ckpt files plus its last.ckpt's step, which `latest` names.
    ours_best = sorted(ours["best_k"])
    print(f"ModelCheckpoint best_k_models: shardlight {ours_best}, Lightning {theirs['best_k']}")
    if [s for s, _ in ours_best] != [s for s, _ in theirs["best_k"]] or not all(
            close(a, b) for (_, a), (_, b) in zip(ours_best, theirs["best_k"])):
        bad.append(f"best_k_models {ours_best} != Lightning's {theirs['best_k']}")
    want_disk = sorted(set(theirs["on_disk"]) | {theirs["last"]})
    print(f"on disk: shardlight steps {ours['on_disk']} (latest {ours['latest']}), Lightning {theirs['files']} "
          f"(last.ckpt at step {theirs['last']})")
    if ours["on_disk"] != want_disk or ours["latest"] != theirs["last"]:
        bad.append(f"kept on disk: steps {ours['on_disk']} latest {ours['latest']}, Lightning {theirs['files']} "
                   f"(last.ckpt at step {theirs['last']})")
    print(f"largest relative difference of a loss or lr: {worst:.2e} (tolerance {TOLERANCE:.0e})")
    for line in bad:
        print("MISMATCH:", line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
