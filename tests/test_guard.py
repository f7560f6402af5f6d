"""The parameter guard every notebook runs after its parameters cell (adakit.workbench.guard):
unknown names fail before the notebook's work runs, parameters that differ from the study's
send figures and tables to an adhoc folder of their own (and say so), a missing corpus fails
in one line naming the corpora on disk, and the pipeline passes each notebook only the names
it declares."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from adakit import config
from adakit.study import pipeline
from adakit.workbench import guard

NAME = "99_mini"
PARAMETERS = ('corpus = ""  # a corpus folder ("": none)\n'
              "alpha = 0.05  # a threshold\n"
              'figure_prefix = "99_mini"  # folder under figures/ and data/processed/')
WORK = ("import matplotlib.pyplot as plt\n"
        "from adakit import figures\n"
        "(outputs.tables / 'ran.txt').write_text(str(alpha))\n"
        "fig, ax = plt.subplots()\n"
        "saved = figures.save_figure(fig, outputs.figure('fig'), formats=('png',))\n"
        "print('saved', saved[0])")


def _mini(home: Path) -> Path:
    """A small numbered notebook under ``home``: imports, parameters, the guard, one cell
    of work writing a table and a figure."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    params = nbformat.v4.new_code_cell(PARAMETERS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_code_cell("import os"), params,
                nbformat.v4.new_code_cell("from adakit.workbench import guard\n\n"
                                          f"outputs = guard.check(globals(), {NAME!r})"),
                nbformat.v4.new_code_cell(WORK)]
    path = home / "notebooks" / f"{NAME}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("ADAKIT_HOME", str(home))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.delenv("ADAKIT_FIGURES", raising=False)
    monkeypatch.delenv(config.PROFILE_ENV, raising=False)
    _mini(home)
    return home


def _run(home: Path, out: Path, **parameters):
    pm = pytest.importorskip("papermill")
    return pm.execute_notebook(str(home / "notebooks" / f"{NAME}.ipynb"), str(out),
                               parameters=parameters, cwd=str(home), progress_bar=False,
                               kernel_name="python3")


def _stdout(nb_path: Path) -> str:
    cells = json.loads(nb_path.read_text())["cells"]
    return "".join("".join(o.get("text", "")) for c in cells for o in c.get("outputs", [])
                   if o.get("output_type") == "stream")


@pytest.mark.timeout(120)
def test_an_unknown_parameter_fails_before_the_work_runs(home: Path, tmp_path: Path):
    pm = pytest.importorskip("papermill")
    out = tmp_path / "out.ipynb"
    with pytest.raises(pm.PapermillExecutionError) as err:
        _run(home, out, alpah=0.01)
    assert err.value.ename == "ParameterError"
    assert "no parameter alpah (did you mean alpha?)" in err.value.evalue
    assert "corpus, alpha, figure_prefix" in err.value.evalue
    assert err.value.traceback == [f"ParameterError: {err.value.evalue}"]  # one line
    cells = json.loads(out.read_text())["cells"]
    work = [c for c in cells if "save_figure" in "".join(c["source"])]
    assert work and work[0]["execution_count"] is None  # the work cell never ran
    assert not (home / "data" / "processed").exists()
    assert not (home / "figures").exists()


@pytest.mark.timeout(120)
def test_parameters_that_differ_from_the_study_write_under_adhoc_and_say_so(home: Path,
                                                                            tmp_path: Path):
    out = tmp_path / "out.ipynb"
    _run(home, out, alpha=0.01)
    text = _stdout(out)
    folders = list((home / "figures" / config.ADHOC).glob(f"{NAME}-*"))
    assert len(folders) == 1
    folder = folders[0]
    digest = folder.name.removeprefix(f"{NAME}-")
    assert len(digest) == 8
    assert (folder / "fig.png").exists()
    tables = home / "data" / "processed" / config.ADHOC / folder.name
    assert (tables / "ran.txt").read_text() == "0.01"
    assert not (home / "figures" / NAME).exists()  # the study's folder is left alone
    assert "parameters differ from the quick study's (alpha)" in text
    assert f"figures -> figures/adhoc/{folder.name}/" in text
    assert f"tables -> data/processed/adhoc/{folder.name}/" in text
    record = json.loads((folder / "parameters.json").read_text())
    assert record["differs"] == {"alpha": {"study": 0.05, "here": 0.01}}
    assert record["parameters"]["alpha"] == 0.01
    # the same parameters again: the same folder
    _run(home, tmp_path / "again.ipynb", alpha=0.01)
    assert [p.name for p in (home / "figures" / config.ADHOC).iterdir()] == [folder.name]


