"""Lens 0 (surface activity) on hand-built trajectories whose numbers are computed by hand,
plus the figure helpers (style, ordering, save_figure)."""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.container import BarContainer
from matplotlib.figure import Figure

from adakit import config, figures
from adakit import synthetic as syn
from adakit.lenses import surface as s
from adakit.record import corpus_from_runs, load_corpus

FILES = {"a.py": 200, "b.py": 100}


def _step(tool, **kw):
    return {"tool": tool, "duration": 1.0, "gap": 0.0, "thinking": 10, **kw}


# turns 1..11, each 1.0 s long, 10 thinking characters each
SCRIPT = [
    _step("OVW", file="a.py"),
    _step("PKR", file="a.py", ranges=[(1, 30)]),
    _step("PKR", file="a.py", ranges=[(21, 40)]),  # overlaps 21-30: 10 new lines
    _step("PKR", file="a.py", ranges=[(100, 100)]),  # one line
    _step("PKR", file="b.py", ranges=[(1, 19)]),
    _step("PKR", file="a.py", ranges=[(5, 10)]),  # inside 1-30: nothing new
    _step("EXP", file="b.py", action="definition", ranges=[(10, 25)]),  # 20-25 new in b.py
    _step("PKR", file="c.py", error="tool_error"),  # failed: no lines, no visit
    _step("MEM", confidence="high"),
    _step("malformed"),
    _step("CON"),
]


def _run(run_id, script=SCRIPT, model="M1", condition="natural", task="architecture_analysis"):
    return syn.synthetic_run(run_id, model=model, condition=condition, task=task, files=FILES,
                             tools=script)


@pytest.fixture
def corpus():
    return corpus_from_runs([_run("r1")])


def test_run_surface_by_hand(corpus):
    row = s.run_surface(corpus).iloc[0]
    assert row["turns"] == 11
    assert row["loc_viewed"] == 41 + 25  # a.py: 1-40 and 100; b.py: 1-25
    assert row["lines_shown"] == 30 + 20 + 1 + 19 + 6 + 16
    assert row["files_visited"] == 2  # c.py failed
    assert row["elapsed_s"] == pytest.approx(11 * 1.0, abs=1e-4)  # active: the turns only
    assert row["time_per_turn_s"] == pytest.approx(1.0, abs=1e-5)
    wall = s.run_surface(corpus, time="wall").iloc[0]
    assert wall["elapsed_s"] == pytest.approx(0.05 + 11 * 1.0 + 0.01, abs=1e-4)
    assert wall["time_per_turn_s"] == pytest.approx(11.06 / 11, abs=1e-5)
    assert row["thinking_chars"] == 110 and row["thinking_per_turn"] == pytest.approx(10.0)
    assert row["errors"] == 2
    counts = {t: row[t] for t in ("OVW", "PKR", "EXP", "MEM", "BKM", "HNT", "CON")}
    assert counts == {"OVW": 1, "PKR": 6, "EXP": 1, "MEM": 1, "BKM": 0, "HNT": 0, "CON": 1}


def test_distinct_lines_unions_ranges_per_file():
    reads = pd.DataFrame(
        [("r1", "a", 1, 10), ("r1", "a", 11, 20), ("r1", "a", 5, 8), ("r1", "a", 1, 10),
         ("r1", "b", 1, 10), ("r2", "a", 50, 60), ("r2", "a", 40, 55), ("r2", "a", 70, 70)],
        columns=["run_id", "file", "start_line", "end_line"],
    )
    got = s.distinct_lines(reads)
    assert got.to_dict() == {"r1": 20 + 10, "r2": 21 + 1}  # adjacent ranges join; r2: 40-60
    both = s.distinct_lines(reads, by=["run_id", "file"])
    assert both.loc[("r1", "a")] == 20 and both.loc[("r1", "b")] == 10
    assert s.distinct_lines(reads.iloc[:0]).empty


def test_run_without_reads_and_missing_columns():
    corpus = corpus_from_runs([_run("only", script=[_step("MEM"), _step("CON")])])
    row = s.run_surface(corpus).iloc[0]
    assert (row["loc_viewed"], row["lines_shown"], row["files_visited"]) == (0, 0, 0)
    with pytest.raises(ValueError, match="active_s"):
        s.run_surface(type(corpus)(corpus.runs.drop(columns="active_s"), corpus.turns,
                                   corpus.reads))
    with pytest.raises(ValueError, match="time must be one of"):
        s.run_surface(corpus, time="cpu")


def test_aggregate_means_and_sem_in_paper_order():
    def turns(n):
        return [_step("PKR", file="a.py", ranges=[(1, 5)]) for _ in range(n - 1)] + [_step("CON")]

    runs = [_run(f"n{k}", script=turns(k), model="M1", condition="natural") for k in (2, 4, 6)]
    runs += [_run("b1", script=turns(3), model="M1", condition="budget_pressure")]
    runs += [_run("c1", script=turns(5), model="M1", condition="combined")]
    agg = s.aggregate(s.run_surface(corpus_from_runs(runs)))
    assert agg["condition"].tolist() == ["natural", "budget_pressure", "combined"]
    nat = agg.iloc[0]
    assert nat["n_runs"] == 3 and nat["turns"] == pytest.approx(4.0)
    assert nat["turns_sem"] == pytest.approx(2 / math.sqrt(3))
    assert math.isnan(agg.iloc[1]["turns_sem"])  # one run: no standard error
    with pytest.raises(ValueError, match="nope"):
        s.aggregate(s.run_surface(corpus_from_runs(runs)), metrics=["nope"])


