"""The agent loop against a fake OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, error, stall, tool_call

from adakit.apparatus.agent import (
    CLOSE_TEXT,
    LaunchContext,
    Run,
    RunConfig,
    estimate_tokens,
    first_message,
    fit_window,
    system_prompt,
)
from adakit.apparatus.conditions import get_condition, load_conditions
from adakit.apparatus.tasks import make_task
from adakit.apparatus.world import World
from adakit.llm.models import ModelSpec, OpenAIBackend, ResponseCache, RetryPolicy
from adakit.record import content_digest

KEY_VAR = "ADAKIT_TEST_KEY"
SECRET = "sk-test-" + "s3cr3t" * 5


def peek(path: str = "pkg/app.py", start: int = 1, end: int = 5) -> str:
    return (
        f"<thinking>read {path}</thinking>\n<peek_code_region>\n<file_path>{path}</file_path>\n"
        f"<start_line>{start}</start_line>\n<end_line>{end}</end_line>\n</peek_code_region>"
    )


MEMORY = (
    "<thinking>note it</thinking><create_memory><memory_title>app</memory_title>"
    "<memory_content>serve() calls helper()</memory_content><confidence_level>high</confidence_level>"
    "</create_memory>"
)
FINAL = (
    "<thinking>enough</thinking><stash_conclusion><title>Flow</title><content>serve calls helper"
    "</content><proceed_to_finalize>true</proceed_to_finalize></stash_conclusion>"
)
HOLD = FINAL.replace("true", "false")


@pytest.fixture()
def world(tmp_path: Path) -> World:
    root = tmp_path / "toy"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "app.py").write_text(
        textwrap.dedent(
            '''\
            """A toy app."""
            from pkg.util import helper


            def serve(request):
                """Handle one request."""
                return helper(request) + 1


            class Server:
                def run(self):
                    return serve(0)
            '''
        )
    )
    (root / "pkg" / "util.py").write_text("def helper(x):\n    return x * 2\n")
    return World(root, name="toy")


def spec_for(fake: FakeOpenAI, **kw) -> ModelSpec:
    base = dict(name="fake", kind="llm", base_url=fake.url, model_id="fake-model", api_key_env=KEY_VAR,
                temperature=0.2, max_tokens=256, context_window=32000)
    base.update(kw)
    return ModelSpec(**base)


def launch(world, fake, path, condition="natural", turn_bound=10, cache=None, spec=None, **cfg):
    spec = spec or spec_for(fake)
    backend = OpenAIBackend(spec, cache=cache, retry=RetryPolicy(attempts=3, base=0.01, cap=0.05))
    ctx = LaunchContext(world=world, task=make_task("feature_tracing", "toy"),
                        condition=get_condition(condition), backend=backend)
    return Run(ctx, RunConfig(run_id=path.stem, turn_bound=turn_bound, **cfg), path).execute()


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, SECRET)


def test_run_records_every_turn_and_finalizes(world, tmp_path):
    bad = "<thinking>hmm</thinking> no call here"
    with FakeOpenAI([peek(), bad, MEMORY, HOLD, FINAL]) as fake:
        rf = launch(world, fake, tmp_path / "r1.jsonl")
    assert rf.end.reason == "finalize"
    assert [t.turn for t in rf.turns] == [1, 2, 3, 4, 5]
    t1, t2, t3, t4, t5 = rf.turns
    assert t1.metrics.tool == "PKR" and t1.metrics.ranges == [(1, 5)] and t1.thinking == "read pkg/app.py"
    assert "def serve" in t1.observation
    assert t2.parse_error.kind == "no_tool" and t2.metrics.error_type == "malformed"
    assert "mistake 1 of 3" in t2.observation
    assert t3.metrics.tool == "MEM" and t3.metrics.confidence == "high"
    assert t4.metrics.finalize is False and t5.metrics.finalize is True
    assert rf.end.conclusion == "serve calls helper" and rf.end.conclusion_title == "Flow"
    assert rf.end.totals["turns"] == 5 and rf.end.totals["errors"] == 1
    assert all(t.tokens_in > 0 and t.tokens_out > 0 for t in rf.turns)
    # the state channels reach the model: the memory shows in the next request
    last_user = fake.requests[3]["messages"][-1]["content"]
    assert "MEMORY" in last_user and "serve() calls helper()" in last_user


def test_prompt_prefix_is_append_only(world, tmp_path):
    with FakeOpenAI([peek(), MEMORY, peek("pkg/util.py", 1, 2), FINAL]) as fake:
        launch(world, fake, tmp_path / "r.jsonl")
    reqs = [r["messages"] for r in fake.requests]
    for prev, cur in zip(reqs, reqs[1:], strict=False):
        assert cur[: len(prev)] == prev  # history only grows; nothing earlier is rewritten
        assert len(cur) == len(prev) + 2
    assert reqs[0][0]["role"] == "system" and "peek_code_region" in reqs[0][0]["content"]


def test_three_malformed_replies_end_the_run(world, tmp_path):
    with FakeOpenAI(["nothing", "<read_file><path>x</path></read_file>", "still nothing"]) as fake:
        rf = launch(world, fake, tmp_path / "m.jsonl")
    assert rf.end.reason == "malformed_limit"
    assert [t.parse_error.kind for t in rf.turns] == ["no_tool", "unknown_tool", "no_tool"]
    assert rf.turns[1].metrics.error_type == "unknown_tool"


def test_mistake_counter_resets_after_a_good_turn(world, tmp_path):
    with FakeOpenAI(["x", "y", peek(), "z", "w", FINAL]) as fake:
        rf = launch(world, fake, tmp_path / "m2.jsonl")
    assert rf.end.reason == "finalize" and len(rf.turns) == 6


def test_turn_bound(world, tmp_path):
    with FakeOpenAI([peek(), peek(start=6, end=9), peek(start=2, end=3)]) as fake:
        rf = launch(world, fake, tmp_path / "b.jsonl", turn_bound=2)
    assert rf.end.reason == "turn_bound" and len(rf.turns) == 2 and len(fake.requests) == 2


def test_transient_errors_are_retried_inside_a_turn(world, tmp_path):
    with FakeOpenAI([error(429, retry_after=0.01), 500, peek(), FINAL]) as fake:
        rf = launch(world, fake, tmp_path / "t.jsonl")
    assert rf.end.reason == "finalize" and len(rf.turns) == 2 and len(fake.requests) == 4


def test_model_error_ends_the_run_and_keeps_the_record(world, tmp_path):
    with FakeOpenAI([peek(), 500, 500, 500]) as fake:
        rf = launch(world, fake, tmp_path / "e.jsonl")
    assert rf.end.reason == "model_error" and len(rf.turns) == 1
    assert "500" in rf.end.error


def test_budget_reminders_are_injected_on_schedule(world, tmp_path):
    script = [peek(start=i, end=i) for i in range(1, 12)] + [FINAL]
    with FakeOpenAI(script) as fake:
        rf = launch(world, fake, tmp_path / "bp.jsonl", condition="budget_pressure", turn_bound=20)
    fired = {t.turn: t.injected[0].text for t in rf.turns if t.injected}
    assert sorted(fired) == [6, 9, 11]
    assert all(i.source == "reminder" for t in rf.turns for i in t.injected)
    # the reminder after turn 6 is in the 7th request, the budget block in the first
    assert "6 of 12" in fake.requests[6]["messages"][-1]["content"]
    assert "budget of 12" in fake.requests[0]["messages"][1]["content"]
    assert rf.header.condition.budget == 12


def test_context_overflow_drops_oldest_turns(world, tmp_path):
    script = [peek(start=1, end=12)] * 6 + [FINAL]
    with FakeOpenAI(script) as fake:
        spec = spec_for(fake, context_window=2600, max_tokens=100)
        rf = launch(world, fake, tmp_path / "c.jsonl", spec=spec, tree_max_files=5)
    dropped = [t.dropped_messages for t in rf.turns]
    assert max(dropped) > 0 and dropped[0] == 0
    first = fake.requests[-1]["messages"]
    assert first[0]["role"] == "system" and "Find and describe" in first[1]["content"]
    assert "left out to fit the context window" in first[1]["content"]


def test_a_stable_window_keeps_its_prefix_across_turns(world, tmp_path):
    """``window_drop: stable`` leaves out several pairs at once and then the same ones while
    the prompt fits, so consecutive requests share their start; "pair" leaves out one more
    pair on every turn past the window, so each request starts differently."""
    script = [peek(start=1, end=12)] * 12 + [FINAL]
    requests, dropped = {}, {}
    for policy in ("pair", "stable"):
        with FakeOpenAI(script) as fake:
            spec = spec_for(fake, context_window=2600, max_tokens=100)
            rf = launch(world, fake, tmp_path / f"{policy}.jsonl", spec=spec, tree_max_files=5,
                        turn_bound=12, window_drop=policy, repeat_guard="note")
        requests[policy] = [r["messages"] for r in fake.requests]
        dropped[policy] = [t.dropped_messages for t in rf.turns]
        assert all(estimate_tokens(m) <= 2600 - 100 for m in requests[policy])
    pair, stable = dropped["pair"], dropped["stable"]
    assert max(pair) > 0 and max(stable) > 0

    def new_starts(msgs):  # requests whose first three messages differ from the request before
        return sum(a[:3] != b[:3] for a, b in zip(msgs, msgs[1:], strict=False))

    assert new_starts(requests["stable"]) < new_starts(requests["pair"])
    # stable: each drop leaves room for later turns, so a count repeats on the next turn
    grown = [b for a, b in zip(stable, stable[1:], strict=False) if b > a]
    assert all(stable.count(d) >= 2 for d in grown[:-1])
    assert len(set(pair)) > len(set(stable))
    with pytest.raises(ValueError, match="window_drop must be one of pair, stable"):
        RunConfig(run_id="x", window_drop="half")


def test_fit_window_stable_within_its_fill():
    msgs = [{"role": "system", "content": "s" * 100}, {"role": "user", "content": "task"}]
    for i in range(10):
        msgs += [{"role": "assistant", "content": f"a{i}" * 50}, {"role": "user", "content": f"o{i}" * 50}]
    just, d1 = fit_window(msgs, context_window=600, reply_tokens=50)
    roomy, d2 = fit_window(msgs, context_window=600, reply_tokens=50, fill=0.6)
    assert (d1, d2) == (8, 14)
    assert estimate_tokens(roomy) <= 550 * 0.6 < estimate_tokens(just) <= 550
    # while it fits, the count an earlier turn left out is kept, even where fewer would do
    assert fit_window(msgs, context_window=600, reply_tokens=50, start=d2, fill=0.6) == (roomy, d2)
    kept, d3 = fit_window(msgs[:8], context_window=600, reply_tokens=50, start=4)
    assert d3 == 4 and kept[2:] == msgs[6:8]
    assert fit_window(msgs[:8], context_window=600, reply_tokens=50) == (msgs[:8], 0)


def test_context_overflow_reason_when_core_cannot_fit(world, tmp_path):
    with FakeOpenAI([peek()]) as fake:
        spec = spec_for(fake, context_window=300, max_tokens=100)
        rf = launch(world, fake, tmp_path / "o.jsonl", spec=spec)
    assert rf.end.reason == "context_overflow" and len(fake.requests) == 0


def test_fit_window_keeps_alternation():
    msgs = [{"role": "system", "content": "s" * 100}, {"role": "user", "content": "task"}]
    for i in range(10):
        msgs += [{"role": "assistant", "content": f"a{i}" * 50}, {"role": "user", "content": f"o{i}" * 50}]
    window, dropped = fit_window(msgs, context_window=400, reply_tokens=50)
    roles = [m["role"] for m in window]
    assert roles[:2] == ["system", "user"] and roles[2] == "assistant" and dropped % 2 == 0
    assert all(a != b for a, b in zip(roles[1:], roles[2:], strict=False))
    assert window[-1] == msgs[-1]


def test_no_api_key_in_any_output(world, tmp_path):
    cache = ResponseCache(tmp_path / "cache")
    with FakeOpenAI([peek(), FINAL]) as fake:
        launch(world, fake, tmp_path / "runs" / "k.jsonl", cache=cache)
    for f in [*tmp_path.rglob("*")]:
        if f.is_file():
            assert SECRET not in f.read_text(errors="replace"), f


def test_cache_replay_reproduces_the_run(world, tmp_path):
    cache = ResponseCache(tmp_path / "cache")
    with FakeOpenAI([peek(), MEMORY, "bad", FINAL]) as fake:
        live = launch(world, fake, tmp_path / "live.jsonl", cache=cache)
        url = fake.url
    # the server is gone: replay must come entirely from the cache
    spec = ModelSpec(name="fake", kind="llm", base_url=url, model_id="fake-model", api_key_env=KEY_VAR,
                     temperature=0.2, max_tokens=256, context_window=32000)
    backend = OpenAIBackend(spec, cache=cache.with_mode("replay"))
    ctx = LaunchContext(world=world, task=make_task("feature_tracing", "toy"),
                        condition=get_condition("natural"), backend=backend)
    replay = Run(ctx, RunConfig(run_id="live", turn_bound=10), tmp_path / "replay" / "live.jsonl").execute()
    assert all(t.cached for t in replay.turns)
    assert content_digest(replay) == content_digest(live)
    assert [t.raw_text for t in replay.turns] == [t.raw_text for t in live.turns]


def test_resume_continues_after_the_last_recorded_turn(world, tmp_path):
    path = tmp_path / "res.jsonl"
    with FakeOpenAI([peek(), MEMORY, peek("pkg/util.py", 1, 2), 400]) as fake:
        first = launch(world, fake, path)
    assert first.end.reason == "model_error"
    # simulate a crash instead of a clean end: drop the end record and tear a half line on
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]) + '{"kind": "turn", "tur')
    with FakeOpenAI([FINAL]) as fake:
        rf = launch(world, fake, path)
    assert rf.end.reason == "finalize"
    assert [t.turn for t in rf.turns] == [1, 2, 3, 4]
    assert rf.turns[1].metrics.tool == "MEM"
    # the resumed request carries the whole recorded history and the rebuilt memory
    msgs = fake.requests[0]["messages"]
    assert len(msgs) == 2 + 2 * 3 and "serve() calls helper()" in msgs[-1]["content"]
    assert sum(1 for line in path.read_text().splitlines() if json.loads(line)["kind"] == "header") == 1


def test_a_timed_out_call_is_retried(world, tmp_path):
    with FakeOpenAI([stall(2.0, then=peek()), peek(), FINAL]) as fake:
        rf = launch(world, fake, tmp_path / "to.jsonl", spec=spec_for(fake, timeout_s=0.5))
    assert rf.end.reason == "finalize" and len(rf.turns) == 2
    assert len(fake.requests) == 3  # the stalled request, its retry, and the conclusion


def test_native_function_calling_mode_produces_the_same_record(world, tmp_path):
    script = [
        tool_call("peek_code_region", {"file_path": "pkg/app.py", "start_line": 1, "end_line": 5}, text="read app"),
        tool_call("read_file", {"path": "x"}),
        tool_call("stash_conclusion", {"content": "serve calls helper", "proceed_to_finalize": True}),
    ]
    with FakeOpenAI(script) as fake:
        rf = launch(world, fake, tmp_path / "fn.jsonl", spec=spec_for(fake, mode="function"))
    assert rf.header.model.mode == "function"
    assert [t.metrics.tool for t in rf.turns] == ["PKR", None, "CON"]
    assert rf.turns[0].thinking == "read app" and rf.turns[0].metrics.ranges == [(1, 5)]
    assert "<peek_code_region>" in rf.turns[0].raw_text  # history keeps the uniform XML form
    assert rf.turns[1].parse_error.kind == "unknown_tool"
    assert rf.end.reason == "finalize" and rf.end.conclusion == "serve calls helper"
    sent = fake.requests[0]["tools"]
    assert {t["function"]["name"] for t in sent} >= {"peek_code_region", "stash_conclusion"}


def test_deeply_nested_function_arguments_are_a_malformed_turn(world, tmp_path):
    deep = '{"file_path": ' + "[" * 50_000 + "]" * 50_000 + ', "start_line": 1}'
    script = [
        tool_call("peek_code_region", deep),
        tool_call("stash_conclusion", {"content": "done", "proceed_to_finalize": True}),
    ]
    with FakeOpenAI(script) as fake:
        rf = launch(world, fake, tmp_path / "deep.jsonl", spec=spec_for(fake, mode="function"))
    assert rf.turns[0].parse_error.kind == "bad_value"
    assert "nested too deeply" in rf.turns[0].observation
    assert rf.end.reason == "finalize"  # the run went on


def test_a_cut_observation_records_only_the_lines_shown(world, tmp_path):
    big = world.root / "pkg" / "big.py"
    big.write_text("".join(f"value_{i} = {i}  # a fairly long line to fill the budget\n" for i in range(1, 201)))
    with FakeOpenAI([peek("pkg/big.py", 1, 80), FINAL]) as fake:
        rf = launch(world, fake, tmp_path / "cut.jsonl", max_observation_chars=1200)
    t = rf.turns[0]
    assert "output cut at 1200 characters" in t.observation
    last_shown = max(int(m) for m in re.findall(r"^\s*(\d+): ", t.observation, re.M))
    assert t.metrics.ranges == [(1, last_shown)] and 10 < last_shown < 80
    assert t.metrics.lines_viewed == last_shown


@pytest.mark.parametrize("name", sorted(load_conditions()))
def test_every_condition_reaches_the_prompt(world, name):
    cond = load_conditions()[name]
    system = system_prompt(world, cond)
    first = first_message(make_task("risk_review", "toy"), cond, "MEMORY: none")
    if cond.stance:
        assert cond.stance.strip() in system
    else:
        assert "Evidence first" not in system
    if cond.budget:
        assert f"budget of {cond.budget} exploration turns" in first
        assert first.index("Exploration budget") < first.index("# Task")  # before the objective
    else:
        assert "budget" not in first.lower()
    assert "Review this repository" in first and first.rstrip().endswith("first tool call.")


def test_cache_is_scoped_per_run(world, tmp_path):
    cache = ResponseCache(tmp_path / "cache")

    def go(scope, mode="use", name="x", folder="live"):
        spec = ModelSpec(name="fake", kind="llm", base_url=fake.url, model_id="fake-model",
                         api_key_env=KEY_VAR, temperature=0.7, max_tokens=256, context_window=32000)
        backend = OpenAIBackend(spec, cache=cache.with_mode(mode), cache_scope=scope)
        ctx = LaunchContext(world=world, task=make_task("feature_tracing", "toy"),
                            condition=get_condition("natural"), backend=backend)
        return Run(ctx, RunConfig(run_id=name, turn_bound=5), tmp_path / folder / scope / f"{name}.jsonl").execute()

    with FakeOpenAI([peek(), FINAL, peek(start=2, end=3), FINAL]) as fake:
        a, b = go("run-a"), go("run-b")  # identical prompts, two runs: both reach the endpoint
        assert len(fake.requests) == 4
        assert a.turns[0].metrics.ranges != b.turns[0].metrics.ranges
        again = go("run-a", mode="replay", folder="replay")  # same scope: replayed, no new request
        assert len(fake.requests) == 4 and all(t.cached for t in again.turns)
        assert again.turns[0].metrics.ranges == a.turns[0].metrics.ranges


def test_a_changed_run_under_the_same_id_is_set_aside_not_overwritten(world, tmp_path):
    path = tmp_path / "same.jsonl"
    with FakeOpenAI([peek(), 400]) as fake:
        first = launch(world, fake, path, turn_bound=5)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n")  # unfinished, as after a crash
    with FakeOpenAI([FINAL]) as fake:
        second = launch(world, fake, path, turn_bound=9)  # different settings: a new run
    assert second.end.reason == "finalize" and len(second.turns) == 1
    kept = list(tmp_path.glob("same.stale-*.jsonl.bak"))
    assert len(kept) == 1 and kept[0].read_text().splitlines() == lines[:-1]
    assert first.header.turn_bound == 5 and second.header.turn_bound == 9


def test_repeat_guard_off_note_and_refuse(world, tmp_path):
    """An exact repeat (same tool, same parameters) runs as usual when the guard is off, runs
    with a system note under "note", and is not run under "refuse"; a call that differs in one
    parameter is never a repeat. The header records the guard."""
    script = [peek(), peek(), peek(end=6), FINAL]
    with FakeOpenAI(list(script)) as fake:
        off = launch(world, fake, tmp_path / "off.jsonl")
    assert off.header.scaffold["repeat_guard"] == "off"
    assert [t.injected for t in off.turns] == [[], [], [], []]
    assert off.turns[1].observation == off.turns[0].observation

    with FakeOpenAI(list(script)) as fake:
        note = launch(world, fake, tmp_path / "note.jsonl", repeat_guard="note")
    assert note.header.scaffold["repeat_guard"] == "note"
    t1, t2, t3, _ = note.turns
    assert t2.observation == t1.observation and t2.metrics.ranges == [(1, 5)]
    assert [i.source for i in t2.injected] == ["system"] and "turn 1" in t2.injected[0].text
    assert t3.injected == []  # end_line 6 differs: not a repeat
    assert "[SYSTEM] This call is exactly the one you made on turn 1" in (
        fake.requests[2]["messages"][-1]["content"])

    with FakeOpenAI(list(script)) as fake:
        refuse = launch(world, fake, tmp_path / "refuse.jsonl", repeat_guard="refuse")
    t1, t2, t3, t4 = refuse.turns
    assert t2.metrics.error_type == "repeated" and t2.metrics.tool == "PKR"
    assert t2.metrics.ranges == [] and "def serve" not in t2.observation
    assert t2.observation.startswith("Not run again") and "turn 1" in t2.observation
    assert t3.metrics.error_type is None and t3.metrics.ranges == [(1, 6)]
    assert refuse.end.reason == "finalize" and refuse.end.totals["errors"] == 1
    assert "mistake 1 of 3" in t2.observation
    with pytest.raises(ValueError, match="repeat_guard"):
        RunConfig(run_id="x", repeat_guard="sometimes")


def test_refused_repeats_in_a_row_end_the_run_like_malformed_replies(world, tmp_path):
    """A model stuck on one call: each refusal is a mistake in a row; a good call resets."""
    with FakeOpenAI([peek(), peek(), peek(end=7), peek(), peek(), peek(), FINAL]) as fake:
        rf = launch(world, fake, tmp_path / "stuck.jsonl", repeat_guard="refuse")
    assert [t.metrics.error_type for t in rf.turns] == [None, "repeated", None, "repeated",
                                                        "repeated", "repeated"]
    assert "mistake 1 of 3" in rf.turns[1].observation
    assert "mistake 3 of 3" in rf.turns[5].observation
    assert rf.end.reason == "malformed_limit" and len(fake.requests) == 6


class _SlowCoach:
    """A coach that spends 0.05 s on each review and always passes."""

    def review(self, turn, context):
        import time

        started = time.time()
        time.sleep(0.05)
        return {"decision": "PASS", "latency_s": 0.05, "started_at": started,
                "ended_at": time.time()}

    def resume(self, turns, context):
        pass


def test_end_totals_keep_active_coach_and_wall_time_apart(world, tmp_path):
    from adakit.record import active_seconds, coach_seconds, load_corpus

    path = tmp_path / "clock.jsonl"
    with FakeOpenAI([peek(), MEMORY, 400]) as fake:
        launch(world, fake, path)
    # a crash after two turns, resumed "an hour later": the header's launch moves back 3600 s
    lines = path.read_text().splitlines(keepends=True)[:-1]
    head = json.loads(lines[0])
    head["started_at"] -= 3600.0
    path.write_text(json.dumps(head) + "\n" + "".join(lines[1:]))
    with FakeOpenAI([FINAL]) as fake:
        spec = spec_for(fake)
        backend = OpenAIBackend(spec, retry=RetryPolicy(attempts=1, base=0.01, cap=0.05))
        ctx = LaunchContext(world=world, task=make_task("feature_tracing", "toy"),
                            condition=get_condition("natural"), backend=backend,
                            coach=_SlowCoach())
        rf = Run(ctx, RunConfig(run_id="clock", turn_bound=10), path).execute()
    totals = rf.end.totals
    assert totals["wall_s"] > 3600.0
    assert totals["coach_s"] == pytest.approx(coach_seconds(rf.turns[-1]), abs=1e-6)
    assert totals["coach_s"] >= 0.05
    assert totals["active_s"] == pytest.approx(sum(active_seconds(t) for t in rf.turns), abs=1e-5)
    assert totals["active_s"] < 60.0  # the hour of downtime is not agent time
    run = load_corpus(tmp_path, cache=False).runs.set_index("run_id").loc["clock"]
    assert run["active_s"] == pytest.approx(totals["active_s"], abs=1e-5)
    assert run["coach_s"] == pytest.approx(totals["coach_s"], abs=1e-5)


# ------------------------------------------------------------------ the closing turn (weak models)


def test_close_turn_off_changes_nothing(world, tmp_path):
    with FakeOpenAI([peek(), peek(start=6, end=9)]) as fake:
        rf = launch(world, fake, tmp_path / "off.jsonl", turn_bound=2)
    assert rf.end.reason == "turn_bound" and rf.end.conclusion is None and len(fake.requests) == 2
    assert "close_turn" not in rf.header.scaffold
    assert all(i.text != CLOSE_TEXT for t in rf.turns for i in t.injected)


def test_a_run_at_its_turn_bound_gets_one_closing_turn(world, tmp_path):
    with FakeOpenAI([peek(), peek(start=6, end=9), FINAL]) as fake:
        rf = launch(world, fake, tmp_path / "close.jsonl", turn_bound=2, close_turn=True)
    assert rf.end.reason == "turn_bound"  # what ended it; the conclusion comes from the close
    assert rf.end.conclusion == "serve calls helper" and rf.end.conclusion_title == "Flow"
    assert [t.turn for t in rf.turns] == [1, 2, 3] and rf.turns[2].metrics.tool == "CON"
    assert [i.text for i in rf.turns[1].injected] == [CLOSE_TEXT]  # shown before turn 3
    assert CLOSE_TEXT in fake.requests[2]["messages"][-1]["content"]
    assert rf.header.scaffold["close_turn"] == CLOSE_TEXT


def test_stuck_runs_close_too_and_other_calls_are_not_run(world, tmp_path):
    with FakeOpenAI(["x", "y", "z", HOLD]) as fake:
        stuck = launch(world, fake, tmp_path / "stuck.jsonl", close_turn=True)
    assert stuck.end.reason == "malformed_limit" and len(stuck.turns) == 4
    assert stuck.end.conclusion == "serve calls helper"  # proceed=false still closes the run
    assert CLOSE_TEXT in [i.text for i in stuck.turns[2].injected]
    with FakeOpenAI([peek(), peek("pkg/util.py", 1, 2)]) as fake:
        other = launch(world, fake, tmp_path / "other.jsonl", turn_bound=1, close_turn=True)
    assert other.end.reason == "turn_bound" and other.end.conclusion is None
    last = other.turns[-1]
    assert last.metrics.error_type == "malformed" and "Not run: the session is over" in last.observation
    assert len(fake.requests) == 2


def test_a_resumed_run_does_not_close_twice(world, tmp_path):
    path = tmp_path / "res-close.jsonl"
    with FakeOpenAI([peek(), FINAL]) as fake:
        first = launch(world, fake, path, turn_bound=1, close_turn=True)
    assert first.end.reason == "turn_bound" and len(first.turns) == 2
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))  # a crash after the closing turn, before the end
    with FakeOpenAI([FINAL]) as fake:
        again = launch(world, fake, path, turn_bound=1, close_turn=True)
    assert fake.requests == [] and again.end.reason == "turn_bound"
    assert again.end.conclusion == "serve calls helper" and len(again.turns) == 2


def test_the_closing_grammar_admits_only_the_conclusion(world, tmp_path):
    spec = dict(constrain="grammar")
    with FakeOpenAI([peek(), FINAL]) as fake:
        launch(world, fake, tmp_path / "g.jsonl", turn_bound=1, close_turn=True,
               spec=spec_for(fake, **spec))
    grammars = [r.get("grammar") or (r.get("extra_body") or {}).get("grammar") for r in fake.requests]
    assert all(grammars) and grammars[0] != grammars[1]
    assert "peek_code_region" in grammars[0] and "peek_code_region" not in grammars[1]
    assert "stash_conclusion" in grammars[1]


def test_the_closing_conclusion_gets_a_longer_cap_and_token_budget(world, tmp_path):
    """The closing turn's grammar caps ``content`` at ``close_chars`` (other text keeps 400)
    and its reply budget grows to fit; the header records the cap."""
    from adakit.apparatus.agent import TEXT_CHARS, close_reply_tokens

    with FakeOpenAI([peek(), FINAL]) as fake:
        rf = launch(world, fake, tmp_path / "cap.jsonl", turn_bound=1, close_turn=True,
                    close_chars=1000, reply_max_tokens=300, spec=spec_for(fake, constrain="grammar"))
    grammars = [(r.get("extra_body") or {}).get("grammar") or r.get("grammar") for r in fake.requests]
    assert "{1,1000}" not in grammars[0] and f"{{1,{TEXT_CHARS}}}" in grammars[0]
    assert "text-content ::= [^<]{1,1000}" in grammars[1]
    assert "<content>\" text-content" in grammars[1] and "<title>\" text " in grammars[1]
    assert [r["max_tokens"] for r in fake.requests] == [300, close_reply_tokens(300, 1000)]
    assert close_reply_tokens(300, 1000) == 300 + 200 and close_reply_tokens(300, 100) == 300
    assert rf.header.scaffold["close_chars"] == 1000
    with pytest.raises(ValueError, match="close_chars"):
        RunConfig(run_id="x", close_chars=0)


def test_a_function_calling_closing_turn_offers_only_the_conclusion(world, tmp_path):
    script = [
        tool_call("peek_code_region", {"file_path": "pkg/app.py", "start_line": 1, "end_line": 5}),
        tool_call("stash_conclusion", {"content": "serve calls helper", "proceed_to_finalize": True}),
    ]
    with FakeOpenAI(script) as fake:
        rf = launch(world, fake, tmp_path / "fnclose.jsonl", turn_bound=1, close_turn=True,
                    spec=spec_for(fake, mode="function"))
    offered = [{t["function"]["name"] for t in r["tools"]} for r in fake.requests]
    assert len(offered[0]) == 7 and offered[1] == {"stash_conclusion"}
    assert rf.end.conclusion == "serve calls helper"


def test_an_unconstrained_closing_conclusion_is_cut_at_its_cap(world, tmp_path):
    """What the closing instruction says (a longer conclusion is cut off) holds without a
    grammar too; the raw reply stays as the model wrote it."""
    long = FINAL.replace("serve calls helper", "serve calls helper. " * 20)
    with FakeOpenAI([peek(), long]) as fake:
        rf = launch(world, fake, tmp_path / "cut.jsonl", turn_bound=1, close_turn=True,
                    close_chars=100)
    assert rf.end.conclusion == "serve calls helper. " * 5  # 100 characters
    assert len(rf.turns[-1].call.params["content"]) == 100
    assert rf.turns[-1].raw_text == long


def test_a_redrawn_repeat_keeps_only_the_new_draw(world, tmp_path):
    """A reply that exactly repeats an earlier call is drawn again at a higher temperature
    before the conversation sees it: one turn, two draws recorded, and the next request holds
    only the kept draw."""
    with FakeOpenAI([peek(), peek(), peek("pkg/util.py", 1, 2), FINAL]) as fake:
        rf = launch(world, fake, tmp_path / "redraw.jsonl", redraw_repeats=2,
                    repeat_guard="refuse")
    assert rf.header.scaffold["redraw_repeats"] == 2 and rf.header.scaffold["redraw_step"] == 0.2
    assert [t.turn for t in rf.turns] == [1, 2, 3] and rf.end.reason == "finalize"
    t2 = rf.turns[1]
    assert t2.call.params["file_path"] == "pkg/util.py" and t2.metrics.error_type is None
    first, second = t2.model_calls
    assert (first.purpose, first.draw, first.repeat_of, first.temperature) == ("draw", 0, 1, 0.2)
    assert first.text == peek() and first.seed is None
    assert (second.draw, second.repeat_of, second.temperature, second.text) == (1, None, 0.4, None)
    assert second.seed is not None
    assert t2.tokens_out == first.tokens_out + second.tokens_out
    # the redraw's request: same messages, higher temperature
    assert fake.requests[2]["messages"] == fake.requests[1]["messages"]
    assert fake.requests[1]["temperature"] == 0.2 and fake.requests[2]["temperature"] == 0.4
    # the next turn's conversation holds the kept draw only
    sent = [m["content"] for m in fake.requests[3]["messages"] if m["role"] == "assistant"]
    assert sent == [peek(), peek("pkg/util.py", 1, 2)]
    assert all(not t.model_calls for t in (rf.turns[0], rf.turns[2]))


def test_redraws_that_keep_repeating_fall_back_to_the_repeat_guard(world, tmp_path):
    with FakeOpenAI([peek(), peek(), peek(), peek(), FINAL]) as fake:
        rf = launch(world, fake, tmp_path / "stuck.jsonl", redraw_repeats=2, redraw_step=0.3,
                    repeat_guard="refuse")
    t2 = rf.turns[1]
    assert t2.metrics.error_type == "repeated" and t2.observation.startswith("Not run again")
    assert [(c.draw, c.repeat_of) for c in t2.model_calls] == [(0, 1), (1, 1), (2, 1)]
    assert [c.temperature for c in t2.model_calls] == [0.2, 0.5, 0.8]
    assert [c.text is None for c in t2.model_calls] == [False, False, True]  # the last is kept
    assert len({c.seed for c in t2.model_calls[1:]}) == 2
    assert [float(r["temperature"]) for r in fake.requests] == [0.2, 0.2, 0.5, 0.8, 0.2]


def test_a_noted_redraw_names_the_repeat_in_the_redraw_request_only(world, tmp_path):
    """``redraw_note``: the redraw's request ends with a note naming the repeated turn (and,
    under ``suggest``, calls not made yet); the first draw's request and the next turn's
    conversation do not carry it."""
    with FakeOpenAI([peek(), peek(), peek("pkg/util.py", 1, 2), FINAL]) as fake:
        rf = launch(world, fake, tmp_path / "noted.jsonl", redraw_repeats=2, redraw_note=True,
                    repeat_guard="suggest")
    assert rf.header.scaffold["redraw_note"] is True
    assert rf.turns[1].call.params["file_path"] == "pkg/util.py"
    first, redraw, after = (r["messages"] for r in fake.requests[1:4])
    assert redraw[:-1] == first[:-1]
    assert redraw[-1]["content"].startswith(first[-1]["content"] + "\n\n(Not sent yet")
    note = redraw[-1]["content"][len(first[-1]["content"]):]
    assert "made on turn 1" in note and "not made yet in this session" in note
    assert all("Not sent yet" not in m["content"] for m in after)
    with pytest.raises(ValueError, match="redraw_note needs redraw_repeats"):
        RunConfig(run_id="x", redraw_note=True)


def test_redraws_off_leave_the_record_as_it_was(world, tmp_path):
    with FakeOpenAI([peek(), peek(), FINAL]) as fake:
        rf = launch(world, fake, tmp_path / "off.jsonl", repeat_guard="refuse")
    assert not {"redraw_repeats", "redraw_note", "ledger"} & set(rf.header.scaffold)
    assert rf.turns[1].metrics.error_type == "repeated" and rf.turns[1].model_calls == []
    assert len(fake.requests) == 3
    line = (tmp_path / "off.jsonl").read_text().splitlines()[1]
    assert '"draw"' not in line and "ledger" not in fake.requests[1]["messages"][-1]["content"].lower()
    with pytest.raises(ValueError, match="redraw_repeats"):
        RunConfig(run_id="x", redraw_repeats=-1)


def test_the_ledger_rides_in_the_working_state(world, tmp_path):
    script = [peek(), MEMORY, peek(start=6, end=9), peek("pkg/util.py", 1, 2), FINAL]
    with FakeOpenAI(script) as fake:
        rf = launch(world, fake, tmp_path / "ledger.jsonl", ledger=True, ledger_chars=300)
    assert rf.header.scaffold["ledger"] is True and rf.header.scaffold["ledger_chars"] == 300
    assert "LEDGER: Nothing has been done yet." in fake.requests[0]["messages"][-1]["content"]
    state = fake.requests[4]["messages"][-1]["content"]
    ledger = state[state.index("LEDGER"):]
    assert ledger.splitlines()[1:] == [
        "  read pkg/app.py:1-9", "  memory 'app'", "  read pkg/util.py:1-2"]
