"""trtexec's exported JSON files and version-dependent command lines (reference/FORMATS.md §3).

Pure functions, no TensorRT needed: the version banner, ``--exportTimes``, ``--exportProfile`` and
``--exportLayerInfo`` parsers, attribution of engine layers to ONNX nodes, and the command line
for a given TensorRT version.  Console text is never parsed except for the version banner.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.backends.base import KernelProfile, KernelRecord
from pytest_roofline.errors import BackendError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pytest_roofline.backends.attribution import GraphIndex

__all__ = [
    "EngineLayer",
    "LayerTime",
    "TrtVersion",
    "attribute_layers",
    "build_command",
    "parse_banner",
    "parse_layer_info",
    "parse_profile",
    "parse_times",
    "read_json",
]

_BANNER = re.compile(r"\[TensorRT v(\d{4,6})\]")
_ONNX_LAYER = re.compile(r"\[ONNX Layer: ([^\]|]+)")
_REFORMAT = re.compile(r"^Reformatting CopyNode for (?:Input|Output) Tensor \d+ to (.+)$")
_FOREIGN = re.compile(r"^\{ForeignNode\[(.+?)\.\.\.(.+)\]\}$")
_PROFILE_SUFFIX = re.compile(r" \[profile \d+\]$")
_INSERTED_SHAPE = re.compile(r"^(?:reshape|squeeze|unsqueeze|shuffle)_(?:after|before)_(.+)$")
_DTYPE = re.compile(r"\b(FP32|FP16|BF16|FP8|Int8|INT8|Int32|INT32|Float|Half)\b")
_PRECISION = {
    "FP32": "fp32",
    "Float": "fp32",
    "FP16": "fp16",
    "Half": "fp16",
    "BF16": "bf16",
    "FP8": "fp8",
    "Int8": "int8",
    "INT8": "int8",
}
_ITEMSIZE = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "Int32": 4, "INT32": 4}
_PRECISION_FLAGS = {"fp16": ("--fp16",), "int8": ("--int8",), "best": ("--best",), "fp32": ()}


@dataclass(frozen=True, order=True)
class TrtVersion:
    """A TensorRT version; orders like a tuple."""

    major: int
    minor: int = 0
    patch: int = 0

    @classmethod
    def from_code(cls, code: int) -> TrtVersion:
        """From the banner's number: 8601 → 8.6.1 (``M*1000+m*100+p``), 100300 → 10.3.0."""
        if code >= 100000:
            return cls(code // 10000, (code // 100) % 100, code % 100)
        return cls(code // 1000, (code // 100) % 10, code % 100)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    @property
    def strongly_typed(self) -> bool:
        """TensorRT 11 dropped --fp16/--int8/--best: precision comes from the model."""
        return self.major >= 11

    @property
    def has_layer_info(self) -> bool:
        """``--exportLayerInfo`` exists since 8.4."""
        return (self.major, self.minor) >= (8, 4)

    @property
    def needs_separate_profile_run(self) -> bool:
        """Before 11, profiling without ``--separateProfileRun`` suppresses ``--exportTimes``."""
        return self.major < 11


def parse_banner(text: str) -> TrtVersion:
    """The version in ``[TensorRT v8601]`` / ``TensorRT.trtexec [TensorRT v100300]``.

    Raises:
        BackendError: no banner in ``text``.
    """
    match = _BANNER.search(text)
    if match is None:
        raise BackendError("could not read the TensorRT version from trtexec's banner; is it trtexec?")
    return TrtVersion.from_code(int(match.group(1)))


def read_json(path: str | Path, what: str) -> Any:
    """Load a trtexec export, with a one-line error naming the file and the flag that makes it."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except FileNotFoundError:
        raise BackendError(f"{path}: no such file (expected trtexec {what} output)") from None
    except json.JSONDecodeError as exc:
        raise BackendError(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); expected {what}"
        ) from None


def _ms(record: Mapping[str, Any], key: str) -> float | None:
    value = record.get(key)
    return float(value) if isinstance(value, (int, float)) else None


def parse_times(data: Any, metric: str = "compute") -> list[float]:
    """Seconds per inference from ``--exportTimes`` (``metric``: ``compute`` or ``latency``).

    Handles the key names of every version: ``computeMs``/``latencyMs`` (8.2+), ``endToEndMs``
    (8.0), ``inMs``/``outMs`` with ``start*InMs`` stamps (7.1), and stamps alone.
    """
    if not isinstance(data, list):
        raise BackendError("--exportTimes file is not a JSON list of per-inference records")
    samples = []
    for record in data:
        if not isinstance(record, dict):
            raise BackendError("--exportTimes file has a record that is not an object")
        compute = _ms(record, "computeMs")
        if compute is None and "startComputeMs" in record and "endComputeMs" in record:
            compute = float(record["endComputeMs"]) - float(record["startComputeMs"])
        value = compute
        if metric == "latency":
            value = _ms(record, "latencyMs")
            if value is None:
                value = _ms(record, "endToEndMs")
            if value is None and compute is not None:
                h2d = _ms(record, "h2dMs") if "h2dMs" in record else _ms(record, "inMs")
                d2h = _ms(record, "d2hMs") if "d2hMs" in record else _ms(record, "outMs")
                value = compute + (h2d or 0.0) + (d2h or 0.0)
        if value is None:
            keys = ", ".join(sorted(record)) or "none"
            raise BackendError(f"--exportTimes record has no compute time (keys: {keys}); unknown version")
        samples.append(value * 1e-3)
    return samples


@dataclass(frozen=True)
class LayerTime:
    """One row of ``--exportProfile``: the layer's time per iteration in seconds."""

    name: str
    time: float  # median if the file has it (TensorRT 8.5+), else average
    statistic: str  # "median" | "average"
    total: float
    percentage: float


def parse_profile(data: Any) -> tuple[int, list[LayerTime]]:
    """(iterations, layers) from ``--exportProfile``; layers of every optimization profile."""
    if not isinstance(data, list) or not data:
        raise BackendError("--exportProfile file is not a non-empty JSON list")
    count, rows = 1, data
    if isinstance(data[0], dict) and set(data[0]) == {"count"}:
        count, rows = int(data[0]["count"]), data[1:]
    layers = []
    for row in rows:
        if not isinstance(row, dict) or "name" not in row:
            raise BackendError("--exportProfile row without a layer name")
        median = _ms(row, "medianMs")
        average = _ms(row, "averageMs")
        if average is None:
            total = _ms(row, "timeMs") or 0.0
            average = total / max(count, 1)
        layers.append(
            LayerTime(
                name=str(row["name"]),
                time=(median if median is not None else average) * 1e-3,
                statistic="median" if median is not None else "average",
                total=(_ms(row, "timeMs") or 0.0) * 1e-3,
                percentage=_ms(row, "percentage") or 0.0,
            )
        )
    return count, layers


@dataclass(frozen=True)
class EngineLayer:
    """One layer of ``--exportLayerInfo``: names, tensors and what its metadata says."""

    name: str
    layer_type: str = ""
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    onnx_layers: tuple[str, ...] = ()  # from "Metadata": [ONNX Layer: ...]
    precision: str = ""
    nbytes: int = 0  # bytes of its input and output tensors (when dims are known)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


def _tensor_bytes(tensor: Mapping[str, Any]) -> tuple[int, str]:
    fmt = str(tensor.get("Format/Datatype", ""))
    match = _DTYPE.search(fmt)
    precision = _PRECISION.get(match.group(1), "") if match else ""
    dims = tensor.get("Dimensions", [])
    size = _ITEMSIZE.get(precision) or (_ITEMSIZE.get(match.group(1), 0) if match else 0)
    count = 1
    for dim in dims if isinstance(dims, list) else []:
        if not isinstance(dim, int) or dim < 0:
            return 0, precision
        count *= dim
    return count * size, precision


def parse_layer_info(data: Any) -> list[EngineLayer]:
    """Layers of ``--exportLayerInfo``: strings (default verbosity) or objects (``detailed``)."""
    if not isinstance(data, dict) or not isinstance(data.get("Layers"), list):
        raise BackendError('--exportLayerInfo file has no "Layers" list')
    layers = []
    for entry in data["Layers"]:
        if isinstance(entry, str):
            layers.append(EngineLayer(name=entry))
            continue
        if not isinstance(entry, dict) or "Name" not in entry:
            raise BackendError("--exportLayerInfo layer without a Name")
        ins = [t for t in entry.get("Inputs", []) if isinstance(t, dict)]
        outs = [t for t in entry.get("Outputs", []) if isinstance(t, dict)]
        sizes = [_tensor_bytes(t) for t in ins + outs]
        out_precisions = [p for _, p in sizes[len(ins) :] if p]
        metadata = str(entry.get("Metadata", ""))
        layers.append(
            EngineLayer(
                name=str(entry["Name"]),
                layer_type=str(entry.get("LayerType", "")),
                inputs=tuple(str(t.get("Name", "")) for t in ins),
                outputs=tuple(str(t.get("Name", "")) for t in outs),
                onnx_layers=tuple(n.strip() for n in _ONNX_LAYER.findall(metadata)),
                precision=out_precisions[0] if out_precisions else "",
                nbytes=sum(b for b, _ in sizes),
                raw=entry,
            )
        )
    return layers


def _layout_target(name: str) -> str | None:
    match = _REFORMAT.match(name) or _INSERTED_SHAPE.match(name)
    return match.group(1) if match else None


def attribute_layers(
    times: Sequence[LayerTime],
    layers: Sequence[EngineLayer],
    index: GraphIndex,
    iterations: int,
    default_precision: str = "fp32",
) -> KernelProfile:
    """Kernels for the profiled layers, attributed to ONNX nodes.

    In order: ``Metadata`` ``[ONNX Layer: …]`` entries, the `` + ``-joined layer name, a Myelin
    ``{ForeignNode[first...last]}`` range, then the layer's tensor boundaries (inputs/outputs
    traced through reformat layers to ONNX tensor names).  Reformat copies and TensorRT's inserted
    reshapes are layout kernels serving their layer.  ONNX nodes no layer runs are ``folded``.
    """
    info = {layer.name: layer for layer in layers}
    # tensor produced by a reformat/no-op layer → the tensor it reformats (to find ONNX names)
    alias = {
        out: layer.inputs[0]
        for layer in layers
        if _layout_target(layer.name) and len(layer.inputs) == 1
        for out in layer.outputs
    }
    back_alias = {src: out for out, src in alias.items()}

    def onnx_tensor(name: str, mapping: dict[str, str]) -> str:
        seen = set()
        while name in mapping and name not in seen:
            seen.add(name)
            name = mapping[name]
        return name

    resolved: dict[str, tuple[str, ...]] = {}
    for row in times:
        base = _PROFILE_SUFFIX.sub("", row.name)
        layer = info.get(base) or info.get(row.name)
        if _layout_target(base):
            resolved[row.name] = ()
            continue
        nodes: tuple[str, ...] = ()
        if layer is not None and layer.onnx_layers:
            nodes = index.resolve_all(layer.onnx_layers)
        if not nodes:
            foreign = _FOREIGN.match(base)
            nodes = index.span(*foreign.groups()) if foreign else index.resolve_all(base.split(" + "))
        resolved[row.name] = nodes
    claimed = {n for nodes in resolved.values() for n in nodes}
    known = set(index.producer) | index.sources
    for row in times:
        layer = info.get(_PROFILE_SUFFIX.sub("", row.name))
        if layer is None or not layer.outputs or _layout_target(layer.name):
            continue
        ins = {onnx_tensor(t, alias) for t in layer.inputs}
        outs = {onnx_tensor(t, back_alias) for t in layer.outputs}
        if not ins <= known or not outs <= known:
            continue  # a boundary we cannot name would widen the walk to the graph inputs
        inside = [n for n in index.between(ins, outs) if n not in claimed]
        claimed.update(inside)
        resolved[row.name] = tuple(sorted({*resolved[row.name], *inside}, key=index.position))

    def served(target: str | None) -> str | None:
        seen = set()
        while target is not None and _layout_target(target) and target not in seen:
            seen.add(target)
            target = _layout_target(target)
        return target

    kernels = []
    for row in times:
        base = _PROFILE_SUFFIX.sub("", row.name)
        layer = info.get(base)
        target = served(_layout_target(base))
        extra: dict[str, Any] = {"statistic": row.statistic}
        if layer is not None:
            extra.update(layer_type=layer.layer_type, precision=layer.precision, bytes=layer.nbytes)
        kernels.append(
            KernelRecord(
                name=row.name,
                op_type=layer.layer_type if layer is not None and layer.layer_type else "",
                onnx_nodes=resolved[row.name],
                times=(row.time,),
                kind="layout" if target else "compute",
                serves=target,
                extra=extra,
            )
        )
    executed = {n for k in kernels for n in k.onnx_nodes}
    precisions = {
        k.extra.get("precision") for k in kernels if k.kind == "compute" and k.extra.get("precision")
    }
    precision = (
        default_precision if not precisions else str(precisions.pop()) if len(precisions) == 1 else "mixed"
    )
    folded = tuple(n for n in index.order if n not in executed)
    return KernelProfile(tuple(kernels), folded, iterations, precision)


def _shape_arg(shapes: Mapping[str, Sequence[int]]) -> str:
    parts = []
    for name, shape in shapes.items():
        quoted = f"'{name}'" if ":" in name or "," in name else name
        parts.append(f"{quoted}:{'x'.join(str(d) for d in shape) if shape else 'scalar'}")
    return ",".join(parts)


def build_command(
    trtexec: str,
    version: TrtVersion,
    *,
    onnx: str | None,
    engine: str,
    build: bool,
    shapes: Mapping[str, Sequence[int]] | None = None,
    precision: str = "fp32",
    workspace_mib: int | None = None,
    iterations: int = 10,
    warmup_ms: int = 200,
    times: str | None = None,
    profile: str | None = None,
    layer_info: str | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The trtexec argument list for ``version``.

    ``build`` compiles ``onnx`` into ``engine`` (``--profilingVerbosity=detailed``); otherwise the
    cached engine is loaded.  ``shapes`` (dynamic inputs only) fix min = opt = max.  On TensorRT 11
    precision flags, ``--separateProfileRun`` and ``--useCudaGraph`` are never passed.
    """
    cmd = [trtexec]
    if build:
        if onnx is None:
            raise BackendError("building an engine needs the ONNX model path")
        cmd += [f"--onnx={onnx}", f"--saveEngine={engine}"]
        if version.major >= 8:
            cmd.append("--profilingVerbosity=detailed")
        if not version.strongly_typed:
            cmd += list(_PRECISION_FLAGS[precision])
        if workspace_mib:
            cmd.append(
                f"--memPoolSize=workspace:{workspace_mib}"
                if version >= TrtVersion(8, 4)
                else f"--workspace={workspace_mib}"
            )
        if shapes:
            arg = _shape_arg(shapes)
            cmd += [f"--minShapes={arg}", f"--optShapes={arg}", f"--maxShapes={arg}"]
    else:
        cmd.append(f"--loadEngine={engine}")
    if shapes:
        cmd.append(f"--shapes={_shape_arg(shapes)}")
    cmd += [f"--iterations={iterations}", "--duration=0", f"--warmUp={warmup_ms}", "--avgRuns=1"]
    if times:
        cmd.append(f"--exportTimes={times}")
    if profile:
        cmd.append(f"--exportProfile={profile}")
        if version.needs_separate_profile_run:
            cmd.append("--separateProfileRun")
    if layer_info and version.has_layer_info:
        cmd.append(f"--exportLayerInfo={layer_info}")
    cmd += list(extra_args)
    return cmd
