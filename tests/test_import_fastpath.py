"""The importer's fast path (issue 27, performance) changes nothing that is imported.

Two paths are compared on every importer fixture (and on generated benchmark files): the run
lines :func:`record_lines` writes (orjson, without validated records where the values already
have their fields' types) against the validated records of :func:`build_records`, with and
without the flask world; and the files read with msgspec against the same files read by the
json module alone, including the texts where the two parsers differ (integers beyond 64 bits,
NaN, lone surrogates, deep nesting)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from adakit.importers import base, formats
from adakit.importers.base import (
    BadInput,
    SourceStep,
    Target,
    Trajectory,
    build_records,
    record_lines,
)
from adakit.record import Sidechain, SourceInfo

FIXTURES = Path(__file__).parent / "fixtures"
SOURCES = [FIXTURES / "agent_cli", FIXTURES / "trajectories", FIXTURES / "trajectories_shapes"]
BENCH = Path(__file__).parent.parent / "benchmarks"


def _runs(paths: list[Path]) -> list[tuple[str, str, object, Path]]:
    """(format, sha256, parsed content, file) of every run in the files under ``paths``."""
    files, _ = formats.discover(paths, formats.AUTO)
    out = []
    for path in files:
        try:
            sha, fmt, data, _ = formats.read_source(path, formats.AUTO)
        except BadInput:
            continue
        items = data if isinstance(data, formats.Records) else [(str(path), sha, data)]
        for _, rec_sha, rec in items:
            if not isinstance(rec, BadInput):
                out.append((fmt, rec_sha, rec, path))
    return out


def _both(fmt: str, sha: str, data: object, path: Path, target: Target) -> tuple[bytes, bytes] | None:
    """The run file's bytes through each path (None: the reader refuses the run)."""
    module = formats.FORMATS[fmt]
    texts = []
    for build in (record_lines, build_records):
        content = module.with_companions(path, data) if hasattr(module, "with_companions") else data
        try:
            traj = module.parse(content, path.name)
        except BadInput:
            return None
        source = SourceInfo(format=fmt, file=str(path), sha256=sha, agent=traj.agent,
                            timing=traj.timing)  # type: ignore[arg-type]
        header, turns, end = build(traj, source, target)
        lines = [t if isinstance(t, bytes) else t.model_dump_json().encode() + b"\n" for t in turns]
        texts.append(b"".join([header.model_dump_json().encode() + b"\n", *lines,
                               end.model_dump_json().encode() + b"\n"]))
    return texts[0], texts[1]


@pytest.fixture
def counted(monkeypatch):
    """How many turns went through the validated record while writing lines."""
    calls = {"model": 0}
    original = base._TurnParts.model

    def model(self):
        calls["model"] += 1
        return original(self)

    monkeypatch.setattr(base._TurnParts, "model", model)
    return calls


def _check_fixtures(target: Target, counted: dict[str, int]) -> None:
    runs = _runs(SOURCES)
    assert len(runs) >= 20
    turns = 0
    for fmt, sha, data, path in runs:
        pair = _both(fmt, sha, data, path, target)
        if pair is None:
            continue
        fast, validated = pair
        assert fast == validated, f"{path} ({fmt}): the fast lines differ from the records"
        turns += fast.count(b"\n") - 2
    # build_records validates every turn; record_lines only the few with looser types
    assert counted["model"] - turns < turns // 2, "the fast path was hardly taken"


@pytest.mark.pure_python
def test_fast_lines_equal_the_validated_records_without_a_world(counted):
    _check_fixtures(Target(), counted)


@pytest.mark.pure_python
def test_fast_lines_equal_the_validated_records_with_the_flask_world(flask_world, counted):
    from adakit.importers.batch import resolve_world

    world, info = resolve_world("flask", fetch=False)
    _check_fixtures(Target(world=world, world_info=info), counted)


@pytest.mark.pure_python
def test_fast_lines_equal_the_validated_records_on_benchmark_files(tmp_path, counted):
    sys.path.insert(0, str(BENCH))
    try:
        import bench_import
    finally:
        sys.path.remove(str(BENCH))
    bench_import.generate_claude(tmp_path / "cc", 4, 200)
    bench_import.generate(tmp_path / "swe", 4, 30)
    runs = _runs([tmp_path])
    assert {fmt for fmt, *_ in runs} == {"claude-code", "swe-agent"} and len(runs) == 8
    turns = 0
    for fmt, sha, data, path in runs:
        fast, validated = _both(fmt, sha, data, path, Target())  # type: ignore[misc]
        assert fast == validated, path
        turns += fast.count(b"\n") - 2
    assert counted["model"] == turns  # build_records' own: no generated turn left the fast path


