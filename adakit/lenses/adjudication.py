"""Lens 3, automatic adjudication (mechanism layer): the judges' verdicts as views over runs.

Inputs are the judgments table (one row per verdict, see :mod:`adakit.judging.agreement`) and the runs
table of :func:`adakit.record.load_corpus`. Verdicts become one panel score per item
(:func:`adakit.judging.agreement.aggregate_votes`: majority label, else the median; unclear and failed
verdicts excluded), then one value per run. Every view reads five dimensions, all normalised
to [0, 1] with higher meaning better:

==========================  ====================================  =========================
column                      from family                           normalisation
==========================  ====================================  =========================
``relevance``               task_relevance (1-4)                  (score - 1) / 3
``conclusion_grounding``    trace_grounding (1-4)                 (score - 1) / 3
``calibration``             termination_calibration (1-4)         (score - 1) / 3
``navigation_grounding``    navigation_prior (index 0 / .5 / 1)   1 - mean prior index
``synthesis_grounding``     reasoning_prior (index 0 / .5 / 1)    1 - mean prior index
==========================  ====================================  =========================

A grounding score is therefore the complement of the prior-leaning index: the paper's
"structural overview actions ... grounding score of 0.464 compared to 0.827 for explore-code
actions" reads as OVW leaning more on priors than EXP.

Views: Fig. 8 (:func:`conclusion_quality`, :func:`plot_conclusion_quality`), Fig. 9
(:func:`orientation_scores`, :func:`plot_orientation`), label composition
(:func:`label_shares`, :func:`plot_label_shares`), Table 6 (:func:`grounding_by_task`,
:func:`format_pair_table`), per-tool prior leaning (:func:`tool_prior_scores`,
:func:`plot_tool_prior_scores`) and the length diagnostic of Fig. D9
(:func:`plot_length_robustness`).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from adakit import figures, uncertainty
from adakit.judging import agreement as ag
from adakit.judging.families import (
    CONCLUSION_FAMILIES,
    FAMILIES,
    FAMILY_TITLES,
    SCALES,
    TURN_FAMILIES,
    UNCLEAR,
)
from adakit.record import COG, NAV

#: Normalised lens 3 dimensions: column -> (family, display title).
DIMENSIONS: dict[str, tuple[str, str]] = {
    "relevance": ("task_relevance", "Task relevance"),
    "conclusion_grounding": ("trace_grounding", "Conclusion grounding"),
    "calibration": ("termination_calibration", "Termination calibration"),
    "navigation_grounding": ("navigation_prior", "Navigational orientation"),
    "synthesis_grounding": ("reasoning_prior", "Synthesis orientation"),
}
#: The three dimensions of Fig. 9, left to right.
FIG9_DIMENSIONS: tuple[str, ...] = ("calibration", "navigation_grounding", "synthesis_grounding")
MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X", "*")
SPLIT = "split"
#: The column naming the judge panel behind a run's verdicts (its judges, comma-separated).
JUDGES = "judges"
#: Marker fill of the 1st, 2nd, ... judge panel when a figure shows several.
PANEL_FILLS: tuple[str, ...] = ("full", "none", "left", "bottom", "right", "top")


def label_order(family: str) -> list[str]:
    """Display labels of a family from most to least favourable, then split and unclear."""
    values = list(SCALES[family])
    if family in CONCLUSION_FAMILIES:
        values = values[::-1]  # 4 (best) first; for the prior index 0 (evidence-led) is best
    return [ag.display_label(family, v) for v in values] + [SPLIT, UNCLEAR]


def normalise(family: str, score: pd.Series | np.ndarray | float) -> pd.Series | np.ndarray | float:
    """Map a family's score to [0, 1], higher = better (module table)."""
    if family in CONCLUSION_FAMILIES:
        return (score - 1.0) / 3.0
    if family in TURN_FAMILIES:
        return 1.0 - score
    raise ValueError(f"unknown family {family!r}; known: {list(FAMILIES)}")


def judge_panels(judgments: pd.DataFrame, families: Sequence[str] | None = None) -> pd.Series:
    """The judge panel of each run (index ``run_id``): the distinct ``judge`` names of its
    verdicts (of ``families`` only, when given), sorted and comma-separated; empty when the
    judgments carry no ``judge`` column."""
    if "judge" not in judgments.columns or "run_id" not in judgments.columns:
        return pd.Series(dtype=object, name=JUDGES)
    d = judgments[judgments["judge"].notna() & judgments["run_id"].notna()]
    if families is not None:
        d = d[d["family"].isin(list(families))]
    return (d.groupby("run_id")["judge"]
            .agg(lambda names: ", ".join(sorted({str(n) for n in names}))).rename(JUDGES))


