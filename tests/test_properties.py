"""Property tests (hypothesis) that keep the sandbox, the reply parser and the unpacker attacked.

Example counts are bounded (``EXAMPLES``, default 100, ``ADAKIT_HYPOTHESIS_EXAMPLES`` to
change) so ``make test`` stays quick; failing examples are kept in ``.hypothesis/`` and
replayed first on the next run.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tarfile
import warnings
import zipfile
from datetime import timedelta
from itertools import count
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")  # a dev extra; make test installs it
from host_paths import host_paths_in  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from adakit.apparatus.protocol import (  # noqa: E402
    _tags_by_bisection,
    parse_function_call,
    parse_reply,
    tags,
)
from adakit.apparatus.tools import TOOL_SPECS  # noqa: E402
from adakit.apparatus.world import SandboxError, World, WorldFetchError, unpack_archive  # noqa: E402

EXAMPLES = int(os.environ.get("ADAKIT_HYPOTHESIS_EXAMPLES", "100"))
BOUNDED = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# ----------------------------------------------------------------------------- World.resolve


@pytest.fixture(scope="module")
def trap_world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """A world full of traps: links in and out, a loop, a FIFO, a hard link out, a folder."""
    base = tmp_path_factory.mktemp("resolve")
    root = base / "repo"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "core.py").write_text("def f():\n    return 1\n")
    (root / "pkg" / "sub" / "a.py").write_text("A = 1\n")
    (base / "secret.py").write_text("TOKEN = 1\n")
    os.symlink("core.py", root / "pkg" / "alias.py")
    os.symlink(base / "secret.py", root / "pkg" / "out.py")
    os.symlink("../..", root / "pkg" / "up")
    os.symlink("loop", root / "pkg" / "loop")
    os.mkfifo(root / "pkg" / "pipe.py")
    os.link(base / "secret.py", root / "pkg" / "hard.py")
    return World(root, name="repo")


PATH_PIECES = st.sampled_from([
    ".", "..", "/", "\\", "\x00", "\u2024", "\u2025", "\uff0e", "\u3002", "~", "$HOME", " ",
    "pkg", "sub", "core.py", "a.py", "alias.py", "out.py", "up", "loop", "pipe.py", "hard.py",
    "repo", "secret.py", "x" * 300, "\u00e9" * 200, "'", "`",
])
PATHS = st.one_of(
    st.lists(PATH_PIECES, max_size=12).map("".join),
    st.text(max_size=40),
    st.lists(PATH_PIECES, max_size=4).map(lambda p: "".join(p) + "a/" * 2100),  # over 4,096
)


@BOUNDED
@given(path=PATHS)
def test_resolve_stays_inside_or_refuses_clearly(trap_world: World, path: str) -> None:
    root = trap_world.root
    try:
        real = trap_world.resolve(path)
    except SandboxError as exc:
        message = str(exc)
        assert message and "\n" not in message  # one clear line
        assert not host_paths_in(message, [path]), message  # no host path the agent did not write
        assert len(message) <= len(path) + 600
        return
    assert real.is_relative_to(root) and os.path.realpath(real) == str(real)
    assert real.is_file() and not real.is_symlink() and os.stat(real).st_nlink == 1


# ----------------------------------------------------------------------------- the parser

# the tag expression the linear scanner replaced: the reference for what a reply means
OLD_TAG_RE = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)>(.*?)</\1\s*>", re.S)
SOUP = st.lists(
    st.sampled_from([
        "<", ">", "/", "</", "a", "b", " ", "\n", "\u2028", "<a>", "</a>", "</a >", "<b>", "</b>",
        "<thinking>", "</thinking>", "<peek_code_region>", "</peek_code_region>", "<file_path>",
        "</file_path>", "src/a.py", "<start_line>", "</start_line>", "12", "<bookmark>",
        "<note>", "</note>", "&amp;", "<a b>", "<9>",
    ]),
    max_size=40,
).map("".join)


@BOUNDED
@given(text=st.one_of(SOUP, st.text(max_size=200)))
def test_tag_scanner_matches_the_old_expression(text: str) -> None:
    expected = [(m.group(1), m.group(2)) for m in OLD_TAG_RE.finditer(text)]
    assert tags(text) == expected
    assert _tags_by_bisection(text, None) == expected  # the path for unclosed tags, on any text


@settings(BOUNDED, deadline=timedelta(seconds=5))  # the quadratic parser took minutes at this size
@given(unit=SOUP.filter(bool), size=st.integers(min_value=1_000, max_value=300_000))
def test_parser_never_raises_and_stays_linear(unit: str, size: int) -> None:
    text = (unit * (size // len(unit) + 1))[:size]
    parsed = parse_reply(text, TOOL_SPECS, max_chars=None)
    assert (parsed.call is None) != (parsed.error is None)
    if parsed.error is not None:
        assert parsed.error.message
    capped = parse_reply(text, TOOL_SPECS, max_chars=size - 1)
    assert capped.error is not None and "characters long, over the" in capped.error.message


@BOUNDED
@given(
    depth=st.integers(min_value=0, max_value=20_000),
    opener=st.sampled_from(["[", '{"a":']),
)
def test_function_arguments_never_raise(depth: int, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    args = '{"file_path": ' + opener * depth + "1" + closer * depth + ', "start_line": 1}'
    result = parse_function_call("peek_code_region", args, TOOL_SPECS)
    assert result is not None  # a ToolCall or a ParseError, never an exception


# ----------------------------------------------------------------------------- the unpacker

PART = st.sampled_from(["a", "b", "s", "t", "..", ".", ""])
NAME = st.lists(PART, min_size=1, max_size=3).map("/".join)
TARGET = st.one_of(
    st.lists(st.sampled_from(["a", "b", "s", "t", "..", ".", "x"]), min_size=1, max_size=4)
    .map("/".join),
    st.sampled_from(["", "/", "/etc", "../../../../"]),
)
MEMBER = st.one_of(
    st.tuples(st.just("file"), NAME, st.binary(max_size=8)),
    st.tuples(st.just("dir"), NAME, st.just(b"")),
    st.tuples(st.just("sym"), NAME, TARGET),
    st.tuples(st.just("hard"), NAME, NAME),
    st.tuples(st.just("fifo"), NAME, st.just(b"")),
)
_EXAMPLE = count()


@st.composite
def swap_attacks(draw: st.DrawFn) -> list[tuple]:
    """The probe's link swap with a random depth, other members mixed in anywhere: s -> t/../..
    is inside while t points deep, then t -> . makes s lead out, then s/PWNED/x follows it."""
    depth = draw(st.integers(min_value=1, max_value=4))
    out = [("sym", "t", "/".join(["a"] * depth)), ("sym", "s", "t" + "/.." * depth),
           ("sym", "t", "."), ("file", "s/PWNED/x", b"x")]
    for member in draw(st.lists(MEMBER, max_size=4)):
        out.insert(draw(st.integers(min_value=0, max_value=len(out))), member)
    return out


def _tar(members: list[tuple], top: bool) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for kind, name, extra in members:
            info = tarfile.TarInfo(("top/" if top else "") + name)
            if kind == "file":
                info.size = len(extra)
                tar.addfile(info, io.BytesIO(extra))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE,
                         "hard": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE}[kind]
            if kind in ("sym", "hard"):
                info.linkname = (("top/" if top and kind == "hard" else "") + extra)
            tar.addfile(info)
    return buf.getvalue()


def _zip(members: list[tuple], top: bool) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buf, "w") as zf:
        warnings.simplefilter("ignore", UserWarning)  # duplicate names are part of the attack
        for kind, name, extra in members:
            full = ("top/" if top else "") + name + ("/" if kind == "dir" else "")
            if not full:
                continue  # a zip member needs a name
            info = zipfile.ZipInfo(full)
            if kind == "sym":
                info.external_attr = 0o120777 << 16
                zf.writestr(info, extra)
            else:
                zf.writestr(info, extra if kind == "file" else b"")
    return buf.getvalue()


def _tree(folder: Path, skip: Path) -> set[str]:
    out = set()
    for dirpath, dirnames, filenames in os.walk(folder):
        for entry in dirnames + filenames:
            path = Path(dirpath) / entry
            if path != skip and skip not in path.parents:
                out.add(path.relative_to(folder).as_posix())
    return out


@pytest.fixture(scope="module")
def jail(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(jail, deep): archives unpack 40 levels below the jail, deeper than the '..' of any
    generated link chain climbs, so whatever escapes a target still lands inside the jail."""
    top = tmp_path_factory.mktemp("unpack")
    deep = top.joinpath(*["d"] * 40)
    deep.mkdir(parents=True)
    return top, deep


