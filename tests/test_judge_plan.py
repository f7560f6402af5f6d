"""pipeline.judge_plan: how notebook 03 resolves a judging pass from a study and overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from adakit import config
from adakit.judging import families, run, store
from adakit.study.pipeline import JudgePlan, judge_plan
from adakit.synthetic import synthetic_run, write_run

TOOLS = [{"tool": "PKR", "file": "pkg/a.py", "ranges": [(1, 5)]}, {"tool": "CON", "finalize": True}]


def _write(folder: Path, run_id: str, model: str, kind: str) -> Path:
    rf = synthetic_run(run_id, model=model, tools=TOOLS, files={"pkg/a.py": 20})
    rf.header.model = rf.header.model.model_copy(update={"kind": kind})
    return write_run(rf, folder / f"{run_id}.jsonl")


@pytest.fixture
def corpus(tmp_path) -> Path:
    """Two LLM runs and three runs of each of two baseline policies."""
    folder = tmp_path / "mycorpus"
    _write(folder, "llm-1", "m-llm", "llm")
    _write(folder, "llm-2", "m-llm", "local")
    for policy in ("baseline-b", "baseline-a"):
        for i in (2, 0, 1):
            _write(folder, f"{policy}-{i}", policy, "baseline")
    return folder


@pytest.fixture
def study(tmp_path, corpus) -> Path:
    path = tmp_path / "mystudy.yaml"
    path.write_text(yaml.safe_dump({
        "name": "mystudy",
        "output": str(corpus),
        "matrix": [{"models": ["m-llm"], "worlds": ["flask"], "tasks": ["feature_tracing"],
                    "conditions": ["natural"]}],
        "judge": {"baseline_runs": 1, "judges": ["j1", "j2", "j3"], "turn_judge": "j2",
                  "max_turn_items": 2, "max_tokens": 256, "families": ["task_relevance"]},
    }))
    return path


def test_without_study_or_corpus_it_asks_for_one():
    with pytest.raises(ValueError, match="set `corpus` \\(or `study`\\)"):
        judge_plan()


def test_a_bare_corpus_is_judged_whole_with_the_defaults(corpus):
    plan = judge_plan(corpus=corpus)
    assert plan.run_files == [corpus] and plan.whole_corpus
    assert plan.families == list(families.FAMILIES)
    assert plan.judges == list(run.DEFAULT_PANEL) and plan.turn_judge == run.DEFAULT_PANEL[0]
    assert plan.max_turn_items is None and plan.max_tokens == 2048  # the paper's cap
    assert plan.out_dir == config.JUDGMENTS / "mycorpus"
    assert judge_plan(corpus=corpus, default_max_tokens=384).max_tokens == 384


def test_the_study_block_sets_selection_and_limits(study, corpus):
    plan = judge_plan(study=study)
    assert plan.corpus == corpus and not plan.whole_corpus
    # every LLM run, plus the first run by id of each baseline policy
    assert [p.name for p in plan.run_files] == [
        "baseline-a-0.jsonl", "baseline-b-0.jsonl", "llm-1.jsonl", "llm-2.jsonl"]
    assert plan.families == ["task_relevance"]
    assert plan.judges == ["j1", "j2", "j3"] and plan.turn_judge == "j2"
    assert (plan.max_turn_items, plan.max_tokens) == (2, 256)


def test_explicit_arguments_override_the_study(study, corpus):
    plan = judge_plan(study=study, families=["turn"], judges=["paper"], turn_judge="tj",
                      max_turn_items=5, baseline_runs=0, max_tokens=100)
    assert [p.name for p in plan.run_files] == ["llm-1.jsonl", "llm-2.jsonl"]
    assert plan.families == list(families.TURN_FAMILIES)
    assert plan.judges == list(run.PAPER_PANEL) and plan.turn_judge == "tj"
    assert (plan.max_turn_items, plan.max_tokens) == (5, 100)
    # without a turn judge of its own, the first judge of the overriding panel takes the steps
    assert judge_plan(study=study, judges=["x", "y"]).turn_judge == "j2"
    assert judge_plan(corpus=corpus, judges=["x", "y"]).turn_judge == "x"


def test_baseline_runs_alone_selects_from_a_folder_but_not_from_a_file(corpus):
    plan = judge_plan(corpus=corpus, baseline_runs=2)
    assert [p.name for p in plan.run_files] == [
        "baseline-a-0.jsonl", "baseline-a-1.jsonl", "baseline-b-0.jsonl", "baseline-b-1.jsonl",
        "llm-1.jsonl", "llm-2.jsonl"]
    one = corpus / "llm-1.jsonl"
    plan = judge_plan(corpus=one, baseline_runs=2)
    assert plan.run_files == [one] and plan.out_dir == config.JUDGMENTS / "llm-1"


def test_relative_paths_are_taken_from_the_project_root(corpus, study, monkeypatch):
    monkeypatch.setattr(config, "ROOT", corpus.parent)
    monkeypatch.chdir("/")
    assert judge_plan(corpus="mycorpus").corpus == corpus
    assert judge_plan(study="mystudy.yaml").corpus == corpus
    with pytest.raises(FileNotFoundError, match="no study file"):
        judge_plan(study="nostudy.yaml")


def test_describe_and_run(study, monkeypatch):
    plan = judge_plan(study=study, judges=["j1", "j1", "j1"])
    text = plan.describe()
    assert "judging 4 runs" in text and "families: task_relevance" in text
    assert "panel (conclusion level): j1, j1, j1; turn-level judge: j2" in text
    assert "note: " in text  # a repeated panel model is pointed out
    assert "steps per run and turn family: 2; reply limit 256 tokens" in text
    assert text.endswith(f"verdicts go to {plan.out_dir}")
    seen = {}

    def fake(files, **kwargs):
        seen.update(kwargs, files=files)
        return "report"

    monkeypatch.setattr(run, "run_judgments", fake)
    assert plan.run(cache_mode="replay", progress=False) == "report"
    assert seen == {"files": plan.run_files, "families": ("task_relevance",),
                    "judges": ["j1", "j1", "j1"], "turn_judge": "j2", "max_turn_items": 2,
                    "cache_mode": "replay", "out_dir": plan.out_dir, "max_tokens": 256,
                    "progress": False}
    assert isinstance(plan, JudgePlan)


def test_judge_block_can_name_the_models_judged(tmp_path):
    """`models:` in a judge block keeps only those models' runs (baselines still by count),
    and an unfinished run is never judged."""
    from adakit.study.pipeline import judge_selection
    from adakit.synthetic import synthetic_run, write_run

    tools = ["PKR", {"tool": "CON", "finalize": True}]
    for rid, model in [("a", "m1"), ("b", "m2"), ("c", "m1")]:
        rf = synthetic_run(rid, model=model, tools=tools, finished=rid != "c")
        rf.header = rf.header.model_copy(  # synthetic runs say "baseline"; these stand for LLMs
            update={"model": rf.header.model.model_copy(update={"kind": "local"})})
        write_run(rf, tmp_path / f"{rid}.jsonl")
    picked = judge_selection(tmp_path, {"models": ["m1"]})
    assert [p.stem for p in picked] == ["a"]
    assert [p.stem for p in judge_selection(tmp_path, {})] == ["a", "b"]


def test_of_several_folders_the_one_that_is_not_a_shipped_dataset_is_judged(tmp_path, study,
                                                                             corpus, capsys):
    """The quick profile hands every notebook its runs beside the reference corpus's: notebook
    03 judges the study's runs and leaves the dataset (verdicts of its own) alone."""
    shipped = tmp_path / "ds"
    _write(shipped / "runs", "ref-1", "m-llm", "local")
    (shipped / "manifest.json").write_text("{}")
    plan = judge_plan(study=study, corpus=[corpus, shipped / "runs"])
    assert plan.corpus == corpus and plan.out_dir == store.judgments_dir(corpus)
    assert all(shipped not in f.parents for f in plan.run_files)
    assert "is a shipped dataset" in capsys.readouterr().out
    assert judge_plan(corpus=[shipped, corpus]).corpus == corpus  # the folder itself counts too
    with pytest.raises(ValueError, match="every corpus folder given is a shipped dataset"):
        judge_plan(corpus=[shipped / "runs"])
    other = tmp_path / "other"
    _write(other, "o-1", "m-llm", "llm")
    with pytest.raises(ValueError, match="judge one corpus folder at a time, not 2"):
        judge_plan(corpus=[corpus, other])
