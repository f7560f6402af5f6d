"""The coach-judge sidecar (RQ3) in the real agent loop, against scripted fake endpoints."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI

from adakit.apparatus import coach as cj
from adakit.apparatus.agent import LaunchContext, Run, RunConfig
from adakit.apparatus.conditions import get_condition
from adakit.apparatus.tasks import make_task
from adakit.apparatus.world import World
from adakit.llm.models import ModelSpec, OpenAIBackend, ResponseCache, RetryPolicy
from adakit.record import (
    ParseError,
    ToolCall,
    ToolMetrics,
    Turn,
    content_digest,
    load_corpus,
    read_run,
)

KEY_VAR = "ADAKIT_COACH_TEST_KEY"


def peek(path: str = "pkg/app.py", start: int = 1, end: int = 5, why: str = "Read it.") -> str:
    return (
        f"<thinking>{why}</thinking>\n<peek_code_region>\n<file_path>{path}</file_path>\n"
        f"<start_line>{start}</start_line>\n<end_line>{end}</end_line>\n</peek_code_region>"
    )


MEMORY = (
    "<thinking>Note it.</thinking><create_memory><memory_title>app</memory_title>"
    "<memory_content>serve() calls helper()</memory_content>"
    "<confidence_level>high</confidence_level></create_memory>"
)
FINAL = (
    "<thinking>Enough.</thinking><stash_conclusion><title>Flow</title><content>serve calls "
    "helper</content><proceed_to_finalize>true</proceed_to_finalize></stash_conclusion>"
)

CALM: dict[str, dict[str, Any]] = {
    "overall": {"flow_state": "progressing", "laziness": "none", "suggestion": ""},
    "bias": {"confidence_level": "calibrated", "detected_bias": "none"},
    "navigation": {"scent_rating": "strong", "yield_rating": "useful"},
    "cognitive": {"quality": "synthesis", "risk_validity": "not_applicable"},
    "conclusion": {"saturation": "saturated", "grounding": "grounded", "missed_files": []},
    "error": {"diagnosis": "understood", "recovery": "retry", "severity": "low"},
}


@pytest.fixture()
def world(tmp_path: Path) -> World:
    root = tmp_path / "toy"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "app.py").write_text(textwrap.dedent(
        '''\
        """A toy app."""
        from pkg.util import helper


        def serve(request):
            return helper(request) + 1
        '''
    ))
    (root / "pkg" / "util.py").write_text("def helper(x):\n    return x * 2\n")
    return World(root, name="toy")


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, "sk-coach-test")


def backend(fake: FakeOpenAI | str, name: str, constrain: str = "none",
            cache: ResponseCache | None = None) -> OpenAIBackend:
    url = fake if isinstance(fake, str) else fake.url
    spec = ModelSpec(name=name, kind="llm", base_url=url, model_id=f"{name}-id",
                     api_key_env=KEY_VAR, temperature=0.2, max_tokens=256,
                     context_window=32000, constrain=constrain)  # type: ignore[arg-type]
    return OpenAIBackend(spec, cache=cache, retry=RetryPolicy(attempts=1))


def who(request: dict[str, Any]) -> tuple[str, int, bool]:
    """(role or 'coach', turn, is_retry) of a request to the coach/judges server."""
    system = request["messages"][0]["content"]
    user = request["messages"][1]["content"]
    turn = int(re.search(r"turn (\d+) \(turn bound", user).group(1))
    retry = len(request["messages"]) > 2
    if system.startswith("You are the coach"):
        return "coach", turn, retry
    role = re.match(r"You are the (\w+) judge", system).group(1)
    return role, turn, retry


class Panel:
    """A scripted judge panel and coach: ``plan[turn]`` overrides the calm ratings per role
    and gives the coach's reply; every request is logged as (role, turn, retry)."""

    def __init__(self, plan: dict[int, dict[str, Any]]) -> None:
        self.plan = plan
        self.log: list[tuple[str, int, bool]] = []

    def __call__(self, request: dict[str, Any]) -> Any:
        role, turn, retry = who(request)
        self.log.append((role, turn, retry))
        step = self.plan.get(turn, {})
        if role == "coach":
            reply = step.get("coach", {"rationale": "fine", "decision": "PASS", "message": ""})
            return reply if isinstance(reply, str) else json.dumps(reply)
        if role in step and isinstance(step[role], str | int):
            return step[role]  # raw text or an HTTP status
        return json.dumps({"reasoning": f"{role} on turn {turn}",
                           **CALM[role], **step.get(role, {})})


