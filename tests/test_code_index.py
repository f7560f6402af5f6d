"""The tree-sitter code index on small hand-written fixtures (expected ranges read off the
numbered fixture files by hand)."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest

from adakit.apparatus import code_index as ci
from adakit.apparatus.code_index import (
    CodeIndex,
    _family,
    definition_names,
    error_lines,
    extract_symbols,
    grammar,
    grammar_of,
    reference_at,
    split_lines,
)
from adakit.apparatus.tools import Toolbox
from adakit.apparatus.world import World


@pytest.fixture
def index(world: World, tmp_path: Path) -> CodeIndex:
    return CodeIndex(world, cache_dir=tmp_path / "cache", workers=1)


def rows(index: CodeIndex, rel: str) -> list[tuple[str, str, int, int]]:
    return [(s.kind, s.qualname, s.start_line, s.end_line) for s in index.outline(rel).symbols]


def bump(path: Path, text: str) -> None:
    """Append text and move the mtime forward so (mtime_ns, size) surely changes."""
    st = path.stat()
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


# --------------------------------------------------------------------------- outlines


def test_python_outline_ranges_include_decorators(index: CodeIndex) -> None:
    assert rows(index, "pkg/shapes.py") == [
        ("variable", "UNIT", 6, 6),
        ("function", "registered", 9, 12),
        ("class", "Shape", 15, 22),
        ("method", "Shape.area", 18, 19),
        ("method", "Shape.describe", 21, 22),
        ("class", "Circle", 25, 35),  # @registered @dataclass start at 25
        ("method", "Circle.diameter", 30, 32),  # @property at 30
        ("method", "Circle.area", 34, 35),
        ("function", "area_of", 38, 44),
        ("function", "area_of.checked", 39, 42),
        ("function", "fetch_shape", 47, 51),
    ]


def test_python_nesting_and_signatures(index: CodeIndex) -> None:
    syms = {s.qualname: s for s in index.outline("pkg/shapes.py").symbols}
    assert syms["area_of.checked"].depth == 1 and syms["area_of.checked"].parent == "area_of"
    assert syms["Circle"].depth == 0 and syms["Circle"].name_line == 27
    assert syms["Circle"].signature == "class Circle(Shape)"
    # a multi-line header collapses to one line
    assert syms["fetch_shape"].signature == (
        "async def fetch_shape(name: str, default: Shape | None = None) -> Shape"
    )
    assert syms["Shape.describe"].signature == "def describe(self, precision: int = 2) -> str"


def test_typescript_outline(index: CodeIndex) -> None:
    assert rows(index, "web/app.ts") == [
        ("interface", "User", 3, 6),
        ("enum", "Role", 8, 11),
        ("type", "UserMap", 13, 13),
        ("function", "sealed", 15, 17),
        ("class", "UserStore", 19, 31),  # the @sealed decorator before export
        ("method", "UserStore.add", 23, 26),  # the @logged decorator
        ("method", "UserStore.find", 28, 30),
        ("function", "greet", 33, 35),  # export const greet = (...) => {...}
        ("function", "createStore", 37, 41),
        ("namespace", "Internal", 43, 47),
        ("function", "Internal.helper", 44, 46),
        ("function", "logged", 49, 49),
    ]
    syms = {s.qualname: s for s in index.outline("web/app.ts").symbols}
    assert syms["greet"].signature == "const greet = (user: User): string =>"
    assert syms["UserMap"].signature == "type UserMap = Map<number, User>"
    assert syms["UserStore.find"].signature == "find(id: number): User | undefined"


def test_tsx_outline(index: CodeIndex) -> None:
    assert rows(index, "web/view.tsx") == [
        ("interface", "Props", 3, 5),
        ("function", "Header", 7, 9),
        ("function", "Page", 11, 15),
        ("class", "Panel", 17, 21),
        ("method", "Panel.render", 18, 20),
    ]
    assert index.outline("web/view.tsx").language == "tsx"


def test_javascript_outline(index: CodeIndex) -> None:
    assert rows(index, "web/util.js") == [
        ("function", "formatName", 3, 5),
        ("class", "Counter", 7, 16),
        ("method", "Counter.constructor", 8, 10),
        ("method", "Counter.increment", 12, 15),
        ("function", "double", 18, 18),
    ]


def test_rust_outline_with_attributes_impls_and_macros(index: CodeIndex) -> None:
    assert rows(index, "core/src/lib.rs") == [
        ("mod", "geometry", 5, 21),
        ("struct", "geometry.Point", 6, 10),  # #[derive(...)] at 6
        ("impl", "geometry.Point", 12, 20),
        ("method", "geometry.Point.new", 13, 15),
        ("method", "geometry.Point.origin", 17, 19),
        ("enum", "Shape", 23, 30),
        ("trait", "Describe", 32, 38),
        ("method", "Describe.describe", 33, 33),
        ("method", "Describe.shout", 35, 37),
        ("impl", "Shape", 40, 44),
        ("method", "Shape.fmt", 41, 43),
        ("macro", "square", 46, 50),
        ("function", "make_dot", 52, 55),
    ]
    syms = index.outline("core/src/lib.rs").symbols
    impl = next(s for s in syms if s.kind == "impl" and s.name == "Shape")
    assert impl.signature == "impl fmt::Display for Shape"
    assert next(s for s in syms if s.name == "square").signature == "macro_rules! square"
    assert next(s for s in syms if s.name == "describe").signature == "fn describe(&self) -> String"


def test_syntax_errors_are_indexed_and_flagged(index: CodeIndex) -> None:
    out = index.outline("pkg/broken.py")
    assert out.has_errors and out.error_lines == [5]
    names = [s.qualname for s in out.symbols]
    assert "AfterError" in names and "AfterError.method" in names and "fine" in names
    index.build(parse=True)
    assert index.last_build is not None and index.last_build.with_errors == 1
    assert index.definitions("AfterError")[0].file == "pkg/broken.py"


def test_unsupported_file_has_no_outline(index: CodeIndex) -> None:
    out = index.outline("README.md")
    assert not out.supported and out.symbols == [] and out.line_count == 11


def test_error_walk_is_iterative() -> None:
    g = grammar("python")
    deep = b"x = " + b"[" * 3000 + b"]" * 2999 + b"\n"  # one bracket short
    tree = g.parser.parse(deep)
    assert tree.root_node.has_error
    assert error_lines(tree.root_node) == [1]


def test_split_lines_counts_newlines_only() -> None:
    assert split_lines(b"a\r\nb\x0cc\nd") == ["a", "b\x0cc", "d"]
    assert split_lines(b"one\n") == ["one"]
    assert split_lines(b"") == []
    assert split_lines(b"caf\xe9\n") == ["caf\ufffd"]


def test_enclosing_and_next_block(index: CodeIndex) -> None:
    assert index.enclosing("pkg/shapes.py", 41).qualname == "area_of.checked"
    assert index.enclosing("pkg/shapes.py", 43).qualname == "area_of"
    assert index.enclosing("pkg/shapes.py", 2) is None
    assert index.next_block("pkg/shapes.py", 23).qualname == "Circle"
    assert index.next_block("pkg/shapes.py", 27).qualname == "Circle.diameter"
    assert index.next_block("pkg/shapes.py", 47) is None


# --------------------------------------------------------------------------- definitions


def test_definitions_rank_primary_declarations_first(index: CodeIndex) -> None:
    found = [(s.kind, s.file, s.start_line) for s in index.definitions("Shape")]
    assert found == [
        ("enum", "core/src/lib.rs", 23),
        ("class", "pkg/shapes.py", 15),
        ("impl", "core/src/lib.rs", 40),
    ]
    assert [s.qualname for s in index.definitions("Circle.area")] == ["Circle.area"]
    assert [s.qualname for s in index.definitions("Shape::fmt")] == ["Shape.fmt"]
    assert [s.file for s in index.definitions("helper")] == ["web/app.ts"]
    assert index.definitions("nothing_like_this") == []


# --------------------------------------------------------------------------- references


def test_references_skip_comments_and_classify(index: CodeIndex) -> None:
    refs, total = index.references("area_of")
    got = [(r.file, r.line, r.kind) for r in refs]
    # service.py line 9 mentions area_of in a comment only; __init__ line 6 in a string
    assert got == [
        ("pkg/__init__.py", 3, "import"),
        ("pkg/service.py", 1, "import"),
        ("pkg/service.py", 13, "call"),
        ("pkg/shapes.py", 38, "definition"),
    ]
    assert total == 4
    assert refs[2].text == "return sum(area_of(s) for s in self.shapes)"


def test_rust_type_new_calls_are_references(index: CodeIndex) -> None:
    refs, total = index.references("new")
    assert [(r.line, r.kind) for r in refs] == [(13, "definition"), (18, "call"), (53, "call")]
    point = {(r.line, r.kind) for r in index.references("Point")[0]}
    assert (18, "path") in point and (53, "path") in point and (7, "definition") in point


def test_typescript_and_jsx_references(index: CodeIndex) -> None:
    refs, _ = index.references("formatName")
    assert [(r.file, r.line, r.kind) for r in refs] == [
        ("web/app.ts", 1, "import"),
        ("web/app.ts", 34, "call"),
        ("web/util.js", 3, "definition"),
        ("web/util.js", 20, "reference"),
    ]
    header = [(r.line, r.kind) for r in index.references("Header")[0]]
    assert header == [(7, "definition"), (13, "jsx"), (19, "jsx")]
    store = [(r.line, r.kind) for r in index.references("UserStore")[0]]
    assert store == [(20, "definition"), (37, "type"), (38, "call")]


def test_references_limit_total_and_first_file(index: CodeIndex) -> None:
    res = index.search_references("Shape", limit=3, first_file="pkg/shapes.py")
    assert res.total == 13 and len(res.refs) == 3
    assert [r.file for r in res.refs] == ["pkg/shapes.py"] * 3
    assert res.per_file == {"core/src/lib.rs": 4, "pkg/__init__.py": 1, "pkg/service.py": 3,
                            "pkg/shapes.py": 5}
    assert res.files_searched == 10  # 8 sources + 2 Cython files
    # 'Shap' occurs as bytes in several files but never as a whole identifier
    assert index.references("Shap") == ([], 0)


# --------------------------------------------------------------------------- partial parses
#
# A reference search parses only the units of a file's layout that hold a hit (ref_layout).
# Whatever it parses, every answer must be the whole file's: these tests hold the partial
# trees to the whole trees word by word, and the tool's text to that of whole-file parses.

_WORD = re.compile(rb"[A-Za-z0-9_$]+")


def unit_answers_differ(index: CodeIndex, rel: str) -> tuple[int, list]:
    """Parse each unit of ``rel``'s layout alone (with what it needs), then every fourth one
    together; the number of partial trees made and the words whose answer differs from the
    whole file's tree."""
    ent = index._entries[rel]
    src = index.source(rel)
    family = _family(ent.grammar)
    whole = grammar(ent.grammar).parser.parse(src.data).root_node
    starts = ent.groups[1::3]
    partial, differ = 0, []
    for hits in [[s] for s in starts] + [starts[j::4] for j in range(4)]:
        index._trees.pop(rel, None)
        part = index._ref_tree(rel, src, hits)
        cached = index._trees[rel]
        if cached.groups is None:
            continue  # half the file or more: parsed whole
        partial += 1
        assert cached.nbytes * 2 < src.size
        for i in cached.groups:
            end = starts[i + 1] if i + 1 < len(starts) else len(src.data)
            for m in _WORD.finditer(src.data, starts[i], end):
                if m.group()[:1].isdigit():
                    continue
                pos, n = m.start(), m.end() - m.start()
                got = reference_at(part.root_node, pos, n, family)
                want = reference_at(whole, pos, n, family)
                if (got and (got[1], got[0].start_point)) != (want and (want[1], want[0].start_point)):
                    differ.append((rel, m.group(), got and got[1], want and want[1]))
    return partial, differ


