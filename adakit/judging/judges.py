"""J, the post-hoc judges of lens 3 (paper §3.4, §4.2.3, Appendix C.1).

Five evaluation families read a finished corpus. Three rate the final conclusion on a 1-4
ordinal scale (task relevance, trace grounding, termination calibration) and are answered by a
panel of judge models, one row per judge (the vote is :func:`adakit.judging.agreement.aggregate_votes`);
two rate single steps
(navigation prior usage for every OVW/PKR/EXP action, reasoning prior usage for every
MEM/BKM/HNT/CON artifact) on an evidence-orientation scale 0 / 0.5 / 1 and are answered by one
judge. "unclear" is always allowed and scores NaN.

Every item is built from a run file into a compact, capped context and anonymised: no model,
condition, study or run id reaches a judge, injected reminders and coach messages are
stripped, sentences that talk about budgets are redacted, clauses that mention a coach, a
reviewer or a panel returning the agent's conclusion are redacted, and in the agent's own
words model family and vendor names ("As GPT-4", "created by Alibaba") and turn limits
("my 12-turn limit") are replaced where they stand, so the rest of the sentence survives. Judges reply with
JSON ``{rationale, label, evidence}`` validated against a schema; an invalid reply is retried
with a corrective message, and a verdict that still fails is stored as missing (label None,
score NaN, valid False), never as a low score. Verdicts are appended one per line to
``judgments.jsonl`` beside the corpus (so a crash loses nothing and a re-run resumes), and the
tidy ``judgments.parquet`` is rebuilt from it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import re
import string
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from functools import cache, lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import pandas as pd
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    create_model,
)
from tqdm.auto import tqdm

from adakit import config
from adakit.llm.replies import ReplyError, json_object
from adakit.record import (
    ACT_ORDER,
    COG,
    NAV,
    TOOL_ABBR,
    RunFile,
    Turn,
    iter_run_files,
    merge_ranges,
    read_run,
)

JUDGE_PROMPTS = config.PROMPTS / "judges"

#: The offline judge: the embedded local model (registry name).
LOCAL_JUDGE = "qwen2.5-coder-1.5b"
#: The paper's conclusion-level panel (Appendix C.1), as registered in ``models.yaml``.
PAPER_PANEL = ("glm-5", "kimi-k2.5", "minimax-m2.7")
#: The offline default panel: the local model in every seat.
DEFAULT_PANEL = (LOCAL_JUDGE, LOCAL_JUDGE, LOCAL_JUDGE)

#: Columns of the tidy judgments table, in order.
JUDGMENT_COLUMNS = [
    "item_id", "run_id", "family", "judge", "turn", "tool", "label", "score", "rationale",
    "evidence", "valid", "cached", "latency_s",
]  # fmt: skip

UNCLEAR = "unclear"
#: The judges' reply cap in tokens: the paper's 2048 (Appendix A.2.1 and C.1). Small local
#: judges can be given less per study (``judge: max_tokens``) or with ``--max-tokens``.
REPLY_MAX_TOKENS = 2048
RATIONALE_MAX = 300
EVIDENCE_ITEMS = 3
EVIDENCE_MAX = 120


# ============================================================================== families


@dataclass(frozen=True)
class Family:
    """One evaluation family: its level, ordered labels with their scores, and its template."""

    name: str
    title: str
    level: Literal["conclusion", "turn"]
    labels: tuple[str, ...]
    scores: tuple[float, ...]
    tools: frozenset[str] = frozenset()

    @property
    def allowed(self) -> tuple[str, ...]:
        """Every label a reply may carry (the ordered ones, then "unclear")."""
        return (*self.labels, UNCLEAR)

    def score(self, label: str | None) -> float:
        """The numeric score of a label; NaN for "unclear" or a missing label."""
        if label is None or label == UNCLEAR:
            return math.nan
        return self.scores[self.labels.index(label)]

    @property
    def template(self) -> str:
        return (JUDGE_PROMPTS / f"{self.name}.txt").read_text(encoding="utf-8")


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "task_relevance",
            "Task relevance",
            "conclusion",
            ("not-addressed", "partly-addressed", "mostly-addressed", "fully-addressed"),
            (1.0, 2.0, 3.0, 4.0),
        ),
        Family(
            "trace_grounding",
            "Trace grounding",
            "conclusion",
            ("unsupported", "weakly-supported", "mostly-supported", "well-supported"),
            (1.0, 2.0, 3.0, 4.0),
        ),
        Family(
            "termination_calibration",
            "Termination calibration",
            "conclusion",
            ("premature", "borderline", "defensible", "ready-to-finalize"),
            (1.0, 2.0, 3.0, 4.0),
        ),
        Family(
            "navigation_prior",
            "Navigation prior usage",
            "turn",
            ("evidence-led", "mixed", "prior-led"),
            (0.0, 0.5, 1.0),
            NAV,
        ),
        Family(
            "reasoning_prior",
            "Reasoning prior usage",
            "turn",
            ("trajectory-grounded", "mixed", "prior-shaped"),
            (0.0, 0.5, 1.0),
            COG,
        ),
    )
}
CONCLUSION_FAMILIES = tuple(n for n, f in FAMILIES.items() if f.level == "conclusion")
TURN_FAMILIES = tuple(n for n, f in FAMILIES.items() if f.level == "turn")


def get_family(name: str) -> Family:
    """The family called ``name`` (clear error listing the known ones)."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(
            f"unknown evaluation family {name!r}; known: {', '.join(FAMILIES)}"
        ) from None


# ============================================================================== replies


@cache
def reply_model(family: str) -> type[BaseModel]:
    """The pydantic model of a reply for ``family`` (label restricted to its allowed labels)."""
    fam = get_family(family)
    label_type = Literal[fam.allowed]  # type: ignore[valid-type]
    return create_model(
        f"{''.join(p.title() for p in family.split('_'))}Reply",
        __config__=ConfigDict(extra="ignore"),
        rationale=(str, Field(max_length=RATIONALE_MAX)),
        label=(label_type, ...),
        evidence=(
            list[Annotated[str, StringConstraints(max_length=EVIDENCE_MAX)]],
            Field(default_factory=list, max_length=EVIDENCE_ITEMS),
        ),
    )


def reply_schema(family: str) -> dict[str, Any]:
    """The JSON schema sent for constrained decoding: every string and list is capped so a
    reply finishes within the token limit."""
    fam = get_family(family)
    return {
        "type": "object",
        "properties": {
            "rationale": {"type": "string", "minLength": 1, "maxLength": RATIONALE_MAX},
            "label": {"type": "string", "enum": list(fam.allowed)},
            "evidence": {
                "type": "array",
                "items": {"type": "string", "minLength": 1, "maxLength": EVIDENCE_MAX},
                "maxItems": EVIDENCE_ITEMS,
            },
        },
        "required": ["rationale", "label", "evidence"],
    }


@dataclass
class Verdict:
    """A parsed, valid judge reply."""

    label: str
    score: float
    rationale: str
    evidence: list[str]


def _normalise_label(raw: Any, fam: Family) -> Any:
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        return raw
    text = str(raw).strip().strip("\"'").lower()
    text = re.sub(r"[\s_]+", "-", text)
    if text in fam.allowed:
        return text
    if fam.level == "conclusion" and re.fullmatch(r"[1-4](\.0)?", text):
        return fam.labels[int(float(text)) - 1]  # a bare ordinal instead of its name
    return raw


def parse_reply(text: str, family: str) -> Verdict:
    """Validate a judge reply for ``family``; raises :class:`ReplyError` with a message the
    judge can act on. Over-long rationale and evidence are cut to the schema's caps."""
    fam = get_family(family)
    data = json_object(text)
    data = {str(k).lower(): v for k, v in data.items()}
    if "label" in data:
        data["label"] = _normalise_label(data["label"], fam)
    if isinstance(data.get("rationale"), str):
        data["rationale"] = data["rationale"].strip()[:RATIONALE_MAX]
    ev = data.get("evidence")
    if isinstance(ev, str):
        ev = [ev]
    if isinstance(ev, list):
        ev = [str(e).strip()[:EVIDENCE_MAX] for e in ev if str(e).strip()]
        data["evidence"] = ev[:EVIDENCE_ITEMS]
    try:
        reply = reply_model(family).model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "reply"
            if where == "label":
                problems.append(
                    f"'label' must be exactly one of {', '.join(fam.allowed)} "
                    f"(got {data.get('label')!r})"
                )
            else:
                problems.append(f"'{where}': {err['msg']}")
        raise ReplyError("; ".join(problems) + ".") from None
    if not reply.rationale:
        raise ReplyError("'rationale' is empty; give one or two sentences.")
    return Verdict(
        label=reply.label,
        score=fam.score(reply.label),
        rationale=reply.rationale,
        evidence=list(reply.evidence),
    )


