"""Benchmark of ``adakit import``: SWE-agent trajectories in, run files out, then the loader.

A corpus of 10,000 SWE-agent-style ``.traj`` files of about 30 steps is generated (not
timed; seeded): half in the command style (``open``/``goto``/``scroll_down``/``search_dir``/
``search_file``/``find_file``/``edit``/``create`` and bash: ``cat``, ``grep -rn``,
``sed -n 'A,Bp'``, ``ls``, ``python``), half in the function-calling style
(``str_replace_editor view --view_range``, ``bash``, ``submit``, with the tool calls in the
history). Observations are what those tools print (numbered windows, match lists), on the
files of a synthetic world. Then:

1. ``import_paths("swe-agent", ...)`` with 2 worker processes over all files (the target),
   and with 1 process over the first ``--single`` files, beside it: files per second;
2. memory: the peak resident memory of the importing process and of its workers, against
   the corpus size on disk (streaming keeps it flat as the corpus grows: the smaller run's
   peak is printed beside the full run's);
3. the loader's first open of the imported folder (``load_corpus`` with an empty cache,
   which also writes the parquet cache) and a second, cached open.

4. ``import_paths("claude-code", ...)`` with 2 processes over ``--claude`` generated Claude Code
   sessions of 200 lines each (Read with offset/limit, Grep, Bash ``sed -n``; issue 27), beside
   the SWE-agent rate as a ratio; and, when the importers run compiled with mypyc
   (:mod:`adakit.importers.compiled`, the first line printed says), the same sessions imported
   again by a child process with ``ADAKIT_COMPILED=0`` (pure Python), as a ratio.

Targets (issues 16 and 27): >= 500 trajectories/s on 2 cores, SWE-agent and Claude Code alike;
first open <= 10 s. Beside the wall
clock the script prints the CPU seconds spent (the importing process and its workers), and the
rate two otherwise idle cores would give (files / (CPU seconds / 2)), with the load average:
when other work shares the CPU, wall time exceeds CPU time. It prints measured values, the
ratio to each target and "met" / "MISSED", and exits 0 either way.

    python benchmarks/bench_import.py [--files 10000] [--steps 30] [--single 2000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from timing import Ratio, print_ratios

from adakit import config
from adakit.importers import compiled
from adakit.importers.batch import ImportReport, import_paths
from adakit.record import load_corpus
from adakit.synthetic import world_files

TARGET_FILES_PER_S = 500.0
TARGET_OPEN_S = 10.0
ROOT = "/testbed"


def _window(path: str, a: int, b: int, total: int) -> str:
    out = [f"[File: {ROOT}/{path} ({total} lines total)]"]
    if a > 1:
        out.append(f"({a - 1} more lines above)")
    out += [f"{n}:    value_{n} = compute(value_{n - 1})" for n in range(a, b + 1)]
    if b < total:
        out.append(f"({total - b} more lines below)")
    return "\n".join(out)


def _catn(a: int, b: int) -> str:
    return "\n".join(f"{n:6}\t    value_{n} = compute(value_{n - 1})" for n in range(a, b + 1))


def trajectory(i: int, n_steps: int, files: dict[str, int]) -> dict:
    """One generated SWE-agent trajectory (command style for even ``i``, else function calls)."""
    rng = random.Random(i)
    names = list(files)
    function_calling = i % 2 == 1
    steps, history = [], [{"role": "system", "content": "You are an autonomous programmer.",
                           "agent": "primary"},
                          {"role": "user", "content": f"Fix issue {i}: values drift.",
                           "agent": "primary"}]
    open_file, first = None, 1
    n = max(3, int(rng.gauss(n_steps, 4)))
    for k in range(n):
        f = rng.choice(names)
        total = files[f]
        roll = rng.random()
        last = k == n - 1
        if last:
            action, obs, call = "submit", "diff --git a/x b/x", ("submit", {})
        elif function_calling and roll < 0.45:
            a = rng.randint(1, max(1, total - 60))
            b = min(total, a + rng.randint(20, 60))
            action = f"str_replace_editor view {ROOT}/{f}  --view_range {a} {b}"
            obs = f"Here's the result of running `cat -n` on {ROOT}/{f}:\n" + _catn(a, b)
            call = ("str_replace_editor", {"command": "view", "path": f"{ROOT}/{f}",
                                           "view_range": [a, b]})
        elif not function_calling and roll < 0.25:
            first = rng.randint(1, max(1, total - 99))
            action, open_file = f"open {f} {first + 50}", f
            obs = _window(f, first, min(total, first + 99), total)
            call = None
        elif not function_calling and roll < 0.4 and open_file:
            first = min(files[open_file], first + 98)
            action = "scroll_down"
            obs = _window(open_file, first, min(files[open_file], first + 99), files[open_file])
            call = None
        elif roll < 0.55:
            term = f"value_{rng.randint(1, 400)}"
            hits = rng.sample(names, k=min(len(names), rng.randint(1, 6)))
            if function_calling:
                action = f"grep -rn '{term}' {ROOT}/src"
                obs = "\n".join(f"{ROOT}/{h}:{rng.randint(1, files[h])}:    {term} = 1"
                                for h in hits)
                call = ("bash", {"command": action})
            else:
                action = f'search_dir "{term}" src'
                obs = (f'Found {len(hits)} matches for "{term}" in {ROOT}/src:\n'
                       + "\n".join(f"{ROOT}/{h} (1 matches)" for h in hits)
                       + f'\nEnd of matches for "{term}" in {ROOT}/src')
                call = None
        elif roll < 0.7:
            a = rng.randint(1, max(1, total - 40))
            action = f"cd {ROOT} && sed -n '{a},{a + 39}p' {f}"
            obs = "\n".join(f"    value_{m} = compute(value_{m - 1})" for m in range(a, a + 40))
            call = ("bash", {"command": action})
        elif roll < 0.8:
            d = f.rsplit("/", 1)[0]
            action = f"ls -la {d}"
            obs = "\n".join(h.rsplit("/", 1)[-1] for h in names if h.startswith(d))
            call = ("bash", {"command": action})
        elif roll < 0.9:
            action = "python reproduce.py" if rng.random() < 0.5 else "python -m pytest tests -q -x"
            obs = "Traceback (most recent call last):\nAssertionError" if rng.random() < 0.5 \
                else "12 passed in 0.41s"
            call = ("bash", {"command": action})
        else:
            old, new = f"value_{rng.randint(1, 300)}", f"value_{rng.randint(301, 600)}"
            if function_calling:
                action = (f"str_replace_editor str_replace {ROOT}/{f}   --old_str '{old}' "
                          f"--new_str '{new}'")
                call = ("str_replace_editor", {"command": "str_replace", "path": f"{ROOT}/{f}",
                                               "old_str": old, "new_str": new})
            else:
                action = f"edit 10:11\n    {new} = compute({old})\nend_of_edit"
                call = None
            obs = f"The file {ROOT}/{f} has been edited."
        thought = f"Step {k}: looking at {f} because of value drift."
        steps.append({"action": action, "observation": obs, "response": thought,
                      "thought": thought, "execution_time": round(rng.uniform(0.05, 2.0), 3),
                      "state": {"open_file": f"{ROOT}/{open_file}" if open_file else "n/a",
                                "working_dir": ROOT}})
        msg = {"role": "assistant", "content": thought, "thought": thought, "action": action,
               "agent": "primary"}
        if function_calling:
            name, args = call if call else ("bash", {"command": action})
            msg["tool_calls"] = [{"id": f"c{k}", "type": "function",
                                  "function": {"name": name, "arguments": json.dumps(args)}}]
        history += [msg, {"role": "tool" if function_calling else "user", "content": obs,
                          "agent": "primary"}]
    return {"trajectory": steps, "history": history,
            "info": {"exit_status": "submitted", "submission": "diff --git a/x b/x",
                     "swe_agent_version": "1.1.0" if function_calling else "",
                     "model_stats": {"instance_cost": round(rng.uniform(0.1, 2), 3),
                                     "tokens_sent": 50000, "tokens_received": 900,
                                     "api_calls": n}},
            "replay_config": json.dumps({"agent": {"model": {"name": "gpt-4o"}}})}


def _cc_line(kind: str, uid: str, parent: str | None, when: int, message: dict, **extra: object) -> str:
    rec = {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": ROOT,
           "sessionId": "s", "version": "2.0.14", "gitBranch": "main", "type": kind, "uuid": uid,
           "timestamp": f"2025-07-10T10:{when // 60 % 60:02d}:{when % 60:02d}.000Z",
           "message": message, **extra}
    return json.dumps(rec)


def claude_session(i: int, n_lines: int, files: dict[str, int]) -> str:
    """One generated Claude Code session of about ``n_lines`` lines: a prompt, then pairs of an
    assistant ``tool_use`` (Read with offset/limit, Grep, Bash ``sed -n``) and its ``tool_result``."""
    rng = random.Random(i)
    names = list(files)
    lines = [_cc_line("user", f"{i}-0", None, 0, {"role": "user", "content": f"Explain issue {i}."})]
    parent = f"{i}-0"
    for k in range(1, (n_lines - 1) // 2 + 1):
        f = rng.choice(names)
        total, roll = files[f], rng.random()
        a = rng.randint(1, max(1, total - 40))
        if roll < 0.5:
            tool = ("Read", {"file_path": f"{ROOT}/{f}", "offset": a, "limit": 40})
            result = "\n".join(f"{n:6}\u2192    value_{n} = compute(value_{n - 1})" for n in range(a, a + 40))
        elif roll < 0.8:
            term = f"value_{rng.randint(1, 400)}"
            tool = ("Grep", {"pattern": term, "path": f"{ROOT}/src", "output_mode": "content", "-n": True})
            result = "\n".join(f"{ROOT}/{h}:{rng.randint(1, files[h])}:    {term} = 1"
                               for h in rng.sample(names, k=min(len(names), 4)))
        else:
            tool = ("Bash", {"command": f"sed -n '{a},{a + 29}p' {ROOT}/{f}"})
            result = "\n".join(f"    value_{m} = compute(value_{m - 1})" for m in range(a, a + 30))
        call_id, uid = f"toolu_{i}_{k}", f"{i}-{2 * k - 1}"
        lines.append(_cc_line("assistant", uid, parent, 2 * k - 1, {
            "role": "assistant", "model": "claude-sonnet-4", "content": [
                {"type": "thinking", "thinking": f"Step {k}: {f} next."},
                {"type": "tool_use", "id": call_id, "name": tool[0], "input": tool[1]}]}))
        parent = f"{i}-{2 * k}"
        lines.append(_cc_line("user", parent, uid, 2 * k, {"role": "user", "content": [
            {"tool_use_id": call_id, "type": "tool_result", "content": result}]}))
    return "\n".join(lines) + "\n"


def generate_claude(folder: Path, n_files: int, n_lines: int) -> int:
    """Write the Claude Code sessions; returns their size in bytes."""
    files = world_files("flask")
    size = 0
    for i in range(n_files):
        sub = folder / f"project{i // 1000:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        text = claude_session(i, n_lines, files)
        (sub / f"session-{i:05d}.jsonl").write_text(text)
        size += len(text)
    return size


def generate(folder: Path, n_files: int, n_steps: int) -> int:
    """Write the corpus; returns its size in bytes."""
    files = world_files("flask")
    size = 0
    for i in range(n_files):
        sub = folder / f"batch{i // 1000:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        text = json.dumps(trajectory(i, n_steps, files))
        (sub / f"owner__repo-{i:05d}.traj").write_text(text)
        size += len(text)
    return size


def _peak_mb(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024.0


def _cpu() -> float:
    """CPU seconds of this process and of its finished worker processes."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _timed_import(fmt: str, src: Path, out: Path) -> tuple[ImportReport, float, float]:
    """(the report, wall seconds, CPU seconds) of one import with 2 processes."""
    t0, c0 = time.perf_counter(), _cpu()
    rep = import_paths(fmt, [src], out, jobs=2, progress=False, echo=False)
    return rep, time.perf_counter() - t0, _cpu() - c0


