"""References in Cython files, read by a lexer rather than a parse.

No tree-sitter grammar for Cython installs offline, and the Python grammar reads a Cython
file mostly as errors: slowly (about 3 MB/s, against 12 MB/s for Python) and with answers
that follow its error recovery rather than the code (``cimport`` lines are not imports, a
``cdef`` function's name is a call, words of a docstring can count as identifiers). So the
reference search classifies a word of a Cython file lexically:

- a word inside a comment or a string literal (an f-string's ``{...}`` is code) is not a
  reference, nor is a Python keyword;
- a word of an ``import``, ``cimport`` or ``from ... (c)import`` statement is an import;
- the name a definition line declares (the file's symbols, :func:`cython_symbols`) is a
  definition, at its first occurrence on that line;
- a word after ``.`` is an attribute (a call when ``(`` follows), a word before ``(`` a call;
- inside parentheses: a class's bases are bases, ``name=`` in a call is a keyword;
- anything else is a reference.

:func:`code_view` blanks the comments and string bodies of a file once; the rules then read
only the statement around each hit.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterable

#: comments and string literals (with their prefixes), in the order a scan meets them
_TEXT = re.compile(
    rb"#[^\n]*"
    rb'|(?P<prefix>[A-Za-z]{0,2})(?P<quote>"""|\'\'\'|"|\')'
)
_STRING_END = {
    b'"""': re.compile(rb'(?:[^"\\]|\\.|"(?!""))*+(?:"""|\Z)', re.S),
    b"'''": re.compile(rb"(?:[^'\\]|\\.|'(?!''))*+(?:'''|\Z)", re.S),
    b'"': re.compile(rb'(?:[^"\\\n]|\\.)*+(?:"|(?=\n)|\Z)', re.S),
    b"'": re.compile(rb"(?:[^'\\\n]|\\.)*+(?:'|(?=\n)|\Z)", re.S),
}
_PREFIX = re.compile(rb"[rbufc]{1,2}", re.I)
_INTERPOLATION = re.compile(rb"\{\{|\}\}|\{[^{}\n]*\}")
_ID_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_$")
_BRACKET = re.compile(rb"[()\[\]{}]")
_BRACKETED = re.compile(rb"\[[^\[\]]*\]")  # a buffer type's [...] (its '=' are no assignment)
_OPEN = frozenset(b"([{")

_KEYWORDS = frozenset(keyword.kwlist)
#: how far back a statement continued inside brackets is followed
MAX_STATEMENT_LINES = 400
_IMPORT = re.compile(rb"[ \t]*(?:import|cimport|from)\b")
_CLASS = re.compile(rb"[ \t]*(?:cdef[ \t]+(?:(?:public|api|final|packed)[ \t]+)*)?class\b")
_DEF = re.compile(rb"[ \t]*(?:async[ \t]+)?(?:def|cdef|cpdef)\b")


def code_view(data: bytes) -> bytes:
    """``data`` with every comment and string body blanked to spaces (newlines kept, so
    offsets and rows stay those of ``data``); an f-string's interpolations stay code."""
    parts: list[bytes] = []
    at = pos = 0
    n = len(data)
    while pos < n:
        m = _TEXT.search(data, pos)
        if m is None:
            break
        quote = m.group("quote")
        if quote is None:  # a comment
            lo, hi = m.start(), m.end()
            parts += (data[at:lo], b" " * (hi - lo))
            at = pos = hi
            continue
        prefix = m.group("prefix")
        lo = m.start()  # a string's prefix (f, r, b, ...) is part of the literal
        if prefix and (not _PREFIX.fullmatch(prefix) or (lo and data[lo - 1] in _ID_BYTES)):
            prefix, lo = b"", m.start("quote")  # the end of a name, not a string prefix
        hi = _STRING_END[quote].match(data, m.end()).end()
        parts.append(data[at:lo])
        if b"f" in prefix.lower():
            body = lo
            for im in _INTERPOLATION.finditer(data, m.end(), hi):
                if im.group() in (b"{{", b"}}"):
                    continue
                parts += (_blank(data[body:im.start() + 1]), data[im.start() + 1:im.end() - 1])
                body = im.end() - 1
            parts.append(_blank(data[body:hi]))
        else:
            parts.append(_blank(data[lo:hi]))
        at = pos = hi
    parts.append(data[at:])
    return b"".join(parts)


