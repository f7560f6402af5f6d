"""Imports skip, never stop (issue 25, item 6): deep nesting, cut files and wrong shapes are
skipped with a one-line reason each and counted in the summary, and ``auto`` chooses a format
only on that format's own fields, saying which."""

from __future__ import annotations

import copy
import json
import random
import shutil
from pathlib import Path

import pytest

from adakit.cli import main as cli
from adakit.importers import batch
from adakit.importers.base import Target
from adakit.importers.batch import import_paths

FIXTURES = Path(__file__).parent / "fixtures" / "trajectories"
SWE_CMD = FIXTURES / "swe_agent" / "pallets__flask-5001.traj"
MINI = FIXTURES / "mini_swe_agent" / "pallets__flask-5003.traj.json"
OH = FIXTURES / "openhands" / "pallets__flask-5005.json"
GENERIC = FIXTURES / "generic" / "flask-blueprint-walk.jsonl"
AGENT_CLI = Path(__file__).parent / "fixtures" / "agent_cli"
DEEP = 1_100


def _reasons(rep) -> dict[str, str]:
    return {Path(r.path).name: r.reason for r in rep.skipped}


def test_deep_nesting_is_skipped_and_the_batch_goes_on(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "deep.traj").write_text("[" * DEEP + "]" * DEEP)
    (src / "deep_history.json").write_text('{"history": ' + "[" * DEEP + "]" * DEEP + "}")
    good = GENERIC.read_text()
    (src / "deep_line.jsonl").write_text(good + '{"role": "tool", "content": '
                                         + "[" * DEEP + "]" * DEEP + "}\n")
    shutil.copy(SWE_CMD, src / "good.traj")
    shutil.copy(GENERIC, src / "good.jsonl")
    out = tmp_path / "out"
    rep = import_paths("auto", [src], out, progress=False)
    assert sorted(Path(r.path).name for r in rep.imported) == ["good.jsonl", "good.traj"]
    assert _reasons(rep) == {n: "too deeply nested" for n in
                             ("deep.traj", "deep_history.json", "deep_line.jsonl")}
    assert rep.summary().endswith("skipped 3: 3 too deeply nested")
    printed = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("skipped")]
    assert len(printed) == 3 and all("too deeply nested (" in ln for ln in printed)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        Path(r.written).name for r in rep.imported)  # no partial files


def test_deep_nesting_in_one_line_of_an_openhands_output_costs_that_line(tmp_path):
    record = json.loads(OH.read_text())
    deep = '{"history": ' + "[" * DEEP + "]" * DEEP + "}"
    path = tmp_path / "output.jsonl"
    path.write_text(json.dumps(record) + "\n" + deep + "\n")
    rep = import_paths("auto", [path], tmp_path / "out", progress=False)
    assert len(rep.imported) == 1 and rep.counts() == {"too deeply nested": 1}
    assert rep.skipped[0].path.endswith("output.jsonl:2")


