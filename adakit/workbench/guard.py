"""The guard every notebook runs in the cell right after its parameters (issue 26).

A notebook re-executed by hand (``papermill NB OUT -p corpus ...``) must neither run on its
defaults because a parameter name was misspelled, nor overwrite the study's figures with
those of another corpus. :func:`check` therefore, before any cell of the notebook's work runs:

1. fails when papermill passed a name the notebook does not declare (papermill itself only
   logs "Passed unknown parameter" and goes on), naming the parameters it has;
2. fails in one line when a corpus folder does not exist, naming the corpora on disk;
3. compares the notebook's parameters with its study's (the declared defaults overlaid with
   the profile's ``studies/<profile>.params.yaml``, profile ``ADAKIT_PROFILE`` or ``quick``)
   and, when they differ, sends the notebook's figures and tables to a folder of their own,
   ``figures/adhoc/<notebook>-<digest>/`` and ``data/processed/adhoc/<notebook>-<digest>/``
   (the digest is of the parameters), with a ``parameters.json`` saying what ran; it prints
   where the outputs go either way.

Why a function in the kernel rather than a papermill engine: the guard then works however the
notebook is run (papermill's CLI or API, nbclient, nbval, JupyterLab's "Run all") without an
``--engine`` flag or an installed entry point. It learns which names papermill passed from
the cell papermill injects (its source starts with ``# Parameters``), found in the kernel's
input history, so names a person defines in other cells of a live session are never taken
for parameters. The declared parameters come from the source notebook's ``parameters`` cell.

A notebook whose ``figure_prefix`` is set to a folder other than its own has chosen where its
outputs go: they go there, never to ``adhoc/``.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adakit import config
from adakit.study.pipeline import declared_parameters, study_parameters

#: The first line of the cell papermill injects after the parameters cell.
INJECTED_MARK = "# Parameters"
#: The parameter naming a notebook's folder under figures/ and data/processed/.
PREFIX = "figure_prefix"


class ParameterError(ValueError):
    """A notebook parameter that cannot work. A notebook shows only its one-line message
    (IPython renders :meth:`_render_traceback_` instead of a traceback)."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


@dataclass(frozen=True)
class Outputs:
    """Where one notebook run writes: ``prefix`` is its folder under the figures folder and
    under ``data/processed``; ``differs`` names the parameters that differ from its study's."""

    notebook: str
    profile: str
    prefix: str
    parameters: dict[str, Any] = field(default_factory=dict)
    differs: tuple[str, ...] = ()
    #: False for a notebook without a ``figure_prefix`` (it writes no figures or tables)
    writes: bool = True

    @property
    def adhoc(self) -> bool:
        """True when the outputs go to an ``adhoc/`` folder of their own."""
        return self.prefix.startswith(f"{config.ADHOC}/")

    @property
    def figures(self) -> Path:
        """The folder this run's figures go to."""
        return config.figures_dir() / self.prefix

    @property
    def tables(self) -> Path:
        """The folder this run's tables go to (created on first use)."""
        path = config.PROCESSED / self.prefix
        path.mkdir(parents=True, exist_ok=True)
        return path

    def figure(self, name: str) -> str:
        """The name to give :func:`adakit.figures.save_figure` for figure ``name``."""
        return f"{self.prefix}/{name}"

    def describe(self) -> str:
        """Where the outputs go and why, in one line."""
        if self.differs:
            why = (f"parameters differ from the {self.profile} study's "
                   f"({', '.join(self.differs)})")
        else:
            why = f"the {self.profile} study's parameters"
        if not self.writes:
            return f"{self.notebook}: {why}"
        if self.adhoc:
            where = "figures and tables go to a folder of this run's own"
        elif self.differs:
            where = f"{PREFIX} chose the folder"
        else:
            where = "the study's own folders"
        return (f"{self.notebook}: {why}; {where}: figures -> {config.shown(self.figures)}/, "
                f"tables -> {config.shown(config.PROCESSED / self.prefix)}/")


def source_notebook(notebook: str) -> Path:
    """The source of a numbered notebook: under the project's ``notebooks/``, else under the
    checkout's that holds this package (e.g. with ``ADAKIT_HOME`` set to another folder)."""
    name = notebook if notebook.endswith(".ipynb") else f"{notebook}.ipynb"
    for folder in (config.NOTEBOOKS, config.PACKAGE_DIR.parent / "notebooks"):
        if (folder / name).exists():
            return folder / name
    raise FileNotFoundError(f"no notebook {name} in {config.shown(config.NOTEBOOKS)}")


