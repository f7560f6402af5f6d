"""Importers: other agents' trajectories as adakit runs (issue 16).

``adakit import FORMAT PATH... --out DIR`` turns every trajectory file of a format into one
run file of adakit's record schema, so the lenses, the explorer and the judges read SWE-agent,
mini-swe-agent, OpenHands or any agent's runs beside Ada's. One module per format reads its
files into a :class:`~adakit.importers.base.Trajectory`; :mod:`~adakit.importers.mapping`
maps every step onto a canonical tool; :mod:`~adakit.importers.base` writes the records.

========================  ===================  ==========================================
format                    module               files
========================  ===================  ==========================================
``swe-agent``             ``swe_agent``        ``*.traj`` (command and function-calling style)
``mini-swe-agent``        ``mini_swe_agent``   ``*.traj.json`` (object with messages, or a list)
``openhands``             ``openhands``        ``*.json`` (event list, or ``history`` object),
                                               ``output.jsonl`` (one ``history`` record a line)
``generic``               ``generic``          ``*.jsonl`` (docs/importing.md)
``auto``                  (detected per file)  any of the above
========================  ===================  ==========================================

Bad input never stops a batch: a file in an unknown shape, truncated JSON or an empty
trajectory is skipped with a one-line reason, and the summary counts imports and skips by
reason; in a file of one record per line (an OpenHands ``output.jsonl``) every line is its
own run, imported or skipped on its own. A run file is written whole (to a temporary name, then renamed), so nothing already
imported is lost; a source whose sha256 is already in the output folder is skipped, so
importing again is idempotent.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adakit import config
from adakit.importers import generic, mini_swe_agent, openhands, swe_agent
from adakit.importers.base import BadInput, Target, build_records
from adakit.record import SourceInfo, WorldInfo

#: Format name -> reader module (``parse``, ``FORMAT``, ``AGENT``, ``EXTENSIONS``).
FORMATS: dict[str, Any] = {
    m.FORMAT: m for m in (swe_agent, mini_swe_agent, openhands, generic)
}
AUTO = "auto"
#: Importing at least this many files shows a progress bar (unless turned off).
PROGRESS_FROM = 20
ALREADY = "already imported"


def detect_format(data: Any, name: str) -> str:
    """The format of a parsed file (``auto``): by its extension and top-level shape."""
    if name.endswith(".jsonl"):
        return openhands.FORMAT if _history_records(data) else generic.FORMAT
    if isinstance(data, dict):
        if isinstance(data.get("trajectory"), list):
            return swe_agent.FORMAT
        if isinstance(data.get("messages"), list):
            return mini_swe_agent.FORMAT
        if isinstance(data.get("history"), list):
            return openhands.FORMAT
    if isinstance(data, list) and data and all(isinstance(e, dict) for e in data):
        if any("action" in e or "observation" in e for e in data):
            return openhands.FORMAT
        if all("role" in e for e in data):
            return mini_swe_agent.FORMAT
    raise BadInput("unknown shape", "not a trajectory of any known format")


def discover(paths: Iterable[str | Path], fmt: str) -> tuple[list[Path], list[Path]]:
    """(files to import, paths that do not exist): folders are searched recursively for the
    format's file endings; a file named directly is taken whatever its ending."""
    exts = tuple(e for m in FORMATS.values() for e in m.EXTENSIONS) if fmt == AUTO \
        else FORMATS[fmt].EXTENSIONS
    found: list[Path] = []
    missing: list[Path] = []
    for item in paths:
        p = Path(item).expanduser()
        if p.is_dir():
            found.extend(sorted(
                f for f in p.rglob("*") if f.is_file() and f.name.endswith(exts)
                and not any(part.startswith(".") for part in f.relative_to(p).parts)))
        elif p.is_file():
            found.append(p)
        else:
            missing.append(p)
    return list(dict.fromkeys(found)), missing


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        end = len(text.rstrip())
        if exc.pos >= end - 1:
            raise BadInput("truncated JSON", f"ends at character {end} mid-document") from None
        raise BadInput("not JSON", f"{exc.msg} at line {exc.lineno}") from None


def _jsonl(text: str) -> list[Any]:
    lines = [ln for ln in text.split("\n") if ln.strip()]
    out = []
    for i, line in enumerate(lines, 1):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if i == len(lines) and not text.endswith("\n"):
                raise BadInput("truncated JSON", f"last line {i} is cut off") from None
            raise BadInput("not JSON", f"line {i}: {exc.msg}") from None
    return out


