"""The repository world: manifest, verified fetching, safe unpacking, the sandbox, stats, CLI.

Everything here is offline: archives are tiny tarballs built in tmp folders and the PyPI
download is replaced by a local copy (the real downloads live in test_real_worlds.py).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from adakit.apparatus import world as W
from adakit.apparatus.world import (
    MARKER_NAME,
    ManifestError,
    PaperFigures,
    SandboxError,
    UnsafeArchiveError,
    World,
    WorldFetchError,
    WorldSource,
    WorldSpec,
    WorldUnavailable,
    absent_anchors,
    fetch_world,
    load_manifest,
    open_world,
    unpack_archive,
    world_stats,
)

DEMO_INIT = b'"""Demo."""\n\nfrom demo.core import run\n\n\n__all__ = ["run"]\n'
DEMO_CORE = b"def run(x):\n\n    return x + 1\n   \n"
DEMO_TEST = b"def test_run():\n    assert True\n"


# ----------------------------------------------------------------------------- helpers


def build_tar(path: Path, entries: list[tuple]) -> Path:
    """A gzip tarball from (kind, name[, data or link]) entries, written verbatim."""
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as tar:
        for kind, name, *rest in entries:
            info = tarfile.TarInfo(name)
            info.mode = 0o644
            if kind == "file":
                data = rest[0] if rest else b""
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, rest[0]
            elif kind == "hard":
                info.type, info.linkname = tarfile.LNKTYPE, rest[0]
            elif kind == "chr":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            tar.addfile(info)
    return path


def demo_entries(top: str = "demo-1.0") -> list[tuple]:
    return [
        ("dir", f"{top}/"),
        ("file", f"{top}/README.md", b"# demo\n"),
        ("file", f"{top}/src/demo/__init__.py", DEMO_INIT),
        ("file", f"{top}/src/demo/core.py", DEMO_CORE),
        ("file", f"{top}/tests/test_core.py", DEMO_TEST),
    ]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def demo_spec(archive: Path, *, sha: str | None = None, version: str = "1.0") -> WorldSpec:
    return WorldSpec(
        name="demo",
        language="python",
        source=WorldSource(
            kind="pypi",
            package="demo",
            version=version,
            filename=f"demo-{version}.tar.gz",
            sha256=sha or sha256(archive),
        ),
        include=("src",),
        exclude=("*/tests/*",),
        anchors=("src/demo/core.py",),
        paper=PaperFigures(language="Python", files=2, loc=6, system_type="demo"),
    )


@pytest.fixture
def worlds_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "worlds"
    monkeypatch.setenv("ADAKIT_WORLDS", str(root))
    return root


@pytest.fixture
def fake_pypi(monkeypatch: pytest.MonkeyPatch) -> dict:
    """Replace the PyPI download by a copy of ``state['archive']``; counts the calls."""
    state: dict = {"archive": None, "calls": 0}

    def download(spec: WorldSpec, dest: Path, progress: bool) -> None:
        state["calls"] += 1
        shutil.copyfile(state["archive"], dest)

    monkeypatch.setattr(W, "_download_sdist", download)
    return state


def leftovers(root: Path) -> list[str]:
    """Anything in the cache besides finished worlds and lock files."""
    if not root.exists():
        return []
    return sorted(
        p.name
        for p in root.iterdir()
        if not p.name.endswith(".lock") and not p.name.startswith("demo-")
    )


# ------------------------------------------------------------------------------- fetching


def test_fetch_unpacks_strips_top_folder_and_marks(tmp_path, worlds_root, fake_pypi):
    archive = build_tar(tmp_path / "demo-1.0.tar.gz", demo_entries())
    fake_pypi["archive"] = archive
    spec = demo_spec(archive)
    path = fetch_world("demo", progress=False, manifest={"demo": spec})
    assert path == worlds_root / "demo-1.0"
    assert (path / "src/demo/core.py").read_bytes() == DEMO_CORE
    assert (path / "README.md").is_file() and not (path / "demo-1.0").exists()
    marker = (path / MARKER_NAME).read_text()
    assert spec.source.sha256 in marker
    assert spec.is_fetched()
    assert leftovers(worlds_root) == []


def test_fetch_is_idempotent(tmp_path, worlds_root, fake_pypi):
    archive = build_tar(tmp_path / "demo-1.0.tar.gz", demo_entries())
    fake_pypi["archive"] = archive
    manifest = {"demo": demo_spec(archive)}
    first = fetch_world("demo", progress=False, manifest=manifest)
    stamp = (first / MARKER_NAME).stat().st_mtime_ns
    second = fetch_world("demo", progress=False, manifest=manifest)
    open_world("demo", manifest=manifest)
    assert first == second
    assert fake_pypi["calls"] == 1
    assert (first / MARKER_NAME).stat().st_mtime_ns == stamp


def test_new_pin_replaces_the_world(tmp_path, worlds_root, fake_pypi):
    old = build_tar(tmp_path / "old.tar.gz", demo_entries())
    fake_pypi["archive"] = old
    fetch_world("demo", progress=False, manifest={"demo": demo_spec(old)})
    entries = [e for e in demo_entries() if not e[1].endswith("README.md")]
    new = build_tar(tmp_path / "new.tar.gz", entries + [("file", "demo-1.0/NEW", b"x")])
    fake_pypi["archive"] = new
    path = fetch_world("demo", progress=False, manifest={"demo": demo_spec(new)})
    assert fake_pypi["calls"] == 2
    assert (path / "NEW").is_file() and not (path / "README.md").exists()
    assert leftovers(worlds_root) == []


def test_sha_mismatch_is_refused_and_nothing_is_left(tmp_path, worlds_root, fake_pypi):
    archive = build_tar(tmp_path / "demo-1.0.tar.gz", demo_entries())
    fake_pypi["archive"] = archive
    spec = demo_spec(archive, sha="0" * 64)
    with pytest.raises(WorldFetchError, match="sha256 mismatch"):
        fetch_world("demo", progress=False, manifest={"demo": spec})
    assert not (worlds_root / "demo-1.0").exists()
    assert leftovers(worlds_root) == []
    assert not spec.is_fetched()


UNSAFE = {
    "parent": [("file", "demo-1.0/../evil.txt", b"x")],
    "parent-deep": [("file", "demo-1.0/src/../../../evil.txt", b"x")],
    "absolute": [("file", "/tmp/adakit-evil.txt", b"x")],
    "symlink-out": [("sym", "demo-1.0/src/link", "../../../outside")],
    "symlink-absolute": [("sym", "demo-1.0/src/link", "/etc/passwd")],
    "hardlink-parent": [("hard", "demo-1.0/src/hl", "../outside")],
    "hardlink-absolute": [("hard", "demo-1.0/src/hl", "/etc/passwd")],
    "device": [("chr", "demo-1.0/src/null")],
    "fifo": [("fifo", "demo-1.0/src/pipe")],
    # each link is inside when created; together the first one leads out
    "link-chain": [
        ("dir", "demo-1.0/d/"),
        ("sym", "demo-1.0/l", "d/m/../x"),
        ("sym", "demo-1.0/d/m", ".."),
    ],
}


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_unsafe_members_are_refused(case, tmp_path, worlds_root, fake_pypi):
    (tmp_path / "outside").write_text("secret")
    archive = build_tar(tmp_path / "demo-1.0.tar.gz", demo_entries() + UNSAFE[case])
    fake_pypi["archive"] = archive
    with pytest.raises(UnsafeArchiveError, match="refused"):
        fetch_world("demo", progress=False, manifest={"demo": demo_spec(archive)})
    assert not (worlds_root / "demo-1.0").exists()
    assert leftovers(worlds_root) == []
    assert not (tmp_path / "evil.txt").exists() and not Path("/tmp/adakit-evil.txt").exists()
    assert (tmp_path / "outside").read_text() == "secret"


def test_links_inside_the_archive_are_kept(tmp_path):
    archive = build_tar(
        tmp_path / "a.tar.gz",
        demo_entries()
        + [
            ("sym", "demo-1.0/src/alias.py", "demo/core.py"),
            ("hard", "demo-1.0/src/copy.py", "demo-1.0/src/demo/core.py"),
        ],
    )
    dest = tmp_path / "out"
    dest.mkdir()
    unpack_archive(archive, dest)
    assert os.readlink(dest / "src/alias.py") == "demo/core.py"
    assert (dest / "src/copy.py").read_bytes() == DEMO_CORE
    assert not (dest / "src/copy.py").is_symlink()


def build_zip(path: Path, entries: list[tuple]) -> Path:
    """A zip archive from (name, data[, unix mode]) entries."""
    import zipfile

    with zipfile.ZipFile(path, "w") as zf:
        for name, data, *mode in entries:
            info = zipfile.ZipInfo(name)
            if mode:
                info.external_attr = mode[0] << 16
            zf.writestr(info, data)
    return path


def test_zip_archives_unpack_like_tarballs(tmp_path):
    archive = build_zip(
        tmp_path / "demo-1.0.zip",
        [
            ("demo-1.0/src/demo/core.py", DEMO_CORE, 0o100755),
            ("demo-1.0/README.md", b"hi", 0o600),  # permission bits only, no file type
        ],
    )
    dest = tmp_path / "out"
    dest.mkdir()
    unpack_archive(archive, dest)
    assert (dest / "src/demo/core.py").read_bytes() == DEMO_CORE  # top folder stripped
    assert os.stat(dest / "src/demo/core.py").st_mode & 0o111
    assert (dest / "README.md").read_bytes() == b"hi"


@pytest.mark.parametrize(
    "entry, message",
    [
        (("demo-1.0/../evil.txt", b"x"), "refused"),
        (("/tmp/adakit-evil.txt", b"x"), "refused"),
        (("demo-1.0/src/link", b"/etc/passwd", 0o120777), "link or special file; refused"),
    ],
)
def test_unsafe_zip_members_are_refused(entry, message, tmp_path):
    archive = build_zip(tmp_path / "demo-1.0.zip", [("demo-1.0/ok.py", b"pass\n"), entry])
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(UnsafeArchiveError, match=message):
        unpack_archive(archive, dest)
    assert list(dest.iterdir()) == []  # checked before anything is written
    assert not (tmp_path / "evil.txt").exists() and not Path("/tmp/adakit-evil.txt").exists()


def test_failure_mid_unpack_leaves_no_half_world(tmp_path, worlds_root, fake_pypi, monkeypatch):
    good = build_tar(tmp_path / "good.tar.gz", demo_entries())
    fake_pypi["archive"] = good
    fetch_world("demo", progress=False, manifest={"demo": demo_spec(good)})
    before = sorted(p.relative_to(worlds_root).as_posix() for p in worlds_root.rglob("*"))

    newer = build_tar(tmp_path / "newer.tar.gz", demo_entries() + [("file", "demo-1.0/Z", b"z")])
    fake_pypi["archive"] = newer
    real_write = W._write_stream
    written = {"n": 0}

    def flaky_write(path, stream, mode):
        written["n"] += 1
        if written["n"] == 3:
            raise OSError(28, "No space left on device")
        real_write(path, stream, mode)

    monkeypatch.setattr(W, "_write_stream", flaky_write)
    with pytest.raises(OSError, match="No space left"):
        fetch_world("demo", progress=False, manifest={"demo": demo_spec(newer)})
    after = sorted(p.relative_to(worlds_root).as_posix() for p in worlds_root.rglob("*"))
    assert after == before  # the previous world is intact, nothing half-written beside it
    assert demo_spec(good).is_fetched()


def test_stale_partial_folders_are_cleaned(tmp_path, worlds_root, fake_pypi):
    worlds_root.mkdir()
    (worlds_root / ".demo-1.0.abc123.partial").mkdir()
    (worlds_root / ".demo-1.0.abc123.partial" / "half.py").write_text("x")
    archive = build_tar(tmp_path / "demo-1.0.tar.gz", demo_entries())
    fake_pypi["archive"] = archive
    fetch_world("demo", progress=False, manifest={"demo": demo_spec(archive)})
    assert leftovers(worlds_root) == []


def test_open_world_without_fetch_says_why(worlds_root, tmp_path):
    spec = demo_spec(tmp_path / "none", sha="1" * 64)
    with pytest.raises(WorldUnavailable, match="not fetched yet") as info:
        open_world("demo", fetch=False, manifest={"demo": spec})
    assert info.value.name == "demo" and "adakit worlds fetch demo" in info.value.reason
    with pytest.raises(KeyError, match="unknown world 'nope'"):
        open_world("nope", manifest={"demo": spec})


def _git_spec(url: str, commit: str) -> WorldSpec:
    return WorldSpec(
        name="gitdemo",
        language="python",
        source=WorldSource(kind="git", url=url, commit=commit, version="v1"),
        include=(),
        exclude=(),
        anchors=("pkg/mod.py",),
        paper=PaperFigures(language="Python", files=1, loc=1, system_type="demo"),
    )


def test_git_world_unreachable_is_unavailable(tmp_path, worlds_root):
    spec = _git_spec((tmp_path / "no-such-repo").as_uri(), "a" * 40)
    with pytest.raises(WorldUnavailable, match="cannot fetch") as info:
        fetch_world("gitdemo", manifest={"gitdemo": spec})
    assert "git:" in info.value.reason
    assert not spec.path().exists() and leftovers(worlds_root) == []


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_world_fetches_a_pinned_commit(tmp_path, worlds_root):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg/mod.py").write_text("X = 1\n\nY = 2\n")

    def git(*args: str) -> str:
        env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
        out = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                             text=True, env=env)
        return out.stdout.strip()

    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "one")
    commit = git("rev-parse", "HEAD")
    (repo / "pkg/later.py").write_text("Z = 3\n")
    git("add", ".")
    git("commit", "-qm", "two")
    manifest = {"gitdemo": _git_spec(repo.as_uri(), commit)}
    w = open_world("gitdemo", manifest=manifest)
    assert w.files() == ["pkg/mod.py"]  # the pinned commit, not the newer one; no .git
    assert not (w.root / ".git").exists()
    assert absent_anchors(w, manifest["gitdemo"]) == []
    assert world_stats(w, spec=manifest["gitdemo"])["loc"] == 2


# ------------------------------------------------------------------------------- manifest

TABLE3 = {  # paper Table 3: language, files, LOC
    "requests": ("Python", 29, 8060),
    "flask": ("Python", 29, 9526),
    "scikit-learn": ("Python", 554, 258342),
    "graphiti": ("Python", 109, 14321),
    "prompt-optimizer": ("TypeScript", 172, 30694),
    "tensorzero": ("Rust", 438, 149755),
}


def test_manifest_has_the_six_worlds_with_required_keys():
    specs = load_manifest()
    assert set(specs) == set(TABLE3)
    for name, spec in specs.items():
        assert (spec.paper.language, spec.paper.files, spec.paper.loc) == TABLE3[name]
        assert spec.paper.system_type and spec.anchors and spec.extensions
        assert spec.language in W.LANGUAGE_EXTENSIONS
        if spec.source.kind == "pypi":
            assert len(spec.source.sha256) == 64 and spec.source.filename.endswith(".tar.gz")
            assert spec.source.version in spec.source.filename
        else:
            assert len(spec.source.commit) == 40 and spec.source.url.startswith("https://")
    assert specs["prompt-optimizer"].source.kind == "git"
    assert "gateway/src/main.rs" in specs["tensorzero"].missing_anchors
    assert specs["graphiti"].source.package == "graphiti-core"


BASE_ENTRY = """
worlds:
  demo:
    language: python
    source: {kind: pypi, package: demo, version: "1.0", filename: demo-1.0.tar.gz,
             sha256: %s}
    include: [src]
    exclude: []
    anchors: [src/demo/core.py]
    paper: {language: Python, files: 2, loc: 6, system_type: demo}