@BOUNDED
@given(members=st.one_of(st.lists(MEMBER, max_size=8), swap_attacks()), top=st.booleans(),
       as_zip=st.booleans())
def test_unpacking_never_creates_anything_outside(
    jail: tuple[Path, Path], members: list[tuple], top: bool, as_zip: bool
) -> None:
    top_dir, deep = jail
    n = next(_EXAMPLE)
    dest = deep / f"out{n}"
    dest.mkdir()
    archive = top_dir / f"a{n}.{'zip' if as_zip else 'tar'}"
    archive.write_bytes(_zip(members, top) if as_zip else _tar(members, top))
    before = _tree(top_dir, dest)
    try:
        unpack_archive(archive, dest)
    except WorldFetchError:
        pass  # refused (UnsafeArchiveError) or unreadable: either way a clear fetch error
    else:  # what was made is folders, files and links that resolve inside
        for dirpath, dirnames, filenames in os.walk(dest):
            for entry in dirnames + filenames:
                path = Path(dirpath) / entry
                if path.is_symlink():
                    assert Path(os.path.realpath(path)).is_relative_to(dest), path
                else:
                    assert path.is_dir() or path.is_file(), path
    finally:
        after = _tree(top_dir, dest)
        shutil.rmtree(dest, ignore_errors=True)
        archive.unlink()
        for made in sorted(after - before, key=len):  # undo an escape: the next example is clean
            shutil.rmtree(top_dir / made, ignore_errors=True)
    assert after == before, sorted(after ^ before)