# ============================================================================== anonymising

#: Sentences that would reveal a launch condition (budgets, reminders, the evidence-first
#: stance) are replaced in agent text before a judge sees it.
DEFAULT_REDACTIONS: tuple[str, ...] = (
    r"\bbudget",
    r"\b(?:\d+|one|two|three|four|five|a few|few)\s+(?:more\s+)?(?:exploration\s+)?"
    r"(?:turns?|steps?|calls?)\s+(?:left|remaining|remain)\b",
    r"\b(?:last|final|remaining)\s+(?:exploration\s+)?turns?\b",
    r"\bturns?\s+(?:left|remaining)\b",
    r"\breminder",
    r"\bweak hunch\b",
    r"\bevidence[- ]first\b",
    r"\bprior (?:familiarity|knowledge)\b",
)
#: Clauses that would reveal the coach-judge condition (a coach, a reviewer or panel that
#: returned, rejected or flagged something) are replaced clause by clause, so the rest of the
#: sentence (what the agent does next) still reaches the judge.
CLAUSE_REDACTIONS: tuple[str, ...] = (
    r"\bcoach",
    r"\bthe reviewers?\b",
    r"\breviewers?\s+(?:returned|rejected|flagged|said|says|asked|asks|wants?|noted|"
    r"suggested|pointed|found)\b",
    r"\b(?:the|a|review|judge|judging)\s+panel\b",
    r"\bpanel\s+(?:of\s+judges|returned|rejected|flagged|said|says|noted|suggested|found)\b",
    r"\bthe judges?\b",
    r"\b(?:returned|rejected|bounced)\s+my\s+(?:previous\s+|last\s+|first\s+)?"
    r"(?:conclusion|answer|submission|finali[sz]ation)",
    r"\bmy\s+(?:previous\s+|last\s+|first\s+)?(?:conclusion|answer|submission)\s+"
    r"(?:was|got|has been)\s+(?:rejected|returned|bounced|refused)",
)
#: Phrases in the agent's own words that name a model family or vendor (the trajectory's
#: model), or state a turn limit (the budget condition); each is replaced where it stands.
PHRASE_REDACTIONS: tuple[str, ...] = (
    r"\b(?:Chat)?GPT[- ]?\d(?:\.\d)?(?:o|[- ]?turbo|[- ]?mini)?\b",
    r"\bChatGPT\b",
    r"\bOpenAI\b",
    r"\bAnthropic\b",
    r"\bClaude(?:[- ]\d(?:\.\d)?)?\b",
    r"\bAlibaba(?:\s+Cloud)?\b",
    r"\bQwen[\w.\-]*",
    r"\bDeep[- ]?Seek[\w.\-]*",
    r"\bGemini\b",
    r"\bGemma[\w.\-]*",
    r"\bLlama[- ]?\d[\w.\-]*|\bLLaMA\b|\bMeta AI\b",
    r"\bMi[sx]tral\b",
    r"\bMoonshot(?:\s+AI)?\b",
    r"\bKimi[\w.\-]*",
    r"\bZhipu(?:\s+AI)?\b",
    r"(?-i:\b(?:Chat)?GLM(?:[- ]?\d[\w.\-]*)?\b)",  # not sklearn's glm modules
    r"(?-i:\bMiniMax[\w.\-]*)",  # not the minimax algorithm
    r"\bSmolLM[\w.\-]*",
    r"\bHugging ?Face\b",
    r"\bGitHub Copilot\b|\bCopilot\b",
    r"(?-i:\bGrok\b|\bxAI\b)",  # not the verb "to grok"
    r"\b(?:my|our|the|a|an)?\s*\d+[- ]?(?:turn|step|call)s?\s*(?:limit|budget|bound|cap|"
    r"allowance|maximum|max)\b",
    r"\b(?:limit|budget|maximum|max|cap)\s+of\s+\d+\s+(?:turns?|steps?|calls?)\b",
    r"\b(?:within|in|only)\s+\d+\s+(?:turns?|steps?)\b",
    r"\bturn\s+\d+\s*(?:of|/)\s*\d+\b",
)
REDACTED = "[redacted]"
# a sentence ends at . ! ? followed by white space (so "app.py" does not end one) or a newline
_SENTENCE_RE = re.compile(r"(?:[^.!?\n]|[.!?]+(?=[^\s.!?]))*(?:[.!?]+(?=\s|$)|\n|$)")
# a clause ends at , ; : ( ) or a dash, or where its sentence ends
_CLAUSE_RE = re.compile(r"[^,;:()\u2013\u2014\n]+")


@dataclass
class Anonymiser:
    """Removes identifying strings and condition-revealing sentences from agent text."""

    terms: tuple[str, ...] = ()
    redactions: tuple[str, ...] = DEFAULT_REDACTIONS
    clauses: tuple[str, ...] = CLAUSE_REDACTIONS
    phrases: tuple[str, ...] = PHRASE_REDACTIONS

    def __post_init__(self) -> None:
        terms = sorted({t for t in self.terms if t and len(t.strip()) >= 3}, key=len, reverse=True)
        self._terms = (
            re.compile(
                r"(?<![\w])(?:" + "|".join(re.escape(t) for t in terms) + r")(?![\w])",
                re.IGNORECASE,
            )
            if terms
            else None
        )
        self._redact = (
            re.compile("|".join(f"(?:{p})" for p in self.redactions), re.IGNORECASE)
            if self.redactions
            else None
        )
        self._clause = (
            re.compile("|".join(f"(?:{p})" for p in self.clauses), re.IGNORECASE)
            if self.clauses
            else None
        )
        self._phrase = (
            re.compile("|".join(f"(?:{p})" for p in self.phrases), re.IGNORECASE)
            if self.phrases
            else None
        )

    def __call__(self, text: str | None, redact: bool = True) -> str:
        """``text`` with identifying terms replaced and (``redact``, the agent's own words)
        condition-revealing sentences and clauses removed and model, vendor and turn-limit
        phrases replaced where they stand; tool results pass ``redact=False`` (repository
        text is evidence)."""
        if not text:
            return ""
        if redact and self._redact is not None and self._redact.search(text):
            text = _SENTENCE_RE.sub(self._redact_sentence, text)
        if redact and self._clause is not None and self._clause.search(text):
            text = _CLAUSE_RE.sub(self._redact_clause, text)
        if redact and self._phrase is not None:
            text = self._phrase.sub(self._redact_phrase, text)
        if self._terms is not None:
            text = self._terms.sub(REDACTED, text)
        return text

    def _redact_clause(self, m: re.Match[str]) -> str:
        clause = m.group(0)
        if self._clause is not None and self._clause.search(clause):
            lead = clause[: len(clause) - len(clause.lstrip())]
            tail = clause[len(clause.rstrip()):]
            end = re.search(r"[.!?]+$", clause.rstrip())  # keep the sentence's full stop
            return lead + REDACTED + (end.group(0) if end else "") + tail
        return clause

    @staticmethod
    def _redact_phrase(m: re.Match[str]) -> str:
        text = m.group(0)
        turn = re.match(r"(turn\s+\d+)\s*(?:of|/)", text, re.IGNORECASE)
        if turn:  # "turn 5 of 12": the position stays, the limit goes
            return turn.group(1)
        lead = text[: len(text) - len(text.lstrip())]
        return lead + REDACTED

    def _redact_sentence(self, m: re.Match[str]) -> str:
        sentence = m.group(0)
        if sentence.strip() and self._redact is not None and self._redact.search(sentence):
            return REDACTED + ("\n" if sentence.endswith("\n") else "")
        return sentence


def _variants(name: str) -> list[str]:
    out = {name}
    for sep in ("_", "-", " ", "."):
        for rep in ("_", "-", " "):
            out.add(name.replace(sep, rep))
    return [v for v in out if v]


@lru_cache(maxsize=1)
def _registry_terms() -> tuple[str, ...]:
    try:
        from adakit.llm.models import load_registry

        specs = load_registry()
    except Exception:  # noqa: BLE001 - a broken user registry must not stop adjudication
        return ()
    terms: list[str] = []
    for spec in specs.values():
        terms += _variants(spec.name)
        if spec.model_id:
            terms += _variants(spec.model_id)
            terms.append(spec.model_id.rsplit("/", 1)[-1])
    return tuple(terms)


@lru_cache(maxsize=1)
def _condition_terms() -> tuple[str, ...]:
    try:
        import yaml

        data = yaml.safe_load(config.CONDITIONS_FILE.read_text(encoding="utf-8")) or {}
    except (OSError, ValueError):
        return ()
    return tuple(str(k) for k in data if isinstance(k, str))


