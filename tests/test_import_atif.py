"""``adakit import atif`` and ``adakit export atif`` (issue 27) on two hand-made trajectories in
the shape of two ATIF versions (tests/fixtures/agent_cli/atif): a v1.4 terminal agent (a system
prompt, keystrokes sent with ``bash_command``, two calls in one step answered out of order, an
unknown tool, ``task_complete``) and a v1.7 one (content-part messages, ``Read`` with
offset/limit, an editor tool renamed by the table, an embedded subagent). Expected values are
read off the fixtures by hand; the round trips compare adakit runs with the import of their
export, turn by turn."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from test_schema import validate_corpus

from adakit import config
from adakit.cli import main as cli
from adakit.importers import atif
from adakit.importers.atif_export import check_atif, export_runs, to_atif
from adakit.importers.batch import import_paths
from adakit.lenses import footprint as fp
from adakit.lenses import journey, policy, surface
from adakit.record import iter_run_files, load_corpus, read_run
from adakit.synthetic import synthetic_run, write_run

FIXTURES = Path(__file__).parent / "fixtures" / "agent_cli" / "atif"
V14 = FIXTURES / "terminus-v1.4-url-for.json"
V17 = FIXTURES / "claude-v1.7-appctx-subagent.json"
REFERENCE = config.REFERENCE_RUNS


def one(path: Path, out: Path, **kw):
    rep = import_paths("atif", [path], out, progress=False, **kw)
    assert len(rep.imported) == 1, rep.summary()
    return rep.imported[0], read_run(rep.imported[0].written)


def row(t) -> tuple:
    m = t.metrics
    return (t.call.tool, m.tool, m.mapped_by, m.action, m.file, *m.ranges)


def actions(rf) -> list[tuple]:
    """The canonical action of every turn: tool, file, line ranges (None: a parse error)."""
    return [(t.metrics.tool, t.metrics.file, list(t.metrics.ranges)) if t.call else None
            for t in rf.turns]


def test_a_v1_4_terminal_trajectory(tmp_path, flask_world):
    res, rf = one(V14, tmp_path, world="flask")
    assert [row(t) for t in rf.turns] == [
        ("bash_command", "EXP", "shell:grep_def", "go_to_definition", None),
        ("bash_command", "PKR", "shell:sed_n", None, "src/flask/helpers.py", (195, 204)),
        ("read_file", "PKR", "tool:view", None, "src/flask/app.py", (1003, 1012)),
        ("module_outline", "EXE", "tool:other", "module_outline", None),
        ("task_complete", "SUB", "tool:submit", "submit", None),
    ]
    t = {x.turn: x for x in rf.turns}
    assert (t[1].metrics.symbol, t[1].metrics.result_count) == ("url_for", 2)
    assert t[1].call.params["keystrokes"].startswith("grep -rn")  # the call as recorded
    assert t[1].thinking == "url_for is probably in helpers.py.\n\nFind the definition first."
    assert t[3].observation.startswith("    def url_for(")  # matched by id, not by order
    assert t[4].observation == "class Flask(App): ..."
    assert [(x.tokens_in, x.tokens_out) for x in rf.turns] == [
        (1200, 80), (1500, 60), (1900, 90), (0, 0), (2100, 20)]  # a step's tokens on its first call
    assert t[1].cost_usd == pytest.approx(0.0031)
    h = rf.header
    assert (h.source.agent, h.source.agent_version, h.model.name, h.source.timing) == (
        "terminus-2", "0.9.1", "gpt-4.1-mini", "recorded")
    assert (h.task.prompt, h.task.target) == ("Where does url_for build the URL?",
                                              "5b1f0c9e-url-for-0001")
    assert h.system_prompt.startswith("You drive a terminal.")
    assert t[2].started_at == t[1].ended_at and t[1].ended_at - t[1].started_at == 5.0
    assert rf.end.reason == "submit" and rf.end.conclusion.startswith("url_for in helpers.py")
    assert rf.end.totals["schema_version"] == "ATIF-v1.4"
    assert res.unused == {"field:metrics.prompt_token_ids": 1}


def test_a_v1_7_trajectory_with_an_embedded_subagent(tmp_path, flask_world):
    _, rf = one(V17, tmp_path, world="flask")
    assert [row(t) for t in rf.turns] == [
        ("Task", "EXE", "tool:subagent", "subagent", None),
        ("Grep", "EXP", "tool:grep", "go_to_definition", "src/flask/ctx.py"),
        ("Glob", "EXP", "tool:glob", "find_all_references", None),
        ("Read", "PKR", "tool:read", "range", "src/flask/ctx.py", (251, 260)),
        ("str_replace_based_edit_tool", "EDT", "tool:edit", "create", "/testbed/notes.md"),
    ]
    spans = [(t.turn, t.sidechain.id, t.sidechain.parent_turn, t.sidechain.agent)
             for t in rf.turns if t.sidechain]
    assert spans == [(2, "sub-explore-1", 1, "Explore"), (3, "sub-explore-1", 1, "Explore")]
    t = {x.turn: x for x in rf.turns}
    assert t[4].observation.startswith("   251\u2192    def push")  # a content-part result
    assert t[1].thinking == "Let a subagent find the push methods."
    h = rf.header
    assert (h.task.prompt, h.task.target) == ("What happens when an app context is pushed?",
                                              "traj-appctx-7c2d")  # no session_id in 1.7
    assert rf.end.conclusion.startswith("Pushing an app context")  # the subagent's last words are not
    assert rf.end.totals["subagent_steps"] == 2


def test_auto_by_markers_and_other_json_not_taken(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.json").write_text(V14.read_text())
    doc = json.loads(V14.read_text())
    (src / "not_atif.json").write_text(json.dumps({**doc, "schema_version": "2.0"}))
    rep = import_paths("auto", [src], tmp_path / "out", progress=False)
    assert rep.detection_lines() == [
        "auto: 1 as atif (a 'schema_version' ATIF-v*, an 'agent' and a 'steps' list)"]
    assert {Path(r.path).name: r.reason for r in rep.skipped} == {"not_atif.json": "unknown shape"}
    assert atif.markers([doc]) is None and atif.markers({**doc, "steps": {}}) is None


def test_users_extend_the_tool_table(tmp_path, monkeypatch):
    table = tmp_path / "tools.json"
    table.write_text(json.dumps({"module_outline": {"as": "file_outline", "args": {"module": "path"}},
                                 "task_complete": "think"}))
    monkeypatch.setenv(atif.TOOLS_ENV, str(table))
    _, rf = one(V14, tmp_path / "out")
    t = {x.turn: x for x in rf.turns}
    assert (t[4].metrics.tool, t[4].metrics.mapped_by, t[4].metrics.file) == (
        "OVW", "tool:view_outline", "flask.app")
    assert (t[5].metrics.tool, t[5].call.tool) == ("MEM", "task_complete")  # the entry overrides
    table.write_text(json.dumps({"x": 3}))
    rep = import_paths("atif", [V14], tmp_path / "out2", progress=False)
    assert rep.counts() == {"bad tool table": 1}
    assert "entry 'x'" in rep.skipped[0].detail and "\n" not in rep.skipped[0].detail


def test_round_trip_of_the_reference_corpus(tmp_path):
    """Every reference run: exported, checked, imported back: the same actions turn by turn."""
    written, skipped = export_runs([REFERENCE], tmp_path / "atif", echo=False)
    assert (written, skipped) == (len(list(iter_run_files(REFERENCE))), 0)
    rep = import_paths("atif", [tmp_path / "atif"], tmp_path / "back", progress=False, echo=False,
                       max_observation_chars=0)  # nothing clipped: observations compare whole
    assert len(rep.imported) == written
    back = {read_run(r.written).header.task.target: read_run(r.written) for r in rep.imported}
    for path in iter_run_files(REFERENCE):
        rf = read_run(path)
        again = back[rf.header.run_id]
        assert actions(again) == actions(rf), rf.header.run_id
        assert [t.call and t.call.tool for t in again.turns] == [t.call and t.call.tool
                                                                 for t in rf.turns]
        assert [t.observation for t in again.turns] == [t.observation for t in rf.turns]
        assert again.header.task.prompt == rf.header.task.prompt
        assert again.end.conclusion == rf.end.conclusion
    some = next(iter(back.values()))
    assert {t.metrics.mapped_by for t in some.turns} == {"tool:recorded"}
    assert validate_corpus(tmp_path / "back") > written * 2


def test_round_trip_of_a_synthetic_run_with_a_parse_error(tmp_path):
    run = synthetic_run("synth-atif", seed=3, tools=[
        "OVW", {"tool": "PKR", "file": "src/flask/app.py", "ranges": [(10, 40), (60, 70)]},
        "EXP", "malformed", {"tool": "BKM"}, {"tool": "CON", "finalize": True}])
    path = write_run(run, tmp_path / "runs" / "synth-atif.jsonl")
    doc = to_atif(read_run(path))
    assert check_atif(doc) == []
    assert [s["source"] for s in doc["steps"]] == ["user"] + ["agent"] * 7  # 6 turns, conclusion
    assert "tool_calls" not in doc["steps"][4] and doc["steps"][4]["extra"]["adakit"]["parse_error"]
    (tmp_path / "atif").mkdir()
    (tmp_path / "atif" / "s.json").write_text(json.dumps(doc))
    _, back = one(tmp_path / "atif" / "s.json", tmp_path / "back")
    assert actions(back) == actions(run)
    assert actions(back)[1] == ("PKR", "src/flask/app.py", [(10, 40), (60, 70)])
    assert back.turns[3].parse_error is not None and back.turns[3].call is None
    assert [t.tokens_in for t in back.turns] == [t.tokens_in for t in run.turns]
    told = run.turns[3].observation  # what the agent was told about its malformed reply
    assert told and doc["steps"][4]["observation"]["results"] == [{"content": told}]
    assert [t.observation for t in back.turns] == [t.observation for t in run.turns]


def test_round_trip_of_an_imported_run_keeps_its_sidechain(tmp_path, flask_world):
    _, rf = one(V17, tmp_path / "first", world="flask")
    doc = to_atif(rf)
    assert [s["trajectory_id"] for s in doc["subagent_trajectories"]] == ["sub-explore-1"]
    assert doc["agent"]["name"] == "claude-code"
    (tmp_path / "x.json").write_text(json.dumps(doc))
    _, back = one(tmp_path / "x.json", tmp_path / "back", world="flask")
    assert actions(back) == actions(rf)
    assert [t.sidechain for t in back.turns] == [t.sidechain for t in rf.turns]


def test_name_mapping_alone_gives_the_same_actions(tmp_path, flask_world):
    """Without the recorded actions, an exported import maps back by tool names alone."""
    _, rf = one(V14, tmp_path / "first", world="flask")
    doc = copy.deepcopy(to_atif(rf))
    for step in doc["steps"]:
        for call in step.get("tool_calls") or []:
            del call["extra"]
    (tmp_path / "bare.json").write_text(json.dumps(doc))
    _, back = one(tmp_path / "bare.json", tmp_path / "back", world="flask")
    assert actions(back) == actions(rf)
    assert [t.metrics.mapped_by for t in back.turns] == [t.metrics.mapped_by for t in rf.turns]


def test_check_atif_names_each_fault():
    good = json.loads(V14.read_text())
    assert check_atif(good) == [] and check_atif(json.loads(V17.read_text())) == []
    bad = copy.deepcopy(good)
    bad["steps"][2]["step_id"] = 9
    bad["steps"][1]["tool_calls"] = []
    bad["steps"][3]["observation"]["results"][0]["source_call_id"] = "nope"
    bad["steps"][4]["timestamp"] = "yesterday"
    del bad["session_id"]
    faults = check_atif(bad)
    assert faults == [
        "session_id: required (a text) before ATIF-v1.7",
        "steps[1].tool_calls: only agent steps have it",
        "steps[2].step_id: 9, expected 3 (numbered from 1)",
        "steps[3].observation.results[0]: source_call_id 'nope' answers no tool call of this step",
        "steps[4].timestamp: 'yesterday' is not ISO 8601"]
    assert check_atif({"schema_version": "ATIF-v2", "agent": {}, "steps": []}) == [
        "schema_version: 'ATIF-v2' is not ATIF-v1.N", "agent: needs name and version (text)",
        "steps: not a list of steps, or empty"]


def test_cli_export_and_its_exit_codes(tmp_path, capsys):
    run = synthetic_run("synth-cli", seed=1, tools=["OVW", "PKR", {"tool": "CON", "finalize": True}])
    write_run(run, tmp_path / "runs" / "synth-cli.jsonl")
    (tmp_path / "runs" / "broken.jsonl").write_text('{"kind": "turn"}\n')
    code = cli(["export", "atif", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 1 and "exported 1 run as ATIF-v1.7" in out and "skipped 1" in out
    assert "broken.jsonl" in err and len(err.strip().splitlines()) == 1
    assert json.loads((tmp_path / "out" / "synth-cli.json").read_text())["session_id"] == "synth-cli"
    assert cli(["export", "atif", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_lenses_0_1_2_4_on_imported_atif_runs(tmp_path, flask_world):
    rep = import_paths("auto", [FIXTURES], tmp_path, world="flask", progress=False)
    assert len(rep.imported) == 2 and validate_corpus(tmp_path) == 2 * (1 + 5 + 1)
    c = load_corpus(tmp_path, cache=False)
    surf = surface.run_surface(c)
    assert sorted(surf["turns"]) == [5, 5]
    assert surf["loc_viewed"].sum() == 10 + 10 + 10  # helpers 195-204, app 1003-1012, ctx 251-260
    ev = journey.arc_events(c)
    assert list(ev["kind"]) == ["EXP:definition", "PKR:<20", "PKR:<20", "EXE", "SUB",
                                "EXE", "EXP:definition", "EXP:references", "PKR:<20", "EDT"]
    plt.close(journey.plot_journey_arcs(ev, c.runs, facet=["model"]))
    tags = policy.tag_transitions(c.turns)
    assert len(tags) == 8 and "submit" in set(tags["tag"])
    files, _ = fp.map_files("flask", c.reads, source=fp.world_source(c.runs, "flask"))
    dens = fp.trace_density(c.reads, c.runs).set_index("file")
    assert dens.loc["src/flask/ctx.py", "lines_shown"] == 10
    plt.close(fp.plot_repo_map(files, dens.reset_index()))


def test_a_message_between_calls_is_the_next_calls_thinking(tmp_path):
    doc = json.loads(V14.read_text())
    doc["steps"].insert(3, {"step_id": 0, "source": "agent", "message": "Two hits; helpers first."})
    doc["steps"].insert(1, {"step_id": 0, "source": "system", "message": "a late note"})
    for i, step in enumerate(doc["steps"], 1):
        step["step_id"] = i
    assert check_atif(doc) == []
    (tmp_path / "m.json").write_text(json.dumps(doc))
    res, rf = one(tmp_path / "m.json", tmp_path / "out")
    assert rf.turns[1].thinking == "Two hits; helpers first.\n\nRead the helper."
    assert rf.turns[1].raw_text == "Read the helper." and len(rf.turns) == 5
    assert rf.end.conclusion.startswith("url_for in helpers.py")
    assert res.unused["type:source:system (not the first)"] == 1


TEXT_CALLS = Path(__file__).parent / "fixtures" / "agent_cli" / "atif_text" / \
    "terminus-v1.6-text-calls.json"


def test_agent_steps_whose_action_is_in_the_message(tmp_path):
    """Found on Harbor's own Terminus-2 and OpenHands trajectories (v1.5, v1.7): a step
    without ``tool_calls`` whose message is Terminus' JSON batch of keystrokes, or an
    agent's ``<function=...>`` text, was taken for prose and the run was "empty"."""
    res, rf = one(TEXT_CALLS, tmp_path)
    rows = [(t.call.tool, t.metrics.tool, t.metrics.mapped_by, t.metrics.file, *t.metrics.ranges)
            for t in rf.turns]
    assert rows == [
        ("bash_command", "EXP", "shell:grep", None),
        ("bash_command", "PKR", "shell:sed_n", "src/flask/json/provider.py", (140, 141)),
        ("execute_bash", "EXE", "shell:execute", None),
        ("mark_task_complete", "SUB", "tool:submit", None),
    ]
    assert rf.turns[1].call.params == {"keystrokes": "sed -n '140,160p' src/flask/json/provider.py"}
    assert rf.turns[0].metrics.result_count == 2 and rf.turns[0].tokens_in == 900
    assert rf.end.conclusion.startswith("Keys are sorted by default")
    assert atif.text_calls("plain prose, no action") == []
    assert atif.text_calls('{"commands": [], "task_complete": false}') == []
