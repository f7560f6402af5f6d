"""Run(A, E, tau, c): Ada's loop. One tool call per turn, turn bound N, recorded as it goes.

The prompt prefix is kept stable: the system prompt (role, tools, repository structure,
condition stance) never changes, history is append-only, and the volatile parts (state
channels, budget reminders, coach messages) ride in the newest user message. When the prompt
would overflow the model's context window, the oldest turns are left out of the request
(system prompt and task always kept) and the count is recorded on the turn.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from string import Template
from typing import Any, Protocol

from adakit import __version__, config
from adakit.apparatus.conditions import Condition
from adakit.apparatus.protocol import (
    THINKING_MIN_CHARS,
    THINKING_RULES,
    function_tools,
    parse_function_call,
    parse_reply,
    render_call,
    tool_grammar,
)
from adakit.apparatus.tasks import Task
from adakit.apparatus.tools import TOOL_SPECS, Toolbox
from adakit.apparatus.world import World
from adakit.llm.models import RETRYABLE_KINDS, CacheMiss, ModelError
from adakit.record import (
    ConditionInfo,
    End,
    Header,
    Injection,
    ModelCall,
    ModelInfo,
    ParseError,
    RunFile,
    RunWriter,
    TaskInfo,
    ToolCall,
    ToolMetrics,
    Turn,
    WorldInfo,
    read_run,
    shows_instruction,
    time_totals,
    truncate_torn,
)

CHARS_PER_TOKEN = 3.2  # conservative for code-heavy prompts; only used to plan the window
STATE_TOOLS = {"create_memory", "bookmark", "stash_conclusion"}
REPEAT_GUARDS = ("off", "note", "refuse")


class Backend(Protocol):
    """Anything that answers chat messages: an OpenAI-compatible model or a baseline policy."""

    spec: Any

    def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any: ...


class Coach(Protocol):
    """The coach-judge sidecar (RQ3): reviews a finished turn, may add a hint or reject."""

    def review(self, turn: Turn, context: dict[str, Any]) -> dict[str, Any]: ...

    def resume(self, turns: list[Turn], context: dict[str, Any]) -> None: ...


@dataclass
class RunConfig:
    """Per-run settings of the loop."""

    run_id: str
    study: str = ""
    turn_bound: int = 50
    seed: int = 0
    repeat: int = 0
    malformed_limit: int = 3
    tree_max_files: int = 200
    max_observation_chars: int = 12_000
    reply_max_tokens: int | None = None
    constrain_paths: bool = True
    #: weak-model aid (a deviation from the paper, "off" by default) for a call that exactly
    #: repeats an earlier call of the run: "note" runs it and adds a system note; "refuse" does
    #: not run it and answers with that note instead (recorded as error type "repeated"; like a
    #: malformed reply it counts toward ``malformed_limit`` mistakes in a row)
    repeat_guard: str = "off"
    #: weak-model aid (a deviation from the paper, off by default): a run that would end at
    #: the turn bound, or after ``malformed_limit`` mistakes in a row, without a finalized
    #: conclusion gets one closing turn. The last turn's observation carries
    #: :func:`close_text`; the closing reply may only call stash_conclusion (a grammar says so
    #: where the model is constrained; any other call is not run). The run keeps the reason
    #: that ended it and takes the closing call's conclusion, so judges have one to read.
    close_turn: bool = False
    #: the closing conclusion's length cap in characters (the grammar's cap on its
    #: ``content``; other free text keeps 400), with the closing reply's token budget raised
    #: to fit (:func:`close_reply_tokens`); recorded in the header as ``scaffold.close_chars``
    close_chars: int = 1200
    thinking_min_chars: int = THINKING_MIN_CHARS
    #: the grammar's thinking rule (:func:`adakit.apparatus.protocol.thinking_rule`): "prose"
    #: (one line, no backticks) or "free" (anything but "<"); recorded in the header's
    #: ``scaffold.grammar.thinking_rule`` when not "prose"
    thinking_rule: str = "prose"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.close_chars < 1:
            raise ValueError(f"close_chars must be at least 1, got {self.close_chars}")
        if self.repeat_guard not in REPEAT_GUARDS:
            raise ValueError(f"repeat_guard must be one of {', '.join(REPEAT_GUARDS)}, "
                             f"got {self.repeat_guard!r}")
        if self.thinking_rule not in THINKING_RULES:
            raise ValueError(f"thinking_rule must be one of {', '.join(THINKING_RULES)}, "
                             f"got {self.thinking_rule!r}")


#: the grammar's cap on other free text (titles, memories, questions)
TEXT_CHARS = 400


def close_text(close_chars: int) -> str:
    """The closing instruction of :attr:`RunConfig.close_turn` for a conclusion cap of
    ``close_chars`` (recorded in the run header's ``scaffold.close_turn`` whenever it is on,
    so a record says exactly what was shown)."""
    sentences = max(2, close_chars // 200)
    return (
        "This session is over: no more exploring. In your next reply call stash_conclusion with "
        "proceed_to_finalize=true and write your conclusion from the evidence you gathered, "
        f"saying what you could not confirm. Keep it to {sentences} sentences at most, under "
        f"{close_chars} characters: anything longer is cut off."
    )


#: The closing instruction at the default cap of 1,200 characters.
CLOSE_TEXT = close_text(1200)


#: stash_conclusion as a constrained closing reply may write it: without scope_description,
#: which small models filled with a copy of the conclusion
CLOSE_SPEC = replace(TOOL_SPECS["stash_conclusion"], params=tuple(
    p for p in TOOL_SPECS["stash_conclusion"].params if p.name != "scope_description"))
#: the only tool a closing turn offers (its grammar, or its function definitions)
CLOSE_TOOLS = {"stash_conclusion": CLOSE_SPEC}


def close_reply_tokens(reply_tokens: int, close_chars: int) -> int:
    """The closing reply's token budget: the usual one plus a token per three characters the
    closing conclusion may have beyond the usual free-text cap."""
    return reply_tokens + max(0, close_chars - TEXT_CHARS + 2) // 3


@lru_cache(maxsize=32)
def _template(name: str) -> Template:
    return Template(
        (config.PROMPTS / name)
        .read_text(encoding="utf-8")
        .replace("$", "$$")
        .replace("{", "${")
    )


def _fill(name: str, **values: str) -> str:
    return _template(name).safe_substitute(**values)


def describe_tools() -> str:
    """The tools section of the scaffold, rendered from the tool specs."""
    blocks = []
    for spec in TOOL_SPECS.values():
        lines = [f"## {spec.name} ({spec.abbr})", spec.description]
        for p in spec.params:
            kind = p.type if p.type != "enum" else " | ".join(p.choices)
            need = "required" if p.required else "optional"
            lines.append(f"- {p.name} ({kind}, {need}): {p.description}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def system_prompt(world: World, condition: Condition, tree_max_files: int = 200) -> str:
    """The stable system prompt for a world under a condition."""
    stance = f"\n{condition.stance.strip()}\n" if condition.stance.strip() else ""
    return _fill(
        "system.txt",
        tools=describe_tools(),
        world=world.name,
        tree=world.tree(max_files=tree_max_files),
        stance=stance,
    ).strip()


def first_message(task: Task, condition: Condition, state_text: str) -> str:
    """The task message that opens the run."""
    budget = ""
    if condition.budget:
        budget = "\n" + _fill("budget_block.txt", budget=str(condition.budget)).strip() + "\n"
    return _fill("first_turn.txt", task=task.prompt, budget=budget, state=state_text).strip()


def observation_message(tool: str, observation: str, injected: list[Injection], state_text: str) -> str:
    """The user message carrying a turn's result, injections and the current state."""
    extra = "\n".join(f"[{i.source.upper()}] {i.text}" for i in injected)
    return _fill(
        "observation.txt",
        tool=tool,
        observation=observation,
        injected=("\n" + extra) if extra else "",
        state=state_text,
    ).strip()


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    """A cheap upper estimate of a prompt's token count."""
    return int(sum(len(m.get("content") or "") + 16 for m in messages) / CHARS_PER_TOKEN) + 8


