"""The run explorer (adakit.workbench.explorer): per-turn pure functions on hand-built runs, the widget
builder without a browser, the static rendering, and notebooks 30 (explorer) and 00 (tour)
executed with papermill on a small corpus of scripted-baseline runs on the flask world."""

from __future__ import annotations

import contextlib
import io
import json
import time

import pandas as pd
import pytest
from matplotlib.figure import Figure

from adakit import config
from adakit.record import (
    ConditionInfo,
    End,
    Header,
    Injection,
    ModelInfo,
    RunFile,
    TaskInfo,
    ToolCall,
    ToolMetrics,
    Turn,
    WorldInfo,
    corpus_from_runs,
    load_corpus,
)
from adakit.synthetic import synthetic_run, write_run
from adakit.workbench import exercises, explorer

FILES = {"pkg/a.py": 100, "pkg/b.py": 50, "pkg/sub/c.py": 80}
T0 = 1_800_000_000.0


# --------------------------------------------------------------------------- hand-built runs


def _turn(n: int, tool: str, metrics: dict, params: dict | None = None,
          changes: list[dict] | None = None, **extra) -> Turn:
    return Turn(turn=n, started_at=T0 + n, ended_at=T0 + n + 0.5,
                call=ToolCall(tool=tool, params=params or {}),
                metrics=ToolMetrics(**metrics), state_changes=changes or [],
                observation=f"observation of turn {n}", thinking=f"thinking {n}", **extra)


def recorded_run() -> RunFile:
    """Six turns whose state changes are recorded, as the agent records them."""
    header = Header(run_id="rec", model=ModelInfo(name="m-llm", kind="llm"),
                    world=WorldInfo(name="toyworld"), task=TaskInfo(family="feature_tracing"),
                    condition=ConditionInfo(name="natural"), turn_bound=10, started_at=T0)
    mem = {"channel": "memory", "op": "add", "id": 1, "title": "flow", "content": "first idea",
           "confidence": "low"}
    turns = [
        _turn(1, "create_memory", {"tool": "MEM", "confidence": "low"},
              {"memory_title": "flow", "memory_content": "first idea"}, [mem]),
        _turn(2, "peek_code_region", {"tool": "PKR", "file": "pkg/a.py", "ranges": [(1, 10)],
                                      "lines_viewed": 10}),
        _turn(3, "create_memory", {"tool": "MEM", "confidence": "high"},
              {"memory_title": "flow", "memory_content": "better idea"},
              [{**mem, "op": "update", "content": "better idea", "confidence": "high"}]),
        _turn(4, "bookmark", {"tool": "BKM", "file": "pkg/a.py", "ranges": [(7, 7)],
                              "lines_viewed": 1},
              {"file_path": "pkg/a.py", "line_number": 7, "note": "odd"},
              [{"channel": "bookmark", "op": "add", "id": 1, "file": "pkg/a.py", "line": 7,
                "note": "odd"}],
              injected=[Injection(source="reminder", text="half the budget is used")]),
        _turn(5, "stash_conclusion", {"tool": "CON", "finalize": False},
              {"content": "interim", "proceed_to_finalize": False},
              [{"channel": "conclusion", "op": "add", "id": 1, "title": "Conclusion 1",
                "content": "interim", "scope": None, "finalize": False}],
              coach={"decision": "HINT", "message": "check the caller"}),
        _turn(6, "stash_conclusion", {"tool": "CON", "finalize": True},
              {"content": "final", "proceed_to_finalize": True},
              [{"channel": "conclusion", "op": "add", "id": 2, "title": "Conclusion 2",
                "content": "final", "scope": "pkg", "finalize": True}]),
    ]
    end = End(reason="finalize", ended_at=T0 + 7, conclusion="final")
    return RunFile(path=config.ROOT / "rec.jsonl", header=header, turns=turns, end=end)


def scripted_run(run_id: str = "syn", model: str = "synth-A", condition: str = "natural",
                 world: str = "toyworld") -> RunFile:
    """A synthetic run (no recorded state changes) with reads, errors and cognitive calls."""
    tools = [
        {"tool": "OVW", "file": "pkg/a.py"},
        {"tool": "PKR", "file": "pkg/a.py", "ranges": [(1, 10)]},
        {"tool": "PKR", "file": "pkg/a.py", "ranges": [(5, 20)]},
        "MEM",
        {"tool": "PKR", "file": "pkg/b.py", "ranges": [(3, 3)]},
        {"tool": "PKR", "file": "pkg/b.py", "ranges": [(9, 12)], "error": "tool_error"},
        "MEM",
        {"tool": "BKM", "file": "pkg/b.py"},
        "malformed",
        {"tool": "PKR", "file": "pkg/sub/c.py", "ranges": [(40, 49)]},
        {"tool": "CON", "finalize": True},
    ]
    return synthetic_run(run_id, model=model, world=world, condition=condition, tools=tools,
                         files=FILES, seed=1)


# --------------------------------------------------------------------------- state at turn t


def test_state_at_replays_recorded_changes_in_order():
    rf = recorded_run()
    empty = explorer.state_at(rf, 0)
    assert not empty.memories and not empty.bookmarks and not empty.conclusions
    s1 = explorer.state_at(rf, 1)
    assert [(m.id, m.content, m.confidence) for m in s1.memories] == [(1, "first idea", "low")]
    s3 = explorer.state_at(rf, 3)  # the update replaces, it does not add
    assert [(m.id, m.content, m.confidence) for m in s3.memories] == [(1, "better idea", "high")]
    assert not s3.bookmarks
    s4 = explorer.state_at(rf, 4)
    assert [(b.file, b.line, b.note) for b in s4.bookmarks] == [("pkg/a.py", 7, "odd")]
    s6 = explorer.state_at(rf, 6)
    assert [(c.id, c.content, c.finalize) for c in s6.conclusions] == [
        (1, "interim", False), (2, "final", True)]
    assert "better idea" in s6.render() and "pkg/a.py:7" in s6.render()


def test_state_at_rebuilds_unrecorded_changes_through_the_tools_logic():
    rf = scripted_run()
    assert not any(t.state_changes for t in rf.turns)  # synthetic records carry none
    s = explorer.state_at(rf, 6)
    # one MEM so far, titled as the synthetic policy titles it
    assert [(m.id, m.title) for m in s.memories] == [(1, "data flow")]
    s = explorer.state_at(rf, 7)  # the same title again: the tool updates, it does not add
    assert len(s.memories) == 1
    s = explorer.state_at(rf, 8)
    assert [(b.id, b.file) for b in s.bookmarks] == [(1, "pkg/b.py")]
    final = explorer.state_at(rf, 11)
    assert [c.finalize for c in final.conclusions] == [True]
    changes = explorer.turn_changes(rf.turns[3])
    assert changes[0]["channel"] == "memory" and changes[0]["op"] == "add"