"""


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t.replace("    include: [src]\n", ""), "missing required key 'include'"),
        (lambda t: t.replace("language: python", "language: cobol"), "unknown language"),
        (lambda t: t.replace("kind: pypi", "kind: ftp"), "unknown source kind"),
        (lambda t: t.replace("a" * 64, "abc"), "64 hex digits"),
        (lambda t: t.replace("files: 2, ", ""), "missing required key 'files'"),
        (lambda t: t.replace("demo-1.0.tar.gz", "other-1.0.whl"), "not an sdist"),
        (lambda t: "worlds: [1, 2]\n", "top-level mapping"),
        (lambda t: t.replace('version: "1.0"', "version: 1.10"), "quote it in YAML"),
        (lambda t: t.replace("include: [src]", "include: [src, 3]"), "non-empty strings"),
    ],
)
def test_bad_manifests_are_reported(tmp_path, edit, message):
    path = tmp_path / "w.yaml"
    path.write_text(edit(BASE_ENTRY % ("a" * 64)))
    with pytest.raises(ManifestError, match=message):
        load_manifest(path)


def test_good_manifest_loads(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(BASE_ENTRY % ("a" * 64))
    spec = load_manifest(path)["demo"]
    assert spec.dirname == "demo-1.0" and spec.include == ("src",)
    assert str(spec.source) == "pypi demo==1.0" and spec.source.pin == "a" * 64
    assert spec.extensions == (".py", ".pyi")


# -------------------------------------------------------------------------------- sandbox


@pytest.fixture
def sandbox(tmp_path: Path) -> World:
    root = tmp_path / "repo"
    (root / "pkg/sub").mkdir(parents=True)
    (root / "pkg/core.py").write_text("def f():\n    return 1\n")
    (root / "pkg/sub/helpers.py").write_text("X = 1\n")
    (root / "pkg/latin1.py").write_bytes(b"s = '\xe9t\xe9'\n")
    (root / "pkg/blob.py").write_bytes(b"\x00\x01\x02binary")
    (root / "pkg/big.py").write_text("x = 1\n" * 100)
    (root / "docs").mkdir()
    (root / "docs/guide.md").write_text("guide\n")
    (root / "top.js").write_text("export const a = 1;\n")
    (tmp_path / "secret.txt").write_text("secret\n")
    os.symlink(tmp_path / "secret.txt", root / "pkg/leak.py")
    os.symlink("/dev/null", root / "pkg/null.py")
    (root / MARKER_NAME).write_text("{}")
    return World(root, name="repo", include=["pkg", "top.js"])


def refused(world: World, path: str, kind: str) -> str:
    with pytest.raises(SandboxError) as info:
        world.lines(path)
    assert info.value.kind == kind, str(info.value)
    return str(info.value)


def test_sandbox_refuses_parent_and_foreign_absolute_paths(sandbox):
    assert "'..'" in refused(sandbox, "pkg/../../secret.txt", "outside")
    assert "outside the repository" in refused(sandbox, "/etc/passwd", "outside")
    assert sandbox.lines(str(sandbox.root / "pkg/core.py"))[0] == "def f():"  # own absolute path
    assert sandbox.lines("repo/pkg/core.py") == sandbox.lines("./pkg/core.py")


def test_sandbox_refuses_links_leading_out(sandbox):
    assert "symbolic link" in refused(sandbox, "pkg/leak.py", "outside")
    refused(sandbox, "pkg/null.py", "outside")  # /dev/null through a link


def test_sandbox_refuses_folders_binary_and_oversized(sandbox, monkeypatch):
    assert "folder" in refused(sandbox, "pkg/sub", "not_a_file")
    assert "binary" in refused(sandbox, "pkg/blob.py", "binary")
    monkeypatch.setattr(W, "MAX_FILE_BYTES", 100)
    assert "600 bytes" in refused(sandbox, "pkg/big.py", "too_large")
    refused(sandbox, "docs/guide.md", "out_of_scope")


def test_sandbox_decodes_non_utf8_with_replacement(sandbox):
    assert sandbox.lines("pkg/latin1.py") == ["s = '\ufffdt\ufffd'"]


def test_sandbox_suggests_close_matches(sandbox):
    assert "pkg/core.py" in refused(sandbox, "pkg/cor.py", "not_found")
    assert "pkg/sub/helpers.py" in refused(sandbox, "helpers.py", "not_found")


def test_world_files_respect_scope_links_and_marker(sandbox):
    files = sandbox.files()
    assert "top.js" in files  # an include entry that is a single file
    assert MARKER_NAME not in files and "docs/guide.md" not in files
    assert "pkg/leak.py" not in files and "pkg/null.py" not in files


def test_world_stats_counts_nonblank_lines(tmp_path, worlds_root, fake_pypi):
    archive = build_tar(tmp_path / "demo-1.0.tar.gz", demo_entries())
    fake_pypi["archive"] = archive
    spec = demo_spec(archive)
    w = open_world("demo", manifest={"demo": spec}, progress=False)
    assert (w.name, w.version, w.language) == ("demo", "1.0", "python")
    stats = world_stats(w, spec=spec)
    # __init__.py: 6 lines, 3 non-blank; core.py: 4 lines, 2 non-blank ("   " is blank)
    assert (stats["files"], stats["loc"], stats["lines"]) == (2, 5, 10)
    assert stats["language"] == "Python"
    assert world_stats(w, extensions=[".md"])["files"] == 0  # README is outside include
    assert absent_anchors(w, spec) == []


# ------------------------------------------------------------------------------------ CLI


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="adakit")
    W.register_cli(parser.add_subparsers())
    args = parser.parse_args(list(argv))
    return args.func(args)


def test_cli_fetch_all_continues_past_unavailable_worlds(tmp_path, worlds_root, fake_pypi, capsys):
    archive = build_tar(tmp_path / "demo-1.0.tar.gz", demo_entries())
    fake_pypi["archive"] = archive
    text = (BASE_ENTRY % sha256(archive)) + (
        "  gone:\n    language: typescript\n"
        f"    source: {{kind: git, url: '{(tmp_path / 'missing').as_uri()}', commit: {'b' * 40}}}\n"
        "    include: []\n    exclude: []\n    anchors: [x.ts]\n"
        "    paper: {language: TypeScript, files: 1, loc: 1, system_type: demo}\n"
    )
    manifest = tmp_path / "w.yaml"
    manifest.write_text(text)
    assert run_cli("worlds", "fetch", "--all", "--no-progress", "--manifest", str(manifest)) == 0
    out = capsys.readouterr().out
    assert "gone bbbbbbbbbbbb: UNAVAILABLE here: cannot fetch" in out
    assert "demo 1.0: fetched pypi demo==1.0" in out
    assert run_cli("worlds", "fetch", "demo", "--manifest", str(manifest)) == 0
    assert "already fetched" in capsys.readouterr().out
    assert run_cli("worlds", "fetch", "nope", "--manifest", str(manifest)) == 2

    assert run_cli("worlds", "list", "--manifest", str(manifest)) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[2].split()[-1] == "yes" and listing[3].split()[-1] == "no"

    assert run_cli("worlds", "stats", "--manifest", str(manifest)) == 0
    lines = capsys.readouterr().out.splitlines()
    header, rule, row = lines[0], lines[1], lines[2]
    assert row.split()[:6] == ["demo", "1.0", "Python", "2", "5", "10"]
    assert len(header) == len(rule) and header.index("LOC") < header.index("paper LOC")
    assert any("LOC = non-blank lines" in line for line in lines)
    assert lines[-1].startswith("not fetched: gone")


def test_cli_fetch_reports_failures_with_exit_code(tmp_path, worlds_root, fake_pypi, capsys):
    archive = build_tar(tmp_path / "demo-1.0.tar.gz", demo_entries())
    fake_pypi["archive"] = archive
    manifest = tmp_path / "w.yaml"
    manifest.write_text(BASE_ENTRY % ("c" * 64))
    assert run_cli("worlds", "fetch", "demo", "--manifest", str(manifest)) == 1
    assert "sha256 mismatch" in capsys.readouterr().err


# ------------------------------------------------------- the simple-API download, offline


class FakeIndex:
    """Stands in for pypi_simple.PyPISimple: a project page and a download from local files."""

    files: dict[str, Path] = {}
    error: Exception | None = None

    def __init__(self, endpoint: str = "") -> None:
        self.endpoint = endpoint

    def __enter__(self) -> FakeIndex:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def get_project_page(self, project: str, timeout=None):
        from types import SimpleNamespace

        if FakeIndex.error is not None:
            raise FakeIndex.error
        return SimpleNamespace(
            packages=[
                SimpleNamespace(filename=n, version=n.split("-")[1].removesuffix(".tar.gz"),
                                package_type="sdist", digests={})
                for n in FakeIndex.files
            ]
        )

    def download_package(self, pkg, path, verify=True, progress=None, timeout=None):
        shutil.copyfile(FakeIndex.files[pkg.filename], path)


@pytest.fixture
def fake_index(monkeypatch: pytest.MonkeyPatch) -> type[FakeIndex]:
    import pypi_simple

    FakeIndex.files, FakeIndex.error = {}, None
    monkeypatch.setattr(pypi_simple, "PyPISimple", FakeIndex)
    return FakeIndex


def test_download_picks_the_pinned_sdist_from_the_index(tmp_path, worlds_root, fake_index):
    archive = build_tar(tmp_path / "demo-1.0.tar.gz", demo_entries())
    other = build_tar(tmp_path / "demo-0.9.tar.gz", demo_entries("demo-0.9"))
    fake_index.files = {"demo-0.9.tar.gz": other, "demo-1.0.tar.gz": archive}
    path = fetch_world("demo", progress=False, manifest={"demo": demo_spec(archive)})
    assert (path / "src/demo/core.py").is_file()


def test_download_reports_a_missing_release(tmp_path, worlds_root, fake_index):
    archive = build_tar(tmp_path / "demo-1.0.tar.gz", demo_entries())
    fake_index.files = {"demo-0.9.tar.gz": archive}
    with pytest.raises(WorldFetchError, match="no file 'demo-1.0.tar.gz'"):
        fetch_world("demo", progress=False, manifest={"demo": demo_spec(archive)})
    assert leftovers(worlds_root) == []


def test_unreachable_index_makes_the_world_unavailable(tmp_path, worlds_root, fake_index):
    import requests

    fake_index.error = requests.ConnectionError("Name or service not known")
    with pytest.raises(WorldUnavailable, match="not reachable from this machine"):
        spec = demo_spec(tmp_path / "x", sha="d" * 64)
        fetch_world("demo", progress=False, manifest={"demo": spec})
    assert leftovers(worlds_root) == []


def test_stale_cleanup_spares_other_versions(tmp_path):
    (tmp_path / ".demo-1.0.abc.partial").mkdir()
    (tmp_path / ".demo-1.0.1.xyz.partial").mkdir()  # another version's fetch in progress
    (tmp_path / ".demo-1.0.lock").write_text("")
    W._remove_stale(tmp_path, "demo-1.0")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [".demo-1.0.1.xyz.partial", ".demo-1.0.lock"]


def test_folder_members_never_disturb_files(tmp_path):
    archive = build_tar(
        tmp_path / "a.tar.gz",
        [("file", "top/pkg/_", b"keep"), ("dir", "top/pkg/"), ("file", "top/pkg/m.py", b"x\n")],
    )
    (tmp_path / "out").mkdir()
    unpack_archive(archive, tmp_path / "out")
    assert (tmp_path / "out/pkg/_").read_bytes() == b"keep"
    bad = build_tar(tmp_path / "b.tar.gz", [("file", "top/pkg", b"f"), ("dir", "top/pkg/")])
    (tmp_path / "out2").mkdir()
    with pytest.raises(UnsafeArchiveError, match="would replace a file"):
        unpack_archive(bad, tmp_path / "out2")


# --------------------------------------------------- hardening (issue 17: adversarial probe)


def tree_of(folder: Path, skip: Path) -> set[str]:
    """Every path under ``folder`` (links not followed) outside ``skip``."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(folder):
        for entry in dirnames + filenames:
            path = Path(dirpath) / entry
            if path != skip and skip not in path.parents:
                out.add(path.relative_to(folder).as_posix())
    return out


