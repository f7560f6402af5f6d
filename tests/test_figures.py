"""Honest figures (issue 26): one colour per model across figures, a run count on every group,
judges named on lens 3 figures, distinct journey row labels, and the signal-to-noise figure
split into pages a screen can show."""

from __future__ import annotations

import subprocess
import sys

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex

from adakit import figures, uncertainty
from adakit.lenses import adjudication as l3
from adakit.lenses import intervention as iv
from adakit.lenses import journey, policy, surface
from adakit.variance import noise


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


# ------------------------------------------------------------------------------- colours


def test_model_color_is_a_function_of_the_name_alone():
    assert figures.model_color("qwen2.5-coder-1.5b") == figures.MODEL_COLORS["qwen2.5-coder-1.5b"]
    assert figures.model_color("GPT-4.1") == figures.model_color("gpt-4.1")  # paper's spelling
    # a model no table lists: the same colour whatever else a figure shows, and in a new process
    alone = figures.model_colors(["my-agent"])["my-agent"]
    crowded = figures.model_colors(["gpt-4o", "zz-model", "my-agent", "aa"])["my-agent"]
    code = "from adakit import figures; print(figures.model_color('my-agent'))"
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert alone == crowded == fresh
    with pytest.raises(ValueError, match="model name"):
        figures.model_color(" ")


def test_listed_models_have_distinct_colours():
    by_color: dict[str, set[str]] = {}
    for name, color in figures.MODEL_COLORS.items():
        by_color.setdefault(color.lower(), set()).add(name)
    shared = [names for names in by_color.values() if len(names) > 1]
    assert shared == [{"qwen3.5-397b", "qwen3.5-397b-a17b"}]  # one model, two spellings


def _interval_colors(models: list[str]) -> dict[str, str]:
    table = pd.DataFrame({"model": models, "v": np.arange(len(models), dtype=float),
                          "v_lo": 0.0, "v_hi": 5.0, "n_runs": 3})
    fig = uncertainty.plot_intervals(table, "v", "model", hue="model")
    return {ln.get_label(): to_hex(ln.get_color()) for ln in fig.axes[0].lines
            if not ln.get_label().startswith("_")}


def _cv_colors(models: list[str]) -> dict[str, str]:
    variation = pd.DataFrame({"model": models, "metric": "turns", "cv": 0.2})
    fig = noise.plot_cv(variation)
    return {c.get_label(): to_hex(c.get_facecolor()[0]) for c in fig.axes[0].collections}


def _bar_colors(models: list[str]) -> dict[str, str]:
    agg = pd.DataFrame({"model": models, "condition": "natural", "turns": 5.0, "n_runs": 2})
    fig = surface.plot_metric_panels(agg, ["turns"], error_bars=False)
    return {c.get_label(): to_hex(c.patches[0].get_facecolor()) for c in fig.axes[0].containers}


def test_the_same_model_has_the_same_colour_in_different_figures():
    # the 1.5B is the only model these figures share, at a different place in each
    one = _interval_colors(["gpt-4o", "qwen2.5-coder-1.5b", "imported-x"])
    two = _cv_colors(["qwen2.5-coder-0.5b", "aaa", "qwen2.5-coder-1.5b"])
    three = _bar_colors(["qwen2.5-coder-1.5b"])
    assert one["qwen2.5-coder-1.5b"] == two["qwen2.5-coder-1.5b"] == three["qwen2.5-coder-1.5b"]
    assert one["qwen2.5-coder-1.5b"] == figures.model_color("qwen2.5-coder-1.5b").lower()
    assert len(set(one.values())) == 3 and len(set(two.values())) == 3


# ------------------------------------------------------------------------------- n marks


def test_n_note():
    assert uncertainty.n_note(13) == "n = 13"
    assert uncertainty.n_note(1) == "n = 1, no interval"
    assert uncertainty.n_note(2, min_runs=3) == "n = 2, no interval"
    with pytest.raises(ValueError, match="run count"):
        uncertainty.n_note(float("nan"))


def test_interval_rows_carry_their_run_counts():
    table = pd.DataFrame({"g": ["big", "one"], "v": [1.0, 2.0], "v_lo": [0.5, np.nan],
                          "v_hi": [1.5, np.nan], "n_runs": [13, 1]})
    assert sorted(_texts(uncertainty.plot_intervals(table, "v", "g"))) == [
        "n = 1, no interval", "n = 13"]
    # runs enough, but too few of them with a value: still no interval, and it says so
    gap = table.assign(n_runs=[13, 4])
    assert sorted(_texts(uncertainty.plot_intervals(gap, "v", "g"))) == [
        "n = 13", "n = 4, no interval"]
    # without a count column the old mark stays: only the row without an interval
    bare = uncertainty.plot_intervals(table.drop(columns="n_runs"), "v", "g")
    assert _texts(bare) == [uncertainty.TOO_FEW]


def _tags() -> tuple[pd.DataFrame, pd.DataFrame]:
    runs = pd.DataFrame({"run_id": ["a1", "a2", "a3", "c1"], "model": "m",
                         "condition": ["natural"] * 3 + ["combined"]})
    tags = pd.DataFrame({"run_id": ["a1", "a1", "a2", "a3", "c1", "c1"],
                         "tag": ["close read", "skim", "skim", "trace", "close read", "trace"]})
    return tags, runs


