#!/usr/bin/env python3
"""Checks the code blocks of README.md and docs/*.md, so that a changed API or
flag fails CI instead of a reader.

  doc_blocks.py cpp PAGE.md...           writes one C++ file holding every C++ block
  doc_blocks.py sh --page=PAGE.md ...    runs the page's shell blocks (see below)
  doc_blocks.py labels README.md LABEL...  the README's public label table is LABEL...

C++ (```cpp, ```c++): the blocks of one page are one program read top to
bottom: they go, in order, into a namespace of their own per page, with their
#include lines hoisted to the top and #line directives, so a compiler error
names the page and line. A page whose blocks define `int main()` is run by the
generated test's main, in a fresh directory; a nonzero return fails it.

Shell (```sh, ```bash, ```shell): a block that names bazel, bazel-bin/...,
ckpt, train or torchrun is run, every block of a page in order in one scratch
directory (so a checkpoint one block makes is there for the next):
  bazel run [-c M] //LABEL [-- ARGS]   the LABEL's binary (given with --bin) with ARGS
  bazel build|test ... TARGETS         not run (that is the build itself): each
                                       label must be one of --bin/--label, each
                                       --config=X must be defined in .bazelrc
  bazel-bin/P/N ARGS, ckpt ARGS        the binary of //P:N, of //tools/ckpt
  torchrun ... --no_python PROG ARGS   the build's own torchrun (@libtorch//:peer.sh);
                                       --standalone becomes a rendezvous on a free port
  mpirun ARGS                          Open MPI's, with what a test machine needs
  bash tools/setup.sh [--torch2]       the script itself (--torch2 only where the
                                       build uses the pinned wheel: it checks that venv)
  VAR=VALUE ... before a command sets its environment; /tmp/ becomes the scratch dir;
  MASTER_PORT is a free port unless the command sets it.
Each command must exit 0, or N when its line ends in the comment `# exits N`.
Commands are joined by `&&` or `;` only (no pipes or redirections). A block whose
first line is `# not run: REASON` is parsed and its labels and configs checked,
but not run; a reason is required, and it shows on the page.
"""

import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile

CPP_FENCES = ("cpp", "c++")
SHELL_FENCES = ("sh", "bash", "shell")
NOT_RUN = re.compile(r"^#\s*not run:\s*(.*)$")
NOT_COMPILED = re.compile(r"^//\s*not compiled:\s*(.*)$")
EXITS = re.compile(r"#\s*exits\s+(\d+)\s*$")
RUN_WORDS = re.compile(r"(^|[\s/])(bazel|bazel-bin/\S+|ckpt|train|torchrun)(\s|$)")
COMMAND_TIMEOUT_S = 600


class BlockError(Exception):
    pass


def blocks(path):
    """(language, first line number of the code, code lines) of every fenced block."""
    out, lang, start, code = [], None, 0, []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            stripped = line.rstrip("\n")
            if lang is None:
                m = re.match(r"^```\s*([\w+-]*)", stripped)
                if m:
                    lang, start, code = m.group(1).lower(), number + 1, []
            elif stripped.startswith("```"):
                out.append((lang, start, code))
                lang = None
            else:
                code.append(stripped)
    if lang is not None:
        raise BlockError(f"{path}:{start - 1}: a code block that never ends")
    return out


def page_name(path):
    """The name a page is shown by: its path from the repository root."""
    parts = os.path.normpath(path).split(os.sep)
    return "/".join(parts[-2:]) if len(parts) > 1 and parts[-2] == "docs" else parts[-1]


# ---------------------------------------------------------------- C++ blocks


