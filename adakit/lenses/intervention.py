"""RQ3, the intervention boundary: the coach-judge condition read through the same lenses as
the main grid (paper §4.3, Appendix D.5; Fig. 12, Fig. 13, Tables D15-D17).

Every comparison pairs, for one trajectory model, a *baseline* run (``natural``) with a
*treatment* run (``coach_judge``) launched on the same world and task; the pair key is
``("world", "task")`` by default. When a cell holds several runs of one condition (repeats),
their values are averaged before pairing; cells that lack either side are left out (the
tables report the pair count).

=============================  ==================================================
Table D15 (surface/action)     :func:`run_metrics` -> :func:`paired_comparison`
Table D16 (per-tool turns)     the same with ``metrics=TOOL_METRICS``
Table D17 (trace grounding)    :func:`grounding_distribution`
Fig. 12a (journey arcs)        :func:`journey_comparison` -> :func:`plot_journey_comparison`
Fig. 12b (policy by regime)    :func:`regime_tag_shares` -> :func:`plot_regime_shares`
Fig. 12c (adjudication)        :func:`adjudication_comparison` ->
                               :func:`plot_adjudication_comparison`
Fig. 13 (signed footprint)     :func:`footprint_shift` -> :func:`plot_footprint_shift`
=============================  ==================================================

Definitions (where the paper leaves them open):

* **turns** counts every recorded turn; **elapsed_s** is the run's **active** time by default
  (``time="active"``: the agent's own turn times; the judges' and the coach's calls, which the
  loop makes inside a turn, and any downtime between a crash and its resume are left out, as
  the paper's near-equal time per turn, 5.50 s coach vs 5.32 s natural, implies);
  ``time="wall"`` takes the wall-clock span instead.
* **conclusion_attempts** (``attempts="unaccepted"``, the default) counts every
  ``stash_conclusion`` call except the one that ended the run: interim conclusions and
  rejected finalize attempts. It is the reading consistent with the paper's D15 figures: a
  natural run that closes at its first conclusion scores 0, so the natural mean of 0.5 is
  possible (counting finalize calls, every concluded natural run scores at least 1), and a
  coach run's 8.3 are its rejected closures plus the interim conclusions it cycles through.
  ``attempts="all"`` counts every ``stash_conclusion`` call, ``attempts="finalize"`` only
  those with ``proceed_to_finalize=true`` (accepted or rejected).
* **error_turns** counts turns with any error type (tool error, unknown tool, malformed reply).
* **coach_message_turns** counts turns whose coach decision was HINT or REJECT *and whose
  message reached Ada* (``messages="delivered"``, the default: a later turn of the run exists;
  a HINT on the accepted closing conclusion, or on the last turn before the turn bound, is
  never read). ``messages="decided"`` counts every HINT or REJECT decision. ``hint_turns`` and
  ``reject_turns`` split it, so coach_message_turns = hint_turns + reject_turns always. The
  paper's prose (179 hint turns + 39 rejection turns "among 269 coach-message turns") does not
  add up; its table's 11.2 per run x 24 runs = 269 is the total it reports, and no split of our
  counts reproduces both (see docs/deviations.md).
* per-tool metrics count the turns that called each tool.
* **Sign test.** Two-sided and exact: ties (zero differences) are dropped, and with ``n``
  non-zero differences of which ``k`` are in the rarer direction, ``p = min(1, 2 * P(X <= k))``
  for ``X ~ Binomial(n, 1/2)``; ``p = 1`` when every difference is zero.
* **Lifetime regimes (Fig. 12b).** A coach run's *natural lifetime* is its first ``L`` turns,
  ``L`` being the length of its paired natural run (the mean length when the natural side has
  repeats, rounded); every later turn is its *extended lifetime*. A transition belongs to the
  regime of the turn it lands on (:func:`adakit.lenses.policy.split_regimes`). Each regime's
  tag shares carry a bootstrap interval over its runs (a coach run is one unit in every regime
  it has transitions in), resampled within the regime as Fig. 7's are within a group.
* **Trace grounding labels (D17).** The panel's verdict per conclusion (majority, else
  median; :func:`adakit.judging.agreement.aggregate_votes`) is named by its score in the paper's
  words (``vocabulary="paper"``: 4 well supported, 3 partially supported, 2 thinly supported,
  1 unsupported; ``vocabulary="judges"`` keeps the judges' labels, well / mostly / weakly /
  unsupported); a half-step median is ``split``. Shares are out of the conclusions with a
  panel score: an item with no counted verdict is ``unclear``, shown as its own row with a
  count but no share (``unclear="drop"`` leaves the row out).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from adakit import figures, uncertainty
from adakit.judging import agreement as ag
from adakit.judging.families import CONCLUSION_FAMILIES
from adakit.lenses import adjudication as adj
from adakit.lenses import footprint as fp
from adakit.lenses import journey, policy
from adakit.record import TOOL_ORDER, Corpus, RunFile
from adakit.uncertainty import require_columns

BASELINE = "natural"
TREATMENT = "coach_judge"
#: The run columns a coach run and its natural partners share. The turn bound is among them:
#: a coach run allowed 4 turns is no twin of natural runs allowed 15 (docs/deviations.md).
PAIR_ON: tuple[str, ...] = ("world", "task", "turn_bound")

#: Table D15's metrics and their display names.
SURFACE_METRICS: dict[str, str] = {
    "turns": "Turns",
    "elapsed_s": "Elapsed time (s)",
    "conclusion_attempts": "Conclusion attempts",
    "error_turns": "Error turns",
    "coach_message_turns": "Coach-message turns",
}
#: Table D16's metrics: turns per tool, in Table 1 order.
TOOL_METRICS: dict[str, str] = {t: t for t in TOOL_ORDER}
METRIC_COLUMNS: list[str] = [
    "run_id", "model", "world", "task", "turn_bound", "condition", "repeat", "turns", "elapsed_s",
    "per_turn_s", "conclusion_attempts", "error_turns", "coach_message_turns", "hint_turns",
    "reject_turns", *TOOL_ORDER,
]  # fmt: skip
COMPARISON_COLUMNS: list[str] = [
    "metric", "label", "n_pairs", "baseline_mean", "treatment_mean", "mean_diff", "diff_lo",
    "diff_hi", "n_pos", "n_neg", "n_ties", "sign_p",
]  # fmt: skip
#: The two regimes of a treatment run, in the paper's words (Fig. 12b).
REGIME_LABELS: tuple[str, str] = ("if naturally ended", "extended lifetime")
#: Fig. 12c's dimensions (normalised lens 3 scores, higher is better).
ADJUDICATION_DIMENSIONS: tuple[str, ...] = ("conclusion_grounding", "relevance", "calibration")


# ============================================================================== sign test


def sign_test_p(n_pos: int, n_neg: int) -> float:
    """Two-sided exact sign test p-value for ``n_pos`` positive and ``n_neg`` negative
    differences (ties already dropped), computed exactly from the binomial distribution."""
    if n_pos < 0 or n_neg < 0:
        raise ValueError(f"counts must be non-negative, got {n_pos}, {n_neg}")
    n = n_pos + n_neg
    if n == 0:
        return 1.0
    k = min(n_pos, n_neg)
    tail = Fraction(sum(math.comb(n, i) for i in range(k + 1)), 2**n)
    return float(min(Fraction(1), 2 * tail))


def sign_test(differences: Sequence[float] | np.ndarray | pd.Series) -> dict[str, Any]:
    """The exact two-sided sign test of paired differences: ``{n_pos, n_neg, n_ties, p}``.
    NaN differences (a pair with a missing value) are ignored."""
    d = np.asarray(list(differences), dtype=float)
    d = d[~np.isnan(d)]
    n_pos, n_neg = int((d > 0).sum()), int((d < 0).sum())
    return {"n_pos": n_pos, "n_neg": n_neg, "n_ties": int((d == 0).sum()),
            "p": sign_test_p(n_pos, n_neg)}


def format_p(p: float) -> str:
    """A p-value as the paper prints it: ``< .001``, ``.0015``, ``0.0227``, ``1.0000``."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "–"
    if p < 0.001:
        return "< .001"
    if p < 0.01:
        return f"{p:.4f}".lstrip("0")
    return f"{p:.4f}"


