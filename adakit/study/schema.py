"""The study file's schema: every key a study YAML may hold, its type and its range.

:func:`read_study_file` reads a study file and :func:`check_study` checks it against
:class:`StudyFile` before anything is planned or written. A file that does not fit raises
:class:`StudyError`, one line naming the file, the place (``matrix block 2, turn_bound``) and
what is wrong: an unknown key with the nearest known one, a YAML boolean where a word was
meant (``repeat_guard: off`` reads as ``false``), a count that is not positive, an empty axis.

The same model is published as a JSON Schema (``docs/study.schema.json``, written by ``adakit
study-schema --write``) so editors can check study files as they are typed.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from adakit import config
from adakit.apparatus.agent import HISTORY_THINKING, REPEAT_GUARDS, WINDOW_DROPS
from adakit.apparatus.demonstration import DEMONSTRATIONS
from adakit.apparatus.ledger import LEDGER_MIN_CHARS
from adakit.apparatus.native import TOOL_FORMATS
from adakit.apparatus.protocol import THINKING_RULES
from adakit.apparatus.scaffolds import SCAFFOLD_NAMES
from adakit.apparatus.tools import NAME_HINTS
from adakit.llm.models import CACHE_MODES
from adakit.record import emit_schema

#: Where the study-file schema is published (beside the trajectory schema).
STUDY_SCHEMA_DOC = config.ROOT / "docs" / "study.schema.json"


class StudyError(ValueError):
    """A study file that cannot be used as written; its message is one line."""


def _listed(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


_NAME = {"type": "string", "minLength": 1}
Text = Annotated[str, Field(strict=True)]
Name = Annotated[str, Field(strict=True, min_length=1)]
Positive = Annotated[int, Field(strict=True, gt=0)]
Count = Annotated[int, Field(strict=True, ge=0)]
Flag = Annotated[bool, Field(strict=True)]
#: An axis: one name or a non-empty list of names.
Names = Annotated[
    list[Name], BeforeValidator(_listed), Field(min_length=1),
    WithJsonSchema({"anyOf": [_NAME, {"type": "array", "items": _NAME, "minItems": 1}]}),
]
CacheMode = Literal[CACHE_MODES]  # type: ignore[valid-type]


class _Strict(BaseModel):
    """A mapping whose keys are all known: an unknown key names the nearest known one."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            known = list(cls.model_fields)
            for key in data:
                if key not in cls.model_fields:
                    near = difflib.get_close_matches(str(key), known, n=1)
                    hint = f" (did you mean {near[0]!r}?)" if near else f" (known: {', '.join(known)})"
                    raise PydanticCustomError("unknown_key", "unknown key {key}{hint}",
                                              {"key": repr(key), "hint": hint})
        return data