def test_failed_state_calls_change_nothing():
    rf = recorded_run()
    bad = rf.turns[0].model_copy(update={
        "state_changes": [], "metrics": ToolMetrics(tool="MEM", error_type="tool_error")})
    assert explorer.turn_changes(bad) == []
    assert explorer.apply_change(explorer.state_at(rf, 0), {"channel": "todo", "id": 1}) is False


# --------------------------------------------------------------------------- reads up to turn t


def test_reads_until_and_merged_ranges():
    rf = scripted_run()
    c = corpus_from_runs([rf])
    assert explorer.reads_until(c.reads, "syn", 1).empty  # an overview shows no lines
    upto3 = explorer.reads_until(c.reads, "syn", 3)
    assert upto3["turn"].tolist() == [2, 3]
    table = explorer.read_ranges(upto3)
    assert table.to_dict("records") == [{"file": "pkg/a.py", "ranges": "1-20",
                                         "distinct_lines": 20, "lines_shown": 26, "reads": 2,
                                         "last_turn": 3}]
    whole = explorer.read_ranges(explorer.reads_until(c.reads, "syn", 99))
    # the failed read of turn 6 is not a read; b.py's single line prints as one number
    assert whole["file"].tolist() == ["pkg/a.py", "pkg/b.py", "pkg/sub/c.py"]
    assert whole["ranges"].tolist() == ["1-20", "3", "40-49"]
    assert int(whole["distinct_lines"].sum()) == 20 + 1 + 10
    values = explorer.map_values(c.reads, "syn", 5)
    assert values.to_dict() == {"pkg/a.py": 26.0, "pkg/b.py": 1.0}
    assert explorer.map_values(c.reads, "syn", 1).empty


# --------------------------------------------------------------------------- jumps and filters


def test_jump_targets_matching_turns_and_steps():
    rf = scripted_run()
    jumps = explorer.jump_targets(rf)
    assert jumps["tool:PKR"] == [2, 3, 5, 6, 10]
    assert jumps["error"] == [6, 9]
    assert jumps["error:tool_error"] == [6] and jumps["error:malformed"] == [9]
    assert jumps["conclusion"] == [11] and jumps["finalize"] == [11]
    assert jumps["state"] == [4, 7, 8, 11]
    assert "coach" not in jumps
    assert explorer.matching_turns(rf, "MEM") == [4, 7]
    assert explorer.matching_turns(rf, "tool_error") == [6]
    assert explorer.matching_turns(rf, "HNT") == []  # a tool the run never used
    with pytest.raises(ValueError, match="unknown jump kind"):
        explorer.matching_turns(rf, "teleport")
    assert explorer.step_match([2, 3, 5, 6, 10], 5, 1) == 6
    assert explorer.step_match([2, 3, 5, 6, 10], 5, -1) == 3
    assert explorer.step_match([2, 3], 3, 1) is None
    rec = explorer.jump_targets(recorded_run())
    assert rec["coach"] == [5] and rec["injected"] == [4] and rec["conclusion"] == [5, 6]
    assert rec["error"] == []


def test_run_selection_filters_each_axis_by_the_others():
    runs = pd.DataFrame({
        "run_id": ["r1", "r2", "r3", "r4"],
        "model": ["baseline-tracer", "baseline-tracer", "GPT-4.1", "GPT-4.1"],
        "model_kind": ["baseline", "baseline", "llm", "llm"],
        "world": ["flask", "requests", "flask", "flask"],
        "task": ["feature_tracing"] * 4,
        "condition": ["natural", "natural", "budget_pressure", "natural"],
    })
    opts = explorer.axis_options(runs, {"model": "GPT-4.1"})
    assert opts["world"] == ["flask"]  # GPT-4.1 has no requests run
    assert opts["model"] == ["GPT-4.1", "baseline-tracer"]  # itself ignored; paper models first
    assert opts["condition"] == ["natural", "budget_pressure"]  # the paper's order
    picked = explorer.select_runs(runs, model="GPT-4.1", condition="natural", world=explorer.ANY)
    assert picked["run_id"].tolist() == ["r4"]
    assert explorer.default_run(runs) == "r3"  # the first run that is not a baseline
    assert explorer.default_run(runs[runs["model_kind"] == "baseline"]) == "r1"
    with pytest.raises(ValueError, match="unknown run axis"):
        explorer.select_runs(runs, colour="red")
    with pytest.raises(ValueError, match="no runs"):
        explorer.default_run(runs.iloc[:0])


def test_default_run_opens_on_an_instructive_run():
    """A concluded run of a real model with more tools and files beats the corpus order."""
    runs = pd.DataFrame({
        "run_id": ["b1", "m1", "m2", "m3", "m4"],
        "model_kind": ["baseline", "local", "local", "local", "local"],
        "reason": ["finalize", "turn_bound", "finalize", "finalize", "finalize"],
        "conclusion": ["done", None, "short", "the path is ...", ""],
    })
    turns = pd.DataFrame({
        "run_id": ["b1"] * 4 + ["m1"] * 5 + ["m2"] * 2 + ["m3"] * 4 + ["m4"] * 5,
        "tool": ["OVW", "PKR", "EXP", "CON", "BKM", "BKM", "BKM", "BKM", "BKM", "PKR", "CON",
                 "OVW", "PKR", "PKR", "CON", "OVW", "PKR", "EXP", "MEM", "CON"],
        "file": ["a", "b", "c", None, "a", "a", "a", "a", "a", "a", None,
                 "a", "b", "c", None, "a", "b", "c", None, None],
        "error_type": [None] * 20,
    })
    # m4 ends by finalizing but with an empty conclusion: not counted as concluded
    assert explorer.default_run(runs, turns) == "m3"  # 3 tools, 3 files beats m2's 2 and 1
    assert explorer.default_run(runs) == "m2"  # without turns: the first concluded real run
    assert explorer.default_run(runs[runs["model_kind"] == "baseline"], turns) == "b1"
    # no real run concludes: one that navigates (2+ tools, 2+ files) beats a concluded
    # baseline; a real run that only bookmarks one file does not
    # a conclusion written on a closing turn (the run stuck or at its bound) counts as one
    closing = runs.assign(reason=["finalize", "turn_bound", "turn_bound", "malformed_limit",
                                  "turn_bound"])
    assert explorer.default_run(closing, turns) == "m3"
    open_ = closing.assign(conclusion=["done", None, None, None, None])
    assert explorer.default_run(open_, turns) == "m4"  # OVW, PKR, EXP, MEM over 3 files
    assert explorer.default_run(open_[open_["run_id"].isin(["b1", "m1"])], turns) == "b1"


