"""The study's index page (adakit/study/index_page.py) on a small made-up study: executed
notebooks, figures in per-notebook folders (one nested, one very tall, one ad hoc) and a
synthetic corpus. tests/test_pipeline.py loads the CI study's page in headless Chromium.
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib
import nbformat
import pytest
from matplotlib.figure import Figure

from adakit.record import load_corpus
from adakit.study import index_page, pipeline
from adakit.synthetic import synthetic_run, write_run

NOTEBOOKS = {"00_tour": "00 · A guided tour", "10_lens0_surface": "10 · Lens 0: surface activity",
             "30_explorer": "30 · Explorer: one run, turn by turn",
             "41_process_diagnostics": "41 · Process diagnostics"}


def _png(path: Path, width: float = 4.0, height: float = 3.0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(width, height), dpi=50)
    fig.add_subplot().plot([0, 1], [1, 0])
    # whatever style an earlier test applied (adakit's saves tight at a higher dpi)
    with matplotlib.rc_context({"savefig.dpi": 50, "savefig.bbox": "standard"}):
        fig.savefig(path)


@pytest.fixture
def study(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(out, figures, corpus) of a made-up study."""
    out, figures, corpus = tmp_path / "study" / "demo", tmp_path / "figures", tmp_path / "runs"
    for stem, title in NOTEBOOKS.items():
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_markdown_cell(f"# {title}\n\nSome text."),
                    nbformat.v4.new_code_cell("1 + 1")]
        (out / "notebooks").mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, out / "notebooks" / f"{stem}.ipynb")
    _png(figures / "10_lens0_surface" / "loc_viewed_by_model.png")
    _png(figures / "10_lens0_surface" / "by_world" / "flask-3.1.3_files.png")
    _png(figures / "41_process_diagnostics" / "signal_to_noise.png", 3.0, 20.0)
    _png(figures / "adhoc" / "12_lens2_action_policy-ab12" / "tag_shares.png")
    for i, (model, world, cond) in enumerate([("synth-A", "flask", "natural"),
                                              ("synth-A", "requests", "natural"),
                                              ("baseline-tracer", "flask", "budget_pressure")]):
        write_run(synthetic_run(f"r{i}", model=model, world=world, condition=cond, seed=i,
                                tools=["OVW", "PKR", {"tool": "CON", "finalize": True}]),
                  corpus / f"r{i}.jsonl")
    return out, figures, corpus


def test_sections_summary_and_links(study):
    out, figures, corpus = study
    page = index_page.build_index(out, figures, corpus=corpus)
    text = page.path.read_text()
    assert page.images == 3  # the ad-hoc figure is not the study's
    assert len(re.findall(r"<img ", text)) == 3
    assert "1 figures of ad-hoc re-executions" in text and "tag_shares" not in text
    # one section per executed notebook, in number order, each with its links
    ids = re.findall(r'<section id="([^"]+)">', text)
    assert ids == sorted(NOTEBOOKS)
    for stem in NOTEBOOKS:
        assert f'href="html/{stem}.html"' in text and f'href="notebooks/{stem}.ipynb"' in text
        assert (out / "html" / f"{stem}.html").exists()
    assert [p.name for p in page.pages] == [f"{s}.html" for s in sorted(NOTEBOOKS)]
    # a notebook's figures sit in its own section, captioned in words, not as paths
    lens0 = text[text.index('<section id="10_lens0_surface">'):text.index('<section id="30_')]
    assert "<figcaption>loc viewed by model</figcaption>" in lens0
    assert "<figcaption>by world · flask 3.1.3 files</figcaption>" in lens0
    assert "2 figures" in lens0
    assert "no figures" in text[text.index('<section id="00_tour">'):text.index('<section id="10_')]
    _png(figures / "15_variance" / "intervals.png")  # a folder without an executed notebook
    text = index_page.build_index(out, figures, corpus=corpus).path.read_text()
    assert '<section id="15_variance"><h3>15 · Variance: is a difference real?</h3>' in text
    diag = text[text.index('<section id="41_'):]
    assert "signal to noise" in diag and "tall: its top is shown" in diag
    assert "break-all" not in text
    # the corpus summary: runs, models with their kind, worlds
    assert "<strong>3 runs</strong> (3 finished)" in text
    kind = load_corpus(corpus, cache=False).runs.groupby("model")["model_kind"].first()
    assert f"<tr><td>synth-A</td><td>{kind['synth-A']}</td><td>2</td></tr>" in text
    assert "<tr><td>baseline-tracer</td><td>baseline</td><td>1</td></tr>" in text
    assert "<strong>2 worlds:</strong> flask (2), requests (1)" in text


