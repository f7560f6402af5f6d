"""The judging pass of lens 3: panels, the call to a judge, the runner and ``adakit judge``.

Conclusion-level families are answered by a panel of judge models, one row per seat (the
vote is :func:`adakit.judging.agreement.aggregate_votes`); turn-level families by one judge.
An invalid reply is retried with a corrective message, and a verdict that still fails is
stored as missing (label None, score NaN, valid False), never as a low score. Verdicts go to
the corpus's judgments log as they come (:mod:`adakit.judging.store`), so a re-run resumes
where a crash stopped. A run file the record reader refuses stops the pass before anything is
asked, as it stops the loader; header-less files are skipped with a note, as the loader does.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from adakit import config
from adakit.judging.context import (
    ContextCaps,
    JudgeItem,
    build_items,
    fetched_world,
    prompt_template,
    sample_evenly,
)
from adakit.judging.families import FAMILIES, get_family, parse_families
from adakit.judging.store import (
    LOG,
    TABLE,
    LogWriter,
    judgments_dir,
    judgments_table,
    read_log,
    stored_verdicts,
    verdict_is_current,
    write_parquet,
)
from adakit.judging.verdicts import REPLY_MAX_TOKENS, Verdict, parse_verdict, reply_schema
from adakit.llm.replies import ReplyError
from adakit.record import HeaderlessRunFile, RunFile, iter_run_files, read_run, skipped_note

#: The offline judge: the embedded local model (registry name).
LOCAL_JUDGE = "qwen2.5-coder-1.5b"
#: The paper's conclusion-level panel (Appendix C.1), as registered in ``models.yaml``.
PAPER_PANEL = ("glm-5", "kimi-k2.5", "minimax-m2.7")
#: The offline default panel: the local model in every seat.
DEFAULT_PANEL = (LOCAL_JUDGE, LOCAL_JUDGE, LOCAL_JUDGE)


# ============================================================================== panels


@dataclass(frozen=True)
class Seat:
    """A judge seat: the name used in the table and the registry model behind it."""

    name: str
    model: str


def panel_seats(models: Sequence[str]) -> list[Seat]:
    """Seats for a list of judge models; a model named more than once gets ``#k`` suffixes."""
    counts = Counter(models)
    seen: Counter[str] = Counter()
    seats = []
    for m in models:
        seen[m] += 1
        seats.append(Seat(f"{m}#{seen[m]}" if counts[m] > 1 else m, m))
    return seats


def panel_note(models: Sequence[str]) -> str | None:
    """A warning when the panel repeats a model (its seats then agree by construction)."""
    repeated = {m: n for m, n in Counter(models).items() if n > 1}
    if not repeated:
        return None
    words = {2: "twice", 3: "thrice"}
    parts = [f"{m} {words.get(n, f'{n} times')}" for m, n in repeated.items()]
    return (
        f"the panel is one model in several seats ({'; '.join(parts)}): each such model is asked "
        "once per item and its verdict is copied to its seats, so those seats agree by "
        "construction"
    )


