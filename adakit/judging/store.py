"""The judgments of a corpus: where they live, the log they are kept in, and the table.

Verdicts are appended one per line to ``judgments.jsonl`` (so a crash loses nothing and a
re-run resumes); the tidy ``judgments.parquet`` is rebuilt from it. In the log a later line
for the same item and judge replaces an earlier one (:func:`latest`), wherever the log is
read. The table has one row per verdict, the columns :data:`JUDGMENT_COLUMNS`; ``turn`` is a
float, NaN for a conclusion item. A table counts a verdict only when it is valid, labelled,
not "unclear" and on its family's scale (:func:`clean_judgments`).
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from adakit import config
from adakit.judging.families import FAMILIES, SCALES, UNCLEAR
from adakit.record import RunFile

#: Columns of the tidy judgments table, in order.
JUDGMENT_COLUMNS = [
    "item_id", "run_id", "family", "judge", "turn", "tool", "label", "score", "rationale",
    "evidence", "valid", "cached", "latency_s",
]  # fmt: skip
#: The columns a table must have to be read as judgments.
REQUIRED_COLUMNS = ("item_id", "family", "judge", "label", "score", "valid")
#: The fields naming a verdict in the log: the latest line with the same values wins.
VERDICT_KEY = ("item_id", "judge")
LOG = "judgments.jsonl"
TABLE = "judgments.parquet"


# ============================================================================== where


def judgments_dir(corpus: str | Path) -> Path:
    """Where the judgments of a corpus live.

    A shipped dataset (a folder with ``manifest.json``, its runs in ``runs/``) carries its
    verdicts in ``judgments/`` beside the runs, and the verdicts on the forks made from its
    runs (``runs.forks/``) in ``judgments.forks/``; any other corpus keeps them in
    ``JUDGMENTS / <corpus folder name>``.
    """
    p = Path(corpus)
    if shipped_dataset(p) is not None:
        return p.parent / p.name.replace("runs", "judgments", 1)
    name = p.name if p.is_dir() or not p.suffix else p.stem
    return config.JUDGMENTS / name


def shipped_dataset(corpus: str | Path) -> Path | None:
    """The shipped dataset a corpus folder belongs to: its ``runs/`` or the ``runs.forks/``
    made from them, beside the dataset's ``manifest.json``; None for any other folder."""
    p = Path(corpus)
    if p.name in ("runs", "runs.forks") and (p.parent / "manifest.json").exists():
        return p.parent
    return None


def _in_folder(folder: Path) -> Path:
    """The judgments file of a verdicts folder: its table, or its log when only that exists."""
    table, log = folder / TABLE, folder / LOG
    return log if log.exists() and not table.exists() else table


def judgments_path_for(corpus: str | Path) -> Path:
    """Where the judgments of a corpus folder are: ``judgments.parquet`` in its verdicts
    folder (:func:`judgments_dir`: ``<JUDGMENTS>/<corpus folder name>``, or a shipped
    dataset's own ``judgments/``), else the ``judgments.jsonl`` log there when only that exists."""
    return _in_folder(judgments_dir(Path(corpus)))


# ============================================================================== the log


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """Every verdict line of a judgments log, in order (a torn last line is skipped; none
    when the log does not exist)."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    raw = path.read_text(encoding="utf-8")
    lines = raw.split("\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            if i == len(lines):  # the last write did not complete
                continue
            raise ValueError(f"{path}:{i}: not a JSON line") from None
    return rows


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row.get(k) for k in VERDICT_KEY)


def latest(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The verdict rows without those a later row of the same item and judge replaces, in
    the order of the rows kept."""
    rows = list(rows)
    last = {_key(row): i for i, row in enumerate(rows)}
    return [rows[i] for i in sorted(last.values())]


