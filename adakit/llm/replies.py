"""Structured model replies: the JSON object in a reply, and the error a retry can show the
model.

Shared by the apparatus (the coach-judge sidecar) and the lens-3 judges, so neither imports
the other.
"""

from __future__ import annotations

import json
import re
from typing import Any


class ReplyError(ValueError):
    """A model reply that cannot be used; the message is shown to the model on retry."""


_FENCE_RE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def json_object(text: str) -> dict[str, Any]:
    """The first JSON object in a model reply (bare, fenced, or embedded in prose).

    Raises :class:`ReplyError` for an empty reply or one without a JSON object.
    """
    candidates = [text.strip()]
    candidates += [m.group(1).strip() for m in _FENCE_RE.finditer(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for cand in candidates:
        if not cand:
            continue
        try:
            data = json.loads(cand, strict=False)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    if not text.strip():
        raise ReplyError("the reply was empty.")
    raise ReplyError("the reply is not a JSON object.")
