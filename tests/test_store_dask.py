"""Lens 2's tag shares and lens 4's density on a Dask LocalCluster of two workers, over a
corpus store's parquet files, equal the in-memory tables (issue 28)."""

from __future__ import annotations

import pandas as pd
import pytest

from adakit.lenses import footprint, on_dask, policy
from adakit.store import Store
from adakit.synthetic import synthetic_tables

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dask")
    pieces = (synthetic_tables(30, seed=k, unfinished=0.2, length_scale=0.7) for k in range(6))
    return Store.from_tables(folder, pieces, buckets=3).corpus()


def test_the_cluster_has_two_workers_of_one_thread(client):
    info = client.scheduler_info()["workers"]
    assert len(info) == 2 and all(w["nthreads"] == 1 for w in info.values())


@pytest.mark.parametrize("by", [("model", "condition"), "task", None])
@pytest.mark.parametrize("weight", ["transition", "run"])
def test_tag_shares_on_the_cluster(client, stored, by, weight):
    memory = stored.in_memory()
    expected = policy.tag_shares(policy.tag_transitions(memory.turns), memory.runs, by=by,
                                 weight=weight)
    assert len(expected)
    pd.testing.assert_frame_equal(on_dask.tag_shares(stored, by=by, weight=weight), expected)


@pytest.mark.parametrize("by", [("world", "model", "condition"), "world", None])
def test_trace_density_on_the_cluster(client, stored, by):
    memory = stored.in_memory()
    expected = footprint.trace_density(memory.reads, memory.runs, by=by)
    assert len(expected)
    pd.testing.assert_frame_equal(on_dask.trace_density(stored, by=by), expected)


def test_a_narrowed_corpus_on_the_cluster(client, stored):
    narrowed = stored.where(model=stored.runs["model"].iloc[0], finished=True)
    memory = narrowed.in_memory()
    assert 0 < len(memory.runs) < len(stored.runs)
    pd.testing.assert_frame_equal(
        on_dask.tag_shares(narrowed, by="task"),
        policy.tag_shares(policy.tag_transitions(memory.turns), memory.runs, by="task"))
    pd.testing.assert_frame_equal(on_dask.trace_density(narrowed, by="world"),
                                  footprint.trace_density(memory.reads, memory.runs, by="world"))


def test_anything_but_a_store_is_refused():
    with pytest.raises(TypeError, match="read a corpus store, not a Corpus"):
        on_dask.tag_shares(synthetic_tables(3))
