"""The corpus store: a corpus's tidy tables as a parquet dataset beside its run files, read
through DuckDB, and kept up to date incrementally (docs/store.md).

A store lives in ``<corpus>/.adakit-store/``. Each run file belongs to one of ``buckets``
hash buckets of its path relative to the corpus (``bucket_of``), and every row a run file
gives (its run, its turns, its line ranges read, its texts) is written into that bucket's
partition of the four tables ``runs``, ``turns``, ``reads`` and ``texts`` (the thinking, raw
reply, call and observation of each turn, kept apart from the numbers the lenses use). So
one run's rows never straddle a partition: a per-run computation is a map over partitions.

``state.json`` is the store's commit point: it names the manifest (one row per run file:
path, size, mtime, sha256, its file id and segment) and the live segments. An update stats
the run files, hashes only those whose size or mtime changed, parses only new and changed
files, and rewrites only the segments that held a changed or removed file; then the new
state is renamed into place, so a reader sees the old store or the new one. One writer at a
time: an update with something to write holds the store's lock file (``<store>.lock``,
:mod:`adakit.locks`), and a second one waits for it or says who holds it.

Reading goes through DuckDB over the live segment files: :meth:`Store.table` returns a
pandas table of the columns asked, in the order ``load_corpus`` gives (run files in path
order, rows in file order), optionally restricted by run-level filters;
:class:`StoredCorpus` is a :class:`~adakit.record.Corpus` whose tables are read on first use.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from adakit import locks, record
from adakit.record import (
    LOADER_VERSION,
    READ_COLUMNS,
    RUN_COLUMNS,
    SCHEMA_VERSION,
    TURN_COLUMNS,
    Corpus,
    HeaderlessRunFile,
    _run_rows,
    call_json,
    iter_run_files,
    load_corpus,
    read_run_rows,
)

#: Bumped whenever the store's layout changes; a store of another version is rebuilt.
STORE_VERSION = 1
STORE_DIR = ".adakit-store"
DEFAULT_BUCKETS = 16
#: At most this many run files per segment written by one update.
SEGMENT_FILES = 2000
#: Run files per in-memory piece when a lens maps over a store (:meth:`Store.chunks`).
CHUNK_RUNS = 20000
TABLES = ("runs", "turns", "reads", "texts")
TEXT_COLUMNS = ["run_id", "turn", "thinking", "raw_text", "call", "observation"]

_S, _I, _F, _B = pa.string(), pa.int64(), pa.float64(), pa.bool_()
_TYPES: dict[str, dict[str, pa.DataType]] = {
    "runs": {
        **dict.fromkeys(["run_id", "study", "model", "model_kind", "world", "task", "target",
                         "condition", "reason", "conclusion", "path", "agent", "world_source"], _S),
        **dict.fromkeys(["repeat", "seed", "turn_bound", "n_turns", "tokens_in", "tokens_out",
                         "cache_hits", "errors", "conclusion_chars"], _I),
        **dict.fromkeys(["started_at", "elapsed_s", "wall_s", "active_s", "coach_s",
                         "cost_usd"], _F),
        **dict.fromkeys(["finished", "closed"], _B),
    },
    "turns": {
        **dict.fromkeys(["run_id", "model", "world", "task", "condition", "tool", "tool_name",
                         "action", "file", "block", "symbol", "error_type", "parse_error",
                         "confidence", "coach_decision", "sidechain", "sidechain_agent"], _S),
        **dict.fromkeys(["turn", "start_line", "end_line", "lines_viewed", "result_count",
                         "thinking_chars", "output_chars", "tokens_in", "tokens_out",
                         "n_injected", "dropped_messages", "tokens_reused", "sidechain_parent",
                         "sidechain_depth"], _I),
        **dict.fromkeys(["started_at", "ended_at", "t_rel_start", "t_rel_end", "duration_s",
                         "coach_s", "active_s", "active_rel_start", "active_rel_end",
                         "latency_s"], _F),
        **dict.fromkeys(["structural", "finalize", "cached", "compaction"], _B),
    },
    "reads": {
        **dict.fromkeys(["run_id", "model", "world", "task", "condition", "tool", "file"], _S),
        **dict.fromkeys(["turn", "start_line", "end_line", "n_lines"], _I),
    },
    "texts": {"run_id": _S, "turn": _I, "thinking": _S, "raw_text": _S, "call": _S,
              "observation": _S},
}
#: The columns of each table, in the order the in-memory corpus has them.
COLUMNS: dict[str, list[str]] = {"runs": RUN_COLUMNS, "turns": TURN_COLUMNS,
                                 "reads": READ_COLUMNS, "texts": TEXT_COLUMNS}
#: Every stored row also carries its run file's id and its place in that file's rows.
_HIDDEN = [("_fid", pa.int64()), ("_row", pa.int64())]
SCHEMAS: dict[str, pa.Schema] = {
    name: pa.schema([(c, _TYPES[name][c]) for c in cols] + _HIDDEN) for name, cols in COLUMNS.items()
}
_MANIFEST = pa.schema([("fid", pa.int64()), ("path", pa.string()), ("size", pa.int64()),
                       ("mtime_ns", pa.int64()), ("sha256", pa.string()),
                       ("run_id", pa.string()), ("bucket", pa.int64()),
                       ("segment", pa.string())])


def bucket_of(rel_path: str, buckets: int) -> int:
    """The hash bucket of a run file, from its path relative to the corpus folder."""
    return zlib.crc32(rel_path.encode()) % buckets


def file_digest(path: Path, raw: bytes | None = None) -> str:
    """sha256 of a file's bytes (``raw``: those bytes, when already read)."""
    return hashlib.sha256(path.read_bytes() if raw is None else raw).hexdigest()


