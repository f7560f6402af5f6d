"""Shipped datasets of recorded runs: build one from a study, check it, replay it.

A dataset is a folder (e.g. ``data/reference/local-v4``) holding

- ``runs/``: the run files, as the launcher wrote them;
- ``judgments/judgments.jsonl``: the lens-3 verdicts on those runs;
- ``responses.jsonl``: every model reply the runs and verdicts used, one ``{key, completion,
  scope}`` line each (``scope``: the run it answered; none for a verdict or a coach's reply),
  so the whole dataset replays without a model (:func:`restore_cache`), and a later build
  from a cache it was restored into packs each reply again with its run;
- ``study.yaml``: the study file it was launched from;
- ``manifest.json``: provenance (adakit version and commit, scaffold and tool hashes, models
  with their weights' sha256, worlds, seeds, wall times, how to regenerate it) and the sha256
  of every file above.

Datasets are made by adakit itself (:func:`build`); recorded runs are never edited by hand.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from adakit import __version__, config
from adakit.record import (
    RunFile,
    call_repeats_of,
    closed_run,
    content_digest,
    iter_run_files,
    read_run,
)
from adakit.study.replies import RESPONSES, recorded_replies, restore_replies

MANIFEST = "manifest.json"
FORMAT = 1
#: Source files whose behaviour shapes what a model sees besides the prompts.
TOOL_SOURCES = tuple(f"apparatus/{name}" for name in (
    "tools.py", "code_index.py", "world.py", "protocol.py", "agent.py", "coach.py"))


class DatasetError(RuntimeError):
    """A dataset that is incomplete or does not match its manifest."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def tools_digest() -> str:
    """sha256 of the source files that compute observations and drive the loop."""
    digest = hashlib.sha256()
    for name in TOOL_SOURCES:
        digest.update(name.encode() + b"\0" + (config.PACKAGE_DIR / name).read_bytes() + b"\0")
    return digest.hexdigest()


def _git_commit() -> tuple[str | None, bool | None]:
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=config.ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "adakit"], cwd=config.ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None, None
    return head, bool(dirty)


# --------------------------------------------------------------------------- build


def _cache_entries(folder: Path, scopes: set[str], models: set[str],
                   name: str | None = None) -> list[dict[str, Any]]:
    """The cache entries a dataset needs: those scoped to one of its runs, unscoped ones (coach
    and judge calls) of the models it names, and, of the entries restored from a dataset, those
    restored from this one (``name``) whose scope was never recorded (packed before packs kept
    it). Each comes with its scope, so a restore and a new build keep it with its run."""
    out = []
    for path in sorted(folder.glob("*/*.json")):
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        request = entry.get("request") or {}
        scope = request.get("scope")
        endpoint = str(request.get("endpoint", ""))
        ours = name is not None and request.get("restored_from") == name
        if scope in scopes or (scope is None and (endpoint.removeprefix("local:") in models or ours)):
            out.append({"key": entry["key"], "completion": entry["completion"],
                        **({"scope": scope} if scope is not None else {})})
    return out


