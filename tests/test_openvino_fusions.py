"""OpenVINO attribution of its fusions and decompositions, on small models that reproduce them.

Each model reproduces one pattern that priced a zoo layer at an impossible bandwidth (issue 21):
a plugin-made dequantizing ``Multiply_<n>`` between int8 blocks (EfficientNet int8), a
bidirectional LSTM run as two sequence kernels (LSTM+GRU), a LayerNormalization the plugin splits
into ReduceMean / Subtract / RMS / Subgraph (ConvNeXt), and a LayerNorm spelled out in ONNX.
Every check runs real OpenVINO and asserts what each kernel is charged with: no node's cost in
two kernels, no kernel priced above the tensors it reads and writes.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pytest_roofline.analysis import analyze
from pytest_roofline.backends.base import KernelProfile
from pytest_roofline.model import ModelSpec, bind_input_shapes, make_inputs
from pytest_roofline.profile import Layer, build_layers

pytest.importorskip("openvino")

from pytest_roofline.backends.openvino import OpenVinoBackend  # noqa: E402

# Far above what a CPU core moves even from L1 (a 2-core VM's L3: ~190 GB/s theoretical): a layer
# faster than this was charged with bytes its kernel never moved.
IMPOSSIBLE_BYTES_PER_SECOND = 400e9
#: fp32 as the tests' rooflines assume: on a CPU with avx512_bf16 (this AMD EPYC) OpenVINO's own
#: default precision is bf16, which halves every byte count the tests place in a memory level
F32_ONE_THREAD = {"threads": "1", "precision": "f32"}


def _model(nodes: list[onnx.NodeProto], inputs, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "fusions", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _weight(rng: np.random.Generator, name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)


def swish_blocks(blocks: int = 2, channels: int = 16, size: int = 16) -> onnx.ModelProto:
    """``blocks`` residual blocks ``x + Conv(Conv(x) * Sigmoid(Conv(x)))`` (EfficientNet's swish)."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(blocks):
        inits += [
            _weight(rng, f"w{i}a", channels, channels, 1, 1),
            _weight(rng, f"w{i}b", channels, channels, 1, 1),
        ]
        nodes += [
            helper.make_node("Conv", [x, f"w{i}a"], [f"c{i}"], name=f"conv{i}a"),
            helper.make_node("Sigmoid", [f"c{i}"], [f"s{i}"], name=f"sigmoid{i}"),
            helper.make_node("Mul", [f"c{i}", f"s{i}"], [f"m{i}"], name=f"swish{i}"),
            helper.make_node("Conv", [f"m{i}", f"w{i}b"], [f"d{i}"], name=f"conv{i}b"),
            helper.make_node("Add", [f"d{i}", x], [f"y{i}"], name=f"residual{i}"),
        ]
        x = f"y{i}"
    shape = [1, channels, size, size]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)],
        inits,
    )


def channels_last_layernorm(channels: int = 32, size: int = 16, spelled_out: bool = False) -> onnx.ModelProto:
    """ConvNeXt's norm: depthwise Conv, Transpose to channels-last, LayerNorm, MatMul + Add.

    ``spelled_out``: the LayerNorm as ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add
    (an older exporter's form) instead of one LayerNormalization node.
    """
    rng = np.random.default_rng(1)
    inits = [
        _weight(rng, "dw", channels, 1, 3, 3),
        numpy_helper.from_array(np.ones(channels, np.float32), "gamma"),
        numpy_helper.from_array(np.zeros(channels, np.float32), "beta"),
        _weight(rng, "w1", channels, 2 * channels),
        _weight(rng, "b1", 2 * channels),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "dw"], ["dwc"], name="dwconv", group=channels, pads=[1, 1, 1, 1]),
        helper.make_node("Transpose", ["dwc"], ["t"], name="to_channels_last", perm=[0, 2, 3, 1]),
    ]
    if spelled_out:
        inits += [
            numpy_helper.from_array(np.array([-1], np.int64), "axes"),
            numpy_helper.from_array(np.array(2.0, np.float32), "two"),
            numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
        ]
        nodes += [
            helper.make_node("ReduceMean", ["t", "axes"], ["mu"], name="ln_mean"),
            helper.make_node("Sub", ["t", "mu"], ["xc"], name="ln_sub"),
            helper.make_node("Pow", ["xc", "two"], ["sq"], name="ln_pow"),
            helper.make_node("ReduceMean", ["sq", "axes"], ["var"], name="ln_var"),
            helper.make_node("Add", ["var", "eps"], ["vareps"], name="ln_eps"),
            helper.make_node("Sqrt", ["vareps"], ["std"], name="ln_sqrt"),
            helper.make_node("Div", ["xc", "std"], ["xn"], name="ln_div"),
            helper.make_node("Mul", ["xn", "gamma"], ["xs"], name="ln_scale"),
            helper.make_node("Add", ["xs", "beta"], ["ln"], name="ln_shift"),
        ]
    else:
        nodes.append(
            helper.make_node("LayerNormalization", ["t", "gamma", "beta"], ["ln"], name="norm", axis=-1)
        )
    nodes += [
        helper.make_node("MatMul", ["ln", "w1"], ["h"], name="pwconv"),
        helper.make_node("Add", ["h", "b1"], ["y"], name="pwconv_bias"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, size, size, 2 * channels])],
        inits,
    )