def launch(world, agent_fake, coach: cj.CoachJudge, path: Path, turn_bound: int = 10,
           cache: ResponseCache | None = None):
    ctx = LaunchContext(world=world, task=make_task("feature_tracing", "toy"),
                        condition=get_condition("coach_judge"),
                        backend=backend(agent_fake, "agent", cache=cache), coach=coach)
    return Run(ctx, RunConfig(run_id=path.stem, turn_bound=turn_bound), path).execute()


# ------------------------------------------------------------------------------ the loop


def test_pass_hint_reject_in_the_agent_loop(world, tmp_path):
    hint = "Look at pkg/util.py next: helper is defined there."
    reject = "You have not read helper yet; open pkg/util.py before concluding."
    plan = {
        # turn 1: calm panel -> PASS without consulting the coach
        2: {"overall": {"flow_state": "looping"},
            "navigation": {"scent_rating": "weak", "yield_rating": "useless"},
            "coach": {"rationale": "circling", "decision": "HINT", "message": hint}},
        3: {"conclusion": {"saturation": "premature", "grounding": "unsupported",
                           "missed_files": ["pkg/util.py"]},
            "coach": {"rationale": "too early", "decision": "REJECT", "message": reject}},
        4: {"bias": {"detected_bias": "confirmation"},
            "coach": {"rationale": "minor", "decision": "PASS", "message": ""}},
        # turn 5: the second finalize attempt, calm panel -> PASS -> the run ends
    }
    panel = Panel(plan)
    agent_script = [peek(), peek(start=1, end=5, why="Again."), FINAL,
                    peek("pkg/util.py", 1, 2), FINAL]
    with FakeOpenAI(agent_script) as agent, FakeOpenAI(panel) as judges:
        coach = cj.CoachJudge(backend(judges, "judge-model", constrain="json"))
        rf = launch(world, agent, coach, tmp_path / "c.jsonl")
        judge_requests = judges.requests
        agent_requests = agent.requests

    assert rf.end.reason == "finalize" and len(rf.turns) == 5
    decisions = [t.coach["decision"] for t in rf.turns]
    assert decisions == ["PASS", "HINT", "REJECT", "PASS", "PASS"]
    # the panel: overall + bias on every turn, plus the judge matching the turn's kind
    roles = {t: sorted(r for r, n, _ in panel.log if n == t and r != "coach") for t in range(1, 6)}
    assert roles[1] == roles[2] == roles[4] == ["bias", "navigation", "overall"]
    assert roles[3] == roles[5] == ["bias", "conclusion", "overall"]
    # the coach is consulted only when the report holds a concern
    assert [n for r, n, _ in panel.log if r == "coach"] == [2, 3, 4]
    assert rf.turns[0].coach["consulted"] is False and rf.turns[0].coach["calls"]
    # HINT: the message rides in the next observation, not in a PASS one
    assert hint in agent_requests[2]["messages"][-1]["content"]
    assert "[COACH]" not in agent_requests[1]["messages"][-1]["content"]
    assert [i.source for i in rf.turns[1].injected] == ["coach"]
    # REJECT: the finalize attempt is returned as rejected and the run goes on
    after_reject = agent_requests[3]["messages"][-1]["content"]
    assert reject in after_reject and "NOT finalized" in after_reject
    assert rf.turns[2].metrics.finalize is True
    assert [i.source for i in rf.turns[2].injected] == ["system", "coach"]
    # a PASS proposed by the coach injects nothing
    assert rf.turns[3].coach["consulted"] is True and not rf.turns[3].injected
    # everything is recorded in the turn record and survives the round trip
    back = read_run(tmp_path / "c.jsonl")
    rec = back.turns[2].coach
    assert rec["turn_kind"] == "conclusion" and rec["finalizing"] is True
    assert [j["role"] for j in rec["report"]] == ["overall", "bias", "conclusion"]
    assert rec["report"][2]["ratings"]["missed_files"] == ["pkg/util.py"]
    assert rec["concerns"] == [
        "conclusion.saturation=premature", "conclusion.grounding=unsupported"]
    assert rec["proposed"]["decision"] == "REJECT" and rec["guard"] == []
    assert [c["purpose"] for c in rec["calls"]] == [
        "judge:overall", "judge:bias", "judge:conclusion", "coach"]
    assert all(c["tokens_in"] > 0 and c["cached"] is False for c in rec["calls"])
    assert rec["tokens_in"] == sum(c["tokens_in"] for c in rec["calls"])
    assert rec["summary"]["tool"] == "CON"
    corpus = load_corpus(tmp_path / "c.jsonl", cache=False)
    assert corpus.turns["coach_decision"].tolist() == decisions
    # constrained decoding: the judges got their JSON schema, the coach its own
    fmt = judge_requests[0]["response_format"]
    assert fmt["type"] == "json_object"
    assert fmt["schema"]["properties"]["flow_state"]["enum"] == list(
        cj.ROLES["overall"].dim("flow_state").values)
    # the trajectory memory reaches the judges: turn 3's overall judge sees turns 1 and 2
    overall_t3 = next(r for r in judge_requests if who(r)[:2] == ("overall", 3))
    text = overall_t3["messages"][1]["content"]
    assert "last 2 of 2 earlier turns" in text and "t1 PKR" in text and "t2 PKR" in text


