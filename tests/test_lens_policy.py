"""Lens 2 (action policy): every Table 5 rule, every precedence case, shares, deviations,
regimes and n-grams against hand-computed expectations."""

from __future__ import annotations

import matplotlib.figure
import numpy as np
import pandas as pd
import pytest

from adakit.lenses import policy as p

COLS = ["run_id", "turn", "tool", "file", "start_line", "end_line", "finalize", "error_type"]


def turns_of(*steps, run="r1", start=1):
    """Turns from (tool, file, start, end[, finalize[, error_type]]) tuples."""
    rows = []
    for i, s in enumerate(steps):
        tool, file, a, b, fin, err = tuple(s) + (None,) * (6 - len(s))
        rows.append((run, start + i, tool, file, a, b, fin, err))
    return pd.DataFrame(rows, columns=COLS)


def one(frm, to, rules=p.RULE_TABLE, **kw):
    """Tag of the single transition frm -> to, and the rule that fired."""
    tags = p.tag_transitions(turns_of(frm, to), rules=rules, **kw)
    assert len(tags) == 1
    return tags.loc[0, "tag"], tags.loc[0, "rule"]


# --------------------------------------------------------------------------- every rule


@pytest.mark.parametrize(
    "frm,to,tag,rule",
    [
        # close read: PKR -> PKR$ (next range starts inside, or right after, the previous)
        (("PKR", "a.py", 10, 20), ("PKR", "a.py", 21, 30), "close read", "PKR → PKR$"),
        (("PKR", "a.py", 10, 20), ("PKR", "a.py", 15, 60), "close read", "PKR → PKR$"),
        (("PKR", "a.py", 10, 20), ("PKR", "a.py", 10, 12), "close read", "PKR → PKR$"),
        # close read: EXP -> PKR$
        (("EXP", "a.py", 40, 55), ("PKR", "a.py", 56, 90), "close read", "EXP → PKR$"),
        # skim: OVW -> OVW (exact; same or other file)
        (("OVW", "a.py", None, None), ("OVW", "a.py", None, None), "skim", "OVW → OVW"),
        (("OVW", "a.py", None, None), ("OVW", "b.py", None, None), "skim", "OVW → OVW"),
        # skim: NAV -> PKR*
        (("PKR", "a.py", 1, 9), ("PKR", "b.py", 1, 9), "skim", "NAV → PKR*"),
        (("EXP", "a.py", 1, 9), ("PKR", "b.py", 10, 20), "skim", "NAV → PKR*"),
        # skim: ANY -> PKR* (a tool outside the seven on the from side)
        (("GREP", "a.py", None, None), ("PKR", "b.py", 1, 5), "skim", "ANY → PKR*"),
        # traverse: NAV -> PKR (same file, not continuous: a gap, or backwards)
        (("PKR", "a.py", 1, 10), ("PKR", "a.py", 12, 30), "traverse", "NAV → PKR"),
        (("PKR", "a.py", 50, 60), ("PKR", "a.py", 1, 55), "traverse", "NAV → PKR"),
        (("EXP", "a.py", None, None), ("PKR", "a.py", 3, 9), "traverse", "NAV → PKR"),
        # traverse: ANY -> PKR
        (("GREP", None, None, None), ("PKR", "b.py", 1, 5), "traverse", "ANY → PKR"),
        # trace: ANY -> EXP
        (("PKR", "a.py", 1, 9), ("EXP", "b.py", 3, 7), "trace", "ANY → EXP"),
        (("EXP", "a.py", 1, 9), ("EXP", "a.py", 3, 7), "trace", "ANY → EXP"),
        # trace: ANY -> OVW*
        (("PKR", "a.py", 1, 9), ("OVW", "b.py", None, None), "trace", "ANY → OVW*"),
        (("EXP", "a.py", 1, 9), ("OVW", "b.py", None, None), "trace", "ANY → OVW*"),
        # zoom in: OVW -> PKR, OVW -> EXP
        (("OVW", "a.py", None, None), ("PKR", "a.py", 1, 9), "zoom in", "OVW → PKR"),
        (("OVW", "a.py", None, None), ("EXP", "a.py", 1, 9), "zoom in", "OVW → EXP"),
        # zoom out: ANY -> OVW (same target; a folder holding the file is the same place)
        (("PKR", "a.py", 1, 9), ("OVW", "a.py", None, None), "zoom out", "ANY → OVW"),
        (("PKR", "src/x.py", 1, 9), ("OVW", "src", None, None), "zoom out", "ANY → OVW"),
        (("EXP", None, None, None), ("OVW", "a.py", None, None), "zoom out", "ANY → OVW"),
        # resume: COG -> NAV
        (("MEM", None, None, None), ("PKR", "a.py", 1, 9), "resume", "COG → NAV"),
        (("BKM", "a.py", 4, 4), ("OVW", "b.py", None, None), "resume", "COG → NAV"),
        (("HNT", "a.py", 1, 5), ("EXP", "c.py", 1, 5), "resume", "COG → NAV"),
        (("CON", None, None, None, False), ("PKR", "a.py", 1, 9), "resume", "COG → NAV"),
        # close out / interim synth: NAV -> CON terminal / non-terminal
        (("PKR", "a.py", 1, 9), ("CON", None, None, None, True), "close out",
         "NAV → CON (terminal)"),
        (("OVW", "a.py", None, None), ("CON", None, None, None, False), "interim synth",
         "NAV → CON (non-terminal)"),
        # finalize flag missing: terminal only on the run's last tool turn (here it is last)
        (("EXP", "a.py", 1, 9), ("CON", None, None, None, None), "close out",
         "NAV → CON (terminal)"),
        # dump: NAV -> COG, ANY -> COG
        (("PKR", "a.py", 1, 9), ("MEM", None, None, None), "dump", "NAV → COG"),
        (("OVW", "a.py", None, None), ("BKM", "a.py", 3, 3), "dump", "NAV → COG"),
        (("EXP", "a.py", 1, 9), ("HNT", "a.py", 1, 9), "dump", "NAV → COG"),
        (("GREP", None, None, None), ("MEM", None, None, None), "dump", "ANY → COG"),
        # cognitive streak: COG -> COG (a finalizing CON after MEM included)
        (("MEM", None, None, None), ("BKM", "a.py", 1, 1), "cognitive streak", "COG → COG"),
        (("MEM", None, None, None), ("CON", None, None, None, True), "cognitive streak",
         "COG → COG"),
        (("HNT", "a.py", 1, 2), ("MEM", None, None, None), "cognitive streak", "COG → COG"),
        # other: ANY -> ANY
        (("PKR", "a.py", 1, 9), ("GREP", None, None, None), "other", "ANY → ANY"),
        (("GREP", None, None, None), ("GREP", None, None, None), "other", "ANY → ANY"),
    ],
)
def test_every_rule(frm, to, tag, rule):
    assert one(frm, to) == (tag, rule)