def _traj(**step: object) -> Trajectory:
    plain = SourceStep(tool="bash", args={"command": "cat src/a.py"}, observation="x = 1\n")
    return Trajectory(steps=[plain, SourceStep(**step)], agent="test", timing="execution")  # type: ignore[arg-type]


SOURCE = SourceInfo(format="generic", file="/tmp/x.jsonl", sha256="0" * 64)


@pytest.mark.pure_python
@pytest.mark.parametrize("step", [
    {"tool": "bash", "args": {"command": "ls"}, "duration_s": 2},  # an int time: 2.0 when validated
    {"tool": "bash", "args": {"n": 2 ** 70, "t": (1, 2)}},  # beyond orjson's 64 bits
    {"tool": "bash", "args": {"command": "ls"}, "tokens_in": True, "cost_usd": 1},  # coerced
    {"tool": "bash", "args": {"command": "ls"}, "exit_code": 1.0},
    {"tool": "Read", "args": {"file_path": "src/a.py", "offset": 3, "limit": 2},
     "observation": "     3\u2192a\n     4\u2192b", "sidechain": Sidechain(id="s1", parent_turn=1, agent="Explore"),
     "compaction": "summary \u00e9"},
    {"tool": "bash", "args": {"command": "ls"}, "parse_error": "no action found"},
    {"tool": "bash", "args": {1: [b"x"]}},  # not JSON values: stringified when validated
])
def test_fast_lines_equal_the_records_for_loosely_typed_steps(step):
    fast = record_lines(_traj(**step), SOURCE, Target())
    validated = build_records(_traj(**step), SOURCE, Target())
    assert fast[1] == [t.model_dump_json().encode() + b"\n" for t in validated[1]]
    assert fast[2] == validated[2] and fast[0] == validated[0]


@pytest.mark.pure_python
@pytest.mark.parametrize("step", [
    {"tool": "bash", "args": {"command": "ls"}, "observation": "bad \ud800 text"},
    {"tool": 7, "args": {"command": "ls"}},
    {"tool": "bash", "args": {"command": "ls"}, "response": None},
])
def test_a_value_the_record_refuses_fails_the_same_way_on_both_paths(step):
    errors = []
    for build in (record_lines, build_records):
        with pytest.raises(ValueError) as caught:
            header, turns, end = build(_traj(**step), SOURCE, Target())
            [t.model_dump_json() for t in turns if not isinstance(t, bytes)]
        errors.append((type(caught.value), str(caught.value)))
    assert errors[0] == errors[1]


DEEP = "[" * 1100 + "]" * 1100
TEXTS = {
    "big.json": '{"trajectory": [], "n": 123456789012345678901234, "m": -9999999999999999999}',
    "u64.json": '{"trajectory": [], "n": 18446744073709551615, "f": 1e400}',
    "nan.json": '{"trajectory": [], "x": NaN, "y": -Infinity}',
    "surrogate.json": '{"trajectory": [], "s": "\\ud800 and \\udfff\\ud83d"}',
    "deep.json": DEEP,
    "extra.json": '{"a": 1} {"b": 2}',
    "cut.json": '{"a": [1, 2',
    "bom.json": '\ufeff{"a": 1}',
    "lines.jsonl": '{"type": "user", "n": 1e400}\n\x0c{"type": "x"}\n {"s": "\\ud800"}\n',
    "lines_big.jsonl": '{"type": "user", "n": 99999999999999999999}\n{"t": 1}\n',
    # msgspec before 0.19 read these wrong (2**64 + 10**18 + 1 to 19999999999999999999)
    "lines_big_u64.jsonl": '{"type": "user", "n": 19933688932870350000}\n{"m": 19999999999999999999}\n',
    "lines_deep.jsonl": '{"type": "user"}\n' + DEEP + "\n",
    "lines_extra.jsonl": '{"type": "user"}\n{"a": 1} 2\n{"b": 3}\n',
    "lines_cut.jsonl": '{"type": "user"}\n{"a": 1',
    "lines_crlf.jsonl": '{"type": "user"}\r\n{"b": 2}\r\n',
    "lines_blank.jsonl": '{"type": "user"}\n\n{"b": 2}\n  \n',
    "lines_indented.jsonl": '{"type": "user"}\n  {"b": 2}\n',
    "lines_unended.jsonl": '{"type": "user"}\n{"b": 2}',
    "lines_cr.jsonl": '{"type": "user"}\r{"b": 2}\n',
    "lines_two_and_blank.jsonl": '{"type": "user"} {"c": 3}\n\n{"b": 2}\n',
    "lines_two_and_blank_crlf.jsonl": '{"type": "user"} {"c": 3}\r\n\r\n{"b": 2}\r\n',
    "lines_unicode_space.jsonl": '{"type": "user"}\u2003\n{"b": 2}\x1c\n',
    "floats.jsonl": "\n".join(f'{{"v": {v}}}' for v in (
        "0.1", "-0.0", "1e-400", "5e-324", "1.7976931348623157e308", "123456789012345678",
        "0.30000000000000004", "1E+2", "3.14159265358979323846264338327950288")) + "\n",
}


