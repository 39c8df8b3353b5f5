"""Per-parameter gradient differences between shardlight's LM job and its
PyTorch peer: OURS.pt (`ckpt export --prefix=grad.` of the job's
--lm_grads_dir/step<K>) against PEER.pt (lm_peer.py's peer_step<K>.pt).

Usage: grad_diff.py OURS.pt PEER.pt
Prints one line per parameter -- max |ours - peer|, that over max |peer| (rel),
and the largest elementwise relative difference among entries above 1e-3 of
max |peer| (elem_rel) -- then the largest of each over the parameters whose
gradient is not numerically zero (max |peer| above 1e-6 of the largest
gradient entry: the attention's k bias has an exactly zero gradient, softmax
being blind to a shift shared by all keys, so both sides hold rounding noise
there), and those it left out. Exit 1 when the key sets or shapes differ.
"""
import sys

import torch


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: grad_diff.py OURS.pt PEER.pt")
    ours = torch.load(sys.argv[1], weights_only=True)
    peer = torch.load(sys.argv[2], weights_only=True)
    if set(ours) != set(peer):
        print(f"keys differ: only ours {sorted(set(ours) - set(peer))}, only peer {sorted(set(peer) - set(ours))}")
        sys.exit(1)
    worst = (0.0, 0.0, 0.0)
    top = max(g.abs().max().item() for g in peer.values())
    noise = []
    for key in peer:
        a, b = ours[key].double(), peer[key].double()
        if a.shape != b.shape:
            print(f"{key}: shape {tuple(a.shape)} vs {tuple(b.shape)}")
            sys.exit(1)
        diff = (a - b).abs()
        scale = b.abs().max().item()
        big = b.abs() > 1e-3 * scale
        elem = (diff[big] / b.abs()[big]).max().item() if big.any() else 0.0
        rel = diff.max().item() / scale if scale > 0 else diff.max().item()
        print(f"{key:28s} {str(ours[key].dtype):14s} max_abs {diff.max().item():.3e} rel {rel:.3e} elem_rel {elem:.3e}")
        if scale <= 1e-6 * top:
            noise.append(key)
            continue
        worst = tuple(max(w, x) for w, x in zip(worst, (diff.max().item(), rel, elem)))
    print(f"largest: max_abs {worst[0]:.3e} rel {worst[1]:.3e} elem_rel {worst[2]:.3e}"
          f" (left out, numerically zero gradients: {', '.join(noise) or 'none'})")


if __name__ == "__main__":
    main()
