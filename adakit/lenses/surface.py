"""Lens 0, the surface activity lens (census layer): paper §4.1, Fig. 4, Fig. 5, Fig. D5.

Each run is projected onto a handful of census signals:

- ``turns``: turn records in the run;
- ``loc_viewed``: distinct lines of code shown, i.e. the size of the union of all line ranges
  shown per file (a line shown twice counts once), summed over files;
- ``lines_shown``: all lines shown, repeats included (``lines_shown >= loc_viewed``);
- ``files_visited``: distinct files targeted by a successful tool call (any tool);
- ``elapsed_s``: the run's time on the chosen clock (``time``): by default its **active** time,
  the sum of the agent's own turn times, so neither a coach run's judge and coach calls nor
  the downtime between a crash and its resume count (the paper's coach and natural runs take
  about the same time per turn, 5.50 s against 5.32 s); ``time="wall"`` gives the wall-clock
  span from launch to the end record (or the last turn);
- ``time_per_turn_s``: ``elapsed_s / turns``;
- ``thinking_chars`` and ``thinking_per_turn``: reasoning text volume, total and per turn;
- one column per tool (``OVW`` .. ``CON``) with its call count, plus ``errors``; a corpus
  with imported agents' runs also gets ``EDT``, ``EXE`` and ``SUB`` (edit, execute, submit).

:func:`aggregate` averages any of these over grouping axes (model x condition by default) with
standard errors; :func:`tool_concentration` and :func:`task_composition` give Fig. D5's two
views. The plot functions draw Fig. 4 (four panels), Fig. 5 (two panels) and Fig. D5a/b.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from adakit import figures, uncertainty
from adakit.record import ACT_ORDER, TOOL_ORDER, Corpus, map_runs
from adakit.uncertainty import require_columns

#: Per-run signals and their axis labels, in the paper's wording.
METRIC_LABELS: dict[str, str] = {
    "turns": "Avg. Turns",
    "loc_viewed": "Avg. LOC Viewed",
    "lines_shown": "Avg. Lines Shown",
    "files_visited": "Avg. Files Viewed",
    "elapsed_s": "Avg. Time Elapsed (s)",
    "time_per_turn_s": "Avg. Time per Turn (s)",
    "thinking_chars": "Avg. Thinking Chars",
    "thinking_per_turn": "Avg. Thinking Chars per Turn",
    "output_per_turn": "Avg. Output Chars per Turn",
    "errors": "Avg. Errors",
}
ACTIVITY_METRICS: tuple[str, ...] = ("turns", "loc_viewed", "files_visited", "elapsed_s")
EFFORT_METRICS: tuple[str, ...] = ("time_per_turn_s", "thinking_per_turn")
RUN_AXES: tuple[str, ...] = ("run_id", "model", "world", "task", "condition", "repeat")
#: The clocks a run's time can be read on: runs-table column per choice.
TIME_COLUMNS: dict[str, str] = {"active": "active_s", "wall": "wall_s"}


def time_column(time: str) -> str:
    """The runs-table column of a clock (``"active"`` or ``"wall"``; see the module doc)."""
    if time not in TIME_COLUMNS:
        raise ValueError(f"time must be one of {list(TIME_COLUMNS)}, not {time!r}")
    return TIME_COLUMNS[time]


def run_positions(run_ids: pd.Series, other_run_ids: pd.Series) -> np.ndarray:
    """For each value of ``other_run_ids``, the row position of that run in ``run_ids``
    (-1 when absent); hashes each id once, which is much faster than joining on strings."""
    codes, _ = pd.factorize(pd.concat([pd.Series(run_ids), pd.Series(other_run_ids)],
                                      ignore_index=True))
    n = len(run_ids)
    pos = np.full(int(codes.max()) + 2 if len(codes) else 1, -1, dtype=np.int64)
    pos[codes[:n][::-1]] = np.arange(n)[::-1]  # the first row of a duplicated id wins
    return pos[codes[n:]]


def _union_lengths(group: np.ndarray, file: np.ndarray, start: np.ndarray, end: np.ndarray,
                   n_groups: int) -> np.ndarray:
    """Per group, the number of distinct lines covered by inclusive ranges, per file."""
    if len(group) == 0:
        return np.zeros(n_groups, dtype=np.int64)
    key = group.astype(np.int64) * (int(file.max()) + 1) + file
    order = np.lexsort((start, key))
    k, a, b = key[order], start[order].astype(np.int64), end[order].astype(np.int64)
    big = int(b.max()) + 2
    # running furthest line within each (group, file) segment: offsetting every segment by
    # key * big keeps one global running maximum from leaking across segments
    reach = np.maximum.accumulate(b + k * big) - k * big
    prev = np.empty_like(reach)
    prev[0] = 0
    prev[1:] = reach[:-1]
    prev[np.r_[True, k[1:] != k[:-1]]] = 0
    new = np.maximum(0, b - np.maximum(a - 1, prev))
    return np.bincount(group[order], weights=new, minlength=n_groups).astype(np.int64)


def distinct_lines(reads: pd.DataFrame, by: Sequence[str] = ("run_id",)) -> pd.Series:
    """Distinct lines covered by the read ranges, per group of ``by``: the union of the
    inclusive ``[start_line, end_line]`` ranges per file, summed over files."""
    by = list(by)
    require_columns(reads, [*by, "file", "start_line", "end_line"], "reads table")
    if reads.empty:
        return pd.Series(dtype="int64", name="loc_viewed")
    group = reads.groupby(by, sort=False).ngroup().to_numpy()
    n_groups = int(group.max()) + 1
    file, _ = pd.factorize(reads["file"])
    total = _union_lengths(group, file, reads["start_line"].to_numpy(),
                           reads["end_line"].to_numpy(), n_groups)
    _, first = np.unique(group, return_index=True)
    labels = reads[by].iloc[first]
    index = (pd.MultiIndex.from_frame(labels) if len(by) > 1
             else pd.Index(labels[by[0]].to_numpy(), name=by[0]))
    return pd.Series(total, index=index, name="loc_viewed")


def surface_columns(time: str = "active") -> dict[str, list[str]]:
    """The columns :func:`run_surface` reads, per table (what a corpus on disk is asked)."""
    return {"runs": [*RUN_AXES, "finished", "reason", "n_turns", time_column(time)],
            "turns": ["run_id", "tool", "file", "error_type", "thinking_chars", "output_chars"],
            "reads": ["run_id", "file", "start_line", "end_line", "n_lines"]}


def run_surface(corpus: Corpus, time: str = "active") -> pd.DataFrame:
    """One row per run with the census signals (see the module docstring); ``time`` picks the
    clock of ``elapsed_s``: ``"active"`` (default) or ``"wall"``. A corpus on disk is read in
    pieces of whole runs, only the columns needed (:func:`adakit.record.map_runs`)."""
    time_column(time)
    out = map_runs(corpus, lambda piece: _run_surface(piece, time), surface_columns(time))
    tools = [*TOOL_ORDER, *(t for t in ACT_ORDER if t in out.columns)]
    for tool in tools:  # a piece without a tool lacks its column
        if out[tool].isna().any() or out[tool].dtype != np.int64:
            out[tool] = out[tool].fillna(0).astype(np.int64)
    return out[[c for c in out.columns if c not in tools] + tools]


def _run_surface(corpus: Corpus, time: str) -> pd.DataFrame:
    runs, turns, reads = corpus.runs, corpus.turns, corpus.reads
    clock = time_column(time)
    require_columns(runs, ["run_id", "model", "world", "task", "condition", "n_turns", clock],
                    "runs table")
    require_columns(turns, ["run_id", "tool", "file", "error_type", "thinking_chars"],
                    "turns table")
    require_columns(reads, ["run_id", "file", "start_line", "end_line", "n_lines"], "reads table")
    keep = [c for c in (*RUN_AXES, "finished", "reason") if c in runs.columns]
    out = runs[keep].reset_index(drop=True)
    R = len(runs)
    out["turns"] = runs["n_turns"].to_numpy()
    out["elapsed_s"] = runs[clock].to_numpy(dtype=float)

    tpos = run_positions(runs["run_id"], turns["run_id"])
    rpos = run_positions(runs["run_id"], reads["run_id"])
    if (tpos < 0).any() or (rpos < 0).any():
        raise ValueError("the turns or reads table holds runs missing from the runs table")
    file_codes, _ = pd.factorize(pd.concat([reads["file"], turns["file"]], ignore_index=True))
    rfile, tfile = file_codes[: len(reads)], file_codes[len(reads):]
    out["loc_viewed"] = _union_lengths(rpos, rfile, reads["start_line"].to_numpy(),
                                       reads["end_line"].to_numpy(), R)
    out["lines_shown"] = np.bincount(rpos, weights=reads["n_lines"].to_numpy(dtype=float),
                                     minlength=R).astype(np.int64)
    err = turns["error_type"].notna().to_numpy()
    ok = (tfile >= 0) & ~err
    width = int(file_codes.max()) + 1 if len(file_codes) else 1
    pairs = np.sort(tpos[ok].astype(np.int64) * width + tfile[ok])
    pairs = pairs[np.r_[True, pairs[1:] != pairs[:-1]]] if len(pairs) else pairs  # distinct
    out["files_visited"] = np.bincount(pairs // width, minlength=R).astype(np.int64)
    think = np.bincount(tpos, weights=turns["thinking_chars"].to_numpy(dtype=float),
                        minlength=R)
    out["thinking_chars"] = think.astype(np.int64)
    if "output_chars" in turns.columns:
        output = np.bincount(tpos, weights=turns["output_chars"].to_numpy(dtype=float),
                             minlength=R)
    else:
        output = np.full(R, np.nan)
    n = out["turns"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["time_per_turn_s"] = np.where(n > 0, out["elapsed_s"].to_numpy() / n, np.nan)
        out["thinking_per_turn"] = np.where(n > 0, think / n, np.nan)
        out["output_per_turn"] = np.where(n > 0, output / n, np.nan)
    out["errors"] = np.bincount(tpos, weights=err, minlength=R).astype(np.int64)
    tool_codes, tool_names = pd.factorize(turns["tool"])
    acting = [t for t in ACT_ORDER if t in set(tool_names)]
    for tool in [*TOOL_ORDER, *acting]:
        hits = np.flatnonzero(tool_names == tool)
        sel = tool_codes == hits[0] if len(hits) else np.zeros(len(turns), dtype=bool)
        out[tool] = np.bincount(tpos[sel], minlength=R).astype(np.int64)
    return out


def _as_list(by: str | Sequence[str] | None) -> list[str]:
    if by is None:
        return []
    return [by] if isinstance(by, str) else list(by)


def _order_frame(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Rows sorted by the display order of each grouping column."""
    if not by or df.empty:
        return df.reset_index(drop=True)
    keys = []
    for col in by:
        order = figures.order_for(col, df[col].tolist())
        rank = {v: i for i, v in enumerate(order)}
        keys.append(df[col].map(rank).fillna(len(order)))
    sort = pd.DataFrame({f"_k{i}": k for i, k in enumerate(keys)}, index=df.index)
    return df.loc[sort.sort_values(list(sort.columns), kind="stable").index].reset_index(
        drop=True)


