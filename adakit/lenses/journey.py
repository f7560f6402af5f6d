"""Lens 1, the journey arc lens (narrative layer): paper §4.2.1 and Fig. 6.

Each run becomes a timeline: one row per run, elapsed time running left to right, one marker
per turn. The marker says which tool was called and, for the tools where it matters, how:

- PKR by the lines it showed: ``<20``, ``20-50`` (both ends included) or ``>50`` lines;
- EXP by its sub-action: go to ``definition``, find ``references``, go to ``next`` block;
- MEM by the confidence it recorded (``high`` / ``medium`` / ``low``, or none given);
- CON as ``finalize`` (the call asked to end the run) or ``hold`` (an interim conclusion);
- an imported agent's steps outside Ada's tools by their class: EDT (edit), EXE (execute),
  SUB (submit);
- failed turns as errors: ``tool_error`` (the tool ran and failed), ``unknown_tool``,
  ``malformed`` (the reply held no parsable tool call), ``model_error``;
- coach decisions that spoke to the agent (``HINT``, ``REJECT``) as an extra mark above the row;
- an imported run's subagent turns (Claude Code's ``Task``/``Agent``, ATIF's and Inspect's
  subagents: ``Turn.sidechain``) on a lane of their own under the run's main line, each span a
  shaded band from the turn that started it to its last turn, a dashed link down from that
  turn, the lane labelled with the subagent's kind (:func:`span_lanes`);
- a compaction (the source scaffold replaced the history by a summary) as a dashed vertical
  mark across the row, after the turn it followed.

Time is the run's **active** time by default (``time="active"``): the agent's own turn times
laid end to end, so a coach run's judge and coach calls and the downtime between a crash and
its resume do not stretch the arc; ``time="wall"`` places turns at their wall-clock start.
Time is normalized per panel: 100% is the longest run shown in the panel, and the panel prints
that reference duration ("100% = 4.5 min (269044 ms)"), so arcs in one panel compare in both
shape and length. ``scale="run"`` stretches every run to 100% instead; ``axis="turn"`` uses
the turn index. :func:`turn_time_output_correlation` reports how per-turn wall time tracks
per-turn output length (the paper: Pearson r = 0.397, Spearman rho = 0.532 for GPT-4.1), the
check that long pauses are not simply long replies; :func:`long_pauses` lists such pauses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from scipy import stats

from adakit import figures
from adakit.lenses.surface import run_positions
from adakit.record import CANONICAL_ORDER, TOOL_ORDER, Corpus, map_runs

PKR_CLASSES: tuple[str, ...] = ("<20", "20-50", ">50")
EXP_ACTIONS: tuple[str, ...] = ("definition", "references", "next")
MEM_CONFIDENCE: tuple[str, ...] = ("high", "medium", "low")
ERROR_KINDS: tuple[str, ...] = ("tool_error", "unknown_tool", "malformed", "model_error")
COACH_DECISIONS: tuple[str, ...] = ("HINT", "REJECT")

_C = figures.CANONICAL_COLORS
#: Marker style per event kind, in legend order: (label, marker, colour, size, filled).
MARKERS: dict[str, tuple[str, str, str, float, bool]] = {
    "OVW": ("OVW", "s", _C["OVW"], 26, True),
    "PKR:<20": ("PKR <20L", "o", _C["PKR"], 10, True),
    "PKR:20-50": ("PKR 20-50L", "o", _C["PKR"], 28, True),
    "PKR:>50": ("PKR >50L", "o", _C["PKR"], 60, True),
    "EXP:definition": ("EXP Def", "^", _C["EXP"], 30, True),
    "EXP:references": ("EXP Ref", "v", _C["EXP"], 30, True),
    "EXP:next": ("EXP Next", ">", _C["EXP"], 30, True),
    "EXP:other": ("EXP", "<", _C["EXP"], 30, True),
    "MEM:high": ("MEM High", "D", _C["MEM"], 24, True),
    "MEM:medium": ("MEM Medium", "d", _C["MEM"], 28, True),
    "MEM:low": ("MEM Low", "D", _C["MEM"], 24, False),
    "MEM:none": ("MEM", "d", _C["MEM"], 20, False),
    "BKM": ("BKM", "P", _C["BKM"], 34, True),
    "HNT": ("HNT", "*", _C["HNT"], 60, True),
    "CON:finalize": ("CON Finalize", "p", _C["CON"], 50, True),
    "CON:hold": ("CON Hold", "p", _C["CON"], 40, False),
    "EDT": ("EDT Edit", "s", _C["EDT"], 30, False),
    "EXE": ("EXE Execute", "h", _C["EXE"], 30, True),
    "SUB": ("SUB Submit", "*", _C["SUB"], 70, True),
    "error:tool_error": ("Tool error", "X", figures.ERROR_COLOR, 34, True),
    "error:unknown_tool": ("Unknown tool", "1", figures.ERROR_COLOR, 50, True),
    "error:malformed": ("Malformed", "x", figures.ERROR_COLOR, 30, True),
    "error:model_error": ("Model error", "X", figures.NEUTRAL_COLOR, 34, True),
    "other": ("Other tool", ".", figures.NEUTRAL_COLOR, 30, True),
    "coach:HINT": ("Coach hint", "v", figures.COACH_COLOR, 22, False),
    "coach:REJECT": ("Coach reject", "v", figures.COACH_COLOR, 26, True),
}

EVENT_COLUMNS: list[str] = [
    "run_id", "model", "world", "task", "condition", "turn", "n_turns", "tool", "kind",
    "detail", "lines_viewed", "t_rel", "t_rel_end", "t_s", "t_end_s", "duration_s",
    "elapsed_s", "output_chars", "coach", "sidechain", "sidechain_agent", "sidechain_parent",
    "sidechain_depth", "compaction",
]
#: The turns-table columns of a subagent span and a compaction, and their value when absent.
SPAN_FIELDS: dict[str, object] = {"sidechain": None, "sidechain_agent": None,
                                  "sidechain_parent": None, "sidechain_depth": None,
                                  "compaction": False}
#: Distance from a run's main line to each lane of its subagent spans (runs are 1 apart).
LANE_STEP = 0.6
SPAN_COLOR = "#4C72B0"
COMPACTION_COLOR = "#8A5A00"


def pkr_size_class(lines: pd.Series | np.ndarray | Sequence[int]) -> np.ndarray:
    """``<20`` below 20 lines, ``20-50`` from 20 to 50 lines inclusive, ``>50`` above."""
    n = np.asarray(lines, dtype=float)
    return np.select([n < 20, n <= 50], ["<20", "20-50"], default=">50").astype(object)


def exp_subaction(action: pd.Series | Sequence[str | None]) -> np.ndarray:
    """EXP's sub-action from the recorded action (``go_to_definition`` -> ``definition``,
    ``find_all_references`` -> ``references``, ``go_to_next_block`` -> ``next``, else
    ``other``)."""
    names = [*EXP_ACTIONS, "other"]
    return np.array([names[_exp_index(str(a)) if a is not None and a == a else -1]
                     for a in action], dtype=object)


def _lookup(values: pd.Series, mapping) -> np.ndarray:
    """Map each value through ``mapping`` (called once per distinct value); NaN/None -> -1."""
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    table = np.array([mapping(u) for u in uniques] + [-1], dtype=np.int64)
    return table[codes]  # code -1 (missing) picks the trailing -1


#: Marker kinds a turn can take (coach marks are extra and live in the ``coach`` column).
EVENT_KINDS: list[str] = [k for k in MARKERS if not k.startswith("coach:")]
_DETAILS: list[str] = [*PKR_CLASSES, *EXP_ACTIONS, "other", *MEM_CONFIDENCE, "none",
                       "finalize", "hold", *ERROR_KINDS]


#: Per clock: the turns-table columns of a turn's start, end (fractions of the run) and
#: duration, and the runs-table column of the run's length.
CLOCKS: dict[str, tuple[str, str, str, str]] = {
    "active": ("active_rel_start", "active_rel_end", "active_s", "active_s"),
    "wall": ("t_rel_start", "t_rel_end", "duration_s", "wall_s"),
}


def _clock(time: str) -> tuple[str, str, str, str]:
    if time not in CLOCKS:
        raise ValueError(f"time must be one of {list(CLOCKS)}, not {time!r}")
    return CLOCKS[time]


def event_columns(time: str = "active") -> dict[str, list[str]]:
    """The columns :func:`arc_events` reads, per table (what a corpus on disk is asked)."""
    rel_start, rel_end, turn_time, run_time = _clock(time)
    return {"runs": ["run_id", "n_turns", run_time],
            "turns": ["run_id", "model", "world", "task", "condition", "turn", "tool", "action",
                      "lines_viewed", "finalize", "confidence", "error_type", rel_start,
                      rel_end, turn_time, "output_chars", "coach_decision"],
            "reads": ["run_id"]}


def arc_events(corpus: Corpus, time: str = "active") -> pd.DataFrame:
    """One row per turn with its marker ``kind`` and times (see :data:`EVENT_COLUMNS`) on the
    ``time`` clock (``"active"``, the default, or ``"wall"``; module docstring). A corpus on
    disk is read in pieces of whole runs (:func:`adakit.record.map_runs`); :func:`long_pauses`
    of a corpus keeps only the pauses of each piece."""
    _clock(time)
    return map_runs(corpus, lambda piece: _arc_events(piece, time), event_columns(time))


def _arc_events(corpus: Corpus, time: str = "active") -> pd.DataFrame:
    """One row per turn with its marker ``kind`` and times (see :data:`EVENT_COLUMNS`) on the
    ``time`` clock (``"active"``, the default, or ``"wall"``; module docstring).

    ``kind`` is one of :data:`EVENT_KINDS` (a categorical), e.g. ``PKR:20-50``,
    ``EXP:references``, ``MEM:high``, ``CON:finalize``, ``error:malformed``; ``detail`` is the
    part after the colon. ``t_rel``/``t_rel_end`` are the turn's start/end as a fraction of
    its own run (the turns table's ``active_rel_*`` or ``t_rel_*``); ``t_s``/``t_end_s`` are
    seconds since launch on that clock; ``duration_s`` the turn's time and ``elapsed_s`` the
    run's length on it; ``coach`` holds a HINT/REJECT decision, else None. ``sidechain`` names
    the subagent span a turn belongs to (None on the main line) with its ``sidechain_agent``,
    ``sidechain_parent`` (the turn that started it) and ``sidechain_depth``; ``compaction`` is
    True on the turn a compaction followed.
    """
    turns, runs = corpus.turns, corpus.runs
    rel_start, rel_end, turn_time, run_time = _clock(time)
    need = ["run_id", "model", "world", "task", "condition", "turn", "tool", "action",
            "lines_viewed", "finalize", "confidence", "error_type", rel_start, rel_end]
    missing = [c for c in need if c not in turns.columns]
    if missing:
        raise KeyError(f"turns table lacks column(s) {missing}")
    if turns.empty:
        return pd.DataFrame(columns=EVENT_COLUMNS)
    pos = run_positions(runs["run_id"], turns["run_id"])
    if (pos < 0).any():
        orphan = turns["run_id"].to_numpy()[pos < 0][0]
        raise ValueError(f"turns of run {orphan!r} have no row in the runs table")
    if run_time not in runs.columns:
        raise KeyError(f"runs table lacks column {run_time!r}")
    elapsed = runs[run_time].to_numpy(dtype=float)[pos]
    t_rel = turns[rel_start].to_numpy(dtype=float)
    t_rel_end = turns[rel_end].to_numpy(dtype=float)

    tool = _lookup(turns["tool"], lambda u: CANONICAL_ORDER.index(u) if u in CANONICAL_ORDER
                   else 99)
    lines = turns["lines_viewed"].to_numpy(dtype=float)
    size = np.select([lines < 20, lines <= 50], [0, 1], default=2)
    action = _lookup(turns["action"], lambda u: _exp_index(str(u)))
    action = np.where(action < 0, len(EXP_ACTIONS), action)
    conf = _lookup(turns["confidence"], lambda u: MEM_CONFIDENCE.index(str(u).lower())
                   if str(u).lower() in MEM_CONFIDENCE else 3)
    conf = np.where(conf < 0, 3, conf)
    fin = _lookup(turns["finalize"], lambda u: int(_true(u)))
    err = _lookup(turns["error_type"], lambda u: ERROR_KINDS.index(u) if u in ERROR_KINDS
                  else ERROR_KINDS.index("tool_error"))

    kind_idx = {k: i for i, k in enumerate(EVENT_KINDS)}
    det_idx = {d: i for i, d in enumerate(_DETAILS)}
    kind = np.full(len(turns), kind_idx["other"], dtype=np.int64)
    detail = np.full(len(turns), -1, dtype=np.int64)
    for t, name in enumerate(CANONICAL_ORDER):
        if name in ("PKR", "EXP", "MEM", "CON"):
            continue
        kind[tool == t] = kind_idx[name]
    m = tool == TOOL_ORDER.index("PKR")
    kind[m] = np.array([kind_idx[f"PKR:{c}"] for c in PKR_CLASSES])[size[m]]
    detail[m] = np.array([det_idx[c] for c in PKR_CLASSES])[size[m]]
    exp_names = [*EXP_ACTIONS, "other"]
    m = tool == TOOL_ORDER.index("EXP")
    kind[m] = np.array([kind_idx[f"EXP:{a}"] for a in exp_names])[action[m]]
    detail[m] = np.array([det_idx[a] for a in exp_names])[action[m]]
    mem_names = [*MEM_CONFIDENCE, "none"]
    m = tool == TOOL_ORDER.index("MEM")
    kind[m] = np.array([kind_idx[f"MEM:{c}"] for c in mem_names])[conf[m]]
    detail[m] = np.array([det_idx[c] for c in mem_names])[conf[m]]
    m = tool == TOOL_ORDER.index("CON")
    fin_m = np.maximum(fin[m], 0)
    kind[m] = np.array([kind_idx["CON:hold"], kind_idx["CON:finalize"]])[fin_m]
    detail[m] = np.array([det_idx["hold"], det_idx["finalize"]])[fin_m]
    m = err >= 0
    kind[m] = np.array([kind_idx[f"error:{e}"] for e in ERROR_KINDS])[err[m]]
    detail[m] = np.array([det_idx[e] for e in ERROR_KINDS])[err[m]]

    ev = turns[["run_id", "model", "world", "task", "condition", "turn"]].copy()
    ev["n_turns"] = runs["n_turns"].to_numpy()[pos]
    ev["tool"] = turns["tool"]
    ev["kind"] = pd.Categorical.from_codes(kind, categories=EVENT_KINDS)
    ev["detail"] = pd.Categorical.from_codes(detail, categories=_DETAILS)
    ev["lines_viewed"] = turns["lines_viewed"].to_numpy()
    ev["t_rel"] = t_rel
    ev["t_rel_end"] = t_rel_end
    ev["t_s"] = t_rel * elapsed
    ev["t_end_s"] = t_rel_end * elapsed
    ev["duration_s"] = (turns[turn_time].to_numpy(dtype=float) if turn_time in turns
                        else (t_rel_end - t_rel) * elapsed)
    ev["elapsed_s"] = elapsed
    ev["output_chars"] = (turns["output_chars"].to_numpy() if "output_chars" in turns
                          else np.full(len(turns), np.nan))
    if "coach_decision" in turns.columns:
        dec = _lookup(turns["coach_decision"],
                      lambda u: COACH_DECISIONS.index(u) if u in COACH_DECISIONS else -1)
        ev["coach"] = pd.Categorical.from_codes(dec, categories=list(COACH_DECISIONS))
    else:
        ev["coach"] = pd.Categorical.from_codes(np.full(len(turns), -1),
                                                categories=list(COACH_DECISIONS))
    for col, absent in SPAN_FIELDS.items():
        if col not in turns.columns:
            ev[col] = absent
        elif col == "compaction":
            ev[col] = turns[col].fillna(False).astype(bool).to_numpy()
        else:
            ev[col] = turns[col].astype(object).where(turns[col].notna(), None).to_numpy()
    return ev[EVENT_COLUMNS].reset_index(drop=True)


def _exp_index(action: str) -> int:
    text = action.lower()
    for i, key in enumerate(("def", "ref", "next")):
        if key in text:
            return i
    return len(EXP_ACTIONS)


def _true(value: object) -> bool:
    """True for a recorded True (bool, numpy bool or 1); False for False, None, NA, NaN."""
    try:
        return bool(value) if value is not None and value == value else False
    except TypeError:  # pd.NA
        return False


def long_pauses(events: pd.DataFrame | Corpus, factor: float = 3.0,
                time: str = "active") -> pd.DataFrame:
    """Turns whose wall time is at least ``factor`` times their run's median turn time,
    with ``ratio`` (duration / run median) and ``output_chars`` to compare against.

    ``events`` is an :func:`arc_events` table or a corpus (its events on the ``time`` clock,
    computed and filtered piece by piece for a corpus on disk)."""
    if factor <= 0:
        raise ValueError("factor must be positive")
    if isinstance(events, Corpus):
        _clock(time)
        return map_runs(events, lambda piece: long_pauses(_arc_events(piece, time), factor),
                        event_columns(time))
    med = events.groupby("run_id")["duration_s"].transform("median")
    ratio = events["duration_s"] / med.where(med > 0)
    out = events.assign(ratio=ratio)
    return out.loc[out["ratio"] >= factor].reset_index(drop=True)


def turn_time_output_correlation(
    data: Corpus | pd.DataFrame,
    by: str | Sequence[str] | None = "model",
    time: str = "active_s",
    output: str = "output_chars",
) -> pd.DataFrame:
    """Pearson and Spearman correlation of per-turn time with per-turn output length.

    ``time`` is a turns-table column: ``active_s`` (default: the agent's own time, without a
    coach review) or ``duration_s`` (the turn's wall time). ``data`` is a corpus or a turns
    table. Returns one row per group with ``n``, ``pearson_r``, ``pearson_p``,
    ``spearman_rho``, ``spearman_p`` and ``note`` (why a coefficient is NaN: fewer than 3
    turns, or a constant column; empty otherwise).
    """
    by_cols = [] if by is None else ([by] if isinstance(by, str) else list(by))
    turns = data
    if isinstance(data, Corpus):  # on disk, only these columns are read
        try:
            turns = data.table("turns", list(dict.fromkeys([*by_cols, time, output])))
        except ValueError as exc:
            raise KeyError(str(exc)) from None
    missing = [c for c in (*by_cols, time, output) if c not in turns.columns]
    if missing:
        raise KeyError(f"turns table lacks column(s) {missing}")
    cols = [*by_cols, "n", "pearson_r", "pearson_p", "spearman_rho", "spearman_p", "note"]
    if by_cols:
        group = turns.groupby(by_cols, sort=False).ngroup().to_numpy()
        _, first = np.unique(group, return_index=True)
        keys = [tuple(row) for row in turns[by_cols].iloc[first].itertuples(index=False)]
    else:
        group, keys = np.zeros(len(turns), dtype=np.int64), [()]
    xs = pd.to_numeric(turns[time], errors="coerce").to_numpy(dtype=float)
    ys = pd.to_numeric(turns[output], errors="coerce").to_numpy(dtype=float)
    rows = []
    for k, key in enumerate(keys):
        sel = group == k
        x, y = xs[sel], ys[sel]
        ok = np.isfinite(x) & np.isfinite(y)
        x, y = x[ok], y[ok]
        r = p = rho = sp = np.nan
        note = ""
        if len(x) < 3:
            note = f"undefined: n = {len(x)} turns (a correlation needs at least 3)"
        elif np.ptp(x) == 0 or np.ptp(y) == 0:
            note = "undefined: " + (time if np.ptp(x) == 0 else output) + " is constant"
        else:
            r, p = stats.pearsonr(x, y)
            rho, sp = stats.spearmanr(x, y)
        rows.append((*key, int(len(x)), float(r), float(p), float(rho), float(sp), note))
    out = pd.DataFrame(rows, columns=cols)
    for col in reversed(by_cols):
        order = {v: i for i, v in enumerate(figures.order_for(col, out[col].tolist()))}
        out = out.iloc[out[col].map(order).argsort(kind="stable")]
    return out.reset_index(drop=True)


# ----------------------------------------------------------------------------- plot


def format_reference(seconds: float) -> str:
    """The panel's reference duration as the paper prints it: ``100% = 4.5 min (269044 ms)``
    (seconds instead of minutes below one minute, e.g. ``100% = 8.2 s (8210 ms)``)."""
    if seconds >= 60:
        return f"100% = {seconds / 60:.1f} min ({seconds * 1000:.0f} ms)"
    return f"100% = {seconds:.1f} s ({seconds * 1000:.0f} ms)"


def _panels(
    runs: pd.DataFrame, facet: Sequence[str]
) -> list[tuple[tuple, pd.DataFrame]]:
    if not facet:
        return [((), runs)]
    keys = runs[list(facet)].drop_duplicates()
    order = []
    for col in facet:
        rank = {v: i for i, v in enumerate(figures.order_for(col, keys[col].tolist()))}
        order.append(keys[col].map(rank))
    keys = keys.assign(**{f"_k{i}": o for i, o in enumerate(order)})
    keys = keys.sort_values([f"_k{i}" for i in range(len(facet))], kind="stable")
    out = []
    for _, row in keys.iterrows():
        values = tuple(row[c] for c in facet)
        mask = np.logical_and.reduce([runs[c] == v for c, v in zip(facet, values, strict=True)])
        out.append((values, runs[mask]))
    return out


SPAN_COLUMNS: list[str] = ["sidechain", "lane", "agent", "depth", "parent_turn", "first_turn",
                           "last_turn", "n_turns"]


def _present(value: object) -> bool:
    return value is not None and value == value  # NaN and None are absent


def span_lanes(events: pd.DataFrame) -> pd.DataFrame:
    """The subagent spans of one run's events (:data:`SPAN_COLUMNS`, in order of their first
    turn): each span's ``lane`` under the main line (1, 2, ...; spans that overlap in turns, as
    parallel subagents do, get lanes of their own, a later span takes the first lane free
    again), its ``agent`` kind, ``depth``, ``parent_turn`` (the turn that started it, None
    when the source does not link them), first and last turn and number of turns."""
    if events["run_id"].nunique() > 1:
        raise ValueError("span_lanes reads one run's events")
    if "sidechain" not in events.columns:
        return pd.DataFrame(columns=SPAN_COLUMNS)
    side = events[events["sidechain"].map(_present)]
    if side.empty:
        return pd.DataFrame(columns=SPAN_COLUMNS)
    rows = []
    for key, g in side.groupby("sidechain", sort=False):
        first = g.iloc[0]
        parent, depth = first.get("sidechain_parent"), first.get("sidechain_depth")
        rows.append({"sidechain": str(key), "agent": str(first.get("sidechain_agent") or ""),
                     "depth": int(depth) if _present(depth) else 1,
                     "parent_turn": int(parent) if _present(parent) else None,
                     "first_turn": int(g["turn"].min()), "last_turn": int(g["turn"].max()),
                     "n_turns": len(g)})
    rows.sort(key=lambda r: r["first_turn"])
    ends: list[int] = []  # the last turn of the span last put on each lane
    for r in rows:
        free = next((k for k, end in enumerate(ends) if end < r["first_turn"]), None)
        if free is None:
            ends.append(r["last_turn"])
            free = len(ends) - 1
        ends[free] = r["last_turn"]
        r["lane"] = free + 1
    return pd.DataFrame(rows, columns=SPAN_COLUMNS)


def event_lanes(events: pd.DataFrame, spans: pd.DataFrame) -> np.ndarray:
    """Each event's lane: 0 on the main line, else its span's lane (:func:`span_lanes`)."""
    if spans.empty or "sidechain" not in events.columns:
        return np.zeros(len(events), dtype=int)
    lane = dict(zip(spans["sidechain"], spans["lane"], strict=True))
    return np.array([lane.get(k, 0) if _present(k) else 0 for k in events["sidechain"]],
                    dtype=int)


def lane_labels(spans: pd.DataFrame) -> dict[int, str]:
    """The label of each span lane: ``↳`` and the subagent kinds on it (``subagent`` when the
    source names none), indented once more per level of nesting."""
    out: dict[int, str] = {}
    for lane, g in spans.groupby("lane", sort=True):
        kinds = list(dict.fromkeys(a or "subagent" for a in g["agent"]))
        indent = "  " * (int(g["depth"].min()) - 1)
        out[int(lane)] = f"{indent}↳ " + ", ".join(kinds[:2]) + (" …" if len(kinds) > 2 else "")
    return out


def compaction_xs(events: pd.DataFrame, x: np.ndarray, x_end: np.ndarray,
                  axis: str) -> list[float]:
    """Where a run's compactions are drawn: on the turn axis halfway to the next turn of the
    same line (main line or span) after the turn the compaction followed (the turn's own
    position + 0.5 when none follows); on the time axis at that turn's end."""
    if "compaction" not in events.columns:
        return []
    flags = events["compaction"].fillna(False).astype(bool).to_numpy()
    lines = events["sidechain"].map(lambda k: k if _present(k) else "").to_numpy() \
        if "sidechain" in events.columns else np.full(len(events), "")
    turns = events["turn"].to_numpy()
    out = []
    for k in np.flatnonzero(flags):
        if axis != "turn":
            out.append(float(x_end[k]))
            continue
        later = (lines == lines[k]) & (turns > turns[k])
        out.append(float(x[later].min()) - 0.5 if later.any() else float(x[k]) + 0.5)
    return out


