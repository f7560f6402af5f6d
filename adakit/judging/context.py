"""The context a judge reads: one item per question, built from a run file.

Every item is built from a run file into a compact, capped context (:class:`ContextCaps`)
and anonymised (:mod:`adakit.judging.anonymise`); injected reminders and coach messages are
stripped from the observations. A conclusion-level item shows the task, the conclusion and,
per family, the required concerns, the end of the trace with the code it viewed, or the
run's shape and coverage; a turn-level item shows the step with a summary of the turns
before it and a window of the last few in detail. The rendered messages carry an opaque,
stable item id (:func:`item_id`), never the run's own.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from functools import cache, lru_cache
from typing import Any, Literal

import numpy as np

from adakit import config
from adakit.judging.anonymise import DEFAULT_REDACTIONS, Anonymiser, anonymiser_for
from adakit.judging.families import FAMILIES, JUDGE_PROMPTS, Family, get_family
from adakit.record import ACT_ORDER, NAV, TOOL_ABBR, RunFile, Turn, merge_ranges
from adakit.text import clip as _cut

#: How the judge context marks a cut: the number of characters left out, within the cap.
CONTEXT_CUT = " [... {n} more characters]"

@dataclass(frozen=True)
class ContextCaps:
    """Character caps of every context section (the local judge has an 8k-token context;
    ``prompt`` caps the whole user message, shrinking all sections together if needed)."""

    task: int = 1200
    conclusion: int = 3000
    scope_note: int = 300
    prefix_summary: int = 1800
    prefix_line: int = 160
    excerpt: int = 2400
    excerpt_turns: int = 4
    snippets: int = 2400
    snippet_lines: int = 4
    trajectory_summary: int = 1200
    coverage: int = 1000
    structure: int = 1200
    window: int = 2000
    window_turns: int = 3
    thinking: int = 400
    observation: int = 500
    action: int = 1200
    artifact: int = 1500
    prompt: int = 14000

    def scaled(self, factor: float) -> ContextCaps:
        """Every character cap multiplied by ``factor`` (counts of turns and lines kept)."""
        keep = {"excerpt_turns", "window_turns", "snippet_lines", "prompt"}
        changes = {
            f.name: max(40, int(getattr(self, f.name) * factor))
            for f in fields(self)
            if f.name not in keep
        }
        return replace(self, **changes)


def clip(text: str, cap: int) -> str:
    """``text`` cut to at most ``cap`` characters, saying how much was cut (a cap of 0 keeps
    only that note)."""
    if cap == 0 and text.strip():
        return CONTEXT_CUT.format(n=len(text.strip()))
    return _cut(text, cap, marker=CONTEXT_CUT)


def clip_lines(lines: Sequence[str], cap: int, keep: Literal["head", "tail"] = "head") -> str:
    """Whole lines up to ``cap`` characters, from the head or the tail, noting what was left."""
    out: list[str] = []
    used = 0
    seq = list(lines) if keep == "head" else list(reversed(lines))
    for line in seq:
        if used + len(line) + 1 > cap and out:
            break
        out.append(line if len(line) <= cap else clip(line, cap))
        used += len(line) + 1
    dropped = len(lines) - len(out)
    if keep == "tail":
        out.reverse()
        if dropped:
            out.insert(0, f"(... {dropped} earlier lines omitted)")
    elif dropped:
        out.append(f"(... {dropped} more lines omitted)")
    return "\n".join(out) if out else "(none)"


def _strip_injected(turn: Turn) -> str:
    """The observation without any injected reminder or coach text."""
    obs = turn.observation or ""
    for inj in turn.injected:
        text = inj.text.strip()
        if text:
            obs = obs.replace(text, "")
    return obs.strip()


def _abbr(turn: Turn) -> str | None:
    if turn.metrics.tool:
        return turn.metrics.tool
    if turn.call is not None:
        return TOOL_ABBR.get(turn.call.tool)
    return None


def _short(value: Any, cap: int = 60) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= cap else text[: cap - 3] + "..."


def _ranges(turn: Turn) -> str:
    return ",".join(f"{a}-{b}" for a, b in turn.metrics.ranges)


def turn_line(turn: Turn, anon: Anonymiser, cap: int = 160, outcome: bool = True) -> str:
    """One line for a turn: tool, key parameters, and (``outcome``) where it landed."""
    head = f"t{turn.turn}"
    if turn.call is None:
        kind = turn.parse_error.kind if turn.parse_error else "no tool call"
        return f"{head} (malformed reply: {kind})"
    abbr = _abbr(turn) or turn.call.tool
    params = ", ".join(f"{k}={_short(v)}" for k, v in turn.call.params.items())
    parts = [f"{head} {abbr} {params}"]
    m = turn.metrics
    if outcome and m.error_type:
        parts.append(f"[error: {m.error_type}]")
    elif outcome:
        if m.file and m.ranges and abbr in NAV:
            parts.append(f"-> {m.file}:{_ranges(turn)}")
        if m.result_count is not None:
            parts.append(f"({m.result_count} results)")
    return clip(anon(" ".join(parts)), cap)


def turn_detail(turn: Turn, anon: Anonymiser, caps: ContextCaps) -> str:
    """A turn in more detail: its line, the agent's reasoning, and the (clipped) result."""
    lines = [f"[{turn_line(turn, anon, caps.prefix_line * 2)}]"]
    if turn.thinking.strip():
        lines.append("reasoning: " + clip(anon(turn.thinking), caps.thinking))
    obs = _strip_injected(turn)
    if obs:
        lines.append("result: " + clip(anon(obs, redact=False), caps.observation))
    return "\n".join(lines)


