"""References in Cython files read by the lexer (adakit.apparatus.cython_lexer), and the
vocabulary that lets a reference search skip files without the word (code_index)."""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import pytest

from adakit.apparatus.code_index import CodeIndex, vocabulary, word_hits
from adakit.apparatus.cython_lexer import MAX_STATEMENT_LINES, CodeView, classify_hits, code_view
from adakit.apparatus.world import World

FIXTURES = Path(__file__).parent / "fixtures" / "code"

SOURCE = b'''# cython: boundscheck=False
"""A module docstring that names target and other words."""
from libc.math cimport target, log
from pkg.mod import (
    first,
    target as alias,
)
import target_module.target

cdef double target(double x) noexcept nogil:
    # a comment about target
    return x + helper(target, key=target) + obj.target + obj.target(1)

cdef class Thing(target):
    cdef public double value

    def method(self, int n=target,
               double w=1.0):
        s = "target in a string" + r'target' + f"{target} and target"
        t = b"""
        target inside a bytes block
        """
        return n if target else None

cdef double (*fn_ptr)(double) noexcept nogil
ctypedef double (*target_fn)(double)
cpdef cnp.ndarray[float64_t, ndim=1, mode="c"] build(target=1.0):
    return target
cdef int q = compute(target=3, other=target == 4)
from pkg2 cimport other, \\
    target
'''


def _roles(source: bytes, name: str, definition_rows: list[int] = ()) -> list[tuple[int, str]]:
    """(1-based row, role) of every word-bounded hit of ``name`` that is a reference."""
    view = CodeView(source)
    hits = word_hits(source, name)
    found = classify_hits(view, name, hits, definition_rows)
    for pos, got in zip(hits, found, strict=True):
        assert got is None or got[0] == source.count(b"\n", 0, pos)  # the row, 0-based
    return [(got[0] + 1, got[1]) for got in found if got is not None]


def test_code_view_blanks_comments_and_strings_only() -> None:
    code = code_view(SOURCE)
    assert len(code) == len(SOURCE) and code.count(b"\n") == SOURCE.count(b"\n")
    lines = code.decode().splitlines()
    assert lines[0].strip() == ""  # the comment
    assert lines[1].strip() == ""  # the docstring, its quotes and all
    assert "a comment" not in code.decode() and "in a string" not in code.decode()
    assert "inside a bytes block" not in code.decode()
    row = next(i for i, ln in enumerate(SOURCE.decode().splitlines()) if "in a string" in ln)
    # string prefixes (r, f) are blanked with their literal; inside an f-string's braces is code
    assert re.sub(r"\s+", " ", lines[row]).strip() == "s = + + target"


@pytest.mark.parametrize(("source", "kept"), [
    (b"a = 'it''s' # x\n", b"a ="),
    (b'a = "esc \\" quote" + b\n', b"a = + b"),
    (b"a = '''multi\nline''' + c\n", b"a = \n + c"),
    (b"a = 'unterminated\nb = 1\n", b"a = \nb = 1"),
    (b'a = f"{{literal}} {value!r}"\n', b"a = value"),
    (b'a = f"{x:{width}.{p}f} {d[\'k\']} {y=}"\n', b"a = x width p d[ ] y"),  # nested fields
    (b'a = f"""{\n  total\n}"""\n', b"a = \n total"),  # a field over lines
    (b"name'x' + 2\n", b"name + 2"),  # 'name' is not a string prefix
])
def test_code_view_literals(source: bytes, kept: bytes) -> None:
    code = code_view(source)
    assert len(code) == len(source)
    assert re.sub(rb"[ ]+", b" ", code).strip() == kept


def test_roles_of_each_rule() -> None:
    assert _roles(SOURCE, "target", [10]) == [
        (3, "import"),         # from libc.math cimport target
        (6, "import"),         # inside a parenthesised from-import
        (8, "import"),         # import target_module.target
        (10, "definition"),    # cdef double target(...): the symbol's row
        (12, "reference"),     # helper(target, ...)
        (12, "reference"),     # key=target: the value
        (12, "attribute"),     # obj.target
        (12, "call"),          # obj.target(1)
        (14, "base"),          # cdef class Thing(target)
        (17, "reference"),     # int n=target: a parameter's default
        (19, "reference"),     # f"{target} ..." (the rest of the line is strings)
        (23, "reference"),
        (27, "reference"),     # build(target=1.0): a parameter, after a buffer type's '='s
        (28, "reference"),
        (29, "keyword"),       # compute(target=3, ...)
        (29, "reference"),     # other=target == 4
        (31, "import"),        # continued by a backslash from an import
    ]  # never on rows 1, 2, 11, 20-22 (a comment, the docstring, strings, a bytes block)
    assert _roles(SOURCE, "key") == [(12, "keyword")]
    assert _roles(SOURCE, "other") == [(29, "keyword"), (30, "import")]
    assert _roles(SOURCE, "helper") == [(12, "call")]
    assert _roles(SOURCE, "alias") == [(6, "import")]
    assert _roles(SOURCE, "return") == []  # a keyword is no reference
    assert [role for row, role in _roles(SOURCE, "double") if row in (25, 26)] == [
        "reference"] * 4  # 'double (*f)(double)': a type before a function pointer, no call
    assert _roles(SOURCE, "build", [27]) == [(27, "definition")]
    assert _roles(SOURCE, "fn_ptr") == [(25, "reference")]


