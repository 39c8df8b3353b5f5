#!/usr/bin/env python3
"""Fault soak (issue 15): seeded random fault plans on the simulated cluster and
real kill -9s of training processes, each checked for

  - bounded time (every run ends within its limit),
  - the right rank named (the plan's rank is the one the error names),
  - the last committed checkpoint verifying (`ckpt verify`), and
  - a bit-exact resume (the final state digest equals an uninterrupted run's).

Plans (//simulate:cluster --scenario=train --fault=PLAN): crash, save-crash,
delay (below the collective timeout: the run completes; far above it: the
slow rank is named) and timeout, at a random rank and step of phase 1, on a
random world size 2..5; the scenario then resumes from the last committed
checkpoint, reloads on another world size and finishes.
Kills (//tools/train, one process, --launcher=single): kill -9 at a random
moment of a run that checkpoints every step, the moment a save's temporary
file appears, or while a checkpoint root holds one step more than keep_last
(retention has not yet removed the oldest); then verify and resume.
Half of the plans and of the kills write their checkpoints in the background
(--async_checkpoint), where a fault or a kill finds a save in flight.

usage: soak.py CLUSTER TRAIN CKPT [--plans=N] [--kills=N] [--seed=S] [--jobs=J]
Prints one line per case and a summary; exits 1 if any case failed.
"""
import concurrent.futures
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

TIMEOUT_MS = 2000      # the collective timeout of the cluster runs
RUN_LIMIT_S = 120      # any one run of a binary
_digests = {}
_digest_lock = threading.Lock()


def parse_args(argv):
    opts = {"plans": 10, "kills": 4, "seed": 1, "jobs": 2}
    pos = []
    for a in argv:
        m = re.fullmatch(r"--(plans|kills|seed|jobs)=(\d+)", a)
        if m:
            opts[m.group(1)] = int(m.group(2))
        elif a.startswith("-"):
            sys.exit("soak: unknown flag %r (see the usage in %s)" % (a, __file__))
        else:
            pos.append(os.path.realpath(a))
    if len(pos) != 3:
        sys.exit("usage: soak.py CLUSTER TRAIN CKPT [--plans=N] [--kills=N] [--seed=S] [--jobs=J]")
    return pos, opts


def run(args, limit=RUN_LIMIT_S):
    """(exit code or None when it ran past `limit`, output, seconds)."""
    start = time.monotonic()
    try:
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=limit)
        return p.returncode, p.stdout.decode("utf-8", "replace"), time.monotonic() - start
    except subprocess.TimeoutExpired as e:
        return None, (e.stdout or b"").decode("utf-8", "replace"), time.monotonic() - start


