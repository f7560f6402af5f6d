"""The exercises of the guided tour (notebook 00): the hand-made trajectory of exercise 2, the
checks that grade a student's answers, and reference answers for testing the notebook.

Exercise 1 asks for the distinct lines a run was shown (lens 0's *LOC viewed*); exercise 2 asks
for the Table 5 tags of five transitions (lens 2). The reference answers are worked out
independently of the lenses they check: exercise 1 counts every (file, line) pair once instead
of merging ranges, and exercise 2's tags were assigned by hand from Table 5.
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral, Real
from typing import Any

import pandas as pd

from adakit.lenses import policy

#: Exercise 2's tags, worked out by hand from Table 5 for :func:`mini_trajectory`.
_MINI_TAGS = ("zoom in", "close read", "trace", "skim", "dump")

FILL_IN = "✎ fill in your answer"


def mini_trajectory() -> pd.DataFrame:
    """Six tool calls of one made-up run (five transitions), in the turns-table shape.

    Turn 4 is an EXP whose jump landed in ``src/routing.py``; that file is its target.
    """
    rows = [
        (1, "OVW", "src/app.py", None, None),
        (2, "PKR", "src/app.py", 10, 49),
        (3, "PKR", "src/app.py", 50, 89),
        (4, "EXP", "src/routing.py", 5, 30),
        (5, "PKR", "src/helpers.py", 1, 40),
        (6, "MEM", None, None, None),
    ]
    frame = pd.DataFrame(rows, columns=["turn", "tool", "file", "start_line", "end_line"])
    return frame.assign(run_id="mini")


def answer_distinct_lines(reads: pd.DataFrame) -> int:
    """Exercise 1's reference answer: the distinct (file, line) pairs in a reads table."""
    return len({(r.file, line) for r in reads.itertuples()
                for line in range(int(r.start_line), int(r.end_line) + 1)})


def answer_tags() -> list[str]:
    """Exercise 2's reference answer: the tags of :func:`mini_trajectory`'s transitions."""
    return list(_MINI_TAGS)


def _one_run(census: pd.DataFrame) -> pd.Series:
    if len(census) != 1:
        raise ValueError(f"exercise 1 is about one run; the census has {len(census)} rows")
    return census.iloc[0]


def check_distinct_lines(answer: Any, census: pd.DataFrame) -> str:
    """Grade exercise 1 against lens 0 (``surface.run_surface`` of the one run).

    A blank answer (None) asks to fill it in; a wrong one says whether it is too high or too
    low, with a hint, never the expected number (only a right answer shows lens 0's count).
    """
    row = _one_run(census)
    expected, shown = int(row["loc_viewed"]), int(row["lines_shown"])
    if answer is None:
        return f"{FILL_IN}: set my_distinct_lines to a number (it is None)"
    if isinstance(answer, bool) or not isinstance(answer, Real):
        return f"✗ my_distinct_lines should be a number of lines, not {answer!r}"
    if answer == expected:
        return (f"✓ right: {expected} distinct lines (lens 0's LOC viewed)\n"
                f"lines shown with repeats: {shown} ({shown - expected} shown again)")
    exact = answer if isinstance(answer, Integral) else f"{answer:g}"
    if answer > expected:
        return (f"✗ not quite: {exact} is too many. Did you count overlapping ranges twice? "
                "Change my_distinct_lines and run the check again.")
    return (f"✗ not quite: {exact} is too few. Did you miss a range, or count an inclusive "
            "range one short? Change my_distinct_lines and run the check again.")


def _normal_tag(tag: Any) -> str:
    """A tag as lens 2 spells it: any capitalisation, surrounding or doubled spaces ignored."""
    return " ".join(str(tag).split()).lower()


def check_tags(answer: Sequence[Any], trajectory: pd.DataFrame | None = None) -> str:
    """Grade exercise 2 against lens 2's tags of ``trajectory`` (default: the mini trajectory).

    Each transition is marked right or wrong without showing lens 2's tag or rule; a tag that
    is not one of Table 5's codes is pointed out as such. Capitalisation and surrounding
    spaces do not matter. Any blank (None) asks to fill in the answer first.
    """
    lens2 = policy.tag_transitions(trajectory if trajectory is not None else mini_trajectory())
    answer = list(answer)
    blanks = sum(tag is None for tag in answer)
    if blanks:
        return f"{FILL_IN}: {blanks} of the {len(answer)} tags in my_tags are still None"
    if len(answer) != len(lens2):
        return (f"✗ give exactly {len(lens2)} tags, one per transition "
                f"(you gave {len(answer)})")
    known = {_normal_tag(t) for t in policy.TAGS}
    yours = [_normal_tag(t) for t in answer]
    ok = [y == _normal_tag(k) for y, k in zip(yours, lens2["tag"].astype(str), strict=True)]
    marks = ["✓" if good else ("✗ not a Table 5 tag" if y not in known else "✗")
             for y, good in zip(yours, ok, strict=True)]
    check = pd.DataFrame({
        "transition": [f"{a}→{b}" for a, b in zip(lens2["turn_from"], lens2["turn_to"],
                                                   strict=True)],
        "tools": [f"{a} → {b}" for a, b in zip(lens2["from_tool"], lens2["to_tool"],
                                               strict=True)],
        "yours": yours, "check": marks})
    right = sum(ok)
    mark = "✓" if right == len(check) else "✗"
    tail = "" if right == len(check) else " (fix the ✗ rows and run the check again)"
    return f"{_left_table(check)}\n{mark} {right} of {len(check)} right{tail}"


def _left_table(frame: pd.DataFrame) -> str:
    """A small table as left-aligned text columns."""
    cols = [[str(c), *map(str, frame[c])] for c in frame.columns]
    widths = [max(map(len, col)) for col in cols]
    rows = zip(*cols, strict=True)
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)
