"""Readable renderings of one trajectory (for notebooks, the CLI and the explorer)."""

from __future__ import annotations

import html

from adakit.record import RunFile, Turn


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + f" [... {len(text) - limit} more chars]"


def turn_text(t: Turn, max_obs: int = 600) -> str:
    """One turn as plain text: thinking, call (or parse error), observation, injections."""
    head = f"--- turn {t.turn}  ({t.ended_at - t.started_at:.2f}s"
    head += f", {t.tokens_in} in / {t.tokens_out} out" if t.tokens_in or t.tokens_out else ""
    head += ", cached" if t.cached else ""
    head += ")"
    lines = [head]
    if t.thinking:
        lines.append("thinking: " + _clip(t.thinking, 400))
    if t.call is not None:
        args = ", ".join(f"{k}={v!r}" for k, v in t.call.params.items())
        lines.append(f"call: {t.metrics.tool or '?'} {t.call.tool}({_clip(args, 300)})")
    elif t.parse_error is not None:
        lines.append(f"parse error ({t.parse_error.kind}): {_clip(t.parse_error.message, 200)}")
    lines.append("observation:\n" + _clip(t.observation, max_obs))
    for inj in t.injected:
        lines.append(f"[{inj.source}] {_clip(inj.text, 300)}")
    if t.coach:
        lines.append(f"coach: {t.coach.get('decision')} {_clip(str(t.coach.get('message') or ''), 200)}")
    return "\n".join(lines)


def trajectory_text(rf: RunFile, max_obs: int = 600, max_turns: int | None = None) -> str:
    """A whole run as plain text: header line, turns, end."""
    h = rf.header
    lines = [
        f"run {h.run_id}: model={h.model.name} ({h.model.kind}) world={h.world.name} "
        f"task={h.task.family} condition={h.condition.name} N={h.turn_bound}",
        f"task: {_clip(h.task.prompt, 300)}",
    ]
    turns = rf.turns if max_turns is None else rf.turns[:max_turns]
    lines += [turn_text(t, max_obs) for t in turns]
    if max_turns is not None and len(rf.turns) > max_turns:
        lines.append(f"... {len(rf.turns) - max_turns} more turns")
    if rf.end:
        lines.append(f"=== end: {rf.end.reason} after {len(rf.turns)} turns")
        if rf.end.conclusion:
            lines.append("conclusion: " + _clip(rf.end.conclusion, 1200))
    else:
        lines.append("=== (unfinished: no end record yet)")
    return "\n".join(lines)


def trajectory_html(rf: RunFile, max_obs: int = 600, max_turns: int | None = None) -> str:
    """The same as :func:`trajectory_text`, as a preformatted HTML block."""
    body = html.escape(trajectory_text(rf, max_obs, max_turns))
    return f'<pre style="white-space: pre-wrap; font-size: 12px">{body}</pre>'
