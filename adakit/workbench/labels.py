"""Human labels of lens 3's items (paper Appendix C.3): what a person labels, what they see,
and the append-only file their labels go to.

The paper checks its judges against one annotator who "supplied labels under the same
information regime used for the automatic judges". Here any number of labellers can do the
same from the explorer notebook (:mod:`adakit.workbench.labelling` is the widget):

- :func:`label_items` picks the items: the judged items of a corpus when its judgments are at
  hand (so every label meets a verdict), else the items the judges would build
  (:func:`adakit.judging.context.item_id`, the same opaque ids); at most ``per_family`` per family,
  drawn with a fixed seed, so every labeller gets the same items in the same order.
- :func:`label_cards` groups them for display: one card per run conclusion (its conclusion
  families together) and one per judged step, in a seeded shuffled order (the corpus order
  would group runs by model).
- :func:`card_text` is the evidence shown: the task, the conclusion, the code the run read,
  its bookmarks and memories, how it ended, and for a step the step itself with the turns
  before it; blind by default (:func:`adakit.judging.anonymise.anonymiser_for`, the judges' own
  anonymiser, on every text; no run id, model or condition).
- :class:`LabelLog` appends one row per label (``labeller, item_id, family, label, time``) to
  a JSON-lines or CSV file, flushed and synced per row; a repeated identical label (a double
  click) writes nothing, a changed label appends a row and the latest one counts.
- :func:`read_human_labels` reads such a file (or the single-labeller CSV of
  :func:`adakit.judging.agreement.load_human_labels`) into ``labeller, item_id, family, label, score``
  for notebook 13's agreement tables.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from adakit.judging import context
from adakit.judging.anonymise import anonymiser_for
from adakit.judging.families import FAMILIES, LABEL_SCORES, UNCLEAR, get_family
from adakit.record import Corpus, RunFile, read_run
from adakit.text import clip

#: The columns of a label file, in order.
LABEL_COLUMNS: list[str] = ["labeller", "item_id", "family", "label", "time"]
#: The question each family asks, as shown to a labeller.
QUESTIONS: dict[str, str] = {
    "task_relevance": "Does the conclusion address the task?",
    "trace_grounding": "Is the conclusion supported by the code the run actually viewed?",
    "termination_calibration": "Was this a defensible moment to stop?",
    "navigation_prior": "Did evidence from earlier steps, or prior familiarity, steer this move?",
    "reasoning_prior": "Is this note grounded in what the run saw, or shaped by priors?",
}
#: Items per family in the paper's human-alignment check (50 per family, 250 in all).
PAPER_ITEMS_PER_FAMILY = 50
#: What stands where a card's text was cut, within the cap: as the judges' context marks it.
_CARD_CUT = context.CONTEXT_CUT


# --------------------------------------------------------------------------- items


@dataclass(frozen=True)
class LabelItem:
    """One thing to label: the judges' opaque item id and where it comes from."""

    item_id: str
    run_id: str
    family: str
    turn: int | None = None
    tool: str | None = None


@dataclass(frozen=True)
class LabelCard:
    """What a labeller sees at once: a run's conclusion with its conclusion-level items, or
    one step with its turn-level item."""

    run_id: str
    turn: int | None
    items: tuple[LabelItem, ...]

    @property
    def kind(self) -> str:
        return "conclusion" if self.turn is None else "step"


def _sample(items: list[LabelItem], k: int | None, rng: np.random.Generator) -> list[LabelItem]:
    if k is None or len(items) <= k:
        return items
    pick = sorted(rng.choice(len(items), size=k, replace=False))
    return [items[i] for i in pick]


def _items_from_judgments(judgments: pd.DataFrame, runs: set[str],
                          families: Sequence[str]) -> list[LabelItem]:
    cols = [c for c in ("item_id", "run_id", "family", "turn", "tool") if c in judgments]
    j = judgments[judgments["run_id"].isin(runs) & judgments["family"].isin(families)]
    j = j[cols].drop_duplicates("item_id").sort_values(["family", "run_id", "item_id"])
    out = []
    for r in j.itertuples():
        turn = getattr(r, "turn", None)
        turn = None if turn is None or pd.isna(turn) else int(turn)
        tool = getattr(r, "tool", None)
        out.append(LabelItem(str(r.item_id), str(r.run_id), str(r.family), turn,
                             tool if isinstance(tool, str) else None))
    return out


