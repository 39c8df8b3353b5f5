#!/usr/bin/env python3
"""Bounded resources as a property (issue 15): every ckpt command on every
hostile checkpoint of a corpus ends in a clear error -- a non-zero exit and a
message naming the problem -- within a time limit (90 s: a hang, not a slow start) and a memory budget.

The corpus is a good checkpoint (make_test_checkpoint) changed one way per
case, plus the seed corpora of the index and safetensors-header fuzzers
(tests/fuzz/corpus) put in place of index.json and of a data file's header.

Memory: `prlimit --as` is useless with LibTorch (it reserves address space it
never touches), so each tool's peak RSS is measured (wait4's ru_maxrss for
that one child) and compared with the baseline -- the peak of `ckpt inspect`
on the good checkpoint, i.e. LibTorch's own footprint. RLIMIT_DATA (private
writable memory) at baseline + 1 GiB is a backstop, so a regression fails
the test instead of the machine.
Each run of a tool costs ~3 s of LibTorch start, so the suite runs `verify`
(which reads everything) on every case and the other commands on a fixed
sample of cases; --all runs every command on every case.
usage: ckpt_hostile_test.py [--all] CKPT MAKE_TEST_CHECKPOINT [FUZZ_CORPUS_FILE...]
"""
import concurrent.futures
import os
import re
import resource
import shutil
import struct
import sys
import tempfile
import time

ALL = "--all" in sys.argv[1:]  # every command on every case (the suite runs a fixed sample, below)
ARGS = [a for a in sys.argv[1:] if a != "--all"]
CKPT, MAKER = ARGS[0:2]
CORPUS = ARGS[2:]  # .../corpus/checkpoint_index/* and .../corpus/safetensors_header/*
TMP = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()
TIME_LIMIT_S = 90          # per run; a good run takes ~3 s (LibTorch's start), 10-30 s on a loaded machine
BUDGET_MIB = 96            # peak RSS over the baseline; inputs here are <= 20 MiB
DATA_LIMIT = None          # set from the baseline


def run(args, timeout=TIME_LIMIT_S):
    """Runs args; returns (exit code or None on timeout, output, seconds, peak RSS MiB)."""
    out_path = os.path.join(TMP, "out-%d-%d" % (os.getpid(), time.monotonic_ns()))
    start = time.monotonic()
    with open(out_path, "wb") as out:
        pid = os.fork()
        if pid == 0:
            try:
                os.dup2(out.fileno(), 1)
                os.dup2(out.fileno(), 2)
                if DATA_LIMIT:
                    resource.setrlimit(resource.RLIMIT_DATA, (DATA_LIMIT, DATA_LIMIT))
                os.execv(args[0], args)
            finally:
                os._exit(127)
    code, rss = None, 0
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            code, rss = os.waitstatus_to_exitcode(status), usage.ru_maxrss // 1024
            break
        if time.monotonic() - start > timeout:
            os.kill(pid, 9)
            _, _, usage = os.wait4(pid, 0)
            rss = usage.ru_maxrss // 1024
            break
        time.sleep(0.02)
    seconds = time.monotonic() - start
    with open(out_path, "rb") as f:
        output = f.read().decode("utf-8", "replace")
    os.unlink(out_path)
    return code, output, seconds, rss


def data_files(d):
    return sorted(n for n in os.listdir(d) if n.startswith("data-") and n.endswith(".safetensors"))


def write(path, data, mode="wb"):
    with open(path, mode) as f:
        f.write(data)


def replace(path, old, new):
    text = open(path, "rb").read()
    assert old in text, (path, old)
    write(path, text.replace(old, new, 1))