def test_other_read_is_the_navigation_residual():
    # With Ada's tools every move into NAV has a more specific rule; other read catches what
    # a table without those rules leaves.
    table = [r for r in p.RULE_TABLE if r[0] not in ("trace", "zoom in", "zoom out")]
    assert one(("PKR", "a.py", 1, 9), ("EXP", "a.py", 1, 9), rules=table) == (
        "other read", "ANY → NAV")
    assert one(("PKR", "a.py", 1, 9), ("EXP", "a.py", 1, 9)) == ("trace", "ANY → EXP")


def test_interim_synth_when_missing_flag_is_not_last():
    t = turns_of(("PKR", "a.py", 1, 9), ("CON", None, None, None, None), ("PKR", "a.py", 10, 20))
    tags = p.tag_transitions(t)
    assert list(tags["tag"]) == ["interim synth", "resume"]


# --------------------------------------------------------------------------- precedence


def test_resolution_order_of_the_default_table():
    ranked = p.rules_frame()
    assert list(ranked["kind"].iloc[:5]) == ["exact"] * 5
    assert set(ranked["kind"].iloc[5:12]) == {"class wildcard"}
    assert set(ranked["kind"].iloc[12:]) == {"ANY wildcard"}
    assert ranked["rule"].iloc[-1] == "ANY → ANY"
    # inside the ANY tier: '*' rules first, then plain rules by list order
    any_tier = list(ranked["rule"].iloc[12:])
    assert any_tier[:2] == ["ANY → PKR*", "ANY → OVW*"]
    assert any_tier[2:] == ["ANY → PKR", "ANY → EXP", "ANY → OVW", "ANY → NAV", "ANY → COG",
                            "ANY → ANY"]