def test_a_definition_row_counts_once() -> None:
    src = b"cdef int f(int f):\n    return f\n"
    assert _roles(src, "f", [1]) == [(1, "definition"), (1, "reference"), (2, "reference")]


def test_an_unbalanced_bracket_spoils_no_later_statement() -> None:
    """A closer without an opener counts for nothing, and a statement at column 0 ends any
    bracket left open above it; a statement runs back at most MAX_STATEMENT_LINES lines."""
    stray = b"x = f(1))\nfrom pkg cimport (\n    target,\n)\n"
    assert _roles(stray, "target") == [(3, "import")]
    unclosed = b"import os\nx = f(1,\n" + b"    2,\n" * 5 + b"cdef int y = target + 1\n"
    assert _roles(unclosed, "target") == [(8, "reference")]
    body = b"".join(b"    name_%d,\n" % i for i in range(MAX_STATEMENT_LINES - 10))
    near = b"from pkg cimport (\n" + body + b"    target)\n"
    assert _roles(near, "target") == [(near.count(b"\n"), "import")]
    far = b"from pkg cimport (\n" + body * 2 + b"    target)\n"
    assert _roles(far, "target") == [(far.count(b"\n"), "reference")]  # its own line


def test_calls_with_starred_arguments_and_class_keywords() -> None:
    src = (b"y = zip(*arrays)\nz = build(**options)\ncdef double (*fp)(double)\n"
           b"class A(Base, metaclass=Meta):\n    pass\n")
    assert _roles(src, "zip") == [(1, "call")]
    assert _roles(src, "build") == [(2, "call")]
    assert _roles(src, "double") == [(3, "reference"), (3, "reference")]
    assert _roles(src, "Base") == [(4, "base")]
    assert _roles(src, "metaclass") == [(4, "keyword")]
    assert _roles(src, "Meta") == [(4, "reference")]


def test_words_that_are_no_identifier() -> None:
    src = "x = 1 + caf\u00e9x + \u00e9x\ncdef int n\n".encode()
    assert _roles(src, "x") == [(1, "reference")]  # not the x ending caf\u00e9x or \u00e9x
    assert _roles(src, "1") == []
    assert _roles(src, "cdef") == []  # a Cython keyword
    assert _roles("\u00e9t\u00e9 = 1\n".encode(), "\u00e9t\u00e9") == [(1, "reference")]


def test_cython_references_through_the_index(world: World, tmp_path: Path) -> None:
    index = CodeIndex(world, cache_dir=tmp_path / "cache", workers=1)
    got = {(r.file, r.line): (r.kind, r.column) for r in index.search_references("SplitInfo").refs}
    assert got[("cy/_splitting.pyx", 7)] == ("definition", 12)  # cdef class SplitInfo:
    assert got[("cy/_splitting.pyx", 29)] == ("base", 38)  # (SplitInfo):
    assert got[("cy/_splitting.pxd", 31)][0] == "definition"
    refs = index.search_references("log").refs
    assert ("cy/_splitting.pyx", 4, "import") in {(r.file, r.line, r.kind) for r in refs}
    assert ("cy/_splitting.pyx", 38, "call") in {(r.file, r.line, r.kind) for r in refs}
    # 'gain' in the docstring-free code only; 'loss' of the comment on line 37 never counts
    assert all(r.line != 37 for r in index.search_references("loss").refs)
    assert index.parse_count == 0  # no tree was needed for Cython references


# --------------------------------------------------------------------------- vocabulary


def test_vocabulary_answers_as_word_hits() -> None:
    """For every word of every fixture file, and for pieces of words, the vocabulary holds
    the word exactly when word_hits finds it."""
    rng = random.Random(7)
    checked = 0
    for path in sorted(p for p in FIXTURES.rglob("*") if p.is_file()):
        data = path.read_bytes()
        vocab = vocabulary(data)
        words = set(re.findall(rb"[A-Za-z0-9_$]+", data))
        pieces = {w[: rng.randint(1, len(w))] for w in words} | {w + b"x" for w in words}
        for word in sorted(words | pieces):
            name = word.decode()
            assert (b" " + word + b" " in vocab) == bool(word_hits(data, name)), (path, name)
            checked += 1
    assert checked > 1000
    assert vocabulary(b"") == b" " and vocabulary(b"a.b(c_1, $d)") == b" $d a b c_1 "