def header_of(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    return blob[8:8 + n], blob[8 + n:]


def set_header(d, name, header):
    """Gives data file `name` a new header. One no longer than the old is padded with spaces (JSON allows them) so
    the file keeps its size and the index still fits it: the header itself is what a reader must refuse. A longer
    one changes the file's size, and the index's record of it is made to agree (its checksum line dropped)."""
    path = os.path.join(d, name)
    old, body = header_of(path)
    if len(header) <= len(old):
        header = header + b" " * (len(old) - len(header))
    write(path, struct.pack("<Q", len(header)) + header + body)
    if len(header) == len(old):
        return
    index = os.path.join(d, "index.json")
    text = open(index).read()
    at = text.index('{"name":"%s","rank":' % name)
    end = text.index("}", at)
    old_sizes = '"bytes":%d,"header_bytes":%d' % (8 + len(old) + len(body), len(old))
    new_sizes = '"bytes":%d,"header_bytes":%d' % (8 + len(header) + len(body), len(header))
    assert old_sizes in text[at:end], (text[at:end], old_sizes)
    text = text[:at] + text[at:end].replace(old_sizes, new_sizes) + text[end:]
    write(index, text[: text.rfind(',\n "index_crc32c"')] + "\n}\n", "w")


# --- The corpus: name -> (change to a copy of the good checkpoint, what the
# error must say). Each change is small and deterministic.

def fifo(victim):
    def change(d):
        p = os.path.join(d, victim(d))
        os.unlink(p)
        os.mkfifo(p)
    return change


def swap_in(victim, make):
    def change(d):
        p = os.path.join(d, victim(d))
        os.unlink(p)
        make(p)
    return change


INDEX = lambda d: "index.json"
DATA0 = lambda d: data_files(d)[0]


def deep_index(d):
    write(os.path.join(d, "index.json"), b"[" * (20 << 20))


def deep_index_that_fits(d):
    # Small enough to be read (under 1 MiB): refused by the nesting limit.
    write(os.path.join(d, "index.json"), b"[" * (900 << 10))


def many_shards(d):
    shards = ",".join('{"offsets":[%d],"sizes":[0],"rank":0,"file":"f","entry":"e","byte_range":[0,0],"crc32c":""}'
                      % i for i in range(200000))
    text = ('{"format":"shardlight.checkpoint","version":1,"world_size":1,"generation":"0123456789abcdef",'
            '"checksum":{"algorithm":"crc32c","block_bytes":262144},"files":[],"tensors":[{"key":"t","kind":'
            '"sharded","dtype":"F32","shape":[0],"shards":[' + shards + ']}]}')
    write(os.path.join(d, "index.json"), text.encode())


def unsealed_edit(edit):
    """Edits the index text and drops its checksum line, so the edit itself is what is checked."""
    def change(d):
        p = os.path.join(d, "index.json")
        text = open(p).read()
        at = text.rfind(',\n "index_crc32c"')
        text = text[:at] + "\n}\n"
        write(p, edit(text), "w")
    return change


def emptied(text):
    start = text.index('"tensors": [')
    return text[:start] + '"tensors": []\n}\n'


def flip_index_digit(d):
    p = os.path.join(d, "index.json")
    text = open(p).read()
    at = text.index('"byte_range":[') + len('"byte_range":[')
    digit = text[at]
    write(p, text[:at] + ("1" if digit != "1" else "2") + text[at + 1:], "w")


def flip_data_byte(d):
    p = os.path.join(d, DATA0(d))
    blob = bytearray(open(p, "rb").read())
    blob[-1] ^= 0x40
    write(p, bytes(blob))


def truncate_data(d):
    p = os.path.join(d, DATA0(d))
    os.truncate(p, os.path.getsize(p) // 2)


def sparse(victim, size):
    def change(d):
        p = os.path.join(d, victim(d))
        os.truncate(p, size)
    return change


def header_length(n):
    def change(d):
        p = os.path.join(d, DATA0(d))
        blob = open(p, "rb").read()
        write(p, struct.pack("<Q", n) + blob[8:])
    return change


def header_text(make):
    def change(d):
        header, _ = header_of(os.path.join(d, DATA0(d)))
        set_header(d, DATA0(d), make(header))
    return change


def corpus_header(path):
    def change(d):
        set_header(d, DATA0(d), open(path, "rb").read())
    return change


def corpus_index(path):
    def change(d):
        shutil.copy(path, os.path.join(d, "index.json"))
    return change


CASES = [
    ("fifo as index.json", fifo(INDEX), "is a FIFO, not a regular file"),
    ("fifo as data file", fifo(DATA0), "is a FIFO, not a regular file"),
    ("directory as data file", swap_in(DATA0, os.mkdir), "not a regular file"),
    ("/dev/zero as data file", swap_in(DATA0, lambda p: os.symlink("/dev/zero", p)), "not a regular file"),
    ("20 MiB of [ as index.json", deep_index, "index"),
    ("900 KiB of [ as index.json", deep_index_that_fits, "deeper than"),
    ("200k zero-size shards", many_shards, "index"),
    ("300 MiB sparse index.json", sparse(INDEX, 300 << 20), "index"),
    ("index emptied of its tensors", unsealed_edit(emptied), "the index lists 0"),
    ("index without its end", unsealed_edit(lambda t: t[: len(t) // 2]), "parse error"),
    ("index of a newer version", unsealed_edit(lambda t: t.replace('"version": 1', '"version": 99')),
     "upgrade shardlight"),
    ("index with a bad run record", unsealed_edit(lambda t: re.sub(r'"run": \[[^\]]*\]', '"run": "seed=1"', t)),
     "run is not an array"),
    ("flipped digit in the index", flip_index_digit, "checksum mismatch"),
    ("flipped byte in a data file", flip_data_byte, "checksum"),
    ("data file cut in half", truncate_data, "bytes"),
    ("data file 1 TiB sparse", sparse(DATA0, 1 << 40), "bytes"),
    ("missing data file", swap_in(DATA0, lambda p: None), "No such file"),
    ("header length 2^63-1", header_length((1 << 63) - 1), "header"),
    ("header length 100 MiB", header_length(100 << 20), "header"),
    ("raw 0xff in a header name", header_text(lambda h: h.replace(b'"embed', b'"\xffmbed', 1)), "\\xff"),
    ("duplicate key in a header", header_text(
        lambda h: b'{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"F32","shape":[0],'
                  b'"data_offsets":[0,0]}}'), "twice"),
    ("byte-order mark before a header", header_text(lambda h: b"\xef\xbb\xbf{}"), "byte-order mark"),
    ("header nested 64 deep", header_text(lambda h: b"[" * 64 + b"]" * 64), "deeper than"),
]
for path in sorted(CORPUS):
    kind, name = os.path.basename(os.path.dirname(path)), os.path.basename(path)
    if kind == "checkpoint_index":
        CASES.append(("fuzz corpus index " + name, corpus_index(path), ""))
    elif kind == "safetensors_header":
        CASES.append(("fuzz corpus header " + name, corpus_header(path), ""))

# inspect reads only the index: a damaged data file (or a valid index of
# other files) is not its business.
INSPECT_PASSES = {"index emptied of its tensors", "flipped byte in a data file", "data file cut in half", "data file 1 TiB sparse", "missing data file",
             "header length 2^63-1", "header length 100 MiB", "raw 0xff in a header name",
             "duplicate key in a header", "byte-order mark before a header", "header nested 64 deep",
             "fifo as data file", "directory as data file", "/dev/zero as data file"}
INSPECT_PASSES |= {name for name, _, _ in CASES if name.startswith("fuzz corpus")}
# The suite's sample of the other commands: each kind of damage once.
SAMPLE = {
    "inspect": {"fifo as index.json", "20 MiB of [ as index.json", "flipped digit in the index"},
    "consolidate": {"fifo as data file", "200k zero-size shards", "flipped byte in a data file",
                    "index emptied of its tensors", "duplicate key in a header"},
    "diff": {"missing data file", "index of a newer version"},
}


def commands(d, good, out):
    return [("verify", [CKPT, "verify", d]), ("inspect", [CKPT, "inspect", d]),
            ("consolidate", [CKPT, "consolidate", d, out]), ("diff", [CKPT, "diff", good, d])]


def main():
    global DATA_LIMIT
    good = os.path.join(TMP, "good")
    code, out, _, _ = run([MAKER, "make", good], timeout=120)
    assert code == 0, out
    code, out, seconds, base = run([CKPT, "inspect", good])
    assert code == 0, out
    DATA_LIMIT = (base + 1024) << 20
    code, out, _, _ = run([CKPT, "verify", good])
    assert code == 0, "RLIMIT_DATA at baseline + 1 GiB breaks a good verify: " + out
    print("baseline (inspect of the good checkpoint): %d MiB, %.1f s" % (base, seconds))

    jobs = []
    only = os.environ.get("HOSTILE_ONLY", "")  # a substring of case names, to rerun a few by hand
    for i, (name, change, needle) in enumerate(CASES):
        if only not in name:
            continue
        d = os.path.join(TMP, "case%02d" % i)
        shutil.copytree(good, d, symlinks=True)
        change(d)
        for tool, args in commands(d, good, os.path.join(TMP, "case%02d.safetensors" % i)):
            if tool == "inspect" and name in INSPECT_PASSES:
                continue
            if tool != "verify" and not ALL and name not in SAMPLE[tool]:
                continue
            jobs.append((name, tool, needle, args))

    failures = []
    worst_s, worst_mib = 0.0, 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda job: (job, run(job[3])), jobs))
    for (name, tool, needle, _), (code, out, seconds, rss) in results:
        worst_s, worst_mib = max(worst_s, seconds), max(worst_mib, rss - base)
        last = out.strip().splitlines()[-1] if out.strip() else ""
        print("%-34s %-12s exit %-4s %5.1f s %+5d MiB  %s" % (name, tool, code, seconds, rss - base, last[:110]))
        if code is None:
            failures.append("%s / %s: still running after %d s" % (name, tool, TIME_LIMIT_S))
        elif code == 0:
            failures.append("%s / %s: exited 0" % (name, tool))
        elif code < 0 or code > 2:
            failures.append("%s / %s: died (exit %s): %s" % (name, tool, code, out[-300:]))
        elif needle and needle not in out:
            failures.append("%s / %s: message lacks %r: %s" % (name, tool, needle, out[-300:]))
        elif not needle and not out.strip():
            failures.append("%s / %s: no message" % (name, tool))
        if rss - base > BUDGET_MIB:
            failures.append("%s / %s: peak RSS %d MiB over the baseline (budget %d)" % (name, tool, rss - base,
                                                                                          BUDGET_MIB))
    print("%d runs over %d hostile checkpoints; slowest %.1f s (limit %d), most memory %+d MiB over the baseline "
          "(budget %d)" % (len(results), len(CASES), worst_s, TIME_LIMIT_S, worst_mib, BUDGET_MIB))
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
