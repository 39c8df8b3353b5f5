"""Checkpoints whose optimizer state belongs to another model or optimizer,
for lm_fsdp_resume.sh's bad mode: each a copy of a PyTorch FSDP2 run's
dcp.save under torch's own names (lm_peer.py --fsdp --torch_dcp_dir) with one
edit. One process, no process group: torch's dcp_to_torch_save, the edit,
torch_save_to_dcp.

Usage: make_bad_torch_dcp.py SRC_DIR OUT_DIR
Writes OUT_DIR/<case>/ and prints "<case> <text the resume's error must hold>"
for each case.
"""
import os
import sys

import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save, torch_save_to_dcp


def missing_param(optim):
    del optim["state"]["block1.mlp.fc.weight"]


def extra_param(optim):
    optim["state"]["block9.mlp.fc.weight"] = dict(optim["state"]["block1.mlp.fc.weight"])


def shape(optim):
    state = optim["state"]["block0.attn.q.weight"]
    state["exp_avg"] = state["exp_avg"][:-1].clone()


def unequal_steps(optim):
    optim["state"]["head.weight"]["step"] = optim["state"]["head.weight"]["step"] - 1


def other_lr(optim):
    optim["param_groups"][0]["lr"] = 2 * optim["param_groups"][0]["lr"]


CASES = [
    (missing_param, "lacks 'optim.state.block1.mlp.fc.weight."),
    (extra_param, "holds 'optim.state.block9.mlp.fc.weight."),
    (shape, "'optim.state.block0.attn.q.weight.exp_avg' has sizes ["),
    (unequal_steps, "'optim.state.head.weight.step' is "),
    (other_lr, "optim.param_groups.0.lr is "),
]


def main():
    src, out = sys.argv[1:3]
    os.makedirs(out, exist_ok=True)
    whole = os.path.join(out, "whole.pt")
    dcp_to_torch_save(src, whole)
    for edit, expected in CASES:
        state = torch.load(whole, weights_only=True)
        edit(state["optim"])
        path = os.path.join(out, edit.__name__ + ".pt")
        torch.save(state, path)
        torch_save_to_dcp(path, os.path.join(out, edit.__name__))
        print(edit.__name__, expected)


if __name__ == "__main__":
    main()
