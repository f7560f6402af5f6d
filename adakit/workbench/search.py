"""Search across turns (issue 28): the turns whose texts hold a pattern, and the runs whose
calls follow a sequence of canonical actions, in a corpus opened as the notebooks open it.

- :func:`search`: a text pattern (plain and case-insensitive, or a regular expression) over
  the thinking, the calls (tool and parameters), the observations and the conclusions of the
  turns the filters keep; one row per (run, turn, field) with a snippet around the first hit.
  Without a pattern it lists the kept turns (a filter-only query, read from the tables alone).
- :func:`sequence_search`: the runs' calls matched against a pattern of canonical actions
  (:mod:`adakit.workbench.call_pattern`); one row per match, (run, first turn, last turn).
- ``adakit search CORPUS [PATTERN] [--seq PATTERN]`` prints either as a table.

The filters are the run axes (model, world, task, condition) and, per turn, the tool (an
abbreviation such as PKR or a tool name), the file (a path, or the end of one after a ``/``)
and a turn range. A filter value the corpus does not have is refused with the values it has.
The texts are read from the run files (``runs.path``); a plain pattern first skips the files
and lines that cannot hold it, so a rare word is found without parsing every turn.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from adakit import store
from adakit.record import Corpus, CorpusFiles, RunFile, corpus_from_runs
from adakit.store import StoredCorpus
from adakit.text import clip
from adakit.workbench.call_pattern import KEYS, PatternError, parse_pattern, run_matches

#: The texts of a turn a pattern is looked for in, in the order hits are listed.
FIELDS: tuple[str, ...] = ("thinking", "call", "observation", "conclusion")
HIT_COLUMNS = ["run_id", "turn", "field", "snippet", "hits"]
SEQUENCE_COLUMNS = ["run_id", "first_turn", "last_turn", "calls", "bindings"]
RUN_AXES: tuple[str, ...] = ("model", "world", "task", "condition")
#: Characters of context kept on each side of a hit in its snippet.
CONTEXT = 40
_SHOWN = 8  # values named in a message about an unknown filter value

Source = Corpus | CorpusFiles | str | Path | Sequence[RunFile] | Sequence[str | Path]
TurnRange = tuple[int | None, int | None]


class SearchError(ValueError):
    """A query that cannot be run as given; the message is one line saying why."""


@dataclass(frozen=True)
class Filters:
    """What a query keeps: run axes (empty: any), tools, files and a turn range (inclusive,
    None on a side: open)."""

    model: tuple[str, ...] = ()
    world: tuple[str, ...] = ()
    task: tuple[str, ...] = ()
    condition: tuple[str, ...] = ()
    tool: tuple[str, ...] = ()
    file: tuple[str, ...] = ()
    turns: TurnRange | None = None

    @property
    def per_turn(self) -> bool:
        """Whether any filter applies to turns rather than to whole runs."""
        return bool(self.tool or self.file or self.turns)


def _values(value: str | Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


def make_filters(model: str | Iterable[str] = (), world: str | Iterable[str] = (),
                 task: str | Iterable[str] = (), condition: str | Iterable[str] = (),
                 tool: str | Iterable[str] = (), file: str | Iterable[str] = (),
                 turns: TurnRange | str | None = None) -> Filters:
    """:class:`Filters` from single values or lists; ``turns`` may be text as
    :func:`parse_turn_range` reads it."""
    span = parse_turn_range(turns) if isinstance(turns, str) else turns
    if span is not None:
        lo, hi = span
        if (lo is not None and lo < 0) or (lo is not None and hi is not None and hi < lo):
            raise SearchError(f"bad turn range {lo}-{hi}: give FIRST-LAST with 0 <= FIRST <= LAST")
    return Filters(_values(model), _values(world), _values(task), _values(condition),
                   _values(tool), _values(file), span)


def parse_turn_range(text: str) -> TurnRange:
    """``"3-10"``, ``"5-"`` (from 5 on), ``"-10"`` (up to 10) or ``"7"`` as (first, last)."""
    m = re.fullmatch(r"\s*(\d*)\s*(-?)\s*(\d*)\s*", text)
    if m is None or not (m.group(1) or m.group(3)):
        raise SearchError(f"bad turn range {text!r}: give FIRST-LAST, FIRST-, -LAST or one turn")
    lo = int(m.group(1)) if m.group(1) else None
    hi = int(m.group(3)) if m.group(3) else (lo if not m.group(2) else None)
    return lo, hi


# --------------------------------------------------------------------------- the corpus


def as_corpus(source: Source) -> tuple[Corpus, dict[str, RunFile]]:
    """The corpus of ``source`` (a :class:`Corpus`, run files already read, or corpus folders
    and files as :func:`adakit.record.open_corpus` takes them) and the run files on hand."""
    if isinstance(source, Corpus):
        return source, {}
    if isinstance(source, CorpusFiles):
        source = source.runs
    if isinstance(source, (list, tuple)) and source and all(isinstance(r, RunFile) for r in source):
        return corpus_from_runs(source), {r.header.run_id: r for r in source}
    if isinstance(source, (str, Path)) or isinstance(source, (list, tuple)):
        return store.open_corpus(source, verbose=False), {}
    raise SearchError(f"cannot search a {type(source).__name__}: give a Corpus, run files "
                      "or corpus folders")


def _unknown(what: str, value: str, on_hand: Iterable[Any]) -> SearchError:
    names = sorted({str(v) for v in on_hand if v is not None and not pd.isna(v)})
    more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    has = f"{', '.join(names[:_SHOWN])}{more}" if names else "none"
    return SearchError(f"unknown {what} {value!r}: the corpus has {has}")


def _file_mask(files: pd.Series, wanted: str) -> pd.Series:
    """Turns whose file is ``wanted`` or ends in ``/wanted``."""
    text = files.astype("string")
    return (text == wanted) | text.str.endswith("/" + wanted)


def filtered_runs(corpus: Corpus, filters: Filters) -> pd.DataFrame:
    """The runs kept by the run-axis filters (each value checked against the corpus)."""
    runs = corpus.runs
    mask = pd.Series(True, index=runs.index)
    for axis in RUN_AXES:
        wanted = getattr(filters, axis)
        for value in wanted:
            if not (runs[axis] == value).any():
                raise _unknown(axis, value, runs[axis])
        if wanted:
            mask &= runs[axis].isin(wanted)
    return runs[mask]


def filtered_turns(corpus: Corpus, filters: Filters, runs: pd.DataFrame | None = None
                   ) -> pd.DataFrame:
    """The turns of ``runs`` (default: the runs the filters keep) kept by the tool, file and
    turn-range filters (each tool and file checked against the corpus)."""
    runs = filtered_runs(corpus, filters) if runs is None else runs
    turns = corpus.turns[corpus.turns["run_id"].isin(runs["run_id"])]
    if filters.tool:
        named = set(corpus.turns["tool"].dropna()) | set(corpus.turns["tool_name"].dropna())
        for value in filters.tool:
            if value not in named:
                raise _unknown("tool", value, named)
        turns = turns[turns["tool"].isin(filters.tool) | turns["tool_name"].isin(filters.tool)]
    if filters.file:
        keep = pd.Series(False, index=turns.index)
        for value in filters.file:
            if not _file_mask(corpus.turns["file"], value).any():
                raise _unknown("file", value, corpus.turns["file"])
            keep |= _file_mask(turns["file"], value)
        turns = turns[keep]
    if filters.turns is not None:
        lo, hi = filters.turns
        if lo is not None:
            turns = turns[turns["turn"] >= lo]
        if hi is not None:
            turns = turns[turns["turn"] <= hi]
    return turns


# --------------------------------------------------------------------------- texts


def compile_text(pattern: str, regex: bool = False, case: bool = False) -> re.Pattern[str]:
    """The compiled text pattern: literal unless ``regex``, case-insensitive unless ``case``;
    a bad regular expression raises :class:`SearchError` saying where."""
    if not pattern:
        raise SearchError("empty text pattern: give a word to look for, or leave it out")
    flags = 0 if case else re.IGNORECASE
    try:
        return re.compile(pattern if regex else re.escape(pattern), flags)
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise SearchError(f"bad regular expression {pattern!r}{where}: {exc.msg}") from None


def _needle(pattern: str, regex: bool, fields: Sequence[str]) -> str | None:
    """The casefolded text every file and line holding a hit of ``pattern`` must contain,
    when that is certain (None: read everything). A hit inside a JSON string is found in the
    raw line only when the pattern has nothing JSON escapes; the call text joins names and
    values with ``(``, ``=``, ``,`` and ``)``, which the raw record does not hold."""
    if regex or not pattern.isascii() or json.dumps(pattern)[1:-1] != pattern:
        return None
    if "call" in fields and any(c in pattern for c in "()=,"):
        return None
    return pattern.casefold()


def _folded(text: str) -> str:
    """``text`` casefolded, with the dotless i that an ASCII ``i`` also matches made an i."""
    low = text.casefold()
    return low.replace("ı", "i") if "ı" in low else low


def call_text(call: Mapping[str, Any] | None) -> str:
    """A call as ``tool(name=value, ...)``; values other than text as compact JSON."""
    if not call:
        return ""
    params = call.get("params") or {}
    shown = ", ".join(
        f"{k}={v if isinstance(v, str) else json.dumps(v, separators=(',', ':'), ensure_ascii=False)}"
        for k, v in params.items())
    return f"{call.get('tool', '')}({shown})"


def _conclusion_text(record: Mapping[str, Any]) -> str:
    """The title and content a turn's successful stash_conclusion call stashed ("" if none)."""
    call = record.get("call")
    if not call or call.get("tool") != "stash_conclusion":
        return ""
    if (record.get("metrics") or {}).get("error_type") is not None:
        return ""
    params = call.get("params") or {}
    return "\n".join(str(params[k]) for k in ("title", "content") if params.get(k))


