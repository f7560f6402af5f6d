"""Lens 3's evidence check: judges' evidence strings against the material of the run."""

import json

import pandas as pd

from adakit import synthetic
from adakit.lenses import evidence as ev
from adakit.record import load_corpus

MATERIAL = ev.normalise(
    "Turn 1: outline of src/flask/app.py shows class Flask(App), the central object.\n"
    "The   Flask object ROUTES requests to view functions."
)


def test_kinds_of_evidence_strings():
    cases = {
        "turn 2": "pointer", "T1": "pointer", "EXP3": "pointer", "turns 1-3": "pointer",
        "turn 9": "not found",  # the run has 3 turns
        "src/flask/app.py#L203": "pointer", "app.py:3": "pointer",
        "src/flask/nope.py": "not found",
        "Turn 1: the central object": "verbatim",  # a pointer prefix, then a quote
        "the flask object routes requests": "verbatim",  # case and spaces do not matter
        'It says "class Flask(App)" and "view functions"': "verbatim",  # only quoted parts
        'It says "class Flask(App)" and "a blueprint registry"': "not found",
        "the central ... view functions": "verbatim",  # an ellipsis splits the quote
        "Flask is the heart of the framework": "not found",  # a paraphrase
        "it's the central object": "not found",  # an apostrophe does not open a quote
        "It says 'view functions' though the agent's claim isn't": "verbatim",
        "": "not found",
    }
    got = {text: ev.classify(text, MATERIAL, n_turns=3) for text in cases}
    assert got == cases


def _verdicts(rows):
    return pd.DataFrame([{"item_id": i, "run_id": r, "family": f, "judge": j, "valid": ok,
                          "evidence": json.dumps(e, ensure_ascii=False)}
                         for i, r, f, j, ok, e in rows])


def test_check_and_summary_flag_a_quote_in_a_script_the_run_never_used():
    verdicts = _verdicts([
        ("i1", "r1", "trace_grounding", "A", True, ["turn 1", "the central object"]),
        ("i1", "r1", "trace_grounding", "B", True, ["build web应用程序", "the central object"]),
        ("i2", "r1", "task_relevance", "B", True, ["routes requests", "made up"]),
        ("i3", "r1", "task_relevance", "B", False, ["ignored: an invalid verdict"]),
        ("i4", "gone", "task_relevance", "B", True, ["no material: skipped"]),
    ])
    check = ev.check_evidence(verdicts, {"r1": MATERIAL}, {"r1": 3})
    assert len(check) == 6 and set(check["run_id"]) == {"r1"}
    assert check["foreign_script"].tolist() == [False, False, True, False, False, False]
    summary = ev.evidence_summary(check).set_index(["judge", "family"])
    a = summary.loc[("A", "trace_grounding")]
    assert a["verdicts"] == 1 and a["strings"] == 2 and a["pointer"] == 50 and a["verbatim"] == 50
    b = summary.loc[("B", "trace_grounding")]
    assert b["foreign_verdicts"] == 1 and b["not found"] == 50
    assert summary.loc[("B", "task_relevance"), "not found"] == 50
    by_judge = ev.evidence_summary(check, by=["judge"]).set_index("judge")
    assert by_judge.loc["B", "verdicts"] == 2 and by_judge.loc["B", "foreign_verdicts"] == 1
    assert ev.evidence_summary(check.iloc[:0]).empty


def test_material_of_a_recorded_run_holds_its_conclusion_and_rendered_prompts(tmp_path):
    run = synthetic.synthetic_run("r-ev", tools=["OVW", "PKR", {"tool": "CON", "finalize": True}])
    synthetic.write_run(run, tmp_path / "r-ev.jsonl")
    runs = load_corpus(tmp_path, cache=False).runs
    materials, turns = ev.corpus_materials(runs, worlds=False)
    assert turns == {"r-ev": 3}
    text = materials["r-ev"]
    assert ev.normalise(run.end.conclusion)[:80] in text
    from adakit.judging import context

    prompt = context.build_items(run)[0].prompt_text
    line = next(x for x in prompt.splitlines() if len(x.strip()) > 30)
    assert ev.classify(line, text, 3) == "verbatim"  # a line of the judge's own prompt
    assert ev.corpus_materials(runs, run_ids=["other"], worlds=False) == ({}, {})


def test_verdicts_without_evidence_give_an_empty_check():
    bare = _verdicts([("i1", "r1", "task_relevance", "A", True, ["x"])]).drop(columns="evidence")
    check = ev.check_evidence(bare, {"r1": MATERIAL}, {"r1": 3})
    assert check.empty and list(check.columns)[:2] == ["item_id", "run_id"]
