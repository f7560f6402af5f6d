"""Canonical actions: another agent's steps mapped onto Ada's vocabulary (issue 16, §2).

Every imported step gets one canonical tool, by the first rule of :data:`MAPPING_TABLE` that
covers it. The table is data (rule id, what it covers, canonical tool, sub-action, the
argument for the choice); :func:`map_tool` and :func:`map_shell` apply it and read the file,
line range, search term and result count from the command and its observation. The rule that
fired is recorded in the turn's ``metrics.mapped_by``.

Why these choices
-----------------
Ada's navigation tools are OVW (an outline of a folder, file or block), PKR (a window of
lines) and EXP (following a code relation: definition, references, next block). A foreign
action is mapped by what it *showed the agent*, not by its name:

* **OVW** for anything that shows structure without code: ``ls``, ``tree``, ``find`` without a
  name filter, ``git ls-files``, a folder view of an editor tool, an abbreviated file map
  (SWE-agent's ``filemap``, or ``str_replace_editor view`` of a large file), and ``wc``/``stat``
  (a file's size is structure, not content).
* **PKR** for anything that shows a window of a file's lines: SWE-agent's ``open``, ``goto``,
  ``scroll_up``/``scroll_down``; editor ``view`` commands; and in the shell ``cat``, ``less``,
  ``more``, ``head``, ``tail``, ``sed -n A,Bp``, ``nl``, ``awk 'NR>=A && NR<=B'``. The range
  recorded is the one actually shown: numbered output (``cat -n``, SWE-agent windows, editor
  views) is read line by line; otherwise the command's range is clipped by the number of lines
  the observation holds (and by the file's length when a world is given).
* **EXP find_all_references** for searches: ``search_dir``, ``search_file``, ``find_file``,
  ``grep``/``rg``/``ag``/``ack``/``git grep`` and ``find -name`` (``find_file`` is ``find
  -name``, so both map alike). A search whose pattern is a definition (``def NAME``, ``class
  NAME``, ``function NAME``, ``fn NAME`` ...) is **EXP go_to_definition**, with the symbol.
* Outside Ada's read-only set: **EDT** for changing files (``edit``, ``create``, ``insert``,
  ``str_replace``, ``sed -i``, ``perl -i``, redirections and ``tee`` into a file, ``patch``,
  ``git apply``, ``touch``/``mkdir``/``rm``/``mv``/``cp``); **EXE** for executing anything else
  (``python``, ``pytest``, ``pip``, ``git diff``, notebooks, browsing); **SUB** for submitting
  (``submit``, mini-swe-agent's completion echo, OpenHands ``finish``), which is terminal like a
  finalizing CON.
* Cognitive steps keep Ada's names where the meaning carries over: OpenHands ``think`` and
  ``task_tracking`` externalise reasoning without touching the world, the role of MEM; an agent
  message to the user in mid-run reports a provisional result, an interim (non-final) CON.

A shell command line is read as segments (``&&``, ``||``, ``;``, newlines) of pipelines.
``cd DIR`` moves the folder later segments resolve paths in. A pipeline takes its class from
its producer (first stage): later stages are filters that narrow the range (``| head``,
``| sed -n``), turn a read into a search in that file (``cat f | grep x``), or count results
(``| wc -l``); a stage fed by ``xargs`` acts on the files listed before it. A command line
with several segments takes the class of the most consequential one, in the order SUB > EDT >
EXE > PKR > EXP > OVW (a read followed by a test run is an execution); a chain that reads
several files records the first file it shows.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from adakit.importers.shell import Segment, Stage, join_path, options, parse_command
from adakit.record import merge_ranges


@dataclass(frozen=True)
class MappingRule:
    """One row of the mapping table."""

    rule: str
    covers: tuple[str, ...]
    canonical: str
    action: str | None
    why: str


#: The mapping table: named tools of the scaffolds (``tool:``) and shell programs
#: (``shell:``), in the order they are tried.
MAPPING_TABLE: tuple[MappingRule, ...] = (
    MappingRule("tool:open", ("open",), "PKR", None,
                "SWE-agent shows a window of the file around the line asked for."),
    MappingRule("tool:goto", ("goto",), "PKR", None,
                "moves SWE-agent's window within the open file: a new window of lines."),
    MappingRule("tool:scroll", ("scroll_up", "scroll_down"), "PKR", None,
                "the next or previous window of the open file: a continuation read."),
    MappingRule("tool:view", ("str_replace_editor:view", "view", "read", "read_file",
                              "view_file", "open_file", "cat_file", "peek_code_region"),
                "PKR", None,
                "an editor view of a file prints its lines (cat -n): a window read (Inspect's "
                "text_editor view too; with view_range, a ranged read)."),
    MappingRule("tool:read", ("Read",), "PKR", None,
                "Claude Code's Read: with offset/limit a ranged read (clipped to what the result "
                "showed); without them, the numbered lines its result showed."),
    MappingRule("tool:view_outline", ("filemap", "str_replace_editor:view:abbreviated",
                                      "file_outline", "outline", "get_structural_overview"),
                "OVW", None,
                "an abbreviated file map lists definitions without their bodies: an outline."),
    MappingRule("tool:view_dir", ("str_replace_editor:view:dir", "list_dir", "list_files",
                                  "ls_dir", "list_directory"),
                "OVW", None, "a folder listing shows structure, not code."),
    MappingRule("tool:search_dir", ("search_dir", "search", "search_code", "grep_code",
                                    "explore_code"),
                "EXP", "find_all_references",
                "a search for a term across files: where is it used."),
    MappingRule("tool:search_file", ("search_file",), "EXP", "find_all_references",
                "a search for a term within one file."),
    MappingRule("tool:find_file", ("find_file", "find_files", "glob"), "EXP",
                "find_all_references",
                "looks a file up by name across the tree (the issue's choice; find -name alike)."),
    MappingRule("tool:grep", ("Grep",), "EXP", "find_all_references",
                "Claude Code's Grep runs ripgrep: like the shell's grep/rg (a definition pattern "
                "is go to definition)."),
    MappingRule("tool:glob", ("Glob",), "EXP", "find_all_references",
                "Claude Code's Glob looks files up by a name pattern, like find -name."),
    MappingRule("tool:edit", ("Edit", "MultiEdit", "Write", "NotebookEdit", "edit", "insert", "create", "str_replace_editor:create",
                              "str_replace_editor:str_replace", "str_replace_editor:insert",
                              "str_replace_editor:undo_edit", "str_replace", "write",
                              "write_file", "create_file", "edit_file", "apply_patch",
                              "replace_in_file"),
                "EDT", None, "changes a file: outside Ada's read-only set (Inspect's text_editor "
                "create, insert and str_replace too, with the lines they wrote)."),
    MappingRule("tool:submit", ("submit", "finish", "exit_forfeit", "complete", "done"),
                "SUB", "submit",
                "hands in the result and ends the run: terminal, like a finalizing CON."),
    MappingRule("tool:chat_file", ("aider:add", "aider:read-only"), "PKR", None,
                "aider puts a file added to the chat into every prompt whole: a read of all its "
                "lines (known only with the file on disk)."),
    MappingRule("tool:search_replace", ("aider:edit",), "EDT", "search_replace",
                "an aider SEARCH/REPLACE block changes the file: the lines touched are found "
                "where the SEARCH (or, already applied, the REPLACE) text stands in the file."),
    MappingRule("tool:plan", ("TodoWrite", "update_plan", "TaskCreate", "TaskUpdate",
                              "ExitPlanMode"), "MEM", "plan",
                "writes the agent's plan (a todo list) without touching the world: the "
                "cognitive channel, Ada's MEM."),
    MappingRule("tool:think", ("think", "task_tracking", "note", "plan"), "MEM", None,
                "externalises reasoning without touching the world: Ada's MEM."),
    MappingRule("tool:message", ("message",), "CON", None,
                "a report to the user in mid-run: a provisional (non-final) conclusion."),
    MappingRule("tool:bash", ("Bash", "bash", "execute_bash", "run", "shell", "terminal", "cmd",
                              "execute_command", "run_command"),
                "EXE", None,
                "a shell command: classified by the shell:* rules; EXE when none applies."),
    MappingRule("tool:execute", ("run_ipython", "ipython", "python", "browse",
                                 "browse_interactive", "call_tool_mcp", "delegate",
                                 "BashOutput", "KillShell", "KillBash", "WebFetch",
                                 "WebSearch"),
                "EXE", None, "runs code or acts outside the repository."),
    MappingRule("tool:subagent", ("Task", "Agent"), "EXE", "subagent",
                "hands a task to a subagent (Claude Code); the subagent's own turns follow as a "
                "sidechain span of the run."),
    MappingRule("tool:recorded", ("adakit:recorded",), "EXE", None,
                "a canonical action the source recorded itself (adakit's own ATIF export, "
                "in the tool call's extra): taken as it is, so a round trip keeps it (EXE only "
                "when the record names no tool)."),
    MappingRule("tool:other", ("other",), "EXE", None,
                "a tool the format's reader does not know: kept with its name (the action), "
                "counted as acting outside Ada's tools."),
    MappingRule("shell:ls", ("ls", "tree", "dir", "exa", "eza", "git ls-files",
                             "git ls-tree"),
                "OVW", None, "lists a folder: structure without code."),
    MappingRule("shell:find", ("find", "fd", "fdfind"), "OVW", None,
                "find without a name filter walks the tree: a listing."),
    MappingRule("shell:find_name", ("find -name", "locate"), "EXP", "find_all_references",
                "find with -name/-path/-regex looks files up by name, like find_file."),
    MappingRule("shell:stat", ("wc", "stat", "file", "du"), "OVW", None,
                "a file's size or type is structure, not content."),
    MappingRule("shell:cat", ("cat", "less", "more", "bat", "batcat"), "PKR", None,
                "prints a whole file (or what a filter keeps of it)."),
    MappingRule("shell:head", ("head",), "PKR", None, "the first lines of a file."),
    MappingRule("shell:tail", ("tail",), "PKR", None,
                "the last lines of a file (line numbers need the file's length: a world)."),
    MappingRule("shell:sed_n", ("sed -n",), "PKR", None, "sed -n 'A,Bp' prints lines A..B."),
    MappingRule("shell:nl", ("nl",), "PKR", None,
                "numbers and prints a file (numbers are line numbers with -ba)."),
    MappingRule("shell:awk_nr", ("awk NR",), "PKR", None,
                "awk 'NR>=A && NR<=B' prints lines A..B."),
    MappingRule("shell:grep", ("grep", "egrep", "fgrep", "rg", "ag", "ack", "git grep"),
                "EXP", "find_all_references", "searches files for a pattern."),
    MappingRule("shell:grep_def", ("grep def",), "EXP", "go_to_definition",
                "a search whose pattern is a definition (def/class/function NAME)."),
    MappingRule("shell:edit", ("sed -i", "perl -i", "tee", "> file", "patch", "git apply",
                               "apply_patch", "touch", "mkdir", "rm", "rmdir", "mv", "cp",
                               "git checkout", "git restore", "git stash", "git reset"),
                "EDT", None, "changes files on disk."),
    MappingRule("shell:submit", ("submit", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
                                 "echo MINI_SWE_AGENT_FINAL_OUTPUT"),
                "SUB", "submit", "the scaffold's submission command: terminal."),
    MappingRule("shell:execute", ("*",), "EXE", None,
                "any other program (python, pytest, pip, git diff, make ...) executes."),
)
RULES: dict[str, MappingRule] = {r.rule: r for r in MAPPING_TABLE}
_TOOL_RULE: dict[str, str] = {}
for _r in MAPPING_TABLE:
    if _r.rule.startswith("tool:"):
        for _name in _r.covers:
            _TOOL_RULE.setdefault(_name, _r.rule)

#: Echo lines that submit in mini-swe-agent (v1 and v0).
SUBMIT_ECHOES = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")
_PRIORITY = {"SUB": 6, "EDT": 5, "EXE": 4, "PKR": 3, "EXP": 2, "OVW": 1}
_LISTERS = {"ls", "tree", "dir", "exa", "eza"}
_STATS = {"wc", "stat", "file", "du"}
_READERS = {"cat", "less", "more", "bat", "batcat"}
_SEARCHERS = {"grep", "egrep", "fgrep", "rg", "ag", "ack"}
_FILE_OPS = {"touch", "mkdir", "rm", "rmdir", "mv", "cp", "patch", "apply_patch", "ln"}
_NEUTRAL = {"cd", "pushd", "popd", "pwd", "export", "set", "unset", "source", ".", "true",
            "false", "echo", "printf", "clear", "sleep", "alias", "which", "type", ":",
            "history", "exit", "wait"}
_FILTERS = {"head", "tail", "sed", "grep", "egrep", "fgrep", "rg", "wc", "sort", "uniq", "cut",
            "awk", "tr", "less", "more", "cat", "column", "nl", "tee", "fold", "rev"}
_GIT_EDIT = {"apply", "am", "checkout", "restore", "stash", "reset", "mv", "rm", "cherry-pick",
             "revert", "merge", "rebase", "switch"}
_DEFINITION = re.compile(
    r"^\^?\s*(?:\\s\*|\\s\+|\s)*(?:export\s+)?(?:async\s+)?(?:pub(?:\(crate\))?\s+)?"
    r"(def|class|function|fn|struct|enum|trait|interface|impl|type|func)\s+"
    r"([A-Za-z_$][\w$.]*)"
)
_GREP_VALUE = frozenset({"-e", "-f", "-A", "-B", "-C", "-m", "--include", "--exclude",
                         "--exclude-dir", "-g", "--glob", "-t", "--type", "-T", "--max-count",
                         "--regexp", "--file", "--context", "--after-context",
                         "--before-context", "--type-not", "-M"})
_SWE_WINDOW_LINE = re.compile(r"^(\d+)[:|]", re.M)  # SWE-agent 12:code, agentskills 12|code
_TAB_LINE = re.compile(r"^ *(\d+)\t", re.M)
_ARROW_LINE = re.compile(r"^ *(\d+)(?:\u2192|\t)", re.M)  # Claude Code's Read: "    12→code"
_FILE_HEADER = re.compile(r"^\[File: (.+?) \((\d+) lines total\)\]", re.M)
_FOUND = re.compile(r"Found (\d+) matches? for")
_NO_MATCH = re.compile(r"No matches found|did not find any|no matches", re.I)
_PATH_LINE = re.compile(r"^([^\s:][^:\n]*?):(\d+)[:-]", re.M)
_READ_ERROR = re.compile(
    r"No such file or directory|Is a directory|does not exist|not found|Permission denied|"
    r"cannot open|Invalid `view_range`|^Error[: ]|^ERROR[: ]",
    re.M,
)


# --------------------------------------------------------------------------- context


def _own_path(p: str, cwd: str | None) -> str:
    return join_path(cwd, p)


def _unknown(rel: str) -> Any:
    return None


@dataclass(init=False)
class Context:
    """What a mapping may consult: the working folder, a path resolver, file lengths.

    ``resolve(path, cwd)`` gives the world-relative path of a (possibly relative) path;
    ``is_dir(rel)`` says whether a resolved path names a folder (None: unknown);
    ``line_count(rel)`` the file's number of lines when a world is at hand (else None).
    ``output_complete`` is false when the observation was cut by the source scaffold.
    """

    cwd: str | None
    open_file: str | None
    resolve: Callable[[str, str | None], str]
    is_dir: Callable[[str], bool | None]
    line_count: Callable[[str], int | None]
    output_complete: bool
    exit_code: int | None
    #: the structured result a scaffold recorded beside the observation text (Claude Code's
    #: ``toolUseResult``; ``is_error`` when the tool reported an error), else None
    result: Mapping[str, Any] | None
    #: the world file's lines (None without a world or for other files)
    read_lines: Callable[[str], list[str] | None]

    # written out (not generated by dataclass): the compiled module then builds a context
    # natively, where a generated __init__ would be interpreted (a tenth of a turn's time)
    def __init__(
        self,
        cwd: str | None = None,
        open_file: str | None = None,
        resolve: Callable[[str, str | None], str] = _own_path,
        is_dir: Callable[[str], bool | None] = _unknown,
        line_count: Callable[[str], int | None] = _unknown,
        output_complete: bool = True,
        exit_code: int | None = None,
        result: Mapping[str, Any] | None = None,
        read_lines: Callable[[str], list[str] | None] = _unknown,
    ) -> None:
        self.cwd, self.open_file, self.resolve, self.is_dir = cwd, open_file, resolve, is_dir
        self.line_count, self.output_complete, self.exit_code = line_count, output_complete, exit_code
        self.result, self.read_lines = result, read_lines


@dataclass(init=False)
class Mapped:
    """The canonical action of one step and what it touched (becomes ``ToolMetrics``)."""

    tool: str
    rule: str
    file: str | None
    ranges: list[tuple[int, int]]
    lines_viewed: int
    structural: bool
    action: str | None
    symbol: str | None
    result_count: int | None
    finalize: bool | None
    failed: bool

    # written out, as Context's (``ranges``: a new list when not given)
    def __init__(
        self,
        tool: str,
        rule: str,
        file: str | None = None,
        ranges: list[tuple[int, int]] | None = None,
        lines_viewed: int = 0,
        structural: bool = False,
        action: str | None = None,
        symbol: str | None = None,
        result_count: int | None = None,
        finalize: bool | None = None,
        failed: bool = False,
    ) -> None:
        self.tool, self.rule, self.file = tool, rule, file
        self.ranges = [] if ranges is None else ranges
        self.lines_viewed, self.structural, self.action = lines_viewed, structural, action
        self.symbol, self.result_count, self.finalize = symbol, result_count, finalize
        self.failed = failed

    def metrics(self, exit_code: int | None = None) -> dict[str, Any]:
        """Every ``ToolMetrics`` field of this mapping, in the record's order (``exit_code``:
        the step's)."""
        return {
            "tool": self.tool, "file": self.file, "ranges": list(self.ranges),
            "lines_viewed": self.lines_viewed, "structural": self.structural, "block": None,
            "symbol": self.symbol, "action": self.action, "result_count": self.result_count,
            "error_type": "tool_error" if self.failed else None, "confidence": None,
            "finalize": self.finalize, "exit_code": exit_code, "mapped_by": self.rule,
        }


