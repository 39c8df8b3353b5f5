"""One rank of torch's own dcp.load of a DCP directory, timed, for
tools/bench/dcp_load_bench.sh (under torchrun, Gloo, CPU): every tensor of
.metadata is a destination, a DTensor Shard(0) over the ranks when it has a
dim, else a plain tensor; rank 0 prints
  seconds=<load wall time> peak_rss_kib=<sum over ranks>
  dcp_load_bench_peer.py DCP_DIR"""
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, zeros


def main():
    path = sys.argv[1]
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    metadata = dcp.FileSystemReader(path).read_metadata()
    sd = {}
    for key, md in metadata.state_dict_metadata.items():
        if not isinstance(md, TensorStorageMetadata):
            continue
        dtype = md.properties.dtype
        if len(md.size) >= 1:
            sd[key] = zeros(tuple(md.size), dtype=dtype, device_mesh=mesh, placements=[Shard(0)])
        else:
            sd[key] = torch.zeros((), dtype=dtype)
    dist.barrier()
    start = time.time()
    dcp.load(sd, checkpoint_id=path)
    dist.barrier()
    seconds = time.time() - start
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss], dtype=torch.int64)
    dist.all_reduce(rss)
    if dist.get_rank() == 0:
        print("seconds=%.4f peak_rss_kib=%d" % (seconds, rss.item()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