def layout_kinds(index: CodeIndex) -> set[int]:
    return {k for e in index._entries.values() if e.groups for k in e.groups[2::3]}


def test_partial_parses_answer_like_whole_files(world: World, monkeypatch) -> None:
    monkeypatch.setattr(ci, "SPLIT_MIN_BYTES", 0)  # split even the small fixtures
    idx = CodeIndex(world, use_disk_cache=False, workers=1)
    idx.build(parse=True)
    assert layout_kinds(idx) == {ci.UNIT_TOP, ci.UNIT_INNER, ci.UNIT_TAIL}
    partial = 0
    for rel in idx.source_files():
        if idx._entries[rel].groups is None:
            continue
        made, differ = unit_answers_differ(idx, rel)
        assert differ == []
        partial += made
    assert partial >= 20


def test_layouts_leave_out_files_with_errors(index: CodeIndex) -> None:
    index.build(parse=True)
    assert index._entries["pkg/broken.py"].groups is None  # error recovery is not local
    assert index._entries["cy/_splitting.pyx"].groups is None  # patterns, no tree
    assert index._entries["pkg/shapes.py"].groups[:3] == [0, 0, ci.UNIT_TOP]


def tool_texts(world: World, index: CodeIndex, names: list[str], rounds: int = 1) -> list[str]:
    box = Toolbox(world, index=index)
    files = index.source_files()
    out = []
    for _ in range(rounds):
        for i, name in enumerate(names):
            res = box.execute("explore_code", {
                "action_type": "find_all_references", "current_file_path": files[i % len(files)],
                "current_line_number": 1, "symbol_name": name})
            out.append(res.text)
    return out