@pytest.mark.parametrize("name", sorted(TEXTS))
@pytest.mark.parametrize("fmt", ["swe-agent", "claude-code"])
def test_msgspec_reads_what_the_json_module_reads(tmp_path, monkeypatch, name, fmt):
    path = tmp_path / name
    path.write_text(TEXTS[name], encoding="utf-8")

    def read() -> object:
        try:
            _, _, data, _ = formats.read_source(path, fmt)
        except BadInput as exc:
            return ("refused", exc.reason, exc.detail)
        return repr(data)

    fast = read()
    monkeypatch.setattr(formats, "FAST_JSON", False)
    assert fast == read()


def test_integers_of_any_size_keep_their_value():
    """An integer beyond 64 bits is read as that integer (orjson, used before, read it as a
    float, so such files went to the json module)."""
    big = 2 ** 70 + 1
    assert formats._jsonl(f'{{"n": {big}}}\n{{"m": -{big}}}\n', True) == [{"n": big}, {"m": -big}]
    for n in (19933688932870350000, 19999999999999999999, 2 ** 64 + 10 ** 18 + 1):
        assert formats._jsonl(f'{{"n": {n}}}\n', True, f'{{"n": {n}}}\n'.encode()) == [{"n": n}]
    assert formats._json(f'[{big}, 1.5]', True) == [big, 1.5]


def test_fixtures_read_alike_by_both_parsers(monkeypatch):
    files, _ = formats.discover(SOURCES, formats.AUTO)
    texts = [p.read_text(encoding="utf-8") for p in files if p.suffix in (".json", ".jsonl", ".traj")]
    assert len(texts) >= 15
    for text in texts:
        for parse in (formats._jsonl, formats._json):
            try:
                fast = repr(parse(text, True))
            except BadInput as exc:
                fast = exc.reason
            try:
                slow = repr(parse(text, False))
            except BadInput as exc:
                slow = exc.reason
            assert fast == slow


def test_the_fast_line_writes_every_field_of_the_turn_record_in_order():
    """The fast path writes the turn record by hand: a field added to ``Turn`` must be added
    there too (this names it, before the byte comparisons above fail on every fixture)."""
    import orjson

    from adakit.record import Turn

    lines = record_lines(_traj(tool="bash", args={"command": "ls"}), SOURCE, Target())[1]
    assert all(isinstance(line, bytes) for line in lines)  # both turns took the fast path
    written = list(orjson.loads(lines[-1]))
    assert written == [name for name in Turn.model_fields if name != "sidechain"]



@pytest.mark.pure_python  # a compiled class's __init__ shows no signature
def test_written_out_initialisers_list_every_field():
    """SourceStep, Mapped, Context, Stage and Segment write their __init__ out (so that the
    compiled modules build them natively): each takes every field, in the fields' order."""
    import dataclasses
    import inspect

    from adakit.importers.base import SourceStep
    from adakit.importers.mapping import Context, Mapped
    from adakit.importers.shell import Segment, Stage

    for cls in (SourceStep, Mapped, Context, Stage, Segment):
        params = list(inspect.signature(cls.__init__).parameters)[1:]
        assert params == [f.name for f in dataclasses.fields(cls)], cls.__name__