def cpp(pages):
    includes, bodies, mains = [], [], []
    for path in pages:
        name = page_name(path)
        space = "docs_" + re.sub(r"\W", "_", name[:-3] if name.endswith(".md") else name)
        code = []
        for lang, start, lines in blocks(path):
            if lang not in CPP_FENCES:
                continue
            if lines and NOT_COMPILED.match(lines[0]):
                if not NOT_COMPILED.match(lines[0]).group(1).strip():
                    raise BlockError(f"{name}:{start}: '// not compiled:' needs a reason")
                continue
            code.append(f'#line {start} "{name}"')
            for offset, line in enumerate(lines):
                if line.startswith("#include"):
                    includes.append(f'#line {start + offset} "{name}"\n{line}')
                    code.append("")
                else:
                    code.append(line)
        if not code:
            continue
        bodies.append(f"namespace {space} {{\n" + "\n".join(code) + f"\n}}  // namespace {space}\n")
        if any(re.search(r"\bint\s+main\s*\(", line) for line in code):
            mains.append((name, space))
    runner = ["int main() {", '  const char* tmp = std::getenv("TEST_TMPDIR");', "  int failed = 0;"]
    for name, space in mains:
        runner += [
            "  {",
            f'    std::string dir = std::string(tmp ? tmp : "/tmp") + "/{space}";',
            '    if (::mkdir(dir.c_str(), 0755) != 0 || ::chdir(dir.c_str()) != 0) { std::perror(dir.c_str()); return 1; }',
            f'    std::cout << "--- {name}: main()" << std::endl;',
            f"    int rc = {space}::main();",
            f'    if (rc != 0) {{ std::cerr << "FAIL: {name}: main() returned " << rc << std::endl; failed = 1; }}',
            "  }",
        ]
    runner += ["  return failed;", "}"]
    header = [
        "// Generated by docs/doc_blocks.py from the pages' C++ blocks: do not edit.",
        "#include <sys/stat.h>",
        "#include <unistd.h>",
        "#include <cstdio>",
        "#include <cstdlib>",
        "#include <iostream>",
        "#include <string>",
    ]
    return "\n".join(header + includes + ["#line 1 \"generated\""] + bodies + ["#line 1 \"generated\""] + runner) + "\n"


# -------------------------------------------------------------- shell blocks


def logical_lines(start, lines):
    """(line number, text) with backslash continuations joined."""
    out, pending, first = [], "", start
    for offset, line in enumerate(lines):
        if not pending:
            first = start + offset
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((first, pending + line))
        pending = ""
    if pending:
        out.append((first, pending))
    return out


