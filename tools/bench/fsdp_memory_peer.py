"""PyTorch FSDP2's side of fsdp_memory_bench.sh: the same stack (units of
Linear(width, width) + tanh, then Linear(width, 1)), fully_shard on each unit
and then the root, AdamW, over Gloo; each rank prints its peak RSS.

Run by torchrun from the torch 2.x venv (tools/setup_torch2.sh)."""
import argparse
import math
import resource

import torch
import torch.distributed as dist
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--units", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(3)
    model = Stack(args.width, args.units)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters())
    rows = torch.arange(args.batch).chunk(world)
    for step in range(args.steps):
        g = torch.Generator().manual_seed(7919 + step)
        x = torch.randn(args.batch, args.width, generator=g)
        y = torch.sin(x.sum(1) / math.sqrt(args.width))
        mine = rows[rank] if rank < len(rows) else torch.arange(0)
        loss = ((model(x[mine]) - y[mine]) ** 2).sum() / args.batch
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"fsdp_memory: pytorch fsdp2 rank {rank}/{world} peak_rss_mib {peak:.1f} (at start {before:.1f})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
