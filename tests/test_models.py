"""The models layer against a scripted OpenAI-compatible server on loopback: registry, retries,
errors, the response cache, cost, and that the API key is never written anywhere."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from adakit.llm import models as m
from adakit.llm.models import (
    CacheMiss,
    ChatBackend,
    Completion,
    ModelError,
    ModelSpec,
    OpenAIBackend,
    ResponseCache,
    RetryPolicy,
)
from tests.fake_openai import FakeOpenAI, error, reply, stall, tool_call

KEY_ENV = "ADAKIT_TEST_FAKE_KEY"
SECRET = "sk-" + "test-SECRET-3f9a1c77e2b04d5d"  # a fake key, built so no scanner mistakes it
FAST = RetryPolicy(attempts=4, base=0.01, cap=0.02)
MESSAGES = [
    {"role": "system", "content": "You are Ada."},
    {"role": "user", "content": "Explain the repository layout."},
]


def spec_for(fake: FakeOpenAI, **overrides) -> ModelSpec:
    settings = dict(
        name="fake",
        base_url=fake.url,
        model_id="fake-model",
        api_key_env=KEY_ENV,
        temperature=0.2,
        max_tokens=64,
        timeout_s=5.0,
    )
    settings.update(overrides)
    return ModelSpec(**settings)


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, SECRET)
    return SECRET


# --- registry --------------------------------------------------------------------------------


def test_packaged_registry_has_the_papers_models() -> None:
    reg = m.load_registry()
    for name in ("gpt-4o", "gpt-4.1", "deepseek-v3.2", "qwen3.5-397b-a17b"):
        assert reg[name].kind == "llm" and reg[name].base_url.startswith("https://")
    assert reg["gpt-4o"].api_key_env == "OPENAI_API_KEY"
    assert reg["deepseek-v3.2"].api_key_env == "DEEPSEEK_API_KEY"
    assert reg["qwen3.5-397b-a17b"].api_key_env == "DASHSCOPE_API_KEY"
    for judge in ("glm-5", "kimi-k2.5", "minimax-m2.7", "deepseek-v3"):
        assert reg[judge].max_tokens == 2048 and reg[judge].temperature == 0.2
    local = reg["smollm2-135m"]
    assert (local.kind, local.constrain, local.context_window, local.temperature) == (
        "local",
        "grammar",
        8192,
        0.2,
    )
    assert local.endpoint == "local:" + local.model_id


def test_user_registry_overlay_refines_and_adds(tmp_path: Path, monkeypatch) -> None:
    user = tmp_path / "mine.yaml"
    user.write_text(
        "models:\n"
        "  deepseek-v3.2:\n"
        "    base_url: https://proxy.example/v1\n"
        "  my-vllm:\n"
        "    base_url: http://127.0.0.1:8000/v1\n"
        "    model_id: Qwen/Qwen3-8B\n"
        "  skimmer:\n"
        "    kind: baseline\n"
    )
    monkeypatch.setenv(m.USER_REGISTRY_ENV, str(user))
    reg = m.load_registry()
    assert reg["deepseek-v3.2"].base_url == "https://proxy.example/v1"
    assert reg["deepseek-v3.2"].model_id == "deepseek-chat"  # the rest kept
    assert reg["my-vllm"].temperature == 0.2 and reg["my-vllm"].api_key_env is None
    assert reg["skimmer"].kind == "baseline"


def test_registry_errors_are_clear(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(ModelError, match=r"unknown model 'nope'; known models: .*gpt-4o"):
        m.get_model("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  x:\n    base_url: http://h/v1\n    model_id: x\n    temprature: 1\n")
    with pytest.raises(ModelError, match="unknown settings \\['temprature'\\]"):
        m.load_registry(bad)
    bad.write_text("models:\n  x:\n    model_id: x\n")
    with pytest.raises(ModelError, match="needs a base_url"):
        m.load_registry(bad)
    with pytest.raises(ModelError, match="NAME of an environment variable"):
        ModelSpec(name="x", base_url="http://h/v1", model_id="x", api_key_env="sk-abc def")
    monkeypatch.setenv(m.USER_REGISTRY_ENV, str(tmp_path / "missing.yaml"))
    with pytest.raises(ModelError, match="does not name a file"):
        m.load_registry()


def test_register_model_in_code(monkeypatch) -> None:
    monkeypatch.setattr(m, "_CODE_REGISTRY", {})
    m.register_model(ModelSpec(name="tracer", kind="baseline"))
    assert m.get_model("tracer").kind == "baseline"
    with pytest.raises(ModelError, match="already registered"):
        m.register_model(ModelSpec(name="tracer", kind="baseline", description="other"))
    with pytest.raises(ModelError, match="scripted baseline"):
        m.backend_for("tracer")


# --- calls, retries, errors -----------------------------------------------------------------


def test_completion_fields_and_request(key: str) -> None:
    with FakeOpenAI([reply("<thinking>x</thinking>", tokens_in=120, tokens_out=30)]) as fake:
        backend = OpenAIBackend(spec_for(fake, price_in=2.5, price_out=10.0), retry=FAST)
        assert isinstance(backend, ChatBackend)
        c = backend.complete(MESSAGES)
    assert c.text == "<thinking>x</thinking>"
    assert (c.tokens_in, c.tokens_out, c.finish_reason, c.cached) == (120, 30, "stop", False)
    # 120 * 2.5 / 1e6 + 30 * 10 / 1e6
    assert c.cost_usd == pytest.approx(0.0006)
    assert c.latency_s > 0 and c.attempts == 1 and not c.constrained
    sent = fake.requests[0]
    assert sent["model"] == "fake-model" and sent["messages"] == MESSAGES
    assert sent["temperature"] == 0.2 and sent["max_tokens"] == 64
    assert fake.headers[0]["authorization"] == f"Bearer {SECRET}"


def test_a_redraw_overrides_temperature_and_seed_for_one_request() -> None:
    """Without overrides the request is exactly as before (so cache keys stay); a redraw's
    temperature replaces the spec's, and its seed the run's where the run's seed is sent."""
    local = ModelSpec(name="l", kind="local", base_url="http://127.0.0.1:1/v1", model_id="l",
                      gguf="l.gguf", temperature=0.2)
    backend = OpenAIBackend(local, seed=3)
    plain, _ = backend.build_request(MESSAGES)
    assert (plain["temperature"], plain["seed"]) == (0.2, 3)
    redraw, _ = backend.build_request(MESSAGES, temperature=0.6, seed=11)
    assert (redraw["temperature"], redraw["seed"]) == (0.6, 11)
    assert {k: v for k, v in redraw.items() if k not in ("temperature", "seed")} == {
        k: v for k, v in plain.items() if k not in ("temperature", "seed")}
    hosted = OpenAIBackend(ModelSpec(name="h", base_url="http://h/v1", model_id="h"), seed=3)
    request, _ = hosted.build_request(MESSAGES, temperature=0.4, seed=11)
    assert request["temperature"] == 0.4 and "seed" not in request

