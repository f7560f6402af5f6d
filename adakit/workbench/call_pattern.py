"""Sequence queries: a run's calls matched against a pattern of canonical actions (issue 28).

A pattern is a list of steps separated by spaces (docs/search.md):

- ``PKR`` one call of that canonical action (:data:`adakit.record.CANONICAL_ORDER`: OVW PKR
  EXP MEM BKM HNT CON, and EDT EXE SUB of imported agents); ``PKR|OVW`` either of them;
  ``_`` any one call;
- ``*`` any number of calls, none included, between the steps around it (a ``*`` at either
  end changes nothing: every start is tried, and a match ends at its last step);
- conditions in parentheses after an action: ``PKR(file=X)``, ``EXP(action=references)``,
  ``CON(finalize=true)``, ``PKR(file="app.py", error=none)``. The keys are those of
  :data:`KEYS`. A bare value of capitals and digits (``X``, ``F2``; not TRUE, FALSE or
  NONE) is a **variable**: every
  step naming it must see the same value, and the match reports what it was bound to. Any
  other value, bare or quoted, is a literal; a file literal also matches a path ending in
  ``/`` and that name, ``none`` matches a missing value.

Steps follow each other call by call: ``PKR PKR`` means two calls in a row. Turns without a
canonical action (a malformed reply, an unknown tool) are not calls and are passed over. A run
is scanned from its first call; at each start the match that ends first is kept (each ``*``
takes as few calls as it can, left to right), and the scan resumes after it, so the matches of
a run do not overlap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from adakit.record import CANONICAL_ORDER

#: Condition keys -> the turns-table column they test.
KEYS: dict[str, str] = {
    "file": "file", "action": "action", "symbol": "symbol", "block": "block",
    "error": "error_type", "finalize": "finalize", "confidence": "confidence",
}
ANY_ONE = "_"
GAP = "*"
_VARIABLE = re.compile(r"[A-Z][A-Z0-9_]*\Z")
_WORDS = frozenset({"TRUE", "FALSE", "NONE"})  # literals however they are written
_TOKEN = re.compile(r"\s*(?:(?P<gap>\*)|(?P<name>[A-Za-z_|]+)(?P<args>\([^)]*\)?)?|(?P<bad>\S+))")
_ARG = re.compile(r"\s*(?P<key>[a-z_]+)\s*=\s*(?:\"(?P<dq>[^\"]*)\"|'(?P<sq>[^']*)'|(?P<bare>[^,\s]+))\s*(?:,|\Z)")


class PatternError(ValueError):
    """A sequence pattern that cannot be read; the message says where (a 1-based column)."""


@dataclass(frozen=True)
class Condition:
    """One ``key=value`` of a step; ``variable`` True when the value names a variable."""

    key: str
    value: str
    variable: bool


@dataclass(frozen=True)
class PatternStep:
    """One step of a pattern: the actions it accepts (empty: any), its conditions, or a gap."""

    actions: frozenset[str] = frozenset()
    conditions: tuple[Condition, ...] = ()
    gap: bool = False


def _fault(pattern: str, column: int, what: str) -> PatternError:
    return PatternError(f"sequence pattern {pattern!r}: at column {column}, {what}")


def _conditions(pattern: str, args: str, column: int) -> tuple[Condition, ...]:
    """The conditions of ``(key=value, ...)`` starting at ``column`` (of the parenthesis)."""
    if not args.endswith(")"):
        raise _fault(pattern, column, "a '(' without its ')'")
    body, at, out = args[1:-1], 0, []
    while at < len(body):
        m = _ARG.match(body, at)
        if m is None:
            raise _fault(pattern, column + 1 + at, "expected key=value (e.g. file=X, "
                         "action=references)")
        key = m.group("key")
        if key not in KEYS:
            raise _fault(pattern, column + 1 + at + m.start("key") - at,
                         f"unknown key {key!r} (keys: {', '.join(KEYS)})")
        bare = m.group("bare")
        value = bare if bare is not None else (m.group("dq") if m.group("dq") is not None
                                                else m.group("sq"))
        variable = bare is not None and bool(_VARIABLE.match(bare)) and bare not in _WORDS
        out.append(Condition(key, value, variable))
        at = m.end()
    return tuple(out)


def parse_pattern(pattern: str) -> list[PatternStep]:
    """The steps of a sequence pattern; a :class:`PatternError` names the column at fault."""
    steps: list[PatternStep] = []
    at = 0
    while at < len(pattern.rstrip()):
        m = _TOKEN.match(pattern, at)
        assert m is not None  # the last alternative takes any non-space text
        column = m.end() - len(m.group().lstrip()) + 1
        if m.group("bad") is not None:
            raise _fault(pattern, column, f"cannot read {m.group('bad')!r} (a step is an "
                         f"action such as PKR, PKR(file=X), {ANY_ONE} or {GAP})")
        if m.group("gap"):
            steps.append(PatternStep(gap=True))
        else:
            names = m.group("name").split("|")
            unknown = [n for n in names if n != ANY_ONE and n not in CANONICAL_ORDER]
            if unknown or not all(names):
                raise _fault(pattern, column, f"unknown action {unknown[0] if unknown else '|'!r} "
                             f"(actions: {' '.join(CANONICAL_ORDER)}, {ANY_ONE} for any)")
            args = m.group("args") or ""
            conds = _conditions(pattern, args, m.start("args") + 1) if args else ()
            steps.append(PatternStep(frozenset() if ANY_ONE in names else frozenset(names), conds))
        at = m.end()
    while steps and steps[0].gap:  # the scan tries every start: a leading gap adds nothing
        steps.pop(0)
    while steps and steps[-1].gap:  # and a lazy trailing gap takes no call
        steps.pop()
    if not steps:
        raise PatternError(f"sequence pattern {pattern!r} names no action (e.g. 'PKR(file=X) "
                           "* PKR(file=X) CON')")
    return steps


def _same(key: str, want: str, have: Any) -> bool:
    """Whether a literal condition value ``want`` accepts the call's value ``have``."""
    if have is None or (isinstance(have, float) and pd.isna(have)):
        return want.lower() == "none"
    if isinstance(have, bool):
        return want.lower() == str(have).lower()
    have = str(have)
    return have == want or (key == "file" and have.endswith("/" + want))