def test_reject_of_a_non_conclusion_turn_is_downgraded(world, tmp_path):
    plan = {1: {"overall": {"flow_state": "stalled"},
                "coach": {"rationale": "stop", "decision": "REJECT", "message": "Try EXP."}}}
    with FakeOpenAI([peek(), FINAL]) as agent, FakeOpenAI(Panel(plan)) as judges:
        rf = launch(world, agent, cj.CoachJudge(backend(judges, "j"), min_concerns_for_hint=1), tmp_path / "d.jsonl")
        nxt = agent.requests[1]["messages"][-1]["content"]
    rec = rf.turns[0].coach
    assert rec["decision"] == "HINT" and rec["proposed"]["decision"] == "REJECT"
    assert "downgraded to HINT" in rec["guard"][0]
    assert "Try EXP." in nxt and "NOT finalized" not in nxt
    assert rf.end.reason == "finalize" and len(rf.turns) == 2


def test_malformed_judge_replies_mean_no_signal_and_pass(world, tmp_path):
    plan = {1: {"overall": "not json at all", "bias": '{"reasoning": "x"}',
                "navigation": json.dumps({"reasoning": "r", "scent_rating": "superb",
                                          "yield_rating": "useless"})}}
    panel = Panel(plan)
    with FakeOpenAI([peek(), FINAL]) as agent, FakeOpenAI(panel) as judges:
        rf = launch(world, agent, cj.CoachJudge(backend(judges, "j")), tmp_path / "m.jsonl")
        retries = [r for r in judges.requests if who(r)[1] == 1 and who(r)[2]]
    rec = rf.turns[0].coach
    assert rec["decision"] == "PASS" and rec["consulted"] is False and not rf.turns[0].injected
    assert [j["valid"] for j in rec["report"]] == [False, False, False]
    assert rec["concerns"] == []  # an invalid navigation reply carries no 'useless' concern
    # each judge was asked twice; the retry carries its bad reply and a correction
    assert sorted(r for r, n, again in panel.log if n == 1) == sorted(
        ["overall", "overall", "bias", "bias", "navigation", "navigation"])
    assert len(retries) == 3
    correction = next(r for r in retries if who(r)[0] == "navigation")["messages"][-1]["content"]
    assert "could not be used" in correction and "strong, plausible, weak" in correction
    assert "superb" in correction
    assert "is missing" in rec["report"][1]["error"]


def test_a_failing_coach_or_judge_endpoint_degrades_to_pass(world, tmp_path):
    plan = {1: {"overall": {"flow_state": "looping"}, "navigation": 400,
                "coach": "I think a hint would be good"}}
    panel = Panel(plan)
    with FakeOpenAI([peek(), FINAL]) as agent, FakeOpenAI(panel) as judges:
        rf = launch(world, agent, cj.CoachJudge(backend(judges, "j")), tmp_path / "f.jsonl")
    rec = rf.turns[0].coach
    assert rec["report"][2]["valid"] is False and "HTTP 400" in rec["report"][2]["error"]
    assert rec["consulted"] is True and rec["proposed"] is None
    assert rec["decision"] == "PASS" and "no usable coach reply" in rec["guard"][0]
    assert "coach" in [r for r, _, _ in panel.log]
    assert rf.end.reason == "finalize"


