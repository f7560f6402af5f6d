"""Lens 4, the codebase footprint lens (evidence layer): trace density over files and code
regions, repository maps (Fig. 10), signed difference maps (Fig. 10b-d, Fig. 13), single-run
routes (Fig. 11), anchor files (Table D13) and file-to-file corridors (Table D14).

Trace density counts the lines a tool actually showed, line by line: a read of lines 10-19
adds 1 to each of those ten lines, and reading them twice adds 2. Density per file is the sum
of lines shown divided by the number of runs in the group (so groups of different size
compare), and the lines a group touched at least once are its distinct lines. The input is the
tidy reads table of :func:`adakit.record.load_corpus` (run_id, turn, file, start_line,
end_line; failed tool calls are not in it).

Choices made where the paper is silent:

* **Anchors (D13).** The paper's anchors are the "most visited" files. For each world and each
  condition, files are ranked by visits (``rank_by="visits"``, the default: successful tool
  calls naming the file, any tool, the same count behind lens 0's files visited, so a file
  reached only by an outline or a reference search counts), 1 = most visited, ties sharing
  the better rank. ``rank_by="lines"`` ranks by lines shown instead. A file a condition never
  visited ranks just after that condition's last listed file. A file's position is its rank
  averaged over the world's conditions; ties go to the larger total of the ranking measure,
  then of the other one.
* **Overview maps (Fig. 10a).** The paper's overview shows *cumulative* trace density across
  the whole matrix: :func:`plot_overview_map` colours files by the lines shown summed over all
  runs (``values="cumulative"``, the default) or per run (``values="per_run"``).
* **Model contrasts (Fig. 10b).** Two models are compared on the same world *and task*
  (:func:`compare_pairs` holds the task fixed, choosing the task with most runs of both models
  unless one is given), as the paper's panel does; conditions are pooled.
* **Corridors (D14).** A move is two consecutive successful tool calls of a run that name
  different files; turns naming no file (MEM, CON, ...) are skipped, so a -> MEM -> b is a
  move a -> b. Moves count every occurrence, trajectories count the runs with at least one.
  Corridors are directed.
* **Maps.** The world's folders nest as circles (circle packing with ``circlify``), a file's
  area follows its lines of code, its colour its density. Folders holding a single folder are
  merged into one circle ("src/flask"). Files never read stay grey. Very large worlds are
  thinned for drawing: unread files of a folder merge into one grey "(n files)" circle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import circlify
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib import patheffects as pe
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize, TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch
from tqdm.auto import tqdm

from adakit import figures, uncertainty
from adakit.record import READ_COLUMNS, RUN_COLUMNS, Corpus
from adakit.uncertainty import require_columns

UNVISITED_COLOR = "#D9D9D9"
FOLDER_FACE = "#F5F5F5"
FOLDER_EDGE = "#9E9E9E"
DENSITY_CMAP = "YlOrRd"
DIFF_CMAP = "RdBu_r"
_READ_COLUMNS = ("run_id", "file", "start_line", "end_line")


# --------------------------------------------------------------------------- helpers


def _as_tuple(by: str | Sequence[str] | None) -> tuple[str, ...]:
    if by is None:
        return ()
    return (by,) if isinstance(by, str) else tuple(by)


def _clean_reads(reads: pd.DataFrame, keep: Sequence[str] = ()) -> pd.DataFrame:
    require_columns(reads, _READ_COLUMNS, "the reads table")
    cols = [c for c in dict.fromkeys([*_READ_COLUMNS, *keep]) if c in reads.columns]
    reads = reads[cols]
    r = reads[reads["file"].notna()].copy()
    r["start_line"] = pd.to_numeric(r["start_line"], errors="coerce")
    r["end_line"] = pd.to_numeric(r["end_line"], errors="coerce")
    r = r[r["start_line"].notna() & r["end_line"].notna()]
    bad = r["end_line"] < r["start_line"]
    if bad.any():
        raise ValueError(f"{int(bad.sum())} read(s) end before they start, e.g. "
                         f"{r.loc[bad].iloc[0][list(_READ_COLUMNS)].to_dict()}")
    r["start_line"] = r["start_line"].astype(np.int64)
    r["end_line"] = r["end_line"].astype(np.int64)
    r["n_shown"] = r["end_line"] - r["start_line"] + 1
    return r


def _group_run_counts(
    reads: pd.DataFrame, runs: pd.DataFrame | None, keys: list[str]
) -> pd.DataFrame:
    """Runs per group: from ``runs`` when given (runs that read nothing count), else reads."""
    source = reads
    if runs is not None and all(k in runs.columns for k in keys):
        source = runs
    if not keys:
        return pd.DataFrame({"n_runs": [source["run_id"].nunique()]})
    return source.groupby(keys, dropna=False)["run_id"].nunique().rename("n_runs").reset_index()


def _union_length(frame: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Distinct lines covered by the ranges of each group (overlapping intervals merged)."""
    blocks = _union_blocks(frame, keys)
    length = blocks["end_line"] - blocks["start_line"] + 1
    return length.groupby([blocks[k] for k in keys], dropna=False, sort=True).sum()


# --------------------------------------------------------------------------- density


