"""Anti-pattern detectors over one run's canonical steps (TraceProbe's Insight, issue 15 §2).

Each detector is a predicate with **named thresholds**. It finds candidate events in a run
(:class:`Event`: a turn span, a severity and the evidence in words); an event *fires* when its
severity reaches the detector's main threshold (``statistic="max"``), or, for detectors that
count events (``statistic="count"``), every event fires once the run holds at least that many.

======================  =====================================================  ===============
detector                event (severity)                                       main threshold
======================  =====================================================  ===============
search_loop             near-same searches, each within ``window`` steps of     min_repeats 3
                        the last, with no read of a file the last search
                        returned in between (searches in the chain)
reread_churn            reads of one file's range overlapping the first read    min_reads 3
                        of it by >= ``min_overlap`` of the shorter (reads)
tool_oscillation        a stretch of action steps alternating A-B-A-B between   min_length 6
                        two tools (steps in the stretch)
verification_skip       an edit of a file nothing read before (and the run did  min_events 1
                        not create); a finalizing step after edits with no
                        command or read since the last edit; a finalizing
                        conclusion citing a file whose code was never shown
                        (PKR/HNT) before it (events in the run)
edit_revert_cycle       a file edited, the edit undone, the file edited again   min_cycles 1
                        (cycles on that file)
premature_conclusion    a conclusion citing files, most or all not read by any  min_unread_share
                        read or search before it (share of them unread)         1.0
======================  =====================================================  ===============

**Frozen or calibrated.** :data:`DETECTORS` holds the frozen values. :func:`calibrate` sets
each main threshold from a corpus instead: the ``percentile`` (default 90th) of the detector's
per-run statistic (the largest severity, or the event count) over the runs where the detector
has a candidate at all, rounded up for counts, and never below the detector's ``floor``. A
calibrated threshold therefore lets about the top tenth of candidate runs fire, whatever the
benchmark; :func:`thresholds_frame` prints the values used and where they came from.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from adakit import uncertainty
from adakit.diagnostics.steps import CREATE_ACTIONS, READS, Trace, cites

FIRING_COLUMNS = ["run_id", "detector", "first_turn", "last_turn", "severity", "evidence"]


class Event(NamedTuple):
    """A candidate anti-pattern in one run."""

    severity: float
    first_turn: int
    last_turn: int
    evidence: str


Finder = Callable[[Trace, Mapping[str, float]], list[Event]]


@dataclass(frozen=True)
class Detector:
    """A named predicate: its description, frozen thresholds, the main one calibration sets
    (never below ``floor``), and how a run's statistic is taken (``max`` or ``count``)."""

    name: str
    description: str
    thresholds: Mapping[str, float]
    main: str
    floor: float
    statistic: str
    unit: str
    find: Finder


# --------------------------------------------------------------------------- finders

_NON_WORD = re.compile(r"[^a-z0-9_]+")
_DEF = re.compile(r"^\s*(?:def|class|function|fn|struct|func)\s+")


def search_key(text: str | None) -> str:
    """A search term reduced for comparison: lower case, definition keyword and punctuation
    dropped (``'def url_for('`` and ``url_for`` give the same key)."""
    if not text:
        return ""
    return _NON_WORD.sub("", _DEF.sub("", text.lower()))


def near_same(a: str, b: str) -> bool:
    """Two search keys are near-same when equal, or one (3+ characters) contains the other."""
    if a == b:
        return bool(a)
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    return len(short) >= 3 and short in long_


def _same_file(a: str, b: str) -> bool:
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def find_search_loops(tr: Trace, th: Mapping[str, float]) -> list[Event]:
    """Chains of near-same searches (see the module table)."""
    window = th["window"]
    chains: list[dict] = []
    for i, s in enumerate(tr.steps):
        if s.tool == "EXP":
            key = search_key(s.symbol)
            if not key:
                continue
            for c in chains:
                if not c["broken"] and i - c["last"] <= window and near_same(c["key"], key):
                    c["members"].append(i)
                    c["last"], c["results"] = i, s.results
                    break
            else:
                chains.append({"key": key, "members": [i], "last": i, "results": s.results,
                               "broken": False, "term": s.symbol})
        elif s.tool in ("PKR", "OVW") and s.file and s.error is None:
            for c in chains:
                if not c["broken"] and (not c["results"] or any(
                        _same_file(s.file, r) for r in c["results"])):
                    c["broken"] = True
    out = []
    for c in chains:
        n = len(c["members"])
        if n >= 2:
            turns = [tr.steps[k].turn for k in c["members"]]
            out.append(Event(n, turns[0], turns[-1],
                             f"{n} searches for {c['term']!r} (turns {', '.join(map(str, turns))}) "
                             f"with no read of their results between"))
    return out


