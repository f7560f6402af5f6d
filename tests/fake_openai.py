"""A scripted OpenAI-compatible HTTP server on loopback, for tests that must not need a model.

It implements ``POST /v1/chat/completions`` and ``GET /v1/models`` on ``127.0.0.1`` at a free
port, answers each chat request from a *script*, and records every request it received.

Usage::

    from tests.fake_openai import FakeOpenAI, error, reply, stall, tool_call

    with FakeOpenAI([error(429, retry_after=0.2), "<thinking>..</thinking><bookmark>..",
                     reply("done", tokens_in=100, tokens_out=7)]) as fake:
        spec = ModelSpec(name="fake", base_url=fake.url, model_id="fake-model",
                         api_key_env="FAKE_KEY")
        ...                                   # point the code under test at fake.url
        assert len(fake.requests) == 3        # the JSON bodies, in arrival order
        assert fake.requests[-1]["messages"][-1]["role"] == "user"

The script is either a list (or any iterable) of replies, consumed one per chat request, or a
callable ``f(request_json) -> reply`` asked for every request (it can look at the messages,
``len(fake.requests)`` etc.). More replies can be queued later with ``fake.push(...)``. When a
list runs out, the server answers HTTP 400 ``script exhausted`` (not retryable, so a test that
makes more calls than planned fails fast rather than retrying).

A reply is one of:

* ``str``: an assistant message with that text (``finish_reason`` "stop");
* ``int``: an HTTP error with that status (e.g. ``429``, ``500``);
* ``dict``: sent verbatim as the JSON response body (status 200);
* ``reply(text, ...)``: text with chosen token counts, finish reason, delay, headers;
* ``tool_call(name, arguments, ...)``: an assistant message with one function call;
* ``error(status, retry_after=None, message=...)``: an HTTP error, optionally with a
  ``Retry-After`` header (seconds; fractions are allowed and the backend honours them);
* ``stall(seconds, then=...)``: wait before answering (provokes client timeouts); ``then`` is
  the reply sent after the wait (default "late").

Token counts default to a deterministic estimate (whitespace-separated words of all message
contents in, of the reply text out), so tests can hand-compute costs. The server is threaded:
a stalled request does not block the next one.

Injected rate limits: ``FakeOpenAI(script, rate_limit=0.3, retry_after=0.05)`` answers 30% of
the chat requests with HTTP 429 (and that ``Retry-After``) before the script is asked, spread
evenly and deterministically (request n is refused when ``floor(n * 0.3)`` grows), so a test
knows exactly how many were refused. With ``hold=True`` the server also means its
Retry-After, as a rate-limited provider does: after a refusal every request is refused until
that time has passed (the fraction then applies to the requests that arrive while it is open).
``refused``, ``answered`` (HTTP 200 replies), ``in_flight`` and ``max_in_flight`` (the most
chat requests open at once) count what happened.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeOpenAI", "Reply", "error", "reply", "stall", "tool_call"]


@dataclass
class Reply:
    """Everything the fake server can say in answer to one chat request."""

    text: str | None = ""
    status: int = 200
    delay: float = 0.0
    tokens_in: int | None = None
    tokens_out: int | None = None
    finish_reason: str = "stop"
    tool_calls: list[dict[str, Any]] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    message: str = "fake error"


def reply(
    text: str,
    *,
    tokens_in: int | None = None,
    tokens_out: int | None = None,
    finish_reason: str = "stop",
    delay: float = 0.0,
) -> Reply:
    """An assistant text reply with chosen usage numbers."""
    return Reply(
        text=text,
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        finish_reason=finish_reason,
        delay=delay,
    )


def tool_call(name: str, arguments: dict[str, Any] | str, *, text: str | None = None) -> Reply:
    """A function-mode reply calling ``name``; ``arguments`` may be a dict or a raw string."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    call = {"id": "call_0", "type": "function", "function": {"name": name, "arguments": raw}}
    return Reply(text=text, tool_calls=[call], finish_reason="tool_calls")


def error(status: int, *, retry_after: float | None = None, message: str = "fake error") -> Reply:
    """An HTTP error reply in OpenAI's error shape, with an optional Retry-After header."""
    headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
    return Reply(text=None, status=status, headers=headers, message=message)


def stall(seconds: float, then: str | Reply = "late") -> Reply:
    """Wait ``seconds`` before answering with ``then``."""
    out = _as_reply(then)
    out.delay = seconds
    return out


