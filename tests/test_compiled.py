"""The importers compiled with mypyc (adakit/importers/compiled.py): loaded only from a build of
exactly these sources, off with ADAKIT_COMPILED=0, and, where a build exists (make test builds
one), writing byte for byte the run files the pure-Python modules write, on the fixtures, on
generated sessions and on mutated ones."""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from adakit.importers import compiled

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
PROBE = ROOT / "tests" / "compiled_probe.py"


def _child(code_or_args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, compiled.SWITCH: "1", **env}
    return subprocess.run([sys.executable, *code_or_args], capture_output=True, text=True,
                          env=full, cwd=ROOT, timeout=600)


def _probe(out: Path, sources: list[Path], **env: str) -> dict:
    proc = _child([str(PROBE), str(out), *map(str, sources)], **env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


_STATE_CODE = ("import adakit.importers.base as b, adakit.importers.compiled as c; "
               "print(b.__file__); print(c.state().line())")


def _state_in_child(**env: str) -> tuple[str, str]:
    """(where adakit.importers.base was loaded from, the loader's state line) in a child."""
    proc = _child(["-c", _STATE_CODE], **env)
    assert proc.returncode == 0, proc.stderr[-1500:]
    where, line = proc.stdout.strip().splitlines()
    return where, line


def _built() -> bool:
    return compiled._find()[0] is not None


needs_build = pytest.mark.skipif(not _built(), reason="no compiled build of these sources "
                                 "(make test and make setup build one: make compiled)")


def test_dependencies_follow_the_imports_of_the_compiled_modules():
    deps = compiled.dependencies()
    assert set(compiled.MODULES) <= set(deps)
    assert {"adakit", "adakit.importers", "adakit.record", "adakit.text"} <= set(deps)
    assert "adakit.importers.compiled" not in deps  # the loader is not part of the build
    assert "adakit.importers.batch" not in deps  # nothing compiled imports it


def test_switched_off_the_importers_are_pure_python():
    where, line = _state_in_child(ADAKIT_COMPILED="0")
    assert where.endswith("adakit/importers/base.py")
    assert line == "importers: pure Python: ADAKIT_COMPILED=0"


def _fake_build(tmp_path: Path, **changes: object) -> Path:
    """A build folder of these sources' name whose manifest names files that are not there."""
    folder = tmp_path / f"{compiled.key()}-0123456789abcdef"
    folder.mkdir()
    files = {m: f"{m.rsplit('.', 1)[-1]}.so" for m in compiled.MODULES}
    manifest = {"files": files, "sizes": {f: 1 for f in files.values()},
                "sources": compiled._sources(compiled.dependencies()), **changes}
    (folder / compiled.MANIFEST).write_text(json.dumps(manifest))
    return folder


def test_a_build_from_other_sources_is_not_loaded(tmp_path):
    """A manifest whose record of adakit/record.py differs from the file here: the build is
    refused, naming the file, and the modules run as pure Python (no stale compiled code)."""
    sources = compiled._sources(compiled.dependencies())
    sources["adakit.record"] = "0" * 64
    folder = _fake_build(tmp_path, sources=sources)
    where, line = _state_in_child(ADAKIT_COMPILED_DIR=str(tmp_path))
    assert where.endswith("adakit/importers/base.py")
    assert line == ("importers: pure Python: built from other sources: adakit.record changed "
                    "since")
    (folder / compiled.MANIFEST).unlink()
    assert _state_in_child(ADAKIT_COMPILED_DIR=str(tmp_path))[1].startswith(
        "importers: pure Python: not built for these sources")


def test_an_incomplete_build_is_not_loaded(tmp_path):
    _fake_build(tmp_path)
    code = "import adakit.importers.compiled as c; print(c.state().line())"
    proc = _child(["-c", code], ADAKIT_COMPILED_DIR=str(tmp_path))
    assert "pure Python: the build is incomplete: shell.so is missing" in proc.stdout


@pytest.mark.parametrize("manifest", ["{}", "[]", '{"files": {"x": 3}, "sources": {}}', "{"])
def test_a_malformed_manifest_leaves_the_importers_pure_python(tmp_path, manifest):
    folder = _fake_build(tmp_path)
    (folder / compiled.MANIFEST).write_text(manifest)
    where, line = _state_in_child(ADAKIT_COMPILED_DIR=str(tmp_path))
    assert where.endswith("adakit/importers/base.py")
    assert line.startswith("importers: pure Python: unusable build manifest in ")


@needs_build
def test_a_damaged_build_is_not_loaded(tmp_path):
    """A copy of the real build with one extension cut short (a copy that stopped midway):
    refused by its recorded size, so the process runs pure Python instead of crashing."""
    import shutil

    _, _, real = compiled._find()
    copy_of = tmp_path / real.name
    shutil.copytree(real, copy_of)
    base = next(copy_of.glob("base.*.so"))
    base.write_bytes(base.read_bytes()[:4096])
    where, line = _state_in_child(ADAKIT_COMPILED_DIR=str(tmp_path))
    assert where.endswith("adakit/importers/base.py")
    assert f"pure Python: the build is damaged: {base.name} has 4096 bytes" in line


@needs_build
def test_a_build_of_these_sources_is_what_runs():
    code = ("import adakit.importers.compiled as c, adakit.importers.claude_code, "
            "adakit.importers.base as b; print(b.__file__); print(c.compiled_now()); "
            "print(c.state().line())")
    proc = _child(["-c", code])
    where, now, line = proc.stdout.strip().splitlines()
    assert where.endswith(".so") and now == "True", proc.stdout
    assert line.startswith("importers: compiled with mypyc: built ")


def _generated(folder: Path) -> None:
    """Claude Code sessions and SWE-agent trajectories as the import benchmark writes them."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_import
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    bench_import.generate_claude(folder / "claude", 12, 60)
    bench_import.generate(folder / "swe", 12, 20)


@needs_build
def test_compiled_and_pure_python_write_the_same_run_files(tmp_path):
    _generated(tmp_path / "gen")
    sources = [FIXTURES / "agent_cli", FIXTURES / "trajectories", tmp_path / "gen"]
    fast = _probe(tmp_path / "a", sources)
    slow = _probe(tmp_path / "b", sources, ADAKIT_COMPILED="0")
    assert fast["compiled"] is True and slow["compiled"] is False, (fast["state"], slow["state"])
    imported = [k for k, v in slow["outcomes"].items() if v[0] is None]
    assert len(imported) >= 40  # the fixtures of every format and the generated files
    assert fast["outcomes"] == slow["outcomes"]
    for name in sorted(p.name for p in (tmp_path / "b").iterdir()):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


_ODD = [None, 0, -1, 2**70, 1.5, 1.0, 0.0, "1", float("1e300"), "", "x", "../../etc/passwd", "\n", [], {},
        True, False, [1, "a", None], {"type": "text"}, {"type": "tool_use"}, "Read", "Bash",
        "sed -n '1,5p' a.py", {"file_path": 3}, {"offset": "ten", "limit": None}]


def _mutate(value, rng: random.Random, rate: float):
    """The JSON value with some of its members replaced by values of other types, dropped,
    or left as they were."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            roll = rng.random()
            if roll < rate / 3:
                continue  # dropped
            out[k] = copy.deepcopy(rng.choice(_ODD)) if roll < rate else _mutate(v, rng, rate)
        return out
    if isinstance(value, list):
        return [copy.deepcopy(rng.choice(_ODD)) if rng.random() < rate else _mutate(v, rng, rate)
                for v in value]
    return value


def _mutated(folder: Path, n: int) -> None:
    rng = random.Random(20261206)
    seeds = []
    for path in sorted((FIXTURES / "agent_cli").rglob("*.jsonl")) + sorted(
            (FIXTURES / "trajectories").rglob("*.jsonl")):
        seeds.append((path.suffix, [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]))
    for path in sorted((FIXTURES / "trajectories").rglob("*.traj")) + sorted(
            (FIXTURES / "trajectories").rglob("*.json")) + sorted((FIXTURES / "agent_cli" / "atif").rglob("*.json")):
        seeds.append((path.name[path.name.index("."):], json.loads(path.read_text())))
    folder.mkdir(parents=True)
    for i in range(n):
        ext, data = seeds[i % len(seeds)]
        rate = rng.choice([0.02, 0.05, 0.15])
        if isinstance(data, list) and ext == ".jsonl":
            text = "".join(json.dumps(_mutate(rec, rng, rate)) + "\n" for rec in data)
        else:
            text = json.dumps(_mutate(data, rng, rate))
        (folder / f"m{i:03d}{ext}").write_text(text)


@needs_build
def test_compiled_and_pure_python_agree_on_mutated_input(tmp_path):
    """Fields dropped or replaced by values of other types: whatever the pure-Python importers
    do with a file (import it, or skip it with a reason), the compiled ones do the same."""
    # 2,000 such files, tried once, found the three places where they did not (a loop
    # variable reused with another type, a working folder and an open file that were not
    # text); all are mended
    _mutated(tmp_path / "src", 240)
    fast = _probe(tmp_path / "a", [tmp_path / "src"])
    slow = _probe(tmp_path / "b", [tmp_path / "src"], ADAKIT_COMPILED="0")
    assert fast["compiled"] is True and slow["compiled"] is False
    kinds = {v[0] for v in slow["outcomes"].values()}
    assert None in kinds and len(kinds) >= 2  # some imported, some skipped
    differ = {k: (fast["outcomes"].get(k), v) for k, v in slow["outcomes"].items()
              if _outcome(fast["outcomes"].get(k)) != _outcome(v)}
    assert not differ, json.dumps(dict(list(differ.items())[:5]), indent=1)
    assert set(fast["outcomes"]) == set(slow["outcomes"])


def _outcome(result: list | None) -> list | None:
    """A file's outcome as compared: all of it, but for the detail of an "unreadable
    trajectory" skip (a value of a type the reader did not expect: the compiled modules name
    the type, pure Python the record field; docs/importing.md)."""
    if result is None or result[0] != "unreadable trajectory":
        return result
    return [result[0], None, *result[2:]]


def test_a_new_build_keeps_only_the_newest_builds_of_other_sources(tmp_path):
    tag = compiled.tag()
    current = tmp_path / f"{tag}-cccc-dddd"
    current.mkdir()
    olds = []
    for i in range(compiled.KEEP + 3):
        old = tmp_path / f"{tag}-{i:04d}-0000"
        old.mkdir()
        os.utime(old, (1_000_000 + i, 1_000_000 + i))
        olds.append(old)
    other_python = tmp_path / "cpython-399-other-0000-0000"
    other_python.mkdir()
    killed = tmp_path / ".build-killed"
    killed.mkdir()
    os.utime(killed, (1_000_000, 1_000_000))
    compiled._prune(current)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([current.name, other_python.name,
                           *(p.name for p in olds[-compiled.KEEP:])])


def _marked_files() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                  if "@pytest.mark.pure_python" in p.read_text(encoding="utf-8"))


