"""Notebooks 10 (lens 0), 11 (lens 1) and 12 (lens 2) on a synthetic corpus with repeats: every group
comparison they draw carries its bootstrap intervals, and the executed notebooks replay under
nbval."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from adakit import config

NOTEBOOK = config.NOTEBOOKS / "12_lens2_action_policy.ipynb"
SURFACE_NOTEBOOK = config.NOTEBOOKS / "10_lens0_surface.ipynb"
JOURNEY_NOTEBOOK = config.NOTEBOOKS / "11_lens1_journey_arc.ipynb"


def _corpus(root):
    from adakit.synthetic import write_synthetic_corpus

    corpus = root / "runs" / "lenses"
    # 2 models x 2 conditions x 2 tasks on one world: 8 cells of 3 runs
    write_synthetic_corpus(corpus, 24, seed=7, models=("synth-A", "synth-C"), worlds=("flask",),
                           tasks=("feature_tracing", "architecture_analysis"),
                           conditions=("natural", "budget_pressure"), progress=False)
    return corpus


def _replays_under_nbval(executed, cwd) -> None:
    errors = [o for c in json.loads(executed.read_text())["cells"] for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "--nbval-lax", str(executed)], cwd=cwd, capture_output=True, text=True,
                         env=os.environ.copy())
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]


def _execute(notebook: Path, tmp_path: Path, monkeypatch, **parameters) -> tuple[Path, Path]:
    """Run a lens notebook under papermill on the synthetic corpus, with a private home and
    figure prefix ``nbtest``; returns the executed notebook and the home folder."""
    pm = pytest.importorskip("papermill")
    home = tmp_path / "home"
    monkeypatch.setenv("ADAKIT_HOME", str(home))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    out = tmp_path / f"{notebook.stem}.ipynb"
    pm.execute_notebook(str(notebook), str(out), cwd=str(tmp_path), progress_bar=False,
                        kernel_name="python3",
                        parameters={"corpus": str(_corpus(tmp_path)), "figure_prefix": "nbtest",
                                    **parameters})
    return out, home


def test_notebook_takes_the_interval_parameters():
    pm = pytest.importorskip("papermill")
    params = pm.inspect_notebook(str(NOTEBOOK))
    assert {"n_resamples", "seed", "level", "regime_at_turn"} <= set(params)
    assert params["n_resamples"]["default"] == "1000" and params["seed"]["default"] == "0"


@pytest.mark.timeout(400)
def test_notebook_draws_intervals_on_every_share_chart(tmp_path, monkeypatch):
    out, home = _execute(NOTEBOOK, tmp_path, monkeypatch, n_resamples=200, n_permutations=500,
                         regime_at_turn=6)
    written = {p.name for p in (home / "figures" / "nbtest").glob("*.png")}
    assert {"fig7_tag_shares.png", "figD6_tag_shares_by_task.png",
            "regimes_at_6.png"} <= written
    tables = home / "data" / "processed" / "nbtest"
    for name, keys in (("fig7_tag_shares.csv", ["model", "condition"]),
                       ("figD6_tag_shares_by_task.csv", ["task"]),
                       ("regimes_at_6.csv", ["regime", "model"])):
        table = pd.read_csv(tables / name)
        assert set(keys) <= set(table.columns), name
        shown = table[table["count"] > 0]
        # every group holds several runs, so every share present has an interval around it
        assert shown["share_lo"].notna().all() and shown["share_hi"].notna().all(), name
        assert (shown["share_lo"] <= shown["share"] + 1e-9).all(), name
        assert (shown["share"] <= shown["share_hi"] + 1e-9).all(), name
    regimes = pd.read_csv(tables / "regimes_at_6.csv")
    assert set(regimes["regime"]) == {"turns < 6", "turns ≥ 6"}
    _replays_under_nbval(out, tmp_path)


@pytest.mark.timeout(400)
def test_surface_notebook_draws_intervals_on_its_group_means(tmp_path, monkeypatch):
    out, home = _execute(SURFACE_NOTEBOOK, tmp_path, monkeypatch, n_resamples=200, n_permutations=300)
    written = {p.name for p in (home / "figures" / "nbtest").glob("*.png")}
    assert {"fig4_activity.png", "fig5_effort.png", "figD5b_task_composition.png"} <= written
    tables = home / "data" / "processed" / "nbtest"
    comp = pd.read_parquet(tables / "task_composition.parquet")
    comp_ci = pd.read_parquet(tables / "task_composition_intervals.parquet").set_index("task")
    assert set(comp_ci.index) == {"feature_tracing", "architecture_analysis"}
    comp_ci = comp_ci.reindex(comp.index)
    for tool in comp.columns:  # 12 runs per task: every mean sits inside its interval
        assert (comp_ci[f"{tool}_lo"] <= comp[tool] + 1e-9).all()
        assert (comp[tool] <= comp_ci[f"{tool}_hi"] + 1e-9).all()
    # the condition shifts: budget pressure vs natural within each model, every metric
    shifts = pd.read_csv(tables / "condition_shifts.csv")
    assert set(shifts["model"]) == {"synth-A", "synth-C"} and set(shifts["a"]) == {
        "budget_pressure"} and set(shifts["b"]) == {"natural"}
    assert (shifts["n_a"] == 6).all() and shifts["diff_lo"].notna().all()
    assert ((shifts["diff_lo"] <= shifts["diff"] + 1e-9)
            & (shifts["diff"] <= shifts["diff_hi"] + 1e-9)).all()
    _replays_under_nbval(out, tmp_path)


@pytest.mark.timeout(400)
def test_journey_notebook_bounds_the_pause_share(tmp_path, monkeypatch):
    out, home = _execute(JOURNEY_NOTEBOOK, tmp_path, monkeypatch, n_resamples=200)
    summary = pd.read_csv(home / "data" / "processed" / "nbtest" /
                          "long_pauses_by_condition.csv").set_index("condition")
    assert set(summary.index) == {"natural", "budget_pressure"}
    # 12 runs per condition: an interval around every share (both rounded to 0.1)
    assert summary["pause_share_lo"].notna().all()
    assert (summary["pause_share_lo"] <= summary["pause_share_%"] + 0.1).all()
    assert (summary["pause_share_%"] <= summary["pause_share_hi"] + 0.1).all()
    _replays_under_nbval(out, tmp_path)