def test_unpriced_model_has_no_cost(key: str) -> None:
    with FakeOpenAI(["ok"]) as fake:
        c = OpenAIBackend(spec_for(fake), retry=FAST).complete(MESSAGES)
    assert c.cost_usd is None


def test_cost_arithmetic() -> None:
    spec = ModelSpec(name="p", base_url="http://h/v1", model_id="p", price_in=0.28, price_out=0.42)
    assert spec.cost(1_000_000, 0) == pytest.approx(0.28)
    assert spec.cost(4000, 500) == pytest.approx(0.00112 + 0.00021)


def test_retries_on_429_500_and_timeout_then_success(key: str) -> None:
    script = [error(429), error(500), stall(1.0, then="too late"), "finally"]
    with FakeOpenAI(script) as fake:
        backend = OpenAIBackend(spec_for(fake, timeout_s=0.3), retry=FAST)
        c = backend.complete(MESSAGES)
    assert c.text == "finally" and c.attempts == 4
    assert len(fake.requests) == 4


def test_gives_up_with_model_error(key: str) -> None:
    with FakeOpenAI([error(503)] * 3) as fake:
        backend = OpenAIBackend(spec_for(fake), retry=RetryPolicy(attempts=3, base=0.01, cap=0.01))
        with pytest.raises(
            ModelError, match="giving up after 3 attempts; last error: HTTP 503"
        ) as ei:
            backend.complete(MESSAGES)
    assert ei.value.kind == "gave_up" and len(fake.requests) == 3


