"""How far to trust lens 3: agreement, judge severity, human alignment, length robustness.

Everything here reads the judgments table written by the judges (one row per verdict, as
:func:`adakit.judging.store.read_judgments` reads it; the columns used are):

``item_id, run_id, family, judge, turn, tool, label, score, rationale, valid``

and, for the length checks, the runs table of :func:`adakit.record.load_corpus`. The tables of
the paper's Appendix C map onto functions:

====================  =====================================================
Table C5              :func:`judge_agreement`
Table C6              :func:`judge_severity`
Table C7              :func:`human_alignment` (labels from :func:`load_human_labels`)
Table C8              :func:`model_human_alignment`
(several labellers)   :func:`by_labeller` (C7/C8 per labeller), :func:`human_agreement`
                      (human-human), :func:`agreement_overview` (judge-judge, human-judge and
                      human-human kappa side by side), :func:`format_undefined`
Table C9 / Fig. D9    :func:`length_robustness` (``length="conclusion_words"``)
Table C10             :func:`length_robustness` (``length="valid_turns"``)
Table C11             :func:`conclusion_length_by_model`
Table D12             :func:`length_diagnostic_by_model`
====================  =====================================================

Scoring rules, stated once:

* A verdict counts only when ``valid`` is true, its label is not ``"unclear"`` and its score
  is on the family's scale (:func:`adakit.judging.store.clean_judgments`). Unclear and failed
  verdicts are excluded (NaN), never scored low.
* Conclusion families are scored 1..4 (one step = 1). Turn families carry the prior-leaning
  index 0 / 0.5 / 1 (evidence-led or trajectory-grounded = 0, mixed = 0.5, prior-led or
  prior-shaped = 1; one step = 0.5).
* The panel vote (:func:`aggregate_votes`): among an item's counted verdicts, a label held by a
  strict majority wins (2 of 3 agree); otherwise the item takes the median score (for three
  different labels, the middle one; if only two counted verdicts disagree, their midpoint,
  e.g. 2.5). An item with no counted verdict is NaN. Single-judge families reduce to that
  judge's verdict.
* Weighted kappa is Cohen's kappa with quadratic weights on the score values, so equally
  spaced categories give the textbook statistic and a half-step median sits halfway between.
* Degenerate inputs give NaN, never a number that looks like a finding, and every table says
  why in its ``note`` column (:func:`print_notes` prints them): a correlation needs at least 3
  pairs and some variance on both sides (two points always lie on a line, r = ±1); a weighted
  kappa needs at least 2 pairs and some chance disagreement; an R² needs more observations
  than the rank of its design (a saturated fit is perfect by construction, so its added R²
  says nothing); agreement needs at least two judges that answer independently: seats named
  ``model#1``, ``model#2`` ... hold one model's verdict copied to each seat and count once.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterable, Sequence
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

from adakit.judging.families import (
    CONCLUSION_FAMILIES,
    FAMILIES,
    LABEL_SCORES,
    SCALES,
    UNCLEAR,
    label_of,
)
from adakit.judging.store import JUDGMENT_COLUMNS, clean_judgments
from adakit.record import COG, NAV

# --------------------------------------------------------------------------- vocabulary

#: The size of one ordinal step of each family's scale.
STEP: dict[str, float] = {f: 1.0 if f in CONCLUSION_FAMILIES else 0.5 for f in FAMILIES}
#: The controls of the length checks (Tables C9, C10): categorical, entered as dummies.
LENGTH_CONTROLS: tuple[str, ...] = ("model", "condition", "task", "world")
#: Conditions outside the paper's main grid (the length checks use the main non-coach grid).
NON_GRID_CONDITIONS: tuple[str, ...] = ("coach_judge",)


# --------------------------------------------------------------------------- the table


def judge_matrix(judgments: pd.DataFrame, family: str) -> pd.DataFrame:
    """Items x judges matrix of counted scores for one family (NaN where a verdict is missing)."""
    return _matrix(clean_judgments(judgments), family)


def _matrix(clean: pd.DataFrame, family: str) -> pd.DataFrame:
    j = clean[clean["family"] == family]
    return j.pivot(index="item_id", columns="judge", values="score").sort_index(axis=1)


def aggregate_votes(judgments: pd.DataFrame) -> pd.DataFrame:
    """One row per (family, item): the panel's score by majority-else-median (module doc).

    Columns: family, item_id, run_id, turn, tool, score, label (of a verdict with the chosen
    score; None for an off-scale midpoint), rule ('majority', 'median' or 'none'),
    n_judges (verdict rows), n_counted (verdicts that count).
    """
    j = clean_judgments(judgments)
    for col in ("run_id", "turn", "tool"):
        if col not in j.columns:
            j[col] = np.nan
    key = ["family", "item_id"]
    j["label"] = j["label"].astype("string").str.strip()
    items = j.groupby(key, sort=True).agg(
        run_id=("run_id", "first"), turn=("turn", "first"), tool=("tool", "first"),
        n_judges=("judge", "size"), n_counted=("counted", "sum"),
    )
    c = j[j["counted"]]
    per_score = c.groupby([*key, "score"]).size().rename("votes").reset_index()
    per_score = per_score.join(items["n_counted"], on=key)
    majority = per_score[per_score["votes"] * 2 > per_score["n_counted"]].set_index(key)["score"]
    median = c.groupby(key)["score"].median()
    out = items.join(majority.rename("majority")).join(median.rename("median"))
    out["score"] = out["majority"].fillna(out["median"])
    out["rule"] = np.where(out["majority"].notna(), "majority",
                           np.where(out["median"].notna(), "median", "none"))
    first_label = c.drop_duplicates([*key, "score"]).set_index([*key, "score"])["label"]
    lookup = pd.MultiIndex.from_arrays([out.index.get_level_values(0),
                                        out.index.get_level_values(1), out["score"]])
    out["label"] = first_label.reindex(lookup).to_numpy(dtype=object)
    out["label"] = out["label"].where(out["label"].notna(), None)
    out["n_counted"] = out["n_counted"].astype(int)
    cols = ["run_id", "turn", "tool", "score", "label", "rule", "n_judges", "n_counted"]
    return out[cols].reset_index()


def run_scores(
    judgments: pd.DataFrame,
    runs: pd.DataFrame | None = None,
    families: Sequence[str] = FAMILIES,
) -> pd.DataFrame:
    """One row per run, one column per family on its own scale: the panel score for a
    conclusion family, the mean item score (the prior-leaning index) for a turn family.

    With ``runs``, the run table's columns are joined in front (every run kept, NaN where a
    run has no judged item); ``n_<family>`` columns count the scored items per run.
    """
    agg = aggregate_votes(judgments)
    agg = agg[agg["family"].isin(families) & agg["score"].notna()]
    if agg["run_id"].isna().any():
        raise ValueError("judgments without run_id cannot be placed on runs")
    wide = agg.pivot_table(index="run_id", columns="family", values="score", aggfunc="mean")
    counts = agg.pivot_table(index="run_id", columns="family", values="score", aggfunc="count")
    counts.columns = [f"n_{c}" for c in counts.columns]
    wide = wide.reindex(columns=list(families))
    table = wide.join(counts).reset_index()
    if runs is not None:
        table = add_length_columns(runs).merge(table, on="run_id", how="left")
        for fam in families:
            table[f"n_{fam}"] = table.get(f"n_{fam}", pd.Series(0, index=table.index))
            table[f"n_{fam}"] = table[f"n_{fam}"].fillna(0).astype(int)
    return table


# --------------------------------------------------------------------------- statistics


def _pairs(x: Iterable[float], y: Iterable[float]) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(list(x), dtype=float)
    b = np.asarray(list(y), dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.shape} vs {b.shape}")
    keep = ~(np.isnan(a) | np.isnan(b))
    return a[keep], b[keep]


#: The fewest pairs a correlation is computed from (two points always give r = ±1).
MIN_CORRELATION_PAIRS = 3
#: The fewest pairs a weighted kappa is computed from.
MIN_KAPPA_PAIRS = 2


def correlation_note(x: Iterable[float], y: Iterable[float]) -> str:
    """Why :func:`pearson` / :func:`spearman` of these values is NaN ("" when it is not)."""
    a, b = _pairs(x, y)
    if len(a) < MIN_CORRELATION_PAIRS:
        return (f"correlation undefined: n = {len(a)} pair(s), at least "
                f"{MIN_CORRELATION_PAIRS} needed")
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return "correlation undefined: one side is constant"
    return ""


def kappa_note(x: Iterable[float], y: Iterable[float]) -> str:
    """Why :func:`weighted_kappa` of these values is NaN ("" when it is not)."""
    a, b = _pairs(x, y)
    if len(a) < MIN_KAPPA_PAIRS:
        return f"weighted kappa undefined: n = {len(a)} pair(s), at least {MIN_KAPPA_PAIRS} needed"
    if np.ptp(a) == 0 and np.ptp(b) == 0 and a[0] == b[0]:
        return "weighted kappa undefined: both raters give one and the same value"
    return ""


def pearson(x: Iterable[float], y: Iterable[float]) -> float:
    """Pearson r over the pairs where both values exist; NaN with fewer than 3 pairs or no
    variance (:func:`correlation_note` says which)."""
    a, b = _pairs(x, y)
    if len(a) < MIN_CORRELATION_PAIRS:
        return np.nan
    da, db = a - a.mean(), b - b.mean()
    den = np.sqrt((da * da).sum() * (db * db).sum())
    return float((da * db).sum() / den) if den > 0 else np.nan


def spearman(x: Iterable[float], y: Iterable[float]) -> float:
    """Spearman rho: Pearson r of the ranks, ties sharing their average rank."""
    a, b = _pairs(x, y)
    return pearson(pd.Series(a).rank().to_numpy(), pd.Series(b).rank().to_numpy())


def weighted_kappa(
    x: Iterable[float], y: Iterable[float], categories: Sequence[float] | None = None
) -> float:
    """Cohen's kappa with quadratic weights ``(v_i - v_j)**2`` over the score values.

    ``categories`` fixes the scale (values seen in the data are added). Returns NaN when the
    chance disagreement is zero (both raters constant on one value) or with fewer than 2
    pairs (one pair scores 0 or NaN by construction; :func:`kappa_note` says which).
    """
    a, b = _pairs(x, y)
    if len(a) < MIN_KAPPA_PAIRS:
        return np.nan
    cats = np.array(sorted(set(categories or ()) | set(a) | set(b)), dtype=float)
    index = {v: i for i, v in enumerate(cats)}
    observed = np.zeros((len(cats), len(cats)))
    for u, v in zip(a, b, strict=True):
        observed[index[u], index[v]] += 1
    observed /= len(a)
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0))
    weights = (cats[:, None] - cats[None, :]) ** 2
    chance = (weights * expected).sum()
    if chance == 0:
        return np.nan
    return float(1.0 - (weights * observed).sum() / chance)


def _design(y: np.ndarray, design: np.ndarray) -> np.ndarray:
    return np.column_stack([np.ones(len(y)), design]) if design.size else np.ones((len(y), 1))


def saturation_note(y: np.ndarray, design: np.ndarray) -> str:
    """Why :func:`r_squared` of this fit is NaN because the fit is saturated ("" if not)."""
    n = len(np.asarray(y))
    if n == 0:
        return "R² undefined: no observations"
    rank = int(np.linalg.matrix_rank(_design(np.asarray(y), design)))
    if n <= rank:
        return (f"R² undefined: saturated fit, n = {n} observations for {rank} independent "
                "parameters (no residual degrees of freedom)")
    return ""


def r_squared(y: np.ndarray, design: np.ndarray) -> float:
    """R^2 of the least-squares fit of ``y`` on the columns of ``design`` (with intercept);
    NaN for a saturated fit, n <= the rank of the design (:func:`saturation_note`)."""
    y = np.asarray(y, dtype=float)
    if len(y) == 0:
        return np.nan
    X = _design(y, design)
    if len(y) <= np.linalg.matrix_rank(X):
        return np.nan
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    resid = y - X @ beta
    sst = ((y - y.mean()) ** 2).sum()
    return float(1.0 - (resid @ resid) / sst) if sst > 0 else np.nan


def dummies(frame: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """Treatment-coded dummies (first level dropped) of categorical columns, as floats."""
    cols = [c for c in columns if c in frame.columns]
    if not cols or frame.empty:
        return np.zeros((len(frame), 0))
    d = pd.get_dummies(frame[cols].astype(str), drop_first=True, dtype=float)
    return d.to_numpy(dtype=float)


# --------------------------------------------------------------------------- C5, C6


_SEAT_COPY = re.compile(r"#\d+$")


def seat_model(judge: str) -> str:
    """The model behind a judge seat: ``"m#2"`` -> ``"m"`` (seats of one model that
    ``adakit judge`` fills with a copy of its verdict), any other name unchanged."""
    return _SEAT_COPY.sub("", str(judge))


def copied_seats(judges: Iterable[str]) -> dict[str, list[str]]:
    """Models that sit in several seats with one copied verdict: model -> its seats."""
    by_model: dict[str, list[str]] = {}
    for judge in judges:
        by_model.setdefault(seat_model(judge), []).append(str(judge))
    return {m: seats for m, seats in by_model.items() if len(seats) > 1 and any(
        _SEAT_COPY.search(s) for s in seats)}


def judge_agreement(judgments: pd.DataFrame, families: Sequence[str] | None = None) -> pd.DataFrame:
    """Table C5: per family, agreement among the judges over items.

    ``pair_exact`` and ``mean_step_diff`` average over every (item, judge pair) where both
    verdicts count (the step difference is ``|a - b|`` in ordinal steps); ``all_same_rate``
    is the share of complete items (every judge counted) on which all judges agree. Seats of
    one model with a copied verdict (``m#1``, ``m#2``) count as one judge (``n_judges`` counts
    independent judges). With fewer than two independent judges (a single judge, or one model
    copied into every seat) the agreement columns are NaN; ``note`` says why.
    """
    j = clean_judgments(judgments)
    fams = [f for f in (families or FAMILIES) if f in set(j["family"])]
    rows = []
    for fam in fams:
        m = _matrix(j, fam)
        copies = copied_seats(m.columns)
        note = ""
        if copies:
            keep = list(dict.fromkeys(seats[0] if (seats := copies.get(seat_model(c))) else c
                                      for c in m.columns))
            m = m[keep]
            note = "; ".join(f"seats {', '.join(seats)} hold one copied verdict of {model} and "
                             "count once" for model, seats in copies.items())
        if m.shape[1] < 2:
            why = ("agreement undefined: fewer than two independent judges" if copies else
                   "agreement undefined: a single judge")
            note = "; ".join(x for x in (note, why) if x)
        diffs = []
        for a, b in combinations(m.columns, 2):
            x, y = _pairs(m[a], m[b])
            diffs.append(np.abs(x - y) / STEP[fam])
        d = np.concatenate(diffs) if diffs else np.array([])
        complete = m.dropna()
        same = (complete.nunique(axis=1) == 1) if len(complete) else pd.Series(dtype=bool)
        rows.append({
            "family": fam,
            "n_items": int((m.notna().sum(axis=1) > 0).sum()),
            "n_judges": m.shape[1],
            "n_pairs": len(d),
            "pair_exact": float((d == 0).mean()) if len(d) else np.nan,
            "mean_step_diff": float(d.mean()) if len(d) else np.nan,
            "n_complete": len(complete),
            "all_same_rate": float(same.mean()) if len(complete) and m.shape[1] > 1 else np.nan,
            "note": note,
        })
    return pd.DataFrame(rows, columns=["family", "n_items", "n_judges", "n_pairs", "pair_exact",
                                       "mean_step_diff", "n_complete", "all_same_rate", "note"])


def judge_severity(judgments: pd.DataFrame, families: Sequence[str] | None = None) -> pd.DataFrame:
    """Table C6: mean counted score per judge per family (most lenient first), with n and sd.

    ``excluded`` counts the judge's unclear or failed verdicts, which do not enter the mean.
    """
    j = clean_judgments(judgments)
    if families is not None:
        j = j[j["family"].isin(families)]
    g = j.groupby(["family", "judge"])
    out = pd.DataFrame({
        "n": g["score"].count(),
        "mean_score": g["score"].mean(),
        "sd": g["score"].std(),
        "excluded": g["counted"].apply(lambda s: int((~s).sum())),
    }).reset_index()
    order = {f: i for i, f in enumerate(FAMILIES)}
    out["_f"] = out["family"].map(order)
    out = out.sort_values(["_f", "mean_score"], ascending=[True, False]).drop(columns="_f")
    return out.reset_index(drop=True)


# --------------------------------------------------------------------------- human labels


def _norm_family(value: object) -> str:
    return str(value).strip().lower().replace(" ", "_").replace("-", "_")


def _parse_human(family: str, label: str, score_text: str) -> tuple[str | None, float, list[str]]:
    """(label, score, problems) of one human label row; 'unclear' keeps its label, no score."""
    problems: list[str] = []
    scale = LABEL_SCORES[family]
    if label.endswith(".0") and label[:-2] in scale:
        label = label[:-2]  # '3.0' from a spreadsheet is the label '3'
    label_score = np.nan
    if label and label != UNCLEAR:
        if label in scale:
            label_score = scale[label]
        else:
            problems.append(f"label {label!r} is not one of {[*scale, UNCLEAR]} for {family}")
    score = np.nan
    if score_text:
        try:
            score = float(score_text)
        except ValueError:
            problems.append(f"score {score_text!r} is not a number")
        else:
            if score not in SCALES[family]:
                problems.append(f"score {score_text} is off the {family} scale {SCALES[family]}")
                score = np.nan
    if not (np.isnan(label_score) or np.isnan(score)) and label_score != score:
        problems.append(f"label {label!r} ({label_score}) contradicts score {score_text}")
    if not label and not score_text:
        problems.append("neither label nor score")
    if label == UNCLEAR:
        return UNCLEAR, np.nan, problems
    final = label_score if not np.isnan(label_score) else score
    return (label or label_of(family, final)), final, problems


def load_human_labels(
    path: str | Path,
    judgments: pd.DataFrame | None = None,
    allow_unknown_items: bool = False,
) -> pd.DataFrame:
    """Read human labels from a CSV with columns ``item_id, family`` and ``label`` and/or
    ``score`` (labels as in the judgments table; 'unclear' allowed and left unscored).

    Families may be spelled as in the paper ('Task Relevance'). Returns ``item_id, family,
    label, score``. Raises ``ValueError`` naming the offending CSV lines for unknown families,
    labels or scores, label/score conflicts, duplicate (item, family) pairs, and, when
    ``judgments`` is given, items never judged in that family (unless ``allow_unknown_items``).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no human labels file at {path}")
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    raw.columns = [c.strip().lower() for c in raw.columns]
    if not {"item_id", "family"} <= set(raw.columns) or not {"label", "score"} & set(raw.columns):
        raise ValueError(
            f"{path}: need columns item_id, family and label or score; found {list(raw.columns)}"
        )
    if raw.empty:
        raise ValueError(f"{path}: no label rows")
    empty = pd.Series("", index=raw.index)
    labels = raw["label"].str.strip().str.lower() if "label" in raw else empty
    score_texts = raw["score"].str.strip() if "score" in raw else empty
    rows, problems = [], []
    for n, i in enumerate(raw.index, start=2):  # CSV line numbers: the header is line 1
        item, fam = raw.at[i, "item_id"].strip(), _norm_family(raw.at[i, "family"])
        if not item:
            problems.append(f"line {n}: empty item_id")
        if fam not in FAMILIES:
            problems.append(f"line {n}: unknown family {raw.at[i, 'family']!r}")
            continue
        label, score, issues = _parse_human(fam, labels[i], score_texts[i])
        problems.extend(f"line {n}: {msg}" for msg in issues)
        rows.append({"line": n, "item_id": item, "family": fam, "label": label, "score": score})
    out = pd.DataFrame(rows, columns=["line", "item_id", "family", "label", "score"])
    for (item, fam), grp in out[out.duplicated(["item_id", "family"], keep=False)].groupby(
        ["item_id", "family"]
    ):
        lines = ", ".join(str(x) for x in grp["line"])
        problems.append(f"lines {lines}: item {item!r} labelled more than once for {fam}")
    if judgments is not None and not allow_unknown_items:
        judged = set(zip(judgments["item_id"].astype(str), judgments["family"], strict=True))
        for r in out.itertuples():
            if r.item_id and (r.item_id, r.family) not in judged:
                problems.append(f"line {r.line}: item {r.item_id!r} has no {r.family} judgment")
    if problems:
        shown = "\n  ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise ValueError(
            f"{path}: {len(problems)} problem(s) in the human labels:\n  {shown}{more}"
        )
    out["score"] = out["score"].astype(float)
    return out.drop(columns="line").reset_index(drop=True)


