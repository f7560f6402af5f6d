"""Counterfactual forks of recorded runs (adakit/study/fork.py): the prefix is replayed, the
change shows at turn K and not before, placebos of a scripted baseline reproduce the parent."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from fake_openai import FakeOpenAI
from test_agent import FINAL, KEY_VAR, MEMORY, SECRET, peek, spec_for
from test_agent import world as world  # noqa: F401  (the toy world fixture)

from adakit import cli
from adakit.apparatus.agent import LaunchContext, Run, RunConfig
from adakit.apparatus.baselines import BaselinePolicy, baseline_spec
from adakit.apparatus.code_index import CodeIndex
from adakit.apparatus.conditions import get_condition
from adakit.apparatus.tasks import make_task
from adakit.lenses.forks import fork_effects, fork_index, fork_outcomes, plot_fork_effects
from adakit.llm.models import OpenAIBackend, RetryPolicy
from adakit.record import Header, json_schema, load_corpus, prefix_digest, read_run
from adakit.study.fork import (
    Change,
    ForkError,
    fork_seed,
    fork_set_folder,
    parent_task,
    plan_forks,
    run_fork,
)

TEXT = "Look at pkg/util.py before you conclude."
PARENT_SCRIPT = [peek(), MEMORY, peek("pkg/util.py", 1, 2), peek("pkg/app.py", 5, 8), FINAL]


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, SECRET)


def backend_of(fake, **kw):
    return OpenAIBackend(spec_for(fake, **kw), retry=RetryPolicy(attempts=2, base=0.01, cap=0.02))


def record_parent(world, tmp_path, condition="natural", turn_bound=10):
    """A five-turn parent run against a fake server; returns its file and the requests."""
    path = tmp_path / "corpus" / "parent.jsonl"
    with FakeOpenAI(PARENT_SCRIPT) as fake:
        ctx = LaunchContext(world=world, task=make_task("feature_tracing", "toy"),
                            condition=get_condition(condition), backend=backend_of(fake))
        rf = Run(ctx, RunConfig(run_id="parent", turn_bound=turn_bound), path).execute()
    return rf, [r["messages"] for r in fake.requests]


def fake_context(world, backend):
    def build(parent, change, condition, seed, run_id):
        return LaunchContext(world=world, task=parent_task(parent), condition=condition,
                             backend=backend)
    return build


def fork_with(world, parent, at, change, script, draw=1, **kw):
    plan = plan_forks(parent, at, change, draw)[draw - 1]
    with FakeOpenAI(script) as fake:
        rf = run_fork(parent, at, change, plan, fake_context(world, backend_of(fake, **kw)))
    return rf, fake.requests


def content(turn):
    return (turn.raw_text, turn.call, turn.observation, turn.metrics, turn.state_changes)


def test_the_prefix_is_replayed_and_the_injection_shows_at_turn_k(world, tmp_path):
    parent, asked = record_parent(world, tmp_path)
    rf, requests = fork_with(world, parent, 3, Change("inject", TEXT), [peek("pkg/util.py"), FINAL])
    assert len(requests) == 2  # only turns 4 and 5: no model was asked for turns 1-3
    assert [t.turn for t in rf.turns] == [1, 2, 3, 4, 5] and rf.end.reason == "finalize"
    assert [content(t) for t in rf.turns[:3]] == [content(t) for t in parent.turns[:3]]
    assert [t.injected for t in rf.turns[:2]] == [t.injected for t in parent.turns[:2]]
    assert [i.text for i in rf.turns[2].injected] == [TEXT]
    first = requests[0]["messages"]
    assert first[:-1] == asked[3][:-1]  # the same history up to turn 3's observation
    assert TEXT in first[-1]["content"] and TEXT not in asked[3][-1]["content"]
    assert TEXT not in json.dumps(first[:-1])  # not before turn K
    f = rf.header.forked_from
    assert (f.parent, f.turn, f.change, f.value) == ("parent", 3, "inject", TEXT)
    assert f.prefix_sha256 == prefix_digest(parent.header, parent.turns[:3])
    assert f.seed == rf.header.seed == fork_seed("parent", 3, 1)
    assert rf.header.system_prompt == parent.header.system_prompt


def test_a_placebo_asks_the_same_request_as_the_parent(world, tmp_path):
    parent, asked = record_parent(world, tmp_path)
    rf, requests = fork_with(world, parent, 2, Change("placebo"), [FINAL])
    assert requests[0]["messages"] == asked[2]
    assert rf.turns[1].injected == parent.turns[1].injected
    assert len(rf.turns) == 3 and rf.turns[2].call.tool == "stash_conclusion"


def test_a_condition_applies_from_turn_k_with_its_budget_counted_from_there(world, tmp_path):
    parent, asked = record_parent(world, tmp_path, turn_bound=10)
    script = [peek("pkg/util.py", 1, 1), peek("pkg/util.py", 2, 2), peek("pkg/app.py", 1, 1),
              peek("pkg/app.py", 2, 2), FINAL]
    rf, requests = fork_with(world, parent, 2, Change("condition", "budget_pressure"), script)
    assert rf.header.condition.name == "budget_pressure" and rf.header.condition.budget == 8
    assert any("8 exploration turns left" in i.text for i in rf.turns[1].injected)
    assert not any("Budget" in i.text for t in rf.turns[:1] for i in t.injected)
    # half of the 8 turns are gone 4 turns after K: the half-way reminder comes after turn 6
    assert any("4 of 8 turns left" in i.text for i in rf.turns[5].injected)
    assert requests[0]["messages"][1] == asked[2][1]  # the task message stays the parent's


def test_a_tool_taken_away_is_not_run_and_not_in_the_grammar(world, tmp_path):
    parent, _ = record_parent(world, tmp_path)
    rf, requests = fork_with(world, parent, 2, Change("without", "peek_code_region"),
                             [peek("pkg/util.py"), FINAL], constrain="grammar")
    assert "peek_code_region" not in requests[0]["grammar"]
    assert "bookmark" in requests[0]["grammar"]
    t3 = rf.turns[2]
    assert t3.metrics.error_type == "unknown_tool" and t3.observation.startswith("Not run")
    assert rf.turns[0].metrics.tool == "PKR"  # the prefix keeps what the parent read


def test_another_model_continues_the_history(world, tmp_path):
    parent, asked = record_parent(world, tmp_path)
    rf, requests = fork_with(world, parent, 3, Change("model", "fake-2"), [FINAL], name="fake-2")
    assert rf.header.model.name == "fake-2" and parent.header.model.name == "fake"
    assert requests[0]["messages"] == asked[3]


class _Killed(Exception):
    pass


class _DiesAfter:
    """A backend that answers ``n`` requests, then the process "dies" (an exception)."""

    def __init__(self, inner, n):
        self.inner, self.spec, self.n = inner, inner.spec, n

    def complete(self, messages, **kw):
        if self.n == 0:
            raise KeyboardInterrupt
        self.n -= 1
        return self.inner.complete(messages, **kw)


def test_a_killed_fork_resumes_after_its_last_turn(world, tmp_path):
    parent, _ = record_parent(world, tmp_path)
    change = Change("inject", TEXT)
    plan = plan_forks(parent, 2, change, 1)[0]
    with FakeOpenAI([peek("pkg/util.py"), FINAL]) as fake, pytest.raises(KeyboardInterrupt):
        run_fork(parent, 2, change, plan, fake_context(world, _DiesAfter(backend_of(fake), 1)))
    killed = read_run(plan.path)
    assert killed.end is None and len(killed.turns) == 3
    with FakeOpenAI([FINAL]) as fake:
        rf = run_fork(parent, 2, change, plan, fake_context(world, backend_of(fake)))
    assert len(fake.requests) == 1 and [t.turn for t in rf.turns] == [1, 2, 3, 4]
    assert [i.text for i in rf.turns[1].injected] == [TEXT]  # the note is not added twice
    lines = [json.loads(x) for x in plan.path.read_text().splitlines()]
    assert [x["kind"] for x in lines].count("header") == 1


def test_the_prefix_keeps_its_durations_on_the_forks_clock(world, tmp_path):
    parent, _ = record_parent(world, tmp_path)
    rf, _ = fork_with(world, parent, 3, Change("placebo"), [FINAL])
    for a, b in zip(parent.turns[:3], rf.turns[:3], strict=True):
        assert b.ended_at - b.started_at == pytest.approx(a.ended_at - a.started_at)
        assert b.started_at - rf.header.started_at == pytest.approx(
            a.started_at - parent.header.started_at)
    assert rf.turns[3].started_at >= rf.turns[2].ended_at - 1e-6


@pytest.fixture(scope="module")
def flask_index(flask_world):
    idx = CodeIndex(flask_world)
    idx.build()
    return idx


def baseline_parent(flask_world, flask_index, tmp_path, policy="baseline-tracer"):
    backend = BaselinePolicy(baseline_spec(policy), flask_world, flask_index, seed=0)
    ctx = LaunchContext(world=flask_world, task=make_task("feature_tracing", "flask"),
                        condition=get_condition("natural"), backend=backend, index=flask_index)
    path = tmp_path / "runs" / "parent.jsonl"
    return Run(ctx, RunConfig(run_id="parent", turn_bound=40), path).execute()


def test_a_placebo_of_a_scripted_baseline_reproduces_the_parent(flask_world, flask_index, tmp_path):
    parent = baseline_parent(flask_world, flask_index, tmp_path)
    assert len(parent.turns) > 6
    code = cli.main(["fork", str(parent.path), "--at", "4", "--placebo", "--seeds", "2"])
    assert code == 0
    folder = fork_set_folder(parent.path, "parent", 4)
    assert folder.parent.name == "runs.forks"
    forks = [read_run(p) for p in sorted(folder.glob("*.jsonl"))]
    assert len(forks) == 2 and {f.header.seed for f in forks} == {fork_seed("parent", 4, d) for d in (1, 2)}
    for rf in forks:
        assert [content(t) for t in rf.turns] == [content(t) for t in parent.turns]
        assert [t.injected for t in rf.turns] == [t.injected for t in parent.turns]
        assert (rf.end.reason, rf.end.conclusion) == (parent.end.reason, parent.end.conclusion)
    # a second call finds them finished and asks nothing
    assert cli.main(["fork", str(parent.path), "--at", "4", "--placebo", "--seeds", "2"]) == 0


def test_a_changed_baseline_fork_differs_only_after_k(flask_world, flask_index, tmp_path):
    parent = baseline_parent(flask_world, flask_index, tmp_path)
    code = cli.main(["fork", str(parent.path), "--at", "3", "--model", "baseline-skimmer",
                     "--seeds", "1"])
    assert code == 0
    (path,) = fork_set_folder(parent.path, "parent", 3).glob("*.jsonl")
    rf = read_run(path)
    assert [content(t) for t in rf.turns[:3]] == [content(t) for t in parent.turns[:3]]
    assert rf.turns[3].call != parent.turns[3].call
    assert rf.header.model.name == "baseline-skimmer"


@pytest.mark.parametrize("extra, needle", [
    (["--at", "0", "--placebo"], "--at must be between 1 and 4"),
    (["--at", "5", "--placebo"], "--at must be between 1 and 4"),
    (["--at", "2"], "exactly one change"),
    (["--at", "2", "--placebo", "--inject", "x"], "exactly one change"),
    (["--at", "2", "--condition", "hurry"], "unknown condition 'hurry'"),
    (["--at", "2", "--without", "grep"], "unknown tool 'grep'"),
    (["--at", "2", "--without", "stash_conclusion"], "never conclude"),
    (["--at", "2", "--model", "no-such-model"], "unknown model 'no-such-model'"),
    (["--at", "2", "--placebo", "--seeds", "0"], "--seeds must be at least 1"),
])
def test_bad_input_is_one_line_and_exit_2(world, tmp_path, capsys, extra, needle):
    parent, _ = record_parent(world, tmp_path)
    capsys.readouterr()
    assert cli.main(["fork", str(parent.path), *extra]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "corpus.forks").exists()


def test_a_parent_outside_the_worlds_manifest_is_one_line(world, tmp_path, capsys):
    parent, _ = record_parent(world, tmp_path)  # the toy world is no manifest world
    assert cli.main(["fork", str(parent.path), "--at", "2", "--placebo"]) == 2
    err = capsys.readouterr().err
    assert "world 'toy' is not in the worlds manifest" in err and len(err.strip().splitlines()) == 1


def test_a_parent_of_other_prompts_is_forked_with_a_warning(flask_world, flask_index, tmp_path, capsys):
    parent = baseline_parent(flask_world, flask_index, tmp_path)
    lines = parent.path.read_text().splitlines(keepends=True)
    head = json.loads(lines[0])
    head["scaffold"]["prompts_sha256"] = "0" * 64
    parent.path.write_text(json.dumps(head) + "\n" + "".join(lines[1:]))
    assert cli.main(["fork", str(parent.path), "--at", "3", "--placebo", "--seeds", "1"]) == 0
    assert "warning: the parent was recorded under other prompt templates" in capsys.readouterr().err


def test_a_missing_parent_is_one_line(tmp_path, capsys):
    assert cli.main(["fork", str(tmp_path / "nope.jsonl"), "--at", "2", "--placebo"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_forked_from_is_optional_and_left_out_of_other_headers(world, tmp_path):
    parent, _ = record_parent(world, tmp_path)
    assert "forked_from" not in json.loads(parent.path.read_text().splitlines()[0])
    rf, _ = fork_with(world, parent, 2, Change("placebo"), [FINAL])
    line = json.loads(rf.path.read_text().splitlines()[0])
    assert line["forked_from"]["parent"] == "parent"
    assert Header.model_validate(line).forked_from.turn == 2
    assert "ForkInfo" in json_schema()["$defs"]


def test_imported_runs_and_lost_conditions_are_not_forked(world, tmp_path):
    from adakit.record import ConditionInfo, SourceInfo

    parent, _ = record_parent(world, tmp_path)
    source = SourceInfo(format="swe-agent", file="x.traj", sha256="0" * 64)
    imported = dataclasses.replace(parent, header=parent.header.model_copy(update={"source": source}))
    with pytest.raises(ForkError, match="only Ada's own runs"):
        plan_forks(imported, 2, Change("placebo"), 1)
    lost = dataclasses.replace(parent, header=parent.header.model_copy(
        update={"condition": ConditionInfo(name="gone")}))
    with pytest.raises(ForkError, match="unknown condition 'gone'"):
        plan_forks(lost, 2, Change("placebo"), 1)


def test_changes_check_their_values():
    with pytest.raises(ForkError):
        Change("rewind", "x")
    with pytest.raises(ForkError):
        Change("placebo", "x")
    with pytest.raises(ForkError):
        Change("inject", "  ")
    assert Change("inject", TEXT).slug.startswith("inject-")
    assert Change("model", "a/b c").slug == "model-a_b_c"


def test_fork_sets_live_beside_the_corpus(tmp_path):
    where = fork_set_folder(tmp_path / "runs" / "r.jsonl", "r", 5)
    assert where == (tmp_path / "runs.forks" / "r__at5").resolve()
    assert fork_seed("r", 5, 1) != fork_seed("r", 5, 2)


def test_prefix_digest_ignores_clocks(world, tmp_path):
    parent, _ = record_parent(world, tmp_path)
    moved = [t.model_copy(update={"started_at": t.started_at + 99}) for t in parent.turns]
    assert prefix_digest(parent.header, moved[:2]) == prefix_digest(parent.header, parent.turns[:2])
    assert prefix_digest(parent.header, parent.turns[:3]) != prefix_digest(parent.header, parent.turns[:2])



# ------------------------------------------------------------------------- the estimate


def synthetic_fork_corpus(folder, extra_turns, parents=3, seeds=8, at=6):
    """Parents with placebo and treated forks (planted effect ``extra_turns`` on the turns
    after K), written as run files and loaded as a corpus."""
    from adakit.synthetic import synthetic_forks, synthetic_run, write_run

    for p in range(parents):
        parent = synthetic_run(f"par{p}", tools=["OVW", "PKR", "PKR", "EXP", "PKR", "MEM",
                                                 "PKR", "PKR", "OVW", "PKR", "PKR",
                                                 {"tool": "CON", "finalize": True}], seed=p)
        write_run(parent, folder / "runs" / f"par{p}.jsonl")
        for change, value, extra in (("placebo", None, 0.0), ("inject", "Hurry up.", extra_turns)):
            for rf in synthetic_forks(parent, at, change, value, seeds=seeds, extra_turns=extra):
                write_run(rf, folder / "runs.forks" / f"par{p}__at{at}" / f"{rf.header.run_id}.jsonl")
    return load_corpus(folder / "runs.forks", cache=False)


def outcomes_of(corpus):
    forks = fork_index(corpus.runs)
    return fork_outcomes(forks, corpus.runs, corpus.turns, corpus.reads)


def test_a_planted_effect_is_recovered_within_its_interval(tmp_path):
    corpus = synthetic_fork_corpus(tmp_path, extra_turns=6.0)
    outcomes = outcomes_of(corpus)
    assert len(outcomes) == 48 and outcomes["block"].nunique() == 3
    effects = fork_effects(outcomes, n_permutations=2000, n_resamples=500)
    row = effects[effects["metric"] == "turns_after"].iloc[0]
    assert row["treatment"] == 'inject "Hurry up."' and row["n_sets"] == 3
    assert (row["n_treated"], row["n_placebo"]) == (24, 24)
    assert row["effect_lo"] <= 6.0 <= row["effect_hi"] and row["effect_lo"] > 0
    assert row["p"] < 0.01 and row["reading"] == "treated > placebo"
    assert row["effect"] == pytest.approx(row["treated"] - row["placebo"])
    assert any(m.startswith("share: ") for m in effects["metric"])
    fig = plot_fork_effects(effects)
    assert len(fig.axes[0].get_yticklabels()) == 4


def test_no_effect_gives_an_interval_covering_zero(tmp_path):
    outcomes = outcomes_of(synthetic_fork_corpus(tmp_path, extra_turns=0.0))
    effects = fork_effects(outcomes, tags=False, n_permutations=2000, n_resamples=500)
    for row in effects.itertuples():
        assert row.effect_lo <= 0.0 <= row.effect_hi, row.metric
    assert set(effects["reading"]) == {"no difference shown"}


def test_outcomes_count_only_what_comes_after_k(tmp_path):
    outcomes = outcomes_of(synthetic_fork_corpus(tmp_path, extra_turns=0.0, parents=1, seeds=2))
    corpus = load_corpus(tmp_path / "runs.forks", cache=False)
    for row in outcomes.itertuples():
        turns = corpus.turns[corpus.turns["run_id"] == row.run_id]
        assert row.turns_after == (turns["turn"] > row.at).sum()
        reads = corpus.reads[corpus.reads["run_id"] == row.run_id]
        late_files = set(reads.loc[reads["turn"] > row.at, "file"])
        early_files = set(reads.loc[reads["turn"] <= row.at, "file"])
        assert row.new_files_after == len(late_files - early_files)
        assert row.concluded == 1.0
    assert set(outcomes["arm"]) == {"placebo", "treated"}


def test_new_lines_count_only_lines_the_prefix_did_not_read():
    from adakit.lenses.forks import _new_lines

    assert _new_lines([(1, 10)], [(5, 14)]) == 4
    assert _new_lines([], [(1, 3), (2, 5)]) == 5
    assert _new_lines([(1, 10)], [(2, 3)]) == 0


def test_effects_need_placebos_of_the_same_prefix(tmp_path):
    outcomes = outcomes_of(synthetic_fork_corpus(tmp_path, extra_turns=1.0, parents=1, seeds=3))
    treated_only = outcomes[outcomes["arm"] == "treated"]
    assert fork_effects(treated_only).empty


# ------------------------------------------------------------------------- fork studies

FORK_STUDY = """\
name: forktest
output: {out}
matrix:
  - models: [baseline-tracer]
    worlds: [flask]
    tasks: [feature_tracing]
    conditions: [natural]
    turn_bound: 30
