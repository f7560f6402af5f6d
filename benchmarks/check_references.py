"""Check that find_all_references answers as before: texts across checkouts, partial parses.

Three checks of the reference search (not a bench: `make bench` does not run it):

- ``texts OUT [WORLD ...]`` writes the observation text of ``explore_code
  find_all_references`` for a fixed, seeded set of queries per world (defined names, common
  words, qualified names, a current file or none) in three index states: a fresh full-tier
  index read from disk (a study's start), the same asked again (warm), and a lexical-tier
  index (whole-file parses). Run it once per checkout, each with ``PYTHONPATH`` set to that
  checkout (otherwise the installed adakit is imported), then ``diff A B``.
- ``units [WORLD ...]`` parses every unit of every file's layout alone (with the header and
  tail it needs), every fourth unit together and random quarters, and checks that every word
  in what was parsed gets the same answer (identifier or not, kind, position) as in the whole
  file's tree. A path instead of a world name checks the sources under that folder.
- ``cython [WORLD ...]`` reads every word of every Cython file with the lexer the search uses
  (``adakit.apparatus.cython_lexer``) and with the Python grammar it used before, and counts
  where they agree (identifier or not; role) and the disagreements by pair of roles.

    PYTHONPATH=/work/main python benchmarks/check_references.py texts /tmp/old.json flask
    PYTHONPATH=. python benchmarks/check_references.py texts /tmp/new.json flask
    python benchmarks/check_references.py diff /tmp/old.json /tmp/new.json
    PYTHONPATH=. python benchmarks/check_references.py units flask scikit-learn
    python benchmarks/check_references.py cython scikit-learn
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

import adakit
from adakit.apparatus.code_index import CodeIndex
from adakit.apparatus.tools import Toolbox
from adakit.apparatus.world import World, open_world

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "code"
COMMON = ["self", "os", "np", "fit", "n_classes", "delayed", "None", "str", "String", "new",
          "Result", "Ok", "serde", "json", "request", "app", "test", "value", "data", "x", "i",
          "get", "clone", "zzz_nothing_here", "Shape", "area_of"]
_WORD = re.compile(rb"[A-Za-z0-9_$]+")


def world_of(name: str) -> World:
    """A manifest world, the code fixtures (``fixtures``) or a folder (a path)."""
    if name == "fixtures":
        return World(FIXTURES, name="fixtures")
    if "/" in name:
        return World(Path(name).resolve(), name=Path(name).name)
    return open_world(name)


def queries(index: CodeIndex, n: int, seed: int) -> list[tuple[str, str]]:
    """(symbol, current file) pairs: sampled defined names, common words, qualified names."""
    names = index.defined_names()
    rng = random.Random(seed)
    picked = rng.sample(names, min(n, len(names)))
    files = index.source_files()
    out = [(sym, rng.choice(files) if i % 3 else "") for i, sym in enumerate(picked + COMMON)]
    return out + [(f"Thing.{sym}", rng.choice(files)) for sym in picked[:10]]


def texts(worlds: list[str], n: int) -> dict[str, list]:
    """Observation text and result count per (world, index state, round, symbol, file)."""
    out: dict[str, list] = {}
    for name in worlds:
        world = world_of(name)
        with tempfile.TemporaryDirectory() as tmp:
            CodeIndex(world, cache_dir=tmp).build(parse=True)
            qs = queries(CodeIndex(world, cache_dir=tmp), n, 7)
            for state, rounds in (("full", ("first", "warm")), ("lexical", ("first",))):
                index = (CodeIndex(world, cache_dir=tmp) if state == "full"
                         else CodeIndex(world, use_disk_cache=False))
                index.build()
                box = Toolbox(world, index=index)
                for rnd in rounds:
                    for sym, first in qs:
                        res = box.execute("explore_code", {
                            "action_type": "find_all_references", "current_file_path": first,
                            "current_line_number": 1, "symbol_name": sym})
                        out[f"{name}|{state}|{rnd}|{sym}|{first}"] = [res.text,
                                                                      res.metrics.result_count]
        print(f"{name}: {len(qs)} queries x 3", file=sys.stderr)
    return out


def _answer(root, pos: int, n: int, family: str) -> tuple | None:
    from adakit.apparatus.code_index import reference_at

    found = reference_at(root, pos, n, family)
    return None if found is None else (found[1], tuple(found[0].start_point))


def units(worlds: list[str]) -> int:
    """Words whose answer from a partial parse differs from the whole file's (printed)."""
    from adakit.apparatus.code_index import _family, grammar

    differ = words = trials = 0
    for name in worlds:
        index = CodeIndex(world_of(name), use_disk_cache=False, workers=1)
        index.build(parse=True)
        for rel in index.source_files():
            ent = index._entries.get(rel)
            if ent is None or ent.groups is None:
                continue
            src = index.source(rel)
            family = _family(ent.grammar)
            whole = grammar(ent.grammar).parser.parse(src.data).root_node
            starts = ent.groups[1::3]
            rng = random.Random(rel)
            picks = [[s] for s in starts] + [starts[j::4] for j in range(4)]
            picks += [[s for s in starts if rng.random() < 0.25] for _ in range(4)]
            for hits in filter(None, picks):
                index._trees.pop(rel, None)
                part = index._ref_tree(rel, src, hits)
                parsed = index._trees[rel].groups
                if part is None or parsed is None:
                    continue  # parsed whole
                trials += 1
                for i in parsed:
                    end = starts[i + 1] if i + 1 < len(starts) else len(src.data)
                    for m in _WORD.finditer(src.data, starts[i], end):
                        if m.group()[:1].isdigit():
                            continue
                        words += 1
                        pos, n = m.start(), m.end() - m.start()
                        got = _answer(part.root_node, pos, n, family)
                        want = _answer(whole, pos, n, family)
                        if got != want:
                            differ += 1
                            print(f"DIFF {name} {rel} {m.group()!r} at {pos}: {got} != {want}")
        print(f"{name}: checked", file=sys.stderr)
    print(f"{trials} partial parses, {words:,} words checked, {differ} differ")
    return differ