def test_exact_beats_wildcard():
    # OVW -> PKR across files matches NAV -> PKR* too; the exact zoom-in rule wins
    assert one(("OVW", "a.py", None, None), ("PKR", "b.py", 1, 9))[0] == "zoom in"
    # OVW -> OVW across files matches ANY -> OVW* (trace); the exact skim rule wins
    assert one(("OVW", "a.py", None, None), ("OVW", "b.py", None, None))[0] == "skim"
    # OVW -> EXP matches ANY -> EXP (trace); exact zoom in wins
    assert one(("OVW", "a.py", None, None), ("EXP", "b.py", 1, 9))[0] == "zoom in"
    # exact plain beats a class '$' rule listed first
    table = [("class-dollar", "NAV", "PKR", "$"), ("exact", "PKR", "PKR", None)]
    assert one(("PKR", "a.py", 1, 9), ("PKR", "a.py", 10, 19), rules=table)[0] == "exact"


def test_class_beats_any():
    # MEM -> PKR on another file matches ANY -> PKR* as well; COG -> NAV (resume) wins
    t = turns_of(("PKR", "a.py", 1, 9), ("MEM", None, None, None), ("PKR", "b.py", 1, 9))
    assert list(p.tag_transitions(t)["tag"]) == ["dump", "resume"]
    # the class rule NAV -> PKR fires, not its ANY twin
    assert one(("PKR", "a.py", 1, 9), ("PKR", "a.py", 30, 40))[1] == "NAV → PKR"
    # a plain class rule beats an ANY '*' rule listed before it
    table = [("any-star", "ANY", "PKR", "*"), ("nav", "NAV", "PKR", None)]
    assert one(("PKR", "a.py", 1, 9), ("PKR", "b.py", 1, 9), rules=table)[0] == "nav"


def test_dollar_beats_star_beats_plain():
    table = [("plain", "NAV", "PKR", None), ("star", "NAV", "PKR", "*"),
             ("dollar", "NAV", "PKR", "$")]
    assert [r.tag for r in p.ordered_rules(table)] == ["dollar", "star", "plain"]
    assert one(("PKR", "a.py", 1, 9), ("PKR", "a.py", 10, 20), rules=table)[0] == "dollar"
    assert one(("PKR", "a.py", 1, 9), ("PKR", "b.py", 10, 20), rules=table)[0] == "star"
    assert one(("PKR", "a.py", 1, 9), ("PKR", "a.py", 40, 50), rules=table)[0] == "plain"


def test_star_beats_plain_in_the_default_table():
    assert one(("PKR", "a.py", 1, 9), ("PKR", "b.py", 1, 9))[0] == "skim"  # not traverse
    assert one(("PKR", "a.py", 1, 9), ("OVW", "b.py", None, None))[0] == "trace"  # not zoom out
    assert one(("PKR", "a.py", 1, 9), ("OVW", "a.py", None, None))[0] == "zoom out"


def test_remaining_ties_by_list_order():
    table = [("second", "ANY", "PKR", None), ("first", "ANY", "PKR", None)]
    assert one(("PKR", "a.py", 1, 9), ("PKR", "b.py", 1, 9), rules=table)[0] == "second"
    # NAV -> CON (close out / interim synth) precedes NAV -> COG (dump) by list order
    assert one(("PKR", "a.py", 1, 9), ("CON", None, None, None, True))[0] == "close out"


def test_no_matching_rule_gives_none():
    table = [("close read", "PKR", "PKR", "$")]
    tag, rule = one(("PKR", "a.py", 1, 9), ("MEM", None, None, None), rules=table)
    assert pd.isna(tag) and pd.isna(rule)


def test_bad_rules_are_refused():
    with pytest.raises(ValueError, match="not a tool"):
        p.make_rules([("x", "NAVIGATE", "PKR", None)])
    with pytest.raises(ValueError, match="condition"):
        p.make_rules([("x", "NAV", "PKR", "#")])
    with pytest.raises(ValueError, match="needs"):
        p.make_rules([("x", "NAV", "PKR")])


# --------------------------------------------------------------------------- errors, runs


def test_turns_without_a_call_are_bridged():
    t = turns_of(
        ("PKR", "a.py", 1, 10),
        (None, None, None, None, None, "malformed"),
        ("foo", None, None, None, None, "unknown_tool"),
        ("PKR", "a.py", 11, 20),
    )
    tags = p.tag_transitions(t)
    assert tags[["turn_from", "turn_to", "tag"]].values.tolist() == [[1, 4, "close read"]]


