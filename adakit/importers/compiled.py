"""The importers' hot path compiled with mypyc, and loaded only when built from these sources.

Importing a Claude Code session spends its time in pure-Python reading, mapping and writing
(benchmarks/README.md, issue 27). mypyc compiles those modules (:data:`MODULES`) to C
extensions with the same behaviour. The build is optional and made once per machine:
``adakit compiled build`` (``make setup`` runs it) writes the extensions into a cache folder
(:func:`cache_root`, ``ADAKIT_COMPILED_DIR`` overrides) named after the interpreter, a digest
of the modules and a digest of every adakit module they import; it is made in a temporary
folder under a lock and renamed into place whole, and never rewritten afterwards.

When :mod:`adakit.importers` is imported, :func:`install` loads that build only if every
source it was built from, and every adakit module those import, is byte for byte the file in
this checkout. Otherwise, and always with ``ADAKIT_COMPILED=0``, the same modules run as pure
Python: an edited checkout never runs stale compiled code. :func:`state` says which one runs
and why; ``adakit compiled status`` prints it.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import sysconfig
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

#: The modules compiled, in import order: the shell parser, the canonical mapping, the
#: records every importer writes, and the Claude Code reader.
MODULES = (
    "adakit.importers.shell",
    "adakit.importers.mapping",
    "adakit.importers.base",
    "adakit.importers.claude_code",
)
#: mypyc's name for the shared library of the group (``<GROUP>__mypyc``).
GROUP = "adakit.importers._compiled"
#: ``0``: never load the compiled modules.
SWITCH = "ADAKIT_COMPILED"
#: The folder builds are kept in (default: ``~/.cache/adakit/compiled``).
FOLDER = "ADAKIT_COMPILED_DIR"
#: The mypy release the build uses (mypyc ships with it).
MYPY = "mypy==2.4.1"
MANIFEST = "manifest.json"
_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the adakit package


@dataclass(frozen=True)
class State:
    """Whether the compiled modules run in this process (``compiled``), and why or why not."""

    compiled: bool
    reason: str
    folder: Path | None = None

    def line(self) -> str:
        """One line for a benchmark or a log."""
        where = f" ({self.folder})" if self.folder else ""
        return f"importers: {'compiled with mypyc' if self.compiled else 'pure Python'}: {self.reason}{where}"


_STATE: State | None = None


def cache_root() -> Path:
    """Where builds are kept: ``ADAKIT_COMPILED_DIR``, else ``$XDG_CACHE_HOME/adakit/compiled``."""
    env = os.environ.get(FOLDER)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "adakit" / "compiled"


def source_of(module: str) -> Path:
    """The source file of an adakit module (a package's ``__init__.py``)."""
    path = _ROOT.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _digest(modules: Sequence[str]) -> str:
    h = hashlib.sha256()
    for name in modules:
        h.update(name.encode() + b"\0" + source_of(name).read_bytes() + b"\0")
    return h.hexdigest()


def tag() -> str:
    """The interpreter and platform a build is for (its extension suffix without ``.so``)."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or f".{sys.implementation.cache_tag}.so"
    return suffix.strip(".").rsplit(".", 1)[0]


def key() -> str:
    """The start of a build's folder name: :func:`tag` and a digest of :data:`MODULES`; the
    name ends with a digest of every adakit module they import (a build never changes once
    written: other sources make another folder)."""
    return f"{tag()}-{_digest(MODULES)[:16]}"


def dependencies(modules: Sequence[str] = MODULES) -> list[str]:
    """The adakit modules ``modules`` import, directly or not, themselves included (read from
    their import statements), sorted; not this loader, which the compiled code does not use."""
    seen: set[str] = set()
    todo = list(modules)
    while todo:
        name = todo.pop()
        if name in seen or name == __name__ or not source_of(name).exists():
            continue
        seen.add(name)
        parts = name.split(".")
        todo.extend(".".join(parts[:k]) for k in range(1, len(parts)))  # its packages
        package = name if source_of(name).name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(source_of(name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                todo.extend(a.name for a in node.names if a.name.split(".")[0] == "adakit")
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, up level - 1 packages
                    up = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{up}.{base}" if base else up
                if base.split(".")[0] == "adakit":
                    todo.append(base)
                    todo.extend(f"{base}.{a.name}" for a in node.names)
    return sorted(seen)


def _sources(modules: Sequence[str]) -> dict[str, str]:
    return {m: hashlib.sha256(source_of(m).read_bytes()).hexdigest() for m in modules}


class _Finder:
    """Finds the compiled modules (and their shared library) in one build folder (a finder of
    ``sys.meta_path``)."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        file = self.files.get(fullname)
        if file is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(file))
        return importlib.util.spec_from_file_location(fullname, file, loader=loader)


