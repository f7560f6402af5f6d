"""Canonical steps and their effect labels (TraceProbe's substrate, issue 15 §1).

A run becomes a list of :class:`Step` (one per turn: the canonical tool, the file and lines it
touched, the symbol or search term, whether it failed, and for edits the text it put in and
took out) and a :class:`RunFacts` (the final patch, the conclusion, the anchor files). Each step
then gets exactly one **effect label** from :data:`LABEL_RULES`, a table kept as data and read
top to bottom: the first rule whose test holds names the label.

=============  ===========================================================================
label          rule
=============  ===========================================================================
reasoning      a turn with no action and no error (the agent only thought)
failed         an error: a tool error or refused call, a reply no tool could be read from,
               a command with a non-zero exit, or an edit / command whose output is an error
survived       an edit whose change is still in the final patch (see below)
reverted       an edit whose change is not in the final patch, or an undo step itself
recorded       a memory, bookmark, conclusion or submission (MEM, BKM, CON, SUB)
justified      a read or search (OVW, PKR, EXP, HNT) whose file a later edit changes or a
               later conclusion cites, or whose symbol a later edit or conclusion names
off-anchor     a read or search of a file outside the run's anchor set
neutral        anything no rule claims: a command that ran fine, an on-anchor read that nothing
               later uses, a repository-wide search that nothing later names
=============  ===========================================================================

**Edits against a patch.** With a final patch (the submission is a unified diff), an edit of a
file the patch does not touch is *reverted* (an edit naming no file counts as kept). An edit
of a patched file *survives* when one of the lines it inserted is among the patch's added lines
of that file, when its text is not known (``sed`` with an address, ``patch``), or when it is
the file's last edit (the patch *is* the state that edit left). An earlier edit whose known lines are all gone was overwritten:
*reverted*. **Without a patch** (Ada's read-only runs never edit; a foreign run that did not
submit) nothing says what the final state is, so an edit *survives* unless a later step undoes
it: an undo of the same file (``git checkout``/``restore``/``stash``/``reset`` name no file and
undo every earlier edit; ``undo_edit``; ``rm`` of the file) or a later edit that swaps its text
back. The labels then mean "not known to be undone" and "undone within the run".

**Anchors.** The anchor set is the files of the final patch where one exists; else the files
the run's conclusion cites (a path, or a file name that is not a generic one such as
``__init__.py``; folders that hold other files the run touched do not count); else the world's anchor files of paper Table D13 (``adakit/apparatus/worlds.yaml``);
else empty, and then no step is off-anchor. ``RunFacts.anchor_source`` says which applied.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import pandas as pd

from adakit.record import RunFile, read_run

#: Canonical tools that read or search code.
READS = frozenset({"OVW", "PKR", "EXP", "HNT"})
#: Canonical tools that record the agent's own state or result.
RECORDS = frozenset({"MEM", "BKM", "CON", "SUB"})
#: Edit actions that undo earlier edits rather than make new ones.
UNDO_ACTIONS = frozenset({"undo_edit", "rm", "git checkout", "git restore", "git stash",
                          "git reset"})
#: Edit actions that create a file (nothing to read before them).
CREATE_ACTIONS = frozenset({"create", "touch", "mkdir", "write_file", "create_file"})
#: File names too common to count as a citation on their own.
GENERIC_NAMES = frozenset({"__init__.py", "__main__.py", "index.js", "index.ts", "mod.rs",
                           "lib.rs", "main.rs", "main.py", "setup.py", "conftest.py"})
#: An observation of a command or edit that reports an error (when no exit code says so).
ERROR_OUTPUT = re.compile(
    r"Traceback \(most recent call last\)|^\w*Error: |^E\s{3}|command not found|"
    r"No such file or directory|No replacement was performed|^ERROR[: ]|^error: |"
    r"did not appear verbatim|SyntaxError", re.M)
LABELS: tuple[str, ...] = ("survived", "reverted", "failed", "justified", "off-anchor",
                           "recorded", "reasoning", "neutral")
STEP_COLUMNS = ["run_id", "turn", "tool", "action", "file", "start_line", "end_line", "symbol",
                "error", "finalize", "added", "removed", "undo", "text", "results"]


@dataclass(slots=True)
class Step:
    """One turn in canonical form (the columns of :data:`STEP_COLUMNS`)."""

    run_id: str
    turn: int
    tool: str | None
    action: str | None = None
    file: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    symbol: str | None = None
    error: str | None = None
    finalize: bool = False
    added: str | None = None
    removed: str | None = None
    undo: bool = False
    text: str = ""
    results: tuple[str, ...] = ()


@dataclass
class RunFacts:
    """What the labels need to know about a run as a whole."""

    run_id: str
    patch_files: frozenset[str] | None = None
    patch_added: dict[str, frozenset[str]] = field(default_factory=dict)
    conclusion: str = ""
    anchors: frozenset[str] = frozenset()
    anchor_source: str = "none"

    @property
    def has_patch(self) -> bool:
        """Whether the run ended with a final patch."""
        return self.patch_files is not None


# --------------------------------------------------------------------------- reading a run

_DIFF_FILE = re.compile(r"^(?:\+\+\+|---) (?:[ab]/)?(\S+)", re.M)
_DIFF_GIT = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.M)
_PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.(?:py|pyx|pxd|js|jsx|ts|tsx|rs|go|java|"
                   r"c|h|cc|cpp|hpp|rb|toml|cfg|ini|yaml|yml|json|md|rst|txt))\b")


def parse_patch(text: str | None) -> tuple[frozenset[str], dict[str, frozenset[str]]] | None:
    """The files of a unified diff and each file's added lines (stripped); None if ``text`` is
    not a diff."""
    if not text or not (_DIFF_GIT.search(text) or re.search(r"^\+\+\+ ", text, re.M)):
        return None
    files: set[str] = set()
    added: dict[str, set[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        git = _DIFF_GIT.match(line)
        if git:
            current = git.group(2)
            files.update(git.groups())
            continue
        head = _DIFF_FILE.match(line)
        if head and line[:4] in ("+++ ", "--- "):
            if head.group(1) != "/dev/null":
                files.add(head.group(1))
                if line.startswith("+++"):
                    current = head.group(1)
            continue
        if line.startswith("+") and current is not None and line[1:].strip():
            added.setdefault(current, set()).add(line[1:].strip())
    return frozenset(files), {f: frozenset(v) for f, v in added.items()}


def _edit_text(params: dict[str, Any]) -> tuple[str | None, str | None]:
    """(inserted text, removed text) of an edit call, None where the call does not say."""
    for key in ("new_str", "file_text", "new_content", "content", "replacement", "text"):
        if isinstance(params.get(key), str):
            old = params.get("old_str")
            return params[key], old if isinstance(old, str) else None
    line = params.get("action") or params.get("command") or ""
    if not isinstance(line, str):
        return None, None
    if line.startswith("edit ") and "\n" in line:
        body = line.split("\n", 1)[1]
        return body.rsplit("end_of_edit", 1)[0], None
    sed = re.search(r"sed -i(?:\.\w+)?\s+(['\"])s(.)(.*?)\2(.*?)\2\w*\1", line)
    if sed:
        return sed.group(4), sed.group(3)
    return None, None


def _error_of(turn: Any, tool: str | None) -> str | None:
    m = turn.metrics
    if turn.parse_error is not None:
        return "malformed"
    if m.error_type is not None:
        return str(m.error_type)
    if m.exit_code not in (None, 0):
        return f"exit {m.exit_code}"
    if tool in ("EXE", "EDT") and ERROR_OUTPUT.search(turn.observation or ""):
        return "error output"
    return None


def steps_of(rf: RunFile) -> list[Step]:
    """The canonical steps of a run file, one per turn."""
    out: list[Step] = []
    run_id = rf.header.run_id
    for t in rf.turns:
        m = t.metrics
        tool = m.tool if t.call is not None else None
        params = t.call.params if t.call is not None else {}
        first = m.ranges[0] if m.ranges else (None, None)
        added = removed = None
        undo = False
        if tool == "EDT":
            added, removed = _edit_text(params)
            undo = (m.action in UNDO_ACTIONS or params.get("command") == "undo_edit"
                    or (t.call is not None and t.call.tool == "undo_edit"))
        text = ""
        if tool in RECORDS or tool == "EXP":
            text = " ".join(str(v) for v in params.values() if isinstance(v, str | int | float))
        results: tuple[str, ...] = ()
        if tool == "EXP":
            results = tuple(dict.fromkeys(_PATH.findall(t.observation or "")))
        out.append(Step(run_id=run_id, turn=t.turn, tool=tool, action=m.action, file=m.file,
                        start_line=first[0], end_line=first[1], symbol=m.symbol,
                        error=_error_of(t, tool), finalize=bool(m.finalize) or tool == "SUB",
                        added=added, removed=removed, undo=undo, text=text, results=results))
    return out


@lru_cache(maxsize=4096)
def _word(name: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w.])" + re.escape(name) + r"(?![\w])")


def cites(text: str, file: str) -> bool:
    """Whether ``text`` cites ``file``: its path, or its name when the name is not generic."""
    if not text or not file:
        return False
    if file in text:
        return True
    name = file.rsplit("/", 1)[-1]
    return name != file and name not in GENERIC_NAMES and "." in name and bool(
        _word(name).search(text))


def names(text: str, symbol: str) -> bool:
    """Whether ``text`` names ``symbol`` as a whole word (symbols under 3 characters never)."""
    return bool(text) and bool(symbol) and len(symbol) >= 3 and bool(_word(symbol).search(text))


def world_anchors(world: str) -> frozenset[str]:
    """The world's Table D13 anchor files from the manifest (empty for an unknown world)."""
    spec = _manifest().get(world) if world else None
    return frozenset(spec.anchors) if spec else frozenset()