def field_text(record: Mapping[str, Any], field: str) -> str:
    """One searchable text of a turn record (a dict as in the run file): its ``thinking``,
    ``call`` (:func:`call_text`), ``observation`` or stashed ``conclusion``."""
    if field == "call":
        return call_text(record.get("call"))
    if field == "conclusion":
        return _conclusion_text(record)
    return record.get(field) or ""


def _records(path: str | Path, needle: str | None) -> Iterator[dict[str, Any]]:
    """The turn and end records of a run file that may hold ``needle`` (all when None);
    lines that are not JSON (a torn last line) are passed over."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise SearchError(f"cannot read the run file {path}: {exc.strerror}") from None
    lines: Iterable[tuple[bytes, bytes]]
    if needle is not None:
        # ASCII bytes fold as the text does; other text may fold to ASCII (K, ſ): fold it
        low = raw.lower() if raw.isascii() else \
            _folded(raw.decode("utf-8", errors="replace")).encode("utf-8")
        key = needle.encode("ascii")
        if key not in low:
            return
        lines = zip(raw.split(b"\n"), low.split(b"\n"), strict=False)
    else:
        lines = ((line, b"") for line in raw.split(b"\n"))
    for line, folded in lines:
        if not line.strip() or (needle is not None and key not in folded):
            continue
        try:
            rec = json.loads(line)
        except ValueError:  # not JSON, or not UTF-8
            continue
        if isinstance(rec, dict) and rec.get("kind") in ("turn", "end"):
            yield rec


def _run_records(run_id: str, path: str, run_files: Mapping[str, RunFile],
                 needle: str | None) -> Iterator[dict[str, Any]]:
    rf = run_files.get(run_id)
    if rf is None:
        yield from _records(path, needle)
        return
    for t in rf.turns:
        yield t.model_dump(mode="json")
    if rf.end is not None:
        yield rf.end.model_dump(mode="json")


def snippet(text: str, match: re.Match[str], context: int = CONTEXT) -> str:
    """One line around ``match``: ``context`` characters each side, "…" where cut."""
    a, b = match.span()
    left = "…" if a > context else ""
    right = "…" if b + context < len(text) else ""
    return left + " ".join(text[max(0, a - context):b + context].split()) + right


def _hits_of_run(run_id: str, records: Iterable[Mapping[str, Any]], rx: re.Pattern[str],
                 fields: Sequence[str], keep: set[int] | None, last: int | None, context: int
                 ) -> list[dict[str, Any]]:
    """The hit rows of one run: each turn's fields, and the end record's conclusion on the
    run's ``last`` turn when no stashed conclusion said it."""
    rows: list[dict[str, Any]] = []
    stashed: set[str] = set()
    for rec in records:
        if rec.get("kind") == "end":
            text = rec.get("conclusion") or ""
            if "conclusion" in fields and text and last is not None and text not in stashed \
                    and (keep is None or last in keep):
                rows.extend(_field_hits(run_id, last, "conclusion", text, rx, context))
            continue
        turn = int(rec["turn"])
        call = rec.get("call") or {}
        if call.get("tool") == "stash_conclusion":
            stashed.add(str((call.get("params") or {}).get("content", "")))
        if keep is not None and turn not in keep:
            continue
        for name in fields:
            rows.extend(_field_hits(run_id, turn, name, field_text(rec, name), rx, context))
    return rows


