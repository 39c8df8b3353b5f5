"""The real pytorch_lightning side of //tests/interop:trainer_parity_test.

  lightning OUT.json   Trainer.fit of Net (weights and data from closed-form torch formulas that
                       trainer_parity_run.cc computes alike) with accumulate_grad_batches=2,
                       gradient_clip_val=1.0, AdamW + a LambdaLR warm-up/cosine stepped every
                       optimizer step, validation every 4 batches (2 optimizer steps) and
                       ModelCheckpoint(monitor="val_loss", save_top_k=2); writes each step's loss
                       (the mean of its 2 micro-batch losses) and lr, each validation's val_loss and
                       the steps ModelCheckpoint kept.
  compare OURS THEIRS  shardlight's run (trainer_parity_run's JSON) against Lightning's: loss and lr
                       of every step and val_loss of every validation within fp32 relative 1e-6, and
                       the two steps of lowest val_loss are those ModelCheckpoint kept.
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
        return compare(sys.argv[2], sys.argv[3])
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
        keep = ModelCheckpoint(dirpath=d, monitor="val_loss", save_top_k=2, filename="{step}")
        trainer = pl.Trainer(max_steps=STEPS, accumulate_grad_batches=ACCUMULATE, gradient_clip_val=1.0,
                             val_check_interval=2 * ACCUMULATE, num_sanity_val_steps=0, callbacks=[keep],
                             logger=False, enable_progress_bar=False, enable_model_summary=False,
                             accelerator="cpu", devices=1, deterministic=True)
        trainer.fit(net, torch.utils.data.DataLoader(train, batch_size=MICRO),
                    torch.utils.data.DataLoader(val, batch_size=VAL_ROWS))
        kept = sorted(int(re.search(r"step=(\d+)", os.path.basename(p)).group(1)) for p in keep.best_k_models)
    losses = [sum(net.micro[i:i + ACCUMULATE]) / ACCUMULATE for i in range(0, len(net.micro), ACCUMULATE)]
    with open(sys.argv[2], "w") as f:
        json.dump({"losses": losses, "lrs": net.lrs, "validations": net.vals, "kept": kept}, f)


def close(a, b):
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1e-30)


def compare(ours_path, theirs_path):
    ours, theirs = (json.load(open(p)) for p in (ours_path, theirs_path))
    bad = []
    for what in ("losses", "lrs"):
        if len(ours[what]) != len(theirs[what]):
            bad.append(f"{what}: {len(ours[what])} steps, Lightning {len(theirs[what])}")
            continue
        for step, (a, b) in enumerate(zip(ours[what], theirs[what])):
            print(f"{what[:-1]:5} step {step}: shardlight {a!r} Lightning {b!r} rel {abs(a - b) / max(abs(b), 1e-30):.2e}")
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
    for line in bad:
        print("MISMATCH:", line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
