"""Importing a batch of trajectory files into one output folder (``adakit import``).

Each file is read (:mod:`adakit.importers.formats`), parsed by its format's reader, mapped and
written as one run file (:mod:`adakit.importers.base`), in one process or a small worker pool;
bad input is skipped with a reason, and a source already imported (same sha256) is skipped
too, so importing again is idempotent. :class:`ImportReport` counts what happened.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from adakit.importers import aider, claude_code
from adakit.importers.base import BadInput, Target, record_lines
from adakit.importers.formats import AUTO, FORMATS, TOO_DEEP, Records, discover, read_source
from adakit.importers.mapping import parse_tool_map
from adakit.record import SourceInfo, WorldInfo

#: Importing at least this many files shows a progress bar (unless turned off).
PROGRESS_FROM = 20
ALREADY = "already imported"
#: Skips that are not bad input: imported before, or imported with another file.
BENIGN = frozenset({ALREADY, claude_code.SUBAGENT_FILE, aider.EMPTY_SESSION})


@dataclass
class FileResult:
    """What happened to one source file."""

    path: str
    sha256: str | None = None
    run_id: str | None = None
    written: str | None = None
    reason: str | None = None
    detail: str = ""
    turns: int = 0
    format: str | None = None
    #: the fields ``auto`` chose the format by ("" when the format was given)
    markers: str = ""
    #: the drift account: record types, fields and blocks the reader did not use, counted
    unused: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.reason is None


# per-process state of the import workers (set by _init)
_TARGET: Target | None = None
_KNOWN: frozenset[str] = frozenset()
_OUT: Path | None = None
_FMT: str = AUTO


def _init(fmt: str, out: str, known: frozenset[str], target: Target) -> None:
    global _TARGET, _KNOWN, _OUT, _FMT
    _FMT, _OUT, _KNOWN, _TARGET = fmt, Path(out), known, target


def _init_worker(fmt: str, out: str, known: frozenset[str], target: Target) -> None:
    """A worker process's :func:`_init`; what the worker inherited or imported so far is
    frozen out of the garbage collector's reach (``gc.freeze``): it lives as long as the
    worker, and each collection would otherwise walk all of it again (5-10% of a Claude Code
    import's time on 2 cores)."""
    _init(fmt, out, known, target)
    gc.freeze()


def _write(path: Path, lines: Sequence[bytes]) -> None:
    """Write a run file's lines (each ending in its newline) at once, replacing ``path``."""
    tmp = path.with_name(f".{path.name}.part")
    try:
        with open(tmp, "wb") as fh:
            fh.write(b"".join(lines))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def import_file(path: str | Path) -> list[FileResult]:
    """Import one file with the worker state set by :func:`_init` (never raises on bad input):
    one result, or one per line of a file of records (an OpenHands ``output.jsonl``) or per
    session of a file of sessions (an aider chat history)."""
    path = Path(path)
    try:
        sha, fmt, data, found = read_source(path, _FMT)
    except BadInput as exc:
        return [FileResult(str(path), reason=exc.reason, detail=exc.detail)]
    if isinstance(data, Records):  # one run per line, sample or session
        stem = data.stem or path.name.rsplit(".", 1)[0]
        return [_import_one(path, label, rec_sha, fmt, rec,
                            f"{stem}-{label.rsplit(':', 1)[-1]}", found)
                for label, rec_sha, rec in data]
    return [_import_one(path, str(path), sha, fmt, data, path.name, found)]


def _import_one(path: Path, label: str, sha: str, fmt: str, data: Any, name: str,
                found: str = "") -> FileResult:
    assert _TARGET is not None and _OUT is not None
    res = FileResult(label, sha256=sha, format=fmt, markers=found)
    try:
        if isinstance(data, BadInput):
            raise data
        if sha in _KNOWN:
            raise BadInput(ALREADY, f"same sha256 {sha[:12]} in {_OUT}")
        module = FORMATS[fmt]
        if hasattr(module, "with_companions"):  # files that belong to this one (subagents)
            data = module.with_companions(path, data)
        traj = module.parse(data, name)
        source = SourceInfo(format=fmt, file=str(path.resolve()), sha256=sha, agent=traj.agent,
                            agent_version=traj.agent_version, instance=traj.instance,
                            timing=traj.timing)  # type: ignore[arg-type]
        header, turns, end = record_lines(traj, source, _TARGET)
        target = _OUT / f"{header.run_id}.jsonl"
        _write(target, [_line(header), *turns, _line(end)])
        res.run_id, res.written, res.turns = header.run_id, str(target), len(turns)
        res.unused = traj.unused
    except BadInput as exc:
        res.reason, res.detail = exc.reason, exc.detail
    except RecursionError:
        res.reason, res.detail = TOO_DEEP, "a value nests deeper than the importer follows"
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ArithmeticError) as exc:
        res.reason, res.detail = "unreadable trajectory", _one_line(exc)
    return res