class RunSettings(_Strict):
    """The run settings a study sets at its top level or per matrix block (``RUN_SETTINGS``);
    a block's value wins over the top level's, and an unset one keeps the loop's default."""

    scaffold: Literal[SCAFFOLD_NAMES] | None = Field(  # type: ignore[valid-type]
        None, description="a named set of the settings below (small-model: the scaffold adopted for "
                          "small local models; paper: none); a setting given here or at the top level wins")
    turn_bound: Positive | None = Field(None, description="turns a run may take (default 50)")
    tree_max_files: Positive | None = Field(None, description="files the tree view lists")
    max_observation_chars: Positive | None = Field(None, description="cap of one tool observation")
    reply_max_tokens: Positive | None = Field(None, description="cap of one model reply in tokens")
    malformed_limit: Positive | None = Field(None, description="mistakes in a row that end a run")
    budget: Positive | None = Field(None, description="the budget of a budget-pressure condition, in turns")
    repeat_guard: Literal[REPEAT_GUARDS] | None = Field(  # type: ignore[valid-type]
        None, description="what an exact repeat of an earlier call gets (quote 'off' in YAML)")
    thinking_min_chars: Annotated[int, Field(strict=True, ge=2)] | None = Field(
        None, description="shortest thought the grammar accepts, in characters")
    close_turn: Flag | None = Field(None, description="one closing turn for a conclusion")
    close_chars: Positive | None = Field(None, description="cap of the closing conclusion in characters")
    redraw_repeats: Count | None = Field(None, description="redraws of a sampled exact repeat (0 = off)")
    redraw_step: Annotated[float, Field(strict=True, ge=0)] | None = Field(
        None, description="temperature added per redraw")
    redraw_note: Flag | None = Field(
        None, description="redraws carry a note naming the repeated turn (needs redraw_repeats)")
    window_drop: Literal[WINDOW_DROPS] | None = Field(  # type: ignore[valid-type]
        None, description="how old turns leave a prompt past the context window: pair or stable")
    ledger: Flag | None = Field(None, description="show the LEDGER channel of what the run did")
    ledger_chars: Annotated[int, Field(strict=True, ge=LEDGER_MIN_CHARS)] | None = Field(
        None, description="cap of the LEDGER channel in characters")
    thinking_rule: Literal[THINKING_RULES] | None = Field(  # type: ignore[valid-type]
        None, description="the grammar's thinking rule")
    demonstration: Literal[DEMONSTRATIONS] | None = Field(  # type: ignore[valid-type]
        None, description="a worked example run at the end of the system prompt")
    name_hints: Literal[NAME_HINTS] | None = Field(  # type: ignore[valid-type]
        None, description="names a look-up without symbol_name offers: code (parse tree) or line (raw words)")
    tool_format: Literal[TOOL_FORMATS] | None = Field(  # type: ignore[valid-type]
        None, description="the form of a tool call: xml (Ada's tags) or native (JSON in <tool_call>, as the model's chat template teaches)")
    history_thinking: Literal[HISTORY_THINKING] | None = Field(  # type: ignore[valid-type]
        None, description="what earlier replies keep of their thinking in the conversation: keep or drop")
    conclude_checkpoint: Count | None = Field(
        None, description="every this many more distinct files looked at, a turn that may only stash a conclusion, finalizing or not (0 = off)")
    cognitive_streak: Count | None = Field(
        None, description="after this many note or hint calls in a row, a turn that may only navigate (0 = off)")
    checkpoint_turns: Count | None = Field(
        None, description="a checkpoint also once this many turns have passed since the last one (0 = off)")
    conclude_nudge: Count | None = Field(
        None, description="from this many distinct files looked at, each result asks whether they answer the task (0 = off)")


class Block(RunSettings):
    """One ``matrix`` block: models x worlds x tasks x conditions x repeats, with its settings;
    an axis it leaves out comes from the top level."""

    models: Names | None = Field(None, description="model names (the registry, or baseline-*)")
    worlds: Names | None = Field(None, description="world names")
    tasks: Names | None = Field(None, description="task families, or 'all'")
    conditions: Names | None = Field(None, description="condition names")
    repeats: Positive | None = Field(None, description="runs per cell (seeds seed .. seed+k-1)")


class JudgeBlock(_Strict):
    """The ``judge`` block: the post-hoc panel of the judge stage."""

    judges: Names | None = Field(None, description="judge models, or 'paper' for the paper's panel")
    turn_judge: Name | None = Field(None, description="the judge of the turn-level families")
    families: Names | None = Field(None, description="judge families, 'all', 'conclusion' or 'turn'")
    models: Names | None = Field(None, description="judge only these models' runs")
    baseline_runs: Count | None = Field(None, description="runs judged per baseline policy")
    max_turn_items: Positive | None = Field(None, description="turns judged per run and family")
    max_tokens: Positive | None = Field(None, description="cap of one verdict in tokens")
    cache_mode: CacheMode | None = Field(None, description="response cache mode of the judges")


class StudyFile(Block):
    """A study file: where its runs go, how they are launched, and its ``matrix`` blocks."""

    model_config = ConfigDict(title="adakit study file")

    name: Name | None = Field(None, description="the study's name (default: the file's stem)")
    description: Text | None = None
    output: Name | None = Field(None, description="the output folder (relative: to the project root)")
    dataset: Name | None = Field(None, description="the dataset folder `adakit dataset build` packs into")
    changes: Text | None = Field(
        None, description="what changed since the dataset's previous version, and why (its manifest says it)")
    replies: Name | None = Field(
        None, description="a dataset folder whose recorded replies are restored into the response "
                          "cache before the runs are launched or judged (a replay where prompts match)")
    seed: Count | None = Field(None, description="the seed of repeat r0 (repeat r gets seed + r)")
    concurrency: Positive | None = Field(None, description="runs launched in parallel")
    cache_mode: CacheMode | None = Field(None, description="response cache mode")
    hint_model: Name | None = Field(None, description="the model behind the HNT tool")
    coach_model: Name | None = Field(None, description="the coach of coach-judge runs")
    matrix: list[Block] | None = Field(
        None, min_length=1,
        description="the blocks whose runs make the study (needed unless 'forks' is given)")
    forks: list[dict[str, Any]] | None = Field(
        None, min_length=1,
        description="forks of recorded runs (docs/forks.md); each block is checked by adakit.study.fork")
    judge: JudgeBlock | None = None


