"""Checks, in Python, the files C++ exported in the interop test.

  check_export.py plain ORIGINAL.pt EXPORT.pt STEPS LR
    EXPORT.pt must be the original state dict (nested entries under dotted
    keys) after STEPS of x <- x - LR * x on every floating tensor, computed
    here independently; dtypes, shapes and key order preserved, bit-exact.
  check_export.py lightning ORIGINAL.ckpt EXPORT.ckpt STEPS
    EXPORT.ckpt must be a Lightning layout {"state_dict", "global_step", and
    the keys Lightning 2.x resumes from (version, loops, empty optimizer_states
    and lr_schedulers)} with
    the original's keys, shapes and dtypes, finite values, global_step
    advanced by STEPS, and trained weights.
Both exports must open with torch.load(..., weights_only=True).
"""
import sys

import torch


class AttributeDict(dict):  # the classes make_torch_files.py pickled, to read the original
    pass


class Progress:
    pass


def flatten(d, prefix=""):
    out = {}
    for k, v in d.items():
        key = prefix + str(k)
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        elif isinstance(v, (list, tuple)):
            out.update(flatten(dict(enumerate(v)), key + "."))
        elif isinstance(v, torch.Tensor):
            out[key] = v
    return out


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    mode, original, exported = sys.argv[1:4]
    steps = int(sys.argv[4])
    got = torch.load(exported, weights_only=True)
    if mode == "plain":
        lr = float(sys.argv[5])
        want = flatten(torch.load(original, weights_only=False))  # our own input file: trusted
        if list(got) != list(want):
            fail("keys %s != %s" % (list(got), list(want)))
        for k, x in want.items():
            x = x.clone()
            if x.is_floating_point():
                for _ in range(steps):
                    x = x - x * lr
            g = got[k]
            if g.dtype != x.dtype or g.shape != x.shape or not torch.equal(g, x):
                fail("%s: got %s %s %s, want %s %s %s" % (k, g.dtype, tuple(g.shape), g, x.dtype, tuple(x.shape), x))
        print("plain export: %d tensors as expected" % len(want))
    else:
        want = torch.load(original, weights_only=False)  # our own input file: trusted
        keys = {"state_dict", "global_step", "pytorch-lightning_version", "loops", "optimizer_states", "lr_schedulers"}
        if set(got) != keys:
            fail("top-level keys %s" % list(got))
        if got["global_step"] != want["global_step"] + steps:
            fail("global_step %s, want %s" % (got["global_step"], want["global_step"] + steps))
        progress = got["loops"]["fit_loop"]["epoch_loop.automatic_optimization.optim_progress"]
        if progress["optimizer"]["step"]["total"]["completed"] != got["global_step"]:
            fail("loops: optimizer steps completed %s, global_step %s" % (progress, got["global_step"]))
        if got["optimizer_states"] != [] or got["lr_schedulers"] != []:
            fail("optimizer_states %s, lr_schedulers %s" % (got["optimizer_states"], got["lr_schedulers"]))
        sd, wsd = got["state_dict"], want["state_dict"]
        if sorted(sd) != sorted(wsd):  # the C++ module registers its own order
            fail("state_dict keys %s != %s" % (list(sd), list(wsd)))
        for k in wsd:
            if sd[k].dtype != wsd[k].dtype or sd[k].shape != wsd[k].shape or not torch.isfinite(sd[k]).all():
                fail("%s: %s %s" % (k, sd[k].dtype, tuple(sd[k].shape)))
        if torch.equal(sd["fc1.weight"], wsd["fc1.weight"]):
            fail("fc1.weight did not change in training")
        print("lightning export: global_step %d, %d tensors" % (got["global_step"], len(sd)))


if __name__ == "__main__":
    main()
