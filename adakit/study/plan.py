"""The plan of a study before it runs: what is finished, to resume, to retry or to run, and
what the rest will cost in tokens and USD (``adakit launch STUDY --plan``).

**Tokens.** Every remaining run is taken to use its whole turn bound N (an upper estimate:
runs that finalize early cost less). The prompt of turn k is ``first + (k - 1) * growth``
tokens, capped at the model's context window minus its reply limit (the agent leaves out old
turns beyond it); each turn's reply is ``reply`` tokens. A resumed or retried run pays only
for the turns after its last recorded one. A run with a hint model adds ``hint_in`` /
``hint_out`` per turn to that model; a coach-judge run adds ``coach_in`` / ``coach_out`` per
turn to the coach model. When the study file has a ``judge`` block, every run it launches of a
model that is not a baseline (and ``baseline_runs`` of each baseline) is judged: one call per
conclusion-level family and distinct panel model, and one per judged step (N, or at most
``max_turn_items`` per turn-level family) to the turn-level judge.

**Figures** come, each on its own, from the first source that measures it: a reference
corpus folder (default ``config.REFERENCE_RUNS``; its judge verdicts from a
``judgments.jsonl`` in the folder, beside it in ``../judgments/``, or in
``data/judgments/<folder name>/``), then the study's own recorded runs, then the constants
below. The plan prints where each one came from.

**Constants** (:data:`CONSTANTS`) were measured on this project's scaffold with
``agent.estimate_tokens`` (3.2 characters per token) on 2026-12-01: the opening prompt with a
200-file tree is 1,772 / 1,674 / 3,786 tokens for requests / flask / scikit-learn (mean
2,410); the three baseline policies' 36 natural runs on those worlds (487 turns) add a reply
and an observation of 408 tokens per turn on average, and their replies are 84 tokens (scripted
replies think briefly: an LLM's are longer). Rendered from the same turns, the coach-judge's
three judges read 3,744 tokens per turn and the coach 1,007 (taken as consulted every turn);
their replies are set at their caps (3 x 125 + 250). The post-hoc judges read 1,432 tokens per
conclusion item and 1,477 per step item, and reply at most 225 tokens (the rationale and
evidence caps). Hint calls are not estimated without a measured corpus.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adakit import config
from adakit.apparatus.conditions import get_condition
from adakit.record import RunFile, iter_run_files, read_run
from adakit.study.retry import REMAINING, RunState, study_states
from adakit.study.spec import Study

#: What each figure is, in the plan's words.
FIGURES: dict[str, str] = {
    "prompt_first": "prompt tokens at turn 1 (system prompt and task)",
    "prompt_growth": "prompt tokens added per turn (last reply and observation)",
    "reply": "reply tokens per turn",
    "hint_calls": "hint-model calls per turn",
    "hint_in": "hint-model prompt tokens per turn",
    "hint_out": "hint-model reply tokens per turn",
    "coach_in": "coach-judge prompt tokens per turn (judges and coach)",
    "coach_out": "coach-judge reply tokens per turn",
    "judge_conclusion_in": "post-hoc judge prompt tokens per conclusion item",
    "judge_turn_in": "post-hoc judge prompt tokens per step item",
    "judge_out": "post-hoc judge reply tokens per item",
}
#: The last-resort figures (see the module docstring for how they were measured).
CONSTANTS: dict[str, float] = {
    "prompt_first": 2410,
    "prompt_growth": 408,
    "reply": 84,
    "hint_calls": 0,
    "hint_in": 0,
    "hint_out": 0,
    "coach_in": 4751,
    "coach_out": 625,
    "judge_conclusion_in": 1432,
    "judge_turn_in": 1477,
    "judge_out": 225,
}
#: Calls per coach-judge turn: three judges and the coach (upper: the coach is not always asked).
COACH_CALLS = 4
DEFAULT_TURN_BOUND = 50  # RunConfig's default
DEFAULT_REPLY_LIMIT = 1024  # the agent's reply limit when neither study nor model sets one


# --------------------------------------------------------------------------- figures


@dataclass(frozen=True)
class Figure:
    """One figure of the estimate and where it came from."""

    value: float
    source: str


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _judgment_rows(folder: Path) -> list[dict[str, Any]]:
    from adakit.judging.store import judgments_dir, read_log

    for candidate in (
        folder / "judgments.jsonl",
        folder.parent / "judgments" / "judgments.jsonl",
        judgments_dir(folder) / "judgments.jsonl",
    ):
        if candidate.is_file():
            return read_log(candidate)
    return []


def measure(folder: str | Path) -> dict[str, tuple[float, int]]:
    """The figures a corpus folder measures: name -> (mean, number of samples). Only runs of
    models that are not scripted baselines count; figures with no sample are left out."""
    folder = Path(folder)
    samples: dict[str, list[float]] = {name: [] for name in FIGURES}
    hint_calls = hint_in = hint_out = 0
    n_turns = 0
    runs: Iterable[Path] = iter_run_files(folder) if folder.exists() else []
    for path in runs:
        try:
            rf: RunFile = read_run(path)
        except ValueError:
            continue
        if rf.header.model.kind == "baseline":
            continue
        prev = None
        for t in rf.turns:
            n_turns += 1
            if t.turn == 1 and t.tokens_in > 0 and not t.dropped_messages:
                samples["prompt_first"].append(t.tokens_in)
            if (prev is not None and prev.turn == t.turn - 1 and prev.tokens_in > 0
                    and t.tokens_in > 0 and not prev.dropped_messages and not t.dropped_messages):
                samples["prompt_growth"].append(t.tokens_in - prev.tokens_in)
            if t.tokens_out > 0:
                samples["reply"].append(t.tokens_out)
            for call in t.model_calls:
                if call.purpose == "hint":
                    hint_calls += 1
                    hint_in += call.tokens_in
                    hint_out += call.tokens_out
            if t.coach and (t.coach.get("tokens_in") or 0) > 0:
                samples["coach_in"].append(t.coach["tokens_in"])
                samples["coach_out"].append(t.coach.get("tokens_out") or 0)
            prev = t
    out: dict[str, tuple[float, int]] = {}
    for name, values in samples.items():
        mean = _mean(values)
        if mean is not None:
            out[name] = (mean, len(values))
    if n_turns:
        out["hint_calls"] = (hint_calls / n_turns, n_turns)
        out["hint_in"] = (hint_in / n_turns, n_turns)
        out["hint_out"] = (hint_out / n_turns, n_turns)
    rows = [r for r in _judgment_rows(folder) if (r.get("tokens_in") or 0) > 0]
    for name, keep in (("judge_conclusion_in", lambda r: r.get("turn") is None),
                       ("judge_turn_in", lambda r: r.get("turn") is not None)):
        values = [r["tokens_in"] for r in rows if keep(r)]
        if values:
            out[name] = (sum(values) / len(values), len(values))
    replies = [r.get("tokens_out") or 0 for r in rows]
    if replies:
        out["judge_out"] = (sum(replies) / len(replies), len(replies))
    return out


_SAMPLE_WORD = {"prompt_first": "first turns", "prompt_growth": "turn pairs", "reply": "turns",
                "hint_calls": "turns", "hint_in": "turns", "hint_out": "turns", "coach_in": "coach turns",
                "coach_out": "coach turns"}


def resolve_figures(sources: list[tuple[str, Path]]) -> dict[str, Figure]:
    """Each figure from the first (label, folder) source that measures it, else its constant."""
    measured = [(label, folder, measure(folder)) for label, folder in sources]
    figures: dict[str, Figure] = {}
    for name in FIGURES:
        for label, folder, found in measured:
            if name in found:
                value, n = found[name]
                what = _SAMPLE_WORD.get(name, "verdicts")
                figures[name] = Figure(value, f"mean of {n} {what} in {label} {folder}")
                break
        else:
            figures[name] = Figure(CONSTANTS[name], "constant (adakit.study.plan.CONSTANTS)")
    return figures


def figure_sources(study: Study, reference: str | Path | None = None) -> list[tuple[str, Path]]:
    """The folders figures are measured in, in order: the reference corpus (``reference``, or
    ``config.REFERENCE_RUNS`` when it exists), then the study's own output folder."""
    sources: list[tuple[str, Path]] = []
    ref = config.resolve(reference) if reference else config.REFERENCE_RUNS
    if reference and not ref.is_dir():
        raise FileNotFoundError(f"no reference corpus folder at {ref}")
    if ref.is_dir():
        sources.append(("the reference corpus", ref))
    if study.output.is_dir() and study.output.resolve() != ref.resolve():
        sources.append(("the study's runs", study.output))
    return sources


