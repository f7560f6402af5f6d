"""The shape every importer produces (:class:`Trajectory` of :class:`SourceStep`) and its
conversion into adakit's record schema (header, one turn per step, end).

A format module only reads its files into a :class:`Trajectory`; paths, the canonical
mapping (:mod:`adakit.importers.mapping`), timing, clipping and the end record are done here
once for every format.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from adakit import __version__
from adakit.importers.mapping import Context, Mapped, map_tool
from adakit.importers.shell import join_path
from adakit.record import (
    ConditionInfo,
    End,
    Header,
    Injection,
    ModelInfo,
    ParseError,
    Sidechain,
    SourceInfo,
    TaskInfo,
    ToolCall,
    ToolMetrics,
    Turn,
    WorldInfo,
)
from adakit.text import clip

#: The task family of imported runs unless ``--task`` names another: the named formats come
#: from issue-resolution benchmarks (SWE-bench and the like).
DEFAULT_TASK = "issue_resolution"
#: The condition of imported runs: the source agent ran without any of Ada's manipulations.
IMPORTED_CONDITION = "natural"
#: What follows an observation clipped to ``--max-observation-chars`` (``{n}``: characters cut).
_OBSERVATION_CUT = "\n[... {n} more characters not kept]"


class BadInput(ValueError):
    """A file that cannot be imported; ``reason`` is the category counted in the summary."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass
class SourceStep:
    """One agent step of a foreign trajectory, before mapping.

    ``tool`` is the source's tool or command name and ``args`` its arguments as recorded (a
    command-style action keeps the whole command line in ``args["command"]``). ``parse_error``
    marks a reply the source scaffold could not turn into an action.
    """

    tool: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    thought: str = ""
    response: str = ""
    observation: str = ""
    observation_complete: bool = True
    cwd: str | None = None
    open_file: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    duration_s: float | None = None
    latency_s: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None
    exit_code: int | None = None
    parse_error: str | None = None
    #: (tool, args) to map the step by when the recorded call only wraps it (an IPython cell
    #: that calls one editor function); the record keeps ``tool`` and ``args`` as recorded
    mapped_as: tuple[str, dict[str, Any]] | None = None
    #: the structured result recorded beside the observation text (Claude Code's
    #: ``toolUseResult``, plus ``is_error``), read by the mapping of named tools
    result: dict[str, Any] | None = None
    #: the subagent span the step belongs to (``parent_turn``: the 1-based number of the
    #: delegating step in the trajectory's steps); None for the main agent's own steps
    sidechain: Sidechain | None = None
    #: the summary the scaffold put in place of the history it dropped right after this step
    #: (so it is in the next prompt, as every injection is); a compaction before the first
    #: step is marked on the first step (:func:`mark_compaction`)
    compaction: str | None = None


@dataclass
class Trajectory:
    """One foreign run, read from one file."""

    steps: list[SourceStep]
    agent: str
    agent_version: str = ""
    instance: str | None = None
    model: str = ""
    task_prompt: str = ""
    system_prompt: str = ""
    exit_status: str | None = None
    submission: str | None = None
    final_message: str | None = None
    totals: dict[str, Any] = field(default_factory=dict)
    started_at: float | None = None
    ended_at: float | None = None
    timing: str = "none"
    root: str | None = None
    step_limit: int | None = None
    mode: str = ""
    repo: str | None = None
    #: the drift account: record types, fields and blocks of the file the reader did not use,
    #: counted (``type:NAME``, ``field:NAME``, ``block:NAME``)
    unused: dict[str, int] = field(default_factory=dict)
    #: the world found beside the source (an aider history sits in its repository), used
    #: when the import names none
    world: Any = None


# --------------------------------------------------------------------------- paths


