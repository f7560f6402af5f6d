"""J and C, the coach-judge sidecar of the intervention condition (RQ3; paper §2.2 eq. 6-8,
Appendix A.2).

After each completed turn the flow is::

    completed turn -> turn summary -> judge panel -> diagnostic report -> coach -> next observation

* **Turn summary.** Every turn becomes a compact record (intent from the thinking, the action,
  the gist of the result, each capped) appended to a rolling trajectory memory; judges read a
  slice of it instead of the raw trajectory.
* **Judge panel** (Fig. A2). The overall judge and the bias judge rate every turn; exactly one
  more judge matches the turn's kind: navigation (OVW, PKR, EXP), cognitive (MEM, BKM, HNT and
  a non-final CON), conclusion (a CON with ``proceed_to_finalize=true``) or error (a malformed
  reply, an unknown tool or a tool error). Each judge replies with JSON ``{reasoning, <its
  ratings>}``; ratings come from fixed vocabularies (:data:`ROLES`), texts are cut to their
  caps, and a reply that does not validate is retried once with a correction; a second failure
  (or a failed call) is recorded as invalid and read as *no signal*.
* **Report.** The judges' identities, ratings and reasoning are kept side by side (nothing is
  averaged). Rating values that indicate a problem (``ROLES[...].dims[...].concern``) become
  the report's *concerns*, e.g. ``overall.flow_state=looping``.
* **Coach.** A model call with the report replies ``{rationale, decision, message}``. Its
  prompt states Table A3's policy; the decision then passes a deterministic guard
  (:func:`apply_guard`) that keeps a small model honest: a failed or invalid coach reply is
  PASS; REJECT is possible only for a finalizing conclusion that the conclusion judge rated
  premature or not fully grounded (:data:`REJECT_ON`: saturation ``premature``, grounding
  ``unsupported`` or ``partial``; the paper rejects conclusions "premature or unsupported"
  (A.2.5) or "premature or insufficiently grounded" (Table A3), and this is their union),
  otherwise it becomes HINT; HINT needs at least ``min_concerns_for_hint`` concerns (default
  2 in :func:`apply_guard` and :class:`CoachJudge` alike: the paper intervenes "when multiple
  diagnostic signals indicate a harmful pattern"), otherwise it becomes PASS. When the report
  holds no concern and no rejection signal the guard could only answer PASS, so the coach
  model is not consulted (``consult_always=True`` asks it anyway).

:meth:`CoachJudge.review` returns a JSON-serialisable dict that the agent loop stores in
``Turn.coach``: the decision and message, the coach's own proposal and the guard's notes, the
turn summary, every judge's report (valid or not), every model call's latency, tokens and
cache flag, and the review's wall-clock ``started_at``/``ended_at`` (which content digests leave
out, so a replay from the response cache reproduces a coach run exactly). A :class:`adakit.llm.models.CacheMiss` (a replay that diverged from its recording) is
re-raised, and so is a :class:`adakit.llm.models.ModelError` of a retryable kind (no key, a refused
key, an endpoint that stays down: ``adakit.llm.models.RETRYABLE_KINDS``), which ends the run as a
retryable model error instead of recording a coach condition without a coach; every other
failure (a refused request, an invalid reply) degrades to no signal or PASS.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from string import Template
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, create_model

from adakit import config
from adakit.llm.replies import ReplyError, json_object
from adakit.record import NAV, TOOL_ABBR, Turn
from adakit.text import clip

COACH_PROMPTS = config.PROMPTS / "coach"
DECISIONS: tuple[str, ...] = ("PASS", "HINT", "REJECT")
TURN_KINDS: tuple[str, ...] = ("navigation", "cognitive", "conclusion", "error")
REPORT_VERSION = 1

#: Caps (characters) of what the judges and the coach write.
REASONING_MAX = 300
MESSAGE_MAX = 500
RATIONALE_MAX = 300
#: Caps (characters) of the context pieces put in front of the judges.
INTENT_MAX = 160
ACTION_MAX = 160
RESULT_MAX = 160
THINKING_MAX = 600
OBSERVATION_MAX = 600
ARTIFACT_MAX = 800
SUBMISSION_MAX = 1500
TREE_MAX = 1500
TREE_FILES = 80
VISITED_MAX = 1000
#: The embedded model's coach gets its own loopback server (a distinct context size), so the
#: agent's server keeps its prompt prefix in cache between turns.
LOCAL_COACH_CONTEXT = 6144


# ============================================================================== vocabulary


@dataclass(frozen=True)
class Dim:
    """One rating dimension of a judge: categorical (``values``), free text (``max_chars``) or
    a list of short texts (``max_items``). ``concern`` lists the values that flag a problem."""

    name: str
    values: tuple[str, ...] = ()
    concern: tuple[str, ...] = ()
    max_chars: int = 0
    max_items: int = 0

    def __post_init__(self) -> None:
        bad = [v for v in self.concern if v not in self.values]
        if bad:
            raise ValueError(
                f"dimension {self.name!r}: concern values {bad} are not in {self.values}"
            )
        if not self.values and self.max_chars <= 0:
            raise ValueError(f"dimension {self.name!r} needs values or a max_chars cap")

    @property
    def categorical(self) -> bool:
        return bool(self.values)


@dataclass(frozen=True)
class Role:
    """One judge of the panel (Fig. A2): who it is, how many earlier turns it reads, and what
    it rates. Its prompt delta is ``prompts/coach/role_<name>.txt``."""

    name: str
    title: str
    persona: str
    window: int
    dims: tuple[Dim, ...]

    @property
    def template(self) -> str:
        return (COACH_PROMPTS / f"role_{self.name}.txt").read_text(encoding="utf-8").strip()

    def dim(self, name: str) -> Dim:
        for d in self.dims:
            if d.name == name:
                return d
        raise KeyError(f"judge {self.name!r} has no dimension {name!r}")


ROLES: dict[str, Role] = {
    r.name: r
    for r in (
        Role("overall", "overall judge", "strategic observer", 7, (
            Dim("flow_state", ("progressing", "slowing", "stalled", "looping"),
                ("stalled", "looping")),
            Dim("laziness", ("none", "some", "high"), ("high",)),
            Dim("suggestion", max_chars=200),
        )),
        Role("bias", "bias judge", "metacognition analyst", 4, (
            Dim("confidence_level", ("calibrated", "overconfident", "underconfident"),
                ("overconfident",)),
            Dim("detected_bias", ("none", "parametric", "confirmation", "anchoring"),
                ("parametric", "confirmation", "anchoring")),
        )),
        Role("navigation", "navigation judge", "senior code reviewer", 5, (
            Dim("scent_rating", ("strong", "plausible", "weak"), ("weak",)),
            Dim("yield_rating", ("useful", "partial", "useless"), ("useless",)),
        )),
        Role("cognitive", "cognitive judge", "epistemic analyst", 5, (
            Dim("quality", ("synthesis", "summary", "parroting"), ("parroting",)),
            Dim("risk_validity", ("valid", "questionable", "invalid", "not_applicable"),
                ("invalid",)),
        )),
        Role("conclusion", "conclusion judge", "rigorous auditor", 4, (
            Dim("saturation", ("saturated", "partial", "premature"), ("premature",)),
            Dim("grounding", ("grounded", "partial", "unsupported"), ("unsupported",)),
            Dim("missed_files", max_chars=120, max_items=5),
        )),
        Role("error", "error judge", "resilience evaluator", 3, (
            Dim("diagnosis", ("understood", "partial", "misunderstood"), ("misunderstood",)),
            Dim("recovery", ("pivot", "retry", "loop", "too_early"), ("loop",)),
            Dim("severity", ("low", "medium", "high"), ("high",)),
        )),
    )
}
#: The judge that matches each turn kind (besides the overall and bias judges).
KIND_ROLE: dict[str, str] = {
    "navigation": "navigation",
    "cognitive": "cognitive",
    "conclusion": "conclusion",
    "error": "error",
}
ALWAYS_ROLES: tuple[str, ...] = ("overall", "bias")
#: Conclusion-judge ratings that allow the coach to REJECT a finalize attempt (module doc).
REJECT_ON: tuple[str, ...] = (
    "conclusion.saturation=premature",
    "conclusion.grounding=unsupported",
    "conclusion.grounding=partial",
)
#: The fewest concerns a HINT needs (the paper: "multiple diagnostic signals").
MIN_CONCERNS_FOR_HINT = 2


def _norm_category(value: Any) -> Any:
    if isinstance(value, str):
        return re.sub(r"[\s\-]+", "_", value.strip().strip("\"'").lower())
    return value


def _text_cap(cap: int) -> BeforeValidator:
    def cut(value: Any) -> Any:
        if value is None:
            return ""
        return clip(value, cap, space="squash") if isinstance(value, str) else value

    return BeforeValidator(cut)


def _list_cap(items: int, cap: int) -> BeforeValidator:
    def cut(value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, str):
            value = [] if value.strip().lower() in ("", "none", "n/a") else [value]
        if isinstance(value, list):
            texts = [clip(v, cap, space="squash") for v in value
                     if isinstance(v, str) and v.strip()]
            return texts[:items]
        return value

    return BeforeValidator(cut)


def _field_type(d: Dim) -> tuple[Any, Any]:
    if d.categorical:
        vocab = Literal[d.values]  # type: ignore[valid-type]
        return Annotated[vocab, BeforeValidator(_norm_category)], ...
    if d.max_items:
        capped = Annotated[list[str], _list_cap(d.max_items, d.max_chars)]
        return capped, Field(default_factory=list)
    return Annotated[str, _text_cap(d.max_chars)], ""


_MODELS: dict[str, type[BaseModel]] = {}


def reply_model(role: str) -> type[BaseModel]:
    """The pydantic model of a judge's reply: ``reasoning`` plus the role's dimensions."""
    if role not in _MODELS:
        r = ROLES[role]
        fields: dict[str, Any] = {
            "reasoning": (Annotated[str, _text_cap(REASONING_MAX)], Field(min_length=1)),
        }
        for d in r.dims:
            fields[d.name] = _field_type(d)
        _MODELS[role] = create_model(
            f"{role.title()}JudgeReply", __config__=ConfigDict(extra="ignore"), **fields
        )
    return _MODELS[role]


class CoachReply(BaseModel):
    """The coach's reply."""

    model_config = ConfigDict(extra="ignore")

    rationale: Annotated[str, _text_cap(RATIONALE_MAX)] = ""
    decision: Annotated[Literal["PASS", "HINT", "REJECT"], BeforeValidator(
        lambda v: v.strip().strip("\"'").upper() if isinstance(v, str) else v
    )]
    message: Annotated[str, _text_cap(MESSAGE_MAX)] = ""


