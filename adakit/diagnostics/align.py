"""Run alignment: where two runs of one task part ways (TraceProbe's Converge, issue 15 §3).

Two runs are aligned by a global alignment of their canonical tokens, one token per action
step (turns without an action are left out), at three levels:

- ``action``: the canonical tool (``PKR``);
- ``file``: the tool and the file it touched (``PKR src/flask/app.py``);
- ``symbol``: the tool, the file and the function or class enclosing the first line touched,
  from the world's code index (:meth:`adakit.apparatus.code_index.CodeIndex.enclosing`; a search without
  a line uses its own symbol). Only when the world is on disk; otherwise this level is absent.

**Scoring**, stated and settable: ``match`` for two equal tokens, ``mismatch`` for two different
tokens aligned, ``gap`` for a token aligned with nothing. The defaults (1, 0, 0) make the score
the length of the longest common subsequence (LCS). Among the optimal alignments the one
chosen matches as early as it can: on ties, a match first, then leaving run A's step
unmatched, then run B's, then a mismatch, deciding from the first steps onward (the programme
runs on the reversed sequences and traces back from their end).

The **first divergence** of a level is the first alignment column that is not a match (the
turns of A and B there; None on a side with no step). **Divergence spans** are maximal runs of
non-matching columns at the finest level available, each classified by the first rule of
:data:`DIVERGENCE_RULES` that holds: *file selection* (a file in the span that the other run
never touches), *function selection* (a file-and-symbol pair the other run never touches;
symbol level only), *edit stability* (an edit on either side of the span), else *action choice*
(the same targets, reached by other actions or in another order).

**Reference.** :func:`choose_references` picks, per task (world, task family, target), the run
with the best lens 3 score (the mean of its normalised relevance, conclusion grounding and
termination calibration); without verdicts, the run with the largest share of survived and
justified steps (ties: fewer steps, then run id). A run the user names overrides it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from adakit import figures
from adakit.diagnostics.steps import Step

LEVELS: tuple[str, ...] = ("action", "file", "symbol")
#: Divergence classes in the order their rules are tried, with the rule in words.
DIVERGENCE_RULES: tuple[tuple[str, str], ...] = (
    ("file selection", "a file in the span that the other run never touches"),
    ("function selection", "a (file, enclosing symbol) in the span the other run never touches"),
    ("edit stability", "an edit on either side of the span"),
    ("action choice", "none of the above: the same targets by other actions or order"),
)
SPAN_COLORS = {"file selection": "#D95F02", "function selection": "#7570B3",
               "edit stability": "#E7298A", "action choice": "#A6A6A6"}
TASK_KEY: tuple[str, ...] = ("world", "task", "target")
SymbolOf = Callable[[str, int], str | None]


@dataclass
class Span:
    """Consecutive alignment columns that do not match, at one level."""

    level: str
    first_col: int
    last_col: int
    a_turns: tuple[int, int] | None
    b_turns: tuple[int, int] | None
    kind: str
    evidence: str


@dataclass
class LevelAlignment:
    """One level's alignment: columns ``(i, j, kind)`` (step positions or None), score, first
    divergence (turns of A and B; None when the runs never diverge)."""

    level: str
    columns: list[tuple[int | None, int | None, str]]
    score: float
    first_divergence: tuple[int | None, int | None] | None


@dataclass
class RunAlignment:
    """Two runs aligned at every available level, with the divergence spans."""

    run_a: str
    run_b: str
    steps_a: list[Step]
    steps_b: list[Step]
    levels: dict[str, LevelAlignment]
    spans: list[Span] = field(default_factory=list)
    scoring: tuple[float, float, float] = (1.0, 0.0, 0.0)

    @property
    def finest(self) -> str:
        """The finest level aligned."""
        return [lv for lv in LEVELS if lv in self.levels][-1]


# --------------------------------------------------------------------------- the programme


def _check(match: float, mismatch: float, gap: float) -> tuple[float, float, float]:
    if match <= 0:
        raise ValueError(f"match must be > 0, got {match}")
    if mismatch > match:
        raise ValueError(f"mismatch ({mismatch}) must not exceed match ({match})")
    return float(match), float(mismatch), float(gap)


def lcs_align(a: Sequence[Any], b: Sequence[Any], match: float = 1.0, mismatch: float = 0.0,
              gap: float = 0.0) -> tuple[list[tuple[int | None, int | None, str]], float]:
    """Global alignment of two token sequences: the columns ``(i, j, kind)`` in order (kind:
    ``match``, ``mismatch``, ``a_only``, ``b_only``) and the score."""
    match, mismatch, gap = _check(match, mismatch, gap)
    n, m = len(a), len(b)
    a, b = list(a)[::-1], list(b)[::-1]  # traced back from the end of the reversed pair:
    # the columns come out in the original order and ties favour the earliest match
    H = [[gap * j for j in range(m + 1)]]
    for i in range(1, n + 1):
        prev, x = H[i - 1], a[i - 1]
        row = [gap * i]
        left = row[0]
        for j in range(1, m + 1):
            best = prev[j - 1] + (match if x == b[j - 1] else mismatch)
            up = prev[j] + gap
            if up > best:
                best = up
            if left + gap > best:
                best = left + gap
            row.append(best)
            left = best
        H.append(row)
    cols: list[tuple[int | None, int | None, str]] = []
    i, j = n, m
    eps = 1e-9
    while i > 0 or j > 0:
        here = H[i][j]
        if i and j and a[i - 1] == b[j - 1] and abs(here - (H[i - 1][j - 1] + match)) < eps:
            cols.append((n - i, m - j, "match"))
            i, j = i - 1, j - 1
        elif i and abs(here - (H[i - 1][j] + gap)) < eps:
            cols.append((n - i, None, "a_only"))
            i -= 1
        elif j and abs(here - (H[i][j - 1] + gap)) < eps:
            cols.append((None, m - j, "b_only"))
            j -= 1
        else:
            cols.append((n - i, m - j, "mismatch"))
            i, j = i - 1, j - 1
    return cols, float(H[n][m])


def tokens(steps: Sequence[Step], level: str, symbol_of: SymbolOf | None = None) -> list[tuple]:
    """The canonical token of each step at ``level``."""
    if level == "action":
        return [(s.tool,) for s in steps]
    if level == "file":
        return [(s.tool, s.file or "") for s in steps]
    if level == "symbol":
        out = []
        for s in steps:
            sym = None
            if symbol_of is not None and s.file and s.start_line is not None:
                sym = symbol_of(s.file, int(s.start_line))
            out.append((s.tool, s.file or "", sym or s.symbol or ""))
        return out
    raise ValueError(f"level must be one of {LEVELS}, got {level!r}")


def _first_divergence(cols: list[tuple[int | None, int | None, str]], sa: Sequence[Step],
                      sb: Sequence[Step]) -> tuple[int | None, int | None] | None:
    for i, j, kind in cols:
        if kind != "match":
            return (sa[i].turn if i is not None else None, sb[j].turn if j is not None else None)
    return None


def _classify(level: str, side_a: list[Step], side_b: list[Step], all_a: list[tuple],
              all_b: list[tuple], tok_a: list[tuple], tok_b: list[tuple]) -> tuple[str, str]:
    files_a = {t[1] for t in all_a if t[1]}
    files_b = {t[1] for t in all_b if t[1]}
    for mine, other, who in ((side_a, files_b, "A"), (side_b, files_a, "B")):
        for s in mine:
            if s.file and s.file not in other:
                return "file selection", f"{who} touches {s.file}, which the other run never does"
    if level == "symbol":
        pairs_a = {t[1:] for t in all_a if t[1]}
        pairs_b = {t[1:] for t in all_b if t[1]}
        for toks, other, who in ((tok_a, pairs_b, "A"), (tok_b, pairs_a, "B")):
            for t in toks:
                if t[1] and t[2] and t[1:] not in other:
                    return ("function selection",
                            f"{who} works in {t[2]} of {t[1]}, which the other run never does")
    edits = [s for s in side_a + side_b if s.tool == "EDT"]
    if edits:
        return "edit stability", f"{len(edits)} edit(s) in the span ({edits[0].file or '?'})"
    return "action choice", "same targets, other actions or order"


def _spans(level: str, cols: list[tuple[int | None, int | None, str]], sa: list[Step],
           sb: list[Step], ta: list[tuple], tb: list[tuple]) -> list[Span]:
    out: list[Span] = []
    k = 0
    while k < len(cols):
        if cols[k][2] == "match":
            k += 1
            continue
        start = k
        while k < len(cols) and cols[k][2] != "match":
            k += 1
        part = cols[start:k]
        ia = [i for i, _, _ in part if i is not None]
        jb = [j for _, j, _ in part if j is not None]
        kind, why = _classify(level, [sa[i] for i in ia], [sb[j] for j in jb], ta, tb,
                              [ta[i] for i in ia], [tb[j] for j in jb])
        out.append(Span(level, start, k - 1,
                        (sa[ia[0]].turn, sa[ia[-1]].turn) if ia else None,
                        (sb[jb[0]].turn, sb[jb[-1]].turn) if jb else None, kind, why))
    return out


def align(steps_a: Sequence[Step], steps_b: Sequence[Step], match: float = 1.0,
          mismatch: float = 0.0, gap: float = 0.0, symbol_of: SymbolOf | None = None
          ) -> RunAlignment:
    """Align two runs (their steps, e.g. from :func:`adakit.diagnostics.steps.steps_of`) at
    the action and file levels, and the symbol level when ``symbol_of`` is given; the
    divergence spans are taken at the finest level."""
    sa = [s for s in steps_a if s.tool is not None]
    sb = [s for s in steps_b if s.tool is not None]
    levels = ["action", "file"] + (["symbol"] if symbol_of is not None else [])
    out: dict[str, LevelAlignment] = {}
    toks: dict[str, tuple[list[tuple], list[tuple]]] = {}
    for level in levels:
        ta, tb = tokens(sa, level, symbol_of), tokens(sb, level, symbol_of)
        cols, score = lcs_align(ta, tb, match, mismatch, gap)
        out[level] = LevelAlignment(level, cols, score, _first_divergence(cols, sa, sb))
        toks[level] = (ta, tb)
    finest = levels[-1]
    run_a = sa[0].run_id if sa else (steps_a[0].run_id if steps_a else "")
    run_b = sb[0].run_id if sb else (steps_b[0].run_id if steps_b else "")
    spans = _spans(finest, out[finest].columns, sa, sb, *toks[finest])
    return RunAlignment(run_a, run_b, sa, sb, out, spans, (match, mismatch, gap))


def index_symbols(world: str) -> SymbolOf | None:
    """A ``(file, line) -> enclosing qualname`` look-up on a world already on disk (None when
    it is not fetched or not in the manifest)."""
    from adakit.apparatus.code_index import CodeIndex
    from adakit.apparatus.world import SandboxError, WorldUnavailable, open_world

    try:
        w = open_world(world, fetch=False, progress=False)
    except (WorldUnavailable, KeyError, ValueError):
        return None
    index = CodeIndex(w)
    cache: dict[tuple[str, int], str | None] = {}

    def symbol_of(file: str, line: int) -> str | None:
        key = (file, line)
        if key not in cache:
            try:
                sym = index.enclosing(file, line)
            except (SandboxError, OSError, ValueError):
                sym = None
            cache[key] = sym.qualname if sym else None
        return cache[key]

    return symbol_of


# --------------------------------------------------------------------------- references


def lens3_run_scores(verdicts: pd.DataFrame, runs: pd.DataFrame) -> pd.Series:
    """Each judged run's lens 3 score: the mean of its normalised relevance, conclusion
    grounding and termination calibration (those it has)."""
    from adakit.lenses import adjudication as l3

    table = l3.lens3_scores(verdicts, runs)
    dims = [c for c in ("relevance", "conclusion_grounding", "calibration") if c in table]
    return table.set_index("run_id")[dims].mean(axis=1, skipna=True).dropna()


def choose_references(runs: pd.DataFrame, scores: pd.Series | None = None,
                      quality: pd.Series | None = None, steps: pd.Series | None = None,
                      named: str | None = None, key: Sequence[str] = TASK_KEY
                      ) -> dict[tuple, str]:
    """The reference run of each task (``key`` columns): ``named`` for its own task, else the
    best lens 3 ``scores`` (run id -> score), else the best ``quality`` (run id -> share of
    survived and justified steps); ties: fewer ``steps``, then run id."""
    key = [k for k in key if k in runs.columns]
    out: dict[tuple, str] = {}
    for task, grp in runs.groupby(key, sort=True, dropna=False):
        task = task if isinstance(task, tuple) else (task,)
        ids = list(grp["run_id"])
        if named is not None and named in ids:
            out[task] = named
            continue
        out[task] = min(ids, key=lambda r: (-_value(scores, r), -_value(quality, r),
                                            _value(steps, r, 0.0), r))
    return out


def _value(table: pd.Series | None, key: str, missing: float = -1.0) -> float:
    """``table[key]`` as a number, ``missing`` when there is no table, key or value."""
    if table is None or key not in table.index or pd.isna(table[key]):
        return missing
    return float(table[key])


# --------------------------------------------------------------------------- tables


def alignment_rows(al: RunAlignment) -> list[dict[str, Any]]:
    """One row per alignment column and level (turns of A and B, kind)."""
    rows = []
    for level, la in al.levels.items():
        for col, (i, j, kind) in enumerate(la.columns):
            rows.append({"run_a": al.run_a, "run_b": al.run_b, "level": level, "column": col,
                         "turn_a": al.steps_a[i].turn if i is not None else None,
                         "turn_b": al.steps_b[j].turn if j is not None else None, "kind": kind})
    return rows


def summary_row(al: RunAlignment) -> dict[str, Any]:
    """The alignment in one row: scores and first divergence per level, spans per class."""
    row: dict[str, Any] = {"run_a": al.run_a, "run_b": al.run_b, "steps_a": len(al.steps_a),
                           "steps_b": len(al.steps_b), "match": al.scoring[0],
                           "mismatch": al.scoring[1], "gap": al.scoring[2]}
    for level in LEVELS:
        la = al.levels.get(level)
        row[f"score_{level}"] = la.score if la else None
        first = la.first_divergence if la else None
        row[f"diverge_{level}_a"] = first[0] if first else None
        row[f"diverge_{level}_b"] = first[1] if first else None
    for kind, _ in DIVERGENCE_RULES:
        row[f"spans_{kind.replace(' ', '_')}"] = sum(s.kind == kind for s in al.spans)
    return row


def span_rows(al: RunAlignment) -> list[dict[str, Any]]:
    """One row per divergence span."""
    return [{"run_a": al.run_a, "run_b": al.run_b, "level": s.level, "first_col": s.first_col,
             "last_col": s.last_col,
             "a_first": s.a_turns[0] if s.a_turns else None,
             "a_last": s.a_turns[1] if s.a_turns else None,
             "b_first": s.b_turns[0] if s.b_turns else None,
             "b_last": s.b_turns[1] if s.b_turns else None,
             "kind": s.kind, "evidence": s.evidence} for s in al.spans]


SPAN_COLUMNS = ["run_a", "run_b", "level", "first_col", "last_col", "a_first", "a_last",
                "b_first", "b_last", "kind", "evidence"]


def span_frame(al: RunAlignment) -> pd.DataFrame:
    """The divergence spans of one alignment as a table (:func:`span_rows`)."""
    return pd.DataFrame(span_rows(al), columns=SPAN_COLUMNS)


# --------------------------------------------------------------------------- the figure


def plot_alignment(al: RunAlignment, level: str | None = None, labels: Mapping[str, str] | None
                   = None, title: str | None = None, ax: Any = None) -> Figure:
    """Two runs as aligned tracks: one box per step, coloured by tool and labelled with its
    file's name, matched steps joined, the divergence spans shaded by class."""
    figures.use_style()
    level = level or al.finest
    la = al.levels[level]
    n = max(len(la.columns), 1)
    if ax is None:
        fig, ax = plt.subplots(figsize=(min(max(6.0, 0.42 * n + 2.0), 22.0), 3.0))
    else:
        fig = ax.figure
    spans = al.spans if level == al.finest else []
    for s in spans:
        ax.axvspan(s.first_col - 0.5, s.last_col + 0.5, color=SPAN_COLORS[s.kind], alpha=0.22,
                   lw=0)
    for col, (i, j, kind) in enumerate(la.columns):
        for pos, y, steps in ((i, 1.0, al.steps_a), (j, 0.0, al.steps_b)):
            if pos is None:
                continue
            s = steps[pos]
            color = figures.CANONICAL_COLORS.get(s.tool or "", figures.NEUTRAL_COLOR)
            ax.add_patch(plt.Rectangle((col - 0.4, y - 0.18), 0.8, 0.36, color=color,
                                       ec=figures.ERROR_COLOR if s.error else "white",
                                       lw=1.4 if s.error else 0.5))
            ax.text(col, y, s.tool or "", ha="center", va="center", fontsize=6, color="white")
            name = (s.file or "").rsplit("/", 1)[-1]
            if name:
                ax.text(col, y + (0.26 if y else -0.26), name[:14], ha="center",
                        va="bottom" if y else "top", fontsize=5, rotation=60, color="0.3")
        if kind == "match":
            ax.plot([col, col], [0.18, 0.82], color="0.55", lw=0.7)
    names = labels or {}
    ax.set_yticks([1.0, 0.0], [names.get(al.run_a, f"A: {al.run_a}")[:40],
                               names.get(al.run_b, f"B: {al.run_b}")[:40]])
    ax.set_xlim(-0.8, n - 0.2)
    ax.set_ylim(-0.9, 1.9)
    ax.set_xlabel(f"alignment column ({level} level; match {al.scoring[0]:g}, mismatch "
                  f"{al.scoring[1]:g}, gap {al.scoring[2]:g})")
    ax.grid(False)
    present = [k for k, _ in DIVERGENCE_RULES if any(s.kind == k for s in spans)]
    if present:
        ax.legend(handles=[Patch(color=SPAN_COLORS[k], alpha=0.4, label=k) for k in present],
                  loc="upper center", bbox_to_anchor=(0.5, -0.24), ncol=len(present),
                  frameon=False, fontsize=7)
    first = la.first_divergence

    def side(turn: int | None, who: str) -> str:
        return f"a gap in {who}" if turn is None else f"turn {turn} of {who}"

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title or (f"first divergence ({level} level): {side(first[0], 'A')}, "
                           f"{side(first[1], 'B')}" if first
                           else "the runs never diverge at this level"), fontsize=9)
    return fig
