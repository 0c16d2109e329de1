"""The onnxruntime backend: honest e2e timing, and profiled kernels attributed to ONNX nodes.

Timing (``time``) runs a plain session with the profiler off, inputs and outputs pre-bound through
an ``IOBinding``, and times each call with ``perf_counter_ns``.  Profiling (``profile``) opens a
second session with ``enable_profiling`` and ``optimized_model_filepath`` in a temporary
directory, and maps ORT's kernel names back to the original graph
(:mod:`pytest_roofline.backends.onnxruntime.attribution`).

On an NVIDIA GPU (the CUDA or TensorRT execution provider first) inputs and outputs live on the
device by default (``io_binding=device``): the gated latency is the model's, not PCIe's, and the
host<->device copies are measured apart (``KernelProfile.extra["transfer"]``).  Layer times come
from CUPTI when ``cupti-python`` is installed (:mod:`pytest_roofline.backends.onnxruntime.cupti`); without it
the profiler's node times are host-side launch times, and the profile says so (``timing="host"``).
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from pytest_roofline.backends.base import (
    MAX_THREADS,
    Backend,
    BackendSession,
    ExecutedGraph,
    ExecutedNode,
    KernelProfile,
    importable,
)
from pytest_roofline.backends.bounded import on_timeout
from pytest_roofline.errors import BackendError, OptionError, ShapeError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pytest_roofline.model import ModelSpec

__all__ = ["OnnxRuntimeBackend", "OnnxRuntimeSession"]

SESSION_PREFIX = "session."
OPT_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "layout": "ORT_ENABLE_LAYOUT",
    "all": "ORT_ENABLE_ALL",
}
GPU_PROVIDERS = frozenset({"CUDAExecutionProvider", "TensorrtExecutionProvider"})
PROVIDER_ALIASES = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "trt": "TensorrtExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "dml": "DmlExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "rocm": "ROCMExecutionProvider",
}
ORT_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(int16)": np.int16,
    "tensor(uint16)": np.uint16,
    "tensor(int32)": np.int32,
    "tensor(uint32)": np.uint32,
    "tensor(int64)": np.int64,
    "tensor(uint64)": np.uint64,
    "tensor(bool)": np.bool_,
}


_GLOBAL_POOL = False  # set in a process whose sessions share one global pool (use_global_pool)
BINDING_RUNS = 2  # runs _io_binding makes: one allocates the outputs, one checks their pre-allocation


def use_global_pool(intra_op_threads: int, inter_op_threads: int = 0) -> None:
    """Make every later onnxruntime session of this process share one global thread pool.

    onnxruntime allows it only for a whole process, and a process that has it can no longer make a
    session with a pool of its own: call it only in a process made for that (the gate's helper).
    """
    global _GLOBAL_POOL
    import onnxruntime.capi._pybind_state as pybind

    pybind.set_global_thread_pool_sizes(intra_op_threads, inter_op_threads)
    _GLOBAL_POOL = True


def _non_negative_int(key: str, value: str, maximum: int = MAX_THREADS) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise OptionError(
            f"onnxruntime option {key}={value!r} must be a non-negative integer (0 = ORT default)"
        )
    if number > maximum:
        raise OptionError(f"onnxruntime option {key}={value} is out of range (at most {maximum})")
    return number


class OnnxRuntimeBackend(Backend):
    """onnxruntime, CPU by default; other execution providers through ``providers``."""

    name = "onnxruntime"
    extra = "onnxruntime"
    options_help: ClassVar[dict[str, str]] = {
        "providers": "comma-separated execution providers, first preferred (default CPUExecutionProvider)",
        "intra_op_threads": "threads inside an operator (0 = ORT default: one per physical core)",
        "inter_op_threads": "threads across operators in parallel mode (0 = ORT default)",
        "graph_optimization_level": "disable | basic | extended | layout | all (default all)",
        "execution_mode": "sequential | parallel (default sequential)",
        "session.<key>": "any SessionOptions config entry, e.g. session.intra_op.allow_spinning=0",
        "device_id": "GPU of the CUDA/TensorRT provider (default 0, as CUDA numbers visible devices)",
        "use_tf32": "CUDA provider: 1 runs float32 as TF32 on Ampere+ (ORT's default), 0 strict fp32",
        "io_binding": "GPU providers: device (default: inputs and outputs stay on the GPU) or host",
    }

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        options = dict(options or {})
        entries = {k: v for k, v in options.items() if k.startswith(SESSION_PREFIX) and len(k) > 8}
        plain = {k: v for k, v in options.items() if k not in entries}
        super().__init__(plain)
        self.options = options
        self.config_entries = {k[len(SESSION_PREFIX) :]: v for k, v in entries.items()}
        level = plain.get("graph_optimization_level", "all").lower()
        if level not in OPT_LEVELS:
            raise OptionError(
                f"onnxruntime option graph_optimization_level={level!r} is not one of {', '.join(OPT_LEVELS)}"
            )
        self.opt_level = level
        mode = plain.get("execution_mode", "sequential").lower()
        if mode not in ("sequential", "parallel"):
            raise OptionError(f"onnxruntime option execution_mode={mode!r} must be sequential or parallel")
        self.execution_mode = mode
        self.intra_op_threads = _non_negative_int("intra_op_threads", plain.get("intra_op_threads", "0"))
        self.inter_op_threads = _non_negative_int("inter_op_threads", plain.get("inter_op_threads", "0"))
        names = [p.strip() for p in plain.get("providers", "CPUExecutionProvider").split(",") if p.strip()]
        if not names:
            raise OptionError("onnxruntime option providers is empty; name at least one execution provider")
        self.providers = [PROVIDER_ALIASES.get(p.lower(), p) for p in names]
        self.on_gpu = self.providers[0] in GPU_PROVIDERS
        self.device_id = _non_negative_int("device_id", plain.get("device_id", "0"))
        self.use_tf32 = plain.get("use_tf32")
        if self.use_tf32 not in (None, "0", "1"):
            raise OptionError(f"onnxruntime option use_tf32={self.use_tf32!r} must be 0 or 1")
        self.io_binding = plain.get("io_binding", "device").lower()
        if self.io_binding not in ("device", "host"):
            raise OptionError(f"onnxruntime option io_binding={self.io_binding!r} must be device or host")
        # where inputs and outputs live during timing: the GPU's memory, or the host's
        self.io_device = "cuda" if self.on_gpu and self.io_binding == "device" else "cpu"
        if self.available():
            import onnxruntime as ort

            have = ort.get_available_providers()
            missing = [p for p in self.providers if p not in have]
            if missing:
                raise OptionError(
                    f"execution provider {missing[0]!r} is not available in this onnxruntime "
                    f"{ort.__version__} (available: {', '.join(have)})"
                )

    @classmethod
    def available(cls) -> bool:
        """Whether onnxruntime imports."""
        return importable("onnxruntime")

    def version(self) -> str:
        """onnxruntime's version."""
        import onnxruntime as ort

        return ort.__version__

    def fingerprint(self) -> dict[str, Any]:
        """Runtime, providers, threads and CPU: what a timing depends on."""
        from pytest_roofline.device import cpu_info

        cpu = cpu_info()
        data: dict[str, Any] = {
            "backend": self.name,
            "version": self.version(),
            "providers": list(self.providers),
            "intra_op_threads": self.intra_op_threads,
            "inter_op_threads": self.inter_op_threads,
            "execution_mode": self.execution_mode,
            "graph_optimization_level": self.opt_level,
            "cpu": cpu.model,
            "cores": cpu.cores,
            "simd": cpu.to_dict()["simd"],
        }
        if self.on_gpu:  # the device class is the GPU; the host stays in the fingerprint
            from pytest_roofline.device.gpu import gpu_fingerprint

            data.update(
                gpu=gpu_fingerprint(self.device_id),
                device_id=self.device_id,
                use_tf32=self.use_tf32 if self.use_tf32 is not None else "default",
                io_binding=self.io_binding,
            )
        return data

    def float32_mode(self) -> str:
        """How this configuration runs float32: ``tf32`` (Ampere+ CUDA/TensorRT EP unless
        ``use_tf32=0``), ``fp32``, or ``""`` on the CPU."""
        if not self.on_gpu:
            return ""
        from pytest_roofline.device.gpu import gpu_info

        info = gpu_info(self.device_id)
        tf32_capable = info.tf32_default if info is not None else True
        return "tf32" if tf32_capable and self.use_tf32 != "0" else "fp32"

    def provider_list(self) -> list[Any]:
        """``providers=`` for ``InferenceSession``: GPU providers carry device_id (and use_tf32)."""
        result: list[Any] = []
        for name in self.providers:
            if name in GPU_PROVIDERS:
                options = {"device_id": str(self.device_id)}
                if name == "CUDAExecutionProvider" and self.use_tf32 is not None:
                    options["use_tf32"] = self.use_tf32
                result.append((name, options))
            else:
                result.append(name)
        return result

    def device_kernel_times(self) -> bool:
        """On a GPU with CUPTI: layers are timed by the device's kernel times (see the base class)."""
        if not self.on_gpu:
            return False
        from pytest_roofline.backends.onnxruntime.cupti import cupti_available

        return cupti_available()

    def single_thread(self) -> OnnxRuntimeBackend | None:
        """This configuration at ``intra_op_threads=1`` when it runs a multi-threaded CPU pool."""
        if self.on_gpu or self.intra_op_threads == 1 or self.execution_mode != "sequential":
            return None
        return OnnxRuntimeBackend({**self.options, "intra_op_threads": "1"})

    def thread_timed_copy(self) -> OnnxRuntimeBackend | None:
        """This configuration timed by the calling thread's CPU time, when it runs one intra-op
        thread, sequentially, on the CPU: onnxruntime then makes no pool and runs every kernel on
        the calling thread (no thread is added when such a session opens), so that thread's CPU
        time is the run's whole work."""
        if self.on_gpu or self.intra_op_threads != 1 or self.execution_mode != "sequential":
            return None
        copy = OnnxRuntimeBackend(self.options)
        copy.thread_timed = True
        return copy

    def own_bytes_copy(self) -> OnnxRuntimeBackend:
        """This configuration, each timing session loading the model from its own fresh copy of the
        file's bytes (a model on disk without external data; :meth:`OnnxRuntimeSession.__init__`).

        Loaded from the path, A/A pairings of GPT-2 with KV cache (an identical file, one thread,
        8 sessions x 5 rounds, in one process) read 0.926-1.127 with session standard errors of
        ~1 %: chi^2/df of pairing means against their errors 5.6-57, quiet and beside one busy
        process.  Loaded from bytes kept as long as the session, 0.943-1.048, chi^2/df 2.0-3.1:
        smaller, not gone (docs/measurements.md, "gate_under_load, round four").
        """
        import copy

        engine = copy.copy(self)
        engine.own_model_bytes = True
        return engine

    def shared_pool_threads(self) -> int | None:
        """Intra-op threads of the pool the gate's sessions should share (see :func:`use_global_pool`).

        Two onnxruntime sessions alive in one process each own an intra-op pool, and when the gate
        interleaves them (model, control probe, model, ...) the pools fight for the cores: measured
        here at 2 threads on 2 cores, the same model in two sessions read ±20 % apart per session
        and the probe-normalized figure's process medians spread 24 %; with one shared pool, 0.7 %.
        A single thread has no pool (nothing to share), and a GPU provider times the device.
        """
        if self.on_gpu or self.intra_op_threads == 1 or self.execution_mode != "sequential":
            return None
        return self.intra_op_threads

    def session_options(self, profile_dir: str | None = None) -> Any:
        """``SessionOptions`` for these options; profiling and graph dump into ``profile_dir``."""
        import onnxruntime as ort

        so = ort.SessionOptions()
        if _GLOBAL_POOL:
            so.use_per_session_threads = False
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPT_LEVELS[self.opt_level])
        modes = ort.ExecutionMode
        so.execution_mode = modes.ORT_PARALLEL if self.execution_mode == "parallel" else modes.ORT_SEQUENTIAL
        so.intra_op_num_threads = self.intra_op_threads
        so.inter_op_num_threads = self.inter_op_threads
        so.log_severity_level = 4  # fatal only: run errors are raised as one-line BackendErrors
        for key, value in self.config_entries.items():
            try:
                so.add_session_config_entry(key, value)
            except Exception as exc:
                message = f"onnxruntime rejected session.{key}={value!r}: {_first_line(exc)}"
                raise OptionError(message) from None
        if profile_dir is not None:
            so.enable_profiling = True
            so.profile_file_prefix = os.path.join(profile_dir, "ort_profile")
            so.optimized_model_filepath = os.path.join(profile_dir, "optimized.onnx")
            # weights go to a side file so that a large model's dump stays small and loadable
            prefix = "session.optimized_model_external_initializers_"
            so.add_session_config_entry(prefix + "file_name", "optimized.data")
            so.add_session_config_entry(prefix + "min_size_in_bytes", "1024")
        return so

    def open(self, spec: ModelSpec, inputs: Mapping[str, np.ndarray]) -> OnnxRuntimeSession:
        """Create the timing session and check ``inputs`` against the model's inputs."""
        return OnnxRuntimeSession(self, spec, inputs)


