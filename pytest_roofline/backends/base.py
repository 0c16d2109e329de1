"""The backend protocol, the measurements backends return, and the registry.

A backend turns (model, options) into measurements.  Built-in backends live in this package and
are imported lazily; third-party ones register through the ``pytest_roofline.backends`` entry
point group (``name = "package.module:BackendClass"``).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any, ClassVar

from pytest_roofline.errors import BackendUnavailable, OptionError

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy as np

    from pytest_roofline.model import ModelSpec

__all__ = [
    "Backend",
    "BackendSession",
    "ExecutedGraph",
    "ExecutedNode",
    "KernelProfile",
    "KernelRecord",
    "MAX_THREADS",
    "available_backends",
    "get_backend",
    "importable",
]

ENTRY_POINT_GROUP = "pytest_roofline.backends"
#: The most threads a backend option may ask for (far beyond any machine: a typo past it is refused).
MAX_THREADS = 4096

BUILTIN_BACKENDS: dict[str, str] = {
    "onnxruntime": "pytest_roofline.backends.onnxruntime.runner:OnnxRuntimeBackend",
    "openvino": "pytest_roofline.backends.openvino:OpenVinoBackend",
    "trtexec": "pytest_roofline.backends.trtexec.runner:TrtexecBackend",
}


@dataclass(frozen=True)
class KernelRecord:
    """One backend kernel (or fused layer) with the original ONNX nodes it executes.

    ``times`` holds one duration in seconds per profiled iteration.  ``kind`` is ``"compute"``
    or ``"layout"`` (reorders/reformats inserted by the backend, attributed to ``serves``).
    A kernel that could not be mapped has empty ``onnx_nodes``: it is reported, never dropped.
    """

    name: str
    op_type: str
    onnx_nodes: tuple[str, ...]
    times: tuple[float, ...]
    kind: str = "compute"
    serves: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        data = asdict(self)
        data["onnx_nodes"], data["times"] = list(self.onnx_nodes), list(self.times)
        return data


@dataclass(frozen=True)
class ExecutedNode:
    """One node of the graph a backend ran (onnxruntime: its optimized graph), by tensor names."""

    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    domain: str = ""


@dataclass(frozen=True)
class ExecutedGraph:
    """The main graph a backend ran after its own rewriting (fusions, layout reorders, inserted
    precision casts): what its memory planner plans, which the model's graph does not show."""

    nodes: tuple[ExecutedNode, ...]
    inputs: frozenset[str]  # the caller's buffers
    outputs: tuple[str, ...]
    initializers: frozenset[str]
    #: The shapes the backend's planner knows before running, of the model's own tensors it kept:
    #: dims as numbers or symbols, None for a dim (or a whole shape) inference left unknown
    declared: Mapping[str, tuple[int | str | None, ...] | None] = field(default_factory=dict)


@dataclass(frozen=True)
class KernelProfile:
    """The result of a profiled run: kernels, and ONNX nodes folded away (no time).

    ``timing`` says what the kernel times are: ``device`` (the computing device's own time: a CPU
    profiler on the CPU, CUPTI on a GPU, TensorRT's per-layer GPU times) or ``host`` (host-side
    time around an accelerator's kernel launches: no roofline fraction may be computed from it).
    ``timer_resolution`` is the timer's step in seconds; ``extra`` carries backend figures such as
    host<->device ``transfer`` times, kept apart from the gated latency.
    """

    kernels: tuple[KernelRecord, ...]
    folded: tuple[str, ...] = ()
    iterations: int = 0
    precision: str = "fp32"  # what actually ran: fp32 | fp16 | int8 | mixed
    trace_events: tuple[dict[str, Any], ...] = field(default=(), repr=False, compare=False, hash=False)
    timing: str = "device"  # "device" | "host"
    timing_source: str = ""  # e.g. "onnxruntime profiler", "CUPTI", "trtexec --exportProfile"
    timer_resolution: float = 1e-6
    extra: dict[str, Any] = field(default_factory=dict, repr=False, compare=False, hash=False)
    #: The profiled run's console log where the backend reports its memory only there (trtexec)
    console_log: str = field(default="", repr=False, compare=False, hash=False)
    #: The graph the backend ran, where it says (onnxruntime's optimized-graph dump)
    executed: ExecutedGraph | None = field(default=None, repr=False, compare=False, hash=False)


