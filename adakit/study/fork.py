"""Counterfactual forks of recorded runs (docs/forks.md; the command ``adakit fork RUN_FILE
--at K`` is :mod:`adakit.study.fork_cli`, a study file's ``forks`` blocks are read here).

A fork takes a recorded run's first K turns as they are, asks no model for them, makes exactly
one change at turn K and lets the run go on from there under N new seeds. The change shows in
what the model reads after turn K (turn K's observation and the requests from turn K+1 on):

- ``condition NAME``: the condition applies from turn K on; its stance and, when it has a
  budget, "you have M turns left" (M = its budget, at most the turns the run has left) are
  added to turn K's observation, and its reminders count that budget from turn K;
- ``inject TEXT``: a message added to turn K's observation, as the coach's are;
- ``model NAME``: another model continues the same history;
- ``without TOOL``: a tool is no longer offered from turn K on (a note says so; its grammar
  leaves it out; a call to it is not run);
- ``placebo``: no change, only a new seed from turn K on.

The fork is a :class:`adakit.apparatus.agent.Run` like any other: its file starts with the
parent's prefix and the run resumes from it (:class:`adakit.apparatus.agent.Prefix`), so a
killed fork resumes, its replies are cached per fork, and every lens reads it. Its header's
``forked_from`` (:class:`adakit.record.ForkInfo`) names the parent, K, the prefix digest, the
change and the seed. Forks go beside the parent's corpus, in ``<corpus>.forks/<parent>__atK/``:
the forks of one parent at one turn (a **fork set**) share a folder.
"""

from __future__ import annotations

import dataclasses
import re
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adakit.apparatus.agent import LaunchContext, Prefix, Run, RunConfig
from adakit.apparatus.conditions import Condition, get_condition
from adakit.apparatus.tasks import Task
from adakit.apparatus.tools import TOOL_SPECS
from adakit.record import ForkInfo, Injection, RunFile, prefix_digest, read_run

CHANGES: tuple[str, ...] = ("condition", "inject", "model", "without", "placebo")
#: The tool a fork may not take away: without it no run could conclude.
KEPT_TOOL = "stash_conclusion"


class ForkError(ValueError):
    """A fork that cannot be made as asked (the message is one line)."""


@dataclass(frozen=True)
class Change:
    """The one change of a fork: its kind (:data:`CHANGES`) and value (None for a placebo)."""

    kind: str
    value: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in CHANGES:
            raise ForkError(f"unknown change {self.kind!r}; one of {', '.join(CHANGES)}")
        if (self.kind == "placebo") != (self.value is None):
            raise ForkError("a placebo takes no value" if self.kind == "placebo"
                            else f"--{self.kind} needs a value")
        if self.kind == "inject" and not str(self.value).strip():
            raise ForkError("--inject needs a non-empty text")

    @property
    def slug(self) -> str:
        """The change as a file-name part: ``placebo``, ``condition-budget_pressure``, ...
        (an injected text by its crc32)."""
        if self.value is None:
            return self.kind
        if self.kind == "inject":
            return f"inject-{zlib.crc32(self.value.encode()):08x}"
        return f"{self.kind}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', self.value)}"


@dataclass(frozen=True)
class LateCondition(Condition):
    """A condition that applies after ``start`` turns: its budget counts from there."""

    start: int = 0

    def reminder_after(self, used: int) -> str | None:
        """The condition's reminder after ``used`` turns of the run (none before ``start``)."""
        return super().reminder_after(used - self.start) if used > self.start else None


def budget_note(turns: int) -> str:
    """The note that starts a budget condition in the middle of a run."""
    return (f"Budget: from now on you have {turns} exploration turns left, and every tool call "
            "spends one. Go for the evidence that settles the task and conclude with "
            f"stash_conclusion (proceed_to_finalize=true) within those {turns} turns.")


def without_note(tool: str) -> str:
    """The note that takes a tool away."""
    return f"The tool {tool} is no longer available from now on; use the other tools."


