"""The code index behind Ada's navigation tools, built with tree-sitter.

:class:`CodeIndex` gives, for a :class:`~adakit.apparatus.world.World`:

- per-file outlines: classes, functions, methods, Rust impl/trait/enum/struct/mod/macro,
  TypeScript interfaces/enums/type aliases/namespaces, with 1-based inclusive line ranges
  that include decorators, attributes and ``export``, a one-line signature and nesting;
- a repository-wide definitions index (name -> symbols) in two tiers, both cached on disk: a
  lexical scan of every file for the names it may define (what a cold start builds, at ctags
  speed), and the symbols of parsed files (filled per file when a query needs it, or for all
  files at once with ``build(parse=True)``);
- references by name: a byte prefilter picks candidate files, which are parsed so that only
  identifiers count (never text in comments or strings). A parsed file also keeps its
  vocabulary (:func:`vocabulary`), so a search for a word reads only the files that hold
  it. A file whose top-level layout is known (:func:`ref_layout`, kept with its symbols) is
  parsed only over the top-level statements that hold a hit. Matching is by name, not by
  type resolution, and the tools say so.

Python, TypeScript (TS and TSX), JavaScript and Rust are understood, with our own queries
(compiled once per language and process); Cython (``.pyx``, ``.pxd``, ``.pxi``) by patterns
(:func:`cython_symbols`: no Cython grammar installs offline), with references read by a lexer
(:mod:`~adakit.apparatus.cython_lexer`). Files with syntax errors are still indexed (tree-sitter
recovers) and are flagged with the lines where errors start.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import multiprocessing
import os
import re
import stat
import threading
import time
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Literal

import tree_sitter as ts

from adakit import config
from adakit.apparatus import cython_lexer
from adakit.apparatus.world import MAX_FILE_BYTES, SandboxError, World

#: Bumped whenever the symbol extraction changes, so stale on-disk indexes are ignored.
INDEX_FORMAT = 8

#: File extension -> grammar key.
GRAMMAR_OF_EXT: dict[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".js": "javascript",
    ".jsx": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".rs": "rust",
    ".pyx": "cython",
    ".pxd": "cython",
    ".pxi": "cython",
}

SIGNATURE_CHARS = 120
REF_TEXT_CHARS = 120

#: Kinds that contain methods (a function directly inside one of these is a method).
_MEMBER_HOSTS = {"class", "impl", "trait", "interface"}
#: Kinds listed in outlines (variables/constants only go to the definitions index and a
#: one-line summary).
VALUE_KINDS = frozenset({"variable", "const", "static"})
#: Ordering of definition kinds: primary declarations before impl blocks and values.
_KIND_RANK = {
    "class": 0, "struct": 0, "enum": 0, "trait": 0, "interface": 0, "union": 0, "type": 1,
    "function": 1, "method": 1, "namespace": 1, "mod": 1, "macro": 1, "impl": 3,
    "const": 2, "static": 2, "variable": 2,
}

# --------------------------------------------------------------------------- queries

_PY_DEFS = """
(class_definition name: (identifier) @name) @def.class
(function_definition name: (identifier) @name) @def.function
(expression_statement (assignment left: (identifier) @name)) @def.variable
"""

_JS_COMMON = """
(function_declaration name: (identifier) @name) @def.function
(generator_function_declaration name: (identifier) @name) @def.function
(method_definition name: (_) @name) @def.method
(lexical_declaration
  (variable_declarator name: (identifier) @name
                       value: [(arrow_function) (function_expression)])) @def.function
(variable_declaration
  (variable_declarator name: (identifier) @name
                       value: [(arrow_function) (function_expression)])) @def.function
(program (lexical_declaration (variable_declarator name: (identifier) @name)) @def.variable)
(program (export_statement
  declaration: (lexical_declaration (variable_declarator name: (identifier) @name)) @def.variable))
"""

_JS_DEFS = _JS_COMMON + """
(class_declaration name: (identifier) @name) @def.class
(field_definition property: (property_identifier) @name
                  value: [(arrow_function) (function_expression)]) @def.method
"""

_TS_DEFS = _JS_COMMON + """
(class_declaration name: (type_identifier) @name) @def.class
(abstract_class_declaration name: (type_identifier) @name) @def.class
(abstract_method_signature name: (_) @name) @def.method
(public_field_definition name: (property_identifier) @name
                         value: [(arrow_function) (function_expression)]) @def.method
