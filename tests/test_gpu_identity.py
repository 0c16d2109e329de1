"""GPU identity through NVML, the device class of GPU runs, and the roofs on paper.

NVML is served by a FAKE ``pynvml`` (tests/fake_pynvml) holding what NVML answered on an H200
(tests/data/gpu-h200): these tests show that our code reads NVML's answers right, never that NVML
works.  The paper roofs are checked against NVIDIA's published H200/H100 figures and against what
torch and onnxruntime measured on that H200 (measured must stay below paper).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from _calibration_helpers import use_fake_nvml

from pytest_roofline.device import device_class, device_name
from pytest_roofline.device import gpu as gpu_module
from pytest_roofline.device.gpu import GpuInfo, gpu_fingerprint, gpu_info, known_gpu

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "gpu-h200"
IDENTITY = json.loads((DATA / "identity.txt").read_text())
SMI = (DATA / "nvidia-smi-q.txt").read_text()


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch):
    """The fake pynvml first on sys.path, caches cleared, CUDA_VISIBLE_DEVICES unset."""
    use_fake_nvml(monkeypatch)
    import pynvml

    assert Path(pynvml.__file__).parent.name == "fake_pynvml"
    pynvml.calls.clear()
    yield pynvml
    gpu_info.cache_clear()


def _smi(label: str, section: str = "") -> str:
    """A value of nvidia-smi -q (first match after ``section``)."""
    text = SMI[SMI.index(section) :] if section else SMI
    return re.search(rf"^\s*{re.escape(label)}\s*:\s*(.+)$", text, re.M).group(1).strip()  # type: ignore[union-attr]


def test_identity_read_from_nvml_matches_the_recording(fake_nvml) -> None:
    info = gpu_info(0)
    assert info is not None
    assert info.name == IDENTITY["nvml_name"] == _smi("Product Name")
    assert info.memory == IDENTITY["memory_total"]
    assert info.memory // 2**20 == int(_smi("Total", "FB Memory Usage").split()[0])  # 143771 MiB
    assert info.compute_capability == tuple(IDENTITY["compute_capability"]) == tuple(IDENTITY["torch_cc"])
    assert info.max_sm_clock == 1e6 * int(_smi("SM", "Max Clocks").split()[0]) == 1980e6
    assert info.max_memory_clock == 1e6 * int(_smi("Memory", "Max Clocks").split()[0]) == 3201e6
    assert info.bus_width == 6016
    assert info.driver == _smi("Driver Version") == "580.159.04"
    assert info.cuda_driver == _smi("CUDA Version") == "13.0"
    assert info.power_limit == pytest.approx(700.0)
    # NVML has no SM count or L2 size, and the recording no core count: the table supplies them,
    # and agrees with what torch (CUDA) reported on that machine
    assert (info.sm_count, info.sm_source) == (IDENTITY["sm_count"], "table")
    assert info.l2_bytes == IDENTITY["l2_bytes"]
    assert info.architecture == "Hopper" and info.tf32_default
    assert fake_nvml.calls[-1] == "nvmlShutdown"  # NVML is released after reading
    assert GpuInfo.from_dict(json.loads(json.dumps(info.to_dict()))) == info


def test_device_class_is_the_gpu_and_the_fingerprint_keeps_the_host(fake_nvml) -> None:
    fingerprint = {"cpu": "Intel(R) Xeon(R) Processor", "cores": 16, "gpu": gpu_fingerprint(0)}
    assert device_class(fingerprint) == "NVIDIA H200 140GiB"
    assert device_name(fingerprint) == "NVIDIA H200"
    assert fingerprint["gpu"]["compute_capability"] == "9.0" and fingerprint["gpu"]["sm_count"] == 132
    assert device_name({"cpu": "Intel(R) Xeon(R) Processor"}) == "Intel(R) Xeon(R) Processor"
    assert device_name({"cpu_model": "AMD EPYC"}) == "AMD EPYC"


def test_no_driver_gives_no_identity_but_still_a_gpu_class(
    fake_nvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NVML", "absent")
    assert gpu_info(0) is None
    placeholder = gpu_fingerprint(0)
    assert "nvidia-ml-py" in placeholder["name"]
    assert device_class({"cpu": "Intel Xeon", "cores": 16, "gpu": placeholder}) == placeholder["name"]


def test_no_pynvml_gives_no_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    gpu_info.cache_clear()
    try:
        assert gpu_info(0) is None
    finally:
        gpu_info.cache_clear()


def test_cuda_visible_devices_maps_process_devices_to_nvml(
    fake_nvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-00000000-fake-h200")
    info = gpu_info(0)
    assert info is not None and "nvmlDeviceGetHandleByUUID(GPU-00000000-fake-h200)" in fake_nvml.calls
    gpu_info.cache_clear()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # process device 0 is physical device 1: absent
    assert gpu_info(0) is None and "nvmlDeviceGetHandleByIndex(1)" in fake_nvml.calls
    gpu_info.cache_clear()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert gpu_info(1) is None  # only one device visible


def _published(
    name: str, sms: int, clock_mhz: float, cc: tuple[int, int], bus: int, mem_mhz: float
) -> GpuInfo:
    return GpuInfo(0, name, 80 * 2**30, cc, sms, clock_mhz * 1e6, mem_mhz * 1e6, bus, "", "")


@pytest.mark.parametrize(
    ("info", "published"),
    [
        # NVIDIA's datasheets (dense TFLOP/s, TB/s); Hopper tensor figures at its 1830 MHz tensor clock
        (
            _published("NVIDIA H200", 132, 1980, (9, 0), 6016, 3201),
            {"float32": 66.9, "tf32": 494.7, "float16": 989.4, "bfloat16": 989.4, "int8": 1978.9, "bw": 4.8},
        ),
        (
            _published("NVIDIA H100 80GB HBM3", 132, 1980, (9, 0), 5120, 2619),
            {"float32": 66.9, "float16": 989.4, "bw": 3.35},
        ),
        (_published("NVIDIA H100 PCIe", 114, 1755, (9, 0), 5120, 1593), {"float16": 756.0, "bw": 2.04}),
        (
            _published("NVIDIA A100-SXM4-80GB", 108, 1410, (8, 0), 5120, 1593),
            {"float32": 19.5, "tf32": 156.0, "float16": 312.0, "int8": 624.0, "bw": 2.04},
        ),
        (
            _published("NVIDIA L4", 58, 2040, (8, 9), 192, 6251),
            {"float32": 30.3, "float16": 121.0, "float8": 242.0, "bw": 0.300},
        ),
        (
            _published("NVIDIA L40S", 142, 2520, (8, 9), 384, 9001),
            {"float32": 91.6, "float16": 362.1, "bw": 0.864},
        ),
        (
            _published("NVIDIA GeForce RTX 4090", 128, 2520, (8, 9), 384, 10501),
            {"float32": 82.6, "bw": 1.008},
        ),
    ],
    ids=["H200", "H100-SXM", "H100-PCIe", "A100", "L4", "L40S", "RTX4090"],
)
def test_theoretical_roofs_match_published_figures(info: GpuInfo, published: dict[str, float]) -> None:
    flops = info.theoretical_flops()
    for dtype, tera in published.items():
        if dtype == "bw":
            assert info.theoretical_bandwidth() / 1e12 == pytest.approx(tera, rel=0.03)
        else:
            assert flops[dtype] / 1e12 == pytest.approx(tera, rel=0.02), dtype


def test_h200_measurements_stay_below_its_paper_roofs(fake_nvml) -> None:
    info = gpu_info(0)
    assert info is not None
    paper = info.theoretical_flops()
    torch = {
        m[2]: float(m[3]) * 1e12
        for m in re.finditer(r"(\w+) (\w+) 8192: ([\d.]+) T", (DATA / "torch_roofs.txt").read_text())
    }
    ort = (DATA / "ort_cuda_probes.txt").read_text()
    ort_fp32 = float(re.search(r"float32 8192: device-bound ([\d.]+)", ort).group(1)) * 1e12  # type: ignore[union-attr]
    ort_fp16 = float(re.search(r"float16 8192: device-bound ([\d.]+)", ort).group(1)) * 1e12  # type: ignore[union-attr]
    copy = (
        float(re.search(r"copy 1024 MiB: ([\d.]+) GB/s", (DATA / "torch_roofs.txt").read_text()).group(1))
        * 1e9
    )  # type: ignore[union-attr]
    assert torch["fp32"] < paper["float32"]  # strict fp32 on CUDA cores
    assert torch["tf32"] < ort_fp32 < paper["tf32"]  # the CUDA EP runs fp32 as TF32
    assert torch["fp16"] < ort_fp16 < paper["float16"] and torch["bf16"] < paper["bfloat16"]
    assert 0.75 < ort_fp16 / paper["float16"] < 1 and 0.75 < ort_fp32 / paper["tf32"] < 1
    assert 0.8 < copy / info.theoretical_bandwidth() < 1


def test_known_gpu_table_matches_names_as_nvml_spells_them() -> None:
    assert known_gpu("NVIDIA H100 PCIe")[0] == 114 and known_gpu("NVIDIA H100 80GB HBM3")[0] == 132
    assert known_gpu("NVIDIA A100-SXM4-40GB")[0] == 108 and known_gpu("NVIDIA A10")[0] == 72
    assert known_gpu("NVIDIA L4")[0] == 58 and known_gpu("NVIDIA L40S")[0] == 142
    assert known_gpu("NVIDIA GeForce RTX 4090")[0] == 128 and known_gpu("Tesla T4")[0] == 40
    assert known_gpu("Some Future GPU") == (0, 0, 0.0)
    unknown_arch = GpuInfo(0, "x", 1, (11, 0), 10, 1e9, 1e9, 64, "", "")
    assert unknown_arch.theoretical_flops()["float32"] == 10 * 1e9 * 256  # newest known arch below


def test_sm_count_from_cuda_bindings_when_importable(fake_nvml, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_module, "_cuda_attributes", lambda index: (132, 50 * 2**20))
    info = gpu_info(0)
    assert info is not None and (info.sm_count, info.sm_source, info.l2_bytes) == (132, "cuda", 50 * 2**20)


def test_gpu_modules_are_not_imported_at_plugin_start() -> None:
    import subprocess

    code = (
        "import sys, pytest_roofline.plugin, pytest_roofline.pytest.session\n"
        "import pytest_roofline.roofline.calibrate\n"
        "print([m for m in ('pynvml', 'cupti', 'cuda', 'pytest_roofline.device.gpu', "
        "'pytest_roofline.backends.onnxruntime.cupti') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