def _text_schema(cap: int) -> dict[str, Any]:
    return {"type": "string", "maxLength": cap}


def judge_schema(role: str) -> dict[str, Any]:
    """The JSON schema sent for constrained decoding (every text and list capped, so a reply
    finishes within the token limit); ``reasoning`` comes first, then the ratings."""
    r = ROLES[role]
    props: dict[str, Any] = {"reasoning": {"type": "string", "minLength": 1,
                                           "maxLength": REASONING_MAX}}
    for d in r.dims:
        if d.categorical:
            props[d.name] = {"type": "string", "enum": list(d.values)}
        elif d.max_items:
            props[d.name] = {"type": "array", "items": _text_schema(d.max_chars),
                             "maxItems": d.max_items}
        else:
            props[d.name] = _text_schema(d.max_chars)
    return {"type": "object", "properties": props, "required": list(props)}


def coach_schema() -> dict[str, Any]:
    """The JSON schema of the coach's reply (rationale first, then the decision)."""
    return {
        "type": "object",
        "properties": {
            "rationale": {"type": "string", "minLength": 1, "maxLength": RATIONALE_MAX},
            "decision": {"type": "string", "enum": list(DECISIONS)},
            "message": _text_schema(MESSAGE_MAX),
        },
        "required": ["rationale", "decision", "message"],
    }