def test_reference_texts_equal_whole_file_parses(world: World, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ci, "SPLIT_MIN_BYTES", 0)
    CodeIndex(world, cache_dir=tmp_path / "c", workers=1).build(parse=True)
    fresh = CodeIndex(world, cache_dir=tmp_path / "c", workers=1)  # layouts from disk
    fresh.build()
    whole = CodeIndex(world, use_disk_cache=False, workers=1)  # lexical tier: whole files
    whole.build()
    kept: list = []
    keep = CodeIndex._keep
    monkeypatch.setattr(CodeIndex, "_keep", lambda self, rel, item: (kept.append(item.groups),
                                                                     keep(self, rel, item)))
    names = fresh.defined_names() + ["self", "Shap", "new", "x", "zzz_nothing"]
    got = tool_texts(world, fresh, names, rounds=2)  # asked twice: partial trees reused
    partial = sum(g is not None for g in kept)
    assert partial >= 5
    assert got == tool_texts(world, whole, names) * 2
    assert sum(g is not None for g in kept) == partial  # the lexical tier parses files whole


_ASI_JS = """const x = bar
class Box {
  one() { return 1 }
  two() { return 2 }
  three() { return 3 }
  four() { return 4 }
  five() { return 5 }
}
(bar)()
"""


def test_javascript_units_never_continue_another_statement(tmp_path: Path, monkeypatch) -> None:
    """``(bar)()`` starts a statement after a class, but put right after ``const x = bar`` it
    would call ``bar``: a unit that starts with such a token stays with the one before it."""
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "asi.js").write_text(_ASI_JS)
    world = World(tmp_path / "w", name="asi")

    def refs(index: CodeIndex) -> list[tuple[int, str]]:
        index.build(parse=True)
        return [(r.line, r.kind) for r in index.references("bar")[0]]

    want = [(1, "reference"), (9, "reference")]
    assert refs(CodeIndex(world, use_disk_cache=False, workers=1)) == want
    monkeypatch.setattr(ci, "_can_start_unit", lambda node, data, family: True)
    assert refs(CodeIndex(world, use_disk_cache=False, workers=1))[0] == (1, "call")


