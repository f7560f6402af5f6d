"""The real flask and requests worlds, fetched from PyPI (slow: needs the package index)."""

from __future__ import annotations

import pytest

from adakit.apparatus.world import (
    MARKER_NAME,
    absent_anchors,
    fetch_world,
    load_manifest,
    world_stats,
)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "fixture, files, loc",
    [
        # paper Table 3: flask 29 files / 9,526 LOC, requests 29 / 8,060 (see worlds.yaml)
        ("flask_world", (18, 40), (6_000, 12_000)),
        ("requests_world", (25, 45), (6_500, 12_000)),
    ],
)
def test_real_world_anchors_and_size(request, fixture, files, loc):
    world = request.getfixturevalue(fixture)
    spec = load_manifest()[world.name]
    assert absent_anchors(world, spec) == []
    stats = world_stats(world, spec=spec)
    assert files[0] <= stats["files"] <= files[1], stats
    assert loc[0] <= stats["loc"] <= loc[1], stats
    assert stats["lines"] > stats["loc"] and stats["skipped"] == 0
    assert all(rel.endswith(".py") for rel in world.source_files())


def test_flask_world_reads_through_the_sandbox(flask_world):
    lines = flask_world.lines("src/flask/app.py")
    assert any(line.startswith("class Flask(App):") for line in lines)
    assert "src/flask/sansio/scaffold.py" in flask_world.files()
    assert not any(f.startswith("tests/") for f in flask_world.files())  # outside its scope


def test_requests_world_includes_its_tests(requests_world):
    files = requests_world.files()
    assert "src/requests/sessions.py" in files and "tests/test_requests.py" in files
    assert not any(".egg-info/" in f for f in files)


def test_real_fetch_into_a_fresh_cache(tmp_path, monkeypatch):
    """requests (~140 kB) downloaded, verified against the manifest's sha256 and unpacked."""
    monkeypatch.setenv("ADAKIT_WORLDS", str(tmp_path))
    spec = load_manifest()["requests"]
    path = fetch_world("requests", progress=False)
    assert path == tmp_path / spec.dirname
    assert spec.source.sha256 in (path / MARKER_NAME).read_text()
    assert (path / "src/requests/adapters.py").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".{spec.dirname}.lock", path.name]
