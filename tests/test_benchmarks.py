"""Benchmarks that cannot rot: every ``benchmarks/bench_*.py`` runs in its ``--quick`` mode
(a subprocess, as ``make bench`` runs it) and must exit 0 and end with its side-by-side ratio
table. The table's shape is checked, never a timing. A new bench file is covered by the glob.
The selected benches run ``QUICK_JOBS`` at a time (much of their time is spent waiting on
sleeps, fsyncs and subprocesses), so their timings are shared-machine figures here."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHES = sorted((ROOT / "benchmarks").glob("bench_*.py"))
COLUMNS = ["measure", "value", "baseline", "target", "ratio", "verdict"]
QUICK_TIMEOUT_S = 120  # per bench; on an idle 2-core machine each takes a few seconds
QUICK_JOBS = 3


def _number(cell: str) -> bool:
    try:
        return not math.isnan(float(cell.replace(",", "")))
    except ValueError:
        return False


def ratio_rows(output: str) -> list[list[str]]:
    """The rows of the one ratio table in a bench's output, each split into its six cells;
    fails the test when there is no such table, or more than one, or a row is out of shape."""
    lines = output.splitlines()
    heads = [i for i, line in enumerate(lines) if line.split() == COLUMNS]
    assert len(heads) == 1, f"expected one ratio table header {COLUMNS}, found {len(heads)}"
    rows = []
    for line in lines[heads[0] + 1:]:
        if not line.strip():
            break
        cells = line.rsplit(None, len(COLUMNS) - 1)
        assert len(cells) == len(COLUMNS), f"row out of shape: {line!r}"
        measure, value, baseline, target, ratio, verdict = cells
        assert measure.strip() and not _number(measure), f"row without a measure: {line!r}"
        assert value == "-" or _number(value), f"value is not a number: {line!r}"
        assert baseline == "-" or _number(baseline), f"baseline is not a number: {line!r}"
        assert target == "-" or (target[:2] in ("<=", ">=")
                                 and _number(target[2:].removesuffix("x"))), line
        assert target.endswith("x") <= (baseline != "-"), f"a relative target needs a baseline: {line!r}"
        assert ratio == "-" or _number(ratio), f"ratio is not a number: {line!r}"
        assert verdict in ("met", "MISSED", "-"), f"verdict is not met / MISSED / -: {line!r}"
        if verdict != "-":
            assert target != "-" and _number(ratio), f"a verdict without a target: {line!r}"
        rows.append(cells)
    assert rows, "the ratio table has no rows"
    return rows


def _run_quick(bench: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, str(bench), "--quick"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=QUICK_TIMEOUT_S)


@pytest.fixture(scope="module")
def quick_runs(request: pytest.FixtureRequest, flask_world) -> dict[Path, subprocess.CompletedProcess[str]]:
    """Each selected bench's ``--quick`` run, ``QUICK_JOBS`` at a time (the flask world the
    agent, tools, paid and models benches open is fetched first, once)."""
    chosen = sorted({item.callspec.params["bench"] for item in request.session.items
                     if "bench" in getattr(getattr(item, "callspec", None), "params", {})})
    with ThreadPoolExecutor(QUICK_JOBS) as pool:
        return dict(zip(chosen, pool.map(_run_quick, chosen), strict=True))


@pytest.mark.slow
@pytest.mark.timeout(2 * QUICK_TIMEOUT_S * len(BENCHES) // QUICK_JOBS)
@pytest.mark.parametrize("bench", BENCHES, ids=[b.stem for b in BENCHES])
def test_bench_quick_mode_completes_with_its_ratio_table(bench: Path, quick_runs) -> None:
    proc = quick_runs[bench]
    assert proc.returncode == 0, f"{bench.name} --quick exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    rows = ratio_rows(proc.stdout)
    assert any(r[5] != "-" for r in rows), f"{bench.name}: no row is checked against a target"


def test_benches_are_found() -> None:
    assert len(BENCHES) >= 9, [b.name for b in BENCHES]


# ------------------------------------------------------------------------- the ratio table


def _timing():
    spec = importlib.util.spec_from_file_location("bench_timing", ROOT / "benchmarks" / "timing.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_ratio_rows_compare_with_the_target_or_the_baseline() -> None:
    t = _timing()
    assert t.Ratio("p50 (ms)", 8.0, 5.0).verdict() == "MISSED"
    assert t.Ratio("p50 (ms)", 4.0, 5.0).verdict() == "met"
    assert t.Ratio("files/s", 600.0, 500.0, ">=").verdict() == "met"
    assert t.Ratio("files/s", 400.0, 500.0, ">=").verdict() == "MISSED"
    # against a baseline the ratio is value / baseline and the target bounds it
    cold = t.Ratio("cold index (s)", 2.0, 3.0, baseline=0.5)
    assert cold.ratio() == 4.0 and cold.verdict() == "MISSED"
    assert t.Ratio("cold index (s)", 1.0, 3.0, baseline=0.5).verdict() == "met"
    assert t.Ratio("read only", 1.0).verdict() == "-"
    assert t.Ratio("no value", float("nan"), 5.0).verdict() == "-"


def test_ratio_table_has_the_shape_the_quick_test_reads() -> None:
    t = _timing()
    table = t.ratio_table([
        t.Ratio("p50 per turn, all (ms)", 8.34, 5.0),
        t.Ratio("cold index vs ctags (s)", 0.003, 3.0, baseline=0.104, fmt="{:.3f}"),
        t.Ratio("throughput (turns/s)", 14134.0, fmt="{:,.0f}"),
        t.Ratio("files/s", 927.0, 500.0, ">=", fmt="{:.0f}"),
        t.Ratio("missing", None, 10.0),
    ])
    rows = ratio_rows(table + "\n")
    assert [r[0].strip() for r in rows][:2] == ["p50 per turn, all (ms)", "cold index vs ctags (s)"]
    assert [r[5] for r in rows] == ["MISSED", "met", "-", "met", "-"]
    assert rows[1][3] == "<=3x" and rows[3][3] == ">=500" and rows[2][1] == "14,134"
    with pytest.raises(ValueError, match="op"):
        t.ratio_table([t.Ratio("x", 1.0, 2.0, "<")])
    with pytest.raises(ValueError, match="at least one row"):
        t.ratio_table([])
    with pytest.raises(AssertionError, match="one ratio table"):
        ratio_rows("measure value target ratio verdict\nx 1 2 0.5 met\n")


# --------------------------------------------------------------- check_references.py


def _check_references(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ADAKIT_CACHE": str(tmp / "cache")}
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "check_references.py"),
                           *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=QUICK_TIMEOUT_S)


def test_check_references_runs_on_the_fixtures(tmp_path: Path) -> None:
    """The reference checks (not benches, so not in the glob above) stay runnable: texts
    written twice are the same, partial parses answer as whole files, and the Cython lexer
    is compared with the grammar word by word."""
    for out in ("a.json", "b.json"):
        proc = _check_references("texts", str(tmp_path / out), "fixtures", "--names", "20",
                                 tmp=tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
    proc = _check_references("diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"),
                             tmp=tmp_path)
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith(": 0 differ"), proc.stdout
    proc = _check_references("units", "fixtures", tmp=tmp_path)
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith(", 0 differ"), proc.stdout
    proc = _check_references("cython", "fixtures", tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first = proc.stdout.splitlines()[0]
    words, same = (int(x.replace(",", "")) for x in
                   re.findall(r"([\d,]+) words .* agrees for ([\d,]+)", first)[0])
    assert words > 100 and same / words > 0.8, first  # the rest: keywords (cdef, cimport, ...)
    assert "lexer     import" in proc.stdout  # cimport lines: the grammar calls them references
