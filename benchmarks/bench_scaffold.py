"""The small-model scaffold ablation (issue 23): each scaffold variant's behaviour on one slice.

The slice is the one of ``studies/bench-models.yaml`` (flask and requests x the four task
families, natural condition, turn bound 15, seed 0, repeat 0) for Qwen2.5-Coder-1.5B. The
baseline variant, "v3", is the scaffold reference corpus local-v3 was recorded under (its runs
of the slice, replayed from its replies: ``studies/bench-scaffold-v3.yaml``); every variant,
the baseline too, is a folder recorded by a study file
``studies/bench-scaffold-<variant>.yaml``: the shipped ones in ``data/reference/bench-scaffold/<variant>/runs`` and those being recorded in
``data/runs/bench-scaffold/<variant>`` (``make bench-scaffold-record``: hours on 2 cores,
resumable). A run in both is read from the latter. This script records nothing: it reads what
is there.

Printed: one row per variant, one column per measure, each an estimate with its 95% bootstrap
interval over runs (and, without one: how many own conclusions came on a checkpoint turn, where
the model was asked to write a conclusion and chose to finalize; the share of calls that took a
call the scaffold had just offered) (``adakit.variance.behaviour.behaviour_intervals``), then each variant's
ratio to v3 side by side, and the ratio table of the issue's targets with "met" / "MISSED" for
every variant.
A measurement, never a test: it exits 0 either way.

    python benchmarks/bench_scaffold.py [--variants FOLDER ...] [--quick]

``--quick`` uses 200 bootstrap resamples instead of 2,000 (seconds instead of tens of seconds).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
from timing import Ratio, print_ratios

from adakit import config
from adakit.apparatus.world import World, WorldUnavailable, open_world
from adakit.llm.models import get_model
from adakit.record import RunFile, corpus_from_runs, read_runs, skipped_note
from adakit.variance.behaviour import (
    behaviour_intervals,
    behaviour_table,
    call_repeats,
    finalized_at_checkpoint,
    run_behaviour,
    thought_copies,
)
from adakit.variance.suggested import suggestion_uptake

MODEL = "qwen2.5-coder-1.5b"
WORLDS = ("flask", "requests")
#: measure: (label, format, comparison, target) - targets of issue 23 for the 1.5B
MEASURES = {
    "own_conclusions": ("own conclusions", "{:.0%}", ">=", 0.50),
    "repeat_rate": ("exact repeats", "{:.0%}", "<=", 0.10),
    "stuck_endings": ("stuck endings", "{:.0%}", "<=", 0.15),
    "peek_share": ("reads (PKR share)", "{:.0%}", ">=", 0.20),
    "files_per_architecture_run": ("files / arch. run", "{:.1f}", ">=", 4.0),
    "tag_entropy_run": ("tag entropy / run (bits)", "{:.2f}", "", None),
    "thinking_chars": ("thinking chars / turn", "{:.0f}", "", None),
    "copied_thoughts": ("thought = previous", "{:.0%}", "", None),
}


def in_slice(rf: RunFile) -> bool:
    """Whether a run belongs to the ablation's slice: the 1.5B's weights under any registry
    name (the sampling variant has its own), flask or requests, natural, first repeat."""
    h = rf.header
    return (h.model.model_id == get_model(MODEL).model_id and h.world.name in WORLDS
            and h.condition.name == "natural" and h.repeat == 0 and h.turn_bound == 15)


def _variant_folder(p: Path) -> Path:
    """A variant's run files: a shipped dataset keeps them in ``runs/``."""
    return p / "runs" if (p / "manifest.json").exists() else p


#: The variant every other one is compared with: the scaffold of reference corpus local-v3.
BASELINE = "v3"


def variant_runs(variants: Path | list[Path]) -> dict[str, list[RunFile]]:
    """The slice's finished runs per variant, one per folder of each of ``variants`` (a run id
    found again in a later folder replaces the earlier one), the baseline first."""
    sources: list[tuple[str, Path]] = []
    for root in [variants] if isinstance(variants, Path) else variants:
        if root.is_dir():
            sources += [(p.name, _variant_folder(p)) for p in sorted(root.iterdir()) if p.is_dir()]
    by_variant: dict[str, dict[str, RunFile]] = {}
    for name, folder in sources:
        read = read_runs([folder])
        if read.skipped:
            print(skipped_note(read.skipped))
        for rf in read.runs:
            if in_slice(rf) and rf.end is not None:
                by_variant.setdefault(name, {})[rf.header.run_id] = rf
    names = sorted(by_variant, key=lambda name: name != BASELINE)  # stable: folder order
    return {name: list(by_variant[name].values()) for name in names if by_variant[name]}


def slice_worlds() -> dict[str, World]:
    """The slice's worlds, where fetched (the offers of redraw notes are computed from them)."""
    worlds = {}
    for name in WORLDS:
        try:
            worlds[name] = open_world(name, fetch=False)
        except WorldUnavailable:
            print(f"{name} is not fetched: offers of redraw notes in its runs are not counted")
    return worlds


