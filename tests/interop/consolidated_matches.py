"""Checks a safetensors file that `ckpt consolidate` wrote against a
torch.save reference: the same keys, and each tensor's dtype (as
shardlight's format spells it, FORMAT.md), shape and bytes equal to the
reference's (compared as bytes: NaN payloads must survive).
  consolidated_matches.py WHOLE.safetensors REFERENCE.pt"""
import json
import struct
import sys

import torch

NAMES = {"F32": "float32", "F64": "float64", "BF16": "bfloat16", "F16": "float16", "I64": "int64",
         "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "U16": "uint16",
         "U32": "uint32", "U64": "uint64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
         "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz", "F8_E8M0": "float8_e8m0fnu",
         "C32": "complex32", "C64": "complex64", "C128": "complex128"}


def main():
    raw = open(sys.argv[1], "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    ref = torch.load(sys.argv[2])
    keys = [k for k in header if k != "__metadata__"]
    assert sorted(keys) == sorted(ref), (keys, list(ref))
    for k in keys:
        e = header[k]
        b, end = e["data_offsets"]
        want = ref[k].contiguous()
        assert getattr(torch, NAMES[e["dtype"]]) == want.dtype and e["shape"] == list(want.shape), (k, e)
        assert raw[8 + n + b:8 + n + end] == want.reshape(-1).view(torch.uint8).numpy().tobytes(), k
    print("consolidated: %d tensors bit-equal" % len(keys))


if __name__ == "__main__":
    main()