@pytest.mark.timeout(120)
def test_the_study_parameters_write_into_the_study_folders(home: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch):
    # the profile's parameter file sets alpha; passing that value is the study's run
    studies = home / "studies"
    studies.mkdir()
    (studies / "demo.yaml").write_text("name: demo\n")
    (studies / "demo.params.yaml").write_text("alpha: 0.2\nmodel: someone  # not ours\n")
    monkeypatch.setenv(config.PROFILE_ENV, "demo")
    out = tmp_path / "out.ipynb"
    _run(home, out, alpha=0.2)
    assert (home / "figures" / NAME / "fig.png").exists()
    assert not (home / "figures" / config.ADHOC).exists()
    assert "the demo study's parameters; the study's own folders" in _stdout(out)


@pytest.mark.timeout(120)
def test_a_chosen_figure_prefix_is_where_the_outputs_go(home: Path, tmp_path: Path):
    out = tmp_path / "out.ipynb"
    _run(home, out, alpha=0.3, figure_prefix="mine")
    assert (home / "figures" / "mine" / "fig.png").exists()
    assert (home / "data" / "processed" / "mine" / "ran.txt").exists()
    assert not (home / "figures" / config.ADHOC).exists()


@pytest.mark.timeout(120)
def test_the_pipeline_passes_only_the_declared_names(home: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("papermill")
    params = tmp_path / "demo.params.yaml"
    params.write_text("alpha: 0.05\nstudy: studies/demo.yaml\ninteractive: false\n")
    src = home / "notebooks" / f"{NAME}.ipynb"
    dest = tmp_path / "study" / f"{NAME}.ipynb"
    monkeypatch.setattr(config, "NOTEBOOKS", home / "notebooks")
    pipeline.execute_notebook(src, dest, params)
    injected = [c for c in json.loads(dest.read_text())["cells"]
                if "injected-parameters" in c["metadata"].get("tags", [])]
    assert "".join(injected[0]["source"]) == "# Parameters\nalpha = 0.05\n"
    assert "the demo study's parameters" in _stdout(dest)


def test_a_missing_corpus_fails_in_one_line_naming_the_corpora(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch):
    runs = tmp_path / "data" / "runs"
    for folder in ("quick", "imported/examples"):
        (runs / folder).mkdir(parents=True)
        (runs / folder / "a.jsonl").write_text("{}\n")
    (runs / "empty").mkdir()
    (tmp_path / "data" / "reference" / "v9" / "runs").mkdir(parents=True)
    for name, value in (("ROOT", tmp_path), ("DATA", tmp_path / "data"), ("RUNS", runs)):
        monkeypatch.setattr(config, name, value)
    assert config.known_corpora() == ["data/runs/imported/examples", "data/runs/quick",
                                      "data/reference/v9/runs"]
    with pytest.raises(guard.ParameterError) as err:
        guard.check_corpora({"corpus": ["data/runs/quick", "data/runs/nope"]}, ["corpus"])
    message = str(err.value)
    assert message == ("corpus: no corpus at data/runs/nope; corpora here: "
                       "data/runs/imported/examples, data/runs/quick, data/reference/v9/runs")
    assert "\n" not in message
    assert err.value._render_traceback_() == [f"ParameterError: {message}"]
    guard.check_corpora({"corpus": "", "other": "data/runs/nope"}, ["corpus"])  # "" is none


def test_declared_and_injected_parameters_are_read_as_literals(tmp_path: Path):
    path = _mini(tmp_path)
    assert pipeline.declared_parameters(path) == {"corpus": "", "alpha": 0.05,
                                                  "figure_prefix": "99_mini"}
    history = ["", "import os", PARAMETERS, "# Parameters\nalpha = 0.5\ncorpus = ['a', 'b']\n",
               "outputs = guard.check(globals(), '99_mini')"]
    assert guard.injected_parameters(history) == {"alpha": 0.5, "corpus": ["a", "b"]}
    assert guard.injected_parameters(["", "x = 1"]) == {}
    assert guard.digest({"a": (1, 2)}) == guard.digest({"a": [1, 2]})
    assert guard.digest({"a": 1}) != guard.digest({"a": 2})


def test_every_numbered_notebook_runs_the_guard_right_after_its_parameters():
    for path in pipeline.notebooks():
        cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        at = next(i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", []))
        guard_cell = "".join(cells[at + 1]["source"])
        assert f'guard.check(globals(), "{path.stem}"' in guard_cell, path.name
        later = "".join("".join(c["source"]) for c in cells[at + 2:])
        assert "config.PROCESSED / figure_prefix" not in later, path.name
        assert "{figure_prefix}/" not in later, path.name
