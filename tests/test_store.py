"""The corpus store (adakit.store): the DuckDB-backed tables equal the in-memory loader's, and an
update parses only new and changed run files and drops removed ones."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from adakit import config, store
from adakit.record import RunFileError, load_corpus
from adakit.store import Store, bucket_of
from adakit.synthetic import synthetic_run, write_run, write_synthetic_corpus

REFERENCE = config.ROOT / "data" / "reference" / "local-v4" / "runs"
TABLES = ("runs", "turns", "reads")


def assert_same(stored, memory) -> None:
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(stored, name), getattr(memory, name), obj=name)
    assert tuple(stored.skipped) == tuple(memory.skipped)


@pytest.fixture
def synthetic(tmp_path) -> Path:
    folder = tmp_path / "runs"
    write_synthetic_corpus(folder / "part", 40, seed=3, unfinished=0.25, progress=False)
    write_synthetic_corpus(folder, 20, seed=4, progress=False)  # files at two depths
    (folder / "empty.jsonl").write_bytes(b"")  # header-less: skipped, named
    # a path order that differs from string order: "a/b" sorts before "a-c" as a path
    tools = [{"tool": "CON", "finalize": True}]
    write_run(synthetic_run("in-a", tools=tools), folder / "a" / "b.jsonl")
    write_run(synthetic_run("a-c", tools=tools), folder / "a-c.jsonl")
    return folder


@pytest.fixture
def parsed(monkeypatch) -> list[str]:
    """The run files the store parses (it parses in this process with workers=1)."""
    seen: list[str] = []
    real = store.read_run_rows

    def counting(path, raw=None):
        seen.append(Path(path).name)
        return real(path, raw)

    monkeypatch.setattr(store, "read_run_rows", counting)
    return seen


def test_the_store_gives_the_loaders_tables_on_a_synthetic_corpus(synthetic):
    memory = load_corpus(synthetic, cache=False)
    assert len(memory.runs) == 62 and memory.skipped
    s = Store.open(synthetic)
    assert_same(s.corpus(), memory)
    assert (synthetic / ".adakit-store" / "state.json").exists()
    assert_same(Store.open(synthetic).corpus(), memory)  # opened again from the store


def test_the_store_gives_the_loaders_tables_on_the_reference_corpus(tmp_path):
    if not REFERENCE.is_dir():
        pytest.skip("no reference corpus data/reference/local-v4/runs")
    folder = tmp_path / "local-v4"
    shutil.copytree(REFERENCE, folder, ignore=shutil.ignore_patterns(".adakit-*"))
    memory = load_corpus(folder, cache=False)
    assert len(memory.runs) == len(list(REFERENCE.glob("*.jsonl")))
    assert_same(Store.open(folder).corpus(), memory)


def test_a_store_of_only_empty_tables_keeps_their_columns_and_types(tmp_path):
    """A segment without a row of some table (a run that read nothing, a header-less file)
    still writes that table with its columns and types."""
    folder = tmp_path / "runs"
    write_run(synthetic_run("only", tools=[{"tool": "CON", "finalize": True}]), folder / "only.jsonl")
    (folder / "empty.jsonl").write_bytes(b"")
    s = Store.open(folder, buckets=1)
    assert_same(s.corpus(), load_corpus(folder, cache=False))
    assert s.corpus().reads.empty and list(s.table("reads").columns) == store.COLUMNS["reads"]
    reads = pd.read_parquet(next((s.root / "reads").rglob("*.parquet")))
    assert str(reads["n_lines"].dtype) == "int64" and len(reads) == 0


def test_rows_sit_in_their_files_bucket_and_texts_are_kept_apart(synthetic):
    s = Store.open(synthetic, buckets=4)
    con = s.connect()
    rows = con.sql("SELECT DISTINCT t._fid, regexp_extract(filename, 'bucket=(\\d+)', 1) AS b "
                   "FROM read_parquet([" + ", ".join(
                       f"'{s.root / store._segment_file('turns', g)}'" for g in s.state["segments"])
                   + "], filename=true) t").df()
    buckets = s.manifest.set_index("fid")["bucket"]
    assert all(int(b) == buckets[f] for f, b in zip(rows["_fid"], rows["b"], strict=True))
    assert set(s.manifest["bucket"]) <= {0, 1, 2, 3}
    assert bucket_of("a/b.jsonl", 4) == bucket_of("a/b.jsonl", 4)
    texts = s.table("texts")
    memory = load_corpus(synthetic, cache=False)
    assert len(texts) == len(memory.turns) and "thinking" not in memory.turns
    assert (texts["thinking"].str.len().to_numpy() == memory.turns["thinking_chars"].to_numpy()).all()
    calls = texts["call"].dropna().map(json.loads)
    assert calls.map(lambda c: "tool" in c and "params" in c).all()


def test_columns_and_filters_are_read_inside_duckdb(synthetic):
    s = Store.open(synthetic)
    memory = load_corpus(synthetic, cache=False)
    model = memory.runs["model"].iloc[0]
    narrowed = s.corpus().where(model=[model], finished=True)
    expect = memory.where(model=[model], finished=True)
    assert 0 < len(narrowed) < len(memory)
    assert_same(narrowed, expect)
    two = narrowed.table("turns", ["run_id", "tool"])
    assert list(two.columns) == ["run_id", "tool"]
    pd.testing.assert_frame_equal(two, expect.turns[["run_id", "tool"]])
    assert s.corpus().where(model=[]).runs.empty
    with pytest.raises(ValueError, match="no column 'nope'"):
        s.table("turns", ["nope"])
    with pytest.raises(ValueError, match="no table 'calls'"):
        s.table("calls")
    with pytest.raises(ValueError, match="runs have no column 'tool'"):
        s.table("runs", where=[("tool", "PKR")])


def test_an_added_run_appears_and_only_it_is_parsed(synthetic, parsed):
    Store.open(synthetic)
    assert len(parsed) == 63  # every file once, the header-less one too
    parsed.clear()
    write_synthetic_corpus(synthetic / "later", 3, seed=9, progress=False)
    s = Store(synthetic)
    report = s.update()
    assert (report.parsed, report.added, report.unchanged) == (3, 3, 63)
    assert sorted(parsed) == sorted(p.name for p in (synthetic / "later").iterdir())
    assert_same(s.corpus(), load_corpus(synthetic, cache=False))
    parsed.clear()
    assert Store(synthetic).update().parsed == 0 and parsed == []


def test_a_changed_run_is_reread_and_a_touched_one_is_not(synthetic, parsed):
    Store.open(synthetic)
    parsed.clear()
    target = sorted(synthetic.glob("syn*.jsonl"))[1]
    lines = target.read_text().splitlines(keepends=True)
    target.write_text("".join(lines[:3]))  # fewer turns, no end record
    untouched = sorted(synthetic.glob("syn*.jsonl"))[2]
    st = untouched.stat()
    os.utime(untouched, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # same bytes, newer mtime
    s = Store(synthetic)
    report = s.update()
    assert (report.parsed, report.changed, report.touched) == (1, 1, 1)
    assert parsed == [target.name]
    run = s.corpus().runs.set_index("path").loc[str(target)]
    assert run["n_turns"] == 2 and not run["finished"]
    assert_same(s.corpus(), load_corpus(synthetic, cache=False))
    parsed.clear()
    assert Store(synthetic).update().parsed == 0  # the new mtime was recorded


def test_a_removed_run_leaves_the_store(synthetic, parsed):
    Store.open(synthetic, buckets=8)
    parsed.clear()
    gone = sorted((synthetic / "part").glob("*.jsonl"))[:2]
    ids = set(load_corpus(gone, cache=False).runs["run_id"])
    for path in gone:
        path.unlink()
    s = Store(synthetic, buckets=8)
    report = s.update()
    assert (report.removed, report.parsed) == (2, 0) and parsed == []
    assert 1 <= report.rewritten_segments <= 2
    data = s.corpus()
    assert not ids & set(data.runs["run_id"]) and not ids & set(data.turns["run_id"])
    assert not ids & set(s.table("texts")["run_id"])
    assert_same(data, load_corpus(synthetic, cache=False))
    live = {p.relative_to(s.root).as_posix() for p in s.root.rglob("*.parquet")}
    assert live == ({store._segment_file(t, g) for t in store.TABLES for g in s.state["segments"]}
                    | {s.state["manifest"]})  # the old segments were swept


def test_a_broken_run_file_commits_nothing(synthetic):
    s = Store.open(synthetic)
    before = json.loads((s.root / "state.json").read_text())
    (synthetic / "zz.jsonl").write_text('{"kind": "header", oops}\n')
    with pytest.raises(RunFileError, match="zz.jsonl:1: not JSON"):
        Store(synthetic).update()
    assert json.loads((s.root / "state.json").read_text()) == before


def test_a_store_of_another_layout_is_rebuilt(synthetic, parsed):
    s = Store.open(synthetic)
    state = json.loads((s.root / "state.json").read_text())
    (s.root / "state.json").write_text(json.dumps({**state, "loader_version": -1}))
    parsed.clear()
    again = Store.open(synthetic)
    assert len(parsed) == 63
    assert_same(again.corpus(), load_corpus(synthetic, cache=False))


def test_two_workers_build_the_same_store(synthetic):
    memory = load_corpus(synthetic, cache=False)
    assert_same(Store.open(synthetic, workers=2, buckets=4).corpus(), memory)


def test_open_corpus_backends_agree(synthetic, capsys):
    kwargs = {"models": [load_corpus(synthetic, cache=False).runs["model"].iloc[0]],
              "finished_only": True}
    memory = store.open_corpus(synthetic, backend="memory", **kwargs)
    shown_memory = capsys.readouterr().out
    stored = store.open_corpus(synthetic, backend="duckdb", **kwargs)
    assert isinstance(stored, store.StoredCorpus)
    assert capsys.readouterr().out == shown_memory
    assert_same(stored, memory)
    # auto: the folder has a store now, so it is used
    assert isinstance(store.open_corpus(synthetic, verbose=False), store.StoredCorpus)
    with pytest.raises(ValueError, match="unknown corpus backend 'sqlite'"):
        store.open_corpus(synthetic, backend="sqlite")


def test_auto_keeps_small_corpora_in_memory(tmp_path):
    rf = synthetic_run("r1", tools=[{"tool": "CON", "finalize": True}])
    write_run(rf, tmp_path / "r1.jsonl")
    data = store.open_corpus(tmp_path, verbose=False)
    assert not isinstance(data, store.StoredCorpus) and len(data.runs) == 1
    assert not (tmp_path / ".adakit-store").exists()


def test_a_lens_takes_the_stored_corpus_unchanged(synthetic):
    from adakit.lenses.surface import run_surface

    memory = load_corpus(synthetic, cache=False).where(finished=True)
    stored = Store.open(synthetic).corpus().where(finished=True)
    pd.testing.assert_frame_equal(run_surface(stored), run_surface(memory))


# --------------------------------------------------------------------------- the writer lock

_WRITER = r"""
import sys, time
from pathlib import Path
from adakit import store
from adakit.store import Store, StoreLocked