def test_tool_errors_are_tagged_but_show_nothing():
    failed_near = turns_of(("PKR", "a.py", 1, 10), ("PKR", "a.py", 11, 20, None, "tool_error"))
    assert list(p.tag_transitions(failed_near)["tag"]) == ["traverse"]  # no '$' on a failure
    # a failed read of b.py does not move the target: a.py -> (b.py failed) is not a skim,
    # and the next successful read of b.py is the move across files
    t = turns_of(("PKR", "a.py", 1, 10), ("PKR", "b.py", 1, 10, None, "tool_error"),
                 ("PKR", "b.py", 1, 10))
    assert list(p.tag_transitions(t)["tag"]) == ["traverse", "skim"]
    dropped = p.tag_transitions(t, drop_errors=True)
    assert dropped[["turn_from", "turn_to", "tag"]].values.tolist() == [[1, 3, "skim"]]


def test_runs_are_separate_and_input_order_does_not_matter():
    a = turns_of(("OVW", "a.py", None, None), ("PKR", "a.py", 1, 9), run="r1")
    b = turns_of(("PKR", "b.py", 1, 9), ("PKR", "b.py", 10, 20), run="r2")
    t = pd.concat([b, a]).sample(frac=1.0, random_state=3)
    tags = p.tag_transitions(t)
    assert tags[["run_id", "tag"]].values.tolist() == [["r1", "zoom in"], ["r2", "close read"]]


def test_target_carries_over_turns_without_a_file():
    # EXP over references names no file: the target stays a.py, so a.py is not a move
    t = turns_of(("PKR", "a.py", 1, 9), ("EXP", None, None, None), ("OVW", "a.py", None, None),
                 ("EXP", None, None, None), ("PKR", "b.py", 1, 9))
    assert list(p.tag_transitions(t)["tag"]) == ["trace", "zoom out", "zoom in", "skim"]


def test_empty_and_invalid_input():
    empty = p.tag_transitions(turns_of())
    assert list(empty.columns) == p.TAG_COLUMNS and empty.empty
    assert p.tag_transitions(turns_of(("PKR", "a.py", 1, 2))).empty
    with pytest.raises(ValueError, match="tool"):
        p.tag_transitions(pd.DataFrame({"run_id": ["r"], "turn": [1]}))


# --------------------------------------------------------------------------- views


@pytest.fixture
def small():
    r1 = turns_of(("OVW", "a.py", None, None), ("PKR", "a.py", 1, 9), ("PKR", "a.py", 10, 19),
                  ("CON", None, None, None, True), run="r1")  # zoom in, close read, close out
    r2 = turns_of(("PKR", "a.py", 1, 9), ("PKR", "b.py", 1, 9), run="r2")  # skim
    r3 = turns_of(("PKR", "a.py", 1, 9), ("PKR", "a.py", 10, 19), run="r3")  # close read
    turns = pd.concat([r1, r2, r3], ignore_index=True)
    runs = pd.DataFrame({"run_id": ["r1", "r2", "r3"], "model": ["m1", "m1", "m2"],
                         "condition": ["natural", "natural", "natural"]})
    return turns, runs


def test_tag_shares_by_hand(small):
    turns, runs = small
    shares = p.tag_shares(p.tag_transitions(turns), runs, by=("model", "condition"))
    m1 = shares[shares["model"] == "m1"].set_index("tag")
    assert m1["count"].to_dict() == {"close read": 1, "zoom in": 1, "skim": 1, "close out": 1}
    assert m1["share"].to_dict() == pytest.approx(
        {"close read": 25.0, "zoom in": 25.0, "skim": 25.0, "close out": 25.0})
    assert set(m1["transitions"]) == {4} and set(m1["runs"]) == {2}
    m2 = shares[shares["model"] == "m2"].set_index("tag")["share"]
    assert m2["close read"] == 100.0 and m2["skim"] == 0.0  # zeros included
    assert list(shares.columns) == ["model", "condition", "tag", "count", "share",
                                    "transitions", "runs"]