@lru_cache(maxsize=1)
def _manifest() -> dict[str, Any]:
    from adakit.apparatus.world import ManifestError, load_manifest

    try:
        return load_manifest()
    except ManifestError:  # a broken manifest only loses the D13 fallback
        return {}


def facts_of(rf: RunFile, steps: Sequence[Step] | None = None) -> RunFacts:
    """The patch, conclusion and anchors of a run file."""
    steps = steps if steps is not None else steps_of(rf)
    end = rf.end
    patch = parse_patch(end.submission if end else None)
    conclusion = (end.conclusion or "") if end else ""
    texts = " ".join([conclusion, *(s.text for s in steps if s.tool == "CON")])
    return make_facts(rf.header.run_id, steps, patch, texts, world_anchors(rf.header.world.name))


def make_facts(run_id: str, steps: Sequence[Step],
               patch: tuple[frozenset[str], dict[str, frozenset[str]]] | None,
               conclusion: str, world: Iterable[str] = ()) -> RunFacts:
    """A run's facts from its steps, parsed patch, conclusion text and world anchors, choosing
    the anchor set as the module notes say."""
    if patch is not None:
        return RunFacts(run_id, patch[0], patch[1], conclusion, patch[0], "patch")
    touched = {s.file for s in steps if s.file and s.file != "."} | set(world)
    folders = {f for f in touched if any(g.startswith(f.rstrip("/") + "/") for g in touched)}
    cited = frozenset(f for f in touched - folders if cites(conclusion, f))
    if cited:
        return RunFacts(run_id, None, {}, conclusion, cited, "conclusion")
    world = frozenset(world)
    return RunFacts(run_id, None, {}, conclusion, world, "world" if world else "none")