def _items_from_runs(run_files: Iterable[RunFile], families: Sequence[str]) -> list[LabelItem]:
    out = []
    for rf in run_files:
        rid = rf.header.run_id
        for name in families:
            fam = get_family(name)
            if fam.level == "conclusion":
                if rf.end and (rf.end.conclusion or "").strip():
                    out.append(LabelItem(context.item_id(rid, name), rid, name))
                continue
            for t in rf.turns:  # every step the judges judge, failed ones included
                abbr = t.metrics.tool
                if t.call is not None and abbr in fam.tools:
                    out.append(LabelItem(context.item_id(rid, name, t.turn), rid, name, t.turn,
                                         abbr))
    return out


def candidate_items(
    corpus: Corpus,
    judgments: pd.DataFrame | None = None,
    families: Sequence[str] = tuple(FAMILIES),
) -> list[LabelItem]:
    """Every item of ``corpus`` that could be labelled: its judged items (``judgments``) or,
    without them, the items the judges would build."""
    for name in families:
        get_family(name)  # raises on an unknown family
    runs = set(corpus.runs["run_id"])
    if judgments is not None and not judgments.empty:
        return _items_from_judgments(judgments, runs, families)
    paths = corpus.runs.set_index("run_id")["path"]
    return _items_from_runs((read_run(paths[r]) for r in sorted(runs)), families)


def _conclusion_families(families: Sequence[str]) -> list[str]:
    return [f for f in families if get_family(f).level == "conclusion"]


def draw_items(candidates: Sequence[LabelItem], families: Sequence[str],
               per_family: int | None = PAPER_ITEMS_PER_FAMILY,
               seed: int = 0) -> list[LabelItem]:
    """At most ``per_family`` of the candidates per family (None: all), drawn with ``seed``;
    conclusion families are drawn by run, so a drawn run is labelled on each of them."""
    rng = np.random.default_rng(seed)
    conclusion = _conclusion_families(families)
    concluded = sorted({i.run_id for i in candidates if i.family in conclusion})
    if per_family is not None and len(concluded) > per_family:
        keep = set(np.asarray(concluded)[sorted(rng.choice(len(concluded), per_family,
                                                           replace=False))])
    else:
        keep = set(concluded)
    out = [i for i in candidates if i.family in conclusion and i.run_id in keep]
    for name in families:
        if name not in conclusion:
            out += _sample([i for i in candidates if i.family == name], per_family, rng)
    return out


def label_items(
    corpus: Corpus,
    judgments: pd.DataFrame | None = None,
    families: Sequence[str] = tuple(FAMILIES),
    per_family: int | None = PAPER_ITEMS_PER_FAMILY,
    seed: int = 0,
) -> list[LabelItem]:
    """The items to label in ``corpus``: its judged items (``judgments``) or, without them,
    the items the judges would build (:func:`candidate_items`); at most ``per_family`` per
    family (None: all), drawn with ``seed`` (:func:`draw_items`)."""
    return draw_items(candidate_items(corpus, judgments, families), families, per_family, seed)


def label_cards(items: Sequence[LabelItem], seed: int = 0, shuffle: bool = True,
                lead: Collection[str] = ()) -> list[LabelCard]:
    """The items grouped into cards (a run's conclusion families together; one card per
    step), shuffled with ``seed`` (the same order for every labeller). When ``lead`` names
    runs (e.g. a real model's, not a scripted baseline's), the first card of one of them
    opens the deck, a conclusion card if there is one."""
    by_key: dict[tuple[str, int, str], list[LabelItem]] = {}
    for item in items:
        step = get_family(item.family).level == "turn" and item.turn is not None
        key = (item.run_id, item.turn if step else -1, item.family if step else "")
        by_key.setdefault(key, []).append(item)
    order = list(FAMILIES)
    cards = [LabelCard(key[0], None if key[1] < 0 else key[1],
                       tuple(sorted(group, key=lambda i: order.index(i.family))))
             for key, group in sorted(by_key.items())]
    if shuffle:
        rng = np.random.default_rng(seed)
        cards = [cards[i] for i in rng.permutation(len(cards))]
    leads = [k for k, c in enumerate(cards) if c.run_id in lead]
    if leads:
        first = next((k for k in leads if cards[k].kind == "conclusion"), leads[0])
        cards.insert(0, cards.pop(first))
    return cards


