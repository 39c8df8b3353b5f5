#!/usr/bin/env python3
"""Writes torch.save files built to hurt a reader (issue 26), without torch:
the pickle comes from Python's own pickler over stand-ins for torch's classes
(so its opcodes and memo use are exactly those of torch.save), the zip is
written here so that its directory can lie.

  make_hostile_torch_files.py OUT_DIR [BOMB_MIB]

OUT_DIR/tiny.pt          {"w": 1 float}: the tool's baseline
OUT_DIR/bomb.pt          {"w": 6 floats} whose storage record is deflated and
                         inflates to BOMB_MIB MiB; the directory says so
OUT_DIR/bomb_lie.pt      the same, but the directory declares the 24 bytes the
                         pickle expects
OUT_DIR/deflated.pt      {"w": 2^20 floats 0, 1, 2, ...} deflated (good)
OUT_DIR/stored.pt        the same, stored (what torch.save writes)
OUT_DIR/many_tensors.pt  100,000 one-element tensors, one storage each
OUT_DIR/many_nones.ckpt  Lightning-style: state_dict {"w"}, epoch, global_step
                         and "loops": a list of 2,000,000 Nones (skipped)
OUT_DIR/nones_inside.pt  {"w": tensor, "meta": [None] * 1,000,000} (not stored)
OUT_DIR/paths.pt         a list that holds itself twice, 40 deep: 2^40 paths
"""
import collections
import os
import pickle
import struct
import sys
import types
import zlib


def _stand_ins():
    """Module objects named like torch's, holding what torch.save's pickle names."""
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")

    class FloatStorage:
        pass

    FloatStorage.__module__, FloatStorage.__qualname__ = "torch", "FloatStorage"

    def _rebuild_tensor_v2(*args):
        raise RuntimeError("never called")

    _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"
    torch.FloatStorage, torch._utils, utils._rebuild_tensor_v2 = FloatStorage, utils, _rebuild_tensor_v2
    sys.modules.setdefault("torch", torch)
    sys.modules.setdefault("torch._utils", utils)
    return FloatStorage, _rebuild_tensor_v2


FLOAT_STORAGE, REBUILD = _stand_ins()


class Storage:
    def __init__(self, key, numel):
        self.key, self.numel = key, numel


class Tensor:
    """Pickles as torch 1.13's Tensor.__reduce_ex__ does for a CPU tensor."""

    def __init__(self, storage, sizes):
        self.storage, self.sizes = storage, tuple(sizes)

    def __reduce__(self):
        strides, acc = [], 1
        for s in reversed(self.sizes):
            strides.insert(0, acc)
            acc *= s
        return (REBUILD, (self.storage, 0, self.sizes, tuple(strides), False, collections.OrderedDict()))


class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", FLOAT_STORAGE, obj.key, "cpu", obj.numel)
        return None


def dumps(obj):
    import io
    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue()


def write_zip(path, records):
    """records: (name, data, method, declared_size or None); method 0 stored, 8 deflate."""
    out, central, offset = open(path, "wb"), [], 0
    for name, data, method, declared, chunks in records:
        crc, size = 0, 0
        if method == 8:
            comp = zlib.compressobj(9, zlib.DEFLATED, -15)
            payload = b""
            for chunk in chunks or [data]:
                crc, size = zlib.crc32(chunk, crc), size + len(chunk)
                payload += comp.compress(chunk)
            payload += comp.flush()
        else:
            payload, crc, size = data, zlib.crc32(data), len(data)
        usize = size if declared is None else declared
        n = name.encode()
        header = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(payload), usize, len(n), 0)
        out.write(header + n + payload)
        central.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0x21, crc, len(payload),
                                   usize, len(n), 0, 0, 0, 0, 0, offset) + n)
        offset += len(header) + len(n) + len(payload)
    directory = b"".join(central)
    out.write(directory)
    count = len(central)
    if count > 0xFFFF:  # zip64: an end record with 8-byte counts, and its locator
        end64 = offset + len(directory)
        out.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count, len(directory), offset))
        out.write(struct.pack("<IIQI", 0x07064B50, 0, end64, 1))
        count = 0xFFFF
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(directory), offset, 0))
    out.close()


def torch_file(path, obj, storages, deflate=(), declared=None):
    """storages: key -> bytes (or a list of chunks for a deflated one); deflate: keys to compress."""
    records = [("archive/data.pkl", dumps(obj), 0, None, None)]
    for key, data in storages.items():
        chunks = data if isinstance(data, list) else None
        records.append(("archive/data/" + key, b"" if chunks else data, 8 if key in deflate else 0,
                        (declared or {}).get(key), chunks))
    records.append(("archive/byteorder", b"little", 0, None, None))
    records.append(("archive/version", b"3\n", 0, None, None))
    write_zip(path, records)


def main():
    out = sys.argv[1]
    bomb_mib = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    os.makedirs(out, exist_ok=True)
    six = {"w": Tensor(Storage("0", 6), [6])}
    zeros = [bytes(1 << 20)] * bomb_mib
    torch_file(os.path.join(out, "bomb.pt"), six, {"0": zeros}, deflate={"0"})
    torch_file(os.path.join(out, "bomb_lie.pt"), six, {"0": zeros}, deflate={"0"}, declared={"0": 24})

    n = 1 << 20
    ramp = struct.pack("<%df" % n, *range(n))
    big = {"w": Tensor(Storage("0", n), [1024, 1024])}
    torch_file(os.path.join(out, "deflated.pt"), big, {"0": [ramp]}, deflate={"0"})
    torch_file(os.path.join(out, "stored.pt"), big, {"0": ramp})

    count = 100_000
    one = struct.pack("<f", 1.5)
    state = collections.OrderedDict(("layer%d.w" % i, Tensor(Storage(str(i), 1), [1])) for i in range(count))
    torch_file(os.path.join(out, "many_tensors.pt"), state, {str(i): one for i in range(count)})

    w = Tensor(Storage("0", 1), [1])
    lightning = {"epoch": 3, "global_step": 40, "pytorch-lightning_version": "2.6.6", "state_dict": {"w": w},
                 "loops": [None] * 2_000_000}
    torch_file(os.path.join(out, "tiny.pt"), {"w": w}, {"0": one})
    torch_file(os.path.join(out, "many_nones.ckpt"), lightning, {"0": one})
    torch_file(os.path.join(out, "nones_inside.pt"), {"w": w, "meta": [None] * 1_000_000}, {"0": one})

    # [x, x] with x = [y, y] ... : each level doubles the paths, the pickle stays tiny (memo GETs).
    node = w
    for _ in range(40):
        node = [node, node]
    torch_file(os.path.join(out, "paths.pt"), {"deep": node}, {"0": one})


if __name__ == "__main__":
    main()