def test_a_damaged_layout_on_disk_means_whole_parses(world: World, tmp_path: Path) -> None:
    import json

    path = Path(CodeIndex(world, cache_dir=tmp_path / "c", workers=1).build(parse=True).cache_path)
    blob = json.loads(path.read_text())
    bad = {"pkg/shapes.py": [0, 0, 0, 20, 3, 0, 30, 500, 0], "pkg/service.py": [0, 0, 9],
           "web/app.ts": [4, 40, 0, 2, 20, 1], "core/src/lib.rs": "0 0 0"}
    for rel, layout in bad.items():
        blob["files"][rel][4][3] = layout
    path.write_text(json.dumps(blob))
    idx = CodeIndex(world, cache_dir=tmp_path / "c", workers=1)
    assert idx.build().reused == 10
    # malformed shapes are dropped on reading; one that is well formed but does not fit
    # the file's lines (shapes.py's) when it is first used
    assert [rel for rel in bad if idx._entries[rel].groups is not None] == ["pkg/shapes.py"]
    whole = CodeIndex(world, use_disk_cache=False, workers=1)
    for name in ("area_of", "Shape", "Circle", "radius"):
        assert idx.references(name) == whole.references(name)
    assert {rel: idx._entries[rel].groups for rel in bad} == dict.fromkeys(bad)