def test_tool_concentration_shares_by_hand(corpus):
    conc = s.tool_concentration(corpus)
    # PKR 6, then OVW/EXP/MEM/CON 1 each (ties in Table 1 order); malformed is no tool call
    assert conc["tool"].tolist() == ["PKR", "OVW", "EXP", "MEM", "CON"]
    assert conc["calls"].tolist() == [6, 1, 1, 1, 1]
    assert conc["share"].tolist() == pytest.approx([0.6, 0.1, 0.1, 0.1, 0.1])
    assert conc["cum_share"].tolist() == pytest.approx([0.6, 0.7, 0.8, 0.9, 1.0])
    assert conc["rank"].tolist() == [1, 2, 3, 4, 5]
    two = corpus_from_runs([_run("r1"), _run("r2", script=[_step("OVW"), _step("OVW"),
                                                            _step("CON")], model="M2")])
    by = s.tool_concentration(two, by="model")
    m2 = by[by["model"] == "M2"]
    assert m2["tool"].tolist() == ["OVW", "CON"]
    assert m2["cum_share"].tolist() == pytest.approx([2 / 3, 1.0])


def test_task_composition_means():
    runs = [
        _run("t1", task="risk_review", script=[_step("PKR", file="a.py", ranges=[(1, 2)]),
                                               _step("PKR", file="a.py", ranges=[(3, 4)]),
                                               _step("CON")]),
        _run("t2", task="risk_review", script=[_step("PKR", file="a.py", ranges=[(1, 2)]),
                                               _step("CON")]),
        _run("t3", task="architecture_analysis", script=[_step("OVW", file="a.py"),
                                                         _step("CON")]),
    ]
    comp = s.task_composition(s.run_surface(corpus_from_runs(runs)))
    assert list(comp.index) == ["architecture_analysis", "risk_review"]  # paper order
    assert comp.loc["risk_review", "PKR"] == pytest.approx(1.5)
    assert comp.loc["architecture_analysis", "OVW"] == pytest.approx(1.0)
    assert comp.loc["risk_review", "CON"] == pytest.approx(1.0)


