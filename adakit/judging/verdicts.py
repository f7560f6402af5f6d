"""What a judge answers: the reply schema and the parsing of a reply into a verdict.

Judges reply with JSON ``{rationale, label, evidence}``. The schema sent for constrained
decoding caps every string and list so a reply finishes within the token limit; a reply is
validated against the family's labels, and a reply that fails says why in words the judge can
act on (:class:`adakit.llm.replies.ReplyError`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    create_model,
)

from adakit.judging.families import Family, get_family
from adakit.llm.replies import ReplyError, json_object

#: The judges' reply cap in tokens: the paper's 2048 (Appendix A.2.1 and C.1). Small local
#: judges can be given less per study (``judge: max_tokens``) or with ``--max-tokens``.
REPLY_MAX_TOKENS = 2048
RATIONALE_MAX = 300
EVIDENCE_ITEMS = 3
EVIDENCE_MAX = 120


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


def _tidy(data: dict[str, Any], fam: Family) -> dict[str, Any]:
    """The reply's fields with lower-case keys, the label normalised, and over-long rationale
    and evidence cut to the schema's caps."""
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
    return data


def _problems(exc: ValidationError, data: dict[str, Any], fam: Family) -> str:
    """What is wrong with a reply, in words the judge can act on."""
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
    return "; ".join(problems) + "."


def parse_verdict(text: str, family: str) -> Verdict:
    """Validate a judge reply for ``family``; raises :class:`ReplyError` with a message the
    judge can act on. Over-long rationale and evidence are cut to the schema's caps."""
    fam = get_family(family)
    data = _tidy(json_object(text), fam)
    try:
        reply = reply_model(family).model_validate(data)
    except ValidationError as exc:
        raise ReplyError(_problems(exc, data, fam)) from None
    if not reply.rationale:
        raise ReplyError("'rationale' is empty; give one or two sentences.")
    return Verdict(
        label=reply.label,
        score=fam.score(reply.label),
        rationale=reply.rationale,
        evidence=list(reply.evidence),
    )