def display_label(family: str, score: float) -> str | None:
    """A label for display: ``'4 fully-addressed'`` on the 1-4 scale, the name otherwise."""
    name = label_of(family, score)
    if name is None or family not in CONCLUSION_FAMILIES:
        return name
    return f"{int(score)} {name}"


def _agreement_row(family: str, human: np.ndarray, model: np.ndarray) -> dict[str, float]:
    h, m = _pairs(human, model)
    diff = m - h
    step = STEP[family]
    return {
        "n": len(h),
        "pearson": pearson(h, m),
        "spearman": spearman(h, m),
        "weighted_kappa": weighted_kappa(h, m, SCALES[family]),
        "exact": float((diff == 0).mean()) if len(h) else np.nan,
        "within_one": float((np.abs(diff) <= step + 1e-9).mean()) if len(h) else np.nan,
        "mean_diff": float(diff.mean()) if len(h) else np.nan,
        "note": "; ".join(x for x in (correlation_note(h, m), kappa_note(h, m)) if x),
    }


def human_alignment(human: pd.DataFrame, judgments: pd.DataFrame) -> pd.DataFrame:
    """Table C7: human labels against the panel score (:func:`aggregate_votes`) per family.

    Items where either side is unclear or missing are left out (``n`` counts the rest).
    ``within_one`` allows one ordinal step; ``mean_diff`` is panel minus human on the family's
    own scale (positive: the judges score higher).
    """
    agg = aggregate_votes(judgments)[["family", "item_id", "score"]]
    both = human[["family", "item_id", "score"]].merge(
        agg, on=["family", "item_id"], how="left", suffixes=("_human", "_llm")
    )
    rows = []
    for fam in [f for f in FAMILIES if f in set(both["family"])]:
        b = both[both["family"] == fam]
        rows.append({"family": fam, **_agreement_row(
            fam, b["score_human"].to_numpy(float), b["score_llm"].to_numpy(float))})
    return pd.DataFrame(rows, columns=["family", "n", "pearson", "spearman", "weighted_kappa",
                                       "exact", "within_one", "mean_diff", "note"])