@dataclass(frozen=True)
class LabelPlan:
    """The items and cards a labelling session shows, and why there are that many."""

    items: list[LabelItem]
    cards: list[LabelCard]
    #: one line per card kind saying how many cards and why (:func:`plan_note`)
    note: str


def plan_labels(corpus: Corpus, judgments: pd.DataFrame | None = None,
                families: Sequence[str] = tuple(FAMILIES),
                per_family: int | None = PAPER_ITEMS_PER_FAMILY, seed: int = 0) -> LabelPlan:
    """The labelling session of ``corpus``: items (:func:`label_items`), cards opening on a
    real model's run when the corpus has one (:func:`label_cards`), and the note saying how
    many cards each family has and why (:func:`plan_note`)."""
    candidates = candidate_items(corpus, judgments, families)
    items = draw_items(candidates, families, per_family, seed)
    kinds = corpus.runs.get("model_kind", pd.Series("", index=corpus.runs.index))
    real = set(corpus.runs.loc[kinds != "baseline", "run_id"])
    cards = label_cards(items, seed, lead=real)
    judged = judgments is not None and not judgments.empty
    return LabelPlan(items, cards, plan_note(candidates, items, len(cards), families, per_family,
                                               judged))


def plan_note(candidates: Sequence[LabelItem], items: Sequence[LabelItem], n_cards: int,
              families: Sequence[str], per_family: int | None, judged: bool = True) -> str:
    """How many cards each family has and why: a conclusion card per drawn concluded run
    (labelled on every conclusion family), a step card per drawn step; all of them when the
    corpus has no more than ``per_family``, else that many drawn at random."""
    def why(drawn: int, there: int, unit: str) -> str:
        if per_family is None or there <= per_family:
            cap = "" if per_family is None else f", fewer than the {per_family} asked for"
            return f"all {there} {unit}{cap}"
        return f"{drawn} drawn at random from {there} {unit}"

    source = "judged items" if judged else "items the judges would build"
    lines = []
    conclusion = _conclusion_families(families)
    if conclusion:
        runs = len({i.run_id for i in items if i.family in conclusion})
        there = len({i.run_id for i in candidates if i.family in conclusion})
        titles = ", ".join(get_family(f).title for f in conclusion)
        unit = "judged concluded runs" if judged else "concluded runs in the corpus"
        lines.append(f"{runs} conclusion card(s), one per concluded run, each labelled on "
                     f"{titles}: {why(runs, there, unit)}")
    for name in families:
        if name in conclusion:
            continue
        drawn = sum(i.family == name for i in items)
        there = sum(i.family == name for i in candidates)
        lines.append(f"{drawn} step card(s) for {get_family(name).title}: "
                     f"{why(drawn, there, 'steps the judges judged' if judged else 'steps in the corpus')}")
    cap = "every item" if per_family is None else f"at most {per_family} per family"
    head = f"{n_cards} cards from {len(items)} {source} ({cap}):"
    return "\n".join([head, *lines])


# --------------------------------------------------------------------------- evidence


