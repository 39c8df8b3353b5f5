"""Writes a DCP checkpoint (torch.distributed.checkpoint.save, one process)
whose non-tensor entries are what a resume needs: a step, an LR scheduler's
and an AdamW optimizer's state (param_groups), a run name in non-ASCII text,
a data loader's state as pickled bytes (torchtitan's way), and one value that
no plain-value reader may carry (a fractions.Fraction).

Usage: dcp_values_peer.py OUT_DIR VALUES_TXT
VALUES_TXT gets "key = repr" per non-tensor entry, in .metadata's order.
"""
import fractions
import pickle
import sys

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._nested_dict import flatten_state_dict
from torch.distributed.checkpoint.metadata import BytesStorageMetadata


def main():
    out, values_path = sys.argv[1:3]
    torch.manual_seed(20261205)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for _ in range(5):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    sd = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "lr_scheduler": sched.state_dict(),
        "step": 1234,
        "run_name": "run-\u03b1 \u00fcn\u00efc\u00f6de 'q'",
        "dataloader": {"dp_rank_0": pickle.dumps({"sample_index": 77, "epoch": 3})},
        "empty_bytes": b"",
        "loss": float("nan"),
        "tiny": 1e-300,
        "big": 2**62,
        "odd": fractions.Fraction(1, 3),
    }
    dcp.save(sd, checkpoint_id=out)
    flat, _ = flatten_state_dict(sd)
    metadata = dcp.FileSystemReader(out).read_metadata()
    with open(values_path, "w", encoding="utf-8") as f:
        for key, md in metadata.state_dict_metadata.items():
            if isinstance(md, BytesStorageMetadata):
                f.write("%s = %r\n" % (key, flat[key]))


if __name__ == "__main__":
    main()
