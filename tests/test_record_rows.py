"""Run files read for their rows (``read_run_rows``): the same values and the same refusals
as ``read_run``; and the tidy rows, column by column."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest
from pydantic import BaseModel

from adakit import config
from adakit.record import (
    READ_COLUMNS,
    RUN_COLUMNS,
    TURN_COLUMNS,
    ConditionInfo,
    End,
    ForkInfo,
    Header,
    Injection,
    ModelCall,
    ModelInfo,
    ParseError,
    RunWriter,
    Sidechain,
    SourceInfo,
    TaskInfo,
    ToolCall,
    ToolMetrics,
    Turn,
    WorldInfo,
    _run_rows,
    call_json,
    iter_run_files,
    load_corpus,
    read_run,
    read_run_rows,
)


def plain(value: Any) -> Any:
    """A record as nested builtins with each leaf's type kept, for models and mirrors alike."""
    if isinstance(value, BaseModel):
        return {"": type(value).__name__, **{f: plain(getattr(value, f)) for f in type(value).model_fields}}
    if isinstance(value, msgspec.Struct):
        return {"": type(value).__name__, **{f: plain(getattr(value, f)) for f in value.__struct_fields__}}
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [plain(v) for v in value])
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


def records(rf) -> Any:
    return plain([rf.header, *rf.turns, rf.end]), rf.torn_bytes, rf.finished


def same_read(path: Path) -> None:
    """Both readers give equal records, or both refuse with the same error and message."""
    try:
        want = records(read_run(path))
    except Exception as exc:  # noqa: BLE001 - the refusal itself is compared
        with pytest.raises(type(exc)) as got:
            read_run_rows(path)
        assert str(got.value) == str(exc)
        return
    assert records(read_run_rows(path)) == want


def full_run() -> list[BaseModel]:
    """A run whose records set every optional field at least once."""
    head = Header(
        run_id="full", study="s", model=ModelInfo(name="m", kind="local", temperature=0.2, max_tokens=300,
                                                  weights={"sha256": "ab"}, sampling={"top_p": 0.9}),
        world=WorldInfo(name="w", version="1", language="python", source="pypi", sha256="cd"),
        task=TaskInfo(family="risk_review", target="x.py", prompt="p"),
        condition=ConditionInfo(name="budget", budget=8, params={"k": [1, 2.5, None]}),
        turn_bound=12, seed=3, repeat=1, started_at=100.0, scaffold={"close_turn": "Close now."},
        source=SourceInfo(format="claude-code", file="a.jsonl", sha256="ef", agent="claude", timing="recorded"),
        forked_from=ForkInfo(parent="p", turn=2, prefix_sha256="00", change="inject", value="hi", seed=4),
    )
    first = Turn(
        turn=1, started_at=100.0, ended_at=103.5, latency_s=2, tokens_in=10, tokens_out=5, tokens_reused=4,
        cost_usd=0.01, cached=True, raw_text="raw é", thinking="think 😀",
        call=ToolCall(tool="peek_code_region", params={"file_path": "a.py", "start_line": 3, "x": 1.5e-7}),
        observation="obs", metrics=ToolMetrics(tool="PKR", file="a.py", ranges=[(3, 9), (20, 21)], lines_viewed=9,
                                               block="f", symbol="g", result_count=2, confidence="high"),
        state_changes=[{"memory": "m"}], injected=[Injection(source="compaction", text="summary")],
        coach={"decision": "allow", "started_at": 101.0, "ended_at": 102.0, "calls": [{"cached": True, "latency_s": 0.5}]},
        model_calls=[ModelCall(purpose="draw", model="m", latency_s=1.0, cached=True, draw=0, repeat_of=1,
                               temperature=0.7, seed=9, text="t"), ModelCall(purpose="hint", model="h")],
        dropped_messages=2, observation_chars=3,
        sidechain=Sidechain(id="task-1", parent_turn=None, agent="explore", depth=2),
    )
    second = Turn(turn=3, started_at=104.0, ended_at=106.0,
                  parse_error=ParseError(kind="bad_value", message="no"),
                  metrics=ToolMetrics(error_type="malformed", finalize=False, exit_code=1, mapped_by="shell"))
    end = End(reason="finalize", ended_at=107.0, conclusion="done", conclusion_title="T", error=None,
              totals={"cost_usd": 0.01}, failure=None, retryable=False, exit_status="ok", submission="diff")
    return [head, first, second, end]


def write(path: Path, recs: list[BaseModel]) -> Path:
    with RunWriter(path) as w:
        for r in recs:
            w.write(r)
    return path