def describe_panel(judges: Sequence[str]) -> str:
    """A plain sentence on what the panel's seats are, for notebooks: independent models, one
    model sampled at several temperatures, or one model whose verdict is copied to several
    seats (``m#1``, ``m#2``). Seats are looked up in the model registry by name."""
    from adakit.llm.models import load_registry

    seats = list(dict.fromkeys(str(j) for j in judges))
    if not seats:
        return "The table holds no judge."
    try:
        registry = load_registry()
    except Exception:  # noqa: BLE001 - a broken user registry must not stop a notebook
        registry = {}
    bases = [re.sub(r"#\d+$", "", s) for s in seats]
    copied = len(set(bases)) < len(bases)
    specs = [registry.get(b) for b in dict.fromkeys(bases)]
    if len(seats) == 1:
        return f"The table has a single judge ({seats[0]}): agreement cannot be measured."
    if copied and len(set(bases)) == 1:
        return (f"The panel is one model ({bases[0]}) in {len(seats)} seats whose verdict is "
                "copied to each seat: they agree by construction, so agreement is undefined.")
    if all(sp is not None for sp in specs):
        ids = {(sp.model_id or sp.name, sp.base_url) for sp in specs}  # type: ignore[union-attr]
        if len(ids) == 1 and len(specs) > 1:
            temps = ", ".join(str(sp.temperature) for sp in specs)  # type: ignore[union-attr]
            model = next(iter(ids))[0]
            return (f"The panel is ONE model ({model}) sampled at temperatures {temps} in "
                    f"{len(specs)} seats ({', '.join(dict.fromkeys(bases))}), not independent "
                    "judges: its agreement measures that model's sampling spread, and its "
                    "panel vote is that model's majority over samples.")
    unknown = [b for b, sp in zip(dict.fromkeys(bases), specs, strict=True) if sp is None]
    note = f" (not in the model registry: {', '.join(unknown)})" if unknown else ""
    copy_note = " Some seats copy one model's verdict and count once." if copied else ""
    shared = _seats_sharing_a_model(list(dict.fromkeys(bases)), specs)
    if shared:
        groups = "; ".join(f"{model} in {', '.join(names)}" for model, names in shared.items())
        n_models = len(set(bases)) - sum(len(v) - 1 for v in shared.values())
        return (f"The panel has {len(set(bases))} seats but only {n_models} distinct models "
                f"({groups}{note}): agreement between seats of one model is partly that model "
                "agreeing with itself, so it overstates agreement between independent judges."
                + copy_note)
    return (f"The panel has {len(set(bases))} distinct judges: {', '.join(dict.fromkeys(bases))}"
            f"{note}." + copy_note)


def _seats_sharing_a_model(names: list[str], specs: list[Any]) -> dict[str, list[str]]:
    """Registry seats that serve one underlying model (same model id and endpoint), by model."""
    by_model: dict[tuple[str, Any], list[str]] = {}
    for name, sp in zip(names, specs, strict=True):
        if sp is not None:
            by_model.setdefault((sp.model_id or sp.name, sp.base_url), []).append(name)
    return {key[0]: seats for key, seats in by_model.items() if len(seats) > 1}


def parse_judges(values: str | Sequence[str] | None) -> list[str] | None:
    """Judge model names from CLI-style values: names, comma lists, "paper" for the paper's
    panel; None when nothing is given."""
    if not values:
        return None
    if isinstance(values, str):
        values = [values]
    out: list[str] = []
    for v in values:
        for name in v.split(","):
            name = name.strip()
            if name == "paper":
                out += list(PAPER_PANEL)
            elif name:
                out.append(name)
    return out


# ============================================================================== the call


@dataclass
class Attempted:
    """The outcome of asking one judge about one item (after retries)."""

    verdict: Verdict | None
    text: str
    error: str | None
    attempts: int
    cached: bool
    latency_s: float
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None


def ask_judge(
    backend: Any, item: JudgeItem, *, retries: int = 2, max_tokens: int = REPLY_MAX_TOKENS
) -> Attempted:
    """Ask ``backend`` about ``item``; an unusable reply is retried up to ``retries`` times with
    a corrective message. Model errors propagate (the verdict is then not recorded)."""
    fam = get_family(item.family)
    schema = reply_schema(item.family)
    messages = list(item.messages)
    latency, cached, text, error = 0.0, True, "", None
    tokens_in = tokens_out = 0
    cost: float | None = None
    for attempt in range(1, retries + 2):
        comp = backend.complete(messages, json_schema=schema, max_tokens=max_tokens)
        latency += float(comp.latency_s or 0.0)
        cached = cached and bool(comp.cached)
        tokens_in += int(comp.tokens_in or 0)
        tokens_out += int(comp.tokens_out or 0)
        if comp.cost_usd is not None:
            cost = (cost or 0.0) + float(comp.cost_usd)
        text = comp.text or ""
        try:
            verdict = parse_verdict(text, item.family)
        except ReplyError as exc:
            error = str(exc)
            if getattr(comp, "finish_reason", None) == "length":
                error += " The reply was cut off at the length limit; keep it shorter."
            correction = prompt_template("correction").substitute(
                error=error, labels=", ".join(fam.allowed)
            )
            messages = [
                *messages,
                {"role": "assistant", "content": text},
                {"role": "user", "content": correction},
            ]
            continue
        return Attempted(
            verdict, text, None, attempt, cached, round(latency, 6), tokens_in, tokens_out, cost
        )
    return Attempted(
        None, text, error, retries + 1, cached, round(latency, 6), tokens_in, tokens_out, cost
    )


