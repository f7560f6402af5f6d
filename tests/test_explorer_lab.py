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
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import nbformat
import pytest
from cdp import find_chromium, start_chromium, stop_process_group

from adakit import explorer
from adakit.record import load_corpus
from adakit.synthetic import synthetic_run, write_run

FILES = {"pkg/a.py": 100, "pkg/b.py": 50, "pkg/sub/c.py": 80}
RUN_ID = "lab-a"
# the first two turns differ in tool and file, so their texts differ beyond the turn number
TOOLS = [
    {"tool": "OVW", "file": "pkg/a.py"},
    {"tool": "PKR", "file": "pkg/b.py", "ranges": [(3, 12)]},
    "MEM",
    {"tool": "PKR", "file": "pkg/sub/c.py", "ranges": [(40, 49)]},
    {"tool": "CON", "finalize": True},
]
# loopback only, a port the OS picks (read back from the runtime file), window.jupyterapp
# exposed for the page scripts, and nothing fetched from the network
LAB_FLAGS = (
    "--no-browser", "--ServerApp.ip=127.0.0.1", "--ServerApp.port=0",
    "--ServerApp.port_retries=0", "--LabApp.expose_app_in_browser=True",
    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    "--LabApp.news_url=None", "--LabApp.extension_manager=readonly",
    "--ServerApp.allow_root=True",  # the CI container runs as root
)
WIDGET_ERRORS = ("Error displaying widget", "model not found", "Could not create a model",
                 "Could not create view", "Failed to render")


def _corpus(folder: Path) -> Path:
    runs = folder / "runs"
    write_run(synthetic_run(RUN_ID, model="synth-A", world="toyworld", tools=TOOLS,
                            files=FILES, seed=1), runs / f"{RUN_ID}.jsonl")
    write_run(synthetic_run("lab-b", model="synth-B", world="toyworld",
                            condition="budget_pressure", tools=TOOLS[:3], files=FILES, seed=2),
              runs / "lab-b.jsonl")
    return runs


