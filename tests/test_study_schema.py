"""Study files are checked when they are loaded (issue 25, item 5): every mistake is one line
naming the file and the place, exit 2, nothing written; the published JSON Schema is the
model's own and every shipped study fits it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from adakit.cli import main
from adakit.study.schema import STUDY_SCHEMA_DOC, RunSettings, StudyError, study_json_schema
from adakit.study.spec import RUN_SETTINGS, load_study

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p for p in (ROOT / "studies").glob("*.yaml") if not p.stem.endswith(".params"))
SHIPPED += sorted((ROOT / "data" / "reference").glob("*/study.yaml"))
BLOCK = "  - {models: [baseline-tracer], worlds: [flask], tasks: [feature_tracing], conditions: [natural]}\n"
MATRIX = "matrix:\n" + BLOCK


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.yaml"
    top = "" if text.startswith("- ") else f"output: {tmp_path / 'runs'}\n"  # a list has no keys
    path.write_text(top + text, encoding="utf-8")
    return path


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


#: (the study file's text, what its one-line error must say) for each finding of item 5
BAD = {
    "yaml boolean": ("repeat_guard: off\n" + MATRIX,
                     ["repeat_guard: must be one of 'off', 'note', 'refuse' or 'suggest', got false",
                      'quote the word, e.g. repeat_guard: "off"']),
    "unknown key": ("turn_bond: 5\n" + MATRIX, ["unknown key 'turn_bond' (did you mean 'turn_bound'?)"]),
    "unknown block key": ("matrix:\n" + BLOCK.replace("}", ", ledgr: true}"),
                          ["matrix block 1: unknown key 'ledgr' (did you mean 'ledger'?)"]),
    "negative turn bound": ("turn_bound: -3\n" + MATRIX, ["turn_bound: must be more than 0, got -3"]),
    "zero turn bound": ("turn_bound: 0\n" + MATRIX, ["turn_bound: must be more than 0, got 0"]),
    "wordy turn bound": ("turn_bound: many\n" + MATRIX, ["turn_bound: must be a whole number, got 'many'"]),
    "empty axis": ("matrix:\n" + BLOCK.replace("[baseline-tracer]", "[]"),
                   ["matrix block 1, models: must not be empty"]),
    "negative repeats": ("repeats: -2\n" + MATRIX, ["repeats: must be more than 0, got -2"]),
    "yaml syntax": ("matrix: [a, b\n", ["not valid YAML", "line 3"]),
    "top-level list": ("- a\n- b\n", ["a study file is a mapping of keys", "not a list"]),
    "matrix a number": ("matrix: 5\n", ["matrix: must be a list, got 5"]),
    "no matrix": ("name: x\n", ["matrix: is missing"]),
    "yes for an enum": ("thinking_rule: yes\n" + MATRIX, ["thinking_rule: must be one of 'prose' or 'free', got true",
                                                           "quote the word"]),
    "judge key": ("judge: {judgez: [a]}\n" + MATRIX, ["judge: unknown key 'judgez' (did you mean 'judges'?)"]),
    "unknown condition": ("matrix:\n" + BLOCK.replace("[natural]", "[calm]"),
                          ["matrix block 1: unknown condition 'calm'"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("plan", [False, True], ids=["launch", "plan"])
def test_a_bad_study_file_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, case, plan):
    text, said = BAD[case]
    path = _write(tmp_path, text)
    code, out = _run(capsys, "launch", str(path), *(["--plan"] if plan else ["--yes"]))
    assert code == 2 and "Traceback" not in out
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), out
    assert all(s in out for s in said), out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml"]  # no output folder


def test_every_command_that_loads_a_study_says_it_in_one_line(tmp_path, capsys):
    path = _write(tmp_path, "turn_bond: 5\n" + MATRIX)
    for argv in (["study", str(path), "--stages", "launch"], ["stage", "summary", str(path)]):
        code, out = _run(capsys, *argv)
        assert code == 2 and out.strip().splitlines() == [f"error: {path}: unknown key 'turn_bond' "
                                                          "(did you mean 'turn_bound'?)"], (argv, out)
    assert not (tmp_path / "runs").exists()


def test_overrides_are_checked_like_the_file(tmp_path):
    path = _write(tmp_path, MATRIX)
    assert load_study(path, {"concurrency": 2}).concurrency == 2
    with pytest.raises(StudyError, match="concurrency: must be more than 0, got 0"):
        load_study(path, {"concurrency": 0})
    with pytest.raises(StudyError, match="cache_mode: must be one of 'use', 'replay', 'refresh' or 'off'"):
        load_study(path, {"cache_mode": "sometimes"})


def test_what_the_schema_accepts_still_loads_as_before(tmp_path):
    path = _write(tmp_path, 'repeat_guard: "off"\nclose_turn: true\nredraw_step: 1\nmodels: baseline-tracer\n'
                  "matrix:\n  - {worlds: flask, tasks: all, conditions: [natural], close_turn: false,"
                  " redraw_repeats: 0, repeats: 2}\n")
    study = load_study(path)
    assert len(study.specs) == 4 * 2 and {s.model for s in study.specs} == {"baseline-tracer"}
    assert dict(study.specs[0].settings) == {"repeat_guard": "off", "close_turn": False,
                                             "redraw_step": 1, "redraw_repeats": 0}


def test_every_run_setting_has_a_field_in_the_schema():
    assert set(RunSettings.model_fields) == {*RUN_SETTINGS, "scaffold"}  # a preset of them


def test_a_scaffold_preset_is_the_settings_it_names_and_a_setting_given_wins(tmp_path):
    """``scaffold: small-model`` gives the runs exactly the settings it stands for (so their
    ids, headers and cached replies are those of a study that spells them out); a key set in
    the block or at the top level wins; ``paper`` and no preset give none; an unknown preset is
    refused by name."""
    from adakit.apparatus.scaffolds import SCAFFOLDS

    block = {"models": ["baseline-tracer"], "worlds": ["flask"], "tasks": ["feature_tracing"],
             "conditions": ["natural"]}
    study = tmp_path / "s.yaml"

    def settings(doc):
        study.write_text(yaml.safe_dump(doc))
        return [dict(s.settings) for s in load_study(study).specs]

    small = SCAFFOLDS["small-model"]
    assert settings({"scaffold": "small-model", "matrix": [block]}) == [small]
    assert settings({**small, "matrix": [block]}) == [small]  # spelled out: the same
    assert settings({"scaffold": "small-model", "checkpoint_turns": 6,
                     "matrix": [block]}) == [{**small, "checkpoint_turns": 6}]
    assert settings({"checkpoint_turns": 6, "matrix": [{**block, "scaffold": "small-model"}]}) \
        == [{**small, "checkpoint_turns": 6}]
    assert settings({"scaffold": "small-model", "matrix": [{**block, "scaffold": "paper"}]}) == [{}]
    assert settings({"matrix": [block]}) == [{}]
    with pytest.raises(StudyError, match="scaffold"):
        settings({"scaffold": "tiny", "matrix": [block]})


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_study_loads_and_fits_the_published_schema(path):
    study = load_study(path)
    assert study.specs or study.raw.get("forks")  # a fork study has forks in place of runs
    schema = json.loads(STUDY_SCHEMA_DOC.read_text(encoding="utf-8"))
    jsonschema.validators.validator_for(schema)(schema).validate(yaml.safe_load(path.read_text()))


def test_the_published_schema_is_the_generated_one_and_refuses_what_loading_refuses(capsys):
    schema = json.loads(STUDY_SCHEMA_DOC.read_text(encoding="utf-8"))
    assert schema == json.loads(json.dumps(study_json_schema())), "run `adakit study-schema --write`"
    code, out = _run(capsys, "study-schema")
    assert code == 0 and json.loads(out) == schema
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    validator = cls(schema)
    block = {"models": ["m"], "worlds": ["w"], "tasks": ["all"], "conditions": ["natural"]}
    validator.validate({"repeat_guard": "off", "matrix": [block]})
    for bad in ({"repeat_guard": False, "matrix": [block]}, {"turn_bond": 5, "matrix": [block]},
                {"matrix": [{**block, "models": []}]}, {"turn_bound": 0, "matrix": [block]},
                {"matrix": 5}, {"matrix": []}, {"matrix": [{**block, "repeats": True}]}):
        assert not validator.is_valid(bad), bad


def test_the_study_file_doc_names_every_key():
    from adakit.study.schema import JudgeBlock, StudyFile

    doc = (ROOT / "docs" / "study-files.md").read_text(encoding="utf-8")
    missing = [k for m in (StudyFile, JudgeBlock) for k in m.model_fields if f"`{k}`" not in doc]
    assert not missing, f"docs/study-files.md does not describe {missing}"


def test_a_study_of_forks_alone_needs_no_matrix(tmp_path):
    """A 'forks' list stands in for the matrix (docs/forks.md); an empty one does not."""
    path = _write(tmp_path, "forks:\n  - {from: data/runs/x, at: 2, changes: [placebo]}\n")
    study = load_study(path)
    assert study.specs == [] and study.raw["forks"][0]["at"] == 2
    with pytest.raises(StudyError, match="forks: must not be empty"):
        load_study(_write(tmp_path, "forks: []\n"))


def test_launch_notes_a_local_model_run_without_the_small_model_scaffold(tmp_path):
    """A local model's runs with none of the preset's aids get a one-line note naming the
    preset; under the preset, or with one aid set, or for a baseline, there is none."""
    from adakit.study.launch import scaffold_note

    block = {"models": ["qwen2.5-coder-1.5b", "baseline-tracer"], "worlds": ["flask"],
             "tasks": ["feature_tracing"], "conditions": ["natural"]}
    study = tmp_path / "s.yaml"

    def note(doc):
        study.write_text(yaml.safe_dump(doc))
        return scaffold_note(load_study(study))

    said = note({"matrix": [block]})
    assert said is not None and "qwen2.5-coder-1.5b" in said and "baseline" not in said
    assert "scaffold: small-model" in said and "\n" not in said
    assert note({"matrix": [block], "close_chars": 1200, "thinking_rule": "prose"}) is not None
    assert note({"scaffold": "small-model", "matrix": [block]}) is None
    assert note({"close_turn": True, "matrix": [block]}) is None  # an aid chosen by hand
    assert note({"matrix": [{**block, "models": ["baseline-tracer"]}]}) is None