folder, role, flag = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
if role == "first":
    real = store.read_run_rows
    def slow(path, raw=None):
        flag.touch()  # the lock is held: the second process may start
        time.sleep(0.05)
        return real(path, raw)
    store.read_run_rows = slow
    print("parsed", Store(folder).update().parsed)
else:
    while not flag.exists():
        time.sleep(0.01)
    try:
        Store(folder).update(wait=0)
        print("no lock")
    except StoreLocked as exc:
        print("refused:", exc)
    print("parsed", Store(folder).update().parsed)  # waits for the first, then finds it done
"""


def test_two_processes_updating_one_store_take_turns(tmp_path):
    import subprocess
    import sys

    folder = tmp_path / "runs"
    write_synthetic_corpus(folder, 30, seed=8, progress=False)
    flag = tmp_path / "started"
    cmd = [sys.executable, "-c", _WRITER, str(folder)]
    env = {**os.environ, "PYTHONPATH": str(config.ROOT)}
    first = subprocess.Popen([*cmd, "first", str(flag)], stdout=subprocess.PIPE, text=True,
                             env=env)
    second = subprocess.run([*cmd, "second", str(flag)], capture_output=True, text=True,
                            env=env, timeout=120)
    out_first, _ = first.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    assert out_first.strip() == "parsed 30"
    refused, waited = second.stdout.strip().splitlines()
    assert refused.startswith("refused: the corpus store") and f"pid {first.pid} " in refused
    assert waited == "parsed 0"  # the second update saw the first one's commit
    assert_same(Store.open(folder).corpus(), load_corpus(folder, cache=False))
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".adakit")) == [
        ".adakit-store", ".adakit-store.lock"]
