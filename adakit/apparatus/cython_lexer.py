"""References in Cython files, read by a lexer rather than a parse.

No tree-sitter grammar for Cython installs offline, and the Python grammar reads a Cython
file mostly as errors: slowly (about 3 MB/s, against 12 MB/s for Python) and with answers
that follow its error recovery rather than the code (``cimport`` lines are not imports, a
``cdef`` function's name is a call, words of a docstring can count as identifiers). So the
reference search classifies a word of a Cython file lexically:

- a word inside a comment or a string literal is not a reference (the expressions of an
  f-string's replacement fields are code, their format specs and conversions are not), nor
  is a Python or Cython keyword, nor a word that is no identifier (``1``, ``x`` of ``cafex``
  spelled with a non-ASCII letter);
- a word of an ``import``, ``cimport`` or ``from ... (c)import`` statement is an import;
- the name a definition line declares (the file's symbols, ``cython_symbols``) is a
  definition, at its first occurrence on that line;
- a word after ``.`` is an attribute (a call when ``(`` follows), a word before ``(`` a call
  (but not the type in ``T (*f)(...)``);
- inside parentheses: ``name=`` in a call (or a class's parentheses) is a keyword, a class's
  other arguments are bases, a parameter's default is a reference;
- anything else is a reference.

:class:`CodeView` blanks the comments and strings of a file and finds where each line's
statement starts, once per file; a hit then costs a bisect and a look at its statement.
"""

from __future__ import annotations

import keyword
import re
from bisect import bisect_right
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
_ID_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_$")
_OPENERS, _CLOSERS = b"([{", b")]}"
_BRACKET = re.compile(rb"[()\[\]{}]")
_BRACKETED = re.compile(rb"\[[^\[\]]*\]")  # a buffer type's [...] (its '=' are no assignment)
_FUNCTION_POINTER = re.compile(rb"\(\s*\*\s*[A-Za-z_]\w*\s*\)\s*\(")  # '(*name)(' after a type

#: Python's keywords and Cython's reserved words, never a reference (``nogil`` and
#: ``noexcept`` are left as words: ``prange(n, nogil=True)`` passes one as an argument)
KEYWORDS = frozenset(keyword.kwlist) | {"cdef", "cpdef", "ctypedef", "cimport"}
#: how far back a statement continued inside brackets is followed
MAX_STATEMENT_LINES = 400
_IMPORT = re.compile(rb"[ \t]*(?:import|cimport|from)\b")
_CLASS = re.compile(rb"[ \t]*(?:cdef[ \t]+(?:(?:public|api|final|packed)[ \t]+)*)?class\b")
_DEF = re.compile(rb"[ \t]*(?:async[ \t]+)?(?:def|cdef|cpdef)\b")
#: a line at column 0 that starts a statement ends any bracket left open above it
_TOP_STATEMENT = re.compile(
    rb"@|(?:def|cdef|cpdef|class|import|from|cimport|ctypedef|async|if|for|while|with|try)\b")


# --------------------------------------------------------------------------- blanking


def code_view(data: bytes) -> bytes:
    """``data`` with every comment and string blanked to spaces (newlines kept, so offsets
    and rows stay those of ``data``); the expressions of an f-string's fields stay code."""
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
        end = _STRING_END[quote].match(data, m.end())
        assert end is not None  # every pattern can match the empty rest of the data
        hi = end.end()
        parts.append(data[at:lo])
        if b"f" in prefix.lower():
            parts.append(_f_string(data, lo, m.end(), hi))
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


def _f_string(data: bytes, lo: int, body: int, hi: int) -> bytes:
    """The f-string ``data[lo:hi]`` (its body starting at ``body``) blanked but for the
    expressions of its replacement fields, themselves blanked by :func:`code_view`."""
    keep = _fields(data, body, hi)
    parts: list[bytes] = []
    at = lo
    for a, b in keep:
        parts += (_blank(data[at:a]), code_view(data[a:b]))
        at = b
    parts.append(_blank(data[at:hi]))
    return b"".join(parts)


