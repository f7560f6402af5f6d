"""What if, at turn K? The effect of a fork's change on what happens after K (docs/forks.md).

A **fork set** is the forks of one parent at one turn (``adakit fork``): they share the first K
turns (the prefix, named by its digest) and differ in the change made at K and in the seed
from K on. Placebo forks change nothing, so they measure how much a run varies after K on its
own; the effect of a change is **treated forks minus placebo forks of the same prefix**.

- :func:`fork_index` reads which runs of a corpus are forks (their header's ``forked_from``).
- :func:`fork_outcomes` gives one row per fork with what happened after K: ``turns_after``
  (turns after K), ``concluded`` (1 when the run finalized a conclusion of its own, not one
  asked for by a closing turn), ``new_files_after`` and ``new_lines_after`` (files and lines
  read after K that the prefix had not read), ``transitions_after`` and one count per Table 5
  tag of the transitions that land after K.
- :func:`fork_effects` estimates every change's effect on each of these, with a bootstrap
  interval and a permutation p from :mod:`adakit.uncertainty`'s engine. The design is paired,
  the prefix the block: seeds are resampled within each (prefix, arm) cell, and arm labels are
  permuted within each prefix only. The estimate is the difference of the pooled means (for a
  tag share: pooled transitions) of the treated and the placebo forks; with as many seeds per
  arm in every fork set, as ``adakit fork --seeds N`` makes them, it is the mean over prefixes
  of the per-prefix differences. Holm's adjustment runs over the whole table.
- When the forks' conclusions have been judged (``adakit judge`` on the fork corpus; read with
  :func:`fork_judgments`), :func:`fork_outcomes` also carries the lens 3 scores of each fork's
  conclusion (:data:`LENS3_METRICS`, normalised to 0-1 as in
  :mod:`adakit.lenses.adjudication`), and :func:`fork_effects` estimates their treated minus
  placebo difference like any other outcome. Without verdicts those rows say why in ``note``
  and carry no estimate.
- :func:`plot_fork_effects` draws the effects with their intervals against 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from adakit import config, figures, uncertainty
from adakit.judging.families import CONCLUSION_FAMILIES
from adakit.judging.store import read_corpus_judgments
from adakit.lenses import adjudication, policy
from adakit.record import merge_ranges
from adakit.uncertainty import require_columns

PLACEBO = "placebo"
FORK_COLUMNS: list[str] = [
    "run_id", "parent", "at", "prefix_sha256", "change", "value", "seed", "treatment", "arm",
    "fork_set",
]  # fmt: skip
#: The per-fork outcomes after K and their display names.
OUTCOME_METRICS: dict[str, str] = {
    "turns_after": "turns after K",
    "concluded": "own conclusion (share)",
    "new_files_after": "new files read after K",
    "new_lines_after": "new lines read after K",
}
#: The lens 3 scores of a fork's conclusion (0-1, higher is better) and their display names.
LENS3_METRICS: dict[str, str] = {
    "relevance": "task relevance (lens 3, 0-1)",
    "conclusion_grounding": "conclusion grounding (lens 3, 0-1)",
    "calibration": "termination calibration (lens 3, 0-1)",
}
#: The reading of a lens 3 row without verdicts on either side.
NOT_JUDGED = "not judged"
EFFECT_COLUMNS: list[str] = [
    "treatment", "metric", "label", "n_sets", "n_treated", "n_placebo", "treated", "placebo",
    "effect", "effect_lo", "effect_hi", "p", "p_holm", "reading", "note",
]  # fmt: skip


def treatment_of(change: str, value: str | None) -> str:
    """A change's name in tables: ``placebo``, ``condition budget_pressure``, ``inject "..."``."""
    if change == PLACEBO or value is None:
        return change
    if change == "inject":
        short = value if len(value) <= 32 else value[:31] + "…"
        return f'inject "{short}"'
    return f"{change} {value}"


