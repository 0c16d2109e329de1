"""Performance tests of a small image classifier (EdgeNet, 160x160 inputs).

Each ``model_profile(...)`` call measures the model through the session's backend, explains every
layer against the device roofline, and is gated against the committed baseline in ``.roofline/``.
"""

from __future__ import annotations

import numpy as np
import pytest

from pytest_roofline.assertions import assert_efficiency, assert_fraction, assert_latency

MODEL = "models/edgenet.onnx"


def test_latency_and_layers(model_profile, device_roofline):
    """Whole-model latency, per-layer roofline fractions and where the time goes."""
    prof = model_profile(MODEL, batch_size=1)

    assert_latency(prof, below=50e-3)  # seconds; a loose absolute ceiling for any CI machine
    # Every microsecond mapped to ONNX nodes (on a GPU, a few copies launch between nodes).
    assert prof.attributed_fraction > (0.95 if prof.on_gpu else 0.99)
    assert prof.roofline_check.status != "invalid", prof.roofline_check.message()  # physically possible

    # Fractions need the device's own layer times: a GPU without CUPTI (pip install
    # "pytest-roofline[gpu]") gives host-side launch times, and then no fraction at all.
    if prof.layer_timing == "device":
        # The stem convolution is the heaviest layer: it should use a fair share of the roof.
        assert_fraction(prof, "Conv_0", above=0.01)
        assert_efficiency(prof, above=0.005)
    # Depthwise convolutions are memory-bound on a CPU and on a GPU: check the roofline says so.
    assert any(la.bound == "memory" for la in prof.layers if la.kind == "compute")
    # Convolutions dominate the model's time. Layers name the ONNX nodes they run, whatever the
    # backend calls its kernels (onnxruntime: "Conv"/"FusedConv", OpenVINO: "Convolution", ...).
    # On a GPU the small activations between them are separate kernels, each costing a launch.
    conv_time = sum(la.time for la in prof.layers if any(n.startswith("Conv") for n in la.onnx_nodes))
    assert conv_time > (0.5 if prof.on_gpu else 0.8) * prof.kernel_time
    assert prof.total_flops / device_roofline.peak < prof.latency.median  # can't beat the roof


@pytest.mark.parametrize("batch", [1, 2, 4])
def test_batch_sweep(model_profile, batch):
    """Latency and throughput across batch sizes (each batch has its own baseline entry)."""
    prof = model_profile(MODEL, batch_size=batch)
    assert prof.batch == batch
    assert prof.throughput > 0
    assert prof.latency.median < batch * 20e-3


@pytest.mark.roofline(tolerance=15, budget=20)
def test_end_to_end_with_pre_and_post_processing(model_profile, roofline_span):
    """Application spans: time pre- and post-processing beside the model's own time."""
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, size=(240, 320, 3), dtype=np.uint8)
    for _ in range(20):
        with roofline_span("preprocess"):
            crop = frame[40:200, 80:240].astype(np.float32) / 255.0
            image = ((crop - 0.45) / 0.225).transpose(2, 0, 1)[None]
        with roofline_span("postprocess"):
            logits = rng.standard_normal((1, 10)).astype(np.float32)
            probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    assert image.shape == (1, 3, 160, 160) and abs(float(probs.sum()) - 1.0) < 1e-5

    prof = model_profile(MODEL, batch_size=1, inputs={"image": image.astype(np.float32)})
    assert set(prof.spans) == {"preprocess", "postprocess"}
    # Pre-processing must stay cheaper than the model itself.
    assert prof.spans["preprocess"].median < prof.latency.median