def find_reread_churn(tr: Trace, th: Mapping[str, float]) -> list[Event]:
    """Clusters of overlapping reads of one file's lines."""
    share = th["min_overlap"]
    clusters: dict[str, list[list]] = {}
    for s in tr.steps:
        if s.tool != "PKR" or not s.file or s.start_line is None or s.error is not None:
            continue
        lo, hi = int(s.start_line), int(s.end_line if s.end_line is not None else s.start_line)
        for c in clusters.setdefault(s.file, []):
            inter = min(hi, c[1]) - max(lo, c[0]) + 1
            if inter > 0 and inter >= share * min(hi - lo + 1, c[1] - c[0] + 1):
                c[2].append(s.turn)
                break
        else:
            clusters[s.file].append([lo, hi, [s.turn]])
    out = []
    for file, cs in clusters.items():
        for lo, hi, turns in cs:
            if len(turns) >= 2:
                out.append(Event(len(turns), turns[0], turns[-1],
                                 f"{file} lines {lo}-{hi} read {len(turns)} times "
                                 f"(turns {', '.join(map(str, turns))})"))
    return out


def find_tool_oscillation(tr: Trace, th: Mapping[str, float]) -> list[Event]:
    """Stretches of A-B-A-B alternation between two tools (action steps only)."""
    acts = [s for s in tr.steps if s.tool is not None]
    tools = [s.tool for s in acts]
    out = []
    start, k, n = None, 2, len(tools)

    def close(a: int, b: int) -> None:
        length = b - a + 1
        if length >= 4:
            out.append(Event(length, acts[a].turn, acts[b].turn,
                             f"{tools[a]} and {tools[a + 1]} alternate for {length} steps"))

    while k < n:
        alt = tools[k] == tools[k - 2] and tools[k] != tools[k - 1]
        if alt and start is None:
            start = k - 2
        elif not alt and start is not None:
            close(start, k - 1)
            start = None
        k += 1
    if start is not None:
        close(start, n - 1)
    return out


def _cited(tr: Trace, text: str) -> list[str]:
    files = {s.file for s in tr.steps if s.file and s.file != "."} | set(tr.facts.anchors)
    return sorted(f for f in files if cites(text, f))


def find_verification_skips(tr: Trace, th: Mapping[str, float]) -> list[Event]:
    """Edits and finalizations without a read (or run) of the code they rest on."""
    out = []
    read: set[str] = set()
    shown: set[str] = set()
    created: set[str] = set()
    last_edit: int | None = None
    checked_since_edit = True
    for s in tr.steps:
        if s.tool == "EDT" and s.file and not s.undo and s.error is None:
            if s.action in CREATE_ACTIONS:
                created.add(s.file)
            elif s.file not in read and s.file not in created:
                out.append(Event(1, s.turn, s.turn, f"edit of {s.file} at turn {s.turn} with no "
                                 "read of it before"))
            last_edit, checked_since_edit = s.turn, False
        elif s.tool == "EXE" and s.error is None:
            checked_since_edit = True
        elif s.tool in READS and s.file and s.error is None:
            read.add(s.file)
            if s.tool in ("PKR", "HNT"):
                shown.add(s.file)
            if last_edit is not None:
                checked_since_edit = True
        if s.finalize and s.tool in ("SUB", "CON") and s.error is None:
            if last_edit is not None and not checked_since_edit:
                out.append(Event(1, last_edit, s.turn, f"finalized at turn {s.turn} with nothing "
                                 f"run or read since the edit at turn {last_edit}"))
            elif s.tool == "CON":
                unseen = [f for f in _cited(tr, s.text or tr.facts.conclusion) if f not in shown]
                if unseen:
                    out.append(Event(1, s.turn, s.turn, f"final conclusion at turn {s.turn} cites "
                                     f"{', '.join(unseen[:3])} without having read its code"))
    return out


