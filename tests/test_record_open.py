"""config.resolve and record.open_corpus: the notebook way of naming and loading a corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

from adakit import config
from adakit.record import open_corpus
from adakit.synthetic import synthetic_run, write_run

FILES = {"pkg/a.py": 100, "pkg/b.py": 50}


def test_resolve_keeps_absolute_and_roots_relative_paths(tmp_path):
    assert config.resolve(tmp_path / "x") == tmp_path / "x"
    assert config.resolve("data/runs/quick") == config.ROOT / "data" / "runs" / "quick"
    assert config.resolve(Path("a") / "b") == config.ROOT / "a" / "b"
    assert config.resolve("~/corpus") == Path.home() / "corpus"
    assert config.resolve("").resolve() == config.ROOT.resolve()


@pytest.fixture
def corpus(tmp_path) -> Path:
    """Five runs: models m1 (3) and m2 (2), conditions natural/budget, one unfinished."""
    folder = tmp_path / "runs"
    plan = [("r1", "m1", "natural", True), ("r2", "m1", "budget_pressure", True),
            ("r3", "m1", "natural", False), ("r4", "m2", "natural", True),
            ("r5", "m2", "budget_pressure", True)]
    tools = [{"tool": "PKR", "file": "pkg/a.py", "ranges": [(1, 10)]},
             {"tool": "PKR", "file": "pkg/b.py", "ranges": [(3, 4)]},
             {"tool": "CON", "finalize": True}]
    for run_id, model, condition, finished in plan:
        rf = synthetic_run(run_id, model=model, condition=condition, tools=tools, files=FILES,
                           finished=finished)
        write_run(rf, folder / f"{run_id}.jsonl")
    return folder


def test_open_corpus_loads_everything_and_prints_counts(corpus, capsys):
    data = open_corpus(corpus)
    assert sorted(data.runs["run_id"]) == ["r1", "r2", "r3", "r4", "r5"]
    out = capsys.readouterr().out
    assert out.startswith(f"corpus {corpus}: 5 runs, ")
    assert f"{len(data.turns)} turns, {len(data.reads)} line ranges read" in out
    assert "filters" not in out


def test_open_corpus_applies_every_filter(corpus, capsys):
    data = open_corpus(corpus, models=["m1"], conditions=["natural"])
    assert sorted(data.runs["run_id"]) == ["r1", "r3"]
    assert set(data.turns["run_id"]) == {"r1", "r3"} and set(data.reads["run_id"]) == {"r1", "r3"}
    assert "(filters: model in [m1], condition in [natural])" in capsys.readouterr().out
    # a bare string is one value, not a list of characters
    assert sorted(open_corpus(corpus, models="m2", verbose=False).runs["run_id"]) == ["r4", "r5"]
    assert len(open_corpus(corpus, worlds=["flask"], tasks=["architecture_analysis"],
                           verbose=False).runs) == 5


def test_open_corpus_finished_only(corpus, capsys):
    data = open_corpus(corpus, models=["m1"], finished_only=True)
    assert sorted(data.runs["run_id"]) == ["r1", "r2"] and data.runs["finished"].all()
    assert ": 2 finished runs," in capsys.readouterr().out


def test_open_corpus_is_quiet_when_asked(corpus, capsys):
    open_corpus(corpus, verbose=False)
    assert capsys.readouterr().out == ""


def test_open_corpus_resolves_relative_paths_against_the_root(corpus, monkeypatch, capsys):
    monkeypatch.setattr(config, "ROOT", corpus.parent)
    monkeypatch.chdir("/")
    data = open_corpus("runs", models=["m2"])
    assert len(data.runs) == 2
    assert capsys.readouterr().out.startswith("corpus runs: 2 runs")


def test_open_corpus_says_what_is_on_hand_when_filters_leave_nothing(corpus):
    with pytest.raises(ValueError, match=r"left after the filters model in \[m9\]") as err:
        open_corpus(corpus, models=["m9"])
    assert "models: m1, m2" in str(err.value)
    with pytest.raises(ValueError, match="conditions: budget_pressure, natural"):
        open_corpus(corpus, models=["m2"], conditions=["combined"])


def test_open_corpus_fails_clearly_on_missing_or_empty_corpora(tmp_path, corpus):
    with pytest.raises(FileNotFoundError, match="no corpus at .*nowhere.*launch one first"):
        open_corpus(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no run files in the corpus"):
        open_corpus(tmp_path / "empty")
    for p in corpus.glob("r[1245].jsonl"):
        p.unlink()
    with pytest.raises(ValueError, match="no finished runs in the corpus"):
        open_corpus(corpus, finished_only=True)


def test_open_corpus_reads_several_folders_as_one(corpus, tmp_path, capsys):
    other = tmp_path / "more"
    rf = synthetic_run("x1", model="m3", files=FILES,
                       tools=[{"tool": "PKR", "file": "pkg/a.py", "ranges": [(1, 5)]}])
    write_run(rf, other / "x1.jsonl")
    data = open_corpus([corpus, other], models=["m1", "m3"])
    assert sorted(data.runs["run_id"]) == ["r1", "r2", "r3", "x1"]
    assert set(data.turns["run_id"]) == {"r1", "r2", "r3", "x1"}
    out = capsys.readouterr().out
    assert out.startswith(f"corpus {corpus} + {other}: 4 runs") and "m3" in out
    # the same run in two folders is refused, not counted twice
    write_run(rf, corpus / "x1.jsonl")
    with pytest.raises(ValueError, match="'x1' is in more than one"):
        open_corpus([corpus, other])


def test_open_corpus_skips_header_less_files_with_a_note(corpus, capsys):
    """A full disk leaves empty run files (or a header cut off before its newline): they are
    skipped, counted and named, also when the tables come from the loader's cache."""
    (corpus / "full-disk-1.jsonl").write_bytes(b"")
    (corpus / "full-disk-2.jsonl").write_bytes(b'{"kind":"header","run_id":"r9"')
    for _ in range(2):  # read from the run files, then from the cache
        data = open_corpus(corpus)
        assert sorted(data.runs["run_id"]) == ["r1", "r2", "r3", "r4", "r5"]
        assert data.skipped == (str(corpus / "full-disk-1.jsonl"), str(corpus / "full-disk-2.jsonl"))
        out = capsys.readouterr().out
        assert out.startswith(f"corpus {corpus}: 5 runs")
        assert (f"skipped 2 header-less run files (empty, or the header was never written, e.g. "
                f"on a full disk): {corpus / 'full-disk-1.jsonl'}, {corpus / 'full-disk-2.jsonl'}"
                in out)
    kept = open_corpus(corpus, models=["m2"], verbose=False)
    assert len(kept.runs) == 2 and len(kept.skipped) == 2  # filters keep the note
    for p in corpus.glob("r*.jsonl"):
        p.unlink()
    with pytest.raises(ValueError, match="no run files in the corpus .*skipped 2 header-less"):
        open_corpus(corpus)