def stored_verdicts(path: str | Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The latest verdict row of every (item_id, judge) in a judgments log."""
    return {_key(row): row for row in latest(read_log(path))}


def verdict_is_current(row: dict[str, Any], rf: RunFile, prompt_sha256: str | None = None) -> bool:
    """Whether a stored verdict still judges this run file: given after the run ended (a run
    re-recorded since has a later end) and, when both digests are known, on the same prompt."""
    ended = rf.end.ended_at if rf.end else None
    if ended is not None and float(row.get("judged_at") or 0.0) < ended:
        return False
    stored = row.get("prompt_sha256")
    return not (stored and prompt_sha256 and stored != prompt_sha256)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot store {type(obj).__name__} in a judgment")


def _line(row: dict[str, Any]) -> str:
    return json.dumps(row, ensure_ascii=False, default=_json_default) + "\n"


class LogWriter:
    """Appends one verdict per line to a judgments log, flushed and fsync'ed; safe across
    threads. A torn last line (a crash mid-write) is cut off first."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._trim_torn(path)
        self._fh = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    @staticmethod
    def _trim_torn(path: Path) -> None:
        if not path.exists():
            return
        raw = path.read_bytes()
        if raw and not raw.endswith(b"\n"):
            with open(path, "r+b") as fh:
                fh.truncate(raw.rfind(b"\n") + 1)

    def write(self, row: dict[str, Any]) -> None:
        """Append ``row`` as one line, on disk when this returns."""
        line = _line(row)
        with self._lock:
            self._fh.write(line)
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


def write_log(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    """Write ``rows`` as a new judgments log at ``path`` (replacing any); how many."""
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(_line(row))
            n += 1
    return n


# ============================================================================== the table


def _floats(df: pd.DataFrame, columns: Sequence[str]) -> None:
    """Type ``columns`` of ``df`` (those it has) as floats: ``turn`` and ``score`` in every
    table, NaN for a conclusion item's turn and for a missing score."""
    for col in columns:
        if col in df.columns:
            df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)


def _key_types(df: pd.DataFrame) -> pd.DataFrame:
    """The types every judgments table is read with: ``item_id`` text, ``score`` and
    ``turn`` floats."""
    df["item_id"] = df["item_id"].astype(str)
    _floats(df, ("score", "turn"))
    return df


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    _floats(df, ("turn", "score", "latency_s"))
    df["valid"] = df["valid"].astype(bool)
    df["cached"] = df["cached"].astype(bool)
    for col in ("item_id", "run_id", "family", "judge", "tool", "label", "rationale", "evidence"):
        # let pandas infer the text dtype, so the table equals its parquet round trip
        values = [None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
                  for v in df[col].tolist()]  # fmt: skip
        df[col] = pd.Series(values, index=df.index, dtype=None)
    return df


def judgments_table(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """The tidy table of verdict rows (the latest row per item and judge, :func:`latest`)."""
    df = pd.DataFrame(latest(rows))
    if df.empty:
        return _typed(pd.DataFrame(columns=JUDGMENT_COLUMNS))
    for col in JUDGMENT_COLUMNS:
        if col not in df:
            df[col] = None
    return _typed(df[JUDGMENT_COLUMNS].reset_index(drop=True))


def write_parquet(table: pd.DataFrame, path: Path) -> Path:
    """Write the table atomically (temporary file, then rename)."""
    tmp = path.with_suffix(".parquet.tmp")
    table.to_parquet(tmp, index=False)
    os.replace(tmp, path)
    return path


def clean_judgments(judgments: pd.DataFrame) -> pd.DataFrame:
    """Check a judgments table and return a copy whose ``score`` is NaN for every verdict that
    does not count (invalid, failed, unclear), with a boolean ``counted`` column added.

    Raises ``ValueError`` for missing columns, unknown families, or counted scores off the
    family's scale.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in judgments.columns]
    if missing:
        raise ValueError(
            f"judgments table lacks column(s) {missing}; expected {JUDGMENT_COLUMNS}"
        )
    j = judgments.copy()
    unknown = sorted(set(j["family"].dropna()) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown evaluation family {unknown}; known: {list(FAMILIES)}")
    if j["family"].isna().any():
        raise ValueError(f"{int(j['family'].isna().sum())} judgment row(s) have no family")
    j["item_id"] = j["item_id"].astype(str)
    dup = j.duplicated(["item_id", "family", "judge"], keep=False)
    if dup.any():
        examples = j.loc[dup, ["item_id", "family", "judge"]].drop_duplicates().head(3)
        raise ValueError(
            f"{int(dup.sum())} rows repeat an (item, family, judge) verdict, e.g. "
            f"{examples.to_dict('records')}; keep one verdict per judge and item"
        )
    j["score"] = pd.to_numeric(j["score"], errors="coerce").astype(float)
    label = j["label"].astype("string").str.strip().str.lower()
    valid = j["valid"].fillna(False).astype(bool)
    counted = valid & label.notna() & (label != UNCLEAR) & j["score"].notna()
    j["counted"] = counted.to_numpy(dtype=bool)
    j.loc[~j["counted"], "score"] = np.nan
    for fam, grp in j[j["counted"]].groupby("family"):
        bad = grp[~grp["score"].isin(SCALES[fam])]
        if len(bad):
            examples = [f"{r.item_id}/{r.judge}: {r.score}" for r in bad.head(5).itertuples()]
            raise ValueError(
                f"{len(bad)} {fam} score(s) off the scale {SCALES[fam]}, e.g. {examples}"
            )
    return j


# ============================================================================== reading


def _source_file(source: str | Path) -> Path:
    """The file to read for ``source``: a file as given; in a folder holding verdicts, its
    table (or its log); for a corpus folder, the judgments file of that corpus."""
    p = Path(source)
    if not p.is_dir():
        return p
    if (p / TABLE).exists() or (p / LOG).exists():
        return _in_folder(p)
    return judgments_path_for(p)


def read_judgments(source: str | Path) -> pd.DataFrame:
    """The judgments table of a file (``.parquet``, ``.csv``, a ``.jsonl`` verdict log or
    ``.json``), of a folder holding verdicts, or of a corpus folder (its verdicts, as
    :func:`judgments_path_for` finds them), checked (:func:`clean_judgments`).

    A verdict log gives the tidy table (:func:`judgments_table`, the latest line per item and
    judge); any other file gives its rows as they are, apart from the types of ``item_id``,
    ``score`` and ``turn``, which every table shares.
    """
    path = _source_file(source)
    if not path.exists():
        raise FileNotFoundError(
            f"no judgments at {path}; run `adakit judge CORPUS` first, or pass the file"
        )
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        table = pd.read_parquet(path)
    elif suffix == ".csv":
        table = pd.read_csv(path, dtype={"item_id": str, "label": str})
    elif suffix == ".jsonl":
        table = judgments_table(read_log(path))
    elif suffix == ".json":
        table = pd.read_json(path, dtype={"item_id": str})
    else:
        raise ValueError(f"{path}: judgments must be .parquet, .csv or .jsonl")
    clean_judgments(table)  # raises on a malformed table
    return _key_types(table)


def read_corpus_judgments(corpus: str | Path | Sequence[str | Path]) -> pd.DataFrame:
    """The judgments of one corpus folder, or of several stacked (a corpus without verdicts is
    left out with a printed note; FileNotFoundError when none has any). Relative paths are
    taken from the project root."""
    if isinstance(corpus, str | Path):
        return read_judgments(judgments_path_for(config.resolve(corpus)))
    tables = []
    for one in corpus:
        path = judgments_path_for(config.resolve(one))
        if path.exists():
            tables.append(read_judgments(path))
        else:
            print(f"note: {one} has no judgments yet ({path}); its runs are not adjudicated")
    if not tables:
        raise FileNotFoundError(f"no judgments for any of {[str(c) for c in corpus]}; "
                                "run `adakit judge CORPUS` first")
    return pd.concat(tables, ignore_index=True)
