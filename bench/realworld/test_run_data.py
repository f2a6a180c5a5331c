"""The run yardstick's data generators write files the scripts' own loaders read."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

RUN = Path(__file__).resolve().parent / "run.py"


def _harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("realworld_run", RUN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_npy_token_shards_load_with_numpy_and_raw_shards_stay_raw(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    tokens = _harness().GENERATORS["tokens"]
    tokens(tmp_path, {"path": "data/shard_{i}.npy", "files": 2, "tokens": 50, "vocab": 7, "format": "npy"}, seed=0)
    tokens(tmp_path, {"path": "raw.bin", "tokens": 50, "vocab": 7}, seed=0)

    shards = [np.load(tmp_path / "data" / f"shard_{i}.npy", mmap_mode="r") for i in range(2)]
    assert [s.shape for s in shards] == [(50,), (50,)] and all(s.dtype == np.uint16 for s in shards)
    assert int(max(s.max() for s in shards)) < 7
    assert (tmp_path / "raw.bin").stat().st_size == 100  # 50 uint16 ids, no header


def test_hdf5_token_file_holds_one_sliceable_dataset(tmp_path: Path) -> None:
    h5py = pytest.importorskip("h5py")
    _harness().GENERATORS["hdf5_tokens"](tmp_path, {"path": "data/train.h5", "tokens": 300, "vocab": 11}, seed=1)

    with h5py.File(tmp_path / "data" / "train.h5", "r") as f:
        assert list(f) == ["tokens"]
        window = f["tokens"][10:43]
        assert f["tokens"].shape == (300,) and window.shape == (33,) and int(window.max()) < 11


def test_an_entry_pinned_to_another_version_of_an_installed_package_is_skipped_not_judged() -> None:
    harness = _harness()
    installed = importlib.metadata.version("pytest")
    assert harness.missing_modules({"requires": ["pytest", "json"]}) == []
    assert harness.missing_modules({"requires": [f"pytest=={installed}"]}) == []
    assert harness.missing_modules({"requires": ["pytest==0.0.1"]}) == [f"pytest==0.0.1 (installed {installed})"]
    assert harness.missing_modules({"requires": ["no_such_module_here"]}) == ["no_such_module_here"]


def test_a_racy_script_may_crash_at_either_place_the_race_decides_between() -> None:
    harness = _harness()
    expect = {"exit": 1, "findings": ["DDP120"], "may": ["DDP128"],
              "locations": {"DDP120": ["data.py:110", "data.py:96"]}}

    def outcome(findings: list[str], where: str) -> object:
        return harness.Outcome(1, findings, {}, {"DDP120": where}, 1.0)

    assert harness.compare(expect, outcome(["DDP120"], "data.py:110")) == []
    assert harness.compare(expect, outcome(["DDP120", "DDP128"], "data.py:96")) == []
    assert harness.compare(expect, outcome(["DDP120"], "data.py:12")) == [
        "DDP120 at data.py:12, expected data.py:110 or data.py:96"]
    assert harness.compare({"locations": {"DDP120": "data.py:110"}}, outcome(["DDP120"], "data.py:96")) == [
        "DDP120 at data.py:96, expected data.py:110"]
