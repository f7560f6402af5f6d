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
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from string import Template
from typing import Any, Protocol

from adakit import __version__, config
from adakit.apparatus.conditions import Condition
from adakit.apparatus.demonstration import DEMONSTRATIONS, demonstration_text
from adakit.apparatus.ledger import LEDGER_CHARS, LEDGER_MIN_CHARS, Ledger
from adakit.apparatus.native import (
    FORMAT_SECTION,
    TOOL_FORMATS,
    native_grammar,
    native_system,
    parse_native_reply,
    render_native_call,
)
from adakit.apparatus.protocol import (
    THINKING_MIN_CHARS,
    THINKING_RULES,
    extract_thinking,
    function_tools,
    parse_function_call,
    parse_reply,
    render_call,
    tool_grammar,
)
from adakit.apparatus.suggest import suggestion_text
from adakit.apparatus.tasks import Task
from adakit.apparatus.tools import NAME_HINTS, TOOL_SPECS, Toolbox, ToolSpec
from adakit.apparatus.world import World
from adakit.llm.models import RETRYABLE_KINDS, CacheMiss, ModelError
from adakit.record import (
    DRAW,
    ConditionInfo,
    End,
    ForkInfo,
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
REPEAT_GUARDS = ("off", "note", "refuse", "suggest")
#: the ways old turns leave a prompt that outgrows the context window (``window_drop``)
WINDOW_DROPS = ("pair", "stable")


class Backend(Protocol):
    """Anything that answers chat messages: an OpenAI-compatible model or a baseline policy."""

    spec: Any

    def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any: ...


class Coach(Protocol):
    """The coach-judge sidecar (RQ3): reviews a finished turn, may add a hint or reject."""

    def review(self, turn: Turn, context: dict[str, Any]) -> dict[str, Any]: ...

    def resume(self, turns: list[Turn], context: dict[str, Any]) -> None: ...


#: What earlier replies keep of their thinking in the conversation (RunConfig.history_thinking).
HISTORY_THINKING = ("keep", "drop")


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
    #: malformed reply it counts toward ``malformed_limit`` mistakes in a row); "suggest" refuses
    #: it the same way and adds up to three calls the run has not made
    #: (:mod:`adakit.apparatus.suggest`)
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
    #: weak-model aid (a deviation from the paper, 0 = off by default): a sampled call that
    #: exactly repeats an earlier call of the run is drawn again, up to this many times, at a
    #: temperature ``redraw_step`` higher per redraw and another seed, before the conversation
    #: sees it. Every draw is recorded in the turn's ``model_calls`` (purpose "draw"); the
    #: conversation keeps only the kept draw; when the last redraw still repeats,
    #: ``repeat_guard`` answers it as without redraws. Not on closing turns.
    redraw_repeats: int = 0
    redraw_step: float = 0.2
    #: with ``redraw_repeats``: each redraw's request also carries a note after the last
    #: observation naming the repeated turn (and, under ``repeat_guard: suggest``, calls not made
    #: yet). The note is sent with the redraws only; the conversation never keeps it.
    redraw_note: bool = False
    #: how old turns leave a prompt that outgrows the model's context window: "pair" (the
    #: oldest pair, each turn, just enough to fit: every such turn changes the prompt's start,
    #: so a local server evaluates it all again) or "stable" (enough pairs at once to bring it
    #: within ``STABLE_FILL`` of the room, then the same ones while it fits: the prefix stays
    #: cached). Recorded as ``scaffold.window_drop`` when "stable".
    window_drop: str = "pair"
    #: weak-model aid (a deviation from the paper, off by default): the working state shows a
    #: LEDGER channel of what the run has done so far (:mod:`adakit.apparatus.ledger`), within
    #: ``ledger_chars`` characters
    ledger: bool = False
    ledger_chars: int = LEDGER_CHARS
    thinking_min_chars: int = THINKING_MIN_CHARS
    #: the grammar's thinking rule (:func:`adakit.apparatus.protocol.thinking_rule`): "prose"
    #: (one line, no backticks) or "free" (anything but "<"); recorded in the header's
    #: ``scaffold.grammar.thinking_rule`` when not "prose"
    thinking_rule: str = "prose"
    #: weak-model aid (a deviation from the paper, "off" by default): "toy" appends a worked
    #: demonstration on a toy repository to the system prompt
    #: (:mod:`adakit.apparatus.demonstration`); recorded as ``scaffold.demonstration`` when on
    demonstration: str = "off"
    #: where explore_code takes the names it offers when a look-up lacks symbol_name
    #: (:data:`adakit.apparatus.tools.NAME_HINTS`): "code" (the parse tree; the default) or
    #: "line" (every word of the raw line, comments included: how local-v3 was recorded).
    #: Recorded as ``scaffold.name_hints`` when "code"; a header without it had "line".
    name_hints: str = "code"
    #: the form of a tool call (:data:`adakit.apparatus.native.TOOL_FORMATS`): "xml" (Ada's
    #: tags) or "native" (a JSON call in ``<tool_call>`` tags, as a small model's chat template
    #: teaches it, the tools listed by that template; :mod:`adakit.apparatus.native`).
    #: Recorded as ``scaffold.tool_format`` when "native".
    tool_format: str = "xml"
    #: weak-model aid (a deviation from the paper, 0 = off by default): once the run has looked
    #: at this many distinct files (outlined, read or looked up in by calls that succeeded),
    #: every later observation carries a system note (``prompts/conclude_nudge.txt``) naming
    #: them and asking whether they answer the task: if so, finalize now; if not, say what is
    #: missing. All tools stay open, so finalizing stays the model's choice. Recorded as
    #: ``scaffold.conclude_nudge`` when on.
    conclude_nudge: int = 0
    #: what an earlier reply keeps of its thinking in the conversation
    #: (:data:`HISTORY_THINKING`): "keep" (all of it; the paper's way) or "drop" (only the
    #: call: a weak-model aid, a deviation, since small models copy their last thought word for
    #: word instead of thinking about the newest result). The run record keeps every thought
    #: either way. Recorded as ``scaffold.history_thinking`` when "drop".
    history_thinking: str = "keep"
    #: weak-model aid (a deviation from the paper, 0 = off by default): each time the run has
    #: looked at another this many distinct files (N, 2N, ...), the result carries a checkpoint
    #: note (``prompts/checkpoint.txt``) and the next reply may only call stash_conclusion (a
    #: grammar says so where the model is constrained), with ``proceed_to_finalize`` left to
    #: the model: true ends the run by ``finalize``, false stashes an interim conclusion and the
    #: run goes on. Recorded as ``scaffold.conclude_checkpoint`` when on.
    conclude_checkpoint: int = 0
    #: weak-model aid (a deviation from the paper, 0 = off by default): a checkpoint (as
    #: above) also comes once this many turns have passed since the last one, or since the
    #: start, however few files they looked at (runs that only bookmark otherwise never reach
    #: one). The file count of ``conclude_checkpoint`` then starts again from that checkpoint.
    #: Recorded as ``scaffold.checkpoint_turns`` when on.
    checkpoint_turns: int = 0
    #: weak-model aid (a deviation from the paper, 0 = off by default): after this many
    #: cognitive calls in a row (bookmark, create_memory, get_hint_on_snippet), the result
    #: carries a note (``prompts/navigate.txt``) and the next reply may only call a navigation
    #: tool (overview, peek, explore; a grammar says so where the model is constrained), so a
    #: model that writes note after note goes back to the code. Recorded as
    #: ``scaffold.cognitive_streak`` when on.
    cognitive_streak: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.close_chars < 1:
            raise ValueError(f"close_chars must be at least 1, got {self.close_chars}")
        for name, choices in _CHOICES.items():
            value = getattr(self, name)
            if value not in choices:
                raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
        for name in ("redraw_repeats", "conclude_nudge", "conclude_checkpoint", "checkpoint_turns",
                     "cognitive_streak"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 (off) or more, got {getattr(self, name)}")
        if self.redraw_step < 0:
            raise ValueError(f"redraw_step must not be negative, got {self.redraw_step}")
        if self.redraw_note and not self.redraw_repeats:
            raise ValueError("redraw_note needs redraw_repeats of 1 or more")
        if self.ledger_chars < LEDGER_MIN_CHARS:
            raise ValueError(f"ledger_chars must be at least {LEDGER_MIN_CHARS}, got {self.ledger_chars}")


#: The settings of :class:`RunConfig` that take one of a few words, and those words.
_CHOICES: dict[str, tuple[str, ...]] = {
    "repeat_guard": REPEAT_GUARDS, "window_drop": WINDOW_DROPS, "demonstration": DEMONSTRATIONS,
    "name_hints": NAME_HINTS, "history_thinking": HISTORY_THINKING, "tool_format": TOOL_FORMATS,
    "thinking_rule": THINKING_RULES,
}

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


def system_prompt(world: World, condition: Condition, tree_max_files: int = 200,
                  demonstration: str = "off", tool_format: str = "xml") -> str:
    """The stable system prompt for a world under a condition, with the worked
    demonstration ``demonstration`` (one of :data:`DEMONSTRATIONS`) at its end when not "off",
    its calls written in ``tool_format``."""
    stance = f"\n{condition.stance.strip()}\n" if condition.stance.strip() else ""
    text = _fill(
        "system.txt",
        tools=describe_tools(),
        world=world.name,
        tree=world.tree(max_files=tree_max_files),
        stance=stance,
    ).strip()
    native = tool_format == "native"
    if native:
        text = native_system(text, _fill(FORMAT_SECTION))
    demo = demonstration_text(demonstration, render=render_native_call if native else render_call)
    return text + "\n\n" + demo if demo else text


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


#: ``window_drop: stable`` leaves out old turn pairs until the prompt is within this share of
#: the room, so that the following turns fit again without leaving out more
STABLE_FILL = 0.6


def fit_window(
    messages: list[dict[str, Any]], context_window: int | None, reply_tokens: int,
    start: int = 0, fill: float = 1.0,
) -> tuple[list[dict[str, Any]], int] | None:
    """Leave out the oldest turn pairs until the prompt fits; None if even the core does not.

    ``messages[0]`` (system) and ``messages[1]`` (task) are always kept, and so is the newest
    turn pair (the last reply and the current observation with the state channels). ``start``:
    the messages an earlier turn already left out, kept out while the prompt fits; once it no
    longer does, pairs are left out until it is within ``fill`` of the room (1.0: just fits).
    """
    if not context_window:
        return messages, 0
    limit = context_window - reply_tokens
    system, task, body = messages[0], messages[1], messages[2:]

    def window_of(body: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        dropped = len(messages) - 2 - len(body)
        if not dropped:
            return messages, 0
        note = (
            f"\n\n[{dropped} earlier messages were left out to fit the context window; your "
            "MEMORY, BOOKMARK and CONCLUSION channels still hold what you kept.]"
        )
        return [system, {"role": "user", "content": task["content"] + note}, *body], dropped

    start = min(start - start % 2, max(0, len(body) - 2))
    window, dropped = window_of(body[start:])
    if estimate_tokens(window) <= limit:
        return window, dropped
    body = body[start:]
    while len(body) > 2:
        body = body[2:]  # one (assistant, user) pair
        window, dropped = window_of(body)
        if estimate_tokens(window) <= limit * fill:
            return window, dropped
    return (window, dropped) if estimate_tokens(window) <= limit else None


@dataclass
class Prefix:
    """A fork's start (:mod:`adakit.study.fork`): the parent's first turns, written into the
    fork's new file and then replayed the way a resume replays a recorded history, so no model
    is asked for them. The fork opens with the parent's system prompt and task message."""

    #: the parent's header (its system prompt, launch time)
    header: Header
    #: the parent's first K turns, the change's notes already added to the last one
    turns: list[Turn]
    #: the condition the parent opened under (its task message)
    opening: Condition
    forked_from: ForkInfo
    #: tools no longer offered after the prefix (refused, and left out of the grammar)
    without: frozenset[str] = frozenset()


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
    #: a fork's recorded start; None for a run from its first turn
    prefix: Prefix | None = None


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


#: Prompt templates shown only under one option (file -> whether a RunConfig shows it): a
#: run without the option never sees them, so its digest leaves them out and stays what it
#: was before they existed.
OPTION_PROMPTS: dict[str, Callable[[RunConfig], bool]] = {
    "redraw_note.txt": lambda cfg: cfg.redraw_note,
    FORMAT_SECTION: lambda cfg: cfg.tool_format == "native",
    "conclude_nudge.txt": lambda cfg: cfg.conclude_nudge > 0,
    "checkpoint.txt": lambda cfg: cfg.conclude_checkpoint > 0 or cfg.checkpoint_turns > 0,
    "navigate.txt": lambda cfg: cfg.cognitive_streak > 0,
}


def scaffold_digest(cfg: RunConfig | None = None) -> str:
    """sha256 of everything the scaffold can show a model run under ``cfg``: prompt templates
    and tool specs (an option's own template counts only when ``cfg`` turns it on)."""
    digest = hashlib.sha256()
    for path in sorted(config.PROMPTS.rglob("*.txt")):
        shows = OPTION_PROMPTS.get(path.relative_to(config.PROMPTS).as_posix())
        if shows is not None and (cfg is None or not shows(cfg)):
            continue
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
        "prompts_sha256": scaffold_digest(cfg),
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
    if cfg.redraw_repeats:  # the same: recorded only when on
        scaffold["redraw_repeats"] = cfg.redraw_repeats
        scaffold["redraw_step"] = cfg.redraw_step
        if cfg.redraw_note:
            scaffold["redraw_note"] = True
    if cfg.window_drop != "pair":
        scaffold["window_drop"] = cfg.window_drop
    if cfg.demonstration != "off":
        scaffold["demonstration"] = cfg.demonstration
    if cfg.ledger:
        scaffold["ledger"] = True
        scaffold["ledger_chars"] = cfg.ledger_chars
    if cfg.name_hints != "line":  # headers recorded before the setting existed had "line"
        scaffold["name_hints"] = cfg.name_hints
    if cfg.tool_format != "xml":
        scaffold["tool_format"] = cfg.tool_format
    if cfg.conclude_nudge:
        scaffold["conclude_nudge"] = cfg.conclude_nudge
    if cfg.history_thinking != "keep":
        scaffold["history_thinking"] = cfg.history_thinking
    if cfg.conclude_checkpoint:
        scaffold["conclude_checkpoint"] = cfg.conclude_checkpoint
    if cfg.checkpoint_turns:
        scaffold["checkpoint_turns"] = cfg.checkpoint_turns
    if cfg.cognitive_streak:
        scaffold["cognitive_streak"] = cfg.cognitive_streak
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
    keys = ("run_id", "turn_bound", "seed", "system_prompt", "forked_from")
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
        self.toolbox = Toolbox(ctx.world, index=ctx.index, hint_model=ctx.hint_model,
                               name_hints=cfg.name_hints)
        self.spec = ctx.backend.spec
        self.mode = getattr(self.spec, "mode", "xml") or "xml"
        if cfg.tool_format == "native" and self.mode == "function":
            raise ValueError(f"tool_format native writes the call in the reply's text; model "
                             f"{getattr(self.spec, 'name', '?')!r} is in function mode, where its "
                             "API returns the calls itself: leave tool_format at xml")
        self.constrain = getattr(self.spec, "constrain", "none") not in (None, "none", False)
        self.grammar: str | None = None
        self.close_grammar: str | None = None
        self.checkpoint_grammar: str | None = None
        self.navigate_grammar: str | None = None
        self.grammar_info: dict[str, Any] | None = None
        without = ctx.prefix.without if ctx.prefix is not None else frozenset()
        self.tools = {name: spec for name, spec in TOOL_SPECS.items() if name not in without}
        if self.constrain:
            files = ctx.world.source_files() if cfg.constrain_paths else []
            paths = files if 0 < len(files) <= 400 else None
            thinking_chars = getattr(self.spec, "thinking_chars", None) or 300
            grammar_of = native_grammar if cfg.tool_format == "native" else tool_grammar
            self.grammar = grammar_of(
                self.tools, paths, thinking_chars=thinking_chars, text_chars=TEXT_CHARS,
                thinking_min_chars=cfg.thinking_min_chars, thinking=cfg.thinking_rule,
            )
            self.close_grammar = grammar_of(
                CLOSE_TOOLS, paths,
                thinking_chars=thinking_chars, text_chars=TEXT_CHARS,
                thinking_min_chars=cfg.thinking_min_chars, text_caps={"content": cfg.close_chars},
                thinking=cfg.thinking_rule,
            ) if cfg.close_turn else None
            self.checkpoint_grammar = grammar_of(
                CLOSE_TOOLS, paths, thinking_chars=thinking_chars, text_chars=TEXT_CHARS,
                thinking_min_chars=cfg.thinking_min_chars, thinking=cfg.thinking_rule,
            ) if cfg.conclude_checkpoint or cfg.checkpoint_turns else None
            self.navigate_grammar = grammar_of(
                self._navigation_tools(), paths, thinking_chars=thinking_chars, text_chars=TEXT_CHARS,
                thinking_min_chars=cfg.thinking_min_chars, thinking=cfg.thinking_rule,
            ) if cfg.cognitive_streak else None
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
        self.ledger = Ledger(cfg.ledger_chars) if cfg.ledger else None
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
        if self.ctx.prefix is not None:  # a new fork: its prefix is written, then resumed
            self._write_prefix(header)
            return self._start_or_resume(header)
        self.started_at = header.started_at
        writer = RunWriter.create(self.path, header)
        self.messages = self._opening(header.system_prompt)
        return writer

    def _write_prefix(self, header: Header) -> None:
        """A fork's file: its header and the parent's prefix turns, their times moved so the
        prefix ends now and keeps its recorded durations (the fork's clock reads like a run's)."""
        prefix = self.ctx.prefix
        assert prefix is not None
        now = time.time()
        span = max(0.0, prefix.turns[-1].ended_at - prefix.header.started_at) if prefix.turns else 0.0
        shift = (now - span) - prefix.header.started_at
        writer = RunWriter.create(self.path, header.model_copy(update={"started_at": now - span}))
        try:
            for t in prefix.turns:
                writer.write(t.model_copy(update={"started_at": t.started_at + shift,
                                                  "ended_at": t.ended_at + shift}))
        finally:
            writer.close()

    def _opening(self, system: str) -> list[dict[str, Any]]:
        """The system prompt and the task message that every request starts with (a fork's:
        its parent's, opened under the parent's condition)."""
        opening = self.ctx.prefix.opening if self.ctx.prefix is not None else self.ctx.condition
        task = first_message(self.ctx.task, opening, self._state_text())
        return [{"role": "system", "content": system}, {"role": "user", "content": task}]

    def _state_text(self) -> str:
        """The state channels shown after every result (and the ledger, when it is on)."""
        text = self.toolbox.state.render()
        return text if self.ledger is None else text + "\n" + self.ledger.render()

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
        if self.ledger is not None:
            self.ledger.add(t)
        tool = t.call.tool if t.call else "error"
        kept = t.raw_text if self.cfg.history_thinking == "keep" else without_thinking(t.raw_text)
        self.messages.append({"role": "assistant", "content": kept})
        self.messages.append(
            {
                "role": "user",
                "content": observation_message(tool, t.observation, t.injected, self._state_text()),
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

    def planned_header(self) -> Header:
        """The header this run writes (or must find, to resume): its settings, scaffold and
        grammar as launched now."""
        prefix = self.ctx.prefix
        if prefix is not None:  # a fork keeps its parent's system prompt, whatever it changes
            header = make_header(self.ctx, self.cfg, prefix.header.system_prompt, self.grammar_info)
            return header.model_copy(update={"forked_from": prefix.forked_from})
        system = system_prompt(self.ctx.world, self.ctx.condition, self.cfg.tree_max_files,
                               self.cfg.demonstration, self.cfg.tool_format)
        return make_header(self.ctx, self.cfg, system, self.grammar_info)

    def execute(self) -> RunFile:
        """Run until finalize, the turn bound, too many malformed replies or a model error."""
        header = self.planned_header()
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
                checkpoint = not closing and self._checkpoint(len(self.turns))
                turn, end = self._turn(n, closing=closing, checkpoint=checkpoint,
                                       navigate=not closing and not checkpoint
                                       and self._navigate(len(self.turns)))
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

    def _checkpoint(self, index: int) -> bool:
        """Whether turn ``index`` (0-based) is a checkpoint turn: the turn before it showed a
        checkpoint note (``conclude_checkpoint``, ``checkpoint_turns``)."""
        return 1 <= index <= len(self.turns) and is_checkpoint_note_on(self.turns[index - 1])

    def _navigate(self, index: int) -> bool:
        """Whether turn ``index`` (0-based) may only navigate: the turn before it showed the
        note of ``cognitive_streak``."""
        return 1 <= index <= len(self.turns) and is_navigate_note_on(self.turns[index - 1])

    def _navigation_tools(self) -> dict[str, ToolSpec]:
        """The run's navigation tools (what a turn after a cognitive streak may call)."""
        return {name: spec for name, spec in self.tools.items() if spec.group == "navigation"}

    def _checkpoint_due(self, n: int, files: int) -> bool:
        """Whether turn ``n`` (1-based, not yet in ``self.turns``), having looked at ``files``
        distinct files in all, ends with a checkpoint note: ``conclude_checkpoint`` more files,
        or ``checkpoint_turns`` turns, since the last note (or the start)."""
        last = max((i for i, t in enumerate(self.turns) if is_checkpoint_note_on(t)), default=-1)
        every, turns = self.cfg.conclude_checkpoint, self.cfg.checkpoint_turns
        if every and files - (len(files_looked_at(self.turns[:last + 1])) if last >= 0 else 0) >= every:
            return True
        return bool(turns) and n - 1 - last >= turns

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

    # ------------------------------------------------------------------ one turn

    def _turn(self, n: int, closing: bool = False, checkpoint: bool = False,
              navigate: bool = False) -> tuple[Turn | None, End | None]:
        """Turn ``n``: ask the model, read its reply as a call, act on it and record it; or
        the End a failed request leads to (a checkpoint turn offers stash_conclusion alone, a
        turn after a cognitive streak the navigation tools alone)."""
        started = time.time()
        stable = self.cfg.window_drop == "stable"
        last = self.turns[-1].dropped_messages if self.turns and stable else 0
        fitted = fit_window(self.messages, getattr(self.spec, "context_window", None),
                            self.reply_tokens, start=last, fill=STABLE_FILL if stable else 1.0)
        if fitted is None:
            return None, self._end("context_overflow", "the prompt does not fit the context window")
        window, dropped = fitted
        reply = self._query(window, closing, checkpoint=checkpoint, navigate=navigate)
        if not isinstance(reply, End) and self.cfg.redraw_repeats and not closing and not checkpoint:
            reply = self._redrawn(window, reply, n, navigate=navigate)
        if isinstance(reply, End):
            return None, reply
        outcome = self._act(reply, closing)
        turn = self._record(n, started, reply, outcome, dropped)
        coached = self._coach_review(turn, closing)
        if isinstance(coached, End):
            return None, coached
        turn.injected = coached + self._notes(turn, outcome, n, closing)
        turn.ended_at = time.time()
        return turn, None

    def _request(self, closing: bool, checkpoint: bool = False,
                 navigate: bool = False) -> dict[str, Any]:
        """The request options of a turn: its token budget and its grammar or function tools
        (a closing or checkpoint turn offers only the tool it asks for, a turn after a
        cognitive streak the navigation tools)."""
        kwargs: dict[str, Any] = {"max_tokens": self.close_tokens if closing else self.reply_tokens}
        if self.grammar:
            kwargs["grammar"] = (self.close_grammar if closing and self.close_grammar else
                                 self.checkpoint_grammar if checkpoint and self.checkpoint_grammar
                                 else self.navigate_grammar if navigate and self.navigate_grammar
                                 else self.grammar)
        if self.mode == "function" or self.cfg.tool_format == "native":  # native: the
            # chat template lists them; the reply carries the call in its text
            kwargs["tools"] = function_tools(CLOSE_TOOLS if closing or checkpoint else
                                             self._navigation_tools() if navigate else self.tools)
        return kwargs

    def _query(self, window: list[dict[str, Any]], closing: bool, checkpoint: bool = False,
               navigate: bool = False, **sampling: Any) -> _Reply | End:
        """The model's reply to ``window`` read as a tool call, or the End its failure leads to
        (``sampling``: a redraw's temperature and seed)."""
        try:
            completion = self.ctx.backend.complete(
                window, **self._request(closing, checkpoint, navigate), **sampling)
        except CacheMiss:
            raise  # a replay that leaves the recording stops loudly; the run stays resumable
        except ModelError as exc:
            if exc.kind == "context_overflow":
                return self._end("context_overflow", f"{type(exc).__name__}: {exc}")
            return self._end("model_error", f"{type(exc).__name__}: {exc}", exc.kind)
        except Exception as exc:  # transport or policy failures: end the run, keep the record
            return self._end("model_error", f"{type(exc).__name__}: {exc}", "error")
        return self._parse(completion, closing)

    def _parse(self, completion: Any, closing: bool) -> _Reply:
        """A completion read as one tool call (native function calls or the XML protocol)."""
        text = completion.text or ""
        if self.mode == "function" and getattr(completion, "tool_calls", None):
            calls = completion.tool_calls
            if len(calls) > 1:
                parsed: ToolCall | ParseError = ParseError(
                    kind="multiple_tools",
                    message=f"Only one tool per message is allowed; this reply made {len(calls)} calls.",
                )
            else:
                parsed = parse_function_call(calls[0]["name"], calls[0]["arguments"], TOOL_SPECS)
            thinking = text.strip()
            if isinstance(parsed, ParseError):
                return _Reply(completion, text, thinking, None, parsed)
            return _Reply(completion, render_call(parsed, thinking), thinking, self._capped(parsed, closing), None)
        reply = (parse_native_reply if self.cfg.tool_format == "native" else parse_reply)(
            text, TOOL_SPECS)
        call = self._capped(reply.call, closing) if reply.call is not None else None
        return _Reply(completion, text, reply.thinking, call, reply.error)

    def _redrawn(self, window: list[dict[str, Any]], first: _Reply, n: int,
                 navigate: bool = False) -> _Reply | End:
        """``first``, or when its call exactly repeats an earlier one, the first of up to
        ``redraw_repeats`` new draws (temperature ``redraw_step`` higher each, another seed)
        that does not, else the last; the kept reply carries every draw (drawn with the same
        tools offered as ``first``: ``navigate``)."""
        repeat_of = self._repeat_of(first)
        if repeat_of is None:
            return first
        own = getattr(self.spec, "temperature", None)
        drawn = [(first, repeat_of, own, None)]  # the first draw: the model's own sampling
        base = own or 0.0
        for k in range(1, self.cfg.redraw_repeats + 1):
            temperature = round(min(2.0, base + k * self.cfg.redraw_step), 6)
            seed = redraw_seed(self.cfg.seed, n, k)
            asked = self._noted(window, drawn[-1][0], drawn[-1][1]) if self.cfg.redraw_note else window
            reply = self._query(asked, False, navigate=navigate, temperature=temperature, seed=seed)
            if isinstance(reply, End):
                return reply
            repeat_of = self._repeat_of(reply)
            drawn.append((reply, repeat_of, temperature, seed))
            if repeat_of is None:
                break
        kept = drawn[-1][0]
        kept.earlier = [r.completion for r, *_ in drawn[:-1]]
        kept.draws = [
            ModelCall(
                purpose=DRAW, model=self.spec.name, latency_s=r.completion.latency_s,
                tokens_in=r.completion.tokens_in, tokens_out=r.completion.tokens_out,
                cached=r.completion.cached, draw=k, repeat_of=rep, temperature=temp, seed=seed,
                text=r.text if k < len(drawn) - 1 else None,
            )
            for k, (r, rep, temp, seed) in enumerate(drawn)
        ]
        return kept

    def _noted(self, window: list[dict[str, Any]], repeated: _Reply, turn: int) -> list[dict[str, Any]]:
        """``window`` with the redraw note after its last observation (``redraw_note``)."""
        note = _fill("redraw_note.txt", turn=str(turn)).strip()
        if self.cfg.repeat_guard == "suggest" and repeated.call is not None:
            offered = suggestion_text(self.toolbox.world, self.turns, repeated.call)
            note = "\n".join(part for part in (note, offered) if part)
        last = window[-1]
        return [*window[:-1], {**last, "content": f"{last['content']}\n\n{note}"}]

    def _repeat_of(self, reply: _Reply) -> int | None:
        """The earlier turn whose call the reply's call exactly repeats (None: none does)."""
        return self._same_call(reply.call) if reply.call is not None else None

    def _capped(self, call: ToolCall, closing: bool) -> ToolCall:
        """``call`` with a closing conclusion cut at ``close_chars``: the closing instruction
        says a longer one is cut off, and without a grammar to enforce it the cut happens
        here (a constrained reply cannot exceed it)."""
        if not closing or self.grammar or call.tool != "stash_conclusion":
            return call
        content = str(call.params.get("content", ""))
        if len(content) <= self.cfg.close_chars:
            return call
        return call.model_copy(update={"params": {**call.params, "content": content[: self.cfg.close_chars]}})

    def _act(self, reply: _Reply, closing: bool) -> _Outcome:
        """What the turn's call leads to: a malformed reply, a call a closing turn does not
        run, a refused exact repeat, or the tool's result."""
        call = reply.call
        repeat_of = (self._same_call(call) if call is not None and self.cfg.repeat_guard != "off"
                     and not closing else None)
        if reply.error is not None:
            return self._malformed(reply.error)
        assert call is not None
        if closing and call.tool != "stash_conclusion":
            return _Outcome(
                "Not run: the session is over and only stash_conclusion was asked for; "
                "the run ends without a conclusion.",
                ToolMetrics(tool=TOOL_SPECS[call.tool].abbr, error_type="malformed"))
        if call.tool not in self.tools:  # a fork took it away
            return _Outcome(f"Not run: {call.tool} is no longer offered in this session; "
                            "use another tool.",
                            ToolMetrics(tool=TOOL_SPECS[call.tool].abbr, error_type="unknown_tool"))
        if repeat_of is not None and self.cfg.repeat_guard in ("refuse", "suggest"):
            refusal = _fill(
                "repeat_refused.txt", turn=str(repeat_of), count=str(self.mistakes + 1),
                limit=str(self.cfg.malformed_limit),
            ).strip()
            if self.cfg.repeat_guard == "suggest":
                first, _, count = refusal.partition("\n")
                offered = suggestion_text(self.toolbox.world, self.turns, call)
                refusal = "\n".join(part for part in (first, offered, count) if part)
            return _Outcome(refusal, ToolMetrics(tool=TOOL_SPECS[call.tool].abbr, error_type="repeated"),
                            repeat_of=repeat_of)
        outcome = self._run_tool(call)
        outcome.repeat_of = repeat_of
        return outcome

    def _malformed(self, error: ParseError) -> _Outcome:
        """The answer to a reply that is not one well-formed call: the mistake count so far."""
        observation = _fill(
            "malformed.txt", message=error.message, count=str(self.mistakes + 1),
            limit=str(self.cfg.malformed_limit),
        ).strip()
        kind = "unknown_tool" if error.kind == "unknown_tool" else "malformed"
        return _Outcome(observation, ToolMetrics(error_type=kind))

    def _run_tool(self, call: ToolCall) -> _Outcome:
        """Run the call; an observation over ``max_observation_chars`` is cut at a line end
        and its metrics keep only the lines shown."""
        result = self.toolbox.execute(call.tool, dict(call.params))
        observation, metrics = result.text, result.metrics
        cut = self.cfg.max_observation_chars
        if len(observation) > cut:
            kept = observation[:cut].rsplit("\n", 1)[0]  # whole lines only
            observation = kept + f"\n[... output cut at {cut} characters; ask for a smaller range or block.]"
            metrics = trim_to_shown(metrics, kept)
        return _Outcome(observation, metrics, list(result.state_changes), list(result.model_calls))

    def _record(self, n: int, started: float, reply: _Reply, outcome: _Outcome, dropped: int) -> Turn:
        """The turn record of a reply and its outcome (injections come after the review); a
        redrawn turn's latency, tokens and cost add up all its draws."""
        c = reply.completion
        spent = [*reply.earlier, c]
        reused = [r for r in (getattr(x, "tokens_reused", None) for x in spent) if r is not None]
        costs = [x.cost_usd for x in spent if x.cost_usd is not None]
        return Turn(
            turn=n,
            started_at=started,
            ended_at=time.time(),
            latency_s=c.latency_s if not reply.earlier else sum(x.latency_s for x in spent),
            tokens_in=sum(x.tokens_in for x in spent),
            tokens_out=sum(x.tokens_out for x in spent),
            tokens_reused=sum(reused) if reused else None,
            cost_usd=c.cost_usd if not reply.earlier else (sum(costs) if costs else None),
            cached=all(x.cached for x in spent),
            constrained=bool(getattr(c, "constrained", False) or self.grammar),
            raw_text=reply.text,
            thinking=reply.thinking,
            call=reply.call,
            parse_error=reply.error,
            observation=outcome.observation,
            metrics=outcome.metrics,
            state_changes=outcome.state_changes,
            model_calls=[*reply.draws, *outcome.model_calls],
            dropped_messages=dropped,
        )

    def _coach_review(self, turn: Turn, closing: bool) -> list[Injection] | End:
        """The coach's review of the turn (kept on it) and what it says to the model, or the
        End when the coach cannot be asked at all; nothing on closing turns or without a coach."""
        if self.ctx.coach is None or closing:
            return []
        try:
            decision = self.ctx.coach.review(turn, {**self._coach_context(), "history": self.turns})
        except ModelError as exc:  # the coach cannot be asked at all (no key, refused key)
            return self._end("model_error", f"coach: {type(exc).__name__}: {exc}", exc.kind)
        turn.coach = decision
        injected: list[Injection] = []
        if decision.get("decision") in ("HINT", "REJECT") and decision.get("message"):
            if decision["decision"] == "REJECT":
                injected.append(Injection(source="system", text=_fill("rejected.txt").strip()))
            injected.append(Injection(source="coach", text=str(decision["message"])))
        return injected

    def _notes(self, turn: Turn, outcome: _Outcome, n: int, closing: bool) -> list[Injection]:
        """The loop's own notes after the turn: the repeat notice, the condition's reminder
        and the closing instruction when the run is about to end without a conclusion."""
        notes: list[Injection] = []
        if outcome.repeat_of is not None and self.cfg.repeat_guard == "note":
            notes.append(Injection(source="system", text=_fill(
                "repeat_notice.txt", turn=str(outcome.repeat_of)).strip()))
        if closing or (turn.metrics.finalize and not self._rejected(turn)):
            return notes
        reminder = self.ctx.condition.reminder_after(n)
        if reminder:
            notes.append(Injection(source="reminder", text=reminder))
        stuck = turn.parse_error is not None or turn.metrics.error_type == "repeated"
        concluding = False  # the next turn closes the run or is a checkpoint
        if self.cfg.close_turn and (
                n >= self.cfg.turn_bound or (stuck and self.mistakes + 1 >= self.cfg.malformed_limit)):
            notes.append(Injection(source="system", text=self.close_text))
            concluding = True
        elif self.cfg.conclude_nudge or self.cfg.conclude_checkpoint or self.cfg.checkpoint_turns:
            files = files_looked_at([*self.turns, turn])
            if self.cfg.conclude_nudge and len(files) >= self.cfg.conclude_nudge:
                notes.append(Injection(source="system", text=conclude_note(files)))
            if n < self.cfg.turn_bound and self._checkpoint_due(n, len(files)):  # a turn left to take it
                notes.append(Injection(source="system", text=checkpoint_note(files)))
                concluding = True
        streak = cognitive_streak_of([*self.turns, turn]) if self.cfg.cognitive_streak else 0
        if streak >= self.cfg.cognitive_streak > 0 and n < self.cfg.turn_bound and not concluding:
            notes.append(Injection(source="system", text=navigate_note(streak)))  # after those
        return notes


def without_thinking(text: str) -> str:
    """A reply as the conversation keeps it under ``history_thinking: drop``: without its
    thinking (a reply that is nothing else stays whole, so the conversation shows what came)."""
    rest = extract_thinking(text)[1].strip()
    return rest or text


def files_looked_at(turns: list[Turn]) -> list[str]:
    """The distinct files ``turns`` outlined, read or looked up in by calls that succeeded
    (a bookmark or a memory reads nothing), in order of first appearance."""
    seen: dict[str, None] = {}
    for t in turns:
        m = t.metrics
        if t.call is not None and m.error_type is None and m.file and m.tool in ("OVW", "PKR", "EXP"):
            seen.setdefault(m.file, None)
    return list(seen)


#: at most this many file names in a conclusion nudge (the count says how many in all)
NUDGE_FILES = 8


def _named(files: list[str]) -> str:
    """``files`` as a note names them: the first :data:`NUDGE_FILES`, then how many more
    ("none yet" for no file)."""
    if not files:
        return "none yet"
    named = ", ".join(f"`{f}`" for f in files[:NUDGE_FILES])
    if len(files) > NUDGE_FILES:
        named += f" and {len(files) - NUDGE_FILES} more"
    return named


def conclude_note(files: list[str]) -> str:
    """The note of :attr:`RunConfig.conclude_nudge` for a run that has looked at ``files``."""
    return _fill("conclude_nudge.txt", count=str(len(files)), files=_named(files)).strip()


def checkpoint_note(files: list[str]) -> str:
    """The note of :attr:`RunConfig.conclude_checkpoint` for a run that has looked at ``files``."""
    return _fill("checkpoint.txt", count=str(len(files)), files=_named(files)).strip()


#: the tools a cognitive streak counts (``cognitive_streak``): notes and hints, not the conclusion
STREAK_TOOLS = frozenset({"create_memory", "bookmark", "get_hint_on_snippet"})


def cognitive_streak_of(turns: list[Turn]) -> int:
    """How many of the last ``turns`` in a row called a note or hint tool
    (:data:`STREAK_TOOLS`), counted back from the last one."""
    count = 0
    for t in reversed(turns):
        if t.call is None or t.call.tool not in STREAK_TOOLS:
            break
        count += 1
    return count


def navigate_note(streak: int) -> str:
    """The note of :attr:`RunConfig.cognitive_streak` after ``streak`` notes in a row."""
    return _fill("navigate.txt", count=str(streak)).strip()


def is_navigate_note_on(turn: Turn) -> bool:
    """Whether ``turn``'s observation carried the note of a cognitive streak (so the next turn
    may only navigate)."""
    return _shows_note(turn, "navigate.txt")


def is_checkpoint_note_on(turn: Turn) -> bool:
    """Whether ``turn``'s observation carried a checkpoint note (so the next turn is one)."""
    return _shows_note(turn, "checkpoint.txt")


def _shows_note(turn: Turn, template: str) -> bool:
    """Whether ``turn`` carried a system note filled from prompt ``template``."""
    lead = _note_lead(template)
    return any(i.source == "system" and i.text.startswith(lead) for i in turn.injected)


@lru_cache(maxsize=8)
def _note_lead(template: str) -> str:
    """How every note from prompt ``template`` begins: the template up to its first value."""
    return (config.PROMPTS / template).read_text(encoding="utf-8").split("{", 1)[0]


@dataclass
class _Reply:
    """A model reply read as a tool call: the completion, the text the conversation keeps,
    the thinking, and the call or the parse error."""

    completion: Any
    text: str
    thinking: str
    call: ToolCall | None
    error: ParseError | None
    #: a redrawn turn's earlier completions (not kept) and the records of all its draws
    earlier: list[Any] = field(default_factory=list)
    draws: list[ModelCall] = field(default_factory=list)


@dataclass
class _Outcome:
    """What a turn's call led to: the observation, the metrics and what the record keeps."""

    observation: str
    metrics: ToolMetrics
    state_changes: list[dict[str, Any]] = field(default_factory=list)
    model_calls: list[ModelCall] = field(default_factory=list)
    #: the earlier turn this call exactly repeats (only looked up under a repeat guard)
    repeat_of: int | None = None


def redraw_seed(seed: int, turn: int, k: int) -> int:
    """The seed of redraw ``k`` on turn ``turn`` of a run with seed ``seed``: fixed by the
    three, and different for every redraw."""
    return zlib.crc32(f"redraw/{seed}/{turn}/{k}".encode())


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
