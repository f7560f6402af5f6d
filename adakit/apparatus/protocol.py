"""The turn grammar: one ``<thinking>`` block, then exactly one XML-style tool call.

The parser accepts only the seven known tools and their declared parameters; anything else
becomes a :class:`~adakit.record.ParseError` whose message is shown to the agent as its next
observation. The same validation serves native function calling, and a GBNF grammar derived
from the tool specs constrains small local models to the protocol.
"""

from __future__ import annotations

import bisect
import html
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from adakit.record import ParseError, ToolCall

_THINK_RE = re.compile(r"<thinking>(.*?)(?:</thinking>|$)", re.S)
#: One element: an opening tag, the shortest body, a closing tag of the same name.
_TAG_RE = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)>(.*?)</\1\s*>", re.S)
_OPEN_RE = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)>")
_CLOSE_RE = re.compile(r"</([A-Za-z_][A-Za-z0-9_]*)\s*>")
#: Replies (and function-call arguments) longer than this are refused unread. Far above any
#: reply a model writes within its token budget; it bounds the work one turn can cause.
MAX_REPLY_CHARS = 256_000
#: Tag and parameter names echoed in an error message are cut to this length.
NAME_CHARS = 100
_TRUE = {"true", "yes", "1", "y"}
_FALSE = {"false", "no", "0", "n"}


@dataclass
class Parsed:
    """A parsed reply: the thinking text, and either a call or a parse error."""

    thinking: str
    call: ToolCall | None
    error: ParseError | None


def extract_thinking(text: str) -> tuple[str, str]:
    """Split a reply into (thinking, rest): every ``<thinking>`` block is removed from rest."""
    parts = [m.group(1).strip() for m in _THINK_RE.finditer(text)]
    rest = _THINK_RE.sub("", text)
    return "\n".join(p for p in parts if p), rest


def tags(text: str) -> list[tuple[str, str]]:
    """The ``<name>body</name>`` elements of ``text``, left to right, as (name, body).

    The elements the regular expression :data:`_TAG_RE` finds (an element ends at the first
    closing tag of its name; the scan resumes after it), in time linear in the text. That
    expression is linear when every opening tag has a closing tag of its name after it (each
    attempt then succeeds and consumes its element), which is the case of every well-formed
    reply: it is used then. An opening tag that is never closed would make it rescan the rest
    of the text, once per such tag; those replies go to :func:`_tags_by_bisection`.
    """
    if "</" not in text:
        return []
    names = set(_OPEN_RE.findall(text))
    if not names:
        return []
    if len(names) > 64:  # many names: the checks below would cost a pass per name
        return _tags_by_bisection(text, None)
    if _every_tag_closes(text, names):
        return [(m.group(1), m.group(2)) for m in _TAG_RE.finditer(text)]
    return _tags_by_bisection(text, names)


def _every_tag_closes(text: str, names: set[str]) -> bool:
    """Whether each opening tag of ``names`` has a closing tag of its name after it."""
    for name in names:
        last_open_end = text.rfind(f"<{name}>") + len(name) + 2
        close = re.compile(rf"</{name}\s*>")  # names are [A-Za-z0-9_]: nothing to escape
        i = len(text)
        while True:  # the last real closing tag (a "</name" without ">" does not count)
            i = text.rfind(f"</{name}", last_open_end, i)
            if i < 0:
                return False
            if close.match(text, i):
                break
    return True


def _alternatives(names: Iterable[str]) -> str:
    return "|".join(sorted(names))  # names are [A-Za-z0-9_]: nothing to escape


def _tags_by_bisection(text: str, names: set[str] | None) -> list[tuple[str, str]]:
    """:func:`tags` for any text: closing tags (of ``names``, the names of the opening tags,
    when known) are listed once, and each opening tag looks up the first closing tag of its
    name after it by bisection. With few names, tags of other names are skipped in C."""
    closing = (
        re.compile(r"</(" + _alternatives(names) + r")\s*>") if names else _CLOSE_RE
    )
    starts: dict[str, list[int]] = {}
    ends: dict[int, int] = {}
    for m in closing.finditer(text):
        start, ends[start] = m.span()
        starts.setdefault(m.group(1), []).append(start)
    out: list[tuple[str, str]] = []
    if not starts:
        return out
    opening = re.compile("<(" + _alternatives(starts) + ")>") if len(starts) <= 64 else _OPEN_RE
    pos = 0
    for m in opening.finditer(text):
        if m.start() < pos:
            continue  # inside the element found last
        name, after = m.group(1), m.end()
        found = starts.get(name)
        if found is None:
            continue
        i = bisect.bisect_left(found, after)
        if i < len(found):
            out.append((name, text[after : found[i]]))
            pos = ends[found[i]]
    return out


