"""One rank of a real torch.distributed.checkpoint save straight to an S3
bucket through fsspec/s3fs (run under torchrun, Gloo, CPU): DTensors on a 1-D
mesh (Shard(0) uneven, Shard(1), Replicate, one with empty shards) and plain
tensors. Rank 0 also writes the full tensors with torch.save (the
reference). AWS_* variables say where the server is.
  s3_dcp_save.py s3://BUCKET/PREFIX REFERENCE.pt"""
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor


def main():
    url, reference = sys.argv[1:3]
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    g = torch.Generator().manual_seed(7)
    full = {
        "rows": torch.randn(13, 6, generator=g),
        "cols": torch.randn(4, 9, generator=g).to(torch.bfloat16),
        "replicated": torch.arange(10, dtype=torch.int64),
        "tiny": torch.randn(1, 3, generator=g),
        "plain": torch.randn(5, generator=g).to(torch.float16),
    }
    placements = {"rows": [Shard(0)], "cols": [Shard(1)], "replicated": [Replicate()], "tiny": [Shard(0)]}
    sd = {k: distribute_tensor(v, mesh, placements[k]) if k in placements else v.clone() for k, v in full.items()}
    dcp.save(sd, checkpoint_id=url)
    if dist.get_rank() == 0:
        torch.save(full, reference)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
