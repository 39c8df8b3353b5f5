"""The PyTorch peer of shardlight's LM job (simulate/lm_run.h): the same GPT
decoder in Python PyTorch 2.x, tensor parallel with DTensor's
parallelize_module on the same DP x TP mesh (Gloo, CPU), started from the
weights shardlight saved (exported with `ckpt export --prefix=model.`), fed
the same batches (simulate/byte_corpus.h's SampleOffset, reimplemented
here), trained with torch.optim.AdamW (or, with --optimizer=sgd, torch.optim.SGD)
and the same global-norm clipping.

Run under torchrun (one process per mesh rank):
  torchrun --nproc_per_node=4 tools/lm/lm_peer.py --mesh=2x2 --weights=init.pt --steps=100
Rank 0 prints "peer: step K loss L" for every step and, at the end,
"peer: rank 0 peak_rss_bytes P" and "peer: tokens_per_s T step_s S".

--dtype=float64 runs the model (weights, activations, gradients, AdamW
moments) in float64, as shardlight's --lm_dtype=float64 does.
--optimizer=sgd (every strategy; shardlight's --lm_optimizer=sgd):
torch.optim.SGD over the same parameters (DTensors under TP, FSDP2's sharded
DTensors under --fsdp, --hsdp, --fsdp_tp), one group, --lr, --momentum (0.9)
and --weight_decay (added to every parameter's gradient; default 0 here,
0.1 for AdamW's >= 2-dim group), no dampening or Nesterov. --grads_dir
with --grads_steps=N: rank 0 saves the full gradients of steps 1..N (summed
over DP, before clipping) as GRADS_DIR/peer_step<K>.pt, keys "<parameter>".
--dcp_dir with --dcp_at=K: after step K, dcp.save of the model, the AdamW
state and the step under shardlight's LM checkpoint keys ("model.<parameter>",
"optimizer.<parameter>.exp_avg" / ".exp_avg_sq", "optimizer.step",
"trainer.step"), so the LM job resumes from it; training then continues.

--fsdp (with --mesh=Nx1): FSDP2 in place of tensor parallelism, as
shardlight's --strategy=fsdp: fully_shard on each block, then on the root
(reshard_after_forward at its defaults), over a 1-d mesh of the N ranks;
gradients reduce-scattered as a plain sum (gradient divide factor 1, sum-only
collectives: each rank's loss is already its share of the global mean),
clipped to the global norm of the sharded gradients, AdamW on the shards.
With --param_dtype / --reduce_dtype: fully_shard's MixedPrecisionPolicy(param_dtype,
reduce_dtype) on every unit, as shardlight's --param_dtype / --reduce_dtype
(the shards, AdamW and the clipping stay in --dtype; the logits and the loss
come out in param_dtype).
--hsdp (with --mesh=RxS): --fsdp's run on FSDP2's HSDP -- fully_shard with
init_device_mesh("cpu", (R, S), mesh_dim_names=("replicate", "shard")):
parameters sharded over the S ranks of a shard group, replicated over R;
gradients reduce-scattered in the shard group, then all-reduced over the
replicate group (sums); every rank is data parallel (its torch.chunk of the
batch over all R*S ranks); the clipping norm sums over the shard group. As
shardlight's --strategy=hsdp --mesh=RxS.
--fsdp_tp (with --mesh=DPxTP): FSDP2 over tensor parallelism, as
shardlight's --strategy=fsdp_tp: the TP plan below on the mesh's "tp" dim
(parallelize_module), then fully_shard on each block and the root over its
"dp" dim -- the 2-d composition PyTorch documents, each TP piece chunked
again over DP --, gradients reduce-scattered over DP as plain sums; the
clipping norm counts each piece once (TP-sharded pieces summed over the
world, TP-replicated ones over DP).
With --fsdp, --torch_dcp_dir with --dcp_at=K: after step K, dcp.save of
{"model": get_model_state_dict, "optim": get_optimizer_state_dict} -- torch's
own names, as a PyTorch user saves --; --torch_dcp_resume=DIR: get_state_dict,
dcp.load of DIR, set_state_dict, then training from the step the optimizer
state counts ("peer: resumed at step K from DIR"); --weights is then optional.
With --fsdp (or --fsdp_tp), --phase_times: rank 0 also prints where its steps' wall time went,
"peer: phase_times steps N step_s S all_gather_s A compute_s C reduce_scatter_s R
optimizer_s O" (seconds per step, as shardlight's --phase_times): FSDP2's
all-gathers (FSDPParamGroup.unshard and wait_for_unshard: issue, wait,
copy-out), its reduce-scatters (FSDPParamGroup.post_backward: copy-in, the
collective, the sharded gradients), the optimizer (the clipping and
opt.step), and compute, the rest of the step (zero_grad to the loss
all_reduce).

TP plan (the layout of shardlight's layers): token embedding RowwiseParallel
(vocabulary rows split, the lookup's Partial result all-reduced), q/k/v and
the MLP's fc ColwiseParallel, the attention and MLP projections
RowwiseParallel, the head ColwiseParallel with Shard(-1) logits into
loss_parallel() (no full logits). Layer norms and positions are plain
replicated tensors; data-parallel gradients are all-reduced over the DP
group by hand (every collective here is an all_reduce, which Gloo has).
"""
import argparse
import functools
import math
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, loss_parallel,
                                               parallelize_module)