@needs_build
def test_the_tests_that_patch_the_importers_pass_on_pure_python():
    """conftest.py deselects the ``pure_python`` tests where the importers run compiled (they
    patch the importers' internals); they run here, in a child with ADAKIT_COMPILED=0."""
    files = _marked_files()
    assert "tests/test_import_fastpath.py" in files
    proc = _child(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "pure_python", *files],
                  ADAKIT_COMPILED="0")
    tail = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 0, proc.stdout[-3000:]
    passed = int(tail.split(" passed")[0].split()[-1])
    assert passed >= 13 and "deselected" in tail and "skipped" not in tail, tail


def test_the_dev_extra_pins_the_mypy_the_build_installs():
    import tomllib

    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert compiled.MYPY in dev


_FIELD_VALUES = [7, 2.5, 30.0, "30", "0.003", "abc", True, None, [], {"n": 1}, "", "/repo"]


def _with(data: object, path: tuple, value: object) -> object:
    """A copy of ``data`` with the member at ``path`` (keys and indexes; ``"*"``: every item of
    a list) set to ``value``."""
    data = copy.deepcopy(data)
    targets = [data]
    for key in path[:-1]:
        targets = [t[i] for t in targets for i in (range(len(t)) if key == "*" else [key])
                   if isinstance(t, (dict, list))]
    for t in targets:
        if isinstance(t, dict):
            t[path[-1]] = value
    return data