# --------------------------------------------------------------------------- the rules


class Trace:
    """One run's steps and facts with the look-ups the rules share (built once per run)."""

    __slots__ = ("steps", "facts", "last_edit", "edit_texts", "con_texts", "undos", "labels")

    def __init__(self, steps: Sequence[Step], facts: RunFacts) -> None:
        self.steps = list(steps)
        self.facts = facts
        self.last_edit: dict[str, int] = {}
        self.edit_texts: list[tuple[int, str]] = []
        self.con_texts: list[tuple[int, str]] = []
        self.undos: list[tuple[int, str | None]] = []
        for i, s in enumerate(self.steps):
            if s.tool == "EDT":
                if s.file:
                    self.last_edit[s.file] = i
                if s.undo:
                    self.undos.append((i, s.file))
                body = " ".join(x for x in (s.added, s.removed) if x)
                if body:
                    self.edit_texts.append((i, body))
            elif s.tool == "CON" and s.text:
                self.con_texts.append((i, s.text))
        self.labels: list[str] = []

    def later_texts(self, i: int) -> Iterable[str]:
        """Conclusion and edit texts after step ``i`` (the final conclusion always)."""
        yield self.facts.conclusion
        for j, text in self.con_texts:
            if j > i:
                yield text
        for j, text in self.edit_texts:
            if j > i:
                yield text


