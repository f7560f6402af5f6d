"""What the benchmark scripts share: best-of-N timing with wall and CPU seconds, and the
side-by-side ratio table every script ends with (``tests/test_benchmarks.py`` reads its shape).

The table has six columns: ``measure value baseline target ratio verdict``. A row with a
baseline compares the value with it (the ratio is value / baseline, and the target bounds that
ratio, printed with an ``x``: ``<=3x``); a row without one compares the value with its target
(ratio value / target). A row without a target is there for reading (ratio and verdict ``-``).
Every cell right of the measure is one word, so a reader can split a row from the right.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

COLUMNS = ("measure", "value", "baseline", "target", "ratio", "verdict")


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    """Best wall seconds of ``repeats`` calls of ``fn``, that call's CPU seconds, and its result."""
    best: tuple[float, float, Any] = (math.inf, math.inf, None)
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        if wall < best[0]:
            best = (wall, cpu, out)
    return best


@dataclass(frozen=True)
class Ratio:
    """One row of the ratio table: a measured value, optionally beside a baseline, against an
    optional target (``op`` ``<=`` when lower is better, ``>=`` when higher is)."""

    measure: str
    value: float | None
    target: float | None = None
    op: str = "<="
    baseline: float | None = None
    fmt: str = "{:.2f}"

    def ratio(self) -> float | None:
        """value / baseline when there is a baseline, else value / target (None if undefined)."""
        over = self.baseline if self.baseline is not None else self.target
        if _missing(self.value) or _missing(over) or over == 0:
            return None
        return self.value / over

    def verdict(self) -> str:
        """``met`` or ``MISSED`` against the target, ``-`` without a target or a value."""
        r = self.ratio()
        if self.target is None or r is None:
            return "-"
        bound = self.target if self.baseline is not None else 1.0
        return "met" if (r <= bound if self.op == "<=" else r >= bound) else "MISSED"


def _missing(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _cell(x: float | None, fmt: str) -> str:
    return "-" if _missing(x) else fmt.format(x).replace(" ", "")


def ratio_table(rows: Iterable[Ratio]) -> str:
    """The side-by-side ratio table of ``rows`` (a header line, then one line per row)."""
    rows = list(rows)
    if not rows:
        raise ValueError("a ratio table needs at least one row")
    if bad := [r.op for r in rows if r.op not in ("<=", ">=")]:
        raise ValueError(f"a target's op is '<=' or '>=', not {bad[0]!r}")
    cells = [COLUMNS]
    for r in rows:
        ratio = r.ratio()
        target = "-" if r.target is None else (
            f"{r.op}{r.target:g}" + ("x" if r.baseline is not None else ""))
        cells.append((r.measure, _cell(r.value, r.fmt), _cell(r.baseline, r.fmt), target,
                      "-" if ratio is None else f"{ratio:.3g}", r.verdict()))
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                  for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()
        for row in cells)


def print_ratios(rows: Iterable[Ratio]) -> None:
    """Print the ratio table of ``rows`` between blank lines (a blank line ends the table)."""
    print(f"\n{ratio_table(rows)}\n", flush=True)
