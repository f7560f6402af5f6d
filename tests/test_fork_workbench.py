"""Forks in the workbench (adakit/workbench/forks.py): the fork sets notebook 21 reads or makes,
the parent it picks, the fork tree it draws, and the branches the explorer lists."""

from __future__ import annotations

import pytest
from test_forks import synthetic_fork_corpus

from adakit import config
from adakit.lenses.forks import fork_effects
from adakit.record import read_run
from adakit.study.fork import ForkError
from adakit.workbench import forks as wf


@pytest.fixture()
def fork_folder(tmp_path, monkeypatch):
    """Three synthetic parents in runs/ and, in runs.forks/, a placebo and a treated arm of 3
    forks each per parent (the treated forks planted 6 turns longer); verdicts are looked for
    under tmp_path."""
    monkeypatch.setattr(config, "JUDGMENTS", tmp_path / "judgments")
    synthetic_fork_corpus(tmp_path, extra_turns=6.0, parents=3, seeds=3)
    return tmp_path / "runs.forks"


def test_recorded_fork_sets_are_read_with_their_parents(fork_folder):
    sets = wf.open_fork_sets(fork_folder)
    assert not sets.scripted and sets.source.startswith("recorded fork sets from")
    assert "no lens 3 verdicts" in sets.lens3
    assert sets.parents == fork_folder.with_name("runs")
    summary = wf.fork_set_summary(sets)
    assert len(summary) == 3 and set(summary["placebo"]) == {3}
    assert set(summary['inject "Hurry up."']) == {3}


def test_the_picked_parent_shows_the_largest_gap(fork_folder):
    sets = wf.read_fork_sets(fork_folder)
    picked = wf.pick_parent(sets.outcomes)
    means = sets.outcomes.groupby(["fork_set", "arm"])["turns_after"].mean().unstack()
    gaps = (means["treated"] - means["placebo"]).abs()
    assert picked == gaps.idxmax() and gaps[picked] == gaps.max()
    # without a placebo arm the first fork set is shown
    treated = sets.outcomes[sets.outcomes["arm"] == "treated"]
    assert wf.pick_parent(treated) == treated["fork_set"].iloc[0]


def test_the_fork_tree_puts_the_parent_first_and_shades_the_prefix(fork_folder):
    sets = wf.read_fork_sets(fork_folder)
    chosen = sets.index["fork_set"].iloc[0]
    events, runs, at = wf.fork_tree(sets, chosen)
    assert at == 6
    assert runs["branch"].tolist() == [wf.PARENT, "placebo · draw 1", "placebo · draw 2",
                                       "placebo · draw 3", 'inject "Hurry up." · draw 1',
                                       'inject "Hurry up." · draw 2', 'inject "Hurry up." · draw 3']
    # the prefix is the same in every row: the parent's first K turns
    prefix = events[events["turn"] <= at].groupby("run_id")["kind"].apply(list)
    assert len(prefix) == 7 and prefix.map(tuple).nunique() == 1
    fig = wf.plot_fork_tree(sets, chosen)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == wf.PARENT and len(labels) == 7
    spans = [p for p in ax.patches if p.get_x() == 0]
    assert spans and spans[0].get_width() == pytest.approx(at + 0.5)
    with pytest.raises(ValueError, match="no fork set 'nope'"):
        wf.fork_tree(sets, "nope")


def test_a_tree_without_its_parent_on_disk_shows_the_forks_only(fork_folder, tmp_path):
    for f in (tmp_path / "runs").glob("*.jsonl"):
        f.unlink()
    sets = wf.read_fork_sets(fork_folder)
    _, runs, _ = wf.fork_tree(sets, sets.index["fork_set"].iloc[0])
    assert wf.PARENT not in set(runs["branch"]) and len(runs) == 6


def test_the_estimate_reads_as_one_line_per_change(fork_folder):
    sets = wf.read_fork_sets(fork_folder)
    effects = fork_effects(sets.outcomes, tags=False, n_permutations=500, n_resamples=200)
    text = wf.estimate_text(effects)
    row = effects[effects["metric"] == "turns_after"].iloc[0]
    assert text.startswith('inject "Hurry up.": turns after K ')
    assert f"{row.effect:+.2f} [{row.effect_lo:+.2f}, {row.effect_hi:+.2f}]" in text
    assert "3 fork set(s), 9 treated and 9 placebo forks" in text
    assert "no estimate" in wf.estimate_text(effects.iloc[0:0])


def test_branches_of_a_run_are_the_forks_naming_it(fork_folder, tmp_path):
    branches = wf.branches_of(tmp_path / "runs" / "par1.jsonl")
    assert len(branches) == 6 and set(branches["at"]) == {6}
    assert set(branches["treatment"]) == {"placebo", 'inject "Hurry up."'}
    assert all(read_run(p).header.forked_from.parent == "par1" for p in branches["path"])
    assert wf.branches_of(tmp_path / "runs" / "nobody.jsonl").empty
    assert wf.branches_of(tmp_path / "elsewhere" / "par1.jsonl").empty


def test_a_placebo_is_not_a_change_to_make(fork_folder, tmp_path):
    with pytest.raises(ForkError, match="placebo forks are made anyway"):
        wf.make_fork_set(tmp_path / "runs" / "par0.jsonl", 2, "placebo")
    with pytest.raises(ForkError, match="a change is 'placebo' or one key"):
        wf.as_change({"condition": "budget_pressure", "inject": "x"})


def test_without_fork_sets_scripted_parents_are_forked(flask_world, tmp_path, monkeypatch):
    monkeypatch.setattr(config, "JUDGMENTS", tmp_path / "judgments")
    sets = wf.open_fork_sets(tmp_path / "missing.forks", demo_output=tmp_path / "demo")
    assert sets.scripted and sets.source.startswith(f"no fork sets at {tmp_path / 'missing.forks'}")
    assert "placebo forks reproduce the parent exactly" in sets.source
    assert len(sets.index) == 16 and sets.index["fork_set"].nunique() == 4
    effects = fork_effects(sets.outcomes, tags=False, n_permutations=500, n_resamples=200)
    row = effects[effects["metric"] == "turns_after"].iloc[0]
    assert row["effect"] < 0 and row["effect_lo"] == row["effect_hi"] == row["effect"]
    # the placebos reproduce their parents; a budget at turn 2 ends every fork by turn 14
    for r in sets.index.itertuples():
        fork = read_run(tmp_path / "demo.forks" / f"{r.parent}__at2" / f"{r.run_id}.jsonl")
        parent = read_run(tmp_path / "demo" / f"{r.parent}.jsonl")
        if r.arm == "placebo":
            assert [t.call for t in fork.turns] == [t.call for t in parent.turns]
        else:
            assert len(fork.turns) == min(len(parent.turns), 14)
