"""Scripted baseline policies: deterministic, honest reference agents (never an LLM).

Each policy speaks Ada's XML protocol through the same backend interface as a model, so its
calls run through the real tools and are recorded like any other run. Each has a known
behavioural signature that the lens tests check:

- ``skimmer``: breadth-first; a structural overview of many files, short peeks (skim, zoom in).
- ``tracer``: follows definitions and references across files (trace, traverse).
- ``close_reader``: reads few files top to bottom in contiguous windows (close read), the most
  concentrated footprint.

A policy plans from the world's file list and the code index (what the project structure and
structural overviews show an agent), keeps a log of what it asked to see, and concludes from
that log. Given the same world and seed it makes the same calls. A budget in the task shortens
its plan; a budget given in the middle of the run (a fork's ``--condition``, "from now on you
have M exploration turns left") cuts the rest of its plan so that it concludes within M turns.
"""

from __future__ import annotations

import random
import re
import time
from typing import Any

from adakit.apparatus.native import render_native_call
from adakit.apparatus.protocol import render_call
from adakit.apparatus.world import World
from adakit.llm.models import BASELINES, Completion, ModelSpec
from adakit.record import ToolCall

_DATA_KINDS = {"variable", "const", "static", "constant", "field", "type"}
_BUDGET_RE = re.compile(r"budget of (\d+) exploration turns")
#: A budget given in the middle of a run (a fork's condition change, adakit.study.fork.budget_note).
_LATE_BUDGET_RE = re.compile(r"from now on you have (\d+) exploration turns left")


def late_budget(messages: list[dict[str, Any]]) -> int | None:
    """The calls a budget given in the middle of the run still allows before the concluding
    one: the last such note's turns, less one, less the replies made since it was shown;
    None when no message gives one."""
    for i in range(len(messages) - 1, -1, -1):
        content = messages[i].get("content")
        found = _LATE_BUDGET_RE.search(content) if isinstance(content, str) else None
        if found and messages[i].get("role") != "assistant":
            since = sum(1 for m in messages[i + 1:] if m.get("role") == "assistant")
            return max(0, int(found.group(1)) - 1 - since)
    return None


def baseline_spec(name: str) -> ModelSpec:
    """The registry entry of a baseline named ``baseline-<policy>`` or ``<policy>``."""
    policy = name.removeprefix("baseline-")
    if policy not in BASELINES:
        raise KeyError(f"unknown baseline {name!r}; known: {', '.join('baseline-' + b for b in BASELINES)}")
    return ModelSpec(
        name=f"baseline-{policy}",
        kind="baseline",
        model_id=f"scripted:{policy}",
        temperature=None,
        description=f"scripted {policy} baseline policy (deterministic; not an LLM)",
    )


def _task_words(text: str) -> set[str]:
    stop = {"the", "and", "for", "from", "with", "this", "that", "its", "into", "main", "path", "code"}
    return {w for w in re.findall(r"[a-z]{4,}", text.lower()) if w not in stop}


