"""Fixtures shared by adakit's test modules (add yours under a section header)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from host_paths import host_paths_in

from adakit.apparatus.world import World

# Under pytest-xdist (``make test`` runs two workers) a local llama.cpp server shares the cores
# with the other worker's tests; with two threads it stalls at every barrier, so it gets one.
if os.environ.get("PYTEST_XDIST_WORKER") and not os.environ.get("ADAKIT_LLAMA_THREADS"):
    os.environ["ADAKIT_LLAMA_THREADS"] = "1"

# ------------------------------------------------------------------------- code fixtures

CODE_FIXTURES = Path(__file__).parent / "fixtures" / "code"


@pytest.fixture
def world(tmp_path: Path) -> World:
    """A writable copy of the hand-written Python/TypeScript/Rust fixtures in
    tests/fixtures/code (modules that need another world define their own ``world``)."""
    root = tmp_path / "code"
    shutil.copytree(CODE_FIXTURES, root)
    return World(root, name="fixture", version="0")


# ------------------------------------------------------------------------- repository worlds


def _real_world(name: str):
    """A manifest world from the shared cache (fetched once if needed); skip if unreachable."""
    from adakit.apparatus.world import WorldUnavailable, open_world

    try:
        return open_world(name, progress=False)
    except WorldUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def flask_world():
    """The flask world of paper Table 3 (adakit/apparatus/worlds.yaml), as a read-only World."""
    return _real_world("flask")


@pytest.fixture(scope="session")
def requests_world():
    """The requests world of paper Table 3 (adakit/apparatus/worlds.yaml), as a read-only World."""
    return _real_world("requests")


@pytest.fixture(scope="session")
def sklearn_world():
    """The scikit-learn world of paper Table 3 (Python and Cython), as a read-only World."""
    return _real_world("scikit-learn")


@pytest.fixture(scope="session")
def ci_baseline_corpus(tmp_path_factory) -> Path:
    """The CI study's scripted-baseline runs on flask (13 runs, no model), launched once per
    session into a temporary folder; skipped when the flask world cannot be had."""
    from adakit.study.launch import launch
    from adakit.study.spec import load_study, restrict

    _real_world("flask")
    out = tmp_path_factory.mktemp("ci-baselines") / "runs"
    root = Path(__file__).resolve().parents[1]
    study = load_study(root / "studies" / "ci.yaml",
                       overrides={"output": str(out), "hint_model": None, "judge": None})
    baselines = sorted({s.model for s in study.specs if s.model.startswith("baseline-")})
    launch(restrict(study, models=baselines), progress=False)
    return out


def pytest_collection_modifyitems(config, items):
    """Tests marked ``pure_python`` patch the importers' internals (which the compiled modules
    do not let a test patch) or hand their records values of other types than declared (which
    the compiled records refuse when built, before the code under test runs): where the
    compiled modules run, the tests are deselected here and ``tests/test_compiled.py`` runs
    them in a child process with ``ADAKIT_COMPILED=0``."""
    from adakit.importers import compiled

    if not compiled.state().compiled:
        return
    kept = [it for it in items if it.get_closest_marker("pure_python") is None]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[it for it in items if it not in kept])
        items[:] = kept


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under ``ADAKIT_STRICT=1`` (set by ``make test``) a skipped test fails: CI must run them all."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("ADAKIT_STRICT") == "1" and call.when in ("setup", "call"):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = f"skipped under ADAKIT_STRICT=1 (make test runs every test): {reason}"


# ------------------------------------------------------------------------- host paths


@pytest.fixture(autouse=True)
def _no_host_paths_shown(monkeypatch: pytest.MonkeyPatch):
    """Every observation the test suite produces is grepped for the host's temporary and home
    folders: a tool's result (Toolbox.execute) and every turn and end record a run writes.
    What the agent wrote itself (its call's parameters, its reply) is taken out first. A hit
    fails the test that produced it."""
    from adakit import record
    from adakit.apparatus import tools

    leaks: list[str] = []
    execute, write = tools.Toolbox.execute, record.RunWriter.write

    def checked_execute(self, tool_name, params=None):
        result = execute(self, tool_name, params)
        given = [str(v) for v in (params or {}).values()]
        if hits := host_paths_in(result.text, given):
            leaks.append(f"{tool_name} observation names {hits}: {result.text[:300]!r}")
        return result

    def checked_write(self, rec):
        if rec.kind in ("turn", "end"):
            data = rec.model_dump(exclude={"raw_text", "thinking", "call"})
            given = [str(v) for v in rec.call.params.values()] if getattr(rec, "call", None) else []
            text = str(data)
            if hits := host_paths_in(text, given):
                leaks.append(f"{rec.kind} record names {hits}: {text[:300]!r}")
        return write(self, rec)

    monkeypatch.setattr(tools.Toolbox, "execute", checked_execute)
    monkeypatch.setattr(record.RunWriter, "write", checked_write)
    yield
    if leaks:
        pytest.fail("host paths shown to the agent:\n" + "\n".join(leaks), pytrace=False)