def fit_window(
    messages: list[dict[str, Any]], context_window: int | None, reply_tokens: int
) -> tuple[list[dict[str, Any]], int] | None:
    """Leave out the oldest turn pairs until the prompt fits; None if even the core does not.

    ``messages[0]`` (system) and ``messages[1]`` (task) are always kept, and so is the newest
    turn pair (the last reply and the current observation with the state channels).
    """
    if not context_window:
        return messages, 0
    limit = context_window - reply_tokens
    if estimate_tokens(messages) <= limit:
        return messages, 0
    system, task, body = messages[0], messages[1], messages[2:]
    while len(body) > 2:
        body = body[2:]  # one (assistant, user) pair
        dropped = len(messages) - 2 - len(body)
        note = (
            f"\n\n[{dropped} earlier messages were left out to fit the context window; your "
            "MEMORY, BOOKMARK and CONCLUSION channels still hold what you kept.]"
        )
        window = [system, {"role": "user", "content": task["content"] + note}, *body]
        if estimate_tokens(window) <= limit:
            return window, dropped
    return None


@dataclass
class LaunchContext:
    """Everything a run needs besides its config: the agent's parts and the environment."""

    world: World
    task: Task
    condition: Condition
    backend: Backend
    index: Any = None
    hint_model: Callable[[list[dict[str, Any]]], tuple[str, ModelCall]] | None = None
    coach: Coach | None = None
    world_info: WorldInfo | None = None


