"""U, Ada's seven tools (paper Table 1 and Table A1), and the working state they update.

Navigation tools read the world through the code index: ``get_structural_overview`` (OVW),
``peek_code_region`` (PKR) and ``explore_code`` (EXP). Cognitive tools write the working
state that the prompt shows every turn: ``create_memory`` (MEM), ``bookmark`` (BKM), the
oracle ``get_hint_on_snippet`` (HNT) and the termination tool ``stash_conclusion`` (CON,
u* in the paper's Equation 1).

Observations follow the agent-computer-interface lessons of SWE-agent: a header with the
file's length, 1-based numbered lines, "(N more lines above/below)", caps that name the exact
follow-up call, never an empty reply, and mistakes answered as observations, never raised.
:meth:`Toolbox.execute` returns the text with :class:`~adakit.record.ToolMetrics` for the
trajectory record.

One deliberate deviation from Table A1: ``scope_description`` of ``stash_conclusion`` is
optional here (the issue that specified the tools marks it so); a conclusion without it is
recorded with no scope.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import tree_sitter as ts

from adakit import config
from adakit.apparatus.code_index import VALUE_KINDS, CodeIndex, Symbol, grammar_of
from adakit.apparatus.protocol import convert_value
from adakit.apparatus.world import HARD_LINK_POLICIES, SandboxError, World
from adakit.record import TOOL_ABBR, ModelCall, ToolMetrics
from adakit.text import clip

log = logging.getLogger(__name__)

PEEK_MAX_LINES = 100
PEEK_DEFAULT_LINES = 50
REFS_MAX = 50
OUTLINE_MAX_ITEMS = 80
NEXT_BLOCK_MAX_LINES = 60
DEFINITION_SNIPPET_LINES = 25
DEFINITION_CANDIDATES = 8
#: how many lines either side a look-up without symbol_name searches for names to offer when
#: its own line holds none (a comment, a string, a blank line); ``name_hints: code`` only
NAMES_REACH = 3
#: Where a look-up without symbol_name takes the names it offers: "code", identifiers in code
#: from the parse tree (never words of comments or strings; the default), or "line", every
#: identifier-shaped word of the raw line (how reference corpus local-v3 was recorded)
NAME_HINTS = ("code", "line")
HINT_MAX_LINES = 80
HINT_MAX_CHARS = 1500
LINE_CHARS = 240
MEMORY_TITLE_CHARS = 100
MEMORY_CONTENT_CHARS = 1500
NOTE_CHARS = 300

SIGNATURE_CAP = 120

ParamType = Literal["string", "integer", "boolean", "enum"]



# --------------------------------------------------------------------------- specs


@dataclass(frozen=True)
class ParamSpec:
    """One tool parameter as the prompt and the parser see it."""

    name: str
    type: ParamType
    required: bool
    description: str
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolSpec:
    """A tool's name, paper abbreviation, Table 1 group, prompt description and parameters."""

    name: str
    abbr: str
    group: str
    description: str
    params: tuple[ParamSpec, ...]

    def param(self, name: str) -> ParamSpec | None:
        return next((p for p in self.params if p.name == name), None)

    def usage(self) -> str:
        """A one-line call template, e.g. ``peek_code_region(file_path, start_line, end_line?)``."""
        args = ", ".join(p.name + ("" if p.required else "?") for p in self.params)
        return f"{self.name}({args})"


def _p(name: str, type_: ParamType, required: bool, description: str,
       choices: tuple[str, ...] = ()) -> ParamSpec:
    return ParamSpec(name, type_, required, description, choices)


ACTIONS = ("go_to_definition", "find_all_references", "go_to_next_block")
CONFIDENCE = ("high", "medium", "low")

_SPECS = [
    ToolSpec(
        "get_structural_overview", TOOL_ABBR["get_structural_overview"], "navigation",
        "Outline a file: its classes, functions and methods with signatures and line ranges. "
        "With logical_block_name, outline one class or function of the file instead.",
        (
            _p("file_path", "string", True, "Path from the repository root."),
            _p("logical_block_name", "string", False,
               "A class or function in that file, e.g. Parser or Parser.parse."),
        ),
    ),
    ToolSpec(
        "peek_code_region", TOOL_ABBR["peek_code_region"], "navigation",
        f"Show numbered lines of a file, at most {PEEK_MAX_LINES} per call.",
        (
            _p("file_path", "string", True, "Path from the repository root."),
            _p("start_line", "integer", True, "First line to show (lines count from 1)."),
            _p("end_line", "integer", False,
               f"Last line to show; default start_line + {PEEK_DEFAULT_LINES - 1}."),
        ),
    ),
    ToolSpec(
        "explore_code", TOOL_ABBR["explore_code"], "navigation",
        "Follow the code from where you are: go_to_definition jumps to where a name is "
        "defined, find_all_references lists where a name is used (matched by name), "
        "go_to_next_block shows the next class or function after your line.",
        (
            _p("action_type", "enum", True, "What to do.", ACTIONS),
            _p("current_file_path", "string", True, "The file you are reading."),
            _p("current_line_number", "integer", True, "The line you are at in that file."),
            _p("symbol_name", "string", False,
               "The name to look up; needed for go_to_definition and find_all_references."),
        ),
    ),
    ToolSpec(
        "create_memory", TOOL_ABBR["create_memory"], "cognitive",
        "Save a titled note of what you understand so far; it stays in your MEMORY. "
        "Reusing a title replaces that note.",
        (
            _p("memory_title", "string", True, "A short title."),
            _p("memory_content", "string", True, "The understanding, hypothesis or partial model."),
            _p("confidence_level", "enum", False, "How sure you are.", CONFIDENCE),
        ),
    ),
    ToolSpec(
        "bookmark", TOOL_ABBR["bookmark"], "cognitive",
        "Mark a line with a note or open question to return to; it stays in your BOOKMARK list.",
        (
            _p("file_path", "string", True, "Path from the repository root."),
            _p("line_number", "integer", True, "The line to mark."),
            _p("note", "string", True, "Why this line matters, or what is still open."),
        ),
    ),
    ToolSpec(
        "get_hint_on_snippet", TOOL_ABBR["get_hint_on_snippet"], "oracle",
        "Ask for a short explanation of a snippet that stays unclear after you have read it. "
        "The hint explains the snippet; it does not do the task for you.",
        (
            _p("file_path", "string", True, "Path from the repository root."),
            _p("code_range", "string", True,
               f"Lines as START-END, e.g. 120-145 (at most {HINT_MAX_LINES} lines)."),
            _p("description_of_confusion", "string", True, "What exactly is unclear."),
            _p("what_i_tried_or_think", "string", False, "Your current reading of it."),
        ),
    ),
    ToolSpec(
        "stash_conclusion", TOOL_ABBR["stash_conclusion"], "termination",
        "Record a conclusion about the code. proceed_to_finalize=true ends the session "
        "(use it when your conclusions answer the task); false keeps exploring.",
        (
            _p("title", "string", False, "A short title."),
            _p("content", "string", True, "The conclusion, with the evidence behind it."),
            _p("scope_description", "string", False, "Which part of the code it covers."),
            _p("proceed_to_finalize", "boolean", True, "true to finish now, false to continue."),
        ),
    ),
]

