"""Search across turns (issue 28) on a hand-made corpus whose hits are known turn by turn."""

from __future__ import annotations

import pandas as pd
import pytest

from adakit.cli import main
from adakit.record import load_corpus
from adakit.store import Store
from adakit.synthetic import synthetic_run, write_run
from adakit.workbench import search as s
from adakit.workbench.call_pattern import PatternError, parse_pattern

FILES = {"a.py": 100, "b.py": 50, "src/app.py": 80}


def _concluded(rf, content: str, end: str | None = None):
    """The run with its last (CON) turn stashing ``content``; the end record says ``end``
    (default: the same), as an imported run's submission may differ from any stash."""
    rf.turns[-1].call.params["content"] = content
    rf.end.conclusion = content if end is None else end
    return rf


def _runs():
    r1 = synthetic_run("r1", model="m1", files=FILES, tools=[
        {"tool": "OVW", "file": "a.py", "thinking": "Start with the outline of a.py."},
        {"tool": "PKR", "file": "a.py", "ranges": [(1, 10)], "thinking": "The Session class is here."},
        {"tool": "PKR", "file": "a.py", "ranges": [(1, 10)], "thinking": "Again, to check the session."},
        {"tool": "PKR", "file": "b.py", "ranges": [(5, 9)], "thinking": "Now the tests."},
        {"tool": "CON", "finalize": True, "thinking": "Enough."},
    ])
    r2 = synthetic_run("r2", model="m2", condition="budget_pressure", files=FILES, tools=[
        {"tool": "malformed", "thinking": "session? naïve guess"},
        {"tool": "PKR", "file": "b.py", "ranges": [(1, 5)], "thinking": "Looking at tests, \u212aelvin."},
        {"tool": "EXP", "file": "b.py", "action": "references", "symbol": "Session",
         "thinking": "Who calls it?"},
        {"tool": "PKR", "file": "b.py", "ranges": [(6, 9)], "thinking": "The caller."},
        {"tool": "CON", "finalize": True, "thinking": "Done."},
    ])
    r3 = synthetic_run("r3", model="m1", files=FILES, tools=[
        {"tool": "PKR", "file": "src/app.py", "ranges": [(1, 20)], "thinking": "The app."},
        {"tool": "PKR", "file": "src/app.py", "ranges": [(21, 40)], "thinking": "More of it."},
        {"tool": "CON", "finalize": False, "thinking": "A first note."},
        {"tool": "PKR", "file": "a.py", "ranges": [(1, 5)], "thinking": "And a.py."},
        {"tool": "CON", "finalize": True, "thinking": "Closing."},
    ])
    r3.turns[2].call.params["content"] = "app starts in src/app.py"
    return [_concluded(r1, "The Session lives in a.py"), _concluded(r2, "Callers are in b.py"),
            _concluded(r3, "app and a.py", end="submitted a patch to app")]


@pytest.fixture
def folder(tmp_path):
    out = tmp_path / "runs"
    for rf in _runs():
        write_run(rf, out / f"{rf.header.run_id}.jsonl")
    return out


@pytest.fixture(params=["memory", "store"])
def corpus(request, folder):
    """The hand-made corpus in memory, and from its corpus store (queries served by DuckDB
    from the store's tables and texts): every test below holds for both."""
    if request.param == "store":
        return Store.open(folder).corpus()
    return load_corpus(folder, cache=False)


def _pairs(table, *cols: str) -> list[tuple]:
    return list(table[list(cols)].itertuples(index=False, name=None))


def test_a_plain_pattern_is_case_insensitive_over_every_field(corpus):
    hits = s.search(corpus, "session")
    assert _pairs(hits, "run_id", "turn", "field") == [
        ("r1", 2, "thinking"), ("r1", 3, "thinking"), ("r1", 5, "call"), ("r1", 5, "conclusion"),
        ("r2", 1, "thinking"), ("r2", 3, "call"),
    ]
    assert hits.loc[0, "snippet"] == "The Session class is here."
    assert "symbol_name=Session" in hits.loc[5, "snippet"]
    assert list(s.search(corpus, "session", fields=["thinking"], case=True)["turn"]) == [3, 1]


