"""The run explorer: replay one recorded trajectory turn by turn (issue 6, notebook 30).

A trajectory ξ = <(x0, a0, o1), (x1, a1, o2), ...> (paper Eq. 3) is read here one turn at a
time: the thinking and tool call a_t, the observation o_t+1, what was injected into the next
prompt (budget reminders, coach messages), the state channels MEMORY / BOOKMARK / CONCLUSION
that the history x_t carried at that point, where the turn sits on the run's journey arc
(lens 1), and which code the run had read so far, drawn on the world's footprint map (lens 4).

Everything the explorer shows comes from pure functions that need no browser:

- choosing a run: :func:`select_runs`, :func:`axis_options`, :func:`default_run`;
- one turn: :func:`turn_record`, :func:`state_at` (the working state rebuilt from the recorded
  state changes, or by replaying the MEM/CON calls through :class:`adakit.apparatus.tools.Toolbox`
  without a world), :func:`reads_until`, :func:`read_ranges`, :func:`turn_sections_text`;
- jumping: :func:`jump_targets`, :func:`matching_turns`, :func:`step_match`;
- an imported run's subagents (``Turn.sidechain``) and compactions: :func:`span_turns`,
  :func:`span_of`, :func:`span_text` (where a turn stands among the spans), :func:`span_exit`
  and :func:`span_entry` (stepping from a span to the turn that started it and back); the
  arc draws each span on its own lane and each compaction as a dashed mark;
- anti-pattern detector firings (:mod:`adakit.diagnostics`) marked on the turn axis:
  :func:`run_firings`, :func:`firing_marks`, :func:`firing_jumps` (``detector:<name>`` jump
  targets), :func:`firing_strip_text` / :func:`firing_strip_html` (the strip under the slider);
- pictures: :func:`arc_data` / :func:`plot_arc`, :func:`map_values` / :func:`plot_turn_map`;
- forks (docs/forks.md): a run's fork points are the ``fork point`` jump target and a line of
  its summary; :func:`branch_options` lists, at a turn, the branches one can switch to (the
  forks made there, a fork's siblings at its turn K, and a fork's way back to its parent).

:class:`RunView` ties them together for one run; :func:`build_explorer` assembles the
ipywidgets interface; :func:`render_static` gives the same content as text and figures for a
fixed set of turns; :func:`explore` picks one of the two. Widgets are used only inside a live
Jupyter kernel with ipywidgets installed; ``interactive=False`` or the environment variable
``ADAKIT_EXPLORER=static`` force the static rendering (papermill, nbval, plain Python).
"""

from __future__ import annotations

import base64
import html
import io
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib import colormaps
from matplotlib import patheffects as pe
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Circle
from matplotlib.text import Text
from matplotlib.ticker import MaxNLocator

from adakit import figures
from adakit.apparatus.tools import Bookmark, Conclusion, Memory, Toolbox, WorkingState
from adakit.lenses import footprint as fp
from adakit.lenses import journey
from adakit.lenses.surface import distinct_lines
from adakit.record import (
    CANONICAL_ORDER,
    NAV,
    Corpus,
    RunFile,
    Sidechain,
    Turn,
    active_seconds,
    closed_run,
    load_corpus,
    merge_ranges,
    read_run,
)
from adakit.text import clip
from adakit.workbench.forks import branch_label, branches_of, parent_path_of
from adakit.workbench.search import SearchError, search

#: Environment variable: ``static`` forces the static rendering everywhere.
ENV_VAR = "ADAKIT_EXPLORER"
#: The run axes the explorer filters on, in selector order.
AXES: tuple[str, ...] = ("model", "world", "task", "condition")
#: The selector value that means "no filter on this axis".
ANY = "(any)"
STATE_TOOLS = frozenset({"create_memory", "bookmark", "stash_conclusion"})
HIGHLIGHT_COLOR = "#1F1F1F"
#: ``"turn"`` (the default) places each turn at its index; ``"time"`` at its start on the active
#: clock, used only when the run's turn times are meaningful (:func:`turn_times_meaningful`),
#: else the turn axis is drawn with a note; ``"auto"`` picks time exactly when meaningful.
Axis = Literal["turn", "time", "auto"]
#: A run's turn times are read as meaningful only if its median turn takes at least this long.
MIN_TURN_SECONDS = 0.05
#: Pictures are drawn at the size they are shown: this many pixels wide at this resolution,
#: with every text at least :data:`MIN_FONT_PX` pixels high.
PICTURE_PX = 460
DISPLAY_DPI = 100
MIN_FONT_PX = 10.0


@dataclass(frozen=True)
class DisplaySize:
    """How large the explorer draws one turn: its text, its pictures and where they sit."""

    name: str
    #: the turn text's base size, and the factor on every inline font size of the HTML
    text_px: int
    font_scale: float
    arc_px: int  # width of the journey arc
    map_px: int  # width of the footprint map
    min_font_px: float  # the smallest text of a picture
    #: the turn text scrolls inside a box this high (None: as high as its text)
    text_box_px: int | None
    #: the map beside the turn controls (True) or under the arc beside the text (False)
    map_beside_controls: bool


#: The notebook size: pictures at :data:`PICTURE_PX`, texts at 11-13 px.
NORMAL = DisplaySize("normal", 13, 1.0, PICTURE_PX, PICTURE_PX, MIN_FONT_PX, None, False)
#: The projector size (1280x720): larger type, the map beside the controls, the turn text in
#: a scrolling box, so the controls, the text, the arc and the map of one turn share a screen.
PRESENTATION = DisplaySize("presentation", 16, 1.3, 560, 430, 13.0, 230, True)


# --------------------------------------------------------------------------- choosing a run


def _selected(selection: Mapping[str, Any] | None) -> dict[str, Any]:
    out = {}
    for axis, value in (selection or {}).items():
        if axis not in AXES:
            raise ValueError(f"unknown run axis {axis!r}; the axes are {', '.join(AXES)}")
        if value is not None and value != ANY and value != "":
            out[axis] = value
    return out


def select_runs(runs: pd.DataFrame, **selection: Any) -> pd.DataFrame:
    """The runs matching every given axis value (None, "" or :data:`ANY` = no filter)."""
    chosen = _selected(selection)
    mask = pd.Series(True, index=runs.index)
    for axis, value in chosen.items():
        mask &= runs[axis] == value
    return runs[mask]


def axis_options(runs: pd.DataFrame, selection: Mapping[str, Any] | None = None) -> dict[str, list]:
    """For each axis, the values that still have runs given the selection on the *other*
    axes (faceted filtering), in the paper's display order."""
    chosen = _selected(selection)
    out: dict[str, list] = {}
    for axis in AXES:
        others = {k: v for k, v in chosen.items() if k != axis}
        out[axis] = figures.order_for(axis, select_runs(runs, **others)[axis].tolist())
    return out


#: Distinct tools and distinct files read a run needs to count as navigating (:func:`default_run`).
NAVIGATES = 2


def files_read(turns: pd.DataFrame) -> pd.Series:
    """Distinct files each run navigated into (a successful OVW, PKR or EXP call on a file),
    by run id; a bookmark or a failed call reads nothing."""
    ok = turns[turns["error_type"].isna()] if "error_type" in turns.columns else turns
    nav = ok[ok["tool"].isin(NAV) & ok["file"].notna()]
    return nav.groupby("run_id")["file"].nunique()


def default_run(runs: pd.DataFrame, turns: pd.DataFrame | None = None,
                reads: pd.DataFrame | None = None) -> str:
    """The run to open first: an instructive one.

    First a real model's run (not a scripted baseline) that read at least :data:`NAVIGATES`
    files (:func:`files_read`, given ``turns``) with as many distinct tools and ended with a
    conclusion, one it finalized of its own accord before one written on a closing turn; else
    a real model's run that reads that much without concluding, since exploring shows more
    than a lookup that concludes;
    else a real model's concluded run; else any concluded run; then the corpus order. Ties go
    to more distinct tools, then more lines shown (given ``reads``), then more files. A corpus
    of baselines only opens on its most instructive baseline run the same way.
    """
    if runs.empty:
        raise ValueError("the corpus has no runs to explore")
    order = runs.reset_index(drop=True)
    key = pd.DataFrame({"position": range(len(order))})
    kind = order["model_kind"] if "model_kind" in order.columns else pd.Series("", index=order.index)
    key["real"] = (kind != "baseline").astype(int)
    none = pd.Series(False, index=order.index)
    if "conclusion" in order.columns:  # finalized, or written on a closing turn (close_turn)
        concluded = order["conclusion"].fillna("").astype(str).str.len() > 0
    else:
        concluded = order["reason"].eq("finalize") if "reason" in order.columns else none
    key["concluded"] = concluded.astype(int).to_numpy()
    own = order["reason"].eq("finalize") if "reason" in order.columns else none
    closed = order["closed"].fillna(False).astype(bool) if "closed" in order.columns else none
    key["own"] = (concluded & own & ~closed).astype(int).to_numpy()
    key["tools"] = key["files"] = key["lines"] = 0
    if turns is not None and not turns.empty:
        ok = turns[turns["error_type"].isna()] if "error_type" in turns.columns else turns
        key["tools"] = _per_run(order, ok.groupby("run_id")["tool"].nunique())
        key["files"] = _per_run(order, files_read(turns))
    if reads is not None and not reads.empty:
        shown = (reads["end_line"] - reads["start_line"] + 1).groupby(reads["run_id"]).sum()
        key["lines"] = _per_run(order, shown)
    navigates = (key["tools"] >= NAVIGATES) & (key["files"] >= NAVIGATES)
    key["real_concluded_navigates"] = key["real"] & key["concluded"] & navigates
    key["real_own_navigates"] = key["real_concluded_navigates"] & key["own"]
    key["real_navigates"] = key["real"] & navigates
    key["real_concluded"] = key["real"] & key["concluded"]
    ranks = ["real_concluded_navigates", "real_own_navigates", "real_navigates",
             "real_concluded", "concluded", "real", "tools", "lines", "files"]
    key = key.sort_values([*ranks, "position"], ascending=[False] * len(ranks) + [True])
    return str(order["run_id"].iloc[int(key.index[0])])


def _per_run(order: pd.DataFrame, values: pd.Series) -> Any:
    return order["run_id"].map(values).fillna(0).astype(int).to_numpy()


def hidden_values(runs: pd.DataFrame, selection: Mapping[str, Any] | None = None,
                  axis: str = "model") -> list:
    """The values of ``axis`` (default: the models) in the corpus that the selection on the
    other axes leaves out of its menu, in display order (empty when nothing is hidden)."""
    shown = set(axis_options(runs, selection)[axis])
    return [v for v in figures.order_for(axis, runs[axis].tolist()) if v not in shown]


def hidden_note(runs: pd.DataFrame, selection: Mapping[str, Any] | None = None,
                axis: str = "model") -> str:
    """One line saying which ``axis`` values the other filters hide, and by which filters;
    empty when none is hidden."""
    hidden = hidden_values(runs, selection, axis)
    if not hidden:
        return ""
    filters = ", ".join(f"{k} = {v}" for k, v in _selected(selection).items() if k != axis)
    names = ", ".join(map(str, hidden))
    plural = f"{len(hidden)} {axis}s" if len(hidden) > 1 else f"1 {axis}"
    return (f"{plural} hidden by the filter {filters} (no runs there): {names}; "
            f"set the other menus to {ANY} to see every {axis}")


def run_label(run: Mapping[str, Any] | pd.Series) -> str:
    """A one-line label of a run for menus."""
    reason = run.get("reason")
    reason = reason if isinstance(reason, str) else "unfinished"
    return (f"{run['model']} · {run['world']} · {run['task']} · {run['condition']} · "
            f"r{run.get('repeat', 0)} ({run.get('n_turns', '?')} turns, {reason})")


