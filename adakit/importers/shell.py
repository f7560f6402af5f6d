"""Reading a shell command the way the canonical mapping needs it.

A command line (``cd src && grep -rn "def foo" . | head -20``) is split into *segments*
joined by ``&&``, ``||``, ``;`` or newlines, each a *pipeline* of *stages* joined by ``|``.
Quoting follows POSIX shell words (single quotes literal, double quotes with backslash
escapes); heredoc bodies (``<<'EOF' ... EOF``) are
kept out of the command text; ``VAR=value`` prefixes and wrappers such as ``timeout 10``,
``sudo``, ``env`` or ``xargs`` are peeled off so the program that does the work is seen;
output redirections (``> file``, ``>> file``, ``tee file``) are noted as writes. Nothing here
runs anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Wrappers whose own options come first and whose real program follows.
WRAPPERS = frozenset({"sudo", "time", "nohup", "nice", "timeout", "env", "command", "exec",
                      "stdbuf", "xargs", "builtin"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")


@dataclass
class Stage:
    """One simple command of a pipeline: its program, arguments and redirections."""

    program: str
    args: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)  # files written by > or >>
    reads: list[str] = field(default_factory=list)  # files read by <
    heredoc: bool = False
    via_xargs: bool = False  # its operands come from the previous stage's output

    @property
    def words(self) -> list[str]:
        return [self.program, *self.args]


@dataclass
class Segment:
    """One pipeline of a command line, with the working folder it runs in."""

    stages: list[Stage]
    cwd: str | None = None


def _strip_heredocs(text: str) -> tuple[str, int]:
    """The command with heredoc bodies removed (the ``<<EOF`` marker stays); count removed."""
    lines = text.split("\n")
    out: list[str] = []
    i = removed = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        for m in _HEREDOC.finditer(line):
            end = m.group(2)
            while i < len(lines) and lines[i].strip() != end:
                i += 1
            i += 1  # the terminator line
            removed += 1
    return "\n".join(out), removed


_TOKEN = re.compile(
    r"""(?P<ws>[ \t\r]+)
    |(?P<op>&&|\|\||>>|>&|&>|\|&|\n|[;&|<>()])
    |(?P<word>(?:[^\s'"\\;&|<>()]+|'[^']*'|"(?:[^"\\]|\\.)*"|\\.)+)""",
    re.X | re.S,
)
_PIECE = re.compile(r"""'([^']*)'|"((?:[^"\\]|\\.)*)"|\\(.)|([^'"\\]+)""", re.S)
_DQ_ESCAPE = re.compile(r'\\([\\"$`\n])')


def _unquote(word: str) -> str:
    if not any(c in word for c in "'\"\\"):
        return word
    out = []
    for sq, dq, esc, plain in _PIECE.findall(word):
        out.append(sq or (_DQ_ESCAPE.sub(r"\1", dq) if dq else "") or esc or plain)
    return "".join(out)


def _tokens(text: str) -> list[str]:
    """Shell words (quotes removed) and control operators (newlines as ``;``), comments
    dropped; a broken quote falls back to splitting on white space (a command the shell
    would reject is still classified)."""
    text = text.replace("\\\n", " ")  # line continuations join
    out: list[str] = []
    pos, n = 0, len(text)
    comment = False
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:  # an unbalanced quote: the rest by white space
            rest = text[pos:].replace("\n", " ; ").split()
            out.extend(w.strip("'\"") for w in rest)
            break
        pos = m.end()
        kind = m.lastgroup
        if kind == "ws":
            continue
        tok = m.group(0)  # every alternative is one named group
        if comment:
            if tok == "\n":
                comment = False
                out.append(";")
            continue
        if kind == "op":
            out.append(";" if tok == "\n" else tok)
        elif tok.startswith("#"):
            comment = True
        else:
            out.append(_unquote(tok))
    return out


def split_words(text: str) -> list[str]:
    """The words of one command line (quotes removed, operators kept as words)."""
    return [w for w in _tokens(text) if w != ";"]


def _stage(words: list[str]) -> Stage | None:
    """A stage from its words: assignments and wrappers peeled, redirections collected."""
    writes: list[str] = []
    reads: list[str] = []
    plain: list[str] = []
    heredoc = False
    i = 0
    while i < len(words):
        w = words[i]
        if w == ">&":  # >&2, 2>&1: to a descriptor, not a file
            if plain and plain[-1] in ("1", "2"):
                plain.pop()
            i += 2
            continue
        if w in (">", ">>", "&>"):
            target = words[i + 1] if i + 1 < len(words) else ""
            fd = plain.pop() if plain and plain[-1] in ("1", "2") else None  # 2> file
            if fd != "2" and target and target != "/dev/null":
                writes.append(target)
            i += 2
            continue
        if w == "<":
            if i + 1 < len(words):
                reads.append(words[i + 1])
            i += 2
            continue
        if w == "<<":
            heredoc = True
        elif w not in ("(", ")"):
            plain.append(w)
        i += 1
    while plain and _ASSIGNMENT.match(plain[0]):
        plain.pop(0)
    via_xargs = False
    while plain and plain[0] in WRAPPERS:
        wrapper = plain.pop(0)
        via_xargs = via_xargs or wrapper == "xargs"
        if wrapper == "timeout":
            while plain and (plain[0].startswith("-") or re.fullmatch(r"[\d.]+[smhd]?", plain[0])):
                plain.pop(0)
        else:
            while plain and (plain[0].startswith("-") or _ASSIGNMENT.match(plain[0])):
                flag = plain.pop(0)
                if wrapper == "xargs" and flag in ("-I", "-n", "-P", "-d", "-L", "-s") and plain:
                    plain.pop(0)
                if wrapper == "nice" and flag == "-n" and plain:
                    plain.pop(0)
    if not plain:
        if writes:  # "> file" alone truncates a file
            return Stage(program=":", writes=writes, reads=reads, heredoc=heredoc)
        return None
    program = plain[0].rsplit("/", 1)[-1] if "/" in plain[0] and not plain[0].startswith(".") else plain[0]
    return Stage(program=program, args=plain[1:], writes=writes, reads=reads, heredoc=heredoc,
                 via_xargs=via_xargs)


def parse_command(command: str, cwd: str | None = None) -> list[Segment]:
    """The segments of a command line, in order; ``cd DIR`` segments move the working folder
    of the segments after them (``cd`` itself stays a segment)."""
    text, _ = _strip_heredocs(command.strip())
    segments: list[Segment] = []
    stages: list[Stage] = []
    words: list[str] = []
    here = cwd

    def close_stage() -> None:
        if words:
            st = _stage(list(words))
            if st is not None:
                stages.append(st)
            words.clear()

    def close_segment() -> None:
        nonlocal here
        close_stage()
        if stages:
            seg = Segment(list(stages), here)
            segments.append(seg)
            first = stages[0]
            if first.program in ("cd", "pushd") and len(stages) == 1:
                target = next((a for a in first.args if not a.startswith("-")), None)
                here = join_path(here, target) if target else here
            stages.clear()

    toks = _tokens(text)
    i = 0
    while i < len(toks):
        t = toks[i]
        if t == "<" and i + 1 < len(toks) and toks[i + 1] == "<":  # heredoc marker
            words.append("<<")
            i += 2
            if i < len(toks) and toks[i] == "-":
                i += 1
            if i < len(toks):
                i += 1  # the delimiter word
            continue
        if t in ("&&", "||", ";", "\n", "&"):
            close_segment()
        elif t in ("|", "|&"):
            close_stage()
        else:
            words.append(t)
        i += 1
    close_segment()
    return segments


def join_path(cwd: str | None, path: str) -> str:
    """``path`` seen from ``cwd`` (POSIX, ``..`` and ``.`` folded; ``~`` kept as is)."""
    import posixpath

    if path.startswith("/") or not cwd:
        return posixpath.normpath(path) if path else path
    return posixpath.normpath(posixpath.join(cwd, path))


def options(args: list[str], with_value: frozenset[str] = frozenset()) -> tuple[dict[str, str], list[str]]:
    """Split arguments into options (``-n 5``, ``-n5``, ``--lines=5``) and operands.

    Options named in ``with_value`` take the next word as their value; a bare ``--`` ends the
    options.
    """
    opts: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    ended = False
    while i < len(args):
        a = args[i]
        if ended or not a.startswith("-") or a == "-":
            rest.append(a)
        elif a == "--":
            ended = True
        elif a.startswith("--"):
            key, _, val = a.partition("=")
            if not val and key in with_value and i + 1 < len(args):
                val = args[i + 1]
                i += 1
            opts[key] = val
        else:
            key = a[:2]
            if key in with_value:
                val = a[2:]
                if not val and i + 1 < len(args):
                    val = args[i + 1]
                    i += 1
                opts[key] = val
            elif re.fullmatch(r"-\d+", a):  # head -20
                opts["-n"] = a[1:]
            else:
                for ch in a[1:]:
                    opts[f"-{ch}"] = ""
        i += 1
    return opts, rest
