"""The source formats: which reader module reads which files, how ``auto`` tells a file's
format from its name and shape, and reading one source file (JSON, JSONL, or a file of one
OpenHands evaluation record a line) into parsed content or a :class:`BadInput`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from adakit.importers import generic, mini_swe_agent, openhands, swe_agent
from adakit.importers.base import BadInput

#: Format name -> reader module (``parse``, ``FORMAT``, ``AGENT``, ``EXTENSIONS``).
FORMATS: dict[str, Any] = {
    m.FORMAT: m for m in (swe_agent, mini_swe_agent, openhands, generic)
}
AUTO = "auto"


def detect_format(data: Any, name: str) -> str:
    """The format of a parsed file (``auto``): by its extension and top-level shape."""
    if name.endswith(".jsonl"):
        return openhands.FORMAT if _history_records(data) else generic.FORMAT
    if isinstance(data, dict):
        if isinstance(data.get("trajectory"), list):
            return swe_agent.FORMAT
        if isinstance(data.get("messages"), list):
            return mini_swe_agent.FORMAT
        if isinstance(data.get("history"), list):
            return openhands.FORMAT
    if isinstance(data, list) and data and all(isinstance(e, dict) for e in data):
        if any("action" in e or "observation" in e for e in data):
            return openhands.FORMAT
        if all("role" in e for e in data):
            return mini_swe_agent.FORMAT
    raise BadInput("unknown shape", "not a trajectory of any known format")


def discover(paths: Iterable[str | Path], fmt: str) -> tuple[list[Path], list[Path]]:
    """(files to import, paths that do not exist): folders are searched recursively for the
    format's file endings; a file named directly is taken whatever its ending."""
    exts = tuple(e for m in FORMATS.values() for e in m.EXTENSIONS) if fmt == AUTO \
        else FORMATS[fmt].EXTENSIONS
    found: list[Path] = []
    missing: list[Path] = []
    for item in paths:
        p = Path(item).expanduser()
        if p.is_dir():
            found.extend(sorted(
                f for f in p.rglob("*") if f.is_file() and f.name.endswith(exts)
                and not any(part.startswith(".") for part in f.relative_to(p).parts)))
        elif p.is_file():
            found.append(p)
        else:
            missing.append(p)
    return list(dict.fromkeys(found)), missing


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        end = len(text.rstrip())
        if exc.pos >= end - 1:
            raise BadInput("truncated JSON", f"ends at character {end} mid-document") from None
        raise BadInput("not JSON", f"{exc.msg} at line {exc.lineno}") from None


def _jsonl(text: str) -> list[Any]:
    lines = [ln for ln in text.split("\n") if ln.strip()]
    out = []
    for i, line in enumerate(lines, 1):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if i == len(lines) and not text.endswith("\n"):
                raise BadInput("truncated JSON", f"last line {i} is cut off") from None
            raise BadInput("not JSON", f"line {i}: {exc.msg}") from None
    return out


def _history_records(data: Any) -> bool:
    """Is this JSONL content a file of OpenHands evaluation records (``history`` per line)?"""
    return (isinstance(data, list) and bool(data) and isinstance(data[0], dict)
            and isinstance(data[0].get("history"), list))


def _first_record(text: str) -> Any:
    line = next((ln for ln in text.split("\n") if ln.strip()), "")
    try:
        return [json.loads(line)]
    except json.JSONDecodeError:
        return None


def read_records(path: Path, raw: bytes) -> list[tuple[str, str, Any]]:
    """(label, sha256, parsed record or :class:`BadInput`) of every line of a file of one
    record per line (an OpenHands ``output.jsonl``): each line is its own source, so a
    truncated last line (a run still being written) costs only that line."""
    out: list[tuple[str, str, Any]] = []
    lines = raw.split(b"\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        label, sha = f"{path}:{i}", hashlib.sha256(line.rstrip(b"\r")).hexdigest()
        try:
            out.append((label, sha, json.loads(line.decode("utf-8"))))
        except UnicodeDecodeError as exc:
            out.append((label, sha, BadInput("not UTF-8 text", f"byte {exc.start}")))
        except json.JSONDecodeError as exc:
            cut = i == len(lines) and not raw.endswith(b"\n")
            out.append((label, sha, BadInput("truncated JSON", f"line {i} is cut off") if cut
                        else BadInput("not JSON", f"line {i}: {exc.msg}")))
    if not out:
        raise BadInput("empty trajectory", "the file is empty")
    return out


def read_source(path: Path, fmt: str) -> tuple[str, str, Any]:
    """(sha256, format, parsed content) of one source file, or :class:`BadInput`."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInput("unreadable", exc.strerror or str(exc)) from None
    sha = hashlib.sha256(raw).hexdigest()
    if not raw.strip():
        raise BadInput("empty trajectory", "the file is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput("not UTF-8 text", f"byte {exc.start}") from None
    jsonl = path.name.endswith(".jsonl") if fmt == AUTO else fmt == generic.FORMAT
    if fmt in (AUTO, openhands.FORMAT) and path.name.endswith(".jsonl") and (
            fmt == openhands.FORMAT or _history_records(_first_record(text))):
        return sha, openhands.FORMAT, read_records(path, raw)  # one run per line
    data = _jsonl(text) if jsonl else _json(text)
    if fmt == AUTO:
        fmt = detect_format(data, path.name)
    return sha, fmt, data

