"""Post-hoc judges (lens 3): reply parsing, retries, anonymisation, panels, resume, storage.

Judge traffic goes to the scripted OpenAI-compatible server in ``tests/fake_openai.py``; run
files are written by hand with :class:`adakit.record.RunWriter` (plus synthetic runs for size).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from adakit.judging import anonymise, context, families, run, store, verdicts
from adakit.judging.agreement import aggregate_votes
from adakit.judging.store import clean_judgments
from adakit.llm.models import ModelSpec, OpenAIBackend, ResponseCache, RetryPolicy
from adakit.llm.replies import ReplyError
from adakit.record import (
    ConditionInfo,
    End,
    Header,
    Injection,
    ModelInfo,
    ParseError,
    RunFileError,
    RunWriter,
    TaskInfo,
    ToolCall,
    ToolMetrics,
    Turn,
    WorldInfo,
    load_corpus,
    read_run,
    skipped_note,
)
from adakit.synthetic import synthetic_run, write_run
from tests.fake_openai import FakeOpenAI, reply

KEY_ENV = "ADAKIT_TEST_JUDGE_KEY"
SECRET_RUN = "run-zq81-secret"
SECRET_STUDY = "studyzeta"
REMINDER = "Budget: 6 of 12 turns left. Narrow down: drop side paths and go for the evidence."
COACH = "Coach hint: you skipped the blueprint registry; look at it before concluding."


# ----------------------------------------------------------------------------- fixtures


def _turn(n: int, tool: str | None, params: dict[str, Any], **kw: Any) -> Turn:
    metrics = kw.pop("metrics", {})
    return Turn(
        turn=n,
        started_at=1000.0 + 10 * n,
        ended_at=1005.0 + 10 * n,
        call=ToolCall(tool=tool, params=params) if tool else None,
        metrics=ToolMetrics(**metrics),
        **kw,
    )


def write_hand_run(
    path: Path,
    run_id: str = SECRET_RUN,
    conclusion: bool = True,
    model: ModelInfo | None = None,
) -> Path:
    """A small run of a hosted model under budget pressure whose text leaks its identity."""
    header = Header(
        run_id=run_id,
        study=SECRET_STUDY,
        model=model or ModelInfo(name="gpt-4.1", kind="llm", model_id="gpt-4.1-2025-04-14"),
        world=WorldInfo(name="flask", version="3.1.3"),
        task=TaskInfo(
            family="feature_tracing",
            target="request routing",
            prompt="Find and describe the full implementation of this feature: request routing.",
        ),
        condition=ConditionInfo(name="budget_pressure", budget=12),
        turn_bound=50,
        started_at=1000.0,
        system_prompt="You are gpt-4.1. Budget block: 12 turns.",
    )
    turns = [
        _turn(
            1,
            "get_structural_overview",
            {"file_path": "src/flask/app.py"},
            thinking="As GPT-4.1 I start with the app module. I have 12 turns left in my budget.",
            observation="src/flask/app.py (1536 lines)\nclass Flask(App): 109-1536\n  def dispatch_request: 865-890",
            metrics={"tool": "OVW", "file": "src/flask/app.py", "structural": True},
        ),
        _turn(
            2,
            "peek_code_region",
            {"file_path": "src/flask/app.py", "start_line": 865, "end_line": 890},
            thinking="The outline shows dispatch_request at 865; read it.",
            observation="865 def dispatch_request(self, ctx):\n866     req = ctx.request\n"
            "867     # budget of retries per request\n" + REMINDER,
            injected=[Injection(source="reminder", text=REMINDER)],
            metrics={
                "tool": "PKR",
                "file": "src/flask/app.py",
                "ranges": [(865, 890)],
                "lines_viewed": 26,
            },
        ),
        _turn(
            3,
            "explore_code",
            {
                "action_type": "go_to_definition",
                "current_file_path": "src/flask/app.py",
                "current_line_number": 880,
                "symbol_name": "view_functions",
            },
            thinking="view_functions is looked up by endpoint; find where it is filled.",
            observation="src/flask/sansio/scaffold.py 70-95: self.view_functions = {}",
            metrics={
                "tool": "EXP",
                "file": "src/flask/sansio/scaffold.py",
                "ranges": [(70, 95)],
                "action": "definition",
                "result_count": 1,
            },
        ),
        _turn(
            4,
            "create_memory",
            {
                "memory_title": "routing path",
                "memory_content": "url_map -> endpoint -> "
                "view_functions[endpoint] in dispatch_request",
            },
            thinking="Record the path.",
            observation="memory saved\n" + COACH,
            injected=[Injection(source="coach", text=COACH)],
            coach={"decision": "HINT", "message": COACH},
            metrics={"tool": "MEM"},
        ),
        _turn(
            5,
            None,
            {},
            parse_error=ParseError(kind="no_tool", message="no tool"),
            metrics={"error_type": "malformed"},
        ),
        _turn(
            6,
            "stash_conclusion",
            {
                "title": "Routing in Flask",
                "content": "Requests are matched by url_map and dispatched to view_functions.",
                "scope_description": "app.py and scaffold.py",
                "proceed_to_finalize": True,
            },
            thinking="Only the final turn remains, so I conclude.",
            observation="conclusion stashed",
            metrics={"tool": "CON", "finalize": True},
        ),
    ]
    end = End(
        reason="finalize",
        ended_at=1100.0,
        conclusion=(
            "Requests are matched against url_map and dispatched to view_functions[endpoint] in "
            "dispatch_request. Given the budget pressure I stopped early. This is run "
            f"{run_id} by gpt-4.1."
        )
        if conclusion
        else None,
        conclusion_title="Routing in Flask",
    )
    with RunWriter(path) as w:
        w.write(header)
        for t in turns:
            w.write(t)
        w.write(end)
    return path


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    write_hand_run(folder / "a.jsonl")
    write_hand_run(folder / "b.jsonl", run_id="run-other-7")
    return folder


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-judges")


def first_label(request: dict[str, Any]) -> str:
    """A scripted judge that always picks the first allowed label (read from the schema)."""
    enum = request["response_format"]["schema"]["properties"]["label"]["enum"]
    return json.dumps({"rationale": "fits the material", "label": enum[0], "evidence": ["t2"]})


def backends_for(
    fake: FakeOpenAI | str,
    tmp_path: Path,
    names: tuple[str, ...] = ("judge-a",),
    mode: str = "use",
    **spec: Any,
) -> run.BackendFactory:
    """Backends of scripted judges at the fake server (or at a URL where nothing listens)."""
    url = fake if isinstance(fake, str) else fake.url
    cache = ResponseCache(tmp_path / "cache", mode)  # type: ignore[arg-type]
    made = {
        n: OpenAIBackend(
            ModelSpec(
                name=n,
                base_url=url,
                model_id=f"{n}-id",
                api_key_env=KEY_ENV,
                constrain="json",
                temperature=0.2,
                **spec,
            ),
            cache,
            retry=RetryPolicy(attempts=1),
        )
        for n in names
    }
    return made.__getitem__


# ----------------------------------------------------------------------------- replies


def test_families_and_scores() -> None:
    assert families.CONCLUSION_FAMILIES == ("task_relevance", "trace_grounding", "termination_calibration")
    assert families.TURN_FAMILIES == ("navigation_prior", "reasoning_prior")
    nav = families.FAMILIES["navigation_prior"]
    assert [nav.score(x) for x in nav.labels] == [0.0, 0.5, 1.0]
    assert nav.tools == frozenset({"OVW", "PKR", "EXP"})
    assert families.FAMILIES["reasoning_prior"].tools == frozenset({"MEM", "BKM", "HNT", "CON"})
    tc = families.FAMILIES["termination_calibration"]
    assert tc.score("premature") == 1.0 and tc.score("ready-to-finalize") == 4.0
    assert math.isnan(tc.score("unclear")) and math.isnan(tc.score(None))
    with pytest.raises(ValueError, match="known: task_relevance"):
        families.get_family("fluency")


@pytest.mark.parametrize("family", list(families.FAMILIES))
def test_templates_list_every_label_and_the_schema_matches(family: str) -> None:
    fam = families.FAMILIES[family]
    text = fam.template
    for label in fam.allowed:
        assert f'"{label}"' in text
    schema = verdicts.reply_schema(family)
    assert schema["properties"]["label"]["enum"] == list(fam.allowed)
    assert schema["properties"]["rationale"]["maxLength"] == verdicts.RATIONALE_MAX
    assert schema["properties"]["evidence"]["maxItems"] == verdicts.EVIDENCE_ITEMS
    pyd = verdicts.reply_model(family).model_json_schema()
    assert pyd["properties"]["label"]["enum"] == list(fam.allowed)


def test_parse_valid_reply() -> None:
    v = verdicts.parse_verdict(
        '{"rationale": "Claims match t2 and t3.", "label": "mostly-supported", '
        '"evidence": ["t2 dispatch_request", "t3 view_functions"]}',
        "trace_grounding",
    )
    assert (v.label, v.score) == ("mostly-supported", 3.0)
    assert v.evidence == ["t2 dispatch_request", "t3 view_functions"]


def test_parse_lenient_forms() -> None:
    fenced = '```json\n{"rationale": "ok", "label": "Evidence Led", "evidence": "t1"}\n```'
    v = verdicts.parse_verdict(fenced, "navigation_prior")
    assert (v.label, v.score, v.evidence) == ("evidence-led", 0.0, ["t1"])
    v = verdicts.parse_verdict('Sure. {"rationale": "r", "label": 2, "evidence": []}', "task_relevance")
    assert (v.label, v.score) == ("partly-addressed", 2.0)
    raw_newline = '{"rationale": "line one\nline two", "label": "mixed", "evidence": []}'
    assert verdicts.parse_verdict(raw_newline, "reasoning_prior").score == 0.5
    long = json.dumps({"rationale": "x" * 900, "label": "mixed", "evidence": ["e" * 500] * 6})
    v = verdicts.parse_verdict(long, "reasoning_prior")
    assert len(v.rationale) == verdicts.RATIONALE_MAX
    assert len(v.evidence) == verdicts.EVIDENCE_ITEMS and all(len(e) == verdicts.EVIDENCE_MAX for e in v.evidence)


def test_unclear_is_valid_but_unscored() -> None:
    v = verdicts.parse_verdict(
        '{"rationale": "cannot tell", "label": "unclear", "evidence": []}',
        "termination_calibration",
    )
    assert v.label == "unclear" and math.isnan(v.score)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("I think it is fine.", "not a JSON object"),
        ('{"rationale": "r", "label": "excellent", "evidence": []}', "must be exactly one of"),
        ('{"rationale": "r", "evidence": []}', "'label'"),
        ('{"rationale": "", "label": "mixed", "evidence": []}', "'rationale' is empty"),
        ('{"rationale": "r", "label": "5", "evidence": []}', "must be exactly one of"),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_invalid_replies_raise_with_a_usable_message(text: str, message: str) -> None:
    family = "task_relevance" if '"5"' in text else "navigation_prior"
    with pytest.raises(ReplyError, match=message):
        verdicts.parse_verdict(text, family)


# ----------------------------------------------------------------------------- retries


def _item() -> context.JudgeItem:
    return context.JudgeItem(
        "i1",
        "r1",
        "navigation_prior",
        3,
        "PKR",
        [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
    )


def test_invalid_then_fixed_by_retry(key: None, tmp_path: Path) -> None:
    good = '{"rationale": "t2 listed it", "label": "evidence-led", "evidence": ["t2"]}'
    with FakeOpenAI(["no idea", good]) as fake:
        backend = backends_for(fake, tmp_path)("judge-a")
        res = run.ask_judge(backend, _item(), retries=2)
        assert res.verdict is not None and res.verdict.score == 0.0
        assert res.attempts == 2 and res.error is None
        retry = fake.requests[1]["messages"]
        assert [m["role"] for m in retry] == ["system", "user", "assistant", "user"]
        assert retry[2]["content"] == "no idea"
        assert "not a JSON object" in retry[3]["content"]
        assert "evidence-led, mixed, prior-led, unclear" in retry[3]["content"]
        # the constrained-decoding schema went with every attempt
        assert all(r["response_format"]["type"] == "json_object" for r in fake.requests)


def test_still_invalid_is_missing_not_low(key: None, tmp_path: Path) -> None:
    bad = '{"rationale": "r", "label": "terrible", "evidence": []}'
    with FakeOpenAI([bad, bad, bad]) as fake:
        res = run.ask_judge(backends_for(fake, tmp_path)("judge-a"), _item(), retries=2)
        assert len(fake.requests) == 3
    assert res.verdict is None and res.attempts == 3 and "terrible" in (res.error or "")
    row = run._row(_item(), run.Seat("judge-a", "judge-a"), res)
    assert row["valid"] is False and row["label"] is None and math.isnan(row["score"])


def test_retries_are_configurable(key: None, tmp_path: Path) -> None:
    with FakeOpenAI(["x", "y"]) as fake:
        res = run.ask_judge(backends_for(fake, tmp_path)("judge-a"), _item(), retries=0)
        assert len(fake.requests) == 1 and res.verdict is None


# ----------------------------------------------------------------------------- items


def test_items_per_family_and_ids(corpus: Path) -> None:
    rf = read_run(corpus / "a.jsonl")
    items = context.build_items(rf)
    by_fam = {f: [i for i in items if i.family == f] for f in families.FAMILIES}
    assert all(len(by_fam[f]) == 1 for f in families.CONCLUSION_FAMILIES)
    assert [(i.turn, i.tool) for i in by_fam["navigation_prior"]] == [
        (1, "OVW"),
        (2, "PKR"),
        (3, "EXP"),
    ]
    assert [(i.turn, i.tool) for i in by_fam["reasoning_prior"]] == [(4, "MEM"), (6, "CON")]
    ids = [i.item_id for i in items]
    assert len(set(ids)) == len(ids) and all(SECRET_RUN not in x for x in ids)
    assert ids == [i.item_id for i in context.build_items(rf)]  # stable
    assert all(i.item_id in i.messages[1]["content"] for i in items)


def test_no_conclusion_no_conclusion_items(tmp_path: Path) -> None:
    rf = read_run(write_hand_run(tmp_path / "c.jsonl", conclusion=False))
    fams = {i.family for i in context.build_items(rf)}
    assert fams == {"navigation_prior", "reasoning_prior"}


def test_anonymised_prompts(corpus: Path) -> None:
    for item in context.build_items(read_run(corpus / "a.jsonl")):
        text = item.prompt_text.lower()
        # the only "budget" left is repository code the run read (evidence, not a condition)
        assert text.count("budget") == text.count("# budget of retries per request")
        for leak in (
            "gpt-4.1",
            "gpt 4.1",
            SECRET_RUN,
            SECRET_STUDY,
            "budget_pressure",
            "budget pressure",
            "budget:",
            "coach",
            "narrow down",
            "blueprint registry",
            "12 turns left",
            "final turn remains",
        ):
            assert leak.lower() not in text, (item.family, item.turn, leak)
    # the evidence itself survives
    trace = next(
        i for i in context.build_items(read_run(corpus / "a.jsonl")) if i.family == "trace_grounding"
    )
    assert "dispatch_request" in trace.prompt_text and "src/flask/app.py" in trace.prompt_text
    assert "Requests are matched against url_map" in trace.prompt_text


def test_baselines_are_anonymised_too(tmp_path: Path) -> None:
    model = ModelInfo(name="baseline-close_reader", kind="baseline")
    path = write_hand_run(tmp_path / "base.jsonl", model=model)
    lines = path.read_text().splitlines()
    turn = json.loads(lines[1])
    turn["thinking"] = "[close_reader baseline] Keep reading src/flask/app.py from line 1."
    lines[1] = json.dumps(turn)
    path.write_text("\n".join(lines) + "\n")
    for item in context.build_items(read_run(path)):
        text = item.prompt_text.lower()
        assert "close_reader" not in text and "baseline" not in text, item.family
    nav = next(i for i in context.build_items(read_run(path)) if i.family == "navigation_prior")
    assert "Keep reading src/flask/app.py from line 1." in nav.prompt_text


def test_anonymiser_leaves_ordinary_words() -> None:
    anon = anonymise.Anonymiser(("gpt-4o", "quick"))
    assert (
        anon("GPT-4o read it quickly; a quick look.")
        == "[redacted] read it quickly; a [redacted] look."
    )
    assert anonymise._condition_variants("natural") == []
    assert "budget pressure" in anonymise._condition_variants("budget_pressure")


def test_task_relevance_carries_concerns(corpus: Path) -> None:
    item = next(
        i for i in context.build_items(read_run(corpus / "a.jsonl")) if i.family == "task_relevance"
    )
    text = item.messages[1]["content"]
    assert "identifies where the feature (request routing) is entered" in text
    assert "Off-task patterns" in text and "a trace of a different feature" in text
    assert "Scope note: app.py and scaffold.py" in text
    concerns = context.task_concerns("no_such_family")
    assert concerns["required"] == context.task_concerns("default")["required"]


def test_navigation_item_hides_the_steps_outcome(corpus: Path) -> None:
    item = next(
        i
        for i in context.build_items(read_run(corpus / "a.jsonl"))
        if i.family == "navigation_prior" and i.turn == 3
    )
    text = item.messages[1]["content"]
    step = text[text.index("## The step to judge") :]
    assert "symbol_name: view_functions" in step
    assert "(1 results)" not in step and "scaffold.py 70-95" not in step
    assert "The outline shows dispatch_request" in text  # the window before the step


def test_every_section_is_capped(tmp_path: Path) -> None:
    long_run = synthetic_run(
        "long",
        tools=["PKR", "OVW", "EXP", "MEM"] * 20
        + [{"tool": "CON", "finalize": True, "thinking": 3000}],
        seed=1,
    )
    write_run(long_run, tmp_path / "long.jsonl")
    rf = read_run(tmp_path / "long.jsonl")
    default = context.build_items(rf, max_turn_items=2)
    assert all(len(i.messages[1]["content"]) <= context.ContextCaps().prompt for i in default)
    small = context.ContextCaps(prompt=3000)
    items = context.build_items(rf, max_turn_items=2, caps=small)
    assert all(len(i.messages[1]["content"]) <= 3000 for i in items)
    assert "omitted" in next(i for i in items if i.family == "trace_grounding").prompt_text


def test_sampling_spreads_over_the_run() -> None:
    assert context.sample_evenly(list(range(10)), 3) == [0, 4, 9]  # 4.5 rounds to even
    assert context.sample_evenly(list(range(9)), 3) == [0, 4, 8]
    assert context.sample_evenly([1, 2], 5) == [1, 2]
    assert context.sample_evenly([1, 2, 3], None) == [1, 2, 3]
    assert context.sample_evenly([1, 2, 3], 0) == []


# ----------------------------------------------------------------------------- runs


def test_run_judgments_sends_anonymous_constrained_requests(
    key: None, corpus: Path, tmp_path: Path
) -> None:
    with FakeOpenAI(first_label) as fake:
        report = run.run_judgments(
            corpus,
            judges=["judge-a"],
            out_dir=tmp_path / "out",
            backends=backends_for(fake, tmp_path),
            progress=False,
        )
        sent = json.dumps(fake.requests).lower()
        n_requests = len(fake.requests)
    for leak in (
        "gpt-4.1",
        SECRET_RUN,
        "run-other-7",
        SECRET_STUDY,
        "budget_pressure",
        "budget pressure",
        "budget:",
        "coach",
        "narrow down",
    ):
        assert leak.lower() not in sent, leak
    assert sent.count("budget") == sent.count("# budget of retries per request")
    # 2 runs x (3 conclusion + 3 navigation + 2 reasoning) items, one judge each
    assert report.n_items == 16 and n_requests == 16 and report.n_new == 16
    assert report.n_invalid == 0 and not report.errors
    assert "response_format" in sent


def test_table_schema_and_files(key: None, corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with FakeOpenAI(first_label) as fake:
        report = run.run_judgments(
            corpus,
            ["task_relevance", "navigation_prior"],
            ["judge-a"],
            out_dir=out,
            backends=backends_for(fake, tmp_path),
            progress=False,
        )
    table = report.table
    assert list(table.columns) == store.JUDGMENT_COLUMNS
    assert len(table) == 2 * (1 + 3)
    assert set(table["run_id"]) == {SECRET_RUN, "run-other-7"}
    assert table["valid"].all() and table["turn"].dtype == "float64"
    conc = table[table["family"] == "task_relevance"]
    assert conc["turn"].isna().all() and conc["tool"].isna().all()
    assert (conc["label"] == "not-addressed").all() and (conc["score"] == 1.0).all()
    nav = table[table["family"] == "navigation_prior"]
    assert sorted(nav["tool"].unique()) == ["EXP", "OVW", "PKR"] and (nav["score"] == 0.0).all()
    assert json.loads(table["evidence"].iloc[0]) == ["t2"]
    on_disk = pd.read_parquet(out / "judgments.parquet")
    pd.testing.assert_frame_equal(on_disk, table)
    lines = (out / "judgments.jsonl").read_text().splitlines()
    assert len(lines) == 8 and all(json.loads(x)["model"] == "judge-a" for x in lines)
    # every reader gives the one table: the folder, its parquet, its log
    for source in (out, out / "judgments.parquet", out / "judgments.jsonl"):
        pd.testing.assert_frame_equal(store.read_judgments(source), table)
    counted = clean_judgments(table)  # the agreement module reads it as is
    assert counted["counted"].all()


def test_invalid_verdicts_are_stored_as_nan(key: None, corpus: Path, tmp_path: Path) -> None:
    with FakeOpenAI(lambda req: "not json at all") as fake:
        report = run.run_judgments(
            corpus,
            ["termination_calibration"],
            ["judge-a"],
            retries=1,
            out_dir=tmp_path / "out",
            backends=backends_for(fake, tmp_path),
            progress=False,
        )
        assert len(fake.requests) == 2 * 2  # two items, two attempts each
    t = report.table
    assert len(t) == 2 and not t["valid"].any() and t["score"].isna().all()
    assert t["label"].isna().all() and report.n_invalid == 2
    row = json.loads((tmp_path / "out" / "judgments.jsonl").read_text().splitlines()[0])
    assert row["raw"] == "not json at all" and "JSON" in row["error"] and row["attempts"] == 2
    assert row["max_tokens"] == run.REPLY_MAX_TOKENS  # how it was asked, for a later replay


def _panel_reply(req: dict[str, Any]) -> str:
    enum = req["response_format"]["schema"]["properties"]["label"]["enum"]
    pick = {"a-id": 3, "b-id": 3, "c-id": 1}[req["model"]]
    return json.dumps({"rationale": "r", "label": enum[pick], "evidence": []})


def test_vote_of_three(key: None, corpus: Path, tmp_path: Path) -> None:
    with FakeOpenAI(_panel_reply) as fake:
        backends = backends_for(fake, tmp_path, names=("a", "b", "c"))
        report = run.run_judgments(
            corpus,
            ["task_relevance", "reasoning_prior"],
            ["a", "b", "c"],
            turn_judge="c",
            out_dir=tmp_path / "out",
            backends=backends,
            progress=False,
        )
    t = report.table
    conc = t[t["family"] == "task_relevance"]
    assert len(conc) == 2 * 3 and sorted(conc["judge"].unique()) == ["a", "b", "c"]
    turn = t[t["family"] == "reasoning_prior"]
    assert set(turn["judge"]) == {"c"} and len(turn) == 2 * 2
    votes = aggregate_votes(t)
    tr = votes[votes["family"] == "task_relevance"]
    assert (tr["label"] == "fully-addressed").all() and (tr["score"] == 4.0).all()
    assert (tr["rule"] == "majority").all() and (tr["n_counted"] == 3).all()
    assert report.notes == []


def test_repeated_model_is_asked_once_and_said_so(key: None, corpus: Path, tmp_path: Path) -> None:
    with FakeOpenAI(first_label) as fake:
        report = run.run_judgments(
            corpus,
            ["trace_grounding"],
            ["judge-a"] * 3,
            out_dir=tmp_path / "out",
            backends=backends_for(fake, tmp_path),
            progress=False,
        )
        assert len(fake.requests) == 2  # one per item, not three
    assert sorted(report.table["judge"].unique()) == ["judge-a#1", "judge-a#2", "judge-a#3"]
    assert any("thrice" in n and "by construction" in n for n in report.notes)
    assert "thrice" in report.summary()
    assert (report.n_new, report.n_copies, report.n_cache_hits) == (6, 4, 0)
    t = report.table
    assert (t.groupby("item_id")["label"].nunique() == 1).all()
    assert t.loc[t["judge"] == "judge-a#1", "cached"].eq(False).all()
    assert t.loc[t["judge"] != "judge-a#1", "latency_s"].eq(0.0).all()
    assert run.panel_note(["x", "y", "z"]) is None


def test_resume_skips_finished_verdicts(key: None, corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    calls = {"n": 0}

    def flaky(req: dict[str, Any]) -> Any:
        calls["n"] += 1
        return 400 if calls["n"] > 5 else first_label(req)  # the endpoint dies after 5 calls

    fams = ["task_relevance", "navigation_prior"]
    with FakeOpenAI(flaky) as fake:
        first = run.run_judgments(
            corpus,
            fams,
            ["judge-a"],
            out_dir=out,
            backends=backends_for(fake, tmp_path, mode="off"),
            progress=False,
        )
    assert first.n_new == 5 and len(first.errors) == 3  # nothing recorded for failed calls
    assert len(first.table) == 5
    with FakeOpenAI(first_label) as fake:
        second = run.run_judgments(
            corpus,
            fams,
            ["judge-a"],
            out_dir=out,
            backends=backends_for(fake, tmp_path, mode="off"),
            progress=False,
        )
        assert len(fake.requests) == 3
    assert second.n_skipped == 5 and second.n_new == 3 and not second.errors
    assert len(second.table) == 8
    assert len((out / "judgments.jsonl").read_text().splitlines()) == 8
    with FakeOpenAI([]) as fake:  # a third pass asks nothing at all
        third = run.run_judgments(
            corpus,
            fams,
            ["judge-a"],
            out_dir=out,
            backends=backends_for(fake, tmp_path),
            progress=False,
        )
        assert fake.requests == []
    assert third.n_skipped == 8 and third.n_new == 0


def test_verdicts_on_an_earlier_recording_of_a_run_are_judged_again(
    key: None, corpus: Path, tmp_path: Path
) -> None:
    """A run re-recorded after it was judged (a redo, a new conclusion) ends later than its
    stored verdicts: those are judged again, while the untouched run's verdicts are kept. A
    stored verdict on other messages (same item id) is judged again too."""
    out = tmp_path / "out"
    with FakeOpenAI(first_label) as fake:
        run.run_judgments(corpus, ["task_relevance"], ["judge-a"], out_dir=out,
                        backends=backends_for(fake, tmp_path, mode="off"), progress=False)
    rows = store.read_log(out / "judgments.jsonl")
    assert len(rows) == 2 and all(len(r["prompt_sha256"]) == 64 for r in rows)
    redone = corpus / "b.jsonl"
    lines = redone.read_text().splitlines()
    end = json.loads(lines[-1])
    end["ended_at"] = time.time() + 60  # recorded again after the verdicts were given
    redone.write_text("\n".join([*lines[:-1], json.dumps(end)]) + "\n")
    with FakeOpenAI(first_label) as fake:
        again = run.run_judgments(corpus, ["task_relevance"], ["judge-a"], out_dir=out,
                                backends=backends_for(fake, tmp_path, mode="off"), progress=False)
        assert len(fake.requests) == 1
    assert again.n_skipped == 1 and again.n_new == 1
    assert any("earlier recording" in n for n in again.notes)
    assert len(again.table) == 2  # the newer verdict replaces the stale one
    rf = read_run(corpus / "a.jsonl")
    row = next(r for r in rows if r["run_id"] == rf.header.run_id)
    assert store.verdict_is_current(row, rf, row["prompt_sha256"])
    assert not store.verdict_is_current(row, rf, "0" * 64)
    assert store.verdict_is_current({**row, "prompt_sha256": None}, rf, "0" * 64)  # older rows
    assert not store.verdict_is_current({**row, "judged_at": rf.end.ended_at - 1}, rf)


def test_retry_invalid_asks_again(key: None, corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with FakeOpenAI(lambda req: "garbage") as fake:
        run.run_judgments(
            corpus,
            ["task_relevance"],
            ["judge-a"],
            out_dir=out,
            retries=0,
            backends=backends_for(fake, tmp_path, mode="off"),
            progress=False,
        )
    with FakeOpenAI(first_label) as fake:
        again = run.run_judgments(
            corpus,
            ["task_relevance"],
            ["judge-a"],
            out_dir=out,
            retry_invalid=True,
            progress=False,
            backends=backends_for(fake, tmp_path, mode="off"),
        )
        assert len(fake.requests) == 2
    assert again.table["valid"].all() and len(again.table) == 2  # latest verdict wins


def test_torn_jsonl_line_is_dropped_and_redone(key: None, corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with FakeOpenAI(first_label) as fake:
        run.run_judgments(
            corpus,
            ["task_relevance"],
            ["judge-a"],
            out_dir=out,
            backends=backends_for(fake, tmp_path, mode="off"),
            progress=False,
        )
    path = out / "judgments.jsonl"
    lines = path.read_text().splitlines()
    path.write_text(lines[0] + "\n" + lines[1][:30])  # a crash mid-write
    with FakeOpenAI(first_label) as fake:
        report = run.run_judgments(
            corpus,
            ["task_relevance"],
            ["judge-a"],
            out_dir=out,
            backends=backends_for(fake, tmp_path, mode="off"),
            progress=False,
        )
        assert len(fake.requests) == 1
    assert len(report.table) == 2 and report.table["valid"].all()


def test_cache_replay_needs_no_endpoint(key: None, corpus: Path, tmp_path: Path) -> None:
    with FakeOpenAI(first_label) as fake:
        first = run.run_judgments(
            corpus,
            ["trace_grounding"],
            ["judge-a"],
            out_dir=tmp_path / "o1",
            backends=backends_for(fake, tmp_path),
            progress=False,
        )
        url = fake.url
    # the server is gone now: a replay reads every verdict from the response cache
    replay = run.run_judgments(
        corpus,
        ["trace_grounding"],
        ["judge-a"],
        out_dir=tmp_path / "o2",
        backends=backends_for(url, tmp_path, mode="replay"),
        progress=False,
    )
    assert replay.n_cache_hits == 2 and replay.table["cached"].all()
    cols = ["item_id", "label", "score", "rationale"]
    pd.testing.assert_frame_equal(replay.table[cols], first.table[cols])


def test_cli_judge(key: None, corpus: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    def main(argv: list[str]) -> int:  # only this module's subcommand
        parser = argparse.ArgumentParser(prog="adakit")
        run.register_cli(parser.add_subparsers())
        args = parser.parse_args(argv)
        return int(args.func(args))

    with FakeOpenAI(first_label) as fake:
        registry = tmp_path / "models.yaml"
        registry.write_text(
            "models:\n  cli-judge:\n"
            f"    base_url: {fake.url}\n    model_id: cli-judge-id\n"
            f"    api_key_env: {KEY_ENV}\n    constrain: json\n"
        )
        monkeypatch.setenv("ADAKIT_MODELS", str(registry))
        monkeypatch.setenv("ADAKIT_CACHE", str(tmp_path / "cache"))
        out = tmp_path / "cli-out"
        argv = [
            "judge",
            str(corpus),
            "--families",
            "task_relevance,navigation_prior",
            "--judges",
            "cli-judge",
            "--max-turn-items",
            "1",
            "--out",
            str(out),
            "--no-progress",
            "--cap",
            "conclusion=80",
        ]
        assert main(argv) == 0
        printed = capsys.readouterr().out
        assert len(fake.requests) == 2 * (1 + 1)
        conclusion_prompt = fake.requests[0]["messages"][-1]["content"]
        assert "more characters]" in conclusion_prompt  # the conclusion was cut at 80
        assert main([*argv, "--cache-mode", "replay"]) == 0
    assert "runs 2, items 4" in printed and "invalid 0" in printed
    assert "task_relevance: 2/2 valid" in printed
    assert "4 already on file" in capsys.readouterr().out
    assert main(["judge", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "no corpus" in capsys.readouterr().err
    assert main(["judge", str(corpus), "--families", "nonsense"]) == 2
    assert "unknown evaluation family" in capsys.readouterr().err


def test_cli_judge_refuses_a_damaged_run_file_as_the_loader_does(
    corpus: Path, tmp_path: Path, capsys
) -> None:
    """A run file the loader refuses stops ``adakit judge`` too: one line naming the file and
    the line, exit 2, nothing asked and nothing written (it was skipped with a note)."""
    lines = (corpus / "a.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[2] = lines[2][: len(lines[2]) // 2] + "\n"  # a turn record cut short, more follow
    damaged = corpus / "c.jsonl"
    damaged.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(RunFileError) as refused:
        load_corpus(corpus, cache=False)
    assert f"{damaged}" in str(refused.value) and "line 3" in str(refused.value)

    parser = argparse.ArgumentParser(prog="adakit")
    run.register_cli(parser.add_subparsers())
    out = tmp_path / "verdicts"
    args = parser.parse_args(["judge", str(corpus), "--out", str(out), "--no-progress"])
    assert args.func(args) == 2
    printed = capsys.readouterr()
    assert printed.err == f"error: {refused.value}\n" and printed.out == ""
    assert not out.exists()


def test_header_less_run_files_are_skipped_with_the_loaders_note(
    key: None, corpus: Path, tmp_path: Path
) -> None:
    (corpus / "empty.jsonl").write_bytes(b"")
    with FakeOpenAI(first_label) as fake:
        report = run.run_judgments(corpus, ["task_relevance"], ["judge-a"],
                                   out_dir=tmp_path / "out",
                                   backends=backends_for(fake, tmp_path), progress=False)
    assert report.n_runs == 2 and report.n_new == 2
    assert report.notes[0] == skipped_note([corpus / "empty.jsonl"])
    assert "header-less" in report.summary()


def test_judgments_dir_is_beside_the_corpus_name(tmp_path: Path) -> None:
    from adakit import config

    assert store.judgments_dir(tmp_path / "runs" / "quick") == config.JUDGMENTS / "quick"


@pytest.mark.slow
def test_local_model_judges_end_to_end(tmp_path: Path, corpus: Path) -> None:
    from adakit.llm.models import local_model_available

    ok, why = local_model_available()
    if not ok:
        pytest.skip(why)
    report = run.run_judgments(
        corpus / "a.jsonl",
        ["task_relevance"],
        [run.LOCAL_JUDGE],
        cache_mode="off",
        out_dir=tmp_path / "out",
        progress=False,
        retries=0,
        max_tokens=256,
    )
    t = report.table
    assert len(t) == 1 and not report.errors and not t["cached"].any()
    # the 135M model's choice means nothing; the plumbing does: constrained JSON that parses
    assert t["valid"].all(), t[["family", "label", "rationale"]]
    assert t["label"].iloc[0] in families.FAMILIES["task_relevance"].allowed
    assert len(t["rationale"].iloc[0]) <= verdicts.RATIONALE_MAX


def test_sample_runs_per_cell() -> None:
    runs = [
        synthetic_run(rid, model=m, condition=c, tools=["PKR", {"tool": "CON", "finalize": True}])
        for rid, m, c in [
            ("r3", "synth-A", "natural"),
            ("r1", "synth-A", "natural"),
            ("r2", "synth-A", "natural"),
            ("r4", "synth-B", "natural"),
            ("r5", "synth-A", "budget_pressure"),
        ]
    ]
    picked = run.sample_runs(runs, 1, ("model", "condition"))
    assert sorted(r.header.run_id for r in picked) == ["r1", "r4", "r5"]
    three = run.sample_runs(runs, 3, ("model",))  # synth-A: r1 r2 r3 r5 -> positions 0, 2, 3
    assert sorted(r.header.run_id for r in three) == ["r1", "r3", "r4", "r5"]
    with pytest.raises(ValueError, match="cannot group runs by"):
        run.sample_runs(runs, 1, ("colour",))


def test_judge_lists_accept_the_paper_alias_and_commas() -> None:
    assert run.parse_judges(["paper"]) == list(run.PAPER_PANEL)
    assert run.parse_judges(["a,b", "c"]) == ["a", "b", "c"]
    assert run.parse_judges(None) is None
    assert run.PAPER_PANEL == ("glm-5", "kimi-k2.5", "minimax-m2.7")
    from adakit.llm.models import load_registry

    assert set(run.PAPER_PANEL) | {run.LOCAL_JUDGE} <= set(load_registry())


def test_a_list_of_run_files_is_stored_under_their_folder(
    key: None, corpus: Path, tmp_path: Path, monkeypatch
) -> None:
    from adakit import config

    monkeypatch.setattr(config, "JUDGMENTS", tmp_path / "judgments")
    with FakeOpenAI(first_label) as fake:
        report = run.run_judgments(
            [corpus / "a.jsonl"],
            ["task_relevance"],
            ["judge-a"],
            backends=backends_for(fake, tmp_path),
            progress=False,
        )
    assert report.out_dir == tmp_path / "judgments" / "corpus"
    assert (report.out_dir / "judgments.parquet").exists() and len(report.table) == 1


def test_tokens_and_cost_are_counted(key: None, corpus: Path, tmp_path: Path) -> None:
    def priced(req: dict[str, Any]) -> Any:
        return reply(first_label(req), tokens_in=100, tokens_out=10)

    with FakeOpenAI(priced) as fake:
        backends = backends_for(fake, tmp_path, price_in=1.0, price_out=2.0)
        report = run.run_judgments(
            corpus,
            ["task_relevance"],
            ["judge-a"],
            backends=backends,
            out_dir=tmp_path / "out",
            progress=False,
        )
    assert (report.tokens_in, report.tokens_out) == (200, 20)
    assert report.cost_usd == pytest.approx(2 * (100 * 1.0 + 10 * 2.0) / 1e6)
    row = json.loads((tmp_path / "out" / "judgments.jsonl").read_text().splitlines()[0])
    assert (row["tokens_in"], row["tokens_out"]) == (100, 10)
    assert "200 tokens in, 20 out" in report.summary()


def test_caps_from_the_command_line() -> None:
    caps = run.parse_caps(["conclusion=2000", "window_turns=2"], prompt=9000)
    assert (caps.conclusion, caps.window_turns, caps.prompt) == (2000, 2, 9000)
    assert caps.snippets == context.ContextCaps().snippets
    assert run.parse_caps([]) is None
    for bad, msg in [
        ("colour=3", "SECTION one of"),
        ("conclusion", "SECTION=N"),
        ("conclusion=many", "not a whole number"),
        ("window=-1", "negative"),
    ]:
        with pytest.raises(ValueError, match=msg):
            run.parse_caps([bad])


def test_redaction_removes_whole_sentences_only() -> None:
    anon = anonymise.Anonymiser(())
    assert (
        anon("Given the budget, I read app.py now. Then views.py.") == "[redacted] Then views.py."
    )
    assert anon("I have 3 turns left!\nNext: open src/a.py.") == "[redacted]\nNext: open src/a.py."
    assert anon("Reminder received\nread cli.py") == "[redacted]\nread cli.py"
    assert anon("Read flask/app.py first. It routes.") == "Read flask/app.py first. It routes."
    assert anon("max_budget = 3", redact=True) == "max_budget = 3"  # not a word of its own
    assert anon("the budget is 3", redact=False) == "the budget is 3"


def test_clip_says_exactly_how_much_was_cut() -> None:
    text = "abcdefghij" * 10
    cut = context.clip(text, 50)
    assert len(cut) <= 50 and cut.startswith("abcdefghij")
    kept = cut.split(" [... ")[0]
    assert cut.endswith(f"[... {100 - len(kept)} more characters]")
    assert context.clip("short", 50) == "short"
    assert (
        context.clip_lines(["a" * 10] * 5, 25)
        == "a" * 10 + "\n" + "a" * 10 + "\n(... 3 more lines omitted)"
    )
    assert context.clip_lines(["1", "2", "3"], 4, keep="tail") == "(... 1 earlier lines omitted)\n2\n3"


def test_describe_panel_says_when_the_panel_is_one_model():
    from adakit.judging.run import describe_panel

    temps = describe_panel(["smollm2-135m", "smollm2-135m-t07", "smollm2-135m-t10"])
    assert temps.startswith("The panel is ONE model (SmolLM2-135M-Instruct.Q4_1) sampled at "
                            "temperatures 0.2, 0.7, 1.0 in 3 seats")
    copies = describe_panel(["smollm2-135m#1", "smollm2-135m#2", "smollm2-135m#3"])
    assert "copied to each seat" in copies and "agreement is undefined" in copies
    paper = describe_panel(["glm-5", "kimi-k2.5", "minimax-m2.7"])
    assert paper == "The panel has 3 distinct judges: glm-5, kimi-k2.5, minimax-m2.7."
    assert "single judge" in describe_panel(["smollm2-135m"])


def test_describe_panel_names_seats_that_share_a_model():
    """The local profile's panel: two seats are the 1.5B at two temperatures, one the 0.5B."""
    from adakit.judging.run import describe_panel

    local = describe_panel(["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-t07"])
    assert local.startswith("The panel has 3 seats but only 2 distinct models "
                            "(qwen2.5-coder-1.5b-instruct-q4_k_m in qwen2.5-coder-1.5b, "
                            "qwen2.5-coder-1.5b-t07)")
    assert "agreeing with itself" in local
    mixed = describe_panel(["glm-5", "smollm2-135m", "smollm2-135m-t07"])
    assert "only 2 distinct models" in mixed and "glm-5" not in mixed.split("(")[1]