# --------------------------------------------------------------------------- reading and checking


def read_study_file(path: Path) -> dict[str, Any]:
    """The mapping a study file holds (an empty file: an empty one); StudyError when it is
    not YAML or not a mapping."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise StudyError(f"{path}: not valid YAML: {what}{at}") from None
    except UnicodeDecodeError as exc:
        raise StudyError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise StudyError(f"{path}: a study file is a mapping of keys (name, output, matrix, ...), "
                         f"not a {type(data).__name__}")
    return data


def check_study(data: dict[str, Any], source: str | Path) -> StudyFile:
    """``data`` checked against :class:`StudyFile`; StudyError (one line) when it does not fit."""
    if data.get("matrix") is None and data.get("forks") is None:
        raise StudyError(f"{source}: matrix: is missing (a list of blocks of models, worlds, tasks "
                         "and conditions; or give a 'forks' list)")
    try:
        return StudyFile.model_validate(data)
    except ValidationError as exc:
        problems = [_problem(e) for e in exc.errors(include_url=False)]
        more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
        raise StudyError(f"{source}: " + "; ".join(problems[:3]) + more) from None


def _where(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    items = list(loc)
    while items:
        part = items.pop(0)
        if part == "matrix" and items and isinstance(items[0], int):
            parts.append(f"matrix block {items.pop(0) + 1}")
        elif isinstance(part, int):
            parts[-1:] = [f"{parts[-1] if parts else ''}[{part + 1}]"]
        else:
            parts.append(str(part))
    return ", ".join(parts)


_SAID = {
    "int_type": "must be a whole number", "float_type": "must be a number",
    "string_type": "must be text", "bool_type": "must be true or false",
    "list_type": "must be a list", "model_type": "must be a mapping of keys",
    "dict_type": "must be a mapping of keys",
}


def _problem(error: Any) -> str:
    """One validation error in words: where, what, what was given, and a hint for YAML."""
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    if kind == "missing":
        said = "is missing" + (" (a list of blocks of models, worlds, tasks and conditions)"
                               if error["loc"] == ("matrix",) else "")
    elif kind == "unknown_key":
        said = error["msg"]
    elif kind == "literal_error":
        said = f"must be one of {ctx.get('expected', '')}"
    elif kind in ("greater_than", "greater_than_equal"):
        said = f"must be {'more than' if kind == 'greater_than' else 'at least'} {ctx.get('gt', ctx.get('ge'))}"
    elif kind == "too_short":
        said = "must not be empty"
    else:
        said = _SAID.get(kind, error["msg"])
    if kind not in ("missing", "unknown_key", "too_short") and not isinstance(value, (dict, list)):
        said += f", got {json.dumps(value) if isinstance(value, bool) or value is None else repr(value)}"
    where = _where(error["loc"])
    if isinstance(value, bool) and kind in ("literal_error", "string_type"):
        words = "off, no and false" if value is False else "on, yes and true"
        example = (f', e.g. {error["loc"][-1]}: "off"' if value is False and "'off'" in ctx.get("expected", "")
                   else "")
        said += f" (YAML reads an unquoted {words} as {json.dumps(value)}: quote the word{example})"
    return f"{where}: {said}" if where else said


def study_json_schema() -> dict[str, Any]:
    """The JSON Schema of a study file, as published in ``docs/study.schema.json``."""
    schema = StudyFile.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def _cmd_study_schema(args: Any) -> int:
    return emit_schema(study_json_schema(), args.write)


def register_cli(sub: Any) -> None:
    """``adakit study-schema``: print (or write) the JSON Schema of study files."""
    p = sub.add_parser("study-schema", help="the JSON Schema of study files (studies/*.yaml)")
    p.add_argument("--write", metavar="PATH", nargs="?", const=str(STUDY_SCHEMA_DOC),
                   help="write it to a file (default docs/study.schema.json)")
    p.set_defaults(func=_cmd_study_schema)
