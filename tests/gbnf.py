"""A matcher for the GBNF grammars adakit writes, so tests can check strings against them.

llama.cpp checks a grammar only while it samples from a loaded model (its grammar sampler
needs a vocabulary), which is neither fast nor deterministic enough for a unit test. The
grammars of :func:`adakit.apparatus.protocol.tool_grammar` are not recursive and use a small
part of GBNF (quoted literals, character classes, rule names, grouping, ``|`` and the
repetitions ``? * + {m} {m,} {m,n}``), so each translates exactly into one Python regular
expression, rule references inlined. Anything outside that part raises ``ValueError``.
"""

from __future__ import annotations

import re

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-",
            "^": "^"}


def _escaped(body: str, i: int) -> tuple[str, int]:
    """The character written at ``body[i]`` (a backslash escape or itself) and the next index."""
    if body[i] != "\\":
        return body[i], i + 1
    nxt = body[i + 1]
    if nxt == "x":
        return chr(int(body[i + 2 : i + 4], 16)), i + 4
    if nxt not in _ESCAPES:
        raise ValueError(f"unknown escape \\{nxt} in {body!r}")
    return _ESCAPES[nxt], i + 2


def _char_class(body: str, i: int) -> tuple[str, int]:
    """The regex of the class starting at ``body[i] == '['`` and the index after it."""
    i += 1
    negated = body[i] == "^"
    if negated:
        i += 1
    parts = []
    while body[i] != "]":
        lo, i = _escaped(body, i)
        if body[i] == "-" and body[i + 1] != "]":
            hi, i = _escaped(body, i + 1)
            parts.append(f"{re.escape(lo)}-{re.escape(hi)}")
        else:
            parts.append(re.escape(lo))
    return "[" + ("^" if negated else "") + "".join(parts) + "]", i + 1


def _literal(body: str, i: int) -> tuple[str, int]:
    i += 1
    out = []
    while body[i] != '"':
        ch, i = _escaped(body, i)
        out.append(ch)
    return re.escape("".join(out)), i + 1


class _Translator:
    def __init__(self, grammar: str) -> None:
        self.rules: dict[str, str] = {}
        for line in grammar.splitlines():
            if line.strip():
                name, sep, body = line.partition(" ::= ")
                if not sep:
                    raise ValueError(f"not a rule: {line!r}")
                self.rules[name.strip()] = body
        self.done: dict[str, str] = {}
        self.active: set[str] = set()

    def rule(self, name: str) -> str:
        if name in self.done:
            return self.done[name]
        if name in self.active:
            raise ValueError(f"rule {name} is recursive")
        if name not in self.rules:
            raise ValueError(f"rule {name} is not defined")
        self.active.add(name)
        regex, end = self.alternatives(self.rules[name], 0)
        if end != len(self.rules[name]):
            raise ValueError(f"rule {name}: unexpected {self.rules[name][end:]!r}")
        self.active.discard(name)
        self.done[name] = regex
        return regex

    def alternatives(self, body: str, i: int) -> tuple[str, int]:
        options = []
        seq, i = self.sequence(body, i)
        options.append(seq)
        while i < len(body) and body[i] == "|":
            seq, i = self.sequence(body, i + 1)
            options.append(seq)
        return "(?:" + "|".join(options) + ")", i

    def sequence(self, body: str, i: int) -> tuple[str, int]:
        items = []
        while True:
            while i < len(body) and body[i] == " ":
                i += 1
            if i >= len(body) or body[i] in "|)":
                return "".join(items), i
            if body[i] == '"':
                item, i = _literal(body, i)
            elif body[i] == "[":
                item, i = _char_class(body, i)
            elif body[i] == "(":
                item, i = self.alternatives(body, i + 1)
                if body[i] != ")":
                    raise ValueError(f"unclosed group in {body!r}")
                i += 1
            else:
                m = re.compile(r"[A-Za-z][A-Za-z0-9-]*").match(body, i)
                if m is None:
                    raise ValueError(f"unexpected {body[i:]!r}")
                item, i = "(?:" + self.rule(m.group()) + ")", m.end()
            rep = re.compile(r"\?|\*|\+|\{\d+(?:,\d*)?\}").match(body, i)
            if rep is not None:
                item, i = f"(?:{item}){rep.group()}", rep.end()
            items.append(item)


def compile_gbnf(grammar: str, root: str = "root") -> re.Pattern[str]:
    """The regular expression equivalent to rule ``root`` of a non-recursive GBNF grammar."""
    return re.compile(_Translator(grammar).rule(root))


def admits(grammar: str, text: str, root: str = "root") -> bool:
    """Whether ``text`` as a whole is a sentence of rule ``root`` of ``grammar``."""
    return compile_gbnf(grammar, root).fullmatch(text) is not None