def test_symlink_swap_creates_no_folder_outside(tmp_path):
    # s -> t/../.. is inside while t points two folders deep; a later member makes t -> .,
    # so s leads two folders above the target, and s/PWNED/x would be created through it
    dest = tmp_path / "jail" / "out"
    dest.mkdir(parents=True)
    archive = build_tar(
        tmp_path / "swap.tar.gz",
        [
            ("dir", "top/d1/d2/"),
            ("sym", "top/t", "d1/d2"),
            ("sym", "top/s", "t/../.."),
            ("sym", "top/t", "."),
            ("file", "top/s/PWNED/x", b"x"),
        ],
    )
    before = tree_of(tmp_path, dest)
    with pytest.raises(UnsafeArchiveError, match="refused"):
        unpack_archive(archive, dest)
    assert tree_of(tmp_path, dest) == before  # not only an error: nothing was made outside
    assert not (tmp_path / "PWNED").exists()
    assert list(dest.iterdir()) == []  # the names were checked before anything was written


def test_existing_links_in_the_target_are_never_followed(tmp_path):
    dest = tmp_path / "jail" / "out"
    dest.mkdir(parents=True)
    os.symlink("../..", dest / "s")  # left in the target folder before unpacking
    archive = build_tar(tmp_path / "a.tar.gz", [("file", "top/s/PWNED/x", b"x"),
                                                 ("file", "top/ok.py", b"")])
    before = tree_of(tmp_path, dest)
    with pytest.raises(UnsafeArchiveError, match="needs the folder 's', which is a symbolic link"):
        unpack_archive(archive, dest)
    assert tree_of(tmp_path, dest) == before