def fork_seed(parent_id: str, at: int, draw: int) -> int:
    """The seed of draw ``draw`` (1..N) of the forks of ``parent_id`` at turn ``at``: fixed by
    the three, so a treated fork and the placebo fork of the same draw share it."""
    return zlib.crc32(f"fork/{parent_id}/{at}/{draw}".encode()) % 2**31


def fork_set_folder(parent_path: str | Path, parent_id: str, at: int) -> Path:
    """Where the forks of a parent at turn ``at`` go: ``<corpus>.forks/<parent>__at<at>``."""
    corpus = Path(parent_path).resolve().parent
    return corpus.with_name(corpus.name + ".forks") / f"{parent_id}__at{at}"


def fork_run_id(parent_id: str, at: int, change: Change, draw: int) -> str:
    """A fork's run id (its file name without ``.jsonl``)."""
    return f"{parent_id}__at{at}__{change.slug}__s{draw}"


def check_at(parent: RunFile, at: int) -> None:
    """ForkError unless turn ``at`` leaves the parent a recorded turn to fork before."""
    n = len(parent.turns)
    if n < 2:
        raise ForkError(f"{parent.header.run_id} has {n} turn(s): a fork needs at least 2")
    if not 1 <= at <= n - 1:
        raise ForkError(f"--at must be between 1 and {n - 1} (the parent has {n} turns), got {at}")


def forked_condition(parent: RunFile, change: Change, at: int) -> Condition:
    """The condition the fork runs under from turn ``at`` on (the parent's, but for a
    condition change, whose budget then counts from ``at``)."""
    h = parent.header
    old = get_condition(h.condition.name, budget=h.condition.budget)
    if change.kind != "condition":
        return old
    new = _condition(str(change.value))
    left = h.turn_bound - at
    budget = min(new.budget, left) if new.budget else None
    fields = {f.name: getattr(new, f.name) for f in dataclasses.fields(Condition)}
    return LateCondition(**{**fields, "budget": budget}, start=at)


def _condition(name: str) -> Condition:
    try:
        return get_condition(name)
    except KeyError as exc:
        raise ForkError(str(exc.args[0])) from None


def change_notes(change: Change, condition: Condition) -> list[Injection]:
    """What the change adds to turn K's observation."""
    if change.kind == "inject":
        return [Injection(source="system", text=str(change.value))]
    if change.kind == "without":
        return [Injection(source="system", text=without_note(str(change.value)))]
    if change.kind != "condition":
        return []
    notes = [Injection(source="system", text=condition.stance.strip())] if condition.stance.strip() else []
    if condition.budget:
        notes.append(Injection(source="system", text=budget_note(condition.budget)))
    return notes


def check_tool(change: Change) -> None:
    """ForkError unless a ``without`` change names a tool a run can do without."""
    if change.kind != "without":
        return
    if change.value not in TOOL_SPECS:
        raise ForkError(f"unknown tool {change.value!r}; one of {', '.join(TOOL_SPECS)}")
    if change.value == KEPT_TOOL:
        raise ForkError(f"--without {KEPT_TOOL}: a run without it could never conclude")


def make_prefix(parent: RunFile, at: int, change: Change, seed: int,
                condition: Condition) -> Prefix:
    """The prefix of a fork of ``parent`` at turn ``at``: its first ``at`` turns (the
    change's notes added to the last) and the ``forked_from`` the fork's header carries."""
    check_at(parent, at)
    check_tool(change)
    h = parent.header
    turns = [t.model_copy(deep=True) for t in parent.turns[:at]]
    info = ForkInfo(parent=h.run_id, turn=at, prefix_sha256=prefix_digest(h, turns),
                    change=change.kind, value=change.value, seed=seed)  # type: ignore[arg-type]
    turns[-1].injected = [*turns[-1].injected, *change_notes(change, condition)]
    return Prefix(header=h, turns=turns,
                  opening=get_condition(h.condition.name, budget=h.condition.budget),
                  forked_from=info,
                  without=frozenset([str(change.value)]) if change.kind == "without" else frozenset())


