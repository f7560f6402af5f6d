"""RQ3 analysis (adakit.lenses.intervention) on hand-built runs, and notebook 20 on a synthetic
corpus."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from adakit import config
from adakit.lenses import intervention as iv
from adakit.record import corpus_from_runs
from adakit.synthetic import synthetic_run

NOTEBOOK = config.NOTEBOOKS / "20_rq3_intervention.ipynb"
FILES = {"a.py": 100, "b.py": 60}


# ------------------------------------------------------------------------------ sign test


@pytest.mark.parametrize(
    ("n_pos", "n_neg", "expected"),
    [
        (18, 6, 2 * 190051 / 2**24),  # paper D16, PKR: p = 0.0227
        (20, 4, 2 * 12951 / 2**24),  # paper D15, elapsed time: p = .0015
        (3, 0, 0.25),  # 2 * (1/2)^3
        (7, 2, 92 / 512),  # 2 * (1 + 9 + 36) / 2^9
        (10, 0, 2 / 1024),
        (1, 0, 1.0),
        (5, 5, 1.0),  # the doubled tail exceeds 1
        (0, 0, 1.0),  # nothing but ties
    ],
)
def test_sign_test_p_hand_computed(n_pos, n_neg, expected):
    assert iv.sign_test_p(n_pos, n_neg) == pytest.approx(expected, rel=1e-12)
    assert iv.sign_test_p(n_neg, n_pos) == pytest.approx(expected, rel=1e-12)  # two-sided


def test_sign_test_matches_the_paper_and_scipy():
    assert round(iv.sign_test_p(18, 6), 4) == 0.0227
    assert round(iv.sign_test_p(20, 4), 4) == 0.0015
    stats = pytest.importorskip("scipy.stats")
    for n in range(1, 30):
        for k in range(n + 1):
            ref = stats.binomtest(k, n, 0.5).pvalue
            assert iv.sign_test_p(k, n - k) == pytest.approx(ref, rel=1e-9, abs=1e-15)


def test_sign_test_drops_ties_and_missing_pairs():
    out = iv.sign_test([1, 2, -1, 0, float("nan"), 3])
    assert out == {"n_pos": 3, "n_neg": 1, "n_ties": 1, "p": pytest.approx(2 * 5 / 16)}
    with pytest.raises(ValueError, match="non-negative"):
        iv.sign_test_p(-1, 2)


def test_format_p():
    assert [iv.format_p(p) for p in (0.0002, 0.0015439, 0.022655, 1.0)] == [
        "< .001", ".0015", "0.0227", "1.0000"]


# ------------------------------------------------------------------------------ hand-built runs


def run(run_id, world, condition, tools, repeat=0, **header):
    items = [t if isinstance(t, dict) else {"tool": t} for t in tools]
    items = [{"duration": 1.0, "gap": 0.0, **t} for t in items]
    if condition == "coach_judge":
        items = [{"coach": None, **t} for t in items]  # only scripted coach decisions
    return synthetic_run(run_id, model="m", world=world, task="feature_tracing",
                         condition=condition, tools=items, files=FILES, repeat=repeat, **header)


PKR_A = {"tool": "PKR", "file": "a.py", "ranges": [(1, 10)]}
FIN = {"tool": "CON", "finalize": True}


@pytest.fixture(scope="module")
def corpus():
    runs = [
        # pair A: the coach hints, rejects one finalize attempt, an error turn follows
        run("nat-A", "w1", "natural", ["OVW", PKR_A, FIN]),
        run("coa-A", "w1", "coach_judge", [
            "OVW", {**PKR_A, "coach": "HINT"}, {**FIN, "coach": "REJECT"},
            {"tool": "PKR", "file": "a.py", "ranges": [(11, 30)]},
            {"tool": "PKR", "file": "b.py", "error": "tool_error"}, FIN]),
        # pair B: the coach run is shorter
        run("nat-B", "w2", "natural", [
            "OVW", {"tool": "PKR", "file": "b.py", "ranges": [(1, 20)]},
            {"tool": "PKR", "file": "b.py", "ranges": [(21, 40)]}, "MEM", FIN]),
        run("coa-B", "w2", "coach_judge", ["OVW", FIN]),
        # pair C: two natural repeats (2 and 4 turns, mean 3) against a 3-turn coach run
        run("nat-C0", "w3", "natural", [PKR_A, FIN]),
        run("nat-C1", "w3", "natural", [PKR_A, PKR_A, PKR_A, FIN], repeat=1),
        run("coa-C", "w3", "coach_judge", [PKR_A, {**PKR_A, "coach": "HINT"}, FIN]),
        # a coach run without a natural partner: never paired
        run("coa-D", "w4", "coach_judge", [PKR_A, FIN]),
    ]
    return corpus_from_runs(runs)


def test_run_metrics(corpus):
    m = iv.run_metrics(corpus.runs, corpus.turns).set_index("run_id")
    a = m.loc["coa-A"]
    # two conclusion calls: the rejected finalize attempt counts, the accepted closing one not
    assert (a["turns"], a["conclusion_attempts"], a["error_turns"]) == (6, 1, 1)
    assert (a["hint_turns"], a["reject_turns"], a["coach_message_turns"]) == (1, 1, 2)
    assert (a["OVW"], a["PKR"], a["CON"], a["MEM"]) == (1, 3, 2, 0)
    assert a["elapsed_s"] == pytest.approx(6.0)  # six 1 s turns of active time
    wall = iv.run_metrics(corpus.runs, corpus.turns, time="wall").set_index("run_id")
    assert wall.loc["coa-A", "elapsed_s"] == pytest.approx(6.06)  # + 0.05 lead-in, 0.01 close
    fin = iv.run_metrics(corpus.runs, corpus.turns, attempts="finalize").set_index("run_id")
    assert fin.loc["coa-A", "conclusion_attempts"] == 2 and fin.loc["nat-A", "conclusion_attempts"] == 1
    assert m.loc["nat-A", "coach_message_turns"] == 0
    assert list(m.columns) == iv.METRIC_COLUMNS[1:]


def test_paired_comparison_hand_computed(corpus):
    table = iv.surface_comparison(corpus.runs, corpus.turns).set_index("metric")
    assert list(table.index) == list(iv.SURFACE_METRICS)
    assert (table["n_pairs"] == 3).all()  # w4 has no natural partner
    turns = table.loc["turns"]  # diffs: A 6-3=+3, B 2-5=-3, C 3-mean(2,4)=0
    assert (turns["baseline_mean"], turns["treatment_mean"], turns["mean_diff"]) == (
        pytest.approx(11 / 3), pytest.approx(11 / 3), pytest.approx(0.0))
    assert (turns["n_pos"], turns["n_neg"], turns["n_ties"], turns["sign_p"]) == (1, 1, 1, 1.0)
    msgs = table.loc["coach_message_turns"]  # A 2, B 0, C 1 against zeros
    assert (msgs["mean_diff"], msgs["n_pos"], msgs["n_ties"]) == (pytest.approx(1.0), 2, 1)
    assert msgs["sign_p"] == pytest.approx(0.5)
    att = table.loc["conclusion_attempts"]  # A 1-0, B 0-0, C 0-0
    assert att["mean_diff"] == pytest.approx(1 / 3) and att["sign_p"] == 1.0
    assert table.loc["elapsed_s", "mean_diff"] == pytest.approx(0.0, abs=1e-9)
    # the mean difference's bootstrap interval over the three pairs: turns (+3, -3, 0) range
    # from -3 (B three times, 1/27 of the resamples) to +3; attempts (1, 0, 0) from 0 (no A
    # drawn, 8/27) to 1 (A three times, 1/27)
    assert table.loc["turns", ["diff_lo", "diff_hi"]].tolist() == [-3.0, 3.0]
    assert table.loc["conclusion_attempts", ["diff_lo", "diff_hi"]].tolist() == [0.0, 1.0]
    tools = iv.surface_comparison(corpus.runs, corpus.turns, metrics=iv.TOOL_METRICS)
    by_tool = tools.set_index("metric")
    pkr = by_tool.loc["PKR"]  # A 3-1=+2, B 0-2=-2, C 2-mean(1,3)=0 (the failed PKR counts)
    assert (pkr["baseline_mean"], pkr["treatment_mean"]) == (pytest.approx(5 / 3),
                                                             pytest.approx(5 / 3))
    assert (pkr["n_pos"], pkr["n_neg"], pkr["n_ties"]) == (1, 1, 1)
    assert by_tool.loc["CON", "mean_diff"] == pytest.approx(1 / 3)
    assert by_tool.loc["EXP", ["diff_lo", "diff_hi"]].tolist() == [0.0, 0.0]  # no EXP: all 0
    shown = iv.format_comparison(tools)
    assert shown.loc[1, "Mean difference"] == "+0.00" and shown.loc[1, "Sign-test p"] == "1.0000"
    assert shown.loc[6, "Mean difference"] == "+0.33" and shown.loc[6, "+ / − / 0"] == "1 / 0 / 2"
    assert shown.loc[6, "Interval"] == "[+0.00, +1.00]"  # CON: diffs 1, 0, 0 as above
    one = iv.paired_comparison(iv.paired_metrics(
        iv.run_metrics(corpus.runs, corpus.turns), on=["world", "task"]).query("world == 'w1'"))
    assert one["diff_lo"].isna().all()  # a single pair has no interval
    assert (iv.format_comparison(one)["Interval"] == "too few pairs").all()


def test_d15_definitions_match_what_the_agent_saw():
    """Conclusion attempts leave out the accepted closing call; a coach message counts when a
    later turn read it (values by hand)."""
    hold = {"tool": "CON", "finalize": False}
    runs = [
        # natural: an interim conclusion, then the closing one -> 1 attempt
        run("n1", "w1", "natural", [PKR_A, hold, FIN]),
        # natural, closes at once -> 0 attempts (why the paper's natural mean can be 0.5)
        run("n2", "w2", "natural", [PKR_A, FIN]),
        # coach: rejected finalize, interim, accepted finalize carrying a HINT Ada never sees
        run("c1", "w1", "coach_judge", [{**FIN, "coach": "REJECT"}, {**hold, "coach": "HINT"},
                                        {**FIN, "coach": "HINT"}]),
        # coach, cut by the turn bound: both conclusion calls count, the last HINT is unread
        run("c2", "w2", "coach_judge", [hold, {**hold, "coach": "HINT"}]),
    ]
    c = corpus_from_runs(runs)
    m = iv.run_metrics(c.runs, c.turns).set_index("run_id")
    assert m["conclusion_attempts"].to_dict() == {"n1": 1, "n2": 0, "c1": 2, "c2": 2}
    assert m["hint_turns"].to_dict() == {"n1": 0, "n2": 0, "c1": 1, "c2": 0}
    assert m["reject_turns"].to_dict() == {"n1": 0, "n2": 0, "c1": 1, "c2": 0}
    assert (m["coach_message_turns"] == m["hint_turns"] + m["reject_turns"]).all()
    every = iv.run_metrics(c.runs, c.turns, attempts="all", messages="decided")
    every = every.set_index("run_id")
    assert every["conclusion_attempts"].to_dict() == {"n1": 2, "n2": 1, "c1": 3, "c2": 2}
    assert every["coach_message_turns"].to_dict() == {"n1": 0, "n2": 0, "c1": 3, "c2": 1}
    with pytest.raises(ValueError, match="attempts must be one of"):
        iv.run_metrics(c.runs, c.turns, attempts="finalizing")


def test_pairs_in_long_form(corpus):
    m = iv.run_metrics(corpus.runs, corpus.turns)
    pairs = iv.paired_metrics(m, columns=["turns"])
    assert pairs[["world", "baseline", "treatment", "diff", "n_baseline"]].values.tolist() == [
        ["w1", 3.0, 6.0, 3.0, 1], ["w2", 5.0, 2.0, -3.0, 1], ["w3", 3.0, 3.0, 0.0, 2]]
    with pytest.raises(ValueError, match="no 'combined' runs"):
        iv.paired_metrics(m, baseline="combined")
    two = pd.concat([m, m.assign(model="other")])
    with pytest.raises(ValueError, match="several models"):
        iv.paired_metrics(two)
    assert len(iv.paired_metrics(two, model="other", columns=["turns"])) == 3
    assert isinstance(iv.plot_paired_metrics(iv.paired_metrics(m)), Figure)


def test_coach_decisions(corpus):
    d = iv.coach_decisions(corpus.turns, corpus.runs).set_index("decision")
    assert d.loc["HINT", "turns"] == 2 and d.loc["REJECT", "turns"] == 1
    assert d["share"].sum() == pytest.approx(1.0)


# ------------------------------------------------------------------------------ D17, Fig. 12c


def verdicts(run_id, scores, family="trace_grounding"):
    rows = []
    for k, s in enumerate(scores):
        valid = s is not None
        label = "unclear" if s == "unclear" else (str(s) if valid else None)
        score = float(s) if isinstance(s, int) else np.nan
        rows.append({"item_id": run_id, "run_id": run_id, "family": family,
                     "judge": f"j{k}", "turn": np.nan, "tool": None, "label": label,
                     "score": score, "rationale": "", "valid": valid})
    return rows


@pytest.fixture(scope="module")
def judgments():
    rows = []
    for run_id, scores in {
        "nat-A": [4, 4, 3], "nat-B": [3, 3, 2], "nat-C0": [4, 3, 2], "nat-C1": [4, 3, None],
        "coa-A": [2, 2, 1], "coa-B": ["unclear"] * 3, "coa-C": [1, 1, 1], "coa-D": [4, 4, 4],
    }.items():
        rows += verdicts(run_id, scores)
        rows += verdicts(run_id, [4, 4, 4], "task_relevance")
    return pd.DataFrame(rows)


def test_grounding_distribution_hand_computed(corpus, judgments):
    d = iv.grounding_distribution(judgments, corpus.runs)
    # the paper's words (Table D17), and the unclear item outside the denominators
    assert d["label"].tolist() == ["well supported", "partially supported", "thinly supported",
                                   "unsupported", "split", "unclear"]
    assert d["baseline_n"].tolist() == [1, 2, 0, 0, 1, 0]  # A 4, B 3, C0 median 3, C1 3.5
    assert d["treatment_n"].tolist() == [1, 0, 1, 1, 0, 1]  # D 4, A 2, C 1, B unclear
    assert d["baseline_share"].tolist()[:5] == [0.25, 0.5, 0, 0, 0.25]
    assert d["treatment_share"].tolist()[:5] == pytest.approx([1 / 3, 0, 1 / 3, 1 / 3, 0])
    assert d["treatment_share"].isna().tolist() == [False] * 5 + [True]
    shown = iv.format_distribution(d)
    assert shown.loc[0].tolist() == ["Well supported", "1 (25.0%)", "1 (33.3%)"]
    assert shown.loc[5].tolist() == ["Unclear", "0 (–)", "1 (–)"]
    judges = iv.grounding_distribution(judgments, corpus.runs, vocabulary="judges",
                                       unclear="drop")
    assert judges["label"].tolist() == ["well supported", "mostly supported",
                                        "weakly supported", "unsupported", "split"]
    assert isinstance(iv.plot_grounding_distribution(d), Figure)
    with pytest.raises(ValueError, match="conclusion-level"):
        iv.grounding_distribution(judgments, corpus.runs, family="navigation_prior")


def test_adjudication_comparison(corpus, judgments):
    long = iv.adjudication_comparison(judgments, corpus.runs)
    g = long[long["dimension"] == "conclusion_grounding"].set_index("run_id")["value"]
    assert g["nat-A"] == 1.0 and g["coa-A"] == pytest.approx(1 / 3) and g["coa-C"] == 0.0
    assert g["nat-C1"] == pytest.approx(2.5 / 3) and "coa-B" not in g  # unclear: no score
    assert set(long["dimension"]) == {"conclusion_grounding", "relevance"}  # no calibration
    s = iv.summarize_adjudication(long).set_index(["dimension", "condition"])
    assert s.loc[("relevance", "natural"), "n"] == 4
    # every run's relevance is 1: its mean's interval has no width
    assert s.loc[("relevance", "coach_judge"), ["mean", "mean_lo", "mean_hi"]].tolist() == [
        1.0, 1.0, 1.0]
    # coach grounding: A 1/3, C 0, D 1, mean 4/9; three runs drawn spread it over 0..1
    lo, hi = s.loc[("conclusion_grounding", "coach_judge"), ["mean_lo", "mean_hi"]]
    assert 0.0 <= lo < 4 / 9 < hi <= 1.0
    assert isinstance(iv.plot_adjudication_comparison(long), Figure)


# ------------------------------------------------------------------------------ Fig. 12a, b, 13


def test_a_coach_run_pairs_only_with_natural_runs_of_its_turn_bound():
    """A coach run allowed 4 turns is not compared with natural runs allowed 15 (nor are those
    averaged into its partner); the natural run of its own bound is its partner."""
    runs = [run("nat-15", "w1", "natural", ["OVW", PKR_A, PKR_A, PKR_A, FIN], turn_bound=15),
            run("coa-4", "w1", "coach_judge", ["OVW", FIN], turn_bound=4)]
    c = corpus_from_runs(runs)
    m = iv.run_metrics(c.runs, c.turns)
    assert iv.paired_metrics(m, "m").empty
    assert iv.natural_lifetimes(c.runs).empty
    twin = run("nat-4", "w1", "natural", ["OVW", PKR_A, FIN], turn_bound=4)
    c = corpus_from_runs([*runs, twin])
    pairs = iv.paired_metrics(iv.run_metrics(c.runs, c.turns), "m").set_index("metric")
    assert pairs.loc["turns", ["baseline", "treatment", "turn_bound"]].tolist() == [3, 2, 4]
    assert iv.natural_lifetimes(c.runs).to_dict() == {"coa-4": 4}
    # pairing on world and task alone (the paper's wording) mixes the bounds: the old reading
    loose = iv.paired_metrics(iv.run_metrics(c.runs, c.turns), "m", on=["world", "task"])
    assert loose.set_index("metric").loc["turns", "baseline"] == 4  # (5 + 3) / 2


def test_natural_lifetimes_and_regimes(corpus):
    at = iv.natural_lifetimes(corpus.runs)
    assert at.to_dict() == {"coa-A": 4, "coa-B": 6, "coa-C": 4}  # natural length + 1
    shares = iv.regime_tag_shares(corpus.runs, corpus.turns)
    per = shares.groupby("regime")["transitions"].first()
    # natural: A 2 + B 4 + C0 1 + C1 3; coach turns 2-3 of A, 2 of B, 2-3 of C before the cut
    assert per.to_dict() == {
        "Natural condition": 10, "Coach condition if naturally ended": 5,
        "Coach condition extended lifetime": 3, "Coach condition overall": 8}
    ext = shares[shares["regime"] == "Coach condition extended lifetime"].set_index("tag")
    assert ext.loc["close out", "count"] == 1 and ext.loc["resume", "count"] == 1
    assert isinstance(iv.plot_regime_shares(shares), Figure)


def _regime_corpus(last_tools):
    """One pair per world: natural OVW, PKR, FIN (lifetime 3 turns); coach OVW, PKR, MEM and
    then its own last tool, the only transition of its extended lifetime."""
    runs = []
    for k, last in enumerate(last_tools):
        runs.append(run(f"nat-{k}", f"w{k}", "natural", ["OVW", PKR_A, FIN]))
        runs.append(run(f"coa-{k}", f"w{k}", "coach_judge", ["OVW", PKR_A, "MEM", last]))
    return corpus_from_runs(runs)


REGIMES = ["Natural condition", "Coach condition if naturally ended",
           "Coach condition extended lifetime", "Coach condition overall"]


def test_regime_shares_of_identical_runs_have_zero_width_intervals():
    c = _regime_corpus(["OVW", "OVW", "OVW"])
    shares = iv.regime_tag_shares(c.runs, c.turns, n_resamples=200, seed=5)
    assert list(dict.fromkeys(shares["regime"])) == REGIMES
    assert (shares["runs"] == 3).all() and (shares["note"] == "").all()
    # every run of a regime is the same, so every resample is too: lo = share = hi, zeros included
    assert np.allclose(shares["share_lo"], shares["share"])
    assert np.allclose(shares["share_hi"], shares["share"])
    got = shares[shares["count"] > 0].set_index(["regime", "tag"])["share"].round(2).to_dict()
    assert got == {  # natural: zoom in, close out; coach: zoom in, dump | resume (MEM -> OVW)
        (REGIMES[0], "zoom in"): 50.0, (REGIMES[0], "close out"): 50.0,
        (REGIMES[1], "zoom in"): 50.0, (REGIMES[1], "dump"): 50.0,
        (REGIMES[2], "resume"): 100.0,
        (REGIMES[3], "zoom in"): 33.33, (REGIMES[3], "dump"): 33.33, (REGIMES[3], "resume"): 33.33}


def test_regime_share_intervals_of_a_known_spread():
    # the two coach runs differ only in their extended lifetime: MEM -> OVW (resume) in one,
    # MEM -> MEM (cognitive streak) in the other
    c = _regime_corpus(["OVW", "MEM"])
    shares = iv.regime_tag_shares(c.runs, c.turns, n_resamples=1000, seed=1)
    ci = shares.set_index(["regime", "tag"])[["share", "share_lo", "share_hi"]]
    # extended: one transition per run; two draws give resume 0, 50 or 100 % (1/4, 1/2, 1/4)
    assert ci.loc[(REGIMES[2], "resume")].tolist() == [50.0, 0.0, 100.0]
    assert ci.loc[(REGIMES[2], "cognitive streak")].tolist() == [50.0, 0.0, 100.0]
    # overall: three transitions per run, so 0, 1 or 2 resumes in 6 (0, 16.7, 33.3 %)
    assert ci.loc[(REGIMES[3], "resume")].tolist() == pytest.approx([100 / 6, 0.0, 100 / 3])
    assert ci.loc[(REGIMES[3], "zoom in")].tolist() == pytest.approx([100 / 3] * 3)
    # the natural condition and the coach runs' natural lifetime do not vary
    for regime in REGIMES[:2]:
        part = shares[shares["regime"] == regime]
        assert np.allclose(part["share_lo"], part["share"]) and np.allclose(
            part["share_hi"], part["share"])
    # the same seed gives the same intervals
    again = iv.regime_tag_shares(c.runs, c.turns, n_resamples=1000, seed=1)
    pd.testing.assert_frame_equal(shares, again)


def test_fig12b_draws_the_regimes_in_order_with_their_whiskers():
    from matplotlib.collections import LineCollection

    c = _regime_corpus(["OVW", "MEM"])
    shares = iv.regime_tag_shares(c.runs, c.turns, n_resamples=400, seed=2)
    ax = iv.plot_regime_shares(shares).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == REGIMES  # not alphabetical
    spans = sorted((round(float(s[0, 0]), 2), round(float(s[1, 0]), 2), float(s[0, 1]))
                   for coll in ax.collections if isinstance(coll, LineCollection)
                   for s in coll.get_segments() if s[0, 1] == s[1, 1])
    # extended lifetime (row 2): resume 0..50 then cognitive streak 50..100, each whisker
    # spanning its interval (0..100) from the segment's left edge; row 3's resume (16.7 %
    # after zoom in 33.3 and dump 33.3) reaches 66.7 + 0..33.3
    assert (0.0, 100.0, 2.0) in spans and (50.0, 150.0, 2.0) in spans
    assert (66.67, 100.0, 3.0) in spans
    import matplotlib.pyplot as plt

    plt.close("all")


def test_journey_comparison(corpus):
    events, runs = iv.journey_comparison(corpus)
    assert set(runs["run_id"]) == {"nat-A", "coa-A", "nat-B", "coa-B", "nat-C0", "nat-C1",
                                   "coa-C"}  # coa-D has no partner
    assert runs.set_index("run_id").loc["coa-A", ["arm", "arm_order"]].tolist() == ["Coach", 1]
    assert events["coach"].value_counts().to_dict() == {"HINT": 2, "REJECT": 1}
    assert isinstance(iv.plot_journey_comparison(events, runs), Figure)
    with pytest.raises(ValueError, match="no 'natural'/'coach_judge' pairs"):
        iv.journey_comparison(corpus, world="w4")


def test_footprint_shift(corpus):
    shift = iv.footprint_shift(corpus.reads, corpus.runs, "w1").set_index("file")
    # coach A read a.py 1-10 and 11-30 (30 lines); natural A read 1-10; the error read nothing
    assert shift.loc["a.py", "diff"] == 20 and "b.py" not in shift.index
    files = iv.world_files("w1", corpus.reads)  # not a manifest world: the files it read
    assert files.to_dict("list") == {"file": ["a.py"], "loc": [30]}
    assert isinstance(iv.plot_footprint_shift(files, shift.reset_index()), Figure)


def test_coach_reports_of_a_recorded_run():
    rf = synthetic_run("s", condition="coach_judge", tools=["OVW", {"tool": "PKR",
                       "coach": "HINT"}, "CON"], files=FILES)
    rf.turns[0].coach = {
        "decision": "PASS", "consulted": False, "message": "",
        "report": [{"role": "overall", "valid": True, "reasoning": "ok",
                    "ratings": {"flow_state": "progressing", "suggestion": ""},
                    "concerns": []},
                   {"role": "bias", "valid": False, "reasoning": "", "ratings": {},
                    "concerns": []}]}
    table = iv.coach_reports(rf)
    assert table["judge"].tolist()[:2] == ["overall", "bias"] and pd.isna(table.loc[2, "judge"])
    assert table.loc[0, "ratings"] == "flow_state=progressing"
    assert table.loc[2, "decision"] == "HINT"


# ------------------------------------------------------------------------------ notebook


def test_notebook_is_stripped_and_documents_its_parameters():
    nb = json.loads(NOTEBOOK.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert "parameters" in code[1]["metadata"].get("tags", [])
    assert all(c["execution_count"] is None and not c["outputs"] for c in code)
    pm = pytest.importorskip("papermill")
    params = pm.inspect_notebook(str(NOTEBOOK))
    assert set(params) == {"corpus", "judgments", "model", "baseline", "treatment", "pair_on",
                           "focus_world", "time", "attempts", "messages", "vocabulary",
                           "n_resamples", "level", "seed", "figure_prefix"}
    assert params["attempts"]["default"] == '"unaccepted"' and params["time"]["default"] == \
        '"active"'
    assert "docs/deviations.md" in json.dumps(nb["cells"][0]["source"])
    assert all(p["help"] for p in params.values())
    assert params["corpus"]["default"] == '"data/runs/quick"'


@pytest.mark.timeout(300)
def test_notebook_runs_on_a_synthetic_corpus(tmp_path, monkeypatch):
    pm = pytest.importorskip("papermill")
    from adakit.judging import agreement as ag
    from adakit.record import load_corpus
    from adakit.synthetic import write_synthetic_corpus

    corpus = tmp_path / "runs" / "rq3"
    write_synthetic_corpus(corpus, 16, models=("synth-A",), worlds=("flask", "requests"),
                           tasks=("architecture_analysis", "feature_tracing"),
                           conditions=("natural", "coach_judge"), progress=False)
    c = load_corpus(corpus, cache=False)
    jpath = tmp_path / "judgments.parquet"
    ag.synthetic_judgments(c.runs, c.turns, seed=3).to_parquet(jpath)
    monkeypatch.setenv("ADAKIT_HOME", str(tmp_path))  # figures go under tmp_path/figures
    monkeypatch.setenv("MPLBACKEND", "Agg")
    out = tmp_path / "out.ipynb"
    pm.execute_notebook(
        str(NOTEBOOK), str(out), cwd=str(tmp_path), progress_bar=False, kernel_name="python3",
        parameters={"corpus": str(corpus), "judgments": str(jpath), "model": "synth-A",
                    "figure_prefix": "nbtest"},
    )
    written = {p.name for p in (tmp_path / "figures" / "nbtest").glob("*.png")}
    assert {"tableD15_pairs.png", "tableD16_tools.png", "fig12a_journey.png",
            "fig12b_regimes.png", "fig12c_adjudication.png", "tableD17_grounding.png",
            "fig13_footprint.png"} <= written
    text = json.dumps(json.loads(out.read_text())["cells"])
    assert "Sign-test p" in text and "Coach condition extended lifetime" in text
    assert "Interval" in text and "mean_lo" in text  # D15/D16 and Fig. 12c's intervals
    regimes = pd.read_csv(tmp_path / "data" / "processed" / "nbtest" / "fig12b_regime_shares.csv")
    assert list(dict.fromkeys(regimes["regime"]))[0] == "Natural condition"
    assert regimes["share_lo"].notna().any()
    with_ci = regimes[regimes["share_lo"].notna()]
    assert (with_ci["share_lo"] <= with_ci["share"] + 1e-9).all()
    assert (with_ci["share"] <= with_ci["share_hi"] + 1e-9).all()
