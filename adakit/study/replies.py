"""Recorded model replies: the ``responses.jsonl`` of a dataset, read and restored.

A dataset (:mod:`adakit.study.dataset`) ships every reply its runs and verdicts used. Written
back into a response cache, they let a launch or a judging replay instead of asking the model.
A study file may name such a folder (``replies: FOLDER``): :func:`restore_declared` restores it
before the study's runs are launched or judged, so a study whose prompts have not changed
since the recording needs no live model (the CI profile does this).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from adakit import config

_KEY = re.compile(rb'"key"\s*:\s*"([0-9a-f]{64})"')
RESPONSES = "responses.jsonl"


def recorded_replies(
    path: Path,
) -> Iterator[tuple[int, bytes, str | None, dict[str, Any] | None, str | None]]:
    """The lines of a ``responses.jsonl``: (line number, raw line, key, entry, why it is
    damaged or None); a damaged line's key is read from its text when it is not JSON."""
    from adakit.llm.models import entry_problem

    with open(path, "rb") as fh:
        for i, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                entry = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as exc:
                found = _KEY.search(raw)
                yield i, raw, found.group(1).decode() if found else None, None, f"not JSON: {exc}"
                continue
            key = entry.get("key") if isinstance(entry, dict) else None
            yield i, raw, key if isinstance(key, str) else None, entry, entry_problem(entry)


def restore_replies(responses: Path, folder: str | Path | None = None,
                    source: str | None = None) -> int:
    """Write the replies of a ``responses.jsonl`` into a response cache folder (default: the
    project's), each with the run it answered when the pack names it and the dataset it came
    from (``source``); returns how many entries were written (existing ones are kept). A damaged
    line is not restored: it is set aside in the cache as its key's damaged entry, so a
    replay that needs it names it (:class:`adakit.llm.models.CacheDamaged`)."""
    from adakit.llm.models import Completion, ResponseCache

    cache = ResponseCache(Path(folder) / "responses" if folder else None, "use")
    written = 0
    for _, raw, key, entry, why in recorded_replies(responses):
        if key is None or cache.path(key).exists():
            continue
        if why is not None or entry is None:
            if not cache.damaged(key):
                cache.set_aside(key, raw)
            continue
        scope = entry.get("scope")  # the run it answered, in packs made since packs keep it
        cache.put(key, Completion.from_dict(entry["completion"]),
                  {"restored_from": source, **({"scope": scope} if isinstance(scope, str) else {})})
        written += 1
    return written


def restore_declared(study_doc: Mapping[str, Any]) -> str | None:
    """Restore the replies of the folder a study file names under ``replies`` into the
    project's response cache; what was done, in a line (None when it names none)."""
    folder = study_doc.get("replies")
    if not folder:
        return None
    path = config.resolve(str(folder))
    responses = path / RESPONSES
    if not responses.is_file():
        raise FileNotFoundError(f"the study's recorded replies are missing: no {RESPONSES} in "
                                f"{folder}")
    n = restore_replies(responses, source=path.name)
    return f"recorded replies: {n} restored from {folder} into the response cache"
