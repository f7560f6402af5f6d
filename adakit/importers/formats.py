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

import msgspec

from adakit.importers import (
    aider,
    atif,
    claude_code,
    codex,
    generic,
    inspect_log,
    mini_swe_agent,
    openhands,
    swe_agent,
)
from adakit.importers.base import BadInput

#: Format name -> reader module: ``parse``, ``markers`` (the fields ``auto`` knows it by),
#: ``FORMAT``, ``AGENT``, ``EXTENSIONS``, ``LINES`` (true: its files are JSON lines) and, where
#: a run spans several files, ``with_companions`` (the other files' content added). A text
#: format (``TEXT``: aider's Markdown) has ``sessions`` splitting a file into its runs
#: and may name hidden files a folder search takes (``NAMES``).
FORMATS: dict[str, Any] = {
    m.FORMAT: m for m in (swe_agent, mini_swe_agent, openhands, generic, claude_code, codex, atif,
                          inspect_log, aider)
}
AUTO = "auto"


class Records(list):  # type: ignore[type-arg]
    """The runs of one source file that holds several (an OpenHands ``output.jsonl``, the
    samples of an Inspect log, the sessions of an aider history): (label, sha256, parsed record
    or :class:`BadInput`) each. ``stem`` names the runs' files (default: the file's name
    without its last suffix)."""

    def __init__(self, items: Iterable[Any] = (), stem: str | None = None) -> None:
        super().__init__(items)
        self.stem = stem


#: What ``auto`` says of a file no format's markers fit.
NO_MARKERS = "no format's markers (looked for: {looked})"


def detect_format(data: Any, lines: bool) -> tuple[str, str]:
    """(format, the markers it was chosen by) of a parsed file, for ``auto``.

    ``lines``: the file was read as JSON lines (a list of records). Every format of that kind
    is asked, in registry order, whether the content carries its own fields (its ``markers``);
    the file's name plays no part, so a SWE-agent ``.traj`` without its ``trajectory`` is
    refused rather than taken for another format. Raises :class:`BadInput` (unknown shape)
    naming the top-level keys found when no format fits."""
    pool = [m for m in FORMATS.values() if getattr(m, "LINES", False) == lines
            and not getattr(m, "TEXT", False)]
    for module in pool:
        found = module.markers(data)
        if found:
            return module.FORMAT, found
    looked = ", ".join(m.FORMAT for m in pool)
    raise BadInput("unknown shape", f"{NO_MARKERS.format(looked=looked)}; {_shape(data)}")


def _shape(data: Any) -> str:
    """A short description of a parsed file's top level, for a one-line skip reason."""
    if isinstance(data, dict):
        keys = sorted(map(str, data))
        return "an object with keys " + ", ".join(keys[:8]) + (" ..." if len(keys) > 8 else "") \
            if keys else "an empty object"
    if isinstance(data, list):
        kinds = sorted({type(e).__name__ for e in data[:50]})
        return f"a list of {len(data)} ({', '.join(kinds) or 'nothing'})"
    return f"a JSON {type(data).__name__}"


def discover(paths: Iterable[str | Path], fmt: str) -> tuple[list[Path], list[Path]]:
    """(files to import, paths that do not exist): folders are searched recursively for the
    format's file endings, outside hidden folders and skipping hidden files no format names
    (aider's ``.aider.chat.history.md`` is one it names); a file named directly is taken
    whatever its ending."""
    exts = tuple(e for m in FORMATS.values() for e in m.EXTENSIONS) if fmt == AUTO \
        else FORMATS[fmt].EXTENSIONS
    names = {n for m in FORMATS.values() for n in getattr(m, "NAMES", ())
             if fmt in (AUTO, m.FORMAT)}
    found: list[Path] = []
    missing: list[Path] = []
    for item in paths:
        p = Path(item).expanduser()
        if p.is_dir():
            found.extend(sorted(
                f for f in p.rglob("*") if f.is_file() and f.name.endswith(exts)
                and not _hidden(f.relative_to(p).parts, names)))
        elif p.is_file():
            found.append(p)
        else:
            missing.append(p)
    return list(dict.fromkeys(found)), missing


def _hidden(parts: tuple[str, ...], names: set[str]) -> bool:
    """A path under a hidden folder, or a hidden file no format names (aider's history)."""
    return any(p.startswith(".") for p in parts[:-1]) or (
        parts[-1].startswith(".") and parts[-1] not in names)


