"""Project skeleton: layout, environment.yml in sync with pyproject, make help, notebook hygiene."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_top_level_layout():
    for name in ["notebooks", "adakit", "data", "figures", "environment.yml", "Makefile", "tests",
                 "pyproject.toml", "README.md", ".ci/run", "benchmarks", "studies"]:
        assert (ROOT / name).exists(), name


def test_environment_yml_mirrors_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    python = next(d for d in deps if isinstance(d, str) and d.startswith("python"))
    assert python.removeprefix("python") == project["requires-python"]
    pip = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    editable = next(p for p in pip if p.startswith("-e ."))
    extras = set(re.search(r"\[(.*)\]", editable).group(1).split(","))
    assert extras == set(project["optional-dependencies"]), "environment.yml must install every extra"


def test_environment_yml_pins_match_pyproject():
    """A package environment.yml names explicitly carries pyproject's specifier, verbatim."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = [*project["dependencies"], *(d for extra in project["optional-dependencies"].values()
                                         for d in extra)]
    by_name = {re.match(r"[A-Za-z0-9_.-]+", s).group(0).lower(): s for s in specs}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    named = [d for d in env["dependencies"] if isinstance(d, str) and not d.startswith(("python", "pip"))]
    assert "jsonschema>=4.18,<5" in named  # the schema tests' validator
    assert "hypothesis>=6.100,<7" in named  # the property tests (tests/test_properties.py)
    for dep in named:
        name = re.match(r"[A-Za-z0-9_.-]+", dep).group(0).lower()
        assert by_name.get(name) == dep, f"environment.yml {dep!r} differs from pyproject ({by_name.get(name)!r})"


def test_make_help_lists_the_targets():
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for target in ["setup", "worlds", "study", "test", "bench", "clean", "local-model", "lab"]:
        assert re.search(rf"^\s+{target}\s+\S", out, re.M), target


def test_readme_and_ci_run_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert "make study" in readme and "make test" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci


def _code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebooks_are_stripped_and_parameterized(path):
    nb = json.loads(path.read_text())
    for cell in _code_cells(nb):
        assert cell.get("outputs") == [], f"{path.name}: outputs must be stripped"
        assert cell.get("execution_count") is None, f"{path.name}: execution counts must be cleared"
    code = _code_cells(nb)
    assert len(code) >= 2
    assert "parameters" in code[1].get("metadata", {}).get("tags", []), "2nd code cell is `parameters`"
    source = "".join(code[1]["source"])
    tree = ast.parse(source)
    for node in tree.body:  # literals only
        assert isinstance(node, (ast.Assign, ast.AnnAssign)), f"{path.name}: only assignments"
        ast.literal_eval(node.value)
    for line in source.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            assert "  # " in line, f"{path.name}: parameter without a comment: {line}"
            comment = line.split("  # ", 1)[1]
            assert " = " not in comment, f"{path.name}: papermill misreads ' = ' in a comment: {line}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_papermill_documents_every_parameter(path):
    import papermill as pm

    params = pm.inspect_notebook(str(path))
    assert params, f"{path.name}: no parameters found"
    for name, info in params.items():
        assert info["help"], f"{path.name}: parameter {name} has no help text"
