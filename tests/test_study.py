"""The matrix launcher: study files, deterministic ids, skip/resume, and kill -9 mid-launch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from fake_openai import FakeOpenAI, reply

from adakit.record import load_corpus, read_run
from adakit.study.spec import load_study, restrict

ROOT = Path(__file__).resolve().parents[1]


def test_quick_and_paper_studies_parse():
    quick = load_study(ROOT / "studies" / "quick.yaml")
    assert len({s.run_id for s in quick.specs}) == len(quick.specs)
    from adakit.llm.models import DEFAULT_LOCAL_MODEL

    assert any(s.model == DEFAULT_LOCAL_MODEL for s in quick.specs)
    assert any(s.condition == "coach_judge" for s in quick.specs)
    paper = load_study(ROOT / "studies" / "paper.yaml")
    main = [s for s in paper.specs if s.condition != "coach_judge"]
    assert len(main) == 6 * 4 * 4 * 4 == 384
    assert {s.model for s in main} == {"gpt-4o", "gpt-4.1", "deepseek-v3.2", "qwen3.5-397b-a17b"}
    assert len(paper.specs) - len(main) == 24
    assert all(dict(s.settings)["turn_bound"] == 100 for s in paper.specs)


def test_study_errors_are_clear(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"matrix": [{"models": ["m"], "worlds": ["w"], "tasks": ["dance"], "conditions": ["natural"]}]}))
    with pytest.raises(ValueError, match="unknown task 'dance'"):
        load_study(bad)
    bad.write_text(yaml.safe_dump({"matrix": [{"models": ["m"], "worlds": ["w"], "tasks": ["all"], "conditions": ["calm"]}]}))
    with pytest.raises(ValueError, match="unknown condition 'calm'"):  # a StudyError, one line
        load_study(bad)
    with pytest.raises(FileNotFoundError):
        load_study(tmp_path / "none.yaml")


def test_restrict_and_run_ids():
    quick = load_study(ROOT / "studies" / "quick.yaml")
    sub = restrict(quick, models=["baseline-tracer"], worlds=["flask"], conditions=["natural"], turn_bound=7)
    assert len(sub.specs) == 4 + 4  # four task families, and repeats r1-r4 of feature tracing
    assert sub.specs[0].run_id == "baseline-tracer__flask__architecture_analysis__natural__r0"
    assert all(dict(s.settings)["turn_bound"] == 7 for s in sub.specs)
    first = restrict(quick, models=["baseline-tracer"], worlds=["flask"], conditions=["natural"],
                     repeats=[0])
    assert len(first.specs) == 4 and {s.repeat for s in first.specs} == {0}
    with pytest.raises(ValueError):
        restrict(quick, models=["nobody"])


def test_repeats_get_their_own_seed_and_response_cache_scope(tmp_path, monkeypatch):
    from adakit.llm.models import CacheMiss
    from adakit.study.launch import _backend

    quick = load_study(ROOT / "studies" / "quick.yaml")
    for model in ("baseline-skimmer", "baseline-tracer", "baseline-close_reader"):
        cell = [s for s in quick.specs if s.model == model and s.world == "flask"
                and s.task == "feature_tracing" and s.condition == "natural"]
        assert [(s.repeat, s.seed) for s in cell] == [(r, r) for r in range(5)], model
        assert [s.run_id[-4:] for s in cell] == ["__r0", "__r1", "__r2", "__r3", "__r4"]
        assert len({s.settings for s in cell}) == 1, f"{model}: one cell, one set of settings"
    ci = load_study(ROOT / "studies" / "ci.yaml")
    t07 = [s for s in ci.specs if s.model == "smollm2-135m-t07"]
    assert [(s.repeat, s.seed) for s in t07] == [(0, 0), (1, 1)]
    # each repeat's request carries its seed (llama.cpp samples from it) and is cached under
    # its run id; a replay from an empty cache names the key it looked for, no server started
    monkeypatch.setenv("ADAKIT_CACHE", str(tmp_path))
    keys, seeds = [], []
    for spec in t07:
        backend = _backend(spec.model, None, None, spec.seed, "replay", spec.run_id)
        request, _ = backend.build_request([{"role": "user", "content": "same prompt"}])
        seeds.append(request["seed"])
        with pytest.raises(CacheMiss) as miss:
            backend.complete([{"role": "user", "content": "same prompt"}])
        keys.append(miss.value.key)
    assert seeds == [0, 1] and request["temperature"] == 0.7
    assert len(set(keys)) == 2
    again = _backend(t07[1].model, None, None, t07[1].seed, "replay", t07[1].run_id)
    with pytest.raises(CacheMiss) as miss:
        again.complete([{"role": "user", "content": "same prompt"}])
    assert miss.value.key == keys[1]  # the same repeat replays the same entry


def test_the_local_profile_repeats_two_cells_of_the_default_agent_five_times():
    """The reference corpus's noise floor: at least two (world, task) cells of the 1.5B run
    five times each, seeds 0-4, one set of settings per cell; and its runs are ordered so
    that a corpus packed part way (12 runs) holds both conditions and every world and task."""
    from collections import defaultdict

    from adakit.apparatus.tasks import task_families
    from adakit.llm.models import DEFAULT_LOCAL_MODEL

    local = load_study(ROOT / "studies" / "local.yaml")
    cells: dict[tuple[str, str, str], list] = defaultdict(list)
    for s in local.specs:
        if s.model == DEFAULT_LOCAL_MODEL:
            cells[(s.world, s.task, s.condition)].append(s)
    repeated = {k: v for k, v in cells.items() if len(v) > 1}
    assert len(repeated) >= 2
    for cell in repeated.values():
        assert sorted((s.repeat, s.seed) for s in cell) == [(k, k) for k in range(5)]
        assert len({s.settings for s in cell}) == 1
    every = [s for s in local.specs if s.model == DEFAULT_LOCAL_MODEL]
    first = every[:12]  # about one sitting on 2 cores
    assert {s.condition for s in first} == {"natural", "budget_pressure"}
    assert {s.world for s in first} == {"flask", "requests", "scikit-learn"}
    assert {s.task for s in first} == set(task_families())
    assert "qwen2.5-coder-1.5b__requests__feature_tracing__natural__r0" in {s.run_id for s in first}
    assert sum(s.repeat == 1 for s in first) == 2  # two cells measured twice
    grid = [s for s in every if s.repeat == 0]
    assert len(grid) >= 24 and len({(s.world, s.task) for s in grid[:16]}) == 12


def test_a_run_in_two_blocks_must_keep_one_set_of_settings(tmp_path):
    study = tmp_path / "s.yaml"
    block = {"models": ["baseline-tracer"], "worlds": ["flask"], "tasks": ["feature_tracing"],
             "conditions": ["natural"]}
    study.write_text(yaml.safe_dump({"matrix": [block, {**block, "repeats": 3}]}))
    assert [s.repeat for s in load_study(study).specs] == [0, 1, 2]  # r0 shared, same settings
    study.write_text(yaml.safe_dump({"matrix": [block, {**block, "repeats": 3, "turn_bound": 2}]}))
    with pytest.raises(ValueError, match="also in an earlier block with other settings"):
        load_study(study)


def test_the_scaffold_aids_are_set_per_study_or_per_block(tmp_path):
    study = tmp_path / "s.yaml"
    block = {"worlds": ["flask"], "tasks": ["feature_tracing"], "conditions": ["natural"]}
    study.write_text(yaml.safe_dump({"redraw_repeats": 2, "matrix": [
        {**block, "models": ["baseline-tracer"], "ledger": True, "ledger_chars": 400},
        {**block, "models": ["baseline-reader"], "redraw_repeats": 0}]}))
    tracer, reader = load_study(study).specs
    assert dict(tracer.settings) == {"redraw_repeats": 2, "ledger": True, "ledger_chars": 400}
    assert dict(reader.settings) == {"redraw_repeats": 0}


def _fake_agent(request: dict) -> object:
    """A deterministic scripted agent: turn k peeks lines 10k.., turn 6 concludes."""
    k = sum(1 for m in request["messages"] if m["role"] == "assistant") + 1
    if k >= 6:
        text = (
            "<thinking>done</thinking><stash_conclusion><content>app.py read</content>"
            "<proceed_to_finalize>true</proceed_to_finalize></stash_conclusion>"
        )
    else:
        text = (
            f"<thinking>step {k}</thinking><peek_code_region><file_path>src/flask/app.py</file_path>"
            f"<start_line>{10 * k}</start_line><end_line>{10 * k + 9}</end_line></peek_code_region>"
        )
    return reply(text, delay=0.25)


def _launch_env(tmp_path: Path, url: str) -> dict[str, str]:
    models = tmp_path / "models.yaml"
    models.write_text(
        yaml.safe_dump(
            {"models": {"fake-llm": {"kind": "llm", "base_url": url, "model_id": "fake", "api_key_env": "FAKE_KEY",
                                     "temperature": 0.2, "max_tokens": 200, "context_window": 64000}}}
        )
    )
    env = dict(os.environ, ADAKIT_MODELS=str(models), ADAKIT_CACHE=str(tmp_path / "cache"), FAKE_KEY="k")
    return env


@pytest.mark.slow
def test_kill_minus_nine_then_resume_loses_and_duplicates_nothing(tmp_path, flask_world):
    out = tmp_path / "runs"
    study = tmp_path / "study.yaml"
    study.write_text(
        yaml.safe_dump(
            {
                "name": "killtest",
                "output": str(out),
                "concurrency": 2,
                "matrix": [
                    {"models": ["fake-llm"], "worlds": ["flask"], "tasks": ["architecture_analysis", "risk_review"],
                     "conditions": ["natural", "prior_suppression"]}
                ],
            }
        )
    )
    with FakeOpenAI(_fake_agent) as fake:
        env = _launch_env(tmp_path, fake.url)
        cmd = [sys.executable, "-m", "adakit", "launch", str(study)]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline:  # wait until some turns are on disk, then kill hard
            files = list(out.glob("*.jsonl"))
            if files and max(len(f.read_text().splitlines()) for f in files) >= 3:
                break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        before = {f.name: f.read_text().splitlines() for f in out.glob("*.jsonl")}
        assert before, "the launch wrote nothing before the kill"
        assert any(json.loads(lines[-1])["kind"] != "end" for lines in before.values() if lines)
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    corpus = load_corpus(out, cache=False)
    assert len(corpus.runs) == 4 and corpus.runs["finished"].all()
    assert set(corpus.runs["reason"]) == {"finalize"}
    for f in out.glob("*.jsonl"):
        lines = f.read_text().splitlines()
        kinds = [json.loads(line)["kind"] for line in lines]
        assert kinds.count("header") == 1 and kinds.count("end") == 1 and kinds[0] == "header"
        rf = read_run(f)
        assert [t.turn for t in rf.turns] == list(range(1, len(rf.turns) + 1)) == [1, 2, 3, 4, 5, 6]
        # every complete record written before the kill is still there, unchanged, in place
        old = [line for line in before.get(f.name, []) if line.endswith("}")]
        complete = []
        for line in old:
            try:
                json.loads(line)
                complete.append(line)
            except json.JSONDecodeError:
                pass
        assert lines[: len(complete)] == complete


def test_a_finished_run_whose_settings_changed_is_set_aside_and_run_again(tmp_path, flask_world):
    """Finished runs are skipped only when recorded under the settings the study has now; one
    launched under others is kept beside the run file and run again, and the plan says why."""
    from adakit.study.launch import launch
    from adakit.study.plan import make_plan
    from adakit.study.retry import study_states

    out = tmp_path / "runs"
    study = tmp_path / "s.yaml"
    block = {"models": ["baseline-tracer"], "worlds": ["flask"], "tasks": ["feature_tracing"],
             "conditions": ["natural"]}
    study.write_text(yaml.safe_dump({"name": "redo", "output": str(out), "turn_bound": 3,
                                     "matrix": [block]}))
    launch(load_study(study), progress=False)
    [state] = study_states(load_study(study))
    assert state.status == "finished"
    path = out / f"{state.spec.run_id}.jsonl"
    assert read_run(path).header.turn_bound == 3
    study.write_text(yaml.safe_dump({"name": "redo", "output": str(out), "turn_bound": 4,
                                     "matrix": [block]}))
    [state] = study_states(load_study(study))
    assert state.status == "to_redo" and state.changed == ("turn_bound",)
    assert "to redo (settings changed) 1" in make_plan(load_study(study)).describe()
    summary = launch(load_study(study), progress=False)
    assert list(summary.attrs["outcomes"].values())[0].startswith("redone:")
    assert read_run(path).header.turn_bound == 4
    kept = list(out.glob("*.attempt-*.jsonl.bak"))
    assert len(kept) == 1 and read_run(kept[0]).header.turn_bound == 3
    assert load_corpus(out, cache=False).runs["run_id"].tolist() == [state.spec.run_id]
    [state] = study_states(load_study(study))
    assert state.status == "finished"


def test_changed_settings_compare_what_the_header_recorded():
    """The closing instruction, its cap and the scaffold settings count; what an older header
    did not record does not."""
    from adakit.apparatus.agent import TEXT_CHARS, close_text
    from adakit.study.retry import changed_settings
    from adakit.study.spec import RunSpec
    from adakit.synthetic import synthetic_run

    spec = RunSpec("s", "m", "w", "feature_tracing", "natural", 0, 0,
                   (("turn_bound", 5), ("close_turn", True), ("close_chars", 1200)))
    header = synthetic_run("m-r", model="m", files={"a.py": 10}, tools=[{"tool": "OVW", "file": "a.py"}]).header
    header = header.model_copy(update={"turn_bound": 5, "scaffold": {}})
    assert changed_settings(header, spec) == ()  # nothing recorded, nothing to compare
    header.scaffold.update(prompts_sha256="x", close_turn=close_text(1200), close_chars=1200)
    assert changed_settings(header, spec) == ()
    header.scaffold.update(close_turn=close_text(TEXT_CHARS), close_chars=TEXT_CHARS)
    assert changed_settings(header, spec) == ("close_turn", "close_chars")
    del header.scaffold["close_chars"]  # recorded before close_chars existed: the 400 cap
    assert changed_settings(header, spec) == ("close_turn", "close_chars")
    header.scaffold.update(close_turn=None, reply_max_tokens=400)
    assert changed_settings(header, spec) == ("reply_max_tokens", "close_turn")


def test_one_launch_reads_each_run_state_once(tmp_path, flask_world, monkeypatch):
    """``adakit launch`` reads where each run stands once and hands that to the preflight, the
    plan and the loop: one ``run_state`` per run, whether finished, interrupted or not begun."""
    from adakit.study import launch as launcher
    from adakit.study import retry
    from adakit.study.launch import gated_launch, launch

    out = tmp_path / "runs"
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump({
        "name": "once", "output": str(out), "turn_bound": 2,
        "matrix": [{"models": ["baseline-tracer"], "worlds": ["flask"],
                    "tasks": ["feature_tracing", "risk_review"], "conditions": ["natural"]}]}))
    launch(load_study(study), progress=False)
    interrupted = out / "baseline-tracer__flask__risk_review__natural__r0.jsonl"
    lines = interrupted.read_text().splitlines(keepends=True)
    interrupted.write_text("".join(lines[:-1]))  # no end record: the launch resumes it
    study.write_text(yaml.safe_dump({
        "name": "once", "output": str(out), "turn_bound": 2,
        "matrix": [{"models": ["baseline-tracer"], "worlds": ["flask"],
                    "tasks": ["feature_tracing", "risk_review", "architecture_analysis"],
                    "conditions": ["natural"]}]}))
    calls: list[str] = []
    real = retry.run_state

    def counted(path, spec, *args, **kwargs):
        calls.append(spec.run_id)
        return real(path, spec, *args, **kwargs)

    monkeypatch.setattr(retry, "run_state", counted)
    monkeypatch.setattr(launcher, "run_state", counted)
    assert gated_launch(load_study(study), yes=True, interactive=False) == 0
    assert sorted(calls) == sorted(s.run_id for s in load_study(study).specs)  # once each
    assert read_run(interrupted).finished
    assert load_corpus(out, cache=False).runs["finished"].all()


def test_the_study_package_imports_without_a_cycle():
    """The spec (over its file schema) sits under the run states, the plan and the preflight; none imports the
    launcher back (the graph counts imports under TYPE_CHECKING too)."""
    from test_layers import _cycle, import_graph

    graph = import_graph()
    study = {m: {d for d in deps if d.startswith("adakit.study")}
             for m, deps in graph.items() if m.startswith("adakit.study")}
    assert _cycle(study) is None
    assert study["adakit.study.spec"] == {"adakit.study.schema"}  # the file's schema, under it
    assert study["adakit.study.schema"] == set()
    for module in ("plan", "preflight", "retry"):
        assert "adakit.study.launch" not in study[f"adakit.study.{module}"], module


def test_changed_settings_see_the_redraw_and_ledger_aids():
    """Both aids are recorded only when on; turning one on, off or changing its parameter is
    a change of settings."""
    from adakit.study.retry import changed_settings
    from adakit.study.spec import RunSpec
    from adakit.synthetic import synthetic_run

    def spec(**settings):
        return RunSpec("s", "m", "w", "feature_tracing", "natural", 0, 0,
                       tuple(sorted({"turn_bound": 5, **settings}.items())))

    header = synthetic_run("m-r", model="m", files={"a.py": 10}, tools=["OVW"]).header
    header = header.model_copy(update={"turn_bound": 5, "scaffold": {"prompts_sha256": "x"}})
    assert changed_settings(header, spec()) == ()
    assert changed_settings(header, spec(redraw_repeats=2)) == ("redraw_repeats",)
    assert changed_settings(header, spec(ledger=True)) == ("ledger",)
    header.scaffold.update(redraw_repeats=2, redraw_step=0.2, ledger=True, ledger_chars=600)
    assert changed_settings(header, spec(redraw_repeats=2, ledger=True)) == ()
    assert changed_settings(header, spec(redraw_repeats=2, redraw_step=0.3, ledger=True,
                                         ledger_chars=400)) == ("redraw_step", "ledger_chars")
    assert changed_settings(header, spec()) == ("redraw_repeats", "ledger")