def find_edit_revert_cycles(tr: Trace, th: Mapping[str, float]) -> list[Event]:
    """Files edited, undone and edited again."""
    state: dict[str, str] = {}  # file -> "edited" | "undone"
    cycles: dict[str, list[tuple[int, int, int]]] = {}
    undone_at: dict[str, tuple[int, int]] = {}
    first_edit: dict[str, int] = {}
    last_added: dict[str, str] = {}
    for s in tr.steps:
        if s.tool != "EDT" or s.error is not None:
            continue
        if s.undo:
            targets = [s.file] if s.file else [f for f, v in state.items() if v == "edited"]
            for f in targets:
                if state.get(f) == "edited":
                    state[f] = "undone"
                    undone_at[f] = (first_edit[f], s.turn)
            continue
        if not s.file:
            continue
        f = s.file
        swap = (s.removed is not None and f in last_added
                and s.removed.strip() == last_added[f].strip() and state.get(f) == "edited")
        if swap:
            state[f] = "undone"
            undone_at[f] = (first_edit[f], s.turn)
            continue
        if state.get(f) == "undone":
            a, b = undone_at[f]
            cycles.setdefault(f, []).append((a, b, s.turn))
        if state.get(f) != "edited":
            first_edit[f] = s.turn
        state[f] = "edited"
        if s.added is not None:
            last_added[f] = s.added
    out = []
    for f, cs in cycles.items():
        text = "; ".join(f"edit {a} -> undone {b} -> edit {c}" for a, b, c in cs)
        out.append(Event(len(cs), cs[0][0], cs[-1][2], f"{f}: {text}"))
    return out


def find_premature_conclusions(tr: Trace, th: Mapping[str, float]) -> list[Event]:
    """Conclusions citing files the run had not read yet."""
    out = []
    read: set[str] = set()
    for s in tr.steps:
        if s.tool in READS and s.file and s.error is None:
            read.add(s.file)
        elif s.tool == "CON" and s.error is None and s.text:
            cited = _cited(tr, s.text)
            if not cited:
                continue
            unread = [f for f in cited if f not in read]
            share = len(unread) / len(cited)
            if share > 0:
                out.append(Event(share, s.turn, s.turn, f"conclusion at turn {s.turn} cites "
                                 f"{len(cited)} file(s), {len(unread)} not read before "
                                 f"({', '.join(unread[:3])})"))
    return out


#: The detector catalogue with its frozen thresholds.
DETECTORS: tuple[Detector, ...] = (
    Detector("search_loop", "the same or a near-same search repeated within a few steps "
             "without reading what it found", {"min_repeats": 3, "window": 5}, "min_repeats",
             2, "max", "count", find_search_loops),
    Detector("reread_churn", "the same line range read again and again",
             {"min_reads": 3, "min_overlap": 0.5}, "min_reads", 2, "max", "count",
             find_reread_churn),
    Detector("tool_oscillation", "A-B-A-B alternation between two tools",
             {"min_length": 6}, "min_length", 4, "max", "count", find_tool_oscillation),
    Detector("verification_skip", "an edit or a finalization with no read of the edited or "
             "cited code before it", {"min_events": 1}, "min_events", 1, "count", "count",
             find_verification_skips),
    Detector("edit_revert_cycle", "a file edited, undone and edited again",
             {"min_cycles": 1}, "min_cycles", 1, "max", "count", find_edit_revert_cycles),
    Detector("premature_conclusion", "a conclusion before any read of the files it cites",
             {"min_unread_share": 1.0}, "min_unread_share", 0.5, "max", "share",
             find_premature_conclusions),
)
BY_NAME: dict[str, Detector] = {d.name: d for d in DETECTORS}
#: One letter and one colour per detector, for marks on a turn axis.
DETECTOR_CODES: dict[str, str] = {"search_loop": "S", "reread_churn": "R",
                                  "tool_oscillation": "O", "verification_skip": "V",
                                  "edit_revert_cycle": "E", "premature_conclusion": "P"}
DETECTOR_COLORS: dict[str, str] = {"search_loop": "#D95F02", "reread_churn": "#7570B3",
                                   "tool_oscillation": "#66A61E", "verification_skip": "#E7298A",
                                   "edit_revert_cycle": "#A6761D",
                                   "premature_conclusion": "#1B9E77"}
DETECTOR_NAMES: tuple[str, ...] = tuple(BY_NAME)
Thresholds = dict[str, dict[str, float]]


