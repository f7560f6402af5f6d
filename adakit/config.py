"""Every path adakit reads or writes, in one place.

The project root is found from the package location (an editable install inside a checkout);
``ADAKIT_HOME`` overrides it, e.g. for a pip-installed adakit working on another folder.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def _find_root() -> Path:
    env = os.environ.get("ADAKIT_HOME")
    if env:
        return Path(env).expanduser().resolve()
    candidate = PACKAGE_DIR.parent
    if (candidate / "pyproject.toml").exists():
        return candidate
    return Path.cwd().resolve()


ROOT = _find_root()
DATA = ROOT / "data"
WORLDS = DATA / "worlds"
RUNS = DATA / "runs"
JUDGMENTS = DATA / "judgments"
PROCESSED = DATA / "processed"
#: Human labels made in the explorer's labelling mode (Appendix C.3), read by notebook 13.
LABELS = DATA / "labels"
CACHE = DATA / "cache"
#: The shipped reference corpus whose measured prompt and reply sizes `adakit launch --plan`
#: uses to estimate a study's tokens and cost.
REFERENCE_RUNS = DATA / "reference" / "local-v4" / "runs"
FIGURES = ROOT / "figures"
#: Sub-folder of the figures folder and of ``PROCESSED`` for notebook runs whose parameters
#: differ from their study's: ``figures/adhoc/<notebook>-<digest>/`` (see adakit.workbench.guard).
ADHOC = "adhoc"
#: Environment variable naming the study profile whose parameters a notebook's outputs belong
#: to (the pipeline sets it when it executes a profile's notebooks).
PROFILE_ENV = "ADAKIT_PROFILE"
#: The profile a notebook run outside the pipeline is compared with: the default study.
DEFAULT_PROFILE = "quick"
STUDIES = ROOT / "studies"
NOTEBOOKS = ROOT / "notebooks"
PROMPTS = PACKAGE_DIR / "prompts"

WORLDS_MANIFEST = PACKAGE_DIR / "apparatus" / "worlds.yaml"
MODELS_REGISTRY = PACKAGE_DIR / "llm" / "models.yaml"
TASKS_FILE = PACKAGE_DIR / "apparatus" / "tasks.yaml"
CONDITIONS_FILE = PACKAGE_DIR / "apparatus" / "conditions.yaml"


def worlds_dir() -> Path:
    """Where downloaded worlds live (``ADAKIT_WORLDS`` overrides, e.g. a shared cache)."""
    env = os.environ.get("ADAKIT_WORLDS")
    return Path(env).expanduser().resolve() if env else WORLDS


def cache_dir() -> Path:
    """Where the model response cache lives (``ADAKIT_CACHE`` overrides)."""
    env = os.environ.get("ADAKIT_CACHE")
    return Path(env).expanduser().resolve() if env else CACHE


def figures_dir() -> Path:
    """Where figures are saved (``ADAKIT_FIGURES`` overrides, e.g. one folder per profile)."""
    env = os.environ.get("ADAKIT_FIGURES")
    return Path(env).expanduser().resolve() if env else FIGURES


def profile() -> str:
    """The study profile whose parameters count as "the study's" (``ADAKIT_PROFILE``, else
    :data:`DEFAULT_PROFILE`)."""
    return os.environ.get(PROFILE_ENV, "").strip() or DEFAULT_PROFILE


def shown(path: str | os.PathLike[str]) -> str:
    """A path as a reader should see it: relative to the project root when inside it."""
    p = Path(path)
    try:
        return p.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(p)


def known_corpora() -> list[str]:
    """The corpus folders on disk, as :func:`shown` paths: every folder of run files under
    ``data/runs`` (two levels deep) and each shipped dataset's ``runs`` folder (datasets may sit
    one folder down, as the scaffold ablation's variants do)."""
    found: list[Path] = []
    if RUNS.is_dir():
        for folder in sorted([RUNS, *RUNS.glob("*"), *RUNS.glob("*/*")]):
            if folder.is_dir() and next(folder.glob("*.jsonl"), None) is not None:
                found.append(folder)
    reference = DATA / "reference"
    found += sorted(p for p in [*reference.glob("*/runs"), *reference.glob("*/*/runs")] if p.is_dir())
    return [shown(p) for p in found]


def resolve(path: str | os.PathLike[str]) -> Path:
    """A path as given if absolute, else relative to the project root (``ROOT``).

    Notebooks take paths as parameters relative to the project root, so they mean the same
    file whatever folder the kernel runs in; ``~`` is expanded first.
    """
    p = Path(path).expanduser()
    return p if p.is_absolute() else ROOT / p