def fork_config(parent: RunFile, run_id: str, seed: int) -> RunConfig:
    """The fork's loop settings: the parent's, as its header recorded them, with the fork's
    run id and seed."""
    h = parent.header
    sc = h.scaffold
    grammar = sc.get("grammar") if isinstance(sc.get("grammar"), dict) else {}
    kept = {k: sc[k] for k in ("tree_max_files", "max_observation_chars", "reply_max_tokens",
                               "malformed_limit", "repeat_guard", "close_chars",
                               "redraw_repeats", "redraw_step", "ledger_chars", "conclude_nudge",
                               "conclude_checkpoint", "checkpoint_turns",
                               "cognitive_streak")
            if sc.get(k) is not None}
    kept.update({k: grammar[k] for k in ("thinking_min_chars", "thinking_rule") if k in grammar})
    return RunConfig(run_id=run_id, study=h.study, turn_bound=h.turn_bound, seed=seed,
                     repeat=h.repeat, close_turn=bool(sc.get("close_turn")),
                     ledger=bool(sc.get("ledger")), redraw_note=bool(sc.get("redraw_note")),
                     window_drop=sc.get("window_drop", "pair"),
                     tool_format=sc.get("tool_format", "xml"),
                     history_thinking=sc.get("history_thinking", "keep"),
                     demonstration=sc.get("demonstration", "off"),
                     name_hints=sc.get("name_hints", "line"), **kept)


def parent_task(parent: RunFile) -> Task:
    """The parent's task exactly as its header recorded it (its prompt opens the fork)."""
    t = parent.header.task
    return Task(family=t.family, title=t.family, prompt=t.prompt, target=t.target)


@dataclass(frozen=True)
class ForkPlan:
    """One fork to make: its draw, seed, run id and file."""

    draw: int
    seed: int
    run_id: str
    path: Path


def plan_forks(parent: RunFile, at: int, change: Change, seeds: int,
               folder: str | Path | None = None) -> list[ForkPlan]:
    """The ``seeds`` forks of ``parent`` at turn ``at`` with ``change`` (checked here), in
    ``folder`` (default: :func:`fork_set_folder`)."""
    if seeds < 1:
        raise ForkError(f"--seeds must be at least 1, got {seeds}")
    if parent.header.source is not None:
        raise ForkError(f"{parent.header.run_id} was imported from {parent.header.source.format}: "
                        "only Ada's own runs can be forked")
    check_at(parent, at)
    check_tool(change)
    _condition(parent.header.condition.name)  # the parent's must still exist to open the fork
    if change.kind == "condition":
        _condition(str(change.value))
    pid = parent.header.run_id
    where = Path(folder) if folder is not None else fork_set_folder(parent.path, pid, at)
    out = []
    for draw in range(1, seeds + 1):
        run_id = fork_run_id(pid, at, change, draw)
        out.append(ForkPlan(draw, fork_seed(pid, at, draw), run_id, where / f"{run_id}.jsonl"))
    return out


#: Builds a fork's context: (parent, change, condition, seed, run id) -> LaunchContext
ContextFactory = Callable[[RunFile, Change, Condition, int, str], LaunchContext]


def run_fork(parent: RunFile, at: int, change: Change, plan: ForkPlan,
             context: ContextFactory) -> RunFile:
    """Make (or resume) one fork and return its finished file; ``context`` builds its
    world, task, backend and coach (:func:`launch_context` for the command)."""
    condition = forked_condition(parent, change, at)
    ctx = context(parent, change, condition, plan.seed, plan.run_id)
    ctx.prefix = make_prefix(parent, at, change, plan.seed, condition)
    return Run(ctx, fork_config(parent, plan.run_id, plan.seed), plan.path).execute()


# --------------------------------------------------------------------------- the command


def check_model(name: str) -> None:
    """ForkError unless ``name`` is a registry model or a scripted baseline."""
    from adakit.apparatus.baselines import baseline_spec
    from adakit.llm.models import ModelError, get_model

    try:
        baseline_spec(name) if name.startswith("baseline-") else get_model(name)
    except (KeyError, ModelError) as exc:
        raise ForkError(str(exc.args[0] if exc.args else exc)) from None