def _line(record: Any) -> bytes:
    return record.model_dump_json().encode() + b"\n"


def unused_note(unused: dict[str, int], show: int = 12) -> str:
    """The drift account of one file on one line: record types first, then content blocks,
    then fields, each most frequent first."""
    order = {"type": 0, "block": 1}
    items = sorted(unused.items(), key=lambda kv: (order.get(kv[0].split(":", 1)[0], 2), -kv[1], kv[0]))
    text = ", ".join(f"{n} {what}" for what, n in items[:show])
    return text + (f", and {len(items) - show} more" if len(items) > show else "")


def _one_line(exc: Exception) -> str:
    """An exception as one short line (a record field the source filled with the wrong type
    names the field)."""
    if isinstance(exc, ValidationError) and exc.errors():
        err = exc.errors()[0]
        where = ".".join(map(str, err["loc"])) or exc.title
        return f"{exc.title}.{where}: {err['msg']}"[:300]
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def imported_hashes(out: str | Path) -> dict[str, str]:
    """sha256 of every source already imported into ``out`` -> its run file."""
    known: dict[str, str] = {}
    folder = Path(out)
    if not folder.is_dir():
        return known
    for p in folder.glob("*.jsonl"):
        try:
            with open(p, encoding="utf-8") as fh:
                head = json.loads(fh.readline() or "{}")
        except (OSError, json.JSONDecodeError):
            continue
        sha = (head.get("source") or {}).get("sha256") if isinstance(head, dict) else None
        if sha:
            known[sha] = str(p)
    return known


@dataclass
class ImportReport:
    """The outcome of one import: runs written and files skipped, with reasons."""

    out: Path
    results: list[FileResult] = field(default_factory=list)

    @property
    def imported(self) -> list[FileResult]:
        return [r for r in self.results if r.ok]

    @property
    def skipped(self) -> list[FileResult]:
        return [r for r in self.results if not r.ok]

    def counts(self) -> Counter[str]:
        """Skipped files by reason."""
        return Counter(r.reason for r in self.skipped if r.reason)

    @property
    def bad(self) -> int:
        """Files skipped for bad input (not for having been imported before, or with another file)."""
        return sum(n for reason, n in self.counts().items() if reason not in BENIGN)

    def detected(self) -> Counter[tuple[str, str]]:
        """Files ``auto`` read, by (format, the markers it was chosen by)."""
        return Counter((r.format, r.markers) for r in self.results if r.format and r.markers)

    def detection_lines(self) -> list[str]:
        """One line per format ``auto`` chose, with the markers it chose it by."""
        return [f"auto: {n} as {fmt} ({found})" for (fmt, found), n in sorted(
            self.detected().items(), key=lambda kv: (-kv[1], kv[0]))]

    def summary(self) -> str:
        """One line: runs imported, files skipped by reason."""
        n = len(self.imported)
        text = f"imported {n} run{'s' if n != 1 else ''} into {self.out}"
        if self.skipped:
            parts = ", ".join(f"{k} {reason}" for reason, k in sorted(
                self.counts().items(), key=lambda kv: (-kv[1], kv[0])))
            text += f"; skipped {len(self.skipped)}: {parts}"
        return text