@pytest.mark.slow
def test_partial_parses_on_flask(flask_world: World) -> None:
    idx = CodeIndex(flask_world, use_disk_cache=False, workers=1)
    idx.build(parse=True)
    assert ci.UNIT_INNER in layout_kinds(idx)  # flask's large classes are split
    partial = 0
    for rel in idx.source_files():
        if idx._entries[rel].groups is not None:
            made, differ = unit_answers_differ(idx, rel)
            assert differ == []
            partial += made
    assert partial >= 200
    # a name used in one method of a large file: a small part of that file is parsed
    fresh = CodeIndex(flask_world, use_disk_cache=False, workers=1)
    fresh.build(parse=True)
    res = fresh.search_references("_check_setup_finished")
    assert res.total >= 2
    sizes = [(t.nbytes, t.size) for t in fresh._trees.values()]
    assert sizes and all(t.groups is not None for t in fresh._trees.values())
    assert sum(n for n, _ in sizes) * 5 < sum(s for _, s in sizes)
    whole = CodeIndex(flask_world, use_disk_cache=False, workers=1)
    names = idx.defined_names()[::9] + ["self", "app", "request", "g", "current_app"]
    assert tool_texts(flask_world, fresh, names) == tool_texts(flask_world, whole, names)


# --------------------------------------------------------------------------- caches


def test_parse_cache_invalidation(world: World, index: CodeIndex) -> None:
    first = rows(index, "pkg/service.py")
    parses = index.parse_count
    assert rows(index, "pkg/service.py") == first
    assert index.parse_count == parses  # unchanged file: no new parse
    bump(world.root / "pkg" / "service.py", "\n\ndef added_later():\n    return 1\n")
    again = rows(index, "pkg/service.py")
    assert index.parse_count == parses + 1
    assert again[-1] == ("function", "added_later", 22, 23)
    # the definitions index follows the changed file once built
    index.build()
    bump(world.root / "pkg" / "service.py", "\n\ndef and_another():\n    pass\n")
    assert index.outline("pkg/service.py").symbols[-1].name == "and_another"
    assert index.definitions("and_another")[0].start_line == 26


def test_disk_cache_is_reused_and_refreshed(world: World, tmp_path: Path) -> None:
    a = CodeIndex(world, cache_dir=tmp_path / "c", workers=1)
    sa = a.build()
    # a cold build scans every file for names and parses none
    assert (sa.scanned, sa.parsed, sa.reused, sa.complete) == (10, 0, 0, False)
    assert a.parse_count == 0
    assert Path(sa.cache_path).exists() and Path(sa.cache_path).parent == tmp_path / "c"
    assert Path(sa.cache_path).name.startswith("fixture-0-")
    # a query parses only the files that may define the name
    circle = a.definitions("Circle")
    assert [s.file for s in circle] == ["pkg/shapes.py"]
    assert a.parse_count == len(a.candidate_files("Circle")) < 10
    a.save()

    b = CodeIndex(world, cache_dir=tmp_path / "c", workers=1)
    sb = b.build()
    assert (sb.scanned, sb.parsed, sb.reused) == (0, 0, 10)
    assert b.definitions("Circle") == circle
    assert b.parse_count == 0  # the parsed entries came back from disk
    full = b.build(parse=True)
    assert full.parsed == 10 - len(a.candidate_files("Circle")) and full.complete
    assert b.outline("pkg/broken.py").has_errors

    bump(world.root / "web" / "util.js", "\nfunction later() {}\n")
    c = CodeIndex(world, cache_dir=tmp_path / "c", workers=1)
    sc = c.build()
    assert (sc.scanned, sc.parsed, sc.reused) == (1, 0, 9)
    assert c.definitions("later")[0].file == "web/util.js"
    assert c.parse_count == 1
    c.save()  # the lazily parsed file joins the on-disk index
    sd = CodeIndex(world, cache_dir=tmp_path / "c", workers=1).build(parse=True)
    assert (sd.scanned, sd.parsed, sd.reused) == (0, 0, 10) and sd.complete