def _name(text: str) -> str:
    """A model-written name for an error message, cut to :data:`NAME_CHARS`."""
    return text if len(text) <= NAME_CHARS else text[:NAME_CHARS] + "…"


def _usage(spec: Any) -> str:
    lines = [f"<{spec.name}>"]
    for p in spec.params:
        opt = "" if p.required else " (optional)"
        lines.append(f"<{p.name}>...</{p.name}>{opt}")
    lines.append(f"</{spec.name}>")
    return "\n".join(lines)


def coerce(spec: Any, raw: Mapping[str, Any]) -> tuple[dict[str, Any] | None, ParseError | None]:
    """Check a parameter mapping against a tool spec and convert values to declared types."""
    known = {p.name: p for p in spec.params}
    unknown = [k for k in raw if k not in known]
    if unknown:
        return None, ParseError(
            kind="unknown_param",
            message=(
                f"{spec.name} has no parameter {', '.join(repr(_name(str(u))) for u in unknown)}. "
                f"Its parameters are: {', '.join(known)}. Usage:\n{_usage(spec)}"
            ),
        )
    missing = [
        p.name
        for p in spec.params
        if p.required and (p.name not in raw or str(raw[p.name]).strip() == "")
    ]
    if missing:
        return None, ParseError(
            kind="missing_param",
            message=(
                f"{spec.name} is missing required parameter(s) {', '.join(missing)}. "
                f"Usage:\n{_usage(spec)}"
            ),
        )
    out: dict[str, Any] = {}
    for name, value in raw.items():
        p = known[name]
        text = value if not isinstance(value, str) else html.unescape(value.strip())
        if isinstance(text, str) and text == "" and not p.required:
            continue
        try:
            out[name] = convert_value(p, text)
        except ValueError as exc:
            return None, ParseError(
                kind="bad_value",
                message=f"{spec.name}: parameter {name} {exc}. Usage:\n{_usage(spec)}",
            )
    return out, None