def ordinal(n: int) -> str:
    """``n`` as an English ordinal word or number: "first" .. "tenth", then "11th", "22nd"."""
    words = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth",
             "ninth", "tenth"]
    if 1 <= n <= len(words):
        return words[n - 1]
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def turn_count_text(rf: RunFile) -> str:
    """How many turns a run took against its bound and what ended it, in words that name a
    closing turn (``close_turn``: one more turn, offered only to write the conclusion) as
    such, so "7 turns, bound 6" does not read as a bound broken."""
    n, bound = len(rf.turns), rf.header.turn_bound
    reason = rf.end.reason if rf.end else None
    ending = f"ended by {reason}" if reason else "unfinished (no end record)"
    plural = "turn" if n == 1 else "turns"
    if not closed_run(rf):
        return f"{n} {plural} (bound {bound}), {ending}"
    last = ordinal(rf.turns[-1].turn)
    if reason == "turn_bound":
        return (f"{n} turns: the bound of {bound}, then the {last} was the closing turn "
                f"(offered only to write the conclusion); {ending}")
    return (f"{n} turns (bound {bound}): the {last} was the closing turn (offered only to "
            f"write the conclusion); {ending}")


# --------------------------------------------------------------------------- one turn


def turn_record(rf: RunFile, turn: int) -> Turn:
    """The turn record numbered ``turn`` (1-based, as recorded)."""
    for t in rf.turns:
        if t.turn == turn:
            return t
    if not rf.turns:
        raise ValueError(f"run {rf.header.run_id} has no turns")
    raise ValueError(f"run {rf.header.run_id} has turns {rf.turns[0].turn}-{rf.turns[-1].turn}, "
                     f"not {turn}")