class _RuleAction:
    """The type of ``_rule``'s default action: the rule's own (an action given, None
    included, wins; no value read from a source can be this object)."""


_RULE_ACTION = _RuleAction()


def _rule(rule: str, *, file: str | None = None, ranges: list[tuple[int, int]] | None = None,
          lines_viewed: int = 0, structural: bool = False,
          action: str | None | _RuleAction = _RULE_ACTION,
          symbol: str | None = None, result_count: int | None = None,
          finalize: bool | None = None, failed: bool = False) -> Mapped:
    """The mapping a rule gives (its canonical tool, and its action unless ``action`` is
    given), with the fields given; every field is spelled out so that the compiled module
    builds the Mapped natively (a ``**kw`` call goes through the generic path)."""
    r = RULES[rule]
    return Mapped(r.canonical, rule, file, ranges, lines_viewed, structural,
                  r.action if isinstance(action, _RuleAction) else action, symbol, result_count,
                  finalize, failed)


# --------------------------------------------------------------------------- observations


def output_lines(text: str) -> list[str]:
    """The observation's lines, without a trailing empty line."""
    if not text:
        return []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def numbered_range(text: str, style: str = "tab") -> tuple[int, int] | None:
    """First and last line number of a numbered listing (``tab``: ``cat -n`` / editor views,
    ``colon``: SWE-agent windows ``12:code`` and OpenHands agentskills ``12|code``, ``arrow``:
    Claude Code's ``12→code`` or a tab), or None when the text has none."""
    pattern = {"tab": _TAB_LINE, "arrow": _ARROW_LINE}.get(style, _SWE_WINDOW_LINE)
    first = pattern.search(text)
    if first is None:
        return None
    last = None
    for tail_line in reversed(text[first.start():].rsplit("\n", 6)):
        last = pattern.match(tail_line)
        if last is not None:
            break
    if last is None:  # a long tail of unnumbered text: scan all
        for last in pattern.finditer(text, first.start()):  # noqa: B007 - keep the last
            pass
    a, b = int(first.group(1)), int(last.group(1))  # type: ignore[union-attr]
    return (a, b) if b >= a else None


