"""SWE-agent ``.traj`` files (one JSON object per instance).

The object holds ``trajectory`` (one entry per step: ``action``, ``observation``,
``response``, ``thought``, ``state`` and, in newer versions, ``execution_time``), ``history``
(the chat messages; in the function-calling style the assistant messages carry
``tool_calls``) and ``info`` (``exit_status``, ``submission``, ``model_stats``). Both styles
are read:

* **command style** (SWE-agent 0.x): the action is a command line such as ``open
  src/app.py 120``, ``search_dir "url_for"``, ``edit 4:4 ... end_of_edit`` or a bash command;
* **function-calling style** (SWE-agent 1.x): the action is rendered from a tool call
  (``str_replace_editor view /testbed/src/app.py --view_range 1 50``, ``bash``, ``submit``);
  the call's JSON arguments are taken from the aligned history message when present.

The step's working folder is the previous step's ``state.working_dir`` (the first step's own
when there is no previous one) and the open file the previous ``state.open_file``.
Scaffold steps that are not agent actions (``exit_cost``, an empty action) are left out.
"""

from __future__ import annotations

import json
import re
from typing import Any

from adakit.importers.base import BadInput, SourceStep, Trajectory, text_of, text_or_none
from adakit.importers.shell import split_words

FORMAT = "swe-agent"
AGENT = "swe-agent"
EXTENSIONS = (".traj",)
#: SWE-agent's own commands (tools bundles ``windowed``, ``search``, ``edit_*``, ``submit``).
COMMANDS = frozenset({
    "open", "goto", "scroll_up", "scroll_down", "create", "edit", "insert", "search_dir",
    "search_file", "find_file", "submit", "str_replace_editor", "filemap", "exit_forfeit",
})
_SCAFFOLD_EXITS = re.compile(r"^exit_(cost|context|format|error|api|environment_error|"
                             r"total_execution_time|command_timeout)\b")
_CURRENT_DIR = re.compile(r"\(Current directory: ([^)]+)\)")


def markers(data: Any) -> str | None:
    """The fields that make ``data`` a SWE-agent ``.traj`` (None: not one)."""
    if not isinstance(data, dict) or not isinstance(data.get("trajectory"), list):
        return None
    steps = data["trajectory"]
    if not all(isinstance(s, dict) for s in steps) or (steps and not any("action" in s for s in steps)):
        return None
    return "a 'trajectory' list of steps with 'action'" if steps else "an empty 'trajectory' list"


def _state(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str) and raw.strip():
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}
    return {}


def _split(line: str) -> list[str]:
    return split_words(line)


def command_args(action: str) -> tuple[str, dict[str, Any]]:
    """(tool, arguments) of a command-style action; the raw line stays under ``action``."""
    first_line = action.strip().split("\n", 1)[0]
    words = _split(first_line)
    if not words or words[0] not in COMMANDS:
        return "bash", {"command": action.strip()}
    name, rest = words[0], words[1:]
    args: dict[str, Any] = {"action": action.strip()}
    if name == "open":
        if rest:
            args["path"] = rest[0]
        if len(rest) > 1:
            args["line_number"] = rest[1]
    elif name == "goto" and rest:
        args["line_number"] = rest[0]
    elif name in ("search_dir", "find_file"):
        if rest:
            args["search_term" if name == "search_dir" else "file_name"] = rest[0]
        if len(rest) > 1:
            args["dir"] = rest[1]
    elif name == "search_file":
        if rest:
            args["search_term"] = rest[0]
        if len(rest) > 1:
            args["file"] = rest[1]
    elif name in ("create", "filemap") and rest:
        args["path"] = rest[0]
    elif name in ("edit", "insert") and rest:
        args["lines"] = rest[0]
    elif name == "str_replace_editor":
        words = _split(action.strip())[1:]
        if words:
            args["command"] = words[0]
        if len(words) > 1:
            args["path"] = words[1]
        i = 2
        while i < len(words):
            w = words[i]
            if w == "--view_range" and i + 2 < len(words):
                args["view_range"] = [_num(words[i + 1]), _num(words[i + 2])]
                i += 3
                continue
            if w.startswith("--") and i + 1 < len(words):
                args[w[2:]] = words[i + 1]
                i += 2
                continue
            i += 1
    return name, args


def _num(text: str) -> int | str:
    try:
        return int(text)
    except ValueError:
        return text


