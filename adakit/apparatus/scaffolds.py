"""Named scaffold presets: one study key (``scaffold: small-model``) for a set of run settings.

A preset only stands for settings a study could spell out; :func:`expand` turns it into them
before the run specs are made, so a run launched under a preset has the same settings, run id,
header and cached replies as one whose study wrote the keys out. A key the study sets itself
(in the block or at the top level) wins over the preset's value.

- ``small-model``: the scaffold issue 23 adopted for small local models after measuring it on
  a fixed slice (``benchmarks/README.md``; each aid in ``docs/deviations.md``): a free
  thinking rule, sampled repeats drawn again with a note instead of refused, earlier thinking
  left out of the conversation, a conclusion checkpoint every 4 files or 8 turns, a navigation
  turn after two notes in a row, and a closing turn. Reference corpus v4 is recorded with it.
- ``paper``: no aid at all (the loop's defaults, as the paper ran Ada); the same as no preset,
  named so a study can say so, or undo a preset set at its top level in one block.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SCAFFOLDS: dict[str, dict[str, Any]] = {
    "small-model": {
        "close_turn": True,
        "close_chars": 1200,
        "thinking_rule": "free",
        "repeat_guard": "suggest",
        "redraw_repeats": 3,
        "redraw_note": True,
        "history_thinking": "drop",
        "conclude_checkpoint": 4,
        "checkpoint_turns": 8,
        "cognitive_streak": 2,
    },
    "paper": {},
}
#: The preset names, for the study schema.
SCAFFOLD_NAMES = tuple(SCAFFOLDS)


def expand(preset: str | None, explicit: Mapping[str, Any]) -> dict[str, Any]:
    """The run settings of ``preset`` (none: no settings) overridden by the ``explicit`` ones."""
    if preset is None:
        return dict(explicit)
    if preset not in SCAFFOLDS:
        raise ValueError(f"unknown scaffold {preset!r}; known: {', '.join(SCAFFOLD_NAMES)}")
    return {**SCAFFOLDS[preset], **explicit}


def bare_local_note(runs: list[tuple[str, str, Mapping[str, Any]]]) -> str | None:
    """A one-line note naming the local models (``(model, kind, settings)`` per run) whose runs
    have none of the small-model aids, or None when every local model's runs have some."""
    from dataclasses import fields

    from adakit.apparatus.agent import RunConfig

    paper = {f.name: f.default for f in fields(RunConfig) if f.name in SCAFFOLDS["small-model"]}
    bare = sorted({m for m, kind, settings in runs if kind == "local"
                   and all(settings.get(k, v) == v for k, v in paper.items())})
    if not bare:
        return None
    return (f"note: {', '.join(bare)} run without the small-model scaffold (no aid set); "
            "`scaffold: small-model` in the study gives the one the reference corpus uses "
            "(docs/study-files.md), no preset keeps the paper's loop")