def cython(worlds: list[str]) -> Counter:
    """Agreement of the lexer and the Python grammar on every word of the Cython files
    (printed): counts under "identifier", "role" and (grammar's role, lexer's role)."""
    from adakit.apparatus.code_index import cython_symbols, grammar, word_hits
    from adakit.apparatus.cython_lexer import CodeView, classify_hits

    counts: Counter = Counter()
    for name in worlds:
        world = world_of(name)
        for rel in world.files():
            if not rel.endswith((".pyx", ".pxd", ".pxi")):
                continue
            data = (world.root / rel).read_bytes()
            root = grammar("cython").parser.parse(data).root_node
            view = CodeView(data)
            symbols = cython_symbols(data)
            for word in sorted(set(_WORD.findall(data))):
                if word[:1].isdigit():
                    continue
                sym = word.decode()
                hits = word_hits(data, sym)
                rows = [s[7] for s in symbols if s[0] == sym]
                for pos, got in zip(hits, classify_hits(view, sym, hits, rows), strict=True):
                    lexed = None if got is None else got[1]
                    parsed = _answer(root, pos, len(word), "cython")
                    role = None if parsed is None else parsed[0]
                    counts["words"] += 1
                    counts["identifier"] += (role is None) == (lexed is None)
                    counts["role"] += role == lexed
                    if role != lexed:
                        counts[(role, lexed)] += 1
    print(f"{counts['words']:,} words of Cython files: identifier or not agrees for "
          f"{counts['identifier']:,}, the role for {counts['role']:,}")
    for key, n in counts.most_common():
        if isinstance(key, tuple):
            print(f"  grammar {key[0]!s:>10}  lexer {key[1]!s:>10}  {n:6,}")
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("texts", help="write the reference texts of this checkout")
    t.add_argument("out", type=Path)
    t.add_argument("worlds", nargs="*", default=["fixtures", "flask"])
    t.add_argument("--names", type=int, default=120, help="defined names sampled per world")
    d = sub.add_parser("diff", help="compare two files written by texts")
    d.add_argument("a", type=Path)
    d.add_argument("b", type=Path)
    u = sub.add_parser("units", help="partial parses against whole files, word by word")
    u.add_argument("worlds", nargs="*", default=["fixtures", "flask"])
    c = sub.add_parser("cython", help="the Cython lexer against the Python grammar, word by word")
    c.add_argument("worlds", nargs="*", default=["fixtures"])
    args = ap.parse_args(argv)
    if args.cmd == "cython":
        cython(args.worlds)
        return 0
    if args.cmd == "texts":
        print(f"adakit from {Path(adakit.__file__).parent}", file=sys.stderr)
        args.out.write_text(json.dumps(texts(args.worlds, args.names), sort_keys=True))
        return 0
    if args.cmd == "diff":
        a, b = (json.loads(p.read_text()) for p in (args.a, args.b))
        if a.keys() != b.keys():
            print("the two files hold different queries", file=sys.stderr)
            return 2
        changed = sorted(k for k in a if a[k] != b[k])
        for key in changed[:20]:
            print(f"differs: {key}")
        refs = sum(v[1] or 0 for v in a.values())
        print(f"{len(a)} queries ({refs:,} references in all): {len(changed)} differ")
        return 1 if changed else 0
    return 1 if units(args.worlds) else 0


if __name__ == "__main__":
    sys.exit(main())
