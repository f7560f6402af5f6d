"""``adakit fork RUN_FILE --at K`` with one change and ``--seeds N`` (docs/forks.md): the
command line of :mod:`adakit.study.fork`, building each fork's world and model the way
``adakit launch`` builds a run's."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from adakit.apparatus.agent import scaffold_digest
from adakit.apparatus.world import load_manifest
from adakit.record import read_run
from adakit.study.fork import (
    CHANGES,
    Change,
    ForkError,
    check_model,
    fork_config,
    launch_context,
    plan_forks,
    run_fork,
)
from adakit.study.launch import _backend, _Worlds


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
        if parent.header.world.name not in load_manifest():
            raise ForkError(f"the parent's world {parent.header.world.name!r} is not in the worlds "
                            "manifest (adakit worlds list): a fork needs its repository")
    except (ForkError, FileNotFoundError, ValueError) as exc:
        print(f"error: {str(exc).splitlines()[0] if str(exc) else exc!r}", file=sys.stderr)
        return 2
    recorded = parent.header.scaffold.get("prompts_sha256")
    now = scaffold_digest(fork_config(parent, parent.header.run_id, parent.header.seed))
    if recorded and recorded != now:
        print("warning: the parent was recorded under other prompt templates (prompts_sha256 "
              f"{recorded[:12]}, now {now[:12]}): the fork rebuilds its history "
              "with today's, so its model may read the prefix slightly differently", file=sys.stderr)
    context = launch_context(_Worlds(), _backend, args.cache_mode)
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
