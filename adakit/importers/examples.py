"""The example trajectories that ship with adakit, one small set per format, and the import
of them into a corpus folder (notebook 40 reads them beside Ada's runs).

Every example was written by hand for adakit, in the shape of its format and of one or two of
its versions (they are also the importers' test fixtures, under ``tests/fixtures``); none is
taken from another project. Most worked on the flask world; an aider history sits in its own
small repository (the world found beside it), so it is imported without one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from adakit import config
from adakit.importers.batch import ImportReport, import_paths

#: Where the examples are: the source tree adakit runs from (not ``config.ROOT``, which
#: ``ADAKIT_HOME`` may move to another folder for the data).
SOURCE = config.PACKAGE_DIR.parent


@dataclass(frozen=True)
class Example:
    """One bundled example: a file or folder (relative to the source tree, :data:`SOURCE`) and
    whether it worked on the world the import names (``on_world``) or in its own repository
    beside it."""

    path: str
    on_world: bool = True


_FIXTURES = "tests/fixtures"
#: The bundled examples of each format, in the order notebook 40 imports them.
EXAMPLES: dict[str, tuple[Example, ...]] = {
    "swe-agent": (Example(f"{_FIXTURES}/trajectories/swe_agent"),),
    "mini-swe-agent": (Example(f"{_FIXTURES}/trajectories/mini_swe_agent"),),
    "openhands": (Example(f"{_FIXTURES}/trajectories/openhands"),),
    "generic": (Example(f"{_FIXTURES}/trajectories/generic"),),
    "claude-code": (Example(f"{_FIXTURES}/agent_cli/claude_code"),
                    Example(f"{_FIXTURES}/agent_cli/claude_code_parallel")),
    "codex": (Example(f"{_FIXTURES}/agent_cli/codex"),),
    "inspect": (Example(f"{_FIXTURES}/agent_cli/inspect"),),
    "atif": (Example(f"{_FIXTURES}/agent_cli/atif"),),
    "aider": (Example(f"{_FIXTURES}/agent_cli/aider/v0.40"),
              Example(f"{_FIXTURES}/agent_cli/aider/v0.86", on_world=False)),
}


def example_paths(fmt: str) -> list[Path]:
    """The bundled example files or folders of format ``fmt``."""
    if fmt not in EXAMPLES:
        raise ValueError(f"no bundled examples of {fmt!r}; there are: {', '.join(EXAMPLES)}")
    return [SOURCE / e.path for e in EXAMPLES[fmt]]


def import_examples(out: str | Path, formats: list[str] | tuple[str, ...] | None = None,
                    world: str | None = "flask", study: str = "imported",
                    model: str | None = None) -> list[tuple[str, ImportReport]]:
    """Import the bundled examples of ``formats`` (default: every format) into the folder
    ``out``; returns one (format, report) per format. Examples that worked on a world are
    mapped onto ``world`` (a manifest world or a local checkout; None: mapped from the
    trajectories alone), the others onto the repository beside them. Importing again skips
    what is already there."""
    chosen = list(EXAMPLES) if formats is None else list(formats)
    unknown = [f for f in chosen if f not in EXAMPLES]
    if unknown:
        raise ValueError(f"no bundled examples of {', '.join(map(repr, unknown))}; there are: "
                         f"{', '.join(EXAMPLES)}")
    absent = [str(SOURCE / e.path) for f in chosen for e in EXAMPLES[f]
              if not (SOURCE / e.path).exists()]
    if absent:
        raise FileNotFoundError(f"the bundled examples are not here: {absent[0]} (they ship "
                                "in the repository's tests/fixtures, not in an installed wheel)")
    reports: list[tuple[str, ImportReport]] = []
    for fmt in chosen:
        merged: ImportReport | None = None
        for on_world in (True, False):
            paths = [SOURCE / e.path for e in EXAMPLES[fmt] if e.on_world is on_world]
            if not paths:
                continue
            rep = import_paths(fmt, paths, out, world=world if on_world else None, study=study,
                               model=model, progress=False, echo=False)
            if merged is None:
                merged = rep
            else:
                merged.results.extend(rep.results)
        assert merged is not None  # every format has at least one example
        reports.append((fmt, merged))
    return reports


__all__ = ["EXAMPLES", "SOURCE", "Example", "example_paths", "import_examples"]