def fork_index(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per fork among the runs (:data:`FORK_COLUMNS`), read from the header of each
    run's file (the runs table's ``path``); runs that are no fork are left out."""
    require_columns(runs, ["run_id", "path"], "the runs table")
    rows = []
    for run_id, path in zip(runs["run_id"], runs["path"], strict=True):
        with open(Path(path), encoding="utf-8") as fh:
            info = json.loads(fh.readline()).get("forked_from")
        if info:
            rows.append({"run_id": run_id, "parent": info["parent"], "at": int(info["turn"]),
                         "prefix_sha256": info["prefix_sha256"], "change": info["change"],
                         "value": info.get("value"), "seed": info.get("seed", 0)})
    out = pd.DataFrame(rows, columns=FORK_COLUMNS[:7])
    out["treatment"] = [treatment_of(c, v) for c, v in zip(out["change"], out["value"], strict=True)]
    out["arm"] = np.where(out["change"] == PLACEBO, PLACEBO, "treated")
    out["fork_set"] = out["parent"] + "@" + out["at"].astype(str)
    return out[FORK_COLUMNS]


def _new_lines(before: list[tuple[int, int]], after: list[tuple[int, int]]) -> int:
    """Lines in ``after``'s ranges that ``before``'s do not cover."""
    def covered(ranges: list[tuple[int, int]]) -> int:
        return sum(b - a + 1 for a, b in merge_ranges(ranges))
    return covered(before + after) - covered(before)


def _reading_after(forks: pd.DataFrame, reads: pd.DataFrame) -> pd.DataFrame:
    """Per fork: files and lines first read after its turn K."""
    r = reads.merge(forks[["run_id", "at"]], on="run_id")
    rows = []
    for run_id, d in r.groupby("run_id", sort=False):
        early = d[d["turn"] <= d["at"]]
        late = d[d["turn"] > d["at"]]
        seen = set(early["file"])
        lines = 0
        for file, part in late.groupby("file"):
            ranges = [(int(a), int(b)) for a, b in zip(part["start_line"], part["end_line"], strict=True)]
            prior = [(int(a), int(b)) for a, b in zip(
                early.loc[early["file"] == file, "start_line"],
                early.loc[early["file"] == file, "end_line"], strict=True)]
            lines += _new_lines(prior, ranges)
        rows.append({"run_id": run_id, "new_files_after": len(set(late["file"]) - seen),
                     "new_lines_after": lines})
    return pd.DataFrame(rows, columns=["run_id", "new_files_after", "new_lines_after"])


def _tags_after(forks: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
    """Per fork: transitions that land after its turn K, in all and per Table 5 tag."""
    tags = policy.tag_transitions(turns[turns["run_id"].isin(forks["run_id"])])
    tags = tags.merge(forks[["run_id", "at"]], on="run_id")
    late = tags[tags["turn_to"] > tags["at"]]
    counts = policy.tag_counts(late.drop(columns="at"))
    return counts.rename(columns={"transitions": "transitions_after"})


def fork_judgments(corpus: str | Path) -> tuple[pd.DataFrame | None, str]:
    """The verdicts on a fork corpus's conclusions (``adakit judge CORPUS`` writes them) and a
    line saying what was found: (None, the reason) when the corpus has none yet."""
    try:
        judgments = read_corpus_judgments(corpus)
    except FileNotFoundError:
        return None, (f"no lens 3 verdicts for {Path(corpus).name} yet: the lens 3 rows of the "
                      f"estimate stay empty (run `adakit judge {config.shown(corpus)}` to fill them)")
    judged = judgments.loc[judgments["family"].isin(CONCLUSION_FAMILIES), "run_id"].nunique()
    return judgments, f"lens 3: verdicts on the conclusions of {judged} fork(s)"


def lens3_outcomes(judgments: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Per run: the lens 3 scores of its conclusion (:data:`LENS3_METRICS`, NaN where a run's
    conclusion has no counted verdict) from a judgments table."""
    conclusion = judgments[judgments["family"].isin(CONCLUSION_FAMILIES)]
    scores = adjudication.lens3_scores(conclusion, runs)
    return scores[["run_id", *LENS3_METRICS]]