def _union_blocks(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The ranges of each group merged into disjoint blocks: keys, start_line, end_line."""
    f = frame.sort_values([*keys, "start_line"], kind="stable")
    gid = f.groupby(keys, dropna=False, sort=False).ngroup().to_numpy()
    start = f["start_line"].to_numpy()
    end = f["end_line"].to_numpy()
    reach = pd.Series(end).groupby(gid).cummax().to_numpy()
    first = np.r_[True, gid[1:] != gid[:-1]]
    prev = np.r_[0, reach[:-1]]
    block = np.cumsum(first | (start > prev))
    first_row = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])
    out = f.iloc[first_row][keys].reset_index(drop=True)
    out["start_line"] = start[first_row]
    out["end_line"] = pd.Series(end).groupby(block).max().to_numpy()
    return out


DENSITY_PARTS = ("lines_shown", "reads", "runs_visiting", "max_line")


def density_parts(reads: pd.DataFrame, runs: pd.DataFrame | None = None,
                  by: str | Sequence[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The map step of :func:`trace_density` over some whole runs: per (group, file) the
    lines shown, reads, runs visiting and highest line, and the merged line ranges read
    (:func:`density_of_parts` adds up the parts of disjoint sets of runs)."""
    keys = list(_as_tuple(by))
    r = uncertainty.with_run_columns(_clean_reads(reads, keys), runs, keys, "the reads table")
    g = [*keys, "file"]
    sums = r.groupby(g, dropna=False).agg(
        lines_shown=("n_shown", "sum"),
        reads=("n_shown", "size"),
        runs_visiting=("run_id", "nunique"),
        max_line=("end_line", "max"),
    ).reset_index()
    blocks = _union_blocks(r, g) if len(r) else pd.DataFrame(columns=[*g, "start_line",
                                                                      "end_line"])
    return sums, blocks


def density_of_parts(parts: Iterable[tuple[pd.DataFrame, pd.DataFrame]], runs: pd.DataFrame,
                     by: str | Sequence[str] | None = None) -> pd.DataFrame:
    """:func:`trace_density` from the :func:`density_parts` of disjoint sets of runs that
    together make the corpus whose ``runs`` table is given."""
    keys = list(_as_tuple(by))
    g = [*keys, "file"]
    cols = [*keys, "file", "lines_shown", "distinct_lines", "reads", "runs_visiting", "n_runs",
            "density", "max_line"]
    parts = [p for p in parts if len(p[0])]
    if not parts:
        return pd.DataFrame(columns=cols)
    sums = pd.concat([p[0] for p in parts], ignore_index=True)
    out = sums.groupby(g, dropna=False).agg(
        lines_shown=("lines_shown", "sum"), reads=("reads", "sum"),
        runs_visiting=("runs_visiting", "sum"), max_line=("max_line", "max"))
    blocks = pd.concat([p[1] for p in parts], ignore_index=True)
    out["distinct_lines"] = _union_length(blocks, g).reindex(out.index)
    return _density_table(out.reset_index(), runs, runs, keys, cols)


def _density_table(out: pd.DataFrame, r: pd.DataFrame, runs: pd.DataFrame | None,
                   keys: list[str], cols: list[str]) -> pd.DataFrame:
    counts = _group_run_counts(r, runs, keys)
    out = out.merge(counts, on=keys, how="left") if keys else out.assign(
        n_runs=int(counts["n_runs"].iloc[0]))
    out["density"] = out["lines_shown"] / out["n_runs"]
    out = out.sort_values([*keys, "density", "file"], ascending=[True] * len(keys) + [False, True])
    return out[cols].reset_index(drop=True)


def density_columns(by: str | Sequence[str] | None = None) -> dict[str, list[str]]:
    """The columns :func:`density_parts` reads, per table, grouped ``by`` run columns."""
    keys = list(_as_tuple(by))
    unknown = [k for k in keys if k not in RUN_COLUMNS]
    if unknown:
        raise ValueError(f"a corpus's density is grouped by runs columns, not {unknown[0]!r}")
    return {"runs": ["run_id", *(k for k in keys if k != "run_id")],
            "turns": ["run_id"],
            "reads": list(dict.fromkeys([*_READ_COLUMNS,
                                         *(k for k in keys if k in READ_COLUMNS)]))}


def trace_density(
    reads: pd.DataFrame | Corpus,
    runs: pd.DataFrame | None = None,
    by: str | Sequence[str] | None = None,
) -> pd.DataFrame:
    """Trace density per file (and group).

    Columns: *by, file, lines_shown (lines shown, counted per line and per read), distinct_lines,
    reads, runs_visiting, n_runs (runs in the group: from ``runs`` when given, so runs that read
    nothing count), density (= lines_shown / n_runs), max_line (the highest line read).

    ``reads`` may also be a corpus (its runs count): read piece by piece for a corpus on disk
    (:func:`density_parts` per piece, then :func:`density_of_parts`).
    """
    if isinstance(reads, Corpus):
        need = density_columns(by)
        parts = [density_parts(piece.reads, piece.runs, by)
                 for piece, _ in reads.chunks(need)]
        return density_of_parts(parts, reads.table("runs", need["runs"]), by)
    keys = list(_as_tuple(by))
    r = uncertainty.with_run_columns(_clean_reads(reads, keys), runs, keys, "the reads table")
    cols = [*keys, "file", "lines_shown", "distinct_lines", "reads", "runs_visiting", "n_runs",
            "density", "max_line"]
    if r.empty:
        return pd.DataFrame(columns=cols)
    g = [*keys, "file"]
    out = r.groupby(g, dropna=False).agg(
        lines_shown=("n_shown", "sum"),
        reads=("n_shown", "size"),
        runs_visiting=("run_id", "nunique"),
        max_line=("end_line", "max"),
    )
    out["distinct_lines"] = _union_length(r, g).reindex(out.index)
    return _density_table(out.reset_index(), r, runs, keys, cols)


def density_intervals(
    reads: pd.DataFrame,
    runs: pd.DataFrame | None = None,
    by: str | Sequence[str] | None = None,
    n_resamples: int = uncertainty.DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = uncertainty.DEFAULT_LEVEL,
    min_runs: int = uncertainty.MIN_RUNS,
) -> pd.DataFrame:
    """:func:`trace_density` with a bootstrap interval per file's density (lines shown per
    run): ``density_lo``, ``density_hi`` and ``note``.

    Each group's runs (from ``runs`` when given, so a run that read nothing counts as zeros)
    are resampled; a drawn run adds its lines shown in every file the group read.
    """
    by_cols = list(_as_tuple(by))
    density = trace_density(reads, runs, by=by_cols or None)
    if density.empty:
        return density.assign(density_lo=[], density_hi=[], note=[])
    r = reads[reads["file"].notna()]
    r = uncertainty.with_run_columns(r, runs, by_cols, "the reads table")
    lines = (pd.to_numeric(r["end_line"]) - pd.to_numeric(r["start_line"]) + 1).rename("lines")
    per = (r.assign(lines=lines).groupby([*by_cols, "run_id", "file"], dropna=False,
                                          sort=False)["lines"].sum().reset_index())
    source = runs if runs is not None and all(c in runs.columns for c in by_cols) else r
    members = source[[*by_cols, "run_id"]].drop_duplicates().reset_index(drop=True)
    codes, groups = uncertainty.group_codes(members, by_cols)
    members = members.assign(_g=codes, _pos=members.groupby(codes).cumcount().to_numpy())
    per = per.merge(members, on=[*by_cols, "run_id"], how="inner")
    sizes = np.bincount(codes, minlength=len(groups))
    seeds = np.random.default_rng(seed).integers(0, 2**32, size=len(groups))
    rows = []
    for g, mine in per.groupby("_g", sort=True):
        n = int(sizes[g])
        fcode, files = pd.factorize(mine["file"])
        matrix = np.zeros((n, len(files)))
        np.add.at(matrix, (mine["_pos"].to_numpy(), fcode), mine["lines"].to_numpy(float))
        boot = uncertainty.bootstrap_sums(matrix, np.zeros(n, dtype=np.int64), n_resamples,
                                          int(seeds[g]), 1)[:, 0, :]
        lo, hi = uncertainty.percentile_interval(boot / n, level)
        few = n < min_runs
        key = groups.iloc[g].to_dict() if by_cols else {}
        rows.append(pd.DataFrame({**{k: [v] * len(files) for k, v in key.items()},
                                  "file": list(files),
                                  "density_lo": np.nan if few else lo,
                                  "density_hi": np.nan if few else hi,
                                  "note": uncertainty.TOO_FEW if few else ""}))
    ci = pd.concat(rows, ignore_index=True)
    out = density.merge(ci, on=[*by_cols, "file"], how="left")
    out["note"] = out["note"].fillna("")
    return out


def concentration(
    reads: pd.DataFrame,
    runs: pd.DataFrame | None = None,
    by: str | Sequence[str] | None = None,
) -> pd.DataFrame:
    """How concentrated each run's footprint is, averaged per group.

    Per run: files_read, lines_shown, lines_per_file, top_file_share (share of the lines shown
    that went to the run's densest file) and hhi (Herfindahl index of the lines shown over files:
    1 = one file, 1/k = k files read equally). Columns: *by, runs (runs that read anything),
    then the group means of those five.
    """
    keys = list(_as_tuple(by))
    r = uncertainty.with_run_columns(_clean_reads(reads, keys), runs, keys, "the reads table")
    cols = [*keys, "runs", "files_read", "lines_shown", "lines_per_file", "top_file_share", "hhi"]
    if r.empty:
        return pd.DataFrame(columns=cols)
    per_file = r.groupby([*keys, "run_id", "file"], dropna=False)["n_shown"].sum()
    per_run = per_file.groupby(level=[*keys, "run_id"], dropna=False)
    total = per_run.transform("sum")
    share = per_file / total
    stats = pd.DataFrame({
        "files_read": per_run.size(),
        "lines_shown": per_run.sum(),
        "top_file_share": share.groupby(level=[*keys, "run_id"], dropna=False).max(),
        "hhi": (share**2).groupby(level=[*keys, "run_id"], dropna=False).sum(),
    })
    stats["lines_per_file"] = stats["lines_shown"] / stats["files_read"]
    if keys:
        out = stats.groupby(level=keys, dropna=False).mean()
        out.insert(0, "runs", stats.groupby(level=keys, dropna=False).size())
        out = out.reset_index()
    else:
        out = stats.mean().to_frame().T
        out.insert(0, "runs", len(stats))
    return out[cols]


def region_density(
    reads: pd.DataFrame,
    runs: pd.DataFrame | None = None,
    by: str | Sequence[str] | None = None,
    bin_lines: int = 50,
    regions: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Trace density per code region: fixed bins of ``bin_lines`` lines, or named regions.

    ``regions`` (columns file, region, start_line, end_line; e.g. functions and classes from a
    code index) replaces the bins. Each read adds its overlap with a region, line by line.
    Columns: *by, file, region, region_start, region_end, lines_shown, n_runs, density.
    """
    keys = list(_as_tuple(by))
    r = uncertainty.with_run_columns(_clean_reads(reads, keys), runs, keys, "the reads table")
    cols = [*keys, "file", "region", "region_start", "region_end", "lines_shown", "n_runs",
            "density"]
    if r.empty:
        return pd.DataFrame(columns=cols)
    if regions is None:
        if int(bin_lines) < 1:
            raise ValueError(f"bin_lines must be >= 1, got {bin_lines}")
        b = int(bin_lines)
        first = (r["start_line"].to_numpy() - 1) // b
        last = (r["end_line"].to_numpy() - 1) // b
        reps = (last - first + 1).astype(np.int64)
        idx = np.repeat(np.arange(len(r)), reps)
        offset = np.arange(reps.sum()) - np.repeat(np.cumsum(reps) - reps, reps)
        k = first[idx] + offset
        x = r.iloc[idx].reset_index(drop=True)
        x["region_start"] = k * b + 1
        x["region_end"] = (k + 1) * b
        bins, distinct = pd.factorize(k)  # one label per distinct bin, not per row
        labels = np.array([f"L{j * b + 1}-{(j + 1) * b}" for j in distinct], dtype=object)
        x["region"] = labels[bins]
    else:
        require_columns(regions, ["file", "region", "start_line", "end_line"], "the regions table")
        reg = regions.rename(columns={"start_line": "region_start", "end_line": "region_end"})
        x = r.merge(reg[["file", "region", "region_start", "region_end"]], on="file")
        x = x[(x["start_line"] <= x["region_end"]) & (x["end_line"] >= x["region_start"])]
    x = x.assign(
        overlap=np.minimum(x["end_line"], x["region_end"])
        - np.maximum(x["start_line"], x["region_start"]) + 1
    )
    g = [*keys, "file", "region", "region_start", "region_end"]
    out = x.groupby(g, dropna=False)["overlap"].sum().rename("lines_shown").reset_index()
    counts = _group_run_counts(r, runs, keys)
    out = out.merge(counts, on=keys, how="left") if keys else out.assign(
        n_runs=int(counts["n_runs"].iloc[0]))
    out["density"] = out["lines_shown"] / out["n_runs"]
    out = out.sort_values([*keys, "file", "region_start"])
    return out[cols].reset_index(drop=True)


def _select(frame: pd.DataFrame, spec: Mapping[str, Any]) -> pd.Series:
    mask = pd.Series(True, index=frame.index)
    for col, val in spec.items():
        if col not in frame.columns:
            raise ValueError(f"cannot select on {col!r}: not a column ({list(frame.columns)})")
        if isinstance(val, (list, tuple, set, frozenset)):
            mask &= frame[col].isin(list(val))
        else:
            mask &= frame[col] == val
    return mask


def density_difference(
    reads: pd.DataFrame,
    runs: pd.DataFrame,
    a: Mapping[str, Any],
    b: Mapping[str, Any],
) -> pd.DataFrame:
    """Signed per-file density of group A minus group B (each normalised by its run count).

    ``a`` and ``b`` select runs by column values, e.g. ``{"model": "Qwen3.5-397B", "world":
    "graphiti"}`` (a list value means "any of"). Columns: file, density_a, density_b, diff,
    n_runs_a, n_runs_b; files read by neither group are absent. Raises if a group has no runs.
    """
    require_columns(runs, ["run_id"], "the runs table")
    out = []
    for name, spec in (("a", a), ("b", b)):
        ids = set(runs.loc[_select(runs, spec), "run_id"])
        if not ids:
            raise ValueError(f"group {name.upper()} {dict(spec)} has no runs")
        d = trace_density(reads[reads["run_id"].isin(ids)])
        d = d.set_index("file")["lines_shown"] / len(ids)
        out.append((d.rename(f"density_{name}"), len(ids)))
    (da, na), (db, nb) = out
    table = pd.concat([da, db], axis=1).fillna(0.0)
    table["diff"] = table["density_a"] - table["density_b"]
    table["n_runs_a"], table["n_runs_b"] = na, nb
    table.index.name = "file"
    return table.reset_index().sort_values("diff", ascending=False, kind="stable").reset_index(
        drop=True)


@dataclass(frozen=True)
class PairComparison:
    """One signed A - B density comparison along a runs column (Fig. 10b-d), or the reason
    it was skipped (``difference`` is then None). ``scope`` holds the columns held fixed
    (e.g. the world and task of a model contrast)."""

    column: str
    a: Any = None
    b: Any = None
    difference: pd.DataFrame | None = None
    skipped: str = ""
    scope: dict[str, Any] = field(default_factory=dict)

    @property
    def labels(self) -> tuple[str, str]:
        """Display labels of A and B (e.g. "Budget pressure" for budget_pressure)."""
        return figures.label_for(self.column, self.a), figures.label_for(self.column, self.b)

    def summary(self) -> str:
        """One line: what was compared with how many runs and files, or why not."""
        if self.difference is None:
            return f"skipped ({self.skipped})"
        d = self.difference
        n_a = int(d["n_runs_a"].iloc[0]) if len(d) else 0
        n_b = int(d["n_runs_b"].iloc[0]) if len(d) else 0
        la, lb = self.labels
        where = ", ".join(f"{k} {v}" for k, v in self.scope.items())
        return (f"{la} ({n_a} runs) minus {lb} ({n_b} runs), {len(d)} files"
                + (f" ({where})" if where else ""))


#: Columns held fixed per comparison column (None: the value with most runs of both sides).
HOLD: dict[str, dict[str, Any]] = {"model": {"task": None}}


def _held_value(scope: pd.DataFrame, column: str, a: Any, b: Any, held: str) -> Any:
    """The value of ``held`` with runs of both A and B and the most runs in all (ties: the
    first in display order); None when no value has both."""
    both = scope[scope[column].isin([a, b])]
    sides = both.groupby(held)[column].nunique()
    candidates = [v for v in figures.order_for(held, sides.index) if sides.get(v, 0) == 2]
    if not candidates:
        return None
    size = both.groupby(held).size()
    return max(candidates, key=lambda v: size[v])  # max keeps the first of equal sizes


def compare_pairs(
    reads: pd.DataFrame,
    runs: pd.DataFrame,
    pairs: Mapping[str, Sequence[Any]],
    within: Mapping[str, Any] | None = None,
    hold: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, PairComparison]:
    """Signed difference tables for several A - B comparisons, one per runs column.

    ``pairs`` maps a runs column to the two values to compare, ``[A, B]``; an empty list takes
    the first two values present in display order (e.g. the paper's model order). ``within``
    restricts both groups, e.g. ``{"world": "flask"}``. ``hold`` fixes further columns per
    comparison (default :data:`HOLD`: a model contrast holds the task, Fig. 10b); a held value
    of None picks the value with most runs of both A and B. A comparison that cannot be made
    (fewer than two values, a value without runs, A equal to B, no held value with both) is
    returned with its reason in ``skipped`` instead of failing the others. Results keep the
    order of ``pairs``.
    """
    hold = HOLD if hold is None else hold
    held_cols = [c for col in pairs for c in (hold.get(col) or {})]
    require_columns(runs, ["run_id", *pairs, *(within or {}), *held_cols], "the runs table")
    scope = runs[_select(runs, within or {})]
    out: dict[str, PairComparison] = {}
    for column, wanted in pairs.items():
        present = figures.order_for(column, scope[column].dropna().unique())
        chosen = list(wanted) or present[:2]
        where = f" within {dict(within)}" if within else ""
        if len(chosen) != 2:
            why = (f"need two values of {column}, have {present}{where}" if not wanted else
                   f"give two values of {column} as [A, B], not {chosen}")
            out[column] = PairComparison(column, skipped=why)
            continue
        a, b = chosen
        missing = [v for v in chosen if v not in present]
        if missing or a == b:
            why = (f"{missing} not among the runs{where} ({present})" if missing else
                   f"A and B are both {a!r}")
            out[column] = PairComparison(column, a, b, skipped=why)
            continue
        base = dict(within or {})
        held = {}
        for col, value in (hold.get(column) or {}).items():
            if col in base:
                continue
            chosen_value = value if value is not None else _held_value(scope, column, a, b, col)
            if chosen_value is None:
                held = None
                break
            held[col] = chosen_value
        if held is None:
            out[column] = PairComparison(column, a, b, skipped=(
                f"no {col} with runs of both {a!r} and {b!r}{where}"))
            continue
        base.update(held)
        sides = runs[_select(runs, base)][column]
        lacking = [v for v in (a, b) if not (sides == v).any()]
        if lacking:
            out[column] = PairComparison(column, a, b, skipped=(
                f"{lacking} have no runs with {base}"), scope=base)
            continue
        diff = density_difference(reads, runs, {**base, column: a}, {**base, column: b})
        out[column] = PairComparison(column, a, b, difference=diff, scope=base)
    return out


# --------------------------------------------------------------------------- world files


def world_files_table(
    world: Any,
    extensions: Iterable[str] | None = None,
    source_only: bool = True,
    progress: bool = True,
) -> pd.DataFrame:
    """The files of an :class:`adakit.apparatus.world.World` with their physical line counts (file, loc).

    Files are those ending with one of ``extensions``; by default the world's source files
    (its manifest's source extensions when it has a manifest entry, else the known languages),
    or every file when ``source_only`` is false or the world has no source file.
    """
    if extensions is None and source_only:
        extensions = _manifest_extensions(getattr(world, "name", ""))
    if extensions:
        ends = tuple(e.lower() for e in extensions)
        files = [f for f in world.files() if f.lower().endswith(ends)]
    else:
        files = world.source_files() if source_only else world.files()
    if not files:
        files = world.files()
    locs = [world.line_count(f) for f in tqdm(files, desc=f"LOC {world.name}",
                                               disable=not progress, leave=False)]
    return pd.DataFrame({"file": list(files), "loc": locs})


def _manifest_extensions(name: str) -> tuple[str, ...]:
    try:
        from adakit.apparatus.world import load_manifest

        spec = load_manifest().get(name)
    except (OSError, ValueError, ImportError):  # no usable manifest: the known languages
        return ()
    return tuple(spec.extensions) if spec is not None else ()


#: Caption of a map whose files come from the trajectory alone (no world at hand).
FROM_READS_NOTE = ("Files and sizes from the trajectories only (no world): the files the runs "
                   "read, each sized by the highest line read.")


def files_from_reads(reads: pd.DataFrame) -> pd.DataFrame:
    """A stand-in files table when the world is not at hand: the files the corpus read, with
    LOC unknown and taken as the highest line read. The table is marked
    (``attrs["from_reads"]``) so :func:`plot_repo_map` says so under the map."""
    r = _clean_reads(reads)
    out = r.groupby("file")["end_line"].max().rename("loc").reset_index()
    out = out.sort_values("file").reset_index(drop=True)
    out.attrs["from_reads"] = True
    return out


def complete_files(files: pd.DataFrame, reads: pd.DataFrame) -> pd.DataFrame:
    """``files`` plus the files the corpus read that it lacks (LOC = highest line read), so a
    map shows every read file (e.g. a file type outside the world's source extensions)."""
    require_columns(files, ["file", "loc"], "the files table")
    seen = files_from_reads(reads)
    extra = seen[~seen["file"].isin(files["file"])]
    return pd.concat([files[["file", "loc"]], extra], ignore_index=True)


def world_source(runs: pd.DataFrame, world: str) -> str | None:
    """Where a world's files can be found, from the runs table's ``world_source`` column: a
    local checkout (``folder:PATH``) first, then a manifest source, then ``trajectory`` (runs
    imported without a world); None when the column is absent."""
    if "world_source" not in runs.columns or "world" not in runs.columns:
        return None
    found = [str(v) for v in runs.loc[runs["world"] == world, "world_source"].dropna().unique()]
    for pick in (lambda v: v.startswith("folder:"), lambda v: v not in ("", "trajectory"),
                 lambda v: v == "trajectory"):
        hit = sorted(v for v in found if pick(v))
        if hit:
            return hit[0]
    return None


def map_files(
    world: str, reads: pd.DataFrame, fetch: bool = False, source: str | None = None
) -> tuple[pd.DataFrame, str]:
    """The files table (file, loc) for a world's map and a sentence saying where it came from.

    ``source`` is the world's recorded source (:func:`world_source`): ``folder:PATH`` maps onto
    a local checkout; ``trajectory`` (runs imported without a world) maps only what the runs
    read. Otherwise the world's source files (with every file the corpus read there added)
    when the manifest world is on disk (or ``fetch`` downloads it); when it is not, or when
    none of the files the corpus read exist in it (e.g. a synthetic corpus), the files the
    corpus read stand in with LOC taken as the highest line read.
    """
    from adakit.apparatus.world import World, WorldUnavailable, open_world

    r = reads[reads["world"] == world] if "world" in reads.columns else reads
    if source == "trajectory":
        if r.empty:
            raise ValueError(f"world {world!r} was imported without a world and its runs read "
                             "nothing: no files to draw")
        return files_from_reads(r), (
            f"World {world!r} was imported without a world (adakit import --world): the map "
            f"shows only the {r['file'].nunique()} files the runs read, sized by the highest "
            "line read (LOC unknown).")
    try:
        if source and source.startswith("folder:"):
            w = World(source.removeprefix("folder:"), name=world)
            where = f"the local checkout {w.root}"
        else:
            w = open_world(world, fetch=fetch)
            where = str(w.root)
    except (WorldUnavailable, KeyError, ValueError, OSError) as exc:
        if r.empty:
            raise ValueError(f"world {world!r} is not available ({exc}) and the corpus read "
                             "nothing there: no files to draw") from exc
        return files_from_reads(r), (
            f"World {world!r} is not on disk ({exc}); the map shows only the {r['file'].nunique()}"
            " files the corpus read, sized by the highest line read (LOC unknown).")
    files = world_files_table(w, progress=False)
    if not r.empty and not set(r["file"]).intersection(files["file"]):
        return files_from_reads(r), (
            f"None of the files the corpus read exist in world {world!r} as fetched; the map "
            "shows the files the corpus read, sized by the highest line read (LOC unknown).")
    out = complete_files(files, r) if not r.empty else files
    return out, (f"World {world!r}: {len(files)} source files from {where} "
                 f"({len(out) - len(files)} more read by the corpus).")


# --------------------------------------------------------------------------- layout


@dataclass
class _Node:
    name: str
    path: str
    loc: float = 0.0
    value: float = float("nan")
    is_file: bool = False
    children: dict[str, _Node] | None = None

    def total(self) -> float:
        if self.is_file:
            return max(self.loc, 1.0)
        return sum(c.total() for c in (self.children or {}).values())

    def visited(self) -> bool:
        if self.is_file:
            return bool(np.isfinite(self.value) and self.value != 0)
        return any(c.visited() for c in (self.children or {}).values())


def _build_tree(files: pd.DataFrame, values: pd.Series) -> _Node:
    root = _Node("", "", children={})
    for f, loc in zip(files["file"], files["loc"], strict=True):
        parts = str(f).strip("/").split("/")
        node = root
        for i, part in enumerate(parts[:-1]):
            path = "/".join(parts[: i + 1])
            node = node.children.setdefault(part, _Node(part, path, children={}))
            if node.is_file:
                raise ValueError(f"{path!r} is both a file and a folder in the files table")
        leaf = _Node(parts[-1], str(f).strip("/"), loc=float(loc or 0), is_file=True,
                     value=float(values.get(f, np.nan)))
        node.children[parts[-1]] = leaf
    return root


def _compress(node: _Node) -> _Node:
    """Merge chains of folders that hold exactly one folder (src -> src/flask)."""
    if node.is_file:
        return node
    kids = {k: _compress(c) for k, c in (node.children or {}).items()}
    node.children = kids
    if node.path and len(kids) == 1:
        (only,) = kids.values()
        if not only.is_file:
            return _Node(f"{node.name}/{only.name}", only.path, children=only.children)
    return node


def _thin(node: _Node) -> None:
    """Merge the unread files of every folder into one grey leaf."""
    if node.is_file:
        return
    kids = node.children or {}
    unread = [c for c in kids.values() if c.is_file and not c.visited()]
    if len(unread) > 1:
        for c in unread:
            del kids[c.name]
        name = f"({len(unread)} files)"
        path = f"{node.path}/{name}" if node.path else name
        kids[name] = _Node(name, path, loc=sum(c.loc for c in unread), is_file=True)
    for c in kids.values():
        _thin(c)


def _count_leaves(node: _Node) -> int:
    return 1 if node.is_file else sum(_count_leaves(c) for c in (node.children or {}).values())


def _to_circlify(node: _Node) -> list[dict[str, Any]]:
    out = []
    for c in sorted((node.children or {}).values(), key=lambda n: -n.total()):
        item: dict[str, Any] = {"id": c.path, "datum": c.total()}
        if not c.is_file:
            item["children"] = _to_circlify(c)
        out.append(item)
    return out


def _values_series(values: pd.Series | Mapping[str, float] | pd.DataFrame | None,
                   column: str | None) -> pd.Series:
    if values is None:
        return pd.Series(dtype=float)
    if isinstance(values, pd.DataFrame):
        require_columns(values, ["file"], "the values table")
        col = column or ("diff" if "diff" in values.columns else "density")
        require_columns(values, [col], "the values table")
        return values.groupby("file")[col].sum()
    return pd.Series(values, dtype=float)


def repo_layout(
    files: pd.DataFrame,
    values: pd.Series | Mapping[str, float] | pd.DataFrame | None = None,
    value_column: str | None = None,
    max_leaves: int = 800,
) -> pd.DataFrame:
    """Circle-packing layout of a world: one row per circle (path, kind, depth, x, y, r, loc,
    value). Files read in ``values`` but missing from ``files`` are added with their value's
    LOC unknown (1). When there are more than ``max_leaves`` files, unread files are merged
    per folder before packing."""
    require_columns(files, ["file", "loc"], "the files table")
    vals = _values_series(values, value_column)
    extra = sorted(set(vals.index) - set(files["file"]))
    if extra:
        files = pd.concat([files[["file", "loc"]], pd.DataFrame({"file": extra, "loc": 1})])
    if files.empty:
        raise ValueError("the files table is empty: nothing to lay out")
    root = _compress(_build_tree(files, vals))
    if _count_leaves(root) > max_leaves:
        _thin(root)
    nodes: dict[str, _Node] = {}

    def index(n: _Node) -> None:
        for c in (n.children or {}).values():
            nodes[c.path] = c
            index(c)

    index(root)
    circles = circlify.circlify(_to_circlify(root), show_enclosure=False,
                                target_enclosure=circlify.Circle(x=0, y=0, r=1))
    rows = []
    for c in circles:
        if not c.ex:
            continue
        n = nodes[c.ex["id"]]
        rows.append({"path": n.path, "name": n.name, "kind": "file" if n.is_file else "folder",
                     "depth": c.level, "x": c.x, "y": c.y, "r": c.r, "loc": n.total(),
                     "value": n.value if n.is_file else np.nan})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- maps


def _frame(ax: Axes, lay: pd.DataFrame) -> None:
    """Square limits around the circles, with room for the labels above the outer rims."""
    lim = max(1.0, float((lay["x"].abs() + lay["r"]).max()),
              float((lay["y"].abs() + lay["r"]).max()))
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim * 1.1)


def _label_folders(ax: Axes, lay: pd.DataFrame, depth: int, min_radius: float) -> None:
    """Name the folders down to ``depth`` whose circles are at least ``min_radius`` wide."""
    halo = [pe.withStroke(linewidth=2.2, foreground="white")]
    outer = lay["depth"].min()
    pick = (lay["kind"] == "folder") & (lay["depth"] <= depth) & (lay["r"] >= min_radius)
    for row in lay[pick].itertuples():
        top = row.depth == outer  # outermost circles: label above the rim
        ax.text(row.x, row.y + row.r * (1.0 if top else 0.97), _short(row.name, 24),
                ha="center", va="bottom" if top else "top", fontsize=8 if top else 7,
                fontweight="bold", color="#333333", path_effects=halo, zorder=6)


def _short(name: str, width: int = 16) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def plot_repo_map(
    files: pd.DataFrame,
    values: pd.Series | Mapping[str, float] | pd.DataFrame | None = None,
    ax: Axes | None = None,
    value_column: str | None = None,
    diverging: bool | None = None,
    layout: pd.DataFrame | None = None,
    label_top: int = 8,
    label_depth: int = 2,
    min_label_radius: float = 0.12,
    clip_quantile: float = 0.95,
    colorbar_label: str | None = None,
    title: str | None = None,
    note: str | None = None,
    vmax: float | None = None,
) -> Figure:
    """The repository map (Fig. 10): folders as nested circles, file area = LOC, colour =
    density (sequential) or a signed difference (diverging, centred at zero); unread files grey.

    ``values`` is a per-file Series/mapping, or a table from :func:`trace_density` /
    :func:`density_difference` (``value_column`` defaults to diff, else density).
    ``diverging`` defaults to True when any value is negative. Colours saturate at the
    ``clip_quantile`` of the absolute values (the colour bar then shows "+"). Folders down to
    ``label_depth`` whose circle radius is at least ``min_label_radius`` (the world is the unit
    circle) and the ``label_top`` strongest files are labelled. ``note`` is printed under the
    map; a files table built from the trajectories (:func:`files_from_reads`) adds
    :data:`FROM_READS_NOTE` by itself. ``vmax`` fixes where the colours saturate (e.g. one
    scale for several panels) instead of the quantile.
    """
    figures.use_style()
    vals = _values_series(values, value_column)
    lay = layout if layout is not None else repo_layout(files, vals)
    if diverging is None:
        diverging = bool((vals < 0).any())
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 5.6))
    else:
        fig = ax.figure
    ax.set_aspect("equal")
    ax.axis("off")
    leaf = lay[lay["kind"] == "file"].copy()
    leaf["value"] = leaf["path"].map(vals).astype(float)
    seen = leaf["value"].notna() & (leaf["value"] != 0 if not diverging else True)
    mags = leaf.loc[seen, "value"].abs()
    if vmax is None or vmax <= 0:
        vmax = float(np.quantile(mags, clip_quantile)) if len(mags) else 1.0
        vmax = vmax if vmax > 0 else (float(mags.max()) if len(mags) and mags.max() > 0 else 1.0)
    clipped = bool(len(mags) and mags.max() > vmax)
    if diverging:
        norm: Normalize = TwoSlopeNorm(0.0, -vmax, vmax)
        cmap = colormaps[DIFF_CMAP]
    else:
        norm = Normalize(0.0, vmax)
        cmap = colormaps[DENSITY_CMAP]
    for row in lay[lay["kind"] == "folder"].itertuples():
        ax.add_patch(Circle((row.x, row.y), row.r, facecolor=FOLDER_FACE, edgecolor=FOLDER_EDGE,
                            linewidth=0.6 if row.depth > 1 else 0.9, zorder=1 + row.depth * 0.01))
    for row, ok in zip(leaf.itertuples(), seen, strict=True):
        face = cmap(norm(np.clip(row.value, -vmax, vmax))) if ok else UNVISITED_COLOR
        ax.add_patch(Circle((row.x, row.y), row.r, facecolor=face, edgecolor="white",
                            linewidth=0.3, zorder=3))
    halo = [pe.withStroke(linewidth=2.2, foreground="white")]
    _label_folders(ax, lay, label_depth, min_label_radius)
    strongest = leaf[seen].assign(m=lambda d: d["value"].abs()).nlargest(label_top, "m")
    for row in strongest.itertuples():
        ax.text(row.x, row.y, _short(row.name), ha="center", va="center", fontsize=7,
                path_effects=halo, zorder=7)
    _frame(ax, lay)
    sm = ScalarMappable(norm=norm, cmap=cmap)
    label = colorbar_label or ("Signed trace density (lines per run)" if diverging else
                               "Trace density (lines shown per run)")
    extend = ("both" if diverging else "max") if clipped else "neither"
    fig.colorbar(sm, ax=ax, shrink=0.6, label=label, extend=extend)
    if title:
        ax.set_title(title)
    _caption(ax, note, files)
    return fig


def _caption(ax: Axes, note: str | None, files: pd.DataFrame | None) -> None:
    """The map's source note under the axes (always when the files came from the reads)."""
    if note is None and files is not None and files.attrs.get("from_reads"):
        note = FROM_READS_NOTE
    if note:
        ax.text(0.5, -0.02, note, transform=ax.transAxes, ha="center", va="top", fontsize=7,
                color="#555555", wrap=True)


def plot_difference_map(
    files: pd.DataFrame,
    difference: pd.DataFrame,
    labels: tuple[str, str] = ("A", "B"),
    ax: Axes | None = None,
    **kwargs: Any,
) -> Figure:
    """A signed difference map (Fig. 10b-d, Fig. 13) from :func:`density_difference`: red where
    A reads more, blue where B reads more, centred at zero."""
    require_columns(difference, ["file", "diff"], "the difference table")
    kwargs.setdefault("colorbar_label", f"{labels[0]} minus {labels[1]} (lines per run)")
    kwargs.setdefault("title", f"{labels[0]} − {labels[1]}")
    return plot_repo_map(files, difference, ax=ax, value_column="diff", diverging=True, **kwargs)


OVERVIEW_VALUES: dict[str, tuple[str, str]] = {
    "cumulative": ("lines_shown", "Cumulative trace density (lines shown, all runs)"),
    "per_run": ("density", "Trace density (lines shown per run)"),
}


def plot_overview_map(
    files: pd.DataFrame,
    density: pd.DataFrame,
    values: str = "cumulative",
    ax: Axes | None = None,
    **kwargs: Any,
) -> Figure:
    """Fig. 10a for one world: the map coloured by the cumulative lines shown over all runs
    (``values="cumulative"``, the paper's overview) or by lines shown per run
    (``values="per_run"``). ``density`` is :func:`trace_density` output for the world."""
    if values not in OVERVIEW_VALUES:
        raise ValueError(f"values must be one of {list(OVERVIEW_VALUES)}, not {values!r}")
    column, label = OVERVIEW_VALUES[values]
    kwargs.setdefault("colorbar_label", label)
    return plot_repo_map(files, density, ax=ax, value_column=column, diverging=False, **kwargs)


# --------------------------------------------------------------------------- routes


def _file_turns(turns: pd.DataFrame, keep: Sequence[str] = ()) -> pd.DataFrame:
    """Successful tool calls that name a file, ordered by run id and turn."""
    require_columns(turns, ["run_id", "turn", "file"], "the turns table")
    wanted = ["run_id", "turn", "file", "error_type", *keep]
    t = turns[[c for c in dict.fromkeys(wanted) if c in turns.columns]]
    ok = t["file"].notna()
    if "error_type" in t.columns:
        ok &= t["error_type"].isna()
    t = t[ok]
    run_code = pd.factorize(t["run_id"], sort=True)[0]
    return t.iloc[np.lexsort((pd.to_numeric(t["turn"]).to_numpy(), run_code))]


def run_route(turns: pd.DataFrame, run_id: str) -> pd.DataFrame:
    """The files one run visited, in order (Fig. 11): consecutive calls on the same file form
    one step. Columns: step, file, first_turn, last_turn, calls, lines (lines shown, when the
    turns table has ``lines_viewed``)."""
    t = _file_turns(turns[turns["run_id"] == run_id], ["lines_viewed"])
    cols = ["step", "file", "first_turn", "last_turn", "calls", "lines"]
    if t.empty:
        if not (turns["run_id"] == run_id).any():
            raise ValueError(f"no run {run_id!r} in the turns table")
        return pd.DataFrame(columns=cols)
    step = (t["file"] != t["file"].shift()).cumsum().to_numpy()
    lines = t["lines_viewed"] if "lines_viewed" in t.columns else pd.Series(0, index=t.index)
    out = t.assign(step=step, lines=lines.fillna(0)).groupby("step").agg(
        file=("file", "first"), first_turn=("turn", "min"), last_turn=("turn", "max"),
        calls=("turn", "size"), lines=("lines", "sum"))
    return out.reset_index()[cols]


def plot_route(
    routes: pd.DataFrame | Mapping[str, pd.DataFrame],
    files: pd.DataFrame | None = None,
    ax: Axes | None = None,
    layout: pd.DataFrame | None = None,
    title: str | None = None,
) -> Figure:
    """One or more runs' routes drawn on the repository map (Fig. 11): numbered arrows from
    file to file, one colour per run; the files a route touches are outlined."""
    figures.use_style()
    named = dict(routes) if isinstance(routes, Mapping) else {"run": routes}
    for name, r in named.items():
        require_columns(r, ["step", "file"], f"route {name!r}")
    visited = sorted({f for r in named.values() for f in r["file"]})
    if files is None:
        files = pd.DataFrame({"file": visited, "loc": 1})
    lay = layout if layout is not None else repo_layout(
        files, pd.Series(1.0, index=visited, dtype=float))
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 5.6))
    else:
        fig = ax.figure
    ax.set_aspect("equal")
    ax.axis("off")
    for row in lay.itertuples():
        folder = row.kind == "folder"
        ax.add_patch(Circle((row.x, row.y), row.r, facecolor=FOLDER_FACE if folder else
                            "#EEEEEE", edgecolor=FOLDER_EDGE if folder else "white",
                            linewidth=0.5, zorder=1 if folder else 2))
    pos = lay.set_index("path")[["x", "y", "r"]]
    halo = [pe.withStroke(linewidth=2.2, foreground="white")]
    colors = figures.palette_for(list(named))
    for k, (name, r) in enumerate(named.items()):
        color = colors[name]
        # with several runs, each run's marks sit at its own angle inside the file circles
        angle = 2 * np.pi * k / len(named) + np.pi / 2
        reach = 0.45 if len(named) > 1 else 0.0
        pts = [(pos.at[f, "x"] + reach * pos.at[f, "r"] * np.cos(angle),
                pos.at[f, "y"] + reach * pos.at[f, "r"] * np.sin(angle))
               for f in r["file"] if f in pos.index]
        for f in set(r["file"]):
            if f in pos.index:
                x, y, rad = pos.loc[f]
                ring = rad * max(0.4, 1 - 0.07 * k)  # nested rings when runs share a file
                ax.add_patch(Circle((x, y), ring, facecolor="none", edgecolor=color,
                                    linewidth=1.2, zorder=4))
        for i in range(1, len(pts)):
            ax.add_patch(FancyArrowPatch(pts[i - 1], pts[i], arrowstyle="-|>", mutation_scale=8,
                                         color=color, linewidth=1.0, alpha=0.85, zorder=5,
                                         connectionstyle="arc3,rad=0.15"))
        steps: dict[tuple[float, float], list[str]] = {}
        for i, xy in enumerate(pts, 1):
            steps.setdefault(xy, []).append(str(i))
        for (x, y), nums in steps.items():
            ax.text(x, y, ",".join(nums), fontsize=7, ha="center", va="center", color=color,
                    fontweight="bold", path_effects=halo, zorder=6)
        ax.plot([], [], color=color, label=f"{name} ({len(pts)} steps)")
    _label_folders(ax, lay, 2, 0.12)
    for row in lay[(lay["kind"] == "file") & lay["path"].isin(visited)].itertuples():
        ax.text(row.x, row.y - row.r * 0.6, _short(row.name), ha="center", va="top",
                fontsize=6.5, path_effects=halo, zorder=6)
    _frame(ax, lay)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.02), frameon=False)
    if title:
        ax.set_title(title)
    _caption(ax, None, files)
    return fig


