"""The tour (notebook 00) as a class runs it: "Run all" in a live JupyterLab, driven in headless
Chromium (tests/lab.py, tests/cdp.py). Before a student's answer checks, no cell shows
exercise 1's answer; once the right answer is typed and checked, lens 0's count shows.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cdp import find_chromium, start_chromium
from lab import open_and_run, save_notebook, start_lab

from adakit import config
from adakit.record import load_corpus
from adakit.workbench import exercises

# Every cell of the open notebook, from JupyterLab's own model: its source and the text of its
# outputs (streams, text/plain, text/html), plus the "Run all" outcome.
CELLS = """(() => {
  const app = window.jupyterapp;
  const panel = [...app.shell.widgets('main')].find((w) => w.sessionContext && w.content);
  if (!panel) return null;
  const cells = panel.content.model.cells;
  const out = [];
  for (let i = 0; i < cells.length; i++) {
    const c = cells.get(i).toJSON();
    const text = (c.outputs || []).map((o) => {
      const join = (v) => Array.isArray(v) ? v.join('') : (v || '');
      const data = o.data || {};
      return join(o.text) + join(data['text/plain']) + join(data['text/html'])
        + (o.ename ? o.ename + ': ' + o.evalue : '');
    }).join('\\n');
    out.push({source: Array.isArray(c.source) ? c.source.join('') : c.source,
              type: c.cell_type, count: c.execution_count, text});
  }
  return {run: window.__runAll, busy: panel.sessionContext.session.kernel.status, cells: out};
})()"""

# What cell INDEX's output area shows on screen (scrolled into view first).
SHOWN = """(async (i) => {
  const app = window.jupyterapp;
  const panel = [...app.shell.widgets('main')].find((w) => w.sessionContext && w.content);
  const nb = panel.content;
  if (nb.scrollToItem) await nb.scrollToItem(i, 'center');
  await new Promise((r) => setTimeout(r, 300));
  const area = nb.widgets[i].node.querySelector('.jp-OutputArea');
  return area ? area.textContent : null;
})(INDEX)"""

# Replace cell INDEX's source with SOURCE, then run cells INDEX..LAST one at a time.
ANSWER = """(async (i, source, last) => {
  const app = window.jupyterapp;
  const panel = [...app.shell.widgets('main')].find((w) => w.sessionContext && w.content);
  const nb = panel.content;
  nb.model.cells.get(i).sharedModel.setSource(source);
  for (let k = i; k <= last; k++) {
    nb.activeCellIndex = k;
    nb.deselectAll();
    await app.commands.execute('notebook:run-cell');
  }
  return true;
})(ARGS)"""


def _index(cells: list[dict], start: str) -> int:
    hits = [i for i, c in enumerate(cells) if c["type"] == "code" and start in c["source"]]
    assert len(hits) == 1, f"{len(hits)} code cells hold {start!r}"
    return hits[0]


def _finished(state: dict | None) -> bool:
    return bool(state) and state["run"] != "running" and state["busy"] == "idle"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_run_all_shows_no_answer_before_a_correct_check(flask_world, tmp_path: Path,
                                                        monkeypatch):
    chromium = find_chromium()
    assert chromium, "headless Chromium is needed (make test installs Debian's chromium)"
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(config.NOTEBOOKS / "00_tour.ipynb", root / "tour.ipynb")  # as committed
    monkeypatch.setenv("ADAKIT_WORLDS", str(config.worlds_dir()))
    with start_lab(tmp_path, root) as server, \
            start_chromium(chromium, tmp_path / "chromium", tmp_path / "chromium.log") as page:
        try:
            open_and_run(page, server, "tour.ipynb")
            state = page.wait_for(CELLS, 180, "Run all to finish", until=_finished)
            assert state["run"] == "done", state["run"]
            cells = state["cells"]
            errors = [c["text"] for c in cells if "Error: " in c["text"]]
            assert not errors, errors
            check = _index(cells, "exercises.check_distinct_lines")
            reveal = _index(cells, "exercises.after_check(exercise_1")
            density = _index(cells, "fp.trace_density")
            # the tour's run, recorded under the lab's ADAKIT_HOME: exercise 1's answer
            home = tmp_path / "jupyter" / "adakit-home"
            tour = load_corpus(home / "data" / "runs" / "tour", cache=False)
            answer = exercises.answer_distinct_lines(tour.reads)
            assert answer > 0

            # 1. at "Run all", the check asks for an answer and nothing shows lens 0's count
            shown = page.wait_for(SHOWN.replace("INDEX", str(check)), 30, "the check's output",
                                  until=bool)
            assert shown and exercises.FILL_IN in shown and "✓" not in shown, shown
            assert "(it is None)" in shown and str(answer) not in shown
            assert all("loc_viewed" not in c["text"] for c in cells), "lens 0's count shows"
            assert "exercise 1's check says ✓" in cells[reveal]["text"]
            assert str(answer) not in cells[reveal]["text"]
            table = page.wait_for(SHOWN.replace("INDEX", str(density)), 30,
                                  "the density table", until=bool)
            assert exercises.KEPT_BACK in table, table  # distinct lines kept back
            assert f"{answer} distinct" not in "\n".join(c["text"] for c in cells)

            # 2. a wrong answer checked: still no count
            answer_cell = check - 1
            assert "my_distinct_lines = None" in cells[answer_cell]["source"]
            args = f"{answer_cell}, {json.dumps(f'my_distinct_lines = {answer + 7}')}, {reveal}"
            page.evaluate(ANSWER.replace("ARGS", args))
            state = page.wait_for(CELLS, 60, "the wrong answer's check",
                                  until=lambda s: _finished(s)
                                  and "too many" in s["cells"][check]["text"])
            assert "loc_viewed" not in state["cells"][reveal]["text"]

            # 3. the right answer checked: the check says so and lens 0's count shows
            args = f"{answer_cell}, {json.dumps(f'my_distinct_lines = {answer}')}, {reveal}"
            page.evaluate(ANSWER.replace("ARGS", args))
            state = page.wait_for(CELLS, 60, "the right answer's check",
                                  until=lambda s: _finished(s)
                                  and "✓ right" in s["cells"][check]["text"])
            assert f"✓ right: {answer} distinct lines" in state["cells"][check]["text"]
            shown = page.wait_for(SHOWN.replace("INDEX", str(reveal)), 30,
                                  "lens 0's count after the check",
                                  until=lambda t: bool(t) and "loc_viewed" in t)
            assert str(answer) in shown
            save_notebook(page)
        except BaseException:
            print("--- console errors:", *page.errors, sep="\n")
            print("--- jupyter lab log:\n" + server.log.read_text()[-4000:])
            raise
