"""Measured behaviour of a model on a corpus: the table ``make bench-models`` prints.

One row per model, from its recorded runs:

- ``valid_calls``: share of turns whose reply parsed into a tool call;
- ``concluded``: share of runs that ended by finalizing a conclusion of their own accord;
- ``concluded_closing``: share of runs whose conclusion came on the closing turn
  (``close_turn``: asked for once at the turn bound or when stuck), so not counted above;
- ``files_per_run`` / ``lines_per_run``: distinct files visited (any successful call naming the
  file) and distinct lines viewed, means over runs;
- ``tag_entropy_bits``: Shannon entropy (bits) of the model's Table 5 tag shares, pooled over
  its transitions as Fig. 7 pools them; ``tag_entropy_run`` is the mean of the per-run
  entropies;
- ``repeat_rate``: share of calls that exactly repeat (same tool, same parameters) an earlier
  call of the same run;
- ``thinking_chars``: mean characters of thinking per turn;
- ``s_per_turn_p50`` / ``_p95``: seconds the model took per reply (``latency_s``, which a
  cache-replayed turn carries over from the call that produced it), without the coach's time;
  when no turn records a latency, seconds per live turn;
- ``prompt_tokens``, ``tokens_reused``: prompt tokens sent, and of those taken from the local
  server's prefix cache instead of being evaluated (local models only).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from adakit.lenses.policy import tag_transitions
from adakit.lenses.surface import run_surface
from adakit.record import (
    Corpus,
    RunFile,
    call_repeats_of,
    corpus_from_runs,
    read_runs,
    skipped_note,
)
from adakit.uncertainty import DEFAULT_RESAMPLES, bootstrap_ratios

BEHAVIOUR_COLUMNS = [
    "model", "runs", "turns", "valid_calls", "concluded", "concluded_closing", "files_per_run", "lines_per_run",
    "tag_entropy_bits", "tag_entropy_run", "repeat_rate", "thinking_chars", "s_per_turn_p50",
    "s_per_turn_p95", "prompt_tokens", "tokens_reused",
]  # fmt: skip


def call_repeats(run_files: Iterable[RunFile]) -> pd.DataFrame:
    """One row per turn with a call: run_id, turn, and whether the call (tool and parameters)
    exactly repeats an earlier call of the same run."""
    rows = [(rf.header.run_id, turn, repeat) for rf in run_files
            for turn, repeat in call_repeats_of(rf.turns)]
    return pd.DataFrame(rows, columns=["run_id", "turn", "repeat"])


def entropy_bits(counts: Iterable[float]) -> float:
    """Shannon entropy in bits of a distribution given by counts (NaN when empty)."""
    c = np.asarray([x for x in counts if x > 0], dtype=float)
    if c.sum() <= 0:
        return float("nan")
    p = c / c.sum()
    return float(-(p * np.log2(p)).sum())


def behaviour_table(corpus: Corpus, repeats: pd.DataFrame) -> pd.DataFrame:
    """The behaviour table (module docstring) from a corpus and :func:`call_repeats`."""
    runs, turns = corpus.runs, corpus.turns
    if runs.empty:
        return pd.DataFrame(columns=BEHAVIOUR_COLUMNS)
    surface = run_surface(corpus).set_index("run_id")
    tags = tag_transitions(turns)
    tags = tags.merge(runs[["run_id", "model"]], on="run_id")
    if "active_s" not in turns.columns:  # tables built before the loader kept three clocks
        turns = turns.assign(active_s=turns["duration_s"] - turns.get("coach_s", 0.0))
    live = turns[~turns["cached"].astype(bool)]
    has_latency = "latency_s" in turns.columns
    reused = turns["tokens_reused"] if "tokens_reused" in turns.columns else None
    rep = repeats.merge(runs[["run_id", "model"]], on="run_id")
    rows = []
    for model, mruns in runs.groupby("model", sort=True):
        ids = set(mruns["run_id"])
        mt = turns[turns["run_id"].isin(ids)]
        ms = surface.loc[sorted(ids)]
        mtags = tags[tags["model"] == model]
        per_run = [entropy_bits(g["tag"].value_counts()) for _, g in mtags.groupby("run_id")]
        secs = (mt["latency_s"].dropna().to_numpy(dtype=float)
                if has_latency and (mt["latency_s"] > 0).any()
                else live.loc[live["run_id"].isin(ids), "active_s"].to_numpy(dtype=float))
        closing = mruns["closed"].fillna(False).astype(bool) & (mruns["conclusion_chars"].fillna(0) > 0)
        mrep = rep[rep["model"] == model]
        rows.append({
            "model": model,
            "runs": len(mruns),
            "turns": len(mt),
            "valid_calls": float(mt["parse_error"].isna().mean()) if len(mt) else np.nan,
            "concluded": float((mruns["reason"] == "finalize").mean()),
            "concluded_closing": float(closing.mean()),
            "files_per_run": float(ms["files_visited"].mean()),
            "lines_per_run": float(ms["loc_viewed"].mean()),
            "tag_entropy_bits": entropy_bits(mtags["tag"].value_counts()),
            "tag_entropy_run": float(np.nanmean(per_run)) if per_run else np.nan,
            "repeat_rate": float(mrep["repeat"].mean()) if len(mrep) else np.nan,
            "thinking_chars": float(mt["thinking_chars"].mean()) if len(mt) else np.nan,
            "s_per_turn_p50": float(np.percentile(secs, 50)) if len(secs) else np.nan,
            "s_per_turn_p95": float(np.percentile(secs, 95)) if len(secs) else np.nan,
            "prompt_tokens": int(mt["tokens_in"].sum()),
            "tokens_reused": (int(reused[mt.index].fillna(0).sum())
                              if reused is not None and reused[mt.index].notna().any() else np.nan),
        })
    return pd.DataFrame(rows, columns=BEHAVIOUR_COLUMNS)


def measure(sources: Iterable[str | Path], models: Iterable[str] | None = None) -> pd.DataFrame:
    """The behaviour table of the run files under ``sources`` (optionally some models only),
    read as the loader reads them (:func:`adakit.record.read_runs`: header-less files are left
    out with a printed note, a damaged file is refused)."""
    keep = set(models) if models is not None else None
    read = read_runs(list(sources))
    if read.skipped:
        print(skipped_note(read.skipped))
    files = [rf for rf in read.runs if keep is None or rf.header.model.name in keep]
    return behaviour_table(corpus_from_runs(files), call_repeats(files))


#: The per-run columns of :func:`run_behaviour`.
RUN_BEHAVIOUR_COLUMNS = [
    "run_id", "model", "world", "task", "turns", "own", "stuck", "calls", "repeats", "peeks",
    "files", "architecture", "thinking_chars", "tag_entropy", "thought_pairs", "copied",
]  # fmt: skip

#: What :func:`behaviour_intervals` puts an interval on: a name and a column (a mean over
#: runs) or a (numerator, denominator) pair of per-run sums (a pooled ratio).
INTERVAL_MEASURES: dict[str, str | tuple[str, str]] = {
    "own_conclusions": "own",
    "repeat_rate": ("repeats", "calls"),
    "stuck_endings": "stuck",
    "peek_share": ("peeks", "calls"),
    "files_per_architecture_run": ("files_arch", "architecture"),
    "tag_entropy_run": "tag_entropy",
    "thinking_chars": ("thinking_chars", "turns"),
    "copied_thoughts": ("copied", "thought_pairs"),
}


def finalized_at_checkpoint(rf: RunFile) -> bool:
    """Whether the run finalized on a checkpoint turn (``conclude_checkpoint``): asked to write
    a conclusion, it chose to stop. Counted among own conclusions; worth showing apart."""
    from adakit.apparatus.agent import is_checkpoint_note_on

    if rf.end is None or rf.end.reason != "finalize" or len(rf.turns) < 2:
        return False
    return is_checkpoint_note_on(rf.turns[-2])


def thought_copies(run_files: Iterable[RunFile]) -> pd.DataFrame:
    """One row per turn after a run's first: run_id, turn, and whether its thinking repeats
    the previous turn's word for word (an empty thought never counts as a copy)."""
    rows = []
    for rf in run_files:
        for prev, t in zip(rf.turns, rf.turns[1:], strict=False):
            now = t.thinking.strip()
            rows.append((rf.header.run_id, t.turn, bool(now) and now == prev.thinking.strip()))
    return pd.DataFrame(rows, columns=["run_id", "turn", "copied"])


