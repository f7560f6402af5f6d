"""The explorer's fork points (adakit/workbench/explorer.py): a run with forks marks the turns
it was forked at, and the branch menu switches to a branch at that turn and back."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_forks import synthetic_fork_corpus

from adakit.record import load_corpus
from adakit.workbench import explorer

pytest.importorskip("ipywidgets")


@pytest.fixture()
def parents(tmp_path):
    """Three synthetic parents in runs/ with placebo and treated forks at turn 6 in runs.forks/."""
    synthetic_fork_corpus(tmp_path, extra_turns=3.0, parents=3, seeds=2)
    return load_corpus(tmp_path / "runs", cache=False)


def test_a_run_view_knows_its_fork_points_and_its_parent(parents, tmp_path):
    view = explorer.RunView(parents, "par0")
    assert view.jumps[explorer.FORK_JUMP] == [6] and len(view.branches) == 4
    assert "forked at turn 6: 4 branches (inject \"Hurry up.\", placebo)" in view.summary()
    labels = [label for label, _ in explorer.branch_options(view, 6)]
    assert labels == ['▶ inject "Hurry up." · draw 1', '▶ inject "Hurry up." · draw 2',
                      "▶ placebo · draw 1", "▶ placebo · draw 2"]
    assert explorer.branch_options(view, 5) == []
    forks = load_corpus(tmp_path / "runs.forks" / "par0__at6", cache=False)
    fork = explorer.RunView(forks, "par0__at6__placebo__s1")
    assert "a fork of par0 at turn 6 (placebo): turns 1-6 are the parent's" in fork.summary()
    assert explorer.FORK_JUMP not in fork.jumps
    at_k = explorer.branch_options(fork, 6)
    assert at_k[0] == ("◀ back to the parent at turn 6", explorer.TO_PARENT)
    assert [label for label, _ in at_k[1:]] == [
        'sibling: inject "Hurry up." · draw 1', 'sibling: inject "Hurry up." · draw 2',
        "sibling: placebo · draw 2"]
    assert explorer.branch_options(fork, 8) == [at_k[0]]


def test_the_branch_menu_switches_to_a_branch_at_its_turn_and_back(parents):
    w = explorer.build_explorer(parents, run_id="par1", turn=2, show_map=False)
    assert w.branch_row.layout.display is None  # shown: par1 has forks
    assert "forked at turn 6" in w.branch_note.value and "go to one of them" in w.branch_note.value
    assert w.branch_select.disabled and w.branch_select.options == (("-", ""),)
    w.jump_select.value = explorer.FORK_JUMP
    w.jump_next.click()
    assert w.turn == 6 and not w.branch_select.disabled
    values = dict(w.branch_select.options)
    target = values['▶ inject "Hurry up." · draw 2']
    w.branch_select.value = target
    assert w.view.run_id == Path(target).stem == "par1__at6__inject__s2"
    assert w.turn == 6 and w.view.forked_from.parent == "par1"
    assert w.run_select.value == w.view.run_id  # the branch was added to the run menu
    assert "this run is a fork of par1 at turn 6" in w.branch_note.value
    # a sibling at the same turn, then back to the parent at turn K from a later turn
    sibling = dict(w.branch_select.options)["sibling: placebo · draw 1"]
    w.branch_select.value = sibling
    assert w.view.run_id == "par1__at6__placebo__s1" and w.turn == 6
    w.go(9)
    assert dict(w.branch_select.options) == {"-": "", "◀ back to the parent at turn 6": explorer.TO_PARENT}
    w.branch_select.value = explorer.TO_PARENT
    assert w.view.run_id == "par1" and w.turn == 6 and w.view.forked_from is None


def test_a_run_without_forks_hides_the_branch_row(parents, tmp_path):
    from adakit.synthetic import synthetic_run, write_run

    write_run(synthetic_run("lonely", tools=["OVW", "PKR", {"tool": "CON", "finalize": True}]),
              tmp_path / "other" / "lonely.jsonl")
    w = explorer.build_explorer(load_corpus(tmp_path / "other", cache=False), show_map=False)
    assert w.branch_row.layout.display == "none"
    assert explorer.FORK_JUMP not in w.view.jumps
    assert "fork" not in w.view.summary()
