"""``adakit import aider`` (issue 27) on two hand-made chat histories in the shape of two aider
versions (tests/fixtures/agent_cli/aider): an older one (v0.40: ``Models:``, ``/run`` asking
``(y/n/instructions)`` and repeating the output, no token lines, no ``/read-only``) for the
flask world, and a newer one (v0.86: ``Main model:``, ``/read-only``, ``/test``, ``Tokens:``
lines, ``Add file to the chat?`` after the file's name, a failed edit, an empty session)
inside the small repository it worked on. Expected values are read off the fixtures and the
files by hand."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import matplotlib.pyplot as plt
from test_schema import validate_corpus

from adakit.importers import aider, batch
from adakit.importers.base import Target
from adakit.importers.batch import import_paths
from adakit.importers.formats import discover
from adakit.lenses import footprint as fp
from adakit.lenses import journey, policy, surface
from adakit.record import load_corpus, read_run

FIXTURES = Path(__file__).parent / "fixtures" / "agent_cli" / "aider"
OLDER = FIXTURES / "v0.40" / ".aider.chat.history.md"
NEWER_REPO = FIXTURES / "v0.86"
NEWER = NEWER_REPO / ".aider.chat.history.md"


def row(t) -> tuple:
    m = t.metrics
    return (t.call.tool, m.tool, m.mapped_by, m.action, m.file, *m.ranges)


def runs(rep) -> list:
    return [read_run(r.written) for r in rep.imported]


def test_an_older_history_on_the_flask_world(tmp_path, flask_world):
    rep = import_paths("aider", [OLDER], tmp_path, world="flask", progress=False)
    (rf,) = runs(rep)
    assert [row(t) for t in rf.turns] == [
        ("add", "PKR", "tool:chat_file", "whole_file", "src/flask/helpers.py", (1, 641)),
        ("reply", "MEM", "tool:think", None, None),
        ("add", "PKR", "tool:chat_file", "whole_file", "src/flask/app.py", (1, 1536)),
        ("reply", "MEM", "tool:think", None, None),
        ("run", "EXE", "shell:execute", "pytest", None),
        # the SEARCH text stands at helpers.py 606-607 (pinned source): the comment goes in at 607
        ("search_replace", "EDT", "tool:search_replace", "search_replace", "src/flask/helpers.py",
         (607, 607)),
        ("search_replace", "EDT", "tool:search_replace", "search_replace", "src/flask/helpers.py",
         (583, 583)),
    ]
    t = {x.turn: x for x in rf.turns}
    assert t[2].thinking.startswith("`get_root_path` first looks") and t[2].raw_text == t[2].thinking
    assert t[5].observation == ("..                                                                       "
                                "[100%]\n2 passed, 120 deselected in 0.21s")  # repeats not kept
    assert t[6].thinking == "I'll document the fallback where it happens."
    assert t[6].observation == "Applied edit to src/flask/helpers.py"
    h = rf.header
    assert (h.model.name, h.model.mode, h.source.agent_version, h.source.timing, h.world.name) == (
        "gpt-4o", "diff", "0.40.6", "none", "flask")
    assert h.task.prompt == ("Why does get_root_path fall back to the working directory?\n"
                             "Show me where that happens.")
    assert rf.end.conclusion == "I'll document the fallback where it happens."  # the last prose
    assert rf.end.totals == {"steps": 7, "replies": 4, "commits": 2}
    assert rep.imported[0].unused == {"command:/undo": 1}


def test_without_a_world_the_files_are_kept_without_lines(tmp_path):
    rep = import_paths("auto", [OLDER], tmp_path, progress=False)
    (rf,) = runs(rep)
    reads = [t.metrics for t in rf.turns if t.metrics.tool == "PKR"]
    assert [(m.file, m.action, m.ranges) for m in reads] == [
        ("src/flask/helpers.py", "lines_unknown", []), ("src/flask/app.py", "lines_unknown", [])]
    assert all(not t.metrics.ranges for t in rf.turns)
    assert (rf.header.world.name, rf.header.world.source) == ("v0.40", "trajectory")
    assert rep.detection_lines() == ["auto: 1 as aider (a '# aider chat started at' line)"]


def test_a_newer_history_read_with_the_repository_it_sits_in(tmp_path):
    rep = import_paths("auto", [NEWER_REPO], tmp_path, progress=False)
    assert rep.counts() == {"empty session": 1} and rep.bad == 0  # started and left: not bad
    assert [r.path.rsplit(":", 1)[1] for r in rep.results] == ["2", "89", "95"]
    first, second = runs(rep)
    assert [row(t) for t in first.turns] == [
        ("add", "PKR", "tool:chat_file", "whole_file", "calc/ops.py", (1, 11)),
        ("read-only", "PKR", "tool:chat_file", "whole_file", "README.md", (1, 5)),
        ("test", "EXE", "shell:execute", "pytest", None),
        # on disk the edit is applied: found by its REPLACE text, the guard is lines 9-10
        ("search_replace", "EDT", "tool:search_replace", "search_replace", "calc/ops.py", (9, 10)),
        ("reply", "MEM", "tool:think", None, None),
        ("add", "PKR", "tool:chat_file", "whole_file", "spec/ops_spec.py", (1, 13)),
        ("search_replace", "EDT", "tool:search_replace", "search_replace", "spec/ops_spec.py",
         (10, 13)),
        ("search_replace", "EDT", "tool:search_replace", "search_replace", "CHANGES.md", (1, 3)),
    ]
    t = {x.turn: x for x in first.turns}
    assert t[3].observation.startswith(".F") and t[3].observation.endswith("1 failed, 1 passed in 0.03s")
    assert [(x.tokens_in, x.tokens_out, x.cost_usd) for x in first.turns if x.tokens_in] == [
        (3100, 142, 0.01), (3400, 31, 0.01), (4000, 160, 0.02)]
    assert t[7].thinking == "Here is the new check, and a changelog with the fix:" and not t[8].thinking
    h = first.header
    assert (h.model.name, h.source.agent_version, h.world.source) == (
        "anthropic/claude-sonnet-4-20250514", "0.86.1", f"folder:{NEWER_REPO.resolve()}")
    assert first.end.totals == {"steps": 8, "replies": 3, "commits": 2, "cost_usd": 0.04}
    assert [row(x) for x in second.turns] == [
        ("add", "PKR", "tool:chat_file", "whole_file", "calc/ops.py", (1, 11)),
        ("run", "EXE", "shell:execute", "git", None),
        ("reply", "MEM", "tool:think", None, None),
        ("search_replace", "EDT", "tool:search_replace", "search_replace", "calc/ops.py"),
    ]
    failed = second.turns[3]
    assert failed.metrics.error_type == "tool_error" and "must exactly match" in failed.observation
    assert second.turns[1].observation.splitlines() == [
        "8a41c07 test: add negatives; docs: changelog", "3f2a9c1 fix: return None when dividing by zero"]
    assert second.header.task.prompt == "Should divide raise instead of returning None?"
    assert second.end.conclusion.startswith("Returning `None` hides the error")
    assert rep.imported[1].unused == {"command:/lint": 1} and not rep.imported[0].unused


def test_importing_again_takes_only_new_sessions(tmp_path):
    src = tmp_path / "repo"
    shutil.copytree(NEWER_REPO, src)
    out = tmp_path / "out"
    assert len(import_paths("aider", [src], out, progress=False).imported) == 2
    again = import_paths("aider", [src], out, progress=False)
    assert not again.imported and again.counts() == {"already imported": 2, "empty session": 1}
    history = src / ".aider.chat.history.md"
    history.write_text(history.read_text() + "\n# aider chat started at 2025-09-16 10:00:00\n\n"
                       "#### what does add do?  \n\nIt returns the sum of its two arguments.\n")
    grown = import_paths("aider", [src], out, progress=False)
    assert [r.path.rsplit(":", 1)[1] for r in grown.imported] == ["144"]
    (rf,) = runs(grown)
    assert [row(t) for t in rf.turns] == [("reply", "MEM", "tool:think", None, None)]
    assert rf.header.task.prompt == "what does add do?"


def test_folders_are_searched_for_the_hidden_history_only(tmp_path):
    shutil.copytree(NEWER_REPO, tmp_path / "repo")
    (tmp_path / "repo" / ".aider.input.history").write_text("# 2025-09-14\n+/add calc/ops.py\n")
    found, _ = discover([tmp_path], "auto")
    assert [p.name for p in found] == [".aider.chat.history.md"]  # not README.md, not CHANGES.md
    assert [p.name for p in discover([tmp_path], "codex")[0]] == []


def test_bad_input_is_skipped_with_a_reason(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "notes.aider.chat.history.md").write_text("# my notes\n\nnothing from aider here\n")
    (src / "latin1.aider.chat.history.md").write_bytes(
        b"\n# aider chat started at 2025-01-01 10:00:00\n\n#### caf\xe9\n")
    text = NEWER.read_text()
    cut = text.index("=======\n# Changes")  # the history stops inside an edit block
    (src / "cut.aider.chat.history.md").write_text(text[:cut])
    rep = import_paths("aider", [src], tmp_path / "out", progress=False)
    reasons = {Path(r.path.rsplit(":", 1)[0]).name: (r.reason, r.detail) for r in rep.skipped}
    assert reasons == {
        "notes.aider.chat.history.md": ("unknown shape", "no '# aider chat started at' line"),
        "latin1.aider.chat.history.md": ("not UTF-8 text", "byte 54")}
    (rf,) = runs(rep)  # the cut session imports; its last block is a reply aider could not use
    last = rf.turns[-1]
    assert last.parse_error is not None and last.call is None
    assert "without its =======" in last.parse_error.message
    assert rf.turns[-2].metrics.file == "spec/ops_spec.py"


def test_mangled_histories_never_stop_an_import(tmp_path):
    """Lines dropped, doubled, cut or swapped at random: every session imports or is skipped
    with a one-line reason (seeded, so a failure reproduces)."""
    rnd = random.Random("aider-shapes")
    batch._init("auto", str(tmp_path / "out"), frozenset(), Target())
    (tmp_path / "out").mkdir()
    seen = 0
    for source in (OLDER, NEWER):
        for k in range(20):
            lines = source.read_text().split("\n")
            for _ in range(rnd.randint(1, 6)):
                i = rnd.randrange(len(lines))
                lines[i] = rnd.choice(["", "> ", "#### ", "<<<<<<< SEARCH", "=======", "```",
                                       lines[i][: rnd.randrange(len(lines[i]) + 1)],
                                       lines[rnd.randrange(len(lines))]])
            path = tmp_path / f"{k}.aider.chat.history.md"
            path.write_text("\n".join(lines))
            for res in batch.import_file(path):
                assert res.ok or (res.reason and "\n" not in res.detail), res
                seen += 1
    assert seen >= 40


def test_edit_blocks_of_one_fence_share_the_file():
    reply = ["Two changes:", "", "a.py", "```python", "<<<<<<< SEARCH", "x = 1", "=======",
             "x = 2", ">>>>>>> REPLACE", "<<<<<<< SEARCH", "y = 1", "=======", "y = 3",
             ">>>>>>> REPLACE", "```", "", "**b/c.py**", "```", "<<<<<<< SEARCH", "=======",
             "new", ">>>>>>> REPLACE", "```", "Done."]
    prose, blocks, broken = aider.edit_blocks(reply)
    assert blocks == [("a.py", "x = 1", "x = 2"), ("a.py", "y = 1", "y = 3"), ("b/c.py", "", "new")]
    assert prose == "Two changes:\n\n\nDone." and broken is None
    nameless = ["<<<<<<< SEARCH", "a", "=======", "b", ">>>>>>> REPLACE"]
    _, blocks, broken = aider.edit_blocks([*nameless, "```", "d.py", *nameless])
    assert blocks == [("d.py", "a", "b")] and broken == "a SEARCH/REPLACE block without a file name"
    prose, blocks, _ = aider.edit_blocks(["Fenced:", "```js", "e.js", *nameless, "```"])
    assert blocks == [("e.js", "a", "b")] and prose == "Fenced:"  # diff-fenced: name inside


def test_lenses_and_the_schema_on_imported_sessions(tmp_path, flask_world):
    import_paths("aider", [OLDER], tmp_path, world="flask", progress=False)
    import_paths("aider", [NEWER_REPO], tmp_path, progress=False)
    assert validate_corpus(tmp_path) == 3 * 2 + 7 + 8 + 4
    c = load_corpus(tmp_path, cache=False)
    surf = surface.run_surface(c)
    assert sorted(surf["turns"]) == [4, 7, 8]
    # reads only (an edit's lines are not read): 641 + 1536; 11 + 5 + 13; 11
    assert sorted(surf["loc_viewed"]) == [11, 29, 641 + 1536]
    ev = journey.arc_events(c)
    assert len(ev) == 7 + 8 + 4
    plt.close(journey.plot_journey_arcs(ev, c.runs, facet=["model"]))
    tags = policy.tag_transitions(c.turns)
    assert len(tags) == 6 + 7 + 3 and "edit" in set(tags["tag"])
    files, _ = fp.map_files("flask", c.reads, source=fp.world_source(c.runs, "flask"))
    dens = fp.trace_density(c.reads, c.runs).set_index("file")
    assert dens.loc["src/flask/app.py", "lines_shown"] == 1536
    plt.close(fp.plot_repo_map(files, dens.reset_index()))


def test_the_whole_edit_format_rewrites_files(tmp_path):
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "main.py").write_text("print('hi')\nprint('there')\n")
    (repo / ".aider.chat.history.md").write_text(
        "\n# aider chat started at 2025-07-01 12:00:00\n\n> Aider v0.86.2  \n"
        "> Model: deepseek/deepseek-chat with whole edit format, infinite output  \n"
        "> Added src/main.py to the chat.  \n\n#### greet twice  \n\nHere it is:\n\n"
        "src/main.py\n```python\nprint('hi')\nprint('there')\n```\n\n"
        "> Tokens: 1.2k sent, 30 received.  \n> Applied edit to src/main.py  \n")
    rep = import_paths("auto", [repo], tmp_path / "out", progress=False)
    (rf,) = runs(rep)
    assert [row(t) for t in rf.turns] == [
        ("add", "PKR", "tool:chat_file", "whole_file", "src/main.py", (1, 2)),
        ("whole_file", "EDT", "tool:search_replace", "search_replace", "src/main.py", (1, 2))]
    assert rf.turns[1].thinking == "Here it is:" and rf.turns[1].tokens_in == 1200
    assert rf.header.model.mode == "whole"


def test_the_command_counts_an_empty_session_as_no_fault(tmp_path, capsys):
    from adakit.cli import main as cli

    assert cli(["import", "aider", str(NEWER_REPO), "--out", str(tmp_path), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == (f"imported 2 runs into {tmp_path}; skipped 1: "
                                             "1 empty session")
    assert "empty session (no exchange: aider was started and left)" in captured.err


def test_the_udiff_edit_format_is_located_like_a_search_replace(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(NEWER_REPO / "calc", repo / "calc")
    (repo / ".aider.chat.history.md").write_text(
        "\n# aider chat started at 2025-08-01 09:00:00\n\n"
        "> Main model: gpt-4-turbo with udiff edit format  \n"
        "> Added calc/ops.py to the chat.  \n\n#### guard divide against zero  \n\n"
        "Guarding it:\n\n```diff\n--- calc/ops.py\n+++ calc/ops.py\n@@ ... @@\n"
        " def divide(a, b):\n+    if b == 0:\n+        return None\n     return a / b\n```\n\n"
        "> Applied edit to calc/ops.py  \n")
    (rf,) = runs(import_paths("auto", [repo], tmp_path / "out", progress=False))
    assert [row(t) for t in rf.turns] == [
        ("add", "PKR", "tool:chat_file", "whole_file", "calc/ops.py", (1, 11)),
        ("udiff", "EDT", "tool:search_replace", "search_replace", "calc/ops.py", (9, 10))]
    assert rf.turns[1].thinking == "Guarding it:" and rf.turns[1].call.params["search"] == (
        "def divide(a, b):\n    return a / b")
