"""The noise floor (adakit.variance.noise): coefficients of variation, pooled SDs and signal-to-noise
ratios computed by hand; run metrics on a synthetic corpus."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from adakit.variance import noise

CELL = ["model", "world", "task", "condition"]


def _table(cells: dict[tuple[str, str], list[float]]) -> pd.DataFrame:
    rows = []
    for (model, condition), values in cells.items():
        for r, v in enumerate(values):
            rows.append({"run_id": f"{model}-{condition}-{r}", "model": model, "world": "w",
                         "task": "t", "condition": condition, "repeat": r, "turns": v})
    return pd.DataFrame(rows)


def test_cv_and_pooled_sd_by_hand():
    table = _table({("A", "natural"): [10, 12, 14], ("A", "budget"): [20, 24],
                    ("B", "natural"): [7]})
    v = noise.cell_variation(table, ["turns"]).set_index(["model", "condition"])
    # 10, 12, 14: mean 12, SD 2 (n - 1), CV 2/12
    assert v.loc[("A", "natural"), ["n", "mean", "sd"]].tolist() == [3, 12.0, 2.0]
    assert v.loc[("A", "natural"), "cv"] == pytest.approx(1 / 6)
    # 20, 24: mean 22, SD sqrt(8), CV sqrt(8)/22
    assert v.loc[("A", "budget"), "cv"] == pytest.approx(np.sqrt(8) / 22)
    assert np.isnan(v.loc[("B", "natural"), "cv"]) and v.loc[("B", "natural"), "note"] == "too few runs"
    floor = noise.noise_floor(v.reset_index()).iloc[0]
    # pooled: sqrt((2 * 2^2 + 1 * 8) / 3) = sqrt(16 / 3)
    assert floor["pooled_sd"] == pytest.approx(np.sqrt(16 / 3))
    assert (floor["cells"], floor["runs"]) == (2, 5)
    assert floor["median_cv"] == pytest.approx((1 / 6 + np.sqrt(8) / 22) / 2)


def test_zero_mean_has_no_cv():
    v = noise.cell_variation(_table({("A", "natural"): [0, 0, 0]}), ["turns"])
    assert np.isnan(v.loc[0, "cv"]) and v.loc[0, "note"] == "mean is 0"


def test_signal_to_noise_by_hand():
    table = _table({
        ("A", "natural"): [10, 12, 14], ("B", "natural"): [30, 32, 34],  # diff -20, SD 2
        ("A", "budget"): [11, 12, 13], ("B", "budget"): [12, 13, 14],  # diff -1, SD 1
    })
    snr = noise.signal_to_noise(table, factors=["model", "condition"], metrics=["turns"],
                                n_permutations=3000, seed=0)
    model = snr[snr["factor"] == "model"].iloc[0]
    assert (model["a"], model["b"], model["matched"]) == ("A", "B", 2)
    assert model["mean_diff"] == -10.5 and model["median_abs_diff"] == 10.5
    # pooled over the four repeated cells: sqrt((2*4 + 2*4 + 2*1 + 2*1) / 8) = sqrt(2.5)
    assert model["pooled_sd"] == pytest.approx(np.sqrt(2.5))
    assert model["snr"] == pytest.approx(10.5 / np.sqrt(2.5))
    assert model["noise_from"] == "A, B"
    # stratified by condition (3 A and 3 B runs stay in each): of the 20 x 20 splits only
    # the extreme natural splits (diff of sums -+60) with a budget diff of the same sign of
    # at least 3 (5 of 20 budget splits each way) reach |T| >= 10.5: p = 10 / 400
    assert model["p"] == pytest.approx(10 / 400, abs=0.008)
    assert bool(model["survives"]) == (model["p_holm"] < 0.05)
    cond = snr[snr["factor"] == "condition"].iloc[0]
    # natural vs budget within each model: A 12 - 12 = 0, B 32 - 13 = 19; median |d| = 9.5
    assert (cond["a"], cond["b"]) == ("natural", "budget")
    assert cond["median_abs_diff"] == 9.5


def test_a_difference_within_the_noise_does_not_survive():
    table = _table({("A", "natural"): [0, 10, 20, 30], ("B", "natural"): [5, 15, 25, 35]})
    row = noise.signal_to_noise(table, factors=["model"], metrics=["turns"],
                                n_permutations=2000).iloc[0]
    # |diff| 5 against a pooled SD of 12.9: SNR 0.39
    assert row["snr"] == pytest.approx(5 / np.std([0, 10, 20, 30], ddof=1))
    assert not row["survives"] and row["verdict"].startswith("within the noise")


def test_noise_unknown_without_repeats():
    table = _table({("A", "natural"): [3], ("B", "natural"): [5]})
    row = noise.signal_to_noise(table, factors=["model"], metrics=["turns"]).iloc[0]
    assert np.isnan(row["snr"]) and row["verdict"] == "no repeated cells: noise unknown"


def test_run_metrics_on_a_synthetic_corpus():
    from adakit.judging import agreement as ag
    from adakit.synthetic import synthetic_tables

    corpus = synthetic_tables(64, seed=3)
    judgments = ag.synthetic_judgments(corpus.runs, corpus.turns, seed=1)
    table = noise.run_metrics(corpus, judgments)
    assert len(table) == 64
    shares = [c for c in table.columns if c.endswith(noise.SHARE_SUFFIX)]
    assert shares and np.allclose(table[shares].sum(axis=1), 100.0)
    assert {"turns", "loc_viewed", "files_visited", *noise.SCORE_METRICS} <= set(table.columns)
    assert table["relevance"].between(0, 1).all()
    assert noise.metric_columns(table)[:3] == ["turns", "loc_viewed", "files_visited"]


def test_noise_falls_back_to_every_repeated_cell():
    table = _table({("A", "natural"): [3], ("B", "natural"): [9], ("C", "natural"): [1, 3]})
    row = noise.signal_to_noise(table, factors=["model"], metrics=["turns"],
                                pairs={"model": [("A", "B")]}).iloc[0]
    # A and B hold one run each: the noise is C's SD, sqrt(2); |3 - 9| / sqrt(2)
    assert row["noise_from"] == "all cells" and row["pooled_sd"] == pytest.approx(np.sqrt(2))
    assert row["snr"] == pytest.approx(6 / np.sqrt(2))
    # one run a side: swapping them gives the same |difference|, so p = 1 and it cannot survive
    assert row["p"] == 1.0 and not row["survives"]
    assert row["verdict"] == f"{6 / np.sqrt(2):.1f}x SD but not significant after Holm"


def test_noise_floor_per_corpus_folder(tmp_path):
    """Two folders read as one: each folder's repeats give its own floor."""
    table = _table({("A", "natural"): [10, 12, 14], ("B", "natural"): [30, 34]})
    folder = {"A": tmp_path / "study", "B": tmp_path / "reference" / "runs"}
    runs = table[["run_id", "model"]].assign(
        path=[str(folder[m] / f"{r}.jsonl") for r, m in zip(table["run_id"], table["model"],
                                                            strict=True)])
    floors = noise.noise_floor_by_source(table, runs, ["turns"]).set_index("source")
    assert list(floors.index) == [str(folder["A"]), str(folder["B"])]  # outside the project
    assert floors.loc[str(folder["A"]), "pooled_sd"] == pytest.approx(2.0)
    assert floors.loc[str(folder["B"]), "pooled_sd"] == pytest.approx(np.sqrt(8))
    assert floors.loc[str(folder["B"]), "median_cv"] == pytest.approx(np.sqrt(8) / 32)
    pooled = noise.noise_floor(noise.cell_variation(table, ["turns"])).iloc[0]
    assert pooled["pooled_sd"] == pytest.approx(np.sqrt((2 * 4 + 8) / 3))  # one table, both