def _draw_spans(ax, ev: pd.DataFrame, spans: pd.DataFrame, x: np.ndarray, y: float,
                axis: str) -> None:
    """The bands, links and lanes of one run's subagent spans (``y``: its main line)."""
    pad = 0.35 if axis == "turn" else 0.8
    xs_by_turn = dict(zip(ev["turn"].to_numpy(), x, strict=True))
    for span in spans.itertuples():
        inside = x[(ev["sidechain"] == span.sidechain).to_numpy()]
        lane_y = y + LANE_STEP * span.lane
        parent_x = xs_by_turn.get(span.parent_turn) if span.parent_turn is not None else None
        left = min(inside.min(), parent_x) if parent_x is not None else inside.min()
        right = inside.max()
        ax.add_patch(Rectangle((left - pad, lane_y - 0.24), right - left + 2 * pad, 0.48,
                               facecolor=SPAN_COLOR, alpha=0.14, edgecolor=SPAN_COLOR,
                               linewidth=0.6, zorder=0.5, gid=f"sidechain:{span.sidechain}"))
        ax.plot([left, right], [lane_y, lane_y], color="#bbbbbb", linewidth=0.8, zorder=1)
        if parent_x is not None:
            parent_y = y + LANE_STEP * (0 if span.depth <= 1 else _lane_of_turn(
                ev, spans, span.parent_turn))
            ax.plot([parent_x, parent_x], [parent_y + 0.12, lane_y - 0.24], color=SPAN_COLOR,
                    linewidth=0.8, linestyle=(0, (2, 1.5)), zorder=1.5,
                    gid=f"spawn:{span.sidechain}")