def _field_hits(run_id: str, turn: int, name: str, text: str, rx: re.Pattern[str],
                context: int) -> list[dict[str, Any]]:
    found = list(rx.finditer(text)) if text else []
    if not found:
        return []
    return [{"run_id": run_id, "turn": turn, "field": name,
             "snippet": snippet(text, found[0], context), "hits": len(found)}]


# --------------------------------------------------------------------------- queries


def _check_fields(fields: Iterable[str]) -> tuple[str, ...]:
    chosen = tuple(fields)
    for name in chosen:
        if name not in FIELDS:
            raise SearchError(f"unknown field {name!r}: the fields are {', '.join(FIELDS)}")
    if not chosen:
        raise SearchError(f"no field to search: choose among {', '.join(FIELDS)}")
    return chosen


def _table_call(row: Mapping[str, Any]) -> str:
    """A turn's call as the turns table has it (for filter-only queries)."""
    tool, error = row["tool"], row["parse_error"]
    if isinstance(tool, str) and tool:
        parts = [tool]
    else:
        parts = [f"parse error {error}" if isinstance(error, str) and error else "no call"]
    for key in ("tool_name", "action", "file", "symbol"):
        value = row[key]
        if isinstance(value, str) and value and value != parts[0]:
            parts.append(value)
    if pd.notna(row["start_line"]):
        parts.append(f"{int(row['start_line'])}-{int(row['end_line'])}")
    return " ".join(parts)