def _executed_graph(optimized: Any, original: Any) -> ExecutedGraph | None:
    """The main graph onnxruntime ran, from its optimized-graph dump (None without one), with the
    shapes its planner knew of the model's tensors (:func:`_declared_shapes`)."""
    if optimized is None:
        return None
    graph = optimized.graph
    initializers = frozenset(init.name for init in graph.initializer)
    nodes = tuple(
        ExecutedNode(node.name, node.op_type, tuple(node.input), tuple(node.output), node.domain)
        for node in graph.node
    )
    written = {t for node in nodes for t in node.outputs if t}
    declared = _declared_shapes(original)
    return ExecutedGraph(
        nodes=nodes,
        inputs=frozenset(i.name for i in graph.input) - initializers,
        outputs=tuple(o.name for o in graph.output),
        initializers=initializers,
        declared={name: dims for name, dims in declared.items() if name in written},
    )


def _declared_shapes(model: Any) -> dict[str, tuple[int | str | None, ...] | None]:
    """The model's tensors' shapes as ONNX shape inference gives them from its declared inputs
    (symbolic dims stay symbols): what onnxruntime's allocation planner reuses buffers by.  Large
    weights are passed by their dims only."""
    import onnx

    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    graph = light.graph
    graph.node.extend(model.graph.node)
    graph.input.extend(model.graph.input)
    graph.output.extend(model.graph.output)
    for init in model.graph.initializer:
        small = init.data_location != onnx.TensorProto.EXTERNAL and init.ByteSize() <= 4096
        graph.initializer.append(
            init if small else onnx.TensorProto(name=init.name, data_type=init.data_type, dims=init.dims)
        )
    try:
        inferred = onnx.shape_inference.infer_shapes(light, data_prop=True)
    except Exception:  # a model ONNX cannot infer: the planner is modelled with the run's shapes
        return {}
    shapes: dict[str, tuple[int | str | None, ...] | None] = {}
    for info in (*inferred.graph.value_info, *inferred.graph.output):
        tensor = info.type.tensor_type
        if not tensor.HasField("shape"):
            shapes[info.name] = None
            continue
        shapes[info.name] = tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim
        )
    return shapes


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for prefix in ("[ONNXRuntimeError] : ",):
        if prefix in text:
            text = text.split(prefix, 1)[1]
    return text.splitlines()[0] if text else type(exc).__name__