def test_snippets_are_cut_around_the_hit(corpus):
    hits = s.search(corpus, "class", fields=["thinking"], context=5)
    assert list(hits["snippet"]) == ["…sion class is h…"]


def test_a_regular_expression_and_where_a_bad_one_fails(corpus):
    hits = s.search(corpus, r"Sess\w+ (class|lives)", regex=True)
    assert _pairs(hits, "run_id", "turn", "field") == [
        ("r1", 2, "thinking"), ("r1", 5, "call"), ("r1", 5, "conclusion")]
    with pytest.raises(s.SearchError, match="bad regular expression 'a\\(b' at position 1"):
        s.search(corpus, "a(b", regex=True)


def test_patterns_the_raw_files_cannot_prefilter_are_still_found(corpus):
    assert _pairs(s.search(corpus, "symbol_name=session"), "run_id", "turn") == [("r2", 3)]
    assert _pairs(s.search(corpus, "NAÏVE"), "run_id", "turn") == [("r2", 1)]
    # a Kelvin sign matches k without regard to case: the raw file is folded, not just lowered
    assert _pairs(s.search(corpus, "kelvin"), "run_id", "turn") == [("r2", 2)]
    assert _pairs(s.search(corpus, "outline of a.py", fields=["thinking", "observation"]),
                  "run_id", "turn", "field") == [("r1", 1, "thinking"), ("r1", 1, "observation")]


def test_an_end_conclusion_no_stash_said_is_found_on_the_last_turn(corpus):
    hits = s.search(corpus, "app", fields=["conclusion"])
    assert _pairs(hits, "run_id", "turn", "snippet") == [
        ("r3", 3, "app starts in src/app.py"), ("r3", 5, "app and a.py"),
        ("r3", 5, "submitted a patch to app")]
    assert s.search(corpus, "a patch", fields=["conclusion"], turns=(1, 4)).empty


def test_filters_keep_runs_and_turns(corpus):
    assert _pairs(s.search(corpus, "session", model="m2"), "run_id", "turn") == [
        ("r2", 1), ("r2", 3)]
    assert _pairs(s.search(corpus, "session", tool="EXP"), "run_id", "turn") == [("r2", 3)]
    assert _pairs(s.search(corpus, "session", tool="peek_code_region"), "run_id", "turn") == [
        ("r1", 2), ("r1", 3)]
    assert _pairs(s.search(corpus, "session", turns="2-3"), "run_id", "turn") == [
        ("r1", 2), ("r1", 3), ("r2", 3)]
    assert _pairs(s.search(corpus, "app", file="app.py", fields=["thinking"]),
                  "run_id", "turn") == [("r3", 1)]
    assert s.search(corpus, "session", condition="natural", world="flask",
                    task="architecture_analysis")["run_id"].unique().tolist() == ["r1"]


def test_a_filter_only_query_lists_the_kept_turns_from_the_tables(corpus):
    hits = s.search(corpus, None, file="a.py", turns=(1, 3))
    assert _pairs(hits, "run_id", "turn", "field") == [
        ("r1", 1, "call"), ("r1", 2, "call"), ("r1", 3, "call")]
    assert hits.loc[1, "snippet"] == "PKR peek_code_region a.py 1-10"


def test_unknown_filter_values_name_the_values_on_hand(corpus):
    with pytest.raises(s.SearchError, match=r"unknown model 'm3': the corpus has m1, m2$"):
        s.search(corpus, "x", model="m3")
    with pytest.raises(s.SearchError, match=r"unknown tool 'PKX': the corpus has .*PKR"):
        s.search(corpus, "x", tool="PKX")
    with pytest.raises(s.SearchError, match=r"unknown file 'c.py': the corpus has a.py, b.py"):
        s.search(corpus, "x", file="c.py")
    with pytest.raises(s.SearchError, match="unknown field 'thoughts'"):
        s.search(corpus, "x", fields=["thoughts"])
    with pytest.raises(s.SearchError, match="bad turn range '3-x'"):
        s.search(corpus, "x", turns="3-x")
    with pytest.raises(s.SearchError, match="bad turn range 5-2"):
        s.search(corpus, "x", turns=(5, 2))


