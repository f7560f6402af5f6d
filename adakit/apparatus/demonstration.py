"""A worked demonstration of the interface, for the system prompt of small models.

A scaffold aid (``RunConfig.demonstration``, ``"off"`` by default and in the paper profile;
docs/deviations.md). SWE-agent found that one demonstration trajectory teaches a small model
the interface better than a description alone. The demonstration is a short run on a toy
repository written for adakit (``demonstration.yaml``; none of the study's worlds): what the
agent thinks and calls is written there, and every observation is produced by running the
call with adakit's own tools on those files, so the example shows exactly what the tools
print. It sits in the system prompt, the cached prefix of every request, so it costs its
tokens once per run.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from adakit.apparatus.protocol import render_call
from adakit.apparatus.tools import Toolbox
from adakit.apparatus.world import World
from adakit.record import ToolCall

#: The demonstration choices: none, or the toy run of ``demonstration.yaml``.
DEMONSTRATIONS = ("off", "toy")
#: Each observation of the demonstration keeps at most this many lines.
OBSERVATION_LINES = 16
_SOURCE = Path(__file__).with_name("demonstration.yaml")


@dataclass(frozen=True)
class DemoStep:
    """One step of the demonstration: the thinking, the call, and what the tools answered."""

    thinking: str
    call: ToolCall
    observation: str
    error_type: str | None


def _load() -> dict[str, Any]:
    return yaml.safe_load(_SOURCE.read_text(encoding="utf-8"))


def demo_steps() -> list[DemoStep]:
    """The demonstration's steps, each call run by the tools on the toy repository."""
    spec = _load()
    with tempfile.TemporaryDirectory(prefix="adakit-demo-") as tmp:
        root = Path(tmp) / spec["world"]
        for rel, text in spec["files"].items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        box = Toolbox(World(root, name=spec["world"], language="python"))
        steps = []
        for raw in spec["steps"]:
            result = box.execute(raw["tool"], dict(raw["params"]))
            steps.append(DemoStep(
                thinking=" ".join(raw["thinking"].split()),
                call=ToolCall(tool=raw["tool"], params=dict(raw["params"])),
                observation=result.text,
                error_type=result.metrics.error_type,
            ))
    return steps


def _first_lines(text: str, n: int) -> str:
    lines = text.rstrip("\n").splitlines()
    if len(lines) <= n:
        return "\n".join(lines)
    return "\n".join(lines[:n] + [f"[... {len(lines) - n} more lines in the real result]"])


@functools.lru_cache(maxsize=4)
def demonstration_text(choice: str = "toy", observation_lines: int = OBSERVATION_LINES,
                       render: Callable[[ToolCall, str], str] = render_call) -> str:
    """The demonstration as it appears in the system prompt ("" when ``choice`` is "off"),
    each example call written by ``render`` (call, thinking -> message text)."""
    if choice not in DEMONSTRATIONS:
        raise ValueError(f"demonstration must be one of {', '.join(DEMONSTRATIONS)}, got {choice!r}")
    if choice == "off":
        return ""
    spec = _load()
    parts = [
        "# A worked example",
        f"This is a different, tiny repository ({spec['world']}/), not yours; it only shows the "
        "rhythm: think about the last result, make one call that follows from it, read code "
        "before concluding, and finish with the evidence.",
        f"Example task: {' '.join(spec['task'].split())}",
    ]
    for k, step in enumerate(demo_steps(), start=1):
        parts.append(f"Example message {k}:\n{render(step.call, step.thinking)}")
        if step.call.tool != "stash_conclusion":
            parts.append(f"[{step.call.tool} result]\n"
                         f"{_first_lines(step.observation, observation_lines)}")
    parts.append("(End of the example. Work on your own repository, described above, and on the "
                 "task of the next message.)")
    return "\n\n".join(parts)
