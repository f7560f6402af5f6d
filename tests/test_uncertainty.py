"""Bootstrap intervals, permutation tests and Holm's correction (adakit.uncertainty), and the
lenses' intervals built on them (tag shares, trace densities), on hand-built data whose answer
is known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from adakit import uncertainty as u
from adakit.lenses import footprint, policy


def _runs(values: dict[str, list[float]]) -> pd.DataFrame:
    rows = [{"run_id": f"{g}{i}", "model": g, "x": v} for g, vs in values.items()
            for i, v in enumerate(vs)]
    return pd.DataFrame(rows)


def test_identical_runs_give_a_zero_width_interval_and_one_run_gives_none():
    table = _runs({"A": [3.0] * 5, "B": [0.0, 10.0], "C": [7.0]})
    ci = u.bootstrap_means(table, "model", ["x"], n_resamples=500, seed=1).set_index("model")
    assert ci.loc["A", ["x", "x_lo", "x_hi"]].tolist() == [3.0, 3.0, 3.0]
    # two runs 0 and 10: a resample's mean is 0, 5 or 10 with chances 1/4, 1/2, 1/4, so the
    # 2.5th and 97.5th percentiles are the extremes
    assert ci.loc["B", ["x", "x_lo", "x_hi"]].tolist() == [5.0, 0.0, 10.0]
    assert ci.loc["C", "x"] == 7.0
    assert np.isnan(ci.loc["C", "x_lo"]) and np.isnan(ci.loc["C", "x_hi"])
    assert ci.loc["C", "note"] == u.TOO_FEW and ci.loc["A", "note"] == ""
    assert ci["n_runs"].tolist() == [5, 2, 1]


def test_interval_of_a_mean_matches_its_standard_error():
    # 100 runs, half 0 and half 1: SE of the mean = 0.5 / 10 = 0.05, so the 95% interval is
    # about 0.5 +- 1.96 * 0.05 = [0.402, 0.598]
    table = _runs({"A": [0.0, 1.0] * 50})
    ci = u.bootstrap_means(table, "model", ["x"], n_resamples=4000, seed=3).iloc[0]
    assert ci["x"] == 0.5
    assert ci["x_lo"] == pytest.approx(0.402, abs=0.02)
    assert ci["x_hi"] == pytest.approx(0.598, abs=0.02)


def test_missing_values_are_left_out_and_the_seed_fixes_the_resamples():
    table = _runs({"A": [1.0, np.nan, 3.0, 5.0, 9.0]})
    one = u.bootstrap_means(table, "model", ["x"], n_resamples=300, seed=7)
    assert one.loc[0, "x"] == 4.5 and one.loc[0, "x_n"] == 4
    again = u.bootstrap_means(table, "model", ["x"], n_resamples=300, seed=7)
    other = u.bootstrap_means(table, "model", ["x"], n_resamples=300, seed=8)
    assert one.equals(again)
    assert (one[["x_lo", "x_hi"]].to_numpy() != other[["x_lo", "x_hi"]].to_numpy()).any()


def test_bootstrap_sums_resample_within_each_group():
    # group 0 holds only 1s, group 1 only 100s: no resample may mix them
    values = np.array([1.0, 1.0, 1.0, 100.0, 100.0])
    codes = np.array([0, 0, 0, 1, 1])
    sums = u.bootstrap_sums(values, codes, n_resamples=200, seed=0)
    assert sums.shape == (200, 2, 1)
    assert (sums[:, 0, 0] == 3.0).all() and (sums[:, 1, 0] == 200.0).all()


def _tags(runs: dict[str, list[str]], model: dict[str, str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows = [{"run_id": r, "tag": t} for r, ts in runs.items() for t in ts]
    return (pd.DataFrame(rows),
            pd.DataFrame({"run_id": list(model), "model": list(model.values())}))


def test_tag_share_intervals_keep_fig7_values_and_follow_the_runs():
    tags, runs = _tags(
        {"a1": ["skim", "trace"], "a2": ["skim", "trace"], "a3": ["skim", "trace"],
         "b1": ["skim", "skim", "skim", "skim"], "b2": ["trace"]},
        {"a1": "A", "a2": "A", "a3": "A", "b1": "B", "b2": "B"},
    )
    ci = policy.tag_share_intervals(tags, runs, by="model", n_resamples=500, seed=0)
    plain = policy.tag_shares(tags, runs, by="model")
    pd.testing.assert_frame_equal(ci[plain.columns], plain)
    a = ci[ci["model"] == "A"].set_index("tag")
    assert a.loc["skim", ["share", "share_lo", "share_hi"]].tolist() == [50.0, 50.0, 50.0]
    b = ci[ci["model"] == "B"].set_index("tag")
    # B pooled: 4 skims of 5 transitions = 80%; a resample is b1+b1 (100%), b1+b2 (80%) or
    # b2+b2 (0%) with chances 1/4, 1/2, 1/4
    assert b.loc["skim", ["share", "share_lo", "share_hi"]].tolist() == [80.0, 0.0, 100.0]
    by_run = policy.tag_share_intervals(tags, runs, by="model", weight="run", n_resamples=500)
    b = by_run[by_run["model"] == "B"].set_index("tag")
    assert b.loc["skim", ["share", "share_lo", "share_hi"]].tolist() == [50.0, 0.0, 100.0]


def test_density_intervals_count_runs_that_read_nothing():
    reads = pd.DataFrame({"run_id": ["r1", "r2"], "file": ["f.py", "f.py"],
                          "start_line": [1, 1], "end_line": [10, 10]})
    runs = pd.DataFrame({"run_id": ["r1", "r2", "r3", "r4"], "model": ["A", "B", "B", "A"]})
    d = footprint.density_intervals(reads, runs, by="model", n_resamples=400, seed=0)
    d = d.set_index("model")
    # A: r1 read 10 lines, r4 nothing -> 5 per run; a resample's density is 0, 5 or 10
    assert d.loc["A", ["density", "density_lo", "density_hi"]].tolist() == [5.0, 0.0, 10.0]
    assert d.loc["B", "density"] == 5.0
    same = footprint.density_intervals(reads[reads["run_id"] == "r1"],
                                       runs[runs["run_id"] == "r1"])
    assert same.loc[0, "note"] == u.TOO_FEW and np.isnan(same.loc[0, "density_lo"])


def test_permutation_test_identical_groups_give_one_disjoint_groups_a_small_p():
    same = [2.0, 5.0, 7.0, 7.0]
    diff, p = u.permutation_test(same, same, n_permutations=2000, seed=0)
    assert diff == 0.0 and p == 1.0
    # six 0s against six 1s: only the two extreme splits of C(12, 6) = 924 are as extreme,
    # exact p = 2 / 924 = 0.0022
    diff, p = u.permutation_test([0.0] * 6, [1.0] * 6, n_permutations=5000, seed=0)
    assert diff == -1.0
    assert p == pytest.approx(2 / 924, abs=0.004)


def test_stratified_permutation_only_swaps_inside_strata():
    a, b = [1.0, 2.0, 3.0], [11.0, 12.0, 13.0]
    # unstratified: 2 of C(6, 3) = 20 splits reach |diff| = 10 -> p = 0.1
    _, p = u.permutation_test(a, b, n_permutations=6000, seed=1)
    assert p == pytest.approx(0.1, abs=0.02)
    # one run of each side per stratum: only the 2^3 = 8 sign patterns remain, 2 reach it
    _, p = u.permutation_test(a, b, n_permutations=6000, seed=1,
                              strata_a=["s1", "s2", "s3"], strata_b=["s1", "s2", "s3"])
    assert p == pytest.approx(0.25, abs=0.03)


def test_permutation_test_of_a_ratio_of_sums():
    # pooled share: 2/4 vs 6/8 -> difference -0.25 (not the mean of per-run shares)
    diff, _ = u.permutation_test([1.0, 1.0], [3.0, 3.0], a_den=[2.0, 2.0], b_den=[4.0, 4.0],
                                 n_permutations=100)
    assert diff == pytest.approx(-0.25)


def test_holm_by_hand():
    adjusted = u.holm([0.01, 0.04, 0.03, 0.005, np.nan])
    # sorted 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 = 0.04 -> kept at 0.06
    np.testing.assert_allclose(adjusted[:4], [0.03, 0.06, 0.06, 0.02])
    assert np.isnan(adjusted[4])
    assert u.holm([0.6, 0.7]).tolist() == [1.0, 1.0]


def test_difference_tests_read_out_and_say_too_few():
    table = _runs({"A": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0], "B": [1.0] * 6, "C": [4.0]})
    out = u.difference_tests(table, "model", ["x"], n_permutations=3000, n_resamples=300)
    assert list(zip(out["a"], out["b"], strict=True)) == [("A", "B"), ("A", "C"), ("B", "C")]
    ab = out.iloc[0]
    assert ab["diff"] == -1.0 and ab["diff_lo"] == -1.0 and ab["diff_hi"] == -1.0
    assert ab["p"] < 0.01 and ab["p_holm"] == ab["p"]  # the only test with a p in the family
    assert ab["reading"] == "A < B"
    assert out.iloc[1]["reading"] == u.TOO_FEW and np.isnan(out.iloc[1]["p"])


def test_run_counts_table():
    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "model": ["M", "M", "N"]})
    counts = u.run_counts(runs, "model")
    assert counts.to_dict("list") == {"model": ["M", "N"], "n_runs": [2, 1],
                                      "interval": ["yes", u.TOO_FEW]}


# ------------------------------------------------------------------ intervals in the figures


def _segments(ax) -> list[np.ndarray]:
    """The error-bar line segments drawn on an axes (one (2, 2) array per bar)."""
    from matplotlib.collections import LineCollection

    return [seg for coll in ax.collections if isinstance(coll, LineCollection)
            for seg in coll.get_segments()]


def test_lens0_bars_draw_the_bootstrap_interval():
    from adakit.lenses import surface

    table = _runs({"A": [0.0, 10.0], "B": [4.0, 4.0, 4.0]}).rename(columns={"x": "turns"})
    table["condition"] = "natural"
    agg = surface.aggregate(table, by=["model", "condition"], metrics=["turns"])
    ci = u.bootstrap_means(table, ["model", "condition"], ["turns"], n_resamples=300)
    fig = surface.plot_metric_panels(agg, ["turns"], interval=ci)
    spans = sorted((float(s[0, 1]), float(s[1, 1])) for s in _segments(fig.axes[0]))
    assert spans == [(0.0, 10.0), (4.0, 4.0)]  # A's interval 0..10, B's none wide
    fig = surface.plot_metric_panels(agg, ["turns"])  # standard errors: A's SEM is 5
    spans = sorted((float(s[0, 1]), float(s[1, 1])) for s in _segments(fig.axes[0]))
    assert spans == [(0.0, 10.0), (4.0, 4.0)]


def test_figd5b_bars_draw_the_bootstrap_interval():
    from adakit.lenses import surface

    table = _runs({"A": [0.0, 10.0], "B": [4.0, 4.0, 4.0], "C": [2.0]}).rename(
        columns={"x": "PKR", "model": "task"})
    comp = surface.task_composition(table, by="task")
    ci = u.bootstrap_means(table, "task", ["PKR"], n_resamples=300)
    ax = surface.plot_task_composition(comp, interval=ci).axes[0]
    spans = sorted((float(s[0, 1]), float(s[1, 1])) for s in _segments(ax))
    # A's mean 5 with interval 0..10, B's three 4s no width, C's one run none (no length)
    assert spans == [(0.0, 10.0), (2.0, 2.0), (4.0, 4.0)]
    assert not _segments(surface.plot_task_composition(comp).axes[0])  # no interval: no bars


def test_fig7_whiskers_span_the_share_interval():
    tags, runs = _tags({"b1": ["skim"] * 4, "b2": ["trace"]}, {"b1": "B", "b2": "B"})
    ci = policy.tag_share_intervals(tags, runs, by="model", n_resamples=300)
    fig = policy.plot_tag_shares(ci, interval=ci)
    # the interval columns are not grouping columns: one bar, labelled by its model
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["B"]
    spans = [(float(s[0, 0]), float(s[1, 0])) for s in _segments(fig.axes[0])
             if s[0, 1] == s[1, 1]]  # horizontal whiskers
    # Fig. 7 stacks trace (20%, interval 0..100) first from 0, then skim (80%, interval
    # 0..100) from 20: each whisker spans its interval measured from the segment's left edge
    assert sorted(spans) == [(0.0, 100.0), (20.0, 120.0)]


def test_fig8_points_take_the_interval():
    from adakit.lenses import adjudication as l3

    scores = pd.DataFrame({"run_id": list("abc"), "model": ["M"] * 3, "condition": "natural",
                           "conclusion_grounding": [0.0, 0.0, 1.0], "relevance": [0.5] * 3})
    table = l3.conclusion_quality(scores, by=["model", "condition"])
    ci = u.bootstrap_means(scores, ["model", "condition"], ["conclusion_grounding", "relevance"],
                           n_resamples=400)
    fig = l3.plot_conclusion_quality(table, interval=ci)
    xs = [(float(s[0, 0]), float(s[1, 0])) for s in _segments(fig.axes[0]) if s[0, 1] == s[1, 1]
          and s[0, 0] != s[1, 0]]
    assert xs == [(0.0, 1.0)]  # three runs 0, 0, 1: resampled means reach 0 and 1


def test_p_floor_counts_the_label_assignments():
    five = np.ones(5, dtype=bool)
    assert u.p_floor(five, five) == pytest.approx(1 / 252)  # C(10, 5)
    assert u.p_floor(five, five, n_permutations=99) == pytest.approx(1 / 100)
    # one run of each side in each of two strata: 2 x 2 assignments
    assert u.p_floor(np.ones(2, bool), np.ones(2, bool), np.array(["s", "t"]),
                     np.array(["s", "t"])) == pytest.approx(1 / 4)
    table = _runs({"A": [0.0] * 5, "B": [1.0] * 5})
    out = u.difference_tests(table, "model", ["x"], n_permutations=20000, n_resamples=100)
    assert out.loc[0, "p_floor"] == pytest.approx(1 / 252)
    assert out.loc[0, "p"] >= out.loc[0, "p_floor"] - 0.002


def test_item_means_resample_runs_not_items():
    items = pd.DataFrame({
        "run_id": ["r1", "r1", "r2", "r2", "s1", "s2", "s2", "t1"],
        "g": ["A", "A", "A", "A", "B", "B", "B", "C"],
        "score": [0.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 1.0],
    })
    ci = u.item_mean_intervals(items, "g", n_resamples=1000, seed=2).set_index("g")
    # A: r1 (0, 1) and r2 (1, 1), 3/4 of the items; drawing runs gives r1 r1 (1/2), a mix (3/4)
    # or r2 r2 (1), so the interval is 1/2..1 (items drawn singly could reach 0)
    assert ci.loc["A", ["n_runs", "n_items", "mean", "mean_lo", "mean_hi"]].tolist() == [
        2, 4, 0.75, 0.5, 1.0]
    # B: every item 0.5, whatever the run sizes: zero width; C: one run, no interval
    assert ci.loc["B", ["mean", "mean_lo", "mean_hi"]].tolist() == [0.5, 0.5, 0.5]
    assert np.isnan(ci.loc["C", "mean_lo"]) and ci.loc["C", "note"] == u.TOO_FEW
