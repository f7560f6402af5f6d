"""The study's index page, ``data/study/<profile>/index.html``: the page a class starts from.

It summarises the corpus (runs, models, worlds), gives a "start here" order through the
notebooks, and holds one section per notebook: its title, links to the executed notebook
(as HTML and as ``.ipynb``) and the figures it wrote, as thumbnails with readable captions.
Figures under ``adhoc/`` (re-executions with other parameters) are not the study's and are
only counted.
"""

from __future__ import annotations

import html
import json
import os
import re
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from adakit import config

#: The order a class reads the notebooks in (by number), and why each comes there; notebooks
#: not listed follow in number order.
START_HERE: tuple[tuple[str, str], ...] = (
    ("00", "the whole method on one run, with two exercises"),
    ("30", "replay any run of the study turn by turn"),
    ("10", "lens 0: how much each run did"),
    ("11", "lens 1: when it did it"),
    ("12", "lens 2: how it moved, transition by transition"),
    ("14", "lens 4: where in the code it looked"),
    ("13", "lens 3: what the judges made of its conclusion"),
    ("15", "which differences are larger than run-to-run noise"),
    ("20", "RQ3: does a coach's intervention help"),
    ("21", "what if, at turn K? forks of one run against placebo forks"),
)
#: A thumbnail shows at most this height (CSS px); a taller figure shows its top.
THUMB_HEIGHT = 420


@dataclass
class IndexPage:
    """What :func:`build_index` wrote: the page, the notebooks' HTML pages, and the number
    of study figures it shows."""

    path: Path
    pages: list[Path] = field(default_factory=list)
    images: int = 0


@dataclass
class Section:
    """One notebook's part of the page."""

    stem: str
    title: str
    html_page: str | None = None  # link to the executed notebook as HTML (relative)
    notebook: str | None = None  # link to the executed .ipynb (relative)
    figures: list[Path] = field(default_factory=list)


def notebook_title(nb: dict[str, Any], fallback: str) -> str:
    """The first Markdown heading of a notebook (its title), else ``fallback``."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            m = re.search(r"^#\s+(.+)$", "".join(cell.get("source", "")), re.M)
            if m:
                return m.group(1).strip()
    return fallback


def caption(png: Path, section: Path) -> str:
    """A figure's caption: its path under its notebook's folder, in words
    (``by_model/tag_shares.png`` -> "by model · tag shares")."""
    parts = png.relative_to(section).with_suffix("").parts
    return " · ".join(re.sub(r"[_-]+", " ", p).strip() for p in parts)


def png_size(path: Path) -> tuple[int, int] | None:
    """A PNG's (width, height) from its header; None for a file that is not a PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return struct.unpack(">II", head[16:24])


def corpus_summary(runs: pd.DataFrame) -> dict[str, Any]:
    """Runs (finished of all), and runs per model (with its kind), world, task and condition."""
    if runs.empty:
        return {"runs": 0, "finished": 0, "models": {}, "worlds": {}, "tasks": {},
                "conditions": {}}
    kinds = runs.groupby("model")["model_kind"].first()
    models = {m: (str(kinds[m]), int(n)) for m, n in runs["model"].value_counts().items()}

    def counts(col: str) -> dict[str, int]:
        return {str(k): int(v) for k, v in runs[col].value_counts().items()}

    return {"runs": len(runs), "finished": int(runs["finished"].sum()), "models": models,
            "worlds": counts("world"), "tasks": counts("task"),
            "conditions": counts("condition")}


def start_order(stems: Sequence[str]) -> list[tuple[str, str]]:
    """The notebooks ``stems`` in :data:`START_HERE` order, each with why it comes there
    (empty for a notebook the order does not list)."""
    by_number = {s[:2]: s for s in stems}
    ordered = [(by_number[n], why) for n, why in START_HERE if n in by_number]
    listed = {s for s, _ in ordered}
    return ordered + [(s, "") for s in sorted(stems) if s not in listed]