def _text_format(text: str, fmt: str) -> Any:
    """The text (not JSON) format that reads this file: the one named, or for ``auto`` the
    one whose markers a file that does not open like JSON carries (None: JSON)."""
    if fmt != AUTO:
        return FORMATS[fmt] if getattr(FORMATS[fmt], "TEXT", False) else None
    if text.lstrip()[:1] in ("{", "["):
        return None
    return next((m for m in FORMATS.values() if getattr(m, "TEXT", False) and m.markers(text)),
                None)


#: Why a file nested deeper than the JSON parser follows is skipped.
TOO_DEEP = "too deeply nested"


#: Whether JSON is read with msgspec first (the json module reads what msgspec refuses);
#: False reads everything with the json module (the tests compare the two).
FAST_JSON = True
#: msgspec reads JSON to the json module's values, integers of any size included (since 0.19),
#: and refuses what the json module reads otherwise (NaN and Infinity, lone surrogates,
#: numbers beyond a double), so those go to the json module. Nesting within a few levels of
#: the recursion limit is the one band where the two may differ (a value or "too deeply
#: nested"); orjson's fixed limit of 1024 differed over a wider band.
_FAST = msgspec.json.Decoder()


def _json(text: str, fast: bool = False, raw: bytes | None = None) -> Any:
    """The JSON document ``text`` (``raw``: its UTF-8 bytes, which msgspec reads without
    encoding the text again)."""
    if fast:
        try:
            return _FAST.decode(text if raw is None else raw)
        except (msgspec.DecodeError, RecursionError, UnicodeEncodeError):
            pass  # the json module reads what msgspec refuses (NaN, deep nesting) or says why
    try:
        return json.loads(text)
    except RecursionError:
        raise BadInput(TOO_DEEP, "the JSON nests deeper than the parser follows") from None
    except json.JSONDecodeError as exc:
        raise _decode_fault(exc, text) from None


def _decode_fault(exc: json.JSONDecodeError, text: str) -> BadInput:
    """``truncated JSON`` when the document stops mid-value (also inside a string), else
    ``not JSON`` with the parser's message and position."""
    end = len(text.rstrip())
    # a string the parser finds unterminated runs to the end (a newline inside one is refused
    # as a control character before), so the document was cut inside it
    if exc.pos >= end - 1 or exc.msg.startswith("Unterminated string"):
        return BadInput("truncated JSON", f"ends at character {end} mid-document")
    return BadInput("not JSON", f"{exc.msg} (line {exc.lineno}, column {exc.colno})")


_DECODER = json.JSONDecoder()


def _line(line: str) -> Any:
    """One JSON line (``json.loads`` without its wrapper: a third faster on many lines)."""
    value, end = _DECODER.raw_decode(line)
    if end != len(line):
        raise json.JSONDecodeError("Extra data", line, end)
    return value


def _lines_in_place(raw: bytes) -> list[Any] | None:
    """Every non-empty line of a JSONL file read by msgspec where it lies in ``raw`` (no
    line is copied out), or None when msgspec refuses one: a line of white space, two values
    on a line, what the json module reads differently; :func:`_jsonl` then reads the lines
    one by one as always, so the values and the errors are the same."""
    out: list[Any] = []
    view = memoryview(raw)
    start, n = 0, len(raw)
    while start < n:
        end = raw.find(b"\n", start)
        if end < 0:
            end = n
        if end > start:
            try:
                out.append(_FAST.decode(view[start:end]))
            except (msgspec.DecodeError, RecursionError, UnicodeEncodeError):
                return None
        start = end + 1
    return out


def _jsonl(text: str, fast: bool = False, raw: bytes | None = None) -> list[Any]:
    if fast and raw is not None:
        found = _lines_in_place(raw)
        if found is not None:
            return found
    lines = [ln.strip() for ln in text.split("\n") if ln.strip()]
    out = []
    for i, line in enumerate(lines, 1):
        if fast:
            try:
                out.append(_FAST.decode(line))
                continue
            except (msgspec.DecodeError, RecursionError, UnicodeEncodeError):
                pass  # the json module reads what msgspec refuses (NaN, deep nesting) or says why
        try:
            out.append(_line(line))
        except RecursionError:
            raise BadInput(TOO_DEEP, f"line {i} nests deeper than the parser follows") from None
        except json.JSONDecodeError as exc:
            if i == len(lines) and not text.endswith("\n"):
                raise BadInput("truncated JSON", f"last line {i} is cut off") from None
            raise BadInput("not JSON", f"line {i}: {exc.msg} (column {exc.colno})") from None
    return out


