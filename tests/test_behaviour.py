"""The behaviour table `make bench-models` prints, on hand-built runs with known answers."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from adakit.record import corpus_from_runs
from adakit.synthetic import synthetic_run
from adakit.variance.behaviour import behaviour_table, call_repeats, entropy_bits

FILES = {"a.py": 100, "b.py": 50, "c.py": 80}


def _runs():
    # run 1: OVW a, PKR a 1-10, PKR a 1-10 (exact repeat), PKR b 5-9, CON finalize
    r1 = synthetic_run("m1-r1", model="m1", files=FILES, tools=[
        {"tool": "OVW", "file": "a.py", "thinking": 30, "duration": 10},
        {"tool": "PKR", "file": "a.py", "ranges": [(1, 10)], "thinking": 40, "duration": 20},
        {"tool": "PKR", "file": "a.py", "ranges": [(1, 10)], "thinking": 50, "duration": 30},
        {"tool": "PKR", "file": "b.py", "ranges": [(5, 9)], "thinking": 60, "duration": 40},
        {"tool": "CON", "finalize": True, "thinking": 70, "duration": 50},
    ])
    # run 2: one malformed reply, then BKM c.py twice (not identical: other lines), no finish
    r2 = synthetic_run("m1-r2", model="m1", files=FILES, reason="turn_bound", tools=[
        {"tool": "malformed", "thinking": 0, "duration": 5},
        {"tool": "BKM", "file": "c.py", "ranges": [(3, 3)], "thinking": 10, "duration": 5},
        {"tool": "BKM", "file": "c.py", "ranges": [(4, 4)], "thinking": 20, "duration": 5},
    ])
    return [r1, r2]


def test_call_repeats_marks_exact_repeats_only() -> None:
    reps = call_repeats(_runs())
    flagged = reps[reps["repeat"]]
    assert list(zip(flagged["run_id"], flagged["turn"], strict=True)) == [("m1-r1", 3)]
    assert len(reps) == 7  # the malformed turn has no call


def test_entropy_bits_by_hand() -> None:
    assert entropy_bits([1, 1]) == pytest.approx(1.0)
    assert entropy_bits([2, 1, 1]) == pytest.approx(1.5)
    assert entropy_bits([5]) == 0.0
    assert math.isnan(entropy_bits([]))


def test_behaviour_table_by_hand() -> None:
    runs = _runs()
    table = behaviour_table(corpus_from_runs(runs), call_repeats(runs))
    row = table.set_index("model").loc["m1"]
    assert row["runs"] == 2 and row["turns"] == 8
    assert row["valid_calls"] == pytest.approx(7 / 8)
    assert row["concluded"] == pytest.approx(0.5)
    # files visited: run 1 {a, b} = 2, run 2 {c} = 1 -> mean 1.5
    assert row["files_per_run"] == pytest.approx(1.5)
    # distinct lines: run 1 a 1-10 + b 5-9 = 15, run 2 c 3 and c 4 = 2 -> mean 8.5
    assert row["lines_per_run"] == pytest.approx(8.5)
    assert row["repeat_rate"] == pytest.approx(1 / 7)
    assert row["thinking_chars"] == pytest.approx((30 + 40 + 50 + 60 + 70 + 0 + 10 + 20) / 8)
    # seconds per live turn: 10, 20, 30, 40, 50, 5, 5, 5 -> median 15
    assert row["s_per_turn_p50"] == pytest.approx(15.0)
    assert 0 <= row["tag_entropy_run"] <= row["tag_entropy_bits"] + 1e-9


def test_pooled_entropy_counts_every_transition_of_the_model() -> None:
    from adakit.lenses.policy import tag_transitions

    runs = _runs()
    corpus = corpus_from_runs(runs)
    tags = tag_transitions(corpus.turns)["tag"].value_counts()
    table = behaviour_table(corpus, call_repeats(runs))
    assert table.loc[0, "tag_entropy_bits"] == pytest.approx(entropy_bits(tags))


def test_a_conclusion_from_the_closing_turn_is_counted_apart() -> None:
    """A run that ends at its turn bound with a conclusion (the closing turn's) is not a run
    that concluded of its own accord; the table gives it its own share."""
    from adakit.apparatus.agent import CLOSE_TEXT
    from adakit.record import Injection

    r1, r2 = _runs()
    r2.end = r2.end.model_copy(update={"conclusion": "what the closing turn wrote"})
    # a conclusion at the end of a run without a closing turn is not the closing turn's
    stashed = behaviour_table(corpus_from_runs([r1, r2]), call_repeats([r1, r2]))
    assert stashed.loc[0, "concluded_closing"] == 0.0
    r2.header.scaffold["close_turn"] = CLOSE_TEXT
    r2.turns[-2].injected = [Injection(source="system", text=CLOSE_TEXT)]
    corpus = corpus_from_runs([r1, r2])
    assert corpus.runs.set_index("run_id")["closed"].to_dict() == {"m1-r1": False, "m1-r2": True}
    table = behaviour_table(corpus, call_repeats([r1, r2]))
    row = table.set_index("model").loc["m1"]
    assert row["concluded"] == pytest.approx(0.5)
    assert row["concluded_closing"] == pytest.approx(0.5)
    plain = behaviour_table(corpus_from_runs(_runs()), call_repeats(_runs()))
    assert plain.loc[0, "concluded_closing"] == 0.0


def test_seconds_per_turn_include_cache_replayed_turns_by_their_recorded_latency() -> None:
    """A replayed turn carries the latency of the call that produced it; the table counts it."""
    r1, r2 = _runs()
    r1.turns = [t.model_copy(update={"cached": True}) for t in r1.turns]
    table = behaviour_table(corpus_from_runs([r1, r2]), call_repeats([r1, r2]))
    assert table.loc[0, "s_per_turn_p50"] == pytest.approx(15.0)


def test_run_behaviour_by_hand() -> None:
    from adakit.variance.behaviour import run_behaviour

    runs = _runs()
    per_run = run_behaviour(corpus_from_runs(runs), call_repeats(runs)).set_index("run_id")
    r1, r2 = per_run.loc["m1-r1"], per_run.loc["m1-r2"]
    assert (r1["own"], r1["stuck"], r1["calls"], r1["repeats"], r1["peeks"]) == (1, 0, 5, 1, 3)
    assert (r2["own"], r2["calls"], r2["repeats"], r2["peeks"]) == (0, 2, 0, 0)
    assert r1["files"] == 2 and r2["files"] == 1
    assert r1["architecture"] == 1  # synthetic runs default to architecture analysis
    assert r1["thinking_chars"] == 30 + 40 + 50 + 60 + 70 and r2["turns"] == 3


def test_behaviour_intervals_pool_ratios_over_runs_and_mark_single_runs() -> None:
    from adakit.variance.behaviour import behaviour_intervals, run_behaviour

    def stuck(i: int):
        return synthetic_run(f"s-{i}", model="m2", files=FILES, reason="malformed_limit", tools=[
            {"tool": "PKR", "file": "a.py", "ranges": [(1, 10)]},
            {"tool": "PKR", "file": "a.py", "ranges": [(1, 10)]}])

    runs = _runs()
    per_run = run_behaviour(corpus_from_runs(runs), call_repeats(runs)).assign(variant="A")
    extra = [stuck(0)]
    single = run_behaviour(corpus_from_runs(extra), call_repeats(extra)).assign(variant="B")
    table = behaviour_intervals(pd.concat([per_run, single], ignore_index=True), n_resamples=200)
    a, b = table.set_index("variant").loc["A"], table.set_index("variant").loc["B"]
    assert a["n_runs"] == 2 and a["own_conclusions"] == pytest.approx(0.5)
    assert a["repeat_rate"] == pytest.approx(1 / 7)  # pooled: 1 repeat in 7 calls
    assert a["peek_share"] == pytest.approx(3 / 7)
    assert a["files_per_architecture_run"] == pytest.approx(1.5)
    assert a["own_conclusions_lo"] <= 0.5 <= a["own_conclusions_hi"]
    assert b["stuck_endings"] == 1 and b["repeat_rate"] == pytest.approx(0.5)
    assert math.isnan(b["repeat_rate_lo"]) and b["note"] == "too few runs"


def test_a_thought_copied_from_the_previous_turn_is_counted() -> None:
    from adakit.variance.behaviour import behaviour_intervals, run_behaviour, thought_copies

    run = synthetic_run("c-1", model="m1", files=FILES, reason="turn_bound", tools=[
        {"tool": "PKR", "file": "a.py", "ranges": [(1, 10)]},
        {"tool": "PKR", "file": "a.py", "ranges": [(11, 20)]},
        {"tool": "PKR", "file": "a.py", "ranges": [(21, 30)]},
        {"tool": "OVW", "file": "a.py"}])
    thoughts = ["Reading a.py first.", "Reading a.py first.", " Reading a.py first. ", "Now the outline."]
    run.turns = [t.model_copy(update={"thinking": th}) for t, th in zip(run.turns, thoughts, strict=True)]
    copies = thought_copies([run])
    assert copies["copied"].tolist() == [True, True, False]
    per_run = run_behaviour(corpus_from_runs([run]), call_repeats([run]), copies)
    assert per_run.loc[0, ["thought_pairs", "copied"]].tolist() == [3, 2]
    table = behaviour_intervals(per_run.assign(variant="A"), n_resamples=50)
    assert table.loc[0, "copied_thoughts"] == pytest.approx(2 / 3)
    # without the copies the counts are zero, not an error
    assert run_behaviour(corpus_from_runs([run]), call_repeats([run]))["copied"].tolist() == [0]