def test_tag_shares_run_weighted_and_pooled(small):
    turns, runs = small
    tags = p.tag_transitions(turns)
    by_run = p.tag_shares(tags, runs, by="model", weight="run")
    m1 = by_run[by_run["model"] == "m1"].set_index("tag")["share"]
    # r1: 1/3 each of zoom in, close read, close out; r2: 100% skim -> mean over the two runs
    assert m1["skim"] == pytest.approx(50.0)
    assert m1["close read"] == pytest.approx(100 / 6)
    pooled = p.tag_shares(tags, by=None).set_index("tag")["share"]
    assert pooled["close read"] == pytest.approx(40.0) and pooled.sum() == pytest.approx(100.0)
    with pytest.raises(ValueError, match="runs table"):
        p.tag_shares(tags, by="model")
    with pytest.raises(ValueError, match="weight"):
        p.tag_shares(tags, runs, weight="turn")


def test_tag_deviation_by_hand():
    shares = pd.DataFrame({
        "model": ["m1", "m1", "m2", "m2", "m3", "m3"],
        "tag": ["close read", "skim"] * 3,
        "share": [50.0, 50.0, 100.0, 0.0, 30.0, 70.0],
    })
    dev = p.tag_deviation(shares)
    # averages: close read (50 + 100 + 30) / 3 = 60, skim 40
    assert dev.loc["m1", "close read"] == pytest.approx(-10.0)
    assert dev.loc["m2", "close read"] == pytest.approx(40.0)
    assert dev.loc["m3", "skim"] == pytest.approx(30.0)
    assert np.allclose(dev.sum(axis=1), 0.0) and np.allclose(dev.sum(axis=0), 0.0)
    with pytest.raises(ValueError, match="grouping"):
        p.tag_deviation(shares.drop(columns="model"))
    # rows follow the paper's model order, not the alphabet
    named = shares.replace({"m1": "Qwen3.5-397B", "m2": "GPT-4o", "m3": "DeepSeek-V3.2"})
    assert list(p.tag_deviation(named).index) == ["GPT-4o", "DeepSeek-V3.2", "Qwen3.5-397B"]


def test_split_regimes():
    t = turns_of(*[("PKR", "a.py", i * 10, i * 10 + 9) for i in range(6)])  # turns 1..6
    split = p.split_regimes(t, 4)
    assert list(split["regime"]) == ["natural lifetime"] * 3 + ["extended lifetime"] * 3
    tags = p.split_regimes(p.tag_transitions(t), {"r1": 3}, labels=("early", "late"))
    # transitions land on turns 2..6; turn_to < 3 only for the first
    assert list(tags["regime"]) == ["early", "late", "late", "late", "late"]
    none = p.split_regimes(t, {"other": 2})
    assert set(none["regime"]) == {"natural lifetime"}
    with pytest.raises(ValueError, match="distinct"):
        p.split_regimes(t, 2, labels=("x", "x"))
    with pytest.raises(TypeError):
        p.split_regimes(t, "4")


def test_tool_ngrams_by_hand():
    r1 = turns_of(("OVW", "a", None, None), ("PKR", "a", 1, 2), ("PKR", "a", 3, 4),
                  ("MEM", None, None, None), ("PKR", "a", 5, 6),
                  ("CON", None, None, None, True), run="r1")
    r2 = turns_of(("OVW", "a", None, None), (None, None, None, None, None, "malformed"),
                  ("PKR", "a", 1, 2), ("PKR", "a", 3, 4), run="r2")
    turns = pd.concat([r1, r2], ignore_index=True)
    bi = p.tool_ngrams(turns, 2).set_index("ngram")
    assert bi.loc["OVW → PKR", "count"] == 2 and bi.loc["OVW → PKR", "runs"] == 2
    assert bi.loc["PKR → PKR", "count"] == 2
    assert bi.loc["PKR → CON", "count"] == 1
    assert bi["count"].sum() == 5 + 2 and bi["share"].sum() == pytest.approx(100.0)
    assert bi.loc["OVW → PKR", "share"] == pytest.approx(200 / 7)
    tri = p.tool_ngrams(turns, 3).set_index("ngram")
    assert tri.loc["OVW → PKR → PKR", "count"] == 2 and tri["count"].sum() == 4 + 1
    four = p.tool_ngrams(turns, 4)
    assert list(four["ngram"]) == ["OVW → PKR → PKR → MEM", "PKR → MEM → PKR → CON",
                                   "PKR → PKR → MEM → PKR"]
    runs = pd.DataFrame({"run_id": ["r1", "r2"], "model": ["m1", "m2"]})
    grouped = p.tool_ngrams(turns, 4, by="model", runs=runs)
    assert grouped.groupby("model")["count"].sum().to_dict() == {"m1": 3}
    assert p.tool_ngrams(turns, 7).empty
    with pytest.raises(ValueError, match="positive"):
        p.tool_ngrams(turns, 0)


