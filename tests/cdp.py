"""A small Chrome DevTools Protocol client for driving headless Chromium from a test.

:func:`start_chromium` launches Debian's ``chromium`` headless on ``about:blank`` with a
throw-away profile and a DevTools port the browser picks itself (read back from the
profile's ``DevToolsActivePort`` file); :class:`Page` talks to its tab over the DevTools
websocket (``websocket-client``): navigate, evaluate JavaScript (promises awaited, results
returned by value), poll an expression until it holds, and keep the console errors and
uncaught exceptions the page reported on the way.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import websocket

CHROMIUM_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--no-first-run", "--no-default-browser-check", "--disable-quic",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-extensions", "--window-size=1400,1000",
)


class CDPError(RuntimeError):
    """A DevTools call failed, or a page script threw."""


def find_chromium() -> str | None:
    """The Chromium executable on PATH, if any."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _devtools_port(profile: Path, proc: subprocess.Popen, timeout: float) -> int:
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CDPError(f"chromium exited with code {proc.returncode} before DevTools was up")
        if marker.exists():
            first = marker.read_text().splitlines()[:1]
            if first and first[0].strip().isdigit():
                return int(first[0])
        time.sleep(0.1)
    raise CDPError(f"chromium wrote no {marker.name} within {timeout:.0f}s")


def stop_process_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM the process group ``proc`` leads, then SIGKILL it after ``grace`` seconds."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def start_chromium(chromium: str, profile: Path, log: Path,
                   timeout: float = 30.0) -> Iterator[Page]:
    """Headless Chromium on ``about:blank`` (its own process group, killed on exit) and a
    :class:`Page` connected to its one tab."""
    profile.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
             "--remote-debugging-port=0", "about:blank"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    page: Page | None = None
    try:
        port = _devtools_port(profile, proc, timeout)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            targets = json.load(r)
        tab = next(t for t in targets if t.get("type") == "page")
        page = Page(tab["webSocketDebuggerUrl"], timeout=timeout)
        yield page
    finally:
        if page is not None:
            page.close()
        stop_process_group(proc)


class Page:
    """One browser tab over the DevTools websocket. Console errors and uncaught exceptions
    are collected in :attr:`errors` as they arrive."""

    def __init__(self, ws_url: str, timeout: float = 30.0) -> None:
        self.timeout = timeout
        # no Origin header: Chromium refuses DevTools clients from origins it was not told of
        self._ws = websocket.create_connection(ws_url, timeout=timeout, suppress_origin=True)
        self._ids = itertools.count(1)
        self.errors: list[str] = []
        self.call("Runtime.enable")
        self.call("Log.enable")
        self.call("Page.enable")
        # a headless tab never has the window focus; apps that track focus need it emulated
        self.call("Emulation.setFocusEmulationEnabled", enabled=True)

    def close(self) -> None:
        self._ws.close()

    def _note(self, event: dict[str, Any]) -> None:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            desc = details.get("exception", {}).get("description") or details.get("text", "")
            self.errors.append(f"uncaught: {desc}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            args = params.get("args", [])
            self.errors.append("console.error: " + " ".join(
                str(a.get("value", a.get("description", ""))) for a in args))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"log: {entry.get('text', '')} {entry.get('url', '')}".strip())

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one DevTools command and return its result (events met meanwhile are noted)."""
        ident = next(self._ids)
        self._ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise CDPError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self._note(message)

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True,
                           returnByValue=True, userGesture=True)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            desc = details.get("exception", {}).get("description") or details.get("text")
            raise CDPError(f"script failed: {desc}\n--- script:\n{expression}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float, what: str,
                 until: Callable[[Any], bool] = bool, poll: float = 0.25) -> Any:
        """Evaluate ``expression`` until ``until`` holds for its value, and return the value;
        on timeout fail with ``what`` and the last value seen."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if until(value):
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout:.0f}s for {what}; last value: {value!r}")
            time.sleep(poll)
