"""The noise floor: run-to-run variation of process metrics against the differences the lenses
read out (the skeptic's test of repeated runs; notebook 15).

A **cell** is one (model, world, task, condition) combination; its repeated runs differ only in
the seed. Per cell and metric, :func:`cell_variation` gives the mean, the standard deviation
(n - 1 in the denominator) and the coefficient of variation CV = SD / |mean| (undefined for a
cell with fewer than ``min_runs`` runs, or a mean of 0). :func:`noise_floor` pools the cells:
the pooled within-cell SD, sqrt(sum (n_c - 1) s_c^2 / sum (n_c - 1)), and the median CV.

A **reading** is a difference between two values of a factor (model A vs model B, natural vs
budget pressure), compared on cells matched on every other cell column. Its signal is the
median absolute difference of the matched cells' means; its noise is the pooled within-cell SD
of the repeated cells of the two compared values (or of every repeated cell when those have
none: ``noise_from`` says which). The signal-to-noise ratio SNR = signal / noise; a reading
**survives** when SNR >= ``threshold`` (2, the skeptic's "2x the pooled within-task standard
deviation") and the stratified permutation test of the difference (labels permuted only inside
matched cells) stays below ``alpha`` after Holm's correction over the whole table.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from adakit import figures, uncertainty
from adakit.record import Corpus, map_runs

CELL: tuple[str, ...] = ("model", "world", "task", "condition")
#: Lens 0 signals read by default, then one share column per tag ("<tag> share", percent).
SURFACE_METRICS: tuple[str, ...] = ("turns", "loc_viewed", "files_visited")
#: Lens 3 dimensions read when verdicts exist (normalised conclusion scores, [0, 1]).
SCORE_METRICS: tuple[str, ...] = ("relevance", "conclusion_grounding", "calibration")
SHARE_SUFFIX = " share"


def run_metrics(
    corpus: Corpus,
    judgments: pd.DataFrame | None = None,
    surface_metrics: Sequence[str] = SURFACE_METRICS,
    tag_shares: bool = True,
    drop_errors: bool = False,
) -> pd.DataFrame:
    """One row per run: its cell columns, ``repeat``, the lens 0 signals ``surface_metrics``,
    with ``tag_shares`` one ``"<tag> share"`` column per tag (percent of the run's transitions;
    NaN for a run without a transition), and with ``judgments`` lens 3's normalised conclusion
    scores (:data:`SCORE_METRICS`, NaN for a run without a verdict)."""
    from adakit.lenses import policy, surface

    need = surface.surface_columns()
    if tag_shares:
        need = {t: list(dict.fromkeys([*need[t], *policy.TAGGING_COLUMNS[t]])) for t in need}
    out = map_runs(corpus, lambda piece: _run_metrics(piece, surface_metrics, tag_shares,
                                                      drop_errors), need)
    shares = [c for c in out.columns if c.endswith(SHARE_SUFFIX)]
    if shares:  # a piece lacks the tags none of its runs made: 0 for a run with transitions
        order = policy.tag_order([c[: -len(SHARE_SUFFIX)] for c in shares])
        ordered = [f"{t}{SHARE_SUFFIX}" for t in order]
        moved = out[shares].notna().any(axis=1)
        out.loc[moved, shares] = out.loc[moved, shares].fillna(0.0)
        out = out[[c for c in out.columns if c not in shares] + ordered]
    if judgments is not None and len(judgments):
        from adakit.lenses import adjudication

        scores = adjudication.lens3_scores(judgments, corpus.table("runs"))
        out = out.merge(scores[["run_id", *SCORE_METRICS]], on="run_id", how="left")
    return out


def _run_metrics(corpus: Corpus, surface_metrics: Sequence[str], tag_shares: bool,
                 drop_errors: bool) -> pd.DataFrame:
    """:func:`run_metrics` without the lens 3 scores, of an in-memory corpus."""
    from adakit.lenses import policy, surface

    surf = surface.run_surface(corpus)
    keep = [c for c in ("run_id", *CELL, "repeat") if c in surf.columns]
    out = surf[[*keep, *surface_metrics]].copy()
    if tag_shares:
        tags = policy.tag_transitions(corpus.turns, drop_errors=drop_errors)
        counts = policy.tag_counts(tags)
        tag_cols = [c for c in counts.columns if c not in ("run_id", "transitions")]
        shares = counts[tag_cols].div(counts["transitions"], axis=0) * 100.0
        shares.columns = [f"{t}{SHARE_SUFFIX}" for t in tag_cols]
        shares.insert(0, "run_id", counts["run_id"])
        out = out.merge(shares, on="run_id", how="left")
        has_transitions = out["run_id"].isin(counts["run_id"])
        share_cols = list(shares.columns[1:])
        out.loc[has_transitions, share_cols] = out.loc[has_transitions, share_cols].fillna(0.0)
    return out


def metric_columns(table: pd.DataFrame) -> list[str]:
    """The metric columns of a :func:`run_metrics` table, in order."""
    skip = {"run_id", *CELL, "repeat"}
    return [c for c in table.columns if c not in skip]


def cell_variation(
    table: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    cell: Sequence[str] = CELL,
    min_runs: int = uncertainty.MIN_RUNS,
) -> pd.DataFrame:
    """Per cell and metric: ``n`` (runs with a value), ``mean``, ``sd`` (ddof 1) and ``cv`` =
    sd / |mean|; sd and cv are NaN with fewer than ``min_runs`` runs, cv also when the mean
    is 0 (``note`` says why)."""
    cell = list(cell)
    metrics = list(metrics) if metrics is not None else metric_columns(table)
    long = table.melt(id_vars=cell, value_vars=metrics, var_name="metric").dropna(
        subset=["value"])
    g = long.groupby([*cell, "metric"], sort=False, dropna=False)["value"]
    out = g.agg(n="count", mean="mean", sd="std").reset_index()
    few = out["n"] < min_runs
    out.loc[few, "sd"] = np.nan
    zero = out["mean"].abs() < 1e-12
    with np.errstate(divide="ignore", invalid="ignore"):
        out["cv"] = np.where(few | zero, np.nan, out["sd"] / out["mean"].abs())
    out["note"] = np.where(few, uncertainty.TOO_FEW, np.where(zero, "mean is 0", ""))
    order = {m: i for i, m in enumerate(metrics)}
    out["_m"] = out["metric"].map(order)
    return out.sort_values(["_m", *cell], kind="stable").drop(columns="_m").reset_index(
        drop=True)


def _pooled_sd(variation: pd.DataFrame) -> tuple[float, int, int]:
    """Pooled SD of the cells with an SD, the cells and runs behind it."""
    v = variation[variation["sd"].notna()]
    dof = (v["n"] - 1).sum()
    if dof <= 0:
        return np.nan, 0, 0
    return float(np.sqrt(((v["n"] - 1) * v["sd"] ** 2).sum() / dof)), len(v), int(v["n"].sum())


def noise_floor(variation: pd.DataFrame) -> pd.DataFrame:
    """Per metric, over the cells holding repeats: ``cells``, ``runs``, ``pooled_sd``,
    ``median_cv`` and ``max_cv`` (from :func:`cell_variation`)."""
    rows = []
    for metric, v in variation.groupby("metric", sort=False):
        sd, cells, runs = _pooled_sd(v)
        cv = v["cv"].dropna()
        rows.append({"metric": metric, "cells": cells, "runs": runs, "pooled_sd": sd,
                     "median_cv": float(cv.median()) if len(cv) else np.nan,
                     "max_cv": float(cv.max()) if len(cv) else np.nan})
    return pd.DataFrame(rows, columns=["metric", "cells", "runs", "pooled_sd", "median_cv",
                                       "max_cv"])


def source_of(paths: pd.Series) -> pd.Series:
    """The corpus folder of each run file, relative to the project root when inside it."""
    from pathlib import Path

    from adakit import config

    def one(path: Any) -> str:
        folder = Path(str(path)).resolve().parent
        return str(folder.relative_to(config.ROOT)) if folder.is_relative_to(config.ROOT) else str(folder)

    return paths.map(one)


def noise_floor_by_source(
    table: pd.DataFrame,
    runs: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    cell: Sequence[str] = CELL,
    min_runs: int = uncertainty.MIN_RUNS,
) -> pd.DataFrame:
    """:func:`noise_floor` of each corpus folder's runs on its own (``source`` first), for a
    corpus read from several folders (e.g. a study's runs beside a shipped dataset): each
    folder's repeats measured apart, not pooled."""
    sources = runs.set_index("run_id")["path"].pipe(source_of)
    tagged = table.assign(source=table["run_id"].map(sources))
    parts = []
    for source, part in tagged.groupby("source", sort=False):
        floor = noise_floor(cell_variation(part, metrics, cell, min_runs=min_runs))
        parts.append(floor.assign(source=source))
    columns = ["source", "metric", "cells", "runs", "pooled_sd", "median_cv", "max_cv"]
    return pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)


