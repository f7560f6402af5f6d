"""Run llama-cpp-python's OpenAI-compatible server for adakit, and stop it with its parent.

``python -m adakit.llm.serve_local PARENT_PID SERVER_ARGS...`` runs ``llama_cpp.server`` with
the given arguments and exits as soon as the process ``PARENT_PID`` is gone, so a launch that
is killed (SIGTERM and SIGKILL skip atexit handlers) leaves no server holding the cores.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time


def _watch(parent: int, interval: float = 1.0) -> None:
    while os.getppid() == parent:
        time.sleep(interval)
    os._exit(0)


def main() -> None:
    """Entry point: watch the parent, then hand over to llama_cpp.server."""
    if len(sys.argv) < 2 or not sys.argv[1].isdigit():
        sys.exit("usage: python -m adakit.llm.serve_local PARENT_PID [llama_cpp.server arguments]")
    parent = int(sys.argv[1])
    sys.argv = ["llama_cpp.server", *sys.argv[2:]]
    threading.Thread(target=_watch, args=(parent,), daemon=True).start()
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
