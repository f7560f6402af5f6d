"""Synthetic trajectories: deterministic, valid in the real schema, scriptable turn by turn, and
the direct tables agree with the files read back through load_corpus."""

from __future__ import annotations

import pandas as pd
import pytest

from adakit import synthetic as syn
from adakit.record import RUN_COLUMNS, TURN_COLUMNS, load_corpus, read_run

FILES = {"pkg/a.py": 200, "pkg/b.py": 100}


def test_synthetic_run_is_deterministic_and_seed_sensitive():
    a = syn.synthetic_run("r1", model="synth-C", condition="natural", seed=3)
    b = syn.synthetic_run("r1", model="synth-C", condition="natural", seed=3)
    c = syn.synthetic_run("r1", model="synth-C", condition="natural", seed=4)
    dump = lambda rf: [t.model_dump() for t in rf.turns]  # noqa: E731
    assert dump(a) == dump(b)
    assert a.end == b.end
    assert dump(a) != dump(c)


def test_policy_run_ends_with_a_single_finalize():
    for seed in range(20):
        rf = syn.synthetic_run(f"r{seed}", model="synth-D", condition="budget_pressure", seed=seed)
        fins = [t.turn for t in rf.turns if t.metrics.finalize]
        assert fins == [len(rf.turns)]
        assert rf.end.reason == "finalize"
        assert [t.turn for t in rf.turns] == list(range(1, len(rf.turns) + 1))
        starts = [t.started_at for t in rf.turns]
        assert starts == sorted(starts)
        assert all(t.ended_at >= t.started_at for t in rf.turns)


def test_scripted_run_follows_the_script_exactly():
    tools = [
        {"tool": "OVW", "file": "pkg/a.py", "duration": 1.0, "gap": 0.0},
        {"tool": "PKR", "file": "pkg/a.py", "ranges": [(10, 29)], "duration": 2.0, "gap": 0.0,
         "thinking": "abc", "output": "<peek/>"},
        {"tool": "EXP", "action": "references", "file": "pkg/b.py", "result_count": 4},
        {"tool": "MEM", "confidence": None},
        "malformed",
        "unknown",
        {"tool": "PKR", "file": "pkg/missing.py", "error": "tool_error"},
        {"tool": "CON"},
    ]
    rf = syn.synthetic_run("s1", files=FILES, tools=iter(tools))  # a generator works too
    assert [t.metrics.tool for t in rf.turns] == ["OVW", "PKR", "EXP", "MEM", None, None,
                                                  "PKR", "CON"]
    t1, t2 = rf.turns[0], rf.turns[1]
    assert t1.metrics.file == "pkg/a.py" and t1.metrics.structural
    assert t1.started_at == pytest.approx(syn.BASE_TIME + 0.05)
    assert t1.ended_at - t1.started_at == pytest.approx(1.0)
    assert t2.started_at == pytest.approx(t1.ended_at)
    assert t2.metrics.ranges == [(10, 29)] and t2.metrics.lines_viewed == 20
    assert t2.thinking == "abc" and t2.raw_text == "<peek/>"
    exp = rf.turns[2].metrics
    assert (exp.action, exp.file, exp.result_count, exp.ranges) == ("references", "pkg/b.py",
                                                                    4, [])
    assert rf.turns[3].metrics.confidence is None
    assert rf.turns[4].parse_error is not None and rf.turns[4].metrics.error_type == "malformed"
    assert rf.turns[4].call is None
    assert rf.turns[5].metrics.error_type == "unknown_tool" and rf.turns[5].call is None
    assert rf.turns[6].metrics.error_type == "tool_error" and rf.turns[6].metrics.ranges == []
    assert rf.turns[7].metrics.finalize is True  # a script's last CON finalizes by default
    assert rf.end.reason == "finalize"
    # the recorded calls say what the script says, as a live agent's calls match their metrics
    assert t1.call.params["file_path"] == "pkg/a.py"
    assert (t2.call.params["file_path"], t2.call.params["start_line"],
            t2.call.params["end_line"]) == ("pkg/a.py", 10, 29)
    assert rf.turns[2].call.params["action_type"] == "find_all_references"
    assert rf.turns[2].call.params["current_file_path"] == "pkg/b.py"
    assert "confidence_level" not in rf.turns[3].call.params
    assert rf.turns[6].call.params["file_path"] == "pkg/missing.py"


def test_scripted_hold_and_end_reason():
    rf = syn.synthetic_run("s2", files=FILES, tools=["PKR", "CON", "PKR"])
    assert rf.turns[1].metrics.finalize is False
    assert rf.end.reason == "turn_bound"
    rf = syn.synthetic_run("s3", files=FILES, tools=["PKR"], finished=False)
    assert rf.end is None