def test_fig7_bars_carry_their_run_counts():
    tags, runs = _tags()
    shares = policy.tag_share_intervals(tags, runs, by=["model", "condition"], n_resamples=50)
    fig = policy.plot_tag_shares(shares, interval=shares)
    ax = fig.axes[0]
    marks = {t.get_text(): t.xy[1] for t in ax.texts if t.get_text().startswith("n = ")}
    assert set(marks) == {"n = 3", "n = 1, no interval"}
    rows = {t.get_text(): y for t, y in zip(ax.get_yticklabels(), ax.get_yticks(), strict=True)}
    assert marks["n = 3"] == rows["Natural"] and marks["n = 1, no interval"] == rows["Combined"]


def test_fig12c_marks_a_group_of_one_run():
    long = pd.DataFrame({
        "run_id": ["n1", "n2", "n3", "c1", "n1", "n2", "n3", "c1"],
        "world": "w", "task": "t",
        "condition": ["natural"] * 3 + ["coach_judge"] + ["natural"] * 3 + ["coach_judge"],
        "dimension": ["relevance"] * 4 + ["conclusion_grounding"] * 4,
        "value": [1.0, 0.5, 0.8, 0.3, 0.2, 0.4, 0.9, 1.0], "judges": "j1, j2"})
    fig = iv.plot_adjudication_comparison(long)
    marks = [t.replace("\n", " ") for t in _texts(fig)]
    assert sorted(marks) == ["n = 1, no interval"] * 2 + ["n = 3"] * 2
    assert fig.axes[0].get_title().endswith("judges: j1, j2")


# ------------------------------------------------------------------------------- lens 3


def _verdicts(panel: tuple[str, ...], runs: list[str], score: float = 4.0) -> list[dict]:
    rows = []
    for run in runs:
        for fam in ("task_relevance", "trace_grounding"):
            for judge in panel:
                rows.append({"item_id": f"{run}-{fam}", "run_id": run, "family": fam,
                             "judge": judge, "turn": np.nan, "tool": None, "label": "x",
                             "score": score, "rationale": "", "valid": True})
    return rows


def _runs(ids: list[str], models: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"run_id": ids, "model": models, "condition": "natural", "task": "t",
                         "world": "w", "conclusion": "some words", "n_turns": 4, "errors": 0})


def test_fig8_names_one_panel_and_tells_two_apart():
    runs = _runs(["a1", "a2", "b1", "b2"], ["a", "a", "b", "b"])
    one = pd.DataFrame(_verdicts(("j1", "j2"), ["a1", "a2", "b1", "b2"]))
    scores = l3.lens3_scores(one, runs)
    assert set(scores["judges"]) == {"j1, j2"}
    fig = l3.plot_conclusion_quality(l3.conclusion_quality(scores))
    assert fig.axes[0].get_title().endswith("judges: j1, j2")
    # runs of model b judged by another panel: groups split by panel, both panels named
    two = pd.DataFrame(_verdicts(("j1", "j2"), ["a1", "a2"]) + _verdicts(("k1",), ["b1", "b2"]))
    scores = l3.lens3_scores(two, runs)
    quality = l3.conclusion_quality(scores, by=["model"])
    assert quality.set_index("model")["judges"].to_dict() == {"a": "j1, j2", "b": "k1"}
    ax = l3.plot_conclusion_quality(quality, style=None).axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"judges: j1, j2", "judges: k1"} <= set(legend)
    with pytest.raises(ValueError, match="judge panels"):
        pooled = uncertainty.bootstrap_means(scores, ["model"], ["conclusion_grounding",
                                                                 "relevance"], n_resamples=20)
        l3.plot_conclusion_quality(quality, style=None, interval=pooled)
    split = uncertainty.bootstrap_means(scores, l3.with_judges(["model"], scores),
                                        ["conclusion_grounding", "relevance"], n_resamples=20)
    l3.plot_conclusion_quality(quality, style=None, interval=split)


def test_fig8_dodges_coinciding_points():
    runs = _runs([f"r{i}" for i in range(6)], ["a", "a", "b", "b", "c", "c"])
    scores = l3.lens3_scores(pd.DataFrame(_verdicts(("j1",), list(runs["run_id"]))), runs)
    quality = l3.conclusion_quality(scores, by=["model"])  # three groups, all at (1, 1)
    ax = l3.plot_conclusion_quality(quality, style=None).axes[0]
    points = [tuple(ln.get_xydata()[0]) for ln in ax.lines if ln.get_marker() == "o"
              and len(ln.get_xdata()) == 1]
    assert len(points) == 3 and len({x for x, _ in points}) == 3  # side by side
    assert all(y == 1.0 for _, y in points)
    assert np.mean([x for x, _ in points]) == pytest.approx(1.0)  # around their true place
    assert sorted(_texts(ax.figure)) == ["n = 2"] * 3