def test_every_link_and_image_resolves(study):
    out, figures, corpus = study
    text = index_page.build_index(out, figures, corpus=corpus).path.read_text()
    targets = re.findall(r'(?:href|src)="([^"#][^"]*)"', text)
    assert targets
    for target in targets:
        assert (out / target).resolve().exists(), target


def test_start_here_orders_the_class_path(study):
    out, figures, corpus = study
    text = index_page.build_index(out, figures, corpus=corpus).path.read_text()
    start = text[text.index('<ol class="start">'):text.index("</ol>")]
    order = re.findall(r'<a href="#([^"]+)">', start)
    assert order == ["00_tour", "30_explorer", "10_lens0_surface", "41_process_diagnostics"]
    assert "the whole method on one run" in start and "30 · Explorer" in start
    assert index_page.start_order(["41_x", "20_y", "05_z"]) == [
        ("20_y", "RQ3: does a coach's intervention help"), ("05_z", ""), ("41_x", "")]


def test_summary_counts_and_an_empty_corpus(study, tmp_path):
    _, _, corpus = study
    runs = load_corpus(corpus, cache=False).runs
    summary = index_page.corpus_summary(runs.assign(finished=runs["run_id"] != "r2"))
    assert summary["runs"] == 3 and summary["finished"] == 2
    assert {m: n for m, (_, n) in summary["models"].items()} == {"synth-A": 2,
                                                                  "baseline-tracer": 1}
    assert summary["conditions"] == {"natural": 2, "budget_pressure": 1}
    out = tmp_path / "bare"
    (out / "notebooks").mkdir(parents=True)
    page = index_page.build_index(out, tmp_path / "nofigures", corpus=tmp_path / "nothing")
    text = page.path.read_text()
    assert page.images == 0 and "No runs found" in text and "(no executed notebooks)" in text


def test_caption_and_png_size(tmp_path):
    png = tmp_path / "12_x" / "by_model" / "tag-shares_all.png"
    _png(png, 4.0, 2.0)
    assert index_page.caption(png, tmp_path / "12_x") == "by model · tag shares all"
    assert index_page.png_size(png) == (200, 100)
    (tmp_path / "not.png").write_bytes(b"GIF89a" + bytes(30))
    assert index_page.png_size(tmp_path / "not.png") is None


def test_the_pipeline_uses_this_builder():
    assert pipeline.build_index is index_page.build_index
    assert pipeline.profile_corpus("ci") == ["data/runs/ci"]
    assert pipeline.profile_corpus("quick") == ["data/runs/quick", "data/reference/local-v4/runs"]
    assert pipeline.profile_corpus("nosuch") == []


# Thumbnails and captions as drawn: each image's shown box, and caption words split across lines
PAGE_LAYOUT = """(() => {
  const check = document.getElementById('image-check');
  if (!check || check.dataset.images === undefined) return null;
  const figs = [...document.querySelectorAll('figure')].map((f) => {
    const r = f.querySelector('img').getBoundingClientRect();
    return [Math.round(r.width), Math.round(r.height)];
  });
  const split = [];
  for (const cap of document.querySelectorAll('figcaption')) {
    const node = cap.firstChild;
    const re = /\\S+/g;
    let m;
    while ((m = re.exec(node.data)) !== null) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
      if (tops.size > 1) split.push(m[0]);
    }
  }
  return {figs, split, broken: Number(check.dataset.broken),
          images: Number(check.dataset.images),
          width: document.documentElement.scrollWidth};
})()"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_thumbnails_are_readable_at_1280x720_in_headless_chromium(study, tmp_path):
    from cdp import find_chromium, start_chromium
    from lab import set_viewport

    chromium = find_chromium()
    assert chromium, "headless Chromium is needed (make test installs Debian's chromium)"
    out, figures, corpus = study
    # long names of long words (a break-all rule would split some of them at a line's end)
    for long in ("distributions_of_consecutive_transitions_between_navigational_tools",
                 "interquartile_intervals_overlapping_repetitions_configurations_conditions",
                 "normalised_orientation_scores_grouped_by_conditions_worlds_families"):
        _png(figures / "10_lens0_surface" / f"{long}.png")
    page_path = index_page.build_index(out, figures, corpus=corpus).path
    with start_chromium(chromium, tmp_path / "chromium", tmp_path / "chromium.log") as page:
        set_viewport(page, 1280, 720)
        page.navigate(page_path.as_uri())
        state = page.wait_for(PAGE_LAYOUT, 30, "the page to load",
                              until=lambda s: bool(s) and s["images"] > 0)
    assert state["images"] == 6 and state["broken"] == 0, state
    assert state["width"] <= 1280, state  # nothing scrolls sideways
    for width, height in state["figs"]:
        assert width >= 360, state["figs"]  # three to a row at most: readable when projected
        assert height <= index_page.THUMB_HEIGHT, state["figs"]
    assert state["split"] == [], state  # captions wrap between words only