def search(source: Source, pattern: str | None = None, *, regex: bool = False,
           case: bool = False, fields: Iterable[str] = FIELDS, context: int = CONTEXT,
           filters: Filters | None = None, **given: Any) -> pd.DataFrame:
    """The turns that hold ``pattern`` in the chosen ``fields``: a table of
    :data:`HIT_COLUMNS`, one row per (run, turn, field) with a snippet around the first hit
    and the number of hits, in corpus and turn order.

    The filters come as ``filters`` or as keywords of :func:`make_filters` (``model``,
    ``world``, ``task``, ``condition``, ``tool``, ``file``, ``turns``). Without a pattern,
    every kept turn is listed with its call (field ``call``), read from the tables alone.
    Raises :class:`SearchError` for an unknown filter value or field, or a bad pattern.
    """
    filt = filters if filters is not None else make_filters(**given)
    chosen = _check_fields(fields)
    rx = compile_text(pattern, regex, case) if pattern is not None else None
    corpus, run_files = as_corpus(source)
    if isinstance(corpus, StoredCorpus):
        return _store_search(corpus, filt, rx, _needle(pattern or "", regex, chosen), chosen,
                             context)
    runs = filtered_runs(corpus, filt)
    turns = filtered_turns(corpus, filt, runs) if filt.per_turn or rx is None else None
    if rx is None:
        assert turns is not None
        rows = [{"run_id": r["run_id"], "turn": int(r["turn"]), "field": "call",
                 "snippet": _table_call(r), "hits": 1} for r in turns.to_dict("records")]
        return pd.DataFrame(rows, columns=HIT_COLUMNS)
    keep: dict[str, set[int]] | None = None
    if turns is not None:
        keep = {rid: set(g) for rid, g in turns.groupby("run_id")["turn"]}
    needle = _needle(pattern or "", regex, chosen)
    last_turns = corpus.turns.groupby("run_id")["turn"].max().to_dict()
    rows = []
    for run_id, path in zip(runs["run_id"], runs["path"], strict=True):
        if keep is not None and run_id not in keep:
            continue
        records = _run_records(run_id, path, run_files, needle)
        rows.extend(_hits_of_run(run_id, records, rx, chosen,
                                 None if keep is None else keep[run_id],
                                 last_turns.get(run_id), context))
    return pd.DataFrame(rows, columns=HIT_COLUMNS)