@pytest.mark.parametrize(
    "tools, message",
    [
        (["XYZ"], "unknown tool"),
        ([{"file": "a"}], "needs a 'tool'"),
        ([{"tool": "PKR", "colour": 1}], "unknown keys"),
        ([{"tool": "PKR", "ranges": [(5, 2)]}], "bad line range"),
        (["PKR"] * 4, "longer than its turn bound"),
        ([], "no turns"),
    ],
)
def test_bad_scripts_are_refused(tools, message):
    with pytest.raises(ValueError, match=message):
        syn.synthetic_run("bad", files=FILES, tools=tools, turn_bound=3)


def test_bad_files_are_refused():
    with pytest.raises(ValueError, match="at least one file"):
        syn.synthetic_run("bad", files={})
    with pytest.raises(ValueError, match="positive line count"):
        syn.synthetic_run("bad", files={"a.py": 0})


def test_reads_stay_inside_the_world_files():
    files = syn.world_files("scikit-learn")
    assert files == syn.world_files("scikit-learn")  # deterministic
    rf = syn.synthetic_run("w", model="synth-B", world="scikit-learn", seed=1)
    for t in rf.turns:
        for a, b in t.metrics.ranges:
            assert 1 <= a <= b <= files[t.metrics.file]


def test_corpus_specs_cover_models_by_conditions_first():
    specs = syn.corpus_specs(16)
    assert {(s.model, s.condition) for s in specs} == {
        (m, c) for m in syn.MODELS for c in syn.CONDITIONS}
    assert len({s.run_id for s in syn.corpus_specs(200)}) == 200
    with pytest.raises(ValueError):
        syn.corpus_specs(3, models=[])


def test_written_corpus_equals_exact_tables(tmp_path):
    paths = syn.write_synthetic_corpus(tmp_path, 12, seed=5, unfinished=0.2, progress=False)
    assert len(paths) == 12 and all(p.suffix == ".jsonl" for p in paths)
    loaded = load_corpus(tmp_path, cache=False)
    direct = syn.synthetic_tables(12, seed=5, unfinished=0.2, exact=True)
    pd.testing.assert_frame_equal(loaded.runs.drop(columns="path"),
                                  direct.runs.drop(columns="path"))
    pd.testing.assert_frame_equal(loaded.turns, direct.turns)
    pd.testing.assert_frame_equal(loaded.reads, direct.reads)
    assert (~loaded.runs["finished"]).sum() >= 1
    assert loaded.runs.loc[~loaded.runs["finished"], "reason"].isna().all()


def test_writing_never_appends_and_fast_write_matches_runwriter(tmp_path):
    syn.write_synthetic_corpus(tmp_path / "c", 2, progress=False)
    with pytest.raises(FileExistsError):
        syn.write_synthetic_corpus(tmp_path / "c", 2, progress=False)
    again = syn.write_synthetic_corpus(tmp_path / "c", 2, progress=False, overwrite=True)
    assert all(len(read_run(p).turns) > 0 for p in again)
    rf = syn.synthetic_run("x", model="synth-A", seed=2)
    fast = syn.write_run(rf, tmp_path / "fast.jsonl")
    durable = syn.write_run(rf, tmp_path / "durable.jsonl", durable=True)
    assert fast.read_bytes() == durable.read_bytes()


def test_fast_tables_share_schema_and_distributions():
    fast = syn.synthetic_tables(400, seed=2)
    exact = syn.synthetic_tables(400, seed=2, exact=True)
    assert list(fast.runs.columns) == RUN_COLUMNS and list(fast.turns.columns) == TURN_COLUMNS
    for name in ("runs", "turns", "reads"):
        a, b = getattr(fast, name), getattr(exact, name)
        assert dict(a.dtypes) == dict(b.dtypes), name
    pd.testing.assert_frame_equal(fast.turns, syn.synthetic_tables(400, seed=2).turns)
    for c in (fast, exact):
        n = c.runs.groupby("condition")["n_turns"].mean()
        assert n["budget_pressure"] < 0.6 * n["natural"]
        assert c.turns["t_rel_start"].between(0, 1).all()
        assert c.turns["t_rel_end"].between(0, 1).all()
        fin = c.turns[c.turns["finalize"].astype("object").eq(True)]
        last = c.runs.set_index("run_id")["n_turns"].reindex(fin["run_id"]).to_numpy()
        assert (fin["turn"].to_numpy() == last).all()
        assert (c.reads["n_lines"] == c.reads["end_line"] - c.reads["start_line"] + 1).all()
    share = lambda c: c.turns["tool"].value_counts(normalize=True)  # noqa: E731
    assert (share(fast) - share(exact)).abs().max() < 0.03


def test_length_scale_and_coach_condition():
    short = syn.synthetic_tables(64, seed=1, length_scale=0.5)
    long = syn.synthetic_tables(64, seed=1, length_scale=1.5)
    assert long.turns.shape[0] > 2 * short.turns.shape[0]
    coach = syn.synthetic_tables(40, seed=1, conditions=["coach_judge"], exact=True)
    assert set(coach.turns["coach_decision"].dropna()) <= {"APPROVE", "HINT", "REJECT"}
    assert coach.turns["coach_decision"].notna().any()
