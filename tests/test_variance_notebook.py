"""Notebook 15 (the noise floor): its parameters, a run on a synthetic corpus with repeats, and
the executed CI-profile notebook under nbval."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from adakit import config

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "15_variance.ipynb"
PARAMETERS = {
    "corpus", "judgments", "cell", "factors", "metrics", "group_by", "n_resamples",
    "n_permutations", "seed", "level", "min_runs", "snr_threshold", "alpha", "match", "mismatch",
    "gap", "norm", "across", "max_pairs_per_cell", "top_files", "figure_prefix",
}


def _outputs(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return json.dumps([c.get("outputs", []) for c in cells])


def test_notebook_documents_its_parameters():
    pm = pytest.importorskip("papermill")
    params = pm.inspect_notebook(str(NOTEBOOK))
    assert set(params) == PARAMETERS
    assert all(p["help"] for p in params.values())
    assert params["corpus"]["default"] == '"data/runs/quick"'
    assert (params["match"]["default"], params["mismatch"]["default"], params["gap"]["default"]) \
        == ("1.0", "0.0", "0.0")


@pytest.mark.timeout(300)
def test_notebook_runs_on_a_synthetic_corpus_with_repeats(tmp_path, monkeypatch):
    pm = pytest.importorskip("papermill")
    from adakit.judging import agreement as ag
    from adakit.record import load_corpus
    from adakit.synthetic import write_synthetic_corpus

    corpus = tmp_path / "runs" / "rep"
    # 2 models x 2 conditions on one world and task: 4 cells, 5 runs each
    write_synthetic_corpus(corpus, 20, seed=4, models=("synth-A", "synth-C"), worlds=("flask",),
                           tasks=("feature_tracing",), conditions=("natural", "budget_pressure"),
                           progress=False)
    c = load_corpus(corpus, cache=False)
    jpath = tmp_path / "judgments.parquet"
    ag.synthetic_judgments(c.runs, c.turns, seed=2).to_parquet(jpath)
    monkeypatch.setenv("ADAKIT_HOME", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    out = tmp_path / "out.ipynb"
    pm.execute_notebook(str(NOTEBOOK), str(out), cwd=str(tmp_path), progress_bar=False,
                        kernel_name="python3",
                        parameters={"corpus": str(corpus), "judgments": str(jpath),
                                    "n_resamples": 200, "n_permutations": 500,
                                    "figure_prefix": "nbtest"})
    written = {p.name for p in (tmp_path / "figures" / "nbtest").glob("*.png")}
    assert {"cv_within_cells.png", "fig4_activity_intervals.png",
            "fig7_tag_shares_intervals.png", "density_intervals.png",
            "fig8_quality_intervals.png", "sequence_similarity.png"} <= written
    # signal to noise: one page per factor, no single tall figure
    assert {n for n in written if n.startswith("signal_to_noise")} >= {
        f"signal_to_noise_{f}.png" for f in ("model", "condition")}
    text = _outputs(out)
    assert "4 cells, 4 with at least 2 runs (20 of 20 runs)" in text
    assert "readings exceed the noise" in text and "match 1, mismatch 0, gap 0" in text
    snr = (tmp_path / "data" / "processed" / "nbtest" / "signal_to_noise.csv").read_text()
    assert "synth-A,synth-C,turns" in snr


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_the_ci_profile_notebook_shows_its_repeat_cells():
    """The CI profile's executed notebook 15 (`make study PROFILE=ci`, or its notebook stage
    here) shows the profile's repeat cells."""
    from adakit.record import load_corpus

    runs_dir = config.RUNS / "ci"
    if not runs_dir.exists():
        subprocess.run(["make", "study", "PROFILE=ci"], cwd=ROOT, check=True)
    runs = load_corpus(runs_dir, cache=False).runs
    cells = runs.groupby(["model", "world", "task", "condition"])["run_id"].size()
    assert cells.get(("baseline-tracer", "flask", "feature_tracing", "natural")) == 2
    assert cells.get(("smollm2-135m-t07", "flask", "feature_tracing", "natural")) == 2
    executed = config.DATA / "study" / "ci" / "notebooks" / NOTEBOOK.name
    if not executed.exists() or executed.stat().st_mtime < NOTEBOOK.stat().st_mtime:
        subprocess.run([sys.executable, "-m", "adakit", "stage", "notebook", "ci", "--notebook",
                        NOTEBOOK.name], cwd=ROOT, check=True)
    text = _outputs(executed)
    assert "with at least 2 runs" in text and '"output_type": "error"' not in text
    # its replay under nbval is make test's last step (every executed notebook of the profile)