MASK = (1 << 64) - 1


def sample_offset(seed, index, size, window):
    """splitmix64(seed * 0x9E3779B97F4A7C15 + index) mod (size - window + 1)."""
    z = (seed * 0x9E3779B97F4A7C15 + index) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    z = z ^ (z >> 31)
    return z % (size - window + 1)


def samples(data, seed, first, count, context):
    rows = []
    for i in range(count):
        start = sample_offset(seed, first + i, len(data), context + 1)
        rows.append(data[start:start + context + 1])
    windows = torch.stack(rows)
    return windows[:, :context].contiguous(), windows[:, 1:].contiguous()


def chunk_range(n, chunks, index):
    """torch.chunk's piece `index` of n items: (start, length)."""
    size = -(-n // chunks)
    start = min(n, index * size)
    return start, max(0, min(n, start + size) - start)


class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.q, self.k, self.v, self.proj = (nn.Linear(dim, dim) for _ in range(4))


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc = nn.Linear(dim, hidden)
        self.proj = nn.Linear(hidden, dim)


class Block(nn.Module):
    def __init__(self, dim, hidden, head_dim):
        super().__init__()
        self.head_dim = head_dim
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, hidden)

    def forward(self, x):
        # The block's own forward: fully_shard's all-gather and reshard hook on it.
        b, t, _ = x.shape
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        h = self.ln1(x)
        # Local heads: q/k/v are column-parallel, each rank holds heads / TP of them.
        split = lambda y: y.view(b, t, -1, self.head_dim).transpose(1, 2)
        q, k, v = split(self.attn.q(h)), split(self.attn.k(h)), split(self.attn.v(h))
        scores = (q @ k.transpose(-2, -1)).mul(1.0 / math.sqrt(self.head_dim)).masked_fill(causal, float("-inf"))
        attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1)
        x = x + self.attn.proj(attended)
        return x + self.mlp.proj(F.gelu(self.mlp.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, dim, heads, layers, context, hidden):
        super().__init__()
        self.heads, self.head_dim, self.layers = heads, dim // heads, layers
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        for i in range(layers):
            setattr(self, f"block{i}", Block(dim, hidden, dim // heads))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        b, t = ids.shape
        x = self.tok(ids) + self.pos.weight[:t]
        for i in range(self.layers):
            x = getattr(self, f"block{i}")(x)
        return self.head(self.ln_f(x))


def save_grads(model, path, rank):
    """Collective over the TP group: rank 0 torch.saves every full gradient."""
    full = {}
    for name, q in model.named_parameters():
        g = q.grad
        full[name] = (g.full_tensor() if isinstance(g, DTensor) else g).detach().clone()
    if rank == 0:
        torch.save(full, path)


def save_dcp(model, opt, step, path):
    """Collective: dcp.save under shardlight's LM checkpoint keys (DTensors stay sharded)."""
    import torch.distributed.checkpoint as dcp
    state = {"trainer.step": torch.tensor([step], dtype=torch.long)}
    for name, q in model.named_parameters():
        state[f"model.{name}"] = q.detach()
        moments = opt.state[q]
        state[f"optimizer.{name}.exp_avg"] = moments["exp_avg"]
        state[f"optimizer.{name}.exp_avg_sq"] = moments["exp_avg_sq"]
        opt_step = int(moments["step"])
    state["optimizer.step"] = torch.tensor([opt_step], dtype=torch.long)
    dcp.save(state, checkpoint_id=path)


def save_torch_dcp(model, opt, path):
    """Collective: dcp.save as a PyTorch FSDP2 user writes it, under torch's own names
    (model.<fqn>, optim.state.<fqn>.exp_avg | exp_avg_sq | step, optim.param_groups.<i>.*)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
    dcp.save({"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)}, checkpoint_id=path)


def load_torch_dcp(model, opt, path):
    """Collective: get_state_dict, dcp.load, set_state_dict, as a PyTorch user resumes.
    Returns the step the optimizer's state counts (the same for every parameter)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    model_state, optim_state = get_state_dict(model, opt)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    steps = sorted({int(s["step"]) for s in opt.state.values()})
    if len(steps) != 1:
        raise SystemExit(f"peer: the per-parameter steps of {path} differ: {steps}")
    return steps[0]


def adamw(params, a):
    """torch.optim.AdamW with GPT's two groups: weight decay on >= 2-dim tensors only."""
    decay = [q for q in params if q.dim() >= 2]
    plain = [q for q in params if q.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay}, {"params": plain, "weight_decay": 0.0}],
                             lr=a.lr, betas=(0.9, 0.95), eps=1e-8, foreach=False)


def sgd(params, a):
    """torch.optim.SGD, one group: weight decay added to every parameter's gradient."""
    return torch.optim.SGD(params, lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay, foreach=False)


def make_optimizer(params, a):
    """--optimizer: adamw (GPT's two groups) or sgd."""
    return sgd(params, a) if a.optimizer == "sgd" else adamw(params, a)


def report(a, rank, start, global_tokens):
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if rank == 0:  # rank 0 only: workers' stdout lines would interleave
        print(f"peer: rank {rank} peak_rss_bytes {rss}", flush=True)
        print(f"peer: tokens_per_s {a.steps * global_tokens / seconds:.1f} step_s {seconds / a.steps:.4f}", flush=True)


class PhaseClock:
    """Wall time of the FSDP2 steps by phase (see --phase_times): FSDPParamGroup's
    collective methods are wrapped with timers at the class (no FSDP2 code
    changes). Only time inside a step counts, and a phase inside another
    counts nothing, so the phases never sum to more than the steps."""

    PHASES = ("all_gather", "reduce_scatter", "optimizer")

    def __init__(self):
        self.seconds = dict.fromkeys(self.PHASES, 0.0)
        self.step_seconds, self.steps = 0.0, 0
        self._step_start, self._active = None, False

    def install(self):
        from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
        for name, phase in (("unshard", "all_gather"), ("wait_for_unshard", "all_gather"),
                            ("post_backward", "reduce_scatter")):
            setattr(FSDPParamGroup, name, self._timed(getattr(FSDPParamGroup, name), phase))

    def _timed(self, method, phase):
        clock = self

        @functools.wraps(method)
        def timed(*args, **kwargs):
            with clock.phase(phase):
                return method(*args, **kwargs)
        return timed

    def phase(self, phase):
        clock = self

        class Scope:
            def __enter__(self):
                self.counts = clock._step_start is not None and not clock._active
                if self.counts:
                    clock._active, self.start = True, time.perf_counter()

            def __exit__(self, *exc):
                if self.counts:
                    clock.seconds[phase] += time.perf_counter() - self.start
                    clock._active = False
        return Scope()

    def start_step(self):
        self._step_start = time.perf_counter()

    def end_step(self):
        self.step_seconds += time.perf_counter() - self._step_start
        self.steps += 1
        self._step_start = None

    def line(self):
        per = 1.0 / self.steps if self.steps else 0.0
        compute = max(0.0, self.step_seconds - sum(self.seconds.values()))
        return (f"steps {self.steps} step_s {self.step_seconds * per:.6f} all_gather_s {self.seconds['all_gather'] * per:.6f}"
                f" compute_s {compute * per:.6f} reduce_scatter_s {self.seconds['reduce_scatter'] * per:.6f}"
                f" optimizer_s {self.seconds['optimizer'] * per:.6f}")


class NoClock:
    """PhaseClock's interface, timing nothing (--phase_times off)."""

    def phase(self, phase):
        import contextlib
        return contextlib.nullcontext()

    def start_step(self):
        pass

    def end_step(self):
        pass


def mixed_precision(a):
    """--param_dtype / --reduce_dtype as fully_shard's mp_policy (None: FSDP2's default, no policy)."""
    if not a.param_dtype and not a.reduce_dtype:
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy
    return MixedPrecisionPolicy(param_dtype=getattr(torch, a.param_dtype) if a.param_dtype else None,
                                reduce_dtype=getattr(torch, a.reduce_dtype) if a.reduce_dtype else None)


def train_fsdp(a, model, data, world, replicate=0):
    """FSDP2: fully_shard per block, then the root, on a 1-d mesh of every rank;
    with replicate > 0 (HSDP), on the 2-d mesh (replicate, world // replicate)."""
    from torch.distributed.fsdp import FSDPModule, fully_shard
    if replicate:
        mesh = init_device_mesh("cpu", (replicate, world // replicate), mesh_dim_names=("replicate", "shard"))
        shard_group = mesh["shard"].get_group()
    else:
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
        shard_group = None  # the world
    mp = mixed_precision(a)
    policy = {} if mp is None else {"mp_policy": mp}
    for i in range(a.layers):
        fully_shard(getattr(model, f"block{i}"), mesh=mesh, **policy)
    fully_shard(model, mesh=mesh, **policy)
    clock = PhaseClock() if a.phase_times else NoClock()
    if a.phase_times:
        clock.install()
    # Each rank's loss is its share of the global mean: the reduce-scatter sums.
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    rank = dist.get_rank()
    params = list(model.parameters())
    opt = make_optimizer(params, a)
    first_step = load_torch_dcp(model, opt, a.torch_dcp_resume) if a.torch_dcp_resume else 0
    if rank == 0 and a.torch_dcp_resume:
        print(f"peer: resumed at step {first_step} from {a.torch_dcp_resume}", flush=True)
    first, count = chunk_range(a.batch, world, rank)
    global_tokens = a.batch * a.context
    start = time.perf_counter()
    for step in range(first_step, a.steps):
        clock.start_step()
        opt.zero_grad(set_to_none=True)
        ids, targets = samples(data, a.data_seed, step * a.batch + first, count, a.context)
        logits = model(ids)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").sum() / global_tokens
        loss.backward()
        with clock.phase("optimizer"):
            # clip_grad_norm_ over the sharded gradients: each rank's shards once, summed over the ranks
            # (HSDP: over the shard group -- the replicas hold the same shards).
            grads = [q.grad.to_local() for q in params if q.grad is not None]
            squares = torch.zeros(1, dtype=torch.float64)
            for g in grads:
                squares += g.double().pow(2).sum()
            dist.all_reduce(squares, group=shard_group)
            coef = min(1.0, a.clip / (math.sqrt(squares.item()) + 1e-6))
            for g in grads:
                g.mul_(coef)
            opt.step()
        total = loss.detach().double().reshape(1).clone()
        dist.all_reduce(total)
        clock.end_step()
        if rank == 0:
            print(f"peer: step {step + 1} loss {total.item():.12f}", flush=True)
        if step + 1 == a.dcp_at and a.torch_dcp_dir:
            save_torch_dcp(model, opt, a.torch_dcp_dir)
    report(a, rank, start, global_tokens)
    if a.phase_times and rank == 0:
        print(f"peer: phase_times {clock.line()}", flush=True)


def tp_plan(a):
    """The TP layout of shardlight's layers (see the module's docstring)."""
    plan = {"tok": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
            "head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)}
    for i in range(a.layers):
        for name in ("attn.q", "attn.k", "attn.v", "mlp.fc"):
            plan[f"block{i}.{name}"] = ColwiseParallel()
        for name in ("attn.proj", "mlp.proj"):
            plan[f"block{i}.{name}"] = RowwiseParallel()
    return plan


def train_fsdp_tp(a, model, data, dp, tp):
    """FSDP2 x TP: parallelize_module on mesh["tp"], then fully_shard per block
    and on the root over mesh["dp"]."""
    from torch.distributed.fsdp import FSDPModule, fully_shard
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    parallelize_module(model, mesh["tp"], tp_plan(a))
    for i in range(a.layers):
        fully_shard(getattr(model, f"block{i}"), mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    clock = PhaseClock() if a.phase_times else NoClock()
    if a.phase_times:
        clock.install()
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    rank = dist.get_rank()
    params = list(model.parameters())
    opt = make_optimizer(params, a)
    dp_group = mesh["dp"].get_group()
    first, count = chunk_range(a.batch, dp, mesh.get_coordinate()[0])
    global_tokens = a.batch * a.context
    start = time.perf_counter()
    for step in range(a.steps):
        clock.start_step()
        opt.zero_grad(set_to_none=True)
        ids, targets = samples(data, a.data_seed, step * a.batch + first, count, a.context)
        with loss_parallel():
            logits = model(ids)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum") / global_tokens
            loss.backward()
        loss = loss.full_tensor() if isinstance(loss, DTensor) else loss
        with clock.phase("optimizer"):
            fsdp_tp_clip_and_step(a, params, opt, dp_group)
        total = loss.detach().double().reshape(1).clone()
        dist.all_reduce(total, group=dp_group)
        clock.end_step()
        if rank == 0:
            print(f"peer: step {step + 1} loss {total.item():.12f}", flush=True)
    report(a, rank, start, global_tokens)
    if a.phase_times and rank == 0:
        print(f"peer: phase_times {clock.line()}", flush=True)


def fsdp_tp_clip_and_step(a, params, opt, dp_group):
    """--fsdp_tp's clip_grad_norm_ over the pieces, each held once, and the
    AdamW step. A gradient split over TP (mesh dim 1 of the 2-d DTensor) sums
    over the world, the others (replicated over TP) over DP."""
    over_world = torch.zeros(1, dtype=torch.float64)
    over_dp = torch.zeros(1, dtype=torch.float64)
    grads = []
    for q in params:
        if q.grad is None:
            continue
        g = q.grad.to_local() if isinstance(q.grad, DTensor) else q.grad
        grads.append(g)
        split_over_tp = q.device_mesh.ndim == 2 and q.placements[1].is_shard()
        (over_world if split_over_tp else over_dp).add_(g.double().pow(2).sum())
    dist.all_reduce(over_world)
    dist.all_reduce(over_dp, group=dp_group)
    coef = min(1.0, a.clip / (math.sqrt(over_world.item() + over_dp.item()) + 1e-6))
    for g in grads:
        g.mul_(coef)
    opt.step()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mesh", default="2x2")
    p.add_argument("--weights", default="", help="torch.save file of the initial state dict")
    p.add_argument("--corpus", default="/usr/share/common-licenses/GPL-3")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--data_seed", type=int, default=1)
    p.add_argument("--dim", type=int, default=96)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--mlp", type=int, default=384)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    p.add_argument("--momentum", type=float, default=None, help="--optimizer=sgd: momentum, in [0, 1) (default 0.9)")
    p.add_argument("--weight_decay", type=float, default=None,
                   help="default 0.1 with adamw (its >= 2-dim group), 0 with sgd (every parameter)")
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--grads_dir", default="")
    p.add_argument("--grads_steps", type=int, default=0)
    p.add_argument("--dcp_dir", default="")
    p.add_argument("--dcp_at", type=int, default=0)
    p.add_argument("--fsdp", action="store_true", help="FSDP2 fully_shard per block + root (--mesh=Nx1)")
    p.add_argument("--fsdp_tp", action="store_true",
                   help="FSDP2 x TP: the TP plan on mesh['tp'], then fully_shard per block + root on mesh['dp'] (--mesh=DPxTP)")
    p.add_argument("--hsdp", action="store_true",
                   help="HSDP: --fsdp on init_device_mesh((R, S), mesh_dim_names=('replicate', 'shard')) (--mesh=RxS)")
    p.add_argument("--param_dtype", choices=("", "bfloat16", "float32", "float64"), default="",
                   help="--fsdp: MixedPrecisionPolicy param_dtype (gather and compute in it; shards stay --dtype)")
    p.add_argument("--reduce_dtype", choices=("", "bfloat16", "float32", "float64"), default="",
                   help="--fsdp: MixedPrecisionPolicy reduce_dtype (the reduce-scatter's dtype)")
    p.add_argument("--torch_dcp_dir", default="", help="--fsdp: after step --dcp_at, dcp.save under torch's own names")
    p.add_argument("--torch_dcp_resume", default="", help="--fsdp: first load this DCP checkpoint of torch's names")
    p.add_argument("--phase_times", action="store_true",
                   help="--fsdp: rank 0 prints its seconds per step by phase (all-gather, compute, reduce-scatter, "
                        "optimizer)")
    a = p.parse_args()
    if a.grads_steps > 0 and not a.grads_dir:
        p.error("--grads_steps needs --grads_dir")
    if a.dcp_at > 0 and not (a.dcp_dir or a.torch_dcp_dir):
        p.error("--dcp_at needs --dcp_dir (or --torch_dcp_dir)")
    if not a.weights and not a.torch_dcp_resume:
        p.error("--weights is needed (unless --torch_dcp_resume loads the model)")
    if (a.torch_dcp_dir or a.torch_dcp_resume) and not a.fsdp:
        p.error("--torch_dcp_dir and --torch_dcp_resume go with --fsdp")
    if a.optimizer == "adamw" and a.momentum is not None:
        p.error("--momentum goes with --optimizer=sgd")
    if a.optimizer == "sgd" and (a.dcp_dir or a.torch_dcp_dir or a.torch_dcp_resume):
        p.error("--optimizer=sgd goes without --dcp_dir and the torch DCP options (they save AdamW's state)")
    if a.momentum is not None and not 0 <= a.momentum < 1:
        p.error(f"--momentum={a.momentum} is not in [0, 1)")
    if a.weight_decay is not None and a.weight_decay < 0:
        p.error(f"--weight_decay={a.weight_decay} is negative")
    a.momentum = 0.9 if a.momentum is None else a.momentum
    a.weight_decay = (0.1 if a.optimizer == "adamw" else 0.0) if a.weight_decay is None else a.weight_decay
    torch.set_num_threads(a.threads)
    dp, tp = (int(x) for x in a.mesh.split("x"))
    if a.hsdp:
        if a.fsdp or a.grads_steps > 0 or a.dcp_dir or a.torch_dcp_dir or a.torch_dcp_resume:
            p.error("--hsdp goes without --fsdp, --grads_steps, --dcp_dir and the torch DCP options")
        a.fsdp, replicate, dp = True, dp, dp * tp
        tp = 1
    else:
        replicate = 0
    if a.fsdp and (tp != 1 or a.grads_steps > 0 or a.dcp_dir):
        p.error("--fsdp trains data parallel only (--mesh=Nx1), without --grads_steps or --dcp_dir")
    if a.fsdp_tp and (a.fsdp or a.hsdp or a.grads_steps > 0 or a.dcp_dir or a.torch_dcp_dir or a.torch_dcp_resume):
        p.error("--fsdp_tp goes without --fsdp, --hsdp, --grads_steps, --dcp_dir and the torch DCP options")
    if a.phase_times and not (a.fsdp or a.fsdp_tp):
        p.error("--phase_times goes with --fsdp, --hsdp or --fsdp_tp")
    if (a.param_dtype or a.reduce_dtype) and not a.fsdp:
        p.error("--param_dtype and --reduce_dtype apply to --fsdp")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    data = torch.tensor(list(open(a.corpus, "rb").read()), dtype=torch.long)

    model = Gpt(256, a.dim, a.heads, a.layers, a.context, a.mlp).to(getattr(torch, a.dtype))
    if a.weights:
        model.load_state_dict(torch.load(a.weights, weights_only=True), strict=True)
    if a.fsdp:
        train_fsdp(a, model, data, dp, replicate)
        dist.destroy_process_group()
        return
    if a.fsdp_tp:
        train_fsdp_tp(a, model, data, dp, tp)
        dist.destroy_process_group()
        return
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    parallelize_module(model, mesh["tp"], tp_plan(a))

    params = list(model.parameters())
    opt = make_optimizer(params, a)
    dp_group, tp_group = mesh["dp"].get_group(), mesh["tp"].get_group()
    first, count = chunk_range(a.batch, dp, mesh.get_coordinate()[0])
    global_tokens = a.batch * a.context

    local = lambda g: g._local_tensor if isinstance(g, DTensor) else g
    start = time.perf_counter()
    for step in range(a.steps):
        opt.zero_grad(set_to_none=True)
        ids, targets = samples(data, a.data_seed, step * a.batch + first, count, a.context)
        with loss_parallel():
            logits = model(ids)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum") / global_tokens
            loss.backward()
        loss = loss.full_tensor() if isinstance(loss, DTensor) else loss
        # The embedding's RowwiseParallel backward leaves tok.weight's gradient
        # Replicate (the whole table's on every TP rank) while the weight is
        # Shard(0): put every gradient in its parameter's layout, so the local
        # pieces below are the parameter's own (counted once in the norm).
        for q in params:
            if isinstance(q.grad, DTensor) and q.grad.placements != q.placements:
                q.grad = q.grad.redistribute(q.device_mesh, q.placements)
        # Data parallel: one flat all_reduce of every gradient over the DP group.
        grads = [local(q.grad) for q in params]
        if dp > 1:
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, group=dp_group)
            at = 0
            for g in grads:
                g.copy_(flat[at:at + g.numel()].view_as(g))
                at += g.numel()
        if step < a.grads_steps:
            save_grads(model, os.path.join(a.grads_dir, f"peer_step{step + 1}.pt"), rank)
        # clip_grad_norm_ across the mesh: TP-sharded pieces summed over TP, replicated ones once.
        sharded_sq = torch.zeros(1, dtype=torch.float64)
        replicated_sq = torch.zeros(1, dtype=torch.float64)
        for q, g in zip(params, grads):
            is_sharded = isinstance(q, DTensor) and any(pl.is_shard() for pl in q.placements)
            (sharded_sq if is_sharded else replicated_sq).add_(g.double().pow(2).sum())
        dist.all_reduce(sharded_sq, group=tp_group)
        norm = math.sqrt(sharded_sq.item() + replicated_sq.item())
        coef = min(1.0, a.clip / (norm + 1e-6))
        for g in grads:
            g.mul_(coef)
        opt.step()
        total = loss.detach().double().reshape(1).clone()
        dist.all_reduce(total, group=dp_group)
        if rank == 0:
            print(f"peer: step {step + 1} loss {total.item():.12f}", flush=True)
        if step + 1 == a.dcp_at:
            save_dcp(model, opt, step + 1, a.dcp_dir)
    report(a, rank, start, global_tokens)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Every result is printed and the group destroyed: leave without running
    # torch's C++ static destructors. Under FSDP2 at W=4, torch 2.15 aborted
    # workers there after all their work ("terminate called without an active
    # exception", SIGABRT, twice in a row in one CI-leg run).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
