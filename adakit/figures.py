"""One look for every lens figure, and the single place figures are written.

``use_style()`` applies the package style (``adakit.mplstyle``: a colour-blind-safe cycle,
light grid, legible small fonts). ``TOOL_COLORS`` fixes one colour per tool so a tool looks the
same in every view, and :func:`model_color` one colour per model across every figure of a study;
``condition_order`` / ``model_order`` / ``task_order`` put axis values in the
paper's order. ``save_figure(fig, name)`` writes PNG and SVG files under ``adakit.config.FIGURES``
named by notebook and view, e.g. ``save_figure(fig, "10_lens0_surface/fig4_activity")``.
"""

from __future__ import annotations

import os
import sys
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

import matplotlib

# A headless process (tests, papermill without a display, CI) draws with Agg; an interactive
# session or a Jupyter kernel (which sets MPLBACKEND) keeps its own backend.
if (
    not os.environ.get("MPLBACKEND")
    and not os.environ.get("DISPLAY")
    and not os.environ.get("WAYLAND_DISPLAY")
    and "ipykernel" not in sys.modules
    and sys.platform.startswith("linux")
):
    matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from adakit import config  # noqa: E402

STYLE_PATH = Path(__file__).resolve().parent / "adakit.mplstyle"

#: Okabe & Ito's colour-blind-safe palette, in the order of the style's colour cycle.
PALETTE: list[str] = [
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#56B4E9",  # sky blue
    "#D55E00",  # vermillion
    "#F0E442",  # yellow
    "#000000",  # black
]

#: One fixed colour per tool (Table 1 abbreviations), the same in every lens.
TOOL_COLORS: dict[str, str] = {
    "OVW": "#0072B2",
    "PKR": "#E69F00",
    "EXP": "#009E73",
    "MEM": "#CC79A7",
    "BKM": "#56B4E9",
    "HNT": "#D55E00",
    "CON": "#000000",
}
#: Colours of the imported agents' action classes outside Ada's read-only set (issue 16).
ACT_COLORS: dict[str, str] = {
    "EDT": "#8C510A",
    "EXE": "#7F7F7F",
    "SUB": "#01665E",
}
#: Every canonical tool's colour: Ada's seven, then the action classes.
CANONICAL_COLORS: dict[str, str] = {**TOOL_COLORS, **ACT_COLORS}
#: Colour for errors (tool error, unknown tool, malformed turn) and coach messages.
ERROR_COLOR = "#B2182B"
COACH_COLOR = "#6A3D9A"
NEUTRAL_COLOR = "#888888"

#: The paper's condition order; conditions not listed follow alphabetically.
CONDITION_ORDER: list[str] = ["natural", "prior_suppression", "budget_pressure", "combined"]
CONDITION_LABELS: dict[str, str] = {
    "natural": "Natural",
    "prior_suppression": "Prior Suppr.",
    "budget_pressure": "Budget Pres.",
    "combined": "Combined",
    "coach_judge": "Coach",
}
#: The paper's model order (Figures 4-7); models not listed follow alphabetically.
MODEL_ORDER: list[str] = ["GPT-4.1", "GPT-4o", "DeepSeek-V3.2", "Qwen3.5-397B", "Qwen3-235B"]
#: Task families in the paper's order, matched by a key word in the family id.
TASK_KEYS: list[tuple[str, str]] = [
    ("arch", "Architecture"),
    ("asr", "ASR inference"),
    ("feature", "Feature tracing"),
    ("risk", "Risk review"),
]

_style_applied = False


def use_style(force: bool = False) -> None:
    """Apply the adakit figure style (once per process unless ``force``)."""
    global _style_applied
    if _style_applied and not force:
        return
    plt.style.use(str(STYLE_PATH))
    _style_applied = True


def _ordered(values: Iterable[object], preferred: Sequence[str], key=None) -> list:
    seen: list = []
    for v in values:
        if v is None or (isinstance(v, float) and v != v):  # skip None / NaN
            continue
        if v not in seen:
            seen.append(v)
    rank = key or (lambda v: preferred.index(v) if v in preferred else len(preferred))
    return sorted(seen, key=lambda v: (rank(v), str(v)))


def condition_order(values: Iterable[object]) -> list:
    """Distinct conditions in the paper's order (natural, prior suppression, budget, combined,
    then any others alphabetically)."""
    return _ordered(values, CONDITION_ORDER)


def model_order(values: Iterable[object]) -> list:
    """Distinct models: the paper's four in its order first, then the rest alphabetically."""
    return _ordered(values, MODEL_ORDER)


def _task_rank(value: object) -> int:
    text = str(value).lower()
    for i, (key, _) in enumerate(TASK_KEYS):
        if key in text:
            return i
    return len(TASK_KEYS)


def task_order(values: Iterable[object]) -> list:
    """Distinct task families in the paper's order (architecture, ASR, feature, risk)."""
    return _ordered(values, [], key=_task_rank)


def tool_order(values: Iterable[object] | None = None) -> list[str]:
    """Tools in Table 1 order (OVW, PKR, EXP, MEM, BKM, HNT, CON), then the imported agents'
    classes (EDT, EXE, SUB); others follow."""
    base = list(CANONICAL_COLORS)
    if values is None:
        return base
    return _ordered(values, base)


def order_for(column: str, values: Iterable[object]) -> list:
    """The display order of ``values`` for a grouping column (condition/model/task/tool)."""
    if column == "condition":
        return condition_order(values)
    if column == "model":
        return model_order(values)
    if column == "task":
        return task_order(values)
    if column == "tool":
        return tool_order(values)
    return _ordered(values, [])


