"""Sequence similarity between runs: is a model's "signature" a measured claim?

A run's **canonical tool sequence** is its tool calls in turn order, as the action policy lens
takes them (:func:`adakit.lenses.policy.tool_turns`: turns without a tool call are skipped,
failed calls kept unless ``drop_errors``), one token per call: the tool's abbreviation
(``kind="tool"``: OVW, PKR, ...) or the pair (tool, file target) (``kind="tool_file"``: the file
the call names, empty for MEM / CON and calls naming none).

Two sequences are compared by a global alignment score (Needleman-Wunsch) with a fixed,
stated scoring: ``match`` for aligning two equal tokens, ``mismatch`` for aligning two
different tokens, ``gap`` for a token aligned with nothing. With the defaults (match 1,
mismatch 0, gap 0) the score is exactly the length of the longest common subsequence (LCS).
The **normalised similarity** divides the score by ``match`` times a length of the pair,
``norm``: ``"max"`` (default; the longer sequence, so 1 means identical and LCS/max is in
[0, 1]), ``"mean"`` or ``"min"``. Two empty sequences have no similarity (NaN).

Every pair of a batch is aligned at once: one row of the dynamic programme per step for all
pairs, the in-row gap recurrence solved with a running maximum (:func:`pairwise_scores`).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from adakit import figures

CELL: tuple[str, ...] = ("model", "world", "task", "condition")
KINDS = ("tool", "tool_file")
NORMS = ("max", "mean", "min")


def run_sequences(
    turns: pd.DataFrame, kind: str = "tool", drop_errors: bool = False
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Each run's canonical sequence as integer token codes, and the tokens' names.

    ``kind="tool"``: tool abbreviations; ``"tool_file"``: ``"TOOL file"`` tokens."""
    from adakit.lenses import policy

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    t = policy.tool_turns(turns, drop_errors=drop_errors, columns=("file",))
    if kind == "tool":
        token = t["tool"].astype(str)
    else:
        file = t["file"] if "file" in t.columns else pd.Series("", index=t.index)
        token = t["tool"].astype(str) + " " + file.fillna("").astype(str)
    if t.empty:  # no tool turns at all: no sequences
        return {}, []
    codes, names = pd.factorize(token)
    run_code, run_ids = pd.factorize(t["run_id"])
    bounds = np.flatnonzero(np.r_[True, run_code[1:] != run_code[:-1], True])
    seqs = {str(run_ids[run_code[bounds[i]]]): codes[bounds[i]:bounds[i + 1]]
            for i in range(len(bounds) - 1)}
    return seqs, [str(n) for n in names]


def _scores(match: float, mismatch: float, gap: float) -> tuple[float, float, float]:
    match, mismatch, gap = float(match), float(mismatch), float(gap)
    if match <= 0:
        raise ValueError(f"match must be > 0, got {match}")
    if mismatch > match:
        raise ValueError(f"mismatch ({mismatch}) must not exceed match ({match})")
    return match, mismatch, gap


def alignment_score(a: Sequence[Any], b: Sequence[Any], match: float = 1.0,
                    mismatch: float = 0.0, gap: float = 0.0) -> float:
    """The global alignment score of two sequences (one pair, plain dynamic programme)."""
    match, mismatch, gap = _scores(match, mismatch, gap)
    prev = [gap * j for j in range(len(b) + 1)]
    for i, x in enumerate(a, 1):
        row = [gap * i]
        for j, y in enumerate(b, 1):
            row.append(max(prev[j - 1] + (match if x == y else mismatch), prev[j] + gap,
                           row[j - 1] + gap))
        prev = row
    return float(prev[-1])


def _normaliser(la: np.ndarray, lb: np.ndarray, norm: str) -> np.ndarray:
    if norm == "max":
        return np.maximum(la, lb).astype(float)
    if norm == "mean":
        return (la + lb) / 2.0
    if norm == "min":
        return np.minimum(la, lb).astype(float)
    raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")


def similarity(a: Sequence[Any], b: Sequence[Any], match: float = 1.0, mismatch: float = 0.0,
               gap: float = 0.0, norm: str = "max") -> float:
    """Normalised similarity of two sequences: score / (match x length by ``norm``)."""
    length = float(_normaliser(np.array([len(a)]), np.array([len(b)]), norm)[0])
    if length == 0:
        return np.nan
    return alignment_score(a, b, match, mismatch, gap) / (float(match) * length)