def digest(text, pattern):
    found = re.findall(pattern, text, re.M)
    return found[-1] if found else None


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Soak:
    def __init__(self, cluster, train, ckpt, work):
        self.cluster, self.train, self.ckpt, self.work = cluster, train, ckpt, work

    def cached_digest(self, key, make):
        with _digest_lock:
            if key in _digests:
                return _digests[key]
        value = make()
        with _digest_lock:
            _digests[key] = value
        return value

    # --- fault plans on the simulated cluster

    def uninterrupted_cluster_run(self, w, steps, seed):
        """(digest or None, output) of a run with no fault; every step's loss is in the output."""
        code, out, _ = run([self.cluster, "--world_size=%d" % w, "--steps=%d" % steps, "--seed=%d" % seed,
                            "--timeout_ms=%d" % TIMEOUT_MS, "--log_every=1"])
        return (digest(out, r"^final state digest ([0-9a-f]+)$") if code == 0 else None), out

    def uninterrupted_cluster(self, w, steps, seed):
        return self.cached_digest(("cluster", w, steps, seed),
                                  lambda: self.uninterrupted_cluster_run(w, steps, seed))

    def explain_digest_mismatch(self, w, steps, seed, faulted_args, faulted_dir, faulted_out):
        """Runs both again once, so that a failure says which run is not reproducible, and shows the
        losses of every run: a differing reference is nondeterminism, a differing faulted run a
        resume that is not bit-exact. The case still fails."""
        _, first_ref_out = self.uninterrupted_cluster(w, steps, seed)
        again_ref, again_ref_out = self.uninterrupted_cluster_run(w, steps, seed)
        d = faulted_dir + "-again"
        _, again_out, _ = run(faulted_args + ["--checkpoint_dir=" + d])
        shutil.rmtree(d, ignore_errors=True)
        again_faulted = digest(again_out, r"^final state digest ([0-9a-f]+)$")

        def tables(text):
            keep = [l for l in text.splitlines() if re.match(r"^(phase|rank|resuming|final|step| +\d+ )", l)]
            return "\n      ".join(keep)
        return ("run again: the uninterrupted run's digest %s, the faulted run's %s\n"
                "    uninterrupted run:\n      %s\n    faulted run:\n      %s\n    uninterrupted again:\n      %s\n"
                "    faulted again:\n      %s" % (again_ref, again_faulted, tables(first_ref_out), tables(faulted_out),
                                                   tables(again_ref_out), tables(again_out)))

    def plan_case(self, i, rng):
        w = rng.randint(2, 5)
        steps = rng.randint(4, 10)
        half = max(1, steps // 2)
        seed = rng.randint(1, 3)
        rank, step = rng.randrange(w), rng.randint(1, half)
        kind = rng.choice(["crash", "save-crash", "delay-short", "delay-long", "timeout"])
        if kind == "delay-short":
            plan = "delay:rank=%d,step=%d,ms=%d" % (rank, step, rng.randint(10, TIMEOUT_MS // 4))
        elif kind == "delay-long":
            plan = "delay:rank=%d,step=%d,ms=%d" % (rank, step, rng.randint(2 * TIMEOUT_MS, 3 * TIMEOUT_MS))
        else:
            plan = "%s:rank=%d,step=%d" % (kind, rank, step)
        background = rng.random() < 0.5  # drawn last: earlier draws stay those of older soaks
        d = os.path.join(self.work, "plan%04d" % i)
        args = ([self.cluster, "--world_size=%d" % w, "--steps=%d" % steps, "--seed=%d" % seed,
                 "--timeout_ms=%d" % TIMEOUT_MS, "--log_every=1", "--fault=" + plan]
                + (["--async_checkpoint"] if background else []))
        code, out, seconds = run(args + ["--checkpoint_dir=" + d])
        what = "W=%d steps=%d %s%s" % (w, steps, plan, " async" if background else "")
        problems = []
        if code is None:
            problems.append("ran past %d s" % RUN_LIMIT_S)
        elif code != 0:
            problems.append("exited %d: %s" % (code, out[-400:]))
        failed = re.search(r"^phase 1 on \d+ ranks failed: (.*)$", out, re.M)
        if kind == "delay-short":
            if failed:
                problems.append("a delay under the timeout failed the run: " + failed.group(1))
        elif not failed:
            problems.append("the fault did not fail phase 1")
        else:
            msg = failed.group(1)
            want = ("rank %d had not arrived" % rank if kind == "delay-long"
                    else "failed on rank %d" % rank if kind == "save-crash" else "rank %d: injected" % rank)
            named = re.search(r"rank (\d+)", msg)
            if want not in msg:
                problems.append("error does not name rank %d as %r: %s" % (rank, want, msg))
            elif kind != "delay-long" and (not named or int(named.group(1)) != rank):
                problems.append("error names rank %s first, not %d: %s" % (named and named.group(1), rank, msg))
        if "reloaded model equals saved: yes" not in out and code == 0:
            problems.append("the reload check did not pass")
        v_code, v_out, _ = run([self.ckpt, "verify", d])
        if v_code != 0:
            problems.append("the last committed checkpoint does not verify: " + v_out[-300:])
        got = digest(out, r"^final state digest ([0-9a-f]+)$")
        shutil.rmtree(d, ignore_errors=True)
        want_digest, _ = self.uninterrupted_cluster(w, steps, seed)
        if got is None or got != want_digest:
            problems.append("final digest %s, an uninterrupted run's %s; %s" %
                            (got, want_digest, self.explain_digest_mismatch(w, steps, seed, args, d, out)))
        return "plan", what, seconds, problems

    # --- kill -9 of a real training process

    def train_args(self, d, steps, seed, extra=()):
        return [self.train, "--launcher=single", "--master_port=%d" % free_port(), "--steps=%d" % steps,
                "--seed=%d" % seed, "--checkpoint_dir=" + d] + list(extra)

    def uninterrupted_train(self, steps, seed):
        def make():
            d = tempfile.mkdtemp(dir=self.work)
            code, out, _ = run(self.train_args(d, steps, seed))
            shutil.rmtree(d, ignore_errors=True)
            return digest(out, r"^train: final state digest ([0-9a-f]+)$") if code == 0 else None
        return self.cached_digest(("train", steps, seed), make)

    def kill_case(self, i, rng):
        steps, seed = rng.randint(8, 16), rng.randint(1, 3)
        moment = rng.choice(["random", "save", "retention"])
        root = moment == "retention" or rng.random() < 0.5
        d = os.path.join(self.work, "kill%04d" % i)
        extra = ["--checkpoint_every=1", "--min_step_ms=%d" % rng.randint(20, 80), "--timeout_ms=5000"]
        if root:
            extra.append("--keep_last=2")
        background = rng.random() < 0.5  # drawn after the older draws
        if background:
            extra.append("--async_checkpoint")
        what = "steps=%d %s kill, %s%s" % (steps, moment, "root keep_last=2" if root else "plain",
                                          ", async" if background else "")
        proc = subprocess.Popen(self.train_args(d, steps, seed, extra), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        start = time.monotonic()
        problems = []
        killed_at = self.wait_for_moment(d, moment, root, rng, proc)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        try:
            proc.wait(timeout=RUN_LIMIT_S)
        except subprocess.TimeoutExpired:
            problems.append("the killed process did not end")
        seconds = time.monotonic() - start
        if killed_at is None:
            what += " (the run ended before the moment came)"
        if root and os.path.exists(os.path.join(d, "latest")):
            latest = open(os.path.join(d, "latest")).read().strip()
            committed = os.path.join(d, latest)
            steps_on_disk = [n for n in os.listdir(d) if n.startswith("step-")]
            if len(steps_on_disk) > 3:
                problems.append("%d step directories after the kill (keep_last 2)" % len(steps_on_disk))
        else:
            committed = d
        if os.path.exists(os.path.join(committed, "index.json")):
            v_code, v_out, _ = run([self.ckpt, "verify", committed])
            if v_code != 0:
                problems.append("the last committed checkpoint does not verify: " + v_out[-300:])
        code, out, resume_s = run(self.train_args(d, steps, seed, ["--keep_last=2"] if root else []))
        seconds += resume_s
        if code != 0:
            problems.append("the resume exited %s: %s" % (code, out[-400:]))
        got = digest(out, r"^train: final state digest ([0-9a-f]+)$")
        nothing = "train: nothing to do" in out
        want = self.uninterrupted_train(steps, seed)
        if not nothing and got != want:
            problems.append("final digest %s after the resume, an uninterrupted run's %s" % (got, want))
        shutil.rmtree(d, ignore_errors=True)
        return "kill", what, seconds, problems

    @staticmethod
    def wait_for_moment(d, moment, root, rng, proc):
        """Polls until the moment to kill; returns its time, or None when the run ended first."""
        deadline = time.monotonic() + RUN_LIMIT_S
        first = "latest" if root else "index.json"
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                names = os.listdir(d)
            except FileNotFoundError:
                names = []
            if moment == "random" and first in names:
                time.sleep(rng.uniform(0, 0.5))
                return time.monotonic()
            if moment == "save":
                where = d
                if root:
                    steps = sorted(n for n in names if n.startswith("step-"))
                    where = os.path.join(d, steps[-1]) if steps else d
                try:
                    inner = os.listdir(where)
                except FileNotFoundError:
                    inner = []
                if first in names and any(n.startswith(".tmp-") for n in inner + names):
                    return time.monotonic()
            if moment == "retention" and len([n for n in names if n.startswith("step-")]) > 2:
                return time.monotonic()
            time.sleep(0.001)
        return None


def main():
    (cluster, train, ckpt), opts = parse_args(sys.argv[1:])
    work = tempfile.mkdtemp(prefix="soak-", dir=os.environ.get("TEST_TMPDIR"))
    soak = Soak(cluster, train, ckpt, work)
    master = random.Random(opts["seed"])
    cases = [("plan", i, master.randrange(1 << 30)) for i in range(opts["plans"])]
    cases += [("kill", i, master.randrange(1 << 30)) for i in range(opts["kills"])]
    start = time.monotonic()

    def one(case):
        kind, i, case_seed = case
        rng = random.Random(case_seed)
        return soak.plan_case(i, rng) if kind == "plan" else soak.kill_case(i, rng)

    failures, worst = [], {"plan": 0.0, "kill": 0.0}
    with concurrent.futures.ThreadPoolExecutor(max_workers=opts["jobs"]) as pool:
        for kind, what, seconds, problems in pool.map(one, cases):
            worst[kind] = max(worst[kind], seconds)
            print("%-4s %-48s %6.1f s  %s" % (kind, what, seconds, "ok" if not problems else "; ".join(problems)),
                  flush=True)
            if problems:
                failures.append(what)
    shutil.rmtree(work, ignore_errors=True)
    print("soak (seed %d): %d fault plans, %d kills in %.0f s; slowest plan %.1f s, slowest kill+resume %.1f s; "
          "%d failed" % (opts["seed"], opts["plans"], opts["kills"], time.monotonic() - start, worst["plan"],
                         worst["kill"], len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
