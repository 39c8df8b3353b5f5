#!/usr/bin/env python3
"""Keeps docs/design.md true, and the layering it draws.

  design_check.py layers design.md            no target depends on a layer above its own
  design_check.py refs design.md PAGE.md...   what the pages name and link exists, inside
                                              the repository

Layers: the rules are docs/design.md's table whose header is
`| layer | packages | may depend on |`: each row names a layer, its packages
(backticked folders; a folder holds its subfolders unless a longer row claims
them) and the layers it may depend on (backticked; `*` is every layer). Each
BUILD file is evaluated as Python with stand-ins for Bazel's functions, which
record every rule's name, kind, testonly and labels. A label in any attribute
but visibility is a dependency. A testonly target (tests, test helpers) may
also depend on `simulate/core`, the floor every multi-rank test stands on,
and on `tests` (test data and helpers).
The root package (exported files only) may be used by every layer.

Refs: in design.md, every `//package` label and every backticked path with a
slash must exist; in every page, every relative link must stay inside the
repository and name an existing file or folder, and no page may name
a file outside it (an absolute link or a `../` that climbs out).

The repository root is found from the real path of design.md (runfiles are
links into the source tree), and every BUILD file below it is read there: the
tests are tagged "external" so that Bazel never serves them from its cache.
"""

import os
import re
import sys

# A testonly target (a test, a test helper) may also stand on the simulator's
# floor and use the test data and helpers of tests/.
TESTONLY_MAY_ALSO_USE = {"simulate/core", "tests"}
SKIPPED_ATTRS = {"name", "visibility", "tags", "licenses", "testonly", "size", "timeout"}


class CheckError(Exception):
    pass


# ------------------------------------------------------------------ layers


def layer_table(design_path):
    """[(layer, [package prefixes], set of layers it may use)] from design.md."""
    rows, in_table = [], False
    with open(design_path, encoding="utf-8") as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not in_table:
                in_table = [c.lower() for c in cells] == ["layer", "packages", "may depend on"]
                continue
            if not line.startswith("|"):
                break
            if set(cells[0]) <= set("-: "):
                continue
            ticks = [re.findall(r"`([^`]+)`", c) for c in cells[:3]]
            if len(ticks[0]) != 1 or not ticks[1]:
                raise CheckError(f"{design_path}: layer row {line.strip()!r}: want `layer` | `folder/`... | `layer`...")
            rows.append((ticks[0][0], [p.rstrip("/") for p in ticks[1]], set(ticks[2])))
    if not rows:
        raise CheckError(f"{design_path}: no table headed '| layer | packages | may depend on |'")
    names = {r[0] for r in rows}
    for name, _, uses in rows:
        unknown = uses - names - {"*"}
        if unknown:
            raise CheckError(f"{design_path}: layer {name!r} may use unknown layers {sorted(unknown)}")
    return rows


def layer_of(package, table):
    """The layer whose longest package prefix holds `package`, or None."""
    best, best_len = None, -1
    for name, prefixes, _ in table:
        for p in prefixes:
            if (package == p or package.startswith(p + "/")) and len(p) > best_len:
                best, best_len = name, len(p)
    return best


class _Anything(list):
    """A value loaded from another repository: an empty list, callable, a rule."""

    def __init__(self, recorder=None, kind="?"):
        super().__init__()
        self._recorder, self._kind = recorder, kind

    def __call__(self, *args, **kwargs):
        if self._recorder is not None and "name" in kwargs:
            self._recorder(self._kind, kwargs)
        return _Anything()

    def __getattr__(self, name):
        return _Anything(self._recorder, name)


# What a BUILD file may load from another repository, where it matters.
_EXTERNAL_VALUES = {"LIBTORCH_COPTS": [], "LIBTORCH_CUDA": False, "LIBTORCH_VERSION": "0.0.0"}


