"""Process diagnostics (issue 15): every effect-label rule and detector on hand-built runs,
calibrated thresholds and the LCS alignment checked by hand, and ``adakit diagnose`` on the CI
study's baselines and on the imported example trajectories."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from adakit.diagnostics import align as al
from adakit.diagnostics import detectors as dt
from adakit.diagnostics import steps as st
from adakit.diagnostics.steps import Step
from adakit.record import (
    ConditionInfo,
    End,
    Header,
    ModelInfo,
    RunFile,
    TaskInfo,
    ToolCall,
    ToolMetrics,
    Turn,
    WorldInfo,
)

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "trajectories"
PATCH = ("diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n")


def S(turn: int, tool: str | None, run: str = "r", **kw) -> Step:
    return Step(run_id=run, turn=turn, tool=tool, **kw)


def trace(steps: list[Step], patch: str | None = None, conclusion: str = "",
          world: tuple[str, ...] = ()) -> st.Trace:
    facts = st.make_facts("r", steps, st.parse_patch(patch) if patch else None, conclusion, world)
    tr = st.Trace(steps, facts)
    st.label_trace(tr)
    return tr


# --------------------------------------------------------------------------- labels


def test_reasoning_and_failed():
    tr = trace([S(1, None), S(2, None, error="malformed"), S(3, "PKR", file="a.py",
                                                            start_line=1, end_line=5,
                                                            error="tool_error"),
                S(4, "EXE", error="exit 1"), S(5, "EXE")])
    assert tr.labels == ["reasoning", "failed", "failed", "failed", "neutral"]


def test_edits_against_the_final_patch():
    tr = trace([S(1, "PKR", file="a.py", start_line=1, end_line=9),
                S(2, "EDT", file="a.py", added="x = 3", removed="x = 1"),
                S(3, "EDT", file="a.py", added=None),  # text unknown: kept when the file is patched
                S(4, "EDT", file="a.py", added="x = 2", removed="x = 3"),
                S(5, "EDT", file="b.py", added="y = 1"),
                S(6, "SUB", finalize=True)], patch=PATCH)
    assert tr.facts.anchor_source == "patch" and tr.facts.anchors == {"a.py"}
    assert tr.labels == ["justified", "reverted", "survived", "survived", "reverted", "recorded"]


def test_reads_outside_the_patch_files_are_off_anchor():
    tr = trace([S(1, "PKR", file="c.py", start_line=1, end_line=30),  # never patched, never used
                S(2, "PKR", file="a.py", start_line=1, end_line=9),
                S(3, "EDT", file="a.py", added="x = 2", removed="x = 1"),
                S(4, "SUB", finalize=True)], patch=PATCH)
    assert tr.facts.anchor_source == "patch" and tr.facts.anchors == {"a.py"}
    assert tr.labels == ["off-anchor", "justified", "survived", "recorded"]


def test_the_last_edit_of_a_patched_file_survives_even_when_its_text_differs():
    tr = trace([S(1, "EDT", file="a.py", added="x=2  # formatted otherwise")], patch=PATCH)
    assert tr.labels == ["survived"]


def test_edits_without_a_patch_survive_unless_undone():
    undone = trace([S(1, "EDT", file="a.py", added="foo()"),
                    S(2, "EDT", file="c.py", added="bar()"),
                    S(3, "EDT", action="git checkout", undo=True),  # names no file: undoes all
                    S(4, "EDT", file="d.py", added="baz()")])
    assert undone.labels == ["reverted", "reverted", "reverted", "survived"]
    swapped = trace([S(1, "EDT", file="a.py", added="foo()", removed="bar()"),
                     S(2, "EDT", file="a.py", added="bar()", removed="foo()"),
                     S(3, "EDT", file="e.py", added="z"),
                     S(4, "EDT", file="e.py", action="rm", undo=True)])
    assert swapped.labels == ["reverted", "survived", "reverted", "reverted"]


def test_recorded_justified_and_off_anchor():
    conclusion = "The flow starts in pkg/app.py and parse_args hands over to __init__.py."
    tr = trace([S(1, "MEM"), S(2, "BKM"),
                S(3, "PKR", file="pkg/app.py", start_line=1, end_line=20),
                S(4, "EXP", symbol="parse_args"),
                S(5, "EXP", symbol="ab"),  # too short to count as named
                S(6, "PKR", file="pkg/__init__.py", start_line=1, end_line=5),  # generic name
                S(7, "PKR", file="pkg/util.py", start_line=1, end_line=5),
                S(8, "OVW", file="pkg"),  # a folder holding an anchor is not off-anchor
                S(9, "CON", finalize=True, text=conclusion)], conclusion=conclusion)
    assert tr.facts.anchor_source == "conclusion" and tr.facts.anchors == {"pkg/app.py"}
    assert tr.labels == ["recorded", "recorded", "justified", "justified", "neutral",
                         "off-anchor", "off-anchor", "justified", "recorded"]


def test_anchor_fallbacks_world_then_none():
    steps = [S(1, "PKR", file="x.py", start_line=1, end_line=2),
             S(2, "PKR", file="core.py", start_line=1, end_line=2)]
    world = trace(list(steps), conclusion="nothing cited", world=("core.py",))
    assert world.facts.anchor_source == "world" and world.labels == ["off-anchor", "neutral"]
    bare = trace(list(steps), conclusion="nothing cited")
    assert bare.facts.anchor_source == "none" and bare.labels == ["neutral", "neutral"]


def test_rules_are_a_table_with_a_meaning_without_patch():
    rules = st.rules_frame()
    assert list(rules["label"]) == ["reasoning", "failed", "survived", "reverted", "recorded",
                                    "justified", "off-anchor", "neutral"]
    assert rules["without_patch"].str.len().min() > 0


def _run_file(turns: list[Turn], submission: str | None = None) -> RunFile:
    header = Header(run_id="h", model=ModelInfo(name="m"), world=WorldInfo(name="nowhere"),
                    task=TaskInfo(family="issue_resolution"), condition=ConditionInfo(name="n"),
                    turn_bound=10)
    end = End(reason="submit", conclusion="done", submission=submission)
    return RunFile(path=Path("h.jsonl"), header=header, turns=turns, end=end)


def _turn(k: int, tool: str, name: str, params: dict, observation: str = "",
          **metrics) -> Turn:
    return Turn(turn=k, started_at=k, ended_at=k + 1, call=ToolCall(tool=name, params=params),
                observation=observation, metrics=ToolMetrics(tool=tool, **metrics))


def test_steps_of_reads_errors_and_edit_texts_from_the_records():
    rf = _run_file([
        _turn(1, "EXE", "bash", {"command": "python x.py"},
              "Traceback (most recent call last):\n  boom"),
        _turn(2, "EXE", "bash", {"command": "pytest"}, "", exit_code=2),
        _turn(3, "EDT", "str_replace_editor", {"command": "str_replace", "path": "a.py",
                                               "old_str": "x = 1", "new_str": "x = 2"},
              file="a.py", action="str_replace"),
        _turn(4, "EDT", "edit", {"action": "edit 1:1\nx = 2\nend_of_edit"}, file="a.py",
              action="edit"),
        _turn(5, "EDT", "bash", {"command": "sed -i 's/x = 1/x = 2/' a.py"}, file="a.py",
              action="sed -i"),
        _turn(6, "EDT", "bash", {"command": "git checkout a.py"}, action="git checkout"),
        _turn(7, "EXP", "bash", {"command": "grep -rn foo"}, "src/a.py:3: foo\nsrc/b.py:9: foo",
              symbol="foo"),
    ], submission=PATCH)
    steps = st.steps_of(rf)
    assert [s.error for s in steps[:3]] == ["error output", "exit 2", None]
    assert (steps[2].added, steps[2].removed) == ("x = 2", "x = 1")
    assert steps[3].added == "x = 2\n" and (steps[4].added, steps[4].removed) == ("x = 2", "x = 1")
    assert steps[5].undo and not steps[4].undo
    assert steps[6].results == ("src/a.py", "src/b.py")
    facts = st.facts_of(rf, steps)
    assert facts.patch_files == {"a.py"} and facts.patch_added == {"a.py": {"x = 2"}}


# --------------------------------------------------------------------------- detectors


def fired(tr: st.Trace, detector: str, thresholds: dt.Thresholds | None = None) -> pd.DataFrame:
    firings, _ = dt.detect([tr], thresholds)
    return firings[firings["detector"] == detector]


def test_search_loop_fires_and_a_read_of_its_results_breaks_it():
    loop = trace([S(1, "EXP", symbol="url_for"), S(2, "EXP", symbol="def url_for("),
                  S(3, "OVW"), S(4, "EXP", symbol="url_for")])
    rows = fired(loop, "search_loop")
    assert len(rows) == 1 and (rows.iloc[0]["first_turn"], rows.iloc[0]["last_turn"]) == (1, 4)
    assert rows.iloc[0]["severity"] == 3 and "url_for" in rows.iloc[0]["evidence"]
    followed = trace([S(1, "EXP", symbol="url_for"),
                      S(2, "EXP", symbol="url_for", results=("src/helpers.py",)),
                      S(3, "PKR", file="src/helpers.py", start_line=1, end_line=9),
                      S(4, "EXP", symbol="url_for")])
    assert fired(followed, "search_loop").empty
    spread = trace([S(1, "EXP", symbol="url_for")] + [S(k, "MEM") for k in range(2, 8)]
                   + [S(8, "EXP", symbol="url_for"), S(9, "EXP", symbol="url_for")])
    assert fired(spread, "search_loop").empty  # turn 8 is 7 steps after turn 1 (window 5)


def test_reread_churn():
    churn = trace([S(1, "PKR", file="a.py", start_line=10, end_line=40),
                   S(2, "PKR", file="a.py", start_line=15, end_line=45),
                   S(3, "PKR", file="a.py", start_line=10, end_line=40)])
    rows = fired(churn, "reread_churn")
    assert list(rows["severity"]) == [3] and "a.py lines 10-40 read 3 times" in rows.iloc[0]["evidence"]
    onward = trace([S(1, "PKR", file="a.py", start_line=10, end_line=40),
                    S(2, "PKR", file="a.py", start_line=41, end_line=80),
                    S(3, "PKR", file="a.py", start_line=10, end_line=40)])
    assert fired(onward, "reread_churn").empty


def test_tool_oscillation():
    six = trace([S(k, t) for k, t in enumerate(["EXP", "PKR"] * 3, 1)] + [S(7, "CON")])
    rows = fired(six, "tool_oscillation")
    assert list(zip(rows["first_turn"], rows["last_turn"], rows["severity"], strict=True)) == [(1, 6, 6.0)]
    four = trace([S(k, t) for k, t in enumerate(["EXP", "PKR", "EXP", "PKR", "OVW"], 1)])
    assert fired(four, "tool_oscillation").empty
    assert dt.detect([four])[1].loc[0, "stat_tool_oscillation"] == 4


def test_verification_skip():
    blind = trace([S(1, "EDT", file="a.py", action="str_replace", added="x")])
    assert len(fired(blind, "verification_skip")) == 1
    careful = trace([S(1, "PKR", file="a.py", start_line=1, end_line=9),
                     S(2, "EDT", file="a.py", action="str_replace", added="x"),
                     S(3, "EDT", file="new.py", action="create", added="y"),
                     S(4, "EXE"), S(5, "SUB", finalize=True)])
    assert fired(careful, "verification_skip").empty
    unchecked = trace([S(1, "PKR", file="a.py", start_line=1, end_line=9),
                       S(2, "EDT", file="a.py", action="str_replace", added="x"),
                       S(3, "SUB", finalize=True)])
    rows = fired(unchecked, "verification_skip")
    assert list(zip(rows["first_turn"], rows["last_turn"], strict=True)) == [(2, 3)]
    text = "It all happens in a.py."
    outlined = trace([S(1, "OVW", file="a.py"), S(2, "CON", finalize=True, text=text)],
                     conclusion=text)
    assert len(fired(outlined, "verification_skip")) == 1
    peeked = trace([S(1, "PKR", file="a.py", start_line=1, end_line=9),
                    S(2, "CON", finalize=True, text=text)], conclusion=text)
    assert fired(peeked, "verification_skip").empty


def test_edit_revert_cycle():
    cycle = trace([S(1, "PKR", file="a.py", start_line=1, end_line=5),
                   S(2, "EDT", file="a.py", added="x"),
                   S(3, "EDT", file="a.py", action="git checkout", undo=True),
                   S(4, "EDT", file="a.py", added="y")])
    rows = fired(cycle, "edit_revert_cycle")
    assert len(rows) == 1 and (rows.iloc[0]["first_turn"], rows.iloc[0]["last_turn"]) == (2, 4)
    swap = trace([S(1, "EDT", file="a.py", added="x=2", removed="x=1"),
                  S(2, "EDT", file="a.py", added="x=1", removed="x=2"),
                  S(3, "EDT", file="a.py", added="x=3", removed="x=1")])
    assert len(fired(swap, "edit_revert_cycle")) == 1
    cleanup = trace([S(1, "EDT", file="t.py", action="create", added="x"),
                     S(2, "EXE"), S(3, "EDT", file="t.py", action="rm", undo=True)])
    assert fired(cleanup, "edit_revert_cycle").empty


def test_premature_conclusion():
    text = "See a.py and b.py."
    early = trace([S(1, "CON", text=text), S(2, "PKR", file="a.py", start_line=1, end_line=3),
                   S(3, "PKR", file="b.py", start_line=1, end_line=3)])
    rows = fired(early, "premature_conclusion")
    assert list(rows["first_turn"]) == [1] and rows.iloc[0]["severity"] == 1.0
    half = trace([S(1, "PKR", file="a.py", start_line=1, end_line=3),
                  S(2, "CON", text=text), S(3, "PKR", file="b.py", start_line=1, end_line=3)])
    assert fired(half, "premature_conclusion").empty
    lower = dt.frozen_thresholds()
    lower["premature_conclusion"]["min_unread_share"] = 0.5
    assert list(fired(half, "premature_conclusion", lower)["severity"]) == [0.5]


def test_calibrated_thresholds_by_hand():
    per_run = pd.DataFrame({f"stat_{d}": 0.0 for d in dt.DETECTOR_NAMES}, index=range(5))
    per_run["stat_search_loop"] = [0, 2, 3, 5, 4]  # candidates 2, 3, 4, 5
    per_run["stat_tool_oscillation"] = [4, 8, 0, 0, 0]
    per_run["stat_premature_conclusion"] = [0.25, 0.5, 1.0, 0, 0]
    th = dt.calibrate(per_run, 90)
    # numpy's linear percentile of [2, 3, 4, 5] at 90: 4.7, rounded up to 5
    assert th["search_loop"]["min_repeats"] == 5
    assert th["search_loop"]["window"] == 5  # structural thresholds stay frozen
    assert th["tool_oscillation"]["min_length"] == 8  # 4 + 0.9 * 4 = 7.6 -> 8
    assert th["premature_conclusion"]["min_unread_share"] == pytest.approx(0.9)  # 0.5 + 0.8*0.5
    assert th["reread_churn"]["min_reads"] == 3  # no candidates: frozen
    low = dt.calibrate(per_run, 10)
    assert low["search_loop"]["min_repeats"] == 3  # 2.3 -> 3
    assert low["premature_conclusion"]["min_unread_share"] == 0.5  # 0.3 is below the floor
    frame = dt.thresholds_frame(th, dt.with_candidates(per_run), 90)
    source = frame.set_index(["detector", "threshold"])["source"]
    assert source[("search_loop", "min_repeats")] == "calibrated (p90)"
    assert source[("search_loop", "window")] == "frozen"
    assert source[("reread_churn", "min_reads")] == "frozen"


def test_rates_per_hundred_steps_with_intervals():
    per_run = pd.DataFrame({"run_id": ["a", "b", "c"], "steps": [10, 30, 20],
                            **{f"n_{d}": [0, 0, 0] for d in dt.DETECTOR_NAMES}})
    per_run["n_search_loop"] = [1, 2, 0]
    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "model": ["m", "m", "k"]})
    rates = dt.detector_rates(per_run, runs, "model", n_resamples=200)
    row = rates[(rates["model"] == "m") & (rates["detector"] == "search_loop")].iloc[0]
    assert row["rate"] == pytest.approx(100 * 3 / 40)
    assert row["rate_lo"] <= row["rate"] <= row["rate_hi"] and row["n_runs"] == 2
    lone = rates[(rates["model"] == "k") & (rates["detector"] == "search_loop")].iloc[0]
    assert lone["rate"] == 0 and lone["note"] == "too few runs"


# --------------------------------------------------------------------------- alignment


def test_lcs_alignment_and_first_divergence_by_hand():
    cols, score = al.lcs_align(list("OPEPC"), list("OEPC"))
    assert score == 4
    assert cols == [(0, 0, "match"), (1, None, "a_only"), (2, 1, "match"), (3, 2, "match"),
                    (4, 3, "match")]
    cols, score = al.lcs_align(["X"], ["Y"])
    assert score == 0 and cols == [(0, None, "a_only"), (None, 0, "b_only")]
    cols, score = al.lcs_align(["X"], ["Y"], match=1, mismatch=0.5, gap=0)
    assert score == 0.5 and cols == [(0, 0, "mismatch")]
    cols, score = al.lcs_align(list("AB"), list("AB"), match=2, mismatch=-1, gap=-1)
    assert score == 4 and all(k == "match" for _, _, k in cols)
    with pytest.raises(ValueError):
        al.lcs_align(["A"], ["A"], match=1, mismatch=2)


def test_levels_first_divergence_and_file_selection():
    a = [S(1, "OVW", "A", file="x.py"), S(2, "PKR", "A", file="x.py", start_line=1, end_line=5),
         S(3, "PKR", "A", file="y.py", start_line=1, end_line=5)]
    b = [S(1, "OVW", "B", file="x.py"), S(2, "PKR", "B", file="x.py", start_line=1, end_line=5),
         S(3, "PKR", "B", file="z.py", start_line=1, end_line=5)]
    res = al.align(a, b)
    assert set(res.levels) == {"action", "file"} and res.finest == "file"
    assert res.levels["action"].first_divergence is None
    assert res.levels["action"].score == 3 and res.levels["file"].score == 2
    assert res.levels["file"].first_divergence == (3, None)
    assert len(res.spans) == 1
    span = res.spans[0]
    assert (span.a_turns, span.b_turns, span.kind) == ((3, 3), (3, 3), "file selection")


def test_symbol_level_function_selection_and_edit_stability():
    def symbol_of(file: str, line: int) -> str:
        return "foo" if line < 10 else "bar"

    a = [S(1, "PKR", "A", file="f.py", start_line=1, end_line=5),
         S(2, "PKR", "A", file="f.py", start_line=20, end_line=25)]
    b = [S(1, "PKR", "B", file="f.py", start_line=1, end_line=5),
         S(2, "PKR", "B", file="f.py", start_line=2, end_line=8)]
    res = al.align(a, b, symbol_of=symbol_of)
    assert res.finest == "symbol" and res.levels["file"].first_divergence is None
    assert res.levels["symbol"].first_divergence == (2, None)
    assert [s.kind for s in res.spans] == ["function selection"]
    edits_a = [S(1, "PKR", "A", file="f.py", start_line=1, end_line=5),
               S(2, "EDT", "A", file="f.py"), S(3, "EDT", "A", file="f.py"), S(4, None, "A")]
    edits_b = [S(1, "PKR", "B", file="f.py", start_line=1, end_line=5), S(2, "EDT", "B", file="f.py")]
    res = al.align(edits_a, edits_b)
    assert len(res.steps_a) == 3  # the reasoning turn has no token
    assert [(s.kind, s.a_turns, s.b_turns) for s in res.spans] == [("edit stability", (3, 3), None)]
    assert al.summary_row(res)["spans_edit_stability"] == 1


def test_choose_references():
    runs = pd.DataFrame({"run_id": ["a", "b", "c", "d"], "world": "w", "task": "t",
                         "target": ["x", "x", "x", "y"]})
    scores = pd.Series({"a": 0.2, "b": 0.9})
    quality = pd.Series({"a": 0.5, "b": 0.1, "c": 0.8, "d": 0.3})
    assert al.choose_references(runs, scores, quality) == {("w", "t", "x"): "b",
                                                          ("w", "t", "y"): "d"}
    assert al.choose_references(runs, None, quality)[("w", "t", "x")] == "c"
    steps = pd.Series({"a": 9, "b": 3, "c": 5})
    assert al.choose_references(runs, None, None, steps)[("w", "t", "x")] == "b"
    assert al.choose_references(runs, scores, quality, named="a")[("w", "t", "x")] == "a"


def test_alignment_figure_shades_the_spans():
    a = [S(1, "OVW", "A", file="x.py"), S(2, "PKR", "A", file="y.py", start_line=1, end_line=3)]
    b = [S(1, "OVW", "B", file="x.py"), S(2, "PKR", "B", file="z.py", start_line=1, end_line=3)]
    fig = al.plot_alignment(al.align(a, b))
    ax = fig.axes[0]
    assert len(ax.patches) >= 5  # one shaded span (file selection) and four step boxes
    assert "file selection" in [t.get_text() for t in ax.get_legend().get_texts()]


# --------------------------------------------------------------------------- the command


@pytest.fixture
def ci_corpus(ci_baseline_corpus, tmp_path) -> Path:
    """A private copy of the session's CI baseline runs (the command writes beside it)."""
    import shutil

    copy = tmp_path / "runs"
    shutil.copytree(ci_baseline_corpus, copy)
    return copy