def sequence_search(source: Source, pattern: str, *, filters: Filters | None = None,
                    **given: Any) -> pd.DataFrame:
    """The runs' call sequences that match ``pattern`` (:mod:`adakit.workbench.call_pattern`):
    a table of :data:`SEQUENCE_COLUMNS`, one row per match with its first and last turn, the
    number of calls it spans and its variable bindings (``X=app.py``).

    The run-axis filters choose the runs; a turn range keeps only the calls inside it. Tool
    and file filters are refused: a sequence pattern names its tools and files itself.
    """
    filt = filters if filters is not None else make_filters(**given)
    if filt.tool or filt.file:
        raise SearchError("a sequence query takes no --tool or --file filter: name them in "
                          "the pattern, e.g. 'PKR(file=\"app.py\") * CON'")
    try:
        steps = parse_pattern(pattern)
    except PatternError as exc:
        raise SearchError(str(exc)) from None
    corpus, _ = as_corpus(source)
    keys = {KEYS[c.key] for step in steps for c in step.conditions}
    columns = ["run_id", "turn", "tool", *sorted(keys)]
    if isinstance(corpus, StoredCorpus):
        with _StoreQuery(corpus, filt) as q:
            runs = q.runs(["run_id"])
            turns = q.turns(list(dict.fromkeys(columns)))
    else:
        runs = filtered_runs(corpus, filt)
        turns = filtered_turns(corpus, filt, runs)
    calls = turns[turns["tool"].notna()].sort_values(["run_id", "turn"], kind="stable")
    by_run: dict[str, list[dict[str, Any]]] = {}
    for values in zip(*(calls[col].tolist() for col in columns), strict=True):
        by_run.setdefault(values[0], []).append(dict(zip(columns, values, strict=True)))
    rows = []
    for run_id in runs["run_id"]:
        run_calls = by_run.get(run_id, [])
        for first, last, env in run_matches(steps, run_calls):
            span = sum(1 for c in run_calls if first <= c["turn"] <= last)
            rows.append({"run_id": run_id, "first_turn": first, "last_turn": last,
                         "calls": span,
                         "bindings": ", ".join(f"{k}={v}" for k, v in sorted(env.items()))})
    return pd.DataFrame(rows, columns=SEQUENCE_COLUMNS)


# --------------------------------------------------------------------------- on a store

_CALL_COLUMNS = ["run_id", "turn", "tool", "parse_error", "tool_name", "action", "file",
                 "symbol", "start_line", "end_line"]