def reply_format(role: str | None) -> str:
    """The reply shape shown in a prompt (``None``: the coach's), built from the vocabularies."""
    if role is None:
        parts = [
            f'"rationale": "<why, at most {RATIONALE_MAX} characters>"',
            '"decision": "PASS" | "HINT" | "REJECT"',
            f'"message": "<to Ada, at most {MESSAGE_MAX} characters; empty for PASS>"',
        ]
    else:
        parts = [f'"reasoning": "<one or two sentences, at most {REASONING_MAX} characters>"']
        for d in ROLES[role].dims:
            if d.categorical:
                parts.append(f'"{d.name}": ' + " | ".join(f'"{v}"' for v in d.values))
            elif d.max_items:
                parts.append(f'"{d.name}": [<up to {d.max_items} short strings>]')
            else:
                parts.append(f'"{d.name}": "<at most {d.max_chars} characters>"')
    return "{" + ", ".join(parts) + "}"




def _problems(exc: ValidationError, data: dict[str, Any], allowed: dict[str, Sequence[str]]) -> str:
    out = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "reply"
        choices = ", ".join(allowed.get(where, ()))
        if err["type"] == "missing":
            out.append(f"'{where}' is missing" + (f" (one of {choices})" if choices else ""))
        elif where in allowed:
            out.append(f"'{where}' must be one of {choices} (got {data.get(where)!r})")
        else:
            out.append(f"'{where}': {err['msg']}")
    return "; ".join(out) + "."


def parse_judge_reply(text: str, role: str) -> dict[str, Any]:
    """Validate a judge's reply; returns ``{"reasoning": ..., <dimension>: ...}`` or raises
    :class:`ReplyError` with a message the judge can act on."""
    data = {str(k).strip().lower(): v for k, v in json_object(text).items()}
    allowed = {d.name: d.values for d in ROLES[role].dims if d.categorical}
    try:
        reply = reply_model(role).model_validate(data)
    except ValidationError as exc:
        raise ReplyError(_problems(exc, data, allowed)) from None
    return reply.model_dump()