def test_default_run_prefers_a_conclusion_of_the_runs_own_to_a_closing_turns():
    """Among real runs that navigate and conclude, one that finalized of its own accord opens
    before one whose conclusion the closing turn asked for, even later in the corpus and with
    fewer tools; a closing turn that finalizes (``closed``) is not a conclusion of its own."""
    runs = pd.DataFrame({
        "run_id": ["asked", "stuck", "own"],
        "model_kind": ["local"] * 3,
        "reason": ["finalize", "malformed_limit", "finalize"],
        "closed": [True, False, False],
        "conclusion": ["asked for", "asked for", "its own"],
    })
    turns = pd.DataFrame({
        "run_id": ["asked"] * 4 + ["stuck"] * 4 + ["own"] * 3,
        "tool": ["OVW", "PKR", "EXP", "CON", "OVW", "PKR", "EXP", "CON", "OVW", "PKR", "CON"],
        "file": ["a", "b", "c", None, "a", "b", "c", None, "a", "b", None],
        "error_type": [None] * 11,
    })
    assert explorer.default_run(runs, turns) == "own"
    assert explorer.default_run(runs[runs["run_id"] != "own"], turns) == "asked"  # by tools, then order
    assert explorer.default_run(runs.drop(columns="closed"), turns) == "asked"  # no record of closing


def test_default_run_prefers_a_real_run_that_read_two_files_and_concluded():
    """A concluded run of lookups that read no file (the quick corpus's first real run) loses
    to a later real run that read two files and concluded; bookmarks and failed calls read
    nothing; a real run that reads without concluding beats one that concludes without
    reading."""
    runs = pd.DataFrame({
        "run_id": ["base", "lookups", "bookmarks", "reader", "wanderer"],
        "model_kind": ["baseline", "local", "local", "local", "local"],
        "conclusion": ["done", "a conclusion", "a conclusion", "a conclusion", None],
    })
    rows = [("base", "OVW", "a", None), ("base", "PKR", "b", None), ("base", "CON", None, None),
            ("lookups", "EXP", None, None), ("lookups", "EXP", None, None),
            ("lookups", "MEM", None, None), ("lookups", "CON", None, None),
            ("bookmarks", "BKM", "a", None), ("bookmarks", "BKM", "b", None),
            ("bookmarks", "PKR", "c", "tool_error"), ("bookmarks", "CON", None, None),
            ("reader", "OVW", "a", None), ("reader", "PKR", "b", None),
            ("reader", "CON", None, None),
            ("wanderer", "OVW", "a", None), ("wanderer", "PKR", "b", None),
            ("wanderer", "PKR", "c", None)]
    turns = pd.DataFrame(rows, columns=["run_id", "tool", "file", "error_type"])
    reads = pd.DataFrame({"run_id": ["reader", "wanderer", "bookmarks"],
                          "file": ["b", "b", "a"], "start_line": [1, 1, 7],
                          "end_line": [20, 80, 7]})
    assert explorer.files_read(turns).to_dict() == {"base": 2, "reader": 2, "wanderer": 3}
    assert explorer.default_run(runs, turns, reads) == "reader"
    assert explorer.default_run(runs, turns) == "reader"
    no_reader = runs[runs["run_id"] != "reader"]
    assert explorer.default_run(no_reader, turns, reads) == "wanderer"
    only_lookups = runs[runs["run_id"].isin(["base", "lookups", "bookmarks"])]
    assert explorer.default_run(only_lookups, turns, reads) == "lookups"  # real, concluded
    # ties among real readers that concluded: more tools, then more lines shown
    twins = pd.DataFrame({"run_id": ["short", "long"], "model_kind": ["local"] * 2,
                          "conclusion": ["c", "c"]})
    t2 = pd.DataFrame([(r, tool, f, None) for r in ("short", "long")
                       for tool, f in (("OVW", "a"), ("PKR", "b"), ("CON", None))],
                      columns=["run_id", "tool", "file", "error_type"])
    r2 = pd.DataFrame({"run_id": ["short", "long"], "file": ["b", "b"], "start_line": [1, 1],
                       "end_line": [5, 50]})
    assert explorer.default_run(twins, t2, r2) == "long"
    assert explorer.default_run(twins, t2) == "short"  # without reads: the corpus order


def _closed(rf: RunFile) -> RunFile:
    """``rf`` as if its last turn were a closing turn (the one before showed the instruction)."""
    text = "Write your conclusion now."
    rf.header.scaffold["close_turn"] = text
    rf.turns[-2].injected.append(Injection(source="system", text=text))
    return rf


def test_turn_wording_names_the_closing_turn():
    bound = synthetic_run("b", tools=["OVW", "PKR", "PKR", "CON"], files=FILES, turn_bound=4,
                          reason="turn_bound")
    bound.header.turn_bound = 3  # the fourth turn is one past the bound: a closing turn
    plain = explorer.turn_count_text(bound)
    assert plain == "4 turns (bound 3), ended by turn_bound"
    closed = explorer.turn_count_text(_closed(bound))
    assert closed.startswith("4 turns: the bound of 3, then the fourth was the closing turn")
    assert closed.endswith("ended by turn_bound") and "(bound 3)" not in closed
    stuck = _closed(synthetic_run("s", tools=["OVW", "malformed", "malformed", "CON"],
                                  files=FILES, turn_bound=15, reason="malformed_limit"))
    words = explorer.turn_count_text(stuck)
    assert words.startswith("4 turns (bound 15): the fourth was the closing turn")
    assert words.endswith("ended by malformed_limit")
    c = corpus_from_runs([bound])
    view = explorer.RunView(c, "b", run_file=bound)
    assert closed in view.summary()
    assert explorer.turn_sections(bound, 4)["header"].startswith("turn 4 of 4 (the closing turn)")
    assert "closing" not in explorer.turn_sections(bound, 3)["header"]
    assert [explorer.ordinal(n) for n in (1, 7, 11, 12, 13, 21, 22, 23, 111)] == [
        "first", "seventh", "11th", "12th", "13th", "21st", "22nd", "23rd", "111th"]


# --------------------------------------------------------------------------- text and pictures


def test_turn_sections_text():
    rf = recorded_run()
    c = corpus_from_runs([rf])
    text = explorer.turn_sections_text(rf, 4, c.reads)
    assert "turn 4 of 6" in text and "BKM  bookmark(" in text
    assert "[reminder] half the budget is used" in text
    assert "*   [1] pkg/a.py:7 odd" in text  # the bookmark made by this turn is starred
    assert "    [1] flow (high)" in text  # the memory made earlier is not
    assert "> pkg/a.py: 1-10 (10 lines)" in text  # the bookmarked line lies inside 1-10
    sections = explorer.turn_sections(rf, 5)
    assert sections["coach"] == "HINT: check the caller" and "reads" not in sections
    html = explorer.turn_html(rf, 5, c.reads)
    assert "check the caller" in html and "<pre" in html
    with pytest.raises(ValueError, match="turns 1-6, not 9"):
        explorer.turn_record(rf, 9)
    syn = scripted_run()
    broken = explorer.turn_sections_text(syn, 9)
    assert "no tool call: parse error" in broken


