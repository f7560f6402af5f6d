"""Deterministic synthetic trajectories in the real recording schema, for tests and benchmarks.

Synthetic runs are *not* agent behaviour: they come from a small stochastic policy with
per-model profiles (run length, pacing, thinking volume, tool propensities, read sizes),
per-task tool emphasis and per-condition effects (budget pressure shortens runs and raises
per-turn time and thinking; the coach condition adds coach decisions). Every number is drawn
from a seeded generator, so the same arguments always give the same corpus. Models are named
``synth-A`` .. ``synth-D`` and recorded with ``kind="baseline"`` and the study ``synthetic``,
so a synthetic corpus can never be mistaken for a real one.

- :func:`synthetic_run` builds one run (Header, Turns, End) as a :class:`~adakit.record.RunFile`;
  ``tools`` may script it exactly (hand-built test trajectories) or leave it to the policy.
- :func:`write_synthetic_corpus` writes a varied models x conditions x tasks x worlds corpus of
  JSONL files with :class:`~adakit.record.RunWriter` (read back with ``load_corpus``).
- :func:`synthetic_tables` builds the same corpus's tidy tables directly, without files or
  validation (fast enough for the 10,000-run lens benchmark); it equals ``load_corpus`` of
  :func:`write_synthetic_corpus` with the same arguments.
"""

from __future__ import annotations

import functools
import itertools
import random
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from adakit import __version__
from adakit.record import (
    ABBR_TOOL,
    ADA_AGENT,
    READ_COLUMNS,
    RUN_COLUMNS,
    TOOL_ABBR,
    TOOL_ORDER,
    TURN_COLUMNS,
    ConditionInfo,
    Corpus,
    End,
    ForkInfo,
    Header,
    Injection,
    ModelCall,
    ModelInfo,
    ParseError,
    RunFile,
    RunWriter,
    TaskInfo,
    ToolCall,
    ToolMetrics,
    Turn,
    WorldInfo,
    prefix_digest,
)

MODELS: tuple[str, ...] = ("synth-A", "synth-B", "synth-C", "synth-D")
WORLDS: tuple[str, ...] = (
    "flask", "requests", "scikit-learn", "graphiti", "tensorzero", "prompt-optimizer",
)
TASKS: tuple[str, ...] = ("architecture_analysis", "asr_inference", "feature_tracing", "risk_review")
CONDITIONS: tuple[str, ...] = ("natural", "prior_suppression", "budget_pressure", "combined")
#: 2026-01-01 00:00 UTC; synthetic run i starts i hours later.
BASE_TIME = 1767225600.0
DEFAULT_TURN_BOUND = 100
BUDGET = 12

# ----------------------------------------------------------------------------- profiles


@dataclass(frozen=True)
class Profile:
    """How one synthetic model behaves (all numbers are means of noisy draws)."""

    turns: float  # run length under the natural condition
    latency: float  # seconds per turn
    thinking: float  # thinking characters per turn
    budget_latency: float  # per-turn time multiplier under a budget
    budget_thinking: float  # thinking multiplier under a budget
    weights: Mapping[str, float]  # tool propensities
    repeat: Mapping[str, float]  # boost for repeating the previous tool
    pkr_sizes: tuple[float, float, float]  # P(<20), P(20-50), P(>50 lines)
    contiguous: float  # P(a PKR continues the previous range in the same file)
    stay: float  # P(staying in the current file)
    conclusion_chars: int
    error_rate: float  # per-turn rate of tool errors, malformed and unknown-tool turns
    pacing_gaps: float  # P(a long pause) under a budget


PROFILES: dict[str, Profile] = {
    # evenly spread policy, strongest per-turn slow-down under budget (like the paper's GPT-4.1)
    "synth-A": Profile(
        turns=30, latency=5.0, thinking=160, budget_latency=3.0, budget_thinking=2.2,
        weights={"OVW": 0.26, "PKR": 0.40, "EXP": 0.14, "MEM": 0.10, "BKM": 0.05,
                 "HNT": 0.03, "CON": 0.02},
        repeat={"PKR": 1.3, "OVW": 1.1},
        pkr_sizes=(0.3, 0.4, 0.3), contiguous=0.4, stay=0.6, conclusion_chars=700,
        error_rate=0.04, pacing_gaps=0.10,
    ),
    # compact close reader: long contiguous PKR streaks in few files
    "synth-B": Profile(
        turns=20, latency=4.0, thinking=90, budget_latency=1.1, budget_thinking=1.1,
        weights={"OVW": 0.18, "PKR": 0.55, "EXP": 0.10, "MEM": 0.08, "BKM": 0.05,
                 "HNT": 0.02, "CON": 0.02},
        repeat={"PKR": 1.8},
        pkr_sizes=(0.1, 0.35, 0.55), contiguous=0.7, stay=0.8, conclusion_chars=650,
        error_rate=0.02, pacing_gaps=0.0,
    ),
    # orientation-heavy: long runs of structural overviews across many files
    "synth-C": Profile(
        turns=40, latency=8.0, thinking=420, budget_latency=1.6, budget_thinking=1.4,
        weights={"OVW": 0.45, "PKR": 0.28, "EXP": 0.12, "MEM": 0.07, "BKM": 0.03,
                 "HNT": 0.03, "CON": 0.02},
        repeat={"OVW": 1.9},
        pkr_sizes=(0.3, 0.4, 0.3), contiguous=0.3, stay=0.4, conclusion_chars=1900,
        error_rate=0.05, pacing_gaps=0.03,
    ),
    # skimmer: many short peeks that jump between files
    "synth-D": Profile(
        turns=28, latency=6.5, thinking=320, budget_latency=1.5, budget_thinking=1.4,
        weights={"OVW": 0.22, "PKR": 0.48, "EXP": 0.10, "MEM": 0.09, "BKM": 0.04,
                 "HNT": 0.04, "CON": 0.03},
        repeat={"PKR": 1.2},
        pkr_sizes=(0.6, 0.3, 0.1), contiguous=0.15, stay=0.35, conclusion_chars=2100,
        error_rate=0.06, pacing_gaps=0.03,
    ),
}

#: Tool emphasis per task family, matched by a key word in the family id.
TASK_MODIFIERS: dict[str, dict[str, float]] = {
    "arch": {"OVW": 1.8, "MEM": 1.2},
    "asr": {"MEM": 1.5, "HNT": 1.5, "EXP": 1.2},
    "feature": {"EXP": 2.2, "BKM": 1.3},
    "risk": {"PKR": 1.3, "BKM": 2.0},
}


def profile_for(model: str) -> Profile:
    """The profile of a synthetic model; unknown names map stably onto one of the four."""
    if model in PROFILES:
        return PROFILES[model]
    keys = sorted(PROFILES)
    return PROFILES[keys[zlib.crc32(model.encode()) % len(keys)]]


def _task_mods(task: str) -> dict[str, float]:
    for key, mods in TASK_MODIFIERS.items():
        if key in task.lower():
            return mods
    return {}


@dataclass(frozen=True)
class _Cond:
    budget: int | None
    suppression: bool
    coach: bool


def _condition(name: str) -> _Cond:
    low = name.lower()
    budget = BUDGET if ("budget" in low or low == "combined") else None
    return _Cond(budget=budget, suppression=("prior" in low or low == "combined"),
                 coach="coach" in low)


# ----------------------------------------------------------------------------- worlds

_LAYOUTS: dict[str, tuple[str, str, tuple[str, ...], int]] = {
    "flask": ("src/flask", ".py", ("", "json", "sansio"), 24),
    "requests": ("src/requests", ".py", ("",), 18),
    "scikit-learn": ("sklearn", ".py",
                     ("tree", "linear_model", "ensemble", "utils", "metrics", "model_selection"),
                     60),
    "graphiti": ("graphiti_core", ".py", ("", "search", "utils", "llm_client", "models"), 40),
    "tensorzero": ("tensorzero", ".py", ("", "types", "internal"), 30),
    "prompt-optimizer": ("packages/core/src", ".ts", ("services", "utils", "types", "config"), 45),
}
_STEMS = (
    "app", "config", "core", "utils", "helpers", "base", "models", "session", "routing", "views",
    "io", "errors", "types", "cli", "client", "server", "cache", "graph", "search", "schema",
    "validation", "metrics", "pipeline", "stream", "context", "registry", "hooks", "adapters",
    "auth", "cookies", "templating", "signals", "wrappers", "blueprints", "testing", "encoding",
    "splitter", "criterion", "estimator", "fixes", "parallel", "storage", "driver", "prompts",
    "gateway", "inference", "optimizer", "history", "manager", "template",
)


def world_files(world: str) -> dict[str, int]:
    """A synthetic world's files and their line counts (deterministic per world name)."""
    return dict(_world_files(world))


@functools.lru_cache(maxsize=256)
def _world_files(world: str) -> tuple[tuple[str, int], ...]:
    root, ext, subdirs, n_files = _LAYOUTS.get(world, (f"src/{world}", ".py", ("", "core"), 20))
    rng = random.Random(f"world/{world}")
    files: dict[str, int] = {}
    stems = list(_STEMS)
    while len(files) < n_files:
        sub = subdirs[len(files) % len(subdirs)]
        stem = rng.choice(stems)
        name = f"{stem}{ext}" if rng.random() < 0.7 else f"_{stem}{ext}"
        rel = "/".join(p for p in (root, sub, name) if p)
        if rel in files:
            rel = "/".join(p for p in (root, sub, f"{stem}_{len(files)}{ext}") if p)
        files[rel] = max(12, min(3000, int(rng.lognormvariate(5.6, 0.8))))
    return tuple(files.items())


@functools.lru_cache(maxsize=1024)
def _file_weights(files: tuple[str, ...], world: str, task: str) -> list[float]:
    """Zipf-like attention over files: a few anchors per world get most visits."""
    rng = random.Random(f"anchors/{world}")
    ranks = list(range(len(files)))
    rng.shuffle(ranks)
    weights = [1.0 / (r + 1) ** 0.9 for r in ranks]
    trng = random.Random(f"anchors/{world}/{task}")
    for i in trng.sample(range(len(files)), k=min(3, len(files))):
        weights[i] *= 3.0
    return weights


