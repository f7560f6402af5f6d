"""Next calls that would show a run something new, offered when it repeats a call.

A scaffold aid for small models (``repeat_guard: suggest``, a deviation from the paper, off by
default; docs/deviations.md). Under ``refuse`` a repeated call is not run and the reply says so;
a small model then often makes the same call again until the session ends. Under ``suggest`` the
same refusal also lists up to three ready-to-send calls the run has not made: the lines after
the furthest ones read in the file of the repeated call, then outlines of files not yet opened,
those in the same folder first, then the rest of the tree in its order. The suggestions come
from the run's own record and the world's file list, never from the task.
"""

from __future__ import annotations

from collections.abc import Iterable
from posixpath import dirname

from adakit.apparatus.tools import call_text
from adakit.apparatus.world import SandboxError, World
from adakit.record import ToolCall, Turn

#: How many calls a refusal under ``suggest`` offers at most.
SUGGESTIONS = 3
#: How many lines a suggested read asks for.
READ_LINES = 40
HEADING = "Calls that would show you something new (not made yet in this session):"


def _file_of(call: ToolCall) -> str | None:
    """The file a call works on, if any."""
    value = call.params.get("file_path") or call.params.get("current_file_path")
    return str(value) if value else None


def _opened(turns: Iterable[Turn]) -> tuple[dict[str, int], set[str]]:
    """Per file the last line read by a successful call, and the files any call opened."""
    furthest: dict[str, int] = {}
    opened: set[str] = set()
    for t in turns:
        m = t.metrics
        if t.call is None or m.error_type is not None or not m.file:
            continue
        opened.add(m.file)
        for _, end in m.ranges:
            furthest[m.file] = max(furthest.get(m.file, 0), end)
    return furthest, opened


def next_calls(world: World, turns: list[Turn], repeated: ToolCall, k: int = SUGGESTIONS) -> list[str]:
    """Up to ``k`` calls (as the agent writes them) that no earlier turn made: the next
    :data:`READ_LINES` lines after the furthest line read in the repeated call's file, then
    outlines of files no call has opened, the repeated file's folder first."""
    furthest, opened = _opened(turns)
    made = {(t.call.tool, tuple(sorted(t.call.params.items()))) for t in turns if t.call is not None}
    out: list[str] = []

    def offer(tool: str, **params: object) -> None:
        key = (tool, tuple(sorted(params.items())))
        if len(out) < k and key not in made:
            out.append(call_text(tool, **params))
            made.add(key)

    current = _in_world(world, _file_of(repeated))
    if current is not None and furthest.get(current, 0) < world.line_count(current):
        start = furthest.get(current, 0) + 1
        offer("peek_code_region", file_path=current, start_line=start,
              end_line=min(world.line_count(current), start + READ_LINES - 1))
    files = world.source_files() or world.files()
    here = dirname(current) if current is not None else None
    ordered = ([f for f in files if dirname(f) == here] if here is not None else []) + files
    for f in ordered:
        if len(out) >= k:
            break
        if f not in opened:
            offer("get_structural_overview", file_path=f)
    return out


def _in_world(world: World, path: str | None) -> str | None:
    """``path`` as the world's relative path, or None when there is none or the world refuses it."""
    if path is None:
        return None
    try:
        return world.rel(path)
    except (SandboxError, OSError, ValueError):
        return None


def suggestion_text(world: World, turns: list[Turn], repeated: ToolCall) -> str:
    """The block added to a refused repeat under ``suggest`` (empty when nothing is left)."""
    calls = next_calls(world, turns, repeated)
    if not calls:
        return ""
    return "\n".join([HEADING, *(f"{i}. {c}" for i, c in enumerate(calls, 1))])
