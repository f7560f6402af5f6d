"""The anonymiser: what a judge must not learn about the run it reads.

No model, condition, study or run id reaches a judge. In the agent's own words, sentences
that talk about budgets are redacted, clauses that mention a coach, a reviewer or a panel
returning the agent's conclusion are redacted, and model family and vendor names ("As GPT-4",
"created by Alibaba") and turn limits ("my 12-turn limit") are replaced where they stand, so
the rest of the sentence survives. Tool results are repository text (evidence): only the
identifying terms are replaced there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from adakit import config
from adakit.record import RunFile

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

