"""Claude Code sessions (``~/.claude/projects/<project>/<session>.jsonl``), CLI 1.0.x to 2.x.

One JSON object a line, each with a ``type``:

* ``user``: ``message.content`` is the user's text (the first is the task), or a list of
  blocks; ``tool_result`` blocks (``tool_use_id``, ``content``, ``is_error``) answer the
  agent's calls, often with a structured ``toolUseResult`` beside them (newer versions:
  ``file.startLine``/``numLines`` for ``Read``, ``structuredPatch`` for edits, ``numFiles``
  for searches). ``isMeta`` lines (caveats, command echoes) are not the user's words;
  ``isCompactSummary`` marks the summary that replaced a compacted history;
* ``assistant``: ``message`` with ``model``, ``usage`` and content blocks ``thinking``,
  ``text`` and ``tool_use`` (``id``, ``name``, ``input``); one reply may be spread over
  several lines sharing ``message.id`` (its usage is counted once);
* ``system``: notes of the CLI; ``subtype: compact_boundary`` marks a compaction;
* ``summary``: the summary Claude Code keeps of a conversation (``summary``, ``leafUuid``);
* ``file-history-snapshot``, ``queue-operation``, ``attachment`` and anything newer: not
  read, but counted in the drift account (:attr:`Trajectory.unused`).

Every line carries ``uuid``/``parentUuid`` (a tree), ``sessionId``, ``cwd``, ``version``,
``timestamp`` and ``isSidechain``. Each ``tool_use`` is one step; its observation is the
``tool_result`` with its id. A subagent (``Task``/``Agent``) writes its own lines with
``isSidechain: true`` (newer versions add ``agentId``): its steps are kept in the run in time
order, each marked with its span (:class:`~adakit.record.Sidechain`), linked to the
delegating call by the subagent's prompt (or its ``agentId``). A ``summary`` record or a
compaction is a marked event (an injection of source ``compaction``) on the main agent's step
it followed (the summary is in the next prompt; one before any step goes on the first).
Tools are mapped by name (:mod:`adakit.importers.mapping`); a tool this module does not know
is kept as ``other`` with its name.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from adakit.importers.base import (
    BadInput,
    SourceStep,
    Trajectory,
    mark_compaction,
    seconds,
    text_of,
)
from adakit.record import Sidechain

FORMAT = "claude-code"
AGENT = "claude-code"
EXTENSIONS = (".jsonl",)
#: The files are JSON lines, one record a line.
LINES = True
#: The tools read by name; any other is mapped as ``other`` (kept with its name).
KNOWN_TOOLS = frozenset({
    "Read", "Grep", "Glob", "Bash", "Edit", "MultiEdit", "Write", "NotebookEdit", "TodoWrite",
    "Task", "Agent", "BashOutput", "KillShell", "KillBash", "WebFetch", "WebSearch",
    "ExitPlanMode", "TaskCreate", "TaskUpdate",
})
#: Top-level fields of a line this reader uses (others are counted as not used).
USED_FIELDS = frozenset({
    "type", "uuid", "parentUuid", "sessionId", "cwd", "version", "isSidechain", "timestamp",
    "message", "toolUseResult", "agentId", "isMeta", "isCompactSummary", "subtype", "summary",
    "content",
})
_MESSAGE_FIELDS = frozenset({"role", "content", "model", "usage", "id"})
_READ_TYPES = frozenset({"user", "assistant", "summary", "system"})
_BLOCKS = frozenset({"text", "thinking", "tool_use", "tool_result"})
_NOT_PROSE = ("<command-name>", "<command-message>", "<local-command-stdout>", "Caveat:")
MAIN = ""
#: The skip reason of a file that holds only a subagent's lines (imported with its session).
SUBAGENT_FILE = "subagent file"


def markers(records: Any) -> str | None:
    """The fields that make the lines of a JSONL file a Claude Code session (None: not one)."""
    if not isinstance(records, list) or not records:
        return None
    if not all(isinstance(r, dict) and isinstance(r.get("type"), str) and "role" not in r
               for r in records):
        return None
    if any(r["type"] in ("user", "assistant") and "sessionId" in r and "uuid" in r
           and isinstance(r.get("message"), dict) for r in records):
        return "'type' user/assistant lines with 'sessionId', 'uuid' and 'message'"
    return None


def _content(rec: dict[str, Any]) -> Any:
    msg = rec.get("message")
    return msg.get("content") if isinstance(msg, dict) else None


class _Session:
    """The reading state of one session file (one pass over its lines)."""

    def __init__(self, subagents: dict[str, list[Any]] | None = None) -> None:
        self.subagents = dict(subagents or {})  # agent id -> the lines of its own file
        self.steps: list[SourceStep] = []
        self.pending: dict[str, SourceStep] = {}
        self.number: dict[str, int] = {}  # tool_use id -> 1-based step number
        self.tasks: list[tuple[int, str, str, int]] = []  # (step, prompt, kind, depth), unlinked
        self.spans: dict[str, Sidechain] = {}  # span key -> its marker
        self.root_of: dict[str, str] = {}  # sidechain uuid -> its span key
        self.thinking: dict[str, list[str]] = {}
        self.texts: dict[str, list[str]] = {}
        self.last_time: dict[str, float | None] = {}
        self.counted: set[str] = set()
        self.unused: Counter[str] = Counter()
        #: lines by their key set, and messages by theirs (plain dicts: a Counter's item
        #: update goes through Python-level methods, a tenth of a compiled line's time)
        self.keys: dict[tuple[str, ...], int] = {}
        self.message_keys: dict[tuple[str, ...], int] = {}
        self.compaction: str | None = None  # a compaction not marked on a step yet
        self.compactions = 0
        self.last_main: SourceStep | None = None
        self.task = ""
        self.final: str | None = None
        self.model = self.version = self.session = ""
        self.root: str | None = None
        self.prompts = 0

    # ----------------------------------------------------------------- spans

    def span(self, rec: dict[str, Any]) -> Sidechain | None:
        """The sidechain a line belongs to (None: the main agent's)."""
        if not rec.get("isSidechain"):
            return None
        uuid = str(rec.get("uuid") or "")
        up = str(rec.get("parentUuid") or "")
        key = str(rec.get("agentId") or "") or self.root_of.get(up) or uuid
        if key not in self.spans:
            self.spans[key] = self._link(key, rec)
        if uuid:
            self.root_of[uuid] = key
        return self.spans[key]

    def _link(self, key: str, rec: dict[str, Any]) -> Sidechain:
        """A new span, linked to the delegating call whose prompt it starts with (else the
        latest call not linked yet)."""
        prompt = text_of(_content(rec)).strip()
        at = next((k for k, t in enumerate(self.tasks) if prompt and t[1].strip() == prompt),
                  len(self.tasks) - 1)
        if at < 0:
            return Sidechain(id=key)
        step, _, kind, depth = self.tasks.pop(at)
        return Sidechain(id=key, parent_turn=step, agent=kind, depth=depth)

    def drift(self) -> dict[str, int]:
        """The drift account: types and blocks not read, fields not used, counted."""
        for keys, n in self.keys.items():
            for k in set(keys) - USED_FIELDS:
                self.unused[f"field:{k}"] += n
        for keys, n in self.message_keys.items():
            for k in set(keys) - _MESSAGE_FIELDS:
                self.unused[f"field:message.{k}"] += n
        return dict(self.unused)

    # ----------------------------------------------------------------- lines

    def read(self, rec: dict[str, Any]) -> None:
        kind = rec["type"]
        if kind in _READ_TYPES:  # a type not read is counted once, not by its fields
            keys = tuple(rec)  # counted by key set, spelled out once at the end
            self.keys[keys] = self.keys.get(keys, 0) + 1
            msg = rec.get("message")
            if isinstance(msg, dict):
                keys = tuple(msg)
                self.message_keys[keys] = self.message_keys.get(keys, 0) + 1
        version = rec.get("version")
        if version:
            self.version = str(version)
        self.session = self.session or str(rec.get("sessionId") or "")
        self.root = self.root or (str(rec["cwd"]) if rec.get("cwd") else None)
        if kind == "user":
            self.user(rec)
        elif kind == "assistant":
            self.assistant(rec)
        elif kind == "summary":
            self.compact(str(rec.get("summary") or ""), new=True)
        elif kind == "system" and rec.get("subtype") == "compact_boundary":
            self.compact(str(rec.get("content") or "compacted"), new=True)
        else:
            self.unused[f"type:{kind}" + (f":{rec['subtype']}" if rec.get("subtype") else "")] += 1

    def compact(self, text: str, new: bool = False) -> None:
        """A compaction: a new one (a boundary or a summary record), or the summary text that
        follows a boundary (a new one when no boundary came before)."""
        self.compactions += 1 if new or self.compaction is None else 0
        self.compaction = "\n\n".join(t for t in (self.compaction or "", text) if t)

    def user(self, rec: dict[str, Any]) -> None:
        side = self.span(rec)
        chain = side.id if side else MAIN
        stamp = seconds(rec.get("timestamp"))
        content = _content(rec)
        if rec.get("isCompactSummary"):
            self.compact(text_of(content))
            return
        blocks = content if isinstance(content, list) else []
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        structured = rec.get("toolUseResult")
        agent = str(structured.get("agentId") or "") if isinstance(structured, dict) else ""
        if agent in self.subagents and agent not in self.spans:  # its file, before its result
            for line in self.subagents.pop(agent):
                if isinstance(line, dict) and isinstance(line.get("type"), str):
                    self.read({**line, "isSidechain": True, "agentId": agent})
        for result in results:
            self.answer(result, rec.get("toolUseResult") if len(results) == 1 else None, stamp)
        for b in blocks:
            if isinstance(b, dict) and b.get("type") not in _BLOCKS:
                self.unused[f"block:{b.get('type')}"] += 1
        said = text_of(content).strip() if not results and not rec.get("isMeta") else ""
        if said and not said.startswith(_NOT_PROSE):
            self.prompts += side is None
            if side is None and not self.task:
                self.task = said
        self.last_time[chain] = stamp or self.last_time.get(chain)

    def answer(self, block: dict[str, Any], structured: Any, stamp: float | None) -> None:
        step = self.pending.pop(str(block.get("tool_use_id")), None)
        if step is None:
            return
        step.observation = text_of(block.get("content"))
        step.result = {**(structured if isinstance(structured, dict) else {}),
                       "is_error": bool(block.get("is_error"))}
        step.ended_at = stamp or step.ended_at
        agent = step.result.get("agentId")
        if step.tool in ("Task", "Agent") and agent:  # relink a span named by its agentId
            span = self.spans.get(str(agent))
            if span is not None:
                span.parent_turn = self.number.get(str(block.get("tool_use_id")), span.parent_turn)

    def assistant(self, rec: dict[str, Any]) -> None:
        msg = rec.get("message")
        if not isinstance(msg, dict):  # a reply without its message: counted, not read
            self.unused["type:assistant:no message"] += 1
            return
        side = self.span(rec)
        chain = side.id if side else MAIN
        stamp = seconds(rec.get("timestamp"))
        model = str(msg.get("model") or "")
        if model and not model.startswith("<") and not self.model:
            self.model = model
        content = msg.get("content")
        blocks: list[Any] = content if isinstance(content, list) else [
            {"type": "text", "text": text_of(content)}]
        for b in blocks:
            kind = b.get("type") if isinstance(b, dict) else None
            if kind == "thinking":
                self.thinking.setdefault(chain, []).append(str(b.get("thinking") or ""))
            elif kind == "text" and str(b.get("text") or "").strip():
                self.texts.setdefault(chain, []).append(str(b["text"]))
                if side is None:
                    self.final = str(b["text"])
            elif kind == "tool_use":
                self.call(b, rec, side, chain, stamp)
            else:
                self.unused[f"block:{kind}"] += 1

    def call(self, block: dict[str, Any], rec: dict[str, Any], side: Sidechain | None,
             chain: str, stamp: float | None) -> None:
        msg = rec["message"]
        name = str(block.get("name") or "?")
        given = block.get("input")
        args: dict[str, Any] = given if isinstance(given, dict) else {}
        thinking, texts = self.thinking.pop(chain, []), self.texts.pop(chain, [])
        used = msg.get("usage")
        usage: dict[str, Any] = used if isinstance(used, dict) else {}
        reply = str(msg.get("id") or id(msg))
        first = reply not in self.counted
        self.counted.add(reply)
        step = SourceStep(
            tool=name, args=args, thought="\n\n".join([*thinking, *texts]),
            response="\n\n".join(texts), cwd=str(rec["cwd"]) if rec.get("cwd") else None,
            started_at=self.last_time.get(chain) or stamp, ended_at=stamp,
            tokens_in=sum(int(usage.get(k) or 0) for k in (
                "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
            if first else 0,
            tokens_out=int(usage.get("output_tokens") or 0) if first else 0,
            mapped_as=None if name in KNOWN_TOOLS else ("other", {"name": name}),
            sidechain=side,
        )
        if side is None:
            if self.compaction is not None:  # on the step it followed (the first: this one)
                mark_compaction([step], self.compaction, self.last_main)
                self.compaction = None
            self.last_main = step
        self.steps.append(step)
        tool_id = str(block.get("id") or f"#{len(self.steps)}")
        self.pending[tool_id] = step
        self.number[tool_id] = len(self.steps)
        if name in ("Task", "Agent"):
            self.tasks.append((len(self.steps), str(args.get("prompt") or ""),
                               str(args.get("subagent_type") or ""), (side.depth + 1) if side else 1))
        if side is None:
            self.final = None
        self.last_time[chain] = stamp or self.last_time.get(chain)


def with_companions(path: Path, records: Any) -> Any:
    """A session's lines with the lines of the subagent files its ``Task`` results name
    (``agent-<id>.jsonl`` beside it or in ``<session>/subagents/``; CLI 2.x), as
    ``{"lines", "subagents": {id: lines}}``; the lines alone when there are none. A subagent
    whose lines are in the session itself, or whose file is unreadable, is left as it is."""
    if not isinstance(records, list):
        return records
    inline = {str(r.get("agentId")) for r in records if isinstance(r, dict) and r.get("agentId")}
    wanted = {str(r["toolUseResult"]["agentId"]) for r in records if isinstance(r, dict)
              and isinstance(r.get("toolUseResult"), dict) and r["toolUseResult"].get("agentId")}
    found: dict[str, list[Any]] = {}
    for agent in sorted(wanted - inline):
        for where in (path.parent / f"agent-{agent}.jsonl",
                      path.parent / path.name.removesuffix(".jsonl") / "subagents" / f"agent-{agent}.jsonl"):
            try:
                lines = where.read_text(encoding="utf-8").splitlines()
                found[agent] = [json.loads(ln) for ln in lines if ln.strip()]
                break
            except (OSError, UnicodeDecodeError, ValueError, RecursionError):
                continue
    return {"lines": records, "subagents": found} if found else records


def parse(data: Any, name: str = "") -> Trajectory:
    """The lines of a Claude Code session file (already parsed; with its subagents' files,
    :func:`with_companions`) as a :class:`Trajectory`."""
    records, subagents = (data["lines"], data["subagents"]) if isinstance(data, dict) \
        and "lines" in data else (data, {})
    if not markers(records):
        raise BadInput("unknown shape", "not Claude Code lines (no user/assistant line with "
                       "'sessionId', 'uuid' and 'message')")
    talk = [r for r in records if r["type"] in ("user", "assistant")]
    if talk and all(r.get("isSidechain") for r in talk):
        raise BadInput(SUBAGENT_FILE, "only a subagent's lines: imported with the session "
                       "whose Task started it")
    s = _Session(subagents)
    for rec in records:
        s.read(rec)
    if not s.steps:
        raise BadInput("empty trajectory", "no tool calls")
    if s.compaction is not None:  # after the last step
        mark_compaction(s.steps, s.compaction, s.last_main)
    stem = name.rsplit("/", 1)[-1].removesuffix(".jsonl")
    side = sum(1 for st in s.steps if st.sidechain is not None)
    return Trajectory(
        steps=s.steps, agent=AGENT, agent_version=s.version, instance=s.session or stem or None,
        model=s.model, task_prompt=s.task, final_message=s.final,
        totals={"subagent_steps": side, "subagents": len(s.spans),
                "compactions": s.compactions or None, "user_prompts": s.prompts},
        started_at=s.steps[0].started_at, ended_at=s.steps[-1].ended_at,
        timing="recorded" if any(st.ended_at is not None for st in s.steps) else "none",
        root=s.root, mode="session", unused=s.drift(),
    )