def _field_cases(folder: Path) -> int:
    """Each reader's fields that take a folder, a cost or a step limit from the source, set to
    values of every JSON type: one file a value."""
    folder.mkdir(parents=True)
    traj = FIXTURES / "trajectories"
    generic = [json.loads(ln) for ln in (traj / "generic" / "flask-blueprint-walk.jsonl")
               .read_text().splitlines() if ln.strip()]
    mini = json.loads((traj / "mini_swe_agent" / "pallets__flask-5003.traj.json").read_text())
    swe = json.loads((traj / "swe_agent" / "pallets__flask-5001.traj").read_text())
    for step in swe["trajectory"]:  # its states are JSON text; the reader takes objects too
        step["state"] = json.loads(step["state"])
    oh = json.loads((traj / "openhands" / "pallets__flask-5005.json").read_text())
    n = 0
    for k, value in enumerate(_FIELD_VALUES):
        for role, key in (("meta", "root"), ("meta", "repo"), ("tool", "cwd"), ("assistant", "cost")):
            lines = [{**r, key: value} if r.get("role") == role else r for r in generic]
            (folder / f"g-{role}-{key}-{k}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
            n += 1
        for name, path in (("cost", ("messages", "*", "extra", "cost")),
                           ("limit", ("info", "config", "agent", "step_limit"))):
            (folder / f"m-{name}-{k}.traj.json").write_text(json.dumps(_with(mini, path, value)))
            n += 1
        for name, path in (("wd", ("trajectory", "*", "state", "working_dir")),
                           ("open", ("trajectory", "*", "state", "open_file"))):
            (folder / f"s-{name}-{k}.traj").write_text(json.dumps(_with(swe, path, value)))
            n += 1
        oh_case = _with(oh, ("metadata", "max_iterations"), value) if isinstance(oh, dict) else oh
        (folder / f"o-limit-{k}.json").write_text(json.dumps(oh_case))
        n += 1
    return n


@needs_build
def test_compiled_and_pure_python_agree_on_each_readers_typed_fields(tmp_path):
    """The fields the uncompiled readers hand to the compiled records (folders, costs, step
    limits) with values of every type: both import the same files and skip the same ones."""
    n = _field_cases(tmp_path / "src")
    fast = _probe(tmp_path / "a", [tmp_path / "src"])
    slow = _probe(tmp_path / "b", [tmp_path / "src"], ADAKIT_COMPILED="0")
    assert fast["compiled"] is True and slow["compiled"] is False
    assert len(slow["outcomes"]) == n
    assert sum(v[0] is None for v in slow["outcomes"].values()) > n // 2
    differ = {Path(k).name: (fast["outcomes"].get(k), v) for k, v in slow["outcomes"].items()
              if _outcome(fast["outcomes"].get(k)) != _outcome(v)}
    assert not differ, json.dumps(dict(list(differ.items())[:5]), indent=1)


def test_two_builds_at_once_take_turns_and_the_second_uses_the_first(tmp_path, monkeypatch):
    """Two builds of one cache at the same time (two make runs): the lock lets one compile;
    the other waits and then finds its build instead of compiling again."""
    import threading
    import time

    monkeypatch.setenv(compiled.FOLDER, str(tmp_path))
    running, most, made = [0], [0], []

    def fake_compile(python: str, root: Path) -> Path:
        running[0] += 1
        most[0] = max(most[0], running[0])
        time.sleep(0.4)
        folder = _fake_build(root)
        for name in json.loads((folder / compiled.MANIFEST).read_text())["files"].values():
            (folder / name).write_bytes(b"x")  # the size the manifest records
        made.append(folder)
        running[0] -= 1
        return folder

    monkeypatch.setattr(compiled, "_compile", fake_compile)
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(compiled.build(quiet=True)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1 and len(made) == 1
    assert results == [made[0], made[0]]


def test_the_command_says_which_importers_run(capsys):
    from adakit.cli import main as cli

    assert cli(["compiled", "status"]) == 0
    assert capsys.readouterr().out.strip() == compiled.state().line()


def test_a_failed_build_is_one_line_when_optional_and_an_error_otherwise(tmp_path, monkeypatch, capsys):
    def failing(python: str, root: Path) -> Path:
        raise RuntimeError("mypyc failed (exit 1):\nerror: no C compiler")

    monkeypatch.setenv(compiled.FOLDER, str(tmp_path))
    monkeypatch.setattr(compiled, "_compile", failing)
    assert compiled.main(["build", "--optional", "--quiet"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["compiled importers not built (mypyc failed (exit 1):); the importers run as "
                   "pure Python"]
    assert compiled.main(["build", "--quiet"]) == 1
    assert "error: no C compiler" in capsys.readouterr().err


def test_the_readers_typed_values():
    from adakit.importers.base import count_or_none, number_or_none, text_or_none

    assert [text_or_none(v) for v in ("/repo", "", 7, None, ["/a"])] == ["/repo", None, None, None, None]
    assert [number_or_none(v) for v in (3, 0.5, " 0.003 ", "inf", "nan", "abc", True, None, [1])] \
        == [3.0, 0.5, 0.003, None, None, None, None, None, None]
    assert [count_or_none(v) for v in (250, 30.0, "30", "30.0", 2.5, "2.5", True, None, {})] \
        == [250, 30, 30, 30, None, None, None, None, None]