def signal_to_noise(
    table: pd.DataFrame,
    factors: Sequence[str] = ("model", "condition"),
    metrics: Sequence[str] | None = None,
    cell: Sequence[str] = CELL,
    threshold: float = 2.0,
    alpha: float = 0.05,
    n_permutations: int = uncertainty.DEFAULT_PERMUTATIONS,
    seed: int = 0,
    min_runs: int = uncertainty.MIN_RUNS,
    pairs: dict[str, Sequence[tuple[Any, Any]]] | None = None,
) -> pd.DataFrame:
    """Every reading (a pair of values of each factor) on every metric against the noise floor
    (module docstring). Columns: ``factor``, ``a``, ``b``, ``metric``, ``matched`` (cells
    compared), ``mean_diff`` and ``median_abs_diff`` of the matched cells' means (a - b),
    ``pooled_sd`` (the noise), ``noise_from`` ("a, b" or "all cells"), ``noise_cells``,
    ``median_cv``, ``snr``, ``p`` (stratified permutation), ``p_holm``, ``survives`` and
    ``verdict`` (a sentence). ``pairs`` restricts a factor's pairs (default: all pairs)."""
    cell = list(cell)
    metrics = list(metrics) if metrics is not None else metric_columns(table)
    variation = cell_variation(table, metrics, cell, min_runs)
    means = variation.set_index([*cell, "metric"])["mean"].unstack("metric")
    rows = []
    test = 0
    for factor in factors:
        rest = [c for c in cell if c != factor]
        levels = figures.order_for(factor, table[factor].dropna().unique())
        chosen = (pairs or {}).get(factor) or list(combinations(levels, 2))
        key = table[rest].astype(str).agg("|".join, axis=1)
        for a, b in chosen:
            ma = means.xs(a, level=factor) if a in means.index.get_level_values(factor) else None
            mb = means.xs(b, level=factor) if b in means.index.get_level_values(factor) else None
            if ma is None or mb is None:
                continue
            shared = ma.index.intersection(mb.index)
            if len(shared) == 0:
                continue
            in_a = table[factor] == a
            in_b = table[factor] == b
            shared_keys = {"|".join(map(str, k if isinstance(k, tuple) else (k,)))
                           for k in shared}
            matched_rows = key.isin(shared_keys)
            for metric in metrics:
                test += 1
                d = (ma.loc[shared, metric] - mb.loc[shared, metric]).dropna()
                pair_var = variation[(variation["metric"] == metric)
                                     & variation[factor].isin([a, b])]
                sd, n_cells, _ = _pooled_sd(pair_var)
                source = f"{a}, {b}"
                if np.isnan(sd):
                    sd, n_cells, _ = _pooled_sd(variation[variation["metric"] == metric])
                    source = "all cells"
                cv = pair_var["cv"].dropna() if source != "all cells" else variation.loc[
                    variation["metric"] == metric, "cv"].dropna()
                signal = float(d.abs().median()) if len(d) else np.nan
                if np.isnan(sd) or np.isnan(signal):
                    snr = np.nan
                elif sd == 0:  # no run-to-run variation: any difference is beyond it
                    snr = np.inf if signal > 0 else np.nan
                else:
                    snr = signal / sd
                sa = table.loc[in_a & matched_rows]
                sb = table.loc[in_b & matched_rows]
                _, p = uncertainty.permutation_test(
                    sa[metric].to_numpy(float), sb[metric].to_numpy(float), n_permutations,
                    seed + test, strata_a=key[sa.index].to_numpy(), strata_b=key[sb.index].to_numpy())
                rows.append({"factor": factor, "a": a, "b": b, "metric": metric,
                             "matched": len(d), "mean_diff": float(d.mean()) if len(d) else np.nan,
                             "median_abs_diff": signal, "pooled_sd": sd, "noise_from": source
                             if n_cells else "no repeats", "noise_cells": n_cells,
                             "median_cv": float(cv.median()) if len(cv) else np.nan,
                             "snr": snr, "p": p})
    cols = ["factor", "a", "b", "metric", "matched", "mean_diff", "median_abs_diff", "pooled_sd",
            "noise_from", "noise_cells", "median_cv", "snr", "p", "p_holm", "survives", "verdict"]
    out = pd.DataFrame(rows, columns=cols[:-3])
    out["p_holm"] = uncertainty.holm(out["p"].to_numpy()) if len(out) else []
    out["survives"] = (out["snr"] >= threshold) & (out["p_holm"] < alpha)
    out["verdict"] = [_verdict(r, threshold, alpha) for r in out.itertuples(index=False)]
    return out[cols]