def _condition_variants(name: str) -> list[str]:
    # A one-word condition name ("natural", "combined") is an ordinary word in prose and is
    # left alone; compound names ("budget_pressure") are removed in every spelling.
    if not re.search(r"[_\-\s.]", name):
        return []
    return _variants(name)


#: Names of the agents adakit imports, removed from every imported run's text (a judge must
#: not learn which agent it reads, as it never learns which model).
AGENT_NAMES: tuple[str, ...] = (
    "SWE-agent", "SWE agent", "sweagent", "mini-swe-agent", "mini swe agent", "mini-SWE-agent",
    "OpenHands", "Open Hands", "OpenDevin", "CodeActAgent", "CodeAct",
)


def anonymiser_for(rf: RunFile, redactions: Sequence[str] = DEFAULT_REDACTIONS) -> Anonymiser:
    """The anonymiser of one run: its model, run id, study and condition names (plus every
    registered model and known compound condition name) are replaced."""
    h = rf.header
    terms: list[str] = [h.run_id, h.study]
    terms += _variants(h.model.name) + _variants(h.model.model_id)
    if h.model.model_id:
        terms.append(h.model.model_id.rsplit("/", 1)[-1])
    if h.model.base_url:
        terms.append(h.model.base_url)
    if h.model.kind == "baseline":  # scripted baselines name themselves in their notes
        core = re.sub(r"^baseline[-_ ]?", "", h.model.name)
        terms += [*_variants(core), "scripted baseline", "baseline"]
    terms += _condition_variants(h.condition.name)
    for cond in _condition_terms():
        terms += _condition_variants(cond)
    terms += _registry_terms()
    if h.source is not None:  # an imported run: its agent and source file name it too
        terms += _variants(h.source.agent) + _variants(h.source.format) + list(AGENT_NAMES)
        terms += [h.source.file, h.source.file.rsplit("/", 1)[-1]]
    return Anonymiser(tuple(terms), tuple(redactions))


# ============================================================================== context


@dataclass(frozen=True)
class ContextCaps:
    """Character caps of every context section (the local judge has an 8k-token context;
    ``prompt`` caps the whole user message, shrinking all sections together if needed)."""

    task: int = 1200
    conclusion: int = 3000
    scope_note: int = 300
    prefix_summary: int = 1800
    prefix_line: int = 160
    excerpt: int = 2400
    excerpt_turns: int = 4
    snippets: int = 2400
    snippet_lines: int = 4
    trajectory_summary: int = 1200
    coverage: int = 1000
    structure: int = 1200
    window: int = 2000
    window_turns: int = 3
    thinking: int = 400
    observation: int = 500
    action: int = 1200
    artifact: int = 1500
    prompt: int = 14000

    def scaled(self, factor: float) -> ContextCaps:
        """Every character cap multiplied by ``factor`` (counts of turns and lines kept)."""
        keep = {"excerpt_turns", "window_turns", "snippet_lines", "prompt"}
        changes = {
            f.name: max(40, int(getattr(self, f.name) * factor))
            for f in fields(self)
            if f.name not in keep
        }
        return replace(self, **changes)


def clip(text: str, cap: int) -> str:
    """``text`` cut to at most ``cap`` characters, saying how much was cut."""
    text = text.strip()
    if len(text) <= cap:
        return text
    keep = max(0, cap - len(f" [... {len(text)} more characters]"))
    kept = text[:keep].rstrip()
    return f"{kept} [... {len(text) - len(kept)} more characters]"


def clip_lines(lines: Sequence[str], cap: int, keep: Literal["head", "tail"] = "head") -> str:
    """Whole lines up to ``cap`` characters, from the head or the tail, noting what was left."""
    out: list[str] = []
    used = 0
    seq = list(lines) if keep == "head" else list(reversed(lines))
    for line in seq:
        if used + len(line) + 1 > cap and out:
            break
        out.append(line if len(line) <= cap else clip(line, cap))
        used += len(line) + 1
    dropped = len(lines) - len(out)
    if keep == "tail":
        out.reverse()
        if dropped:
            out.insert(0, f"(... {dropped} earlier lines omitted)")
    elif dropped:
        out.append(f"(... {dropped} more lines omitted)")
    return "\n".join(out) if out else "(none)"


def _strip_injected(turn: Turn) -> str:
    """The observation without any injected reminder or coach text."""
    obs = turn.observation or ""
    for inj in turn.injected:
        text = inj.text.strip()
        if text:
            obs = obs.replace(text, "")
    return obs.strip()


def _abbr(turn: Turn) -> str | None:
    if turn.metrics.tool:
        return turn.metrics.tool
    if turn.call is not None:
        return TOOL_ABBR.get(turn.call.tool)
    return None


def _short(value: Any, cap: int = 60) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= cap else text[: cap - 3] + "..."


def _ranges(turn: Turn) -> str:
    return ",".join(f"{a}-{b}" for a, b in turn.metrics.ranges)


def turn_line(turn: Turn, anon: Anonymiser, cap: int = 160, outcome: bool = True) -> str:
    """One line for a turn: tool, key parameters, and (``outcome``) where it landed."""
    head = f"t{turn.turn}"
    if turn.call is None:
        kind = turn.parse_error.kind if turn.parse_error else "no tool call"
        return f"{head} (malformed reply: {kind})"
    abbr = _abbr(turn) or turn.call.tool
    params = ", ".join(f"{k}={_short(v)}" for k, v in turn.call.params.items())
    parts = [f"{head} {abbr} {params}"]
    m = turn.metrics
    if outcome and m.error_type:
        parts.append(f"[error: {m.error_type}]")
    elif outcome:
        if m.file and m.ranges and abbr in NAV:
            parts.append(f"-> {m.file}:{_ranges(turn)}")
        if m.result_count is not None:
            parts.append(f"({m.result_count} results)")
    return clip(anon(" ".join(parts)), cap)


def turn_detail(turn: Turn, anon: Anonymiser, caps: ContextCaps) -> str:
    """A turn in more detail: its line, the agent's reasoning, and the (clipped) result."""
    lines = [f"[{turn_line(turn, anon, caps.prefix_line * 2)}]"]
    if turn.thinking.strip():
        lines.append("reasoning: " + clip(anon(turn.thinking), caps.thinking))
    obs = _strip_injected(turn)
    if obs:
        lines.append("result: " + clip(anon(obs, redact=False), caps.observation))
    return "\n".join(lines)


def _viewed(rf: RunFile) -> dict[str, list[tuple[int, int]]]:
    files: dict[str, list[tuple[int, int]]] = {}
    for t in rf.turns:
        m = t.metrics
        if m.file and m.error_type is None and m.tool in NAV:
            files.setdefault(m.file, []).extend(m.ranges)
    return {f: merge_ranges(r) for f, r in files.items()}