def _profile(model: onnx.ModelProto, iterations: int = 3) -> tuple[KernelProfile, list[Layer]]:
    spec = ModelSpec.create(model)
    inputs = make_inputs(model, bind_input_shapes(model, None), seed=0)
    with OpenVinoBackend({"threads": "1"}).open(spec, inputs) as session:
        kernels = session.profile(iterations)
    layers, _ = build_layers(analyze(model, proto=model), kernels, None)
    return kernels, layers


def _assert_priced_once_within_tensors(kernels: KernelProfile, layers: list[Layer]) -> None:
    """No node's cost in two kernels (one-direction shares sum to one); no layer charged more bytes
    than its kernel's runtime tensors or moving them impossibly fast."""
    share: dict[str, float] = {}
    for kernel in kernels.kernels:
        if kernel.kind != "compute":
            continue
        for node in set(kernel.onnx_nodes) - set(kernel.extra.get("shared", ())):
            share[node] = share.get(node, 0.0) + kernel.extra.get("portion", 1.0)
    assert all(total == pytest.approx(1.0) for total in share.values()), share
    by_name = {k.name: k for k in kernels.kernels}
    for layer in layers:
        if layer.kind == "folded":
            continue
        io_bytes = by_name[layer.name].extra.get("io_bytes")
        assert io_bytes is not None and layer.bytes <= io_bytes, (layer.name, layer.bytes, io_bytes)
        if layer.time > 0:
            assert layer.bytes / layer.time < IMPOSSIBLE_BYTES_PER_SECOND, layer


def test_dequantizing_multiply_between_int8_blocks_takes_no_node_of_either_block() -> None:
    """OpenVINO runs an int8 residual block's fp32 skip input as a plugin-made ``Multiply_<n>``
    (zero point and scale) between the previous block's Convolution and the next one.  Its region
    reached every unclaimed DequantizeLinear and Sigmoid of the block between them: 23 nodes priced
    in an 7 us kernel, 1,230 GB/s on EfficientNet int8."""
    from pytest_roofline.zoo.quantize import qdq_int8

    model = qdq_int8(swish_blocks(blocks=3))
    kernels, layers = _profile(model)
    _assert_priced_once_within_tensors(kernels, layers)
    helpers = [k for k in kernels.kernels if k.name.startswith("Multiply_") and k.op_type == "Subgraph"]
    assert helpers  # the pattern is there: one per residual input
    flops = {la.name: la.flops for la in layers}
    for kernel in helpers:  # a helper of the Convolution it feeds: its nodes' FLOPs stay there
        assert set(kernel.onnx_nodes) <= set(kernel.extra.get("shared", ())), kernel
        assert flops[kernel.name] == 0
    runs = {n: k.op_type for k in kernels.kernels for n in k.onnx_nodes if n not in k.extra.get("shared", ())}
    for node in model.graph.node:  # the Convs, their swish and their activations' Q/DQ: int8 Convolutions
        if node.op_type in ("Conv", "Sigmoid") or node.output[0].startswith(("c", "m", "d")):
            assert runs[node.name] == "Convolution", (node.name, runs.get(node.name))


