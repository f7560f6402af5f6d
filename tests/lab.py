"""A live JupyterLab for browser tests: a server on loopback with every Jupyter and IPython
setting folder in the test's tmp dir, a notebook to open, and the page scripts that drive
JupyterLab through headless Chromium (tests/cdp.py) and measure what it shows.

Used by tests/test_explorer_lab.py (the explorer) and tests/test_labelling_lab.py (the
labelling mode).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import nbformat
from cdp import Page, stop_process_group

from adakit.workbench import explorer

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


def lab_env(tmp: Path) -> dict[str, str]:
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
    # no news or update prompt over the page (it would cover the output in screenshots)
    settings = tmp / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    return env


def wait_for_lab(proc: subprocess.Popen, runtime: Path, token: str, log: Path,
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
    root: Path  # the folder it serves

    def notebook_url(self, name: str) -> str:
        return f"{self.url}lab/tree/{name}?token={self.token}"


def write_notebook(path: Path, cells: Sequence[str]) -> None:
    """A notebook of code cells for the python3 kernel."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells.extend(nbformat.v4.new_code_cell(c) for c in cells)
    nbformat.write(nb, path)


@contextmanager
def start_lab(tmp_path: Path, root: Path) -> Iterator[Lab]:
    """A JupyterLab server on ``root`` (its settings under ``tmp_path``), stopped on exit."""
    token = secrets.token_hex(16)
    env = lab_env(tmp_path / "jupyter")
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
        url = wait_for_lab(proc, Path(env["JUPYTER_RUNTIME_DIR"]), token, log)
        yield Lab(url, token, log, root)
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


def open_and_run(page: Page, lab: Lab, name: str, timeout: float = 90) -> None:
    """Open notebook ``name``, wait for its kernel, and run every cell (its outcome lands in
    ``window.__runAll``)."""
    page.navigate(lab.notebook_url(name))
    page.wait_for(KERNEL_STATUS, timeout, "the notebook's kernel to be idle",
                  until=lambda status: status == "idle")
    assert page.evaluate(RUN_ALL)


SAVE = """(async () => {
  const app = window.jupyterapp;
  const panel = [...app.shell.widgets('main')].find((w) => w.sessionContext && w.content);
  await panel.context.save();
  return !panel.context.model.dirty;
})()"""


def save_notebook(page: Page) -> None:
    """Save the open notebook (a dirty notebook would hold a reload at "leave the page?")."""
    assert page.evaluate(SAVE), "the notebook did not save"


def set_viewport(page: Page, width: int, height: int) -> None:
    """Emulate a ``width`` x ``height`` screen (CSS pixels, device scale 1)."""
    page.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
              deviceScaleFactor=1, mobile=False)


def screenshot(page: Page, path: Path) -> tuple[int, int]:
    """Save a PNG screenshot of the viewport; returns its (width, height)."""
    import base64

    data = base64.b64decode(page.call("Page.captureScreenshot", format="png")["data"])
    path.write_bytes(data)
    return explorer.png_size(data)


def left_area(page: Page, open_: bool) -> None:
    """Open or close JupyterLab's left area (the file browser), and return once the page is
    laid out for it: the panel shown or hidden, the main area beside it, and the boxes of the
    panel, the main area and the notebook the same in two reads in a row."""
    page.evaluate(LEFT_AREA.replace("WANT", json.dumps(open_)))
    seen: list[dict] = []

    def laid_out(drawn: dict | None) -> bool:
        seen.append(drawn or {})
        return (bool(drawn) and drawn["collapsed"] is (not open_)
                and (drawn["stack"][1] > drawn["stack"][0]) is open_
                and drawn["main"][0] >= drawn["stack"][1] and seen[-2:-1] == [drawn])

    page.wait_for(LEFT_AREA_DRAWN, 10, "the page laid out with the left area "
                  + ("open" if open_ else "closed"), until=laid_out)