def snippet_summary(rf: RunFile, anon: Anonymiser, caps: ContextCaps) -> str:
    """The files and line ranges the run viewed, then the opening lines of each view."""
    viewed = _viewed(rf)
    if not viewed:
        return "(the run viewed no code)"
    listing = []
    for f, ranges in viewed.items():
        span = ",".join(f"{a}-{b}" for a, b in ranges) or "outline"
        listing.append(f"- {f}: lines {span}")
    head = clip_lines([anon(x) for x in listing], caps.snippets // 3)
    blocks: list[str] = []
    seen: set[tuple[str, str]] = set()
    for t in rf.turns:
        m = t.metrics
        if not m.file or m.error_type is not None or m.tool not in NAV:
            continue
        key = (m.file, _ranges(t))
        if key in seen:
            continue
        seen.add(key)
        obs_lines = [ln[:120] for ln in _strip_injected(t).splitlines() if ln.strip()]
        if not obs_lines:
            continue
        body = "\n".join(obs_lines[: caps.snippet_lines + 1])
        head_line = f"t{t.turn} {m.tool} {m.file}:{_ranges(t) or 'outline'}"
        blocks.append(anon(f"{head_line}\n{body}", redact=False))
    rest = caps.snippets - len(head) - 2
    body = clip_lines(blocks, max(rest, 40)) if blocks else "(no text recorded)"
    return head + "\n\n" + body


def _rle(tools: Sequence[str]) -> str:
    out: list[str] = []
    for tool in tools:
        if out and out[-1].split("x")[0] == tool:
            name, _, n = out[-1].partition("x")
            out[-1] = f"{name}x{int(n or 1) + 1}"
        else:
            out.append(tool)
    return " ".join(out)


_ENDINGS = {
    "finalize": "the agent ended the run itself with a final conclusion",
    "turn_bound": "the run reached its turn limit",
    "malformed_limit": "the run stopped after repeated malformed replies",
    "model_error": "the run stopped because the model could not be reached",
    "context_overflow": "the run stopped because its context was full",
    "submit": "the agent submitted its result and ended the run",
    "cost_limit": "the run stopped at its cost limit",
    "agent_exit": "the run ended another way",
}


def trajectory_summary(rf: RunFile, anon: Anonymiser, caps: ContextCaps) -> str:
    """Turns, how the run ended, tool counts and the tool sequence (run-length encoded)."""
    tools = [(_abbr(t) or "ERR") if t.call is not None else "ERR" for t in rf.turns]
    counts = Counter(tools)
    order = [*TOOL_ABBR.values(), *ACT_ORDER, "ERR"]
    count_text = ", ".join(f"{k} {counts[k]}" for k in order if counts.get(k))
    errors = sum(1 for t in rf.turns if t.metrics.error_type is not None)
    ending = _ENDINGS.get(rf.end.reason, rf.end.reason) if rf.end else "the run did not finish"
    lines = [
        f"Turns: {len(rf.turns)}; ending: {ending}.",
        f"Tool calls: {count_text or 'none'} (ERR = malformed reply"
        + ("; EDT edit, EXE execute, SUB submit" if any(k in counts for k in ACT_ORDER) else "")
        + ").",
        f"Tool errors: {errors}.",
        "Sequence: " + _rle(tools),
    ]
    return clip(anon("\n".join(lines)), caps.trajectory_summary)


def _dirs_of(path: str, depth: int = 3) -> str:
    parts = path.split("/")[:-1]
    return "/".join(parts[:depth]) + "/" if parts else "./"


def _folder_depth(files: Sequence[str], limit: int = 40) -> int:
    """The deepest folder level (at most 6) at which the files fall into <= ``limit`` folders."""
    for depth in range(6, 1, -1):
        if len({_dirs_of(f, depth) for f in files}) <= limit:
            return depth
    return 1


def _world_files(world: Any) -> list[str]:
    if world is None:
        return []
    try:
        return list(world.source_files() or world.files())
    except OSError:
        return []


def coverage_summary(rf: RunFile, anon: Anonymiser, caps: ContextCaps, world: Any = None) -> str:
    """Distinct files and lines viewed, and the folders they lie in."""
    viewed = _viewed(rf)
    n_lines = sum(b - a + 1 for ranges in viewed.values() for a, b in ranges)
    structural = {t.metrics.file for t in rf.turns if t.metrics.structural and t.metrics.file}
    lines = [f"Distinct files viewed: {len(viewed)}; distinct lines read: {n_lines}."]
    if structural:
        lines.append(f"Files seen as structural outlines: {len(structural)}.")
    files = _world_files(world)
    if files:
        share = len(set(viewed) & set(files)) / len(files)
        lines.append(f"Source files in the repository: {len(files)} ({share:.0%} of them viewed).")
    depth = _folder_depth(files) if files else 3
    by_dir = Counter(_dirs_of(f, depth) for f in viewed)
    for d, n in sorted(by_dir.items()):
        lines.append(f"- {d}: {n} file(s) viewed")
    return clip_lines([anon(x) for x in lines], caps.coverage)


def structure_summary(rf: RunFile, anon: Anonymiser, caps: ContextCaps, world: Any = None) -> str:
    """The repository's folders with source-file counts and how many of them the run viewed;
    without the world at hand, the folders named in the run's own tool results."""
    viewed = list(_viewed(rf))
    files = _world_files(world)
    if files:
        depth = _folder_depth(files)
        counts = Counter(_dirs_of(f, depth) for f in files)
        seen = Counter(_dirs_of(f, depth) for f in set(viewed) & set(files))
        lines = [f"{len(files)} source files in {len(counts)} folders:"]
        for d in sorted(counts):
            lines.append(f"- {d} {counts[d]} files, {seen.get(d, 0)} viewed")
        return clip_lines([anon(x) for x in lines], caps.structure)
    visited = {_dirs_of(f) for f in viewed}
    named: Counter[str] = Counter()
    path_re = re.compile(r"[\w.\-]+(?:/[\w.\-]+)+")
    for t in rf.turns:
        if t.metrics.tool in NAV:
            for p in path_re.findall(_strip_injected(t)):
                named[_dirs_of(p)] += 1
        if t.metrics.file:
            named[_dirs_of(t.metrics.file)] += 1
    lines = ["(repository listing not available; folders named in the run's tool results)"]
    for d in sorted(named):
        lines.append(f"- {d} {'viewed' if d in visited else 'named only'}")
    return clip_lines([anon(x) for x in lines], caps.structure)


# ============================================================================== items


@dataclass
class JudgeItem:
    """One thing to judge: an opaque id, where it came from (kept out of the prompt), and the
    chat messages a judge receives."""

    item_id: str
    run_id: str
    family: str
    turn: int | None
    tool: str | None
    messages: list[dict[str, str]]

    @property
    def prompt_text(self) -> str:
        return "\n\n".join(m["content"] for m in self.messages)

    @property
    def prompt_sha256(self) -> str:
        """A digest of the messages: a stored verdict on other messages judged another run."""
        return hashlib.sha256(json.dumps(self.messages, sort_keys=True).encode()).hexdigest()


def item_id(run_id: str, family: str, turn: int | None = None) -> str:
    """The opaque, stable id of an item (a digest; it reveals nothing about the run)."""
    raw = f"{run_id}\x00{family}\x00{'' if turn is None else turn}"
    return "i" + hashlib.sha256(raw.encode()).hexdigest()[:12]


@lru_cache(maxsize=1)
def _concerns() -> dict[str, dict[str, list[str]]]:
    text = (JUDGE_PROMPTS / "task_concerns.txt").read_text(encoding="utf-8")
    out: dict[str, dict[str, list[str]]] = {}
    family: dict[str, list[str]] | None = None
    block: list[str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or (line.startswith("#") and not line.startswith("## ")):
            continue
        if line.startswith("## "):
            family = out.setdefault(line[3:].strip(), {})
            block = None
        elif line.endswith(":") and family is not None:
            block = family.setdefault(line[:-1].strip(), [])
        elif line.startswith("- ") and block is not None:
            block.append(line[2:].strip())
        else:
            raise ValueError(f"task_concerns.txt: cannot read line {raw!r}")
    return out


def task_concerns(family: str, target: str | None = None) -> dict[str, list[str]]:
    """Required / optional / off-task concerns of a task family (``default`` if unknown)."""
    table = _concerns()
    entry = table.get(family, table["default"])
    tgt = target or "the feature"
    return {k: [c.replace("{target}", tgt) for c in v] for k, v in entry.items()}


def _task_title(family: str) -> str:
    try:
        import yaml

        data = yaml.safe_load(config.TASKS_FILE.read_text(encoding="utf-8")) or {}
        entry = data.get(family)
        if isinstance(entry, dict) and entry.get("title"):
            return str(entry["title"])
    except (OSError, ValueError):
        pass
    return family.replace("_", " ").capitalize()


def _bullets(items: Sequence[str]) -> str:
    return "\n".join(f"- {c}" for c in items) if items else "- (none listed)"


class _Renderer:
    """Builds the context sections of one run under given caps."""

    def __init__(self, rf: RunFile, anon: Anonymiser, caps: ContextCaps, world: Any) -> None:
        self.rf, self.anon, self.caps, self.world = rf, anon, caps, world
        h = rf.header
        last_con = next(
            (t for t in reversed(rf.turns) if t.call and TOOL_ABBR.get(t.call.tool) == "CON"),
            None,
        )
        scope = str(last_con.call.params.get("scope_description", "")) if last_con else ""
        end = rf.end
        self.common = {
            "task_title": _task_title(h.task.family),
            "task_prompt": clip(anon(h.task.prompt), caps.task),
            "repository": anon(h.world.name),
            "conclusion_title": clip(
                anon((end.conclusion_title if end else None) or "(none)"), 200
            ),
            "conclusion": clip(anon((end.conclusion if end else None) or ""), caps.conclusion),
            "scope_note": clip(anon(scope), caps.scope_note) or "(none)",
        }

    def prefix(self, upto: int) -> str:
        """One line per turn before the local window of turn ``upto``."""
        before = [t for t in self.rf.turns if t.turn < upto]
        turns = before[: max(0, len(before) - self.caps.window_turns)]
        lines = [turn_line(t, self.anon, self.caps.prefix_line) for t in turns]
        return clip_lines(lines, self.caps.prefix_summary, keep="tail") if lines else "(none)"

    def window(self, upto: int) -> str:
        turns = [t for t in self.rf.turns if t.turn < upto][-self.caps.window_turns :]
        blocks = [turn_detail(t, self.anon, self.caps) for t in turns]
        return clip_lines(blocks, self.caps.window, keep="tail") if blocks else "(none)"

    def conclusion_fields(self, family: str) -> dict[str, str]:
        rf, anon, caps = self.rf, self.anon, self.caps
        if family == "task_relevance":
            c = task_concerns(rf.header.task.family, rf.header.task.target)
            return {
                "required": anon(_bullets(c.get("required", []))),
                "optional": anon(_bullets(c.get("optional", []))),
                "off_task": anon(_bullets(c.get("off-task", []))),
            }
        if family == "trace_grounding":
            n = caps.excerpt_turns
            early = rf.turns[:-n] if n else rf.turns
            late = rf.turns[-n:] if n else []
            prefix = (
                clip_lines(
                    [turn_line(t, anon, caps.prefix_line) for t in early], caps.prefix_summary
                )
                if early
                else "(none)"
            )
            excerpt = (
                clip_lines([turn_detail(t, anon, caps) for t in late], caps.excerpt, keep="tail")
                if late
                else "(none)"
            )
            return {
                "prefix_summary": prefix,
                "excerpt": excerpt,
                "snippets": snippet_summary(rf, anon, caps),
            }
        if family == "termination_calibration":
            return {
                "trajectory_summary": trajectory_summary(rf, anon, caps),
                "coverage": coverage_summary(rf, anon, caps, self.world),
                "structure": structure_summary(rf, anon, caps, self.world),
            }
        raise ValueError(f"{family!r} is not a conclusion-level family")

    def turn_fields(self, family: str, turn: Turn) -> dict[str, str]:
        anon, caps = self.anon, self.caps
        call = turn.call
        assert call is not None
        abbr = _abbr(turn) or call.tool
        base = {
            "turn": str(turn.turn),
            "prefix_summary": self.prefix(turn.turn),
            "window": self.window(turn.turn),
        }
        if family == "navigation_prior":
            params = "\n".join(f"{k}: {_short(v, 200)}" for k, v in call.params.items())
            action = f"reasoning: {turn.thinking.strip() or '(none)'}\ncall: {call.tool}\n{params}"
            return {
                **base,
                "tool_name": f"{abbr} ({call.tool})",
                "tool_summary": turn_line(turn, anon, caps.prefix_line, outcome=False),
                "action": clip(anon(action), caps.action),
            }
        if family == "reasoning_prior":
            return {**base, **_artifact(turn, abbr, anon, caps)}
        raise ValueError(f"{family!r} is not a turn-level family")


_ARTIFACT_TYPES = {"MEM": "memory", "BKM": "bookmark", "HNT": "hint request", "CON": "conclusion"}


def _artifact(turn: Turn, abbr: str, anon: Anonymiser, caps: ContextCaps) -> dict[str, str]:
    p = dict(turn.call.params) if turn.call else {}

    def take(*keys: str) -> str:
        for k in keys:
            if p.get(k) not in (None, ""):
                return str(p.pop(k))
        return ""

    if abbr == "MEM":
        title, content = take("memory_title", "title"), take("memory_content", "content")
        scope = take("confidence_level", "confidence")
        scope = f"confidence {scope}" if scope else ""
        action = "create a memory"
    elif abbr == "BKM":
        path, line = take("file_path"), take("line_number")
        title, content, scope = f"{path}:{line}", take("note"), ""
        action = "bookmark a location"
    elif abbr == "HNT":
        title = f"{take('file_path')} {take('code_range')}".strip()
        content = take("description_of_confusion")
        tried = take("what_i_tried_or_think")
        if tried:
            content += f"\nWhat the agent tried or thinks: {tried}"
        scope, action = "", "ask for a hint on a confusing snippet"
    else:  # CON
        title, content = take("title"), take("content")
        scope = take("scope_description")
        final = str(p.pop("proceed_to_finalize", "")).lower() in ("true", "1", "yes")
        action = "stash a conclusion and finish" if final else "stash an interim conclusion"
    extra = "\n".join(f"{k}: {_short(v, 200)}" for k, v in p.items())
    if extra:
        content = f"{content}\n{extra}".strip()
    if turn.thinking.strip():
        content = f"{content}\n(agent's reasoning before the note: {turn.thinking.strip()})"
    return {
        "artifact_type": f"{_ARTIFACT_TYPES.get(abbr, abbr)} ({abbr})",
        "artifact_action": action,
        "artifact_title": clip(anon(title), 200) or "(none)",
        "artifact_scope": clip(anon(scope), caps.scope_note) or "(none)",
        "artifact_content": clip(anon(content), caps.artifact) or "(empty)",
    }


@cache
def _template(name: str) -> string.Template:
    return string.Template((JUDGE_PROMPTS / f"{name}.txt").read_text(encoding="utf-8"))


def _render(family: str, values: dict[str, str]) -> list[dict[str, str]]:
    fam = get_family(family)
    system = _template(f"system_{fam.level}").substitute()
    user = _template(family).substitute(values)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _judgeable_turns(rf: RunFile, family: Family) -> list[Turn]:
    return [t for t in rf.turns if t.call is not None and _abbr(t) in family.tools]


def sample_evenly(items: Sequence[Any], k: int | None) -> list[Any]:
    """At most ``k`` items spread evenly over the sequence (all of them if k is None)."""
    if k is None or len(items) <= k:
        return list(items)
    if k <= 0:
        return []
    idx = np.unique(np.linspace(0, len(items) - 1, k).round().astype(int))
    return [items[i] for i in idx]


def build_items(
    rf: RunFile,
    families: Sequence[str] = tuple(FAMILIES),
    *,
    caps: ContextCaps | None = None,
    max_turn_items: int | None = None,
    world: Any = None,
    redactions: Sequence[str] = DEFAULT_REDACTIONS,
) -> list[JudgeItem]:
    """The judge items of one run: one per conclusion-level family (if the run has a
    conclusion) and one per matching step for the turn-level families (at most
    ``max_turn_items`` per family, spread over the run)."""
    caps = caps or ContextCaps()
    anon = anonymiser_for(rf, redactions)
    run_id = rf.header.run_id
    items: list[JudgeItem] = []
    for name in families:
        fam = get_family(name)
        if fam.level == "conclusion":
            if not (rf.end and (rf.end.conclusion or "").strip()):
                continue
            iid = item_id(run_id, name)

            def values(c: ContextCaps, n: str = name, i: str = iid) -> dict[str, str]:
                r = _Renderer(rf, anon, c, world)
                return {**r.common, **r.conclusion_fields(n), "item_id": i}

            messages = _fit(caps, values, name)
            items.append(JudgeItem(iid, run_id, name, None, None, messages))
        else:
            for turn in sample_evenly(_judgeable_turns(rf, fam), max_turn_items):
                iid = item_id(run_id, name, turn.turn)

                def tvalues(
                    c: ContextCaps, n: str = name, t: Turn = turn, i: str = iid
                ) -> dict[str, str]:
                    r = _Renderer(rf, anon, c, world)
                    return {**r.common, **r.turn_fields(n, t), "item_id": i}

                messages = _fit(caps, tvalues, name)
                items.append(JudgeItem(iid, run_id, name, turn.turn, _abbr(turn), messages))
    return items


def _fit(
    caps: ContextCaps, values: Callable[[ContextCaps], dict[str, str]], family: str
) -> list[dict[str, str]]:
    """Render the messages, shrinking every section until the user message fits the cap."""
    current = caps
    for _ in range(5):
        messages = _render(family, values(current))
        size = len(messages[-1]["content"])
        if size <= caps.prompt:
            return messages
        current = current.scaled(0.9 * caps.prompt / size)
    messages[-1]["content"] = clip(messages[-1]["content"], caps.prompt)
    return messages


_CELL_FIELDS = {
    "model": lambda h: h.model.name,
    "world": lambda h: h.world.name,
    "task": lambda h: h.task.family,
    "condition": lambda h: h.condition.name,
    "repeat": lambda h: h.repeat,
}


def sample_runs(runs: Sequence[RunFile], per_cell: int, by: Sequence[str]) -> list[RunFile]:
    """At most ``per_cell`` runs of every combination of ``by`` (spread over sorted run ids)."""
    unknown = [b for b in by if b not in _CELL_FIELDS]
    if unknown:
        raise ValueError(f"cannot group runs by {unknown}; use {', '.join(_CELL_FIELDS)}")
    cells: dict[tuple[Any, ...], list[RunFile]] = {}
    for rf in sorted(runs, key=lambda r: r.header.run_id):
        cells.setdefault(tuple(_CELL_FIELDS[b](rf.header) for b in by), []).append(rf)
    return [rf for key in sorted(cells, key=str) for rf in sample_evenly(cells[key], per_cell)]


# ============================================================================== judging


@dataclass(frozen=True)
class Seat:
    """A judge seat: the name used in the table and the registry model behind it."""

    name: str
    model: str


def panel_seats(models: Sequence[str]) -> list[Seat]:
    """Seats for a list of judge models; a model named more than once gets ``#k`` suffixes."""
    counts = Counter(models)
    seen: Counter[str] = Counter()
    seats = []
    for m in models:
        seen[m] += 1
        seats.append(Seat(f"{m}#{seen[m]}" if counts[m] > 1 else m, m))
    return seats


def panel_note(models: Sequence[str]) -> str | None:
    """A warning when the panel repeats a model (its seats then agree by construction)."""
    repeated = {m: n for m, n in Counter(models).items() if n > 1}
    if not repeated:
        return None
    words = {2: "twice", 3: "thrice"}
    parts = [f"{m} {words.get(n, f'{n} times')}" for m, n in repeated.items()]
    return (
        f"the panel is one model in several seats ({'; '.join(parts)}): each such model is asked "
        "once per item and its verdict is copied to its seats, so those seats agree by "
        "construction"
    )


def describe_panel(judges: Sequence[str]) -> str:
    """A plain sentence on what the panel's seats are, for notebooks: independent models, one
    model sampled at several temperatures, or one model whose verdict is copied to several
    seats (``m#1``, ``m#2``). Seats are looked up in the model registry by name."""
    from adakit.llm.models import load_registry

    seats = list(dict.fromkeys(str(j) for j in judges))
    if not seats:
        return "The table holds no judge."
    try:
        registry = load_registry()
    except Exception:  # noqa: BLE001 - a broken user registry must not stop a notebook
        registry = {}
    bases = [re.sub(r"#\d+$", "", s) for s in seats]
    copied = len(set(bases)) < len(bases)
    specs = [registry.get(b) for b in dict.fromkeys(bases)]
    if len(seats) == 1:
        return f"The table has a single judge ({seats[0]}): agreement cannot be measured."
    if copied and len(set(bases)) == 1:
        return (f"The panel is one model ({bases[0]}) in {len(seats)} seats whose verdict is "
                "copied to each seat: they agree by construction, so agreement is undefined.")
    if all(sp is not None for sp in specs):
        ids = {(sp.model_id or sp.name, sp.base_url) for sp in specs}  # type: ignore[union-attr]
        if len(ids) == 1 and len(specs) > 1:
            temps = ", ".join(str(sp.temperature) for sp in specs)  # type: ignore[union-attr]
            model = next(iter(ids))[0]
            return (f"The panel is ONE model ({model}) sampled at temperatures {temps} in "
                    f"{len(specs)} seats ({', '.join(dict.fromkeys(bases))}), not independent "
                    "judges: its agreement measures that model's sampling spread, and its "
                    "panel vote is that model's majority over samples.")
    unknown = [b for b, sp in zip(dict.fromkeys(bases), specs, strict=True) if sp is None]
    note = f" (not in the model registry: {', '.join(unknown)})" if unknown else ""
    copy_note = " Some seats copy one model's verdict and count once." if copied else ""
    shared = _seats_sharing_a_model(list(dict.fromkeys(bases)), specs)
    if shared:
        groups = "; ".join(f"{model} in {', '.join(names)}" for model, names in shared.items())
        n_models = len(set(bases)) - sum(len(v) - 1 for v in shared.values())
        return (f"The panel has {len(set(bases))} seats but only {n_models} distinct models "
                f"({groups}{note}): agreement between seats of one model is partly that model "
                "agreeing with itself, so it overstates agreement between independent judges."
                + copy_note)
    return (f"The panel has {len(set(bases))} distinct judges: {', '.join(dict.fromkeys(bases))}"
            f"{note}." + copy_note)


def _seats_sharing_a_model(names: list[str], specs: list[Any]) -> dict[str, list[str]]:
    """Registry seats that serve one underlying model (same model id and endpoint), by model."""
    by_model: dict[tuple[str, Any], list[str]] = {}
    for name, sp in zip(names, specs, strict=True):
        if sp is not None:
            by_model.setdefault((sp.model_id or sp.name, sp.base_url), []).append(name)
    return {key[0]: seats for key, seats in by_model.items() if len(seats) > 1}


@dataclass
class Attempted:
    """The outcome of asking one judge about one item (after retries)."""

    verdict: Verdict | None
    text: str
    error: str | None
    attempts: int
    cached: bool
    latency_s: float
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None


def ask_judge(
    backend: Any, item: JudgeItem, *, retries: int = 2, max_tokens: int = REPLY_MAX_TOKENS
) -> Attempted:
    """Ask ``backend`` about ``item``; an unusable reply is retried up to ``retries`` times with
    a corrective message. Model errors propagate (the verdict is then not recorded)."""
    fam = get_family(item.family)
    schema = reply_schema(item.family)
    messages = list(item.messages)
    latency, cached, text, error = 0.0, True, "", None
    tokens_in = tokens_out = 0
    cost: float | None = None
    for attempt in range(1, retries + 2):
        comp = backend.complete(messages, json_schema=schema, max_tokens=max_tokens)
        latency += float(comp.latency_s or 0.0)
        cached = cached and bool(comp.cached)
        tokens_in += int(comp.tokens_in or 0)
        tokens_out += int(comp.tokens_out or 0)
        if comp.cost_usd is not None:
            cost = (cost or 0.0) + float(comp.cost_usd)
        text = comp.text or ""
        try:
            verdict = parse_reply(text, item.family)
        except ReplyError as exc:
            error = str(exc)
            if getattr(comp, "finish_reason", None) == "length":
                error += " The reply was cut off at the length limit; keep it shorter."
            correction = _template("correction").substitute(
                error=error, labels=", ".join(fam.allowed)
            )
            messages = [
                *messages,
                {"role": "assistant", "content": text},
                {"role": "user", "content": correction},
            ]
            continue
        return Attempted(
            verdict, text, None, attempt, cached, round(latency, 6), tokens_in, tokens_out, cost
        )
    return Attempted(
        None, text, error, retries + 1, cached, round(latency, 6), tokens_in, tokens_out, cost
    )


def _row(item: JudgeItem, seat: Seat, res: Attempted) -> dict[str, Any]:
    v = res.verdict
    return {
        "item_id": item.item_id,
        "run_id": item.run_id,
        "family": item.family,
        "judge": seat.name,
        "turn": item.turn,
        "tool": item.tool,
        "label": v.label if v else None,
        "score": v.score if v else math.nan,
        "rationale": v.rationale if v else "",
        "evidence": json.dumps(v.evidence if v else [], ensure_ascii=False),
        "valid": v is not None,
        "cached": res.cached,
        "latency_s": res.latency_s,
        # beyond the table: kept in the jsonl for audits
        "model": seat.model,
        "attempts": res.attempts,
        "tokens_in": res.tokens_in,
        "tokens_out": res.tokens_out,
        "cost_usd": res.cost_usd,
        "error": res.error,
        "raw": None if v else res.text[:2000],
        "judged_at": time.time(),
        "prompt_sha256": item.prompt_sha256,
    }


def verdict_is_current(row: dict[str, Any], rf: RunFile, prompt_sha256: str | None = None) -> bool:
    """Whether a stored verdict still judges this run file: given after the run ended (a run
    re-recorded since has a later end) and, when both digests are known, on the same prompt."""
    ended = rf.end.ended_at if rf.end else None
    if ended is not None and float(row.get("judged_at") or 0.0) < ended:
        return False
    stored = row.get("prompt_sha256")
    return not (stored and prompt_sha256 and stored != prompt_sha256)


# ============================================================================== storage


def judgments_dir(corpus: str | Path) -> Path:
    """Where the judgments of a corpus live.

    A shipped dataset (a folder with ``manifest.json``, its runs in ``runs/``) carries its
    verdicts in ``judgments/`` beside the runs; any other corpus keeps them in
    ``JUDGMENTS / <corpus folder name>``.
    """
    p = Path(corpus)
    if p.name == "runs" and (p.parent / "manifest.json").exists():
        return p.parent / "judgments"
    name = p.name if p.is_dir() or not p.suffix else p.stem
    return config.JUDGMENTS / name


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The verdict lines of a judgments.jsonl (a torn last line is skipped)."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    raw = path.read_text(encoding="utf-8")
    lines = raw.split("\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            if i == len(lines):  # the last write did not complete
                continue
            raise ValueError(f"{path}:{i}: not a JSON line") from None
    return rows


def judgments_table(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """The tidy table from verdict rows; the latest row per (item_id, judge) wins."""
    df = pd.DataFrame(list(rows))
    if df.empty:
        return _typed(pd.DataFrame(columns=JUDGMENT_COLUMNS))
    for col in JUDGMENT_COLUMNS:
        if col not in df:
            df[col] = None
    df = df.drop_duplicates(["item_id", "judge"], keep="last")
    return _typed(df[JUDGMENT_COLUMNS].reset_index(drop=True))


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["turn"] = pd.array(df["turn"], dtype="Int64")
    df["score"] = pd.to_numeric(df["score"], errors="coerce").astype(float)
    df["latency_s"] = pd.to_numeric(df["latency_s"], errors="coerce").astype(float)
    df["valid"] = df["valid"].astype(bool)
    df["cached"] = df["cached"].astype(bool)
    for col in ("item_id", "run_id", "family", "judge", "tool", "label", "rationale", "evidence"):
        # let pandas infer the text dtype, so the table equals its parquet round trip
        values = [None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
                  for v in df[col].tolist()]  # fmt: skip
        df[col] = pd.Series(values, index=df.index, dtype=None)
    return df


def load_judgments(source: str | Path | Sequence[str | Path]) -> pd.DataFrame:
    """The judgments table of a corpus folder, a judgments folder, or a .jsonl/.parquet file;
    for a list of those, their tables stacked (a source without verdicts is left out, and
    FileNotFoundError is raised only when none has any)."""
    if not isinstance(source, str | Path):
        tables = []
        for one in source:
            with contextlib.suppress(FileNotFoundError):
                tables.append(load_judgments(one))
        if not tables:
            raise FileNotFoundError(f"no judgments for any of {[str(s) for s in source]}")
        return pd.concat(tables, ignore_index=True) if len(tables) > 1 else tables[0]
    p = Path(source)
    if p.suffix == ".parquet":
        return pd.read_parquet(p)
    if p.suffix == ".jsonl" and p.name == "judgments.jsonl":
        return judgments_table(read_jsonl(p))
    folder = p if (p / "judgments.jsonl").exists() else judgments_dir(p)
    if not (folder / "judgments.jsonl").exists():
        raise FileNotFoundError(f"no judgments for {source} (looked in {folder})")
    return judgments_table(read_jsonl(folder / "judgments.jsonl"))


def write_parquet(table: pd.DataFrame, path: Path) -> Path:
    """Write the table atomically (temporary file, then rename)."""
    tmp = path.with_suffix(".parquet.tmp")
    table.to_parquet(tmp, index=False)
    os.replace(tmp, path)
    return path


class _JsonlSink:
    """Appends one verdict per line, flushed and fsync'ed; safe across threads."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._trim_torn(path)
        self._fh = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    @staticmethod
    def _trim_torn(path: Path) -> None:
        if not path.exists():
            return
        raw = path.read_bytes()
        if raw and not raw.endswith(b"\n"):
            with open(path, "r+b") as fh:
                fh.truncate(raw.rfind(b"\n") + 1)

    def write(self, row: dict[str, Any]) -> None:
        line = json.dumps(row, ensure_ascii=False, default=_json_default)
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot store {type(obj).__name__} in a judgment")


# ============================================================================== the run


@dataclass
class JudgeReport:
    """What one adjudication pass did, and the resulting table."""

    table: pd.DataFrame
    out_dir: Path
    n_runs: int = 0
    n_items: int = 0
    n_tasks: int = 0
    n_skipped: int = 0
    n_new: int = 0
    n_invalid: int = 0
    n_cache_hits: int = 0
    n_copies: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        t = self.table
        lines = [
            f"judgments: {self.out_dir / 'judgments.parquet'}",
            f"runs {self.n_runs}, items {self.n_items}, verdicts to give {self.n_tasks} "
            f"({self.n_skipped} already on file)",
            f"new verdicts {self.n_new}: invalid {self.n_invalid}, cache hits "
            f"{self.n_cache_hits}, copied to repeated seats {self.n_copies}; "
            f"model errors {len(self.errors)}",
            f"model calls: {self.tokens_in} tokens in, {self.tokens_out} out, "
            f"${self.cost_usd:.4f} priced; {self.seconds:.1f} s wall clock",
        ]
        if not t.empty:
            lines.append(f"table: {len(t)} verdicts, {int((~t['valid']).sum())} invalid (NaN)")
            per = t.groupby("family")["valid"].agg(["size", "sum"])
            for fam, row in per.iterrows():
                lines.append(f"  {fam}: {int(row['sum'])}/{int(row['size'])} valid")
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"error: {e}" for e in self.errors[:5]]
        if len(self.errors) > 5:
            lines.append(f"... and {len(self.errors) - 5} more errors")
        return "\n".join(lines)


BackendFactory = Callable[[str], Any]


def default_backends(cache_mode: str = "use", cache: Any = None) -> BackendFactory:
    """A factory of registry backends sharing one response cache (``cache_mode``)."""
    from adakit.llm.models import backend_for

    made: dict[str, Any] = {}
    lock = threading.Lock()

    def factory(name: str) -> Any:
        with lock:
            if name not in made:
                made[name] = backend_for(name, cache=cache, cache_mode=cache_mode)  # type: ignore[arg-type]
            return made[name]

    return factory


def _model_errors() -> tuple[type[BaseException], ...]:
    try:
        from adakit.llm.models import ModelError
    except ImportError:  # pragma: no cover - the models layer ships with adakit
        return ()
    return (ModelError,)


def fetched_world(name: str) -> Any:
    """The world a run explored when it is already fetched here, else None (it is never
    downloaded for judging; without it the structure summary uses the run's own results)."""
    from adakit.apparatus.world import open_world

    try:
        return open_world(name, fetch=False, progress=False)
    except Exception:  # noqa: BLE001 - unknown or absent worlds only cost the structure summary
        return None


def run_judgments(
    corpus: str | Path | Iterable[str | Path],
    families: str | Sequence[str] = tuple(FAMILIES),
    judges: str | Sequence[str] | None = None,
    turn_judge: str | None = None,
    *,
    max_turn_items: int | None = None,
    runs_per_cell: int | None = None,
    cell_by: Sequence[str] = ("model", "condition"),
    cache_mode: str = "use",
    out_dir: str | Path | None = None,
    caps: ContextCaps | None = None,
    retries: int = 2,
    max_tokens: int = REPLY_MAX_TOKENS,
    retry_invalid: bool = False,
    workers: int = 1,
    max_consecutive_errors: int = 5,
    backends: BackendFactory | None = None,
    worlds: Callable[[str], Any] | None = fetched_world,
    progress: bool = True,
) -> JudgeReport:
    """Judge a corpus (folder or run files) and store the verdicts beside it.

    Conclusion-level families go to every seat of ``judges`` (registry names, or "paper" for
    the paper's panel; default: the local model thrice), turn-level families to ``turn_judge`` (default: the first judge). Verdicts already in
    ``judgments.jsonl`` are skipped (invalid ones too, unless ``retry_invalid``).

    To bound the work with a slow judge: ``max_turn_items`` caps the steps judged per run and
    turn-level family (spread over the run); ``runs_per_cell`` keeps that many runs (spread
    over the run ids) of every ``cell_by`` combination (header fields model, world, task,
    condition, repeat).
    """
    fams = parse_families(families)
    panel = parse_judges(judges) or list(DEFAULT_PANEL)
    turn_model = turn_judge or panel[0]
    paths = list(iter_run_files(corpus))
    if not paths:
        raise FileNotFoundError(f"no run files in {corpus}")
    if out_dir:
        folder = Path(out_dir)
    elif isinstance(corpus, str | Path):
        folder = judgments_dir(corpus)
    else:  # a list of run files: name the store after the folder that holds them all
        folder = judgments_dir(Path(os.path.commonpath([p.resolve().parent for p in paths])))
    folder.mkdir(parents=True, exist_ok=True)
    jsonl = folder / "judgments.jsonl"

    stored: dict[tuple[str, str], dict[str, Any]] = {}
    for row in read_jsonl(jsonl):  # the latest line per (item, judge) counts
        stored[(row["item_id"], row["judge"])] = row

    runs: list[RunFile] = []
    bad: list[str] = []
    for p in tqdm(paths, desc="reading runs", unit="run", disable=not progress, leave=False):
        try:
            runs.append(read_run(p))
        except ValueError as exc:
            bad.append(f"skipped {p}: {exc}")
    if runs_per_cell is not None:
        runs = sample_runs(runs, runs_per_cell, cell_by)

    items: list[JudgeItem] = []
    world_cache: dict[str, Any] = {}
    n_runs = len(runs)
    by_run = {rf.header.run_id: rf for rf in runs}
    for rf in runs:
        wname = rf.header.world.name
        if worlds is not None and wname not in world_cache:
            world_cache[wname] = worlds(wname)
        items += build_items(
            rf,
            fams,
            caps=caps,
            max_turn_items=max_turn_items,
            world=world_cache.get(wname),
        )

    # one task per (item, distinct model); the seats of a repeated model share its verdict
    conclusion_seats = panel_seats(panel)
    turn_seats = [Seat(turn_model, turn_model)]
    tasks: list[tuple[JudgeItem, str, list[Seat]]] = []
    n_skipped = n_stale = 0
    for it in items:
        seats = conclusion_seats if get_family(it.family).level == "conclusion" else turn_seats
        by_model: dict[str, list[Seat]] = {}
        for s in seats:
            row = stored.get((it.item_id, s.name))
            current = row is not None and verdict_is_current(row, by_run[it.run_id], it.prompt_sha256)
            n_stale += row is not None and not current
            if current and (row.get("valid") or not retry_invalid):
                n_skipped += 1
            else:
                by_model.setdefault(s.model, []).append(s)
        tasks += [(it, m, ss) for m, ss in by_model.items()]

    report = JudgeReport(
        table=pd.DataFrame(), out_dir=folder, n_runs=n_runs, n_items=len(items),
        n_tasks=sum(len(ss) for _, _, ss in tasks) + n_skipped, n_skipped=n_skipped,
    )  # fmt: skip
    report.notes += bad
    if n_stale:
        report.notes.append(f"{n_stale} stored verdicts judged an earlier recording of their "
                            "run (re-recorded since): judged again")
    note = panel_note(panel) if any(get_family(f).level == "conclusion" for f in fams) else None
    if note:
        report.notes.append(note)

    factory = backends or default_backends(cache_mode)
    errors_types = _model_errors()
    sink = _JsonlSink(jsonl)
    lock = threading.Lock()
    streak: Counter[str] = Counter()
    given_up: set[str] = set()
    bar = tqdm(total=len(tasks), desc="judging", unit="item", disable=not progress)
    started = time.perf_counter()

    def work(task: tuple[JudgeItem, str, list[Seat]]) -> None:
        it, model, seats = task
        with lock:
            skip = model in given_up
        if skip:
            bar.update(1)
            return
        try:
            res = ask_judge(factory(model), it, retries=retries, max_tokens=max_tokens)
        except errors_types as exc:
            with lock:
                report.errors.append(f"{model} on {it.item_id}: {exc}")
                streak[model] += 1
                if streak[model] >= max_consecutive_errors and model not in given_up:
                    given_up.add(model)
                    report.notes.append(
                        f"stopped asking {model} after {streak[model]} consecutive errors; "
                        "re-run to resume"
                    )
            bar.update(1)
            return
        for k, seat in enumerate(seats):
            row = _row(it, seat, res)
            if k:  # a repeated model's further seats copy the verdict
                row["cached"] = True
                row["latency_s"] = 0.0
            sink.write(row)
        with lock:
            streak[model] = 0
            report.n_new += len(seats)
            report.n_invalid += 0 if res.verdict else len(seats)
            report.n_cache_hits += len(seats) if res.cached else 0
            report.n_copies += len(seats) - 1
            if not res.cached:
                report.tokens_in += res.tokens_in
                report.tokens_out += res.tokens_out
                report.cost_usd += res.cost_usd or 0.0
        bar.update(1)

    try:
        if workers <= 1:
            for task in tasks:
                work(task)
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                list(pool.map(work, tasks))
    finally:
        bar.close()
        sink.close()
        report.seconds = round(time.perf_counter() - started, 3)
        report.table = judgments_table(read_jsonl(jsonl))
        write_parquet(report.table, folder / "judgments.parquet")
    return report


# ============================================================================== CLI


def parse_caps(values: Sequence[str], prompt: int | None = None) -> ContextCaps | None:
    """Context caps from ``SECTION=N`` strings (None when nothing is changed)."""
    known = {f.name for f in fields(ContextCaps)}
    changes: dict[str, int] = {"prompt": prompt} if prompt else {}
    for value in values:
        name, sep, number = value.partition("=")
        name = name.strip()
        if not sep or name not in known:
            raise ValueError(
                f"bad cap {value!r}: use SECTION=N with SECTION one of {sorted(known)}"
            )
        try:
            changes[name] = int(number)
        except ValueError:
            raise ValueError(f"bad cap {value!r}: {number!r} is not a whole number") from None
        if changes[name] < 0:
            raise ValueError(f"bad cap {value!r}: must not be negative")
    return replace(ContextCaps(), **changes) if changes else None


def parse_families(values: str | Sequence[str] | None) -> list[str]:
    """Family names from CLI-style values: names, comma lists, "all", "conclusion", "turn"
    (all five when nothing is given)."""
    if not values:
        return list(FAMILIES)
    if isinstance(values, str):
        values = [values]
    out: list[str] = []
    for v in values:
        for name in v.split(","):
            name = name.strip()
            if name in ("all", ""):
                out += [f for f in FAMILIES if name == "all"]
            elif name == "conclusion":
                out += list(CONCLUSION_FAMILIES)
            elif name == "turn":
                out += list(TURN_FAMILIES)
            else:
                out.append(get_family(name).name)
    return list(dict.fromkeys(out))


def parse_judges(values: str | Sequence[str] | None) -> list[str] | None:
    """Judge model names from CLI-style values: names, comma lists, "paper" for the paper's
    panel; None when nothing is given."""
    if not values:
        return None
    if isinstance(values, str):
        values = [values]
    out: list[str] = []
    for v in values:
        for name in v.split(","):
            name = name.strip()
            if name == "paper":
                out += list(PAPER_PANEL)
            elif name:
                out.append(name)
    return out


def _cmd_judge(args: argparse.Namespace) -> int:
    try:
        families = parse_families(args.families)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        caps = parse_caps(args.cap or [], prompt=args.prompt_chars)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        report = run_judgments(
            args.corpus,
            families,
            parse_judges(args.judges),
            args.turn_judge,
            max_turn_items=args.max_turn_items,
            runs_per_cell=args.runs_per_cell,
            cache_mode=args.cache_mode,
            out_dir=args.out,
            caps=caps,
            retries=args.retries,
            max_tokens=args.max_tokens,
            retry_invalid=args.retry_invalid,
            workers=args.workers,
            progress=not args.no_progress,
        )
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except LookupError as exc:  # a replay that misses the cache
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except _model_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(report.summary())
    return 1 if report.errors else 0


def register_cli(sub: Any) -> None:
    """``adakit judge CORPUS``: post-hoc adjudication of a corpus (lens 3)."""
    p = sub.add_parser(
        "judge",
        help="post-hoc adjudication of a corpus by LLM judges (lens 3)",
        description=(
            "Judge every run of a corpus on the five evaluation families of Appendix C.1. "
            "Conclusion-level families go to a panel (--judges), turn-level families to one "
            "judge (--turn-judge). Verdicts are stored beside the corpus under "
            f"{config.JUDGMENTS}; a re-run resumes."
        ),
    )
    p.add_argument("corpus", help="a corpus folder (e.g. data/runs/quick) or a run file")
    p.add_argument(
        "--families", nargs="+", metavar="F",
        help=f"families to judge (default all): {', '.join(FAMILIES)}, or 'conclusion'/'turn'",
    )  # fmt: skip
    p.add_argument(
        "--judges", nargs="+", metavar="MODEL",
        help=f"conclusion-level panel (registry names; 'paper' = {' '.join(PAPER_PANEL)}); "
        f"default: {LOCAL_JUDGE} three times",
    )  # fmt: skip
    p.add_argument("--turn-judge", metavar="MODEL", help="turn-level judge (default: first judge)")
    p.add_argument(
        "--max-turn-items", type=int, metavar="N",
        help="at most N steps per run and turn-level family, spread over the run",
    )  # fmt: skip
    p.add_argument(
        "--runs-per-cell", type=int, metavar="N",
        help="judge at most N runs of every model x condition cell (default: every run)",
    )  # fmt: skip
    p.add_argument(
        "--cache-mode", default="use", choices=["use", "replay", "refresh", "off"],
        help="response cache: use (default), replay (no endpoint), refresh, off",
    )  # fmt: skip
    p.add_argument("--retries", type=int, default=2, help="extra attempts after an invalid reply")
    p.add_argument("--max-tokens", type=int, default=REPLY_MAX_TOKENS,
                   help=f"reply token limit (default {REPLY_MAX_TOKENS}, as in the paper)")
    p.add_argument("--workers", type=int, default=1, help="parallel judge calls")
    p.add_argument("--retry-invalid", action="store_true", help="ask again where a verdict failed")
    p.add_argument("--prompt-chars", type=int, help="cap of the judge prompt in characters")
    p.add_argument(
        "--cap", action="append", metavar="SECTION=N",
        help="cap of one context section, e.g. conclusion=2000 or window_turns=2 (repeatable; "
        f"sections: {', '.join(f.name for f in fields(ContextCaps))})",
    )  # fmt: skip
    p.add_argument("--out", help="output folder (default: beside the corpus under data/judgments)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_judge)