def test_bidirectional_lstm_is_split_between_its_two_direction_kernels() -> None:
    """OpenVINO runs a bidirectional LSTM as two LSTMSequence kernels whose names are its own; the
    Transpose after them took the LSTM by boundary, and both kernels shared the Transpose's nodes
    (the Transpose priced at the LSTM's bytes: 94 GB/s)."""
    from pytest_roofline.zoo.mixed import lstm_gru

    model = lstm_gru(seq=16, features=32, hidden=32)
    kernels, layers = _profile(model)
    _assert_priced_once_within_tensors(kernels, layers)
    directions = [k for k in kernels.kernels if k.op_type == "LSTMSequence"]
    assert len(directions) == 2
    lstm = next(n.name or f"LSTM_{i}" for i, n in enumerate(model.graph.node) if n.op_type == "LSTM")
    assert all(k.onnx_nodes == (lstm,) and k.extra["portion"] == 0.5 for k in directions)
    # the Transpose after them, where OpenVINO keeps one (a pytest-xdist worker's compile folded
    # it into the sequence kernels), never takes the LSTM
    transposes = [k for k in kernels.kernels if k.op_type == "Transpose"]
    assert len(transposes) <= 1 and all(lstm not in t.onnx_nodes for t in transposes)
    analysis = analyze(model, proto=model)
    flops = {la.name: la.flops for la in layers}
    assert sum(flops[k.name] for k in directions) == pytest.approx(analysis.node(lstm).flops, rel=1e-6)
    (gru,) = [k for k in kernels.kernels if k.op_type == "GRUSequence"]
    assert "portion" not in gru.extra and any(analysis.node(n).op_type == "GRU" for n in gru.onnx_nodes)


@pytest.mark.parametrize("spelled_out", [False, True], ids=["LayerNormalization", "spelled-out"])
def test_layernorm_pieces_stay_within_the_layernorm(spelled_out: bool) -> None:
    """OpenVINO splits a channels-last LayerNormalization into ReduceMean / Subtract / RMS /
    Subgraph kernels named after its own ops; ``Multiply_<n>`` (the RMS) searched downstream for a
    ``Mul`` and found the next MatMul's GELU, so every piece was priced at that node (ConvNeXt:
    ReduceMean at 246 GB/s).  Spelled out in ONNX, ``ReduceMean_<n>`` and ``Power_<n>`` take the
    ReduceMean and Pow their inputs feed; ``Power_<n>`` took every node up to the Sqrt before."""
    model = channels_last_layernorm(spelled_out=spelled_out)
    kernels, layers = _profile(model)
    _assert_priced_once_within_tensors(kernels, layers)
    norm = {n.name for n in model.graph.node if n.name.startswith(("ln", "norm"))}
    for kernel in kernels.kernels:
        if kernel.kind == "compute" and kernel.onnx_nodes and set(kernel.onnx_nodes) & norm:
            # a piece of the norm runs only the norm (its bias Add aside)
            assert set(kernel.onnx_nodes) <= norm | {"pwconv", "pwconv_bias", "to_channels_last"}, kernel
    executed = {n for k in kernels.kernels for n in k.onnx_nodes}
    assert norm <= executed | set(kernels.folded)
    if spelled_out:  # each piece runs its own nodes: the means in the ReduceMean kernels, no sharing
        means = [k.onnx_nodes for k in kernels.kernels if k.op_type == "ReduceMean"]
        assert sorted(means) == [("ln_mean",), ("ln_var",)]
        assert not [k.name for k in kernels.kernels if k.extra.get("shared")]