def _select(branches, no_match_error=""):
    out = []
    for value in branches.values():
        out += value if isinstance(value, list) else [value]
    return out


def evaluate_build(root, package):
    """[(kind, kwargs)] of every rule the package's BUILD file declares."""
    rules = []

    def record(kind, kwargs):
        rules.append((kind, kwargs))

    def env():
        e = {
            "glob": lambda *a, **k: [],
            "select": _select,
            "package": lambda **k: None,
            "exports_files": lambda *a, **k: None,
            "licenses": lambda *a, **k: None,
            "fail": lambda *a, **k: None,
            "Label": lambda s: s,
            "native": _Anything(record),
            "struct": lambda **k: k,
        }
        for kind in ("cc_library", "cc_binary", "cc_test", "sh_test", "sh_binary", "py_test", "py_binary",
                     "genrule", "filegroup", "alias", "test_suite", "genquery", "config_setting"):
            e[kind] = (lambda k: lambda *a, **kw: record(k, kw))(kind)
        e["load"] = lambda label, *names, **renamed: load(e, label, names, renamed)
        return e

    def load(into, label, names, renamed):
        wanted = {n: n for n in names}
        wanted.update({k: v for k, v in renamed.items()})
        if label.startswith("@") and not label.startswith("@//"):
            for local, remote in wanted.items():
                into[local] = _EXTERNAL_VALUES.get(remote, into.get(remote, _Anything(record, remote)))
            return
        pkg, _, name = label.lstrip("@").lstrip("/").partition(":")
        if label.startswith(":"):
            pkg, name = package, label[1:]
        module = env()
        path = os.path.join(root, pkg, name)
        with open(path, encoding="utf-8") as f:
            exec(compile(f.read(), path, "exec"), module)
        for local, remote in wanted.items():
            into[local] = module[remote]

    path = os.path.join(root, package, "BUILD.bazel")
    with open(path, encoding="utf-8") as f:
        exec(compile(f.read(), path, "exec"), env())
    return rules


def labels_in(value):
    if isinstance(value, str):
        return [value] if value.startswith("//") or value.startswith("@//") else []
    if isinstance(value, dict):
        value = list(value.keys()) + list(value.values())
    if isinstance(value, (list, tuple)):
        return [label for v in value for label in labels_in(v)]
    return []


def package_of(label):
    return label.lstrip("@").lstrip("/").split(":")[0]


def check_layers(design_path):
    table = layer_table(design_path)
    root = repository_root(design_path, design_path)
    packages = sorted(source_packages(root))
    layers = {name: uses for name, _, uses in table}
    problems = []
    for package in packages:
        own = layer_of(package, table)
        if own is None and package:
            problems.append(f"//{package}: in no layer of {design_path}'s table")
            continue
        try:
            rules = evaluate_build(root, package)
        except Exception as e:  # a BUILD construct the stand-ins lack: say which
            raise CheckError(f"//{package}: cannot evaluate its BUILD file: {type(e).__name__}: {e}")
        for kind, kwargs in rules:
            testonly = kwargs.get("testonly", False) or kind.endswith("_test") or kind == "test_suite"
            for attr, value in kwargs.items():
                if attr in SKIPPED_ATTRS:
                    continue
                for label in labels_in(value):
                    dep_pkg = package_of(label)
                    if dep_pkg == package or dep_pkg == "" or package == "":
                        continue
                    theirs = layer_of(dep_pkg, table)
                    allowed = layers[own]
                    if theirs == own or "*" in allowed or theirs in allowed:
                        continue
                    if testonly and theirs in TESTONLY_MAY_ALSO_USE:
                        continue
                    problems.append(
                        f"//{package}:{kwargs['name']} ({own}{', testonly' if testonly else ''}) depends on "
                        f"{label} ({theirs}): {own} may depend on {', '.join(sorted(allowed)) or 'nothing'}"
                        + ("" if "*" in allowed else f" (a testonly target also {', '.join(sorted(TESTONLY_MAY_ALSO_USE))})"))
    if problems:
        raise CheckError("dependencies against the layering of " + design_path + ":\n  " + "\n  ".join(problems))
    print(f"layers: {len(packages)} packages follow {design_path}'s table")


