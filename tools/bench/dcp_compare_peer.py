"""PyTorch's side of tools/bench/dcp_compare.sh: torch.distributed.checkpoint
(DCP) saving and loading the comparison's workload, one torchrun job.

  torchrun --nproc_per_node=W dcp_compare_peer.py --phase=w4|w3 --workload=size:0.5|count:10000 \
      --dir=DIR --repeats=R [--threads=T]

The workload is the one dcp_compare_rank.cc builds (same shapes, same values):
tensor t is row-sharded over the W ranks (a DTensor, Shard(0), uneven and
empty shards where the rows do not divide) when t is even, and a plain tensor
every rank holds (saved once by DCP's de-duplication) when t is odd.
  size:G   64 tensors, G GiB in all: sharded [rows_t, 1024] float32 weights
           (rows in proportion 1:2:3:4), dense [1024] float32 biases;
  count:N  N small float32 tensors cycling through [2,2], [8,8], [16,32],
           [64,32] (2.6 KiB on average).
Phase w4 (W=4): save (FileSystemWriter, fsync), load with the page cache kept
and dropped, dcp.async_save (blocking time and total). Phase w3: the W=4
checkpoint loaded by W ranks (resharding). Rank 0 prints
"RESULT dcp <metric> <seconds>" (best of the repeats) and "BYTES <n>"; every
load is checked element by element after its timing.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

COLS = 1024
SIZE_TENSORS = 64
SMALL_SHAPES = [(2, 2), (8, 8), (16, 32), (64, 32)]


def shapes(workload, world):
    """[(shape, sharded)] in key order: as dcp_compare_rank.cc's Shapes."""
    kind, _, value = workload.partition(":")
    out = []
    if kind == "size":
        total = float(value) * (1 << 30)
        weights = [(t // 2) % 4 + 1 for t in range(0, SIZE_TENSORS, 2)]
        unit = (total - (SIZE_TENSORS // 2) * COLS * 4) / (sum(weights) * COLS * 4)
        for t in range(SIZE_TENSORS):
            if t % 2 == 0:
                out.append(((max(world, int(unit * ((t // 2) % 4 + 1))), COLS), True))
            else:
                out.append(((COLS,), False))
    elif kind == "count":
        for t in range(int(value)):
            out.append((SMALL_SHAPES[t % 4], t % 2 == 0))
    else:
        sys.exit(f"dcp_compare_peer: --workload {workload!r} is not size:G or count:N")
    return out


def pattern(first_linear, numel, t):
    """Element k of the block starting at linear index first_linear of tensor t."""
    idx = torch.arange(first_linear, first_linear + numel, dtype=torch.int64)
    return ((idx * 7 + t) & 0xFFFFF).to(torch.float32)


def rows_of(rows, world, rank):
    """This rank's rows [begin, end) of a dim-0 chunking (torch.chunk's)."""
    chunk = -(-rows // world)
    begin = min(rows, rank * chunk)
    return begin, min(rows, begin + chunk)


def build(workload, mesh, fill):
    world, rank = mesh.size(), mesh.get_local_rank()
    state = {}
    for t, (shape, sharded) in enumerate(shapes(workload, world)):
        key = f"layer{t // 4}.p{t % 4}"
        if sharded:
            b, e = rows_of(shape[0], world, rank)
            local_shape = (e - b,) + tuple(shape[1:])
            local = torch.zeros(local_shape, dtype=torch.float32)
            if fill and local.numel():
                local.view(-1).copy_(pattern(b * shape[1], local.numel(), t))
            stride = (shape[1], 1)
            state[key] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=torch.Size(shape),
                                            stride=stride)
        else:
            dense = torch.zeros(shape, dtype=torch.float32)
            if fill:
                dense.view(-1).copy_(pattern(0, dense.numel(), t))
            state[key] = dense
    return state


def check(workload, mesh, state):
    world, rank = mesh.size(), mesh.get_local_rank()
    for t, (shape, sharded) in enumerate(shapes(workload, world)):
        v = state[f"layer{t // 4}.p{t % 4}"]
        if sharded:
            b, _ = rows_of(shape[0], world, rank)
            local = v.to_local()
            want = pattern(b * shape[1], local.numel(), t)
        else:
            local = v
            want = pattern(0, local.numel(), t)
        if not torch.equal(local.reshape(-1), want):
            raise SystemExit(f"dcp_compare_peer: rank {rank}: tensor {t} differs after the load")


def zero(state):
    for v in state.values():
        (v.to_local() if isinstance(v, DTensor) else v).zero_()


def drop_cache(path):
    """Written back and evicted from the page cache: the next read comes from the disk."""
    for name in os.listdir(path):
        fd = os.open(os.path.join(path, name), os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timing(base, method):
    """A subclass of the storage class `base` whose `method` (write_data or
    read_data) adds the time it takes, until its future is done, to the
    class's data_seconds."""

    def run(self, plan, planner):
        start = time.perf_counter()
        future = getattr(base, method)(self, plan, planner)
        future.wait()
        cls.data_seconds += time.perf_counter() - start
        return future

    cls = type(f"Timed{base.__name__}", (base,), {method: run, "data_seconds": 0.0})
    return cls


TimedWriter = timing(dcp.FileSystemWriter, "write_data")
TimedReader = timing(dcp.FileSystemReader, "read_data")


def timed(body, before=None):
    if before is not None and dist.get_rank() == 0:
        before()
    dist.barrier()
    start = time.perf_counter()
    body()
    dist.barrier()
    return time.perf_counter() - start


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--phase", choices=["w4", "w3"], required=True)
    p.add_argument("--workload", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="FileSystemWriter/Reader thread_count")
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    world, rank = dist.get_world_size(), dist.get_rank()
    mesh = init_device_mesh("cpu", (world,))
    ckpt = os.path.join(args.dir, "dcp")
    results = {}

    def best(name, seconds):
        results[name] = min(results.get(name, float("inf")), seconds)

    def load(state):
        dcp.load(state, storage_reader=TimedReader(ckpt))

    def split(name, total, cls):
        """Rank 0's data time of the last run beside the rest (planning, metadata exchange)."""
        best(f"{name}_data", cls.data_seconds)
        best(f"{name}_metadata", total - cls.data_seconds)
        cls.data_seconds = 0.0

    if args.phase == "w4":
        state = build(args.workload, mesh, fill=True)
        if rank == 0:
            print(f"BYTES {sum(dist_bytes(state, world))}", flush=True)
        for _ in range(args.repeats):
            seconds = timed(lambda: dcp.save(state, storage_writer=TimedWriter(
                ckpt, thread_count=args.threads, sync_files=True, overwrite=True)))
            best("save", seconds)
            split("save", seconds, TimedWriter)
        target = build(args.workload, mesh, fill=False)
        for _ in range(args.repeats):
            zero(target)
            seconds = timed(lambda: load(target))
            best("load_warm", seconds)
            split("load", seconds, TimedReader)
            check(args.workload, mesh, target)
        for _ in range(args.repeats):
            zero(target)
            best("load_cold", timed(lambda: load(target), before=lambda: drop_cache(ckpt)))
            TimedReader.data_seconds = 0.0
            check(args.workload, mesh, target)
        del target
        # async_save on its own Gloo group, as DCP's docs advise, so that its
        # background collectives never meet the training group's.
        group = dist.new_group(backend="gloo")
        asynchronous = os.path.join(args.dir, "dcp_async")
        writer = lambda: dcp.FileSystemWriter(asynchronous, thread_count=args.threads, sync_files=True,
                                              overwrite=True)
        dcp.async_save(state, storage_writer=writer(), process_group=group).result()  # warm-up, untimed
        for _ in range(args.repeats):
            dist.barrier()
            start = time.perf_counter()
            future = dcp.async_save(state, storage_writer=writer(), process_group=group)
            dist.barrier()
            blocked = time.perf_counter() - start
            future.result()
            dist.barrier()
            best("async_block", blocked)
            best("async_total", time.perf_counter() - start)
    else:
        target = build(args.workload, mesh, fill=False)
        for _ in range(args.repeats):
            zero(target)
            best("reshard_load", timed(lambda: load(target)))
            TimedReader.data_seconds = 0.0
            check(args.workload, mesh, target)
    if rank == 0:
        for name, seconds in results.items():
            print(f"RESULT dcp {name} {seconds:.6f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def dist_bytes(state, world):
    """The checkpoint's logical bytes: every sharded tensor once, every dense once."""
    out = []
    for v in state.values():
        out.append(v.numel() * 4)
    return out


if __name__ == "__main__":
    main()