def test_a_weight_slice_fused_into_an_add_is_placed_by_the_rows_it_reads() -> None:
    """BERT-base's embedding Add on OpenVINO: one Subgraph runs Slice(position table) + Add + Add.
    The fused layer's weight bytes were the whole 1.57 MB table, as large as all its bytes, so the
    layer was placed with the 440 MB of weights in DRAM and read 288 % of that roof; the Slice
    reads 128 rows, a working set that stays in the cache."""
    from _calibration_helpers import levelled_roofline

    from pytest_roofline.api import profile_model

    mib, rows, width = 1 << 20, 32, 1024
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.random((16384, width), dtype=np.float32), "E"),  # 64 MiB
        numpy_helper.from_array(rng.random((4096, width), dtype=np.float32), "P"),  # 16 MiB
        numpy_helper.from_array(rng.random((width, 16384), dtype=np.float32) * 0.01, "H"),  # 64 MiB
        numpy_helper.from_array(np.array([0], np.int64), "start"),
        numpy_helper.from_array(np.array([rows], np.int64), "end"),
        numpy_helper.from_array(np.array([0], np.int64), "axis"),
    ]
    nodes = [
        helper.make_node("Gather", ["E", "ids"], ["words"], name="embed"),
        helper.make_node("Slice", ["P", "start", "end", "axis"], ["positions"], name="slice_positions"),
        helper.make_node("Add", ["words", "positions"], ["x"], name="add_positions"),
        helper.make_node("MatMul", ["x", "H"], ["y"], name="head"),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, rows, 16384])],
        inits,
    )
    roofline = levelled_roofline()
    prof = profile_model(
        model, backend="openvino", options=F32_ONE_THREAD, roofline=roofline, sessions=1, rounds=3
    )
    (fused,) = [la for la in prof.layers if "slice_positions" in la.onnx_nodes and la.kind == "compute"]
    assert fused.bytes < 1 * mib and fused.memory_level in ("L2", "L3"), fused
    assert prof.layer("head").memory_level == "DRAM"


def test_int8_kernels_of_a_mixed_model_are_judged_against_the_int8_roof() -> None:
    """OpenVINO runs a QDQ model's Convolutions in u8 and the rest in f32: the model is ``mixed``
    and was judged against float32's roof, which its int8 1x1 Convolutions beat (EfficientNet int8:
    128 %); each int8 kernel is judged against int8's roof, the others against float32's."""
    from pytest_roofline.api import prepare, profile_layers
    from pytest_roofline.roofline import DeviceRoofline
    from pytest_roofline.zoo.quantize import qdq_int8

    roofline = DeviceRoofline(  # bandwidth without limit: every layer's attainable figure is its peak
        peak_flops={"float32": 100e9, "int8": 400e9}, peak_bandwidth=1e18, fingerprint={}, threads=1
    )
    prepared = prepare(qdq_int8(swish_blocks()), backend="openvino", options=F32_ONE_THREAD)
    run = profile_layers(prepared, iterations=3, roofline=roofline)
    # which roof a kernel is judged against is this test's question, not what it read: a QuantizeLinear
    # that read 0 us on a busy machine got no roof at all, so every kernel takes a fixed 10 us here
    kernels = tuple(dataclasses.replace(k, times=(1e-5,) * len(k.times)) for k in run.kernels.kernels)
    layers, _ = build_layers(run.analysis, dataclasses.replace(run.kernels, kernels=kernels), roofline)
    assert run.kernels.precision == "mixed"
    convs = [la for la in layers if la.op_type == "Convolution"]
    others = [la for la in layers if la.kind == "compute" and la.op_type == "Subgraph" and la.flops]
    assert convs and all(la.attainable_flops == pytest.approx(400e9) for la in convs), convs
    assert others and all(la.attainable_flops == pytest.approx(100e9) for la in others), others


def test_a_transpose_named_after_an_einsum_carries_none_of_its_flops() -> None:
    """OpenVINO runs attention's ``bhqk,bhke->bqhe`` Einsum inside its MHA Subgraph and lays the
    output out with a Transpose named ``Einsum_7``, whose originalLayersNames list only that Einsum:
    priced at the Einsum's 8.4 MFLOP, the Transpose read 1678 GFLOP/s (178 % of a bf16 roof).  A
    data-movement kernel computes nothing: no FLOPs, its bytes capped by its own tensors."""
    from pytest_roofline.api import prepare, profile_layers
    from pytest_roofline.zoo import mixed

    prepared = prepare(mixed.einsum_attention(), backend="openvino", options={"threads": "1"})
    run = profile_layers(prepared, iterations=3, roofline=None)
    movers = [k for k in run.kernels.kernels if k.op_type == "Transpose" and k.onnx_nodes]
    einsums = [k for k in movers if any(n.startswith("Einsum") for n in k.onnx_nodes)]
    assert einsums, [(k.name, k.op_type, k.onnx_nodes) for k in run.kernels.kernels]
    assert all(k.extra.get("arithmetic") is False for k in einsums)
    layers, _ = build_layers(run.analysis, run.kernels, None)
    by_name = {la.name: la for la in layers}
    assert all(by_name[k.name].flops == 0 for k in einsums)
    assert all(by_name[k.name].bytes <= k.extra["io_bytes"] for k in einsums)