def test_arc_data_and_plots():
    rf = scripted_run()
    c = corpus_from_runs([rf])
    arc = explorer.arc_data(c, "syn", 4)  # the turn axis by default
    assert arc["x"].tolist() == list(range(1, 12))
    assert arc["current"].tolist() == [t == 4 for t in range(1, 12)]
    assert arc["seen"].sum() == 4
    timed = explorer.arc_data(c, "syn", 4, axis="time")
    assert timed["x"].between(0, 100).all() and timed["x"].is_monotonic_increasing
    assert timed["x"].max() < 100  # the last turn starts before the run's end
    fig = explorer.plot_arc(arc, c.runs, axis="turn")
    assert isinstance(fig, Figure) and "turn 4 of 11" in fig.axes[0].get_title(loc="left")
    with pytest.raises(ValueError, match="axis"):
        explorer.arc_data(c, "syn", 4, axis="space")
    with pytest.raises(ValueError, match="no run"):
        explorer.arc_data(c, "nope", 1)
    files = pd.DataFrame({"file": list(FILES), "loc": list(FILES.values())})
    fig = explorer.plot_turn_map(files, explorer.map_values(c.reads, "syn", 5), "pkg/b.py")
    assert isinstance(fig, Figure)
    rings = [p for p in fig.axes[0].patches if not p.get_fill()]
    assert len(rings) == 1  # the current file is outlined
    empty = explorer.plot_turn_map(files, explorer.map_values(c.reads, "syn", 1), "pkg/a.py")
    assert isinstance(empty, Figure)  # nothing read yet still draws


def test_pictures_are_drawn_at_their_display_size_with_legible_fonts():
    """The arc and the map are rendered exactly as wide as they are shown, every text at
    least 10 px: before, the arc was drawn at ~676 px and shown at ~475 px (text 5-7 px)."""
    syn = scripted_run()
    c = corpus_from_runs([syn, recorded_run()])
    view = explorer.RunView(c, "syn", run_file=syn)
    files = pd.DataFrame({"file": list(FILES), "loc": list(FILES.values())})
    view._files = (files, "test files")
    for fig in (view.arc_figure(4), view.map_figure(4)):
        assert explorer.font_px(fig) >= explorer.MIN_FONT_PX
        png = explorer.figure_png(fig)
        assert explorer.png_size(png)[0] == explorer.PICTURE_PX
    arc = explorer.plot_arc(explorer.arc_data(c, "rec", 2), c.runs, width_px=333, dpi=72)
    assert explorer.png_size(explorer.figure_png(arc, dpi=72))[0] == 333
    assert explorer.font_px(arc, dpi=72) >= explorer.MIN_FONT_PX
    with pytest.raises(ValueError, match="not a PNG"):
        explorer.png_size(b"GIF89a")


def test_time_axis_only_when_turn_times_mean_something():
    syn, rec = scripted_run(), recorded_run()  # a scripted baseline; an LLM with 0.5 s turns
    assert not explorer.turn_times_meaningful(syn)
    assert explorer.turn_times_meaningful(rec)
    replayed = RunFile(path=rec.path, header=rec.header, end=rec.end,
                       turns=[t.model_copy(update={"cached": True}) for t in rec.turns])
    assert not explorer.turn_times_meaningful(replayed)
    instant = RunFile(path=rec.path, header=rec.header, end=rec.end,
                      turns=[t.model_copy(update={"ended_at": t.started_at + 0.001})
                             for t in rec.turns])
    assert not explorer.turn_times_meaningful(instant)
    assert explorer.resolve_axis(syn, "turn") == ("turn", "")
    assert explorer.resolve_axis(syn, "time") == (
        "turn", "turn axis: a scripted baseline's turns take ~0 s")
    assert explorer.resolve_axis(syn, "auto") == ("turn", "")
    assert explorer.resolve_axis(rec, "time") == ("time", "")
    assert explorer.resolve_axis(rec, "auto") == ("time", "")
    with pytest.raises(ValueError, match="axis"):
        explorer.resolve_axis(rec, "space")
    c = corpus_from_runs([syn, rec])
    assert explorer.RunView(c, "syn", run_file=syn).axis == "turn"  # the default
    asked = explorer.RunView(c, "syn", axis="time", run_file=syn)
    assert asked.axis == "turn" and "scripted baseline" in \
        asked.arc_figure(3).axes[0].get_title(loc="left")
    assert explorer.RunView(c, "rec", axis="time", run_file=rec).axis == "time"
    # the turn header says so instead of "+0.0s from launch"
    head = explorer.turn_sections(syn, 11)["header"].splitlines()
    assert head[0].startswith("turn 11 of 11") and "from launch" not in head[1]
    assert head[1].startswith("scripted baseline: no model time")
    head = explorer.turn_sections(rec, 3)["header"].splitlines()
    assert head[1].startswith("+3.0 s from launch · this turn 0.50 s")


def test_turn_html_wraps_at_word_boundaries_and_separates_the_header_lines():
    rf = recorded_run()
    html = explorer.turn_html(rf, 4)
    assert html.count("<pre") >= 3
    assert html.count("word-break:normal") == html.count("<pre") + 2  # every pre + header
    assert "break-all" not in html
    first, second = html.split("</div>", 2)[:2]
    assert "turn 4 of 6" in first and "font-weight:bold" in first
    assert "from launch" in second and "font-weight:bold" not in second


def test_map_marks_outlined_files_and_counts_whole_lines():
    rf = scripted_run()  # turn 1 outlines pkg/a.py; turn 2 reads lines 1-10 of it
    c = corpus_from_runs([rf])
    assert explorer.outlined_until(c.turns, "syn", 1) == ["pkg/a.py"]
    assert explorer.outlined_until(c.turns, "syn", 11) == ["pkg/a.py"]
    files = pd.DataFrame({"file": list(FILES), "loc": list(FILES.values())})
    values = explorer.map_values(c.reads, "syn", 1)
    fig = explorer.plot_turn_map(files, values, "pkg/a.py", outlined=["pkg/a.py"])
    dashed = [p for p in fig.axes[0].patches if not p.get_fill() and p.get_linestyle() != "solid"]
    assert len(dashed) == 1  # outlined only: a dashed ring
    assert "outlined only" in " ".join(t.get_text() for t in fig.texts)
    read = explorer.map_values(c.reads, "syn", 2)
    fig = explorer.plot_turn_map(files, read, "pkg/a.py", outlined=["pkg/a.py"], vmax=10)
    assert not [p for p in fig.axes[0].patches if not p.get_fill() and p.get_linestyle() != "solid"]
    fig.canvas.draw()
    ticks = [float(t) for t in fig.axes[-1].get_yticks() if 0 <= t <= 10]
    assert ticks and all(t == int(t) for t in ticks)  # whole lines, not 0.0-1.0 fractions
    one = explorer.plot_turn_map(files, pd.Series({"pkg/a.py": 1.0}), None, vmax=1)
    one.canvas.draw()
    assert [t for t in one.axes[-1].get_yticks() if 0 <= t <= 1] == [0.0, 1.0]
    names = [t.get_text() for t in fig.axes[0].texts]
    assert "a.py" in names  # the file read is named