def test_client_errors_are_not_retried(key: str) -> None:
    with FakeOpenAI([error(400, message="bad grammar")]) as fake:
        with pytest.raises(ModelError, match="HTTP 400: bad grammar") as ei:
            OpenAIBackend(spec_for(fake), retry=FAST).complete(MESSAGES)
    assert ei.value.status == 400 and ei.value.kind == "http" and len(fake.requests) == 1


def test_context_overflow_is_recognised(key: str) -> None:
    too_long = "Requested tokens (9000) exceed context window of 8192"
    with FakeOpenAI([error(400, message=too_long)]) as fake:
        with pytest.raises(ModelError, match="exceed context window") as ei:
            OpenAIBackend(spec_for(fake), retry=FAST).complete(MESSAGES)
    assert ei.value.kind == "context_overflow" and ei.value.status == 400


def test_connection_refused_is_retried_then_reported(key: str) -> None:
    port = m.free_port()
    spec = ModelSpec(name="gone", base_url=f"http://127.0.0.1:{port}/v1", model_id="x",
                     api_key_env=KEY_ENV)  # fmt: skip
    backend = OpenAIBackend(spec, retry=RetryPolicy(attempts=2, base=0.01, cap=0.01))
    with pytest.raises(ModelError, match="giving up after 2 attempts; last error: connection"):
        backend.complete(MESSAGES)


def test_retry_after_is_honoured(key: str) -> None:
    # full jitter alone would wait at most 0.02 s; the server asks for 0.6 s
    with FakeOpenAI([error(429, retry_after=0.6), "ok"]) as fake:
        backend = OpenAIBackend(spec_for(fake), retry=FAST)
        t0 = time.perf_counter()
        c = backend.complete(MESSAGES)
        waited = time.perf_counter() - t0
    assert c.text == "ok" and waited >= 0.6


def test_backoff_delays_are_full_jitter_and_capped() -> None:
    import random

    policy = RetryPolicy(attempts=10, base=1.0, cap=8.0)
    rng = random.Random(0)
    for attempt in range(8):
        bound = min(8.0, 2.0**attempt)
        delays = [policy.delay(attempt, None, rng) for _ in range(200)]
        assert all(0 <= d <= bound for d in delays)
        assert max(delays) > 0.8 * bound  # uses the whole range
    assert policy.delay(3, 42.0, rng) == 42.0
    assert policy.delay(3, 1e9, rng) == policy.max_retry_after


def test_retry_after_header_forms() -> None:
    assert m._retry_after({"retry-after": "3"}) == 3.0
    assert m._retry_after({"retry-after-ms": "250"}) == 0.25
    assert m._retry_after({}) is None
    assert m._retry_after({"retry-after": "soon"}) is None


def test_missing_key_names_the_variable(monkeypatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    with FakeOpenAI(["never"]) as fake:
        with pytest.raises(ModelError, match=f"set the environment variable {KEY_ENV}") as ei:
            OpenAIBackend(spec_for(fake), retry=FAST).complete(MESSAGES)
    assert ei.value.kind == "missing_key" and fake.requests == []
    real = m.get_model("gpt-4o")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ModelError, match="OPENAI_API_KEY"):
        m.backend_for(real, cache_mode="off").complete(MESSAGES)


def test_key_never_in_error_text_or_logs(key: str, caplog) -> None:
    leaky = error(401, message=f"Incorrect API key provided: {SECRET}")
    with FakeOpenAI([error(500, message=f"upstream saw {SECRET}"), leaky]) as fake:
        with caplog.at_level(logging.DEBUG, logger="adakit.llm.models"):
            with pytest.raises(ModelError) as ei:
                OpenAIBackend(spec_for(fake), retry=FAST).complete(MESSAGES)
    assert "HTTP 401" in str(ei.value)
    assert SECRET not in str(ei.value) and SECRET not in repr(ei.value)
    assert ei.value.__cause__ is None and ei.value.__suppress_context__
    assert caplog.records and all(SECRET not in r.getMessage() for r in caplog.records)