class _StoreQuery:
    """The filters of a query as SQL over a corpus store (DuckDB), each value checked
    against the corpus as :func:`filtered_runs` and :func:`filtered_turns` check it."""

    def __init__(self, corpus: StoredCorpus, filters: Filters) -> None:
        self.store, self.filters = corpus.store, filters
        self.con = self.store.connect()
        base, self.base_params = _run_filter(list(corpus.filters))
        self.base = f"t._fid IN ({base})" if base else "TRUE"
        for axis in RUN_AXES:
            for value in getattr(filters, axis):
                if not self._exists(f"SELECT 1 FROM runs t WHERE {self.base} AND t.{axis} = ?",
                                    [value]):
                    raise _unknown(axis, value, self._distinct("runs", axis))
        axes = [(axis, list(getattr(filters, axis))) for axis in RUN_AXES
                if getattr(filters, axis)]
        self.kept, self.runs_params = _run_filter(list(corpus.filters) + axes)
        self.runs_sql = self.runs_on("t")
        self.turn_sql, self.turn_params = self._turn_conditions()

    def runs_on(self, alias: str) -> str:
        """SQL keeping the rows (of the table aliased ``alias``) of the kept runs."""
        return f"{alias}._fid IN ({self.kept})" if self.kept else "TRUE"

    def __enter__(self) -> _StoreQuery:
        return self

    def __exit__(self, *exc: object) -> None:
        self.con.close()

    def _exists(self, sql: str, params: list[Any]) -> bool:
        return self.con.sql(f"SELECT EXISTS ({sql})", params=[*self.base_params, *params]
                            ).fetchall()[0][0]

    def _distinct(self, table: str, column: str, also: str | None = None) -> list[Any]:
        cols = [column] if also is None else [column, also]
        found: set[Any] = set()
        for col in cols:
            rows = self.con.sql(f"SELECT DISTINCT t.{col} FROM {table} t WHERE {self.base}",
                                params=self.base_params).fetchall()
            found |= {r[0] for r in rows}
        return sorted(v for v in found if v is not None)

    def _turn_conditions(self) -> tuple[str, list[Any]]:
        """SQL over turns ``t`` for the tool, file and turn filters, and its parameters."""
        conds, params = [], []
        f = self.filters
        if f.tool:
            for value in f.tool:
                if not self._exists("SELECT 1 FROM turns t WHERE " + self.base
                                    + " AND (t.tool = ? OR t.tool_name = ?)", [value, value]):
                    raise _unknown("tool", value, self._distinct("turns", "tool", "tool_name"))
            marks = ", ".join("?" for _ in f.tool)
            conds.append(f"(t.tool IN ({marks}) OR t.tool_name IN ({marks}))")
            params += [*f.tool, *f.tool]
        if f.file:
            one = "(t.file = ? OR ends_with(t.file, '/' || ?))"
            for value in f.file:
                if not self._exists(f"SELECT 1 FROM turns t WHERE {self.base} AND {one}",
                                    [value, value]):
                    raise _unknown("file", value, self._distinct("turns", "file"))
            conds.append("(" + " OR ".join(one for _ in f.file) + ")")
            params += [v for value in f.file for v in (value, value)]
        if f.turns is not None:
            lo, hi = f.turns
            if lo is not None:
                conds.append("t.turn >= ?")
                params.append(lo)
            if hi is not None:
                conds.append("t.turn <= ?")
                params.append(hi)
        return " AND ".join(conds) or "TRUE", params

    def sql(self, query: str, params: list[Any]) -> pd.DataFrame:
        return self.con.sql(query, params=params).df()

    def runs(self, columns: list[str]) -> pd.DataFrame:
        """The kept runs' ``columns``, in corpus order."""
        cols = ", ".join(f"t.{c}" for c in columns)
        return self.sql(f"SELECT {cols} FROM runs t JOIN files f ON t._fid = f.fid "
                        f"WHERE {self.runs_sql} ORDER BY f.rank", self.runs_params)

    def turns(self, columns: list[str]) -> pd.DataFrame:
        """The kept turns' ``columns``, in corpus and file order."""
        cols = ", ".join(f"t.{c}" for c in columns)
        return self.sql(f"SELECT {cols} FROM turns t JOIN files f ON t._fid = f.fid "
                        f"WHERE {self.runs_sql} AND {self.turn_sql} ORDER BY f.rank, t._row",
                        [*self.runs_params, *self.turn_params])


def _run_filter(where: list[tuple[str, Any]]) -> tuple[str, list[Any]]:
    """A subquery of the file ids of the runs passing ``where`` ("" when it keeps all)."""
    sql, params = store._where_sql(where)
    return (sql.removeprefix("WHERE t._fid IN (").removesuffix(")"), params) if sql else ("", [])


def _maybe(column: str, needle: str | None) -> str:
    """SQL true for a text that may hold ``needle`` (always, without one): it holds it
    without regard to case (RE2's case folding, a literal pattern), or it has characters
    outside ASCII (Python's folding of those differs from RE2's: Python judges them)."""
    if needle is None:
        return f"{column} IS NOT NULL"
    quoted = re.escape(needle).replace("'", "''")
    return (f"({column} IS NOT NULL AND (regexp_matches({column}, '{quoted}', 'i') "
            f"OR strlen({column}) != length({column})))")