def _fields(data: bytes, lo: int, hi: int) -> list[tuple[int, int]]:
    """The (start, end) of each replacement field's expression in ``data[lo:hi]``, the
    fields nested in format specs included, in order."""
    out: list[tuple[int, int]] = []
    i = lo
    while i < hi:
        if data[i] != 0x7B:  # {
            i += 1
            continue
        if i + 1 < hi and data[i + 1] == 0x7B:  # '{{' is a brace, not a field
            i += 2
            continue
        stop, spec, close = _field(data, i + 1, hi)
        out.append((i + 1, stop))
        if spec >= 0:
            out += _fields(data, spec, close)
        i = close + 1
    return out


def _field(data: bytes, lo: int, hi: int) -> tuple[int, int, int]:
    """A replacement field whose expression starts at ``lo``: where the expression ends (a
    top-level ``=``, ``!``, ``:`` or the closing brace), where its format spec starts (-1:
    none) and where its closing brace is."""
    depth, i, stop = 0, lo, -1
    while i < hi:
        c = data[i]
        if c in (0x22, 0x27) and stop < 0:  # a string inside the expression: skip it
            m = _STRING_END[bytes([c])].match(data, i + 1)
            i = m.end() if m is not None and m.end() > i + 1 else i + 1
            continue
        if c in _OPENERS:
            depth += 1
        elif c in _CLOSERS:
            if depth == 0:  # the field's '}' (or a stray closer: the field ends there)
                return (i if stop < 0 else stop), -1, i
            depth -= 1
        elif depth == 0 and c == 0x3A:  # ':' a format spec runs to the field's '}'
            return (i if stop < 0 else stop), i + 1, _spec_end(data, i + 1, hi)
        elif depth == 0 and stop < 0 and c in b"!=":
            nxt = data[i + 1] if i + 1 < hi else 0
            if nxt != 0x3D and (c == 0x21 or data[i - 1] not in b"<>!="):
                stop = i  # a conversion ('!r') or a self-documenting '='
        i += 1
    return (hi if stop < 0 else stop), -1, hi


def _spec_end(data: bytes, lo: int, hi: int) -> int:
    """The ``}`` that closes a format spec starting at ``lo`` (nested fields skipped)."""
    depth = 0
    for i in range(lo, hi):
        c = data[i]
        if c == 0x7B:
            depth += 1
        elif c == 0x7D:
            if depth == 0:
                return i
            depth -= 1
    return hi


# --------------------------------------------------------------------------- statements


def line_starts(data: bytes) -> list[int]:
    """Byte offsets where each line of ``data`` starts (lines end at ``\\n``)."""
    starts = [0]
    i = data.find(b"\n")
    while i >= 0:
        starts.append(i + 1)
        i = data.find(b"\n", i + 1)
    return starts


class CodeView:
    """A Cython file's :func:`code_view`, its line starts and where each line's statement
    starts (computed once; a hit is then placed by bisection). ``starts``: the file's
    :func:`line_starts`, when the caller has them (the view keeps every newline)."""

    def __init__(self, data: bytes, starts: list[int] | None = None) -> None:
        self.code = code = code_view(data)
        self.line_starts = starts = line_starts(data) if starts is None else starts
        #: index of the line each line's statement starts on
        self.statement_line = _statement_lines(code, starts)

    def row(self, pos: int) -> int:
        """The 0-based row of byte ``pos``."""
        return bisect_right(self.line_starts, pos) - 1

    def statement_start(self, row: int) -> int:
        """Where the statement holding 0-based ``row`` starts (its own line when the
        statement would run back more than :data:`MAX_STATEMENT_LINES` lines)."""
        first = self.statement_line[row]
        return self.line_starts[row if row - first > MAX_STATEMENT_LINES else first]