def _sections(out: Path, figures: Path) -> tuple[list[Section], list[Path]]:
    """The sections (one per executed notebook, then one per other figure folder) and the
    ad-hoc figures left out."""
    sections: dict[str, Section] = {}
    for nb_path in sorted((out / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        sections[nb_path.stem] = Section(
            nb_path.stem, notebook_title(nb, nb_path.stem),
            html_page=f"html/{nb_path.stem}.html", notebook=f"notebooks/{nb_path.name}")
    adhoc: list[Path] = []
    for png in sorted(figures.rglob("*.png")) if figures.exists() else []:
        top = png.relative_to(figures).parts[0]
        if top == config.ADHOC:
            adhoc.append(png)
            continue
        if png.parent == figures:
            top = ""
        if top not in sections:
            sections[top] = Section(top, _source_title(top) if top else "other figures")
        sections[top].figures.append(png)
    return sorted(sections.values(), key=lambda s: (s.stem == "", s.stem)), adhoc


def _source_title(stem: str) -> str:
    """The title of notebook ``stem`` in the notebooks folder, else the stem in words."""
    source = config.NOTEBOOKS / f"{stem}.ipynb"
    words = stem.replace("_", " ")
    if not source.exists():
        return words
    return notebook_title(json.loads(source.read_text(encoding="utf-8")), words)


def _e(text: object) -> str:
    return html.escape(str(text))


def _summary_html(summary: dict[str, Any], corpora: Sequence[str]) -> str:
    if not summary["runs"]:
        return "<p>No runs found in the study's corpus.</p>"
    models = "".join(f"<tr><td>{_e(m)}</td><td>{_e(kind)}</td><td>{n}</td></tr>"
                     for m, (kind, n) in summary["models"].items())

    def listing(key: str) -> str:
        return ", ".join(f"{_e(k)} ({n})" for k, n in summary[key].items())

    return (f"<p><strong>{summary['runs']} runs</strong> ({summary['finished']} finished) from "
            f"{_e(', '.join(corpora))}.</p>"
            f'<table class="models"><tr><th>model</th><th>kind</th><th>runs</th></tr>{models}'
            "</table>"
            f"<p><strong>{len(summary['worlds'])} worlds:</strong> {listing('worlds')}<br>"
            f"<strong>tasks:</strong> {listing('tasks')}<br>"
            f"<strong>conditions:</strong> {listing('conditions')}</p>")


def _figure_html(png: Path, section_dir: Path, out: Path) -> str:
    rel = Path(os.path.relpath(png.resolve(), out.resolve())).as_posix()
    size = png_size(png)
    tall = size is not None and size[1] > 1.5 * size[0]
    note = ' <span class="tall">(tall: its top is shown, open it for all)</span>' if tall else ""
    text = caption(png, section_dir)
    return (f'<figure><a href="{_e(rel)}" title="{_e(png.name)}"><img src="{_e(rel)}" '
            f'alt="{_e(text)}"></a><figcaption>{_e(text)}{note}</figcaption></figure>')


def _section_html(s: Section, figures: Path, out: Path) -> str:
    links = " · ".join(f'<a href="{_e(href)}">{label}</a>' for href, label in
                       ((s.html_page, "the executed notebook"), (s.notebook, ".ipynb"))
                       if href)
    folder = figures / s.stem if s.stem else figures
    body = "".join(_figure_html(p, folder, out) for p in s.figures)
    gallery = f'<div class="gallery">{body}</div>' if body else ""
    n = len(s.figures)
    count = f"{n} figure{'s' * (n != 1)}" if n else "no figures"
    return (f'<section id="{_e(s.stem or "other")}"><h3>{_e(s.title)}</h3>'
            f'<p class="links">{links + " · " if links else ""}{count}</p>{gallery}</section>')


def render_index(out: Path, figures: Path, runs: pd.DataFrame,
                 corpora: Sequence[str] = ()) -> tuple[str, int]:
    """The index page's HTML and the number of figures it shows (nothing is written)."""
    sections, adhoc = _sections(out, figures)
    titles = {s.stem: s.title for s in sections}
    start = "".join(
        f'<li><a href="#{_e(stem)}">{_e(titles.get(stem, stem))}</a>'
        f"{' — ' + _e(why) if why else ''}</li>"
        for stem, why in start_order([s.stem for s in sections if s.notebook]))
    body = "\n".join(_section_html(s, figures, out) for s in sections)
    n_fig = sum(len(s.figures) for s in sections)
    left_out = (f"<p>{len(adhoc)} figures of ad-hoc re-executions (under "
                f"<code>{_e(config.ADHOC)}/</code>) are not the study's and are not shown.</p>"
                if adhoc else "")
    page = _PAGE.format(
        title=_e(f"adakit study: {out.name}"), when=time.strftime("%Y-%m-%d %H:%M"),
        summary=_summary_html(corpus_summary(runs), corpora),
        start=start or "<li>(no executed notebooks)</li>", n_fig=n_fig, sections=body,
        adhoc=left_out, thumb=THUMB_HEIGHT)
    return page, n_fig


def build_index(out: Path, figures: Path | None = None,
                corpus: str | Path | Sequence[str | Path] | None = None) -> IndexPage:
    """Convert the executed notebooks in ``out/notebooks`` to HTML and write
    ``out/index.html`` (see the module docstring).

    ``figures`` defaults to the figures folder; ``corpus`` names the folders of runs the
    summary counts (``adakit.study.pipeline.profile_corpus`` gives a profile's).
    """
    from nbconvert import HTMLExporter

    out = Path(out)
    html_dir = out / "html"
    html_dir.mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter()
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    pages = []
    for nb_path in sorted((out / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        body, _ = exporter.from_filename(str(nb_path))
        page = html_dir / (nb_path.stem + ".html")
        page.write_text(body, encoding="utf-8")
        pages.append(page)
    folders = _corpus_folders(corpus)
    runs = _load_runs(folders)
    figures = Path(figures) if figures is not None else config.figures_dir()
    text, n_fig = render_index(out, figures, runs, [config.shown(f) for f in folders])
    index = out / "index.html"
    index.write_text(text, encoding="utf-8")
    return IndexPage(index, pages, n_fig)


def _corpus_folders(corpus: str | Path | Sequence[str | Path] | None) -> list[Path]:
    """The folders of runs ``corpus`` names (none for None)."""
    if corpus is None:
        return []
    items = [corpus] if isinstance(corpus, str | Path) else list(corpus)
    return [config.resolve(c) for c in items]


def _load_runs(folders: Sequence[Path]) -> pd.DataFrame:
    from adakit.record import load_corpus

    frames = [load_corpus(f, cache=False).runs for f in folders if f.exists()]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font-family: system-ui, sans-serif; font-size: 17px; line-height: 1.45;
       margin: 2rem auto; max-width: 1240px; padding: 0 1rem; color: #1f1f1f; }}
h3 {{ margin-top: 2.2rem; border-bottom: 1px solid #ccc; }}
table.models {{ border-collapse: collapse; }}
table.models td, table.models th {{ padding: .15rem .8rem; border-bottom: 1px solid #e4e4e4;
       text-align: left; }}
.gallery {{ display: grid; grid-template-columns: repeat(auto-fill, minmax(370px, 1fr));
       gap: 1rem; }}
figure {{ margin: 0; border: 1px solid #ddd; padding: .5rem; background: #fafafa; }}
img {{ width: 100%; max-height: {thumb}px; object-fit: cover; object-position: top; }}
figcaption {{ font-size: .95rem; color: #333; overflow-wrap: break-word; }}
.tall {{ color: #666; font-size: .85rem; }}
</style></head>
<body>
<h1>{title}</h1>
<p>Built {when}. Each notebook was executed with papermill on this study's corpus; click a
figure to see it full size.</p>
<h2>The corpus</h2>
{summary}
<h2>Start here</h2>
<ol class="start">
{start}
</ol>
<h2>Notebooks and their figures ({n_fig})</h2>
{sections}
{adhoc}
<p id="image-check">Checking figures...</p>
<script>
// Reports, on the page itself, how many figures failed to load (also read by the tests).
window.addEventListener("load", function () {{
  var imgs = Array.prototype.slice.call(document.images);
  var broken = imgs.filter(function (i) {{ return !i.complete || i.naturalWidth === 0; }});
  var p = document.getElementById("image-check");
  p.dataset.images = imgs.length;
  p.dataset.broken = broken.length;
  p.textContent = broken.length ? broken.length + " of " + imgs.length + " figures failed to load: " +
    broken.map(function (i) {{ return i.getAttribute("src"); }}).join(", ")
    : "All " + imgs.length + " figures loaded.";
}});
</script>
</body></html>
"""