# --------------------------------------------------------------------------- the estimate


@dataclass
class CostRow:
    """The estimated work of one model in one role: ``agent``, ``hint``, ``coach`` or
    ``judge``. ``usd`` is None for an LLM without prices in the registry."""

    model: str
    role: str
    runs: int = 0
    calls: float = 0.0
    tokens_in: float = 0.0
    tokens_out: float = 0.0
    usd: float | None = 0.0
    note: str = ""


def _spec_of(name: str, registry: dict[str, Any]) -> Any:
    if name.startswith("baseline-"):
        from adakit.apparatus.baselines import baseline_spec

        try:
            return baseline_spec(name)
        except KeyError:
            return None
    return registry.get(name)


def agent_tokens(first: float, growth: float, reply: float, done: int, bound: int,
                 context_window: int | None, reply_limit: int) -> tuple[float, float, int]:
    """Prompt and reply tokens and calls of turns ``done + 1 .. bound`` (module docstring)."""
    cap = context_window - reply_limit if context_window else None
    tokens_in = 0.0
    for k in range(done + 1, bound + 1):
        prompt = first + (k - 1) * growth
        tokens_in += min(prompt, cap) if cap is not None else prompt
    calls = max(bound - done, 0)
    return tokens_in, calls * min(reply, reply_limit), calls


