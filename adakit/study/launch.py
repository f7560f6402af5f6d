"""The launcher: a study's run specs (:mod:`adakit.study.spec`) -> resumable, parallel runs.

A launch reads where every run stands once (:func:`adakit.study.retry.study_states`: each run
file is parsed once) and hands those states to the one preflight gate (:func:`preflight_gate`:
:func:`adakit.study.preflight.preflight` checks what the remaining runs need), to the estimated
cost (:mod:`adakit.study.plan`; the CLI asks for confirmation above a threshold) and to the loop.
Runs that a model failure ended (``adakit.study.retry``) are re-run by default: resumed after
their last good turn when nothing about them changed, else restarted clean, the failed attempt
kept beside them either way.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from tqdm.auto import tqdm

from adakit import config
from adakit.apparatus.agent import (
    LaunchContext,
    Run,
    RunConfig,
    hint_model_from,
)
from adakit.apparatus.conditions import get_condition
from adakit.apparatus.tasks import make_task
from adakit.llm.models import DEFAULT_LOCAL_MODEL
from adakit.record import WorldInfo, load_corpus, read_run
from adakit.study.lock import FolderLocked, folder_lock
from adakit.study.plan import make_plan, usd_text
from adakit.study.preflight import Preflight, preflight
from adakit.study.retry import (
    REMAINING,
    Failure,
    RunState,
    failure_of,
    fix_for,
    reopen,
    run_state,
    same_header,
    study_states,
)
from adakit.study.spec import RunSpec, Study, load_study, restrict

_LOCAL_LOCK = threading.Lock()
#: USD above which ``adakit launch`` asks before spending (``--confirm-above`` changes it).
CONFIRM_ABOVE_USD = 5.0
RETRY_FROM = ("last_turn", "start")


class DiskFull(OSError):
    """The output folder's disk filled up: the launch stopped (recorded turns are kept)."""


def disk_full_text(folder: Path, runs_left: int) -> str:
    """One line saying where the disk is full, what is free, and about how much the runs left
    need (judged by the run files recorded so far there)."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        free = 0
    sizes = [f.stat().st_size for f in Path(folder).glob("*.jsonl") if f.stat().st_size]
    per_run = sum(sizes) / len(sizes) if sizes else 50_000
    return (f"no space left on the device of {folder} ({free / 1e6:.1f} MB free): the launch "
            f"stopped; the {runs_left} run(s) left need about {runs_left * per_run / 1e6:.1f} MB "
            "more; free space and launch again (recorded turns are kept and resume)")


class PreflightFailed(RuntimeError):
    """A study needs something that is missing here; nothing was launched or recorded."""

    def __init__(self, report: Preflight) -> None:
        super().__init__(
            f"preflight: {len(report.missing)} thing(s) missing; nothing was launched or "
            f"recorded\n{report.table()}"
        )
        self.report = report


class _Worlds:
    """Opened worlds and their code indexes, shared by every run of a launch."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[Any, Any, WorldInfo]] = {}

    def get(self, name: str) -> tuple[Any, Any, WorldInfo]:
        with self._lock:
            if name not in self._cache:
                from adakit.apparatus.code_index import CodeIndex
                from adakit.apparatus.world import load_manifest, open_world

                world = open_world(name)
                src = load_manifest()[name].source
                info = WorldInfo(
                    name=world.name,
                    version=world.version,
                    language=world.language,
                    source=str(src),
                    sha256=src.sha256 or None,
                )
                index = CodeIndex(world)
                # a study visits many files: parse them all once (saved for every later start)
                index.build(parse=True)
                self._cache[name] = (world, index, info)
            return self._cache[name]


def _backend(model: str, world: Any, index: Any, seed: int, cache_mode: str, scope: str) -> Any:
    """The run's backend; model replies are cached per run (``scope``), so repeats differ."""
    if model.startswith("baseline-"):
        from adakit.apparatus.baselines import BaselinePolicy, baseline_spec

        return BaselinePolicy(baseline_spec(model), world, index, seed=seed)
    from adakit.llm.models import ResponseCache, backend_for, get_model

    return backend_for(
        get_model(model), cache=ResponseCache(), cache_mode=cache_mode, cache_scope=scope, seed=seed
    )