(interface_declaration name: (type_identifier) @name) @def.interface
(enum_declaration name: (identifier) @name) @def.enum
(type_alias_declaration name: (type_identifier) @name) @def.type
(internal_module name: (_) @name) @def.namespace
(module name: (_) @name) @def.namespace
(function_signature name: (identifier) @name) @def.function
"""

_RUST_DEFS = """
(function_item name: (identifier) @name) @def.function
(function_signature_item name: (identifier) @name) @def.function
(struct_item name: (type_identifier) @name) @def.struct
(enum_item name: (type_identifier) @name) @def.enum
(union_item name: (type_identifier) @name) @def.union
(trait_item name: (type_identifier) @name) @def.trait
(impl_item type: (_) @name) @def.impl
(mod_item name: (identifier) @name) @def.mod
(macro_definition name: (identifier) @name) @def.macro
(type_item name: (type_identifier) @name) @def.type
(const_item name: (identifier) @name) @def.const
(static_item name: (identifier) @name) @def.static
"""

#: Node types that hold an identifier, per grammar family (what a reference can be).
_IDENT_TYPES = {
    "python": frozenset({"identifier"}),
    "js": frozenset(
        {
            "identifier",
            "property_identifier",
            "type_identifier",
            "shorthand_property_identifier",
            "shorthand_property_identifier_pattern",
            "private_property_identifier",
        }
    ),
    "rust": frozenset(
        {"identifier", "type_identifier", "field_identifier", "shorthand_field_identifier"}
    ),
}

#: Wrapper nodes whose start belongs to the wrapped definition (decorators, export, declare).
_WRAPPERS = {
    "python": frozenset({"decorated_definition"}),
    "js": frozenset({"export_statement", "ambient_declaration"}),
    "rust": frozenset(),
}
#: Sibling nodes written just before a definition that belong to it.
_LEADING = {
    "python": frozenset(),
    "js": frozenset({"decorator"}),
    "rust": frozenset({"attribute_item"}),
}
_COMMENTS = frozenset({"comment", "line_comment", "block_comment"})
#: Identifiers never offered as a name to look up: the receiver of a method.
_RECEIVERS = frozenset({"self", "cls"})
#: Words :meth:`CodeIndex.words_on_line` leaves out (the legacy ``name_hints: line``).
_LINE_KEYWORDS = frozenset({
    "def", "class", "return", "self", "import", "from", "if", "else", "for", "in", "not", "and",
    "or", "None", "True", "False", "fn", "let", "pub", "const", "function", "new", "this", "mut",
    "use", "impl", "async", "await", "export", "is", "while", "with", "as", "elif", "try", "except"})

#: Where definitions can occur, for grammars whose definitions are statements: the walk
#: descends only into these containers (expression subtrees, most of any tree, are skipped)
#: and runs the definitions query at the candidate nodes it meets. Rust items declared inside
#: expressions (a closure or a call argument) are therefore not listed; they are rare and local.
#: JavaScript/TypeScript define functions inside expressions all the time (callbacks, object
#: literals), so their query runs over the whole tree instead.
_WALK = {
    "python": (
        frozenset(
            {
                "module", "block", "decorated_definition", "function_definition",
                "class_definition", "if_statement", "elif_clause", "else_clause",
                "for_statement", "while_statement", "try_statement", "except_clause",
                "except_group_clause", "finally_clause", "with_statement", "match_statement",
                "case_clause",
            }
        ),
        frozenset({"function_definition", "class_definition", "expression_statement"}),
        frozenset({"expression_statement"}),  # module-level only
    ),
    "rust": (
        frozenset(
            {
                "source_file", "mod_item", "declaration_list", "impl_item", "trait_item",
                "function_item", "block", "foreign_mod_item", "unsafe_block", "const_block",
                "const_item", "static_item",
            }
        ),
        frozenset(
            {
                "function_item", "function_signature_item", "struct_item", "enum_item",
                "union_item", "trait_item", "impl_item", "mod_item", "macro_definition",
                "type_item", "const_item", "static_item",
            }
        ),
        frozenset(),
    ),
}

_IMPORT_TYPES = {
    "python": frozenset({"import_statement", "import_from_statement", "future_import_statement"}),
    "js": frozenset({"import_statement", "import_specifier", "namespace_import", "import_clause"}),
    "rust": frozenset({"use_declaration", "extern_crate_declaration"}),
}
_DEF_NODE_TYPES = {
    "python": frozenset({"function_definition", "class_definition"}),
    "js": frozenset(
        {
            "function_declaration",
            "generator_function_declaration",
            "class_declaration",
            "abstract_class_declaration",
            "method_definition",
            "abstract_method_signature",
            "interface_declaration",
            "enum_declaration",
            "type_alias_declaration",
            "internal_module",
            "variable_declarator",
            "public_field_definition",
            "field_definition",
            "function_signature",
            "method_signature",
        }
    ),
    "rust": frozenset(
        {
            "function_item",
            "function_signature_item",
            "struct_item",
            "enum_item",
            "union_item",
            "trait_item",
            "mod_item",
            "macro_definition",
            "type_item",
            "const_item",
            "static_item",
            "enum_variant",
            "field_declaration",
        }
    ),
}


def _family(grammar: str) -> str:
    return "js" if grammar in ("typescript", "tsx", "javascript") else grammar


@dataclass
class _Grammar:
    key: str
    family: str
    language: ts.Language
    parser: ts.Parser
    defs_source: str

    @cached_property
    def defs(self) -> ts.Query:
        """The definitions query, compiled when first used (a reference search, which only
        parses, never needs it; compiling takes milliseconds)."""
        return ts.Query(self.language, self.defs_source)


_GRAMMARS: dict[str, _Grammar] = {}
_GRAMMAR_LOCK = threading.Lock()


def grammar(key: str) -> _Grammar:
    """The parser and compiled queries of a grammar (built once per process)."""
    g = _GRAMMARS.get(key)
    if g is not None:
        return g
    with _GRAMMAR_LOCK:
        g = _GRAMMARS.get(key)
        if g is None:
            g = _GRAMMARS[key] = _load_grammar(key)
    return g


def _load_grammar(key: str) -> _Grammar:
    if key == "python":
        import tree_sitter_python as mod

        lang, query = ts.Language(mod.language()), _PY_DEFS
    elif key in ("typescript", "tsx"):
        import tree_sitter_typescript as mod

        raw = mod.language_typescript() if key == "typescript" else mod.language_tsx()
        lang, query = ts.Language(raw), _TS_DEFS
    elif key == "javascript":
        import tree_sitter_javascript as mod

        lang, query = ts.Language(mod.language()), _JS_DEFS
    elif key == "rust":
        import tree_sitter_rust as mod

        lang, query = ts.Language(mod.language()), _RUST_DEFS
    elif key == "cython":
        # no Cython grammar installs offline: definitions come from patterns
        # (cython_symbols); the Python grammar parses the file for references only
        import tree_sitter_python as mod

        lang, query = ts.Language(mod.language()), _PY_DEFS
    else:
        raise KeyError(f"no grammar {key!r}; known: {sorted(set(GRAMMAR_OF_EXT.values()))}")
    return _Grammar(key, _family(key), lang, ts.Parser(lang), query)


def grammar_of(rel: str) -> str | None:
    """The grammar key for a path by extension, or None when the language is not indexed."""
    dot = rel.rfind(".")
    return GRAMMAR_OF_EXT.get(rel[dot:].lower()) if dot >= 0 else None


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class Symbol:
    """A definition: 1-based inclusive lines (with decorators/attributes/export)."""

    name: str
    kind: str
    file: str
    start_line: int
    end_line: int
    signature: str
    parent: str | None = None
    depth: int = 0
    name_line: int = 0

    @property
    def qualname(self) -> str:
        """Name qualified by its enclosing symbols, joined with dots (``Scaffold.route``)."""
        return f"{self.parent}.{self.name}" if self.parent else self.name

    @property
    def lines(self) -> int:
        return self.end_line - self.start_line + 1

    def as_tuple(self) -> list[Any]:
        return [self.name, self.kind, self.start_line, self.end_line, self.signature,
                self.parent, self.depth, self.name_line]


@dataclass
class FileOutline:
    """The symbols of one file in document order, and whether the parse hit syntax errors."""

    file: str
    language: str | None
    symbols: list[Symbol]
    has_errors: bool = False
    error_lines: list[int] = field(default_factory=list)
    line_count: int = 0

    @property
    def supported(self) -> bool:
        return self.language is not None


@dataclass(frozen=True, slots=True)
class Ref:
    """One occurrence of a name as an identifier (name matching)."""

    file: str
    line: int
    column: int
    kind: str
    text: str


@dataclass
class RefSearch:
    """The outcome of a reference search: shown refs, totals, and what was searched."""

    name: str
    refs: list[Ref]
    total: int
    per_file: dict[str, int]
    files_searched: int
    candidate_files: int
    seconds: float = 0.0


@dataclass
class BuildStats:
    """What one :meth:`CodeIndex.build` did. ``scanned`` files had their definition names
    read lexically, ``parsed`` ones were parsed; ``symbols`` and ``with_errors`` count the
    files parsed so far (all of them after ``build(parse=True)``)."""

    files: int = 0
    scanned: int = 0
    parsed: int = 0
    reused: int = 0
    skipped: int = 0
    names: int = 0
    symbols: int = 0
    with_errors: int = 0
    complete: bool = False
    seconds: float = 0.0
    cache_path: str | None = None
    workers: int = 1
    #: CPU time of this process during the build, and of the worker processes (if any)
    cpu_seconds: float = 0.0
    worker_cpu_seconds: float = 0.0


# --------------------------------------------------------------------------- extraction


def _end_line(node: ts.Node) -> int:
    row, col = node.end_point
    if col == 0 and row > node.start_point.row:
        row -= 1
    return row + 1


def _collapse(text: str, cap: int = SIGNATURE_CHARS) -> str:
    text = " ".join(text.split())
    if "( " in text or " )" in text or "[ " in text or " ]" in text or ",)" in text:
        text = text.replace("( ", "(").replace(" )", ")").replace("[ ", "[").replace(" ]", "]")
        text = text.replace(",)", ")")
    if len(text) > cap:
        text = text[: cap - 1].rstrip() + "…"
    return text


def _impl_name(type_node: ts.Node) -> str:
    """The bare type name of an impl target (``Foo`` for ``Foo<T>`` or ``a::Foo``)."""
    node = type_node
    for _ in range(4):
        if node.type == "generic_type":
            inner = node.child_by_field_name("type")
        elif node.type == "scoped_type_identifier":
            inner = node.child_by_field_name("name")
        elif node.type in ("reference_type", "pointer_type"):
            inner = node.child_by_field_name("type")
        else:
            break
        if inner is None:
            break
        node = inner
    return (node.text or b"").decode("utf-8", "replace")


def _header_end(g: _Grammar, node: ts.Node, name_node: ts.Node, kind: str) -> int:
    """Byte offset where the one-line signature of a definition ends."""
    if kind in VALUE_KINDS or kind == "type":
        return node.end_byte
    if node.type in ("lexical_declaration", "variable_declaration"):
        decl = name_node.parent
        value = decl.child_by_field_name("value") if decl is not None else None
        body = value.child_by_field_name("body") if value is not None else None
        return body.start_byte if body is not None else node.end_byte
    if node.type in ("public_field_definition", "field_definition"):
        value = node.child_by_field_name("value")
        body = value.child_by_field_name("body") if value is not None else None
        return body.start_byte if body is not None else node.end_byte
    body = node.child_by_field_name("body")
    if body is None:
        return node.end_byte
    if g.family == "python":
        # stop at the ':' before the body so trailing comments are not part of it
        colon = body.prev_sibling
        while colon is not None and colon.type != ":":
            colon = colon.prev_sibling
        if colon is not None:
            return colon.start_byte
    return body.start_byte


def _start_node(g: _Grammar, node: ts.Node) -> ts.Node:
    """The node where a definition starts once decorators, export or attributes are counted."""
    wrappers = _WRAPPERS[g.family]
    start = node
    parent = node.parent
    while parent is not None and parent.type in wrappers:
        start = parent
        parent = parent.parent
    leading = _LEADING[g.family]
    if leading:
        sib = start.prev_named_sibling
        while sib is not None and (sib.type in leading or sib.type in _COMMENTS):
            if sib.type in leading:
                start = sib
            sib = sib.prev_named_sibling
    return start


def _definition_matches(g: _Grammar, cursor: ts.QueryCursor, root: ts.Node) -> list:
    """Matches of the definitions query: over the whole tree, or only at the statement-level
    candidates of an iterative walk (see ``_WALK``)."""
    walk = _WALK.get(g.family)
    if walk is None:
        return cursor.matches(root)
    descend, roots, top_only = walk
    cursor.set_max_start_depth(0)
    out: list = []
    stack = [(root, True)]
    while stack:
        node, top = stack.pop()
        t = node.type
        if t in roots and (top or t not in top_only):
            out.extend(cursor.matches(node))
        if t in descend:
            children = node.named_children
            stack.extend((c, node is root) for c in reversed(children))
    return out


def extract_symbols(g: _Grammar, tree: ts.Tree, data: bytes) -> list[tuple]:
    """Definition tuples ``(name, kind, start, end, signature, parent, depth, name_line)``."""
    cursor = ts.QueryCursor(g.defs)
    found: dict[tuple[int, str], tuple[ts.Node, str, ts.Node]] = {}
    for _, caps in _definition_matches(g, cursor, tree.root_node):
        name_nodes = caps.get("name")
        if not name_nodes:
            continue
        node = kind = None
        for cap, nodes in caps.items():
            if cap.startswith("def."):
                node, kind = nodes[0], cap[4:]
                break
        if node is None:
            continue
        name_node = name_nodes[0]
        if kind == "impl":
            name = _impl_name(name_node)
        else:
            name = (name_node.text or b"").decode("utf-8", "replace")
        key = (node.start_byte, name)
        prev = found.get(key)
        # an arrow-function const is also matched as a plain variable: keep the function
        if prev is None or (prev[1] in VALUE_KINDS and kind not in VALUE_KINDS):
            found[key] = (node, kind, name_node)
    items = sorted(found.items(), key=lambda kv: (kv[1][0].start_byte, -kv[1][0].end_byte))
    out: list[tuple] = []
    stack: list[tuple[int, str, str]] = []  # (end_byte, qualname, kind)
    for (_, name), (node, kind, name_node) in items:
        while stack and stack[-1][0] <= node.start_byte:
            stack.pop()
        parent = stack[-1] if stack else None
        if kind == "function" and parent is not None and parent[2] in _MEMBER_HOSTS:
            kind = "method"
        start = _start_node(g, node)
        sig_end = _header_end(g, node, name_node, kind)
        raw = data[node.start_byte : min(sig_end, node.start_byte + 4 * SIGNATURE_CHARS)]
        signature = _collapse(raw.decode("utf-8", "replace"))
        if kind == "macro":
            signature = f"macro_rules! {name}"
        elif g.family == "python":
            signature = signature.rstrip(":").rstrip()
        else:
            signature = signature.rstrip("{;").rstrip()
        qual = f"{parent[1]}.{name}" if parent else name
        out.append(
            (
                name,
                kind,
                start.start_point.row + 1,
                _end_line(node),
                signature,
                parent[1] if parent else None,
                len(stack),
                name_node.start_point.row + 1,
            )
        )
        stack.append((node.end_byte, qual, kind))
    return out


def error_lines(root: ts.Node, cap: int = 10) -> list[int]:
    """1-based lines where syntax errors start (iterative walk, only into erroneous subtrees)."""
    if not root.has_error:
        return []
    out: set[int] = set()
    stack = [root]
    while stack and len(out) < cap:
        node = stack.pop()
        if node.is_error or node.is_missing:
            out.add(node.start_point.row + 1)
            continue
        if node.has_error:
            stack.extend(reversed(node.children))
    return sorted(out)


#: Top-level definitions whose bodies (their ``body`` field) :func:`ref_layout` splits, per
#: grammar family, after unwrapping a decorator or an ``export``.
_CONTAINERS = {
    "python": frozenset({"class_definition", "function_definition"}),
    "js": frozenset({"class_declaration", "abstract_class_declaration"}),
    "rust": frozenset({"impl_item", "mod_item", "trait_item"}),
}
_UNWRAP = {"decorated_definition": "definition", "export_statement": "declaration"}
#: A top-level group smaller than this is parsed whole.
SPLIT_MIN_BYTES = 4096

#: Kinds of the units of a layout.
UNIT_TOP, UNIT_INNER, UNIT_TAIL = 0, 1, 2


#: First bytes with which a JavaScript/TypeScript statement can follow any other without being
#: read as its continuation: a statement without a semicolon ends (automatic semicolon
#: insertion) only where the next token cannot continue it, so ``(``, ``[``, a template, an
#: operator or a comment could join it to whatever statement a partial parse puts before it.
_JS_SAFE_START = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_$@#{'\"")
_JS_INFIX_WORD = re.compile(rb"(?:in|instanceof)(?![A-Za-z0-9_$])")


def _can_start_unit(node: ts.Node, data: bytes, family: str) -> bool:
    """Whether ``node`` may begin a unit that a partial parse puts after another one."""
    if family != "js":
        return True  # Python statements end at a line's end, Rust items are self-delimiting
    head = data[node.start_byte : node.start_byte + 11]
    return bool(head) and head[0] in _JS_SAFE_START and not _JS_INFIX_WORD.match(head)


def _line_groups(nodes: list[ts.Node], data: bytes, family: str) -> list[tuple[int, int]]:
    """(row, byte) where each group of nodes that share lines starts, at its line's start;
    a node that cannot begin a unit (:func:`_can_start_unit`) stays in the group before it."""
    out: list[tuple[int, int]] = []
    last_row = -1
    for node in nodes:
        start = node.start_point
        if start.row > last_row and (not out or _can_start_unit(node, data, family)):
            out.append((start.row, node.start_byte - start.column))
        last_row = max(last_row, node.end_point.row)
    return out


def _split_container(
    node: ts.Node, family: str, data: bytes
) -> tuple[list[tuple[int, int]], tuple[int, int] | None] | None:
    """The line groups of a top-level definition's body and where its tail (the lines after
    the body's last statement) starts, or None when the body cannot be split on lines."""
    while node.type in _UNWRAP:
        inner = node.child_by_field_name(_UNWRAP[node.type])
        if inner is None:
            return None
        node = inner
    if node.type not in _CONTAINERS.get(family, ()):
        return None
    body = node.child_by_field_name("body")
    if body is None:
        return None
    kids = body.named_children
    if len(kids) < 2 or kids[0].start_point.row <= node.start_point.row:
        return None
    first_row, last_row = kids[0].start_point.row, max(k.end_point.row for k in kids)
    # everything else (braces, a comment the parser hung on the definition) must sit on the
    # header's or the tail's lines
    others = [t for t in body.children if not t.is_named]
    others += [t for t in node.children if t.start_byte != body.start_byte or t.end_byte != body.end_byte]
    for tok in others:
        if tok.end_point.row >= first_row and tok.start_point.row <= last_row:
            return None
    inner = _line_groups(kids, data, family)
    if len(inner) < 2:
        return None
    tail = None
    if node.end_point.row > last_row:
        nl = data.find(b"\n", max(k.end_byte for k in kids))
        if nl >= 0:
            tail = (last_row + 1, nl + 1)
    return inner, tail