def launch_context(worlds: Any, backend_for: Callable[..., Any],
                   cache_mode: str = "use") -> ContextFactory:
    """The context factory of ``adakit fork`` and of a study's forks: the world from
    ``worlds.get(name)`` (world, index, WorldInfo), the model from ``backend_for(model, world,
    index, seed, cache_mode, run_id)``, cached per fork, as ``adakit launch`` builds a run's
    (:mod:`adakit.study.launch` hands its own in, so this module does not import it)."""
    from adakit.apparatus.agent import hint_model_from

    def build(parent: RunFile, change: Change, condition: Condition, seed: int,
              run_id: str) -> LaunchContext:
        h = parent.header
        world, index, info = worlds.get(h.world.name)
        model = str(change.value) if change.kind == "model" else h.model.name
        baseline = model.startswith("baseline-")
        # a scripted baseline samples nothing: its seed picks its plan, which the prefix fixed
        backend = backend_for(model, world, index, h.seed if baseline else seed, cache_mode, run_id)
        coach = None
        if condition.coach:
            from adakit.apparatus.coach import make_coach
            from adakit.llm.models import DEFAULT_LOCAL_MODEL

            coach = make_coach(DEFAULT_LOCAL_MODEL, cache_mode=cache_mode)
        return LaunchContext(world=world, task=parent_task(parent), condition=condition,
                             backend=backend, index=index,
                             hint_model=None if baseline else hint_model_from(backend),
                             coach=coach, world_info=info)

    return build


# --------------------------------------------------------------------------- fork studies


#: The keys of a study file's ``forks`` block (docs/forks.md).
FORK_BLOCK_KEYS = ("from", "models", "worlds", "tasks", "conditions", "limit", "at", "changes",
                   "seeds")
_SELECT = ("models", "worlds", "tasks", "conditions")


@dataclass(frozen=True)
class ForkBlock:
    """One ``forks`` block of a study file: the parents (a corpus folder, None for the study's
    own runs, and a selection by axis values, at most ``limit``), K (a turn, or a fraction of
    each parent's turns), the changes and the seeds per change."""

    source: Path | None
    select: tuple[tuple[str, tuple[str, ...]], ...]
    limit: int | None
    at: int | float
    changes: tuple[Change, ...]
    seeds: int


def parse_change(item: Any, where: str) -> Change:
    """A change as a study file writes it: ``placebo`` or a one-key mapping (``condition: X``);
    ForkError naming ``where`` otherwise."""
    if item == "placebo":
        return Change("placebo")
    if isinstance(item, dict) and len(item) == 1:
        (kind, value), = item.items()
        change = Change(str(kind), None if value is None else str(value))
        if change.kind == "condition":
            _condition(str(change.value))
        check_tool(change)
        return change
    raise ForkError(f"{where}: a change is 'placebo' or one key (condition, inject, model, "
                    f"without) with its value, got {item!r}")


def fork_blocks(raw: Any) -> list[ForkBlock]:
    """The ``forks`` blocks of a study file (ForkError with a one-line reason)."""
    if raw is None:
        return []
    if not isinstance(raw, list) or not raw:
        raise ForkError("'forks' must be a non-empty list of blocks")
    out = []
    for b, block in enumerate(raw, 1):
        where = f"forks block {b}"
        if not isinstance(block, dict):
            raise ForkError(f"{where}: a block is a mapping, got {block!r}")
        unknown = sorted(set(block) - set(FORK_BLOCK_KEYS))
        if unknown:
            raise ForkError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(FORK_BLOCK_KEYS)}")
        at = block.get("at")
        if isinstance(at, bool) or not isinstance(at, (int, float)) or at <= 0 or (
                isinstance(at, float) and at >= 1):
            raise ForkError(f"{where}: 'at' is a turn (1, 2, ...) or a fraction of the run (0 < at < 1), got {at!r}")
        changes = block.get("changes")
        if not isinstance(changes, list) or not changes:
            raise ForkError(f"{where}: 'changes' must be a non-empty list")
        seeds = block.get("seeds", 3)
        if not isinstance(seeds, int) or seeds < 1:
            raise ForkError(f"{where}: 'seeds' must be a whole number of at least 1, got {seeds!r}")
        limit = block.get("limit")
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ForkError(f"{where}: 'limit' must be a whole number of at least 1, got {limit!r}")
        select = tuple((k, tuple(str(v) for v in (block[k] if isinstance(block[k], list) else [block[k]])))
                       for k in _SELECT if block.get(k) is not None)
        source = Path(block["from"]) if block.get("from") else None
        out.append(ForkBlock(source, select, limit, at,
                             tuple(parse_change(c, where) for c in changes), seeds))
    return out


