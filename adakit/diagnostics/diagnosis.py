"""The diagnosis of a corpus: effect labels, detector firings and alignments in one pass
(:func:`diagnose`), its tables written as parquet, the rate table, and ``adakit diagnose``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from adakit.diagnostics import align as al
from adakit.diagnostics import detectors as dt
from adakit.diagnostics import steps as st
from adakit.record import Corpus

DEFAULT_PERCENTILE = 90.0
TABLES = ("steps", "runs", "firings", "thresholds", "alignments", "columns", "spans")


@dataclass
class Diagnosis:
    """Everything :func:`diagnose` found, as tables (and the traces behind them)."""

    steps: pd.DataFrame
    runs: pd.DataFrame
    firings: pd.DataFrame
    thresholds: pd.DataFrame
    alignments: pd.DataFrame
    columns: pd.DataFrame
    spans: pd.DataFrame
    traces: list[st.Trace]
    alignment_objects: dict[tuple[str, str], al.RunAlignment]

    def trace(self, run_id: str) -> st.Trace:
        """The trace of one run."""
        for tr in self.traces:
            if tr.facts.run_id == run_id:
                return tr
        raise KeyError(f"no run {run_id!r} in the diagnosis")


def per_run_table(traces: Sequence[st.Trace], detector_stats: pd.DataFrame) -> pd.DataFrame:
    """Per run: steps, each label's count, anchor source and the detector columns."""
    rows = []
    for tr in traces:
        row: dict[str, Any] = {"run_id": tr.facts.run_id, "steps": len(tr.steps),
                               "has_patch": tr.facts.has_patch,
                               "anchor_source": tr.facts.anchor_source}
        for label in st.LABELS:
            row[f"label_{label}"] = tr.labels.count(label)
        rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:
        table = pd.DataFrame(columns=["run_id", "steps", "has_patch", "anchor_source",
                                      *(f"label_{x}" for x in st.LABELS)])
    return table.merge(detector_stats, on="run_id", how="left")


def diagnose(
    corpus: Corpus,
    reference: str | None = None,
    calibrate: bool = False,
    percentile: float = DEFAULT_PERCENTILE,
    thresholds: dt.Thresholds | None = None,
    verdicts: pd.DataFrame | None = None,
    match: float = 1.0,
    mismatch: float = 0.0,
    gap: float = 0.0,
    symbols: bool = True,
    task_key: Sequence[str] = al.TASK_KEY,
) -> Diagnosis:
    """Label every step, run every detector (frozen thresholds, or calibrated on this corpus at
    ``percentile``) and align each run with its task's reference (``reference`` for its task,
    else :func:`adakit.diagnostics.align.choose_references` on lens 3 ``verdicts``). Runs are
    of the same task when they agree on the ``task_key`` columns (default world, task family
    and target; ``("world", "task")`` compares, e.g., different issues of one repository)."""
    runs = corpus.runs
    traces = st.read_traces(runs["path"])
    for tr in traces:
        st.label_trace(tr)
    base = thresholds or dt.frozen_thresholds()
    firings, stats = dt.detect(traces, base)
    calibrated: list[str] = []
    if calibrate:
        calibrated = dt.with_candidates(stats)
        base = dt.calibrate(stats, percentile, base)
        firings, stats = dt.detect(traces, base)
    per_run = per_run_table(traces, stats)
    axes = [c for c in ("agent", "model", "world", "task", "target", "condition", "repeat")
            if c in runs.columns]
    per_run = runs[["run_id", *axes]].merge(per_run, on="run_id", how="right")
    useful = (per_run["label_survived"] + per_run["label_justified"]) / per_run["steps"].clip(lower=1)
    scores = al.lens3_run_scores(verdicts, runs) if verdicts is not None and len(verdicts) else None
    if reference is not None and reference not in set(runs["run_id"]):
        raise ValueError(f"the reference {reference!r} is not a run of this corpus")
    refs = al.choose_references(runs, scores, useful.set_axis(per_run["run_id"]),
                                per_run.set_index("run_id")["steps"], named=reference,
                                key=task_key)
    by_id = {tr.facts.run_id: tr for tr in traces}
    keys = [k for k in task_key if k in runs.columns]
    ref_of: dict[str, str] = {}
    for task, grp in runs.groupby(keys, sort=True, dropna=False):
        task = task if isinstance(task, tuple) else (task,)
        for r in grp["run_id"]:
            ref_of[r] = refs[task]
    per_run["reference"] = per_run["run_id"].map(ref_of)
    if scores is not None:
        per_run["lens3_score"] = per_run["run_id"].map(scores)
    symbol_cache: dict[str, al.SymbolOf | None] = {}
    world_of = dict(zip(runs["run_id"], runs["world"], strict=True))
    objects: dict[tuple[str, str], al.RunAlignment] = {}
    summary, columns, spans = [], [], []
    for run_id, ref in ref_of.items():
        if run_id == ref:
            continue
        world = str(world_of[run_id])
        if symbols and world not in symbol_cache:
            symbol_cache[world] = al.index_symbols(world)
        a = al.align(by_id[ref].steps, by_id[run_id].steps, match, mismatch, gap,
                     symbol_cache.get(world) if symbols else None)
        a.run_a, a.run_b = ref, run_id
        objects[(ref, run_id)] = a
        summary.append(al.summary_row(a))
        columns.extend(al.alignment_rows(a))
        spans.extend(al.span_rows(a))
    return Diagnosis(
        steps=st.steps_frame(traces), runs=per_run, firings=firings,
        thresholds=dt.thresholds_frame(base, calibrated, percentile if calibrate else None),
        alignments=pd.DataFrame(summary), columns=pd.DataFrame(columns),
        spans=pd.DataFrame(spans, columns=al.SPAN_COLUMNS),
        traces=traces, alignment_objects=objects)