def world_tree(world: Any) -> tuple[frozenset[str], frozenset[str]]:
    """The world's files and folders (relative paths); empty without a world."""
    if world is None:
        return frozenset(), frozenset()
    files = frozenset(world.files())
    dirs: set[str] = set()
    for f in files:
        while "/" in f:
            f = f.rsplit("/", 1)[0]
            if f in dirs:
                break
            dirs.add(f)
    return files, frozenset(dirs)


class PathResolver:
    """World-relative paths for the paths an agent wrote.

    A relative path is joined to the working folder. With a world at hand, an absolute path
    is matched by its longest suffix that names a world file or folder (so ``/testbed/src/a.py``,
    ``/workspace/repo__x/src/a.py`` and ``src/a.py`` all become ``src/a.py``); the prefix found
    is reused. Without a world, the trajectory's repository root is stripped. A path outside
    the repository stays absolute.
    """

    def __init__(self, root: str | None, world: Any = None,
                 tree: tuple[frozenset[str], frozenset[str]] | None = None) -> None:
        self.root = posixpath.normpath(root) if root else None
        self.world = world
        self.files, self.dirs = tree if tree is not None else world_tree(world)
        self._prefixes: list[str] = []
        self._cache: dict[tuple[str, str | None], str] = {}

    def __call__(self, path: str, cwd: str | None) -> str:
        key = (path, cwd)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        raw = path.strip()
        full = join_path(cwd or self.root, raw) if raw else (cwd or self.root or ".")
        rel = self._world_rel(full) if self.world is not None else None
        if rel is None:
            rel = self._strip_root(full)
        self._cache[key] = rel
        return rel

    def _strip_root(self, full: str) -> str:
        if self.root and (full == self.root or full.startswith(self.root + "/")):
            return full[len(self.root) + 1:] or "."
        if full.startswith("./"):
            full = full[2:]
        return full or "."

    def _world_rel(self, full: str) -> str | None:
        known = self.files
        for prefix in self._prefixes:
            if full.startswith(prefix + "/"):
                rest = full[len(prefix) + 1:]
                if rest in known or rest in self.dirs:
                    return rest
        if self.root and (full == self.root):
            return "."
        parts = [p for p in full.split("/") if p and p != "."]
        for k in range(len(parts)):
            cand = "/".join(parts[k:])
            if cand in known or cand in self.dirs:
                prefix = ("/" if full.startswith("/") else "") + "/".join(parts[:k])
                if k and prefix not in self._prefixes:
                    self._prefixes.append(prefix)
                return cand
        return None

    def is_dir(self, rel: str) -> bool | None:
        """Whether ``rel`` is a world folder (None without a world)."""
        if self.world is None:
            return None
        return rel == "." or rel in self.dirs

    def line_count(self, rel: str) -> int | None:
        """The world file's number of lines (None without a world or for other files)."""
        if self.world is None or rel not in self.files:
            return None
        return self.world.line_count(rel)

    def lines(self, rel: str) -> list[str] | None:
        """The world file's lines (None without a world, for other files or unreadable ones)."""
        if self.world is None or rel not in self.files:
            return None
        from adakit.apparatus.world import SandboxError

        try:
            return list(self.world.lines(rel))
        except (OSError, ValueError, SandboxError):
            return None


# --------------------------------------------------------------------------- records

_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


def slug(text: str, limit: int = 80) -> str:
    """A file-name-safe id fragment."""
    out = _SLUG.sub("-", text).strip("-.")
    return out[:limit] or "run"


def termination(exit_status: str | None, submitted: bool, patch: bool = False) -> str:
    """The end record's reason for a source scaffold's exit status (kept verbatim beside).

    ``submitted``: the agent took a submit step; ``patch``: the source holds a patch
    without one (a harness may diff the workspace however the run ended, as OpenHands'
    evaluation does), which counts as a submission only when the status names no limit and no
    error."""
    low = (exit_status or "").lower()
    if submitted or "submit" in low:
        return "submit"
    reason = _stop_reason(low)
    return "submit" if patch and reason == "agent_exit" and "error" not in low else reason