def test_a_search_reads_only_files_that_hold_the_word(world: World, tmp_path: Path) -> None:
    index = CodeIndex(world, cache_dir=tmp_path / "cache", workers=1)
    index.build(parse=True)
    assert index._sources == {}
    res = index.search_references("SplitInfo")
    assert set(index._sources) == {"cy/_splitting.pyx", "cy/_splitting.pxd"}
    assert res.files_searched == len(index.source_files())


def test_a_file_changed_after_the_build_is_read_again(world: World, tmp_path: Path) -> None:
    index = CodeIndex(world, cache_dir=tmp_path / "cache", workers=1)
    index.build(parse=True)
    rel = next(f for f in index.source_files() if f.endswith(".py"))
    assert index.search_references("brand_new_name").total == 0
    path = world.root / rel
    st = path.stat()
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("\nbrand_new_name = 1\n")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    res = index.search_references("brand_new_name")
    assert res.per_file == {rel: 1}


def test_vocabularies_survive_the_disk_cache(world: World, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    built = CodeIndex(world, cache_dir=cache, workers=1)
    built.build(parse=True)
    again = CodeIndex(world, cache_dir=cache, workers=1)
    stats = again.build()
    assert stats.reused == stats.files
    for rel, ent in built._entries.items():
        assert again._entries[rel].words == ent.words is not None
    assert again.search_references("SplitInfo").per_file == built.search_references(
        "SplitInfo").per_file
    assert set(again._sources) == {"cy/_splitting.pyx", "cy/_splitting.pxd"}


def test_a_damaged_vocabulary_in_the_cache_is_not_trusted(world: World, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    built = CodeIndex(world, cache_dir=cache, workers=1)
    built.build(parse=True)
    path = built.cache_path()
    blob = json.loads(path.read_text())
    for rec in blob["files"].values():
        if rec[4] is not None:
            rec[4][4] = "no spaces around"  # not a vocabulary's shape
    path.write_text(json.dumps(blob))
    again = CodeIndex(world, cache_dir=cache, workers=1)
    again.build()
    assert all(ent.words is None for ent in again._entries.values())
    assert again.search_references("SplitInfo").per_file == built.search_references(
        "SplitInfo").per_file
    assert len(again._sources) == len(again.source_files())  # every file read, as before


def test_every_word_is_found_alike_with_and_without_vocabularies(
        world: World, tmp_path: Path) -> None:
    """For every word of the fixtures (and pieces of words), a search that skips files by
    their vocabularies finds what a search reading every file finds."""
    skipping = CodeIndex(world, cache_dir=tmp_path / "a", workers=1)
    skipping.build(parse=True)
    reading = CodeIndex(world, cache_dir=tmp_path / "b", workers=1)
    reading.build(parse=True)
    for ent in reading._entries.values():
        ent.words = None
    words: set[str] = set()
    for rel in skipping.source_files():
        words |= {w.decode() for w in re.findall(rb"[A-Za-z0-9_$]+",
                                                 (world.root / rel).read_bytes())}
    words |= {w[:-1] for w in words if len(w) > 1}
    assert len(words) > 300
    for word in sorted(words):
        a, b = skipping.search_references(word), reading.search_references(word)
        assert (a.total, a.per_file, a.refs) == (b.total, b.per_file, b.refs), word


def test_names_outside_the_vocabulary_alphabet_are_still_searched(
        world: World, tmp_path: Path) -> None:
    index = CodeIndex(world, cache_dir=tmp_path / "cache", workers=1)
    index.build(parse=True)
    assert index.search_references("Split.Info").total == 0
    assert len(index._sources) == len(index.source_files())  # read, not skipped


def test_the_python_grammar_reading_stays_available(world: World, tmp_path: Path) -> None:
    """cython_references="python" reads Cython references off the Python grammar's tree, as
    before the lexer: the cimport line is then no import, and the files are parsed."""
    old = CodeIndex(world, cache_dir=tmp_path / "old", workers=1, cython_references="python")
    new = CodeIndex(world, cache_dir=tmp_path / "new", workers=1)
    kinds = {idx: {(r.file, r.line): r.kind for r in idx.search_references("log").refs}
             for idx in (old, new)}
    assert kinds[new][("cy/_splitting.pyx", 4)] == "import"
    assert kinds[old][("cy/_splitting.pyx", 4)] != "import"
    assert old.parse_count > 0 and new.parse_count == 0
    with pytest.raises(ValueError, match="cython_references"):
        CodeIndex(world, cython_references="grammar")