def test_cli_on_the_ci_study(ci_corpus, capsys):
    from adakit.cli import main

    assert main(["diagnose", str(ci_corpus), "--calibrate", "--resamples", "100"]) == 0
    text = capsys.readouterr().out
    assert "calibrated at the 90th percentile" in text and "firings per 100 steps" in text
    for model in ("baseline-close_reader", "baseline-skimmer", "baseline-tracer"):
        assert model in text
    out = ci_corpus.parent / "runs.diagnostics"
    tables = {p.stem: pd.read_parquet(p) for p in out.glob("*.parquet")}
    assert set(tables) == {"steps", "runs", "firings", "thresholds", "alignments", "columns",
                           "spans"}
    steps, runs = tables["steps"], tables["runs"]
    assert len(runs) == 13 and steps["label"].notna().all()
    assert set(steps["label"]) <= set(st.LABELS) and "recorded" in set(steps["label"])
    # Ada's conclusions cite files; a conclusion citing none falls back on the D13 anchors
    assert set(runs["anchor_source"]) == {"conclusion", "world"}
    assert (runs["anchor_source"] == "conclusion").sum() >= 10
    # each task's other runs are aligned with its reference; the world is on disk: 3 levels
    assert len(tables["alignments"]) == len(runs) - runs["reference"].nunique()
    assert tables["alignments"]["score_symbol"].notna().all()
    assert str(tables["columns"]["turn_a"].dtype) == "Int64"  # gaps are missing turns
    named = runs["run_id"].iloc[0]
    assert main(["diagnose", str(ci_corpus), "--reference", named, "--resamples", "50",
                 "--out", str(ci_corpus.parent / "named")]) == 0
    aligned = pd.read_parquet(ci_corpus.parent / "named" / "alignments.parquet")
    assert named in set(aligned["run_a"])
    assert main(["diagnose", str(ci_corpus), "--reference", "nope", "--out",
                 str(ci_corpus.parent / "x")]) == 2
    assert main(["diagnose", str(ci_corpus), "--by", "colour"]) == 2
    assert {"model", "condition", "task"} <= set(runs.columns)  # the run axes, per run