def _verdict(r: Any, threshold: float, alpha: float) -> str:
    if np.isnan(r.pooled_sd):
        return "no repeated cells: noise unknown"
    if np.isnan(r.snr):
        return "no difference measured"
    if r.survives:
        if np.isinf(r.snr):
            return "exceeds the noise (repeats do not vary)"
        return f"exceeds the noise ({r.snr:.1f}x SD)"
    if r.snr >= threshold:
        return f"{r.snr:.1f}x SD but not significant after Holm"
    return f"within the noise ({r.snr:.1f}x SD < {threshold:g}x)"


#: Readings per page of :func:`plot_signal_to_noise_pages` (about 1600 px tall at 200 dpi).
PAGE_ROWS = 30


def _snr_cap(snr: pd.DataFrame, threshold: float) -> float:
    """Where readings without variation (SNR infinite) are drawn: past every finite one."""
    finite = snr["snr"].replace(np.inf, np.nan)
    return max(10.0 * threshold, float(finite.max()) * 2 if finite.notna().any() else 0.0)


def plot_signal_to_noise(snr: pd.DataFrame, threshold: float = 2.0,
                         title: str | None = None, cap: float | None = None) -> Figure:
    """One row per reading (factor: a vs b, metric), its SNR as a dot on a log axis, the
    threshold as a dashed line; filled dots survive, hollow dots do not. ``cap`` is where an
    infinite SNR is drawn (default: from these readings); the log axis ends just past it.
    For more than a few dozen readings use :func:`plot_signal_to_noise_pages`."""
    figures.use_style()
    d = snr[snr["snr"].notna()].reset_index(drop=True)
    if d.empty:
        raise ValueError("no reading has a signal-to-noise ratio (no repeated cells?)")
    height = max(2.6, 0.2 * len(d) + 1.6)
    fig, ax = plt.subplots(figsize=(8.5, height))
    colors = figures.palette_for(list(dict.fromkeys(d["factor"])))
    ypos = np.arange(len(d))[::-1]
    cap = cap if cap is not None else _snr_cap(d, threshold)
    values = np.clip(d["snr"].to_numpy(float), 1e-3, cap)  # no variation at all: drawn at cap
    for f, color in colors.items():
        sel = (d["factor"] == f).to_numpy()
        ok = sel & d["survives"].to_numpy(bool)
        ax.scatter(values[ok], ypos[ok], color=color, s=22, label=f"{f}: survives", zorder=3)
        ax.scatter(values[sel & ~ok], ypos[sel & ~ok], facecolors="none", edgecolors=color,
                   s=22, label=f"{f}: within noise / not significant", zorder=3)
    ax.axvline(threshold, color="0.3", ls="--", lw=0.9)
    ax.set_xscale("log")
    if cap is not None and np.isfinite(cap):
        ax.set_xlim(right=cap * 1.6)
    ax.set_yticks(ypos, [f"{r.metric}: {r.a} vs {r.b}" for r in d.itertuples()], fontsize=7)
    ax.set_xlabel("Signal / noise (median |difference| / pooled within-cell SD)")
    ax.grid(axis="y", visible=False)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.6 / height),
              ncol=2, frameon=False, fontsize=7)
    if title:
        ax.set_title(title)
    return fig


