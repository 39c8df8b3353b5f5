"""The real pytorch_lightning side of //tests/interop:lightning2_test.

  fit DIR STEPS                  Trainer.fit of Tiny for STEPS steps; ModelCheckpoint writes DIR/fit.ckpt
  fit_dist DIR STEPS STRATEGY    the same under torchrun (2 CPU processes, Gloo), STRATEGY fsdp or model_parallel:
                                 Trainer.save_checkpoint writes the distributed checkpoint directory DIR/fit.ckpt/
  dcp_ref DIR OUT                torch's own dcp_to_torch_save of the distributed checkpoint DIR, to OUT
  same_weights REF FILE [STEP]   FILE (torch.save of shardlight's export) holds REF's weights (a .ckpt: its
                                 state_dict), bit for bit; with STEP, FILE's global_step is STEP
  resume CKPT REF STEPS          Trainer.fit(ckpt_path=CKPT) of a differently seeded Tiny: at on_train_start the
                                 weights are REF's and global_step CKPT's; then it trains on to STEPS
  fit_full DIR STEPS             Trainer.fit of TinyScheduled (Adam, a per-step StepLR): DIR/full.ckpt
  same_tree REF FILE             torch.load(weights_only=True) of both: the same nesting, values and tensors
  resume_full CKPT STEPS OUT     Trainer.fit(ckpt_path=CKPT) of TinyScheduled to STEPS: the state it resumed
                                 with and its final weights, to OUT
  same_resume A B                two resume_full OUTs are equal (resumed state; weights bit for bit)
"""

import os
import sys

import torch
import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint


class Tiny(pl.LightningModule):
    def __init__(self, hidden=5, lr=0.05):
        super().__init__()
        self.save_hyperparameters()  # a real module's hparams: skipped by the importer, listed
        self.inp = torch.nn.Linear(4, hidden)
        self.norm = torch.nn.BatchNorm1d(hidden)  # float buffers and an int64 num_batches_tracked
        self.out = torch.nn.Linear(hidden, 2)

    def forward(self, x):
        return self.out(torch.relu(self.norm(self.inp(x))))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


class TinyParallel(Tiny):
    """Tiny under ModelParallelStrategy: FSDP2 over the data-parallel mesh dimension (each parameter sharded in 2)."""

    def configure_model(self):
        from torch.distributed.fsdp import fully_shard
        mesh = self.device_mesh["data_parallel"]
        for layer in (self.inp, self.norm, self.out):
            fully_shard(layer, mesh=mesh)
        fully_shard(self, mesh=mesh)


def loader(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 4, generator=g)
    data = torch.utils.data.TensorDataset(x, x[:, :2] * 3.0 - 1.0)
    return torch.utils.data.DataLoader(data, batch_size=8, shuffle=False)


def trainer(steps, callbacks=(), **kwargs):
    kwargs.setdefault("accelerator", "cpu")
    kwargs.setdefault("devices", 1)
    return pl.Trainer(max_steps=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      callbacks=list(callbacks), **kwargs)


def plain(state):
    return {k: v.detach().cpu().clone() for k, v in state.items()}


def check_equal(want, got, what):
    if set(want) != set(got):
        sys.exit(f"{what}: keys {sorted(got)} != {sorted(want)}")
    for k in want:
        a, b = want[k], got[k]
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
            sys.exit(f"{what}: {k}: {b.dtype}{list(b.shape)} {b.flatten()[:4]} != {a.dtype}{list(a.shape)} {a.flatten()[:4]}")


def load(path):
    obj = torch.load(path, map_location="cpu", weights_only=False)
    return obj


def fit(out, steps):
    torch.manual_seed(1)
    model = Tiny()
    cb = ModelCheckpoint(dirpath=out, filename="fit", every_n_train_steps=steps, save_top_k=-1)
    t = trainer(steps, [cb])
    t.fit(model, loader(0))
    assert t.global_step == steps, t.global_step
    print(f"fit: {steps} steps, {cb.best_model_path or os.path.join(out, 'fit.ckpt')}")


