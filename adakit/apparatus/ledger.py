"""The ledger: a compact list of what a run has done so far, shown with the working state.

A scaffold aid for small models (``RunConfig.ledger``, off by default and in the paper
profile; docs/deviations.md): they lose track of what they already read once older turns
scroll out of view, and read it again. The ledger lists, in order of first appearance, the
files outlined, the line ranges read (one entry per file, its ranges merged where they touch
or overlap), the symbols looked up, and the memories and bookmarks made. Only calls that
succeeded count. It stays within a character cap by leaving out its oldest entries, with a
note saying how many.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from adakit.record import Turn, merge_ranges

#: The ledger's default cap in characters (the whole rendered channel).
LEDGER_CHARS = 600
#: The smallest cap that leaves room for the heading, the note and one entry.
LEDGER_MIN_CHARS = 120
HEADING = "LEDGER (what you have done so far, oldest first):"
EMPTY = "LEDGER: Nothing has been done yet."


@dataclass
class _Entry:
    """One thing done: a kind, what it was done on, and (for reads) the ranges."""

    kind: str
    subject: str
    ranges: list[tuple[int, int]] = field(default_factory=list)

    def text(self) -> str:
        if self.kind == "read":
            spans = ",".join(f"{a}-{b}" for a, b in self.ranges)
            return f"read {self.subject}:{spans}"
        return f"{self.kind} {self.subject}"


@dataclass
class Ledger:
    """What a run has done so far, rendered as the LEDGER channel within ``cap`` characters."""

    cap: int = LEDGER_CHARS
    entries: dict[tuple[str, str], _Entry] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.cap < LEDGER_MIN_CHARS:
            raise ValueError(f"ledger_chars must be at least {LEDGER_MIN_CHARS}, got {self.cap}")

    def _note(self, kind: str, subject: str) -> _Entry:
        return self.entries.setdefault((kind, subject), _Entry(kind, subject))

    def add(self, turn: Turn) -> None:
        """Note what ``turn`` did, if its call succeeded."""
        m = turn.metrics
        if turn.call is None or m.error_type is not None:
            return
        if m.tool == "OVW" and m.file and not m.ranges:
            self._note("outline", m.file)
        if m.tool == "EXP" and m.symbol:
            self._note("lookup", f"{m.symbol} ({m.action})" if m.action else m.symbol)
        if m.tool in ("OVW", "PKR", "EXP") and m.file and m.ranges:
            entry = self._note("read", m.file)
            entry.ranges = merge_ranges([*entry.ranges, *m.ranges])
        for change in turn.state_changes:
            if change.get("channel") == "memory":
                self._note("memory", repr(str(change.get("title", ""))))
            elif change.get("channel") == "bookmark":
                self._note("bookmark", f"{change.get('file')}:{change.get('line')}")

    def render(self) -> str:
        """The LEDGER channel: the entries oldest first, the oldest left out (with a
        ``+N earlier`` note) until it fits the cap."""
        if not self.entries:
            return EMPTY
        lines = [f"  {e.text()}" for e in self.entries.values()]
        dropped = 0
        while True:
            note = [f"  (+{dropped} earlier)"] if dropped else []
            text = "\n".join([HEADING, *note, *lines[dropped:]])
            if len(text) <= self.cap or dropped == len(lines) - 1:
                break
            dropped += 1
        if len(text) > self.cap:  # the newest entry alone is too long: cut it
            text = text[: self.cap - 1] + "…"
        return text