def model_human_alignment(
    human: pd.DataFrame,
    judgments: pd.DataFrame,
    families: Sequence[str] = CONCLUSION_FAMILIES,
) -> pd.DataFrame:
    """Table C8: mean Pearson r and weighted kappa over judge pairs (model-model, on every
    judged item) against the mean over judges of each judge versus the human (human-model,
    on the human-labelled items)."""
    rows = []
    for fam in families:
        m = judge_matrix(judgments, fam)
        h = human[human["family"] == fam].set_index("item_id")["score"]
        if m.empty:
            continue
        copies = copied_seats(m.columns)
        if copies:  # one model's copied verdict counts once
            m = m[list(dict.fromkeys(seats[0] if (seats := copies.get(seat_model(c))) else c
                                     for c in m.columns))]
        mm = [(pearson(m[a], m[b]), weighted_kappa(m[a], m[b], SCALES[fam]))
              for a, b in combinations(m.columns, 2)]
        hm = []
        for judge in m.columns:
            pair = pd.concat([h.rename("h"), m[judge].rename("m")], axis=1, join="inner")
            hm.append((pearson(pair["h"], pair["m"]),
                       weighted_kappa(pair["h"], pair["m"], SCALES[fam])))
        notes = []
        if m.shape[1] < 2:
            notes.append("model-model undefined: fewer than two independent judges")
        elif not np.isfinite([r for r, _ in mm]).any():
            notes.append("model-model r undefined for every judge pair (fewer than 3 items "
                         "or no variance)")
        if not np.isfinite([r for r, _ in hm]).any():
            notes.append("human-model r undefined for every judge (fewer than 3 shared items "
                         "or no variance)")
        rows.append({
            "family": fam,
            "n_judges": m.shape[1],
            "n_human": int(h.notna().sum()),
            "model_model_r": _nanmean([r for r, _ in mm]),
            "human_model_r": _nanmean([r for r, _ in hm]),
            "model_model_kappa": _nanmean([k for _, k in mm]),
            "human_model_kappa": _nanmean([k for _, k in hm]),
            "note": "; ".join(notes),
        })
    return pd.DataFrame(rows)


