"""Sequence similarity between runs (adakit.variance.sequences): alignment scores computed by hand."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from adakit.variance import sequences as sq


def test_lcs_by_hand():
    # the textbook pair: one longest common subsequence is B C B A (length 4)
    assert sq.alignment_score("ABCBDAB", "BDCABA") == 4.0
    assert sq.similarity("ABCBDAB", "BDCABA") == pytest.approx(4 / 7)
    assert sq.similarity("ABCBDAB", "BDCABA", norm="min") == pytest.approx(4 / 6)
    assert sq.alignment_score("AB", "BA") == 1.0
    assert sq.similarity("PKR PKR OVW".split(), "PKR PKR OVW".split()) == 1.0
    assert sq.alignment_score("", "ABC") == 0.0
    assert np.isnan(sq.similarity("", ""))


def test_needleman_wunsch_scoring_by_hand():
    # match +1, mismatch -1, gap -1: GCATGCG vs GATTACA scores 0 (e.g. GCATG-CG / G-ATTACA)
    assert sq.alignment_score("GCATGCG", "GATTACA", 1, -1, -1) == 0.0
    # one gap: ABC vs AC with gap -2 -> 1 + 1 - 2 = 0; with a mismatch allowed instead it
    # cannot do better, the lengths differ
    assert sq.alignment_score("ABC", "AC", 1, -1, -2) == 0.0
    # empty vs three tokens: three gaps
    assert sq.alignment_score("", "ABC", 1, 0, -1) == -3.0
    assert sq.similarity("", "ABC", 1, 0, -1) == -1.0
    with pytest.raises(ValueError, match="match must be > 0"):
        sq.alignment_score("A", "A", 0, 0, 0)


@pytest.mark.parametrize("scoring", [(1, 0, 0), (2, -1, -1), (1, -0.5, -0.25), (3, 1, -2)])
def test_batched_scores_equal_the_plain_programme(scoring):
    rng = random.Random(5)
    seqs = [np.array([rng.randrange(4) for _ in range(rng.randrange(0, 14))]) for _ in range(25)]
    pairs = np.array([(i, j) for i in range(25) for j in range(25)])
    batch = sq.pairwise_scores(seqs, pairs, *scoring)
    plain = [sq.alignment_score(list(seqs[i]), list(seqs[j]), *scoring) for i, j in pairs]
    np.testing.assert_allclose(batch, plain)


def _corpus() -> tuple[pd.DataFrame, pd.DataFrame]:
    runs = {
        "a1": [("OVW", "x.py"), ("PKR", "x.py"), ("PKR", "x.py")],
        "a2": [("OVW", "x.py"), ("PKR", "x.py"), ("PKR", "x.py")],
        "a3": [("OVW", "y.py"), ("PKR", "y.py"), ("PKR", "y.py")],
        "b1": [("EXP", "x.py"), ("MEM", None), ("PKR", "x.py")],
        "b2": [("EXP", "x.py"), ("MEM", None), ("PKR", "x.py")],
    }
    turns = pd.DataFrame([
        {"run_id": r, "turn": k, "tool": t, "file": f, "error_type": None}
        for r, calls in runs.items() for k, (t, f) in enumerate(calls, 1)
    ])
    meta = pd.DataFrame({"run_id": list(runs), "model": ["A", "A", "A", "B", "B"],
                         "world": "flask", "task": "feature_tracing", "condition": "natural"})
    return turns, meta


def test_run_sequences_tokens():
    turns, _ = _corpus()
    seqs, names = sq.run_sequences(turns, "tool")
    assert [names[c] for c in seqs["b1"]] == ["EXP", "MEM", "PKR"]
    seqs, names = sq.run_sequences(turns, "tool_file")
    assert [names[c] for c in seqs["a3"]] == ["OVW y.py", "PKR y.py", "PKR y.py"]
    assert names[seqs["b1"][1]] == "MEM "


def test_within_and_across_pairs_and_their_similarity():
    turns, runs = _corpus()
    pairs = sq.pair_table(runs)
    assert (pairs["pair"] == "within").sum() == 3 + 1  # C(3, 2) for A, C(2, 2) for B
    assert (pairs["pair"] == "across").sum() == 3 * 2
    sim = sq.sequence_similarity(turns, runs)
    tool = sim[sim["kind"] == "tool"]
    # every A run is OVW PKR PKR: within A all 1; A vs B (EXP MEM PKR): LCS 1 of 3
    assert tool.loc[tool["pair"] == "within", "similarity"].tolist() == [1.0] * 4
    assert tool.loc[tool["pair"] == "across", "similarity"].tolist() == pytest.approx([1 / 3] * 6)
    tf = sim[(sim["kind"] == "tool_file") & (sim["run_a"] == "a1") & (sim["run_b"] == "a3")]
    assert tf["similarity"].tolist() == [0.0]  # same tools, other file
    summary = sq.similarity_summary(sim).set_index(["kind", "model"])
    assert summary.loc[("tool", "A"), "within"] == 1.0
    assert summary.loc[("tool", "A"), "n_across"] == 6  # an across pair counts for A and B
    assert summary.loc[("tool", "B"), "n_across"] == 6
    assert summary.loc[("tool", "B"), "within_minus_across"] == pytest.approx(2 / 3)
    fig = sq.plot_similarity(sim)
    assert len(fig.axes) == 2


def test_only_strata_with_repeats_give_pairs_by_default():
    _, runs = _corpus()
    single = pd.DataFrame({"run_id": ["c1", "d1"], "model": ["A", "B"], "world": "flask",
                           "task": "risk_review", "condition": "natural"})
    both = pd.concat([runs, single], ignore_index=True)
    assert len(sq.pair_table(both)) == len(sq.pair_table(runs))  # risk review: no repeats
    every = sq.pair_table(both, repeated_only=False)
    assert len(every) == len(sq.pair_table(runs)) + 1  # c1 vs d1 across


def test_no_tool_turns_give_no_sequences():
    empty = pd.DataFrame({"run_id": pd.Series(dtype=str), "turn": pd.Series(dtype=int),
                          "tool": pd.Series(dtype=str), "file": pd.Series(dtype=str),
                          "error_type": pd.Series(dtype=str)})
    assert sq.run_sequences(empty, "tool") == ({}, [])
    assert sq.run_sequences(empty, "tool_file") == ({}, [])
