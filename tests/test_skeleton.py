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


# ------------------------------------------------------------------------- notebook git filter


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                          check=True).stdout


def _saved_by_jupyterlab(path: Path) -> None:
    """What a JupyterLab session leaves in a notebook: outputs, counts, widget state."""
    nb = json.loads(path.read_text())
    for n, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        cell["execution_count"] = n + 1
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": [f"out {n}\n"]}]
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    path.write_text(json.dumps(nb, indent=1) + "\n")


def test_make_setup_installs_the_notebook_strip_filter(tmp_path):
    """`make setup` runs `git-filter`, which makes nbstripout the clone's clean filter: a
    notebook saved with outputs shows no change in `git status` and is committed stripped."""
    import sys

    repo = tmp_path / "clone"
    (repo / "notebooks").mkdir(parents=True)
    for name in ("Makefile", ".gitattributes"):
        (repo / name).write_text((ROOT / name).read_text())
    nb_path = repo / "notebooks" / "30_explorer.ipynb"
    nb_path.write_text((ROOT / "notebooks" / "30_explorer.ipynb").read_text())
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "clean")

    # setup's recipe includes the filter (its install step is not redone here)
    plan = subprocess.run(["make", "-n", "-o", ".venv/.adakit-installed", "setup"], cwd=repo,
                          capture_output=True, text=True, check=True).stdout
    assert "git config filter.nbstripout.clean" in plan

    # without the filter a saved session is a change
    _saved_by_jupyterlab(nb_path)
    assert _git(repo, "status", "--porcelain").strip() == "M notebooks/30_explorer.ipynb"
    assert '"outputs": [' in _git(repo, "diff") and "out 0" in _git(repo, "diff")

    out = subprocess.run(["make", "-s", "git-filter", f"PY={sys.executable}"], cwd=repo,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    clean = _git(repo, "config", "filter.nbstripout.clean").strip()
    assert clean == f'"{sys.executable}" -m nbstripout --keep-id'
    assert _git(repo, "config", "filter.nbstripout.required").strip() == "true"
    assert _git(repo, "check-attr", "filter", "--", "notebooks/30_explorer.ipynb").strip() \
        .endswith("filter: nbstripout")

    # with it, the same saved session shows no diff, and adding it stages nothing new: the
    # stripped notebook is the committed one (git status may list the file as touched until
    # the add refreshes the index; nbstripout's documented behaviour)
    assert _git(repo, "diff").strip() == ""
    _git(repo, "add", "notebooks/30_explorer.ipynb")
    assert _git(repo, "status", "--porcelain").strip() == ""
    assert _git(repo, "diff", "--cached").strip() == ""
    staged = json.loads(_git(repo, "show", ":notebooks/30_explorer.ipynb"))
    code = [c for c in staged["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    assert "widgets" not in staged["metadata"]
    original = json.loads((ROOT / "notebooks" / "30_explorer.ipynb").read_text())
    assert [c.get("id") for c in staged["cells"]] == [c.get("id") for c in original["cells"]]


def test_make_lab_allows_root_only_as_root():
    import os

    plan = subprocess.run(["make", "-n", "-o", ".venv/.adakit-installed", "lab"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    line = next(x for x in plan.splitlines() if "jupyter lab" in x)
    assert ("--allow-root" in line) == (os.geteuid() == 0), line
    assert line.rstrip().endswith("notebooks")
