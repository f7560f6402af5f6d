"""benchmarks/compare_study.py, the check that a refactoring left `make study`'s outputs alone."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("compare_study", ROOT / "benchmarks" / "compare_study.py")
compare_study = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(compare_study)  # type: ignore[union-attr]


def _write(root: Path, name: str, frame: pd.DataFrame) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False) if path.suffix == ".csv" else frame.to_parquet(path)


def test_tables_are_told_apart_by_what_differs(tmp_path: Path) -> None:
    before, after = tmp_path / "a", tmp_path / "b"
    same = pd.DataFrame({"model": ["m"], "turns": [3]})
    for root, elapsed, turns, pause in ((before, 1.5, 3, [1]), (after, 2.5, 3, [1, 2])):
        _write(root, "lens/same.csv", same)
        _write(root, "lens/surface.parquet",
               pd.DataFrame({"model": ["m"], "turns": [turns], "elapsed_s": [elapsed]}))
        _write(root, "lens/shifts.csv", pd.DataFrame(
            {"metric": ["turns", "time_per_turn_s"], "value": [turns, elapsed]}))
        _write(root, "arc/long_pauses.parquet", pd.DataFrame({"turn": pause}))
    _write(before, "lens/changed.csv", pd.DataFrame({"turns": [3]}))
    _write(after, "lens/changed.csv", pd.DataFrame({"turns": [4]}))
    counts, lines = compare_study.compare_tables(before, after)
    assert counts == {"byte-identical": 1, "equal without wall-clock": 2, "wall-clock table": 1,
                      "different": 1}
    assert any(line.startswith("DIFFERENT lens/changed.csv") for line in lines)
    assert "equal without elapsed_s: lens/surface.parquet" in lines


def test_verdicts_differ_in_values_or_only_in_types(tmp_path: Path) -> None:
    rows = {"item_id": ["i1", "i2"], "judge": ["j", "j"], "label": ["a", "b"],
            "turn": pd.array([None, 2], dtype="Int64"), "latency_s": [1.0, 2.0]}
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pd.DataFrame(rows).to_parquet(a)
    pd.DataFrame({**rows, "latency_s": [9.0, 9.0]}).to_parquet(b)
    assert compare_study.compare_verdicts(a, b) == (True, None)
    pd.DataFrame({**rows, "turn": [float("nan"), 2.0]}).to_parquet(b)
    assert compare_study.compare_verdicts(a, b) == (
        True, "same values, other column types {'turn': ('Int64', 'float64')}")
    pd.DataFrame({**rows, "label": ["a", "c"]}).to_parquet(b)
    same, note = compare_study.compare_verdicts(a, b)
    assert not same and "label" in note