# ============================================================================== D15 / D16


ATTEMPT_RULES: tuple[str, ...] = ("unaccepted", "all", "finalize")
MESSAGE_RULES: tuple[str, ...] = ("delivered", "decided")
TIME_COLUMNS: dict[str, str] = {"active": "active_s", "wall": "wall_s"}


def run_metrics(
    runs: pd.DataFrame,
    turns: pd.DataFrame,
    time: str = "active",
    attempts: str = "unaccepted",
    messages: str = "delivered",
) -> pd.DataFrame:
    """One row per run with the surface and action metrics of Tables D15 and D16.

    ``time``, ``attempts`` and ``messages`` choose the definitions of elapsed time,
    conclusion attempts and coach-message turns (module docstring; the defaults are the
    readings consistent with the paper). ``runs`` and ``turns`` are the corpus tables of
    :func:`adakit.record.load_corpus`; runs without turns get zeros. Columns:
    :data:`METRIC_COLUMNS`.
    """
    for name, value, allowed in (("time", time, tuple(TIME_COLUMNS)),
                                 ("attempts", attempts, ATTEMPT_RULES),
                                 ("messages", messages, MESSAGE_RULES)):
        if value not in allowed:
            raise ValueError(f"{name} must be one of {list(allowed)}, not {value!r}")
    clock = TIME_COLUMNS[time]
    require_columns(runs, ["run_id", "model", "world", "task", "turn_bound", "condition", "n_turns",
                           clock],
                    "the runs table")
    require_columns(turns, ["run_id", "turn", "tool", "error_type", "finalize", "coach_decision"],
                    "the turns table")
    t = turns[turns["run_id"].isin(set(runs["run_id"]))]
    decision = t["coach_decision"].astype("string").str.upper()
    finalize = t["finalize"].map(lambda v: v is True or v == 1).astype(bool).to_numpy()
    con = (t["tool"] == "CON").to_numpy()
    last_turn = t.groupby("run_id")["turn"].transform("max").to_numpy()
    is_last = t["turn"].to_numpy() == last_turn
    reason = t["run_id"].map(runs.set_index("run_id")["reason"]) if "reason" in runs.columns \
        else pd.Series(None, index=t.index)
    closing = con & finalize & is_last & (reason == "finalize").to_numpy()
    if attempts == "unaccepted":
        attempt = con & ~closing
    elif attempts == "all":
        attempt = con
    else:
        attempt = con & finalize
    seen = ~is_last if messages == "delivered" else np.ones(len(t), dtype=bool)
    flags = pd.DataFrame({
        "run_id": t["run_id"].to_numpy(),
        "conclusion_attempts": attempt,
        "error_turns": t["error_type"].notna().to_numpy(),
        "hint_turns": (decision == "HINT").fillna(False).to_numpy(dtype=bool) & seen,
        "reject_turns": (decision == "REJECT").fillna(False).to_numpy(dtype=bool) & seen,
        **{tool: (t["tool"] == tool).to_numpy() for tool in TOOL_ORDER},
    })
    counts = flags.groupby("run_id").sum(numeric_only=True)
    out = runs[["run_id", "model", "world", "task", "turn_bound", "condition"]].copy()
    out["repeat"] = runs["repeat"] if "repeat" in runs.columns else 0
    out["turns"] = runs["n_turns"].astype(int).to_numpy()
    out["elapsed_s"] = runs[clock].astype(float).to_numpy()
    out["per_turn_s"] = out["elapsed_s"] / out["turns"].where(out["turns"] > 0)
    out = out.merge(counts, left_on="run_id", right_index=True, how="left")
    count_cols = ["conclusion_attempts", "error_turns", "hint_turns", "reject_turns", *TOOL_ORDER]
    out[count_cols] = out[count_cols].fillna(0).astype(int)
    out["coach_message_turns"] = out["hint_turns"] + out["reject_turns"]
    return out[METRIC_COLUMNS].reset_index(drop=True)