def test_cache_key_changes_with_the_file_list(world: World, tmp_path: Path) -> None:
    a = CodeIndex(world, cache_dir=tmp_path / "c")
    before = a.cache_path()
    (world.root / "pkg" / "extra.py").write_text("def extra():\n    pass\n")
    b = CodeIndex(World(world.root, name="fixture", version="0"), cache_dir=tmp_path / "c")
    assert b.cache_path() != before
    assert CodeIndex(World(world.root, name="fixture", version="1"), cache_dir=tmp_path / "c").cache_path() != b.cache_path()


def test_parallel_build_matches_serial(world: World, tmp_path: Path) -> None:
    for i in range(6):
        (world.root / "pkg" / f"gen{i}.py").write_text(
            "".join(f"class C{i}_{j}:\n    def m(self):\n        return {j}\n\n" for j in range(20))
        )
    serial = CodeIndex(world, use_disk_cache=False, workers=1)
    serial.build()
    parallel = CodeIndex(world, use_disk_cache=False, workers=2)
    parallel.parallel_min_files = 2
    parallel.parallel_min_bytes = 0
    stats = parallel.build(parse=True)
    others = [t for t in threading.enumerate()
              if t is not threading.current_thread() and t.name != "tqdm_monitor"]
    # forked workers are used unless other threads run (then the build stays in-process)
    assert stats.workers == (1 if others else 2) and stats.parsed == 16
    if not others:
        assert stats.worker_cpu_seconds > 0 and parallel.parse_count == 0
    for name in ("C3_7", "m", "Shape", "greet"):
        assert parallel.definitions(name) == serial.definitions(name)


def test_binary_and_oversized_sources_are_skipped(world: World, tmp_path: Path) -> None:
    (world.root / "pkg" / "blob.py").write_bytes(b"\x00\x01binary")
    idx = CodeIndex(world, use_disk_cache=False, workers=1)
    stats = idx.build()
    assert stats.skipped == 1 and stats.scanned == 10
    stats = idx.build(parse=True)
    assert stats.skipped == 1 and stats.parsed == 10 and stats.complete
    assert idx.references("binary") == ([], 0)


def test_index_refuses_paths_outside_the_world(world: World, index: CodeIndex, tmp_path: Path) -> None:
    from adakit.apparatus.world import SandboxError

    secret = tmp_path / "secret.py"
    secret.write_text("def secret():\n    pass\n")
    os.symlink(secret, world.root / "pkg" / "link.py")
    for rel in ("../secret.py", str(secret), "pkg/link.py"):
        with pytest.raises(SandboxError):
            index.outline(rel)
    index.build()
    assert index.definitions("secret") == []


# --------------------------------------------------------------------------- lexical tier


def parsed_names(index: CodeIndex, rel: str) -> set[str]:
    return {s.name for s in index.outline(rel).symbols}


def scanned_names(world: World, rel: str) -> frozenset[str]:
    return definition_names((world.root / rel).read_bytes(), _family(grammar_of(rel) or ""))


def test_scan_covers_every_parsed_name_in_the_fixtures(world: World, index: CodeIndex) -> None:
    for rel in index.source_files():
        assert parsed_names(index, rel) <= scanned_names(world, rel), rel


