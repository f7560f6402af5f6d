"""The Agent Trajectory Interchange Format (ATIF, Harbor's RFC 0001), versions 1.4 to 1.7.

One JSON document a trajectory:

* ``schema_version`` (``ATIF-v1.4`` ... ``ATIF-v1.7``), ``session_id`` (optional from 1.7),
  ``agent`` (``name``, ``version``, ``model_name``, ``tool_definitions``, ``extra``),
  ``notes``, ``final_metrics``, ``extra``;
* ``steps``, numbered from 1 by ``step_id``, each from a ``source``: ``system`` (the system
  prompt), ``user`` (the first is the task) or ``agent``. An agent step has a ``message``
  (text, or from 1.6 a list of content parts), ``reasoning_content``, ``tool_calls``
  (``tool_call_id``, ``function_name``, ``arguments``, from 1.7 ``extra``), an
  ``observation`` whose ``results`` answer the calls by ``source_call_id``, ``metrics``
  (``prompt_tokens``, ``completion_tokens``, ``cost_usd``) and a ``timestamp``;
* from 1.7, ``subagent_trajectories``: embedded trajectories (each with a ``trajectory_id``)
  that an observation result names in its ``subagent_trajectory_ref``.

Each tool call is one step. Its function name is looked up in :data:`TOOL_NAMES`, the table
of the names ATIF producers use and the adakit tool each is read as (with its arguments
renamed); a name the mapping table already knows (``bash``, ``read_file``, ``Read``,
``str_replace_editor`` ...) is read as it is; any other is kept as ``other`` with its name.
The table can be extended: add entries to :data:`TOOL_NAMES`, or name a JSON file in the
environment variable ``ADAKIT_ATIF_TOOLS`` (see :func:`tool_names`). A call whose ``extra``
holds ``adakit`` (adakit's own export, :mod:`adakit.importers.atif_export`) carries its
canonical action, which is taken as recorded. An embedded subagent's steps follow the step
that delegated to it, marked as a sidechain span (:class:`~adakit.record.Sidechain`).
An agent step without ``tool_calls`` whose message carries its action (Terminus' JSON
``commands``, or ``<function=NAME>`` text of an agent run without function calling) is read
as that call (:func:`text_calls`), answered by the step's observation.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

from adakit.importers.base import BadInput, SourceStep, Trajectory, seconds, text_of
from adakit.importers.mapping import MAPPING_TABLE
from adakit.record import Sidechain

FORMAT = "atif"
AGENT = "atif"
EXTENSIONS = (".json",)
#: The files are one JSON document each.
LINES = False
#: The versions this reader was written for (others are read too, on the same fields).
VERSIONS = ("ATIF-v1.4", "ATIF-v1.5", "ATIF-v1.6", "ATIF-v1.7")
#: The environment variable naming a JSON file of more tool names (:func:`tool_names`).
TOOLS_ENV = "ADAKIT_ATIF_TOOLS"
#: The key of a tool call's (and the trajectory's) ``extra`` that adakit's export writes.
ADAKIT_KEY = "adakit"
#: The pseudo-tool a recorded canonical action is mapped by (``tool:recorded``).
RECORDED = "adakit:recorded"

#: ATIF function names -> (the tool name adakit reads the call as, arguments renamed).
TOOL_NAMES: dict[str, tuple[str, dict[str, str]]] = {
    "bash_command": ("bash", {"keystrokes": "command"}),  # keystrokes sent to a terminal
    "execute_commands": ("bash", {"commands": "command"}),
    "run_shell_command": ("bash", {}),
    "str_replace_based_edit_tool": ("str_replace_editor", {}),
    "text_editor": ("str_replace_editor", {}),
    "read_many_files": ("read_file", {}),
    "list_directory": ("list_dir", {}),
    "search_file_content": ("search", {"pattern": "query"}),
    "replace": ("edit_file", {}),
    "write_todos": ("TodoWrite", {}),
    "task_complete": ("submit", {}),
    "mark_task_complete": ("submit", {}),
}
#: Names the mapping table reads by themselves (its ``tool:`` rules, and the editor tools).
KNOWN_NAMES = frozenset(
    {n for r in MAPPING_TABLE if r.rule.startswith("tool:") and r.rule != "tool:recorded"
     for n in r.covers if ":" not in n} - {"other"}
    | {"str_replace_editor", "file_editor", "edit_file_tool"})
_ROOT = frozenset({"schema_version", "session_id", "trajectory_id", "agent", "steps", "notes",
                   "final_metrics", "extra", "subagent_trajectories"})
_STEP = frozenset({"step_id", "timestamp", "source", "model_name", "message",
                   "reasoning_content", "tool_calls", "observation", "metrics", "extra"})
_CALL = frozenset({"tool_call_id", "function_name", "arguments", "extra"})
_RESULT = frozenset({"source_call_id", "content", "subagent_trajectory_ref"})
_METRICS = frozenset({"prompt_tokens", "completion_tokens", "cost_usd"})


def markers(data: Any) -> str | None:
    """The fields that make a JSON document an ATIF trajectory (None: not one)."""
    if not isinstance(data, dict):
        return None
    version = data.get("schema_version")
    if isinstance(version, str) and version.startswith("ATIF-v") and isinstance(
            data.get("steps"), list) and isinstance(data.get("agent"), dict):
        return "a 'schema_version' ATIF-v*, an 'agent' and a 'steps' list"
    return None


def tool_names(env: dict[str, str] | None = None) -> dict[str, tuple[str, dict[str, str]]]:
    """:data:`TOOL_NAMES` with the entries of the JSON file ``ADAKIT_ATIF_TOOLS`` names
    (an object of function name -> tool name, or -> ``{"as": tool, "args": {from: to}}``);
    raises :class:`BadInput` (``bad tool table``) for a file that cannot be read so."""
    where = (os.environ if env is None else env).get(TOOLS_ENV, "").strip()
    table = dict(TOOL_NAMES)
    if not where:
        return table
    try:
        extra = json.loads(Path(where).expanduser().read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput("bad tool table", f"{TOOLS_ENV}={where}: {exc}") from None
    if not isinstance(extra, dict):
        raise BadInput("bad tool table", f"{TOOLS_ENV}={where}: not a JSON object")
    for name, entry in extra.items():
        if isinstance(entry, str):
            table[str(name)] = (entry, {})
        elif isinstance(entry, dict) and isinstance(entry.get("as"), str) and isinstance(
                entry.get("args", {}), dict):
            table[str(name)] = (entry["as"], {str(k): str(v) for k, v in entry.get("args", {}).items()})
        else:
            raise BadInput("bad tool table", f"{TOOLS_ENV}={where}: entry {name!r} is neither a "
                           "tool name nor {\"as\": NAME, \"args\": {...}}")
    return table


_TEXT_CALL = re.compile(r"<function=([\w.-]+)>(.*?)(?:</function>|\Z)", re.S)
_TEXT_PARAM = re.compile(r"<parameter=([\w.-]+)>(.*?)</parameter>", re.S)


def text_calls(message: str) -> list[dict[str, Any]]:
    """The tool calls an agent step without ``tool_calls`` wrote in its message: Terminus'
    JSON reply (``commands`` of ``keystrokes``, read as one ``bash_command``; an empty batch
    with ``task_complete`` as ``mark_task_complete``), or the ``<function=NAME>`` blocks with
    ``<parameter=KEY>`` values of agents prompted without function calling. None: []."""
    text = message.strip()
    if text.startswith("{"):
        try:
            reply = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            reply = None
        if isinstance(reply, dict) and isinstance(reply.get("commands"), list):
            keys = "".join(str(_dict(c).get("keystrokes") or "") for c in reply["commands"])
            if keys.strip():
                return [{"function_name": "bash_command", "arguments": {"keystrokes": keys.strip()}}]
            return [{"function_name": "mark_task_complete", "arguments": {}}] \
                if reply.get("task_complete") is True else []
    return [{"function_name": name, "arguments": {k: v.strip("\n") for k, v in
                                                  _TEXT_PARAM.findall(body)}}
            for name, body in _TEXT_CALL.findall(text)]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _content(value: Any) -> str:
    """A message or result content: text, or the text parts of a content-part list (1.6+)."""
    return text_of(value) if isinstance(value, (str, list)) else ""


class _Reader:
    """The reading state of one trajectory (and of the subagents embedded in it)."""

    def __init__(self, doc: dict[str, Any], table: dict[str, tuple[str, dict[str, str]]]) -> None:
        self.table = table
        self.steps: list[SourceStep] = []
        self.unused: Counter[str] = Counter()
        self.system = self.task = ""
        self.final: str | None = None
        self.said: dict[str, list[str]] = {}  # messages of steps without calls, by span
        self.prompts = 0
        self.embedded = {str(s.get("trajectory_id")): s for s in doc.get("subagent_trajectories")
                         or [] if isinstance(s, dict) and s.get("trajectory_id")}

    def trajectory(self, doc: dict[str, Any], side: Sidechain | None = None) -> None:
        self.unused.update(f"field:{k}" for k in doc if k not in _ROOT)
        steps = doc.get("steps")
        last: float | None = None
        for step in steps if isinstance(steps, list) else []:
            if not isinstance(step, dict):
                self.unused["type:not an object"] += 1
                continue
            last = self.step(step, side, last)

    def step(self, step: dict[str, Any], side: Sidechain | None, last: float | None) -> float | None:
        self.unused.update(f"field:step.{k}" for k in step if k not in _STEP)
        source, stamp = step.get("source"), seconds(step.get("timestamp"))
        message = _content(step.get("message"))
        if source == "system":
            if self.system or side is not None:
                self.unused["type:source:system (not the first)"] += 1
            self.system = self.system or (message if side is None else "")
        elif source == "user":
            self.prompts += side is None
            self.task = self.task or (message if side is None else "")
        elif source == "agent":
            self.agent(step, message, side, last, stamp)
        else:
            self.unused[f"type:source:{source}"] += 1
        return stamp or last

    def agent(self, step: dict[str, Any], message: str, side: Sidechain | None,
              last: float | None, stamp: float | None) -> None:
        calls = [c for c in step.get("tool_calls") or [] if isinstance(c, dict)]
        thought = str(step.get("reasoning_content") or "")
        mark = _dict(_dict(step.get("extra")).get(ADAKIT_KEY))
        metrics = _dict(step.get("metrics"))
        self.unused.update(f"field:metrics.{k}" for k in metrics if k not in _METRICS)
        chain = side.id if side else ""
        calls = calls or text_calls(message)
        if not calls and not mark.get("parse_error"):
            if message:  # a message between calls: part of the next call's thinking
                self.said.setdefault(chain, []).append(message)
                self.final = message if side is None else self.final
            return
        said = self.said.pop(chain, [])
        common = {"thought": "\n\n".join(t for t in (*said, thought, message) if t),
                  "response": message, "started_at": last or stamp, "ended_at": stamp,
                  "sidechain": side}
        results = [r for r in _dict(step.get("observation")).get("results") or []
                   if isinstance(r, dict)]
        if not calls:
            if mark.get("parse_error"):  # the answer to a malformed reply, if one was recorded
                told = "\n".join(_content(r.get("content")) for r in results)
                self.steps.append(SourceStep(**common, parse_error=str(mark["parse_error"]),
                                             observation=told,
                                             tokens_in=_count(metrics.get("prompt_tokens")),
                                             tokens_out=_count(metrics.get("completion_tokens"))))
            return
        by_id = {str(r["source_call_id"]): r for r in results if r.get("source_call_id")}
        loose = [r for r in results if not r.get("source_call_id")]
        for k, call in enumerate(calls):
            self.unused.update(f"field:tool_call.{x}" for x in call if x not in _CALL)
            result = by_id.get(str(call.get("tool_call_id"))) or (loose.pop(0) if loose else {})
            new = self.call(call, result, common if k == 0 else {**common, "thought": "",
                                                                   "response": ""})
            if k == 0:
                new.tokens_in = _count(metrics.get("prompt_tokens"))
                new.tokens_out = _count(metrics.get("completion_tokens"))
                cost = metrics.get("cost_usd")
                new.cost_usd = float(cost) if isinstance(cost, (int, float)) and not isinstance(
                    cost, bool) else None
            self.steps.append(new)
            self.subagents(result, len(self.steps), side)
        if side is None:
            self.final = None

    def call(self, call: dict[str, Any], result: dict[str, Any], common: dict[str, Any]) -> SourceStep:
        name = str(call.get("function_name") or "?")
        args = call.get("arguments")
        args = args if isinstance(args, dict) else {"value": args} if args is not None else {}
        self.unused.update(f"field:result.{x}" for x in result if x not in _RESULT and x != "extra")
        step = SourceStep(tool=name, args=args, observation=_content(result.get("content")), **common)
        recorded = _dict(_dict(call.get("extra")).get(ADAKIT_KEY))
        if recorded.get("tool"):
            step.mapped_as = (RECORDED, recorded)
            code = recorded.get("exit_code")
            step.exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
        elif name in self.table:
            tool, renames = self.table[name]
            step.mapped_as = (tool, {renames.get(k, k): v for k, v in args.items()})
        elif name not in KNOWN_NAMES:
            step.mapped_as = ("other", {"name": name})
        if _dict(result.get("extra")).get("is_error") is True:
            step.result = {"is_error": True}
        return step

    def subagents(self, result: dict[str, Any], parent: int, side: Sidechain | None) -> None:
        """The embedded subagents a result names, their steps after the delegating one."""
        for ref in result.get("subagent_trajectory_ref") or []:
            key = str(_dict(ref).get("trajectory_id") or "")
            sub = self.embedded.pop(key, None)
            if sub is None:
                if key or _dict(ref).get("trajectory_path"):
                    self.unused["field:subagent_trajectory_ref (not embedded)"] += 1
                continue
            kind = str(_dict(sub.get("agent")).get("name") or "")
            self.trajectory(sub, Sidechain(id=key, parent_turn=parent, agent=kind,
                                           depth=(side.depth + 1) if side else 1))


def parse(data: Any, name: str = "") -> Trajectory:
    """An ATIF document (already parsed) as a :class:`Trajectory`."""
    if not markers(data):
        raise BadInput("unknown shape", "not an ATIF trajectory (no 'schema_version' ATIF-v*, "
                       "'agent' object and 'steps' list)")
    r = _Reader(data, tool_names())
    r.trajectory(data)
    if r.embedded:
        r.unused["field:subagent_trajectories (not referenced)"] += len(r.embedded)
    if not r.steps:
        raise BadInput("empty trajectory", "no tool calls")
    agent, mark = _dict(data.get("agent")), _dict(_dict(data.get("extra")).get(ADAKIT_KEY))
    final = _dict(data.get("final_metrics"))
    stem = name.rsplit("/", 1)[-1].removesuffix(".json")
    side = sum(1 for s in r.steps if s.sidechain is not None)
    return Trajectory(
        steps=r.steps, agent=str(agent.get("name") or AGENT),
        agent_version=str(agent.get("version") or ""),
        instance=str(data.get("session_id") or data.get("trajectory_id") or stem) or None,
        model=str(agent.get("model_name") or ""), task_prompt=r.task, system_prompt=r.system,
        exit_status=str(mark["exit_status"]) if mark.get("exit_status") else None,
        submission=str(mark["submission"]) if mark.get("submission") else None,
        final_message=r.final,
        totals={"cost_usd": final.get("total_cost_usd") if isinstance(
                    final.get("total_cost_usd"), (int, float)) else None,
                "user_prompts": r.prompts, "subagent_steps": side or None,
                "schema_version": str(data.get("schema_version"))},
        started_at=r.steps[0].started_at, ended_at=r.steps[-1].ended_at,
        timing="recorded" if any(s.ended_at is not None for s in r.steps) else "none",
        root=str(mark["root"]) if mark.get("root") else None, mode="trajectory",
        unused=dict(r.unused),
    )
