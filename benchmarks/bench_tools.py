"""Benchmark of the code index and the navigation tools against ctags and ripgrep.

For each world (default: scikit-learn and tensorzero, fetched by ``make bench``):

- cold index (no on-disk cache) beside ``ctags`` over the same files: the lexical tier a
  start builds (every file scanned for the names it may define; queryable), and the full
  tree-sitter tier (every file parsed; in parallel and in one process); a start from the
  on-disk index;
- go_to_definition's first query per name after a cold start (parses the candidate files)
  and whether its answers equal the full tier's;
- find_all_references for a seeded sample of defined names beside ``rg -w`` over the same
  files: first query per name (parse trees not yet cached; the very first one also reads
  every file) and warm (asked again), wall and CPU;
- peek_code_region and get_structural_overview through the whole tool path.

Targets (from the issues): warm references p95 <= 1.0x rg, cold index <= 3x ctags, peek p95
<= 5 ms (issue 2); first references query p95 <= 1.5x rg (issue 28). The script prints what it measured, the ratios and whether each target was met;
it never fails on a missed target (it is a measurement, not a test).

    python benchmarks/bench_tools.py [WORLD ...] [--symbols 40] [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from timing import Ratio, print_ratios

from adakit.apparatus.code_index import CodeIndex
from adakit.apparatus.tools import Toolbox
from adakit.apparatus.world import World, open_world

TARGET_REFS = 1.0
TARGET_REFS_FIRST = 1.5
TARGET_COLD = 3.0
TARGET_PEEK_MS = 5.0


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


def child_cpu() -> float:
    """CPU seconds used so far by finished child processes (ctags, rg)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def cold_index(
    world: World, workers: int, repeats: int, parse: bool
) -> tuple[list[float], list[float], CodeIndex]:
    """Wall and CPU seconds (this process plus workers) of cold builds, and the last index."""
    times, cpus, idx = [], [], None
    for _ in range(repeats):
        idx = CodeIndex(world, use_disk_cache=False, workers=workers)
        stats = idx.build(parse=parse)
        times.append(stats.seconds)
        cpus.append(stats.cpu_seconds + stats.worker_cpu_seconds)
    assert idx is not None
    return times, cpus, idx


