"""Shipped datasets: built from a launched study, checked against the manifest, replayed from
the recorded replies alone; and the shipped reference corpus itself."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from fake_openai import FakeOpenAI, reply

from adakit import config
from adakit.apparatus.tasks import task_families
from adakit.llm.models import DEFAULT_LOCAL_MODEL
from adakit.record import load_corpus, read_run
from adakit.study import dataset
from adakit.study.launch import launch
from adakit.study.spec import load_study

REFERENCE = config.REFERENCE_RUNS.parent


def _agent(request: dict) -> object:
    k = sum(1 for m in request["messages"] if m["role"] == "assistant") + 1
    if k >= 3:
        return reply("<thinking>The two reads show the app object.</thinking><stash_conclusion>"
                     "<content>app.py defines Flask</content><proceed_to_finalize>true"
                     "</proceed_to_finalize></stash_conclusion>")
    return reply(f"<thinking>Reading the next part of app.py now.</thinking><peek_code_region>"
                 f"<file_path>src/flask/app.py</file_path><start_line>{20 * k}</start_line>"
                 f"</peek_code_region>")


@pytest.fixture
def launched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flask_world) -> Path:
    with FakeOpenAI(_agent) as fake:
        models = tmp_path / "models.yaml"
        models.write_text(yaml.safe_dump({"models": {"fake-llm": {
            "kind": "llm", "base_url": fake.url, "model_id": "fake", "api_key_env": "FAKE_KEY",
            "temperature": 0.2, "max_tokens": 200, "context_window": 64000}}}))
        monkeypatch.setenv("ADAKIT_MODELS", str(models))
        monkeypatch.setenv("ADAKIT_CACHE", str(tmp_path / "cache"))
        monkeypatch.setenv("FAKE_KEY", "k")
        study = tmp_path / "study.yaml"
        study.write_text(yaml.safe_dump({
            "name": "tiny", "output": str(tmp_path / "runs"),
            "matrix": [{"models": ["fake-llm"], "worlds": ["flask"],
                        "tasks": ["architecture_analysis", "risk_review"],
                        "conditions": ["natural"]}]}))
        launch(load_study(study), progress=False)
        assert len(fake.requests) == 6
    monkeypatch.delenv("FAKE_KEY")  # from here on no endpoint and no key: replay only
    return tmp_path


def test_build_check_and_replay(launched: Path) -> None:
    out = launched / "ds"
    manifest = dataset.build(launched / "runs", out, cache=launched / "cache", name="tiny-v1")
    assert manifest["counts"] == {"runs": 2, "verdicts": 0, "responses": 6, "declared": 2,
                                  "verdicts_left_out": 0}
    assert manifest["remaining"] == [] and manifest["unfinished"] == []
    assert {r["reason"] for r in manifest["runs"]} == {"finalize"}
    assert manifest["scaffold"]["prompts_sha256"] and manifest["adakit_version"]
    assert "fake-llm" in manifest["models"] and "flask" in manifest["worlds"]
    assert dataset.check(out) == []
    assert len(load_corpus(out / "runs", cache=False).runs) == 2
    results = dataset.replay(out)
    assert results == {r["run_id"]: "same" for r in manifest["runs"]}


def test_a_dataset_rebuilt_from_restored_replies_keeps_every_reply(launched: Path, tmp_path,
                                                                    monkeypatch) -> None:
    """On a fresh machine a recording resumes from the pack's restored replies: its finished
    runs are not launched again, yet the next build packs their replies, each with its run.
    A pack made before packs kept the run (no ``scope``) is kept whole by a build of the same
    name; another dataset's runs replayed from such replies get their run on the first use."""
    out = launched / "ds"
    dataset.build(launched / "runs", out, cache=launched / "cache", name="tiny-v1")
    lines = [json.loads(x) for x in (out / "responses.jsonl").read_text().splitlines()]
    assert len(lines) == 6 and all(x["scope"].startswith("fake-llm__flask__") for x in lines)
    fresh = tmp_path / "fresh-cache"
    assert dataset.restore_cache(out, fresh) == 6
    again = dataset.build(launched / "runs", tmp_path / "again", cache=fresh, name="tiny-v2")
    assert again["counts"]["responses"] == 6
    # a pack without scopes (as packed before): kept by a build of its own name only
    old = tmp_path / "old"
    shutil.copytree(out, old)
    (old / "responses.jsonl").write_text("".join(
        json.dumps({k: v for k, v in x.items() if k != "scope"}) + "\n" for x in lines))
    legacy = tmp_path / "legacy-cache"
    from adakit.study.replies import restore_replies

    assert restore_replies(old / "responses.jsonl", legacy, "tiny-v1") == 6
    assert dataset.build(launched / "runs", tmp_path / "other", cache=legacy,
                         name="other")["counts"]["responses"] == 0
    assert dataset.build(launched / "runs", tmp_path / "same", cache=legacy,
                         name="tiny-v1")["counts"]["responses"] == 6
    # a replay from the scope-less replies gives each the run that used it
    monkeypatch.setenv("ADAKIT_CACHE", str(legacy))
    replayed = tmp_path / "replayed"
    study = yaml.safe_load((launched / "runs" / "study.yaml").read_text())
    study.update(output=str(replayed), cache_mode="replay")
    (tmp_path / "replay.yaml").write_text(yaml.safe_dump(study))
    launch(load_study(tmp_path / "replay.yaml"), progress=False)
    rebuilt = dataset.build(replayed, tmp_path / "subset", cache=legacy, name="subset")
    assert rebuilt["counts"]["responses"] == 6 and dataset.check(tmp_path / "subset") == []