def build(
    runs_dir: str | Path,
    out: str | Path,
    *,
    study: str | Path | None = None,
    judgments: str | Path | None = None,
    cache: str | Path | None = None,
    name: str | None = None,
    description: str = "",
    leave_unfinished: bool = False,
) -> dict[str, Any]:
    """Pack a finished corpus (and its verdicts and cached replies) into a dataset folder.

    A corpus with unfinished runs, or fewer runs than its study declares, is refused unless
    ``leave_unfinished``: then only finished runs are packed, and the manifest lists the
    started ones under ``unfinished`` and every run of the study it lacks under ``remaining``
    (a launch that records them and a new build make the next version). A run recorded under
    settings the study no longer has (:func:`adakit.study.retry.changed_settings`) is never packed:
    it is listed under ``outdated`` (and ``remaining``), and refused without
    ``leave_unfinished``."""
    from adakit.judging.store import judgments_dir

    runs_dir = config.resolve(runs_dir)
    out = config.resolve(out)
    study_path = config.resolve(study) if study else runs_dir / "study.yaml"
    packing = _packing(runs_dir, study_path, leave_unfinished)
    tmp = Path(tempfile.mkdtemp(prefix=".dataset-", dir=out.parent if out.parent.exists() else None))
    try:
        rows = _pack_runs(packing.parsed, tmp)
        judged = config.resolve(judgments) if judgments else judgments_dir(runs_dir)
        verdicts = judged / "judgments.jsonl" if judged.is_dir() else judged
        counts = _pack_verdicts(verdicts, packing.parsed, tmp)
        study_doc = _pack_study(study_path, tmp)
        registry_models = _registry_models(rows, counts.judge_models, study_doc)
        n_entries = _pack_responses(cache, rows, registry_models, tmp, name or out.name)
        manifest = _manifest(
            name=name or out.name, description=description or study_doc.get("description", ""),
            study_doc=study_doc, packing=packing, rows=rows, registry_models=registry_models,
            files=_file_digests(tmp),
            counts={"runs": len(rows), "verdicts": counts.verdicts, "responses": n_entries,
                    "declared": len(packing.declared), "verdicts_left_out": counts.left_out},
            regenerate=_regenerate(study_doc, runs_dir, out),
        )
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n",
                                    encoding="utf-8")
        _install(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return manifest


@dataclass
class _Packing:
    """Which runs of a corpus a dataset packs (finished, under the study's settings) and
    which of the study's runs it lacks."""

    parsed: list[RunFile]
    declared: list[str]
    unfinished: list[str]
    outdated: list[str]
    remaining: list[str]


def _packing(runs_dir: Path, study_path: Path, leave_unfinished: bool) -> _Packing:
    """The runs to pack; raises DatasetError for a corpus that cannot be packed (unfinished,
    outdated or incomplete runs are refused unless ``leave_unfinished``)."""
    files = [p for p in iter_run_files(runs_dir) if p.name != "study.yaml"]
    if not files:
        raise DatasetError(f"no run files in {runs_dir}")
    parsed = [read_run(p) for p in files]
    unfinished = sorted(rf.header.run_id for rf in parsed if not rf.finished)
    if unfinished and not leave_unfinished:
        raise DatasetError(
            f"{len(unfinished)} runs are unfinished (e.g. {unfinished[0]}): finish the launch "
            "first, or pass --leave-unfinished to pack only the finished ones"
        )
    parsed = [rf for rf in parsed if rf.finished]
    if not parsed:
        raise DatasetError(f"no finished run in {runs_dir}")
    declared = declared_runs(study_path)
    outdated = outdated_runs(study_path, parsed)
    if outdated and not leave_unfinished:
        raise DatasetError(
            f"{len(outdated)} runs were recorded under settings the study no longer has (e.g. "
            f"{outdated[0]}): launch the study again to re-run them, or pass --leave-unfinished "
            "to pack only the runs that match it"
        )
    parsed = [rf for rf in parsed if rf.header.run_id not in set(outdated)]
    if not parsed:
        raise DatasetError(f"no run in {runs_dir} matches the study's settings")
    remaining = [r for r in declared if r not in {rf.header.run_id for rf in parsed}]
    if remaining and not leave_unfinished:
        raise DatasetError(
            f"{len(remaining)} of the study's {len(declared)} runs are not finished (e.g. "
            f"{remaining[0]}): finish the launch first, or pass --leave-unfinished to pack "
            "only the finished ones"
        )
    return _Packing(parsed, declared, unfinished, outdated, remaining)


def _pack_runs(parsed: list[RunFile], tmp: Path) -> list[dict[str, Any]]:
    """Copy the run files into ``tmp/runs`` (by run id); their manifest rows."""
    (tmp / "runs").mkdir()
    rows = []
    for rf in sorted(parsed, key=lambda r: r.header.run_id):
        target = tmp / "runs" / f"{rf.header.run_id}.jsonl"
        shutil.copyfile(rf.path, target)
        turns = rf.turns
        coach_s = sum(float((t.coach or {}).get("latency_s") or 0.0) for t in turns)
        rows.append({
            "run_id": rf.header.run_id, "file": f"runs/{target.name}",
            "sha256": sha256_file(target), "model": rf.header.model.name,
            "world": rf.header.world.name, "task": rf.header.task.family,
            "condition": rf.header.condition.name, "repeat": rf.header.repeat,
            "seed": rf.header.seed, "reason": rf.end.reason if rf.end else None,
            "turns": len(turns),
            "wall_s": round((rf.end.ended_at if rf.end else 0) - rf.header.started_at, 1),
            "turn_s": round(sum(t.ended_at - t.started_at for t in turns), 1),
            "coach_s": round(coach_s, 1),
            "digest": content_digest(rf),
        })
    return rows


@dataclass
class _VerdictCounts:
    """What packing the verdicts kept: how many, how many were left out, and the judges."""

    verdicts: int = 0
    left_out: int = 0
    judge_models: set[str] = field(default_factory=set)


def _pack_verdicts(verdicts: Path, parsed: list[RunFile], tmp: Path) -> _VerdictCounts:
    """Copy into ``tmp/judgments`` only the verdicts on the packed recordings: not those on
    runs left out, nor on an earlier recording of a run that was recorded again since."""
    counts = _VerdictCounts()
    if not verdicts.exists():
        return counts
    from adakit.judging.store import read_log, verdict_is_current, write_log

    packed = {rf.header.run_id: rf for rf in parsed}
    (tmp / "judgments").mkdir()
    kept = []
    for row in read_log(verdicts):
        rf = packed.get(row.get("run_id", ""))
        if rf is None or not verdict_is_current(row, rf):
            counts.left_out += 1
            continue
        kept.append(row)
        counts.judge_models.add(row.get("judge", ""))
    counts.verdicts = write_log(tmp / "judgments" / "judgments.jsonl", kept)
    return counts


def _pack_study(study_path: Path, tmp: Path) -> dict[str, Any]:
    """Copy the study file (when there is one); its content."""
    if not study_path.exists():
        return {}
    study_doc = yaml.safe_load(study_path.read_text(encoding="utf-8")) or {}
    shutil.copyfile(study_path, tmp / "study.yaml")
    return study_doc


def _registry_models(rows: list[dict[str, Any]], judge_models: set[str],
                     study_doc: dict[str, Any]) -> set[str]:
    """The registry models the dataset used: the runs', the judges', the coach and hint
    models (scripted baselines are not in the registry)."""
    used = {r["model"] for r in rows} | judge_models
    used |= {study_doc[key] for key in ("coach_model", "hint_model") if study_doc.get(key)}
    return {m for m in used if m and not m.startswith("baseline-")}


def _pack_responses(cache: str | Path | None, rows: list[dict[str, Any]],
                    registry_models: set[str], tmp: Path, name: str | None = None,
                    skip: Collection[str] = ()) -> int:
    """Write ``tmp/responses.jsonl``, the cached replies the dataset (named ``name``) needs
    (leaving out those whose key is in ``skip``: replies another pack already holds); how
    many."""
    from adakit.llm.models import get_model

    model_ids = {get_model(m).model_id for m in registry_models}
    entries = [e for e in _cache_entries(
        (config.resolve(cache) if cache else config.cache_dir()) / "responses",
        {r["run_id"] for r in rows}, model_ids, name,
    ) if e["key"] not in skip]
    with open(tmp / "responses.jsonl", "w", encoding="utf-8") as fh:
        for entry in entries:
            fh.write(json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n")
    return len(entries)


def _regenerate(study_doc: dict[str, Any], runs_dir: Path, out: Path) -> str:
    """The commands that make the dataset again."""
    def shown(p: Path) -> Path:
        return p.relative_to(config.ROOT) if p.is_relative_to(config.ROOT) else p

    return (f"make study PROFILE={study_doc.get('name', 'local')} && "
            f".venv/bin/adakit dataset build {shown(runs_dir)} --out {shown(out)}")


def _file_digests(tmp: Path) -> dict[str, str | None]:
    """The sha256 of the packed verdicts, replies and study file (None for one not packed)."""
    return {rel: sha256_file(tmp / rel) if (tmp / rel).exists() else None
            for rel in ("judgments/judgments.jsonl", "responses.jsonl", "study.yaml")}


def _install(tmp: Path, out: Path) -> None:
    """Put the packed folder in place of ``out`` (an earlier version there is replaced); the
    forks made from the earlier version's runs (``runs.forks``, not part of a dataset) and
    the verdicts on them (``judgments.forks``) move into the new one, where a fork whose
    parent changed is set aside and made again."""
    if out.exists():
        for kept in ("runs.forks", "judgments.forks"):
            if (out / kept).is_dir():
                os.replace(out / kept, tmp / kept)
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, out)


#: The behaviour a manifest states per model (``behaviour``), each a share of runs or calls:
#: runs that finalized a conclusion of their own accord; runs whose conclusion came on a closing
#: turn; runs ended stuck (``malformed_limit``); calls that exactly repeat an earlier call of
#: the same run (tool and parameters).
STATED_BEHAVIOUR = ("own_conclusions", "closing_conclusions", "stuck_endings", "repeat_rate")
#: how far a recomputed share may lie from the stated one (the manifest rounds to 4 places)
BEHAVIOUR_TOLERANCE = 1e-4


def stated_behaviour(parsed: Iterable[RunFile]) -> dict[str, dict[str, float | int]]:
    """Per model: its runs, calls and the shares of :data:`STATED_BEHAVIOUR`, computed from
    the run records alone (the lenses compute them apart, from the loaded corpus)."""
    tallies: dict[str, Counter[str]] = {}
    for rf in parsed:
        c = tallies.setdefault(rf.header.model.name, Counter())
        reason = rf.end.reason if rf.end is not None else None
        c["runs"] += 1
        c["own"] += reason == "finalize"
        c["closing"] += closed_run(rf) and bool(rf.end is not None and rf.end.conclusion)
        c["stuck"] += reason == "malformed_limit"
        repeats = [repeat for _, repeat in call_repeats_of(rf.turns)]
        c["calls"] += len(repeats)
        c["repeats"] += sum(repeats)
    out: dict[str, dict[str, float | int]] = {}
    for model, c in sorted(tallies.items()):
        out[model] = {"runs": c["runs"], "calls": c["calls"],
                      "own_conclusions": round(c["own"] / c["runs"], 4),
                      "closing_conclusions": round(c["closing"] / c["runs"], 4),
                      "stuck_endings": round(c["stuck"] / c["runs"], 4),
                      "repeat_rate": round(c["repeats"] / c["calls"], 4) if c["calls"] else 0.0}
    return out


def behaviour_problems(stated: dict[str, Any], parsed: Iterable[RunFile]) -> list[str]:
    """Where the behaviour a manifest states differs from what its runs show."""
    now = stated_behaviour(parsed)
    problems = [f"behaviour: {m} stated but has no runs" for m in sorted(set(stated) - set(now))]
    problems += [f"behaviour: {m} has runs but none stated" for m in sorted(set(now) - set(stated))]
    for model in sorted(set(stated) & set(now)):
        for key in ("runs", "calls", *STATED_BEHAVIOUR):
            said, got = stated[model].get(key), now[model][key]
            if said is None or abs(float(said) - float(got)) > BEHAVIOUR_TOLERANCE:
                problems.append(f"behaviour: {model} {key} stated {said}, the runs show {got}")
    return problems


def _manifest(
    *, name: str, description: str, study_doc: dict[str, Any], packing: _Packing,
    rows: list[dict[str, Any]], registry_models: set[str], files: dict[str, str | None],
    counts: dict[str, int], regenerate: str,
) -> dict[str, Any]:
    """The dataset's manifest: provenance, the packed runs, the files' sha256 and counts."""
    from adakit.llm.models import get_model

    parsed = packing.parsed
    worlds = {}
    for rf in parsed:
        w = rf.header.world
        worlds[w.name] = {"version": w.version, "source": w.source, "sha256": w.sha256}
    commit, dirty = _git_commit()
    first = parsed[0].header
    return {
        "format": FORMAT,
        "name": name,
        "description": description,
        # what changed since the previous version, and why (the study file's `changes`)
        "changes": study_doc.get("changes", ""),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "adakit_version": __version__,
        "adakit_commit": commit,
        "adakit_dirty": dirty,
        "schema_version": first.schema_version,
        "scaffold": {
            "prompts_sha256": first.scaffold.get("prompts_sha256"),
            "tools_sha256": tools_digest(),
            "settings": {k: v for k, v in first.scaffold.items() if k != "prompts_sha256"},
        },
        "models": {m: get_model(m).model_info().model_dump(mode="json")
                   for m in sorted(registry_models)},
        "judges": study_doc.get("judge", {}),
        "worlds": worlds,
        "runs": rows,
        "files": files,
        "counts": counts,
        # what the runs show, per model (stated_behaviour; `adakit dataset check` recomputes it)
        "behaviour": stated_behaviour(parsed),
        "unfinished": packing.unfinished,
        "outdated": packing.outdated,
        # the study's runs this version does not hold (started or not): a launch that
        # records them and a new build make the next version
        "remaining": packing.remaining,
        "wall_time_s": {
            "runs": round(sum(r["wall_s"] for r in rows), 1),
            "turns": round(sum(r["turn_s"] for r in rows), 1),
        },
        "regenerate": regenerate,
    }


def outdated_runs(study_path: Path, parsed: list[RunFile]) -> list[str]:
    """The ids of runs recorded under settings other than the study's (none without the file)."""
    if not study_path.exists():
        return []
    from adakit.study.retry import changed_settings
    from adakit.study.spec import load_study

    specs = {s.run_id: s for s in load_study(study_path).specs}
    return sorted(rf.header.run_id for rf in parsed
                  if rf.header.run_id in specs and changed_settings(rf.header, specs[rf.header.run_id]))


def declared_runs(study_path: Path) -> list[str]:
    """The run ids a study file declares, in launch order (none without the file)."""
    if not study_path.exists():
        return []
    from adakit.study.spec import load_study

    try:
        return [s.run_id for s in load_study(study_path).specs]
    except (ValueError, KeyError) as exc:
        raise DatasetError(f"{study_path}: {exc}") from None


# --------------------------------------------------------------------------- read and check


@dataclass
class Dataset:
    """A dataset folder and its manifest."""

    path: Path
    manifest: dict[str, Any]

    @property
    def runs_dir(self) -> Path:
        return self.path / "runs"

    @property
    def judgments_dir(self) -> Path:
        return self.path / "judgments"


def open_dataset(path: str | Path) -> Dataset:
    """The dataset at ``path`` (a dataset folder or its ``runs/``)."""
    p = config.resolve(path)
    if p.name == "runs" and (p.parent / MANIFEST).exists():
        p = p.parent
    try:
        manifest = json.loads((p / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DatasetError(f"no dataset at {p} (no {MANIFEST})") from None
    except ValueError as exc:
        raise DatasetError(f"{p / MANIFEST} is not JSON: {exc}") from None
    return Dataset(p, manifest)


def check(path: str | Path) -> list[str]:
    """What does not match the manifest (empty when everything does)."""
    ds = open_dataset(path)
    problems = []
    listed = {r["file"]: r for r in ds.manifest.get("runs", [])}
    on_disk = {f"runs/{p.name}" for p in ds.runs_dir.glob("*.jsonl")}
    for missing in sorted(set(listed) - on_disk):
        problems.append(f"{missing}: listed in the manifest but absent")
    for extra in sorted(on_disk - set(listed)):
        problems.append(f"{extra}: on disk but not in the manifest")
    packed = []
    for rel, row in sorted(listed.items()):
        p = ds.path / rel
        if not p.exists():
            continue
        same = sha256_file(p) == row["sha256"]
        if not same:
            problems.append(f"{rel}: sha256 differs from the manifest (edited after recording?)")
        try:
            rf = read_run(p)
        except ValueError as exc:  # an edited file may no longer be a run file at all
            problems.append(f"{rel}: not readable as a run file ({exc})")
            continue
        packed.append(rf)
        if same and content_digest(rf) != row["digest"]:
            problems.append(f"{rel}: content digest differs from the manifest")
    if "behaviour" in ds.manifest:  # manifests built before it was stated say nothing
        problems += behaviour_problems(ds.manifest["behaviour"], packed)
    for rel, digest in (ds.manifest.get("files") or {}).items():
        if digest is None:
            continue
        p = ds.path / rel
        if not p.exists():
            problems.append(f"{rel}: absent")
        elif sha256_file(p) != digest:
            problems.append(f"{rel}: sha256 differs from the manifest")
    if (ds.path / "responses.jsonl").exists():
        problems += [f"responses.jsonl:{i}: damaged cache entry {key or '(no key)'} ({why})"
                     for i, _, key, _, why in recorded_replies(ds.path / "responses.jsonl") if why]
    return problems


def restore_cache(path: str | Path, folder: str | Path | None = None) -> int:
    """Write the dataset's recorded replies into a response cache folder (default: the
    project's); returns how many entries were written (:func:`adakit.study.replies.
    restore_replies`: existing entries are kept, damaged lines set aside)."""
    ds = open_dataset(path)
    return restore_replies(ds.path / RESPONSES, folder, ds.manifest.get("name"))


def replay(
    path: str | Path, run_ids: Iterable[str] | None = None, out: str | Path | None = None
) -> dict[str, str]:
    """Launch the dataset's runs again from its recorded replies alone (cache mode ``replay``:
    a request the recording never made raises) and compare each run's content digest with the
    manifest; returns run_id -> "same" | "differs" | the error."""
    from adakit.study.launch import run_one
    from adakit.study.retry import legacy_settings
    from adakit.study.spec import load_study

    ds = open_dataset(path)
    wanted = set(run_ids) if run_ids is not None else {r["run_id"] for r in ds.manifest["runs"]}
    digests = {r["run_id"]: r["digest"] for r in ds.manifest["runs"]}
    results: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="adakit-replay-") as scratch:
        cache_root = Path(scratch) / "cache"
        restore_cache(ds.path, cache_root)
        output = Path(out) if out else Path(scratch) / "runs"
        old = os.environ.get("ADAKIT_CACHE")
        os.environ["ADAKIT_CACHE"] = str(cache_root)
        try:
            base: dict[str, Any] = {"output": str(output), "cache_mode": "replay"}
            # a setting a run's header predates takes the value it had then: one study per set
            groups: dict[tuple[tuple[str, Any], ...], set[str]] = {}
            for run_id in wanted:
                try:
                    legacy = legacy_settings(read_run(ds.runs_dir / f"{run_id}.jsonl").header)
                except (OSError, ValueError):  # not in the dataset: said below
                    legacy = {}
                groups.setdefault(tuple(sorted(legacy.items())), set()).add(run_id)
            todo = []
            for legacy, ids in groups.items():
                study = load_study(ds.path / "study.yaml", {**base, **dict(legacy)})
                todo += [(spec, study) for spec in study.specs if spec.run_id in ids]
            for spec, study in todo:
                try:
                    run_one(study, spec)
                    got = content_digest(read_run(output / f"{spec.run_id}.jsonl"))
                    results[spec.run_id] = "same" if got == digests.get(spec.run_id) else "differs"
                except Exception as exc:  # a diverging replay says why, per run
                    results[spec.run_id] = f"{type(exc).__name__}: {str(exc)[:400]}"
        finally:
            if old is None:
                os.environ.pop("ADAKIT_CACHE", None)
            else:
                os.environ["ADAKIT_CACHE"] = old
    missing = wanted - set(results)
    for run_id in sorted(missing):
        results[run_id] = "not in the dataset's study file"
    return results


# --------------------------------------------------------------------------- CLI


def _cmd_build(args: argparse.Namespace) -> int:
    try:
        manifest = build(args.runs, args.out, study=args.study, judgments=args.judgments,
                         cache=args.cache, name=args.name, leave_unfinished=args.leave_unfinished)
    except DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    c = manifest["counts"]
    print(f"dataset {manifest['name']}: {c['runs']} runs, {c['verdicts']} verdicts, "
          f"{c['responses']} recorded replies -> {args.out}")
    if manifest["remaining"]:
        started = set(manifest["unfinished"])
        print(f"left out: {len(manifest['remaining'])} of the study's {c['declared']} runs "
              f"({len(started)} started, not finished: {', '.join(sorted(started)) or 'none'}; "
              f"{len(manifest['outdated'])} recorded under other settings)")
    return 0


#: Checks of packs that are not run datasets, by their manifest's ``format`` (a fork pack's
#: is added by :mod:`adakit.study.fork_dataset`): path -> (problems, what matched).
OTHER_CHECKS: dict[Any, Callable[[str], tuple[list[str], str]]] = {}
#: The ``adakit dataset`` actions, for modules that add their own (set by :func:`register_cli`).
ACTIONS: Any = None


def _cmd_check(args: argparse.Namespace) -> int:
    try:
        other = OTHER_CHECKS.get(open_dataset(args.dataset).manifest.get("format"))
        problems, matched = other(args.dataset) if other else (check(args.dataset), "")
    except DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        return 1
    ds = open_dataset(args.dataset)
    if other:
        print(f"{ds.path}: {matched} match the manifest")
        return 0
    print(f"{ds.path}: {len(ds.manifest['runs'])} runs match the manifest")
    if args.replay:
        results = replay(args.dataset)
        bad = {k: v for k, v in results.items() if v != "same"}
        for run_id, outcome in sorted(bad.items()):
            print(f"replay {run_id}: {outcome}")
        print(f"replay: {len(results) - len(bad)} of {len(results)} runs reproduced exactly")
        return 1 if bad else 0
    return 0


def _cmd_restore(args: argparse.Namespace) -> int:
    n = restore_cache(args.dataset, args.cache)
    print(f"{n} recorded replies written to the response cache")
    return 0


def register_cli(sub: Any) -> None:
    """``adakit dataset build|build-forks|check|restore-cache``."""
    p = sub.add_parser("dataset", help="shipped datasets of recorded runs: build, check, replay")
    dsub = p.add_subparsers(dest="dataset_command", metavar="ACTION")
    b = dsub.add_parser("build", help="pack a finished corpus, its verdicts and replies")
    b.add_argument("runs", help="the corpus folder (e.g. data/runs/local)")
    b.add_argument("--out", required=True, help="the dataset folder (e.g. data/reference/local-v4)")
    b.add_argument("--study", help="the study file (default: the corpus's study.yaml)")
    b.add_argument("--judgments", help="the verdicts folder (default: the corpus's)")
    b.add_argument("--cache", help="the response cache root (default: the project's)")
    b.add_argument("--name", help="dataset name (default: the folder name)")
    b.add_argument("--leave-unfinished", action="store_true",
                   help="pack only the finished runs; the manifest lists the unfinished ones")
    b.set_defaults(func=_cmd_build)
    c = dsub.add_parser("check", help="verify a dataset (or a fork pack) against its manifest")
    c.add_argument("dataset")
    c.add_argument("--replay", action="store_true",
                   help="also relaunch every run from the recorded replies and compare")
    c.set_defaults(func=_cmd_check)
    r = dsub.add_parser("restore-cache", help="write a dataset's replies into the response cache")
    r.add_argument("dataset")
    r.add_argument("--cache", help="the response cache root (default: the project's)")
    r.set_defaults(func=_cmd_restore)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    global ACTIONS
    ACTIONS = dsub