def injected_parameters(history: Sequence[str] | None) -> dict[str, Any]:
    """The names and values papermill injected, from the latest injected cell in a kernel's
    input history (IPython's ``In``); empty when there is none (a notebook run by hand)."""
    for source in reversed(list(history or [])):
        if isinstance(source, str) and source.lstrip().startswith(INJECTED_MARK):
            out: dict[str, Any] = {}
            for node in ast.parse(source).body:
                if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                        and isinstance(node.targets[0], ast.Name):
                    try:
                        out[node.targets[0].id] = ast.literal_eval(node.value)
                    except ValueError:
                        out[node.targets[0].id] = None
            return out
    return {}


def _plain(value: Any) -> Any:
    """A parameter value with tuples as lists (a YAML list and a Python tuple compare equal)."""
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def digest(parameters: Mapping[str, Any]) -> str:
    """Eight hex digits naming a set of parameter values (the same values, the same digest)."""
    text = json.dumps(_plain(dict(parameters)), sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def unknown_message(notebook: str, unknown: Sequence[str], declared: Sequence[str]) -> str:
    """The one-line refusal of parameter names a notebook does not declare."""
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, declared, n=1)
        hints.append(f"{name} (did you mean {close[0]}?)" if close else name)
    s = "s" if len(unknown) > 1 else ""
    return (f"{notebook} has no parameter{s} {', '.join(hints)}: nothing was run. Its "
            f"parameters: {', '.join(declared)} (papermill --help-notebook "
            f"notebooks/{notebook}.ipynb describes them)")


def check_corpora(values: Mapping[str, Any], names: Sequence[str]) -> None:
    """Raise :class:`ParameterError` in one line when a corpus folder named by one of the
    parameters ``names`` does not exist (an empty value means none and passes), naming the
    corpora on disk."""
    for name in names:
        value = values.get(name)
        folders = [value] if isinstance(value, str | Path) else list(value or [])
        for folder in folders:
            if not str(folder).strip():
                continue
            path = config.resolve(folder)
            if path.exists():
                continue
            here = config.known_corpora()
            listed = (f"corpora here: {', '.join(here)}" if here else
                      "no corpus here yet: `make study` launches the quick study")
            raise ParameterError(f"{name}: no corpus at {config.shown(path)}; {listed}")


def check(namespace: MutableMapping[str, Any], notebook: str,
          corpora: Sequence[str] = ("corpus",), quiet: bool = False) -> Outputs:
    """Check a notebook's parameters before its work runs and say where its outputs go.

    ``namespace`` is the notebook's ``globals()``; ``notebook`` its name (``"12_lens2_action_policy"``);
    ``corpora`` the parameters holding corpus folders that must exist. Raises
    :class:`ParameterError` for a passed name the notebook does not declare, or for a missing
    corpus; returns the :class:`Outputs` of the run (printed unless ``quiet``).
    """
    name = notebook.removesuffix(".ipynb")
    path = source_notebook(name)
    declared = declared_parameters(path)
    passed = injected_parameters(namespace.get("In"))
    unknown = [n for n in passed if n not in declared]
    if unknown:
        raise ParameterError(unknown_message(name, unknown, list(declared)))
    values = {n: namespace.get(n, default) for n, default in declared.items()}
    check_corpora(values, [c for c in corpora if c in declared])
    profile = config.profile()
    study = study_parameters(path, profile)
    differs = tuple(n for n in declared if _plain(values[n]) != _plain(study[n]))
    writes = PREFIX in declared
    prefix = str(values.get(PREFIX) or name)
    if writes and differs and PREFIX not in differs:  # (a changed figure_prefix chose its folder)
        prefix = f"{config.ADHOC}/{name}-{digest(values)}"
    outputs = Outputs(name, profile, prefix, values, differs, writes)
    if outputs.adhoc:
        record = {"notebook": name, "profile": profile,
                  "differs": {n: {"study": _plain(study[n]), "here": _plain(values[n])}
                              for n in differs},
                  "parameters": _plain(values)}
        text = json.dumps(record, indent=1, default=str, ensure_ascii=False) + "\n"
        for folder in (outputs.figures, outputs.tables):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "parameters.json").write_text(text, encoding="utf-8")
    if not quiet:
        print(outputs.describe())
    return outputs


__all__ = ["Outputs", "ParameterError", "check", "check_corpora", "digest",
           "injected_parameters", "source_notebook", "unknown_message"]