def _row(item: JudgeItem, seat: Seat, res: Attempted) -> dict[str, Any]:
    v = res.verdict
    return {
        "item_id": item.item_id,
        "run_id": item.run_id,
        "family": item.family,
        "judge": seat.name,
        "turn": item.turn,
        "tool": item.tool,
        "label": v.label if v else None,
        "score": v.score if v else math.nan,
        "rationale": v.rationale if v else "",
        "evidence": json.dumps(v.evidence if v else [], ensure_ascii=False),
        "valid": v is not None,
        "cached": res.cached,
        "latency_s": res.latency_s,
        # beyond the table: kept in the jsonl for audits
        "model": seat.model,
        "attempts": res.attempts,
        "tokens_in": res.tokens_in,
        "tokens_out": res.tokens_out,
        "cost_usd": res.cost_usd,
        "error": res.error,
        "raw": None if v else res.text[:2000],
        "judged_at": time.time(),
        "prompt_sha256": item.prompt_sha256,
    }


BackendFactory = Callable[[str], Any]


def default_backends(cache_mode: str = "use", cache: Any = None) -> BackendFactory:
    """A factory of registry backends sharing one response cache (``cache_mode``)."""
    from adakit.llm.models import backend_for

    made: dict[str, Any] = {}
    lock = threading.Lock()

    def factory(name: str) -> Any:
        with lock:
            if name not in made:
                made[name] = backend_for(name, cache=cache, cache_mode=cache_mode)  # type: ignore[arg-type]
            return made[name]

    return factory


def _model_errors() -> tuple[type[BaseException], ...]:
    try:
        from adakit.llm.models import ModelError
    except ImportError:  # pragma: no cover - the models layer ships with adakit
        return ()
    return (ModelError,)



# ============================================================================== selection


_CELL_FIELDS = {
    "model": lambda h: h.model.name,
    "world": lambda h: h.world.name,
    "task": lambda h: h.task.family,
    "condition": lambda h: h.condition.name,
    "repeat": lambda h: h.repeat,
}


def sample_runs(runs: Sequence[RunFile], per_cell: int, by: Sequence[str]) -> list[RunFile]:
    """At most ``per_cell`` runs of every combination of ``by`` (spread over sorted run ids)."""
    unknown = [b for b in by if b not in _CELL_FIELDS]
    if unknown:
        raise ValueError(f"cannot group runs by {unknown}; use {', '.join(_CELL_FIELDS)}")
    cells: dict[tuple[Any, ...], list[RunFile]] = {}
    for rf in sorted(runs, key=lambda r: r.header.run_id):
        cells.setdefault(tuple(_CELL_FIELDS[b](rf.header) for b in by), []).append(rf)
    return [rf for key in sorted(cells, key=str) for rf in sample_evenly(cells[key], per_cell)]



# ============================================================================== the run