def fit_dist(out, steps, strategy):
    from lightning_fabric.plugins.environments import TorchElasticEnvironment
    if strategy == "fsdp":
        from pytorch_lightning.strategies import FSDPStrategy
        s = FSDPStrategy(state_dict_type="sharded", process_group_backend="gloo",
                         cluster_environment=TorchElasticEnvironment())
    else:
        from pytorch_lightning.strategies import ModelParallelStrategy
        s = ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1, save_distributed_checkpoint=True,
                                  process_group_backend="gloo")
    torch.manual_seed(1)
    model = Tiny() if strategy == "fsdp" else TinyParallel()
    t = trainer(steps, devices=2, strategy=s)
    t.fit(model, loader(0))
    t.save_checkpoint(os.path.join(out, "fit.ckpt"))
    assert t.global_step == steps, t.global_step
    print(f"fit_dist: rank {t.global_rank}: {steps} steps with {strategy}")


def dcp_ref(src, out):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(src, out)


def same_weights(ref, path, step=None):
    want = load(ref)
    want = plain(want["state_dict"] if "state_dict" in want else want)
    got = load(path)
    if step is not None:
        if got.get("global_step") != int(step):
            sys.exit(f"{path}: global_step {got.get('global_step')}, want {step}")
    got = got["state_dict"] if "state_dict" in got and isinstance(got["state_dict"], dict) else got
    check_equal(want, plain(got), path)
    print(f"same_weights: {len(want)} tensors bit-equal")


class CheckStart(pl.Callback):
    def __init__(self, want, step):
        self.want, self.step, self.seen = want, step, False

    def on_train_start(self, trainer, module):
        check_equal(self.want, plain(module.state_dict()), "weights at on_train_start")
        if trainer.global_step != self.step:
            sys.exit(f"resumed at global_step {trainer.global_step}, want {self.step}")
        self.seen = True


def resume(ckpt, ref, steps):
    want = load(ref)
    want = plain(want["state_dict"] if "state_dict" in want else want)
    start = load(ckpt)["global_step"]
    torch.manual_seed(99)  # other initial weights: only the checkpoint can make them REF's
    model = Tiny()
    cb = CheckStart(want, start)
    t = trainer(steps, [cb])
    t.fit(model, loader(0), ckpt_path=ckpt)
    if not cb.seen or t.global_step != steps:
        sys.exit(f"resume: on_train_start seen {cb.seen}, ended at step {t.global_step}, want {steps}")
    moved = [k for k, v in plain(model.state_dict()).items() if not torch.equal(v, want[k])]
    if "inp.weight" not in moved:
        sys.exit("resume: training on did not change the weights")
    print(f"resume: from step {start} to {t.global_step}; {len(moved)} tensors trained on")


class TinyScheduled(Tiny):
    """Tiny with Adam and a per-step StepLR: optimizer state, param_groups and a scheduler in its .ckpt."""

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def fit_full(out, steps):
    torch.manual_seed(1)
    model = TinyScheduled()
    cb = ModelCheckpoint(dirpath=out, filename="full", every_n_train_steps=steps, save_top_k=-1)
    t = trainer(steps, [cb])
    t.fit(model, loader(0))
    assert t.global_step == steps, t.global_step
    print(f"fit_full: {steps} steps, lr now {t.optimizers[0].param_groups[0]['lr']}")


def describe(x, path="", out=None):
    """Every node of a torch.load tree: (path, type, value or tensor) in order."""
    out = [] if out is None else out
    if isinstance(x, dict):
        out.append((path, "dict", list(x.keys())))
        for k, v in x.items():
            describe(v, f"{path}/{k!r}", out)
    elif isinstance(x, (list, tuple)):
        out.append((path, type(x).__name__, len(x)))
        for i, v in enumerate(x):
            describe(v, f"{path}/{i}", out)
    else:
        out.append((path, type(x).__name__, x))
    return out