def _viewed(rf: RunFile) -> dict[str, list[tuple[int, int]]]:
    files: dict[str, list[tuple[int, int]]] = {}
    for t in rf.turns:
        m = t.metrics
        if m.file and m.error_type is None and m.tool in NAV:
            files.setdefault(m.file, []).extend(m.ranges)
    return {f: merge_ranges(r) for f, r in files.items()}


def snippet_summary(rf: RunFile, anon: Anonymiser, caps: ContextCaps) -> str:
    """The files and line ranges the run viewed, then the opening lines of each view."""
    viewed = _viewed(rf)
    if not viewed:
        return "(the run viewed no code)"
    listing = []
    for f, ranges in viewed.items():
        span = ",".join(f"{a}-{b}" for a, b in ranges) or "outline"
        listing.append(f"- {f}: lines {span}")
    head = clip_lines([anon(x) for x in listing], caps.snippets // 3)
    blocks: list[str] = []
    seen: set[tuple[str, str]] = set()
    for t in rf.turns:
        m = t.metrics
        if not m.file or m.error_type is not None or m.tool not in NAV:
            continue
        key = (m.file, _ranges(t))
        if key in seen:
            continue
        seen.add(key)
        obs_lines = [ln[:120] for ln in _strip_injected(t).splitlines() if ln.strip()]
        if not obs_lines:
            continue
        body = "\n".join(obs_lines[: caps.snippet_lines + 1])
        head_line = f"t{t.turn} {m.tool} {m.file}:{_ranges(t) or 'outline'}"
        blocks.append(anon(f"{head_line}\n{body}", redact=False))
    rest = caps.snippets - len(head) - 2
    body = clip_lines(blocks, max(rest, 40)) if blocks else "(no text recorded)"
    return head + "\n\n" + body


def _rle(tools: Sequence[str]) -> str:
    out: list[str] = []
    for tool in tools:
        if out and out[-1].split("x")[0] == tool:
            name, _, n = out[-1].partition("x")
            out[-1] = f"{name}x{int(n or 1) + 1}"
        else:
            out.append(tool)
    return " ".join(out)


_ENDINGS = {
    "finalize": "the agent ended the run itself with a final conclusion",
    "turn_bound": "the run reached its turn limit",
    "malformed_limit": "the run stopped after repeated malformed replies",
    "model_error": "the run stopped because the model could not be reached",
    "context_overflow": "the run stopped because its context was full",
    "submit": "the agent submitted its result and ended the run",
    "cost_limit": "the run stopped at its cost limit",
    "agent_exit": "the run ended another way",
}


def trajectory_summary(rf: RunFile, anon: Anonymiser, caps: ContextCaps) -> str:
    """Turns, how the run ended, tool counts and the tool sequence (run-length encoded)."""
    tools = [(_abbr(t) or "ERR") if t.call is not None else "ERR" for t in rf.turns]
    counts = Counter(tools)
    order = [*TOOL_ABBR.values(), *ACT_ORDER, "ERR"]
    count_text = ", ".join(f"{k} {counts[k]}" for k in order if counts.get(k))
    errors = sum(1 for t in rf.turns if t.metrics.error_type is not None)
    ending = _ENDINGS.get(rf.end.reason, rf.end.reason) if rf.end else "the run did not finish"
    lines = [
        f"Turns: {len(rf.turns)}; ending: {ending}.",
        f"Tool calls: {count_text or 'none'} (ERR = malformed reply"
        + ("; EDT edit, EXE execute, SUB submit" if any(k in counts for k in ACT_ORDER) else "")
        + ").",
        f"Tool errors: {errors}.",
        "Sequence: " + _rle(tools),
    ]
    return clip(anon("\n".join(lines)), caps.trajectory_summary)


def _dirs_of(path: str, depth: int = 3) -> str:
    parts = path.split("/")[:-1]
    return "/".join(parts[:depth]) + "/" if parts else "./"


def _folder_depth(files: Sequence[str], limit: int = 40) -> int:
    """The deepest folder level (at most 6) at which the files fall into <= ``limit`` folders."""
    for depth in range(6, 1, -1):
        if len({_dirs_of(f, depth) for f in files}) <= limit:
            return depth
    return 1


def _world_files(world: Any) -> list[str]:
    if world is None:
        return []
    try:
        return list(world.source_files() or world.files())
    except OSError:
        return []


def coverage_summary(rf: RunFile, anon: Anonymiser, caps: ContextCaps, world: Any = None) -> str:
    """Distinct files and lines viewed, and the folders they lie in."""
    viewed = _viewed(rf)
    n_lines = sum(b - a + 1 for ranges in viewed.values() for a, b in ranges)
    structural = {t.metrics.file for t in rf.turns if t.metrics.structural and t.metrics.file}
    lines = [f"Distinct files viewed: {len(viewed)}; distinct lines read: {n_lines}."]
    if structural:
        lines.append(f"Files seen as structural outlines: {len(structural)}.")
    files = _world_files(world)
    if files:
        share = len(set(viewed) & set(files)) / len(files)
        lines.append(f"Source files in the repository: {len(files)} ({share:.0%} of them viewed).")
    depth = _folder_depth(files) if files else 3
    by_dir = Counter(_dirs_of(f, depth) for f in viewed)
    for d, n in sorted(by_dir.items()):
        lines.append(f"- {d}: {n} file(s) viewed")
    return clip_lines([anon(x) for x in lines], caps.coverage)


def structure_summary(rf: RunFile, anon: Anonymiser, caps: ContextCaps, world: Any = None) -> str:
    """The repository's folders with source-file counts and how many of them the run viewed;
    without the world at hand, the folders named in the run's own tool results."""
    viewed = list(_viewed(rf))
    files = _world_files(world)
    if files:
        depth = _folder_depth(files)
        counts = Counter(_dirs_of(f, depth) for f in files)
        seen = Counter(_dirs_of(f, depth) for f in set(viewed) & set(files))
        lines = [f"{len(files)} source files in {len(counts)} folders:"]
        for d in sorted(counts):
            lines.append(f"- {d} {counts[d]} files, {seen.get(d, 0)} viewed")
        return clip_lines([anon(x) for x in lines], caps.structure)
    visited = {_dirs_of(f) for f in viewed}
    named: Counter[str] = Counter()
    path_re = re.compile(r"[\w.\-]+(?:/[\w.\-]+)+")
    for t in rf.turns:
        if t.metrics.tool in NAV:
            for p in path_re.findall(_strip_injected(t)):
                named[_dirs_of(p)] += 1
        if t.metrics.file:
            named[_dirs_of(t.metrics.file)] += 1
    lines = ["(repository listing not available; folders named in the run's tool results)"]
    for d in sorted(named):
        lines.append(f"- {d} {'viewed' if d in visited else 'named only'}")
    return clip_lines([anon(x) for x in lines], caps.structure)


# ============================================================================== items


@dataclass
class JudgeItem:
    """One thing to judge: an opaque id, where it came from (kept out of the prompt), and the
    chat messages a judge receives."""

    item_id: str
    run_id: str
    family: str
    turn: int | None
    tool: str | None
    messages: list[dict[str, str]]

    @property
    def prompt_text(self) -> str:
        return "\n\n".join(m["content"] for m in self.messages)

    @property
    def prompt_sha256(self) -> str:
        """A digest of the messages: a stored verdict on other messages judged another run."""
        return hashlib.sha256(json.dumps(self.messages, sort_keys=True).encode()).hexdigest()


def item_id(run_id: str, family: str, turn: int | None = None) -> str:
    """The opaque, stable id of an item (a digest; it reveals nothing about the run)."""
    raw = f"{run_id}\x00{family}\x00{'' if turn is None else turn}"
    return "i" + hashlib.sha256(raw.encode()).hexdigest()[:12]


@lru_cache(maxsize=1)
def _concerns() -> dict[str, dict[str, list[str]]]:
    text = (JUDGE_PROMPTS / "task_concerns.txt").read_text(encoding="utf-8")
    out: dict[str, dict[str, list[str]]] = {}
    family: dict[str, list[str]] | None = None
    block: list[str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or (line.startswith("#") and not line.startswith("## ")):
            continue
        if line.startswith("## "):
            family = out.setdefault(line[3:].strip(), {})
            block = None
        elif line.endswith(":") and family is not None:
            block = family.setdefault(line[:-1].strip(), [])
        elif line.startswith("- ") and block is not None:
            block.append(line[2:].strip())
        else:
            raise ValueError(f"task_concerns.txt: cannot read line {raw!r}")
    return out


def task_concerns(family: str, target: str | None = None) -> dict[str, list[str]]:
    """Required / optional / off-task concerns of a task family (``default`` if unknown)."""
    table = _concerns()
    entry = table.get(family, table["default"])
    tgt = target or "the feature"
    return {k: [c.replace("{target}", tgt) for c in v] for k, v in entry.items()}


def _task_title(family: str) -> str:
    try:
        import yaml

        data = yaml.safe_load(config.TASKS_FILE.read_text(encoding="utf-8")) or {}
        entry = data.get(family)
        if isinstance(entry, dict) and entry.get("title"):
            return str(entry["title"])
    except (OSError, ValueError):
        pass
    return family.replace("_", " ").capitalize()


def _bullets(items: Sequence[str]) -> str:
    return "\n".join(f"- {c}" for c in items) if items else "- (none listed)"


class _Renderer:
    """Builds the context sections of one run under given caps."""

    def __init__(self, rf: RunFile, anon: Anonymiser, caps: ContextCaps, world: Any) -> None:
        self.rf, self.anon, self.caps, self.world = rf, anon, caps, world
        h = rf.header
        last_con = next(
            (t for t in reversed(rf.turns) if t.call and TOOL_ABBR.get(t.call.tool) == "CON"),
            None,
        )
        scope = str(last_con.call.params.get("scope_description", "")) if last_con else ""
        end = rf.end
        self.common = {
            "task_title": _task_title(h.task.family),
            "task_prompt": clip(anon(h.task.prompt), caps.task),
            "repository": anon(h.world.name),
            "conclusion_title": clip(
                anon((end.conclusion_title if end else None) or "(none)"), 200
            ),
            "conclusion": clip(anon((end.conclusion if end else None) or ""), caps.conclusion),
            "scope_note": clip(anon(scope), caps.scope_note) or "(none)",
        }

    def prefix(self, upto: int) -> str:
        """One line per turn before the local window of turn ``upto``."""
        before = [t for t in self.rf.turns if t.turn < upto]
        turns = before[: max(0, len(before) - self.caps.window_turns)]
        lines = [turn_line(t, self.anon, self.caps.prefix_line) for t in turns]
        return clip_lines(lines, self.caps.prefix_summary, keep="tail") if lines else "(none)"

    def window(self, upto: int) -> str:
        turns = [t for t in self.rf.turns if t.turn < upto][-self.caps.window_turns :]
        blocks = [turn_detail(t, self.anon, self.caps) for t in turns]
        return clip_lines(blocks, self.caps.window, keep="tail") if blocks else "(none)"

    def conclusion_fields(self, family: str) -> dict[str, str]:
        rf, anon, caps = self.rf, self.anon, self.caps
        if family == "task_relevance":
            c = task_concerns(rf.header.task.family, rf.header.task.target)
            return {
                "required": anon(_bullets(c.get("required", []))),
                "optional": anon(_bullets(c.get("optional", []))),
                "off_task": anon(_bullets(c.get("off-task", []))),
            }
        if family == "trace_grounding":
            n = caps.excerpt_turns
            early = rf.turns[:-n] if n else rf.turns
            late = rf.turns[-n:] if n else []
            prefix = (
                clip_lines(
                    [turn_line(t, anon, caps.prefix_line) for t in early], caps.prefix_summary
                )
                if early
                else "(none)"
            )
            excerpt = (
                clip_lines([turn_detail(t, anon, caps) for t in late], caps.excerpt, keep="tail")
                if late
                else "(none)"
            )
            return {
                "prefix_summary": prefix,
                "excerpt": excerpt,
                "snippets": snippet_summary(rf, anon, caps),
            }
        if family == "termination_calibration":
            return {
                "trajectory_summary": trajectory_summary(rf, anon, caps),
                "coverage": coverage_summary(rf, anon, caps, self.world),
                "structure": structure_summary(rf, anon, caps, self.world),
            }
        raise ValueError(f"{family!r} is not a conclusion-level family")

    def turn_fields(self, family: str, turn: Turn) -> dict[str, str]:
        anon, caps = self.anon, self.caps
        call = turn.call
        assert call is not None
        abbr = _abbr(turn) or call.tool
        base = {
            "turn": str(turn.turn),
            "prefix_summary": self.prefix(turn.turn),
            "window": self.window(turn.turn),
        }
        if family == "navigation_prior":
            params = "\n".join(f"{k}: {_short(v, 200)}" for k, v in call.params.items())
            action = f"reasoning: {turn.thinking.strip() or '(none)'}\ncall: {call.tool}\n{params}"
            return {
                **base,
                "tool_name": f"{abbr} ({call.tool})",
                "tool_summary": turn_line(turn, anon, caps.prefix_line, outcome=False),
                "action": clip(anon(action), caps.action),
            }
        if family == "reasoning_prior":
            return {**base, **_artifact(turn, abbr, anon, caps)}
        raise ValueError(f"{family!r} is not a turn-level family")


_ARTIFACT_TYPES = {"MEM": "memory", "BKM": "bookmark", "HNT": "hint request", "CON": "conclusion"}


def _artifact(turn: Turn, abbr: str, anon: Anonymiser, caps: ContextCaps) -> dict[str, str]:
    p = dict(turn.call.params) if turn.call else {}

    def take(*keys: str) -> str:
        for k in keys:
            if p.get(k) not in (None, ""):
                return str(p.pop(k))
        return ""

    if abbr == "MEM":
        title, content = take("memory_title", "title"), take("memory_content", "content")
        scope = take("confidence_level", "confidence")
        scope = f"confidence {scope}" if scope else ""
        action = "create a memory"
    elif abbr == "BKM":
        path, line = take("file_path"), take("line_number")
        title, content, scope = f"{path}:{line}", take("note"), ""
        action = "bookmark a location"
    elif abbr == "HNT":
        title = f"{take('file_path')} {take('code_range')}".strip()
        content = take("description_of_confusion")
        tried = take("what_i_tried_or_think")
        if tried:
            content += f"\nWhat the agent tried or thinks: {tried}"
        scope, action = "", "ask for a hint on a confusing snippet"
    else:  # CON
        title, content = take("title"), take("content")
        scope = take("scope_description")
        final = str(p.pop("proceed_to_finalize", "")).lower() in ("true", "1", "yes")
        action = "stash a conclusion and finish" if final else "stash an interim conclusion"
    extra = "\n".join(f"{k}: {_short(v, 200)}" for k, v in p.items())
    if extra:
        content = f"{content}\n{extra}".strip()
    if turn.thinking.strip():
        content = f"{content}\n(agent's reasoning before the note: {turn.thinking.strip()})"
    return {
        "artifact_type": f"{_ARTIFACT_TYPES.get(abbr, abbr)} ({abbr})",
        "artifact_action": action,
        "artifact_title": clip(anon(title), 200) or "(none)",
        "artifact_scope": clip(anon(scope), caps.scope_note) or "(none)",
        "artifact_content": clip(anon(content), caps.artifact) or "(empty)",
    }


@cache
def prompt_template(name: str) -> string.Template:
    """The judges' prompt template ``name`` (a file under ``prompts/judges``)."""
    return string.Template((JUDGE_PROMPTS / f"{name}.txt").read_text(encoding="utf-8"))


def _render(family: str, values: dict[str, str]) -> list[dict[str, str]]:
    fam = get_family(family)
    system = prompt_template(f"system_{fam.level}").substitute()
    user = prompt_template(family).substitute(values)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _judgeable_turns(rf: RunFile, family: Family) -> list[Turn]:
    return [t for t in rf.turns if t.call is not None and _abbr(t) in family.tools]


def sample_evenly(items: Sequence[Any], k: int | None) -> list[Any]:
    """At most ``k`` items spread evenly over the sequence (all of them if k is None)."""
    if k is None or len(items) <= k:
        return list(items)
    if k <= 0:
        return []
    idx = np.unique(np.linspace(0, len(items) - 1, k).round().astype(int))
    return [items[i] for i in idx]


def build_items(
    rf: RunFile,
    families: Sequence[str] = tuple(FAMILIES),
    *,
    caps: ContextCaps | None = None,
    max_turn_items: int | None = None,
    world: Any = None,
    redactions: Sequence[str] = DEFAULT_REDACTIONS,
) -> list[JudgeItem]:
    """The judge items of one run: one per conclusion-level family (if the run has a
    conclusion) and one per matching step for the turn-level families (at most
    ``max_turn_items`` per family, spread over the run)."""
    caps = caps or ContextCaps()
    anon = anonymiser_for(rf, redactions)
    run_id = rf.header.run_id
    items: list[JudgeItem] = []
    for name in families:
        fam = get_family(name)
        if fam.level == "conclusion":
            if not (rf.end and (rf.end.conclusion or "").strip()):
                continue
            iid = item_id(run_id, name)

            def values(c: ContextCaps, n: str = name, i: str = iid) -> dict[str, str]:
                r = _Renderer(rf, anon, c, world)
                return {**r.common, **r.conclusion_fields(n), "item_id": i}

            messages = _fit(caps, values, name)
            items.append(JudgeItem(iid, run_id, name, None, None, messages))
        else:
            for turn in sample_evenly(_judgeable_turns(rf, fam), max_turn_items):
                iid = item_id(run_id, name, turn.turn)

                def tvalues(
                    c: ContextCaps, n: str = name, t: Turn = turn, i: str = iid
                ) -> dict[str, str]:
                    r = _Renderer(rf, anon, c, world)
                    return {**r.common, **r.turn_fields(n, t), "item_id": i}

                messages = _fit(caps, tvalues, name)
                items.append(JudgeItem(iid, run_id, name, turn.turn, _abbr(turn), messages))
    return items


def _fit(
    caps: ContextCaps, values: Callable[[ContextCaps], dict[str, str]], family: str
) -> list[dict[str, str]]:
    """Render the messages, shrinking every section until the user message fits the cap."""
    current = caps
    for _ in range(5):
        messages = _render(family, values(current))
        size = len(messages[-1]["content"])
        if size <= caps.prompt:
            return messages
        current = current.scaled(0.9 * caps.prompt / size)
    messages[-1]["content"] = clip(messages[-1]["content"], caps.prompt)
    return messages



def fetched_world(name: str) -> Any:
    """The world a run explored when it is already fetched here, else None (it is never
    downloaded for judging; without it the structure summary uses the run's own results)."""
    from adakit.apparatus.world import open_world

    try:
        return open_world(name, fetch=False, progress=False)
    except Exception:  # noqa: BLE001 - unknown or absent worlds only cost the structure summary
        return None