def turn_times_meaningful(rf: RunFile, min_seconds: float = MIN_TURN_SECONDS) -> bool:
    """Whether a run's turn times say something about the agent: not a scripted baseline
    (its turns take microseconds of Python), not every turn replayed from the response cache,
    and a median turn of at least ``min_seconds`` on the active clock."""
    if not rf.turns or rf.header.model.kind == "baseline":
        return False
    if all(t.cached for t in rf.turns):
        return False
    seconds = sorted(active_seconds(t) for t in rf.turns)
    return seconds[len(seconds) // 2] >= min_seconds


def resolve_axis(rf: RunFile, axis: str = "turn") -> tuple[Literal["turn", "time"], str]:
    """The arc axis drawn for a run and a note when it differs from the one asked for:
    ``"time"`` and ``"auto"`` give time only when :func:`turn_times_meaningful`."""
    if axis not in ("turn", "time", "auto"):
        raise ValueError(f"axis must be 'turn', 'time' or 'auto', not {axis!r}")
    if axis == "turn":
        return "turn", ""
    if turn_times_meaningful(rf):
        return "time", ""
    why = ("a scripted baseline's turns take ~0 s" if rf.header.model.kind == "baseline"
           else "its turn times are ~0 s or replayed")
    return "turn", (f"turn axis: {why}" if axis == "time" else "")


class _NoWorld:
    """Stands in for the world and code index when state calls are replayed: MEM and CON never
    read the world, so any use of it is a bug worth a loud error."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"replaying state changes must not read the world (asked for {name!r})")


def _copy(state: WorkingState) -> WorkingState:
    return WorkingState.from_dict(state.to_dict())


def turn_changes(turn: Turn, state: WorkingState | None = None) -> list[dict[str, Any]]:
    """The state changes a turn made: the recorded ones, or, for a record without them (e.g.
    a synthetic run), the ones its successful MEM/BKM/CON call makes on ``state``."""
    if turn.state_changes:
        return [dict(c) for c in turn.state_changes]
    call = turn.call
    if call is None or call.tool not in STATE_TOOLS or turn.metrics.error_type is not None:
        return []
    state = _copy(state) if state is not None else WorkingState()
    if call.tool == "bookmark":
        params = call.params
        file = turn.metrics.file or str(params.get("file_path", ""))
        try:
            line = int(params.get("line_number"))
        except (TypeError, ValueError):
            return []
        note = " ".join(str(params.get("note", "")).split())
        old = next((b for b in state.bookmarks if b.file == file and b.line == line), None)
        return [{"channel": "bookmark", "op": "update" if old else "add",
                 "id": old.id if old else len(state.bookmarks) + 1, "file": file, "line": line,
                 "note": note}]
    box = Toolbox(_NoWorld(), index=_NoWorld(), state=state)  # type: ignore[arg-type]
    return box.execute(call.tool, dict(call.params)).state_changes


def apply_change(state: WorkingState, change: Mapping[str, Any]) -> bool:
    """Apply one recorded state change to ``state``; False for a channel the working state
    does not have (such a change is left out)."""
    channel, op = change.get("channel"), change.get("op", "add")
    ident = int(change.get("id") or 0)
    if channel == "memory":
        old = next((m for m in state.memories if m.id == ident), None)
        if op == "update" and old is not None:
            old.content = change.get("content", old.content)
            old.confidence = change.get("confidence", old.confidence)
        else:
            state.memories.append(Memory(ident or len(state.memories) + 1,
                                         str(change.get("title", "")),
                                         str(change.get("content", "")), change.get("confidence")))
        return True
    if channel == "bookmark":
        old_b = next((b for b in state.bookmarks if b.id == ident), None)
        if op == "update" and old_b is not None:
            old_b.note = change.get("note", old_b.note)
        else:
            state.bookmarks.append(Bookmark(ident or len(state.bookmarks) + 1,
                                            str(change.get("file", "")),
                                            int(change.get("line") or 0),
                                            str(change.get("note", ""))))
        return True
    if channel == "conclusion":
        state.conclusions.append(Conclusion(ident or len(state.conclusions) + 1,
                                            str(change.get("title", "")),
                                            str(change.get("content", "")), change.get("scope"),
                                            bool(change.get("finalize", False))))
        return True
    return False


def state_at(rf: RunFile, turn: int) -> WorkingState:
    """The working state (memories, bookmarks, conclusions) after turn ``turn``: the changes of
    turns 1..turn replayed in order (``turn=0``: the empty state the run started with)."""
    state = WorkingState()
    for t in rf.turns:
        if t.turn > turn:
            break
        for change in turn_changes(t, state):
            apply_change(state, change)
    return state


def reads_until(reads: pd.DataFrame, run_id: str, turn: int) -> pd.DataFrame:
    """The reads table rows of one run made at turns 1..``turn``."""
    sel = (reads["run_id"] == run_id) & (pd.to_numeric(reads["turn"]) <= turn)
    return reads[sel].reset_index(drop=True)


def read_ranges(reads: pd.DataFrame) -> pd.DataFrame:
    """Per file of a reads table: merged line ranges (text), distinct lines, lines shown
    (repeats counted), reads and the last turn that read it; ordered by first read."""
    cols = ["file", "ranges", "distinct_lines", "lines_shown", "reads", "last_turn"]
    if reads.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    first = reads.groupby("file", sort=False)["turn"].min().sort_values(kind="stable")
    for file in first.index:
        r = reads[reads["file"] == file]
        merged = merge_ranges(list(zip(r["start_line"].astype(int), r["end_line"].astype(int),
                                 strict=True)))
        rows.append({
            "file": file,
            "ranges": ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in merged),
            "distinct_lines": sum(b - a + 1 for a, b in merged),
            "lines_shown": int((r["end_line"] - r["start_line"] + 1).sum()),
            "reads": len(r),
            "last_turn": int(r["turn"].max()),
        })
    return pd.DataFrame(rows, columns=cols)


# --------------------------------------------------------------------------- jumping


def _is_error(t: Turn) -> bool:
    return t.parse_error is not None or t.metrics.error_type is not None


def _error_kind(t: Turn) -> str | None:
    if t.metrics.error_type is not None:
        return t.metrics.error_type
    return "malformed" if t.parse_error is not None else None


def jump_targets(rf: RunFile) -> dict[str, list[int]]:
    """Turn numbers by what happened there: ``tool:OVW`` .. ``tool:CON`` (tools used; also
    ``tool:EDT`` / ``tool:EXE`` / ``tool:SUB`` in imported runs),
    ``error`` and ``error:<type>``, ``conclusion`` (CON calls), ``finalize`` (CON asking to
    end), ``state`` (a state channel changed), ``injected`` (reminder or coach text added),
    ``coach`` (a HINT or REJECT decision), ``compaction`` (the source scaffold compacted the
    history after the turn); in a run with subagents also ``main line`` (the run's own
    turns), ``subagent`` (every subagent turn) and ``span:<id>`` (one span's turns).
    ``error`` and ``conclusion`` are always present."""
    out: dict[str, list[int]] = {}
    for abbr in CANONICAL_ORDER:
        hits = [t.turn for t in rf.turns if t.metrics.tool == abbr and t.call is not None]
        if hits:
            out[f"tool:{abbr}"] = hits
    out["error"] = [t.turn for t in rf.turns if _is_error(t)]
    kinds = sorted({k for t in rf.turns if (k := _error_kind(t))})
    for kind in kinds:
        out[f"error:{kind}"] = [t.turn for t in rf.turns if _error_kind(t) == kind]
    out["conclusion"] = [t.turn for t in rf.turns if t.metrics.tool == "CON"
                         and t.metrics.error_type is None and t.call is not None]
    final = [t.turn for t in rf.turns if t.metrics.tool == "CON" and t.metrics.finalize]
    if final:
        out["finalize"] = final
    state, changed = WorkingState(), []
    for t in rf.turns:
        changes = turn_changes(t, state)
        for c in changes:
            apply_change(state, c)
        if changes:
            changed.append(t.turn)
    if changed:
        out["state"] = changed
    injected = [t.turn for t in rf.turns if t.injected]
    if injected:
        out["injected"] = injected
    coach = [t.turn for t in rf.turns if t.coach and t.coach.get("decision") in ("HINT", "REJECT")]
    if coach:
        out["coach"] = coach
    compacted = [t.turn for t in rf.turns if _compaction(t) is not None]
    if compacted:
        out["compaction"] = compacted
    spans = span_turns(rf)
    if spans:
        out[MAIN_LINE] = [t.turn for t in rf.turns if t.sidechain is None]
        out["subagent"] = [t.turn for t in rf.turns if t.sidechain is not None]
        for key, turns in spans.items():
            out[f"span:{key}"] = turns
    return out


#: The jump kind of a run's own turns, outside every subagent span.
MAIN_LINE = "main line"


def _compaction(t: Turn) -> str | None:
    """The summary of a compaction that followed turn ``t`` (None: there was none)."""
    texts = [i.text for i in t.injected if i.source == "compaction"]
    return "\n\n".join(texts) if texts else None


def span_turns(rf: RunFile) -> dict[str, list[int]]:
    """The turns of each subagent span (``Turn.sidechain``) of a run, by span id, spans in the
    order of their first turn (empty for a run without subagents)."""
    out: dict[str, list[int]] = {}
    for t in rf.turns:
        if t.sidechain is not None:
            out.setdefault(t.sidechain.id, []).append(t.turn)
    return out


def span_of(rf: RunFile, turn: int) -> Sidechain | None:
    """The subagent span ``turn`` belongs to (None: the main line)."""
    return turn_record(rf, turn).sidechain


def spans_started(rf: RunFile, turn: int) -> list[str]:
    """The spans the call of ``turn`` started (their ``parent_turn`` is ``turn``)."""
    return [key for key, turns in span_turns(rf).items()
            if (side := turn_record(rf, turns[0]).sidechain) is not None
            and side.parent_turn == turn]


def span_exit(rf: RunFile, turn: int) -> int | None:
    """Where stepping out of the span of ``turn`` goes: the turn that started the span (its
    ``parent_turn``), else the last turn before the span that is not in it; None on the main
    line."""
    side = span_of(rf, turn)
    if side is None:
        return None
    numbers = {t.turn for t in rf.turns}
    if side.parent_turn is not None and side.parent_turn in numbers:
        return side.parent_turn
    first = span_turns(rf)[side.id][0]
    before = [t.turn for t in rf.turns if t.turn < first
              and (t.sidechain is None or t.sidechain.id != side.id)]
    return before[-1] if before else None


def span_entry(rf: RunFile, turn: int) -> int | None:
    """Where stepping into a span from ``turn`` goes: the first turn of the first span that
    ``turn`` started; None when it started none."""
    started = spans_started(rf, turn)
    return span_turns(rf)[started[0]][0] if started else None


def span_text(rf: RunFile, turn: int) -> str:
    """Where ``turn`` stands among the run's subagent spans, in words ("" for a run without
    them): the span it is in (kind, depth, its place among the span's turns, the turn that
    started it), and the spans it started."""
    spans = span_turns(rf)
    if not spans:
        return ""
    side = span_of(rf, turn)
    lines = []
    if side is None:
        lines.append(f"on the main line ({len(spans)} subagent span{'s' * (len(spans) != 1)} "
                     "in this run)")
    else:
        turns = spans[side.id]
        kind = side.agent or "subagent"
        start = (f"started by turn {side.parent_turn}" if side.parent_turn is not None
                 else "the source does not say which turn started it")
        lines.append(f"in subagent span {side.id} ({kind}, depth {side.depth}): turn "
                     f"{turns.index(turn) + 1} of its {len(turns)} ({_turn_list(turns)}); "
                     f"{start}")
    for key in spans_started(rf, turn):
        first = turn_record(rf, spans[key][0]).sidechain
        kind = first.agent if first is not None and first.agent else "subagent"
        lines.append(f"started subagent span {key} ({kind}): {_turn_list(spans[key])}")
    return "\n".join(lines)


def _turn_list(turns: Sequence[int], limit: int = 8) -> str:
    shown = ", ".join(map(str, turns[:limit]))
    more = f", ... ({len(turns)} in all)" if len(turns) > limit else ""
    return f"turn{'s' * (len(turns) != 1)} {shown}{more}"


def matching_turns(rf: RunFile, kind: str) -> list[int]:
    """The turns of one :func:`jump_targets` kind; a bare tool abbreviation (``PKR``) or
    error type (``tool_error``) works too."""
    targets = jump_targets(rf)
    for key in (kind, f"tool:{kind}", f"error:{kind}"):
        if key in targets:
            return targets[key]
    known = {*targets, *CANONICAL_ORDER, "tool_error", "unknown_tool", "malformed", "model_error"}
    if kind in known:
        return []
    raise ValueError(f"unknown jump kind {kind!r}; this run has: {', '.join(targets)}")


def step_match(matches: Sequence[int], current: int, direction: int = 1) -> int | None:
    """The next (``direction`` > 0) or previous matching turn strictly after/before
    ``current``; None when there is none."""
    if direction > 0:
        later = [m for m in matches if m > current]
        return min(later) if later else None
    earlier = [m for m in matches if m < current]
    return max(earlier) if earlier else None


# --------------------------------------------------------------------------- detector firings


#: Hits listed in the explorer's search menu; the note says how many more there were.
SEARCH_SHOWN = 50


def hit_options(hits: pd.DataFrame, limit: int = SEARCH_SHOWN
                ) -> list[tuple[str, tuple[str, int] | None]]:
    """The search menu for hits of :func:`adakit.workbench.search.search`: a first "-" entry,
    then one (label, (run id, turn)) per hit turn, the fields of a turn on one entry."""
    options: list[tuple[str, tuple[str, int] | None]] = [("-", None)]
    if hits.empty:
        return options
    for (run_id, turn), group in hits.groupby(["run_id", "turn"], sort=False):
        if len(options) > limit:
            break
        fields = "+".join(group["field"])
        options.append((f"{run_id} · turn {turn} · {fields}: {clip(group['snippet'].iloc[0], 70)}",
                        (str(run_id), int(turn))))
    return options


def run_firings(rf: RunFile, thresholds: Mapping[str, Mapping[str, float]] | None = None
                ) -> pd.DataFrame:
    """The anti-pattern detector firings of one run file (:mod:`adakit.diagnostics`; frozen
    thresholds unless ``thresholds`` gives others, e.g. a corpus's calibrated ones)."""
    from adakit.diagnostics import detectors, steps

    found = steps.steps_of(rf)
    trace = steps.Trace(found, steps.facts_of(rf, found))
    th = {k: dict(v) for k, v in thresholds.items()} if thresholds else None
    return detectors.detect([trace], th)[0]


def firing_marks(firings: pd.DataFrame, run_id: str) -> list[dict[str, Any]]:
    """One run's firings as marks (detector, first_turn, last_turn, evidence), in turn order."""
    rows = firings[firings["run_id"] == run_id].sort_values(["first_turn", "detector"])
    return [{"detector": str(r.detector), "first_turn": int(r.first_turn),
             "last_turn": int(r.last_turn), "evidence": str(r.evidence)}
            for r in rows.itertuples(index=False)]


def firing_jumps(marks: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    """Jump targets ``detector:<name>``: the first turn of each firing of that detector."""
    out: dict[str, list[int]] = {}
    for m in marks:
        out.setdefault(f"detector:{m['detector']}", []).append(int(m["first_turn"]))
    return {k: sorted(set(v)) for k, v in out.items()}


def firings_at(marks: Sequence[Mapping[str, Any]], turn: int) -> list[Mapping[str, Any]]:
    """The firings whose turn span holds ``turn``."""
    return [m for m in marks if m["first_turn"] <= turn <= m["last_turn"]]


def firing_strip_text(marks: Sequence[Mapping[str, Any]], turn_numbers: Sequence[int],
                      current: int | None = None) -> str:
    """The firings as a text strip, one character per turn: the letter of the detector whose
    span covers it (``*`` for several, ``.`` for none), ``^`` under the current turn, and a key."""
    from adakit.diagnostics.detectors import DETECTOR_CODES

    cells = []
    for t in turn_numbers:
        here = {m["detector"] for m in firings_at(marks, t)}
        cells.append("." if not here else DETECTOR_CODES.get(next(iter(here)), "?")
                     if len(here) == 1 else "*")
    lines = ["turns " + "".join(cells)]
    if current is not None and current in turn_numbers:
        lines.append(" " * (6 + list(turn_numbers).index(current)) + "^")
    used = sorted({m["detector"] for m in marks})
    lines.append("key: " + (", ".join(f"{DETECTOR_CODES[d]} {d}" for d in used) or "no firings"))
    return "\n".join(lines)


def firing_strip_html(marks: Sequence[Mapping[str, Any]], turn_numbers: Sequence[int],
                      current: int | None = None, width_px: int = 300) -> str:
    """The firings as a strip under the turn slider: one coloured bar per firing over its turn
    span (its evidence as the tooltip), a dark tick at the current turn."""
    from adakit.diagnostics.detectors import DETECTOR_COLORS

    if not turn_numbers:
        return ""
    lo, hi = min(turn_numbers), max(turn_numbers)
    span = max(hi - lo + 1, 1)
    inner = width_px - 44  # the slider's track starts after its 36 px label

    def x(turn: float) -> float:
        return 40 + inner * (turn - lo) / span

    bars = []
    lanes: dict[str, int] = {}
    for m in marks:
        lane = lanes.setdefault(m["detector"], len(lanes))
        left, right = x(m["first_turn"]), x(m["last_turn"] + 1)
        bars.append(f"<div title='{html.escape(m['detector'] + ': ' + m['evidence'], quote=True)}'"
                    f" style='position:absolute;left:{left:.1f}px;width:{max(right - left, 3):.1f}px;"
                    f"top:{2 + 5 * lane}px;height:4px;"
                    f"background:{DETECTOR_COLORS.get(m['detector'], '#555')}'></div>")
    if current is not None:
        cx = x(current + 0.5)
        bars.append(f"<div style='position:absolute;left:{cx - 0.5:.1f}px;width:1px;top:0;"
                    f"height:{4 + 5 * max(len(lanes), 1)}px;background:{HIGHLIGHT_COLOR}'></div>")
    height = 6 + 5 * max(len(lanes), 1)
    key = " ".join(f"<span style='color:{DETECTOR_COLORS.get(d, '#555')}'>&#9632; {d}</span>"
                   for d in lanes) or "<span style='color:#777'>no detector fired in this run</span>"
    return (f"<div class='adakit-firings' style='position:relative;width:{width_px}px;"
            f"height:{height}px'>{''.join(bars)}</div>"
            f"<div style='font-size:11px;margin-left:40px'>{key}</div>")


# --------------------------------------------------------------------------- turn text

#: What follows a clipped text in a turn's sections, on a line of its own (``{n}``: chars cut).
_LINE_CUT = "\n[... {n} more chars]"


def _call_line(t: Turn) -> str:
    if t.call is None:
        return ""
    args = ", ".join(f"{k}={v!r}" for k, v in t.call.params.items())
    args = clip(args, 600, marker=_LINE_CUT, within=False)
    line = f"{t.metrics.tool or '?'}  {t.call.tool}({args})"
    m = t.metrics
    if m.mapped_by:  # an imported step: which mapping rule made it canonical, and where it read
        where = f" {m.file}" if m.file else ""
        where += "".join(f" L{a}-{b}" for a, b in m.ranges)
        line += f"\n  mapped by {m.mapped_by}{where}"
        if m.exit_code is not None:
            line += f", exit code {m.exit_code}"
    return line


def _state_lines(state: WorkingState, changed: list[dict[str, Any]]) -> str:
    text = state.render(memories=6, bookmarks=8, conclusions=3)
    marks = {(c.get("channel"), int(c.get("id") or 0)) for c in changed}
    out = []
    channel = None
    for line in text.splitlines():
        head = line.split(" ", 1)[0].rstrip(":")
        if head in ("MEMORY", "BOOKMARK", "CONCLUSION"):
            channel = head.lower()
        stripped = line.strip()
        ident = stripped[1:stripped.index("]")] if stripped.startswith("[") and "]" in stripped \
            else ""
        hit = ident.isdigit() and (channel, int(ident)) in marks
        out.append(("* " if hit else "  ") + line)
    return "\n".join(out)


def turn_sections(rf: RunFile, turn: int, reads: pd.DataFrame | None = None,
                  max_obs: int = 2500) -> dict[str, str]:
    """One turn as named text sections: header, subagent (where the turn stands among the
    run's subagent spans, :func:`span_text`), thinking, call, observation, injected, coach,
    state (after the turn; ``*`` marks entries changed by this turn) and reads (code read so
    far, when the corpus's ``reads`` table is given). Empty sections are left out."""
    t = turn_record(rf, turn)
    h = rf.header
    n = len(rf.turns)
    closing = " (the closing turn)" if t is rf.turns[-1] and closed_run(rf) else ""
    head = (f"turn {t.turn} of {n}{closing} · {h.model.name} ({h.model.kind}) · "
            f"{h.world.name} · {h.task.family} · {h.condition.name}")
    if turn_times_meaningful(rf):
        timing = (f"+{t.started_at - h.started_at:.1f} s from launch · "
                  f"this turn {t.ended_at - t.started_at:.2f} s")
    elif h.model.kind == "baseline":
        timing = "scripted baseline: no model time (turns take ~0 s)"
    else:
        timing = "turn times not meaningful (~0 s, or replayed)"
    if t.tokens_in or t.tokens_out:
        timing += f" · {t.tokens_in} tokens in / {t.tokens_out} out"
    if t.cached:
        timing += " · replayed from cache"
    if t.dropped_messages:
        timing += f" · {t.dropped_messages} old messages left out of the prompt"
    out = {"header": f"{head}\n{timing}"}
    spans = span_text(rf, turn)
    if spans:
        out["subagent"] = spans
    if t.thinking.strip():
        out["thinking"] = clip(t.thinking, 2000, marker=_LINE_CUT, within=False)
    if t.call is not None:
        out["call"] = _call_line(t)
    elif t.parse_error is not None:
        raw = clip(t.raw_text, 800, marker=_LINE_CUT, within=False)
        out["call"] = (f"no tool call: parse error ({t.parse_error.kind}) "
                       f"{t.parse_error.message}\nraw reply: {raw}")
    obs_head = f"[{t.metrics.error_type}] " if t.metrics.error_type else ""
    out["observation"] = obs_head + clip(t.observation, max_obs, marker=_LINE_CUT, within=False)
    if t.observation_chars is not None and t.observation_chars > len(t.observation):
        out["observation"] += f"\n(the source's observation had {t.observation_chars} characters)"
    if t.model_calls:
        out["observation"] += "\n" + "\n".join(
            f"(model call: {c.purpose} by {c.model}, {c.latency_s:.2f}s"
            + (f", error {c.error}" if c.error else "") + ")" for c in t.model_calls)
    if t.injected:
        out["injected"] = "\n".join(
            f"[{i.source}] " + (COMPACTION_NOTE if i.source == "compaction" else "")
            + clip(i.text, 800, marker=_LINE_CUT, within=False) for i in t.injected)
    if t.coach:
        decision = t.coach.get("decision")
        message = t.coach.get("message") or ""
        shown = clip(str(message), 800, marker=_LINE_CUT, within=False)
        out["coach"] = f"{decision}: {shown}" if message else str(decision)
    before = state_at(rf, turn - 1)
    changes = turn_changes(t, before)
    after = state_at(rf, turn)
    out["state"] = _state_lines(after, changes)
    if reads is not None:
        so_far = reads_until(reads, h.run_id, turn)
        table = read_ranges(so_far)
        if table.empty:
            out["reads"] = "nothing read yet"
        else:
            total = int(distinct_lines(so_far).sum())
            lines = [f"{len(table)} file(s), {total} distinct lines"]
            here = t.metrics.file
            for row in table.itertuples():
                mark = "> " if row.file == here else "  "
                lines.append(f"{mark}{row.file}: {row.ranges} ({row.distinct_lines} lines)")
            out["reads"] = "\n".join(lines)
    return out


#: What a compaction's summary is, said before it in a turn's injected section.
COMPACTION_NOTE = ("the source scaffold dropped the history up to here and put this summary "
                   "in its place:\n")

SECTION_TITLES = {
    "header": "", "subagent": "SUBAGENTS", "thinking": "THINKING", "call": "CALL",
    "observation": "OBSERVATION",
    "injected": "INJECTED INTO THE NEXT PROMPT", "coach": "COACH",
    "state": "STATE CHANNELS AFTER THIS TURN (* = changed here)",
    "reads": "CODE READ SO FAR (> = this turn's file)",
}


def turn_sections_text(rf: RunFile, turn: int, reads: pd.DataFrame | None = None,
                       max_obs: int = 2500) -> str:
    """:func:`turn_sections` as plain text."""
    parts = []
    for key, body in turn_sections(rf, turn, reads, max_obs).items():
        title = SECTION_TITLES.get(key, key.upper())
        parts.append(f"{title}\n{body}" if title else f"=== {body}")
    return "\n\n".join(parts)


#: Wrap text at word boundaries; break a word only when it alone is wider than the line
#: (JupyterLab's output area breaks preformatted text anywhere, mid-word).
WRAP = "white-space:pre-wrap;word-break:normal;overflow-wrap:anywhere;"
PRE_STYLE = f"{WRAP}margin:0;font-size:12px;line-height:1.4;"

def keep_hyphenated(escaped: str, longest: int = 30) -> str:
    """Escaped HTML text with each word of up to ``longest`` characters that holds a hyphen
    (``L546-667``, ``scikit-learn``) kept on one line: browsers break lines after a hyphen,
    which splits a line range or a name in two."""
    def keep(m: re.Match[str]) -> str:
        word = m.group(0)
        return f"<span style='white-space:nowrap'>{word}</span>" if len(word) <= longest \
            else word

    return re.sub(r"[^\s<>]*\w-\w[^\s<>]*", keep, escaped)


_SECTION_STYLE = {
    "call": "color:#0B3C5D;font-weight:bold", "coach": f"color:{figures.COACH_COLOR}",
    "injected": "color:#8A5A00", "subagent": f"color:{journey.SPAN_COLOR}",
}


def turn_html(rf: RunFile, turn: int, reads: pd.DataFrame | None = None,
              max_obs: int = 2500) -> str:
    """:func:`turn_sections` as an HTML fragment (errors in red, coach text in purple)."""
    t = turn_record(rf, turn)
    blocks = []
    for key, body in turn_sections(rf, turn, reads, max_obs).items():
        style = _SECTION_STYLE.get(key, "")
        if key == "observation" and _is_error(t):
            style = f"color:{figures.ERROR_COLOR}"
        if key == "call" and t.call is None:
            style = f"color:{figures.ERROR_COLOR}"
        title = SECTION_TITLES.get(key, key.upper())
        if key == "header":
            first, _, second = body.partition("\n")
            blocks.append(f"<div style='font-weight:bold;line-height:1.35;{WRAP}'>"
                          f"{keep_hyphenated(html.escape(first))}</div>"
                          f"<div style='font-size:12px;color:#555;line-height:1.35;"
                          f"margin-top:2px;{WRAP}'>{keep_hyphenated(html.escape(second))}</div>")
            continue
        blocks.append(
            f"<div style='margin-top:8px;font-size:11px;color:#555'>{html.escape(title)}</div>"
            f"<pre style='{PRE_STYLE}{style}'>{keep_hyphenated(html.escape(body))}</pre>")
    return "<div>" + "".join(blocks) + "</div>"


# --------------------------------------------------------------------------- journey arc


def arc_data(corpus: Corpus, run_id: str, turn: int,
             axis: Literal["turn", "time"] = "turn") -> pd.DataFrame:
    """Lens 1's events of one run (:func:`adakit.lenses.journey.arc_events`) with ``x`` (the
    marker position: % of the run's time for ``axis="time"``, the turn for ``"turn"``),
    ``seen`` (turn <= ``turn``) and ``current`` (turn == ``turn``)."""
    if axis not in ("time", "turn"):
        raise ValueError(f"axis must be 'time' or 'turn', not {axis!r}")
    one = corpus.where(run_id=run_id)
    if one.runs.empty:
        raise ValueError(f"no run {run_id!r} in the corpus")
    ev = journey.arc_events(one)
    if ev.empty:
        return ev.assign(x=pd.Series(dtype=float), seen=pd.Series(dtype=bool),
                         current=pd.Series(dtype=bool))
    x = ev["turn"].astype(float) if axis == "turn" else 100.0 * ev["t_rel"].astype(float)
    return ev.assign(x=x.to_numpy(), seen=(ev["turn"] <= turn).to_numpy(),
                     current=(ev["turn"] == turn).to_numpy())


def plot_arc(arc: pd.DataFrame, runs: pd.DataFrame, axis: Literal["turn", "time"] = "turn",
             title: str | None = None, width_px: int = PICTURE_PX, dpi: int = DISPLAY_DPI,
             note: str = "", min_font_px: float = MIN_FONT_PX) -> Figure:
    """One run's journey arc (lens 1 markers) with the current turn ringed and the turns
    still to come faded, drawn ``width_px`` pixels wide at ``dpi`` (show it with
    :func:`figure_png` ``tight=False`` at that width) with every text at least
    ``min_font_px`` high. ``note`` goes under the title (e.g. why the turn axis)."""
    if arc.empty:
        raise ValueError("the run has no turns: no arc to draw")
    run_ids = set(arc["run_id"])
    if len(run_ids) != 1:
        raise ValueError(f"plot_arc draws one run; got {len(run_ids)}")
    fig = journey.plot_journey_arcs(arc, runs[runs["run_id"].isin(run_ids)], facet=None,
                                    axis=axis, scale="run", max_runs_per_panel=1,
                                    row_label=None, width=width_px / dpi)
    ax = fig.axes[0]
    if axis == "turn":
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=8))
        ax.set_title(ax.get_title(loc="right").replace("max = ", ""), loc="right")
    cur = arc[arc["current"]]
    spans = journey.span_lanes(arc)
    lanes = int(spans["lane"].max()) if not spans.empty else 0
    label = title
    if not cur.empty:
        x = float(cur["x"].iloc[0])
        later = arc.loc[arc["x"] > x, "x"]
        if not later.empty:
            right = ax.get_xlim()[1]
            start = (x + float(later.min())) / 2
            ax.axvspan(start, right, ymin=0.03, color="white", alpha=0.45, zorder=4,
                       linewidth=0)
        ax.axvline(x, color=HIGHLIGHT_COLOR, linewidth=0.8, linestyle=":", zorder=5)
        lane = int(journey.event_lanes(cur, spans)[0])
        ax.scatter([x], [journey.LANE_STEP * lane], s=260, facecolors="none",
                   edgecolors=HIGHLIGHT_COLOR, linewidths=1.6, zorder=6, gid="current")
        turn = int(cur["turn"].iloc[0])
        n = int(cur["n_turns"].iloc[0])
        where = ""
        if lane:
            span = spans[spans["sidechain"] == cur["sidechain"].iloc[0]].iloc[0]
            where = f" (subagent {span['agent'] or span['sidechain']})"
        label = title or f"turn {turn} of {n}{where}: {cur['kind'].astype(str).iloc[0]}"
    if note:
        label = f"{label}\n{note}" if label else note
    if label:
        ax.set_title(label, loc="left")
    # a legend that fits the width: as many columns as ~120 px allow
    handles = [h for legend in fig.legends for h in legend.legend_handles]
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    for legend in list(fig.legends):
        legend.remove()
    ncol = max(1, min(len(handles), int(width_px // 120)))
    rows = -(-len(handles) // ncol) if handles else 0
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=ncol,
                   handletextpad=0.3, columnspacing=0.8, frameon=False)
    grow = min_font_px / MIN_FONT_PX
    height_px = round((118 + 16 * rows + (16 if note else 0) + 24 * lanes) * grow)
    fig.set_size_inches(width_px / dpi, height_px / dpi)
    legible(fig, min_font_px, dpi=dpi)
    return fig


def legible(fig: Figure, min_px: float = MIN_FONT_PX, dpi: int = DISPLAY_DPI) -> Figure:
    """Raise every text of ``fig`` (titles, labels, ticks, legends, annotations) to at least
    ``min_px`` pixels at ``dpi``."""
    floor = min_px * 72.0 / dpi
    for ax in fig.axes:
        for which in ("x", "y"):
            ticks = ax.get_xticklabels() if which == "x" else ax.get_yticklabels()
            size = max([t.get_fontsize() for t in ticks] or [floor])
            ax.tick_params(axis=which, labelsize=max(size, floor))
    for text in fig.findobj(Text):
        if text.get_fontsize() < floor:
            text.set_fontsize(floor)
    return fig


def font_px(fig: Figure, dpi: int = DISPLAY_DPI) -> float:
    """The smallest font of the texts ``fig`` draws, in pixels at ``dpi``."""
    fig.canvas.draw()
    sizes = [t.get_fontsize() for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip()]
    return min(sizes) * dpi / 72.0 if sizes else float("inf")


# --------------------------------------------------------------------------- footprint map


def map_values(reads: pd.DataFrame, run_id: str, turn: int) -> pd.Series:
    """Lines shown per file by one run up to turn ``turn`` (lens 4's density of a single
    run), indexed by file."""
    so_far = reads_until(reads, run_id, turn)
    if so_far.empty:
        return pd.Series(dtype=float)
    dens = fp.trace_density(so_far)
    return dens.set_index("file")["lines_shown"].astype(float)


def outlined_until(turns: pd.DataFrame, run_id: str, turn: int) -> list[str]:
    """Files one run saw as a structural outline (OVW) at turns 1..``turn`` without an error,
    in first-seen order; with no lines shown they stay uncoloured on the map, while lens 0's
    census counts them as visited."""
    t = turns[(turns["run_id"] == run_id) & (pd.to_numeric(turns["turn"]) <= turn)
              & (turns["tool"] == "OVW") & turns["file"].notna()]
    if "error_type" in t.columns:
        t = t[t["error_type"].isna()]
    return list(dict.fromkeys(t["file"].astype(str)))


def touched_until(turns: pd.DataFrame, run_id: str, turn: int) -> list[str]:
    """Files one run's successful calls named (read, outlined, searched, bookmarked) at turns
    1..``turn``, in first-touched order."""
    t = turns[(turns["run_id"] == run_id) & (pd.to_numeric(turns["turn"]) <= turn)
              & turns["file"].notna()]
    if "error_type" in t.columns:
        t = t[t["error_type"].isna()]
    return list(dict.fromkeys(t["file"].astype(str)))


MAP_LEGEND = ("grey: no lines shown yet · dashed ring: outlined only (structure, no lines; "
              "the census counts it as visited) · black ring: this turn's file")


def _luminance(rgba: Sequence[float]) -> float:
    r, g, b = rgba[:3]
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _overlaps(box: Any, placed: Sequence[Any]) -> bool:
    return any(box.overlaps(other) for other in placed)


def _label_files(fig: Figure, ax: Any, lay: pd.DataFrame, values: pd.Series, cmap: Any,
                 norm: Any, top: int, touched: Sequence[str] = (),
                 current: str | None = None) -> list[str]:
    """Name up to ``top`` files: ``current`` (this turn's file), those with lines shown (most
    first), then the other files in ``touched``. A name sits inside its circle, in a colour that contrasts with the fill, when
    it fits; else just above the circle (or below), dark on a white halo, kept inside the map.
    A name that would cover another is left out; the names left out are returned."""
    files = lay[lay["kind"] == "file"].drop_duplicates("path").set_index("path")
    read = values[values > 0].sort_values(ascending=False, kind="stable")
    first = [current] if current else []
    order = [p for p in dict.fromkeys([*first, *read.index, *touched])
             if p in files.index][:max(top, 0)]
    if not order:
        return []
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    to_px = ax.transData
    halo = [pe.withStroke(linewidth=2.5, foreground="white")]
    placed = [t.get_window_extent(renderer) for t in ax.texts if t.get_text().strip()]
    lo, hi = ax.get_xlim()
    frame = max(ax.get_window_extent(renderer).width, 1.0)
    left_out = []
    for path in order:
        row = files.loc[path]
        v = float(values.get(path, 0.0))
        fill = cmap(norm(v)) if v > 0 else fp.UNVISITED_COLOR
        dark_fill = v > 0 and _luminance(fill) < 0.5
        text = ax.text(row["x"], row["y"], fp._short(str(row["name"]), 22), ha="center",
                       va="center", zorder=9, color="white" if dark_fill else "#1F1F1F")
        box = text.get_window_extent(renderer)
        diameter = abs(to_px.transform((row["r"], 0))[0] - to_px.transform((-row["r"], 0))[0])
        if box.width <= diameter * 0.92 and not _overlaps(box, placed):
            placed.append(box)
            continue
        half = (hi - lo) * box.width / frame / 2
        text.set_color("#1F1F1F")
        text.set_path_effects(halo)
        x = min(max(row["x"], lo + half), hi - half)
        for y, va in ((row["y"] + row["r"], "bottom"), (row["y"] - row["r"], "top")):
            text.set_position((x, y))
            text.set_verticalalignment(va)
            box = text.get_window_extent(renderer)
            if not _overlaps(box, placed):
                placed.append(box)
                break
        else:
            text.remove()
            left_out.append(path)
    return left_out


def _legend_lines(width_px: int, font_px: float) -> str:
    """:data:`MAP_LEGEND` broken into lines that fit ``width_px`` at ``font_px``."""
    import textwrap

    return "\n".join(textwrap.wrap(MAP_LEGEND, max(int(width_px / (0.56 * font_px)), 20)))


def plot_turn_map(files: pd.DataFrame, values: pd.Series, current_file: str | None = None,
                  layout: pd.DataFrame | None = None, title: str | None = None,
                  outlined: Sequence[str] = (), vmax: float | None = None,
                  label_top: int = 12, width_px: int = PICTURE_PX,
                  dpi: int = DISPLAY_DPI, touched: Sequence[str] = (),
                  min_font_px: float = MIN_FONT_PX) -> Figure:
    """The world's footprint map (lens 4) coloured by the lines read so far, drawn
    ``width_px`` wide at ``dpi`` with texts of at least ``min_font_px``: files outlined
    without lines (``outlined``) get a dashed ring, the current turn's file a black one; up
    to ``label_top`` files get their names (the current file, the files read, then the
    others the run ``touched``); the colour bar counts whole lines up to ``vmax`` (e.g.
    the run's final maximum, so colours mean the same at every turn)."""
    values = values.astype(float) if len(values) else pd.Series(dtype=float)
    lay = layout if layout is not None else fp.repo_layout(files, values)
    top = max(1.0, float(vmax) if vmax else float(values.max()) if len(values) else 1.0)
    fig = fp.plot_repo_map(files, values, layout=lay, title=title, label_top=0,
                           colorbar_label="lines shown so far", vmax=top)
    ax, bar = fig.axes[0], fig.axes[-1]
    bar.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))
    files_at = lay[lay["kind"] == "file"].drop_duplicates("path").set_index("path")
    shown = set(values[values > 0].index)
    for path in outlined:
        if path in files_at.index and path not in shown:
            row = files_at.loc[path]
            ax.add_patch(Circle((row["x"], row["y"]), max(row["r"], 0.012), fill=False,
                                edgecolor="#4D4D4D", linewidth=1.1, linestyle=(0, (2, 1.5)),
                                zorder=7))
    if current_file and current_file in files_at.index:
        row = files_at.loc[current_file]
        ax.add_patch(Circle((row["x"], row["y"]), max(row["r"], 0.012), fill=False,
                            edgecolor=HIGHLIGHT_COLOR, linewidth=2.0, zorder=8))
    height_px = width_px - 10
    fig.set_size_inches(width_px / dpi, height_px / dpi)
    legend = _legend_lines(width_px, min_font_px)
    text = fig.text(0.01, 0.005, legend, ha="left", va="bottom", color="#444444",
                    fontsize=min_font_px * 72.0 / dpi)
    bottom = (legend.count("\n") + 1) * min_font_px * 1.3 / height_px + 0.015
    fig.get_layout_engine().set(rect=(0, bottom, 1, 1 - bottom))
    legible(fig, min_font_px, dpi=dpi)
    norm = Normalize(0.0, top)
    _label_files(fig, ax, lay, values, colormaps[fp.DENSITY_CMAP], norm, label_top,
                 [*outlined, *touched], current_file)
    legible(fig, min_font_px, dpi=dpi)
    text.set_zorder(10)
    return fig


# --------------------------------------------------------------------------- one run


def _as_corpus(corpus: Corpus | str | Path) -> Corpus:
    if isinstance(corpus, Corpus):
        return corpus
    return load_corpus(corpus)


#: The jump target of the turns a run was forked at.
FORK_JUMP = "fork point"
#: The branch menu's value that goes back from a fork to its parent.
TO_PARENT = "parent"


def _run_path(run: Mapping[str, Any]) -> Path | None:
    path = run.get("path")
    return Path(str(path)) if isinstance(path, str | Path) and str(path) else None


class RunView:
    """One run prepared for stepping: its record, tidy rows, jump targets and map.

    ``files`` (a world files table, e.g. from :func:`adakit.lenses.footprint.map_files`) may
    be passed in to share it between runs of a world; otherwise it is built on first use,
    from the world on disk, or from the files the corpus read there when it is not fetched
    (``fetch_world=True`` downloads it instead).
    """

    def __init__(self, corpus: Corpus, run_id: str, axis: Axis = "turn",
                 fetch_world: bool = False, files: tuple[pd.DataFrame, str] | None = None,
                 run_file: RunFile | None = None, firings: pd.DataFrame | None = None) -> None:
        hit = corpus.runs[corpus.runs["run_id"] == run_id]
        if hit.empty:
            some = corpus.runs["run_id"].head(3).tolist()
            raise ValueError(f"no run {run_id!r} in the corpus ({len(corpus.runs)} runs, "
                             f"e.g. {some})")
        self.corpus = corpus
        self.run_id = run_id
        self.run = hit.iloc[0]
        self.fetch_world = fetch_world
        self.rf = run_file if run_file is not None else read_run(self.run["path"])
        #: the arc axis drawn (turn or time) and why it differs from the one asked for
        self.axis, self.axis_note = resolve_axis(self.rf, axis)
        self.reads = corpus.reads[corpus.reads["run_id"] == run_id].reset_index(drop=True)
        self.jumps = jump_targets(self.rf)
        #: the run's detector firings (``firings``, e.g. from ``adakit diagnose``, else found
        #: here with the frozen thresholds), marked under the turn slider
        self.firings = firing_marks(firings if firings is not None else run_firings(self.rf),
                                    run_id)
        self.jumps.update(firing_jumps(self.firings))
        path = _run_path(self.run)
        #: the recorded forks of this run (:func:`adakit.workbench.forks.branches_of`)
        self.branches = branches_of(path if path is not None else "/", run_id)
        #: where this run was forked from, when it is a fork
        self.forked_from = self.rf.header.forked_from
        if len(self.branches):
            self.jumps[FORK_JUMP] = sorted({int(a) for a in self.branches["at"]})
        self._files = files
        self._layout: pd.DataFrame | None = None

    def fork_text(self) -> str:
        """Where the run forks and what it was forked from, in a line each ("" for neither)."""
        lines = []
        if self.forked_from is not None:
            f = self.forked_from
            change = "placebo" if f.change == "placebo" else f"{f.change} {f.value}"
            lines.append(f"a fork of {f.parent} at turn {f.turn} ({change}): turns 1-{f.turn} "
                         "are the parent's")
        if len(self.branches):
            sets = [f"turn {at}: {len(d)} branch{'es' * (len(d) != 1)} "
                    f"({', '.join(sorted(set(d['treatment'])))})"
                    for at, d in self.branches.groupby("at", sort=True)]
            lines.append("forked at " + "; ".join(sets))
        return "\n".join(lines)

    @property
    def n_turns(self) -> int:
        """Turn records in the run."""
        return len(self.rf.turns)

    @property
    def turn_numbers(self) -> list[int]:
        """The recorded turn numbers, in order."""
        return [t.turn for t in self.rf.turns]

    def summary(self) -> str:
        """The run in two lines: its axes and how it ended."""
        h, end = self.rf.header, self.rf.end
        second = turn_count_text(self.rf)
        if end and end.error:
            second += f" ({clip(end.error, 200, marker=_LINE_CUT, within=False)})"
        world = f"{h.world.name} {h.world.version}".strip()
        first = f"{self.run_id}: {h.model.name} ({h.model.kind}) on {world}, " \
                f"task {h.task.family}, condition {h.condition.name}"
        if end and end.conclusion:
            conclusion = clip(end.conclusion, 300, marker=_LINE_CUT, within=False)
            second += f"; conclusion: {conclusion}"
        forks = self.fork_text()
        return f"{first}\n{second}" + (f"\n{forks}" if forks else "")

    def state(self, turn: int) -> WorkingState:
        """The working state after ``turn`` (:func:`state_at`)."""
        return state_at(self.rf, turn)

    def firing_note(self, turn: int) -> str:
        """The detector firings whose span holds ``turn``, one line each ("" for none)."""
        return "\n".join(f"{m['detector']} (turns {m['first_turn']}-{m['last_turn']}): "
                         f"{m['evidence']}" for m in firings_at(self.firings, turn))

    def text(self, turn: int) -> str:
        """The turn as plain text, with the code read so far (:func:`turn_sections_text`) and
        the detector firings it lies in."""
        note = self.firing_note(turn)
        firings = f"\nDETECTOR FIRINGS\n{note}" if note else ""
        return turn_sections_text(self.rf, turn, self.reads) + firings

    def html(self, turn: int) -> str:
        """The turn as HTML (:func:`turn_html`), with the detector firings it lies in."""
        note = self.firing_note(turn)
        extra = (f"<div style='margin-top:8px;font-size:11px;color:#555'>DETECTOR FIRINGS</div>"
                 f"<pre style='{PRE_STYLE}color:#8A5A00'>{html.escape(note)}</pre>"
                 if note else "")
        return turn_html(self.rf, turn, self.reads) + extra

    def arc_figure(self, turn: int, size: DisplaySize = NORMAL) -> Figure:
        """The run's journey arc with ``turn`` ringed (:func:`plot_arc`), drawn at ``size``."""
        return plot_arc(arc_data(self.corpus, self.run_id, turn, self.axis), self.corpus.runs,
                        axis=self.axis, note=self.axis_note, width_px=size.arc_px,
                        min_font_px=size.min_font_px)

    def files(self) -> tuple[pd.DataFrame, str]:
        """The world's files table for the map and a note on where it came from."""
        if self._files is None:
            world = str(self.run["world"])
            world_reads = self.corpus.reads[self.corpus.reads["world"] == world]
            self._files = _map_files(world, world_reads, self.fetch_world,
                                     fp.world_source(self.corpus.runs, world))
        return self._files

    def layout(self) -> pd.DataFrame:
        """The circle layout, packed once with everything the run ever reads."""
        if self._layout is None:
            files, _ = self.files()
            self._layout = fp.repo_layout(files, map_values(self.reads, self.run_id,
                                                            10**9))
        return self._layout

    def map_figure(self, turn: int, size: DisplaySize = NORMAL) -> Figure:
        """The footprint map of the lines read up to ``turn`` (:func:`plot_turn_map`), the
        files the run touched so far named, drawn at ``size``."""
        files, _ = self.files()
        values = map_values(self.reads, self.run_id, turn)
        current = turn_record(self.rf, turn).metrics.file
        shown = int(values.sum()) if len(values) else 0
        title = (f"{self.run['world']} by turn {turn}: {len(values)} file(s) read, "
                 f"{shown} lines shown")
        final = map_values(self.reads, self.run_id, 10**9)
        turns = self.corpus.turns
        return plot_turn_map(files, values, current, self.layout(), title,
                             outlined=outlined_until(turns, self.run_id, turn),
                             vmax=float(final.max()) if len(final) else 1.0,
                             touched=touched_until(turns, self.run_id, turn),
                             width_px=size.map_px, min_font_px=size.min_font_px)


def branch_options(view: RunView, turn: int) -> list[tuple[str, str]]:
    """The branches to switch to at ``turn`` as (label, value) menu entries: for a fork, the
    way back to its parent (value :data:`TO_PARENT`) and, at its turn K, its siblings; the
    forks of this run made at ``turn``. A value other than :data:`TO_PARENT` is a run file."""
    out: list[tuple[str, str]] = []
    f = view.forked_from
    if f is not None:
        out.append((f"◀ back to the parent at turn {f.turn}", TO_PARENT))
        path = _run_path(view.run)
        if turn == f.turn and path is not None:
            parent = parent_path_of(path, f.parent)
            siblings = branches_of(parent, f.parent) if parent is not None else pd.DataFrame()
            for r in siblings.itertuples() if len(siblings) else []:
                if r.at == f.turn and r.run_id != view.run_id:
                    out.append((f"sibling: {branch_label(r.treatment, r.run_id)}", str(r.path)))
    here = view.branches[view.branches["at"] == turn] if len(view.branches) else view.branches
    for r in here.itertuples():
        out.append((f"▶ {branch_label(r.treatment, r.run_id)}", str(r.path)))
    return out


def _map_files(world: str, reads: pd.DataFrame, fetch: bool,
               source: str | None = None) -> tuple[pd.DataFrame, str]:
    try:
        return fp.map_files(world, reads, fetch=fetch, source=source)
    except ValueError as exc:  # world unavailable and nothing read there
        return pd.DataFrame(columns=["file", "loc"]), str(exc)


def figure_png(fig: Figure, dpi: int = DISPLAY_DPI, close: bool = True,
               tight: bool = False) -> bytes:
    """A figure as PNG bytes at ``dpi``: the whole canvas, so a figure drawn for a display
    size keeps it (``tight=True`` crops to the drawn content instead); the figure is closed
    unless ``close=False``."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight" if tight else fig.bbox_inches,
                pad_inches=0.05 if tight else 0.0)
    if close:
        plt.close(fig)
    return buf.getvalue()


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) in pixels of PNG bytes (from the IHDR chunk)."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n") or len(data) < 24:
        raise ValueError("not a PNG image")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


# --------------------------------------------------------------------------- static rendering


@dataclass
class StaticRendering:
    """The explorer without widgets: text for a fixed set of turns plus the arc and the
    footprint map at the chosen turn."""

    run_id: str
    turn: int
    turns: list[int]
    text: str
    figures: dict[str, Figure] = field(default_factory=dict)

    def _ipython_display_(self) -> None:
        from IPython.display import Image, display

        print(self.text)
        for fig in self.figures.values():  # as PNG, whatever the kernel's matplotlib backend
            display(Image(data=figure_png(fig, close=False)))


def landmark_turns(rf: RunFile, turn: int, limit: int = 5) -> list[int]:
    """The chosen turn plus the run's landmarks: first turn, first error, first conclusion,
    first coach decision, last turn (at most ``limit``, in order)."""
    if not rf.turns:
        return []
    jumps = jump_targets(rf)
    picks = [turn, rf.turns[0].turn]
    for key in ("error", "conclusion", "coach"):
        if jumps.get(key):
            picks.append(jumps[key][0])
    picks.append(rf.turns[-1].turn)
    valid = set(t.turn for t in rf.turns)
    out = list(dict.fromkeys(p for p in picks if p in valid))[:limit]
    return sorted(out)


def render_static(corpus: Corpus | str | Path, run_id: str | None = None, turn: int = 1,
                  turns: Sequence[int] | None = None, axis: Axis = "turn",
                  fetch_world: bool = False, show_map: bool = True,
                  firings: pd.DataFrame | None = None) -> StaticRendering:
    """The static explorer: run summary, jump targets, the detector firings as a strip over
    the turns, the text of ``turns`` (default: :func:`landmark_turns`), and the arc and map
    figures at ``turn``."""
    data = _as_corpus(corpus)
    run_id = run_id or default_run(data.runs, data.turns, data.reads)
    view = RunView(data, run_id, axis=axis, fetch_world=fetch_world, firings=firings)
    if not view.n_turns:
        return StaticRendering(run_id, 0, [], view.summary() + "\n(no turns to show)")
    if turn not in view.turn_numbers:
        turn = min(max(turn, view.turn_numbers[0]), view.turn_numbers[-1])
    shown = list(turns) if turns is not None else landmark_turns(view.rf, turn)
    parts = [view.summary(), "jump targets: " + "; ".join(
        f"{k} {v}" for k, v in view.jumps.items() if v),
        "detector firings on the turn axis:\n" + firing_strip_text(view.firings,
                                                                   view.turn_numbers, turn)]
    parts += [view.text(t) for t in shown]
    figs = {"arc": view.arc_figure(turn)}
    if show_map:
        files, note = view.files()
        if not files.empty:
            figs["map"] = view.map_figure(turn)
        parts.append(f"footprint map: {note}")
    for fig in figs.values():
        plt.close(fig)  # shown through display(), not by the inline backend as well
    return StaticRendering(run_id, turn, shown, "\n\n".join(parts), figs)


# --------------------------------------------------------------------------- widgets

#: The projector size's type: the widgets' own font and line height, scaled with the text.
PRESENT_CSS = ("<style>.adakit-present{--jp-widgets-font-size:16px;"
               "--jp-widgets-inline-height:32px;--jp-widgets-inline-label-width:90px}"
               ".adakit-present .widget-html-content{font-size:16px;line-height:1.4}</style>")


def scale_fonts(fragment: str, factor: float) -> str:
    """An HTML fragment with every inline ``font-size:Npx`` multiplied by ``factor``."""
    if factor == 1.0:
        return fragment
    return re.sub(r"font-size:\s*(\d+(?:\.\d+)?)px",
                  lambda m: f"font-size:{float(m.group(1)) * factor:.1f}px", fragment)


def short_path(path: str | Path) -> str:
    """A host path as shown: relative to the project root when inside it, else its last two
    parts after "…/" (a path of three parts or fewer stays whole)."""
    from adakit import config

    p = Path(path)
    try:
        return str(p.relative_to(config.ROOT))
    except ValueError:
        return str(p) if len(p.parts) <= 3 else "…/" + "/".join(p.parts[-2:])


def host_paths_html(text: str) -> str:
    """``text`` escaped as HTML with each absolute host path shortened (:func:`short_path`)
    and kept on one line, its full path as the tooltip."""
    out, last = [], 0
    for m in re.finditer(r"(?<![\w.])/[^\s()'\",;]+", text):
        full = m.group(0).rstrip(".")
        out.append(keep_hyphenated(html.escape(text[last:m.start()])))
        out.append(f"<span style='white-space:nowrap' title='{html.escape(full, quote=True)}'>"
                   f"{html.escape(short_path(full))}</span>")
        last = m.start() + len(full)
    out.append(keep_hyphenated(html.escape(text[last:])))
    return "".join(out)


class ExplorerWidgets:
    """The interactive explorer (ipywidgets): run selectors that filter each other, a turn
    slider with previous/next buttons, jumps by tool, error or conclusion, buttons that step
    out of a subagent span and into one (runs with subagents), the turn's text and the arc and
    footprint pictures. ``ui`` is the top-level widget."""

    def __init__(self, corpus: Corpus, run_id: str | None = None, turn: int = 1,
                 axis: Axis = "turn", fetch_world: bool = False, show_map: bool = True,
                 firings: pd.DataFrame | None = None, presentation: bool = False) -> None:
        import ipywidgets as w

        if corpus.runs.empty:
            raise ValueError("the corpus has no runs to explore")
        self.corpus = corpus
        self.firings = firings
        self.axis: Axis = axis
        self.fetch_world = fetch_world
        self.show_map = show_map
        self.view: RunView | None = None
        self._files: dict[str, tuple[pd.DataFrame, str]] = {}
        self._busy = False
        label = {"description_width": "72px"}
        self.selectors = {
            a: w.Dropdown(description=a, options=[ANY], value=ANY, style=label,
                          layout=w.Layout(width="240px")) for a in AXES
        }
        self.filter_note = w.HTML()
        self.run_select = w.Dropdown(description="run", style=label,
                                     layout=w.Layout(width="auto", max_width="100%",
                                                     flex="1 1 auto"))
        self.summary = w.HTML()
        self.prev_button = w.Button(description="◀ prev", layout=w.Layout(width="76px"))
        self.next_button = w.Button(description="next ▶", layout=w.Layout(width="76px"))
        self.slider = w.IntSlider(description="turn", min=1, max=1, value=1,
                                  continuous_update=False, style={"description_width": "36px"},
                                  layout=w.Layout(width="300px"))
        self.jump_select = w.Dropdown(description="jump to", options=[("-", "")], style=label,
                                      layout=w.Layout(width="250px"))
        self.jump_prev = w.Button(description="◀ match", layout=w.Layout(width="84px"),
                                  disabled=True)
        self.jump_next = w.Button(description="match ▶", layout=w.Layout(width="84px"),
                                  disabled=True)
        #: step out of a subagent span to the turn that started it / into the span a turn
        #: started (shown only for runs with subagents)
        self.span_out = w.Button(description="⤴ main line", layout=w.Layout(width="110px"),
                                 disabled=True)
        self.span_in = w.Button(description="⤵ subagent", layout=w.Layout(width="110px"),
                                disabled=True)
        #: the projector size (:data:`PRESENTATION`) on or off
        self.present = w.ToggleButton(value=presentation, description="presentation size",
                                      tooltip="larger type, the map beside the controls, one "
                                      "turn within 1280x720", layout=w.Layout(width="150px"))
        self.jump_note = w.HTML()
        #: text search over the turns of the selected runs; a hit opens its run at its turn
        self.search_box = w.Text(description="search", placeholder="a word in the thinking, "
                                 "calls, observations or conclusions", continuous_update=False,
                                 style=label, layout=w.Layout(width="420px"))
        self.search_hits = w.Dropdown(description="hits", options=[("-", None)], style=label,
                                      layout=w.Layout(width="auto", flex="1 1 300px"))
        self.search_note = w.HTML()
        #: the run's detector firings, drawn under the slider's track
        self.firing_strip = w.HTML()
        #: the branches to switch to at this turn (:func:`branch_options`); shown only for a
        #: run that has forks or is one
        self.branch_select = w.Dropdown(description="branch", options=[("-", "")], style=label,
                                        layout=w.Layout(width="auto", flex="0 1 420px"))
        self.branch_note = w.HTML()
        self.branch_row = w.HBox([self.branch_select, self.branch_note],
                                 layout=w.Layout(flex_flow="row wrap", align_items="center",
                                                 width="100%", display="none"))
        self.branch_row.add_class("adakit-branches")
        #: corpora of the branches and parents opened from the branch menu, by run id
        self._outside: dict[str, Corpus] = {}
        # widgets carry a 2 px margin: a width or max-width of 100% would stick out by 4 px
        self.turn_view = w.HTML()
        self.arc_image = w.Image(format="png", layout=w.Layout(width=f"{PICTURE_PX}px"))
        self.map_image = w.Image(format="png", layout=w.Layout(width=f"{PICTURE_PX}px"))
        self.map_note = w.HTML()
        self._style = w.HTML(PRESENT_CSS)
        for widget, name in ((self.turn_view, "turn"), (self.arc_image, "arc"),
                             (self.map_image, "map"), (self.present, "size")):
            widget.add_class(f"adakit-{name}")  # for page scripts and tests
        self.ui = w.VBox(layout=w.Layout(width="100%", max_width="100%"))
        self.ui.add_class("adakit-explorer")
        self._arrange()
        for sel in self.selectors.values():
            sel.observe(self._on_axis, names="value")
        self.run_select.observe(self._on_run, names="value")
        self.slider.observe(self._on_turn, names="value")
        self.jump_select.observe(lambda _: self._update_jumps(), names="value")
        self.prev_button.on_click(lambda _: self.step(-1))
        self.next_button.on_click(lambda _: self.step(1))
        self.jump_prev.on_click(lambda _: self.jump(-1))
        self.jump_next.on_click(lambda _: self.jump(1))
        self.span_out.on_click(lambda _: self.leave_span())
        self.span_in.on_click(lambda _: self.enter_span())
        self.present.observe(self._on_size, names="value")
        self.search_box.observe(lambda change: self.search_for(change["new"]), names="value")
        self.search_hits.observe(self._on_hit, names="value")
        self.branch_select.observe(self._on_branch, names="value")
        self._refresh_options()
        self.select_run(run_id or default_run(corpus.runs, corpus.turns, corpus.reads), turn)

    @property
    def size(self) -> DisplaySize:
        """The display size in use: :data:`PRESENTATION` when the toggle is on."""
        return PRESENTATION if self.present.value else NORMAL

    def _arrange(self) -> None:
        """Lay the widgets out for :attr:`size`: the notebook layout (controls, then the text
        beside the arc and the map), or the projector's (the map beside the controls, the
        arc and a scrolling text under the controls)."""
        import ipywidgets as w

        size = self.size
        wide = size.map_beside_controls
        wrap = {"flex_flow": "row wrap", "align_items": "center", "width": "100%"}
        button = "96px" if wide else "76px"
        self.prev_button.layout.width = self.next_button.layout.width = button
        self.jump_prev.layout.width = self.jump_next.layout.width = "100px" if wide else "84px"
        self.present.layout.width = "180px" if wide else "150px"
        text_box = {"max_height": f"{size.text_box_px}px" if size.text_box_px else None,
                    "overflow": "hidden auto" if size.text_box_px else None}
        self.turn_view.layout = w.Layout(flex="1 1 380px", min_width="300px", **text_box)
        self.map_note.layout = w.Layout(width=f"{size.map_px}px", max_width="100%")
        steps = w.HBox([self.prev_button, self.slider, self.next_button, self.jump_select,
                        self.jump_prev, self.jump_next, self.span_out, self.span_in],
                       layout=w.Layout(**wrap))
        steps.add_class("adakit-controls")
        controls = [steps, self.firing_strip, self.jump_note, self.branch_row]
        maps = [self.map_image, self.map_note] if self.show_map else []
        column = {"flex_flow": "row wrap", "align_items": "flex-start", "width": "100%",
                  "grid_gap": "12px"}
        if wide:
            left = w.VBox([*controls, self.arc_image, self.turn_view],
                          layout=w.Layout(flex=f"1 1 {size.arc_px}px", min_width="0"))
            right = w.VBox(maps, layout=w.Layout(flex=f"0 0 {size.map_px + 8}px",
                                                 width=f"{size.map_px + 8}px"))
            turn = [w.HBox([left, right], layout=w.Layout(**column))]
        else:
            pictures = w.VBox([self.arc_image, *maps],
                              layout=w.Layout(flex=f"0 0 {size.map_px + 8}px",
                                              width=f"{size.map_px + 8}px"))
            turn = [*controls, w.HBox([self.turn_view, pictures], layout=w.Layout(**column))]
        self.ui.children = [
            self._style,
            w.HBox([*self.selectors.values(), self.present], layout=w.Layout(**wrap)),
            self.filter_note,
            w.HBox([self.run_select], layout=w.Layout(width="100%")),
            w.HBox([self.search_box, self.search_hits], layout=w.Layout(**wrap)),
            self.search_note, self.summary, *turn]
        if wide:
            self.ui.add_class("adakit-present")
        else:
            self.ui.remove_class("adakit-present")

    def _on_size(self, change: dict[str, Any]) -> None:
        self._arrange()
        self._refresh_options()
        if self.view is not None:
            self.select_run(self.view.run_id, self.turn)

    def _html(self, fragment: str) -> str:
        """An HTML fragment at the current size (:func:`scale_fonts`)."""
        return scale_fonts(fragment, self.size.font_scale)

    # ------------------------------------------------------------------ selection

    def _selection(self) -> dict[str, str]:
        return {a: s.value for a, s in self.selectors.items()}

    def _refresh_options(self) -> None:
        """Re-filter every selector and the run list from the current selection."""
        self._busy = True
        try:
            options = axis_options(self.corpus.runs, self._selection())
            for a, sel in self.selectors.items():
                keep = sel.value if sel.value in options[a] else ANY
                sel.options = [ANY, *options[a]]
                sel.value = keep
            runs = select_runs(self.corpus.runs, **self._selection())
            current = self.run_select.value
            self.run_select.options = [(run_label(r), r["run_id"]) for _, r in runs.iterrows()]
            if current in set(runs["run_id"]):
                self.run_select.value = current
            elif not runs.empty:  # the filters left the run out: their most instructive run
                c = self.corpus
                self.run_select.value = default_run(runs, c.turns, c.reads)
            note = hidden_note(self.corpus.runs, self._selection(), "model")
            self.filter_note.value = self._html(
                f"<div style='font-size:12px;color:#8A5A00;{WRAP}'>{html.escape(note)}</div>"
                if note else "")
        finally:
            self._busy = False

    def _on_axis(self, change: dict[str, Any]) -> None:
        if self._busy:
            return
        self._refresh_options()
        if self.run_select.value and (self.view is None
                                      or self.run_select.value != self.view.run_id):
            self.select_run(self.run_select.value)

    def _on_run(self, change: dict[str, Any]) -> None:
        if self._busy or not change["new"]:
            return
        self.select_run(change["new"])

    def _corpus_of(self, run_id: str) -> Corpus:
        """The corpus holding ``run_id``: the explorer's, or one a branch switch opened."""
        if run_id in self._outside and not (self.corpus.runs["run_id"] == run_id).any():
            return self._outside[run_id]
        return self.corpus

    def select_run(self, run_id: str, turn: int = 1) -> None:
        """Open a run (the selectors are widened if they hide it) at ``turn``."""
        corpus = self._corpus_of(run_id)
        row = corpus.runs[corpus.runs["run_id"] == run_id]
        if row.empty:
            raise ValueError(f"no run {run_id!r} in the corpus")
        if corpus is self.corpus and select_runs(row, **self._selection()).empty:
            self._busy = True
            for sel in self.selectors.values():
                sel.value = ANY
            self._busy = False
            self._refresh_options()
        world = str(row["world"].iloc[0])
        view = RunView(corpus, run_id, self.axis, self.fetch_world,
                       files=self._files.get(world), firings=self.firings)
        self.view = view
        self._busy = True
        try:
            values = [v for _, v in self.run_select.options]
            if run_id not in values:  # a branch or parent from outside the corpus
                self.run_select.options = [*self.run_select.options,
                                           (f"{run_label(row.iloc[0])} · opened from a fork", run_id)]
            self.run_select.value = run_id
            numbers = view.turn_numbers or [0]
            self.slider.min, self.slider.max = 0, max(numbers)
            self.slider.min = min(numbers)
            self.slider.value = min(max(turn, self.slider.min), self.slider.max)
            self.slider.disabled = not view.turn_numbers
            self.jump_select.options = [("-", "")] + [
                (f"{k} ({len(v)})", k) for k, v in view.jumps.items() if v]
            self.jump_select.value = ""
            empty = [k for k, v in view.jumps.items() if not v]
            self.jump_note.value = self._html(
                f"<div style='font-size:12px;color:#555;{WRAP}'>not in this run, so not in "
                f"the jump menu: {html.escape(', '.join(empty))}</div>" if empty else "")
        finally:
            self._busy = False
        self.summary.value = self._html(f"<pre style='{PRE_STYLE}'>"
                                        f"{keep_hyphenated(html.escape(view.summary()))}</pre>")
        self.render()

    def open_file(self, path: str | Path, turn: int) -> None:
        """Open the run recorded at ``path`` at ``turn``: from the explorer's corpus when it
        holds it, else from the file's own folder (a fork set) or the file alone."""
        path = Path(path)
        runs = self.corpus.runs
        hit = runs[runs["path"].astype(str) == str(path)] if "path" in runs else runs.iloc[0:0]
        if hit.empty:
            in_set = path.parent.parent.name.endswith(".forks")  # a fork: its whole fork set
            corpus = load_corpus(path.parent if in_set else path, cache=False)
            for rid in corpus.runs["run_id"]:
                self._outside.setdefault(str(rid), corpus)
            found = corpus.runs[corpus.runs["path"].astype(str) == str(path)]
            run_id = str(found["run_id"].iloc[0]) if len(found) else path.stem
        else:
            run_id = str(hit["run_id"].iloc[0])
        self.select_run(run_id, turn)

    def switch_branch(self, value: str) -> None:
        """Switch to a branch menu entry (:func:`branch_options`) at the turn shown: a fork
        opens at this turn, :data:`TO_PARENT` opens the parent at the fork's turn K."""
        view = self.view
        if view is None or not value:
            return
        if value == TO_PARENT:
            f = view.forked_from
            parent = parent_path_of(view.run["path"], f.parent) if f is not None else None
            if f is None or parent is None:
                self.branch_note.value = self._html(
                    "<span style='font-size:12px;color:#8A5A00'>the parent's run file is not "
                    "on disk beside the fork's folder</span>")
                return
            self.open_file(parent, f.turn)
        else:
            self.open_file(value, self.turn)

    def _on_branch(self, change: dict[str, Any]) -> None:
        if self._busy or not change["new"]:
            return
        self.switch_branch(change["new"])

    def _update_branches(self) -> None:
        """Fill the branch menu for the turn shown; the row shows only for a run with forks
        or a fork, its note naming the turns forked at."""
        view = self.view
        has = view is not None and (len(view.branches) > 0 or view.forked_from is not None)
        self.branch_row.layout.display = None if has else "none"
        if not has or view is None:
            return
        options = branch_options(view, self.turn)
        points = view.jumps.get(FORK_JUMP, [])
        bits = []
        if points:
            bits.append(f"forked at turn{'s' * (len(points) != 1)} "
                        f"{', '.join(map(str, points))}")
            if self.turn not in points:
                bits.append("go to one of them to switch to its branches")
        if view.forked_from is not None:
            bits.append(f"this run is a fork of {view.forked_from.parent} at turn "
                        f"{view.forked_from.turn}")
        self._busy = True
        try:
            self.branch_select.options = [("-", ""), *options]
            self.branch_select.value = ""
            self.branch_select.disabled = not options
        finally:
            self._busy = False
        self.branch_note.value = self._html(
            f"<span style='font-size:12px;color:#1F4E79;{WRAP}'>{html.escape('; '.join(bits))}"
            "</span>")

    def search_for(self, text: str) -> None:
        """Fill the hits menu with the turns of the selected runs whose texts hold ``text``
        (plain, case-insensitive); a bad or empty search clears it with a note."""
        text = text.strip()
        hits = pd.DataFrame()
        note = ""
        if text:
            axes = {a: v for a, v in self._selection().items() if v != ANY}
            try:
                hits = search(self.corpus, text, **axes)
            except SearchError as exc:
                note = str(exc)
            else:
                n = hits[["run_id", "turn"]].drop_duplicates().shape[0] if not hits.empty else 0
                runs = hits["run_id"].nunique() if n else 0
                note = (f"{n} turn{'s' * (n != 1)} of {runs} run{'s' * (runs != 1)} hold "
                        f"'{text}'" + (f"; the first {SEARCH_SHOWN} are listed"
                                       if n > SEARCH_SHOWN else "")
                        if n else f"no turn holds '{text}'")
        self._busy = True
        try:
            self.search_hits.options = hit_options(hits)
            self.search_hits.value = None
        finally:
            self._busy = False
        self.search_note.value = self._html(
            f"<div style='font-size:12px;color:#555;{WRAP}'>{html.escape(note, quote=False)}"
            "</div>" if note else "")

    def _on_hit(self, change: dict[str, Any]) -> None:
        if self._busy or not change["new"]:
            return
        run_id, turn = change["new"]
        if self.view is not None and self.view.run_id == run_id:
            self.go(turn)
        else:
            self.select_run(run_id, turn)

    # ------------------------------------------------------------------ turns

    @property
    def turn(self) -> int:
        """The turn shown now."""
        return int(self.slider.value)

    def _on_turn(self, change: dict[str, Any]) -> None:
        if not self._busy:
            self.render()

    def go(self, turn: int) -> None:
        """Show turn ``turn`` (clamped to the run)."""
        self.slider.value = min(max(int(turn), self.slider.min), self.slider.max)

    def step(self, direction: int) -> None:
        """One turn forward (``direction`` > 0) or back."""
        self.go(self.turn + (1 if direction > 0 else -1))

    def jump(self, direction: int) -> None:
        """Go to the next/previous turn of the kind chosen in the jump menu."""
        if self.view is None or not self.jump_select.value:
            return
        target = step_match(self.view.jumps.get(self.jump_select.value, []), self.turn,
                            direction)
        if target is not None:
            self.go(target)

    def leave_span(self) -> None:
        """From a subagent's turn, go to the turn that started its span (:func:`span_exit`)."""
        if self.view is not None and self.view.n_turns:
            target = span_exit(self.view.rf, self.turn)
            if target is not None:
                self.go(target)

    def enter_span(self) -> None:
        """From a turn that started a subagent, go to the span's first turn
        (:func:`span_entry`)."""
        if self.view is not None and self.view.n_turns:
            target = span_entry(self.view.rf, self.turn)
            if target is not None:
                self.go(target)

    def _update_spans(self) -> None:
        """Show the span buttons for a run with subagents, each enabled when it leads
        somewhere from the current turn."""
        view = self.view
        spans = span_turns(view.rf) if view is not None else {}
        for button in (self.span_out, self.span_in):
            button.layout.display = None if spans else "none"
        if not spans or not view.n_turns:
            self.span_out.disabled = self.span_in.disabled = True
            return
        out, into = span_exit(view.rf, self.turn), span_entry(view.rf, self.turn)
        self.span_out.disabled, self.span_in.disabled = out is None, into is None
        side = span_of(view.rf, self.turn)
        self.span_out.tooltip = (f"to turn {out}, which started span {side.id}"
                                 if out is not None and side is not None
                                 else "this turn is on the main line")
        self.span_in.tooltip = (f"to turn {into}, the first of the subagent this turn started"
                                if into is not None else "this turn started no subagent")

    def _update_jumps(self) -> None:
        """Enable ◀ match / match ▶ only when there is an earlier / later match to go to."""
        self._update_spans()
        kind = self.jump_select.value
        matches = self.view.jumps.get(kind, []) if self.view is not None and kind else []
        self.jump_prev.disabled = step_match(matches, self.turn, -1) is None
        self.jump_next.disabled = step_match(matches, self.turn, 1) is None
        if not kind:
            tip = "choose a kind in the jump menu first"
            self.jump_prev.tooltip = self.jump_next.tooltip = tip
        else:
            self.jump_prev.tooltip = f"previous {kind} turn"
            self.jump_next.tooltip = f"next {kind} turn"

    def render(self) -> None:
        """Redraw the turn text, the arc and the map for the current turn: all are drawn
        first and shown together, so a map never lags behind its text."""
        view = self.view
        if view is None:
            return
        self._update_jumps()
        self._update_branches()
        if not view.n_turns:
            self.turn_view.value = "<i>this run has no turns</i>"
            _show(self.arc_image, b"")
            _show(self.map_image, b"")
            self.map_note.value = ""
            return
        t, size = self.turn, self.size
        strip = firing_strip_html(view.firings, view.turn_numbers, t)
        text = self._html(view.html(t))
        arc = figure_png(view.arc_figure(t, size))
        drawn, note = b"", ""
        if self.show_map:
            files, where = view.files()
            self._files.setdefault(str(view.run["world"]), (files, where))
            drawn = figure_png(view.map_figure(t, size)) if not files.empty else b""
            note = self._html(f"<div style='font-size:12px;color:#555;{WRAP}'>"
                              f"{host_paths_html(where)}</div>")
        self.firing_strip.value = self._html(strip)
        self.turn_view.value = text
        _show(self.arc_image, arc)
        if self.show_map:
            _show(self.map_image, drawn)
            self.map_note.value = note

    def snapshot_html(self) -> str:
        """The current turn as static HTML (summary, turn text, arc and map images)."""
        parts = [self.summary.value, "<div style='display:flex;flex-wrap:wrap;gap:12px'>",
                 f"<div style='flex:1 1 380px;min-width:300px'>{self.turn_view.value}</div>"
                 f"<div style='flex:0 0 {PICTURE_PX + 8}px'>"]
        for image in (self.arc_image, self.map_image):
            if image.value:
                data = base64.b64encode(image.value).decode("ascii")
                width, _ = png_size(bytes(image.value))
                parts.append(f"<img style='width:{width}px;max-width:100%' "
                             f"src='data:image/png;base64,{data}'/>")
        parts.append(f"{self.map_note.value}</div></div>")
        return "".join(parts)

    def mimebundle(self) -> dict[str, Any]:
        """What a notebook shows: the widget for a live front end, plus a static HTML snapshot
        of the current turn for viewers that cannot render widgets (an untrusted or exported
        notebook without widget state)."""
        bundle = dict(self.ui._repr_mimebundle_() or {})
        bundle["text/html"] = self.snapshot_html()
        run = self.view.run_id if self.view else ""
        bundle["text/plain"] = f"run explorer at turn {self.turn}: {run}"
        return bundle

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.mimebundle(), raw=True)


