"""Human labels (adakit.workbench.labels, adakit.workbench.labelling): the items and cards a labeller gets, blind
evidence, the append-only label file, reading it back, the agreement tables of notebook 13,
and the labelling widget driven in plain Python (tests/test_labelling_lab.py drives it in a
live JupyterLab)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from adakit.judging import agreement as ag
from adakit.judging import context, families
from adakit.record import (
    ConditionInfo,
    End,
    Header,
    ModelInfo,
    RunFile,
    TaskInfo,
    ToolCall,
    ToolMetrics,
    Turn,
    WorldInfo,
    load_corpus,
)
from adakit.synthetic import synthetic_run, write_run
from adakit.workbench import labelling, labels

FILES = {"pkg/a.py": 100, "pkg/b.py": 50}
T0 = 1_800_000_000.0
TOOLS = [
    {"tool": "OVW", "file": "pkg/a.py"},
    {"tool": "PKR", "file": "pkg/a.py", "ranges": [(1, 10)]},
    "MEM",
    {"tool": "PKR", "file": "pkg/b.py", "ranges": [(3, 9)], "error": "tool_error"},
    {"tool": "CON", "finalize": True},
]


@pytest.fixture
def corpus(tmp_path):
    """Two concluded synthetic runs and one that hit its turn bound."""
    folder = tmp_path / "runs"
    for rid, tools in (("run-a", TOOLS), ("run-b", TOOLS), ("run-c", TOOLS[:3])):
        write_run(synthetic_run(rid, tools=tools, files=FILES, seed=1), folder / f"{rid}.jsonl")
    return load_corpus(folder, cache=False)


# --------------------------------------------------------------------------- items and cards


def test_items_from_runs_are_the_judges_items(corpus):
    items = labels.label_items(corpus, per_family=None)
    by_family = {f: [i for i in items if i.family == f] for f in families.FAMILIES}
    # conclusions: run-a and run-b (run-c has none); navigation: OVW, PKR and the failed PKR
    # of run-a and run-b, OVW and PKR of run-c; reasoning: MEM of each run, CON of run-a, run-b
    for fam in families.CONCLUSION_FAMILIES:
        assert sorted(i.run_id for i in by_family[fam]) == ["run-a", "run-b"]
    assert len(by_family["navigation_prior"]) == 8 and len(by_family["reasoning_prior"]) == 5
    assert {i.tool for i in by_family["navigation_prior"]} == {"OVW", "PKR"}
    for i in items:
        assert i.item_id == context.item_id(i.run_id, i.family, i.turn)
    from adakit.record import read_run

    rf = read_run(corpus.runs.set_index("run_id").loc["run-a", "path"])
    built = {it.item_id for it in context.build_items(rf)}
    assert {i.item_id for i in items if i.run_id == "run-a"} == built  # the same ids


def test_items_from_judgments_are_sampled_the_same_for_everyone(corpus):
    rows = []
    for run in ("run-a", "run-b", "run-c", "elsewhere"):
        for fam in families.CONCLUSION_FAMILIES:
            rows.append({"item_id": context.item_id(run, fam), "run_id": run, "family": fam,
                         "turn": np.nan, "tool": None})
        for turn in range(1, 9):
            rows.append({"item_id": context.item_id(run, "navigation_prior", turn),
                         "run_id": run, "family": "navigation_prior", "turn": float(turn),
                         "tool": "PKR"})
    table = pd.DataFrame(rows)
    items = labels.label_items(corpus, table, per_family=2, seed=3)
    assert all(i.run_id != "elsewhere" for i in items)  # only runs of the corpus
    concl = [i for i in items if i.family in families.CONCLUSION_FAMILIES]
    runs = {i.run_id for i in concl}
    assert len(runs) == 2 and len(concl) == 6  # two runs, each on all three families
    nav = [i for i in items if i.family == "navigation_prior"]
    assert len(nav) == 2 and all(isinstance(i.turn, int) for i in nav)
    assert labels.label_items(corpus, table, per_family=2, seed=3) == items  # reproducible
    cards = labels.label_cards(items, seed=3)
    assert sorted(c.kind for c in cards) == ["conclusion", "conclusion", "step", "step"]
    assert all(len(c.items) == 3 for c in cards if c.kind == "conclusion")
    assert labels.label_cards(items, seed=3) == cards
    assert len({tuple((c.run_id, c.turn) for c in labels.label_cards(items, seed=s))
                for s in range(6)}) > 1  # the seed shuffles
    with pytest.raises(ValueError, match="unknown"):
        labels.label_items(corpus, table, families=["charm"])


def _named_run() -> RunFile:
    """An LLM run whose texts name its model and its condition."""
    header = Header(run_id="gpt-4.1__flask__budget_pressure__r0", study="quick",
                    model=ModelInfo(name="gpt-4.1", kind="llm", model_id="gpt-4.1"),
                    world=WorldInfo(name="flask"),
                    task=TaskInfo(family="feature_tracing", prompt="Trace how routing works."),
                    condition=ConditionInfo(name="budget_pressure"), turn_bound=10,
                    started_at=T0)
    turns = [
        Turn(turn=1, started_at=T0, ended_at=T0 + 1, thinking="As gpt-4.1 I start at app.py.",
             call=ToolCall(tool="peek_code_region", params={"file_path": "src/app.py"}),
             metrics=ToolMetrics(tool="PKR", file="src/app.py", ranges=[(1, 20)],
                                 lines_viewed=20), observation="def route(): ..."),
        Turn(turn=2, started_at=T0 + 1, ended_at=T0 + 2,
             call=ToolCall(tool="create_memory", params={"memory_title": "routing",
                                                         "memory_content": "route() in app"}),
             metrics=ToolMetrics(tool="MEM"),
             state_changes=[{"channel": "memory", "op": "add", "id": 1, "title": "routing",
                             "content": "route() registers rules", "confidence": "high"}]),
        Turn(turn=3, started_at=T0 + 2, ended_at=T0 + 3,
             call=ToolCall(tool="stash_conclusion", params={"content": "done",
                                                            "proceed_to_finalize": True}),
             metrics=ToolMetrics(tool="CON", finalize=True)),
    ]
    end = End(reason="finalize", ended_at=T0 + 4, conclusion_title="Routing",
              conclusion="Routing is set up in app.py. With my budget almost used up, I stop "
                         "here. gpt-4.1 is confident.")
    return RunFile(path=None, header=header, turns=turns, end=end)  # type: ignore[arg-type]


def test_cards_are_blind_by_default():
    rf = _named_run()
    card = labels.LabelCard(rf.header.run_id, None, tuple(
        labels.LabelItem(context.item_id(rf.header.run_id, f), rf.header.run_id, f)
        for f in families.CONCLUSION_FAMILIES))
    blind = labels.card_sections(card, rf)
    text = "\n".join(blind.values()).lower()
    for secret in ("gpt-4.1", "budget", "budget_pressure", "quick"):
        assert secret not in text, secret
    assert "routing is set up in app.py" in text  # the conclusion itself stays
    assert "src/app.py: lines 1-20" in blind["code read"]
    assert blind["memories"] == "routing: route() registers rules (confidence high)"
    seen = labels.card_sections(card, rf, blind=False)
    assert "model gpt-4.1 (llm)" in seen["about"] and "condition budget_pressure" in seen["about"]
    step = labels.LabelCard(rf.header.run_id, 2, (labels.LabelItem(
        context.item_id(rf.header.run_id, "reasoning_prior", 2), rf.header.run_id,
        "reasoning_prior", 2, "MEM"),))
    sections = labels.card_sections(step, rf)
    assert sections["about"].startswith("step 2 of a run on flask (MEM)")
    assert "t1 PKR" in sections["before"] and "t2 MEM" in sections["step"]
    assert "gpt-4.1" not in "\n".join(sections.values()).lower()
    text = labels.card_text(step, rf)
    assert "REASONING PRIOR USAGE: Is this note grounded" in text
    assert "trajectory-grounded / mixed / prior-shaped / unclear" in text


# --------------------------------------------------------------------------- the label file


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_label_log_appends_one_row_per_label(tmp_path, suffix):
    log = labels.LabelLog(tmp_path / f"sub/labels{suffix}")
    assert log.rows().empty and log.latest() == {}
    assert log.add("ana", "i1", "task_relevance", "mostly-addressed", time="t1")
    assert not log.add("ana", "i1", "task_relevance", "mostly-addressed")  # a double click
    assert log.add("bo", "i1", "task_relevance", "partly-addressed", time="t2")  # another person
    assert log.add("ana", "i1", "task_relevance", "fully-addressed", time="t3")  # changed mind
    assert log.add("ana", "i2", "navigation_prior", "unclear", time="t4")
    rows = log.rows()
    assert list(rows.columns) == labels.LABEL_COLUMNS and len(rows) == 4
    assert rows["time"].tolist() == ["t1", "t2", "t3", "t4"]
    assert log.latest("ana") == {("i1", "task_relevance"): "fully-addressed",
                                 ("i2", "navigation_prior"): "unclear"}
    lines = log.path.read_text().splitlines()
    assert len(lines) == (5 if suffix == ".csv" else 4)  # the CSV's header once
    for bad, message in ((("", "i1", "task_relevance", "mixed"), "labeller id"),
                         (("ana", "i1", "charm", "mixed"), "unknown"),
                         (("ana", "i1", "task_relevance", "mixed"), "not a task_relevance")):
        with pytest.raises(ValueError, match=message):
            log.add(*bad)
    assert len(log.rows()) == 4  # a refused label writes nothing
    with pytest.raises(ValueError, match=".jsonl or .csv"):
        labels.LabelLog(tmp_path / "labels.txt")


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_torn_last_line_loses_only_itself(tmp_path, suffix):
    log = labels.LabelLog(tmp_path / f"labels{suffix}")
    log.add("ana", "i1", "task_relevance", "mostly-addressed")
    with log.path.open("a") as f:  # a crash in the middle of a write
        f.write('{"labeller": "ana", "item_' if suffix == ".jsonl" else "ana,i2,task_rel")
    assert len(log.rows()) == 1
    assert log.add("ana", "i3", "trace_grounding", "unsupported")
    rows = log.rows()
    assert rows["item_id"].tolist() == ["i1", "i3"]
    human = labels.read_human_labels(log.path)
    assert human["item_id"].tolist() == ["i1", "i3"]


def test_read_human_labels_latest_per_labeller_and_the_old_csv(tmp_path, capsys):
    log = labels.LabelLog(tmp_path / "labels.jsonl")
    log.add("ana", "i1", "task_relevance", "partly-addressed")
    log.add("ana", "i1", "task_relevance", "fully-addressed")
    log.add("bo", "i1", "task_relevance", "unclear")
    log.add("bo", "t7", "navigation_prior", "prior-led")
    human = labels.read_human_labels(log.path)
    assert human[["labeller", "item_id", "label"]].values.tolist() == [
        ["ana", "i1", "fully-addressed"], ["bo", "i1", "unclear"], ["bo", "t7", "prior-led"]]
    assert human["score"].tolist()[0] == 4.0 and math.isnan(human["score"].tolist()[1])
    assert human["score"].tolist()[2] == 1.0
    old = tmp_path / "old.csv"
    old.write_text("item_id,family,label\ni1,Task Relevance,3\n")
    single = labels.read_human_labels(old)
    assert single.values.tolist() == [["human", "i1", "task_relevance", "3", 3.0]]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"labeller": "a", "item_id": "i", "family": "task_relevance",
                               "label": "great", "time": "t"}) + "\n")
    with pytest.raises(ValueError, match="vocabularies"):
        labels.read_human_labels(bad)
    with pytest.raises(FileNotFoundError):
        labels.read_human_labels(tmp_path / "none.jsonl")


# --------------------------------------------------------------------------- agreement


def _human(rows):
    out = pd.DataFrame(rows, columns=["labeller", "item_id", "family", "label"])
    return out.assign(score=[families.LABEL_SCORES[f].get(lab, np.nan)
                             for f, lab in zip(out["family"], out["label"], strict=True)])


def test_human_human_agreement_by_hand():
    fam = "task_relevance"
    human = _human([
        ("ana", "i1", fam, "1"), ("ana", "i2", fam, "2"), ("ana", "i3", fam, "4"),
        ("bo", "i1", fam, "2"), ("bo", "i2", fam, "1"),
        ("cy", "i3", fam, "4"),
    ])
    table = ag.human_agreement(human)
    row = table.iloc[0]
    # ana-bo share i1, i2 with labels (1, 2) vs (2, 1): quadratic weights 1/9 on both items,
    # expected 1/18 from the margins, so kappa = 1 - (1/9)/(1/18) = -1; exact 0.
    # ana-cy share only i3: undefined; bo-cy share nothing: undefined
    assert row["n_labellers"] == 3 and row["n_items"] == 3
    assert row["kappa"] == pytest.approx(-1.0) and row["exact"] == pytest.approx(0.5)
    one = ag.human_agreement(human[human["labeller"] == "ana"])
    assert math.isnan(one.iloc[0]["kappa"]) and "one labeller" in one.iloc[0]["note"]
    lonely = ag.human_agreement(human[human["labeller"] != "bo"])
    assert math.isnan(lonely.iloc[0]["kappa"]) and "undefined" in lonely.iloc[0]["note"]


def test_agreement_overview_side_by_side():
    fam = "task_relevance"
    verdicts = []
    for item, (a, b) in {"i1": ("1", "1"), "i2": ("2", "2"), "i3": ("4", "4")}.items():
        for judge, lab in (("j-a", a), ("j-b", b)):
            verdicts.append({"item_id": item, "run_id": item, "family": fam, "judge": judge,
                             "turn": np.nan, "tool": None, "label": lab,
                             "score": float(lab), "rationale": "", "valid": True})
    judgments = pd.DataFrame(verdicts)
    human = _human([("ana", "i1", fam, "1"), ("ana", "i2", fam, "2"), ("ana", "i3", fam, "4")])
    row = ag.agreement_overview(human, judgments).iloc[0]
    assert row["judge_judge_kappa"] == pytest.approx(1.0) and row["judge_judge_items"] == 3
    assert row["human_judge_kappa"] == pytest.approx(1.0) and row["human_judge_items"] == 3
    assert math.isnan(row["human_human_kappa"])
    assert "human-human undefined: fewer than two labellers" in row["note"]
    shown = ag.format_undefined(ag.agreement_overview(human, judgments))
    assert shown.iloc[0]["human_human_kappa"] == "undefined"
    assert shown.iloc[0]["judge_judge_kappa"] == 1.0
    # one copied judge model: judge-judge undefined, human-judge still defined
    copied = judgments.assign(judge=judgments["judge"].map({"j-a": "m#1", "j-b": "m#2"}))
    row = ag.agreement_overview(human, copied).iloc[0]
    assert math.isnan(row["judge_judge_kappa"]) and "fewer than two independent" in row["note"]
    assert row["human_judge_kappa"] == pytest.approx(1.0)
    # a single shared item: too few to say
    few = ag.agreement_overview(human.iloc[:1], judgments).iloc[0]
    assert math.isnan(few["human_judge_kappa"]) and "too few shared items" in few["note"]
    c7 = ag.by_labeller(human, lambda h: ag.human_alignment(h, judgments))
    assert c7["labeller"].tolist() == ["ana"] and c7.iloc[0]["exact"] == 1.0


# --------------------------------------------------------------------------- the widget


def test_labelling_widget_saves_each_click_once(corpus, tmp_path):
    path = tmp_path / "labels.jsonl"
    ui = labelling.label(corpus, path, interactive=True)
    assert isinstance(ui, labelling.LabelPreview)  # no Jupyter kernel here: the preview
    assert "items on" in ui.text and "the first card" in ui.text
    cards = labels.label_cards(labels.label_items(corpus))
    w = labelling.LabellingWidgets(corpus, cards, labels.LabelLog(path))
    first = next(iter(w.buttons.values()))
    first.value = first.options[0]
    assert "labeller id" in w.status.value and first.value is None and not path.exists()
    w.labeller.value = "ana"
    done = []
    # the label rows shown whenever the header changes: the header is redrawn after the rows
    rows_at_header: list[set[str]] = []
    w.position.observe(lambda _: rows_at_header.append(
        {c for r in w.rows.children for c in r._dom_classes if c.startswith("adakit-card-")}),
        names="value")
    for k in range(3):  # three cards, one label each
        w.go(k)
        # each label row says which card drew it
        assert all(f"adakit-card-{k + 1}" in b._dom_classes for b in w.buttons.values())
        assert f"card {k + 1} of" in w.position.value
        if k:  # a new card: its header came with its own rows on the page, not the last card's
            assert rows_at_header[-1] == {f"adakit-card-{k + 1}"}, rows_at_header
        family, buttons = next(iter(w.buttons.items()))
        buttons.value = buttons.options[1]
        buttons.value = buttons.options[1]  # clicking the chosen label again: no change
        done.append((w.card.items[0].item_id, family, buttons.options[1]))
    assert "saved:" in w.status.value
    rows = labels.LabelLog(path).rows()
    assert rows[["item_id", "family", "label"]].values.tolist() == [list(d) for d in done]
    assert set(rows["labeller"]) == {"ana"}
    # a new widget (a reload) shows ana's labels again, and nobody else's
    again = labelling.LabellingWidgets(corpus, cards, labels.LabelLog(path), labeller="ana")
    assert next(iter(again.buttons.values())).value == done[0][2]
    again.labeller.value = "bo"
    assert next(iter(again.buttons.values())).value is None
    assert "card 1 of" in again.position.value and "0 of 19 labels by bo" in again.position.value
    html = again.evidence.value
    assert "run-a" not in html and "run-b" not in html and "synth-A" not in html  # blind
    again.blind.value = False
    assert "synth-A" in again.evidence.value


def _mixed_corpus(folder) -> object:
    """Scripted baselines first in corpus order, then two runs of a real (local) model."""
    for rid, kind in (("a-base", "baseline"), ("b-base", "baseline"), ("c-real", "local"),
                      ("d-real", "local")):
        rf = synthetic_run(rid, tools=TOOLS, files=FILES, seed=1)
        rf.header.model.kind = kind
        write_run(rf, folder / f"{rid}.jsonl")
    return load_corpus(folder, cache=False)


def test_the_plan_says_how_many_cards_and_why_and_opens_on_a_real_model(tmp_path):
    corpus = _mixed_corpus(tmp_path / "runs")
    plan = labels.plan_labels(corpus, per_family=50)
    # 4 concluded runs (3 families each), 2 navigation steps (OVW, PKR; the failed PKR
    # too) and 2 reasoning steps (MEM, CON) per run
    assert len(plan.items) == 4 * 3 + 4 * 3 + 4 * 2 and len(plan.cards) == 4 + 12 + 8
    lines = plan.note.splitlines()
    assert lines[0] == "24 cards from 32 items the judges would build (at most 50 per family):"
    assert lines[1].startswith("4 conclusion card(s), one per concluded run, each labelled on "
                               "Task relevance, Trace grounding, Termination calibration: "
                               "all 4 concluded runs in the corpus, fewer than the 50 asked")
    assert any(line.startswith("12 step card(s) for Navigation prior") and "all 12 steps in the corpus" in line
               for line in lines)
    small = labels.plan_labels(corpus, per_family=2)
    assert "2 drawn at random from 4 concluded runs in the corpus" in small.note
    assert "2 drawn at random from 12 steps in the corpus" in small.note and len(small.cards) == 2 + 2 + 2
    # the deck opens on a real model's conclusion, whatever the seed's shuffle
    for seed in range(5):
        first = labels.plan_labels(corpus, per_family=50, seed=seed).cards[0]
        assert first.run_id in {"c-real", "d-real"} and first.kind == "conclusion"
    shuffled = labels.label_cards(plan.items, seed=0)
    assert labels.label_cards(plan.items, seed=0, lead={"zzz"}) == shuffled  # no such run
    led = labels.label_cards(plan.items, seed=0, lead={"c-real"})
    assert sorted(map(repr, led)) == sorted(map(repr, shuffled)) and led[0].run_id == "c-real"


def test_labelling_counts_and_messages_stay_right_card_to_card(tmp_path):
    corpus = _mixed_corpus(tmp_path / "runs")
    plan = labels.plan_labels(corpus, per_family=50)
    path = tmp_path / "labels.jsonl"
    w = labelling.LabellingWidgets(corpus, plan.cards, labels.LabelLog(path), labeller="nc",
                                   note=plan.note)
    assert "24 cards from 32 items" in w.plan.value
    assert "0 of 32 labels by nc · 0 of 24 cards complete" in w.position.value
    conclusion = w.card
    assert conclusion.kind == "conclusion" and len(w.buttons) == 3
    w.buttons["task_relevance"].value = w.buttons["task_relevance"].options[0]
    # the header counts the label right after the save
    assert "1 row by nc" in w.status.value
    assert "1 of 32 labels by nc · 0 of 24 cards complete" in w.position.value
    for family in ("trace_grounding", "termination_calibration"):
        w.buttons[family].value = w.buttons[family].options[1]
    assert "3 rows by nc" in w.status.value
    assert "3 of 32 labels by nc · 1 of 24 cards complete" in w.position.value
    assert w.counts() == (3, 1)
    # another card (of other families): the saved line does not carry over
    step = next(k for k, c in enumerate(w.cards) if c.kind == "step")
    w.go(step)
    assert w.status.value == "" and "3 of 32 labels" in w.position.value
    w.go(step)  # the same card again keeps a message
    w.buttons[w.card.items[0].family].value = w.buttons[w.card.items[0].family].options[0]
    w.go(step)
    assert "saved:" in w.status.value
    w.go(0)
    assert w.status.value == "" and "4 of 32 labels by nc · 2 of 24" in w.position.value  # a step card: one label


def test_a_bookmarked_run_shows_its_bookmarks_blind():
    rf = _named_run()
    mark = Turn(turn=2, started_at=T0 + 1, ended_at=T0 + 1.5,
                call=ToolCall(tool="bookmark", params={"file_path": "src/app.py", "line_number": 12,
                                                       "note": "gpt-4.1 thinks route() starts here"}),
                metrics=ToolMetrics(tool="BKM", file="src/app.py"),
                state_changes=[{"channel": "bookmark", "op": "add", "id": 1, "file": "src/app.py",
                                "line": 12, "note": "gpt-4.1 thinks route() starts here"}])
    rf.turns.insert(1, mark)
    for k, t in enumerate(rf.turns, 1):
        t.turn = k
    card = labels.LabelCard(rf.header.run_id, None, (labels.LabelItem(
        context.item_id(rf.header.run_id, "trace_grounding"), rf.header.run_id, "trace_grounding"),))
    blind = labels.card_sections(card, rf)
    assert blind["bookmarks"].startswith("src/app.py:12 ")
    assert "route() starts here" in blind["bookmarks"] and "gpt-4.1" not in blind["bookmarks"].lower()
    seen = labels.card_sections(card, rf, blind=False)
    assert seen["bookmarks"] == "src/app.py:12 gpt-4.1 thinks route() starts here"
    step = labels.LabelCard(rf.header.run_id, 1, (labels.LabelItem(
        context.item_id(rf.header.run_id, "navigation_prior", 1), rf.header.run_id,
        "navigation_prior", 1, "PKR"),))
    assert "bookmarks" not in labels.card_sections(step, rf)  # none yet at turn 1