# --------------------------------------------------------------------------- plots


@pytest.fixture
def no_saving(monkeypatch, tmp_path):
    def refuse(*a, **k):
        raise AssertionError("a plot function tried to save")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", refuse)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    assert list(tmp_path.iterdir()) == []


def _bar_widths(ax) -> dict[str, list[float]]:
    """Each stacked layer's segment widths (one BarContainer per tag), by its label."""
    return {c.get_label(): [r.get_width() for r in c.patches] for c in ax.containers}


def test_plot_tag_shares_fig7_stacks_to_100(small, no_saving):
    import matplotlib.pyplot as plt

    turns, runs = small
    tags = p.tag_transitions(turns)
    shares = p.tag_shares(tags, runs, by=("model", "condition"))
    fig = p.plot_tag_shares(shares, title="Fig. 7")
    ax = fig.axes[0]
    assert ax.get_title() == "Fig. 7"
    # one layer per tag present, in the plot order, each with one segment per group (m1, m2)
    widths = _bar_widths(ax)
    assert list(widths) == ["close read", "zoom in", "skim", "close out"]  # TAG_PLOT_ORDER
    assert len(ax.patches) == 4 * 2
    assert widths == {"close read": [25.0, 100.0], "zoom in": [25.0, 0.0],
                      "skim": [25.0, 0.0], "close out": [25.0, 0.0]}
    bars = np.array(list(widths.values()))
    assert bars.sum(axis=0) == pytest.approx([100.0, 100.0])  # every stacked bar is 100%
    # segments are stacked left to right without gaps or overlaps
    for i in range(2):
        lefts = [c.patches[i].get_x() for c in ax.containers]
        assert lefts == pytest.approx(np.concatenate([[0.0], np.cumsum(bars[:-1, i])]))
    # bars inside a block are labelled by the condition; the blocks by the model
    assert [t.get_text() for t in ax.get_yticklabels()] == ["Natural", "Natural"]
    assert {"m1", "m2"} <= {t.get_text() for t in ax.texts}
    assert ax.get_xlim() == (0.0, 100.0)

    pooled = p.plot_tag_shares(p.tag_shares(tags, by=None)).axes[0]
    widths = _bar_widths(pooled)
    # 5 transitions: close read 2, skim, zoom in, close out 1 each
    assert widths == {"close read": [40.0], "zoom in": [20.0], "skim": [20.0],
                      "close out": [20.0]}
    with pytest.raises(ValueError):
        p.plot_tag_shares(shares.iloc[0:0])
    plt.close("all")


def test_plot_tag_deviation_d7_is_centred_and_matches(small, no_saving):
    import matplotlib.pyplot as plt

    turns, runs = small
    dev = p.tag_deviation(p.tag_shares(p.tag_transitions(turns), runs, by="model"))
    # m1 25% of each of the four tags, m2 100% close read; averages 62.5 and 12.5
    assert list(dev.columns) == ["close read", "zoom in", "skim", "close out"]
    assert dev.loc["m1"].tolist() == pytest.approx([-37.5, 12.5, 12.5, 12.5])
    fig = p.plot_tag_deviation(dev, title="D7")
    ax = fig.axes[0]
    image = ax.images[0]
    assert np.asarray(image.get_array()) == pytest.approx(dev.to_numpy())
    norm = image.norm
    assert norm.vmin == pytest.approx(-norm.vmax) and norm.vmax == pytest.approx(37.5)
    assert norm.vcenter == 0.0 and image.get_cmap().name == "RdBu_r"
    assert [t.get_text() for t in ax.get_xticklabels()] == list(dev.columns)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["m1", "m2"]
    cells = [t.get_text() for t in ax.texts]
    assert cells == ["-37.5", "+12.5", "+12.5", "+12.5", "+37.5", "-12.5", "-12.5", "-12.5"]
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "Deviation from average (pp)"
    # a lopsided table still gets a symmetric scale: the largest magnitude sets both ends
    skewed = dev.copy()
    skewed.iloc[0, 0] = -80.0
    norm = p.plot_tag_deviation(skewed).axes[0].images[0].norm
    assert (norm.vmin, norm.vmax) == (-80.0, 80.0)
    with pytest.raises(ValueError, match="no deviations"):
        p.plot_tag_deviation(dev.iloc[0:0])
    plt.close("all")