def same_tree(ref, path):
    """PATH (torch.load, weights_only) is REF's nested structure: the same dicts (keys in order), lists,
    tuples, plain values and tensors (dtype, shape, bits)."""
    want = describe(torch.load(ref, map_location="cpu", weights_only=True))
    got = describe(torch.load(path, map_location="cpu", weights_only=True))
    if len(want) != len(got):
        sys.exit(f"{path}: {len(got)} nodes, {ref}: {len(want)}")
    tensors = values = 0
    for (wp, wt, wv), (gp, gt, gv) in zip(want, got):
        if (wp, wt) != (gp, gt):
            sys.exit(f"{path}: {gp} is a {gt}, want {wp} a {wt}")
        if wt == "Tensor":
            tensors += 1
            if wv.dtype != gv.dtype or wv.shape != gv.shape or not torch.equal(wv, gv):
                sys.exit(f"{gp}: {gv.dtype}{list(gv.shape)} != {wv.dtype}{list(wv.shape)}")
        else:
            values += wt not in ("dict", "list", "tuple")
            same = wv == gv or (isinstance(wv, float) and wv != wv and gv != gv)
            if not same:
                sys.exit(f"{gp}: {gv!r} != {wv!r}")
    print(f"same_tree: {len(want)} nodes, {tensors} tensors and {values} plain values equal")


class Observe(pl.Callback):
    def __init__(self):
        self.seen = {}

    def on_train_start(self, trainer, module):
        opt = trainer.optimizers[0]
        sched = trainer.lr_scheduler_configs[0].scheduler
        self.seen = {"global_step": trainer.global_step, "epoch": trainer.current_epoch,
                     "batches_that_stepped": trainer.fit_loop.epoch_loop._batches_that_stepped,
                     "lr": opt.param_groups[0]["lr"], "sched_last_epoch": sched.last_epoch,
                     "adam_steps": [float(s["step"]) for s in opt.state.values()],
                     "exp_avg": [s["exp_avg"].clone() for s in opt.state.values()]}


def resume_full(ckpt, steps, out):
    """Trainer.fit(ckpt_path=CKPT) of a differently seeded TinyScheduled to STEPS: what it resumed with
    (step, epoch, lr, scheduler, Adam state) and its weights at the end, to OUT."""
    torch.manual_seed(99)
    model = TinyScheduled()
    cb = Observe()
    t = trainer(steps, [cb])
    t.fit(model, loader(0), ckpt_path=ckpt)
    if t.global_step != steps:
        sys.exit(f"resume_full: ended at step {t.global_step}, want {steps}")
    torch.save({"seen": cb.seen, "state_dict": plain(model.state_dict())}, out)
    print(f"resume_full: {ckpt}: resumed at step {cb.seen['global_step']} epoch {cb.seen['epoch']} "
          f"lr {cb.seen['lr']}; trained to {steps}")


def same_resume(a, b):
    """Two resume_full results: the same resumed state and the same weights after training on."""
    x, y = torch.load(a, weights_only=False), torch.load(b, weights_only=False)  # our own files
    for k in x["seen"]:
        u, v = x["seen"][k], y["seen"][k]
        same = all(torch.equal(p, q) for p, q in zip(u, v)) and len(u) == len(v) if k == "exp_avg" else u == v
        if not same:
            sys.exit(f"same_resume: {k}: {v} != {u}")
    check_equal(x["state_dict"], y["state_dict"], "weights after training on")
    print(f"same_resume: {sorted(x['seen'])} equal, weights bit-equal")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"fit": lambda: fit(args[0], int(args[1])),
     "fit_dist": lambda: fit_dist(args[0], int(args[1]), args[2]),
     "dcp_ref": lambda: dcp_ref(*args),
     "same_weights": lambda: same_weights(*args),
     "resume": lambda: resume(args[0], args[1], int(args[2])),
     "fit_full": lambda: fit_full(args[0], int(args[1])),
     "same_tree": lambda: same_tree(*args),
     "resume_full": lambda: resume_full(args[0], int(args[1]), args[2]),
     "same_resume": lambda: same_resume(*args)}[cmd]()
