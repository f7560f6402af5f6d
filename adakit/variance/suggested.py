"""How much of a run's exploration the scaffold suggested: calls that take an offered call.

Under ``repeat_guard: suggest`` (and redraws with ``redraw_note``) a small model that repeats a
call is shown up to three calls it has not made yet (:mod:`adakit.apparatus.suggest`: the next
lines of the file, then outlines of unopened files in tree order). A run that then walks the
tree file by file may be following those offers rather than exploring. This module finds, for
every turn, the calls the model had just been offered and whether its call is one of them:

- a turn whose kept reply was redrawn with a note: the offers of that note, computed again from
  the run's earlier turns and the draw before the kept one (the note itself is not recorded);
- a turn after a refused repeat: the offers listed in that refusal's recorded observation.

The world (its file list and line counts) is needed for the first kind; a run whose world is
not given is measured on the second kind alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from adakit.apparatus.native import parse_native_reply
from adakit.apparatus.protocol import parse_reply
from adakit.apparatus.suggest import HEADING, next_calls
from adakit.apparatus.tools import TOOL_SPECS, call_text
from adakit.apparatus.world import World
from adakit.record import DRAW, RunFile, ToolCall, Turn

#: The columns of :func:`suggestion_uptake`.
UPTAKE_COLUMNS = ["run_id", "turn", "offered", "followed"]
_OFFER = re.compile(r"^\d+\. (<.*>)$")


def _key(call: ToolCall) -> str:
    """A call as the suggestions write it (values as text), for comparison."""
    return call_text(call.tool, **{k: call.params[k] for k in sorted(call.params)})


def _normal(text: str) -> str:
    """An offered call (one line of XML) in the form of :func:`_key` (parameters sorted)."""
    m = re.fullmatch(r"<(\w+)>(.*)</\1>", text.strip())
    if m is None:
        return text.strip()
    params = dict(re.findall(r"<(\w+)>(.*?)</\1>", m.group(2)))
    return call_text(m.group(1), **{k: params[k] for k in sorted(params)})


def offers_in(observation: str) -> list[str]:
    """The calls a refusal under ``suggest`` listed in its observation (normalised)."""
    lines = observation.splitlines()
    if HEADING not in lines:
        return []
    after = lines[lines.index(HEADING) + 1:]
    return [_normal(m.group(1)) for m in map(_OFFER.match, after) if m is not None]


def _draw_call(text: str, tool_format: str) -> ToolCall | None:
    parse = parse_native_reply if tool_format == "native" else parse_reply
    return parse(text, TOOL_SPECS).call


def _noted_offers(rf: RunFile, k: int, world: World | None) -> list[str]:
    """What the note of turn ``k``'s kept redraw offered (empty when it offered nothing)."""
    sc = rf.header.scaffold
    turn = rf.turns[k]
    draws = [c for c in turn.model_calls if c.purpose == DRAW]
    if world is None or len(draws) < 2 or not sc.get("redraw_note") or sc.get("repeat_guard") != "suggest":
        return []
    before = draws[-2]
    call = _draw_call(before.text or "", sc.get("tool_format", "xml"))
    if call is None:
        return []
    return [_normal(c) for c in next_calls(world, rf.turns[:k], call)]


def _shown(rf: RunFile, k: int, world: World | None) -> list[str]:
    """The calls offered to the model just before it wrote turn ``k``'s kept reply."""
    offered = _noted_offers(rf, k, world)
    prev: Turn | None = rf.turns[k - 1] if k > 0 else None
    if prev is not None and prev.metrics.error_type == "repeated":
        offered += offers_in(prev.observation)
    return offered


def suggestion_uptake(runs: Iterable[RunFile], worlds: Mapping[str, World] | None = None) -> pd.DataFrame:
    """One row per turn with a call: how many calls the model had just been offered, and
    whether its call is one of them (``worlds`` by name, for the offers of redraw notes)."""
    rows: list[dict[str, Any]] = []
    worlds = worlds or {}
    for rf in runs:
        world = worlds.get(rf.header.world.name)
        for k, t in enumerate(rf.turns):
            if t.call is None:
                continue
            offered = _shown(rf, k, world)
            rows.append({"run_id": rf.header.run_id, "turn": t.turn, "offered": len(offered),
                         "followed": bool(offered) and _key(t.call) in offered})
    return pd.DataFrame(rows, columns=UPTAKE_COLUMNS)

