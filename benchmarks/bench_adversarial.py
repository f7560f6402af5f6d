"""Benchmark of the reply parser and the sandbox against adversarial input (issue 17).

A model reply is untrusted text. Before issue 17 the parser matched tags with a lazy
backreference expression that rescans to the end of the reply for every unclosed tag, so its
time grew with the square of the reply. Printed here:

1. ``parse_reply`` on 1 MB adversarial replies of several shapes, best of ``--repeat`` runs:
   as the agent calls it (the 256,000-character cap refuses them unread) and with the cap
   lifted (``max_chars=None``: the whole megabyte is scanned), wall and CPU time (the CPU
   time tells a slow parser from a shared machine). Target: <= 100 ms each. Beside it, the
   old expression's own scan where every tag closes (elsewhere it rescans the rest of the
   reply once per unclosed tag and is not run; see 2.).
2. The tag scan alone, the old expression beside the linear scanner, on growing replies of
   unclosed tags: the old time quadruples when the size doubles, the new one doubles.
3. A well-formed reply (the normal turn), old and new, so the common case is seen not to pay.
4. ``World.resolve`` on a 5 MB path and ``parse_function_call`` on arguments nested 100,000
   deep (before: more than 30 s, and a RecursionError).

The script prints what it measured and "met" / "MISSED"; it never fails on a missed target.

    python benchmarks/bench_adversarial.py [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from timing import Ratio, print_ratios

from adakit.apparatus.protocol import (
    _OPEN_RE,
    MAX_REPLY_CHARS,
    _every_tag_closes,
    parse_function_call,
    parse_reply,
    tags,
)
from adakit.apparatus.tools import TOOL_SPECS
from adakit.apparatus.world import SandboxError, World

TARGET_MS = 100.0
MB = 1_000_000
# the expression the linear scanner replaced, for the side-by-side figures
OLD_TAG_RE = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)>(.*?)</\1\s*>", re.S)
WELL_FORMED = (
    "<thinking>The request handler is next; read where the app dispatches.</thinking>\n"
    "<peek_code_region>\n<file_path>src/flask/app.py</file_path>\n<start_line>860</start_line>\n"
    "<end_line>910</end_line>\n</peek_code_region>"
)


def shapes(size: int) -> dict[str, str]:
    """Adversarial replies of about ``size`` characters."""

    def fill(unit: str) -> str:
        return (unit * (size // len(unit) + 1))[:size]

    return {
        "unclosed tags <a><a>...": fill("<a>"),
        "tool tags, one closed at the end": fill("<bookmark>")[: size - 11] + "</bookmark>",
        "closing tags of other names": fill("<b></a>"),
        "dense well-formed elements": fill("<a>x</a>"),
        "unclosed <thinking> then tags": "<thinking>" + fill("<peek_code_region>")[10:],
        "parameter soup <file_path>x</file_path>": fill("<file_path>x</file_path>"),
    }


def best_ms(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """The best wall and the best CPU milliseconds of ``repeat`` calls."""
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    return min(walls), min(cpus)


def verdict(ms: float) -> str:
    return "met" if ms <= TARGET_MS else "MISSED"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (the best is kept)")
    ap.add_argument("--quick", action="store_true",
                    help="one run per figure, smaller sizes in the old-vs-new table (seconds)")
    args = ap.parse_args(argv)
    repeat = 1 if args.quick else max(1, args.repeat)
    normal = 20 if args.quick else 200

    print(f"1. parse_reply on 1 MB adversarial replies (best of {repeat}, wall / CPU of this "
          f"process; target <= {TARGET_MS:.0f} ms; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores)")
    print(f"   {'shape':<42} {'as called':>10} {'cap lifted, wall / CPU':>24} {'old expr.':>10}"
          "  outcome")
    worst_called = worst_wall = worst_cpu = 0.0
    for name, text in shapes(MB).items():
        called, _ = best_ms(lambda t=text: parse_reply(t, TOOL_SPECS), repeat)
        wall, cpu = best_ms(lambda t=text: parse_reply(t, TOOL_SPECS, max_chars=None), repeat)
        if _every_tag_closes(text, set(_OPEN_RE.findall(text))):  # linear for the old one too
            old = f"{best_ms(lambda t=text: list(OLD_TAG_RE.finditer(t)), 1)[0]:>7.1f} ms"
        else:
            old = "not run"
        kind = parse_reply(text, TOOL_SPECS, max_chars=None).error.kind
        worst_called, worst_wall, worst_cpu = (
            max(worst_called, called), max(worst_wall, wall), max(worst_cpu, cpu))
        print(f"   {name:<42} {called:>7.2f} ms {wall:>11.1f} / {cpu:>6.1f} ms {old:>10}  {kind}")
    print(f"   as called (the {MAX_REPLY_CHARS:,}-character cap refuses them unread): worst "
          f"{worst_called:.2f} ms = {worst_called / TARGET_MS:.4f} x target: {verdict(worst_called)}")
    print(f"   cap lifted (the whole megabyte parsed): worst {worst_wall:.1f} ms wall = "
          f"{worst_wall / TARGET_MS:.2f} x target: {verdict(worst_wall)}; worst CPU "
          f"{worst_cpu:.1f} ms = {worst_cpu / TARGET_MS:.2f} x target: {verdict(worst_cpu)}")

    sizes = [1_000, 2_000, 4_000] if args.quick else [2_000, 4_000, 8_000, 16_000]
    print("\n2. the tag scan on unclosed tags '<a>' * n/3, old expression vs linear scanner")
    print(f"   {'size':>8} {'old':>10} {'new':>9} {'old/new':>9}")
    for size in sizes:
        text = "<a>" * (size // 3)
        old = best_ms(lambda t=text: list(OLD_TAG_RE.finditer(t)), 1)[0]
        new = best_ms(lambda t=text: tags(t), repeat)[0]
        print(f"   {size:>8,} {old:>8.1f} ms {new:>6.3f} ms {old / max(new, 1e-6):>8.0f}x")
    scan_old, scan_new = old, new
    print("   (old: four times the time per doubling; at 64 kB it took 15 s, at 1 MB it "
          "did not finish in 45 s on this machine)")

    print(f"\n3. a well-formed reply, the normal turn (best of {normal})")
    old = best_ms(lambda: [(m.group(1), m.group(2)) for m in OLD_TAG_RE.finditer(WELL_FORMED)],
                  normal)[0]
    new = best_ms(lambda: tags(WELL_FORMED), normal)[0]
    whole = statistics.median([best_ms(lambda: parse_reply(WELL_FORMED, TOOL_SPECS), 1)[0]
                               for _ in range(normal)])
    print(f"   tag scan: old {old * 1000:.1f} us, new {new * 1000:.1f} us; "
          f"parse_reply median {whole * 1000:.1f} us")

    print("\n4. the sandbox and function mode")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "a.py").write_text("x = 1\n")
        world = World(tmp)

        def resolve_huge() -> None:
            try:
                world.resolve("a/" * 2_500_000)
            except SandboxError:
                pass

        ms = resolve_ms = best_ms(resolve_huge, repeat)[0]
        print(f"   World.resolve on a 5 MB path: {ms:.2f} ms (refused) = "
              f"{ms / TARGET_MS:.3f} x target: {verdict(ms)}")
    deep = '{"file_path": ' + "[" * 100_000 + "]" * 100_000 + ', "start_line": 1}'
    ms = best_ms(lambda: parse_function_call("peek_code_region", deep, TOOL_SPECS), repeat)[0]
    kind = parse_function_call("peek_code_region", deep, TOOL_SPECS).kind
    print(f"   parse_function_call, arguments nested 100,000 deep: {ms:.2f} ms ({kind}) = "
          f"{ms / TARGET_MS:.3f} x target: {verdict(ms)}")
    print_ratios([
        Ratio("1 MB replies as called, worst (ms)", worst_called, TARGET_MS),
        Ratio("1 MB replies, cap lifted, worst wall (ms)", worst_wall, TARGET_MS),
        Ratio("1 MB replies, cap lifted, worst CPU (ms)", worst_cpu, TARGET_MS),
        Ratio(f"tag scan, {sizes[-1]:,} chars unclosed, new vs old (ms)", scan_new,
              baseline=scan_old, fmt="{:.3f}"),
        Ratio("well-formed reply, tag scan, new vs old (us)", new * 1000, baseline=old * 1000,
              fmt="{:.1f}"),
        Ratio("World.resolve, 5 MB path (ms)", resolve_ms, TARGET_MS),
        Ratio("parse_function_call, nested 100,000 deep (ms)", ms, TARGET_MS),
    ])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
