"""One rank of a real torch.distributed.checkpoint save (torchrun, Gloo,
CPU) of the tensors of a torch.save file, as DTensors sharded by rows over
a 1-D mesh (0-d and 1-element tensors plain), without the keys under
--drop prefixes, with an int "step" entry instead of "trainer.step"; its other
non-tensor entries as they are.
  dcp_from_torch_save.py IN.pt OUT_DIR STEP [DROP_PREFIX...]"""
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor


def main():
    src, out, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
    drop = tuple(sys.argv[4:])
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    sd = {}
    for k, v in torch.load(src, weights_only=True).items():
        if k == "trainer.step" or (drop and k.startswith(drop)):
            continue
        if not isinstance(v, torch.Tensor):  # a value the Trainer saves (its optimizer's hyper-parameters)
            sd[k] = v
            continue
        sd[k] = distribute_tensor(v, mesh, [Shard(0)]) if v.dim() >= 1 and v.numel() > 1 else v
    sd["step"] = step
    dcp.save(sd, checkpoint_id=out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