def run_one(
    study: Study,
    spec: RunSpec,
    worlds: _Worlds | None = None,
    on_turn: Any = None,
    retry: bool = True,
    retry_any: bool = False,
    retry_from: str = "last_turn",
    state: RunState | None = None,
) -> tuple[str, str]:
    """Launch, resume or retry one run; returns (run_id, outcome). ``on_turn(spec, turn)``
    reports progress. ``retry``: re-run a run a retryable model failure ended (``retry_any``:
    any model failure), resuming after its last good turn when ``retry_from`` is
    ``last_turn`` and the run would be launched exactly as recorded, else from the start; the
    failed attempt is kept beside the run file. ``state``: where the run stands, when the
    caller read it already (else it is read here)."""
    worlds = worlds or _Worlds()
    path = study.output / f"{spec.run_id}.jsonl"
    if state is None:
        state = run_state(path, spec, retry, retry_any)
    if state.status == "finished":
        return spec.run_id, "skipped"
    if state.status == "failed":
        return spec.run_id, f"left:{state.failure.kind if state.failure else 'error'}"
    world, index, info = worlds.get(spec.world)
    backend = _backend(spec.model, world, index, spec.seed, study.cache_mode, spec.run_id)
    hint = None
    hint_name = study.hint_model or (None if spec.model.startswith("baseline-") else spec.model)
    if hint_name:
        hint = hint_model_from(
            backend
            if hint_name == spec.model
            else _backend(hint_name, world, index, spec.seed, study.cache_mode, spec.run_id)
        )
    condition = get_condition(spec.condition, budget=spec.setting("budget"))
    coach = None
    if condition.coach:
        from adakit.apparatus.coach import make_coach

        coach = make_coach(study.coach_model or DEFAULT_LOCAL_MODEL, cache_mode=study.cache_mode)
    ctx = LaunchContext(
        world=world,
        task=make_task(spec.task, spec.world),
        condition=condition,
        backend=backend,
        index=index,
        hint_model=hint,
        coach=coach,
        world_info=info,
    )
    cfg = RunConfig(
        run_id=spec.run_id,
        study=study.name,
        seed=spec.seed,
        repeat=spec.repeat,
        **{k: v for k, v in spec.settings if k in RunConfig.__dataclass_fields__},
    )
    prefix = "resumed:" if state.status == "to_resume" else ""
    if state.refused:  # a file that cannot be read: the run sets it aside (.stale-*.jsonl.bak)
        prefix = "set-aside:"
    if state.status == "to_redo":  # finished under other settings: kept aside, run again
        reopen(path, resume=False)
        prefix = "redone:"
    callback = (lambda turn: on_turn(spec, turn)) if on_turn else None
    run = Run(ctx, cfg, path, on_turn=callback)
    if state.status == "to_retry":
        # the header the run writes, grammar included, so a local model's run resumes too
        resume = retry_from == "last_turn" and same_header(read_run(path).header,
                                                            run.planned_header())
        reopen(path, resume)
        prefix = "retried:" if resume else "restarted:"
    local = getattr(backend.spec, "kind", "") == "local"
    lock = _LOCAL_LOCK if local else _NullLock()
    with lock:
        rf = run.execute()
    outcome = rf.end.reason if rf.end else "unfinished"
    return spec.run_id, prefix + outcome


class _NullLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def preflight_gate(study: Study, states: list[RunState], check: bool = False,
                   skip_unavailable: bool = False) -> tuple[list[RunState], Preflight]:
    """The one preflight gate of a launch: :func:`adakit.study.preflight.preflight` checks
    what the runs of ``states`` with work left need (``check``: also call each endpoint once).
    Raises :class:`PreflightFailed` when something is missing, before anything is written;
    with ``skip_unavailable`` the runs that cannot run here are left out instead. Returns the
    states still to launch and the report."""
    report = preflight(study, [st.spec for st in states if st.status in REMAINING], check=check)
    if report.ok:
        return states, report
    if not skip_unavailable:
        raise PreflightFailed(report)
    left = report.left_out()
    return [st for st in states if st.spec.run_id not in left], report


def scaffold_note(study: Study) -> str | None:
    """The note for a study whose local-model runs have none of the small-model aids
    (:func:`adakit.apparatus.scaffolds.bare_local_note`), or None."""
    from adakit.apparatus.scaffolds import bare_local_note
    from adakit.llm.models import load_registry

    registry = load_registry()
    kinds = {m: getattr(registry.get(m), "kind", "") for m in {s.model for s in study.specs}}
    return bare_local_note([(s.model, kinds[s.model], dict(s.settings)) for s in study.specs])