def _reasoning(s: Step, i: int, tr: Trace) -> bool:
    return s.tool is None and s.error is None


def _failed(s: Step, i: int, tr: Trace) -> bool:
    return s.error is not None


def _edit_kept(s: Step, i: int, tr: Trace) -> bool:
    f = tr.facts
    if s.undo:
        return False
    if f.patch_files is not None:
        if not s.file:  # an edit naming no file (``patch``, ``git apply``) cannot be checked
            return True
        if s.file not in f.patch_files:
            return False
        lines = [x.strip() for x in (s.added or "").splitlines() if x.strip()]
        if not lines or tr.last_edit.get(s.file) == i:
            return True
        kept = f.patch_added.get(s.file, frozenset())
        return any(x in kept for x in lines)
    for j, file in tr.undos:  # no patch: kept unless undone later
        if j > i and (file is None or file == s.file):
            return False
    if s.added:
        for t in tr.steps[i + 1:]:
            if (t.tool == "EDT" and t.file == s.file and t.removed is not None
                    and t.removed.strip() == s.added.strip()):
                return False
    return True


def _survived(s: Step, i: int, tr: Trace) -> bool:
    return s.tool == "EDT" and _edit_kept(s, i, tr)


def _reverted(s: Step, i: int, tr: Trace) -> bool:
    return s.tool == "EDT"


def _recorded(s: Step, i: int, tr: Trace) -> bool:
    return s.tool in RECORDS


def _justified(s: Step, i: int, tr: Trace) -> bool:
    if s.tool not in READS:
        return False
    if s.file and tr.last_edit.get(s.file, -1) > i:
        return True
    for text in tr.later_texts(i):
        if (s.file and s.file != "." and cites(text, s.file)) or (
                s.symbol and names(text, s.symbol)):
            return True
    return False


def _off_anchor(s: Step, i: int, tr: Trace) -> bool:
    anchors = tr.facts.anchors
    if s.tool not in READS or not s.file or not anchors or s.file in anchors:
        return False
    prefix = s.file.rstrip("/") + "/"
    return s.file != "." and not any(a.startswith(prefix) for a in anchors)


@dataclass(frozen=True)
class LabelRule:
    """One row of the label table: the label, the steps it can apply to, its rule in words and
    what it means without a final patch; ``test`` decides it for step ``i`` of a trace."""

    label: str
    applies_to: str
    rule: str
    without_patch: str
    test: Callable[[Step, int, Trace], bool]