def frozen_thresholds() -> Thresholds:
    """Every detector's frozen thresholds (a fresh, editable copy)."""
    return {d.name: dict(d.thresholds) for d in DETECTORS}


# --------------------------------------------------------------------------- running them


def run_events(tr: Trace, thresholds: Thresholds | None = None) -> dict[str, list[Event]]:
    """Every detector's candidate events in one run (before the main thresholds)."""
    th = thresholds or frozen_thresholds()
    return {d.name: d.find(tr, th[d.name]) for d in DETECTORS}


def _fires(d: Detector, events: list[Event], value: float) -> list[Event]:
    if d.statistic == "count":
        return events if len(events) >= value else []
    return [e for e in events if e.severity >= value - 1e-12]


def statistic(d: Detector, events: list[Event]) -> float:
    """A run's statistic for a detector: its largest severity or its event count (0: none)."""
    if d.statistic == "count":
        return float(len(events))
    return max((e.severity for e in events), default=0.0)


def detect(traces: Sequence[Trace], thresholds: Thresholds | None = None
           ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The firings (one row per firing: run, detector, turn span, severity, evidence) and each
    run's per-detector statistic (``stat_<detector>``) and firing count (``n_<detector>``)."""
    th = thresholds or frozen_thresholds()
    rows, stats = [], []
    for tr in traces:
        events = run_events(tr, th)
        row: dict[str, object] = {"run_id": tr.facts.run_id}
        for d in DETECTORS:
            fired = _fires(d, events[d.name], th[d.name][d.main])
            row[f"stat_{d.name}"] = statistic(d, events[d.name])
            row[f"n_{d.name}"] = len(fired)
            rows.extend((tr.facts.run_id, d.name, e.first_turn, e.last_turn, float(e.severity),
                         e.evidence) for e in fired)
        stats.append(row)
    firings = pd.DataFrame(rows, columns=FIRING_COLUMNS)
    per_run = pd.DataFrame(stats, columns=["run_id", *(f"{p}_{d}" for d in DETECTOR_NAMES
                                                       for p in ("stat", "n"))])
    return firings, per_run


def calibrate(per_run: pd.DataFrame, percentile: float = 90.0,
              base: Thresholds | None = None) -> Thresholds:
    """Main thresholds set from a corpus: the ``percentile`` of each detector's per-run
    statistic over runs with a candidate (statistic > 0), rounded up for counts, at least the
    floor; a detector without candidates keeps its frozen value. ``per_run`` is
    :func:`detect`'s second table."""
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile}")
    th = {k: dict(v) for k, v in (base or frozen_thresholds()).items()}
    for d in DETECTORS:
        values = per_run[f"stat_{d.name}"].to_numpy(dtype=float)
        values = values[values > 0]
        if len(values) == 0:
            continue
        value = float(np.percentile(values, percentile))
        if d.unit == "count":
            value = float(math.ceil(value - 1e-9))
        th[d.name][d.main] = max(value, d.floor)
    return th


def with_candidates(per_run: pd.DataFrame) -> list[str]:
    """The detectors that have a candidate in some run (those :func:`calibrate` can set)."""
    return [d for d in DETECTOR_NAMES if (per_run[f"stat_{d}"] > 0).any()]


def thresholds_frame(thresholds: Thresholds, calibrated: Sequence[str] = (),
                     percentile: float | None = None) -> pd.DataFrame:
    """Every threshold in use: detector, name, value, its frozen value, and its source
    (``frozen``, or ``calibrated (pNN)`` for the main thresholds of ``calibrated``)."""
    rows = []
    for d in DETECTORS:
        for name, value in thresholds[d.name].items():
            source = "frozen"
            if d.name in calibrated and name == d.main:
                source = f"calibrated (p{percentile:g})" if percentile is not None else "calibrated"
            rows.append({"detector": d.name, "threshold": name, "value": value,
                         "frozen": d.thresholds.get(name), "source": source})
    return pd.DataFrame(rows)


def catalogue() -> pd.DataFrame:
    """The detectors as a table: name, description, main threshold, frozen value, statistic."""
    return pd.DataFrame([{"detector": d.name, "description": d.description, "main": d.main,
                          "frozen": d.thresholds[d.main], "floor": d.floor,
                          "statistic": d.statistic,
                          "other": ", ".join(f"{k} {v:g}" for k, v in d.thresholds.items()
                                             if k != d.main)} for d in DETECTORS])