def test_hidden_models_are_named():
    runs = pd.DataFrame({
        "run_id": ["r1", "r2", "r3"], "model": ["m-a", "m-b", "m-c"],
        "world": ["flask", "requests", "flask"], "task": ["t"] * 3,
        "condition": ["natural"] * 3})
    assert explorer.hidden_values(runs, {}) == []
    assert explorer.hidden_note(runs, {}) == ""
    assert explorer.hidden_values(runs, {"world": "flask"}) == ["m-b"]
    note = explorer.hidden_note(runs, {"world": "flask", "model": explorer.ANY})
    assert note.startswith("1 model hidden by the filter world = flask (no runs there): m-b")
    assert explorer.hidden_values(runs, {"world": "requests"}) == ["m-a", "m-c"]
    assert explorer.hidden_note(runs, {"world": "requests"}).startswith("2 models hidden")


def test_notebook_markdown_has_no_raw_subscripts():
    for name in ("00_tour.ipynb", "30_explorer.ipynb"):
        nb = json.loads((config.NOTEBOOKS / name).read_text())
        text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
        for raw in ("o_{t+1}", "_{", "x_t", "a_t"):
            assert raw not in text, (name, raw)


# --------------------------------------------------------------------------- widgets and static


@pytest.fixture
def small_corpus(tmp_path):
    folder = tmp_path / "runs"
    write_run(scripted_run("syn-a"), folder / "syn-a.jsonl")
    write_run(scripted_run("syn-b", model="synth-B", condition="budget_pressure"),
              folder / "syn-b.jsonl")
    write_run(recorded_run(), folder / "rec.jsonl")
    return load_corpus(folder, cache=False)


def test_widget_builder_steps_and_jumps(small_corpus):
    w = explorer.build_explorer(small_corpus, run_id="syn-a", turn=2)
    assert w.view.run_id == "syn-a" and w.turn == 2
    assert (w.slider.min, w.slider.max) == (1, 11)
    first = w.turn_view.value
    assert "turn 2 of 11" in first
    assert bytes(w.arc_image.value).startswith(b"\x89PNG")
    assert bytes(w.map_image.value).startswith(b"\x89PNG")
    w.next_button.click()
    assert w.turn == 3 and "turn 3 of 11" in w.turn_view.value and w.turn_view.value != first
    w.prev_button.click()
    w.prev_button.click()
    assert w.turn == 1
    w.prev_button.click()  # clamped at the first turn
    assert w.turn == 1
    w.jump_select.value = "error"
    w.jump_next.click()
    assert w.turn == 6
    w.jump_next.click()
    assert w.turn == 9 and "parse error" in w.turn_view.value
    w.jump_prev.click()
    assert w.turn == 6
    # the model menu filters the run menu and opens a run of that model
    w.selectors["model"].value = "synth-B"
    assert [v for _, v in w.run_select.options] == ["syn-b"]
    assert w.view.run_id == "syn-b"
    assert w.selectors["condition"].options == (explorer.ANY, "budget_pressure")
    w.selectors["model"].value = explorer.ANY
    assert len(w.run_select.options) == 3
    w.run_select.value = "rec"
    assert w.view.run_id == "rec" and w.slider.max == 6
    bundle = w.mimebundle()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == w.ui.model_id
    assert bundle["text/html"].count("<img") == 2 and "turn 1 of 6" in bundle["text/html"]


def test_the_search_box_lists_hits_that_open_their_run_at_their_turn(small_corpus):
    w = explorer.build_explorer(small_corpus, run_id="syn-a", turn=2)
    w.search_box.value = "interim"
    assert [v for _, v in w.search_hits.options] == [None, ("rec", 5)]
    assert w.search_hits.options[1][0].startswith("rec · turn 5 · call+conclusion: ")
    assert "1 turn of 1 run hold 'interim'" in w.search_note.value
    assert w.view.run_id == "syn-a"  # listing hits opens nothing
    w.search_hits.value = ("rec", 5)
    assert w.view.run_id == "rec" and w.turn == 5 and "turn 5 of 6" in w.turn_view.value
    w.search_box.value = "observation of turn 2"
    w.search_hits.value = ("rec", 2)
    assert w.view.run_id == "rec" and w.turn == 2
    w.selectors["model"].value = "synth-B"  # the search keeps to the selected runs
    w.search_box.value = "interim"
    assert [v for _, v in w.search_hits.options] == [None]
    assert "no turn holds 'interim'" in w.search_note.value
    w.search_box.value = ""
    assert w.search_note.value == "" and len(w.search_hits.options) == 1


def test_hit_options_put_the_fields_of_a_turn_on_one_entry_and_stop_at_the_limit():
    hits = pd.DataFrame({"run_id": ["a", "a", "a", "b"], "turn": [1, 1, 2, 7],
                         "field": ["thinking", "call", "thinking", "observation"],
                         "snippet": ["x" * 100, "y", "z", "w"], "hits": [1, 1, 1, 1]})
    options = explorer.hit_options(hits, limit=2)
    assert [v for _, v in options] == [None, ("a", 1), ("a", 2)]
    assert options[1][0] == "a · turn 1 · thinking+call: " + "x" * 69 + "…"
    assert explorer.hit_options(hits.head(0)) == [("-", None)]


def test_widget_jump_menu_filter_note_and_picture_sizes(small_corpus):
    w = explorer.build_explorer(small_corpus, run_id="rec", turn=1)
    kinds = [v for _, v in w.jump_select.options if v]
    assert "error" not in kinds  # "rec" has no error: not offered ...
    assert "not in this run" in w.jump_note.value and "error" in w.jump_note.value  # ... said
    assert "conclusion" in kinds
    assert w.jump_prev.disabled and w.jump_next.disabled  # no kind chosen yet
    w.jump_select.value = "conclusion"  # turns 5 and 6
    assert w.jump_prev.disabled and not w.jump_next.disabled
    w.jump_next.click()
    assert w.turn == 5 and w.jump_prev.disabled and not w.jump_next.disabled
    w.jump_next.click()
    assert w.turn == 6 and w.jump_next.disabled and not w.jump_prev.disabled
    # the pictures are shown at the width they were drawn
    for image in (w.arc_image, w.map_image):
        width, _ = explorer.png_size(bytes(image.value))
        assert width == explorer.PICTURE_PX and image.layout.width == f"{width}px"
    # a filter that hides a model says so
    assert w.filter_note.value == ""
    w.selectors["condition"].value = "budget_pressure"
    assert "hidden by the filter condition = budget_pressure" in w.filter_note.value
    assert "synth-A" in w.filter_note.value and "m-llm" in w.filter_note.value


