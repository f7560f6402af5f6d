"""Scripted baselines: deterministic, labelled as baselines, honest conclusions, budget-aware."""

from __future__ import annotations

import pytest

from adakit.apparatus.agent import LaunchContext, Run, RunConfig
from adakit.apparatus.baselines import BASELINES, BaselinePolicy, baseline_spec
from adakit.apparatus.code_index import CodeIndex
from adakit.apparatus.conditions import get_condition
from adakit.apparatus.tasks import make_task

pytestmark = pytest.mark.slow


def run(world, index, policy, tmp_path, condition="natural", seed=0, name="r", **cfg):
    backend = BaselinePolicy(baseline_spec(policy), world, index, seed=seed)
    ctx = LaunchContext(world=world, task=make_task("feature_tracing", "flask"),
                        condition=get_condition(condition), backend=backend, index=index)
    return Run(ctx, RunConfig(run_id=name, turn_bound=40, seed=seed, **cfg),
               tmp_path / f"{name}.jsonl").execute()


def test_a_baseline_writes_the_native_format_when_the_run_asks_for_it(flask_world, index, tmp_path):
    xml = run(flask_world, index, "tracer", tmp_path, name="xml")
    native = run(flask_world, index, "tracer", tmp_path, name="native", tool_format="native")
    assert [t.call for t in native.turns] == [t.call for t in xml.turns]
    assert all(t.raw_text.rstrip().endswith("</tool_call>") for t in native.turns)
    assert native.end.reason == xml.end.reason == "finalize"


@pytest.fixture(scope="module")
def index(flask_world):
    idx = CodeIndex(flask_world)
    idx.build()
    return idx


@pytest.mark.parametrize("policy", BASELINES)
def test_same_seed_same_trajectory_and_honest_record(flask_world, index, tmp_path, policy):
    a = run(flask_world, index, policy, tmp_path, name="a")
    b = run(flask_world, index, policy, tmp_path, name="b")
    calls = [(t.call.tool, t.call.params) for t in a.turns]
    assert calls == [(t.call.tool, t.call.params) for t in b.turns]
    assert a.header.model.kind == "baseline" and a.header.model.name == f"baseline-{policy}"
    assert all(t.thinking.startswith(f"[{policy} baseline]") for t in a.turns)
    assert a.end.reason == "finalize" and all(t.parse_error is None for t in a.turns)
    assert all(t.metrics.error_type is None for t in a.turns), [t.observation for t in a.turns if t.metrics.error_type]
    # the conclusion names only files the run actually touched
    touched = {t.metrics.file for t in a.turns if t.metrics.file}
    named = {f for f in flask_world.source_files() if f in a.end.conclusion}
    assert named and named <= touched


def test_budget_block_caps_the_plan(flask_world, index, tmp_path):
    natural, pressed = [], []
    for policy in BASELINES:
        natural.append(len(run(flask_world, index, policy, tmp_path, name=f"{policy}-n").turns))
        pressed.append(len(run(flask_world, index, policy, tmp_path, condition="budget_pressure",
                               name=f"{policy}-b").turns))
    # a 12-turn budget: at most 11 planned steps, a bookmark of overshoot, the conclusion
    assert max(pressed) <= 13 < max(natural)


def test_different_seeds_vary_the_plan(flask_world, index, tmp_path):
    a = run(flask_world, index, "skimmer", tmp_path, seed=0, name="s0")
    b = run(flask_world, index, "skimmer", tmp_path, seed=1, name="s1")
    assert [t.call.params for t in a.turns] != [t.call.params for t in b.turns]


def test_unknown_baseline_is_a_clear_error():
    with pytest.raises(KeyError, match="baseline-tracer"):
        baseline_spec("wanderer")


@pytest.mark.parametrize("policy", BASELINES)
def test_a_resumed_baseline_continues_its_plan(flask_world, index, tmp_path, policy):
    """A run cut after five turns (end record and later turns lost, as in a crash) and
    launched again comes out turn for turn like the uninterrupted run."""
    whole = run(flask_world, index, policy, tmp_path, name="run")
    assert len(whole.turns) > 6
    path = tmp_path / "run.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:1 + 5]))  # the header and the first five turns
    resumed = run(flask_world, index, policy, tmp_path, name="run")
    assert not list(tmp_path.glob("*.bak")), "the cut run was set aside instead of resumed"
    assert [t.turn for t in resumed.turns] == [t.turn for t in whole.turns]
    assert [(t.call.tool, t.call.params) for t in resumed.turns] == \
        [(t.call.tool, t.call.params) for t in whole.turns]
    assert [t.observation for t in resumed.turns] == [t.observation for t in whole.turns]
    assert resumed.end.conclusion == whole.end.conclusion