def convert_value(p: Any, value: Any) -> Any:
    """One parameter value converted to its declared type; ValueError says what was wrong."""
    if p.type == "integer":
        if isinstance(value, bool):
            raise ValueError(f"must be a whole number, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        s = str(value).strip().lstrip("Ll").replace(",", "")  # "L120" as line labels show it
        if not re.fullmatch(r"[+-]?\d+", s):
            raise ValueError(f"must be a whole number, got {str(value)[:40]!r}")
        try:
            return int(s)
        except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
            raise ValueError(
                f"is too large to be a line number ({len(s.lstrip('+-')):,} digits)"
            ) from None
    if p.type == "boolean":
        if isinstance(value, bool):
            return value
        s = str(value).strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
        raise ValueError(f"must be true or false, got {str(value)[:40]!r}")
    if p.type == "enum":
        s = re.sub(r"[\s-]+", "_", str(value).strip().lower())
        for choice in p.choices:
            if s == choice.lower():
                return choice
        raise ValueError(f"must be one of {', '.join(p.choices)}, got {str(value)[:40]!r}")
    return value if isinstance(value, str) else str(value)


def parse_reply(
    text: str, specs: Mapping[str, Any], max_chars: int | None = MAX_REPLY_CHARS
) -> Parsed:
    """Parse an assistant reply in the XML protocol against the tool specs.

    Work is linear in the reply's length; a reply over ``max_chars`` characters (None: no
    limit) is refused unread with a ``no_tool`` error that says so.
    """
    if max_chars is not None and len(text or "") > max_chars:
        lead = (
            f"The reply was {len(text):,} characters long, over the {max_chars:,}-character "
            "limit, and was not read."
        )
        return Parsed("", None, ParseError(kind="no_tool", message=_no_tool_msg(specs, lead)))
    thinking, rest = extract_thinking(text or "")
    if not (text or "").strip():
        return Parsed(thinking, None, ParseError(kind="empty_reply", message=_no_tool_msg(specs, "The reply was empty.")))
    found = tags(rest)
    calls = [(name, body) for name, body in found if name in specs]
    if len(calls) > 1:
        names = ", ".join(n for n, _ in calls)
        return Parsed(
            thinking,
            None,
            ParseError(
                kind="multiple_tools",
                message=f"Only one tool per message is allowed; this reply used {len(calls)} ({names}). "
                "Send the single most useful call now; the others can follow in later turns.",
            ),
        )
    if not calls:
        param_names = {p.name for s in specs.values() for p in s.params}
        strangers = [n for n, _ in found if n not in param_names]
        if strangers:
            return Parsed(
                thinking,
                None,
                ParseError(
                    kind="unknown_tool",
                    message=f"There is no tool named {_name(strangers[0])!r}. "
                    f"The available tools are: {', '.join(specs)}.",
                ),
            )
        return Parsed(
            thinking,
            None,
            ParseError(kind="no_tool", message=_no_tool_msg(specs, "The reply contained no tool call.")),
        )
    name, body = calls[0]
    raw = dict(tags(body))
    params, err = coerce(specs[name], raw)
    if err:
        return Parsed(thinking, None, err)
    return Parsed(thinking, ToolCall(tool=name, params=params or {}), None)


def parse_function_call(
    name: str, arguments: str | Mapping[str, Any], specs: Mapping[str, Any]
) -> ParseError | ToolCall:
    """Validate a native function call (name + JSON arguments) with the same rules.

    Arguments over :data:`MAX_REPLY_CHARS` characters, or nested too deeply to read, are
    refused with a ``bad_value`` error (never an exception).
    """
    if name not in specs:
        return ParseError(
            kind="unknown_tool",
            message=f"There is no tool named {_name(str(name))!r}. The available tools are: {', '.join(specs)}.",
        )
    too_deep = ParseError(
        kind="bad_value",
        message=f"The arguments of {name} are nested too deeply to read; send one flat JSON "
        "object of parameter values.",
    )
    if isinstance(arguments, str):
        if len(arguments) > MAX_REPLY_CHARS:
            return ParseError(
                kind="bad_value",
                message=f"The arguments of {name} are {len(arguments):,} characters long, over "
                f"the {MAX_REPLY_CHARS:,}-character limit, and were not read.",
            )
        try:
            arguments = json.loads(arguments or "{}", strict=False)
        except json.JSONDecodeError as exc:
            return ParseError(kind="bad_value", message=f"The arguments of {name} are not valid JSON ({exc}).")
        except RecursionError:
            return too_deep
    if not isinstance(arguments, Mapping):
        return ParseError(kind="bad_value", message=f"The arguments of {name} must be a JSON object.")
    try:
        params, err = coerce(specs[name], arguments)
    except RecursionError:  # a value nested deeper than str() can print
        return too_deep
    return err if err else ToolCall(tool=name, params=params or {})


def _no_tool_msg(specs: Mapping[str, Any], lead: str) -> str:
    return (
        f"{lead} Every message must end with exactly one tool call in XML form, for example:\n"
        "<thinking>why this step</thinking>\n<peek_code_region>\n<file_path>path/to/file.py</file_path>\n"
        "<start_line>1</start_line>\n</peek_code_region>\n"
        f"Tools: {', '.join(specs)}."
    )


def render_call(call: ToolCall, thinking: str = "") -> str:
    """The XML text of a call (what a well-behaved model would write)."""
    lines = []
    if thinking:
        lines.append(f"<thinking>{thinking}</thinking>")
    lines.append(f"<{call.tool}>")
    for k, v in call.params.items():
        value = str(v).lower() if isinstance(v, bool) else str(v)
        lines.append(f"<{k}>{value}</{k}>")
    lines.append(f"</{call.tool}>")
    return "\n".join(lines)


def function_tools(specs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """OpenAI-style function definitions for native function-calling mode."""
    kinds = {"integer": "integer", "boolean": "boolean", "string": "string", "enum": "string"}
    out = []
    for spec in specs.values():
        props: dict[str, Any] = {}
        for p in spec.params:
            prop: dict[str, Any] = {"type": kinds[p.type], "description": p.description}
            if p.type == "enum":
                prop["enum"] = list(p.choices)
            props[p.name] = prop
        out.append(
            {
                "type": "function",
                "function": {
                    "name": spec.name,
                    "description": spec.description,
                    "parameters": {
                        "type": "object",
                        "properties": props,
                        "required": [p.name for p in spec.params if p.required],
                    },
                },
            }
        )
    return out


# --------------------------------------------------------------------------- grammar


def _gbnf_literal(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


THINKING_MIN_CHARS = 24
#: The thinking rules of :func:`tool_grammar`: ``prose`` (one line, no backticks; the default)
#: and ``free`` (anything but ``<``: backticks, line breaks, Markdown).
THINKING_RULES = ("prose", "free")
#: Under the ``free`` rule, how many characters other than letters (Markdown marks, a
#: backtick, a list number, line breaks) may come before the thought's first letter.
THINKING_LEAD_CHARS = 8


def thinking_rule(rule: str, min_chars: int, max_chars: int) -> str:
    """The GBNF body of the thinking rule ``rule`` (one of :data:`THINKING_RULES`) for a
    thought of ``min_chars`` to ``max_chars`` characters.

    Both refuse a placeholder (``...``, ``…``, an empty thought, only punctuation): the
    thought needs a letter and at least ``min_chars`` characters. ``prose`` is one line that
    starts with a letter and has no backtick. ``free`` admits anything but ``<`` (which would
    open the closing tag) once a letter has come within the first
    :data:`THINKING_LEAD_CHARS` + 1 characters; its cap stays ``max_chars`` in all, the
    text after that letter being capped at ``max_chars - 1 - THINKING_LEAD_CHARS``.
    """
    if rule not in THINKING_RULES:
        raise ValueError(f"thinking rule must be one of {', '.join(THINKING_RULES)}, got {rule!r}")
    if not 2 <= min_chars <= max_chars:
        raise ValueError("need 2 <= thinking_min_chars <= thinking_chars")
    if rule == "prose":
        # one line of prose: small models otherwise fill the thinking block with code fences;
        # a letter first and a minimum length keep out "..." and other placeholders
        return f"[A-Za-z] [^<\\n`]{{{min_chars - 1},{max_chars - 1}}}"
    lead = THINKING_LEAD_CHARS
    if min_chars + lead > max_chars:
        raise ValueError(f"the free thinking rule needs thinking_min_chars + {lead} <= thinking_chars")
    return f"[^<A-Za-z]{{0,{lead}}} [A-Za-z] [^<]{{{min_chars - 1},{max_chars - 1 - lead}}}"


def text_cap_rules(text_caps: Mapping[str, int] | None, text_chars: int, rules: dict[str, str],
                   rule_of: Any) -> dict[str, int]:
    """Add a ``text-NAME`` rule (``rule_of(cap)``) to ``rules`` for each free-text parameter
    whose cap in ``text_caps`` differs from ``text_chars``; those caps, by parameter name."""
    caps = {name: int(n) for name, n in (text_caps or {}).items() if int(n) != text_chars}
    for name, n in sorted(caps.items()):
        if n < 1:
            raise ValueError(f"text_caps[{name!r}] must be at least 1, got {n}")
        rules[f"text-{name.replace('_', '-')}"] = rule_of(n)
    return caps


def value_rule(p: Any, caps: Mapping[str, int], choice: Any) -> str:
    """The grammar rule of parameter ``p``'s value (``choice`` writes one enum choice)."""
    if p.type == "integer":
        return "int"
    if p.type == "boolean":
        return "bool"
    if p.type == "enum":
        return "(" + " | ".join(choice(c) for c in p.choices) + ")"
    if p.name in ("file_path", "current_file_path"):
        return "path"
    return f"text-{p.name.replace('_', '-')}" if p.name in caps else "text"


def tool_grammar(
    specs: Mapping[str, Any],
    files: Iterable[str] | None = None,
    thinking_chars: int = 300,
    text_chars: int = 400,
    thinking_min_chars: int = THINKING_MIN_CHARS,
    text_caps: Mapping[str, int] | None = None,
    thinking: str = "prose",
) -> str:
    """A GBNF grammar admitting exactly one well-formed call (free text and numbers capped).

    The thinking follows the rule named ``thinking`` (:func:`thinking_rule`): by default one
    line of prose of ``thinking_min_chars`` to ``thinking_chars`` characters that starts with
    a letter; under either rule a placeholder such as ``...`` or an empty thought cannot
    satisfy it. With ``files``, file-path parameters are restricted to those paths, so a small
    model cannot invent files; the recorded turn says the reply was constrained.
    ``text_caps`` gives named free-text parameters their own cap (for example a longer
    ``content`` for a closing conclusion) in place of ``text_chars``.
    """
    think = thinking_rule(thinking, thinking_min_chars, thinking_chars)
    rules: dict[str, str] = {}
    file_list = sorted(set(files or []))
    rules["root"] = '"<thinking>" think "</thinking>\\n" call'
    rules["think"] = think
    rules["text"] = f"[^<]{{1,{text_chars}}}"
    caps = text_cap_rules(text_caps, text_chars, rules, lambda n: f"[^<]{{1,{n}}}")
    rules["int"] = "[1-9] [0-9]{0,5}"
    rules["bool"] = '"true" | "false"'
    if file_list:
        rules["path"] = " | ".join(_gbnf_literal(f) for f in file_list)
    else:
        rules["path"] = "[A-Za-z0-9_./-]{1,160}"
    alternatives = []
    for i, spec in enumerate(specs.values()):
        rule = f"tool{i}"
        alternatives.append(rule)
        parts = [_gbnf_literal(f"<{spec.name}>" + "\n")]
        for j, p in enumerate(spec.params):
            value = value_rule(p, caps, _gbnf_literal)
            open_tag = _gbnf_literal(f"<{p.name}>")
            close_tag = _gbnf_literal(f"</{p.name}>" + "\n")
            piece = f"{open_tag} {value} {close_tag}"
            if p.required:
                parts.append(piece)
            else:
                opt = f"{rule}opt{j}"
                rules[opt] = piece
                parts.append(f"{opt}?")
        parts.append(_gbnf_literal(f"</{spec.name}>"))
        rules[rule] = " ".join(parts)
    rules["call"] = " | ".join(alternatives)
    return "\n".join(f"{k} ::= {v}" for k, v in rules.items()) + "\n"