def test_other_lens3_figures_name_their_judges():
    runs = _runs(["a1", "a2"], ["a", "a"])
    table = pd.DataFrame(_verdicts(("j1", "j2"), ["a1", "a2"]))
    shares = l3.label_shares(table, runs, "task_relevance", by=["model"])
    title = l3.plot_label_shares(shares, "task_relevance", by=["model"],
                                 judges=l3.panel_names(table)).axes[0].get_title()
    assert title.endswith("judges: j1, j2")
    fig = l3.plot_length_robustness(l3.lens3_scores(table, runs))
    assert fig.axes[0].get_title().endswith("judges: j1, j2")
    assert l3.panel_title("T", ["p", "q"]) == "T\njudges, 2 panels pooled: p | q"


# ------------------------------------------------------------------------------- Fig. 6b


def test_journey_rows_of_one_world_read_apart():
    runs = pd.DataFrame({"run_id": ["x__r0", "x__r1", "y__r0"], "world": "flask",
                         "task": "t", "condition": "natural", "model": "m",
                         "repeat": [0, 1, 0]})
    labels = journey.row_labels(runs, "world", facet=["model", "condition"])
    assert labels == ["flask · r0 #1", "flask · r1", "flask · r0 #2"]  # alike even with repeats
    assert journey.row_labels(runs.iloc[:2], "world") == ["flask · r0", "flask · r1"]
    other = runs.assign(world=["flask", "requests", "click"])
    assert journey.row_labels(other, "world") == ["flask", "requests", "click"]


# ------------------------------------------------------------------------------- pages


def _readings(per_factor: dict[str, int]) -> pd.DataFrame:
    rows = []
    for factor, n in per_factor.items():
        for k in range(n):
            rows.append({"factor": factor, "a": f"A{k // 4}", "b": f"B{k // 4}",
                         "metric": f"m{k % 4}", "snr": 0.5 + k % 7, "survives": k % 3 == 0})
    return pd.DataFrame(rows)


def test_signal_to_noise_is_split_into_pages_a_few_screens_tall():
    snr = _readings({"model": 212, "condition": 60, "task": 8})
    snr.loc[3, "snr"] = np.inf  # repeats that do not vary
    pages = noise.plot_signal_to_noise_pages(snr, title="Readings")
    assert list(pages)[:1] == ["model_1"] and "condition_1" in pages and "task" in pages
    dpi = plt.rcParams["savefig.dpi"]
    for name, fig in pages.items():
        assert fig.get_size_inches()[1] * dpi <= 2000, name  # px when saved
        assert len(fig.axes[0].get_yticks()) <= noise.PAGE_ROWS
    shown = sum(len(fig.axes[0].get_yticks()) for fig in pages.values())
    assert shown == len(snr)
    assert len({fig.axes[0].get_xlim() for fig in pages.values()}) == 1  # one axis for all
    # a pair (a vs b, its four metrics) is never cut across two pages
    parts = noise.signal_to_noise_pages(snr)
    owners = {}
    for name, page in parts:
        for pair in page[["factor", "a", "b"]].drop_duplicates().itertuples(index=False):
            assert pair not in owners, (pair, owners.get(pair), name)
            owners[pair] = name
    with pytest.raises(ValueError, match="max_rows"):
        noise.signal_to_noise_pages(snr, max_rows=0)


def test_grounding_distribution_names_its_judges():
    table = pd.DataFrame({"label": ["grounded", "unclear"], "baseline_share": [1.0, 0.0],
                          "treatment_share": [0.5, 0.5], "baseline_n": [2, 0],
                          "treatment_n": [1, 1]})
    fig = iv.plot_grounding_distribution(table, judges=["j1, j2"])
    assert fig.axes[0].get_title() == "Trace grounding labels\njudges: j1, j2"
    assert iv.plot_grounding_distribution(table).axes[0].get_title() == "Trace grounding labels"


def test_task_composition_groups_carry_their_run_counts():
    comp = pd.DataFrame({"task": ["architecture_analysis", "risk_review"], "OVW": [2.0, 1.0],
                         "EXP": [1.0, 3.0]}).set_index("task")
    ci = pd.DataFrame({"task": ["architecture_analysis", "risk_review"], "n_runs": [4, 1],
                       "OVW_lo": [1.5, np.nan], "OVW_hi": [2.5, np.nan],
                       "EXP_lo": [0.5, np.nan], "EXP_hi": [1.5, np.nan]})
    ax = surface.plot_task_composition(comp, interval=ci).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "Architecture\nn = 4", "Risk review\nn = 1, no interval"]


def test_paired_panels_count_their_pairs():
    pairs = pd.DataFrame({"metric": ["turns"] * 3 + ["loc_viewed"],
                          "baseline": [5.0, 6.0, 7.0, 10.0], "treatment": [7.0, 7.0, 9.0, 20.0]})
    pairs["diff"] = pairs["treatment"] - pairs["baseline"]
    fig = iv.plot_paired_metrics(pairs, iv.paired_comparison(pairs, n_resamples=50))
    titles = [ax.get_title().split("\n")[0] for ax in fig.axes if ax.get_visible()]
    assert titles[0].endswith("(n = 3)") and titles[1].endswith("(n = 1, no interval)")
