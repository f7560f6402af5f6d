"""Lens 1 (journey arc) on hand-built trajectories: marker kinds, size-class boundaries,
normalized times, the time/output correlation and the arc figure."""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from scipy import stats

from adakit import synthetic as syn
from adakit.lenses import journey as j
from adakit.record import corpus_from_runs, load_corpus

FILES = {"a.py": 300, "b.py": 100}


def _step(tool, duration=1.0, **kw):
    return {"tool": tool, "duration": duration, "gap": 0.0, **kw}


SCRIPT = [
    _step("OVW", file="a.py"),
    _step("PKR", file="a.py", ranges=[(1, 19)]),  # 19 lines
    _step("PKR", file="a.py", ranges=[(1, 20)]),  # 20
    _step("PKR", file="a.py", ranges=[(1, 50)]),  # 50
    _step("PKR", file="a.py", ranges=[(1, 51)]),  # 51
    _step("EXP", action="go_to_definition", file="b.py", ranges=[(3, 9)]),
    _step("EXP", action="find_all_references", file="b.py"),
    _step("EXP", action="go_to_next_block", file="b.py", ranges=[(10, 30)]),
    _step("MEM", confidence="high"),
    _step("MEM", confidence="Low"),
    _step("MEM", confidence=None),
    _step("BKM", file="a.py", coach="HINT"),
    _step("HNT", file="a.py"),
    _step("CON", finalize=False, coach="REJECT"),
    _step("PKR", file="zzz.py", error="tool_error"),
    _step("unknown"),
    _step("malformed", coach="APPROVE"),
    _step("CON"),
]
KINDS = [
    "OVW", "PKR:<20", "PKR:20-50", "PKR:20-50", "PKR:>50", "EXP:definition",
    "EXP:references", "EXP:next", "MEM:high", "MEM:low", "MEM:none", "BKM", "HNT", "CON:hold",
    "error:tool_error", "error:unknown_tool", "error:malformed", "CON:finalize",
]


def test_pkr_size_class_boundaries():
    got = j.pkr_size_class([0, 19, 20, 35, 50, 51, 400])
    assert list(got) == ["<20", "<20", "20-50", "20-50", "20-50", ">50", ">50"]


def test_exp_subaction_names():
    got = j.exp_subaction(["go_to_definition", "find_all_references", "go_to_next_block",
                           "definition", None, "jump"])
    assert list(got) == ["definition", "references", "next", "definition", "other", "other"]


def test_arc_events_marker_kinds_by_hand():
    corpus = corpus_from_runs([syn.synthetic_run("r", files=FILES, tools=SCRIPT)])
    ev = j.arc_events(corpus)
    assert list(ev.columns) == j.EVENT_COLUMNS
    assert ev["kind"].astype(str).tolist() == KINDS
    assert ev["turn"].tolist() == list(range(1, len(SCRIPT) + 1))
    coach = ev["coach"].astype(object).where(ev["coach"].notna(), None).tolist()
    assert coach[11] == "HINT" and coach[13] == "REJECT"
    assert coach[16] is None  # APPROVE is not a message to the agent
    assert pd.isna(ev["detail"].iloc[0])  # OVW has no sub-kind
    assert ev["detail"].iloc[1:5].tolist() == ["<20", "20-50", "20-50", ">50"]
    assert set(ev["n_turns"]) == {len(SCRIPT)}


def test_normalized_times_by_hand():
    durations = [1.0, 2.0, 3.0, 4.0]
    script = [_step("PKR", d, file="a.py", ranges=[(1, 5)]) for d in durations[:-1]]
    script.append(_step("CON", durations[-1]))
    corpus = corpus_from_runs([syn.synthetic_run("t", files=FILES, tools=script)])
    # active clock (default): the turns laid end to end, 10 s in all
    ev = j.arc_events(corpus)
    assert ev["elapsed_s"].iloc[0] == pytest.approx(10.0)
    assert ev["t_s"].to_numpy() == pytest.approx([0.0, 1.0, 3.0, 6.0], abs=1e-9)
    assert ev["t_rel_end"].to_numpy() == pytest.approx([0.1, 0.3, 0.6, 1.0], abs=1e-9)
    # wall clock: launch lead-in and close included
    ev = j.arc_events(corpus, time="wall")
    starts = np.array([0.05, 1.05, 3.05, 6.05])
    elapsed = 0.05 + sum(durations) + 0.01
    assert ev["elapsed_s"].iloc[0] == pytest.approx(elapsed, abs=1e-4)
    assert ev["t_s"].to_numpy() == pytest.approx(starts, abs=1e-4)
    assert ev["t_rel"].to_numpy() == pytest.approx(starts / elapsed, abs=1e-5)
    assert ev["t_rel_end"].to_numpy() == pytest.approx((starts + durations) / elapsed, abs=1e-5)
    assert ev["duration_s"].to_numpy() == pytest.approx(durations, abs=1e-4)


