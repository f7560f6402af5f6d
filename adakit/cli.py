"""The ``adakit`` command: one subcommand family per paper object.

Each module named in ``COMMAND_MODULES`` defines ``register_cli(subparsers)``, adding its
subcommands with ``set_defaults(func=...)``; ``func(args)`` returns an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

COMMAND_MODULES = [
    "adakit.record",  # adakit schema
    "adakit.apparatus.world",  # adakit worlds list|fetch|stats
    "adakit.apparatus.tools",  # adakit tool WORLD TOOL --param value
    "adakit.study.launch",  # adakit launch STUDY.yaml
    "adakit.study.schema",  # adakit study-schema (the JSON Schema of study files)
    "adakit.judging.run",  # adakit judge CORPUS
    "adakit.llm.models",  # adakit models list
    "adakit.study.pipeline",  # adakit study PROFILE (the whole pipeline), adakit stage
    "adakit.study.dataset",  # adakit dataset build|check|restore-cache
    "adakit.study.fork_dataset",  # adakit dataset build-forks STUDY (after the line above)
    "adakit.importers.batch",  # adakit import FORMAT PATH... --out DIR
    "adakit.importers.compiled",  # adakit compiled build|status (the importers with mypyc)
    "adakit.importers.atif_export",  # adakit export atif CORPUS --out DIR
    "adakit.diagnostics.diagnosis",  # adakit diagnose CORPUS [--reference RUN_ID] [--calibrate]
    "adakit.study.fork_cli",  # adakit fork RUN_FILE --at K (one change) --seeds N
    "adakit.workbench.search",  # adakit search CORPUS [PATTERN] [--seq PATTERN] [filters]
]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="adakit",
        description="Launch Ada into repository worlds, record trajectories, read them through lenses.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # that part of the apparatus is not installed in this checkout
            raise
        module.register_cli(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``adakit`` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from adakit.study.schema import StudyError

    try:
        return int(args.func(args) or 0)
    except StudyError as exc:  # a study file that does not fit, from any command that loads one
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; everything recorded so far is on disk", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `adakit launch STUDY --list | head`: the reader left
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush is quiet
        return 0