def _history_records(data: Any) -> bool:
    """Is this JSONL content a file of OpenHands evaluation records (``history`` per line)?"""
    return (isinstance(data, list) and bool(data) and isinstance(data[0], dict)
            and isinstance(data[0].get("history"), list))


def _first_record(text: str) -> Any:
    line = next((ln for ln in text.split("\n") if ln.strip()), "")
    try:
        return [json.loads(line)]
    except json.JSONDecodeError:
        return None


def read_records(path: Path, raw: bytes) -> list[tuple[str, str, Any]]:
    """(label, sha256, parsed record or :class:`BadInput`) of every line of a file of one
    record per line (an OpenHands ``output.jsonl``): each line is its own source, so a
    truncated last line (a run still being written) costs only that line."""
    out: list[tuple[str, str, Any]] = []
    lines = raw.split(b"\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        label, sha = f"{path}:{i}", hashlib.sha256(line.rstrip(b"\r")).hexdigest()
        try:
            out.append((label, sha, json.loads(line.decode("utf-8"))))
        except UnicodeDecodeError as exc:
            out.append((label, sha, BadInput("not UTF-8 text", f"byte {exc.start}")))
        except json.JSONDecodeError as exc:
            cut = i == len(lines) and not raw.endswith(b"\n")
            out.append((label, sha, BadInput("truncated JSON", f"line {i} is cut off") if cut
                        else BadInput("not JSON", f"line {i}: {exc.msg}")))
    if not out:
        raise BadInput("empty trajectory", "the file is empty")
    return out


def read_source(path: Path, fmt: str) -> tuple[str, str, Any]:
    """(sha256, format, parsed content) of one source file, or :class:`BadInput`."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInput("unreadable", exc.strerror or str(exc)) from None
    sha = hashlib.sha256(raw).hexdigest()
    if not raw.strip():
        raise BadInput("empty trajectory", "the file is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput("not UTF-8 text", f"byte {exc.start}") from None
    jsonl = path.name.endswith(".jsonl") if fmt == AUTO else fmt == generic.FORMAT
    if fmt in (AUTO, openhands.FORMAT) and path.name.endswith(".jsonl") and (
            fmt == openhands.FORMAT or _history_records(_first_record(text))):
        return sha, openhands.FORMAT, read_records(path, raw)  # one run per line
    data = _jsonl(text) if jsonl else _json(text)
    if fmt == AUTO:
        fmt = detect_format(data, path.name)
    return sha, fmt, data


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


def _write(path: Path, records: Sequence[Any]) -> None:
    tmp = path.with_name(f".{path.name}.part")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write("".join(r.model_dump_json() + "\n" for r in records))
    os.replace(tmp, path)


def import_file(path: str | Path) -> list[FileResult]:
    """Import one file with the worker state set by :func:`_init` (never raises on bad input):
    one result, or one per line of a file of records (an OpenHands ``output.jsonl``)."""
    path = Path(path)
    try:
        sha, fmt, data = read_source(path, _FMT)
    except BadInput as exc:
        return [FileResult(str(path), reason=exc.reason, detail=exc.detail)]
    if fmt == openhands.FORMAT and path.name.endswith(".jsonl"):
        return [_import_one(path, label, rec_sha, fmt, rec,
                            f"{path.name.removesuffix('.jsonl')}-{label.rsplit(':', 1)[-1]}")
                for label, rec_sha, rec in data]
    return [_import_one(path, str(path), sha, fmt, data, path.name)]


def _import_one(path: Path, label: str, sha: str, fmt: str, data: Any, name: str) -> FileResult:
    assert _TARGET is not None and _OUT is not None
    res = FileResult(label, sha256=sha)
    try:
        if isinstance(data, BadInput):
            raise data
        if sha in _KNOWN:
            raise BadInput(ALREADY, f"same sha256 {sha[:12]} in {_OUT}")
        module = FORMATS[fmt]
        traj = module.parse(data, name)
        source = SourceInfo(format=fmt, file=str(path.resolve()), sha256=sha, agent=traj.agent,
                            agent_version=traj.agent_version, instance=traj.instance,
                            timing=traj.timing)  # type: ignore[arg-type]
        header, turns, end = build_records(traj, source, _TARGET)
        target = _OUT / f"{header.run_id}.jsonl"
        _write(target, [header, *turns, end])
        res.run_id, res.written, res.turns = header.run_id, str(target), len(turns)
    except BadInput as exc:
        res.reason, res.detail = exc.reason, exc.detail
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        res.reason, res.detail = "unreadable trajectory", f"{type(exc).__name__}: {exc}"
    return res


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
        """Files skipped for a reason other than having been imported before."""
        return sum(n for reason, n in self.counts().items() if reason != ALREADY)

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
) -> ImportReport:
    """Import every trajectory file under ``paths`` into the folder ``out``.

    ``world`` (a manifest world or a local checkout) maps paths onto real files and names the
    runs' world; without it the world is named after the repository the trajectory worked on
    and lens 4 maps only what the trajectory read. ``study`` names the runs' study
    (default ``imported``), ``task`` their task family, ``model`` the model when the source does
    not record it, ``root`` the folder the agent's paths start from when the source does not
    say. Observations are clipped to ``max_observation_chars`` (their full length is kept).
    ``jobs`` worker processes (default: up to 2 for 50 files or more); ``progress`` shows a bar
    (default: from :data:`PROGRESS_FROM` files). ``echo`` prints one line per skipped file.
    """
    if fmt != AUTO and fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; known: {', '.join([*FORMATS, AUTO])}")
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
                    root=root, max_observation_chars=max_observation_chars)
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
        with ProcessPoolExecutor(max_workers=jobs, initializer=_init, initargs=args) as pool:
            for results in pool.map(import_file, files, chunksize=32):
                for res in results:
                    record(res)
                bar.update(1)
    bar.close()
    return report


def open_corpora(*folders: str | Path | Sequence[str | Path], verbose: bool = True) -> Any:
    """Several corpus folders (e.g. imported runs and runs adakit launched; an argument may
    itself be a list of folders, as the notebooks' ``corpus`` parameter is) as one
    :class:`~adakit.record.Corpus`, each opened like the notebooks do (cached, a count line
    printed, paths relative to the project root); run ids are unique because imported ids
    carry their source's sha256."""
    from adakit.record import open_corpus

    flat = [f for one in folders for f in ([one] if isinstance(one, str | Path) else one)]
    given = [config.resolve(f) for f in flat if str(f)]
    data = open_corpus(given if len(given) != 1 else given[0], verbose=verbose)
    if verbose and len(given) > 1:
        counts = data.runs["agent"].value_counts()
        print("runs by agent: " + ", ".join(f"{a} {n}" for a, n in counts.items()))
    return data


def source_table(runs: Any) -> Any:
    """Where each run came from, read from the run files' headers: run_id, agent, format,
    file, sha256, timing (``launched`` for runs adakit made)."""
    import pandas as pd

    from adakit.record import read_run

    rows = []
    for run_id, path in zip(runs["run_id"], runs["path"], strict=True):
        src = read_run(path).header.source if Path(str(path)).exists() else None
        rows.append({"run_id": run_id, "agent": src.agent if src else "ada",
                     "format": src.format if src else "adakit", "file": src.file if src else "",
                     "sha256": src.sha256 if src else "",
                     "timing": src.timing if src else "launched"})
    return pd.DataFrame(rows)


def mapping_counts(runs: Any) -> Any:
    """How often each mapping rule fired, per agent: agent, canonical, rule, steps, share."""
    import pandas as pd

    from adakit.record import read_run, run_agent

    counts: Counter[tuple[str, str, str]] = Counter()
    for path in runs["path"]:
        if not Path(str(path)).exists():
            continue
        rf = read_run(path)
        agent = run_agent(rf.header)
        for t in rf.turns:
            counts[(agent, t.metrics.tool or "-", t.metrics.mapped_by or "adakit tool")] += 1
    df = pd.DataFrame([(*k, v) for k, v in counts.items()],
                      columns=["agent", "canonical", "rule", "steps"])
    if df.empty:
        return df.assign(share=[])
    df["share"] = df["steps"] / df.groupby("agent")["steps"].transform("sum") * 100.0
    return df.sort_values(["agent", "steps"], ascending=[True, False]).reset_index(drop=True)


# --------------------------------------------------------------------------- command line


def _cmd_import(args: argparse.Namespace) -> int:
    try:
        report = import_paths(
            args.format, args.paths, args.out, world=args.world, study=args.study,
            task=args.task, model=args.model, root=args.root,
            max_observation_chars=args.max_observation_chars, jobs=args.jobs,
            progress=False if args.no_progress else None)
    except ValueError as exc:
        print(f"adakit import: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    return 1 if report.bad else 0


def register_cli(sub: Any) -> None:
    """``adakit import FORMAT PATH... --out DIR``: other agents' trajectories as runs."""
    p = sub.add_parser(
        "import", help="import other agents' trajectories (SWE-agent, mini-swe-agent, "
        "OpenHands, generic JSONL) as runs the lenses read")
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
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_import)
