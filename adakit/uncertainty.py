"""Uncertainty for the lens quantities: bootstrap intervals over runs, permutation tests for
differences, and Holm's correction for the family of differences a notebook reads out.

The unit of resampling is the **run**: a group mean (lens 0), a tag share (lens 2), a density
per file (lens 4) or a mean score (lens 3) is recomputed on runs drawn with replacement from
**within each group** (each group keeps its size), ``n_resamples`` times, and the interval is
the percentile interval of those resamples at ``level`` (0.95: the 2.5th and 97.5th
percentiles). A group with fewer than ``min_runs`` runs (2) gets no interval ("too few runs"):
a single run resampled is always itself, which would read as certainty.

Every statistic here is a ratio of sums over runs (a mean is sum / count, a pooled tag share is
tag transitions / all transitions), so one resample is a vector of run weights (how often each
run was drawn) and all statistics of all groups come from a few matrix products
(:func:`bootstrap_sums`). The same seed gives the same intervals.

Differences (model A vs model B on a tag share, a condition shift of a metric) are tested by
permuting the group labels between the two groups' runs (:func:`permutation_test`), optionally
only within strata (e.g. the same world and task), two-sided, with p = (1 + #{|T*| >= |T|}) /
(1 + n_permutations). :func:`holm` adjusts a family of p-values (Holm 1979, step-down).

This module is the engine and knows no lens: each lens puts intervals on its own quantity
(:func:`adakit.lenses.policy.tag_share_intervals` and
:func:`~adakit.lenses.policy.tag_share_tests`,
:func:`adakit.lenses.adjudication.label_share_intervals`,
:func:`adakit.lenses.footprint.density_intervals`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from adakit import figures

DEFAULT_RESAMPLES = 1000
DEFAULT_PERMUTATIONS = 5000
DEFAULT_LEVEL = 0.95
MIN_RUNS = 2
TOO_FEW = "too few runs"
#: A ratio metric: (numerator column, denominator column); a plain column is a mean.
Ratio = tuple[str, str]


def _as_list(by: str | Sequence[str] | None) -> list[str]:
    if by is None:
        return []
    return [by] if isinstance(by, str) else list(by)


def require_columns(frame: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    """Raise ValueError naming the ``columns`` that ``frame`` (called ``what`` in the message,
    e.g. "the runs table") lacks, and the columns it has."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} lacks column(s) {missing}; got {list(frame.columns)}")


def with_run_columns(frame: pd.DataFrame, runs: pd.DataFrame | None, cols: Sequence[str],
                     what: str) -> pd.DataFrame:
    """``frame`` with those of ``cols`` it lacks taken from ``runs`` by ``run_id`` (a run absent
    from ``runs`` gets NaN); ``frame`` itself when it has them all. ValueError when some are
    missing and ``runs`` is None or lacks them."""
    missing = [c for c in cols if c not in frame.columns]
    if not missing:
        return frame
    if runs is None:
        raise ValueError(f"{what} lacks {missing}; pass the runs table to take them from")
    require_columns(runs, ["run_id", *missing], "the runs table")
    return frame.merge(runs[["run_id", *missing]].drop_duplicates("run_id"), on="run_id",
                       how="left")


def group_codes(frame: pd.DataFrame, by: Sequence[str]) -> tuple[np.ndarray, pd.DataFrame]:
    """A group code per row (0..G-1, first appearance order; missing values form their own
    group) and the groups' key columns, one row per code."""
    by = list(by)
    if not by:
        return np.zeros(len(frame), dtype=np.int64), pd.DataFrame(index=[0])
    codes = frame.groupby(by, sort=False, dropna=False).ngroup().to_numpy().astype(np.int64)
    if len(codes) == 0:
        return codes, pd.DataFrame(columns=by)
    _, first = np.unique(codes, return_index=True)
    return codes, frame[by].iloc[first].reset_index(drop=True)


# --------------------------------------------------------------------------- the engine