def _children(widget) -> list:
    """Every widget under ``widget`` (depth first), itself included."""
    out = [widget]
    for child in getattr(widget, "children", ()):
        out += _children(child)
    return out


def test_presentation_size_puts_the_map_beside_the_controls_in_larger_type(small_corpus):
    w = explorer.build_explorer(small_corpus, run_id="syn-a", turn=4)
    normal_text = w.turn_view.value
    assert w.size is explorer.NORMAL and "adakit-present" not in w.ui._dom_classes
    turn_row = next(c for c in w.ui.children if w.prev_button in _children(c))
    assert w.map_image not in _children(turn_row)  # the map sits under the controls
    w.present.value = True
    assert w.size is explorer.PRESENTATION and "adakit-present" in w.ui._dom_classes
    beside = next(c for c in w.ui.children if w.prev_button in _children(c))
    left, right = beside.children
    assert w.prev_button in _children(left) and w.turn_view in _children(left)
    assert w.map_image in right.children and w.turn == 4  # the same turn, redrawn
    assert explorer.png_size(bytes(w.map_image.value))[0] == explorer.PRESENTATION.map_px
    assert explorer.png_size(bytes(w.arc_image.value))[0] == explorer.PRESENTATION.arc_px
    assert w.turn_view.layout.max_height == f"{explorer.PRESENTATION.text_box_px}px"
    assert "font-size:15.6px" in w.turn_view.value and "font-size:15.6px" not in normal_text
    view = w.view
    for fig in (view.map_figure(4, explorer.PRESENTATION), view.arc_figure(4, explorer.PRESENTATION)):
        assert explorer.font_px(fig) >= explorer.PRESENTATION.min_font_px - 0.01
    w.present.value = False
    assert explorer.png_size(bytes(w.map_image.value))[0] == explorer.PICTURE_PX
    assert "font-size:15.6px" not in w.turn_view.value
    assert explorer.scale_fonts("<p style='font-size:10px'>", 1.5) == "<p style='font-size:15.0px'>"


def test_the_map_names_the_files_the_run_touched(small_corpus):
    view = explorer.RunView(small_corpus, "syn-a")
    assert explorer.touched_until(small_corpus.turns, "syn-a", 8) == ["pkg/a.py", "pkg/b.py"]
    fig = view.map_figure(1)  # turn 1 only outlined pkg/a.py: no lines, yet it is named
    assert "a.py" in {t.get_text() for t in fig.axes[0].texts}
    fig = view.map_figure(11)
    names = {t.get_text() for t in fig.axes[0].texts}
    assert {"a.py", "b.py", "c.py"} <= names
    assert fig.axes[0].get_title(loc="center").startswith("toyworld by turn 11: 3 file(s) read")


def test_host_paths_are_shortened_and_kept_on_one_line():
    note = "World 'w': 3 source files from /srv/somewhere/deep/worlds/flask-3.1.3 (0 more)."
    shown = explorer.host_paths_html(note)
    assert "<span style='white-space:nowrap' title='/srv/somewhere/deep/worlds/flask-3.1.3'>" \
        "…/worlds/flask-3.1.3</span> (0 more)." in shown
    assert explorer.short_path(config.ROOT / "data" / "worlds" / "x") == "data/worlds/x"
    assert explorer.host_paths_html("a <b> & c") == "a &lt;b&gt; &amp; c"


def test_the_map_changes_with_the_text_when_the_world_changes(tmp_path):
    folder = tmp_path / "runs"
    write_run(scripted_run("in-toy"), folder / "in-toy.jsonl")
    write_run(scripted_run("in-other", world="otherworld"), folder / "in-other.jsonl")
    # first in corpus order in otherworld, but it reads nothing: the menu skips it
    write_run(synthetic_run("in-other-0", world="otherworld", tools=["MEM", "CON"],
                            files=FILES), folder / "in-other-0.jsonl")
    write_run(synthetic_run("reads-nothing", world="emptyworld", tools=["MEM", "CON"],
                            files=FILES), folder / "reads-nothing.jsonl")
    w = explorer.build_explorer(load_corpus(folder, cache=False), run_id="in-toy")
    toy = bytes(w.map_image.value)
    w.selectors["world"].value = "otherworld"
    assert w.view.run_id == "in-other" and "otherworld" in w.turn_view.value
    assert bytes(w.map_image.value) != toy and w.map_image.layout.display is None
    # a world with nothing to draw hides the map instead of leaving the last one up
    w.selectors["world"].value = "emptyworld"
    assert w.view.run_id == "reads-nothing"
    assert w.map_image.value == b"" and w.map_image.layout.display == "none"
    assert "no files to draw" in w.map_note.value


def test_the_explorer_opens_on_a_concluded_run_when_there_is_one(tmp_path):
    unfinished = synthetic_run("a-first", model="synth-A", tools=["OVW", "BKM", "BKM"],
                               files=FILES, reason="turn_bound")
    concluded = scripted_run("b-second", model="synth-B")
    for rf in (unfinished, concluded):
        write_run(rf, tmp_path / f"{rf.header.run_id}.jsonl")
    c = load_corpus(tmp_path, cache=False)
    w = explorer.build_explorer(c)
    assert w.view.run_id == "b-second" and w.view.rf.end.conclusion
    assert explorer.render_static(c).run_id == "b-second"


def test_static_rendering_and_mode_choice(small_corpus, monkeypatch):
    r = explorer.render_static(small_corpus, "syn-a", turn=4)
    assert r.turns == [1, 4, 6, 11]  # first, chosen, first error, conclusion (= the last)
    assert "turn 4 of 11" in r.text and "jump targets:" in r.text
    assert set(r.figures) == {"arc", "map"} and all(isinstance(f, Figure)
                                                     for f in r.figures.values())
    assert "not on disk" in r.text or "read" in r.text  # the map says where its files came from
    # outside a Jupyter kernel there are no widgets to show: explore degrades to static
    assert not explorer.widgets_available()
    assert isinstance(explorer.explore(small_corpus, "rec", interactive=True),
                      explorer.StaticRendering)
    assert explorer.use_widgets(False) is False
    monkeypatch.setenv(explorer.ENV_VAR, "static")
    assert explorer.use_widgets(True) is False
    assert "turn 3 of 11" in explorer.explore(small_corpus, "syn-a", turn=3, interactive=True).text
    late = explorer.render_static(small_corpus, "rec", turn=50, show_map=False)
    assert late.turn == 6 and set(late.figures) == {"arc"}
    with pytest.raises(ValueError, match="no run"):
        explorer.render_static(small_corpus, "missing")