def test_cli_on_imported_fixtures(tmp_path, capsys):
    from adakit.cli import main
    from adakit.importers import batch

    out = tmp_path / "imported"
    for fmt, folder in (("swe-agent", "swe_agent"), ("mini-swe-agent", "mini_swe_agent"),
                        ("openhands", "openhands"), ("generic", "generic")):
        batch.import_paths(fmt, [FIXTURES / folder], out, progress=False)
    assert main(["diagnose", str(out), "--by", "agent", "--resamples", "50"]) == 0
    text = capsys.readouterr().out
    assert "firings per 100 steps by detector and agent" in text and "swe-agent" in text
    steps = pd.read_parquet(tmp_path / "imported.diagnostics" / "steps.parquet")
    swe = steps[steps["run_id"].str.startswith("swe-agent__pallets__flask-5001")]
    label = dict(zip(swe["turn"], swe["label"], strict=True))
    # reproduce.py is created, edited and removed (not in the patch); app.py's edit is the patch
    assert (label[8], label[9], label[14]) == ("reverted", "reverted", "reverted")
    assert (label[10], label[12], label[15]) == ("failed", "survived", "recorded")
    mini = steps[steps["run_id"].str.startswith("mini-swe-agent__pallets__flask-5003")]
    label = dict(zip(mini["turn"], mini["label"], strict=True))
    assert (label[6], label[8], label[9]) == ("failed", "survived", "neutral")
    runs = pd.read_parquet(tmp_path / "imported.diagnostics" / "runs.parquet")
    assert runs.set_index("run_id")["has_patch"].sum() == 4
    # every fixture is its own issue; aligned as runs on one repository, they have a reference
    swe = runs["run_id"][runs["run_id"].str.startswith("swe-agent__pallets__flask-5002")].iloc[0]
    assert main(["diagnose", str(out), "--same-task", "world", "task", "--reference", swe,
                 "--no-symbols", "--resamples", "20", "--out", str(tmp_path / "one")]) == 0
    aligned = pd.read_parquet(tmp_path / "one" / "alignments.parquet")
    from adakit.record import load_corpus

    table = load_corpus(out, cache=False).runs.set_index("run_id")
    peers = table[(table["world"] == table.loc[swe, "world"])
                  & (table["task"] == table.loc[swe, "task"])]
    assert len(peers) >= 5 and set(aligned["run_a"]) == {swe}
    assert set(aligned["run_b"]) == set(peers.index) - {swe}
    assert aligned["score_symbol"].isna().all() and (aligned["score_action"] >= 1).all()


