"""adakit.text.clip against the clipping helpers it replaced, site by site.

Tool observations, the tools' state channels and the coach's context reach a model, and the
shipped corpus replays from a cache keyed on the prompt, so every site must cut exactly as
before. The old bodies are kept below as the reference; each is compared with the call its
site now makes, over texts that exercise whitespace, unicode, the cap's edges and counts
whose digits change.
"""

from __future__ import annotations

import random

import pytest

from adakit.importers.base import _OBSERVATION_CUT
from adakit.judging.context import clip as context_clip
from adakit.render import _INLINE_CUT
from adakit.text import ELLIPSIS, clip
from adakit.workbench.explorer import _LINE_CUT
from adakit.workbench.labels import _CARD_CUT

# --------------------------------------------------------------------------- the old bodies


def old_importers_base_clip(text: str, limit: int) -> str:
    if limit <= 0 or len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit} more characters not kept]"


def old_coach_clip(text: str, cap: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= cap else text[: cap - 1].rstrip() + "…"


def old_coach_clip_block(text: str, cap: int) -> str:
    text = str(text).strip()
    return text if len(text) <= cap else text[: cap - 1].rstrip() + "…"


def old_tools_clip(text: str, cap: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= cap else text[: cap - 1].rstrip() + "…"


def old_render_clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + f" [... {len(text) - limit} more chars]"


def old_explorer_clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more chars]"


def old_judges_clip(text: str, cap: int) -> str:
    text = text.strip()
    if len(text) <= cap:
        return text
    keep = max(0, cap - len(f" [... {len(text)} more characters]"))
    kept = text[:keep].rstrip()
    return f"{kept} [... {len(text) - len(kept)} more characters]"


def old_labels_clip(text: str, cap: int) -> str:
    return old_judges_clip(text.strip(), cap)


#: site -> (old function, the call the site makes now)
SITES = {
    "importers.base.clip": (old_importers_base_clip, lambda t, c: clip(
        t, c, marker=_OBSERVATION_CUT, within=False, space="keep")),
    "apparatus.coach._clip": (old_coach_clip, lambda t, c: clip(t, c, space="squash")),
    "apparatus.coach._clip_block": (old_coach_clip_block, lambda t, c: clip(t, c)),
    "apparatus.tools._clip": (old_tools_clip, lambda t, c: clip(t, c, space="squash")),
    "render._clip": (old_render_clip, lambda t, c: clip(t, c, marker=_INLINE_CUT, within=False)),
    "workbench.explorer._clip": (old_explorer_clip,
                                 lambda t, c: clip(t, c, marker=_LINE_CUT, within=False)),
    "workbench.labels._clip": (old_labels_clip, lambda t, c: clip(t, c, marker=_CARD_CUT)),
    "judging.context.clip": (old_judges_clip, context_clip),
}

#: Where the old helper treated a cap <= 0 as "no limit" (the others were never given one).
NO_LIMIT_AT_ZERO = {"importers.base.clip"}
#: Where a cap of 0 can be asked for (``adakit judge --cap SECTION=0``): only the note is kept.
NOTE_ONLY_AT_ZERO = {"judging.context.clip"}


def _texts() -> list[str]:
    fixed = [
        "", " ", "\n\t \n", "a", "abc", "  padded both ends  ", "word " * 30,
        "line one\nline two\n\n  indented line three\n", "tabs\tand\t\tspaces   inside",
        "ünïcödé ∑ “quotes” — dashes… and emoji 🧪 " * 12, "x" * 9, "x" * 10, "x" * 11,
        "y" * 99, "y" * 100, "y" * 101, "z" * 1000, "q" * 12_345,
        "cut here" + " " * 40 + "after a run of spaces", "ends with spaces     ",
        "def f(x):\n    return x  \n\n\nclass C:\n    pass\n" * 40,
    ]
    rng = random.Random(7)
    pieces = ["alpha", "β", "  ", "\n", "\t", "gamma-delta", " ", "…", "[...]", "{n}", "12"]
    for _ in range(150):
        fixed.append("".join(rng.choice(pieces) for _ in range(rng.randint(0, 400))))
    return fixed


TEXTS = _texts()
CAPS = [1, 2, 3, 5, 10, 11, 39, 40, 41, 60, 99, 100, 101, 120, 160, 240, 300, 400, 600, 800,
        1200, 1500, 2000, 2500, 4000]


@pytest.mark.parametrize("site", sorted(SITES))
def test_every_site_cuts_exactly_as_its_old_helper(site):
    old, new = SITES[site]
    caps = CAPS + ([0, -1] if site in NO_LIMIT_AT_ZERO else [0] if site in NOTE_ONLY_AT_ZERO
                   else [])
    for text in TEXTS:
        for cap in caps:
            assert new(text, cap) == old(text, cap), (site, text[:40], cap)


def test_the_sites_differ_from_one_another():
    """The comparison above is not vacuous: the styles give different texts for one input."""
    text, cap = "  first line\nsecond   line " + "w" * 200, 50
    outputs = {new(text, cap) for _, new in SITES.values()}
    assert len(outputs) >= 6


def test_a_cap_of_zero_or_less_keeps_everything():
    text = "  some\ttext\n"
    assert clip(text, 0) == "some\ttext"
    assert clip(text, -5, space="squash") == "some text"
    assert clip(text, 0, marker=_INLINE_CUT, within=False, space="keep") == text


def test_within_the_cap_the_result_fits_and_counts_what_was_cut():
    text = "0123456789 " * 50  # 550 characters, 549 once stripped
    for cap in (30, 60, 100, 548):
        out = clip(text, cap, marker=" [... {n} more characters]")
        assert len(out) <= cap
        kept, _, tail = out.partition(" [... ")
        assert tail == f"{549 - len(kept)} more characters]" and text.startswith(kept)
        short = clip(text, cap)
        assert len(short) <= cap and short.endswith(ELLIPSIS)
    assert clip(text, 549) == text.strip()


def test_beside_the_cap_the_first_characters_are_kept_whole():
    text = "abc   " + "d" * 20
    out = clip(text, 6, marker=" [{n} cut]", within=False, space="keep")
    assert out == "abc    [20 cut]"  # the kept spaces stay: nothing is stripped
    assert clip("a {b} " * 3, 4, marker="<{n}>", within=False) == "a {b<13>"