def parse_coach_reply(text: str) -> dict[str, Any]:
    """Validate the coach's reply; returns ``{"rationale", "decision", "message"}``."""
    data = {str(k).strip().lower(): v for k, v in json_object(text).items()}
    try:
        reply = CoachReply.model_validate(data)
    except ValidationError as exc:
        raise ReplyError(_problems(exc, data, {"decision": DECISIONS})) from None
    return reply.model_dump()


def concerns_of(role: str, ratings: dict[str, Any]) -> list[str]:
    """The ratings of a valid judge report that flag a problem, as ``role.dim=value``."""
    out = []
    for d in ROLES[role].dims:
        if d.categorical and ratings.get(d.name) in d.concern:
            out.append(f"{role}.{d.name}={ratings[d.name]}")
    return out


# ============================================================================== turn memory


def turn_kind(turn: Turn) -> str:
    """navigation, cognitive, conclusion (a finalize attempt) or error."""
    if turn.parse_error is not None or turn.call is None or turn.metrics.error_type is not None:
        return "error"
    abbr = turn.metrics.tool or TOOL_ABBR.get(turn.call.tool)
    if abbr in NAV:
        return "navigation"
    if abbr == "CON" and finalizing(turn):
        return "conclusion"
    return "cognitive"


def finalizing(turn: Turn) -> bool:
    """Whether the turn is a successful ``stash_conclusion`` that asks to finish the run."""
    return (
        turn.call is not None
        and turn.call.tool == "stash_conclusion"
        and turn.metrics.error_type is None
        and bool(turn.metrics.finalize)
    )


def _first_sentence(text: str, cap: int = INTENT_MAX) -> str:
    text = " ".join(text[: cap * 4].split())
    m = re.match(r"(.+?[.!?])(\s|$)", text)
    return m.group(1) if m else text


def _action(turn: Turn) -> str:
    if turn.call is None:
        kind = turn.parse_error.kind if turn.parse_error else "no tool call"
        return f"(no usable tool call: {kind})"
    abbr = turn.metrics.tool or TOOL_ABBR.get(turn.call.tool, turn.call.tool)
    params = ", ".join(f"{k}={clip(str(v), 60, space='squash')}"
                       for k, v in turn.call.params.items())
    return f"{abbr} {params}".strip()


def _result(turn: Turn) -> str:
    m = turn.metrics
    if turn.parse_error is not None:
        return f"malformed reply: {turn.parse_error.message}"
    if m.error_type:
        return f"{m.error_type}: {_first_line(turn.observation)}"
    parts = []
    if m.file and m.ranges:
        parts.append(f"{m.file}:" + ",".join(f"{a}-{b}" for a, b in m.ranges))
    elif m.file:
        parts.append(m.file)
    if m.result_count is not None:
        parts.append(f"{m.result_count} results")
    if m.lines_viewed:
        parts.append(f"{m.lines_viewed} lines")
    gist = _first_line(turn.observation)
    return "; ".join([*parts, gist] if gist else parts)


def _first_line(text: str) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


@dataclass(frozen=True)
class TurnSummary:
    """The compact record of one turn in the rolling trajectory memory."""

    turn: int
    kind: str
    tool: str
    intent: str
    action: str
    result: str

    def line(self) -> str:
        intent = f" | intent: {self.intent}" if self.intent else ""
        return f"t{self.turn} {self.action}{intent} | result: {self.result}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def summarize_turn(turn: Turn) -> TurnSummary:
    """Intent (first sentence of the thinking), action and result gist of a turn, each capped."""
    tool = turn.metrics.tool or (TOOL_ABBR.get(turn.call.tool, turn.call.tool) if turn.call else "")
    return TurnSummary(
        turn=turn.turn,
        kind=turn_kind(turn),
        tool=tool or "ERR",
        intent=(clip(_first_sentence(turn.thinking), INTENT_MAX, space="squash")
                if turn.thinking.strip() else ""),
        action=clip(_action(turn), ACTION_MAX, space="squash"),
        result=clip(_result(turn), RESULT_MAX, space="squash"),
    )


def _visited(turns: Sequence[Turn]) -> dict[str, list[tuple[int, int]]]:
    seen: dict[str, list[tuple[int, int]]] = {}
    for t in turns:
        m = t.metrics
        if m.file and m.error_type is None and (m.tool in NAV):
            seen.setdefault(m.file, []).extend(m.ranges)
    return seen


def _visited_text(turns: Sequence[Turn], cap: int) -> str:
    seen = _visited(turns)
    if not seen:
        return "(no files visited yet)"
    lines = []
    for f, ranges in seen.items():
        spans = ",".join(f"{a}-{b}" for a, b in sorted(set(ranges))[:6])
        lines.append(f"{f} {spans}".rstrip())
    return clip("\n".join(lines), cap)


