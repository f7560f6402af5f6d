"""Lens 3's check of the judges' evidence: do the strings a judge cites occur in what it read?

Every verdict carries up to three evidence strings, asked for as pointers into the material: a
turn number, a file or symbol name, a phrase quoted from the run. A judge that invents a quote
(a small model translating a word of the conclusion into another language, say) still gets a
valid verdict from the schema. This check compares each string with the run's material: the
judge prompts adakit renders for the run, and the run's own text (thinking, calls,
observations, conclusion).

Each evidence string gets one kind:

- ``verbatim``: the string (after an optional leading turn pointer such as ``Turn 3:``), or
  every quoted segment inside it, occurs in the material, compared case-folded with spaces
  collapsed and ellipses splitting a quote into pieces;
- ``pointer``: a bare reference to turns that exist in the run (``turn 4``, ``T2-T3``,
  ``EXP6``), or a file path of the material with an optional line (``src/app.py#L20``);
- ``not found``: neither, which is a paraphrase or a description as often as an invention.

``foreign_script`` marks a string with letters of a script (CJK, Cyrillic, ...) that occurs
nowhere in the material: a quote that cannot have been copied.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from adakit.record import RunFile, read_run

KINDS = ("verbatim", "pointer", "not found")

_SPACE = re.compile(r"\s+")
_QUOTED = re.compile(r"\"([^\"]{3,})\"|“([^”]{3,})”|(?<!\w)'([^']{3,})'(?!\w)|`([^`]{3,})`")
_TURN_REF = r"(?:turns?|steps?|t|[a-z]{3})\s*#?\s*(\d+)"
_POINTER = re.compile(rf"^\(?{_TURN_REF}(?:\s*(?:-|–|to|and|,)\s*(?:t\s*)?(\d+))*\)?[.:)]?$")
_LEADING_POINTER = re.compile(rf"^\(?{_TURN_REF}\)?\s*[:,\-–)]\s*")
_FILE_REF = re.compile(r"^([\w.\-]+(?:/[\w.\-]+)+|[\w\-]+\.[a-z]{1,5})(?:#l\d+(?:-l?\d+)?|:\d+(?:-\d+)?|"
                       r"\s+lines?\s+\d+(?:\s*-\s*\d+)?)?$")
_ELLIPSIS = re.compile(r"\.{3,}|…")
_EDGES = " \t\"'“”‘’`.,;:()[]"


def normalise(text: str) -> str:
    """Text as compared: NFKC, case-folded, whitespace collapsed."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def _scripts(text: str) -> set[str]:
    """The scripts of a text's letters, by the first word of their Unicode names."""
    out = set()
    for ch in text:
        if ch.isalpha():
            try:
                out.add(unicodedata.name(ch).split(" ")[0])
            except ValueError:
                out.add("UNNAMED")
    return out


def run_material(rf: RunFile, world: object = None) -> str:
    """Everything a judge of this run can have read, normalised: the rendered judge prompts of
    every family and step, and the run's thinking, calls, observations and conclusion."""
    from adakit.judging.context import build_items

    parts = [item.prompt_text for item in build_items(rf, world=world)]
    for t in rf.turns:
        parts += [t.thinking, t.raw_text, t.observation]
        if t.call is not None:
            parts.append(f"{t.call.tool} {json.dumps(t.call.params, ensure_ascii=False)}")
    if rf.end is not None:
        parts += [rf.end.conclusion_title or "", rf.end.conclusion or ""]
    return normalise("\n".join(p for p in parts if p))


