"""Realistic run-results dicts for the report tests, built from the project's own value types."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from pytest_roofline.measure.stats import LatencyStats
from pytest_roofline.profile import Layer, ModelProfile, apply_roofline
from pytest_roofline.report import finite
from pytest_roofline.results import ProfileRecord, RunResults, parse_results
from pytest_roofline.roofline import CacheLevel, DeviceRoofline

OPS = ("Conv", "MatMul", "Relu", "Add", "BatchNormalization", "Softmax", "Reshape", "Gemm")


def device_roofline() -> DeviceRoofline:
    """A CPU-like roofline with measured cache levels."""
    return DeviceRoofline(
        peak_flops={"float32": 1.5e11, "float16": 2.6e11},
        peak_bandwidth=1.8e10,
        fingerprint={"cpu": "Test CPU", "cores": 2},
        cache_levels=(
            CacheLevel("L1", 32 * 1024, 2.0e11),
            CacheLevel("L2", 1 << 20, 8.0e10),
            CacheLevel("DRAM", 0, 1.8e10),
        ),
        measured_at="2026-11-25T21:00:00+00:00",
    )


def model_profile(
    n_layers: int = 40,
    batch: int = 1,
    seed: int = 0,
    name: str = "synthetic",
    roofline: DeviceRoofline | None = None,
    folded: int = 2,
    layer_prefix: str = "layer",
) -> ModelProfile:
    """A profile of ``n_layers`` layers with plausible costs; ``folded`` extra folded nodes."""
    rng = np.random.default_rng(seed)
    roofline = roofline or device_roofline()
    raw = []
    for i in range(n_layers):
        op = OPS[i % len(OPS)]
        flops = 0 if op == "Reshape" else int(rng.uniform(1e5, 5e8) * batch)
        nbytes = int(rng.uniform(1e4, 2e7) * batch)
        time = max(flops / rng.uniform(2e9, 1.2e11), nbytes / rng.uniform(2e9, 1.5e10), 2e-6)
        kind = "layout" if op == "Reshape" else "compute"
        raw.append((f"{layer_prefix}_{i}/{op.lower()}", op, (f"{op}_{i}",), time, flops, nbytes, kind))
    total = sum(r[3] for r in raw)
    layers = [
        apply_roofline(
            Layer(n, op, nodes, t, f, b, kind=k, share=t / total, times=tuple(t * rng.uniform(0.95, 1.1, 5))),
            roofline,
        )
        for n, op, nodes, t, f, b, k in raw
    ]
    layers += [
        Layer(f"const_{i}", "Constant", (f"const_{i}",), 0.0, 0, 64, kind="folded") for i in range(folded)
    ]
    samples = rng.normal(total * 1.05, total * 0.03, 60)
    latency = LatencyStats.from_samples(samples, [list(samples[:30]), list(samples[30:])])
    spans = {"preprocess": LatencyStats.from_samples(rng.normal(1e-4, 1e-5, 20))}
    return ModelProfile(
        model_name=name,
        model_path=f"models/{name}.onnx",
        model_hash="0" * 16,
        backend="onnxruntime",
        backend_version="1.32.0",
        options={"threads": "1"},
        batch=batch,
        input_shapes={"x": (batch, 3, 224, 224)},
        latency=latency,
        layers=tuple(layers),
        attributed_fraction=0.97,
        total_flops=sum(la.flops for la in layers),
        total_macs=sum(la.flops for la in layers) // 2,
        total_bytes=sum(la.bytes for la in layers),
        roofline=roofline,
        spans=spans,
    )


def result(profile: ModelProfile, status: str = "regression", test: str | None = None) -> dict[str, Any]:
    """One entry of ``results[]`` with a verdict, per-layer comparison and history."""
    data = profile.to_dict()
    median = profile.latency.median
    ratio = 1.12 if status == "regression" else 1.0
    compute = [la for la in profile.layers if la.kind != "folded"]
    grown = 1.5 if status == "regression" else 1.0
    key = f"{profile.model_path}|b{profile.batch}|onnxruntime|cpu"
    return {
        "test": test or f"tests/test_perf.py::test_{profile.model_name}[b{profile.batch}]",
        "key": f"tests/test_perf.py::test_{profile.model_name}|{key}",
        "profile": data,
        "verdict": {
            "status": status,
            "mode": "stored",
            "metric": "latency",
            "baseline": median / ratio,
            "current": median,
            "ratio": ratio,
            "ci": [ratio - 0.03, ratio + 0.04],
            "noise": 0.02,
            "tolerance": 0.05,
            "message": f"latency {ratio:.2f}x the baseline",
            "raw": {"baseline": median / ratio, "current": median},
            "layers": [
                {
                    "name": la.name,
                    "baseline_time": la.time / (grown if i == 0 else 1.0),
                    "current_time": la.time,
                    "ratio": grown if i == 0 else 1.0,
                }
                for i, la in enumerate(compute[:10])
            ],
        },
        "history": [
            {
                "commit": f"{i:07x}abc",
                "time": f"2026-11-{10 + i:02d}T10:00:00+00:00",
                "value": median * (0.9 + 0.01 * i),
                "median": median * (0.9 + 0.01 * i),
            }
            for i in range(6)
        ],
        "outcome": "failed" if status == "regression" else "passed",
    }


def run_results(*results: dict[str, Any], roofline: DeviceRoofline | None = None) -> dict[str, Any]:
    """The whole run-results document."""
    return {
        "schema_version": 1,
        "tool": "pytest-roofline",
        "version": "0.1.0",
        "created": "2026-11-25T22:10:00+00:00",
        "commit": "0123456789abcdef0123456789abcdef01234567",
        "branch": "main",
        "dirty": False,
        "backend": "onnxruntime",
        "roofline": (roofline or device_roofline()).to_dict(),
        "results": list(results),
        "stale": [],
    }


def sample_run(n_layers: int = 40) -> dict[str, Any]:
    """Two batch sizes of one model (a sweep; one regressed) and a second, passing model."""
    return run_results(
        result(model_profile(n_layers, batch=1, name="resnet"), "regression"),
        result(model_profile(n_layers, batch=8, seed=1, name="resnet"), "pass"),
        result(model_profile(12, batch=1, seed=2, name="tiny"), "pass"),
    )


def results_of(document: dict[str, Any]) -> RunResults:
    """The :class:`RunResults` of a results document (as ``load_results`` reads it from disk)."""
    return parse_results(json.loads(json.dumps(finite(document))))


def record_of(item: dict[str, Any]) -> ProfileRecord:
    """One ``results[]`` item as a :class:`ProfileRecord`."""
    return results_of(run_results(item)).records[0]