def aggregate(
    df: pd.DataFrame,
    by: str | Sequence[str] = ("model", "condition"),
    metrics: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Means and standard errors of per-run signals per group.

    Returns one row per group with the grouping columns, ``n_runs``, and for every metric
    ``<metric>`` (mean) and ``<metric>_sem`` (standard error of the mean; NaN for one run).
    Groups are in the paper's display order (conditions natural, prior suppression, budget
    pressure, combined, then others).
    """
    by_cols = _as_list(by)
    if metrics is None:
        metrics = [m for m in (*METRIC_LABELS, *TOOL_ORDER, *ACT_ORDER) if m in df.columns]
    metrics = list(metrics)
    require_columns(df, [*by_cols, *metrics], "surface table")
    if df.empty:
        cols = [*by_cols, "n_runs"] + [x for m in metrics for x in (m, f"{m}_sem")]
        return pd.DataFrame(columns=cols)
    if by_cols:
        g = df.groupby(by_cols, sort=False, dropna=False)
        mean, sem, n = g[metrics].mean(), g[metrics].sem(), g.size()
    else:
        mean = df[metrics].mean().to_frame().T
        sem = df[metrics].sem().to_frame().T
        n = pd.Series([len(df)])
    out = pd.DataFrame(index=mean.index)
    out["n_runs"] = n.to_numpy()
    for m in metrics:
        out[m] = mean[m].to_numpy(dtype=float)
        out[f"{m}_sem"] = sem[m].to_numpy(dtype=float)
    out = out.reset_index(drop=not by_cols)
    return _order_frame(out, by_cols)


def tool_concentration(
    data: Corpus | pd.DataFrame, by: str | Sequence[str] | None = None
) -> pd.DataFrame:
    """Tool-call counts, shares and cumulative shares, most used tool first (Fig. D5a).

    ``data`` is a corpus or its turns table; turns without a valid tool call (malformed,
    unknown tool) are not tool calls and are left out. With ``by``, the ranking is computed
    within each group. Columns: the ``by`` columns, ``tool``, ``calls``, ``share``,
    ``cum_share`` (fractions in [0, 1]) and ``rank`` (1 = most used).
    """
    by_cols = _as_list(by)
    turns = data.table("turns", [*by_cols, "tool"]) if isinstance(data, Corpus) else data
    require_columns(turns, [*by_cols, "tool"], "turns table")
    calls = turns.loc[turns["tool"].notna(), [*by_cols, "tool"]]  # only the needed columns
    counts = calls.groupby([*by_cols, "tool"], sort=False).size().rename("calls").reset_index()
    if counts.empty:
        return pd.DataFrame(columns=[*by_cols, "tool", "calls", "share", "cum_share", "rank"])
    tool_rank = {t: i for i, t in enumerate(figures.tool_order(counts["tool"]))}
    counts["_tie"] = counts["tool"].map(tool_rank)
    counts = counts.sort_values([*by_cols, "calls", "_tie"],
                                ascending=[True] * len(by_cols) + [False, True], kind="stable")
    if by_cols:
        grp = counts.groupby(by_cols, sort=False)["calls"]
        total = grp.transform("sum")
        counts["cum_share"] = grp.cumsum() / total
        counts["rank"] = counts.groupby(by_cols, sort=False).cumcount() + 1
    else:
        total = counts["calls"].sum()
        counts["cum_share"] = counts["calls"].cumsum() / total
        counts["rank"] = np.arange(1, len(counts) + 1)
    counts["share"] = counts["calls"] / total
    counts = counts[[*by_cols, "tool", "calls", "share", "cum_share", "rank"]]
    if by_cols:
        counts = _order_frame(counts, by_cols)  # stable: keeps the rank order in each group
    return counts.reset_index(drop=True)


def task_composition(surface: pd.DataFrame, by: str | Sequence[str] = "task") -> pd.DataFrame:
    """Average tool calls per trajectory for each tool, per group (Fig. D5b).

    ``surface`` is :func:`run_surface`'s table. Returns one row per group (index: the group,
    in display order) and one column per tool in Table 1 order.
    """
    by_cols = _as_list(by)
    tools = [t for t in (*TOOL_ORDER, *ACT_ORDER) if t in surface.columns]
    require_columns(surface, [*by_cols, *tools], "surface table")
    if not by_cols:
        raise ValueError("task_composition needs at least one grouping column")
    comp = surface.groupby(by_cols, sort=False)[tools].mean().reset_index()
    comp = _order_frame(comp, by_cols)
    return comp.set_index(by_cols if len(by_cols) > 1 else by_cols[0])


# ----------------------------------------------------------------------------- plots


def _grouped_bars(
    ax: Axes,
    agg: pd.DataFrame,
    metric: str,
    x: str,
    hue: str | None,
    colors: dict,
    error_bars: bool,
    interval: pd.DataFrame | None = None,
) -> None:
    xs = figures.order_for(x, agg[x].tolist())
    hues = figures.order_for(hue, agg[hue].tolist()) if hue else [None]
    width = 0.8 / max(1, len(hues))
    positions = np.arange(len(xs))
    for j, h in enumerate(hues):
        sub = agg if h is None else agg[agg[hue] == h]
        vals = sub.set_index(x)[metric].reindex(xs)
        sem_col = f"{metric}_sem"
        err = sub.set_index(x)[sem_col].reindex(xs) if error_bars and sem_col in sub else None
        if interval is not None:  # bootstrap interval instead of the standard error
            err = interval_errors(interval, metric, x, hue, h, xs, vals.to_numpy(dtype=float))
        offset = (j - (len(hues) - 1) / 2) * width
        heights = vals.to_numpy(dtype=float)
        upper = None if err is None else np.nan_to_num(np.asarray(err, dtype=float))
        ax.bar(
            positions + offset, heights, width=width * 0.95,
            color=colors.get(h, figures.PALETTE[0]), label=None if h is None else str(h),
            yerr=upper, error_kw={"elinewidth": 0.7, "capsize": 1.5, "ecolor": "#333333"},
        )
        if "n_runs" in sub:
            tops = heights + (0 if upper is None else (upper[1] if upper.ndim == 2 else upper))
            _mark_runs(ax, positions + offset, tops, sub.set_index(x)["n_runs"].reindex(xs))
    ax.set_xticks(positions, [figures.label_for(x, v) for v in xs], rotation=30, ha="right")
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.set_ylim(bottom=0)
    if "n_runs" in agg:  # room for the run counts above the tallest bar
        ax.set_ylim(0, ax.get_ylim()[1] * 1.35)


def _mark_runs(ax: Axes, xs: np.ndarray, tops: np.ndarray, counts: pd.Series) -> None:
    """Issue 26: each bar's run count, written upwards above the bar and its whisker."""
    for x, top, n in zip(xs, tops, counts.to_numpy(), strict=True):
        if pd.notna(n) and pd.notna(top):
            ax.annotate(uncertainty.n_note(n), (x, top), xytext=(0, 2), textcoords="offset points",
                        rotation=90, ha="center", va="bottom", fontsize=6, color="0.35")