def bootstrap_sums(
    values: np.ndarray,
    codes: np.ndarray,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    n_groups: int | None = None,
) -> np.ndarray:
    """Column sums of ``values`` (runs x K) over resamples of each group's runs.

    Resample b draws, for every group g of size n_g, n_g runs of g with replacement; the
    result ``out[b, g, k]`` is the sum of column k over the drawn runs. Groups are drawn in code
    order from one ``numpy.random.default_rng(seed)``, so a seed fixes every resample. Empty
    groups give zeros.
    """
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    codes = np.asarray(codes, dtype=np.int64)
    if len(codes) != len(values):
        raise ValueError(f"{len(codes)} group codes for {len(values)} rows")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    G = int(n_groups if n_groups is not None else (codes.max() + 1 if len(codes) else 0))
    rng = np.random.default_rng(seed)
    order = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes, minlength=G)
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    out = np.zeros((n_resamples, G, values.shape[1]))
    rows = np.arange(n_resamples)[:, None]
    for g in range(G):
        n = int(sizes[g])
        if n == 0:
            continue
        members = order[starts[g]:starts[g] + n]
        draws = rng.integers(0, n, size=(n_resamples, n))
        # weights[b, i]: how often run i of the group was drawn in resample b
        weights = np.bincount((rows * n + draws).ravel(), minlength=n_resamples * n)
        out[:, g, :] = weights.reshape(n_resamples, n) @ values[members]
    return out


