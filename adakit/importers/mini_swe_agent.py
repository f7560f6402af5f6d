"""mini-swe-agent trajectories (``*.traj.json``).

A trajectory is a JSON object with ``messages`` (role/content chat messages) and ``info``
(``exit_status``, ``submission``, ``model_stats``, ``config``); older versions saved the bare
list of messages. Every action is one bash command, run in a fresh subshell in the
environment's folder:

* in the text style the assistant message holds one fenced block (```` ```bash ```` or
  ```` ```mswea_bash_command ````) and the next user message the result in
  ``<returncode>``/``<output>`` tags (``<output_head>``/``<output_tail>`` when it was cut);
* in the tool-calling style (v2) the assistant message carries ``tool_calls`` of the ``bash``
  tool and each result is a ``tool`` message (a JSON text with ``returncode`` and ``output``).

Messages may carry ``extra`` with ``timestamp``, ``cost``, ``raw_output`` and ``returncode``;
they are used when present. A reply the scaffold rejected (a format error) becomes a turn
without a tool call. The final ``exit`` message (or ``info``) gives the exit status and the
submission.
"""

from __future__ import annotations

import json
import re
from typing import Any

from adakit.importers.base import (
    BadInput,
    SourceStep,
    Trajectory,
    count_or_none,
    number_or_none,
    text_of,
)

FORMAT = "mini-swe-agent"
AGENT = "mini-swe-agent"
EXTENSIONS = (".traj.json", ".json")
# a fenced block with its language tag; scanning left to right pairs every opening fence with
# its closing one, so the closing fence of a ```python quote is never read as an opening
_FENCE = re.compile(r"```([\w-]*)[ \t]*\n(.*?)\n?```", re.S)
_SHELL_TAGS = frozenset({"bash", "mswea_bash_command", "sh", "shell"})
_TAG = {name: re.compile(rf"<{name}>\n?(.*?)\n?</{name}>", re.S)
        for name in ("returncode", "output", "output_head", "output_tail", "exception")}
_FORMAT_ERROR = re.compile(r"EXACTLY ONE (?:bash code block|action)|format error|"
                           r"did not (?:include|contain)|Expected exactly 1 action|"
                           r"No tool calls found", re.I)


def _extra(msg: dict[str, Any]) -> dict[str, Any]:
    extra = msg.get("extra")
    return extra if isinstance(extra, dict) else {}


def _observation(msg: dict[str, Any]) -> tuple[str, int | None, bool]:
    """(output text, return code, complete?) of an observation message."""
    extra = _extra(msg)
    content = text_of(msg.get("content"))
    if "raw_output" in extra:
        code = extra.get("returncode")
        return str(extra.get("raw_output") or ""), code if isinstance(code, int) else None, True
    stripped = content.strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict) and "returncode" in data:
            code = data.get("returncode")
            code = code if isinstance(code, int) else None
            if "output" in data:
                return str(data.get("output") or ""), code, True
            head, tail = str(data.get("output_head", "")), str(data.get("output_tail", ""))
            return f"{head}\n...\n{tail}", code, False
    rc = _TAG["returncode"].search(content)
    code = int(rc.group(1).strip()) if rc and rc.group(1).strip().lstrip("-").isdigit() else None
    out = _TAG["output"].search(content)
    if out:
        return out.group(1), code, True
    head, tail = _TAG["output_head"].search(content), _TAG["output_tail"].search(content)
    if head or tail:
        return f"{head.group(1) if head else ''}\n...\n{tail.group(1) if tail else ''}", code, False
    return content, code, rc is None


def _is_format_error(msg: dict[str, Any]) -> bool:
    extra = _extra(msg)
    if extra.get("interrupt_type") == "FormatError":
        return True
    return bool(_FORMAT_ERROR.search(text_of(msg.get("content"))[:600]))


def _actions(msg: dict[str, Any]) -> list[str]:
    calls = msg.get("tool_calls")
    if isinstance(calls, list) and calls:
        out = []
        for c in calls:
            fn = c.get("function", {}) if isinstance(c, dict) else {}
            raw = fn.get("arguments", "{}")
            try:
                args = json.loads(raw) if isinstance(raw, str) else raw
            except json.JSONDecodeError:
                args = {}
            if isinstance(args, dict) and isinstance(args.get("command"), str):
                out.append(args["command"])
        return out
    extra = _extra(msg)
    if isinstance(extra.get("actions"), list):
        return [a["command"] for a in extra["actions"] if isinstance(a, dict)
                and isinstance(a.get("command"), str)]
    blocks = _FENCE.findall(text_of(msg.get("content")))
    shell = [body.strip() for tag, body in blocks if tag in _SHELL_TAGS]
    # the scaffold runs only shell-tagged blocks; code quoted in the thought (```python ...) is
    # not an action. Untagged blocks count only in a reply without any tagged one.
    return shell or [body.strip() for tag, body in blocks if not tag]


def _thought(msg: dict[str, Any]) -> str:
    text = text_of(msg.get("content"))
    shell = next((m.start() for m in _FENCE.finditer(text) if m.group(1) in _SHELL_TAGS), -1)
    cut = shell if shell >= 0 else text.find("```")
    text = (text[:cut] if cut >= 0 else text).strip()
    return re.sub(r"^THOUGHT:\s*", "", text)


