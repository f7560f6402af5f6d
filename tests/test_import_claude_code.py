"""``adakit import claude-code`` (issue 27) on two hand-made sessions in the shape of two CLI
versions (tests/fixtures/agent_cli/claude_code): v1.0-blueprint-routes.jsonl, a 1.0.x-like
session (text results, a subagent's sidechain in the file, a ``summary`` record) and
v2.0-appctx-push.jsonl, a 2.x-like one (structured ``toolUseResult``, a compaction, the
subagent in its own ``agent-*.jsonl``). Expected values are read off the fixtures by hand."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from test_schema import validate_corpus

from adakit.cli import main as cli
from adakit.importers.batch import import_paths
from adakit.importers.mapping import Context, map_tool, patch_lines
from adakit.lenses import footprint as fp
from adakit.lenses import journey, policy, surface
from adakit.record import Turn, load_corpus, read_run

FIXTURES = Path(__file__).parent / "fixtures" / "agent_cli" / "claude_code"
V1 = FIXTURES / "v1.0-blueprint-routes.jsonl"
V2 = FIXTURES / "v2.0-appctx-push.jsonl"
AGENT_FILE = FIXTURES / "agent-a7f3c21d.jsonl"


def one(path: Path, out: Path, fmt: str = "claude-code", **kw):
    rep = import_paths(fmt, [path], out, progress=False, **kw)
    assert len(rep.imported) == 1, rep.summary()
    return rep.imported[0], read_run(rep.imported[0].written)


def row(t: Turn) -> tuple:
    m = t.metrics
    return (t.call.tool if t.call else None, m.tool, m.mapped_by, m.file, *m.ranges)


def test_a_1_0_session_with_an_inline_subagent(tmp_path):
    res, rf = one(V1, tmp_path)
    assert [row(t) for t in rf.turns] == [
        ("Glob", "EXP", "tool:glob", None),
        ("Grep", "EXP", "tool:grep", "src/flask/sansio/blueprints.py"),
        ("Read", "PKR", "tool:read", "src/flask/sansio/blueprints.py", (273, 312)),
        ("Task", "EXE", "tool:subagent", None),
        ("Grep", "EXP", "tool:grep", None),
        ("Read", "PKR", "tool:read", "src/flask/globals.py", (1, 51)),
        ("TodoWrite", "MEM", "tool:plan", None),
        ("Bash", "PKR", "shell:sed_n", "src/flask/sansio/blueprints.py", (100, 130)),
        ("Edit", "EDT", "tool:edit", "src/flask/sansio/blueprints.py", (118, 126)),
        ("mcp__docs__lookup", "EXE", "tool:other", None),
    ]
    t = {x.turn: x.metrics for x in rf.turns}
    assert (t[1].symbol, t[1].result_count) == ("**/blueprints.py", 2)
    assert (t[2].action, t[2].symbol, t[2].result_count) == ("go_to_definition", "register", 2)
    assert (t[5].symbol, t[5].result_count) == ("deferred_functions", 1)
    assert (t[7].action, t[7].result_count) == ("plan", 3)
    assert t[10].action == "mcp__docs__lookup"  # an unknown tool keeps its name
    # the subagent's two turns: a span of the run, started by the Task call of turn 4
    spans = {x.turn: x.sidechain for x in rf.turns if x.sidechain is not None}
    assert sorted(spans) == [5, 6]
    assert {(s.parent_turn, s.agent, s.depth) for s in spans.values()} == {(4, "general-purpose", 1)}
    assert len({s.id for s in spans.values()}) == 1
    # the summary record, before any turn, is a marked event on the first turn
    first = rf.turns[0]
    assert [(i.source, i.text) for i in first.injected] == [
        ("compaction", "Blueprint route registration walk")]
    h = rf.header
    assert (h.source.format, h.source.agent, h.source.agent_version, h.source.timing) == (
        "claude-code", "claude-code", "1.0.43", "recorded")
    assert h.task.target == "5f0c9a2e-1b7d-4c1e-9a53-2d6f1e0b7a11"
    assert h.task.prompt == "How does a blueprint register its routes on the application?"
    assert h.model.name == "claude-sonnet-4-20250514"
    assert rf.turns[2].thinking == "Read the register method." and rf.turns[2].tokens_in == 1200
    assert rf.end.conclusion.startswith("A blueprint records deferred functions")
    assert rf.end.totals["subagent_steps"] == 2 and rf.end.totals["compactions"] == 1
    assert res.unused["field:requestId"] == 12 and res.unused["field:leafUuid"] == 1


def test_a_2_x_session_with_structured_results_and_a_subagent_file(tmp_path, flask_world):
    res, rf = one(V2, tmp_path, world="flask")
    assert [row(t) for t in rf.turns] == [
        ("Grep", "EXP", "tool:grep", None),
        ("Read", "PKR", "tool:read", "src/flask/ctx.py", (240, 299)),
        ("Read", "PKR", "tool:read", "src/flask/globals.py", (1, 51)),
        ("Task", "EXE", "tool:subagent", None),
        ("Glob", "EXP", "tool:glob", None),
        ("Bash", "EXP", "shell:grep", None),
        ("TaskCreate", "MEM", "tool:plan", None),
        ("MultiEdit", "EDT", "tool:edit", "src/flask/ctx.py", (253, 254)),
        ("Write", "EDT", "tool:edit", "notes/appctx.md", (1, 3)),
        ("Read", "PKR", "tool:read", "src/flask/context.py"),
        ("WebFetch", "EXE", "tool:execute", None),
        ("ToolSearch", "EXE", "tool:other", None),
    ]
    t = {x.turn: x for x in rf.turns}
    assert (t[1].metrics.action, t[1].metrics.symbol, t[1].metrics.result_count) == (
        "go_to_definition", "push", 1)
    assert t[1].thinking.startswith("The app context is pushed by a push method")
    assert t[2].metrics.action == "range" and t[3].metrics.action is None
    assert (t[6].metrics.symbol, t[6].metrics.result_count) == ("_cv_app", 2)
    assert t[10].metrics.error_type == "tool_error" and t[11].metrics.error_type is None
    assert [(x.turn, x.sidechain.id, x.sidechain.parent_turn, x.sidechain.agent)
            for x in rf.turns if x.sidechain] == [(5, "a7f3c21d", 4, "Explore"),
                                                 (6, "a7f3c21d", 4, "Explore")]
    # the compaction came after the subagent's turns: marked on the main agent's turn before
    # it (the summary is in the next prompt, as with every injection)
    marked = [(x.turn, i.source) for x in rf.turns for i in x.injected]
    assert marked == [(4, "compaction")]
    assert t[4].injected[0].text.startswith("Conversation compacted\n\nThis session is being continued")
    assert rf.header.source.agent_version == "2.0.14" and rf.header.world.name == "flask"
    assert {"type:file-history-snapshot": 1, "type:queue-operation": 1, "type:attachment": 1,
            "field:slug": 30, "field:thinkingMetadata": 1}.items() <= res.unused.items()


def test_the_folder_imports_sessions_and_skips_the_subagent_file_benignly(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli(["import", "auto", str(FIXTURES), "--out", str(out), "--no-progress"]) == 0
    std = capsys.readouterr()
    assert "auto: 3 as claude-code ('type' user/assistant lines with 'sessionId', 'uuid' and " \
           "'message')" in std.out
    assert std.out.splitlines()[-1].endswith("skipped 1: 1 subagent file")
    notes = [ln for ln in std.err.splitlines() if ln.startswith("not used in ")]
    assert len(notes) == 2 and any("1 type:file-history-snapshot" in ln for ln in notes)
    assert validate_corpus(out) == 2 + 10 + 12 + 2  # headers, turns, ends all validate
    again = import_paths("auto", [FIXTURES], out, progress=False)
    assert not again.imported and again.bad == 0


def test_without_its_subagent_file_the_session_still_imports(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(V2, src)
    _, rf = one(src / V2.name, tmp_path / "out")
    assert [x.call.tool for x in rf.turns][3:5] == ["Task", "TaskCreate"]
    assert not any(x.sidechain for x in rf.turns)


def test_edits_are_not_reads_and_ordinary_turns_carry_no_sidechain(tmp_path, flask_world):
    import_paths("claude-code", [V1, V2], tmp_path, world="flask", progress=False)
    c = load_corpus(tmp_path, cache=False)
    assert set(c.reads["tool"]) == {"PKR"}  # the edits' lines are in the turns, not the reads
    spans = c.turns.dropna(subset=["sidechain"]).groupby("sidechain")["turn"].apply(list)
    assert spans.to_dict() == {"a7f3c21d": [5, 6], "5f0c9a2e-0014": [5, 6]}  # agent id; first line's uuid
    assert c.turns["sidechain"].isna().sum() == 22 - 4
    edits = c.turns[c.turns["tool"] == "EDT"]
    assert sorted(zip(edits["start_line"], edits["end_line"], strict=True)) == [
        (1, 3), (118, 126), (253, 254)]
    plain = Turn(turn=1, started_at=0.0, ended_at=1.0)
    assert "sidechain" not in plain.model_dump_json() and "sidechain" not in plain.model_dump()
    lines = [json.loads(ln) for p in tmp_path.glob("*.jsonl") for ln in p.read_text().splitlines()]
    turns = [r for r in lines if r["kind"] == "turn"]
    assert sum("sidechain" in r for r in turns) == 4 and len(turns) == 22


def test_lenses_0_1_2_4_on_imported_sessions(tmp_path, flask_world):
    import_paths("claude-code", [V1, V2], tmp_path, world="flask", progress=False)
    c = load_corpus(tmp_path, cache=False)
    surf = surface.run_surface(c).set_index("run_id")
    v1 = surf.loc[c.runs.loc[c.runs["run_id"].str.contains("5f0c9a2e"), "run_id"].iloc[0]]
    assert (v1["turns"], v1["PKR"], v1["EXP"], v1["MEM"], v1["EDT"], v1["EXE"]) == (10, 3, 3, 1, 1, 2)
    assert v1["loc_viewed"] == 40 + 51 + 31  # 273-312, globals.py 1-51, 100-130
    ev = journey.arc_events(c)
    assert {"EDT", "EXE"} <= set(ev["kind"]) and len(ev) == 22
    plt.close(journey.plot_journey_arcs(ev, c.runs, facet=["model"]))
    tags = policy.tag_transitions(c.turns)
    assert len(tags) == 20 and {"edit", "run"} <= set(tags["tag"])
    files, _ = fp.map_files("flask", c.reads, source=fp.world_source(c.runs, "flask"))
    dens = fp.trace_density(c.reads, c.runs).set_index("file")
    assert dens.loc["src/flask/ctx.py", "lines_shown"] == 60
    assert dens.loc["src/flask/globals.py", "lines_shown"] == 102  # read once in each session
    plt.close(fp.plot_repo_map(files, dens.reset_index()))


# --------------------------------------------------------------------------- mapping units


def _read(args: dict, observation: str, result: dict | None = None, length: int | None = None):
    ctx = Context(cwd="/r", resolve=lambda p, cwd: p.removeprefix("/r/"),
                  line_count=lambda rel: length, result=result)
    return map_tool("Read", args, observation, ctx)


def test_read_ranges():
    shown = "\n".join(f"{n:>6}\u2192x" for n in range(10, 20))  # lines 10-19
    assert _read({"file_path": "/r/a.py", "offset": 10, "limit": 30}, shown).ranges == [(10, 19)]
    assert _read({"file_path": "/r/a.py"}, shown).ranges == [(10, 19)]
    tabbed = "\n".join(f"{n:>6}\tx" for n in range(1, 6))
    assert _read({"file_path": "/r/a.py"}, tabbed).ranges == [(1, 5)]
    # offset/limit without a numbered result: the window asked for, clipped to the file
    assert _read({"file_path": "/r/a.py", "offset": 90, "limit": 50}, "", length=100).ranges == [(90, 100)]
    info = {"file": {"startLine": 5, "numLines": 3, "totalLines": 8}}
    assert _read({"file_path": "/r/a.py", "offset": 5, "limit": 100}, "...", info).ranges == [(5, 7)]
    failed = _read({"file_path": "/r/b.py"}, "<tool_use_error>File does not exist.</tool_use_error>")
    assert failed.failed and failed.ranges == []


def test_patch_lines():
    hunk = {"newStart": 10, "lines": [" a", " b", "-c", "+C", "+D", " e", "-f", " g"]}
    assert patch_lines([hunk]) == [(12, 13), (15, 15)]  # c became C, D (12-13); f removed before g (15)
    assert patch_lines([{"newStart": 1, "lines": ["+x"]}, {"newStart": 40, "lines": [" y", "+z"]}]) == [
        (1, 1), (41, 41)]
    assert patch_lines("nonsense") == [] and patch_lines([{"lines": ["+x"]}]) == []


@pytest.mark.parametrize("name", ["generic", "claude-code"])
def test_each_jsonl_format_is_chosen_only_on_its_own_fields(tmp_path, name):
    generic = Path(__file__).parent / "fixtures" / "trajectories" / "generic" / "flask-blueprint-walk.jsonl"
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(V1 if name == "claude-code" else generic, src / "session.jsonl")
    rep = import_paths("auto", [src], tmp_path / "out", progress=False)
    assert [r.format for r in rep.imported] == [name]
    other = "generic" if name == "claude-code" else "claude-code"
    wrong = import_paths(other, [src], tmp_path / "out2", progress=False)
    assert wrong.counts() == {"unknown shape": 1}


def _line(kind: str, uuid: str, parent: str | None, content, side: bool = False, **kw) -> dict:
    role = "assistant" if kind == "assistant" else "user"
    return {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "s", "cwd": "/r",
            "version": "1.0.60", "isSidechain": side, "timestamp": "2025-07-10T10:00:00Z",
            "message": {"role": role, "content": content}, **kw}


def _use(tid: str, name: str, **inp) -> list:
    return [{"type": "tool_use", "id": tid, "name": name, "input": inp}]


def _result(tid: str, text: str) -> list:
    return [{"type": "tool_result", "tool_use_id": tid, "content": text}]


def test_parallel_subagents_interleaved_in_the_file_keep_their_own_spans(tmp_path):
    """Two Task calls in one reply; their sidechains' lines interleave: each turn goes to the
    span its chain of parentUuid starts, linked to the call whose prompt started it."""
    lines = [
        _line("user", "u1", None, "Compare the two readers."),
        _line("assistant", "a1", "u1", _use("t1", "Task", prompt="Read a.py", subagent_type="x")
              + _use("t2", "Task", prompt="Read b.py", subagent_type="y")),
        _line("user", "sb1", None, "Read b.py", side=True),
        _line("user", "sa1", None, "Read a.py", side=True),
        _line("assistant", "sa2", "sa1", _use("r1", "Read", file_path="/r/a.py"), side=True),
        _line("assistant", "sb2", "sb1", _use("r2", "Read", file_path="/r/b.py"), side=True),
        _line("user", "sb3", "sb2", _result("r2", "     1\u2192b"), side=True),
        _line("user", "sa3", "sa2", _result("r1", "     1\u2192a\n     2\u2192a"), side=True),
        _line("user", "u2", "a1", _result("t1", "a done")),
        _line("user", "u3", "u2", _result("t2", "b done")),
        _line("summary", "x", None, None, summary="Readers compared"),
    ]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    _, rf = one(path, tmp_path / "out")
    got = [(t.turn, t.call.tool, t.metrics.file, *t.metrics.ranges,
            (t.sidechain.parent_turn, t.sidechain.agent) if t.sidechain else None) for t in rf.turns]
    assert got == [(1, "Task", None, None), (2, "Task", None, None),
                   (3, "Read", "a.py", (1, 2), (1, "x")), (4, "Read", "b.py", (1, 1), (2, "y"))]
    assert rf.turns[2].sidechain.id == "sa1" and rf.turns[3].sidechain.id == "sb1"
    # a summary after the last step is marked on the main agent's last turn
    assert [(t.turn, i.text) for t in rf.turns for i in t.injected] == [(2, "Readers compared")]


def test_lines_of_a_shape_the_reader_does_not_know_are_counted_not_fatal(tmp_path):
    lines = [
        _line("user", "u1", None, "Read a.py."),
        {**_line("user", "u2", "u1", None), "message": "a bare string"},
        {k: v for k, v in _line("assistant", "a0", "u2", None).items() if k != "message"},
        _line("assistant", "a1", "u2", [{"type": "image", "source": {}}]
              + _use("r1", "Read", file_path="/r/a.py")),
        _line("user", "u3", "a1", _result("r1", "     1\u2192a")),
        {"type": "progress", "data": {"kind": "agent_progress"}, "sessionId": "s"},
    ]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    res, rf = one(path, tmp_path / "out")
    assert [(t.metrics.tool, t.metrics.file, *t.metrics.ranges) for t in rf.turns] == [
        ("PKR", "a.py", (1, 1))]
    assert {"type:assistant:no message": 1, "block:image": 1, "type:progress": 1}.items() \
        <= res.unused.items()
