"""``adakit import inspect`` (issue 27) on two hand-made logs in the shape of two Inspect AI
log versions: an older ``.json`` (tests/fixtures/agent_cli/inspect; events in
``transcript.events`` with naive timestamps, bash/python/submit tools, a second sample without
messages) and a newer ``.eval`` zip built here (``header.json``, ``samples/*.json``,
``events`` with ``completed``, ``attachments``, ``text_editor``, ``bash_session``, ``think``).
Expected values are read off the fixtures by hand."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from test_schema import validate_corpus

from adakit.cli import main as cli
from adakit.importers.batch import import_paths
from adakit.importers.mapping import Context, map_tool, parse_tool_map
from adakit.lenses import footprint as fp
from adakit.lenses import journey, policy, surface
from adakit.record import load_corpus, read_run

OLD = Path(__file__).parent / "fixtures" / "agent_cli" / "inspect" / \
    "2024-09-12T09-59-58_flask-qa_Xq3.json"
CTX = "/testbed/src/flask/ctx.py"
VIEW = f"Here's the result of running `cat -n` on {CTX}:\n" + "".join(
    f"{n:6d}\t    line {n} of ctx.py\n" for n in range(240, 300))
SNIPPET = (f"The file {CTX} has been edited. Here's the result of running `cat -n` on a snippet "
           f"of {CTX}:\n" + "".join(f"{n:6d}\t    line {n}\n" for n in range(248, 252))
           + "   252\t        # pushed once\n   253\t        self._pushed = True\n"
           + "".join(f"{n:6d}\t    line {n}\n" for n in range(254, 258)))
CALLS = [  # (function, arguments, tool message content, tool error)
    ("text_editor", {"command": "view", "path": CTX, "view_range": [240, 299]}, "attachment://a1", None),
    ("bash", {"cmd": "grep -rn 'app_ctx' /testbed/src/flask | head -5"},
     "".join(f"/testbed/src/flask/ctx.py:{n}:app_ctx\n" for n in (251, 262, 270, 281, 290)), None),
    ("think", {"thought": "push() sets the context var; the fix goes there."}, "", None),
    ("text_editor", {"command": "str_replace", "path": CTX, "old_str": "x",
                     "new_str": "        # pushed once\n        self._pushed = True"}, SNIPPET, None),
    ("text_editor", {"command": "insert", "path": "/testbed/src/flask/globals.py", "insert_line": 10,
                     "new_str": "# app context\n# request context\n"}, "The file was edited.", None),
    ("text_editor", {"command": "create", "path": "/testbed/notes/appctx.md",
                     "file_text": "# notes\n\npush sets it\n"}, "File created successfully.", None),
    ("bash_session", {"action": "type_submit", "input": "python -m pytest tests/test_appctx.py -q"},
     "", {"type": "timeout", "message": "Command timed out before completing."}),
    ("web_search", {"query": "flask app context"}, "no results", None),
    ("submit", {"answer": "push() now marks the context."}, "", None),
]


def _stamp(s: int) -> str:
    return f"2025-10-02T14:{s // 60:02d}:{s % 60:02d}.000000+00:00"


def new_sample(sid: str = "pallets__flask-5014") -> dict:
    """A sample in the newer shape: message ids, content blocks, events, attachments."""
    msgs: list[dict] = [
        {"id": "m0", "role": "system", "content": "You are an expert engineer.", "source": None},
        {"id": "m1", "role": "user", "content": [{"type": "text", "text": "Fix the app context push."}],
         "source": "input"}]
    events: list[dict] = [{"event": "sample_init", "timestamp": _stamp(0), "working_start": 0,
                           "sample": {}, "state": {}},
                          {"event": "span_begin", "timestamp": _stamp(0), "id": "s1", "name": "solver"}]
    for i, (fn, args, out, err) in enumerate(CALLS, 1):
        call = {"id": f"toolu_{i}", "function": fn, "arguments": args, "type": "function"}
        content = [{"type": "reasoning", "reasoning": f"step {i} reasoning", "redacted": False},
                   {"type": "text", "text": f"Step {i}."}]
        msgs.append({"id": f"a{i}", "role": "assistant", "content": content, "source": "generate",
                     "tool_calls": [call], "model": "claude-sonnet-4-5"})
        msgs.append({"id": f"t{i}", "role": "tool", "content": out, "tool_call_id": f"toolu_{i}",
                     "function": fn, "error": err})
        t = 10 * i
        events.append({"event": "model", "timestamp": _stamp(t), "completed": _stamp(t + 3),
                       "working_start": t, "model": "anthropic/claude-sonnet-4-5", "input": [],
                       "tools": [], "tool_choice": "auto", "config": {},
                       "output": {"model": "claude-sonnet-4-5", "choices": [
                           {"message": msgs[-2], "stop_reason": "tool_calls"}],
                           "usage": {"input_tokens": 100 * i, "output_tokens": 10 * i,
                                     "input_tokens_cache_read": 1000}}})
        events.append({"event": "tool", "timestamp": _stamp(t + 4), "completed": _stamp(t + 7),
                       "working_start": t + 4, "working_time": 3.0, "id": f"toolu_{i}",
                       "function": fn, "arguments": args, "result": out, "events": []})
    events.append({"event": "compaction", "timestamp": _stamp(35), "type": "summary",
                   "tokens_before": 9000, "tokens_after": 1200})
    events.append({"event": "score", "timestamp": _stamp(99), "score": {"value": 1}})
    return {"id": sid, "epoch": 1, "input": [msgs[1]], "target": "", "messages": msgs,
            "output": {"model": "claude-sonnet-4-5", "choices": [], "completion": ""},
            "scores": {"swe_bench_scorer": {"value": 1}}, "metadata": {}, "store": {},
            "events": events, "model_usage": {}, "total_time": 100.0, "working_time": 80.0,
            "uuid": "U1", "attachments": {"a1": VIEW}, "events_data": None, "limit": None}


HEADER = {"version": 2, "status": "success",
          "eval": {"task": "inspect_evals/swe_bench_verified_mini", "task_id": "T9", "run_id": "R1",
                   "created": "2025-10-02T14:00:00+00:00", "dataset": {"name": "swe"},
                   "model": "anthropic/claude-sonnet-4-5", "config": {}, "solver": "basic_agent",
                   "packages": {"inspect_ai": "0.3.140"}},
          "plan": {"name": "plan", "steps": []}, "stats": {}}


def write_eval(path: Path, samples: dict[str, str], header: bool = True) -> Path:
    """A ``.eval`` zip: the header (or only the journal's start), the sample members given."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("_journal/start.json", json.dumps({k: HEADER[k] for k in ("version", "eval", "plan")}))
        for name, text in samples.items():
            zf.writestr(f"samples/{name}.json", text)
        if header:
            zf.writestr("header.json", json.dumps(HEADER))
            zf.writestr("summaries.json", "[]")
    return path


def row(t) -> tuple:
    m = t.metrics
    return (t.call.tool, m.tool, m.mapped_by, m.action, m.file, *m.ranges)


def one(path: Path, out: Path, fmt: str = "inspect", **kw):
    rep = import_paths(fmt, [path], out, progress=False, **kw)
    assert len(rep.imported) == 1, rep.summary()
    return rep, read_run(rep.imported[0].written)


def test_an_older_json_log_imports_its_good_sample_and_skips_the_bad_one(tmp_path):
    rep, rf = one(OLD, tmp_path, world="flask")
    assert [row(t) for t in rf.turns] == [
        ("bash", "EXP", "shell:grep_def", "go_to_definition", "src/flask/helpers.py"),
        ("bash", "PKR", "shell:sed_n", None, "src/flask/helpers.py", (195, 240)),
        ("python", "EXE", "tool:execute", "python", None),
        ("browse_repo", "EXE", "tool:other", "browse_repo", None),
        ("submit", "SUB", "tool:submit", "submit", None),
    ]
    assert rep.counts() == {"unknown shape": 1}
    assert rep.skipped[0].path.endswith(":flask-broken_epoch_1")
    assert "'messages'" in rep.skipped[0].detail
    t = rf.turns
    assert [(x.tokens_in, x.tokens_out) for x in t[:2]] == [(1100, 21), (1200, 22)]
    assert t[0].thinking == "I look for the definition first." and t[0].metrics.symbol == "url_for"
    assert t[1].ended_at - t[1].started_at == 2.0  # model event at :05, tool event at :07
    h = rf.header
    assert (h.model.name, h.source.agent_version, h.source.timing, h.task.target) == (
        "openai/gpt-4o-2024-08-06", "0.3.25", "recorded", "flask_qa:flask-url-for")
    assert (h.task.prompt, h.system_prompt) == ("Where does url_for build the URL?",
                                                "You are a careful software engineer.")
    assert rf.end.reason == "submit"
    assert rep.imported[0].unused == {"type:event:sample_init": 1, "type:event:score": 1,
                                      "field:store": 1}


def test_a_newer_eval_zip_maps_the_editor_with_its_lines(tmp_path, flask_world):
    log = write_eval(tmp_path / "new.eval", {"pallets__flask-5014_epoch_1": json.dumps(new_sample())})
    rep, rf = one(log, tmp_path / "out", world="flask")
    assert [row(t) for t in rf.turns] == [
        ("text_editor", "PKR", "tool:view", "range", "src/flask/ctx.py", (240, 299)),
        ("bash", "EXP", "shell:grep", "find_all_references", None),
        ("think", "MEM", "tool:think", None, None),
        ("text_editor", "EDT", "tool:edit", "str_replace", "src/flask/ctx.py", (252, 253)),
        ("text_editor", "EDT", "tool:edit", "insert", "src/flask/globals.py", (11, 12)),
        ("text_editor", "EDT", "tool:edit", "create", "/testbed/notes/appctx.md", (1, 3)),
        ("bash_session", "EXE", "shell:execute", "python", None),
        ("web_search", "EXE", "tool:other", "web_search", None),
        ("submit", "SUB", "tool:submit", "submit", None),
    ]
    t = rf.turns
    assert t[0].observation == VIEW  # the attachment resolved
    assert t[0].thinking == "step 1 reasoning\n\nStep 1." and t[0].raw_text == "Step 1."
    assert [(x.tokens_in, x.tokens_out) for x in t[:2]] == [(1100, 10), (1200, 20)]
    assert (t[0].latency_s, t[0].ended_at - t[0].started_at) == (3.0, 7.0)
    assert (t[6].metrics.exit_code, t[6].observation) == (1, "Command timed out before completing.")
    assert [(x.turn, i.source, i.text) for x in t for i in x.injected] == [
        (3, "compaction", "compaction (summary, 9000 to 1200 tokens)")]  # between turns 3 and 4
    h = rf.header
    assert (h.model.name, h.source.agent_version, h.model.mode, h.task.prompt) == (
        "anthropic/claude-sonnet-4-5", "0.3.140", "basic_agent", "Fix the app context push.")
    assert rep.imported[0].unused == {"type:event:sample_init": 1, "type:event:score": 1,
                                      "field:store": 1, "field:events_data": 1}
    assert all(x.sidechain is None for x in t)


def test_a_user_maps_their_own_tool_names(tmp_path, capsys):
    rep, rf = one(OLD, tmp_path, map_tool=["browse_repo=list_dir"])
    assert row(rf.turns[3]) == ("browse_repo", "OVW", "tool:view_dir", None, "/testbed/src/flask")
    assert parse_tool_map(["a = Grep", "b=text_editor"]) == {"a": "Grep", "b": "text_editor"}
    for bad, says in (("nameonly", "expected NAME=TOOL"), ("x=nosuchtool", "not a tool of")):
        with pytest.raises(ValueError, match=says):
            parse_tool_map([bad])
    capsys.readouterr()
    assert cli(["import", "inspect", str(OLD), "--out", str(tmp_path / "o2"),
                "--map-tool", "x=nosuchtool"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'nosuchtool' is not a tool of the mapping table" in err[0]


def test_cut_zips_and_damaged_samples_are_skipped_with_a_reason(tmp_path):
    good = json.dumps(new_sample())
    log = write_eval(tmp_path / "two.eval", {"a_epoch_1": good, "b_epoch_1": good[:-40],
                                             "c_epoch_1": json.dumps(new_sample("c"))})
    raw = log.read_bytes()
    (tmp_path / "cut.eval").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "empty.eval").write_bytes(b"PK\x03\x04")
    write_eval(tmp_path / "running.eval", {"a_epoch_1": json.dumps(new_sample("r"))}, header=False)
    rep = import_paths("auto", [tmp_path], tmp_path / "out", progress=False)
    reasons = {Path(r.path.split(":")[0]).name + r.path[len(r.path.split(":")[0]):]: r.reason
               for r in rep.skipped}
    assert reasons == {"cut.eval": "truncated zip", "empty.eval": "truncated zip",
                       "two.eval:b_epoch_1": "damaged sample"}
    assert sorted(r.path.rsplit(":", 1)[1] for r in rep.imported) == [
        "a_epoch_1", "a_epoch_1", "c_epoch_1"]  # running.eval: read from its journal's start
    assert all("\n" not in r.detail and r.detail for r in rep.skipped)
    again = import_paths("auto", [tmp_path / "two.eval"], tmp_path / "out", progress=False)
    assert again.counts() == {"already imported": 2, "damaged sample": 1}


def test_mangled_samples_never_stop_an_import(tmp_path):
    """Samples of both shapes with parts replaced by other JSON values: imported or skipped,
    never raised (seeded, so a failure reproduces)."""
    import random

    rnd = random.Random("inspect-shapes")
    values = [None, 0, -1, "x", "", [], {}, [1], {"a": 1}, True]
    members = {}
    older = json.loads(OLD.read_text())["samples"][0]
    for k in range(30):
        sample = new_sample(f"s{k}") if k % 2 else {**json.loads(json.dumps(older)), "id": f"s{k}"}
        node: object = sample
        for _ in range(rnd.randint(1, 5)):
            if isinstance(node, dict) and node:
                key = rnd.choice(list(node))
            elif isinstance(node, list) and node:
                key = rnd.randrange(len(node))
            else:
                break
            if rnd.random() < 0.35:
                node[key] = rnd.choice(values)  # type: ignore[index]
                break
            node = node[key]  # type: ignore[index]
        members[f"s{k}_epoch_1"] = json.dumps(sample)
    rep = import_paths("inspect", [write_eval(tmp_path / "m.eval", members)], tmp_path / "out",
                       progress=False)
    assert len(rep.results) == 30 and len(rep.imported) >= 10
    assert all(r.reason and "\n" not in r.detail for r in rep.skipped)


def test_auto_lenses_and_the_schema(tmp_path, flask_world):
    src = tmp_path / "src"
    src.mkdir()
    (src / OLD.name).write_bytes(OLD.read_bytes())
    write_eval(src / "new.eval", {"pallets__flask-5014_epoch_1": json.dumps(new_sample())})
    out = tmp_path / "out"
    rep = import_paths("auto", [src], out, world="flask", progress=False)
    assert sorted(rep.detection_lines()) == [
        "auto: 1 as inspect (a zip with header.json or _journal/start.json and samples/*.json)",
        "auto: 2 as inspect ('version', 'eval' with 'task' and 'model', and 'samples')"]
    assert validate_corpus(out) == 2 + 5 + 9 + 2  # headers, turns, ends
    c = load_corpus(out, cache=False)
    surf = surface.run_surface(c)
    assert sorted(surf["turns"]) == [5, 9] and surf["loc_viewed"].sum() == 46 + 60
    ev = journey.arc_events(c)
    plt.close(journey.plot_journey_arcs(ev, c.runs, facet=["model"]))
    tags = policy.tag_transitions(c.turns)
    assert "edit" in set(tags["tag"])
    files, _ = fp.map_files("flask", c.reads, source=fp.world_source(c.runs, "flask"))
    dens = fp.trace_density(c.reads, c.runs).set_index("file")
    assert dens.loc["src/flask/ctx.py", "lines_shown"] == 60
    assert dens.loc["src/flask/helpers.py", "lines_shown"] == 46
    plt.close(fp.plot_repo_map(files, dens.reset_index()))


def test_text_editor_edits_without_their_text_in_the_snippet():
    ctx = Context(cwd="/testbed", resolve=lambda p, cwd: p.removeprefix("/testbed/"))
    snippet = "edited.\n    40\tbefore\n    41\tsomething else\n    42\tafter\n"
    moved = map_tool("text_editor", {"command": "str_replace", "path": "/testbed/a.py",
                                     "old_str": "x", "new_str": "not shown"}, snippet, ctx)
    assert (moved.tool, moved.file, moved.ranges) == ("EDT", "a.py", [(40, 42)])
    undo = map_tool("text_editor", {"command": "undo_edit", "path": "/testbed/a.py"}, snippet, ctx)
    assert (undo.tool, undo.action, undo.ranges) == ("EDT", "undo_edit", [])
    failed = map_tool("text_editor", {"command": "insert", "path": "/testbed/a.py",
                                      "insert_line": 3, "new_str": "y"},
                      "", Context(resolve=ctx.resolve, result={"is_error": True}))
    assert (failed.tool, failed.failed, failed.ranges) == ("EDT", True, [])
    folder = map_tool("text_editor", {"command": "view", "path": "/testbed/src"},
                      "Here's the files and directories up to 2 levels deep in /testbed/src\n", ctx)
    assert (folder.tool, folder.rule, folder.file) == ("OVW", "tool:view_dir", "src")


def test_a_subagent_run_as_a_tool_is_a_sidechain_after_its_call(tmp_path, flask_world):
    """The main agent calls ``researcher`` (an agent run as a tool, span ag1); the researcher's
    own call is in the events only, and follows the call as a sidechain."""
    globals_py = "/testbed/src/flask/globals.py"
    sub_call = {"id": "sub_1", "function": "bash", "arguments": {"cmd": f"sed -n '1,20p' {globals_py}"}}
    main = [{"id": "toolu_r", "function": "researcher", "arguments": {"input": "find g"}},
            {"id": "toolu_s", "function": "submit", "arguments": {"answer": "g is in globals.py"}}]
    sample = new_sample("sub")
    sample["messages"] = sample["messages"][:2] + [
        {"role": "assistant", "content": "Ask the researcher.", "tool_calls": [main[0]]},
        {"role": "tool", "content": "g is in globals.py", "tool_call_id": "toolu_r"},
        {"role": "assistant", "content": "Done.", "tool_calls": [main[1]]},
        {"role": "tool", "content": "", "tool_call_id": "toolu_s"}]
    sample["events"] = [
        {"event": "span_begin", "id": "s1", "name": "solver", "timestamp": _stamp(0)},
        {"event": "span_begin", "id": "ag1", "parent_id": "s1", "type": "agent",
         "name": "researcher", "timestamp": _stamp(11)},
        {"event": "model", "span_id": "ag1", "timestamp": _stamp(12), "completed": _stamp(13),
         "output": {"choices": [{"message": {"role": "assistant", "content": "Read it.",
                                             "tool_calls": [sub_call]}}],
                    "usage": {"input_tokens": 70, "output_tokens": 7}}},
        {"event": "tool", "span_id": "ag1", "id": "sub_1", "function": "bash", "timestamp": _stamp(14),
         "completed": _stamp(15), "result": "".join(f"line {n}\n" for n in range(1, 21))},
        {"event": "tool", "span_id": "s1", "id": "toolu_r", "function": "researcher",
         "agent": "researcher", "agent_span_id": "ag1", "timestamp": _stamp(10),
         "completed": _stamp(16), "result": "g is in globals.py"}]
    rep, rf = one(write_eval(tmp_path / "sub.eval", {"sub_epoch_1": json.dumps(sample)}),
                  tmp_path / "out", world="flask")
    assert [row(t) for t in rf.turns] == [
        ("researcher", "EXE", "tool:other", "researcher", None),
        ("bash", "PKR", "shell:sed_n", None, "src/flask/globals.py", (1, 20)),
        ("submit", "SUB", "tool:submit", "submit", None)]
    side = [t.sidechain for t in rf.turns]
    assert side[0] is None and side[2] is None
    assert (side[1].id, side[1].parent_turn, side[1].agent, side[1].depth) == ("ag1", 1, "researcher", 1)
    sub = rf.turns[1]
    assert (sub.thinking, sub.tokens_in, sub.ended_at - sub.started_at) == ("Read it.", 70, 3.0)
    assert sub.observation.startswith("line 1\n")