def pairwise_scores(
    seqs: Sequence[np.ndarray],
    pairs: np.ndarray,
    match: float = 1.0,
    mismatch: float = 0.0,
    gap: float = 0.0,
) -> np.ndarray:
    """Alignment scores of many pairs of integer sequences at once (``pairs``: P x 2 indices
    into ``seqs``; codes must be >= 0)."""
    match, mismatch, gap = _scores(match, mismatch, gap)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    P = len(pairs)
    if P == 0:
        return np.zeros(0)
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    la, lb = lengths[pairs[:, 0]], lengths[pairs[:, 1]]
    La, Lb = int(la.max()), int(lb.max())
    A = np.full((P, max(La, 1)), -1, dtype=np.int64)  # pads never match anything
    B = np.full((P, max(Lb, 1)), -2, dtype=np.int64)
    for p, (i, j) in enumerate(pairs):
        A[p, :la[p]] = seqs[i]
        B[p, :lb[p]] = seqs[j]
    cols = np.arange(Lb + 1, dtype=float)
    prev = np.broadcast_to(gap * cols, (P, Lb + 1)).copy()  # row 0: j gaps
    final = np.where(la == 0, gap * lb, np.nan)
    rows = np.arange(P)
    for i in range(1, La + 1):
        step = np.where(A[:, i - 1:i] == B, match, mismatch)
        best = np.maximum(prev[:, :-1] + step, prev[:, 1:] + gap)  # diagonal or from above
        # H[i, j] = max(best[j], H[i, j-1] + gap): a running maximum of best[k] - gap*k
        start = np.full((P, 1), gap * i)
        row = np.maximum.accumulate(np.hstack([start, best - gap * cols[1:]]), axis=1)
        row += gap * cols
        done = la == i
        final[done] = row[rows[done], lb[done]]
        prev = row
    return final


def pair_table(
    runs: pd.DataFrame,
    cell: Sequence[str] = CELL,
    across: str = "model",
    max_pairs_per_cell: int | None = None,
    seed: int = 0,
    repeated_only: bool = True,
) -> pd.DataFrame:
    """The run pairs to compare: every pair inside a cell (``within``), and every pair of runs
    from two cells that differ only in ``across`` (``across``: e.g. two models on the same world,
    task and condition). With ``repeated_only`` (default) only the (world, task, condition)
    strata where some cell holds two runs are used, so within and across pairs come from the
    same strata. ``max_pairs_per_cell`` samples at most that many pairs per cell (and per pair
    of cells), seeded. Columns: run_a, run_b, pair ("within" / "across"), the cell columns
    (``across`` holds run_a's value), ``other`` (run_b's ``across`` value) and ``factor`` (the
    name of ``across``)."""
    cell = list(cell)
    if across not in cell:
        raise ValueError(f"across ({across!r}) must be one of the cell columns {cell}")
    _ = [runs[c] for c in ["run_id", *cell]]  # KeyError names a missing column
    rest = [c for c in cell if c != across]
    rng = np.random.default_rng(seed)
    rows: list[tuple] = []

    def add(items: list[tuple[str, str]], kind: str, key: tuple, a: Any, b: Any) -> None:
        if max_pairs_per_cell and len(items) > max_pairs_per_cell:
            pick = np.sort(rng.choice(len(items), max_pairs_per_cell, replace=False))
            items = [items[k] for k in pick]
        rows.extend((x, y, kind, *key, a, b) for x, y in items)

    groups = runs.groupby(rest, sort=True, dropna=False) if rest else [((), runs)]
    for key, grp in groups:
        key = key if isinstance(key, tuple) else (key,)
        by_level = {lvl: sorted(g["run_id"]) for lvl, g in grp.groupby(across, sort=False)}
        if repeated_only and max(len(ids) for ids in by_level.values()) < 2:
            continue
        levels = figures.order_for(across, list(by_level))
        for lvl in levels:
            add(list(combinations(by_level[lvl], 2)), "within", key, lvl, lvl)
        for l1, l2 in combinations(levels, 2):
            add([(x, y) for x in by_level[l1] for y in by_level[l2]], "across", key, l1, l2)
    out = pd.DataFrame(rows, columns=["run_a", "run_b", "pair", *rest, across, "other"])
    out["factor"] = across
    return out[["run_a", "run_b", "pair", *cell, "other", "factor"]]


def _both_sides(pairs: pd.DataFrame, by: str) -> pd.DataFrame:
    """Across pairs counted for both of their ``by`` values when ``by`` is the factor they
    cross (model A vs B is an across pair of A and of B)."""
    if pairs.empty or "factor" not in pairs or by not in set(pairs["factor"]):
        return pairs
    cross = pairs[(pairs["pair"] == "across") & (pairs["factor"] == by)]
    mirrored = cross.assign(**{by: cross["other"], "other": cross[by]})
    return pd.concat([pairs, mirrored], ignore_index=True)


