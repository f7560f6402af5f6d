"""The exercises of the guided tour (notebook 00): the hand-made trajectory of exercise 2, the
checks that grade a student's answers, reference answers for testing the notebook, and the
tour's display helpers (tables that keep an answer back until its check passes, line numbers
shown as whole numbers, lens 3's judges named with their weaknesses).

Exercise 1 asks for the distinct lines a run was shown (lens 0's *LOC viewed*); exercise 2 asks
for the Table 5 tags of five transitions (lens 2); exercise 3 has the student choose K and a
change, fork the tour's run (or a local model's run) with placebo forks beside, and read the
effect on the turns after K off the branches before the estimate is shown. The reference
answers are worked out independently of the lenses they check: exercise 1 counts every (file,
line) pair once instead of merging ranges, exercise 2's tags were assigned by hand from Table 5,
and exercise 3's effect is computed from the fork files' turn counts, not by the fork lens.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import pandas as pd

from adakit import config
from adakit.lenses import forks as fork_lens
from adakit.lenses import policy
from adakit.llm.models import ModelSpec, load_registry
from adakit.record import RunFile, load_corpus, read_run
from adakit.study.fork import ForkError
from adakit.workbench import forks as wf

#: Exercise 2's tags, worked out by hand from Table 5 for :func:`mini_trajectory`.
_MINI_TAGS = ("zoom in", "close read", "trace", "skim", "dump")

FILL_IN = "✎ fill in your answer"
#: What a table shows in place of a value it keeps back until exercise 1 is checked right.
KEPT_BACK = "✎ after exercise 1"
#: What a readable table shows for a missing value (a call without a line range, say).
NO_LINE = "—"


class Check(str):
    """The outcome of one exercise check: the message to print (the string itself), and
    whether the answer passed (:attr:`passed`)."""

    passed: bool

    def __new__(cls, message: str, passed: bool) -> Check:
        check = super().__new__(cls, message)
        check.passed = passed
        return check


def mini_trajectory() -> pd.DataFrame:
    """Six tool calls of one made-up run (five transitions), in the turns-table shape.

    Turn 4 is an EXP whose jump landed in ``src/routing.py``; that file is its target.
    """
    rows = [
        (1, "OVW", "src/app.py", None, None),
        (2, "PKR", "src/app.py", 10, 49),
        (3, "PKR", "src/app.py", 50, 89),
        (4, "EXP", "src/routing.py", 5, 30),
        (5, "PKR", "src/helpers.py", 1, 40),
        (6, "MEM", None, None, None),
    ]
    frame = pd.DataFrame(rows, columns=["turn", "tool", "file", "start_line", "end_line"])
    return frame.assign(run_id="mini")


def answer_distinct_lines(reads: pd.DataFrame) -> int:
    """Exercise 1's reference answer: the distinct (file, line) pairs in a reads table."""
    return len({(r.file, line) for r in reads.itertuples()
                for line in range(int(r.start_line), int(r.end_line) + 1)})


def answer_tags() -> list[str]:
    """Exercise 2's reference answer: the tags of :func:`mini_trajectory`'s transitions."""
    return list(_MINI_TAGS)


def _one_run(census: pd.DataFrame) -> pd.Series:
    if len(census) != 1:
        raise ValueError(f"exercise 1 is about one run; the census has {len(census)} rows")
    return census.iloc[0]


def check_distinct_lines(answer: Any, census: pd.DataFrame) -> Check:
    """Grade exercise 1 against lens 0 (``surface.run_surface`` of the one run).

    A blank answer (None) asks to fill it in; a wrong one says whether it is too high or too
    low, with a hint, never the expected number (only a right answer shows lens 0's count).
    The message is a :class:`Check`, whose ``passed`` the tour's later tables wait for.
    """
    row = _one_run(census)
    expected, shown = int(row["loc_viewed"]), int(row["lines_shown"])
    if answer is None:
        return Check(f"{FILL_IN}: set my_distinct_lines to a number (it is None)", False)
    if isinstance(answer, bool) or not isinstance(answer, Real):
        return Check(f"✗ my_distinct_lines should be a number of lines, not {answer!r}", False)
    if answer == expected:
        return Check(f"✓ right: {expected} distinct lines (lens 0's LOC viewed)\n"
                     f"lines shown with repeats: {shown} ({shown - expected} shown again)", True)
    exact = answer if isinstance(answer, Integral) else f"{answer:g}"
    if answer > expected:
        return Check(f"✗ not quite: {exact} is too many. Did you count overlapping ranges "
                     "twice? Change my_distinct_lines and run the check again.", False)
    return Check(f"✗ not quite: {exact} is too few. Did you miss a range, or count an "
                 "inclusive range one short? Change my_distinct_lines and run the check again.",
                 False)


