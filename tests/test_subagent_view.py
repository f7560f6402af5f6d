"""Subagent spans and compactions of an imported run in lens 1's journey arc and in the run
explorer (issue 27), on a hand-made Claude Code session (CLI 2.1 shape,
tests/fixtures/agent_cli/claude_code_parallel): a Grep (turn 1), two Task calls in one reply
(turns 2 and 3) whose Explore subagents run in parallel, their turns interleaved (span
ab12cd34: turns 4, 6, 8, started by turn 2; span ef56ab78: turns 5, 7, started by turn 3),
then a compaction (marked on turn 3, the main line's last turn before it), a Read (9) and a
TodoWrite (10). Assertions are on the figures' artists and the widgets' state, not pixels."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from adakit.importers.batch import import_paths
from adakit.lenses import journey
from adakit.record import load_corpus
from adakit.synthetic import synthetic_run, write_run
from adakit.workbench import explorer

SESSION = Path(__file__).parent / "fixtures" / "agent_cli" / "claude_code_parallel"
A, B = "ab12cd34", "ef56ab78"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("parallel")
    rep = import_paths("claude-code", [SESSION], out, progress=False)
    assert len(rep.imported) == 1, rep.summary()
    return load_corpus(out, cache=False)


def _gids(ax) -> dict[str, object]:
    return {a.get_gid(): a for a in ax.get_children() if a.get_gid()}


def test_turns_table_and_events_carry_spans_and_the_compaction(corpus):
    t = corpus.turns.set_index("turn")
    assert t["sidechain"].isna().tolist() == [True] * 3 + [False] * 5 + [True] * 2
    assert t.loc[[4, 6, 8], "sidechain"].tolist() == [A] * 3
    assert t.loc[[5, 7], "sidechain_parent"].tolist() == [3, 3]
    assert set(t.loc[4:8, "sidechain_agent"]) == {"Explore"}
    assert t.index[t["compaction"]].tolist() == [3]
    ev = journey.arc_events(corpus)
    assert ev.loc[ev["compaction"], "turn"].tolist() == [3]
    spans = journey.span_lanes(ev)
    assert spans[["sidechain", "lane", "agent", "parent_turn", "first_turn", "last_turn",
                  "n_turns"]].values.tolist() == [[A, 1, "Explore", 2, 4, 8, 3],
                                                  [B, 2, "Explore", 3, 5, 7, 2]]
    assert journey.event_lanes(ev, spans).tolist() == [0, 0, 0, 1, 2, 1, 2, 1, 0, 0]


def test_span_lanes_reuse_a_lane_once_it_is_free():
    import pandas as pd

    ev = pd.DataFrame({"run_id": "r", "turn": range(1, 8),
                       "sidechain": [None, "s1", "s1", None, "s2", "s3", "s2"],
                       "sidechain_agent": [None, "Explore", "Explore", None, "Plan", "x", "Plan"],
                       "sidechain_parent": [None, 1, 1, None, 4, 4, 4],
                       "sidechain_depth": [None, 1, 1, None, 1, 1, 1]})
    spans = journey.span_lanes(ev)
    assert dict(zip(spans["sidechain"], spans["lane"], strict=True)) == {"s1": 1, "s2": 1, "s3": 2}
    assert journey.lane_labels(spans) == {1: "↳ Explore, Plan", 2: "↳ x"}
    with pytest.raises(ValueError, match="one run"):
        journey.span_lanes(ev.assign(run_id=["a", "b"] * 3 + ["a"]))


def test_journey_arc_draws_each_span_on_its_lane_and_marks_the_compaction(corpus):
    ev = journey.arc_events(corpus)
    fig = journey.plot_journey_arcs(ev, corpus.runs, facet=["model"], axis="turn")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["flask", "↳ Explore", "↳ Explore"]
    assert ax.get_yticks().tolist() == pytest.approx([0.0, journey.LANE_STEP,
                                                      2 * journey.LANE_STEP])
    gids = _gids(ax)
    assert set(gids) == {f"sidechain:{A}", f"spawn:{A}", f"sidechain:{B}", f"spawn:{B}",
                         "compaction"}
    band_a, band_b = gids[f"sidechain:{A}"], gids[f"sidechain:{B}"]
    assert isinstance(band_a, Rectangle) and isinstance(band_b, Rectangle)
    # each band spans its parent turn to its last turn, on its own lane under the main line
    assert band_a.get_x() < 2 and band_a.get_x() + band_a.get_width() > 8
    assert band_b.get_x() < 3 < 7 < band_b.get_x() + band_b.get_width() < 8
    assert band_a.get_y() + band_a.get_height() / 2 == pytest.approx(journey.LANE_STEP)
    assert band_b.get_y() + band_b.get_height() / 2 == pytest.approx(2 * journey.LANE_STEP)
    link = gids[f"spawn:{B}"]
    assert isinstance(link, Line2D) and link.get_xdata().tolist() == [3, 3]
    # the compaction sits before the main line's next turn (9), across the run's lanes
    mark = gids["compaction"]
    assert mark.get_xdata().tolist() == [8.5, 8.5]
    assert max(mark.get_ydata()) > 2 * journey.LANE_STEP
    # the subagents' markers sit on their lanes: PKR at turns 4, 8 (lane 1) and 7 (lane 2)
    points = {tuple(np.round(xy, 3)) for c in ax.collections for xy in c.get_offsets()}
    assert {(4.0, 0.6), (8.0, 0.6), (7.0, 1.2), (9.0, 0.0), (5.0, 1.2)} <= points
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert labels[-2:] == ["Subagent span", "Compaction"]
    plt.close(fig)
    fig = journey.plot_journey_arcs(ev, corpus.runs, facet=None, axis="time", scale="run")
    gids = _gids(fig.axes[0])
    end3 = 100 * float(ev.loc[ev["turn"] == 3, "t_rel_end"].iloc[0])
    assert gids["compaction"].get_xdata().tolist() == pytest.approx([end3, end3])
    plt.close(fig)


def test_runs_without_subagents_are_drawn_as_before():
    from adakit.record import corpus_from_runs

    rf = synthetic_run("plain", tools=["OVW", {"tool": "PKR", "file": "a.py", "ranges": [(1, 9)]},
                                       {"tool": "CON", "finalize": True}],
                       files={"a.py": 20}, seed=0)
    c = corpus_from_runs([rf])
    fig = journey.plot_journey_arcs(journey.arc_events(c), c.runs, facet=None)
    ax = fig.axes[0]
    assert not _gids(ax) and ax.get_yticks().tolist() == [0.0]
    assert ax.get_ylim() == pytest.approx((0.6, -0.9))
    assert "Compaction" not in [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    plt.close(fig)


def test_explorer_text_jumps_and_steps_between_main_line_and_spans(corpus):
    run_id = corpus.runs["run_id"].iloc[0]
    view = explorer.RunView(corpus, run_id)
    rf = view.rf
    assert explorer.span_turns(rf) == {A: [4, 6, 8], B: [5, 7]}
    jumps = view.jumps
    assert jumps[explorer.MAIN_LINE] == [1, 2, 3, 9, 10] and jumps["subagent"] == [4, 5, 6, 7, 8]
    assert jumps[f"span:{A}"] == [4, 6, 8] and jumps["compaction"] == [3]
    assert explorer.step_match(jumps[f"span:{A}"], 4, 1) == 6  # within a span, skipping B's 5
    assert explorer.step_match(jumps[explorer.MAIN_LINE], 3, 1) == 9  # over both spans
    assert [explorer.span_exit(rf, t) for t in (1, 4, 5, 8)] == [None, 2, 3, 2]
    assert [explorer.span_entry(rf, t) for t in (1, 2, 3, 4)] == [None, 4, 5, None]
    text = view.text(6)
    assert (f"SUBAGENTS\nin subagent span {A} (Explore, depth 1): turn 2 of its 3 "
            "(turns 4, 6, 8); started by turn 2") in text
    three = view.text(3)
    assert f"started subagent span {B} (Explore): turns 5, 7" in three
    assert "[compaction] " + explorer.COMPACTION_NOTE + "Conversation compacted" in three
    assert "on the main line (2 subagent spans in this run)" in view.text(1)
    fig = view.arc_figure(7)
    ring = _gids(fig.axes[0])["current"]
    assert ring.get_offsets().tolist() == [[7.0, 2 * journey.LANE_STEP]]
    assert fig.axes[0].get_title(loc="left").startswith("turn 7 of 10 (subagent Explore)")
    plt.close(fig)


def test_explorer_widgets_step_out_of_and_into_a_span(corpus):
    pytest.importorskip("ipywidgets")
    run_id = corpus.runs["run_id"].iloc[0]
    w = explorer.build_explorer(corpus, run_id, turn=6, show_map=False)
    assert w.span_out.layout.display is None and w.span_in.layout.display is None
    assert (w.span_out.disabled, w.span_in.disabled) == (False, True)
    assert w.span_out.tooltip == f"to turn 2, which started span {A}"
    assert "SUBAGENTS" in w.turn_view.value and f"span {A}" in w.turn_view.value
    w.span_out.click()
    assert w.turn == 2 and (w.span_out.disabled, w.span_in.disabled) == (True, False)
    w.span_in.click()
    assert w.turn == 4 and "turn 1 of its 3" in w.turn_view.value
    assert (f"span:{A} (3)", f"span:{A}") in list(w.jump_select.options)
    w.jump_select.value = f"span:{B}"
    w.jump_next.click()
    assert w.turn == 5
    w.jump_select.value = "compaction"
    w.jump_prev.click()
    assert w.turn == 3 and "[compaction]" in w.turn_view.value
    plain = explorer.build_explorer(corpus, run_id, turn=1, show_map=False)
    plain.span_in.click()  # turn 1 started no span: nothing happens
    assert plain.turn == 1 and plain.span_in.disabled


def test_a_run_without_subagents_hides_the_span_buttons(tmp_path):
    pytest.importorskip("ipywidgets")
    rf = synthetic_run("plain", tools=["OVW", {"tool": "CON", "finalize": True}],
                       files={"a.py": 20}, seed=0)
    write_run(rf, tmp_path / "plain.jsonl")
    w = explorer.build_explorer(load_corpus(tmp_path, cache=False), "plain", show_map=False)
    assert w.span_out.layout.display == "none" and w.span_in.layout.display == "none"
    assert "SUBAGENTS" not in explorer.turn_sections_text(rf, 1)
    assert explorer.MAIN_LINE not in explorer.jump_targets(rf)