def panel_names(table: pd.DataFrame, families: Sequence[str] | None = None) -> list[str]:
    """The distinct judge panels of a judgments table (``judge`` column; its verdicts of
    ``families`` only, when given) or of a scores or figure table (``judges`` column), in
    first-seen order."""
    if JUDGES in table.columns:
        return [str(p) for p in dict.fromkeys(table[JUDGES].dropna()) if str(p)]
    return [p for p in dict.fromkeys(judge_panels(table, families)) if p]


def panel_title(title: str, panels: Sequence[str] | str | None, apart: bool = False) -> str:
    """``title`` with a second line naming the judges: "judges: a, b, c"; several panels are
    "told apart in the legend" (``apart``) or listed as pooled."""
    panels = [panels] if isinstance(panels, str) else list(panels or [])
    if not panels:
        return title
    if len(panels) == 1:
        return f"{title}\njudges: {panels[0]}"
    if apart:
        return f"{title}\n{len(panels)} judge panels, told apart in the legend"
    return f"{title}\njudges, {len(panels)} panels pooled: " + " | ".join(panels)


def with_judges(by: Sequence[str], table: pd.DataFrame) -> list[str]:
    """``by`` plus :data:`JUDGES` when ``table`` carries it, so groups never mix two panels'
    verdicts (use it for the interval table of :func:`plot_conclusion_quality`)."""
    by = list(by)
    return [*by, JUDGES] if JUDGES in table.columns and JUDGES not in by else by


def lens3_scores(judgments: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run: the runs table (with ``conclusion_words``, ``valid_turns``), each
    family's raw score and item count (:func:`adakit.judging.agreement.run_scores`), the five
    normalised dimensions of :data:`DIMENSIONS` (NaN where a run has no scored item) and
    ``judges``, the panel that judged the run's conclusion (:func:`judge_panels` of the
    conclusion families; NaN for a run without a judged conclusion)."""
    table = ag.run_scores(judgments, runs)
    for col, (fam, _) in DIMENSIONS.items():
        table[col] = normalise(fam, table[fam])
    panels = judge_panels(judgments, CONCLUSION_FAMILIES)
    if len(panels):
        table[JUDGES] = table["run_id"].map(panels)
    return table


def _mean_sem(values: pd.Series) -> tuple[float, float, int]:
    v = values.dropna().to_numpy(float)
    if len(v) == 0:
        return np.nan, np.nan, 0
    sem = float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else np.nan
    return float(v.mean()), sem, len(v)


def conclusion_quality(
    scores: pd.DataFrame,
    by: Sequence[str] = ("model", "condition"),
    x: str = "conclusion_grounding",
    y: str = "relevance",
) -> pd.DataFrame:
    """Fig. 8 data: per group, mean and standard error over runs of two dimensions.

    Columns: the ``by`` columns (and ``judges`` when ``scores`` has it: a group never pools
    two judge panels), ``{x}_mean``, ``{x}_sem``, ``{y}_mean``, ``{y}_sem`` and ``n`` (runs
    scored on both).
    """
    by = with_judges(by, scores)
    rows = []
    for key, grp in scores.groupby(by, sort=False):
        grp = grp[grp[x].notna() & grp[y].notna()]
        xm, xs, n = _mean_sem(grp[x])
        ym, ys, _ = _mean_sem(grp[y])
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(by, key, strict=True)), f"{x}_mean": xm, f"{x}_sem": xs,
                     f"{y}_mean": ym, f"{y}_sem": ys, "n": n})
    out = pd.DataFrame(rows, columns=[*by, f"{x}_mean", f"{x}_sem", f"{y}_mean", f"{y}_sem", "n"])
    return _sorted(out, by)


def _sorted(table: pd.DataFrame, cols: Sequence[str]) -> pd.DataFrame:
    """Rows in the figures module's display order of each column (stable otherwise)."""
    if table.empty:
        return table.reset_index(drop=True)
    rank = pd.DataFrame(
        {c: table[c].map({v: i for i, v in enumerate(figures.order_for(c, table[c]))})
         for c in cols},
        index=table.index,
    )
    return table.loc[rank.sort_values(list(cols), kind="stable").index].reset_index(drop=True)


def _colors(column: str, values: Sequence[object]) -> dict:
    return figures.colors_for(column, values)