def file_header(text: str) -> tuple[str, int] | None:
    """SWE-agent's window header ``[File: PATH (N lines total)]`` as (path, N)."""
    m = _FILE_HEADER.search(text)
    return (m.group(1), int(m.group(2))) if m else None


def _count_results(text: str) -> int:
    return sum(1 for ln in output_lines(text) if ln.strip())


def _looks_failed(text: str, exit_code: int | None, lines: int = 3) -> bool:
    """A non-zero exit code, or an error message in the first ``lines`` lines."""
    if exit_code not in (None, 0):
        return True
    if lines <= 0:
        return False  # no line to search
    end = -1  # the first ``lines`` lines end where the next newline starts (else: all)
    for _ in range(lines):
        end = text.find("\n", end + 1)
        if end < 0:
            break
    # searched up to there, as if the text ended there (no copy of the head)
    return _READ_ERROR.search(text, 0, len(text) if end < 0 else end) is not None


# --------------------------------------------------------------------------- named tools


def _arg(args: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        v = args.get(k)
        if v not in (None, ""):
            return v
    return None


def _int(value: Any) -> int | None:
    if type(value) is int or value is None:  # what the conversion below gives them
        return value
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _window(m: Mapped, rng: tuple[int, int] | None, total: int | None = None) -> Mapped:
    if rng is not None:
        a, b = rng
        if total:
            b = min(b, total)
        if b >= a:
            m.ranges = [(a, b)]
            m.lines_viewed = b - a + 1
    return m


def tool_key(name: str, args: Mapping[str, Any] | None = None) -> str:
    """The table key of a named tool: editor tools are keyed by their sub-command too
    (``str_replace_editor:view``)."""
    args = args or {}
    command = args.get("command")
    if name in ("str_replace_editor", "file_editor", "edit_file_tool") and isinstance(command, str):
        return f"str_replace_editor:{command}"
    return name


def map_tool(name: str, args: Mapping[str, Any], observation: str, ctx: Context) -> Mapped:
    """The canonical action of a named tool call (shell tools go through :func:`map_shell`)."""
    if name in _NAMED_TOOLS:
        return _NAMED_TOOLS[name](name, args, observation, ctx)
    key = tool_key(name, args)
    rule_id = _TOOL_RULE.get(key) or _TOOL_RULE.get(name) or "tool:execute"
    if rule_id == "tool:bash":
        command = _arg(args, "command", "cmd", "code", "script")
        if not isinstance(command, str) or not command.strip():
            return _rule("tool:bash", failed=True)
        return map_shell(command, observation, ctx)
    path_arg = _arg(args, "path", "file_path", "file", "filename", "file_name", "dir",
                    "directory")
    file = ctx.resolve(str(path_arg), ctx.cwd) if path_arg is not None else None
    failed = _looks_failed(observation, ctx.exit_code, lines=1)  # code below may say "not found"
    if rule_id in ("tool:open", "tool:goto", "tool:scroll"):
        head = file_header(observation)
        here = ctx.resolve(head[0], ctx.cwd) if head else (file or ctx.open_file)
        m = _rule(rule_id, file=here, failed=head is None)
        return _window(m, numbered_range(observation, "colon"), head[1] if head else None)
    if rule_id == "tool:view":
        is_dir = "files and directories" in observation[:200] or (
            file is not None and ctx.is_dir(file) is True)
        if is_dir:
            return _rule("tool:view_dir", file=file or ".", structural=True, failed=failed)
        if "abbreviated version" in observation[:300] or "too large to display" in observation[:300]:
            return _rule("tool:view_outline", file=file, structural=True, failed=failed)
        shown = numbered_range(observation, "tab")
        m = _rule("tool:view", file=file, failed=failed and shown is None)
        if shown is None:
            start = _int(_arg(args, "start_line", "start", "line_number", "line"))
            rng = args.get("view_range")
            if isinstance(rng, (list, tuple)) and len(rng) == 2:
                start, end = _int(rng[0]), _int(rng[1])
            else:
                end = _int(_arg(args, "end_line", "end"))
            if start and end and end > 0 and not failed:
                shown = (start, end)
            elif not failed and observation.strip():
                n = len(output_lines(observation))
                shown = (start or 1, (start or 1) + n - 1)
        return _window(m, shown, ctx.line_count(file) if file else None)
    if rule_id in ("tool:view_outline", "tool:view_dir"):
        return _rule(rule_id, file=file or ".", structural=True, failed=failed)
    if rule_id in ("tool:search_dir", "tool:search_file", "tool:find_file"):
        term = _arg(args, "search_term", "term", "query", "pattern", "file_name", "name",
                    "symbol")
        m = _rule(rule_id, symbol=str(term) if term is not None else None)
        if rule_id == "tool:search_file":
            target = _arg(args, "file", "path", "file_path")
            m.file = ctx.resolve(str(target), ctx.cwd) if target else ctx.open_file
        defined = _DEFINITION.match(str(term or ""))
        if defined and rule_id != "tool:find_file":
            m.action, m.symbol = "go_to_definition", defined.group(2)
        found = _FOUND.search(observation)
        if found:
            m.result_count = int(found.group(1))
        elif _NO_MATCH.search(observation):
            m.result_count = 0
        elif "not found" in observation.lower() or _looks_failed(observation, ctx.exit_code):
            m.failed = True
        elif observation.strip():  # a plain list of hits, one per line
            m.result_count = _count_results(observation)
        return m
    if rule_id == "tool:edit":
        action = key.split(":", 1)[1] if key.startswith("str_replace_editor:") else name
        target = file
        if target is None and name in ("edit", "insert"):
            head = file_header(observation)
            target = ctx.resolve(head[0], ctx.cwd) if head else ctx.open_file
        return _rule(rule_id, file=target, action=action, failed=failed)
    if rule_id == "tool:submit":
        return _rule(rule_id, finalize=True, action="forfeit" if name == "exit_forfeit" else "submit")
    if rule_id == "tool:message":
        return _rule(rule_id, finalize=False)
    return _rule(rule_id, action=name if rule_id == "tool:execute" else None)


# --------------------------------------------------------------------------- agent CLIs' tools
# Claude Code's named tools (and the plan tools of other CLIs): read by their arguments and
# by the structured result the CLI records beside the text (``Context.result``).

_FOUND_CLI = re.compile(r"^Found (\d+) (?:files?|lines?|matches?|occurrences?)", re.M)
_NONE_FOUND = re.compile(r"^No (?:files|matches) found", re.M)


def _result(ctx: Context) -> Mapping[str, Any]:
    return ctx.result if isinstance(ctx.result, Mapping) else {}


def _errored(observation: str, ctx: Context) -> bool:
    return bool(_result(ctx).get("is_error")) or observation.lstrip().startswith("<tool_use_error>")


def _path_of(args: Mapping[str, Any], ctx: Context, *keys: str) -> str | None:
    raw = _arg(args, *keys)
    return ctx.resolve(str(raw), ctx.cwd) if raw is not None else None


def _map_read(name: str, args: Mapping[str, Any], observation: str, ctx: Context) -> Mapped:
    """Read: offset/limit give a ranged read, clipped to the lines the result showed; without
    them, the lines the result showed (its ``file.startLine``/``numLines``, else the numbers of
    its ``12→code`` lines)."""
    file = _path_of(args, ctx, "file_path", "path")
    m = _rule("tool:read", file=file)
    if _errored(observation, ctx):
        m.failed = True
        return m
    info = _result(ctx).get("file")
    info = info if isinstance(info, Mapping) else {}
    total = (ctx.line_count(file) if file else None) or _int(info.get("totalLines"))
    start, n = _int(info.get("startLine")), _int(info.get("numLines"))
    shown = ((start, start + n - 1) if n > 0 else None) if start and n is not None \
        else numbered_range(observation, "arrow")
    offset, limit = _int(args.get("offset")), _int(args.get("limit"))
    if not (offset or limit):
        return _window(m, shown, total)
    a = max(offset or 1, 1)
    b = a + limit - 1 if limit else (shown[1] if shown else total)
    if shown is not None:
        a, b = max(a, shown[0]), min(b, shown[1]) if b else shown[1]
    m.action = "range"
    return _window(m, (a, b) if b else None, total)


def _cli_count(observation: str, counted: Any) -> int | None:
    """A search's result count: the CLI's own count, else the "Found N ..." line, else lines."""
    if isinstance(counted, int) and not isinstance(counted, bool):
        return counted
    head = observation[:200]
    if "No " in head and _NONE_FOUND.search(head):
        return 0
    found = _FOUND_CLI.search(head) if "Found " in head else None
    if found:
        return int(found.group(1))
    return _count_results(observation) if observation.strip() else 0


def _map_grep(name: str, args: Mapping[str, Any], observation: str, ctx: Context) -> Mapped:
    """Grep (ripgrep): a search like the shell's rg; a definition pattern is go to definition;
    a single file as ``path`` is the file searched."""
    pattern = str(_arg(args, "pattern", "query") or "")
    defined = _DEFINITION.match(pattern)
    m = _rule("tool:grep", symbol=defined.group(2) if defined else (pattern or None))
    if defined:
        m.action = "go_to_definition"
    target = _arg(args, "path")
    if target is not None:
        rel = ctx.resolve(str(target), ctx.cwd)
        if ctx.is_dir(rel) is False or (ctx.is_dir(rel) is None and _looks_like_file(str(target))):
            m.file = rel
    if _errored(observation, ctx):
        m.failed = True
        return m
    res = _result(ctx)
    mode = str(res.get("mode") or args.get("output_mode") or "files_with_matches")
    key = {"content": "numLines", "count": "numMatches"}.get(mode, "numFiles")
    m.result_count = _cli_count(observation, res.get(key))
    return m


def _map_glob(name: str, args: Mapping[str, Any], observation: str, ctx: Context) -> Mapped:
    """Glob: files looked up by a name pattern, like find -name."""
    pattern = _arg(args, "pattern")
    m = _rule("tool:glob", symbol=str(pattern) if pattern is not None else None)
    if _errored(observation, ctx):
        m.failed = True
        return m
    res = _result(ctx)
    names = res.get("filenames")
    m.result_count = _cli_count(observation, res.get("numFiles", len(names) if isinstance(
        names, list) else None))
    return m


def patch_lines(hunks: Any) -> list[tuple[int, int]]:
    """The new file's lines a structured patch touched (added lines, and where lines were
    removed), merged into ranges; hunks are ``{newStart, lines: [" ctx", "-old", "+new"]}``."""
    touched: list[tuple[int, int]] = []
    for h in hunks if isinstance(hunks, list) else []:
        line = _int(h.get("newStart")) if isinstance(h, Mapping) else None
        lines = h.get("lines") if isinstance(h, Mapping) else None
        if line is None or not isinstance(lines, list):
            continue
        for text in lines:
            mark = str(text)[:1]
            if mark in ("+", "-"):
                touched.append((max(line, 1), max(line, 1)))
            if mark != "-":
                line += 1
    return merge_ranges(touched)


def _map_edit(name: str, args: Mapping[str, Any], observation: str, ctx: Context) -> Mapped:
    """Edit, MultiEdit, Write, NotebookEdit: an edit of the file, with the lines it touched
    (from the structured patch; a Write touches all its lines; else the numbered snippet the
    result showed around the edit)."""
    file = _path_of(args, ctx, "file_path", "notebook_path", "path")
    m = _rule("tool:edit", file=file, action=name)
    if _errored(observation, ctx):
        m.failed = True
        return m
    res = _result(ctx)
    ranges = patch_lines(res.get("structuredPatch"))
    content = args.get("content")
    if not ranges and name == "Write" and isinstance(content, str) and content:
        ranges = [(1, len(output_lines(content)) or 1)]
    if not ranges:
        shown = numbered_range(observation, "arrow")
        ranges = [shown] if shown else []
    total = ctx.line_count(file) if file else None
    m.ranges = [(a, min(b, total) if total else b) for a, b in ranges if not total or a <= total]
    return m


_PATCH_FILE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$", re.M)


def patch_sections(text: str) -> list[tuple[str, str, list[str]]]:
    """The file sections of an ``apply_patch`` patch (Codex): (``Add``/``Update``/``Delete``,
    the path, the section's body lines), in the patch's order."""
    out: list[tuple[str, str, list[str]]] = []
    for line in text.split("\n"):
        head = _PATCH_FILE.match(line)
        if head:
            out.append((head.group(1), head.group(2), []))
        elif line.startswith("*** "):  # End of File and Move to: within a section
            if out and not line.startswith(("*** End of File", "*** Move to: ")):
                out.append(("", "", []))  # *** End Patch or an unknown marker closes a section
        elif out and out[-1][0]:
            out[-1][2].append(line)
    return [sec for sec in out if sec[0]]


def update_hunks(body: list[str]) -> list[tuple[str, list[str], list[str]]]:
    """The hunks of an ``*** Update File`` section: (the ``@@`` anchor text, the old lines, the
    new lines); context lines (`` ``-prefixed) are in both."""
    hunks: list[tuple[str, list[str], list[str]]] = []
    for line in body:
        if line.startswith("@@"):
            hunks.append((line[2:].strip(), [], []))
            continue
        if not hunks:  # lines before the first @@: a hunk without an anchor
            hunks.append(("", [], []))
        _, old, new = hunks[-1]
        mark, rest = line[:1], line[1:]
        if mark == "-":
            old.append(rest)
        elif mark == "+":
            new.append(rest)
        elif mark == " " or line == "":
            old.append(rest)
            new.append(rest)
    return [h for h in hunks if h[1] or h[2]]


def _find_from(lines: list[str], block: list[str], start: int) -> int | None:
    """Where ``block`` starts in ``lines`` at or after ``start`` (exactly, else ignoring the
    lines' surrounding white space), else anywhere (:func:`_find_block`)."""
    found = _find_block(lines[start:], block)
    return start + found if found is not None else _find_block(lines, block)


def patched_lines(text: list[str] | None, hunks: list[tuple[str, list[str], list[str]]]
                  ) -> list[tuple[int, int]]:
    """The file's lines an update's hunks touched, in the patched file's numbering: each
    hunk's old lines are looked up in ``text`` (after its ``@@`` anchor line and the previous
    hunk, as ``apply_patch`` applies them) and the hunk applied before the next is placed; a
    hunk found already applied gives the lines it wrote, one found nowhere is left out."""
    if text is None:
        return []
    lines = list(text)
    touched: list[tuple[int, int]] = []
    pos = 0
    for anchor, old, new in hunks:
        start = pos
        if anchor:
            hit = next((i for i in range(pos, len(lines)) if lines[i].strip() == anchor), None)
            start = hit + 1 if hit is not None else pos
        if old:
            at = _find_from(lines, old, start)
            applied = at is None
            if applied:
                at = _find_from(lines, new, start) if new else None
            if at is None:
                continue
        elif anchor and start > pos:  # only added lines: right after the anchor
            at, applied = start, False
        else:
            continue
        for op, _a, _b, j1, j2 in difflib.SequenceMatcher(a=old, b=new,
                                                          autojunk=False).get_opcodes():
            if op != "equal":
                touched.append((at + j1 + 1, at + max(j2, j1 + 1)))
        if not applied:
            lines[at:at + len(old)] = new
        pos = at + len(new)
    return merge_ranges(touched)


def _map_patch(name: str, args: Mapping[str, Any], observation: str, ctx: Context) -> Mapped:
    """apply_patch (Codex): an edit of the first file the patch names; a file it adds touches
    the lines it adds; an update touches the lines its hunks change, found by their context in
    the world's file (no lines without a world: the hunks carry no line numbers)."""
    text = str(_arg(args, "input", "patch", "command") or "")
    sections = patch_sections(text)
    target = _arg(args, "path") or (sections[0][1] if sections else None)
    file = ctx.resolve(str(target), ctx.cwd) if target else None
    m = _rule("tool:edit", file=file, action="apply_patch")
    m.failed = ctx.exit_code not in (None, 0) or _errored(observation, ctx)
    if sections and not m.failed:
        kind, _, body = sections[0]
        if kind == "Add":
            added = sum(line.startswith("+") for line in body)
            m.ranges = [(1, added)] if added else []
        elif kind == "Update" and file:
            m.ranges = patched_lines(ctx.read_lines(file), update_hunks(body))
    return m


def _map_chat_file(name: str, args: Mapping[str, Any], observation: str, ctx: Context) -> Mapped:
    """A file added to aider's chat: all its lines when the world has the file (action
    ``whole_file``), else the file alone (action ``lines_unknown``)."""
    file = _path_of(args, ctx, "path")
    total = ctx.line_count(file) if file else None
    m = _rule("tool:chat_file", file=file, action="whole_file" if total else "lines_unknown")
    return _window(m, (1, total) if total else None)


def _find_block(lines: list[str], block: list[str]) -> int | None:
    """Where ``block`` starts in ``lines`` (0-based): exactly, else ignoring the lines'
    surrounding white space; None when it is not there."""
    for norm in (lambda s: s, lambda s: s.strip()):
        want = [norm(b) for b in block]
        have = [norm(x) for x in lines]
        for i in range(len(have) - len(want) + 1):
            if have[i:i + len(want)] == want:
                return i
    return None


def replaced_lines(text: list[str] | None, search: str, replace: str) -> list[tuple[int, int]]:
    """The file's lines a SEARCH/REPLACE edit touched (in the edited file's numbering): the
    replacement's lines that differ from the text searched for, placed where the SEARCH text
    stands in ``text`` (or the REPLACE text, when ``text`` already holds the edit)."""
    old, new = search.split("\n") if search else [], replace.split("\n") if replace else []
    if not old:  # an empty SEARCH creates the file: all its lines, as a Write
        return [(1, len(new))] if new else []
    if text is None:
        return []
    at = _find_block(text, old)
    if at is None:
        at = _find_block(text, new) if new else None
    if at is None:
        return []
    touched: list[tuple[int, int]] = []
    for op, _a, _b, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if op != "equal":
            touched.append((at + j1 + 1, at + max(j2, j1 + 1)))
    return merge_ranges(touched)


def _map_search_replace(name: str, args: Mapping[str, Any], observation: str,
                        ctx: Context) -> Mapped:
    """An aider SEARCH/REPLACE block: an edit of its file, with the lines it touched when the
    world has the file and the SEARCH or REPLACE text is found in it."""
    file = _path_of(args, ctx, "path")
    m = _rule("tool:search_replace", file=file, failed=_errored(observation, ctx))
    if file and not m.failed:
        m.ranges = replaced_lines(ctx.read_lines(file), str(args.get("search") or ""),
                                  str(args.get("replace") or ""))
    return m


def _map_plan(name: str, args: Mapping[str, Any], observation: str, ctx: Context) -> Mapped:
    """TodoWrite and the other CLIs' plan tools: the plan channel (MEM), with its item count."""
    items = _arg(args, "todos", "plan", "items")
    return _rule("tool:plan", result_count=len(items) if isinstance(items, list) else None)


def _map_subagent(name: str, args: Mapping[str, Any], observation: str, ctx: Context) -> Mapped:
    """Task / Agent: a subagent takes over; its own turns follow as a sidechain."""
    return _rule("tool:subagent", failed=_errored(observation, ctx))


def _map_other(name: str, args: Mapping[str, Any], observation: str, ctx: Context) -> Mapped:
    """A tool the reader does not know (``args["name"]``): kept under its name."""
    return _rule("tool:other", action=str(args.get("name") or name))


def _ranges(value: Any) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for item in value if isinstance(value, list) else []:
        pair = [_int(v) for v in item] if isinstance(item, (list, tuple)) and len(item) == 2 else []
        if len(pair) == 2 and pair[0] is not None and pair[1] is not None and pair[1] >= pair[0]:
            out.append((pair[0], pair[1]))
    return out


def _map_recorded(name: str, args: Mapping[str, Any], observation: str, ctx: Context) -> Mapped:
    """A canonical action recorded by the source (``args``: the ``ToolMetrics`` fields): kept,
    its file resolved like any other path."""
    def text(key: str) -> str | None:
        value = args.get(key)
        return str(value) if isinstance(value, (str, int, float)) and value != "" else None

    file = text("file")
    ranges = _ranges(args.get("ranges"))
    viewed = _int(args.get("lines_viewed"))
    finalize = args.get("finalize")
    return Mapped(tool=text("tool") or RULES["tool:recorded"].canonical, rule="tool:recorded",
                  file=ctx.resolve(file, ctx.cwd) if file else None, ranges=ranges,
                  lines_viewed=viewed if viewed is not None else sum(b - a + 1 for a, b in ranges),
                  structural=args.get("structural") is True, action=text("action"),
                  symbol=text("symbol"), result_count=_int(args.get("result_count")),
                  finalize=finalize if isinstance(finalize, bool) else None,
                  failed=args.get("error_type") not in (None, ""))
def _snippet_lines(observation: str, new: str) -> tuple[int, int] | None:
    """Where the lines of ``new`` stand in an editor's numbered snippet (``  12\tcode``)."""
    want = [ln.rstrip() for ln in new.split("\n")]
    if not new.strip():
        return None
    shown = [(int(m.group(1)), m.group(2).rstrip()) for m in re.finditer(
        r"^ *(\d+)\t(.*)$", observation, re.M)]
    for k in range(len(shown) - len(want) + 1):
        if [t for _, t in shown[k:k + len(want)]] == want:
            return shown[k][0], shown[k][0] + len(want) - 1
    return None


def _map_text_editor(name: str, args: Mapping[str, Any], observation: str, ctx: Context) -> Mapped:
    """Inspect's ``text_editor``: ``view`` as the editor view it is (a ranged read with
    ``view_range``); ``create``, ``insert`` and ``str_replace`` edits with the lines they wrote
    (all of a created file; after ``insert_line``; where the new text shows in the snippet)."""
    command = str(args.get("command") or "")
    m = map_tool("str_replace_editor", args, observation, ctx)
    if command == "view":
        if m.rule == "tool:view" and isinstance(args.get("view_range"), (list, tuple)):
            m.action = "range"
        return m
    if m.rule != "tool:edit" or _errored(observation, ctx) or m.failed:
        m.failed = m.failed or (m.rule == "tool:edit" and _errored(observation, ctx))
        return m
    new = args.get("file_text") if command == "create" else args.get("new_str")
    new = new if isinstance(new, str) else ""
    count = len(output_lines(new))
    if command == "create":
        rng = (1, count) if count else None
    elif command == "insert":
        at = _int(args.get("insert_line"))
        rng = (at + 1, at + count) if at is not None and count else None
    elif command == "str_replace":
        rng = _snippet_lines(observation, new) or numbered_range(observation, "tab")
    else:  # undo_edit: the lines it restored are not shown
        rng = None
    m.ranges = [rng] if rng else []
    return m


#: Named tools read by their own mapper (keys are the tools' names as recorded).
_NAMED_TOOLS: dict[str, Callable[[str, Mapping[str, Any], str, Context], Mapped]] = {
    "Read": _map_read, "Grep": _map_grep, "Glob": _map_glob,
    **{n: _map_edit for n in ("Edit", "MultiEdit", "Write", "NotebookEdit")},
    **{n: _map_plan for n in RULES["tool:plan"].covers},
    "Task": _map_subagent, "Agent": _map_subagent, "apply_patch": _map_patch,
    "other": _map_other, "adakit:recorded": _map_recorded,
    "text_editor": _map_text_editor,
    "aider:add": _map_chat_file, "aider:read-only": _map_chat_file,
    "aider:edit": _map_search_replace,
}


def known_tool(name: str) -> bool:
    """Whether the mapping table covers a tool of this name (as a named tool or a rule's)."""
    return name in _NAMED_TOOLS or name in _TOOL_RULE


def tool_names() -> list[str]:
    """Every tool name the mapping table covers (not its sub-command keys), sorted."""
    return sorted(n for n in {*_NAMED_TOOLS, *_TOOL_RULE} - {"other"} if ":" not in n)


def parse_tool_map(items: Iterable[str]) -> dict[str, str]:
    """``NAME=TOOL`` pairs (``--map-tool``): a source's own tool NAME is mapped as the known
    TOOL (``grep_repo=search_dir``); a TOOL the table does not cover is a ``ValueError``."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, tool = (part.strip() for part in item.partition("="))
        if not sep or not name or not tool:
            raise ValueError(f"--map-tool {item!r}: expected NAME=TOOL")
        if not known_tool(tool) or tool == "other":
            raise ValueError(f"--map-tool {item!r}: {tool!r} is not a tool of the mapping table "
                             f"(known: {', '.join(tool_names())})")
        out[name] = tool
    return out


# --------------------------------------------------------------------------- shell


def _operands(stage: Stage, with_value: frozenset[str] = frozenset()) -> tuple[dict[str, str], list[str]]:
    return options(stage.args, with_value)


def _stage_kind(stage: Stage) -> tuple[str | None, str]:
    """(canonical class or None for neutral / a pure filter, rule id) of one stage alone."""
    p, args = stage.program, stage.args
    if p == "submit" or (p in ("echo", "printf") and args and args[0].strip() in SUBMIT_ECHOES):
        return "SUB", "shell:submit"
    if p == "git" and args:
        sub = args[0]
        if sub == "grep":
            return "EXP", "shell:grep"
        if sub in ("ls-files", "ls-tree"):
            return "OVW", "shell:ls"
        if sub in _GIT_EDIT:
            return "EDT", "shell:edit"
        return "EXE", "shell:execute"
    if p == "sed":
        opts, _ = options(args, frozenset({"-e", "-f"}))
        if "-i" in opts or any(a.startswith(("-i", "--in-place")) for a in args):
            return "EDT", "shell:edit"
        if "-n" in opts or "--quiet" in opts:
            return "PKR", "shell:sed_n"
        return None, "shell:sed_n"
    if p == "perl" and any(a.startswith("-") and "i" in a and not a.startswith("--") for a in args):
        return "EDT", "shell:edit"
    if p == "tee":
        return ("EDT", "shell:edit") if any(not a.startswith("-") for a in args) else (None, "")
    if p in _FILE_OPS:
        return "EDT", "shell:edit"
    if p in _LISTERS:
        return "OVW", "shell:ls"
    if p in _STATS:
        return "OVW", "shell:stat"
    if p in ("find", "fd", "fdfind", "locate"):
        named = p in ("locate", "fd", "fdfind") and any(not a.startswith("-") for a in args)
        if named or any(a in ("-name", "-iname", "-path", "-ipath", "-regex", "-iregex",
                              "-wholename") for a in args):
            return "EXP", "shell:find_name"
        return "OVW", "shell:find"
    if p in _READERS:
        return "PKR", "shell:cat"
    if p == "head":
        return "PKR", "shell:head"
    if p == "tail":
        return "PKR", "shell:tail"
    if p == "nl":
        return "PKR", "shell:nl"
    if p in ("awk", "gawk") and args and _awk_range(args[0]) is not None:
        return "PKR", "shell:awk_nr"
    if p in _SEARCHERS:
        return "EXP", "shell:grep"
    if p in _NEUTRAL or p.startswith("#"):
        return None, ""
    return "EXE", "shell:execute"


def _awk_range(script: str) -> tuple[int, int | None] | None:
    s = script.replace(" ", "")
    m = re.match(r"^NR>=?(\d+)&&NR<=?(\d+)", s)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        return (a + (0 if ">=" in s[: s.index("&&")] else 1),
                b - (0 if "<=" in s[s.index("&&"):] else 1))
    m = re.match(r"^NR==(\d+),NR==(\d+)", s)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.match(r"^NR>=(\d+)$|^NR>=(\d+)\{", s)
    if m:
        return int(m.group(1) or m.group(2)), None
    return None


def _sed_ranges(script: str) -> list[tuple[int, int | None]] | None:
    """Line ranges of a ``sed -n`` print script (``10,40p``, ``5p``, ``10,$p``, ``1,5p;9p``)."""
    out: list[tuple[int, int | None]] = []
    for part in re.split(r"[;\n]", script.strip()):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:,(\d+|\$))?p", part)
        if not m:
            return None
        a = int(m.group(1))
        b = None if m.group(2) == "$" else int(m.group(2) or a)
        out.append((a, b))
    return out or None


def _window_of(stage: Stage, total: int | None) -> list[tuple[int, int | None]] | None:
    """The line windows a reading stage selects of its input (None: the whole input)."""
    p = stage.program
    if p == "head":
        opts, _ = options(stage.args, frozenset({"-n", "--lines", "-c"}))
        raw = opts.get("-n") or opts.get("--lines") or "10"
        if raw.startswith("-"):  # all but the last K
            k = _int(raw[1:])
            return [(1, total - k)] if total is not None and k is not None else [(1, None)]
        k = _int(raw)
        return [(1, k)] if k is not None else None
    if p == "tail":
        opts, _ = options(stage.args, frozenset({"-n", "--lines", "-c"}))
        raw = opts.get("-n") or opts.get("--lines") or "10"
        if raw.startswith("+"):
            k = _int(raw[1:])
            return [(k, None)] if k is not None else None
        k = _int(raw)
        if k is None:
            return None
        if total is None:
            return [(-k, None)]  # relative to an unknown end
        return [(max(1, total - k + 1), total)]
    if p == "sed":
        opts, rest = options(stage.args, frozenset({"-e", "-f"}))
        script = opts.get("-e") or (rest[0] if rest else "")
        return _sed_ranges(script)  # type: ignore[return-value]
    if p in ("awk", "gawk"):
        r = _awk_range(stage.args[0]) if stage.args else None
        return [r] if r else None
    return None


def _file_operands(stage: Stage) -> list[str]:
    p = stage.program
    if p in ("head", "tail"):
        _, rest = options(stage.args, frozenset({"-n", "--lines", "-c", "--bytes"}))
    elif p == "sed":
        opts, rest = options(stage.args, frozenset({"-e", "-f"}))
        if "-e" not in opts and rest:
            rest = rest[1:]  # the script
    elif p in ("awk", "gawk"):
        _, rest = options(stage.args, frozenset({"-F", "-v", "-f"}))
        rest = rest[1:]
    elif p == "nl":
        _, rest = options(stage.args, frozenset({"-b", "-s", "-w", "-v", "-i", "-n"}))
    else:
        _, rest = options(stage.args)
    return [*rest, *stage.reads]


def _compose(windows: list[tuple[int, int | None]], inner: list[tuple[int, int | None]] | None
             ) -> list[tuple[int, int | None]]:
    """Apply a filter's windows (relative to its input's lines) to the current windows."""
    if inner is None or not windows:
        return windows
    out: list[tuple[int, int | None]] = []
    a0, b0 = windows[0]
    for a, b in inner:
        if a < 0:  # tail of an input of unknown end: keep as unknown
            return [(a0, b0)]
        na = a0 + a - 1
        nb = None if b is None else a0 + b - 1
        if b0 is not None:
            nb = b0 if nb is None else min(nb, b0)
        out.append((na, nb))
    return out


def _finish_ranges(windows: list[tuple[int, int | None]], total: int | None,
                   n_out: int | None) -> list[tuple[int, int]]:
    """Concrete ranges: unknown ends from the file length or the lines the output holds."""
    out: list[tuple[int, int]] = []
    for a, b in windows:
        if a < 1:
            if total is None:
                continue
            a = max(1, total + a + 1)
        if b is None:
            if total is not None:
                b = total
            elif n_out is not None and len(windows) == 1:
                b = a + n_out - 1
            else:
                continue
        if total is not None:
            b = min(b, total)
        if n_out is not None and len(windows) == 1:
            b = min(b, a + max(n_out, 0) - 1)
        if b >= a:
            out.append((a, b))
    return out


def _grep(stages: list[Stage], k: int, observation: str, ctx: Context, cwd: str | None) -> Mapped:
    """A search stage (grep/rg/git grep) and what its output says."""
    st = stages[k]
    args = st.args[1:] if st.program == "git" else st.args
    opts, rest = options(args, _GREP_VALUE)
    pattern = opts.get("-e") or opts.get("--regexp") or (rest.pop(0) if rest else "")
    defined = _DEFINITION.match(pattern)
    m = _rule("shell:grep_def" if defined else "shell:grep",
              symbol=defined.group(2) if defined else (pattern or None))
    paths = [] if st.via_xargs else rest
    if len(paths) == 1:
        rel = ctx.resolve(paths[0], cwd)
        if ctx.is_dir(rel) is False or (ctx.is_dir(rel) is None and _looks_like_file(paths[0])):
            m.file = rel
    counted = observation
    tail = stages[k + 1:]
    if any(s.program == "wc" for s in tail):
        n = _int(output_lines(observation)[-1].split()[0]) if output_lines(observation) else None
        m.result_count = n
    elif ctx.exit_code == 1 and not observation.strip():
        m.result_count = 0
    elif ctx.exit_code not in (None, 0, 1):
        m.failed = True
    elif "-c" in opts or "--count" in opts:
        m.result_count = sum(_int(ln.rsplit(":", 1)[-1]) or 0 for ln in output_lines(counted))
    else:
        m.result_count = _count_results(counted)
        if m.result_count == 0 or _READ_ERROR.search("\n".join(output_lines(counted)[:2])):
            m.failed = m.result_count > 0 and bool(_READ_ERROR.search(counted[:300]))
            if m.failed:
                m.result_count = None
    if defined and m.file is None and m.result_count == 1:
        hit = _PATH_LINE.search(observation)
        if hit:
            m.file = ctx.resolve(hit.group(1), cwd)
            line = int(hit.group(2))
            m.ranges, m.lines_viewed = [(line, line)], 1
    return m


def _looks_like_file(path: str) -> bool:
    base = path.rstrip("/").rsplit("/", 1)[-1]
    return not path.endswith("/") and "." in base.strip(".") and "*" not in base


def _read(stages: list[Stage], observation: str, ctx: Context, cwd: str | None) -> Mapped:
    """A pipeline whose producer reads a file window (cat, head, tail, sed -n, nl, awk NR)."""
    first = stages[0]
    _, rule = _stage_kind(first)
    files = _file_operands(first)
    rel = ctx.resolve(files[0], cwd) if files else None
    if rel is None:
        return _rule("shell:execute", action=first.program)
    filters = stages[1:]
    for k, st in enumerate(filters, 1):
        if st.program in _SEARCHERS and not _file_operands_for_search(st):
            m = _grep(stages, k, observation, ctx, cwd)  # cat FILE | grep PATTERN
            m.file = rel
            m.ranges, m.lines_viewed = [], 0
            return m
    m = _rule(rule, file=rel)
    failed = _looks_failed(observation, ctx.exit_code) and not output_lines(observation)[1:]
    if failed:
        m.failed = True
        return m
    total = ctx.line_count(rel)
    numbered = _numbers_lines(first) or any(_numbers_lines(s) for s in filters)
    if numbered:
        shown = numbered_range(observation, "tab")
        if shown:
            return _window(m, shown, total)
    if len(files) > 1:  # several files concatenated: the first one, whole when its length is known
        return _window(m, (1, total) if total else None)
    windows: list[tuple[int, int | None]] = _window_of(first, total) or [(1, None)]
    for st in filters:
        if st.program in ("head", "tail", "sed", "awk", "gawk"):
            windows = _compose(windows, _window_of(st, None if windows[0][1] is None else
                                                   windows[0][1] - windows[0][0] + 1))
    n_out = len(output_lines(observation)) if ctx.output_complete else None
    if any(s.program not in ("head", "tail", "sed", "awk", "gawk", "cat") for s in filters):
        n_out = None  # wc, sort, cut ... the output no longer counts shown lines
    m.ranges = _finish_ranges(windows, total, n_out)
    m.lines_viewed = sum(b - a + 1 for a, b in m.ranges)
    if not m.ranges and observation.strip():
        m.lines_viewed = len(output_lines(observation))
    return m


def _numbers_lines(stage: Stage) -> bool:
    """``cat -n`` (also ``-bn``, ``--number``) and ``nl -ba`` print true line numbers."""
    if stage.program == "cat":
        return any(a == "--number" or (a.startswith("-") and not a.startswith("--") and "n" in a)
                   for a in stage.args)
    if stage.program == "nl":
        return any(a in ("-ba", "--body-numbering=a") for a in stage.args) or (
            "-b" in stage.args and "a" in stage.args)
    return False


def _file_operands_for_search(stage: Stage) -> list[str]:
    args = stage.args[1:] if stage.program == "git" else stage.args
    _, rest = options(args, _GREP_VALUE)
    return rest[1:] if rest else []


def _pipeline(seg: Segment, observation: str, ctx: Context) -> Mapped | None:
    stages, cwd = seg.stages, seg.cwd
    kinds = [_stage_kind(s) for s in stages]
    for kind, rule in kinds:
        if kind == "SUB":
            return _rule(rule, finalize=True)
    producer = kinds[0][0]
    for s, (kind, rule) in zip(stages, kinds, strict=True):
        if kind == "EDT" or (s.writes and producer not in ("EXE",)):
            return _edit(s, rule if kind == "EDT" else "shell:edit", cwd, ctx)
    if producer == "EXE" or any(k == "EXE" and s.program not in _FILTERS for s, (k, _) in
                                zip(stages[1:], kinds[1:], strict=True)):
        exe = stages[0] if producer == "EXE" else next(
            s for s, (k, _) in zip(stages, kinds, strict=True) if k == "EXE")
        m = _rule("shell:execute", action=exe.program)
        return m
    for k, s in enumerate(stages[1:], 1):
        if s.via_xargs and kinds[k][0] == "EXP":
            return _grep(stages, k, observation, ctx, cwd)
    if producer == "PKR" or (producer is None and stages[0].reads and
                             stages[0].program in ("head", "tail", "sed", "cat", "nl")):
        return _read(stages, observation, ctx, cwd)
    if producer == "EXP":
        if stages[0].program in ("find", "fd", "fdfind", "locate"):
            m = _rule("shell:find_name", symbol=_find_name(stages[0]))
            m.result_count = _count_results(observation) if ctx.exit_code in (None, 0) else None
            return m
        return _grep(stages, 0, observation, ctx, cwd)
    if producer == "OVW":
        first = stages[0]
        _, rule = kinds[0]
        operands = [a for a in _file_operands(first) if not a.startswith("-")]
        if first.program == "find":
            operands = [a for a in first.args[:1] if not a.startswith("-")]
        target = operands[0] if operands else (cwd or ".")
        rel = ctx.resolve(target, cwd) if operands else ctx.resolve(cwd or ".", None)
        m = _rule(rule, file=rel or ".", structural=True)
        m.failed = _looks_failed(observation, ctx.exit_code) and len(output_lines(observation)) <= 1
        m.result_count = None if m.failed else _count_results(observation)
        return m
    return None


def _find_name(stage: Stage) -> str | None:
    args = stage.args
    for i, a in enumerate(args):
        if a in ("-name", "-iname", "-path", "-ipath", "-regex", "-iregex", "-wholename") and i + 1 < len(args):
            return args[i + 1]
    rest = [a for a in args if not a.startswith("-")]
    return rest[0] if rest else None


def _edit(stage: Stage, rule: str, cwd: str | None, ctx: Context) -> Mapped:
    p = stage.program
    target: str | None
    if stage.writes:
        target = stage.writes[0]
        action = "write"
    elif p == "tee":
        target = next((a for a in stage.args if not a.startswith("-")), None)
        action = "write"
    elif p == "sed":
        opts, rest = options(stage.args, frozenset({"-e", "-f"}))
        files = rest if "-e" in opts else rest[1:]
        target, action = (files[-1] if files else None), "sed -i"
    elif p == "git":
        target, action = None, f"git {stage.args[0]}" if stage.args else "git"
    elif p in ("patch", "apply_patch"):
        target, action = None, "patch"
    else:
        _, rest = options(stage.args)
        target, action = (rest[-1] if p in ("mv", "cp") and rest else (rest[0] if rest else None)), p
    rel = ctx.resolve(target, cwd) if target else None
    return _rule(rule, file=rel, action=action)


def map_shell(command: str, observation: str, ctx: Context) -> Mapped:
    """The canonical action of a shell command line (see the module notes)."""
    segments = parse_command(command, ctx.cwd)
    best: Mapped | None = None
    for seg in segments:
        m = _pipeline(seg, observation, ctx)
        if m is None:
            continue
        if best is None or _PRIORITY[m.tool] > _PRIORITY[best.tool]:
            best = m
    if best is None:
        first = segments[0].stages[0].program if segments and segments[0].stages else None
        return _rule("shell:execute", action=first)
    return best


def rules_frame() -> Any:
    """The mapping table as a DataFrame (rule, covers, canonical, action, why)."""
    import pandas as pd

    return pd.DataFrame([{"rule": r.rule, "covers": ", ".join(r.covers), "canonical": r.canonical,
                          "action": r.action, "why": r.why} for r in MAPPING_TABLE])