def _independent(m: pd.DataFrame) -> pd.DataFrame:
    """A judge matrix with the copied seats of one model (``m#1``, ``m#2``) kept once."""
    copies = copied_seats(m.columns)
    if not copies:
        return m
    return m[list(dict.fromkeys(seats[0] if (seats := copies.get(seat_model(c))) else c
                                for c in m.columns))]


def _labeller_matrix(human: pd.DataFrame, family: str) -> pd.DataFrame:
    """Items x labellers of one family's counted human scores (unclear left out)."""
    h = human[(human["family"] == family) & human["score"].notna()]
    if h.empty:
        return pd.DataFrame()
    labeller = h["labeller"] if "labeller" in h else pd.Series("human", index=h.index)
    return h.assign(labeller=labeller).pivot_table(index="item_id", columns="labeller",
                                                   values="score", aggfunc="last")


def _pair_kappas(a: pd.DataFrame, b: pd.DataFrame, family: str,
                 same: bool) -> tuple[list[float], list[float], set[str]]:
    """Weighted kappa and exact agreement of every rater pair (columns of ``a`` against
    columns of ``b``; within ``a`` when ``same``) on the items both rated, and the items
    shared by at least one pair."""
    pairs = list(combinations(a.columns, 2)) if same else \
        [(x, y) for x in a.columns for y in b.columns]
    other = a if same else b
    kappas, exact, items = [], [], set()
    for x, y in pairs:
        both = pd.concat([a[x].rename("x"), other[y].rename("y")], axis=1,
                         join="inner").dropna()
        items |= set(both.index)
        kappas.append(weighted_kappa(both["x"], both["y"], SCALES[family]))
        exact.append(float((both["x"] == both["y"]).mean()) if len(both) else np.nan)
    return kappas, exact, items


