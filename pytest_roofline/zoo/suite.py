"""The model zoo the gate and roofline benchmarks measure on: varied exporter-like models, each
with the dims ``model_profile(path, dims=...)`` needs, written to .onnx files by :func:`write_zoo`.

>>> from pytest_roofline.zoo.suite import ZOO, write_zoo
>>> paths = write_zoo(Path("zoo"), ["tiny_mlp", "gpt2_kv"])  # doctest: +SKIP

Weights are seeded random, so every build writes the same bytes. Details: docs/zoo.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import onnx

from pytest_roofline.errors import RooflineError

from . import cnn, control_flow, decoders, mixed, precision, quantize, transformer
from .variants import resaved_copy, slower_variant

__all__ = ["ZOO", "ZooModel", "resaved_copy", "slower_variant", "write_zoo", "zoo_model"]


@dataclass(frozen=True)
class ZooModel:
    """One zoo model: its file stem, how to build it, the symbolic dims to bind, and tags."""

    name: str  # file stem, e.g. "gpt2_kv"
    build: Callable[[], onnx.ModelProto] = field(repr=False)
    dims: Mapping[str, int] = field(hash=False)  # what model_profile(path, dims=...) needs; {} if static
    tags: tuple[str, ...]


def _named(name: str, build: Callable[[], onnx.ModelProto]) -> Callable[[], onnx.ModelProto]:
    """``build`` whose graph is named ``name`` (how slower_variant finds the entry's dims)."""

    def named() -> onnx.ModelProto:
        model = build()
        model.graph.name = name
        return model

    named.__name__ = f"build_{name}"
    return named


def _entry(name: str, build: Callable[[], onnx.ModelProto], dims: Mapping[str, int], *tags: str) -> ZooModel:
    return ZooModel(name, _named(name, build), MappingProxyType(dict(dims)), tags)


def _with_output_shapes(model: onnx.ModelProto, shapes: Mapping[str, list[int]]) -> onnx.ModelProto:
    """``model`` with the given graph output shapes declared (the checker wants them)."""
    for output in model.graph.output:
        if output.name in shapes:
            output.type.tensor_type.shape.Clear()
            output.type.tensor_type.shape.dim.extend(
                onnx.TensorShapeProto.Dimension(dim_value=d) for d in shapes[output.name]
            )
    return model


def _scan() -> onnx.ModelProto:
    return _with_output_shapes(control_flow.scan_model(steps=32, batch=4, width=256), {"y": [32, 4, 256]})


def _loop() -> onnx.ModelProto:
    return _with_output_shapes(control_flow.loop_model(trips=16, batch=16, width=256), {"y": [16, 256]})


def _convnext_fp16() -> onnx.ModelProto:
    return precision.convnext_fp16(size=128, dims=(48, 96, 192))


def _llama_fp16() -> onnx.ModelProto:
    return precision.llama_fp16(seq=64, hidden=256, heads=8, kv_heads=4, layers=2, vocab=4096)


ZOO: tuple[ZooModel, ...] = (
    _entry("tiny_mlp", mixed.tiny_mlp, {}, "tiny", "mlp"),
    _entry("tiny_cnn", lambda: cnn.tiny_cnn(batch=1), {}, "tiny", "cnn"),
    _entry("mobilenet_v2", lambda: cnn.mobilenet_v2(batch=1, weights="random"), {}, "cnn", "depthwise"),
    _entry("resnet50", lambda: cnn.resnet50(batch=1, weights="random"), {}, "cnn", "large"),
    _entry("efficientnet", cnn.efficientnet_b0, {}, "cnn", "depthwise", "squeeze-excite"),
    _entry(
        "efficientnet_int8",
        lambda: quantize.qdq_int8(cnn.efficientnet_b0()),
        {},
        "cnn",
        "int8",
        "qdq",
    ),
    _entry("convnext", lambda: quantize.float32_copy(_convnext_fp16()), {}, "cnn", "depthwise"),
    _entry("convnext_fp16", _convnext_fp16, {}, "cnn", "fp16"),
    _entry("unet", cnn.unet, {}, "cnn", "segmentation"),
    _entry("tcn", cnn.tcn, {}, "conv1d", "dilated"),
    _entry(
        "vit_b16",
        lambda: transformer.vit_b16(batch=1, weights="random"),
        {},
        "transformer",
        "encoder",
        "large",
    ),
    _entry(
        "bert_base",
        lambda: transformer.bert_base(weights="random"),
        {"batch": 1},
        "transformer",
        "encoder",
        "embedding",
        "large",
    ),
    _entry("gpt2", decoders.gpt2, {"sequence_length": 128}, "transformer", "decoder", "embedding"),
    _entry(
        "gpt2_kv",
        lambda: decoders.gpt2(kv_cache=True),
        {"past_sequence_length": 127},
        "transformer",
        "decoder",
        "kv-cache",
        "embedding",
    ),
    _entry("llama", decoders.llama, {}, "transformer", "decoder", "rotary", "gqa"),
    _entry("llama_fp16", _llama_fp16, {}, "transformer", "decoder", "fp16"),
    _entry(
        "llama_int4",
        lambda: decoders.llama(int4=True),
        {},
        "transformer",
        "decoder",
        "int4",
        "contrib",
    ),
    _entry("t5", decoders.t5, {}, "transformer", "encoder-decoder", "cross-attention"),
    _entry("whisper_tiny", decoders.whisper_tiny, {}, "transformer", "encoder-decoder", "conv1d", "speech"),
    _entry("einsum_attention", mixed.einsum_attention, {}, "transformer", "einsum"),
    _entry("moe", mixed.moe, {}, "moe", "data-dependent"),
    _entry("lstm_gru", mixed.lstm_gru, {}, "rnn"),
    _entry("scan", _scan, {}, "control-flow", "rnn"),
    _entry("loop", _loop, {}, "control-flow"),
)


def zoo_model(name: str) -> ZooModel:
    """The zoo entry called ``name``.

    Raises:
        RooflineError: no zoo model has that name (the message lists them).
    """
    for entry in ZOO:
        if entry.name == name:
            return entry
    raise RooflineError(f"no zoo model '{name}'; the zoo has: {', '.join(e.name for e in ZOO)}")


def write_zoo(out_dir: Path, names: Iterable[str] | None = None) -> dict[str, Path]:
    """Write ``<name>.onnx`` for each zoo model (all by default) into ``out_dir``; a file that
    already holds the same bytes is left alone (its mtime too). Returns the paths by name."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    entries = [zoo_model(name) for name in names] if names is not None else list(ZOO)
    paths: dict[str, Path] = {}
    for entry in entries:
        data = entry.build().SerializeToString()
        path = out_dir / f"{entry.name}.onnx"
        if not (path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data):
            temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            temporary.write_bytes(data)
            os.replace(temporary, path)
        paths[entry.name] = path
    return paths
