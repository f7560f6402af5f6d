"""The labelling mode of the explorer notebook: people label lens 3's items as the judges do
(paper Appendix C.3), and notebook 13 compares their labels with the judges'.

:class:`LabellingWidgets` shows one card at a time (:func:`adakit.workbench.labels.label_cards`: a run's
conclusion with its evidence, or one step), blind to model and condition by default, with one
row of buttons per family in the judges' own vocabulary plus "unclear". A click appends one row
to the label file (:class:`adakit.workbench.labels.LabelLog`) at once; clicking the label already chosen
writes nothing. Several labellers share one file: each types an id, and sees (and can change)
only their own labels. :func:`label` opens it, or, without a live widget front end, prints the
first card instead (papermill, nbval, ``ADAKIT_EXPLORER=static``).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from adakit.judging.families import FAMILIES, get_family
from adakit.record import Corpus, RunFile, read_run
from adakit.workbench.explorer import PRE_STYLE, WRAP, use_widgets
from adakit.workbench.labels import (
    PAPER_ITEMS_PER_FAMILY,
    QUESTIONS,
    LabelCard,
    LabelLog,
    card_sections,
    card_text,
    plan_labels,
)

_TITLE_STYLE = "margin-top:8px;font-size:11px;color:#555"


def card_html(card: LabelCard, rf: RunFile, blind: bool = True) -> str:
    """A card's evidence (:func:`adakit.workbench.labels.card_sections`) as an HTML fragment."""
    blocks = []
    for key, body in card_sections(card, rf, blind).items():
        if key == "about":
            blocks.append(f"<div style='font-weight:bold;{WRAP}'>Label {html.escape(body)}</div>")
            continue
        blocks.append(f"<div style='{_TITLE_STYLE}'>{html.escape(key.upper())}</div>"
                      f"<pre style='{PRE_STYLE}'>{html.escape(body)}</pre>")
    return "<div>" + "".join(blocks) + "</div>"