@pytest.mark.parametrize(
    "family, source, expected",
    [
        # one keyword must not swallow the next
        ("rust", b"pub const fn quantiles_len() -> usize { 3 }", {"quantiles_len"}),
        ("rust", b"static mut COUNTER: u32 = 0;", {"COUNTER"}),
        ("rust", b"fn r#type() {}", {"r#type"}),
        ("rust", b"impl<T: Clone> fmt::Display for Wrapper<T> {}", {"Wrapper", "Display"}),
        ("python", b"# used by the GaussianMixture class\n\n\ndef _check(w):\n    pass\n", {"_check"}),
        ("python", b"LIMIT: int = 3\nx = 1; y = 2\n", {"LIMIT", "x", "y"}),
        ("js", b"class A { #secret() {} 'quoted'() {} get size() { return 1 } }", {"#secret", "'quoted'", "size"}),
        ("js", b"class B { handler: (x: number) => void = () => {} }", {"handler"}),
        ("js", b"namespace Outer.Inner { }\ndeclare module \"pkg\" { }", {"Outer.Inner", '"pkg"'}),
    ],
)
def test_scan_finds_definitions_that_are_easy_to_miss(
    family: str, source: bytes, expected: set[str]
) -> None:
    assert expected <= definition_names(source, family)
    key = {"rust": "rust", "python": "python", "js": "typescript"}[family]
    g = grammar(key)
    listed = {t[0] for t in extract_symbols(g, g.parser.parse(source), source)}
    assert listed <= definition_names(source, family)


def test_lexical_and_full_tiers_answer_alike(world: World, tmp_path: Path) -> None:
    lazy = CodeIndex(world, use_disk_cache=False, workers=1)
    full = CodeIndex(world, use_disk_cache=False, workers=1)
    full.build(parse=True)
    names = full.defined_names()
    assert {"Shape", "Circle", "helper", "square"} <= set(names)
    for name in names + ["Circle.area", "Shape::fmt", "not_defined_anywhere"]:
        assert lazy.definitions(name) == full.definitions(name), name
    assert lazy.parse_count <= len(lazy.source_files())


def test_a_name_the_scan_missed_is_found_once_its_file_is_parsed(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    import adakit.apparatus.code_index as ci

    idx = CodeIndex(world, use_disk_cache=False, workers=1)
    monkeypatch.setattr(ci, "definition_names", lambda data, family: frozenset())
    idx.build()
    assert idx.definitions("Circle") == []  # no file is a candidate
    idx.outline("pkg/shapes.py")  # parsing the file corrects its names
    assert [s.file for s in idx.definitions("Circle")] == ["pkg/shapes.py"]


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["flask_world", "requests_world"])
def test_scan_covers_every_parsed_name_in_real_worlds(request, fixture: str) -> None:
    world = request.getfixturevalue(fixture)
    idx = CodeIndex(world, use_disk_cache=False, workers=1)
    lazy = CodeIndex(world, use_disk_cache=False, workers=1)
    for rel in idx.source_files():
        assert parsed_names(idx, rel) <= scanned_names(world, rel), rel
    for name in idx.defined_names()[::7]:
        assert lazy.definitions(name) == idx.definitions(name), name
    assert lazy.parse_count < len(idx.source_files())


def test_a_damaged_on_disk_index_is_rebuilt(world: World, tmp_path: Path) -> None:
    import json

    first = CodeIndex(world, cache_dir=tmp_path / "c", workers=1)
    path = Path(first.build(parse=True).cache_path)
    blob = json.loads(path.read_text())
    rel = "pkg/shapes.py"
    blob["files"][rel][4] = ["not", "an", "entry", "shape"]
    blob["files"]["web/app.ts"][3] = 7  # names must be a list
    path.write_text(json.dumps(blob))
    again = CodeIndex(world, cache_dir=tmp_path / "c", workers=1)
    stats = again.build(parse=True)
    assert (stats.parsed, stats.reused) == (2, 8) and stats.complete
    assert [s.file for s in again.definitions("Circle")] == [rel]
    path.write_text("{ not json")
    assert CodeIndex(world, cache_dir=tmp_path / "c", workers=1).build().scanned == 10


# --------------------------------------------------------------------------- Cython