def _tool_calls(history: list[Any]) -> list[dict[str, Any] | None]:
    """The tool call of each non-demo assistant message that carries an action, in order."""
    out: list[dict[str, Any] | None] = []
    for h in history:
        if not isinstance(h, dict) or h.get("role") != "assistant" or h.get("is_demo"):
            continue
        if h.get("agent") not in (None, "primary", "main"):
            continue
        calls = h.get("tool_calls") or []
        out.append(calls[0] if calls and isinstance(calls[0], dict) else None)
    return out


def _call_args(call: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    fn = call.get("function") or {}
    name = fn.get("name")
    if not isinstance(name, str):
        return None
    raw = fn.get("arguments", {})
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            return None
    return name, raw if isinstance(raw, dict) else {}


def _model(data: dict[str, Any]) -> str:
    raw = data.get("replay_config")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            raw = None
    if isinstance(raw, dict):
        model = (raw.get("agent") or {}).get("model") or {}
        if isinstance(model, dict) and model.get("name"):
            return str(model["name"])
    return ""


def parse(data: Any, name: str = "") -> Trajectory:
    """A SWE-agent ``.traj`` object as a :class:`Trajectory`."""
    if not isinstance(data, dict) or not isinstance(data.get("trajectory"), list):
        raise BadInput("unknown shape", "no 'trajectory' list (not a SWE-agent .traj)")
    raw_steps = [s for s in data["trajectory"] if isinstance(s, dict)]
    history = data.get("history") if isinstance(data.get("history"), list) else []
    info = data.get("info") if isinstance(data.get("info"), dict) else {}
    calls = _tool_calls(history)
    function_calling = any(c is not None for c in calls)
    aligned = function_calling and len(calls) == len(raw_steps)
    states = [_state(s.get("state")) for s in raw_steps]
    root = next((st["working_dir"] for st in states if text_or_none(st.get("working_dir"))), None)
    if root is None:
        for h in history:
            m = _CURRENT_DIR.search(text_of(h.get("content")) if isinstance(h, dict) else "")
            if m:
                root = m.group(1).strip()
                break
    steps: list[SourceStep] = []
    timed = False
    for i, raw in enumerate(raw_steps):
        action = str(raw.get("action") or "").strip()
        if not action or _SCAFFOLD_EXITS.match(action):
            continue  # the scaffold ended the run; not an agent action
        before = states[i - 1] if i else states[i]
        if aligned and calls[i] is not None:
            parsed = _call_args(calls[i])  # type: ignore[arg-type]
            tool, args = parsed if parsed else command_args(action)
        else:
            tool, args = command_args(action)
        if tool == "bash" and "command" not in args:
            args = {"command": action}
        t = raw.get("execution_time")
        timed = timed or isinstance(t, (int, float))
        open_file, working = before.get("open_file"), before.get("working_dir")
        steps.append(SourceStep(
            tool=tool, args=args, thought=str(raw.get("thought") or ""),
            response=str(raw.get("response") or ""), observation=str(raw.get("observation") or ""),
            cwd=text_or_none(working) or root,
            open_file=text_or_none(open_file) if open_file != "n/a" else None,
            duration_s=float(t) if isinstance(t, (int, float)) else None,
        ))
    if not steps:
        raise BadInput("empty trajectory", "no agent steps in 'trajectory'")
    system = next((text_of(h.get("content")) for h in history if isinstance(h, dict)
                   and h.get("role") == "system"), "")
    task = next((text_of(h.get("content")) for h in history if isinstance(h, dict)
                 and h.get("role") == "user" and not h.get("is_demo")), "")
    stats = info.get("model_stats") if isinstance(info.get("model_stats"), dict) else {}
    last = steps[-1]
    final = last.thought.strip() if (last.tool in ("submit", "exit_forfeit")) else None
    stem = name.rsplit("/", 1)[-1].removesuffix(".traj") if name else None
    return Trajectory(
        steps=steps, agent=AGENT, agent_version=str(info.get("swe_agent_version") or ""),
        instance=stem, model=_model(data), task_prompt=task, system_prompt=system,
        exit_status=info.get("exit_status"), submission=info.get("submission") or None,
        final_message=final or None,
        totals={"cost_usd": stats.get("instance_cost"), "tokens_in": stats.get("tokens_sent"),
                "tokens_out": stats.get("tokens_received"), "api_calls": stats.get("api_calls")},
        timing="execution" if timed else "none", root=root,
        mode="function_calling" if function_calling else "commands",
    )
