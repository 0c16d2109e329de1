"""The onnxruntime backend's GPU configuration, checked where no GPU is at hand.

What needs a GPU (device-bound timing, CUPTI layer times, the roofs) is measured by
benchmarks/gpu_check.sh on the device.  Here: option parsing, the providers handed to
onnxruntime, the fingerprint and device class (NVML from the FAKE pynvml of tests/fake_pynvml,
onnxruntime told that CUDA is available: logic only), bfloat16 inputs made on the backend, and the
host-timed path of a GPU profile, run for real on the CPU provider.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime
import pytest
from _calibration_helpers import use_fake_nvml
from onnx import TensorProto, helper

from pytest_roofline.api import profile_model
from pytest_roofline.backends.base import get_backend
from pytest_roofline.backends.onnxruntime import cupti as cupti_module
from pytest_roofline.backends.onnxruntime.cupti import GpuTrace
from pytest_roofline.backends.onnxruntime.runner import OnnxRuntimeBackend
from pytest_roofline.device import device_class
from pytest_roofline.device.gpu import gpu_info
from pytest_roofline.errors import OptionError
from pytest_roofline.model import ModelSpec
from pytest_roofline.roofline import DeviceRoofline
from pytest_roofline.zoo import tiny_cnn

HERE = Path(__file__).resolve().parent


@pytest.fixture
def cuda_listed(monkeypatch: pytest.MonkeyPatch):
    """onnxruntime claims a CUDA provider and NVML is the fake H200 (logic tests only)."""
    have = onnxruntime.get_available_providers()
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", *have])
    use_fake_nvml(monkeypatch)
    yield
    gpu_info.cache_clear()


def test_a_cuda_run_is_fingerprinted_by_its_gpu_and_keeps_the_host(cuda_listed) -> None:
    backend = OnnxRuntimeBackend({"providers": "cuda,cpu"})
    fp = backend.fingerprint()
    assert backend.on_gpu and backend.io_device == "cuda"
    assert fp["gpu"]["name"] == "NVIDIA H200" and fp["cpu"] and fp["cores"]
    assert device_class(fp) == "NVIDIA H200 140GiB"
    assert (fp["device_id"], fp["use_tf32"], fp["io_binding"]) == (0, "default", "device")
    assert backend.provider_list() == [("CUDAExecutionProvider", {"device_id": "0"}), "CPUExecutionProvider"]
    assert backend.float32_mode() == "tf32"  # Hopper under the CUDA EP's default


def test_gpu_options(cuda_listed) -> None:
    strict = OnnxRuntimeBackend(
        {"providers": "cuda", "use_tf32": "0", "device_id": "0", "io_binding": "host"}
    )
    assert strict.provider_list() == [("CUDAExecutionProvider", {"device_id": "0", "use_tf32": "0"})]
    assert strict.float32_mode() == "fp32" and strict.io_device == "cpu"
    assert strict.fingerprint()["use_tf32"] == "0" and strict.fingerprint()["io_binding"] == "host"
    assert OnnxRuntimeBackend({"providers": "CUDAExecutionProvider", "device_id": "0"}).on_gpu
    for bad, fragment in (
        ({"use_tf32": "yes"}, "use_tf32"),
        ({"io_binding": "pcie"}, "io_binding"),
        ({"device_id": "-1"}, "device_id"),
    ):
        with pytest.raises(OptionError, match=fragment):
            OnnxRuntimeBackend({"providers": "cuda", **bad})


def test_cpu_configuration_is_unchanged() -> None:
    backend = get_backend("onnxruntime")
    assert not backend.on_gpu and backend.io_device == "cpu" and backend.float32_mode() == ""
    assert backend.provider_list() == ["CPUExecutionProvider"]
    assert not {"gpu", "use_tf32", "io_binding", "device_id"} & set(backend.fingerprint())


def test_bfloat16_inputs_are_cast_on_the_backend() -> None:
    """numpy has no bfloat16: such an input is given as float32 and cast by a one-node session."""
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)],
        "bf16_in",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = np.linspace(-3, 3, 32, dtype=np.float32).reshape(4, 8) + np.float32(1e-3)
    with get_backend("onnxruntime").open(ModelSpec.create(model), {"x": x}) as session:
        assert len(session.time(3)) == 3
        y = session.outputs()["y"]
    expected = (x.view(np.uint32) & 0xFFFF0000).view(np.float32)  # bfloat16 keeps the top 16 bits
    assert np.allclose(y, expected, rtol=2**-7) and not np.array_equal(y, x)


def _as_gpu(backend: OnnxRuntimeBackend) -> OnnxRuntimeBackend:
    """The CPU provider driven through the GPU code path (buffers stay on the host)."""
    backend.on_gpu = True
    return backend


def test_without_a_gpu_timer_layers_are_host_timed_and_get_no_fraction(cuda_listed) -> None:
    backend = _as_gpu(OnnxRuntimeBackend({"intra_op_threads": "1"}))
    roof = DeviceRoofline({"float32": 1e12}, 1e11, backend.fingerprint())
    prof = profile_model(tiny_cnn(), backend=backend, batch=1, roofline=roof, sessions=2, rounds=3)
    assert prof.layer_timing == "host" and prof.extra["gpu"]["timing"] == "host"
    assert "cupti-python" in prof.extra["gpu"]["reason"]
    assert prof.extra["timing_source"] == "onnxruntime profiler (host-side launch times)"
    assert prof.extra["transfer"]["included_in_latency"] is True  # io_binding=device needs a GPU
    assert prof.layers and all(la.roofline_fraction is None for la in prof.layers)
    assert prof.to_dict()["efficiency"] is None and prof.roofline_check.status == "host-timed"
    assert prof.attributed_fraction > 0.9


def test_cupti_recording_nothing_falls_back_to_host_times(
    cuda_listed, monkeypatch: pytest.MonkeyPatch
) -> None:
    class SilentRecorder:  # CUPTI present but blind (another profiler holds it): no records
        def __enter__(self) -> SilentRecorder:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def trace(self) -> GpuTrace:
            return GpuTrace((), ())

    monkeypatch.setattr(cupti_module, "cupti_available", lambda: True)
    monkeypatch.setattr(cupti_module, "CuptiRecorder", SilentRecorder)
    backend = _as_gpu(OnnxRuntimeBackend({"intra_op_threads": "1"}))
    prof = profile_model(tiny_cnn(), backend=backend, batch=1, sessions=2, rounds=3)
    assert prof.layer_timing == "host" and "CUPTI recorded no GPU activity" in prof.extra["gpu"]["reason"]