class OnnxRuntimeSession(BackendSession):
    """A model loaded in onnxruntime with its inputs bound as ``OrtValue``s."""

    def __init__(
        self, backend: OnnxRuntimeBackend, spec: ModelSpec, inputs: Mapping[str, np.ndarray]
    ) -> None:
        import onnxruntime as ort

        self.backend = backend
        self.spec = spec
        self.inputs = {name: np.asarray(value, order="C") for name, value in inputs.items()}  # 0-d stays 0-d
        self._payload = self._model_payload()
        self.session = self._create(backend.session_options(), own_bytes=backend.own_model_bytes)
        self._check_inputs()
        self._device, self._device_id = backend.io_device, backend.device_id
        self._helpers: list[Any] = []  # sessions that made device values (kept alive with them)
        types = {i.name: i.type for i in self.session.get_inputs()}
        self._feeds = {name: self._value(arr, types.get(name, "")) for name, arr in self.inputs.items()}
        self._output_names = [o.name for o in self.session.get_outputs()]
        self._binding: Any = None
        self._unallocated: tuple[str, ...] = ()  # outputs each timed run allocates (_io_binding)
        #: outputs whose produced shape differs from the declared one (a note, never a failure)
        self.output_notes: tuple[str, ...] = ()
        # every run takes these options: a bounded measurement past its timeout sets ``terminate``,
        # which stops the run between two nodes (a Loop's body included); severity 4 keeps ORT from
        # logging that stop, or any failure, a second time (the exception carries the message).
        # gpu_graph_id=0 is ORT's default graph id, set explicitly because onnxruntime 1.32's
        # Python wrapper otherwise looks it up through a C++ exception on every call: 30.7 us per
        # inference instead of 2.1 us on a one-Relu model (benchmarks/ort_overhead.py --tiny).
        self._run_options = ort.RunOptions()
        self._run_options.log_severity_level = 4
        self._run_options.add_run_config_entry("gpu_graph_id", "0")
        on_timeout(self._stop)

    def _stop(self) -> None:
        """Make the running and every later run of this session fail at the next node."""
        self._run_options.terminate = True

    def _value(self, array: np.ndarray, ort_type: str) -> Any:
        """An ``OrtValue`` of ``array`` where timing binds it: host memory, or the GPU's.

        A ``bfloat16`` input (numpy has no bfloat16) is given as float32 and cast on the device.
        """
        import onnxruntime as ort

        if ort_type == "tensor(bfloat16)":
            return self._bfloat16_value(array.astype(np.float32, copy=False))
        if self._device == "cpu":
            return ort.OrtValue.ortvalue_from_numpy(array)
        try:
            return ort.OrtValue.ortvalue_from_numpy(array, self._device, self._device_id)
        except Exception as exc:
            raise BackendError(
                f"onnxruntime cannot place an input on {self._device}: {_first_line(exc)}"
            ) from None

    def _bfloat16_value(self, array: np.ndarray) -> Any:
        """``array`` cast to bfloat16 by a one-node session on this backend, output bound in place."""
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper

        shape = list(array.shape)
        graph = helper.make_graph(
            [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)],
            "to_bfloat16",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, shape)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = min(model.ir_version, 8)
        onnx.checker.check_model(model)
        try:
            options = ort.SessionOptions()
            options.log_severity_level = 4
            if _GLOBAL_POOL:  # a process with a global pool allows no session a pool of its own
                options.use_per_session_threads = False
            cast = ort.InferenceSession(
                model.SerializeToString(), options, providers=self.backend.provider_list()
            )
            binding = cast.io_binding()
            binding.bind_cpu_input("x", array)
            try:  # memory owned by the value itself, not by the helper session's arena
                value = ort.OrtValue.ortvalue_from_shape_and_type(
                    shape, TensorProto.BFLOAT16, self._device, self._device_id
                )
                binding.bind_ortvalue_output("y", value)
            except Exception:
                value = None
                binding.bind_output("y", self._device, self._device_id)
            cast.run_with_iobinding(binding)
        except Exception as exc:
            raise BackendError(f"onnxruntime cannot make a bfloat16 input: {_first_line(exc)}") from None
        self._helpers.append(cast)
        return value if value is not None else binding.get_outputs()[0]

    def _bound(self) -> Any:
        """An IOBinding with the inputs and pre-allocated outputs bound (built on first use).

        Measured on MobileNetV2 (1 thread, same session, interleaved): ``run`` with numpy 4.23 ms,
        ``run_with_ort_values`` 4.31 ms (it wraps every output per call), IOBinding with bound
        outputs 4.18 ms: the timed loop must not add what a bare loop doesn't pay.
        """
        if self._binding is None:
            self._binding, self._unallocated = self._io_binding(self.session)
        return self._binding

    def _io_binding(self, session: Any) -> tuple[Any, tuple[str, ...]]:
        """``session``'s inputs bound, outputs pre-allocated where onnxruntime takes them (two runs);
        the outputs left unallocated, which :meth:`_unbind` must free before each run.

        onnxruntime checks a pre-allocated output against the model's declared shape, which a bare
        ``run`` only warns about: a stale declaration (a Squeeze output declared rank 1 in
        ``value_info``, produced rank 2) failed every timed run with ``Invalid rank for output``.
        Such an output, and every output of a model whose output shapes change from run to run
        (``NonZero`` of a random mask), is bound unallocated: onnxruntime allocates it each run, as
        a bare run does.
        """
        first = self._binding_of(session, {})
        session.run_with_iobinding(first, self._run_options)  # allocates outputs of the right shapes
        declared = {meta.name: list(meta.shape) for meta in session.get_outputs()}
        kept = {
            name: value
            for name, value in zip(self._output_names, first.get_outputs(), strict=True)
            if _fits(declared.get(name), _shape_of(value))
        }
        binding = self._binding_of(session, kept)
        try:  # a pre-allocated output whose shape the next run changes is refused here
            session.run_with_iobinding(binding, self._run_options)
        except Exception:
            binding, kept = self._binding_of(session, {}), {}
        return binding, tuple(name for name in self._output_names if name not in kept)

    def _unbind(self, binding: Any, names: tuple[str, ...]) -> None:
        """Free ``names`` in ``binding``: a run leaves its values bound, pre-allocated to the next."""
        for name in names:
            binding.bind_output(name, self._device, self._device_id)

    def _binding_of(self, session: Any, outputs: Mapping[str, Any]) -> Any:
        """An IOBinding of the inputs, ``outputs`` pre-allocated, the others allocated by each run."""
        binding = session.io_binding()
        for name, value in self._feeds.items():
            binding.bind_ortvalue_input(name, value)
        for name in self._output_names:
            if name in outputs:
                binding.bind_ortvalue_output(name, outputs[name])
            else:
                binding.bind_output(name, self._device, self._device_id)
        return binding

    def _model_payload(self) -> str | bytes:
        path = self.spec.path
        if path is not None:
            return str(path)
        return self.spec.source.SerializeToString()  # type: ignore[union-attr]

    def _create(self, options: Any, own_bytes: bool = False) -> Any:
        """An ``InferenceSession`` of the model; ``own_bytes``: from a fresh read of the file's
        bytes, kept as long as the session (freed at once, GPT-2 KV's A/A pairings kept more of
        their per-pairing spread: chi^2/df 4.2-14.8 against 2.0-3.1), the path again where that fails
        (external data: the bytes carry no folder to find it in)."""
        import onnxruntime as ort

        providers = self.backend.provider_list()
        if own_bytes and self.spec.path is not None:
            payload = self.spec.path.read_bytes()
            try:
                session = ort.InferenceSession(payload, options, providers=providers)
            except Exception:
                pass  # the path below loads it, or raises what is wrong with it
            else:
                self._payload = payload
                return session
        try:
            return ort.InferenceSession(self._payload, options, providers=providers)
        except Exception as exc:
            raise BackendError(f"onnxruntime cannot load {self.spec.name}: {_first_line(exc)}") from None

    def _check_inputs(self) -> None:
        expected = {i.name: i for i in self.session.get_inputs()}
        missing = sorted(set(expected) - set(self.inputs))
        if missing:
            names = ", ".join(expected)
            raise ShapeError(f"input {missing[0]!r} of {self.spec.name} is not given (inputs: {names})")
        extra = sorted(set(self.inputs) - set(expected))
        if extra:
            raise ShapeError(f"{self.spec.name} has no input {extra[0]!r} (inputs: {', '.join(expected)})")
        for name, meta in expected.items():
            array = self.inputs[name]
            dtype = ORT_DTYPES.get(meta.type)
            if dtype is not None and array.dtype != np.dtype(dtype):
                raise ShapeError(
                    f"input {name!r} expects {np.dtype(dtype).name} {_shape_text(meta.shape)}, "
                    f"got {array.dtype.name} {list(array.shape)}"
                )
            shape = list(meta.shape)
            if not _fits(shape, list(array.shape)):
                raise ShapeError(
                    f"input {name!r} expects shape {_shape_text(shape)}, got {list(array.shape)}"
                    f" ({array.dtype.name})"
                )

    def _run(self, session: Any, feeds: Mapping[str, Any]) -> Any:
        try:
            return session.run_with_ort_values(self._output_names, feeds, self._run_options)
        except Exception as exc:
            raise BackendError(f"onnxruntime failed to run {self.spec.name}: {_first_line(exc)}") from None

    def time(self, iterations: int) -> list[float]:
        """Seconds per inference, profiler off, inputs and outputs pre-bound; ``perf_counter_ns`` per call
        (the thread's CPU time, ``thread_time_ns``, on a :meth:`~OnnxRuntimeBackend.thread_timed_copy`).

        On a GPU each sample ends when the outputs are ready on the device (onnxruntime
        synchronizes its stream at the end of a run; ``synchronize_outputs`` makes sure).  A run
        that refuses a pre-allocated output (its shape changed since: a data-dependent output) is
        timed again with every output allocated by the run.
        """
        try:
            return self._timed(iterations)
        except Exception as exc:
            error = exc
            if self._binding is not None and len(self._unallocated) < len(self._output_names):
                self._binding, self._unallocated = (
                    self._binding_of(self.session, {}),
                    tuple(self._output_names),
                )
                try:
                    return self._timed(iterations)
                except Exception as again:
                    error = again
        raise BackendError(f"onnxruntime failed to run {self.spec.name}: {_first_line(error)}") from None

    def _timed(self, iterations: int) -> list[float]:
        # the thread's CPU time on a one-thread CPU session that asked for it (thread_timed_copy)
        clock = time.thread_time_ns if self.backend.thread_timed else time.perf_counter_ns
        samples: list[float] = []
        run, binding, options = self.session.run_with_iobinding, self._bound(), self._run_options
        unbind, unallocated = self._unbind, self._unallocated
        if self._device == "cpu":
            for _ in range(iterations):
                if unallocated:  # outside the timed call: a bare run's outputs start unallocated
                    unbind(binding, unallocated)
                start = clock()
                run(binding, options)
                samples.append((clock() - start) * 1e-9)
        else:
            sync = binding.synchronize_outputs
            for _ in range(iterations):
                if unallocated:
                    unbind(binding, unallocated)
                start = clock()
                run(binding, options)
                sync()
                samples.append((clock() - start) * 1e-9)
        return samples

    def device_time(self, iterations: int) -> list[float]:
        """GPU time of each of ``iterations`` runs of this session (CUPTI's kernel, memcpy and
        memset records inside each run), no profiler and no second session; [] off a GPU timed
        by CUPTI (:meth:`OnnxRuntimeBackend.device_kernel_times`)."""
        if not self.backend.device_kernel_times():
            return []
        from pytest_roofline.backends.onnxruntime.cupti import CuptiRecorder, run_device_seconds

        run, binding, options = self.session.run_with_iobinding, self._bound(), self._run_options
        sync, unbind, unallocated = binding.synchronize_outputs, self._unbind, self._unallocated
        runs: list[tuple[int, int]] = []
        recorder = CuptiRecorder()
        try:
            with recorder:
                for _ in range(iterations):
                    if unallocated:
                        unbind(binding, unallocated)
                    start = time.time_ns()
                    run(binding, options)
                    sync()
                    runs.append((start, time.time_ns()))
        except Exception as exc:
            raise BackendError(f"onnxruntime failed to run {self.spec.name}: {_first_line(exc)}") from None
        return run_device_seconds(recorder.trace(), runs)

    def profile(self, iterations: int, warmup: int = 1) -> KernelProfile:
        """Run a separate profiling session ``iterations`` times (after ``warmup``) and attribute it.

        On a GPU provider the runs use device-bound inputs and outputs; layer times are CUPTI's
        GPU times when ``cupti-python`` works here, else host-side launch times (``timing="host"``).
        """
        import onnx

        from pytest_roofline.backends.onnxruntime.attribution import attribute, kernel_events, load_trace
        from pytest_roofline.model import load_model

        extra: dict[str, Any] = {}
        timing, source, resolution = "device", "onnxruntime profiler", 1e-6
        skip = warmup
        produced: list[list[int] | None] = []  # the outputs' shapes, CPU runs
        with tempfile.TemporaryDirectory(prefix="roofline-ort-") as tmp:
            session = self._create(self.backend.session_options(tmp))
            if self.backend.on_gpu:
                events, gpu = self._profile_gpu(session, iterations, warmup)
                skip = max(warmup, BINDING_RUNS)  # the binding's two runs are the first warm-ups
                extra["transfer"] = self._transfer(session)
                if gpu is not None:
                    extra["gpu"] = gpu.summary()
                    events, source, resolution = gpu.events, "CUPTI", 1e-9
                else:
                    timing, source = "host", "onnxruntime profiler (host-side launch times)"
                    extra["gpu"] = {"timing": "host", "reason": self._no_gpu_timer}
            else:
                feeds = {k: v for k, v in self._feeds.items()}
                for index in range(warmup + iterations):
                    values = self._run(session, feeds)
                    if index == 0:
                        produced = [_shape_of(v) for v in values]
                    del values  # one run's outputs freed before the next: prof.memory is one inference's
                path = session.end_profiling()
                events = load_trace(path) if path and os.path.exists(path) else []
            del session
            optimized_path = os.path.join(tmp, "optimized.onnx")
            optimized = None
            if os.path.exists(optimized_path):
                try:
                    optimized = onnx.load(optimized_path, load_external_data=False)
                except Exception:  # an unreadable dump only costs the fusion mapping
                    optimized = None
        # the CPU profiler's durations are whole microseconds, truncated; CUPTI's are nanoseconds
        kernels = kernel_events(events, skip_runs=skip, truncated_to=0.0 if source == "CUPTI" else 1.0)
        original = load_model(self.spec.source)
        if not self.backend.on_gpu:
            self.output_notes = _output_shape_notes(original, self._output_names, produced)
            if self.output_notes:
                extra["notes"] = list(self.output_notes)
        result = attribute(original, optimized, kernels, iterations)
        return KernelProfile(
            kernels=result.kernels,
            folded=result.folded,
            iterations=iterations,
            precision=_precision(original),
            trace_events=tuple(events),
            timing=timing,
            timing_source=source,
            timer_resolution=resolution,
            extra=extra,
            executed=_executed_graph(optimized, original),
        )

    _no_gpu_timer = "no GPU timer: cupti-python is not installed or CUPTI cannot be loaded"

    def _profile_gpu(self, session: Any, iterations: int, warmup: int) -> tuple[list[dict[str, Any]], Any]:
        """Profiled runs on a GPU provider: (profiler events, GpuTiming or None without CUPTI)."""
        from pytest_roofline.backends.onnxruntime.attribution import load_trace
        from pytest_roofline.backends.onnxruntime.cupti import (
            CuptiRecorder,
            cupti_available,
            map_gpu_activity,
        )

        try:
            binding, unallocated = self._io_binding(session)
            run, sync, options = session.run_with_iobinding, binding.synchronize_outputs, self._run_options

            def once() -> None:
                self._unbind(binding, unallocated)
                run(binding, options)
                sync()

            for _ in range(max(warmup, BINDING_RUNS) - BINDING_RUNS):
                once()
            recorder = CuptiRecorder() if cupti_available() else None
            if recorder is not None:
                with recorder:
                    for _ in range(iterations):
                        once()
            else:
                for _ in range(iterations):
                    once()
        except Exception as exc:
            raise BackendError(f"onnxruntime failed to run {self.spec.name}: {_first_line(exc)}") from None
        path = session.end_profiling()
        start_ns = int(session.get_profiling_start_time_ns())
        events = load_trace(path) if path and os.path.exists(path) else []
        if recorder is None:
            self._no_gpu_timer = type(self)._no_gpu_timer
            return events, None
        timing = map_gpu_activity(events, start_ns, recorder.trace(), skip_runs=max(warmup, BINDING_RUNS))
        if not timing.activities:
            self._no_gpu_timer = "CUPTI recorded no GPU activity during the profiled runs"
            return events, None
        return timing.events, timing

    def _transfer(self, session: Any, repeats: int = 5) -> dict[str, Any]:
        """Host->device copy of the inputs and device->host copy of the outputs (medians, seconds).

        Reported beside the gated latency, never in it: with ``io_binding=device`` timing keeps
        inputs and outputs on the GPU; with ``io_binding=host`` the copies are in the latency.
        """
        import statistics

        import onnxruntime as ort

        if self._device == "cpu":
            return {"included_in_latency": True, "io_binding": self.backend.io_binding}
        outputs = self._bound().get_outputs()  # the last run's values, allocated or not
        h2d, d2h, out_bytes = [], [], 0
        for _ in range(repeats):
            start = time.perf_counter()
            for array in self.inputs.values():
                ort.OrtValue.ortvalue_from_numpy(array, self._device, self._device_id)
            h2d.append(time.perf_counter() - start)
            start = time.perf_counter()
            out_bytes = sum(int(value.numpy().nbytes) for value in outputs)
            d2h.append(time.perf_counter() - start)
        return {
            "included_in_latency": False,
            "h2d": statistics.median(h2d),
            "d2h": statistics.median(d2h),
            "h2d_bytes": sum(int(a.nbytes) for a in self.inputs.values()),
            "d2h_bytes": out_bytes,
        }

    def outputs(self) -> dict[str, np.ndarray]:
        """One inference's outputs by name."""
        values = self._run(self.session, self._feeds)
        return {name: value.numpy() for name, value in zip(self._output_names, values, strict=True)}

    def close(self) -> None:
        """Release the ORT session and the values bound to it (device memory on a GPU)."""
        self.session = None
        self._feeds = {}
        self._binding = None
        self._helpers = []


