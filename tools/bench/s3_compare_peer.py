"""The peers' side of tools/bench/s3_compare.sh, one torchrun job on the same
S3 server as shardlight's side (the AWS_* variables say where):

  torchrun --nproc_per_node=W s3_compare_peer.py --workload=size:0.5|count:N \
      --bucket=BUCKET --prefix=PREFIX --repeats=R [--systems=boto3,dcp]

* boto3: each rank's saved bytes (its shards, and on rank 0 the dense
  tensors: what its shardlight data file holds) uploaded as one object with
  boto3's transfer manager (upload_fileobj: a multipart upload, parts in
  parallel) and downloaded back with it (download_fileobj: ranged GETs in
  parallel), default TransferConfig;
* dcp: torch.distributed.checkpoint save and load of the same state dict at
  s3://BUCKET/PREFIX/dcp-<r> through fsspec/s3fs.
The workload is dcp_compare_peer.py's (same shapes, same values). Rank 0
prints "RESULT boto3|dcp save|load <seconds>" (best of the repeats); every
load is checked after its timing.
"""
import argparse
import io
import os
import sys
import time

import boto3
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from boto3.s3.transfer import TransferConfig
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dcp_compare_peer import build, check, zero  # noqa: E402


def saved_bytes(state, rank):
    parts = []
    for v in state.values():
        if isinstance(v, DTensor):
            parts.append(v.to_local().reshape(-1))
        elif rank == 0:
            parts.append(v.reshape(-1))
    return torch.cat(parts).numpy().tobytes() if parts else b""


def timed(body):
    dist.barrier()
    start = time.perf_counter()
    body()
    dist.barrier()
    return time.perf_counter() - start


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workload", required=True)
    p.add_argument("--bucket", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--systems", default="boto3,dcp", help="which peers run: boto3, dcp or both")
    args = p.parse_args()
    systems = set(args.systems.split(","))
    if not systems or not systems <= {"boto3", "dcp"}:
        raise SystemExit(f"s3_compare_peer: --systems={args.systems}: name boto3, dcp or both")
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    world, rank = dist.get_world_size(), dist.get_rank()
    mesh = init_device_mesh("cpu", (world,))
    state = build(args.workload, mesh, fill=True)
    results = {}

    def best(name, seconds):
        results[name] = min(results.get(name, float("inf")), seconds)

    s3 = boto3.client("s3")
    config = TransferConfig()
    data = saved_bytes(state, rank)
    for r in range(args.repeats):
        if "boto3" in systems:
            key = f"{args.prefix}/boto3-{r}/rank-{rank}"
            best("boto3.save", timed(lambda: s3.upload_fileobj(io.BytesIO(data), args.bucket, key, Config=config)))
            out = io.BytesIO()
            best("boto3.load", timed(lambda: s3.download_fileobj(args.bucket, key, out, Config=config)))
            if out.getvalue() != data:
                raise SystemExit(f"s3_compare_peer: rank {rank}: boto3 read back other bytes")

        if "dcp" in systems:
            url = f"s3://{args.bucket}/{args.prefix}/dcp-{r}"
            best("dcp.save", timed(lambda: dcp.save(state, checkpoint_id=url)))
            zero(state)
            best("dcp.load", timed(lambda: dcp.load(state, checkpoint_id=url)))
            check(args.workload, mesh, state)
    if rank == 0:
        for name, seconds in sorted(results.items()):
            system, metric = name.split(".")
            print(f"RESULT {system} {metric} {seconds:.6f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
