"""Helpers of the plugin tests: tiny ONNX models written into pytester projects."""

from __future__ import annotations

import contextlib
import importlib
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType

import onnx
import pytest
from onnx import TensorProto, helper

FAKE = ("-p", "pytest_roofline.backends.fake", "--roofline-backend", "fake")


def live_module(name: str) -> ModuleType:
    """The module ``name`` as the code under test imports it now, for a test to patch.

    pytester's inline runs drop the modules first imported inside them from ``sys.modules`` while
    their package keeps the stale attribute: ``from pytest_roofline.gate import paired`` after such
    a run patched a module nothing called any more, and the real paired run timed the machine
    (test_history_changepoints, seen whenever a plugin test ran first in the same process)."""
    return importlib.import_module(name)


@contextlib.contextmanager
def busy_neighbour() -> Iterator[None]:
    """One process spinning on a CPU beside what runs inside the block."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        yield
    finally:
        spinner.kill()
        spinner.wait()


def relu_chain(path: Path, nodes: int, width: int = 8) -> Path:
    """A model of ``nodes`` Relu nodes (the fake backend's time is proportional to nodes + 1)."""
    layers, prev = [], "x"
    for i in range(nodes):
        layers.append(helper.make_node("Relu", [prev], [f"t{i}"], name=f"relu{i}"))
        prev = f"t{i}"
    layers.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    graph = helper.make_graph(
        layers,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", width])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def matmul_chain(path: Path, blocks: int, size: int = 64, seed: int = 0) -> Path:
    """A real (if small) MatMul+Relu model for onnxruntime end-to-end tests; another ``seed`` is a
    retrained copy (new weights, the same cost)."""
    import numpy as np
    from onnx import numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i in range(blocks):
        inits.append(numpy_helper.from_array(rng.standard_normal((size, size)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"matmul{i}"))
        out = "y" if i == blocks - 1 else f"r{i}"
        nodes.append(helper.make_node("Relu", [f"m{i}"], [out], name=f"relu{i}"))
        prev = out
    graph = helper.make_graph(
        nodes,
        "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", size])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


#: Roofs of the fixed calibration: far above what this machine reaches, so no layer reads above
#: its roof (which the physical-sanity guard would flag) whatever the machine's speed.
FIXED_PEAK, FIXED_BANDWIDTH = 1e13, 1e12


def fixed_calibration(directory: Path, options: dict[str, str] | None = None) -> Path:
    """A calibration cache in ``directory`` holding a fixed roofline for onnxruntime with ``options``
    (calibrating for real takes seconds); returns the directory, for ``ROOFLINE_CACHE_DIR``."""
    import json

    from pytest_roofline.backends.base import get_backend
    from pytest_roofline.roofline import DeviceRoofline
    from pytest_roofline.roofline.calibrate import cache_path, calibration_fingerprint

    fingerprint = calibration_fingerprint(get_backend("onnxruntime", options))
    roofline = DeviceRoofline(
        peak_flops={"float32": FIXED_PEAK}, peak_bandwidth=FIXED_BANDWIDTH, fingerprint=fingerprint
    )
    cache_path(fingerprint, directory).write_text(
        json.dumps({"fingerprint": fingerprint, "roofline": roofline.to_dict()})
    )
    return directory


def fails_with(pytester: pytest.Pytester, args: Sequence[str], *lines: str) -> pytest.RunResult:
    """Run pytest in ``pytester`` with ``args``; assert one test failed and stdout matches ``lines``
    (fnmatch patterns, in order)."""
    result = pytester.runpytest(*args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(list(lines))
    return result
