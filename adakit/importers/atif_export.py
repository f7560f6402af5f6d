"""adakit runs written as ATIF trajectories (``adakit export atif CORPUS --out DIR``).

Every run file (launched by adakit, or imported) becomes one ATIF-v1.7 document: a system
step (the system prompt), a user step (the task), one agent step per turn (its thinking as
``reasoning_content``, its raw reply as ``message``, its call as one tool call answered by its
observation, its tokens and cost as ``metrics``) and, when the run concluded, a last agent
step with the conclusion. Each tool call's ``extra.adakit`` keeps the turn's canonical action
(tool, file, line ranges ...), so importing the export (:mod:`adakit.importers.atif`) gives the
same actions back turn by turn. A subagent's turns (a sidechain span) become an embedded
subagent trajectory that the delegating turn's observation refers to.

No JSON Schema of ATIF is published in a package this project can install (Harbor's own
package, which holds the reference models, needs Python 3.12 or later), so
:func:`check_atif` checks a document against the fields of RFC 0001 itself: the required
fields and their types, ``step_id`` numbered from 1, agent-only fields on agent steps only,
results answering the step's own calls, ISO 8601 timestamps, embedded subagents with unique
ids. The export refuses to write a document that fails the check.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from adakit import __version__
from adakit.importers.atif import ADAKIT_KEY
from adakit.record import RunFile, RunFileError, Turn, iter_run_files, read_run, run_agent

#: The version the export writes.
SCHEMA_VERSION = "ATIF-v1.7"
_VERSION = re.compile(r"^ATIF-v1\.\d+$")
_SOURCES = ("system", "user", "agent")
_AGENT_ONLY = ("model_name", "reasoning_content", "tool_calls", "metrics")
#: The canonical-action fields kept in a tool call's ``extra.adakit``.
ACTION_FIELDS = ("tool", "file", "ranges", "lines_viewed", "structural", "block", "symbol",
                 "action", "result_count", "error_type", "confidence", "finalize", "exit_code",
                 "mapped_by")


def _iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, tz=UTC).isoformat().replace("+00:00", "Z")


def _agent_step(turn: Turn, step_id: int, model: str) -> dict[str, Any]:
    step: dict[str, Any] = {"step_id": step_id, "timestamp": _iso(turn.ended_at),
                            "source": "agent", "model_name": model, "message": turn.raw_text}
    if turn.thinking:
        step["reasoning_content"] = turn.thinking
    metrics = {k: v for k, v in {"prompt_tokens": turn.tokens_in,
                                 "completion_tokens": turn.tokens_out,
                                 "cost_usd": turn.cost_usd}.items() if v is not None}
    step["metrics"] = metrics
    if turn.call is None:
        step["extra"] = {ADAKIT_KEY: {"parse_error": turn.parse_error.message if turn.parse_error
                                      else "no tool call"}}
        if turn.observation:  # what the agent was told about its malformed reply
            step["observation"] = {"results": [{"content": turn.observation}]}
        return step
    call_id = f"call_{turn.turn}"
    action = turn.metrics.model_dump(mode="json")
    step["tool_calls"] = [{"tool_call_id": call_id, "function_name": turn.call.tool,
                           "arguments": dict(turn.call.params),
                           "extra": {ADAKIT_KEY: {k: action[k] for k in ACTION_FIELDS}}}]
    step["observation"] = {"results": [{"source_call_id": call_id, "content": turn.observation}]}
    return step


def _steps(turns: list[Turn], model: str, spans: dict[str, list[Turn]],
           first: int = 1) -> list[dict[str, Any]]:
    """Agent steps of the main agent's turns, each delegating turn naming its subagents."""
    out: list[dict[str, Any]] = []
    for turn in turns:
        step = _agent_step(turn, first + len(out), model)
        subs = [key for key, side in spans.items() if side[0].sidechain
                and side[0].sidechain.parent_turn == turn.turn]
        if subs and "observation" in step:
            step["observation"]["results"][0]["subagent_trajectory_ref"] = [
                {"trajectory_id": key} for key in subs]
        out.append(step)
    return out