@pytest.mark.parametrize(
    "entries, message",
    [
        ([("sym", "top/l", "a"), ("file", "top/l", b"x")], "share the path 'l'"),
        ([("file", "top/l", b"x"), ("sym", "top/l", "a")], "share the path 'l'"),
        ([("sym", "top/l", "d"), ("dir", "top/d/"), ("file", "top/l/x", b"x")],
         "lies under the symbolic link 'l'"),
        ([("file", "top/a", b"x"), ("sym", "top/e", "")], "empty or NUL-holding target"),
    ],
)
def test_members_around_symlinks_are_refused(entries, message, tmp_path):
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(UnsafeArchiveError, match=message):
        unpack_archive(build_tar(tmp_path / "a.tar.gz", entries), dest)
    assert list(dest.iterdir()) == []


def test_links_are_made_after_the_files_they_name(tmp_path):
    archive = build_tar(
        tmp_path / "a.tar.gz",
        [("sym", "top/alias.py", "pkg/mod.py"), ("sym", "top/pkgs", "pkg"),
         ("file", "top/pkg/mod.py", b"X = 1\n"), ("hard", "top/twin", "top/alias.py")],
    )
    dest = tmp_path / "out"
    dest.mkdir()
    unpack_archive(archive, dest)
    assert (dest / "alias.py").read_text() == "X = 1\n" and os.readlink(dest / "pkgs") == "pkg"
    assert os.readlink(dest / "twin") == "pkg/mod.py"  # a hard link to a link is that link


