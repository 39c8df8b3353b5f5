"""Real torch.distributed.checkpoint reads a DCP directory shardlight wrote
and compares every tensor with a reference torch.save file (bit-equal), and
every non-tensor value in it (same type, equal):
  plain   one process, dcp.load into plain tensors
  dtensor under torchrun (Gloo, CPU): dcp.load into DTensors sharded over a
          1-D mesh (Shard(0), or Shard(1) for every other 2-D tensor); each
          rank compares its own shards (no collective moves data: Gloo has no
          uint16, float8 or complex32 collectives)
  torch_save  dcp_to_torch_save, then torch.load
  dcp_peer_load.py MODE DCP_DIR REFERENCE.pt [WORK_DIR]"""
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp


def same(a, b):
    if not isinstance(b, torch.Tensor):  # a non-tensor value
        return type(a) is type(b) and a == b
    a, b = a.contiguous(), b.contiguous()
    return a.dtype == b.dtype and a.shape == b.shape and \
        a.reshape(-1).view(torch.uint8).equal(b.reshape(-1).view(torch.uint8))


def main():
    mode, directory, reference = sys.argv[1:4]
    ref = torch.load(reference, weights_only=True)
    if mode == "plain":
        sd = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else None for k, v in ref.items()}
        dcp.load(sd, checkpoint_id=directory)
        got = sd
    elif mode == "torch_save":
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
        out = os.path.join(sys.argv[4], "converted.pt")
        dcp_to_torch_save(directory, out)
        got = torch.load(out, weights_only=True)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard
        dist.init_process_group("gloo")
        world, rank = dist.get_world_size(), dist.get_rank()
        mesh = init_device_mesh("cpu", (world,))
        sd, mine, i = {}, {}, 0
        for k, v in ref.items():
            if not isinstance(v, torch.Tensor):  # a non-tensor value: rebuilt by dcp.load
                sd[k] = None
            elif v.dim() >= 1:
                dim = 1 if v.dim() == 2 and i % 2 == 1 else 0
                i += 1
                chunks = list(torch.chunk(v, world, dim=dim))
                chunks += [v.narrow(dim, v.shape[dim], 0)] * (world - len(chunks))
                mine[k] = chunks[rank]
                sd[k] = DTensor.from_local(torch.zeros_like(chunks[rank].contiguous()), mesh, [Shard(dim)],
                                           run_check=False, shape=v.shape, stride=v.contiguous().stride())
            else:
                sd[k] = torch.zeros_like(v)
        dcp.load(sd, checkpoint_id=directory)
        got = {k: (v.to_local() if hasattr(v, "to_local") else v) for k, v in sd.items()}
        ref = {k: mine.get(k, v) for k, v in ref.items()}  # this rank's part of each
    assert sorted(got) == sorted(ref), (sorted(got), sorted(ref))
    bad = [k for k in ref if not same(got[k], ref[k])]
    assert not bad, "differ: %s" % bad
    if not dist.is_initialized() or dist.get_rank() == 0:
        print("dcp_peer_load %s: %d tensors bit-equal" % (mode, len(ref)))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