def _one_model(frame: pd.DataFrame, model: str | None) -> pd.DataFrame:
    if model is None:
        models = sorted(frame["model"].dropna().unique())
        if len(models) > 1:
            raise ValueError(
                f"the table holds several models {models}; pass model= to pair one model's runs"
            )
        return frame
    out = frame[frame["model"] == model]
    if out.empty:
        raise ValueError(
            f"no runs of model {model!r}; models present: {sorted(frame['model'].unique())}"
        )
    return out


def paired_metrics(
    metrics: pd.DataFrame,
    model: str | None = None,
    baseline: str = BASELINE,
    treatment: str = TREATMENT,
    on: Sequence[str] = PAIR_ON,
    columns: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The pairs in long form: one row per (pair, metric) with the baseline and treatment
    values (means over repeats) and their difference (treatment minus baseline).

    Columns: the ``on`` columns, metric, baseline, treatment, diff, n_baseline, n_treatment.
    """
    on = list(on)
    require_columns(metrics, ["model", "condition", *on], "the metrics table")
    cols = list(columns) if columns is not None else [*SURFACE_METRICS, *TOOL_METRICS]
    require_columns(metrics, cols, "the metrics table")
    m = _one_model(metrics, model)
    sides = {}
    for name, cond in (("baseline", baseline), ("treatment", treatment)):
        d = m[m["condition"] == cond]
        if d.empty:
            raise ValueError(
                f"no {cond!r} runs to pair; conditions present: {sorted(m['condition'].unique())}"
            )
        g = d.groupby(on, dropna=False)
        sides[name] = (g[cols].mean(), g.size().rename(f"n_{name}"))
    (base, nb), (treat, nt) = sides["baseline"], sides["treatment"]
    keys = base.index.intersection(treat.index)
    out_cols = [*on, "metric", "baseline", "treatment", "diff", "n_baseline", "n_treatment"]
    if len(keys) == 0:
        return pd.DataFrame(columns=out_cols)
    b = base.loc[keys].stack().rename("baseline")
    t = treat.loc[keys].stack().rename("treatment")
    long = pd.concat([b, t], axis=1)
    long.index = long.index.set_names([*on, "metric"])
    long = long.reset_index()
    long["diff"] = long["treatment"] - long["baseline"]
    long = long.merge(nb.reset_index(), on=on).merge(nt.reset_index(), on=on)
    order = {c: i for i, c in enumerate(cols)}
    long = long.sort_values(["metric", *on], key=lambda s: s.map(order) if s.name == "metric"
                            else s, kind="stable")
    return long[out_cols].reset_index(drop=True)


def paired_comparison(
    pairs: pd.DataFrame,
    labels: Mapping[str, str] | None = None,
    n_resamples: int = uncertainty.DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = uncertainty.DEFAULT_LEVEL,
) -> pd.DataFrame:
    """Per metric: pair count, baseline and treatment means, mean difference with its
    bootstrap interval and the exact sign test (Tables D15, D16). ``pairs`` comes from
    :func:`paired_metrics`.

    The interval (``diff_lo``, ``diff_hi``) resamples the metric's pairs, ``n_resamples``
    times from ``seed`` (:func:`adakit.uncertainty.bootstrap_means`); fewer than two pairs
    give none. Columns: :data:`COMPARISON_COLUMNS`.
    """
    require_columns(pairs, ["metric", "baseline", "treatment", "diff"], "the pairs table")
    names = {**SURFACE_METRICS, **TOOL_METRICS, **(labels or {})}
    ci = uncertainty.bootstrap_means(pairs, "metric", ["diff"], n_resamples, seed, level)
    ci = ci.set_index("metric")
    rows = []
    for metric, grp in pairs.groupby("metric", sort=False):
        st = sign_test(grp["diff"])
        rows.append({
            "metric": metric, "label": names.get(metric, metric), "n_pairs": len(grp),
            "baseline_mean": grp["baseline"].mean(), "treatment_mean": grp["treatment"].mean(),
            "mean_diff": grp["diff"].mean(), "diff_lo": ci.loc[metric, "diff_lo"],
            "diff_hi": ci.loc[metric, "diff_hi"], "n_pos": st["n_pos"], "n_neg": st["n_neg"],
            "n_ties": st["n_ties"], "sign_p": st["p"],
        })
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def surface_comparison(
    runs: pd.DataFrame,
    turns: pd.DataFrame,
    model: str | None = None,
    baseline: str = BASELINE,
    treatment: str = TREATMENT,
    on: Sequence[str] = PAIR_ON,
    metrics: Mapping[str, str] = SURFACE_METRICS,
    time: str = "active",
    attempts: str = "unaccepted",
    messages: str = "delivered",
) -> pd.DataFrame:
    """Table D15 (or D16 with ``metrics=TOOL_METRICS``) straight from the corpus tables;
    ``time``, ``attempts`` and ``messages`` as in :func:`run_metrics`."""
    pairs = paired_metrics(run_metrics(runs, turns, time, attempts, messages), model, baseline,
                           treatment, on, columns=list(metrics))
    return paired_comparison(pairs, labels=metrics)


def format_comparison(
    table: pd.DataFrame,
    baseline_label: str = "Natural",
    treatment_label: str = "Coach",
    digits: int = 2,
) -> pd.DataFrame:
    """A :func:`paired_comparison` table laid out as the paper prints it, plus the bootstrap
    interval of the mean difference ("too few pairs" below two)."""
    return pd.DataFrame({
        "Metric": table["label"],
        "Pairs": table["n_pairs"],
        f"{baseline_label} mean": table["baseline_mean"].round(digits),
        f"{treatment_label} mean": table["treatment_mean"].round(digits),
        "Mean difference": table["mean_diff"].map(lambda v: f"{v:+.{digits}f}"),
        "Interval": [_interval_text(lo, hi, digits) for lo, hi in
                     zip(table["diff_lo"], table["diff_hi"], strict=True)],
        "+ / − / 0": [f"{a} / {b} / {c}" for a, b, c in
                      zip(table["n_pos"], table["n_neg"], table["n_ties"], strict=True)],
        "Sign-test p": table["sign_p"].map(format_p),
    })


def _interval_text(lo: float, hi: float, digits: int = 2) -> str:
    if pd.isna(lo) or pd.isna(hi):
        return "too few pairs"
    return f"[{lo:+.{digits}f}, {hi:+.{digits}f}]"


def coach_decisions(turns: pd.DataFrame, runs: pd.DataFrame | None = None,
                    by: Sequence[str] = ("model", "condition")) -> pd.DataFrame:
    """How often the coach passed, hinted and rejected, per group: every decision, read by the
    agent or not (D15's coach-message row counts only delivered ones by default, see
    :func:`run_metrics`). Turns without a coach record are left out. Columns: *by, decision,
    turns, runs, share (of the group's reviewed turns)."""
    require_columns(turns, ["run_id", "coach_decision"], "the turns table")
    by = list(by)
    t = turns[turns["coach_decision"].notna()]
    missing = [c for c in by if c not in t.columns]
    if missing:
        if runs is None:
            raise ValueError(f"the turns table lacks {missing}; pass the runs table")
        t = t.merge(runs[["run_id", *missing]], on="run_id", how="left")
    cols = [*by, "decision", "turns", "runs", "share"]
    if t.empty:
        return pd.DataFrame(columns=cols)
    t = t.assign(decision=t["coach_decision"].astype(str).str.upper())
    out = t.groupby([*by, "decision"]).agg(turns=("run_id", "size"), runs=("run_id", "nunique"))
    out = out.reset_index()
    out["share"] = out["turns"] / out.groupby(by)["turns"].transform("sum") if by else (
        out["turns"] / out["turns"].sum())
    return out[cols]


def plot_paired_metrics(
    pairs: pd.DataFrame,
    comparison: pd.DataFrame | None = None,
    labels: tuple[str, str] = ("Natural", "Coach"),
    ncols: int = 3,
    axes: Sequence[Axes] | None = None,
) -> Figure:
    """One small panel per metric: every pair as a line from its baseline to its treatment
    value, the means as thick markers, and in the title the number of pairs ("n = 1, no
    interval" without one), the mean difference with its bootstrap interval (when
    ``comparison`` has one) and the sign-test p."""
    figures.use_style()
    metrics = list(dict.fromkeys(pairs["metric"]))
    if not metrics:
        raise ValueError("no pairs to plot")
    comp = (comparison if comparison is not None else paired_comparison(pairs)).set_index("metric")
    if axes is None:
        nrows = math.ceil(len(metrics) / ncols)
        fig, grid = plt.subplots(nrows, ncols, figsize=(3.0 * ncols, 2.6 * nrows), squeeze=False)
        axes_list = list(grid.ravel())
        for extra in axes_list[len(metrics):]:
            extra.set_visible(False)
    else:
        axes_list = list(axes)
        if len(axes_list) < len(metrics):
            raise ValueError(f"{len(metrics)} metrics need as many axes, got {len(axes_list)}")
        fig = axes_list[0].figure
    colors = (figures.palette_for(["natural"])["natural"], figures.COACH_COLOR)
    for ax, metric in zip(axes_list, metrics, strict=False):
        d = pairs[pairs["metric"] == metric]
        for r in d.itertuples():
            ax.plot([0, 1], [r.baseline, r.treatment], color="0.7", lw=0.8, zorder=1)
        ax.scatter(np.zeros(len(d)), d["baseline"], s=12, color=colors[0], zorder=2)
        ax.scatter(np.ones(len(d)), d["treatment"], s=12, color=colors[1], zorder=2)
        ax.plot([0, 1], [d["baseline"].mean(), d["treatment"].mean()], color="black", lw=2,
                marker="D", ms=6, zorder=3)
        row = comp.loc[metric]
        span = ""
        if not pd.isna(row.get("diff_lo", np.nan)) and not pd.isna(row.get("diff_hi", np.nan)):
            span = f" {_interval_text(row['diff_lo'], row['diff_hi'])}"
        n = f"n = {len(d)}" + ("" if span else ", no interval")
        ax.set_title(f"{row['label']} ({n})\nΔ = {row['mean_diff']:+.2f}{span}, "
                     f"p {_p_text(row['sign_p'])}", fontsize=8)
        ax.set_xticks([0, 1], list(labels))
        ax.set_xlim(-0.35, 1.35)
        ax.grid(axis="x", visible=False)
    return fig


def _p_text(p: float) -> str:
    text = format_p(p)
    return text if text.startswith("<") else f"= {text}"


# ============================================================================== D17


def grounding_distribution(
    judgments: pd.DataFrame,
    runs: pd.DataFrame,
    model: str | None = None,
    baseline: str = BASELINE,
    treatment: str = TREATMENT,
    family: str = "trace_grounding",
    vocabulary: str = "paper",
    unclear: str = "row",
) -> pd.DataFrame:
    """Table D17: the panel's label per conclusion, counted per condition for one model.

    Columns: label, baseline_n, baseline_share, treatment_n, treatment_share (0-1, out of
    each condition's conclusions with a panel score; NaN for ``unclear``). Labels run from the
    best to the worst in ``vocabulary`` (module docstring), then ``split`` and (``unclear=
    "row"``) ``unclear``; rows with no item on either side are dropped.
    """
    if vocabulary not in ("paper", "judges"):
        raise ValueError(f"vocabulary must be 'paper' or 'judges', not {vocabulary!r}")
    if unclear not in ("row", "drop"):
        raise ValueError(f"unclear must be 'row' or 'drop', not {unclear!r}")
    require_columns(runs, ["run_id", "model", "condition"], "the runs table")
    if family not in CONCLUSION_FAMILIES:
        raise ValueError(f"{family!r} is not a conclusion-level family {CONCLUSION_FAMILIES}")
    r = _one_model(runs, model)
    r = r[r["condition"].isin([baseline, treatment])]
    ids = set(r["run_id"])
    agg = ag.aggregate_votes(judgments[(judgments["family"] == family)
                                       & judgments["run_id"].isin(ids)])
    names = _label_names(family)
    if vocabulary == "paper":
        names = {**names, **PAPER_LABELS.get(family, {})}
    labels = [names[s] for s in sorted(names, reverse=True)] + ["split", "unclear"]

    def name(score: float) -> str:
        if pd.isna(score):
            return "unclear"
        return names.get(float(score), "split")

    agg = agg.assign(label=agg["score"].map(name)).merge(r[["run_id", "condition"]], on="run_id")
    out = pd.DataFrame({"label": labels})
    scored = out["label"] != "unclear"
    for side, cond in (("baseline", baseline), ("treatment", treatment)):
        counts = agg[agg["condition"] == cond]["label"].value_counts()
        out[f"{side}_n"] = out["label"].map(counts).fillna(0).astype(int)
        total = out.loc[scored, f"{side}_n"].sum()
        out[f"{side}_share"] = (out[f"{side}_n"] / total).where(scored) if total else np.nan
    keep = (out["baseline_n"] > 0) | (out["treatment_n"] > 0)
    if unclear == "drop":
        keep &= scored
    return out[keep].reset_index(drop=True)


#: The paper's words for the trace grounding labels (Table D17), by score.
PAPER_LABELS: dict[str, dict[float, str]] = {
    "trace_grounding": {4.0: "well supported", 3.0: "partially supported",
                        2.0: "thinly supported", 1.0: "unsupported"},
}


def _label_names(family: str) -> dict[float, str]:
    """Score -> display label of a conclusion family, from the judges' vocabulary."""
    from adakit.judging.families import get_family

    fam = get_family(family)
    return {float(s): lab.replace("-", " ") for lab, s in zip(fam.labels, fam.scores, strict=True)}


def format_distribution(
    table: pd.DataFrame, baseline_label: str = "Natural", treatment_label: str = "Coach-Judge"
) -> pd.DataFrame:
    """A :func:`grounding_distribution` table as the paper prints it: ``10 (41.7%)``."""

    def cell(n: int, share: float) -> str:
        return f"{n} ({share * 100:.1f}%)" if not pd.isna(share) else f"{n} (–)"

    return pd.DataFrame({
        "Label": table["label"].str.capitalize(),
        baseline_label: [cell(n, s) for n, s in
                         zip(table["baseline_n"], table["baseline_share"], strict=True)],
        treatment_label: [cell(n, s) for n, s in
                          zip(table["treatment_n"], table["treatment_share"], strict=True)],
    })


def plot_grounding_distribution(
    table: pd.DataFrame,
    labels: tuple[str, str] = ("Natural", "Coach"),
    ax: Axes | None = None,
    judges: Sequence[str] | str | None = None,
) -> Figure:
    """Side-by-side bars of :func:`grounding_distribution` (share of judged conclusions); the
    title names ``judges`` (:func:`adakit.lenses.adjudication.panel_names` of the verdicts)."""
    figures.use_style()
    if table.empty:
        raise ValueError("no judged conclusions to plot")
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(5.2, 3.0))
    x = np.arange(len(table))
    scored = table["label"] != "unclear"
    colors = (figures.palette_for(["natural"])["natural"], figures.COACH_COLOR)
    for k, side in enumerate(("baseline", "treatment")):
        ax.bar(x + (k - 0.5) * 0.38, table[f"{side}_share"].fillna(0) * 100, width=0.38,
               color=colors[k],
               label=f"{labels[k]} (n = {int(table.loc[scored, f'{side}_n'].sum())})")
    ax.set_xticks(x, [str(v).capitalize() for v in table["label"]], rotation=20, ha="right")
    ax.set_ylabel("Share of judged conclusions (%)")
    ax.grid(axis="x", visible=False)
    ax.legend(frameon=False)
    ax.set_title(adj.panel_title("Trace grounding labels", judges))
    return fig


# ============================================================================== Fig. 12a


def _pairs_of_runs(
    runs: pd.DataFrame, model: str | None, baseline: str, treatment: str, on: Sequence[str]
) -> pd.DataFrame:
    r = _one_model(runs, model)
    r = r[r["condition"].isin([baseline, treatment])]
    counts = r.groupby(list(on))["condition"].nunique()
    both = counts[counts == 2].index
    return r.set_index(list(on)).loc[both].reset_index() if len(both) else r.iloc[0:0]


def journey_comparison(
    corpus: Corpus,
    model: str | None = None,
    baseline: str = BASELINE,
    treatment: str = TREATMENT,
    on: Sequence[str] = PAIR_ON,
    world: str | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fig. 12a data: lens 1's arc events (:func:`adakit.lenses.journey.arc_events`) of the
    paired baseline and treatment runs (optionally of one world), and their runs table with
    ``arm`` (the condition's display label) and ``arm_order`` (baseline first) added."""
    r = _pairs_of_runs(corpus.runs, model, baseline, treatment, on)
    if world is not None:
        r = r[r["world"] == world]
    if r.empty:
        raise ValueError(f"no {baseline!r}/{treatment!r} pairs to draw"
                         + (f" on world {world!r}" if world else ""))
    ids = set(r["run_id"])
    sub = Corpus(runs=corpus.runs[corpus.runs["run_id"].isin(ids)],
                 turns=corpus.turns[corpus.turns["run_id"].isin(ids)],
                 reads=corpus.reads[corpus.reads["run_id"].isin(ids)])
    events = journey.arc_events(sub)
    runs = sub.runs.assign(
        arm=sub.runs["condition"].map(figures.condition_label),
        arm_order=(sub.runs["condition"] == treatment).astype(int),
    )
    return events, runs.reset_index(drop=True)


def plot_journey_comparison(
    events: pd.DataFrame,
    runs: pd.DataFrame,
    on: Sequence[str] = PAIR_ON,
    width: float = 9.0,
) -> Figure:
    """Fig. 12a: lens 1's journey arcs, one panel per pair (baseline row above treatment row)
    on the pair's shared time axis (100% = the longer run), so a natural run that ends early
    shows where it stops in the coach run's timeline; coach hints and rejections are marked."""
    return journey.plot_journey_arcs(
        events, runs, facet=tuple(on), axis="time", scale="panel", max_runs_per_panel=None,
        row_label="arm", sort_by="arm_order", width=width,
    )


# ============================================================================== Fig. 12b


def natural_lifetimes(
    runs: pd.DataFrame,
    model: str | None = None,
    baseline: str = BASELINE,
    treatment: str = TREATMENT,
    on: Sequence[str] = PAIR_ON,
) -> pd.Series:
    """For every paired treatment run, the turn index where its extended lifetime starts:
    the paired baseline run's length (mean over repeats, rounded) plus one."""
    r = _pairs_of_runs(runs, model, baseline, treatment, on)
    if r.empty:
        return pd.Series(dtype=int, name="at_turn")
    lengths = r[r["condition"] == baseline].groupby(list(on))["n_turns"].mean().round()
    treat = r[r["condition"] == treatment].set_index(list(on))
    at = lengths.reindex(treat.index).astype(int) + 1
    return pd.Series(at.to_numpy(), index=treat["run_id"].to_numpy(), name="at_turn")


def regime_tag_shares(
    runs: pd.DataFrame,
    turns: pd.DataFrame,
    model: str | None = None,
    baseline: str = BASELINE,
    treatment: str = TREATMENT,
    on: Sequence[str] = PAIR_ON,
    weight: str = "transition",
    n_resamples: int = uncertainty.DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = uncertainty.DEFAULT_LEVEL,
) -> pd.DataFrame:
    """Fig. 12b data: policy tag shares (lens 2) of the paired runs in four rows: the baseline
    condition, the treatment's natural lifetime, its extended lifetime, and the treatment
    overall, each share with its bootstrap interval
    (:func:`adakit.lenses.policy.tag_share_intervals`): the runs of a regime (a treatment run's
    part in it) are resampled within that regime, ``n_resamples`` times from ``seed``.
    Columns: regime, tag, count, share, transitions, runs, share_lo, share_hi, note."""
    r = _pairs_of_runs(runs, model, baseline, treatment, on)
    if r.empty:
        raise ValueError(f"no {baseline!r}/{treatment!r} pairs to split into regimes")
    tags = policy.tag_transitions(turns[turns["run_id"].isin(set(r["run_id"]))])
    cond = r.set_index("run_id")["condition"]
    tags = tags.assign(condition=tags["run_id"].map(cond))
    base_label = f"{figures.condition_label(baseline)} condition"
    treat_label = f"{figures.condition_label(treatment)} condition"
    names = (f"{treat_label} {REGIME_LABELS[0]}", f"{treat_label} {REGIME_LABELS[1]}")
    split = policy.split_regimes(tags[tags["condition"] == treatment],
                                 natural_lifetimes(runs, model, baseline, treatment, on),
                                 labels=names)
    parts = [
        tags[tags["condition"] == baseline].assign(regime=base_label),
        split,
        tags[tags["condition"] == treatment].assign(regime=f"{treat_label} overall"),
    ]
    frame = pd.concat(parts, ignore_index=True)
    shares = policy.tag_share_intervals(frame, by="regime", weight=weight,
                                             n_resamples=n_resamples, seed=seed, level=level)
    order = {v: i for i, v in enumerate([base_label, *names, f"{treat_label} overall"])}
    shares = shares.assign(_o=shares["regime"].map(order)).sort_values("_o", kind="stable")
    return shares.drop(columns="_o").reset_index(drop=True)


def plot_regime_shares(shares: pd.DataFrame, ax: Axes | None = None) -> Figure:
    """Fig. 12b: stacked tag shares per regime (lens 2's bar chart), the regimes in the
    table's row order; with :func:`regime_tag_shares`' interval columns each prominent
    segment carries its bootstrap whisker, as in Fig. 7."""
    interval = shares if {"share_lo", "share_hi"} <= set(shares.columns) else None
    return policy.plot_tag_shares(shares, ax=ax, title="Action policy by lifetime regime",
                                  interval=interval, order=list(dict.fromkeys(shares["regime"])))


# ============================================================================== Fig. 12c


def adjudication_comparison(
    judgments: pd.DataFrame,
    runs: pd.DataFrame,
    model: str | None = None,
    baseline: str = BASELINE,
    treatment: str = TREATMENT,
    dimensions: Sequence[str] = ADJUDICATION_DIMENSIONS,
) -> pd.DataFrame:
    """Fig. 12c data: one row per (run, dimension) of the model's baseline and treatment runs
    with the normalised lens 3 score (0-1, higher is better; :mod:`adakit.lenses.adjudication`).
    Columns: run_id, world, task, condition, dimension, value, and ``judges`` (the run's judge
    panel) when the judgments name their judges."""
    r = _one_model(runs, model)
    r = r[r["condition"].isin([baseline, treatment])]
    families = {adj.DIMENSIONS[d][0] for d in dimensions if d in adj.DIMENSIONS}
    keep = judgments["family"].isin(families) & judgments["run_id"].isin(set(r["run_id"]))
    scores = adj.lens3_scores(judgments[keep], r)
    cols = ["run_id", "world", "task", "condition", "dimension", "value"]
    keep_cols = ["run_id", "world", "task", "condition"]
    if adj.JUDGES in scores.columns:
        cols.append(adj.JUDGES)
        keep_cols.append(adj.JUDGES)
    frames = []
    for dim in dimensions:
        if dim not in adj.DIMENSIONS:
            raise ValueError(f"unknown lens 3 dimension {dim!r}; known: {list(adj.DIMENSIONS)}")
        d = scores[scores[dim].notna()]
        frames.append(d[keep_cols].assign(
            dimension=dim, value=d[dim].astype(float)))
    return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)


def summarize_adjudication(
    long: pd.DataFrame,
    n_resamples: int = uncertainty.DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = uncertainty.DEFAULT_LEVEL,
) -> pd.DataFrame:
    """Median, quartiles, count and mean per (dimension, condition) of
    :func:`adjudication_comparison`, the mean with its bootstrap interval over the group's runs
    (``mean_lo``, ``mean_hi``; none below two runs)."""
    g = long.groupby(["dimension", "condition"], sort=False)["value"]
    out = g.agg(n="count", median="median", q1=lambda v: v.quantile(0.25),
                q3=lambda v: v.quantile(0.75), mean="mean").reset_index()
    ci = uncertainty.bootstrap_means(long, ["dimension", "condition"], ["value"], n_resamples,
                                     seed, level)
    ci = ci.rename(columns={"value_lo": "mean_lo", "value_hi": "mean_hi"})
    return out.merge(ci[["dimension", "condition", "mean_lo", "mean_hi"]],
                     on=["dimension", "condition"], how="left")


def plot_adjudication_comparison(
    long: pd.DataFrame,
    baseline: str = BASELINE,
    treatment: str = TREATMENT,
    ax: Axes | None = None,
    seed: int = 0,
) -> Figure:
    """Fig. 12c: per dimension a baseline and a treatment box over runs, every run a point,
    each box marked with its run count ("n = 1, no interval" for one run); the title names
    the judges (``judges`` column)."""
    figures.use_style()
    if long.empty:
        raise ValueError("no adjudicated runs to plot")
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(6.4, 3.6))
    dims = list(dict.fromkeys(long["dimension"]))
    colors = {baseline: figures.palette_for(["natural"])["natural"], treatment: figures.COACH_COLOR}
    rng = np.random.default_rng(seed)
    for k, dim in enumerate(dims):
        for j, cond in enumerate((baseline, treatment)):
            rows = long[(long["dimension"] == dim) & (long["condition"] == cond)]
            v = rows["value"].to_numpy(float)
            if len(v) == 0:
                continue
            x = k + (j - 0.5) * 0.4
            c = colors[cond]
            ax.boxplot(v, positions=[x], widths=0.32, patch_artist=True, showfliers=False,
                       boxprops={"facecolor": c, "alpha": 0.3, "edgecolor": c},
                       medianprops={"color": c, "linewidth": 1.8},
                       whiskerprops={"color": c}, capprops={"color": c})
            ax.scatter(x + rng.uniform(-0.08, 0.08, len(v)), v, s=9, color=c, lw=0, zorder=3)
            ax.text(x, 1.09, uncertainty.n_note(rows["run_id"].nunique()).replace(", ", ",\n"),
                    ha="center", va="center", fontsize=6, color="0.35")
    ax.set_xticks(range(len(dims)), [adj.DIMENSIONS[d][1] for d in dims])
    ax.set_xlim(-0.6, len(dims) - 0.4)
    ax.set_ylim(-0.05, 1.17)
    ax.set_ylabel("Score (normalised)")
    ax.grid(axis="x", visible=False)
    ax.legend(handles=[Patch(color=colors[c], alpha=0.6, label=figures.condition_label(c))
                       for c in (baseline, treatment)], frameon=False, loc="lower left")
    ax.set_title(adj.panel_title("Adjudication: natural vs coach", adj.panel_names(long)))
    return fig


# ============================================================================== Fig. 13


def footprint_shift(
    reads: pd.DataFrame,
    runs: pd.DataFrame,
    world: str,
    model: str | None = None,
    baseline: str = BASELINE,
    treatment: str = TREATMENT,
) -> pd.DataFrame:
    """Fig. 13 data: per-file trace density of the treatment runs minus the baseline runs of
    one model on one world (lines per run; :func:`adakit.lenses.footprint.density_difference`).
    """
    r = _one_model(runs, model)
    m = r["model"].iloc[0]
    return fp.density_difference(
        reads, runs,
        a={"model": m, "world": world, "condition": treatment},
        b={"model": m, "world": world, "condition": baseline},
    )


def plot_footprint_shift(
    files: pd.DataFrame,
    shift: pd.DataFrame,
    labels: tuple[str, str] = ("Coach", "Natural"),
    ax: Axes | None = None,
    **kwargs: Any,
) -> Figure:
    """Fig. 13: the signed trace density map, red where the coach runs read more."""
    return fp.plot_difference_map(files, shift, labels=labels, ax=ax, **kwargs)


def world_files(world: str, reads: pd.DataFrame) -> pd.DataFrame:
    """The files table (file, loc) of a world for the maps: the fetched world's source files
    plus every file the corpus read there. When the world is not on disk, or none of the files
    the corpus read exist in it (e.g. a synthetic corpus), the files the corpus read stand in
    (LOC = highest line read)."""
    from adakit.apparatus.world import WorldUnavailable, open_world

    r = reads[reads["world"] == world] if "world" in reads.columns else reads
    try:
        w = open_world(world, fetch=False, progress=False)
    except (WorldUnavailable, KeyError, ValueError, OSError):
        return fp.files_from_reads(r)
    files = fp.world_files_table(w, progress=False)
    if r.empty or not set(r["file"]).intersection(files["file"]):
        return fp.files_from_reads(r) if not r.empty else files
    return fp.complete_files(files, r)


# ============================================================================== records


REPORT_COLUMNS: list[str] = [
    "run_id", "turn", "tool", "decision", "consulted", "judge", "valid", "ratings", "concerns",
    "reasoning", "message",
]


def coach_reports(run: RunFile) -> pd.DataFrame:
    """The coach records of one run as a table: one row per (turn, judge) with the judge's
    ratings and reasoning, the turn's decision and the coach's message (a turn reviewed
    without a judge report, e.g. a synthetic one, gets one row with ``judge`` None)."""
    rows = []
    for t in run.turns:
        rec = t.coach
        if not rec:
            continue
        base = {"run_id": run.header.run_id, "turn": t.turn, "tool": t.metrics.tool,
                "decision": rec.get("decision"), "consulted": rec.get("consulted"),
                "message": rec.get("message", "")}
        report = rec.get("report") or [None]
        for j in report:
            if j is None:
                rows.append({**base, "judge": None, "valid": None, "ratings": "",
                             "concerns": "", "reasoning": ""})
                continue
            ratings = ", ".join(f"{k}={v}" for k, v in (j.get("ratings") or {}).items()
                                if v not in ("", None, []))
            rows.append({**base, "judge": j.get("role"), "valid": j.get("valid"),
                         "ratings": ratings, "concerns": "; ".join(j.get("concerns") or []),
                         "reasoning": j.get("reasoning", "")})
    return pd.DataFrame(rows, columns=REPORT_COLUMNS)


__all__ = [
    "ADJUDICATION_DIMENSIONS", "BASELINE", "METRIC_COLUMNS", "SURFACE_METRICS", "TOOL_METRICS",
    "TREATMENT", "adjudication_comparison", "coach_decisions", "coach_reports", "footprint_shift",
    "format_comparison", "format_distribution", "format_p", "grounding_distribution",
    "journey_comparison", "natural_lifetimes", "paired_comparison", "paired_metrics",
    "plot_adjudication_comparison", "plot_footprint_shift", "plot_grounding_distribution",
    "plot_journey_comparison", "plot_paired_metrics", "plot_regime_shares", "regime_tag_shares",
    "run_metrics", "sign_test", "sign_test_p", "summarize_adjudication", "surface_comparison",
    "world_files",
]  # fmt: skip
