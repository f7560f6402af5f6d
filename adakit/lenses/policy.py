"""Lens 2, the action policy lens (mechanism layer): Table 5's transition codes, tag shares
(Fig. 7, Fig. D6), deviation-from-average heatmaps (Fig. D7, D8), lifetime regimes (Fig. 12b)
and plain n-gram mining of tool sequences.

Every adjacent pair of tool calls within a run is tagged with one code of Table 5. The rules are
data (:data:`RULE_TABLE`: tag, from-pattern, to-pattern, condition); :func:`ordered_rules`
sorts them by the paper's precedence and :func:`tag_transitions` gives each transition the tag
of the first rule that matches.

Table 5 as used here
--------------------
Patterns are a tool abbreviation (OVW, PKR, EXP, MEM, BKM, HNT, CON), a class (NAV = {OVW,
PKR, EXP}, COG = {MEM, BKM, HNT, CON}) or ANY. ``$`` and ``*`` qualify the to-side.

=================  =====================================================
close read         PKR -> PKR$ ; EXP -> PKR$
skim               OVW -> OVW ; NAV -> PKR* ; ANY -> PKR*
traverse           NAV -> PKR ; ANY -> PKR
trace              ANY -> EXP ; ANY -> OVW*
zoom in            OVW -> PKR ; OVW -> EXP
zoom out           ANY -> OVW
resume             COG -> NAV
other read         ANY -> NAV
close out          NAV -> CON (terminal)
interim synth      NAV -> CON (non-terminal)
dump               NAV -> COG ; ANY -> COG
cognitive streak   COG -> COG
other              ANY -> ANY
=================  =====================================================

Imported agents
---------------
Trajectories of other agents (``adakit import``) also carry EDT (edit), EXE (execute) and SUB
(submit) steps, the class ACT. :data:`ACTION_RULES` adds four tags for transitions *into* those
classes, documented there: edit (ANY -> EDT), verify (EDT -> EXE), run (ANY -> EXE) and
submit (ANY -> SUB). :data:`EXTENDED_RULE_TABLE` (Table 5 plus these, before *other*) is the
default of :func:`tag_transitions`; it changes no tag of a run made of Ada's seven tools.
Transitions *into* Ada's tools keep Table 5's tags whatever they come from (EDT -> PKR is a
*traverse*), so :func:`reading_transitions` compares any agent with Ada on Table 5's tags.

How every ambiguity is resolved
-------------------------------
* **Broken glyphs in the extracted table.** In the text extraction of the PDF some arrows and
  rule fragments left their cells: skim reads "NAV PKR*" with a lone arrow on the next line,
  and "EXP;" / "ANY" / an arrow were pushed below the last row. The only reading that uses
  every stray fragment exactly once is skim = ``NAV -> PKR*`` and trace = ``ANY -> EXP ;
  ANY -> OVW*`` ("following code relations" is EXP; "shifting structural attention across
  files" is OVW*). interim synth's cell "NAV -> non-terminal / CON" reads ``NAV -> CON``
  with the non-terminal qualifier.
* **Precedence.** Rules are sorted by four keys: (1) exact rules (a tool on both sides) before
  wildcard rules; (2) among wildcard rules, those whose wildcards are only the classes NAV/COG
  before those that use ANY; (3) ``$`` before ``*`` before plain rules (the terminal /
  non-terminal qualifier counts as plain: the two are mutually exclusive); (4) ties by the
  table's list order. Consequences: OVW -> PKR and OVW -> EXP are always *zoom in*; OVW -> OVW
  is always *skim*, whether or not the file changes (the exact rule wins over ANY -> OVW*);
  COG -> any NAV tool is always *resume* (the class rule wins over ANY -> PKR* / ANY -> EXP /
  ANY -> OVW*); NAV -> CON is *close out* or *interim synth*, never *dump* (list order);
  COG -> CON is a *cognitive streak* even when it finalizes. With Ada's seven tools *other
  read* and *other* are reached only by a tool outside the seven (e.g. a custom tool).
* **``*`` (different current file targets).** The current file target of a turn is the file
  its tool call names and that call succeeded on: PKR's file, OVW's file (Table 1: the outline
  of a file or of a block in it), EXP's recorded file (where the jump landed), BKM's / HNT's
  file when they record one. A turn without a file (MEM, CON, an EXP over references in many
  files) or whose call failed keeps the target of the latest earlier turn of the run (the agent
  has not moved). ``*`` holds when both targets are known and differ; a folder target and a
  file inside that folder are the same place.
* **``$`` (continuous line ranges).** Both turns succeeded, name the same file, carry a line
  range, and the next range starts inside the previous one or right after it:
  ``prev.start <= next.start <= prev.end + 1``. Jumps backwards or past a gap are not
  continuous. The first range of a turn (``start_line``/``end_line`` of the turns table) is used.
* **Terminal CON.** A CON whose ``finalize`` flag is true is terminal (a finalize *attempt*: under
  the coach condition a rejected attempt still counts as close out, as in Fig. 12b); false is
  non-terminal; a missing flag counts as terminal only on the run's last tool turn.
* **Turns without a tool call and errors.** Turns whose reply had no usable tool call (parse
  errors, unknown tools, model errors, i.e. no ``tool`` or ``error_type`` in {malformed,
  unknown_tool, model_error}) are not tool calls and are skipped: their neighbours become
  adjacent and the transition keeps the real turn indices (``turn_to - turn_from > 1``
  shows the bridge). Calls that reached a tool and failed (``tool_error``) are tool calls
  and are tagged like any other, but they show nothing: they never satisfy ``$`` and do not
  move the file target. ``drop_errors=True`` skips them as well.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure

from adakit import figures, uncertainty
from adakit.record import ACT, ACT_ORDER, COG, NAV, TOOL_ORDER, Corpus, map_runs
from adakit.uncertainty import require_columns

CLASSES: dict[str, frozenset[str]] = {"NAV": NAV, "COG": COG, "ACT": ACT}
CONDITIONS = ("$", "*", "terminal", "non-terminal")
#: Turns with these error types carry no tool call and are skipped by the lens.
NO_CALL_ERRORS = frozenset({"malformed", "unknown_tool", "model_error"})

#: Table 5 as data: (tag, from-pattern, to-pattern, condition), in the table's list order.
RULE_TABLE: tuple[tuple[str, str, str, str | None], ...] = (
    ("close read", "PKR", "PKR", "$"),
    ("close read", "EXP", "PKR", "$"),
    ("skim", "OVW", "OVW", None),
    ("skim", "NAV", "PKR", "*"),
    ("skim", "ANY", "PKR", "*"),
    ("traverse", "NAV", "PKR", None),
    ("traverse", "ANY", "PKR", None),
    ("trace", "ANY", "EXP", None),
    ("trace", "ANY", "OVW", "*"),
    ("zoom in", "OVW", "PKR", None),
    ("zoom in", "OVW", "EXP", None),
    ("zoom out", "ANY", "OVW", None),
    ("resume", "COG", "NAV", None),
    ("other read", "ANY", "NAV", None),
    ("close out", "NAV", "CON", "terminal"),
    ("interim synth", "NAV", "CON", "non-terminal"),
    ("dump", "NAV", "COG", None),
    ("dump", "ANY", "COG", None),
    ("cognitive streak", "COG", "COG", None),
    ("other", "ANY", "ANY", None),
)

#: Rules for the action classes of imported agents (EDT edit, EXE execute, SUB submit; ACT =
#: all three), which lie outside Ada's read-only set. They only ever match a transition *into*
#: one of those classes, where Table 5 would fall through to *other*; transitions into Ada's
#: tools keep Table 5's tags, so reading is tagged alike for every agent.
#:
#: * **edit** ``ANY -> EDT``: the agent changes a file after whatever it did before.
#: * **verify** ``EDT -> EXE``: a command run right after an edit, i.e. trying the change
#:   (an exact rule, so it wins over *run*).
#: * **run** ``ANY -> EXE``: any other execution (reproduce scripts, tests before editing,
#:   installs, ``git diff``).
#: * **submit** ``ANY -> SUB``: handing in the result, terminal like *close out*.
ACTION_RULES: tuple[tuple[str, str, str, str | None], ...] = (
    ("verify", "EDT", "EXE", None),
    ("edit", "ANY", "EDT", None),
    ("run", "ANY", "EXE", None),
    ("submit", "ANY", "SUB", None),
)
#: Table 5 with :data:`ACTION_RULES` inserted before its fallback *other* (list order is the
#: last precedence key); the default of :func:`tag_transitions`. On runs of Ada's seven tools
#: it tags exactly like Table 5.
EXTENDED_RULE_TABLE: tuple[tuple[str, str, str, str | None], ...] = (
    *RULE_TABLE[:-1], *ACTION_RULES, RULE_TABLE[-1],
)

#: The tags in Table 5 order.
TAGS: list[str] = list(dict.fromkeys(r[0] for r in RULE_TABLE))
#: The tags of :data:`ACTION_RULES`.
ACTION_TAGS: list[str] = list(dict.fromkeys(r[0] for r in ACTION_RULES))
#: Stacking / legend order of Fig. 7 (reading, orientation, cognition, closing).
TAG_PLOT_ORDER: list[str] = [
    "close read", "traverse", "trace", "zoom in", "skim", "zoom out", "dump", "resume",
    "cognitive streak", "interim synth", "close out", "other read", "edit", "verify", "run",
    "submit", "other",
]
#: One colour per tag: warm for reading, blue for orientation, green for cognition.
TAG_COLORS: dict[str, str] = {
    "close read": "#B2182B",
    "traverse": "#EF8A62",
    "trace": "#FDDBC7",
    "zoom in": "#2166AC",
    "skim": "#67A9CF",
    "zoom out": "#D1E5F0",
    "dump": "#1B7837",
    "resume": "#7FBF7B",
    "cognitive streak": "#D9F0D3",
    "interim synth": "#9970AB",
    "close out": "#40004B",
    "other read": "#BABABA",
    "edit": "#8C510A",
    "verify": "#BF812D",
    "run": "#DFC27D",
    "submit": "#01665E",
    "other": "#878787",
}

_TOOLS = [*TOOL_ORDER, *ACT_ORDER]
TAG_COLUMNS = ["run_id", "turn_from", "turn_to", "from_tool", "to_tool", "tag", "rule"]
_NEEDED_TURN_COLUMNS = ("run_id", "turn", "tool")
#: The turns columns tagging reads (:func:`tag_transitions`), asked of a corpus on disk.
TAGGING_COLUMNS: dict[str, list[str]] = {
    "runs": ["run_id"],
    "turns": ["run_id", "turn", "tool", "error_type", "file", "start_line", "end_line",
              "finalize"],
    "reads": ["run_id"],
}


@dataclass(frozen=True)
class Rule:
    """One operational rule of Table 5; ``order`` is its position in the table's list."""

    tag: str
    source: str
    target: str
    condition: str | None
    order: int

    def __post_init__(self) -> None:
        for side in (self.source, self.target):
            if side != "ANY" and side not in CLASSES and side not in _TOOLS:
                raise ValueError(
                    f"rule {self.tag!r}: pattern {side!r} is not a tool ({', '.join(_TOOLS)}),"
                    " a class (NAV, COG, ACT) or ANY"
                )
        if self.condition is not None and self.condition not in CONDITIONS:
            raise ValueError(
                f"rule {self.tag!r}: condition {self.condition!r} is not one of {CONDITIONS}"
            )

    @property
    def exact(self) -> bool:
        return self.source not in CLASSES and self.source != "ANY" and (
            self.target not in CLASSES and self.target != "ANY"
        )

    @property
    def uses_any(self) -> bool:
        return "ANY" in (self.source, self.target)

    def precedence(self) -> tuple[int, int, int]:
        """Sort key: exactness, wildcard class specificity, condition, list order."""
        tier = 0 if self.exact else (2 if self.uses_any else 1)
        cond = {"$": 0, "*": 1}.get(self.condition or "", 2)
        return (tier, cond, self.order)

    def __str__(self) -> str:
        mark = self.condition if self.condition in ("$", "*") else ""
        qual = f" ({self.condition})" if self.condition in ("terminal", "non-terminal") else ""
        return f"{self.source} → {self.target}{mark}{qual}"