def run_behaviour(corpus: Corpus, repeats: pd.DataFrame,
                  copies: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per run: its turns, whether it concluded on its own (``own``: finalized before
    any closing turn) or ended stuck (``malformed_limit``), its calls, exact repeats and
    ``peek_code_region`` calls, distinct files visited, whether it is an architecture-analysis
    run, thinking characters summed over its turns, the entropy (bits) of its Table 5 tags,
    and (from :func:`thought_copies`, when given) its turns after the first and how many of
    them copy the previous thought."""
    runs, turns = corpus.runs, corpus.turns
    if runs.empty:
        return pd.DataFrame(columns=RUN_BEHAVIOUR_COLUMNS)
    surface = run_surface(corpus).set_index("run_id")
    tags = tag_transitions(turns)
    entropy = {rid: entropy_bits(g["tag"].value_counts()) for rid, g in tags.groupby("run_id")}
    reps = repeats.groupby("run_id")["repeat"].agg(["size", "sum"])
    calls = turns[turns["tool"].notna()]
    peeks = calls[calls["tool"] == "PKR"].groupby("run_id").size()
    think = turns.groupby("run_id")["thinking_chars"].sum()
    out = runs[["run_id", "model", "world", "task", "n_turns", "reason"]].copy()
    out = out.rename(columns={"n_turns": "turns"})
    out["own"] = (out["reason"] == "finalize").astype(float)
    out["stuck"] = (out["reason"] == "malformed_limit").astype(float)
    rid = out["run_id"]
    out["calls"] = rid.map(reps["size"]).fillna(0).astype(int)
    out["repeats"] = rid.map(reps["sum"]).fillna(0).astype(int)
    out["peeks"] = rid.map(peeks).fillna(0).astype(int)
    out["files"] = rid.map(surface["files_visited"]).fillna(0).astype(float)
    out["architecture"] = (out["task"] == "architecture_analysis").astype(int)
    out["thinking_chars"] = rid.map(think).fillna(0).astype(float)
    out["tag_entropy"] = rid.map(entropy).astype(float)
    if copies is not None and not copies.empty:
        per = copies.groupby("run_id")["copied"].agg(["size", "sum"])
        out["thought_pairs"] = rid.map(per["size"]).fillna(0).astype(int)
        out["copied"] = rid.map(per["sum"]).fillna(0).astype(int)
    else:
        out["thought_pairs"], out["copied"] = 0, 0
    return out[RUN_BEHAVIOUR_COLUMNS].reset_index(drop=True)


def behaviour_intervals(per_run: pd.DataFrame, by: str | list[str] = "variant",
                        n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> pd.DataFrame:
    """Per group of ``by``: each measure of :data:`INTERVAL_MEASURES` with its bootstrap
    interval over runs (:func:`adakit.uncertainty.bootstrap_ratios`); a group of one run has
    no interval (its ``note`` says so)."""
    frame = per_run.assign(files_arch=per_run["files"] * per_run["architecture"])
    return bootstrap_ratios(frame, by, INTERVAL_MEASURES, n_resamples=n_resamples, seed=seed)
