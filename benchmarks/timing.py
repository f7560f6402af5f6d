"""What the benchmark scripts share: best-of-N timing with wall and CPU seconds."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any


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