def _stop_reason(low: str) -> str:
    if "cost" in low:
        return "cost_limit"
    if "context" in low:
        return "context_overflow"
    if "format" in low:
        return "malformed_limit"
    if "api" in low or "model" in low or "ratelimit" in low:
        return "model_error"
    if any(k in low for k in ("step", "limit", "turn", "iteration", "exceeded")):
        return "turn_bound"
    return "agent_exit"


def repo_name(instance: str | None, root: str | None) -> str | None:
    """The repository a run worked on: ``owner__repo-123`` (SWE-bench ids) gives ``repo``;
    else the root folder's name."""
    for text in (instance, root.rstrip("/").rsplit("/", 1)[-1] if root else None):
        if not text:
            continue
        m = re.match(r"^[\w.-]+?__([\w.-]+?)(?:__[\d.]+)?(?:-\d+)?$", text)
        if m:
            return m.group(1)
    if root and root.strip("/") not in ("testbed", "workspace", "repo", "app", ""):
        return root.rstrip("/").rsplit("/", 1)[-1]
    return None


@dataclass
class Target:
    """What the importer writes into: the world (if given), its header info, the study."""

    world: Any = None
    world_info: WorldInfo | None = None
    study: str = "imported"
    task: str | None = None
    model: str | None = None
    root: str | None = None
    max_observation_chars: int = 4000
    #: the user's own tool names, each mapped as a tool the mapping table covers
    #: (``--map-tool NAME=TOOL``); it overrides what the format's reader chose
    tool_names: dict[str, str] = field(default_factory=dict)
    _tree: tuple[frozenset[str], frozenset[str]] | None = None

    def tree(self) -> tuple[frozenset[str], frozenset[str]]:
        """The world's files and folders, listed once for every trajectory."""
        if self._tree is None:
            self._tree = world_tree(self.world)
        return self._tree


def _times(traj: Trajectory) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    if traj.timing == "recorded":
        prev = traj.started_at
        for s in traj.steps:
            end = s.ended_at if s.ended_at is not None else (s.started_at or prev or 0.0)
            start = s.started_at if s.started_at is not None else (prev if prev is not None else end)
            start = min(start, end)
            out.append((start, end))
            prev = end
        return out
    t = 0.0
    for s in traj.steps:
        dur = s.duration_s if traj.timing == "execution" and s.duration_s is not None else 1.0
        out.append((t, t + max(dur, 0.0)))
        t += max(dur, 0.0)
    return out


def _mapped_turn(step: SourceStep, ctx: Context, tool_names: dict[str, str]) -> Mapped:
    if step.tool in tool_names:
        return map_tool(tool_names[step.tool], step.args, step.observation, ctx)
    tool, args = step.mapped_as or (step.tool, step.args)
    return map_tool(tool, args, step.observation, ctx)


def build_records(traj: Trajectory, source: SourceInfo, target: Target
                  ) -> tuple[Header, list[Turn], End]:
    """The header, turns and end record of one imported run."""
    turns: list[Turn] = []
    state = _Walk()
    for turn in _turns(traj, target, state):
        turns.append(turn.model())
    header, end = _ends(traj, source, target, state, len(turns), turns[0].started_at,
                        turns[-1].ended_at)
    return header, turns, end


def record_lines(traj: Trajectory, source: SourceInfo, target: Target
                 ) -> tuple[Header, list[bytes], End]:
    """The header, the turns as the JSON lines of the run file (each with its newline) and
    the end record of one imported run: the bytes :func:`build_records`' turns are written
    as, without building a validated record for a turn whose values already have the types
    the record declares."""
    lines: list[bytes] = []
    state = _Walk()
    first = last = None
    for turn in _turns(traj, target, state):
        lines.append(turn.line())
        first = turn if first is None else first
        last = turn
    assert first is not None and last is not None
    header, end = _ends(traj, source, target, state, len(lines), first.started_at, last.ended_at)
    return header, lines, end


