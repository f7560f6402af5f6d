# ruff: noqa: F811  (the fixtures of test_scaffold_options are imported by name)
"""How much of a run's exploration the scaffold suggested (adakit.variance.suggested): a call
that takes a call offered by a refusal or by a redraw's note counts; other calls do not."""

from __future__ import annotations

from pathlib import Path

from fake_openai import FakeOpenAI
from test_scaffold_options import FINAL, _peek, api_key, launch, world  # noqa: F401

from adakit.apparatus.world import World
from adakit.variance.suggested import offers_in, suggestion_uptake

OUTLINE_UTIL = ("<thinking>The util module is next; its outline shows what it has.</thinking>\n"
                "<get_structural_overview>\n<file_path>pkg/util.py</file_path>\n"
                "</get_structural_overview>")


def test_a_call_offered_by_a_refusal_is_counted_as_taken(world: World, tmp_path: Path) -> None:
    replies = [_peek("pkg/app.py", 1, 5), _peek("pkg/app.py", 1, 5), OUTLINE_UTIL, FINAL]
    with FakeOpenAI(replies) as fake:
        rf = launch(world, fake, tmp_path / "refused.jsonl", repeat_guard="suggest", turn_bound=6)
    assert rf.turns[1].metrics.error_type == "repeated"
    assert "<get_structural_overview><file_path>pkg/util.py</file_path></get_structural_overview>" in \
        offers_in(rf.turns[1].observation)
    up = suggestion_uptake([rf])
    assert up["followed"].tolist() == [False, False, True, False]
    assert up["offered"].tolist()[2] >= 1 and up["offered"].tolist()[:2] == [0, 0]
    assert (len(up), int(up["followed"].sum())) == (4, 1)


def test_a_call_offered_by_a_redraw_note_needs_the_world(world: World, tmp_path: Path) -> None:
    replies = [_peek("pkg/app.py", 1, 5), _peek("pkg/app.py", 1, 5), OUTLINE_UTIL, FINAL]
    with FakeOpenAI(replies) as fake:
        rf = launch(world, fake, tmp_path / "noted.jsonl", repeat_guard="suggest", turn_bound=6,
                    redraw_repeats=1, redraw_note=True)
    assert [t.call.tool for t in rf.turns] == ["peek_code_region", "get_structural_overview",
                                               "stash_conclusion"]
    assert suggestion_uptake([rf], {"toy": world})["followed"].tolist() == [False, True, False]
    # without the world the note's offers cannot be computed again: nothing counts
    assert suggestion_uptake([rf])["followed"].tolist() == [False, False, False]


def test_a_call_nobody_offered_is_not_counted(world: World, tmp_path: Path) -> None:
    replies = [_peek("pkg/app.py", 1, 5), _peek("pkg/util.py", 1, 2), FINAL]
    with FakeOpenAI(replies) as fake:
        rf = launch(world, fake, tmp_path / "plain.jsonl", repeat_guard="suggest")
    up = suggestion_uptake([rf], {"toy": world})
    assert not up["followed"].any() and (up["offered"] == 0).all()
