"""The study spec: a study file (YAML) -> the run specs of its matrix.

A study file names its output folder and one or more ``matrix`` blocks, each a product of
models x worlds x tasks x conditions x repeats with optional per-block settings (a named
``scaffold`` preset stands for several, :mod:`adakit.apparatus.scaffolds`). Run ids are
deterministic (``model__world__task__condition__rN``), so re-launching a study skips
finished runs and resumes interrupted ones from their last recorded turn.

Repeats (``repeats: k`` in a block, or at the top level) are the cell's runs r0 .. r(k-1):
repeat r gets the seed ``seed + r`` (a baseline's random choices and llama.cpp's sampling follow
it) and its own response-cache scope (the run id), so repeats at temperature > 0 differ and
replay reproducibly. A run id in two blocks is one run: its blocks must agree on its settings.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from adakit import config
from adakit.apparatus.conditions import get_condition
from adakit.apparatus.scaffolds import expand
from adakit.apparatus.tasks import task_families
from adakit.study.schema import StudyError, check_study, read_study_file

#: The run settings a study file may set at its top level or per matrix block.
RUN_SETTINGS = (
    "turn_bound", "tree_max_files", "max_observation_chars", "reply_max_tokens", "malformed_limit",
    "budget", "repeat_guard", "thinking_min_chars", "close_turn", "close_chars",
    "redraw_repeats", "redraw_step", "redraw_note", "window_drop", "ledger", "ledger_chars", "thinking_rule",
    "demonstration", "name_hints", "tool_format", "conclude_nudge",
    "history_thinking", "conclude_checkpoint", "checkpoint_turns",
    "cognitive_streak",
)


@dataclass(frozen=True)
class RunSpec:
    """One cell of the matrix."""

    study: str
    model: str
    world: str
    task: str
    condition: str
    repeat: int
    seed: int
    settings: tuple[tuple[str, Any], ...] = ()

    @property
    def run_id(self) -> str:
        return f"{self.model}__{self.world}__{self.task}__{self.condition}__r{self.repeat}"

    def setting(self, key: str, default: Any = None) -> Any:
        return dict(self.settings).get(key, default)


@dataclass
class Study:
    """A parsed study file."""

    name: str
    output: Path
    specs: list[RunSpec]
    concurrency: int = 1
    cache_mode: str = "use"
    hint_model: str | None = None
    coach_model: str | None = None
    description: str = ""
    raw: dict[str, Any] = field(default_factory=dict)


def _as_list(value: Any, what: str, block: int) -> list[Any]:
    if value is None:
        raise StudyError(f"matrix block {block}: '{what}' is missing (here or at the top level)")
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _pick(block: dict[str, Any], data: dict[str, Any], key: str) -> Any:
    """A block's value of ``key``, else the top level's (None when neither sets it)."""
    value = block.get(key)
    return data.get(key) if value is None else value


def study_path(path: str | Path) -> Path:
    """The study file ``path`` names: the file itself, else a bare name (``quick``,
    ``quick.yaml``, ``studies/quick``) looked up in ``studies/``. A missing file raises
    FileNotFoundError naming it as given, with the studies there are."""
    path = Path(path)
    if path.exists():
        return path
    bare = path.parent in (Path("."), Path("studies"))
    candidate = config.STUDIES / (path.name if path.suffix in (".yaml", ".yml") else f"{path.name}.yaml")
    if bare and candidate.exists():
        return candidate
    known = sorted(p.stem for p in config.STUDIES.glob("*.yaml") if not p.stem.endswith(".params"))
    raise FileNotFoundError(f"no study file {path}; the studies in {config.STUDIES}: {', '.join(known)}")


def load_study(path: str | Path, overrides: dict[str, Any] | None = None) -> Study:
    """Parse a study file into run specs (``overrides`` replace top-level keys). A file that
    does not fit the study schema (:mod:`adakit.study.schema`), or names an unknown task or
    condition, raises StudyError (a ValueError) with a one-line message naming the file."""
    path = study_path(path)
    data = read_study_file(path)
    data.update(overrides or {})
    check_study(data, path)
    name = data.get("name") or path.stem
    output = Path(data.get("output") or f"data/runs/{name}")
    if not output.is_absolute():
        output = config.ROOT / output
    try:
        specs = _matrix_specs(data, name)
    except StudyError as exc:
        raise StudyError(f"{path}: {exc}") from None
    return Study(
        name=name,
        output=output,
        specs=specs,
        concurrency=data.get("concurrency") or 1,
        cache_mode=data.get("cache_mode") or "use",
        hint_model=data.get("hint_model"),
        coach_model=data.get("coach_model"),
        description=data.get("description") or "",
        raw=data,
    )


def _matrix_specs(data: dict[str, Any], name: str) -> list[RunSpec]:
    """The run specs of a checked study's ``matrix`` blocks, in the order written; StudyError
    for an unknown task or condition, or one run given two sets of settings."""
    families = task_families()
    specs: dict[str, RunSpec] = {}
    base_seed = data.get("seed") or 0
    for b, block in enumerate(data.get("matrix") or [], 1):
        tasks = _as_list(_pick(block, data, "tasks"), "tasks", b)
        if tasks == ["all"]:
            tasks = families
        for t in tasks:
            if t not in families:
                raise StudyError(f"matrix block {b}: unknown task {t!r}; known: {', '.join(families)}")
        conditions = _as_list(_pick(block, data, "conditions"), "conditions", b)
        for c in conditions:
            try:
                get_condition(c)
            except KeyError as exc:
                raise StudyError(f"matrix block {b}: {exc.args[0]}") from None
        given = {k: _pick(block, data, k) for k in RUN_SETTINGS if _pick(block, data, k) is not None}
        settings = expand(_pick(block, data, "scaffold"), given)
        for model, world, task, cond, rep in itertools.product(
            _as_list(_pick(block, data, "models"), "models", b),
            _as_list(_pick(block, data, "worlds"), "worlds", b),
            tasks,
            conditions,
            range(_pick(block, data, "repeats") or 1),
        ):
            spec = RunSpec(name, model, world, task, cond, rep, base_seed + rep, tuple(sorted(settings.items())))
            first = specs.setdefault(spec.run_id, spec)
            if first.settings != spec.settings:
                # e.g. a repeat block whose r0 is also a grid run: one cell, one set of settings
                raise StudyError(
                    f"matrix block {b}: run {spec.run_id} is also in an earlier block with other "
                    f"settings ({dict(first.settings)} vs {dict(spec.settings)}); give the "
                    "blocks the same settings or different cells"
                )
    return list(specs.values())


def spec_dict(spec: RunSpec) -> dict[str, Any]:
    """A run spec as a plain dict (for tables and notebooks)."""
    d = asdict(spec)
    d["settings"] = dict(spec.settings)
    d["run_id"] = spec.run_id
    return d


def restrict(
    study: Study,
    models: list[str] | None = None,
    worlds: list[str] | None = None,
    tasks: list[str] | None = None,
    conditions: list[str] | None = None,
    turn_bound: int | None = None,
    repeats: list[int] | None = None,
) -> Study:
    """A copy of a study keeping only the named axis values (empty = keep all); ``repeats``
    keeps only those repeat indices (``[0]``: each cell's first run)."""
    keep = []
    for s in study.specs:
        if repeats and s.repeat not in repeats:
            continue
        if models and s.model not in models:
            continue
        if worlds and s.world not in worlds:
            continue
        if tasks and s.task not in tasks:
            continue
        if conditions and s.condition not in conditions:
            continue
        if turn_bound:
            settings = dict(s.settings)
            settings["turn_bound"] = turn_bound
            s = RunSpec(s.study, s.model, s.world, s.task, s.condition, s.repeat, s.seed, tuple(sorted(settings.items())))
        keep.append(s)
    if not keep:
        raise ValueError("no run of the study matches that selection")
    return Study(study.name, study.output, keep, study.concurrency, study.cache_mode, study.hint_model,
                 study.coach_model, study.description, study.raw)