def _as_reply(item: Any) -> Reply:
    if isinstance(item, Reply):
        return Reply(**{**item.__dict__})
    if isinstance(item, str):
        return Reply(text=item)
    if isinstance(item, bool):
        raise TypeError("a scripted reply cannot be a bool")
    if isinstance(item, int):
        return Reply(text=None, status=item)
    if isinstance(item, dict):
        return Reply(body=item)
    raise TypeError(f"cannot turn {item!r} into a scripted reply")


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_words(v.get("text", "") if isinstance(v, dict) else v) for v in value)
    return 0


class FakeOpenAI:
    """The scripted server (see the module docstring). ``url`` is the client's ``base_url``."""

    def __init__(
        self,
        script: Iterable[Any] | Callable[[dict[str, Any]], Any] | None = None,
        *,
        model: str = "fake-model",
        rate_limit: float = 0.0,
        retry_after: float | None = None,
        hold: bool = False,
    ) -> None:
        if not 0.0 <= rate_limit < 1.0:
            raise ValueError("rate_limit is the fraction of requests refused, in [0, 1)")
        self.model = model
        self.rate_limit = rate_limit
        self.retry_after = retry_after
        self.hold = hold
        self._open_until = 0.0
        self._open_arrivals = 0
        self.refused = 0
        self.answered = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._func = script if callable(script) else None
        self._queue: deque[Any] = deque() if callable(script) or script is None else deque(script)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.served = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeOpenAI:
        handler = _make_handler(self)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False  # keep-alive connections must not delay stop()
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the fake server is not running")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """The ``base_url`` to give an OpenAI client, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- the script --------------------------------------------------------------------------

    def push(self, *replies: Any) -> None:
        """Queue more replies (list scripts only)."""
        with self._lock:
            self._queue.extend(replies)

    def _next(self, request: dict[str, Any], headers: dict[str, str]) -> Reply | None:
        with self._lock:
            self.requests.append(request)
            self.headers.append(headers)
            now = time.monotonic()
            if self.hold and now < self._open_until:
                self.refused += 1
                return error(429, retry_after=self._open_until - now, message="rate limit (held)")
            self._open_arrivals += 1
            n = self._open_arrivals
            if int(n * self.rate_limit) > int((n - 1) * self.rate_limit):
                self.refused += 1
                if self.hold:
                    self._open_until = now + (self.retry_after or 0.0)
                return error(429, retry_after=self.retry_after, message="rate limit (injected)")
            if self._func is not None:
                return _as_reply(self._func(request))
            if not self._queue:
                return None
            return _as_reply(self._queue.popleft())

    def _body(self, request: dict[str, Any], r: Reply) -> dict[str, Any]:
        if r.body is not None:
            return r.body
        tokens_in = r.tokens_in
        if tokens_in is None:
            tokens_in = sum(_words(m.get("content")) for m in request.get("messages", []))
        tokens_out = r.tokens_out if r.tokens_out is not None else _words(r.text or "")
        message: dict[str, Any] = {"role": "assistant", "content": r.text}
        if r.tool_calls:
            message["tool_calls"] = r.tool_calls
        with self._lock:
            self.served += 1
            n = self.served
        return {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", self.model),
            "choices": [{"index": 0, "message": message, "finish_reason": r.finish_reason}],
            "usage": {
                "prompt_tokens": tokens_in,
                "completion_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out,
            },
        }


def _make_handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib name)
            pass

        def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None):
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a provoked timeout)

        def do_GET(self) -> None:  # noqa: N802 (stdlib name)
            if self.path.rstrip("/").endswith("/models"):
                data = [{"id": fake.model, "object": "model", "owned_by": "fake"}]
                self._send(200, {"object": "list", "data": data})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:  # noqa: N802 (stdlib name)
            with fake._lock:
                fake.in_flight += 1
                fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
            try:
                self._post()
            finally:
                with fake._lock:
                    fake.in_flight -= 1

        def _post(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                request = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, {"error": {"message": "body is not JSON"}})
                return
            r = fake._next(request, {k.lower(): v for k, v in self.headers.items()})
            if r is None:
                msg = f"fake_openai: script exhausted after {len(fake.requests) - 1} replies"
                self._send(400, {"error": {"message": msg, "type": "script_exhausted"}})
                return
            if r.delay:
                time.sleep(r.delay)
            if r.status != 200:
                err = {"error": {"message": r.message, "type": "fake", "code": r.status}}
                self._send(r.status, err, r.headers)
                return
            self._send(200, fake._body(request, r), r.headers)
            with fake._lock:
                fake.answered += 1

    return Handler
