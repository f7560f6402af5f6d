"""W, the repository world: a real repository folder seen read-only and bounded.

:class:`World` is the sandbox every tool reads through. Nothing outside the world root is
ever opened: parent-directory escapes, absolute paths elsewhere, symlinks that point out,
device files and other non-regular files are refused with a clear message; binary and
oversized files are refused; undecodable bytes are replaced, never fatal.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

#: Extensions treated as source code, by language (used for stats and the code index).
LANGUAGE_EXTENSIONS: dict[str, tuple[str, ...]] = {
    "python": (".py", ".pyi"),
    "typescript": (".ts", ".tsx", ".mts", ".cts"),
    "javascript": (".js", ".jsx", ".mjs", ".cjs"),
    "rust": (".rs",),
}
EXT_LANGUAGE = {ext: lang for lang, exts in LANGUAGE_EXTENSIONS.items() for ext in exts}

MAX_FILE_BYTES = 2_000_000
SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", "node_modules", ".mypy_cache", ".tox"}


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
    """

    root: Path
    name: str = ""
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    version: str = ""
    language: str = ""

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve(strict=True)
        if not self.root.is_dir():
            raise NotADirectoryError(f"world root {self.root} is not a folder")
        self.name = self.name or self.root.name
        self.include = [PurePosixPath(p).as_posix().strip("/") for p in self.include if p]
        self._files: list[str] | None = None
        self._cache: dict[str, _Cached] = {}

    # ------------------------------------------------------------------ scope

    def in_scope(self, rel: str) -> bool:
        """Whether a relative POSIX path belongs to the world (included, not excluded)."""
        if self.include and not any(
            rel == inc or rel.startswith(inc + "/") for inc in self.include
        ):
            return False
        parts = rel.split("/")
        if any(p in SKIP_DIRS for p in parts[:-1]):
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
                        if stat.S_ISREG(st.st_mode):
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
        text = path.strip().strip("'\"`").replace("\\", "/")
        if "\x00" in text:
            raise SandboxError("The file path contains a NUL byte.", "bad_path")
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
        rel = "/".join(parts)
        # accept a leading "<world name>/" as the project structure shows it
        if parts and parts[0] == self.name and not (self.root / rel).exists():
            rel = "/".join(parts[1:])
        return rel

    def resolve(self, path: str) -> Path:
        """The real path of an in-world regular file, after every sandbox check."""
        rel = self.normalize(path)
        if not rel:
            raise SandboxError("That names the repository root, not a file.", "not_a_file")
        candidate = self.root / rel
        try:
            real = candidate.resolve(strict=False)
        except (OSError, RuntimeError) as exc:  # symlink loops
            raise SandboxError(f"'{path}' cannot be resolved ({exc}).", "bad_path") from exc
        if not real.is_relative_to(self.root):
            raise SandboxError(
                f"'{path}' points outside the repository (through a symbolic link); refused.",
                "outside",
            )
        if not candidate.exists():
            hint = self.close_matches(rel)
            msg = f"File not found: '{rel}'."
            if hint:
                msg += " Did you mean: " + ", ".join(hint) + "?"
            else:
                msg += " Check the project structure for the exact path."
            raise SandboxError(msg, "not_found")
        if not self.in_scope(real.relative_to(self.root).as_posix()) or not self.in_scope(rel):
            raise SandboxError(f"'{rel}' is not part of this world's scope.", "out_of_scope")
        st = real.stat()
        if stat.S_ISDIR(st.st_mode):
            inside = [f for f in self.files() if f.startswith(rel + "/")][:8]
            more = ", ".join(inside)
            raise SandboxError(
                f"'{rel}' is a folder, not a file." + (f" Files in it include: {more}" if more else ""),
                "not_a_file",
            )
        if not stat.S_ISREG(st.st_mode):
            raise SandboxError(f"'{rel}' is not a regular file; refused.", "not_a_file")
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
        lines = text.splitlines()
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
