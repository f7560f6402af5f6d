"""A full disk stops the launch at the first ENOSPC, in one line, leaving no empty run file."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import yaml

from adakit.record import RunWriter, read_run
from adakit.study.launch import gated_launch
from adakit.study.spec import load_study
from adakit.synthetic import synthetic_run


def test_a_run_file_appears_with_its_header_or_not_at_all(tmp_path, monkeypatch):
    header = synthetic_run("r", model="m", files={"a.py": 10}, tools=["OVW"]).header
    real_fsync = __import__("os").fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("adakit.record.os.fsync", full)
    with pytest.raises(OSError):
        RunWriter.create(tmp_path / "r.jsonl", header)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr("adakit.record.os.fsync", real_fsync)
    with RunWriter.create(tmp_path / "r.jsonl", header):
        pass
    assert read_run(tmp_path / "r.jsonl").header.run_id == header.run_id


@pytest.mark.slow
def test_enospc_stops_the_launch_in_one_line_and_a_relaunch_finishes(tmp_path, monkeypatch,
                                                                      capsys, flask_world):
    study_path = tmp_path / "study.yaml"
    study_path.write_text(yaml.safe_dump({
        "name": "full", "output": str(tmp_path / "runs"), "turn_bound": 5, "concurrency": 1,
        "matrix": [{"models": ["baseline-tracer", "baseline-skimmer"], "worlds": ["flask"],
                    "tasks": ["feature_tracing", "risk_review"], "conditions": ["natural"]}],
    }))
    writes = {"n": 0}
    real_write = RunWriter.write

    def filling(self, record):
        writes["n"] += 1
        if writes["n"] > 8:  # the disk fills during the second run
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(self, record)

    monkeypatch.setattr(RunWriter, "write", filling)
    code = gated_launch(load_study(study_path), yes=True)
    err = capsys.readouterr().err
    assert code == 1
    lines = [line for line in err.splitlines() if "no space left" in line]
    assert len(lines) == 1 and str(tmp_path / "runs") in lines[0] and "MB" in lines[0]
    assert "Traceback" not in err and err.count("Errno 28") == 0
    files = sorted((tmp_path / "runs").glob("*.jsonl"))
    assert 1 <= len(files) < 4 and all(f.stat().st_size for f in files)  # stopped early
    assert all(read_run(f).header for f in files)
    assert not list(Path(tmp_path / "runs").glob("*.bak"))
    monkeypatch.setattr(RunWriter, "write", real_write)
    assert gated_launch(load_study(study_path), yes=True) == 0
    runs = [read_run(f) for f in sorted((tmp_path / "runs").glob("*.jsonl"))]
    assert len(runs) == 4 and all(r.end is not None for r in runs)