def make_rules(table: Iterable[Sequence[Any]] = RULE_TABLE) -> list[Rule]:
    """Rules from rows of (tag, from-pattern, to-pattern, condition), keeping list order."""
    rules = []
    for i, row in enumerate(table):
        if len(row) != 4:
            raise ValueError(f"rule row {i} needs (tag, from, to, condition), got {row!r}")
        tag, src, dst, cond = row
        rules.append(Rule(str(tag), str(src), str(dst), cond or None, i))
    return rules


def ordered_rules(table: Iterable[Sequence[Any]] | Iterable[Rule] = RULE_TABLE) -> list[Rule]:
    """The rules sorted by precedence (the first match wins)."""
    items = list(table)
    rules = items if all(isinstance(r, Rule) for r in items) else make_rules(items)
    return sorted(rules, key=Rule.precedence)


def rules_frame(table: Iterable[Sequence[Any]] = RULE_TABLE) -> pd.DataFrame:
    """The rule table with its precedence, in resolution order (for display)."""
    rows = []
    for rank, r in enumerate(ordered_rules(table), 1):
        tier, cond, order = r.precedence()
        rows.append(
            {
                "rank": rank,
                "tag": r.tag,
                "rule": str(r),
                "from": r.source,
                "to": r.target,
                "condition": r.condition,
                "kind": ("exact", "class wildcard", "ANY wildcard")[tier],
                "list_order": order,
            }
        )
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- tagging