def _figure_legend(fig: Figure, handles: list, labels: list, ncol: int) -> None:
    """A legend below all panels (outside them when the figure uses constrained layout)."""
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    if isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        fig.legend(handles, labels, loc="outside lower center", ncol=ncol)
    else:
        fig.legend(handles, labels, loc="lower center", ncol=ncol, bbox_to_anchor=(0.5, -0.02))


def plot_metric_panels(
    agg: pd.DataFrame,
    metrics: Sequence[str],
    x: str = "condition",
    hue: str | None = "model",
    axes: Sequence[Axes] | None = None,
    error_bars: bool = True,
    title: str | None = None,
    interval: pd.DataFrame | None = None,
) -> Figure:
    """One grouped bar chart per metric (x = ``x``, bars coloured by ``hue``), side by side,
    with one shared legend. ``axes`` (one per metric) draws into existing axes. ``interval``
    (:func:`adakit.uncertainty.bootstrap_means` of the same groups) draws each bar's bootstrap
    interval instead of its standard error."""
    metrics = list(metrics)
    if not metrics:
        raise ValueError("no metrics to plot")
    require_columns(agg, [x, *metrics] + ([hue] if hue else []), "aggregate table")
    figures.use_style()
    if axes is None:
        fig, ax_arr = plt.subplots(1, len(metrics), figsize=(2.6 * len(metrics) + 0.6, 3.2),
                                   squeeze=False)
        axes = list(ax_arr[0])
    else:
        axes = list(axes)
        if len(axes) != len(metrics):
            raise ValueError(f"need {len(metrics)} axes, got {len(axes)}")
        fig = axes[0].figure
    hues = figures.order_for(hue, agg[hue].tolist()) if hue else []
    colors = figures.colors_for(hue, hues) if hue else {}
    for ax, metric in zip(axes, metrics, strict=True):
        _grouped_bars(ax, agg, metric, x, hue, colors, error_bars, interval)
    if hue and hues:
        handles, labels = axes[0].get_legend_handles_labels()
        _figure_legend(fig, handles, labels, ncol=min(len(hues), 6))
    if title:
        fig.suptitle(title)
    return fig


