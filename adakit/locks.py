"""An exclusive, advisory file lock that names its holder: one writer at a time.

The lock is a ``flock`` on a small file, which the kernel releases when the holding process
ends, however it ends. While held, the file names its holder (pid, host, start time) so a
second process can say who is writing. A launch holds one on its output folder
(:mod:`adakit.study.lock`); an update of a corpus store holds one on the store
(:mod:`adakit.store`).
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: Seconds between two attempts while waiting for a held lock.
POLL_S = 0.1


class Locked(RuntimeError):
    """The lock is held by another process (the message names it when its file does)."""


def holder(path: str | os.PathLike[str]) -> str:
    """Who holds (or last held) the lock at ``path``, as its file says; '' if unknown."""
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError:
        return ""


@contextmanager
def exclusive(path: str | os.PathLike[str], wait: float | None = 0.0,
              busy: str = "{path} is held by another process ({who})",
              error: type[Locked] = Locked) -> Iterator[Path]:
    """Hold the exclusive lock of file ``path`` (created with its folder if missing) while the
    block runs. A held lock is waited for up to ``wait`` seconds (None: as long as it takes);
    then ``error`` (a :class:`Locked`) is raised with ``busy`` filled in (``{path}``,
    ``{who}``)."""
    path = Path(path)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    if wait is not None and wait < 0:
        raise ValueError(f"wait must be at least 0 seconds, not {wait}")
    fh = open(path, "a+", encoding="utf-8")  # held open for the block: the lock lives with it
    try:
        deadline = None if wait is None else time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    who = holder(path) or "a process that did not say who it is"
                    raise error(busy.replace("{path}", str(path)).replace("{who}", who)) from None
                time.sleep(POLL_S)
        fh.seek(0)
        fh.truncate()
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        fh.write(f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n")
        fh.flush()
        yield path
    finally:
        fh.close()  # closing the descriptor releases the lock
