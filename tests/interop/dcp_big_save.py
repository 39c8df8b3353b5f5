"""One rank of a large real torch.distributed.checkpoint save (under torchrun,
Gloo, CPU), for the DCP streaming test and tools/bench/dcp_load_bench.sh:
about TOTAL_MIB MiB of float32 in rows of 1024 elements, three quarters in
KEYS row-sharded DTensors "layers.<k>.weight" (Shard(0) over every rank, each
rank building only its rows), a quarter in one plain tensor
"layers.<KEYS>.weight" (saved once, by rank 0: a payload larger than any
bounded buffer), plus two small plain tensors and an int entry "step".
Element (row, col) of layers.<k>.weight is float((row * 1024 + col) % 4093 +
k): dcp_load_run checks loaded shards against it. Several checkpoints (pairs
of OUT_DIR and TOTAL_MIB) are written by one job.
  dcp_big_save.py KEYS OUT_DIR TOTAL_MIB [OUT_DIR TOTAL_MIB ...]"""
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

COLS = 1024


def rows_of(first, count, k):
    """Rows [first, first + count) of key k's tensor."""
    index = torch.arange(first * COLS, (first + count) * COLS, dtype=torch.int64)
    return (index % 4093 + k).to(torch.float32).reshape(count, COLS)


def save(out, total_mib, keys, mesh, world, rank):
    total_rows = (total_mib << 20) // (4 * COLS)
    # Rows per sharded key, a multiple of the world size: every rank holds as many.
    rows = max(world, total_rows * 3 // 4 // keys // world * world)
    per_rank = rows // world
    sd = {}
    for k in range(keys):
        local = rows_of(rank * per_rank, per_rank, k)
        sd["layers.%d.weight" % k] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False)
    sd["layers.%d.weight" % keys] = rows_of(0, max(1, total_rows - rows * keys), keys)
    sd["dense.bias"] = torch.arange(COLS, dtype=torch.float32)
    sd["dense.scale"] = torch.tensor(0.5)
    sd["step"] = 7
    dcp.save(sd, checkpoint_id=out)


def main():
    keys, pairs = int(sys.argv[1]), sys.argv[2:]
    if not pairs or len(pairs) % 2:
        sys.exit(__doc__)
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    mesh = init_device_mesh("cpu", (world,))
    for out, total_mib in zip(pairs[::2], pairs[1::2]):
        save(out, int(total_mib), keys, mesh, world, rank)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