def _turns(model, duration, output):
    return pd.DataFrame({"model": model, "duration_s": duration, "output_chars": output})


def test_turn_time_output_correlation_on_known_data():
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    rng = np.random.default_rng(0)
    noisy = rng.normal(size=40)
    noisy_y = noisy + rng.normal(size=40)
    turns = pd.concat([
        _turns("lin", x, 2 * x + 1),
        _turns("rev", x, -x),
        _turns("cube", x, x ** 3),
        _turns("noise", noisy, noisy_y),
        _turns("tiny", [1.0, 2.0], [3.0, 4.0]),
        _turns("flat", x, np.ones_like(x)),
    ], ignore_index=True)
    out = j.turn_time_output_correlation(turns, time="duration_s").set_index("model")
    assert out.loc["lin", "pearson_r"] == pytest.approx(1.0)
    assert out.loc["lin", "spearman_rho"] == pytest.approx(1.0)
    assert out.loc["rev", "pearson_r"] == pytest.approx(-1.0)
    assert out.loc["cube", "spearman_rho"] == pytest.approx(1.0)
    assert out.loc["cube", "pearson_r"] == pytest.approx(np.corrcoef(x, x ** 3)[0, 1])
    r, p = stats.pearsonr(noisy, noisy_y)
    assert out.loc["noise", "pearson_r"] == pytest.approx(r)
    assert out.loc["noise", "pearson_p"] == pytest.approx(p)
    assert out.loc["noise", "n"] == 40
    assert np.isnan(out.loc["tiny", "pearson_r"]) and out.loc["tiny", "n"] == 2
    assert out.loc["tiny", "note"] == "undefined: n = 2 turns (a correlation needs at least 3)"
    assert np.isnan(out.loc["flat", "spearman_rho"])
    assert out.loc["flat", "note"] == "undefined: output_chars is constant"
    assert out.loc["lin", "note"] == ""
    overall = j.turn_time_output_correlation(turns, by=None, time="duration_s")
    assert len(overall) == 1 and overall.loc[0, "n"] == len(turns)
    with pytest.raises(KeyError):
        j.turn_time_output_correlation(turns, output="tokens_out")


def test_plot_time_output(no_saving):
    x = np.arange(1.0, 11.0)
    turns = pd.concat([_turns("A", x, 3 * x), _turns("B", x, x[::-1]), _turns("C", x, x ** 2)],
                      ignore_index=True)
    fig = j.plot_time_output(turns, max_points=5, time="duration_s")
    assert len(fig.axes) == 3  # no empty panels left over
    assert fig.axes[0].get_title().startswith("A: r = 1.000, rho = 1.000 (n = 10)")
    assert fig.axes[1].get_title().startswith("B: r = -1.000")
    assert len(fig.axes[0].collections[0].get_offsets()) == 5  # thinned for drawing
    matplotlib.pyplot.close("all")


def test_long_pauses():
    script = [_step("PKR", d, file="a.py", ranges=[(1, 5)]) for d in (1.0, 1.0, 1.0, 5.0)]
    ev = j.arc_events(corpus_from_runs([syn.synthetic_run("p", files=FILES, tools=script)]))
    pauses = j.long_pauses(ev, factor=3.0)
    assert pauses["turn"].tolist() == [4]
    assert pauses["ratio"].iloc[0] == pytest.approx(5.0, abs=1e-3)
    with pytest.raises(ValueError):
        j.long_pauses(ev, factor=0)


def test_format_reference_matches_the_paper():
    assert j.format_reference(269.044) == "100% = 4.5 min (269044 ms)"
    assert j.format_reference(249.734) == "100% = 4.2 min (249734 ms)"
    assert j.format_reference(0.082) == "100% = 0.1 s (82 ms)"


