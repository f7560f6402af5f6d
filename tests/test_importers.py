"""``adakit import``: every format on the hand-written fixtures in
tests/fixtures/trajectories (tools, files, ranges, thoughts, outcome checked by hand), bad
input, re-import, the command line, and the published schema on every imported record."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from test_schema import validate_corpus

from adakit.cli import main as cli
from adakit.importers.batch import ALREADY, import_paths, imported_hashes
from adakit.importers.corpora import source_table
from adakit.record import RunFile, content_digest, load_corpus, read_run

FIXTURES = Path(__file__).parent / "fixtures" / "trajectories"
SWE_CMD = FIXTURES / "swe_agent" / "pallets__flask-5001.traj"
SWE_FC = FIXTURES / "swe_agent" / "pallets__flask-5002.traj"
MINI = FIXTURES / "mini_swe_agent" / "pallets__flask-5003.traj.json"
MINI_LIST = FIXTURES / "mini_swe_agent" / "appctx-walk.traj.json"
OH = FIXTURES / "openhands" / "pallets__flask-5005.json"
OH_LIST = FIXTURES / "openhands" / "blueprint-question.json"
GENERIC = FIXTURES / "generic" / "flask-blueprint-walk.jsonl"


def one(fmt: str, path: Path, out: Path, **kw) -> RunFile:
    rep = import_paths(fmt, [path], out, progress=False, **kw)
    assert len(rep.imported) == 1, rep.summary()
    return read_run(rep.imported[0].written)


def tools(rf: RunFile) -> list[str | None]:
    return [t.metrics.tool for t in rf.turns]


def reads(rf: RunFile) -> dict[int, tuple]:
    return {t.turn: (t.metrics.file, *t.metrics.ranges) for t in rf.turns if t.metrics.ranges}


# --------------------------------------------------------------------------- formats


def test_swe_agent_command_style(tmp_path):
    rf = one("swe-agent", SWE_CMD, tmp_path, model="gpt-4o")
    h, end = rf.header, rf.end
    assert tools(rf) == ["EXP", "PKR", "EXP", "EXP", "PKR", "PKR", "PKR", "EDT", "EDT", "EXE",
                         "PKR", "EDT", "EXE", "EDT", "SUB"]
    assert reads(rf) == {2: ("src/flask/helpers.py", (145, 244)), 5: ("src/flask/app.py", (1, 100)),
                         6: ("src/flask/app.py", (1010, 1109)), 7: ("src/flask/app.py", (1108, 1207)),
                         11: ("src/flask/app.py", (1054, 1153))}
    t = {x.turn: x for x in rf.turns}
    assert t[1].metrics.symbol == "helpers.py" and t[1].metrics.result_count == 1
    assert (t[3].metrics.file, t[3].metrics.symbol, t[3].metrics.result_count) == (
        "src/flask/helpers.py", "_scheme", 4)
    assert (t[4].metrics.action, t[4].metrics.symbol, t[4].metrics.result_count) == (
        "go_to_definition", "url_for", 2)
    assert [t[k].metrics.file for k in (8, 9, 12, 14)] == [
        "reproduce.py", "reproduce.py", "src/flask/app.py", "reproduce.py"]
    assert t[2].thinking.startswith("helpers.py defines the module-level url_for")
    assert t[2].call.tool == "open" and t[2].call.params["action"] == "open src/flask/helpers.py 195"
    assert t[10].call.params == {"command": "python reproduce.py"}
    # no timing in 0.x files: one second per turn
    assert (t[1].started_at, t[15].ended_at, h.source.timing) == (0.0, 15.0, "none")
    assert (h.model.name, h.world.name, h.world.source, h.task.target) == (
        "gpt-4o", "flask", "trajectory", "pallets__flask-5001")
    assert "url_for ignores _scheme" in h.task.prompt and h.system_prompt.startswith("SETTING")
    assert (h.source.format, h.source.agent, h.condition.name) == ("swe-agent", "swe-agent", "natural")
    assert h.source.sha256 == hashlib.sha256(SWE_CMD.read_bytes()).hexdigest()
    assert h.source.file == str(SWE_CMD.resolve())
    assert (end.reason, end.exit_status) == ("submit", "submitted")
    assert end.submission.startswith("diff --git a/src/flask/app.py")
    assert end.conclusion.startswith("The fix works; submitting.") and end.submission in end.conclusion
    assert end.totals == {"steps": 15, "cost_usd": 0.61, "tokens_in": 64210, "tokens_out": 1190,
                          "api_calls": 15}


def test_swe_agent_function_calling_with_the_world(tmp_path, flask_world):
    rf = one("swe-agent", SWE_FC, tmp_path, world="flask")
    h, t = rf.header, {x.turn: x for x in rf.turns}
    assert tools(rf) == ["OVW", "OVW", "PKR", "EXP", "PKR", "EDT", "EXE", "SUB"]
    assert (t[1].metrics.file, t[1].metrics.mapped_by) == (".", "tool:view_dir")
    assert (t[2].metrics.file, t[2].metrics.structural, t[2].metrics.mapped_by) == (
        "src/flask/app.py", True, "tool:view_outline")
    # asked for 1129-1180; the editor showed 1129-1185: the shown range is recorded
    assert t[3].call.params == {"command": "view", "path": "/testbed/src/flask/app.py",
                                "view_range": [1129, 1180]}
    assert reads(rf) == {3: ("src/flask/app.py", (1129, 1185)), 5: ("src/flask/app.py", (1186, 1230))}
    assert (t[4].metrics.action, t[4].metrics.symbol, t[4].metrics.result_count) == (
        "go_to_definition", "make_response", 2)
    assert (t[6].metrics.action, t[6].metrics.file) == ("str_replace", "src/flask/app.py")
    assert t[7].metrics.action == "python" and t[7].call.tool == "bash"
    assert [round(x.ended_at - x.started_at, 2) for x in rf.turns] == [
        0.21, 0.35, 0.18, 0.12, 0.16, 0.22, 3.4, 0.3]
    assert (h.source.timing, h.source.agent_version, h.model.name, h.model.mode) == (
        "execution", "1.1.0", "claude-3-7-sonnet-20250219", "function_calling")
    assert (h.world.name, h.world.version, h.world.source) == ("flask", "3.1.3", str(h.world.source))
    assert h.world.source.startswith("pypi") and h.world.sha256
    assert rf.end.reason == "submit" and rf.end.totals["cost_usd"] == 0.084


def test_mini_swe_agent_object(tmp_path, flask_world):
    rf = one("mini-swe-agent", MINI, tmp_path, world="flask")
    t = {x.turn: x for x in rf.turns}
    assert tools(rf) == ["EXP", "EXP", "PKR", "PKR", "PKR", None, "PKR", "EDT", "EXE", "SUB"]
    assert reads(rf) == {2: ("src/flask/helpers.py", (407, 407)), 3: ("src/flask/helpers.py", (407, 446)),
                         4: ("src/flask/helpers.py", (447, 480)),
                         5: ("src/flask/json/__init__.py", (1, 30)),  # cd src/flask && head json/...
                         7: ("src/flask/app.py", (1, 1536))}  # output cut by mini: the world's length
    assert (t[1].metrics.mapped_by, t[1].metrics.symbol, t[1].metrics.result_count) == (
        "shell:find_name", "*.py", 8)
    assert t[6].call is None and t[6].parse_error.kind == "no_tool"
    assert t[6].metrics.error_type == "malformed" and "EXACTLY ONE" in t[6].parse_error.message
    assert t[1].thinking == "List the package's python files."
    assert t[9].metrics.exit_code == 0 and t[8].metrics.action == "sed -i"
    # recorded timing: a turn runs from the previous observation to its own
    t0 = 1760000000.0
    assert (t[1].started_at, t[1].ended_at, t[2].started_at, t[2].ended_at) == (
        t0 + 4, t0 + 4.5, t0 + 4.5, t0 + 9.0)
    assert rf.header.source.timing == "recorded" and rf.header.started_at == t0 + 4
    assert [x.cost_usd for x in rf.turns[:3]] == [0.003, 0.003, 0.003]
    assert rf.header.model.name == "openai/gpt-4.1-mini" and rf.header.turn_bound == 250
    assert (rf.end.reason, rf.end.exit_status) == ("submit", "Submitted")
    assert rf.end.submission.startswith("diff --git a/src/flask/helpers.py")
    assert rf.end.totals == {"steps": 10, "cost_usd": 0.027, "api_calls": 10}


def test_mini_swe_agent_cut_output_without_a_world_keeps_the_count(tmp_path):
    rf = one("mini-swe-agent", MINI, tmp_path)
    seven = rf.turns[6]
    assert (seven.metrics.file, seven.metrics.ranges, seven.metrics.lines_viewed) == (
        "src/flask/app.py", [], 121)  # 60 head + "..." + 60 tail lines, numbers unknown
    assert rf.header.world.name == "flask" and rf.header.world.source == "trajectory"


def test_mini_swe_agent_bare_list(tmp_path, flask_world):
    rf = one("mini-swe-agent", MINI_LIST, tmp_path, world="flask")
    t = {x.turn: x for x in rf.turns}
    assert tools(rf) == ["OVW", "PKR", "EXP", "PKR", "PKR", "SUB"]
    assert reads(rf) == {2: ("src/flask/ctx.py", (420, 459)),  # tail -n 40 of 459 lines
                         4: ("src/flask/ctx.py", (238, 270))}
    assert (t[1].metrics.file, t[1].metrics.result_count) == ("src/flask", 7)
    assert (t[3].metrics.file, t[3].metrics.symbol, t[3].metrics.action) == (
        "src/flask/ctx.py", "AppContext", "go_to_definition")
    assert (t[5].metrics.error_type, t[5].metrics.exit_code) == ("tool_error", 1)
    assert rf.header.source.agent_version == "bare list" and rf.header.source.timing == "none"
    assert (rf.end.reason, rf.end.exit_status, rf.end.submission) == ("submit", "Submitted", None)
    assert rf.end.conclusion == "AppContext is pushed by the app's app_context(); I am done."


def test_openhands_evaluation_record(tmp_path):
    rf = one("openhands", OH, tmp_path)
    t = {x.turn: x for x in rf.turns}
    assert tools(rf) == ["OVW", "MEM", "PKR", "EXP", "EDT", "EXE", "SUB"]
    assert [x.call.tool for x in rf.turns] == ["run", "think", "read", "run", "str_replace_editor",
                                             "run", "finish"]
    assert reads(rf) == {3: ("src/flask/wrappers.py", (100, 140)), 4: ("src/flask/wrappers.py", (214, 214))}
    assert t[1].metrics.file == "src/flask" and t[1].metrics.exit_code == 0
    assert t[2].thinking.startswith("get_json lives on the Request wrapper")
    assert t[5].metrics.action == "str_replace" and t[5].metrics.file == "src/flask/wrappers.py"
    # the scaffold's "[The command completed ...]" note is not part of the output
    assert t[6].observation == "49 passed in 0.62s"
    assert [x.cost_usd for x in rf.turns] == pytest.approx([0.004] * 7)
    assert t[1].tokens_in == 2000 + 300 * 3 and t[1].latency_s == 1.8
    h = rf.header
    assert (h.model.name, h.task.target, h.world.name, h.turn_bound) == (
        "gpt-4o-2024-11-20", "pallets__flask-5005", "flask", 30)
    assert h.task.prompt == "request.get_json(silent=True) should not log a warning."
    assert h.source.timing == "recorded" and t[1].ended_at - t[1].started_at == 9.0
    assert (rf.end.reason, rf.end.exit_status) == ("submit", "finished")
    assert rf.end.conclusion.startswith("get_json(silent=True) no longer raises or logs")
    assert rf.end.submission.startswith("diff --git a/src/flask/wrappers.py")


def test_openhands_bare_event_list(tmp_path):
    rf = one("openhands", OH_LIST, tmp_path)
    assert tools(rf) == ["OVW", "EXE", "PKR", "CON"]
    assert reads(rf) == {3: ("src/flask/sansio/app.py", (570, 600))}
    assert rf.turns[3].metrics.finalize is False and rf.turns[1].metrics.action == "run_ipython"
    assert (rf.end.reason, rf.end.exit_status) == ("agent_exit", "awaiting_user_input")
    assert rf.end.conclusion == "register_blueprint is defined on the sans-IO App in sansio/app.py."
    assert rf.header.task.prompt == "Which module registers blueprints on the app?"


def test_generic_jsonl(tmp_path):
    rf = one("generic", GENERIC, tmp_path)
    t = {x.turn: x for x in rf.turns}
    assert tools(rf) == ["OVW", "PKR", "EXP", "EXP"]
    assert (t[1].metrics.file, t[1].metrics.mapped_by) == ("src/flask", "tool:view_dir")
    assert reads(rf) == {2: ("src/flask/sansio/blueprints.py", (256, 300))}
    assert (t[3].metrics.mapped_by, t[3].metrics.symbol, t[3].metrics.result_count) == (
        "shell:grep", "register_blueprint", 2)
    assert (t[4].metrics.symbol, t[4].metrics.result_count) == ("deferred_functions", 3)
    assert (t[1].started_at, t[1].ended_at, t[1].tokens_in, t[1].cost_usd) == (
        1750000000.0, 1750000002.4, 900, 0.0004)
    h = rf.header
    assert (h.model.name, h.source.agent, h.source.agent_version, h.world.name) == (
        "qwen2.5-coder-7b", "my-agent", "0.3", "flask")
    assert (rf.end.reason, rf.end.exit_status) == ("agent_exit", "answered")
    assert rf.end.conclusion.startswith("A blueprint records deferred functions")


def test_auto_detects_every_fixture_and_records_validate(tmp_path, flask_world):
    rep = import_paths("auto", [FIXTURES], tmp_path, world="flask", progress=False)
    assert len(rep.imported) == 7 and not rep.skipped
    assert validate_corpus(tmp_path) == sum(r.turns + 2 for r in rep.imported)
    formats = source_table(load_corpus(tmp_path, cache=False).runs)["format"].value_counts()
    assert formats.to_dict() == {"swe-agent": 2, "mini-swe-agent": 2, "openhands": 2, "generic": 1}


def test_local_checkout_as_world(tmp_path):
    repo = tmp_path / "checkout"
    for rel, n in (("src/flask/helpers.py", 641), ("src/flask/app.py", 1536)):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("".join(f"x{i}\n" for i in range(n)))
    (repo / ".git").mkdir()
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / ".git" / "refs" / "heads").mkdir(parents=True)
    (repo / ".git" / "refs" / "heads" / "main").write_text("a" * 40 + "\n")
    rf = one("swe-agent", SWE_CMD, tmp_path / "out", world=str(repo))
    assert (rf.header.world.name, rf.header.world.version, rf.header.world.source) == (
        "checkout", "a" * 40, f"folder:{repo.resolve()}")
    assert rf.turns[1].metrics.file == "src/flask/helpers.py"


def test_schema_1_0_run_files_still_load(tmp_path):
    rf = one("generic", GENERIC, tmp_path)
    lines = Path(rf.path).read_text().splitlines()
    head = json.loads(lines[0])
    head.pop("source")
    head["schema_version"] = "1.0"
    old = tmp_path / "old" / "r.jsonl"
    old.parent.mkdir()
    old.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    back = read_run(old)
    assert back.header.schema_version == "1.0" and back.header.source is None
    runs = load_corpus(old.parent, cache=False).runs
    assert (runs["agent"].iloc[0], runs["world_source"].iloc[0]) == ("ada", "trajectory")


# --------------------------------------------------------------------------- bad input


def _bad_inputs(folder: Path) -> dict[str, str]:
    """Files that must be skipped, each with its reason."""
    folder.mkdir(parents=True, exist_ok=True)
    raw = SWE_CMD.read_bytes()
    (folder / "cut.traj").write_bytes(raw[: len(raw) // 2])
    (folder / "empty_steps.traj").write_text(json.dumps({"trajectory": [], "history": [], "info": {}}))
    (folder / "other.traj").write_text(json.dumps({"hello": "world"}))
    (folder / "blank.traj").write_text("")
    (folder / "prose.traj").write_text("this is not a trajectory {\n")
    (folder / "latin1.traj").write_bytes(b'{"trajectory": ["caf\xe9"]}')
    return {"cut.traj": "truncated JSON", "empty_steps.traj": "empty trajectory",
            "other.traj": "unknown shape", "blank.traj": "empty trajectory",
            "prose.traj": "not JSON", "latin1.traj": "not UTF-8 text"}


def test_bad_input_is_skipped_with_one_line_each_and_a_summary(tmp_path, capsys):
    src = tmp_path / "src"
    expected = _bad_inputs(src)
    shutil.copy(SWE_CMD, src / "good.traj")
    out = tmp_path / "out"
    rep = import_paths("swe-agent", [src], out, progress=False)
    assert {Path(r.path).name: r.reason for r in rep.skipped} == expected
    assert [Path(r.path).name for r in rep.imported] == ["good.traj"]
    assert rep.summary() == (f"imported 1 run into {out}; skipped 6: 2 empty trajectory, "
                             "1 not JSON, 1 not UTF-8 text, 1 truncated JSON, 1 unknown shape")
    printed = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("skipped")]
    assert len(printed) == 6 and any("cut.traj: truncated JSON" in ln for ln in printed)
    assert [p.name for p in out.iterdir()] == [Path(rep.imported[0].written).name]  # no partial files


def test_reimport_is_idempotent_and_loses_nothing(tmp_path):
    out = tmp_path / "out"
    first = import_paths("auto", [FIXTURES], out, progress=False)
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.glob("*.jsonl")}
    assert len(before) == 7 and set(imported_hashes(out)) == {r.sha256 for r in first.imported}
    src = tmp_path / "more"
    _bad_inputs(src)
    again = import_paths("auto", [FIXTURES, src], out, progress=False)
    assert not again.imported and again.counts()[ALREADY] == 7 and again.bad == 6
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.glob("*.jsonl")} == before
    # the same content under another name is the same source
    shutil.copy(GENERIC, src / "renamed.jsonl")
    dup = import_paths("generic", [src / "renamed.jsonl"], out, progress=False)
    assert dup.counts() == {ALREADY: 1} and len(list(out.glob("*.jsonl"))) == 7


def test_same_content_twice_in_one_batch(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(GENERIC, src / "a.jsonl")
    shutil.copy(GENERIC, src / "b.jsonl")
    rep = import_paths("generic", [src], tmp_path / "out", progress=False)
    assert len(rep.imported) == 1 and rep.counts() == {ALREADY: 1}
    assert len(list((tmp_path / "out").glob("*.jsonl"))) == 1


def test_generic_bad_lines(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    text = GENERIC.read_text()
    (src / "cut.jsonl").write_text(text[: text.rindex("\n", 0, len(text) - 1) + 20])
    (src / "roles.jsonl").write_text(json.dumps({"role": "robot", "content": "x"}) + "\n")
    (src / "midbad.jsonl").write_text('{"role": "user", "content": "x"}\nnot json\n'
                                      '{"role": "assistant", "content": "y"}\n')
    (src / "nocalls.jsonl").write_text('{"role": "user", "content": "x"}\n'
                                       '{"role": "assistant", "content": "just talk"}\n')
    rep = import_paths("generic", [src], tmp_path / "out", progress=False)
    assert {Path(r.path).name: r.reason for r in rep.skipped} == {
        "cut.jsonl": "truncated JSON", "roles.jsonl": "unknown shape", "midbad.jsonl": "not JSON",
        "nocalls.jsonl": "empty trajectory"}


def test_many_files_show_a_progress_bar_and_workers_agree(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(24):  # distinct content: one changed character per copy
        data = json.loads(GENERIC.read_text().splitlines()[0])
        data["instance"] = f"walk-{i}"
        rest = GENERIC.read_text().split("\n", 1)[1]
        (src / f"w{i:02d}.jsonl").write_text(json.dumps(data) + "\n" + rest)
    serial = import_paths("generic", [src], tmp_path / "one", jobs=1)
    err = capsys.readouterr().err
    assert "import" in err and "24/24" in err
    parallel = import_paths("generic", [src], tmp_path / "two", jobs=2, progress=False)
    assert "24/24" not in capsys.readouterr().err
    digest = {r.run_id: content_digest(read_run(r.written)) for r in serial.imported}
    assert len(digest) == 24
    assert {r.run_id: content_digest(read_run(r.written)) for r in parallel.imported} == digest
    quiet = import_paths("generic", [GENERIC], tmp_path / "three")
    assert len(quiet.imported) == 1 and "1/1" not in capsys.readouterr().err


# --------------------------------------------------------------------------- command line


def test_cli_import_and_exit_codes(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli(["import", "swe-agent", str(SWE_CMD), str(SWE_FC), "--out", str(out),
                "--study", "swe-runs", "--model", "gpt-4o", "--task", "bug_fixing"]) == 0
    assert capsys.readouterr().out.strip() == f"imported 2 runs into {out}"
    runs = load_corpus(out, cache=False).runs.set_index("run_id")
    assert set(runs["study"]) == {"swe-runs"} and set(runs["task"]) == {"bug_fixing"}
    # the source names its model: --model only fills in where it is missing
    assert sorted(runs["model"]) == ["claude-3-7-sonnet-20250219", "gpt-4o"]
    assert set(runs["agent"]) == {"swe-agent"}
    bad = tmp_path / "bad.traj"
    bad.write_text("{")
    assert cli(["import", "swe-agent", str(bad), str(SWE_CMD), "--out", str(out)]) == 1
    text = capsys.readouterr()
    assert "bad.traj: truncated JSON" in text.err
    assert text.out.strip() == (f"imported 0 runs into {out}; skipped 2: 1 already imported, "
                                "1 truncated JSON")
    assert cli(["import", "swe-agent", str(tmp_path / "nowhere"), "--out", str(out)]) == 1
    assert cli(["import", "swe-agent", str(SWE_CMD), "--out", str(out), "--world", "atlantis"]) == 2
    assert "atlantis" in capsys.readouterr().err


def test_model_override_applies_only_where_the_source_is_silent(tmp_path):
    rf = one("swe-agent", SWE_FC, tmp_path, model="other-model")
    assert rf.header.model.name == "claude-3-7-sonnet-20250219"


# --------------------------------------------------------------------------- shapes of real files
# Hand-written files in the layouts real agents' outputs have (found importing real runs):
# an OpenHands evaluation output.jsonl (one record a line, the last one cut off), the older
# flat event layout with agentskills cells, files made right in /workspace, and a
# mini-swe-agent reply quoting code before its command. Kept apart from FIXTURES so the
# whole-folder imports above keep their counts.

SHAPES = Path(__file__).parent / "fixtures" / "trajectories_shapes"
OH_OUTPUT = SHAPES / "openhands" / "output.jsonl"


def test_openhands_output_jsonl_gives_one_run_per_line(tmp_path):
    rep = import_paths("openhands", [OH_OUTPUT], tmp_path, progress=False)
    assert [Path(r.path).name for r in rep.imported] == [
        "output.jsonl:1", "output.jsonl:2", "output.jsonl:3"]
    assert [(Path(r.path).name, r.reason) for r in rep.skipped] == [
        ("output.jsonl:4", "truncated JSON")]  # a record still being written costs only itself
    lines = OH_OUTPUT.read_bytes().split(b"\n")
    assert [r.sha256 for r in rep.imported] == [hashlib.sha256(ln).hexdigest() for ln in lines[:3]]
    first, limit, flat = (read_run(r.written) for r in rep.imported)
    assert (first.header.task.target, first.header.world.name, first.header.model.name) == (
        "acme__widgets-101", "widgets", "test-model-a")
    assert first.header.source.file == str(OH_OUTPUT.resolve())
    assert tools(first) == ["OVW", "PKR", "EDT", "SUB"]
    assert reads(first) == {2: ("src/widgets/core.py", (10, 20))}
    # a patch the harness collected does not make a run that hit the iteration limit a submission
    assert (limit.end.reason, limit.end.submission is not None) == ("turn_bound", True)
    assert limit.end.exit_status.startswith("error: RuntimeError: Agent reached maximum iteration")
    assert flat.header.run_id.startswith("openhands__output-3__")


def test_openhands_output_jsonl_reimport_and_auto(tmp_path):
    out = tmp_path / "out"
    import_paths("openhands", [OH_OUTPUT], out, progress=False)
    again = import_paths("auto", [OH_OUTPUT], out, progress=False)  # auto: a history per line
    assert not again.imported and again.counts() == {ALREADY: 3, "truncated JSON": 1}
    grown = tmp_path / "output.jsonl"  # the evaluation appended a record
    extra = json.loads(OH_OUTPUT.read_text().split("\n")[0])
    extra["instance_id"] = "acme__widgets-105"
    grown.write_text("\n".join(OH_OUTPUT.read_text().split("\n")[:3] + [json.dumps(extra)]) + "\n")
    more = import_paths("openhands", [grown], out, progress=False)
    assert [Path(r.path).name for r in more.imported] == ["output.jsonl:4"]
    assert more.counts() == {ALREADY: 3}


def test_openhands_flat_events_and_agentskills_cells(tmp_path):
    rep = import_paths("openhands", [OH_OUTPUT], tmp_path, progress=False)
    flat = read_run(rep.imported[2].written)
    assert [t.call.tool for t in flat.turns] == ["run_ipython", "run_ipython", "run", "finish"]
    assert tools(flat) == ["PKR", "EDT", "EXP", "SUB"]  # the leading message is the task
    assert [t.metrics.mapped_by for t in flat.turns[:2]] == ["tool:open", "tool:edit"]
    assert flat.turns[0].call.params["code"] == "open_file('/workspace/src/app.py')"  # as recorded
    assert reads(flat) == {1: ("src/app.py", (1, 30))}  # 'N|code' window lines
    assert flat.turns[1].metrics.file == "src/app.py"  # repo at /workspace, as the task says
    assert (flat.turns[2].metrics.exit_code, flat.turns[2].observation) == (0, "hi")
    assert flat.header.task.prompt.startswith("Please fix the following issue")
    assert flat.turns[0].thinking == "Open the app."


def test_openhands_files_made_in_workspace_keep_their_names(tmp_path):
    rf = one("openhands", SHAPES / "openhands" / "workspace-file.json", tmp_path)
    assert tools(rf) == ["EDT", "EXE", "SUB"]
    assert rf.turns[0].metrics.file == "hello.py"  # /workspace is the root, not the file
    assert rf.header.world.name == "unknown"


def test_mini_code_quoted_in_the_thought_is_not_an_action(tmp_path):
    rf = one("mini-swe-agent", SHAPES / "mini_swe_agent" / "acme__widgets-103.traj.json", tmp_path)
    assert tools(rf) == ["PKR", None, "EDT", "SUB"]
    assert rf.turns[0].call.params == {"command": "nl -ba src/widgets/core.py | sed -n '1,5p'"}
    assert reads(rf) == {1: ("src/widgets/core.py", (1, 2))}
    assert "```python" in rf.turns[0].thinking  # the quote is part of the thought
    assert rf.turns[1].call is None and rf.turns[1].parse_error is not None  # two bash blocks


def test_termination_a_patch_alone_does_not_override_a_stop():
    from adakit.importers.base import termination

    assert termination("error: RuntimeError: Agent reached maximum iteration", False, True) == "turn_bound"
    assert termination("error: RuntimeError: boom", False, True) == "agent_exit"
    assert termination("awaiting_user_input", False, True) == "submit"
    assert termination(None, False, False) == "agent_exit"
    assert termination("submitted (exit_cost)", False, False) == "submit"
    assert termination("LimitsExceeded", True, True) == "submit"  # a submit step wins


def test_observations_are_clipped_and_their_full_length_kept(tmp_path):
    whole = one("swe-agent", SWE_CMD, tmp_path / "whole", model="gpt-4o")
    clipped = one("swe-agent", SWE_CMD, tmp_path / "clipped", model="gpt-4o",
                  max_observation_chars=60)
    long = [(w, c) for w, c in zip(whole.turns, clipped.turns, strict=True)
            if len(w.observation or "") > 60]
    assert long, "the fixture has observations longer than 60 characters"
    for w, c in long:
        full = w.observation_chars
        assert c.observation_chars == full and full == len(w.observation)
        assert c.observation.startswith(w.observation[:60])
        assert c.observation.endswith(f"[... {full - 60} more characters not kept]")
    short = [c for c in clipped.turns if (c.observation_chars or 0) <= 60]
    assert all("more characters not kept" not in (c.observation or "") for c in short)


def test_open_corpora_takes_a_list_of_folders_as_one_argument(tmp_path):
    """Notebook 40 passes its `corpus` parameter as given: a folder or a list of them."""
    from adakit.importers.corpora import open_corpora

    for name, path in (("a", SWE_CMD), ("b", MINI), ("c", OH)):
        import_paths("auto", [path], tmp_path / name, progress=False)
    flat = open_corpora(tmp_path / "a", tmp_path / "b", tmp_path / "c", verbose=False)
    nested = open_corpora(tmp_path / "a", [str(tmp_path / "b"), tmp_path / "c"], verbose=False)
    assert len(flat.runs) == 3 and sorted(nested.runs["run_id"]) == sorted(flat.runs["run_id"])
    assert len(open_corpora(tmp_path / "a", "", verbose=False).runs) == 1  # "" adds nothing


def test_import_workers_freeze_what_they_start_with(tmp_path):
    """The pool's workers put what they inherited out of the garbage collector's reach; the
    importing process itself is left as it was."""
    import gc
    from concurrent.futures import ProcessPoolExecutor

    from adakit.importers import batch

    before = gc.get_freeze_count()
    args = ("auto", str(tmp_path), frozenset(), batch.Target())
    with ProcessPoolExecutor(max_workers=1, initializer=batch._init_worker, initargs=args) as pool:
        frozen = pool.submit(gc.get_freeze_count).result()
    assert frozen > 1000
    assert gc.get_freeze_count() == before