def _store_search(corpus: StoredCorpus, filt: Filters, rx: re.Pattern[str] | None,
                  needle: str | None, fields: Sequence[str], context: int) -> pd.DataFrame:
    """:func:`search` served from the store: DuckDB keeps the turns the filters keep and
    whose texts may hold the pattern, and Python's ``re`` finds the hits in those alone."""
    with _StoreQuery(corpus, filt) as q:
        if rx is None:
            turns = q.turns(_CALL_COLUMNS)
            rows = [{"run_id": r["run_id"], "turn": int(r["turn"]), "field": "call",
                     "snippet": _table_call(r), "hits": 1}
                    for r in turns.to_dict("records")]
            return pd.DataFrame(rows, columns=HIT_COLUMNS)
        hits = _store_turn_hits(q, rx, needle, fields, context)
        if "conclusion" in fields:
            hits += _store_end_hits(q, rx, needle, context)
    if not hits:
        return pd.DataFrame(columns=HIT_COLUMNS)
    table = pd.DataFrame(hits).sort_values(["_rank", "_row", "_field"], kind="stable")
    return table[HIT_COLUMNS].reset_index(drop=True)


def _store_turn_hits(q: _StoreQuery, rx: re.Pattern[str], needle: str | None,
                     fields: Sequence[str], context: int) -> list[dict[str, Any]]:
    wanted = {"thinking": "x.thinking", "observation": "x.observation", "call": "x.call",
              "conclusion": "x.call"}
    maybe = " OR ".join(dict.fromkeys(_maybe(wanted[f], needle) for f in fields))
    join_turns = q.turn_sql != "TRUE" or "conclusion" in fields  # only when needed
    source = "texts x"
    if join_turns:
        source += " JOIN turns t ON t._fid = x._fid AND t._row = x._row"
    error = "t.error_type" if join_turns else "NULL AS error_type"
    query = (f"SELECT x.run_id, x.turn, x._row, x.thinking, x.observation, x.call, {error}, "
             f"f.rank AS _rank FROM {source} JOIN files f ON x._fid = f.fid "
             f"WHERE {q.runs_on('x')} AND {q.turn_sql} AND ({maybe})")
    rows = []
    found = q.con.sql(query, params=[*q.runs_params, *q.turn_params]).to_arrow_table()
    for r in found.to_pylist():  # missing texts as None, not NaN
        call = json.loads(r["call"]) if r["call"] is not None else None
        record = {"thinking": r["thinking"], "observation": r["observation"], "call": call,
                  "metrics": {"error_type": r["error_type"]}}
        for k, name in enumerate(fields):
            for hit in _field_hits(r["run_id"], int(r["turn"]), name,
                                   field_text(record, name), rx, context):
                rows.append({**hit, "_rank": r["_rank"], "_row": r["_row"], "_field": k})
    return rows


def _store_end_hits(q: _StoreQuery, rx: re.Pattern[str], needle: str | None,
                    context: int) -> list[dict[str, Any]]:
    """Hits in the end records' conclusions, on each run's last turn, unless a stash said
    the same or the last turn is not kept."""
    runs = q.sql(f"SELECT t._fid, t.run_id, t.conclusion, f.rank AS _rank FROM runs t "
                 f"JOIN files f ON t._fid = f.fid WHERE {q.runs_sql} "
                 f"AND {_maybe('t.conclusion', needle)} AND t.conclusion != ''", q.runs_params)
    runs = runs[[bool(rx.search(c)) for c in runs["conclusion"]]]
    if runs.empty:
        return []
    q.con.register("_ends", runs[["_fid"]])
    last = q.sql("SELECT t._fid, max(t.turn) AS last FROM turns t JOIN _ends e "
                 "ON t._fid = e._fid GROUP BY t._fid", [])
    kept = q.sql(f"SELECT t._fid, t.turn FROM turns t JOIN _ends e ON t._fid = e._fid "
                 f"WHERE {q.turn_sql}", q.turn_params)
    stashes = q.sql("SELECT x._fid, x.call FROM texts x JOIN _ends e ON x._fid = e._fid "
                    "WHERE contains(x.call, '\"stash_conclusion\"')", [])
    stashed: dict[int, set[str]] = {}
    for fid, call in zip(stashes["_fid"], stashes["call"], strict=True):
        c = json.loads(call)
        if c.get("tool") == "stash_conclusion":
            stashed.setdefault(int(fid), set()).add(str((c.get("params") or {}).get("content", "")))
    last_of = dict(zip(last["_fid"].astype(int), last["last"].astype(int), strict=True))
    kept_pairs = set(zip(kept["_fid"].astype(int), kept["turn"].astype(int), strict=True))
    rows = []
    for r in runs.to_dict("records"):
        fid, text = int(r["_fid"]), r["conclusion"]
        turn = last_of.get(fid)
        if turn is None or text in stashed.get(fid, set()) or (fid, turn) not in kept_pairs:
            continue
        for hit in _field_hits(r["run_id"], turn, "conclusion", text, rx, context):
            rows.append({**hit, "_rank": r["_rank"], "_row": sys.maxsize, "_field": 0})
    return rows