def _judge_block(study: Study) -> dict[str, Any] | None:
    block = study.raw.get("judge")
    if not isinstance(block, dict):
        return None
    from adakit.judging.families import get_family, parse_families
    from adakit.judging.run import DEFAULT_PANEL, parse_judges

    panel = parse_judges(block.get("judges")) or list(DEFAULT_PANEL)
    families = parse_families(block.get("families"))
    return {
        "panel": list(dict.fromkeys(panel)),  # a repeated model's seats share one call
        "turn_judge": block.get("turn_judge") or panel[0],
        "conclusion": sum(1 for f in families if get_family(f).level == "conclusion"),
        "turn": sum(1 for f in families if get_family(f).level == "turn"),
        "max_turn_items": block.get("max_turn_items"),
        "baseline_runs": int(block.get("baseline_runs", 0)),
        "max_tokens": int(block.get("max_tokens", 512)),
    }


def judges_needed(study: Study) -> list[str]:
    """The judge models of the study's ``judge`` block (none without a block)."""
    block = _judge_block(study)
    if block is None:
        return []
    return list(dict.fromkeys([*block["panel"], block["turn_judge"]]))


def estimate(study: Study, states: list[RunState], figures: dict[str, Figure],
             registry: dict[str, Any], retry_from: str = "last_turn") -> list[CostRow]:
    """The cost rows of the remaining runs (module docstring), by model and role; with
    ``retry_from="start"`` a retried run is paid again from its first turn."""
    rows: dict[tuple[str, str], CostRow] = {}

    def add(model: str, role: str, calls: float, tin: float, tout: float, run: bool = True) -> None:
        row = rows.setdefault((model, role), CostRow(model, role))
        row.runs += 1 if run else 0
        row.calls += calls
        row.tokens_in += tin
        row.tokens_out += tout

    f = {k: v.value for k, v in figures.items()}
    judge = _judge_block(study)
    baseline_judged: Counter[str] = Counter()
    for st in states:
        if st.status not in REMAINING:
            continue
        spec = st.spec
        bound = int(spec.setting("turn_bound", DEFAULT_TURN_BOUND))
        restart = (st.status == "to_retry" and retry_from == "start") or st.status == "to_redo"
        done = 0 if restart else min(st.turns_done, bound)
        left = max(bound - done, 0)
        model = _spec_of(spec.model, registry)
        baseline = spec.model.startswith("baseline-")
        if baseline:
            add(spec.model, "agent", left, 0.0, 0.0)
        else:
            limit = int(spec.setting("reply_max_tokens") or getattr(model, "max_tokens", None)
                        or DEFAULT_REPLY_LIMIT)
            window = getattr(model, "context_window", None)
            tin, tout, calls = agent_tokens(f["prompt_first"], f["prompt_growth"], f["reply"],
                                            done, bound, window, limit)
            add(spec.model, "agent", calls, tin, tout)
        hint = study.hint_model or (None if baseline else spec.model)
        if hint and (f["hint_in"] or f["hint_out"]):
            add(hint, "hint", left * f["hint_calls"], left * f["hint_in"], left * f["hint_out"])
        if get_condition(spec.condition).coach:
            coach = study.coach_model or "smollm2-135m"
            add(coach, "coach", left * COACH_CALLS, left * f["coach_in"], left * f["coach_out"])
        if judge is not None:
            if baseline:
                if baseline_judged[spec.model] >= judge["baseline_runs"]:
                    continue
                baseline_judged[spec.model] += 1
            reply = min(f["judge_out"], judge["max_tokens"])
            for name in judge["panel"]:
                n = judge["conclusion"]
                add(name, "judge", n, n * f["judge_conclusion_in"], n * reply)
            cap = judge["max_turn_items"]
            items = min(bound, cap * judge["turn"]) if cap else (bound if judge["turn"] else 0)
            if items:
                add(judge["turn_judge"], "judge", items, items * f["judge_turn_in"], items * reply,
                    run=judge["turn_judge"] not in judge["panel"])
    for row in rows.values():
        spec = _spec_of(row.model, registry)
        kind = getattr(spec, "kind", None)
        if kind == "baseline":
            row.usd, row.note = 0.0, "scripted, no model calls"
            row.calls = 0.0
        elif kind == "local":
            row.usd, row.note = 0.0, "local model"
        elif spec is None:
            row.usd, row.note = None, "not in the registry"
        else:
            row.usd = spec.cost(round(row.tokens_in), round(row.tokens_out))
            if row.usd is None:
                row.note = "no prices in the registry"
    order = {"agent": 0, "hint": 1, "coach": 2, "judge": 3}
    return sorted(rows.values(), key=lambda r: (order[r.role], r.model))