# ----------------------------------------------------------------------------- text

_FILLER = (
    "I should look at how the request object flows into the dispatcher before reading the "
    "error handlers; the overview listed the registry and the session class, and the next "
    "step is to confirm which module owns the state and where it is mutated. "
)


def _text(n: int) -> str:
    """Deterministic filler text of exactly ``n`` characters."""
    if n <= 0:
        return ""
    reps = n // len(_FILLER) + 1
    return (_FILLER * reps)[:n]


def _xml(name: str, params: Mapping[str, Any]) -> str:
    inner = "".join(f"<{k}>{v}</{k}>" for k, v in params.items())
    return f"<{name}>{inner}</{name}>"


# ----------------------------------------------------------------------------- generation


@dataclass
class _T:
    """One generated turn, schema-neutral (rendered to a Turn record or a table row)."""

    turn: int
    tool: str | None
    call_name: str | None
    params: dict[str, Any]
    action: str | None = None
    file: str | None = None
    ranges: list[tuple[int, int]] = field(default_factory=list)
    lines_viewed: int = 0
    structural: bool = False
    block: str | None = None
    symbol: str | None = None
    result_count: int | None = None
    error_type: str | None = None
    parse_error: str | None = None
    finalize: bool | None = None
    confidence: str | None = None
    thinking: str | int = 0
    raw_text: str = ""
    started_at: float = 0.0
    ended_at: float = 0.0
    latency_s: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    coach: dict[str, Any] | None = None
    injected: list[tuple[str, str]] = field(default_factory=list)
    hint_latency: float | None = None

    @property
    def thinking_chars(self) -> int:
        return self.thinking if isinstance(self.thinking, int) else len(self.thinking)


@dataclass
class _Run:
    run_id: str
    model: str
    world: str
    task: str
    condition: str
    seed: int
    repeat: int
    turn_bound: int
    started_at: float
    turns: list[_T]
    reason: str | None  # None: unfinished (no end record)
    ended_at: float
    conclusion: str | None
    target: str | None


_EXP_ACTIONS = ("definition", "references", "next")
_EXP_CALL = {"definition": "go_to_definition", "references": "find_all_references",
             "next": "go_to_next_block"}
_SYMBOLS = ("Flask", "Session", "dispatch_request", "fit", "predict", "Router", "resolve",
            "build_graph", "stream_inference", "optimize", "Config", "handle_error", "encode")
_CONFIDENCE = ("high", "medium", "low")
_MALFORMED = ("no_tool", "multiple_tools", "bad_value", "missing_param")
_UNKNOWN = ("run_shell", "search_codebase", "read_file")


def _pick(rng: random.Random, weights: Mapping[str, float]) -> str:
    keys = list(weights)
    return rng.choices(keys, weights=[weights[k] for k in keys])[0]


def _clamp_range(a: int, length: int, loc: int) -> tuple[int, int]:
    a = max(1, min(a, loc))
    b = min(loc, a + length - 1)
    return a, b


def _normalize_item(item: Any) -> dict[str, Any]:
    if isinstance(item, str):
        return {"tool": item}
    if isinstance(item, Mapping):
        if "tool" not in item:
            raise ValueError(f"a scripted turn needs a 'tool' key: {item!r}")
        return dict(item)
    raise TypeError(f"a scripted turn is a tool abbreviation or a dict, got {type(item).__name__}")


_ITEM_KEYS = {
    "tool", "file", "ranges", "action", "confidence", "finalize", "error", "symbol",
    "result_count", "structural", "block", "thinking", "output", "duration", "gap", "coach",
    "lines_viewed",
}


@dataclass(frozen=True)
class _Policy:
    """What drives one synthetic run: its seeded generator, the model's profile, the
    condition's effects, the world's files with their attention weights, the tool weights."""

    rng: random.Random
    prof: Profile
    cond: _Cond
    files: dict[str, int]
    names: list[str]
    fweights: list[float]
    weights: dict[str, float]


@dataclass(frozen=True)
class _Temperament:
    """A run's own pace and thinking volume (within-condition variance), and the
    condition's multipliers of both."""

    pace: float
    think_scale: float
    lat_mult: float
    think_mult: float


@dataclass
class _Walk:
    """Where a run stands between turns: the current file, the end of the last range read,
    the last tool and the clock."""

    clock: float
    cur_file: str | None = None
    last_end: int | None = None
    prev: str | None = None


def _generate(
    run_id: str,
    model: str,
    world: str,
    task: str,
    condition: str,
    seed: int,
    tools: Iterable[Any] | None,
    files: Mapping[str, int] | None,
    turn_bound: int,
    started_at: float,
    repeat: int,
    reason: str | None,
    finished: bool,
    length_scale: float = 1.0,
) -> _Run:
    """One synthetic run, drawn turn by turn from its policy (or scripted by ``tools``)."""
    pol = _policy(run_id, model, world, task, condition, seed, files)
    scripted = _script(run_id, tools, turn_bound)
    n_target = len(scripted) if scripted is not None else _run_length(pol, turn_bound, length_scale)
    mood = _temperament(pol)
    walk = _Walk(clock=started_at + 0.05)
    out: list[_T] = []
    for i in range(1, n_target + 1):
        item = scripted[i - 1] if scripted is not None else None
        # the policy's last turn finalizes, unless the run is cut off by the turn bound
        last = i == n_target and (scripted is not None or n_target < turn_bound)
        kind = _turn_kind(pol, item, i, last, walk.prev)
        t = _drawn_turn(pol, kind, item, i, last, walk)
        _advance(walk, t)
        _oversee(pol, t, i, item)
        _pace(pol, t, kind, item, mood, walk)
        out.append(t)
    if not out:
        raise ValueError(f"synthetic run {run_id!r} has no turns")
    end_reason, conclusion = _ending(pol, out, reason, finished)
    return _Run(run_id=run_id, model=model, world=world, task=task, condition=condition,
                seed=seed, repeat=repeat, turn_bound=turn_bound, started_at=started_at,
                turns=out, reason=end_reason, ended_at=round(walk.clock + 0.01, 3),
                conclusion=conclusion,
                target="synthetic feature target" if "feature" in task else None)


def _policy(
    run_id: str, model: str, world: str, task: str, condition: str, seed: int,
    files: Mapping[str, int] | None,
) -> _Policy:
    """The policy of one run; ``files`` defaults to the synthetic world's."""
    files = dict(files) if files is not None else dict(_world_files(world))
    if not files:
        raise ValueError("a synthetic run needs at least one file")
    for rel, loc in files.items():
        if int(loc) < 1:
            raise ValueError(f"file {rel!r} needs a positive line count, got {loc}")
    prof = profile_for(model)
    cond = _condition(condition)
    weights = {t: prof.weights[t] * _task_mods(task).get(t, 1.0) for t in TOOL_ORDER}
    if cond.suppression:
        weights["MEM"] *= 1.3
        weights["BKM"] *= 1.2
    names = list(files)
    return _Policy(rng=random.Random(f"run/{seed}/{run_id}"), prof=prof, cond=cond, files=files,
                   names=names, fweights=_file_weights(tuple(names), world, task), weights=weights)


def _script(run_id: str, tools: Iterable[Any] | None, turn_bound: int) -> list[dict[str, Any]] | None:
    """The scripted turns of a hand-built run, checked (None: the policy draws them)."""
    if tools is None:
        return None
    scripted = [_normalize_item(x) for x in itertools.islice(tools, turn_bound + 1)]
    if len(scripted) > turn_bound:
        raise ValueError(f"scripted run {run_id!r} is longer than its turn bound {turn_bound}")
    for k, item in enumerate(scripted, 1):
        unknown = set(item) - _ITEM_KEYS
        if unknown:
            raise ValueError(f"unknown keys in scripted turn {k}: {sorted(unknown)}")
    return scripted


def _run_length(pol: _Policy, turn_bound: int, length_scale: float) -> int:
    """How many turns the policy's run takes: about the budget under one, else the
    profile's length, never more than the turn bound."""
    rng, cond = pol.rng, pol.cond
    if cond.budget is not None:
        n_target = max(4, round(length_scale * rng.gauss(cond.budget + 1, 2.5)))
    else:
        scale = length_scale * (0.95 if cond.suppression else 1.0)
        n_target = max(5, round(pol.prof.turns * scale * rng.lognormvariate(0, 0.35)))
    return min(n_target, turn_bound)


def _temperament(pol: _Policy) -> _Temperament:
    """The run's temperament, drawn once per run."""
    pace = pol.rng.lognormvariate(0, 0.2)
    think_scale = pol.rng.lognormvariate(0, 0.25)
    budget = pol.cond.budget is not None
    return _Temperament(pace=pace, think_scale=think_scale,
                        lat_mult=pol.prof.budget_latency if budget else 1.0,
                        think_mult=pol.prof.budget_thinking if budget else 1.0)


def _turn_kind(pol: _Policy, item: Mapping[str, Any] | None, i: int, last: bool,
               prev: str | None) -> str:
    """Which tool (or failure: ``malformed``, ``unknown``) turn ``i`` makes."""
    rng, prof = pol.rng, pol.prof
    if item is not None:
        kind = str(item["tool"])
    else:
        r = rng.random()
        if last:
            kind = "CON"
        elif r < prof.error_rate * 0.35:
            kind = "malformed"
        elif r < prof.error_rate * 0.5:
            kind = "unknown"
        else:
            w = dict(pol.weights)
            if prev in prof.repeat:
                w[prev] *= prof.repeat[prev]
            if i == 1:
                w["OVW"] *= 4.0
                w["CON"] = 0.0
            kind = _pick(rng, w)
    if kind not in ABBR_TOOL and kind not in ("malformed", "unknown"):
        raise ValueError(
            f"unknown tool {kind!r}; use one of {TOOL_ORDER} or 'malformed' / 'unknown'"
        )
    return kind