def ctags_times(world: World, files: list[str], repeats: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of ``ctags`` writing a tags file for exactly these files."""
    with tempfile.TemporaryDirectory() as tmp:
        listing = Path(tmp) / "files.txt"
        listing.write_text("\n".join(files) + "\n")
        walls, cpus = [], []
        for _ in range(repeats):
            c0 = child_cpu()
            dt, proc = timed(
                subprocess.run,
                ["ctags", "-f", str(Path(tmp) / "tags"), "-L", str(listing)],
                cwd=world.root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            if proc.returncode != 0:
                raise RuntimeError("ctags failed")
            walls.append(dt)
            cpus.append(child_cpu() - c0)
        return walls, cpus


def rg_time(world: World, files: list[str], name: str) -> tuple[float, float]:
    """Wall and CPU seconds of ``rg -w NAME`` over exactly these files (output captured)."""
    c0 = child_cpu()
    dt, _ = timed(
        subprocess.run,
        ["rg", "-w", "-n", "--no-heading", "--fixed-strings", name, "--", *files],
        cwd=world.root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    return dt, child_cpu() - c0


def refs_time(index: CodeIndex, name: str) -> tuple[float, float]:
    """Wall and CPU seconds of one reference search (50 refs materialised, all counted)."""
    c0 = time.process_time()
    dt, _ = timed(index.references, name, 50)
    return dt, time.process_time() - c0


def sample_names(index: CodeIndex, n: int, seed: int = 0) -> list[str]:
    names = [x for x in index.defined_names() if len(x) >= 3 and not x.startswith("__")]
    rng = random.Random(seed)
    return rng.sample(names, min(n, len(names)))


def _vs(baseline: float | None, target: float) -> tuple[float | None, float | None]:
    """The (baseline, target) of a row: no target when the baseline tool was not run."""
    return baseline, (target if baseline is not None else None)


def index_rows(name: str, world: World, files: list[str], repeats: int,
               have: set[str]) -> tuple[list[Ratio], CodeIndex]:
    """Cold index tiers and a start from disk beside ``ctags``; and the fully parsed index."""
    ct = cc = None
    if "ctags" in have:
        ctags, ctags_cpu = ctags_times(world, files, repeats)
        ct, cc = statistics.median(ctags), statistics.median(ctags_cpu)
    lexical, lexical_cpu, _ = cold_index(world, 1, repeats, parse=False)
    lx, lc = statistics.median(lexical), statistics.median(lexical_cpu)
    serial, serial_cpu, _ = cold_index(world, 1, 1, parse=True)
    workers = min(2, os.cpu_count() or 1)
    cold, cold_cpu, index = cold_index(world, workers, repeats, parse=True)
    co, oc = statistics.median(cold), statistics.median(cold_cpu)
    ctags_text = "ctags not run" if ct is None else f"ctags {ct:.2f}s (cpu {cc:.2f}s)"
    print(f"{ctags_text} | cold index: lexical tier {lx:.2f}s (cpu {lc:.2f}s); "
          f"full parse {co:.2f}s (cpu {oc:.2f}s, {workers} workers), {serial[0]:.2f}s "
          f"(cpu {serial_cpu[0]:.2f}s, 1 worker)")
    with tempfile.TemporaryDirectory() as tmp:
        CodeIndex(world, cache_dir=tmp, workers=workers).build(parse=True)
        cached, _ = timed(CodeIndex(world, cache_dir=tmp, workers=workers).build)
    base, target = _vs(ct, TARGET_COLD)
    rows = [
        Ratio(f"{name}: cold index, lexical tier, median of {repeats} vs ctags (s)", lx, target,
              baseline=base, fmt="{:.3f}"),
        Ratio(f"{name}: cold index, lexical tier, CPU vs ctags (s)", lc, baseline=cc, fmt="{:.3f}"),
        Ratio(f"{name}: cold full parse, {workers} workers vs ctags (s)", co, baseline=ct, fmt="{:.3f}"),
        Ratio(f"{name}: cold full parse, 1 worker vs ctags (s)", serial[0], baseline=ct, fmt="{:.3f}"),
        Ratio(f"{name}: cold full parse, CPU of all processes vs ctags (s)", oc, baseline=cc, fmt="{:.3f}"),
        Ratio(f"{name}: start from the on-disk index vs ctags (s)", cached, baseline=ct, fmt="{:.3f}"),
    ]
    return rows, index


def definition_rows(name: str, world: World, index: CodeIndex, names: list[str],
                    n_files: int) -> list[Ratio]:
    """go_to_definition's first query per name after a cold start, against the full tier."""
    fresh = CodeIndex(world, use_disk_cache=False)
    fresh.build()
    defs, differ = [], 0
    for sym in names:
        dt, got = timed(fresh.definitions, sym)
        defs.append(dt)
        differ += got != index.definitions(sym)
    print(f"definitions after a cold start over {len(names)} names: p50/p95 "
          f"{pct(defs, 50) * 1e3:.1f}/{pct(defs, 95) * 1e3:.1f} ms, {fresh.parse_count} of "
          f"{n_files} files parsed, {differ} answers differ from the full tier")
    return [
        Ratio(f"{name}: definitions, first query p50 (ms)", pct(defs, 50) * 1e3, fmt="{:.1f}"),
        Ratio(f"{name}: definitions, first query p95 (ms)", pct(defs, 95) * 1e3, fmt="{:.1f}"),
        Ratio(f"{name}: definitions differing from the full tier", differ, fmt="{:.0f}"),
    ]


def reference_rows(name: str, world: World, index: CodeIndex, names: list[str],
                   files: list[str], have: set[str]) -> list[Ratio]:
    """find_all_references, first and warm, beside ``rg -w`` over the same files."""
    rg, rg_cpu, first, first_cpu, warm, warm_cpu = [], [], [], [], [], []
    for sym in names:
        if "rg" in have:
            wall, cpu = rg_time(world, files, sym)
            rg.append(wall)
            rg_cpu.append(cpu)
        wall, cpu = refs_time(index, sym)
        first.append(wall)
        first_cpu.append(cpu)
    for sym in names:
        wall, cpu = refs_time(index, sym)
        warm.append(wall)
        warm_cpu.append(cpu)
    r50, r95 = (pct(rg, 50) * 1e3, pct(rg, 95) * 1e3) if rg else (None, None)
    rg_cpu95 = (pct(rg_cpu, 95) * 1e3 or None) if rg else None
    rg_text = "rg not run" if r50 is None else f"rg p50/p95 {r50:.1f}/{r95:.1f} ms"
    print(f"refs over {len(names)} names: {rg_text}; first "
          f"{pct(first, 50) * 1e3:.1f}/{pct(first, 95) * 1e3:.1f} ms; warm "
          f"{pct(warm, 50) * 1e3:.1f}/{pct(warm, 95) * 1e3:.1f} ms")
    base, target = _vs(r95, TARGET_REFS)
    _, first_target = _vs(r95, TARGET_REFS_FIRST)
    return [
        Ratio(f"{name}: refs warm p50 vs rg -w (ms)", pct(warm, 50) * 1e3, baseline=r50,
              fmt="{:.1f}"),
        Ratio(f"{name}: refs warm p95 vs rg -w (ms)", pct(warm, 95) * 1e3, target, baseline=base,
              fmt="{:.1f}"),
        Ratio(f"{name}: refs warm p95 CPU vs rg -w (ms)", pct(warm_cpu, 95) * 1e3,
              baseline=rg_cpu95, fmt="{:.1f}"),
        Ratio(f"{name}: refs first query p50 vs rg -w (ms)", pct(first, 50) * 1e3, baseline=r50,
              fmt="{:.1f}"),
        Ratio(f"{name}: refs first query p95 vs rg -w (ms)", pct(first, 95) * 1e3, first_target,
              baseline=base, fmt="{:.1f}"),
        Ratio(f"{name}: refs first query p95 CPU vs rg -w (ms)", pct(first_cpu, 95) * 1e3,
              baseline=rg_cpu95, fmt="{:.1f}"),
    ]


def tool_rows(name: str, world: World, index: CodeIndex, files: list[str],
              n_peeks: int) -> list[Ratio]:
    """peek_code_region and get_structural_overview through the whole tool path."""
    box = Toolbox(world, index=index)
    rng = random.Random(1)
    peeks, peeks_cpu, views = [], [], []
    for _ in range(n_peeks):
        rel = rng.choice(files)
        n = len(index.lines(rel)) or 1
        start = rng.randint(1, n)
        c0 = time.process_time()
        dt, res = timed(box.execute, "peek_code_region",
                        {"file_path": rel, "start_line": start, "end_line": start + 39})
        peeks_cpu.append(time.process_time() - c0)
        assert res.metrics.error_type is None, res.text
        peeks.append(dt)
    for rel in rng.sample(files, min(max(10, n_peeks // 3), len(files))):
        dt, res = timed(box.execute, "get_structural_overview", {"file_path": rel})
        views.append(dt)
    p50, p95 = pct(peeks, 50) * 1e3, pct(peeks, 95) * 1e3
    print(f"peek p50/p95 {p50:.2f}/{p95:.2f} ms; overview p50/p95 "
          f"{pct(views, 50) * 1e3:.1f}/{pct(views, 95) * 1e3:.1f} ms")
    return [
        Ratio(f"{name}: peek p50 (ms)", p50),
        Ratio(f"{name}: peek p95 (ms)", p95, TARGET_PEEK_MS),
        Ratio(f"{name}: peek p95 CPU (ms)", pct(peeks_cpu, 95) * 1e3, TARGET_PEEK_MS),
        Ratio(f"{name}: overview p50 (ms)", pct(views, 50) * 1e3, fmt="{:.1f}"),
        Ratio(f"{name}: overview p95 (ms)", pct(views, 95) * 1e3, fmt="{:.1f}"),
    ]


def bench_world(name: str, n_symbols: int, repeats: int, n_peeks: int,
                have: set[str]) -> list[Ratio]:
    """Every measure on one world (``have``: the baseline tools installed)."""
    world = open_world(name, progress=True)
    files = CodeIndex(world, use_disk_cache=False).source_files()
    size = sum((world.root / f).stat().st_size for f in files)
    print(f"\n== {name} {world.version}: {len(files)} indexed files, {size / 1e6:.1f} MB", flush=True)
    rows, index = index_rows(name, world, files, repeats, have)
    names = sample_names(index, n_symbols)
    rows += definition_rows(name, world, index, names, len(files))
    rows += reference_rows(name, world, index, names, files, have)
    rows += tool_rows(name, world, index, files, n_peeks)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("worlds", nargs="*", help="worlds (default: scikit-learn and tensorzero; "
                    "flask with --quick)")
    ap.add_argument("--symbols", type=int, default=40, help="names sampled for references")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of the cold timings")
    ap.add_argument("--quick", action="store_true",
                    help="flask, 5 names, 1 repeat, 30 peeks (seconds); a missing ctags or rg "
                    "leaves its baseline out instead of stopping")
    args = ap.parse_args(argv)
    peeks = 200
    if args.quick:
        args.symbols, args.repeats, peeks = 5, 1, 30
    worlds = args.worlds or (["flask"] if args.quick else ["scikit-learn", "tensorzero"])
    have = {tool for tool in ("ctags", "rg") if shutil.which(tool)}
    for tool in sorted({"ctags", "rg"} - have):
        package = "universal-ctags" if tool == "ctags" else "ripgrep"
        print(f"{tool} is not installed (Debian: apt-get install {package})", file=sys.stderr)
        if not args.quick:
            return 2
        print(f"quick mode: {tool}'s baseline is left out")
    rows: list[Ratio] = []
    for name in worlds:
        rows.extend(bench_world(name, args.symbols, args.repeats, peeks, have))
    load = os.getloadavg()[0]
    print(f"\nload average at the end: {load:.1f} on {os.cpu_count()} cores (wall times of "
          "short operations stretch under load; the CPU-time rows do not)")
    print_ratios(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
