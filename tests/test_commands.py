"""A user's mistake at the command line gets one line, never a traceback."""

from __future__ import annotations

import pytest
import yaml

from adakit.cli import main


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_a_mistyped_world_is_one_line(capsys):
    code, text = _run(capsys, "tool", "flsk", "get_structural_overview", "--file_path", "x")
    assert code == 2 and "Traceback" not in text
    assert text.strip().splitlines() == [text.strip()] and "unknown world 'flsk'" in text


@pytest.mark.parametrize("given", ["studies/nosuch.yaml", "nosuch", "studies/nosuch", "nosuch.yaml"])
def test_a_missing_study_is_named_as_given_with_the_studies_that_exist(capsys, given):
    code, text = _run(capsys, "launch", given, "--plan")
    assert code == 2 and "studies/studies" not in text and ".yaml.yaml" not in text
    assert f"no study file {given}" in text and "quick" in text


def test_the_plan_of_a_finished_study_says_nothing_to_run(capsys, tmp_path, flask_world):
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump({"name": "done", "output": str(tmp_path / "runs"),
                                     "turn_bound": 3, "matrix": [
        {"models": ["baseline-tracer"], "worlds": ["flask"], "tasks": ["feature_tracing"],
         "conditions": ["natural"]}]}))
    code, text = _run(capsys, "launch", str(study), "--plan")
    assert code == 0 and "estimate" in text and "nothing to run" not in text
    assert main(["launch", str(study), "--yes"]) == 0
    capsys.readouterr()
    code, text = _run(capsys, "launch", str(study), "--plan")
    assert code == 0 and "nothing to run" in text and "$0.0000" not in text