@dataclass
class _Walk:
    """What the walk over a trajectory's steps leaves for its header and end."""

    root: str | None = None
    submitted: bool = False


#: ``ToolMetrics`` of a step the source could not parse.
_MALFORMED = {"error_type": "malformed", "mapped_by": "parse_error"}


class _TurnParts:
    """One turn's values before they become a record: a :class:`Turn` (validated) or its JSON
    line (written directly when every value has the exact type its field declares, so
    validation would leave it as it is and orjson writes what pydantic would)."""

    __slots__ = ("common", "tool", "args", "metrics", "parse_error", "started_at", "ended_at")

    def __init__(self, common: dict[str, Any], tool: str, args: Any, metrics: dict[str, Any],
                 parse_error: str | None = None) -> None:
        self.common, self.tool, self.args, self.metrics = common, tool, args, metrics
        self.parse_error = parse_error
        self.started_at, self.ended_at = common["started_at"], common["ended_at"]

    def model(self) -> Turn:
        """The validated turn, built as it always was (so a bad value fails as before)."""
        if self.parse_error is not None:
            turn = Turn(**self.common, parse_error=ParseError(kind="no_tool",
                                                              message=self.parse_error[:500]),
                        metrics=ToolMetrics(**self.metrics))
        else:
            metrics = ToolMetrics(**self.metrics)
            turn = Turn(**self.common, call=ToolCall(tool=self.tool, params=_jsonable(self.args)),
                        metrics=metrics)
        self.started_at, self.ended_at = turn.started_at, turn.ended_at
        return turn

    def line(self) -> bytes:
        """The turn's line in the run file, newline included."""
        if self.parse_error is None and _exact_metrics(self.metrics):
            c = self.common
            params = _jsonable(self.args)
            side = c["sidechain"]
            if _exact_turn(c, self.tool) and (side is None or _exact_sidechain(side)):
                record = {
                    "kind": "turn", "turn": c["turn"], "started_at": c["started_at"],
                    "ended_at": c["ended_at"], "latency_s": c["latency_s"],
                    "tokens_in": c["tokens_in"], "tokens_out": c["tokens_out"],
                    "tokens_reused": None, "cost_usd": c["cost_usd"], "cached": False,
                    "constrained": False, "raw_text": c["raw_text"], "thinking": c["thinking"],
                    "call": {"tool": self.tool, "params": params}, "parse_error": None,
                    "observation": c["observation"], "metrics": self.metrics,
                    "state_changes": [], "injected": [i.model_dump() for i in c["injected"]],
                    "coach": None, "model_calls": [], "dropped_messages": 0,
                    "observation_chars": c["observation_chars"],
                }
                if side is not None:
                    record["sidechain"] = side.model_dump()
                try:
                    return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
                except (TypeError, orjson.JSONEncodeError):
                    pass  # an integer beyond 64 bits, a lone surrogate: pydantic writes or refuses it
        return self.model().model_dump_json().encode() + b"\n"


def _exact_metrics(m: dict[str, Any]) -> bool:
    """Whether ``ToolMetrics`` would take these values as they are."""
    return (_str_or_none(m["tool"]) and _str_or_none(m["file"]) and _str_or_none(m["action"])
            and _str_or_none(m["symbol"]) and _str_or_none(m["mapped_by"])
            and type(m["lines_viewed"]) is int and type(m["structural"]) is bool
            and (m["result_count"] is None or type(m["result_count"]) is int)
            and (m["finalize"] is None or type(m["finalize"]) is bool)
            and (m["exit_code"] is None or type(m["exit_code"]) is int)
            and m["error_type"] in (None, "tool_error")
            and all(type(r) in (tuple, list) and len(r) == 2 and type(r[0]) is int
                    and type(r[1]) is int for r in m["ranges"]))