def contrast_pair(diag: Diagnosis, run_id: str | None = None) -> tuple[str, str] | None:
    """A (reference, compared) pair to read side by side: ``run_id`` with its reference, else,
    in the task with the most aligned runs, the run farthest from its reference (lowest lens 3
    score when judged, else most firings, then the lowest file-level LCS); None without any
    alignment."""
    if diag.alignments.empty:
        return None
    runs = diag.runs.set_index("run_id")
    if run_id is not None:
        ref = runs.loc[run_id, "reference"]
        if ref == run_id:
            raise ValueError(f"{run_id} is its task's reference; name another run of the task")
        return str(ref), run_id
    table = diag.alignments.copy()
    sizes = table.groupby("run_a")["run_b"].transform("size")
    table = table[sizes == sizes.max()]
    fired = runs[[c for c in runs.columns if c.startswith("n_")]].sum(axis=1)
    table["fired"] = table["run_b"].map(fired)
    score = runs["lens3_score"] if "lens3_score" in runs else pd.Series(dtype=float)
    table["score"] = table["run_b"].map(score).fillna(float("inf"))
    worst = table.sort_values(["score", "fired", "score_file", "run_b"],
                              ascending=[True, False, True, True]).iloc[0]
    return str(worst["run_a"]), str(worst["run_b"])


def default_out(corpus_dir: str | Path) -> Path:
    """Where ``adakit diagnose`` writes: a folder beside the corpus, ``<name>.diagnostics``."""
    p = Path(corpus_dir).resolve()
    return p.parent / f"{p.name}.diagnostics"


def write_tables(diag: Diagnosis, out: str | Path) -> list[Path]:
    """Write every table of a diagnosis as ``<out>/<table>.parquet``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in TABLES:
        frame = getattr(diag, name).copy()
        for col in frame.columns:  # parquet wants one type per column
            frame[col] = _one_type(frame[col])
        path = out / f"{name}.parquet"
        frame.to_parquet(path, index=False)
        written.append(path)
    return written


_TURN_COLUMNS = re.compile(r"^(turn_[ab]|[ab]_(first|last)|diverge_\w+_[ab]|first_turn|"
                           r"last_turn|steps(_[ab])?)$")


def _one_type(col: pd.Series) -> pd.Series:
    """A column parquet can store with its meaning: turn numbers with gaps (a side of an
    alignment without a step) as nullable integers, other mixed columns unchanged."""
    if _TURN_COLUMNS.match(str(col.name)) and col.dtype != bool:
        return pd.to_numeric(col, errors="coerce").astype("Int64")
    return col


def rate_table(diag: Diagnosis, runs: pd.DataFrame, by: str | Sequence[str] = "model",
               n_resamples: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Firings per 100 steps by group and detector with bootstrap intervals."""
    return dt.detector_rates(diag.runs, runs, by, n_resamples=n_resamples, seed=seed)


def format_rates(rates: pd.DataFrame, by: Sequence[str]) -> str:
    """The rate table as text: one row per group, one column per detector, ``rate [lo, hi]``."""
    def cell(r: pd.Series) -> str:
        if pd.isna(r["rate_lo"]):
            return f"{r['rate']:.1f}"
        return f"{r['rate']:.1f} [{r['rate_lo']:.1f}, {r['rate_hi']:.1f}]"

    shown = rates.assign(value=rates.apply(cell, axis=1))
    wide = shown.pivot_table(index=list(by), columns="detector", values="value",
                             aggfunc="first", sort=False)
    wide = wide.reindex(columns=[d for d in dt.DETECTOR_NAMES if d in wide.columns])
    n = rates.drop_duplicates(list(by)).set_index(list(by))["n_runs"]
    wide.insert(0, "runs", n.reindex(wide.index).to_numpy())
    return wide.to_string()