def human_agreement(human: pd.DataFrame, families: Sequence[str] | None = None) -> pd.DataFrame:
    """Human-human agreement per family: quadratic-weighted kappa and exact agreement of every
    pair of labellers on the items both labelled (counted labels only), averaged over the
    pairs where it is defined. With one labeller, or pairs sharing fewer than
    :data:`MIN_KAPPA_PAIRS` items (or without chance disagreement), it is undefined (NaN)
    and ``note`` says why."""
    fams = [f for f in (families or FAMILIES) if f in set(human["family"])]
    rows = []
    for fam in fams:
        m = _labeller_matrix(human, fam)
        kappas, exact, items = _pair_kappas(m, m, fam, same=True)
        note = ""
        if m.shape[1] < 2:
            note = "human-human undefined: one labeller"
        elif not np.isfinite(kappas).any():
            note = (f"human-human kappa undefined: no pair of labellers shares "
                    f"{MIN_KAPPA_PAIRS} or more items with some disagreement by chance")
        rows.append({"family": fam, "n_labellers": m.shape[1], "n_items": len(items),
                     "kappa": _nanmean(kappas), "exact": _nanmean(exact), "note": note})
    return pd.DataFrame(rows, columns=["family", "n_labellers", "n_items", "kappa", "exact",
                                       "note"])


