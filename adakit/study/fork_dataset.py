"""A fork study's forks, packed for shipping: their recorded replies and a manifest.

The fork files stay where the forks were made (``<corpus>.forks/<parent>__atK/``, where the
explorer and notebook 21 find them); the pack is a folder beside them, named by the study's
``dataset`` key (e.g. ``data/reference/local-forks``), holding

- ``responses.jsonl``: every model reply the forks used, so ``adakit dataset restore-cache``
  puts them back in the response cache and the study replays without a model;
- ``study.yaml``: the fork study file;
- ``manifest.json``: provenance (adakit version and commit, the prompts' and tools' hashes),
  one row per finished fork (file, sha256, content digest, parent, K, change, seed, end),
  the forks the study declares that are not finished yet, the lens 3 verdicts on the forks'
  conclusions when they have been judged, and how to make them again.

The verdicts stay where ``adakit judge`` wrote them (beside the forks: ``judgments.forks/``
of a dataset's ``runs.forks/``); the manifest names that log with a digest of the verdicts
it counts (on the packed forks), how many they are and by which judges, and the judges' replies go into
``responses.jsonl`` with the forks' own (those the parent dataset already ships are left out).

:func:`check_forks` compares the fork files and the verdict log with the manifest
(``adakit dataset check``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from adakit import __version__, config
from adakit.judging.store import (
    LOG,
    judgments_dir,
    latest,
    read_log,
    shipped_dataset,
    verdict_is_current,
)
from adakit.record import RunFile, content_digest, read_run
from adakit.study import dataset
from adakit.study.dataset import (
    MANIFEST,
    DatasetError,
    _git_commit,
    _install,
    _pack_responses,
    sha256_file,
    tools_digest,
)
from adakit.study.replies import RESPONSES, recorded_replies
from adakit.study.schema import read_study_file

#: The manifest's ``format`` of a fork pack (a run dataset's is an integer).
FORK_FORMAT = "adakit-forks/1"


def _shown(p: Path) -> str:
    return str(p.relative_to(config.ROOT) if p.is_relative_to(config.ROOT) else p)


def pack_forks(study_path: str | Path, out: str | Path | None = None,
               cache: str | Path | None = None) -> dict[str, Any]:
    """Pack the finished forks of a fork study into ``out`` (default: the study's ``dataset``
    key), replacing an earlier pack there; returns the manifest, with ``folder`` (where it
    went) added."""
    from adakit.study.fork import study_forks
    from adakit.study.spec import load_study

    study_path = config.resolve(study_path)
    study = load_study(study_path)
    if not study.raw.get("forks"):
        raise DatasetError(f"{study_path} declares no forks")
    target = out or study.raw.get("dataset")
    if not target:
        raise DatasetError(f"{study_path} names no 'dataset' folder: pass --out")
    out = config.resolve(target)
    forks = study_forks(study)
    rows = []
    parsed: dict[str, RunFile] = {}
    for sf in forks:
        if sf.status != "finished":
            continue
        rf = parsed[sf.plan.run_id] = read_run(sf.plan.path)
        rows.append({
            "run_id": sf.plan.run_id, "file": _shown(sf.plan.path),
            "sha256": sha256_file(sf.plan.path), "digest": content_digest(rf),
            "parent": sf.parent.header.run_id, "at": sf.at,
            "change": {"kind": sf.change.kind, "value": sf.change.value},
            "seed": sf.plan.seed, "model": rf.header.model.name,
            "reason": rf.end.reason if rf.end else None, "turns": len(rf.turns),
            "turn_s": round(sum(t.ended_at - t.started_at for t in rf.turns[sf.at:]), 1),
        })
    if not rows:
        raise DatasetError(f"no fork of {study_path} is finished yet: launch it first")
    models = {r["model"] for r in rows if not r["model"].startswith("baseline-")}
    verdicts = fork_verdicts(rows, parsed)
    judges = {j for v in verdicts for j in v["judges"]}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".forks-", dir=out.parent))
    try:
        n_entries = _pack_responses(cache, rows, models | judges, tmp,
                                    skip=_parent_reply_keys(rows))
        shutil.copyfile(study_path, tmp / "study.yaml")
        commit, dirty = _git_commit()
        first = parsed[rows[0]["run_id"]].header
        manifest = {
            "format": FORK_FORMAT, "name": study.name,
            "description": study.raw.get("description", ""),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "adakit_version": __version__, "adakit_commit": commit, "adakit_dirty": dirty,
            "scaffold": {"prompts_sha256": first.scaffold.get("prompts_sha256"),
                         "tools_sha256": tools_digest()},
            "models": sorted(models),
            "forks": rows,
            "remaining": [sf.plan.run_id for sf in forks if sf.status != "finished"],
            "judgments": verdicts,
            "counts": {"forks": len(rows), "declared": len(forks), "responses": n_entries,
                       "fork_sets": len({(r["parent"], r["at"]) for r in rows}),
                       "verdicts": sum(v["verdicts"] for v in verdicts),
                       "judged_forks": sum(v["judged_forks"] for v in verdicts)},
            "files": {name: sha256_file(tmp / name) for name in (RESPONSES, "study.yaml")},
            "wall_time_s": {"turns_after_k": round(sum(r["turn_s"] for r in rows), 1)},
            "regenerate": " && ".join(
                [f".venv/bin/adakit launch {_shown(study_path)}",
                 *(v["command"] for v in verdicts),
                 f".venv/bin/adakit dataset build-forks {_shown(study_path)}"]),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        _install(tmp, out)
        manifest["folder"] = _shown(out)  # for the caller; not written
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def _fork_roots(rows: list[dict[str, Any]]) -> dict[Path, set[str]]:
    """The folders of forks the rows come from (``<corpus>.forks``), with their forks' run ids."""
    roots: dict[Path, set[str]] = {}
    for r in rows:
        roots.setdefault(config.resolve(r["file"]).parent.parent, set()).add(r["run_id"])
    return roots


