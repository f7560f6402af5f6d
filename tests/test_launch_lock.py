"""One writer per output folder: a second launch says who holds the folder and writes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from adakit.study.launch import launch
from adakit.study.lock import FolderLocked, folder_lock, holder
from adakit.study.spec import load_study

ROOT = Path(__file__).resolve().parent.parent


def _study(tmp_path: Path) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({
        "name": "locktest", "output": str(tmp_path / "runs"), "turn_bound": 4,
        "matrix": [{"models": ["baseline-tracer"], "worlds": ["flask"],
                    "tasks": ["feature_tracing"], "conditions": ["natural"]}],
    }))
    return path


def test_the_lock_names_its_holder_and_is_released(tmp_path):
    with folder_lock(tmp_path / "out"):
        assert holder(tmp_path / "out").startswith("pid ")
        with pytest.raises(FolderLocked, match="another launch"), folder_lock(tmp_path / "out"):
            pass
    with folder_lock(tmp_path / "out"):  # released when the block ends
        pass


@pytest.mark.slow
def test_a_second_launch_into_a_held_folder_exits_2_and_writes_nothing(tmp_path, flask_world):
    study = _study(tmp_path)
    out = tmp_path / "runs"
    with folder_lock(out):
        with pytest.raises(FolderLocked):
            launch(load_study(study), progress=False)
        proc = subprocess.run([sys.executable, "-m", "adakit", "launch", str(study)], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "another launch" in proc.stderr and "pid " in proc.stderr
        assert not list(out.glob("*.jsonl")) and not (out / "study.yaml").exists()
    summary = launch(load_study(study), progress=False)  # the folder is free again
    assert len(summary) == 1 and len(list(out.glob("*.jsonl"))) == 1