def agreement_overview(human: pd.DataFrame, judgments: pd.DataFrame,
                       families: Sequence[str] | None = None) -> pd.DataFrame:
    """Judge-judge, human-judge and human-human agreement side by side, per family: the mean
    quadratic-weighted kappa over rater pairs (independent judges; each labeller against each
    judge; pairs of labellers), each on the items the pair shares, with the number of items
    some pair of that kind shares. A kind of agreement with no defined pair is NaN (shown as
    "undefined" by :func:`format_undefined`), and ``note`` says why."""
    fams = [f for f in (families or FAMILIES)
            if f in set(human["family"]) or f in set(judgments["family"])]
    rows = []
    for fam in fams:
        jm = _independent(judge_matrix(judgments, fam)) if fam in set(judgments["family"]) \
            else pd.DataFrame()
        hm = _labeller_matrix(human, fam)
        jj, _, jj_items = _pair_kappas(jm, jm, fam, same=True) if jm.shape[1] else ([], [], set())
        hj, _, hj_items = (_pair_kappas(hm, jm, fam, same=False)
                           if hm.shape[1] and jm.shape[1] else ([], [], set()))
        hh, _, hh_items = _pair_kappas(hm, hm, fam, same=True) if hm.shape[1] else ([], [], set())
        notes = []
        for what, values, raters in (("judge-judge", jj, jm.shape[1]),
                                     ("human-judge", hj, min(hm.shape[1], jm.shape[1])),
                                     ("human-human", hh, hm.shape[1])):
            need = 1 if what == "human-judge" else 2
            if raters < need:
                who = {"judge-judge": "fewer than two independent judges",
                       "human-judge": "no human label or no verdict",
                       "human-human": "fewer than two labellers"}[what]
                notes.append(f"{what} undefined: {who}")
            elif not np.isfinite(values).any():
                notes.append(f"{what} undefined: too few shared items (fewer than "
                             f"{MIN_KAPPA_PAIRS}) or no chance disagreement")
        rows.append({
            "family": fam,
            "judge_judge_kappa": _nanmean(jj), "judge_judge_items": len(jj_items),
            "human_judge_kappa": _nanmean(hj), "human_judge_items": len(hj_items),
            "human_human_kappa": _nanmean(hh), "human_human_items": len(hh_items),
            "note": "; ".join(notes),
        })
    return pd.DataFrame(rows, columns=[
        "family", "judge_judge_kappa", "judge_judge_items", "human_judge_kappa",
        "human_judge_items", "human_human_kappa", "human_human_items", "note"])