#: The label rules, tried in this order; the first that holds labels the step.
LABEL_RULES: tuple[LabelRule, ...] = (
    LabelRule("reasoning", "any turn", "no action was taken and nothing failed", "same",
              _reasoning),
    LabelRule("failed", "any turn", "tool error or refused call, unreadable reply, non-zero "
              "exit, or an error in a command's or edit's output", "same", _failed),
    LabelRule("survived", "EDT", "its file is in the final patch and one of its inserted lines "
              "is among the patch's added lines, or its text is unknown, or it is the file's "
              "last edit", "not undone later in the run", _survived),
    LabelRule("reverted", "EDT", "an undo step, or an edit whose change the final patch does "
              "not hold", "undone later: an undo of its file (or of all files) or an edit that "
              "swaps its text back", _reverted),
    LabelRule("recorded", "MEM, BKM, CON, SUB", "a memory, bookmark, conclusion or submission",
              "same", _recorded),
    LabelRule("justified", "OVW, PKR, EXP, HNT", "a later edit changes its file, or a later "
              "conclusion (or edit text) cites its file or names its symbol",
              "the conclusion and interim conclusions only", _justified),
    LabelRule("off-anchor", "OVW, PKR, EXP, HNT", "its file is outside the anchor set (patch "
              "files)", "anchors are the files the conclusion cites, else the world's D13 "
              "anchors; none: never off-anchor", _off_anchor),
)
NEUTRAL = "neutral"


def label_trace(tr: Trace) -> list[str]:
    """The effect label of every step of one run (first matching rule, else ``neutral``)."""
    out = []
    for i, s in enumerate(tr.steps):
        for rule in LABEL_RULES:
            if rule.test(s, i, tr):
                out.append(rule.label)
                break
        else:
            out.append(NEUTRAL)
    tr.labels = out
    return out


def rules_frame() -> pd.DataFrame:
    """The label rules as a table (label, applies to, rule, without a patch)."""
    rows = [{"label": r.label, "applies_to": r.applies_to, "rule": r.rule,
             "without_patch": r.without_patch} for r in LABEL_RULES]
    rows.append({"label": NEUTRAL, "applies_to": "any turn", "rule": "no rule above holds",
                 "without_patch": "same"})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- tables


def read_traces(paths: Iterable[str]) -> list[Trace]:
    """Traces (steps and facts) of run files."""
    traces = []
    for p in paths:
        rf = read_run(p)
        steps = steps_of(rf)
        traces.append(Trace(steps, facts_of(rf, steps)))
    return traces


def steps_frame(traces: Sequence[Trace]) -> pd.DataFrame:
    """Every step of every trace as a table, with its ``label`` when labelled."""
    rows = []
    for tr in traces:
        labels = tr.labels or [None] * len(tr.steps)
        for s, label in zip(tr.steps, labels, strict=True):
            rows.append((s.run_id, s.turn, s.tool, s.action, s.file, s.start_line, s.end_line,
                         s.symbol, s.error, s.finalize, s.added, s.removed, s.undo, s.text,
                         list(s.results), label))
    frame = pd.DataFrame(rows, columns=[*STEP_COLUMNS, "label"])
    for col in ("start_line", "end_line"):
        frame[col] = frame[col].astype("Int64")
    return frame


def facts_frame(traces: Sequence[Trace]) -> pd.DataFrame:
    """One row per run: whether it has a patch, its anchor source and anchors."""
    return pd.DataFrame([{"run_id": tr.facts.run_id, "has_patch": tr.facts.has_patch,
                          "anchor_source": tr.facts.anchor_source,
                          "anchors": sorted(tr.facts.anchors)} for tr in traces],
                        columns=["run_id", "has_patch", "anchor_source", "anchors"])


def label_composition(steps: pd.DataFrame, runs: pd.DataFrame | None = None,
                      by: str | Sequence[str] = "model") -> pd.DataFrame:
    """Share (percent) of each label among a group's steps, pooled over its runs."""
    by = [by] if isinstance(by, str) else list(by)
    frame = steps if runs is None else steps.merge(runs[["run_id", *by]], on="run_id")
    counts = frame.groupby([*by, "label"], sort=False).size().unstack("label", fill_value=0)
    counts = counts.reindex(columns=[x for x in LABELS if x in counts.columns])
    return (100 * counts.div(counts.sum(axis=1), axis=0)).reset_index()


# --------------------------------------------------------------------------- synthetic runs

_SYN_FILES = tuple(f"pkg/mod{k}.py" for k in range(12))
_SYN_SYMBOLS = ("parse", "route", "dispatch", "load", "render", "Config", "Session", "handle")


