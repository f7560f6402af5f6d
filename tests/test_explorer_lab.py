"""The run explorer's widgets in a live JupyterLab, driven in headless Chromium.

tests/test_explorer.py checks the widgets in plain Python and the notebooks under papermill;
neither has a widget front end. Here JupyterLab (from the venv, with every Jupyter and
IPython setting folder inside the test's tmp dir) opens a one-cell notebook that calls
``explore(corpus, interactive=True)`` on a small synthetic corpus; Chromium runs the cell
through JupyterLab's own command, then the test reads the output area's DOM, clicks
"next ▶" and waits for the kernel's answer to come back through the widget comm.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from cdp import find_chromium, start_chromium
from lab import (
    CLICK,
    LAYOUT,
    OUTPUT_STATE,
    WIDGET_ERRORS,
    Lab,
    assert_fits,
    left_area,
    open_and_run,
    screenshot,
    set_viewport,
    start_lab,
    write_notebook,
)

from adakit import config
from adakit.record import load_corpus
from adakit.synthetic import synthetic_run, write_run
from adakit.workbench import explorer

LAYOUT_OF_EXPLORER = LAYOUT.replace("(CLS)", '("adakit-explorer")')
FILES = {"pkg/a.py": 100, "pkg/b.py": 50, "pkg/sub/c.py": 80}
RUN_ID = "lab-a"
# the thinking of turn 1: prose with long words, for the wrapping check
THINKING = ("Before reading anything I want the repository's structure: the feature under study "
            "is request dispatching under budget_pressure, so I outline the application module, "
            "then follow the registration of URL rules into the routing implementation and "
            "check how configuration, blueprints and error handlers participate in dispatching.")
# the first two turns differ in tool and file, so their texts differ beyond the turn number
TOOLS = [
    {"tool": "OVW", "file": "pkg/a.py", "thinking": THINKING},
    {"tool": "PKR", "file": "pkg/b.py", "ranges": [(3, 12)]},
    "MEM",
    {"tool": "PKR", "file": "pkg/sub/c.py", "ranges": [(40, 49)]},
    {"tool": "CON", "finalize": True},
]


def _corpus(folder: Path) -> Path:
    runs = folder / "runs"
    # the first run in corpus order never concludes; the explorer must not open on it
    write_run(synthetic_run("lab-0", model="synth-B", world="toyworld",
                            condition="budget_pressure", tools=TOOLS[:3], files=FILES, seed=2,
                            reason="turn_bound"), runs / "lab-0.jsonl")
    write_run(synthetic_run(RUN_ID, model="synth-A", world="toyworld", tools=TOOLS,
                            files=FILES, seed=1), runs / f"{RUN_ID}.jsonl")
    return runs


class ExplorerLab(NamedTuple):
    lab: Lab
    corpus: Path


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[ExplorerLab]:
    """A JupyterLab server whose root holds explore.ipynb (the explorer on ``RUN_ID``) and
    default.ipynb (the explorer on the corpus's default run)."""
    root = tmp_path / "root"
    root.mkdir()
    corpus = _corpus(tmp_path)
    write_notebook(root / "explore.ipynb", [
        "from adakit.workbench.explorer import explore\n"
        f"ui = explore({str(corpus)!r}, run_id={RUN_ID!r}, interactive=True)\n"
        "print(type(ui).__name__)\n"
        "ui"])
    # the shipped reference corpus (real models on real worlds), read without a cache file
    write_notebook(root / "present.ipynb", [
        "from adakit.record import load_corpus\n"
        "from adakit.workbench.explorer import explore\n"
        f"ui = explore(load_corpus({str(config.REFERENCE_RUNS)!r}, cache=False), "
        "interactive=True, presentation=True)\n"
        "ui"])
    write_notebook(root / "default.ipynb", [
        "from adakit.workbench.explorer import explore\n"
        f"ui = explore({str(corpus)!r}, interactive=True)\n"
        "ui"])
    with start_lab(tmp_path, root) as server:
        yield ExplorerLab(server, corpus)


def _turn_text(state: dict, header: str) -> str | None:
    return next((h for h in state.get("html", []) if h.startswith(header)), None)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_explorer_widgets_work_in_jupyterlab_in_headless_chromium(lab: ExplorerLab,
                                                                  tmp_path: Path):
    chromium = find_chromium()
    assert chromium, "headless Chromium is needed (make test installs Debian's chromium)"
    corpus = load_corpus(lab.corpus, cache=False)
    view = explorer.RunView(corpus, RUN_ID)
    n = view.n_turns
    turn1 = explorer.turn_sections(view.rf, 1, view.reads)
    turn2 = explorer.turn_sections(view.rf, 2, view.reads)
    head1, head2 = (s["header"].splitlines()[0] for s in (turn1, turn2))
    assert head1.startswith(f"turn 1 of {n}") and head2.startswith(f"turn 2 of {n}")
    assert turn1["call"] != turn2["call"]

    t0 = time.monotonic()
    with start_chromium(chromium, tmp_path / "chromium", tmp_path / "chromium.log") as page:
        try:
            open_and_run(page, lab.lab, "explore.ipynb")

            # 1. the widget renders: buttons, the "turn" slider at 1, turn 1's text
            state = page.wait_for(
                OUTPUT_STATE, 60, "the cell to run and the explorer widget to show turn 1",
                until=lambda s: bool(s) and s["run"] != "running" and _turn_text(s, head1))
            assert state["run"] == "done", state
            assert "ExplorerWidgets" in state["text"], state["text"][:500]  # widgets, not static
            assert "next ▶" in state["buttons"] and "◀ prev" in state["buttons"], state
            assert {"label": "turn", "readout": "1"} in state["sliders"], state["sliders"]
            shown1 = _turn_text(state, head1)
            assert turn1["call"] in shown1 and turn2["call"] not in shown1

            # 2. a click goes through the comm and the kernel's update comes back
            assert page.evaluate(CLICK % json.dumps("next ▶")), "no 'next ▶' button to click"
            state = page.wait_for(
                OUTPUT_STATE, 30, "the explorer to show turn 2 after clicking 'next ▶'",
                until=lambda s: bool(s) and _turn_text(s, head2) is not None
                and {"label": "turn", "readout": "2"} in s["sliders"])
            shown2 = _turn_text(state, head2)
            assert turn2["call"] in shown2 and shown2 != shown1
            assert _turn_text(state, head1) is None  # turn 1's text was replaced

            # 3. no widget errors in the output area, no uncaught exception in the page, no
            # console error about widgets, comms or models
            assert not [e for e in WIDGET_ERRORS if e in state["text"]], state["text"][:2000]
            bad = [e for e in page.errors if e.startswith("uncaught:")
                   or any(k in e.lower() for k in ("widget", "comm", "model"))]
            assert not bad, bad
        except BaseException:
            print("--- console errors:", *page.errors, sep="\n")
            print("--- jupyter lab log:\n" + lab.lab.log.read_text()[-4000:])
            raise
    assert time.monotonic() - t0 < 90


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_explorer_fits_1280x720_with_and_without_the_file_browser(lab: ExplorerLab,
                                                                  tmp_path: Path):
    """At 1280x720 the explorer stays inside its output box (no horizontal scrollbar, no cut
    button, no clipped menu), shows the arc and the map at the width they were drawn, wraps
    text at word boundaries, and opens on the run that concludes."""
    chromium = find_chromium()
    assert chromium, "headless Chromium is needed (make test installs Debian's chromium)"
    with start_chromium(chromium, tmp_path / "chromium", tmp_path / "chromium.log") as page:
        try:
            set_viewport(page, 1280, 720)
            open_and_run(page, lab.lab, "default.ipynb")
            page.wait_for(OUTPUT_STATE, 60, "the explorer to show turn 1",
                          until=lambda s: bool(s) and s["run"] == "done"
                          and any(h.startswith("turn 1 of 5") for h in s["html"]))
            state = page.evaluate(OUTPUT_STATE)
            assert any("ended by finalize" in h for h in state["html"]), state["html"][:2]
            assert any(THINKING[:60] in h for h in state["html"])  # the default is lab-a
            for open_ in (True, False):
                left_area(page, open_)
                what = "file browser " + ("open" if open_ else "closed")
                shot = tmp_path / f"explorer-{what.replace(' ', '-')}.png"
                fit = page.wait_for(
                    LAYOUT_OF_EXPLORER, 30, f"the explorer's pictures ({what})",
                    until=lambda f: bool(f) and len(f["images"]) == 2
                    and all(n > 0 for n, _ in f["images"]))
                assert screenshot(page, shot) == (1280, 720)
                assert fit["viewport"] == [1280, 720] and fit["left_open"] is open_
                assert_fits(fit, what)
                assert [n for n, _ in fit["images"]] == [explorer.PICTURE_PX] * 2
        except BaseException:
            print("--- console errors:", *page.errors, sep="\n")
            print("--- jupyter lab log:\n" + lab.lab.log.read_text()[-4000:])
            raise


# The turn controls scrolled to the top of the notebook, then the boxes (left, top, right,
# bottom) of the notebook's visible area and of one turn's parts, the fonts, the map's source.
PRESENT_BOXES = """(async () => {
  const ui = document.querySelector('.adakit-explorer');
  if (!ui) return null;
  const controls = ui.querySelector('.adakit-controls');
  if (!controls) return null;
  if (window.__scrolled !== true) {
    controls.scrollIntoView({block: 'start'});
    window.__scrolled = true;
    await new Promise((r) => setTimeout(r, 500));
  }
  const box = (el) => {
    if (!el) return null;
    const r = el.getBoundingClientRect();
    return [r.left, r.top, r.right, r.bottom].map(Math.round);
  };
  const button = (t) => [...ui.querySelectorAll('button')].find((b) => b.textContent.trim() === t);
  const panel = ui.closest('.jp-WindowedPanel-outer') || ui.closest('.jp-Notebook');
  const pre = ui.querySelector('.adakit-turn pre');
  const map = ui.querySelector('img.adakit-map');
  return {
    panel: box(panel), viewport: [innerWidth, innerHeight],
    parts: {prev: box(button('◀ prev')), next: box(button('next ▶')),
            slider: box(ui.querySelector('.widget-slider')), match: box(button('match ▶')),
            text: box(ui.querySelector('.adakit-turn')), arc: box(ui.querySelector('img.adakit-arc')),
            map: box(map)},
    fonts: {text: pre ? parseFloat(getComputedStyle(pre).fontSize) : 0,
            button: parseFloat(getComputedStyle(button('next ▶')).fontSize)},
    present: ui.classList.contains('adakit-present'),
    map_src: map ? map.src : '', map_shown: map ? map.naturalWidth : 0,
    text: ui.textContent, turn: (ui.querySelector('.adakit-turn') || {}).textContent || '',
  };
})()"""

# choose ``value`` in the explorer's world menu, as a person would
CHOOSE_WORLD = """((value) => {
  const ui = document.querySelector('.adakit-explorer');
  const select = [...ui.querySelectorAll('.widget-dropdown')]
    .find((d) => (d.querySelector('label') || {}).textContent === 'world').querySelector('select');
  select.value = value;
  select.dispatchEvent(new Event('change', {bubbles: true}));
  return select.value === value;
})(%s)"""


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_explorer_in_presentation_size_fits_one_turn_at_1280x720(lab: ExplorerLab,
                                                                tmp_path: Path):
    """On the reference corpus, the explorer opens on a real model's run that read at least
    two files and concluded; in presentation size at 1280x720 (file browser closed) the turn
    controls, the turn text, the arc and the map lie on one screen, the map beside the
    controls, in type of at least 15 px; switching the world redraws the map with the text."""
    chromium = find_chromium()
    assert chromium, "headless Chromium is needed (make test installs Debian's chromium)"
    corpus = load_corpus(config.REFERENCE_RUNS, cache=False)
    run = explorer.default_run(corpus.runs, corpus.turns, corpus.reads)
    row = corpus.runs.set_index("run_id").loc[run]
    assert row["model_kind"] != "baseline" and str(row["conclusion"] or "").strip()
    assert explorer.files_read(corpus.turns)[run] >= 2
    with start_chromium(chromium, tmp_path / "chromium", tmp_path / "chromium.log") as page:
        try:
            set_viewport(page, 1280, 720)
            open_and_run(page, lab.lab, "present.ipynb")
            page.wait_for(OUTPUT_STATE, 90, "the explorer to show turn 1",
                          until=lambda s: bool(s) and s["run"] == "done"
                          and any(h.startswith("turn 1 of") for h in s["html"]))
            left_area(page, False)
            state = page.wait_for(PRESENT_BOXES, 30, "the explorer's parts",
                                  until=lambda s: bool(s) and s["map_shown"] > 0
                                  and all(s["parts"].values()))
            screenshot(page, tmp_path / "explorer-presentation.png")
            assert state["present"] and run in state["text"], state["text"][:300]
            left, top, right, bottom = state["panel"]
            for name, (x0, y0, x1, y1) in state["parts"].items():
                assert left - 1 <= x0 and x1 <= right + 1, (name, state)
                assert top - 1 <= y0 and y1 <= bottom + 1, (name, state)
            parts = state["parts"]
            assert parts["map"][0] >= parts["slider"][2]  # the map beside the controls
            assert parts["map"][1] < parts["text"][3]  # ... and beside the text
            assert state["fonts"]["text"] >= 15 and state["fonts"]["button"] >= 15, state["fonts"]
            assert_fits(page.evaluate(LAYOUT_OF_EXPLORER), "presentation size")
            print("presentation boxes:", state["panel"], parts, state["fonts"])

            # another world: the map is redrawn together with the text
            before = state["map_src"]
            assert page.evaluate(CHOOSE_WORLD % json.dumps("requests"))
            t0 = time.monotonic()
            # the turn's own header (the run menu lists requests runs from the start)
            page.wait_for(PRESENT_BOXES, 30, "the turn text of a requests run",
                          until=lambda s: bool(s) and "· requests ·" in s["turn"])
            t_text = time.monotonic() - t0
            moved = page.wait_for(PRESENT_BOXES, 10, "the map of requests",
                                  until=lambda s: bool(s) and s["map_src"] != before)
            t_map = time.monotonic() - t0
            assert t_map - t_text < 1.0, (t_text, t_map)
            assert moved["map_shown"] > 0
            screenshot(page, tmp_path / "explorer-presentation-requests.png")
        except BaseException:
            print("--- console errors:", *page.errors, sep="\n")
            print("--- jupyter lab log:\n" + lab.lab.log.read_text()[-4000:])
            raise


# every output area of a notebook (scrolled to its end): sideways scrollers, and images shown
# narrower than drawn; how many cells of the notebook's model have outputs and how many of
# those show them, how many images there are (total) and how many have loaded (images)
OUTPUTS = """(() => {
  const app = window.jupyterapp;
  const panel = app && [...app.shell.widgets('main')].find((w) => w.sessionContext && w.content);
  if (!panel || !panel.context.isReady) return null;
  const scroller = document.querySelector('.jp-WindowedPanel-outer');
  if (scroller) scroller.scrollTop = scroller.scrollHeight;
  const nb = panel.content;
  let cells = 0, drawn = 0;
  for (let i = 0; i < nb.model.cells.length; i++) {
    if (!(nb.model.cells.get(i).toJSON().outputs || []).length) continue;
    cells += 1;
    const cell = nb.widgets[i];
    if (cell && cell.node.querySelector('.jp-OutputArea-output')) drawn += 1;
  }
  const outs = [...document.querySelectorAll('.jp-OutputArea-output')];
  const wide = [], scaled = [];
  let images = 0, total = 0;
  outs.forEach((o, i) => {
    for (const e of [o, ...o.querySelectorAll('*')]) {
      const ox = getComputedStyle(e).overflowX;
      if ((ox === 'auto' || ox === 'scroll') && e.scrollWidth > e.clientWidth + 1)
        wide.push([i, e.tagName, e.scrollWidth, e.clientWidth]);
    }
    for (const im of o.querySelectorAll('img')) {
      total += 1;
      if (!im.complete || !im.naturalWidth) continue;
      images += 1;
      const shown = im.getBoundingClientRect().width;
      if (shown < im.naturalWidth - 0.5) scaled.push([i, im.naturalWidth, Math.round(shown)]);
    }
  });
  return {cells, drawn, outputs: outs.length, total, images, wide, scaled};
})()"""


def _all_drawn(state: dict | None) -> bool:
    """Whether every cell with outputs shows them and every image in them has loaded (the tour
    draws at least five figures)."""
    return (bool(state) and state["cells"] > 0 and state["drawn"] == state["cells"]
            and state["images"] == state["total"] >= 5)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_executed_tour_reads_at_1280x720(flask_world, tmp_path: Path, monkeypatch):
    """The tour, executed as a student would (inline figures), shown at 1280x720 with the file
    browser open and closed: no output scrolls sideways and no figure is shrunk to fit."""
    pm = pytest.importorskip("papermill")
    chromium = find_chromium()
    assert chromium, "headless Chromium is needed (make test installs Debian's chromium)"
    from adakit import config

    root = tmp_path / "root"
    root.mkdir()
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline figures, as in a class
    monkeypatch.setenv("ADAKIT_WORLDS", str(config.worlds_dir()))
    monkeypatch.setenv("ADAKIT_HOME", str(tmp_path))
    pm.execute_notebook(str(config.NOTEBOOKS / "00_tour.ipynb"), str(root / "tour.ipynb"),
                        cwd=str(tmp_path), progress_bar=False, kernel_name="python3",
                        parameters={"corpus": str(tmp_path / "none"), "turn_bound": 12,
                                    "output": str(tmp_path / "tour-run"), "solutions": True})
    with start_lab(tmp_path, root) as server, \
            start_chromium(chromium, tmp_path / "chromium", tmp_path / "chromium.log") as page:
        set_viewport(page, 1280, 720)
        page.navigate(server.notebook_url("tour.ipynb"))
        # (an output area shows before the notebook's cells have loaded: wait for all of them)
        page.wait_for(OUTPUTS, 60, "the tour to open with every output", until=_all_drawn)
        for open_ in (True, False):
            left_area(page, open_)
            state = page.wait_for(OUTPUTS, 30, "the tour's outputs and figures",
                                  until=_all_drawn)
            what = "file browser " + ("open" if open_ else "closed")
            assert state["wide"] == [], f"{what}: outputs scrolling sideways {state}"
            assert state["scaled"] == [], f"{what}: figures shrunk to fit {state}"
            screenshot(page, tmp_path / f"tour-{what.replace(' ', '-')}.png")