def card_sections(card: LabelCard, rf: RunFile, blind: bool = True,
                  caps: context.ContextCaps | None = None) -> dict[str, str]:
    """The evidence of a card as named text sections (empty ones left out): ``about`` (what is
    labelled; run, model and condition only when not ``blind``), ``task``, ``conclusion``,
    ``code read``, ``bookmarks``, ``memories``, ``how it ended``, and for a step ``before``
    and ``step``. Blind, every text passes the judges' anonymiser."""
    from adakit.workbench.explorer import state_at

    caps = caps or context.ContextCaps()
    anon = anonymiser_for(rf) if blind else (lambda text, redact=True: text or "")
    h = rf.header
    out: dict[str, str] = {}
    about = f"the conclusion of a run on {h.world.name}" if card.turn is None else \
        f"step {card.turn} of a run on {h.world.name} ({card.items[0].tool or '?'})"
    if not blind:
        about += f" · run {h.run_id} · model {h.model.name} ({h.model.kind}) · condition " \
                 f"{h.condition.name}"
    out["about"] = about
    out["task"] = clip(anon(h.task.prompt), caps.task, marker=_CARD_CUT)
    if card.turn is None:
        title = (rf.end.conclusion_title if rf.end else None) or ""
        body = (rf.end.conclusion if rf.end else None) or "(no conclusion)"
        out["conclusion"] = clip(anon(f"{title}\n{body}" if title else body), caps.conclusion,
                                 marker=_CARD_CUT)
    last = rf.turns[-1].turn if rf.turns else 0
    upto = last if card.turn is None else card.turn
    out["code read"] = context.snippet_summary(_upto(rf, upto), anon, caps)
    state = state_at(rf, upto)
    if state.bookmarks:
        out["bookmarks"] = "\n".join(anon(f"{b.file}:{b.line} {b.note}".strip())
                                     for b in state.bookmarks)
    if state.memories:
        out["memories"] = "\n".join(
            anon(f"{m.title}: {m.content}" + (f" (confidence {m.confidence})"
                                              if m.confidence else ""))
            for m in state.memories)
    if card.turn is None:
        out["how it ended"] = context.trajectory_summary(rf, anon, caps)
        return out
    # a step: the step itself first, then the steps before it, then the state so far
    step = next(t for t in rf.turns if t.turn == card.turn)
    first = {"about": out.pop("about"), "task": out.pop("task"),
             "step": context.turn_detail(step, anon, caps)}
    before = [t for t in rf.turns if t.turn < card.turn]
    if before:
        first["before"] = context.clip_lines(
            [context.turn_line(t, anon, caps.prefix_line) for t in before],
            caps.prefix_summary, keep="tail")
    return {**first, **out}


def _upto(rf: RunFile, turn: int) -> RunFile:
    return RunFile(path=rf.path, header=rf.header, end=rf.end,
                   turns=[t for t in rf.turns if t.turn <= turn])


def card_text(card: LabelCard, rf: RunFile, blind: bool = True) -> str:
    """:func:`card_sections` as plain text, with each family's question and labels."""
    parts = [f"{k.upper()}\n{v}" for k, v in card_sections(card, rf, blind).items()]
    for item in card.items:
        fam = get_family(item.family)
        parts.append(f"{fam.title.upper()}: {QUESTIONS[item.family]}\n"
                     + " / ".join(fam.allowed))
    return "\n\n".join(parts)