def _legend_or_note(ax: Axes, **legend_kw) -> None:
    """A legend when something was drawn, else a 'no judged items' note on the axes."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**legend_kw)
    else:
        ax.text(0.5, 0.5, "no judged items", transform=ax.transAxes, ha="center",
                va="center", color="0.4")


def _axes(ax: Axes | None, **fig_kw) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax
    fig, ax = plt.subplots(**fig_kw)
    return fig, ax


def plot_conclusion_quality(
    table: pd.DataFrame,
    x: str = "conclusion_grounding",
    y: str = "relevance",
    hue: str = "model",
    style: str | None = "condition",
    ax: Axes | None = None,
    interval: pd.DataFrame | None = None,
    dodge: float = 0.025,
) -> Figure:
    """Fig. 8: one point per group with standard-error bars; colour = ``hue``, marker =
    ``style``. ``table`` is :func:`conclusion_quality` output. ``interval``
    (:func:`adakit.uncertainty.bootstrap_means` of ``x`` and ``y`` by the same groups) draws
    the bootstrap intervals instead of the standard errors.

    The title names the judges (``judges`` column); several panels get one marker fill each,
    named in the legend. Points that would cover each other are spread sideways by ``dodge``
    (score units) so every legend entry stays visible, and each point carries its run count."""
    fig, ax = _axes(ax, figsize=(5.8, 4.4))
    colors = _colors(hue, table[hue].unique())
    styles = figures.order_for(style, table[style].unique()) if style else [None]
    marker = {s: MARKERS[i % len(MARKERS)] for i, s in enumerate(styles)}
    panels = panel_names(table)
    fill = {p: PANEL_FILLS[i % len(PANEL_FILLS)] for i, p in enumerate(panels)}
    keys = [c for c in (hue, style) if c]
    if interval is not None and len(panels) > 1:
        if JUDGES not in interval.columns:
            raise ValueError("the interval table pools several judge panels: compute it by "
                             "with_judges(by, scores), as the quality table is")
        keys.append(JUDGES)
    rows = [r._asdict() for r in table.itertuples(index=False)]
    shifts = _dodge([(d[f"{x}_mean"], d[f"{y}_mean"]) for d in rows], dodge)
    for d, shift in zip(rows, shifts, strict=True):
        xerr, yerr = np.nan_to_num(d[f"{x}_sem"]), np.nan_to_num(d[f"{y}_sem"])
        if interval is not None:  # issue 12: bootstrap intervals instead of standard errors
            xerr, yerr = _interval_bars(interval, d, keys, x, y)
        px, py = d[f"{x}_mean"] + shift, d[f"{y}_mean"]
        ax.errorbar(
            px, py, xerr=xerr, yerr=yerr,
            fmt=marker[d[style]] if style else "o", color=colors[d[hue]], ms=7,
            fillstyle=fill.get(d.get(JUDGES), "full"),
            elinewidth=0.8, capsize=2, alpha=0.9, mec=colors[d[hue]] if len(panels) > 1
            else "white", mew=0.6 if len(panels) < 2 else 1.0,
        )
        if "n" in d and pd.notna(d["n"]) and pd.notna(px) and pd.notna(py):
            ax.annotate(uncertainty.n_note(d["n"]), (px, py), xytext=(5, 4),
                        textcoords="offset points", fontsize=6, color="0.35")
    ax.set_xlabel(f"{DIMENSIONS.get(x, (None, x))[1]} score (normalised)")
    ax.set_ylabel(f"{DIMENSIONS.get(y, (None, y))[1]} score (normalised)")
    ax.set_ylim(-0.03, 1.03)
    ax.grid(True, axis="both")
    ax.legend(handles=_quality_handles(hue, colors, style, marker, fill if len(panels) > 1
                                       else {}),
              loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(panel_title("Lens 3: task relevance against conclusion grounding", panels,
                             apart=True))
    return fig


def _dodge(points: Sequence[tuple[float, float]], step: float) -> list[float]:
    """Sideways shifts that spread points lying within ``step`` of each other around their
    place (0 for a point alone)."""
    clusters: list[list[int]] = []
    for i, (px, py) in enumerate(points):
        for members in clusters:
            cx, cy = points[members[0]]
            if abs(px - cx) < step and abs(py - cy) < step:
                members.append(i)
                break
        else:
            clusters.append([i])
    shifts = [0.0] * len(points)
    for members in clusters:
        for k, i in enumerate(members):
            shifts[i] = (k - (len(members) - 1) / 2) * step
    return shifts


def _quality_handles(hue: str, colors: dict, style: str | None, marker: dict,
                     fill: dict) -> list[Line2D]:
    """Fig. 8's legend: colours (``hue``), markers (``style``), fills (judge panels)."""
    handles = [Line2D([], [], marker="o", ls="", color=c, label=figures.label_for(hue, v))
               for v, c in colors.items()]
    if style:
        handles += [Line2D([], [], marker=m, ls="", color="0.35",
                           label=figures.label_for(style, s)) for s, m in marker.items()]
    handles += [Line2D([], [], marker="o", ls="", color="0.35", fillstyle=f,
                       label=f"judges: {p}") for p, f in fill.items()]
    return handles