def resolve_world(spec: str | None, fetch: bool = True) -> tuple[Any, WorldInfo | None]:
    """The world of ``--world``: a folder (a local checkout) or a manifest world's name."""
    if not spec:
        return None, None
    from adakit.apparatus.world import World, load_manifest, open_world

    folder = Path(spec).expanduser()
    if folder.is_dir():
        world = World(folder)
        return world, WorldInfo(name=world.name, version=git_commit(world.root),
                                source=f"folder:{world.root}")
    manifest = load_manifest()
    if spec not in manifest:
        raise ValueError(f"--world {spec!r}: not a folder, and no world of that name in the "
                         f"manifest ({', '.join(sorted(manifest))})")
    world = open_world(spec, fetch=fetch, progress=False)
    src = manifest[spec].source
    return world, WorldInfo(name=world.name, version=world.version, language=world.language,
                            source=str(src), sha256=src.sha256 or None)


def git_commit(folder: Path) -> str:
    """The commit a git checkout is at (read from .git without running git), or ""."""
    git = folder / ".git"
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head
        ref = head[5:]
        if (git / ref).exists():
            return (git / ref).read_text().strip()
        for line in (git / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split()[0]
    except OSError:
        pass
    return ""


def chunk_size(n_files: int, jobs: int) -> int:
    """Files handed to a worker at a time: 32, or fewer so that each worker gets about eight
    chunks and none is left idle while another finishes a long last chunk."""
    return max(1, min(32, -(-n_files // (jobs * 8))))


def import_paths(
    fmt: str,
    paths: Iterable[str | Path],
    out: str | Path,
    world: str | None = None,
    study: str | None = None,
    task: str | None = None,
    model: str | None = None,
    root: str | None = None,
    max_observation_chars: int = 4000,
    jobs: int | None = None,
    progress: bool | None = None,
    echo: bool = True,
    map_tool: Iterable[str] = (),
) -> ImportReport:
    """Import every trajectory file under ``paths`` into the folder ``out``.

    ``world`` (a manifest world or a local checkout) maps paths onto real files and names the
    runs' world; without it the world is named after the repository the trajectory worked on
    and lens 4 maps only what the trajectory read. ``study`` names the runs' study
    (default ``imported``), ``task`` their task family, ``model`` the model when the source does
    not record it, ``root`` the folder the agent's paths start from when the source does not
    say. Observations are clipped to ``max_observation_chars`` (their full length is kept).
    ``jobs`` worker processes (default: up to 2 for 50 files or more); ``progress`` shows a bar
    (default: from :data:`PROGRESS_FROM` files). ``echo`` prints one line per skipped file,
    and per imported file the record types, blocks and fields its reader did not use.
    ``map_tool``: ``NAME=TOOL`` pairs, the source's own tool NAME mapped as the known TOOL.
    """
    if fmt != AUTO and fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; known: {', '.join([*FORMATS, AUTO])}")
    names = parse_tool_map(map_tool)
    out = Path(out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    files, missing = discover(paths, fmt)
    report = ImportReport(out)
    for p in missing:
        report.results.append(FileResult(str(p), reason="not found", detail="no such file or folder"))
        if echo:
            print(f"skipped {p}: not found (no such file or folder)", file=sys.stderr)
    w, info = resolve_world(world)
    target = Target(world=w, world_info=info, study=study or "imported", task=task, model=model,
                    root=root, max_observation_chars=max_observation_chars, tool_names=names)
    known = imported_hashes(out)
    jobs = jobs if jobs is not None else (min(2, os.cpu_count() or 1) if len(files) >= 50 else 1)
    show = progress if progress is not None else len(files) >= PROGRESS_FROM
    from tqdm.auto import tqdm

    bar = tqdm(total=len(files), desc="import", unit="file", disable=not show, file=sys.stderr)
    seen: dict[str, str] = dict(known)
    args = (fmt, str(out), frozenset(known), target)

    def record(res: FileResult) -> None:
        if res.ok and res.sha256 in seen:  # the same content twice in one batch
            if res.written and res.written != seen[res.sha256]:
                Path(res.written).unlink(missing_ok=True)
            res.reason, res.detail = ALREADY, f"same sha256 as {Path(seen[res.sha256]).name}"
            res.run_id = res.written = None
        elif res.ok and res.sha256:
            seen[res.sha256] = res.written or ""
        report.results.append(res)
        if res.ok and res.unused and echo:
            bar.write(f"not used in {res.path}: {unused_note(res.unused)}", file=sys.stderr)
        if not res.ok and res.reason != ALREADY and echo:
            bar.write(f"skipped {res.path}: {res.reason}" + (f" ({res.detail})" if res.detail else ""),
                      file=sys.stderr)

    if jobs <= 1 or len(files) < 2:
        _init(*args)
        for f in files:
            for res in import_file(f):
                record(res)
            bar.update(1)
    else:
        with ProcessPoolExecutor(max_workers=jobs, initializer=_init_worker, initargs=args) as pool:
            for results in pool.map(import_file, files, chunksize=chunk_size(len(files), jobs)):
                for res in results:
                    record(res)
                bar.update(1)
    bar.close()
    return report



# --------------------------------------------------------------------------- command line


def _cmd_import(args: argparse.Namespace) -> int:
    try:
        report = import_paths(
            args.format, args.paths, args.out, world=args.world, study=args.study,
            task=args.task, model=args.model, root=args.root,
            max_observation_chars=args.max_observation_chars, jobs=args.jobs,
            progress=False if args.no_progress else None, map_tool=args.map_tool or ())
    except ValueError as exc:
        print(f"adakit import: {exc}", file=sys.stderr)
        return 2
    for line in report.detection_lines():
        print(line)
    print(report.summary())
    return 1 if report.bad else 0


def register_cli(sub: Any) -> None:
    """``adakit import FORMAT PATH... --out DIR``: other agents' trajectories as runs."""
    p = sub.add_parser(
        "import", help="import other agents' trajectories (SWE-agent, mini-swe-agent, "
        "OpenHands, Claude Code, Codex CLI, Inspect AI, aider, generic JSONL) as runs the lenses read")
    p.add_argument("format", choices=[*FORMATS, AUTO], metavar="FORMAT",
                   help=f"the source format: {', '.join(FORMATS)}, or {AUTO} (detect per file)")
    p.add_argument("paths", nargs="+", metavar="PATH", help="trajectory files or folders")
    p.add_argument("--out", required=True, metavar="DIR", help="folder of the imported run files")
    p.add_argument("--world", metavar="NAME_OR_FOLDER", help="a manifest world or a local checkout the runs worked in "
                   "(maps paths onto real files; without it lens 4 maps what the runs read)")
    p.add_argument("--study", metavar="NAME", help="the runs' study name (default: imported)")
    p.add_argument("--task", metavar="FAMILY", help="task family of the runs (default: issue_resolution)")
    p.add_argument("--model", metavar="NAME", help="model name when the source does not record one")
    p.add_argument("--root", metavar="PATH", help="the folder the agent's paths start from (default: from the source)")
    p.add_argument("--max-observation-chars", type=int, default=4000, metavar="N",
                   help="clip observations to this many characters (0: keep all; the full "
                   "length is always recorded)")
    p.add_argument("--jobs", type=int, metavar="N", help="worker processes (default: up to 2 for 50+ files)")
    p.add_argument("--map-tool", action="append", metavar="NAME=TOOL",
                   help="map the source's own tool NAME as the known TOOL (e.g. grep_repo=search_dir, "
                   "my_view=text_editor); repeatable")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_import)