def tool_turns(
    turns: pd.DataFrame, drop_errors: bool = False, columns: Sequence[str] | None = None
) -> pd.DataFrame:
    """The turns that are tool calls, ordered by run id and turn (see the module notes);
    ``columns`` keeps only those columns (those present) besides run_id, turn and tool."""
    require_columns(turns, _NEEDED_TURN_COLUMNS, "the turns table")
    if columns is not None:
        wanted = [*_NEEDED_TURN_COLUMNS, "error_type", *columns]
        turns = turns[[c for c in dict.fromkeys(wanted) if c in turns.columns]]
    keep = turns["tool"].notna()
    if "error_type" in turns.columns:
        err = turns["error_type"]
        keep &= ~err.isin(NO_CALL_ERRORS)
        if drop_errors:
            keep &= err.isna()
    rows = np.flatnonzero(keep.to_numpy())
    run_code, _ = pd.factorize(turns["run_id"], sort=True)
    turn = pd.to_numeric(turns["turn"]).to_numpy()
    order = np.lexsort((turn[rows], run_code[rows]))
    return turns.take(rows[order]).reset_index(drop=True)  # one copy: filter and order at once


def _column(frame: pd.DataFrame, name: str, default: Any = None) -> pd.Series:
    if name in frame.columns:
        return frame[name]
    return pd.Series(default, index=frame.index, dtype=object)


def _related(a: Sequence[str], b: Sequence[str]) -> np.ndarray:
    """Same place: equal paths, or one a folder containing the other."""
    names = set(a) | set(b)
    parents = {p[:i] for p in names for i, ch in enumerate(p) if ch == "/"}
    folders = {x for x in names if x.rstrip("/") in parents}  # only these can contain a path
    return np.array(
        [x == y or (y in folders and x.startswith(y.rstrip("/") + "/"))
         or (x in folders and y.startswith(x.rstrip("/") + "/"))
         for x, y in zip(a, b, strict=True)],
        dtype=bool,
    )


def _pattern_codes(pattern: str, names: Sequence[str]) -> np.ndarray:
    """Which tool codes (positions in ``names``) a pattern matches."""
    if pattern == "ANY":
        return np.ones(len(names), dtype=bool)
    if pattern in CLASSES:
        return np.array([n in CLASSES[pattern] for n in names], dtype=bool)
    return np.array([n == pattern for n in names], dtype=bool)