def _pure_python_import(fmt: str, src: Path, out: Path) -> tuple[int, float, float]:
    """:func:`_timed_import` in a child process whose importers are pure Python."""
    import subprocess

    proc = subprocess.run([sys.executable, __file__, "--import-only", fmt, str(src), str(out)],
                          capture_output=True, text=True, env={**os.environ, compiled.SWITCH: "0"},
                          check=True)
    n, wall, cpu = json.loads(proc.stdout.strip().splitlines()[-1])
    return int(n), float(wall), float(cpu)


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--import-only"]:  # the child of _pure_python_import
        fmt, src, out = sys.argv[2:5]
        rep, wall, cpu = _timed_import(fmt, Path(src), Path(out))
        print(json.dumps([len(rep.imported), wall, cpu]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--single", type=int, default=2000, help="files imported with 1 process")
    ap.add_argument("--claude", type=int, default=10_000, help="Claude Code sessions of 200 lines")
    ap.add_argument("--quick", action="store_true",
                    help="200 files, 100 with 1 process, 100 Claude Code sessions (seconds)")
    args = ap.parse_args(argv)
    if args.quick:
        args.files, args.single, args.claude = 200, 100, 100
    config.DATA.mkdir(parents=True, exist_ok=True)
    print(compiled.state().line())
    work = Path(tempfile.mkdtemp(prefix="bench-import-", dir=config.DATA))
    try:
        src = work / "src"
        t0 = time.perf_counter()
        size = generate(src, args.files, args.steps)
        print(f"generated {args.files:,} SWE-agent trajectories ({args.steps} steps on average), "
              f"{size / 1e6:.0f} MB, in {time.perf_counter() - t0:.1f} s (not timed)")
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")

        single = sorted(src.rglob("*.traj"))[: args.single]
        one = work / "one"
        t0, c0 = time.perf_counter(), _cpu()
        rep1 = import_paths("swe-agent", single, one, jobs=1, progress=False, echo=False)
        t_one, c_one = time.perf_counter() - t0, _cpu() - c0
        peak_small = _peak_mb(resource.RUSAGE_SELF)

        out = work / "out"
        t0, c0 = time.perf_counter(), _cpu()
        rep = import_paths("swe-agent", [src], out, jobs=2, progress=False, echo=False)
        t_two, c_two = time.perf_counter() - t0, _cpu() - c0
        n1, n2 = len(rep1.imported), len(rep.imported)
        turns = sum(r.turns for r in rep.imported)
        rate1, rate2 = n1 / t_one, n2 / t_two
        idle2 = n2 / (c_two / 2)
        print()
        print(f"{'import':<30}{'files':>8}{'turns':>10}{'wall s':>9}{'files/s':>9}{'CPU s':>8}"
              f"{'ms CPU/file':>13}")
        print(f"{'1 process':<30}{n1:>8,}{sum(r.turns for r in rep1.imported):>10,}{t_one:>9.1f}"
              f"{rate1:>9.0f}{c_one:>8.1f}{1000 * c_one / n1:>13.2f}")
        print(f"{'2 processes':<30}{n2:>8,}{turns:>10,}{t_two:>9.1f}{rate2:>9.0f}{c_two:>8.1f}"
              f"{1000 * c_two / n2:>13.2f}")
        print(f"  skipped: {len(rep.skipped)} {dict(rep.counts()) or ''}")
        print(f"  target >= {TARGET_FILES_PER_S:.0f} files/s on 2 cores: wall {rate2:.0f}/s "
              f"({rate2 / TARGET_FILES_PER_S:.2f}x -> {_verdict(rate2 >= TARGET_FILES_PER_S)}); "
              f"2 idle cores by CPU time {idle2:.0f}/s ({idle2 / TARGET_FILES_PER_S:.2f}x -> "
              f"{_verdict(idle2 >= TARGET_FILES_PER_S)}); load average now "
              f"{os.getloadavg()[0]:.2f}")
        peak_main = _peak_mb(resource.RUSAGE_SELF)
        peak_workers = _peak_mb(resource.RUSAGE_CHILDREN)
        print(f"  peak memory: importing process {peak_main:.0f} MB (after {len(single):,} files: "
              f"{peak_small:.0f} MB), largest worker {peak_workers:.0f} MB; corpus on disk "
              f"{size / 1e6:.0f} MB")

        t0, c0 = time.perf_counter(), _cpu()
        corpus = load_corpus(out)
        t_open, c_open = time.perf_counter() - t0, _cpu() - c0
        t0 = time.perf_counter()
        load_corpus(out)
        t_cached = time.perf_counter() - t0
        print()
        print(f"loader first open: {len(corpus.runs):,} runs, {len(corpus.turns):,} turns, "
              f"{len(corpus.reads):,} reads in {t_open:.1f} s wall, {c_open:.1f} s CPU "
              f"(target <= {TARGET_OPEN_S:.0f} s: {t_open / TARGET_OPEN_S:.2f}x -> "
              f"{_verdict(t_open <= TARGET_OPEN_S)}; by CPU {_verdict(c_open <= TARGET_OPEN_S)}); "
              f"cached open {t_cached:.2f} s")
        cc_src = work / "claude"
        size_cc = generate_claude(cc_src, args.claude, 200)
        rep_cc, t_cc, c_cc = _timed_import("claude-code", cc_src, work / "claude-out")
        n_cc = len(rep_cc.imported)
        rate_cc, idle_cc = n_cc / t_cc, n_cc / (c_cc / 2)
        print(f"\nClaude Code: {n_cc:,} of {args.claude:,} sessions of 200 lines "
              f"({size_cc / 1e6:.0f} MB; skipped {len(rep_cc.skipped)}), "
              f"{sum(r.turns for r in rep_cc.imported):,} turns, in {t_cc:.1f} s wall, {c_cc:.1f} s CPU"
              f" ({1000 * c_cc / max(n_cc, 1):.2f} ms CPU a session)")
        shutil.rmtree(work / "claude-out")
        pure = None
        if compiled.state().compiled:
            n_py, t_py, c_py = _pure_python_import("claude-code", cc_src, work / "claude-out-py")
            pure = n_py / t_py
            print(f"Claude Code, pure Python (ADAKIT_COMPILED=0): {n_py:,} sessions in {t_py:.1f} s "
                  f"wall, {c_py:.1f} s CPU ({1000 * c_py / max(n_py, 1):.2f} ms CPU a session)")
        print_ratios([
            Ratio("import, 2 processes, wall (files/s)", rate2, TARGET_FILES_PER_S, ">=", fmt="{:.0f}"),
            Ratio("import, 2 idle cores by CPU time (files/s)", idle2, TARGET_FILES_PER_S, ">=",
                  fmt="{:.0f}"),
            Ratio("import, 2 processes vs 1 (files/s)", rate2, baseline=rate1, fmt="{:.0f}"),
            Ratio("loader first open, wall (s)", t_open, TARGET_OPEN_S),
            Ratio("loader first open, CPU (s)", c_open, TARGET_OPEN_S),
            Ratio("loader cached open vs first (s)", t_cached, baseline=t_open),
            Ratio("Claude Code import, 2 processes, wall (files/s)", rate_cc, TARGET_FILES_PER_S, ">=",
                  fmt="{:.0f}"),
            Ratio("Claude Code import, 2 idle cores by CPU time (files/s)", idle_cc,
                  TARGET_FILES_PER_S, ">=", fmt="{:.0f}"),
            Ratio("Claude Code vs SWE-agent import (files/s)", rate_cc, baseline=rate2, fmt="{:.0f}"),
            *([Ratio("Claude Code import, compiled vs pure Python (files/s)", rate_cc,
                     baseline=pure, fmt="{:.0f}")] if pure else []),
        ])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