@dataclass
class Plan:
    """A study's states, the figures used and the estimated cost of the remaining work."""

    study: Study
    states: list[RunState]
    figures: dict[str, Figure]
    rows: list[CostRow] = field(default_factory=list)

    @property
    def total_usd(self) -> float:
        """The estimated USD of every priced row."""
        return round(sum(r.usd for r in self.rows if r.usd is not None), 6)

    @property
    def unpriced(self) -> list[str]:
        """Models that will be called but have no prices (their cost is unknown)."""
        return sorted({r.model for r in self.rows if r.usd is None})

    @property
    def unknown_cost(self) -> list[str]:
        """Unpriced models served somewhere else than this machine: their cost is unknown and
        may be real money (an endpoint on loopback is one the user runs)."""
        from urllib.parse import urlparse

        from adakit.llm.models import ModelError, get_model

        out = []
        for name in self.unpriced:
            try:
                host = urlparse(get_model(name).base_url or "").hostname or ""
            except ModelError:
                host = ""
            if host not in ("localhost", "::1") and not host.startswith("127."):
                out.append(name)
        return out

    def counts(self) -> Counter[str]:
        """Runs by state."""
        return Counter(s.status for s in self.states)

    def cost_text(self) -> str:
        """The estimate table, the per-model totals and the figures with their sources."""
        lines = ["estimate (every remaining run uses its whole turn bound: an upper estimate):"]
        head = ("model", "role", "runs", "calls", "tokens in", "tokens out", "USD", "")
        table = [head]
        for r in self.rows:
            usd = "unknown" if r.usd is None else usd_text(r.usd)
            table.append((r.model, r.role, str(r.runs), f"{r.calls:,.0f}", f"{r.tokens_in:,.0f}",
                          f"{r.tokens_out:,.0f}", usd, r.note))
        lines += _format(table, right={2, 3, 4, 5, 6})
        per_model: dict[str, float] = {}
        for r in self.rows:
            if r.usd is not None:
                per_model[r.model] = per_model.get(r.model, 0.0) + r.usd
        if per_model:
            lines.append("USD per model: " + " · ".join(f"{m} {usd_text(v)}" for m, v in per_model.items()))
        total = f"estimated total: ${usd_text(self.total_usd)}"
        if self.unpriced:
            total += f" (plus {', '.join(self.unpriced)}: no prices in the registry)"
        lines.append(total)
        lines.append("figures:")
        table = [(name, f"{fig.value:,.0f}" if fig.value >= 10 else f"{fig.value:.2f}",
                  FIGURES[name], fig.source)
                 for name, fig in self.figures.items()]
        lines += ["  " + line for line in _format(table, right={1})]
        return "\n".join(lines)

    def describe(self) -> str:
        """The whole plan: the matrix along each axis, the states, the estimate."""
        study = self.study
        lines = [f"plan: study {study.name}, {len(self.states)} runs -> {study.output}"]
        for axis in ("model", "world", "task", "condition"):
            counts = Counter(getattr(s.spec, axis) for s in self.states)
            lines.append(f"  by {axis + ':':<11}" + " · ".join(f"{k} {v}" for k, v in counts.items()))
        c = self.counts()
        lines.append(
            f"  {'status:':<14}finished {c['finished']} · to resume {c['to_resume']} · "
            f"to retry {c['to_retry']} · to run {c['to_run']} · failed, left as is {c['failed']}"
            + (f" · to redo (settings changed) {c['to_redo']}" if c.get("to_redo") else "")
        )
        redo = Counter(k for s in self.states if s.status == "to_redo" for k in s.changed)
        if redo:
            lines.append(f"  {'changed:':<14}" + " · ".join(f"{k} {v}" for k, v in redo.items())
                         + " (finished runs set aside as .attempt-N.jsonl.bak and run again)")
        refused = [s.refused for s in self.states if s.refused]
        if refused:
            lines.append(f"  {'refused:':<14}{len(refused)} run files cannot be read (set aside as "
                         ".stale-*.jsonl.bak and run again):")
            lines += [f"    {why}" for why in refused[:5]]
            if len(refused) > 5:
                lines.append(f"    ... and {len(refused) - 5} more")
        if any(s.status in REMAINING for s in self.states):
            lines.append(self.cost_text())
        else:
            lines.append("nothing to run: every run of the study is finished or left as is "
                         "(`adakit launch` would record nothing)")
        return "\n".join(lines)


def usd_text(usd: float) -> str:
    """Dollars with cents, or four decimals below one dollar."""
    return f"{usd:,.2f}" if usd >= 1 else f"{usd:.4f}"


def _format(rows: list[tuple[str, ...]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for row in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        out.append("  ".join(cells).rstrip())
    return out


def make_plan(study: Study, reference: str | Path | None = None, retry: bool = True,
              retry_any: bool = False, retry_from: str = "last_turn",
              states: list[RunState] | None = None) -> Plan:
    """The plan of a study: its run states, the figures (from ``reference``, the study's runs,
    the constants) and the estimate."""
    from adakit.llm.models import load_registry

    states = states if states is not None else study_states(study, retry, retry_any)
    figures = resolve_figures(figure_sources(study, reference))
    plan = Plan(study, states, figures)
    plan.rows = estimate(study, states, figures, load_registry(), retry_from)
    return plan
