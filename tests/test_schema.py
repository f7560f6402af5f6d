"""The published schema (docs/trajectory.schema.json) is the contract: every record adakit
writes validates against it with the standard ``jsonschema`` library."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from adakit import config
from adakit.record import SCHEMA_DOC, iter_run_files, json_schema, read_run
from adakit.study.launch import launch
from adakit.study.spec import load_study, restrict
from adakit.synthetic import write_synthetic_corpus

ROOT = Path(__file__).resolve().parents[1]
CI_CORPUS = config.RUNS / "ci"  # written by `make study PROFILE=ci`, which `make test` runs first


def published_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA_DOC.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _refs(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def validate_corpus(folder: Path) -> int:
    """Validate every record of every run file under ``folder``; returns the record count."""
    validator = published_validator()
    n = 0
    for path in iter_run_files(folder):
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                errors = sorted(validator.iter_errors(json.loads(line)), key=str)
                assert not errors, f"{path.name}:{i}: {errors[0].message}"
                n += 1
    return n


def test_every_ref_of_the_published_schema_resolves():
    # the 1.0 file nested a $defs inside each oneOf branch while its $refs pointed at the root:
    # jsonschema stopped with PointerToNowhere: '/$defs/ConditionInfo' on the first record
    schema = json.loads(SCHEMA_DOC.read_text(encoding="utf-8"))
    refs = _refs(schema)
    assert refs and all(r.startswith("#/$defs/") for r in refs)
    assert {r.removeprefix("#/$defs/") for r in refs} <= set(schema["$defs"])
    assert all("$defs" not in branch for branch in schema["oneOf"])
    assert schema == json.loads(json.dumps(json_schema()))


def test_schema_rejects_what_the_loader_rejects():
    v = published_validator()
    header = {"kind": "header", "run_id": "r", "model": {"name": "m"}, "world": {"name": "w"},
              "task": {"family": "t"}, "condition": {"name": "c"}, "turn_bound": 3}
    v.validate(header)
    with pytest.raises(jsonschema.ValidationError):
        v.validate({**header, "surprise": 1})  # extra fields are forbidden
    with pytest.raises(jsonschema.ValidationError):
        v.validate({"kind": "end", "reason": "bored"})  # not a termination reason
    v.validate({"kind": "end", "reason": "submit", "exit_status": "submitted", "submission": "diff"})


@pytest.mark.slow
def test_launched_ci_baselines_validate(tmp_path):
    """The CI study's baseline runs on flask, launched here, validate record by record."""
    # no hint model: a unit test never starts the local model server (HNT calls then fail,
    # recorded as tool errors, which must validate too)
    study = load_study(ROOT / "studies" / "ci.yaml",
                       overrides={"output": str(tmp_path / "ci"), "hint_model": None})
    baselines = sorted({s.model for s in study.specs if s.model.startswith("baseline-")})
    launch(restrict(study, models=baselines), progress=False)
    runs = list(iter_run_files(tmp_path / "ci"))
    # 3 policies x 2 tasks x 2 conditions, and the repeat block's second seed of one cell
    assert len(runs) == 13 and all(read_run(p).finished for p in runs)
    assert validate_corpus(tmp_path / "ci") > 13 * 3


def test_synthetic_corpus_with_errors_validates(tmp_path):
    write_synthetic_corpus(tmp_path / "syn", n_runs=12, seed=3)
    assert validate_corpus(tmp_path / "syn") > 12


@pytest.mark.skipif(not CI_CORPUS.is_dir(), reason="no CI corpus yet: `make study PROFILE=ci`")
def test_ci_study_corpus_validates():
    assert validate_corpus(CI_CORPUS) > 0