def to_atif(run: RunFile) -> dict[str, Any]:
    """One run as an ATIF-v1.7 document (checked by :func:`check_atif`; a run that does not
    fit raises ValueError naming the first fault)."""
    h, end = run.header, run.end
    model = h.model.name
    main = [t for t in run.turns if t.sidechain is None]
    spans: dict[str, list[Turn]] = {}
    for t in run.turns:
        if t.sidechain is not None:
            spans.setdefault(t.sidechain.id, []).append(t)
    steps: list[dict[str, Any]] = []
    if h.system_prompt:
        steps.append({"step_id": 1, "source": "system", "message": h.system_prompt})
    steps.append({"step_id": len(steps) + 1, "timestamp": _iso(h.started_at), "source": "user",
                  "message": h.task.prompt})
    steps.extend(_steps(main, model, spans, first=len(steps) + 1))
    if end is not None and end.conclusion:
        steps.append({"step_id": len(steps) + 1, "timestamp": _iso(end.ended_at),
                      "source": "agent", "message": end.conclusion})
    src = h.source
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "session_id": h.run_id, "trajectory_id": h.run_id,
        "agent": {"name": run_agent(h), "version": (src.agent_version if src else "")
                  or __version__, "model_name": model},
        "steps": steps,
        "final_metrics": {"total_prompt_tokens": sum(t.tokens_in for t in run.turns),
                          "total_completion_tokens": sum(t.tokens_out for t in run.turns),
                          "total_steps": len(steps)},
        "extra": {ADAKIT_KEY: {"run_id": h.run_id, "study": h.study, "world": h.world.name,
                               "task": h.task.family, "condition": h.condition.name,
                               "exit_status": end.reason if end else None,
                               "submission": end.submission if end else None,
                               "source_format": src.format if src else "adakit",
                               "adakit_version": __version__}},
    }
    costs = [t.cost_usd for t in run.turns if t.cost_usd is not None]
    if costs:
        doc["final_metrics"]["total_cost_usd"] = sum(costs)
    if spans:
        doc["subagent_trajectories"] = [_subagent(key, side, model) for key, side in spans.items()]
    faults = check_atif(doc)
    if faults:
        raise ValueError(f"{h.run_id}: the ATIF document does not check: {faults[0]}")
    return doc


def _subagent(key: str, turns: list[Turn], model: str) -> dict[str, Any]:
    side = turns[0].sidechain
    return {"schema_version": SCHEMA_VERSION, "trajectory_id": key,
            "agent": {"name": (side.agent if side else "") or "subagent", "version": ""},
            "steps": _steps(turns, model, {})}


