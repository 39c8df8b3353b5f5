"""One rank of a real torch.distributed.checkpoint save (torchrun, Gloo,
CPU) of every dtype shardlight stores besides the classic ten: uint16/32/64,
the float8 formats, complex32/64/128 (and, as a control, float32), filled
with random bits plus NaN/inf patterns for floats and extremes for ints;
some as DTensors sharded over a 1-D mesh (Shard(0), uneven, with an empty
shard at W > 2), the rest plain, 0-d and empty tensors, and transposed and
channels_last tensors (saved strided, as they are). Rank 0 also
writes the full tensors with torch.save (the reference, compared as bytes).
  dcp_peer_dtypes.py OUT_DIR REFERENCE.pt"""
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

DTYPES = [
    torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz,
    torch.float8_e5m2fnuz, torch.float8_e8m0fnu, torch.complex32, torch.complex64, torch.complex128, torch.float32,
]
SHARDED = {torch.uint16, torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2fnuz, torch.complex64, torch.complex32}


def special(dtype):
    """Bit patterns every reader must keep: all ones, all zeros, the sign bit
    alone, NaN/inf encodings of the float formats, the integer extremes."""
    n = dtype.itemsize
    patterns = [b"\xff" * n, b"\x00" * n, b"\x00" * (n - 1) + b"\x80", b"\x7f" + b"\xff" * (n - 1)]
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz,
                 torch.float8_e8m0fnu):
        patterns += [b"\x7f", b"\x7c", b"\xfc", b"\x80", b"\x7e"]
    elif dtype == torch.float32:
        patterns += [bytes.fromhex("0000c07f"), bytes.fromhex("0100807f"), bytes.fromhex("000080ff")]
    elif dtype.is_complex:
        half = n // 2
        patterns += [b"\x00" * (half - 1) + b"\x80" + b"\xff" * half]
    return b"".join(patterns)


def tensor(dtype, rows, cols, g):
    """Random bits of rows x cols elements, the special patterns first (as bytes:
    not every dtype has the ops a value-level fill needs)."""
    raw = torch.randint(0, 256, (rows * cols * dtype.itemsize,), generator=g, dtype=torch.uint8)
    s = special(dtype)[: raw.numel()]
    raw[: len(s)] = torch.frombuffer(bytearray(s), dtype=torch.uint8)
    return raw.view(dtype).reshape(rows, cols)


def sharded(full, mesh, rank, world):
    """A DTensor Shard(0) of `full` built from this rank's chunk: no
    collective moves the data (Gloo's scatter refuses uint16, float8, ...)."""
    chunks = list(torch.chunk(full, world, dim=0))
    chunks += [full[full.shape[0]:]] * (world - len(chunks))
    return DTensor.from_local(chunks[rank].clone(), mesh, [Shard(0)], run_check=False, shape=full.shape,
                              stride=full.stride())


def main():
    out, reference = sys.argv[1:3]
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    mesh = init_device_mesh("cpu", (world,))
    g = torch.Generator().manual_seed(20261202 + world)  # other bits at each W
    full, sd = {}, {}
    for i, dtype in enumerate(DTYPES):
        name = str(dtype).replace("torch.", "")
        full[name] = tensor(dtype, 7 + i % 3, 5, g)
        sd[name] = sharded(full[name], mesh, rank, world) if dtype in SHARDED else full[name]
    full["few_u32"] = tensor(torch.uint32, 2, 3, g)  # empty shards at W > 2
    sd["few_u32"] = sharded(full["few_u32"], mesh, rank, world)
    # Strided payloads: DCP saves a view that covers its storage as it is.
    full["transposed"] = tensor(torch.float32, 6, 9, g).t()
    full["transposed_u16"] = tensor(torch.uint16, 5, 3, g).t()
    full["channels_last"] = tensor(torch.float8_e5m2, 2 * 3, 4 * 5, g).reshape(2, 3, 4, 5).to(
        memory_format=torch.channels_last)
    full["scalar_c128"] = tensor(torch.complex128, 1, 1, g).reshape(())
    full["empty_f8"] = torch.empty(0, 4, dtype=torch.float8_e5m2)
    for key in ("transposed", "transposed_u16", "channels_last", "scalar_c128", "empty_f8"):
        sd[key] = full[key]
    dcp.save(sd, checkpoint_id=out)
    if rank == 0:
        torch.save(full, reference)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
