"""PyTorch FSDP2's side of fsdp_memory_bench.sh, over Gloo; each rank prints
its peak RSS and its resident memory after the last optimizer step (after
malloc_trim), as the C++ bench does.

--model=stack: the same stack (units of Linear(width, width) + tanh, then
Linear(width, 1)), fully_shard on each unit and then the root, AdamW.

--model=gpt: the GPT of simulate/gpt_model.h (tools/lm/lm_peer.py's Gpt,
which matches it weight for weight) built as a PyTorch user builds a model
larger than a rank: on the meta device, fully_shard on each block and then
the root, to_empty(device="cpu") (each rank allocates only its shards), then
the parameters initialised in place (N(0, 0.02) weights with GPT-2's scaled
projections, zero biases, unit norm gains); AdamW; batches as
fsdp_memory_gpt.h's GptMemoryBatch.

Run by torchrun from the torch 2.x venv (tools/setup.sh --torch2)."""
import argparse
import ctypes
import math
import os
import resource
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard


class Stack(torch.nn.Module):
    def __init__(self, width, units):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(units))
        self.head = torch.nn.Linear(width, 1)

    def forward(self, h):
        for block in self.blocks:
            h = torch.tanh(block(h))
        return self.head(h).reshape(-1)


def current_rss_mib():
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        resident = int(f.read().split()[1])
    return resident * os.sysconf("SC_PAGE_SIZE") / (1024.0 * 1024.0)


def build_gpt(args):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lm"))
    from lm_peer import Gpt
    with torch.device("meta"):
        model = Gpt(args.gpt_vocab, args.gpt_dim, args.gpt_heads, args.gpt_layers, args.gpt_context, 4 * args.gpt_dim)
    for i in range(args.gpt_layers):
        fully_shard(getattr(model, f"block{i}"))
    fully_shard(model)
    model.to_empty(device="cpu")
    proj_std = 0.02 / math.sqrt(2.0 * args.gpt_layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            local = p.to_local()  # this rank's shard
            if ".ln" in name or name.startswith("ln_f"):
                local.fill_(1.0 if name.endswith("weight") else 0.0)
            elif name.endswith("bias"):
                local.zero_()
            else:
                local.normal_(0.0, proj_std if name.endswith("proj.weight") else 0.02)
    return model


def gpt_batch(args, step):
    b = torch.arange(args.batch).view(-1, 1)
    t = torch.arange(args.gpt_context).view(1, -1)
    ids = (b * 131 + t * 31 + 17 * step) % args.gpt_vocab
    return ids, (ids * 7 + 3) % args.gpt_vocab


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="stack", choices=["stack", "gpt"])
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--units", type=int, default=8)
    parser.add_argument("--gpt_dim", type=int, default=1024)
    parser.add_argument("--gpt_layers", type=int, default=12)
    parser.add_argument("--gpt_heads", type=int, default=16)
    parser.add_argument("--gpt_context", type=int, default=64)
    parser.add_argument("--gpt_vocab", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    resident_before = current_rss_mib()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.model == "gpt" and args.batch % world != 0:
        # lm_peer's attention reshapes (view(b, t, -1, head_dim)) fail on an empty batch.
        raise SystemExit(f"--model=gpt: --batch={args.batch} must be a multiple of the {world} ranks")
    torch.manual_seed(3)
    if args.model == "gpt":
        model = build_gpt(args)
    else:
        model = Stack(args.width, args.units)
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters())
    rows = torch.arange(args.batch).chunk(world)
    persistent = 0.0
    for step in range(args.steps):
        mine = rows[rank] if rank < len(rows) else torch.arange(0)
        if args.model == "gpt":
            ids, targets = gpt_batch(args, step)
            logits = model(ids[mine])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets[mine].reshape(-1),
                                   reduction="sum") / targets.numel()
        else:
            g = torch.Generator().manual_seed(7919 + step)
            x = torch.randn(args.batch, args.width, generator=g)
            y = torch.sin(x.sum(1) / math.sqrt(args.width))
            loss = ((model(x[mine]) - y[mine]) ** 2).sum() / args.batch
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        persistent = current_rss_mib()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"fsdp_memory: pytorch fsdp2 rank {rank}/{world} peak_rss_mib {peak:.1f} (at start {before:.1f}) "
          f"persistent_mib {persistent - resident_before:.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
