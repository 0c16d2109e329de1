"""Bytes a kernel really touches: indexing, slicing, scatter, embeddings and KV caches."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pytest_roofline.analysis import analyze, published_macs
from pytest_roofline.analysis.traffic import BYTE_RULES, byte_rule
from pytest_roofline.analysis.views import ALIAS_OPS, RUNTIME_VIEW_OPS, VIEW_OPS

F, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
MS = "com.microsoft"


def graph_model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, tuple[int, tuple[int, ...]]],
    weights: dict[str, np.ndarray],
    outputs: tuple[str, ...] = ("y",),
    ms: bool = False,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, list(s)) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(o, F, None) for o in outputs],
        [numpy_helper.from_array(v, n) for n, v in weights.items()],
    )
    opsets = [helper.make_opsetid("", 18)] + ([helper.make_opsetid(MS, 1)] if ms else [])
    return helper.make_model(graph, opset_imports=opsets)


def test_gather_reads_the_looked_up_rows_not_the_table() -> None:
    table = np.zeros((1000, 64), np.float32)
    model = graph_model(
        [helper.make_node("Gather", ["table", "ids"], ["y"], name="node")],
        {"ids": (I64, (1, 16))},
        {"table": table},
    )
    node = analyze(model).node("node")
    assert node.bytes_read == 16 * 64 * 4 + 16 * 8  # 16 rows of 64 floats + the indices
    assert node.bytes_written == 16 * 64 * 4
    assert node.touched_elements == {"table": 16 * 64}


def test_gather_elements_and_gather_nd_read_one_element_per_output() -> None:
    model = graph_model(
        [
            helper.make_node("GatherElements", ["x", "idx"], ["a"], name="ge", axis=1),
            helper.make_node("GatherND", ["x", "nd"], ["y"], name="gnd"),
        ],
        {"x": (F, (8, 100)), "idx": (I64, (8, 3)), "nd": (I64, (5, 2))},
        {},
        outputs=("a", "y"),
    )
    result = analyze(model)
    assert result.node("ge").bytes_read == 24 * 4 + 24 * 8
    assert result.node("gnd").bytes_read == 5 * 4 + 10 * 8  # 5 scalars picked by (row, col) pairs


def test_gather_of_repeated_rows_is_capped_at_the_table() -> None:
    model = graph_model(
        [helper.make_node("Gather", ["table", "ids"], ["y"], name="node")],
        {"ids": (I64, (1, 64))},
        {"table": np.zeros((4, 8), np.float32)},
    )
    assert analyze(model).node("node").bytes_read == 4 * 8 * 4 + 64 * 8


def test_slice_reads_the_slice() -> None:
    starts, ends, axes = (np.array([v], np.int64) for v in (0, 10, 1))
    model = graph_model(
        [helper.make_node("Slice", ["x", "s", "e", "a"], ["y"], name="node")],
        {"x": (F, (1, 100, 32))},
        {"s": starts, "e": ends, "a": axes},
    )
    node = analyze(model).node("node")
    assert node.bytes_read == 10 * 32 * 4 + 3 * 8 and node.bytes_written == 10 * 32 * 4


def test_compress_and_center_crop_read_what_they_keep() -> None:
    model = graph_model(
        [
            helper.make_node("Compress", ["x", "keep"], ["c"], name="compress", axis=0),
            helper.make_node("CenterCropPad", ["x", "shape"], ["y"], name="crop"),
        ],
        {"x": (F, (10, 20))},
        {"keep": np.array([1, 0, 1] + [0] * 7, bool), "shape": np.array([4, 30], np.int64)},
        outputs=("c", "y"),
    )
    result = analyze(model)
    assert result.node("compress").bytes_read == 2 * 20 * 4 + 10  # two kept rows + the condition
    assert result.node("crop").bytes_read == 4 * 20 * 4 + 2 * 8  # 4 rows cropped, columns padded
    assert result.node("crop").bytes_written == 4 * 30 * 4


def _scatter(data_from_graph_input: bool) -> onnx.ModelProto:
    nodes = [helper.make_node("ScatterND", ["d", "idx", "upd"], ["y"], name="node")]
    if not data_from_graph_input:
        nodes.insert(0, helper.make_node("Relu", ["x"], ["d"], name="relu"))
    return graph_model(
        nodes,
        {"x" if not data_from_graph_input else "d": (F, (64, 16)), "idx": (I64, (2, 1)), "upd": (F, (2, 16))},
        {},
    )


def test_scatter_into_an_intermediate_moves_the_updates_only() -> None:
    node = analyze(_scatter(data_from_graph_input=False)).node("node")
    assert node.bytes_read == 2 * 8 + 2 * 16 * 4  # indices + updates; data's buffer is reused
    assert node.bytes_written == 2 * 16 * 4  # the two updated rows


def test_scatter_into_a_graph_input_copies_data() -> None:
    node = analyze(_scatter(data_from_graph_input=True)).node("node")
    assert node.bytes_read == 64 * 16 * 4 + 2 * 8 + 2 * 16 * 4
    assert node.bytes_written == 64 * 16 * 4


def test_scatter_into_a_constant_copies_it() -> None:
    zeros = helper.make_tensor("zeros", F, [64, 16], [0.0] * 64 * 16)
    nodes = [
        helper.make_node("Constant", [], ["d"], name="const", value=zeros),
        helper.make_node("ScatterND", ["d", "idx", "upd"], ["y"], name="node"),
    ]
    model = graph_model(nodes, {"idx": (I64, (2, 1)), "upd": (F, (2, 16))}, {})
    node = analyze(model).node("node")
    assert node.bytes_read == 64 * 16 * 4 + 2 * 8 + 2 * 16 * 4 and node.bytes_written == 64 * 16 * 4


def test_embed_layer_norm_reads_the_looked_up_rows_of_its_tables() -> None:
    hidden, tokens = 32, 16
    weights = {
        "word": np.zeros((5000, hidden), np.float32),
        "pos": np.zeros((512, hidden), np.float32),
        "seg": np.zeros((2, hidden), np.float32),
        "gamma": np.ones(hidden, np.float32),
        "beta": np.zeros(hidden, np.float32),
    }
    node = helper.make_node(
        "EmbedLayerNormalization",
        ["ids", "segs", "word", "pos", "seg", "gamma", "beta"],
        ["y", "mask_index"],
        name="node",
        domain=MS,
    )
    model = graph_model([node], {"ids": (I32, (1, tokens)), "segs": (I32, (1, tokens))}, weights, ms=True)
    result = analyze(model, batch=1)
    cost = result.node("node")
    rows = (tokens + tokens) * hidden * 4 + 2 * hidden * 4  # word and position rows; both segment rows
    assert cost.bytes_read == 2 * tokens * 4 + rows + 2 * hidden * 4
    assert cost.bytes < 100_000  # the 5000-row table (640 kB) is not read


def test_group_query_attention_reads_the_filled_cache_and_writes_the_new_position() -> None:
    heads, kv_heads, head, max_len, filled = 4, 2, 8, 64, 10
    node = helper.make_node(
        "GroupQueryAttention",
        ["q", "k", "v", "past_key", "past_value", "seqlens_k", "total"],
        ["y", "present_key", "present_value"],
        name="node",
        domain=MS,
        num_heads=heads,
        kv_num_heads=kv_heads,
    )
    model = graph_model(
        [node],
        {
            "q": (F, (1, 1, heads * head)),
            "k": (F, (1, 1, kv_heads * head)),
            "v": (F, (1, 1, kv_heads * head)),
            "past_key": (F, (1, kv_heads, max_len, head)),
            "past_value": (F, (1, kv_heads, max_len, head)),
            "seqlens_k": (I32, (1,)),
        },
        {"total": np.array(filled + 1, np.int32)},
        outputs=("y", "present_key", "present_value"),
        ms=True,
    )
    result = analyze(model)
    assert result.tensors["present_key"].shape == (1, kv_heads, max_len, head)  # one shared buffer
    cost = result.node("node")
    position = kv_heads * head * 4  # one position of one cache
    assert cost.touched_elements["past_key"] == filled * kv_heads * head
    assert cost.bytes_read == (2 * heads + 2 * 2 * kv_heads) * head * 4 // 2 + 2 * filled * position + 4 + 4
    assert cost.bytes_written == heads * head * 4 + 2 * position
    assert cost.macs == heads * (filled + 1) * 2 * head  # FLOP rule untouched


def test_decoder_masked_mha_reads_past_sequence_length_positions_of_its_shared_buffer() -> None:
    heads, head, max_len, filled = 4, 8, 32, 10
    hidden = heads * head
    node = helper.make_node(
        "DecoderMaskedMultiHeadAttention",
        ["q", "k", "v", "", "", "past_key", "past_value", "past_len"],
        ["y", "present_key", "present_value"],
        name="node",
        domain=MS,
        num_heads=heads,
        past_present_share_buffer=1,
    )
    cache = (F, (1, heads, max_len, head))
    model = graph_model(
        [node],
        {
            "q": (F, (1, 1, hidden)),
            "k": (F, (1, 1, hidden)),
            "v": (F, (1, 1, hidden)),
            "past_key": cache,
            "past_value": cache,
        },
        {"past_len": np.array(filled, np.int32)},
        outputs=("y", "present_key", "present_value"),
        ms=True,
    )
    cost = analyze(model).node("node")
    assert cost.bytes_read == 3 * hidden * 4 + 2 * filled * hidden * 4 + 4  # q, k, v, 10 filled positions
    assert cost.bytes_written == hidden * 4 + 2 * hidden * 4  # the output and one new position per cache
    assert cost.macs == heads * (filled + 1) * 2 * head


def test_a_fused_group_counts_what_its_members_touch() -> None:
    table = np.zeros((1000, 64), np.float32)
    model = graph_model(
        [
            helper.make_node("Gather", ["table", "ids"], ["e"], name="gather"),
            helper.make_node("Relu", ["e"], ["y"], name="relu"),
        ],
        {"ids": (I64, (1, 16))},
        {"table": table},
    )
    group = analyze(model).group(["gather", "relu"])
    assert group.bytes == 16 * 64 * 4 + 16 * 8 + 16 * 64 * 4
    assert analyze(model).group(["gather"], float_itemsize=2).bytes == 16 * 64 * 2 + 16 * 8 + 16 * 64 * 2


def test_node_costs_keep_what_they_touch_through_json() -> None:
    from pytest_roofline.analysis.types import NodeCost

    model = graph_model(
        [helper.make_node("Gather", ["table", "ids"], ["y"], name="node")],
        {"ids": (I64, (2,))},
        {"table": np.zeros((50, 4), np.float32)},
    )
    node = analyze(model).node("node")
    assert node.to_dict()["touched"] == {"table": 8}
    assert NodeCost.from_dict(node.to_dict()) == node


def test_bert_base_word_embedding_gather_is_priced_at_its_rows() -> None:
    """Issue 21's target: under 4 MB at seq 128 (was the whole 93.8 MB table); MACs unchanged."""
    from pytest_roofline.zoo import bert_base

    result = analyze(bert_base(128), batch=1)
    gather = next(n for n in result.nodes if "embeddings.word_embeddings.weight" in n.inputs)
    assert gather.bytes < 4e6
    assert gather.bytes == 128 * 768 * 4 * 2 + 128 * 8
    assert published_macs(result) == 11_174_215_680