def _statement_lines(code: bytes, starts: list[int]) -> list[int]:
    """For each line, the index of the line its statement starts on: lines continue a
    statement inside open brackets or after a trailing backslash; a closer without an opener
    counts for nothing, and a top-level keyword at column 0 starts a statement whatever is
    open above it."""
    out: list[int] = []
    depth, first, continued = 0, 0, False
    ends = starts[1:] + [len(code) + 1]
    for i, (lo, hi) in enumerate(zip(starts, ends, strict=True)):
        line = code[lo:hi - 1]
        if (depth == 0 and not continued) or (
                line[:1] not in b" \t" and _TOP_STATEMENT.match(line)):
            first, depth = i, 0
        out.append(first)
        opens = line.count(b"(") + line.count(b"[") + line.count(b"{")
        closes = line.count(b")") + line.count(b"]") + line.count(b"}")
        if closes <= depth:  # no closer can find the depth at 0: counts will do
            depth += opens - closes
        else:  # in order, a closer without an opener counting for nothing
            for c in line:
                if c in _OPENERS:
                    depth += 1
                elif c in _CLOSERS and depth:
                    depth -= 1
        continued = line.rstrip().endswith(b"\\")
    return out


# --------------------------------------------------------------------------- roles


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


def _innermost_open(code: bytes, start: int, pos: int) -> int:
    """Offset of the innermost bracket open at ``pos`` since ``start``, or -1."""
    stack: list[int] = []
    for m in _BRACKET.finditer(code, start, pos):
        if code[m.start()] in _OPENERS:
            stack.append(m.start())
        elif stack:
            stack.pop()
    return stack[-1] if stack else -1


def classify_hits(
    view: CodeView, name: str, hits: Iterable[int], definition_rows: Iterable[int]
) -> list[tuple[int, str] | None]:
    """(0-based row, role) of ``name`` at each offset in ``hits`` (word-bounded occurrences
    in the file of ``view``), or None where it is no reference (in a comment or a string, a
    keyword, not an identifier). ``definition_rows`` are the 1-based rows on which the file's
    symbols named ``name`` are declared."""
    code = view.code
    needle = name.encode("utf-8")
    n = len(needle)
    rows = set(definition_rows)
    defined: set[int] = set()
    out: list[tuple[int, str] | None] = []
    not_a_name = name in KEYWORDS or not name.isidentifier()
    for pos in hits:
        if (not_a_name or code[pos:pos + n] != needle or (pos and code[pos - 1] >= 0x80)
                or (pos + n < len(code) and code[pos + n] >= 0x80)):
            out.append(None)  # text, a keyword, or part of a non-ASCII identifier
            continue
        row = view.row(pos)
        out.append((row, _role(view, pos, n, row, rows, defined)))
    return out


def _role(view: CodeView, pos: int, n: int, row: int, rows: set[int],
          defined: set[int]) -> str:
    """The role of the identifier at ``pos`` (see the module docstring)."""
    code = view.code
    start = view.statement_start(row)
    if _IMPORT.match(code, start):
        return "import"
    if row + 1 in rows and row + 1 not in defined:
        defined.add(row + 1)
        return "definition"
    after, at = _skip_on(code, pos + n)
    if _skip_back(code, pos) == ord("."):
        return "call" if after == ord("(") else "attribute"
    if after == ord("(") and not _FUNCTION_POINTER.match(code, at):
        return "call"
    return _in_brackets(code, start, pos, after, at)


def _in_brackets(code: bytes, start: int, pos: int, after: int, at: int) -> str:
    """The role of a plain word at ``pos``: a keyword argument, a base or a reference."""
    opened = _innermost_open(code, start, pos)
    if opened < 0 or code[opened] != ord("("):
        return "reference"
    first_paren = code.find(b"(", start) == opened
    named = after == ord("=") and code[at + 1:at + 2] != b"="
    if named:
        if first_paren and _DEF.match(code, start) and b"=" not in _BRACKETED.sub(
                b"", code[start:opened]):
            return "reference"  # a parameter's default, not a keyword argument
        before = _skip_back(code, opened)
        if before != -1 and (before in _ID_BYTES or before in b")]"):
            return "keyword"
        return "reference"
    if first_paren and _CLASS.match(code, start) and _skip_back(code, pos) in (
            ord("("), ord(",")):
        return "base"  # (a keyword's value in a class's parentheses is a reference)
    return "reference"
