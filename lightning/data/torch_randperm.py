"""DistributedSampler's epoch orders (torch_randperm_cases' JSON lines) equal
the real torch's torch.randperm(size, generator=Generator().manual_seed(seed +
epoch)) -- the order torch.utils.data.DistributedSampler(shuffle=True) draws.
Usage: torch_randperm.py CASES (run by //lightning/metrics:torch2_peer_test.sh)"""
import json
import sys

import torch


def main(path):
    n = 0
    with open(path) as f:
        for line in f:
            c = json.loads(line)
            g = torch.Generator()
            g.manual_seed(c["seed"] + c["epoch"])
            want = torch.randperm(c["size"], generator=g).tolist()
            assert c["order"] == want, f"size {c['size']} seed {c['seed']} epoch {c['epoch']}: {c['order'][:10]} != {want[:10]}"
            n += 1
    assert n > 0
    print(f"{n} epoch orders equal torch {torch.__version__}'s randperm")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