def test_every_field_of_every_record_reads_the_same(tmp_path):
    path = write(tmp_path / "full.jsonl", full_run())
    fast = read_run_rows(path)
    assert isinstance(fast.turns[0], msgspec.Struct)  # the mirror, not a fall back to read_run
    assert records(fast) == records(read_run(path))
    assert fast.turns[0].metrics.ranges == [(3, 9), (20, 21)]


def test_shipped_corpora_read_the_same_through_the_mirror():
    roots = [config.ROOT / "data" / "reference" / "local-v4" / "runs",
             config.ROOT / "data" / "reference" / "local-v4" / "runs.forks",
             config.ROOT / "data" / "runs" / "imported" / "examples"]
    paths = [p for root in roots if root.is_dir() for p in iter_run_files(root)]
    assert len(paths) >= 65
    for path in paths:
        assert records(read_run_rows(path)) == records(read_run(path)), path


LINES = {
    "header": '{"kind":"header","run_id":"r","model":{"name":"m"},"world":{"name":"w"},'
              '"task":{"family":"t"},"condition":{"name":"c"},"turn_bound":5,"started_at":1.0}',
    "turn": '{"kind":"turn","turn":1,"started_at":1.0,"ended_at":2.0}',
    "end": '{"kind":"end","reason":"finalize","ended_at":3.0}',
}


@pytest.mark.parametrize("turn", [
    '{"kind":"turn","turn":1,"started_at":1,"ended_at":2}',  # ints for floats
    '{"kind":"turn","turn":"1","started_at":1.0,"ended_at":2.0}',  # pydantic coerces these ...
    '{"kind":"turn","turn":1.0,"started_at":1.0,"ended_at":2.0,"cached":"true"}',
    '{"kind":"turn","turn":1,"started_at":1.0,"ended_at":2.0,"tokens_in":1e2,"cached":1}',
    '{"kind":"turn","turn":1,"started_at":1.0,"ended_at":2.0,"latency_s":NaN}',  # ... msgspec not
    '{"kind":"turn","turn":1,"started_at":1.0,"ended_at":2.0,"latency_s":1e400}',
    '{"kind":"turn","turn":1,"started_at":1.0,"ended_at":2.0,"coach":{"n":123456789012345678901234567890}}',
    '{"kind":"turn","turn":1,"started_at":1.0,"ended_at":2.0,"tokens_in":1,"tokens_in":2}',
    '{"kind":"turn","turn":1,"started_at":1.0,"ended_at":2.0,"metrics":{"ranges":[[1.0,2]]}}',
    '{"kind":"turn","turn":1,"started_at":1.0,"ended_at":2.0,"thinking":"a\\ud83d\\ude00"}',
])
def test_values_pydantic_would_coerce_are_read_as_read_run_reads_them(tmp_path, turn):
    path = tmp_path / "r.jsonl"
    path.write_text(f"{LINES['header']}\n{turn}\n{LINES['end']}\n")
    same_read(path)
    assert records(read_run_rows(path))[0][1][1]["turn"] == ("int", 1)


@pytest.mark.parametrize("body", [
    "",  # empty
    " \n\n",  # blank
    "{h}\n{t}\n{t}\n{e}\n",  # a repeated turn
    "{t}\n{h}\n{e}\n",  # a turn before the header
    "{h}\n{h}\n{e}\n",  # two headers
    "{h}\n{e}\n{t}\n",  # a record after the end
    "{e}\n",  # an end with no header
    "{h}\n{t}\n{e}",  # a torn last line (no newline)
    "{h}\n{t}\n{e}\n" + '{"kind":"turn","tu',  # a torn record after the end
    "{h}\n\0\0\0\n",  # NUL bytes
    "{h}\n" + '{"kind":"turn","turn":1,"started_at":1.0,"ended_at":2.0,"zz":1}\n',  # unknown field
    "{h}\n" + '{"kind":"turn","turn":1,"started_at":1.0,"ended_at":2.0,"metrics":{"error_type":"x"}}\n',
    "{h}\n" + '{"kind":"turn","turn":1,"started_at":1.0,"ended_at":2.0,"thinking":null}\n',
    "{h}\n" + '{"kind":"turn","turn":1,"started_at":1.0,"ended_at":2.0,"thinking":"a\\ud800"}\n',
    "{h}\n" + '{"kind":"turn","turn":1, oops\n',  # not JSON
    "{h}\n" + '{"kind":"end","reason":"finalize","kind":"turn"}\n',  # a kind changed inside
    "{h}\n" + '{"turn":1,"kind":"turn","started_at":1.0,"ended_at":2.0}\n',  # kind not first
    '{"kind":"header","schema_version":"2.0","run_id":"r","model":{"name":"m"},"world":{"name":"w"},'
    '"task":{"family":"t"},"condition":{"name":"c"},"turn_bound":5}\n',  # another major schema
])
def test_damaged_files_are_refused_or_read_exactly_as_read_run_does(tmp_path, body):
    path = tmp_path / "r.jsonl"
    for mark, kind in (("{h}", "header"), ("{t}", "turn"), ("{e}", "end")):
        body = body.replace(mark, LINES[kind])
    path.write_bytes(body.encode())
    same_read(path)