def _show(image: Any, png: bytes) -> None:
    """Put PNG bytes in an Image widget shown at the PNG's own pixel width (no rescaling);
    no bytes hide it (an empty image would keep the old one's place)."""
    image.value = png
    image.layout.display = None if png else "none"
    if png:
        width, _ = png_size(png)
        image.layout.width = f"{width}px"
        image.layout.max_width = "100%"


def build_explorer(corpus: Corpus | str | Path, run_id: str | None = None, turn: int = 1,
                   axis: Axis = "turn", fetch_world: bool = False,
                   show_map: bool = True, firings: pd.DataFrame | None = None,
                   presentation: bool = False) -> ExplorerWidgets:
    """The interactive explorer's widgets (needs ipywidgets; works without a front end);
    ``firings`` (e.g. ``adakit diagnose``'s table) replaces the frozen-threshold firings;
    ``presentation`` opens it at the projector size (:data:`PRESENTATION`)."""
    return ExplorerWidgets(_as_corpus(corpus), run_id, turn, axis, fetch_world, show_map,
                           firings, presentation)


def widgets_available() -> bool:
    """True inside a live Jupyter kernel with ipywidgets installed."""
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def use_widgets(interactive: bool | None = None) -> bool:
    """Whether :func:`explore` builds widgets: never when ``interactive`` is False or
    ``ADAKIT_EXPLORER=static``; otherwise when :func:`widgets_available`."""
    if os.environ.get(ENV_VAR, "").strip().lower() == "static" or interactive is False:
        return False
    return widgets_available()