def turn_of(at: int | float, n_turns: int) -> int | None:
    """K for a parent of ``n_turns`` turns: the turn itself, or a fraction of the run (at least
    1, at most ``n_turns - 1``); None when the parent is too short to fork there."""
    if isinstance(at, float):
        return min(max(1, round(at * n_turns)), n_turns - 1) if n_turns >= 2 else None
    return at if at <= n_turns - 1 else None


def _parents(block: ForkBlock, default: Path) -> list[RunFile]:
    """The finished parents a block selects, by run id."""
    from adakit import config
    from adakit.record import iter_run_files

    folder = config.resolve(block.source) if block.source is not None else default
    axes = {"models": lambda h: h.model.name, "worlds": lambda h: h.world.name,
            "tasks": lambda h: h.task.family, "conditions": lambda h: h.condition.name}
    found = []
    for path in iter_run_files(folder) if folder.is_dir() else []:
        try:
            rf = read_run(path)
        except ValueError:
            continue
        h = rf.header
        if rf.end is None or h.forked_from is not None:
            continue
        if all(axes[k](h) in values for k, values in block.select):
            found.append(rf)
    found.sort(key=lambda rf: rf.header.run_id)
    return found[: block.limit] if block.limit else found


@dataclass(frozen=True)
class StudyFork:
    """One fork of a fork study and where it stands: ``finished``, ``to_resume``,
    ``to_retry``, ``failed`` or ``to_run``; ``turns_done`` counts its recorded turns."""

    parent: RunFile
    at: int
    change: Change
    plan: ForkPlan
    status: str
    turns_done: int


def _fork_status(path: Path) -> tuple[str, int]:
    from adakit.study.retry import failure_of

    if not path.exists():
        return "to_run", 0
    try:
        rf = read_run(path)
    except ValueError:
        return "to_run", 0
    if rf.end is None:
        return "to_resume", len(rf.turns)
    failure = failure_of(rf)
    if failure is None:
        return "finished", len(rf.turns)
    return ("to_retry" if failure.retryable else "failed"), len(rf.turns)


def study_forks(study: Any) -> list[StudyFork]:
    """Every fork a study file's ``forks`` blocks declare, with its state, seed by seed (every
    fork set's first draw, then every second draw, ...), so forks made in this order and
    stopped part way already pair each change with its placebo; parents that are too short
    to fork at a block's turn are left out."""
    out = []
    for block in fork_blocks(study.raw.get("forks")):
        for parent in _parents(block, study.output):
            at = turn_of(block.at, len(parent.turns))
            if at is None:
                continue
            for change in block.changes:
                for plan in plan_forks(parent, at, change, block.seeds):
                    out.append(StudyFork(parent, at, change, plan, *_fork_status(plan.path)))
    return sorted(out, key=lambda sf: sf.plan.draw)  # stable: blocks, parents, changes kept


@dataclass
class ForkCost:
    """What the forks left will cost: prompt and reply tokens, USD of the priced models, and
    the models whose price is unknown and that are not served on this machine."""

    tokens_in: float = 0.0
    tokens_out: float = 0.0
    usd: float = 0.0
    unpriced: set[str] = dataclasses.field(default_factory=set)
    unknown: set[str] = dataclasses.field(default_factory=set)


