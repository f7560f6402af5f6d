"""The generic JSONL chat format (documented in ``docs/importing.md``).

One JSON object per line, each with a ``role``:

* ``meta`` (optional, any line): ``agent``, ``agent_version``, ``model``, ``instance``,
  ``task``, ``root`` (the repository folder the agent's paths start from), ``repo``,
  ``started_at``;
* ``system`` and ``user``: ``content`` (the first user message is the task);
* ``assistant``: ``content`` (the agent's thought or final answer) and optional ``tool_calls``,
  each ``{"id", "name", "arguments"}`` or OpenAI's ``{"id", "function": {"name",
  "arguments"}}`` (arguments an object or a JSON string); optional ``timestamp`` (seconds),
  ``latency_s``, ``tokens_in``, ``tokens_out``, ``cost``;
* ``tool``: ``content`` (the observation), ``tool_call_id``, optional ``exit_code``, ``cwd``,
  ``timestamp``;
* ``outcome`` (optional, last): ``exit_status``, ``submission``, ``conclusion``.

Each tool call is one step, answered by the ``tool`` message with its id (or the next
unanswered one). An assistant message without tool calls after the last step is the final
answer. Tool names go through the same mapping table as the named formats: ``bash`` runs a
shell command; ``read_file``, ``list_dir``, ``search``, ``find_file``, ``edit_file``,
``submit`` ... are read by their arguments (``path``, ``start_line``/``end_line``, ``query``).
"""

from __future__ import annotations

import json
from typing import Any

from adakit.importers.base import (
    BadInput,
    SourceStep,
    Trajectory,
    number_or_none,
    text_of,
    text_or_none,
)

FORMAT = "generic"
AGENT = "generic"
EXTENSIONS = (".jsonl",)
#: The files are JSON lines, one record a line.
LINES = True
ROLES = frozenset({"meta", "system", "user", "assistant", "tool", "outcome"})


def markers(records: Any) -> str | None:
    """The fields that make the lines of a JSONL file generic chat lines (None: not such)."""
    if not isinstance(records, list) or not records:
        return None
    if all(isinstance(r, dict) and isinstance(r.get("role"), str) and r["role"] in ROLES
           for r in records):
        return "a 'role' of " + "/".join(sorted(ROLES)) + " on every line"
    return None


def _calls(msg: dict[str, Any]) -> list[tuple[str | None, str, dict[str, Any]]]:
    out = []
    for c in msg.get("tool_calls") or []:
        if not isinstance(c, dict):
            continue
        fn = c.get("function") if isinstance(c.get("function"), dict) else c
        name = fn.get("name")
        raw = fn.get("arguments", {})
        if isinstance(raw, str):
            try:
                raw = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError:
                raw = {"command": raw} if name in ("bash", "shell") else {"raw": raw}
        if isinstance(name, str):
            out.append((c.get("id"), name, raw if isinstance(raw, dict) else {"value": raw}))
    return out


def parse(records: list[Any], name: str = "") -> Trajectory:
    """The lines of a generic JSONL file (already parsed) as a :class:`Trajectory`."""
    if not records:
        raise BadInput("empty trajectory", "no lines")
    def known(r: Any) -> bool:
        return isinstance(r, dict) and isinstance(r.get("role"), str) and r["role"] in ROLES

    if not all(known(r) for r in records):
        bad = next(r for r in records if not known(r))
        what = bad.get("role") if isinstance(bad, dict) else type(bad).__name__
        raise BadInput("unknown shape", f"a line with role {what!r} (expected {sorted(ROLES)})")
    meta: dict[str, Any] = {}
    outcome: dict[str, Any] = {}
    system = task = ""
    steps: list[SourceStep] = []
    pending: list[tuple[Any, SourceStep]] = []  # tool calls not answered yet, in order
    final: str | None = None
    last_time: float | None = None
    for r in records:
        role = r["role"]
        stamp = number_or_none(r.get("timestamp"))
        if role == "meta":
            meta.update({k: v for k, v in r.items() if k != "role"})
            last_time = number_or_none(meta.get("started_at")) or last_time
        elif role == "outcome":
            outcome.update(r)
        elif role == "system" and not system:
            system = text_of(r.get("content"))
        elif role == "user":
            if not task:
                task = text_of(r.get("content"))
            last_time = stamp or last_time
        elif role == "assistant":
            calls = _calls(r)
            text = text_of(r.get("content"))
            if not calls:
                final = text or final
                continue
            for k, (call_id, tool, args) in enumerate(calls):
                step = SourceStep(tool=tool, args=args, thought=text if k == 0 else "",
                                  response=text if k == 0 else "", started_at=last_time,
                                  ended_at=stamp, latency_s=number_or_none(r.get("latency_s")) or 0.0 if k == 0 else 0.0,
                                  tokens_in=int(r.get("tokens_in") or 0) if k == 0 else 0,
                                  tokens_out=int(r.get("tokens_out") or 0) if k == 0 else 0,
                                  cost_usd=number_or_none(r.get("cost")) if k == 0 else None,
                                  cwd=text_or_none(meta.get("root")))
                steps.append(step)
                pending.append((call_id, step))
            final = None  # a later answer-only message is the final one
            last_time = stamp or last_time
        elif role == "tool":
            if not pending:
                continue
            wanted = r.get("tool_call_id")
            at = next((k for k, (cid, _) in enumerate(pending) if wanted is not None
                       and cid == wanted), 0)
            step = pending.pop(at)[1]
            step.observation = text_of(r.get("content"))
            code = r.get("exit_code")
            step.exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
            step.cwd = text_or_none(r.get("cwd")) or step.cwd
            step.ended_at = stamp or step.ended_at
            last_time = stamp or last_time
    if not steps:
        raise BadInput("empty trajectory", "no tool calls")
    stem = name.rsplit("/", 1)[-1].removesuffix(".jsonl")
    timed = any(s.ended_at is not None for s in steps)
    return Trajectory(
        steps=steps, agent=str(meta.get("agent") or AGENT),
        agent_version=str(meta.get("agent_version") or ""),
        instance=str(meta.get("instance") or stem) or None, model=str(meta.get("model") or ""),
        task_prompt=str(meta.get("task") or task), system_prompt=system,
        exit_status=outcome.get("exit_status"), submission=outcome.get("submission") or None,
        final_message=str(outcome.get("conclusion") or final or "") or None,
        totals={"cost_usd": number_or_none(outcome.get("cost"))},
        started_at=steps[0].started_at, ended_at=steps[-1].ended_at,
        timing="recorded" if timed else "none", root=text_or_none(meta.get("root")),
        mode="chat", repo=text_or_none(meta.get("repo")),
    )
