"""Benchmark of the code index and the navigation tools against ctags and ripgrep.

For each world (default: scikit-learn and tensorzero, fetched by ``make bench``):

- cold index (no on-disk cache) beside ``ctags`` over the same files: the lexical tier a
  start builds (every file scanned for the names it may define; queryable), and the full
  tree-sitter tier (every file parsed; in parallel and in one process); a start from the
  on-disk index;
- go_to_definition's first query per name after a cold start (parses the candidate files)
  and whether its answers equal the full tier's;
- find_all_references for a seeded sample of defined names beside ``rg -w`` over the same
  files: first query per name (parse trees not yet cached) and warm (asked again);
- peek_code_region and get_structural_overview through the whole tool path.

Targets (from the issue): warm references p95 <= 1.0x rg, cold index <= 3x ctags, peek p95
<= 5 ms. The script prints what it measured, the ratios and whether each target was met;
it never fails on a missed target (it is a measurement, not a test).

    python benchmarks/bench_tools.py [WORLD ...] [--symbols 40] [--repeats 3]
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

from adakit.apparatus.code_index import CodeIndex
from adakit.apparatus.tools import Toolbox
from adakit.apparatus.world import World, open_world

TARGET_REFS = 1.0
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


def bench_world(name: str, n_symbols: int, repeats: int) -> list[tuple]:
    world = open_world(name, progress=True)
    probe = CodeIndex(world, use_disk_cache=False)
    files = probe.source_files()
    size = sum((world.root / f).stat().st_size for f in files)
    print(f"\n== {name} {world.version}: {len(files)} indexed files, {size / 1e6:.1f} MB", flush=True)
    rows: list[tuple] = []

    # ---- cold index vs ctags
    ctags, ctags_cpu = ctags_times(world, files, repeats)
    ct, cc = statistics.median(ctags), statistics.median(ctags_cpu)
    lexical, lexical_cpu, _ = cold_index(world, 1, repeats, parse=False)
    lx, lc = statistics.median(lexical), statistics.median(lexical_cpu)
    serial, serial_cpu, _ = cold_index(world, 1, 1, parse=True)
    workers = min(2, os.cpu_count() or 1)
    cold, cold_cpu, index = cold_index(world, workers, repeats, parse=True)
    co, oc = statistics.median(cold), statistics.median(cold_cpu)
    print(f"ctags {ct:.2f}s (cpu {cc:.2f}s) | cold index: lexical tier {lx:.2f}s (cpu {lc:.2f}s); "
          f"full parse {co:.2f}s (cpu {oc:.2f}s, {workers} workers), {serial[0]:.2f}s "
          f"(cpu {serial_cpu[0]:.2f}s, 1 worker)")
    rows.append((name, f"cold index, lexical tier (median of {repeats})", f"{lx:.2f} s",
                 f"ctags {ct:.2f} s", lx / ct, TARGET_COLD))
    rows.append((name, "cold index CPU time, lexical tier", f"{lc:.2f} s",
                 f"ctags {cc:.2f} s", lc / cc if cc else None, None))
    rows.append((name, f"cold full parse, {workers} workers", f"{co:.2f} s",
                 f"ctags {ct:.2f} s", co / ct, None))
    rows.append((name, "cold full parse, 1 worker", f"{serial[0]:.2f} s", f"ctags {ct:.2f} s",
                 serial[0] / ct, None))
    rows.append((name, "cold full parse CPU time, all processes", f"{oc:.2f} s",
                 f"ctags {cc:.2f} s", oc / cc if cc else None, None))
    with tempfile.TemporaryDirectory() as tmp:
        CodeIndex(world, cache_dir=tmp, workers=workers).build(parse=True)
        cached, _ = timed(CodeIndex(world, cache_dir=tmp, workers=workers).build)
    rows.append((name, "start from the on-disk index", f"{cached:.2f} s", f"ctags {ct:.2f} s",
                 cached / ct, None))

    # ---- go_to_definition after a cold start: parses only the candidate files
    names = sample_names(index, n_symbols)
    fresh = CodeIndex(world, use_disk_cache=False)
    fresh.build()
    defs, differ = [], 0
    for sym in names:
        dt, got = timed(fresh.definitions, sym)
        defs.append(dt)
        differ += got != index.definitions(sym)
    print(f"definitions after a cold start over {len(names)} names: p50/p95 "
          f"{pct(defs, 50) * 1e3:.1f}/{pct(defs, 95) * 1e3:.1f} ms, {fresh.parse_count} of "
          f"{len(files)} files parsed, {differ} answers differ from the full tier")
    rows.append((name, "definitions, first query p50", f"{pct(defs, 50) * 1e3:.1f} ms", "-",
                 None, None))
    rows.append((name, "definitions, first query p95", f"{pct(defs, 95) * 1e3:.1f} ms", "-",
                 None, None))
    rows.append((name, "definitions differing from full tier", str(differ), "0", None, None))

    # ---- references vs rg -w
    rg, rg_cpu, first, warm, warm_cpu = [], [], [], [], []
    for sym in names:
        wall, cpu = rg_time(world, files, sym)
        rg.append(wall)
        rg_cpu.append(cpu)
        first.append(refs_time(index, sym)[0])
    for sym in names:
        wall, cpu = refs_time(index, sym)
        warm.append(wall)
        warm_cpu.append(cpu)
    r50, r95 = pct(rg, 50) * 1e3, pct(rg, 95) * 1e3
    print(f"refs over {len(names)} names: rg p50/p95 {r50:.1f}/{r95:.1f} ms; first "
          f"{pct(first, 50) * 1e3:.1f}/{pct(first, 95) * 1e3:.1f} ms; warm "
          f"{pct(warm, 50) * 1e3:.1f}/{pct(warm, 95) * 1e3:.1f} ms")
    rows.append((name, "refs warm p50", f"{pct(warm, 50) * 1e3:.1f} ms", f"rg -w {r50:.1f} ms",
                 pct(warm, 50) * 1e3 / r50, None))
    rows.append((name, "refs warm p95", f"{pct(warm, 95) * 1e3:.1f} ms", f"rg -w {r95:.1f} ms",
                 pct(warm, 95) * 1e3 / r95, TARGET_REFS))
    rows.append((name, "refs warm p95 CPU time", f"{pct(warm_cpu, 95) * 1e3:.1f} ms",
                 f"rg -w {pct(rg_cpu, 95) * 1e3:.1f} ms",
                 pct(warm_cpu, 95) / pct(rg_cpu, 95) if pct(rg_cpu, 95) else None, None))
    rows.append((name, "refs first query p95", f"{pct(first, 95) * 1e3:.1f} ms",
                 f"rg -w {r95:.1f} ms", pct(first, 95) * 1e3 / r95, None))

    # ---- peek and overview through the tool path
    box = Toolbox(world, index=index)
    rng = random.Random(1)
    peeks, peeks_cpu, views = [], [], []
    for _ in range(200):
        rel = rng.choice(files)
        n = len(index.lines(rel)) or 1
        start = rng.randint(1, n)
        c0 = time.process_time()
        dt, res = timed(box.execute, "peek_code_region",
                        {"file_path": rel, "start_line": start, "end_line": start + 39})
        peeks_cpu.append(time.process_time() - c0)
        assert res.metrics.error_type is None, res.text
        peeks.append(dt)
    for rel in rng.sample(files, min(60, len(files))):
        dt, res = timed(box.execute, "get_structural_overview", {"file_path": rel})
        views.append(dt)
    p50, p95 = pct(peeks, 50) * 1e3, pct(peeks, 95) * 1e3
    print(f"peek p50/p95 {p50:.2f}/{p95:.2f} ms; overview p50/p95 "
          f"{pct(views, 50) * 1e3:.1f}/{pct(views, 95) * 1e3:.1f} ms")
    rows.append((name, "peek p50", f"{p50:.2f} ms", "-", None, None))
    rows.append((name, "peek p95", f"{p95:.2f} ms", f"target {TARGET_PEEK_MS:.0f} ms",
                 p95 / TARGET_PEEK_MS, 1.0))
    rows.append((name, "peek p95 CPU time", f"{pct(peeks_cpu, 95) * 1e3:.2f} ms",
                 f"target {TARGET_PEEK_MS:.0f} ms", pct(peeks_cpu, 95) * 1e3 / TARGET_PEEK_MS, None))
    rows.append((name, "overview p50", f"{pct(views, 50) * 1e3:.1f} ms", "-", None, None))
    rows.append((name, "overview p95", f"{pct(views, 95) * 1e3:.1f} ms", "-", None, None))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("worlds", nargs="*", default=["scikit-learn", "tensorzero"])
    ap.add_argument("--symbols", type=int, default=40, help="names sampled for references")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of the cold timings")
    args = ap.parse_args(argv)
    for tool in ("ctags", "rg"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed (Debian: apt-get install "
                  f"{'universal-ctags' if tool == 'ctags' else 'ripgrep'})", file=sys.stderr)
            return 2
    rows: list[tuple] = []
    for name in args.worlds:
        rows.extend(bench_world(name, args.symbols, args.repeats))
    load = os.getloadavg()[0]
    print(f"\nload average at the end: {load:.1f} on {os.cpu_count()} cores (wall times of "
          "short operations stretch under load; the CPU-time rows do not)")
    head = ("world", "measure", "adakit", "baseline", "ratio", "target", "")
    fmt = "{:<13} {:<40} {:>10} {:>16} {:>7} {:>7} {}"
    print(fmt.format(*head))
    for world, measure, ours, base, ratio, target in rows:
        r = f"{ratio:.2f}x" if ratio is not None else ""
        t = f"<={target:g}x" if target is not None else ""
        verdict = "" if target is None else ("met" if ratio <= target else "MISSED")
        print(fmt.format(world, measure, ours, base, r, t, verdict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
