"""Conditions (Table 4/A2) and task families (Table 2) as data."""

import pytest

from adakit.apparatus.conditions import get_condition, load_conditions
from adakit.apparatus.tasks import make_task, task_families


def test_four_conditions_plus_coach():
    conds = load_conditions()
    assert {"natural", "budget_pressure", "prior_suppression", "combined", "coach_judge"} <= set(conds)
    assert conds["natural"].budget is None and conds["natural"].stance == ""
    assert conds["budget_pressure"].budget == 12
    assert "hunch" in conds["prior_suppression"].stance
    assert conds["combined"].budget == 12 and conds["combined"].stance == conds["prior_suppression"].stance
    assert conds["coach_judge"].coach


def test_budget_reminder_schedule_for_twelve_turns():
    c = get_condition("budget_pressure")
    # half (6 left), quarter (3 left, merged with "3 left": the later, more urgent text wins), final
    assert sorted(c.schedule()) == [1, 3, 6]
    fired = {used: c.reminder_after(used) for used in range(1, 15) if c.reminder_after(used)}
    assert sorted(fired) == [6, 9, 11]
    assert "6 of 12" in fired[6]
    assert "3 turns left" in fired[9]
    assert "last turn" in fired[11] and "proceed_to_finalize=true" in fired[11]
    assert get_condition("natural").reminder_after(6) is None


def test_budget_override_moves_milestones():
    c = get_condition("budget_pressure", budget=20)
    assert sorted(c.schedule()) == [1, 3, 5, 10]


def test_unknown_names_fail_clearly():
    with pytest.raises(KeyError, match="known"):
        get_condition("panic")
    with pytest.raises(KeyError, match="known"):
        make_task("poetry", "flask")


def test_task_families_and_targets():
    assert task_families() == ["architecture_analysis", "asr_inference", "feature_tracing", "risk_review"]
    t = make_task("feature_tracing", "requests")
    assert "cookie" in t.prompt and t.target
    assert make_task("feature_tracing", "unknown-world").target
    assert make_task("risk_review", "flask").target is None