class BackendSession(ABC):
    """An opened model ready to run; a context manager that releases the backend's resources."""

    @abstractmethod
    def time(self, iterations: int) -> list[float]:
        """Run ``iterations`` timed inferences with profiling off; seconds per inference."""

    @abstractmethod
    def profile(self, iterations: int) -> KernelProfile:
        """Run ``iterations`` inferences with the backend's profiler on."""

    def device_time(self, iterations: int) -> list[float]:
        """Run ``iterations`` inferences timed on the computing device (a GPU's kernel time by
        CUPTI), seconds per inference; [] where the backend has no device timer (default)."""
        return []

    def outputs(self) -> dict[str, np.ndarray]:
        """Run once and return the outputs by name (for cross-backend checks)."""
        raise NotImplementedError(f"{type(self).__name__} cannot return outputs")

    def compute_precision(self) -> str:
        """The precision the backend computes this model's arithmetic in, where it says so without
        profiling (``fp32``, ``bf16``, ``fp16``, ``int8``, ``mixed``); ``""`` when it does not say
        (default).  OpenVINO's CPU plugin runs float32 models in bf16 on CPUs with AVX512-BF16 or
        AMX: a calibration probe that ran so measures the bfloat16 roof, not float32's."""
        return ""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (default: nothing to do)."""

    def __enter__(self) -> BackendSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Backend(ABC):
    """A way of running ONNX models: onnxruntime, OpenVINO, trtexec, or a third party's."""

    name: ClassVar[str]
    extra: ClassVar[str]  # the pip extra that installs it: pip install "pytest-roofline[<extra>]"
    options_help: ClassVar[dict[str, str]] = {}  # --option keys this backend accepts
    #: Whether its timings are wall-clock measurements that other processes' load disturbs (a
    #: replayed or synthetic backend is not: the gate then ignores the machine's load).
    wall_clock: ClassVar[bool] = True
    #: Whether its sessions time each run by the calling thread's CPU time instead of the wall
    #: clock (:meth:`thread_timed_copy`): a run another process preempts is not charged the wait.
    thread_timed: bool = False
    #: Whether each session loads its model from its own fresh copy of the file's bytes
    #: (:meth:`own_bytes_copy`) instead of from the path.
    own_model_bytes: bool = False

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        unknown = sorted(set(options or {}) - set(self.options_help))
        if unknown:
            known = ", ".join(sorted(self.options_help)) or "none"
            raise OptionError(f"backend {self.name!r} has no option {unknown[0]!r} (options: {known})")
        self.options: dict[str, str] = dict(options or {})

    @classmethod
    @abstractmethod
    def available(cls) -> bool:
        """Whether the backend's runtime is installed and usable here."""

    @abstractmethod
    def version(self) -> str:
        """The runtime's version string."""

    @abstractmethod
    def fingerprint(self) -> dict[str, Any]:
        """What identifies the device and runtime configuration (for caches and baselines)."""

    @abstractmethod
    def open(self, spec: ModelSpec, inputs: Mapping[str, np.ndarray]) -> BackendSession:
        """Load/compile ``spec`` with these inputs bound, ready to time and profile."""

    def single_thread(self) -> Backend | None:
        """This configuration on one thread, when it runs several on a CPU; else None.

        The gate judges such a configuration on its single-thread figure, which holds steady on a
        shared machine where multi-threaded speed jumps between states (docs/plugin.md, "The
        gate"), and measures the configured threads beside it.  None (the default) gates the
        configuration as it is.
        """
        return None

    def device_kernel_times(self) -> bool:
        """Whether :meth:`BackendSession.profile` times kernels on the computing device with a fine
        timer (CUPTI on a GPU) while :meth:`BackendSession.time` is host wall time around them: the
        calibration then times its memory probes the way layers are timed, by
        :meth:`BackendSession.device_time` (default False)."""
        return False

    def thread_timed_copy(self) -> Backend | None:
        """This configuration timing each run by the calling thread's CPU time, when a run executes
        on that thread alone (one intra-op thread on a CPU); else None (the default).

        On shared CPUs a run's wall time carries the time other processes held the core: beside one
        busy process on the 2-core VM, a 1.5 ms LSTM read 1.5 or 5.5 ms per run (a lost scheduler
        slice), and a one-thread pairing's per-session figure spread ±10-100 %; its thread's CPU
        time spread ±0.5-2.3 % (docs/plugin.md, "Load is a noise")."""
        return None

    def own_bytes_copy(self) -> Backend:
        """This configuration with :attr:`own_model_bytes` set, where the backend honours it (else
        itself): a paired comparison's sessions then each load the model from their own copy of
        its bytes (``gate.paired.FreshInputs``)."""
        return self

    def shared_pool_threads(self) -> int | None:
        """Threads of a pool every session of this configuration should share while the gate
        interleaves two of them (a helper process then samples: :mod:`pytest_roofline.gate.isolated`);
        None to sample in this process (the default)."""
        return None

    def unavailable_message(self) -> str:
        """The one line shown when the backend is not installed."""
        return (
            f"backend {self.name!r} is not installed; "
            f'install it with: pip install "pytest-roofline[{self.extra}]"'
        )


def importable(module: str) -> bool:
    """Whether an optional runtime's module imports (for :meth:`Backend.available`)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def _entry_points() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def available_backends() -> list[str]:
    """Names of built-in and registered backends (installed or not)."""
    return sorted(set(BUILTIN_BACKENDS) | set(_entry_points()))


def backend_class(name: str) -> type[Backend]:
    """The class registered for ``name``.

    Raises:
        OptionError: no backend of that name exists.
    """
    if name in BUILTIN_BACKENDS:
        module_name, _, attr = BUILTIN_BACKENDS[name].partition(":")
        return getattr(importlib.import_module(module_name), attr)
    entry = _entry_points().get(name)
    if entry is None:
        raise OptionError(f"unknown backend {name!r}; choose one of: {', '.join(available_backends())}")
    return entry.load()


def get_backend(name: str, options: Mapping[str, str] | None = None) -> Backend:
    """An instance of backend ``name`` configured with ``options``, checked to be available.

    Raises:
        OptionError: unknown backend or option.
        BackendUnavailable: the backend's runtime is not installed.
    """
    backend = backend_class(name)(options)
    if not backend.available():
        raise BackendUnavailable(backend.unavailable_message())
    return backend
