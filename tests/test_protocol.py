"""The XML turn protocol: every malformed form gets a precise error kind."""

import re

import pytest

from adakit.apparatus.protocol import (
    extract_thinking,
    function_tools,
    parse_function_call,
    parse_reply,
    render_call,
    tool_grammar,
)
from adakit.apparatus.tools import TOOL_SPECS
from adakit.record import ToolCall

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


# --------------------------------------------------- hardening (issue 17: adversarial probe)

# the tag expression the linear scanner replaced (quadratic on unclosed tags)
OLD_TAG_RE = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)>(.*?)</\1\s*>", re.S)


def test_tag_scanner_finds_what_the_regular_expression_found():
    from adakit.apparatus.protocol import tags

    samples = [
        PEEK, "<a><b>x</b></a>", "<a>1</a ><a>2</a\n>", "<a><a>x</a></a>", "<a>x</ab></a>",
        "<a b>x</a>", "<a>x</a", "</a><a>", "<_x9>y</_x9>", "<9a>x</9a>", "<a>\u2028</a\u3000>",
        "<a><b></a></b>", "<b><a></b></a>", "<a>" * 5 + "</a>" * 5, "",
    ]
    for text in samples:
        assert tags(text) == [(m.group(1), m.group(2)) for m in OLD_TAG_RE.finditer(text)], text


@pytest.mark.timeout(60)  # the quadratic parser needed hours for these; the linear one < 1 s
def test_adversarial_megabyte_replies_are_parsed_in_linear_time():
    cases = {
        "<a>" * 350_000: "no_tool",  # unclosed tags
        "<b></a>" * 150_000: "no_tool",  # closing tags of other names
        "<peek_code_region>" * 60_000 + "</peek_code_region>": "missing_param",
        "<thinking>" + "<bookmark>" * 100_000: "no_tool",  # never closed
        "<file_path>x</file_path>" * 45_000: "no_tool",
    }
    for text, kind in cases.items():
        assert len(text) > 900_000
        p = parse_reply(text, TOOL_SPECS, max_chars=None)
        assert p.call is None and p.error.kind == kind, (text[:30], p.error)


def test_replies_over_the_limit_are_refused_unread():
    from adakit.apparatus.protocol import MAX_REPLY_CHARS

    padded = "<thinking>" + "x" * (MAX_REPLY_CHARS - 200) + "</thinking>" + PEEK
    assert len(padded) <= MAX_REPLY_CHARS and parse_reply(padded, TOOL_SPECS).call is not None
    p = parse_reply(padded + " " * 200, TOOL_SPECS)
    assert p.call is None and p.error.kind == "no_tool" and p.thinking == ""
    assert p.error.message.startswith(
        f"The reply was {len(padded) + 200:,} characters long, over the {MAX_REPLY_CHARS:,}-"
        "character limit, and was not read. Every message must end with exactly one tool call")


def test_names_echoed_in_errors_are_cut():
    name = "t" * 5000
    p = parse_reply(f"<{name}>x</{name}>", TOOL_SPECS)
    assert p.error.kind == "unknown_tool" and len(p.error.message) < 400 and "t…'" in p.error.message
    p = parse_reply(f"<bookmark><{name}>1</{name}></bookmark>", TOOL_SPECS)
    assert p.error.kind == "unknown_param" and len(p.error.message) < 600
    assert parse_function_call(name, "{}", TOOL_SPECS).message.count("t") < 200


def test_huge_integers_are_a_bad_value_not_a_crash():
    digits = "9" * 5000
    p = parse_reply(f"<peek_code_region><file_path>a.py</file_path><start_line>{digits}"
                    "</start_line></peek_code_region>", TOOL_SPECS)
    assert p.error.kind == "bad_value"
    assert "parameter start_line is too large to be a line number (5,000 digits)" in p.error.message
    big = parse_reply(PEEK.replace(">10<", ">123456789012345678901234567890<"), TOOL_SPECS)
    assert big.call.params["start_line"] == 123456789012345678901234567890  # as before


def test_deeply_nested_function_arguments_are_a_bad_value():
    deep = '{"file_path": ' + "[" * 100_000 + "]" * 100_000 + ', "start_line": 1}'
    err = parse_function_call("peek_code_region", deep, TOOL_SPECS)
    assert err.kind == "bad_value" and "nested too deeply" in err.message
    nested: list = []
    for _ in range(5000):  # already decoded (as the model client hands it over)
        nested = [nested]
    err = parse_function_call("peek_code_region", {"file_path": nested, "start_line": 1}, TOOL_SPECS)
    assert err.kind == "bad_value" and "nested too deeply" in err.message
    long = '{"file_path": "' + "a" * 300_000 + '", "start_line": 1}'
    err = parse_function_call("peek_code_region", long, TOOL_SPECS)
    assert err.kind == "bad_value" and "characters long, over the" in err.message



