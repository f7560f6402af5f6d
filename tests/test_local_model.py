"""The embedded local models end to end: llama-cpp-python's server started on a loopback port,
SmolLM2-135M answering a grammar-constrained request with a well-formed XML tool call, the
offline default (Qwen2.5-Coder-1.5B) answering the real scaffold with real thinking, and the
servers stopped again, also when the process that started them is killed. Only the plumbing
and the protocol are checked; what the models choose is measured by `make bench-models`."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adakit.llm import models as m

pytestmark = pytest.mark.slow

AVAILABLE, REASON = m.local_model_available("smollm2-135m")
needs_local_model = pytest.mark.skipif(not AVAILABLE, reason=REASON)
DEFAULT_OK, DEFAULT_REASON = m.local_model_available(m.DEFAULT_LOCAL_MODEL)
needs_default_model = pytest.mark.skipif(not DEFAULT_OK, reason=DEFAULT_REASON)

# <thinking>...</thinking> then exactly one peek_code_region call; every free field is capped so
# the reply always finishes within max_tokens.
PEEK_GRAMMAR = r"""
root      ::= "<thinking>" thought "</thinking>\n" call
thought   ::= [^<>\n]{1,240}
call      ::= "<peek_code_region>\n<file_path>" path "</file_path>\n<start_line>" line "</start_line>\n</peek_code_region>"
path      ::= [a-zA-Z0-9_] [a-zA-Z0-9_./-]{0,79}
line      ::= [1-9] [0-9]{0,3}
"""

CALL = re.compile(
    r"<thinking>(?P<thinking>[^<>\n]+)</thinking>\n<peek_code_region>\n"
    r"<file_path>(?P<path>[\w./-]+)</file_path>\n<start_line>(?P<line>[1-9]\d{0,3})</start_line>\n"
    r"</peek_code_region>"
)

MESSAGES = [
    {
        "role": "system",
        "content": (
            "You are Ada, a read-only code reader. Think inside <thinking></thinking>, then call "
            "exactly one tool in XML, for example:\n<peek_code_region>\n<file_path>src/app.py"
            "</file_path>\n<start_line>1</start_line>\n</peek_code_region>"
        ),
    },
    {
        "role": "user",
        "content": (
            "Task: find where incoming requests are routed to view functions.\n"
            "Repository:\nsrc/flask/app.py (1536 lines)\nsrc/flask/ctx.py (449 lines)\n"
            "src/flask/views.py (191 lines)\nsrc/flask/blueprints.py (128 lines)"
        ),
    },
]

SCHEMA = {
    "type": "object",
    "properties": {
        "score": {"type": "integer", "minimum": 1, "maximum": 5},
        "reason": {"type": "string", "maxLength": 80},
    },
    "required": ["score", "reason"],
}


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def report(**numbers: float) -> None:
    print(" ".join(f"{k}={v:.3g}" for k, v in numbers.items()))


@needs_local_model
def test_local_server_answers_a_constrained_tool_call_and_stops() -> None:
    spec = m.get_model("smollm2-135m")
    server = m.LocalServer(m.find_gguf(spec), n_ctx=spec.context_window)
    with server:
        assert server.running and port_open(server.port)
        backend = m.OpenAIBackend(spec, base_url=server.base_url)  # no cache: a live call
        c = backend.complete(MESSAGES, grammar=PEEK_GRAMMAR, max_tokens=200)
        report(
            server_start_s=server.start_time_s,
            call_latency_s=c.latency_s,
            tokens_in=c.tokens_in,
            tokens_out=c.tokens_out,
            gen_tokens_per_s=c.tokens_out / c.latency_s,
        )
        match = CALL.fullmatch(c.text)
        assert match, f"not a well-formed tool call: {c.text!r}"
        assert c.constrained and not c.cached and c.finish_reason == "stop"
        assert c.tokens_in > 50 and 0 < c.tokens_out <= 200 and c.cost_usd is None

        j = backend.complete(MESSAGES[1:], json_schema=SCHEMA, max_tokens=120)
        reply = json.loads(j.text, strict=False)  # the JSON grammar admits raw newlines
        assert set(reply) >= {"score", "reason"} and 1 <= reply["score"] <= 5
        assert j.constrained
        port, proc = server.port, server.process
    assert proc.poll() is not None, "the server process is still alive"
    assert not port_open(port), "the server port is still open"
    assert not server.running


@needs_local_model
def test_shared_server_is_lazy_reused_and_stopped(tmp_path) -> None:
    m.stop_local_servers()  # start clean: an earlier test in this process may have used one
    spec = m.get_model("smollm2-135m")
    first = m.backend_for(spec, cache=tmp_path, cache_mode="use")
    second = m.backend_for(spec, cache=tmp_path, cache_mode="off")
    assert m._SERVERS == {}  # nothing started before the first call
    try:
        a = first.complete(MESSAGES, grammar=PEEK_GRAMMAR, max_tokens=200)
        server = first._server
        b = second.complete(MESSAGES, grammar=PEEK_GRAMMAR, max_tokens=200)
        assert second._server is server and len(m._SERVERS) == 1
        assert CALL.fullmatch(a.text) and CALL.fullmatch(b.text)
        again = first.complete(MESSAGES, grammar=PEEK_GRAMMAR, max_tokens=200)
        assert again.cached and again.text == a.text and again.latency_s == a.latency_s
    finally:
        m.stop_local_servers()
    assert m._SERVERS == {}
    assert server.process.poll() is not None and not port_open(server.port)


def test_missing_install_is_reported_clearly(monkeypatch) -> None:
    real = m.importlib.util.find_spec
    monkeypatch.setattr(
        m.importlib.util, "find_spec", lambda name: None if name == "llama_cpp" else real(name)
    )
    ok, reason = m.local_model_available()
    assert not ok and "llama_cpp" in reason and "make local-model" in reason
    with pytest.raises(m.ModelError, match="make local-model"):
        m.LocalServer(Path("any.gguf")).start()


def test_server_that_dies_reports_its_output(tmp_path) -> None:
    """A server that exits before answering: the error carries its last output."""
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"this is not a GGUF file")
    server = m.LocalServer(bogus, ready_timeout=60)
    if not AVAILABLE:
        server.command = lambda: [  # type: ignore[method-assign]
            m.sys.executable, "-c", "import sys; print('failed to load model'); sys.exit(3)"
        ]  # fmt: skip
    with pytest.raises(m.ModelError, match=r"exited with code \d+ before it was ready") as ei:
        server.start()
    assert "model" in str(ei.value).lower()
    assert not server.running


@needs_default_model
def test_default_agent_answers_the_real_scaffold_with_real_thinking(flask_world) -> None:
    """The 1.5B, the real system prompt, task and tool grammar: one valid call whose thinking
    is prose, even when the prompt itself shows the placeholder ``<thinking>...</thinking>``."""
    from adakit.apparatus.agent import first_message, system_prompt
    from adakit.apparatus.conditions import get_condition
    from adakit.apparatus.protocol import parse_reply, tool_grammar
    from adakit.apparatus.tasks import make_task
    from adakit.apparatus.tools import TOOL_SPECS

    spec = m.get_model(m.DEFAULT_LOCAL_MODEL)
    condition = get_condition("natural")
    task = make_task("feature_tracing", "flask")
    system = system_prompt(flask_world, condition, tree_max_files=60)
    nudge = "\nAnswer in the form <thinking>...</thinking> followed by the call."
    messages = [{"role": "system", "content": system},
                {"role": "user", "content": first_message(task, condition, "") + nudge}]
    grammar = tool_grammar(TOOL_SPECS, flask_world.source_files(), thinking_chars=300)
    server = m.LocalServer(m.find_gguf(spec), n_ctx=spec.context_window)
    with server:
        backend = m.OpenAIBackend(spec, base_url=server.base_url)
        c = backend.complete(messages, grammar=grammar, max_tokens=spec.max_tokens)
    report(call_latency_s=c.latency_s, tokens_in=c.tokens_in, tokens_out=c.tokens_out)
    parsed = parse_reply(c.text, TOOL_SPECS)
    assert parsed.error is None and parsed.call is not None, c.text
    thought = parsed.thinking
    assert len(thought) >= 24 and thought[0].isalpha(), thought
    assert "..." not in thought[:5] and len(thought.split()) >= 4, thought
    assert c.finish_reason == "stop"


_ORPHAN_SCRIPT = """
import sys, time
from adakit.llm import models as m
server = m.LocalServer(m.find_gguf(m.get_model("smollm2-135m")), n_ctx=2048).start()
print(server.process.pid, flush=True)
time.sleep(600)
"""


@needs_local_model
def test_server_stops_when_the_process_that_started_it_is_killed() -> None:
    """SIGKILL skips atexit: the server watches its parent and exits on its own."""
    env = {**os.environ, "PYTHONPATH": str(Path(m.__file__).resolve().parents[1])}
    parent = subprocess.Popen([sys.executable, "-c", _ORPHAN_SCRIPT], stdout=subprocess.PIPE,
                              text=True, env=env)
    try:
        server_pid = int(parent.stdout.readline())
        os.kill(server_pid, 0)  # alive
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.time() + 15
        while time.time() < deadline:
            try:
                os.kill(server_pid, 0)
            except ProcessLookupError:
                break
            with open(f"/proc/{server_pid}/stat") as fh:  # a zombie has exited already
                if fh.read().split()[2] == "Z":
                    break
            time.sleep(0.2)
        else:
            os.kill(server_pid, signal.SIGKILL)
            pytest.fail("the server outlived its parent by 15 s")
    finally:
        if parent.poll() is None:
            parent.kill()


def test_server_threads_bound_prompt_processing_too(monkeypatch) -> None:
    """``ADAKIT_LLAMA_THREADS`` bounds generation and prompt processing alike (llama-cpp-python's
    batch threads default to every core, which stalls a server that shares the machine)."""
    monkeypatch.setenv("ADAKIT_LLAMA_THREADS", "1")
    argv = m.LocalServer(gguf="model.gguf", port=1).command()
    assert argv[argv.index("--n_threads") + 1] == "1"
    assert argv[argv.index("--n_threads_batch") + 1] == "1"
    monkeypatch.setenv("ADAKIT_LLAMA_THREADS", "two")
    with pytest.raises(m.ModelError, match="positive whole number"):
        m.LocalServer(gguf="model.gguf", port=1)