def markers(data: Any) -> str | None:
    """The fields that make ``data`` a mini-swe-agent trajectory (None: not one)."""
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        messages, where = data["messages"], "a 'messages' list"
    elif isinstance(data, list):
        messages, where = data, "a list"
    else:
        return None
    if messages and all(isinstance(m, dict) and "role" in m and "content" in m for m in messages):
        return f"{where} of chat messages with 'role' and 'content'"
    return None


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def parse(data: Any, name: str = "") -> Trajectory:
    """A mini-swe-agent trajectory (object with ``messages``, or a bare message list)."""
    if isinstance(data, list):
        messages, info, fmt = data, {}, "bare list"
    elif isinstance(data, dict) and isinstance(data.get("messages"), list):
        messages, info = data["messages"], data.get("info") if isinstance(data.get("info"), dict) else {}
        fmt = str(data.get("trajectory_format") or "")
    else:
        raise BadInput("unknown shape", "neither a 'messages' object nor a list of messages")
    if not all(isinstance(m, dict) and "role" in m for m in messages):
        raise BadInput("unknown shape", "messages without a 'role'")
    cwd = _get(info, "config", "environment", "cwd") or None
    if not cwd and any("/testbed" in text_of(m.get("content")) for m in messages[:3]):
        cwd = "/testbed"
    system = task = ""
    steps: list[SourceStep] = []
    exit_status = info.get("exit_status") or None
    submission = info.get("submission") or None
    last_time: float | None = None
    i = 0
    while i < len(messages):
        msg = messages[i]
        role = msg.get("role")
        extra = _extra(msg)
        if role == "system" and not system:
            system = text_of(msg.get("content"))
        elif role == "user" and not task and not steps:
            task = text_of(msg.get("content"))
        elif role == "exit":
            exit_status = extra.get("exit_status") or exit_status or text_of(msg.get("content"))
            submission = extra.get("submission") or submission
        elif role == "assistant":
            said = extra.get("timestamp") if isinstance(extra.get("timestamp"), (int, float)) else None
            if last_time is None:
                last_time = said  # the first reply: the run's first known time
            actions = _actions(msg)
            follow = []
            j = i + 1
            while j < len(messages) and messages[j].get("role") in ("user", "tool"):
                follow.append(messages[j])
                j += 1
            rejected = len(actions) != 1 and not msg.get("tool_calls") and not extra.get("actions")
            if not actions or rejected or (follow and _is_format_error(follow[0]) and len(actions) != 1):
                err = text_of(follow[0].get("content"))[:300] if follow else "no action"
                steps.append(SourceStep(response=text_of(msg.get("content")), thought=_thought(msg),
                                        parse_error=f"{len(actions)} actions: {err}",
                                        started_at=last_time, ended_at=said,
                                        cost_usd=number_or_none(extra.get("cost"))))
                last_time = said or last_time
                i = j
                continue
            usage = _get(extra, "response", "usage") or {}
            for k, command in enumerate(actions):
                obs_msg = follow[k] if k < len(follow) else {}
                out, code, complete = _observation(obs_msg) if obs_msg else ("", None, True)
                ended = _extra(obs_msg).get("timestamp") if obs_msg else None
                ended = ended if isinstance(ended, (int, float)) else said
                steps.append(SourceStep(
                    tool="bash", args={"command": command},
                    thought=_thought(msg) if k == 0 else "",
                    response=text_of(msg.get("content")) if k == 0 else "",
                    observation=out, observation_complete=complete, exit_code=code, cwd=cwd,
                    started_at=last_time, ended_at=ended,
                    latency_s=(said - last_time) if said and last_time and k == 0 else 0.0,
                    cost_usd=number_or_none(extra.get("cost")) if k == 0 else None,
                    tokens_in=int(usage.get("prompt_tokens") or 0) if k == 0 else 0,
                    tokens_out=int(usage.get("completion_tokens") or 0) if k == 0 else 0,
                ))
                last_time = ended or last_time
            i = j
            continue
        i += 1
    if not steps:
        raise BadInput("empty trajectory", "no assistant actions")
    timed = any(s.ended_at is not None for s in steps)
    stats = info.get("model_stats") if isinstance(info.get("model_stats"), dict) else {}
    model = (_get(info, "config", "model", "model_name") or _get(data, "model", "model_name")
             or _get(info, "model_name") or "")
    last = next((s for s in reversed(steps) if s.parse_error is None), steps[-1])
    stem = name.rsplit("/", 1)[-1]
    for ext in (".traj.json", ".json"):
        stem = stem.removesuffix(ext)
    if fmt == "bare list" and not exit_status:
        # v0 files end right after the completion echo: a submission without info
        if any("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in str(s.args.get("command", ""))
               or "MINI_SWE_AGENT_FINAL_OUTPUT" in str(s.args.get("command", "")) for s in steps[-1:]):
            exit_status = "Submitted"
    return Trajectory(
        steps=steps, agent=AGENT, agent_version=str(info.get("mini_version") or fmt or ""),
        instance=stem or None, model=str(model), task_prompt=task, system_prompt=system,
        exit_status=exit_status, submission=submission,
        final_message=last.thought or None,
        totals={"cost_usd": stats.get("instance_cost"), "api_calls": stats.get("api_calls")},
        started_at=steps[0].started_at or steps[0].ended_at, ended_at=steps[-1].ended_at,
        timing="recorded" if timed else "none", root=cwd,
        step_limit=count_or_none(_get(info, "config", "agent", "step_limit")) or None,
        mode="tool_calls" if any(m.get("tool_calls") for m in messages if isinstance(m, dict))
        else "text",
    )
