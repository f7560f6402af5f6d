"""Reading imported runs beside the runs adakit launched: several corpus folders opened as one,
where each run came from, and how often each mapping rule fired (notebook 40).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from adakit import config


def open_corpora(*folders: str | Path | Sequence[str | Path], verbose: bool = True) -> Any:
    """Several corpus folders (e.g. imported runs and runs adakit launched; an argument may
    itself be a list of folders, as the notebooks' ``corpus`` parameter is) as one
    :class:`~adakit.record.Corpus`, each opened like the notebooks do (cached, a count line
    printed, paths relative to the project root); run ids are unique because imported ids
    carry their source's sha256."""
    from adakit.record import open_corpus

    flat = [f for one in folders for f in ([one] if isinstance(one, str | Path) else one)]
    given = [config.resolve(f) for f in flat if str(f)]
    data = open_corpus(given if len(given) != 1 else given[0], verbose=verbose)
    if verbose and len(given) > 1:
        counts = data.runs["agent"].value_counts()
        print("runs by agent: " + ", ".join(f"{a} {n}" for a, n in counts.items()))
    return data


def source_table(runs: Any) -> Any:
    """Where each run came from, read from the run files' headers: run_id, agent, format,
    file, sha256, timing (``launched`` for runs adakit made)."""
    import pandas as pd

    from adakit.record import read_run

    rows = []
    for run_id, path in zip(runs["run_id"], runs["path"], strict=True):
        src = read_run(path).header.source if Path(str(path)).exists() else None
        rows.append({"run_id": run_id, "agent": src.agent if src else "ada",
                     "format": src.format if src else "adakit", "file": src.file if src else "",
                     "sha256": src.sha256 if src else "",
                     "timing": src.timing if src else "launched"})
    return pd.DataFrame(rows)


def mapping_counts(runs: Any) -> Any:
    """How often each mapping rule fired, per agent: agent, canonical, rule, steps, share."""
    import pandas as pd

    from adakit.record import read_run, run_agent

    counts: Counter[tuple[str, str, str]] = Counter()
    for path in runs["path"]:
        if not Path(str(path)).exists():
            continue
        rf = read_run(path)
        agent = run_agent(rf.header)
        for t in rf.turns:
            counts[(agent, t.metrics.tool or "-", t.metrics.mapped_by or "adakit tool")] += 1
    df = pd.DataFrame([(*k, v) for k, v in counts.items()],
                      columns=["agent", "canonical", "rule", "steps"])
    if df.empty:
        return df.assign(share=[])
    df["share"] = df["steps"] / df.groupby("agent")["steps"].transform("sum") * 100.0
    return df.sort_values(["agent", "steps"], ascending=[True, False]).reset_index(drop=True)


def showcase_run(runs: Any, turns: Any) -> str:
    """The imported run that shows the most of what imports keep: the one with the most
    subagent turns (``sidechain``), else the longest imported run; runs adakit launched are
    never chosen (ValueError when there is no imported run)."""
    imported = runs[runs["agent"] != "ada"] if "agent" in runs.columns else runs.iloc[:0]
    if imported.empty:
        raise ValueError("no imported run in the corpus")
    mine = turns[turns["run_id"].isin(set(imported["run_id"]))]
    if "sidechain" in mine.columns and mine["sidechain"].notna().any():
        nested = mine[mine["sidechain"].notna()].groupby("run_id").size()
        return str(nested.sort_values(ascending=False, kind="stable").index[0])
    return str(imported.sort_values("n_turns", ascending=False, kind="stable")["run_id"].iloc[0])