def test_plot_top_ngrams_bars_by_hand(small, no_saving):
    import matplotlib.pyplot as plt

    turns, _ = small
    fig2, ax = plt.subplots()
    assert p.plot_top_ngrams(p.tool_ngrams(turns, 2), ax=ax) is fig2
    # bigrams: PKR → PKR three times, OVW → PKR and PKR → CON once each (5 in all)
    assert [r.get_width() for r in ax.patches] == pytest.approx([60.0, 20.0, 20.0])
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "PKR → PKR" and set(labels[1:]) == {"OVW → PKR", "PKR → CON"}
    top = p.plot_top_ngrams(p.tool_ngrams(turns, 2), top=1).axes[0]
    assert [r.get_width() for r in top.patches] == pytest.approx([60.0])
    plt.close("all")


# --------------------------------------------------------------------------- known signatures


def _toy_shop(root):
    """A deterministic Python package: 8 modules of 12 functions, each calling the next."""
    for sub in ("core", "web"):
        (root / "shop" / sub).mkdir(parents=True, exist_ok=True)
    (root / "shop" / "__init__.py").write_text('"""Toy shop."""\n')
    names = [f"{'core' if i % 2 else 'web'}/mod{i}" for i in range(8)]
    for i, name in enumerate(names):
        nxt = (i + 1) % 8
        lines = [f'"""Stage {i} of the toy shop."""', "",
                 f"from shop.{names[nxt].replace('/', '.')} import step{nxt}_0", ""]
        for j in range(12):
            call = f"step{nxt}_0(order)" if j == 0 else f"step{i}_{(j + 1) % 12}(order)"
            lines += ["", f"def step{i}_{j}(order):", f'    """Step {j} of stage {i}."""',
                      "    total = 0", "    for item in order:", "        total += item",
                      f"    if total > {j}:", f"        return {call}", "    return total", ""]
        (root / "shop" / f"{name}.py").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def baseline_corpus(tmp_path_factory):
    from adakit.apparatus.agent import LaunchContext, Run, RunConfig
    from adakit.apparatus.baselines import BASELINES, BaselinePolicy, baseline_spec
    from adakit.apparatus.code_index import CodeIndex
    from adakit.apparatus.conditions import get_condition
    from adakit.apparatus.tasks import make_task
    from adakit.apparatus.world import World
    from adakit.record import load_corpus

    base = tmp_path_factory.mktemp("baselines")
    _toy_shop(base / "world")
    world = World(base / "world", name="toyshop")
    index = CodeIndex(world)
    index.build()
    for policy_name in BASELINES:
        for task in ("architecture_analysis", "feature_tracing"):
            for seed in (0, 1):
                backend = BaselinePolicy(baseline_spec(policy_name), world, index, seed=seed)
                ctx = LaunchContext(world=world, task=make_task(task, "toyshop"),
                                    condition=get_condition("natural"), backend=backend,
                                    index=index)
                run_id = f"{policy_name}-{task}-{seed}"
                Run(ctx, RunConfig(run_id=run_id, turn_bound=40),
                    base / "runs" / f"{run_id}.jsonl").execute()
    return load_corpus(base / "runs", cache=False)


def test_scripted_baselines_show_their_signatures(baseline_corpus):
    """Lens 2 recovers the skimmer, tracer and close reader; lens 4 finds the close reader's
    footprint the most concentrated."""
    from adakit.lenses import footprint as fp

    c = baseline_corpus
    assert len(c.runs) == 12 and c.runs["finished"].all()
    shares = p.tag_shares(p.tag_transitions(c.turns), c.runs, by="model")
    wide = shares.pivot_table(index="model", columns="tag", values="share", fill_value=0.0)
    for tag in ("skim", "zoom in", "zoom out", "trace", "traverse", "close read"):
        if tag not in wide.columns:
            wide[tag] = 0.0
    skim_zoom = wide["skim"] + wide["zoom in"] + wide["zoom out"]
    trace_trav = wide["trace"] + wide["traverse"]
    assert skim_zoom.idxmax() == "baseline-skimmer"
    assert trace_trav.idxmax() == "baseline-tracer"
    assert wide["close read"].idxmax() == "baseline-close_reader"
    conc = fp.concentration(c.reads, c.runs, by="model").set_index("model")
    assert conc["hhi"].idxmax() == "baseline-close_reader"
    assert conc["lines_per_file"].idxmax() == "baseline-close_reader"