# ============================================================================== prompts


def _template(name: str) -> Template:
    return Template((COACH_PROMPTS / name).read_text(encoding="utf-8"))


def _goal(context: dict[str, Any]) -> str:
    task = context.get("task")
    if task is None:
        return "(no task given)"
    title = getattr(task, "title", "") or getattr(task, "family", "")
    prompt = getattr(task, "prompt", "") or str(task)
    return clip(f"{title}: {prompt}" if title else prompt, 1200)


def _step_block(turn: Turn, summary: TurnSummary) -> str:
    lines = []
    if turn.thinking.strip():
        lines.append("Ada's reasoning: " + clip(turn.thinking, THINKING_MAX, space="squash"))
    lines.append("action: " + summary.action)
    lines.append("result: " + summary.result)
    return "\n".join(lines)


def _artifact(turn: Turn) -> str:
    if turn.call is None:
        return ""
    return "\n".join(f"{k}: {clip(str(v), ARTIFACT_MAX, space='squash')}"
                     for k, v in turn.call.params.items())


def _extra(role: str, turn: Turn, history: Sequence[Turn], context: dict[str, Any]) -> str:
    """The role-specific context slice (Fig. A2)."""
    if role == "overall":
        return ""
    if role == "bias":
        return "\n## Evidence Ada has seen (files and line ranges)\n" + _visited_text(
            [*history, turn], VISITED_MAX
        ) + "\n"
    if role == "navigation":
        obs = clip(turn.observation, OBSERVATION_MAX) or "(empty)"
        return f"\n## What the tool returned\n{obs}\n"
    if role == "cognitive":
        before = clip(history[-1].observation, OBSERVATION_MAX) if history else "(none)"
        return (
            f"\n## The latest observation before this step\n{before}\n"
            f"\n## What Ada wrote down\n{_artifact(turn)}\n"
        )
    if role == "conclusion":
        world = context.get("world")
        tree = "(not available)"
        if world is not None and hasattr(world, "tree"):
            tree = clip(world.tree(max_files=TREE_FILES), TREE_MAX)
        content = turn.call.params.get("content", "") if turn.call else ""
        title = turn.call.params.get("title", "") if turn.call else ""
        return (
            f"\n## Repository structure\n{tree}\n"
            f"\n## Files Ada visited\n{_visited_text([*history, turn], VISITED_MAX)}\n"
            f"\n## The submitted conclusion: {clip(str(title), 120, space='squash')}\n"
            f"{clip(str(content), SUBMISSION_MAX)}\n"
        )
    if role == "error":
        raw = clip(turn.raw_text, 400) or "(empty reply)"
        err = turn.parse_error.message if turn.parse_error else clip(turn.observation, 400)
        return f"\n## The failed action (Ada's raw reply)\n{raw}\n\n## The error\n{err}\n"
    raise KeyError(role)


def _pair(system: str, task: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": system.strip()},
        {"role": "user", "content": task.strip()},
    ]


def judge_messages(
    role: str,
    turn: Turn,
    memory: Sequence[TurnSummary],
    history: Sequence[Turn],
    context: dict[str, Any],
) -> list[dict[str, str]]:
    """The chat messages for one judge: the shared skeleton with the role's delta."""
    r = ROLES[role]
    system = _template("judge_system.txt").substitute(
        title=r.title, persona=r.persona, role=r.template, format=reply_format(role)
    )
    earlier = list(memory)[-r.window:] if r.window else []
    task = _template("judge_task.txt").substitute(
        goal=_goal(context),
        shown=len(earlier),
        total=len(memory),
        trajectory="\n".join(s.line() for s in earlier) or "(this is the first turn)",
        turn=turn.turn,
        turn_bound=context.get("turn_bound", "?"),
        step=_step_block(turn, summarize_turn(turn)),
        extra=_extra(role, turn, history, context),
    )
    return _pair(system, task)


def _report_text(report: Sequence[dict[str, Any]]) -> str:
    blocks = []
    for j in report:
        head = f"[{j['title']}]"
        if not j["valid"]:
            blocks.append(f"{head} no signal (the judge's reply could not be used)")
            continue
        ratings = ", ".join(
            f"{k}={v if not isinstance(v, list) else (', '.join(v) or 'none')}"
            for k, v in j["ratings"].items()
            if v not in ("", None)
        )
        blocks.append(f"{head} {ratings}\n  reasoning: {j['reasoning']}")
    return "\n".join(blocks)