def _exact_turn(c: dict[str, Any], tool: Any) -> bool:
    """Whether ``Turn`` would take these values as they are (the float fields hold floats, the
    int fields ints, the text fields str)."""
    return (type(c["started_at"]) is float and type(c["ended_at"]) is float
            and type(c["latency_s"]) is float and type(c["tokens_in"]) is int
            and type(c["tokens_out"]) is int
            and (c["cost_usd"] is None or type(c["cost_usd"]) is float)
            and type(c["raw_text"]) is str and type(c["thinking"]) is str
            and type(c["observation"]) is str and type(tool) is str)


def _exact_sidechain(side: Any) -> bool:
    return (type(side) is Sidechain and type(side.id) is str and type(side.agent) is str
            and type(side.depth) is int
            and (side.parent_turn is None or type(side.parent_turn) is int))


def _str_or_none(value: Any) -> bool:
    return value is None or type(value) is str


def _turns(traj: Trajectory, target: Target, state: _Walk) -> Iterator[_TurnParts]:
    """Each step's turn, mapped, in order (lazily: a step is mapped when its turn is asked
    for, so a bad step fails where it always did)."""
    if not traj.steps:
        raise BadInput("empty trajectory", "no agent steps")
    root = state.root = target.root or traj.root
    if target.world is None and traj.world is not None:
        resolver = PathResolver(root, traj.world, _tree_of(traj.world))
    else:
        resolver = PathResolver(root, target.world, target.tree())
    times = _times(traj)
    cap = target.max_observation_chars
    is_dir, line_count, read_lines = resolver.is_dir, resolver.line_count, resolver.lines
    for i, (step, (t0, t1)) in enumerate(zip(traj.steps, times, strict=True), 1):
        obs = step.observation or ""
        common = {
            "turn": i, "started_at": t0, "ended_at": t1, "latency_s": step.latency_s,
            "tokens_in": step.tokens_in, "tokens_out": step.tokens_out,
            "cost_usd": step.cost_usd, "raw_text": step.response, "thinking": step.thought,
            "observation": obs if len(obs) <= cap else clip(
                obs, cap, marker=_OBSERVATION_CUT, within=False, space="keep"),
            "observation_chars": len(obs),
            "sidechain": step.sidechain,
            "injected": [Injection(source="compaction", text=step.compaction)]
            if step.compaction is not None else [],
        }
        if step.parse_error is not None:
            yield _TurnParts(common, "", None, _MALFORMED, step.parse_error)
            continue
        cwd = step.cwd or root
        ctx = Context(
            cwd=cwd,
            open_file=resolver(step.open_file, cwd) if step.open_file else None,
            resolve=resolver, is_dir=is_dir, line_count=line_count, read_lines=read_lines,
            output_complete=step.observation_complete, exit_code=step.exit_code,
            result=step.result,
        )
        m = _mapped_turn(step, ctx, target.tool_names)
        state.submitted = state.submitted or m.tool == "SUB"
        yield _TurnParts(common, step.tool or "?", step.args, m.metrics(step.exit_code))


