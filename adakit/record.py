"""R, the recording scheme: one versioned JSONL file per run, and the loader that turns a
corpus of such files into tidy DataFrames (runs, turns, reads) for the lenses.

A run file holds a ``header`` record, one ``turn`` record per turn and an ``end`` record.
Records are appended and flushed (and fsync'ed) one at a time, so a crash loses at most the
turn in flight; a torn last line is ignored on reading. Credentials are never part of any
record: model settings carry the *name* of the key variable, never its value.

Runs imported from other agents (:mod:`adakit.importers`, schema 1.1) use the same records:
their header's ``source`` names the format, the source file and its sha256, their turns may
carry the action classes EDT / EXE / SUB (:data:`ACT_ORDER`), and their end record keeps the
source's exit status and submission. A subagent's turns (Claude Code's ``Task``) stay in the
parent run in time order, each marked with its :class:`Sidechain` span; a compaction of the
source's history is an :class:`Injection` of source ``compaction`` on the turn it followed. Every field
added in 1.1 is optional (``Turn.sidechain`` is left out of the record when unset), so 1.0
files load and launched runs are written byte for byte as before. A fork of a recorded run
(``adakit fork``, docs/forks.md) says where it came from in its header's ``forked_from``
(:class:`ForkInfo`), left out of every other header.

Time is kept on three clocks (:func:`time_totals`; the loader derives them from the turn
records, so runs recorded before the End totals carried them get them too): ``active_s``, the
agent's own turn time (model reply, tool, hint model); ``coach_s``, the coach-judge reviews
that run inside a coach run's turns (on both, a reply replayed from the response cache counts
the latency it had when it was computed, :func:`replayed_seconds`); ``wall_s``
(= ``elapsed_s``), launch to end, including any downtime between a crash and its resume. Per turn the turns table has ``coach_s``,
``active_s`` and the turn's start/end as a fraction of the run's active time
(``active_rel_start``/``active_rel_end``; ``t_rel_start``/``t_rel_end`` are the wall-clock
fractions).
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import json
import os
import re
import shutil
import time
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec
import numpy as np
import pandas as pd
import pydantic_core
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)
from pydantic.json_schema import models_json_schema

SCHEMA_VERSION = "1.1"

#: Ada's seven tools in Table 1 order, with the paper's abbreviations.
TOOL_ABBR: dict[str, str] = {
    "get_structural_overview": "OVW",
    "peek_code_region": "PKR",
    "explore_code": "EXP",
    "create_memory": "MEM",
    "bookmark": "BKM",
    "get_hint_on_snippet": "HNT",
    "stash_conclusion": "CON",
}
ABBR_TOOL = {v: k for k, v in TOOL_ABBR.items()}
TOOL_ORDER = list(TOOL_ABBR.values())
NAV = frozenset({"OVW", "PKR", "EXP"})
COG = frozenset({"MEM", "BKM", "HNT", "CON"})
#: Canonical classes outside Ada's read-only set, for trajectories of other agents imported by
#: :mod:`adakit.importers`: editing files, executing commands, submitting the result.
ACT_ABBR: dict[str, str] = {"edit": "EDT", "execute": "EXE", "submit": "SUB"}
ACT_ORDER = list(ACT_ABBR.values())
ACT = frozenset(ACT_ORDER)
#: Every canonical tool abbreviation: Ada's seven, then the imported agents' action classes.
CANONICAL_ORDER = TOOL_ORDER + ACT_ORDER

TerminationReason = Literal[
    "finalize", "turn_bound", "malformed_limit", "model_error", "context_overflow",
    # imported runs (schema 1.1): the agent submitted; a cost limit stopped it; another exit
    # of the source scaffold (its own status is kept verbatim in ``End.exit_status``)
    "submit", "cost_limit", "agent_exit",
]
ErrorType = Literal["tool_error", "unknown_tool", "malformed", "model_error", "repeated"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelInfo(_Record):
    """The foundation model (or baseline policy) that produced the run."""

    name: str
    kind: Literal["llm", "local", "baseline"] = "llm"
    model_id: str = ""
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    context_window: int | None = None
    mode: str = "xml"
    constrained: bool = False
    weights: dict[str, Any] | None = None
    sampling: dict[str, Any] | None = None
    thinking_chars: int | None = None


class WorldInfo(_Record):
    name: str
    version: str = ""
    language: str = ""
    source: str = ""
    sha256: str | None = None


class TaskInfo(_Record):
    family: str
    target: str | None = None
    prompt: str = ""


class ConditionInfo(_Record):
    name: str
    budget: int | None = None
    params: dict[str, Any] = Field(default_factory=dict)


class SourceInfo(_Record):
    """Where an imported run came from (schema 1.1): the source format, file and sha256.

    ``timing`` says how turn times were obtained: ``recorded`` (timestamps in the source),
    ``execution`` (only per-step execution times: turns are laid end to end, model time
    unknown) or ``none`` (no timing: turns are one second apart, so time equals turn order).
    """

    format: str
    file: str
    sha256: str
    agent: str = ""
    agent_version: str = ""
    instance: str | None = None
    timing: Literal["recorded", "execution", "none"] = "none"


#: What a fork changes from its turn on (``adakit fork``, :mod:`adakit.study.fork`).
ForkChange = Literal["condition", "inject", "model", "without", "placebo"]


class ForkInfo(_Record):
    """Where a fork came from (schema 1.1, optional): the parent run, the turn ``turn`` up to
    which the fork's turns are the parent's (replayed from the record, no model asked), the
    sha256 of that prefix (:func:`prefix_digest`), the one change made from there on and its
    ``value`` (a condition or model name, the injected text, the tool taken away; None for a
    placebo), and the fork's seed (also the header's ``seed``). Forks of one parent at one
    turn share ``parent``, ``turn`` and ``prefix_sha256``: they form a fork set."""

    parent: str
    turn: int
    prefix_sha256: str
    change: ForkChange
    value: str | None = None
    seed: int = 0


class Header(_Record):
    kind: Literal["header"] = "header"
    schema_version: str = SCHEMA_VERSION
    run_id: str
    study: str = ""
    model: ModelInfo
    world: WorldInfo
    task: TaskInfo
    condition: ConditionInfo
    turn_bound: int
    seed: int = 0
    repeat: int = 0
    adakit_version: str = ""
    started_at: float = Field(default_factory=time.time)
    system_prompt: str = ""
    scaffold: dict[str, Any] = Field(default_factory=dict)
    source: SourceInfo | None = None
    forked_from: ForkInfo | None = None

    @model_serializer(mode="wrap")
    def _without_unset_fork(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if data.get("forked_from") is None:  # headers of runs that are no fork stay as they were
            data.pop("forked_from", None)
        return data


class ToolCall(_Record):
    tool: str
    params: dict[str, Any] = Field(default_factory=dict)


def call_repeats_of(turns: Iterable[Turn]) -> list[tuple[int, bool]]:
    """For each turn with a call: its number, and whether the call exactly repeats (same tool,
    same parameters) an earlier call among ``turns``."""
    seen: set[str] = set()
    out = []
    for t in turns:
        if t.call is None:
            continue
        key = t.call.tool + json.dumps(t.call.params, sort_keys=True, default=str)
        out.append((t.turn, key in seen))
        seen.add(key)
    return out


class ParseError(_Record):
    kind: Literal[
        "no_tool",
        "multiple_tools",
        "unknown_tool",
        "unknown_param",
        "missing_param",
        "bad_value",
        "empty_reply",
    ]
    message: str


class ToolMetrics(_Record):
    """What a tool call touched, for the lenses (Table 1 abbreviations in ``tool``)."""

    tool: str | None = None
    file: str | None = None
    ranges: list[tuple[int, int]] = Field(default_factory=list)
    lines_viewed: int = 0
    structural: bool = False
    block: str | None = None
    symbol: str | None = None
    action: str | None = None
    result_count: int | None = None
    error_type: ErrorType | None = None
    confidence: str | None = None
    finalize: bool | None = None
    exit_code: int | None = None
    mapped_by: str | None = None


class Injection(_Record):
    """Text put into the agent's context by something other than the tools: a reminder, the
    coach, the system, or (imported runs) a ``compaction``: the summary the source scaffold
    put in place of the history it dropped. Like every injection it is recorded on the turn it
    followed and is in the next prompt (a compaction before any turn: on the first turn)."""

    source: Literal["reminder", "coach", "system", "compaction"]
    text: str


class Sidechain(_Record):
    """Where a subagent's turn sits in its parent run (imported runs, schema 1.1): the turns
    a delegated agent (Claude Code's ``Task``/``Agent``) took are kept in the parent run, in
    time order, each marked with the span it belongs to, so they are neither flattened into
    the parent's own turns nor dropped. ``id`` names the span (the subagent's id, or the
    delegating call's id), ``parent_turn`` the parent's turn that started it (None when the
    source does not link them), ``agent`` the subagent's kind, ``depth`` 1 for a subagent
    of the main agent, 2 for one of its subagents."""

    id: str
    parent_turn: int | None = None
    agent: str = ""
    depth: int = 1


#: ``ModelCall.purpose`` of the agent's own draws in a redrawn turn (``redraw_repeats``)
DRAW = "draw"
_DRAW_FIELDS = ("draw", "repeat_of", "temperature", "seed", "text")


class ModelCall(_Record):
    """A secondary model call made inside a turn (e.g. the hint model behind HNT), or one
    draw of the agent's reply in a turn whose first draw exactly repeated an earlier call
    (purpose :data:`DRAW`, schema 1.1): ``draw`` numbers the draws (0 the first, k the k-th
    redraw), ``repeat_of`` is the earlier turn a draw repeated (None for a kept draw that
    repeats nothing), ``temperature`` and ``seed`` are what the draw was sampled with
    (``seed`` None: the run's own), ``text`` is the raw reply of a draw that was not kept (the
    kept one is the turn's ``raw_text``, and the last draw is always the kept one). The draw
    fields are left out of the record when unset, so other calls are written as before."""

    purpose: str
    model: str
    latency_s: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    cached: bool = False
    error: str | None = None
    draw: int | None = None
    repeat_of: int | None = None
    temperature: float | None = None
    seed: int | None = None
    text: str | None = None

    @model_serializer(mode="wrap")
    def _without_unset_draw_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for key in _DRAW_FIELDS:
            if data.get(key) is None:
                data.pop(key, None)
        return data


class Turn(_Record):
    kind: Literal["turn"] = "turn"
    turn: int
    started_at: float
    ended_at: float
    latency_s: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_reused: int | None = None
    cost_usd: float | None = None
    cached: bool = False
    constrained: bool = False
    raw_text: str = ""
    thinking: str = ""
    call: ToolCall | None = None
    parse_error: ParseError | None = None
    observation: str = ""
    metrics: ToolMetrics = Field(default_factory=ToolMetrics)
    state_changes: list[dict[str, Any]] = Field(default_factory=list)
    injected: list[Injection] = Field(default_factory=list)
    coach: dict[str, Any] | None = None
    model_calls: list[ModelCall] = Field(default_factory=list)
    dropped_messages: int = 0
    observation_chars: int | None = None
    #: set on the turns of a subagent (:class:`Sidechain`); left out of the record when unset
    sidechain: Sidechain | None = None

    @model_serializer(mode="wrap")
    def _without_unset_sidechain(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if data.get("sidechain", 0) is None:
            del data["sidechain"]
        return data


class End(_Record):
    kind: Literal["end"] = "end"
    reason: TerminationReason
    ended_at: float = Field(default_factory=time.time)
    conclusion: str | None = None
    conclusion_title: str | None = None
    error: str | None = None
    totals: dict[str, Any] = Field(default_factory=dict)
    #: For ``model_error``: what failed (``adakit.llm.models.ModelError`` kind, e.g. ``missing_key``,
    #: ``auth``, ``gave_up``, ``unreachable``; ``error`` for anything else). None otherwise and
    #: in files written before this field existed.
    failure: str | None = None
    #: True when the run ended because of the model's side (a missing key, an authentication
    #: error, retries exhausted, an endpoint that does not answer): ``adakit launch`` re-runs it.
    retryable: bool = False
    exit_status: str | None = None
    submission: str | None = None


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the three record kinds (exported into the docs).

    One ``$defs`` at the root holds every model, and ``oneOf`` refers to the three record
    kinds, so the ``$ref``s resolve for any standard validator (``jsonschema``).
    """
    _, top = models_json_schema([(Header, "validation"), (Turn, "validation"),
                                 (End, "validation")])
    defs = top.get("$defs", {})
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"adakit trajectory record, schema {SCHEMA_VERSION}",
        "oneOf": [{"$ref": f"#/$defs/{m.__name__}"} for m in (Header, Turn, End)],
        "$defs": defs,
    }


# --------------------------------------------------------------------------- writing


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Line ranges sorted, with ranges that overlap or touch (end + 1 == start) merged."""
    merged: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


class RunWriter:
    """Append-only writer of one run file; each record is flushed and fsync'ed."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")

    @classmethod
    def create(cls, path: str | Path, header: Header) -> RunWriter:
        """A new run file that appears with its header already in it (written beside and
        renamed into place), so a failed first write (a full disk) leaves no empty run file."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.new")
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(header.model_dump_json() + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return cls(path)

    def write(self, record: Header | Turn | End) -> None:
        line = record.model_dump_json()
        self._fh.write(line + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class RunFile:
    """A run file read back: header, complete turns, end (None if the run did not finish)."""

    path: Path
    header: Header
    turns: list[Turn]
    end: End | None
    torn_bytes: int = 0

    @property
    def finished(self) -> bool:
        return self.end is not None


class RunFileError(ValueError):
    """A run file that cannot be taken as recorded; the message names the file (and the line).

    ``path`` is the file, ``line`` the line number of the record at fault (None when the
    fault is the file as a whole).
    """

    def __init__(self, message: str, path: Path, line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


class HeaderlessRunFile(RunFileError):
    """A run file without one complete record: empty, blank, or its first write (the header)
    never finished, as a full disk or a kill at launch leaves it. The loader skips these
    with a note (:func:`read_runs`)."""


#: Line prefixes of the records RunWriter writes (``kind`` first) -> their model.
_FAST_KINDS: dict[bytes, type[Header] | type[Turn] | type[End]] = {
    b'{"kind":"header",': Header, b'{"kind":"turn",': Turn, b'{"kind":"end",': End,
}
#: Where a JSON parser's message says the error is (pydantic's and the json module's forms).
_JSON_WHERE = re.compile(r"(?::)?\s*(?:at )?line \d+ column (\d+)(?: \(char \d+\))?$")
#: Bytes a full disk or a file system crash may leave in place of records.
_BLANK = b"\0 \t\r\n"


def _text_fault(path: Path, raw: bytes) -> RunFileError | None:
    """Why ``raw`` is not UTF-8 text (a binary or compressed file), or None. A character cut
    by a torn last line is not a fault."""
    bad = raw.find(b"\0")
    what = f"a NUL byte at offset {bad}"
    if bad < 0:
        try:
            codecs.getincrementaldecoder("utf-8")().decode(raw, final=False)
            return None
        except UnicodeDecodeError as exc:
            bad = exc.start
            what = f"byte 0x{raw[bad]:02x} at offset {bad} is not UTF-8"
    line = raw.count(b"\n", 0, bad) + 1
    return RunFileError(
        f"{path}:{line}: not a text file ({what}): a run file is UTF-8 JSON lines; is this "
        "one compressed or binary?", path, line)


def _json_fault(path: Path, i: int, line: bytes, reason: str, last: bool) -> RunFileError:
    """A line that is not JSON: ``truncated`` when the record stops inside its JSON value
    (a cut file), else ``not JSON`` with the parser's reason and column."""
    reason = reason.removeprefix("Invalid JSON: ").strip()
    found = _JSON_WHERE.search(reason)
    column = int(found.group(1)) if found else None
    reason = reason[: found.start()].strip() if found else reason
    reason = re.sub(r"\s+at$", "", reason)  # "Unterminated string starting at" + position
    cut = (reason.startswith(("EOF while parsing", "Unterminated string"))
           or (column is not None and column > len(line.rstrip())))
    if cut:
        inside = "a string" if "string" in reason.lower() else "a JSON value"
        after = "" if last else "; more records follow it (the file was cut, then appended to)"
        return RunFileError(
            f"{path}: truncated at line {i}: the record stops inside {inside} after "
            f"{len(line)} bytes{after}", path, i)
    where = f", column {column}" if column is not None else ""
    return RunFileError(f"{path}:{i}: not JSON ({reason}{where})", path, i)


def read_run(path: str | Path, raw: bytes | None = None) -> RunFile:
    """Parse and validate a run file; a torn final line (crash mid-write) is skipped.
    ``raw``: the file's bytes when the caller has already read them (they are not read
    again).

    A run file is refused (:class:`RunFileError`, naming the file and the line) when it is
    not UTF-8 text, a line is not JSON or is a truncated record, or its records are not in
    the order one launch writes them: one header first, turns with rising turn numbers, at
    most one end record and nothing after it. A file without one complete record raises
    :class:`HeaderlessRunFile`.
    """
    path = Path(path)
    if raw is None:
        raw = path.read_bytes()
    cut = raw.rfind(b"\n") + 1
    torn = len(raw) - cut  # no trailing newline: the last write did not complete
    if not raw[:cut].strip(_BLANK):
        if not raw:
            what = "the file is empty"
        elif not raw.strip(_BLANK):
            what = f"the file holds {len(raw)} blank or NUL bytes"
        else:
            what = f"its first record was never completed ({torn} bytes without a newline)"
        raise HeaderlessRunFile(f"{path}: no header record: {what}", path)
    fault = _text_fault(path, raw)
    if fault is not None:
        raise fault
    complete = raw[:cut].split(b"\n")[:-1]
    header: Header | None = None
    turns: list[Turn] = []
    end: End | None = None
    end_line = 0
    last_line = max((i for i, line in enumerate(complete, 1) if line.strip()), default=0)
    for i, line in enumerate(complete, 1):
        line = line.strip()
        if not line:
            continue
        rec: Header | Turn | End
        fast = _FAST_KINDS.get(line[: line.find(b",") + 1]) if line.startswith(b'{"kind":') else None
        if fast is not None:  # records as RunWriter writes them: parsed by pydantic's JSON parser
            try:
                rec = fast.model_validate_json(line)
            except ValidationError as exc:
                bad = next((e for e in exc.errors() if e["type"] == "json_invalid"), None)
                if bad is None:
                    raise
                raise _json_fault(path, i, line, bad["msg"], i == last_line) from exc
        else:
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise _json_fault(path, i, line, str(exc), i == last_line) from exc
            kind = data.get("kind") if isinstance(data, dict) else None
            model = {"header": Header, "turn": Turn, "end": End}.get(str(kind))
            if model is None:
                raise RunFileError(f"{path}:{i}: unknown record kind {kind!r}", path, i)
            rec = model.model_validate(data)
        _check_order(path, i, rec, header, turns, end_line)
        if isinstance(rec, Header):
            header = rec
        elif isinstance(rec, Turn):
            turns.append(rec)
        else:
            end, end_line = rec, i
    if header is None:  # only blank lines: _check_order puts a header before anything else
        raise HeaderlessRunFile(f"{path}: no header record: the file holds only blank lines", path)
    return RunFile(path=path, header=header, turns=turns, end=end, torn_bytes=torn)


# --------------------------------------------------------------------------- reading for rows
#
# The loader and the corpus store read a run file only to make its tidy rows, and pydantic's
# validation is most of what that costs. ``read_run_rows`` decodes the records with msgspec
# into mirrors of the record models (generated from them below, so the two cannot drift): the
# same values with attribute access, several times faster. msgspec is never laxer than the
# models but in one thing: it follows JSON nested deeper than pydantic's parser does, so a
# line with many brackets is validated by pydantic (:data:`_MIRROR_BRACKETS`). Otherwise it
# takes an int for a float as they do, and refuses what they would coerce (a numeric string,
# 1.0 for an int, NaN). Whatever it refuses, and any file that is not exactly as RunWriter
# writes it (a torn tail, a NUL byte, records out of order), goes to :func:`read_run`, so the
# values, the refusals and their messages are read_run's.


def _mirror_type(annotation: Any, made: dict[type, Any]) -> Any:
    """``annotation`` with every record model in it replaced by its msgspec mirror."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _mirror(annotation, made)
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is None or origin is Literal:
        return annotation
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(_mirror_type(a, made) for a in args)]  # noqa: UP007
    return origin[tuple(_mirror_type(a, made) for a in args)]


def _mirror(model: type[BaseModel], made: dict[type, Any]) -> Any:
    """A msgspec struct with ``model``'s fields, types and defaults (unknown fields refused)."""
    if model not in made:
        fields: list[tuple[Any, ...]] = []
        for name, info in model.model_fields.items():
            kind = _mirror_type(info.annotation, made)
            if info.default_factory is not None:
                fields.append((name, kind, msgspec.field(default_factory=info.default_factory)))
            elif info.is_required():
                fields.append((name, kind))
            else:
                fields.append((name, kind, info.default))
        made[model] = msgspec.defstruct(model.__name__, fields, kw_only=True,
                                        forbid_unknown_fields=True)
    return made[model]


#: A line with fewer brackets than this cannot nest as deep as pydantic's JSON parser refuses
#: (about 200 levels); a line with more is read by pydantic, so that what it refuses is refused.
_MIRROR_BRACKETS = 150


@functools.cache
def _row_decoders() -> dict[bytes, tuple[type[BaseModel], Any]]:
    """The line prefix of each record kind RunWriter writes -> (its model, a msgspec decoder
    of the model's mirror)."""
    made: dict[type, Any] = {}
    return {prefix: (model, msgspec.json.Decoder(_mirror(model, made)))
            for prefix, model in _FAST_KINDS.items()}


def read_run_rows(path: str | Path, raw: bytes | None = None) -> RunFile:
    """A run file read for its tidy rows (:func:`corpus_from_runs`): the records
    :func:`read_run` gives, with the same values and the same errors, as msgspec structs
    rather than models (attributes only: no pydantic methods)."""
    path = Path(path)
    if raw is None:
        raw = path.read_bytes()
    if not raw.endswith(b"\n") or b"\0" in raw:
        return read_run(path, raw)
    decoders = _row_decoders()
    header: Any = None
    turns: list[Any] = []
    end: Any = None
    end_line = 0
    try:
        for i, line in enumerate(raw.split(b"\n"), 1):
            line = line.strip()
            if not line:
                continue
            model, decoder = decoders.get(line[: line.find(b",") + 1], (None, None))
            if model is None:  # another key order, another kind: read_run reads or refuses it
                return read_run(path, raw)
            if line.count(b"[") + line.count(b"{") < _MIRROR_BRACKETS:
                rec = decoder.decode(line)
            else:  # it may nest deeper than pydantic's parser follows (msgspec goes deeper)
                rec = model.model_validate_json(line)
            _check_order(path, i, rec, header, turns, end_line)
            if model is Turn:
                turns.append(rec)
            elif model is Header:
                header = rec
            else:
                end, end_line = rec, i
    except (msgspec.DecodeError, msgspec.ValidationError, ValidationError, RunFileError):
        return read_run(path, raw)  # which gives its values, or refuses with its message
    if header is None:
        return read_run(path, raw)
    return RunFile(path=path, header=header, turns=turns, end=end, torn_bytes=0)


def call_json(call: ToolCall | Any) -> str:
    """A tool call as the JSON text ``ToolCall.model_dump_json`` writes (pydantic's serializer
    on the same two fields), for a model or its mirror (:func:`read_run_rows`)."""
    return pydantic_core.to_json({"tool": call.tool, "params": call.params},
                                 inf_nan_mode="null").decode()


_DAMAGE = "two launches wrote into this file, or records were appended out of order"


def _check_order(path: Path, i: int, rec: Header | Turn | End, header: Header | None,
                 turns: list[Turn], end_line: int) -> None:
    """Refuse record ``i`` unless it stands where one launch writes it (a header: also one
    of another major schema). Read by kind, so it takes the mirrors of :func:`read_run_rows`
    too."""
    kind = rec.kind
    if end_line:
        what = "a second end record" if kind == "end" else f"a {kind} record"
        raise RunFileError(
            f"{path}:{i}: {what} after the end record of line {end_line} ({_DAMAGE})", path, i)
    if header is None and kind != "header":
        raise RunFileError(
            f"{path}:{i}: no header record before this {kind} record (the header is the "
            "first record of a run file)", path, i)
    if header is not None and kind == "header":
        raise RunFileError(f"{path}:{i}: a second header record ({_DAMAGE})", path, i)
    if kind == "turn" and turns and rec.turn <= turns[-1].turn:
        what = "repeats" if rec.turn == turns[-1].turn else "comes after"
        raise RunFileError(
            f"{path}:{i}: turn {rec.turn} {what} turn {turns[-1].turn}: turn numbers must rise "
            f"({_DAMAGE})", path, i)
    if kind == "header" and rec.schema_version.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
        raise RunFileError(
            f"{path}: schema {rec.schema_version} is not readable by this adakit "
            f"(schema {SCHEMA_VERSION})", path, i)


def truncate_torn(path: str | Path) -> int:
    """Cut a torn final line off a run file so appending can resume; returns bytes removed."""
    path = Path(path)
    raw = path.read_bytes()
    if not raw or raw.endswith(b"\n"):
        return 0
    keep = raw.rfind(b"\n") + 1
    with open(path, "r+b") as fh:
        fh.truncate(keep)
    return len(raw) - keep


# --------------------------------------------------------------------------- loading

RUN_COLUMNS = [
    "run_id", "study", "model", "model_kind", "world", "task", "target", "condition",
    "repeat", "seed", "turn_bound", "reason", "finished", "n_turns", "started_at",
    "elapsed_s", "wall_s", "active_s", "coach_s", "tokens_in", "tokens_out", "cost_usd",
    "cache_hits", "errors", "conclusion", "conclusion_chars", "closed", "path", "agent",
    "world_source",
]
TURN_COLUMNS = [
    "run_id", "model", "world", "task", "condition", "turn", "tool", "tool_name", "action",
    "file", "start_line", "end_line", "lines_viewed", "structural", "block", "symbol",
    "result_count", "error_type", "parse_error", "finalize", "confidence", "thinking_chars",
    "output_chars", "started_at", "ended_at", "t_rel_start", "t_rel_end", "duration_s",
    "coach_s", "active_s", "active_rel_start", "active_rel_end", "latency_s", "tokens_in",
    "tokens_out", "cached", "coach_decision", "n_injected", "dropped_messages", "tokens_reused",
    "sidechain", "sidechain_agent", "sidechain_parent", "sidechain_depth", "compaction",
]
READ_COLUMNS = [
    "run_id", "model", "world", "task", "condition", "turn", "tool", "file", "start_line",
    "end_line", "n_lines",
]


#: Bumped whenever the tidy tables change shape, so cached tables of an older loader are
#: rebuilt from the run files.
LOADER_VERSION = 6


def _coach_span(turn: Turn) -> float:
    """Wall seconds of a turn's coach-judge review: its recorded span, else the summed
    latency of its calls; never more than the turn itself lasted."""
    rec = turn.coach
    if not rec:
        return 0.0
    a, b = rec.get("started_at"), rec.get("ended_at")
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b >= a:
        spent = float(b) - float(a)
    else:
        try:
            spent = float(rec.get("latency_s") or 0.0)
        except (TypeError, ValueError):
            spent = 0.0
    return min(max(spent, 0.0), max(turn.ended_at - turn.started_at, 0.0))


def _seconds(value: Any) -> float:
    try:
        return max(float(value or 0.0), 0.0)
    except (TypeError, ValueError):
        return 0.0


def replayed_seconds(turn: Turn) -> tuple[float, float]:
    """(agent, coach) seconds the turn's replies from the response cache took when they were
    first computed (their recorded latency); 0 for live replies. A replay waits for no model,
    so without these a replayed run's turns would last milliseconds."""
    if not turn.model_calls and not turn.coach:  # the common case, without the scans below
        return (_seconds(turn.latency_s) if turn.cached else 0.0), 0.0
    draws = [c for c in turn.model_calls if c.purpose == DRAW]
    if draws:  # a redrawn turn's latency is the sum of its draws, each cached or not
        agent = sum(_seconds(c.latency_s) for c in draws if c.cached)
    else:
        agent = _seconds(turn.latency_s) if turn.cached else 0.0
    agent += sum(_seconds(c.latency_s) for c in turn.model_calls if c.cached and c.purpose != DRAW)
    calls = (turn.coach or {}).get("calls") or []
    coach = sum(_seconds(c.get("latency_s")) for c in calls if isinstance(c, dict) and c.get("cached"))
    return agent, coach


def coach_seconds(turn: Turn) -> float:
    """Seconds of a turn spent in the coach-judge review (0 without one): the review's wall
    span (:func:`_coach_span`) plus the recorded latency of its replies replayed from the
    cache."""
    return turn_clocks(turn)[0]


def active_seconds(turn: Turn) -> float:
    """The agent's own time in a turn: the turn's wall time less its coach review, plus the
    recorded latency of replies replayed from the cache, so a replayed run keeps the clock of
    its recording."""
    return turn_clocks(turn)[1]


def turn_clocks(turn: Turn) -> tuple[float, float]:
    """(:func:`coach_seconds`, :func:`active_seconds`) of a turn, computed together."""
    span = _coach_span(turn)
    agent, coach = replayed_seconds(turn)
    wall = max(turn.ended_at - turn.started_at, 0.0) - span
    return span + coach, max(wall, 0.0) + agent


def time_totals(turns: Iterable[Turn], started_at: float, ended_at: float) -> dict[str, float]:
    """A run's three clocks (seconds): ``active_s``, the sum of the agent's own turn times
    (model reply, tool, hint model; no coach review, no downtime between a crash and its
    resume); ``coach_s``, the coach-judge reviews inside the turns; ``wall_s``, the span from
    launch to ``ended_at`` (everything, downtime included)."""
    clocks = [turn_clocks(t) for t in turns]
    return {
        "active_s": round(sum(a for _, a in clocks), 6),
        "coach_s": round(sum(c for c, _ in clocks), 6),
        "wall_s": round(max(ended_at - started_at, 0.0), 6),
    }


def iter_run_files(source: str | Path | Iterable[str | Path]) -> Iterator[Path]:
    """Run files under a folder (recursively), a single file, or an iterable of those."""
    if isinstance(source, (str, Path)):
        p = Path(source)
        if p.is_dir():
            yield from sorted(p.rglob("*.jsonl"))
        elif p.exists():
            yield p
        else:
            raise FileNotFoundError(f"no corpus at {p}")
    else:
        for item in source:
            yield from iter_run_files(item)


#: The ``agent`` column of runs that adakit launched (imported runs name their source agent).
ADA_AGENT = "ada"


def run_agent(header: Header) -> str:
    """The agent that produced a run: ``ada`` for launched runs, else the imported source's
    agent (e.g. ``swe-agent``), so mixed corpora can be grouped by agent."""
    if header.source is None:
        return ADA_AGENT
    return header.source.agent or header.source.format


_Row = tuple[Any, ...]


def _run_rows(rf: RunFile) -> tuple[_Row, list[_Row], list[_Row]]:
    """A run file's rows of the runs, turns and reads tables, as tuples in the order of
    :data:`RUN_COLUMNS`, :data:`TURN_COLUMNS` and :data:`READ_COLUMNS` (each value below
    is commented with its column)."""
    h = rf.header
    run_id = h.run_id
    axes = (h.model.name, h.world.name, h.task.family, h.condition.name)  # model .. condition
    t0 = h.started_at
    t_end = rf.end.ended_at if rf.end else (rf.turns[-1].ended_at if rf.turns else t0)
    span = max(t_end - t0, 1e-9)
    clocks = [turn_clocks(t) for t in rf.turns]
    coach_s = [c for c, _ in clocks]
    active_s = [a for _, a in clocks]
    active_total = sum(active_s)
    active_before = 0.0
    n = len(rf.turns)
    turn_rows: list[_Row] = []
    read_rows: list[_Row] = []
    for k, t in enumerate(rf.turns):
        if active_total > 0:
            a_start, a_end = active_before / active_total, (active_before + active_s[k]) / active_total
        else:  # no measurable time: turns share the run evenly
            a_start, a_end = k / n, (k + 1) / n
        active_before += active_s[k]
        m = t.metrics
        first = m.ranges[0] if m.ranges else (None, None)
        side = t.sidechain
        turn_rows.append((
            run_id, *axes, t.turn,  # run_id, model, world, task, condition, turn
            m.tool, t.call.tool if t.call else None, m.action, m.file,  # tool .. file
            first[0], first[1], m.lines_viewed,  # start_line, end_line, lines_viewed
            m.structural, m.block, m.symbol, m.result_count, m.error_type,  # structural .. error_type
            t.parse_error.kind if t.parse_error else None,  # parse_error
            m.finalize, m.confidence, len(t.thinking), len(t.raw_text),  # finalize .. output_chars
            t.started_at, t.ended_at,  # started_at, ended_at
            (t.started_at - t0) / span, (t.ended_at - t0) / span,  # t_rel_start, t_rel_end
            t.ended_at - t.started_at, coach_s[k], active_s[k],  # duration_s, coach_s, active_s
            a_start, a_end,  # active_rel_start, active_rel_end
            t.latency_s, t.tokens_in, t.tokens_out, t.cached,  # latency_s .. cached
            t.coach.get("decision") if t.coach else None,  # coach_decision
            len(t.injected), t.dropped_messages, t.tokens_reused,  # n_injected .. tokens_reused
            side.id if side else None, side.agent if side else None,  # sidechain, sidechain_agent
            side.parent_turn if side else None, side.depth if side else None,  # .._parent, .._depth
            any(i.source == "compaction" for i in t.injected),  # compaction
        ))
        if m.file and m.error_type is None and m.tool not in ACT:  # an edit's lines are not read
            for a, b in m.ranges:
                # run_id, model .. condition, turn, tool, file, start_line, end_line, n_lines
                read_rows.append((run_id, *axes, t.turn, m.tool, m.file, a, b, b - a + 1))
    totals = rf.end.totals if rf.end else {}
    conclusion = rf.end.conclusion if rf.end else None
    run_row = (
        run_id, h.study, h.model.name, h.model.kind,  # run_id, study, model, model_kind
        h.world.name, h.task.family, h.task.target, h.condition.name,  # world .. condition
        h.repeat, h.seed, h.turn_bound,  # repeat, seed, turn_bound
        rf.end.reason if rf.end else None, rf.finished, len(rf.turns),  # reason, finished, n_turns
        t0, t_end - t0, t_end - t0,  # started_at, elapsed_s, wall_s
        active_total, sum(coach_s),  # active_s, coach_s
        sum(t.tokens_in for t in rf.turns), sum(t.tokens_out for t in rf.turns),  # tokens_in/out
        totals.get("cost_usd"),  # cost_usd
        sum(1 for t in rf.turns if t.cached),  # cache_hits
        sum(1 for t in rf.turns if t.metrics.error_type is not None),  # errors
        conclusion, len(conclusion) if conclusion else 0,  # conclusion, conclusion_chars
        closed_run(rf), str(rf.path), run_agent(h), h.world.source,  # closed .. world_source
    )
    return run_row, turn_rows, read_rows


def shows_instruction(turn: Turn, text: str) -> bool:
    """Whether ``turn``'s observation carried the system instruction ``text``."""
    return any(i.source == "system" and i.text == text for i in turn.injected)


def closed_run(rf: RunFile) -> bool:
    """Whether the run's last turn was a closing turn (``close_turn``): the turn before it
    showed the closing instruction that the header records."""
    text = rf.header.scaffold.get("close_turn")
    return bool(text) and len(rf.turns) >= 2 and shows_instruction(rf.turns[-2], text)


@dataclass
class Corpus:
    """A corpus as three tidy tables; every lens consumes these. ``skipped`` names the
    header-less run files the loader left out (:class:`HeaderlessRunFile`)."""

    runs: pd.DataFrame
    turns: pd.DataFrame
    reads: pd.DataFrame
    skipped: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.runs)

    def where(self, **axes: Any) -> Corpus:
        """Keep the runs whose columns equal (or, for a list, are in) the given values."""
        mask = pd.Series(True, index=self.runs.index)
        for col, val in axes.items():
            if isinstance(val, (list, tuple, set)):
                mask &= self.runs[col].isin(list(val))
            else:
                mask &= self.runs[col] == val
        keep = set(self.runs.loc[mask, "run_id"])
        return Corpus(
            runs=self.runs[mask].reset_index(drop=True),
            turns=self.turns[self.turns["run_id"].isin(keep)].reset_index(drop=True),
            reads=self.reads[self.reads["run_id"].isin(keep)].reset_index(drop=True),
            skipped=self.skipped,
        )

    def table(self, name: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """Table ``name`` (``runs``, ``turns`` or ``reads``), only the ``columns`` asked."""
        if name not in ("runs", "turns", "reads"):
            raise ValueError(f"no table {name!r} in an in-memory corpus (runs, turns, reads)")
        frame = getattr(self, name)
        if columns is None:
            return frame
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise ValueError(f"table {name} has no column {missing[0]!r}")
        return frame[list(columns)]

    def chunks(self, columns: Mapping[str, Sequence[str] | None] | None = None
               ) -> Iterator[tuple[Corpus, np.ndarray]]:
        """The corpus in pieces of whole runs, each with its runs' places in the corpus's run
        order; ``columns`` names the columns a piece needs per table (a corpus on disk reads
        only those). In memory the corpus is one piece, itself."""
        yield self, np.arange(len(self.runs))


def map_runs(corpus: Corpus, fn: Callable[[Corpus], pd.DataFrame],
             columns: Mapping[str, Sequence[str] | None] | None = None) -> pd.DataFrame:
    """``fn`` of the corpus, computed piece by piece (:meth:`Corpus.chunks`) when the corpus
    comes in pieces, for a ``fn`` whose rows each belong to one run (a ``run_id`` column)
    and depend on that run alone. The pieces' rows are put in the corpus's run order, each
    run's rows in the order ``fn`` gave them; the caller aligns columns a piece may lack."""
    parts = [(fn(chunk), chunk.runs["run_id"], rank) for chunk, rank in corpus.chunks(columns)]
    if len(parts) == 1:
        return parts[0][0]
    if not parts:
        return fn(corpus)
    kept = [(out, ids, rank) for out, ids, rank in parts if len(out)] or parts[:1]
    frames, places = [], []
    for out, ids, rank in kept:
        first = ~pd.Index(ids).duplicated()
        index = pd.Index(ids[first])
        places.append(np.asarray(rank)[first][index.get_indexer(out["run_id"])])
        frames.append(out)
    order = np.argsort(np.concatenate(places), kind="stable")
    return pd.concat(frames, ignore_index=True).take(order).reset_index(drop=True)


@dataclass
class CorpusFiles:
    """The run files of a corpus as the loader takes them: ``runs``, read and checked, and
    ``skipped``, the header-less files it leaves out (see :func:`skipped_note`)."""

    runs: list[RunFile]
    skipped: list[Path]


def _readable(paths: Iterable[Path], skipped: list[Path],
              read: Callable[[Path], RunFile] = read_run) -> Iterator[RunFile]:
    """The run files of ``paths`` (read by ``read``); header-less ones are appended to
    ``skipped`` instead."""
    for path in paths:
        try:
            yield read(path)
        except HeaderlessRunFile:
            skipped.append(path)


def read_runs(source: str | Path | Iterable[str | Path]) -> CorpusFiles:
    """Read the run files of a corpus (a folder, a file, or an iterable of those) the way
    :func:`load_corpus` does: a header-less file (empty, or its first write never finished)
    is left out and listed; any other file that cannot be taken as recorded raises
    :class:`RunFileError` naming the file and the line (:func:`read_run`)."""
    skipped: list[Path] = []
    runs = list(_readable(iter_run_files(source), skipped))
    return CorpusFiles(runs, skipped)


def skipped_note(skipped: Iterable[str | Path], show: int = 3) -> str:
    """One line counting and naming the header-less run files a load left out ("" if none)."""
    names = [str(p) for p in skipped]
    if not names:
        return ""
    more = f" and {len(names) - show} more" if len(names) > show else ""
    files = "file" if len(names) == 1 else "files"
    return (f"skipped {len(names)} header-less run {files} (empty, or the header was never "
            f"written, e.g. on a full disk): {', '.join(names[:show])}{more}")


def corpus_from_runs(run_files: Iterable[RunFile]) -> Corpus:
    """Build the tidy tables from already-parsed run files."""
    runs: list[tuple[Any, ...]] = []
    turns: list[tuple[Any, ...]] = []
    reads: list[tuple[Any, ...]] = []
    for rf in run_files:  # rows as tuples: a frame is made from them twice as fast as from dicts
        r, t, d = _run_rows(rf)
        runs.append(r)
        turns.extend(t)
        reads.extend(d)
    return Corpus(
        runs=pd.DataFrame(runs, columns=RUN_COLUMNS),
        turns=pd.DataFrame(turns, columns=TURN_COLUMNS),
        reads=pd.DataFrame(reads, columns=READ_COLUMNS),
    )


def _fingerprint(paths: list[Path]) -> str:
    h = hashlib.sha256(f"{SCHEMA_VERSION}|loader {LOADER_VERSION}".encode())
    for p in paths:
        st = p.stat()
        h.update(f"{p.resolve()}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _write_cache(corpus: Corpus, cache_dir: Path) -> None:
    """Write the three tables into a scratch folder renamed into place, so a reader in another
    process (notebooks executed in parallel) sees all of them or none."""
    scratch = cache_dir.with_name(f"{cache_dir.name}.{os.getpid()}.tmp")
    try:
        scratch.mkdir(parents=True, exist_ok=True)
        for name in ("runs", "turns", "reads"):
            getattr(corpus, name).to_parquet(scratch / f"{name}.parquet")
        (scratch / "skipped.json").write_text(json.dumps(list(corpus.skipped)), encoding="utf-8")
        scratch.rename(cache_dir)
    except (OSError, ValueError, ImportError):
        pass  # the cache is an optimisation (or another process wrote it first)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)


def load_corpus(
    source: str | Path | Iterable[str | Path],
    cache: bool = True,
    include_unfinished: bool = True,
) -> Corpus:
    """Load run files into a :class:`Corpus`, with a parquet cache beside a folder corpus.

    The cache is keyed by every file's path, size and mtime, so any change re-reads.
    Header-less run files are left out and named in ``Corpus.skipped``; any other run file
    that cannot be taken as recorded raises :class:`RunFileError` (see :func:`read_runs`).
    """
    paths = list(iter_run_files(source))
    cache_dir: Path | None = None
    if cache and isinstance(source, (str, Path)) and Path(source).is_dir():
        cache_dir = Path(source) / ".adakit-cache" / _fingerprint(paths)
        if (cache_dir / "runs.parquet").exists():
            try:
                corpus = Corpus(
                    runs=pd.read_parquet(cache_dir / "runs.parquet"),
                    turns=pd.read_parquet(cache_dir / "turns.parquet"),
                    reads=pd.read_parquet(cache_dir / "reads.parquet"),
                    skipped=tuple(json.loads((cache_dir / "skipped.json").read_text(encoding="utf-8"))),
                )
                return corpus if include_unfinished else corpus.where(finished=True)
            except (OSError, ValueError):  # an unreadable cache: read the runs again
                shutil.rmtree(cache_dir, ignore_errors=True)
    skipped: list[Path] = []
    corpus = corpus_from_runs(_readable(paths, skipped, read_run_rows))
    corpus.skipped = tuple(str(p) for p in skipped)
    if cache_dir is not None:
        _write_cache(corpus, cache_dir)
    return corpus if include_unfinished else corpus.where(finished=True)


def _as_values(value: str | Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def open_corpus(
    corpus: str | Path | Iterable[str | Path],
    models: str | Iterable[str] = (),
    worlds: str | Iterable[str] = (),
    tasks: str | Iterable[str] = (),
    conditions: str | Iterable[str] = (),
    finished_only: bool = False,
    verbose: bool = True,
    load: Callable[[Path, bool], Corpus] | None = None,
) -> Corpus:
    """Load a corpus the way the notebooks do: a path relative to the project root (or
    absolute), or a list of such folders read as one corpus, the runs kept by the model /
    world / task / condition filters (empty: all), optionally only finished runs, and a
    one-line count printed. ``load`` reads one folder (its path, and whether unfinished
    runs are kept); the default is :func:`load_corpus` (``adakit.store.open_corpus`` passes
    the parquet store's).

    Header-less run files are left out with a note (:func:`skipped_note`); any other run
    file that cannot be taken as recorded raises :class:`RunFileError` (a ValueError).
    Raises FileNotFoundError for a missing corpus, and ValueError naming the values on hand
    when no run is left (or when two folders hold the same run id).
    """
    from adakit import config

    if not isinstance(corpus, str | Path):
        parts = [open_corpus(c, finished_only=finished_only, verbose=False, load=load)
                 for c in corpus]
        if not parts:
            raise ValueError("no corpus folder given")
        data = Corpus(*(pd.concat([getattr(p, k) for p in parts], ignore_index=True)
                        for k in ("runs", "turns", "reads")),
                      skipped=tuple(f for p in parts for f in p.skipped))
        dup = data.runs["run_id"][data.runs["run_id"].duplicated()]
        if len(dup):
            raise ValueError(f"run {dup.iloc[0]!r} is in more than one of the corpus folders")
        shown: Path | str = " + ".join(str(c) for c in corpus)
        return _filtered(data, shown, models, worlds, tasks, conditions, finished_only, verbose)
    path = config.resolve(corpus)
    try:
        shown: Path | str = path.relative_to(config.ROOT)
    except ValueError:
        shown = path
    if not path.exists():
        raise FileNotFoundError(
            f"no corpus at {path}: launch one first (`make study`, or "
            "`adakit launch studies/quick.yaml`), or point the corpus parameter at a folder of runs"
        )
    if load is None:
        data = load_corpus(path, include_unfinished=not finished_only)
    else:
        data = load(path, not finished_only)
    if data.runs.empty:
        what = "finished runs" if finished_only else "run files"
        note = f" ({skipped_note(data.skipped)})" if data.skipped else ""
        raise ValueError(f"no {what} in the corpus {shown}{note}")
    return _filtered(data, shown, models, worlds, tasks, conditions, finished_only, verbose)


def _filtered(
    data: Corpus,
    shown: Path | str,
    models: str | Iterable[str],
    worlds: str | Iterable[str],
    tasks: str | Iterable[str],
    conditions: str | Iterable[str],
    finished_only: bool,
    verbose: bool,
) -> Corpus:
    filters = {
        col: values
        for col, values in (("model", _as_values(models)), ("world", _as_values(worlds)),
                            ("task", _as_values(tasks)), ("condition", _as_values(conditions)))
        if values
    }
    kept = data.where(**{col: list(v) for col, v in filters.items()}) if filters else data
    if kept.runs.empty:
        on_hand = "; ".join(
            f"{col}s: {', '.join(sorted(map(str, data.runs[col].unique())))}" for col in filters
        )
        raise ValueError(
            f"no runs of the corpus {shown} are left after the filters "
            f"{_filter_text(filters)}; loosen them (on hand: {on_hand})"
        )
    if verbose:
        note = f" (filters: {_filter_text(filters)})" if filters else ""
        unfinished = " finished" if finished_only else ""
        print(f"corpus {shown}: {len(kept.runs)}{unfinished} runs, {len(kept.turns)} turns, "
              f"{len(kept.reads)} line ranges read{note}")
        if data.skipped:
            print(skipped_note(data.skipped))
    return kept


def _filter_text(filters: dict[str, tuple[str, ...]]) -> str:
    return ", ".join(f"{col} in [{', '.join(map(str, v))}]" for col, v in filters.items())


_WALL_CLOCK = {"started_at", "ended_at", "cached"}
_CLOCK_TOTALS = {"cache_hits", "active_s", "coach_s", "wall_s"}


def _strip_clock(obj: Any, drop: frozenset[str] | set[str] = _WALL_CLOCK) -> Any:
    if isinstance(obj, dict):
        return {k: _strip_clock(v, drop) for k, v in obj.items() if k not in drop}
    if isinstance(obj, list):
        return [_strip_clock(v, drop) for v in obj]
    return obj


def prefix_digest(header: Header, turns: Iterable[Turn]) -> str:
    """sha256 of what a fork replays from its parent: the system prompt, the task and the
    content of the given turns (wall-clock times, cache flags and the given turns' injections
    of a later change left to the caller), so forks that share a prefix share the digest."""
    records = [{"system_prompt": header.system_prompt, "task": header.task.model_dump(mode="json")}]
    records += [t.model_dump(mode="json") for t in turns]
    blob = json.dumps(_strip_clock(records), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def content_records(run: RunFile, also: Iterable[str] = ()) -> list[Any]:
    """A run's records as JSON values with wall-clock times and cache flags left out (and the
    keys ``also`` names, at any depth)."""
    records = [run.header.model_dump(mode="json")] + [t.model_dump(mode="json") for t in run.turns]
    if run.end is not None:
        end = run.end.model_dump(mode="json")
        end["totals"] = {k: v for k, v in end["totals"].items() if k not in _CLOCK_TOTALS}
        records.append(end)
    return _strip_clock(records, _WALL_CLOCK | set(also))


def content_digest(run: RunFile) -> str:
    """A digest of a run's content (:func:`content_records`).

    Two runs with the same digest made the same calls, saw the same observations and ended
    the same way; a replay from the response cache must reproduce the digest exactly.
    """
    blob = json.dumps(content_records(run), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


SCHEMA_DOC = Path(__file__).resolve().parent.parent / "docs" / "trajectory.schema.json"


def emit_schema(schema: dict[str, Any], write: str | Path | None) -> int:
    """Print a JSON Schema, or write it to ``write`` (saying where); the commands' exit status."""
    text = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    if write:
        target = Path(write)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target}")
    else:
        print(text, end="")
    return 0


def _cmd_schema(args: Any) -> int:
    return emit_schema(json_schema(), args.write)


def register_cli(sub: Any) -> None:
    """``adakit schema``: print (or write) the JSON Schema of the trajectory records."""
    p = sub.add_parser("schema", help="the JSON Schema of trajectory records (header, turn, end)")
    p.add_argument("--write", metavar="PATH", nargs="?", const=str(SCHEMA_DOC), help="write it to a file (default docs/trajectory.schema.json)")
    p.set_defaults(func=_cmd_schema)
