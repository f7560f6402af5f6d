"""Forks in the workbench (notebook 21, the tour's fork exercise, the explorer's branches).

- :func:`make_fork_set` makes the placebo and the treated forks of one parent at turn K (the
  same forks ``adakit fork`` makes, twice: once with ``--placebo``, once with the change).
- :func:`baseline_fork_sets` records scripted baseline parents and forks each of them: the
  offline demonstration that runs in seconds when no recorded fork study is at hand.
- :func:`read_fork_sets` reads a folder of fork sets into a corpus, its fork index and the
  per-fork outcomes; :func:`pick_parent` chooses the fork set that shows its change best.
- :func:`fork_tree` and :func:`plot_fork_tree` draw one fork set as lens 1 journey arcs: the
  parent and every branch side by side, the shared prefix shaded.
- :func:`branches_of` lists the recorded forks of one run (``<corpus>.forks/`` files whose
  ``forked_from`` names it), for the explorer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from adakit import config
from adakit.lenses import forks as lens
from adakit.lenses import journey
from adakit.record import Corpus, iter_run_files, load_corpus, read_run
from adakit.study.fork import (
    Change,
    ForkError,
    check_model,
    launch_context,
    parse_change,
    plan_forks,
    run_fork,
)
from adakit.uncertainty import require_columns

#: The scripted parents of the offline demonstration: two policies whose plans run past a
#: budget of 12 turns from turn 2 on (the close reader's short plan would not).
DEMO_POLICIES: tuple[str, ...] = ("baseline-tracer", "baseline-skimmer")
#: The change the demonstration makes by default: a budget from turn K on.
DEMO_CHANGE: dict[str, str] = {"condition": "budget_pressure"}
#: The row label of the parent in a fork tree.
PARENT = "parent (as recorded)"


def as_change(change: Change | str | Mapping[str, Any]) -> Change:
    """A change given as a study file writes it (``"placebo"``, ``{"condition": "budget_pressure"}``)
    or as a :class:`adakit.study.fork.Change` (ForkError with a one-line reason otherwise)."""
    if isinstance(change, Change):
        return change
    return parse_change(dict(change) if isinstance(change, Mapping) else change, "the change")


def make_fork_set(parent_path: str | Path, at: int, change: Change | str | Mapping[str, Any],
                  seeds: int = 2, cache_mode: str = "use", worlds: Any = None,
                  root: str | Path | None = None) -> Path:
    """Make (or finish) the ``seeds`` placebo forks and the ``seeds`` forks with ``change`` of
    the run at ``parent_path`` at turn ``at``, as ``adakit fork`` makes them; forks already
    finished are kept. Returns the fork set's folder: ``<corpus>.forks/<parent>__at<K>``, or
    ``<root>/<parent>__at<K>`` when ``root`` is given (for a parent in a folder not to be
    written in, such as a shipped reference corpus)."""
    from adakit.study.launch import _backend, _Worlds

    parent = read_run(parent_path)
    treated = as_change(change)
    if treated.kind == "placebo":
        raise ForkError("the change must be something other than a placebo: placebo forks are "
                        "made anyway, as the control")
    if treated.kind == "model":
        check_model(str(treated.value))
    context = launch_context(worlds or _Worlds(), _backend, cache_mode)
    folder = None
    where = None if root is None else config.resolve(root) / f"{parent.header.run_id}__at{at}"
    for kind in (Change("placebo"), treated):
        for plan in plan_forks(parent, at, kind, seeds, where):
            folder = plan.path.parent
            done = read_run(plan.path) if plan.path.exists() else None
            if done is None or done.end is None:
                run_fork(parent, at, kind, plan, context)
    assert folder is not None  # plan_forks made at least one plan (seeds >= 1)
    return folder


def baseline_fork_sets(output: str | Path, world: str = "flask", task: str = "feature_tracing",
                       policies: Sequence[str] = DEMO_POLICIES, repeats: int = 2, at: int = 2,
                       change: Change | str | Mapping[str, Any] = DEMO_CHANGE, seeds: int = 2,
                       turn_bound: int = 30) -> Path:
    """Record ``repeats`` natural runs (seeds 0, 1, ...) of each scripted baseline in
    ``policies`` into ``output`` (kept when already finished) and make a fork set of each at
    turn ``at`` (:func:`make_fork_set`). Deterministic and offline. Returns the folder of the
    fork sets, ``<output>.forks``."""
    from adakit.study.launch import _Worlds, launch
    from adakit.study.spec import RunSpec, Study

    out = config.resolve(output)
    specs = [RunSpec(study="forks-demo", model=p, world=world, task=task, condition="natural",
                     repeat=r, seed=r, settings=(("turn_bound", turn_bound),))
             for p in policies for r in range(repeats)]
    launch(Study(name="forks-demo", output=out, specs=specs), progress=False)
    worlds = _Worlds()
    for spec in specs:
        make_fork_set(out / f"{spec.run_id}.jsonl", at, change, seeds, worlds=worlds)
    return out.with_name(out.name + ".forks")


@dataclass
class ForkSets:
    """A folder of fork sets as read: the corpus of its forks, its fork index
    (:func:`adakit.lenses.forks.fork_index`), the per-fork outcomes, where the parents are
    (``parents``: their corpus folder, when it is on disk beside the forks), what the forks
    are (``source``, a sentence) and what lens 3 found (``lens3``, a sentence)."""

    folder: Path
    corpus: Corpus
    index: pd.DataFrame
    outcomes: pd.DataFrame
    parents: Path | None
    source: str = ""
    lens3: str = ""
    scripted: bool = False


def parents_folder(forks: str | Path) -> Path | None:
    """The corpus a folder of fork sets was forked from (``X.forks`` -> ``X``), when it exists."""
    p = config.resolve(forks)
    for candidate in (p, *p.parents):
        if candidate.name.endswith(".forks"):
            parent = candidate.with_name(candidate.name.removesuffix(".forks"))
            return parent if parent.is_dir() else None
    return None


def read_fork_sets(forks: str | Path, judgments: pd.DataFrame | None = None) -> ForkSets:
    """Read a folder of fork sets (``<corpus>.forks``, or one fork set's folder); with
    ``judgments``, the outcomes carry the lens 3 scores of the forks' conclusions
    (ValueError when the folder holds no fork)."""
    folder = config.resolve(forks)
    corpus = load_corpus(folder, cache=False)
    index = lens.fork_index(corpus.runs)
    if index.empty:
        raise ValueError(f"{forks} holds no fork (no run file whose header has forked_from)")
    outcomes = lens.fork_outcomes(index, corpus.runs, corpus.turns, corpus.reads, judgments)
    return ForkSets(folder, corpus, index, outcomes, parents_folder(folder))


def has_forks(folder: str | Path | None) -> bool:
    """Whether ``folder`` is given, exists and holds at least one run file."""
    if not folder or not str(folder).strip():
        return False
    path = config.resolve(folder)
    return path.is_dir() and any(path.rglob("*.jsonl"))


def open_fork_sets(forks: str | Path | None, judgments: str | Path | None = None,
                   demo_output: str | Path = "data/runs/forks-demo", world: str = "flask",
                   at: int = 2, change: Change | str | Mapping[str, Any] = DEMO_CHANGE,
                   seeds: int = 2, repeats: int = 2) -> ForkSets:
    """The fork sets notebook 21 reads: those in ``forks`` when that folder holds any, else
    forks of scripted baseline parents made now in ``demo_output`` (:func:`baseline_fork_sets`
    with ``world``, ``repeats``, ``at``, ``change`` and ``seeds``). The verdicts come from ``judgments`` (a
    file) or else from the fork corpus's own (:func:`adakit.lenses.forks.fork_judgments`).
    ``source`` and ``lens3`` say in words which forks these are and what lens 3 has."""
    from adakit.judging.store import read_judgments

    scripted = not has_forks(forks)
    if scripted:
        folder = baseline_fork_sets(demo_output, world=world, repeats=repeats, at=at,
                                    change=change, seeds=seeds)
        missing = f"no fork sets at {forks}" if forks else "no fork folder given"
        source = (f"{missing}, so these are forks of scripted baseline parents made just now, "
                  f"offline, in {config.shown(folder)}: {repeats} natural run(s) of each of "
                  f"{', '.join(DEMO_POLICIES)} on {world}, each forked at turn {at}. A scripted policy samples nothing, so its "
                  "placebo forks reproduce the parent exactly and every interval has zero width: "
                  "the design at work without the noise a model brings")
    else:
        folder = config.resolve(forks)  # type: ignore[arg-type]
        source = f"recorded fork sets from {config.shown(folder)}"
    if judgments and str(judgments).strip():
        verdicts: pd.DataFrame | None = read_judgments(config.resolve(judgments))
        note = f"lens 3: verdicts from {judgments}"
    else:
        verdicts, note = lens.fork_judgments(folder)
    sets = read_fork_sets(folder, verdicts)
    sets.source, sets.lens3, sets.scripted = source, note, scripted
    return sets


def fork_set_summary(sets: ForkSets) -> pd.DataFrame:
    """One row per fork set: parent, K, its forks per change."""
    d = sets.index.groupby(["fork_set", "parent", "at", "treatment"], sort=True).size()
    return d.unstack("treatment", fill_value=0).reset_index()


def pick_parent(outcomes: pd.DataFrame, metric: str = "turns_after") -> str:
    """The fork set (``parent@K``) that shows its change best: among the sets with placebo
    and treated forks, the largest gap between the two arms' mean ``metric``; the first set
    when none has both."""
    require_columns(outcomes, ["fork_set", "arm", metric], "the fork outcomes")
    means = outcomes.groupby(["fork_set", "arm"], sort=False)[metric].mean().unstack()
    if lens.PLACEBO in means and "treated" in means:
        gap = (means["treated"] - means[lens.PLACEBO]).abs().dropna()
        if len(gap):
            return str(gap.sort_values(ascending=False, kind="stable").index[0])
    return str(outcomes["fork_set"].iloc[0])


def _parent_run(sets: ForkSets, parent_id: str) -> Corpus | None:
    """The parent run's corpus (one run), when its file is in the parents' corpus."""
    if sets.parents is None:
        return None
    path = sets.parents / f"{parent_id}.jsonl"
    if not path.exists():
        found = [p for p in iter_run_files(sets.parents) if p.stem == parent_id]
        if not found:
            return None
        path = found[0]
    return load_corpus(path, cache=False)


def fork_tree(sets: ForkSets, fork_set: str) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """One fork set as lens 1 reads it: its journey events, its runs table (one row per
    branch, ``branch`` naming it: the parent first when it is on disk, then the placebo
    forks, then the treated ones, by seed) and K."""
    chosen = sets.index[sets.index["fork_set"] == fork_set]
    if chosen.empty:
        raise ValueError(f"no fork set {fork_set!r}; known: {', '.join(sets.index['fork_set'].unique())}")
    at = int(chosen["at"].iloc[0])
    chosen = chosen.assign(first=chosen["arm"] != lens.PLACEBO).sort_values(["first", "treatment", "seed"])
    runs = sets.corpus.runs.merge(chosen[["run_id", "treatment", "seed"]], on="run_id")
    runs = runs.set_index("run_id").loc[chosen["run_id"]].reset_index()
    draws = dict(zip(chosen["run_id"], chosen.groupby("treatment", sort=False).cumcount() + 1, strict=True))
    runs["branch"] = [f"{t} · draw {draws[r]}" for t, r in zip(runs["treatment"], runs["run_id"], strict=True)]
    events = journey.arc_events(sets.corpus)
    events = events[events["run_id"].isin(set(runs["run_id"]))]
    parent = _parent_run(sets, str(chosen["parent"].iloc[0]))
    if parent is not None:
        prow = parent.runs.assign(branch=PARENT)
        runs = pd.concat([prow, runs], ignore_index=True)
        events = pd.concat([journey.arc_events(parent), events], ignore_index=True)
    runs["order"] = range(len(runs))
    return events, runs, at


def plot_fork_tree(sets: ForkSets, fork_set: str, width: float = 8.0) -> Figure:
    """The fork tree of one fork set as journey arcs on the turn axis (lens 1's
    :func:`adakit.lenses.journey.plot_journey_arcs`): one row per branch, the shared prefix
    (turns 1..K, the same in every row) shaded, a dashed line where the branches part."""
    events, runs, at = fork_tree(sets, fork_set)
    fig = journey.plot_journey_arcs(events, runs, facet=None, axis="turn", max_runs_per_panel=None,
                                    row_label="branch", sort_by="order", width=width)
    ax = fig.axes[0]
    ax.axvspan(0, at + 0.5, color="#d9e6f2", alpha=0.6, zorder=0, lw=0)
    ax.axvline(at + 0.5, color="#1f4e79", ls="--", lw=1.2, zorder=0)
    parent = sets.index.loc[sets.index["fork_set"] == fork_set, "parent"].iloc[0]
    ax.set_title(f"{parent}\nshared prefix (turns 1–{at}, shaded), then the branches",
                 loc="left", fontsize=9)
    ax.set_title("", loc="right")
    return fig


def describe_fork_set(sets: ForkSets, fork_set: str) -> pd.DataFrame:
    """One row per branch of a fork set: change, seed, turns after K, own conclusion, new
    files and lines read after K, and the lens 3 scores when the outcomes carry them."""
    cols = ["run_id", "treatment", "seed", *lens.OUTCOME_METRICS,
            *[m for m in lens.LENS3_METRICS if m in sets.outcomes.columns]]
    d = sets.outcomes[sets.outcomes["fork_set"] == fork_set]
    return d[cols].sort_values(["treatment", "seed"]).reset_index(drop=True)


def estimate_text(effects: pd.DataFrame, metric: str = "turns_after") -> str:
    """One line per change: its effect on ``metric`` with the interval, p and reading."""
    d = effects[effects["metric"] == metric]
    if d.empty:
        return f"no estimate of {metric}: no fork set has both placebo and treated forks"
    lines = []
    for r in d.itertuples():
        interval = ("no interval (fewer than two forks a side)" if pd.isna(r.effect_lo)
                    else f"[{r.effect_lo:+.2f}, {r.effect_hi:+.2f}]")
        p = "" if pd.isna(r.p) else f", p = {r.p:.3g} (Holm over the table {r.p_holm:.3g})"
        lines.append(f"{r.treatment}: {r.label} {r.effect:+.2f} {interval}{p} over {r.n_sets} "
                     f"fork set(s), {r.n_treated} treated and {r.n_placebo} placebo forks: {r.reading}")
    return "\n".join(lines)


def parent_path_of(fork_path: str | Path, parent_id: str) -> Path | None:
    """The parent's run file of the fork at ``fork_path`` (``<corpus>.forks/<set>/<fork>``
    -> ``<corpus>/<parent>.jsonl``, or a file of that stem under ``<corpus>``), when on disk."""
    for folder in Path(fork_path).parents:
        if folder.name.endswith(".forks"):
            corpus = folder.with_name(folder.name.removesuffix(".forks"))
            direct = corpus / f"{parent_id}.jsonl"
            if direct.exists():
                return direct
            found = [p for p in iter_run_files(corpus) if p.stem == parent_id] if corpus.is_dir() else []
            return found[0] if found else None
    return None


def branch_label(treatment: str, run_id: str) -> str:
    """A branch as a menu shows it: its change and its draw (``placebo · draw 2``)."""
    draw = run_id.rsplit("__s", 1)[-1] if "__s" in run_id else "?"
    return f"{treatment} · draw {draw}"


def branches_of(parent_path: str | Path, run_id: str | None = None) -> pd.DataFrame:
    """The recorded forks of the run at ``parent_path`` (files in ``<corpus>.forks/`` whose
    header's ``forked_from`` names it; ``run_id`` when it differs from the file's stem): one
    row per fork with ``run_id``, ``path``, ``at``, ``change``, ``treatment`` and ``seed``,
    by K, treatment and seed."""
    path = Path(parent_path).resolve()
    parent_id = run_id or path.stem
    root = path.parent.with_name(path.parent.name + ".forks") if path.parent.name else None
    cols = ["run_id", "path", "at", "change", "treatment", "seed"]
    rows = []
    for file in sorted(root.rglob("*.jsonl")) if root is not None and root.is_dir() else []:
        try:
            with open(file, encoding="utf-8") as fh:
                header = json.loads(fh.readline())
        except (OSError, ValueError):
            continue
        info = header.get("forked_from") if isinstance(header, dict) else None
        if not info or info.get("parent") != parent_id:
            continue
        rows.append({"run_id": header.get("run_id", file.stem), "path": file,
                     "at": int(info["turn"]), "change": info["change"],
                     "treatment": lens.treatment_of(info["change"], info.get("value")),
                     "seed": info.get("seed", 0)})
    out = pd.DataFrame(rows, columns=cols)
    return out.sort_values(["at", "treatment", "run_id"], kind="stable").reset_index(drop=True)