def _drawn_turn(pol: _Policy, kind: str, item: Mapping[str, Any] | None, i: int, last: bool,
                walk: _Walk) -> _T:
    """Turn ``i``'s call, target and result (scripted values replace drawn ones)."""
    rng = pol.rng
    t = _T(turn=i, tool=None, call_name=None, params={})
    if kind == "malformed":
        t.parse_error = rng.choice(_MALFORMED)
        t.error_type = "malformed"
    elif kind == "unknown":
        t.call_name = rng.choice(_UNKNOWN)
        t.params = {"query": "where is the entry point"}
        t.parse_error = "unknown_tool"
        t.error_type = "unknown_tool"
    else:
        t.tool = kind
        t.call_name = ABBR_TOOL[kind]
        _fill_tool(t, rng, pol.prof, pol.names, pol.files, pol.fweights, walk.cur_file,
                   walk.last_end)
        if item is None and kind in ("PKR", "OVW", "EXP") and rng.random() < pol.prof.error_rate * 0.5:
            t.error_type = "tool_error"
    if kind == "CON":
        t.finalize = bool(item.get("finalize", last)) if item is not None else last
        t.params["proceed_to_finalize"] = str(t.finalize).lower()
    if item is not None:
        _apply_item(t, item, pol.files)
    if t.error_type == "tool_error":
        t.ranges, t.lines_viewed, t.result_count = [], 0, None
    return t


def _advance(walk: _Walk, t: _T) -> None:
    """Move the walk on past turn ``t``: a successful call on a file makes it the current
    one (and its last range the place to continue from)."""
    if t.error_type is None and t.file is not None:
        walk.cur_file = t.file
        if t.ranges:
            walk.last_end = t.ranges[-1][1]
        elif t.tool == "OVW":
            walk.last_end = None
    if t.tool:
        walk.prev = t.tool