class Withheld:
    """Stands in for a table whose values would give an exercise's answer away (or that
    comes only after an exercise's check)."""

    def __init__(self, what: str, exercise: int = 1, text: str | None = None) -> None:
        self.text = text or (f"({what}: shown once exercise {exercise}'s check says ✓; run the "
                             "check, then this cell again)")

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        return f"<p><em>{html.escape(self.text)}</em></p>"


def after_check(check: Check, frame: Any, what: str, exercise: int = 1) -> Any:
    """``frame`` (a table or a figure) once ``check`` has passed; before, a note saying it
    will show then."""
    return frame if check.passed else Withheld(what, exercise)


def keep_back(check: Check, frame: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    """``frame`` with ``columns`` blanked (:data:`KEPT_BACK`) until ``check`` has passed, so
    a column whose sum is the answer cannot give it away."""
    if check.passed:
        return frame
    cols = list(columns)
    missing = [c for c in cols if c not in frame.columns]
    if missing:
        raise KeyError(f"no column {', '.join(missing)} to keep back")
    return frame.assign(**{c: KEPT_BACK for c in cols})


def readable(frame: pd.DataFrame,
             lines: Sequence[str] = ("start_line", "end_line")) -> pd.DataFrame:
    """``frame`` for a class to read: its line-number columns ``lines`` as whole numbers, and
    :data:`NO_LINE` wherever a value is missing (pandas would show 10.0, NaN and None)."""
    out = frame.copy()
    for col in out.columns:
        if col in lines:
            out[col] = [NO_LINE if pd.isna(v) else int(v) for v in out[col]]
        elif out[col].isna().any():
            out[col] = out[col].astype(object).where(out[col].notna(), NO_LINE)
    return out


def _normal_tag(tag: Any) -> str:
    """A tag as lens 2 spells it: any capitalisation, surrounding or doubled spaces ignored."""
    return " ".join(str(tag).split()).lower()


def check_tags(answer: Sequence[Any], trajectory: pd.DataFrame | None = None) -> str:
    """Grade exercise 2 against lens 2's tags of ``trajectory`` (default: the mini trajectory).

    Each transition is marked right or wrong without showing lens 2's tag or rule; a tag that
    is not one of Table 5's codes is pointed out as such. Capitalisation and surrounding
    spaces do not matter. Any blank (None) asks to fill in the answer first.
    """
    lens2 = policy.tag_transitions(trajectory if trajectory is not None else mini_trajectory())
    answer = list(answer)
    blanks = sum(tag is None for tag in answer)
    if blanks:
        return f"{FILL_IN}: {blanks} of the {len(answer)} tags in my_tags are still None"
    if len(answer) != len(lens2):
        return (f"✗ give exactly {len(lens2)} tags, one per transition "
                f"(you gave {len(answer)})")
    known = {_normal_tag(t) for t in policy.TAGS}
    yours = [_normal_tag(t) for t in answer]
    ok = [y == _normal_tag(k) for y, k in zip(yours, lens2["tag"].astype(str), strict=True)]
    marks = ["✓" if good else ("✗ not a Table 5 tag" if y not in known else "✗")
             for y, good in zip(yours, ok, strict=True)]
    check = pd.DataFrame({
        "transition": [f"{a}→{b}" for a, b in zip(lens2["turn_from"], lens2["turn_to"],
                                                   strict=True)],
        "tools": [f"{a} → {b}" for a, b in zip(lens2["from_tool"], lens2["to_tool"],
                                               strict=True)],
        "yours": yours, "check": marks})
    right = sum(ok)
    mark = "✓" if right == len(check) else "✗"
    tail = "" if right == len(check) else " (fix the ✗ rows and run the check again)"
    return f"{_left_table(check)}\n{mark} {right} of {len(check)} right{tail}"


def _left_table(frame: pd.DataFrame) -> str:
    """A small table as left-aligned text columns."""
    cols = [[str(c), *map(str, frame[c])] for c in frame.columns]
    widths = [max(map(len, col)) for col in cols]
    rows = zip(*cols, strict=True)
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


# --------------------------------------------------------------------------- exercise 3: forks

#: Exercise 3's reference choice: a budget from turn 2 on, which cuts the tracer's plan short.
_FORK_CHOICE: tuple[int, dict[str, str]] = (2, {"condition": "budget_pressure"})
#: The changes the tour offers, as a study file writes them (exercise 3's menu).
FORK_CHANGES: tuple[str, ...] = (
    '{"condition": "budget_pressure"}  a budget of 12 turns from K on',
    '{"model": "baseline-skimmer"}     another policy continues the history',
    '{"without": "explore_code"}       a tool taken away from K on',
    '{"inject": "Read the tests too."} a message added to turn K\'s observation',
)


def answer_fork_choice() -> tuple[int, dict[str, str]]:
    """Exercise 3's reference choice of K and change (for testing the notebook)."""
    at, change = _FORK_CHOICE
    return at, dict(change)


def fork_parent(tour_run: str | Path, model: str = "",
                corpus: str | Path | Sequence[str | Path] = ()) -> Path:
    """The run exercise 3 forks: the tour's own run (``model`` empty), else the first
    finished run (by run id) of ``model`` in ``corpus`` with at least 4 turns (ValueError
    naming the models there when it has none)."""
    if not model:
        return Path(tour_run)
    folders = [corpus] if isinstance(corpus, str | Path) else list(corpus)
    present = [config.resolve(f) for f in folders if str(f).strip() and config.resolve(f).exists()]
    if not present:
        raise ValueError(f"no corpus on disk to find a run of {model} in (corpus = {corpus!r})")
    runs = load_corpus(present, cache=False).runs
    mine = runs[(runs["model"] == model) & runs["finished"] & (runs["n_turns"] >= 4)]
    if mine.empty:
        models = ", ".join(sorted(set(runs["model"].astype(str)))) or "none"
        raise ValueError(f"no finished run of {model} with 4 turns or more in the corpus; "
                         f"its models: {models}")
    return Path(str(mine.sort_values("run_id")["path"].iloc[0]))


def fork_root(tour_output: str | Path, model: str = "") -> Path | None:
    """Where exercise 3's forks go: beside the tour's run (None: ``<output>.forks``, the
    default) for the tour's own run; in ``<output>.forks`` too for a model's run, so a shipped
    corpus is never written in."""
    return None if not model else config.resolve(tour_output).with_name(
        config.resolve(tour_output).name + ".forks")


def check_fork_choice(at: Any, change: Any, parent: RunFile) -> Check:
    """Check exercise 3's choice before anything is forked: K a whole turn the parent has a
    turn after, the change one a fork can make (a placebo is made anyway, as the control).
    The message is a :class:`Check`; only a passing one lets :func:`run_fork_exercise` fork."""
    n = len(parent.turns)
    if at is None or change is None:
        return Check(f"{FILL_IN}: set my_fork_at to a turn between 1 and {n - 1} and "
                     "my_fork_change to one of the changes listed above", False)
    if isinstance(at, bool) or not isinstance(at, Integral):
        return Check(f"✗ my_fork_at should be a whole turn number, not {at!r}", False)
    if not 1 <= at <= n - 1:
        return Check(f"✗ my_fork_at must leave the run a turn to go on: between 1 and {n - 1} "
                     f"(the run has {n} turns), not {at}", False)
    try:
        chosen = wf.as_change(change)
    except ForkError as exc:
        return Check(f"✗ {exc}", False)
    if chosen.kind == "placebo":
        return Check("✗ the placebo forks are made anyway, as the control: choose a change",
                     False)
    name = fork_lens.treatment_of(chosen.kind, chosen.value)
    return Check(f"✓ fork {parent.header.run_id} after turn {at} of {n}: placebo forks and "
                 f"forks with {name}", True)


def run_fork_exercise(check: Check, parent: str | Path, at: int, change: Any, seeds: int,
                      root: str | Path | None = None) -> wf.ForkSets | Withheld:
    """Exercise 3's forks once its choice checks (:func:`check_fork_choice`): ``seeds``
    placebo and ``seeds`` treated forks of ``parent`` at turn ``at``
    (:func:`adakit.workbench.forks.make_fork_set`, in ``root`` when given), read back as a
    fork set; before, a note saying they come after the check."""
    if not check.passed:
        return Withheld("the forks", 3, "(the forks are made once exercise 3's choice checks ✓: "
                        "set my_fork_at and my_fork_change, run the check, then this cell again)")
    folder = wf.make_fork_set(parent, at, change, seeds, root=root)
    return wf.read_fork_sets(folder)


def fork_branches(sets: wf.ForkSets | Withheld) -> pd.DataFrame | Withheld:
    """Exercise 3's table: one row per fork, its change and draw, and how many turns it went
    on after K (the student's data for the effect)."""
    if isinstance(sets, Withheld):
        return sets
    d = sets.outcomes.sort_values(["arm", "treatment", "seed"], ascending=[True, True, True])
    return pd.DataFrame({"branch": [wf.branch_label(t, r) for t, r in zip(d["treatment"], d["run_id"], strict=True)],
                         "arm": d["arm"].to_numpy(), "K": d["at"].astype(int).to_numpy(),
                         "turns after K": d["turns_after"].astype(int).to_numpy()})


def answer_fork_effect(sets: wf.ForkSets) -> float:
    """Exercise 3's reference answer: the treated forks' mean turns after K minus the placebo
    forks', counted from the fork files themselves."""
    arms: dict[str, list[int]] = {"treated": [], "placebo": []}
    for path in sets.folder.rglob("*.jsonl"):
        rf = read_run(path)
        info = rf.header.forked_from
        if info is not None:
            arms["placebo" if info.change == "placebo" else "treated"].append(len(rf.turns) - info.turn)
    return (sum(arms["treated"]) / len(arms["treated"])
            - sum(arms["placebo"]) / len(arms["placebo"]))


def fork_estimate(sets: wf.ForkSets | Withheld, seed: int = 0) -> pd.DataFrame:
    """The estimate of exercise 3's fork set (:func:`adakit.lenses.forks.fork_effects`, tag
    shares left out); empty before the forks are made."""
    if isinstance(sets, Withheld):
        return pd.DataFrame(columns=fork_lens.EFFECT_COLUMNS)
    return fork_lens.fork_effects(sets.outcomes, tags=False, seed=seed)


def check_fork_effect(answer: Any, effects: pd.DataFrame, tolerance: float = 0.05) -> Check:
    """Grade exercise 3's effect on the turns after K (treated mean minus placebo mean)
    against the estimate; a wrong answer gets a hint, never the number."""
    row = effects[effects["metric"] == "turns_after"]
    if row.empty:
        return Check(f"{FILL_IN}: the forks come first (exercise 3's choice must check ✓)", False)
    expected = float(row["effect"].iloc[0])
    if answer is None:
        return Check(f"{FILL_IN}: set my_fork_effect to a number (it is None)", False)
    if isinstance(answer, bool) or not isinstance(answer, Real):
        return Check(f"✗ my_fork_effect should be a number of turns, not {answer!r}", False)
    if abs(float(answer) - expected) <= tolerance:
        return Check(f"✓ right: {expected:+.2f} turns after K (treated minus placebo)", True)
    if abs(float(answer) + expected) <= tolerance and expected != 0:
        return Check("✗ the sign is the wrong way round: it is treated minus placebo. "
                     "Change my_fork_effect and run the check again.", False)
    hint = "too high" if answer > expected else "too low"
    return Check(f"✗ not quite: {float(answer):g} is {hint}. Average the turns after K of the "
                 "treated rows, subtract the average of the placebo rows, and run the check "
                 "again.", False)


# --------------------------------------------------------------------------- lens 3's judges

#: How the tour calls a judge that is not in the model registry.
UNKNOWN_JUDGE = "not in the model registry: nothing is known of how strong it is"


def _model_of(seat: str) -> str:
    """A judge seat's registry name (``m#2``, a copied seat of ``m``, is ``m``)."""
    return re.sub(r"#\d+$", "", str(seat))


def _identity(name: str, registry: Mapping[str, ModelSpec]) -> tuple[str, str | None]:
    """The model behind a registry name: its model id and endpoint (the name when unknown)."""
    spec = registry.get(name)
    return (spec.model_id or spec.name, spec.base_url) if spec else (name, None)


def judge_weakness(seats: Sequence[str], registry: Mapping[str, ModelSpec],
                   studied: Iterable[str] = ()) -> str:
    """What a reader should know before trusting the verdicts of ``seats`` (judge seats that
    one model serves), in a few short phrases.

    ``registry`` maps model names to their specs; ``studied`` names the models whose runs the
    verdicts are about (a judge that is one of them judges its own runs).
    """
    names = [_model_of(s) for s in seats]
    specs = [registry[n] for n in names if n in registry]
    if not specs:
        return UNKNOWN_JUDGE
    ident = _identity(names[0], registry)
    family = [sp for sp in registry.values() if _identity(sp.name, registry) == ident]
    notes = []
    if any("floor" in sp.description.lower() for sp in family):
        notes.append("the floor model (the registry's weakest): its verdicts test the "
                     "apparatus, not the runs")
    elif specs[0].kind == "local":
        notes.append("a small embedded model, far below the paper's judges: a rehearsal, "
                     "not a measurement")
    if len(seats) > 1:
        notes.append(f"{len(seats)} seats of one model: not independent judges")
    if any(_identity(m, registry) == ident for m in studied):
        notes.append("it judges its own runs")
    return "; ".join(notes) or "a hosted model"


def lens3_judges(verdicts: pd.DataFrame, runs: pd.DataFrame,
                 registry: Mapping[str, ModelSpec] | None = None) -> pd.DataFrame:
    """One row per model that judged (its seats together): the seats, the model (the
    registry's description), how many verdicts on how many runs, and its weakness
    (:func:`judge_weakness`, "judges its own runs" when ``runs`` shows it judged a run of
    its own model)."""
    if registry is None:
        registry = load_registry()
    columns = ["judges", "model", "verdicts", "runs", "weakness"]
    if verdicts.empty:
        return pd.DataFrame(columns=columns)
    groups: dict[tuple[str, str | None], list[str]] = {}
    for seat in sorted(set(verdicts["judge"].astype(str))):
        groups.setdefault(_identity(_model_of(seat), registry), []).append(seat)
    rows = []
    for seats in groups.values():
        mine = verdicts[verdicts["judge"].astype(str).isin(seats)]
        spec = registry.get(_model_of(seats[0]))
        studied = set(runs.loc[runs["run_id"].isin(mine["run_id"]), "model"].astype(str))
        rows.append({"judges": ", ".join(seats),
                     "model": spec.description if spec and spec.description else seats[0],
                     "verdicts": len(mine), "runs": mine["run_id"].nunique(),
                     "weakness": judge_weakness(seats, registry, studied)})
    return pd.DataFrame(rows, columns=columns)


def _panels(verdicts: pd.DataFrame,
            registry: Mapping[str, ModelSpec] | None = None) -> pd.Series:
    """Per run id, the panel that gave it verdicts as one short label: each judge model once,
    with ``×n`` when it sat in n seats."""
    if registry is None:
        registry = load_registry()

    def label(seats: pd.Series) -> str:
        groups: dict[tuple[str, str | None], list[str]] = {}
        for seat in sorted(set(map(str, seats))):
            groups.setdefault(_identity(_model_of(seat), registry), []).append(seat)
        return ", ".join(f"{g[0]} ×{len(g)}" if len(g) > 1 else g[0] for g in groups.values())

    return verdicts.groupby("run_id")["judge"].agg(label).rename("judged by")


def lens3_table(scores: pd.DataFrame, verdicts: pd.DataFrame, dims: Sequence[str],
                registry: Mapping[str, ModelSpec] | None = None) -> pd.DataFrame:
    """Mean normalised lens 3 scores per model and per panel that judged it (a model judged by
    two panels gets two rows), with the number of runs behind each mean; runs without a
    verdict are left out."""
    table = scores.join(_panels(verdicts, registry), on="run_id", how="inner")
    grouped = table.groupby(["model", "judged by"])
    out = grouped[list(dims)].mean().round(2)
    out.insert(0, "runs", grouped.size())
    return out


def lens3_caveat(table: pd.DataFrame, dims: Sequence[str], spread: float = 0.1) -> str | None:
    """A warning when the judges barely tell the rows of :func:`lens3_table` apart: on every
    dimension with two or more scored rows, the means span less than ``spread``."""
    flat = []
    for dim in dims:
        values = table[dim].dropna() if dim in table else pd.Series(dtype=float)
        if len(values) < 2:
            continue
        if values.max() - values.min() >= spread:
            return None
        flat.append(f"{dim} {values.min():.2f}–{values.max():.2f}")
    if not flat:
        return None
    return ("these judges barely tell the rows apart (" + "; ".join(flat) + "): "
            "read the scores as the judges' habit, not as a difference between models")