def test_a_run_without_turns_still_opens(tmp_path):
    rf = recorded_run()
    empty = RunFile(path=tmp_path / "zero.jsonl",
                    header=rf.header.model_copy(update={"run_id": "zero"}), turns=[],
                    end=End(reason="model_error", error="endpoint down"))
    write_run(empty, tmp_path / "zero.jsonl")
    write_run(rf, tmp_path / "rec.jsonl")
    c = load_corpus(tmp_path, cache=False)
    static = explorer.render_static(c, "zero")
    assert static.turns == [] and "ended by model_error (endpoint down)" in static.text
    w = explorer.build_explorer(c, run_id="zero", show_map=False)
    assert w.slider.disabled and "no turns" in w.turn_view.value
    w.run_select.value = "rec"
    assert not w.slider.disabled and w.turn == 1


# --------------------------------------------------------------------------- tour exercises


def _census(loc_viewed: int, lines_shown: int) -> pd.DataFrame:
    return pd.DataFrame({"run_id": ["r"], "loc_viewed": [loc_viewed], "lines_shown": [lines_shown]})


def test_exercise_1_reference_answer_counts_each_line_once():
    from adakit.lenses import surface

    reads = pd.DataFrame({"run_id": "r", "file": ["a.py", "a.py", "b.py", "a.py"],
                          "start_line": [1, 21, 1, 5], "end_line": [30, 40, 5, 5]})
    # a.py: 1-30 and 21-40 overlap in 21-30, 5-5 lies inside -> 40 lines; b.py: 5
    assert exercises.answer_distinct_lines(reads) == 45
    assert surface.distinct_lines(reads).to_dict() == {"r": 45}  # lens 0 agrees


def test_exercise_1_check_messages():
    census = _census(45, 56)
    assert exercises.check_distinct_lines(None, census).startswith(exercises.FILL_IN)
    assert "45" not in exercises.check_distinct_lines(None, census)  # no answer given away
    assert exercises.check_distinct_lines(45, census) == (
        "✓ right: 45 distinct lines (lens 0's LOC viewed)\n"
        "lines shown with repeats: 56 (11 shown again)")
    over = exercises.check_distinct_lines(56, census)
    assert over.startswith("✗ not quite: 56 is too many.") and "twice" in over
    under = exercises.check_distinct_lines(44, census)
    assert under.startswith("✗ not quite: 44 is too few.") and "Did you miss a range" in under
    assert "44.5 is too few" in exercises.check_distinct_lines(44.5, census)
    for wrong in (56, 44, 44.5, 1000, 0):  # a wrong answer never shows lens 0's count
        text = exercises.check_distinct_lines(wrong, census)
        assert "45" not in text and "56 (" not in text and "✓" not in text
    assert exercises.check_distinct_lines("45", census).startswith("✗ my_distinct_lines should")
    assert exercises.check_distinct_lines(True, census).startswith("✗ my_distinct_lines should")
    with pytest.raises(ValueError, match="one run"):
        exercises.check_distinct_lines(45, pd.concat([census, census]))


def test_exercise_2_check_messages():
    from adakit.lenses import policy

    mini = exercises.mini_trajectory()
    answer = exercises.answer_tags()
    # the hand-worked answer and lens 2 agree
    assert policy.tag_transitions(mini)["tag"].astype(str).tolist() == answer
    assert exercises.check_tags(answer).endswith("\n✓ 5 of 5 right")
    blank = exercises.check_tags([None] * 5, mini)
    assert blank == f"{exercises.FILL_IN}: 5 of the 5 tags in my_tags are still None"
    assert "zoom in" not in blank  # no answer given away
    assert "1 of the 5 tags" in exercises.check_tags([*answer[:4], None], mini)
    assert exercises.check_tags(answer[:4], mini) == (
        "✗ give exactly 5 tags, one per transition (you gave 4)")
    # any capitalisation and surrounding (or doubled) spaces are accepted
    shouted = exercises.check_tags(["  Zoom In", "CLOSE  READ ", "Trace", "skim\t", "Dump"], mini)
    assert shouted.endswith("\n✓ 5 of 5 right")
    # wrong answers are marked, the key is not shown: not the tag, not the rule that gives it
    wrong = exercises.check_tags(["zoom in", "close read", "trace", "traverse", "dumb"], mini)
    lines = wrong.splitlines()
    assert lines[-1] == "✗ 3 of 5 right (fix the ✗ rows and run the check again)"
    row4 = next(line for line in lines if "traverse" in line)
    assert row4.startswith("4→5") and row4.rstrip().endswith("✗")
    row5 = next(line for line in lines if "dumb" in line)
    assert row5.rstrip().endswith("✗ not a Table 5 tag")
    assert "skim" not in wrong and "dump" not in wrong.replace("dumb", "")
    assert "NAV → PKR*" not in wrong and "NAV → COG" not in wrong
    assert [line.rstrip().endswith("✓") for line in lines[1:4]] == [True, True, True]


