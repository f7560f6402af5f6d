"""Lens 2's tag shares and lens 4's trace density on Dask, over a corpus store's parquet files.

The store keeps every row of one run in one segment file (:mod:`adakit.store`), so the
per-run part of these lenses is a map over files with no shuffle: each partition (one
segment file of ``turns`` or ``reads``, read with ``dask.dataframe.read_parquet``) is tagged
and counted run by run (:func:`adakit.lenses.policy.run_tag_counts`' step) or reduced to
density parts (:func:`adakit.lenses.footprint.density_parts`) on the workers, and the small
results are added up on the client by the same aggregate the in-memory path uses
(:func:`~adakit.lenses.policy.shares_of_counts`, :func:`~adakit.lenses.footprint.density_of_parts`),
so the tables are the ones :func:`~adakit.lenses.policy.tag_shares` and
:func:`~adakit.lenses.footprint.trace_density` give for the same corpus in memory.

The computations run on the current Dask scheduler: a ``distributed.Client`` once one has
been made (a ``LocalCluster`` or a real cluster, docs/store.md), else Dask's threads. Dask is
an optional dependency (``pip install adakit[dask]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from adakit.lenses import footprint, policy
from adakit.store import Store, StoredCorpus


def _dask() -> tuple[Any, Any]:
    try:
        import dask
        import dask.dataframe as dd
    except ImportError:
        raise ImportError("the Dask lenses need dask[dataframe] and distributed: "
                          "pip install 'adakit[dask]'") from None
    return dask, dd


def _as_store(data: Store | StoredCorpus) -> tuple[Store, list[tuple[str, Any]]]:
    if isinstance(data, StoredCorpus):
        return data.store, list(data.filters)
    if isinstance(data, Store):
        return data, []
    raise TypeError(f"the Dask lenses read a corpus store, not a {type(data).__name__}")


def _partitions(store: Store, table: str, columns: list[str]) -> list[Any]:
    """One delayed pandas frame per segment file of ``table`` (``_fid`` added)."""
    dask, dd = _dask()
    files = store.files(table)
    if not files:
        return []
    with dask.config.set({"dataframe.convert-string": False}):  # object strings, as pandas
        frame = dd.read_parquet(files, columns=[*columns, "_fid"], split_row_groups=False,
                                blocksize=None, aggregate_files=False)
        return list(frame.to_delayed())


def _kept(part: pd.DataFrame, fids: set[int] | None) -> pd.DataFrame:
    if fids is not None:
        part = part[part["_fid"].isin(fids)]
    return part.drop(columns="_fid").reset_index(drop=True)


def _counts(part: pd.DataFrame, fids: set[int] | None) -> pd.DataFrame:
    return policy.tag_counts(policy.tag_transitions(_kept(part, fids)))


def _density(part: pd.DataFrame, runs: pd.DataFrame, by: list[str], fids: set[int] | None
             ) -> tuple[pd.DataFrame, pd.DataFrame]:
    return footprint.density_parts(_kept(part, fids), runs, by or None)


def _runs(store: Store, where: list[tuple[str, Any]], columns: list[str]
          ) -> tuple[pd.DataFrame, set[int] | None]:
    runs = store.table("runs", columns, where)
    if not where:
        return runs, None
    con = store._connection()
    try:
        fids = store._select(con, "runs", ["_fid"], where)["_fid"].to_pylist()
    finally:
        con.close()
    return runs, set(fids)


def tag_shares(data: Store | StoredCorpus, by: str | Sequence[str] | None = ("model", "condition"),
               weight: str = "transition") -> pd.DataFrame:
    """:func:`adakit.lenses.policy.tag_shares` of a stored corpus, its transitions tagged and
    counted on the Dask workers, one segment file per task."""
    dask, _ = _dask()
    store, where = _as_store(data)
    keys = [by] if isinstance(by, str) else list(by or ())
    runs, fids = _runs(store, where, ["run_id", *keys])
    need = policy.TAGGING_COLUMNS["turns"]
    parts = [dask.delayed(_counts)(p, fids) for p in _partitions(store, "turns", need)]
    counts = [c for c in dask.compute(*parts) if len(c)]
    if not counts:
        return policy.tag_shares(pd.DataFrame(columns=policy.TAG_COLUMNS), runs, by, weight)
    return policy.shares_of_counts(policy.align_tag_counts(counts), runs, by, weight)


def trace_density(data: Store | StoredCorpus, by: str | Sequence[str] | None = None
                  ) -> pd.DataFrame:
    """:func:`adakit.lenses.footprint.trace_density` of a stored corpus, its density parts
    computed on the Dask workers, one segment file per task."""
    dask, _ = _dask()
    store, where = _as_store(data)
    need = footprint.density_columns(by)
    keys = [by] if isinstance(by, str) else list(by or ())
    runs, fids = _runs(store, where, need["runs"])
    parts = [dask.delayed(_density)(p, runs, keys, fids)
             for p in _partitions(store, "reads", need["reads"])]
    return footprint.density_of_parts(dask.compute(*parts), runs, by)
