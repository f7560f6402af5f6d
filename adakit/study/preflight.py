"""Preflight: before a study launches, check every model, world and judge it needs.

A model needs its registry entry; an endpoint model its key variable set (not when the
response cache replays: then no call leaves the machine); the embedded model its weights and
server (``adakit.llm.models.local_model_available``). With ``check=True`` every endpoint model is
also sent one minimal uncached request (one try, a one-token reply): a few tokens each, which
is why it is a flag. A world needs to be fetched or fetchable: one not on disk is fetched now,
as the launch would do first. The judges of the study's ``judge`` block are checked like
models (the judge stage after the launch needs them).

Only the runs handed in are considered: a relaunch whose runs are all finished needs no key.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from adakit.study.retry import fix_for
from adakit.study.spec import RunSpec, Study

#: The message of the minimal request sent by ``check``.
PING = [{"role": "user", "content": "Reply with one word: ready"}]
PING_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Missing:
    """One thing a study needs that is not there: what and which, why, and the fix."""

    what: str  # "model", "world" or "judge"
    name: str
    problem: str
    fix: str
    runs: tuple[str, ...] = ()  # the run ids that need it (none: the judge stage)

    @property
    def needed_by(self) -> str:
        return f"{len(self.runs)} runs" if self.runs else "the judge stage"


@dataclass
class Preflight:
    """What preflight found: the missing pieces and one line per piece that is fine."""

    missing: list[Missing] = field(default_factory=list)
    fine: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missing

    def left_out(self) -> set[str]:
        """Run ids that cannot run here."""
        return {run for m in self.missing for run in m.runs}

    def table(self) -> str:
        """One table of what is missing and why, with the fix."""
        rows = [("WHAT", "NAME", "NEEDED BY", "MISSING", "FIX")]
        rows += [(m.what, m.name, m.needed_by, m.problem, m.fix) for m in self.missing]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4]
            for r in rows
        ]
        if any(m.problem.endswith(" is not set") for m in self.missing):
            lines.append("(keys are read from the environment at call time and never written; "
                         "--cache-mode replay answers from the response cache without keys)")
        return "\n".join(lines)


def _first_sentence(text: str, limit: int = 240) -> str:
    head = text.split(". ")[0].strip().rstrip(".")
    return head if len(head) <= limit else head[: limit - 1] + "…"


def ping(spec: Any) -> tuple[str, str] | None:
    """Send ``spec``'s endpoint one minimal request; (problem, fix) when it does not answer."""
    from adakit.llm.models import ModelError, OpenAIBackend, RetryPolicy

    quick = dataclasses.replace(spec, timeout_s=min(spec.timeout_s, PING_TIMEOUT_S))
    backend = OpenAIBackend(quick, None, retry=RetryPolicy(attempts=1, rate_limit_attempts=1),
                            limiter=None)
    try:
        backend.complete(PING, max_tokens=1)
    except ModelError as exc:
        text = str(exc)
        if exc.kind == "gave_up" and "HTTP 429" in text:
            return None  # it answers; it is busy right now
        last = text.split("last error: ", 1)[-1]
        return f"{spec.base_url} does not answer: {_first_sentence(last, 160)}", fix_for(exc.kind, spec)
    return None


def check_model(name: str, registry: dict[str, Any], cache_mode: str = "use",
                call: bool = False) -> tuple[str, str] | None:
    """(problem, fix) when the model ``name`` cannot be used here, else None."""
    from adakit.llm.models import local_model_available

    if name.startswith("baseline-"):
        from adakit.apparatus.baselines import baseline_spec

        try:
            baseline_spec(name)
        except KeyError as exc:
            return str(exc.args[0]), "use a baseline the error names"
        return None
    spec = registry.get(name)
    if spec is None:
        return ("not in the model registry",
                "add it to a YAML file named by ADAKIT_MODELS (`adakit models list` shows the known ones)")
    if spec.kind == "local":
        if cache_mode == "replay":  # a replay never starts the server
            return None
        ok, why = local_model_available(spec)
        return None if ok else (_first_sentence(why), fix_for("local", spec))
    if spec.kind != "llm" or cache_mode == "replay":
        return None
    if spec.key_is_set is False:
        return f"{spec.api_key_env} is not set", f"set {spec.api_key_env}"
    if call:
        return ping(spec)
    return None


def check_world(name: str, fetch: bool = True) -> tuple[str, str] | None:
    """(problem, fix) when the world ``name`` is neither on disk nor fetchable, else None."""
    from adakit.apparatus import world as worlds

    manifest = worlds.load_manifest()
    if name not in manifest:
        return "not in the worlds manifest", f"use one of: {', '.join(manifest)}"
    if manifest[name].is_fetched() or not fetch:
        return None
    try:
        worlds.fetch_world(name, progress=False, manifest=manifest)
    except worlds.WorldUnavailable as exc:
        # git's own words, without the URL it repeats: "(git: fatal: ... 'URL': WHY)" -> "(WHY)"
        reason = re.sub(r"\(git: (?:[^)]*': )?(?:fatal: )?([^)]*)\)", r"(\1)", exc.reason)
        return (_first_sentence(reason),
                f"fetch it where its source is reachable (`adakit worlds fetch {name}`), "
                "or leave it out with --skip-unavailable")
    except worlds.WorldFetchError as exc:
        return _first_sentence(str(exc)), "check its entry in adakit/apparatus/worlds.yaml"
    return None


def needs(study: Study, spec: RunSpec) -> list[str]:
    """The models one run calls: its own, the hint model, the coach (coach-judge runs)."""
    from adakit.apparatus.conditions import get_condition

    out = [spec.model]
    hint = study.hint_model or (None if spec.model.startswith("baseline-") else spec.model)
    if hint:
        out.append(hint)
    if get_condition(spec.condition).coach:
        out.append(study.coach_model or "smollm2-135m")
    return list(dict.fromkeys(out))


def preflight(study: Study, specs: Iterable[RunSpec] | None = None, check: bool = False,
              fetch: bool = True, judges: bool = True) -> Preflight:
    """Check what the runs ``specs`` (default: all) of ``study`` and its judges need."""
    from adakit.llm.models import load_registry
    from adakit.study.plan import judges_needed

    specs = list(study.specs if specs is None else specs)
    registry = load_registry()
    by_model: dict[str, list[str]] = {}
    by_world: dict[str, list[str]] = {}
    for s in specs:
        for m in needs(study, s):
            by_model.setdefault(m, []).append(s.run_id)
        by_world.setdefault(s.world, []).append(s.run_id)
    report = Preflight()
    for name, runs in by_model.items():
        found = check_model(name, registry, study.cache_mode, call=check)
        if found:
            report.missing.append(Missing("model", name, found[0], found[1], tuple(runs)))
        else:
            report.fine.append(("model", name, f"{len(runs)} runs"))
    for name, runs in by_world.items():
        found = check_world(name, fetch=fetch)
        if found:
            report.missing.append(Missing("world", name, found[0], found[1], tuple(runs)))
        else:
            report.fine.append(("world", name, f"{len(runs)} runs"))
    if judges:
        judge_cache = (study.raw.get("judge") or {}).get("cache_mode") or study.cache_mode
        for name in judges_needed(study):
            if name in by_model:  # already checked as a model of the runs
                problem = next((m for m in report.missing if m.what == "model" and m.name == name), None)
                found = (problem.problem, problem.fix) if problem else None
            else:
                found = check_model(name, registry, judge_cache, call=check)
            if found:
                report.missing.append(Missing("judge", name, found[0], found[1]))
            else:
                report.fine.append(("judge", name, "the judge stage"))
    return report