class LabellingWidgets:
    """Label cards one by one; every click is saved to ``log`` as it happens. ``ui`` is the
    top-level widget."""

    def __init__(self, corpus: Corpus, cards: Sequence[LabelCard], log: LabelLog,
                 labeller: str = "", blind: bool = True, note: str = "") -> None:
        import ipywidgets as w

        if not cards:
            raise ValueError("nothing to label: the corpus has no concluded run or judged step")
        self.corpus = corpus
        self.cards = list(cards)
        self.log = log
        self.index = 0
        self._busy = False
        self._runs: dict[str, RunFile] = {}
        self._paths = corpus.runs.set_index("run_id")["path"]
        label = {"description_width": "64px"}
        self.labeller = w.Text(value=labeller, description="labeller", style=label,
                               placeholder="your id, e.g. initials",
                               layout=w.Layout(width="250px"))
        self.blind = w.Checkbox(value=blind, description="blind to model and condition",
                                indent=False, layout=w.Layout(width="230px"))
        self.prev_button = w.Button(description="◀ previous", layout=w.Layout(width="96px"))
        self.next_button = w.Button(description="next ▶", layout=w.Layout(width="96px"))
        self.next_open = w.Button(description="next unlabelled ▶",
                                  layout=w.Layout(width="150px"))
        self.position = w.HTML()
        #: how many cards each family has and why (:func:`adakit.workbench.labels.plan_note`)
        self.plan = w.HTML(f"<div style='{WRAP}font-size:12px;line-height:1.4;color:#555'>"
                           f"{html.escape(note)}</div>" if note else "")
        # no width of 100%: widgets carry a 2 px margin and would stick out of the output
        self.evidence = w.HTML()
        self.rows = w.VBox()
        self.status = w.HTML()
        self.buttons: dict[str, Any] = {}
        wrap = {"flex_flow": "row wrap", "align_items": "center", "width": "100%"}
        self.ui = w.VBox([
            w.HBox([self.labeller, self.blind], layout=w.Layout(**wrap)),
            w.HBox([self.prev_button, self.next_button, self.next_open, self.position],
                   layout=w.Layout(**wrap)),
            self.plan, self.rows, self.status, self.evidence,
        ], layout=w.Layout(width="100%"))
        self.ui.add_class("adakit-labelling")
        self.prev_button.on_click(lambda _: self.go(self.index - 1))
        self.next_button.on_click(lambda _: self.go(self.index + 1))
        self.next_open.on_click(lambda _: self.go_unlabelled())
        self.labeller.observe(lambda _: self.show(), names="value")
        self.blind.observe(lambda _: self.show(), names="value")
        self.show()

    # ------------------------------------------------------------------ cards

    @property
    def card(self) -> LabelCard:
        """The card shown now."""
        return self.cards[self.index]

    def _run(self, run_id: str) -> RunFile:
        if run_id not in self._runs:
            self._runs[run_id] = read_run(self._paths[run_id])
        return self._runs[run_id]

    def _mine(self) -> dict[tuple[str, str], str]:
        who = self.labeller.value.strip()
        return self.log.latest(who) if who else {}

    def _done(self, card: LabelCard, mine: dict[tuple[str, str], str]) -> bool:
        return all((i.item_id, i.family) in mine for i in card.items)

    def go(self, index: int) -> None:
        """Show card ``index`` (clamped); the last save's message stays with its card."""
        index = min(max(int(index), 0), len(self.cards) - 1)
        if index != self.index:
            self.status.value = ""
        self.index = index
        self.show()

    def go_unlabelled(self) -> None:
        """Show the next card (after the current one, wrapping) this labeller has not
        labelled completely."""
        mine = self._mine()
        n = len(self.cards)
        for step in range(1, n + 1):
            k = (self.index + step) % n
            if not self._done(self.cards[k], mine):
                self.go(k)
                return
        self.status.value = "<span style='color:#1B7837'>every card is labelled</span>"

    def show(self) -> None:
        """Redraw the card, its label rows (this labeller's labels selected) and the counts."""
        import ipywidgets as w

        card = self.card
        mine = self._mine()
        self.evidence.value = card_html(card, self._run(card.run_id), self.blind.value)
        self._busy = True
        try:
            for old in self.rows.children:
                old.close()
            rows, self.buttons = [], {}
            for item in card.items:
                fam = get_family(item.family)
                buttons = w.ToggleButtons(options=list(fam.allowed),
                                          value=mine.get((item.item_id, item.family)),
                                          style={"button_width": "auto"},
                                          layout=w.Layout(width="auto"))
                buttons.add_class(f"adakit-label-{item.family}")
                buttons.add_class(f"adakit-card-{self.index + 1}")  # which card drew it
                buttons.observe(lambda change, it=item: self._on_label(it, change),
                                names="value")
                self.buttons[item.family] = buttons
                rows.append(w.HTML(f"<div style='margin-top:6px;{WRAP}'><b>{fam.title}</b>: "
                                   f"{html.escape(QUESTIONS[item.family])}</div>"))
                rows.append(buttons)
            self.rows.children = rows
        finally:
            self._busy = False
        self.count(mine)  # last, so a new header means the card's rows were sent before it

    def counts(self, mine: dict[tuple[str, str], str] | None = None) -> tuple[int, int]:
        """(labels given, cards complete) by this labeller over the whole deck."""
        mine = self._mine() if mine is None else mine
        given = sum((i.item_id, i.family) in mine for c in self.cards for i in c.items)
        return given, sum(self._done(c, mine) for c in self.cards)

    def count(self, mine: dict[tuple[str, str], str] | None = None) -> None:
        """Redraw the header line: the card shown and this labeller's counts (``mine``: their
        labels, when already read)."""
        given, done = self.counts(mine)
        items = sum(len(c.items) for c in self.cards)
        who = html.escape(self.labeller.value.strip() or "(nobody yet)")
        self.position.value = (f"<span style='{WRAP}'>card {self.index + 1} of "
                               f"{len(self.cards)} · {given} of {items} labels by {who} · "
                               f"{done} of {len(self.cards)} cards complete</span>")

    # ------------------------------------------------------------------ labels

    def _on_label(self, item: Any, change: dict[str, Any]) -> None:
        if self._busy or change["new"] is None:
            return
        self.save(item.item_id, item.family, change["new"])

    def save(self, item_id: str, family: str, label: str) -> bool:
        """Append one label of the current labeller (see :meth:`LabelLog.add`) and report it;
        without a labeller id nothing is saved and the choice is undone."""
        who = self.labeller.value.strip()
        try:
            written = self.log.add(who, item_id, family, label)
        except ValueError as exc:
            self.status.value = f"<span style='color:#B2182B'>{html.escape(str(exc))}; " \
                                "nothing saved</span>"
            if family in self.buttons:
                self._busy = True
                self.buttons[family].value = self._mine().get((item_id, family))
                self._busy = False
            return False
        n = int((self.log.rows()["labeller"] == who).sum())
        what = "saved" if written else "already saved"
        rows = "1 row" if n == 1 else f"{n} rows"
        self.status.value = (f"<span style='color:#1B7837;{WRAP}'>{what}: {html.escape(family)}"
                             f" = {html.escape(label)} · {rows} by {html.escape(who)} in "
                             f"{html.escape(str(self.log.path))}</span>")
        self.count()
        return written

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.ui)


@dataclass
class LabelPreview:
    """The labelling mode without widgets: how many items, where labels would go, and the
    first card as text (it prints itself in a notebook)."""

    text: str

    def _ipython_display_(self) -> None:
        print(self.text)


def label(corpus: Corpus, labels_file: str | Path, judgments: pd.DataFrame | None = None,
          labeller: str = "", families: Sequence[str] = tuple(FAMILIES),
          per_family: int | None = PAPER_ITEMS_PER_FAMILY, blind: bool = True, seed: int = 0,
          interactive: bool | None = None) -> LabellingWidgets | LabelPreview:
    """Open the labelling mode on ``corpus`` (items and cards from
    :func:`adakit.workbench.labels.plan_labels`, the same for every labeller with the same
    ``seed``, the first from a real model's run when there is one), saving to
    ``labels_file``. Without a live widget front end (see
    :func:`adakit.workbench.explorer.use_widgets`) it shows the first card as text instead."""
    plan = plan_labels(corpus, judgments, families, per_family, seed)
    cards = plan.cards
    log = LabelLog(labels_file)
    if use_widgets(interactive) and cards:
        return LabellingWidgets(corpus, cards, log, labeller, blind, plan.note)
    if not cards:
        return LabelPreview("nothing to label: the corpus has no concluded run or judged step")
    rf = read_run(corpus.runs.set_index("run_id").loc[cards[0].run_id, "path"])
    return LabelPreview(
        f"{len(plan.items)} items on {len(cards)} cards to label; labels go to {log.path} "
        f"({len(log.rows())} rows there now). Labelling needs JupyterLab with widgets.\n"
        f"{plan.note}\n\nHere is the first card:\n\n" + card_text(cards[0], rf, blind))


__all__ = ["LabelPreview", "LabellingWidgets", "card_html", "label"]
