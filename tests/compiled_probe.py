"""Run by tests/test_compiled.py in a child process: import the trajectory files under SRC into
OUT (``auto``, one process) and print, as JSON, which importers ran (compiled or pure Python)
and each source file's outcome: its skip reason and detail, or the sha256 of the run file it
wrote.

Usage: python tests/compiled_probe.py OUT SRC...
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from adakit.importers import compiled
from adakit.importers.batch import import_paths


def main(out: str, sources: list[str]) -> None:
    """Import ``sources`` into ``out`` and print the state and the outcomes."""
    rep = import_paths("auto", sources, out, progress=False, echo=False, jobs=1)
    outcomes = {}
    for res in rep.results:
        written = Path(res.written).read_bytes() if res.written else b""
        outcomes[res.path] = [res.reason, res.detail, hashlib.sha256(written).hexdigest()
                              if written else None, res.format]
    print(json.dumps({"compiled": compiled.state().compiled and compiled.compiled_now(),
                      "state": compiled.state().line(), "outcomes": outcomes}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
