"""Nothing lost, nothing silently wrong: damaged run files are refused naming the file and the
line (or, header-less, skipped with a note), a damaged response-cache entry is set aside and
named, and a local model's failure says what happened to its llama.cpp server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from adakit.record import (
    HeaderlessRunFile,
    RunFileError,
    load_corpus,
    open_corpus,
    read_run,
    read_runs,
)
from adakit.study.retry import run_state
from adakit.study.spec import RunSpec
from adakit.synthetic import synthetic_run, write_run

TOOLS = ["OVW", {"tool": "PKR", "file": "pkg/a.py", "ranges": [(1, 10)]}, "EXP",
         {"tool": "CON", "finalize": True}]


def _lines(tmp_path: Path, run_id: str = "r1") -> list[str]:
    """The lines of a finished synthetic run: header, four turns, end."""
    path = write_run(synthetic_run(run_id, tools=TOOLS, files={"pkg/a.py": 100}),
                     tmp_path / "src" / f"{run_id}.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(x)["kind"] for x in lines] == ["header"] + ["turn"] * 4 + ["end"]
    return lines


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- damaged records


def test_interleaved_launches_repeat_turn_numbers_and_are_refused(tmp_path: Path) -> None:
    """Two launches appending to one file: turns 1, 2, 2, ... The file and the line of the
    first repeated turn are named."""
    h, t1, t2, t3, t4, end = _lines(tmp_path)
    bad = _write(tmp_path / "runs" / "r1.jsonl", [h, t1, t2, t2, t3, t3, t4, end, end])
    with pytest.raises(RunFileError, match=re.escape(f"{bad}:4: turn 2 repeats turn 2")) as ei:
        read_run(bad)
    assert ei.value.path == bad and ei.value.line == 4


def test_out_of_order_turns_are_refused(tmp_path: Path) -> None:
    h, t1, t2, t3, t4, end = _lines(tmp_path)
    bad = _write(tmp_path / "r1.jsonl", [h, t1, t2, t3, t2, t4, end])
    with pytest.raises(RunFileError, match=re.escape(f"{bad}:5: turn 2 comes after turn 3")):
        read_run(bad)


def test_two_end_records_or_a_record_after_the_end_are_refused(tmp_path: Path) -> None:
    h, t1, t2, t3, t4, end = _lines(tmp_path)
    two = _write(tmp_path / "two.jsonl", [h, t1, t2, t3, t4, end, end])
    with pytest.raises(RunFileError, match=re.escape(
            f"{two}:7: a second end record after the end record of line 6")):
        read_run(two)
    after = _write(tmp_path / "after.jsonl", [h, t1, t2, end, t3])
    with pytest.raises(RunFileError, match=re.escape(
            f"{after}:5: a turn record after the end record of line 4")):
        read_run(after)


def test_a_second_header_is_refused(tmp_path: Path) -> None:
    h, t1, t2, t3, t4, end = _lines(tmp_path)
    bad = _write(tmp_path / "r1.jsonl", [h, t1, h, t2])
    with pytest.raises(RunFileError, match=re.escape(f"{bad}:3: a second header record")):
        read_run(bad)


def test_a_damaged_run_never_counts_as_finished(tmp_path: Path) -> None:
    """The launcher's run state of a damaged file is "to run", with the refusal that says why
    (the run sets the file aside and starts again), never "finished"."""
    h, t1, t2, t3, t4, end = _lines(tmp_path)
    spec = RunSpec("s", "synth-A", "flask", "architecture_analysis", "natural", 0, 0)
    path = _write(tmp_path / f"{spec.run_id}.jsonl", [h, t1, t1, t2, t2, t3, t4, end, end])
    state = run_state(path, spec)
    assert state.status == "to_run"
    assert f"{path}:3: turn 1 repeats turn 1" in state.refused


def test_the_loader_and_open_corpus_refuse_a_damaged_file(tmp_path: Path) -> None:
    h, t1, t2, t3, t4, end = _lines(tmp_path)
    _write(tmp_path / "runs" / "good.jsonl", _lines(tmp_path, "good"))
    bad = _write(tmp_path / "runs" / "r1.jsonl", [h, t1, t2, t3, t4, end, end])
    for load in (lambda: load_corpus(tmp_path / "runs", cache=False),
                 lambda: open_corpus(tmp_path / "runs", verbose=False),
                 lambda: read_runs(tmp_path / "runs")):
        with pytest.raises(RunFileError, match=re.escape(f"{bad}:7: a second end record")):
            load()


# --------------------------------------------------------------------------- not text, cut


def test_a_binary_file_is_named_and_said_not_to_be_text(tmp_path: Path) -> None:
    gz = tmp_path / "runs" / "r1.jsonl"
    gz.parent.mkdir()
    gz.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xed\x9d\n\xc3\x90")
    with pytest.raises(RunFileError, match=re.escape(f"{gz}:1: not a text file")):
        read_run(gz)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(_lines(tmp_path)[0].encode() + b"\n" + '{"kind": "tür"}\n'.encode("latin-1"))
    with pytest.raises(RunFileError, match=re.escape(f"{latin}:2: not a text file (byte 0xfc")):
        read_run(latin)


def test_a_file_cut_inside_a_string_says_truncated(tmp_path: Path) -> None:
    """The last line stops inside a string (and the file still ends in a newline): truncated,
    not "not JSON"; the writer's fast path and json.loads (other key orders) agree."""
    h, t1, t2, *_ = _lines(tmp_path)
    cut = t2[: t2.index('"raw_text":"') + 20]
    for name, last in (("fast", cut), ("plain", '{"turn": 2, "raw_text": "half a rep')):
        path = _write(tmp_path / f"{name}.jsonl", [h, t1, last])
        with pytest.raises(RunFileError) as ei:
            read_run(path)
        assert str(ei.value).startswith(f"{path}: truncated at line 3: the record stops inside a string")
        assert "not JSON" not in str(ei.value) and "at at" not in str(ei.value)
    middle = _write(tmp_path / "middle.jsonl", [h, cut, t1])
    with pytest.raises(RunFileError, match="truncated at line 2: .* more records follow it"):
        read_run(middle)
    broken = _write(tmp_path / "broken.jsonl", [h, '{"turn": 2, oops, "started_at": 1}'])
    with pytest.raises(RunFileError, match=re.escape(f"{broken}:2: not JSON (")) as ei:
        read_run(broken)
    assert "at at" not in str(ei.value) and "truncated" not in str(ei.value)


# --------------------------------------------------------------------------- header-less files


def test_header_less_files_are_their_own_kind_of_refusal(tmp_path: Path) -> None:
    h, *_ = _lines(tmp_path)
    cases = {"empty.jsonl": b"", "zeros.jsonl": b"\0" * 4096, "blank.jsonl": b"\n\n",
             "torn.jsonl": h.encode()[:40]}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(HeaderlessRunFile, match="no header record"):
            read_run(tmp_path / name)


def test_read_runs_lists_header_less_files_and_reads_the_rest(tmp_path: Path) -> None:
    """The loader's way of reading a corpus, for every reader that must agree with it (the
    judge among them)."""
    _write(tmp_path / "runs" / "a.jsonl", _lines(tmp_path, "a"))
    (tmp_path / "runs" / "empty.jsonl").write_bytes(b"")
    read = read_runs(tmp_path / "runs")
    assert [rf.header.run_id for rf in read.runs] == ["a"]
    assert read.skipped == [tmp_path / "runs" / "empty.jsonl"]
