"""Lenses 0, 1, 2 and 4, the explorer and the lens-3 judges on imported runs, alone and mixed
with runs adakit launched (baselines on flask). Expected values are worked out by hand from
the SWE-agent fixture pallets__flask-5001 (15 steps; see tests/test_importers.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from adakit import config
from adakit.importers.batch import import_paths
from adakit.judging import context, run, store
from adakit.lenses import footprint as fp
from adakit.lenses import journey, policy, surface
from adakit.record import load_corpus, read_run
from adakit.study.launch import launch
from adakit.study.spec import load_study, restrict
from adakit.synthetic import synthetic_tables
from adakit.workbench import explorer

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "trajectories"
SWE_CMD = FIXTURES / "swe_agent" / "pallets__flask-5001.traj"
NOTEBOOK = ROOT / "notebooks" / "40_imported_agents.ipynb"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, flask_world):
    """Imported fixtures (with the flask world) and two launched baseline runs, one folder."""
    root = tmp_path_factory.mktemp("mixed")
    import_paths("auto", [FIXTURES], root / "imported", world="flask", progress=False,
                 model="gpt-4o")
    study = load_study(ROOT / "studies" / "ci.yaml",  # no hint model: no local model server
                       overrides={"output": str(root / "ada"), "hint_model": None})
    launch(restrict(study, models=["baseline-tracer", "baseline-close_reader"],
                    tasks=["feature_tracing"], conditions=["natural"], repeats=[0]),
           progress=False)
    return root


@pytest.fixture(scope="module")
def corpus(mixed):
    return load_corpus(mixed, cache=False)


def swe_id(corpus) -> str:
    runs = corpus.runs
    return runs.loc[runs["run_id"].str.contains("pallets__flask-5001"), "run_id"].iloc[0]


def test_mixed_corpus_tables(corpus):
    runs = corpus.runs
    assert len(runs) == 9
    assert runs["agent"].value_counts().to_dict() == {
        "swe-agent": 2, "mini-swe-agent": 2, "openhands": 2, "ada": 2, "my-agent": 1}
    assert set(runs["world"]) == {"flask"} and runs["world_source"].str.startswith("pypi").all()
    assert set(runs.loc[runs["agent"] == "ada", "reason"]) == {"finalize"}


def test_lens0_surface_on_a_mixed_corpus(corpus):
    surf = surface.run_surface(corpus).set_index("run_id")
    row = surf.loc[swe_id(corpus)]
    assert (row["turns"], row["PKR"], row["EXP"], row["EDT"], row["EXE"], row["SUB"]) == (
        15, 5, 3, 4, 2, 1)
    # helpers.py 145-244 (100) + app.py 1-100, 1010-1207 (union of three windows) = 398
    assert (row["loc_viewed"], row["lines_shown"]) == (398, 500)
    assert row["files_visited"] == 3  # helpers.py, app.py, reproduce.py
    ada = surf[surf["model"].str.startswith("baseline")]
    assert (ada[["EDT", "EXE", "SUB"]] == 0).all().all()
    agg = surface.aggregate(surf.reset_index().merge(corpus.runs[["run_id", "agent"]]), by="agent")
    assert list(agg["n_runs"]) and "EDT" in agg.columns
    fig = surface.plot_task_composition(surface.task_composition(surf.reset_index(), by="model"))
    plt.close(fig)


def test_lens1_arcs_mark_edit_execute_submit(corpus):
    ev = journey.arc_events(corpus)
    one = ev[ev["run_id"] == swe_id(corpus)].sort_values("turn")
    assert list(one["kind"]) == [
        "EXP:references", "PKR:>50", "EXP:references", "EXP:definition", "PKR:>50", "PKR:>50",
        "PKR:>50", "EDT", "EDT", "EXE", "PKR:>50", "EDT", "EXE", "EDT", "SUB"]
    # no timing in the source: turns are one second apart, so time and turn order agree
    assert list(one["t_rel"].round(3)) == [round(k / 15, 3) for k in range(15)]
    fig = journey.plot_journey_arcs(ev, corpus.runs, facet=["model"])
    labels = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"EDT Edit", "EXE Execute", "SUB Submit"} <= labels
    plt.close(fig)


def test_lens2_tags_on_an_imported_run(corpus):
    tags = policy.tag_transitions(corpus.turns)
    one = tags[tags["run_id"] == swe_id(corpus)]
    assert list(one["tag"]) == [
        "traverse", "trace", "trace", "skim", "traverse", "close read", "edit", "edit", "verify",
        "skim", "edit", "verify", "edit", "submit"]
    reading = policy.reading_transitions(one)
    assert list(reading["tag"]) == ["traverse", "trace", "trace", "skim", "traverse", "close read",
                                    "skim"]
    shares = policy.tag_shares(policy.reading_transitions(tags), corpus.runs, by="agent")
    assert set(shares["tag"]) <= set(policy.TAGS)
    sums = shares.groupby("agent")["share"].sum().round(6)
    assert (sums == 100.0).all()
    plt.close(policy.plot_tag_shares(shares))


def test_extended_rules_change_nothing_on_ada_runs():
    ada = synthetic_tables(200, seed=5).turns
    table5 = policy.tag_transitions(ada, rules=policy.RULE_TABLE)
    extended = policy.tag_transitions(ada)
    assert len(table5) > 1000
    assert list(table5["tag"].astype(str)) == list(extended["tag"].astype(str))


def test_added_rules_one_by_one():
    def tag(frm: str, to: str) -> str:
        turns = pd.DataFrame({"run_id": ["r", "r"], "turn": [1, 2], "tool": [frm, to]})
        return str(policy.tag_transitions(turns)["tag"].iloc[0])

    assert tag("PKR", "EDT") == "edit" and tag("EXE", "EDT") == "edit"
    assert tag("EDT", "EXE") == "verify"
    assert tag("PKR", "EXE") == "run" and tag("EXE", "EXE") == "run"
    assert tag("EDT", "SUB") == "submit" and tag("OVW", "SUB") == "submit"
    # into Ada's tools, Table 5 decides whatever the step came from
    assert tag("EDT", "PKR") == "traverse" and tag("EXE", "OVW") == "zoom out"
    assert tag("EXE", "MEM") == "dump"
    with pytest.raises(ValueError, match="ACT"):
        policy.make_rules([("x", "FOO", "PKR", None)])


def test_lens4_with_the_world_maps_real_files(corpus):
    files, note = fp.map_files("flask", corpus.reads,
                               source=fp.world_source(corpus.runs, "flask"))
    assert "src/flask/app.py" in set(files["file"]) and "from_reads" not in files.attrs
    dens = fp.trace_density(corpus.reads, corpus.runs, by="agent").set_index(["agent", "file"])
    # the two SWE-agent runs: 5001 showed 400 lines of app.py, 5002 showed 57 + 45
    assert dens.loc[("swe-agent", "src/flask/app.py"), "lines_shown"] == 400 + 57 + 45
    fig = fp.plot_repo_map(files, dens.reset_index().query("agent == 'swe-agent'"))
    assert fp.FROM_READS_NOTE not in {t.get_text() for t in fig.axes[0].texts}
    plt.close(fig)
    fig = fp.plot_repo_map(files, dens.reset_index().query("agent == 'swe-agent'"), vmax=50.0)
    assert fig.axes[1].get_ylim() == (0.0, 50.0)  # a fixed scale, shared by several panels
    plt.close(fig)


def test_lens4_without_a_world_says_so_on_the_figure(tmp_path):
    import_paths("swe-agent", [SWE_CMD], tmp_path, progress=False)
    c = load_corpus(tmp_path, cache=False)
    src = fp.world_source(c.runs, "flask")
    assert src == "trajectory"
    files, note = fp.map_files("flask", c.reads, source=src)
    assert dict(zip(files["file"], files["loc"], strict=True)) == {
        "src/flask/app.py": 1207, "src/flask/helpers.py": 244}  # the highest line read
    assert "imported without a world" in note and files.attrs["from_reads"]
    fig = fp.plot_repo_map(files, fp.trace_density(c.reads))
    assert fp.FROM_READS_NOTE in {t.get_text() for t in fig.axes[0].texts}
    plt.close(fig)
    route = fp.run_route(c.turns, c.runs["run_id"].iloc[0])
    assert list(route["file"]) == ["src/flask/helpers.py", "src/flask/app.py", "reproduce.py",
                                   "src/flask/app.py", "reproduce.py"]


def test_lens4_on_a_local_checkout(tmp_path):
    repo = tmp_path / "checkout"
    (repo / "src" / "flask").mkdir(parents=True)
    (repo / "src" / "flask" / "app.py").write_text("x\n" * 1536)
    (repo / "src" / "flask" / "helpers.py").write_text("x\n" * 641)
    (repo / "src" / "flask" / "unread.py").write_text("x\n" * 10)
    import_paths("swe-agent", [SWE_CMD], tmp_path / "out", world=str(repo), progress=False)
    c = load_corpus(tmp_path / "out", cache=False)
    files, note = fp.map_files("checkout", c.reads, source=fp.world_source(c.runs, "checkout"))
    assert dict(zip(files["file"], files["loc"], strict=True)) == {
        "src/flask/app.py": 1536, "src/flask/helpers.py": 641, "src/flask/unread.py": 10}
    assert "local checkout" in note


def test_explorer_steps_through_an_imported_run(corpus):
    view = explorer.RunView(corpus, swe_id(corpus))
    text = view.text(2)
    assert "mapped by tool:open src/flask/helpers.py L145-244" in text
    assert "helpers.py defines the module-level url_for" in text
    targets = view.jumps
    assert targets["tool:EDT"] == [8, 9, 12, 14] and targets["tool:SUB"] == [15]
    assert explorer.matching_turns(view.rf, "EXE") == [10, 13]
    plt.close(view.map_figure(7))
    plt.close(view.arc_figure(7))
    static = explorer.render_static(corpus, swe_id(corpus), turn=2)
    assert static is not None


def test_judges_read_imported_runs_anonymised(tmp_path):
    data = json.loads(SWE_CMD.read_text())
    data["trajectory"][0]["thought"] = ("As SWE-agent on claude-3-7-sonnet I first look for "
                                        "helpers.py; mini-swe-agent would grep.")
    data["replay_config"] = json.dumps({"agent": {"model": {"name": "claude-3-7-sonnet"}}})
    src = tmp_path / "pallets__flask-9999.traj"
    src.write_text(json.dumps(data))
    rep = import_paths("swe-agent", [src], tmp_path / "out", progress=False)
    rf = read_run(rep.imported[0].written)
    items = context.build_items(rf, max_turn_items=3)
    families = {i.family for i in items}
    assert {"task_relevance", "trace_grounding", "termination_calibration",
            "navigation_prior"} <= families
    for item in items:
        text = item.prompt_text.lower()
        for leak in ("swe-agent", "swe agent", "claude-3-7-sonnet", "mini-swe-agent",
                     "pallets__flask-9999.traj", rf.header.run_id.lower()):
            assert leak not in text, (item.family, leak)
    term = next(i for i in items if i.family == "termination_calibration").prompt_text
    assert "the agent submitted its result and ended the run" in term
    assert "EDT 4" in term and "SUB 1" in term
    grounding = next(i for i in items if i.family == "trace_grounding").prompt_text
    assert "Submitted changes:" in grounding and "src/flask/app.py" in grounding


def _outputs(path: Path) -> str:
    nb = json.loads(path.read_text())
    return "\n".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
                     for c in nb["cells"] for o in c.get("outputs", []))


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_notebook_40_under_papermill_and_nbval(mixed, tmp_path, monkeypatch):
    """Notebook 40 on the bundled examples of every format, one source of one's own and two
    launched baseline runs: executed with papermill (its outputs in the folder ``nbtest``), run
    twice (the second import finds everything already there)."""
    pm = pytest.importorskip("papermill")
    home = tmp_path / "home"
    monkeypatch.setenv("ADAKIT_HOME", str(home))
    monkeypatch.setenv("ADAKIT_WORLDS", str(config.worlds_dir()))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    params = {"corpus": str(mixed / "ada"), "imported": str(tmp_path / "imported"),
              "sources": {"swe-agent": [str(SWE_CMD)]}, "figure_prefix": "nbtest"}
    out = tmp_path / "40.ipynb"
    for _ in range(2):
        pm.execute_notebook(str(NOTEBOOK), str(out), parameters=params, cwd=str(tmp_path),
                            progress_bar=False, kernel_name="python3")
    text = _outputs(out)
    # the bundled examples of every format, then a source of one's own (already there too)
    assert "swe-agent examples: imported 0 runs" in text and "2 already imported" in text
    assert "swe-agent: imported 0 runs" in text and "1 already imported" in text
    assert "claude-code examples: " in text and "aider examples: " in text
    assert "runs by agent: " in text and "my-agent 1" in text and "claude-code 4" in text
    # the explorer shows the run with subagents: where a turn stands among the spans
    assert "on the main line (2 subagent spans in this run)" in text
    assert "started subagent span ab12cd34 (Explore): turns 4, 6, 8" in text
    runs = load_corpus(tmp_path / "imported", cache=False).runs
    assert set(runs["study"]) == {"imported"} and "smollm2-135m" not in set(runs["model"])
    assert {"claude-code", "codex", "inspect_ai", "terminus-2", "aider"} <= set(runs["agent"])
    tables = home / "data" / "processed" / "nbtest"
    shares = pd.read_csv(tables / "tag_shares_by_agent.csv")
    assert {"share_lo", "share_hi", "note"} <= set(shares.columns)
    # two runs per source agent: intervals; the generic file holds one run: "too few runs"
    by_agent = shares.groupby("agent")["share_lo"].apply(lambda s: s.notna().any())
    assert by_agent["swe-agent"] and by_agent["ada"] and not by_agent["my-agent"]
    assert set(shares.loc[shares["agent"] == "my-agent", "note"]) == {"too few runs"}
    surf = pd.read_csv(tables / "surface_intervals_by_agent.csv").set_index("agent")
    # two runs or more: ada, aider, claude-code, codex, mini-swe-agent, openhands, swe-agent
    assert surf.loc["my-agent", "note"] == "too few runs" and surf["turns_lo"].notna().sum() == 7
    density = pd.read_csv(tables / "density_by_agent_flask.csv")
    assert {"density_lo", "density_hi"} <= set(density.columns)
    saved = {p.name for p in (home / "figures" / "nbtest").glob("*.png")}
    assert saved == {"tool_composition_by_agent.png", "tag_shares_by_agent.png",
                     "all_tags_by_agent.png", "journey_arcs_by_agent.png",
                     "footprint_by_agent_flask.png", "explorer_arc.png"}
    # the replay under nbval: the next test (examples alone) and make test's last step (the CI
    # profile's notebook 40, with its Ada corpus)


@pytest.mark.timeout(300)
def test_notebook_40_on_imported_runs_alone_draws_intervals(tmp_path, monkeypatch):
    """Notebook 40 on the bundled examples only (no Ada corpus, no world on disk: the map
    comes from the trajectories): the per-agent comparisons carry bootstrap intervals, an
    agent with one example run says "too few runs", and the notebook replays under nbval."""
    pm = pytest.importorskip("papermill")
    home = tmp_path / "home"
    monkeypatch.setenv("ADAKIT_HOME", str(home))
    monkeypatch.setenv("ADAKIT_WORLDS", str(tmp_path / "no-worlds"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    params = {"corpus": "", "world": "", "imported": str(tmp_path / "imported"),
              "n_resamples": 300, "seed": 3, "figure_prefix": "nbtest"}
    out = tmp_path / "40.ipynb"
    pm.execute_notebook(str(NOTEBOOK), str(out), parameters=params, cwd=str(tmp_path),
                        progress_bar=False, kernel_name="python3")
    tables = home / "data" / "processed" / "nbtest"
    shares = pd.read_csv(tables / "tag_shares_by_agent.csv")
    single = {"my-agent", "inspect_ai", "terminus-2"}  # agents with one example run
    assert set(shares["agent"]) == {"swe-agent", "mini-swe-agent", "openhands", "claude-code",
                                    "codex", "aider", *single}
    one = shares[shares["agent"].isin(single)]
    assert one["share_lo"].isna().all() and set(one["note"]) == {"too few runs"}
    two = shares[~shares["agent"].isin(single) & (shares["count"] > 0)]
    assert two["share_lo"].notna().all()
    assert ((two["share_lo"] <= two["share"] + 1e-9) & (two["share"] <= two["share_hi"] + 1e-9)).all()
    surf = pd.read_csv(tables / "surface_intervals_by_agent.csv").set_index("agent")
    # two runs: the resampled mean of turns runs from the shorter run to the longer one
    assert surf.loc["my-agent", "note"] == "too few runs" and surf["turns_lo"].notna().sum() == 6
    lengths = load_corpus(tmp_path / "imported", cache=False).runs.groupby("agent")["n_turns"]
    assert surf.loc["swe-agent", ["turns_lo", "turns_hi"]].tolist() == [
        lengths.min()["swe-agent"], lengths.max()["swe-agent"]]
    density = pd.read_csv(next(tables.glob("density_by_agent_*.csv")))
    assert {"density_lo", "density_hi", "note"} <= set(density.columns)
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "--nbval-lax", str(out)], cwd=tmp_path, capture_output=True, text=True,
                         env=os.environ.copy())
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]


def test_adakit_judge_adjudicates_an_imported_folder(tmp_path, monkeypatch):
    """The lens-3 pipeline end to end on imported runs, with a scripted judge at a fake
    OpenAI server: every request is anonymous, every verdict valid."""
    from fake_openai import FakeOpenAI
    from test_judges import KEY_ENV, backends_for, first_label

    monkeypatch.setenv(KEY_ENV, "sk-test-judges")
    import_paths("auto", [FIXTURES / "swe_agent", FIXTURES / "openhands"], tmp_path / "runs",
                 progress=False)
    with FakeOpenAI(first_label) as fake:
        report = run.run_judgments(tmp_path / "runs", judges=["judge-a"], max_turn_items=2,
                                 out_dir=tmp_path / "verdicts",
                                 backends=backends_for(fake, tmp_path), progress=False)
        sent = json.dumps(fake.requests).lower()
    # 4 runs with conclusions: 3 conclusion families each, plus up to 2 navigation steps
    assert report.n_invalid == 0 and not report.errors and report.n_items >= 4 * 3
    for leak in ("swe-agent", "openhands", "claude-3-7-sonnet", "gpt-4o-2024-11-20",
                 "pallets__flask-5001.traj", "codeactagent"):
        assert leak not in sent, leak
    table = store.read_judgments(tmp_path / "verdicts")
    assert table["run_id"].nunique() == 4 and table["valid"].all()