def test_a_rebuilt_dataset_keeps_the_forks_made_from_it(launched: Path) -> None:
    """``runs.forks`` beside a dataset's runs is not packed by it, but a new build in its
    place carries it over instead of deleting it."""
    out = launched / "ds"
    dataset.build(launched / "runs", out, cache=launched / "cache", name="tiny-v1")
    fork = out / "runs.forks" / "p__at2" / "f.jsonl"
    fork.parent.mkdir(parents=True)
    fork.write_text("kept\n")
    from adakit.judging.store import judgments_dir

    verdicts = judgments_dir(out / "runs.forks") / "judgments.jsonl"
    assert verdicts.parent == out / "judgments.forks"  # the forks' verdicts, beside them
    verdicts.parent.mkdir()
    verdicts.write_text("{}\n")
    dataset.build(launched / "runs", out, cache=launched / "cache", name="tiny-v2")
    assert fork.read_text() == "kept\n" and dataset.check(out) == []
    assert verdicts.read_text() == "{}\n"
    assert dataset.open_dataset(out).manifest["name"] == "tiny-v2"


def test_only_current_verdicts_on_packed_runs_are_shipped(launched: Path) -> None:
    """Verdicts on a run the dataset does not hold, and verdicts given before their run was
    recorded again, stay out of the dataset (the manifest counts them)."""
    runs = {read_run(p).header.run_id: read_run(p) for p in (launched / "runs").glob("*.jsonl")}
    (a, ra), (b, rb) = sorted(runs.items())
    rows = [
        {"item_id": "i1", "run_id": a, "family": "task_relevance", "judge": "fake-llm", "label": "x",
         "score": 3.0, "valid": True, "judged_at": ra.end.ended_at + 5},
        {"item_id": "i2", "run_id": b, "family": "task_relevance", "judge": "fake-llm", "label": "x",
         "score": 3.0, "valid": True, "judged_at": rb.end.ended_at - 5},  # before a re-recording
        {"item_id": "i3", "run_id": "not-packed", "family": "task_relevance", "judge": "fake-llm",
         "label": "x", "score": 3.0, "valid": True, "judged_at": ra.end.ended_at + 5},
    ]
    verdicts = launched / "verdicts.jsonl"
    verdicts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = dataset.build(launched / "runs", launched / "ds", cache=launched / "cache",
                             judgments=verdicts)
    assert manifest["counts"]["verdicts"] == 1 and manifest["counts"]["verdicts_left_out"] == 2
    shipped = (launched / "ds" / "judgments" / "judgments.jsonl").read_text().splitlines()
    assert [json.loads(x)["item_id"] for x in shipped] == ["i1"]
    assert dataset.check(launched / "ds") == []


def test_check_reports_an_edited_run_and_a_missing_file(launched: Path) -> None:
    out = launched / "ds"
    dataset.build(launched / "runs", out, cache=launched / "cache")
    run = next((out / "runs").glob("*risk_review*.jsonl"))
    lines = run.read_text().splitlines()
    end = json.loads(lines[-1])
    end["conclusion"] = "edited by hand"
    run.write_text("\n".join([*lines[:-1], json.dumps(end)]) + "\n")
    (out / "responses.jsonl").unlink()
    problems = dataset.check(out)
    assert any(run.name in p and "sha256 differs" in p for p in problems)
    assert any("responses.jsonl: absent" in p for p in problems)
    run.write_text("not a run file\n")  # edited past reading: said, not raised
    assert any(run.name in p and "not readable as a run file" in p for p in dataset.check(out))