def evidence_items(value: object) -> list[str]:
    """A verdict's evidence as a list of strings (stored as a JSON list in the table)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return [value] if value.strip() else []
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        return [str(v) for v in value if str(v).strip()]
    return []


def _found(quote: str, material: str) -> bool:
    pieces = [p.strip(_EDGES) for p in _ELLIPSIS.split(normalise(quote))]
    pieces = [p for p in pieces if len(p) >= 3]
    return bool(pieces) and all(p in material for p in pieces)


def classify(evidence: str, material: str, n_turns: int) -> str:
    """The kind of one evidence string against a run's normalised material (see the module)."""
    text = normalise(evidence).strip(_EDGES)
    pointer = _POINTER.match(text)
    if pointer:
        numbers = [int(n) for n in pointer.groups() if n]
        return "pointer" if all(1 <= n <= n_turns for n in numbers) else "not found"
    path = _FILE_REF.match(text)
    if path:
        return "pointer" if path.group(1) in material else "not found"
    quoted = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(evidence)]
    if quoted and all(_found(q, material) for q in quoted):
        return "verbatim"
    rest = _LEADING_POINTER.sub("", text)
    return "verbatim" if _found(rest, material) else "not found"


def check_evidence(
    judgments: pd.DataFrame, materials: Mapping[str, str], n_turns: Mapping[str, int]
) -> pd.DataFrame:
    """One row per evidence string of every valid verdict whose run has material: its kind
    and whether it uses a script absent from the material (no rows for a table without an
    ``evidence`` column)."""
    cols = ["item_id", "run_id", "family", "judge", "position", "evidence", "kind",
            "foreign_script"]
    if "evidence" not in judgments:  # e.g. a table written elsewhere, without evidence
        return pd.DataFrame(columns=cols)
    rows = []
    scripts: dict[str, set[str]] = {}
    valid = judgments[judgments["valid"].astype(bool)] if "valid" in judgments else judgments
    for v in valid.itertuples(index=False):
        material = materials.get(v.run_id)
        if material is None:
            continue
        known = scripts.setdefault(v.run_id, _scripts(material))
        for i, ev in enumerate(evidence_items(v.evidence)):
            rows.append({
                "item_id": v.item_id, "run_id": v.run_id, "family": v.family,
                "judge": v.judge, "position": i, "evidence": ev,
                "kind": classify(ev, material, n_turns.get(v.run_id, 0)),
                "foreign_script": bool(_scripts(ev) - known),
            })
    return pd.DataFrame(rows, columns=cols)


def evidence_summary(check: pd.DataFrame, by: Iterable[str] = ("judge", "family")) -> pd.DataFrame:
    """Per group: verdicts, evidence strings, the share (%) of each kind, and the verdicts
    citing a string in a script absent from the material."""
    by = list(by)
    if check.empty:
        return pd.DataFrame(columns=[*by, "verdicts", "strings", *KINDS, "foreign_verdicts"])
    shares = pd.crosstab([check[c] for c in by], check["kind"], normalize="index") * 100
    shares = shares.reindex(columns=list(KINDS), fill_value=0.0)
    keyed = check.assign(verdict=check["item_id"] + "\x00" + check["judge"])
    out = keyed.groupby(by).agg(verdicts=("verdict", "nunique"), strings=("verdict", "size"))
    out = out.join(shares)
    foreign = keyed[keyed["foreign_script"]].groupby(by)["verdict"].nunique()
    out["foreign_verdicts"] = foreign.reindex(out.index).fillna(0).astype(int)
    out.columns.name = None
    return out.reset_index()


def corpus_materials(
    runs: pd.DataFrame, run_ids: Iterable[str] | None = None, worlds: bool = True
) -> tuple[dict[str, str], dict[str, int]]:
    """The material and turn count of each run (``runs`` from a corpus: its ``path`` column),
    for the runs in ``run_ids``; a world already fetched here gives its structure summary."""
    from adakit.judging.context import fetched_world

    wanted = set(runs["run_id"] if run_ids is None else run_ids)
    opened: dict[str, object] = {}
    materials, turns = {}, {}
    for r in runs[runs["run_id"].isin(wanted)].itertuples(index=False):
        if not isinstance(r.path, str) or not Path(r.path).exists():
            continue
        rf = read_run(r.path)
        world = None
        if worlds:
            if r.world not in opened:
                opened[r.world] = fetched_world(r.world)
            world = opened[r.world]
        materials[r.run_id] = run_material(rf, world)
        turns[r.run_id] = len(rf.turns)
    return materials, turns