def _interval_bars(interval: pd.DataFrame, row: dict, keys: list[str], x: str, y: str
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Issue 12: the (below, above) error bars of one Fig. 8 point from an interval table."""
    match = interval
    for k in keys:
        match = match[match[k] == row[k]]
    if match.empty:
        return np.zeros((2, 1)), np.zeros((2, 1))
    m = match.iloc[0]
    bars = []
    for dim in (x, y):
        centre = row[f"{dim}_mean"]
        lo, hi = float(m[f"{dim}_lo"]), float(m[f"{dim}_hi"])
        bars.append(np.nan_to_num(np.array([[max(centre - lo, 0.0)], [max(hi - centre, 0.0)]])))
    return bars[0], bars[1]


def orientation_scores(
    scores: pd.DataFrame,
    dimensions: Sequence[str] = FIG9_DIMENSIONS,
    by: Sequence[str] = ("model", "condition"),
) -> pd.DataFrame:
    """Fig. 9 data in long form: one row per (run, dimension) with a value, the ``by``
    columns, and ``n_items`` (the judged items behind the run's value)."""
    frames = []
    for dim in dimensions:
        fam = DIMENSIONS[dim][0]
        d = scores[scores[dim].notna()]
        frames.append(pd.DataFrame({
            "run_id": d["run_id"], **{c: d[c] for c in by}, "dimension": dim,
            "value": d[dim].astype(float), "n_items": d[f"n_{fam}"].astype(int),
        }))
    cols = ["run_id", *by, "dimension", "value", "n_items"]
    return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)


def _grouped_positions(outer: list, inner: list, gap: float = 1.0) -> dict[tuple, float]:
    pos, x = {}, 0.0
    for o in outer:
        for i in inner:
            pos[(o, i)] = x
            x += 1.0
        x += gap
    return pos


def plot_orientation(
    long: pd.DataFrame,
    inner: str = "model",
    outer: str = "condition",
    dimensions: Sequence[str] | None = None,
    seed: int = 0,
    judges: Sequence[str] | str | None = None,
) -> Figure:
    """Fig. 9: per dimension a panel of boxplots over runs, grouped by ``outer`` (blocks)
    and ``inner`` (coloured boxes), with every run as a jittered point. Panel titles give the
    number of judged items; the figure's title names ``judges`` (:func:`panel_names` of the
    verdicts shown) and each box carries its run count."""
    dims = list(dimensions or dict.fromkeys(long["dimension"]))
    fig, axes = plt.subplots(len(dims), 1, figsize=(7.5, 2.3 * len(dims) + 0.4), sharex=True,
                             squeeze=False)
    outers = figures.order_for(outer, long[outer].unique())
    inners = figures.order_for(inner, long[inner].unique())
    colors = _colors(inner, inners)
    pos = _grouped_positions(outers, inners)
    rng = np.random.default_rng(seed)
    for ax, dim in zip(axes[:, 0], dims, strict=True):
        d = long[long["dimension"] == dim]
        for (o, i), x in pos.items():
            v = d.loc[(d[outer] == o) & (d[inner] == i), "value"].to_numpy(float)
            if len(v) == 0:
                continue
            ax.boxplot(v, positions=[x], widths=0.6, patch_artist=True, showfliers=False,
                       boxprops={"facecolor": colors[i], "alpha": 0.35, "edgecolor": colors[i]},
                       medianprops={"color": colors[i], "linewidth": 1.6},
                       whiskerprops={"color": colors[i]}, capprops={"color": colors[i]})
            ax.scatter(x + rng.uniform(-0.18, 0.18, len(v)), v, s=7, color=colors[i],
                       alpha=0.7, lw=0, zorder=3)
            ax.annotate(uncertainty.n_note(d.loc[(d[outer] == o) & (d[inner] == i),
                                                 "run_id"].nunique()),
                        (x, 1.0), xycoords=("data", "axes fraction"), xytext=(0, -2),
                        textcoords="offset points", ha="center", va="top", fontsize=6,
                        color="0.35", rotation=90 if len(inners) > 2 else 0)
        ax.set_ylim(-0.05, 1.3)
        ax.set_ylabel("Normalised score")
        ax.set_title(f"{DIMENSIONS[dim][1]} (n={int(d['n_items'].sum())})", loc="left")
    centres = [np.mean([pos[(o, i)] for i in inners]) for o in outers]
    ax = axes[-1, 0]
    ax.set_xticks(centres, [figures.label_for(outer, o) for o in outers])
    handles = [Patch(color=colors[i], alpha=0.6, label=figures.label_for(inner, i))
               for i in inners]
    axes[0, 0].legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.12),
                      ncol=len(inners))
    panels = [judges] if isinstance(judges, str) else list(judges or panel_names(long))
    if panels:
        fig.suptitle(panel_title("Lens 3: orientation", panels), fontsize=9)
    return fig