@pytest.fixture
def no_saving(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("a plot function tried to save")

    monkeypatch.setattr(Figure, "savefig", refuse)


def _assert_bars_show(fig, agg, metrics, x="condition", hue="model"):
    """Each panel's bars, one container per ``hue`` value, have the aggregate's heights."""
    xs = figures.order_for(x, agg[x])
    hues = figures.order_for(hue, agg[hue])
    for ax, metric in zip(fig.axes, metrics, strict=True):
        layers = [c for c in ax.containers if isinstance(c, BarContainer)]
        assert [c.get_label() for c in layers] == [str(h) for h in hues]
        for h, bars in zip(hues, layers, strict=True):
            want = agg[agg[hue] == h].set_index(x)[metric].reindex(xs).fillna(0.0)
            assert [r.get_height() for r in bars.patches] == pytest.approx(want.tolist())


def test_plots_return_figures_without_saving(no_saving):
    corpus = syn.synthetic_tables(48, seed=3)
    surf = s.run_surface(corpus)
    agg = s.aggregate(surf)
    n_models, n_conds = agg["model"].nunique(), agg["condition"].nunique()
    fig = s.plot_activity(agg)
    assert isinstance(fig, Figure) and len(fig.axes) == 4
    for ax in fig.axes:
        assert len(ax.patches) == n_models * n_conds
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == [
        "Natural", "Prior Suppr.", "Budget Pres.", "Combined"]
    assert len(fig.legends) == 1 and len(fig.legends[0].get_texts()) == n_models
    _assert_bars_show(fig, agg, s.ACTIVITY_METRICS)
    fig = s.plot_effort(agg)
    assert len(fig.axes) == 2
    _assert_bars_show(fig, agg, s.EFFORT_METRICS)
    assert fig.axes[1].get_ylabel() == "Avg. Thinking Chars per Turn"
    conc = s.tool_concentration(corpus)
    fig = s.plot_tool_concentration(conc)
    assert len(fig.axes) == 2 and len(fig.axes[0].patches) == len(conc)
    assert [r.get_height() for r in fig.axes[0].patches] == conc["calls"].tolist()
    assert fig.axes[1].lines[0].get_ydata() == pytest.approx(100 * conc["cum_share"])
    assert fig.axes[1].lines[0].get_ydata()[-1] == pytest.approx(100.0)
    assert any("PKR + OVW" in t.get_text() or "OVW + PKR" in t.get_text()
               for t in fig.axes[1].texts)
    comp = s.task_composition(surf)
    fig = s.plot_task_composition(comp)
    assert len(fig.axes[0].patches) == len(comp) * 7
    for bars in fig.axes[0].containers:  # one layer per tool, one bar per task family
        tool = bars.get_label()
        assert [r.get_height() for r in bars.patches] == pytest.approx(comp[tool].tolist())
    matplotlib.pyplot.close("all")


def test_plots_draw_into_given_axes(no_saving):
    agg = s.aggregate(s.run_surface(syn.synthetic_tables(16, seed=1)))
    fig, axes = matplotlib.pyplot.subplots(1, 2)
    assert s.plot_effort(agg, axes=axes) is fig
    with pytest.raises(ValueError, match="need 4 axes"):
        s.plot_activity(agg, axes=axes)
    with pytest.raises(ValueError, match="one group at a time"):
        s.plot_tool_concentration(s.tool_concentration(syn.synthetic_tables(16), by="model"))
    matplotlib.pyplot.close("all")


def test_lens0_on_a_written_corpus(tmp_path):
    syn.write_synthetic_corpus(tmp_path, 16, seed=4, progress=False)
    corpus = load_corpus(tmp_path)
    surf = s.run_surface(corpus)
    assert len(surf) == 16 and (surf["loc_viewed"] <= surf["lines_shown"]).all()
    assert (surf[list(figures.TOOL_COLORS)].sum(axis=1) <= surf["turns"]).all()
    agg = s.aggregate(surf)
    assert len(agg) == 16  # 4 models x 4 conditions, one run each
    fig = s.plot_activity(agg)
    assert isinstance(fig, Figure) and len(fig.axes) == 4
    _assert_bars_show(fig, agg, s.ACTIVITY_METRICS)
    matplotlib.pyplot.close("all")


# ----------------------------------------------------------------------------- figures


def test_save_figure_writes_png_and_svg(tmp_path, monkeypatch):
    fig, ax = matplotlib.pyplot.subplots()
    ax.plot([0, 1], [0, 1])
    paths = figures.save_figure(fig, "10_lens0_surface/fig4_activity", folder=tmp_path)
    assert paths == [tmp_path / "10_lens0_surface/fig4_activity.png",
                     tmp_path / "10_lens0_surface/fig4_activity.svg"]
    assert all(p.stat().st_size > 0 for p in paths)
    assert paths[0].read_bytes()[:4] == b"\x89PNG"
    monkeypatch.setattr(config, "FIGURES", tmp_path / "default")
    assert figures.save_figure(fig, "x", formats=("png",)) == [tmp_path / "default/x.png"]
    for bad in ("../out", "/abs/out", ""):
        with pytest.raises(ValueError):
            figures.save_figure(fig, bad, folder=tmp_path)
    with pytest.raises(ValueError, match="format"):
        figures.save_figure(fig, "x", folder=tmp_path, formats=("docx",))
    with pytest.raises(TypeError):
        figures.save_figure(ax, "x", folder=tmp_path)
    matplotlib.pyplot.close("all")


def test_orderings_and_colours():
    assert figures.condition_order(["combined", "coach_judge", "natural", "budget_pressure",
                                    "prior_suppression", "natural"]) == [
        "natural", "prior_suppression", "budget_pressure", "combined", "coach_judge"]
    assert figures.model_order(["zeta", "GPT-4o", "alpha", "GPT-4.1"]) == [
        "GPT-4.1", "GPT-4o", "alpha", "zeta"]
    assert figures.task_order(["risk_review", "feature_tracing", "asr_inference",
                               "architecture_analysis"])[0] == "architecture_analysis"
    assert list(figures.TOOL_COLORS) == ["OVW", "PKR", "EXP", "MEM", "BKM", "HNT", "CON"]
    assert len(set(figures.TOOL_COLORS.values())) == 7
    pal = figures.palette_for([f"m{i}" for i in range(12)])
    assert len(set(pal.values())) == 12
    figures.use_style()
    assert matplotlib.rcParams["axes.spines.top"] is False
    assert np.isclose(matplotlib.rcParams["savefig.dpi"], 200)


def test_time_per_turn_leaves_out_coach_review_and_resume_downtime():
    """Two 1 s turns; the second also held a 3 s coach review, and an hour of downtime lay
    between them (a crash and its resume): 1 s of agent time per turn, not (3600 + 5) / 2."""
    rf = _run("c1", script=[_step("PKR", file="a.py", ranges=[(1, 5)]),
                            _step("CON", duration=4.0, gap=3600.0)], condition="coach_judge")
    last = rf.turns[-1]
    last.coach = {"decision": "PASS", "started_at": last.ended_at - 3.0,
                  "ended_at": last.ended_at, "latency_s": 2.9}
    row = s.run_surface(corpus_from_runs([rf])).iloc[0]
    assert row["elapsed_s"] == pytest.approx(2.0) and row["time_per_turn_s"] == pytest.approx(1.0)
    wall = s.run_surface(corpus_from_runs([rf]), time="wall").iloc[0]
    assert wall["elapsed_s"] == pytest.approx(0.05 + 1.0 + 3600.0 + 4.0 + 0.01, abs=1e-3)