def by_labeller(human: pd.DataFrame, table: Callable[[pd.DataFrame], pd.DataFrame]
                ) -> pd.DataFrame:
    """``table`` (e.g. ``lambda h: human_alignment(h, judgments)``) computed for each
    labeller's labels, stacked with a leading ``labeller`` column."""
    labellers = human["labeller"] if "labeller" in human else pd.Series("human",
                                                                         index=human.index)
    parts = []
    for name in sorted(labellers.unique()):
        part = table(human[labellers == name])
        parts.append(part.assign(labeller=name)[["labeller", *part.columns]])
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def format_undefined(table: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """A table for display: numbers rounded, NaN in numeric columns written "undefined"."""
    out = table.copy()
    for col in out.columns:
        if pd.api.types.is_float_dtype(out[col]):
            out[col] = [("undefined" if pd.isna(v) else round(float(v), digits))
                        for v in out[col]]
            out[col] = out[col].astype(object)
    return out


def _nanmean(values: list[float]) -> float:
    arr = np.asarray(values, dtype=float)
    return float(np.nanmean(arr)) if np.isfinite(arr).any() else np.nan


# --------------------------------------------------------------------------- length checks


def add_length_columns(runs: pd.DataFrame) -> pd.DataFrame:
    """Copy of the runs table with ``conclusion_words`` (whitespace-separated words of the
    final conclusion, 0 without one) and ``valid_turns`` (turns without a tool or parse
    error) added when their sources are present."""
    out = runs.copy()
    if "conclusion" in out.columns and "conclusion_words" not in out.columns:
        out["conclusion_words"] = out["conclusion"].map(
            lambda t: len(t.split()) if isinstance(t, str) else 0
        )
    if {"n_turns", "errors"} <= set(out.columns) and "valid_turns" not in out.columns:
        out["valid_turns"] = out["n_turns"] - out["errors"]
    return out


def _grid(table: pd.DataFrame, exclude_conditions: Sequence[str]) -> pd.DataFrame:
    if "condition" in table.columns and exclude_conditions:
        table = table[~table["condition"].isin(list(exclude_conditions))]
    return table


def length_robustness(
    scores: pd.DataFrame,
    families: Sequence[str] = CONCLUSION_FAMILIES,
    length: str = "conclusion_words",
    controls: Sequence[str] = LENGTH_CONTROLS,
    exclude_conditions: Sequence[str] = NON_GRID_CONDITIONS,
) -> pd.DataFrame:
    """Tables C9 and C10: does a length explain the scores beyond the run's design?

    ``scores`` is :func:`run_scores` joined with the runs table. Per family: ``n`` runs with a
    score, raw Pearson ``r`` of length against the score, ``raw_r2`` = r^2, ``r2_controls``
    (OLS on dummies of ``controls``), ``r2_full`` (controls + length) and ``added_r2`` =
    ``r2_full - r2_controls``. Conditions in ``exclude_conditions`` are left out (default:
    the coach-judge runs, as in the paper's main grid).
    """
    table = _grid(add_length_columns(scores), exclude_conditions)
    if length not in table.columns:
        raise ValueError(f"no length column {length!r}; have {list(table.columns)}")
    rows = []
    for fam in families:
        if fam not in table.columns:
            continue
        d = table[table[fam].notna() & table[length].notna()]
        y = d[fam].to_numpy(float)
        x = d[length].to_numpy(float)
        ctrl = dummies(d, controls)
        full = np.column_stack([ctrl, x])
        r2c = r_squared(y, ctrl)
        r2f = r_squared(y, full)
        r = pearson(x, y)
        notes = [correlation_note(x, y), saturation_note(y, full)]
        if np.isnan(r2f) and not notes[1] and len(y):
            notes.append(f"R² undefined: {fam} is constant")
        rows.append({"family": fam, "length": length, "n": len(d), "r": r,
                     "raw_r2": r * r, "r2_controls": r2c, "r2_full": r2f,
                     "added_r2": r2f - r2c, "note": "; ".join(x for x in notes if x)})
    return pd.DataFrame(rows, columns=["family", "length", "n", "r", "raw_r2", "r2_controls",
                                       "r2_full", "added_r2", "note"])


def conclusion_length_by_model(
    runs: pd.DataFrame,
    by: str = "model",
    exclude_conditions: Sequence[str] = NON_GRID_CONDITIONS,
    only_with_conclusion: bool = True,
) -> pd.DataFrame:
    """Table C11: runs, mean and median conclusion words per ``by`` group (longest first)."""
    t = _grid(add_length_columns(runs), exclude_conditions)
    if only_with_conclusion and "conclusion" in t.columns:
        t = t[t["conclusion"].map(lambda c: isinstance(c, str) and c.strip() != "")]
    g = t.groupby(by)["conclusion_words"]
    out = pd.DataFrame({"n": g.size(), "mean_words": g.mean(), "median_words": g.median()})
    return out.sort_values("mean_words", ascending=False).reset_index()


def length_diagnostic_by_model(
    scores: pd.DataFrame,
    family: str = "task_relevance",
    by: str = "model",
    length: str = "conclusion_words",
    exclude_conditions: Sequence[str] = NON_GRID_CONDITIONS,
) -> pd.DataFrame:
    """Table D12: per model, runs with a score, median length, mean score (1-4 scale) and the
    within-model Pearson r of length against the score."""
    t = _grid(add_length_columns(scores), exclude_conditions)
    t = t[t[family].notna()]
    rows = []
    for key, grp in t.groupby(by):
        rows.append({by: key, "n": len(grp), f"median_{length}": grp[length].median(),
                     f"mean_{family}": grp[family].mean(),
                     "r": pearson(grp[length], grp[family]),
                     "note": correlation_note(grp[length], grp[family])})
    return pd.DataFrame(rows)


def print_notes(table: pd.DataFrame, key: str | None = None) -> None:
    """Print the ``note`` of every row that has one (why a value is NaN), prefixed with the
    row's ``key`` column (default: the table's first column); nothing when all are empty."""
    if "note" not in table.columns or table.empty:
        return
    key = key or str(table.columns[0])
    for _, row in table.iterrows():
        if isinstance(row["note"], str) and row["note"]:
            print(f"{row[key]}: {row['note']}")


# --------------------------------------------------------------------------- synthetic


def _unit(*key: object) -> float:
    """A stable number in [0, 1) from a key (independent of hash randomisation)."""
    return zlib.crc32("/".join(map(str, key)).encode()) / 2**32


def synthetic_judgments(
    runs: pd.DataFrame,
    turns: pd.DataFrame | None = None,
    judges: Sequence[str] = ("synth-judge-1", "synth-judge-2", "synth-judge-3"),
    turn_judge: str | None = None,
    seed: int = 0,
    p_unclear: float = 0.04,
    p_failed: float = 0.02,
) -> pd.DataFrame:
    """Random but seeded judgments in the table's shape, for tests, demos and teaching.

    These are not verdicts of any model. Conclusion items (runs with a conclusion) get one
    verdict per judge in ``judges`` from a latent score with per-model and per-judge offsets,
    a length effect on task relevance and a budget effect on termination calibration; turn
    items (navigation tools: navigation_prior, cognitive tools: reasoning_prior) get one
    verdict from ``turn_judge`` (default: the first judge) whose prior-leaning odds depend on
    the tool and task. A share of verdicts is unclear or failed. None carries evidence
    strings or was a model call.
    """
    rng = np.random.default_rng(seed)
    turn_judge = turn_judge or judges[0]
    runs = add_length_columns(runs).sort_values("run_id").reset_index(drop=True)
    rationale = "synthetic verdict (seeded random), not a model judgment"
    rows: list[dict[str, object]] = []

    def emit(item, run, fam, judge, turn, tool, label, score):
        roll = rng.random()
        if roll < p_failed:
            label, score, valid = None, np.nan, False
        elif roll < p_failed + p_unclear:
            label, score, valid = UNCLEAR, np.nan, True
        else:
            valid = True
        rows.append({"item_id": item, "run_id": run, "family": fam, "judge": judge,
                     "turn": turn, "tool": tool, "label": label, "score": score,
                     "rationale": rationale, "evidence": "[]", "valid": valid,
                     "cached": False, "latency_s": 0.0})

    words = runs["conclusion_words"].astype(float) if "conclusion_words" in runs else None
    z = (words - words.mean()) / (words.std() or 1.0) if words is not None else None
    for i, run in runs.iterrows():
        if not isinstance(run.get("conclusion"), str) or not run["conclusion"].strip():
            continue
        model = run.get("model", "")
        for fam in CONCLUSION_FAMILIES:
            latent = 2.2 + 1.6 * _unit(seed, model, fam)
            if fam == "task_relevance" and z is not None:
                latent += 0.35 * z[i]
            if fam == "termination_calibration" and run.get("condition") in (
                "budget_pressure", "combined"
            ):
                latent -= 0.4
            for judge in judges:
                severity = -0.6 + 0.8 * _unit(seed, judge, fam)
                value = float(np.clip(np.rint(latent + severity + rng.normal(0, 0.6)), 1, 4))
                emit(run["run_id"], run["run_id"], fam, judge, np.nan, None,
                     label_of(fam, value), value)
    if turns is None or turns.empty:
        return pd.DataFrame(rows, columns=JUDGMENT_COLUMNS)
    base = {"OVW": 0.45, "PKR": 0.3, "EXP": 0.15, "MEM": 0.4, "BKM": 0.3, "HNT": 0.25,
            "CON": 0.45}
    t = turns[turns["tool"].isin(list(NAV | COG)) & turns["error_type"].isna()]
    t = t[t["run_id"].isin(set(runs["run_id"]))].sort_values(["run_id", "turn"])
    for r in t.itertuples():
        fam = "navigation_prior" if r.tool in NAV else "reasoning_prior"
        p_prior = base[r.tool] + 0.2 * (_unit(seed, r.model, fam) - 0.5)
        if "asr" in str(r.task).lower():
            p_prior += 0.1
        p_prior = float(np.clip(p_prior, 0.02, 0.9))
        p_mixed = min(0.3, 1.0 - p_prior)
        labels = list(LABEL_SCORES[fam])
        label = labels[rng.choice(3, p=[1.0 - p_prior - p_mixed, p_mixed, p_prior])]
        emit(f"{r.run_id}#{int(r.turn)}", r.run_id, fam, turn_judge, float(r.turn), r.tool,
             label, LABEL_SCORES[fam][label])
    return pd.DataFrame(rows, columns=JUDGMENT_COLUMNS)
