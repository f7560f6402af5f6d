"""One writer per output folder: a launch holds an exclusive lock on its folder for its life.

Two launches into one folder would interleave their records in the same run files. The lock
is an advisory ``flock`` on ``<folder>/.adakit-launch.lock``, which the kernel releases when the
holding process ends, however it ends; the file names its holder (pid, host, start time) so a
second launch can say who is writing.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_NAME = ".adakit-launch.lock"


class FolderLocked(RuntimeError):
    """The output folder is being written by another launch."""


def holder(folder: Path) -> str:
    """Who holds (or last held) the folder's lock, as its lock file says; '' if unknown."""
    try:
        return (Path(folder) / LOCK_NAME).read_text(encoding="utf-8").strip()
    except OSError:
        return ""


@contextmanager
def folder_lock(folder: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold the exclusive launch lock of ``folder`` (created if missing) while the block runs;
    raises :class:`FolderLocked` at once, writing nothing, if another launch holds it."""
    folder = Path(folder)
    path = folder / LOCK_NAME
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
    fh = open(path, "a+", encoding="utf-8")  # held open for the block: the lock lives with it
    try:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = holder(folder) or "a process that did not say who it is"
            raise FolderLocked(
                f"{folder} is being written by another launch ({who}); wait for it to end or "
                "stop it, then launch again") from None
        fh.seek(0)
        fh.truncate()
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        fh.write(f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n")
        fh.flush()
        yield path
    finally:
        fh.close()  # closing the descriptor releases the lock