# -------------------------------------------------------------------- refs


def repository_root(path, relative):
    """The source tree's root: `path` (a runfile) is `relative` below it."""
    real = os.path.realpath(path)
    depth = len(os.path.normpath(relative).split(os.sep))
    root = real
    for _ in range(depth):
        root = os.path.dirname(root)
    if not os.path.isfile(os.path.join(root, "WORKSPACE")):
        raise CheckError(f"{path} does not lead to the source tree (real path {real})")
    return root


def source_packages(root):
    """Every folder of the main repository holding a BUILD file."""
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not d.startswith("bazel-")
                         and not os.path.isfile(os.path.join(folder, d, "WORKSPACE")))
        if "BUILD.bazel" in files or "BUILD" in files:
            yield "" if rel == "." else rel


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
LABEL = re.compile(r"(?<![\w@])//([a-z0-9_][a-z0-9_/.-]*)?(?::[\w.+/-]+)?")
TICKED = re.compile(r"`([^`\s]+)`")


def check_refs(design_path, pages):
    root = repository_root(design_path, design_path)
    # Backticked paths are checked where they start at one of the repository's
    # top folders (the layer table's); `torch/include` is not ours.
    tops = {p.split("/")[0] for _, prefixes, _ in layer_table(design_path) for p in prefixes}
    problems = []
    seen = set()
    for page in [design_path] + list(pages):
        real = os.path.realpath(page)
        if real in seen:
            continue
        seen.add(real)
        shown = os.path.relpath(real, root)
        with open(real, encoding="utf-8") as f:
            lines = f.read().split("\n")
        fenced = False
        for number, line in enumerate(lines, 1):
            if line.startswith("```"):
                fenced = not fenced
                continue
            if fenced:
                continue
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                    if not target.startswith("#"):
                        problems.append(f"{shown}:{number}: {target}: a link outside the repository")
                    continue
                path = target.split("#")[0]
                if path.startswith("/"):
                    problems.append(f"{shown}:{number}: {target}: an absolute path")
                    continue
                full = os.path.normpath(os.path.join(os.path.dirname(real), path))
                if not (full + os.sep).startswith(root + os.sep):
                    problems.append(f"{shown}:{number}: {target}: outside the repository")
                elif not os.path.exists(full):
                    problems.append(f"{shown}:{number}: {target}: no such file")
            if real != os.path.realpath(design_path):
                continue
            for m in LABEL.finditer(line):
                package = m.group(1) or ""
                package = package.rstrip("/.")
                if package.endswith("..."):
                    package = package[:-3].rstrip("/")
                if not os.path.isfile(os.path.join(root, package, "BUILD.bazel")):
                    problems.append(f"{shown}:{number}: {m.group(0)}: no such package")
            for ticked in TICKED.findall(line):
                if "/" not in ticked or ticked.startswith("//") or "://" in ticked or ticked.startswith("-"):
                    continue
                path = ticked.split(":")[0].rstrip(",.")
                if not re.match(r"^[\w./-]+$", path) or path.split("/")[0] not in tops:
                    continue
                if not os.path.exists(os.path.join(root, path)):
                    problems.append(f"{shown}:{number}: `{ticked}`: no such file or folder")
    if problems:
        raise CheckError("references that lead nowhere:\n  " + "\n  ".join(problems))
    print(f"refs: {len(seen)} pages name only what the repository holds")


def main(argv):
    if len(argv) < 3 or argv[1] not in ("layers", "refs"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        if argv[1] == "layers":
            check_layers(argv[2])
        else:
            check_refs(argv[2], argv[3:])
    except CheckError as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