def launch(
    study: Study,
    max_runs: int | None = None,
    progress: bool = True,
    retry: bool = True,
    retry_any: bool = False,
    retry_from: str = "last_turn",
    check: bool = False,
    skip_unavailable: bool = False,
    preflight_first: bool = True,
    states: list[RunState] | None = None,
) -> pd.DataFrame:
    """Run every spec of a study (skipping finished runs, retrying failed ones; see
    :func:`run_one`); returns the summary table. The launch holds the output folder's lock
    (:func:`adakit.study.lock.folder_lock`) for its whole life: a second launch into the same
    folder raises :class:`adakit.study.lock.FolderLocked` before it writes anything. Replies
    the study file names (``replies: FOLDER``) are restored into the response cache first.

    ``states``: where the study's runs stand, when the caller read them already (else they are
    read here, once per run). First, unless ``preflight_first`` is off, :func:`preflight_gate`
    checks what the remaining runs need (raising :class:`PreflightFailed` before anything is
    written, or with ``skip_unavailable`` leaving out the runs that cannot run here). The
    summary's ``attrs`` hold ``failures`` (runs that raised: run id -> error), ``failed``
    (every run of the launch that ended in a model failure and was not retried, as
    :class:`adakit.study.retry.Failure`), ``left_out`` (the preflight report of what was left
    out, or None) and ``outcomes``.
    """
    from adakit.study.replies import restore_declared

    with folder_lock(study.output):
        if study.cache_mode != "off" and (note := restore_declared(study.raw)) and progress:
            print(note)
        return _launch_locked(study, max_runs=max_runs, progress=progress, retry=retry,
                              retry_any=retry_any, retry_from=retry_from, check=check,
                              skip_unavailable=skip_unavailable,
                              preflight_first=preflight_first, states=states)


