"""One rank of a real torch.distributed.checkpoint save (run under torchrun,
Gloo, CPU): plain tensors of every dtype a shardlight checkpoint holds,
DTensors on a 1-D mesh (Shard(0) uneven, Shard(1), Replicate, a tensor with
empty shards) and, at world size 4, on a 2-D (2, 2) mesh, and non-tensor
entries; or (fsdp2) a model sharded with FSDP2's fully_shard after an AdamW
step, its model and optimizer state dicts. Rank 0 also writes the full
tensors under DCP's flattened keys with torch.save (the reference) and
Python's repr of each non-tensor entry in .metadata's order.
  dcp_peer_save.py OUT_DIR REFERENCE.pt VALUES.txt [fsdp2|async]
(async: the same dict through dcp.async_save, waited for.)"""
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor


def fsdp2_state():
    """A model and optimizer state as FSDP2 checkpoints them, and the same in full."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(16, 33), torch.nn.ReLU(), torch.nn.Linear(33, 8))
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(4, 16)).sum().backward()
    opt.step()
    sd = {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt), "step": 1}
    whole = StateDictOptions(full_state_dict=True, cpu_offload=True)
    full = {"model." + k: v for k, v in get_model_state_dict(model, options=whole).items()}
    # Full state dicts are on rank 0 only (cpu_offload): the reference is written there.
    for fqn, state in get_optimizer_state_dict(model, opt, options=whole).get("state", {}).items():
        for name, v in state.items():
            full["optim.state.%s.%s" % (fqn, name)] = v
    return sd, full


def main():
    out, reference, values_path = sys.argv[1:4]
    fsdp2 = sys.argv[4:] == ["fsdp2"]
    use_async = sys.argv[4:] == ["async"]
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    if fsdp2:
        sd, full = fsdp2_state()
        save(sd, full, out, reference, values_path, rank, False)
        return
    g = torch.Generator().manual_seed(20261201)
    full = {
        "emb.weight": torch.randn(37, 8, generator=g),
        "proj.weight": torch.randn(6, 10, generator=g, dtype=torch.float64),
        "proj.bias": torch.randn(10, generator=g).to(torch.bfloat16),
        "norm.scale": torch.randn(12, generator=g),
        "few": torch.arange(6, dtype=torch.int64).reshape(2, 3),
        "counts": torch.randint(-2**40, 2**40, (23,), generator=g, dtype=torch.int64),
        "mask": torch.rand(5, 4, generator=g) > 0.5,
        "half": torch.randn(3, 5, generator=g).to(torch.float16),
        "i32": torch.randint(-1000, 1000, (7,), generator=g, dtype=torch.int32),
        "i16": torch.randint(-1000, 1000, (4,), generator=g, dtype=torch.int16),
        "i8": torch.randint(-100, 100, (4,), generator=g, dtype=torch.int8),
        "u8": torch.randint(0, 255, (9,), generator=g, dtype=torch.uint8),
        "scalar": torch.tensor(3.25),
    }
    mesh = init_device_mesh("cpu", (world,))
    sd = {
        "emb.weight": distribute_tensor(full["emb.weight"], mesh, [Shard(0)]),
        "proj.weight": distribute_tensor(full["proj.weight"], mesh, [Shard(1)]),
        "proj.bias": distribute_tensor(full["proj.bias"], mesh, [Replicate()]),
        "few": distribute_tensor(full["few"], mesh, [Shard(0)]),  # empty shards at world size > 2
        "counts": distribute_tensor(full["counts"], mesh, [Shard(0)]),
        "mask": distribute_tensor(full["mask"], mesh, [Shard(1)]),
    }
    for key in ("norm.scale", "half", "i32", "i16", "i8", "u8", "scalar"):
        sd[key] = full[key]
    if world == 4:
        full["grid"] = torch.randn(9, 7, generator=g)
        mesh2 = init_device_mesh("cpu", (2, 2))
        sd["grid"] = distribute_tensor(full["grid"], mesh2, [Shard(0), Shard(1)])
    sd["step"] = 42
    sd["lr"] = 0.001
    sd["optimizer"] = {"name": "adamw", "betas": (0.9, 0.999), "flags": [True, None], "eps": 1e-08}
    save(sd, full, out, reference, values_path, rank, use_async)


def save(sd, full, out, reference, values_path, rank, use_async):
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata
    if use_async:
        dcp.async_save(sd, checkpoint_id=out).result()
    else:
        dcp.save(sd, checkpoint_id=out)
    if rank == 0:
        torch.save(full, reference)
        flat, _ = flatten_state_dict(sd)
        metadata = dcp.FileSystemReader(out).read_metadata()
        with open(values_path, "w") as f:
            for key, md in metadata.state_dict_metadata.items():
                if isinstance(md, BytesStorageMetadata):
                    f.write("%s = %r\n" % (key, flat[key]))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
