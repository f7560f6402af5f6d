"""Counterfactual forks of recorded runs: ``adakit fork RUN_FILE --at K`` (docs/forks.md).

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

import argparse
import dataclasses
import re
import sys
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
                               "redraw_repeats", "redraw_step", "ledger_chars") if sc.get(k) is not None}
    kept.update({k: grammar[k] for k in ("thinking_min_chars", "thinking_rule") if k in grammar})
    return RunConfig(run_id=run_id, study=h.study, turn_bound=h.turn_bound, seed=seed,
                     repeat=h.repeat, close_turn=bool(sc.get("close_turn")),
                     ledger=bool(sc.get("ledger")), **kept)


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
    check_at(parent, at)
    check_tool(change)
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


def launch_context(cache_mode: str = "use") -> ContextFactory:
    """The context factory of ``adakit fork``: the world from the manifest, the model from the
    registry (or a baseline), cached per fork, as ``adakit launch`` builds a run's."""
    from adakit.apparatus.agent import hint_model_from
    from adakit.study.launch import _backend, _Worlds

    worlds = _Worlds()

    def build(parent: RunFile, change: Change, condition: Condition, seed: int,
              run_id: str) -> LaunchContext:
        h = parent.header
        world, index, info = worlds.get(h.world.name)
        model = str(change.value) if change.kind == "model" else h.model.name
        baseline = model.startswith("baseline-")
        # a scripted baseline samples nothing: its seed picks its plan, which the prefix fixed
        backend = _backend(model, world, index, h.seed if baseline else seed, cache_mode, run_id)
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


def change_from_args(args: argparse.Namespace) -> Change:
    """The one change the command line asks for (ForkError for none or several)."""
    given = [(k, getattr(args, k)) for k in CHANGES if k != "placebo" and getattr(args, k) is not None]
    if args.placebo:
        given.append(("placebo", None))
    if len(given) != 1:
        names = ", ".join(f"--{k}" for k, _ in given) or "none"
        raise ForkError(f"a fork makes exactly one change (--condition, --inject, --model, "
                        f"--without or --placebo); got {names}")
    kind, value = given[0]
    return Change(kind, value)


def _cmd_fork(args: argparse.Namespace) -> int:
    from adakit.study.retry import failure_of, reopen

    try:
        parent = read_run(args.run_file)
        change = change_from_args(args)
        if change.kind == "model":
            check_model(str(change.value))
        plans = plan_forks(parent, args.at, change, args.seeds, args.output)
    except (ForkError, FileNotFoundError, ValueError) as exc:
        print(f"error: {str(exc).splitlines()[0] if str(exc) else exc!r}", file=sys.stderr)
        return 2
    context = launch_context(args.cache_mode)
    failed = 0
    for plan in plans:
        if plan.path.exists():
            done = read_run(plan.path)
            failure = failure_of(done) if done.end is not None else None
            if done.end is not None and not (failure and failure.retryable):
                print(f"{plan.path}: already finished ({done.end.reason})")
                continue
            if failure is not None:
                reopen(plan.path, resume=True)  # the failed attempt is kept beside it
        rf = run_fork(parent, args.at, change, plan, context)
        reason = rf.end.reason if rf.end else "unfinished"
        failed += reason == "model_error"
        print(f"{plan.path}: {reason} after {len(rf.turns)} turns ({len(rf.turns) - args.at} new)")
    return 1 if failed else 0


def register_cli(sub: Any) -> None:
    """``adakit fork RUN_FILE --at K (--condition NAME | --inject TEXT | --model NAME |
    --without TOOL | --placebo) [--seeds N]``."""
    p = sub.add_parser(
        "fork", help="replay a recorded run's first K turns, change one thing, go on (N seeds)",
        epilog="exit status: 0 every fork finished; 1 a fork ended in a model failure; "
        "2 bad input (nothing made). Forks go to <corpus>.forks/<run>__atK/ (docs/forks.md)",
    )
    p.add_argument("run_file", help="the parent run (a .jsonl run file)")
    p.add_argument("--at", type=int, required=True, metavar="K",
                   help="keep the parent's first K turns; the change shows from turn K's observation on")
    p.add_argument("--condition", metavar="NAME", help="this condition from turn K on")
    p.add_argument("--inject", metavar="TEXT", help="add this message to turn K's observation")
    p.add_argument("--model", metavar="NAME", help="another model continues the history")
    p.add_argument("--without", metavar="TOOL", help="this tool is no longer offered from turn K on")
    p.add_argument("--placebo", action="store_true", help="no change: only a new seed from turn K on")
    p.add_argument("--seeds", type=int, default=3, metavar="N", help="forks to make (default 3)")
    p.add_argument("--output", metavar="FOLDER", help="the fork set's folder (default beside the corpus)")
    p.add_argument("--cache-mode", choices=["use", "replay", "refresh", "off"], default="use",
                   help="response cache mode (default use)")
    p.set_defaults(func=_cmd_fork)