#: The seven tools in Table 1 order.
TOOL_SPECS: dict[str, ToolSpec] = {s.name: s for s in _SPECS}


# --------------------------------------------------------------------------- state


@dataclass
class Memory:
    id: int
    title: str
    content: str
    confidence: str | None = None


@dataclass
class Bookmark:
    id: int
    file: str
    line: int
    note: str
    text: str = ""


@dataclass
class Conclusion:
    id: int
    title: str
    content: str
    scope: str | None = None
    finalize: bool = False


@dataclass
class WorkingState:
    """Memories, bookmarks and conclusions: the three state channels of the prompt."""

    memories: list[Memory] = field(default_factory=list)
    bookmarks: list[Bookmark] = field(default_factory=list)
    conclusions: list[Conclusion] = field(default_factory=list)

    def render(self, memories: int = 8, bookmarks: int = 10, conclusions: int = 3) -> str:
        """The MEMORY / BOOKMARK / CONCLUSION channels, compact and capped (newest kept)."""
        out: list[str] = []
        if not self.memories:
            out.append("MEMORY: No memory has been created yet.")
        else:
            out.append(f"MEMORY ({len(self.memories)}):")
            older, recent = self.memories[:-memories], self.memories[-memories:]
            if older:
                out.append("  earlier: " + "; ".join(
                    f"[{m.id}] {clip(m.title, 40, space='squash')}" for m in older[-12:]))
            for m in recent:
                conf = f" ({m.confidence})" if m.confidence else ""
                title = clip(m.title, 60, space="squash")
                out.append(f"  [{m.id}] {title}{conf}: {clip(m.content, 240, space='squash')}")
        if not self.bookmarks:
            out.append("BOOKMARK: No bookmarks have been created yet.")
        else:
            out.append(f"BOOKMARK ({len(self.bookmarks)}):")
            if len(self.bookmarks) > bookmarks:
                out.append(f"  ({len(self.bookmarks) - bookmarks} earlier bookmarks not shown)")
            for b in self.bookmarks[-bookmarks:]:
                out.append(f"  [{b.id}] {b.file}:{b.line} {clip(b.note, 120, space='squash')}")
        if not self.conclusions:
            out.append("CONCLUSION: No conclusion has been reached yet.")
        else:
            out.append(f"CONCLUSION ({len(self.conclusions)}):")
            older_c, recent_c = self.conclusions[:-conclusions], self.conclusions[-conclusions:]
            if older_c:
                out.append("  earlier: " + "; ".join(
                    f"[{c.id}] {clip(c.title, 40, space='squash')}" for c in older_c[-12:]))
            for c in recent_c:
                scope = f" [{clip(c.scope, 60, space='squash')}]" if c.scope else ""
                title = clip(c.title, 60, space="squash")
                out.append(f"  [{c.id}] {title}{scope}: {clip(c.content, 400, space='squash')}")
        return "\n".join(out)

    def to_dict(self) -> dict[str, Any]:
        return {
            "memories": [asdict(m) for m in self.memories],
            "bookmarks": [asdict(b) for b in self.bookmarks],
            "conclusions": [asdict(c) for c in self.conclusions],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkingState:
        return cls(
            memories=[Memory(**m) for m in data.get("memories", [])],
            bookmarks=[Bookmark(**b) for b in data.get("bookmarks", [])],
            conclusions=[Conclusion(**c) for c in data.get("conclusions", [])],
        )


# --------------------------------------------------------------------------- results


@dataclass
class ToolResult:
    """What one tool call gives back: the observation and what the record keeps."""

    text: str
    metrics: ToolMetrics
    state_changes: list[dict[str, Any]] = field(default_factory=list)
    finalize: bool = False
    model_calls: list[ModelCall] = field(default_factory=list)


class ToolError(Exception):
    """An agent mistake, answered as an observation (never raised out of execute)."""

    def __init__(self, message: str, file: str | None = None) -> None:
        super().__init__(message)
        self.file = file


HintModel = Any  # Callable[[list[dict]], tuple[str, ModelCall]]



def call_text(tool: str, **params: Any) -> str:
    """A concrete call to suggest in an observation, in the agent's own XML protocol (one line)."""
    inner = "".join(
        f"<{k}>{str(v).lower() if isinstance(v, bool) else v}</{k}>" for k, v in params.items()
    )
    return f"<{tool}>{inner}</{tool}>"


def _fmt_line(n: int, width: int, text: str) -> str:
    if len(text) > LINE_CHARS:
        text = text[:LINE_CHARS] + f" …[line cut, {len(text) - LINE_CHARS} more chars]"
    return f"{n:>{width}}: {text}"


def numbered(lines: list[str], start: int, end: int) -> list[str]:
    """Lines ``start..end`` (1-based, inclusive) with right-aligned line numbers."""
    width = len(str(end))
    return [_fmt_line(i, width, lines[i - 1]) for i in range(start, end + 1)]


# --------------------------------------------------------------------------- the toolbox


class Toolbox:
    """Runs tool calls against a world; owns the working state of one run."""

    def __init__(
        self,
        world: World,
        index: CodeIndex | None = None,
        hint_model: HintModel | None = None,
        state: WorkingState | None = None,
        name_hints: str = "code",
    ) -> None:
        if name_hints not in NAME_HINTS:
            raise ValueError(f"name_hints must be one of {', '.join(NAME_HINTS)}, got {name_hints!r}")
        self.world = world
        self.index = index if index is not None else CodeIndex(world)
        self.hint_model = hint_model
        self.state = state if state is not None else WorkingState()
        self.name_hints = name_hints
        self._handlers = {
            "get_structural_overview": self._overview,
            "peek_code_region": self._peek,
            "explore_code": self._explore,
            "create_memory": self._memory,
            "bookmark": self._bookmark,
            "get_hint_on_snippet": self._hint,
            "stash_conclusion": self._conclude,
        }

    # ------------------------------------------------------------------ dispatch

    def execute(self, tool_name: str, params: dict[str, Any] | None = None) -> ToolResult:
        """Run one call; agent mistakes come back as observations with error_type set."""
        spec = TOOL_SPECS.get(tool_name)
        if spec is None:
            return ToolResult(
                f"There is no tool named {tool_name!r}. The tools are: {', '.join(TOOL_SPECS)}.",
                ToolMetrics(error_type="unknown_tool"),
            )
        metrics = ToolMetrics(tool=spec.abbr)
        try:
            values = self._check(spec, params or {})
            return self._handlers[spec.name](metrics, **values)
        except (ToolError, SandboxError) as exc:
            metrics.error_type = "tool_error"
            metrics.file = getattr(exc, "file", None) or metrics.file
            return ToolResult(str(exc), metrics)
        except Exception as exc:  # a bug must not end the run; the record keeps the message
            log.exception("tool %s failed", tool_name)
            metrics.error_type = "tool_error"
            return ToolResult(
                f"{tool_name} failed unexpectedly ({type(exc).__name__}: {self._detail(exc)}). "
                "Try a different call.",
                metrics,
            )

    def _detail(self, exc: Exception) -> str:
        """An unexpected error's message without host paths: an OSError's reason only, and
        the world's root shown as the world's name."""
        if isinstance(exc, OSError):
            return exc.strerror or "operating system error"
        try:
            root, name = str(self.world.root), self.world.name
        except Exception:  # a stand-in world (the explorer's state replay) has no root
            return str(exc)
        return str(exc).replace(root, name)

    def _check(self, spec: ToolSpec, params: dict[str, Any]) -> dict[str, Any]:
        unknown = [k for k in params if spec.param(k) is None]
        if unknown:
            raise ToolError(
                f"{spec.name} has no parameter {', '.join(map(repr, unknown))}. "
                f"Call it as {spec.usage()}."
            )
        out: dict[str, Any] = {}
        for p in spec.params:
            value = params.get(p.name)
            if isinstance(value, str):
                value = value.strip()
            if value is None or value == "":
                if p.required:
                    raise ToolError(
                        f"{spec.name} needs {p.name} ({p.description}). Call it as {spec.usage()}."
                    )
                continue
            out[p.name] = self._coerce(spec, p, value)
        return out

    @staticmethod
    def _coerce(spec: ToolSpec, p: ParamSpec, value: Any) -> Any:
        try:
            return convert_value(p, value)
        except ValueError as exc:
            raise ToolError(f"{spec.name}: {p.name} {exc}.") from None

    # ------------------------------------------------------------------ helpers

    def _rel(self, path: str, metrics: ToolMetrics | None = None) -> str:
        rel = self.world.rel(path)
        if metrics is not None:
            metrics.file = rel
        return rel

    def _lines(self, rel: str) -> list[str]:
        return self.index.lines(rel)

    def _header(self, rel: str, n: int, extra: str = "") -> str:
        lang = grammar_of(rel)
        bits = [f"File: {rel}", f"{n} lines"]
        if lang:
            bits.append(lang)
        if extra:
            bits.append(extra)
        return "[" + " | ".join(bits) + "]"

    def _context(self, rel: str, line: int) -> str | None:
        if grammar_of(rel) is None:
            return None
        sym = self.index.enclosing(rel, line)
        if sym is None:
            return None
        return f"(line {line} is inside {sym.kind} {sym.qualname}, lines {sym.start_line}-{sym.end_line})"

    def _window(
        self, rel: str, lines: list[str], start: int, end: int, metrics: ToolMetrics
    ) -> list[str]:
        out = []
        if start > 1:
            out.append(f"({start - 1} more lines above)")
        out.extend(numbered(lines, start, end))
        if end < len(lines):
            out.append(f"({len(lines) - end} more lines below)")
        metrics.ranges.append((start, end))
        metrics.lines_viewed += end - start + 1
        return out

    # ------------------------------------------------------------------ OVW

    def _overview(self, m: ToolMetrics, file_path: str, logical_block_name: str | None = None) -> ToolResult:
        rel = self._rel(file_path, m)
        m.structural = True
        m.block = logical_block_name
        lines = self._lines(rel)
        n = len(lines)
        outline = self.index.outline(rel)
        if not outline.supported:
            return ToolResult(self._plain_overview(rel, lines, logical_block_name), m)
        symbols = [s for s in outline.symbols if s.kind not in VALUE_KINDS]
        notes = []
        if outline.has_errors:
            where = ", ".join(map(str, outline.error_lines)) or "unknown lines"
            notes.append(f"Note: syntax errors near line(s) {where}; the outline may be incomplete.")
        if logical_block_name:
            text, count = self._block_overview(rel, lines, symbols, logical_block_name.strip(), outline.language)
            m.result_count = count
            return ToolResult("\n".join([text, *notes]), m)
        head = [self._header(rel, n)]
        imports = self._imports(rel)
        if imports:
            head.append("Imports: " + clip(", ".join(imports), 300, space="squash"))
        values = [s for s in outline.symbols if s.kind in VALUE_KINDS and s.depth == 0]
        if values:
            shown = ", ".join(f"{s.name} (L{s.start_line})" for s in values[:12])
            more = f", +{len(values) - 12} more" if len(values) > 12 else ""
            head.append(f"Module-level names: {shown}{more}")
        m.result_count = len(symbols)
        if not symbols:
            stop = min(n, PEEK_MAX_LINES)
            head.append(
                "No classes or functions in this file."
                + (f" Read it with {call_text('peek_code_region', file_path=rel, start_line=1, end_line=stop)}." if n else " The file is empty.")
            )
            return ToolResult("\n".join(head + notes), m)
        body, footer = self._outline_lines(rel, symbols)
        head.append(f"Outline ({len(symbols)} symbols; L<start>-<end>, 1-based, inclusive):")
        return ToolResult("\n".join(head + body + footer + notes), m)

    def _outline_lines(self, rel: str, symbols: list[Symbol], base_depth: int = 0) -> tuple[list[str], list[str]]:
        def row(s: Symbol, extra: str = "") -> str:
            return f"{'  ' * (s.depth - base_depth)}{s.signature}  L{s.start_line}-{s.end_line}{extra}"

        footer: list[str] = []
        if len(symbols) <= OUTLINE_MAX_ITEMS:
            return [row(s) for s in symbols], footer
        for keep_depth in (base_depth + 1, base_depth):
            kept = [s for s in symbols if s.depth <= keep_depth]
            if len(kept) <= OUTLINE_MAX_ITEMS or keep_depth == base_depth:
                break
        hidden: dict[str, int] = {}
        for s in symbols:
            if s.depth > keep_depth and s.parent:
                top = ".".join(s.parent.split(".")[: keep_depth + 1])
                hidden[top] = hidden.get(top, 0) + 1
        out = []
        for s in kept[:OUTLINE_MAX_ITEMS]:
            extra = f"  (+{hidden[s.qualname]} nested)" if hidden.get(s.qualname) else ""
            out.append(row(s, extra))
        example = next((s for s in kept if hidden.get(s.qualname)), None)
        if example is not None:
            footer.append(
                "Nested symbols are folded to fit; see one block with "
                f"{call_text('get_structural_overview', file_path=rel, logical_block_name=example.qualname)}."
            )
        if len(kept) > OUTLINE_MAX_ITEMS:
            last = kept[OUTLINE_MAX_ITEMS - 1]
            footer.append(
                f"({len(kept) - OUTLINE_MAX_ITEMS} more symbols after line {last.end_line} not listed; "
                f"read on with {call_text('peek_code_region', file_path=rel, start_line=last.end_line + 1)}"
                " or ask for a named block.)"
            )
        return out, footer

    def _plain_overview(self, rel: str, lines: list[str], block: str | None) -> str:
        n = len(lines)
        head = self._header(rel, n)
        low = rel.lower()
        if low.endswith((".md", ".markdown")):
            heads = []
            for i, ln in enumerate(lines, 1):
                if re.match(r"#{1,6}\s", ln):
                    heads.append(f"L{i}  {ln.strip()}")
                if len(heads) >= OUTLINE_MAX_ITEMS:
                    break
            if heads:
                return "\n".join([head, "Headings:", *heads])
        stop = min(max(n, 1), PEEK_MAX_LINES)
        what = f" for block {block!r}" if block else ""
        return (
            f"{head}\nNo structural outline{what}: this file type is not parsed (outlines cover "
            "Python, Cython, TypeScript, JavaScript and Rust). "
            + (f"Read it with {call_text('peek_code_region', file_path=rel, start_line=1, end_line=stop)}."
               if n else "The file is empty.")
        )

    def _find_block(self, rel: str, symbols: list[Symbol], name: str) -> list[Symbol]:
        want = re.sub(r"\s+", " ", name.replace("::", ".")).strip().strip("`'\"").rstrip("()")
        low = want.lower()
        for test in (
            lambda s: s.qualname == want,
            lambda s: s.signature == want or f"{s.kind} {s.qualname}" == want,
            lambda s: s.name == want,
            lambda s: s.qualname.endswith("." + want),
            lambda s: s.qualname.lower() == low or s.name.lower() == low,
        ):
            found = [s for s in symbols if test(s)]
            if found:
                return found
        return []

    def _block_overview(
        self, rel: str, lines: list[str], symbols: list[Symbol], name: str, language: str | None
    ) -> tuple[str, int]:
        found = self._find_block(rel, symbols, name)
        if not found:
            names = sorted({s.qualname for s in symbols})
            import difflib

            close = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
            listing = close or [s.qualname for s in symbols if s.depth == 0][:12]
            raise ToolError(
                f"No block named {name!r} in {rel}."
                + (f" Blocks with similar names: {', '.join(listing)}." if listing else " The file has no blocks.")
                + f" See them all with {call_text('get_structural_overview', file_path=rel)}."
            )
        if len({s.qualname for s in found}) > 1:
            rows = [f"  {s.qualname} ({s.kind}) L{s.start_line}-{s.end_line}" for s in found[:12]]
            raise ToolError(
                f"{name!r} is ambiguous in {rel}: {len(found)} blocks match.\n" + "\n".join(rows)
                + f"\nName one exactly, e.g. {call_text('get_structural_overview', file_path=rel, logical_block_name=found[0].qualname)}."
            )
        parts = []
        for sym in found:  # same qualified name more than once (overloads, property setters)
            parts.append(self._one_block(rel, lines, symbols, sym, language))
        return "\n\n".join(parts), len(found)

    def _one_block(self, rel: str, lines: list[str], symbols: list[Symbol], sym: Symbol, language: str | None) -> str:
        out = [
            f"[Block: {sym.kind} {sym.qualname} | {rel} lines {sym.start_line}-{sym.end_line} "
            f"({sym.lines} lines of {len(lines)}) | {language}]",
            f"Signature: {sym.signature}",
        ]
        if sym.parent:
            out.append(f"Inside: {sym.parent}")
        node = self._def_node(rel, sym)
        doc = self._doc(node, language) if node is not None else None
        if doc:
            out.append(f"Doc: {doc}")
        members = [
            s for s in symbols
            if s.start_line >= sym.start_line and s.end_line <= sym.end_line and s.depth > sym.depth
        ]
        if members:
            out.append(f"Members ({len(members)}):")
            body, footer = self._outline_lines(rel, members, base_depth=sym.depth + 1)
            out.extend("  " + b for b in body)
            out.extend(footer)
        code_like = sym.kind in ("function", "method") or (
            not members and sym.kind not in ("struct", "enum", "interface", "type", "union")
        )
        if node is not None and code_like:
            calls = _calls_in(node, language or "")
            if calls:
                out.append("Calls (by name): " + clip(", ".join(calls), 400, space="squash"))
        end = min(sym.end_line, sym.start_line + PEEK_MAX_LINES - 1)
        out.append(f"Read it with {call_text('peek_code_region', file_path=rel, start_line=sym.start_line, end_line=end)}.")
        return "\n".join(out)

    def _def_node(self, rel: str, sym: Symbol) -> ts.Node | None:
        tree = self.index.tree(rel)
        if tree is None:
            return None
        lines = self._lines(rel)
        row = sym.name_line - 1
        if not 0 <= row < len(lines):
            return None
        text = lines[row]
        match = re.search(r"(?<![A-Za-z0-9_$])" + re.escape(sym.name) + r"(?![A-Za-z0-9_$])", text)
        if match is None:
            return None
        col = len(text[: match.start()].encode("utf-8"))
        node = tree.root_node.named_descendant_for_point_range((row, col), (row, col + len(sym.name.encode())))
        # climb to the definition node whose range is the symbol's
        while node is not None and node.parent is not None:
            if node.end_point.row + 1 >= sym.end_line and node.start_point.row + 1 <= sym.name_line and (
                node.child_by_field_name("body") is not None or node.type.endswith(("_item", "_declaration", "_definition"))
            ):
                return node
            node = node.parent
        return None

    @staticmethod
    def _doc(node: ts.Node, language: str | None) -> str | None:
        text = None
        if language == "python":
            body = node.child_by_field_name("body")
            first = body.named_children[0] if body is not None and body.named_child_count else None
            if first is not None and first.type == "expression_statement" and first.named_child_count:
                s = first.named_children[0]
                if s.type == "string":
                    raw = (s.text or b"").decode("utf-8", "replace")
                    text = re.sub(r"^[rRbBuUfF]*(\"\"\"|'''|\"|')|(\"\"\"|'''|\"|')$", "", raw.strip())
        else:
            start = node
            while start.parent is not None and start.parent.type in ("export_statement", "ambient_declaration"):
                start = start.parent
            prev = start.prev_named_sibling
            while prev is not None and prev.type in ("attribute_item", "decorator"):
                prev = prev.prev_named_sibling
            # the comment block just above (consecutive // or /// lines, or one /** */)
            first = None
            below = start
            while prev is not None and prev.type in ("comment", "line_comment", "block_comment") and (
                prev.end_point.row >= below.start_point.row - 1
            ):
                first, below = prev, prev
                prev = prev.prev_named_sibling
            if first is not None:
                raw = (first.text or b"").decode("utf-8", "replace")
                text = re.sub(r"^\s*(/\*\*?|\*/|\*|///?|//!)", "", raw, flags=re.M)
        if not text:
            return None
        first_lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
        return clip(first_lines[0], 200, space="squash") if first_lines else None

    def _imports(self, rel: str) -> list[str]:
        tree = self.index.tree(rel)
        if tree is None:
            return []
        family = grammar_of(rel)
        out: list[str] = []
        for node in tree.root_node.named_children:
            t = node.type
            if family == "python" and t == "import_from_statement":
                mod = node.child_by_field_name("module_name")
                if mod is not None:
                    out.append((mod.text or b"").decode("utf-8", "replace"))
            elif family == "python" and t == "import_statement":
                for child in node.children_by_field_name("name"):
                    target = child.child_by_field_name("name") if child.type == "aliased_import" else child
                    if target is not None:
                        out.append((target.text or b"").decode("utf-8", "replace"))
            elif family in ("typescript", "tsx", "javascript") and t == "import_statement":
                src = node.child_by_field_name("source")
                if src is not None:
                    out.append((src.text or b"").decode("utf-8", "replace").strip("'\"`"))
            elif family == "rust" and t == "use_declaration":
                arg = node.child_by_field_name("argument")
                if arg is not None:
                    text = (arg.text or b"").decode("utf-8", "replace")
                    out.append(clip(text, 60, space="squash"))
            elif family == "rust" and t == "mod_item" and node.child_by_field_name("body") is None:
                name = node.child_by_field_name("name")
                if name is not None:
                    out.append("mod " + (name.text or b"").decode("utf-8", "replace"))
        return list(dict.fromkeys(out))

    # ------------------------------------------------------------------ PKR

    def _peek(self, m: ToolMetrics, file_path: str, start_line: int, end_line: int | None = None) -> ToolResult:
        rel = self._rel(file_path, m)
        lines = self._lines(rel)
        n = len(lines)
        if n == 0:
            return ToolResult(f"{self._header(rel, 0)}\nThe file is empty.", m)
        notes: list[str] = []
        if start_line > n:
            lo = max(1, n - PEEK_DEFAULT_LINES + 1)
            raise ToolError(
                f"start_line {start_line} is past the end of {rel}, which has {n} lines. "
                f"The last lines are {call_text('peek_code_region', file_path=rel, start_line=lo, end_line=n)}.",
                rel,
            )
        if start_line < 1:
            notes.append(f"(start_line {start_line} moved to 1: lines count from 1)")
            start_line = 1
        if end_line is None:
            end_line = start_line + PEEK_DEFAULT_LINES - 1
        elif end_line < start_line:
            notes.append(f"(end_line {end_line} is before start_line; showing from line {start_line})")
            end_line = start_line + PEEK_DEFAULT_LINES - 1
        asked = end_line
        if end_line > n:
            if asked != start_line + PEEK_DEFAULT_LINES - 1:
                notes.append(f"(end_line {asked} clamped to {n}, the last line)")
            end_line = n
        if end_line - start_line + 1 > PEEK_MAX_LINES:
            end_line = start_line + PEEK_MAX_LINES - 1
            nxt_end = min(asked, n, end_line + PEEK_MAX_LINES)
            notes.append(
                f"(showing {PEEK_MAX_LINES} lines, the most per call; continue with "
                f"{call_text('peek_code_region', file_path=rel, start_line=end_line + 1, end_line=nxt_end)})"
            )
        out = [self._header(rel, n, f"lines {start_line}-{end_line}")]
        ctx = self._context(rel, start_line)
        if ctx:
            out.append(ctx)
        out.extend(n_ for n_ in notes if "continue with" not in n_)
        out.extend(self._window(rel, lines, start_line, end_line, m))
        out.extend(n_ for n_ in notes if "continue with" in n_)
        return ToolResult("\n".join(out), m)

    # ------------------------------------------------------------------ EXP

    def _explore(
        self,
        m: ToolMetrics,
        action_type: str,
        current_file_path: str,
        current_line_number: int,
        symbol_name: str | None = None,
    ) -> ToolResult:
        m.action = {"go_to_definition": "definition", "find_all_references": "references",
                    "go_to_next_block": "next"}[action_type]
        if action_type == "go_to_next_block":
            return self._next_block(m, current_file_path, current_line_number)
        note = ""
        rel: str | None
        try:
            rel = self._rel(current_file_path, m)
        except SandboxError as exc:
            if exc.kind == "outside":
                raise
            rel = None
            if exc.kind == "not_found":
                note = f"(current_file_path {current_file_path!r} was not found; the whole repository was searched)"
            else:
                why = str(exc) if str(exc).endswith(".") else f"{exc}."
                note = f"(current_file_path was refused: {why} The whole repository was searched.)"
        if not symbol_name:
            where, names = self._names_near(rel, current_line_number) if rel else (0, [])
            if not names:
                hint = ""
            elif where == current_line_number:
                hint = f" Names on line {where} of {rel}: {', '.join(names)}."
            else:
                hint = (f" Line {current_line_number} of {rel} holds no names in code (a comment, a "
                        f"string or a blank line); names on line {where}: {', '.join(names)}.")
            example = call_text("explore_code", action_type=action_type,
                                current_file_path=rel or current_file_path,
                                current_line_number=where if names else current_line_number,
                                symbol_name=names[0] if names else "name")
            raise ToolError(f"{action_type} needs symbol_name, the name to look up.{hint} Example: {example}", rel)
        symbol = symbol_name.strip().strip("`'\"").rstrip("()").strip()
        if not re.fullmatch(r"[A-Za-z_$][\w$]*((\.|::)[A-Za-z_$][\w$]*)*", symbol):
            raise ToolError(
                f"symbol_name must be an identifier such as parse or Parser.parse; got {symbol_name[:60]!r}.",
                rel,
            )
        m.symbol = symbol
        if action_type == "go_to_definition":
            return self._definition(m, rel, current_line_number, symbol, note)
        return self._references(m, rel, symbol, note)

    def _names_near(self, rel: str, line: int) -> tuple[int, list[str]]:
        """Names to offer for a look-up at ``line`` and the line they are on. Under
        ``name_hints: code``, the identifiers in code on that line, else on the nearest line
        within :data:`NAMES_REACH` that has some (the line after first at each distance);
        under ``line``, the words of that raw line."""
        if self.name_hints == "line":
            return line, self.index.words_on_line(rel, line)
        for where in (line, *(line + s * d for d in range(1, NAMES_REACH + 1) for s in (1, -1))):
            names = self.index.identifiers_on_line(rel, where)
            if names:
                return where, names
        return line, []

    def _rank(self, rel: str | None, syms: list[Symbol], line: int = 0) -> list[Symbol]:
        """Best definitions first: the current file (inside the symbols enclosing the current
        line first, then nearest), the same language, primary declarations, the nearest folder."""
        if rel is None:
            return syms
        here = rel.split("/")
        lang = grammar_of(rel)
        scope = ""
        if lang and line > 0:
            inner = self.index.enclosing(rel, line)
            scope = inner.qualname if inner is not None else ""

        def key(s: Symbol) -> tuple:
            there = s.file.split("/")
            common = 0
            for a, b in zip(here[:-1], there[:-1], strict=False):
                if a != b:
                    break
                common += 1
            other_lang = grammar_of(s.file)
            same_lang = other_lang == lang or {other_lang, lang} <= {"typescript", "tsx", "javascript"}
            kind_rank = 2 if s.kind == "impl" else (1 if s.kind in VALUE_KINDS else 0)
            if s.file == rel:
                in_scope = bool(scope) and bool(s.parent) and (
                    scope == s.parent or scope.startswith(s.parent + ".")
                )
                return (0, not in_scope, kind_rank, abs(s.start_line - line), s.start_line)
            return (1, not same_lang, kind_rank, -common, s.file, s.start_line)

        return sorted(syms, key=key)

    def _definition(self, m: ToolMetrics, rel: str | None, line: int, symbol: str, note: str) -> ToolResult:
        defs = self.index.definitions(symbol)
        last = re.split(r"\.|::", symbol)[-1]
        qualified_fallback = False
        if not defs and last != symbol:
            defs = self.index.definitions(last)
            qualified_fallback = bool(defs)
        defs = self._rank(rel, defs, line)
        m.result_count = len(defs)
        out = [note] if note else []
        if not defs:
            out.extend(self._no_definition(rel, symbol, last))
            return ToolResult("\n".join(out), m)
        best = defs[0]
        m.file = best.file
        head = f"Definition of {symbol!r}"
        if qualified_fallback:
            head += f" (no exact match for the qualified name; showing definitions of {last!r})"
        if len(defs) > 1:
            head += f": {len(defs)} candidates by name, best first (same file, then nearest folder)."
        else:
            head += ":"
        out.append(head)
        lines = self._lines(best.file)
        stop = min(best.end_line, best.start_line + DEFINITION_SNIPPET_LINES - 1, len(lines))
        out.append(f"1. {best.kind} {best.qualname} in {best.file}, lines {best.start_line}-{best.end_line}")
        out.append(self._header(best.file, len(lines), f"lines {best.start_line}-{stop}"))
        out.extend(self._window(best.file, lines, best.start_line, stop, m))
        if stop < best.end_line:
            out.append(
                f"(the definition continues to line {best.end_line}; read on with "
                f"{call_text('peek_code_region', file_path=best.file, start_line=stop + 1, end_line=min(best.end_line, stop + PEEK_MAX_LINES))})"
            )
        others = defs[1 : 1 + DEFINITION_CANDIDATES]
        if others:
            out.append("Other candidates:")
            for i, s in enumerate(others, 2):
                out.append(f"{i}. {s.kind} {s.qualname} in {s.file}, lines {s.start_line}-{s.end_line}: {s.signature}")
            if len(defs) > 1 + DEFINITION_CANDIDATES:
                out.append(f"(+{len(defs) - 1 - DEFINITION_CANDIDATES} more candidates; a qualified name such as Class.method narrows the search)")
        return ToolResult("\n".join(out), m)

    def _no_definition(self, rel: str | None, symbol: str, last: str) -> list[str]:
        n_files = len(self.index.source_files())
        out = [
            f"No definition of {symbol!r} found. Searched the class, function, method and "
            f"module-level definitions of {n_files} indexed source files by name."
        ]
        if rel is not None and grammar_of(rel):
            res = self.index.search_references(last, limit=200, first_file=rel)
            imported = [r for r in res.refs if r.file == rel and r.kind == "import"]
            if imported:
                r = imported[0]
                out.append(
                    f"{rel} imports it at line {r.line}: {r.text}. The import points outside the "
                    "indexed files (the standard library or a dependency) or to a name assigned at runtime."
                )
            local = [r for r in res.refs if r.file == rel and r.kind != "import"]
            if local and not imported:
                out.append(f"In {rel} it appears on line(s) {', '.join(str(r.line) for r in local[:8])}; "
                           "it may be a local variable, a parameter or an attribute set at runtime.")
        modules = [f for f in self.index.source_files() if Path(f).stem == last]
        if modules:
            out.append(f"Files named {last}: {', '.join(modules[:5])} (see {call_text('get_structural_overview', file_path=modules[0])}).")
        out.append(
            "Next: " + call_text("explore_code", action_type="find_all_references",
                                 current_file_path=rel or "", current_line_number=1, symbol_name=last)
            + " lists where the name is used."
        )
        return out

    def _references(self, m: ToolMetrics, rel: str | None, symbol: str, note: str) -> ToolResult:
        last = re.split(r"\.|::", symbol)[-1]
        res = self.index.search_references(last, limit=REFS_MAX, first_file=rel)
        m.result_count = res.total
        out = [note] if note else []
        scope = (f"{res.files_searched} indexed source files; identifiers matched by name, not by "
                 "type, so same-named things elsewhere count too; comments and strings excluded")
        if last != symbol:
            out.append(f"(references are found by the last part of the name, {last!r})")
        if res.total == 0:
            out.append(f"No references to {last!r} in {scope}. Check the spelling, or try "
                       + call_text("explore_code", action_type="go_to_definition",
                                   current_file_path=rel or "", current_line_number=1, symbol_name=symbol) + ".")
            return ToolResult("\n".join(out), m)
        shown = res.refs
        out.append(f"{res.total} references to {last!r} in {len(res.per_file)} files ({scope}).")
        if res.total > len(shown):
            out.append(f"Showing the first {len(shown)}" + (f", {rel} first:" if rel else ":"))
        current = None
        for r in shown:
            if r.file != current:
                current = r.file
                out.append(f"{r.file} ({res.per_file.get(r.file, 0)}):")
            out.append(f"  L{r.line} [{r.kind}] {r.text}")
        m.lines_viewed = len(shown)
        if res.total > len(shown):
            shown_per_file: dict[str, int] = {}
            for r in shown:
                shown_per_file[r.file] = shown_per_file.get(r.file, 0) + 1
            partial = [(res.per_file[f] - c, f) for f, c in shown_per_file.items() if res.per_file[f] > c]
            rest = sorted(((c, f) for f, c in res.per_file.items() if f not in shown_per_file),
                          key=lambda cf: (-cf[0], cf[1]))
            bits = [f"{c} more in {f}" for c, f in partial]
            if rest:
                tail = ", ".join(f"{f} ({c})" for c, f in rest[:15])
                more = f", +{len(rest) - 15} more files" if len(rest) > 15 else ""
                bits.append(f"also in: {tail}{more}")
            out.append(f"({res.total - len(shown)} more not shown; " + "; ".join(bits) + ")")
            target = rest[0][1] if rest else partial[0][1]
            out.append(
                "A file's own uses are listed first when it is the current file: "
                + call_text("explore_code", action_type="find_all_references", current_file_path=target,
                            current_line_number=1, symbol_name=symbol)
            )
        return ToolResult("\n".join(out), m)

    def _next_block(self, m: ToolMetrics, path: str, line: int) -> ToolResult:
        rel = self._rel(path, m)
        lines = self._lines(rel)
        n = len(lines)
        if grammar_of(rel) is None:
            raise ToolError(
                f"go_to_next_block needs a Python, TypeScript, JavaScript or Rust file; {rel} is not "
                f"parsed. Read it with {call_text('peek_code_region', file_path=rel, start_line=max(1, min(line, n)))}.",
                rel,
            )
        note = ""
        if line < 1 or line > n:
            clamped = min(max(line, 1), max(n, 1))
            note = f"(current_line_number {line} is outside 1-{n}; using {clamped})"
            line = clamped
        sym = self.index.next_block(rel, line)
        if sym is None:
            blocks = [s for s in self.index.outline(rel).symbols if s.kind not in VALUE_KINDS]
            m.result_count = 0
            last = blocks[-1] if blocks else None
            where = f" The last block is {last.kind} {last.qualname}, lines {last.start_line}-{last.end_line}." if last else ""
            rest = (f" Lines {line + 1}-{n} hold no further block; read them with "
                    f"{call_text('peek_code_region', file_path=rel, start_line=line + 1, end_line=min(n, line + PEEK_MAX_LINES))}."
                    if line < n else "")
            text = f"No block starts after line {line} in {rel} ({n} lines).{where}{rest}"
            return ToolResult("\n".join(x for x in (note, text) if x), m)
        m.result_count = 1
        m.block = sym.qualname
        stop = min(sym.end_line, sym.start_line + NEXT_BLOCK_MAX_LINES - 1, n)
        out = [x for x in (note,) if x]
        out.append(f"Next block after line {line}: {sym.kind} {sym.qualname}, lines {sym.start_line}-{sym.end_line}")
        out.append(self._header(rel, n, f"lines {sym.start_line}-{stop}"))
        out.extend(self._window(rel, lines, sym.start_line, stop, m))
        if stop < sym.end_line:
            out.append(
                f"(the block continues to line {sym.end_line}; "
                f"{call_text('peek_code_region', file_path=rel, start_line=stop + 1, end_line=min(sym.end_line, stop + PEEK_MAX_LINES))} reads on, "
                f"{call_text('explore_code', action_type='go_to_next_block', current_file_path=rel, current_line_number=sym.start_line)} steps into it)"
            )
        return ToolResult("\n".join(out), m)

    # ------------------------------------------------------------------ MEM / BKM

    def _memory(self, m: ToolMetrics, memory_title: str, memory_content: str,
                confidence_level: str | None = None) -> ToolResult:
        m.confidence = confidence_level
        notes = []
        title = " ".join(memory_title.split())
        if len(title) > MEMORY_TITLE_CHARS:
            title = title[: MEMORY_TITLE_CHARS - 1] + "…"
            notes.append(f"(title shortened to {MEMORY_TITLE_CHARS} characters)")
        content = memory_content.strip()
        if len(content) > MEMORY_CONTENT_CHARS:
            content = content[:MEMORY_CONTENT_CHARS] + "…"
            notes.append(f"(content kept to its first {MEMORY_CONTENT_CHARS} characters)")
        existing = next((x for x in self.state.memories if x.title.lower() == title.lower()), None)
        if existing is not None:
            existing.content, existing.confidence = content, confidence_level
            mem, op = existing, "update"
        else:
            mem = Memory(len(self.state.memories) + 1, title, content, confidence_level)
            self.state.memories.append(mem)
            op = "add"
        conf = confidence_level or "not given"
        verb = "updated" if op == "update" else "saved"
        text = (f"Memory [{mem.id}] {verb}: {title!r} (confidence: {conf}). "
                f"MEMORY holds {len(self.state.memories)} note(s).")
        change = {"channel": "memory", "op": op, "id": mem.id, "title": title,
                  "content": content, "confidence": confidence_level}
        return ToolResult(" ".join([text, *notes]), m, [change])

    def _bookmark(self, m: ToolMetrics, file_path: str, line_number: int, note: str) -> ToolResult:
        rel = self._rel(file_path, m)
        lines = self._lines(rel)
        n = len(lines)
        if not 1 <= line_number <= n:
            raise ToolError(
                f"line_number {line_number} is outside {rel}, which has {n} lines (1-{n}).", rel
            )
        note = " ".join(note.split())
        if len(note) > NOTE_CHARS:
            note = note[: NOTE_CHARS - 1] + "…"
        text_line = lines[line_number - 1]
        existing = next((b for b in self.state.bookmarks if b.file == rel and b.line == line_number), None)
        if existing is not None:
            existing.note, bm, op = note, existing, "update"
        else:
            bm = Bookmark(len(self.state.bookmarks) + 1, rel, line_number, note, text_line.strip()[:LINE_CHARS])
            self.state.bookmarks.append(bm)
            op = "add"
        m.ranges.append((line_number, line_number))
        m.lines_viewed = 1
        verb = "updated" if op == "update" else "set"
        out = [f"Bookmark [{bm.id}] {verb} at {rel}:{line_number}: {note}",
               _fmt_line(line_number, len(str(line_number)), text_line),
               f"BOOKMARK holds {len(self.state.bookmarks)} bookmark(s)."]
        change = {"channel": "bookmark", "op": op, "id": bm.id, "file": rel, "line": line_number, "note": note}
        return ToolResult("\n".join(out), m, [change])

    # ------------------------------------------------------------------ HNT

    def _hint(self, m: ToolMetrics, file_path: str, code_range: str, description_of_confusion: str,
              what_i_tried_or_think: str | None = None) -> ToolResult:
        rel = self._rel(file_path, m)
        lines = self._lines(rel)
        n = len(lines)
        if n == 0:
            raise ToolError(f"{rel} is empty; there is no snippet to explain.", rel)
        start, end, notes = parse_code_range(code_range, n)
        if end - start + 1 > HINT_MAX_LINES:
            end = start + HINT_MAX_LINES - 1
            notes.append(f"(the snippet is limited to {HINT_MAX_LINES} lines: {start}-{end})")
        if self.hint_model is None:
            raise ToolError(
                "Hints are not available in this session (no hint model is configured). "
                "Keep reading with peek_code_region and explore_code, and note open questions with bookmark.",
                rel,
            )
        snippet = "\n".join(numbered(lines, start, end))
        messages = hint_messages(rel, start, end, grammar_of(rel) or "text", snippet,
                                 description_of_confusion, what_i_tried_or_think)
        name = getattr(self.hint_model, "name", None) or getattr(self.hint_model, "__name__", "hint")
        try:
            answer, call = self.hint_model(messages)
        except Exception as exc:
            failed = ModelCall(purpose="hint", model=str(name), error=f"{type(exc).__name__}: {exc}")
            m.error_type = "tool_error"
            return ToolResult(
                f"The hint model failed ({type(exc).__name__}); no hint this time. Continue with "
                "peek_code_region or explore_code.", m, [], False, [failed],
            )
        answer = (answer or "").strip()
        if not answer:
            m.error_type = "tool_error"
            return ToolResult("The hint model returned an empty answer; no hint this time.",
                              m, [], False, [call])
        if len(answer) > HINT_MAX_CHARS:
            answer = answer[:HINT_MAX_CHARS].rstrip() + " …[hint cut]"
        m.result_count = 1
        head = f"Hint on {rel} lines {start}-{end} (an explanation of the snippet, not an answer to the task):"
        return ToolResult("\n".join([*notes, head, answer]), m, [], False, [call])

    # ------------------------------------------------------------------ CON

    def _conclude(self, m: ToolMetrics, content: str, proceed_to_finalize: bool,
                  title: str | None = None, scope_description: str | None = None) -> ToolResult:
        n = len(self.state.conclusions) + 1
        title = " ".join((title or f"Conclusion {n}").split())[:MEMORY_TITLE_CHARS]
        con = Conclusion(n, title, content.strip(), scope_description, bool(proceed_to_finalize))
        self.state.conclusions.append(con)
        m.finalize = con.finalize
        if con.finalize:
            text = (f"Conclusion [{n}] {title!r} recorded. proceed_to_finalize=true: "
                    "the analysis is finalized and the session ends.")
        else:
            text = (f"Conclusion [{n}] {title!r} recorded; the analysis continues "
                    "(proceed_to_finalize=false). Stash a conclusion with "
                    "proceed_to_finalize=true when your conclusions answer the task.")
        change = {"channel": "conclusion", "op": "add", "id": n, "title": title,
                  "content": con.content, "scope": scope_description, "finalize": con.finalize}
        return ToolResult(text, m, [change], finalize=con.finalize)


# --------------------------------------------------------------------------- helpers


def parse_code_range(text: str, n_lines: int) -> tuple[int, int, list[str]]:
    """A code range such as ``12-30``, ``L12-L30``, ``12:30``, ``12 to 30`` or ``42`` as
    clamped 1-based inclusive lines, with notes on any adjustment; ToolError if unreadable."""
    raw = str(text).strip()
    match = re.fullmatch(
        r"(?:lines?\s*)?L?(\d+)\s*(?:-|–|:|\.\.|to|,)\s*L?(\d+)|(?:lines?\s*)?L?(\d+)", raw, re.I
    )
    if match is None:
        raise ToolError(f"code_range must look like START-END (e.g. 120-145); got {raw[:40]!r}.")
    try:
        if match.group(3):
            start = end = int(match.group(3))
        else:
            start, end = int(match.group(1)), int(match.group(2))
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
        raise ToolError(
            f"code_range holds a number too large to be a line number; got {raw[:40]!r}…"
        ) from None
    notes: list[str] = []
    if end < start:
        start, end = end, start
        notes.append(f"(code_range reversed to {start}-{end})")
    if start > n_lines:
        raise ToolError(f"code_range {raw} starts after the last line; the file has {n_lines} lines.")
    if start < 1:
        start = 1
        notes.append("(code_range starts at line 1)")
    if end > n_lines:
        end = n_lines
        notes.append(f"(code_range clamped to the last line, {n_lines})")
    return start, end, notes


def hint_messages(file_path: str, start: int, end: int, language: str, snippet: str,
                  confusion: str, tried: str | None) -> list[dict[str, str]]:
    """The chat messages for the hint model, from ``prompts/hint.txt`` (system --- user)."""
    template = (config.PROMPTS / "hint.txt").read_text(encoding="utf-8")
    system, _, user = template.partition("\n---\n")
    values = {
        "file_path": file_path, "start_line": str(start), "end_line": str(end),
        "language": language, "snippet": snippet, "confusion": confusion.strip(),
        "tried": (tried or "").strip() or "(nothing stated)",
    }
    user = re.sub(r"\{(\w+)\}", lambda mm: values.get(mm.group(1), mm.group(0)), user)
    return [{"role": "system", "content": system.strip()}, {"role": "user", "content": user.strip()}]


_CALL_TYPES = {
    "python": {"call": "function"},
    "js": {"call_expression": "function", "new_expression": "constructor"},
    "rust": {"call_expression": "function", "macro_invocation": "macro"},
}


def _calls_in(node: ts.Node, language: str, cap: int = 25) -> list[str]:
    """Callee names inside a node, in order of first appearance (iterative walk)."""
    family = "js" if language in ("typescript", "tsx", "javascript") else language
    types = _CALL_TYPES.get(family, {})
    found: dict[str, None] = {}
    cursor = node.walk()
    visited_children = False
    while True:
        if not visited_children:
            cur = cursor.node
            fld = types.get(cur.type) if cur is not None else None
            if fld is not None:
                target = cur.child_by_field_name(fld)
                if target is not None:
                    name = " ".join((target.text or b"").decode("utf-8", "replace").split())
                    if cur.type == "macro_invocation":
                        name += "!"
                    elif cur.type == "new_expression":
                        name = "new " + name
                    if len(name) <= 60:
                        found.setdefault(name)
                        if len(found) >= cap:
                            break
            if cursor.goto_first_child():
                continue
        if cursor.goto_next_sibling():
            visited_children = False
            continue
        if not cursor.goto_parent() or cursor.node == node:
            break
        visited_children = True
    return list(found)


# --------------------------------------------------------------------------- CLI


def _open_world(spec: str, hard_links: str = "inside") -> World:
    """A folder path as a World (with the hard-link policy ``hard_links``), or a manifest
    world by name (fetched if needed)."""
    path = Path(spec)
    if path.is_dir():
        return World(path, hard_links=hard_links)
    from adakit.apparatus.world import open_world

    return open_world(spec, progress=sys.stderr.isatty())


def parse_cli_params(tokens: list[str]) -> dict[str, str]:
    """``--name value`` / ``--name=value`` pairs (dashes in names become underscores)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--"):
            raise SystemExit(f"expected --param value, got {tok!r}")
        name, eq, value = tok[2:].partition("=")
        name = name.replace("-", "_")
        if not eq:
            if i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                value = tokens[i + 1]
                i += 1
            else:
                value = "true"
        out[name] = value
        i += 1
    return out


def _cli_tool(args: argparse.Namespace) -> int:
    try:
        world = _open_world(args.world, args.hard_links)
    except (KeyError, FileNotFoundError, ValueError) as exc:  # a mistyped world: one line
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    name = args.tool
    if name.upper() in {v for v in TOOL_ABBR.values()}:
        name = next(k for k, v in TOOL_ABBR.items() if v == name.upper())
    params = parse_cli_params(list(args.params))
    index = CodeIndex(world)
    if name == "explore_code" and params.get("action_type", "") != "go_to_next_block":
        index.build(progress=sys.stderr.isatty())
    toolbox = Toolbox(world, index=index)
    result = toolbox.execute(name, params)
    index.save()  # files parsed for this call are not parsed again by the next one
    print(result.text)
    if not args.quiet:
        print("---")
        print(json.dumps(result.metrics.model_dump(exclude_defaults=True)))
        for change in result.state_changes:
            print(json.dumps(change))
    return 1 if result.metrics.error_type else 0


def register_cli(sub: Any) -> None:
    """``adakit tool WORLD TOOL --param value ...``: one tool call from the shell."""
    p = sub.add_parser(
        "tool",
        help="run one of Ada's tools against a world and print the observation and metrics",
        description="Run one tool call. WORLD is a world name from the manifest or a folder; "
        "TOOL a tool name or its abbreviation (" + ", ".join(f"{v}={k}" for k, v in TOOL_ABBR.items())
        + "). Parameters follow as --name value.",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print only the observation")
    p.add_argument(
        "--hard-links", choices=HARD_LINK_POLICIES, default="inside",
        help="for a folder WORLD: read files with several hard links only when all lie inside "
        "it (inside, the default) or always (any: trees a package manager links from a store)",
    )
    p.add_argument("world", help="world name or folder path")
    p.add_argument("tool", help="tool name or abbreviation")
    p.add_argument("params", nargs=argparse.REMAINDER, help="--param value pairs")
    p.set_defaults(func=_cli_tool)