def _check(folder: Path) -> tuple[dict[str, Path] | None, str]:
    """The build's files by module name, or None and why it cannot be used."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        recorded: dict[str, str] = dict(manifest["sources"])
        files = {str(name): folder / str(f) for name, f in dict(manifest["files"]).items()}
        sizes = {str(f): int(n) for f, n in dict(manifest["sizes"]).items()}
    except FileNotFoundError:
        return None, "not built for these sources (adakit compiled build)"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return None, f"unusable build manifest in {folder.name}: {type(exc).__name__}"
    try:
        now = _sources(list(recorded))
    except OSError as exc:
        return None, f"a source of the build is gone: {exc}"
    changed = sorted(m for m, sha in recorded.items() if now[m] != sha)
    if changed:
        return None, "built from other sources: " + ", ".join(changed) + " changed since"
    if set(MODULES) - set(files):
        return None, "the build is incomplete: " + ", ".join(sorted(set(MODULES) - set(files)))
    for f in files.values():
        try:
            size = f.stat().st_size
        except OSError:
            return None, f"the build is incomplete: {f.name} is missing"
        if size != sizes.get(f.name):
            return None, f"the build is damaged: {f.name} has {size} bytes, not {sizes.get(f.name)}"
    return files, f"built {manifest.get('built', '?')} with {manifest.get('mypy', '?')}"


def _find() -> tuple[dict[str, Path] | None, str, Path | None]:
    """The newest usable build of these sources: its files, why (or why none), its folder."""
    root = cache_root()
    candidates = sorted(root.glob(key() + "-*"), key=_mtime, reverse=True) if root.is_dir() else []
    reasons = []
    for folder in candidates:
        files, why = _check(folder)
        if files is not None:
            return files, why, folder
        reasons.append(why)
    return None, reasons[0] if reasons else "not built for these sources (adakit compiled build)", None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def install() -> State:
    """Load the compiled modules from now on in this process, if a build of exactly these
    sources exists and none of them is imported yet; the state either way (once decided,
    the same state on every call)."""
    global _STATE
    if _STATE is not None:
        return _STATE
    if os.environ.get(SWITCH, "1").strip() == "0":
        _STATE = State(False, f"{SWITCH}=0")
        return _STATE
    try:
        files, reason, folder = _find()
    except OSError as exc:
        _STATE = State(False, f"sources unreadable: {exc}")
        return _STATE
    loaded = [m for m in MODULES if m in sys.modules]
    if files is not None and loaded:
        files, reason = None, "already imported as Python: " + ", ".join(loaded)
    if files is None:
        _STATE = State(False, reason)
        return _STATE
    sys.meta_path.insert(0, _Finder(files))
    _STATE = State(True, reason, folder)
    return _STATE


def state() -> State:
    """Which of the two runs in this process (compiled or pure Python), and why."""
    return _STATE or install()


def compiled_now() -> bool:
    """Whether the modules imported so far are the compiled ones (their files are extensions)."""
    return all((getattr(sys.modules[m], "__file__", None) or "").endswith(
        tuple(importlib.machinery.EXTENSION_SUFFIXES)) for m in MODULES if m in sys.modules)


# --------------------------------------------------------------------------- the build

_SETUP = """
import sys
from setuptools import setup
from mypyc.build import mypycify
paths, group, target, lib, temp = sys.argv[1].split("\\n"), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
setup(name="adakit-compiled", script_args=["-q", "build_ext", "--build-lib", lib, "--build-temp", temp],
      ext_modules=mypycify(paths, opt_level="3", group_name=group, target_dir=target))