def test_resume_rebuilds_the_memory(world, tmp_path):
    path = tmp_path / "r.jsonl"
    plan = {2: {"overall": {"flow_state": "looping"},
                "coach": {"rationale": "r", "decision": "HINT", "message": "Read util."}}}
    with FakeOpenAI([peek(), MEMORY, 400]) as agent, FakeOpenAI(Panel(plan)) as judges:
        first = launch(world, agent, cj.CoachJudge(backend(judges, "j"), min_concerns_for_hint=1), path)
    assert first.end.reason == "model_error" and len(first.turns) == 2
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))  # a crash: no end record
    panel = Panel({})
    with FakeOpenAI([FINAL]) as agent, FakeOpenAI(panel) as judges:
        fresh = cj.CoachJudge(backend(judges, "j"), min_concerns_for_hint=1)
        rf = launch(world, agent, fresh, path)
        overall = next(r for r in judges.requests if who(r)[:2] == ("overall", 3))
    assert rf.end.reason == "finalize" and [t.turn for t in rf.turns] == [1, 2, 3]
    assert [s.turn for s in fresh.memory] == [1, 2, 3]
    assert fresh.memory[1] == cj.summarize_turn(first.turns[1])
    text = overall["messages"][1]["content"]
    assert "last 2 of 2 earlier turns" in text and "t1 PKR" in text and "t2 MEM" in text
    # the replayed HINT of turn 2 is still in the recorded history the coach sees
    assert rf.turns[1].coach["decision"] == "HINT"


def test_a_coach_run_replays_from_the_cache(world, tmp_path):
    cache = ResponseCache(tmp_path / "cache")
    plan = {2: {"navigation": {"yield_rating": "useless"}, "overall": "garbage",
                "coach": {"rationale": "r", "decision": "HINT", "message": "Read util."}},
            3: {"conclusion": {"grounding": "unsupported"},
                "coach": {"rationale": "r", "decision": "REJECT", "message": "Not yet."}}}
    with FakeOpenAI([peek(), peek("pkg/util.py", 1, 2), FINAL, FINAL]) as agent, \
            FakeOpenAI(Panel(plan)) as judges:
        live = launch(world, agent, cj.CoachJudge(backend(judges, "j", cache=cache), min_concerns_for_hint=1),
                      tmp_path / "live" / "x.jsonl", cache=cache)
        urls = agent.url, judges.url
    # both servers are gone: the replay must come entirely from the cache
    replay_cache = cache.with_mode("replay")
    coach = cj.CoachJudge(backend(urls[1], "j", cache=replay_cache), min_concerns_for_hint=1)
    replay = launch(world, urls[0], coach, tmp_path / "replay" / "x.jsonl", cache=replay_cache)
    assert [t.coach["decision"] for t in live.turns] == ["PASS", "HINT", "REJECT", "PASS"]
    assert all(c["cached"] for t in replay.turns for c in t.coach["calls"])
    assert content_digest(replay) == content_digest(live)


# ------------------------------------------------------------------------------ pieces


def make_turn(n: int, tool: str = "peek_code_region", **kw: Any) -> Turn:
    params = kw.pop("params", {"file_path": "pkg/app.py", "start_line": 1, "end_line": 5})
    metrics = kw.pop("metrics", ToolMetrics(tool=cj.TOOL_ABBR.get(tool), file="pkg/app.py",
                                            ranges=[(1, 5)], lines_viewed=5))
    return Turn(turn=n, started_at=0.0, ended_at=1.0, call=ToolCall(tool=tool, params=params),
                metrics=metrics, **kw)


def test_turn_kinds_pick_the_matching_judge():
    nav = make_turn(1, thinking="Look. More text.")
    mem = make_turn(2, "create_memory", params={"memory_content": "x"},
                    metrics=ToolMetrics(tool="MEM"))
    hold = make_turn(3, "stash_conclusion", params={"content": "c"},
                     metrics=ToolMetrics(tool="CON", finalize=False))
    final = make_turn(4, "stash_conclusion", params={"content": "c"},
                      metrics=ToolMetrics(tool="CON", finalize=True))
    failed_final = make_turn(5, "stash_conclusion", params={"content": "c"},
                             metrics=ToolMetrics(tool="CON", finalize=True,
                                                 error_type="tool_error"))
    malformed = Turn(turn=6, started_at=0, ended_at=1, raw_text="??",
                     parse_error=ParseError(kind="no_tool", message="no tool call"),
                     metrics=ToolMetrics(error_type="malformed"))
    kinds = [cj.turn_kind(t) for t in (nav, mem, hold, final, failed_final, malformed)]
    assert kinds == ["navigation", "cognitive", "cognitive", "conclusion", "error", "error"]
    s = cj.summarize_turn(nav)
    assert s.intent == "Look." and s.action.startswith("PKR file_path=pkg/app.py")
    assert s.result.startswith("pkg/app.py:1-5")
    assert cj.summarize_turn(malformed).result == "malformed reply: no tool call"