def fork_outcomes(forks: pd.DataFrame, runs: pd.DataFrame, turns: pd.DataFrame,
                  reads: pd.DataFrame, judgments: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per fork of ``forks`` (:func:`fork_index`) with what happened after its turn K:
    the fork columns, ``block`` (parent, K and prefix digest: the pairing unit), the
    :data:`OUTCOME_METRICS`, ``transitions_after``, one column per tag present and, with
    ``judgments`` (:func:`fork_judgments`), the :data:`LENS3_METRICS` of each fork's
    conclusion (NaN for a fork whose conclusion was not judged)."""
    require_columns(forks, FORK_COLUMNS, "the forks table")
    require_columns(runs, ["run_id", "n_turns", "reason", "closed"], "the runs table")
    out = forks.merge(runs[["run_id", "n_turns", "reason", "closed"]], on="run_id", how="left")
    out["block"] = out["parent"] + "@" + out["at"].astype(str) + "#" + out["prefix_sha256"].str[:12]
    out["turns_after"] = (out["n_turns"] - out["at"]).astype(float)
    out["concluded"] = ((out["reason"] == "finalize") & ~out["closed"].fillna(False).astype(bool)).astype(float)
    reading = _reading_after(forks, reads)
    out = out.merge(reading, on="run_id", how="left")
    out[["new_files_after", "new_lines_after"]] = out[["new_files_after", "new_lines_after"]].fillna(0.0)
    out = out.merge(_tags_after(forks, turns), on="run_id", how="left")
    tag_cols = [c for c in out.columns if c in policy.TAGS or c in policy.ACTION_TAGS]
    out[["transitions_after", *tag_cols]] = out[["transitions_after", *tag_cols]].fillna(0.0)
    if judgments is not None:
        out = out.merge(lens3_outcomes(judgments, runs[runs["run_id"].isin(forks["run_id"])]),
                        on="run_id", how="left")
    return out.drop(columns=["n_turns", "reason", "closed"])


def fork_effects(
    outcomes: pd.DataFrame,
    metrics: Mapping[str, str] | None = None,
    tags: Sequence[str] | bool = True,
    n_resamples: int = uncertainty.DEFAULT_RESAMPLES,
    n_permutations: int = uncertainty.DEFAULT_PERMUTATIONS,
    seed: int = 0,
    level: float = uncertainty.DEFAULT_LEVEL,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Every change's effect (treated minus placebo forks of the same prefixes) on each outcome
    of :func:`fork_outcomes` (``metrics``, default :data:`OUTCOME_METRICS`) and on the share
    (percent) of each tag after K (``tags``: True for every tag present, False for none, or a
    list). When ``outcomes`` carry the lens 3 scores (:func:`fork_outcomes` with judgments),
    they are outcomes too, counted over the forks whose conclusion was judged. Only fork sets
    that have both placebo and treated forks count. Columns: :data:`EFFECT_COLUMNS`
    (``reading`` "treated > placebo" / "treated < placebo" where ``p_holm`` < ``alpha``, "no
    difference shown", "too few runs" below two forks a side, or :data:`NOT_JUDGED` for a lens
    3 score no fork of either side has; ``note`` says how many forks a lens 3 row rests on,
    or why it has none)."""
    require_columns(outcomes, ["treatment", "arm", "block"], "the fork outcomes")
    spec = dict(metrics or OUTCOME_METRICS)
    if metrics is None:
        spec.update({m: m for m in LENS3_METRICS if m in outcomes.columns})
    tag_cols = [c for c in outcomes.columns if c in policy.TAGS or c in policy.ACTION_TAGS]
    chosen = tag_cols if tags is True else [t for t in (tags or []) if t in tag_cols]
    parts = []
    for treatment in dict.fromkeys(outcomes.loc[outcomes["arm"] != PLACEBO, "treatment"]):
        treated = outcomes[outcomes["treatment"] == treatment]
        placebo = outcomes[(outcomes["arm"] == PLACEBO) & outcomes["block"].isin(treated["block"])]
        treated = treated[treated["block"].isin(placebo["block"])]
        if treated.empty:
            continue
        table = pd.concat([treated, placebo], ignore_index=True)
        options = dict(pairs=[("treated", PLACEBO)], strata="block", n_permutations=n_permutations,
                       n_resamples=n_resamples, seed=seed, level=level, alpha=alpha)
        tests = [uncertainty.difference_tests(table, "arm", list(spec), **options)]
        if chosen:
            shares = {f"share: {t}": (t, "transitions_after") for t in chosen}
            tests.append(uncertainty.difference_tests(table, "arm", shares, scale=100.0, **options))
        part = pd.concat(tests, ignore_index=True)
        part["treatment"] = treatment
        part["n_sets"] = table["block"].nunique()
        parts.append(part)
    if not parts:
        return pd.DataFrame(columns=EFFECT_COLUMNS)
    out = uncertainty.adjust(parts, alpha)
    out["note"] = [_lens3_note(r.metric, r.n_a, r.n_b) for r in out.itertuples()]
    out.loc[out["note"].str.startswith("no verdicts"), "reading"] = NOT_JUDGED
    labels = {**spec, **LENS3_METRICS, **{f"share: {t}": f"{t} share after K (%)" for t in chosen}}
    out = out.assign(label=out["metric"].map(labels), n_treated=out["n_a"], n_placebo=out["n_b"],
                     treated=out["value_a"], placebo=out["value_b"], effect=out["diff"],
                     effect_lo=out["diff_lo"], effect_hi=out["diff_hi"])
    return out[EFFECT_COLUMNS].reset_index(drop=True)


def _lens3_note(metric: str, n_treated: int, n_placebo: int) -> str:
    """What a lens 3 row of the estimate rests on (empty for the other outcomes)."""
    if metric not in LENS3_METRICS:
        return ""
    if n_treated == 0 and n_placebo == 0:
        return "no verdicts on these forks' conclusions: run `adakit judge` on the fork corpus"
    return f"judged conclusions: {n_treated} treated, {n_placebo} placebo forks"


def plot_fork_effects(effects: pd.DataFrame, metrics: Sequence[str] | None = None,
                      ax: Axes | None = None) -> Figure:
    """Each change's effect on each metric (a point) with its interval (a bar), against 0:
    one row per (change, metric); ``metrics`` limits the rows (default: the outcome metrics
    that are present, and the lens 3 scores that have an estimate)."""
    figures.use_style()
    require_columns(effects, ["treatment", "metric", "label", "effect", "effect_lo", "effect_hi"],
                    "the fork effects")
    estimated = set(effects.loc[effects["effect"].notna(), "metric"])
    keep = list(metrics) if metrics is not None else [
        m for m in [*OUTCOME_METRICS, *LENS3_METRICS] if m in estimated]
    d = effects[effects["metric"].isin(keep)].reset_index(drop=True)
    if d.empty:
        raise ValueError("no fork effects to plot")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.0, 0.45 * len(d) + 1.2))
    y = np.arange(len(d))[::-1]
    ax.axvline(0.0, color="0.5", lw=1, zorder=1)
    ax.errorbar(d["effect"], y, xerr=[d["effect"] - d["effect_lo"], d["effect_hi"] - d["effect"]],
                fmt="o", color="black", capsize=3, zorder=2)
    ax.set_yticks(y, [f"{t}: {lab}" for t, lab in zip(d["treatment"], d["label"], strict=True)])
    ax.set_xlabel("treated minus placebo forks (interval over seeds)")
    ax.set_title("Effect of the change after turn K")
    return ax.figure
