"""Inspect AI eval logs: ``.eval`` (a zip) and ``.json`` (one object), every sample a run.

A ``.json`` log is one ``EvalLog`` object: ``version``, ``status``, ``eval`` (the spec:
``task``, ``model``, ``solver``, ``packages``, ``created``), ``plan``, ``results``, ``stats``
and ``samples``. A ``.eval`` log is a zip of the same parts: ``header.json`` (the log without
its samples; a log still being written has only ``_journal/start.json``), one
``samples/{id}_epoch_{epoch}.json`` per sample, ``summaries.json`` and ``reductions.json``.

A sample has ``id``, ``epoch``, ``input`` (the task: a text or messages), ``messages`` (the
conversation), ``output``, ``scores``, ``error``, ``limit`` and ``events``. An assistant
message's ``tool_calls`` (``id``, ``function``, ``arguments``) are the steps; a ``tool``
message with the call's ``tool_call_id`` is its observation (``error`` when the tool failed).
Content is a text or blocks (``text``, ``reasoning``, ``image`` ...); a long text may be kept
once in the sample's ``attachments`` and referred to as ``attachment://HASH``. The events give
the timings: a ``tool`` event (same ``id`` as the call) its ``timestamp`` and ``completed``;
the ``model`` event whose output holds the call its tokens. A ``compaction`` event is a marked
event (an injection of source ``compaction``) on the step that started before it.

A subagent run as a tool (``as_tool``) records its own model and tool events in the span the
calling ``tool`` event names (``agent_span_id``): its calls are kept after the call that ran
it, each marked with that span (:class:`~adakit.record.Sidechain`); a handoff's calls are in
the sample's messages already and are read there. Older logs (2024) keep events in
``transcript.events`` with naive timestamps and no ``completed``; samples before that have no
events at all (then the run has no timing).

Tools are mapped by name: ``bash`` and ``bash_session`` through the shell mapping,
``text_editor`` as the editor it is (``view`` a read, a ranged one with ``view_range``;
``create``/``str_replace``/``insert`` edits with the lines they touched), ``think`` the
cognitive channel, ``submit`` the end; a name the mapping table does not cover is kept as
``other`` with its name (``adakit import --map-tool NAME=TOOL`` maps it as a known tool).
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections import Counter
from typing import Any

from adakit.importers.base import (
    BadInput,
    SourceStep,
    Trajectory,
    mark_compaction,
    seconds,
    text_of,
)
from adakit.importers.mapping import known_tool
from adakit.record import Sidechain

FORMAT = "inspect"
AGENT = "inspect_ai"
EXTENSIONS = (".eval", ".json")
#: A log is one JSON object (or a zip of them), not JSON lines.
LINES = False
#: The first bytes of a zip file (a ``.eval`` log).
ZIP_MAGIC = b"PK\x03\x04"
ATTACHMENT = "attachment://"
#: Sample fields this reader uses (others are counted in the drift account).
USED_SAMPLE = frozenset({"id", "epoch", "input", "target", "messages", "output", "scores",
                         "metadata", "events", "transcript", "attachments", "error", "limit",
                         "model_usage", "total_time", "working_time", "uuid", "started_at",
                         "completed_at"})
_USED_EVENTS = frozenset({"tool", "model", "compaction", "span_begin"})
_SHELL_TOOLS = frozenset({"bash", "bash_session"})


def _is_log(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("eval"), dict) and \
        isinstance(data["eval"].get("task"), str) and "model" in data["eval"]


def markers(data: Any) -> str | None:
    """The fields that make a JSON object an Inspect AI eval log (None: not one)."""
    if isinstance(data, dict) and "sample" in data and _is_log(data.get("log")):
        return "a zip with an eval spec ('eval.task', 'eval.model') and samples/*.json"
    if _is_log(data) and isinstance(data.get("version"), int) and (
            data.get("samples") is None or isinstance(data.get("samples"), list)):
        return "'version', 'eval' with 'task' and 'model', and 'samples'"
    return None


# --------------------------------------------------------------------------- reading files


def _sample_label(sample: Any, k: int) -> str:
    if isinstance(sample, dict):
        return f"{sample.get('id', k)}_epoch_{sample.get('epoch', 1)}"
    return f"sample_{k}"


def _records(log: dict[str, Any], samples: list[tuple[str, bytes, Any]], path: str
             ) -> list[tuple[str, str, Any]]:
    """(label, sha256, {"log", "sample"} or BadInput) per sample of one log."""
    head = {k: v for k, v in log.items() if k != "samples"}
    if not samples:
        raise BadInput("empty trajectory", "the log holds no samples (logged without them?)")
    out = []
    for label, raw, sample in samples:
        sha = hashlib.sha256(raw).hexdigest()
        out.append((f"{path}:{label}", sha, sample if isinstance(sample, BadInput)
                    else {"log": head, "sample": sample}))
    return out


def read_json_log(data: Any, path: str) -> list[tuple[str, str, Any]]:
    """The samples of a parsed ``.json`` log, one record each (its sha256: of the sample)."""
    if not markers(data):
        raise BadInput("unknown shape", "not an Inspect eval log (no 'eval' with 'task' and "
                       "'model', or no 'version')")
    samples = data.get("samples") or []
    return _records(data, [(_sample_label(s, k), json.dumps(s, sort_keys=True).encode(), s)
                           for k, s in enumerate(samples, 1)], path)


def _member(zf: zipfile.ZipFile, name: str) -> Any:
    try:
        return json.loads(zf.read(name).decode("utf-8"))
    except RecursionError:
        return BadInput("too deeply nested", f"{name} nests deeper than the parser follows")
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:  # CRC, cut data, JSON
        return BadInput("damaged sample", f"{name}: {' '.join(str(exc).split())[:120]}")


def read_eval_zip(raw: bytes, path: str) -> list[tuple[str, str, Any]]:
    """The samples of a ``.eval`` zip, one record each; a zip cut short (no central
    directory) is :class:`BadInput`, a damaged sample member only costs that sample."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(raw))
    except zipfile.BadZipFile:
        raise BadInput("truncated zip", "not a whole zip file (cut short while written?)") from None
    with zf:
        names = zf.namelist()
        head_name = next((n for n in ("header.json", "_journal/start.json") if n in names), None)
        if head_name is None:
            raise BadInput("unknown shape", "a zip without header.json or _journal/start.json")
        log = _member(zf, head_name)
        if isinstance(log, BadInput):
            raise log
        if not _is_log(log):
            raise BadInput("unknown shape", f"{head_name} holds no eval spec ('eval.task', 'eval.model')")
        samples = []
        for name in names:
            if not (name.startswith("samples/") and name.endswith(".json")):
                continue
            if name.count("/") > 1:  # the chunked shape (samples/ID/...), not written by default
                if name.endswith("/sample.json"):
                    samples.append((name.split("/")[1], b"", BadInput(
                        "unknown shape", f"{name}: a chunked sample, which this reader does not read")))
                continue
            label = name.removeprefix("samples/").removesuffix(".json")
            try:
                body = zf.read(name)
            except (zipfile.BadZipFile, OSError, EOFError) as exc:
                samples.append((label, name.encode(), BadInput("damaged sample", f"{name}: {exc}")))
                continue
            samples.append((label, body, _member(zf, name)))
    return _records(log, samples, path)