def signal_to_noise_pages(snr: pd.DataFrame, max_rows: int = PAGE_ROWS
                          ) -> list[tuple[str, pd.DataFrame]]:
    """The readings with an SNR, split into pages of at most ``max_rows``: one factor per
    page, a factor's pairs (a vs b, every metric) kept on one page where they fit. Pages are
    named by factor, numbered ("model_2") when a factor fills several."""
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, got {max_rows}")
    d = snr[snr["snr"].notna()]
    pages: list[tuple[str, pd.DataFrame]] = []
    for factor in dict.fromkeys(d["factor"]):
        chunks: list[list[pd.DataFrame]] = [[]]
        for _, pair in d[d["factor"] == factor].groupby(["a", "b"], sort=False):
            for start in range(0, len(pair), max_rows):
                part = pair.iloc[start:start + max_rows]
                if sum(len(c) for c in chunks[-1]) + len(part) > max_rows:
                    chunks.append([])
                chunks[-1].append(part)
        chunks = [c for c in chunks if c]
        for k, parts in enumerate(chunks, start=1):
            name = str(factor) if len(chunks) == 1 else f"{factor}_{k}"
            pages.append((name, pd.concat(parts)))
    return pages


def plot_signal_to_noise_pages(snr: pd.DataFrame, threshold: float = 2.0,
                               title: str | None = None, max_rows: int = PAGE_ROWS
                               ) -> dict[str, Figure]:
    """:func:`plot_signal_to_noise` page by page (:func:`signal_to_noise_pages`), every page
    on the same axis, titled with its factor: ``{page name: Figure}``."""
    pages = signal_to_noise_pages(snr, max_rows)
    if not pages:
        raise ValueError("no reading has a signal-to-noise ratio (no repeated cells?)")
    shown = snr[snr["snr"].notna()]
    cap = _snr_cap(shown, threshold)
    low = min(float(np.clip(shown["snr"].to_numpy(float), 1e-3, cap).min()), threshold) / 1.6
    out: dict[str, Figure] = {}
    for k, (name, page) in enumerate(pages, start=1):
        head = f"{title}: " if title else ""
        fig = plot_signal_to_noise(
            page, threshold, f"{head}{page['factor'].iloc[0]} (page {k} of {len(pages)})", cap)
        fig.axes[0].set_xlim(left=low)
        out[name] = fig
    return out