def hint_model_from(backend: Backend, max_tokens: int = 300) -> Callable[[list[dict[str, Any]]], tuple[str, ModelCall]]:
    """Wrap a chat backend as the hint model behind get_hint_on_snippet (calls are recorded)."""

    def call(messages: list[dict[str, Any]]) -> tuple[str, ModelCall]:
        c = backend.complete(messages, max_tokens=max_tokens)
        return c.text, ModelCall(
            purpose="hint",
            model=backend.spec.name,
            latency_s=c.latency_s,
            tokens_in=c.tokens_in,
            tokens_out=c.tokens_out,
            cached=c.cached,
        )

    return call


def _model_info(spec: Any) -> ModelInfo:
    if hasattr(spec, "model_info"):
        return spec.model_info()
    constrained = getattr(spec, "constrain", "none") not in (None, "none", False)
    return ModelInfo(
        name=spec.name,
        kind=getattr(spec, "kind", "llm"),
        model_id=getattr(spec, "model_id", "") or "",
        base_url=getattr(spec, "base_url", None),
        api_key_env=getattr(spec, "api_key_env", None),
        temperature=getattr(spec, "temperature", None),
        max_tokens=getattr(spec, "max_tokens", None),
        context_window=getattr(spec, "context_window", None),
        mode=getattr(spec, "mode", "xml") or "xml",
        constrained=constrained,
    )