def test_files_cut_anywhere_are_truncated(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    text = SWE_CMD.read_text()
    inside = text.index('"observation"') + 20  # inside the string value that follows
    (src / "in_string.traj").write_text(text[:inside])
    (src / "between.traj").write_text(text[: text.index('"observation"') - 1])
    lines = GENERIC.read_text()
    (src / "cut.jsonl").write_text(lines[: len(lines) - 30])
    rep = import_paths("auto", [src], tmp_path / "out", progress=False)
    assert _reasons(rep) == {"in_string.traj": "truncated JSON", "between.traj": "truncated JSON",
                             "cut.jsonl": "truncated JSON"}
    assert all(" at at " not in r.detail for r in rep.skipped)


def test_wrong_shapes_are_skipped_with_a_reason_each(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    swe = json.loads(SWE_CMD.read_text())
    shapes = {
        "number.traj": 5, "string.traj": "a trajectory", "nulls.traj": [None, None],
        "steps_are_numbers.traj": {**swe, "trajectory": [1, 2, 3]},
        "info_is_text.traj": {**swe, "info": "done"},
        "history_is_an_object.json": {"history": {"a": 1}},
        "role_is_a_list.jsonl": None,
    }
    for name, value in shapes.items():
        if value is not None:
            (src / name).write_text(json.dumps(value))
    (src / "role_is_a_list.jsonl").write_text('{"role": ["user"], "content": "x"}\n')
    rep = import_paths("auto", [src], tmp_path / "out", progress=False)
    reasons = _reasons(rep)
    # a SWE-agent file whose info is text still has its steps: it imports
    assert [Path(r.path).name for r in rep.imported] == ["info_is_text.traj"]
    assert set(reasons) == set(shapes) - {"info_is_text.traj"}
    assert set(reasons.values()) == {"unknown shape"}
    assert all("\n" not in r.detail and r.detail for r in rep.skipped)
    assert rep.summary().endswith(f"skipped {len(reasons)}: {len(reasons)} unknown shape")


@pytest.mark.parametrize("fmt", ["auto", "swe-agent", "mini-swe-agent", "openhands", "generic",
                                 "claude-code", "codex", "atif"])
def test_mangled_fixtures_never_stop_an_import(tmp_path, fmt):
    """Every fixture with random parts replaced by other JSON values: each file is imported or
    skipped with a reason, never raises (seeded, so a failure reproduces)."""
    rnd = random.Random(f"shapes-{fmt}")
    values = [None, 0, -1, 1e308, "x", "", [], {}, [1], {"a": 1}, True, [[["deep"]]]]

    def mangle(node, depth=0):
        if isinstance(node, (dict, list)) and node:
            key = rnd.choice(list(node)) if isinstance(node, dict) else rnd.randrange(len(node))
            if rnd.random() < 0.4 or depth > 4:
                node[key] = copy.deepcopy(rnd.choice(values))
            else:
                mangle(node[key], depth + 1)

    batch._init(fmt, str(tmp_path / "out"), frozenset(), Target())
    (tmp_path / "out").mkdir()
    seen = 0
    sources = sorted([*FIXTURES.rglob("*.*"), *AGENT_CLI.rglob("*.jsonl"),
                      *AGENT_CLI.rglob("*.json")])
    for source in sources:
        lines = source.name.endswith(".jsonl")
        for k in range(12):
            text = source.read_text()
            data = [json.loads(ln) for ln in text.splitlines() if ln.strip()] if lines else json.loads(text)
            for _ in range(rnd.randint(1, 4)):
                mangle(data)
            path = tmp_path / f"{k}-{source.name}"
            path.write_text("\n".join(map(json.dumps, data)) + "\n" if lines else json.dumps(data))
            for res in batch.import_file(path):
                assert res.ok or (res.reason and "\n" not in res.detail), res
                seen += 1
    assert seen >= 12 * len(sources)


def test_auto_chooses_by_the_files_own_fields_and_says_which(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    swe = json.loads(SWE_CMD.read_text())
    (src / "no_trajectory.traj").write_text(json.dumps({k: v for k, v in swe.items()
                                                        if k != "trajectory"}))
    shutil.copy(MINI, src / "mini_named_like_swe.traj")  # the name says SWE-agent, the fields do not
    shutil.copy(SWE_CMD, src / "swe.traj")
    rep = import_paths("auto", [src], tmp_path / "out", progress=False)
    assert _reasons(rep) == {"no_trajectory.traj": "unknown shape"}
    detail = rep.skipped[0].detail
    assert "no format's markers" in detail and "history" in detail and "info" in detail
    by_name = {Path(r.path).name: (r.format, r.markers) for r in rep.imported}
    assert by_name == {
        "swe.traj": ("swe-agent", "a 'trajectory' list of steps with 'action'"),
        "mini_named_like_swe.traj": (
            "mini-swe-agent", "a 'messages' list of chat messages with 'role' and 'content'")}
    assert rep.detection_lines() == [
        "auto: 1 as mini-swe-agent (a 'messages' list of chat messages with 'role' and 'content')",
        "auto: 1 as swe-agent (a 'trajectory' list of steps with 'action')"]


def test_a_swe_agent_history_is_not_an_openhands_event_stream(tmp_path):
    swe = json.loads(SWE_CMD.read_text())
    assert any("action" in h for h in swe["history"])  # what fooled auto before
    path = tmp_path / "no_trajectory.traj"
    path.write_text(json.dumps({k: v for k, v in swe.items() if k != "trajectory"}))
    rep = import_paths("openhands", [path], tmp_path / "out", progress=False)
    assert not rep.imported and rep.counts() == {"unknown shape": 1}
    assert "chat messages" in rep.skipped[0].detail


def test_cli_prints_the_markers_auto_used(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(OH, src)
    shutil.copy(GENERIC, src)
    assert cli(["import", "auto", str(src), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "auto: 1 as openhands (a 'history' list of events with 'action'/'observation' " \
           "(no 'role'))" in out
    assert any(ln.startswith("auto: 1 as generic (a 'role' of ") for ln in out)
    assert out[-1].startswith("imported 2 runs")