def _precision(model: Any) -> str:
    """int4 | int8 | fp16 | bf16 | fp32 | mixed (see :mod:`pytest_roofline.model.precision`)."""
    from pytest_roofline.model.precision import model_precision

    return model_precision(model)


def _shape_of(value: Any) -> list[int] | None:
    """An OrtValue's shape; None for a sequence or map (no tensor shape)."""
    try:
        return list(value.shape()) if value.is_tensor() else None
    except Exception:
        return None


def _declared_dim(dim: Any) -> int | str:
    return int(dim.dim_value) if dim.HasField("dim_value") else (dim.dim_param or "?")


def _output_shape_notes(model: Any, names: list[str], produced: list[list[int] | None]) -> tuple[str, ...]:
    """One note per graph output whose produced shape disagrees with its declared rank or fixed
    sizes (an exporter's stale shape): onnxruntime warns and runs, and so does roofline."""
    declared_by_name = {
        vi.name: [_declared_dim(d) for d in vi.type.tensor_type.shape.dim]
        for vi in model.graph.output
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")
    }
    notes = []
    for name, shape in zip(names, produced, strict=False):
        declared = declared_by_name.get(name)
        if declared is None or shape is None:
            continue
        if not _fits(declared, shape):
            notes.append(
                f"output {name!r} is declared {_shape_text(declared)} but the kernels produce "
                f"{_shape_text(list(shape))}; onnxruntime runs it (the model's declared shape is stale)"
            )
    return tuple(notes)


def _fits(declared: list[Any] | None, shape: list[int] | None) -> bool:
    """Whether a produced ``shape`` has the ``declared`` rank and fixed sizes (None: no tensor)."""
    if declared is None or shape is None:
        return declared is None and shape is None
    return len(declared) == len(shape) and all(
        not isinstance(d, int) or d <= 0 or d == s for d, s in zip(declared, shape, strict=True)
    )


def _shape_text(shape: list[Any]) -> str:
    return "[" + ", ".join(str(d) if d is not None else "?" for d in shape) + "]"