def _oversee(pol: _Policy, t: _T, i: int, item: Mapping[str, Any] | None) -> None:
    """The coach's decision (coach conditions) and the budget reminders of turn ``i``."""
    rng, cond = pol.rng, pol.cond
    if cond.coach and i >= 2:
        if t.tool == "CON" and not t.finalize:
            decision = "REJECT" if rng.random() < 0.5 else "APPROVE"
        elif i % 4 == 0:
            decision = "HINT" if rng.random() < 0.4 else "APPROVE"
        else:
            decision = None
        if decision:
            t.coach = {"decision": decision}
            if decision != "APPROVE":
                t.injected.append(("coach", f"Coach ({decision.lower()}): revisit the "
                                            "evidence for your last claim before moving on."))
    if cond.budget is not None and (cond.budget - i) in (cond.budget // 2, 3, 1):
        t.injected.append(("reminder", f"Budget: {cond.budget - i} of {cond.budget} "
                                       "turns left."))
    if item is not None and "coach" in item:
        t.coach = {"decision": str(item["coach"])} if item["coach"] else None


def _pace(pol: _Policy, t: _T, kind: str, item: Mapping[str, Any] | None, mood: _Temperament,
          walk: _Walk) -> None:
    """Turn ``t``'s effort and timing (thinking, reply text, latency, tokens); moves the
    walk's clock past it."""
    rng, prof = pol.rng, pol.prof
    thinking_chars = max(0, int(prof.thinking * mood.think_mult * mood.think_scale
                                * rng.lognormvariate(0, 0.5)))
    latency = prof.latency * mood.lat_mult * mood.pace * rng.lognormvariate(0, 0.45)
    if pol.cond.budget is not None and rng.random() < prof.pacing_gaps:
        latency *= rng.uniform(3.0, 6.0)  # a long pause without more visible output
        prose = int(40 + rng.lognormvariate(3.5, 0.6))
    else:
        prose = int(30 + 12 * latency * rng.lognormvariate(0, 0.6))
    tool_s = rng.uniform(0.002, 0.03) if kind != "OVW" else rng.uniform(0.02, 0.2)
    if kind == "HNT":
        t.hint_latency = round(rng.uniform(1.5, 4.0), 3)
        tool_s += t.hint_latency
    gap = rng.uniform(0.005, 0.02)
    if item is not None:
        if "thinking" in item:
            thinking_chars = item["thinking"]
        if "duration" in item:
            latency, tool_s = float(item["duration"]), 0.0
        gap = float(item.get("gap", gap))
    t.thinking = thinking_chars
    if item is not None and "output" in item:
        t.raw_text = str(item["output"])
    elif kind == "malformed":
        t.raw_text = _text(prose)
    else:
        t.raw_text = _text(prose) + "\n" + _xml(t.call_name or "", t.params)
    walk.clock = round(walk.clock + gap, 3)
    t.started_at = walk.clock
    t.latency_s = round(latency, 3)
    walk.clock = round(walk.clock + latency + tool_s, 3)
    t.ended_at = walk.clock
    t.tokens_in = 2500 + 350 * t.turn + 7 * t.thinking_chars // 4
    t.tokens_out = (t.thinking_chars + len(t.raw_text)) // 4


def _ending(pol: _Policy, out: list[_T], reason: str | None,
            finished: bool) -> tuple[str | None, str | None]:
    """The run's end reason (None: unfinished) and its conclusion (only when it finalized)."""
    if not finished:
        end_reason = None
    elif reason is not None:
        end_reason = reason
    else:
        end_reason = "finalize" if out[-1].tool == "CON" and out[-1].finalize else "turn_bound"
    conclusion = None
    if end_reason == "finalize":
        conclusion = _text(max(40, int(pol.prof.conclusion_chars * pol.rng.lognormvariate(0, 0.3))))
    return end_reason, conclusion


def _fill_tool(
    t: _T,
    rng: random.Random,
    prof: Profile,
    names: list[str],
    files: Mapping[str, int],
    fweights: list[float],
    cur_file: str | None,
    last_end: int | None,
) -> None:
    """Draw the target, range and result of a well-formed tool call."""

    def new_file() -> str:
        return rng.choices(names, weights=fweights)[0]

    kind = t.tool
    if kind == "PKR":
        same = cur_file is not None and rng.random() < prof.stay
        f = cur_file if same and cur_file is not None else new_file()
        size = rng.choices((0, 1, 2), weights=prof.pkr_sizes)[0]
        length = (rng.randint(5, 19), rng.randint(20, 50), rng.randint(51, 160))[size]
        loc = files[f]
        if same and last_end is not None and last_end < loc and rng.random() < prof.contiguous:
            start = last_end + 1
        else:
            start = rng.randint(1, max(1, loc - length + 1))
        a, b = _clamp_range(start, length, loc)
        t.file, t.ranges, t.lines_viewed = f, [(a, b)], b - a + 1
        t.params = {"file_path": f, "start_line": a, "end_line": b}
    elif kind == "OVW":
        f = cur_file if cur_file is not None and rng.random() < 0.3 else new_file()
        t.file, t.structural = f, True
        t.lines_viewed = max(3, files[f] // 25)
        t.result_count = t.lines_viewed
        t.params = {"file_path": f}
        if rng.random() < 0.2:
            t.block = rng.choice(_SYMBOLS)
            t.params["logical_block_name"] = t.block
    elif kind == "EXP":
        action = rng.choices(_EXP_ACTIONS, weights=(0.45, 0.3, 0.25))[0]
        t.action = action
        t.symbol = rng.choice(_SYMBOLS) if action != "next" else None
        here = cur_file if cur_file is not None else new_file()
        t.params = {"action_type": _EXP_CALL[action], "current_file_path": here,
                    "current_line_number": last_end or 1}
        if t.symbol:
            t.params["symbol_name"] = t.symbol
        if action == "definition":
            if rng.random() < 0.1:
                t.file, t.result_count = here, 0
            else:
                f = new_file()
                a, b = _clamp_range(rng.randint(1, files[f]), rng.randint(5, 60), files[f])
                t.file, t.ranges, t.lines_viewed, t.result_count = f, [(a, b)], b - a + 1, 1
        elif action == "references":
            t.file, t.result_count = here, rng.randint(0, 20)
            t.lines_viewed = t.result_count
        else:
            loc = files[here]
            start = (last_end or 0) + 1
            if start > loc:
                start = 1
            a, b = _clamp_range(start, rng.randint(10, 40), loc)
            t.file, t.ranges, t.lines_viewed, t.result_count = here, [(a, b)], b - a + 1, 1
    elif kind == "MEM":
        r = rng.random()
        t.confidence = None if r < 0.15 else rng.choices(_CONFIDENCE, weights=(0.5, 0.35, 0.15))[0]
        t.params = {"memory_title": "data flow", "memory_content": "synthetic memory"}
        if t.confidence:
            t.params["confidence_level"] = t.confidence
    elif kind == "BKM":
        f = cur_file if cur_file is not None else new_file()
        line = (last_end or 1)
        t.file = f
        t.params = {"file_path": f, "line_number": line, "note": "check this"}
    elif kind == "HNT":
        f = cur_file if cur_file is not None else new_file()
        t.file = f
        t.params = {"file_path": f, "code_range": f"{max(1, (last_end or 20) - 19)}-{last_end or 20}",
                    "description_of_confusion": "unclear control flow"}
    elif kind == "CON":
        t.params = {"content": "synthetic conclusion"}


def _apply_item(t: _T, item: Mapping[str, Any], files: Mapping[str, int]) -> None:
    """Scripted values replace drawn ones (for hand-built test trajectories)."""
    if "file" in item:
        t.file = item["file"]
    if "ranges" in item:
        t.ranges = [(int(a), int(b)) for a, b in item["ranges"]]
        for a, b in t.ranges:
            if a < 1 or b < a:
                raise ValueError(f"bad line range ({a}, {b}) in scripted turn {t.turn}")
        t.lines_viewed = sum(b - a + 1 for a, b in t.ranges)
    elif "file" in item and t.ranges:
        loc = files.get(t.file) if t.file else None
        if loc is None:  # drawn range belonged to another file: drop it
            t.ranges, t.lines_viewed = [], 0
        else:
            t.ranges = [(min(a, loc), min(b, loc)) for a, b in t.ranges]
            t.lines_viewed = sum(b - a + 1 for a, b in t.ranges)
    for key in ("action", "confidence", "symbol", "result_count", "block", "lines_viewed"):
        if key in item:
            setattr(t, key, item[key])
    if "structural" in item:
        t.structural = bool(item["structural"])
    if "finalize" in item and t.tool == "CON":
        t.finalize = bool(item["finalize"])
    if "error" in item and item["error"]:
        t.error_type = str(item["error"])
    if t.tool == "EXP" and "action" in item and "ranges" not in item:
        t.ranges, t.lines_viewed = [], 0
    _sync_params(t, item)


def _sync_params(t: _T, item: Mapping[str, Any]) -> None:
    """Make the recorded call say what the scripted overrides say (file, range, block, ...)."""
    p = t.params
    if "file" in item and t.file is not None:
        if t.tool in ("PKR", "OVW", "BKM", "HNT"):
            p["file_path"] = t.file
        elif t.tool == "EXP" and t.action != "definition":  # a definition's file is where it led
            p["current_file_path"] = t.file
    if t.tool == "PKR" and "ranges" in item and t.ranges:
        p["start_line"], p["end_line"] = t.ranges[0]
    if t.tool == "OVW" and "block" in item:
        if t.block:
            p["logical_block_name"] = t.block
        else:
            p.pop("logical_block_name", None)
    if t.tool == "EXP":
        if "action" in item and t.action in _EXP_CALL:
            p["action_type"] = _EXP_CALL[t.action]
        if "symbol" in item:
            if t.symbol:
                p["symbol_name"] = t.symbol
            else:
                p.pop("symbol_name", None)
    if t.tool == "MEM" and "confidence" in item:
        if t.confidence:
            p["confidence_level"] = t.confidence
        else:
            p.pop("confidence_level", None)


# ----------------------------------------------------------------------------- rendering


def _records(run: _Run) -> tuple[Header, list[Turn], End | None]:
    header = Header(
        run_id=run.run_id,
        study="synthetic",
        model=ModelInfo(name=run.model, kind="baseline", model_id=f"synthetic/{run.model}"),
        world=WorldInfo(name=run.world, version="synthetic", language="", source="synthetic"),
        task=TaskInfo(family=run.task, target=run.target, prompt=f"Synthetic {run.task} task."),
        condition=ConditionInfo(name=run.condition, budget=_condition(run.condition).budget),
        turn_bound=run.turn_bound,
        seed=run.seed,
        repeat=run.repeat,
        adakit_version=__version__,
        started_at=run.started_at,
    )
    turns = []
    for t in run.turns:
        # a reply naming an unknown tool is a parse error: no call is recorded (as the agent does)
        call = ToolCall(tool=t.call_name, params=t.params) \
            if t.call_name and t.parse_error is None else None
        perr = ParseError(kind=t.parse_error, message=f"synthetic {t.parse_error}") \
            if t.parse_error else None
        metrics = ToolMetrics(
            tool=t.tool, file=t.file, ranges=t.ranges, lines_viewed=t.lines_viewed,
            structural=t.structural, block=t.block, symbol=t.symbol, action=t.action,
            result_count=t.result_count, error_type=t.error_type, confidence=t.confidence,
            finalize=t.finalize,
        )
        thinking = t.thinking if isinstance(t.thinking, str) else _text(t.thinking)
        calls = [ModelCall(purpose="hint", model="synthetic-hint", latency_s=t.hint_latency)] \
            if t.hint_latency is not None else []
        turns.append(Turn(
            turn=t.turn, started_at=t.started_at, ended_at=t.ended_at, latency_s=t.latency_s,
            tokens_in=t.tokens_in, tokens_out=t.tokens_out, raw_text=t.raw_text,
            thinking=thinking, call=call, parse_error=perr, observation=_observation(t),
            metrics=metrics, injected=[Injection(source=s, text=x) for s, x in t.injected],
            coach=t.coach, model_calls=calls,
        ))
    end = None
    if run.reason is not None:
        end = End(
            reason=run.reason, ended_at=run.ended_at, conclusion=run.conclusion,
            conclusion_title="Synthetic conclusion" if run.conclusion else None,
            totals={"turns": len(run.turns),
                    "tokens_in": sum(t.tokens_in for t in run.turns),
                    "tokens_out": sum(t.tokens_out for t in run.turns)},
        )
    return header, turns, end


def _observation(t: _T) -> str:
    if t.error_type == "malformed":
        return f"Your reply could not be parsed ({t.parse_error}); call exactly one tool."
    if t.error_type == "unknown_tool":
        return f"There is no tool named {t.call_name}."
    if t.error_type == "tool_error":
        return f"{t.file}: the tool could not run on this target."
    if t.ranges:
        spans = ", ".join(f"{a}-{b}" for a, b in t.ranges)
        return f"{t.file} lines {spans} ({t.lines_viewed} lines shown)"
    if t.tool == "OVW":
        return f"Outline of {t.file}: {t.lines_viewed} entries"
    return f"{t.call_name}: done"


def synthetic_run(
    run_id: str,
    model: str = "synth-A",
    world: str = "flask",
    task: str = "architecture_analysis",
    condition: str = "natural",
    tools: Iterable[str | Mapping[str, Any]] | None = None,
    seed: int = 0,
    files: Mapping[str, int] | None = None,
    turn_bound: int = DEFAULT_TURN_BOUND,
    started_at: float = BASE_TIME,
    repeat: int = 0,
    reason: str | None = None,
    finished: bool = True,
    path: str | Path | None = None,
) -> RunFile:
    """One deterministic synthetic run as a validated :class:`RunFile` (nothing is written).

    ``tools`` scripts the run turn by turn: each item is a tool abbreviation (``"PKR"``),
    ``"malformed"``, ``"unknown"``, or a dict with ``tool`` plus any of ``file``, ``ranges``
    (list of inclusive 1-based ``(start, end)``), ``action``, ``confidence``, ``finalize``,
    ``error`` (e.g. ``"tool_error"``), ``symbol``, ``result_count``, ``structural``, ``block``,
    ``lines_viewed``, ``thinking`` (text or a character count), ``output`` (the raw reply),
    ``duration`` and ``gap`` (seconds), ``coach`` (a decision such as ``"HINT"``). Omitted
    values are drawn from the seeded policy; a list, tuple or generator works. Without
    ``tools`` the model's profile drives the whole run. ``files`` maps world-relative paths
    to line counts (default: :func:`world_files`). ``reason`` overrides the end reason
    (default: ``finalize`` when the last turn finalizes, else ``turn_bound``); ``finished=False``
    leaves the run without an end record, like a crashed launch.
    """
    run = _generate(run_id, model, world, task, condition, seed, tools, files, turn_bound,
                    started_at, repeat, reason, finished)
    header, turns, end = _records(run)
    return RunFile(path=Path(path) if path else Path(f"{run_id}.jsonl"), header=header,
                   turns=turns, end=end)


def write_run(
    run: RunFile, path: str | Path | None = None, overwrite: bool = False, durable: bool = False
) -> Path:
    """Write a run (e.g. from :func:`synthetic_run`) as a JSONL run file; returns its path.

    ``durable=True`` goes through :class:`~adakit.record.RunWriter` (fsync per record, as a
    live launch does); the default writes the same bytes in one go to a temporary file that is
    then renamed into place, which is much faster for large synthetic corpora.
    """
    target = Path(path) if path is not None else run.path
    if target.exists():
        if not overwrite:
            raise FileExistsError(f"{target} exists; pass overwrite=True to replace it")
        target.unlink()
    records: list[Header | Turn | End] = [run.header, *run.turns]
    if run.end is not None:
        records.append(run.end)
    if durable:
        with RunWriter(target) as w:
            for rec in records:
                w.write(rec)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text("".join(rec.model_dump_json() + "\n" for rec in records), encoding="utf-8")
    tmp.replace(target)
    return target


# ----------------------------------------------------------------------------- corpora


@dataclass(frozen=True)
class SyntheticCell:
    """One cell of a synthetic matrix."""

    index: int
    run_id: str
    model: str
    world: str
    task: str
    condition: str
    repeat: int
    seed: int
    started_at: float
    finished: bool


def corpus_specs(
    n_runs: int,
    seed: int = 0,
    models: Sequence[str] = MODELS,
    worlds: Sequence[str] = WORLDS,
    tasks: Sequence[str] = TASKS,
    conditions: Sequence[str] = CONDITIONS,
    unfinished: float = 0.0,
) -> list[SyntheticCell]:
    """The run cells of a synthetic corpus: conditions vary fastest, then models, tasks, worlds,
    so any 16 consecutive runs cover every model x condition pair of the defaults."""
    if n_runs < 0:
        raise ValueError("n_runs must be >= 0")
    axes = {"models": models, "worlds": worlds, "tasks": tasks, "conditions": conditions}
    for name, values in axes.items():
        if not values:
            raise ValueError(f"{name} must not be empty")
    if not 0.0 <= unfinished <= 1.0:
        raise ValueError("unfinished must be a fraction between 0 and 1")
    rng = random.Random(f"specs/{seed}")
    nc, nm, nt, nw = len(conditions), len(models), len(tasks), len(worlds)
    specs = []
    for i in range(n_runs):
        c = conditions[i % nc]
        m = models[(i // nc) % nm]
        t = tasks[(i // (nc * nm)) % nt]
        w = worlds[(i // (nc * nm * nt)) % nw]
        rep = i // (nc * nm * nt * nw)
        run_id = f"syn{seed}-{i:05d}-{m}-{w}-{t}-{c}"
        specs.append(SyntheticCell(index=i, run_id=run_id, model=m, world=w, task=t, condition=c,
                             repeat=rep, seed=seed, started_at=BASE_TIME + 3600.0 * i,
                             finished=rng.random() >= unfinished))
    return specs


def _spec_run(spec: SyntheticCell, length_scale: float = 1.0) -> _Run:
    return _generate(spec.run_id, spec.model, spec.world, spec.task, spec.condition, spec.seed,
                     None, None, DEFAULT_TURN_BOUND, spec.started_at, spec.repeat, None,
                     spec.finished, length_scale)


def write_synthetic_corpus(
    folder: str | Path,
    n_runs: int,
    seed: int = 0,
    models: Sequence[str] = MODELS,
    worlds: Sequence[str] = WORLDS,
    tasks: Sequence[str] = TASKS,
    conditions: Sequence[str] = CONDITIONS,
    unfinished: float = 0.0,
    length_scale: float = 1.0,
    overwrite: bool = False,
    progress: bool = True,
) -> list[Path]:
    """Write ``n_runs`` synthetic run files into ``folder`` (one JSONL file per run).

    ``unfinished`` is the fraction of runs left without an end record; ``length_scale``
    stretches or shrinks run lengths (1.0: about 30 turns natural, 13 under a budget, so
    ~22 turns per run on average; 1.4 gives ~30). Existing files are
    never appended to: they raise ``FileExistsError`` unless ``overwrite``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    specs = corpus_specs(n_runs, seed, models, worlds, tasks, conditions, unfinished)
    for spec in tqdm(specs, desc="synthetic runs", unit="run", disable=not progress):
        run = _spec_run(spec, length_scale)
        header, turns, end = _records(run)
        rf = RunFile(path=folder / f"{spec.run_id}.jsonl", header=header, turns=turns, end=end)
        paths.append(write_run(rf, overwrite=overwrite))
    return paths


def synthetic_tables(
    n_runs: int,
    seed: int = 0,
    models: Sequence[str] = MODELS,
    worlds: Sequence[str] = WORLDS,
    tasks: Sequence[str] = TASKS,
    conditions: Sequence[str] = CONDITIONS,
    unfinished: float = 0.0,
    length_scale: float = 1.0,
    exact: bool = False,
    progress: bool = False,
) -> Corpus:
    """A synthetic corpus's tidy tables built directly (no files, no validation).

    By default the tables are drawn with numpy in one vectorised pass (10,000 runs in a few
    seconds) from the same profiles and rules as :func:`write_synthetic_corpus`; the same
    arguments give the same tables, with the same columns and dtypes as ``load_corpus``.
    ``exact=True`` replays the per-run generator instead, so the tables equal
    ``load_corpus`` of ``write_synthetic_corpus(folder, n_runs, seed, ...)`` value for value
    (slower: about 1 ms per run). ``path`` holds ``synthetic://<run_id>``.
    """
    specs = corpus_specs(n_runs, seed, models, worlds, tasks, conditions, unfinished)
    if not exact:
        return _fast_tables(specs, seed, length_scale)
    runs: list[tuple] = []
    turns: list[tuple] = []
    reads: list[tuple] = []
    for spec in tqdm(specs, desc="synthetic tables", unit="run", disable=not progress):
        run = _spec_run(spec, length_scale)
        t0 = run.started_at
        t_end = run.ended_at if run.reason is not None else run.turns[-1].ended_at
        span = max(t_end - t0, 1e-9)
        axes = (run.run_id, run.model, run.world, run.task, run.condition)
        active = [t.ended_at - t.started_at for t in run.turns]  # synthetic coaches take no time
        total = sum(active)
        before = 0.0
        for k, t in enumerate(run.turns):
            a_start, a_end = before / total, (before + active[k]) / total
            before += active[k]
            first = t.ranges[0] if t.ranges else (None, None)
            turns.append((
                *axes, t.turn, t.tool, t.call_name if t.parse_error is None else None, t.action, t.file, first[0], first[1],
                t.lines_viewed, t.structural, t.block, t.symbol, t.result_count, t.error_type,
                t.parse_error, t.finalize, t.confidence, t.thinking_chars, len(t.raw_text),
                t.started_at, t.ended_at, (t.started_at - t0) / span, (t.ended_at - t0) / span,
                t.ended_at - t.started_at, 0.0, active[k], a_start, a_end, t.latency_s,
                t.tokens_in, t.tokens_out, False,
                t.coach.get("decision") if t.coach else None, len(t.injected), 0, None, None,
                None, None, None, False,
            ))
            if t.file and t.error_type is None:
                for a, b in t.ranges:
                    reads.append((*axes, t.turn, t.tool, t.file, a, b, b - a + 1))
        runs.append((
            run.run_id, "synthetic", run.model, "baseline", run.world, run.task, run.target,
            run.condition, run.repeat, run.seed, run.turn_bound, run.reason,
            run.reason is not None, len(run.turns), t0, t_end - t0, t_end - t0, total, 0.0,
            sum(t.tokens_in for t in run.turns), sum(t.tokens_out for t in run.turns), None, 0,
            sum(1 for t in run.turns if t.error_type is not None), run.conclusion,
            len(run.conclusion) if run.conclusion else 0, False, f"synthetic://{run.run_id}",
            ADA_AGENT, "synthetic",
        ))
    return Corpus(
        runs=pd.DataFrame.from_records(runs, columns=RUN_COLUMNS),
        turns=pd.DataFrame.from_records(turns, columns=TURN_COLUMNS),
        reads=pd.DataFrame.from_records(reads, columns=READ_COLUMNS),
    )


#: The word :func:`synthetic_texts` writes into the thinking of every ``every``-th turn.
MARKER = "pytest"


def synthetic_texts(corpus: Corpus, every: int = 1000, marker: str = MARKER) -> pd.DataFrame:
    """A texts table (run_id, turn, thinking, raw_text, call, observation) for synthetic
    tables: each turn's thinking is filler of its ``thinking_chars``, and the thinking of
    every ``every``-th turn of the table (counted from its first) ends with ``marker``, so
    a search for it has a known number of hits; the other texts are missing."""
    if every < 1:
        raise ValueError(f"every must be at least 1, not {every}")
    turns = corpus.turns
    size = turns["thinking_chars"].to_numpy(dtype=np.int64)
    start = (turns["turn"].to_numpy(dtype=np.int64) * 37) % len(_FILLER)
    longest = int(size.max()) if len(size) else 0
    filler = _FILLER * (longest // len(_FILLER) + 2)
    thinking = [filler[a:a + n] for a, n in zip(start.tolist(), size.tolist(), strict=True)]
    for k in range(0, len(thinking), every):
        thinking[k] = f"{thinking[k]} {marker}"
    missing = np.full(len(turns), None, dtype=object)
    return pd.DataFrame({"run_id": turns["run_id"].to_numpy(), "turn": turns["turn"].to_numpy(),
                         "thinking": thinking, "raw_text": missing, "call": missing,
                         "observation": missing})


# ----------------------------------------------------------------------------- fast tables

_TOOL_IDX = {t: k for k, t in enumerate(TOOL_ORDER)}
_OVW, _PKR, _EXP, _MEM, _BKM, _HNT, _CON = (_TOOL_IDX[t] for t in TOOL_ORDER)
_MALF, _UNK = len(TOOL_ORDER), len(TOOL_ORDER) + 1


def _categorical(rng: np.random.Generator, probs: np.ndarray) -> np.ndarray:
    """One draw per row of an (n, k) matrix of non-negative weights."""
    cdf = np.cumsum(probs, axis=1)
    u = rng.random(len(probs)) * cdf[:, -1]
    return np.minimum((cdf < u[:, None]).sum(axis=1), probs.shape[1] - 1)


def _obj(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """An object array holding ``values`` where ``mask`` and None elsewhere."""
    out = np.full(len(values), None, dtype=object)
    out[mask] = values[mask]
    return out


def _xml_base_len(tool: str) -> int:
    """Length of a tool call's XML without its file path and numbers (for output_chars)."""
    params = {
        "OVW": {"file_path": ""},
        "PKR": {"file_path": "", "start_line": "", "end_line": ""},
        "EXP": {"action_type": "go_to_definition", "current_file_path": "",
                "current_line_number": "", "symbol_name": "Session"},
        "MEM": {"memory_title": "data flow", "memory_content": "synthetic memory",
                "confidence_level": "high"},
        "BKM": {"file_path": "", "line_number": "", "note": "check this"},
        "HNT": {"file_path": "", "code_range": "", "description_of_confusion":
                "unclear control flow"},
        "CON": {"content": "synthetic conclusion", "proceed_to_finalize": "false"},
    }[tool]
    return len(_xml(ABBR_TOOL[tool], params))


@dataclass(frozen=True)
class _Matrix:
    """The per-run parameters of a vectorised corpus, one row per run: the model's profile,
    the condition's effects and the tool weights."""

    specs: Sequence[SyntheticCell]
    profs: list[Profile]
    m_idx: np.ndarray
    budget: np.ndarray
    supp: np.ndarray
    coach: np.ndarray
    budget_n: np.ndarray
    weights: np.ndarray
    repeat: np.ndarray
    pkr_sizes: np.ndarray
    err: np.ndarray
    stay: np.ndarray
    contiguous: np.ndarray

    def col(self, attr: str) -> np.ndarray:
        """A profile attribute, one value per run."""
        return np.array([getattr(p, attr) for p in self.profs], dtype=float)[self.m_idx]

    def per_turn(self, attr: str, run: np.ndarray) -> np.ndarray:
        """A profile attribute, one value per turn (``run``: each turn's run index)."""
        return np.array([getattr(p, attr) for p in self.profs])[self.m_idx[run]]


@dataclass(frozen=True)
class _Files:
    """The files of every (world, task) cell in one padded table: each run's cell, the
    cells' offsets into the file list, their file counts and attention CDFs."""

    wt: np.ndarray
    offset: np.ndarray
    count: np.ndarray
    cdf: np.ndarray
    loc_of: np.ndarray
    names: np.ndarray


@dataclass
class _FastWalk:
    """The turn-by-turn walk of every run at once: per-turn arrays (``n`` turns of run ``r``
    start at ``offsets[r]``) and each run's state between turns."""

    n: np.ndarray
    offsets: np.ndarray
    tool: np.ndarray
    file_id: np.ndarray
    a_line: np.ndarray
    b_line: np.ndarray
    lines: np.ndarray
    action: np.ndarray
    result: np.ndarray
    block: np.ndarray
    tool_error: np.ndarray
    finalize: np.ndarray
    cur: np.ndarray
    last_end: np.ndarray
    prev: np.ndarray

    @property
    def run(self) -> np.ndarray:
        """Each turn's run index."""
        return np.repeat(np.arange(len(self.n)), self.n)

    @property
    def turn(self) -> np.ndarray:
        """Each turn's 1-based number within its run."""
        return np.arange(len(self.tool)) - self.offsets[self.run] + 1


@dataclass
class _Step:
    """One turn index of the walk across the runs still live: the draws its targets share
    and the targets found so far."""

    live: np.ndarray
    pos: np.ndarray
    t: np.ndarray
    newf: np.ndarray
    cur: np.ndarray
    has_cur: np.ndarray
    le: np.ndarray
    u1: np.ndarray
    u2: np.ndarray
    u3: np.ndarray
    f: np.ndarray
    a: np.ndarray
    b: np.ndarray
    nl: np.ndarray

    @property
    def here(self) -> np.ndarray:
        """The current file, or a newly drawn one where there is none yet."""
        return np.where(self.has_cur, self.cur, self.newf)


def _fast_tables(specs: Sequence[SyntheticCell], seed: int, length_scale: float) -> Corpus:
    """Vectorised sibling of the per-run generator: the same profiles and rules, drawn with
    numpy (one step per turn index across all live runs), so its numbers follow the same
    distributions but are not identical to :func:`write_synthetic_corpus`."""
    rng = np.random.default_rng([seed, 20260101])
    if not specs:
        return Corpus(runs=pd.DataFrame(columns=RUN_COLUMNS),
                      turns=pd.DataFrame(columns=TURN_COLUMNS),
                      reads=pd.DataFrame(columns=READ_COLUMNS))
    mx = _matrix(specs)
    files = _files(specs)
    walk = _fast_walk(rng, mx, files, length_scale)
    timing = _fast_timing(rng, mx, walk, files)
    decision, n_injected = _fast_oversight(rng, mx, walk)
    outcome = _fast_outcomes(rng, mx, walk, timing["ended"])
    turns = _fast_turns(rng, mx, walk, files, timing, decision, n_injected, outcome["span"])
    reads = _fast_reads(turns, walk)
    runs = _fast_runs(mx, walk, timing, turns, outcome, seed)
    return Corpus(runs=runs, turns=turns, reads=reads)


def _matrix(specs: Sequence[SyntheticCell]) -> _Matrix:
    """The per-run parameters of ``specs``."""
    models = sorted({s.model for s in specs})
    profs = [profile_for(m) for m in models]
    m_idx = np.array([models.index(s.model) for s in specs])
    conds = [_condition(s.condition) for s in specs]
    supp = np.array([c.suppression for c in conds])
    weights = np.array([[p.weights[t] for t in TOOL_ORDER] for p in profs])[m_idx]
    weights *= np.array([[_task_mods(s.task).get(t, 1.0) for t in TOOL_ORDER] for s in specs])
    weights[supp, _MEM] *= 1.3
    weights[supp, _BKM] *= 1.2
    repeat = np.ones((len(profs), len(TOOL_ORDER)))
    for k, p in enumerate(profs):
        for t, v in p.repeat.items():
            repeat[k, _TOOL_IDX[t]] = v

    def col(attr: str) -> np.ndarray:
        return np.array([getattr(p, attr) for p in profs], dtype=float)[m_idx]

    return _Matrix(
        specs=specs, profs=profs, m_idx=m_idx,
        budget=np.array([c.budget is not None for c in conds]), supp=supp,
        coach=np.array([c.coach for c in conds]), budget_n=np.array([c.budget or 0 for c in conds]),
        weights=weights, repeat=repeat[m_idx],
        pkr_sizes=np.array([p.pkr_sizes for p in profs])[m_idx],
        err=col("error_rate"), stay=col("stay"), contiguous=col("contiguous"),
    )


def _files(specs: Sequence[SyntheticCell]) -> _Files:
    """One table of the (world, task) cells' files, padded to the largest world."""
    cells = sorted({(s.world, s.task) for s in specs})
    cell_idx = {c: k for k, c in enumerate(cells)}
    all_files: list[str] = []
    file_offset, file_count, cdfs = [], [], []
    world_first: dict[str, int] = {}
    for world, task in cells:
        items = _world_files(world)
        if world not in world_first:
            world_first[world] = len(all_files)
            all_files.extend(rel for rel, _ in items)
        names = tuple(rel for rel, _ in items)
        w = np.asarray(_file_weights(names, world, task))
        file_offset.append(world_first[world])
        file_count.append(len(names))
        cdfs.append(np.cumsum(w) / w.sum())
    width = max(len(c) for c in cdfs)
    cdf = np.ones((len(cells), width))
    for k, c in enumerate(cdfs):
        cdf[k, : len(c)] = c
    loc_of = np.zeros(len(all_files), dtype=np.int64)
    for world, first in world_first.items():
        for j, (_, loc) in enumerate(_world_files(world)):
            loc_of[first + j] = loc
    return _Files(wt=np.array([cell_idx[(s.world, s.task)] for s in specs]),
                  offset=np.array(file_offset), count=np.array(file_count), cdf=cdf,
                  loc_of=loc_of, names=np.array(all_files, dtype=object))


def _fast_walk(rng: np.random.Generator, mx: _Matrix, files: _Files,
               length_scale: float) -> _FastWalk:
    """Every run's length, then its turns' tools and targets, one turn index at a time."""
    R = len(mx.specs)
    n_budget = np.maximum(4, np.round(length_scale * rng.normal(BUDGET + 1, 2.5, R)))
    n_free = np.maximum(5, np.round(mx.col("turns") * length_scale * np.where(mx.supp, 0.95, 1.0)
                                    * rng.lognormal(0, 0.35, R)))
    n = np.minimum(np.where(mx.budget, n_budget, n_free), DEFAULT_TURN_BOUND).astype(np.int64)
    T = int(n.sum())
    walk = _FastWalk(
        n=n, offsets=np.concatenate([[0], np.cumsum(n)[:-1]]),
        tool=np.empty(T, dtype=np.int64), file_id=np.full(T, -1, dtype=np.int64),
        a_line=np.zeros(T, dtype=np.int64), b_line=np.zeros(T, dtype=np.int64),
        lines=np.zeros(T, dtype=np.int64), action=np.full(T, -1, dtype=np.int64),
        result=np.full(T, -1, dtype=np.int64), block=np.zeros(T, dtype=bool),
        tool_error=np.zeros(T, dtype=bool), finalize=np.zeros(T, dtype=bool),
        cur=np.full(R, -1, dtype=np.int64), last_end=np.zeros(R, dtype=np.int64),
        prev=np.full(R, -1, dtype=np.int64),
    )
    for k in range(1, int(n.max()) + 1):
        step = _step_tools(rng, mx, files, walk, k)
        _step_pkr(rng, mx, files, step)
        _step_ovw(files, walk, step)
        _step_exp(rng, files, walk, step)
        _step_close(rng, mx, walk, step)
    return walk


def _step_tools(rng: np.random.Generator, mx: _Matrix, files: _Files, walk: _FastWalk,
                k: int) -> _Step:
    """Turn ``k``'s tool (or failure) in every live run, and the draws its targets share."""
    live = np.nonzero(walk.n >= k)[0]
    L = len(live)
    pos = walk.offsets[live] + k - 1
    last = (walk.n[live] == k) & (walk.n[live] < DEFAULT_TURN_BOUND)
    r = rng.random(L)
    malformed = ~last & (r < mx.err[live] * 0.35)
    unknown = ~last & ~malformed & (r < mx.err[live] * 0.5)
    w = mx.weights[live].copy()
    prev = walk.prev[live]
    has_prev = prev >= 0
    w[has_prev, prev[has_prev]] *= mx.repeat[live][has_prev, prev[has_prev]]
    if k == 1:
        w[:, _OVW] *= 4.0
        w[:, _CON] = 0.0
    t = _categorical(rng, w)
    t[last] = _CON
    t[malformed] = _MALF
    t[unknown] = _UNK
    walk.tool[pos] = t
    walk.finalize[pos] = last
    c_live = files.wt[live]
    newf = files.offset[c_live] + np.minimum(
        (files.cdf[c_live] < rng.random(L)[:, None]).sum(axis=1), files.count[c_live] - 1)
    cur = walk.cur[live]
    u1, u2, u3 = rng.random(L), rng.random(L), rng.random(L)
    return _Step(live=live, pos=pos, t=t, newf=newf, cur=cur, has_cur=cur >= 0,
                 le=walk.last_end[live], u1=u1, u2=u2, u3=u3, f=np.full(L, -1, dtype=np.int64),
                 a=np.zeros(L, dtype=np.int64), b=np.zeros(L, dtype=np.int64),
                 nl=np.zeros(L, dtype=np.int64))


def _step_pkr(rng: np.random.Generator, mx: _Matrix, files: _Files, s: _Step) -> None:
    """The peeks' files and ranges: staying in the current file, continuing its last range."""
    is_pkr = s.t == _PKR
    same = s.has_cur & (s.u1 < mx.stay[s.live])
    fp = np.where(same, s.cur, s.newf)
    size = _categorical(rng, mx.pkr_sizes[s.live])
    lo = np.array([5, 20, 51])[size]
    hi = np.array([19, 50, 160])[size]
    length = lo + (s.u2 * (hi - lo + 1)).astype(np.int64)
    loc = files.loc_of[fp]
    contig = same & (s.le > 0) & (s.le < loc) & (s.u3 < mx.contiguous[s.live])
    span = np.maximum(1, loc - length + 1)
    start = np.where(contig, s.le + 1, 1 + (rng.random(len(s.live)) * span).astype(np.int64))
    start = np.clip(start, 1, loc)
    s.f[is_pkr], s.a[is_pkr] = fp[is_pkr], start[is_pkr]
    s.b[is_pkr] = np.minimum(loc, start + length - 1)[is_pkr]


def _step_ovw(files: _Files, walk: _FastWalk, s: _Step) -> None:
    """The overviews' files, entry counts and named blocks."""
    is_ovw = s.t == _OVW
    fo = np.where(s.has_cur & (s.u1 < 0.3), s.cur, s.newf)
    s.f[is_ovw] = fo[is_ovw]
    s.nl[is_ovw] = np.maximum(3, files.loc_of[fo] // 25)[is_ovw]
    walk.result[s.pos[is_ovw]] = s.nl[is_ovw]
    walk.block[s.pos[is_ovw]] = (s.u3 < 0.2)[is_ovw]


def _step_exp(rng: np.random.Generator, files: _Files, walk: _FastWalk, s: _Step) -> None:
    """The explorations: a definition found elsewhere (or not), references in the current
    file, or the next block; bookmarks and hints point at the current file."""
    is_exp = s.t == _EXP
    act = _categorical(rng, np.tile([0.45, 0.3, 0.25], (len(s.live), 1)))
    here = s.here
    defn = is_exp & (act == 0)
    found = defn & (s.u1 >= 0.1)
    s.f[defn] = here[defn]
    s.f[found] = s.newf[found]
    loc_new = files.loc_of[s.newf]
    d_start = 1 + (s.u2 * loc_new).astype(np.int64)
    d_len = 5 + (s.u3 * 56).astype(np.int64)
    s.a[found] = d_start[found]
    s.b[found] = np.minimum(loc_new, d_start + d_len - 1)[found]
    refs = is_exp & (act == 1)
    s.f[refs] = here[refs]
    n_refs = (s.u2 * 21).astype(np.int64)
    nxt = is_exp & (act == 2)
    loc_here = files.loc_of[here]
    n_start = np.where(s.le + 1 > loc_here, 1, s.le + 1)
    s.f[nxt] = here[nxt]
    s.a[nxt] = n_start[nxt]
    s.b[nxt] = np.minimum(loc_here, n_start + 10 + (s.u3 * 31).astype(np.int64) - 1)[nxt]
    walk.action[s.pos[is_exp]] = act[is_exp]
    walk.result[s.pos[defn]] = np.where(found, 1, 0)[defn]
    walk.result[s.pos[refs]] = n_refs[refs]
    walk.result[s.pos[nxt]] = 1
    s.nl[refs] = n_refs[refs]
    cog_file = (s.t == _BKM) | (s.t == _HNT)
    s.f[cog_file] = here[cog_file]


def _step_close(rng: np.random.Generator, mx: _Matrix, walk: _FastWalk, s: _Step) -> None:
    """The step's tool errors, its targets written into the walk, and each run's state
    moved on (current file, end of the last range, last tool)."""
    has_range = s.a > 0
    s.nl[has_range] = (s.b - s.a + 1)[has_range]
    terr = np.isin(s.t, (_PKR, _OVW, _EXP)) & (rng.random(len(s.live)) < mx.err[s.live] * 0.5)
    s.a[terr], s.b[terr], s.nl[terr] = 0, 0, 0
    walk.result[s.pos[terr]] = -1
    walk.tool_error[s.pos] = terr
    walk.file_id[s.pos], walk.a_line[s.pos], walk.b_line[s.pos], walk.lines[s.pos] = s.f, s.a, s.b, s.nl
    ok = (s.f >= 0) & ~terr
    walk.cur[s.live[ok]] = s.f[ok]
    ranged = ok & (s.a > 0)
    walk.last_end[s.live[ranged]] = s.b[ranged]
    walk.last_end[s.live[ok & ~ranged & (s.t == _OVW)]] = 0
    real = s.t < _MALF
    walk.prev[s.live[real]] = s.t[real]


def _fast_timing(rng: np.random.Generator, mx: _Matrix, walk: _FastWalk,
                 files: _Files) -> dict[str, np.ndarray]:
    """Per-turn effort and timing: thinking, latency, start and end, output and tokens."""
    R, T = len(mx.specs), len(walk.tool)
    run, turn, tool = walk.run, walk.turn, walk.tool
    b_run = mx.budget[run]
    pace = rng.lognormal(0, 0.2, R)[run]
    think_scale = rng.lognormal(0, 0.25, R)[run]
    thinking = (mx.per_turn("thinking", run) * np.where(b_run, mx.per_turn("budget_thinking", run), 1.0)
                * think_scale * rng.lognormal(0, 0.5, T)).astype(np.int64)
    latency = (mx.per_turn("latency", run) * np.where(b_run, mx.per_turn("budget_latency", run), 1.0)
               * pace * rng.lognormal(0, 0.45, T))
    gap_turn = b_run & (rng.random(T) < mx.per_turn("pacing_gaps", run))
    latency = np.where(gap_turn, latency * rng.uniform(3.0, 6.0, T), latency)
    prose = np.where(gap_turn, 40 + rng.lognormal(3.5, 0.6, T),
                     30 + 12 * latency * rng.lognormal(0, 0.6, T)).astype(np.int64)
    tool_s = np.where(tool == _OVW, rng.uniform(0.02, 0.2, T), rng.uniform(0.002, 0.03, T))
    tool_s = tool_s + np.where(tool == _HNT, rng.uniform(1.5, 4.0, T), 0.0)
    gap = rng.uniform(0.005, 0.02, T)
    latency = np.round(latency, 3)
    duration = latency + tool_s
    starts_at = np.array([s.started_at for s in mx.specs])
    csum_gap, csum_dur = np.cumsum(gap), np.cumsum(duration)
    run_gap0 = np.concatenate([[0.0], csum_gap])[walk.offsets][run]
    run_dur0 = np.concatenate([[0.0], csum_dur])[walk.offsets][run]
    started = np.round(starts_at[run] + 0.05 + (csum_gap - run_gap0)
                       + (csum_dur - duration - run_dur0), 3)
    base_len = np.array([_xml_base_len(t) for t in TOOL_ORDER] + [0, 60])
    name_len = np.array([len(x) for x in files.names] + [0])
    a_line = walk.a_line
    digits = np.where(a_line > 0, np.floor(np.log10(np.maximum(a_line, 1))) * 2 + 2, 0)
    output = (prose + np.where(tool == _MALF, 0, 1 + base_len[tool]
                               + name_len[walk.file_id] * np.isin(tool, (_OVW, _PKR, _EXP, _BKM, _HNT))
                               + digits)).astype(np.int64)
    return {"thinking": thinking, "latency": latency, "started": started,
            "ended": np.round(started + duration, 3), "starts_at": starts_at, "output": output,
            "tokens_in": 2500 + 350 * turn + 7 * thinking // 4,
            "tokens_out": (thinking + output) // 4}


def _fast_oversight(rng: np.random.Generator, mx: _Matrix,
                    walk: _FastWalk) -> tuple[np.ndarray, np.ndarray]:
    """Each turn's coach decision (coach conditions) and how many messages were injected
    (coach hints and rejections, budget reminders)."""
    run, turn, tool = walk.run, walk.turn, walk.tool
    coach_t = mx.coach[run] & (turn >= 2)
    u = rng.random(len(tool))
    hold = (tool == _CON) & ~walk.finalize
    decision = np.full(len(tool), None, dtype=object)
    on_con = coach_t & hold
    decision[on_con] = np.where(u < 0.5, "REJECT", "APPROVE")[on_con]
    periodic = coach_t & ~hold & (turn % 4 == 0)
    decision[periodic] = np.where(u < 0.4, "HINT", "APPROVE")[periodic]
    remaining = mx.budget_n[run] - turn
    b_run = mx.budget[run]
    reminder = b_run & ((remaining == mx.budget_n[run] // 2) | (remaining == 3) | (remaining == 1))
    n_injected = (np.isin(decision, ("HINT", "REJECT")).astype(np.int64)
                  + reminder.astype(np.int64))
    return decision, n_injected


def _fast_outcomes(rng: np.random.Generator, mx: _Matrix, walk: _FastWalk,
                   ended: np.ndarray) -> dict[str, np.ndarray]:
    """Each run's end: finished or not, its reason, end time, span and conclusion."""
    starts_at = np.array([s.started_at for s in mx.specs])
    finished = np.array([s.finished for s in mx.specs])
    last_pos = walk.offsets + walk.n - 1
    finalized = (walk.tool[last_pos] == _CON) & walk.finalize[last_pos]
    reason = np.where(finished, np.where(finalized, "finalize", "turn_bound"), None)
    t_end = np.where(finished, np.round(ended[last_pos] + 0.01, 3), ended[last_pos])
    conc_len = np.maximum(40, (mx.col("conclusion_chars") * rng.lognormal(0, 0.3, len(mx.specs)))
                          .astype(np.int64))
    conclusion = np.array([_text(int(x)) if r == "finalize" else None
                           for x, r in zip(conc_len, reason, strict=True)], dtype=object)
    return {"finished": finished, "reason": reason, "t_end": t_end,
            "span": np.maximum(t_end - starts_at, 1e-9), "conclusion": conclusion}


def _fast_turns(rng: np.random.Generator, mx: _Matrix, walk: _FastWalk, files: _Files,
                timing: dict[str, np.ndarray], decision: np.ndarray, n_injected: np.ndarray,
                span: np.ndarray) -> pd.DataFrame:
    """The turns table."""
    R, T = len(mx.specs), len(walk.tool)
    run, tool, action = walk.run, walk.tool, walk.action
    started, ended, starts_at = timing["started"], timing["ended"], timing["starts_at"]
    real = tool < _MALF
    unk = tool == _UNK
    malf = tool == _MALF
    error_type = np.full(T, None, dtype=object)
    error_type[walk.tool_error] = "tool_error"
    error_type[malf] = "malformed"
    error_type[unk] = "unknown_tool"
    parse_error = np.full(T, None, dtype=object)
    parse_error[malf] = np.array(_MALFORMED, dtype=object)[rng.integers(0, 4, malf.sum())]
    parse_error[unk] = "unknown_tool"
    rng_ok = walk.a_line > 0
    symbols = np.array(_SYMBOLS, dtype=object)[rng.integers(0, len(_SYMBOLS), T)]
    is_exp_t = tool == _EXP
    conf_draw = _categorical(rng, np.tile([0.15, 0.425, 0.2975, 0.1275], (T, 1)))
    confidence = np.array([None, *_CONFIDENCE], dtype=object)[conf_draw]
    confidence[tool != _MEM] = None
    fin_col = np.full(T, None, dtype=object)
    fin_col[tool == _CON] = walk.finalize[tool == _CON]
    active = ended - started
    active_cum = np.cumsum(active)
    active_total = np.bincount(run, weights=active, minlength=R)
    active_before = active_cum - active - np.concatenate([[0.0], active_cum])[walk.offsets][run]

    def axis(attr: str) -> np.ndarray:
        return np.array([getattr(s, attr) for s in mx.specs], dtype=object)[run]

    return pd.DataFrame({
        "run_id": axis("run_id"),
        "model": axis("model"),
        "world": axis("world"),
        "task": axis("task"),
        "condition": axis("condition"),
        "turn": walk.turn,
        "tool": np.array(TOOL_ORDER + [None, None], dtype=object)[tool],
        "tool_name": np.array([ABBR_TOOL[t] for t in TOOL_ORDER] + [None, None], dtype=object)[tool],
        "action": _obj(np.array(_EXP_ACTIONS, dtype=object)[np.maximum(action, 0)],
                       is_exp_t & (action >= 0)),
        "file": _obj(files.names[np.maximum(walk.file_id, 0)], walk.file_id >= 0),
        "start_line": np.where(rng_ok, walk.a_line, np.nan),
        "end_line": np.where(rng_ok, walk.b_line, np.nan),
        "lines_viewed": walk.lines,
        "structural": tool == _OVW,
        "block": _obj(symbols, walk.block),
        "symbol": _obj(symbols, is_exp_t & (action != 2) & real),
        "result_count": np.where(walk.result >= 0, walk.result, np.nan),
        "error_type": error_type,
        "parse_error": parse_error,
        "finalize": fin_col,
        "confidence": confidence,
        "thinking_chars": timing["thinking"],
        "output_chars": timing["output"],
        "started_at": started,
        "ended_at": ended,
        "t_rel_start": (started - starts_at[run]) / span[run],
        "t_rel_end": (ended - starts_at[run]) / span[run],
        "duration_s": active,
        "coach_s": np.zeros(T),
        "active_s": active,
        "active_rel_start": active_before / active_total[run],
        "active_rel_end": (active_before + active) / active_total[run],
        "latency_s": timing["latency"],
        "tokens_in": timing["tokens_in"],
        "tokens_out": timing["tokens_out"],
        "cached": np.zeros(T, dtype=bool),
        "coach_decision": decision,
        "n_injected": n_injected,
        "dropped_messages": np.zeros(T, dtype=np.int64),
        "tokens_reused": np.full(T, None, dtype=object),
        "sidechain": np.full(T, None, dtype=object),
        "sidechain_agent": np.full(T, None, dtype=object),
        "sidechain_parent": np.full(T, None, dtype=object),
        "sidechain_depth": np.full(T, None, dtype=object),
        "compaction": np.zeros(T, dtype=bool),
    }, columns=TURN_COLUMNS)


def _fast_reads(turns: pd.DataFrame, walk: _FastWalk) -> pd.DataFrame:
    """The reads table: one row per line range of a successful call on a file."""
    keep = (walk.a_line > 0) & (walk.file_id >= 0) & turns["error_type"].isna().to_numpy()
    reads = turns.loc[keep, ["run_id", "model", "world", "task", "condition", "turn",
                             "tool", "file"]].reset_index(drop=True)
    reads["start_line"] = walk.a_line[keep]
    reads["end_line"] = walk.b_line[keep]
    reads["n_lines"] = walk.b_line[keep] - walk.a_line[keep] + 1
    return reads


def _fast_runs(mx: _Matrix, walk: _FastWalk, timing: dict[str, np.ndarray], turns: pd.DataFrame,
               outcome: dict[str, np.ndarray], seed: int) -> pd.DataFrame:
    """The runs table."""
    specs, R = mx.specs, len(mx.specs)
    run = walk.run
    starts_at, t_end, conclusion = timing["starts_at"], outcome["t_end"], outcome["conclusion"]
    errors = np.bincount(run, weights=turns["error_type"].notna().to_numpy().astype(float),
                         minlength=R).astype(np.int64)
    return pd.DataFrame({
        "run_id": [s.run_id for s in specs],
        "study": "synthetic",
        "model": [s.model for s in specs],
        "model_kind": "baseline",
        "world": [s.world for s in specs],
        "task": [s.task for s in specs],
        "target": np.array(["synthetic feature target" if "feature" in s.task else None
                            for s in specs], dtype=object),
        "condition": [s.condition for s in specs],
        "repeat": np.array([s.repeat for s in specs], dtype=np.int64),
        "seed": np.full(R, seed, dtype=np.int64),
        "turn_bound": np.full(R, DEFAULT_TURN_BOUND, dtype=np.int64),
        "reason": outcome["reason"].astype(object),
        "finished": outcome["finished"],
        "n_turns": walk.n,
        "started_at": starts_at,
        "elapsed_s": t_end - starts_at,
        "wall_s": t_end - starts_at,
        "active_s": np.bincount(run, weights=timing["ended"] - timing["started"], minlength=R),
        "coach_s": np.zeros(R),
        "tokens_in": np.bincount(run, weights=timing["tokens_in"], minlength=R).astype(np.int64),
        "tokens_out": np.bincount(run, weights=timing["tokens_out"], minlength=R).astype(np.int64),
        "cost_usd": np.full(R, None, dtype=object),
        "cache_hits": np.zeros(R, dtype=np.int64),
        "errors": errors,
        "conclusion": conclusion,
        "conclusion_chars": np.array([len(c) if c else 0 for c in conclusion], dtype=np.int64),
        "closed": np.zeros(R, dtype=bool),  # synthetic runs have no closing turn
        "path": [f"synthetic://{s.run_id}" for s in specs],
        "agent": ADA_AGENT,
        "world_source": "synthetic",
    }, columns=RUN_COLUMNS)




# ----------------------------------------------------------------------------- forks


def synthetic_forks(
    parent: RunFile,
    at: int,
    change: str = "inject",
    value: str | None = "Synthetic nudge.",
    seeds: int = 8,
    extra_turns: float = 0.0,
    spread: float = 3.0,
    seed: int = 0,
) -> list[RunFile]:
    """``seeds`` synthetic forks of ``parent`` at turn ``at`` (one change, as ``adakit fork``
    records it): each is the parent's first ``at`` turns, then a drawn tail that ends with a
    finalizing conclusion, its header carrying ``forked_from``. The tail's length is drawn
    around the parent's own remaining turns plus ``extra_turns`` (the planted effect of the
    change; a placebo is ``change="placebo", value=None`` and usually 0) with standard
    deviation ``spread``; tail tools are reads (PKR, OVW, EXP). Nothing is written."""
    if not 1 <= at < len(parent.turns):
        raise ValueError(f"at must be between 1 and {len(parent.turns) - 1}, got {at}")
    h = parent.header
    digest = prefix_digest(h, parent.turns[:at])
    out = []
    for draw in range(1, seeds + 1):
        fork_id = f"{h.run_id}__at{at}__{change}__s{draw}"
        rng = np.random.default_rng(zlib.crc32(f"forks/{seed}/{fork_id}".encode()))
        mean = len(parent.turns) - at + extra_turns
        n = max(1, int(round(mean + spread * rng.standard_normal())))
        tools: list[str | dict[str, Any]] = [str(rng.choice(["PKR", "PKR", "OVW", "EXP"]))
                                             for _ in range(n - 1)]
        tail = synthetic_run(fork_id, h.model.name, h.world.name, h.task.family,
                             h.condition.name, [*tools, {"tool": "CON", "finalize": True}],
                             seed=draw, turn_bound=h.turn_bound, repeat=h.repeat)
        out.append(_joined(parent, at, tail, ForkInfo(
            parent=h.run_id, turn=at, prefix_sha256=digest, change=change,  # type: ignore[arg-type]
            value=value, seed=draw)))
    return out


def _joined(parent: RunFile, at: int, tail: RunFile, info: ForkInfo) -> RunFile:
    """A fork: the parent's first ``at`` turns, then ``tail``'s turns renumbered after them
    and moved to start where the prefix ends."""
    prefix = [t.model_copy(deep=True) for t in parent.turns[:at]]
    shift = prefix[-1].ended_at + 0.05 - tail.turns[0].started_at
    moved = [t.model_copy(update={"turn": at + i + 1, "started_at": t.started_at + shift,
                                  "ended_at": t.ended_at + shift})
             for i, t in enumerate(tail.turns)]
    turns = [*prefix, *moved]
    header = parent.header.model_copy(update={"run_id": tail.header.run_id, "seed": info.seed,
                                              "forked_from": info})
    end = tail.end.model_copy(update={"ended_at": tail.end.ended_at + shift,
                                      "totals": {**tail.end.totals, "turns": len(turns)}}) \
        if tail.end is not None else None
    return RunFile(path=Path(f"{header.run_id}.jsonl"), header=header, turns=turns, end=end)


__all__ = [
    "CONDITIONS", "MODELS", "PROFILES", "TASKS", "TOOL_ABBR", "WORLDS", "Profile", "SyntheticCell",
    "corpus_specs", "profile_for", "synthetic_forks", "synthetic_run", "synthetic_tables", "world_files",
    "write_run", "write_synthetic_corpus",
]