def item_labels(
    judgments: pd.DataFrame,
    runs: pd.DataFrame,
    family: str,
    by: Sequence[str] = ("model", "condition"),
) -> pd.DataFrame:
    """One row per judged item of ``family``: its panel verdict
    (:func:`adakit.judging.agreement.aggregate_votes`) with ``label`` as :func:`label_shares` names it
    and the ``by`` columns of its run."""
    agg = ag.aggregate_votes(judgments)
    agg = agg[agg["family"] == family].copy()
    agg["label"] = [
        UNCLEAR if pd.isna(v) else (ag.display_label(family, v) or SPLIT) for v in agg["score"]
    ]
    return agg.merge(runs[["run_id", *by]], on="run_id", how="inner")


def label_shares(
    judgments: pd.DataFrame,
    runs: pd.DataFrame,
    family: str,
    by: Sequence[str] = ("model", "condition"),
) -> pd.DataFrame:
    """Label composition of one family's panel verdicts per group (the reading Appendix C.4
    recommends over small mean differences). Labels come from the panel score
    (:func:`adakit.judging.agreement.display_label`, e.g. ``'3 defensible'``); items whose counted
    verdicts tie without a middle label are ``split``; items with no counted verdict are
    ``unclear``.

    Columns: the ``by`` columns, ``label``, ``count``, ``share`` (within the group) and
    ``runs`` (the group's runs with a judged item).
    """
    agg = item_labels(judgments, runs, family, by)
    counts = agg.groupby([*by, "label"]).size().rename("count").reset_index()
    counts["share"] = counts["count"] / counts.groupby(list(by))["count"].transform("sum")
    n_runs = agg.groupby(list(by))["run_id"].nunique().rename("runs").reset_index()
    counts = counts.merge(n_runs, on=list(by), how="left")
    order = {lab: i for i, lab in enumerate(label_order(family))}
    counts["_o"] = counts["label"].map(order)
    out = _sorted(counts.sort_values("_o", kind="stable"), list(by))
    return out.drop(columns="_o")


def label_share_intervals(
    judgments: pd.DataFrame,
    runs: pd.DataFrame,
    family: str,
    by: str | Sequence[str] = ("model", "condition"),
    n_resamples: int = uncertainty.DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = uncertainty.DEFAULT_LEVEL,
    min_runs: int = uncertainty.MIN_RUNS,
) -> pd.DataFrame:
    """:func:`label_shares` with a bootstrap interval per share: the same rows plus
    ``share_lo``, ``share_hi`` (fractions, as ``share``) and ``note``.

    A run's judged items of the family stay together: runs are resampled within each group
    and every label's share is recomputed over the drawn runs' items.
    """
    by_cols = [by] if isinstance(by, str) else list(by)
    shares = label_shares(judgments, runs, family, by=by_cols)
    if shares.empty:
        return shares.assign(share_lo=[], share_hi=[], note=[])
    items = item_labels(judgments, runs, family, by=by_cols)
    per_run = (items.groupby([*by_cols, "run_id", "label"], sort=False).size()
               .unstack("label", fill_value=0).reset_index())
    labels = [c for c in per_run.columns if c not in (*by_cols, "run_id")]
    per_run["items"] = per_run[labels].sum(axis=1)
    ci = uncertainty.bootstrap_ratios(per_run, by_cols, {lab: (lab, "items") for lab in labels},
                                      n_resamples, seed, level, min_runs)
    long = pd.concat([ci[[*by_cols, f"{lab}_lo", f"{lab}_hi", "note"]].rename(
        columns={f"{lab}_lo": "share_lo", f"{lab}_hi": "share_hi"}).assign(label=lab)
        for lab in labels], ignore_index=True)
    out = shares.merge(long, on=[*by_cols, "label"], how="left")
    out["note"] = out["note"].fillna("")
    return out