def test_constrained_requests(key: str) -> None:
    grammar = 'root ::= "<thinking>" [a-z ]{1,20} "</thinking>"'
    schema = {"type": "object", "properties": {"score": {"type": "integer"}}}
    with FakeOpenAI(["<thinking>ok</thinking>", '{"score": 3}', "free", "free"]) as fake:
        local_like = OpenAIBackend(spec_for(fake, constrain="grammar"), retry=FAST)
        assert local_like.complete(MESSAGES, grammar=grammar).constrained
        assert local_like.complete(MESSAGES, json_schema=schema).constrained
        hosted = OpenAIBackend(spec_for(fake, constrain="none"), retry=FAST)
        c = hosted.complete(MESSAGES, grammar=grammar, json_schema=schema)
        assert not c.constrained
        extra = OpenAIBackend(spec_for(fake, extra_body={"enable_thinking": False}), retry=FAST)
        extra.complete(MESSAGES)
    assert fake.requests[0]["grammar"] == grammar and "response_format" not in fake.requests[0]
    assert fake.requests[1]["response_format"] == {"type": "json_object", "schema": schema}
    assert "grammar" not in fake.requests[2] and "response_format" not in fake.requests[2]
    assert fake.requests[3]["enable_thinking"] is False


def test_function_mode_tool_calls(key: str) -> None:
    tools = [{"type": "function", "function": {"name": "peek_code_region", "parameters": {}}}]
    script = [
        tool_call("peek_code_region", {"file_path": "a.py", "start_line": 3}),
        tool_call("bookmark", "{not json"),
    ]
    with FakeOpenAI(script) as fake:
        backend = OpenAIBackend(spec_for(fake, mode="function"), retry=FAST)
        first = backend.complete(MESSAGES, tools=tools)
        second = backend.complete(MESSAGES, tools=tools)
    assert first.tool_calls == [
        {"name": "peek_code_region", "arguments": {"file_path": "a.py", "start_line": 3}}
    ]
    assert first.text == "" and first.finish_reason == "tool_calls"
    assert second.tool_calls == [{"name": "bookmark", "arguments": "{not json"}]
    assert fake.requests[0]["tools"] == tools


def test_function_arguments_nested_too_deeply_stay_text(key: str) -> None:
    deep = '{"note": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with FakeOpenAI([tool_call("bookmark", deep)]) as fake:
        backend = OpenAIBackend(spec_for(fake, mode="function"), retry=FAST)
        got = backend.complete(MESSAGES, tools=[])
    assert got.tool_calls == [{"name": "bookmark", "arguments": deep}]  # for the parser to explain


# --- the response cache ----------------------------------------------------------------------


def test_cache_use_hit_returns_original_numbers(key: str, tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "responses")
    with FakeOpenAI([reply("first", tokens_in=50, tokens_out=5, delay=0.05)]) as fake:
        backend = OpenAIBackend(spec_for(fake, price_in=1.0, price_out=2.0), cache, retry=FAST)
        live = backend.complete(MESSAGES)
        again = backend.complete(MESSAGES)
    assert len(fake.requests) == 1  # the second call never reached the server
    assert not live.cached and again.cached
    assert {**again.to_dict(), "cached": False} == live.to_dict()
    assert again.latency_s >= 0.05 and again.tokens_in == 50
    files = list((tmp_path / "responses").glob("*/*.json"))
    assert len(files) == 1 and files[0].parent.name == files[0].stem[:2]
    assert not list((tmp_path / "responses").rglob("*.tmp"))