def test_replay_without_a_recorded_reply_says_so(launched: Path) -> None:
    out = launched / "ds"
    dataset.build(launched / "runs", out, cache=launched / "cache")
    lines = (out / "responses.jsonl").read_text().splitlines()
    (out / "responses.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    results = dataset.replay(out)
    outcomes = sorted(results.values())
    assert outcomes[1] == "same" and outcomes[0].startswith("CacheMiss")


def test_check_and_replay_name_a_damaged_recorded_reply(
        launched: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A recorded reply that no longer parses is reported by `dataset check --replay` as a
    damaged cache entry (with its line and key), and a replay names it rather than saying the
    run asked for something the recording never asked."""
    from adakit.cli import main

    out = launched / "ds"
    dataset.build(launched / "runs", out, cache=launched / "cache")
    lines = (out / "responses.jsonl").read_text().splitlines()
    key = json.loads(lines[0])["key"]
    lines[0] = lines[0].replace('"completion": {', '"completion": {,', 1)
    (out / "responses.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["dataset", "check", str(out), "--replay"]) == 1
    printed = capsys.readouterr().out
    assert f"responses.jsonl:1: damaged cache entry {key} (not JSON" in printed
    outcomes = sorted(dataset.replay(out).values())
    assert outcomes[1] == "same"
    assert outcomes[0].startswith(f"CacheDamaged: replay mode: damaged cache entry {key} in ")
    assert "never asked" not in outcomes[0]


def test_unfinished_corpus_is_refused(launched: Path) -> None:
    run = next((launched / "runs").glob("*.jsonl"))
    lines = run.read_text().splitlines()
    run.write_text("\n".join(lines[:-1]) + "\n")  # drop the end record
    with pytest.raises(dataset.DatasetError, match="unfinished"):
        dataset.build(launched / "runs", launched / "ds", cache=launched / "cache")
    assert not (launched / "ds").exists()
    manifest = dataset.build(launched / "runs", launched / "ds", cache=launched / "cache",
                             leave_unfinished=True)
    assert manifest["counts"]["runs"] == 1 and manifest["unfinished"] == [run.stem]
    assert [p.stem for p in (launched / "ds" / "runs").glob("*.jsonl")] != [run.stem]
    assert dataset.check(launched / "ds") == []


def _refused_then_packed(launched: Path, refusal: str) -> dict:
    """Build refuses the corpus (and writes nothing), then packs it with leave_unfinished."""
    with pytest.raises(dataset.DatasetError, match=refusal):
        dataset.build(launched / "runs", launched / "ds", cache=launched / "cache")
    assert not (launched / "ds").exists()
    return dataset.build(launched / "runs", launched / "ds", cache=launched / "cache",
                         leave_unfinished=True)


def test_runs_the_study_declares_but_never_started_are_listed(launched: Path) -> None:
    """A launch stopped between runs leaves no unfinished file: the study file still says
    what is missing."""
    study = yaml.safe_load((launched / "runs" / "study.yaml").read_text())
    study["matrix"][0]["tasks"].append("feature_tracing")
    (launched / "runs" / "study.yaml").write_text(yaml.safe_dump(study))
    manifest = _refused_then_packed(launched, "2 of the study's 3 runs|1 of the study's 3 runs")
    assert manifest["counts"]["runs"] == 2 and manifest["counts"]["declared"] == 3
    assert manifest["unfinished"] == []
    assert manifest["remaining"] == ["fake-llm__flask__feature_tracing__natural__r0"]
    assert dataset.check(launched / "ds") == []


def test_runs_recorded_under_other_settings_are_never_packed(launched: Path) -> None:
    """A run whose header no longer matches the study (here: a changed turn bound for one
    task) is not the study's run: refused, or left out and listed as outdated."""
    study = yaml.safe_load((launched / "runs" / "study.yaml").read_text())
    study["matrix"] = [{**study["matrix"][0], "tasks": ["architecture_analysis"]},
                       {**study["matrix"][0], "tasks": ["risk_review"], "turn_bound": 7}]
    (launched / "runs" / "study.yaml").write_text(yaml.safe_dump(study))
    manifest = _refused_then_packed(launched, "1 runs were recorded under settings")
    stale = "fake-llm__flask__risk_review__natural__r0"
    assert manifest["outdated"] == [stale] and manifest["remaining"] == [stale]
    assert [r["run_id"] for r in manifest["runs"]] == ["fake-llm__flask__architecture_analysis__natural__r0"]
    assert dataset.check(launched / "ds") == []


# ------------------------------------------------------------------ the shipped reference corpus


needs_reference = pytest.mark.skipif(
    not (REFERENCE / "manifest.json").exists(), reason="the reference corpus is not shipped here"
)


@needs_reference
def test_reference_corpus_matches_its_manifest_and_shows_real_behaviour() -> None:
    """The shipped corpus matches its manifest and says which runs of its study it still
    lacks (a version may be packed part way); the default agent's runs in it span every world
    and task family of the study, at least half of them conclude (on the closing turn when the
    model does not, since the 1.5B's 15-turn runs end at the turn bound or stuck in repeats),
    and Fig. 7 for them is not a single tag."""
    assert dataset.check(REFERENCE) == []
    ds = dataset.open_dataset(REFERENCE)
    manifest = ds.manifest
    corpus = load_corpus(ds.runs_dir, cache=False)
    assert len(corpus.runs) == manifest["counts"]["runs"]
    declared = dataset.declared_runs(REFERENCE / "study.yaml")
    assert manifest["counts"]["declared"] == len(declared)
    assert sorted({*corpus.runs["run_id"], *manifest["remaining"]}) == sorted(declared)
    assert set(corpus.runs["run_id"]).isdisjoint(manifest["remaining"])
    default = corpus.runs[corpus.runs["model"] == DEFAULT_LOCAL_MODEL]
    assert sum(r.startswith(f"{DEFAULT_LOCAL_MODEL}__") for r in declared) >= 24  # the study's plan
    assert set(default["world"]) == {"flask", "requests", "scikit-learn"}
    assert set(default["task"]) == set(task_families())
    # runs that conclude: of their own accord, or on the closing turn its study turns on
    assert (default["conclusion_chars"].fillna(0) > 0).sum() >= len(default) // 2
    from adakit.lenses.policy import tag_transitions

    tags = tag_transitions(corpus.turns[corpus.turns["run_id"].isin(default["run_id"])])
    assert tags["tag"].nunique() > 1  # Fig. 7 for it is not a single tag
    for rf in (read_run(p) for p in sorted(ds.runs_dir.glob("*.jsonl"))[:3]):
        assert rf.header.model.weights is None or len(rf.header.model.weights["sha256"]) == 64


@needs_reference
@pytest.mark.slow
def test_reference_corpus_replays_from_its_recorded_replies() -> None:
    """A sample of runs (one per model and condition) relaunched with no model at all."""
    ds = dataset.open_dataset(REFERENCE)
    sample: dict[tuple[str, str], str] = {}
    for row in ds.manifest["runs"]:
        sample.setdefault((row["model"], row["condition"]), row["run_id"])
    results = dataset.replay(REFERENCE, run_ids=list(sample.values()))
    assert results == dict.fromkeys(sample.values(), "same")


@needs_reference
def test_diagnose_reads_the_reference_corpus(tmp_path, capsys):
    """TraceProbe's diagnostics on real local-model runs (not only scripted baselines):
    every step labelled, the 1.5B's repeats caught by a detector, alignments made."""
    import pandas as pd

    from adakit.cli import main

    out = tmp_path / "diag"
    assert main(["diagnose", str(REFERENCE / "runs"), "--calibrate", "--resamples", "50",
                 "--no-symbols", "--out", str(out)]) == 0
    assert "firings per 100 steps" in capsys.readouterr().out
    steps = pd.read_parquet(out / "steps.parquet")
    firings = pd.read_parquet(out / "firings.parquet")
    runs = pd.read_parquet(out / "runs.parquet")
    assert steps["label"].notna().all() and steps["label"].nunique() > 2
    assert DEFAULT_LOCAL_MODEL in set(runs["model"]) and len(firings) > 0
    assert len(pd.read_parquet(out / "alignments.parquet")) > 0


#: local-v3's runs of the scaffold ablation's slice, packed when local-v3 was retired.
V3_SLICE = config.DATA / "reference" / "bench-scaffold" / "v3"


@pytest.mark.skipif(not (V3_SLICE / "manifest.json").exists(), reason="no v3 slice pack here")
@pytest.mark.slow
def test_a_run_that_saw_a_raw_line_hint_replays_under_its_legacy_setting() -> None:
    """local-v3's requests ASR run, recorded before ``name_hints`` existed, holds names taken
    from a raw line in its observations: replayed under ``name_hints: line`` (its study's
    setting) it is reproduced exactly, and its observations still show such a name."""
    run_id = "qwen2.5-coder-1.5b__requests__asr_inference__natural__r0"
    assert dataset.replay(V3_SLICE, run_ids=[run_id]) == {run_id: "same"}
    turns = read_run(V3_SLICE / "runs" / f"{run_id}.jsonl").turns
    assert any("Names on line" in t.observation for t in turns)


def test_a_study_restores_the_replies_it_names(launched: Path, tmp_path, monkeypatch) -> None:
    """``replies: FOLDER`` in a study file: its recorded replies go into the response cache
    (kept when already there); no key, nothing; a folder without replies, one clear error."""
    from adakit.study.replies import restore_declared

    out = tmp_path / "ds"
    dataset.build(launched, out)
    monkeypatch.setenv("ADAKIT_CACHE", str(tmp_path / "fresh-cache"))
    assert restore_declared({"name": "s"}) is None
    n = len((out / "responses.jsonl").read_text().splitlines())
    assert restore_declared({"replies": str(out)}) == (
        f"recorded replies: {n} restored from {out} into the response cache")
    assert len(list((tmp_path / "fresh-cache" / "responses").rglob("*.json"))) == n
    assert restore_declared({"replies": str(out)}).startswith("recorded replies: 0 restored")
    with pytest.raises(FileNotFoundError, match="no responses.jsonl in"):
        restore_declared({"replies": str(tmp_path / "nowhere")})


def test_the_stated_behaviour_is_what_the_loader_measures(launched: Path) -> None:
    """A manifest states each model's own-conclusion, closing, stuck and exact-repeat rates,
    computed from the records; the lenses' behaviour table, computed apart from the loaded
    corpus, gives the same figures, and a check catches a stated figure that is not true."""
    from adakit.variance.behaviour import measure

    out = launched / "ds"
    manifest = dataset.build(launched / "runs", out, cache=launched / "cache", name="tiny-v1")
    stated = manifest["behaviour"]["fake-llm"]
    assert stated["runs"] == 2 and stated["own_conclusions"] == 1.0
    row = measure([out / "runs"]).set_index("model").loc["fake-llm"]
    assert stated["own_conclusions"] == pytest.approx(row["concluded"], abs=1e-4)
    assert stated["closing_conclusions"] == pytest.approx(row["concluded_closing"], abs=1e-4)
    assert stated["repeat_rate"] == pytest.approx(row["repeat_rate"], abs=1e-4)
    path = out / dataset.MANIFEST
    doc = json.loads(path.read_text())
    doc["behaviour"]["fake-llm"]["own_conclusions"] = 0.5
    path.write_text(json.dumps(doc))
    assert dataset.check(out) == [
        "behaviour: fake-llm own_conclusions stated 0.5, the runs show 1.0"]


def test_shipped_packs_state_the_behaviour_the_loader_measures() -> None:
    """Every shipped pack whose manifest states behaviour: the loader's figures match."""
    from adakit.variance.behaviour import measure

    packs = [p.parent for p in sorted((REFERENCE.parent).rglob(dataset.MANIFEST))
             if "behaviour" in json.loads(p.read_text())]
    if not packs:
        pytest.skip("no shipped pack states its behaviour yet")
    for pack in packs:
        stated = json.loads((pack / dataset.MANIFEST).read_text())["behaviour"]
        table = measure([pack / "runs"]).set_index("model")
        for model, said in stated.items():
            row = table.loc[model]
            assert said["runs"] == row["runs"], pack
            assert said["own_conclusions"] == pytest.approx(row["concluded"], abs=1e-4), pack
            assert said["repeat_rate"] == pytest.approx(row["repeat_rate"], abs=1e-4), pack


def test_the_manifest_says_what_changed_since_the_last_version(launched: Path) -> None:
    """A study file's ``changes`` (what changed since the previous version, and why) is stated
    in the manifest; a study without it states nothing."""
    plain = dataset.build(launched / "runs", launched / "ds", cache=launched / "cache", name="tiny-v1")
    assert plain["changes"] == ""
    study = launched / "runs" / "study.yaml"
    doc = yaml.safe_load(study.read_text())
    study.write_text(yaml.safe_dump({**doc, "changes": "v2 asks for conclusions earlier."}))
    manifest = dataset.build(launched / "runs", launched / "ds2", cache=launched / "cache", name="tiny-v2")
    assert manifest["changes"] == "v2 asks for conclusions earlier."
    assert json.loads((launched / "ds2" / dataset.MANIFEST).read_text())["changes"] == manifest["changes"]