forks:
  - models: [baseline-tracer]
    at: 0.5
    changes: [placebo, {{inject: "Read the tests too."}}]
    seeds: 2
"""


def test_a_fork_study_is_planned_launched_and_resumed(flask_world, tmp_path, capsys):
    study = tmp_path / "forktest.yaml"
    study.write_text(FORK_STUDY.format(out=tmp_path / "runs"))
    assert cli.main(["launch", str(study), "--plan"]) == 0
    assert "forks: 0 in 0 fork set(s)" in capsys.readouterr().out  # no parent recorded yet
    assert cli.main(["launch", str(study), "--yes"]) == 0
    printed = capsys.readouterr()
    assert "4 forks: finalize 4" in printed.out
    assert printed.err.count("fork ") >= 4 and "fork 4/4 " in printed.err  # a line per fork made
    (parent_path,) = (tmp_path / "runs").glob("*.jsonl")
    parent = read_run(parent_path)
    at = round(0.5 * len(parent.turns))
    folder = fork_set_folder(parent_path, parent.header.run_id, at)
    forks = {p.name: read_run(p) for p in folder.glob("*.jsonl")}
    assert len(forks) == 4
    placebo = [rf for name, rf in forks.items() if "__placebo__" in name]
    assert all([content(t) for t in rf.turns] == [content(t) for t in parent.turns] for rf in placebo)
    assert cli.main(["launch", str(study), "--plan"]) == 0
    assert "forks: 4 in 1 fork set(s) (finished 4)" in capsys.readouterr().out
    from adakit.study.fork import study_forks
    from adakit.study.spec import load_study

    order = [(sf.plan.draw, sf.change.kind) for sf in study_forks(load_study(study))]
    assert order == [(1, "placebo"), (1, "inject"), (2, "placebo"), (2, "inject")]  # seed by seed
    assert cli.main(["launch", str(study), "--yes"]) == 0
    assert "4 forks: skipped 4" in capsys.readouterr().out


def test_a_fork_study_is_packed_with_a_manifest_that_catches_an_edit(flask_world, tmp_path, capsys):
    """``adakit dataset build-forks``: one row per finished fork, the study file and replies
    beside; ``adakit dataset check`` passes on it and names a fork file edited afterwards."""
    study = tmp_path / "forktest.yaml"
    study.write_text(FORK_STUDY.format(out=tmp_path / "runs"))
    pack = tmp_path / "pack"
    assert cli.main(["dataset", "build-forks", str(study), "--out", str(pack)]) == 1
    assert "no fork of" in capsys.readouterr().err  # nothing launched yet
    assert cli.main(["launch", str(study), "--yes"]) == 0
    assert cli.main(["dataset", "build-forks", str(study), "--out", str(pack)]) == 0
    assert "4 of 4 finished, in 1 fork set(s)" in capsys.readouterr().out
    manifest = json.loads((pack / "manifest.json").read_text())
    assert {r["change"]["kind"] for r in manifest["forks"]} == {"placebo", "inject"}
    assert manifest["remaining"] == [] and (pack / "study.yaml").read_text() == study.read_text()
    assert cli.main(["dataset", "check", str(pack)]) == 0
    assert "4 forks match the manifest" in capsys.readouterr().out
    edited = Path(manifest["forks"][0]["file"])
    edited.write_text(edited.read_text().replace('"finalize"', '"turn_bound"'))
    assert cli.main(["dataset", "check", str(pack)]) == 1
    assert "sha256 differs from the manifest" in capsys.readouterr().out


def test_a_judged_fork_study_packs_its_verdicts_and_check_catches_a_later_judging(
        flask_world, tmp_path, capsys, monkeypatch):
    """The verdicts on the forks' conclusions are named in the pack's manifest (log, digest of
    the current verdicts on packed forks, judges, the judge command); a verdict given before
    its fork ended or replaced by a later one is not counted, and ``dataset check`` names a
    packed fork judged again after packing, and a log that is gone."""
    import time

    from adakit import config

    monkeypatch.setattr(config, "JUDGMENTS", tmp_path / "judgments")
    monkeypatch.setenv("ADAKIT_CACHE", str(tmp_path / "cache"))  # not the project's replies
    study = tmp_path / "forktest.yaml"
    study.write_text(FORK_STUDY.format(out=tmp_path / "runs"))
    assert cli.main(["launch", str(study), "--yes"]) == 0
    forks = sorted(read_run(p).header.run_id for p in (tmp_path / "runs.forks").rglob("*.jsonl"))
    log = tmp_path / "judgments" / "runs.forks" / "judgments.jsonl"
    write_verdicts(log, forks, dict.fromkeys(forks, "well-supported"),
                   judges=("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"))
    stamped = [dict(json.loads(line), judged_at=time.time(), max_tokens=400)
               for line in log.read_text().splitlines()]
    stamped[0]["judged_at"] = 0.0  # given before its fork ended: not a verdict on it
    superseded = dict(stamped[1], label="unsupported", judged_at=stamped[1]["judged_at"] - 1)
    other = dict(stamped[2], run_id="a-fork-of-another-study", item_id="its-item")  # not packed
    log.write_text("".join(json.dumps(row) + "\n" for row in [superseded, *stamped, other]))
    pack = tmp_path / "pack"
    capsys.readouterr()
    assert cli.main(["dataset", "build-forks", str(study), "--out", str(pack)]) == 0
    assert "7 verdicts on 4 forks" in capsys.readouterr().out
    manifest = json.loads((pack / "manifest.json").read_text())
    (judged,) = manifest["judgments"]
    assert (judged["verdicts"], judged["judged_forks"], judged["judges"]) == (
        7, 4, ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    assert config.resolve(judged["file"]) == log and judged["families"] == ["trace_grounding"]
    assert judged["command"] in manifest["regenerate"] and "--max-tokens 400" in judged["command"]
    assert manifest["counts"]["verdicts"] == 7 and judged["max_tokens"] == 400
    assert cli.main(["dataset", "check", str(pack)]) == 0
    with open(log, "a", encoding="utf-8") as fh:  # another study's fork judged: still matches
        fh.write(json.dumps(dict(other, item_id="another-item")) + "\n")
    assert cli.main(["dataset", "check", str(pack)]) == 0
    with open(log, "a", encoding="utf-8") as fh:  # a packed fork judged again: it does not
        fh.write(json.dumps(dict(stamped[1], label="unsupported")) + "\n")
    capsys.readouterr()
    assert cli.main(["dataset", "check", str(pack)]) == 1
    assert "judged again since the pack" in capsys.readouterr().out
    with open(log, "a", encoding="utf-8") as fh:  # a judge the registry does not know
        fh.write(json.dumps(dict(stamped[1], judge="judge-nobody-knows")) + "\n")
    assert cli.main(["dataset", "build-forks", str(study), "--out", str(pack)]) == 1
    assert "'judge-nobody-knows', which the model registry does not know" in capsys.readouterr().err
    log.unlink()  # the verdicts the pack names are gone
    assert cli.main(["dataset", "check", str(pack)]) == 1
    assert "the forks' verdicts are listed in the manifest but absent" in capsys.readouterr().out


def test_a_fork_pack_holds_the_judges_replies_its_parent_dataset_does_not(tmp_path):
    """Unscoped replies of a judge model go into the fork pack unless the dataset the forks'
    parents come from (``<dataset>/runs.forks``) already ships them."""
    from adakit.llm.models import Completion, ResponseCache, get_model
    from adakit.study.fork_dataset import _pack_responses, _parent_reply_keys

    endpoint = get_model("qwen2.5-coder-0.5b").endpoint
    cache = ResponseCache(tmp_path / "cache" / "responses", "use")
    keys = [f"{i:064x}" for i in (1, 2, 3)]
    for key in keys:
        cache.put(key, Completion(text=f"verdict {key[-1]}"), {"endpoint": endpoint, "messages": []})
    dataset_dir = tmp_path / "ds"
    (dataset_dir / "runs.forks" / "p__at4").mkdir(parents=True)
    rows = [{"run_id": "f1", "file": str(dataset_dir / "runs.forks" / "p__at4" / "f1.jsonl")}]
    shipped = Completion(text="verdict 1").to_dict()
    (dataset_dir / "responses.jsonl").write_text(
        json.dumps({"key": keys[0], "completion": shipped}) + "\n"
        + '{"key": "' + keys[1] + '", "completion": {"text": cut off\n')  # damaged: not shipped
    assert _parent_reply_keys(rows) == set()  # not a dataset yet: no manifest.json
    (dataset_dir / "manifest.json").write_text("{}")
    skip = _parent_reply_keys(rows)
    assert skip == {keys[0]}
    (tmp_path / "pack").mkdir()
    assert _pack_responses(tmp_path / "cache", rows, {"qwen2.5-coder-0.5b"}, tmp_path / "pack",
                           skip=skip) == 2
    packed = [json.loads(line)["key"] for line in (tmp_path / "pack" / "responses.jsonl").open()]
    assert sorted(packed) == keys[1:]


def test_the_judge_command_of_a_fork_pack_keeps_the_parent_studys_reply_limit(tmp_path):
    from adakit.study.fork_dataset import _parent_judge_tokens

    (tmp_path / "ds" / "runs.forks").mkdir(parents=True)
    (tmp_path / "ds" / "study.yaml").write_text("name: x\njudge:\n  max_tokens: 400\n")
    assert _parent_judge_tokens(tmp_path / "ds" / "runs.forks") is None  # not a dataset
    (tmp_path / "ds" / "manifest.json").write_text("{}")
    assert _parent_judge_tokens(tmp_path / "ds" / "runs.forks") == 400
    assert _parent_judge_tokens(tmp_path / "ds" / "runs") is None  # not a fork corpus


@pytest.mark.parametrize("block, needle", [
    ("  - at: 0\n    changes: [placebo]\n", "'at' is a turn"),
    ("  - at: 1.5\n    changes: [placebo]\n", "'at' is a turn"),
    ("  - at: 3\n    changes: []\n", "'changes' must be a non-empty list"),
    ("  - at: 3\n    changes: [{rewind: 2}]\n", "unknown change 'rewind'"),
    ("  - at: 3\n    changes: [{condition: hurry}]\n", "unknown condition 'hurry'"),
    ("  - at: 3\n    changes: [placebo]\n    seeds: 0\n", "'seeds' must be"),
    ("  - at: 3\n    changes: [placebo]\n    when: now\n", "unknown key(s) when"),
])
def test_a_bad_fork_block_stops_the_launch_with_one_line(tmp_path, capsys, block, needle):
    study = tmp_path / "bad.yaml"
    study.write_text(f"name: bad\noutput: {tmp_path / 'runs'}\nforks:\n{block}")
    assert cli.main(["launch", str(study)]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_k_as_a_fraction_stays_inside_the_run():
    from adakit.study.fork import turn_of

    assert turn_of(0.5, 10) == 5 and turn_of(0.01, 10) == 1 and turn_of(0.99, 10) == 9
    assert turn_of(4, 5) == 4 and turn_of(5, 5) is None and turn_of(0.5, 1) is None


def test_a_fork_replays_from_the_response_cache(world, tmp_path):
    import types

    from adakit.llm.models import ResponseCache
    from adakit.record import content_digest

    parent, _ = record_parent(world, tmp_path)
    cache = ResponseCache(tmp_path / "cache")
    change = Change("inject", TEXT)
    plan = plan_forks(parent, 2, change, 1)[0]
    with FakeOpenAI([peek("pkg/util.py"), FINAL]) as fake:
        live_backend = OpenAIBackend(spec_for(fake), cache=cache, cache_scope=plan.run_id)
        live = run_fork(parent, 2, change, plan, fake_context(world, live_backend))
        url = fake.url
    # the server is gone: the fork's own turns come from the cache, its prefix from the record
    again = dataclasses.replace(plan, path=tmp_path / "replay" / plan.path.name)
    backend = OpenAIBackend(spec_for(types.SimpleNamespace(url=url)),
                            cache=cache.with_mode("replay"), cache_scope=plan.run_id)
    replay = run_fork(parent, 2, change, again, fake_context(world, backend))
    assert content_digest(replay) == content_digest(live)
    assert all(t.cached for t in replay.turns[2:])


def test_a_fork_of_a_changed_prefix_sets_the_old_file_aside(world, tmp_path):
    parent, _ = record_parent(world, tmp_path)
    change = Change("placebo")
    plan = plan_forks(parent, 2, change, 1)[0]
    with FakeOpenAI([FINAL]) as fake, pytest.raises(KeyboardInterrupt):
        run_fork(parent, 2, change, plan, fake_context(world, _DiesAfter(backend_of(fake), 0)))
    first = parent.turns[0].model_copy(update={"observation": parent.turns[0].observation + " (edited)"})
    edited = dataclasses.replace(parent, turns=[first, *parent.turns[1:]])
    with FakeOpenAI([FINAL]) as fake:
        rf = run_fork(edited, 2, change, plan, fake_context(world, backend_of(fake)))
    assert rf.turns[0].observation.endswith("(edited)") and len(rf.turns) == 3
    assert rf.header.forked_from.prefix_sha256 == prefix_digest(edited.header, edited.turns[:2])
    assert len(list(plan.path.parent.glob("*.stale-*.jsonl.bak"))) == 1


def test_forks_of_a_paid_model_wait_for_confirmation(tmp_path, capsys):
    from adakit.synthetic import synthetic_run, write_run

    parent = synthetic_run("paid", world="flask", tools=["OVW", "PKR", "PKR", "PKR",
                                                         {"tool": "CON", "finalize": True}])
    header = parent.header.model_copy(update={"model": parent.header.model.model_copy(
        update={"name": "gpt-4o", "kind": "llm"})})
    write_run(dataclasses.replace(parent, header=header), tmp_path / "paid" / "paid.jsonl")
    study = tmp_path / "paid.yaml"
    study.write_text(f"name: paid\noutput: {tmp_path / 'out'}\nforks:\n"
                     f"  - from: {tmp_path / 'paid'}\n    at: 2\n    changes: [placebo]\n    seeds: 2\n")
    assert cli.main(["launch", str(study), "--plan"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("forks:"))
    assert "forks: 2 in 1 fork set(s) (to_run 2)" in line
    assert float(line.rsplit("$", 1)[1]) > 0  # gpt-4o is priced: the turns left cost money
    assert cli.main(["launch", str(study), "--confirm-above", "0"]) == 3
    assert "no fork was made" in capsys.readouterr().err
    assert not (tmp_path / "paid.forks").exists()


# ------------------------------------------------------------------------- lens 3 in the estimate


def write_verdicts(path, run_ids, labels, families=("trace_grounding",), judges=("j1", "j2", "j3")):
    """A hand-written judgments log: every judge gives each run's conclusion ``labels[run]``
    in each of ``families``."""
    from adakit.judging.families import FAMILIES

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for run_id in run_ids:
            for family in families:
                label = labels[run_id]
                for judge in judges:
                    fh.write(json.dumps({
                        "item_id": f"{run_id}/conclusion/{family}", "run_id": run_id,
                        "family": family, "judge": judge, "turn": None, "tool": None,
                        "label": label, "score": FAMILIES[family].score(label),
                        "rationale": "hand-written", "evidence": [], "valid": True,
                        "cached": False, "latency_s": 0.0}) + "\n")


def test_lens3_scores_of_judged_conclusions_enter_the_estimate(tmp_path, monkeypatch):
    from adakit import config
    from adakit.lenses.forks import LENS3_METRICS, NOT_JUDGED, fork_judgments

    monkeypatch.setattr(config, "JUDGMENTS", tmp_path / "judgments")
    corpus = synthetic_fork_corpus(tmp_path, extra_turns=0.0, parents=2, seeds=4)
    forks = fork_index(corpus.runs)
    # treated conclusions well supported (4), placebo ones weakly (2): +2/3 after normalising
    labels = {r.run_id: "well-supported" if r.arm == "treated" else "weakly-supported"
              for r in forks.itertuples()}
    write_verdicts(tmp_path / "judgments" / "runs.forks" / "judgments.jsonl", labels, labels)
    judgments, note = fork_judgments(tmp_path / "runs.forks")
    assert judgments is not None and "16 fork(s)" in note
    outcomes = fork_outcomes(forks, corpus.runs, corpus.turns, corpus.reads, judgments)
    assert set(LENS3_METRICS) <= set(outcomes.columns)
    assert outcomes["relevance"].isna().all()  # task relevance was not judged
    effects = fork_effects(outcomes, tags=False, n_permutations=2000, n_resamples=500)
    row = effects[effects["metric"] == "conclusion_grounding"].iloc[0]
    assert row["effect"] == pytest.approx(2 / 3) and row["effect_lo"] == pytest.approx(2 / 3)
    assert (row["treated"], row["placebo"]) == (pytest.approx(1.0), pytest.approx(1 / 3))
    assert row["reading"] == "treated > placebo"
    assert row["note"] == "judged conclusions: 8 treated, 8 placebo forks"
    unjudged = effects[effects["metric"] == "relevance"].iloc[0]
    assert np.isnan(unjudged["effect"]) and unjudged["reading"] == NOT_JUDGED
    assert "adakit judge" in unjudged["note"]
    turns = effects[effects["metric"] == "turns_after"].iloc[0]
    assert turns["note"] == "" and turns["reading"] == "no difference shown"
    labels_drawn = [t.get_text() for t in plot_fork_effects(effects).axes[0].get_yticklabels()]
    assert any("conclusion grounding" in t for t in labels_drawn)
    assert not any("task relevance" in t for t in labels_drawn)


def test_without_verdicts_the_lens3_rows_are_absent_with_a_reason(tmp_path, monkeypatch):
    from adakit import config
    from adakit.lenses.forks import LENS3_METRICS, fork_judgments

    monkeypatch.setattr(config, "JUDGMENTS", tmp_path / "judgments")
    corpus = synthetic_fork_corpus(tmp_path, extra_turns=0.0, parents=1, seeds=3)
    judgments, note = fork_judgments(tmp_path / "runs.forks")
    assert judgments is None and "no lens 3 verdicts for runs.forks" in note
    assert "adakit judge" in note
    outcomes = outcomes_of(corpus)
    assert not set(LENS3_METRICS) & set(outcomes.columns)
    effects = fork_effects(outcomes, tags=False, n_permutations=200, n_resamples=100)
    assert not set(LENS3_METRICS) & set(effects["metric"])


def test_a_budget_fork_of_a_scripted_baseline_concludes_within_its_budget(
        flask_world, flask_index, tmp_path):
    parent = baseline_parent(flask_world, flask_index, tmp_path)
    at = 2
    assert len(parent.turns) > at + 12  # the parent's plan runs past the budget
    assert cli.main(["fork", str(parent.path), "--at", str(at), "--condition", "budget_pressure",
                     "--seeds", "1"]) == 0
    (path,) = fork_set_folder(parent.path, "parent", at).glob("*.jsonl")
    rf = read_run(path)
    assert [content(t) for t in rf.turns[:at]] == [content(t) for t in parent.turns[:at]]
    assert len(rf.turns) == at + 12 and rf.end.reason == "finalize"
    assert rf.turns[-1].call.tool == "stash_conclusion"
    # before the budget's last turn it follows the parent's plan
    assert [t.call for t in rf.turns[:-1]] == [t.call for t in parent.turns[:len(rf.turns) - 1]]


def test_a_late_budget_counts_the_replies_since_it_was_given():
    from adakit.apparatus.baselines import late_budget
    from adakit.study.fork import budget_note

    note = {"role": "user", "content": "observation\n[SYSTEM] " + budget_note(5)}
    reply = {"role": "assistant", "content": "<call/>"}
    assert late_budget([{"role": "user", "content": "task"}, reply]) is None
    assert late_budget([reply, note]) == 4
    assert late_budget([reply, note, reply, {"role": "user", "content": "obs"}, reply]) == 2
    assert late_budget([note, *[reply] * 9]) == 0
    # the task's own budget block and the reminders of a budget condition are not mid-run budgets
    assert late_budget([{"role": "user", "content": "Budget: 3 of 12 turns left."}]) is None


FORK_PACK = Path(__file__).resolve().parents[1] / "data" / "reference" / "local-forks"


@pytest.mark.skipif(not (FORK_PACK / "manifest.json").exists(), reason="no fork pack shipped")
def test_the_shipped_forks_are_read_with_their_verdicts_beside_them():
    """The reference forks' verdicts are found where the pack says they are (judgments.forks
    beside runs.forks), and every fork the pack counts as judged has a lens 3 score."""
    from adakit import config
    from adakit.lenses.forks import LENS3_METRICS, fork_judgments

    manifest = json.loads((FORK_PACK / "manifest.json").read_text())
    forks_dir = config.resolve(manifest["forks"][0]["file"]).parent.parent
    judgments, note = fork_judgments(forks_dir)
    assert judgments is not None, note
    assert f"{manifest['counts']['judged_forks']} fork(s)" in note
    corpus = load_corpus(forks_dir)
    outcomes = fork_outcomes(fork_index(corpus.runs), corpus.runs, corpus.turns, corpus.reads,
                             judgments)
    assert outcomes[list(LENS3_METRICS)].notna().all(axis=1).sum() == manifest["counts"]["judged_forks"]


@pytest.mark.slow
@pytest.mark.skipif(not (FORK_PACK / "manifest.json").exists(), reason="no fork pack shipped")
def test_the_shipped_fork_study_matches_its_pack_and_a_fork_replays_from_it(tmp_path, monkeypatch):
    """The reference forks: their files match the pack's manifest, each starts with its
    parent's first K turns, and one fork made again from the packed replies alone (cache mode
    replay, no model) is the recorded one."""
    from adakit import config
    from adakit.study.dataset import restore_cache
    from adakit.study.fork import launch_context, parse_change
    from adakit.study.fork_dataset import check_forks
    from adakit.study.launch import _backend, _Worlds

    assert check_forks(FORK_PACK) == []
    manifest = json.loads((FORK_PACK / "manifest.json").read_text())
    assert manifest["remaining"] == [] and manifest["counts"]["forks"] == len(manifest["forks"]) > 0
    parents = {}
    for row in manifest["forks"]:
        fork = read_run(config.resolve(row["file"]))
        forks_dir = next(p for p in config.resolve(row["file"]).parents if p.name.endswith(".forks"))
        parents_dir = forks_dir.with_name(forks_dir.name.removesuffix(".forks"))  # beside them
        parent = parents.setdefault(row["parent"], read_run(parents_dir / f"{row['parent']}.jsonl"))
        assert fork.header.forked_from.prefix_sha256 == prefix_digest(parent.header, parent.turns[:row["at"]])
    monkeypatch.setenv("ADAKIT_CACHE", str(tmp_path / "cache"))
    assert restore_cache(FORK_PACK) == manifest["counts"]["responses"]
    row = manifest["forks"][0]
    change = parse_change("placebo" if row["change"]["kind"] == "placebo"
                          else {row["change"]["kind"]: row["change"]["value"]}, "test")
    plan = next(p for p in plan_forks(parents[row["parent"]], row["at"], change, 3, tmp_path / "again")
                if p.run_id == row["run_id"])
    again = run_fork(parents[row["parent"]], row["at"], change, plan,
                     launch_context(_Worlds(), _backend, "replay"))
    from adakit.record import content_digest

    assert content_digest(again) == row["digest"]
    # the judges' replies are packed too: the fork's conclusion judged again, no model asked
    from adakit.judging.run import run_judgments
    from adakit.judging.store import read_log

    (judged,) = manifest["judgments"]
    report = run_judgments(config.resolve(row["file"]), families=judged["families"],
                           judges=judged["judges"], cache_mode="replay", out_dir=tmp_path / "j",
                           max_tokens=judged["max_tokens"], progress=False)
    assert report is not None
    shipped = {(v["family"], v["judge"]): v["label"] for v in read_log(config.resolve(judged["file"]))
               if v["run_id"] == row["run_id"]}
    again_labels = {(v["family"], v["judge"]): v["label"]
                    for v in read_log(tmp_path / "j" / "judgments.jsonl")}
    assert again_labels == shipped and len(shipped) == 9