def build_damaged_zip(path: Path) -> Path:
    build_zip(path, [("demo-1.0/src/demo/core.py", DEMO_CORE * 50)])
    data = bytearray(path.read_bytes())
    data[60] ^= 0xFF  # inside the stored data: the CRC no longer matches
    path.write_bytes(bytes(data))
    return path


def build_truncated_tar(path: Path) -> Path:
    build_tar(path, demo_entries() + [("file", "demo-1.0/big", os.urandom(50_000))])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


DAMAGED = {
    "bad-crc-zip": (build_damaged_zip, "damaged"),
    "truncated-tar": (build_truncated_tar, "damaged"),
    "deep-member": (lambda p: build_tar(p, [("file", "demo-1.0/" + "a/" * 2000 + "x", b"x")]),
                    "refused"),
    "empty-link": (lambda p: build_tar(p, demo_entries() + [("sym", "demo-1.0/l", "")]),
                   "empty"),
    "long-name": (lambda p: build_tar(p, demo_entries() + [("file", "demo-1.0/" + "n" * 300, b"")]),
                  "over 255 bytes"),
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_bad_archives_raise_the_fetch_error(case, tmp_path, worlds_root, fake_pypi):
    build, message = DAMAGED[case]
    archive = build(tmp_path / "demo-1.0.tar.gz")
    fake_pypi["archive"] = archive
    with pytest.raises(WorldFetchError, match=message):
        fetch_world("demo", progress=False, manifest={"demo": demo_spec(archive)})
    assert leftovers(worlds_root) == [] and not (worlds_root / "demo-1.0").exists()


def test_cli_fetch_reports_a_damaged_archive_without_a_traceback(
    tmp_path, worlds_root, fake_pypi, capsys
):
    archive = build_damaged_zip(tmp_path / "demo-1.0.tar.gz")
    fake_pypi["archive"] = archive
    manifest = tmp_path / "w.yaml"
    manifest.write_text(BASE_ENTRY % sha256(archive))
    assert run_cli("worlds", "fetch", "demo", "--manifest", str(manifest)) == 1
    err = capsys.readouterr().err
    assert "demo 1.0: FAILED: demo-1.0.tar.gz: the archive is damaged" in err
    assert str(tmp_path) not in err


def test_a_zip_bomb_is_refused_by_the_per_world_limit(tmp_path, worlds_root, fake_pypi):
    import zipfile

    assert W.MAX_UNPACKED_BYTES < 200 * 1024**2
    archive = tmp_path / "demo-1.0.tar.gz"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("demo-1.0/src/demo/core.py", DEMO_CORE)
        with zf.open("demo-1.0/src/demo/zeros.py", "w", force_zip64=True) as fh:
            for _ in range(200):  # 200 MB of zeros, under 1 MB packed
                fh.write(bytes(1 << 20))
    assert archive.stat().st_size < 2 * 1024**2
    fake_pypi["archive"] = archive
    with pytest.raises(UnsafeArchiveError, match="over the per-world limit"):
        fetch_world("demo", progress=False, manifest={"demo": demo_spec(archive)})
    assert leftovers(worlds_root) == []


def test_hard_link_copies_count_against_the_limit(tmp_path):
    # one 400 kB file and four hard links to it declare 400 kB but would write 2 MB
    entries = [("file", "top/blob", b"x" * 400_000)]
    entries += [("hard", f"top/copy{i}", "top/blob") for i in range(4)]
    archive = build_tar(tmp_path / "a.tar.gz", entries)
    (tmp_path / "small").mkdir()
    with pytest.raises(UnsafeArchiveError, match="more than 1,000,000 bytes"):
        unpack_archive(archive, tmp_path / "small", max_bytes=1_000_000)
    (tmp_path / "large").mkdir()
    unpack_archive(archive, tmp_path / "large", max_bytes=2_000_000)
    assert (tmp_path / "large/copy3").read_bytes() == b"x" * 400_000


# ----------------------------------------------------------------- sandbox: hard links, limits


def test_hard_links_to_files_outside_the_world_are_refused(tmp_path):
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg/ok.py").write_text("def ok():\n    return 1\n")
    secret = tmp_path / "secret.py"
    secret.write_text("TOKEN = 'hunter2'\n")
    os.link(secret, root / "pkg/leak.py")
    os.link(root / "pkg/ok.py", root / "pkg/twin.py")  # both names inside: an ordinary file
    w = World(root)
    assert w.files() == ["pkg/ok.py", "pkg/twin.py"]
    message = refused(w, "pkg/leak.py", "outside")
    assert "hard link" in message and str(tmp_path) not in message
    assert w.lines("pkg/twin.py")[0] == "def ok():"
    opted_in = World(root, hard_links="any")  # e.g. a pnpm or uv tree linked from a store
    assert opted_in.lines("pkg/leak.py") == ["TOKEN = 'hunter2'"]
    assert "pkg/leak.py" in opted_in.files()
    with pytest.raises(ValueError, match="hard_links must be one of"):
        World(root, hard_links="sometimes")


def test_over_long_paths_and_link_loops_get_clear_refusals(sandbox):
    os.symlink("loop_b", sandbox.root / "pkg/loop_a.py")
    os.symlink("loop_a.py", sandbox.root / "pkg/loop_b")
    cases = {
        "pkg/" + "x" * 300 + ".py": "over the 255-byte limit for a file or folder name",
        "pkg/" + "a/" * 3000 + "b.py": "over the 4,096-character limit",
        "p" * 5_000_000: "5,000,000 characters long",
        "pkg/loop_a.py": "loop of symbolic links",
        "pkg/\udcff\ud800.py": "cannot be part of a file name",
    }
    for path, message in cases.items():
        text = refused(sandbox, path, "bad_path")
        assert message in text
        assert str(sandbox.root) not in text and len(text) < 400


def test_control_characters_keep_paths_and_messages_one_line(sandbox):
    (sandbox.root / "pkg" / "two\nlines.py").write_text("X = 1\n")
    assert not any("\n" in f for f in sandbox.files())
    for path in ("pkg/two\nlines.py", "pkg/a\tb.py", "0\n0"):
        text = refused(sandbox, path, "bad_path")
        assert "control character" in text and "\n" not in text