def test_cython_outline_by_hand(index: CodeIndex) -> None:
    """Line ranges read off the numbered fixture (tests/fixtures/code/cy/_splitting.pyx)."""
    out = index.outline("cy/_splitting.pyx")
    assert out.language == "cython" and not out.has_errors
    got = [(s.qualname, s.kind, s.start_line, s.end_line) for s in out.symbols]
    assert got == [
        ("SplitInfo", "class", 7, 26),  # its docstring's closing line at column 0 is no dedent
        ("SplitInfo.__cinit__", "method", 13, 14),
        ("SplitInfo.reset", "method", 16, 18),
        ("SplitInfo.score", "method", 20, 22),  # a header continued over two lines
        ("SplitInfo.empty", "method", 24, 26),  # from its decorator
        ("CyHalfTweedieLossIdentity", "class", 29, 33),
        ("CyHalfTweedieLossIdentity.__init__", "method", 32, 33),
        ("log_loss", "function", 36, 38),
        ("find_splits", "function", 41, 43),  # its 'cdef object result = sorted(...)' is no def
        ("best_gain", "function", 46, 48),
        ("PlainHelper", "class", 51, 53),
        ("PlainHelper.run", "method", 52, 53),
    ]
    assert out.symbols[3].signature == "cpdef float64 score(self, float64 weight)"


def test_cython_declarations_by_hand(index: CodeIndex) -> None:
    got = [(s.qualname, s.kind, s.start_line, s.end_line)
           for s in index.outline("cy/_splitting.pxd").symbols]
    assert got == [
        ("float64", "type", 4, 4), ("intp_t", "type", 5, 5),
        ("loss_fn", "type", 6, 6),  # a function-pointer ctypedef
        ("numeric", "type", 8, 10),  # ctypedef fused
        ("SplitRecord", "struct", 12, 15), ("Node", "struct", 17, 19),
        ("Criterion", "enum", 21, 23),
        ("clamp", "function", 26, 27),  # declared in a cdef extern block
        ("heap_t", "struct", 28, 29),
        ("SplitInfo", "class", 31, 34), ("SplitInfo.reset", "method", 34, 34),
        ("log_loss", "function", 36, 36),
    ]


def test_cython_definitions_and_references(index: CodeIndex) -> None:
    where = [(s.file, s.kind, s.start_line) for s in index.definitions("SplitInfo")]
    assert where == [("cy/_splitting.pxd", "class", 31), ("cy/_splitting.pyx", "class", 7)]
    assert [s.start_line for s in index.definitions("SplitInfo.reset")] == [34, 16]
    assert [(s.file, s.start_line) for s in index.definitions("CyHalfTweedieLossIdentity")] == [
        ("cy/_splitting.pyx", 29)]
    refs = index.search_references("SplitInfo")
    pyx = sorted(r.line for r in refs.refs if r.file == "cy/_splitting.pyx")
    assert pyx == [7, 29]  # the class line and the base of CyHalfTweedieLossIdentity
    assert index.definitions("float64")[0].kind == "type"


@pytest.mark.slow
def test_cython_definitions_in_scikit_learn(sklearn_world: World) -> None:
    """Classes defined in .pyx/.pxd files, which an agent reading scikit-learn meets often;
    ranges read off the pinned sdist. The scan covers every name the patterns list."""
    idx = CodeIndex(sklearn_world, use_disk_cache=False, workers=1)
    cython = [f for f in idx.source_files() if f.endswith((".pyx", ".pxd", ".pxi"))]
    assert len(cython) > 50
    for rel in cython:
        assert parsed_names(idx, rel) <= scanned_names(sklearn_world, rel), rel
    split = idx.definitions("SplitInfo")
    assert [(s.file, s.kind, s.start_line, s.end_line) for s in split] == [
        ("sklearn/ensemble/_hist_gradient_boosting/splitting.pyx", "class", 54, 110)]
    loss = idx.definitions("CyHalfTweedieLossIdentity")
    assert [(s.file, s.kind, s.start_line, s.end_line) for s in loss][0] == (
        "sklearn/_loss/_loss.pxd", "class", 75, 79)
    assert idx.definitions("intp_t")[0].file == "sklearn/utils/_typedefs.pxd"
