"""The native tool-call format (issue 23, ``tool_format: native``): the grammar, the reader,
what a run sends and records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI
from gbnf import admits
from test_scaffold_options import _grammar, launch
from test_scaffold_options import api_key as api_key  # noqa: F401  (the test key, autouse)
from test_scaffold_options import world as world  # noqa: F401  (the toy world fixture)

from adakit.apparatus.agent import CLOSE_TOOLS, RunConfig, scaffold_digest
from adakit.apparatus.native import native_grammar, parse_native_reply, render_native_call
from adakit.apparatus.tools import TOOL_SPECS
from adakit.apparatus.world import World
from adakit.record import ToolCall
from adakit.study.retry import changed_settings
from adakit.study.spec import RunSpec

THINK = "The app module is where requests arrive, so read its first lines."
PEEK = ToolCall(tool="peek_code_region", params={"file_path": "pkg/app.py", "start_line": 1,
                                                 "end_line": 10})
NATIVE_FINAL = render_native_call(ToolCall(tool="stash_conclusion", params={
    "title": "Flow", "content": "serve calls helper", "proceed_to_finalize": True}),
    "The `serve` function calls helper and adds one, so the flow is clear.")


def test_the_grammar_admits_a_native_call_and_nothing_else() -> None:
    g = native_grammar(TOOL_SPECS, files=["pkg/app.py", "pkg/util.py"], thinking="free")
    good = render_native_call(PEEK, THINK)
    assert admits(g, good)
    assert admits(g, render_native_call(ToolCall(tool="explore_code", params={
        "action_type": "go_to_definition", "current_file_path": "pkg/app.py",
        "current_line_number": 4, "symbol_name": "helper"}), THINK))
    assert admits(g, render_native_call(ToolCall(tool="create_memory", params={
        "memory_title": 'a "quoted" name', "memory_content": "line one\nline two"}), THINK))
    assert not admits(g, good.replace("pkg/app.py", "pkg/nope.py"))  # a file not in the world
    assert not admits(g, good.replace('"start_line": 1', '"start_line": "one"'))
    assert not admits(g, good + "\n" + render_native_call(PEEK))  # a second call
    assert not admits(g, good.replace('"name": "peek_code_region"', '"name": "run_shell"'))
    close = native_grammar(CLOSE_TOOLS, text_caps={"content": 900}, thinking="free")
    assert admits(close, NATIVE_FINAL.replace('"title": "Flow", ', ""))  # an optional first member
    assert admits(close, NATIVE_FINAL)
    assert not admits(close, good)


def test_the_reader_takes_one_json_call_and_names_what_is_wrong() -> None:
    parsed = parse_native_reply(render_native_call(PEEK, THINK), TOOL_SPECS)
    assert parsed.error is None and parsed.call == PEEK and parsed.thinking == THINK
    cases = {
        "<thinking>hm</thinking> no call here": ("no_tool", "between <tool_call> and </tool_call>"),
        "": ("empty_reply", "The reply was empty."),
        render_native_call(PEEK) * 2: ("multiple_tools", "made 2 calls"),
        "<tool_call>\n{\"name\": \"peek_code_region\", \"arguments\": {\n</tool_call>":
            ("bad_value", "not one JSON object"),
        "<tool_call>\n[1, 2]\n</tool_call>": ("bad_value", '{"name": TOOL'),
        "<tool_call>\n{\"name\": \"run_shell\", \"arguments\": {}}\n</tool_call>":
            ("unknown_tool", "no tool named 'run_shell'"),
    }
    for text, (kind, words) in cases.items():
        error = parse_native_reply(text, TOOL_SPECS).error
        assert error is not None and error.kind == kind and words in error.message, text


def test_a_native_run_lists_the_tools_through_the_template_and_records_the_format(
        world: World, tmp_path: Path) -> None:
    with FakeOpenAI([render_native_call(PEEK, THINK), NATIVE_FINAL]) as fake:
        rf = launch(world, fake, tmp_path / "native.jsonl", tool_format="native", thinking_rule="free")
    first = fake.requests[0]
    assert [t["function"]["name"] for t in first["tools"]] == list(TOOL_SPECS)
    assert '"<tool_call>\\n" call' in _grammar(first)
    system = first["messages"][0]["content"]
    assert "between <tool_call> and </tool_call>" in system and "Exactly one tool call in XML" not in system
    assert "## peek_code_region" not in system  # the tools are the template's list, not ours
    assert rf.header.scaffold["tool_format"] == "native"
    assert rf.header.system_prompt == system
    assert [t.call.tool for t in rf.turns] == ["peek_code_region", "stash_conclusion"]
    assert rf.end is not None and rf.end.reason == "finalize"
    # the conversation keeps the reply as the model wrote it
    assert fake.requests[1]["messages"][2]["content"] == render_native_call(PEEK, THINK)


def test_the_xml_default_is_left_as_it_was(world: World, tmp_path: Path) -> None:
    from test_scaffold_options import FINAL

    with FakeOpenAI([FINAL]) as fake:
        rf = launch(world, fake, tmp_path / "xml.jsonl")
    assert "tools" not in fake.requests[0] and "tool_format" not in rf.header.scaffold
    assert scaffold_digest(RunConfig(run_id="r")) != scaffold_digest(
        RunConfig(run_id="r", tool_format="native"))  # its own template counts only when on
    with pytest.raises(ValueError, match="tool_format must be one of xml, native"):
        RunConfig(run_id="x", tool_format="json")

    def spec(**settings: object) -> RunSpec:
        return RunSpec("s", "fake", "toy", "feature_tracing", "natural", 0, 0,
                       tuple(sorted({"turn_bound": 3, **settings}.items())))

    assert changed_settings(rf.header, spec()) == ()
    assert changed_settings(rf.header, spec(tool_format="native")) == ("tool_format",)


def test_a_native_demonstration_writes_its_examples_in_the_native_format(world: World) -> None:
    from adakit.apparatus.agent import system_prompt
    from adakit.apparatus.conditions import get_condition

    text = system_prompt(world, get_condition("natural"), demonstration="toy", tool_format="native")
    examples = text.split("# A worked example", 1)[1]
    assert "<tool_call>" in examples and "</peek_code_region>" not in examples
    assert json.loads(examples.split("<tool_call>\n", 1)[1].split("\n</tool_call>", 1)[0])["name"]


def test_a_turn_after_a_streak_of_notes_lists_only_the_navigation_tools(
        world: World, tmp_path: Path) -> None:
    """``cognitive_streak`` in the native format: the chat template's tool list of the turn
    after the streak holds the three navigation tools alone; the turn after that, all again."""
    note = ToolCall(tool="bookmark", params={"file_path": "pkg/app.py", "line_number": 1,
                                             "note": "the entry point"})
    replies = [render_native_call(note, THINK), render_native_call(PEEK, THINK), NATIVE_FINAL]
    with FakeOpenAI(replies) as fake:
        rf = launch(world, fake, tmp_path / "streak.jsonl", tool_format="native",
                    thinking_rule="free", cognitive_streak=1)
    listed = [[t["function"]["name"] for t in r["tools"]] for r in fake.requests]
    assert listed[1] == ["get_structural_overview", "peek_code_region", "explore_code"]
    assert listed[0] == listed[2] == list(TOOL_SPECS)
    assert rf.end is not None and rf.end.reason == "finalize"
