"""OpenHands event streams: a JSON list of events, or an object whose ``history`` holds them
(one record of an evaluation's ``output.jsonl``, with ``instance_id``, ``instruction``,
``metadata`` and ``test_result.git_patch``). An ``output.jsonl`` itself holds one such record
per line; :func:`adakit.importers.batch.import_file` imports every line as its own run.

Every event has an ``id``, a ``timestamp`` and a ``source`` (``agent``, ``user``,
``environment``); an *action* event names its kind in ``action`` with its fields in ``args``
(``run`` with ``command``, ``read`` with ``path``/``view_range``, ``edit`` with ``path`` and an
editor ``command``, ``write``, ``think``, ``message``, ``finish`` ...), an *observation* event
names its kind in ``observation``, its text in ``content``, its details in ``extras``, and the
id of the action it answers in ``cause``. Agent actions become steps; their observation is the
event whose ``cause`` is the action's id. Actions the scaffold itself makes (``system``,
``recall``, ``change_agent_state``, ``condensation``) and user messages are not steps.

Older outputs (e.g. the 2024 resolver's) store events flat: an action's fields sit beside
``action`` instead of under ``args``, an observation's ``content`` and ``exit_code`` beside
``observation``, and there are no ``id``, ``cause`` or ``source``; an observation then answers
the action just before it, and a leading message is the user's task.

An IPython cell (``run_ipython``) that only calls one of CodeAct's file functions
(``open_file``, ``goto_line``, ``scroll_down``, ``search_dir``, ``find_file``,
``edit_file_by_replace`` ...; the 2024 agentskills) is mapped as the SWE-agent command it
mirrors; the turn keeps the cell as recorded.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from typing import Any

from adakit.importers.base import (
    BadInput,
    SourceStep,
    Trajectory,
    count_or_none,
    seconds,
    text_of,
)

FORMAT = "openhands"
AGENT = "openhands"
EXTENSIONS = (".json", ".jsonl")
_SKIP_ACTIONS = frozenset({"system", "recall", "change_agent_state", "condensation",
                           "condensation_request", "null", "pause", "resume", "stop",
                           "loop_recovery", "start"})
_EDITOR_COMMANDS = frozenset({"view", "create", "str_replace", "insert", "undo_edit"})
# the repository folder: a /workspace/<name> with something below it (not a file made there)
_WORKSPACE = re.compile(r"(/workspace/[^/\s'\"`;|&)]+)/")
# the folder the task names (``/workspace/<repo>`` in <uploaded_files>, or "in /workspace.")
_TASK_ROOT = re.compile(r"/workspace(?:/[^/\s'\"`;|&)<>]+)?")
#: Fields of a flat (args-less) event that are not the action's arguments.
_EVENT_FIELDS = frozenset({"id", "timestamp", "source", "message", "action", "observation",
                           "cause", "timeout", "llm_metrics", "tool_call_metadata",
                           "action_risk", "security_risk", "is_confirmed", "content", "extras"})
_SCAFFOLD_NOTE = re.compile(r"^\[(?:The command|Current working directory|Python interpreter|"
                            r"Command finished|Below is the output).*\]\s*$")


def _is_event(e: Any) -> bool:
    """An OpenHands event: an ``action`` or ``observation`` kind, and not a chat message
    (SWE-agent's ``history`` messages carry an ``action`` too, beside their ``role``)."""
    return isinstance(e, dict) and ("action" in e or "observation" in e) and "role" not in e


def markers(data: Any) -> str | None:
    """The fields that make ``data`` an OpenHands event stream (None: not one)."""
    if isinstance(data, dict) and isinstance(data.get("history"), list):
        events, where = data["history"], "a 'history' list"
    elif isinstance(data, list):
        events, where = data, "a list"
    else:
        return None
    flat = [x for e in events for x in (e if isinstance(e, list) else [e])]
    if any(_is_event(e) for e in flat):
        return f"{where} of events with 'action'/'observation' (no 'role')"
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
    if not any(_is_event(e) for e in flat):
        raise BadInput("unknown shape", "no event has an 'action' or 'observation' kind "
                       "(chat messages with a 'role' are not events)")
    return _unflatten(flat), meta


def _unflatten(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events of the flat layout (module docstring) in the nested one; others unchanged."""
    out: list[dict[str, Any]] = []
    last_action: Any = None
    for i, e in enumerate(events):
        if "action" in e and not isinstance(e.get("args"), dict):
            e = {**{k: v for k, v in e.items() if k in _EVENT_FIELDS},
                 "args": {k: v for k, v in e.items() if k not in _EVENT_FIELDS}}
            if e.get("source") is None and e.get("action") == "message" and last_action is None:
                e["source"] = "user"  # the task, given before the agent's first action
        elif "observation" in e and not isinstance(e.get("extras"), dict):
            extras = {k: v for k, v in e.items() if k not in _EVENT_FIELDS}
            if isinstance(extras.get("exit_code"), int):
                extras["metadata"] = {"exit_code": extras["exit_code"]}
            e = {**{k: v for k, v in e.items() if k in _EVENT_FIELDS}, "extras": extras}
        if "action" in e or "observation" in e:
            if e.get("id") is None:
                e = {**e, "id": f"#{i}"}
            if "observation" in e and e.get("cause") is None and last_action is not None \
                    and str(e["id"]).startswith("#"):
                e["cause"] = last_action
            if "action" in e:
                last_action = e["id"]
        out.append(e)
    return out


#: CodeAct agentskills -> (the SWE-agent-style tool mapped by, positional parameter names)
_SKILLS: dict[str, tuple[str, tuple[str, ...]]] = {
    "open_file": ("open", ("path", "line_number", "context_lines")),
    "goto_line": ("goto", ("line_number",)),
    "scroll_down": ("scroll_down", ()),
    "scroll_up": ("scroll_up", ()),
    "search_dir": ("search_dir", ("search_term", "dir_path")),
    "search_file": ("search_file", ("search_term", "file_path")),
    "find_file": ("find_file", ("file_name", "dir_path")),
    "create_file": ("create", ("filename",)),
    "edit_file_by_replace": ("edit", ("file_name", "to_replace", "new_content")),
    "insert_content_at_line": ("edit", ("file_name", "line_number", "content")),
    "append_file": ("edit", ("file_name", "content")),
    "edit_file": ("edit", ("file_name", "start", "end", "content")),
}


def _skill_call(code: Any) -> tuple[str, dict[str, Any]] | None:
    """(tool, args) of a cell that is one call of an agentskills file function, else None."""
    if not isinstance(code, str) or not code.strip():
        return None
    try:
        body = ast.parse(code.strip()).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # not Python, or hostile
        return None
    if len(body) != 1 or not isinstance(body[0], ast.Expr) or not isinstance(body[0].value, ast.Call):
        return None
    call = body[0].value
    if not isinstance(call.func, ast.Name) or call.func.id not in _SKILLS:
        return None
    tool, names = _SKILLS[call.func.id]
    pairs = [*zip(names, call.args, strict=False),
             *((kw.arg, kw.value) for kw in call.keywords if kw.arg)]
    args: dict[str, Any] = {}
    for key, node in pairs:
        try:
            args[key] = ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            continue
    return tool, args


def _task_text(events: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    if meta.get("instruction"):
        return str(meta["instruction"])
    first = next((e for e in events if e.get("action") == "message" and e.get("source") == "user"),
                 None)
    return text_of((first.get("args") or {}).get("content")) if first else ""


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
    named = _TASK_ROOT.search(_task_text(events, meta))
    if named:  # the task says where the repository is: trust it over the paths used
        root = named.group(0).rstrip(".,:;")
    if root is None and any("/workspace" in str(e.get("args") or "") for e in events if "action" in e):
        root = "/workspace"
    system = task = ""
    steps: list[SourceStep] = []
    last_time = seconds(events[0].get("timestamp"))
    start = last_time
    cost_so_far = 0.0
    cwd = root
    final_message: str | None = None
    agent_state: str | None = None
    for e in events:
        stamp = seconds(e.get("timestamp"))
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
        skill = _skill_call(args.get("code")) if kind == "run_ipython" else None
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
        ended = seconds(obs.get("timestamp")) if obs else stamp
        thought = _thought(e)
        if kind == "finish":
            args_all = e.get("args") or {}
            final_message = str(args_all.get("final_thought") or args_all.get("message")
                                or (args_all.get("outputs") or {}).get("content") or thought or "")
        elif kind == "message":
            final_message = args.get("content") or final_message
            thought = thought or str(args.get("content", ""))
        steps.append(SourceStep(
            tool=tool, args=args, thought=thought, response=thought,
            observation=content, exit_code=code, cwd=cwd,
            started_at=last_time, ended_at=ended or stamp,
            latency_s=float(latencies[-1].get("latency", 0.0)) if latencies and
            isinstance(latencies[-1], dict) else 0.0,
            tokens_in=int(usage.get("prompt_tokens") or 0),
            tokens_out=int(usage.get("completion_tokens") or 0), cost_usd=cost,
            mapped_as=skill,
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
        root=root, step_limit=count_or_none(meta["metadata"].get("max_iterations"))
        if isinstance(meta.get("metadata"), dict) else None,
        mode="events",
    )