def explore(corpus: Corpus | str | Path, run_id: str | None = None, turn: int = 1,
            interactive: bool | None = None, axis: Axis = "turn", fetch_world: bool = False,
            show_map: bool = True, firings: pd.DataFrame | None = None,
            presentation: bool = False) -> ExplorerWidgets | StaticRendering:
    """Open the explorer on a corpus (a :class:`Corpus` or a corpus folder) at ``run_id``
    (default :func:`default_run`) and ``turn``: widgets when :func:`use_widgets` says so,
    else :func:`render_static`. Either result displays itself in a notebook. The detector
    firings are marked under the turn slider (``firings``, else found per run with the frozen
    thresholds); ``presentation`` opens the widgets at the projector size (a toggle switches
    it)."""
    data = _as_corpus(corpus)
    if use_widgets(interactive):
        return ExplorerWidgets(data, run_id, turn, axis, fetch_world, show_map, firings,
                               presentation)
    return render_static(data, run_id, turn, axis=axis, fetch_world=fetch_world,
                         show_map=show_map, firings=firings)


__all__ = [
    "ANY", "AXES", "ENV_VAR", "NORMAL", "PRESENTATION", "DisplaySize", "ExplorerWidgets",
    "RunView", "StaticRendering", "apply_change",
    "arc_data", "axis_options", "build_explorer", "default_run", "explore", "figure_png",
    "files_read", "host_paths_html", "keep_hyphenated", "ordinal", "scale_fonts", "short_path", "touched_until",
    "turn_count_text",
    "COMPACTION_NOTE", "MAIN_LINE", "span_entry", "span_exit", "span_of", "span_text",
    "span_turns", "spans_started",
    "firing_jumps", "firing_marks", "firing_strip_html", "firing_strip_text", "firings_at",
    "run_firings",
    "jump_targets", "landmark_turns", "map_values", "matching_turns", "plot_arc",
    "plot_turn_map", "read_ranges", "reads_until", "render_static", "run_label", "select_runs",
    "state_at", "step_match", "turn_changes", "turn_html", "turn_record", "turn_sections",
    "turn_sections_text", "use_widgets", "widgets_available",
]
