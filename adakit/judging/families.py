"""The label vocabulary of lens 3 (paper §3.4, Appendix C.1): the five evaluation families.

Three families rate the final conclusion on a 1-4 ordinal scale (task relevance, trace
grounding, termination calibration); two rate single steps on an evidence-orientation scale
0 / 0.5 / 1 (navigation prior usage for every OVW/PKR/EXP action, reasoning prior usage for
every MEM/BKM/HNT/CON artifact). "unclear" is always allowed and has no score. Everything
that names a family, a label or a score reads it from here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from adakit import config
from adakit.record import COG, NAV

#: The judges' prompt templates (one per family, the system prompts, the correction).
JUDGE_PROMPTS = config.PROMPTS / "judges"

#: The label a judge may always give; it scores NaN and never counts.
UNCLEAR = "unclear"


@dataclass(frozen=True)
class Family:
    """One evaluation family: its level, ordered labels with their scores, and its template."""

    name: str
    title: str
    level: Literal["conclusion", "turn"]
    labels: tuple[str, ...]
    scores: tuple[float, ...]
    tools: frozenset[str] = frozenset()

    @property
    def allowed(self) -> tuple[str, ...]:
        """Every label a reply may carry (the ordered ones, then "unclear")."""
        return (*self.labels, UNCLEAR)

    def score(self, label: str | None) -> float:
        """The numeric score of a label; NaN for "unclear" or a missing label."""
        if label is None or label == UNCLEAR:
            return math.nan
        return self.scores[self.labels.index(label)]

    @property
    def template(self) -> str:
        """The text of the family's prompt template."""
        return (JUDGE_PROMPTS / f"{self.name}.txt").read_text(encoding="utf-8")


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "task_relevance",
            "Task relevance",
            "conclusion",
            ("not-addressed", "partly-addressed", "mostly-addressed", "fully-addressed"),
            (1.0, 2.0, 3.0, 4.0),
        ),
        Family(
            "trace_grounding",
            "Trace grounding",
            "conclusion",
            ("unsupported", "weakly-supported", "mostly-supported", "well-supported"),
            (1.0, 2.0, 3.0, 4.0),
        ),
        Family(
            "termination_calibration",
            "Termination calibration",
            "conclusion",
            ("premature", "borderline", "defensible", "ready-to-finalize"),
            (1.0, 2.0, 3.0, 4.0),
        ),
        Family(
            "navigation_prior",
            "Navigation prior usage",
            "turn",
            ("evidence-led", "mixed", "prior-led"),
            (0.0, 0.5, 1.0),
            NAV,
        ),
        Family(
            "reasoning_prior",
            "Reasoning prior usage",
            "turn",
            ("trajectory-grounded", "mixed", "prior-shaped"),
            (0.0, 0.5, 1.0),
            COG,
        ),
    )
}
CONCLUSION_FAMILIES: tuple[str, ...] = tuple(n for n, f in FAMILIES.items() if f.level == "conclusion")
TURN_FAMILIES: tuple[str, ...] = tuple(n for n, f in FAMILIES.items() if f.level == "turn")

#: The title of each family, as the paper's tables print it.
FAMILY_TITLES: dict[str, str] = {n: f.title for n, f in FAMILIES.items()}
#: Label names of each family, in score order (the words the judges answer with).
LABEL_NAMES: dict[str, tuple[str, ...]] = {n: f.labels for n, f in FAMILIES.items()}
#: The ordered score categories of each family.
SCALES: dict[str, tuple[float, ...]] = {n: f.scores for n, f in FAMILIES.items()}


def _label_scores(fam: Family) -> dict[str, float]:
    scores = dict(zip(fam.labels, fam.scores, strict=True))
    if fam.level == "conclusion":  # the ordinal digits are labels too ('1'..'4')
        scores.update({str(int(v)): v for v in fam.scores})
    return scores


#: The label -> score map of each family ("unclear" is deliberately absent: it has no score).
LABEL_SCORES: dict[str, dict[str, float]] = {n: _label_scores(f) for n, f in FAMILIES.items()}


def get_family(name: str) -> Family:
    """The family called ``name`` (clear error listing the known ones)."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(
            f"unknown evaluation family {name!r}; known: {', '.join(FAMILIES)}"
        ) from None


def label_of(family: str, score: float) -> str | None:
    """The label name of a score on the family's scale (None off the scale)."""
    fam = FAMILIES[family]
    return fam.labels[fam.scores.index(score)] if score in fam.scores else None


def parse_families(values: str | Sequence[str] | None) -> list[str]:
    """Family names from CLI-style values: names, comma lists, "all", "conclusion", "turn"
    (all five when nothing is given)."""
    if not values:
        return list(FAMILIES)
    if isinstance(values, str):
        values = [values]
    out: list[str] = []
    for v in values:
        for name in v.split(","):
            name = name.strip()
            if name in ("all", ""):
                out += [f for f in FAMILIES if name == "all"]
            elif name == "conclusion":
                out += list(CONCLUSION_FAMILIES)
            elif name == "turn":
                out += list(TURN_FAMILIES)
            else:
                out.append(get_family(name).name)
    return list(dict.fromkeys(out))