def test_text_caps_give_one_parameter_its_own_cap_and_leave_the_rest_unchanged():
    from adakit.apparatus.protocol import tool_grammar
    from adakit.apparatus.tools import TOOL_SPECS

    plain = tool_grammar(TOOL_SPECS)
    assert tool_grammar(TOOL_SPECS, text_caps={}) == plain
    assert tool_grammar(TOOL_SPECS, text_caps={"content": 400}) == plain  # same cap: same grammar
    capped = tool_grammar(TOOL_SPECS, text_caps={"content": 900})
    assert "text-content ::= [^<]{1,900}" in capped
    assert capped.count("text-content") == 2  # its rule and stash_conclusion's content only
    assert capped.replace('"<content>" text-content', '"<content>" text').replace(
        "text-content ::= [^<]{1,900}\n", "") == plain


# --------------------------------------------------- the thinking rules (issue 23)


def _reply(thinking: str) -> str:
    return f"<thinking>{thinking}</thinking>\n" + PEEK


def test_the_gbnf_matcher_reads_the_whole_grammar() -> None:
    """tests/gbnf.py translates the grammar into a regular expression; a reply that follows
    it is admitted, and one file outside the list, a word for a number or a second call is not."""
    from gbnf import admits

    g = tool_grammar(TOOL_SPECS, files=["src/app.py", "src/a.py"])
    assert admits(g, _reply("Look at the first lines of the app module."))
    assert not admits(g, _reply("Look at the first lines of the app module.").replace("src/app.py", "src/nope.py"))
    assert not admits(g, _reply("Look at the first lines of the app module.").replace(">10<", ">ten<"))
    assert not admits(g, _reply("Look at the first lines of the app module.") + "\n" + PEEK)


def test_default_thinking_rule_is_todays_prose_rule() -> None:
    from adakit.apparatus.protocol import THINKING_RULES, thinking_rule

    assert THINKING_RULES == ("prose", "free")
    assert tool_grammar(TOOL_SPECS) == tool_grammar(TOOL_SPECS, thinking="prose")
    assert "think ::= [A-Za-z] [^<\\n`]{23,299}\n" in tool_grammar(TOOL_SPECS)  # as recorded
    assert thinking_rule("prose", 24, 300) == "[A-Za-z] [^<\\n`]{23,299}"
    with pytest.raises(ValueError, match="thinking rule must be one of prose, free"):
        tool_grammar(TOOL_SPECS, thinking="loose")
    with pytest.raises(ValueError, match="thinking_min_chars"):
        tool_grammar(TOOL_SPECS, thinking_min_chars=295, thinking_chars=300, thinking="free")


MARKDOWN = (
    "**Plan**\n- `sessions.py` defines `Session.request`;\n- read it next, then `merge_setting`.\n"
)
PLACEHOLDERS = ["", "...", "…", "... ... ...", "!!!???", "…………………………………………………………………………",
                "`...`", "- - - - - - - - - - - - - -", "** ** ** ** ** ** ** ** ** **"]


def test_free_thinking_admits_backticks_line_breaks_and_markdown() -> None:
    from gbnf import admits

    prose = tool_grammar(TOOL_SPECS, files=["src/app.py"])
    free = tool_grammar(TOOL_SPECS, files=["src/app.py"], thinking="free")
    for thought in (MARKDOWN, "The class `Session` in `sessions.py` merges settings.",
                    "Read it.\nThen look up the adapter it mounts by default.",
                    "1. read the outline\n2. peek at `send`", "`app.py` first: the entry point."):
        assert admits(free, _reply(thought)), thought
        assert not admits(prose, _reply(thought)), thought  # today's rule refuses each
    plain = "Look at the first lines of the app module."
    assert admits(prose, _reply(plain)) and admits(free, _reply(plain))


def test_both_thinking_rules_refuse_placeholders_and_a_closing_tag() -> None:
    from gbnf import admits

    for rule in ("prose", "free"):
        g = tool_grammar(TOOL_SPECS, files=["src/app.py"], thinking=rule)
        for thought in PLACEHOLDERS:
            assert not admits(g, _reply(thought)), (rule, thought)
        assert not admits(g, _reply("Short but real."))  # under thinking_min_chars (24)
        assert not admits(g, _reply("Compare <thinking> blocks in the app module."))


def test_free_thinking_keeps_its_length_cap() -> None:
    from gbnf import compile_gbnf

    from adakit.apparatus.protocol import THINKING_LEAD_CHARS

    g = tool_grammar(TOOL_SPECS, thinking_chars=120, thinking_min_chars=24, thinking="free")
    think = compile_gbnf(g, "think")
    lead = "**\n- `" + "#" * (THINKING_LEAD_CHARS - 6)
    assert len(lead) == THINKING_LEAD_CHARS
    assert think.fullmatch(lead + "x" * (120 - THINKING_LEAD_CHARS))  # 120 in all
    assert not think.fullmatch(lead + "x" * (121 - THINKING_LEAD_CHARS))
    assert not think.fullmatch(lead + "`" + "x" * 40)  # a letter must come within the lead
    assert think.fullmatch("x" * 24) and not think.fullmatch("x" * 23)
    assert not any(think.fullmatch("x" * n) for n in range(121, 130))
