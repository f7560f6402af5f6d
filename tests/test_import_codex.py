"""``adakit import codex`` (issue 27) on two hand-made rollouts in the shape of two Codex CLI
versions (tests/fixtures/agent_cli/codex): an early one (a session line, then bare response
items, no timestamps, output as JSON) and a newer one (``{timestamp, type, payload}`` lines
with ``session_meta``, ``turn_context``, ``event_msg``, ``compacted``, plain-text output).
Expected values are read off the fixtures by hand."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
from test_schema import validate_corpus

from adakit.importers.batch import import_paths
from adakit.importers.codex import command_line
from adakit.importers.mapping import patch_sections, patched_lines, update_hunks
from adakit.lenses import footprint as fp
from adakit.lenses import journey, policy, surface
from adakit.record import load_corpus, read_run

FIXTURES = Path(__file__).parent / "fixtures" / "agent_cli" / "codex"
EARLY = FIXTURES / "rollout-2025-05-20T09-00-00-1c7e0b52.jsonl"
NEW = FIXTURES / "rollout-2025-10-02T14-00-00-0199a4f2.jsonl"


def one(path: Path, out: Path, **kw):
    rep = import_paths("codex", [path], out, progress=False, **kw)
    assert len(rep.imported) == 1, rep.summary()
    return rep.imported[0], read_run(rep.imported[0].written)


def row(t) -> tuple:
    m = t.metrics
    return (t.call.tool, m.tool, m.mapped_by, m.action, m.file, *m.ranges)


def test_an_early_rollout_of_bare_items(tmp_path):
    res, rf = one(EARLY, tmp_path)
    assert [row(t) for t in rf.turns] == [
        ("shell", "EXP", "shell:grep_def", "go_to_definition", None),
        ("shell", "PKR", "shell:sed_n", None, "src/flask/helpers.py", (180, 240)),
        ("update_plan", "MEM", "tool:plan", "plan", None),
        ("shell", "EDT", "tool:edit", "apply_patch", "src/flask/helpers.py"),
        ("view_image", "EXE", "tool:other", "view_image", None),
    ]
    t = {x.turn: x for x in rf.turns}
    assert (t[1].metrics.symbol, t[1].metrics.result_count, t[1].metrics.exit_code) == ("url_for", 2, 0)
    assert t[1].thinking == "**Searching for url_for**"
    assert t[3].thinking == "The helper forwards to the app." and t[3].metrics.result_count == 2
    assert t[2].observation.startswith("    ...  # helpers.py line 180")  # the JSON output unwrapped
    h = rf.header
    assert (h.source.timing, h.task.target, h.task.prompt) == (
        "none", "1c7e0b52-9f3a-4d2b-8e61-0a4f5c9d2e17", "Where does url_for build the URL?")
    assert rf.end.conclusion.startswith("url_for in helpers.py forwards to App.url_for")
    assert res.unused == {"field:reasoning.encrypted_content": 1}


def test_a_newer_rollout_with_turn_context_and_a_compaction(tmp_path, flask_world):
    res, rf = one(NEW, tmp_path, world="flask")
    assert [row(t) for t in rf.turns] == [
        ("shell", "PKR", "shell:nl", None, "src/flask/ctx.py", (240, 299)),
        ("shell", "EXP", "shell:grep", "find_all_references", None),
        ("apply_patch", "EDT", "tool:edit", "apply_patch", "notes/appctx.md", (1, 3)),
        ("update_plan", "MEM", "tool:plan", "plan", None),
        ("mcp__docs__search", "EXE", "tool:other", "mcp__docs__search", None),
        ("shell", "PKR", "shell:cat", None, "src/flask/globals.py", (1, 51)),
        ("shell", "EXE", "shell:execute", "pytest", None),
    ]
    t = {x.turn: x for x in rf.turns}
    assert [(x.turn, i.source) for x in rf.turns for i in x.injected] == [(3, "compaction")]
    assert "ctx.py:255" in t[3].injected[0].text  # after turn 3: in the prompt of turn 4
    assert [(x.tokens_in, x.tokens_out) for x in rf.turns[:3]] == [(5200, 140), (6100, 90), (6400, 200)]
    assert t[7].metrics.exit_code == 1 and t[1].metrics.exit_code == 0
    assert t[1].observation.startswith("   240\t")  # the Exit code / Output header is not output
    h = rf.header
    assert (h.model.name, h.source.agent_version, h.source.timing, h.world.name) == (
        "gpt-5-codex", "0.46.0", "recorded", "flask")
    assert (rf.end.reason, rf.end.exit_status) == ("agent_exit", "aborted (interrupted)")
    assert {"type:event_msg:user_message": 1, "type:event_msg:agent_message": 1,
            "field:turn_context.effort": 1}.items() <= res.unused.items()


def test_auto_lenses_and_the_schema(tmp_path, flask_world):
    rep = import_paths("auto", [FIXTURES], tmp_path, world="flask", progress=False)
    assert sorted(rep.detection_lines()) == [
        "auto: 1 as codex ('timestamp'/'type'/'payload' lines of session_meta/response_item)",
        "auto: 1 as codex (a session line with 'id' and 'instructions', then bare response items)"]
    assert validate_corpus(tmp_path) == 2 + 5 + 7 + 2
    c = load_corpus(tmp_path, cache=False)
    surf = surface.run_surface(c)
    assert sorted(surf["turns"]) == [5, 7] and surf["loc_viewed"].sum() == 61 + 60 + 51
    ev = journey.arc_events(c)
    assert len(ev) == 12
    plt.close(journey.plot_journey_arcs(ev, c.runs, facet=["model"]))
    tags = policy.tag_transitions(c.turns)
    assert len(tags) == 10 and "edit" in set(tags["tag"])
    files, _ = fp.map_files("flask", c.reads, source=fp.world_source(c.runs, "flask"))
    dens = fp.trace_density(c.reads, c.runs).set_index("file")
    assert dens.loc["src/flask/ctx.py", "lines_shown"] == 60
    plt.close(fp.plot_repo_map(files, dens.reset_index()))


def test_command_line_of_an_argv():
    assert command_line(["bash", "-lc", "cd src && ls"]) == "cd src && ls"
    assert command_line(["/bin/zsh", "-c", "pwd"]) == "pwd"
    assert command_line(["sed", "-n", "1,5p", "a b.py"]) == "sed -n 1,5p 'a b.py'"
    assert command_line("ls -la") == "ls -la" and command_line(None) == ""


PATCHES = Path(__file__).parent / "fixtures" / "agent_cli" / "codex_patch" / \
    "rollout-2025-11-04T10-00-00-0199b3d1.jsonl"
CODE = Path(__file__).parent / "fixtures" / "code"  # the world the rollout edited


def test_apply_patch_updates_get_their_lines_from_the_world_on_disk(tmp_path):
    """Hunks carry no line numbers: each is found by its context in pkg/shapes.py (22 lines of
    describe and Circle.area, then fetch_shape at 47-51). The two hunks of one patch are
    numbered in the patched file (the first adds a line, so Circle.area's two new lines are
    36-37, not 35-36); a hunk found nowhere (a failed patch) gives no lines."""
    _, rf = one(PATCHES, tmp_path / "with", world=str(CODE))
    assert [row(t) for t in rf.turns] == [
        ("shell", "PKR", "shell:nl", None, "pkg/shapes.py", (15, 36)),
        ("apply_patch", "EDT", "tool:edit", "apply_patch", "pkg/shapes.py", (22, 23), (36, 37)),
        ("apply_patch", "EDT", "tool:edit", "apply_patch", "pkg/shapes.py"),
        ("apply_patch", "EDT", "tool:edit", "apply_patch", "pkg/shapes.py", (51, 51)),
    ]
    assert rf.turns[2].metrics.error_type is not None  # exit code 1: the stale hunk
    c = load_corpus(tmp_path / "with", cache=False)
    assert set(c.reads["turn"]) == {1}  # an edit's lines are not reads
    _, bare = one(PATCHES, tmp_path / "without")  # no world: the file, no lines
    assert [t.metrics.ranges for t in bare.turns[1:]] == [[], [], []]


def test_patched_lines_places_hunks_in_order():
    text = ["a", "b", "c", "a", "b", "c"]
    # the anchor "c" (line 3) moves the second "a b" hunk to lines 4-5
    hunks = update_hunks(["@@ c", " a", "-b", "+B", "+B2"])
    assert hunks == [("c", ["a", "b"], ["a", "B", "B2"])]
    assert patched_lines(text, hunks) == [(5, 6)]
    two = update_hunks(["@@", "+x", " a", "@@", " c", "+y"])
    assert patched_lines(text, two) == [(1, 1), (5, 5)]  # after the first insert, "c" is line 4
    done = update_hunks(["@@", " a", "-b", "+B"])  # already applied to this text
    assert patched_lines(["a", "B", "c"], done) == [(2, 2)]
    assert patched_lines(None, done) == [] and patched_lines(text, update_hunks(["@@", "-zz"])) == []
    sections = patch_sections("*** Begin Patch\n*** Update File: x.py\n*** Move to: y.py\n@@\n-a\n"
                              "+b\n*** End of File\n*** Delete File: z.py\n*** End Patch\nEOF")
    assert sections == [("Update", "x.py", ["@@", "-a", "+b"]), ("Delete", "z.py", [])]


NEWER = Path(__file__).parent / "fixtures" / "agent_cli" / "codex_exec" / \
    "rollout-2026-07-14T08-30-00-019e77c2.jsonl"


def test_a_rollout_of_a_newer_cli_with_line_shells_and_new_line_types(tmp_path):
    """Found on public rollouts of CLI 0.146: line types this reader did not know
    (``world_state``, ``inter_agent_communication_metadata``) made the whole file "unknown
    shape"; ``shell_command``/``exec_command`` (one command line) were "other", a ``shell``
    custom tool given JSON arguments ran an empty command, and ``exec_command``'s
    ``Process exited with code N`` header was kept as output."""
    rep = import_paths("auto", [NEWER], tmp_path, progress=False)
    assert rep.detection_lines() == [
        "auto: 1 as codex ('timestamp'/'type'/'payload' lines of session_meta/response_item)"]
    res, rf = one(NEWER, tmp_path / "named")
    assert [row(t) for t in rf.turns] == [
        ("shell_command", "EXP", "shell:grep_def", "go_to_definition", None),
        ("exec_command", "PKR", "shell:sed_n", None, "src/flask/app.py", (1212, 1213)),
        ("shell", "OVW", "shell:ls", None, "src/flask"),
        ("exec_command", "EXE", "shell:execute", "python", None),
    ]
    t = {x.turn: x for x in rf.turns}
    assert [t[k].metrics.exit_code for k in (1, 2, 3, 4)] == [0, 0, 0, 1]
    assert (t[1].metrics.symbol, t[1].metrics.result_count) == ("make_response", 2)
    assert t[2].observation.startswith("    def make_response")  # the header is not output
    assert (t[1].tokens_in, t[1].tokens_out) == (4100, 60)
    assert (rf.header.source.agent_version, rf.header.model.name) == ("0.146.0", "gpt-5.5-codex")
    assert {"type:world_state": 1, "type:inter_agent_communication_metadata": 1}.items() \
        <= res.unused.items()