# --------------------------------------------------------------------------- command line


def format_table(table: pd.DataFrame, limit: int = 20, width: int = 100) -> str:
    """The first ``limit`` rows as aligned text (the last column cut to fit ``width``), and
    a line saying how many were left out."""
    if table.empty:
        return "no hits"
    shown = table.head(limit) if limit > 0 else table
    cols = list(shown.columns)
    cells = [[str(v) for v in row] for row in shown.itertuples(index=False)]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols[:-1])]
    room = max(20, width - sum(w + 2 for w in widths))
    lines = ["  ".join([c.ljust(w) for c, w in zip(cols[:-1], widths, strict=True)]
                       + [cols[-1]])]
    for r in cells:
        lines.append("  ".join([v.ljust(w) for v, w in zip(r[:-1], widths, strict=True)]
                               + [clip(r[-1], room, space="squash")]))
    if len(table) > len(shown):
        lines.append(f"... {len(table) - len(shown)} more (of {len(table)}); --limit 0 shows all")
    return "\n".join(lines)


def _cmd_search(args: Any) -> int:
    # a path typed at the shell means one under the current folder; else the project root's
    corpus = str(Path(args.corpus).resolve()) if Path(args.corpus).exists() else args.corpus
    try:
        filt = make_filters(args.model, args.world, args.task, args.condition, args.tool,
                            args.file, args.turns)
        if args.seq is not None:
            if args.pattern is not None:
                raise SearchError("give a text pattern or --seq, not both")
            table = sequence_search(corpus, args.seq, filters=filt)
        else:
            table = search(corpus, args.pattern, regex=args.regex, case=args.case,
                           fields=args.field or FIELDS, filters=filt)
    except (SearchError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # a corpus that cannot be opened (open_corpus says why)
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    print(format_table(table, args.limit))
    return 0


def register_cli(sub: Any) -> None:
    """``adakit search CORPUS [PATTERN] [--seq PATTERN]``: search the turns of a corpus."""
    p = sub.add_parser("search", help="find turns by text, or runs by a sequence of calls",
                       description="Text search over thinking, calls, observations and "
                       "conclusions, or a sequence query over the calls (docs/search.md).")
    p.add_argument("corpus", help="a corpus folder (or one run file)")
    p.add_argument("pattern", nargs="?", help="text to look for (plain, case-insensitive); "
                   "leave it out to list the turns the filters keep")
    p.add_argument("--regex", action="store_true", help="the pattern is a regular expression")
    p.add_argument("--case", action="store_true", help="match upper and lower case exactly")
    p.add_argument("--field", action="append", choices=FIELDS,
                   help="search only this text (repeatable; default: all)")
    p.add_argument("--seq", metavar="PATTERN", help="a sequence query, e.g. "
                   "'PKR(file=X) * PKR(file=X) CON'")
    for axis in (*RUN_AXES, "tool", "file"):
        p.add_argument(f"--{axis}", action="append", default=[], metavar=axis.upper(),
                       help=f"keep only this {axis} (repeatable)")
    p.add_argument("--turns", metavar="FIRST-LAST", help="keep only turns in this range")
    p.add_argument("--limit", type=int, default=20, help="rows to print (0: all; default 20)")
    p.set_defaults(func=_cmd_search)