def plot_activity(
    agg: pd.DataFrame,
    x: str = "condition",
    hue: str | None = "model",
    axes: Sequence[Axes] | None = None,
    error_bars: bool = True,
    interval: pd.DataFrame | None = None,
) -> Figure:
    """Fig. 4: average turns, LOC viewed, files viewed and time elapsed per group
    (``interval``: bootstrap intervals as error bars, see :func:`plot_metric_panels`)."""
    return plot_metric_panels(agg, ACTIVITY_METRICS, x=x, hue=hue, axes=axes,
                              error_bars=error_bars, interval=interval)


def plot_effort(
    agg: pd.DataFrame,
    x: str = "condition",
    hue: str | None = "model",
    axes: Sequence[Axes] | None = None,
    error_bars: bool = True,
    interval: pd.DataFrame | None = None,
) -> Figure:
    """Fig. 5: average time per turn and thinking characters per turn per group
    (``interval``: bootstrap intervals as error bars, see :func:`plot_metric_panels`)."""
    return plot_metric_panels(agg, EFFORT_METRICS, x=x, hue=hue, axes=axes,
                              error_bars=error_bars, interval=interval)


def plot_tool_concentration(conc: pd.DataFrame, ax: Axes | None = None, top: int = 2) -> Figure:
    """Fig. D5a: tool-call counts (bars, most used first) with the cumulative share (line) on
    a second axis, annotated with the share of the ``top`` most used tools."""
    require_columns(conc, ["tool", "calls", "cum_share"], "concentration table")
    if "rank" in conc.columns and conc["rank"].duplicated().any():
        raise ValueError("plot one group at a time: the table holds several rankings")
    figures.use_style()
    if ax is None:
        fig, ax = plt.subplots(figsize=(4.6, 3.2))
    else:
        fig = ax.figure
    tools = conc["tool"].tolist()
    pos = np.arange(len(tools))
    colors = [figures.CANONICAL_COLORS.get(t, figures.NEUTRAL_COLOR) for t in tools]
    ax.bar(pos, conc["calls"].to_numpy(), color=colors, width=0.7)
    ax.set_xticks(pos, tools)
    ax.set_ylabel("Tool calls")
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    ax2.plot(pos, 100 * conc["cum_share"].to_numpy(dtype=float), color="#333333", marker="o",
             markersize=3.5, linewidth=1.2)
    ax2.set_ylim(0, 105)
    ax2.set_ylabel("Cumulative share (%)")
    ax2.grid(False)
    ax2.spines["right"].set_visible(True)
    if top and len(tools) >= top:
        share = 100 * float(conc["cum_share"].iloc[top - 1])
        ax2.annotate(f"{' + '.join(tools[:top])} = {share:.1f}%", xy=(top - 1, share),
                     xytext=(10, -24), textcoords="offset points", fontsize=8)
    return fig