def _notebook(path: Path, corpus: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells.append(nbformat.v4.new_code_cell(
        "from adakit.explorer import explore\n"
        f"ui = explore({str(corpus)!r}, run_id={RUN_ID!r}, interactive=True)\n"
        "print(type(ui).__name__)\n"
        "ui"))
    nbformat.write(nb, path)


def _lab_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JUPYTER", "IPYTHON")) and k != explorer.ENV_VAR}
    dirs = {"JUPYTER_CONFIG_DIR": "config", "JUPYTER_DATA_DIR": "data",
            "JUPYTER_RUNTIME_DIR": "runtime", "IPYTHONDIR": "ipython",
            "JUPYTERLAB_SETTINGS_DIR": "lab-settings",
            "JUPYTERLAB_WORKSPACES_DIR": "lab-workspaces", "ADAKIT_HOME": "adakit-home",
            "MPLCONFIGDIR": "mpl"}
    for var, name in dirs.items():
        (tmp / name).mkdir(parents=True, exist_ok=True)
        env[var] = str(tmp / name)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _wait_for_lab(proc: subprocess.Popen, runtime: Path, token: str, log: Path,
                  timeout: float = 60.0) -> str:
    """The base URL of the JupyterLab ``proc`` once /api/status answers with the token."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"jupyter lab exited with code {proc.returncode}:\n"
                                 + log.read_text()[-3000:])
        info = [json.loads(p.read_text()) for p in runtime.glob("jpserver-*.json")
                if p.stat().st_size]
        if info:
            url = f"http://127.0.0.1:{info[0]['port']}/"
            request = urllib.request.Request(url + "api/status",
                                             headers={"Authorization": f"token {token}"})
            try:
                with urllib.request.urlopen(request, timeout=5) as r:
                    if r.status == 200:
                        return url
            except OSError:
                pass
        time.sleep(0.25)
    raise AssertionError(f"jupyter lab did not answer within {timeout:.0f}s:\n"
                         + log.read_text()[-3000:])


class Lab(NamedTuple):
    url: str  # the server's base URL
    token: str
    log: Path  # the server's (and its kernels') output
    corpus: Path  # the corpus the notebook explores


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    """A JupyterLab server whose root holds explore.ipynb, a notebook opening the explorer."""
    root = tmp_path / "root"
    root.mkdir()
    corpus = _corpus(tmp_path)
    _notebook(root / "explore.ipynb", corpus)
    token = secrets.token_hex(16)
    env = _lab_env(tmp_path / "jupyter")
    log = tmp_path / "lab.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", *LAB_FLAGS, f"--ServerApp.root_dir={root}",
             f"--IdentityProvider.token={token}",
             f"--LabApp.workspaces_dir={env['JUPYTERLAB_WORKSPACES_DIR']}",
             f"--LabApp.user_settings_dir={env['JUPYTERLAB_SETTINGS_DIR']}"],
            cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    try:
        url = _wait_for_lab(proc, Path(env["JUPYTER_RUNTIME_DIR"]), token, log)
        yield Lab(url, token, log, corpus)
    finally:
        stop_process_group(proc)


# ------------------------------------------------------------------------ page scripts

# The notebook panel JupyterLab opened (made the current widget, which notebook commands act
# on), and its kernel's status once the session is ready.
KERNEL_STATUS = """(async () => {
  const app = window.jupyterapp;
  if (!app) return null;
  const panel = [...app.shell.widgets('main')].find((w) => w.sessionContext && w.content);
  if (!panel) return null;
  if (app.shell.currentWidget !== panel) app.shell.activateById(panel.id);
  await panel.sessionContext.ready;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  return kernel ? kernel.status : null;
})()"""

# Run every cell through JupyterLab's own command; its outcome lands in window.__runAll.
RUN_ALL = """(() => {
  window.__runAll = 'running';
  window.jupyterapp.commands.execute('notebook:run-all-cells')
    .then(() => { window.__runAll = 'done'; }, (e) => { window.__runAll = 'failed: ' + e; });
  return true;
})()"""

# What the cell's output area shows: the widget buttons, the turn slider (label and
# readout), the turn texts of the HTML widgets, and all of the output area's text.
OUTPUT_STATE = """(() => {
  const out = document.querySelector('.jp-Notebook .jp-Cell .jp-OutputArea');
  if (!out) return null;
  const text = (el) => (el.textContent || '').trim();
  const sliders = [...out.querySelectorAll('.widget-slider')].map((s) => ({
    label: text(s.querySelector('.widget-label') || s),
    readout: text(s.querySelector('.widget-readout') || s),
  }));
  return {
    buttons: [...out.querySelectorAll('button.jupyter-button')].map(text),
    sliders,
    html: [...out.querySelectorAll('.widget-html-content')].map(text),
    text: text(out),
    run: window.__runAll,
  };
})()"""

CLICK = """((label) => {
  const out = document.querySelector('.jp-Notebook .jp-Cell .jp-OutputArea');
  const button = [...out.querySelectorAll('button.jupyter-button')]
    .find((b) => b.textContent.trim() === label);
  if (!button) return false;
  button.click();
  return true;
})(%s)"""


def _turn_text(state: dict, header: str) -> str | None:
    return next((h for h in state.get("html", []) if h.startswith(header)), None)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_explorer_widgets_work_in_jupyterlab_in_headless_chromium(lab: Lab, tmp_path: Path):
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
            page.navigate(f"{lab.url}lab/tree/explore.ipynb?token={lab.token}")
            page.wait_for(KERNEL_STATUS, 60, "the notebook's kernel to be idle",
                          until=lambda status: status == "idle")
            assert page.evaluate(RUN_ALL)

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
            print("--- jupyter lab log:\n" + lab.log.read_text()[-4000:])
            raise
    assert time.monotonic() - t0 < 90