def scaffold_digest() -> str:
    """sha256 of everything the scaffold shows a model: prompt templates and tool specs."""
    digest = hashlib.sha256()
    for path in sorted(config.PROMPTS.rglob("*.txt")):
        digest.update(path.relative_to(config.PROMPTS).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    digest.update(describe_tools().encode())
    return digest.hexdigest()


def make_header(
    ctx: LaunchContext, cfg: RunConfig, system: str, grammar: dict[str, Any] | None = None
) -> Header:
    """The header record of a run; ``scaffold`` says which scaffold options shaped it."""
    w = ctx.world
    scaffold = {
        "prompts_sha256": scaffold_digest(),
        "tree_max_files": cfg.tree_max_files,
        "max_observation_chars": cfg.max_observation_chars,
        "reply_max_tokens": cfg.reply_max_tokens,
        "malformed_limit": cfg.malformed_limit,
        "repeat_guard": cfg.repeat_guard,
        "grammar": grammar,
    }
    if cfg.close_turn:  # only when on, so headers of runs without it stay as they were
        scaffold["close_turn"] = close_text(cfg.close_chars)
        scaffold["close_chars"] = cfg.close_chars
    return Header(
        run_id=cfg.run_id,
        study=cfg.study,
        model=_model_info(ctx.backend.spec),
        world=ctx.world_info or WorldInfo(name=w.name, version=w.version, language=w.language),
        task=TaskInfo(family=ctx.task.family, target=ctx.task.target, prompt=ctx.task.prompt),
        condition=ConditionInfo(
            name=ctx.condition.name, budget=ctx.condition.budget, params=dict(ctx.condition.params)
        ),
        turn_bound=cfg.turn_bound,
        seed=cfg.seed,
        repeat=cfg.repeat,
        adakit_version=__version__,
        system_prompt=system,
        scaffold=scaffold,
    )


def _same_run(a: Header, b: Header) -> bool:
    keys = ("run_id", "turn_bound", "seed", "system_prompt")
    return all(getattr(a, k) == getattr(b, k) for k in keys) and (
        a.model.name,
        a.world.name,
        a.task.family,
        a.condition.name,
    ) == (b.model.name, b.world.name, b.task.family, b.condition.name)


class Run:
    """One launch of Ada; ``execute()`` runs (or resumes) it and returns the finished file."""

    def __init__(
        self,
        ctx: LaunchContext,
        cfg: RunConfig,
        path: str | Path,
        on_turn: Callable[[Turn], None] | None = None,
    ) -> None:
        self.on_turn = on_turn
        self.ctx = ctx
        self.cfg = cfg
        self.path = Path(path)
        self.toolbox = Toolbox(ctx.world, index=ctx.index, hint_model=ctx.hint_model)
        self.spec = ctx.backend.spec
        self.mode = getattr(self.spec, "mode", "xml") or "xml"
        self.constrain = getattr(self.spec, "constrain", "none") not in (None, "none", False)
        self.grammar: str | None = None
        self.close_grammar: str | None = None
        self.grammar_info: dict[str, Any] | None = None
        if self.constrain:
            files = ctx.world.source_files() if cfg.constrain_paths else []
            paths = files if 0 < len(files) <= 400 else None
            thinking_chars = getattr(self.spec, "thinking_chars", None) or 300
            self.grammar = tool_grammar(
                TOOL_SPECS, paths, thinking_chars=thinking_chars, text_chars=TEXT_CHARS,
                thinking_min_chars=cfg.thinking_min_chars, thinking=cfg.thinking_rule,
            )
            self.close_grammar = tool_grammar(
                CLOSE_TOOLS, paths,
                thinking_chars=thinking_chars, text_chars=TEXT_CHARS,
                thinking_min_chars=cfg.thinking_min_chars, text_caps={"content": cfg.close_chars},
                thinking=cfg.thinking_rule,
            ) if cfg.close_turn else None
            self.grammar_info = {
                "thinking_min_chars": cfg.thinking_min_chars,
                "thinking_chars": thinking_chars,
                "paths": len(paths) if paths else None,
            }
            if cfg.thinking_rule != "prose":  # only when not the default: older headers stay
                self.grammar_info["thinking_rule"] = cfg.thinking_rule
        self.reply_tokens = cfg.reply_max_tokens or getattr(self.spec, "max_tokens", None) or 1024
        self.close_tokens = close_reply_tokens(self.reply_tokens, cfg.close_chars)
        self.close_text = close_text(cfg.close_chars)
        self.messages: list[dict[str, Any]] = []
        self.turns: list[Turn] = []
        self.mistakes = 0
        self.conclusion: tuple[str | None, str | None] = (None, None)
        self.started_at = time.time()  # the header's launch time (the first one on a resume)

    # ------------------------------------------------------------------ resume

    def _start_or_resume(self, header: Header) -> RunWriter:
        if self.path.exists():
            truncate_torn(self.path)
            try:
                old = read_run(self.path)
            except ValueError:
                old = None
            if old is not None and old.end is not None and _same_run(old.header, header):
                raise FileExistsError(f"{self.path} is already finished")
            if old is not None and _same_run(old.header, header):
                self.started_at = old.header.started_at
                self._replay(old)
                return RunWriter(self.path)
            # a different run under the same id (changed settings): set it aside, never delete
            stale = self.path.with_suffix(f".stale-{int(time.time())}.jsonl.bak")
            self.path.rename(stale)
        writer = RunWriter(self.path)
        self.started_at = header.started_at
        writer.write(header)
        self.messages = self._opening(header.system_prompt)
        return writer

    def _opening(self, system: str) -> list[dict[str, Any]]:
        """The system prompt and the task message that every request starts with."""
        task = first_message(self.ctx.task, self.ctx.condition, self.toolbox.state.render())
        return [{"role": "system", "content": system}, {"role": "user", "content": task}]

    def _replay(self, old: RunFile) -> None:
        """Rebuild messages, working state and counters from the recorded turns."""
        self.messages = self._opening(old.header.system_prompt)
        for t in old.turns:
            if t.call and t.call.tool in STATE_TOOLS and t.metrics.error_type is None:
                self.toolbox.execute(t.call.tool, dict(t.call.params))
            self._after_turn_bookkeeping(t)
        if self.ctx.coach is not None:
            self.ctx.coach.resume(old.turns, self._coach_context())

    def _after_turn_bookkeeping(self, t: Turn) -> None:
        self.turns.append(t)
        # a malformed reply and a refused exact repeat both count as a mistake in a row
        stuck = t.parse_error is not None or t.metrics.error_type == "repeated"
        self.mistakes = self.mistakes + 1 if stuck else 0
        if t.call and t.call.tool == "stash_conclusion" and t.metrics.error_type is None:
            self.conclusion = (t.call.params.get("content"), t.call.params.get("title"))
        tool = t.call.tool if t.call else "error"
        self.messages.append({"role": "assistant", "content": t.raw_text})
        self.messages.append(
            {
                "role": "user",
                "content": observation_message(tool, t.observation, t.injected, self.toolbox.state.render()),
            }
        )

    def _coach_context(self) -> dict[str, Any]:
        return {
            "task": self.ctx.task,
            "world": self.ctx.world,
            "condition": self.ctx.condition,
            "turn_bound": self.cfg.turn_bound,
        }

    # ------------------------------------------------------------------ the loop

    def execute(self) -> RunFile:
        """Run until finalize, the turn bound, too many malformed replies or a model error."""
        system = system_prompt(self.ctx.world, self.ctx.condition, self.cfg.tree_max_files)
        header = make_header(self.ctx, self.cfg, system, self.grammar_info)
        writer = self._start_or_resume(header)
        end: End | None = None
        try:
            if self.turns and self._closing(len(self.turns) - 1):  # resumed after closing
                end = self._end(self._closed_reason(self.turns[-1].turn))
            elif self.turns and self.turns[-1].metrics.finalize and not self._rejected(self.turns[-1]):
                end = self._end("finalize")
            while end is None:
                n = len(self.turns) + 1
                closing = self._closing(len(self.turns))
                if n > self.cfg.turn_bound and not closing:
                    end = self._end("turn_bound")
                    break
                turn, end = self._turn(n, closing=closing)
                if turn is not None:
                    writer.write(turn)
                    self._after_turn_bookkeeping(turn)
                    if self.on_turn is not None:
                        self.on_turn(turn)
                if end is None:
                    if closing:
                        end = self._end(self._closed_reason(n))
                    elif turn is not None and turn.metrics.finalize and not self._rejected(turn):
                        end = self._end("finalize")
                    elif self.mistakes >= self.cfg.malformed_limit and not self._closing(len(self.turns)):
                        end = self._end("malformed_limit")
            writer.write(end)
        finally:
            writer.close()
        return read_run(self.path)

    def _same_call(self, call: ToolCall) -> int | None:
        """The first earlier turn that made exactly this call (same tool and parameters)."""
        for t in self.turns:
            if t.call is not None and t.call.tool == call.tool and t.call.params == call.params:
                return t.turn
        return None

    def _closing(self, index: int) -> bool:
        """Whether turn ``index`` (0-based; ``len(self.turns)`` is the next one) is a closing
        turn: the turn before it showed the closing instruction."""
        return 1 <= index <= len(self.turns) and shows_instruction(self.turns[index - 1], self.close_text)

    def _closed_reason(self, n: int) -> str:
        """What ended a run whose closing turn was turn ``n``."""
        return "turn_bound" if n > self.cfg.turn_bound else "malformed_limit"

    @staticmethod
    def _rejected(turn: Turn) -> bool:
        return bool(turn.coach and turn.coach.get("decision") == "REJECT")

    def _end(self, reason: str, error: str | None = None, failure: str | None = None) -> End:
        content, title = self.conclusion
        now = time.time()
        return End(
            reason=reason,
            ended_at=now,
            conclusion=content,
            conclusion_title=title,
            error=error,
            failure=failure,
            retryable=reason == "model_error" and failure in RETRYABLE_KINDS,
            totals={
                "turns": len(self.turns),
                "tokens_in": sum(t.tokens_in for t in self.turns),
                "tokens_out": sum(t.tokens_out for t in self.turns),
                "cost_usd": _sum_cost(self.turns),
                "errors": sum(1 for t in self.turns if t.metrics.error_type),
                "cache_hits": sum(1 for t in self.turns if t.cached),
                "dropped_messages_max": max((t.dropped_messages for t in self.turns), default=0),
                **time_totals(self.turns, self.started_at, now),
            },
        )

    def _turn(self, n: int, closing: bool = False) -> tuple[Turn | None, End | None]:
        started = time.time()
        fitted = fit_window(self.messages, getattr(self.spec, "context_window", None), self.reply_tokens)
        if fitted is None:
            return None, self._end("context_overflow", "the prompt does not fit the context window")
        window, dropped = fitted
        kwargs: dict[str, Any] = {"max_tokens": self.close_tokens if closing else self.reply_tokens}
        if self.grammar:
            kwargs["grammar"] = self.close_grammar if closing and self.close_grammar else self.grammar
        if self.mode == "function":  # the closing turn offers only the tool it asks for
            kwargs["tools"] = function_tools(
                CLOSE_TOOLS if closing else TOOL_SPECS)
        try:
            completion = self.ctx.backend.complete(window, **kwargs)
        except CacheMiss:
            raise  # a replay that leaves the recording stops loudly; the run stays resumable
        except ModelError as exc:
            if exc.kind == "context_overflow":
                return None, self._end("context_overflow", f"{type(exc).__name__}: {exc}")
            return None, self._end("model_error", f"{type(exc).__name__}: {exc}", exc.kind)
        except Exception as exc:  # transport or policy failures: end the run, keep the record
            return None, self._end("model_error", f"{type(exc).__name__}: {exc}", "error")
        text = completion.text or ""
        if self.mode == "function" and getattr(completion, "tool_calls", None):
            calls = completion.tool_calls
            if len(calls) > 1:
                parsed_call: ToolCall | ParseError = ParseError(
                    kind="multiple_tools",
                    message=f"Only one tool per message is allowed; this reply made {len(calls)} calls.",
                )
            else:
                parsed_call = parse_function_call(calls[0]["name"], calls[0]["arguments"], TOOL_SPECS)
            thinking = text.strip()
            if isinstance(parsed_call, ToolCall):
                text = render_call(parsed_call, thinking)
                call, perr = parsed_call, None
            else:
                call, perr = None, parsed_call
        else:
            parsed = parse_reply(text, TOOL_SPECS)
            thinking, call, perr = parsed.thinking, parsed.call, parsed.error
        if closing and not self.grammar and call is not None and call.tool == "stash_conclusion":
            # the closing instruction says a longer conclusion is cut off; without a grammar
            # to enforce it, the cut happens here (a constrained reply cannot exceed it)
            content = str(call.params.get("content", ""))
            if len(content) > self.cfg.close_chars:
                call = call.model_copy(update={"params": {
                    **call.params, "content": content[: self.cfg.close_chars]}})

        injected: list[Injection] = []
        state_changes: list[dict[str, Any]] = []
        model_calls: list[ModelCall] = []
        repeat_of = (self._same_call(call) if call is not None and self.cfg.repeat_guard != "off"
                     and not closing else None)
        if perr is not None:
            count = self.mistakes + 1
            observation = _fill(
                "malformed.txt", message=perr.message, count=str(count), limit=str(self.cfg.malformed_limit)
            ).strip()
            metrics = ToolMetrics(error_type="unknown_tool" if perr.kind == "unknown_tool" else "malformed")
        elif closing and call is not None and call.tool != "stash_conclusion":
            observation = ("Not run: the session is over and only stash_conclusion was asked for; "
                           "the run ends without a conclusion.")
            metrics = ToolMetrics(tool=TOOL_SPECS[call.tool].abbr, error_type="malformed")
        elif repeat_of is not None and self.cfg.repeat_guard == "refuse":
            assert call is not None
            observation = _fill(
                "repeat_refused.txt", turn=str(repeat_of), count=str(self.mistakes + 1),
                limit=str(self.cfg.malformed_limit),
            ).strip()
            metrics = ToolMetrics(tool=TOOL_SPECS[call.tool].abbr, error_type="repeated")
        else:
            assert call is not None
            result = self.toolbox.execute(call.tool, dict(call.params))
            observation = result.text
            metrics = result.metrics
            if len(observation) > self.cfg.max_observation_chars:
                cut = self.cfg.max_observation_chars
                kept = observation[:cut].rsplit("\n", 1)[0]  # whole lines only
                observation = (
                    kept + f"\n[... output cut at {cut} characters; ask for a smaller range or block.]"
                )
                metrics = trim_to_shown(metrics, kept)
            state_changes = list(result.state_changes)
            model_calls = list(result.model_calls)

        turn = Turn(
            turn=n,
            started_at=started,
            ended_at=time.time(),
            latency_s=completion.latency_s,
            tokens_in=completion.tokens_in,
            tokens_out=completion.tokens_out,
            tokens_reused=getattr(completion, "tokens_reused", None),
            cost_usd=completion.cost_usd,
            cached=completion.cached,
            constrained=bool(getattr(completion, "constrained", False) or self.grammar),
            raw_text=text,
            thinking=thinking,
            call=call,
            parse_error=perr,
            observation=observation,
            metrics=metrics,
            state_changes=state_changes,
            model_calls=model_calls,
            dropped_messages=dropped,
        )
        if self.ctx.coach is not None and not closing:
            try:
                decision = self.ctx.coach.review(turn, {**self._coach_context(), "history": self.turns})
            except ModelError as exc:  # the coach cannot be asked at all (no key, refused key)
                return None, self._end("model_error", f"coach: {type(exc).__name__}: {exc}", exc.kind)
            turn.coach = decision
            if decision.get("decision") in ("HINT", "REJECT") and decision.get("message"):
                if decision["decision"] == "REJECT":
                    injected.append(Injection(source="system", text=_fill("rejected.txt").strip()))
                injected.append(Injection(source="coach", text=str(decision["message"])))
        if repeat_of is not None and self.cfg.repeat_guard == "note":
            injected.append(Injection(source="system", text=_fill(
                "repeat_notice.txt", turn=str(repeat_of)).strip()))
        finalize = bool(turn.metrics.finalize) and not self._rejected(turn)
        if not finalize and not closing:
            reminder = self.ctx.condition.reminder_after(n)
            if reminder:
                injected.append(Injection(source="reminder", text=reminder))
            stuck = perr is not None or metrics.error_type == "repeated"
            if self.cfg.close_turn and (
                    n >= self.cfg.turn_bound
                    or (stuck and self.mistakes + 1 >= self.cfg.malformed_limit)):
                injected.append(Injection(source="system", text=self.close_text))
        turn.injected = injected
        turn.ended_at = time.time()
        return turn, None


_NUMBERED = re.compile(r"^\s*(\d+): ", re.M)


def trim_to_shown(metrics: ToolMetrics, shown: str) -> ToolMetrics:
    """Metrics whose line ranges keep only the numbered lines that survive in ``shown``.

    When an observation is cut to fit the model's budget, the lenses must not count lines
    the model never saw.
    """
    if not metrics.ranges:
        return metrics
    numbers = {int(n) for n in _NUMBERED.findall(shown)}
    ranges: list[tuple[int, int]] = []
    for a, b in metrics.ranges:
        inside = [n for n in numbers if a <= n <= b]
        if inside:
            ranges.append((a, max(inside)))
    viewed = sum(b - a + 1 for a, b in ranges)
    return metrics.model_copy(update={"ranges": ranges, "lines_viewed": viewed})


def _sum_cost(turns: list[Turn]) -> float | None:
    costs = [t.cost_usd for t in turns if t.cost_usd is not None]
    return round(sum(costs), 6) if costs else None