def detector_rates(per_run: pd.DataFrame, runs: pd.DataFrame, by: str | Sequence[str] = "model",
                   n_resamples: int = uncertainty.DEFAULT_RESAMPLES, seed: int = 0,
                   level: float = uncertainty.DEFAULT_LEVEL,
                   min_runs: int = uncertainty.MIN_RUNS) -> pd.DataFrame:
    """Firings per 100 steps by group and detector, pooled over the group's runs, with
    bootstrap intervals over runs (:func:`adakit.uncertainty.bootstrap_ratios`); long form:
    the ``by`` columns, ``detector``, ``n_runs``, ``rate``, ``rate_lo``, ``rate_hi``, ``note``.
    ``per_run`` needs ``run_id``, ``steps`` and the ``n_<detector>`` columns."""
    by = [by] if isinstance(by, str) else list(by)
    frame = per_run.merge(runs[["run_id", *[c for c in by if c not in per_run.columns]]],
                          on="run_id")
    metrics = {d: (f"n_{d}", "steps") for d in DETECTOR_NAMES}
    wide = uncertainty.bootstrap_ratios(frame, by, metrics, n_resamples=n_resamples, seed=seed,
                                        level=level, min_runs=min_runs, scale=100.0)
    parts = []
    for d in DETECTOR_NAMES:
        part = wide[[*by, "n_runs"]].copy()
        part.insert(len(by), "detector", d)
        part["rate"], part["rate_lo"], part["rate_hi"] = wide[d], wide[f"{d}_lo"], wide[f"{d}_hi"]
        part["note"] = np.where(wide[f"{d}_n"] < min_runs, uncertainty.TOO_FEW, "")
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def score_association(per_run: pd.DataFrame, scores: pd.Series, runs: pd.DataFrame,
                      task: Sequence[str] = ("world", "task", "target")) -> pd.DataFrame:
    """Do firings go with lower lens 3 scores? Per detector: runs with and without a firing
    (among scored runs), their mean scores and the difference (``diff``), and the same
    difference on scores centred on their task's mean (``diff_within_task``, only tasks holding
    both kinds of run). A difference that vanishes within tasks marks a *difficulty clue* (the
    detector fires on hard tasks); one that stays marks a *failure predictor*."""
    task = [c for c in task if c in runs.columns]
    frame = per_run.merge(runs[["run_id", *[c for c in task if c not in per_run]]],
                          on="run_id")
    frame["score"] = frame["run_id"].map(scores)
    frame = frame[frame["score"].notna()].copy()
    key = pd.Series(["/".join("" if pd.isna(v) else str(v) for v in row)
                     for row in frame[task].itertuples(index=False)] if task else "",
                    index=frame.index)
    frame["centred"] = frame["score"] - frame.groupby(key)["score"].transform("mean")
    rows = []
    for d in DETECTOR_NAMES:
        hit = frame[f"n_{d}"] > 0
        mixed = hit.groupby(key).transform(lambda s: 0 < s.sum() < len(s))
        inside = frame[mixed]
        row = {"detector": d, "runs_fired": int(hit.sum()), "runs_clean": int((~hit).sum()),
               "score_fired": frame.loc[hit, "score"].mean(),
               "score_clean": frame.loc[~hit, "score"].mean(),
               "tasks_mixed": int(key[mixed].nunique())}
        row["diff"] = row["score_fired"] - row["score_clean"]
        fired_in = inside[f"n_{d}"] > 0
        row["diff_within_task"] = (inside.loc[fired_in, "centred"].mean()
                                   - inside.loc[~fired_in, "centred"].mean()) if len(inside) else np.nan
        if row["runs_fired"] == 0 or row["runs_clean"] == 0:
            row["reading"] = "cannot tell (every scored run is alike)"
        elif np.isnan(row["diff_within_task"]):
            row["reading"] = "no task holds both kinds of run"
        elif row["diff_within_task"] < 0:
            row["reading"] = "lower scores within tasks: failure predictor?"
        elif row["diff"] < 0:
            row["reading"] = "lower scores only across tasks: difficulty clue"
        else:
            row["reading"] = "no lower scores"
        rows.append(row)
    return pd.DataFrame(rows)