def read_log(path: str, raw: bytes, text: str | None) -> list[tuple[str, str, Any]]:
    """The samples of one log file (a zip by its first bytes, else JSON ``text``)."""
    if raw.startswith(ZIP_MAGIC):
        return read_eval_zip(raw, path)
    if text is None:
        raise BadInput("not UTF-8 text", "neither a zip nor JSON text")
    try:
        data = json.loads(text)
    except RecursionError:
        raise BadInput("too deeply nested", "the JSON nests deeper than the parser follows") from None
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(text.rstrip()) - 1 or exc.msg.startswith("Unterminated string")
        raise BadInput("truncated JSON" if cut else "not JSON", exc.msg) from None
    return read_json_log(data, path)


# --------------------------------------------------------------------------- one sample


def _resolver(attachments: Any) -> Any:
    table = attachments if isinstance(attachments, dict) else {}

    def resolve(value: Any) -> Any:
        if isinstance(value, str):
            if value.startswith(ATTACHMENT):
                return str(table.get(value[len(ATTACHMENT):], value))
            if value.startswith("tc://"):  # 2024 transcripts' content references
                return str(table.get(value, value))
            return value
        if isinstance(value, list):
            return [resolve(v) for v in value]
        if isinstance(value, dict):
            return {k: resolve(v) for k, v in value.items()}
        return value
    return resolve


