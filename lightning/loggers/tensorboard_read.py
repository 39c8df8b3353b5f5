"""Reads shardlight's TensorBoard event file with the real tensorboard
package's EventAccumulator (run by //lightning/metrics:torch2_peer_test.sh) (pinned in the torch 2.x venv) and checks that
every scalar of every step equals the CSV logger's value of the same run
(as float32: TensorBoard's simple_value). Usage: tensorboard_read.py DIR"""
import csv
import struct
import sys

import tensorboard
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

assert tensorboard.__version__ == "2.21.0", tensorboard.__version__


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def main(logdir):
    acc = EventAccumulator(logdir, size_guidance={"scalars": 0})
    acc.Reload()
    tags = sorted(acc.Tags()["scalars"])
    with open(f"{logdir}/metrics.csv") as f:
        rows = list(csv.DictReader(f))
    want_tags = sorted(k for k in rows[0] if k != "step")
    assert tags == want_tags, f"tensorboard read tags {tags}, the CSV has {want_tags}"
    assert {"loss", "lr", "val_loss", "tokens_per_sec", "steps_per_sec"} <= set(tags), tags
    checked = 0
    for tag in tags:
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        want = [(int(r["step"]), f32(float(r[tag]))) for r in rows if r[tag] != ""]
        assert got == want, f"{tag}: tensorboard read {got}, the CSV has {want}"
        checked += len(got)
    assert len(acc.Scalars("loss")) == 6 and len(acc.Scalars("val_loss")) == 3
    print(f"tensorboard {tensorboard.__version__} read {checked} scalars of {len(tags)} tags, all equal to the CSV's")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
