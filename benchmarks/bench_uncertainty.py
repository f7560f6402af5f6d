"""Uncertainty on the 10,000-run synthetic corpus: bootstrap intervals of Fig. 7's tag shares
and all-pairs sequence similarity (issue 12).

Measures, on ``adakit.synthetic.synthetic_tables(10_000, seed=0)`` (drawing the corpus and
tagging its transitions are not timed):

1. 1,000 bootstrap resamples of Fig. 7's tag shares by model x condition
   (:func:`adakit.lenses.policy.tag_share_intervals`: per-run tag counts, resamples within the
   16 groups, percentile intervals); target <= 10 s;
2. all-pairs normalised LCS (match 1, mismatch 0, gap 0, divided by the longer length) of the
   canonical tool sequences within 100 cells of 5 runs each (1,000 pairs,
   :func:`adakit.variance.sequences.pairwise_scores` after :func:`adakit.variance.sequences.run_sequences`);
   target <= 5 s. The plain one-pair dynamic programme on the same pairs is printed beside it.

Best of ``--repeats`` passes; wall and CPU seconds, and the load average around the runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from itertools import combinations

import numpy as np
from timing import Ratio, print_ratios, timed

from adakit.lenses import policy
from adakit.synthetic import synthetic_tables
from adakit.variance import sequences

BOOTSTRAP_TARGET_S = 10.0
LCS_TARGET_S = 5.0


def cells_of(runs, n_cells: int, per_cell: int) -> list[list[str]]:
    """The first ``n_cells`` (model, world, task, condition) cells holding ``per_cell`` runs,
    each with its first ``per_cell`` runs."""
    cells = []
    for _, grp in runs.groupby(["model", "world", "task", "condition"], sort=True):
        if len(grp) >= per_cell:
            cells.append(list(grp["run_id"].iloc[:per_cell]))
        if len(cells) == n_cells:
            break
    return cells


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10_000, help="synthetic runs (default 10000)")
    ap.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (1000)")
    ap.add_argument("--cells", type=int, default=100, help="cells for the LCS (100)")
    ap.add_argument("--per-cell", type=int, default=5, help="runs per cell (5)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3, help="passes; the best is reported")
    ap.add_argument("--quick", action="store_true",
                    help="1,000 runs, 200 resamples, one pass, cells of 3 runs (1,000 runs hold no cell "
                    "of 5)")
    args = ap.parse_args(argv)
    if args.quick:
        args.runs, args.resamples, args.repeats, args.per_cell = 1_000, 200, 1, 3

    t0 = time.perf_counter()
    corpus = synthetic_tables(args.runs, seed=args.seed, length_scale=1.4)
    tags = policy.tag_transitions(corpus.turns)
    runs, turns = corpus.runs, corpus.turns
    print(f"synthetic corpus (seed {args.seed}): {len(runs):,} runs, {len(turns):,} turns, "
          f"{len(tags):,} tagged transitions; drawn and tagged in {time.perf_counter() - t0:.1f} s "
          "(not timed)")
    load_before = os.getloadavg()[0]

    def bootstrap():
        return policy.tag_share_intervals(tags, runs, by=["model", "condition"],
                                          n_resamples=args.resamples, seed=args.seed)

    boot_wall, boot_cpu, ci = timed(bootstrap, args.repeats)
    widths = (ci["share_hi"] - ci["share_lo"])[ci["share"] > 0]
    print(f"\nFig. 7 intervals: {ci[['model', 'condition']].drop_duplicates().shape[0]} groups x "
          f"{ci['tag'].nunique()} tags, {args.resamples} resamples; median width "
          f"{widths.median():.2f} pp, widest {widths.max():.2f} pp")

    booted = f"Fig. 7 bootstrap, {args.resamples} resamples"
    boot_rows = [Ratio(f"{booted}, wall (s)", boot_wall, BOOTSTRAP_TARGET_S),
                 Ratio(f"{booted}, CPU (s)", boot_cpu, BOOTSTRAP_TARGET_S)]
    cells = cells_of(runs, args.cells, args.per_cell)
    if not cells:
        print(f"no cell of the corpus holds {args.per_cell} runs: no LCS to time (raise --runs "
              "or lower --per-cell)")
        print_ratios(boot_rows)
        return 0
    ids = [r for c in cells for r in c]
    pairs_ids = [(a, b) for c in cells for a, b in combinations(c, 2)]
    sub = turns[turns["run_id"].isin(set(ids))]

    def lcs():
        seqs, _ = sequences.run_sequences(sub, "tool")
        index = {r: k for k, r in enumerate(ids)}
        arrays = [seqs.get(r, np.zeros(0, dtype=np.int64)) for r in ids]
        pairs = np.array([(index[a], index[b]) for a, b in pairs_ids])
        score = sequences.pairwise_scores(arrays, pairs)
        lengths = np.array([len(a) for a in arrays])
        return score / np.maximum(lengths[pairs[:, 0]], lengths[pairs[:, 1]]), arrays, pairs

    lcs_wall, lcs_cpu, (sim, arrays, pairs) = timed(lcs, args.repeats)
    c0 = time.process_time()
    plain = [sequences.alignment_score(list(arrays[i]), list(arrays[j])) for i, j in pairs]
    plain_cpu = time.process_time() - c0
    lengths = np.array([len(a) for a in arrays])
    same = np.allclose(plain / np.maximum(lengths[pairs[:, 0]], lengths[pairs[:, 1]]), sim)
    print(f"LCS: {len(cells)} cells x {args.per_cell} runs = {len(pairs)} pairs, sequences of "
          f"{int(lengths.mean())} calls on average (max {int(lengths.max())}); mean similarity "
          f"{sim.mean():.3f}; the plain one-pair programme agrees: {same}")

    batched = f"all-pairs LCS, {len(pairs)} pairs, batched"
    print_ratios([
        *boot_rows,
        Ratio(f"{batched}, wall (s)", lcs_wall, LCS_TARGET_S),
        Ratio(f"{batched}, CPU (s)", lcs_cpu, LCS_TARGET_S),
        Ratio(f"{batched} vs the plain programme, CPU (s)", lcs_cpu, baseline=plain_cpu,
              fmt="{:.3f}"),
    ])
    print(f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, on "
          f"{os.cpu_count()} cores" + (" (the CPU was shared: wall > CPU)"
                                       if boot_wall + lcs_wall > 1.3 * (boot_cpu + lcs_cpu) else ""))
    if args.runs != 10_000:
        print(f"note: the targets are for 10,000 runs; this run used {args.runs:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