def percentile_interval(samples: np.ndarray, level: float = DEFAULT_LEVEL,
                        axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval of resamples along ``axis`` (NaN resamples ignored)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be between 0 and 1, got {level}")
    tail = (1.0 - level) / 2.0
    with warnings.catch_warnings():  # an all-NaN group simply has no interval
        warnings.filterwarnings("ignore", category=RuntimeWarning)
        lo, hi = np.nanquantile(samples, [tail, 1.0 - tail], axis=axis)
    return lo, hi


def _ratio_columns(frame: pd.DataFrame, metrics: Mapping[str, str | Ratio]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Numerator and denominator matrices (runs x metrics). A mean of column c is the sum of
    c's present values over their count: a run missing c adds nothing to either."""
    nums, dens = [], []
    for spec in metrics.values():
        if isinstance(spec, str):
            x = pd.to_numeric(frame[spec], errors="coerce").to_numpy(dtype=float)
            present = ~np.isnan(x)
            nums.append(np.where(present, x, 0.0))
            dens.append(present.astype(float))
        else:
            num, den = spec
            a = pd.to_numeric(frame[num], errors="coerce").to_numpy(dtype=float)
            b = pd.to_numeric(frame[den], errors="coerce").to_numpy(dtype=float)
            ok = ~(np.isnan(a) | np.isnan(b))
            nums.append(np.where(ok, a, 0.0))
            dens.append(np.where(ok, b, 0.0))
    n = len(frame)
    return (np.column_stack(nums) if nums else np.zeros((n, 0)),
            np.column_stack(dens) if dens else np.zeros((n, 0)))


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _metric_map(metrics: Sequence[str] | Mapping[str, str | Ratio]) -> dict[str, str | Ratio]:
    if isinstance(metrics, Mapping):
        return dict(metrics)
    return {m: m for m in metrics}


def bootstrap_ratios(
    frame: pd.DataFrame,
    by: str | Sequence[str] | None,
    metrics: Sequence[str] | Mapping[str, str | Ratio],
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    min_runs: int = MIN_RUNS,
    scale: float = 1.0,
) -> pd.DataFrame:
    """Per group of ``by``: every metric's estimate and its bootstrap interval, runs (rows of
    ``frame``) resampled within the group.

    ``metrics`` lists columns (their group mean over runs where present) or maps a name to a
    column or to a ``(numerator, denominator)`` pair (the ratio of the group's sums, e.g. a
    pooled tag share). Columns: the ``by`` columns, ``n_runs``, then per metric ``<m>``,
    ``<m>_lo``, ``<m>_hi`` (all times ``scale``) and ``<m>_n`` (runs behind the estimate), and
    ``note`` (``"too few runs"`` where a metric has fewer than ``min_runs`` runs: its interval
    is NaN).
    """
    by_cols = _as_list(by)
    spec = _metric_map(metrics)
    needed = {c for s in spec.values() for c in ([s] if isinstance(s, str) else s)}
    require_columns(frame, [*by_cols, *sorted(needed)], "the per-run table")
    codes, groups = group_codes(frame, by_cols)
    G = len(groups) if by_cols else (1 if len(frame) else 0)
    num, den = _ratio_columns(frame, spec)
    K = num.shape[1]
    out = groups.copy() if by_cols else pd.DataFrame(index=range(G))
    out["n_runs"] = np.bincount(codes, minlength=G)[:G]
    if G == 0:
        for m in spec:
            out[m] = out[f"{m}_lo"] = out[f"{m}_hi"] = out[f"{m}_n"] = []
        out["note"] = []
        return out
    sums = np.zeros((G, 2 * K))
    np.add.at(sums, codes, np.hstack([num, den]))
    has = np.zeros((G, K))
    np.add.at(has, codes, (den > 0).astype(float))
    point = _ratio(sums[:, :K], sums[:, K:]) * scale
    boot = bootstrap_sums(np.hstack([num, den]), codes, n_resamples, seed, G)
    lo, hi = percentile_interval(_ratio(boot[..., :K], boot[..., K:]) * scale, level)
    few = has < min_runs
    lo, hi = np.where(few, np.nan, lo), np.where(few, np.nan, hi)
    for k, m in enumerate(spec):
        out[m] = point[:, k]
        out[f"{m}_lo"] = lo[:, k]
        out[f"{m}_hi"] = hi[:, k]
        out[f"{m}_n"] = has[:, k].astype(int)
    out["note"] = np.where(few.any(axis=1), TOO_FEW, "")
    return out.reset_index(drop=True)


def bootstrap_means(
    frame: pd.DataFrame,
    by: str | Sequence[str] | None,
    metrics: Sequence[str],
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    min_runs: int = MIN_RUNS,
) -> pd.DataFrame:
    """Group means of per-run metrics with bootstrap intervals (lens 0's signals from
    :func:`adakit.lenses.surface.run_surface`, lens 3's scores from
    :func:`adakit.lenses.adjudication.lens3_scores`); see :func:`bootstrap_ratios`."""
    return bootstrap_ratios(frame, by, list(metrics), n_resamples, seed, level, min_runs)


def run_counts(runs: pd.DataFrame, by: str | Sequence[str], min_runs: int = MIN_RUNS) -> pd.DataFrame:
    """How many runs each cell holds, and whether that is enough for an interval."""
    by_cols = _as_list(by)
    require_columns(runs, ["run_id", *by_cols], "the runs table")
    n = runs.groupby(by_cols, sort=False, dropna=False)["run_id"].nunique().rename("n_runs")
    out = n.reset_index()
    out["interval"] = np.where(out["n_runs"] >= min_runs, "yes", TOO_FEW)
    return _display_order(out, by_cols)


def _display_order(frame: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    if frame.empty or not by:
        return frame.reset_index(drop=True)
    ranks = {}
    for c in by:
        order = figures.order_for(c, frame[c].tolist())
        ranks[f"__{c}"] = frame[c].map({v: i for i, v in enumerate(order)}).fillna(len(order))
    keys = list(ranks)
    return (frame.assign(**ranks).sort_values(keys, kind="stable").drop(columns=keys)
            .reset_index(drop=True))


# --------------------------------------------------------------------------- items


def item_mean_intervals(
    items: pd.DataFrame,
    by: str | Sequence[str] | None,
    value: str = "score",
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    min_runs: int = MIN_RUNS,
) -> pd.DataFrame:
    """The mean of ``value`` over the items of each group (e.g. the judged steps behind Table 6
    or a tool's prior index) with a bootstrap interval that resamples **runs**, a run's items
    kept together, within the group: items of one run are not independent draws.

    Columns: the ``by`` columns, ``n_runs``, ``n_items``, ``mean``, ``mean_lo``, ``mean_hi``
    and ``note`` ("too few runs" below ``min_runs``). Items without a value are left out.
    """
    by_cols = _as_list(by)
    require_columns(items, ["run_id", *by_cols, value], "the items table")
    d = items[items[value].notna()]
    per_run = (d.groupby([*by_cols, "run_id"], sort=False, dropna=False)[value]
               .agg(total="sum", n_items="count").reset_index())
    ci = bootstrap_ratios(per_run, by_cols or None, {"mean": ("total", "n_items")},
                          n_resamples, seed, level, min_runs)
    sums = np.zeros(len(ci))
    if len(per_run):
        codes, _ = group_codes(per_run, by_cols)
        sums = np.bincount(codes, weights=per_run["n_items"].to_numpy(float),
                           minlength=len(ci))[:len(ci)]
    ci.insert(len(by_cols) + 1, "n_items", sums.astype(int))
    return _display_order(ci.drop(columns="mean_n"), by_cols)


# --------------------------------------------------------------------------- tests


def holm(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (NaN stays NaN and is not counted in the family)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    m = len(ok)
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out[order] = adjusted
    return out


def _permuted_labels(labels: np.ndarray, strata: np.ndarray, n_permutations: int,
                     rng: np.random.Generator) -> np.ndarray:
    """``n_permutations`` rows, each ``labels`` shuffled among the rows of every stratum."""
    n = len(labels)
    base = np.argsort(strata, kind="stable")
    keys = strata[None, :] * 2.0 + rng.random((n_permutations, n))  # random order inside strata
    perm = np.argsort(keys, axis=1, kind="stable")
    out = np.empty((n_permutations, n), dtype=labels.dtype)
    np.put_along_axis(out, perm, np.broadcast_to(labels[base], (n_permutations, n)), axis=1)
    return out


def permutation_test(
    a: np.ndarray | Sequence[float],
    b: np.ndarray | Sequence[float],
    n_permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
    a_den: np.ndarray | Sequence[float] | None = None,
    b_den: np.ndarray | Sequence[float] | None = None,
    strata_a: np.ndarray | Sequence[Any] | None = None,
    strata_b: np.ndarray | Sequence[Any] | None = None,
) -> tuple[float, float]:
    """Two-sided permutation test of a difference between two groups of runs: returns
    (observed difference A - B, p).

    The statistic is the difference of group means, or with ``a_den``/``b_den`` of ratios of
    sums (sum a / sum a_den, e.g. a pooled tag share). Labels are permuted among all runs, or
    with ``strata_a``/``strata_b`` only among the runs of each stratum (e.g. the same world and
    task). p = (1 + #{|T*| >= |T| - 1e-12}) / (1 + n_permutations); identical groups give 1.
    NaN values (a run without the metric) are left out first.
    """
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    dx = np.ones_like(x) if a_den is None else np.asarray(a_den, dtype=float)
    dy = np.ones_like(y) if b_den is None else np.asarray(b_den, dtype=float)
    sx = np.zeros(len(x)) if strata_a is None else np.asarray(strata_a)
    sy = np.zeros(len(y)) if strata_b is None else np.asarray(strata_b)
    keep_x = ~(np.isnan(x) | np.isnan(dx))
    keep_y = ~(np.isnan(y) | np.isnan(dy))
    x, dx, sx = x[keep_x], dx[keep_x], sx[keep_x]
    y, dy, sy = y[keep_y], dy[keep_y], sy[keep_y]
    if len(x) == 0 or len(y) == 0 or dx.sum() <= 0 or dy.sum() <= 0:
        return np.nan, np.nan
    num = np.r_[x, y]
    den = np.r_[dx, dy]
    label = np.r_[np.ones(len(x), dtype=bool), np.zeros(len(y), dtype=bool)]
    strata = pd.factorize(pd.Series(np.r_[sx, sy].astype(str)))[0].astype(float)
    observed = float(x.sum() / dx.sum() - y.sum() / dy.sum())
    rng = np.random.default_rng(seed)
    hits = 0
    chunk = max(1, 2_000_000 // len(num))  # permutations per block: bounded memory
    for start in range(0, n_permutations, chunk):
        k = min(chunk, n_permutations - start)
        perm = _permuted_labels(label, strata, k, rng).astype(float)
        num_a, den_a = perm @ num, perm @ den
        num_b, den_b = num.sum() - num_a, den.sum() - den_a
        stat = _ratio(num_a, den_a) - _ratio(num_b, den_b)
        hits += int(np.count_nonzero(np.abs(stat) >= abs(observed) - 1e-12))
    p = (1.0 + hits) / (1.0 + n_permutations)
    return observed, float(min(1.0, p))


def p_floor(in_a: np.ndarray, in_b: np.ndarray, strata_a: np.ndarray | None = None,
            strata_b: np.ndarray | None = None, n_permutations: int | None = None) -> float:
    """The smallest p a permutation test of these runs can give: one over the number of
    distinct label assignments (the product over strata of C(n_a + n_b, n_a)), and at least
    1 / (1 + ``n_permutations``) for a test that samples permutations. With 5 runs against 5
    it is 1/252: after Holm over m tests nothing reaches alpha unless m / 252 < alpha."""
    from math import comb

    a = np.asarray(in_a, dtype=bool)
    b = np.asarray(in_b, dtype=bool)
    sa = np.zeros(len(a)) if strata_a is None else np.asarray(strata_a)
    sb = np.zeros(len(b)) if strata_b is None else np.asarray(strata_b)
    total = 1
    for s in set(sa[a].tolist()) | set(sb[b].tolist()):
        na, nb = int(np.sum(sa[a] == s)), int(np.sum(sb[b] == s))
        total *= comb(na + nb, na)
    floor = 1.0 / total
    if n_permutations:
        floor = max(floor, 1.0 / (1.0 + n_permutations))
    return floor


def difference_tests(
    table: pd.DataFrame,
    factor: str,
    metrics: Sequence[str] | Mapping[str, str | Ratio],
    pairs: Sequence[tuple[Any, Any]] | None = None,
    within: str | Sequence[str] | None = None,
    strata: str | Sequence[str] | None = None,
    n_permutations: int = DEFAULT_PERMUTATIONS,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    alpha: float = 0.05,
    min_runs: int = MIN_RUNS,
    scale: float = 1.0,
) -> pd.DataFrame:
    """Every difference between two values of ``factor`` on every metric, with a bootstrap
    interval of the difference, a permutation p and Holm's adjustment over the whole table.

    ``table`` has one row per run (or per run and regime). ``pairs`` lists (A, B) values of
    ``factor`` (default: every pair in display order); ``within`` repeats the comparison inside
    each value of those columns (e.g. ``"condition"``: model A vs B under each condition);
    ``strata`` permutes and resamples only inside those columns' values (e.g. world and task).
    Metrics are as in :func:`bootstrap_ratios`. Columns: the ``within`` columns, ``within``
    (them as text, e.g. "condition=natural"), ``factor``, ``a``, ``b``, ``metric``, ``n_a``,
    ``n_b``, ``value_a``, ``value_b``, ``diff``, ``diff_lo``, ``diff_hi``, ``p``, ``p_floor``
    (:func:`p_floor` of the runs: no test of them can give less; a sampled test is also floored
    at 1 / (1 + ``n_permutations``), so a family of m tests needs ``n_permutations`` > m / alpha
    before Holm can reject anything), ``p_holm`` and ``reading`` ("A > B"
    / "A < B" where ``p_holm`` < ``alpha``, "no difference shown", or "too few runs" when a
    side has fewer than ``min_runs``).
    """
    spec = _metric_map(metrics)
    within_cols = _as_list(within)
    strata_cols = _as_list(strata)
    require_columns(table, [factor, *within_cols, *strata_cols], "the per-run table")
    num, den = _ratio_columns(table, spec)
    levels = figures.order_for(factor, table[factor].dropna().unique())
    pairs = list(pairs) if pairs else list(combinations(levels, 2))
    blocks = ([((), table.index)] if not within_cols else
              [((k if isinstance(k, tuple) else (k,)), idx) for k, idx in
               table.groupby(within_cols, sort=False, dropna=False).groups.items()])
    strata_all = (table[strata_cols].astype(str).agg("|".join, axis=1).to_numpy()
                  if strata_cols else np.zeros(len(table)))
    rows = []
    test = 0
    for key, idx in blocks:
        where = ", ".join(f"{c}={v}" for c, v in zip(within_cols, key, strict=True))
        pos = table.index.get_indexer(idx)
        fac = table[factor].to_numpy()[pos]
        for a, b in pairs:
            ia, ib = pos[fac == a], pos[fac == b]
            if len(ia) == 0 or len(ib) == 0:
                continue  # nothing to compare in this block
            both = np.r_[ia, ib]
            codes = np.r_[np.zeros(len(ia), dtype=np.int64), np.ones(len(ib), dtype=np.int64)]
            scodes = pd.factorize(pd.Series(strata_all[both]))[0].astype(np.int64)
            cell = scodes * 2 + codes
            for k, m in enumerate(spec):
                test += 1
                na = int((den[ia, k] > 0).sum())
                nb = int((den[ib, k] > 0).sum())
                va = _ratio(num[ia, k].sum(), den[ia, k].sum()) * scale
                vb = _ratio(num[ib, k].sum(), den[ib, k].sum()) * scale
                row = {**dict(zip(within_cols, key, strict=True)), "within": where,
                       "factor": factor, "a": a, "b": b, "metric": m, "n_a": na, "n_b": nb,
                       "value_a": float(va), "value_b": float(vb), "diff": float(va - vb),
                       "diff_lo": np.nan, "diff_hi": np.nan, "p": np.nan, "p_floor": np.nan}
                if na >= min_runs and nb >= min_runs:
                    vals = np.column_stack([num[both, k], den[both, k]])
                    boot = bootstrap_sums(vals, cell, n_resamples, seed + test,
                                          int(cell.max()) + 1)
                    sa = boot[:, 0::2, :].sum(axis=1)  # the A cells of every stratum
                    sb = boot[:, 1::2, :].sum(axis=1)
                    d = (_ratio(sa[:, 0], sa[:, 1]) - _ratio(sb[:, 0], sb[:, 1])) * scale
                    row["diff_lo"], row["diff_hi"] = (float(v) for v in percentile_interval(d, level))
                    _, p = permutation_test(num[ia, k], num[ib, k], n_permutations, seed + test,
                                            den[ia, k], den[ib, k], strata_all[ia], strata_all[ib])
                    row["p"] = p
                    row["p_floor"] = p_floor(den[ia, k] > 0, den[ib, k] > 0, strata_all[ia],
                                             strata_all[ib])
                rows.append(row)
    cols = [*within_cols, "within", "factor", "a", "b", "metric", "n_a", "n_b", "value_a",
            "value_b", "diff", "diff_lo", "diff_hi", "p", "p_floor", "p_holm", "reading"]
    out = pd.DataFrame(rows, columns=[c for c in cols if c not in ("p_holm", "reading")])
    return adjust(out, alpha)[cols]


def adjust(tests: pd.DataFrame | Sequence[pd.DataFrame], alpha: float = 0.05) -> pd.DataFrame:
    """One family of tests (tables of :func:`difference_tests`, stacked): ``p_holm`` by Holm
    over all of them, and each row's ``reading`` ("A > B" / "A < B" below ``alpha``, "no
    difference shown", or "too few runs" without a p)."""
    out = (tests if isinstance(tests, pd.DataFrame)
           else pd.concat(list(tests), ignore_index=True)).copy()
    out["p_holm"] = holm(out["p"].to_numpy()) if len(out) else []
    out["reading"] = [
        TOO_FEW if np.isnan(p) else
        (f"{a} > {b}" if d > 0 else f"{a} < {b}") if ph < alpha else "no difference shown"
        for a, b, d, p, ph in zip(out["a"], out["b"], out["diff"], out["p"], out["p_holm"],
                                  strict=True)
    ]
    return out


# --------------------------------------------------------------------------- plots


def n_note(n: float, min_runs: int = MIN_RUNS) -> str:
    """The run count a figure writes beside one group: ``"n = 13"``, or ``"n = 1, no
    interval"`` below ``min_runs`` (such a group never carries an interval)."""
    if n is None or pd.isna(n):
        raise ValueError("n_note needs a run count, got none")
    count = int(n)
    if count < 0:
        raise ValueError(f"a run count cannot be negative: {count}")
    return f"n = {count}" if count >= min_runs else f"n = {count}, no interval"


def plot_intervals(
    table: pd.DataFrame,
    value: str,
    label: str | Sequence[str],
    hue: str | None = None,
    lo: str | None = None,
    hi: str | None = None,
    ax: Axes | None = None,
    xlabel: str | None = None,
    title: str | None = None,
    reference: float | None = None,
    n: str | None = "n_runs",
) -> Figure:
    """A dot-and-whisker chart: one row per ``label`` value (or combination), the estimate
    ``value`` as a dot and its interval ``lo``..``hi`` (default ``<value>_lo``/``_hi``) as a
    whisker, dots coloured by ``hue``. Every row is marked with its run count from column
    ``n`` (:func:`n_note`: "n = 1, no interval" for a row too small for one); rows without an
    interval and without ``n`` are marked "too few runs". ``reference`` draws a vertical line
    (e.g. 0 for differences)."""
    labels = _as_list(label)
    lo, hi = lo or f"{value}_lo", hi or f"{value}_hi"
    require_columns(table, [value, lo, hi, *labels] + ([hue] if hue else []), "the interval table")
    counts = table[n].to_numpy() if n and n in table.columns else None
    if table.empty:
        raise ValueError("no intervals to plot")
    figures.use_style()
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, max(2.0, 0.28 * len(table) + 1.2)))
    else:
        fig = ax.figure
    hues = figures.order_for(hue, table[hue].unique()) if hue else [None]
    colors = figures.colors_for(hue, hues)
    ypos = np.arange(len(table))[::-1]
    est = table[value].to_numpy(dtype=float)
    low, high = table[lo].to_numpy(dtype=float), table[hi].to_numpy(dtype=float)
    for h in hues:
        sel = (table[hue] == h).to_numpy() if hue else np.ones(len(table), dtype=bool)
        ok = sel & ~np.isnan(low) & ~np.isnan(high)
        ax.hlines(ypos[ok], low[ok], high[ok], color=colors[h], lw=1.6)
        ax.plot(est[sel], ypos[sel], "o", color=colors[h], ms=5,
                label=None if h is None else figures.label_for(hue, h))
        for i in np.flatnonzero(sel):
            known = counts is not None and pd.notna(counts[i])
            if not known and ok[i]:
                continue
            note = n_note(counts[i]) if known else TOO_FEW
            if known and not ok[i] and not note.endswith("no interval"):
                note += ", no interval"  # runs enough, but too few with a value
            x = np.nanmax([est[i], high[i]]) if ok[i] else est[i]
            ax.annotate(note, (x, ypos[i]), xytext=(6, 0), textcoords="offset points",
                        va="center", fontsize=7, color="0.4")
    names = [" | ".join(figures.label_for(c, v) for c, v in zip(labels, row, strict=True))
             for row in table[labels].itertuples(index=False, name=None)]
    ax.set_yticks(ypos, names)
    if reference is not None:
        ax.axvline(reference, color="0.3", lw=0.8, ls="--")
    ax.set_xlabel(xlabel or value)
    ax.grid(axis="y", visible=False)
    if hue:
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    if title:
        ax.set_title(title)
    return fig