def test_summaries_and_prompts_are_capped():
    huge = make_turn(40, thinking="x" * 5000, observation="y" * 50_000)
    s = cj.summarize_turn(huge)
    assert len(s.intent) <= cj.INTENT_MAX and len(s.result) <= cj.RESULT_MAX
    history = [make_turn(i, thinking="z" * 3000, observation="w" * 9000) for i in range(1, 40)]
    memory = [cj.summarize_turn(t) for t in history]
    for role in cj.ROLES:
        msgs = cj.judge_messages(role, huge, memory, history, {"turn_bound": 50})
        size = sum(len(m["content"]) for m in msgs)
        assert size < 9000, (role, size)  # fits the embedded model's 6k-token coach context


def test_every_vocabulary_value_is_explained_in_its_prompt():
    for name, role in cj.ROLES.items():
        text = role.template
        for d in role.dims:
            assert d.name in text, (name, d.name)
            for v in d.values:
                assert f'"{v}"' in text, (name, d.name, v)


def test_parse_judge_reply_normalises_and_caps():
    reply = json.dumps({"Reasoning": "r" * 900, "flow_state": " Looping ", "laziness": "HIGH",
                        "suggestion": "s" * 400, "extra": 1})
    out = cj.parse_judge_reply(f"Sure!\n```json\n{reply}\n```", "overall")
    assert out["flow_state"] == "looping" and out["laziness"] == "high"
    assert len(out["reasoning"]) == cj.REASONING_MAX and len(out["suggestion"]) == 200
    assert cj.concerns_of("overall", out) == ["overall.flow_state=looping", "overall.laziness=high"]
    con = cj.parse_judge_reply(json.dumps({"reasoning": "r", "saturation": "premature",
                                           "grounding": "grounded",
                                           "missed_files": "pkg/util.py"}), "conclusion")
    assert con["missed_files"] == ["pkg/util.py"]
    with pytest.raises(cj.ReplyError, match="'grounding' must be one of grounded, partial"):
        cj.parse_judge_reply('{"reasoning": "r", "saturation": "partial", "grounding": "meh"}',
                             "conclusion")
    with pytest.raises(cj.ReplyError, match="not a JSON object"):
        cj.parse_judge_reply("flow is fine", "overall")
    with pytest.raises(cj.ReplyError, match="'reasoning'"):
        cj.parse_judge_reply('{"reasoning": "", "diagnosis": "understood", "recovery": "pivot",'
                             ' "severity": "low"}', "error")
    assert cj.parse_coach_reply('{"decision": "hint", "message": "m"}')["decision"] == "HINT"
    with pytest.raises(cj.ReplyError, match="'decision' must be one of PASS, HINT, REJECT"):
        cj.parse_coach_reply('{"decision": "APPROVE"}')


def test_a_partly_grounded_closure_is_rejected_in_the_loop(world, tmp_path):
    """Table A3 rejects closures "premature or insufficiently grounded": partial grounding
    alone (no concern of its own) reaches the coach, whose REJECT stands."""
    reject = "Only part of this is grounded: read pkg/util.py before concluding."
    plan = {1: {"conclusion": {"saturation": "saturated", "grounding": "partial"},
                "coach": {"rationale": "thin", "decision": "REJECT", "message": reject}}}
    panel = Panel(plan)
    with FakeOpenAI([FINAL, FINAL]) as agent, FakeOpenAI(panel) as judges:
        coach = cj.CoachJudge(backend(judges, "judge-model", constrain="json"))
        rf = launch(world, agent, coach, tmp_path / "p.jsonl")
    assert [t.coach["decision"] for t in rf.turns] == ["REJECT", "PASS"]
    assert rf.turns[0].coach["concerns"] == [] and rf.turns[0].coach["consulted"] is True
    assert [n for r, n, _ in panel.log if r == "coach"] == [1]