def choose_route_runs(
    runs: pd.DataFrame,
    run_ids: Sequence[str] = (),
    world: str | None = None,
    max_runs: int = 3,
) -> pd.DataFrame:
    """The runs whose routes to draw (Fig. 11): the given ``run_ids``, else one run for each
    of the first ``max_runs`` conditions (paper order) of the model and task with the most runs
    in ``world`` (default: every world), so the routes differ only by condition.

    Raises ValueError for run ids not in ``runs`` or a world without runs.
    """
    require_columns(runs, ["run_id", "model", "task", "condition", "world"], "the runs table")
    if run_ids:
        chosen = runs[runs["run_id"].isin(list(run_ids))]
        unknown = sorted(set(run_ids) - set(chosen["run_id"]))
        if unknown:
            raise ValueError(f"route runs not in the corpus: {unknown}")
        return chosen.reset_index(drop=True)
    pool = runs if world is None else runs[runs["world"] == world]
    if pool.empty:
        raise ValueError(f"no runs in world {world!r} to draw routes for")
    model, task = pool.groupby(["model", "task"]).size().idxmax()
    pool = pool[(pool["model"] == model) & (pool["task"] == task)].sort_values("run_id")
    conditions = figures.condition_order(pool["condition"].unique())[:max_runs]
    return pd.concat([pool[pool["condition"] == c].head(1) for c in conditions],
                     ignore_index=True)


