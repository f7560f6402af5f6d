"""The recording scheme R: writing, reading back, torn lines, validation, the tidy tables."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from pydantic import ValidationError

from adakit.record import (
    SCHEMA_DOC,
    ConditionInfo,
    End,
    Header,
    ModelInfo,
    RunWriter,
    TaskInfo,
    ToolCall,
    ToolMetrics,
    Turn,
    WorldInfo,
    content_digest,
    json_schema,
    load_corpus,
    read_run,
    truncate_torn,
)


def header(run_id: str = "r1", model: str = "m", condition: str = "natural") -> Header:
    return Header(
        run_id=run_id, model=ModelInfo(name=model, api_key_env="SOME_KEY"), world=WorldInfo(name="w"),
        task=TaskInfo(family="risk_review"), condition=ConditionInfo(name=condition), turn_bound=10,
        started_at=100.0,
    )


def turn(n: int, tool: str = "PKR", file: str = "a.py", ranges=((1, 10),), t0: float = 100.0, **kw) -> Turn:
    return Turn(
        turn=n, started_at=t0 + n - 1, ended_at=t0 + n, thinking="x" * n, raw_text="y" * (2 * n),
        call=ToolCall(tool="peek_code_region", params={"file_path": file, "start_line": ranges[0][0] if ranges else 1}),
        metrics=ToolMetrics(tool=tool, file=file, ranges=list(ranges), lines_viewed=sum(b - a + 1 for a, b in ranges)),
        **kw,
    )


def write(path: Path, records) -> Path:
    with RunWriter(path) as w:
        for r in records:
            w.write(r)
    return path


def test_round_trip_and_tables(tmp_path):
    write(tmp_path / "r1.jsonl", [header(), turn(1), turn(2, ranges=((5, 20), (30, 31))),
                                  End(reason="finalize", ended_at=104.0, conclusion="done", totals={"cost_usd": 0.5})])
    write(tmp_path / "r2.jsonl", [header("r2", model="n"), turn(1, tool="OVW", ranges=())])
    rf = read_run(tmp_path / "r1.jsonl")
    assert rf.finished and [t.turn for t in rf.turns] == [1, 2] and rf.end.conclusion == "done"
    c = load_corpus(tmp_path, cache=False)
    runs = c.runs.set_index("run_id")
    assert runs.loc["r1", "elapsed_s"] == 4.0 and runs.loc["r1", "n_turns"] == 2
    assert runs.loc["r1", "conclusion_chars"] == 4 and runs.loc["r1", "cost_usd"] == 0.5
    assert not runs.loc["r2", "finished"] and pd.isna(runs.loc["r2", "reason"])
    # reads: one row per shown range, only for turns with a file and no error
    assert sorted(map(tuple, c.reads[["run_id", "start_line", "end_line", "n_lines"]].values.tolist())) == [
        ("r1", 1, 10, 10), ("r1", 5, 20, 16), ("r1", 30, 31, 2)
    ]
    t = c.turns.set_index(["run_id", "turn"])
    assert t.loc[("r1", 2), "thinking_chars"] == 2 and t.loc[("r1", 2), "output_chars"] == 4
    assert t.loc[("r1", 2), "t_rel_start"] == pytest.approx(0.25) and t.loc[("r1", 1), "model"] == "m"
    assert set(c.where(model="n").runs["run_id"]) == {"r2"}


def test_parquet_cache_is_used_and_invalidated(tmp_path):
    write(tmp_path / "r1.jsonl", [header(), turn(1)])
    first = load_corpus(tmp_path)
    assert (tmp_path / ".adakit-cache").exists() and len(first.turns) == 1
    with open(tmp_path / "r1.jsonl", "a") as fh:  # the file changes: the cache must not be reused
        fh.write(turn(2).model_dump_json() + "\n")
    assert len(load_corpus(tmp_path).turns) == 2


def test_parquet_cache_is_whole_or_absent_and_a_broken_one_is_reread(tmp_path):
    """Notebooks executed in parallel share a corpus's cache: it appears with all three tables
    at once (no scratch folder left behind), and a damaged table is read again from the runs."""
    write(tmp_path / "r1.jsonl", [header(), turn(1), turn(2)])
    load_corpus(tmp_path)
    (entry,) = (tmp_path / ".adakit-cache").iterdir()
    assert sorted(p.name for p in entry.iterdir()) == ["reads.parquet", "runs.parquet",
                                                       "skipped.json", "turns.parquet"]
    (entry / "turns.parquet").write_bytes(b"not parquet")
    again = load_corpus(tmp_path)
    assert len(again.turns) == 2
    assert [p.name for p in (tmp_path / ".adakit-cache").iterdir()] == [entry.name]
    assert len(load_corpus(tmp_path).turns) == 2  # the rewritten cache reads back


def test_torn_last_line_is_ignored_and_can_be_cut(tmp_path):
    p = write(tmp_path / "r.jsonl", [header(), turn(1)])
    with open(p, "a") as fh:
        fh.write('{"kind": "turn", "turn": 2, "sta')
    rf = read_run(p)
    assert len(rf.turns) == 1 and rf.torn_bytes > 0
    assert truncate_torn(p) == rf.torn_bytes
    assert p.read_text().endswith("\n") and truncate_torn(p) == 0


def test_read_run_parses_the_bytes_it_is_given_instead_of_reading_the_file(tmp_path):
    p = write(tmp_path / "r.jsonl", [header(), turn(1), turn(2)])
    raw = p.read_bytes()
    assert read_run(p, raw) == read_run(p)
    first_two = b"".join(raw.splitlines(keepends=True)[:2])  # header and turn 1 only
    rf = read_run(p, first_two)
    assert rf.path == p and [t.turn for t in rf.turns] == [1] and len(read_run(p).turns) == 2


def test_validation_errors_are_clear(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"kind": "turn", "turn": 1, "started_at": 0, "ended_at": 1}) + "\n")
    with pytest.raises(ValueError, match="no header"):
        read_run(bad)
    bad.write_text("not json\n")
    with pytest.raises(ValueError, match="not JSON"):
        read_run(bad)
    h = header().model_dump()
    h["schema_version"] = "9.0"
    bad.write_text(json.dumps(h) + "\n")
    with pytest.raises(ValueError, match="schema 9.0"):
        read_run(bad)
    with pytest.raises(ValidationError):
        Turn.model_validate({"kind": "turn", "turn": 1, "started_at": 0, "ended_at": 1, "surprise": 1})
    with pytest.raises(FileNotFoundError):
        load_corpus(tmp_path / "nowhere")


def test_digest_ignores_clock_and_cache_flag_only():
    from adakit.record import RunFile

    a = RunFile(Path("a"), header(), [turn(1)], End(reason="finalize", totals={"cache_hits": 0}))
    b = RunFile(Path("b"), header().model_copy(update={"started_at": 5.0}),
                [turn(1, t0=900.0).model_copy(update={"cached": True})], End(reason="finalize", totals={"cache_hits": 1}))
    assert content_digest(a) == content_digest(b)
    c = RunFile(Path("c"), header(), [turn(1, file="b.py")], a.end)
    assert content_digest(c) != content_digest(a)


def test_key_names_only_and_schema_doc_is_current():
    assert "SOME_KEY" in header().model_dump_json()  # the variable's name, never a value field
    assert "api_key" not in {k for k in ModelInfo.model_fields if k != "api_key_env"}
    assert json.loads(SCHEMA_DOC.read_text()) == json.loads(json.dumps(json_schema())), (
        "docs/trajectory.schema.json is stale: run `adakit schema --write`"
    )


def test_fast_and_plain_parsing_agree(tmp_path):
    """RunWriter lines (kind first) go through pydantic's JSON parser; lines in any other key
    order through json.loads; both give the same records, and a broken line says not JSON."""
    records = [header(), turn(1), turn(2, ranges=((5, 20),)), End(reason="finalize", ended_at=104.0)]
    fast = write(tmp_path / "fast.jsonl", records)
    shuffled = tmp_path / "plain.jsonl"
    shuffled.write_text("".join(json.dumps(dict(reversed(list(r.model_dump(mode="json").items()))))
                                + "\n" for r in records))
    assert not shuffled.read_text().startswith('{"kind"')
    a, b = read_run(fast), read_run(shuffled)
    assert (a.header, a.turns, a.end) == (b.header, b.turns, b.end)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(fast.read_text().splitlines()[0] + '\n{"kind":"turn","turn": 1, oops\n')
    with pytest.raises(ValueError, match=r"broken.jsonl:2: not JSON"):
        read_run(broken)
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(fast.read_text().splitlines()[0] + '\n{"kind":"turn","turn":"first"}\n')
    with pytest.raises(ValidationError):
        read_run(wrong)


def test_three_clocks_keep_downtime_and_coach_time_out_of_active_time(tmp_path):
    """A coach run that crashed after turn 1 and resumed an hour later (values by hand)."""
    # turn 1: 100 -> 102 s, of which the coach review took 101.5 -> 102 (its calls 0.4 s)
    t1 = turn(1).model_copy(update={"ended_at": 102.0, "coach": {
        "decision": "PASS", "started_at": 101.5, "ended_at": 102.0, "latency_s": 0.4}})
    t2 = turn(2, t0=3600.0).model_copy(update={"started_at": 3600.0, "ended_at": 3603.0,
                                               "coach": {"decision": "HINT", "latency_s": 1.0}})
    write(tmp_path / "c.jsonl", [header(condition="coach_judge"), t1, t2,
                                 End(reason="turn_bound", ended_at=3603.5)])
    c = load_corpus(tmp_path, cache=False)
    run = c.runs.iloc[0]
    assert run["wall_s"] == pytest.approx(3503.5) and run["elapsed_s"] == pytest.approx(3503.5)
    assert run["coach_s"] == pytest.approx(0.5 + 1.0)  # review span, else the calls' latency
    assert run["active_s"] == pytest.approx((2.0 - 0.5) + (3.0 - 1.0))
    t = c.turns.set_index("turn")
    assert t.loc[1, "coach_s"] == pytest.approx(0.5) and t.loc[2, "active_s"] == pytest.approx(2.0)
    # journey positions on the active clock: turn 2 starts where turn 1's 1.5 s end
    assert t.loc[1, "active_rel_start"] == 0.0
    assert t.loc[2, "active_rel_start"] == pytest.approx(1.5 / 3.5)
    assert t.loc[2, "active_rel_end"] == pytest.approx(1.0)
    # the wall clock puts turn 2 at the far end of the hour-long gap
    assert t.loc[2, "t_rel_start"] == pytest.approx(3500.0 / 3503.5)


def test_time_totals_match_the_loader_and_never_go_negative():
    from adakit.record import coach_seconds, time_totals

    t = turn(1).model_copy(update={"coach": {"decision": "PASS", "latency_s": 9.0}})
    assert coach_seconds(t) == 1.0  # clipped to the 1 s turn
    assert time_totals([t, turn(2)], 100.0, 103.0) == {"active_s": 1.0, "coach_s": 1.0,
                                                       "wall_s": 3.0}


def test_a_replayed_turn_keeps_the_time_its_reply_took_when_recorded(tmp_path):
    """A reply from the response cache arrives in milliseconds; the active and coach clocks
    count the latency it had when it was computed, so a replayed run keeps its recording's
    clock (wall time stays the replay's own)."""
    from adakit.record import ModelCall, active_seconds, coach_seconds, replayed_seconds

    live = turn(1).model_copy(update={"ended_at": 112.0, "latency_s": 11.5})
    replayed = turn(2).model_copy(update={
        "started_at": 200.0, "ended_at": 200.02, "latency_s": 11.5, "cached": True,
        "model_calls": [ModelCall(purpose="hint", model="h", latency_s=3.0, cached=True),
                        ModelCall(purpose="hint", model="h", latency_s=2.0)],
        "coach": {"decision": "PASS", "started_at": 200.0, "ended_at": 200.01,
                  "calls": [{"latency_s": 7.0, "cached": True}, {"latency_s": 5.0, "cached": False}]}})
    assert active_seconds(live) == pytest.approx(12.0) and replayed_seconds(live) == (0.0, 0.0)
    assert replayed_seconds(replayed) == pytest.approx((11.5 + 3.0, 7.0))
    assert active_seconds(replayed) == pytest.approx(0.01 + 14.5)
    assert coach_seconds(replayed) == pytest.approx(0.01 + 7.0)
    write(tmp_path / "r.jsonl", [header(), live, replayed, End(reason="turn_bound", ended_at=200.1)])
    c = load_corpus(tmp_path, cache=False)
    t = c.turns.set_index("turn")
    assert t.loc[2, "active_s"] == pytest.approx(14.51) and t.loc[2, "duration_s"] == pytest.approx(0.02)
    assert t.loc[2, "active_rel_start"] == pytest.approx(12.0 / 26.51)
    assert c.runs.iloc[0]["active_s"] == pytest.approx(26.51)


def test_a_redrawn_turn_counts_each_draw_once(tmp_path):
    """A redrawn turn's latency is the sum of its draws: on a replay, the draws that came from
    the cache count their recorded latency (not the turn's total as well)."""
    from adakit.record import DRAW, ModelCall, read_run, replayed_seconds

    draws = [ModelCall(purpose=DRAW, model="m", latency_s=4.0, cached=True, draw=0, repeat_of=1,
                       text="<a/>"),
             ModelCall(purpose=DRAW, model="m", latency_s=6.0, cached=False, draw=1,
                       temperature=0.4, seed=7)]
    t = turn(2).model_copy(update={"latency_s": 10.0, "cached": False, "model_calls": [
        *draws, ModelCall(purpose="hint", model="h", latency_s=3.0, cached=True)]})
    assert replayed_seconds(t) == pytest.approx((4.0 + 3.0, 0.0))
    write(tmp_path / "r.jsonl", [header(), t])
    line = (tmp_path / "r.jsonl").read_text().splitlines()[1]
    assert '"repeat_of":1' in line and '"seed":7' in line
    assert line.count('"text"') == 1 and '"draw"' not in line.split('"purpose":"hint"')[1]
    assert read_run(tmp_path / "r.jsonl").turns[0].model_calls == t.model_calls