def _current_verdicts(log: Path, forks: dict[str, RunFile]) -> list[dict[str, Any]]:
    """The verdicts of a log that count for ``forks``: the latest per item and judge, on one
    of those forks, given after it ended."""
    return [row for row in latest(read_log(log))
            if row.get("run_id") in forks and verdict_is_current(row, forks[row["run_id"]])]


def rows_digest(verdicts: list[dict[str, Any]]) -> str:
    """sha256 of verdict rows, independent of their order in the log."""
    lines = sorted(json.dumps(row, sort_keys=True, default=str) for row in verdicts)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def fork_verdicts(rows: list[dict[str, Any]], parsed: dict[str, RunFile]) -> list[dict[str, Any]]:
    """Per verdict log that judged packed forks (``rows``; ``parsed``: their run files): the
    log (its file, and the sha256 of the verdicts counted: :func:`rows_digest`), how many current
    verdicts it holds on those forks and on how many forks, by which judges and families,
    with which reply limit (as the rows record it; for verdicts that predate that record, the
    parent dataset's study's), and the judge command that made them. Raises DatasetError for
    a judge the model registry does not know."""
    from adakit.llm.models import ModelError, get_model

    by_log: dict[Path, tuple[list[Path], set[str]]] = {}
    for root, ids in sorted(_fork_roots(rows).items()):
        roots, forks = by_log.setdefault(judgments_dir(root) / LOG, ([], set()))
        roots.append(root)
        forks |= ids
    out = []
    for log, (roots, ids) in by_log.items():
        if not log.is_file():
            continue
        current = _current_verdicts(log, {i: parsed[i] for i in ids})
        if not current:
            continue
        judges = sorted({str(row.get("judge")) for row in current})
        for judge in judges:
            try:
                get_model(judge)
            except ModelError:
                raise DatasetError(f"{_shown(log)}: verdicts by {judge!r}, which the model "
                                   "registry does not know; its replies cannot be packed") from None
        families = sorted({str(row.get("family")) for row in current})
        limits = {row["max_tokens"] for row in current if isinstance(row.get("max_tokens"), int)}
        if len(limits) > 1:
            raise DatasetError(f"{_shown(log)}: verdicts asked with different reply limits "
                               f"({sorted(limits)}); judge the forks again with one")
        limit = next(iter(limits)) if limits else _parent_judge_tokens(roots[0])
        out.append({
            "file": _shown(log), "rows_sha256": rows_digest(current),
            "verdicts": len(current), "judged_forks": len({row["run_id"] for row in current}),
            "judges": judges, "families": families, "max_tokens": limit,
            "command": " && ".join(
                f".venv/bin/adakit judge {_shown(root)} --families {' '.join(families)} "
                f"--judges {' '.join(judges)}" + (f" --max-tokens {limit}" if limit else "")
                for root in roots),
        })
    return out