# --------------------------------------------------------------------------- command line


def _cmd_diagnose(args: argparse.Namespace) -> int:
    from adakit import config
    from adakit.judging.store import read_corpus_judgments
    from adakit.record import load_corpus, open_corpus, skipped_note

    folders = [config.resolve(c) for c in args.corpus]
    if len(folders) > 1 and not args.out:
        print("adakit diagnose: with several corpus folders, name the output folder (--out DIR)")
        return 2
    corpus_dir = folders[0]
    try:
        corpus = load_corpus(corpus_dir) if len(folders) == 1 else open_corpus(folders, verbose=False)
    except (FileNotFoundError, ValueError) as exc:
        print(f"adakit diagnose: {exc}")
        return 2
    if corpus.skipped:
        print(skipped_note(corpus.skipped))
    if corpus.runs.empty:
        print(f"no runs in {', '.join(map(str, folders))}")
        return 1
    unknown = [c for c in [*(args.by or []), *args.same_task] if c not in corpus.runs.columns]
    if unknown:
        print(f"adakit diagnose: no run column {', '.join(unknown)} (columns: "
              f"{', '.join(corpus.runs.columns)})")
        return 2
    try:
        verdicts = read_corpus_judgments(corpus_dir if len(folders) == 1 else folders)
    except (FileNotFoundError, ValueError):
        verdicts = None
    try:
        diag = diagnose(corpus, reference=args.reference, calibrate=args.calibrate,
                        percentile=args.percentile, verdicts=verdicts, match=args.match,
                        mismatch=args.mismatch, gap=args.gap, symbols=not args.no_symbols,
                        task_key=args.same_task)
    except ValueError as exc:
        print(f"adakit diagnose: {exc}")
        return 2
    out = Path(args.out) if args.out else default_out(corpus_dir)
    write_tables(diag, out)
    by = args.by or ["model"]
    print(f"{len(corpus.runs)} runs, {len(diag.steps)} steps; wrote {len(TABLES)} tables to {out}")
    print("\nthresholds" + (f" (calibrated at the {args.percentile:g}th percentile)"
                            if args.calibrate else " (frozen)") + ":")
    th = diag.thresholds
    print(th.to_string(index=False))
    print(f"\nalignment scoring: match {args.match:g}, mismatch {args.mismatch:g}, gap "
          f"{args.gap:g}; {len(diag.alignments)} runs aligned with their task's reference"
          + (f" ({args.reference} for its task)" if args.reference else
             " (the best lens 3 score" + ("" if verdicts is not None else
                                          ": no verdicts, so the largest share of survived and "
                                          "justified steps") + ")"))
    if len(diag.spans):
        print("divergence spans: " + ", ".join(
            f"{k} {v}" for k, v in diag.spans["kind"].value_counts().items()))
    rates = rate_table(diag, corpus.runs, by, n_resamples=args.resamples)
    print(f"\nfirings per 100 steps by detector and {' x '.join(by)} (95% bootstrap interval "
          "over runs):")
    print(format_rates(rates, by))
    return 0


def register_cli(sub: Any) -> None:
    """``adakit diagnose CORPUS``: effect labels, detector firings and alignments."""
    p = sub.add_parser("diagnose", help="TraceProbe-style process diagnostics: effect labels, "
                       "anti-pattern detectors, run alignment (parquet beside the corpus)")
    p.add_argument("corpus", nargs="+", help="a folder of run files (Ada's or imported), or "
                   "several read as one corpus (then --out is needed)")
    p.add_argument("--reference", metavar="RUN_ID", help="align its task's runs with this run "
                   "(default: the best lens 3 run of each task)")
    p.add_argument("--calibrate", action="store_true", help="set the main thresholds from "
                   "this corpus (a percentile of each detector's per-run statistic)")
    p.add_argument("--percentile", type=float, default=DEFAULT_PERCENTILE,
                   help="the calibration percentile (default 90)")
    p.add_argument("--by", nargs="+", metavar="COLUMN", help="group columns of the summary "
                   "(default: model)")
    p.add_argument("--match", type=float, default=1.0, help="alignment score of a match (1)")
    p.add_argument("--mismatch", type=float, default=0.0, help="score of a mismatch (0)")
    p.add_argument("--gap", type=float, default=0.0, help="score of a gap (0)")
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (1000)")
    p.add_argument("--same-task", nargs="+", metavar="COLUMN", default=list(al.TASK_KEY),
                   help="run columns two runs must share to be aligned (default: world task "
                   "target)")
    p.add_argument("--no-symbols", action="store_true", help="skip the symbol level (no code "
                   "index even when the world is on disk)")
    p.add_argument("--out", metavar="DIR", help="output folder (default <corpus>.diagnostics)")
    p.set_defaults(func=_cmd_diagnose)

