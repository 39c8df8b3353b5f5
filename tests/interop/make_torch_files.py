"""Writes the Python side of the interop test with real PyTorch.

  make_torch_files.py OUT_DIR

OUT_DIR/plain.pt       torch.save of a state dict: every dtype, views with a
                       storage offset and non-contiguous strides, a 0-d tensor,
                       nested dicts/lists, a non-tensor value
OUT_DIR/lightning.ckpt a Lightning-style checkpoint of an EmbeddingMlp-shaped
                       model, with an AttributeDict-like class in
                       hyper_parameters, loop state objects and optimizer_states
OUT_DIR/evil.pt        a state dict holding an object whose unpickling would
                       run os.system
OUT_DIR/expect_plain/, OUT_DIR/expect_lightning/
                       manifest.txt ("key DTYPE d0 d1 ...") and KEY.bin (raw
                       little-endian row-major bytes) of what C++ must load
"""
import os
import sys

import torch

DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
          torch.int64: "I64", torch.int32: "I32", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}


class AttributeDict(dict):  # as pytorch_lightning.utilities.parsing.AttributeDict
    def __getattr__(self, key):
        return self[key]


class Progress:  # a loop-state object, as Lightning's
    def __init__(self):
        self.total = {"ready": 3, "completed": 3}


class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + os.path.join(sys.argv[1], "PWNED"),))


def expect(out, flat):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "manifest.txt"), "w") as m:
        for key, t in flat.items():
            m.write(" ".join([key, DTYPES[t.dtype]] + [str(d) for d in t.shape]) + "\n")
            with open(os.path.join(out, key + ".bin"), "wb") as f:
                f.write(t.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")


def main():
    out = sys.argv[1]
    g = torch.Generator().manual_seed(1234)
    base = torch.arange(40, dtype=torch.float32) / 7
    grid = torch.randn(6, 5, generator=g, dtype=torch.float64)
    plain = {
        "emb.weight": torch.randn(12, 4, generator=g),
        "f64": grid,
        "f16": (torch.randn(3, 5, generator=g) * 10).half(),
        "bf16": (torch.randn(7, generator=g) * 10).bfloat16(),
        "i64": torch.arange(-6, 6, dtype=torch.int64).reshape(3, 4) * (1 << 40),
        "i32": torch.arange(-10, 10, dtype=torch.int32),
        "i8": torch.arange(-128, 128, 16, dtype=torch.int8),
        "u8": torch.arange(0, 256, 32, dtype=torch.uint8).reshape(2, 4),
        "bool": torch.tensor([True, False, False, True, True]),
        "view.base": base,
        "view.offset": base[5:17].view(3, 4),   # storage offset 5, shares base's storage
        "view.t": grid.t(),                      # non-contiguous strides (1, 5)
        "view.step": base[1::3],                 # stride 3
        "scalar": torch.tensor(3.25),            # 0-d
        "empty": torch.zeros(0, 3),
        "nested": {"a": [torch.ones(2, dtype=torch.int32), torch.full((2, 2), 7.5)], "count": 5, "name": "x"},
    }
    torch.save(plain, os.path.join(out, "plain.pt"))
    flat = {k: v for k, v in plain.items() if k != "nested"}
    flat["nested.a.0"] = plain["nested"]["a"][0]
    flat["nested.a.1"] = plain["nested"]["a"][1]
    expect(os.path.join(out, "expect_plain"), flat)

    model = {
        "table": torch.randn(96, 8, generator=g) * 0.1,
        "fc1.weight": torch.randn(16, 8, generator=g) * 0.3,
        "fc1.bias": torch.zeros(16),
        "fc2.weight": torch.randn(1, 16, generator=g) * 0.3,
        "fc2.bias": torch.zeros(1),
    }
    ckpt = {
        "epoch": 2,
        "global_step": 40,
        "pytorch-lightning_version": "1.9.0",
        "state_dict": model,
        "optimizer_states": [{"state": {0: {"momentum_buffer": torch.ones(16, 8)}},
                              "param_groups": [{"lr": 0.05, "momentum": 0.9, "params": [0, 1, 2, 3, 4]}]}],
        "lr_schedulers": [],
        "hyper_parameters": AttributeDict(lr=0.05, hidden=16),
        "loops": {"fit_loop": {"epoch_progress": Progress(), "state_dict": {}}},
        "callbacks": {"ModelCheckpoint{}": {"best_model_score": torch.tensor(0.5), "dirpath": out}},
    }
    torch.save(ckpt, os.path.join(out, "lightning.ckpt"))
    expect(os.path.join(out, "expect_lightning"), {"model." + k: v for k, v in model.items()})

    torch.save({"w": torch.zeros(2), "payload": Evil()}, os.path.join(out, "evil.pt"))


if __name__ == "__main__":
    main()
