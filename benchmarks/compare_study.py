"""Compare the outputs of `make study` in two checkouts: tables, verdicts and run files.

A refactoring that moves code must leave the study's results unchanged (issue 24). Wall-clock
measurements differ between any two executions (the scripted baselines are timed live), so
beside byte equality this says what is equal once wall-clock columns are left out:

- every CSV/parquet table under ``data/processed``: byte-identical, equal without wall-clock
  columns (and without the rows of a wall-clock metric), a table whose rows are defined by
  wall-clock pauses, or different;
- the verdicts (``data/judgments/<profile>/judgments.parquet``) without latency and cache flags;
- every run file of the profile without wall-clock fields and the commit that recorded it.

    python benchmarks/compare_study.py BEFORE_CHECKOUT AFTER_CHECKOUT [--profile quick]

Exit status 1 when something differs beyond wall-clock values.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd

from adakit.record import content_records, read_run

TIME = re.compile(r"(?:latency|seconds|elapsed|started|ended|wall|time|created|duration|t_rel"
                  r"|^t_s$|^t_end_s$|_s$|_s_(?:lo|hi|n|sem)$)", re.I)
#: tables whose rows are chosen by wall-clock time (pauses over a threshold, time vs output)
TIME_TABLES = ("long_pauses", "time_output_correlation")
RUN_CLOCK = {"latency_s", "adakit_commit"}


def _table(path: Path) -> pd.DataFrame | None:
    if path.suffix == ".csv":
        return pd.read_csv(path)
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    return None


def _without_clock(df: pd.DataFrame) -> pd.DataFrame:
    if "metric" in df.columns:
        df = df[~df["metric"].astype(str).map(lambda m: bool(TIME.search(m)))]
    return df[[c for c in df.columns if not TIME.search(str(c))]].reset_index(drop=True)


def compare_tables(before: Path, after: Path) -> tuple[dict[str, int], list[str]]:
    """Counts per outcome over the tables of two ``data/processed`` folders, and the lines to
    print (one per file that is not byte-identical)."""
    a = {p.relative_to(before) for p in before.rglob("*") if p.is_file()}
    b = {p.relative_to(after) for p in after.rglob("*") if p.is_file()}
    counts = {"byte-identical": 0, "equal without wall-clock": 0, "wall-clock table": 0,
              "different": len(a ^ b)}
    lines = [f"only in one: {rel}" for rel in sorted(a ^ b)]
    for rel in sorted(a & b):
        if (before / rel).read_bytes() == (after / rel).read_bytes():
            counts["byte-identical"] += 1
            continue
        x, y = _table(before / rel), _table(after / rel)
        if x is not None and y is not None and any(t in str(rel) for t in TIME_TABLES):
            counts["wall-clock table"] += 1
            lines.append(f"rows chosen by wall-clock time: {rel}")
            continue
        if x is not None and y is not None and list(x.columns) == list(y.columns):
            try:
                pd.testing.assert_frame_equal(_without_clock(x), _without_clock(y))
            except AssertionError as exc:
                lines.append(f"DIFFERENT {rel}: {' '.join(str(exc).split())[:240]}")
            else:
                counts["equal without wall-clock"] += 1
                dropped = sorted(set(x.columns) - set(_without_clock(x).columns))
                lines.append(f"equal without {', '.join(dropped) or 'wall-clock metric rows'}: {rel}")
                continue
        else:
            lines.append(f"DIFFERENT {rel}: not a table, or other columns")
        counts["different"] += 1
    return counts, lines


def run_content(path: Path) -> str:
    """A run file's content (:func:`adakit.record.content_records`) without the turns'
    latencies and the commit that recorded it."""
    return json.dumps(content_records(read_run(path), also=RUN_CLOCK), sort_keys=True)


def compare_verdicts(before: Path, after: Path) -> tuple[bool, str | None]:
    """Whether the verdict values agree (latency and cache flags aside), and what differs:
    the values, or only the column types (None when nothing does)."""
    if not before.exists() and not after.exists():
        return True, None
    x, y = (pd.read_parquet(p).drop(columns=["latency_s", "cached"], errors="ignore")
            .sort_values(["item_id", "judge"]).reset_index(drop=True) for p in (before, after))
    try:
        pd.testing.assert_frame_equal(x, y, check_dtype=False)
    except AssertionError as exc:
        return False, " ".join(str(exc).split())[:240]
    kinds = {c: (str(x[c].dtype), str(y[c].dtype)) for c in x if x[c].dtype != y[c].dtype}
    return True, f"same values, other column types {kinds}" if kinds else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--profile", default="quick")
    args = ap.parse_args(argv)
    counts, lines = compare_tables(args.before / "data" / "processed",
                                   args.after / "data" / "processed")
    print("\n".join(lines))
    print(f"tables: {counts}")
    same_verdicts, note = compare_verdicts(
        *(d / "data" / "judgments" / args.profile / "judgments.parquet"
          for d in (args.before, args.after)))
    print(f"verdicts: {note or 'equal (latency and cache flags aside)'}")
    runs = sorted((args.before / "data" / "runs" / args.profile).glob("*.jsonl"))
    other = args.after / "data" / "runs" / args.profile
    differ = [p.name for p in runs
              if not (other / p.name).exists() or run_content(p) != run_content(other / p.name)]
    print(f"runs: {len(runs) - len(differ)} of {len(runs)} equal without wall-clock fields"
          + (f"; differ: {', '.join(differ[:5])}" if differ else ""))
    return 1 if counts["different"] or differ or not same_verdicts else 0


if __name__ == "__main__":
    sys.exit(main())