def test_run_files_and_folders_give_the_same_hits(folder, corpus):
    from_files = s.search(_runs(), "session")
    assert from_files.equals(s.search(corpus, "session"))
    assert from_files.equals(s.search(str(folder), "session"))


def test_a_torn_last_line_is_passed_over(folder):
    with open(folder / "r1.jsonl", "a", encoding="utf-8") as fh:
        fh.write('{"kind":"turn","turn":6,"thinking":"session')
    assert len(s.search(load_corpus(folder, cache=False), "session")) == 6


@pytest.mark.parametrize("pattern,expected", [
    ("PKR(file=X) PKR(file=X) * CON", [("r1", 2, 5, "X=a.py"), ("r3", 1, 3, "X=src/app.py")]),
    ("PKR(file=X) * PKR(file=X) CON", [("r2", 2, 5, "X=b.py"), ("r3", 1, 3, "X=src/app.py")]),
    ('PKR(file="app.py") * CON(finalize=true)', [("r3", 1, 5, "")]),
    ("OVW|EXP(action=references) PKR", [("r2", 3, 4, "")]),
    ("PKR _ CON", [("r1", 3, 5, ""), ("r3", 1, 3, "")]),
    ("* CON(finalize=false) *", [("r3", 3, 3, "")]),
    ("CON(finalize=FALSE)", [("r3", 3, 3, "")]),
    ("PKR(file=F) PKR(file=G)", [("r1", 2, 3, "F=a.py, G=a.py"),
                                  ("r3", 1, 2, "F=src/app.py, G=src/app.py")]),
])
def test_sequence_queries(corpus, pattern, expected):
    found = s.sequence_search(corpus, pattern)
    assert _pairs(found, "run_id", "first_turn", "last_turn", "bindings") == expected


def test_sequence_matches_do_not_overlap_and_pass_over_malformed_turns(corpus):
    assert _pairs(s.sequence_search(corpus, "PKR"), "run_id", "first_turn") == [
        ("r1", 2), ("r1", 3), ("r1", 4), ("r2", 2), ("r2", 4), ("r3", 1), ("r3", 2), ("r3", 4)]
    assert _pairs(s.sequence_search(corpus, "PKR PKR", model="m1"), "run_id", "first_turn") == [
        ("r1", 2), ("r3", 1)]
    assert _pairs(s.sequence_search(corpus, "PKR PKR", turns="3-5"), "run_id", "first_turn") == [
        ("r1", 3)]