class StoreLocked(locks.Locked):
    """Another process is updating the corpus store."""


@dataclass
class UpdateReport:
    """What one update did: run files parsed (new + changed), added, changed, removed, left
    as they were, and touched (size or mtime changed, same digest: not parsed)."""

    parsed: int = 0
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    touched: int = 0
    rewritten_segments: int = 0

    def __str__(self) -> str:
        return (f"{self.parsed} run files parsed ({self.added} new, {self.changed} changed), "
                f"{self.removed} removed, {self.unchanged} unchanged ({self.touched} touched)")


# --------------------------------------------------------------------------- writing


def _text_rows(rf: Any) -> list[tuple[Any, ...]]:
    """A run file's rows of the texts table, as tuples in :data:`TEXT_COLUMNS` order."""
    run_id = rf.header.run_id
    return [(run_id, t.turn, t.thinking, t.raw_text,
             call_json(t.call) if t.call else None, t.observation) for t in rf.turns]


class _Rows:
    """One table's rows of a segment, kept as tuples in the table's column order, with each
    row's run file id and place in that file's rows; made into an arrow table column by
    column (much cheaper than from a list of dicts)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.rows: list[tuple[Any, ...]] = []
        self.fids: list[int] = []
        self.places: list[int] = []

    def add(self, rows: Sequence[tuple[Any, ...]], fid: int) -> None:
        """Add one run file's rows, given as tuples in the table's column order."""
        self.rows += rows
        self.fids += [fid] * len(rows)
        self.places += range(len(rows))

    def table(self) -> pa.Table:
        """The rows as an arrow table of the table's schema (hidden columns last)."""
        schema, width = SCHEMAS[self.name], len(COLUMNS[self.name])
        columns = list(zip(*self.rows, strict=True)) if self.rows else [()] * width
        arrays = [pa.array(col, type=field.type)
                  for col, field in zip(columns, list(schema)[:width], strict=True)]
        arrays += [pa.array(self.fids, pa.int64()), pa.array(self.places, pa.int64())]
        return pa.Table.from_arrays(arrays, schema=schema)


def _parse_segment(folder: str, root: str, segment: str, bucket: int,
                   files: list[tuple[int, str, int, int]]) -> list[dict[str, Any]]:
    """Parse run files (fid, relative path, size, mtime_ns) into one segment of each table;
    returns their manifest rows. A header-less file gets a manifest row and no table rows."""
    rows = {name: _Rows(name) for name in TABLES}
    manifest = []
    for fid, rel, size, mtime_ns in files:
        path = Path(folder) / rel
        raw = path.read_bytes()
        digest = file_digest(path, raw)
        run_id = None
        try:
            rf = read_run_rows(path, raw)
        except HeaderlessRunFile:
            rf = None
        if rf is not None:
            run_id = rf.header.run_id
            run_row, turn_rows, read_rows = _run_rows(rf)
            rows["runs"].add([run_row], fid)
            rows["turns"].add(turn_rows, fid)
            rows["reads"].add(read_rows, fid)
            rows["texts"].add(_text_rows(rf), fid)
        manifest.append({"fid": fid, "path": rel, "size": size, "mtime_ns": mtime_ns,
                         "sha256": digest, "run_id": run_id, "bucket": bucket,
                         "segment": segment})
    for name in TABLES:
        _write_table(rows[name].table(), Path(root) / _segment_file(name, segment))
    return manifest


