"""Process diagnostics on synthetic runs (issue 15): effect labels and every detector over
10,000 runs, and 1,000 alignments of 30-step runs at the action and file levels.

Measures, on ``adakit.diagnostics.steps.synthetic_traces`` (half read-only runs that conclude,
half runs that also edit, execute and submit a patch; drawing them is not timed):

1. effect labels for every step (:func:`adakit.diagnostics.steps.label_trace`) and all six
   detectors with their firing rows (:func:`adakit.diagnostics.detectors.detect`) over 10,000
   runs of ~30 steps; target <= 10 s;
2. 1,000 alignments (:func:`adakit.diagnostics.align.align`, LCS scoring 1/0/0, first
   divergences and classified spans) of pairs of 30-step runs at all three levels (the symbol
   level from a stand-in look-up: a block of 40 lines per symbol, cached like the code
   index's); target <= 5 s.

Best of ``--repeats`` passes; wall and CPU seconds, and the load average around the runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from timing import Ratio, print_ratios, timed

from adakit.diagnostics import align, detectors, steps

LABEL_TARGET_S = 10.0
ALIGN_TARGET_S = 5.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10_000, help="synthetic runs (default 10000)")
    ap.add_argument("--pairs", type=int, default=1000, help="alignments (default 1000)")
    ap.add_argument("--steps", type=int, default=30, help="steps per aligned run (30)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3, help="passes; the best is reported")
    ap.add_argument("--quick", action="store_true", help="300 runs and 50 pairs, one pass (seconds)")
    args = ap.parse_args(argv)
    if args.quick:
        args.runs, args.pairs, args.repeats = 300, 50, 1

    t0 = time.perf_counter()
    traces = steps.synthetic_traces(args.runs, seed=args.seed)
    n_steps = sum(len(tr.steps) for tr in traces)
    print(f"synthetic traces (seed {args.seed}): {len(traces):,} runs, {n_steps:,} steps; drawn "
          f"in {time.perf_counter() - t0:.1f} s (not timed)")
    load_before = os.getloadavg()[0]

    def label_and_detect():
        for tr in traces:
            steps.label_trace(tr)
        return detectors.detect(traces)

    lab_wall, lab_cpu, (firings, per_run) = timed(label_and_detect, args.repeats)
    labels = [x for tr in traces for x in tr.labels]
    shares = {x: labels.count(x) / len(labels) for x in steps.LABELS}
    print("labels: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in shares.items()))
    print(f"firings: {len(firings):,} ({', '.join(f'{d} {n}' for d, n in firings['detector'].value_counts().items())})")

    rng = np.random.default_rng(args.seed)
    pool = [tr for tr in steps.synthetic_traces(2 * args.pairs, seed=args.seed + 1,
                                                mean_steps=args.steps + 10)]
    for tr in pool:
        tr.steps = tr.steps[:args.steps]
    pairs = rng.integers(0, len(pool), size=(args.pairs, 2))

    blocks: dict[tuple[str, int], str] = {}

    def symbol_of(file: str, line: int) -> str:
        key = (file, line)
        if key not in blocks:
            blocks[key] = f"block{line // 40}"
        return blocks[key]

    def align_all():
        return [align.align(pool[i].steps, pool[j].steps, symbol_of=symbol_of)
                for i, j in pairs]

    al_wall, al_cpu, results = timed(align_all, args.repeats)
    lengths = [len(r.steps_a) for r in results]
    spans = sum(len(r.spans) for r in results)
    print(f"alignments: {len(results)} pairs of runs of {int(np.mean(lengths))} action steps; "
          f"mean LCS {np.mean([r.levels['action'].score for r in results]):.1f} (action), "
          f"{np.mean([r.levels['file'].score for r in results]):.1f} (file), "
          f"{np.mean([r.levels['symbol'].score for r in results]):.1f} (symbol); "
          f"{spans:,} divergence spans")

    labelled = f"labels + 6 detectors, {len(traces):,} runs"
    aligned = f"alignments (3 levels), {len(results):,} pairs of {args.steps} steps"
    print_ratios([
        Ratio(f"{labelled}, wall (s)", lab_wall, LABEL_TARGET_S),
        Ratio(f"{labelled}, CPU (s)", lab_cpu, LABEL_TARGET_S),
        Ratio(f"{aligned}, wall (s)", al_wall, ALIGN_TARGET_S),
        Ratio(f"{aligned}, CPU (s)", al_cpu, ALIGN_TARGET_S),
    ])
    print(f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, on "
          f"{os.cpu_count()} cores" + (" (the CPU was shared: wall > CPU)"
                                       if lab_wall + al_wall > 1.3 * (lab_cpu + al_cpu) else ""))
    if args.runs != 10_000 or args.pairs != 1000:
        print(f"note: the targets are for 10,000 runs and 1,000 pairs; this run used "
              f"{args.runs:,} and {args.pairs:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
