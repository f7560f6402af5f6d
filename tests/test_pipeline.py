"""The whole pipeline on the tiny CI profile: every notebook executed, every figure on the index page.

`make test` builds the CI profile first (`make study PROFILE=ci`); run alone, the fixture
builds it (a few minutes, with the embedded local model).
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from cdp import find_chromium

from adakit import config
from adakit.record import load_corpus
from adakit.study import pipeline

ROOT = Path(__file__).resolve().parents[1]
OUT = config.DATA / "study" / "ci"
CI_FIGURES = ROOT / "figures" / "ci"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ci_study() -> Path:
    if not (OUT / "index.html").exists():
        subprocess.run(["make", "study", "PROFILE=ci"], cwd=ROOT, check=True)
    return OUT


def test_every_numbered_notebook_was_executed_without_errors(ci_study):
    executed = {p.name for p in (ci_study / "notebooks").glob("*.ipynb")}
    assert {p.name for p in pipeline.notebooks()} <= executed
    for path in sorted((ci_study / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        injected = [c for c in nb["cells"] if "injected-parameters" in c.get("metadata", {}).get("tags", [])]
        assert injected, f"{path.name}: papermill did not inject the profile's parameters"
        assert "data/runs/ci" in "".join(injected[0]["source"]) or "studies/ci.yaml" in "".join(injected[0]["source"])
        for cell in nb["cells"]:
            for out in cell.get("outputs", []):
                assert out.get("output_type") != "error", f"{path.name}: {out.get('ename')}: {out.get('evalue')}"


def test_the_corpus_holds_baselines_and_the_local_model(ci_study):
    runs = load_corpus(config.DATA / "runs" / "ci", cache=False).runs
    assert runs["finished"].all()
    assert {"baseline-skimmer", "baseline-tracer", "baseline-close_reader", "smollm2-135m"} <= set(runs["model"])
    assert "coach_judge" in set(runs["condition"])
    judged = config.JUDGMENTS / "ci" / "judgments.jsonl"
    assert judged.exists() and judged.stat().st_size > 0


def test_every_notebook_wrote_its_figures(ci_study):
    for nb in pipeline.notebooks():
        if nb.stem in {"00_tour", "01_launch", "03_adjudication", "30_explorer"}:
            continue  # these teach and explore; the lens notebooks are the figure makers
        pngs = list((CI_FIGURES / nb.stem).rglob("*.png"))
        assert pngs, f"{nb.name} wrote no figure under {CI_FIGURES / nb.stem}"


def test_index_page_loads_every_figure_in_headless_chromium(ci_study):
    chromium = find_chromium()
    assert chromium, "headless Chromium is needed (make test installs Debian's chromium)"
    index = ci_study / "index.html"
    html = index.read_text()
    for href in re.findall(r'href="((?:html|notebooks)/[^"]+)"', html):
        assert (ci_study / href).exists(), href
    # a page a class starts from: the corpus summary, a start-here order, a section per notebook
    assert "<h2>The corpus</h2>" in html and "smollm2-135m" in html
    assert '<ol class="start">' in html and "break-all" not in html
    for nb in pipeline.notebooks():
        assert f'<section id="{nb.stem}">' in html, nb.stem
        assert f'href="html/{nb.stem}.html"' in html and f'href="notebooks/{nb.name}"' in html
    n_png = len([p for p in CI_FIGURES.rglob("*.png")
                 if p.relative_to(CI_FIGURES).parts[0] != config.ADHOC])
    assert n_png > 0
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--allow-file-access-from-files",
             "--virtual-time-budget=15000", "--dump-dom", index.resolve().as_uri()],
            capture_output=True, text=True, timeout=180,
        ).stdout
    check = re.search(r'id="image-check"[^>]*', dom)
    assert check, "the page did not render its figure check"
    attrs = dict(re.findall(r'data-(\w+)="(\d+)"', check.group(0)))
    assert int(attrs["images"]) == n_png
    assert int(attrs["broken"]) == 0, dom[dom.find("image-check"):][:500]


def test_the_ci_profile_replays_the_replies_it_ships(ci_study):
    """Every model reply of the CI profile (agent turns, coach calls, verdicts) came from the
    response cache, which in a fresh clone holds only ``data/replies/ci`` (restored by the
    launch). A prompt changed since that recording makes the profile ask the model live,
    minutes slower: record its replies again with ``make ci-replies``."""
    from adakit.record import read_run
    from adakit.study.spec import load_study

    assert load_study(ROOT / "studies" / "ci.yaml").raw["replies"] == "data/replies/ci"
    live: list[str] = []
    for path in sorted((config.RUNS / "ci").glob("*.jsonl")):
        rf = read_run(path)
        if rf.header.model.kind == "baseline":
            continue
        for t in rf.turns:
            if not t.cached:
                live.append(f"{path.stem} turn {t.turn}")
            live += [f"{path.stem} turn {t.turn} {c.get('purpose')}"
                     for c in (t.coach or {}).get("calls", []) if not c.get("cached")]
    verdicts = pd.read_parquet(config.DATA / "judgments" / "ci" / "judgments.parquet")
    live += [f"verdict {v.item_id} by {v.judge}" for v in verdicts.itertuples() if not v.cached]
    assert not live, (f"{len(live)} replies were asked live (the prompts changed since "
                      f"data/replies/ci was recorded: run `make ci-replies`), e.g. {live[:3]}")
