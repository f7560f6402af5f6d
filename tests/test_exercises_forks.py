"""The tour's exercise 3 (adakit/workbench/exercises.py): choose K and a change, fork the run,
read the effect on the turns after K; the estimate shows only after a correct check."""

from __future__ import annotations

import contextlib
import io
import json

import pandas as pd
import pytest
from test_forks import synthetic_fork_corpus

from adakit import config
from adakit.record import read_run
from adakit.synthetic import synthetic_run, write_run
from adakit.workbench import exercises
from adakit.workbench import forks as wf


@pytest.fixture()
def parent(tmp_path):
    rf = synthetic_run("p", tools=["OVW", "PKR", "PKR", "EXP", {"tool": "CON", "finalize": True}])
    write_run(rf, tmp_path / "runs" / "p.jsonl")
    return read_run(tmp_path / "runs" / "p.jsonl")


@pytest.mark.parametrize("at, change, needle, passed", [
    (None, None, exercises.FILL_IN, False),
    (2, None, exercises.FILL_IN, False),
    ("2", {"condition": "budget_pressure"}, "✗ my_fork_at should be a whole turn number", False),
    (True, {"condition": "budget_pressure"}, "✗ my_fork_at should be a whole turn number", False),
    (5, {"condition": "budget_pressure"}, "between 1 and 4 (the run has 5 turns), not 5", False),
    (0, {"condition": "budget_pressure"}, "between 1 and 4", False),
    (2, {"condition": "hurry"}, "✗ unknown condition 'hurry'", False),
    (2, {"colour": "red"}, "✗ unknown change 'colour'", False),
    (2, "placebo", "the placebo forks are made anyway", False),
    (2, {"condition": "budget_pressure"}, "✓ fork p after turn 2 of 5: placebo forks and forks "
                                          "with condition budget_pressure", True),
    (3, {"inject": "Read the tests too."}, '✓ fork p after turn 3 of 5', True),
])
def test_the_fork_choice_is_checked_before_anything_is_forked(parent, at, change, needle, passed):
    check = exercises.check_fork_choice(at, change, parent)
    assert needle in check and check.passed is passed


def test_no_forks_before_the_choice_checks(parent, tmp_path):
    blank = exercises.check_fork_choice(None, None, parent)
    made = exercises.run_fork_exercise(blank, parent.path, 2, None, 2)
    assert isinstance(made, exercises.Withheld) and "set my_fork_at" in repr(made)
    assert not (tmp_path / "runs.forks").exists()
    assert exercises.fork_branches(made) is made
    effects = exercises.fork_estimate(made)
    assert effects.empty
    assert exercises.FILL_IN in exercises.check_fork_effect(None, effects)
    assert not exercises.check_fork_effect(3.0, effects).passed


def test_the_effect_is_graded_against_the_estimate_with_hints(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "JUDGMENTS", tmp_path / "judgments")
    synthetic_fork_corpus(tmp_path, extra_turns=5.0, parents=1, seeds=3)
    sets = wf.read_fork_sets(tmp_path / "runs.forks")
    table = exercises.fork_branches(sets)
    assert list(table.columns) == ["branch", "arm", "K", "turns after K"]
    assert table["arm"].tolist() == ["placebo"] * 3 + ["treated"] * 3
    # the reference answer comes from the files; it equals the lens's estimate
    answer = exercises.answer_fork_effect(sets)
    means = table.groupby("arm")["turns after K"].mean()
    assert answer == pytest.approx(means["treated"] - means["placebo"])
    effects = exercises.fork_estimate(sets)
    assert effects.loc[effects["metric"] == "turns_after", "effect"].iloc[0] == pytest.approx(answer)
    right = exercises.check_fork_effect(answer, effects)
    assert right.passed and f"✓ right: {answer:+.2f} turns after K" in right
    wrong_sign = exercises.check_fork_effect(-answer, effects)
    assert not wrong_sign.passed and "sign is the wrong way round" in wrong_sign
    high = exercises.check_fork_effect(answer + 2, effects)
    assert not high.passed and "too high" in high and f"{answer:.2f}" not in high
    assert "too low" in exercises.check_fork_effect(answer - 2, effects)
    assert "not 'x'" in exercises.check_fork_effect("x", effects)
    shown = exercises.after_check(right, effects, "the estimate", exercise=3)
    assert shown is effects
    assert isinstance(exercises.after_check(high, effects, "the estimate", exercise=3),
                      exercises.Withheld)


