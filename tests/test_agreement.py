"""Agreement and calibration statistics (Appendix C) against hand-computed values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from adakit.judging import agreement as ag
from adakit.judging import families, store

NAN = float("nan")


def verdict(item, judge, label, family="task_relevance", valid=True, score=None, run=None):
    """One judgments row; the score follows the label unless given."""
    if score is None:
        score = families.LABEL_SCORES[family].get(label, NAN) if label else NAN
    return {
        "item_id": item, "run_id": run or f"run-{item}", "family": family, "judge": judge,
        "turn": NAN, "tool": None, "label": label, "score": score, "rationale": "",
        "valid": valid,
    }


@pytest.fixture
def panel() -> pd.DataFrame:
    """Three judges A, B, C on five task-relevance items.

    i1: 4 4 4              i2: 3 4 3            i3: 1 3 2
    i4: 2 unclear 2        i5: 3 failed(1) 3    (B's failed verdict carries a stray score 1)
    """
    rows = []
    for item, labels in {"i1": "444", "i2": "343", "i3": "132"}.items():
        rows += [verdict(item, j, lab) for j, lab in zip("ABC", labels, strict=True)]
    rows += [verdict("i4", "A", "2"), verdict("i4", "B", "unclear"), verdict("i4", "C", "2")]
    rows += [verdict("i5", "A", "3"), verdict("i5", "B", "1", valid=False, score=1.0),
             verdict("i5", "C", "3")]
    return pd.DataFrame(rows)


def test_unclear_and_failed_verdicts_are_excluded_not_low(panel):
    clean = store.clean_judgments(panel)
    b = clean[clean["judge"] == "B"].set_index("item_id")["score"]
    assert np.isnan(b["i4"]) and np.isnan(b["i5"])  # unclear, and failed-with-stray-score
    assert b["i1"] == 4.0
    assert clean["counted"].sum() == 13  # 15 verdicts minus the two excluded


def test_aggregate_majority_else_median(panel):
    agg = ag.aggregate_votes(panel).set_index("item_id")
    # i1 4,4,4 -> 4 ; i2 3,4,3 -> 3 by majority ; i3 1,3,2 -> median 2 ;
    # i4 2,2 (B unclear) -> 2 ; i5 3,3 (B failed) -> 3, not (3+1+3)/3
    assert agg["score"].to_dict() == {"i1": 4.0, "i2": 3.0, "i3": 2.0, "i4": 2.0, "i5": 3.0}
    assert agg.loc["i3", "rule"] == "median" and agg.loc["i2", "rule"] == "majority"
    assert agg.loc["i3", "label"] == "2"
    assert agg.loc["i5", "n_counted"] == 2 and agg.loc["i5", "n_judges"] == 3


def test_aggregate_two_disagreeing_and_none_counted():
    rows = [verdict("x", "A", "2"), verdict("x", "B", "3"), verdict("x", "C", None, valid=False),
            verdict("y", "A", "unclear"), verdict("y", "B", None, valid=False)]
    agg = ag.aggregate_votes(pd.DataFrame(rows)).set_index("item_id")
    assert agg.loc["x", "score"] == 2.5 and agg.loc["x", "label"] is None  # midpoint of 2, 3
    assert np.isnan(agg.loc["y", "score"]) and agg.loc["y", "rule"] == "none"


def test_judge_agreement_table_c5(panel):
    row = ag.judge_agreement(panel).iloc[0]
    # counted pairs: i1 AB AC BC (0,0,0); i2 (1,0,1); i3 (2,1,1); i4 AC (0); i5 AC (0) -> 11
    # exact pairs: 3 + 1 + 0 + 1 + 1 = 6  -> 6/11
    # step differences: 0+0+0 + 1+0+1 + 2+1+1 + 0 + 0 = 6 -> 6/11
    # complete items (all three counted): i1, i2, i3; all same: i1 -> 1/3
    assert row["family"] == "task_relevance"
    assert row["n_items"] == 5 and row["n_pairs"] == 11 and row["n_complete"] == 3
    assert row["pair_exact"] == pytest.approx(6 / 11)
    assert row["mean_step_diff"] == pytest.approx(6 / 11)
    assert row["all_same_rate"] == pytest.approx(1 / 3)


def test_step_difference_counts_ordinal_steps_on_turn_families():
    fam = "navigation_prior"
    rows = [verdict("t1", "A", "evidence-led", fam), verdict("t1", "B", "prior-led", fam),
            verdict("t2", "A", "mixed", fam), verdict("t2", "B", "mixed", fam)]
    row = ag.judge_agreement(pd.DataFrame(rows)).iloc[0]
    # t1: |0 - 1| = 1.0 on the index = 2 steps of 0.5 ; t2: 0 steps -> mean 1.0
    assert row["mean_step_diff"] == pytest.approx(1.0)
    assert row["pair_exact"] == pytest.approx(0.5)


def test_judge_severity_table_c6(panel):
    sev = ag.judge_severity(panel).set_index("judge")
    # A: 4+3+1+2+3 = 13 / 5 = 2.6 ; B: 4+4+3 = 11 / 3 ; C: 4+3+2+2+3 = 14 / 5 = 2.8
    assert sev.loc["A", "mean_score"] == pytest.approx(2.6)
    assert sev.loc["B", "mean_score"] == pytest.approx(11 / 3)
    assert sev.loc["C", "mean_score"] == pytest.approx(2.8)
    assert sev.loc["B", "n"] == 3 and sev.loc["B", "excluded"] == 2
    assert list(sev.index) == ["B", "C", "A"]  # most lenient first


def test_pearson_and_spearman_by_hand():
    h, m = [4, 2, 2, 1], [4, 3, 2, 2]
    # means 2.25, 2.75 ; dh = 1.75 -.25 -.25 -1.25 ; dm = 1.25 .25 -.75 -.75
    # sum dh*dm = 2.1875 - .0625 + .1875 + .9375 = 3.25 ; sum dh^2 = 4.75 ; sum dm^2 = 2.75
    assert ag.pearson(h, m) == pytest.approx(3.25 / np.sqrt(4.75 * 2.75))
    # ranks h = 4, 2.5, 2.5, 1 ; m = 4, 3, 1.5, 1.5 ; deviations from 2.5:
    # 1.5 0 0 -1.5 and 1.5 .5 -1 -1 -> 3.75 / sqrt(4.5 * 4.5)
    assert ag.spearman(h, m) == pytest.approx(3.75 / 4.5)
    assert np.isnan(ag.pearson([1, 1, 1], [1, 2, 3]))  # no variance
    assert ag.pearson([1, NAN, 3, 2], [1, 5, 3, 2]) == pytest.approx(1.0)  # NaN pair dropped


def test_weighted_kappa_by_hand():
    a, b = [1, 2, 3, 4, 4], [1, 2, 4, 4, 3]
    # Observed disagreements: (3,4) and (4,3), weight (3-4)^2 = 1 each -> sum w*O = 2 (counts)
    # Marginals: rows = cols = [1, 1, 1, 2] over categories 1..4. Chance sum r_i c_j (i-j)^2:
    #   i=1: 0 + 1 + 4 + 2*9 = 23 ; i=2: 1 + 0 + 1 + 2*4 = 10 ; i=3: 4 + 1 + 0 + 2*1 = 7
    #   i=4: 2*9 + 2*4 + 2*1 + 0 = 28 ; total 68, divided by n = 5 -> 13.6 (counts)
    # kappa = 1 - 2 / 13.6 = 0.852941...
    assert ag.weighted_kappa(a, b, (1, 2, 3, 4)) == pytest.approx(1 - 2 / 13.6)
    # Perfect reversal: O = {(1,4), (4,1)} weight 9 each = 18 ; chance (9 + 9) / 2 = 9 -> -1
    assert ag.weighted_kappa([1, 4], [4, 1]) == pytest.approx(-1.0)
    assert ag.weighted_kappa([2, 3, 1], [2, 3, 1]) == pytest.approx(1.0)
    # Unused categories do not change quadratic kappa; both raters constant -> undefined
    assert ag.weighted_kappa(a, b, (1, 2, 3, 4)) == pytest.approx(ag.weighted_kappa(a, b))
    assert np.isnan(ag.weighted_kappa([3, 3], [3, 3]))
    # The prior index scale: 0 / .5 / 1 equally spaced, same as categories 1 / 2 / 3
    assert ag.weighted_kappa([0, .5, 1, 1], [0, 1, 1, .5]) == pytest.approx(
        ag.weighted_kappa([1, 2, 3, 3], [1, 3, 3, 2]))


def write_csv(tmp_path, text: str):
    path = tmp_path / "human.csv"
    path.write_text(text)
    return path


def test_human_alignment_table_c7(panel, tmp_path):
    # LLM panel scores: i1 4, i2 3, i3 2, i4 2, i5 3 ; human: 4, 2, 2, 1 and unclear for i5
    path = write_csv(tmp_path, "item_id,family,label\n"
                     "i1,Task Relevance,4\ni2,task_relevance,2\ni3,task_relevance,2.0\n"
                     "i4,task_relevance,1\ni5,task_relevance,unclear\n")
    human = ag.load_human_labels(path, panel)
    assert np.isnan(human.set_index("item_id").loc["i5", "score"])
    row = ag.human_alignment(human, panel).iloc[0]
    assert row["n"] == 4  # the unclear human label is left out
    assert row["pearson"] == pytest.approx(3.25 / np.sqrt(4.75 * 2.75))  # as above
    assert row["spearman"] == pytest.approx(3.75 / 4.5)
    # kappa: n = 4, sum (h-m)^2 = 0+1+0+1 = 2 ; chance sum_i sum_j (h_i - m_j)^2 =
    #   n*sum h^2 + n*sum m^2 - 2*sum h*sum m = 4*25 + 4*33 - 2*9*11 = 34 -> 1 - 4*2/34
    assert row["weighted_kappa"] == pytest.approx(1 - 8 / 34)
    assert row["exact"] == pytest.approx(0.5)  # i1, i3
    assert row["within_one"] == pytest.approx(1.0)
    assert row["mean_diff"] == pytest.approx(0.5)  # LLM - human: (0 + 1 + 0 + 1) / 4


def test_within_one_uses_half_steps_on_turn_families():
    fam = "reasoning_prior"
    rows = [verdict("a", "J", "trajectory-grounded", fam), verdict("b", "J", "prior-shaped", fam),
            verdict("c", "J", "mixed", fam)]
    human = pd.DataFrame({"item_id": ["a", "b", "c"], "family": fam,
                          "label": ["prior-shaped", "mixed", "mixed"], "score": [1.0, .5, .5]})
    row = ag.human_alignment(human, pd.DataFrame(rows)).iloc[0]
    # differences LLM - human: -1 (two steps), +.5 (one step), 0
    assert row["within_one"] == pytest.approx(2 / 3)
    assert row["exact"] == pytest.approx(1 / 3)
    assert row["mean_diff"] == pytest.approx(-0.5 / 3)


def test_model_vs_human_alignment_table_c8():
    # X = 1 2 3 4 ; Y = 1 2 3 4 ; Z = 1 3 2 4 ; human = 1 2 3 4
    # r(X,Y) = 1 ; r(X,Z) = r(Y,Z): deviations -1.5 -.5 .5 1.5 vs -1.5 .5 -.5 1.5 -> 4/5 = .8
    # kappa(X,Z): n = 4, sum d^2 = 2, chance 4*30 + 4*30 - 2*10*10 = 40 -> 1 - 8/40 = .8
    scores = {"X": "1234", "Y": "1234", "Z": "1324"}
    rows = [verdict(f"i{k}", j, lab) for j, labs in scores.items() for k, lab in enumerate(labs)]
    human = pd.DataFrame({"item_id": [f"i{k}" for k in range(4)], "family": "task_relevance",
                          "label": list("1234"), "score": [1.0, 2.0, 3.0, 4.0]})
    row = ag.model_human_alignment(human, pd.DataFrame(rows)).iloc[0]
    assert row["model_model_r"] == pytest.approx((1 + .8 + .8) / 3)
    assert row["human_model_r"] == pytest.approx((1 + 1 + .8) / 3)
    assert row["model_model_kappa"] == pytest.approx((1 + .8 + .8) / 3)
    assert row["human_model_kappa"] == pytest.approx((1 + 1 + .8) / 3)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("item_id,family,label\ni1,task_relevance,5\n", "line 2: label '5' is not one of"),
        ("item_id,family,label\ni1,relevance,4\n", "line 2: unknown family 'relevance'"),
        ("item_id,family,score\ni1,navigation_prior,0.3\n", "off the navigation_prior scale"),
        ("item_id,family,label,score\ni1,task_relevance,4,2\n", "contradicts score 2"),
        ("item_id,family,label\ni1,task_relevance,4\ni1,task_relevance,3\n",
         "lines 2, 3: item 'i1' labelled more than once"),
        ("item_id,family,label\ni9,task_relevance,4\n", "item 'i9' has no task_relevance"),
        ("item_id,label\ni1,4\n", "need columns item_id, family and label or score"),
        ("item_id,family,label,score\ni1,task_relevance,,\n", "neither label nor score"),
    ],
)
def test_human_labels_errors_name_the_line(panel, tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        ag.load_human_labels(write_csv(tmp_path, text), panel)


def test_human_labels_missing_file_and_unknown_items_allowed(panel, tmp_path):
    with pytest.raises(FileNotFoundError, match="no human labels file"):
        ag.load_human_labels(tmp_path / "absent.csv")
    path = write_csv(tmp_path, "item_id,family,score\ni9,termination_calibration,3\n")
    out = ag.load_human_labels(path, panel, allow_unknown_items=True)
    assert out.iloc[0].to_dict() == {"item_id": "i9", "family": "termination_calibration",
                                     "label": "defensible", "score": 3.0}


def test_bad_judgments_tables_are_refused():
    with pytest.raises(ValueError, match="lacks column"):
        store.clean_judgments(pd.DataFrame({"item_id": ["a"]}))
    bad = pd.DataFrame([verdict("a", "A", "4", score=7.0)])
    with pytest.raises(ValueError, match="off the scale"):
        store.clean_judgments(bad)
    with pytest.raises(ValueError, match="unknown evaluation family"):
        store.clean_judgments(pd.DataFrame([verdict("a", "A", "4") | {"family": "vibes"}]))


def length_runs() -> pd.DataFrame:
    return pd.DataFrame({
        "run_id": ["r1", "r2", "r3", "r4", "r5"],
        "model": ["a", "a", "b", "b", "b"],
        "condition": ["natural"] * 4 + ["coach_judge"],
        "task": ["arch"] * 5, "world": ["w"] * 5,
        "conclusion": ["x", "x y z", "x y", "x y z w", "one two three"],
        "n_turns": [10, 12, 8, 20, 30], "errors": [0, 2, 0, 4, 0],
    })


def length_judgments() -> pd.DataFrame:
    rows = []
    for run, tr in zip(["r1", "r2", "r3", "r4", "r5"], "12341", strict=True):
        rows.append(verdict(run, "A", tr, run=run))
        rows.append(verdict(run, "A", "3", "termination_calibration", run=run))
    return pd.DataFrame(rows)


def test_run_scores_join_runs():
    table = ag.run_scores(length_judgments(), length_runs()).set_index("run_id")
    assert table["task_relevance"].to_dict() == {"r1": 1.0, "r2": 2.0, "r3": 3.0, "r4": 4.0,
                                                "r5": 1.0}
    assert table.loc["r2", "conclusion_words"] == 3 and table.loc["r4", "valid_turns"] == 16
    assert (table["n_navigation_prior"] == 0).all()


def test_length_robustness_added_r2_by_hand():
    scores = ag.run_scores(length_judgments(), length_runs())
    out = ag.length_robustness(scores).set_index("family")
    tr = out.loc["task_relevance"]
    # coach_judge run r5 excluded. words x = 1 3 2 4, score y = 1 2 3 4 (models a a b b)
    # raw r: dx = -1.5 .5 -.5 1.5, dy = -1.5 -.5 .5 1.5 -> 4 / sqrt(5*5) = .8, r^2 = .64
    # controls (model dummy; task, world constant): fitted group means 1.5, 3.5 ->
    #   SSE = 4 * .25 = 1, SST = 5 -> R2 = .8
    # + length: within-model slope .5 fits every point -> R2 = 1 ; added = .2
    assert tr["n"] == 4
    assert tr["r"] == pytest.approx(0.8)
    assert tr["raw_r2"] == pytest.approx(0.64)
    assert tr["r2_controls"] == pytest.approx(0.8)
    assert tr["r2_full"] == pytest.approx(1.0)
    assert tr["added_r2"] == pytest.approx(0.2)
    assert np.isnan(out.loc["termination_calibration", "r"])  # constant score: r undefined


def test_trajectory_length_table_c10():
    scores = ag.run_scores(length_judgments(), length_runs())
    scores["termination_calibration"] = [1.0, 2.0, 3.0, 4.0, 2.0]
    row = ag.length_robustness(scores, ["termination_calibration"], "valid_turns").iloc[0]
    # valid turns x = 10 10 8 16 (r5 excluded), y = 1 2 3 4 ; mean x = 11, y = 2.5
    # dx = -1 -1 -3 5, dy = -1.5 -.5 .5 1.5 ; sum dx dy = 1.5 + .5 - 1.5 + 7.5 = 8
    # sum dx^2 = 1 + 1 + 9 + 25 = 36 ; sum dy^2 = 5 -> r = 8 / sqrt(180)
    assert row["r"] == pytest.approx(8 / np.sqrt(180))
    assert row["raw_r2"] == pytest.approx(64 / 180)


def test_conclusion_length_tables_c11_d12():
    runs = length_runs()
    c11 = ag.conclusion_length_by_model(runs).set_index("model")
    # a: 1, 3 words -> mean 2, median 2 ; b (r5 is coach_judge): 2, 4 -> mean 3
    assert c11.loc["a", "mean_words"] == 2 and c11.loc["b", "median_words"] == 3
    assert list(c11.index) == ["b", "a"]
    d12 = ag.length_diagnostic_by_model(ag.run_scores(length_judgments(), runs)).set_index("model")
    # a: words 1, 3 with scores 1, 2 ; b: words 2, 4 with scores 3, 4: two points each lie on
    # a line (r would be 1 by construction), so r is undefined and the note says why
    assert d12.loc["a", "mean_task_relevance"] == 1.5 and d12.loc["b", "n"] == 2
    assert np.isnan(d12.loc["a", "r"]) and np.isnan(d12.loc["b", "r"])
    assert d12.loc["a", "note"] == "correlation undefined: n = 2 pair(s), at least 3 needed"
    with pytest.raises(ValueError, match="no length column"):
        ag.length_robustness(ag.run_scores(length_judgments()), length="conclusion_words")


def test_named_labels_and_judges_dtypes_give_the_same_vote():
    # The judges answer with label names; the scores decide, the names are kept for display.
    names = families.LABEL_NAMES["termination_calibration"]  # premature .. ready-to-finalize
    rows = [verdict("c", j, names[s - 1], "termination_calibration") for j, s in
            zip("ABC", (4, 2, 4), strict=True)]
    table = pd.DataFrame(rows)
    table["turn"] = pd.array([pd.NA] * 3, dtype="Int64")  # a nullable integer turn column
    agg = ag.aggregate_votes(table).iloc[0]
    assert agg["score"] == 4.0 and agg["label"] == "ready-to-finalize"
    assert ag.display_label("termination_calibration", 2.0) == "2 borderline"
    assert ag.display_label("navigation_prior", 0.5) == "mixed"


def test_the_label_vocabulary_is_the_families():
    for name, fam in families.FAMILIES.items():
        assert families.LABEL_NAMES[name] == fam.labels
        assert families.FAMILY_TITLES[name] == fam.title
        assert [families.LABEL_SCORES[name][lab] for lab in fam.labels] == list(fam.scores)
        assert families.SCALES[name] == tuple(sorted(set(families.LABEL_SCORES[name].values())))
        assert all(families.label_of(name, s) == lab for lab, s in zip(fam.labels, fam.scores, strict=True))
    assert families.label_of("task_relevance", 2.5) is None
    # the digits a conclusion judge may answer with score as their label names
    assert families.LABEL_SCORES["task_relevance"]["3"] == 3.0
    assert "1" not in families.LABEL_SCORES["navigation_prior"]
    assert store.judgments_dir("data/runs/quick") / "judgments.parquet" == (
        store.judgments_path_for("data/runs/quick"))


def test_repeated_verdicts_are_refused(panel):
    with pytest.raises(ValueError, match="repeat an"):
        store.clean_judgments(pd.concat([panel, panel.iloc[:1]]))


def test_read_judgments_formats(panel, tmp_path):
    panel.to_parquet(tmp_path / "j.parquet")
    panel.to_csv(tmp_path / "j.csv", index=False)
    # a verdict log: the second line for (i1, A) replaces the first
    log = pd.concat([panel.iloc[[0]].assign(label="1", score=1.0), panel])
    log.to_json(tmp_path / "judgments.jsonl", orient="records", lines=True)
    for name in ("j.parquet", "j.csv", "judgments.jsonl"):
        back = store.read_judgments(tmp_path / name)
        assert len(back) == 15
        assert ag.aggregate_votes(back)["score"].tolist() == [4.0, 3.0, 2.0, 2.0, 3.0]
    with pytest.raises(FileNotFoundError, match="adakit judge"):
        store.read_judgments(tmp_path / "none.parquet")
    (tmp_path / "j.txt").write_text("x")
    with pytest.raises(ValueError, match="parquet, .csv or .jsonl"):
        store.read_judgments(tmp_path / "j.txt")


def test_synthetic_judgments_are_seeded_and_well_formed():
    runs = length_runs()
    turns = pd.DataFrame({
        "run_id": ["r1", "r1", "r2"], "model": "a", "task": ["arch", "arch", "asr_x"],
        "turn": [0, 1, 0], "tool": ["OVW", "MEM", "EXP"], "error_type": [None, None, None],
    })
    a = ag.synthetic_judgments(runs, turns, seed=5)
    b = ag.synthetic_judgments(runs, turns, seed=5)
    pd.testing.assert_frame_equal(a, b)
    assert list(a.columns) == store.JUDGMENT_COLUMNS
    # 5 runs with a conclusion x 3 families x 3 judges + 3 turn items
    assert len(a) == 5 * 3 * 3 + 3
    assert set(a.loc[a["tool"] == "MEM", "family"]) == {"reasoning_prior"}
    store.clean_judgments(a)  # on the scale, one verdict per judge and item
    assert not a.equals(ag.synthetic_judgments(runs, turns, seed=6))


def test_degenerate_statistics_are_undefined_not_perfect():
    assert np.isnan(ag.pearson([1, 2], [5, 3])) and np.isnan(ag.spearman([1, 2], [5, 3]))
    assert ag.correlation_note([1, 2], [5, 3]).startswith("correlation undefined: n = 2")
    assert ag.pearson([1, 2, 3], [1, 2, 4]) == pytest.approx(np.corrcoef([1, 2, 3],
                                                                         [1, 2, 4])[0, 1])
    # one pair: kappa would be 0 (disagreeing) or NaN (agreeing) by construction
    assert np.isnan(ag.weighted_kappa([1], [4])) and np.isnan(ag.weighted_kappa([2], [2]))
    assert ag.kappa_note([1], [4]) == ("weighted kappa undefined: n = 1 pair(s), at least 2 "
                                       "needed")
    assert ag.kappa_note([3, 3], [3, 3]).endswith("one and the same value")
    # saturated: 3 observations, intercept + 2 model dummies = 3 parameters
    y = np.array([1.0, 2.0, 4.0])
    design = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert np.isnan(ag.r_squared(y, design))
    assert "n = 3 observations for 3 independent parameters" in ag.saturation_note(y, design)
    # not saturated: 4 observations, 2 parameters; group means 1.5 and 4.5 -> SSE 1, SST 10
    two_groups = np.array([[0.0], [0.0], [1.0], [1.0]])
    assert ag.r_squared(np.array([1.0, 2.0, 4.0, 5.0]), two_groups) == pytest.approx(0.9)


def test_added_r2_of_a_saturated_fit_is_undefined():
    runs = pd.DataFrame({"run_id": ["r1", "r2", "r3"], "model": ["a", "b", "c"],
                         "condition": ["natural"] * 3, "task": ["t"] * 3, "world": ["w"] * 3,
                         "conclusion": ["x", "x y", "x y z"], "n_turns": [3] * 3,
                         "errors": [0] * 3})
    rows = [verdict(r, "A", lab, run=r) for r, lab in (("r1", "1"), ("r2", "3"), ("r3", "2"))]
    out = ag.length_robustness(ag.run_scores(pd.DataFrame(rows), runs)).set_index("family")
    row = out.loc["task_relevance"]
    # three models -> intercept + 2 dummies: the controls alone fit the 3 runs exactly
    assert np.isnan(row["r2_controls"]) and np.isnan(row["added_r2"])
    assert "saturated fit, n = 3 observations for 4 independent parameters" not in row["note"]
    assert "saturated fit, n = 3 observations for 3 independent parameters" in row["note"]
    assert row["r"] == pytest.approx(0.5)  # words 1 2 3, scores 1 3 2


def test_agreement_of_one_model_copied_into_every_seat_is_undefined(capsys):
    rows = []
    for item, lab in (("i1", "4"), ("i2", "2"), ("i3", "3")):
        rows += [verdict(item, f"m#{k}", lab) for k in (1, 2, 3)]
    c5 = ag.judge_agreement(pd.DataFrame(rows)).iloc[0]
    assert c5["n_judges"] == 1 and np.isnan(c5["pair_exact"]) and np.isnan(c5["all_same_rate"])
    assert "seats m#1, m#2, m#3 hold one copied verdict of m and count once" in c5["note"]
    assert "fewer than two independent judges" in c5["note"]
    # a copied model beside an independent judge: one pair per item, m#1 against X
    rows += [verdict("i1", "X", "4"), verdict("i2", "X", "1"), verdict("i3", "X", "3")]
    c5 = ag.judge_agreement(pd.DataFrame(rows)).iloc[0]
    assert c5["n_judges"] == 2 and c5["n_pairs"] == 3
    assert c5["pair_exact"] == pytest.approx(2 / 3)
    ag.print_notes(ag.judge_agreement(pd.DataFrame(rows)))
    assert capsys.readouterr().out.startswith("task_relevance: seats m#1, m#2, m#3")
