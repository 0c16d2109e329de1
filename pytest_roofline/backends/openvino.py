"""OpenVINO backend: compile once without profiling (timing), once with PERF_COUNT (profile).

Per-node counters of ``InferRequest.get_profiling_info()`` are running averages over all of the
request's inferences in whole microseconds (measured with 2026.4.1; reference/FORMATS.md §2.1
says "last inference only", which the numbers contradict), so a profile reads them before and
after its iterations and reports each primitive's mean over exactly those iterations.  Attribution uses the
runtime model: each executed primitive's rt_info ``originalLayersNames`` names the ONNX nodes it
runs, completed by tensor boundaries where that list is short (a FullyConnected named after its
output tensor omits its MatMul, §2.2).  Inserted reorders are layout kernels serving the primitive
that consumes them; nodes fused away (NOT_RUN, OPTIMIZED_OUT, or constant-folded at load) are
reported as folded.
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_roofline.errors import BackendError, ModelUnsupported, OptionError
from pytest_roofline.model import load_model

from .attribution import EPILOGUE_OPS, GraphIndex, enclosing_nodes, nearest_mapped
from .base import MAX_THREADS, Backend, BackendSession, KernelProfile, KernelRecord, importable

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    import numpy as np

    from pytest_roofline.model import ModelSpec

__all__ = ["OpenVinoBackend", "OpenVinoSession", "attribute_runtime_model"]

_HINTS = {"latency": "LATENCY", "throughput": "THROUGHPUT", "none": None}
_PRECISIONS = {"f32": "f32", "fp32": "f32", "f16": "f16", "fp16": "f16", "bf16": "bf16"}
_PRECISION_NAMES = {"f32": "fp32", "f16": "fp16", "bf16": "bf16", "i8": "int8", "u8": "int8"}
_INDEX_TYPES = {"i32", "i64", "u32", "u64", "boolean", "u1", "dynamic", "undefined"}
_NOT_COMPUTE = {"Parameter", "Result", "Const", "Constant", "Input", "Output"}


@dataclass(frozen=True)
class RuntimeOp:
    """One op of the compiled (runtime) model, the part of its rt_info attribution needs."""

    name: str
    layer_type: str
    original_names: tuple[str, ...]
    precision: str
    inputs: tuple[str, ...]  # names of the runtime ops feeding it
    io_bytes: int | None = None  # bytes of its input and output tensors (None: a dynamic shape)

    @property
    def is_reorder(self) -> bool:
        """A layout/precision conversion the plugin inserted (no original layer)."""
        return self.layer_type == "Reorder" and not self.original_names


def _rt_value(info: Any, key: str) -> str:
    if key not in info.keys():
        return ""
    value = info[key]
    return value.astype(str) if hasattr(value, "astype") else str(value)


def _tensor_bytes(port: Any) -> int | None:
    """Bytes of one runtime tensor (an op's output port) at its runtime element type."""
    shape = port.get_partial_shape()
    if not shape.is_static:
        return None
    numel = 1
    for dim in shape.to_shape():
        numel *= int(dim)
    return (numel * port.get_element_type().bitwidth + 7) // 8


def _io_bytes(op: Any) -> int | None:
    """What a runtime op reads and writes at most: every input and output tensor once, whole."""
    ports = [i.get_source_output() for i in op.inputs()] + list(op.outputs())
    sizes = [_tensor_bytes(port) for port in ports]
    return None if any(size is None for size in sizes) else sum(s for s in sizes if s is not None)


def read_runtime_ops(compiled_model: Any) -> list[RuntimeOp]:
    """The runtime model's ops with their rt_info (``compiled_model.get_runtime_model()``)."""
    ops = []
    for op in compiled_model.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        names = tuple(n.strip() for n in _rt_value(info, "originalLayersNames").split(",") if n.strip())
        ops.append(
            RuntimeOp(
                name=op.get_friendly_name(),
                layer_type=_rt_value(info, "layerType") or op.get_type_name(),
                original_names=names,
                precision=_rt_value(info, "runtimePrecision"),
                inputs=tuple(i.get_source_output().get_node().get_friendly_name() for i in op.inputs()),
                io_bytes=_io_bytes(op),
            )
        )
    return ops


@dataclass(frozen=True)
class Attribution:
    """What each runtime op executes: ONNX nodes, kind, and the layer a layout op serves."""

    nodes: dict[str, tuple[str, ...]]
    kind: dict[str, str]
    serves: dict[str, str | None]
    portion: dict[str, float] = field(default_factory=dict)  # op -> share of its nodes it runs


def attribute_runtime_model(
    ops: list[RuntimeOp], index: GraphIndex, executed: Collection[str] | None = None
) -> Attribution:
    """Map every runtime op to ONNX nodes: ``originalLayersNames``, then tensor boundaries.

    1. Names: ``originalLayersNames`` and the op's own name, resolved against the ONNX graph.
    1c. Ops named after an OpenVINO op type that has one ONNX counterpart (``ReduceMean_<n>``,
       ``Power_<n>``, ``MVN_<n>``) take the nearest unclaimed node of that type their input
       tensors feed, within two nodes: a spelled-out LayerNorm's ``ReduceMean_9398`` its mean,
       ``Power_9401`` its Pow (rule 3 then adds the Sub before it).
    1b. Recurrent sequence ops (``RNNSeq``: ``LSTMSequence_<n>``) take the LSTM/GRU/RNN node
       between their input tensors and the tensors their consumers read; a bidirectional node
       runs as one sequence op per direction, each running ``portion`` 1/2 of it.
    2. Ops whose names are the plugin's own (``MVN_18`` from a decomposed LayerNormalization)
       take the unclaimed nodes between their input tensors and the tensors their consumers read;
       a plugin-made elementwise op (``Multiply_<n>``) takes no MatMul or Conv that way (the
       attention scale OpenVINO moves onto K would take the QK MatMul its MHA Subgraph runs).
    3. Named ops take the unclaimed nodes between their input tensors and their outputs (a
       FullyConnected named ``y`` gains the MatMul its list omits).
    3b. Named ops take the unclaimed elementwise epilogues of their nodes whose other operands
       are weights (the bias ``Add`` a FullyConnected named after its MatMul runs).
    4. Ops still unmapped that the plugin split off a node (``Multiply_10147``: the attention
       scale moved onto K) share the node of their type found downstream.
    5. Ops still unmapped (other than precision Converts) that sit inside one node's
       decomposition share that node (:func:`~.attribution.enclosing_nodes`): ``Abs_<n>`` of
       ``Cast(int64->bool)``, ``IsNaN_<n>`` and ``ScaledDotProductAttention_<n>`` of ``Attention``.

    Every region stops at the tensors other ops' nodes produce: it never reaches through
    another kernel (a plugin-made dequantizing ``Multiply_<n>`` between two int8 Convolutions
    took every unclaimed DequantizeLinear and Sigmoid of the block between them).

    A node listed by several ops is executed by all of them; :func:`build_kernel_profile`
    counts its cost once, in the longest-running one.

    Only ``executed`` ops (default: all) take nodes by boundary: constant subgraphs never run.
    """
    by_name = {op.name: op for op in ops}
    consumers: dict[str, list[str]] = {}
    for op in ops:
        for src in op.inputs:
            consumers.setdefault(src, []).append(op.name)
    resolved = {op.name: index.resolve_all((*op.original_names, op.name)) for op in ops}
    claimed = {n for nodes in resolved.values() for n in nodes}
    compute = [
        op
        for op in ops
        if not op.is_reorder
        and op.layer_type not in _NOT_COMPUTE
        and (executed is None or op.name in executed)
    ]

    def upstream(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        """ONNX tensors the runtime op ``name`` yields, looking through reorders and unmapped ops."""
        op = by_name.get(name)
        if op is None or name in seen:
            return set()
        if op.layer_type in ("Parameter", "Input"):
            return {op.name}
        if resolved[name]:
            return {t for n in resolved[name] for t in index.node_outputs[n]}
        return {t for src in op.inputs for t in upstream(src, seen | {name})}

    def downstream_reads(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        """ONNX tensors the consumers of ``name`` read, looking through reorders and unmapped
        ops that never ran (the Reshape and Concat after a bidirectional LSTM's two directions)."""
        reads: set[str] = set()
        for consumer in consumers.get(name, ()):
            if consumer in seen:
                continue
            if resolved[consumer]:
                reads |= {t for n in resolved[consumer] for t in index.node_inputs[n]}
            elif by_name[consumer].is_reorder or (executed is not None and consumer not in executed):
                reads |= downstream_reads(consumer, seen | {name})
        return reads

    def others(op: RuntimeOp) -> set[str]:
        """Tensors produced by nodes other ops claimed: a region of ``op`` does not cross them."""
        own = set(resolved[op.name])
        return {t for n in claimed if n not in own for t in index.node_outputs[n]}

    def region(op: RuntimeOp, outputs: set[str]) -> tuple[str, ...]:
        inputs = {t for src in op.inputs for t in upstream(src)}
        # with connectivity, only what the op's inputs reach: an output Convert bounded by the
        # last Gemm's own input would otherwise take every unclaimed node upstream of it
        return index.between(inputs, outputs, from_inputs=bool(op.inputs), stop=others(op))

    def fill(op: RuntimeOp, outputs: set[str]) -> None:
        extra = [n for n in region(op, outputs) if n not in claimed]
        if not resolved[op.name] and (
            _elementwise_helper(op.name) or op.layer_type not in _CONTRACTING_KERNELS
        ):
            # a plugin-made elementwise op (``Multiply_4968``: the attention scale moved onto K),
            # or a kernel that contracts nothing (a LayerNorm's ``MVN_61`` before a FullyConnected
            # named after its bias Add), runs no MatMul or Conv of its region: those are left to
            # the op consuming it
            extra = [n for n in extra if index.op_types[n] not in _CONTRACTION_OPS]
        claimed.update(extra)
        resolved[op.name] = tuple(sorted({*resolved[op.name], *extra}, key=index.position))

    recurrent: dict[str, tuple[str, ...]] = {}
    for op in compute:
        if not resolved[op.name] and _is_sequence(op):
            found = [n for n in region(op, downstream_reads(op.name)) if index.op_types[n] in _RECURRENT_OPS]
            recurrent[op.name] = resolved[op.name] = tuple(found)
    claimed.update(n for nodes in recurrent.values() for n in nodes)
    readers: dict[str, list[str]] = {}
    for node in index.order:
        for tensor in index.node_inputs[node]:
            readers.setdefault(tensor, []).append(node)
    for op in compute:
        onnx_type = _ANCHORED.get(op.name.rpartition("_")[0])
        if not resolved[op.name] and onnx_type is not None:
            start = {t for src in op.inputs for t in upstream(src)}
            anchor = _anchor(start, onnx_type, readers, claimed, index)
            if anchor is not None:
                resolved[op.name] = (anchor,)
                claimed.add(anchor)
    for op in compute:
        if not resolved[op.name]:
            fill(op, downstream_reads(op.name))
    for op in compute:
        if resolved[op.name]:
            fill(op, {t for n in resolved[op.name] for t in index.node_outputs[n]})
    for op in compute:
        if resolved[op.name]:
            extra = _epilogues(resolved[op.name], readers, claimed, index)
            resolved[op.name] = tuple(sorted({*resolved[op.name], *extra}, key=index.position))
    for op in compute:
        if not resolved[op.name]:
            resolved[op.name] = _split_off(op, consumers, resolved, index)
    mapped = dict(resolved)  # rule 5 sees rules 1-4 only: independent of the ops' order
    feeders = {op.name: op.inputs for op in ops}
    for op in compute:
        if not resolved[op.name] and op.layer_type != "Convert":
            resolved[op.name] = enclosing_nodes(op.name, consumers, feeders, mapped, index.position)

    ran = {op.name for op in compute}
    nodes: dict[str, tuple[str, ...]] = {}
    kind: dict[str, str] = {}
    serves: dict[str, str | None] = {}
    for op in ops:
        if op.is_reorder or (op.name in ran and not resolved[op.name] and op.layer_type == "Convert"):
            # inserted reorders, and precision conversions of the plugin's own (i64 ids → i32)
            kind[op.name], nodes[op.name] = "layout", ()
            serves[op.name] = _served(op.name, by_name, consumers, ran if executed is not None else None)
        else:
            kind[op.name], nodes[op.name], serves[op.name] = "compute", resolved[op.name], None
    return Attribution(nodes, kind, serves, _portions(recurrent))


# plugin-made names whose type has one ONNX counterpart, anchored by rule 1c; not the elementwise
# Multiply/Add/Subtract, which the plugin makes out of other ops (a scale moved onto K, a dequantize)
_ANCHORED = {
    "ReduceMean": "ReduceMean",
    "ReduceSum": "ReduceSum",
    "ReduceMax": "ReduceMax",
    "ReduceMin": "ReduceMin",
    "ReduceL2": "ReduceL2",
    "Power": "Pow",
    "Sqrt": "Sqrt",
    "MVN": "LayerNormalization",
}


def _anchor(
    start: set[str], onnx_type: str, readers: Mapping[str, list[str]], claimed: set[str], index: GraphIndex
) -> str | None:
    """The nearest unclaimed node of ``onnx_type`` reading ``start`` tensors, through at most one
    unclaimed node before it (rule 1c), or None."""
    frontier = sorted({n for t in start for n in readers.get(t, ())}, key=index.position)
    for _ in range(2):
        following: set[str] = set()
        for node in frontier:
            if node in claimed:
                continue
            if index.op_types[node] == onnx_type:
                return node
            following.update(n for t in index.node_outputs[node] for n in readers.get(t, ()))
        frontier = sorted(following, key=index.position)
    return None


_RECURRENT_OPS = frozenset({"LSTM", "GRU", "RNN"})
_SEQUENCE_OPS = frozenset({"LSTMSequence", "GRUSequence", "RNNSequence"})


def _is_sequence(op: RuntimeOp) -> bool:
    """Whether ``op`` is a recurrent sequence op the plugin made (one direction of an LSTM/GRU/RNN)."""
    return op.layer_type == "RNNSeq" or op.name.rpartition("_")[0] in _SEQUENCE_OPS


def _portions(recurrent: Mapping[str, tuple[str, ...]]) -> dict[str, float]:
    """Share of its recurrent node each sequence op runs: 1 / the ops running that node."""
    runners: dict[tuple[str, ...], int] = {}
    for nodes in recurrent.values():
        if nodes:
            runners[nodes] = runners.get(nodes, 0) + 1
    return {op: 1.0 / runners[nodes] for op, nodes in recurrent.items() if nodes and runners[nodes] > 1}


def _epilogues(
    nodes: tuple[str, ...], readers: dict[str, list[str]], claimed: set[str], index: GraphIndex
) -> list[str]:
    """Unclaimed single-reader elementwise nodes after ``nodes`` whose other inputs are weights."""
    found: list[str] = []
    frontier = [t for n in nodes for t in index.node_outputs[n]]
    while frontier:
        tensor = frontier.pop()
        users = readers.get(tensor, [])
        if len(users) != 1 or users[0] in claimed or index.op_types[users[0]] not in EPILOGUE_OPS:
            continue
        user = users[0]
        if any(t != tensor and t not in index.sources for t in index.node_inputs[user]):
            continue
        claimed.add(user)
        found.append(user)
        frontier.extend(index.node_outputs[user])
    return found


_OV_TO_ONNX = {
    "Multiply": "Mul",
    "Add": "Add",
    "Subtract": "Sub",
    "Divide": "Div",
    "Power": "Pow",
    "MVN": "LayerNormalization",
    "Convert": "Cast",
    "Transpose": "Transpose",
}


# plugin-made names of elementwise ops, and the ONNX ops such an op never runs
_ELEMENTWISE_NAMES = frozenset(
    {"Multiply", "Add", "Subtract", "Divide", "Power", "Convert", "Maximum", "Minimum", "Sqrt", "Exp"}
)
_CONTRACTION_OPS = frozenset(
    {
        "MatMul",
        "Gemm",
        "Conv",
        "ConvTranspose",
        "Einsum",
        "MatMulInteger",
        "QLinearMatMul",
        "QLinearConv",
        "ConvInteger",
    }
)


# runtime kernels that can run a contraction (the rest, MVN, Reduce, Eltwise, Transpose, ..., cannot)
_CONTRACTING_KERNELS = frozenset(
    {
        "FullyConnected",
        "Convolution",
        "GroupConvolution",
        "Deconvolution",
        "MatMul",
        "Subgraph",
        "MHA",
        "ScaledDotProductAttention",
        "ScaledAttn",
        "PagedAttention",
        "LLMMLP",
        "QKVProjection",
        "RNNSeq",
        "RNNCell",
        "Einsum",
        "TensorIterator",
        "Loop",
        "If",
    }
)


def _elementwise_helper(name: str) -> bool:
    """Whether ``name`` is the plugin's own name of an elementwise op (``Multiply_4968``)."""
    prefix, _, number = name.rpartition("_")
    return prefix in _ELEMENTWISE_NAMES and number.isdigit()


def _split_off(
    op: RuntimeOp,
    consumers: dict[str, list[str]],
    resolved: dict[str, tuple[str, ...]],
    index: GraphIndex,
) -> tuple[str, ...]:
    """The ONNX node of the same type as ``op``'s plugin-made name in the nearest mapped ops it
    feeds (its consumers, looking through unmapped ones), or ().

    Only the nearest: a LayerNormalization's ``Multiply_93`` (its RMS piece) found the GELU ``Mul``
    of the FullyConnected after it, and the LayerNorm's pieces all shared that node."""
    onnx_type = _OV_TO_ONNX.get(op.name.rsplit("_", 1)[0])
    if onnx_type is None:
        return ()
    for current in nearest_mapped(op.name, consumers, resolved):
        for node in resolved[current]:
            if index.op_types[node] == onnx_type:
                return (node,)
    return ()


def _served(
    name: str,
    by_name: dict[str, RuntimeOp],
    consumers: dict[str, list[str]],
    ran: set[str] | None = None,
) -> str | None:
    """The first non-reorder runtime op downstream of the reorder ``name`` (that ran, if known)."""
    frontier, seen = list(consumers.get(name, ())), {name}
    while frontier:
        current = frontier.pop(0)
        if current in seen:
            continue
        seen.add(current)
        op = by_name.get(current)
        if op is not None and not op.is_reorder and (ran is None or current in ran):
            return current
        frontier.extend(consumers.get(current, ()))
    # No connectivity: the name ends with the destination, ``<src>_<from>_<to>_<dst>`` (§2.2).
    targets = [op for op in by_name if op != name and name.endswith("_" + op) and not by_name[op].is_reorder]
    return max(targets, key=len) if targets else None


def _precision_name(precisions: set[str]) -> str:
    """fp32 | fp16 | bf16 | int8 | mixed, from runtimePrecision values; index/shape types ignored."""
    mapped = {_PRECISION_NAMES.get(p, p) for p in precisions if p and p not in _INDEX_TYPES}
    if not mapped:
        return "fp32"
    return mapped.pop() if len(mapped) == 1 else "mixed"


class OpenVinoBackend(Backend):
    """OpenVINO runtime (``pip install "pytest-roofline[openvino]"``); CPU, GPU, NPU or AUTO."""

    name = "openvino"
    extra = "openvino"
    options_help = {
        "device": "CPU (default), GPU, NPU or AUTO",
        "hint": "performance hint: latency (default), throughput or none",
        "precision": "inference precision hint: f32, f16 or bf16 (default: the device's own)",
        "threads": "inference threads (INFERENCE_NUM_THREADS)",
        "streams": "inference streams (NUM_STREAMS)",
    }

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        super().__init__(options)
        self.device = self.options.get("device", "CPU").upper()
        self.config = self._config()

    def _config(self) -> dict[str, Any]:
        config: dict[str, Any] = {}
        hint = self.options.get("hint", "latency").lower()
        if hint not in _HINTS:
            raise OptionError(f"openvino option hint={hint!r}: choose latency, throughput or none")
        if _HINTS[hint]:
            config["PERFORMANCE_HINT"] = _HINTS[hint]
        if "precision" in self.options:
            precision = self.options["precision"].lower()
            if precision not in _PRECISIONS:
                raise OptionError(f"openvino option precision={precision!r}: choose f32, f16 or bf16")
            config["INFERENCE_PRECISION_HINT"] = _PRECISIONS[precision]
        for key, prop in (("threads", "INFERENCE_NUM_THREADS"), ("streams", "NUM_STREAMS")):
            if key in self.options:
                value = self.options[key]
                if not value.isdigit() or not 1 <= int(value) <= MAX_THREADS:
                    raise OptionError(
                        f"openvino option {key}={value!r} must be a positive integer up to {MAX_THREADS}"
                    )
                config[prop] = int(value)
        return config

    def single_thread(self) -> OpenVinoBackend | None:
        """This configuration with ``threads=1`` when it runs on the CPU with several."""
        if self.device != "CPU" or self.options.get("threads") == "1":
            return None
        return OpenVinoBackend({**self.options, "threads": "1"})

    @classmethod
    def available(cls) -> bool:
        """Whether the ``openvino`` package imports."""
        return importable("openvino")

    def version(self) -> str:
        """``openvino.get_version()``, e.g. ``2026.4.1-22982-...``."""
        import openvino as ov

        return ov.get_version()

    def fingerprint(self) -> dict[str, Any]:
        """Device name, runtime version and the compile configuration."""
        import openvino as ov

        core = ov.Core()
        try:
            device_name = core.get_property(self.device, "FULL_DEVICE_NAME")
        except Exception:  # AUTO and virtual devices have no single name
            device_name = self.device
        return {
            "backend": self.name,
            "version": self.version(),
            "device": self.device,
            "device_name": str(device_name),
            "config": {k: str(v) for k, v in sorted(self.config.items())},
        }

    def open(self, spec: ModelSpec, inputs: Mapping[str, np.ndarray]) -> OpenVinoSession:
        """Read the ONNX model, reshape it to the inputs' shapes and compile it for timing."""
        return OpenVinoSession(self, spec, inputs)


class OpenVinoSession(BackendSession):
    """A model compiled for timing; a second, profiling compilation is made on first use."""

    def __init__(self, backend: OpenVinoBackend, spec: ModelSpec, inputs: Mapping[str, np.ndarray]) -> None:
        import openvino as ov

        self._backend = backend
        self._proto = load_model(spec.source)
        self._inputs = {name: ov.Tensor(array) for name, array in inputs.items()}
        self._core = ov.Core()
        try:
            if spec.path is not None:
                model = self._core.read_model(str(spec.path))
            else:
                model = self._core.read_model(spec.source.SerializeToString())  # type: ignore[union-attr]
            model.reshape({name: list(array.shape) for name, array in inputs.items()})
        except Exception as exc:
            lacking = _unread_op(exc, self._proto)
            if lacking:
                raise ModelUnsupported(
                    f"openvino cannot read {spec.name}: no conversion for {lacking}; "
                    "onnxruntime can run it (--backend onnxruntime)"
                ) from None
            raise BackendError(f"openvino could not read {spec.name}: {_first_line(exc)}") from None
        self._model = model
        self._timed = self._compile(profiling=False)
        self._profiled: tuple[Any, Any] | None = None
        self._profiled_count = 0

    def _compile(self, profiling: bool) -> tuple[Any, Any]:
        config = dict(self._backend.config, PERF_COUNT=profiling)
        try:
            compiled = self._core.compile_model(self._model, self._backend.device, config)
        except Exception as exc:
            raise BackendError(
                f"openvino could not compile for {self._backend.device}: {_first_line(exc)}"
            ) from None
        request = compiled.create_infer_request()
        for name, tensor in self._inputs.items():
            request.set_tensor(name, tensor)
        request.infer(share_outputs=True)  # first inference allocates and JIT-compiles kernels
        return compiled, request

    def time(self, iterations: int) -> list[float]:
        """Seconds per ``infer()`` of the non-profiling compilation, inputs already set.

        The outputs stay in the request's tensors (``share_outputs``): the Python ``infer()``
        otherwise copies every output into a fresh numpy array, a memmove into newly faulted pages
        that is no part of the model (measured with 2026.4.1: a 256 MiB Add stream spent 45 % of
        its time there and read 6 GB/s where onnxruntime, which keeps its outputs, read 17).
        """
        request = self._timed[1]
        samples = []
        for _ in range(iterations):
            start = _time.perf_counter_ns()
            request.infer(share_outputs=True)
            samples.append((_time.perf_counter_ns() - start) * 1e-9)
        return samples

    def profile(self, iterations: int) -> KernelProfile:
        """Mean per-primitive time over ``iterations`` inferences, attributed to ONNX nodes.

        The CPU plugin's counters are running averages over every inference of the request,
        truncated to whole microseconds (checked with 2026.4.1: ``i * counter`` tracks the
        cumulative time exactly).  The mean of just these iterations is therefore
        ``(n1 * avg1 - n0 * avg0) / iterations``, one value per kernel, accurate to about 1 µs.
        """
        if self._profiled is None:
            self._profiled = self._compile(profiling=True)
            self._profiled_count = 1  # the warm-up inference of _compile
        compiled, request = self._profiled
        iterations = max(1, iterations)
        before, _ = _counters(request)
        for _ in range(iterations):
            request.infer(share_outputs=True)
        after, info = _counters(request)
        n0, n1 = self._profiled_count, self._profiled_count + iterations
        self._profiled_count = n1
        times = {
            name: [max(0.0, (n1 * avg - n0 * before.get(name, 0.0)) / iterations)]
            for name, avg in after.items()
        }
        return build_kernel_profile(
            read_runtime_ops(compiled),
            GraphIndex.from_model(self._proto),
            times,
            info,
            iterations=iterations,
        )

    def outputs(self) -> dict[str, np.ndarray]:
        """One inference of the timing compilation; outputs by their ONNX names."""
        compiled, request = self._timed
        request.infer()
        onnx_names = [o.name for o in self._proto.graph.output]
        result = {}
        for out in compiled.outputs:  # a tensor can carry several names: prefer the graph's
            name = next((n for n in onnx_names if n in out.get_names()), out.get_any_name())
            result[name] = request.get_tensor(out).data.copy()
        return result

    def close(self) -> None:
        """Drop the compiled models and requests."""
        self._timed = self._profiled = None  # type: ignore[assignment]


def _counters(request: Any) -> tuple[dict[str, float], dict[str, tuple[str, str]]]:
    """Executed primitives' running-average times (s) and their (node_type, exec_type).

    A primitive whose average truncates to 0 µs is reported NOT_RUN although it ran (seen on
    sub-microsecond Subgraph/MVN primitives, differently from run to run); it keeps its
    implementation's ``exec_type``.  Only rows without one (``undef``, ``unknown_*``: fused into
    another primitive, or no-op reshapes) are left out, their nodes then counting as folded.
    """
    averages: dict[str, float] = {}
    info: dict[str, tuple[str, str]] = {}
    for row in request.get_profiling_info():
        executed = str(row.status).rsplit(".", 1)[-1] == "EXECUTED"
        if not executed and (row.exec_type == "undef" or row.exec_type.startswith("unknown")):
            continue
        averages[row.node_name] = averages.get(row.node_name, 0.0) + row.real_time.total_seconds()
        info[row.node_name] = (row.node_type, row.exec_type)
    return averages, info


def build_kernel_profile(
    ops: list[RuntimeOp],
    index: GraphIndex,
    times: Mapping[str, list[float]],
    info: Mapping[str, tuple[str, str]],
    iterations: int,
) -> KernelProfile:
    """Join per-iteration counters with the runtime model's attribution (pure, testable offline)."""
    attribution = attribute_runtime_model(ops, index, executed=set(times))
    by_name = {op.name: op for op in ops}
    owners = _node_owners(attribution, times, info, index)
    kernels = []
    for name, samples in times.items():
        op = by_name.get(name)
        node_type, exec_type = info.get(name, ("", ""))
        kind = attribution.kind.get(name, "compute")
        if op is None and node_type == "Reorder":
            kind = "layout"
        nodes = attribution.nodes.get(name, ()) if kind == "compute" else ()
        extra: dict[str, Any] = {
            "exec_type": exec_type,
            "precision": op.precision if op else "",
            "statistic": "mean",
        }
        shared: tuple[str, ...] = ()
        if name in attribution.portion:  # one direction of a recurrent node: its share of it
            extra["portion"] = attribution.portion[name]
        else:
            shared = tuple(n for n in nodes if owners[n] != name)
        if shared:
            extra["shared"] = shared
        if op is not None and op.io_bytes is not None:
            # a kernel moves at most its runtime tensors, each once: a cap on its nodes' bytes; a
            # helper sharing every node, or an inserted reorder, moves just those
            extra["io_bytes"] = op.io_bytes
            if kind == "layout" or (nodes and len(shared) == len(nodes)):
                extra["bytes"] = op.io_bytes
        kernels.append(
            KernelRecord(
                name=name,
                op_type=node_type,
                onnx_nodes=nodes,
                times=tuple(samples),
                kind=kind,
                serves=attribution.serves.get(name),
                extra=extra,
            )
        )
    executed = {n for k in kernels for n in k.onnx_nodes}  # the rest was fused or folded away
    folded = [n for n in index.order if n not in executed]
    precisions = {op.precision for op in ops if op.name in times and not op.is_reorder}
    return KernelProfile(tuple(kernels), tuple(folded), iterations, _precision_name(precisions))


_WEIGHTED_KERNELS = frozenset({"FullyConnected", "Convolution", "GroupConvolution", "Deconvolution"})


def _node_owners(
    attribution: Attribution,
    times: Mapping[str, list[float]],
    info: Mapping[str, tuple[str, str]] | None = None,
    index: GraphIndex | None = None,
) -> dict[str, str]:
    """ONNX node -> the executed compute op that carries its cost: the longest-running of those
    listing it (the others are helpers, ``extra["shared"]``); ties go to the first listed.

    Contractions (MatMul, Conv, Einsum, ...) listed by several ops go by what each op can run,
    given ``info`` (node types) and ``index``: one with a weight input (an initializer, or its
    DequantizeLinear) to a FullyConnected or
    Convolution kernel, each such kernel taking one, in execution order; one without (attention's
    QK and AV) to a kernel that is neither.  An MHA Subgraph whose originalLayersNames list the
    Einsums of Q and V projections (run by two FullyConnected kernels sharing its nodes) was
    otherwise priced at all of them: 235 GFLOP/s against a 198 GFLOP/s roof.
    """
    owners: dict[str, str] = {}
    best: dict[str, float] = {}
    listing: dict[str, list[str]] = {}
    for name, samples in times.items():
        if attribution.kind.get(name, "compute") != "compute":
            continue
        mean = sum(samples) / len(samples) if samples else 0.0
        for node in attribution.nodes.get(name, ()):
            listing.setdefault(node, []).append(name)
            if node not in owners or mean > best[node]:
                owners[node], best[node] = name, mean
    if info is None or index is None:
        return owners
    weighted_owner: set[str] = set()
    for node, names in listing.items():
        if len(names) < 2 or index.op_types.get(node) not in _CONTRACTION_OPS:
            continue
        weighted = any(_constant(t, index) for t in index.node_inputs[node][1:])
        kinds = {name: info.get(name, ("", ""))[0] for name in names}
        if weighted:
            free = [n for n in names if kinds[n] in _WEIGHTED_KERNELS and n not in weighted_owner]
            if free:
                owners[node] = free[0]
                weighted_owner.add(free[0])
        else:
            others = [n for n in names if kinds[n] not in _WEIGHTED_KERNELS]
            if others and owners[node] not in others:
                owners[node] = max(others, key=lambda n: sum(times[n]) / max(len(times[n]), 1))
    return owners


def _constant(tensor: str, index: GraphIndex, depth: int = 4) -> bool:
    """Whether ``tensor`` is a weight: an initializer, or computed from initializers only (the
    DequantizeLinear of an int8 weight in a QDQ model)."""
    if tensor not in index.producer:
        return tensor in index.sources
    inputs = index.node_inputs[index.producer[tensor]]
    return depth > 0 and bool(inputs) and all(_constant(t, index, depth - 1) for t in inputs)


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    meaningful = [line for line in lines if not line.startswith("Exception from")]
    return (meaningful or lines or [type(exc).__name__])[-1][:300]


#: Operator domains OpenVINO's ONNX frontend converts (ai.onnx.ml, ai.onnx.preview.training and
#: custom domains it does not).
_READ_DOMAINS = frozenset({"", "ai.onnx", "com.microsoft", "org.openvinotoolkit", "ai.onnx.contrib"})


def _unread_op(exc: BaseException, proto: Any) -> str:
    """What OpenVINO could not read, as ``op (domain D)``: from its own conversion report, else the
    first node of a domain it does not convert; "" when neither names one (its line is kept)."""
    import re

    from pytest_roofline.model import walk_nodes

    match = re.search(r"No conversion rule found for operations: ([^\n]+)", str(exc))
    domains = {node.op_type: node.domain for node in walk_nodes(proto.graph)}
    if match:
        names = [name.strip() for name in match[1].split(",") if name.strip()]
        first = names[0].rsplit(".", 1)[-1]
        domain = domains.get(first, names[0].rpartition(".")[0])
        more = f" and {len(names) - 1} more op types" if len(names) > 1 else ""
        return f"{first} (domain {domain or 'ai.onnx'}){more}"
    foreign = sorted({(node.domain, node.op_type) for node in walk_nodes(proto.graph)} - {("", "")})
    foreign = [(domain, op) for domain, op in foreign if domain not in _READ_DOMAINS]
    if foreign:
        more = f" and {len(foreign) - 1} more op types" if len(foreign) > 1 else ""
        return f"{foreign[0][1]} (domain {foreign[0][0]}){more}"
    return ""