def _distinct(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values of an integer array, by sorting: the hash-based ``np.unique``
    of numpy 2.4 is tens of times slower on arrays of a few 100k integers."""
    s = np.sort(values)
    return s[np.r_[True, s[1:] != s[:-1]]] if len(s) else s


def _first_rows(codes: np.ndarray, n_codes: int) -> np.ndarray:
    """For each code 0..n_codes-1 present in ``codes``, the index of its first row."""
    first = np.empty(n_codes, dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)  # the earliest write lands last
    return first


def _run_starts(run_code: np.ndarray) -> np.ndarray:
    """For each row of a run-grouped array, the index of its run's first row."""
    first = np.r_[True, run_code[1:] != run_code[:-1]]
    return np.maximum.accumulate(np.where(first, np.arange(len(run_code)), 0))


def tag_transitions(
    turns: pd.DataFrame,
    rules: Iterable[Sequence[Any]] | Iterable[Rule] = EXTENDED_RULE_TABLE,
    drop_errors: bool = False,
) -> pd.DataFrame:
    """Tag every adjacent tool-to-tool transition of every run with Table 5's codes (and,
    by default, :data:`ACTION_RULES` for imported agents' edit / execute / submit steps).

    ``turns`` is the tidy turns table (``adakit.record.TURN_COLUMNS``; needs run_id, turn, tool,
    and uses file, start_line, end_line, finalize, error_type when present). Returns one row per
    transition, ordered by run id and turn: run_id, turn_from, turn_to, from_tool, to_tool, tag,
    rule (the tool, tag and rule columns are categorical). A transition no rule matches (only
    possible with a custom table lacking ANY -> ANY) gets a missing tag.
    """
    order = ordered_rules(rules)
    t = tool_turns(turns, drop_errors=drop_errors,
                   columns=("file", "start_line", "end_line", "finalize"))
    if len(t) < 2:
        return pd.DataFrame(columns=TAG_COLUMNS)
    run_code, _ = pd.factorize(t["run_id"], sort=True)
    tool_code, tool_names = pd.factorize(t["tool"].astype(str))
    tool_names = list(tool_names)
    n = len(t)
    err = _column(t, "error_type").notna().to_numpy()
    file_code, file_names = pd.factorize(_column(t, "file"))  # missing file -> -1
    file_names = [str(f) for f in file_names]
    # current file target: own file if the call succeeded, else carried forward in the run
    own = (file_code >= 0) & ~err
    last = np.maximum.accumulate(np.where(own, np.arange(n), -1))
    target = np.where(last >= _run_starts(run_code), file_code[np.maximum(last, 0)], -1)
    start = pd.to_numeric(_column(t, "start_line"), errors="coerce").to_numpy(dtype=float)
    end = pd.to_numeric(_column(t, "end_line"), errors="coerce").to_numpy(dtype=float)
    fin = _column(t, "finalize").to_numpy(dtype=object)
    last_in_run = np.r_[run_code[1:] != run_code[:-1], True]

    a = np.flatnonzero(run_code[1:] == run_code[:-1])  # transition a -> a + 1
    b = a + 1
    ta, tb = target[a], target[b]
    star = (ta >= 0) & (tb >= 0) & (ta != tb)
    if star.any():  # folder targets: containment is "the same place"
        width = len(file_names) + 1
        key = ta.astype(np.int64) * width + tb
        pairs = _distinct(key[star])
        apart = ~_related([file_names[i] for i in pairs // width],
                          [file_names[j] for j in pairs % width])
        star &= np.isin(key, pairs[apart])
    same_file = (file_code[a] >= 0) & (file_code[a] == file_code[b]) & ~err[a] & ~err[b]
    with np.errstate(invalid="ignore"):
        dollar = same_file & (start[b] >= start[a]) & (start[b] <= end[a] + 1)
    fin_b = fin[b]
    fin_known = pd.notna(fin_b)
    terminal = np.where(fin_known, fin_b == True, last_in_run[b]).astype(bool)  # noqa: E712
    cond = {
        None: np.ones(len(a), dtype=bool),
        "$": dollar,
        "*": star,
        "terminal": terminal,
        "non-terminal": ~terminal,
    }

    src, dst = tool_code[a], tool_code[b]
    tag_code = np.full(len(a), -1, dtype=np.int64)
    for k, r in enumerate(order):
        hit = (tag_code < 0) & _pattern_codes(r.source, tool_names)[src]
        hit &= _pattern_codes(r.target, tool_names)[dst] & cond[r.condition]
        tag_code[hit] = k
        if (tag_code >= 0).all():
            break
    tag_names = list(dict.fromkeys(r.tag for r in order))
    tag_of_rule = np.array([tag_names.index(r.tag) for r in order] + [-1])
    rule_names = list(dict.fromkeys(str(r) for r in order))
    rule_of_rule = np.array([rule_names.index(str(r)) for r in order] + [-1])
    tool_cats = pd.CategoricalDtype(tool_names)
    turn = t["turn"].to_numpy()
    return pd.DataFrame(
        {
            "run_id": t["run_id"].take(a).reset_index(drop=True),
            "turn_from": turn[a],
            "turn_to": turn[b],
            "from_tool": pd.Categorical.from_codes(src, dtype=tool_cats),
            "to_tool": pd.Categorical.from_codes(dst, dtype=tool_cats),
            "tag": pd.Categorical.from_codes(tag_of_rule[tag_code], tag_names),
            "rule": pd.Categorical.from_codes(rule_of_rule[tag_code], rule_names),
        },
        columns=TAG_COLUMNS,
    )


# --------------------------------------------------------------------------- views


def _as_tuple(by: str | Sequence[str] | None) -> tuple[str, ...]:
    if by is None:
        return ()
    if isinstance(by, str):
        return (by,)
    return tuple(by)


def _group_codes(
    frame: pd.DataFrame, runs: pd.DataFrame | None, keys: Sequence[str], what: str
) -> tuple[np.ndarray, pd.DataFrame]:
    """A group code per row (0..G-1) and the table of groups (one row per code)."""
    n = len(frame)
    if not keys:
        return np.zeros(n, dtype=np.int64), pd.DataFrame(index=range(1 if n else 0))
    codes, values = _key_codes(frame, runs, keys, what)
    g = np.zeros(n, dtype=np.int64)
    for k in keys:  # refactorize after each column so the codes stay small
        g = pd.factorize(g * (len(values[k]) + 1) + codes[k])[0].astype(np.int64)
    first = _first_rows(g, int(g.max()) + 1) if n else np.zeros(0, dtype=np.int64)
    groups = pd.DataFrame({k: values[k][codes[k][first]] for k in keys})
    return g, groups


def _key_codes(
    frame: pd.DataFrame, runs: pd.DataFrame | None, keys: Sequence[str], what: str
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per grouping column, a code per row and the distinct values the codes point to (a
    missing value is a value of its own). Columns missing from ``frame`` are looked up in
    ``runs`` by run id (a run absent from ``runs`` gets None)."""
    missing = [k for k in keys if k not in frame.columns]
    if missing and runs is None:
        raise ValueError(f"{what} lacks {missing}; pass the runs table to take them from")
    codes: dict[str, np.ndarray] = {}
    values: dict[str, np.ndarray] = {}
    for k in keys:
        if k in frame.columns:
            code, uniq = pd.factorize(frame[k], use_na_sentinel=False)
            codes[k], values[k] = code, np.asarray(uniq)
    if missing:
        require_columns(runs, ["run_id", *missing], "the runs table")
        run_code, run_ids = pd.factorize(frame["run_id"])
        info = runs.drop_duplicates("run_id").set_index("run_id").reindex(run_ids)
        for k in missing:
            looked_up = np.append(info[k].to_numpy(dtype=object), None)  # code -1 -> None
            code, uniq = pd.factorize(looked_up, use_na_sentinel=False)
            codes[k], values[k] = code[run_code], np.asarray(uniq, dtype=object)
    return codes, values


def tag_order(tags: Iterable[str]) -> list[str]:
    """The distinct tags among ``tags``: Fig. 7's in its order, then any others sorted."""
    series = tags if isinstance(tags, pd.Series) else pd.Series(list(tags), dtype=object)
    present = [t for t in series.dropna().unique() if isinstance(t, str)]
    known = [t for t in TAG_PLOT_ORDER if t in present]
    return known + sorted(t for t in present if t not in TAG_PLOT_ORDER)


def _long_table(
    groups: pd.DataFrame, keys: Sequence[str], names: Sequence[str], name_col: str,
    counts: np.ndarray, shares: np.ndarray, extra: dict[str, np.ndarray],
) -> pd.DataFrame:
    """(group x name) matrices as a long table with the group columns repeated."""
    G, K = counts.shape
    out = {k: np.repeat(groups[k].to_numpy(), K) for k in keys}
    out[name_col] = np.tile(np.asarray(names, dtype=object), G)
    out["count"] = counts.ravel()
    out["share"] = shares.ravel()
    for col, v in extra.items():
        out[col] = np.repeat(v, K) if v.ndim == 1 else v.ravel()
    return pd.DataFrame(out)


def tag_shares(
    tags: pd.DataFrame | Corpus,
    runs: pd.DataFrame | None = None,
    by: str | Sequence[str] | None = ("model", "condition"),
    weight: str = "transition",
) -> pd.DataFrame:
    """Share (%) of each tag within each group, one row per (group, tag), zeros included.

    ``weight="transition"`` pools the group's transitions (Fig. 7); ``"run"`` averages the
    per-run shares, so every run counts once. Grouping columns missing from ``tags`` are taken
    from ``runs``. Columns: *by, tag, count, share, transitions, runs.

    ``tags`` may also be a corpus (its runs give the groups): its transitions are tagged and
    counted run by run (:func:`run_tag_counts`), piece by piece for a corpus on disk, and the
    table is the one :func:`tag_transitions` of its turns would give.
    """
    if weight not in ("transition", "run"):
        raise ValueError(f"weight must be 'transition' or 'run', got {weight!r}")
    if isinstance(tags, Corpus):
        return shares_of_counts(run_tag_counts(tags), tags.table("runs"), by, weight)
    require_columns(tags, ["run_id", "tag"], "the tags table")
    keys = _as_tuple(by)
    cols = [*keys, "tag", "count", "share", "transitions", "runs"]
    df = tags[tags["tag"].notna()]
    if df.empty:
        return pd.DataFrame(columns=cols)
    g, groups = _group_codes(df, runs, keys, "the tags table")
    order = tag_order(df["tag"])
    raw_code, raw_tags = pd.factorize(df["tag"])  # codes of a categorical come for free
    position = {tag: i for i, tag in enumerate(order)}
    tag_code = np.array([position.get(str(t), -1) for t in raw_tags], dtype=np.int64)[raw_code]
    T = len(order)
    # a unit is one run inside one group (a run split into regimes gives two units)
    run_code = pd.factorize(df["run_id"])[0].astype(np.int64)
    unit, _ = pd.factorize(g * (run_code.max() + 1) + run_code)
    U = unit.max() + 1
    unit_group = np.zeros(U, dtype=np.int64)
    unit_group[unit] = g
    per_unit = np.bincount(unit * T + tag_code, minlength=U * T).reshape(U, T)
    return _shares_table(per_unit, unit_group, groups, keys, order, weight)


def _shares_table(per_unit: np.ndarray, unit_group: np.ndarray, groups: pd.DataFrame,
                  keys: Sequence[str], order: Sequence[str], weight: str) -> pd.DataFrame:
    """The shares table from each unit's (run in a group) transitions per tag."""
    G, T = len(groups), len(order)
    counts = np.zeros((G, T), dtype=np.int64)
    np.add.at(counts, unit_group, per_unit)
    totals = counts.sum(axis=1)
    n_runs = np.bincount(unit_group, minlength=G)
    if weight == "transition":
        share = counts / totals[:, None] * 100.0
    else:
        unit_share = per_unit / per_unit.sum(axis=1, keepdims=True) * 100.0
        share = np.zeros((G, T))
        np.add.at(share, unit_group, unit_share)
        share /= n_runs[:, None]
    long = _long_table(groups, keys, order, "tag", counts, share,
                       {"transitions": totals, "runs": n_runs})
    long["_t"] = np.tile(np.arange(T), G)
    long = _sort_groups(long, keys, then=["_t"]).drop(columns="_t").reset_index(drop=True)
    return long[[*keys, "tag", "count", "share", "transitions", "runs"]]


def run_tag_counts(corpus: Corpus, drop_errors: bool = False) -> pd.DataFrame:
    """:func:`tag_counts` of a corpus's tagged transitions (one row per run with a tagged
    transition, ordered by run id), computed piece by piece for a corpus on disk."""
    counts = map_runs(corpus, lambda c: tag_counts(tag_transitions(c.turns, drop_errors=drop_errors)),
                      TAGGING_COLUMNS)
    return align_tag_counts(counts)


def align_tag_counts(counts: pd.DataFrame | Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Per-run tag counts (:func:`tag_counts` without ``by``) of pieces of a corpus as one
    table: a tag a piece lacks counts 0, tags in Fig. 7 order, runs ordered by run id."""
    frames = [counts] if isinstance(counts, pd.DataFrame) else list(counts)
    table = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    tags = tag_order([c for c in table.columns if c not in ("run_id", "transitions")])
    for tag in tags:
        if table[tag].isna().any() or table[tag].dtype != np.int64:
            table[tag] = table[tag].fillna(0).astype(np.int64)
    table = table.sort_values("run_id", kind="stable", ignore_index=True)
    return table[["run_id", *tags, "transitions"]]


def shares_of_counts(counts: pd.DataFrame, runs: pd.DataFrame,
                     by: str | Sequence[str] | None = ("model", "condition"),
                     weight: str = "transition") -> pd.DataFrame:
    """:func:`tag_shares` from per-run tag counts (:func:`align_tag_counts`), the groups
    taken from ``runs``: the aggregate step once the runs have been counted, wherever."""
    if weight not in ("transition", "run"):
        raise ValueError(f"weight must be 'transition' or 'run', got {weight!r}")
    keys = _as_tuple(by)
    order = [c for c in counts.columns if c not in ("run_id", "transitions")]
    if counts.empty or not order:
        return pd.DataFrame(columns=[*keys, "tag", "count", "share", "transitions", "runs"])
    unit_group, groups = _group_codes(counts[["run_id"]], runs, keys, "the tag counts")
    return _shares_table(counts[order].to_numpy(dtype=np.int64), unit_group, groups, keys,
                         order, weight)


def reading_transitions(tags: pd.DataFrame) -> pd.DataFrame:
    """The transitions tagged with one of Table 5's codes (those into edit / execute / submit
    steps left out), so the tag shares of an imported agent and of Ada are over the same tags."""
    require_columns(tags, ["tag"], "the tags table")
    return tags[tags["tag"].isin(TAGS)].reset_index(drop=True)


def _sort_groups(
    frame: pd.DataFrame, keys: Sequence[str], then: Sequence[str] = ()
) -> pd.DataFrame:
    """Rows sorted by the display order of each grouping column, then by ``then``."""
    if frame.empty:
        return frame
    sort_cols, helpers = [], {}
    for k in keys:
        order = figures.order_for(k, frame[k].unique())
        rank = {v: i for i, v in enumerate(order)}
        helpers[f"__{k}"] = frame[k].map(rank).fillna(len(rank))
        sort_cols.append(f"__{k}")
    sort_cols.extend(then)
    if not sort_cols:
        return frame
    return frame.assign(**helpers).sort_values(sort_cols, kind="stable").drop(columns=helpers)


def _share_keys(shares: pd.DataFrame) -> list[str]:
    require_columns(shares, ["tag", "share"], "the shares table")
    skip = {"tag", "count", "share", "transitions", "runs", "share_lo", "share_hi", "note"}
    return [c for c in shares.columns if c not in skip]


def tag_deviation(shares: pd.DataFrame) -> pd.DataFrame:
    """Each group's tag share minus the unweighted average over groups, in percentage points.

    ``shares`` comes from :func:`tag_shares`; its grouping columns form the index (e.g.
    ``by="model"`` for Fig. D7, ``by="task"`` for Fig. D8). Every group counts once in the
    average, whatever its number of transitions. Rows sum to zero.
    """
    keys = _share_keys(shares)
    if not keys:
        raise ValueError("tag_deviation needs shares by at least one grouping column")
    wide = shares.pivot_table(index=keys, columns="tag", values="share", aggfunc="sum",
                              fill_value=0.0, observed=True)
    wide = wide.reindex(columns=tag_order(shares["tag"]), fill_value=0.0)
    rows = _sort_groups(wide.index.to_frame(index=False), keys)
    wide = wide.reindex(pd.MultiIndex.from_frame(rows) if len(keys) > 1 else rows[keys[0]])
    dev = wide - wide.mean(axis=0)
    dev.columns.name = "tag"
    return dev


def split_regimes(
    frame: pd.DataFrame,
    at_turn: int | Mapping[str, int] | pd.Series,
    labels: tuple[str, str] = ("natural lifetime", "extended lifetime"),
    column: str = "regime",
) -> pd.DataFrame:
    """Label every row with the lifetime regime it belongs to: turns before ``at_turn`` get
    ``labels[0]``, the others ``labels[1]``.

    ``frame`` is a turns table (uses ``turn``) or a tags table (uses ``turn_to``: a move belongs
    to the regime of the turn it lands on). ``at_turn`` is one turn index for all runs, or a
    mapping/Series run_id -> turn index (a run absent from it lies wholly in the first regime).
    """
    col = "turn_to" if "turn_to" in frame.columns else "turn"
    require_columns(frame, ["run_id", col], "the table to split")
    if len(labels) != 2 or labels[0] == labels[1]:
        raise ValueError(f"labels must be two distinct names, got {labels!r}")
    if isinstance(at_turn, (int, np.integer)):
        cut = pd.Series(int(at_turn), index=frame.index)
    elif isinstance(at_turn, (Mapping, pd.Series)):
        mapping = pd.Series(at_turn, dtype=float) if isinstance(at_turn, Mapping) else at_turn
        cut = frame["run_id"].map(mapping).fillna(np.inf)
    else:
        raise TypeError(f"at_turn must be an int or a run_id -> int mapping, not {type(at_turn)}")
    out = frame.copy()
    out[column] = np.where(out[col] < cut, labels[0], labels[1])
    return out


def tool_ngrams(
    turns: pd.DataFrame,
    n: int,
    by: str | Sequence[str] | None = None,
    runs: pd.DataFrame | None = None,
    drop_errors: bool = False,
) -> pd.DataFrame:
    """Counts and shares of contiguous tool n-grams within runs, per group.

    Tool calls are taken as :func:`tag_transitions` takes them (turns without a call are
    skipped). Grouping columns missing from ``turns`` are taken from ``runs``; an n-gram
    belongs to the group of its first turn. Columns: *by, ngram ("OVW → PKR → PKR"), count,
    share (% of the group's n-grams), runs (runs containing it); sorted by group, then by count
    (descending).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    keys = _as_tuple(by)
    cols = [*keys, "ngram", "count", "share", "runs"]
    t = tool_turns(turns, drop_errors=drop_errors, columns=keys)
    g_row, groups = _group_codes(t, runs, keys, "the turns table")
    m = len(t) - n + 1
    if m <= 0:
        return pd.DataFrame(columns=cols)
    run_code = pd.factorize(t["run_id"], sort=True)[0].astype(np.int64)
    tool_code, names = pd.factorize(t["tool"].astype(str))
    base = len(names)
    start = np.flatnonzero(run_code[: m] == run_code[n - 1:])  # grouped by run
    if start.size == 0:
        return pd.DataFrame(columns=cols)
    gram = np.zeros(start.size, dtype=np.int64)
    for k in range(n):
        gram = gram * base + tool_code[start + k]
    g = g_row[start]
    cell_code, cell = pd.factorize(g * base**n + gram, sort=True)
    cell_first = _first_rows(cell_code, cell.size)
    count = np.bincount(cell_code, minlength=cell.size)
    run_cells = _distinct(cell_code * (run_code.max() + 1) + run_code[start])
    n_runs = np.bincount(run_cells // (run_code.max() + 1), minlength=cell.size)
    cell_group = g[cell_first]
    cell_gram = gram[cell_first]
    totals = np.bincount(cell_group, weights=count, minlength=len(groups))
    digits = []
    rest = cell_gram.copy()
    for _ in range(n):
        digits.append(rest % base)
        rest //= base
    labels = np.asarray(names, dtype=object)[digits[-1]]
    for d in reversed(digits[:-1]):
        labels = labels + " → " + np.asarray(names, dtype=object)[d]
    out = pd.DataFrame({k: groups[k].to_numpy()[cell_group] for k in keys})
    out["ngram"] = labels
    out["count"] = count
    out["share"] = count / totals[cell_group] * 100.0
    out["runs"] = n_runs
    out = out.sort_values(["count", "ngram"], ascending=[False, True], kind="stable")
    out = _sort_groups(out, keys)
    return out[cols].reset_index(drop=True)


# --------------------------------------------------------------------------- intervals


def tag_counts(tags: pd.DataFrame, runs: pd.DataFrame | None = None,
               by: str | Sequence[str] | None = None) -> pd.DataFrame:
    """One row per run (per group: a run split into regimes is one row per regime) with its
    transitions per tag (one column per tag, Fig. 7 order) and ``transitions`` (all of them).
    Runs without a tagged transition are absent, as in :func:`tag_shares`."""
    by_cols = list(_as_tuple(by))
    require_columns(tags, ["run_id", "tag"], "the tags table")
    in_tags = [k for k in by_cols if k in tags.columns]  # e.g. a regime label per transition
    from_runs = [k for k in by_cols if k not in tags.columns]
    df = tags.loc[tags["tag"].notna(), ["run_id", *in_tags, "tag"]]
    raw_code, raw_names = pd.factorize(df["tag"])
    names = [str(t) for t in raw_names]
    present = [t for t in TAG_PLOT_ORDER if t in names]
    present += sorted(t for t in names if t not in present)
    if df.empty:
        return pd.DataFrame(columns=[*by_cols, "run_id", *present, "transitions"])
    unit, units = uncertainty.group_codes(df, ["run_id", *in_tags])
    column = np.array([present.index(t) for t in names], dtype=np.int64)[raw_code]
    T, U = len(present), len(units)
    counts = np.bincount(unit * T + column, minlength=U * T).reshape(U, T)
    out = pd.concat([units, pd.DataFrame(counts, columns=present)], axis=1)
    out["transitions"] = counts.sum(axis=1)
    out = uncertainty.with_run_columns(out, runs, from_runs, "the tags table")
    return out[[*by_cols, "run_id", *present, "transitions"]]


def tag_share_intervals(
    tags: pd.DataFrame,
    runs: pd.DataFrame | None = None,
    by: str | Sequence[str] | None = ("model", "condition"),
    weight: str = "transition",
    n_resamples: int = uncertainty.DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = uncertainty.DEFAULT_LEVEL,
    min_runs: int = uncertainty.MIN_RUNS,
) -> pd.DataFrame:
    """:func:`tag_shares` (Fig. 7) with a bootstrap interval per share: the same rows and
    values plus ``share_lo``, ``share_hi`` (percent) and ``note``.

    Runs are resampled within each group; ``weight="transition"`` recomputes the pooled share
    (tag transitions / all transitions of the drawn runs), ``"run"`` the mean of per-run shares.
    """
    if weight not in ("transition", "run"):
        raise ValueError(f"weight must be 'transition' or 'run', got {weight!r}")
    by_cols = list(_as_tuple(by))
    shares = tag_shares(tags, runs, by=by_cols or None, weight=weight)
    if shares.empty:
        return shares.assign(share_lo=[], share_hi=[], note=[])
    counts = tag_counts(tags, runs, by_cols)
    tag_cols = [c for c in counts.columns if c not in (*by_cols, "run_id", "transitions")]
    if weight == "transition":
        spec: dict[str, str | uncertainty.Ratio] = {t: (t, "transitions") for t in tag_cols}
        table = counts
    else:
        per_run = counts[tag_cols].div(counts["transitions"], axis=0)
        table = pd.concat([counts[[*by_cols, "run_id"]], per_run], axis=1)
        spec = {t: t for t in tag_cols}
    ci = uncertainty.bootstrap_ratios(table, by_cols or None, spec, n_resamples, seed, level,
                                      min_runs, scale=100.0)
    long = []
    for t in tag_cols:
        part = ci[[*by_cols, f"{t}_lo", f"{t}_hi", "note"]].rename(
            columns={f"{t}_lo": "share_lo", f"{t}_hi": "share_hi"})
        long.append(part.assign(tag=t))
    intervals = pd.concat(long, ignore_index=True)
    if not by_cols:
        return shares.assign(share_lo=intervals["share_lo"].to_numpy(),
                             share_hi=intervals["share_hi"].to_numpy(),
                             note=intervals["note"].to_numpy())
    keys = [*by_cols, "tag"]
    merged = shares.merge(intervals, on=keys, how="left")
    merged["note"] = merged["note"].fillna("")
    return merged


def tag_share_tests(
    tags: pd.DataFrame,
    runs: pd.DataFrame,
    factor: str = "model",
    within: str | Sequence[str] | None = "condition",
    tags_to_test: Sequence[str] | None = None,
    weight: str = "transition",
    **kwargs: Any,
) -> pd.DataFrame:
    """:func:`adakit.uncertainty.difference_tests` of Fig. 7's tag shares (percent) between
    values of ``factor`` (e.g. model A vs model B under each condition, or
    ``factor="condition"`` within each model for a condition shift). ``tags_to_test`` limits
    the family (default: every tag present); keyword arguments go to
    :func:`~adakit.uncertainty.difference_tests`."""
    by = [factor, *_as_tuple(within), *_as_tuple(kwargs.get("strata"))]
    counts = tag_counts(tags, runs, list(dict.fromkeys(by)))
    present = [c for c in counts.columns if c not in (*by, "run_id", "transitions")]
    chosen = [t for t in (tags_to_test or present) if t in present]
    if weight == "transition":
        spec: dict[str, str | uncertainty.Ratio] = {t: (t, "transitions") for t in chosen}
        table = counts
    elif weight == "run":
        table = counts.copy()
        table[chosen] = counts[chosen].div(counts["transitions"], axis=0)
        spec = {t: t for t in chosen}
    else:
        raise ValueError(f"weight must be 'transition' or 'run', got {weight!r}")
    return uncertainty.difference_tests(table, factor, spec, within=within, scale=100.0, **kwargs)


# --------------------------------------------------------------------------- plots


def _group_label(keys: Sequence[str], values: Sequence[Any]) -> str:
    return " | ".join(figures.label_for(k, v) for k, v in zip(keys, values, strict=True))


def plot_tag_shares(
    shares: pd.DataFrame,
    ax: Axes | None = None,
    annotate_min: float = 10.0,
    title: str | None = None,
    interval: pd.DataFrame | None = None,
    order: Sequence[Any] | None = None,
) -> Figure:
    """Stacked horizontal bars of tag shares (Fig. 7, Fig. D6), one bar per group.

    With two or more grouping columns the first one forms blocks (e.g. one per model) with the
    remaining columns as bars inside a block. Segments of at least ``annotate_min`` % carry
    their rounded value. ``interval`` (:func:`tag_share_intervals` of the
    same groups) adds to each such segment a whisker at its right edge spanning the tag's
    bootstrap interval (where the edge would fall with the share at its low and high end).
    ``order`` lists values of the first grouping column in the order to draw them (e.g. Fig.
    12b's regimes); unlisted values follow in display order. Each bar is marked at its right
    with its run count (``runs`` column; "n = 1, no interval" for a group of one run).
    """
    figures.use_style()
    keys = _share_keys(shares)
    if shares.empty:
        raise ValueError("no tag shares to plot")
    tags = tag_order(shares["tag"])
    if keys:
        ordered = _sort_groups(shares, keys)
        if order is not None:
            rank = {v: i for i, v in enumerate(order)}
            first = ordered[keys[0]].map(rank).fillna(len(rank))
            ordered = ordered.iloc[np.argsort(first.to_numpy(), kind="stable")]
        wide = ordered.pivot_table(index=keys, columns="tag", values="share", aggfunc="sum",
                                   fill_value=0.0, sort=False, observed=True)
        wide = wide.reindex(columns=tags, fill_value=0.0)
        groups = [g if isinstance(g, tuple) else (g,) for g in wide.index]
    else:
        wide = shares.set_index("tag")["share"].reindex(tags).fillna(0.0).to_frame().T
        groups = [("all",)]
        keys = ["runs"]
    ypos, labels, block_marks, y = [], [], [], 0.0
    prev_block = None
    for g in groups:
        if len(keys) > 1 and prev_block is not None and g[0] != prev_block:
            y += 0.6
        if len(keys) > 1 and g[0] != prev_block:
            block_marks.append((y, figures.label_for(keys[0], g[0])))
        prev_block = g[0]
        ypos.append(y)
        labels.append(_group_label(keys[1:], g[1:]) if len(keys) > 1 else _group_label(keys, g))
        y += 1.0
    if ax is None:
        height = max(2.0, 0.32 * len(ypos) + 0.3 * len(block_marks) + 1.2)
        fig, ax = plt.subplots(figsize=(7.5, height))
    else:
        fig = ax.figure
    left = np.zeros(len(ypos))
    values = wide.to_numpy(dtype=float)
    for j, tag in enumerate(tags):
        vals = values[:, j]
        ax.barh(ypos, vals, left=left, height=0.8, color=TAG_COLORS.get(tag, "#999999"),
                label=tag, edgecolor="white", linewidth=0.4)
        for yi, lo, v in zip(ypos, left, vals, strict=True):
            if v >= annotate_min:
                dark = tag in ("close read", "zoom in", "dump", "close out", "interim synth",
                               "edit", "submit")
                ax.text(lo + v / 2, yi, f"{v:.0f}", ha="center", va="center", fontsize=7,
                        color="white" if dark else "black")
        if interval is not None:
            _share_whiskers(ax, interval, keys, groups, tag, ypos, left, vals, annotate_min)
        left += vals
    _mark_runs(ax, shares, keys, groups, ypos)
    ax.set_yticks(ypos, labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("Share of action policy tags (%)")
    ax.grid(axis="y", visible=False)
    ax.grid(axis="x", visible=True)
    for y0, text in block_marks:
        ax.annotate(text, xy=(0, y0 - 0.55), xycoords=("axes fraction", "data"), fontsize=8,
                    fontweight="bold", ha="left", va="bottom")
    # below the tick labels and the x-axis label: about 0.55 inch, whatever the axes' height
    axes_inches = max(ax.get_position().height * fig.get_figheight(), 0.5)
    ax.legend(ncol=min(len(tags), 5), loc="upper center",
              bbox_to_anchor=(0.5, -0.55 / axes_inches), frameon=False)
    if title:
        ax.set_title(title)
    return fig


def _mark_runs(ax: Axes, shares: pd.DataFrame, keys: Sequence[str], groups: Sequence[tuple],
               ypos: Sequence[float]) -> None:
    """Issue 26: each bar's run count, right of the axes."""
    if "runs" not in shares.columns:
        return
    if list(keys) == ["runs"]:  # ungrouped shares: one bar
        counts = {("all",): shares["runs"].iloc[0]}
    else:
        counts = {tuple(r[:-1]): r[-1] for r in
                  shares[[*keys, "runs"]].drop_duplicates(list(keys)).itertuples(index=False)}
    for g, y in zip(groups, ypos, strict=True):
        n = counts.get(tuple(g))
        if n is not None and pd.notna(n):
            ax.annotate(uncertainty.n_note(n), xy=(1.01, y), xycoords=("axes fraction", "data"),
                        fontsize=7, ha="left", va="center", color="0.35")


def _share_whiskers(
    ax: Axes, interval: pd.DataFrame, keys: Sequence[str], groups: Sequence[tuple],
    tag: str, ypos: Sequence[float], left: np.ndarray, vals: np.ndarray, annotate_min: float,
) -> None:
    """Issue 12: one tag's bootstrap interval as whiskers at its segments' right edges."""
    require_columns(interval, ["tag", "share_lo", "share_hi"], "the interval table")
    sub = interval[interval["tag"] == tag]
    if list(keys) == ["runs"]:  # ungrouped shares: one bar, labelled ("all",)
        bounds = {("all",): (sub["share_lo"].iloc[0], sub["share_hi"].iloc[0])} if len(sub) else {}
    else:
        bounds = {tuple(r[k] for k in keys): (r["share_lo"], r["share_hi"])
                  for r in sub.to_dict("records")}
    for g, y, lo_edge, v in zip(groups, ypos, left, vals, strict=True):
        lo, hi = (float(b) for b in bounds.get(tuple(g), (np.nan, np.nan)))
        if v < annotate_min or np.isnan(lo) or np.isnan(hi):
            continue
        ax.errorbar(lo_edge + v, y, xerr=[[max(v - lo, 0.0)], [max(hi - v, 0.0)]], fmt="none",
                    ecolor="#222222", elinewidth=0.8, capsize=2.0, zorder=4)


def plot_tag_deviation(
    deviation: pd.DataFrame,
    ax: Axes | None = None,
    title: str | None = None,
    annotate: bool = True,
) -> Figure:
    """Heatmap of :func:`tag_deviation` (Fig. D7, D8): groups x tags, diverging at zero."""
    figures.use_style()
    if deviation.empty:
        raise ValueError("no deviations to plot")
    keys = list(deviation.index.names)
    rows = [r if isinstance(r, tuple) else (r,) for r in deviation.index]
    labels = [_group_label(keys, r) for r in rows]
    vals = deviation.to_numpy(dtype=float)
    if ax is None:
        fig, ax = plt.subplots(
            figsize=(max(4.0, 0.55 * vals.shape[1] + 2.0), max(1.8, 0.42 * vals.shape[0] + 1.4))
        )
    else:
        fig = ax.figure
    vmax = float(np.nanmax(np.abs(vals))) if np.isfinite(vals).any() else 1.0
    vmax = vmax or 1.0
    im = ax.imshow(vals, cmap="RdBu_r", norm=TwoSlopeNorm(0.0, -vmax, vmax), aspect="auto")
    ax.set_xticks(range(vals.shape[1]), list(deviation.columns), rotation=40, ha="right")
    ax.set_yticks(range(vals.shape[0]), labels)
    ax.grid(False)
    if annotate:
        for i in range(vals.shape[0]):
            for j in range(vals.shape[1]):
                v = vals[i, j]
                text = "0.0" if abs(v) < 0.05 else f"{v:+.1f}"
                ax.text(j, i, text, ha="center", va="center", fontsize=7,
                        color="white" if abs(v) > 0.6 * vmax else "black")
    fig.colorbar(im, ax=ax, label="Deviation from average (pp)", shrink=0.8)
    if title:
        ax.set_title(title)
    return fig


def plot_top_ngrams(
    ngrams: pd.DataFrame,
    top: int = 10,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """Horizontal bars of the ``top`` most frequent n-grams (share of all n-grams), pooled
    over the groups of the table."""
    figures.use_style()
    require_columns(ngrams, ["ngram", "count"], "the n-gram table")
    if ngrams.empty:
        raise ValueError("no n-grams to plot")
    pooled = ngrams.groupby("ngram")["count"].sum().sort_values(ascending=False)
    share = (pooled / pooled.sum() * 100.0).head(top)
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.0, max(2.0, 0.3 * len(share) + 1.0)))
    else:
        fig = ax.figure
    ax.barh(range(len(share)), share.to_numpy(), color=figures.NEUTRAL_COLOR)
    ax.set_yticks(range(len(share)), list(share.index))
    ax.invert_yaxis()
    ax.set_xlabel("Share of n-grams (%)")
    ax.grid(axis="y", visible=False)
    ax.grid(axis="x", visible=True)
    if title:
        ax.set_title(title)
    return fig