def sequence_similarity(
    turns: pd.DataFrame,
    runs: pd.DataFrame,
    cell: Sequence[str] = CELL,
    across: str = "model",
    kinds: Sequence[str] = KINDS,
    match: float = 1.0,
    mismatch: float = 0.0,
    gap: float = 0.0,
    norm: str = "max",
    drop_errors: bool = False,
    max_pairs_per_cell: int | None = None,
    seed: int = 0,
    repeated_only: bool = True,
) -> pd.DataFrame:
    """Normalised similarity of every within-cell and across-``across`` pair of runs
    (:func:`pair_table`), for each sequence kind. Columns: those of :func:`pair_table`,
    ``kind``, ``len_a``, ``len_b``, ``score`` and ``similarity``."""
    pairs = pair_table(runs, cell, across, max_pairs_per_cell, seed, repeated_only)
    frames = []
    for kind in kinds:
        seqs, _ = run_sequences(turns, kind, drop_errors)
        ids = sorted(set(pairs["run_a"]) | set(pairs["run_b"]))
        index = {r: k for k, r in enumerate(ids)}
        arrays = [seqs.get(r, np.zeros(0, dtype=np.int64)) for r in ids]
        idx = np.column_stack([pairs["run_a"].map(index).to_numpy(dtype=np.int64),
                               pairs["run_b"].map(index).to_numpy(dtype=np.int64)]) \
            if len(pairs) else np.zeros((0, 2), dtype=np.int64)
        score = pairwise_scores(arrays, idx, match, mismatch, gap)
        lens = np.array([len(a) for a in arrays], dtype=np.int64)
        la = lens[idx[:, 0]] if len(idx) else np.zeros(0, dtype=np.int64)
        lb = lens[idx[:, 1]] if len(idx) else np.zeros(0, dtype=np.int64)
        denom = float(match) * _normaliser(la, lb, norm)
        with np.errstate(divide="ignore", invalid="ignore"):
            sim = np.where(denom > 0, score / np.where(denom > 0, denom, 1.0), np.nan)
        frames.append(pairs.assign(kind=kind, len_a=la, len_b=lb, score=score, similarity=sim))
    return pd.concat(frames, ignore_index=True) if frames else pairs


def similarity_summary(pairs: pd.DataFrame, by: str = "model") -> pd.DataFrame:
    """Mean similarity within cells and across cells per ``by`` value and kind, the number of
    pairs behind each, and ``within - across`` (positive: repeats of one model resemble each
    other more than another model's runs in the same world, task and condition). An across
    pair counts for both of its ``by`` values when ``by`` is the factor it crosses."""
    g = _both_sides(pairs, by).groupby(["kind", by, "pair"], sort=False)["similarity"]
    wide = g.mean().unstack("pair")
    n = g.size().unstack("pair").fillna(0).astype(int)
    out = pd.DataFrame(index=wide.index)
    for side in ("within", "across"):
        out[side] = wide[side] if side in wide.columns else np.nan
        out[f"n_{side}"] = n[side] if side in n.columns else 0
    out["within_minus_across"] = out["within"] - out["across"]
    return out.reset_index()


def plot_similarity(pairs: pd.DataFrame, by: str = "model", title: str | None = None) -> Figure:
    """Per sequence kind, one panel: each ``by`` value's within-cell and across-cell pair
    similarities as jittered points with their means (a bar), within left and across right."""
    figures.use_style()
    kinds = [k for k in KINDS if k in set(pairs["kind"])] or list(dict.fromkeys(pairs["kind"]))
    levels = figures.order_for(by, pairs[by].unique())
    fig, axes = plt.subplots(1, len(kinds), figsize=(max(4.0, 1.3 * len(levels) + 1.5)
                                                     * len(kinds), 3.4), squeeze=False)
    rng = np.random.default_rng(0)
    shades = {"within": figures.PALETTE[0], "across": figures.PALETTE[1]}
    both = _both_sides(pairs, by)
    for ax, kind in zip(axes[0], kinds, strict=True):
        d = both[both["kind"] == kind]
        for i, lvl in enumerate(levels):
            for j, side in enumerate(("within", "across")):
                v = d.loc[(d[by] == lvl) & (d["pair"] == side), "similarity"].dropna()
                x = i + (j - 0.5) * 0.36
                if len(v):
                    ax.scatter(x + rng.uniform(-0.07, 0.07, len(v)), v, s=8, alpha=0.5,
                               color=shades[side], lw=0)
                    ax.hlines(v.mean(), x - 0.15, x + 0.15, color=shades[side], lw=2.2,
                              label=side if i == 0 else None)
        ax.set_xticks(range(len(levels)), [figures.label_for(by, v) for v in levels],
                      rotation=30, ha="right")
        ax.set_ylim(-0.03, 1.03)
        ax.set_ylabel("Normalised similarity")
        ax.set_title("tool sequence" if kind == "tool" else "(tool, file) sequence")
    axes[0, 0].legend(loc="lower left", frameon=False, title="pairs")
    if title:
        fig.suptitle(title)
    return fig
