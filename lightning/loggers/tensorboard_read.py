"""Reads shardlight's TensorBoard event file with the real tensorboard
package's EventAccumulator (run by //lightning/metrics:torch2_peer_test.sh) (pinned in the torch 2.x venv) and checks that
every scalar of every step equals the CSV logger's value of the same run
(as float32: TensorBoard's simple_value).
Usage: tensorboard_read.py DIR [TAGS LOSSES VALIDATIONS]: the tags that must be
there (comma-separated) and how many loss and val_loss scalars; the defaults
are logged_fit's."""
import csv
import struct
import sys

import tensorboard
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

assert tensorboard.__version__ == "2.21.0", tensorboard.__version__


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def main(logdir, required="loss,lr,val_loss,tokens_per_sec,steps_per_sec", losses=6, validations=3):
    acc = EventAccumulator(logdir, size_guidance={"scalars": 0})
    acc.Reload()
    tags = sorted(acc.Tags()["scalars"])
    with open(f"{logdir}/metrics.csv") as f:
        rows = list(csv.DictReader(f))
    want_tags = sorted(k for k in rows[0] if k != "step")
    assert tags == want_tags, f"tensorboard read tags {tags}, the CSV has {want_tags}"
    assert set(required.split(",")) <= set(tags), f"tensorboard read tags {tags}, want at least {required}"
    checked = 0
    for tag in tags:
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        want = [(int(r["step"]), f32(float(r[tag]))) for r in rows if r[tag] != ""]
        assert got == want, f"{tag}: tensorboard read {got}, the CSV has {want}"
        checked += len(got)
    assert len(acc.Scalars("loss")) == int(losses), f"{len(acc.Scalars('loss'))} loss scalars, want {losses}"
    if int(validations) > 0:
        assert len(acc.Scalars("val_loss")) == int(validations), f"{len(acc.Scalars('val_loss'))} val_loss scalars"
    print(f"tensorboard {tensorboard.__version__} read {checked} scalars of {len(tags)} tags, all equal to the CSV's")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