@pytest.mark.parametrize("depth", [100, 149, 199, 200, 250, 2000])
@pytest.mark.parametrize("field", ["coach", "call"])
def test_deep_nesting_is_refused_where_read_run_refuses_it(tmp_path, depth, field):
    """pydantic's parser stops at about 200 levels, msgspec's much deeper: the mirror must not
    take what read_run refuses (and must not fail differently)."""
    deep = "[" * depth + "]" * depth
    value = f'{{"a":{deep}}}' if field == "coach" else f'{{"tool":"t","params":{{"a":{deep}}}}}'
    path = tmp_path / "r.jsonl"
    path.write_text(f"{LINES['header']}\n" + LINES["turn"][:-1] + f',"{field}":{value}}}\n{LINES["end"]}\n')
    same_read(path)


def test_brackets_inside_strings_are_read_the_same(tmp_path):
    path = tmp_path / "r.jsonl"
    text = "x = {[(" * 300
    path.write_text(f"{LINES['header']}\n" + LINES["turn"][:-1] + f',"observation":"{text}"}}\n')
    same_read(path)
    assert read_run_rows(path).turns[0].observation == text


def test_bytes_that_are_not_utf8_are_refused_with_read_runs_message(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(LINES["header"].encode() + b"\n" + LINES["turn"].replace("1.0", '"\xff"').encode("latin-1")
                     + b"\n")
    same_read(path)


def test_call_json_is_the_models_own_json():
    from adakit.record import _FAST_KINDS, _row_decoders
    decode = _row_decoders()[next(p for p, m in _FAST_KINDS.items() if m is Turn)][1].decode
    nan = ToolCall.model_validate_json('{"tool":"t","params":{"x":NaN,"y":1e400,"z":-Infinity}}')
    assert call_json(nan) == nan.model_dump_json() == '{"tool":"t","params":{"x":null,"y":null,"z":null}}'
    for params in ({}, {"file_path": "a.py", "start_line": 3}, {"x": 1.5e-7, "y": [1e16, 2**70, None]},
                   {"s": "é\u2028\x7f\"\\\n", "nested": {"a": [True, False]}}):
        call = ToolCall(tool="t", params=params)
        mirror = decode(Turn(turn=1, started_at=0.0, ended_at=1.0, call=call).model_dump_json()).call
        assert isinstance(mirror, msgspec.Struct)
        assert call_json(call) == call_json(mirror) == call.model_dump_json()


def test_each_column_of_the_tidy_rows_holds_its_own_value(tmp_path):
    """Rows are tuples in column order: a run whose values differ column by column shows each
    under its own name."""
    path = write(tmp_path / "full.jsonl", full_run())
    for rf in (read_run(path), read_run_rows(path)):
        run, turns, reads = _run_rows(rf)
        assert len(run) == len(RUN_COLUMNS) and {len(t) for t in turns} == {len(TURN_COLUMNS)}
        r = dict(zip(RUN_COLUMNS, run, strict=True))
        assert (r["run_id"], r["study"], r["model"], r["model_kind"], r["world"], r["task"], r["target"],
                r["condition"], r["repeat"], r["seed"], r["turn_bound"], r["reason"], r["finished"],
                r["n_turns"]) == ("full", "s", "m", "local", "w", "risk_review", "x.py", "budget", 1, 3, 12,
                                  "finalize", True, 2)
        assert (r["started_at"], r["elapsed_s"], r["wall_s"], r["tokens_in"], r["tokens_out"], r["cost_usd"],
                r["cache_hits"], r["errors"], r["conclusion"], r["conclusion_chars"], r["closed"],
                r["path"], r["agent"], r["world_source"]) == (100.0, 7.0, 7.0, 10, 5, 0.01, 1, 1, "done", 4,
                                                               False, str(path), "claude", "pypi")
        assert r["active_s"] > 0 and r["coach_s"] == pytest.approx(1.5)  # span 1.0 + cached 0.5
        t = dict(zip(TURN_COLUMNS, turns[0], strict=True))
        assert {k: t[k] for k in ("run_id", "model", "world", "task", "condition", "turn", "tool", "tool_name",
                                  "action", "file", "start_line", "end_line", "lines_viewed", "structural",
                                  "block", "symbol", "result_count", "error_type", "parse_error", "finalize",
                                  "confidence", "thinking_chars", "output_chars", "started_at", "ended_at",
                                  "t_rel_start", "duration_s", "latency_s", "tokens_in", "tokens_out",
                                  "cached", "coach_decision", "n_injected", "dropped_messages",
                                  "tokens_reused", "sidechain", "sidechain_agent", "sidechain_parent",
                                  "sidechain_depth", "compaction")} == {
            "run_id": "full", "model": "m", "world": "w", "task": "risk_review", "condition": "budget",
            "turn": 1, "tool": "PKR", "tool_name": "peek_code_region", "action": None, "file": "a.py",
            "start_line": 3, "end_line": 9, "lines_viewed": 9, "structural": False, "block": "f",
            "symbol": "g", "result_count": 2, "error_type": None, "parse_error": None, "finalize": None,
            "confidence": "high", "thinking_chars": 7, "output_chars": 5, "started_at": 100.0,
            "ended_at": 103.5, "t_rel_start": 0.0, "duration_s": 3.5, "latency_s": 2.0, "tokens_in": 10,
            "tokens_out": 5, "cached": True, "coach_decision": "allow", "n_injected": 1,
            "dropped_messages": 2, "tokens_reused": 4, "sidechain": "task-1", "sidechain_agent": "explore",
            "sidechain_parent": None, "sidechain_depth": 2, "compaction": True}
        assert t["t_rel_end"] == pytest.approx(3.5 / 7) and t["coach_s"] == pytest.approx(1.5)
        assert t["active_s"] == pytest.approx(3.5 - 1.0 + 1.0)  # wall less the span, plus the cached draw
        assert (t["active_rel_start"], turns[1][TURN_COLUMNS.index("active_rel_start")]) == (0.0, t["active_rel_end"])
        late = dict(zip(TURN_COLUMNS, turns[1], strict=True))
        assert (late["turn"], late["parse_error"], late["error_type"], late["finalize"], late["tool_name"],
                late["sidechain"], late["compaction"]) == (3, "bad_value", "malformed", False, None, None, False)
        assert [dict(zip(READ_COLUMNS, d, strict=True)) for d in reads] == [
            {"run_id": "full", "model": "m", "world": "w", "task": "risk_review", "condition": "budget",
             "turn": 1, "tool": "PKR", "file": "a.py", "start_line": a, "end_line": b, "n_lines": b - a + 1}
            for a, b in [(3, 9), (20, 21)]]


def test_the_loader_reads_through_the_mirror_and_falls_back_per_file(tmp_path, monkeypatch):
    from adakit import record

    write(tmp_path / "a.jsonl", full_run())
    odd = tmp_path / "b.jsonl"  # a hand-edited file pydantic takes and msgspec does not
    odd.write_text(f"{LINES['header']}\n" + LINES["turn"].replace('"turn":1', '"turn":"1"') + "\n")
    by_pydantic: list[str] = []
    real = record.read_run
    monkeypatch.setattr(record, "read_run", lambda path, raw=None: by_pydantic.append(Path(path).name)
                        or real(path, raw))
    corpus = load_corpus(tmp_path, cache=False)
    assert by_pydantic == ["b.jsonl"]  # only the file the mirror refuses
    assert sorted(corpus.runs["run_id"]) == ["full", "r"]
    assert corpus.turns.groupby("run_id")["turn"].apply(list).to_dict() == {"full": [1, 3], "r": [1]}


hypothesis = pytest.importorskip("hypothesis")  # a dev extra; make test installs it
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_LEAF = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True)
         | st.text(max_size=6) | st.sampled_from(["PKR", "tool_error", "reminder", "draw", "1", "true"]))
_JSON = st.recursive(_LEAF, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.sampled_from(["source", "text", "purpose", "model", "id", "x"]),
                                       inner, max_size=3), max_leaves=6)
_TURN_FIELDS = [f for f in Turn.model_fields if f != "kind"]
_METRIC_FIELDS = list(ToolMetrics.model_fields)


@settings(max_examples=int(os.environ.get("ADAKIT_HYPOTHESIS_EXAMPLES", "100")),
          deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turn=st.dictionaries(st.sampled_from(_TURN_FIELDS), _JSON, max_size=4),
       metrics=st.none() | st.dictionaries(st.sampled_from(_METRIC_FIELDS), _JSON, max_size=3))
def test_any_turn_record_reads_as_read_run_reads_it(tmp_path, turn, metrics):
    """Random values in random fields of a turn: both readers agree, value or refusal."""
    record = {"kind": "turn", "turn": 1, "started_at": 1.0, "ended_at": 2.0, **turn}
    if metrics is not None:
        record["metrics"] = metrics
    path = tmp_path / "h.jsonl"
    path.write_text(f"{LINES['header']}\n{json.dumps(record)}\n")
    same_read(path)
