"""Finding host paths in what the agent is shown (used by conftest's guard on every test)."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable


def host_folders() -> list[str]:
    """The host's temporary and home folders, as written and as resolved, each ending in '/'."""
    found = set()
    for folder in (tempfile.gettempdir(), os.path.expanduser("~")):
        for form in (folder, os.path.realpath(folder)):
            form = form.rstrip("/")
            if form:
                found.add(form + "/")
    return sorted(found)


def host_paths_in(text: str, given: Iterable[str] = ()) -> list[str]:
    """The host folders ``text`` mentions, once the strings the agent wrote (``given``: its
    call's parameter values) are taken out: echoing the agent's own words leaks nothing."""
    for value in sorted((g for g in given if g), key=len, reverse=True):
        text = text.replace(value, "")
    # an absolute path starts the text or follows a character that cannot be part of a path
    # (so "src/tmp/app.py" is a relative path, not the temporary folder)
    return [f for f in host_folders() if re.search(r"(?<![\w.~/-])" + re.escape(f), text)]
