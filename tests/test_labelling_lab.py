"""The labelling mode end to end, as a class would use it: JupyterLab in headless Chromium at
1280x720, three items labelled by clicking (plus a double click that must not count twice),
the page reloaded and the notebook run again (the labels come back from the file), the file
holding exactly three rows, and notebook 13 reading them into its agreement tables."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cdp import find_chromium, start_chromium
from lab import (
    assert_fits,
    layout,
    open_and_run,
    save_notebook,
    screenshot,
    set_viewport,
    start_lab,
    write_notebook,
)

from adakit import config
from adakit.judging import agreement as ag
from adakit.judging import context, families
from adakit.record import load_corpus
from adakit.synthetic import write_synthetic_corpus
from adakit.workbench import labels

PER_FAMILY = 3

# the label groups of the card shown, each as [family class, labels, active label]
GROUPS = """(() => {
  const ui = document.querySelector('.adakit-labelling');
  if (!ui) return null;
  const groups = [...ui.querySelectorAll('.widget-toggle-buttons')];
  const position = (ui.textContent.match(
    /card \\d+ of \\d+ · \\d+ of \\d+ labels by \\S+ · \\d+ of \\d+ cards complete/) || [''])[0];
  const status = [...ui.querySelectorAll('.widget-html-content')].map((h) => h.textContent)
    .find((t) => /saved: /.test(t)) || '';
  // the card each label group was drawn for (closed groups may linger a moment)
  const drawn = groups.map((g) => ([...g.classList].find((c) => c.startsWith('adakit-card-'))
                                    || '').replace('adakit-card-', ''));
  return {position, status, text: ui.textContent, run: window.__runAll, drawn,
          groups: groups.map((g) => [
            [...g.classList].find((c) => c.startsWith('adakit-label-')) || '',
            [...g.querySelectorAll('button')].map((b) => b.textContent.trim()),
            ([...g.querySelectorAll('button.mod-active')][0] || {textContent: ''})
              .textContent.trim()])};
})()"""

# click button ``k`` of label group ``g`` (``double``: a double click, as a hurried person)
CLICK_LABEL = """((g, k, double) => {
  const ui = document.querySelector('.adakit-labelling');
  const group = [...ui.querySelectorAll('.widget-toggle-buttons')][g];
  const button = [...group.querySelectorAll('button')][k];
  button.click();
  if (double) {
    button.click();
    button.dispatchEvent(new MouseEvent('dblclick', {bubbles: true}));
  }
  return button.textContent.trim();
})(%s, %s, %s)"""

NEXT_CARD = """(() => {
  const ui = document.querySelector('.adakit-labelling');
  const button = [...ui.querySelectorAll('button')].find((b) => b.textContent.trim() === 'next ▶');
  button.click();
  return true;
})()"""


def _drawn_for_shown(state: dict) -> bool:
    """Whether every label group on the page was drawn for the card the header shows (after
    "next", the old card's groups can stay in the page for a moment; a click on one is lost)."""
    shown = state["position"].removeprefix("card ").split(" ", 1)[0]
    return bool(state["drawn"]) and set(state["drawn"]) == {shown}


def _judged(corpus: Path) -> pd.DataFrame:
    """Seeded verdicts on the judges' own item ids (three judges on conclusions)."""
    c = load_corpus(corpus, cache=False)
    table = ag.synthetic_judgments(c.runs, c.turns, seed=4)
    table["item_id"] = [context.item_id(r, f, None if np.isnan(t) else int(t))
                        for r, f, t in zip(table["run_id"], table["family"], table["turn"],
                                           strict=True)]
    return table


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_label_three_items_reload_and_notebook_13_reads_them(tmp_path: Path, monkeypatch):
    chromium = find_chromium()
    assert chromium, "headless Chromium is needed (make test installs Debian's chromium)"
    pm = pytest.importorskip("papermill")
    corpus = tmp_path / "runs" / "class"
    write_synthetic_corpus(corpus, 16, seed=2, progress=False)
    judgments = tmp_path / "judgments.parquet"
    _judged(corpus).to_parquet(judgments)
    label_file = tmp_path / "labels" / "class.jsonl"
    root = tmp_path / "root"
    root.mkdir()
    write_notebook(root / "label.ipynb", [
        "import pandas as pd\n"
        "from adakit.workbench.labelling import label\n"
        "from adakit.record import load_corpus\n"
        f"ui = label(load_corpus({str(corpus)!r}), {str(label_file)!r},\n"
        f"           pd.read_parquet({str(judgments)!r}), labeller='ana',\n"
        f"           per_family={PER_FAMILY}, interactive=True)\n"
        "ui"])
    log = labels.LabelLog(label_file)
    plan = labels.plan_labels(load_corpus(corpus, cache=False), pd.read_parquet(judgments),
                              per_family=PER_FAMILY)
    n_items = sum(len(c.items) for c in plan.cards)
    clicked: list[tuple[str, str]] = []  # (family, label) in click order
    with start_lab(tmp_path, root) as lab, \
            start_chromium(chromium, tmp_path / "chromium", tmp_path / "chromium.log") as page:
        try:
            set_viewport(page, 1280, 720)
            open_and_run(page, lab, "label.ipynb")
            state = page.wait_for(GROUPS, 60, "the labelling widget",
                                  until=lambda s: bool(s) and s["run"] == "done"
                                  and _drawn_for_shown(s))
            assert state["position"].startswith("card 1 of ")
            assert f"0 of {n_items} labels by ana" in state["position"]
            assert plan.note.splitlines()[0] in state["text"]  # how many cards, and why
            assert_fits(layout(page, "adakit-labelling"), "labelling widget")
            assert screenshot(page, tmp_path / "labelling.png") == (1280, 720)
            while len(clicked) < 3:
                state = page.evaluate(GROUPS)
                for g, (cls, options, _) in enumerate(state["groups"]):
                    family = cls.removeprefix("adakit-label-")
                    assert options == list(families.get_family(family).allowed)
                    last = len(clicked) == 2
                    text = page.evaluate(CLICK_LABEL % (g, 1, json.dumps(last)))
                    clicked.append((family, text))
                    n = len(clicked)
                    page.wait_for(GROUPS, 60, f"label {n} to be saved",
                                  until=lambda s, n=n: len(log.rows()) >= n)
                    # the header counts the label as soon as it is saved
                    state = page.wait_for(
                        GROUPS, 20, f"the header to count label {n}",
                        until=lambda s, n=n: f"· {n} of {n_items} labels by ana" in s["position"])
                    assert "saved: " in state["status"]
                    if len(clicked) == 3:
                        break
                else:
                    before = state["position"]
                    page.evaluate(NEXT_CARD)
                    state = page.wait_for(GROUPS, 20, "the next card and its label rows",
                                          until=lambda s, b=before: bool(s)
                                          and s["position"] != b and _drawn_for_shown(s))
                    assert state["status"] == ""  # the last card's "saved" stays with it
            time.sleep(2.0)  # anything a double click would have written has arrived by now
            rows = log.rows()
            assert len(rows) == 3, rows
            assert [tuple(r) for r in rows[["family", "label"]].values] == clicked
            assert set(rows["labeller"]) == {"ana"} and rows["item_id"].nunique() == 3

            # reload the page and run the notebook again: the labels come back from the file
            save_notebook(page)
            open_and_run(page, lab, "label.ipynb")
            cards = plan.cards
            mine = log.latest("ana")
            done = sum(all((i.item_id, i.family) in mine for i in c.items) for c in cards)
            expect = [mine.get((i.item_id, i.family), "") for i in cards[0].items]
            state = page.wait_for(
                GROUPS, 60, "the labelling widget again, with ana's labels",
                until=lambda s: bool(s) and s["run"] == "done"
                and s["position"].startswith("card 1 of ")
                and [a for _, _, a in s["groups"]] == expect)
            assert state["position"].endswith(f"{done} of {len(cards)} cards complete")
            assert f"· {len(mine)} of {n_items} labels by ana" in state["position"]
            assert len(log.rows()) == 3  # reloading wrote nothing
        except BaseException:
            print("--- console errors:", *page.errors, sep="\n")
            print("--- jupyter lab log:\n" + lab.log.read_text()[-4000:])
            raise

    # notebook 13 picks them up beside the judges' agreement
    monkeypatch.setenv("ADAKIT_HOME", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    out = tmp_path / "13.ipynb"
    pm.execute_notebook(str(config.NOTEBOOKS / "13_lens3_adjudication.ipynb"), str(out),
                        cwd=str(tmp_path), progress_bar=False, kernel_name="python3",
                        parameters={"corpus": str(corpus), "judgments": str(judgments),
                                    "human_labels": str(label_file), "figure_prefix": "lab"})
    text = json.dumps(json.loads(out.read_text())["cells"])
    assert "3 human labels by 1 labeller(s) on 3 items" in text
    assert "human_human_kappa" in text and "undefined" in text
    assert "human-human undefined: fewer than two labellers" in text