# --------------------------------------------------------------------------- the label file


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class LabelLog:
    """An append-only file of labels, one row per label (JSON lines for ``.jsonl``, CSV for
    ``.csv``): each row is written whole, flushed and synced before :meth:`add` returns, so a
    crash loses at most the label being written; a torn last line is skipped on reading."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        suffix = self.path.suffix.lower()
        if suffix not in (".jsonl", ".csv"):
            raise ValueError(f"{self.path}: labels go to a .jsonl or .csv file")
        self.format = suffix[1:]

    def rows(self) -> pd.DataFrame:
        """Every row written so far (torn or malformed lines left out)."""
        rows, _ = _read_rows(self.path)
        return rows

    def latest(self, labeller: str | None = None) -> dict[tuple[str, str], str]:
        """The latest label per (item_id, family) of one labeller (or of anyone)."""
        rows = self.rows()
        if labeller is not None:
            rows = rows[rows["labeller"] == labeller]
        return {(r.item_id, r.family): r.label for r in rows.itertuples()}

    def add(self, labeller: str, item_id: str, family: str, label: str,
            time: str | None = None) -> bool:
        """Append one label; False (nothing written) when it repeats this labeller's latest
        label of the item. Raises ValueError for an empty labeller or item, an unknown family
        or a label outside the family's vocabulary (the judges' labels or "unclear")."""
        labeller = labeller.strip()
        if not labeller:
            raise ValueError("give a labeller id (e.g. your initials) before labelling")
        if not item_id:
            raise ValueError("empty item id")
        fam = get_family(family)
        if label not in fam.allowed:
            raise ValueError(f"{label!r} is not a {family} label; one of {list(fam.allowed)}")
        if self.latest(labeller).get((item_id, family)) == label:
            return False
        row = {"labeller": labeller, "item_id": item_id, "family": family, "label": label,
               "time": time or _now()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        with self.path.open("a", encoding="utf-8", newline="") as f:
            if not fresh and not _ends_with_newline(self.path):
                f.write("\n")  # a torn last line stays apart (and is skipped on reading)
            f.write(_format_row(row, self.format, header=fresh))
            f.flush()
            os.fsync(f.fileno())
        return True


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def _format_row(row: dict[str, str], fmt: str, header: bool) -> str:
    if fmt == "jsonl":
        return json.dumps(row, ensure_ascii=False) + "\n"
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    if header:
        writer.writerow(LABEL_COLUMNS)
    writer.writerow([row[c] for c in LABEL_COLUMNS])
    return buf.getvalue()


def _read_rows(path: Path) -> tuple[pd.DataFrame, int]:
    """(rows, skipped lines) of a label file; no file gives no rows."""
    empty = pd.DataFrame(columns=LABEL_COLUMNS)
    if not path.exists():
        return empty, 0
    text = path.read_text(encoding="utf-8")
    rows, skipped = [], 0
    if path.suffix.lower() == ".jsonl":
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                skipped += 1
                continue
            if not isinstance(rec, dict) or not all(isinstance(rec.get(c), str)
                                                    for c in LABEL_COLUMNS):
                skipped += 1
                continue
            rows.append({c: rec[c] for c in LABEL_COLUMNS})
    else:
        reader = csv.reader(io.StringIO(text))
        head = next(reader, None)
        if head is None:
            return empty, 0
        cols = [h.strip().lower() for h in head]
        for rec in reader:
            if not rec:
                continue
            if len(rec) != len(cols) or any(not v for v in rec):
                skipped += 1
                continue
            rows.append(dict(zip(cols, rec, strict=True)))
    frame = pd.DataFrame(rows, columns=LABEL_COLUMNS) if rows else empty
    return frame.reset_index(drop=True), skipped


def read_human_labels(path: str | Path, judgments: pd.DataFrame | None = None) -> pd.DataFrame:
    """Human labels for the agreement tables: ``labeller, item_id, family, label, score``,
    the latest label per labeller, item and family ("unclear" kept, unscored).

    Reads a label file written by :class:`LabelLog` (``.jsonl``, or ``.csv`` with a
    ``labeller`` column), or a single-labeller CSV in :func:`adakit.judging.agreement.load_human_labels`'
    format (its labeller is called ``human``; ``judgments`` checks its items there). Raises
    FileNotFoundError for a missing file and ValueError for labels outside a family's
    vocabulary.
    """
    from adakit.judging.agreement import load_human_labels

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no human labels at {path}")
    if path.suffix.lower() == ".csv":
        with path.open(encoding="utf-8") as f:
            head = [h.strip().lower() for h in next(csv.reader(f), [])]
        if "labeller" not in head:
            single = load_human_labels(path, judgments)
            return single.assign(labeller="human")[["labeller", "item_id", "family", "label",
                                                     "score"]]
    rows, skipped = _read_rows(path)
    if skipped:
        print(f"note: {skipped} torn or malformed line(s) in {path} left out")
    rows = rows.drop_duplicates(["labeller", "item_id", "family"], keep="last")
    bad = [f"{r.family} {r.label!r}" for r in rows.itertuples()
           if r.family not in LABEL_SCORES or (r.label != UNCLEAR
                                               and r.label not in LABEL_SCORES[r.family])]
    if bad:
        raise ValueError(f"{path}: labels outside the families' vocabularies: {bad[:5]}")
    score = [np.nan if r.label == UNCLEAR else LABEL_SCORES[r.family][r.label]
             for r in rows.itertuples()]
    out = rows.assign(score=np.asarray(score, dtype=float))
    return out[["labeller", "item_id", "family", "label", "score"]].reset_index(drop=True)


__all__ = [
    "LABEL_COLUMNS", "LabelCard", "LabelItem", "LabelLog", "LabelPlan",
    "PAPER_ITEMS_PER_FAMILY", "QUESTIONS", "candidate_items", "card_sections", "card_text",
    "draw_items", "label_cards", "label_items", "plan_labels", "plan_note",
    "read_human_labels",
]