def test_the_committed_tour_ships_blank_answers():
    """The answer cells hold blanks and no answer; run as committed they ask to fill in."""
    nb = json.loads((config.NOTEBOOKS / "00_tour.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    answers = [c for c in code if c.startswith("# ✎ your answer")]
    assert len(answers) == 4  # exercises 1 and 2 here; exercise 3's two in test_exercises_forks
    assert "my_distinct_lines = None" in answers[0] and "my_tags = [None] * 5" in answers[1]
    for tag in exercises.answer_tags():
        assert f'"{tag}"' not in "\n".join(code)
    checks = [c for c in code if c.startswith("# NBVAL_CHECK_OUTPUT") and "exercises.check" in c]
    assert len(checks) == 4
    reads = pd.DataFrame({"run_id": "r", "file": ["a.py"], "start_line": [1], "end_line": [9]})
    namespace = {"exercises": exercises, "solutions": False, "census": _census(9, 9),
                 "tour": type("Tour", (), {"reads": reads})(),
                 "mini": exercises.mini_trajectory()}
    for blank_mode in (True, False):
        namespace["solutions"] = not blank_mode
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            for cell in (answers[0], checks[0], answers[1], checks[1]):
                exec(cell, namespace)
        text = out.getvalue()
        if blank_mode:
            assert text.count(exercises.FILL_IN) == 2 and "✓" not in text and "✗" not in text
        else:
            assert "✓ right: 9 distinct lines" in text and "✓ 5 of 5 right" in text
            assert exercises.FILL_IN not in text and "✗" not in text


# --------------------------------------------------------------------------- notebooks

NOTEBOOKS = {
    "30_explorer.ipynb": {"corpus", "run_id", "turn", "interactive", "presentation",
                          "arc_axis", "fetch_world",
                          "labels_file", "labeller", "label_families", "items_per_family",
                          "blind"},
    "00_tour.ipynb": {"corpus", "world", "baseline", "task", "condition", "turn_bound",
                      "output", "fork_model", "fork_seeds", "solutions"},
}


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_notebooks_are_stripped_and_document_their_parameters(name):
    path = config.NOTEBOOKS / name
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert "parameters" in code[1]["metadata"].get("tags", [])
    assert all(c["execution_count"] is None and not c["outputs"] for c in code)
    pm = pytest.importorskip("papermill")
    params = pm.inspect_notebook(str(path))
    assert set(params) == NOTEBOOKS[name]
    assert all(p["help"] for p in params.values())
    # the explorer opens on the study's corpora (the quick profile's parameters)
    study = (["data/runs/quick", "data/reference/local-v4/runs"] if name == "30_explorer.ipynb"
             else "data/runs/quick")
    assert json.loads(params["corpus"]["default"]) == study


@pytest.fixture(scope="module")
def baseline_corpus(tmp_path_factory, flask_world):
    """Scripted baselines on flask (2 policies x 2 conditions, N = 12), written by the study
    launcher; plus synthetic judgments so the tour's lens 3 cell has verdicts to show."""
    from adakit.judging import agreement as ag
    from adakit.study.launch import launch
    from adakit.study.spec import RunSpec, Study

    home = tmp_path_factory.mktemp("home")
    out = home / "data" / "runs" / "mini"
    specs = [RunSpec("mini", m, "flask", "feature_tracing", c, 0, 0, (("turn_bound", 12),))
             for m in ("baseline-tracer", "baseline-close_reader")
             for c in ("natural", "budget_pressure")]
    launch(Study(name="mini", output=out, specs=specs), progress=False)
    c = load_corpus(out, cache=False)
    assert len(c.runs) == 4 and c.runs["finished"].all()
    judged = home / "data" / "judgments" / "mini"
    judged.mkdir(parents=True)
    ag.synthetic_judgments(c.runs, c.turns, seed=1).to_parquet(judged / "judgments.parquet")
    return home, out


def _cell_text(cell: dict) -> str:
    chunks = []
    for o in cell.get("outputs", []):
        chunks.append("".join(o.get("text", "")))
        chunks.append("".join(o.get("data", {}).get("text/plain", "")))
        chunks.append("".join(o.get("data", {}).get("text/html", "")))
    return "\n".join(chunks)


def _outputs(path) -> str:
    nb = json.loads(path.read_text())
    return "\n".join(_cell_text(cell) for cell in nb["cells"])


@pytest.mark.timeout(240)
def test_notebooks_run_on_a_baseline_corpus(baseline_corpus, tmp_path, monkeypatch):
    pm = pytest.importorskip("papermill")
    home, corpus = baseline_corpus
    # the kernel inherits the environment: data under `home`, the fetched worlds where they are
    monkeypatch.setenv("ADAKIT_WORLDS", str(config.worlds_dir()))
    monkeypatch.setenv("ADAKIT_HOME", str(home))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    t0 = time.perf_counter()
    out30 = tmp_path / "30.ipynb"
    pm.execute_notebook(str(config.NOTEBOOKS / "30_explorer.ipynb"), str(out30),
                        cwd=str(tmp_path), progress_bar=False, kernel_name="python3",
                        parameters={"corpus": str(corpus), "turn": 3, "interactive": False})
    text = _outputs(out30)
    assert "a scripted baseline (not an LLM)" in text
    assert "turn 3 of" in text and "STATE CHANNELS AFTER THIS TURN" in text
    assert "whole run:" in text and "never stashed a conclusion" in text
    # the labelling mode's preview (no widgets under papermill): blind, in the judges' words
    cells = json.loads(out30.read_text())["cells"]
    preview = next(_cell_text(c) for c in cells if "labelling.label(" in "".join(c["source"]))
    assert "items on" in preview and "cards to label" in preview
    assert "the first card:" in preview and "unclear" in preview
    assert "baseline-" not in preview and "__r0" not in preview
    out00 = tmp_path / "00.ipynb"
    tour_out = tmp_path / "tour"
    pm.execute_notebook(str(config.NOTEBOOKS / "00_tour.ipynb"), str(out00),
                        cwd=str(tmp_path), progress_bar=False, kernel_name="python3",
                        parameters={"corpus": [str(corpus)], "output": str(tour_out),
                                    "turn_bound": 12, "solutions": True})
    text = _outputs(out00)
    # exercise 1's answer (lens 0's LOC viewed) is not shown above its check, only after it
    cells = json.loads(out00.read_text())["cells"]
    check = next(i for i, c in enumerate(cells)
                 if "exercises.check_distinct_lines" in "".join(c["source"]))
    before = "\n".join(_cell_text(c) for c in cells[:check])
    after = "\n".join(_cell_text(c) for c in cells[check + 1:check + 3])
    assert "loc_viewed" not in before and "lines_shown" not in before
    assert "loc_viewed" in after and "lines_shown" in after
    assert "✓ right:" in text and "✓ 5 of 5 right" in text and "✗" not in text
    assert exercises.FILL_IN not in text
    assert "verdicts on 4 runs of mini" in text  # lens 3 shows the corpus's judgments
    assert "kind: baseline" in text
    runs = load_corpus(tour_out, cache=False).runs
    assert runs["model"].tolist() == ["baseline-tracer"] and runs["finished"].all()
    assert time.perf_counter() - t0 < 200


def test_map_labels_contrast_with_their_fill_and_move_out_of_small_circles():
    """A name that fits sits inside its circle in a colour readable on the fill; one that does
    not fit goes just above the circle, dark on a white halo."""
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import Normalize

    fig = Figure(figsize=(4, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    lay = pd.DataFrame([
        {"kind": "file", "path": "a.py", "name": "a.py", "x": 3.0, "y": 5.0, "r": 2.5},
        {"kind": "file", "path": "pkg/long_module_name.py", "name": "long_module_name.py",
         "x": 8.0, "y": 2.0, "r": 0.3},
        {"kind": "dir", "path": "pkg", "name": "pkg", "x": 8.0, "y": 2.0, "r": 1.0},
    ])
    values = pd.Series({"a.py": 100.0, "pkg/long_module_name.py": 5.0})
    cmap, norm = colormaps["Reds"], Normalize(0, 100)
    explorer._label_files(fig, ax, lay, values, cmap, norm, top=4)
    texts = {t.get_text(): t for t in ax.texts}
    assert set(texts) == {"a.py", "long_module_name.py"}  # folders are never named
    inside, above = texts["a.py"], texts["long_module_name.py"]
    assert explorer._luminance(cmap(norm(100.0))) < 0.5 and inside.get_color() == "white"
    assert inside.get_position() == (3.0, 5.0) and not inside.get_path_effects()
    assert above.get_position()[1] == pytest.approx(2.3) and above.get_verticalalignment() == "bottom"
    assert above.get_color() == "#1F1F1F" and above.get_path_effects()
    x = above.get_position()[0]
    assert x < 8.0  # pulled left so the whole name stays inside the map
    fig.canvas.draw()
    box = above.get_window_extent(fig.canvas.get_renderer())
    frame = ax.get_window_extent(fig.canvas.get_renderer())
    assert frame.x0 - 1 <= box.x0 and box.x1 <= frame.x1 + 1