def ref_layout(root: ts.Node, family: str, data: bytes) -> list[int] | None:
    """Where the units of an error-free tree start, for reference searches: a flat list
    ``[row, byte, kind, row, byte, kind, ...]``, each unit running from the first byte of its
    line to the next unit (the last one to the end of the file).

    Units of kind ``UNIT_TOP`` are groups of top-level children that share lines. A top-level
    definition of :data:`SPLIT_MIN_BYTES` or more (a Python class or function, a
    JavaScript/TypeScript class, a Rust impl, mod or trait) is split further: its header
    stays a ``UNIT_TOP``, the statements of its body become ``UNIT_INNER`` units (one
    per group sharing lines), and the lines after them a ``UNIT_TAIL``. Parsing some units
    alone (tree-sitter's included ranges; an inner unit with its header and tail) gives
    exactly the subtrees the whole file's parse has there, which
    :meth:`CodeIndex.search_references` relies on to parse only what holds a hit. None for a
    tree with syntax errors (error recovery is not local) or without children.
    """
    if root.has_error:
        return None
    fam = "python" if family == "cython" else family
    kids = root.children
    tops = _line_groups(kids, data, fam)
    if not tops:
        return None
    out: list[int] = []
    k = 0
    for g, (row, byte) in enumerate(tops):
        end = tops[g + 1][1] if g + 1 < len(tops) else len(data)
        members = []
        while k < len(kids) and (g + 1 >= len(tops) or kids[k].start_byte < tops[g + 1][1]):
            members.append(kids[k])
            k += 1
        out += (row, byte, UNIT_TOP)
        if len(members) != 1 or end - byte < SPLIT_MIN_BYTES:
            continue
        split = _split_container(members[0], fam, data)
        if split is None:
            continue
        inner, tail = split
        for irow, ibyte in inner:
            out += (irow, ibyte, UNIT_INNER)
        if tail is not None and tail[1] < end:
            out += (tail[0], tail[1], UNIT_TAIL)
    return out


# --------------------------------------------------------------------------- lexical tier
#
# A cold start does not parse every file. It scans each file's bytes for the names the file
# may define (regular expressions, ctags-fast) and keeps name -> files. A definitions query
# then parses only the files that may define the name and reads the exact symbols from their
# trees. The scanners over-approximate on purpose: every name the tree-sitter extraction lists
# for a file must be among the file's scanned names (tests check this on the fixtures and the
# real worlds); extra names (from comments, strings, calls) only cost a parse at query time.
# Names are captured inside look-aheads so that one keyword cannot swallow the next
# (``const fn f``, ``class`` at the end of a comment followed by ``def f``).

_ID = rb"[A-Za-z_\x80-\xff][A-Za-z0-9_\x80-\xff]*"
_JS_ID = rb"[A-Za-z_$\x80-\xff][A-Za-z0-9_$\x80-\xff]*+"
_PY_ASSIGN = rb"[ \t]*(?::[^\n=]*)?=(?!=)"


def _after(keyword: bytes, name: bytes = _ID, gap: bytes = rb"\s+") -> re.Pattern[bytes]:
    # starts with the literal keyword so the regex engine can skip to it quickly; a keyword
    # inside a longer word only adds a harmless extra name
    return re.compile(re.escape(keyword) + gap + rb"(?=(" + name + rb"))")