class BaselinePolicy:
    """A scripted backend: ``complete(messages)`` returns the next call of a fixed plan."""

    def __init__(self, spec: ModelSpec, world: World, index: Any, seed: int = 0, steps: int | None = None) -> None:
        self.spec = spec
        self.policy = spec.name.removeprefix("baseline-")
        self.world = world
        self.index = index
        self.seed = seed
        self.rng = random.Random(f"{self.policy}:{world.name}:{seed}")
        self.steps = max(4, steps if steps is not None else 12 + self.rng.randrange(10))
        self.queue: list[tuple[str, dict[str, Any], str]] | None = None
        self.seen: list[tuple[str, str]] = []  # (file, what) in order

    # -------------------------------------------------------------- planning helpers

    def _files(self, task_text: str) -> list[str]:
        files = self.world.source_files() or self.world.files()
        words = _task_words(task_text)

        def score(rel: str) -> tuple[int, int, str]:
            name = rel.lower()
            hits = sum(1 for w in words if w[:5] in name)
            return (-hits, rel.count("/"), rel)

        ranked = sorted(files, key=score)
        head = ranked[: max(3, len(ranked) // 3)]
        self.rng.shuffle(head)
        hits = [f for f in ranked if score(f)[0] < 0]
        return list(dict.fromkeys(hits[:2] + head + ranked))

    def _symbols(self, rel: str, code_only: bool = True) -> list[Any]:
        """The file's symbols; by default only code blocks (no module-level variables)."""
        try:
            syms = list(self.index.outline(rel).symbols)
        except Exception:  # unparsable or unsupported file: no symbols
            return []
        if code_only:
            syms = [s for s in syms if s.kind not in _DATA_KINDS]
        return syms

    def _plan(self, task_text: str) -> list[tuple[str, dict[str, Any], str]]:
        return getattr(self, f"_plan_{self.policy}")(self._files(task_text))

    def _plan_skimmer(self, files: list[str]) -> list[tuple[str, dict[str, Any], str]]:
        plan: list[tuple[str, dict[str, Any], str]] = []
        budget = self.steps - 2
        for i, rel in enumerate(files):
            if len(plan) >= budget:
                break
            plan.append(("get_structural_overview", {"file_path": rel}, f"Survey {rel} to see its parts."))
            syms = self._symbols(rel)
            if i % 3 == 2 and syms and len(plan) < budget:
                s = syms[0]
                plan.append(
                    (
                        "peek_code_region",
                        {"file_path": rel, "start_line": s.start_line, "end_line": min(s.end_line, s.start_line + 12)},
                        f"Glance at the start of {s.name}.",
                    )
                )
        plan.append(("create_memory", {"memory_title": "Survey", "memory_content": "", "confidence_level": "medium"}, "Note the survey."))
        return plan

    def _plan_tracer(self, files: list[str]) -> list[tuple[str, dict[str, Any], str]]:
        plan: list[tuple[str, dict[str, Any], str]] = []
        start = next((f for f in files if self._symbols(f)), files[0] if files else None)
        if start is None:
            return plan
        plan.append(("get_structural_overview", {"file_path": start}, f"Find entry points in {start}."))
        frontier = [(start, s) for s in self._symbols(start)[:6]]
        visited: set[str] = set()
        while frontier and len(plan) < self.steps - 2:
            rel, sym = frontier.pop(0)
            if sym.name in visited:
                continue
            visited.add(sym.name)
            plan.append(
                (
                    "explore_code",
                    {"action_type": "find_all_references", "current_file_path": rel,
                     "current_line_number": sym.start_line, "symbol_name": sym.name},
                    f"Who uses {sym.name}?",
                )
            )
            try:
                refs, _total = self.index.references(sym.name, limit=20)
            except Exception:
                refs = []
            other = [r for r in refs if r.file != rel]
            if not other:
                continue
            ref = other[self.rng.randrange(len(other))]
            lo = max(1, ref.line - 8)
            plan.append(
                (
                    "peek_code_region",
                    {"file_path": ref.file, "start_line": lo, "end_line": ref.line + 8},
                    f"Read the use of {sym.name} in {ref.file}.",
                )
            )
            plan.append(
                (
                    "explore_code",
                    {"action_type": "go_to_definition", "current_file_path": ref.file,
                     "current_line_number": ref.line, "symbol_name": sym.name},
                    f"Jump back to the definition of {sym.name}.",
                )
            )
            frontier.extend((ref.file, s) for s in self._symbols(ref.file)[:3])
        # the tracer concludes straight from navigation (a close-out transition)
        return plan

    def _plan_close_reader(self, files: list[str]) -> list[tuple[str, dict[str, Any], str]]:
        plan: list[tuple[str, dict[str, Any], str]] = []
        window = 40
        for rel in files[:2]:
            total = self.world.line_count(rel)
            line = 1
            while line <= total and len(plan) < self.steps - 2:
                plan.append(
                    (
                        "peek_code_region",
                        {"file_path": rel, "start_line": line, "end_line": line + window - 1},
                        f"Keep reading {rel} from line {line}.",
                    )
                )
                line += window
                if len(plan) % 5 == 4:
                    plan.append(("bookmark", {"file_path": rel, "line_number": line - 1, "note": "Return here."}, "Mark the spot."))
        plan.append(("create_memory", {"memory_title": "Reading notes", "memory_content": "", "confidence_level": "high"}, "Write notes."))
        return plan

    # -------------------------------------------------------------- protocol

    def _summary(self) -> str:
        files = list(dict.fromkeys(f for f, _ in self.seen))
        parts = [f"{len(self.seen)} steps over {len(files)} files."]
        for rel in files[:6]:
            names = [s.name for s in self._symbols(rel)[:4]]
            parts.append(f"{rel}: " + (", ".join(names) if names else "no symbols found"))
        return " ".join(parts)

    def _next_step(self) -> tuple[ToolCall, str]:
        """Take the plan's next call (and why), noting which file it looks at."""
        assert self.queue
        tool, params, why = self.queue.pop(0)
        params = dict(params)
        if tool == "create_memory":
            params["memory_content"] = self._summary()
        if "file_path" in params or "current_file_path" in params:
            self.seen.append((params.get("file_path") or params["current_file_path"], tool))
        return ToolCall(tool=tool, params=params), why

    def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> Completion:
        """The next scripted call, rendered in the XML protocol, or in the native format
        when the request lists the tools (``tool_format: native``)."""
        t0 = time.perf_counter()
        if self.queue is None:
            task_text = next((m["content"] for m in messages if m["role"] == "user"), "")
            budget = _BUDGET_RE.search(task_text)
            if budget:  # a budget block in the task: plan to conclude within it
                self.steps = min(self.steps, max(4, int(budget.group(1)) - 1))
            self.rng.seed(f"{self.policy}:{self.world.name}:{self.seed}:{task_text}")
            self.queue = self._plan(task_text)
            # a resumed run hands over the replies it already recorded: continue the plan
            # after them, so the policy's calls depend on the history alone
            for _ in range(sum(1 for m in messages if m["role"] == "assistant")):
                if not self.queue:
                    break
                self._next_step()
        allowed = late_budget(messages)
        if allowed is not None:  # a budget given mid-run: conclude within it, as for the task's
            del self.queue[allowed:]
        if self.queue:
            call, why = self._next_step()
            thinking = f"[{self.policy} baseline] {why}"
        else:
            call = ToolCall(
                tool="stash_conclusion",
                params={
                    "title": f"{self.policy} baseline summary",
                    "content": "Scripted baseline; evidence gathered: " + self._summary(),
                    "proceed_to_finalize": True,
                },
            )
            thinking = f"[{self.policy} baseline] Plan done; conclude from what was read."
        text = (render_native_call if kwargs.get("tools") else render_call)(call, thinking)
        return Completion(
            text=text,
            tokens_in=0,
            tokens_out=0,
            latency_s=time.perf_counter() - t0,
            cached=False,
            cost_usd=None,
            constrained=False,
            finish_reason="stop",
            tool_calls=[],
        )