@pytest.mark.parametrize(
    ("proposal", "final", "concerns", "expected", "note"),
    [
        (None, True, ["conclusion.saturation=premature"], "PASS", "no usable coach reply"),
        ({"decision": "PASS"}, False, ["overall.laziness=high"], "PASS", None),
        # the paper's coach intervenes on multiple signals: one concern is not enough
        ({"decision": "HINT"}, False, ["overall.laziness=high"], "PASS", "needs at least 2"),
        ({"decision": "HINT"}, False, ["overall.laziness=high", "navigation.scent_rating=weak"],
         "HINT", None),
        ({"decision": "HINT"}, False, [], "PASS", "needs at least 2"),
        ({"decision": "REJECT"}, False, ["overall.laziness=high", "bias.detected_bias=anchoring"],
         "HINT", "not a finalize"),
        ({"decision": "REJECT"}, False, [], "PASS", "not a finalize"),
        ({"decision": "REJECT"}, True, ["overall.laziness=high"], "PASS", "conclusion-judge"),
        ({"decision": "REJECT"}, True, ["conclusion.grounding=unsupported"], "REJECT", None),
    ],
)
def test_guard(proposal, final, concerns, expected, note):
    decision, notes = cj.apply_guard(proposal, is_finalizing=final, concerns=concerns)
    assert decision == expected
    assert (note is None and notes == []) or any(note in n for n in notes)


def test_reject_on_insufficient_grounding_and_the_same_defaults_everywhere():
    import inspect

    # Table A3: a closure "judged premature or insufficiently grounded" is rejected; partial
    # grounding is not a concern of its own, so the signal is passed explicitly
    assert cj.apply_guard({"decision": "REJECT"}, is_finalizing=True, concerns=[],
                          reject_signals=["conclusion.grounding=partial"])[0] == "REJECT"
    report = [{"role": "conclusion", "valid": True, "ratings": {
        "saturation": "saturated", "grounding": "partial", "missed_files": []}},
              {"role": "overall", "valid": False, "ratings": {"flow_state": "looping"}}]
    assert cj.rating_signals(report) == ["conclusion.saturation=saturated",
                                         "conclusion.grounding=partial"]
    assert set(cj.REJECT_ON) == {"conclusion.saturation=premature",
                                 "conclusion.grounding=unsupported",
                                 "conclusion.grounding=partial"}
    guard = inspect.signature(cj.apply_guard).parameters["min_concerns_for_hint"].default
    sidecar = inspect.signature(cj.CoachJudge).parameters["min_concerns_for_hint"].default
    assert guard == sidecar == 2


def test_guard_rejection_limit_and_hint_threshold():
    c = ["conclusion.saturation=premature"]
    assert cj.apply_guard({"decision": "REJECT"}, is_finalizing=True, concerns=c,
                          rejections_so_far=2, max_rejections=2,
                          min_concerns_for_hint=1)[0] == "HINT"
    assert cj.apply_guard({"decision": "HINT"}, is_finalizing=False, concerns=c,
                          min_concerns_for_hint=2)[0] == "PASS"


def test_fallback_message_when_the_coach_writes_none():
    report = [
        {"role": "overall", "valid": True, "ratings": {"suggestion": "Open util.py."}},
        {"role": "conclusion", "valid": True, "ratings": {"missed_files": ["pkg/util.py"]}},
    ]
    msg = cj.fallback_message("REJECT", report, ["conclusion.saturation=premature"])
    assert msg == ("The panel finds this conclusion not yet ready: saturation: premature. "
                   "Not yet read: pkg/util.py. Open util.py.")


def test_resume_counts_rejections_and_restores_memory():
    turns = [make_turn(1), make_turn(2, coach={"decision": "REJECT"}),
             make_turn(3, coach={"decision": "HINT"})]
    coach = cj.CoachJudge(object())
    coach.resume(turns, {})
    assert [s.turn for s in coach.memory] == [1, 2, 3] and coach.rejections == 1


def test_make_coach_resolves_registry_models():
    paper = cj.make_coach("deepseek-v3")
    assert paper.coach.spec.name == "deepseek-v3" and paper.judges is paper.coach
    local = cj.make_coach("smollm2-135m", cache_mode="off", judge_model="deepseek-v3")
    # the embedded model's coach gets a server of its own (a distinct context size)
    assert local.coach.spec.context_window == cj.LOCAL_COACH_CONTEXT
    assert local.judges.spec.name == "deepseek-v3" and local.coach.cache is None
    with pytest.raises(Exception, match="unknown model"):
        cj.make_coach("no-such-model")