def _blank(text: bytes) -> bytes:
    """Spaces for every byte of ``text`` but its newlines."""
    if b"\n" not in text:
        return b" " * len(text)
    return b"\n".join(b" " * len(part) for part in text.split(b"\n"))


def _statement_start(code: bytes, pos: int) -> int:
    """Where the statement holding ``pos`` starts: the start of its line, moved back over
    lines continued by an open bracket or a trailing backslash (at most
    :data:`MAX_STATEMENT_LINES` lines, so an unclosed bracket costs no more)."""
    start = code.rfind(b"\n", 0, pos) + 1
    depth = _net(code, 0, start)
    for _ in range(MAX_STATEMENT_LINES):
        if not start:
            break
        prev = code.rfind(b"\n", 0, start - 1) + 1
        if depth <= 0 and not code[prev:start - 1].rstrip().endswith(b"\\"):
            break
        depth -= _net(code, prev, start)
        start = prev
    return start


def _net(code: bytes, lo: int, hi: int) -> int:
    """Brackets opened less brackets closed in ``code[lo:hi]`` (blanked text holds none)."""
    return sum(code.count(c, lo, hi) for c in (b"(", b"[", b"{")) - sum(
        code.count(c, lo, hi) for c in (b")", b"]", b"}"))


def _innermost_open(code: bytes, start: int, pos: int) -> int:
    """Offset of the innermost bracket open at ``pos`` since ``start``, or -1."""
    stack: list[int] = []
    for m in _BRACKET.finditer(code, start, pos):
        if code[m.start()] in _OPEN:
            stack.append(m.start())
        elif stack:
            stack.pop()
    return stack[-1] if stack else -1


def _skip_back(code: bytes, pos: int) -> int:
    """The byte before ``pos`` that is not a space or a tab (-1 at the start)."""
    i = pos - 1
    while i >= 0 and code[i] in b" \t":
        i -= 1
    return code[i] if i >= 0 else -1


def _skip_on(code: bytes, pos: int) -> tuple[int, int]:
    """The first byte from ``pos`` on that is not a space or a tab, and its offset."""
    i, n = pos, len(code)
    while i < n and code[i] in b" \t":
        i += 1
    return (code[i] if i < n else -1), i


def classify_hits(
    code: bytes, name: str, hits: Iterable[int], definition_rows: Iterable[int]
) -> list[str | None]:
    """The role of ``name`` at each offset in ``hits`` (word-bounded occurrences in the file
    whose :func:`code_view` is ``code``), or None where it is no reference (in a comment or a
    string, or a keyword). ``definition_rows`` are the 1-based rows on which the file's
    symbols named ``name`` are declared."""
    needle = name.encode("utf-8")
    n = len(needle)
    rows = set(definition_rows)
    defined: set[int] = set()
    out: list[str | None] = []
    for pos in hits:
        if code[pos:pos + n] != needle or name in _KEYWORDS:
            out.append(None)
            continue
        start = _statement_start(code, pos)
        if _IMPORT.match(code, start):
            out.append("import")
            continue
        row = code.count(b"\n", 0, pos) + 1
        if row in rows and row not in defined:
            defined.add(row)
            out.append("definition")
            continue
        after, at = _skip_on(code, pos + n)
        if _skip_back(code, pos) == ord("."):
            out.append("call" if after == ord("(") else "attribute")
            continue
        if after == ord("(") and _skip_on(code, at + 1)[0] != ord("*"):
            out.append("call")  # (not the type before a function pointer: 'T (*f)(...)')
            continue
        out.append(_in_brackets(code, start, pos, after, at))
    return out


def _in_brackets(code: bytes, start: int, pos: int, after: int, at: int) -> str:
    """The role of a plain word at ``pos``: a base, a keyword argument or a reference."""
    opened = _innermost_open(code, start, pos)
    if opened < 0 or code[opened] != ord("("):
        return "reference"
    first_paren = code.find(b"(", start) == opened
    if first_paren and _CLASS.match(code, start):
        return "base"
    if after == ord("=") and code[at + 1:at + 2] != b"=":
        if first_paren and _DEF.match(code, start) and b"=" not in _BRACKETED.sub(
                b"", code[start:opened]):
            return "reference"  # a parameter's default, not a keyword argument
        before = _skip_back(code, opened)
        if before != -1 and (before in _ID_BYTES or before in b")]"):
            return "keyword"
    return "reference"
