"""What NVIDIA GPU a run computes on: identity from NVML, SM count from CUDA, roofs on paper.

Identity comes from NVML through the vendor's bindings (``nvidia-ml-py``, ``import pynvml``),
imported only when a GPU is asked about; no console output is scraped.  NVML has no SM count and
no L2 size, so those come from CUDA (``cuda.bindings`` when importable), else from NVML's core
count, else from a table of known GPUs by name.  ``CUDA_VISIBLE_DEVICES`` is honoured: device 0
of a process is the first visible GPU, as CUDA and onnxruntime number them.

:meth:`GpuInfo.theoretical_flops` and :meth:`GpuInfo.theoretical_bandwidth` are the roofs on
paper: SM count × clock × FLOP per cycle per SM of the architecture, and bus width × memory clock
× 2 (double data rate).  They are upper bounds shown beside the measured roofs, never used as roofs.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

__all__ = ["GIB", "GpuInfo", "gpu_fingerprint", "gpu_info", "known_gpu"]

UNIDENTIFIED = "NVIDIA GPU (unidentified: pip install nvidia-ml-py)"

GIB = 1024**3
MIB = 1024**2

# Known GPUs by name (NVML's product name, upper-cased, '-' and '_' as spaces), most specific
# first: SM count, L2 bytes, and the clock NVIDIA's tensor-core figures assume where it is below
# the max SM clock (Hopper: table 3 of the H100 whitepaper, 1830 MHz SXM, 1620 MHz PCIe).
_KNOWN: tuple[tuple[str, int, int, float], ...] = (
    (r"\bGH200\b", 132, 60 * MIB, 1830e6),
    (r"\bH200\b", 132, 60 * MIB, 1830e6),
    (r"\bH100\b.*\bPCIE\b", 114, 50 * MIB, 1620e6),
    (r"\bH100\b.*\bNVL\b", 132, 50 * MIB, 0.0),
    (r"\bH100\b", 132, 50 * MIB, 1830e6),
    (r"\bB200\b", 148, 0, 0.0),
    (r"\bA100\b", 108, 40 * MIB, 0.0),
    (r"\bA10G\b", 80, 6 * MIB, 0.0),
    (r"\bA10\b", 72, 6 * MIB, 0.0),
    (r"\bA30\b", 56, 24 * MIB, 0.0),
    (r"\bA40\b", 84, 6 * MIB, 0.0),
    (r"\bRTX A6000\b", 84, 6 * MIB, 0.0),
    (r"\bRTX 6000 ADA\b", 142, 96 * MIB, 0.0),
    (r"\bL40S\b", 142, 96 * MIB, 0.0),
    (r"\bL40\b", 142, 96 * MIB, 0.0),
    (r"\bL4\b", 58, 48 * MIB, 0.0),
    (r"\bRTX 4090\b", 128, 72 * MIB, 0.0),
    (r"\bRTX 4080\b", 76, 64 * MIB, 0.0),
    (r"\bRTX 3090\b", 82, 6 * MIB, 0.0),
    (r"\bT4\b", 40, 4 * MIB, 0.0),
    (r"\bV100\b", 80, 6 * MIB, 0.0),
)

# FLOP (int8: OP) per cycle per SM, dense, by compute capability.  "float32" is the CUDA cores'
# FMA rate; the others are the tensor cores'.  GA10x/Ada figures are the data-centre parts' (A10,
# L4, L40S); GeForce boards run fp16 with fp32 accumulation at half that rate.
_PER_SM: dict[tuple[int, int], dict[str, int]] = {
    (7, 0): {"float32": 128, "float16": 1024},
    (7, 5): {"float32": 128, "float16": 1024, "int8": 2048},
    (8, 0): {"float32": 128, "tf32": 1024, "float16": 2048, "bfloat16": 2048, "int8": 4096},
    (8, 6): {"float32": 256, "tf32": 512, "float16": 1024, "bfloat16": 1024, "int8": 2048},
    (8, 7): {"float32": 256, "tf32": 512, "float16": 1024, "bfloat16": 1024, "int8": 2048},
    (8, 9): {"float32": 256, "tf32": 512, "float16": 1024, "bfloat16": 1024, "int8": 2048, "float8": 2048},
    (9, 0): {"float32": 256, "tf32": 2048, "float16": 4096, "bfloat16": 4096, "int8": 8192, "float8": 8192},
}
_CORES_PER_SM = {(7, 0): 64, (7, 5): 64, (8, 0): 64}  # CUDA cores per SM; 128 on GA10x and later
_ARCH = {7: "Volta/Turing", 8: "Ampere/Ada", 9: "Hopper", 10: "Blackwell", 12: "Blackwell"}


@dataclass(frozen=True)
class GpuInfo:
    """One NVIDIA GPU: name, memory, compute capability, SMs, clocks, bus, driver and CUDA.

    Clocks are in Hz, memory and L2 in bytes, the bus width in bits; ``sm_source`` says where the
    SM count came from (``cuda``, ``nvml-cores``, ``table`` or ``unknown``).
    """

    index: int
    name: str
    memory: int
    compute_capability: tuple[int, int]
    sm_count: int
    max_sm_clock: float
    max_memory_clock: float
    bus_width: int
    driver: str
    cuda_driver: str
    l2_bytes: int = 0
    power_limit: float = 0.0  # watts
    sm_source: str = "unknown"

    @property
    def device_class(self) -> str:
        """What keys baselines: name and memory, e.g. ``NVIDIA H200 140GiB``."""
        return f"{self.name} {round(self.memory / GIB)}GiB"

    @property
    def architecture(self) -> str:
        """Family name of the compute capability (``Hopper``), for messages."""
        major, minor = self.compute_capability
        if (major, minor) == (7, 5):
            return "Turing"
        if (major, minor) == (8, 9):
            return "Ada"
        return _ARCH.get(major, f"sm_{major}{minor}")

    @property
    def tf32_default(self) -> bool:
        """Whether fp32 math may run as TF32 (Ampere and later; the CUDA EP's default)."""
        return self.compute_capability >= (8, 0)

    def theoretical_flops(self) -> dict[str, float]:
        """Peak FLOP/s (int8: OP/s) per precision on paper, dense; {} when unknown.

        SM count × clock × FLOP per cycle per SM.  Tensor-core precisions use the lower of the max
        SM clock and the clock NVIDIA's tensor figures assume for this part (see ``_KNOWN``).
        """
        rates = _PER_SM.get(self.compute_capability) or _PER_SM.get(_nearest(self.compute_capability), {})
        if not rates or not self.sm_count or not self.max_sm_clock:
            return {}
        tensor_clock = min(self.max_sm_clock, known_gpu(self.name)[2] or self.max_sm_clock)
        return {
            dtype: self.sm_count * (self.max_sm_clock if dtype == "float32" else tensor_clock) * rate
            for dtype, rate in rates.items()
        }

    def theoretical_bandwidth(self) -> float:
        """Peak DRAM byte/s on paper: bus width × memory clock × 2 (NVML's clock is per edge pair)."""
        return self.bus_width / 8 * self.max_memory_clock * 2

    def fingerprint(self) -> dict[str, Any]:
        """What a timing depends on, JSON-ready (for calibration caches and baseline fingerprints)."""
        return {
            "name": self.name,
            "memory": self.memory,
            "compute_capability": f"{self.compute_capability[0]}.{self.compute_capability[1]}",
            "sm_count": self.sm_count,
            "max_sm_clock_mhz": round(self.max_sm_clock / 1e6),
            "max_memory_clock_mhz": round(self.max_memory_clock / 1e6),
            "bus_width": self.bus_width,
            "power_limit_w": round(self.power_limit),
            "driver": self.driver,
            "cuda": self.cuda_driver,
            "index": self.index,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        data = asdict(self)
        data["compute_capability"] = list(self.compute_capability)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuInfo:
        """Inverse of :meth:`to_dict`."""
        major, minor = (int(v) for v in data["compute_capability"])
        return cls(**{**data, "compute_capability": (major, minor)})


def _nearest(cc: tuple[int, int]) -> tuple[int, int]:
    """The closest known architecture at or below ``cc`` (a newer minor inherits its major's)."""
    known = sorted(k for k in _PER_SM if k <= cc)
    return known[-1] if known else cc


def known_gpu(name: str) -> tuple[int, int, float]:
    """(SM count, L2 bytes, tensor clock Hz) of a GPU known by ``name``; zeros when unknown."""
    key = re.sub(r"[-_]", " ", name.upper())
    for pattern, sms, l2, tensor_clock in _KNOWN:
        if re.search(pattern, key):
            return sms, l2, tensor_clock
    return 0, 0, 0.0


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _visible(index: int) -> str | None:
    """The ``CUDA_VISIBLE_DEVICES`` entry for process-local device ``index`` (None: not set)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return None
    entries = [e.strip() for e in env.split(",") if e.strip()]
    return entries[index] if index < len(entries) else ""


def _handle(nvml: Any, index: int) -> Any:
    entry = _visible(index)
    if entry is None or entry.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(entry) if entry else index)
    if not entry:
        raise LookupError(f"CUDA_VISIBLE_DEVICES shows no device {index}")
    return nvml.nvmlDeviceGetHandleByUUID(entry)


def _cuda_attributes(index: int) -> tuple[int, int]:
    """(SM count, L2 bytes) from the CUDA runtime through ``cuda.bindings``; zeros when absent."""
    try:
        from cuda.bindings import runtime
    except ImportError:
        return 0, 0
    try:
        attr = runtime.cudaDeviceAttr
        err, sms = runtime.cudaDeviceGetAttribute(attr.cudaDevAttrMultiProcessorCount, index)
        if err != runtime.cudaError_t.cudaSuccess:
            return 0, 0
        err, l2 = runtime.cudaDeviceGetAttribute(attr.cudaDevAttrL2CacheSize, index)
        return int(sms), int(l2) if err == runtime.cudaError_t.cudaSuccess else 0
    except Exception:  # a driver/runtime mismatch must not break identity
        return 0, 0


@lru_cache(maxsize=8)
def gpu_info(index: int = 0) -> GpuInfo | None:
    """The GPU the process sees as ``index``, or None (no pynvml, no driver, no such device)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError (no driver/library) or an OSError from ctypes
        return None
    try:
        try:
            handle = _handle(pynvml, index)
            name = _text(pynvml.nvmlDeviceGetName(handle))
        except Exception:
            return None

        def ask(call: str, *args: Any, default: Any = 0) -> Any:
            try:
                return getattr(pynvml, call)(*args)
            except Exception:  # unsupported on this board or driver: leave it unknown
                return default

        major, minor = ask("nvmlDeviceGetCudaComputeCapability", handle, default=(0, 0))
        cc = (int(major), int(minor))
        memory = ask("nvmlDeviceGetMemoryInfo", handle, default=None)
        sms, l2 = _cuda_attributes(index)
        source = "cuda" if sms else "unknown"
        table_sms, table_l2, _ = known_gpu(name)
        if not sms:
            cores = int(ask("nvmlDeviceGetNumGpuCores", handle))
            per_sm = _CORES_PER_SM.get(cc, 128 if cc >= (8, 6) else 0)
            if cores and per_sm and cores % per_sm == 0:
                sms, source = cores // per_sm, "nvml-cores"
            elif table_sms:
                sms, source = table_sms, "table"
        cuda = int(ask("nvmlSystemGetCudaDriverVersion"))
        return GpuInfo(
            index=index,
            name=name,
            memory=int(getattr(memory, "total", 0) or 0),
            compute_capability=cc,
            sm_count=sms,
            max_sm_clock=float(ask("nvmlDeviceGetMaxClockInfo", handle, pynvml.NVML_CLOCK_SM)) * 1e6,
            max_memory_clock=float(ask("nvmlDeviceGetMaxClockInfo", handle, pynvml.NVML_CLOCK_MEM)) * 1e6,
            bus_width=int(ask("nvmlDeviceGetMemoryBusWidth", handle)),
            driver=_text(ask("nvmlSystemGetDriverVersion", default="")),
            cuda_driver=f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else "",
            l2_bytes=l2 or table_l2,
            power_limit=float(ask("nvmlDeviceGetPowerManagementLimit", handle)) / 1e3,
            sm_source=source,
        )
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def gpu_fingerprint(index: int = 0) -> dict[str, Any]:
    """The ``gpu`` entry of a backend fingerprint: :meth:`GpuInfo.fingerprint`, or a placeholder.

    Without NVML the GPU is still named as a GPU (never the host), with the package to install.
    """
    info = gpu_info(index)
    return info.fingerprint() if info is not None else {"name": UNIDENTIFIED, "index": index}