@pytest.fixture
def no_saving(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("a plot function tried to save")

    monkeypatch.setattr(Figure, "savefig", refuse)


def test_plot_journey_arcs(no_saving):
    runs = [syn.synthetic_run("hand", files=FILES, tools=SCRIPT, condition="natural")]
    runs += [syn.synthetic_run(f"n{k}", condition="natural", seed=k) for k in range(3)]
    runs += [syn.synthetic_run(f"b{k}", condition="budget_pressure", seed=k) for k in range(2)]
    corpus = corpus_from_runs(runs)
    ev = j.arc_events(corpus)
    fig = j.plot_journey_arcs(ev, corpus.runs, facet=["condition"], max_runs_per_panel=3)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    nat, bud = fig.axes
    assert nat.get_title(loc="left") == "Natural" and bud.get_title(loc="left") == "Budget Pres."
    assert len(nat.get_yticks()) == 3 and len(bud.get_yticks()) == 2  # capped at 3 per panel
    longest = corpus.runs[corpus.runs["run_id"].isin(["b0", "b1"])]["active_s"].max()
    assert bud.get_title(loc="right") == j.format_reference(longest)
    assert len(nat.lines) == 3 and len(bud.lines) == 2  # one baseline per run
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "PKR >50L" in labels and "Coach hint" in labels and "Unknown tool" in labels
    one = j.plot_journey_arcs(ev, facet=None, axis="turn", max_runs_per_panel=None)
    assert len(one.axes) == 1 and len(one.axes[0].get_yticks()) == 6
    assert one.axes[0].get_xlabel() == "Turn"
    per_run = j.plot_journey_arcs(ev, corpus.runs, facet=["condition"], scale="run")
    assert per_run.axes[0].get_title(loc="right") == "100% = each run's end"
    for kwargs in ({"axis": "clock"}, {"scale": "global"}, {"max_runs_per_panel": 0}):
        with pytest.raises(ValueError):
            j.plot_journey_arcs(ev, **kwargs)
    with pytest.raises(ValueError, match="no runs"):
        j.plot_journey_arcs(ev, corpus.runs.assign(run_id="other"))
    matplotlib.pyplot.close("all")


def test_lens1_on_a_written_corpus(tmp_path):
    syn.write_synthetic_corpus(tmp_path, 16, seed=6, conditions=["natural", "coach_judge"],
                               progress=False)
    corpus = load_corpus(tmp_path)
    ev = j.arc_events(corpus)
    assert len(ev) == len(corpus.turns)
    assert ev["kind"].notna().all()
    assert ev.groupby("run_id")["t_rel"].is_monotonic_increasing.all()
    corr = j.turn_time_output_correlation(corpus)
    assert set(corr["model"]) == set(corpus.runs["model"])
    assert (corr["n"] > 3).all() and corr["pearson_r"].between(-1, 1).all()
    fig = j.plot_journey_arcs(ev, corpus.runs, max_runs_per_panel=2)
    assert len(fig.axes) == corpus.runs[["condition", "model"]].drop_duplicates().shape[0]
    matplotlib.pyplot.close("all")


def test_coach_review_time_does_not_stretch_the_arc_or_the_time_check():
    """A 2 s turn whose last 1.5 s were the coach's review: on the active clock it is a 0.5 s
    turn, so the arc ends at 1.5 s (1 s + 0.5 s) and the time/output check sees 0.5 s."""
    script = [_step("PKR", 1.0, file="a.py", ranges=[(1, 5)]), _step("CON", 2.0)]
    rf = syn.synthetic_run("c", files=FILES, tools=script, condition="coach_judge")
    last = rf.turns[-1]
    last.coach = {"decision": "HINT", "started_at": last.ended_at - 1.5,
                  "ended_at": last.ended_at}
    corpus = corpus_from_runs([rf])
    ev = j.arc_events(corpus)
    assert ev["elapsed_s"].iloc[0] == pytest.approx(1.5)
    assert ev["duration_s"].tolist() == pytest.approx([1.0, 0.5])
    assert ev["t_rel"].tolist() == pytest.approx([0.0, 1.0 / 1.5])
    assert corpus.turns["active_s"].tolist() == pytest.approx([1.0, 0.5])
    with pytest.raises(ValueError, match="time must be one of"):
        j.arc_events(corpus, time="cpu")
