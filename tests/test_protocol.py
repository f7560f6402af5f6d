"""The XML turn protocol: every malformed form gets a precise error kind."""

import re

import pytest

from adakit.protocol import (
    extract_thinking,
    function_tools,
    parse_function_call,
    parse_reply,
    render_call,
    tool_grammar,
)
from adakit.record import ToolCall
from adakit.tools import TOOL_SPECS

PEEK = "<peek_code_region>\n<file_path>src/app.py</file_path>\n<start_line>10</start_line>\n</peek_code_region>"


def test_well_formed_call_with_thinking():
    p = parse_reply("<thinking>look at the app</thinking>\n" + PEEK, TOOL_SPECS)
    assert p.error is None
    assert p.thinking == "look at the app"
    assert p.call.tool == "peek_code_region"
    assert p.call.params == {"file_path": "src/app.py", "start_line": 10}


def test_types_are_coerced():
    text = (
        "<stash_conclusion><content>done</content><proceed_to_finalize>True</proceed_to_finalize>"
        "</stash_conclusion>"
    )
    p = parse_reply(text, TOOL_SPECS)
    assert p.call.params["proceed_to_finalize"] is True
    text = (
        "<explore_code><action_type>GO_TO_DEFINITION</action_type><current_file_path>a.py"
        "</current_file_path><current_line_number> 1,200 </current_line_number></explore_code>"
    )
    p = parse_reply(text, TOOL_SPECS)
    assert p.call.params["action_type"] == "go_to_definition"
    assert p.call.params["current_line_number"] == 1200


@pytest.mark.parametrize(
    "text,kind",
    [
        ("", "empty_reply"),
        ("<thinking>hmm</thinking> I will read the file now.", "no_tool"),
        (PEEK + "\n" + PEEK.replace("10", "20"), "multiple_tools"),
        ("<read_file><path>a.py</path></read_file>", "unknown_tool"),
        ("<peek_code_region><file_path>a.py</file_path></peek_code_region>", "missing_param"),
        (
            "<peek_code_region><file_path>a.py</file_path><start_line>ten</start_line></peek_code_region>",
            "bad_value",
        ),
        (
            "<peek_code_region><file_path>a.py</file_path><start_line>1</start_line><lines>5</lines></peek_code_region>",
            "unknown_param",
        ),
        (
            "<explore_code><action_type>jump</action_type><current_file_path>a.py</current_file_path>"
            "<current_line_number>1</current_line_number></explore_code>",
            "bad_value",
        ),
        (
            "<stash_conclusion><content>x</content><proceed_to_finalize>maybe</proceed_to_finalize></stash_conclusion>",
            "bad_value",
        ),
    ],
)
def test_malformed_forms(text, kind):
    p = parse_reply(text, TOOL_SPECS)
    assert p.call is None
    assert p.error.kind == kind
    assert p.error.message  # the agent always gets an explanation


def test_missing_param_message_names_parameter_and_usage():
    p = parse_reply("<peek_code_region><file_path>a.py</file_path></peek_code_region>", TOOL_SPECS)
    assert "start_line" in p.error.message and "<peek_code_region>" in p.error.message


def test_tool_inside_thinking_is_not_a_call():
    text = "<thinking>maybe " + PEEK + " later</thinking> nothing yet"
    assert parse_reply(text, TOOL_SPECS).error.kind == "no_tool"


def test_render_round_trip():
    call = ToolCall(tool="bookmark", params={"file_path": "a.py", "line_number": 3, "note": "n"})
    p = parse_reply(render_call(call, "why"), TOOL_SPECS)
    assert p.call == call and p.thinking == "why"


def test_function_calls_use_the_same_rules():
    ok = parse_function_call("peek_code_region", '{"file_path": "a.py", "start_line": "4"}', TOOL_SPECS)
    assert isinstance(ok, ToolCall) and ok.params["start_line"] == 4
    assert parse_function_call("nope", "{}", TOOL_SPECS).kind == "unknown_tool"
    assert parse_function_call("peek_code_region", "{not json", TOOL_SPECS).kind == "bad_value"
    assert parse_function_call("peek_code_region", "{}", TOOL_SPECS).kind == "missing_param"
    names = [t["function"]["name"] for t in function_tools(TOOL_SPECS)]
    assert names == list(TOOL_SPECS)


def test_extract_thinking_handles_unclosed_block():
    thinking, rest = extract_thinking("<thinking>never closed")
    assert thinking == "never closed" and rest == ""


def test_grammar_covers_every_tool_and_restricts_paths():
    g = tool_grammar(TOOL_SPECS, files=["src/a.py", "src/b.py"])
    for name in TOOL_SPECS:
        assert f'"<{name}>\\n"' in g
    assert 'path ::= "src/a.py" | "src/b.py"' in g
    # every rule referenced is defined
    defined = set(re.findall(r"^(\w+) ::=", g, re.M))
    used = set(re.findall(r"\b(tool\d+(?:opt\d+)?|think|text|int|bool|path|call)\b", g))
    assert used <= defined