def _reasoning(content: Any) -> str:
    blocks = content if isinstance(content, list) else []
    return "\n\n".join(str(b.get("reasoning") or b.get("summary") or "") for b in blocks
                       if isinstance(b, dict) and b.get("type") == "reasoning"
                       and not b.get("redacted"))


def _events(sample: dict[str, Any]) -> list[dict[str, Any]]:
    events = sample.get("events")
    if not isinstance(events, list):
        transcript = sample.get("transcript")
        events = transcript.get("events") if isinstance(transcript, dict) else None
    out: list[dict[str, Any]] = []

    def walk(items: Any) -> None:  # tool events nest the events of what they ran
        for e in items if isinstance(items, list) else []:
            if isinstance(e, dict):
                out.append(e)
                walk(e.get("events"))
    walk(events)
    return out


def _map_as(name: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """What a call is mapped as: shell tools by their command, others by name (None: as
    recorded), a name the table does not know as ``other``."""
    if name in _SHELL_TOOLS:
        command = args.get("cmd", args.get("command", args.get("input")))
        if name == "bash_session" and args.get("action") not in (None, "type_submit", "type"):
            return "other", {"name": f"{name}:{args.get('action')}"}
        return "bash", {"command": command if isinstance(command, str) else ""}
    return None if known_tool(name) else ("other", {"name": name})


class _Sample:
    """The reading state of one sample."""

    def __init__(self, sample: dict[str, Any]) -> None:
        self.resolve = _resolver(sample.get("attachments") or (
            sample["transcript"].get("content") if isinstance(sample.get("transcript"), dict) else None))
        self.unused: Counter[str] = Counter(f"field:{k}" for k in sample if k not in USED_SAMPLE)
        self.tools: dict[str, dict[str, Any]] = {}
        self.usage: dict[str, dict[str, Any]] = {}  # tool call id -> its model event
        self.compactions: list[tuple[float | None, str]] = []
        self.parent_span: dict[str, str | None] = {}
        self.agent_spans: dict[str, tuple[str, str]] = {}  # span -> (its call's id, agent)
        self.model_events: list[dict[str, Any]] = []
        for e in _events(sample):
            kind = str(e.get("event") or "?")
            if kind == "tool" and e.get("id") is not None:
                self.tools[str(e["id"])] = e
                if e.get("agent_span_id"):  # this call ran an agent in that span
                    self.agent_spans[str(e["agent_span_id"])] = (
                        str(e["id"]), str(e.get("agent") or e.get("function") or ""))
            elif kind == "model":
                self._model_event(e)
            elif kind == "span_begin" and e.get("id") is not None:
                self.parent_span[str(e["id"])] = str(e.get("parent_id") or "") or None
            elif kind == "compaction":
                self.compactions.append((seconds(e.get("timestamp")), _compaction_note(e)))
            elif kind not in _USED_EVENTS:
                self.unused[f"type:event:{kind}"] += 1
        self.steps: list[SourceStep] = []
        self.system = self.task = ""
        self.final: str | None = None
        self.model = ""

    def _model_event(self, e: dict[str, Any]) -> None:
        self.model_events.append(e)
        out = e.get("output") if isinstance(e.get("output"), dict) else {}
        choices = out.get("choices") if isinstance(out.get("choices"), list) else []
        msg = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
        calls = msg.get("tool_calls") if isinstance(msg, dict) else None
        for c in calls if isinstance(calls, list) else []:
            if isinstance(c, dict) and c.get("id") is not None:
                self.usage[str(c["id"])] = e

    def _agent_of(self, span: Any) -> tuple[str, str, str, int] | None:
        """(agent span, the id of the call that ran it, agent, depth) of an event's span."""
        found: tuple[str, str, str] | None = None
        depth, seen = 0, set()
        while isinstance(span, str) and span not in seen:
            seen.add(span)
            if span in self.agent_spans:
                depth += 1
                found = found or (span, *self.agent_spans[span])
            span = self.parent_span.get(span)
        return (*found, depth) if found else None

    def side_steps(self) -> dict[str, list[SourceStep]]:
        """The calls subagents made in their spans (not in the sample's messages), by the id
        of the call that ran the subagent."""
        main = {str((st.result or {}).get("call_id")) for st in self.steps}
        out: dict[str, list[SourceStep]] = {}
        for e in self.model_events:
            where = self._agent_of(e.get("span_id"))
            choices = (e.get("output") or {}).get("choices") if isinstance(e.get("output"), dict) else None
            msg = choices[0].get("message") if isinstance(choices, list) and choices and \
                isinstance(choices[0], dict) else None
            if where is None or not isinstance(msg, dict):
                continue
            content = self.resolve(msg.get("content"))
            calls = [c for c in msg.get("tool_calls") or [] if isinstance(c, dict)
                     and str(c.get("id")) not in main]  # a handoff's calls are in the messages
            for k, call in enumerate(calls):
                step = self._step(call, text_of(content) if k == 0 else "",
                                  _reasoning(content) if k == 0 else "", first=k == 0)
                step.sidechain = Sidechain(id=where[0], agent=where[2], depth=where[3])
                out.setdefault(where[1], []).append(step)
        return out

    def in_order(self) -> list[SourceStep]:
        """The main agent's steps, each followed by the steps of the subagent it ran."""
        children = self.side_steps()
        order: list[SourceStep] = []
        number: dict[str, int] = {}

        def emit(step: SourceStep, seen: frozenset[str]) -> None:
            cid = str((step.result or {}).get("call_id"))
            order.append(step)
            number[cid] = len(order)
            for child in children.pop(cid, []) if cid not in seen else []:
                assert child.sidechain is not None
                child.sidechain.parent_turn = number[cid]
                emit(child, seen | {cid})
        for step in self.steps:
            emit(step, frozenset())
        for rest in children.values():  # subagents whose call is not known
            order.extend(rest)
        return order

    def message(self, msg: Any) -> None:
        if not isinstance(msg, dict):
            self.unused["type:message:not an object"] += 1
            return
        role, content = msg.get("role"), self.resolve(msg.get("content"))
        if role == "system" and not self.system:
            self.system = text_of(content)
        elif role == "user" and not self.task:
            self.task = text_of(content)
        elif role == "assistant":
            self.assistant(msg, content)
        elif role == "tool":
            self.answer(msg, content)
        elif role not in ("system", "user"):
            self.unused[f"type:message:{role}"] += 1

    def assistant(self, msg: dict[str, Any], content: Any) -> None:
        text, reasoning = text_of(content), _reasoning(content)
        self.model = self.model or str(msg.get("model") or "")
        calls = [c for c in msg.get("tool_calls") or [] if isinstance(c, dict)]
        if not calls:
            self.final = text or self.final
            return
        for k, call in enumerate(calls):
            self.steps.append(self._step(call, text if k == 0 else "", reasoning if k == 0 else "",
                                         first=k == 0))
        self.final = None

    def _step(self, call: dict[str, Any], text: str, reasoning: str, first: bool) -> SourceStep:
        name = str(call.get("function") or "?")
        raw = self.resolve(call.get("arguments"))
        args = raw if isinstance(raw, dict) else {"value": raw}
        cid = str(call.get("id") or f"#{len(self.steps) + 1}")
        tool_ev, model_ev = self.tools.get(cid, {}), self.usage.get(cid, {})
        usage = (model_ev.get("output") or {}).get("usage") if isinstance(
            model_ev.get("output"), dict) else None
        usage = usage if isinstance(usage, dict) and first else {}
        started, done = seconds(model_ev.get("timestamp")), seconds(model_ev.get("completed"))
        step = SourceStep(
            tool=name, args=args, thought="\n\n".join(t for t in (reasoning, text) if t),
            response=text, mapped_as=_map_as(name, args),
            started_at=started or seconds(tool_ev.get("timestamp")),
            ended_at=seconds(tool_ev.get("completed")) or seconds(tool_ev.get("timestamp")),
            latency_s=max(done - started, 0.0) if first and started and done else 0.0,
            tokens_in=int(usage.get("input_tokens") or 0) + int(usage.get("input_tokens_cache_read") or 0),
            tokens_out=int(usage.get("output_tokens") or 0),
            parse_error=str(call["parse_error"]) if call.get("parse_error") else None,
        )
        if tool_ev:  # the tool's own result, for a call its message does not answer
            step.observation = text_of(self.resolve(tool_ev.get("result")))
        step.result = {"call_id": cid}
        return step

    def answer(self, msg: dict[str, Any], content: Any) -> None:
        cid = str(msg.get("tool_call_id") or "")
        step = next((s for s in reversed(self.steps) if (s.result or {}).get("call_id") == cid),
                    None) or next((s for s in self.steps if not (s.result or {}).get("answered")), None)
        if step is None:
            return
        error = msg.get("error") if isinstance(msg.get("error"), dict) else None
        step.observation = text_of(content) or (str(error.get("message") or "") if error else "")
        step.result = {**(step.result or {}), "answered": True, "is_error": error is not None}
        if error is not None:
            step.exit_code = 1


def _compaction_note(event: dict[str, Any]) -> str:
    """A compaction event in words (the event keeps no summary text)."""
    before, after = event.get("tokens_before"), event.get("tokens_after")
    sizes = f", {before} to {after} tokens" if before is not None and after is not None else ""
    return f"compaction ({event.get('type') or 'summary'}{sizes})"


def _mark_compactions(steps: list[SourceStep], compactions: list[tuple[float | None, str]]) -> None:
    """Each compaction on the last step that started before it (one before any: the first)."""
    for stamp, note in compactions:
        before = [st for st in steps if stamp is not None and st.started_at is not None
                  and st.started_at <= stamp]
        mark_compaction(before or steps[:1], note)


def _exit_status(sample: dict[str, Any]) -> str | None:
    limit, error = sample.get("limit"), sample.get("error")
    if isinstance(limit, dict) and limit.get("type"):
        return f"{limit['type']} limit exceeded"
    if isinstance(error, dict) and error.get("message"):
        return f"error: {' '.join(str(error['message']).split())[:200]}"
    return None


def parse(data: Any, name: str = "") -> Trajectory:
    """One sample of an Inspect log (``{"log": header, "sample": sample}``) as a
    :class:`Trajectory`."""
    if not isinstance(data, dict) or not _is_log(data.get("log")) or not isinstance(
            data.get("sample"), dict):
        raise BadInput("unknown shape", "not an Inspect sample (expected a sample object of a "
                       "log with 'eval.task' and 'eval.model')")
    log, sample = data["log"], data["sample"]
    messages = sample.get("messages")
    if not isinstance(messages, list):
        raise BadInput("unknown shape", "a sample without a 'messages' list")
    s = _Sample(sample)
    for msg in messages:
        s.message(msg)
    if not s.steps:
        raise BadInput("empty trajectory", "no tool calls")
    s.steps = s.in_order()
    _mark_compactions(s.steps, s.compactions)
    spec = log["eval"]
    task_input = s.resolve(sample.get("input"))
    task = text_of(task_input) if isinstance(task_input, str) else next(
        (text_of(m.get("content")) for m in task_input if isinstance(m, dict)
         and m.get("role") == "user"), s.task) if isinstance(task_input, list) else s.task
    out = sample.get("output") if isinstance(sample.get("output"), dict) else {}
    packages = spec.get("packages") if isinstance(spec.get("packages"), dict) else {}
    epoch = sample.get("epoch")
    instance = f"{spec['task']}:{sample.get('id')}" + (f":e{epoch}" if epoch not in (None, 1) else "")
    timed = any(st.ended_at is not None for st in s.steps)
    return Trajectory(
        steps=s.steps, agent=AGENT, agent_version=str(packages.get("inspect_ai") or ""),
        instance=instance, model=str(spec.get("model") or s.model or out.get("model") or ""),
        task_prompt=task or s.task, system_prompt=s.system, exit_status=_exit_status(sample),
        final_message=s.final or (text_of(out.get("completion")) or None),
        totals={"log_version": log.get("version"),
                "subagent_steps": sum(st.sidechain is not None for st in s.steps), "status": log.get("status"),
                "total_time": sample.get("total_time"), "working_time": sample.get("working_time"),
                "compactions": len(s.compactions) or None},
        started_at=s.steps[0].started_at, ended_at=s.steps[-1].ended_at,
        timing="recorded" if timed else "none",
        mode=str(spec.get("solver") or "eval"), repo=None, unused=dict(+s.unused),
    )
