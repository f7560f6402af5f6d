"""The tour's display helpers (adakit/workbench/exercises.py): answers kept back until a check
passes, readable line numbers, and lens 3's judges named with their weaknesses.

The exercise checks' messages themselves are tested in tests/test_explorer.py.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from adakit import config
from adakit.llm.models import ModelSpec
from adakit.workbench import exercises


def _census(loc_viewed: int = 45, lines_shown: int = 56) -> pd.DataFrame:
    return pd.DataFrame({"run_id": ["r"], "loc_viewed": [loc_viewed],
                         "lines_shown": [lines_shown]})


@pytest.mark.parametrize(("answer", "passed"), [(None, False), (44, False), (46.0, False),
                                                ("45", False), (45, True), (45.0, True)])
def test_grade_passes_only_the_right_answer(answer, passed):
    check = exercises.check_distinct_lines(answer, _census())
    assert check.passed is passed
    assert isinstance(check, str) and check.startswith("✓" if passed else ("✗", exercises.FILL_IN))


def test_lens0_count_is_withheld_until_the_check_passes():
    census = _census()
    wrong = exercises.check_distinct_lines(None, census)
    shown = exercises.after_check(wrong, census[["loc_viewed", "lines_shown"]], "lens 0's count")
    assert isinstance(shown, exercises.Withheld)
    assert "45" not in repr(shown) and "45" not in shown._repr_html_()
    assert "exercise 1's check says ✓" in repr(shown)
    right = exercises.check_distinct_lines(45, census)
    table = exercises.after_check(right, census[["loc_viewed"]], "lens 0's count")
    assert table["loc_viewed"].tolist() == [45]


def test_density_table_keeps_its_distinct_lines_back():
    density = pd.DataFrame({"file": ["a.py", "b.py"], "lines_shown": [60, 45],
                            "distinct_lines": [40, 5], "reads": [3, 1]})
    wrong = exercises.check_distinct_lines(44, _census())
    kept = exercises.keep_back(wrong, density, ["distinct_lines"])
    assert set(kept["distinct_lines"]) == {exercises.KEPT_BACK}
    assert kept["lines_shown"].tolist() == [60, 45]  # the other columns are untouched
    assert density["distinct_lines"].tolist() == [40, 5]  # the input is not changed
    right = exercises.check_distinct_lines(45, _census())
    assert exercises.keep_back(right, density, ["distinct_lines"]) is density
    with pytest.raises(KeyError, match="no column loc"):
        exercises.keep_back(wrong, density, ["loc"])


def test_readable_shows_whole_line_numbers_and_no_nan():
    table = exercises.readable(exercises.mini_trajectory())
    text = table.to_string()
    assert "10.0" not in text and "NaN" not in text and "None" not in text
    assert table["start_line"].tolist() == [exercises.NO_LINE, 10, 50, 5, 1, exercises.NO_LINE]
    assert all(type(v) is int for v in table["end_line"] if v != exercises.NO_LINE)
    assert table.loc[5, "file"] == exercises.NO_LINE and table.loc[0, "file"] == "src/app.py"


# --------------------------------------------------------------------------- lens 3's judges

REGISTRY = {
    "floor": ModelSpec(name="floor", kind="local", model_id="tiny.gguf", gguf="tiny.gguf",
                       description="Tiny, embedded; the floor model"),
    "floor-t07": ModelSpec(name="floor-t07", kind="local", model_id="tiny.gguf", gguf="tiny.gguf",
                           description="Tiny sampled at 0.7"),
    "small": ModelSpec(name="small", kind="local", model_id="small.gguf", gguf="small.gguf",
                       description="Small, embedded"),
    "hosted": ModelSpec(name="hosted", base_url="https://example.invalid/v1", model_id="big",
                        description="A big hosted model"),
}


def _verdicts(rows: list[tuple[str, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["run_id", "judge"]).assign(family="task_relevance")


def test_lens3_judges_names_the_floor_model_and_its_seats():
    runs = pd.DataFrame({"run_id": ["r1", "r2"], "model": ["small", "hosted"]})
    verdicts = _verdicts([("r1", "floor"), ("r1", "floor-t07"), ("r2", "floor"),
                          ("r2", "hosted"), ("r1", "small")])
    table = exercises.lens3_judges(verdicts, runs, REGISTRY).set_index("judges")
    assert list(table.index) == ["floor, floor-t07", "hosted", "small"]
    floor = table.loc["floor, floor-t07"]
    assert floor["model"] == "Tiny, embedded; the floor model"
    assert (floor["verdicts"], floor["runs"]) == (3, 2)
    # the t07 seat's own description does not say "floor"; the model behind it does
    assert "the floor model" in floor["weakness"]
    assert "2 seats of one model: not independent judges" in floor["weakness"]
    assert "own runs" not in floor["weakness"]
    assert table.loc["small", "weakness"].startswith("a small embedded model")
    assert "it judges its own runs" in table.loc["small", "weakness"]  # r1 is small's run
    assert table.loc["hosted", "weakness"] == "it judges its own runs"
    unknown = exercises.lens3_judges(_verdicts([("r1", "mystery")]), runs, REGISTRY)
    assert unknown["weakness"].tolist() == [exercises.UNKNOWN_JUDGE]


def test_lens3_table_splits_a_model_by_panel_and_warns_when_flat():
    verdicts = _verdicts([("r1", "floor"), ("r2", "floor"), ("r3", "small"), ("r3", "floor")])
    scores = pd.DataFrame({"run_id": ["r1", "r2", "r3", "r4"], "model": ["m", "m", "m", "n"],
                           "relevance": [1.0, 0.96, 0.98, None]})
    table = exercises.lens3_table(scores, verdicts, ["relevance"], REGISTRY)
    assert table.loc[("m", "floor"), "runs"] == 2
    assert table.loc[("m", "floor"), "relevance"] == 0.98
    assert table.loc[("m", "floor, small"), "runs"] == 1
    assert "n" not in table.index.get_level_values("model")  # r4 has no verdict
    seats = _verdicts([("r1", "floor"), ("r1", "floor-t07"), ("r1", "hosted")])
    assert exercises.lens3_table(scores, seats, ["relevance"], REGISTRY).index.tolist() == [
        ("m", "floor ×2, hosted")]  # two seats of one model are named once
    caveat = exercises.lens3_caveat(table, ["relevance"])
    assert caveat and "relevance 0.98–0.98" in caveat and "barely tell" in caveat
    spread = scores.assign(relevance=[1.0, 0.96, 0.5, None])
    assert exercises.lens3_caveat(exercises.lens3_table(spread, verdicts, ["relevance"],
                                                        REGISTRY), ["relevance"]) is None


def test_the_tour_withholds_answers_through_these_helpers():
    """The committed tour shows lens 0's count and the density table only through the gates,
    and every table with line numbers through :func:`exercises.readable`."""
    nb = json.loads((config.NOTEBOOKS / "00_tour.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    shows_count = [c for c in code if '"loc_viewed"' in c]
    assert len(shows_count) == 1 and "exercises.after_check(exercise_1" in shows_count[0]
    density = next(c for c in code if "fp.trace_density" in c)
    assert 'exercises.keep_back(exercise_1' in density and '["distinct_lines"]' in density
    assert any("display(exercises.readable(mini))" in c for c in code)
    lens3 = next(c for c in code if "lens3_scores" in c)
    assert "exercises.lens3_judges(" in lens3 and "exercises.lens3_caveat(" in lens3