def plot_cv(variation: pd.DataFrame, cell: Sequence[str] = CELL, title: str | None = None) -> Figure:
    """Within-cell CV of every metric, one dot per cell holding repeats, coloured by model."""
    figures.use_style()
    d = variation[variation["cv"].notna()]
    if d.empty:
        raise ValueError("no cell holds repeats: no coefficient of variation to plot")
    metrics = list(dict.fromkeys(d["metric"]))
    fig, ax = plt.subplots(figsize=(7.0, max(2.2, 0.3 * len(metrics) + 1.2)))
    models = figures.order_for("model", d["model"].unique()) if "model" in d else [None]
    colors = figures.model_colors(models) if "model" in d else {None: figures.PALETTE[0]}
    pos = {m: len(metrics) - 1 - i for i, m in enumerate(metrics)}
    offsets = np.linspace(-0.25, 0.25, max(1, len(models)))
    for k, model in enumerate(models):
        sel = d if model is None else d[d["model"] == model]
        ys = sel["metric"].map(pos).to_numpy(float) + (offsets[k] if len(models) > 1 else 0.0)
        ax.scatter(sel["cv"], ys, s=16, color=colors[model], label=model, zorder=3)
    ax.set_yticks(list(pos.values()), list(pos.keys()), fontsize=8)
    ax.set_xlabel("Within-cell coefficient of variation (SD / |mean|)")
    ax.axvline(0.3, color="0.5", ls=":", lw=0.8)
    ax.grid(axis="y", visible=False)
    if models != [None]:
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, fontsize=7)
    if title:
        ax.set_title(title)
    return fig