def _lane_of_turn(ev: pd.DataFrame, spans: pd.DataFrame, turn: int) -> int:
    hit = ev[ev["turn"] == turn]
    return int(event_lanes(hit, spans)[0]) if not hit.empty else 0


def _end_positions(ev: pd.DataFrame, run: pd.Series, axis: str, scale: str,
                   ref: float) -> np.ndarray:
    """Each turn's end on the plot's x-axis (the turn axis: the turn itself)."""
    if axis == "turn":
        return ev["turn"].to_numpy(dtype=float)
    if scale == "run":
        return 100 * ev["t_rel_end"].to_numpy(dtype=float)
    return 100 * ev["t_end_s"].to_numpy(dtype=float) / ref


def plot_journey_arcs(
    events: pd.DataFrame,
    runs: pd.DataFrame | None = None,
    facet: Sequence[str] | None = ("condition", "model"),
    axis: Literal["time", "turn"] = "time",
    scale: Literal["panel", "run"] = "panel",
    max_runs_per_panel: int | None = 6,
    row_label: str | None = "world",
    sort_by: str = "run_id",
    width: float = 9.0,
) -> Figure:
    """Fig. 6: one timeline per run, one marker per turn, one panel per ``facet`` group.

    ``runs`` (the corpus's runs table, possibly filtered) chooses the runs drawn; without it
    every run in ``events`` is drawn. Each panel shows at most ``max_runs_per_panel`` runs
    (the first by ``sort_by``; None for all), labelled by ``row_label`` (extended by task,
    condition, model or repeat where two rows of a panel would read alike). ``axis="time"`` puts
    turns at their start time, as a percentage of the panel's longest run (``scale="panel"``,
    printed per panel) or of their own run (``scale="run"``); ``axis="turn"`` at their index.
    """
    if axis not in ("time", "turn"):
        raise ValueError(f"axis must be 'time' or 'turn', not {axis!r}")
    if scale not in ("panel", "run"):
        raise ValueError(f"scale must be 'panel' or 'run', not {scale!r}")
    if max_runs_per_panel is not None and max_runs_per_panel < 1:
        raise ValueError("max_runs_per_panel must be at least 1 (or None for all)")
    facet = list(facet or [])
    if runs is None:
        cols = ["run_id", "model", "world", "task", "condition", "elapsed_s", "n_turns"]
        runs = events[cols].drop_duplicates("run_id")
    missing = [c for c in [*facet, "run_id", "elapsed_s", "n_turns"] if c not in runs.columns]
    if missing:
        raise KeyError(f"runs table lacks column(s) {missing}")
    runs = runs[runs["run_id"].isin(set(events["run_id"]))]
    if runs.empty:
        raise ValueError("no runs to draw: the events and runs tables share no run_id")
    # run lengths on the events' clock (arc_events' elapsed_s), not the runs table's
    clock = events.groupby("run_id", sort=False)["elapsed_s"].first()
    runs = runs.assign(elapsed_s=runs["run_id"].map(clock).to_numpy(dtype=float))
    panels = []
    for values, prun in _panels(runs, facet):
        prun = prun.sort_values(sort_by, kind="stable") if sort_by in prun else prun
        if max_runs_per_panel is not None:
            prun = prun.head(max_runs_per_panel)
        panels.append((values, prun))

    by_run = {rid: g for rid, g in events.groupby("run_id", sort=False)}
    drawn = {rid for _, p in panels for rid in p["run_id"]}
    nested = set(events.loc[events["sidechain"].notna(), "run_id"]) & drawn \
        if "sidechain" in events.columns else set()
    lanes_of = {rid: span_lanes(by_run[rid]) for rid in nested}

    def n_lanes(rid: str) -> int:
        spans = lanes_of.get(rid)
        return int(spans["lane"].max()) if spans is not None and not spans.empty else 0

    figures.use_style()
    heights = [sum(1 + LANE_STEP * n_lanes(r) for r in p["run_id"]) + 1.2 for _, p in panels]
    fig = plt.figure(figsize=(width, 0.25 * sum(heights) + 1.1), layout="constrained")
    grid = fig.add_gridspec(len(panels), 1, height_ratios=heights)
    axes = [fig.add_subplot(grid[i, 0]) for i in range(len(panels))]
    kinds_seen: set[str] = set()
    extras_seen: set[str] = set()
    for ax, (values, prun) in zip(axes, panels, strict=True):
        if axis == "turn":
            ref = float(prun["n_turns"].max())
            ref_text = f"max = {int(ref)} turns"
        else:
            ref = float(prun["elapsed_s"].max())
            ref_text = format_reference(ref) if scale == "panel" else "100% = each run's end"
        ref = ref if ref > 0 else 1.0
        xs_all: dict[str, list] = {}
        ys_all: dict[str, list] = {}
        labels = row_labels(prun, row_label, facet)
        ticks: list[float] = []
        tick_labels: list[str] = []
        y = 0.0
        for row, (_, r) in enumerate(prun.iterrows()):
            if row:
                y += 1 + LANE_STEP * n_lanes(prun["run_id"].iloc[row - 1])
            ev = by_run.get(r["run_id"])
            spans = lanes_of.get(r["run_id"], pd.DataFrame(columns=SPAN_COLUMNS))
            ticks.append(y)
            tick_labels.append(labels[row])
            for lane, text in lane_labels(spans).items():
                ticks.append(y + LANE_STEP * lane)
                tick_labels.append(text)
            if axis == "turn":
                end = float(r["n_turns"])
                x = ev["turn"].to_numpy(dtype=float) if ev is not None else np.array([])
            elif scale == "run":
                end = 100.0
                x = 100 * ev["t_rel"].to_numpy(dtype=float) if ev is not None else np.array([])
            else:
                end = 100 * float(r["elapsed_s"]) / ref
                x = 100 * ev["t_s"].to_numpy(dtype=float) / ref if ev is not None \
                    else np.array([])
            ax.plot([0, end], [y, y], color="#bbbbbb", linewidth=1.0, zorder=1,
                    solid_capstyle="butt")
            if ev is None:
                continue
            ys = y + LANE_STEP * event_lanes(ev, spans)
            for kind, xv, yv in zip(ev["kind"], x, ys, strict=True):
                xs_all.setdefault(kind, []).append(xv)
                ys_all.setdefault(kind, []).append(yv)
            coach = ev["coach"].to_numpy()
            for dec, xv, yv in zip(coach, x, ys, strict=True):
                if dec in COACH_DECISIONS:
                    key = f"coach:{dec}"
                    xs_all.setdefault(key, []).append(xv)
                    ys_all.setdefault(key, []).append(yv - 0.42)
            if not spans.empty:
                _draw_spans(ax, ev, spans, x, y, axis)
                extras_seen.add("span")
            x_end = _end_positions(ev, r, axis, scale, ref)
            for cx in compaction_xs(ev, x, x_end, axis):
                ax.plot([cx, cx], [y - 0.42, y + LANE_STEP * n_lanes(r["run_id"]) + 0.3],
                        color=COMPACTION_COLOR, linewidth=1.2, linestyle=(0, (3, 2)), zorder=2,
                        gid="compaction")
                extras_seen.add("compaction")
        for kind in MARKERS:
            if kind not in xs_all:
                continue
            kinds_seen.add(kind)
            _, marker, color, size, filled = MARKERS[kind]
            _scatter(ax, xs_all[kind], ys_all[kind], marker, color, size, filled)
        unknown = set(xs_all) - set(MARKERS)
        for kind in sorted(unknown):
            kinds_seen.add("other")
            _, marker, color, size, filled = MARKERS["other"]
            _scatter(ax, xs_all[kind], ys_all[kind], marker, color, size, filled)
        ax.set_yticks(ticks, tick_labels)
        ax.set_ylim(y + LANE_STEP * n_lanes(prun["run_id"].iloc[-1]) + 0.6, -0.9)
        ax.grid(False)
        ax.spines["left"].set_visible(False)
        ax.tick_params(axis="y", length=0)
        title = " | ".join(figures.label_for(c, v) for c, v in zip(facet, values, strict=True))
        ax.set_title(title, loc="left", fontsize=9)
        ax.set_title(ref_text, loc="right", fontsize=8, color="#555555")
        if axis == "time":
            ax.set_xlim(-2, 102)
            ax.set_xticks([0, 25, 50, 75, 100], ["0", "25", "50", "75", "100%"])
        else:  # one turn scale for every panel: only the last panel prints it
            ax.set_xlim(0, max(float(p["n_turns"].max()) for _, p in panels) + 1)
    for ax in axes[:-1]:
        ax.tick_params(axis="x", labelbottom=False)
    axes[-1].set_xlabel("Normalized elapsed time" if axis == "time" else "Turn")
    handles: list = [_legend_handle(k) for k in MARKERS if k in kinds_seen]
    if "span" in extras_seen:
        handles.append(Patch(facecolor=SPAN_COLOR, alpha=0.3, edgecolor=SPAN_COLOR,
                             label="Subagent span"))
    if "compaction" in extras_seen:
        handles.append(Line2D([], [], color=COMPACTION_COLOR, linestyle=(0, (3, 2)),
                              linewidth=1.2, label="Compaction"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncol=min(8, len(handles)),
                   fontsize=7, handletextpad=0.3, columnspacing=1.0)
    return fig


#: Columns that tell two rows of a journey panel apart, tried in this order.
ROW_DETAILS: tuple[str, ...] = ("world", "task", "condition", "model", "repeat")


def row_labels(runs: pd.DataFrame, row_label: str | None,
               facet: Sequence[str] = ()) -> list[str]:
    """One label per run of a panel: its ``row_label`` value, extended (" · ") by the first
    of :data:`ROW_DETAILS` that vary in the panel until no two rows read alike (a repeat reads
    "r1"); ``#k`` numbers any rows still alike. Empty labels without ``row_label``."""
    if not row_label or row_label not in runs.columns:
        return [""] * len(runs)
    parts = [[figures.label_for(row_label, v)] for v in runs[row_label]]
    for col in ROW_DETAILS:
        if len({" · ".join(p) for p in parts}) == len(parts):
            break
        if col == row_label or col in facet or col not in runs.columns:
            continue
        values = runs[col].tolist()
        if len(set(map(str, values))) < 2:
            continue
        for p, v in zip(parts, values, strict=True):
            p.append(f"r{v}" if col == "repeat" else figures.label_for(col, v))
    labels = [" · ".join(p) for p in parts]
    alike = {text for text in labels if labels.count(text) > 1}
    seen: dict[str, int] = {}
    for k, text in enumerate(labels):
        if text in alike:
            seen[text] = seen.get(text, 0) + 1
            labels[k] = f"{text} #{seen[text]}"
    return labels


def _scatter(ax, xs, ys, marker: str, color: str, size: float, filled: bool) -> None:
    line_marker = marker in ("1", "2", "3", "4", "x", "+", ".")
    if filled or line_marker:
        ax.scatter(xs, ys, marker=marker, s=size, c=color, linewidths=0.9 if line_marker
                   else 0.3, edgecolors=None if line_marker else "white", zorder=3)
    else:
        ax.scatter(xs, ys, marker=marker, s=size, facecolors="white", edgecolors=color,
                   linewidths=0.9, zorder=3)


def _legend_handle(kind: str) -> Line2D:
    label, marker, color, size, filled = MARKERS[kind]
    return Line2D([], [], linestyle="none", marker=marker, markersize=np.sqrt(size),
                  markerfacecolor=color if filled else "white", markeredgecolor=color,
                  color=color, label=label)


def plot_time_output(
    data: Corpus | pd.DataFrame,
    by: str | None = "model",
    time: str = "active_s",
    output: str = "output_chars",
    max_points: int = 4000,
    seed: int = 0,
) -> Figure:
    """Per-turn time (``time``: active by default) against per-turn output length, one panel
    per ``by`` group, titled
    with the Pearson and Spearman coefficients of :func:`turn_time_output_correlation`.
    Large groups are thinned to ``max_points`` random turns for drawing (the coefficients
    always use every turn)."""
    turns = data.turns if isinstance(data, Corpus) else data
    corr = turn_time_output_correlation(turns, by=by, time=time, output=output)
    if corr.empty:
        raise ValueError("no turns to plot")
    figures.use_style()
    n = len(corr)
    cols = min(n, 4)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.8 * cols + 0.4, 2.6 * rows + 0.3),
                             squeeze=False)
    rng = np.random.default_rng(seed)
    colors = figures.colors_for(by, corr[by].tolist()) if by else {}
    for k, (ax, (_, row)) in enumerate(zip(axes.flat, corr.iterrows(), strict=False)):
        sub = turns[turns[by] == row[by]] if by else turns
        if len(sub) > max_points:
            sub = sub.iloc[np.sort(rng.choice(len(sub), max_points, replace=False))]
        ax.scatter(sub[output], sub[time], s=6, alpha=0.4, linewidths=0,
                   color=colors.get(row[by], figures.PALETTE[k % len(figures.PALETTE)])
                   if by else figures.PALETTE[0])
        name = f"{row[by]}: " if by else ""
        ax.set_title(f"{name}r = {row['pearson_r']:.3f}, rho = {row['spearman_rho']:.3f} "
                     f"(n = {row['n']})", fontsize=8)
        ax.set_xlabel("Output length (chars)")
        ax.set_ylabel("Turn wall time (s)" if time == "duration_s" else "Turn active time (s)")
    for ax in list(axes.flat)[n:]:
        ax.remove()
    return fig
