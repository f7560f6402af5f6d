"""Ada's seven tools: specs, observations, metrics, state, every error path and the sandbox."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from adakit.apparatus.code_index import CodeIndex
from adakit.apparatus.tools import (
    PEEK_MAX_LINES,
    TOOL_SPECS,
    Toolbox,
    ToolResult,
    WorkingState,
    parse_code_range,
)
from adakit.apparatus.world import World
from adakit.cli import main as cli_main
from adakit.record import TOOL_ABBR, ModelCall, Turn


@pytest.fixture
def box(world: World, tmp_path: Path) -> Toolbox:
    return Toolbox(world, index=CodeIndex(world, cache_dir=tmp_path / "cache", workers=1))


def run(box: Toolbox, tool: str, **params: object) -> ToolResult:
    result = box.execute(tool, params)
    assert result.text.strip(), "an observation is never empty"
    return result


def ok(box: Toolbox, tool: str, **params: object) -> ToolResult:
    result = run(box, tool, **params)
    assert result.metrics.error_type is None, result.text
    assert result.metrics.tool == TOOL_ABBR[tool]
    return result


def err(box: Toolbox, tool: str, **params: object) -> ToolResult:
    result = run(box, tool, **params)
    assert result.metrics.error_type == "tool_error", result.text
    return result


# --------------------------------------------------------------------------- specs


def test_specs_follow_table_1_and_a1() -> None:
    assert list(TOOL_SPECS) == list(TOOL_ABBR)
    assert [s.abbr for s in TOOL_SPECS.values()] == ["OVW", "PKR", "EXP", "MEM", "BKM", "HNT", "CON"]
    sig = {
        name: [(p.name, p.type, p.required) for p in spec.params] for name, spec in TOOL_SPECS.items()
    }
    assert sig["get_structural_overview"] == [
        ("file_path", "string", True), ("logical_block_name", "string", False)]
    assert sig["peek_code_region"] == [
        ("file_path", "string", True), ("start_line", "integer", True), ("end_line", "integer", False)]
    assert sig["explore_code"] == [
        ("action_type", "enum", True), ("current_file_path", "string", True),
        ("current_line_number", "integer", True), ("symbol_name", "string", False)]
    assert sig["create_memory"] == [
        ("memory_title", "string", True), ("memory_content", "string", True),
        ("confidence_level", "enum", False)]
    assert sig["bookmark"] == [
        ("file_path", "string", True), ("line_number", "integer", True), ("note", "string", True)]
    assert sig["get_hint_on_snippet"] == [
        ("file_path", "string", True), ("code_range", "string", True),
        ("description_of_confusion", "string", True), ("what_i_tried_or_think", "string", False)]
    assert sig["stash_conclusion"] == [
        ("title", "string", False), ("content", "string", True),
        ("scope_description", "string", False), ("proceed_to_finalize", "boolean", True)]
    assert TOOL_SPECS["explore_code"].param("action_type").choices == (
        "go_to_definition", "find_all_references", "go_to_next_block")
    assert TOOL_SPECS["create_memory"].param("confidence_level").choices == ("high", "medium", "low")
    groups = [s.group for s in TOOL_SPECS.values()]
    assert groups == ["navigation"] * 3 + ["cognitive"] * 2 + ["oracle", "termination"]
    for spec in TOOL_SPECS.values():  # short enough for an 8k-context model's prompt
        assert len(spec.description) < 260
        assert all(len(p.description) < 120 for p in spec.params)


# --------------------------------------------------------------------------- OVW


def test_overview_of_a_file(box: Toolbox) -> None:
    r = ok(box, "get_structural_overview", file_path="pkg/shapes.py")
    lines = r.text.splitlines()
    assert lines[0] == "[File: pkg/shapes.py | 51 lines | python]"
    assert "Imports: math, dataclasses" in lines
    assert "Module-level names: UNIT (L6)" in lines
    assert "class Circle(Shape)  L25-35" in lines
    assert "  def diameter(self) -> float  L30-32" in lines
    assert "  def checked(value)  L39-42" in lines
    m = r.metrics
    assert (m.file, m.structural, m.result_count, m.ranges, m.lines_viewed) == (
        "pkg/shapes.py", True, 10, [], 0)


def test_overview_of_blocks(box: Toolbox) -> None:
    r = ok(box, "get_structural_overview", file_path="pkg/shapes.py", logical_block_name="Shape")
    assert r.text.splitlines()[0] == (
        "[Block: class Shape | pkg/shapes.py lines 15-22 (8 lines of 51) | python]")
    assert "Doc: Base class of every shape." in r.text
    assert "Members (2):" in r.text and "def area(self) -> float  L18-19" in r.text
    assert "<peek_code_region><file_path>pkg/shapes.py</file_path><start_line>15</start_line><end_line>22</end_line></peek_code_region>" in r.text
    assert r.metrics.block == "Shape" and r.metrics.structural

    r = ok(box, "get_structural_overview", file_path="pkg/shapes.py", logical_block_name="area_of")
    assert "Calls (by name): ValueError, checked, shape.area" in r.text
    r = ok(box, "get_structural_overview", file_path="core/src/lib.rs", logical_block_name="make_dot")
    assert "Calls (by name): geometry::Point::new, square!, Shape::Dot" in r.text
    r = ok(box, "get_structural_overview", file_path="web/app.ts", logical_block_name="UserStore.add")
    assert "[Block: method UserStore.add | web/app.ts lines 23-26" in r.text
    # a qualified Rust path and a case-insensitive name both resolve
    ok(box, "get_structural_overview", file_path="core/src/lib.rs", logical_block_name="geometry::Point::new")
    ok(box, "get_structural_overview", file_path="web/util.js", logical_block_name="counter")


def test_overview_errors(box: Toolbox) -> None:
    r = err(box, "get_structural_overview", file_path="pkg/shapes.py", logical_block_name="area")
    assert "'area' is ambiguous" in r.text
    assert "Shape.area (method) L18-19" in r.text and "Circle.area (method) L34-35" in r.text
    assert "<logical_block_name>Shape.area</logical_block_name>" in r.text

    r = err(box, "get_structural_overview", file_path="pkg/shapes.py", logical_block_name="Circel")
    assert "No block named 'Circel'" in r.text and "Circle" in r.text

    r = err(box, "get_structural_overview", file_path="pkg/shape.py")
    assert "File not found: 'pkg/shape.py'" in r.text and "pkg/shapes.py" in r.text


def test_overview_of_other_files(box: Toolbox) -> None:
    r = ok(box, "get_structural_overview", file_path="README.md")
    assert r.text.splitlines() == [
        "[File: README.md | 11 lines]", "Headings:", "L1  # Fixture project", "L5  ## Python",
        "L9  ## Web"]
    r = ok(box, "get_structural_overview", file_path="pkg/broken.py")
    assert "Note: syntax errors near line(s) 5; the outline may be incomplete." in r.text
    assert "class AfterError  L9-11" in r.text
    r = ok(box, "get_structural_overview", file_path="pkg/__init__.py")
    assert "No classes or functions in this file." in r.text
    assert "<peek_code_region><file_path>pkg/__init__.py</file_path><start_line>1</start_line><end_line>6</end_line></peek_code_region>" in r.text


def test_overview_and_definitions_of_cython(world: World, box: Toolbox) -> None:
    (world.root / "pkg" / "fast.pyx").write_text(
        "cdef int LIMIT = 3\n\ncdef class Tree:\n    cdef int n\n\n"
        "    cpdef int depth(self, int x):\n        return x\n\n"
        "    def __cinit__(self):\n        self.n = 0\n\n"
        "cdef inline double _half(double v) nogil:\n    return v / 2\n")
    r = ok(box, "get_structural_overview", file_path="pkg/fast.pyx")
    assert r.text.splitlines()[2:] == [
        "cdef class Tree  L3-10",
        "  cpdef int depth(self, int x)  L6-7",
        "  def __cinit__(self)  L9-10",
        "cdef inline double _half(double v) nogil  L12-13",
    ]
    assert r.text.splitlines()[0].endswith("| cython]")
    d = ok(box, "explore_code", action_type="go_to_definition",
           current_file_path="pkg/fast.pyx", current_line_number=12, symbol_name="Tree")
    assert "1. class Tree in pkg/fast.pyx, lines 3-10" in d.text
    assert d.metrics.ranges == [(3, 10)]


def test_overview_folds_large_files(world: World, box: Toolbox) -> None:
    body = "".join(
        f"class K{i}:\n" + "".join(f"    def m{j}(self):\n        pass\n" for j in range(3))
        for i in range(40)
    )
    (world.root / "pkg" / "big.py").write_text(body)
    r = ok(box, "get_structural_overview", file_path="pkg/big.py")
    assert "Outline (160 symbols" in r.text
    assert "class K0  L1-7  (+3 nested)" in r.text
    assert "def m0" not in r.text
    assert "<logical_block_name>K0</logical_block_name>" in r.text
    assert len(r.text.splitlines()) < 50


# --------------------------------------------------------------------------- PKR


def test_peek_window(box: Toolbox) -> None:
    r = ok(box, "peek_code_region", file_path="pkg/shapes.py", start_line=30, end_line=32)
    assert r.text.splitlines() == [
        "[File: pkg/shapes.py | 51 lines | python | lines 30-32]",
        "(line 30 is inside method Circle.diameter, lines 30-32)",
        "(29 more lines above)",
        "30:     @property",
        "31:     def diameter(self) -> float:",
        "32:         return 2 * self.radius",
        "(19 more lines below)",
    ]
    assert r.metrics.ranges == [(30, 32)] and r.metrics.lines_viewed == 3
    assert r.metrics.file == "pkg/shapes.py"


def test_peek_defaults_clamps_and_caps(world: World, box: Toolbox) -> None:
    r = ok(box, "peek_code_region", file_path="pkg/shapes.py", start_line=1)
    assert r.metrics.ranges == [(1, 50)] and "(1 more lines below)" in r.text
    assert "more lines above" not in r.text

    r = ok(box, "peek_code_region", file_path="pkg/shapes.py", start_line=40, end_line=400)
    assert "(end_line 400 clamped to 51, the last line)" in r.text
    assert r.metrics.ranges == [(40, 51)] and "more lines below" not in r.text

    r = ok(box, "peek_code_region", file_path="pkg/shapes.py", start_line=0, end_line=2)
    assert "(start_line 0 moved to 1" in r.text and r.metrics.ranges == [(1, 2)]

    r = ok(box, "peek_code_region", file_path="pkg/shapes.py", start_line=10, end_line=5)
    assert "end_line 5 is before start_line" in r.text and r.metrics.ranges == [(10, 51)]

    (world.root / "pkg" / "long.py").write_text("".join(f"x{i} = {i}\n" for i in range(1, 301)))
    r = ok(box, "peek_code_region", file_path="pkg/long.py", start_line=11, end_line=290)
    assert r.metrics.ranges == [(11, 110)] and r.metrics.lines_viewed == PEEK_MAX_LINES
    assert "110: x110 = 110" in r.text
    assert "<peek_code_region><file_path>pkg/long.py</file_path><start_line>111</start_line><end_line>210</end_line></peek_code_region>" in r.text
    assert "(190 more lines below)" in r.text


def test_peek_errors_and_odd_files(world: World, box: Toolbox) -> None:
    r = err(box, "peek_code_region", file_path="pkg/shapes.py", start_line=52)
    assert "past the end of pkg/shapes.py, which has 51 lines" in r.text
    assert "<start_line>2</start_line><end_line>51</end_line>" in r.text
    (world.root / "empty.py").write_text("")
    r = ok(box, "peek_code_region", file_path="empty.py", start_line=1)
    assert "The file is empty." in r.text and r.metrics.lines_viewed == 0
    (world.root / "wide.js").write_text("var s = '" + "x" * 1000 + "';\n")
    r = ok(box, "peek_code_region", file_path="wide.js", start_line=1)
    assert "…[line cut, " in r.text and len(r.text) < 600
    (world.root / "latin.py").write_bytes(b"name = 'caf\xe9'\n")
    r = ok(box, "peek_code_region", file_path="latin.py", start_line=1)
    assert "1: name = 'caf\ufffd'" in r.text


# --------------------------------------------------------------------------- EXP


def test_go_to_definition(box: Toolbox) -> None:
    r = ok(box, "explore_code", action_type="go_to_definition", current_file_path="pkg/service.py",
           current_line_number=13, symbol_name="area_of")
    assert "1. function area_of in pkg/shapes.py, lines 38-44" in r.text
    assert "38: def area_of(shape: Shape) -> float:" in r.text
    m = r.metrics
    assert (m.action, m.symbol, m.file, m.result_count, m.ranges) == (
        "definition", "area_of", "pkg/shapes.py", 1, [(38, 44)])


def test_go_to_definition_ranks_the_current_file_first(box: Toolbox) -> None:
    r = ok(box, "explore_code", action_type="go_to_definition", current_file_path="core/src/lib.rs",
           current_line_number=54, symbol_name="Shape")
    assert r.text.splitlines()[1] == "1. enum Shape in core/src/lib.rs, lines 23-30"
    assert "2. impl Shape in core/src/lib.rs, lines 40-44" in r.text
    assert "3. class Shape in pkg/shapes.py, lines 15-22: class Shape" in r.text
    r = ok(box, "explore_code", action_type="go_to_definition", current_file_path="pkg/service.py",
           current_line_number=8, symbol_name="Shape")
    assert r.text.splitlines()[1] == "1. class Shape in pkg/shapes.py, lines 15-22"
    assert r.metrics.result_count == 3


def test_go_to_definition_long_block_points_onwards(world: World, box: Toolbox) -> None:
    (world.root / "pkg" / "long_fn.py").write_text(
        "def long_one():\n" + "".join(f"    v{i} = {i}\n" for i in range(60)))
    r = ok(box, "explore_code", action_type="go_to_definition", current_file_path="pkg/long_fn.py",
           current_line_number=1, symbol_name="long_one")
    assert r.metrics.ranges == [(1, 25)]
    assert "continues to line 61" in r.text
    assert "<peek_code_region><file_path>pkg/long_fn.py</file_path><start_line>26</start_line><end_line>61</end_line></peek_code_region>" in r.text


def test_go_to_definition_not_found_says_where_it_looked(box: Toolbox) -> None:
    r = ok(box, "explore_code", action_type="go_to_definition", current_file_path="pkg/shapes.py",
           current_line_number=26, symbol_name="dataclass")
    assert "No definition of 'dataclass' found" in r.text
    assert "10 indexed source files" in r.text
    assert "pkg/shapes.py imports it at line 4: from dataclasses import dataclass" in r.text
    assert r.metrics.result_count == 0 and r.metrics.ranges == []
    r = ok(box, "explore_code", action_type="go_to_definition", current_file_path="pkg/__init__.py",
           current_line_number=4, symbol_name="service")
    assert "Files named service: pkg/service.py" in r.text


def test_explore_code_argument_errors(box: Toolbox) -> None:
    r = err(box, "explore_code", action_type="go_to_definition", current_file_path="pkg/service.py",
            current_line_number=13)
    assert "needs symbol_name" in r.text
    assert "Names on line 13 of pkg/service.py: sum, area_of, shapes" in r.text
    r = err(box, "explore_code", action_type="find_all_references", current_file_path="pkg/service.py",
            current_line_number=1, symbol_name="a b; rm")
    assert "must be an identifier" in r.text
    r = err(box, "explore_code", action_type="jump", current_file_path="pkg/service.py",
            current_line_number=1, symbol_name="x")
    assert "go_to_definition, find_all_references, go_to_next_block" in r.text
    r = err(box, "explore_code", action_type="go_to_next_block", current_file_path="nope.py",
            current_line_number=1)
    assert "File not found" in r.text
    # a misspelled current file still allows a repository-wide lookup
    r = ok(box, "explore_code", action_type="go to definition", current_file_path="nope.py",
           current_line_number=1, symbol_name="Counter")
    assert "was not found; the whole repository was searched" in r.text
    assert "class Counter in web/util.js" in r.text


def test_find_all_references(box: Toolbox) -> None:
    r = ok(box, "explore_code", action_type="find_all_references", current_file_path="pkg/shapes.py",
           current_line_number=38, symbol_name="area_of")
    lines = r.text.splitlines()
    assert lines[0].startswith("4 references to 'area_of' in 3 files (10 indexed source files; "
                               "identifiers matched by name, not by type")
    assert lines[1:] == [
        "pkg/shapes.py (1):", "  L38 [definition] def area_of(shape: Shape) -> float:",
        "pkg/__init__.py (1):", "  L3 [import] from pkg.shapes import Circle, Shape, area_of",
        "pkg/service.py (2):", "  L1 [import] from pkg.shapes import Circle, Shape, area_of",
        "  L13 [call] return sum(area_of(s) for s in self.shapes)",
    ]
    m = r.metrics
    assert (m.action, m.result_count, m.lines_viewed, m.file) == ("references", 4, 4, "pkg/shapes.py")
    r = ok(box, "explore_code", action_type="find_all_references", current_file_path="pkg/shapes.py",
           current_line_number=1, symbol_name="self.radius")
    assert "by the last part of the name, 'radius'" in r.text
    r = ok(box, "explore_code", action_type="find_all_references", current_file_path="pkg/shapes.py",
           current_line_number=1, symbol_name="zzz_unused")
    assert "No references to 'zzz_unused'" in r.text and r.metrics.result_count == 0


def test_find_all_references_is_capped(world: World, box: Toolbox) -> None:
    for i in range(3):
        (world.root / "pkg" / f"user{i}.py").write_text(
            "from pkg.shapes import UNIT\n" + "".join(f"a{j} = UNIT * {j}\n" for j in range(30)))
    r = ok(box, "explore_code", action_type="find_all_references", current_file_path="pkg/user1.py",
           current_line_number=1, symbol_name="UNIT")
    assert r.metrics.result_count == 95  # 3 x 31 + definition + use in shapes.py
    assert r.metrics.lines_viewed == 50
    assert r.text.count("\n  L") == 50
    assert r.text.splitlines()[2] == "pkg/user1.py (31):"  # the current file first
    assert "(45 more not shown; 14 more in pkg/user0.py; also in: pkg/user2.py (31))" in r.text
    assert ("<explore_code><action_type>find_all_references</action_type><current_file_path>"
            "pkg/user2.py</current_file_path><current_line_number>1</current_line_number>"
            "<symbol_name>UNIT</symbol_name></explore_code>") in r.text


def test_go_to_next_block(box: Toolbox) -> None:
    r = ok(box, "explore_code", action_type="go_to_next_block", current_file_path="pkg/shapes.py",
           current_line_number=23)
    assert r.text.splitlines()[0] == "Next block after line 23: class Circle, lines 25-35"
    assert "25: @registered" in r.text and "35:         return math.pi * self.radius**2" in r.text
    assert (r.metrics.action, r.metrics.block, r.metrics.ranges) == ("next", "Circle", [(25, 35)])
    r = ok(box, "explore_code", action_type="go_to_next_block", current_file_path="pkg/shapes.py",
           current_line_number=48)
    assert "No block starts after line 48" in r.text and r.metrics.result_count == 0
    assert "<peek_code_region><file_path>pkg/shapes.py</file_path><start_line>49</start_line><end_line>51</end_line></peek_code_region>" in r.text
    r = ok(box, "explore_code", action_type="go_to_next_block", current_file_path="web/util.js",
           current_line_number=999)
    assert "current_line_number 999 is outside 1-20; using 20" in r.text
    r = err(box, "explore_code", action_type="go_to_next_block", current_file_path="README.md",
            current_line_number=1)
    assert "not parsed" in r.text and "<peek_code_region><file_path>README.md</file_path>" in r.text


def test_next_block_long_block_is_capped(world: World, box: Toolbox) -> None:
    (world.root / "pkg" / "long_fn.py").write_text(
        "x = 1\n\ndef long_one():\n" + "".join(f"    v{i} = {i}\n" for i in range(80)))
    r = ok(box, "explore_code", action_type="go_to_next_block", current_file_path="pkg/long_fn.py",
           current_line_number=1)
    assert r.metrics.ranges == [(3, 62)]
    assert "the block continues to line 83" in r.text
    assert "<start_line>63</start_line><end_line>83</end_line>" in r.text


# --------------------------------------------------------------------------- MEM, BKM


def test_memory(box: Toolbox) -> None:
    r = ok(box, "create_memory", memory_title="Routing", memory_content="Flask.route adds a rule.",
           confidence_level="HIGH")
    assert r.text == "Memory [1] saved: 'Routing' (confidence: high). MEMORY holds 1 note(s)."
    assert r.metrics.confidence == "high" and r.metrics.file is None
    assert r.state_changes == [{"channel": "memory", "op": "add", "id": 1, "title": "Routing",
                                "content": "Flask.route adds a rule.", "confidence": "high"}]
    r = ok(box, "create_memory", memory_title="routing", memory_content="Revised.")
    assert r.state_changes[0]["op"] == "update" and len(box.state.memories) == 1
    assert box.state.memories[0].content == "Revised." and box.state.memories[0].confidence is None
    r = ok(box, "create_memory", memory_title="t" * 300, memory_content="c" * 5000)
    assert "title shortened" in r.text and "content kept to its first 1500" in r.text
    err(box, "create_memory", memory_title="x", memory_content="y", confidence_level="certain")
    err(box, "create_memory", memory_title="x", memory_content="   ")


def test_bookmark(box: Toolbox) -> None:
    r = ok(box, "bookmark", file_path="./pkg/shapes.py", line_number=44, note="why checked()?")
    assert r.text.splitlines() == [
        "Bookmark [1] set at pkg/shapes.py:44: why checked()?",
        "44:     return checked(shape.area())",
        "BOOKMARK holds 1 bookmark(s).",
    ]
    assert (r.metrics.file, r.metrics.ranges, r.metrics.lines_viewed) == ("pkg/shapes.py", [(44, 44)], 1)
    r = ok(box, "bookmark", file_path="pkg/shapes.py", line_number="44", note="answered")
    assert r.state_changes[0]["op"] == "update" and box.state.bookmarks[0].note == "answered"
    r = err(box, "bookmark", file_path="pkg/shapes.py", line_number=99, note="x")
    assert "line_number 99 is outside pkg/shapes.py, which has 51 lines" in r.text
    err(box, "bookmark", file_path="pkg/shapes.py", line_number="forty", note="x")


# --------------------------------------------------------------------------- HNT


class FakeHint:
    name = "fake-hint"

    def __init__(self, answer: str = "It wraps the value check.", fail: bool = False) -> None:
        self.answer, self.fail, self.seen = answer, fail, []

    def __call__(self, messages: list[dict]) -> tuple[str, ModelCall]:
        self.seen.append(messages)
        if self.fail:
            raise TimeoutError("no answer in time")
        return self.answer, ModelCall(purpose="hint", model=self.name, tokens_in=120, tokens_out=9)


def test_hint_uses_the_template_and_records_the_call(world: World, box: Toolbox) -> None:
    box.hint_model = FakeHint()
    r = ok(box, "get_hint_on_snippet", file_path="pkg/shapes.py", code_range="L38-L44",
           description_of_confusion="why a nested function?")
    assert r.text.splitlines() == [
        "Hint on pkg/shapes.py lines 38-44 (an explanation of the snippet, not an answer to the task):",
        "It wraps the value check.",
    ]
    assert [c.model for c in r.model_calls] == ["fake-hint"] and r.model_calls[0].tokens_in == 120
    system, user = box.hint_model.seen[0]
    assert system["role"] == "system" and "do not write the analyst's final answer" in system["content"]
    assert user["content"].startswith("File: pkg/shapes.py, lines 38-44 (python)")
    assert "38: def area_of(shape: Shape) -> float:" in user["content"]
    assert "44:     return checked(shape.area())" in user["content"]
    assert "What is unclear: why a nested function?" in user["content"]
    assert "What I tried or think: (nothing stated)" in user["content"]
    assert r.metrics.file == "pkg/shapes.py" and r.metrics.ranges == []


def test_hint_errors(world: World, box: Toolbox) -> None:
    r = err(box, "get_hint_on_snippet", file_path="pkg/shapes.py", code_range="1-3",
            description_of_confusion="?")
    assert "Hints are not available" in r.text and r.model_calls == []
    box.hint_model = FakeHint(fail=True)
    r = err(box, "get_hint_on_snippet", file_path="pkg/shapes.py", code_range="1-3",
            description_of_confusion="?")
    assert "The hint model failed (TimeoutError)" in r.text
    assert r.model_calls[0].error == "TimeoutError: no answer in time"
    box.hint_model = FakeHint(answer="  ")
    r = err(box, "get_hint_on_snippet", file_path="pkg/shapes.py", code_range="1-3",
            description_of_confusion="?")
    assert "empty answer" in r.text and len(r.model_calls) == 1
    r = err(box, "get_hint_on_snippet", file_path="pkg/shapes.py", code_range="the loop",
            description_of_confusion="?")
    assert "START-END" in r.text
    (world.root / "pkg" / "long.py").write_text("".join(f"x{i} = {i}\n" for i in range(200)))
    box.hint_model = FakeHint()
    r = ok(box, "get_hint_on_snippet", file_path="pkg/long.py", code_range="10-150",
           description_of_confusion="?")
    assert "(the snippet is limited to 80 lines: 10-89)" in r.text


def test_parse_code_range() -> None:
    assert parse_code_range("12-30", 100)[:2] == (12, 30)
    assert parse_code_range("lines 12 to 30", 100)[:2] == (12, 30)
    assert parse_code_range("12:30", 100)[:2] == (12, 30)
    assert parse_code_range("42", 100)[:2] == (42, 42)
    start, end, notes = parse_code_range("30-12", 100)
    assert (start, end) == (12, 30) and notes == ["(code_range reversed to 12-30)"]
    assert parse_code_range("90-120", 100) == (90, 100, ["(code_range clamped to the last line, 100)"])
    with pytest.raises(Exception, match="starts after the last line"):
        parse_code_range("200-210", 100)


# --------------------------------------------------------------------------- CON


def test_stash_conclusion(box: Toolbox) -> None:
    r = ok(box, "stash_conclusion", content="Routing goes through add_url_rule.",
           proceed_to_finalize="false", scope_description="sansio")
    assert not r.finalize and r.metrics.finalize is False
    assert "the analysis continues" in r.text
    r = ok(box, "stash_conclusion", title="Final", content="Done.", proceed_to_finalize=True)
    assert r.finalize and r.metrics.finalize is True
    assert r.text == ("Conclusion [2] 'Final' recorded. proceed_to_finalize=true: the analysis is "
                      "finalized and the session ends.")
    assert [c.title for c in box.state.conclusions] == ["Conclusion 1", "Final"]
    r = err(box, "stash_conclusion", content="x")
    assert "needs proceed_to_finalize" in r.text and len(box.state.conclusions) == 2
    err(box, "stash_conclusion", content="x", proceed_to_finalize="maybe")


# --------------------------------------------------------------------------- execute


def test_execute_never_raises(box: Toolbox, monkeypatch: pytest.MonkeyPatch) -> None:
    r = box.execute("open_file", {"path": "x"})
    assert r.metrics.error_type == "unknown_tool" and "get_structural_overview" in r.text
    r = err(box, "peek_code_region", file_path="pkg/shapes.py", start_line=1, colour="red")
    assert "has no parameter 'colour'" in r.text
    assert "peek_code_region(file_path, start_line, end_line?)" in r.text
    r = err(box, "peek_code_region", file_path="pkg/shapes.py")
    assert "needs start_line" in r.text
    err(box, "peek_code_region", file_path="pkg/shapes.py", start_line=True)
    err(box, "peek_code_region", file_path="pkg/shapes.py", start_line="1.5")
    assert box.execute("peek_code_region", None).metrics.error_type == "tool_error"

    def broken(rel: str) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(box.index, "outline", broken)
    r = err(box, "get_structural_overview", file_path="pkg/shapes.py")
    assert "failed unexpectedly (RuntimeError: disk on fire)" in r.text


def test_metrics_fit_the_turn_record(box: Toolbox) -> None:
    r = ok(box, "peek_code_region", file_path="pkg/shapes.py", start_line=1, end_line=3)
    turn = Turn(turn=1, started_at=0.0, ended_at=1.0, observation=r.text, metrics=r.metrics,
                state_changes=r.state_changes, model_calls=r.model_calls)
    back = Turn.model_validate_json(turn.model_dump_json())
    assert back.metrics.ranges == [(1, 3)]


# --------------------------------------------------------------------------- sandbox


def test_sandbox_refusals_through_the_tools(world: World, box: Toolbox, tmp_path: Path) -> None:
    outside = tmp_path / "secret.py"
    outside.write_text("TOKEN = 'x'\n")
    os.symlink(outside, world.root / "pkg" / "link.py")
    os.mkfifo(world.root / "pkg" / "pipe.py")
    (world.root / "pkg" / "blob.py").write_bytes(b"\x00\x01\x02")
    with open(world.root / "pkg" / "huge.py", "wb") as fh:
        fh.truncate(3_000_000)
    cases = {
        "../secret.py": "leaves the repository",
        str(outside): "outside the repository",
        "pkg/link.py": "points outside the repository",
        "pkg/pipe.py": "not a regular file",
        "pkg/blob.py": "binary file",
        "pkg/huge.py": "over the 2,000,000-byte limit",
        "pkg": "is a folder, not a file",
        "": "file_path",
    }
    for path, message in cases.items():
        for tool, extra in (
            ("peek_code_region", {"start_line": 1}),
            ("get_structural_overview", {}),
            ("bookmark", {"line_number": 1, "note": "n"}),
            ("explore_code", None),
        ):
            if tool == "explore_code":
                params = {"action_type": "go_to_next_block", "current_file_path": path,
                          "current_line_number": 1}
            else:
                params = {"file_path": path, **extra}
            r = box.execute(tool, params)
            assert r.metrics.error_type == "tool_error", (tool, path, r.text)
            assert message in r.text, (tool, path, r.text)
            assert "TOKEN" not in r.text
    # the absolute path of an in-world file is accepted and made relative
    r = ok(box, "peek_code_region", file_path=str(world.root / "pkg" / "shapes.py"), start_line=1,
           end_line=1)
    assert r.metrics.file == "pkg/shapes.py"


# --------------------------------------------------------------------------- state


def test_working_state_render() -> None:
    st = WorkingState()
    assert st.render() == (
        "MEMORY: No memory has been created yet.\n"
        "BOOKMARK: No bookmarks have been created yet.\n"
        "CONCLUSION: No conclusion has been reached yet."
    )


def test_working_state_render_caps_and_roundtrip(box: Toolbox) -> None:
    for i in range(1, 12):
        ok(box, "create_memory", memory_title=f"note {i}", memory_content="x " * 400,
           confidence_level="low")
    ok(box, "bookmark", file_path="pkg/shapes.py", line_number=9, note="decorator")
    ok(box, "stash_conclusion", content="partial", proceed_to_finalize=False)
    text = box.state.render()
    lines = text.splitlines()
    assert lines[0] == "MEMORY (11):"
    assert lines[1] == "  earlier: [1] note 1; [2] note 2; [3] note 3"
    assert lines[2].startswith("  [4] note 4 (low): x x x") and lines[2].endswith("…")
    assert len(lines[2]) < 300
    assert "BOOKMARK (1):\n  [1] pkg/shapes.py:9 decorator" in text
    assert "CONCLUSION (1):\n  [1] Conclusion 1: partial" in text
    again = WorkingState.from_dict(box.state.to_dict())
    assert again.render() == text


# --------------------------------------------------------------------------- CLI


def test_cli_runs_one_tool(world: World, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ADAKIT_CACHE", str(tmp_path / "cli-cache"))
    code = cli_main(["tool", str(world.root), "PKR", "--file-path", "pkg/shapes.py",
                     "--start_line", "30", "--end_line=31"])
    out = capsys.readouterr().out
    assert code == 0
    assert "31:     def diameter(self) -> float:" in out
    assert '"tool":"PKR"' in out.replace(" ", "") and '"ranges":[[30,31]]' in out.replace(" ", "")
    code = cli_main(["tool", "-q", str(world.root), "explore_code", "--action_type",
                     "go_to_definition", "--current_file_path", "pkg/service.py",
                     "--current_line_number", "1", "--symbol_name", "Circle"])
    out = capsys.readouterr().out
    assert code == 0 and "1. class Circle in pkg/shapes.py, lines 25-35" in out and "---" not in out
    code = cli_main(["tool", str(world.root), "peek_code_region", "--file_path", "missing.py",
                     "--start_line", "1"])
    assert code == 1 and "File not found" in capsys.readouterr().out


# --------------------------------------------------------------------------- real worlds


@pytest.mark.slow
def test_flask_scaffold_outline(flask_world: World, tmp_path: Path) -> None:
    box = Toolbox(flask_world, index=CodeIndex(flask_world, cache_dir=tmp_path / "c"))
    r = ok(box, "get_structural_overview", file_path="src/flask/sansio/scaffold.py")
    lines = r.text.splitlines()
    assert lines[0] == "[File: src/flask/sansio/scaffold.py | 792 lines | python]"
    assert "class Scaffold  L52-698" in lines
    # the routing methods, each range starting at its @setupmethod decorator
    for text in (
        "  def route(self, rule: str, **options: t.Any) -> t.Callable[[T_route], T_route]  L335-365",
        "  def get(self, rule: str, **options: t.Any) -> t.Callable[[T_route], T_route]  L295-301",
        "  def endpoint(self, endpoint: str) -> t.Callable[[F], F]  L435-457",
    ):
        assert text in lines
    add = next(ln for ln in lines if ln.startswith("  def add_url_rule("))
    assert add.endswith("…  L367-433")
    block = ok(box, "get_structural_overview", file_path="src/flask/sansio/scaffold.py",
               logical_block_name="Scaffold.route")
    assert "lines 335-365" in block.text and "def decorator(f: T_route) -> T_route  L360-363" in block.text


@pytest.mark.slow
def test_cli_opens_a_manifest_world(flask_world: World, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ADAKIT_CACHE", str(tmp_path / "cli-cache"))
    code = cli_main(["tool", "-q", "flask", "OVW", "--file_path", "src/flask/sansio/scaffold.py",
                     "--logical_block_name", "Scaffold.add_url_rule"])
    out = capsys.readouterr().out
    assert code == 0 and "[Block: method Scaffold.add_url_rule | src/flask/sansio/scaffold.py lines 367-433" in out


@pytest.mark.slow
def test_requests_session_definition(requests_world: World, tmp_path: Path) -> None:
    box = Toolbox(requests_world, index=CodeIndex(requests_world, cache_dir=tmp_path / "c"))
    r = ok(box, "explore_code", action_type="go_to_definition",
           current_file_path="src/requests/api.py", current_line_number=1, symbol_name="Session")
    assert r.metrics.file == "src/requests/sessions.py"
    assert r.text.splitlines()[1].startswith("1. class Session in src/requests/sessions.py, lines 395-")
    assert "395: class Session(SessionRedirectMixin):" in r.text
    refs = ok(box, "explore_code", action_type="find_all_references",
              current_file_path="src/requests/sessions.py", current_line_number=395,
              symbol_name="Session")
    assert refs.metrics.result_count > 5 and "[definition] class Session(SessionRedirectMixin):" in refs.text


@pytest.mark.slow
def test_names_offered_on_a_comment_line_of_requests_come_from_code(
        requests_world: World, tmp_path: Path) -> None:
    """Line 100 of sessions.py is a comment ("the dictionary during iteration"): its words
    were offered as names to look up, and a small model looked up ``the``."""
    assert requests_world.lines("src/requests/sessions.py")[99].lstrip().startswith("# the dictionary")
    box = Toolbox(requests_world, index=CodeIndex(requests_world, cache_dir=tmp_path / "c"))
    r = err(box, "explore_code", action_type="go_to_definition",
            current_file_path="src/requests/sessions.py", current_line_number=100)
    assert "<symbol_name>the</symbol_name>" not in r.text
    for word in ("the", "dictionary", "during", "iteration"):
        assert f" {word}," not in r.text and f" {word}." not in r.text
    assert ("Line 100 of src/requests/sessions.py holds no names in code (a comment, a string or "
            "a blank line); names on line 101: none_keys, merged_setting, items.") in r.text
    assert ("<current_line_number>101</current_line_number><symbol_name>none_keys</symbol_name>"
            in r.text)
    # a string argument on a code line is not a name either
    r = err(box, "explore_code", action_type="go_to_definition",
            current_file_path="src/requests/__init__.py", current_line_number=219)
    assert "Names on line 219 of src/requests/__init__.py: warnings, simplefilter, FileModeWarning, append." in r.text


def test_names_offered_skip_comments_and_strings(tmp_path: Path) -> None:
    root = tmp_path / "w"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text(
        "def build(config):\n"
        "    # consult the lookaside table before tokenising\n"
        "\n"
        "    label = 'render the page'  # trailing words\n"
        "    return f\"{label} {config.name}\"\n",
        encoding="utf-8")
    (root / "notes.txt").write_text("plain words here\n", encoding="utf-8")
    w = World(root, name="names", version="0")
    box = Toolbox(w, index=CodeIndex(w, cache_dir=tmp_path / "c", workers=1))
    assert box.index.identifiers_on_line("pkg/mod.py", 1) == ["build", "config"]
    assert box.index.identifiers_on_line("pkg/mod.py", 2) == []  # a comment
    assert box.index.identifiers_on_line("pkg/mod.py", 4) == ["label"]  # string and comment left out
    assert box.index.identifiers_on_line("pkg/mod.py", 5) == ["label", "config", "name"]  # f-string code
    assert box.index.identifiers_on_line("pkg/mod.py", 9) == []  # past the end
    assert box.index.identifiers_on_line("notes.txt", 1) == []  # not an indexed language
    r = err(box, "explore_code", action_type="find_all_references", current_file_path="pkg/mod.py",
            current_line_number=2)
    assert "Line 2 of pkg/mod.py holds no names in code" in r.text
    assert "names on line 1: build, config." in r.text  # distance 1: line 3 is blank, line 1 first
    assert "<current_line_number>1</current_line_number><symbol_name>build</symbol_name>" in r.text
    for word in ("consult", "lookaside", "table", "tokenising"):
        assert word not in r.text
    r = err(box, "explore_code", action_type="go_to_definition", current_file_path="pkg/mod.py",
            current_line_number=4)
    assert "Names on line 4 of pkg/mod.py: label." in r.text and "render" not in r.text
    r = err(box, "explore_code", action_type="go_to_definition", current_file_path="notes.txt",
            current_line_number=1)
    assert "Names on line" not in r.text and "plain" not in r.text


def test_name_hints_line_keeps_the_words_local_v3_was_recorded_with(tmp_path: Path) -> None:
    """``name_hints: line`` offers every word of the raw line (comments too), as local-v3's
    runs saw it, so that corpus replays exactly; the default offers names in code only."""
    root = tmp_path / "w"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text(
        "def build(config):\n    # consult the lookaside table\n    return config\n", encoding="utf-8")
    w = World(root, name="names", version="0")
    index = CodeIndex(w, cache_dir=tmp_path / "c", workers=1)
    legacy = Toolbox(w, index=index, name_hints="line")
    r = err(legacy, "explore_code", action_type="go_to_definition", current_file_path="pkg/mod.py",
            current_line_number=2)
    assert "Names on line 2 of pkg/mod.py: consult, the, lookaside, table." in r.text
    assert "<symbol_name>consult</symbol_name>" in r.text
    r = err(Toolbox(w, index=index), "explore_code", action_type="go_to_definition",
            current_file_path="pkg/mod.py", current_line_number=2)
    assert "consult" not in r.text and "names on line 3: config." in r.text
    with pytest.raises(ValueError, match="name_hints must be one of code, line"):
        Toolbox(w, index=index, name_hints="words")


def test_go_to_definition_prefers_the_enclosing_class(box: Toolbox) -> None:
    inside_circle = ok(box, "explore_code", action_type="go_to_definition",
                       current_file_path="pkg/shapes.py", current_line_number=32, symbol_name="area")
    assert inside_circle.text.splitlines()[1] == "1. method Circle.area in pkg/shapes.py, lines 34-35"
    inside_shape = ok(box, "explore_code", action_type="go_to_definition",
                      current_file_path="pkg/shapes.py", current_line_number=22, symbol_name="area")
    assert inside_shape.text.splitlines()[1] == "1. method Shape.area in pkg/shapes.py, lines 18-19"
    assert "2. method Circle.area in pkg/shapes.py, lines 34-35" in inside_shape.text


def test_block_doc_comments_rust_and_typescript(world: World, box: Toolbox) -> None:
    (world.root / "core" / "src" / "doc.rs").write_text(
        "/// Makes points.\n/// Second line.\n#[inline]\npub fn make() -> u8 {\n    helper(1)\n}\n")
    (world.root / "web" / "doc.ts").write_text(
        "/**\n * Adds things.\n */\nexport function add(a: number) {\n  return a;\n}\n")
    r = ok(box, "get_structural_overview", file_path="core/src/doc.rs", logical_block_name="make")
    assert r.text.splitlines()[:4] == [
        "[Block: function make | core/src/doc.rs lines 3-6 (4 lines of 6) | rust]",
        "Signature: pub fn make() -> u8", "Doc: Makes points.", "Calls (by name): helper"]
    r = ok(box, "get_structural_overview", file_path="web/doc.ts", logical_block_name="add")
    assert "Doc: Adds things." in r.text and "lines 4-6" in r.text


# --------------------------------------------------- hardening (issue 17: adversarial probe)


def test_refusals_are_clear_and_show_no_host_path(world: World, box: Toolbox, tmp_path: Path) -> None:
    os.symlink("loop_b.py", world.root / "pkg" / "loop_a.py")
    os.symlink("loop_a.py", world.root / "pkg" / "loop_b.py")
    cases = {
        "pkg/" + "x" * 300 + ".py": "over the 255-byte limit for a file or folder name",
        "pkg/loop_a.py": "'pkg/loop_a.py' runs into a loop of symbolic links; refused.",
    }
    for path, message in cases.items():
        for tool, extra in (("peek_code_region", {"start_line": 1}),
                            ("get_structural_overview", {}),
                            ("bookmark", {"line_number": 1, "note": "n"})):
            r = err(box, tool, file_path=path, **extra)
            assert message in r.text, (tool, r.text)
            assert "unexpectedly" not in r.text and str(tmp_path) not in r.text
    r = err(box, "get_hint_on_snippet", file_path="pkg/shapes.py", code_range="1-" + "9" * 5000,
            description_of_confusion="?")
    assert "too large to be a line number" in r.text and "unexpectedly" not in r.text
    r = err(box, "peek_code_region", file_path="pkg/shapes.py", start_line="9" * 5000)
    assert r.text == "peek_code_region: start_line is too large to be a line number (5,000 digits)."


def test_unexpected_errors_show_no_host_path(box: Toolbox, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(rel: str) -> None:
        raise OSError(36, "File name too long", str(box.world.root / rel))

    monkeypatch.setattr(box.index, "outline", broken)
    r = err(box, "get_structural_overview", file_path="pkg/shapes.py")
    assert r.text == ("get_structural_overview failed unexpectedly (OSError: File name too long). "
                      "Try a different call.")


def test_explore_code_says_why_the_current_file_was_refused(world: World, box: Toolbox) -> None:
    os.mkfifo(world.root / "pkg" / "pipe.py")
    os.symlink("loop.py", world.root / "pkg" / "loop.py")
    with open(world.root / "pkg" / "huge.py", "wb") as fh:
        fh.truncate(3_000_000)
    cases = {
        "pkg/pipe.py": "'pkg/pipe.py' is not a regular file; refused.",
        "pkg/loop.py": "'pkg/loop.py' runs into a loop of symbolic links; refused.",
        "pkg/huge.py": "'pkg/huge.py' is 3,000,000 bytes, over the 2,000,000-byte limit",
        "pkg": "'pkg' is a folder, not a file.",
    }
    for path, reason in cases.items():
        r = ok(box, "explore_code", action_type="go_to_definition", current_file_path=path,
               current_line_number=1, symbol_name="Counter")
        first = r.text.splitlines()[0]
        assert first.startswith("(current_file_path was refused: " + reason), first
        assert first.endswith(". The whole repository was searched.)") and "not found" not in first
        assert "class Counter in web/util.js" in r.text


def test_hard_links_to_files_outside_are_never_read(
    world: World, box: Toolbox, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ADAKIT_CACHE", str(tmp_path / "cli-cache"))
    secret = tmp_path / "secret.py"
    secret.write_text("def leaked_token():\n    return 'TOKEN'\n")
    os.link(secret, world.root / "pkg" / "leak.py")
    for tool, params in (
        ("peek_code_region", {"file_path": "pkg/leak.py", "start_line": 1}),
        ("bookmark", {"file_path": "pkg/leak.py", "line_number": 2, "note": "n"}),
        ("get_structural_overview", {"file_path": "pkg/leak.py"}),
    ):
        r = err(box, tool, **params)
        assert "is a hard link to a file that also has a name outside the repository" in r.text
        assert "TOKEN" not in r.text
    for action in ("find_all_references", "go_to_definition"):
        r = ok(box, "explore_code", action_type=action, current_file_path="pkg/service.py",
               current_line_number=1, symbol_name="leaked_token")
        assert r.metrics.result_count == 0 and "TOKEN" not in r.text and "leak.py" not in r.text
    # the documented opt-in, from the shell too
    assert cli_main(["tool", "-q", str(world.root), "PKR", "--file_path", "pkg/leak.py",
                     "--start_line", "1"]) == 1
    assert "hard link" in capsys.readouterr().out
    assert cli_main(["tool", "-q", "--hard-links", "any", str(world.root), "PKR", "--file_path",
                     "pkg/leak.py", "--start_line", "1"]) == 0
    assert "return 'TOKEN'" in capsys.readouterr().out


def test_the_host_path_guard_finds_temporary_and_home_folders() -> None:
    import tempfile

    from host_paths import host_paths_in

    tmp = os.path.realpath(tempfile.gettempdir())
    home = os.path.expanduser("~")
    assert host_paths_in(f"cannot resolve ({tmp}/w/loop)") == [tmp + "/"]
    assert host_paths_in(f"see {home}/.cache/x") == [home.rstrip("/") + "/"]
    # what the agent wrote itself is not a leak
    assert host_paths_in(f"'{tmp}/x.py' is outside the repository", [f"{tmp}/x.py"]) == []
    assert host_paths_in("File: src/tmp/app.py | 10 lines") == []


def test_unexpected_errors_with_a_stand_in_world_are_still_observations() -> None:
    from adakit.workbench.explorer import _NoWorld

    box = Toolbox(_NoWorld(), index=_NoWorld())  # type: ignore[arg-type]
    r = box.execute("peek_code_region", {"file_path": "a.py", "start_line": 1})
    assert r.metrics.error_type == "tool_error"
    assert r.text.startswith("peek_code_region failed unexpectedly (RuntimeError: replaying")
