"""Cutting text to a character cap, with a marker saying it was cut: one helper for the texts
adakit clips (tool observations, coach context, labelling cards, renderings, imports).

Each caller picks its style by keywords, so the text a model sees stays exactly as it was:

- a short label (the tools' state channels, the coach's turn summaries):
  ``clip(text, cap, space="squash")``, one line ending in "…", never longer than ``cap``;
- a block (the coach's observations, trees and submissions): ``clip(text, cap)``, line breaks
  kept;
- a counted cut beside the kept text (renderings, imported observations):
  ``clip(text, cap, marker=" [... {n} more chars]", within=False)``, the first ``cap``
  characters and then the marker.
"""

from __future__ import annotations

from typing import Literal

#: The default marker: one character, counted within the cap.
ELLIPSIS = "…"
#: What ``{n}`` in a marker stands for: the number of characters cut.
COUNT = "{n}"


def clip(
    text: str,
    cap: int,
    *,
    marker: str = ELLIPSIS,
    within: bool = True,
    space: Literal["strip", "squash", "keep"] = "strip",
) -> str:
    """``text`` cut to ``cap`` characters, ``marker`` standing where it was cut (``cap`` <= 0:
    no limit).

    ``space`` first tidies the text: ``"strip"`` trims both ends, ``"squash"`` also turns every
    run of whitespace into one space, ``"keep"`` leaves it as given. ``{n}`` in ``marker`` becomes
    the number of characters cut. ``within=True``: the marker counts within the cap (room is kept
    for it with the most digits ``{n}`` can take) and the kept text loses its trailing
    whitespace, so the result is at most ``cap`` long whenever the marker fits in ``cap``;
    ``within=False``: the first ``cap`` characters are kept and the marker follows them.
    """
    if space == "squash":
        text = " ".join(text.split())
    elif space == "strip":
        text = text.strip()
    if cap <= 0 or len(text) <= cap:
        return text
    if within:
        room = cap - len(marker.replace(COUNT, str(len(text))))
        kept = text[: max(0, room)].rstrip()
    else:
        kept = text[:cap]
    return kept + marker.replace(COUNT, str(len(text) - len(kept)))