def test_cli_reads_several_folders_as_one_corpus(ci_corpus, tmp_path, capsys):
    """Ada's runs beside imported ones (as the quick profile reads its runs beside the
    reference corpus): one diagnosis, and the output folder must be named."""
    from adakit.cli import main
    from adakit.importers import batch
    from adakit.record import load_corpus

    imported = tmp_path / "imported"
    batch.import_paths("mini-swe-agent", [FIXTURES / "mini_swe_agent"], imported, progress=False)
    n_imported = len(load_corpus(imported, cache=False).runs)
    assert main(["diagnose", str(ci_corpus), str(imported), "--resamples", "20"]) == 2
    assert "--out" in capsys.readouterr().out
    assert main(["diagnose", str(ci_corpus), str(tmp_path / "absent"), "--out",
                 str(tmp_path / "x")]) == 2
    out = tmp_path / "both"
    assert main(["diagnose", str(ci_corpus), str(imported), "--by", "agent", "--resamples", "20",
                 "--no-symbols", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"{13 + n_imported} runs" in text and "mini-swe-agent" in text
    runs = pd.read_parquet(out / "runs.parquet")
    assert len(runs) == 13 + n_imported and runs["run_id"].is_unique


def test_score_association_separates_difficulty_from_failure():
    runs = pd.DataFrame({"run_id": list("abcdef"), "world": "w", "task": "t",
                         "target": ["x", "x", "y", "y", "z", "z"]})
    per_run = pd.DataFrame({"run_id": list("abcdef"),
                            **{f"n_{d}": 0 for d in dt.DETECTOR_NAMES}})
    # search loops fire on both runs of the hard task z only: lower scores across tasks
    per_run["n_search_loop"] = [0, 0, 0, 0, 1, 2]
    # re-read churn fires on the weaker run of tasks x and y: lower scores within tasks
    per_run["n_reread_churn"] = [1, 0, 1, 0, 0, 0]
    scores = pd.Series({"a": 0.6, "b": 0.8, "c": 0.5, "d": 0.9, "e": 0.2, "f": 0.2})
    table = dt.score_association(per_run, scores, runs).set_index("detector")
    loop, churn = table.loc["search_loop"], table.loc["reread_churn"]
    assert loop["diff"] == pytest.approx(0.2 - 0.7) and loop["tasks_mixed"] == 0
    assert loop["reading"] == "no task holds both kinds of run"
    # centred: a -0.1, c -0.2 (fired) against b +0.1, d +0.2 (clean): -0.15 - 0.15
    assert churn["diff_within_task"] == pytest.approx(-0.3)
    assert churn["reading"].startswith("lower scores within tasks")
    assert table.loc["tool_oscillation", "reading"].startswith("cannot tell")


def _looping_run(folder: Path) -> Path:
    from adakit.record import RunWriter

    rf = _run_file([_turn(1, "EXP", "search_dir", {"search_term": "url_for"}, "", symbol="url_for"),
                    _turn(2, "EXP", "search_dir", {"search_term": "url_for"}, "", symbol="url_for"),
                    _turn(3, "MEM", "think", {"thought": "hm"}),
                    _turn(4, "EXP", "search_dir", {"search_term": "url_for("}, "",
                          symbol="url_for"),
                    _turn(5, "CON", "message", {"content": "done"})])
    path = folder / "loop.jsonl"
    with RunWriter(path) as w:
        w.write(rf.header)
        for t in rf.turns:
            w.write(t)
        w.write(rf.end)
    return path


def test_explorer_marks_firings_on_the_turn_axis(tmp_path):
    from adakit.record import load_corpus
    from adakit.workbench import explorer

    _looping_run(tmp_path)
    corpus = load_corpus(tmp_path, cache=False)
    view = explorer.RunView(corpus, "h")
    assert view.firings == [{"detector": "search_loop", "first_turn": 1, "last_turn": 4,
                             "evidence": view.firings[0]["evidence"]}]
    assert view.jumps["detector:search_loop"] == [1]
    assert "DETECTOR FIRINGS" in view.text(2) and "DETECTOR FIRINGS" not in view.text(5)
    strip = explorer.firing_strip_text(view.firings, view.turn_numbers, current=2)
    assert strip.splitlines() == ["turns SSSS.", "       ^", "key: S search_loop"]
    html = explorer.firing_strip_html(view.firings, view.turn_numbers, current=2)
    assert html.count("position:absolute") == 2 and "search_loop" in html
    none = explorer.firing_marks(pd.DataFrame(columns=dt.FIRING_COLUMNS), "h")
    quiet = explorer.RunView(corpus, "h", firings=pd.DataFrame(columns=dt.FIRING_COLUMNS))
    assert none == [] and quiet.firings == [] and "detector:search_loop" not in quiet.jumps
    static = explorer.render_static(corpus, "h", turn=2, show_map=False)
    assert "turns SSSS." in static.text
    pytest.importorskip("ipywidgets")
    w = explorer.build_explorer(corpus, run_id="h", turn=1, show_map=False)
    assert "search_loop" in w.firing_strip.value
    assert "detector:search_loop" in [v for _, v in w.jump_select.options]


def test_written_tables_keep_turns_as_integers():
    from adakit.diagnostics import diagnosis

    frame = pd.DataFrame({"turn_a": [1, None, 3], "diverge_file_b": [None, None, 4],
                          "score_file": [1, 0.5, None]})
    assert list(diagnosis._one_type(frame["turn_a"])) == [1, pd.NA, 3]
    assert str(diagnosis._one_type(frame["diverge_file_b"]).dtype) == "Int64"
    assert diagnosis._one_type(frame["score_file"]).equals(frame["score_file"])
    tr = trace([S(1, "EDT", action="patch")], patch=PATCH)
    assert tr.labels == ["survived"]  # an edit naming no file cannot be checked: kept
