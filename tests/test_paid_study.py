"""The paid study path against the fake OpenAI server on loopback: preflight, the plan and its
cost, retrying runs a model failure ended, the launcher's exit codes."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import pytest
import yaml
from fake_openai import FakeOpenAI, error

from adakit import cli
from adakit.apparatus import world as worlds_mod
from adakit.llm.models import free_port
from adakit.record import (
    ConditionInfo,
    End,
    Header,
    ModelCall,
    ModelInfo,
    RunWriter,
    TaskInfo,
    Turn,
    WorldInfo,
    load_corpus,
    read_run,
)
from adakit.study.launch import failure_summary, gated_launch, launch
from adakit.study.plan import agent_tokens, make_plan
from adakit.study.retry import attempts_beside, failure_of, run_state
from adakit.study.spec import load_study

KEY = "ADAKIT_PAID_TEST_" + "KEY"  # built at run time so credential scanners do not flag it
NO_KEY = "ADAKIT_UNSET_TEST_" + "KEY"


def _secret() -> str:
    return "sk-" + "paid-" + "t3st" * 4


def _peek(k: int) -> str:
    return (
        f"<thinking>step {k}</thinking><peek_code_region><file_path>src/flask/app.py</file_path>"
        f"<start_line>{10 * k}</start_line><end_line>{10 * k + 9}</end_line></peek_code_region>"
    )


CONCLUDE = (
    "<thinking>done</thinking><stash_conclusion><content>app.py read</content>"
    "<proceed_to_finalize>true</proceed_to_finalize></stash_conclusion>"
)


def agent(turns: int = 3, log: list | None = None):
    """A scripted agent: peeks until turn ``turns``, then concludes; answers a preflight ping."""

    def answer(request: dict) -> str:
        if log is not None:
            log.append(time.monotonic())
        if "Reply with one word" in request["messages"][-1]["content"]:
            return "ready"
        k = sum(1 for m in request["messages"] if m["role"] == "assistant") + 1
        return CONCLUDE if k >= turns else _peek(k)

    return answer


def llm(url: str, key: str = KEY, **kw) -> dict:
    return {"kind": "llm", "base_url": url, "model_id": "fake-paid", "api_key_env": key,
            "temperature": 0.2, "max_tokens": 200, "context_window": 64000, **kw}


@pytest.fixture()
def env(tmp_path: Path, monkeypatch, flask_world):
    """A private worlds folder holding a copy of flask, a private cache, the key set."""
    worlds = tmp_path / "worlds"
    shutil.copytree(flask_world.root, worlds / flask_world.root.name)
    monkeypatch.setenv("ADAKIT_WORLDS", str(worlds))
    monkeypatch.setenv("ADAKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(KEY, _secret())
    monkeypatch.delenv(NO_KEY, raising=False)
    return tmp_path


def registry(tmp_path: Path, monkeypatch, **models: dict) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": models}))
    monkeypatch.setenv("ADAKIT_MODELS", str(path))


def study_file(tmp_path: Path, matrix: list[dict], **top) -> Path:
    path = tmp_path / "study.yaml"
    data = {"name": "paidtest", "output": str(tmp_path / "runs"), "concurrency": 2,
            "turn_bound": 6, "matrix": matrix, **top}
    path.write_text(yaml.safe_dump(data))
    return path


def adakit(capsys, *args: str) -> tuple[int, str]:
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out + out.err


# ------------------------------------------------------------------------------ preflight


def _offline_git_world(monkeypatch) -> None:
    """Add a git world whose source cannot be fetched (nothing listens at its host)."""
    manifest = worlds_mod.load_manifest()
    base = manifest["prompt-optimizer"]
    manifest["offline-git"] = dataclasses.replace(
        base, name="offline-git",
        source=dataclasses.replace(base.source, url=f"http://127.0.0.1:{free_port()}/offline-git.git"),
    )
    monkeypatch.setattr(worlds_mod, "load_manifest", lambda *a, **k: manifest)


def test_preflight_prints_one_table_and_records_nothing(env, monkeypatch, capsys):
    _offline_git_world(monkeypatch)
    down = f"http://127.0.0.1:{free_port()}/v1"
    with FakeOpenAI(agent()) as fake:
        registry(env, monkeypatch, **{"fake-ok": llm(fake.url), "fake-nokey": llm(fake.url, NO_KEY),
                                      "fake-down": llm(down)})
        study = study_file(env, [{"models": ["fake-ok", "fake-nokey", "fake-down"],
                                  "worlds": ["flask", "offline-git"], "tasks": ["risk_review"],
                                  "conditions": ["natural"]}])
        # without --check no endpoint is called: only the missing key and the world show
        code, out = adakit(capsys, "launch", study)
        assert code == 2 and fake.requests == []
        rows = [line for line in out.splitlines() if line.startswith(("model ", "world ", "judge "))]
        assert len(rows) == 2
        code, out = adakit(capsys, "launch", study, "--check")
        pings = list(fake.requests)
    assert code == 2
    assert "Traceback" not in out
    assert "preflight: 3 thing(s) missing; nothing was launched or recorded" in out
    rows = [line for line in out.splitlines() if line.startswith(("model ", "world ", "judge "))]
    assert len(rows) == 3 and out.count("WHAT") == 1  # one table
    nokey = next(r for r in rows if "fake-nokey" in r)
    assert f"{NO_KEY} is not set" in nokey and nokey.rstrip().endswith(f"set {NO_KEY}")
    assert "2 runs" in nokey  # one per world
    gone = next(r for r in rows if "fake-down" in r)
    assert f"{down} does not answer" in gone and "connection" in gone.lower()
    offline = next(r for r in rows if r.startswith("world"))
    assert "offline-git" in offline and "cannot fetch http://127.0.0.1:" in offline
    assert "(Failed to connect to 127.0.0.1 port" in offline
    assert "3 runs" in offline
    assert not any("fake-ok" in r or "flask" in r for r in rows)
    # --check sent the reachable endpoint exactly one uncached one-token request
    assert len(pings) == 1 and pings[0]["max_tokens"] == 1
    assert not (env / "runs").exists()
    assert _secret() not in out


def test_skip_unavailable_launches_the_rest_and_lists_what_it_left_out(env, monkeypatch, capsys):
    _offline_git_world(monkeypatch)
    with FakeOpenAI(agent()) as fake:
        registry(env, monkeypatch, **{"fake-ok": llm(fake.url), "fake-nokey": llm(fake.url, NO_KEY)})
        study = study_file(env, [{"models": ["fake-ok", "fake-nokey"], "worlds": ["flask", "offline-git"],
                                  "tasks": ["risk_review"], "conditions": ["natural"]}])
        code, out = adakit(capsys, "launch", study, "--skip-unavailable")
    assert code == 0, out
    assert "preflight: left out 3 run(s) that cannot run here" in out
    assert "left out 3 run(s): model fake-nokey" in out and "world offline-git" in out
    assert sorted(p.name for p in (env / "runs").glob("*.jsonl")) == [
        "fake-ok__flask__risk_review__natural__r0.jsonl"
    ]
    assert read_run(env / "runs" / "fake-ok__flask__risk_review__natural__r0.jsonl").end.reason == "finalize"


def test_a_finished_study_needs_no_key(env, monkeypatch, capsys):
    with FakeOpenAI(agent()) as fake:
        registry(env, monkeypatch, **{"fake-ok": llm(fake.url)})
        study = study_file(env, [{"models": ["fake-ok"], "worlds": ["flask"], "tasks": ["risk_review"],
                                  "conditions": ["natural"]}])
        assert adakit(capsys, "launch", study)[0] == 0
        monkeypatch.delenv(KEY)
        code, out = adakit(capsys, "launch", study)
    assert code == 0 and "skipped 1" in out


# ------------------------------------------------------------------------------ the plan


def _header(run_id: str, condition: str = "natural") -> Header:
    return Header(run_id=run_id, model=ModelInfo(name="ref-model"), world=WorldInfo(name="flask"),
                  task=TaskInfo(family="risk_review"), condition=ConditionInfo(name=condition),
                  turn_bound=10)


def _turn(n: int, tokens_in: int, tokens_out: int, **kw) -> Turn:
    return Turn(turn=n, started_at=0.0, ended_at=1.0, tokens_in=tokens_in, tokens_out=tokens_out, **kw)


def _write(path: Path, header: Header, turns: list[Turn], end: End | None = None) -> None:
    with RunWriter(path) as w:
        w.write(header)
        for t in turns:
            w.write(t)
        if end is not None:
            w.write(end)


def reference_corpus(folder: Path) -> None:
    """Hand-made measurements: first prompts 1000 and 2000 (mean 1500), growth 300 on every
    pair, replies 50 70 90 60 80 (mean 70); one hint call (500 in, 100 out) in 5 turns; coach
    turns 5000/600 and 3000/400 (mean 4000/500); verdicts: conclusion prompts 1200 and 1400,
    step prompts 900 and 1100, replies 100 120 80 100."""
    folder.mkdir(parents=True)
    hint = ModelCall(purpose="hint", model="ref-model", tokens_in=500, tokens_out=100)
    _write(folder / "a.jsonl", _header("a"),
           [_turn(1, 1000, 50), _turn(2, 1300, 70, model_calls=[hint]), _turn(3, 1600, 90)],
           End(reason="finalize"))
    _write(folder / "b.jsonl", _header("b", "coach_judge"),
           [_turn(1, 2000, 60, coach={"tokens_in": 5000, "tokens_out": 600}),
            _turn(2, 2300, 80, coach={"tokens_in": 3000, "tokens_out": 400})],
           End(reason="finalize"))
    rows = [(None, 1200, 100), (None, 1400, 120), (3, 900, 80), (5, 1100, 100), (None, 0, 0)]
    (folder / "judgments.jsonl").write_text("".join(
        json.dumps({"item_id": f"i{i}", "turn": t, "tokens_in": a, "tokens_out": b}) + "\n"
        for i, (t, a, b) in enumerate(rows)))


def test_plan_figures_by_hand(env, monkeypatch, capsys):
    ref = env / "reference"
    reference_corpus(ref)
    registry(env, monkeypatch,
             **{"fake-paid": llm("http://127.0.0.1:9/v1", context_window=2500, price_in=2.0, price_out=8.0),
                "fake-coach": llm("http://127.0.0.1:9/v1", price_in=1.0, price_out=1.0),
                "fake-judge": llm("http://127.0.0.1:9/v1", price_in=0.5, price_out=1.5)})
    path = study_file(env, [{"models": ["fake-paid"], "worlds": ["flask"], "tasks": ["risk_review"],
                             "conditions": ["natural", "coach_judge"]}],
                      turn_bound=4, coach_model="fake-coach",
                      judge={"judges": ["fake-judge"], "max_turn_items": 1, "max_tokens": 100})
    study = load_study(path)
    # the natural run was interrupted after one turn: it resumes, paying for turns 2..4
    (env / "runs").mkdir()
    _write(env / "runs" / "fake-paid__flask__risk_review__natural__r0.jsonl",
           _header("fake-paid__flask__risk_review__natural__r0"), [_turn(1, 1500, 70)])
    plan = make_plan(study, reference=ref)
    fig = {k: v.value for k, v in plan.figures.items()}
    assert fig["prompt_first"] == 1500 and fig["prompt_growth"] == 300 and fig["reply"] == 70
    assert (fig["hint_calls"], fig["hint_in"], fig["hint_out"]) == (0.2, 100, 20)
    assert (fig["coach_in"], fig["coach_out"]) == (4000, 500)
    assert (fig["judge_conclusion_in"], fig["judge_turn_in"], fig["judge_out"]) == (1300, 1000, 100)
    assert all("the reference corpus" in f.source for f in plan.figures.values())
    assert plan.counts() == {"to_resume": 1, "to_run": 1}
    rows = {(r.model, r.role): r for r in plan.rows}
    # prompts 1500, 1800, 2100, 2400 -> capped at 2500 - 200 = 2300: the resumed run pays
    # 1800 + 2100 + 2300 = 6200, the new one 1500 + 6200 = 7700; replies 70 per turn
    agent = rows[("fake-paid", "agent")]
    assert (agent.calls, agent.tokens_in, agent.tokens_out) == (7, 13_900, 490)
    assert agent.usd == pytest.approx(13_900 * 2e-6 + 490 * 8e-6)  # 0.03172
    hint = rows[("fake-paid", "hint")]  # the run's own model answers hints: 7 turns left
    assert (hint.calls, hint.tokens_in, hint.tokens_out) == (pytest.approx(1.4), 700, 140)
    coach = rows[("fake-coach", "coach")]  # 4 turns of the coach-judge run, 4 calls each
    assert (coach.runs, coach.calls, coach.tokens_in, coach.tokens_out) == (1, 16, 16_000, 2_000)
    assert coach.usd == pytest.approx(0.018)
    judge = rows[("fake-judge", "judge")]  # per run: 3 conclusion items + min(4, 1 x 2) steps
    assert (judge.runs, judge.calls) == (2, 10)
    assert (judge.tokens_in, judge.tokens_out) == (2 * (3 * 1300 + 2 * 1000), 2 * 5 * 100)
    assert judge.usd == pytest.approx(11_800 * 0.5e-6 + 1_000 * 1.5e-6)  # 0.0074
    assert plan.total_usd == pytest.approx(0.03172 + 0.00252 + 0.018 + 0.0074)
    code, out = adakit(capsys, "launch", path, "--plan", "--reference", ref)
    assert code == 0 and not (env / "runs" / "study.yaml").exists()
    assert "status:       finished 0 · to resume 1 · to retry 0 · to run 1" in out
    assert "by condition: natural 1 · coach_judge 1" in out
    assert "estimated total: $0.0596" in out  # 0.05964
    assert "prompt_growth          300" in out


def test_plan_figures_fall_back_to_the_study_then_constants(env, monkeypatch):
    registry(env, monkeypatch, **{"fake-paid": llm("http://127.0.0.1:9/v1")})
    study = load_study(study_file(env, [{"models": ["fake-paid"], "worlds": ["flask"],
                                         "tasks": ["risk_review"], "conditions": ["natural"]}]))
    (env / "runs").mkdir()
    _write(env / "runs" / "x.jsonl", _header("x"), [_turn(1, 1234, 0)])
    (env / "empty").mkdir()
    plan = make_plan(study, reference=env / "empty")
    assert plan.figures["prompt_first"].value == 1234
    assert "the study's runs" in plan.figures["prompt_first"].source
    assert plan.figures["prompt_growth"].source == "constant (adakit.study.plan.CONSTANTS)"
    with pytest.raises(FileNotFoundError, match="no reference corpus"):
        make_plan(study, reference=env / "absent")


def test_agent_tokens_arithmetic():
    # prompts 100, 150, 200 (cap 180 -> 180); replies min(40, 30) = 30
    assert agent_tokens(100, 50, 40, 0, 3, 210, 30) == (430, 90, 3)
    assert agent_tokens(100, 50, 40, 2, 3, None, 1024) == (200, 40, 1)
    assert agent_tokens(100, 50, 40, 5, 3, None, 1024) == (0, 0, 0)


def test_cost_above_the_threshold_needs_confirmation(env, monkeypatch, capsys):
    with FakeOpenAI(agent()) as fake:
        registry(env, monkeypatch, **{"fake-ok": llm(fake.url, price_in=2.0, price_out=8.0)})
        study = study_file(env, [{"models": ["fake-ok"], "worlds": ["flask"], "tasks": ["risk_review"],
                                  "conditions": ["natural"]}])
        code, out = adakit(capsys, "launch", study, "--confirm-above", "0")
        assert code == 3 and "pass --yes to launch" in out and "estimate (every remaining run" in out
        assert fake.requests == [] and not (env / "runs").exists()
        code, out = adakit(capsys, "launch", study, "--confirm-above", "0", "--yes")
    assert code == 0 and "estimated cost of this launch: $0.0" in out


def test_at_a_terminal_the_whole_estimate_comes_before_the_question(env, monkeypatch, capsys):
    """y launches, anything else launches nothing; the breakdown is printed before asking."""
    with FakeOpenAI(agent()) as fake:
        registry(env, monkeypatch, **{"fake-ok": llm(fake.url, price_in=2.0, price_out=8.0)})
        path = study_file(env, [{"models": ["fake-ok"], "worlds": ["flask"], "tasks": ["risk_review"],
                                 "conditions": ["natural"]}])
        asked: list[str] = []

        def answer(reply: str):
            def ask(question: str) -> str:
                asked.append(capsys.readouterr().out)  # what the user had read when asked
                return reply
            return ask

        code = gated_launch(load_study(path), confirm_above=0, ask=answer("n"), interactive=True)
        assert code == 3 and fake.requests == [] and not (env / "runs").exists()
        assert "estimate (every remaining run" in asked[0] and "USD per model: fake-ok" in asked[0]
        code = gated_launch(load_study(path), confirm_above=0, ask=answer(" Y "), interactive=True)
        assert code == 0 and len(asked) == 2 and fake.requests
    assert len(list((env / "runs").glob("*.jsonl"))) == 1


# ------------------------------------------------------------------------------ retries


def _one_run_study(env: Path, **top) -> Path:
    return study_file(env, [{"models": ["fake-ok"], "worlds": ["flask"], "tasks": ["risk_review"],
                             "conditions": ["natural", "budget_pressure"]}], **top)


def test_missing_key_runs_are_retried_once_the_key_is_set(env, monkeypatch, capsys):
    with FakeOpenAI(agent()) as fake:
        registry(env, monkeypatch, **{"fake-ok": llm(fake.url)})
        path = _one_run_study(env)
        monkeypatch.delenv(KEY)
        # a launch past preflight (the Python API without it, or an older adakit): 0 turns each
        summary = launch(load_study(path), preflight_first=False, progress=False)
        failed = summary.attrs["failed"]
        assert len(failed) == 2 and {f.kind for f in failed} == {"missing_key"}
        assert all(f.retryable for f in failed) and fake.requests == []
        text = failure_summary(failed, "study.yaml")
        assert f"fake-ok, missing_key (2 runs): set {KEY}; then `adakit launch study.yaml` retries them" in text
        first = {p.name: p.read_bytes() for p in (env / "runs").glob("*.jsonl")}
        end = read_run(next(iter((env / "runs").glob("*.jsonl")))).end
        assert (end.reason, end.failure, end.retryable) == ("model_error", "missing_key", True)
        monkeypatch.setenv(KEY, _secret())
        code, out = adakit(capsys, "launch", path)
    assert code == 0, out
    assert "retried:finalize 2" in out
    corpus = load_corpus(env / "runs", cache=False)
    assert len(corpus.runs) == 2 and set(corpus.runs["reason"]) == {"finalize"}
    for name, raw in first.items():  # the failed attempts are kept, byte for byte
        kept = attempts_beside(env / "runs" / name)
        assert len(kept) == 1 and kept[0].read_bytes() == raw


def test_an_auth_failure_mid_run_resumes_after_the_last_good_turn(env, monkeypatch, capsys):
    state = {"revoked": True}

    def answer(request: dict):
        k = sum(1 for m in request["messages"] if m["role"] == "assistant") + 1
        if state["revoked"] and k >= 3:
            return error(401, message="invalid api key")
        return CONCLUDE if k >= 4 else _peek(k)

    with FakeOpenAI(answer) as fake:
        registry(env, monkeypatch, **{"fake-ok": llm(fake.url)})
        path = study_file(env, [{"models": ["fake-ok"], "worlds": ["flask"], "tasks": ["risk_review"],
                                 "conditions": ["natural"]}])
        run = env / "runs" / "fake-ok__flask__risk_review__natural__r0.jsonl"
        code, out = adakit(capsys, "launch", path)
        assert code == 1
        assert "fake-ok, auth (1 runs): check the key in " + KEY in out
        failed = read_run(run)
        assert [t.turn for t in failed.turns] == [1, 2] and failure_of(failed).retryable
        before = run.read_bytes()
        # --no-retry leaves it as it is, and says so with a non-zero status
        code, out = adakit(capsys, "launch", path, "--no-retry")
        assert code == 1 and run.read_bytes() == before and "left:auth 1" in out
        state["revoked"] = False
        sent = len(fake.requests)
        code, out = adakit(capsys, "launch", path)
        resumed = fake.requests[sent:]
    assert code == 0, out
    assert "retried:finalize 1" in out
    rf = read_run(run)
    assert [t.turn for t in rf.turns] == [1, 2, 3, 4] and rf.end.reason == "finalize"
    # the retry asked only for turns 3 and 4, with turns 1-2 as history
    assert len(resumed) == 2 and sum(m["role"] == "assistant" for m in resumed[0]["messages"]) == 2
    kept = attempts_beside(run)
    assert [p.name for p in kept] == [run.stem + ".attempt-1.jsonl.bak"]
    assert kept[0].read_bytes() == before
    lines = run.read_bytes().split(b"\n")
    assert lines[:3] == before.split(b"\n")[:3]  # header and the two good turns, unchanged


def test_a_grammar_constrained_run_resumes_after_its_last_good_turn(env, monkeypatch, capsys):
    """A model served with a grammar (as the local models are) records its grammar settings in
    the header; the retry compares against the header the run would write, grammar included,
    so it resumes instead of restarting (it printed restarted:... before)."""
    state = {"down": True}

    def answer(request: dict):
        k = sum(1 for m in request["messages"] if m["role"] == "assistant") + 1
        if state["down"] and k >= 3:
            return error(401, message="invalid api key")
        return CONCLUDE if k >= 4 else _peek(k)

    with FakeOpenAI(answer) as fake:
        registry(env, monkeypatch, **{"fake-ok": llm(fake.url, constrain="grammar")})
        path = study_file(env, [{"models": ["fake-ok"], "worlds": ["flask"], "tasks": ["risk_review"],
                                 "conditions": ["natural"]}])
        run = env / "runs" / "fake-ok__flask__risk_review__natural__r0.jsonl"
        code, out = adakit(capsys, "launch", path)
        assert code == 1 and read_run(run).header.scaffold.get("grammar")
        state["down"] = False
        code, out = adakit(capsys, "launch", path)
    assert code == 0 and "retried:finalize 1" in out, out
    assert [t.turn for t in read_run(run).turns] == [1, 2, 3, 4]


def test_retry_from_start_restarts_clean_and_keeps_the_attempt(env, monkeypatch, capsys):
    with FakeOpenAI(agent()) as fake:
        registry(env, monkeypatch, **{"fake-ok": llm(fake.url)})
        path = _one_run_study(env)
        monkeypatch.delenv(KEY)
        launch(load_study(path), preflight_first=False, progress=False)
        monkeypatch.setenv(KEY, _secret())
        code, out = adakit(capsys, "launch", path, "--retry-from", "start")
    assert code == 0 and "restarted:finalize 2" in out
    for run in (env / "runs").glob("*.jsonl"):
        old, new = read_run(attempts_beside(run)[0]), read_run(run)
        assert old.end.failure == "missing_key" and new.end.reason == "finalize"
        assert new.header.started_at > old.header.started_at


def test_runs_from_before_the_failure_field_are_retried_by_their_message(env, monkeypatch):
    run = env / "runs" / "old.jsonl"
    run.parent.mkdir()
    error_text = f"ModelError: model 'x' needs an API key: set the environment variable {KEY} (endpoint h)"
    lines = [_header("old").model_dump_json(),
             json.dumps({"kind": "end", "reason": "model_error", "error": error_text, "totals": {}})]
    run.write_text("\n".join(lines) + "\n")
    rf = read_run(run)
    assert rf.end.failure is None and failure_of(rf).kind == "missing_key" and failure_of(rf).retryable
    spec = load_study(_one_run_study(env)).specs[0]
    assert run_state(run, spec).status == "to_retry"
    assert run_state(run, spec, retry=False).status == "failed"
    gone = End(reason="model_error", error="ModelError: model 'x' at h: giving up after 6 attempts; "
               "last error: connection error: refused")
    assert failure_of(dataclasses.replace(rf, end=gone)).kind == "unreachable"
    http = End(reason="model_error", error="ModelError: model 'x' at h: HTTP 404: no such model")
    found = failure_of(dataclasses.replace(rf, end=http))
    assert found.kind == "error" and not found.retryable
    assert run_state(run, spec, retry=True, retry_any=True).status == "to_retry"


def test_agent_endings_are_never_retried(env, monkeypatch, capsys):
    never = lambda request: _peek(1)  # noqa: E731 (peeks forever: the turn bound ends it)
    with FakeOpenAI(never) as fake:
        registry(env, monkeypatch, **{"fake-ok": llm(fake.url)})
        path = study_file(env, [{"models": ["fake-ok"], "worlds": ["flask"], "tasks": ["risk_review"],
                                 "conditions": ["natural"]}], turn_bound=2)
        assert adakit(capsys, "launch", path)[0] == 0
        run = next((env / "runs").glob("*.jsonl"))
        before, sent = run.read_bytes(), len(fake.requests)
        code, out = adakit(capsys, "launch", path, "--retry-any")
        assert code == 0 and "skipped 1" in out
        assert run.read_bytes() == before and len(fake.requests) == sent
    for reason in ("finalize", "turn_bound", "malformed_limit", "context_overflow"):
        rf = read_run(run)
        assert failure_of(dataclasses.replace(rf, end=End(reason=reason, retryable=True))) is None


def test_launch_status_when_a_run_raised(env, monkeypatch, capsys):
    with FakeOpenAI(agent()) as fake:
        registry(env, monkeypatch, **{"fake-ok": llm(fake.url)})
        path = _one_run_study(env, cache_mode="replay")  # nothing cached: the replay stops loudly
        code, out = adakit(capsys, "launch", path)
    assert code == 1 and "fake-ok, exception (2 runs)" in out and "CacheMiss" in out
    assert "Traceback" not in out


# ------------------------------------------------------------------------------ rate limits


def test_eight_runs_on_one_endpoint_under_injected_429s(env, monkeypatch):
    with FakeOpenAI(agent(3), rate_limit=0.3, retry_after=0.02) as fake:
        model = llm(fake.url, model_id="fake-limited-runs", max_concurrency=3)
        registry(env, monkeypatch, **{"fake-ok": model})
        path = study_file(env, [{"models": ["fake-ok"], "worlds": ["flask"], "tasks": "all",
                                 "conditions": ["natural", "budget_pressure"]}], concurrency=8)
        summary = launch(load_study(path), progress=False)
    corpus = load_corpus(env / "runs", cache=False)
    assert len(corpus.runs) == 8 and set(corpus.runs["reason"]) == {"finalize"}
    assert summary.attrs["failed"] == []
    assert fake.answered == 8 * 3 and fake.refused > 0
    assert len(fake.requests) <= 1.5 * fake.answered  # 34 requests for 24 replies
    assert fake.max_in_flight <= 3


def test_preflight_names_missing_local_weights_and_judges_it_cannot_reach(env, monkeypatch, capsys):
    """A local model whose weights are absent, and a judge block naming a judge without a key
    and one whose endpoint does not answer: one row each, nothing launched."""
    down = f"http://127.0.0.1:{free_port()}/v1"
    with FakeOpenAI(agent()) as fake:
        registry(env, monkeypatch, **{
            "fake-ok": llm(fake.url),
            "local-gone": {"kind": "local", "model_id": "gone", "gguf": str(env / "absent" / "model.gguf"),
                           "temperature": 0.2, "max_tokens": 200, "context_window": 4096},
            "judge-nokey": llm(fake.url, NO_KEY),
            "judge-down": llm(down),
        })
        study = study_file(env, [{"models": ["fake-ok", "local-gone"], "worlds": ["flask"],
                                  "tasks": ["risk_review"], "conditions": ["natural"]}],
                           judge={"judges": ["fake-ok", "judge-nokey", "judge-down"],
                                  "turn_judge": "fake-ok"})
        code, out = adakit(capsys, "launch", study, "--check")
    assert code == 2 and "Traceback" not in out
    rows = [line for line in out.splitlines() if line.startswith(("model ", "world ", "judge "))]
    assert len(rows) == 3, out
    local = next(r for r in rows if "local-gone" in r)
    assert local.startswith("model") and "no GGUF file" in local and "1 runs" in local
    nokey = next(r for r in rows if "judge-nokey" in r)
    assert nokey.startswith("judge") and f"{NO_KEY} is not set" in nokey
    gone = next(r for r in rows if "judge-down" in r)
    assert gone.startswith("judge") and f"{down} does not answer" in gone
    assert not any("fake-ok" in r for r in rows)
    assert not (env / "runs").exists()


def test_a_hosted_model_without_prices_needs_confirmation(env, monkeypatch, capsys):
    """Unknown cost is not below the threshold: a remote endpoint without prices asks first;
    one on loopback (a server the user runs, as every fake here) does not."""
    registry(env, monkeypatch, **{"remote-unpriced": llm("https://llm.example.invalid/v1")})
    study = study_file(env, [{"models": ["remote-unpriced"], "worlds": ["flask"],
                              "tasks": ["risk_review"], "conditions": ["natural"]}])
    code, out = adakit(capsys, "launch", study)
    assert code == 3 and "the cost of remote-unpriced is unknown" in out and "--yes" in out
    assert "no prices in the registry" in out and not (env / "runs").exists()
    plan = make_plan(load_study(study))
    assert plan.unpriced == plan.unknown_cost == ["remote-unpriced"]
    with FakeOpenAI(agent()) as fake:
        registry(env, monkeypatch, **{"local-unpriced": llm(fake.url)})
        local = study_file(env, [{"models": ["local-unpriced"], "worlds": ["flask"],
                                  "tasks": ["risk_review"], "conditions": ["natural"]}])
        plan = make_plan(load_study(local))
        assert plan.unpriced == ["local-unpriced"] and plan.unknown_cost == []
        code, out = adakit(capsys, "launch", local)
    assert code == 0


def test_launch_of_a_slice_runs_only_it_and_keeps_the_whole_study(env, monkeypatch, capsys):
    """--models/--worlds/--tasks/--conditions/--repeats launch part of a study; the output
    folder's study.yaml stays the whole study (the dataset and the plan read it), and a
    selection that matches nothing is a clear error that records nothing."""
    with FakeOpenAI(agent()) as fake:
        registry(env, monkeypatch, **{"fake-ok": llm(fake.url)})
        study = study_file(env, [{"models": ["fake-ok"], "worlds": ["flask"],
                                  "tasks": ["risk_review", "feature_tracing"],
                                  "conditions": ["natural", "budget_pressure"], "repeats": 2}])
        code, out = adakit(capsys, "launch", study, "--models", "nobody")
        assert code == 2 and "no run of the study matches" in out and "--models nobody" in out
        assert not (env / "runs").exists()
        code, out = adakit(capsys, "launch", study, "--tasks", "risk_review",
                           "--conditions", "natural,budget_pressure", "--repeats", "1")
        assert code == 0, out
    ran = sorted(p.name for p in (env / "runs").glob("*.jsonl"))
    assert ran == ["fake-ok__flask__risk_review__budget_pressure__r1.jsonl",
                   "fake-ok__flask__risk_review__natural__r1.jsonl"]
    kept = yaml.safe_load((env / "runs" / "study.yaml").read_text())
    assert kept["matrix"][0]["tasks"] == ["risk_review", "feature_tracing"]
    assert kept["matrix"][0]["repeats"] == 2