def _segment_file(table: str, segment: str) -> str:
    bucket = segment.split("-")[0]
    return f"{table}/bucket={bucket[1:]}/{segment}.parquet"


def _write_table(table: pa.Table, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, target)


# --------------------------------------------------------------------------- the store


class Store:
    """The parquet store of one corpus folder, read through DuckDB (see the module doc)."""

    def __init__(self, folder: str | Path, root: str | Path | None = None,
                 buckets: int = DEFAULT_BUCKETS) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise FileNotFoundError(f"no corpus folder at {self.folder}")
        if buckets < 1:
            raise ValueError(f"buckets must be at least 1, not {buckets}")
        self.root = Path(root) if root is not None else self.folder / STORE_DIR
        self.buckets = buckets
        self.state = self._read_state()
        self._manifest: pd.DataFrame | None = None
        self._last_report = UpdateReport()

    @classmethod
    def open(cls, folder: str | Path, root: str | Path | None = None, update: bool = True,
             workers: int = 1, buckets: int = DEFAULT_BUCKETS,
             wait: float | None = None) -> Store:
        """The store of ``folder``, brought up to date with its run files unless ``update``
        is False (``wait``: as :meth:`update` takes it)."""
        store = cls(folder, root, buckets)
        if update:
            store.update(workers=workers, wait=wait)
        return store

    # ---- state
    def _fresh_state(self) -> dict[str, Any]:
        return {"store_version": STORE_VERSION, "schema_version": SCHEMA_VERSION,
                "loader_version": LOADER_VERSION, "buckets": self.buckets, "generation": 0,
                "next_fid": 0, "manifest": None, "segments": []}

    def _read_state(self) -> dict[str, Any]:
        try:
            state = json.loads((self.root / "state.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return self._fresh_state()
        fresh = self._fresh_state()
        if any(state.get(k) != fresh[k] for k in ("store_version", "schema_version",
                                                   "loader_version", "buckets")):
            return fresh  # written by another loader or layout: rebuilt from the run files
        return state

    @property
    def manifest(self) -> pd.DataFrame:
        """One row per run file in the store: fid, path (relative), size, mtime_ns, sha256,
        run_id (None for a header-less file), bucket, segment."""
        if self._manifest is None:
            name = self.state["manifest"]
            self._manifest = (pq.read_table(self.root / name).to_pandas() if name
                              else _MANIFEST.empty_table().to_pandas())
        return self._manifest

    @property
    def skipped(self) -> tuple[str, ...]:
        """The header-less run files (full paths), as ``Corpus.skipped`` names them."""
        m = self.manifest
        return tuple(str(self.folder / p) for p in sorted(m.loc[m["run_id"].isna(), "path"]))

    def _commit(self, manifest: pd.DataFrame, segments: list[str], next_fid: int) -> None:
        gen = self.state["generation"] + 1
        name = f"manifest-{gen:06d}.parquet"
        paths = manifest["path"].tolist()
        order = sorted(range(len(paths)), key=lambda i: paths[i].split("/"))
        manifest = manifest.iloc[order].reset_index(drop=True)  # iter_run_files' order
        _write_table(pa.Table.from_pandas(manifest, schema=_MANIFEST, preserve_index=False),
                     self.root / name)
        state = {**self.state, "generation": gen, "next_fid": next_fid, "manifest": name,
                 "segments": sorted(segments)}
        tmp = self.root / ".state.json.tmp"
        tmp.write_text(json.dumps(state, indent=1), encoding="utf-8")
        os.replace(tmp, self.root / "state.json")
        self.state, self._manifest = state, manifest
        self._sweep()

    def _sweep(self) -> None:
        """Remove files no longer named by the state (old segments, manifests, scratch)."""
        live = {_segment_file(t, s) for t in TABLES for s in self.state["segments"]}
        live |= {self.state["manifest"], "state.json"}
        for path in self.root.rglob("*"):
            if path.is_file() and path.relative_to(self.root).as_posix() not in live:
                path.unlink(missing_ok=True)

    @classmethod
    def from_tables(cls, folder: str | Path, pieces: Iterable[Corpus],
                    texts: Callable[[Corpus], pd.DataFrame] | None = None,
                    buckets: int = DEFAULT_BUCKETS) -> Store:
        """A store written straight from in-memory tables, with no run files behind it: a
        synthetic corpus at a scale its JSONL could not reach (``adakit.synthetic``), read
        like any store. Each piece (whole runs) becomes one segment of each table; ``texts``
        gives a piece's texts table (:data:`TEXT_COLUMNS`; none without it). A run's
        manifest path is its ``path``; :meth:`update` refuses such a store."""
        Path(folder).mkdir(parents=True, exist_ok=True)
        store = cls(folder, None, buckets)
        busy = "the corpus store {path} is being written by another process ({who})"
        with locks.exclusive(store.lock_path, 0.0, busy=busy, error=StoreLocked):
            store.clear()
            store.root.mkdir(parents=True)
            manifest, segments, next_fid = [], [], 0
            for k, piece in enumerate(pieces):
                seg = f"b{k % buckets:03d}-g000001s{k // buckets:04d}"
                ids = piece.runs["run_id"]
                fids = pd.Series(np.arange(next_fid, next_fid + len(ids)), index=ids.to_numpy())
                fids = fids[~fids.index.duplicated()]
                tables = {"runs": piece.runs, "turns": piece.turns, "reads": piece.reads,
                          "texts": texts(piece) if texts is not None
                          else pd.DataFrame(columns=TEXT_COLUMNS)}
                for name, frame in tables.items():
                    frame = frame[COLUMNS[name]].assign(
                        _fid=fids.reindex(frame["run_id"]).to_numpy(dtype=np.int64),
                        _row=frame.groupby("run_id", sort=False).cumcount().to_numpy())
                    _write_table(pa.Table.from_pandas(frame, schema=SCHEMAS[name],
                                                      preserve_index=False),
                                 store.root / _segment_file(name, seg))
                manifest.append(pd.DataFrame({
                    "fid": fids.to_numpy(), "path": piece.runs["path"].to_numpy(), "size": 0,
                    "mtime_ns": 0, "sha256": "", "run_id": ids.to_numpy(),
                    "bucket": k % buckets, "segment": seg}))
                segments.append(seg)
                next_fid += len(ids)
            store.state["tables_only"] = True
            table = (pd.concat(manifest, ignore_index=True) if manifest
                     else _MANIFEST.empty_table().to_pandas())
            store._commit(table, segments, next_fid)
        return store

    def clear(self) -> None:
        """Delete the store (the run files stay)."""
        shutil.rmtree(self.root, ignore_errors=True)
        self.state, self._manifest = self._fresh_state(), None

    # ---- updating
    def _scan(self) -> pd.DataFrame:
        """The run files under the folder (the ``*.jsonl`` files ``iter_run_files`` takes, in
        its order) with their size and mtime; walked with ``os.scandir``, which is several
        times faster than ``Path.rglob`` on 100,000 files."""
        rows = []
        stack = [""]
        while stack:
            rel = stack.pop()
            with os.scandir(self.folder / rel if rel else self.folder) as entries:
                for entry in entries:
                    name = f"{rel}/{entry.name}" if rel else entry.name
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(name)
                    elif entry.name.endswith(".jsonl") and entry.is_file():
                        st = entry.stat()
                        rows.append((name, st.st_size, st.st_mtime_ns))
        rows.sort(key=lambda row: row[0].split("/"))
        return pd.DataFrame(rows, columns=["path", "size", "mtime_ns"])

    @property
    def lock_path(self) -> Path:
        """The writer's lock file, beside the store folder (``<store>.lock``)."""
        return self.root.with_name(self.root.name + ".lock")

    def update(self, workers: int = 1, wait: float | None = None) -> UpdateReport:
        """Bring the store up to date with the run files: parse new and changed files, drop
        removed ones. One process writes at a time: an update that has something to write
        takes the store's writer lock, waiting up to ``wait`` seconds (None: as long as it
        takes) before it raises :class:`StoreLocked` naming the holder; it then starts again
        from the store as the other writer left it. Raises
        :class:`~adakit.record.RunFileError` (nothing committed) for a run file that cannot be
        read as recorded."""
        if self.state.get("tables_only"):
            raise ValueError(f"the corpus store {self.root} was written from tables "
                             "(Store.from_tables) and has no run files to update it from")
        report, _ = self._diff()
        if report is None:
            return self._last_report
        busy = ("the corpus store {path} is being updated by another process ({who}); "
                "wait for it to end, or open the store without updating it")
        with locks.exclusive(self.lock_path, wait, busy=busy, error=StoreLocked):
            self.state, self._manifest = self._read_state(), None  # another writer's commit
            report, plan = self._diff()
            if report is None:
                return self._last_report
            return self._apply(report, plan, workers)

    def _diff(self) -> tuple[UpdateReport | None, dict[str, pd.DataFrame]]:
        """What an update would do: its report and the files to drop and parse; the report is
        None when there is nothing to write (then :attr:`_last_report` holds it)."""
        now, old = self._scan(), self.manifest
        both = now.merge(old, on="path", how="outer", suffixes=("", "_old"), indicator=True)
        new = both[both["_merge"] == "left_only"]
        gone = both[both["_merge"] == "right_only"]
        kept = both[both["_merge"] == "both"]
        moved = kept[(kept["size"] != kept["size_old"]) | (kept["mtime_ns"] != kept["mtime_ns_old"])]
        digests = {p: file_digest(self.folder / p) for p in moved["path"]}
        differs = [digests[p] != d for p, d in zip(moved["path"], moved["sha256"], strict=True)]
        changed = moved.loc[pd.Series(differs, index=moved.index, dtype=bool)]
        report = UpdateReport(parsed=len(new) + len(changed), added=len(new),
                              changed=len(changed), removed=len(gone),
                              unchanged=len(kept) - len(changed),
                              touched=len(moved) - len(changed))
        if not report.parsed and not report.removed and not len(moved) and self.state["manifest"]:
            self._last_report = report
            return None, {}
        return report, {"now": now, "old": old, "new": new, "gone": gone, "changed": changed}

    def _apply(self, report: UpdateReport, plan: dict[str, pd.DataFrame],
               workers: int) -> UpdateReport:
        """Write what :meth:`_diff` found (the writer lock held) and commit it."""
        self.root.mkdir(parents=True, exist_ok=True)
        now, old, new, gone, changed = (plan[k] for k in ("now", "old", "new", "gone", "changed"))
        stale = set(gone["path"]) | set(changed["path"])
        manifest = old[~old["path"].isin(stale)].copy()
        stat = now.set_index("path")
        manifest["size"] = manifest["path"].map(stat["size"])
        manifest["mtime_ns"] = manifest["path"].map(stat["mtime_ns"])
        segments, rewritten = self._drop_files(old[old["path"].isin(stale)], manifest)
        report.rewritten_segments = rewritten
        todo = pd.concat([new[["path", "size", "mtime_ns"]], changed[["path", "size", "mtime_ns"]]])
        added, next_fid = self._parse(todo, workers)
        if added:
            manifest = pd.concat([manifest, pd.DataFrame(added)], ignore_index=True)
        segments += sorted({row["segment"] for row in added})
        self._commit(manifest, segments, next_fid)
        return report

    def _drop_files(self, stale: pd.DataFrame, manifest: pd.DataFrame) -> tuple[list[str], int]:
        """Rewrite the segments holding ``stale`` files without their rows; the live segments
        after that, and how many were rewritten. ``manifest``'s segment names follow."""
        segments = list(self.state["segments"])
        hit = sorted(set(stale["segment"]))
        gen = self.state["generation"] + 1
        fids = pa.array(stale["fid"].to_numpy(), pa.int64())
        for seg in hit:
            name = f"{seg.split('-')[0]}-g{gen:06d}r{hit.index(seg):04d}"
            for table in TABLES:
                data = pq.read_table(self.root / _segment_file(table, seg))
                keep = pc.invert(pc.is_in(data["_fid"], value_set=fids))
                _write_table(data.filter(keep), self.root / _segment_file(table, name))
            segments[segments.index(seg)] = name
            manifest.loc[manifest["segment"] == seg, "segment"] = name
        return segments, len(hit)

    def _parse(self, todo: pd.DataFrame, workers: int) -> tuple[list[dict[str, Any]], int]:
        """Parse the run files of ``todo`` into new segments, one bucket's files at a time
        (``workers`` processes); their manifest rows and the next free file id."""
        next_fid = self.state["next_fid"]
        gen = self.state["generation"] + 1
        jobs = []
        files = sorted(zip(todo["path"], todo["size"], todo["mtime_ns"], strict=True))
        by_bucket: dict[int, list[tuple[int, str, int, int]]] = {}
        for rel, size, mtime in files:
            by_bucket.setdefault(bucket_of(rel, self.buckets), []).append(
                (next_fid, rel, int(size), int(mtime)))
            next_fid += 1
        for bucket, items in sorted(by_bucket.items()):
            for k in range(0, len(items), SEGMENT_FILES):
                seg = f"b{bucket:03d}-g{gen:06d}s{k // SEGMENT_FILES:04d}"
                jobs.append((str(self.folder), str(self.root), seg, bucket,
                             items[k:k + SEGMENT_FILES]))
        if workers > 1 and len(jobs) > 1:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                done = list(pool.map(_parse_segment, *zip(*jobs, strict=True)))
        else:
            done = [_parse_segment(*job) for job in jobs]
        return [row for rows in done for row in rows], next_fid

    # ---- reading
    def files(self, table: str, segments: Sequence[str] | None = None) -> list[str]:
        """The parquet files of ``table``'s live segments (of ``segments`` only, when given)."""
        live = self.state["segments"] if segments is None else segments
        return [str(self.root / _segment_file(table, s)) for s in live]

    def connect(self) -> Any:
        """A DuckDB connection with one view per table (``runs``, ``turns``, ``reads``,
        ``texts``) over the live segments, hidden columns ``_fid`` and ``_row`` included,
        and ``files`` (fid, rank: the run file's place in path order)."""
        con = self._connection()
        for table in TABLES:
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM {self._source(con, table)}")
        return con

    def _connection(self) -> Any:
        import duckdb

        con = duckdb.connect()
        ranks = pd.DataFrame({"fid": self.manifest["fid"].to_numpy(),
                              "rank": np.arange(len(self.manifest), dtype=np.int64)})
        con.register("files", ranks)
        return con

    def _source(self, con: Any, table: str, segments: Sequence[str] | None = None) -> str:
        """A FROM item reading ``table``'s segments (an empty relation of its schema if none)."""
        parts = self.files(table, segments)
        if parts:
            listed = ", ".join("'" + p.replace("'", "''") + "'" for p in parts)
            return f"read_parquet([{listed}])"
        name = f"_{table}_empty"
        con.register(name, SCHEMAS[table].empty_table())
        return name

    def _select(self, con: Any, name: str, cols: list[str], where: list[tuple[str, Any]],
                segments: Sequence[str] | None = None, rank: bool = False,
                files: str = "files") -> pa.Table:
        """Arrow table of ``cols`` of table ``name`` (of ``segments``), the runs passing
        ``where``, in the loader's order; with ``rank``, a last column ``_rank`` (the run
        file's place in path order). ``files`` names the (fid, rank) relation to join."""
        runs = self._source(con, "runs", segments) if where else ""
        sql, params = _where_sql(where, runs)
        select = ", ".join([f't."{c}"' for c in cols] + (["f.rank AS _rank"] if rank else []))
        query = (f"SELECT {select} FROM {self._source(con, name, segments)} t "
                 f"JOIN {files} f ON t._fid = f.fid {sql} ORDER BY f.rank, t._row")
        return con.sql(query, params=params).to_arrow_table()

    def _columns(self, name: str, columns: Sequence[str] | None) -> list[str]:
        if name not in COLUMNS:
            raise ValueError(f"no table {name!r} in the store (tables: {', '.join(TABLES)})")
        cols = list(columns) if columns is not None else COLUMNS[name]
        unknown = [c for c in cols if c not in COLUMNS[name]]
        if unknown:
            raise ValueError(f"table {name} has no column {unknown[0]!r}")
        return cols

    def table(self, name: str, columns: Sequence[str] | None = None,
              where: Iterable[tuple[str, Any]] = ()) -> pd.DataFrame:
        """Table ``name`` as pandas, the ``columns`` asked (default: all), the rows of the
        runs that pass every (runs column, value or list of values) filter of ``where``, in
        ``load_corpus``'s order and with its dtypes."""
        cols = self._columns(name, columns)
        con = self._connection()
        try:
            data = self._select(con, name, cols, list(where))
        finally:
            con.close()
        return _as_loaded(data, cols)

    def segment_groups(self, runs_per_group: int) -> list[list[str]]:
        """The live segments in groups of about ``runs_per_group`` run files (a segment is
        never split), in segment order."""
        sizes = self.manifest.groupby("segment").size().to_dict()
        groups: list[list[str]] = []
        held = 0
        for seg in self.state["segments"]:
            if not groups or held + sizes.get(seg, 0) > runs_per_group:
                groups.append([])
                held = 0
            groups[-1].append(seg)
            held += sizes.get(seg, 0)
        return [g for g in groups if g]

    def chunks(self, columns: Mapping[str, Sequence[str] | None] | None = None,
               where: Iterable[tuple[str, Any]] = (), runs_per_chunk: int | None = None
               ) -> Iterator[tuple[Corpus, np.ndarray]]:
        """The store in in-memory pieces of whole runs (groups of segments), each with its
        runs' places in path order: the ``columns`` asked per table (a table not named: all
        its columns; None: every column), the runs passing ``where``."""
        wanted = {"runs": None, "turns": None, "reads": None, **(columns or {})}
        unknown = [t for t in wanted if t not in ("runs", "turns", "reads")]
        if unknown:
            raise ValueError(f"a chunk holds runs, turns and reads, not {unknown[0]!r}")
        cols = {t: self._columns(t, c) for t, c in wanted.items()}
        if "run_id" not in cols["runs"]:
            cols["runs"] = ["run_id", *cols["runs"]]
        filters = list(where)
        con = self._connection()
        ranks = pd.DataFrame({"fid": self.manifest["fid"].to_numpy(),
                              "rank": np.arange(len(self.manifest), dtype=np.int64)})
        segment = self.manifest["segment"].to_numpy()
        try:
            for group in self.segment_groups(runs_per_chunk or CHUNK_RUNS):
                # the piece's own files: a join with every file of a large store would cost
                # each piece as much as the whole store
                con.register("piece_files", ranks[np.isin(segment, group)])
                runs = self._select(con, "runs", cols["runs"], filters, group, rank=True,
                                    files="piece_files")
                rank = runs["_rank"].to_numpy()
                tables = {t: _as_loaded(self._select(con, t, cols[t], filters, group,
                                                     files="piece_files"), cols[t])
                          for t in ("turns", "reads")}
                piece = Corpus(_as_loaded(runs.drop_columns(["_rank"]), cols["runs"]),
                               tables["turns"], tables["reads"])
                if len(piece.runs):
                    yield piece, rank
        finally:
            con.close()

    def corpus(self) -> StoredCorpus:
        """The store's corpus, its tables read on first use."""
        return StoredCorpus(self)


def _where_sql(where: list[tuple[str, Any]], runs: str = "runs") -> tuple[str, list[Any]]:
    """A WHERE clause keeping the rows of the runs (read from ``runs``) that pass the
    filters, and its parameters."""
    if not where:
        return "", []
    conds, params = [], []
    for col, val in where:
        if col not in RUN_COLUMNS:
            raise ValueError(f"runs have no column {col!r} to filter on")
        values = list(val) if isinstance(val, (list, tuple, set)) else [val]
        if not values:
            conds.append("FALSE")
            continue
        conds.append(f'"{col}" IN ({", ".join("?" for _ in values)})')
        params += values
    return f"WHERE t._fid IN (SELECT _fid FROM {runs} WHERE {' AND '.join(conds)})", params


def _as_loaded(data: pa.Table, cols: list[str]) -> pd.DataFrame:
    """A stored table as pandas with the dtypes ``pd.DataFrame(rows)`` gives: a column of
    nothing but nulls (or any column of an empty table) holds objects."""
    if data.num_rows == 0:
        return pd.DataFrame([], columns=cols)
    empty = [c for c in cols if data[c].null_count == data.num_rows]
    frame = data.to_pandas(split_blocks=True, self_destruct=True)
    for col in empty:
        if frame[col].dtype != object:
            frame[col] = pd.Series([None] * len(frame), dtype=object)
    return frame


class StoredCorpus(Corpus):
    """A :class:`~adakit.record.Corpus` over a :class:`Store`: ``runs``, ``turns`` and
    ``reads`` are read from the store on first use (all columns) and kept; :meth:`table`
    reads only the columns asked; :meth:`where` narrows the runs inside DuckDB."""

    def __init__(self, store: Store, filters: tuple[tuple[str, Any], ...] = (),
                 chunk_runs: int = CHUNK_RUNS) -> None:
        if chunk_runs < 1:
            raise ValueError(f"chunk_runs must be at least 1, not {chunk_runs}")
        self.store, self.filters, self._tables = store, tuple(filters), {}
        self.chunk_runs = chunk_runs
        self.skipped = store.skipped

    def __repr__(self) -> str:
        shown = f", filters={list(self.filters)}" if self.filters else ""
        return f"StoredCorpus({self.store.folder}{shown})"

    def table(self, name: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """Table ``name`` (``runs``, ``turns``, ``reads`` or ``texts``) of this corpus's runs,
        only the ``columns`` asked."""
        return self.store.table(name, columns, self.filters)

    def _get(self, name: str) -> pd.DataFrame:
        if name not in self._tables:
            self._tables[name] = self.table(name)
        return self._tables[name]

    def __len__(self) -> int:
        return len(self._get("runs"))

    def where(self, **axes: Any) -> StoredCorpus:
        """Keep the runs whose columns equal (or, for a list, are in) the given values."""
        return StoredCorpus(self.store, self.filters + tuple(axes.items()), self.chunk_runs)

    def chunks(self, columns: Mapping[str, Sequence[str] | None] | None = None
               ) -> Iterator[tuple[Corpus, np.ndarray]]:
        """The corpus in in-memory pieces of about :attr:`chunk_runs` whole runs, each with
        its runs' places in the corpus's run order, read with only the ``columns`` asked
        (:meth:`Store.chunks`); a lens maps over them without holding every turn at once."""
        yield from self.store.chunks(columns, self.filters, self.chunk_runs)

    def in_memory(self) -> Corpus:
        """The same corpus as a plain in-memory :class:`~adakit.record.Corpus`."""
        return Corpus(self.runs, self.turns, self.reads, skipped=self.skipped)


def _table_property(name: str) -> property:
    def get(self: StoredCorpus) -> pd.DataFrame:
        return self._get(name)

    def put(self: StoredCorpus, value: pd.DataFrame) -> None:
        self._tables[name] = value

    return property(get, put, doc=f"The {name} table (read from the store on first use).")


for _name in ("runs", "turns", "reads"):
    setattr(StoredCorpus, _name, _table_property(_name))


# --------------------------------------------------------------------------- opening

#: ``backend="auto"`` opens a folder through its store from this many run files on (or when
#: the folder already has a store); below it, ``load_corpus`` in memory is as fast.
AUTO_STORE_FILES = 5000
BACKENDS = ("memory", "duckdb", "auto")


def _store_load(path: Path, include_unfinished: bool) -> Corpus:
    data = Store.open(path).corpus()
    return data if include_unfinished else data.where(finished=True)


def _auto_load(path: Path, include_unfinished: bool) -> Corpus:
    if not path.is_dir():
        return load_corpus(path, include_unfinished=include_unfinished)
    has_store = (path / STORE_DIR / "state.json").exists()
    if has_store or sum(1 for _ in iter_run_files(path)) >= AUTO_STORE_FILES:
        return _store_load(path, include_unfinished)
    return load_corpus(path, include_unfinished=include_unfinished)


def open_corpus(corpus: str | Path | Iterable[str | Path], *args: Any,
                backend: str = "auto", **kwargs: Any) -> Corpus:
    """:func:`adakit.record.open_corpus` (same arguments, filters and messages) with a choice
    of backend: ``memory`` (``load_corpus``), ``duckdb`` (the folder's :class:`Store`,
    updated first) or ``auto`` (the store from :data:`AUTO_STORE_FILES` run files on, or
    when one exists)."""
    loads = {"memory": None, "duckdb": _store_load, "auto": _auto_load}
    if backend not in loads:
        raise ValueError(f"unknown corpus backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    return record.open_corpus(corpus, *args, load=loads[backend], **kwargs)
