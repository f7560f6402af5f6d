"""Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

Newer versions write one ``{timestamp, type, payload}`` object a line:

* ``session_meta``: the session's ``id``, ``cwd``, ``cli_version``, ``git``;
* ``turn_context``: per user turn, the ``cwd`` and ``model`` (early versions have none);
* ``response_item``: the model's conversation items, by ``payload.type``: ``message``
  (``role`` user or assistant, ``content`` blocks ``input_text``/``output_text``),
  ``reasoning`` (a ``summary`` of ``summary_text`` blocks; its ``encrypted_content`` is
  unreadable), ``function_call`` (``name``, JSON ``arguments``, ``call_id``) and its
  ``function_call_output`` (same ``call_id``), ``custom_tool_call`` (``apply_patch`` with
  the patch as ``input``) and its ``custom_tool_call_output``;
* ``event_msg``: the CLI's events; ``token_count`` gives the last reply's tokens,
  ``turn_aborted`` an interruption; the others repeat the items and are counted as unused;
* ``compacted``: the summary (``message``) that replaced the history.

The folder paths start from is the session's ``cwd`` (early versions: the ``<cwd>`` of the
first ``<environment_context>`` message).

Early versions write a first line ``{id, timestamp, instructions, git}`` and then the
response items bare (no wrapper, no timestamps; ``record_type`` state lines between).

Each call is one step. ``shell`` runs an argv list: ``["bash", "-lc", CMD]`` is the command
line ``CMD``, any other list its words joined; it goes through the shell mapping in the
call's ``workdir``. ``apply_patch`` (a custom tool, or ``shell`` with ``apply_patch`` as
its program) is an edit of the files the patch names; newer versions' ``shell_command``
(``command``) and ``exec_command`` (``cmd``) run one command line and are read like ``shell``;
``update_plan`` is a plan; any other tool is kept as ``other`` with its name. A line type
this reader does not know (``world_state`` ...) is counted in the drift account. A ``compacted`` line is a marked event (an
injection of source ``compaction``) on the step it followed (one before any step: the first).
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from typing import Any

from adakit.importers.base import (
    BadInput,
    SourceStep,
    Trajectory,
    mark_compaction,
    seconds,
    text_of,
)

FORMAT = "codex"
AGENT = "codex"
EXTENSIONS = (".jsonl",)
#: The files are JSON lines, one record a line.
LINES = True
WRAPPED = frozenset({"session_meta", "turn_context", "response_item", "event_msg", "compacted"})
ITEMS = frozenset({"message", "reasoning", "function_call", "function_call_output",
                   "custom_tool_call", "custom_tool_call_output", "local_shell_call"})
_SHELLS = frozenset({"bash", "sh", "zsh"})
_CONTEXT_TEXT = ("<environment_context>", "<user_instructions>", "# AGENTS.md")
_CWD = re.compile(r"<cwd>\s*([^<\n]+?)\s*</cwd>")
_EXIT = re.compile(r"^(?:Exit code:|Process exited with code) (-?\d+)\s*$", re.M)
#: Shell tools that take one command line (not an argv list), by the argument naming it.
_LINE_SHELLS = {"shell_command": "command", "exec_command": "cmd"}
_USED_PAYLOAD = {
    "session_meta": {"id", "cwd", "cli_version", "timestamp"},
    "turn_context": {"cwd", "model"},
    "compacted": {"message"},
}
_USED_ITEM = frozenset({"type", "role", "content", "summary", "name", "arguments", "call_id",
                        "input", "output", "id"})


def _kind(rec: dict[str, Any]) -> str:
    kind = rec.get("type")
    return kind if isinstance(kind, str) else ""


def markers(records: Any) -> str | None:
    """The fields that make the lines of a JSONL file a Codex CLI rollout (None: not one)."""
    if not isinstance(records, list) or not records or not all(isinstance(r, dict) for r in records):
        return None
    if all(_kind(r) and isinstance(r.get("payload"), dict) for r in records) and \
            any(_kind(r) in ("session_meta", "response_item") for r in records):
        # a line type newer than this reader (``world_state``, ``inter_agent_communication``
        # ...) is still such a line: it is counted in the drift account, not refused
        return "'timestamp'/'type'/'payload' lines of session_meta/response_item"
    head, rest = records[0], records[1:]
    if "id" in head and "instructions" in head and "type" not in head and rest and all(
            _kind(r) in ITEMS or "record_type" in r for r in rest):
        return "a session line with 'id' and 'instructions', then bare response items"
    return None


def command_line(argv: Any) -> str:
    """The command line a ``shell`` call's argv runs (``bash -lc CMD`` is ``CMD``)."""
    if isinstance(argv, str):
        return argv
    words = [str(w) for w in argv] if isinstance(argv, list) else []
    if len(words) >= 3 and words[0].rsplit("/", 1)[-1] in _SHELLS and words[1] in ("-c", "-lc"):
        return words[2]
    return shlex.join(words)


