"""Lenses 0, 1, 2 and 4 and the noise floor on a corpus store, read piece by piece (issue 28):
every lens function gives the same table from a StoredCorpus as from the same corpus in
memory, on a store built from run files and on one written straight from synthetic tables."""

from __future__ import annotations

import pandas as pd
import pytest

from adakit.lenses import footprint, journey, policy, surface
from adakit.record import Corpus
from adakit.store import Store, StoredCorpus
from adakit.synthetic import synthetic_tables, synthetic_texts, write_synthetic_corpus
from adakit.variance import noise


@pytest.fixture(scope="module")
def from_files(tmp_path_factory) -> StoredCorpus:
    folder = tmp_path_factory.mktemp("files") / "runs"
    write_synthetic_corpus(folder / "part", 30, seed=5, unfinished=0.25, progress=False)
    write_synthetic_corpus(folder, 18, seed=6, progress=False)
    return StoredCorpus(Store.open(folder, buckets=6), chunk_runs=9)


@pytest.fixture(scope="module")
def from_tables(tmp_path_factory) -> StoredCorpus:
    folder = tmp_path_factory.mktemp("tables")
    pieces = (synthetic_tables(40, seed=k, unfinished=0.2, length_scale=0.8) for k in range(5))
    return StoredCorpus(Store.from_tables(folder, pieces, texts=synthetic_texts, buckets=4),
                        chunk_runs=60)


@pytest.fixture(params=["from_files", "from_tables"])
def pair(request) -> tuple[StoredCorpus, Corpus]:
    stored = request.getfixturevalue(request.param)
    return stored, stored.in_memory()


def test_the_store_is_read_in_several_pieces_of_whole_runs(pair):
    stored, memory = pair
    pieces = list(stored.chunks({"turns": ["run_id", "turn"], "reads": ["run_id"]}))
    assert len(pieces) >= 3
    seen = [set(p.runs["run_id"]) for p, _ in pieces]
    assert sum(map(len, seen)) == len(memory.runs) == len(set().union(*seen))
    for piece, rank in pieces:
        assert set(piece.turns["run_id"]) <= set(piece.runs["run_id"])
        assert list(piece.turns.columns) == ["run_id", "turn"]
        assert (memory.runs["run_id"].to_numpy()[rank] == piece.runs["run_id"].to_numpy()).all()


def same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a, b)


@pytest.mark.parametrize("time", ["active", "wall"])
def test_lens0_surface(pair, time):
    stored, memory = pair
    same(surface.run_surface(stored, time), surface.run_surface(memory, time))
    same(surface.tool_concentration(stored, by="model"),
         surface.tool_concentration(memory, by="model"))


@pytest.mark.parametrize("time", ["active", "wall"])
def test_lens1_journey(pair, time):
    stored, memory = pair
    events = journey.arc_events(memory, time)
    same(journey.arc_events(stored, time), events)
    same(journey.long_pauses(stored, 2.0, time), journey.long_pauses(events, 2.0))
    assert len(journey.long_pauses(events, 2.0))
    same(journey.turn_time_output_correlation(stored, by=["model"]),
         journey.turn_time_output_correlation(memory, by=["model"]))


@pytest.mark.parametrize("by", [("model", "condition"), ("task",), None])
@pytest.mark.parametrize("weight", ["transition", "run"])
def test_lens2_tag_shares(pair, by, weight):
    stored, memory = pair
    tags = policy.tag_transitions(memory.turns)
    expected = policy.tag_shares(tags, memory.runs, by=by, weight=weight)
    assert len(expected) and expected["count"].sum() == tags["tag"].notna().sum()
    same(policy.tag_shares(stored, by=by, weight=weight), expected)
    same(policy.tag_shares(memory, by=by, weight=weight), expected)


@pytest.mark.parametrize("by", [("world", "model", "condition"), "world", None, "repeat"])
def test_lens4_trace_density(pair, by):
    stored, memory = pair
    expected = footprint.trace_density(memory.reads, memory.runs, by=by)
    assert len(expected)
    same(footprint.trace_density(stored, by=by), expected)
    same(footprint.trace_density(memory, by=by), expected)


def test_the_noise_floor(pair):
    stored, memory = pair
    table = noise.run_metrics(memory)
    assert any(c.endswith(noise.SHARE_SUFFIX) for c in table.columns)
    same(noise.run_metrics(stored), table)
    variation = noise.cell_variation(noise.run_metrics(stored))
    same(variation, noise.cell_variation(table))
    same(noise.noise_floor(variation), noise.noise_floor(noise.cell_variation(table)))


def test_a_narrowed_store_gives_the_narrowed_tables(from_files):
    model = from_files.runs["model"].iloc[0]
    stored, memory = from_files.where(model=model), from_files.in_memory().where(model=model)
    assert 0 < len(memory.runs) < len(from_files.runs)
    same(surface.run_surface(stored), surface.run_surface(memory))
    same(policy.tag_shares(stored, by="condition"),
         policy.tag_shares(policy.tag_transitions(memory.turns), memory.runs, by="condition"))
    same(footprint.trace_density(stored, by="world"),
         footprint.trace_density(memory.reads, memory.runs, by="world"))


def test_a_density_by_a_turn_column_is_refused_on_a_store(from_files):
    with pytest.raises(ValueError, match="grouped by runs columns, not 'tool'"):
        footprint.trace_density(from_files, by="tool")


def test_a_store_written_from_tables_refuses_an_update(from_tables):
    with pytest.raises(ValueError, match="written from tables"):
        from_tables.store.update()
