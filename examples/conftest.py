"""Example suite setup: build the models on first use (they are not committed)."""

from __future__ import annotations

import build_models

if not all((build_models.MODELS / name).exists() for name in ("edgenet.onnx", "encoder.onnx")):
    build_models.build()
