"""A stand-in for ``pytest_roofline.gate.model_store`` in tests only (that module is written
elsewhere): a content-addressed folder per model with the same ``put``/``get`` contract."""

from __future__ import annotations

import shutil
import sys
import types
from pathlib import Path

import onnx

from pytest_roofline.gate.identity import content_hash
from pytest_roofline.gitref import external_data_locations

MODULE = "pytest_roofline.gate.model_store"


class StandInStore:
    """A minimal content-addressed model store (tests only): ``root/<hash>/<name>`` + external data."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.note = None

    def put(self, model_path: Path) -> str:
        digest = content_hash(model_path)
        folder = self.root / digest
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(model_path, folder / "model.onnx")
        for location in external_data_locations(onnx.load(str(model_path), load_external_data=False)):
            shutil.copy(model_path.parent / location, folder / location)
        return digest

    def get(self, digest: str) -> Path | None:
        path = self.root / digest / "model.onnx"
        return path if path.exists() and content_hash(path) == digest else None


def stand_in_module(root: Path) -> types.ModuleType:
    """A module whose ``default_model_store()`` is a :class:`StandInStore` at ``root``."""
    module = types.ModuleType(MODULE)
    store = StandInStore(root)
    module.default_model_store = lambda: store  # type: ignore[attr-defined]
    module.store = store  # type: ignore[attr-defined]
    return module


def install(root: Path) -> None:
    """Make the stand-in importable as the model store in this process (a pytester conftest's job)."""
    sys.modules.setdefault(MODULE, stand_in_module(root))