@dataclass
class JudgeReport:
    """What one adjudication pass did, and the resulting table."""

    table: pd.DataFrame
    out_dir: Path
    n_runs: int = 0
    n_items: int = 0
    n_tasks: int = 0
    n_skipped: int = 0
    n_new: int = 0
    n_invalid: int = 0
    n_cache_hits: int = 0
    n_copies: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        t = self.table
        lines = [
            f"judgments: {self.out_dir / 'judgments.parquet'}",
            f"runs {self.n_runs}, items {self.n_items}, verdicts to give {self.n_tasks} "
            f"({self.n_skipped} already on file)",
            f"new verdicts {self.n_new}: invalid {self.n_invalid}, cache hits "
            f"{self.n_cache_hits}, copied to repeated seats {self.n_copies}; "
            f"model errors {len(self.errors)}",
            f"model calls: {self.tokens_in} tokens in, {self.tokens_out} out, "
            f"${self.cost_usd:.4f} priced; {self.seconds:.1f} s wall clock",
        ]
        if not t.empty:
            lines.append(f"table: {len(t)} verdicts, {int((~t['valid']).sum())} invalid (NaN)")
            per = t.groupby("family")["valid"].agg(["size", "sum"])
            for fam, row in per.iterrows():
                lines.append(f"  {fam}: {int(row['sum'])}/{int(row['size'])} valid")
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"error: {e}" for e in self.errors[:5]]
        if len(self.errors) > 5:
            lines.append(f"... and {len(self.errors) - 5} more errors")
        return "\n".join(lines)


#: One call to make: an item, the model to ask, and the seats its verdict fills.
Task = tuple[JudgeItem, str, list[Seat]]