def plot_task_composition(
    comp: pd.DataFrame,
    ax: Axes | None = None,
    tools: Sequence[str] | None = None,
    interval: pd.DataFrame | None = None,
) -> Figure:
    """Fig. D5b: average calls per trajectory of each tool (bars in tool colours), one group
    of bars per task family (or whatever ``comp``'s index holds). ``interval``
    (:func:`adakit.uncertainty.bootstrap_means` of the tools over the same groups) adds each
    mean's bootstrap interval as an error bar; a group of one run gets none, and each group's
    label carries its run count (the interval table's ``n_runs``)."""
    tools = [t for t in (tools or [*TOOL_ORDER, *ACT_ORDER]) if t in comp.columns]
    if not tools:
        raise ValueError("the composition table has no tool columns")
    figures.use_style()
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(4.6, 1.5 * len(comp) + 2.2), 3.2))
    else:
        fig = ax.figure
    groups = list(comp.index)
    pos = np.arange(len(groups))
    width = 0.8 / len(tools)
    bounds = None
    if interval is not None:
        keys = [str(k) for k in comp.index.names]
        require_columns(interval, keys, "interval table")
        bounds = interval.drop_duplicates(keys).set_index(keys if len(keys) > 1 else keys[0])
    for j, tool in enumerate(tools):
        vals = comp[tool].to_numpy(dtype=float)
        err = None
        if bounds is not None and f"{tool}_lo" in bounds.columns:
            lo = bounds[f"{tool}_lo"].reindex(groups).to_numpy(dtype=float)
            hi = bounds[f"{tool}_hi"].reindex(groups).to_numpy(dtype=float)
            err = np.nan_to_num(np.vstack([np.maximum(vals - lo, 0.0),
                                           np.maximum(hi - vals, 0.0)]))
        ax.bar(pos + (j - (len(tools) - 1) / 2) * width, vals,
               width=width * 0.95, color=figures.CANONICAL_COLORS.get(tool, figures.NEUTRAL_COLOR),
               label=tool, yerr=err,
               error_kw={"elinewidth": 0.7, "capsize": 1.5, "ecolor": "#333333"})
    name = comp.index.name if isinstance(comp.index.name, str) else ""
    names = [figures.label_for(name, g) if not isinstance(g, tuple) else " | ".join(map(str, g))
             for g in groups]
    if bounds is not None and "n_runs" in bounds.columns:
        counts = bounds["n_runs"].reindex(groups).to_numpy()
        names = [f"{text}\n{uncertainty.n_note(n)}" if pd.notna(n) else text
                 for text, n in zip(names, counts, strict=True)]
    ax.set_xticks(pos, names)
    ax.set_ylabel("Avg calls / trajectory")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title="Tool")
    return fig


# ----------------------------------------------------------------- intervals (issue 12)


def interval_errors(
    interval: pd.DataFrame, metric: str, x: str, hue: str | None, h: object,
    xs: Sequence[object], values: np.ndarray,
) -> np.ndarray:
    """Asymmetric error bars (2 x len(xs): below, above) from an interval table's
    ``<metric>_lo`` / ``<metric>_hi`` for the bars of one hue; a group without an interval
    (too few runs) gets none."""
    require_columns(interval, [x, f"{metric}_lo", f"{metric}_hi"] + ([hue] if hue else []),
                    "interval table")
    sub = interval if hue is None else interval[interval[hue] == h]
    sub = sub.drop_duplicates(x).set_index(x)
    lo = sub[f"{metric}_lo"].reindex(xs).to_numpy(dtype=float)
    hi = sub[f"{metric}_hi"].reindex(xs).to_numpy(dtype=float)
    return np.vstack([np.maximum(values - lo, 0.0), np.maximum(hi - values, 0.0)])