"""


def build(python: str = sys.executable, quiet: bool = False, force: bool = False) -> Path:
    """Compile :data:`MODULES` with mypyc (installing :data:`MYPY` and setuptools into
    ``python``'s environment if it lacks them) into a new cache folder; the folder. Raises
    RuntimeError with the compiler's last lines when the build fails. A usable build of the
    same sources is reused unless ``force`` (``quiet``: say nothing then). One build runs at
    a time per cache (a lock); the folder appears whole or not at all."""
    import fcntl

    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second build waits, then finds the first one's
        _, _, folder = _find()
        if folder is not None and not force:
            if not quiet:
                print(f"compiled importers: up to date in {folder}")
            return folder
        folder = _compile(python, root)
    _prune(folder)
    return folder


def _compile(python: str, root: Path) -> Path:
    """Compile into a temporary folder of ``root``, write the manifest last, then rename the
    folder to its name (sources and dependencies digested)."""
    import shutil
    import subprocess
    import tempfile

    has = subprocess.run([python, "-c", "import mypyc.build, setuptools"], capture_output=True)
    if has.returncode != 0:
        _run([python, "-m", "pip", "install", "-q", MYPY, "setuptools"], "installing mypy")
    deps = dependencies()
    before = _sources(deps)
    started = time.time()
    print(f"compiling {len(MODULES)} importer modules with mypyc (about a minute, once per "
          "machine and version of their sources)", flush=True)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=root) as tmp:
        work = Path(tmp)
        paths = [str(source_of(m)) for m in MODULES]
        flags = ["--ignore-missing-imports", "--follow-imports=silent", f"--cache-dir={work / 'mypy'}"]
        _run([python, "-c", _SETUP, "\n".join([*flags, *paths]), GROUP, str(work / "c"),
              str(work / "lib"), str(work / "temp")], "mypyc", cwd=work)
        built = {".".join(p.relative_to(work / "lib").parts[:-1] + (p.name.split(".")[0],)): p
                 for p in (work / "lib").rglob("*.so")}
        if set(MODULES) - set(built):
            raise RuntimeError(f"mypyc built {sorted(built)}, not {list(MODULES)}")
        if _sources(deps) != before:
            raise RuntimeError("the sources changed while they were compiled; build again")
        out = work / "out"
        out.mkdir()
        for p in built.values():
            shutil.copy2(p, out / p.name)
        version = subprocess.run([python, "-c", "import mypy.version; print(mypy.version.__version__)"],
                                 capture_output=True, text=True).stdout.strip()
        manifest = {"files": {n: p.name for n, p in built.items()},
                    "sizes": {p.name: (out / p.name).stat().st_size for p in built.values()},
                    "sources": before, "mypy": f"mypy {version}", "python": sys.version.split()[0],
                    "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "seconds": round(time.time() - started, 1)}
        (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        digest = hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()
        folder = root / f"{key()}-{digest[:16]}"
        if folder.exists():  # unusable, or --force: replaced
            shutil.rmtree(folder)
        out.rename(folder)
    print(f"compiled importers: {len(built)} modules in {manifest['seconds']} s, in {folder}")
    return folder


#: Builds of other sources kept beside the newest (a checkout switched back to an older
#: commit finds its build again).
KEEP = 4


def _prune(folder: Path) -> None:
    """Remove all but the :data:`KEEP` newest other builds for this interpreter."""
    import shutil

    others = sorted((p for p in folder.parent.glob(tag() + "-*") if p != folder and p.is_dir()),
                    key=_mtime, reverse=True)
    for old in others[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
    for left in folder.parent.glob(".build-*"):  # of a build that was killed
        if time.time() - _mtime(left) > 3600:
            shutil.rmtree(left, ignore_errors=True)


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> None:
    import subprocess

    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def _cmd(args: argparse.Namespace) -> int:
    if args.action == "status":
        print(state().line())
        return 0
    try:
        build(quiet=args.quiet, force=args.force)
    except (RuntimeError, OSError) as exc:
        first = str(exc).splitlines()[0]
        print(f"compiled importers not built ({first}); the importers run as pure Python",
              file=sys.stderr)
        if not args.optional:
            print(str(exc), file=sys.stderr)
        return 0 if args.optional else 1
    return 0


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["build", "status"])
    p.add_argument("--force", action="store_true", help="build even if a build of these sources exists")
    p.add_argument("--quiet", action="store_true", help="say nothing when the build is up to date")
    p.add_argument("--optional", action="store_true",
                   help="a failed build prints one line and exits 0 (the importers run as pure Python)")


def register_cli(sub: Any) -> None:
    """``adakit compiled build|status``: the importers compiled with mypyc."""
    p = sub.add_parser("compiled", help="build the importers compiled with mypyc (once per "
                       "machine), or say whether they run compiled or as pure Python")
    _arguments(p)
    p.set_defaults(func=_cmd)


def main(argv: list[str] | None = None) -> int:
    """The ``adakit compiled`` command without the rest of the CLI (what ``make setup`` runs)."""
    import argparse

    p = argparse.ArgumentParser(prog="adakit compiled", description="The importers compiled with mypyc.")
    _arguments(p)
    return _cmd(p.parse_args(argv))