def test_the_parent_is_the_tour_run_or_a_models_run_from_the_corpus(tmp_path):
    corpus = tmp_path / "corpus"
    for run_id, model, tools in (("b", "m1", ["OVW", "PKR", "PKR", {"tool": "CON", "finalize": True}]),
                                 ("a", "m1", ["OVW", "PKR", "PKR", "EXP", {"tool": "CON", "finalize": True}]),
                                 ("c", "m2", ["OVW", {"tool": "CON", "finalize": True}])):
        write_run(synthetic_run(run_id, model=model, tools=tools), corpus / f"{run_id}.jsonl")
    assert exercises.fork_parent(tmp_path / "tour.jsonl") == tmp_path / "tour.jsonl"
    assert exercises.fork_parent("t.jsonl", "m1", [str(corpus), "missing"]).name == "a.jsonl"
    with pytest.raises(ValueError, match="no finished run of m2 with 4 turns"):
        exercises.fork_parent("t.jsonl", "m2", str(corpus))
    with pytest.raises(ValueError, match="no corpus on disk"):
        exercises.fork_parent("t.jsonl", "m1", str(tmp_path / "nowhere"))
    assert exercises.fork_root("data/runs/tour") is None
    assert exercises.fork_root("data/runs/tour", "m1") == config.resolve("data/runs/tour.forks")


def test_the_reference_choice_changes_the_tours_run(flask_world, tmp_path):
    from adakit.study.launch import launch
    from adakit.study.spec import RunSpec, Study

    spec = RunSpec(study="tour", model="baseline-tracer", world="flask", task="feature_tracing",
                   condition="natural", repeat=0, seed=0, settings=(("turn_bound", 20),))
    launch(Study(name="tour", output=tmp_path / "tour", specs=[spec]), progress=False)
    path = tmp_path / "tour" / f"{spec.run_id}.jsonl"
    at, change = exercises.answer_fork_choice()
    check = exercises.check_fork_choice(at, change, read_run(path))
    sets = exercises.run_fork_exercise(check, path, at, change, 2)
    assert (tmp_path / "tour.forks").is_dir()
    effects = exercises.fork_estimate(sets)
    assert exercises.answer_fork_effect(sets) < 0  # a budget from turn 2 cuts the plan short
    assert exercises.check_fork_effect(exercises.answer_fork_effect(sets), effects).passed


def test_the_committed_tour_ships_exercise_3_blank():
    """Exercise 3's cells, run as committed: they ask to fill in, fork nothing and keep the
    estimate back; with the solutions the effect checks."""
    nb = json.loads((config.NOTEBOOKS / "00_tour.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    choice = next(c for c in code if "my_fork_at = None" in c)
    assert "my_fork_change = None" in choice and "answer_fork_choice" in choice
    assert '"budget_pressure"' not in choice
    cells = [choice] + [c for c in code if any(k in c for k in (
        "exercises.check_fork_choice", "exercises.run_fork_exercise", "my_fork_effect = None",
        "exercises.check_fork_effect", "exercise_3b, fork_effects"))]
    assert len(cells) == 6
    namespace = {"exercises": exercises, "solutions": False, "display": print, "wf": wf,
                 "parent": "p.jsonl", "fork_seeds": 2, "output": "data/runs/tour",
                 "fork_model": "", "parent_run": type("R", (), {
                     "turns": [1, 2, 3], "header": type("H", (), {"run_id": "p"})()})()}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for cell in cells:
            exec(cell, namespace)
    text = out.getvalue()
    assert text.count(exercises.FILL_IN) == 2 and "✓ fork" not in text and "✓ right" not in text
    assert "the forks are made once" in text and "the estimate with its interval" in text
    assert isinstance(namespace["fork_effects"], pd.DataFrame) and namespace["fork_effects"].empty