def coach_messages(
    turn: Turn,
    summary: TurnSummary,
    report: Sequence[dict[str, Any]],
    concerns: Sequence[str],
    history: Sequence[Turn],
    context: dict[str, Any],
) -> list[dict[str, str]]:
    """The chat messages for the coach: Table A3's policy, the step and the panel's report."""
    decisions = [(t.turn, t.coach.get("decision")) for t in history if t.coach]
    interventions = [f"t{n} {d}" for n, d in decisions if d in ("HINT", "REJECT")]
    system = _template("coach_system.txt").substitute(format=reply_format(None))
    task = _template("coach_task.txt").substitute(
        goal=_goal(context),
        turn=turn.turn,
        turn_bound=context.get("turn_bound", "?"),
        step=_step_block(turn, summary),
        finalizing="yes" if finalizing(turn) else "no",
        report=_report_text(report),
        concerns="\n".join(f"- {c}" for c in concerns) or "(none)",
        history=", ".join(interventions[-8:]) or "(none)",
    )
    return _pair(system, task)


# ============================================================================== the guard


def rating_signals(report: Sequence[dict[str, Any]]) -> list[str]:
    """Every categorical rating of the valid judge reports, as ``role.dim=value``."""
    out = []
    for j in report:
        if not j.get("valid"):
            continue
        for dim, value in (j.get("ratings") or {}).items():
            if isinstance(value, str):
                out.append(f"{j['role']}.{dim}={value}")
    return out


def apply_guard(
    proposal: dict[str, Any] | None,
    *,
    is_finalizing: bool,
    concerns: Sequence[str],
    min_concerns_for_hint: int = MIN_CONCERNS_FOR_HINT,
    rejections_so_far: int = 0,
    max_rejections: int | None = None,
    reject_signals: Sequence[str] | None = None,
) -> tuple[str, list[str]]:
    """The deterministic guard over the coach's proposal; returns (decision, notes).

    1. no usable proposal -> PASS;
    2. REJECT of anything but a finalizing conclusion -> HINT;
    3. REJECT without a rejection signal (``reject_signals``: the report's ratings among
       :data:`REJECT_ON`; default: the concerns among them) -> HINT;
    4. REJECT once ``max_rejections`` rejections were made in the run -> HINT;
    5. HINT with fewer than ``min_concerns_for_hint`` concerns -> PASS.
    """
    if reject_signals is None:
        reject_signals = [c for c in concerns if c in REJECT_ON]
    notes: list[str] = []
    if not proposal or proposal.get("decision") not in DECISIONS:
        return "PASS", ["no usable coach reply: PASS"]
    decision = proposal["decision"]
    if decision == "REJECT":
        if not is_finalizing:
            decision = "HINT"
            notes.append("REJECT of a turn that is not a finalize attempt downgraded to HINT")
        elif not reject_signals:
            decision = "HINT"
            notes.append("REJECT without a conclusion-judge rejection signal (premature, "
                         "unsupported or partial grounding) downgraded to HINT")
        elif max_rejections is not None and rejections_so_far >= max_rejections:
            decision = "HINT"
            notes.append(f"REJECT limit ({max_rejections}) reached: downgraded to HINT")
    if decision == "HINT" and len(concerns) < min_concerns_for_hint:
        decision = "PASS"
        notes.append(
            f"HINT needs at least {min_concerns_for_hint} concern(s), the report has "
            f"{len(concerns)}: PASS"
        )
    return decision, notes


def fallback_message(
    decision: str, report: Sequence[dict[str, Any]], concerns: Sequence[str]
) -> str:
    """A message built from the report when the coach intervenes without writing one."""
    by_role = {j["role"]: j for j in report if j["valid"]}
    parts = []
    if decision == "REJECT":
        parts.append("The panel finds this conclusion not yet ready:")
    else:
        parts.append("The panel flagged:")
    parts.append("; ".join(c.split(".", 1)[1].replace("=", ": ") for c in concerns) + ".")
    missed = by_role.get("conclusion", {}).get("ratings", {}).get("missed_files") or []
    if missed:
        parts.append("Not yet read: " + ", ".join(missed) + ".")
    suggestion = by_role.get("overall", {}).get("ratings", {}).get("suggestion")
    if suggestion:
        parts.append(suggestion)
    return clip(" ".join(parts), MESSAGE_MAX, space="squash")


# ============================================================================== the sidecar


@dataclass
class _Asked:
    parsed: dict[str, Any] | None
    error: str | None
    calls: list[dict[str, Any]] = field(default_factory=list)


def _cache_miss() -> type[BaseException]:
    from adakit.llm.models import CacheMiss

    return CacheMiss


def _must_stop(exc: BaseException) -> bool:
    """A model failure that would repeat on every call (see the module docstring)."""
    from adakit.llm.models import RETRYABLE_KINDS, ModelError

    return isinstance(exc, ModelError) and exc.kind in RETRYABLE_KINDS