def labelled_routes(turns: pd.DataFrame, chosen: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """:func:`run_route` for each chosen run, keyed by "<condition label> · <model>" (the run
    id when two runs would share a label)."""
    require_columns(chosen, ["run_id", "model", "condition"], "the chosen runs")
    routes: dict[str, pd.DataFrame] = {}
    for r in chosen.itertuples():
        label = f"{figures.label_for('condition', r.condition)} · {r.model}"
        routes[label if label not in routes else str(r.run_id)] = run_route(turns, r.run_id)
    return routes


# --------------------------------------------------------------------------- tables


def file_visits(
    turns: pd.DataFrame,
    runs: pd.DataFrame | None = None,
    by: str | Sequence[str] | None = None,
) -> pd.DataFrame:
    """Visits per file (and group): successful tool calls naming the file, any tool (an
    outline or a reference search counts although it shows no line), which is what lens 0
    counts as files visited.

    Columns: *by, file, visits, runs_visiting, n_runs (from ``runs`` when given, so runs that
    visited nothing count), visits_per_run.
    """
    keys = list(_as_tuple(by))
    t = uncertainty.with_run_columns(_file_turns(turns, keys), runs, keys, "the turns table")
    cols = [*keys, "file", "visits", "runs_visiting", "n_runs", "visits_per_run"]
    if t.empty:
        return pd.DataFrame(columns=cols)
    out = t.groupby([*keys, "file"], dropna=False).agg(
        visits=("run_id", "size"), runs_visiting=("run_id", "nunique")).reset_index()
    counts = _group_run_counts(t, runs, keys)
    out = out.merge(counts, on=keys, how="left") if keys else out.assign(
        n_runs=int(counts["n_runs"].iloc[0]))
    out["visits_per_run"] = out["visits"] / out["n_runs"]
    out = out.sort_values([*keys, "visits", "file"], ascending=[True] * len(keys) + [False, True])
    return out[cols].reset_index(drop=True)


ANCHOR_RANKINGS: tuple[str, ...] = ("visits", "lines")


def anchor_files(
    reads: pd.DataFrame,
    runs: pd.DataFrame | None = None,
    world: str = "world",
    across: str = "condition",
    top: int | None = 3,
    rank_by: str = "visits",
    turns: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Recurring anchor files per world ranked by average position across ``across`` (D13).

    ``rank_by="visits"`` (default, the paper's "most visited"; needs ``turns``) or
    ``"lines"`` (lines shown); see the module docstring. Columns: world, position, file,
    mean_rank, ranked_in (groups that visited the file), groups (groups of the world),
    visits (NaN without ``turns``), lines_shown.
    """
    if rank_by not in ANCHOR_RANKINGS:
        raise ValueError(f"rank_by must be one of {list(ANCHOR_RANKINGS)}, not {rank_by!r}")
    if rank_by == "visits" and turns is None:
        raise ValueError("ranking anchors by visits needs the turns table (turns=...); "
                         "rank_by='lines' ranks by lines shown instead")
    cols = [world, "position", "file", "mean_rank", "ranked_in", "groups", "visits",
            "lines_shown"]
    keys = [world, across]
    lines = trace_density(reads, runs, by=keys)[[*keys, "file", "lines_shown"]]
    if turns is not None:
        visits = file_visits(turns, runs, by=keys)[[*keys, "file", "visits"]]
        d = visits.merge(lines, on=[*keys, "file"], how="outer")
        d["visits"] = d["visits"].fillna(0)
    else:
        d = lines.assign(visits=np.nan)
    d["lines_shown"] = d["lines_shown"].fillna(0)
    if d.empty:
        return pd.DataFrame(columns=cols)
    measure = "visits" if rank_by == "visits" else "lines_shown"
    other = "lines_shown" if rank_by == "visits" else "visits"
    d = d[d[measure] > 0].copy()
    if d.empty:
        return pd.DataFrame(columns=cols)
    d["rank"] = d.groupby([world, across], dropna=False)[measure].rank(
        ascending=False, method="min")
    files = d[[world, "file"]].drop_duplicates()
    groups = d[[world, across]].drop_duplicates()
    grid = files.merge(groups, on=world)
    grid = grid.merge(d[[world, across, "file", "rank", "visits", "lines_shown"]],
                      on=[world, across, "file"], how="left")
    worst = d.groupby([world, across], dropna=False)["file"].size().rename("n_read") + 1
    grid = grid.merge(worst.reset_index(), on=[world, across])
    grid["ranked"] = grid["rank"].notna()
    grid["rank"] = grid["rank"].fillna(grid["n_read"])
    out = grid.groupby([world, "file"], dropna=False).agg(
        mean_rank=("rank", "mean"), ranked_in=("ranked", "sum"), groups=(across, "nunique"),
        visits=("visits", lambda v: v.sum(min_count=1)), lines_shown=("lines_shown", "sum"))
    out = out.reset_index().sort_values([world, "mean_rank", measure, other, "file"],
                                        ascending=[True, True, False, False, True])
    out["position"] = out.groupby(world).cumcount() + 1
    out["lines_shown"] = out["lines_shown"].astype(int)
    out["ranked_in"] = out["ranked_in"].astype(int)
    if turns is not None:
        out["visits"] = out["visits"].fillna(0).astype(int)
    if top is not None:
        out = out[out["position"] <= top]
    return out[cols].reset_index(drop=True)


def file_corridors(
    turns: pd.DataFrame,
    runs: pd.DataFrame | None = None,
    by: str | Sequence[str] | None = "world",
    top: int | None = 5,
) -> pd.DataFrame:
    """The most frequent file-to-file moves per group (D14), directed.

    Columns: *by, source, target, moves, trajectories, rank. Sorted by moves, then
    trajectories, then names.
    """
    keys = list(_as_tuple(by))
    t = uncertainty.with_run_columns(_file_turns(turns, keys), runs, keys, "the turns table")
    cols = [*keys, "source", "target", "moves", "trajectories", "rank"]
    run = pd.factorize(t["run_id"])[0]  # integer codes: comparing strings row by row is slow
    f = pd.factorize(t["file"])[0]
    move = (run[1:] == run[:-1]) & (f[1:] != f[:-1])
    if not move.any():
        return pd.DataFrame(columns=cols)
    idx = np.flatnonzero(move)
    files = t["file"].to_numpy()
    m = pd.DataFrame({"run_id": run[idx + 1], "source": files[idx], "target": files[idx + 1]})
    for k in keys:
        m[k] = t[k].to_numpy()[idx + 1]
    out = m.groupby([*keys, "source", "target"], dropna=False).agg(
        moves=("run_id", "size"), trajectories=("run_id", "nunique")).reset_index()
    out = out.sort_values([*keys, "moves", "trajectories", "source", "target"],
                          ascending=[True] * len(keys) + [False, False, True, True])
    out["rank"] = out.groupby(keys, dropna=False).cumcount() + 1 if keys else np.arange(
        1, len(out) + 1)
    if top is not None:
        out = out[out["rank"] <= top]
    return out[cols].reset_index(drop=True)
