"""OpenHands event streams: a JSON list of events, or an object whose ``history`` holds them
(one record of an evaluation's ``output.jsonl``, with ``instance_id``, ``instruction``,
``metadata`` and ``test_result.git_patch``).

Every event has an ``id``, a ``timestamp`` and a ``source`` (``agent``, ``user``,
``environment``); an *action* event names its kind in ``action`` with its fields in ``args``
(``run`` with ``command``, ``read`` with ``path``/``view_range``, ``edit`` with ``path`` and an
editor ``command``, ``write``, ``think``, ``message``, ``finish`` ...), an *observation* event
names its kind in ``observation``, its text in ``content``, its details in ``extras``, and the
id of the action it answers in ``cause``. Agent actions become steps; their observation is the
event whose ``cause`` is the action's id. Actions the scaffold itself makes (``system``,
``recall``, ``change_agent_state``, ``condensation``) and user messages are not steps.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from adakit.importers.base import BadInput, Step, Trajectory, text_of

FORMAT = "openhands"
AGENT = "openhands"
EXTENSIONS = (".json",)
_SKIP_ACTIONS = frozenset({"system", "recall", "change_agent_state", "condensation",
                           "condensation_request", "null", "pause", "resume", "stop",
                           "loop_recovery", "start"})
_EDITOR_COMMANDS = frozenset({"view", "create", "str_replace", "insert", "undo_edit"})
_WORKSPACE = re.compile(r"(/workspace/[^/\s'\"`;|&)]+)")
_SCAFFOLD_NOTE = re.compile(r"^\[(?:The command|Current working directory|Python interpreter|"
                            r"Command finished|Below is the output).*\]\s*$")


def _time(value: Any) -> float | None:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value:
        try:
            stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=UTC)
        return stamp.timestamp()
    return None


def _events(data: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    meta: dict[str, Any] = {}
    if isinstance(data, dict) and isinstance(data.get("history"), list):
        meta, events = data, data["history"]
    elif isinstance(data, list):
        events = data
    else:
        raise BadInput("unknown shape", "neither a list of events nor an object with 'history'")
    flat: list[Any] = []
    for e in events:  # early evaluation outputs stored [action, observation] pairs
        flat.extend(e if isinstance(e, list) else [e])
    if not flat or not all(isinstance(e, dict) for e in flat):
        if not flat:
            raise BadInput("empty trajectory", "no events")
        raise BadInput("unknown shape", "events are not JSON objects")
    if not any("action" in e or "observation" in e for e in flat):
        raise BadInput("unknown shape", "no event has an 'action' or 'observation' kind")
    return flat, meta


def _thought(event: dict[str, Any]) -> str:
    args = event.get("args") if isinstance(event.get("args"), dict) else {}
    thought = str(args.get("thought") or "")
    if thought:
        return thought
    meta = event.get("tool_call_metadata") or {}
    choices = (meta.get("model_response") or {}).get("choices") or []
    if choices and isinstance(choices[0], dict):
        return text_of((choices[0].get("message") or {}).get("content"))
    return ""


def _clean(content: str) -> str:
    lines = content.rstrip("\n").split("\n")
    while lines and _SCAFFOLD_NOTE.match(lines[-1]):
        lines.pop()
    return "\n".join(lines)


def _model(events: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    llm = ((meta.get("metadata") or {}).get("llm_config") or {}) if isinstance(meta.get("metadata"), dict) else {}
    if llm.get("model"):
        return str(llm["model"])
    for e in events:
        resp = (e.get("tool_call_metadata") or {}).get("model_response") or {}
        if resp.get("model"):
            return str(resp["model"])
        usage = (e.get("llm_metrics") or {}).get("accumulated_token_usage") or {}
        if usage.get("model"):
            return str(usage["model"])
    return ""


def _step_for(action: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    kind = str(action.get("action"))
    args = dict(action.get("args") or {})
    args.pop("thought", None)
    if kind == "run":
        return "run", {"command": str(args.get("command", ""))}
    if kind == "edit" and args.get("command") in _EDITOR_COMMANDS:
        return "str_replace_editor", args
    if kind == "message":
        return "message", {"content": str(args.get("content", ""))}
    return kind, args


def parse(data: Any, name: str = "") -> Trajectory:
    """An OpenHands event stream as a :class:`Trajectory`."""
    events, meta = _events(data)
    answers: dict[Any, dict[str, Any]] = {}
    for e in events:
        if "observation" in e and e.get("cause") is not None:
            answers.setdefault(e["cause"], e)
    paths = Counter(m for e in events if "action" in e
                    for m in _WORKSPACE.findall(str(e.get("args") or "")))
    root = paths.most_common(1)[0][0] if paths else None
    system = task = ""
    steps: list[Step] = []
    last_time = _time(events[0].get("timestamp"))
    start = last_time
    cost_so_far = 0.0
    cwd = root
    final_message: str | None = None
    agent_state: str | None = None
    for e in events:
        stamp = _time(e.get("timestamp"))
        if "observation" in e:
            if e.get("observation") == "agent_state_changed":
                agent_state = str((e.get("extras") or {}).get("agent_state") or agent_state)
            continue
        kind = str(e.get("action"))
        source = e.get("source")
        if kind == "system":
            system = text_of((e.get("args") or {}).get("content"))
            continue
        if kind == "message" and source == "user":
            if not task:
                task = text_of((e.get("args") or {}).get("content"))
            last_time = stamp or last_time
            continue
        if kind in _SKIP_ACTIONS or source not in (None, "agent"):
            continue
        tool, args = _step_for(e)
        obs = answers.get(e.get("id")) if e.get("id") is not None else None
        content = _clean(text_of(obs.get("content"))) if obs else ""
        extras = (obs or {}).get("extras") or {}
        meta_out = extras.get("metadata") if isinstance(extras.get("metadata"), dict) else {}
        code = meta_out.get("exit_code") if isinstance(meta_out.get("exit_code"), int) else None
        if code is not None and code < 0:
            code = None
        metrics = e.get("llm_metrics") or {}
        usages = metrics.get("token_usages") or []
        usage = usages[-1] if usages and isinstance(usages[-1], dict) else {}
        latencies = metrics.get("response_latencies") or []
        total_cost = metrics.get("accumulated_cost")
        cost = None
        if isinstance(total_cost, (int, float)):
            cost, cost_so_far = max(float(total_cost) - cost_so_far, 0.0), float(total_cost)
        ended = _time(obs.get("timestamp")) if obs else stamp
        thought = _thought(e)
        if kind == "finish":
            args_all = e.get("args") or {}
            final_message = str(args_all.get("final_thought") or args_all.get("message")
                                or (args_all.get("outputs") or {}).get("content") or thought or "")
        elif kind == "message":
            final_message = args.get("content") or final_message
            thought = thought or str(args.get("content", ""))
        steps.append(Step(
            tool=tool, args=args, thought=thought, response=thought,
            observation=content, exit_code=code, cwd=cwd,
            started_at=last_time, ended_at=ended or stamp,
            latency_s=float(latencies[-1].get("latency", 0.0)) if latencies and
            isinstance(latencies[-1], dict) else 0.0,
            tokens_in=int(usage.get("prompt_tokens") or 0),
            tokens_out=int(usage.get("completion_tokens") or 0), cost_usd=cost,
        ))
        if meta_out.get("working_dir"):
            cwd = str(meta_out["working_dir"])
        last_time = ended or stamp or last_time
    if not steps:
        raise BadInput("empty trajectory", "no agent actions")
    result = meta.get("test_result") if isinstance(meta.get("test_result"), dict) else {}
    submission = result.get("git_patch") or None
    error = meta.get("error")
    finished = any(s.tool == "finish" for s in steps)
    status = ("finished" if finished else (f"error: {error}" if error else (agent_state or None)))
    stem = name.rsplit("/", 1)[-1].removesuffix(".json")
    meta_cost = (meta.get("metrics") or {}).get("accumulated_cost") if isinstance(
        meta.get("metrics"), dict) else None
    return Trajectory(
        steps=steps, agent=AGENT, agent_version=str((meta.get("metadata") or {}).get(
            "agent_class", "")) if isinstance(meta.get("metadata"), dict) else "",
        instance=str(meta.get("instance_id") or stem) or None, model=_model(events, meta),
        task_prompt=str(meta.get("instruction") or task), system_prompt=system,
        exit_status=status, submission=submission, final_message=final_message,
        totals={"cost_usd": meta_cost if meta_cost is not None else (cost_so_far or None)},
        started_at=start, ended_at=steps[-1].ended_at,
        timing="recorded" if any(s.ended_at is not None for s in steps) else "none",
        root=root, step_limit=((meta.get("metadata") or {}).get("max_iterations")
                               if isinstance(meta.get("metadata"), dict) else None),
        mode="events",
    )