def test_cache_distinguishes_requests(key: str, tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    with FakeOpenAI(["a", "b", "c"]) as fake:
        backend = OpenAIBackend(spec_for(fake), cache, retry=FAST)
        backend.complete(MESSAGES)
        backend.complete(MESSAGES, max_tokens=10)
        backend.complete(MESSAGES, grammar="root ::= x")  # constrain none: same as the first
        other = OpenAIBackend(spec_for(fake, temperature=0.7), cache, retry=FAST)
        other.complete(MESSAGES)
    assert len(fake.requests) == 3 and len(cache) == 3


def test_cache_replay_needs_no_server_and_no_key(key: str, tmp_path: Path, monkeypatch) -> None:
    with FakeOpenAI(["recorded"]) as fake:
        spec = spec_for(fake)
        OpenAIBackend(spec, ResponseCache(tmp_path), retry=FAST).complete(MESSAGES)
    monkeypatch.delenv(KEY_ENV)  # the server is gone and so is the key
    replay = OpenAIBackend(spec, ResponseCache(tmp_path, "replay"), retry=FAST)
    c = replay.complete(MESSAGES)
    assert c.text == "recorded" and c.cached
    with pytest.raises(CacheMiss) as ei:
        replay.complete([{"role": "user", "content": "never asked"}])
    assert len(ei.value.key) == 64 and ei.value.key in str(ei.value)
    assert not isinstance(ei.value, ModelError)


def test_cache_refresh_and_off(key: str, tmp_path: Path) -> None:
    with FakeOpenAI(["old", "new", "uncached"]) as fake:
        spec = spec_for(fake)
        OpenAIBackend(spec, ResponseCache(tmp_path), retry=FAST).complete(MESSAGES)
        fresh = OpenAIBackend(spec, ResponseCache(tmp_path, "refresh"), retry=FAST).complete(
            MESSAGES
        )
        assert fresh.text == "new" and not fresh.cached
        off = OpenAIBackend(spec, ResponseCache(tmp_path, "off"), retry=FAST).complete(MESSAGES)
        assert off.text == "uncached" and not off.cached
        hit = OpenAIBackend(spec, ResponseCache(tmp_path), retry=FAST).complete(MESSAGES)
    assert (
        hit.text == "new"
        and hit.cached
        and len(fake.requests) == 3
        and len(ResponseCache(tmp_path)) == 1
    )


def _one_entry(folder: Path) -> Path:
    (entry,) = folder.glob("*/*.json")
    return entry


def test_cache_entries_carry_a_digest_and_legacy_ones_stay_readable(key: str, tmp_path: Path) -> None:
    with FakeOpenAI(["recorded"]) as fake:
        spec = spec_for(fake)
        OpenAIBackend(spec, ResponseCache(tmp_path), retry=FAST).complete(MESSAGES)
        entry_path = _one_entry(tmp_path)
        entry = json.loads(entry_path.read_text())
        assert entry["digest"] == m.entry_digest(entry["key"], entry["completion"])
        del entry["digest"]  # as entries were written before they carried one
        entry_path.write_text(json.dumps(entry))
        again = OpenAIBackend(spec, ResponseCache(tmp_path, "replay"), retry=FAST).complete(MESSAGES)
    assert again.cached and again.text == "recorded" and len(fake.requests) == 1


def test_a_corrupt_entry_in_use_mode_is_set_aside_not_overwritten_and_named(
        key: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with FakeOpenAI(["recorded", "asked again"]) as fake:
        spec = spec_for(fake)
        OpenAIBackend(spec, ResponseCache(tmp_path), retry=FAST).complete(MESSAGES)
        entry_path = _one_entry(tmp_path)
        torn = entry_path.read_bytes()[:57]
        entry_path.write_bytes(torn)
        with caplog.at_level("WARNING", logger="adakit.llm.models"):
            got = OpenAIBackend(spec, ResponseCache(tmp_path), retry=FAST).complete(MESSAGES)
    assert got.text == "asked again" and len(fake.requests) == 2
    aside = entry_path.with_name(entry_path.name + ".damaged")
    assert aside.read_bytes() == torn  # kept as it was
    assert json.loads(entry_path.read_text())["completion"]["text"] == "asked again"
    assert f"damaged cache entry {entry_path.stem}" in caplog.text and aside.name in caplog.text


def test_a_json_valid_edit_is_caught_by_the_digest(key: str, tmp_path: Path) -> None:
    with FakeOpenAI(["recorded", "asked again"]) as fake:
        spec = spec_for(fake)
        OpenAIBackend(spec, ResponseCache(tmp_path), retry=FAST).complete(MESSAGES)
        entry_path = _one_entry(tmp_path)
        entry = json.loads(entry_path.read_text())
        entry["completion"]["text"] = "edited by hand"
        entry_path.write_text(json.dumps(entry))
        assert "digest" in (m.entry_problem(entry, entry["key"]) or "")
        with pytest.raises(m.CacheDamaged, match="digest"):
            OpenAIBackend(spec, ResponseCache(tmp_path, "replay"), retry=FAST).complete(MESSAGES)
        second = entry_path.with_name(entry_path.name + ".damaged")
        assert json.loads(second.read_text())["completion"]["text"] == "edited by hand"
        fresh = OpenAIBackend(spec, ResponseCache(tmp_path), retry=FAST).complete(MESSAGES)
    assert fresh.text == "asked again" and not fresh.cached  # the model was asked again


def test_replay_names_a_damaged_entry_not_a_request_never_asked(
        key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeOpenAI(["recorded"]) as fake:
        spec = spec_for(fake)
        OpenAIBackend(spec, ResponseCache(tmp_path), retry=FAST).complete(MESSAGES)
    monkeypatch.delenv(KEY_ENV)
    entry_path = _one_entry(tmp_path)
    entry_path.write_text('{"key": "' + entry_path.stem + '", "completion": {"te')
    replay = OpenAIBackend(spec, ResponseCache(tmp_path, "replay"), retry=FAST)
    with pytest.raises(CacheMiss) as ei:  # still a CacheMiss: the replay stops loudly
        replay.complete(MESSAGES)
    text = str(ei.value)
    assert isinstance(ei.value, m.CacheDamaged) and not isinstance(ei.value, ModelError)
    assert f"damaged cache entry {entry_path.stem} in {entry_path}" in text
    assert "never asked" not in text
    with pytest.raises(m.CacheDamaged, match="set aside as damaged earlier") as again:
        replay.complete(MESSAGES)  # the entry is set aside: still named as damaged
    assert str(entry_path) + ".damaged" in str(again.value)


def test_cache_key_ignores_the_api_key(tmp_path: Path, monkeypatch) -> None:
    with FakeOpenAI(["with key one"]) as fake:
        spec = spec_for(fake)
        monkeypatch.setenv(KEY_ENV, "sk-one-aaaaaaaaaaaa")
        OpenAIBackend(spec, ResponseCache(tmp_path), retry=FAST).complete(MESSAGES)
        monkeypatch.setenv(KEY_ENV, "sk-two-bbbbbbbbbbbb")
        c = OpenAIBackend(spec, ResponseCache(tmp_path), retry=FAST).complete(MESSAGES)
    assert c.cached and c.text == "with key one" and len(fake.requests) == 1


def test_api_key_never_written_to_the_cache(key: str, tmp_path: Path) -> None:
    folder = tmp_path / "responses"
    with FakeOpenAI(["a", error(429), "b", tool_call("bookmark", {"note": "n"})]) as fake:
        backend = OpenAIBackend(spec_for(fake, mode="function"), ResponseCache(folder), retry=FAST)
        backend.complete(MESSAGES)
        backend.complete(MESSAGES + [{"role": "user", "content": "more"}])
        backend.complete(MESSAGES, tools=[{"type": "function", "function": {"name": "bookmark"}}])
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert len(files) == 3
    for path in files:
        text = path.read_text()
        assert SECRET not in text and "sk-test" not in text


def test_local_spec_cache_key_is_port_independent(tmp_path: Path) -> None:
    """A local model's requests are keyed by its stable endpoint, not the loopback port."""
    spec = ModelSpec(name="loc", kind="local", model_id="tiny.gguf", gguf="tiny.gguf")
    cache = ResponseCache(tmp_path)
    with FakeOpenAI(["a"]) as one:
        OpenAIBackend(spec, cache, base_url=one.url, retry=FAST).complete(MESSAGES)
    with FakeOpenAI([]) as two:
        c = OpenAIBackend(spec, cache, base_url=two.url, retry=FAST).complete(MESSAGES)
        assert two.requests == []
    assert c.cached and c.text == "a"


def test_backend_for_cache_arguments(tmp_path: Path) -> None:
    spec = m.get_model("deepseek-v3.2")
    b = m.backend_for(spec, cache=tmp_path, cache_mode="replay")
    assert b.cache.folder == tmp_path and b.cache.mode == "replay"
    assert m.backend_for(spec, cache_mode="off").cache is None
    b = m.backend_for(spec, cache=ResponseCache(tmp_path, "refresh"))
    assert b.cache.mode == "refresh"
    local = m.backend_for("smollm2-135m", cache=tmp_path, cache_mode="replay")
    assert isinstance(local, m.LocalModelBackend)
    before = dict(m._SERVERS)  # servers an earlier test may have left for this process
    with pytest.raises(CacheMiss):  # replay never starts the local server
        local.complete(MESSAGES)
    assert m._SERVERS == before and local._server is None


def test_completion_round_trip() -> None:
    c = Completion(text="t", tokens_in=1, tokens_out=2, latency_s=0.5, cost_usd=None,
                   tool_calls=[{"name": "x", "arguments": {}}])  # fmt: skip
    assert Completion.from_dict(c.to_dict()) == c


# --- the CLI ---------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    """``adakit models ...`` through this module's own subcommands only."""
    import argparse

    parser = argparse.ArgumentParser(prog="adakit")
    m.register_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_cli_list_shows_key_variables_not_values(capsys, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert SECRET not in out
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert rows["gpt-4o"].endswith("yes (key set)")
    assert rows["deepseek-v3.2"].endswith("no: key not set")
    assert "OPENAI_API_KEY" in rows["gpt-4o"]


def test_cli_list_shows_the_baselines_and_whether_weights_are_installed(capsys, monkeypatch):
    from adakit.llm import models as m

    monkeypatch.setattr(m, "local_model_available", lambda spec: (False, "missing"))
    assert main(["models", "list"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    for policy in ("skimmer", "tracer", "close_reader"):
        assert "scripted, not an LLM" in rows[f"baseline-{policy}"]
    assert "weights not installed" in rows["qwen2.5-coder-1.5b"]
    monkeypatch.setattr(m, "local_model_available", lambda spec: (True, ""))
    assert main(["models", "list"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "weights installed" in rows["qwen2.5-coder-1.5b"]


def test_cli_check(capsys, monkeypatch, tmp_path: Path) -> None:
    with FakeOpenAI([reply("ready", tokens_in=9, tokens_out=1)]) as fake:
        user = tmp_path / "models.yaml"
        user.write_text(
            f"models:\n  fake:\n    base_url: {fake.url}\n    model_id: m\n"
            f"    api_key_env: {KEY_ENV}\n"
        )
        monkeypatch.setenv(m.USER_REGISTRY_ENV, str(user))
        monkeypatch.setenv(KEY_ENV, SECRET)
        assert main(["models", "check", "fake"]) == 0
        assert "'ready'" in capsys.readouterr().out
        monkeypatch.delenv(KEY_ENV)
        assert main(["models", "check", "fake"]) == 1
        assert KEY_ENV in capsys.readouterr().err


# ---------------------------------------------------------------- per-endpoint rate limiting


def test_auth_errors_have_their_own_kind(key: str) -> None:
    with FakeOpenAI([error(401, message="invalid api key")]) as fake:
        with pytest.raises(ModelError, match="HTTP 401") as ei:
            OpenAIBackend(spec_for(fake), retry=FAST).complete(MESSAGES)
    assert ei.value.kind == "auth" and ei.value.kind in m.RETRYABLE_KINDS


def test_connection_refused_gives_up_as_unreachable(key: str) -> None:
    spec = ModelSpec(name="gone", base_url=f"http://127.0.0.1:{m.free_port()}/v1", model_id="x",
                     api_key_env=KEY_ENV)  # fmt: skip
    with pytest.raises(ModelError) as ei:
        OpenAIBackend(spec, retry=RetryPolicy(attempts=2, base=0.01, cap=0.01)).complete(MESSAGES)
    assert ei.value.kind == "unreachable" and ei.value.kind in m.RETRYABLE_KINDS


def test_429s_have_their_own_retry_budget(key: str) -> None:
    # eight 429s in a row would exhaust attempts=4; a rate limit is waited out instead
    with FakeOpenAI([error(429, retry_after=0.01)] * 8 + ["ok"]) as fake:
        c = OpenAIBackend(spec_for(fake, model_id="budget-429"), retry=FAST).complete(MESSAGES)
    assert c.text == "ok" and c.attempts == 9
    policy = RetryPolicy(attempts=4, base=0.01, cap=0.02, rate_limit_attempts=3)
    with FakeOpenAI([error(429, retry_after=0.01)] * 3) as fake:
        with pytest.raises(ModelError, match="giving up after 3 attempts; last error: HTTP 429") as ei:
            OpenAIBackend(spec_for(fake, model_id="budget-429b"), retry=policy).complete(MESSAGES)
    assert ei.value.kind == "gave_up"


def _two_threads(fake: FakeOpenAI, shared: bool) -> None:
    """After a warm-up call, thread A meets a 429 asking for 1 s; thread B calls 0.1 s later."""
    import threading

    spec = spec_for(fake, model_id=f"pause-{shared}-{fake.port}")
    limiter = "shared" if shared else None
    backends = [OpenAIBackend(spec, retry=FAST, limiter=limiter) for _ in range(2)]
    backends[0].complete(MESSAGES)  # the client exists before the timed part
    a = threading.Thread(target=backends[0].complete, args=(MESSAGES,))
    a.start()
    time.sleep(0.1)
    backends[1].complete(MESSAGES)
    a.join()


@pytest.mark.parametrize("shared", [True, False])
def test_a_429_pauses_the_whole_endpoint(key: str, shared: bool) -> None:
    arrivals: list[float] = []

    def script(request: dict) -> object:
        arrivals.append(time.monotonic())
        return error(429, retry_after=1.0) if len(arrivals) == 2 else "ok"

    with FakeOpenAI(script) as fake:
        _two_threads(fake, shared)
    assert len(arrivals) == 4
    after = sorted(t - arrivals[1] for t in arrivals[2:])  # seconds after the 429
    if shared:  # B waits out the pause A's 429 started: nothing arrives before 1 s
        assert after[0] >= 0.98
    else:  # each thread on its own: B goes straight through at ~0.1 s (a loaded CI machine
        assert after[0] < 0.8  # may stretch that, so the bound only tells the two apart)


def test_max_concurrency_caps_requests_in_flight_across_threads(key: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with FakeOpenAI(lambda request: reply("ok", delay=0.05)) as fake:
        spec = spec_for(fake, model_id="capped", max_concurrency=3)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: OpenAIBackend(spec, retry=FAST).complete(MESSAGES), range(16)))
        limiter = m.endpoint_limiter(spec)
    assert fake.answered == 16 and fake.max_in_flight == 3
    assert limiter.stats["max_in_flight"] == 3 and limiter.limit == 3
    with pytest.raises(ModelError, match="max_concurrency must be a positive integer"):
        ModelSpec(name="x", base_url="http://h/v1", model_id="x", max_concurrency=0)


def test_eight_threads_under_injected_429s_all_complete(key: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with FakeOpenAI(lambda request: reply("ok", delay=0.01), rate_limit=0.3, retry_after=0.02) as fake:
        spec = spec_for(fake, model_id="injected-429", max_concurrency=4)

        def worker(_: int) -> int:
            backend = OpenAIBackend(spec, retry=FAST)
            return sum(backend.complete(MESSAGES).text == "ok" for _ in range(10))

        with ThreadPoolExecutor(8) as pool:
            done = sum(pool.map(worker, range(8)))
    assert done == 80 == fake.answered
    # exactly 30% of the requests were refused: 114 sent for 80 replies (1.43x)
    assert fake.refused == int(len(fake.requests) * 0.3) and len(fake.requests) <= 1.5 * done
    assert fake.max_in_flight <= 4


def test_after_a_pause_the_endpoint_starts_with_one_request_and_doubles() -> None:
    limiter = m.EndpointLimiter(("http://h/v1", "slow"), limit=6)
    policy = RetryPolicy(base=0.0, cap=0.0)
    assert limiter._cap() == 6
    with limiter.slot() as sent:
        pass
    limiter.rate_limited(sent, 0.0, policy)
    caps = [limiter._cap()]
    for _ in range(3):
        with limiter.slot() as sent:
            pass
        limiter.succeeded(sent)
        caps.append(limiter._cap())
    assert caps == [1, 2, 4, 6]  # the window reached the cap and was lifted
    # a 429 for a request sent before the episode began neither escalates nor restarts it
    limiter.rate_limited(sent, 0.0, policy)
    with limiter.slot() as fresh:
        pass
    limiter.rate_limited(sent, 0.0, policy)
    assert limiter._strikes == 1 and limiter._cap() == 1
    limiter.succeeded(sent)  # an answer to a request sent before the episode: no signal
    assert limiter._strikes == 1 and limiter._cap() == 1
    limiter.succeeded(fresh)  # a fresh answer ends the episode and widens the window
    assert limiter._strikes == 0 and limiter._cap() == 2