#: Per grammar family: (pattern with one group, whether the group is a header whose every
#: identifier counts). Several simple patterns run faster than one alternation.
_SCANNERS: dict[str, tuple[tuple[re.Pattern[bytes], bool], ...]] = {
    "python": (
        (_after(b"def"), False),
        (_after(b"class"), False),
        # module-level assignments: at the start of a line, or after ';' on one
        (re.compile(rb"\n(?=(" + _ID + rb")" + _PY_ASSIGN + rb")"), False),
        (re.compile(rb"\A(?=(" + _ID + rb")" + _PY_ASSIGN + rb")"), False),
        (re.compile(rb";[ \t]*(?=(" + _ID + rb")" + _PY_ASSIGN + rb")"), False),
    ),
    "rust": tuple(
        (_after(kw, rb"(?:r#)?" + _ID), False)
        for kw in (b"fn", b"struct", b"enum", b"union", b"trait", b"type", b"mod", b"const",
                   b"static", b"mut")
    ) + (
        (_after(b"macro_rules!", gap=rb"\s*"), False),
        (re.compile(rb"impl\b(?=([^{;]*))"), True),
    ),
    "js": tuple(
        (_after(kw, rb"(?:" + _JS_ID + rb"(?:\." + _JS_ID + rb")*|'[^'\n]*'|\"[^\"\n]*\")",
                rb"[\s*]+"), False)
        for kw in (b"function", b"class", b"interface", b"enum", b"type", b"namespace",
                   b"module")
    ) + (
        # any name before '(' or '<' (methods, calls), or before '=' after an optional type
        # (fields, declarators); quoted, [computed] and numeric method names before '('
        (re.compile(rb"(?<![A-Za-z0-9_$\x80-\xff])(#?" + _JS_ID
                    + rb")(?=\s*+(?:[(<]|[?!]?\s*+(?::[^;\n]*?)?=(?![=>])))"), False),
        (re.compile(rb"('[^'\n]*+'|\"[^\"\n]*+\"|\[[^\]\n]*+\]|[0-9][A-Za-z0-9_.]*+)"
                    rb"(?=\s*+[(<])"), False),
    ),
    "cython": (
        *((_after(kw), False) for kw in (b"def", b"class", b"struct", b"union", b"enum",
                                          b"fused", b"cppclass")),
        # cdef / cpdef functions and extern declarations: any name before '('
        (re.compile(rb"(" + _ID + rb")(?=[ \t]*\()"), False),
        # ctypedef aliases: every name on the line (the alias is among them)
        (re.compile(rb"ctypedef\b(?=([^\n]*))"), True),
    ),
}
_HEADER_NAMES = re.compile(rb"(?:r#)?" + _ID)


def definition_names(data: bytes, family: str) -> frozenset[str]:
    """Every name ``data`` may define, found lexically (a superset of what its parse lists)."""
    found: set[bytes] = set()
    for pattern, header in _SCANNERS.get(family, ()):
        if header:
            for text in pattern.findall(data):
                found.update(_HEADER_NAMES.findall(text))
        else:
            found.update(pattern.findall(data))
    found.discard(b"")
    return frozenset(n.decode("utf-8", "replace") for n in found)


# --------------------------------------------------------------------------- Cython
#
# No tree-sitter grammar for Cython installs offline (tree-sitter-language-pack fetches its
# grammars from the network on first use), so Cython files (.pyx, .pxd, .pxi) are indexed by
# patterns over logical lines: a block runs until the next code line indented no deeper than
# its header, triple-quoted strings and comments do not count as code lines, and a header
# continued inside brackets is one logical line. References are read by a lexer
# (adakit.apparatus.cython_lexer); other tools that need a tree (the identifiers of a line)
# still parse the file with the Python grammar.

_CY_MODS = r"(?:(?:public|api|readonly|extern|packed|inline|final|const|nogil|noexcept)\s+)*"
_CY_TYPED = re.compile(
    r"^(?:cdef|ctypedef|cpdef)\s+" + _CY_MODS + r"(class|struct|union|enum|cppclass|fused)\s+"
    r"([A-Za-z_]\w*)")
_CY_DEF = re.compile(r"^(?:async\s+)?def\s+([A-Za-z_]\w*)")
_CY_CLASS = re.compile(r"^class\s+([A-Za-z_]\w*)")
_CY_FUNC = re.compile(r"^(?:cdef|cpdef)\s+([^=(]*?)\b([A-Za-z_]\w*)\s*\(")
_CY_CTYPEDEF = re.compile(r"^ctypedef\s+(.+)$")
_CY_CONTAINER = re.compile(r"^(?:cdef\s+extern\s+from\b.*|cdef\s*:|cdef\s+extern\s*:)$")
_CY_DECL = re.compile(r"^([^=(]*?[\w\]*&\s])\b([A-Za-z_]\w*)\s*\(")
_CY_KIND = {"class": "class", "cppclass": "class", "struct": "struct", "union": "union",
            "enum": "enum", "fused": "type"}
_CY_NOT_A_NAME = frozenset({"nogil", "noexcept", "except", "gil", "const", "with"})


def _cython_lines(data: bytes) -> list[tuple[int, int, int, str]]:
    """Logical code lines: (first row, last row, indent, text without comments), 1-based rows;
    lines inside triple-quoted strings, blank lines and comments are left out."""
    out: list[tuple[int, int, int, str]] = []
    rows = split_lines(data)
    quote: str | None = None
    pending: tuple[int, int, list[str]] | None = None  # first row, indent, parts
    depth = 0
    for i, raw in enumerate(rows, 1):
        line, k, code = raw, 0, []
        while k < len(line):
            if quote is not None:
                end = line.find(quote, k)
                if end < 0:
                    k = len(line)
                    break
                k, quote = end + 3, None
                continue
            ch = line[k]
            if ch == "#":
                break
            if line.startswith(('"""', "'''"), k):
                quote = line[k:k + 3]
                code.append('""')  # the statement starts here, where the string opens
                k += 3
                continue
            if ch in "\"'":
                end = k + 1
                while end < len(line) and line[end] != ch:
                    end += 2 if line[end] == "\\" else 1
                code.append('""')
                k = end + 1
                continue
            depth += 1 if ch in "([{" else -1 if ch in ")]}" else 0
            code.append(ch)
            k += 1
        text = "".join(code).rstrip()
        if pending is None:
            if not text.strip():
                continue
            pending = (i, len(line) - len(line.lstrip()), [text.strip()])
        else:
            pending[2].append(text.strip())
        if depth <= 0 and quote is None:
            depth = 0
            out.append((pending[0], i, pending[1], " ".join(p for p in pending[2] if p)))
            pending = None
    if pending is not None:
        out.append((pending[0], len(rows), pending[1], " ".join(pending[2])))
    return out


def _cython_symbol(text: str, in_container: bool) -> tuple[str, str] | None:
    """(name, kind) defined by one logical line, or None."""
    m = _CY_TYPED.match(text)
    if m:
        return m.group(2), _CY_KIND[m.group(1)]
    m = _CY_DEF.match(text) or _CY_CLASS.match(text)
    if m:
        return m.group(1), "class" if text.startswith("class") else "function"
    m = _CY_FUNC.match(text)
    if m and m.group(2) not in _CY_NOT_A_NAME and not m.group(1).strip().endswith(
            ("class", "struct")):
        return m.group(2), "function"
    m = _CY_CTYPEDEF.match(text)
    if m:
        body = m.group(1).rstrip(":").strip()
        ptr = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)\s*\)", body)
        if ptr:
            return ptr.group(1), "type"
        words = [w for w in re.findall(r"[A-Za-z_]\w*", re.sub(r"\[.*?\]", "", body))
                 if w not in _CY_NOT_A_NAME]
        return (words[-1], "type") if len(words) >= 2 else None
    if in_container:
        m = _CY_DECL.match(text)
        if m and m.group(2) not in _CY_NOT_A_NAME:
            return m.group(2), "function"
    return None


def cython_symbols(data: bytes) -> list[tuple]:
    """Definition tuples ``(name, kind, start, end, signature, parent, depth, name_line)`` of a
    Cython file, found by patterns (see the section comment): ``cdef``/``cpdef``/``def``
    functions (methods inside a class), ``cdef class``, ``class``, ``struct``/``union``/
    ``enum``/``fused`` and ``ctypedef`` aliases, and the function declarations of
    ``cdef extern from`` blocks."""
    lines = _cython_lines(data)
    out: list[list[Any]] = []
    # open blocks: (indent, index into out or -1 for a container, qualname, kind)
    stack: list[tuple[int, int, str, str]] = []
    decorator_start: int | None = None
    last_row = 0
    for first, last, indent, text in lines:
        while stack and indent <= stack[-1][0]:
            _, idx, _, _ = stack.pop()
            if idx >= 0:
                out[idx][3] = last_row
        if text.startswith("@"):
            decorator_start = decorator_start or first
            last_row = last
            continue
        container = bool(stack) and stack[-1][1] == -1
        found = _cython_symbol(text, container)
        opens = text.endswith(":")
        if found is not None:
            name, kind = found
            owners = [s for s in stack if s[1] >= 0]
            parent = owners[-1] if owners else None
            if kind == "function" and parent is not None and parent[3] in ("class", "struct"):
                kind = "method"
            signature = _collapse(text.rstrip(":").rstrip())
            start = decorator_start or first
            out.append([name, kind, start, last, signature, parent[2] if parent else None,
                        len(owners), first])
            if opens:
                qual = f"{parent[2]}.{name}" if parent else name
                stack.append((indent, len(out) - 1, qual, kind))
        elif opens and _CY_CONTAINER.match(text):
            stack.append((indent, -1, "", "container"))
        elif opens:
            stack.append((indent, -2, "", "block"))  # if/for/with...: nothing to name
        decorator_start = None
        last_row = last
    for _, idx, _, _ in stack:
        if idx >= 0:
            out[idx][3] = last_row
    return [tuple(s) for s in out]


def _valid_layout(rec: Any) -> list[int] | None:
    """A layout read back from the on-disk index if it has :func:`ref_layout`'s shape, else
    None (the file is then parsed whole)."""
    if not isinstance(rec, list) or not rec or len(rec) % 3:
        return None
    if not all(type(x) is int and x >= 0 for x in rec) or rec[2] != UNIT_TOP:
        return None
    starts = rec[1::3]
    if any(b <= a for a, b in zip(starts, starts[1:], strict=False)):
        return None
    if any(k not in (UNIT_TOP, UNIT_INNER, UNIT_TAIL) for k in rec[2::3]):
        return None
    return rec