# --------------------------------------------------------------------------- the check


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_message(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return []
    if isinstance(value, list) and all(isinstance(p, dict) and p.get("type") in ("text", "image")
                                       for p in value):
        return []
    return [f"{where}: a text or a list of content parts (type text/image)"]


def _check_step(step: Any, i: int) -> list[str]:
    where = f"steps[{i - 1}]"
    if not isinstance(step, dict):
        return [f"{where}: not an object"]
    out: list[str] = []
    if step.get("step_id") != i:
        out.append(f"{where}.step_id: {step.get('step_id')!r}, expected {i} (numbered from 1)")
    if step.get("source") not in _SOURCES:
        out.append(f"{where}.source: {step.get('source')!r} is not one of {', '.join(_SOURCES)}")
    if "message" not in step:
        out.append(f"{where}.message: missing")
    else:
        out += _check_message(step["message"], f"{where}.message")
    if step.get("timestamp") is not None:
        try:
            datetime.fromisoformat(str(step["timestamp"]).replace("Z", "+00:00"))
        except ValueError:
            out.append(f"{where}.timestamp: {step['timestamp']!r} is not ISO 8601")
    if step.get("source") != "agent":
        out += [f"{where}.{k}: only agent steps have it" for k in _AGENT_ONLY if k in step]
    calls = step.get("tool_calls")
    ids: set[str] = set()
    if calls is not None:
        if not isinstance(calls, list):
            return [*out, f"{where}.tool_calls: not a list"]
        for k, c in enumerate(calls):
            if not (isinstance(c, dict) and isinstance(c.get("tool_call_id"), str)
                    and isinstance(c.get("function_name"), str)
                    and isinstance(c.get("arguments"), dict)):
                out.append(f"{where}.tool_calls[{k}]: needs tool_call_id and function_name "
                           "(text) and arguments (an object)")
            else:
                ids.add(c["tool_call_id"])
    obs = step.get("observation")
    if obs is not None:
        results = obs.get("results") if isinstance(obs, dict) else None
        if not isinstance(results, list):
            return [*out, f"{where}.observation.results: not a list"]
        for k, r in enumerate(results):
            ref = r.get("source_call_id") if isinstance(r, dict) else None
            if not isinstance(r, dict) or (ref is not None and ref not in ids):
                out.append(f"{where}.observation.results[{k}]: source_call_id {ref!r} answers "
                           "no tool call of this step")
    for k, v in (step.get("metrics") or {}).items() if isinstance(step.get("metrics"), dict) else []:
        if k in ("prompt_tokens", "completion_tokens", "cached_tokens") and not _is_int(v):
            out.append(f"{where}.metrics.{k}: not an integer")
    return out


def check_atif(doc: Any, embedded: bool = False) -> list[str]:
    """The faults of an ATIF document against RFC 0001's fields (empty: it checks)."""
    if not isinstance(doc, dict):
        return ["the document is not a JSON object"]
    out: list[str] = []
    version = doc.get("schema_version")
    if not (isinstance(version, str) and _VERSION.match(version)):
        out.append(f"schema_version: {version!r} is not ATIF-v1.N")
    old = isinstance(version, str) and _VERSION.match(version) and int(version.rsplit(".", 1)[1]) < 7
    if old and not embedded and not isinstance(doc.get("session_id"), str):
        out.append("session_id: required (a text) before ATIF-v1.7")
    agent = doc.get("agent")
    if not (isinstance(agent, dict) and isinstance(agent.get("name"), str)
            and isinstance(agent.get("version"), str)):
        out.append("agent: needs name and version (text)")
    steps = doc.get("steps")
    if not isinstance(steps, list) or not steps:
        return [*out, "steps: not a list of steps, or empty"]
    for i, step in enumerate(steps, 1):
        out += _check_step(step, i)
    subs = doc.get("subagent_trajectories")
    seen: set[str] = set()
    for k, sub in enumerate(subs if isinstance(subs, list) else []):
        key = sub.get("trajectory_id") if isinstance(sub, dict) else None
        if not isinstance(key, str) or key in seen:
            out.append(f"subagent_trajectories[{k}].trajectory_id: missing or not unique")
        seen.add(str(key))
        out += [f"subagent_trajectories[{k}].{f}" for f in check_atif(sub, embedded=True)]
    return out


# --------------------------------------------------------------------------- export


def export_runs(paths: Iterable[str | Path], out: str | Path, echo: bool = True) -> tuple[int, int]:
    """Write every run file under ``paths`` as ``out/<run_id>.json``; (written, skipped). A
    run file that cannot be read or converted is skipped with one line on stderr."""
    folder = Path(out).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    written = skipped = 0
    for path in iter_run_files(list(paths)):
        try:
            doc = to_atif(read_run(path))
        except (RunFileError, ValueError) as exc:
            skipped += 1
            if echo:
                print(f"skipped {path}: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
            continue
        target = folder / f"{doc['session_id']}.json"
        target.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        written += 1
    return written, skipped


def _cmd_export_atif(args: argparse.Namespace) -> int:
    missing = [p for p in args.corpus if not Path(p).expanduser().exists()]
    if missing:
        print(f"adakit export atif: no such file or folder: {missing[0]}", file=sys.stderr)
        return 2
    written, skipped = export_runs(args.corpus, args.out)
    print(f"exported {written} run{'s' if written != 1 else ''} as {SCHEMA_VERSION} into "
          f"{args.out}" + (f"; skipped {skipped}" if skipped else ""))
    return 1 if skipped else 0


def register_cli(sub: Any) -> None:
    """``adakit export atif CORPUS... --out DIR``: runs as ATIF trajectories."""
    p = sub.add_parser("export", help="write runs in another format (atif)")
    formats = p.add_subparsers(dest="export_format", metavar="FORMAT", required=True)
    a = formats.add_parser("atif", help="runs as ATIF-v1.7 trajectories (Harbor's RFC 0001)")
    a.add_argument("corpus", nargs="+", metavar="CORPUS", help="run files or folders of them")
    a.add_argument("--out", required=True, metavar="DIR", help="folder of the ATIF files")
    a.set_defaults(func=_cmd_export_atif)
