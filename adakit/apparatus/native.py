"""The native tool-call format (``tool_format: native``): the call as a small model's chat
template teaches it, one JSON object in ``<tool_call>`` tags after the ``<thinking>`` block.

Qwen2.5's template (and the Hermes-style templates of other small models) lists the tools'
JSON schemas at the end of the system message and asks for
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``. A local server renders that list
from the request's ``tools``. llama-cpp-python's server leaves the call in the reply's text
(it fills ``tool_calls`` only for a named ``tool_choice``, which would force one tool), so
this module writes the grammar that keeps the reply to that shape, reads the call from the
text and validates it with :func:`adakit.apparatus.protocol.parse_function_call`, the rules
native function calling uses.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from adakit.apparatus.protocol import (
    MAX_REPLY_CHARS,
    THINKING_MIN_CHARS,
    Parsed,
    _gbnf_literal,
    extract_thinking,
    parse_function_call,
    text_cap_rules,
    thinking_rule,
    value_rule,
)
from adakit.record import ParseError, ToolCall

#: The tool-call formats a run can ask for: Ada's XML tags, or the model's own (this module).
TOOL_FORMATS = ("xml", "native")
OPEN, CLOSE = "<tool_call>", "</tool_call>"


def render_native_call(call: ToolCall, thinking: str = "") -> str:
    """The reply a well-behaved model writes for ``call`` in the native format."""
    body = json.dumps({"name": call.tool, "arguments": call.params}, ensure_ascii=False)
    head = f"<thinking>{thinking}</thinking>\n" if thinking else ""
    return f"{head}{OPEN}\n{body}\n{CLOSE}"


def _no_call(lead: str) -> ParseError:
    return ParseError(kind="no_tool", message=(
        f"{lead} Every message must end with exactly one tool call: a JSON object with the "
        f'tool\'s name and arguments between {OPEN} and {CLOSE}, for example:\n'
        "<thinking>why this step</thinking>\n"
        + render_native_call(ToolCall(tool="peek_code_region",
                                      params={"file_path": "path/to/file.py", "start_line": 1}))))


def parse_native_reply(text: str, specs: Mapping[str, Any],
                       max_chars: int | None = MAX_REPLY_CHARS) -> Parsed:
    """A reply in the native format read as one call (or a parse error the agent is shown)."""
    text = text or ""
    if max_chars is not None and len(text) > max_chars:
        return Parsed("", None, _no_call(f"The reply was {len(text):,} characters long, over the "
                                         f"{max_chars:,}-character limit, and was not read."))
    thinking, rest = extract_thinking(text)
    if not text.strip():
        return Parsed(thinking, None, ParseError(kind="empty_reply", message=_no_call(
            "The reply was empty.").message))
    calls = rest.count(OPEN)
    if not calls:
        return Parsed(thinking, None, _no_call("The reply contained no tool call."))
    if calls > 1:
        return Parsed(thinking, None, ParseError(
            kind="multiple_tools", message=f"Only one tool per message is allowed; this reply "
            f"made {calls} calls. Send the single most useful call now."))
    body = rest[rest.index(OPEN) + len(OPEN):].lstrip()
    try:
        value, _ = json.JSONDecoder(strict=False).raw_decode(body)
    except json.JSONDecodeError as exc:
        why = str(exc)
    except RecursionError:
        why = "nested too deeply"
    else:
        why = ""
    if why:
        return Parsed(thinking, None, ParseError(
            kind="bad_value", message=f"The tool call is not one JSON object ({why})."))
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return Parsed(thinking, None, ParseError(kind="bad_value", message=(
            'The tool call must be a JSON object {"name": TOOL, "arguments": {...}}.')))
    parsed = parse_function_call(value["name"], value.get("arguments") or {}, specs)
    if isinstance(parsed, ParseError):
        return Parsed(thinking, None, parsed)
    return Parsed(thinking, parsed, None)


def _json_string(cap: int) -> str:
    """A JSON string of 1 to ``cap`` characters (escapes count as one)."""
    return f'"\\"" ( [^"\\\\\\x00-\\x1f] | "\\\\" ["\\\\/nt] ){{1,{cap}}} "\\""'


def native_grammar(
    specs: Mapping[str, Any],
    files: Iterable[str] | None = None,
    thinking_chars: int = 300,
    text_chars: int = 400,
    thinking_min_chars: int = THINKING_MIN_CHARS,
    text_caps: Mapping[str, int] | None = None,
    thinking: str = "prose",
) -> str:
    """A GBNF grammar admitting a ``<thinking>`` block, then exactly one call in the native
    format: the arguments in the tool's parameter order, typed as the spec declares, free text
    capped as in :func:`adakit.apparatus.protocol.tool_grammar` and, with ``files``, file
    paths restricted to them."""
    rules: dict[str, str] = {
        "root": f'"<thinking>" think "</thinking>\\n" {_gbnf_literal(OPEN + chr(10))} call '
                f'{_gbnf_literal(chr(10) + CLOSE)}',
        "think": thinking_rule(thinking, thinking_min_chars, thinking_chars),
        "text": _json_string(text_chars),
        "int": "[1-9] [0-9]{0,5}",
        "bool": '"true" | "false"',
    }
    caps = text_cap_rules(text_caps, text_chars, rules, _json_string)
    file_list = sorted(set(files or []))
    rules["path"] = ('"\\"" (' + " | ".join(_gbnf_literal(f) for f in file_list) + ') "\\""'
                     if file_list else '"\\"" [A-Za-z0-9_./-]{1,160} "\\""')
    alternatives = []
    for i, spec in enumerate(specs.values()):
        rule = f"tool{i}"
        alternatives.append(rule)
        first_required = next(j for j, p in enumerate(spec.params) if p.required)
        parts = [_gbnf_literal('{"name": ' + json.dumps(spec.name) + ', "arguments": {')]
        for j, p in enumerate(spec.params):
            value = value_rule(p, caps, lambda c: _gbnf_literal(json.dumps(c)))
            key = _gbnf_literal(json.dumps(p.name) + ": ")
            comma = _gbnf_literal(", ")
            # optional members before the first required one carry their comma after them,
            # the others before them, so every choice of members is one well-formed object
            piece = (f"{key} {value} {comma}" if j < first_required
                     else f"{key} {value}" if j == first_required else f"{comma} {key} {value}")
            if p.required:
                parts.append(piece)
            else:
                rules[f"{rule}opt{j}"] = piece
                parts.append(f"{rule}opt{j}?")
        parts.append(_gbnf_literal("}}"))
        rules[rule] = " ".join(parts)
    rules["call"] = " | ".join(alternatives)
    return "\n".join(f"{k} ::= {v}" for k, v in rules.items()) + "\n"


#: The prompt template of the message format under the native format, in place of the XML
#: section of ``system.txt`` (the tools themselves are listed by the chat template).
FORMAT_SECTION = "native_format.txt"
TOOLS_NOTE = ("The tools, with their parameters as JSON schemas, are listed at the end of this "
              "message.")


def native_system(text: str, section: str) -> str:
    """A system prompt rendered from ``system.txt`` with its message-format and tools sections
    (from "# How every message is built" to "# Repository") replaced by ``section`` and a
    line saying where the tools are listed."""
    start = text.index("# How every message is built")
    end = text.index("# Repository", start)
    return f"{text[:start]}{section.strip()}\n\n# Tools\n{TOOLS_NOTE}\n\n{text[end:]}"