def _json_object(text: str) -> dict[str, Any] | None:
    """The JSON object a text holds (None: it holds none)."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _output(raw: Any) -> tuple[str, int | None]:
    """(text, exit code) of a call's output: a JSON ``{output, metadata: {exit_code}}``, or
    the newer plain text with an ``Exit code: N`` (``exec_command``: ``Process exited with
    code N``) header and an ``Output:`` line."""
    text = raw if isinstance(raw, str) else text_of(raw)
    try:
        data = json.loads(text) if text.lstrip().startswith("{") else None
    except (json.JSONDecodeError, RecursionError):
        data = None
    if isinstance(data, dict) and "output" in data:
        meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
        code = meta.get("exit_code")
        return str(data["output"]), code if isinstance(code, int) and not isinstance(code, bool) else None
    found = _EXIT.search(text[:200])
    if found and "\nOutput:\n" in text:
        return text.split("\nOutput:\n", 1)[1], int(found.group(1))
    return text, None


class _Rollout:
    """The reading state of one rollout (one pass over its lines)."""

    def __init__(self) -> None:
        self.steps: list[SourceStep] = []
        self.pending: dict[str, SourceStep] = {}
        self.thought: list[str] = []
        self.unused: Counter[str] = Counter()
        self.compaction: str | None = None
        self.compactions = 0
        self.task = ""
        self.final: str | None = None
        self.model = self.version = self.session = ""
        self.cwd: str | None = None
        self.root: str | None = None
        self.last_time: float | None = None
        self.aborted: str | None = None

    def line(self, rec: dict[str, Any]) -> None:
        kind, payload = _kind(rec), rec.get("payload")
        stamp = seconds(rec.get("timestamp"))
        if kind in WRAPPED and isinstance(payload, dict):
            used = _USED_PAYLOAD.get(str(kind))
            if used is not None:
                self.unused.update(f"field:{kind}.{k}" for k in payload if k not in used)
            if kind == "session_meta":
                self.session = str(payload.get("id") or self.session)
                self.version = str(payload.get("cli_version") or self.version)
                self.cwd = self.root = str(payload.get("cwd") or "") or self.root
            elif kind == "turn_context":
                self.model = str(payload.get("model") or self.model)
                self.cwd = str(payload.get("cwd") or "") or self.cwd
            elif kind == "response_item":
                self.item(payload, stamp)
            elif kind == "compacted":
                self.compactions += 1
                self.compaction = str(payload.get("message") or "")
            else:
                self.event(payload)
        elif kind in ITEMS:
            self.item(rec, stamp)
        elif "record_type" in rec or ("id" in rec and "instructions" in rec):
            self.session = self.session or str(rec.get("id") or "")
        else:
            self.unused[f"type:{kind}"] += 1
        self.last_time = stamp or self.last_time

    def event(self, payload: dict[str, Any]) -> None:
        kind = _kind(payload)
        if kind == "token_count":
            info = payload.get("info") if isinstance(payload.get("info"), dict) else {}
            last = info.get("last_token_usage") if isinstance(info.get("last_token_usage"), dict) else {}
            step = next((s for s in reversed(self.steps) if not s.tokens_in), None)
            if step is not None and last:
                step.tokens_in = int(last.get("input_tokens") or 0)
                step.tokens_out = int(last.get("output_tokens") or 0)
        elif kind == "turn_aborted":
            self.aborted = f"aborted ({payload.get('reason') or 'no reason given'})"
        else:
            self.unused[f"type:event_msg:{kind}"] += 1

    def item(self, item: dict[str, Any], stamp: float | None) -> None:
        kind = _kind(item)
        self.unused.update(f"field:{kind}.{k}" for k in item if k not in _USED_ITEM)
        if kind == "message":
            text = text_of(item.get("content")).strip()
            where = _CWD.search(text) if text.startswith("<environment_context>") else None
            if where:  # early rollouts name the folder only here
                self.root, self.cwd = self.root or where.group(1), self.cwd or where.group(1)
            if item.get("role") == "user" and text and not text.startswith(_CONTEXT_TEXT):
                self.task = self.task or text
            elif item.get("role") == "assistant" and text:
                self.thought.append(text)
                self.final = text
        elif kind == "reasoning":
            summary = item.get("summary")
            self.thought.extend(str(b.get("text") or "") for b in summary or []
                                if isinstance(b, dict))
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            self.call(item, stamp)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            step = self.pending.pop(str(item.get("call_id")), None)
            if step is not None:
                step.observation, step.exit_code = _output(item.get("output"))
                step.ended_at = stamp or step.ended_at
        else:
            self.unused[f"type:response_item:{kind}"] += 1

    def call(self, item: dict[str, Any], stamp: float | None) -> None:
        name = str(item.get("name") or ("shell" if item.get("type") == "local_shell_call" else "?"))
        raw = item.get("arguments", item.get("input", item.get("action")))
        args: dict[str, Any]
        if item.get("type") == "custom_tool_call":
            args = {"input": raw if isinstance(raw, str) else text_of(raw)}
            parsed = _json_object(args["input"]) if name != "apply_patch" else None
            args = parsed if parsed is not None else args  # a custom tool given JSON arguments
        else:
            try:
                parsed = json.loads(raw) if isinstance(raw, str) else raw
            except (json.JSONDecodeError, RecursionError):
                parsed = {"raw": raw}
            args = parsed if isinstance(parsed, dict) else {"value": parsed}
        cwd = str(args.get("workdir") or "") or self.cwd
        mapped = self._mapped_as(name, args)
        thought = "\n\n".join(t for t in self.thought if t)
        self.thought = []
        step = SourceStep(tool=name, args=args, thought=thought, response=thought, cwd=cwd,
                          started_at=self.last_time or stamp, ended_at=stamp, mapped_as=mapped)
        if self.compaction is not None:  # on the step it followed (the first: this one)
            mark_compaction(self.steps or [step], self.compaction)
            self.compaction = None
        self.steps.append(step)
        self.pending[str(item.get("call_id") or f"#{len(self.steps)}")] = step
        self.final = None

    def _mapped_as(self, name: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if name in ("shell", "container.exec", "local_shell"):
            argv = args.get("command")
            words = argv if isinstance(argv, list) else []
            if words and str(words[0]) == "apply_patch":
                return "apply_patch", {"input": str(words[1]) if len(words) > 1 else ""}
            line = command_line(argv)
            if line.lstrip().startswith("apply_patch"):  # apply_patch <<'EOF' ... (the patch inline)
                return "apply_patch", {"input": line}
            return "bash", {"command": line}
        if name in _LINE_SHELLS:  # newer versions: one command line, ``workdir`` beside it
            line = str(args.get(_LINE_SHELLS[name]) or "")
            if line.lstrip().startswith("apply_patch"):
                return "apply_patch", {"input": line}
            return "bash", {"command": line}
        if name in ("apply_patch", "update_plan"):
            return name, args
        return "other", {"name": name}


def parse(records: Any, name: str = "") -> Trajectory:
    """The lines of a Codex CLI rollout (already parsed) as a :class:`Trajectory`."""
    if not markers(records):
        raise BadInput("unknown shape", "not a Codex rollout (no session_meta/response_item "
                       "lines, nor a session line followed by response items)")
    r = _Rollout()
    for rec in records:
        r.line(rec)
    if not r.steps:
        raise BadInput("empty trajectory", "no tool calls")
    if r.compaction is not None:  # after the last step
        mark_compaction(r.steps, r.compaction)
    stem = name.rsplit("/", 1)[-1].removesuffix(".jsonl")
    return Trajectory(
        steps=r.steps, agent=AGENT, agent_version=r.version, instance=r.session or stem or None,
        model=r.model, task_prompt=r.task, final_message=r.final, exit_status=r.aborted,
        totals={"compactions": r.compactions or None},
        started_at=r.steps[0].started_at, ended_at=r.steps[-1].ended_at,
        timing="recorded" if any(s.ended_at is not None for s in r.steps) else "none",
        root=r.root, mode="rollout", unused=dict(r.unused),
    )
