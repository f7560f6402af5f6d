"""Readable renderings of one trajectory (for notebooks, the CLI and the explorer)."""

from __future__ import annotations

import html

from adakit.record import RunFile, Turn
from adakit.text import clip

#: What follows a clipped text in a rendering (``{n}``: the characters cut).
_INLINE_CUT = " [... {n} more chars]"


def turn_text(t: Turn, max_obs: int = 600) -> str:
    """One turn as plain text: thinking, call (or parse error), observation, injections."""
    head = f"--- turn {t.turn}  ({t.ended_at - t.started_at:.2f}s"
    head += f", {t.tokens_in} in / {t.tokens_out} out" if t.tokens_in or t.tokens_out else ""
    head += ", cached" if t.cached else ""
    head += ")"
    lines = [head]
    if t.thinking:
        lines.append("thinking: " + clip(t.thinking, 400, marker=_INLINE_CUT, within=False))
    if t.call is not None:
        args = ", ".join(f"{k}={v!r}" for k, v in t.call.params.items())
        args = clip(args, 300, marker=_INLINE_CUT, within=False)
        lines.append(f"call: {t.metrics.tool or '?'} {t.call.tool}({args})")
    elif t.parse_error is not None:
        message = clip(t.parse_error.message, 200, marker=_INLINE_CUT, within=False)
        lines.append(f"parse error ({t.parse_error.kind}): {message}")
    lines.append("observation:\n" + clip(t.observation, max_obs, marker=_INLINE_CUT, within=False))
    for inj in t.injected:
        lines.append(f"[{inj.source}] {clip(inj.text, 300, marker=_INLINE_CUT, within=False)}")
    if t.coach:
        message = clip(str(t.coach.get("message") or ""), 200, marker=_INLINE_CUT, within=False)
        lines.append(f"coach: {t.coach.get('decision')} {message}")
    return "\n".join(lines)


def trajectory_text(rf: RunFile, max_obs: int = 600, max_turns: int | None = None) -> str:
    """A whole run as plain text: header line, turns, end."""
    h = rf.header
    lines = [
        f"run {h.run_id}: model={h.model.name} ({h.model.kind}) world={h.world.name} "
        f"task={h.task.family} condition={h.condition.name} N={h.turn_bound}",
        f"task: {clip(h.task.prompt, 300, marker=_INLINE_CUT, within=False)}",
    ]
    turns = rf.turns if max_turns is None else rf.turns[:max_turns]
    lines += [turn_text(t, max_obs) for t in turns]
    if max_turns is not None and len(rf.turns) > max_turns:
        lines.append(f"... {len(rf.turns) - max_turns} more turns")
    if rf.end:
        lines.append(f"=== end: {rf.end.reason} after {len(rf.turns)} turns")
        if rf.end.conclusion:
            conclusion = clip(rf.end.conclusion, 1200, marker=_INLINE_CUT, within=False)
            lines.append("conclusion: " + conclusion)
    else:
        lines.append("=== (unfinished: no end record yet)")
    return "\n".join(lines)


def trajectory_html(rf: RunFile, max_obs: int = 600, max_turns: int | None = None) -> str:
    """The same as :func:`trajectory_text`, as a preformatted HTML block."""
    body = html.escape(trajectory_text(rf, max_obs, max_turns))
    return f'<pre style="white-space: pre-wrap; font-size: 12px">{body}</pre>'
