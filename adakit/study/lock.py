"""One writer per output folder: a launch holds an exclusive lock on its folder for its life.

Two launches into one folder would interleave their records in the same run files. The lock
is an advisory ``flock`` on ``<folder>/.adakit-launch.lock`` (:func:`adakit.locks.exclusive`),
which the kernel releases when the holding process ends, however it ends; the file names its
holder (pid, host, start time) so a second launch can say who is writing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from adakit import locks

LOCK_NAME = ".adakit-launch.lock"


class FolderLocked(locks.Locked):
    """The output folder is being written by another launch."""


def holder(folder: Path) -> str:
    """Who holds (or last held) the folder's lock, as its lock file says; '' if unknown."""
    return locks.holder(Path(folder) / LOCK_NAME)


@contextmanager
def folder_lock(folder: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold the exclusive launch lock of ``folder`` (created if missing) while the block runs;
    raises :class:`FolderLocked` at once, writing nothing, if another launch holds it."""
    folder = Path(folder)
    busy = (f"{folder} is being written by another launch " + "({who}); wait for it to end or "
            "stop it, then launch again")
    with locks.exclusive(folder / LOCK_NAME, wait=0.0, busy=busy, error=FolderLocked) as path:
        yield path