class CoachJudge:
    """The coach-judge sidecar: implements the agent loop's ``Coach`` protocol.

    ``coach`` and ``judges`` are chat backends (``judges`` defaults to ``coach``). Options:
    ``consult_always`` asks the coach model even when the report holds no concern (the guard
    then still answers PASS); ``min_concerns_for_hint``, ``max_rejections`` and ``reject_on``
    (the ratings that allow a REJECT, :data:`REJECT_ON`) tune the guard (:func:`apply_guard`); ``judge_max_tokens`` / ``coach_max_tokens`` cap the replies (default:
    the model's registry setting).
    """

    def __init__(
        self,
        coach: Any,
        judges: Any | None = None,
        *,
        consult_always: bool = False,
        min_concerns_for_hint: int = MIN_CONCERNS_FOR_HINT,
        max_rejections: int | None = None,
        judge_max_tokens: int | None = None,
        coach_max_tokens: int | None = None,
        reject_on: Sequence[str] = REJECT_ON,
    ) -> None:
        if min_concerns_for_hint < 1:
            raise ValueError("min_concerns_for_hint must be at least 1")
        self.coach = coach
        self.judges = judges if judges is not None else coach
        self.consult_always = consult_always
        self.min_concerns_for_hint = min_concerns_for_hint
        self.max_rejections = max_rejections
        self.judge_max_tokens = judge_max_tokens
        self.coach_max_tokens = coach_max_tokens
        self.reject_on = tuple(reject_on)
        self.memory: list[TurnSummary] = []
        self.rejections = 0

    def __repr__(self) -> str:
        return f"CoachJudge(coach={_name(self.coach)!r}, judges={_name(self.judges)!r})"

    # -- the protocol ------------------------------------------------------------------------

    def resume(self, turns: list[Turn], context: dict[str, Any]) -> None:
        """Rebuild the rolling memory and the rejection count from recorded turns."""
        self.memory = [summarize_turn(t) for t in turns]
        self.rejections = sum(1 for t in turns if t.coach and t.coach.get("decision") == "REJECT")

    def review(self, turn: Turn, context: dict[str, Any]) -> dict[str, Any]:
        """Judge a completed turn and decide PASS / HINT / REJECT (module docstring)."""
        started = time.time()
        history: list[Turn] = list(context.get("history") or [])
        if "history" in context and (
            len(self.memory) != len(history)
            or any(s.turn != t.turn for s, t in zip(self.memory, history, strict=False))
        ):
            self.resume(history, context)
        summary = summarize_turn(turn)
        kind = summary.kind
        roles = [*ALWAYS_ROLES, KIND_ROLE[kind]]
        report: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        for role in roles:
            asked = self._ask(
                self.judges,
                judge_messages(role, turn, self.memory, history, context),
                judge_schema(role),
                lambda text, role=role: parse_judge_reply(text, role),
                f"judge:{role}",
                self.judge_max_tokens,
            )
            calls.extend(asked.calls)
            entry: dict[str, Any] = {
                "role": role,
                "title": ROLES[role].title,
                "valid": asked.parsed is not None,
                "reasoning": "",
                "ratings": {},
                "concerns": [],
                "error": asked.error,
            }
            if asked.parsed is not None:
                ratings = dict(asked.parsed)
                entry["reasoning"] = ratings.pop("reasoning")
                entry["ratings"] = ratings
                entry["concerns"] = concerns_of(role, ratings)
            report.append(entry)
        concerns = [c for j in report for c in j["concerns"]]
        is_final = kind == "conclusion"
        reject_signals = [x for x in rating_signals(report) if x in self.reject_on]

        proposal: dict[str, Any] | None = None
        coach_error: str | None = None
        consulted = bool(concerns) or (is_final and bool(reject_signals)) or self.consult_always
        if consulted:
            asked = self._ask(
                self.coach,
                coach_messages(turn, summary, report, concerns, history, context),
                coach_schema(),
                parse_coach_reply,
                "coach",
                self.coach_max_tokens,
            )
            calls.extend(asked.calls)
            proposal, coach_error = asked.parsed, asked.error
            decision, notes = apply_guard(
                proposal,
                is_finalizing=is_final,
                concerns=concerns,
                min_concerns_for_hint=self.min_concerns_for_hint,
                rejections_so_far=self.rejections,
                max_rejections=self.max_rejections,
                reject_signals=reject_signals,
            )
        else:
            decision = "PASS"
            notes = ["no concern or rejection signal in the report: PASS without consulting "
                     "the coach"]

        message = ""
        if decision != "PASS":
            message = (proposal or {}).get("message", "").strip()
            if not message:
                message = fallback_message(decision, report, concerns)
                notes.append("the coach wrote no message: built one from the report")
        if decision == "REJECT":
            self.rejections += 1
        self.memory.append(summary)
        return {
            "version": REPORT_VERSION,
            "decision": decision,
            "message": message,
            "rationale": (proposal or {}).get("rationale", ""),
            "proposed": proposal,
            "consulted": consulted,
            "coach_error": coach_error,
            "guard": notes,
            "turn_kind": kind,
            "finalizing": is_final,
            "summary": summary.to_dict(),
            "report": report,
            "concerns": concerns,
            "models": {"judges": _name(self.judges), "coach": _name(self.coach)},
            "calls": calls,
            "latency_s": round(sum(c["latency_s"] for c in calls), 6),
            "tokens_in": sum(c["tokens_in"] for c in calls),
            "tokens_out": sum(c["tokens_out"] for c in calls),
            "started_at": started,
            "ended_at": time.time(),
        }

    # -- model calls -------------------------------------------------------------------------

    def _ask(
        self,
        backend: Any,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        parse: Any,
        purpose: str,
        max_tokens: int | None,
    ) -> _Asked:
        """One structured call, retried once with a correction; never raises except on a
        replay cache miss."""
        out = _Asked(parsed=None, error=None)
        convo = list(messages)
        for attempt in (1, 2):
            record: dict[str, Any] = {
                "purpose": purpose, "model": _name(backend), "attempt": attempt,
                "latency_s": 0.0, "tokens_in": 0, "tokens_out": 0, "cached": False, "error": None,
            }  # fmt: skip
            out.calls.append(record)
            try:
                completion = backend.complete(convo, json_schema=schema, max_tokens=max_tokens)
            except _cache_miss():
                raise
            except Exception as exc:  # a refused request or a broken reply: no signal
                if _must_stop(exc):
                    raise
                record["error"] = f"{type(exc).__name__}: {clip(str(exc), 300, space='squash')}"
                out.error = record["error"]
                return out
            record.update(
                latency_s=round(float(completion.latency_s or 0.0), 6),
                tokens_in=int(completion.tokens_in or 0),
                tokens_out=int(completion.tokens_out or 0),
                cached=bool(completion.cached),
            )
            text = completion.text or ""
            try:
                out.parsed = parse(text)
                out.error = None
                return out
            except ReplyError as exc:
                record["error"] = f"invalid reply: {exc}"
                out.error = record["error"]
                record["reply"] = clip(text, 300, space="squash")
                correction = _template("correction.txt").substitute(problem=str(exc))
                convo = [*messages, {"role": "assistant", "content": text},
                         {"role": "user", "content": correction.strip()}]
        return out