def _history_records(data: Any) -> bool:
    """Is this JSONL content a file of OpenHands evaluation records (``history`` per line)?"""
    return (isinstance(data, list) and bool(data) and isinstance(data[0], dict)
            and isinstance(data[0].get("history"), list))


def _first_record(text: str) -> Any:
    line = next((ln for ln in text.split("\n") if ln.strip()), "")
    try:
        return [json.loads(line)]
    except (json.JSONDecodeError, RecursionError):
        return None


def read_records(path: Path, raw: bytes) -> Records:
    """(label, sha256, parsed record or :class:`BadInput`) of every line of a file of one
    record per line (an OpenHands ``output.jsonl``): each line is its own source, so a
    truncated last line (a run still being written) costs only that line."""
    out = Records()
    lines = raw.split(b"\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        label, sha = f"{path}:{i}", hashlib.sha256(line.rstrip(b"\r")).hexdigest()
        try:
            out.append((label, sha, json.loads(line.decode("utf-8"))))
        except UnicodeDecodeError as exc:
            out.append((label, sha, BadInput("not UTF-8 text", f"byte {exc.start}")))
        except RecursionError:
            out.append((label, sha, BadInput(TOO_DEEP, f"line {i} nests deeper than the "
                                             "parser follows")))
        except json.JSONDecodeError as exc:
            cut = i == len(lines) and not raw.endswith(b"\n")
            out.append((label, sha, BadInput("truncated JSON", f"line {i} is cut off") if cut
                        else BadInput("not JSON", f"line {i}: {exc.msg}")))
    if not out:
        raise BadInput("empty trajectory", "the file is empty")
    return out


def read_source(path: Path, fmt: str) -> tuple[str, str, Any, str]:
    """(sha256, format, parsed content, the markers ``auto`` chose the format by; "" when
    the format was given) of one source file, or :class:`BadInput`."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInput("unreadable", exc.strerror or str(exc)) from None
    sha = hashlib.sha256(raw).hexdigest()
    if not raw or raw.isspace():  # (raw.strip() would copy the file)
        raise BadInput("empty trajectory", "the file is empty")
    if raw.startswith(inspect_log.ZIP_MAGIC) and fmt in (AUTO, inspect_log.FORMAT):
        return _inspect(path, raw, None, fmt)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput("not UTF-8 text", f"byte {exc.start}") from None
    reader = _text_format(text, fmt)
    if reader is not None:  # a text file of sessions, each its own run
        return sha, reader.FORMAT, Records(reader.sessions(path, text), stem=path.name), \
            reader.markers(text) if fmt == AUTO else ""
    lines = path.name.endswith(".jsonl") if fmt == AUTO else getattr(FORMATS[fmt], "LINES", False)
    if fmt in (AUTO, openhands.FORMAT) and path.name.endswith(".jsonl") and (
            fmt == openhands.FORMAT or _history_records(_first_record(text))):
        found = "a 'history' list of events on the first line" if fmt == AUTO else ""
        return sha, openhands.FORMAT, read_records(path, raw), found  # one run per line
    if fmt == inspect_log.FORMAT:
        return _inspect(path, raw, text, fmt)
    data = _jsonl(text, FAST_JSON, raw) if lines else _json(text, FAST_JSON, raw)
    if fmt != AUTO:
        return sha, fmt, data, ""
    fmt, found = detect_format(data, lines)
    if fmt == inspect_log.FORMAT:  # one run per sample
        return sha, fmt, Records(inspect_log.read_json_log(data, str(path))), found
    return sha, fmt, data, found


def _inspect(path: Path, raw: bytes, text: str | None, fmt: str) -> tuple[str, str, Any, str]:
    """An Inspect log read as its samples' records (a ``.eval`` zip, or a ``.json`` log)."""
    records = Records(inspect_log.read_log(str(path), raw, text))
    found = "a zip with header.json or _journal/start.json and samples/*.json" \
        if fmt == AUTO else ""
    return hashlib.sha256(raw).hexdigest(), inspect_log.FORMAT, records, found
