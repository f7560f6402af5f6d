"""c, the launch conditions (paper Table 4 / A2) as data: a stance, a budget, reminders."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from adakit import config


@dataclass(frozen=True)
class Reminder:
    at: str | int
    text: str


@dataclass(frozen=True)
class Condition:
    """A condition: stance text for the scaffold, optional budget and reminder schedule."""

    name: str
    description: str = ""
    stance: str = ""
    budget: int | None = None
    reminders: tuple[Reminder, ...] = ()
    coach: bool = False
    params: dict[str, Any] = field(default_factory=dict)

    def schedule(self) -> dict[int, str]:
        """Remaining-turn count -> reminder text; a later milestone wins a collision."""
        if not self.budget:
            return {}
        out: dict[int, str] = {}
        for r in self.reminders:
            out[_remaining_at(r.at, self.budget)] = r.text
        return out

    def reminder_after(self, used: int) -> str | None:
        """The reminder to inject after ``used`` turns, if a milestone is reached."""
        if not self.budget:
            return None
        remaining = self.budget - used
        text = self.schedule().get(remaining)
        if text is None:
            return None
        return text.format(remaining=remaining, budget=self.budget, used=used)


def _remaining_at(at: str | int, budget: int) -> int:
    if at == "half":
        return max(1, round(budget / 2))
    if at == "quarter":
        return max(1, round(budget / 4))
    if at == "final":
        return 1
    if isinstance(at, int) or (isinstance(at, str) and at.isdigit()):
        return int(at)
    raise ValueError(f"reminder 'at' must be half, quarter, final or a number, not {at!r}")


@lru_cache(maxsize=4)
def _load(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def load_conditions(path: Path | None = None) -> dict[str, Condition]:
    """Every condition defined in the conditions file."""
    data = _load(str(path or config.CONDITIONS_FILE))
    out = {}
    for name, entry in data.items():
        entry = entry or {}
        reminders = tuple(Reminder(at=r["at"], text=r["text"]) for r in entry.get("reminders") or [])
        for r in reminders:
            _remaining_at(r.at, 12)  # validate early
        out[name] = Condition(
            name=name,
            description=entry.get("description", ""),
            stance=entry.get("stance") or "",
            budget=entry.get("budget"),
            reminders=reminders,
            coach=bool(entry.get("coach", False)),
            params={k: v for k, v in entry.items() if k not in {"description", "stance", "budget", "reminders", "coach"}},
        )
    return out


def get_condition(name: str, path: Path | None = None, budget: int | None = None) -> Condition:
    """A condition by name, optionally with its budget overridden."""
    conds = load_conditions(path)
    if name not in conds:
        raise KeyError(f"unknown condition {name!r}; known: {', '.join(conds)}")
    c = conds[name]
    if budget is not None and c.budget is not None:
        c = Condition(c.name, c.description, c.stance, budget, c.reminders, c.coach, c.params)
    return c