def _name(backend: Any) -> str:
    spec = getattr(backend, "spec", None)
    return str(getattr(spec, "name", None) or type(backend).__name__)


def make_coach(
    model_name: str,
    cache_mode: str = "use",
    judge_model: str | None = None,
    **options: Any,
) -> CoachJudge:
    """A :class:`CoachJudge` whose coach is the registry model ``model_name`` and whose judges
    are ``judge_model`` (default: the same model), both through the response cache.

    The paper used DeepSeek-V3 for both (``deepseek-v3``); offline the embedded
    ``smollm2-135m`` serves, on a loopback server of its own so the agent's server keeps its
    prompt prefix warm. ``options`` go to :class:`CoachJudge`.
    """
    from adakit.llm.models import ResponseCache, backend_for, get_model

    def backend(name: str) -> Any:
        spec = get_model(name)
        if spec.kind == "baseline":
            raise ValueError(
                f"model {name!r} is a scripted baseline; the coach and judges need a chat model "
                "(e.g. smollm2-135m offline, deepseek-v3 as in the paper)"
            )
        if spec.kind == "local" and (spec.context_window or 0) != LOCAL_COACH_CONTEXT:
            spec = dataclasses.replace(spec, context_window=LOCAL_COACH_CONTEXT)
        return backend_for(spec, cache=ResponseCache(), cache_mode=cache_mode)  # type: ignore

    coach = backend(model_name)
    judges = coach if judge_model in (None, model_name) else backend(judge_model)
    return CoachJudge(coach, judges, **options)


__all__ = [
    "ALWAYS_ROLES", "DECISIONS", "MIN_CONCERNS_FOR_HINT", "REJECT_ON", "ROLES", "TURN_KINDS",
    "CoachJudge", "Dim", "ReplyError",
    "Role", "TurnSummary", "apply_guard", "coach_messages", "coach_schema", "concerns_of",
    "fallback_message", "finalizing", "judge_messages", "judge_schema", "make_coach",
    "parse_coach_reply", "parse_judge_reply", "rating_signals", "reply_format", "reply_model",
    "summarize_turn",
    "turn_kind",
]
