"""Benchmark of lenses 0, 1, 2 and 4, the noise floor and search on a corpus store at the
field's scale (issue 28: 1,000,000 synthetic runs, about 22 M turns).

As JSONL such a corpus would take about 36 GB, so the synthetic tables
(``adakit.synthetic.synthetic_tables``, ``--piece`` runs at a time, each piece its own seed)
are written straight into a store with ``Store.from_tables``, with a thinking text per turn
(``synthetic_texts``: filler of the turn's ``thinking_chars``, every 1,000th turn marked with
the word ``pytest``). Then each step opens the store and runs, in a fresh Python process so its
wall and CPU seconds (DuckDB's threads included) and its peak resident memory are its own:

- write: the tables drawn and written into the store;
- lens 0: ``run_surface`` of the corpus, ``aggregate`` by model x condition,
  ``tool_concentration`` by model;
- lens 1: ``long_pauses`` of the corpus, ``turn_time_output_correlation`` by model, and
  ``arc_events`` of the 24 runs a figure draws;
- lens 2: the runs' tag counts (``run_tag_counts``), then ``shares_of_counts`` by
  model x condition and by task, and ``tag_deviation`` by task;
- lens 4: ``trace_density`` by world x model x condition and by world;
- noise floor: ``run_metrics``, ``cell_variation``, ``noise_floor``;
- search: the marker word over the thinking of every turn, and a filter-only query (one
  model, world, task and condition, the second turn, the PKR calls).

The lenses read the store in pieces of ``CHUNK_RUNS`` runs (only the columns they need), so
their memory is bounded by a piece and by the per-run tables (one row per run). At
1,000,000 runs the targets are: lenses 0, 1, 2 and 4 together <= 10 min and <= 8 GB peak,
the text search <= 10 s, the filter-only query <= 1 s. Below that size the times are
projected linearly to 1,000,000 runs (the per-run work grows with the runs; peak memory is
reported as measured). ``--quick`` runs 2,000 runs in this one process. It exits 0 whether the
targets are met or not.

    python benchmarks/bench_store_scale.py [--runs 1000000] [--piece 20000] [--folder F] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from timing import Ratio, print_ratios

from adakit import config

TARGET_RUNS = 1_000_000
TARGET_LENSES_S = 600.0
TARGET_PEAK_MB = 8192.0
TARGET_SEARCH_S = 10.0
TARGET_FILTER_S = 1.0
LENS_STEPS = ("lens 0", "lens 1", "lens 2", "lens 4")
STEPS = (*LENS_STEPS, "noise floor", "text search", "filter-only")


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write(folder: Path, n_runs: int, piece: int) -> dict[str, float]:
    """Draw ``n_runs`` synthetic runs, ``piece`` at a time, straight into a store."""
    from adakit.store import Store
    from adakit.synthetic import synthetic_tables, synthetic_texts

    sizes = [min(piece, n_runs - k) for k in range(0, n_runs, piece)]
    counts = {"turns": 0}

    def pieces():
        for seed, size in enumerate(sizes):
            part = synthetic_tables(size, seed=seed, unfinished=0.05)
            counts["turns"] += len(part.turns)
            yield part

    Store.from_tables(folder, pieces(), texts=synthetic_texts)
    return {"turns": counts["turns"]}


def steps(folder: Path) -> dict[str, Callable[[], Any]]:
    """The measured steps on the store of ``folder`` (see the module doc)."""
    from adakit.lenses import footprint, journey, policy, surface
    from adakit.store import Store
    from adakit.synthetic import MARKER
    from adakit.variance import noise
    from adakit.workbench import search

    corpus = Store(folder).corpus()

    def lens0() -> Any:
        surf = surface.run_surface(corpus)
        return (surface.aggregate(surf, by=["model", "condition"]),
                surface.tool_concentration(corpus, by="model"))

    def lens1() -> Any:
        shown = corpus.table("runs", ["run_id"])["run_id"].iloc[:24].tolist()
        return (journey.long_pauses(corpus), journey.turn_time_output_correlation(corpus),
                journey.arc_events(corpus.where(run_id=shown)))

    def lens2() -> Any:
        counts = policy.run_tag_counts(corpus)
        runs = corpus.table("runs", ["run_id", "model", "condition", "task"])
        by_task = policy.shares_of_counts(counts, runs, by="task")
        return (policy.shares_of_counts(counts, runs, by=["model", "condition"]),
                policy.tag_deviation(by_task))

    def lens4() -> Any:
        return (footprint.trace_density(corpus, by=["world", "model", "condition"]),
                footprint.trace_density(corpus, by="world"))

    def floor() -> Any:
        return noise.noise_floor(noise.cell_variation(noise.run_metrics(corpus)))

    def text() -> Any:
        return search.search(corpus, MARKER, fields=["thinking"])

    con = corpus.store.connect()  # the query's cell, chosen before any clock starts
    cell = con.sql("SELECT model, world, task, condition FROM runs LIMIT 1").df().iloc[0]
    con.close()

    def filtered() -> Any:
        return search.search(corpus, None, tool="PKR", turns="2-2", **cell.to_dict())

    fns = [lens0, lens1, lens2, lens4, floor, text, filtered]
    return dict(zip(STEPS, fns, strict=True))


def _rows(out: Any) -> int:
    parts = out if isinstance(out, tuple) else (out,)
    return sum(len(p) for p in parts)


def measure_here(name: str, folder: Path, n_runs: int = 0, piece: int = 0) -> dict[str, float]:
    """One step in this process: wall and CPU seconds, peak memory, rows out."""
    import duckdb  # noqa: F401  (imports are not timed)

    fn = None if name == "write" else steps(folder)[name]
    w0, c0 = time.perf_counter(), _cpu()
    rows = write(folder, n_runs, piece)["turns"] if fn is None else _rows(fn())
    return {"wall": time.perf_counter() - w0, "cpu": _cpu() - c0, "peak_mb": _peak_mb(),
            "rows": rows}


def measure(name: str, folder: Path, n_runs: int, piece: int) -> dict[str, float]:
    """One step in a fresh process (run at ``nice`` as the caller is)."""
    out = subprocess.run([sys.executable, __file__, "--step", name, "--folder", str(folder),
                          "--runs", str(n_runs), "--piece", str(piece)],
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"step {name} failed: {out.stderr.strip().splitlines()[-1]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(n_runs: int, piece: int, folder: Path, fresh_processes: bool) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    take = measure if fresh_processes else (lambda name, f, n, p: measure_here(name, f, n, p))
    print(f"store {folder}: {n_runs:,} synthetic runs in pieces of {piece:,}; load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    res = {"write": take("write", folder, n_runs, piece)}
    size = sum(p.stat().st_size for p in folder.rglob("*.parquet"))
    print(f"wrote {res['write']['rows']:,} turns in {res['write']['wall']:.1f} s; the store "
          f"holds {size / 1e9:.2f} GB of parquet", flush=True)
    for name in STEPS:
        res[name] = take(name, folder, n_runs, piece)
        print(f"  {name}: {res[name]['wall']:.2f} s wall, {res[name]['cpu']:.2f} s CPU, "
              f"peak {res[name]['peak_mb']:.0f} MB, {res[name]['rows']:,} rows", flush=True)
    _table(res, n_runs)


def _table(res: dict[str, dict[str, float]], n_runs: int) -> None:
    scale = TARGET_RUNS / n_runs
    full = n_runs >= TARGET_RUNS
    print("\n| step | wall s | CPU s | peak MB | rows | projected wall s at 1,000,000 runs |")
    print("|---|---|---|---|---|---|")
    for name in ("write", *STEPS):
        r = res[name]
        print(f"| {name} | {r['wall']:.2f} | {r['cpu']:.2f} | {r['peak_mb']:.0f} | "
              f"{int(r['rows']):,} | {r['wall'] * scale:.1f} |")
    lens_wall = sum(res[s]["wall"] for s in LENS_STEPS)
    lens_cpu = sum(res[s]["cpu"] for s in LENS_STEPS)
    lens_peak = max(res[s]["peak_mb"] for s in LENS_STEPS)
    print(f"\nlenses 0, 1, 2, 4: {lens_wall:.1f} s wall, {lens_cpu:.1f} s CPU, peak "
          f"{lens_peak:.0f} MB at {n_runs:,} runs")
    where = "" if full else f" (projected x{scale:g})"
    k = 1.0 if full else scale
    print_ratios([
        Ratio(f"lenses 0,1,2,4 wall s{where}", lens_wall * k, TARGET_LENSES_S, fmt="{:.1f}"),
        Ratio(f"lenses 0,1,2,4 CPU s{where}", lens_cpu * k, fmt="{:.1f}"),
        Ratio(f"lenses peak MB at {n_runs:,} runs", lens_peak,
              TARGET_PEAK_MB if full else None, fmt="{:.0f}"),
        Ratio(f"noise floor wall s{where}", res["noise floor"]["wall"] * k, fmt="{:.1f}"),
        Ratio(f"text search over thinking s{where}", res["text search"]["wall"] * k,
              TARGET_SEARCH_S),
        Ratio(f"filter-only query s{where}", res["filter-only"]["wall"] * k, TARGET_FILTER_S),
        Ratio(f"write into the store s{where}", res["write"]["wall"] * k, fmt="{:.1f}"),
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=TARGET_RUNS,
                    help="synthetic runs (default 1,000,000)")
    ap.add_argument("--piece", type=int, default=20_000,
                    help="runs drawn and written at a time: one segment each (default 20,000)")
    ap.add_argument("--folder", type=Path, default=None,
                    help="where to write the store (replaced) and keep it")
    ap.add_argument("--quick", action="store_true", help="2,000 runs in this one process")
    ap.add_argument("--step", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.step:
        print(json.dumps(measure_here(args.step, args.folder, args.runs, args.piece)))
        return 0
    n_runs, piece = (2000, 250) if args.quick else (args.runs, args.piece)
    if n_runs < 1 or piece < 1:
        ap.error("--runs and --piece must be at least 1")
    if args.folder is not None:
        run(n_runs, piece, args.folder, not args.quick)
        return 0
    config.DATA.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-store-scale-", dir=config.DATA) as tmp:
        run(n_runs, piece, Path(tmp) / "store", not args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