def fork_cost(study: Any, forks: list[StudyFork], reference: str | Path | None = None) -> ForkCost:
    """The estimate for the forks left: each is taken to go on to its turn bound, from K or
    its last recorded turn, with the figures :mod:`adakit.study.plan` measures."""
    from urllib.parse import urlparse

    from adakit.llm.models import load_registry
    from adakit.study.plan import _spec_of, agent_tokens, figure_sources, resolve_figures

    f = {k: v.value for k, v in resolve_figures(figure_sources(study, reference)).items()}
    registry = load_registry()
    cost = ForkCost()
    for sf in forks:
        h = sf.parent.header
        model = str(sf.change.value) if sf.change.kind == "model" else h.model.name
        if sf.status not in ("to_run", "to_resume", "to_retry") or model.startswith("baseline-"):
            continue
        spec = _spec_of(model, registry)
        tin, tout, _ = agent_tokens(f["prompt_first"], f["prompt_growth"], f["reply"],
                                    max(sf.turns_done, sf.at), h.turn_bound,
                                    getattr(spec, "context_window", None),
                                    int(getattr(spec, "max_tokens", None) or 1024))
        cost.tokens_in, cost.tokens_out = cost.tokens_in + tin, cost.tokens_out + tout
        usd = spec.cost(int(tin), int(tout)) if spec is not None else None
        if usd is not None:
            cost.usd += usd
            continue
        cost.unpriced.add(model)
        host = urlparse(getattr(spec, "base_url", None) or "").hostname or ""
        if getattr(spec, "kind", "") != "local" and host not in ("localhost", "::1") \
                and not host.startswith("127."):
            cost.unknown.add(model)
    return cost


def fork_plan_text(study: Any, forks: list[StudyFork], reference: str | Path | None = None) -> str:
    """The fork part of ``adakit launch STUDY --plan``: forks by state, and the tokens and USD
    of the turns left (:func:`fork_cost`)."""
    from collections import Counter

    from adakit.study.plan import usd_text

    cost = fork_cost(study, forks, reference)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(Counter(sf.status for sf in forks).items()))
    sets = len({(sf.parent.header.run_id, sf.at) for sf in forks})
    text = (f"forks: {len(forks)} in {sets} fork set(s) ({counts or 'none'}); the forks left: "
            f"{cost.tokens_in:,.0f} prompt and {cost.tokens_out:,.0f} reply tokens, "
            f"${usd_text(cost.usd)}")
    return text + (f" (plus unpriced: {', '.join(sorted(cost.unpriced))})" if cost.unpriced else "")


def launch_study_forks(study: Any, context: ContextFactory,
                       forks: list[StudyFork] | None = None,
                       progress: Callable[[str], None] | None = None) -> dict[str, str]:
    """Make, resume or retry every fork a study declares (``forks``, when the caller read
    them already; finished and failed ones are left as they are), their contexts built by
    ``context`` (:func:`launch_context`); ``progress`` gets a line per fork made; returns
    run id -> outcome."""
    from adakit.study.retry import reopen

    todo = study_forks(study) if forks is None else forks
    outcomes: dict[str, str] = {}
    for i, sf in enumerate(todo, 1):
        if sf.status in ("finished", "failed"):
            outcomes[sf.plan.run_id] = "skipped" if sf.status == "finished" else "left"
            continue
        if sf.status == "to_retry":
            reopen(sf.plan.path, resume=True)
        start = time.monotonic()
        rf = run_fork(sf.parent, sf.at, sf.change, sf.plan, context)
        outcomes[sf.plan.run_id] = rf.end.reason if rf.end else "unfinished"
        if progress is not None:
            progress(f"fork {i}/{len(todo)} {sf.plan.run_id}: {outcomes[sf.plan.run_id]} after "
                     f"{len(rf.turns) - sf.at} turn(s) of its own, {time.monotonic() - start:.0f} s")
    return outcomes