def run_judgments(
    corpus: str | Path | Iterable[str | Path],
    families: str | Sequence[str] = tuple(FAMILIES),
    judges: str | Sequence[str] | None = None,
    turn_judge: str | None = None,
    *,
    max_turn_items: int | None = None,
    runs_per_cell: int | None = None,
    cell_by: Sequence[str] = ("model", "condition"),
    cache_mode: str = "use",
    out_dir: str | Path | None = None,
    caps: ContextCaps | None = None,
    retries: int = 2,
    max_tokens: int = REPLY_MAX_TOKENS,
    retry_invalid: bool = False,
    workers: int = 1,
    max_consecutive_errors: int = 5,
    backends: BackendFactory | None = None,
    worlds: Callable[[str], Any] | None = fetched_world,
    progress: bool = True,
) -> JudgeReport:
    """Judge a corpus (folder or run files) and store the verdicts beside it.

    Conclusion-level families go to every seat of ``judges`` (registry names, or "paper" for
    the paper's panel; default: the local model thrice), turn-level families to ``turn_judge``
    (default: the first judge). Verdicts already in ``judgments.jsonl`` are skipped (invalid
    ones too, unless ``retry_invalid``). A run file the record reader refuses raises its
    :class:`adakit.record.RunFileError` (naming the file and line) before anything is asked.

    To bound the work with a slow judge: ``max_turn_items`` caps the steps judged per run and
    turn-level family (spread over the run); ``runs_per_cell`` keeps that many runs (spread
    over the run ids) of every ``cell_by`` combination (header fields model, world, task,
    condition, repeat).
    """
    fams = parse_families(families)
    panel = parse_judges(judges) or list(DEFAULT_PANEL)
    paths = list(iter_run_files(corpus))
    if not paths:
        raise FileNotFoundError(f"no run files in {corpus}")
    runs, headerless = _read_runs(paths, progress)
    folder = _verdicts_folder(corpus, paths, out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    if runs_per_cell is not None:
        runs = sample_runs(runs, runs_per_cell, cell_by)
    items = _items(runs, fams, caps, max_turn_items, worlds)
    turn_model = turn_judge or panel[0]
    seats = {"conclusion": panel_seats(panel), "turn": [Seat(turn_model, turn_model)]}
    tasks, n_skipped, n_stale = _tasks(items, runs, seats, stored_verdicts(folder / LOG),
                                       retry_invalid)
    report = JudgeReport(
        table=pd.DataFrame(), out_dir=folder, n_runs=len(runs), n_items=len(items),
        n_tasks=sum(len(ss) for _, _, ss in tasks) + n_skipped, n_skipped=n_skipped,
    )  # fmt: skip
    report.notes += _notes(headerless, n_stale, panel, fams)
    _ask_all(tasks, report, backends or default_backends(cache_mode), workers=workers,
             progress=progress, retries=retries, max_tokens=max_tokens,
             max_consecutive_errors=max_consecutive_errors)
    return report


def _read_runs(paths: Sequence[Path], progress: bool) -> tuple[list[RunFile], list[Path]]:
    """The run files of ``paths`` read as the loader reads them: header-less files are set
    aside (returned second); any other damaged file raises, naming the file and the line."""
    runs: list[RunFile] = []
    headerless: list[Path] = []
    for p in tqdm(paths, desc="reading runs", unit="run", disable=not progress, leave=False):
        try:
            runs.append(read_run(p))
        except HeaderlessRunFile:
            headerless.append(p)
    return runs, headerless


def _verdicts_folder(corpus: str | Path | Iterable[str | Path], paths: Sequence[Path],
                     out_dir: str | Path | None) -> Path:
    """Where the verdicts go: ``out_dir``, else beside the corpus; for a list of run files,
    named after the folder that holds them all."""
    if out_dir:
        return Path(out_dir)
    if isinstance(corpus, str | Path):
        return judgments_dir(corpus)
    return judgments_dir(Path(os.path.commonpath([p.resolve().parent for p in paths])))


def _items(runs: Sequence[RunFile], families: Sequence[str], caps: ContextCaps | None,
           max_turn_items: int | None, worlds: Callable[[str], Any] | None) -> list[JudgeItem]:
    """The judge items of every run, each built with its world when ``worlds`` finds it."""
    items: list[JudgeItem] = []
    world_cache: dict[str, Any] = {}
    for rf in runs:
        wname = rf.header.world.name
        if worlds is not None and wname not in world_cache:
            world_cache[wname] = worlds(wname)
        items += build_items(rf, families, caps=caps, max_turn_items=max_turn_items,
                             world=world_cache.get(wname))
    return items


def _tasks(items: Sequence[JudgeItem], runs: Sequence[RunFile], seats: dict[str, list[Seat]],
           stored: dict[tuple[Any, ...], dict[str, Any]],
           retry_invalid: bool) -> tuple[list[Task], int, int]:
    """The calls to make: one per (item, distinct model) whose seats lack a current verdict
    (the seats of a repeated model share its verdict); with the counts of seats already on
    file and of stored verdicts that judged an earlier recording of their run."""
    by_run = {rf.header.run_id: rf for rf in runs}
    tasks: list[Task] = []
    n_skipped = n_stale = 0
    for it in items:
        by_model: dict[str, list[Seat]] = {}
        for s in seats[get_family(it.family).level]:
            row = stored.get((it.item_id, s.name))
            current = row is not None and verdict_is_current(row, by_run[it.run_id], it.prompt_sha256)
            n_stale += row is not None and not current
            if current and (row.get("valid") or not retry_invalid):
                n_skipped += 1
            else:
                by_model.setdefault(s.model, []).append(s)
        tasks += [(it, m, ss) for m, ss in by_model.items()]
    return tasks, n_skipped, n_stale


def _notes(headerless: Sequence[Path], n_stale: int, panel: Sequence[str],
           families: Sequence[str]) -> list[str]:
    """What the report says before any judge is asked."""
    notes = [skipped_note(headerless)] if headerless else []
    if n_stale:
        notes.append(f"{n_stale} stored verdicts judged an earlier recording of their run "
                     "(re-recorded since): judged again")
    note = panel_note(panel) if any(get_family(f).level == "conclusion" for f in families) else None
    if note:
        notes.append(note)
    return notes


class _Asker:
    """Asks the judges one task at a time (from any thread): each verdict goes to the log as
    it comes and is counted in the report; a model that fails ``max_errors`` times in a row
    is asked no more."""

    def __init__(self, factory: BackendFactory, report: JudgeReport, log: LogWriter,
                 bar: Any, *, retries: int, max_tokens: int, max_errors: int) -> None:
        self.factory, self.report, self.log, self.bar = factory, report, log, bar
        self.retries, self.max_tokens, self.max_errors = retries, max_tokens, max_errors
        self.model_errors = _model_errors()
        self.lock = threading.Lock()
        self.streak: Counter[str] = Counter()
        self.given_up: set[str] = set()

    def __call__(self, task: Task) -> None:
        it, model, seats = task
        with self.lock:
            skip = model in self.given_up
        if not skip:
            self._ask(it, model, seats)
        self.bar.update(1)

    def _ask(self, it: JudgeItem, model: str, seats: list[Seat]) -> None:
        try:
            res = ask_judge(self.factory(model), it, retries=self.retries,
                            max_tokens=self.max_tokens)
        except self.model_errors as exc:
            self._failed(model, it, exc)
            return
        for k, seat in enumerate(seats):
            row = _row(it, seat, res)
            row["max_tokens"] = self.max_tokens  # beyond the table: how the verdict was asked
            if k:  # a repeated model's further seats copy the verdict
                row["cached"] = True
                row["latency_s"] = 0.0
            self.log.write(row)
        self._count(model, seats, res)

    def _failed(self, model: str, it: JudgeItem, exc: BaseException) -> None:
        with self.lock:
            self.report.errors.append(f"{model} on {it.item_id}: {exc}")
            self.streak[model] += 1
            if self.streak[model] >= self.max_errors and model not in self.given_up:
                self.given_up.add(model)
                self.report.notes.append(
                    f"stopped asking {model} after {self.streak[model]} consecutive errors; "
                    "re-run to resume"
                )

    def _count(self, model: str, seats: list[Seat], res: Attempted) -> None:
        r = self.report
        with self.lock:
            self.streak[model] = 0
            r.n_new += len(seats)
            r.n_invalid += 0 if res.verdict else len(seats)
            r.n_cache_hits += len(seats) if res.cached else 0
            r.n_copies += len(seats) - 1
            if not res.cached:
                r.tokens_in += res.tokens_in
                r.tokens_out += res.tokens_out
                r.cost_usd += res.cost_usd or 0.0


def _ask_all(tasks: Sequence[Task], report: JudgeReport, factory: BackendFactory, *,
             workers: int, progress: bool, retries: int, max_tokens: int,
             max_consecutive_errors: int) -> None:
    """Make every call (``workers`` at a time), then rebuild the table from the log, also
    when a call raises."""
    log_path = report.out_dir / LOG
    log = LogWriter(log_path)
    bar = tqdm(total=len(tasks), desc="judging", unit="item", disable=not progress)
    asker = _Asker(factory, report, log, bar, retries=retries, max_tokens=max_tokens,
                   max_errors=max_consecutive_errors)
    started = time.perf_counter()
    try:
        if workers <= 1:
            for task in tasks:
                asker(task)
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                list(pool.map(asker, tasks))
    finally:
        bar.close()
        log.close()
        report.seconds = round(time.perf_counter() - started, 3)
        report.table = judgments_table(read_log(log_path))
        write_parquet(report.table, report.out_dir / TABLE)


# ============================================================================== CLI


def parse_caps(values: Sequence[str], prompt: int | None = None) -> ContextCaps | None:
    """Context caps from ``SECTION=N`` strings (None when nothing is changed)."""
    known = {f.name for f in fields(ContextCaps)}
    changes: dict[str, int] = {"prompt": prompt} if prompt else {}
    for value in values:
        name, sep, number = value.partition("=")
        name = name.strip()
        if not sep or name not in known:
            raise ValueError(
                f"bad cap {value!r}: use SECTION=N with SECTION one of {sorted(known)}"
            )
        try:
            changes[name] = int(number)
        except ValueError:
            raise ValueError(f"bad cap {value!r}: {number!r} is not a whole number") from None
        if changes[name] < 0:
            raise ValueError(f"bad cap {value!r}: must not be negative")
    return replace(ContextCaps(), **changes) if changes else None


def _cmd_judge(args: argparse.Namespace) -> int:
    try:
        families = parse_families(args.families)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        caps = parse_caps(args.cap or [], prompt=args.prompt_chars)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        report = run_judgments(
            args.corpus,
            families,
            parse_judges(args.judges),
            args.turn_judge,
            max_turn_items=args.max_turn_items,
            runs_per_cell=args.runs_per_cell,
            cache_mode=args.cache_mode,
            out_dir=args.out,
            caps=caps,
            retries=args.retries,
            max_tokens=args.max_tokens,
            retry_invalid=args.retry_invalid,
            workers=args.workers,
            progress=not args.no_progress,
        )
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except LookupError as exc:  # a replay that misses the cache
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except _model_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(report.summary())
    return 1 if report.errors else 0


def register_cli(sub: Any) -> None:
    """``adakit judge CORPUS``: post-hoc adjudication of a corpus (lens 3)."""
    p = sub.add_parser(
        "judge",
        help="post-hoc adjudication of a corpus by LLM judges (lens 3)",
        description=(
            "Judge every run of a corpus on the five evaluation families of Appendix C.1. "
            "Conclusion-level families go to a panel (--judges), turn-level families to one "
            "judge (--turn-judge). Verdicts are stored beside the corpus under "
            f"{config.JUDGMENTS}; a re-run resumes."
        ),
    )
    p.add_argument("corpus", help="a corpus folder (e.g. data/runs/quick) or a run file")
    p.add_argument(
        "--families", nargs="+", metavar="F",
        help=f"families to judge (default all): {', '.join(FAMILIES)}, or 'conclusion'/'turn'",
    )  # fmt: skip
    p.add_argument(
        "--judges", nargs="+", metavar="MODEL",
        help=f"conclusion-level panel (registry names; 'paper' = {' '.join(PAPER_PANEL)}); "
        f"default: {LOCAL_JUDGE} three times",
    )  # fmt: skip
    p.add_argument("--turn-judge", metavar="MODEL", help="turn-level judge (default: first judge)")
    p.add_argument(
        "--max-turn-items", type=int, metavar="N",
        help="at most N steps per run and turn-level family, spread over the run",
    )  # fmt: skip
    p.add_argument(
        "--runs-per-cell", type=int, metavar="N",
        help="judge at most N runs of every model x condition cell (default: every run)",
    )  # fmt: skip
    p.add_argument(
        "--cache-mode", default="use", choices=["use", "replay", "refresh", "off"],
        help="response cache: use (default), replay (no endpoint), refresh, off",
    )  # fmt: skip
    p.add_argument("--retries", type=int, default=2, help="extra attempts after an invalid reply")
    p.add_argument("--max-tokens", type=int, default=REPLY_MAX_TOKENS,
                   help=f"reply token limit (default {REPLY_MAX_TOKENS}, as in the paper)")
    p.add_argument("--workers", type=int, default=1, help="parallel judge calls")
    p.add_argument("--retry-invalid", action="store_true", help="ask again where a verdict failed")
    p.add_argument("--prompt-chars", type=int, help="cap of the judge prompt in characters")
    p.add_argument(
        "--cap", action="append", metavar="SECTION=N",
        help="cap of one context section, e.g. conclusion=2000 or window_turns=2 (repeatable; "
        f"sections: {', '.join(f.name for f in fields(ContextCaps))})",
    )  # fmt: skip
    p.add_argument("--out", help="output folder (default: beside the corpus under data/judgments)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_judge)