def _parent_judge_tokens(root: Path) -> int | None:
    """The judges' reply limit of the study whose dataset the forks under ``root`` come from
    (``<dataset>/study.yaml``, its ``judge: max_tokens``): the forks are judged as their
    parents were. None when the forks are not in a dataset or its study sets none."""
    ds = _forks_dataset(root)
    if ds is None or not (ds / "study.yaml").is_file():
        return None
    limit = (read_study_file(ds / "study.yaml").get("judge") or {}).get("max_tokens")
    return limit if isinstance(limit, int) else None


def _forks_dataset(root: Path) -> Path | None:
    """The shipped dataset whose ``runs.forks`` folder ``root`` is (None for any other)."""
    return shipped_dataset(root) if root.name.endswith(".forks") else None


def _parent_reply_keys(rows: list[dict[str, Any]]) -> set[str]:
    """The reply keys the datasets the forks' parents come from already ship intact (forks in
    ``<dataset>/runs.forks`` beside the dataset's ``responses.jsonl``; a damaged line there
    does not count as shipped)."""
    keys: set[str] = set()
    for root in _fork_roots(rows):
        ds = _forks_dataset(root)
        if ds is not None and (ds / RESPONSES).is_file():
            keys |= {key for _, _, key, _, why in recorded_replies(ds / RESPONSES)
                     if key and why is None}
    return keys


def check_forks(path: str | Path) -> list[str]:
    """What of a fork pack does not match its manifest (empty when everything does)."""
    folder = config.resolve(path)
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    problems = []
    parsed: dict[str, RunFile] = {}
    for row in manifest["forks"]:
        p = config.resolve(row["file"])
        if not p.exists():
            problems.append(f"{row['file']}: listed in the manifest but absent")
            continue
        if sha256_file(p) != row["sha256"]:
            problems.append(f"{row['file']}: sha256 differs from the manifest (edited after recording?)")
            continue
        rf = parsed[row["run_id"]] = read_run(p)  # read once: its digest, then its verdicts
        if content_digest(rf) != row["digest"]:
            problems.append(f"{row['file']}: content digest differs from the manifest")
    for v in manifest.get("judgments", []):
        p = config.resolve(v["file"])
        if not p.exists():
            problems.append(f"{v['file']}: the forks' verdicts are listed in the manifest but absent")
        elif rows_digest(_current_verdicts(p, parsed)) != v["rows_sha256"]:
            problems.append(f"{v['file']}: the verdicts on the packed forks differ from the "
                            "manifest (judged again since the pack? build the pack again)")
    for name, digest in manifest.get("files", {}).items():
        if not (folder / name).exists():
            problems.append(f"{name}: listed in the manifest but absent")
        elif sha256_file(folder / name) != digest:
            problems.append(f"{name}: sha256 differs from the manifest")
    return problems


def _check(path: str) -> tuple[list[str], str]:
    problems = check_forks(path)
    n = len(json.loads((config.resolve(path) / MANIFEST).read_text(encoding="utf-8"))["forks"])
    return problems, f"{n} forks"


dataset.OTHER_CHECKS[FORK_FORMAT] = _check


def _cmd_build_forks(args: argparse.Namespace) -> int:
    try:
        m = pack_forks(args.study, args.out, args.cache)
    except (DatasetError, FileNotFoundError, ValueError) as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    c = m["counts"]
    print(f"forks {m['name']}: {c['forks']} of {c['declared']} finished, in {c['fork_sets']} "
          f"fork set(s), {c['responses']} recorded replies, {c['verdicts']} verdicts on "
          f"{c['judged_forks']} forks -> {m['folder']}")
    return 0


def register_cli(sub: Any) -> None:
    """``adakit dataset build-forks`` (beside the actions :mod:`adakit.study.dataset` adds)."""
    if dataset.ACTIONS is None:
        return
    f = dataset.ACTIONS.add_parser("build-forks", help="pack a fork study's finished forks' replies and manifest")
    f.add_argument("study", help="the fork study file (e.g. studies/local-forks.yaml)")
    f.add_argument("--out", help="the pack folder (default: the study's 'dataset')")
    f.add_argument("--cache", help="the response cache root (default: the project's)")
    f.set_defaults(func=_cmd_build_forks)