def _ends(traj: Trajectory, source: SourceInfo, target: Target, state: _Walk, n_turns: int,
          started_at: float, ended_at: float) -> tuple[Header, End]:
    """The header and end record of a run of ``n_turns`` turns, the first starting at
    ``started_at``, the last ending at ``ended_at``."""
    root, submitted = state.root, state.submitted
    info = target.world_info or (
        WorldInfo(name=traj.world.name, source=f"folder:{traj.world.root}")
        if target.world is None and traj.world is not None else
        WorldInfo(name=repo_name(traj.instance, root) or traj.repo or "unknown", source="trajectory"))
    model = traj.model or target.model or "unknown"
    header = Header(
        run_id=f"{slug(source.format)}__{slug(traj.instance or _stem(source.file))}__{source.sha256[:10]}",
        study=target.study,
        model=ModelInfo(name=model, kind="llm", model_id=model, mode=traj.mode or source.format),
        world=info,
        task=TaskInfo(family=target.task or DEFAULT_TASK, target=traj.instance,
                      prompt=traj.task_prompt),
        condition=ConditionInfo(name=IMPORTED_CONDITION, params={"imported_from": source.format}),
        turn_bound=max(traj.step_limit or 0, n_turns, 1),
        adakit_version=__version__,
        started_at=started_at,
        system_prompt=traj.system_prompt,
        source=source,
    )
    conclusion = traj.final_message or None
    if traj.submission:
        conclusion = (f"{conclusion}\n\nSubmitted changes:\n{traj.submission}" if conclusion
                      else f"Submitted changes:\n{traj.submission}")
    ended = max(ended_at, traj.ended_at or 0.0) if traj.timing == "recorded" else ended_at
    end = End(
        reason=termination(traj.exit_status, submitted, bool(traj.submission)),  # type: ignore[arg-type]
        ended_at=ended,
        conclusion=conclusion,
        conclusion_title=f"{source.agent} outcome" if conclusion else None,
        exit_status=traj.exit_status,
        submission=traj.submission,
        totals={k: v for k, v in {"steps": n_turns, **traj.totals}.items() if v is not None},
    )
    return header, end


_TREES: dict[int, tuple[Any, tuple[frozenset[str], frozenset[str]]]] = {}


def _tree_of(world: Any) -> tuple[frozenset[str], frozenset[str]]:
    """A source's own world's files and folders, listed once for all the runs it serves."""
    hit = _TREES.get(id(world))
    if hit is None or hit[0] is not world:
        hit = _TREES[id(world)] = (world, world_tree(world))
    return hit[1]


def _stem(file: str) -> str:
    name = file.rsplit("/", 1)[-1]
    for ext in (".traj.json", ".traj", ".jsonl", ".json"):
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


def _jsonable(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def text_or_none(value: Any) -> str | None:
    """A folder or name as the record keeps it: non-empty text, else None (a number or a list
    where a path should be is treated as absent)."""
    return value if isinstance(value, str) and value else None


def number_or_none(value: Any) -> float | None:
    """A cost or duration as the record reads it: a number (not a bool) as a float, or text
    that reads as a finite one; None for anything else."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def count_or_none(value: Any) -> int | None:
    """A step limit or count as the record reads it: an int (not a bool), a float or text with
    a whole value; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    number = number_or_none(value)
    return int(number) if number is not None and number.is_integer() else None


def text_of(content: Any) -> str:
    """A message content as text: a string, or the text parts of a list of content blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for item in content:
            if isinstance(item, dict):
                if item.get("type") in (None, "text", "input_text", "output_text"):
                    parts.append(str(item.get("text", "")))
            elif isinstance(item, str):
                parts.append(item)
        return "\n".join(p for p in parts if p)
    if isinstance(content, dict):
        return str(content.get("text", ""))
    return str(content)


def mark_compaction(steps: list[SourceStep], text: str, main: SourceStep | None = None) -> None:
    """Mark a compaction (its summary ``text``) on the step it followed: ``main`` (the main
    agent's last step, when subagents' steps come between), else the last step."""
    target = main or (steps[-1] if steps else None)
    if target is not None:
        target.compaction = "\n\n".join(t for t in (target.compaction, text) if t)


def seconds(value: Any) -> float | None:
    """A timestamp as seconds since the epoch: a number as it is, an ISO 8601 text (``Z`` or
    an offset; UTC when it names none); None for anything else."""
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value:
        try:  # Python 3.11 reads a "Z" suffix itself
            stamp = datetime.fromisoformat(value)
        except ValueError:
            return None
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=UTC)
        return stamp.timestamp()
    return None


def first(items: Iterable[Any], default: Any = None) -> Any:
    """The first item of an iterable (``default`` if empty)."""
    return next(iter(items), default)