def _accepts(step: PatternStep, call: Mapping[str, Any], env: dict[str, Any]) -> dict[str, Any] | None:
    """The variable bindings after ``call`` takes ``step`` (None: it cannot)."""
    if step.actions and call["tool"] not in step.actions:
        return None
    out = env
    for c in step.conditions:
        have = call[KEYS[c.key]]
        if not c.variable:
            if not _same(c.key, c.value, have):
                return None
        elif have is None or (isinstance(have, float) and pd.isna(have)):
            return None
        elif c.value in out:
            if out[c.value] != have:
                return None
        else:
            out = {**out, c.value: have}
    return out


def _match(steps: Sequence[PatternStep], calls: Sequence[Mapping[str, Any]], i: int, k: int,
           env: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """(index after the last call taken, bindings) of the lazy match of ``steps[k:]`` from
    call ``i``, or None."""
    if k == len(steps):
        return i, env
    step = steps[k]
    if step.gap:
        for j in range(i, len(calls) + 1):
            found = _match(steps, calls, j, k + 1, env)
            if found is not None:
                return found
        return None
    if i >= len(calls):
        return None
    bound = _accepts(step, calls[i], env)
    return None if bound is None else _match(steps, calls, i + 1, k + 1, bound)


def run_matches(steps: Sequence[PatternStep], calls: Sequence[Mapping[str, Any]]
                ) -> list[tuple[int, int, dict[str, Any]]]:
    """The non-overlapping matches in one run's calls (dicts with ``turn``, ``tool`` and the
    :data:`KEYS` columns, in turn order): (first turn, last turn, bindings) each."""
    out: list[tuple[int, int, dict[str, Any]]] = []
    i = 0
    while i < len(calls):
        found = _match(steps, calls, i, 0, {})
        if found is None:
            i += 1
            continue
        end, env = found
        out.append((int(calls[i]["turn"]), int(calls[end - 1]["turn"]), env))
        i = end
    return out