def plot_label_shares(
    shares: pd.DataFrame,
    family: str,
    by: Sequence[str] = ("model", "condition"),
    ax: Axes | None = None,
    interval: pd.DataFrame | None = None,
    annotate_min: float = 0.1,
    judges: Sequence[str] | str | None = None,
) -> Figure:
    """Stacked horizontal bars of :func:`label_shares`, one bar per group, favourable labels
    first (dark) and split / unclear last (grey). ``interval`` (:func:`label_share_intervals`
    of the same groups) adds to every segment of at least ``annotate_min`` a whisker at its
    right edge spanning the label's bootstrap interval, as Fig. 7 does."""
    by = list(by)
    groups = shares[by].drop_duplicates().apply(tuple, axis=1).tolist()
    fig, ax = _axes(ax, figsize=(6.5, 0.28 * len(groups) + 1.2))
    labels = [lab for lab in label_order(family) if lab in set(shares["label"])]
    ordinal = label_order(family)[:-2]
    cmap = plt.get_cmap("viridis")
    color = {lab: cmap(0.15 + 0.7 * k / max(len(ordinal) - 1, 1)) for k, lab in enumerate(ordinal)}
    color.update({SPLIT: "#bbbbbb", UNCLEAR: "#e0e0e0"})
    wide = shares.pivot_table(index=by, columns="label", values="share", fill_value=0.0)
    left = np.zeros(len(groups))
    ypos = np.arange(len(groups))[::-1]
    for lab in labels:
        vals = np.array([wide.loc[g if len(by) > 1 else g[0]].get(lab, 0.0) for g in groups])
        ax.barh(ypos, vals, left=left, color=color[lab], label=lab, height=0.8)
        if interval is not None:
            sub = interval[interval["label"] == lab]
            bounds = {tuple(r[c] for c in by): (r["share_lo"], r["share_hi"])
                      for r in sub.to_dict("records")}
            for g, y, x0, v in zip(groups, ypos, left, vals, strict=True):
                lo, hi = (float(b) for b in bounds.get(tuple(g), (np.nan, np.nan)))
                if v >= annotate_min and not (np.isnan(lo) or np.isnan(hi)):
                    ax.errorbar(x0 + v, y, xerr=[[max(v - lo, 0.0)], [max(hi - v, 0.0)]],
                                fmt="none", ecolor="#222222", elinewidth=0.8, capsize=2.0,
                                zorder=4)
        left += vals
    names = [" / ".join(figures.label_for(c, v) for c, v in zip(by, g, strict=True))
             for g in groups]
    if "runs" in shares.columns:  # issue 26: every bar's run count
        n = shares.drop_duplicates(by).set_index(by)["runs"]
        names = [f"{name} ({uncertainty.n_note(n.loc[g if len(by) > 1 else g[0]])})"
                 for name, g in zip(names, groups, strict=True)]
    ax.set_yticks(ypos, names)
    ax.set_xlim(0, 1)
    ax.set_xlabel("Share of judged items")
    ax.grid(True, axis="x")
    ax.grid(False, axis="y")
    _legend_or_note(ax, title="label", loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(panel_title(f"{FAMILY_TITLES[family]}: panel label composition",
                             judges if judges is not None else panel_names(shares)))
    return fig


def _item_table(
    judgments: pd.DataFrame,
    runs: pd.DataFrame,
    columns: Sequence[str],
    exclude_conditions: Sequence[str] = (),
) -> pd.DataFrame:
    """Scored turn-level items with the run columns ``columns`` joined on; items of runs in
    ``exclude_conditions`` are left out."""
    agg = ag.aggregate_votes(judgments)
    agg = agg[agg["family"].isin(TURN_FAMILIES) & agg["score"].notna()]
    if exclude_conditions:
        if "condition" not in runs.columns:
            raise ValueError("leaving out conditions needs the runs table's condition column")
        runs = runs[~runs["condition"].isin(list(exclude_conditions))]
    keep = ["run_id", *[c for c in columns if c not in agg.columns]]
    return agg.merge(runs[list(dict.fromkeys(keep))], on="run_id", how="inner")


def grounding_by_task(
    judgments: pd.DataFrame,
    runs: pd.DataFrame,
    rows: str = "task",
    cols: str = "model",
    overall: str = "Overall",
    exclude_conditions: Sequence[str] = ag.NON_GRID_CONDITIONS,
) -> pd.DataFrame:
    """Table 6: mean navigation and synthesis grounding (1 - prior index) over the judged
    items of each (``rows``, ``cols``) cell, with an ``overall`` column pooling the items of
    every ``cols`` value.

    Items of runs in ``exclude_conditions`` are left out: by default the coach-judge runs, as
    the paper's main grid (n = 6309 of the 7193 navigation items) leaves out the intervention;
    ``exclude_conditions=()`` pools them in. Returns a frame indexed by ``rows`` with
    two-level columns (``cols`` value or ``overall``, ``navigation``/``synthesis``).
    """
    items = _item_table(judgments, runs, [rows, cols], exclude_conditions)
    items["grounding"] = 1.0 - items["score"]
    items["dim"] = items["family"].map({"navigation_prior": "navigation",
                                        "reasoning_prior": "synthesis"})
    cell = items.pivot_table(index=rows, columns=[cols, "dim"], values="grounding", aggfunc="mean")
    pooled = items.pivot_table(index=rows, columns="dim", values="grounding", aggfunc="mean")
    pooled.columns = pd.MultiIndex.from_product([[overall], pooled.columns])
    table = pd.concat([pooled, cell], axis=1)
    col_order = [overall, *figures.order_for(cols, items[cols].unique())]
    full = pd.MultiIndex.from_product([col_order, ["navigation", "synthesis"]])
    table = table.reindex(columns=full)
    table = table.reindex(figures.order_for(rows, table.index))
    table.columns.names = [cols, "grounding"]
    return table


def grounding_intervals(
    judgments: pd.DataFrame,
    runs: pd.DataFrame,
    by: Sequence[str] = ("task", "model"),
    split: str = "dimension",
    exclude_conditions: Sequence[str] = ag.NON_GRID_CONDITIONS,
    n_resamples: int = uncertainty.DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = uncertainty.DEFAULT_LEVEL,
) -> pd.DataFrame:
    """Mean grounding (1 - prior index) of the turn-level items per group of ``by`` and per
    ``split`` (``"dimension"``: navigation / synthesis, as Table 6 reads them; ``"tool"``: per
    tool, as :func:`tool_prior_scores`), each with a bootstrap interval over runs, a run's
    items kept together (:func:`adakit.uncertainty.item_mean_intervals`). Items of runs in
    ``exclude_conditions`` are left out, as in Table 6. Columns: the ``by`` columns, ``split``,
    ``n_runs``, ``n_items``, ``grounding``, ``grounding_lo``, ``grounding_hi``, ``note``."""
    if split not in ("dimension", "tool"):
        raise ValueError(f"split must be 'dimension' or 'tool', got {split!r}")
    by = list(by)
    items = _item_table(judgments, runs, by, exclude_conditions)
    items["grounding"] = 1.0 - items["score"]
    items["dimension"] = items["family"].map({"navigation_prior": "navigation",
                                              "reasoning_prior": "synthesis"})
    ci = uncertainty.item_mean_intervals(items, [*by, split], "grounding", n_resamples, seed,
                                         level)
    return ci.rename(columns={"mean": "grounding", "mean_lo": "grounding_lo",
                              "mean_hi": "grounding_hi"})


def format_pair_table(table: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """Table 6 as printed: each cell ``navigation/synthesis`` (``-`` where a value is
    missing), one column per ``cols`` value."""
    out = {}
    for top in dict.fromkeys(table.columns.get_level_values(0)):
        nav, syn = table[(top, "navigation")], table[(top, "synthesis")]
        out[top] = [
            f"{'-' if pd.isna(a) else f'{a:.{digits}f}'}/{'-' if pd.isna(b) else f'{b:.{digits}f}'}"
            for a, b in zip(nav, syn, strict=True)
        ]
    return pd.DataFrame(out, index=table.index)


def tool_prior_scores(
    judgments: pd.DataFrame,
    runs: pd.DataFrame | None = None,
    by: Sequence[str] = (),
    exclude_conditions: Sequence[str] = ag.NON_GRID_CONDITIONS,
) -> pd.DataFrame:
    """Per-tool prior leaning of the turn-level items (the paper's OVW vs EXP and CON vs MEM
    contrast): ``n`` items, mean ``prior_index``, ``grounding`` = 1 - prior index, and its
    standard error, optionally split by run columns ``by``.

    As in Table 6, items of runs in ``exclude_conditions`` (default: the coach-judge runs,
    outside the paper's main grid) are left out, which needs ``runs``; with
    ``exclude_conditions=()`` and no ``by`` the runs table is optional."""
    by = list(by)
    if runs is None and (by or exclude_conditions):
        why = "splitting tool scores by run columns" if by else (
            f"leaving out the {list(exclude_conditions)} runs (pass exclude_conditions=() to "
            "pool every run)")
        raise ValueError(f"{why} needs the runs table")
    if runs is not None:
        items = _item_table(judgments, runs, by, exclude_conditions)
    else:
        agg = ag.aggregate_votes(judgments)
        items = agg[agg["family"].isin(TURN_FAMILIES) & agg["score"].notna()]
    if items["tool"].isna().any():
        raise ValueError("turn-level judgments without a tool cannot be split by tool")
    rows = []
    for key, grp in items.groupby(["family", "tool", *by], sort=False):
        m, sem, n = _mean_sem(grp["score"])
        rows.append({**dict(zip(["family", "tool", *by], key, strict=True)), "n": n,
                     "prior_index": m, "grounding": 1.0 - m, "sem": sem})
    out = pd.DataFrame(rows, columns=["family", "tool", *by, "n", "prior_index", "grounding",
                                      "sem"])
    fam_rank = {f: i for i, f in enumerate(TURN_FAMILIES)}
    tools = figures.tool_order(out["tool"].unique())
    out["_f"] = out["family"].map(fam_rank)
    out["_t"] = out["tool"].map({t: i for i, t in enumerate(tools)})
    return out.sort_values(["_f", "_t", *by]).drop(columns=["_f", "_t"]).reset_index(drop=True)


def plot_tool_prior_scores(table: pd.DataFrame, ax: Axes | None = None,
                           judges: Sequence[str] | str | None = None) -> Figure:
    """Horizontal bars of per-tool grounding (1 - prior index) with standard errors, the
    navigation tools above the cognitive tools; ``table`` is :func:`tool_prior_scores`
    output without ``by`` columns. The title names ``judges``."""
    if table.duplicated(["family", "tool"]).any():
        raise ValueError("plot_tool_prior_scores takes one row per tool (no 'by' split)")
    order = figures.tool_order(table["tool"].unique())
    order = [x for x in order if x in NAV] + [x for x in order if x not in NAV]
    t = table.set_index("tool").loc[order].reset_index()
    fig, ax = _axes(ax, figsize=(5.5, 0.35 * len(t) + 1.2))
    ypos = np.arange(len(t))[::-1]
    colors = [figures.CANONICAL_COLORS.get(tool, figures.NEUTRAL_COLOR) for tool in t["tool"]]
    ax.barh(ypos, t["grounding"], xerr=np.nan_to_num(t["sem"]), color=colors, height=0.7,
            error_kw={"elinewidth": 0.8, "capsize": 2})
    for y, r in zip(ypos, t.itertuples(), strict=True):
        ax.text(r.grounding + np.nan_to_num(r.sem) + 0.02, y, f"{r.grounding:.2f} (n={r.n})",
                va="center", fontsize=7)
    kind = {True: "navigation", False: "synthesis"}
    ax.set_yticks(ypos, [f"{r.tool} ({kind[r.tool in NAV]})" if r.tool in NAV | COG else r.tool
                         for r in t.itertuples()])
    ax.set_xlim(0, 1.15)
    ax.set_xlabel("Grounding score (1 - prior-leaning index)")
    ax.grid(True, axis="x")
    ax.grid(False, axis="y")
    ax.set_title(panel_title("Prior leaning by tool (lower = more prior-led)", judges))
    return fig


def plot_length_robustness(
    scores: pd.DataFrame,
    family: str = "task_relevance",
    length: str = "conclusion_words",
    hue: str = "model",
    exclude_conditions: Sequence[str] = ag.NON_GRID_CONDITIONS,
    ax: Axes | None = None,
) -> Figure:
    """Fig. D9: conclusion length against a family's panel score (its own scale), one point
    per run coloured by ``hue``, the pooled least-squares line, and the annotation of
    :func:`adakit.judging.agreement.length_robustness` (raw r, added R^2 after the design controls).
    ``scores`` is :func:`lens3_scores` output; the title names its judges."""
    table = ag.add_length_columns(scores)
    if exclude_conditions and "condition" in table:
        table = table[~table["condition"].isin(list(exclude_conditions))]
    d = table[table[family].notna() & table[length].notna()]
    stats = ag.length_robustness(d, [family], length, exclude_conditions=()).iloc[0]
    fig, ax = _axes(ax, figsize=(5.6, 4.0))
    colors = _colors(hue, d[hue].unique())
    rng = np.random.default_rng(0)
    jitter = 0.06 if family in CONCLUSION_FAMILIES else 0.02
    for value, color in colors.items():
        g = d[d[hue] == value]
        ax.scatter(g[length], g[family] + rng.uniform(-jitter, jitter, len(g)), s=14,
                   color=color, alpha=0.75, lw=0, label=figures.label_for(hue, value))
    if len(d) > 1 and d[length].nunique() > 1:
        slope, intercept = np.polyfit(d[length].astype(float), d[family].astype(float), 1)
        xs = np.linspace(d[length].min(), d[length].max(), 50)
        ax.plot(xs, intercept + slope * xs, color="0.25", lw=1.2, ls="--")
    r_text = "undefined" if pd.isna(stats["r"]) else f"{stats['r']:+.2f}"
    r2_text = "undefined" if pd.isna(stats["added_r2"]) else f"{stats['added_r2']:+.3f}"
    ax.text(0.02, 0.97, f"Pearson r = {r_text}\nAdded R² (controls) = "
            f"{r2_text}\nn = {int(stats['n'])}", transform=ax.transAxes,
            va="top", fontsize=8, bbox={"facecolor": "white", "edgecolor": "0.8", "alpha": 0.9})
    ax.set_xlabel("Conclusion length (words)" if length == "conclusion_words" else length)
    scale = "1-4" if family in CONCLUSION_FAMILIES else "prior index"
    ax.set_ylabel(f"{FAMILY_TITLES[family]} ({scale})")
    _legend_or_note(ax, loc="lower right")
    ax.set_title(panel_title(f"Length robustness: {FAMILY_TITLES[family].lower()}",
                             panel_names(d)))
    return fig