def condition_label(name: object) -> str:
    """A short display label for a condition id."""
    text = str(name)
    return CONDITION_LABELS.get(text, text.replace("_", " ").title())


def task_label(name: object) -> str:
    """A short display label for a task family id."""
    rank = _task_rank(name)
    return TASK_KEYS[rank][1] if rank < len(TASK_KEYS) else str(name).replace("_", " ")


def label_for(column: str, value: object) -> str:
    """The display label of one value of a grouping column."""
    if column == "condition":
        return condition_label(value)
    if column == "task":
        return task_label(value)
    if column == "turn_bound":
        return f"N = {value}"
    return str(value)


def palette_for(values: Sequence[object]) -> dict:
    """Colours for a list of categories, in order; tools keep their fixed colours. For models
    use :func:`model_colors` (a model's colour must not depend on its neighbours)."""
    if values and all(v in CANONICAL_COLORS for v in values):
        return {v: CANONICAL_COLORS[v] for v in values}
    colors = list(PALETTE)
    if len(values) > len(colors):
        cmap = matplotlib.colormaps["tab20"]
        colors += [matplotlib.colors.to_hex(cmap(i % 20)) for i in range(len(values))]
    return {v: colors[i] for i, v in enumerate(values)}


#: Fixed colours of the models the paper and the shipped registry name (keys lower-case; the
#: paper's display names and the registry's ids both listed). Temperature variants (``-t07``)
#: are separate models and get their own colour.
MODEL_COLORS: dict[str, str] = {
    "gpt-4.1": "#0072B2",
    "gpt-4o": "#E69F00",
    "deepseek-v3.2": "#009E73",
    "qwen3.5-397b": "#CC79A7",
    "qwen3.5-397b-a17b": "#CC79A7",
    "qwen3-235b": "#D55E00",
    "qwen2.5-coder-1.5b": "#56B4E9",
    "qwen2.5-coder-0.5b": "#882255",
    "smollm2-135m": "#000000",
    "qwen2.5-coder-1.5b-t07": "#1F3A93",
    "smollm2-135m-t07": "#7F7F7F",
    "smollm2-135m-t10": "#BCBD22",
    "deepseek-v3": "#8C564B",
    "glm-5": "#17BECF",
    "kimi-k2.5": "#9467BD",
    "minimax-m2.7": "#8C510A",
    "baseline-skimmer": "#A6761D",
    "baseline-tracer": "#44AA99",
    "baseline-close_reader": "#E7298A",
}
#: Colours for models outside :data:`MODEL_COLORS`, chosen by a digest of the name.
_SPARE_MODEL_COLORS: list[str] = [
    matplotlib.colors.to_hex(matplotlib.colormaps["tab20"](i)) for i in range(20)
]


def model_color(model: object) -> str:
    """The one colour of ``model`` in every figure: fixed for the models the paper and the
    registry name, else picked from a spare palette by a digest of the name (stable across
    processes, independent of which other models a figure shows; two unlisted models may
    share a colour)."""
    name = str(model).strip()
    if not name:
        raise ValueError("model_color needs a model name")
    fixed = MODEL_COLORS.get(name.lower())
    if fixed is not None:
        return fixed
    digest = zlib.crc32(name.encode("utf-8"))
    return _SPARE_MODEL_COLORS[digest % len(_SPARE_MODEL_COLORS)]


def model_colors(models: Iterable[object]) -> dict:
    """``{model: model_color(model)}`` for the distinct models, in :func:`model_order`."""
    return {m: model_color(m) for m in model_order(models)}


def colors_for(column: str | None, values: Iterable[object]) -> dict:
    """Colours of the values of a grouping column, in display order: a model keeps its
    :func:`model_color`, a tool its fixed colour, other columns take the palette in order."""
    if column == "model":
        return model_colors(values)
    if column is None:
        return {None: PALETTE[0]}
    return palette_for(order_for(column, values))


def save_figure(
    fig: Figure,
    name: str,
    folder: str | Path | None = None,
    formats: Sequence[str] = ("png", "svg"),
) -> list[Path]:
    """Write ``fig`` as ``<folder>/<name>.<fmt>`` for each format and return the paths.

    ``name`` is a relative path such as ``"10_lens0_surface/fig4_activity"``; ``folder``
    defaults to ``adakit.config.FIGURES``. Missing folders are created.
    """
    if not isinstance(fig, Figure):
        raise TypeError(f"save_figure needs a matplotlib Figure, got {type(fig).__name__}")
    if not name or not str(name).strip():
        raise ValueError("save_figure needs a non-empty name, e.g. '10_lens0_surface/fig4'")
    rel = PurePosixPath(str(name).replace("\\", "/"))
    if rel.is_absolute() or ".." in rel.parts:
        raise ValueError(f"figure name must be a relative path inside the figures folder: {name!r}")
    if not formats:
        raise ValueError("save_figure needs at least one format")
    base = Path(folder) if folder is not None else config.figures_dir()
    written: list[Path] = []
    for fmt in formats:
        fmt = fmt.lower().lstrip(".")
        if fmt not in fig.canvas.get_supported_filetypes():
            raise ValueError(f"unsupported figure format {fmt!r}")
        path = base / f"{rel}.{fmt}"
        path.parent.mkdir(parents=True, exist_ok=True)
        metadata = {"Date": None} if fmt in ("svg", "pdf") else None
        fig.savefig(path, format=fmt, metadata=metadata)
        written.append(path)
    return written
