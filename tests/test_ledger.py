"""The ledger (a scaffold aid for small models): what a run did, in order, within its cap."""

from __future__ import annotations

import pytest

from adakit.apparatus.ledger import EMPTY, HEADING, Ledger
from adakit.record import ToolCall, ToolMetrics, Turn, merge_ranges


def turn(n: int, tool: str, error: str | None = None, changes: list | None = None, **metrics) -> Turn:
    return Turn(turn=n, started_at=0.0, ended_at=1.0, call=ToolCall(tool="any"),
                metrics=ToolMetrics(tool=tool, error_type=error, **metrics),
                state_changes=changes or [])


def test_merge_ranges_joins_overlapping_and_touching_ranges_only():
    assert merge_ranges([(10, 20), (1, 5), (6, 8), (15, 30), (40, 41)]) == [(1, 8), (10, 30), (40, 41)]
    assert merge_ranges([]) == []


def test_the_ledger_lists_what_was_done_in_order_of_first_appearance():
    ledger = Ledger()
    assert ledger.render() == EMPTY
    for t in [
        turn(1, "OVW", file="app.py", result_count=4),
        turn(2, "PKR", file="app.py", ranges=[(10, 20)]),
        turn(3, "EXP", file="util.py", ranges=[(1, 3)], symbol="helper", action="definition"),
        turn(4, "PKR", file="app.py", ranges=[(21, 30)]),  # touches 10-20: one range
        turn(5, "MEM", changes=[{"channel": "memory", "op": "add", "title": "flow"}]),
        turn(6, "BKM", ranges=[(12, 12)], file="app.py",
             changes=[{"channel": "bookmark", "op": "add", "file": "app.py", "line": 12}]),
        turn(7, "PKR", file="app.py", ranges=[(50, 60)], error="tool_error"),  # failed: not done
        turn(8, "PKR", file="app.py", ranges=[(5, 9)]),
        turn(9, "OVW", file="app.py"),  # outlined again: already listed
        turn(10, "EXP", file="app.py", symbol="serve", action="references", result_count=2),
    ]:
        ledger.add(t)
    assert ledger.render().splitlines() == [
        HEADING,
        "  outline app.py",
        "  read app.py:5-30",
        "  lookup helper (definition)",
        "  read util.py:1-3",
        "  memory 'flow'",
        "  bookmark app.py:12",
        "  lookup serve (references)",
    ]


def test_a_malformed_turn_adds_nothing():
    ledger = Ledger()
    ledger.add(Turn(turn=1, started_at=0.0, ended_at=1.0, metrics=ToolMetrics(error_type="malformed")))
    assert ledger.render() == EMPTY


@pytest.mark.parametrize("cap", [120, 200, 600])
def test_the_ledger_stays_within_its_cap_and_says_how_many_it_left_out(cap):
    ledger = Ledger(cap)
    for k in range(1, 60):
        ledger.add(turn(k, "PKR", file=f"pkg/module_{k:02d}.py", ranges=[(1, 10)]))
    text = ledger.render()
    assert len(text) <= cap
    lines = text.splitlines()
    assert lines[0] == HEADING
    dropped = int(lines[1].strip().removeprefix("(+").removesuffix(" earlier)"))
    assert lines[-1] == "  read pkg/module_59.py:1-10"  # the newest is kept
    assert dropped + len(lines) - 2 == 59  # every entry is shown or counted


def test_one_entry_longer_than_the_cap_is_cut():
    ledger = Ledger(120)
    ledger.add(turn(1, "PKR", file="a/" + "x" * 200 + ".py", ranges=[(1, 2)]))
    assert len(ledger.render()) == 120 and ledger.render().endswith("…")
    with pytest.raises(ValueError, match="ledger_chars"):
        Ledger(50)