def _launch_locked(study: Study, *, max_runs: int | None, progress: bool, retry: bool,
                   retry_any: bool, retry_from: str, check: bool, skip_unavailable: bool,
                   preflight_first: bool, states: list[RunState] | None) -> pd.DataFrame:
    """:func:`launch` while it holds the output folder's lock."""
    specs = study.specs[:max_runs] if max_runs else list(study.specs)
    if states is None:
        states = study_states(dataclasses.replace(study, specs=specs), retry, retry_any)
    else:
        by_id = {st.spec.run_id: st for st in states}
        missing = [s.run_id for s in specs if s.run_id not in by_id]
        if missing:
            raise ValueError(f"no run state for {len(missing)} run(s) of the study, e.g. {missing[0]}")
        states = [by_id[s.run_id] for s in specs]
    left_report: Preflight | None = None
    if preflight_first:
        states, report = preflight_gate(study, states, check, skip_unavailable)
        left_report = None if report.ok else report
    specs = [st.spec for st in states]
    study.output.mkdir(parents=True, exist_ok=True)
    (study.output / "study.yaml").write_text(yaml.safe_dump(_jsonable(study.raw), sort_keys=False), encoding="utf-8")
    worlds = _Worlds()
    # open the worlds of the runs with work left (and build their indexes) up front, once
    for name in dict.fromkeys(st.spec.world for st in states if st.status in REMAINING):
        worlds.get(name)
    outcomes: dict[str, str] = {}
    failures: dict[str, str] = {}
    t0 = time.time()
    bar = tqdm(total=len(specs), desc=f"launch {study.name}", unit="run", disable=not progress)

    def on_turn(spec: RunSpec, turn: Any) -> None:
        bound = spec.setting("turn_bound", 50)
        bar.set_postfix_str(f"{spec.run_id[:48]}: turn {turn.turn}/{bound}", refresh=True)

    with ThreadPoolExecutor(max_workers=study.concurrency) as pool:
        futures = {
            pool.submit(run_one, study, st.spec, worlds, on_turn, retry, retry_any, retry_from,
                        st): st.spec
            for st in states
        }
        disk_full: OSError | None = None
        for fut in as_completed(futures):
            spec = futures[fut]
            if fut.cancelled():
                outcomes[spec.run_id] = "not_started"
                continue
            try:
                run_id, outcome = fut.result()
                outcomes[run_id] = outcome
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    failures[spec.run_id] = f"{type(exc).__name__}: {exc}"
                    outcomes[spec.run_id] = "failed"
                else:  # a full disk stops the launch: no run after it could be recorded
                    outcomes[spec.run_id] = "disk_full"
                    if disk_full is None:
                        disk_full = exc
                        for other in futures:
                            other.cancel()
            except Exception as exc:  # one broken run never stops the matrix
                failures[spec.run_id] = f"{type(exc).__name__}: {exc}"
                outcomes[spec.run_id] = "failed"
            bar.update(1)
            bar.set_postfix_str(f"{spec.run_id[:48]}: {outcomes[spec.run_id]}")
    bar.close()
    if disk_full is not None:
        left = sum(1 for o in outcomes.values() if o in ("disk_full", "not_started"))
        raise DiskFull(disk_full_text(study.output, left))
    for run_id, err in failures.items():
        print(f"FAILED {run_id}: {err}", file=sys.stderr)
    summary = summarize(study.output)
    summary.attrs["failures"] = failures
    summary.attrs["failed"] = _failed_runs(study, specs, failures)
    summary.attrs["left_out"] = left_report
    summary.attrs["outcomes"] = outcomes
    counts = pd.Series(outcomes).value_counts()
    if progress:
        print(f"\n{len(specs)} runs in {time.time() - t0:.1f}s: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return summary


def _failed_runs(study: Study, specs: list[RunSpec], raised: dict[str, str]) -> list[Failure]:
    """The runs of a launch that raised or whose record ends in a model failure."""
    out: list[Failure] = []
    for s in specs:
        if s.run_id in raised:
            out.append(Failure(s.run_id, s.model, "exception", True, raised[s.run_id]))
            continue
        path = study.output / f"{s.run_id}.jsonl"
        try:
            failure = failure_of(read_run(path)) if path.exists() else None
        except ValueError as exc:  # written into from elsewhere during the launch
            failure = Failure(s.run_id, s.model, "damaged", True, str(exc))
        if failure is not None:
            out.append(failure)
    return out


def failure_summary(failed: list[Failure], study_arg: str = "STUDY", show: int = 5) -> str:
    """The failed runs grouped by model and reason, each group with its fix."""
    from adakit.llm.models import load_registry

    registry = load_registry()
    groups: dict[tuple[str, str, bool], list[str]] = {}
    for f in failed:
        groups.setdefault((f.model, f.kind, f.retryable), []).append(f.run_id)
    lines = [f"{len(failed)} run(s) failed and were not retried:"]
    for (model, kind, retryable), runs in sorted(groups.items()):
        then = (f"then `adakit launch {study_arg}` retries them" if retryable
                else "not retried by default")
        lines.append(f"  {model}, {kind} ({len(runs)} runs): {fix_for(kind, registry.get(model), model)}; {then}")
        lines += [f"    {r}" for r in sorted(runs)[:show]]
        if len(runs) > show:
            lines.append(f"    ... and {len(runs) - show} more")
    return "\n".join(lines)


def _jsonable(data: Any) -> Any:
    if isinstance(data, dict):
        return {str(k): _jsonable(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_jsonable(v) for v in data]
    if isinstance(data, Path):
        return str(data)
    return data


def summarize(output: str | Path) -> pd.DataFrame:
    """Runs by model and termination reason: count, mean turns, tokens and cost."""
    corpus = load_corpus(output, cache=False)
    runs = corpus.runs
    if runs.empty:
        return pd.DataFrame()
    runs = runs.assign(reason=runs["reason"].fillna("unfinished"))
    return (
        runs.groupby(["model", "reason"])
        .agg(
            runs=("run_id", "count"),
            mean_turns=("n_turns", "mean"),
            tokens_in=("tokens_in", "sum"),
            tokens_out=("tokens_out", "sum"),
            cost_usd=("cost_usd", "sum"),
            cache_hits=("cache_hits", "sum"),
        )
        .reset_index()
    )


# --------------------------------------------------------------------------- CLI


def confirm_cost(usd: float, threshold: float, yes: bool, ask: Any = input,
                 interactive: bool | None = None, unknown: Sequence[str] = ()) -> bool:
    """Whether a launch estimated at ``usd`` may go ahead: below ``threshold`` with no model of
    ``unknown`` cost, with ``yes``, or when the user types y at the prompt (never without a
    terminal to ask on; ``interactive`` overrides the terminal check)."""
    if (usd <= threshold and not unknown) or yes:
        return True
    why = (f"the estimate ${usd_text(usd)} is above ${usd_text(threshold)}" if usd > threshold
           else f"the cost of {', '.join(unknown)} is unknown (no price_in/price_out in the "
                "registry; 0 marks a free endpoint)")
    if not (sys.stdin.isatty() if interactive is None else interactive):
        print(f"{why}: pass --yes to launch" + (" (or raise --confirm-above)" if usd > threshold else ""),
              file=sys.stderr)
        return False
    answer = ask(f"{why}; launch? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def _cmd_launch(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {}
    if args.output:
        overrides["output"] = args.output
    if args.cache_mode:
        overrides["cache_mode"] = args.cache_mode
    if args.concurrency:
        overrides["concurrency"] = args.concurrency
    try:
        study = load_study(args.study, overrides)
        if study.raw.get("forks") is not None:  # its fork blocks, checked before anything runs
            from adakit.study.fork import fork_blocks

            fork_blocks(study.raw["forks"])
    except (FileNotFoundError, ValueError, KeyError) as exc:
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    selection = {axis: _csv(getattr(args, axis)) for axis in ("models", "worlds", "tasks", "conditions")}
    repeats = _csv(args.repeats)
    if any(selection.values()) or repeats:
        try:  # the folder's study.yaml stays the whole study: a slice is one launch of it
            study = restrict(study, **selection, repeats=[int(r) for r in repeats] or None)
        except ValueError as exc:
            print(f"error: {exc} ({_selection_text(selection, repeats)}); "
                  f"see adakit launch {args.study} --list", file=sys.stderr)
            return 2
    if args.max_runs:
        study = dataclasses.replace(study, specs=study.specs[: args.max_runs])
    if args.list:
        for s in study.specs:
            print(s.run_id, dict(s.settings))
        return 0
    retry = not args.no_retry
    options = {"retry": retry, "retry_any": args.retry_any, "retry_from": args.retry_from}
    if args.plan:
        try:
            plan = make_plan(study, args.reference, **options)
        except FileNotFoundError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(plan.describe())
        if study.raw.get("forks"):
            from adakit.study.fork import fork_plan_text, study_forks

            print(fork_plan_text(study, study_forks(study), args.reference))
        return 0
    code = 0
    if study.specs:
        code = gated_launch(study, check=args.check, skip_unavailable=args.skip_unavailable,
                            reference=args.reference, confirm_above=args.confirm_above,
                            yes=args.yes, study_arg=args.study, **options)
    if study.raw.get("forks") and code in (0, 1):  # the study's forks, once its runs are there
        from adakit.study.fork import fork_cost, launch_context, launch_study_forks, study_forks

        forks = study_forks(study)
        cost = fork_cost(study, forks, args.reference)
        if not confirm_cost(cost.usd, args.confirm_above, args.yes, unknown=sorted(cost.unknown)):
            print("no fork was made", file=sys.stderr)
            return 3
        context = launch_context(_Worlds(), _backend, args.cache_mode or study.cache_mode)
        outcomes = launch_study_forks(study, context, forks,
                                      progress=lambda line: print(line, file=sys.stderr, flush=True))
        print(f"{len(outcomes)} forks: " + ", ".join(
            f"{k} {v}" for k, v in Counter(outcomes.values()).items()))
        code = max(code, 1 if "model_error" in outcomes.values() else 0)
    return code


def _csv(values: list[str] | None) -> list[str]:
    """Axis values given as repeated and/or comma-separated options."""
    return [v.strip() for value in values or [] for v in value.split(",") if v.strip()]


def _selection_text(selection: dict[str, list[str]], repeats: list[str]) -> str:
    parts = [f"--{axis} {','.join(v)}" for axis, v in selection.items() if v]
    return " ".join(parts + ([f"--repeats {','.join(repeats)}"] if repeats else []))


def gated_launch(
    study: Study,
    *,
    check: bool = False,
    skip_unavailable: bool = False,
    retry: bool = True,
    retry_any: bool = False,
    retry_from: str = "last_turn",
    reference: str | Path | None = None,
    confirm_above: float = CONFIRM_ABOVE_USD,
    yes: bool = False,
    study_arg: str = "STUDY",
    ask: Any = input,
    interactive: bool | None = None,
) -> int:
    """A launch as ``adakit launch`` runs it: preflight (its table and status 2 when something
    is missing), the estimate (status 3 when it is above ``confirm_above`` and not confirmed),
    the launch, and the failure summary (status 1 when a run failed and was not retried).
    ``ask`` and ``interactive`` stand in for the terminal's prompt (tests)."""
    options = {"retry": retry, "retry_any": retry_any, "retry_from": retry_from}
    states = study_states(study, retry, retry_any)  # each run file read once for the launch
    try:
        states, report = preflight_gate(study, states, check, skip_unavailable)
    except PreflightFailed as exc:
        print(exc, file=sys.stderr)
        return 2
    if not report.ok:
        print(f"preflight: left out {len(report.left_out())} run(s) that cannot run here:\n"
              f"{report.table()}", file=sys.stderr)
        study = dataclasses.replace(study, specs=[st.spec for st in states])
    try:
        plan = make_plan(study, reference, states=states, **options)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"study {study.name}: {len(study.specs)} runs -> {study.output}")
    note = scaffold_note(study)
    if note:
        print(note)
    print(f"estimated cost of this launch: ${usd_text(plan.total_usd)}"
          + (f" (plus unpriced: {', '.join(plan.unpriced)})" if plan.unpriced else "")
          + f"; details: adakit launch {study_arg} --plan")
    unknown = plan.unknown_cost
    if (plan.total_usd > confirm_above or unknown) and not yes:
        print(plan.cost_text())  # the whole estimate before the question, not after it
    if not confirm_cost(plan.total_usd, confirm_above, yes, ask=ask, interactive=interactive,
                        unknown=unknown):
        print("nothing was launched", file=sys.stderr)
        return 3
    try:
        summary = launch(study, preflight_first=False, states=states, **options)
    except FolderLocked as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except DiskFull as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not summary.empty:
        print(summary.to_string(index=False))
    if not report.ok:
        print(f"left out {len(report.left_out())} run(s): " + "; ".join(
            f"{m.what} {m.name}: {m.problem}" for m in report.missing if m.runs))
    failed = summary.attrs.get("failed") or []
    if failed:
        print(failure_summary(failed, study_arg), file=sys.stderr)
        return 1
    return 0


def register_cli(sub: Any) -> None:
    """``adakit launch STUDY.yaml``."""
    p = sub.add_parser(
        "launch",
        help="launch (or resume, or retry) every run of a study file",
        epilog="exit status: 0 every launched run finished; 1 some run failed and was not "
        "retried (the summary says why and what fixes it); 2 preflight found something "
        "missing or the study file is wrong (nothing launched or recorded); 3 the estimate is "
        "above --confirm-above and was not confirmed (nothing launched)",
    )
    p.add_argument("study", help="study YAML (a path, or a name under studies/)")
    p.add_argument("--output", help="override the study's output folder")
    p.add_argument("--cache-mode", choices=["use", "replay", "refresh", "off"], help="response cache mode")
    p.add_argument("--concurrency", type=int, help="parallel runs")
    p.add_argument("--max-runs", type=int, help="launch only the first N runs")
    for axis, example in (("models", "qwen2.5-coder-1.5b"), ("worlds", "flask,requests"),
                          ("tasks", "risk_review"), ("conditions", "coach_judge")):
        p.add_argument(f"--{axis}", action="append", metavar="A,B",
                       help=f"launch only the study's runs with these {axis} (e.g. {example}); "
                       "the output folder keeps the whole study")
    p.add_argument("--repeats", action="append", metavar="0,1",
                   help="launch only these repeat indices of each cell")
    p.add_argument("--list", action="store_true", help="list the run ids and exit")
    p.add_argument("--plan", action="store_true",
                   help="print the matrix, what is finished / to resume / to retry / to run, and "
                   "the estimated tokens and USD; launch nothing")
    p.add_argument("--reference", metavar="FOLDER",
                   help="corpus whose measured prompt and reply sizes the estimate uses "
                   f"(default {config.REFERENCE_RUNS.relative_to(config.ROOT)} when it exists)")
    p.add_argument("--check", action="store_true",
                   help="preflight also sends each endpoint model one minimal request (a few tokens)")
    p.add_argument("--skip-unavailable", action="store_true",
                   help="launch what can run here and list what was left out")
    p.add_argument("--no-retry", action="store_true",
                   help="leave runs that a model failure ended as they are")
    p.add_argument("--retry-any", action="store_true",
                   help="also re-run runs ended by a model failure that is not retryable "
                   "(e.g. a refused request, after you fixed the registry entry)")
    p.add_argument("--retry-from", choices=RETRY_FROM, default="last_turn",
                   help="a retried run resumes after its last good turn (default) or starts again")
    p.add_argument("--confirm-above", type=float, default=CONFIRM_ABOVE_USD, metavar="USD",
                   help=f"ask before a launch estimated above this (default {CONFIRM_ABOVE_USD:g})")
    p.add_argument("--yes", action="store_true", help="launch whatever the estimate")
    p.set_defaults(func=_cmd_launch)
