"""Notebook 41 (process diagnostics): its documented parameters, a papermill run on the CI
study's baselines with seeded verdicts (its replay under nbval: make test's last step)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "41_process_diagnostics.ipynb"
PARAMETERS = {"corpus", "judgments", "group_by", "calibrate", "percentile", "reference",
              "compare", "match", "mismatch", "gap", "n_resamples", "seed", "level",
              "explore_run", "figure_prefix"}


def _outputs(path: Path) -> str:
    return json.dumps([c.get("outputs", []) for c in json.loads(path.read_text())["cells"]])


def test_notebook_documents_its_parameters():
    pm = pytest.importorskip("papermill")
    params = pm.inspect_notebook(str(NOTEBOOK))
    assert set(params) == PARAMETERS and all(p["help"] for p in params.values())
    assert params["corpus"]["default"] == '"data/runs/quick"'
    assert (params["match"]["default"], params["mismatch"]["default"], params["gap"]["default"]) \
        == ("1.0", "0.0", "0.0")
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    assert all(not c.get("outputs") for c in cells if c["cell_type"] == "code")


@pytest.mark.timeout(600)
def test_notebook_runs_on_the_baselines_with_synthetic_verdicts(ci_baseline_corpus, tmp_path, monkeypatch):
    pm = pytest.importorskip("papermill")
    from adakit import config
    from adakit.judging import agreement as ag
    from adakit.record import load_corpus

    c = load_corpus(ci_baseline_corpus, cache=False)
    verdicts = tmp_path / "judgments.parquet"
    ag.synthetic_judgments(c.runs, c.turns, seed=2).to_parquet(verdicts)
    env = {"ADAKIT_HOME": str(tmp_path), "MPLBACKEND": "Agg",
           "ADAKIT_WORLDS": str(config.worlds_dir()), "ADAKIT_EXPLORER": "static"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "41.ipynb"
    pm.execute_notebook(str(NOTEBOOK), str(out), cwd=str(tmp_path), progress_bar=False,
                        kernel_name="python3",
                        parameters={"corpus": str(ci_baseline_corpus), "judgments": str(verdicts),
                                    "n_resamples": 200, "figure_prefix": "nbtest"})
    written = {p.name for p in (tmp_path / "figures" / "nbtest").glob("*.png")}
    assert written == {"label_composition.png", "detector_rates.png", "aligned_pair.png"}
    text = _outputs(out)
    assert "steps labelled" in text and "calibrated (p90)" in text
    assert "symbol level: LCS score" in text  # the world is on disk: three levels
    assert "diff_within_task" in text and "key: " in text
    tables = tmp_path / "data" / "processed" / "nbtest"
    assert {"firings.parquet", "detector_rates.csv", "score_association.csv"} <= {
        p.name for p in tables.iterdir()}
    # its replay under nbval is make test's last step (the CI profile's executed notebook 41)