def commands(text):
    """The commands of one line, split at && and ;, and the exit code it expects."""
    m = EXITS.search(text)
    want = int(m.group(1)) if m else 0
    lexer = shlex.shlex(text, posix=True, punctuation_chars="&|;<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    out, current = [], []
    for word in lexer:
        if word in ("&&", ";"):
            out.append(current)
            current = []
        elif word and set(word) <= set("&|;<>"):
            raise BlockError(f"'{word}' is not supported by the doc runner: one command per line, or '&&'")
        else:
            current.append(word)
    if current:
        out.append(current)
    return [c for c in out if c], want


class Runner:
    def __init__(self, args):
        self.bins, self.labels, self.configs = {}, set(), set()
        self.peer, self.setup, self.page = {}, None, None
        for arg in args:
            key, _, value = arg.partition("=")
            if key == "--bin":
                label, _, path = value.partition("=")
                self.bins[self.full_label(label)] = os.path.abspath(path)
                self.labels.add(self.full_label(label))
            elif key == "--label":
                self.labels.add(self.full_label(value))
            elif key == "--bazelrc":
                with open(value, encoding="utf-8") as f:
                    for line in f:
                        m = re.match(r"^(build|test|run|common):([\w-]+)\s", line)
                        if m:
                            self.configs.add(m.group(2))
            elif key == "--peer":
                self.peer = self.read_peer(value)
            elif key == "--setup":
                self.setup = os.path.abspath(value)
            elif key == "--page":
                self.page = value
            else:
                raise BlockError(f"unknown argument {arg}")
        base = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()
        self.scratch = tempfile.mkdtemp(prefix="docs.", dir=base)
        os.makedirs(os.path.join(self.scratch, "tmp"))
        self.jobs = 0

    @staticmethod
    def read_peer(path):
        out = subprocess.run(
            ["bash", "-c", 'set -a && source "$1" && env', "peer", path], check=True, capture_output=True, text=True
        ).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if line.startswith("LIBTORCH_"))

    @staticmethod
    def full_label(label):
        return label + ":" + label.rsplit("/", 1)[-1] if label.startswith("//") and ":" not in label else label

    def binary(self, label):
        label = self.full_label(label)
        if label not in self.bins:
            raise BlockError(f"{label} is not a binary this test has: add it to docs/BUILD.bazel's data")
        return self.bins[label]

    def program(self, word):
        if word == "ckpt":
            return self.binary("//tools/ckpt")
        if word.startswith("bazel-bin/"):
            package, _, name = word[len("bazel-bin/"):].rpartition("/")
            return self.binary(f"//{package}:{name}")
        raise BlockError(f"'{word}' is not a program the doc runner knows (bazel-bin/..., ckpt)")

    def check_config(self, words):
        for w in words:
            if w.startswith("--config="):
                if w[len("--config="):] not in self.configs:
                    raise BlockError(f"{w}: no such config in .bazelrc")

    def check_target(self, target):
        target = target.lstrip("-") if target.startswith("-//") else target
        if re.fullmatch(r"//([\w/.-]+/)?\.\.\.", target) or self.full_label(target) in self.labels:
            return
        raise BlockError(f"{target}: not a target this test knows: add it to docs/BUILD.bazel")

    def bazel(self, words, run):
        words = words[1:]
        while words and words[0].startswith("--"):  # startup options
            words = words[1:]
        if not words:
            raise BlockError("bazel without a command")
        verb, rest = words[0], words[1:]
        tail = rest.index("--") if "--" in rest else len(rest)
        options, args = rest[:tail], rest[tail + 1:]
        self.check_config(options)
        targets, skip = [], False
        for w in options:
            if skip:
                skip = False
            elif w in ("-c", "--compilation_mode"):
                skip = True
            elif not w.startswith("-") or w.startswith("-//"):
                targets.append(w)
        for t in targets:
            self.check_target(t)
        if verb == "run":
            if len(targets) != 1:
                raise BlockError("bazel run takes one target")
            return [self.binary(targets[0])] + args if run else None
        if verb in ("build", "test"):
            if args:
                raise BlockError(f"bazel {verb} with arguments after --")
            return None
        raise BlockError(f"bazel {verb}: the doc runner knows run, build and test")

    def free_port(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def torchrun(self, words, run):
        if "--no_python" not in words:
            raise BlockError("torchrun without --no_python: shardlight's programs are binaries")
        at = words.index("--no_python") + 1
        while at < len(words) and words[at].startswith("--"):
            at += 1
        if at >= len(words):
            raise BlockError("torchrun without a program")
        if not run:  # the reader's own program may be named; shardlight's must exist
            if words[at] == "ckpt" or words[at].startswith("bazel-bin/"):
                self.program(words[at])
            return None
        prog = self.program(words[at])
        torchrun = self.peer.get("LIBTORCH_TORCHRUN", "")
        if not torchrun:
            raise BlockError("this build's LibTorch has no torchrun (@libtorch//:peer.sh)")
        options = []
        for w in words[1:at]:
            if w == "--standalone":  # its fixed port 29400 would meet other tests' jobs
                self.jobs += 1
                options += ["--nnodes=1", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{self.free_port()}",
                            f"--rdzv_id=docs{os.getpid()}x{self.jobs}"]
            else:
                options.append(w)
        return [torchrun] + options + [prog] + words[at + 1:]

    def setup_sh(self, words, run, env):
        if words[1:2] != ["tools/setup.sh"]:
            raise BlockError("the doc runner runs bash only as 'bash tools/setup.sh'")
        if not run:
            return None
        if "--torch2" in words:
            prefix = self.peer.get("LIBTORCH_PREFIX", "")
            if self.peer.get("LIBTORCH_VERSION") != "2.15.0" or not prefix.endswith("/libtorch"):
                print("    (--torch2 is checked where the build uses the pinned torch 2.x wheel; this one uses "
                      f"{prefix or 'no'} LibTorch {self.peer.get('LIBTORCH_VERSION', '')})")
                return None
            env["SHARDLIGHT_TORCH2_VENV"] = os.path.dirname(prefix)
        return ["bash", self.setup] + words[2:]

    def argv(self, words, run, env):
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            key, _, value = words[0].partition("=")
            env[key] = value
            words = words[1:]
        head = words[0]
        if head == "bazel":
            return self.bazel(words, run)
        if head == "torchrun":
            return self.torchrun(words, run)
        if head == "bash":
            return self.setup_sh(words, run, env)
        if head == "mpirun":
            at = 1
            while at < len(words) and words[at].startswith("-"):
                at += 2 if words[at] in ("-np", "-n", "-x", "-H", "--host") else 3 if words[at] == "--mca" else 1
            prog = self.program(words[at])
            mpi = ["mpirun", "--oversubscribe", "--bind-to", "none"]
            if os.geteuid() == 0:
                mpi.append("--allow-run-as-root")
            return mpi + words[1:at] + [prog] + words[at + 1:] if run else None
        if head == "ckpt" or head.startswith("bazel-bin/"):
            prog = self.program(head)
            return [prog] + words[1:] if run else None
        if not run:  # another launcher (srun, ...): the programs it names must exist
            for w in words:
                if w.startswith("bazel-bin/"):
                    self.program(w)
            return None
        raise BlockError(f"'{head}' is not a command the doc runner knows: mark the block '# not run: REASON'")

    def run_page(self):
        name, ran, failures = page_name(self.page), 0, []
        for lang, start, lines in blocks(self.page):
            if lang not in SHELL_FENCES or not lines:
                continue
            m = NOT_RUN.match(lines[0])
            run = m is None
            if not run and not m.group(1).strip():
                failures.append(f"{name}:{start}: '# not run:' needs a reason")
                continue
            if run and not any(RUN_WORDS.search(line.split("#", 1)[0]) for line in lines):
                continue
            print(f"=== {name}:{start}" + ("" if run else f" (not run: {m.group(1).strip()})"))
            for number, text in logical_lines(start, lines):
                try:
                    cmds, want = commands(text.replace("/tmp/", self.scratch + "/tmp/"))
                    for words in cmds:
                        # A single process serves its store on MASTER_PORT (default 29500):
                        # a free one keeps tests that run at once apart.
                        env = dict(os.environ, MASTER_PORT=str(self.free_port()))
                        argv = self.argv(words, run, env)
                        if argv is None:
                            continue
                        ran += 1
                        shown = shlex.join(words).replace(self.scratch + "/tmp/", "/tmp/")
                        print(f"$ {shown}", flush=True)
                        done = subprocess.run(argv, cwd=self.scratch, env=env, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True, timeout=COMMAND_TIMEOUT_S)
                        print("    " + done.stdout.rstrip().replace("\n", "\n    ") if done.stdout.strip() else "",
                              flush=True)
                        if done.returncode != want:
                            raise BlockError(f"exited {done.returncode}, the page says {want}")
                except (BlockError, ValueError, subprocess.TimeoutExpired) as e:
                    failures.append(f"{name}:{number}: {e}")
                    print(f"FAIL {name}:{number}: {e}", flush=True)
                    break  # the rest of the block depends on this command
        print(f"{name}: {ran} commands run, {len(failures)} failures")
        for f in failures:
            print("FAIL: " + f)
        return 1 if failures else 0


# ---------------------------------------------------------- the label table


def labels(readme, want):
    """The README's table of public labels names exactly the labels the C++ blocks compile against."""
    with open(readme, encoding="utf-8") as f:
        table = set(re.findall(r"^\| `@shardlight(//[^`]+)` \|", f.read(), re.M))
    want = set(want)
    if table == want:
        print(f"README.md's public labels: {len(table)}, the same as docs:cpp_blocks_test's deps")
        return 0
    print("README.md's public label table and docs/public_labels.bzl differ:")
    for label in sorted(table - want):
        print(f"  only in README.md: @shardlight{label}")
    for label in sorted(want - table):
        print(f"  only in docs/public_labels.bzl: {label}")
    return 1


def main(argv):
    try:
        if argv[1:2] == ["cpp"]:
            sys.stdout.write(cpp(argv[2:]))
            return 0
        if argv[1:2] == ["sh"]:
            return Runner(argv[2:]).run_page()
        if argv[1:2] == ["labels"]:
            return labels(argv[2], argv[3:])
    except BlockError as e:
        print(f"doc_blocks: {e}", file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