def measure_variants(found: dict[str, list[RunFile]], n_resamples: int,
                     worlds: dict[str, World] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The intervals table (one row per variant), and per variant the measures without an
    interval: seconds per turn (p50, p95), the pooled Table 5 tag entropy (as Fig. 7 pools)
    and the share of calls that took a call the scaffold had just offered
    (:mod:`adakit.variance.suggested`)."""
    per_run, speed = [], []
    for name, runs in found.items():
        corpus, repeats = corpus_from_runs(runs), call_repeats(runs)
        per_run.append(run_behaviour(corpus, repeats, thought_copies(runs)).assign(variant=name))
        row = behaviour_table(corpus, repeats).iloc[0]
        uptake = suggestion_uptake(runs, worlds)
        speed.append({"variant": name, "p50": row["s_per_turn_p50"], "p95": row["s_per_turn_p95"],
                      "pooled": row["tag_entropy_bits"],
                      "at_checkpoint": sum(finalized_at_checkpoint(rf) for rf in runs),
                      "offered": float(uptake["followed"].mean()) if len(uptake) else float("nan")})
    table = behaviour_intervals(pd.concat(per_run, ignore_index=True), "variant", n_resamples)
    order = {name: k for k, name in enumerate(found)}
    table = table.sort_values("variant", key=lambda s: s.map(order)).reset_index(drop=True)
    return table, pd.DataFrame(speed)


def _cell(row: pd.Series, m: str, fmt: str) -> str:
    if pd.isna(row[m]):
        return "-"
    est = fmt.format(row[m])
    if pd.isna(row[f"{m}_lo"]):
        return f"{est} (n={int(row[f'{m}_n'])})"
    return f"{est} [{fmt.format(row[f'{m}_lo'])}, {fmt.format(row[f'{m}_hi'])}]"


def target_rows(table: pd.DataFrame, speed: pd.DataFrame) -> list[Ratio]:
    """The issue's targets for the 1.5B, one row per variant and measure (value / target)."""
    speed = speed.set_index("variant")
    rows = []
    for _, r in table.iterrows():
        v = r["variant"]
        for m, (label, _, cmp, target) in MEASURES.items():
            if target is not None:
                rows.append(Ratio(f"{v}: {label}", float(r[m]), target, cmp))
        rows.append(Ratio(f"{v}: tag entropy, pooled (bits)", float(speed.loc[v, "pooled"]), 1.5, ">="))
        rows.append(Ratio(f"{v}: s / turn p50", float(speed.loc[v, "p50"]), 15.0, "<=", fmt="{:.1f}"))
    return rows


def report(table: pd.DataFrame, speed: pd.DataFrame) -> str:
    """The estimates with their intervals, and each variant's ratios to v3."""
    labels = {m: spec[0] for m, spec in MEASURES.items()}
    est = pd.DataFrame({labels[m]: [_cell(r, m, spec[1]) for _, r in table.iterrows()]
                        for m, spec in MEASURES.items()})
    est.insert(0, "runs", table["n_runs"].astype(int).to_numpy())
    est.insert(0, "variant", table["variant"].to_numpy())
    speed = speed.set_index("variant").reindex(table["variant"])
    est["tag entropy, pooled"] = [f"{v:.2f}" for v in speed["pooled"]]
    est["s / turn p50 / p95"] = [f"{a:.1f} / {b:.1f}" for a, b in zip(speed["p50"], speed["p95"], strict=True)]
    est["own: at a checkpoint"] = [str(int(v)) for v in speed["at_checkpoint"]]
    est["calls taking an offer"] = [f"{v:.0%}" if pd.notna(v) else "-" for v in speed["offered"]]
    parts = ["estimate [95% bootstrap interval over runs]",
             est.to_string(index=False)]
    base = table[table["variant"] == BASELINE]
    if len(base):
        ratios = pd.DataFrame({"variant": table["variant"]})
        for m in MEASURES:
            b = float(base[m].iloc[0])
            ratios[labels[m]] = [("-" if pd.isna(v) or b == 0 else f"{v / b:.2f}x") for v in table[m]]
        p50 = float(speed.loc[BASELINE, "p50"])
        ratios["s / turn p50"] = [f"{v / p50:.2f}x" if p50 else "-" for v in speed["p50"]]
        parts += ["", "ratio to v3 (local-v3's scaffold)", ratios.to_string(index=False)]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", type=Path, nargs="+",
                    default=[config.DATA / "reference" / "bench-scaffold", config.DATA / "runs" / "bench-scaffold"],
                    help="folders holding one folder per recorded variant (default: the shipped "
                         "variants, then those being recorded)")
    ap.add_argument("--quick", action="store_true", help="200 bootstrap resamples (seconds)")
    args = ap.parse_args(argv)
    found = variant_runs(args.variants)
    if not found:
        print(f"no run of the slice under {', '.join(map(str, args.variants))}", file=sys.stderr)
        return 0
    table, speed = measure_variants(found, 200 if args.quick else 2000, slice_worlds())
    print(f"slice: {MODEL} x {', '.join(WORLDS)} x four tasks, natural, turn bound 15; "
          f"variants: {', '.join(f'{k} ({len(v)} runs)' for k, v in found.items())}")
    with pd.option_context("display.width", 200):
        print(report(table, speed))
    print("\nissue 23's targets for the 1.5B (ratio = value / target)")
    print_ratios(target_rows(table, speed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