def synthetic_traces(n_runs: int, seed: int = 0, mean_steps: int = 30) -> list[Trace]:
    """Seeded synthetic traces for benchmarks and demos (not agent behaviour): even runs read
    only and conclude (Ada-like), odd runs also edit, run commands and submit a patch."""
    import random

    rng = random.Random(seed)
    out = []
    for r in range(n_runs):
        run_id = f"syn{r:05d}"
        coder = r % 2 == 1
        n = max(4, int(rng.gauss(mean_steps, mean_steps / 4)))
        tools = ("OVW", "PKR", "PKR", "EXP", "EXP", "MEM", "EDT", "EXE") if coder else (
            "OVW", "PKR", "PKR", "PKR", "EXP", "EXP", "MEM", "BKM")
        steps = []
        for k in range(1, n):
            tool = rng.choice(tools)
            file = rng.choice(_SYN_FILES[:6]) if rng.random() < 0.8 else rng.choice(_SYN_FILES)
            s = Step(run_id, k, tool)
            if tool in ("OVW", "PKR"):
                s.file = file
                if tool == "PKR":
                    s.start_line = rng.randrange(1, 200)
                    s.end_line = s.start_line + rng.randrange(5, 60)
            elif tool == "EXP":
                s.symbol = rng.choice(_SYN_SYMBOLS)
                s.file = file if rng.random() < 0.5 else None
                s.results = (file, rng.choice(_SYN_FILES))
            elif tool == "EDT":
                s.file = file
                s.added = f"x{rng.randrange(4)} = {rng.randrange(3)}"
                s.removed = f"x{rng.randrange(4)} = {rng.randrange(3)}"
                s.undo = rng.random() < 0.05
                s.action = "git checkout" if s.undo else "str_replace"
            elif tool == "MEM":
                s.text = f"{rng.choice(_SYN_SYMBOLS)} lives in {file}"
            if rng.random() < 0.06:
                s.error = "tool_error" if tool != "EXE" else "exit 1"
            if rng.random() < 0.03:
                s.tool = None
            steps.append(s)
        cited = rng.sample(_SYN_FILES[:6], 2)
        text = f"The answer is in {cited[0]} and {cited[1]}; {rng.choice(_SYN_SYMBOLS)} does it."
        steps.append(Step(run_id, n, "SUB" if coder else "CON", finalize=True, text=text))
        patch = None
        if coder:
            edited = sorted({s.file for s in steps if s.tool == "EDT" and s.file})
            if edited:
                patch = (frozenset(edited), {f: frozenset({"x1 = 2"}) for f in edited})
        out.append(Trace(steps, make_facts(run_id, steps, patch, text)))
    return out


LABEL_COLORS: dict[str, str] = {
    "survived": "#1B9E77", "reverted": "#E7298A", "failed": "#B2182B", "justified": "#4575B4",
    "off-anchor": "#FDAE61", "recorded": "#7570B3", "reasoning": "#A6A6A6", "neutral": "#D9D9D9",
}


def plot_label_composition(composition: pd.DataFrame, by: str | Sequence[str] = "model",
                           title: str | None = None) -> Any:
    """Stacked bars: each group's steps split by effect label (:func:`label_composition`)."""
    import matplotlib.pyplot as plt

    from adakit import figures

    by = [by] if isinstance(by, str) else list(by)
    figures.use_style()
    labels = [x for x in LABELS if x in composition.columns]
    names = [" | ".join(str(v) for v in row) for row in composition[by].itertuples(index=False)]
    fig, ax = plt.subplots(figsize=(7.2, max(1.8, 0.36 * len(names) + 1.3)))
    left = pd.Series(0.0, index=composition.index)
    ypos = list(range(len(names)))[::-1]
    for label in labels:
        ax.barh(ypos, composition[label], left=left, color=LABEL_COLORS[label], label=label,
                height=0.7, edgecolor="white", lw=0.5)
        left += composition[label]
    ax.set_yticks(ypos, names)
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of steps (%)")
    ax.grid(axis="y", visible=False)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, fontsize=8)
    ax.set_title(title or "Effect labels of the steps")
    return fig
