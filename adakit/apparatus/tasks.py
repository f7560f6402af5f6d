"""tau, the task activators: four task families (paper Table 2), loaded from ``tasks.yaml``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from adakit import config


@dataclass(frozen=True)
class Task:
    """A task family instantiated for one world."""

    family: str
    title: str
    prompt: str
    target: str | None = None


@lru_cache(maxsize=4)
def _load(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def task_families(path: Path | None = None) -> list[str]:
    """The task family names, in file order."""
    data = _load(str(path or config.TASKS_FILE))
    return [k for k in data if k != "targets"]


def make_task(family: str, world: str, path: Path | None = None) -> Task:
    """The task of ``family`` for ``world`` (feature tracing gets the world's target)."""
    data = _load(str(path or config.TASKS_FILE))
    if family not in data or family == "targets":
        raise KeyError(f"unknown task family {family!r}; known: {', '.join(task_families(path))}")
    entry = data[family]
    prompt = entry["prompt"]
    target = None
    if "{target}" in prompt:
        targets = data.get("targets", {})
        target = targets.get(world, targets.get("default", "the main feature"))
        prompt = prompt.replace("{target}", target)
    return Task(family=family, title=entry.get("title", family), prompt=prompt, target=target)