@pytest.mark.parametrize(
    ("said", "judged"),
    [
        ("As GPT-4, I believe the router lives in src/flask/app.py.",
         "As [redacted], I believe the router lives in src/flask/app.py."),
        ("I'm Qwen, created by Alibaba Cloud. The session object lives in sessions.py.",
         "I'm [redacted], created by [redacted]. The session object lives in sessions.py."),
        ("I am a model by DeepSeek, so I recall that Flask wraps Werkzeug.",
         "I am a model by [redacted], so I recall that Flask wraps Werkzeug."),
        ("As an OpenAI model, I cannot run code, but app.py defines Flask.",
         "As an [redacted] model, I cannot run code, but app.py defines Flask."),
        ("Given my 12-turn limit, I will read app.py next.",
         "Given [redacted], I will read app.py next."),
        ("This is turn 5 of 12; I read views.py.", "This is turn 5; I read views.py."),
        ("The reviewer returned my conclusion, so I will check blueprints.py first.",
         "[redacted], so I will check blueprints.py first."),
        ("The panel flagged weak navigation; I'll open the routing code in app.py.",
         "[redacted]; I'll open the routing code in app.py."),
        ("My conclusion was rejected, so I read sansio/app.py next.",
         "[redacted], so I read sansio/app.py next."),
        # ordinary words and paths stay
        ("As a reviewer of this code, I see a smell in helpers.py.",
         "As a reviewer of this code, I see a smell in helpers.py."),
        ("Next I open sklearn/linear_model/_glm/glm.py; I grok the minimax step.",
         "Next I open sklearn/linear_model/_glm/glm.py; I grok the minimax step."),
    ],
)
def test_the_agents_own_words_are_neutralised_phrase_by_phrase(said: str, judged: str) -> None:
    anon = anonymise.Anonymiser(())
    assert anon(said) == judged
    assert anon(said, redact=False) == said  # repository text (tool results) is evidence


def test_termination_summary_does_not_count_conclusion_attempts(tmp_path: Path) -> None:
    rf = read_run(write_hand_run(tmp_path / "r.jsonl"))
    summary = context.trajectory_summary(rf, anonymise.anonymiser_for(rf), context.ContextCaps())
    assert "conclusion attempts" not in summary.lower()
    assert summary.splitlines()[2] == "Tool errors: 1."  # the malformed reply


def test_judges_reply_up_to_2048_tokens_by_default() -> None:
    """The paper capped judge outputs at 2048 tokens (Appendix A.2.1, C.1)."""
    import argparse
    import inspect

    from adakit.study.pipeline import judge_plan

    parser = argparse.ArgumentParser()
    run.register_cli(parser.add_subparsers())
    assert parser.parse_args(["judge", "data/runs/x"]).max_tokens == 2048
    assert inspect.signature(run.run_judgments).parameters["max_tokens"].default == 2048
    assert inspect.signature(run.ask_judge).parameters["max_tokens"].default == 2048
    assert inspect.signature(judge_plan).parameters["default_max_tokens"].default == 2048