def test_written_out_initialisers_keep_every_value():
    """Every field given by keyword is kept (compiled or not), and a mutable default is a new
    object each time."""
    from adakit.importers.base import SourceStep
    from adakit.importers.mapping import Context, Mapped

    side = Sidechain(id="s1")
    step = dict(tool="Read", args={"a": 1}, thought="t", response="r", observation="o",
                observation_complete=False, cwd="/w", open_file="f.py", started_at=1.0,
                ended_at=2.0, duration_s=1.0, latency_s=0.5, tokens_in=3, tokens_out=4,
                cost_usd=0.1, exit_code=1, parse_error="p", mapped_as=("x", {}),
                result={"is_error": True}, sidechain=side, compaction="c")
    got = SourceStep(**step)
    assert {k: getattr(got, k) for k in step} == step
    mapped = dict(tool="READ", rule="r", file="f", ranges=[(1, 2)], lines_viewed=2,
                  structural=True, action="a", symbol="s", result_count=3, finalize=True,
                  failed=True)
    got_m = Mapped(**mapped)
    assert {k: getattr(got_m, k) for k in mapped} == mapped
    ctx = dict(cwd="/w", open_file="f", resolve=lambda p, c: p, is_dir=lambda r: True,
               line_count=lambda r: 3, output_complete=False, exit_code=2, result={"k": 1},
               read_lines=lambda r: ["x"])
    got_c = Context(**ctx)
    assert {k: getattr(got_c, k) for k in ctx} == ctx
    from adakit.importers.shell import Segment, Stage

    stage = dict(program="sed", args=["-n"], writes=["o"], reads=["i"], heredoc=True,
                 via_xargs=True)
    got_s = Stage(**stage)
    assert {k: getattr(got_s, k) for k in stage} == stage
    assert Segment([got_s], "/w").stages == [got_s] and Segment([]).cwd is None
    assert Stage("ls").args == [] and Stage("ls").args is not Stage("ls").args
    a, b = SourceStep(), SourceStep()
    assert a.args == {} and a.args is not b.args and a == b
    assert Mapped("READ", "r").ranges == [] and Mapped("READ", "r").ranges is not Mapped("READ", "r").ranges
    assert Context().resolve("a.py", "src") == "src/a.py" and Context().line_count("a.py") is None
    assert "tool='READ'" in repr(Mapped("READ", "r"))  # dataclass's repr and eq are kept


def test_an_error_is_looked_for_in_the_first_lines_only():
    """_looks_failed searches the first lines in place; on 20,000 seeded texts it answers as
    a search of those lines copied out."""
    import random

    from adakit.importers.mapping import _READ_ERROR, _looks_failed

    rng = random.Random(3)
    pieces = ["ok", "Error: x", "ERROR ", "not found", "\n", "\n\n", "xError:", "Error", ":",
              "No such file or directory", "Is a", " directory", "cannot open", "\r\n", " "]
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        lines = rng.choice([1, 2, 3, 5])
        head = "\n".join(text.split("\n", lines)[:lines])
        assert _looks_failed(text, None, lines) == bool(_READ_ERROR.search(head)), (text, lines)
    assert _looks_failed("", 2) and not _looks_failed("fine", 0)


def test_lines_read_in_place_as_one_by_one():
    """_jsonl with the raw bytes reads the lines where they lie; on every JSONL text above
    and every fixture it gives what reading them one by one gives (values or the reason)."""
    texts = [t for name, t in TEXTS.items() if name.endswith(".jsonl")]
    files, _ = formats.discover(SOURCES, formats.AUTO)
    texts += [p.read_text(encoding="utf-8") for p in files if p.suffix == ".jsonl"]
    assert len(texts) >= 20

    def read(text: str, raw: bytes | None) -> object:
        try:
            return repr(formats._jsonl(text, True, raw))
        except BadInput as exc:
            return ("refused", exc.reason, exc.detail)

    for text in texts:
        assert read(text, text.encode("utf-8")) == read(text, None), text[:80]
    assert formats._lines_in_place(b'{"a": 1}\n\n[2]') == [{"a": 1}, [2]]
    assert formats._lines_in_place(b'{"a": 1}\n \n') is None  # a line of white space


def test_an_action_read_from_a_source_is_kept_whatever_it_says():
    """_rule's default action is an object no source value can be: an action read from a
    source is kept, even one spelled like a marker."""
    from adakit.importers.mapping import Context, map_shell, map_tool

    odd = "\x00rule"
    assert map_tool(odd, {}, "", Context()).action == odd
    assert map_tool("other", {"name": odd}, "", Context()).action == odd
    assert map_shell(f"{odd} --x", "", Context()).action == odd
    grep = map_tool("Grep", {"pattern": "x"}, "", Context())
    assert grep.rule == "tool:grep" and grep.action == "find_all_references"  # the rule's own