@pytest.mark.parametrize("pattern,message", [
    ("PKR PKX", "at column 5, unknown action 'PKX'"),
    ("PKR(fil=X)", "at column 5, unknown key 'fil'"),
    ("PKR(file=X", "at column 4, a '(' without its ')'"),
    ("PKR(file)", "at column 5, expected key=value"),
    ("PKR ? CON", "at column 5, cannot read '?'"),
    ("* *", "names no action"),
])
def test_bad_sequence_patterns_say_where(pattern, message):
    with pytest.raises(PatternError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_pattern(pattern)


def test_a_sequence_query_refuses_tool_and_file_filters(corpus):
    with pytest.raises(s.SearchError, match="takes no --tool or --file"):
        s.sequence_search(corpus, "PKR", tool="PKR")


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_command_prints_hits_and_sequences(capsys, folder):
    code, out, _ = _cli(capsys, "search", str(folder), "session", "--field", "thinking",
                        "--limit", "2")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["run_id", "turn", "field", "snippet", "hits"]
    assert lines[1].split()[:3] == ["r1", "2", "thinking"] and "Session class" in lines[1]
    assert lines[3] == "... 1 more (of 3); --limit 0 shows all"
    code, out, _ = _cli(capsys, "search", str(folder), "--seq", "PKR(file=X) PKR(file=X) * CON")
    assert code == 0 and [ln.split()[:3] for ln in out.splitlines()[1:]] == [
        ["r1", "2", "5"], ["r3", "1", "3"]]
    code, out, _ = _cli(capsys, "search", str(folder), "zebra")
    assert code == 0 and out.strip() == "no hits"


@pytest.mark.parametrize("argv,message", [
    (("nosuch-word", "--model", "m3"), "error: unknown model 'm3': the corpus has m1, m2"),
    (("--seq", "PKR PKX"), "at column 5, unknown action 'PKX'"),
    (("a(b", "--regex"), "at position 1"),
    (("x", "--seq", "PKR"), "give a text pattern or --seq, not both"),
    (("--turns", "9-3"), "bad turn range 9-3"),
])
def test_bad_input_at_the_command_line_is_one_line(capsys, folder, argv, message):
    code, out, err = _cli(capsys, "search", str(folder), *argv)
    assert code == 2 and out == "" and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and message in err


def test_a_missing_corpus_is_one_line(capsys, tmp_path):
    code, _, err = _cli(capsys, "search", str(tmp_path / "nope"), "x")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no corpus at" in err


def test_a_corpus_path_at_the_command_line_is_read_from_the_current_folder(capsys, folder,
                                                                           monkeypatch):
    monkeypatch.chdir(folder.parent)
    code, out, _ = _cli(capsys, "search", folder.name, "kelvin")
    assert code == 0 and out.splitlines()[1].split()[:3] == ["r2", "2", "thinking"]


def test_a_corpus_read_back_from_its_parquet_cache_gives_the_same_answers(folder, corpus):
    load_corpus(folder)  # writes the cache
    cached = load_corpus(folder)
    for pattern in ("PKR(file=X) * PKR(file=X) CON", "PKR(error=none, symbol=none) CON(finalize=true)"):
        assert s.sequence_search(cached, pattern).equals(s.sequence_search(corpus, pattern))
    assert s.search(cached, None, model="m2").equals(s.search(corpus, None, model="m2"))
    assert s.search(corpus, None, model="m2").loc[0, "snippet"] == "parse error bad_value"
    assert s.search(cached, "session", tool="EXP").equals(s.search(corpus, "session", tool="EXP"))


# --------------------------------------------------------------------------- on a corpus store


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    from adakit.synthetic import write_synthetic_corpus

    folder = tmp_path_factory.mktemp("synthetic") / "runs"
    write_synthetic_corpus(folder, 40, seed=11, unfinished=0.2, progress=False)
    return folder


@pytest.mark.parametrize("pattern,options", [
    ("dispatcher", {}),
    ("I should", {"case": True}),
    ("session class", {"fields": ["thinking"], "turns": "3-9"}),
    (r"re(quest|gistry)\b", {"regex": True, "model": "synth-A"}),
    ("lines shown", {"fields": ["call", "observation"], "tool": "PKR"}),
    ("file_path=src", {"fields": ["call"]}),
    ("the", {"fields": ["conclusion"]}),
    (None, {"condition": "natural", "turns": "1-2"}),
    (None, {"tool": "EXP", "world": "flask"}),
])
def test_the_store_answers_as_the_run_files_do_on_a_synthetic_corpus(synthetic, pattern,
                                                                    options):
    memory = s.search(load_corpus(synthetic, cache=False), pattern, **options)
    stored = s.search(Store.open(synthetic).corpus(), pattern, **options)
    assert len(memory) > 0
    pd.testing.assert_frame_equal(stored, memory)


def test_a_folder_with_a_store_is_searched_through_it(synthetic, monkeypatch):
    Store.open(synthetic)
    monkeypatch.setattr(s, "_records", None)  # reading the run files would fail
    hits = s.search(str(synthetic), "dispatcher", fields=["thinking"])
    assert len(hits) > 0 and set(hits["field"]) == {"thinking"}
    assert s.sequence_search(str(synthetic), "PKR(file=X) PKR(file=X)").shape[0] > 0


def test_a_store_written_from_tables_finds_every_marked_turn(tmp_path):
    from adakit.synthetic import MARKER, synthetic_tables, synthetic_texts

    pieces = [synthetic_tables(30, seed=k) for k in range(3)]
    stored = Store.from_tables(tmp_path / "big", pieces,
                               texts=lambda c: synthetic_texts(c, every=50)).corpus()
    hits = s.search(stored, MARKER, fields=["thinking"])
    assert len(hits) == sum(-(-len(p.turns) // 50) for p in pieces)
    assert hits["snippet"].str.endswith(MARKER).all()
    assert len(s.search(stored, None, tool="PKR", turns="1-1")) == sum(
        ((p.turns["tool"] == "PKR") & (p.turns["turn"] == 1)).sum() for p in pieces)