LEFT_AREA = """(async (want) => {
  const app = window.jupyterapp;
  if (app.shell.leftCollapsed === !want) return true;
  if (want) app.shell.expandLeft(); else app.shell.collapseLeft();
  return true;
})(WANT)"""

# The left area as laid out: whether the shell has it collapsed, and the left and right
# edges of its panel, of the main area and of the notebook shown there.
LEFT_AREA_DRAWN = """(() => {
  const stack = document.getElementById('jp-left-stack');
  const main = document.getElementById('jp-main-dock-panel');
  const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook');
  if (!window.jupyterapp || !stack || !main || !nb) return null;
  const edges = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.right].map(Math.round); };
  return {collapsed: window.jupyterapp.shell.leftCollapsed, stack: edges(stack),
          main: edges(main), notebook: edges(nb)};
})()"""

# Where the widgets with CSS class ``cls`` sit inside their output area: every element
# that sticks out of it, every element that scrolls sideways, each image's drawn against
# shown width, buttons whose text is cut, and words of their texts split across two lines
# (words of up to 30 characters; a longer token may break where it must).
LAYOUT = """((cls) => {
  const ui = document.querySelector('.' + cls);
  if (!ui) return null;
  const out = ui.closest('.jp-OutputArea-output') || ui.parentElement;
  const box = out.getBoundingClientRect();
  const name = (el) => el.tagName + '.' + String(el.className || '').split(' ').slice(0, 3).join('.');
  const outside = [];
  for (const el of ui.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (!r.width || !r.height) continue;
    if (r.left < box.left - 1 || r.right > box.right + 1)
      outside.push([name(el), Math.round(r.left), Math.round(r.right)]);
  }
  const scrollers = [];
  for (const el of [out, ...out.querySelectorAll('*')]) {
    const ox = getComputedStyle(el).overflowX;
    if ((ox === 'auto' || ox === 'scroll') && el.scrollWidth > el.clientWidth + 1)
      scrollers.push([name(el), el.scrollWidth, el.clientWidth]);
  }
  const images = [...ui.querySelectorAll('img')].map((i) => [i.naturalWidth,
    i.getBoundingClientRect().width]);
  const cut = [...ui.querySelectorAll('button')]
    .filter((b) => b.getBoundingClientRect().width && b.scrollWidth > b.clientWidth + 1)
    .map((b) => b.textContent.trim());
  const split = [];
  const walker = document.createTreeWalker(ui, NodeFilter.SHOW_TEXT);
  let words = 0;
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const re = /\\S+/g;
    let m;
    while ((m = re.exec(node.data)) !== null) {
      if (m[0].length < 2 || m[0].length > 30) continue;
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0)
        .map((r) => Math.round(r.top)));
      if (tops.size === 0) continue;
      words += 1;
      if (tops.size > 1 && split.length < 10) split.push(m[0]);
    }
  }
  return {box: [Math.round(box.left), Math.round(box.right)], outside: outside.slice(0, 10),
          scrollers, images, cut, split, words, viewport: [innerWidth, innerHeight],
          left_open: !window.jupyterapp.shell.leftCollapsed};
})(CLS)"""


def layout(page: Page, cls: str) -> dict | None:
    """:data:`LAYOUT` of the widget with CSS class ``cls`` (None before it shows)."""
    return page.evaluate(LAYOUT.replace("(CLS)", f"({json.dumps(cls)})"))


def assert_fits(state: dict, what: str) -> None:
    """Everything inside its box, nothing scrolling sideways, images shown at the width they
    were drawn, no button text cut, no word split across lines."""
    assert state["outside"] == [], f"{what}: outside the output box {state['box']}: {state}"
    assert state["scrollers"] == [], f"{what}: horizontal scrollbars: {state['scrollers']}"
    for natural, shown in state["images"]:
        assert natural > 0 and abs(natural - shown) < 0.5, f"{what}: image {state['images']}"
    assert state["cut"] == [], f"{what}: button text cut: {state['cut']}"
    assert state["split"] == [] and state["words"] > 20, f"{what}: words split {state}"