def test_byte_rules_are_stated_for_the_partial_ops() -> None:
    assert "gathered" in byte_rule("Gather") and "whole" in byte_rule("MatMul")
    assert {"Gather", "Slice", "ScatterND", "EmbedLayerNormalization", "GroupQueryAttention"} <= set(
        BYTE_RULES
    )


@pytest.mark.parametrize("subset", [ALIAS_OPS, RUNTIME_VIEW_OPS])
def test_view_op_subsets_are_named_parts_of_one_set(subset: frozenset[str]) -> None:
    from pytest_roofline.backends.onnxruntime import attribution as ort_attribution
    from pytest_roofline.profile import sanity

    assert subset <= VIEW_OPS
    assert not hasattr(sanity, "VIEW_OPS") and not hasattr(ort_attribution, "VIEW_OPS")
    assert RUNTIME_VIEW_OPS == VIEW_OPS - {"Constant"}


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_a_profiled_embedding_layer_is_priced_at_its_rows(backend: str) -> None:
    """Through a real backend's attribution: the layer running the Gather moves rows, not the table."""
    pytest.importorskip(backend)
    from pytest_roofline.api import profile_model

    table = np.random.default_rng(0).standard_normal((20000, 64)).astype(np.float32)  # 5.1 MB
    model = graph_model(
        [
            helper.make_node("Gather", ["table", "ids"], ["e"], name="gather"),
            helper.make_node("Tanh", ["e"], ["y"], name="tanh"),
        ],
        {"ids": (I64, (1, 32))},
        {"table": table},
    )
    prof = profile_model(model, backend=backend, sessions=1, rounds=2, profile_iterations=2)
    layer = prof.layer("gather")
    assert layer.bytes <= 32 * 64 * 4 * 3 + 32 * 8  # rows read, written (and read by a fused Tanh)