def _rows_fit(data: bytes, points: list[tuple[int, int]]) -> bool:
    """Whether each (row, byte), in ascending order, is the start of that row of ``data``."""
    row = at = 0
    for want, byte in points:
        if byte < at or byte > len(data) or (byte and data[byte - 1] != 10):
            return False
        row += data.count(b"\n", at, byte)
        at = byte
        if row != want:
            return False
    return True


def _read_all(path: str, size: int) -> bytes:
    """The whole file, read with plain system calls (``size``, from a stat, is a hint)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        parts = []
        want = size + 1
        while chunk := os.read(fd, want):
            parts.append(chunk)
            want = 1 << 20
    finally:
        os.close(fd)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _read_source(path: Path) -> tuple[int, int, bytes] | None:
    """(mtime_ns, size, bytes) of a regular text file within the size limit, else None."""
    try:
        st = path.lstat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\x00" in data[:8192]:
        return None
    return st.st_mtime_ns, st.st_size, data


def _index_chunk(root: str, jobs: list[tuple[str, str]]) -> tuple[list[tuple], float]:
    """Worker: parse files and extract their symbols; also the CPU seconds it spent."""
    cpu = time.process_time()
    out = []
    for rel, key in jobs:
        got = _read_source(Path(root) / rel)
        if got is None:
            out.append((rel, None))
            continue
        mtime, size, data = got
        words = vocabulary(data)
        if key == "cython":
            out.append((rel, (mtime, size, key, False, [], cython_symbols(data), None, words)))
            continue
        g = grammar(key)
        tree = g.parser.parse(data)
        syms = extract_symbols(g, tree, data)
        out.append((rel, (mtime, size, key, tree.root_node.has_error,
                          error_lines(tree.root_node), syms,
                          ref_layout(tree.root_node, g.family, data), words)))
    return out, time.process_time() - cpu


# --------------------------------------------------------------------------- the index


@dataclass
class _Entry:
    mtime_ns: int
    size: int
    grammar: str
    symbols: list[Symbol]
    has_errors: bool
    error_lines: list[int]
    #: :func:`ref_layout` of the file's tree (None: parse the whole file for references)
    groups: list[int] | None = None
    #: :func:`vocabulary` of the file (None: a reference search reads the file)
    words: bytes | None = None


@dataclass
class _CachedTree:
    mtime_ns: int
    size: int
    tree: ts.Tree
    #: indices into the entry's top-level groups that were parsed; None: the whole file
    groups: frozenset[int] | None
    nbytes: int  # what it counts against the cache's budget


@dataclass
class _Source:
    mtime_ns: int
    size: int
    data: bytes
    lines: list[str] | None = None
    line_starts: list[int] | None = None
    #: the :class:`~adakit.apparatus.cython_lexer.CodeView` of a Cython file, once computed
    code_view: cython_lexer.CodeView | None = None


def split_lines(data: bytes) -> list[str]:
    """Lines as tree-sitter counts them (``\\n`` only), decoded with replacement."""
    text = data.decode("utf-8", "replace")
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


_WORD_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_$")
#: a word as :func:`word_hits` bounds one: a maximal run of ASCII identifier characters
_WORD_RUN = re.compile(rb"[A-Za-z0-9_$]+")
#: every byte but those of a word turned into a space (bytes.translate's table)
_WORDS_ONLY = bytes(b if b in _WORD_BYTES else 0x20 for b in range(256))


def vocabulary(data: bytes) -> bytes:
    """The distinct words of a file (maximal runs of ASCII identifier characters), sorted,
    each with a space on either side: ``b" " + name + b" " in vocabulary(data)`` exactly when
    ``word_hits(data, name)`` finds ``name`` (a name made of such characters)."""
    words = sorted(set(data.translate(_WORDS_ONLY).split()))
    return b" " + b" ".join(words) + b" " if words else b" "


def _valid_words(rec: Any) -> bytes | None:
    """A vocabulary read back from the on-disk index if it has :func:`vocabulary`'s shape
    (words of identifier characters, one space between and around them), else None (a
    reference search then reads the file)."""
    if not isinstance(rec, str) or not rec.startswith(" ") or not rec.endswith(" "):
        return None
    try:
        words = rec.encode("ascii")
    except UnicodeEncodeError:
        return None
    if words.translate(_WORDS_ONLY) != words or (words != b" " and b"  " in words):
        return None
    return words


@lru_cache(maxsize=512)
def _word_re(name: str) -> re.Pattern[bytes]:
    # starts with the literal so the regex engine can search for it quickly; the byte before
    # a match is checked by word_hits (a leading look-behind would disable that search)
    return re.compile(re.escape(name.encode("utf-8")) + rb"(?![A-Za-z0-9_$])")


def word_hits(data: bytes, name: str) -> list[int]:
    """Byte offsets where ``name`` occurs as a whole word (ASCII identifier characters)."""
    out = []
    for m in _word_re(name).finditer(data):
        start = m.start()
        if start and data[start - 1] in _WORD_BYTES:
            continue
        out.append(start)
    return out


def _same(a: ts.Node | None, b: ts.Node) -> bool:
    return a is not None and a.start_byte == b.start_byte and a.end_byte == b.end_byte


def classify(node: ts.Node, family: str) -> str | None:
    """The role of an identifier node (definition, call, import, ...), or None if the node
    is not an identifier (text in a string or comment)."""
    if family == "cython":  # parsed with the Python grammar (references only)
        family = "python"
    if node.type not in _IDENT_TYPES[family]:
        return None
    parent = node.parent
    if parent is None:
        return "reference"
    pt = parent.type
    # imports first: identifiers anywhere inside an import statement
    anc: ts.Node | None = parent
    imports = _IMPORT_TYPES[family]
    for _ in range(8 if family == "rust" else 4):
        if anc is None:
            break
        if anc.type in imports:
            return "import"
        anc = anc.parent
    if pt in _DEF_NODE_TYPES[family] and _same(parent.child_by_field_name("name"), node):
        return "definition"
    grand = parent.parent
    if family == "python":
        if pt == "call" and _same(parent.child_by_field_name("function"), node):
            return "call"
        if pt == "attribute" and _same(parent.child_by_field_name("attribute"), node):
            if grand is not None and grand.type == "call" and _same(
                grand.child_by_field_name("function"), parent
            ):
                return "call"
            return "attribute"
        if pt == "keyword_argument" and _same(parent.child_by_field_name("name"), node):
            return "keyword"
        if pt == "type" or (grand is not None and grand.type == "type"):
            return "type"
        if pt == "argument_list" and grand is not None and grand.type == "class_definition":
            return "base"
        return "reference"
    if family == "js":
        if pt in ("call_expression", "new_expression"):
            field_name = "function" if pt == "call_expression" else "constructor"
            if _same(parent.child_by_field_name(field_name), node):
                return "call"
        if pt == "member_expression" and _same(parent.child_by_field_name("property"), node):
            if grand is not None and grand.type == "call_expression" and _same(
                grand.child_by_field_name("function"), parent
            ):
                return "call"
            return "attribute"
        if pt in ("jsx_opening_element", "jsx_self_closing_element", "jsx_closing_element"):
            return "jsx"
        if pt in ("extends_clause", "implements_clause", "class_heritage"):
            return "base"
        if node.type == "type_identifier":
            return "type"
        return "reference"
    # rust
    if pt == "call_expression" and _same(parent.child_by_field_name("function"), node):
        return "call"
    if pt in ("scoped_identifier", "field_expression", "generic_function"):
        fname = {"scoped_identifier": "name", "field_expression": "field",
                 "generic_function": "function"}[pt]
        if _same(parent.child_by_field_name(fname), node):
            target = parent
            if grand is not None and grand.type == "generic_function":
                target, grand = grand, grand.parent
            if grand is not None and grand.type == "call_expression" and _same(
                grand.child_by_field_name("function"), target
            ):
                return "call"
            if pt == "field_expression":
                return "field"
            if grand is not None and grand.type == "scoped_identifier":
                return "path"
            return "reference"
        if pt == "scoped_identifier":
            return "path"
    if pt == "macro_invocation":
        return "macro"
    if pt == "scoped_type_identifier" and _same(parent.child_by_field_name("path"), node):
        return "path"
    if node.type == "type_identifier":
        return "type"
    return "reference"


def reference_at(root: ts.Node, pos: int, n: int, family: str) -> tuple[ts.Node, str] | None:
    """The identifier spanning exactly bytes ``pos`` to ``pos + n`` of a tree and its role
    (:func:`classify`), or None when those bytes are not one identifier (a longer name, text
    in a comment or a string)."""
    node = root.named_descendant_for_byte_range(pos, pos + n)
    if node is None or node.start_byte != pos or node.end_byte != pos + n:
        return None
    kind = classify(node, family)
    return None if kind is None else (node, kind)


class CodeIndex:
    """Outlines, definitions and references over one world (see the module docstring).

    The repository-wide definitions index has two tiers. :meth:`build` (called lazily)
    scans every file lexically for the names it may define; :meth:`definitions` parses only
    the files that may define the asked name (each file once) and answers from their trees.
    ``build(parse=True)`` parses every file up front, in ``workers`` processes when there are
    many. Both tiers are cached on disk and answer identically. :meth:`outline` always
    re-checks its own file's (mtime_ns, size).

    ``cython_references`` says how references in Cython files are read: ``"lexer"`` (the
    default, :mod:`~adakit.apparatus.cython_lexer`) or ``"python"`` (the Python grammar's
    tree, as adakit did before 2026-12-06; docs/deviations.md).
    """

    def __init__(
        self,
        world: World,
        cache_dir: str | Path | None = None,
        use_disk_cache: bool = True,
        workers: int | None = None,
        tree_cache_bytes: int = 32_000_000,
        cython_references: Literal["lexer", "python"] = "lexer",
    ) -> None:
        if cython_references not in ("lexer", "python"):
            raise ValueError(
                f"cython_references must be 'lexer' or 'python', not {cython_references!r}")
        self.cython_references = cython_references
        self.world = world
        self._root = str(world.root) + os.sep
        self.cache_dir = Path(cache_dir) if cache_dir else config.cache_dir() / "index"
        self.use_disk_cache = use_disk_cache
        self.workers = workers if workers is not None else min(2, os.cpu_count() or 1)
        self.tree_cache_bytes = tree_cache_bytes
        #: below these sizes a cold build parses in-process (a pool costs more than it saves)
        self.parallel_min_files = 48
        self.parallel_min_bytes = 1_500_000
        self._entries: dict[str, _Entry] = {}
        #: rel -> (mtime_ns, size, names the file may define)
        self._names: dict[str, tuple[int, int, frozenset[str]]] = {}
        #: name -> files that may define it (the lexical tier, corrected by every parse)
        self._files_of: dict[str, set[str]] = {}
        self._built = False
        self._complete = False  # every file parsed by the last build
        self._unsaved = False  # parsed entries the on-disk index does not hold yet
        self._sources: dict[str, _Source] = {}
        self._trees: OrderedDict[str, _CachedTree] = OrderedDict()
        self._tree_bytes = 0
        self._source_files: list[str] | None = None
        self.last_build: BuildStats | None = None
        self.parse_count = 0  # how many parses this index ran in-process (for tests)

    # ------------------------------------------------------------------ files

    def source_files(self) -> list[str]:
        """The world's files in an indexed language."""
        if self._source_files is None:
            self._source_files = [f for f in self.world.files() if grammar_of(f)]
        return self._source_files

    def _path(self, rel: str) -> Path:
        return self.world.root / rel

    def source(self, rel: str) -> _Source:
        """Bytes of an in-world file (cached by mtime_ns and size); raises SandboxError.

        ``rel`` is a canonical relative path (``World.rel``); as a second line of defence,
        paths that climb out, absolute paths and anything but a regular file are refused.
        """
        if rel.startswith("/") or ".." in rel.split("/"):
            raise SandboxError(f"'{rel}' is not a path inside the repository.", "outside")
        path = self._root + rel
        try:
            st = os.lstat(path)
        except OSError as exc:
            raise SandboxError(f"'{rel}' cannot be read ({exc.strerror}).", "not_found") from exc
        if not stat.S_ISREG(st.st_mode):
            raise SandboxError(f"'{rel}' is not a regular file; refused.", "not_a_file")
        self.world.check_hard_links(rel, st)
        hit = self._sources.get(rel)
        if hit is not None and hit.mtime_ns == st.st_mtime_ns and hit.size == st.st_size:
            return hit
        if st.st_size > MAX_FILE_BYTES:
            raise SandboxError(
                f"'{rel}' is {st.st_size:,} bytes, over the {MAX_FILE_BYTES:,}-byte limit.",
                "too_large",
            )
        data = _read_all(path, st.st_size)
        if b"\x00" in data[:8192]:
            raise SandboxError(f"'{rel}' is a binary file; only text can be read.", "binary")
        src = _Source(st.st_mtime_ns, st.st_size, data)
        self._sources[rel] = src
        return src

    def lines(self, rel: str) -> list[str]:
        """A file's lines, numbered exactly as the outlines number them."""
        src = self.source(rel)
        if src.lines is None:
            src.lines = split_lines(src.data)
        return src.lines

    def tree(self, rel: str) -> ts.Tree | None:
        """The parse tree of an indexed file (LRU-cached by mtime_ns and size)."""
        key = grammar_of(rel)
        if key is None:
            return None
        src = self.source(rel)
        hit = self._trees.get(rel)
        if (hit is not None and hit.groups is None and hit.mtime_ns == src.mtime_ns
                and hit.size == src.size):
            self._trees.move_to_end(rel)
            return hit.tree
        tree = grammar(key).parser.parse(src.data)
        self.parse_count += 1
        self._keep(rel, _CachedTree(src.mtime_ns, src.size, tree, None, src.size))
        return tree

    def _keep(self, rel: str, item: _CachedTree) -> None:
        """Cache a tree as the most recently used, within the byte budget."""
        old = self._trees.pop(rel, None)
        if old is not None:
            self._tree_bytes -= old.nbytes
        self._trees[rel] = item
        self._tree_bytes += item.nbytes
        while self._tree_bytes > self.tree_cache_bytes and len(self._trees) > 1:
            _, dropped = self._trees.popitem(last=False)
            self._tree_bytes -= dropped.nbytes

    def _ref_tree(self, rel: str, src: _Source, hits: list[int]) -> ts.Tree | None:
        """A tree that holds every hit of a reference search in ``rel``: the cached whole
        tree, else (when the file's layout is known, :func:`ref_layout`) a parse of only the
        units with a hit, together with those an earlier search parsed; the whole file when
        that would cover half of it or more."""
        key = grammar_of(rel)
        if key is None:
            return None
        hit = self._trees.get(rel)
        fresh = hit is not None and hit.mtime_ns == src.mtime_ns and hit.size == src.size
        if fresh and hit.groups is None:
            self._trees.move_to_end(rel)
            return hit.tree
        ent = self._entries.get(rel)
        if (ent is None or ent.groups is None or ent.mtime_ns != src.mtime_ns
                or ent.size != src.size):
            return self.tree(rel)
        units = ent.groups
        starts = units[1::3]
        kinds = units[2::3]
        n_units = len(starts)
        need: set[int] = set()
        for pos in hits:
            i = bisect_right(starts, pos) - 1
            if i < 0:  # before the first statement (cannot be code): let the whole tree say
                return self.tree(rel)
            need.add(i)
        if fresh:
            if need <= hit.groups:
                self._trees.move_to_end(rel)
                return hit.tree
            need |= hit.groups
        # an inner unit is parsed with its definition's header and tail; a header or a tail
        # with the first inner unit, so that the definition stays whole
        for i in list(need):
            if kinds[i] == UNIT_TOP and (i + 1 >= n_units or kinds[i + 1] != UNIT_INNER):
                continue
            head = i
            while kinds[head] != UNIT_TOP:
                head -= 1
            need.add(head)
            if i == head or kinds[i] == UNIT_TAIL:
                need.add(head + 1)
            j = head + 1
            while j < n_units and kinds[j] != UNIT_TOP:
                if kinds[j] == UNIT_TAIL:
                    need.add(j)
                j += 1
        # runs of consecutive units, each parsed as one range from its first line's start
        spans: list[tuple[int, int]] = []
        for i in sorted(need):
            if spans and spans[-1][1] == i - 1:
                spans[-1] = (spans[-1][0], i)
            else:
                spans.append((i, i))
        bounds = [i for first, last in spans for i in (first, last + 1) if i < n_units]
        if not _rows_fit(src.data, [(units[3 * i], starts[i]) for i in bounds]):
            ent.groups = None  # a layout that does not fit the file: parse it whole from now on
            self._unsaved = True
            return self.tree(rel)
        ranges: list[ts.Range] = []
        nbytes = 0
        for first, last in spans:
            lo = starts[first]
            if last + 1 < n_units:
                end_point = ts.Point(units[3 * last + 3], 0)
                hi = starts[last + 1]
            else:  # the last unit runs to the end of the file
                end_point = ts.Point(src.data.count(b"\n"),
                                     len(src.data) - src.data.rfind(b"\n") - 1)
                hi = len(src.data)
            ranges.append(ts.Range(ts.Point(units[3 * first], 0), end_point, lo, hi))
            nbytes += hi - lo
        if 2 * nbytes >= src.size:
            return self.tree(rel)
        tree = ts.Parser(grammar(key).language, included_ranges=ranges).parse(src.data)
        self.parse_count += 1
        self._keep(rel, _CachedTree(src.mtime_ns, src.size, tree, frozenset(need), nbytes))
        return tree

    # ------------------------------------------------------------------ outlines

    def _entry(self, rel: str) -> _Entry | None:
        key = grammar_of(rel)
        if key is None:
            return None
        src = self.source(rel)
        ent = self._entries.get(rel)
        if ent is not None and ent.mtime_ns == src.mtime_ns and ent.size == src.size:
            return ent
        if key == "cython":  # patterns, no parse (see cython_symbols)
            syms = [self._symbol(rel, t) for t in cython_symbols(src.data)]
            ent = _Entry(src.mtime_ns, src.size, key, syms, False, [], None,
                         vocabulary(src.data))
        else:
            tree = self.tree(rel)
            assert tree is not None
            g = grammar(key)
            syms = [self._symbol(rel, t) for t in extract_symbols(g, tree, src.data)]
            ent = _Entry(src.mtime_ns, src.size, key, syms, tree.root_node.has_error,
                         error_lines(tree.root_node), ref_layout(tree.root_node, g.family, src.data),
                         vocabulary(src.data))
        self._entries[rel] = ent
        self._unsaved = True
        if self._built:
            # a parsed file's names are exactly its symbols' (also a name the scan missed)
            self._set_names(rel, src.mtime_ns, src.size, frozenset(s.name for s in syms))
        return ent

    @staticmethod
    def _symbol(rel: str, t: tuple | list) -> Symbol:
        return Symbol(t[0], t[1], rel, t[2], t[3], t[4], t[5], t[6], t[7])

    def outline(self, rel: str) -> FileOutline:
        """Symbols of one file in document order (empty, language None, if not indexed)."""
        ent = self._entry(rel)
        n = len(self.lines(rel))
        if ent is None:
            return FileOutline(rel, None, [], line_count=n)
        return FileOutline(rel, ent.grammar, list(ent.symbols), ent.has_errors,
                           list(ent.error_lines), n)

    def enclosing(self, rel: str, line: int) -> Symbol | None:
        """The innermost outline symbol whose range contains ``line``."""
        best = None
        for s in self.outline(rel).symbols:
            if s.kind in VALUE_KINDS:
                continue
            if s.start_line <= line <= s.end_line and (best is None or s.depth >= best.depth):
                best = s
        return best

    def next_block(self, rel: str, line: int) -> Symbol | None:
        """The first outline symbol that starts after ``line``."""
        for s in self.outline(rel).symbols:
            if s.kind not in VALUE_KINDS and s.start_line > line:
                return s
        return None

    # ------------------------------------------------------------------ building

    def fingerprint(self) -> str:
        """Key of the on-disk index: format, world root and the list of source files."""
        h = hashlib.sha256(f"{INDEX_FORMAT}|{self.world.root}\n".encode())
        for rel in self.source_files():
            h.update(rel.encode("utf-8", "surrogateescape") + b"\n")
        return h.hexdigest()[:16]

    def cache_path(self) -> Path:
        """Where this world's definitions index is cached."""
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{self.world.name}-{self.world.version or 'local'}")
        return self.cache_dir / f"{slug}-{self.fingerprint()}.json"

    def _load_cache(self, path: Path) -> dict[str, list]:
        try:
            blob = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(blob, dict) or blob.get("format") != INDEX_FORMAT:
            return {}
        files = blob.get("files")
        return files if isinstance(files, dict) else {}

    def save(self) -> Path | None:
        """Write the index (names of every file, symbols of the files parsed so far) to its
        on-disk cache if it holds anything the cache lacks; returns the cache path, or None
        when the disk cache is off or not writable."""
        if not self.use_disk_cache or not self._built:
            return None
        if not self._unsaved:
            return self.cache_path()
        files: dict[str, list] = {}
        for rel, (mtime, size, names) in self._names.items():
            ent = self._entries.get(rel)
            parsed = None
            if ent is not None and (ent.mtime_ns, ent.size) == (mtime, size):
                parsed = [ent.has_errors, ent.error_lines, [s.as_tuple() for s in ent.symbols],
                          ent.groups, None if ent.words is None else ent.words.decode("ascii")]
            files[rel] = [mtime, size, grammar_of(rel), sorted(names), parsed]
        blob = {"format": INDEX_FORMAT, "world": self.world.name, "version": self.world.version,
                "root": str(self.world.root), "files": files}
        path = self.cache_path()
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(blob, separators=(",", ":")), encoding="utf-8")
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
            return None  # a read-only cache folder only costs the next start a rescan
        self._unsaved = False
        return path

    def _cached_record(
        self, rel: str, rec: Any, now: tuple[int, int]
    ) -> tuple[frozenset[str], _Entry | None] | None:
        """Names and (if parsed) entry of an on-disk record that matches the file, else None
        (also for a record in a shape this version did not write)."""
        if not isinstance(rec, list) or len(rec) != 5 or tuple(rec[:2]) != now:
            return None
        try:
            names = frozenset(str(n) for n in rec[3])
            entry = None
            if rec[4] is not None:
                has_err, err_lines, syms, groups, words = rec[4]
                entry = _Entry(now[0], now[1], str(rec[2]), [self._symbol(rel, t) for t in syms],
                               bool(has_err), [int(x) for x in err_lines], _valid_layout(groups),
                               _valid_words(words))
        except (TypeError, ValueError, IndexError):
            return None
        return names, entry

    def build(self, progress: bool = False, force: bool = False, parse: bool = False) -> BuildStats:
        """Index every source file: reuse what the on-disk index holds for unchanged files,
        scan the rest for the names they may define (``parse``: parse every file not parsed
        yet, in ``workers`` processes when there are many), and save the index again."""
        t0, cpu0 = time.perf_counter(), time.process_time()
        stats = BuildStats(workers=1)
        files = self.source_files()
        stats.files = len(files)
        cached = {} if (force or not self.use_disk_cache) else self._load_cache(self.cache_path())
        names: dict[str, tuple[int, int, frozenset[str]]] = {}
        entries: dict[str, _Entry] = {}
        to_scan: list[str] = []
        to_parse: list[tuple[str, str]] = []
        for rel in files:
            try:
                st = self._path(rel).lstat()
            except OSError:
                stats.skipped += 1
                continue
            now = (st.st_mtime_ns, st.st_size)
            known = None if force else self._names.get(rel)
            ent = None if force else self._entries.get(rel)
            rec = self._cached_record(rel, cached.get(rel), now)
            if known is not None and known[:2] == now:
                names[rel] = known
            elif rec is not None:
                names[rel] = (now[0], now[1], rec[0])
            if ent is not None and (ent.mtime_ns, ent.size) == now:
                entries[rel] = ent
            elif rec is not None and rec[1] is not None:
                entries[rel] = rec[1]
            if parse and rel not in entries:
                to_parse.append((rel, grammar_of(rel) or ""))
            elif rel not in names:
                to_scan.append(rel)
            else:
                stats.reused += 1
        if to_scan:
            jobs: Any = to_scan
            if progress and len(to_scan) > 200:
                from tqdm.auto import tqdm

                jobs = tqdm(to_scan, desc=f"scanning {self.world.name}", unit="file", leave=False)
            for rel in jobs:
                got = _read_source(self._path(rel))
                if got is None:
                    stats.skipped += 1
                    continue
                mtime, size, data = got
                names[rel] = (mtime, size, definition_names(data, _family(grammar_of(rel) or "")))
                stats.scanned += 1
        if to_parse:
            for rel, got in self._parse_many(to_parse, progress, stats):
                if got is None:
                    stats.skipped += 1
                    continue
                mtime, size, key, has_err, err_lines, syms, groups, words = got
                ent = _Entry(mtime, size, key, [self._symbol(rel, t) for t in syms],
                             has_err, err_lines, groups, words)
                entries[rel] = ent
                names[rel] = (mtime, size, frozenset(s.name for s in ent.symbols))
                stats.parsed += 1
        self._names = names
        self._entries = entries
        self._files_of = {}
        for rel in sorted(names):
            for name in names[rel][2]:
                self._files_of.setdefault(name, set()).add(rel)
        self._built = True
        self._complete = all(rel in entries for rel in names)
        stats.complete = self._complete
        stats.names = len(self._files_of)
        stats.symbols = sum(len(e.symbols) for e in entries.values())
        stats.with_errors = sum(1 for e in entries.values() if e.has_errors)
        if to_scan or to_parse or set(cached) != set(names):
            self._unsaved = True
        self.save()
        stats.cache_path = str(self.cache_path()) if self.use_disk_cache else None
        stats.seconds = time.perf_counter() - t0
        stats.cpu_seconds = time.process_time() - cpu0
        self.last_build = stats
        return stats

    def _parse_many(
        self, todo: list[tuple[str, str]], progress: bool, stats: BuildStats
    ) -> list[tuple[str, Any]]:
        total_bytes = 0
        sizes = {}
        for rel, _ in todo:
            try:
                sizes[rel] = self._path(rel).lstat().st_size
            except OSError:
                sizes[rel] = 0
            total_bytes += sizes[rel]
        workers = self.workers
        # Worker processes are forked: no re-import of the caller's main module, and the
        # grammars are loaded once here. Forking a process that runs other threads is unsafe,
        # so then (and where fork does not exist) the build stays in this process. tqdm's
        # monitor thread only sleeps between checks of its bars and does not count.
        others = [t for t in threading.enumerate()
                  if t is not threading.current_thread() and t.name != "tqdm_monitor"]
        can_fork = "fork" in multiprocessing.get_all_start_methods() and not others
        if (not can_fork or workers <= 1 or len(todo) < self.parallel_min_files
                or total_bytes < self.parallel_min_bytes):
            jobs: Any = todo
            if progress:
                from tqdm.auto import tqdm

                jobs = tqdm(todo, desc=f"indexing {self.world.name}", unit="file", leave=False)
            out = []
            for job in jobs:
                out.extend(_index_chunk(str(self.world.root), [job])[0])
            self.parse_count += len(todo)
            return out
        # balanced chunks by size, several per worker so the pool stays busy
        n_chunks = workers * 6
        chunks: list[list[tuple[str, str]]] = [[] for _ in range(n_chunks)]
        loads = [0] * n_chunks
        for job in sorted(todo, key=lambda j: -sizes[j[0]]):
            i = loads.index(min(loads))
            chunks[i].append(job)
            loads[i] += sizes[job[0]] + 2000
        chunks = [c for c in chunks if c]
        for key in {k for _, k in todo}:
            _ = grammar(key).defs  # compiled once here rather than in every worker
        ctx = multiprocessing.get_context("fork")
        stats.workers = workers
        out: list[tuple[str, Any]] = []
        with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futures = [pool.submit(_index_chunk, str(self.world.root), c) for c in chunks]
            if progress:
                from tqdm.auto import tqdm

                bar = tqdm(total=len(todo), desc=f"indexing {self.world.name}", unit="file",
                           leave=False)
            for fut in cf.as_completed(futures):
                part, cpu = fut.result()
                stats.worker_cpu_seconds += cpu
                out.extend(part)
                if progress:
                    bar.update(len(part))
            if progress:
                bar.close()
        return out

    def _set_names(self, rel: str, mtime_ns: int, size: int, names: frozenset[str]) -> None:
        old = self._names.get(rel)
        if old is not None:
            for name in old[2] - names:
                self._files_of.get(name, set()).discard(rel)
        for name in names:
            self._files_of.setdefault(name, set()).add(rel)
        self._names[rel] = (mtime_ns, size, names)

    def ensure_built(self) -> None:
        if not self._built:
            self.build()

    def candidate_files(self, name: str) -> list[str]:
        """Files that may define ``name`` (the lexical tier), in path order."""
        self.ensure_built()
        return sorted(self._files_of.get(name, ()))

    # ------------------------------------------------------------------ queries

    def definitions(self, name: str) -> list[Symbol]:
        """Definitions of a name (``a.b`` or ``A::b`` narrows by enclosing symbol), best first:
        primary declarations, then values, then impl blocks; each group in path order."""
        self.ensure_built()
        parts = [p for p in re.split(r"\.|::", name.strip()) if p]
        if not parts:
            return []
        last = parts[-1]
        found: list[Symbol] = []
        for rel in self.candidate_files(last):
            try:
                ent = self._entry(rel)
            except SandboxError:
                continue  # deleted or replaced since the build
            if ent is not None:
                found.extend(s for s in ent.symbols if s.name == last)
        if len(parts) > 1:
            want = ".".join(parts)
            found = [s for s in found if s.qualname == want or s.qualname.endswith("." + want)]
        found.sort(key=lambda s: (_KIND_RANK.get(s.kind, 2), s.file, s.start_line))
        return found

    def _parsed_all(self) -> dict[str, _Entry]:
        if not (self._built and self._complete):
            self.build(parse=True)
        return self._entries

    def defined_names(self) -> list[str]:
        """Every name with at least one definition (parses the files not parsed yet)."""
        return sorted({s.name for e in self._parsed_all().values() for s in e.symbols})

    def stats(self) -> dict[str, int]:
        """Files, symbols and distinct defined names (parses the files not parsed yet)."""
        entries = self._parsed_all()
        return {"files": len(entries),
                "symbols": sum(len(e.symbols) for e in entries.values()),
                "names": len({s.name for e in entries.values() for s in e.symbols})}

    def references(
        self, name: str, limit: int = 50, first_file: str | None = None
    ) -> tuple[list[Ref], int]:
        """Up to ``limit`` occurrences of ``name`` as an identifier, and the total count."""
        res = self.search_references(name, limit=limit, first_file=first_file)
        return res.refs, res.total

    def search_references(
        self, name: str, limit: int = 50, first_file: str | None = None
    ) -> RefSearch:
        """Occurrences of ``name`` as an identifier across the world (name matching).

        Files are prefiltered by their vocabulary (unchanged parsed files) or their bytes,
        then the word-bounded hits of candidate files are checked against the parse tree (a
        Cython file's by :mod:`~adakit.apparatus.cython_lexer`), so hits in comments and
        strings do not count. ``first_file`` is searched and listed first.
        """
        t0 = time.perf_counter()
        files = self.source_files()
        needle = name.encode("utf-8")
        order = files
        if first_file and first_file in files:
            order = [first_file] + [f for f in files if f != first_file]
        refs: list[Ref] = []
        per_file: dict[str, int] = {}
        total = 0
        candidates = 0
        if not needle:
            return RefSearch(name, [], 0, {}, len(files), 0)
        word = b" " + needle + b" " if _WORD_RUN.fullmatch(needle) else None
        for rel in order:
            if word is not None and self._lacks_word(rel, word):
                continue
            try:
                src = self.source(rel)
            except (SandboxError, OSError):
                continue
            if needle not in src.data:
                continue
            hits = word_hits(src.data, name)
            if not hits:
                continue
            candidates += 1
            count = 0
            for pos, row, kind in self._roles(rel, src, name, hits):
                count += 1
                if len(refs) < limit:
                    refs.append(self._ref(rel, src, pos, row, kind))
            if count:
                per_file[rel] = count
                total += count
        return RefSearch(name, refs, total, per_file, len(files), candidates,
                         time.perf_counter() - t0)

    def _roles(
        self, rel: str, src: _Source, name: str, hits: list[int]
    ) -> list[tuple[int, int, str]]:
        """(offset, 0-based row, role) of each hit of ``name`` in ``rel`` that is an
        identifier: read off the file's tree, or for Cython by the lexer."""
        key = grammar_of(rel)
        if key == "cython" and self.cython_references == "lexer":
            if src.code_view is None:
                src.code_view = cython_lexer.CodeView(src.data, self._line_starts(src))
            ent = self._entries.get(rel)
            if ent is None or (ent.mtime_ns, ent.size) != (src.mtime_ns, src.size):
                ent = self._entry(rel)  # (its symbols give the definition rows)
            rows = [s.name_line for s in ent.symbols if s.name == name] if ent else []
            found = cython_lexer.classify_hits(src.code_view, name, hits, rows)
            return [(pos, *got) for pos, got in zip(hits, found, strict=True) if got is not None]
        tree = self._ref_tree(rel, src, hits)
        if tree is None:
            return []
        family = _family(key or "")
        root = tree.root_node
        n = len(name.encode("utf-8"))
        out = []
        for pos in hits:
            found = reference_at(root, pos, n, family)
            if found is not None:
                out.append((pos, found[0].start_point.row, found[1]))
        return out

    def _lacks_word(self, rel: str, word: bytes) -> bool:
        """Whether an unchanged parsed file's vocabulary lacks ``word`` (so the file need not
        be read); False when that is not known."""
        ent = self._entries.get(rel)
        if ent is None or ent.words is None or word in ent.words:
            return False
        try:
            st = os.lstat(self._root + rel)
        except OSError:
            return False  # source() says why
        return st.st_mtime_ns == ent.mtime_ns and st.st_size == ent.size

    @staticmethod
    def _line_starts(src: _Source) -> list[int]:
        """Byte offsets where each line of a source starts (computed once per source)."""
        if src.line_starts is None:
            src.line_starts = cython_lexer.line_starts(src.data)
        return src.line_starts

    def _ref(self, rel: str, src: _Source, pos: int, row: int, kind: str) -> Ref:
        """The reference at byte ``pos``, on 0-based ``row``, with its line's text."""
        lo = src.data.rfind(b"\n", 0, pos) + 1  # the start of the line
        hi = src.data.find(b"\n", lo)
        text = src.data[lo : hi if hi >= 0 else len(src.data)].decode("utf-8", "replace").strip()
        if len(text) > REF_TEXT_CHARS:
            text = text[: REF_TEXT_CHARS - 1] + "…"
        return Ref(rel, row + 1, pos - lo + 1, kind, text)

    def identifiers_on_line(self, rel: str, line: int, cap: int = 12) -> list[str]:
        """Distinct identifiers in the code of one line of an indexed file, left to right.

        Read from the parse tree, so words in comments and strings never count (names inside
        an f-string's or template's interpolation are code and do); receivers (``self``,
        ``cls``) and one-character names are left out. Empty for a line out of range and for
        a file in no indexed language.
        """
        key = grammar_of(rel)
        if key is None or not 1 <= line <= len(self.lines(rel)):
            return []
        tree = self.tree(rel)
        if tree is None:
            return []
        src = self.source(rel)
        starts = self._line_starts(src)
        lo = starts[line - 1]
        hi = starts[line] if line < len(starts) else len(src.data)
        family = _family(key)
        idents = _IDENT_TYPES["python" if family == "cython" else family]
        found: dict[str, None] = {}
        stack = [tree.root_node]
        while stack and len(found) < cap:
            node = stack.pop()
            if node.end_byte <= lo or node.start_byte >= hi or node.type in _COMMENTS:
                continue
            if node.type in idents:
                if node.start_byte >= lo:
                    name = src.data[node.start_byte : node.end_byte].decode("utf-8", "replace")
                    if len(name) > 1 and name not in _RECEIVERS:
                        found.setdefault(name)
                continue
            stack.extend(reversed(node.children))
        return list(found)

    def words_on_line(self, rel: str, line: int, cap: int = 12) -> list[str]:
        """Distinct identifier-shaped words of one raw line, comments and strings included,
        less a few keywords: the names reference corpus local-v3 was recorded with
        (``name_hints: line``), kept so that it replays exactly."""
        lines = self.lines(rel)
        if not 1 <= line <= len(lines):
            return []
        words = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", lines[line - 1])
        seen = [w for w in dict.fromkeys(words) if w not in _LINE_KEYWORDS and len(w) > 1]
        return seen[:cap]
