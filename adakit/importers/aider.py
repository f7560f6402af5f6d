"""aider chat histories (``.aider.chat.history.md``, written in the repository's root).

One Markdown file holds every session aider ran in that repository, each opened by a line
``# aider chat started at YYYY-MM-DD HH:MM:SS``; each session is its own run. Inside one:

* ``#### `` lines: the user's input (several lines for multi-line input). A plain message is
  a request (the first one is the task); ``/add``, ``/read-only``, ``/drop``, ``/ask``,
  ``/code``, ``/architect`` ... are commands; ``/run CMD``, ``!CMD``, ``/test CMD`` and
  ``/git ARGS`` run a shell command, whose output follows (aider quotes only its first line
  with ``> ``; older versions repeat it, quoted line by line, when it is added to the chat);
* ``> `` lines: aider's own notes: the start-up announcements (``Aider v0.86.1``,
  ``Main model: NAME with diff edit format``, ``Added x.py to the chat.``), ``Added x.py to
  the chat``, ``Added x.py to read-only files.``, confirmations answered by the user
  (``Add file to the chat? (Y)es/(N)o [Yes]: y`` after the file's name on its own line, or
  ``Add x.py to the chat? ... y`` in older versions), ``Applied edit to x.py``, edit failures
  (``... failed to exactly match lines in x.py``), ``Tokens: 4.2k sent, 310 received. Cost:
  $0.02 message, $0.05 session.``;
* any other text: the assistant's reply, its prose and SEARCH/REPLACE blocks (a file name
  line, a fence, ``<<<<<<< SEARCH``, the old text, ``=======``, the new text,
  ``>>>>>>> REPLACE``; a block right after another in the same fence reuses its file); with
  the ``whole`` edit format, a fenced block after a file name line is the file's new content;
  with ``udiff``, each ``@@`` hunk of a ``--- path`` / ``+++ path`` diff is a block.

Steps: a file added to the chat (by ``/add``, at start-up, or by a confirmation) is a read of
the whole file (``aider:add``; ``read-only`` for read-only files); each SEARCH/REPLACE block is
an edit of its file (``aider:edit``); a shell command goes through the shell mapping; a reply
without a block is one step of prose (``think``). A reply's prose is the ``thinking`` of its
first step, its tokens and cost those of the ``Tokens:`` line after it. The mapping reads the
files from the world: ``--world``, else the folder holding the history file when the files
the session names are there (lines are then those of the files as they are now).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adakit.importers.base import BadInput, SourceStep, Trajectory

FORMAT = "aider"
AGENT = "aider"
#: The history's file name (also with a prefix, as copies are often named).
EXTENSIONS = (".aider.chat.history.md",)
#: Hidden file names a folder search takes although they start with a dot.
NAMES = (".aider.chat.history.md",)
#: A Markdown file, not JSON: read as text, split into sessions (each its own run).
LINES = False
TEXT = True
#: The skip reason of a session without any exchange (aider started and left): not bad input.
EMPTY_SESSION = "empty session"

_START = re.compile(r"^# aider chat started at (.*?)[ \t]*$", re.M)
_SEARCH = re.compile(r"^<{5,9} SEARCH\s*$")
_DIVIDER = re.compile(r"^={5,9}\s*$")
_REPLACE = re.compile(r"^>{5,9} REPLACE\s*$")
_VERSION = re.compile(r"^Aider v(\S+)")
_MODEL = re.compile(r"^(?:Main model|Models?): (\S+?),?(?: with (\S+) edit format)?(?:,|$| )")
_ADDED = re.compile(r"^Added (.+?) to the chat( \(read-only\))?\.?$")
_ADDED_RO = re.compile(r"^Added (.+?) to read-only files\.?$")
_CONFIRM_ADD = re.compile(r"^Add (.+?) to the chat\?(?: .*?:)?\s*(\w*)\s*$")
_APPLIED = re.compile(r"^Applied edit to (.+?)\s*$")
_NO_MATCH = re.compile(r"failed to (?:exactly )?match lines in (.+?)\s*$")
_TOKENS = re.compile(r"^Tokens: ([\d.,]+)([kM]?) sent,.*?([\d.,]+)([kM]?) received\."
                     r"(?: Cost: \$([\d.]+) (?:message|request), \$([\d.]+) session\.)?")
_COMMIT = re.compile(r"^Commit [0-9a-f]{7,} ")
_OUTPUT_ASK = re.compile(r"^Add .*output to the chat\?")
_OUTPUT_ADDED = re.compile(r"^Added \d+ lines? of output to the chat")
_NOTES = ("Git repo:", "Repo-map:", "Use /help", "Weak model:", "Editor model:", "Cur working",
          "Create new file?", "Moved ", "Removed", "Dropping all", "Converted ", "Now at:",
          "HEAD is:", "Added clipboard", "Allow edits to", "Cost estimates", "Warning")
_QUESTION = re.compile(r"\? (?:\(Y\)es/|y$|n$)")
_FAILED = re.compile(r"^# \d+ SEARCH/REPLACE blocks? failed to match")
#: The notes read (a failed edit's explanation ends at one of them).
_READ = (_ADDED, _ADDED_RO, _CONFIRM_ADD, _APPLIED, _TOKENS, _COMMIT, _FAILED)
_SHELL = {"/run": "run", "/test": "test", "/git": "git"}
_CHAT = ("/ask", "/code", "/architect", "/context", "/help")
_QUIET = ("/add", "/read-only", "/read", "/drop", "/clear", "/reset", "/exit", "/quit")


@dataclass
class Session:
    """One session of a history file: its text, start time, first line, and the folder the
    history file is in."""

    text: str
    started: str
    line: int
    folder: Path | None = None


def markers(data: Any) -> str | None:
    """The line that makes a text file an aider chat history (None: not one)."""
    if isinstance(data, str) and _START.search(data):
        return "a '# aider chat started at' line"
    return None


def sessions(path: Path, text: str) -> list[tuple[str, str, Any]]:
    """(label, sha256, :class:`Session`) of every session of a history file; each is its own
    source, so re-importing a grown history imports only its new or grown sessions."""
    starts = list(_START.finditer(text))
    if not starts:
        raise BadInput("unknown shape", "no '# aider chat started at' line")
    out: list[tuple[str, str, Any]] = []
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        chunk = text[m.start():end]
        line = text.count("\n", 0, m.start()) + 1
        # the blank lines before the next session's start are not part of this one's content
        digest = hashlib.sha256(chunk.rstrip().encode("utf-8")).hexdigest()
        out.append((f"{path}:{line}", digest,
                    Session(chunk, m.group(1), line, path.parent)))
    return out


def _classify(lines: list[str]) -> list[tuple[str, str]]:
    """Each line as (user | quote | raw, its text without the prefix and Markdown line break);
    a ``> `` line inside a reply's open fence is the reply's."""
    out: list[tuple[str, str]] = []
    fence = False
    for ln in lines:
        if ln.startswith("####"):
            out.append(("user", ln[4:].removeprefix(" ").rstrip()))
            fence = False
        elif ln.startswith(">") and not fence and (ln == ">" or ln.startswith("> ")):
            out.append(("quote", ln[2:].rstrip()))
        else:
            if ln.lstrip().startswith("```"):
                fence = not fence
            out.append(("raw", ln.rstrip()))
    return out


def _amount(number: str, unit: str) -> int:
    value = float(number.replace(",", ""))
    return int(round(value * {"k": 1e3, "M": 1e6}.get(unit, 1)))


def _name_of(line: str) -> str | None:
    """The file a line names on its own (``path``, ``**path**``, ```path``` , ``# path:``)."""
    name = line.strip().strip("*`#").strip().rstrip(":").strip("`")
    return name if name and not re.search(r"\s", name) and ("." in name or "/" in name) else None


def _filename(prose: list[str]) -> str | None:
    """Take the file name (and the fence opening the block) off the end of the prose."""
    if prose and prose[-1].lstrip().startswith("```"):
        prose.pop()
    name = _name_of(prose[-1]) if prose else None
    if name:
        prose.pop()
        if prose and prose[-1].lstrip().startswith("```"):  # diff-fenced: the name inside
            prose.pop()
        return name
    return None


def edit_blocks(lines: list[str]) -> tuple[str, list[tuple[str, str, str]], str | None]:
    """(the prose, the (file, search, replace) blocks, what is wrong with a broken block) of
    one reply."""
    prose: list[str] = []
    blocks: list[tuple[str, str, str]] = []
    last: str | None = None
    broken: str | None = None
    i, n = 0, len(lines)
    while i < n:
        if not _SEARCH.match(lines[i]):
            prose.append(lines[i])
            i += 1
            continue
        file = _filename(prose) or last
        j = i + 1
        while j < n and not _DIVIDER.match(lines[j]):
            j += 1
        k = j + 1
        while k < n and not _REPLACE.match(lines[k]):
            k += 1
        if k >= n:  # a block cut off ends the reply: nothing after it can be told apart
            return "\n".join(prose), blocks, "a SEARCH block without its ======= and >>>>>>> REPLACE lines"
        if file is None:  # aider refuses the block; the reply's other blocks stand
            broken = "a SEARCH/REPLACE block without a file name"
        else:
            blocks.append((file, "\n".join(lines[i + 1:j]), "\n".join(lines[j + 1:k])))
        last, i = file, k + 1
        if i < n and lines[i].lstrip().startswith("```"):
            i += 1
    return "\n".join(prose), blocks, broken


def whole_files(lines: list[str]) -> tuple[str, list[tuple[str, str, str]]]:
    """(the prose, the (file, "", content) blocks) of a reply in aider's ``whole`` edit format:
    each fenced block right after a file name line is the file's new content."""
    prose: list[str] = []
    blocks: list[tuple[str, str, str]] = []
    i, n = 0, len(lines)
    while i < n:
        file = _name_of(prose[-1]) if prose and lines[i].lstrip().startswith("```") else None
        if file:
            end = next((k for k in range(i + 1, n) if lines[k].strip() == "```"), None)
            if end is not None:
                prose.pop()
                blocks.append((file, "", "\n".join(lines[i + 1:end])))
                i = end + 1
                continue
        prose.append(lines[i])
        i += 1
    return "\n".join(prose), blocks


def _hunks(body: list[str]) -> list[tuple[str, str]]:
    """(old text, new text) of each ``@@`` hunk of one file's unified diff."""
    out: list[tuple[str, str]] = []
    for chunk in "\n".join(body).split("\n@@")[1:] if body else []:
        lines = chunk.split("\n")[1:]  # the rest of the @@ line is not a line of the file
        old = [ln[1:] for ln in lines if ln[:1] in (" ", "-", "")]
        new = [ln[1:] for ln in lines if ln[:1] in (" ", "+", "")]
        out.append(("\n".join(old).strip("\n"), "\n".join(new).strip("\n")))
    return out


def udiff_files(lines: list[str]) -> tuple[str, list[tuple[str, str, str]]]:
    """(the prose, the (file, old, new) hunks) of a reply in aider's ``udiff`` edit format:
    fenced ``--- path`` / ``+++ path`` diffs whose hunks carry no line numbers."""
    prose: list[str] = []
    blocks: list[tuple[str, str, str]] = []
    i, n = 0, len(lines)
    while i < n:
        if lines[i].startswith("--- ") and i + 1 < n and lines[i + 1].startswith("+++ "):
            file = lines[i + 1][4:].strip().removeprefix("b/")
            end = next((k for k in range(i + 2, n) if lines[k].strip() == "```"
                        or lines[k].startswith("--- ")), n)
            blocks.extend((file, old, new) for old, new in _hunks(["", *lines[i + 2:end]]))
            if prose and prose[-1].lstrip().startswith("```"):
                prose.pop()
            i = end + (end < n and lines[end].strip() == "```")
            continue
        prose.append(lines[i])
        i += 1
    return "\n".join(prose), blocks


class _Chat:
    """The reading state of one session (one pass over its lines)."""

    def __init__(self) -> None:
        self.steps: list[SourceStep] = []
        self.unused: Counter[str] = Counter()
        self.user: list[str] = []
        self.reply: list[str] = []
        self.last_reply: list[SourceStep] = []
        self.cmd: SourceStep | None = None
        self.cmd_lines: list[str] = []
        self.cmd_phase = ""
        self.subject = ""
        self.unknown: str | None = None  # a note not read, unless a question about it follows
        self.error: SourceStep | None = None  # the failed edit whose explanation is quoted
        self.absorb = False  # the quoted output of a command not read (/models, /map ...)
        self.task = ""
        self.final: str | None = None
        self.model = self.version = self.mode = self.edit_format = ""
        self.messages = self.replies = self.commits = 0
        self.cost: float | None = None

    def feed(self, kind: str, text: str) -> None:
        if kind == "user":
            self.error, self.absorb = None, False
            self.end_reply()
            self.end_command()
            self.user.append(text)
            return
        if self.user:
            self.flush_user()
        if self.cmd is not None and self.command_output(kind, text):
            return
        if kind == "quote":
            self.end_reply()
            self.quoted(text)
        else:
            self.error, self.absorb = None, False
            self.reply.append(text)

    def quoted(self, text: str) -> None:
        if self.error is not None and not any(p.match(text) for p in _READ):
            self.error.observation += "\n" + text  # the lines explaining a failed edit
            return
        if self.absorb and not any(p.match(text) for p in _READ):
            return
        self.error, self.absorb = None, False
        if self.unknown is not None and not _QUESTION.search(text):
            self.unused[f"line:{self.unknown.split(' ', 1)[0][:30]}"] += 1
        self.unknown = None
        self.note(text)
        self.subject = text

    def finish(self) -> None:
        if self.unknown is not None:
            self.unused[f"line:{self.unknown.split(' ', 1)[0][:30]}"] += 1
        if self.user:
            self.flush_user()
        self.end_command()
        self.end_reply()

    # ----------------------------------------------------------------- the user

    def flush_user(self) -> None:
        text = "\n".join(self.user).strip()
        self.user = []
        if not text or text == "<blank>":
            return
        if text.startswith("!"):
            self.command("run", text[1:].strip())
            return
        if not text.startswith("/"):
            self.message(text)
            return
        name, _, rest = text.partition(" ")
        rest = rest.strip()
        if name in _SHELL:
            self.command(_SHELL[name], f"git {rest}" if name == "/git" else rest)
        elif name in _CHAT:
            if rest:
                self.message(rest)
        elif name not in _QUIET:
            self.unused[f"command:{name}"] += 1
            self.absorb = True

    def message(self, text: str) -> None:
        self.messages += 1
        self.task = self.task or text

    def command(self, tool: str, line: str) -> None:
        mapped = ("bash", {"command": line}) if line else ("other", {"name": tool})
        self.cmd = SourceStep(tool=tool, args={"command": line}, mapped_as=mapped)
        self.steps.append(self.cmd)
        self.cmd_lines, self.cmd_phase = [], "output"

    def command_output(self, kind: str, text: str) -> bool:
        """Take a line of the running command's output; False when it is not one."""
        if _OUTPUT_ASK.match(text) or _OUTPUT_ADDED.match(text) or text.startswith("(y/n/instructions)"):
            self.cmd_phase = "done"
            return True
        if self.cmd_phase == "done":
            if kind == "quote" and (text in self.cmd_lines or not text.strip()):
                return True  # older versions repeat the output added to the chat
            self.end_command()
            return False
        if self.cmd_phase == "repeat":
            if kind == "raw" and text.strip():
                self.end_command()
                return False
            return True
        if kind == "quote" and self.cmd_lines and text == self.cmd_lines[0]:
            self.cmd_phase = "repeat"  # /test of older versions: added without asking
            return True
        self.cmd_lines.append(text)
        return True

    def end_command(self) -> None:
        if self.cmd is not None:
            self.cmd.observation = "\n".join(self.cmd_lines).strip("\n")
        self.cmd, self.cmd_lines, self.cmd_phase = None, [], ""

    # ----------------------------------------------------------------- aider's notes

    def note(self, text: str) -> None:
        found = _ADDED.match(text)
        if found and not _OUTPUT_ADDED.match(text):
            self.add(found.group(1), "read-only" if found.group(2) else "add", text)
            return
        for pattern, handle in ((_ADDED_RO, self.read_only), (_CONFIRM_ADD, self.confirmed),
                                (_APPLIED, self.applied), (_TOKENS, self.tokens),
                                (_VERSION, self.named), (_MODEL, self.named)):
            found = pattern.match(text)
            if found:
                handle(found, text)
                return
        failed = _NO_MATCH.search(text)
        if failed:
            self.error = self.mark(failed.group(1), text, error=True)
        elif _COMMIT.match(text):
            self.commits += 1
        elif text.strip() and not text.startswith(_NOTES) and not _FAILED.match(text) \
                and not text.split(" ", 1)[0].endswith("aider"):  # the command line aider ran
            self.unknown = text

    def add(self, path: str, tool: str, text: str) -> None:
        args = {"path": path.strip().strip('"')}
        self.steps.append(SourceStep(tool=tool, args=args, observation=text,
                                     mapped_as=(f"aider:{tool}", {**args, "mode": tool})))

    def read_only(self, found: re.Match[str], text: str) -> None:
        self.add(found.group(1), "read-only", text)

    def confirmed(self, found: re.Match[str], text: str) -> None:
        what, answer = found.group(1), found.group(2).lower()
        if what in ("URL", "the output") or not answer.startswith(("y", "a")):
            return
        self.add(self.subject if what == "file" else what, "add", text)

    def applied(self, found: re.Match[str], text: str) -> None:
        self.mark(found.group(1), text, error=False)

    def mark(self, path: str, text: str, error: bool) -> SourceStep | None:
        """Note an edit's outcome on the last reply's edits of ``path``; the last one marked."""
        marked = None
        for s in self.last_reply:
            if s.args.get("path") == path.strip():
                s.observation = "\n".join(t for t in (s.observation, text) if t)
                if error:
                    s.result = {"is_error": True}
                marked = s
        return marked

    def tokens(self, found: re.Match[str], text: str) -> None:
        if self.last_reply:
            step = self.last_reply[0]
            step.tokens_in = _amount(found.group(1), found.group(2))
            step.tokens_out = _amount(found.group(3), found.group(4))
            if found.group(5):
                step.cost_usd = float(found.group(5))
        if found.group(6):
            self.cost = float(found.group(6))

    def named(self, found: re.Match[str], text: str) -> None:
        if text.startswith("Aider v"):
            self.version = found.group(1)
        else:
            self.edit_format = found.group(2) or self.edit_format
            if not self.model:
                self.model, self.mode = found.group(1), found.group(2) or ""

    # ----------------------------------------------------------------- the assistant

    def end_reply(self) -> None:
        lines, self.reply = self.reply, []
        if not any(ln.strip() for ln in lines):
            return
        prose, blocks, broken = edit_blocks(lines)
        tool = "search_replace"
        if not blocks and not broken and self.edit_format == "whole":
            (prose, blocks), tool = whole_files(lines), "whole_file"
        elif not blocks and not broken and self.edit_format.startswith("udiff"):
            (prose, blocks), tool = udiff_files(lines), "udiff"
        steps = [SourceStep(tool=tool, args=a, mapped_as=("aider:edit", a))
                 for a in ({"path": f, "search": s, "replace": r} for f, s, r in blocks)]
        if broken:
            steps.append(SourceStep(tool="search_replace", parse_error=broken))
        if not steps:
            steps = [SourceStep(tool="reply", mapped_as=("think", {}))]
        steps[0].thought = prose.strip()
        steps[0].response = "\n".join(lines).strip()
        self.steps.extend(steps)
        self.last_reply = steps
        self.replies += 1
        self.final = prose.strip() or self.final


def parse(session: Any, name: str = "") -> Trajectory:
    """One session of an aider chat history as a :class:`Trajectory`."""
    if not isinstance(session, Session):
        raise BadInput("unknown shape", "not a session of an aider chat history")
    body = session.text.split("\n", 1)[1] if "\n" in session.text else ""
    chat = _Chat()
    for kind, text in _classify(body.split("\n")):
        chat.feed(kind, text)
    chat.finish()
    if not chat.steps:
        detail = (f"{chat.messages} request(s) without a reply" if chat.messages
                  else "no exchange: aider was started and left")
        raise BadInput(EMPTY_SESSION, detail)
    folder = session.folder
    return Trajectory(
        steps=chat.steps, agent=AGENT, agent_version=chat.version,
        instance=f"{folder.name if folder else 'aider'}@{session.started}",
        model=chat.model, task_prompt=chat.task, final_message=chat.final,
        totals={"replies": chat.replies, "commits": chat.commits or None,
                "cost_usd": chat.cost},
        timing="none", root=str(folder.resolve()) if folder else None,
        mode=chat.mode or "chat", repo=folder.name if folder else None,
        unused=dict(chat.unused), world=_local_world(folder, chat.steps),
    )


_WORLDS: dict[str, Any] = {}


def _local_world(folder: Path | None, steps: list[SourceStep]) -> Any:
    """The repository the history file sits in, when a file the session names is there."""
    if folder is None:
        return None
    named = {str(s.args.get("path")) for s in steps if s.args.get("path")}
    if not any((folder / p).is_file() for p in named if not Path(p).is_absolute()):
        return None
    key = str(folder.resolve())
    if key not in _WORLDS:
        from adakit.apparatus.world import World

        _WORLDS[key] = World(folder)
    return _WORLDS[key]
