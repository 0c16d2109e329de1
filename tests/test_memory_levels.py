"""Cache-aware memory roofs on real runs: each layer placed on the level holding its bytes (issue 21).

A real onnxruntime (and OpenVINO) profile of a model whose footprint exceeds the last-level cache:
its 64 MiB weight MatMul reads from DRAM, its small-weight and weightless layers from the cache
holding their activations.  The roofline's levels are given (this host's cache sizes as sysfs would
report them for two cores) so the placement does not hang on what a busy calibration saw.
"""

from __future__ import annotations

import numpy as np
import pytest
from _calibration_helpers import levelled_roofline
from onnx import TensorProto, helper, numpy_helper

from pytest_roofline.api import profile_model
from pytest_roofline.profile import ModelProfile

GB, MIB = 1e9, 1 << 20
WIDE = 4096  # the big MatMul's weight: 4096 x 4096 float32 = 64 MiB > a 32 MiB L3


def _model(wide: int) -> object:
    """x[1, wide] -> MatMul(W[wide, wide]) "big" -> Relu "relu" -> MatMul(S[wide, 16]) "small" -> Softmax."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.random((wide, wide), dtype=np.float32) * 0.01, "W"),
        numpy_helper.from_array(rng.random((wide, 16), dtype=np.float32) * 0.01, "S"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="big"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "S"], ["s"], name="small"),
        helper.make_node("Softmax", ["s"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "levels",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, wide])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        initializer=weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _profile(backend: str, wide: int = WIDE) -> ModelProfile:
    return profile_model(
        _model(wide),
        backend=backend,
        # fp32 as the model's byte counts assume: OpenVINO's own default is bf16 on avx512_bf16 CPUs
        options={"precision": "f32"} if backend == "openvino" else {},
        roofline=levelled_roofline(),
        sessions=2,
        rounds=3,
        profile_iterations=5,
    )


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_big_weights_read_from_dram_small_layers_from_cache(backend: str) -> None:
    if backend == "openvino":
        pytest.importorskip("openvino")
    prof = _profile(backend)
    big = prof.layer("big")  # OpenVINO fuses the Relu into it: still 64 MiB of weights
    assert big.memory_level == "DRAM", big
    # a 32 MiB L3 holds at most half of a 64 MiB model when a weight is read: DRAM serves the rest
    assert 20 * GB < big.memory_bandwidth < 30 * GB
    softmax = prof.layer("softmax")  # 64 bytes in, 64 out, no weights: just written, in L2
    assert softmax.memory_level == "L2" and softmax.memory_bandwidth == pytest.approx(60 * GB), softmax
    small = prof.layer("small")
    # its 256 KiB of weights half from DRAM (the model does not stay in L3), its 16 KiB input from L2
    assert small.memory_level == "DRAM" and 20 * GB < small.memory_bandwidth < 60 * GB
    if backend == "onnxruntime":
        relu = prof.layer("relu")  # 16 KiB in + 16 KiB out
        assert relu.name != big.name and relu.memory_level == "L2" and relu.memory_bandwidth >= 50 * GB
    data = prof.to_dict()
    assert {la["memory_level"] for la in data["layers"] if la["kind"] != "folded"} >= {"DRAM"}
    assert [lv["name"] for lv in data["roofline"]["levels"]] == ["L2", "L3", "DRAM"]
    assert ModelProfile.from_dict(data).layer("big").memory_level == "DRAM"


def test_a_model_that_fits_the_cache_reads_everything_from_it() -> None:
    prof = _profile("onnxruntime", wide=256)  # 256 KiB + 16 KiB of weights: the model stays in L2
    levels = {la.name: la.memory_level for la in prof.layers if la.kind == "compute"}
    assert levels and set(levels.values()) == {"L2"}, levels


def test_the_profile_table_shows_each_layers_level_and_the_levels() -> None:
    import dataclasses

    from pytest_roofline.report.tables import profile_table

    prof = _profile("onnxruntime", wide=1024)  # 4 MiB of weights: resident in L3, not in L2
    table = profile_table(prof, top=0)
    assert "memory levels: L2 1.05 MB 60.0 GB/s, L3 33.55 MB 50.0 GB/s, DRAM 20.0 GB/s" in table
    header = next(line for line in table.splitlines() if line.startswith("layer "))
    assert header.split()[-1] == "level"
    big = next(line for line in table.splitlines() if line.startswith("big "))
    assert big.split()[-1] == prof.layer("big").memory_level == "L3"
    bare = dataclasses.replace(prof, roofline=dataclasses.replace(levelled_roofline(), cache_levels=()))
    assert "memory levels: DRAM only, 20.0 GB/s (this calibration has no cache levels" in profile_table(bare)


def test_rows_gathered_from_a_table_larger_than_the_cache_are_placed_by_their_own_size() -> None:
    """BERT's word embeddings (issue 21): 128 rows of a 94 MB table read at 268 % of the DRAM roof
    (the seeded token ids repeat, and rows read each run stay cached); a Gather's working set is
    the rows it touches, so its roof is the level holding them."""
    rng = np.random.default_rng(0)
    table = numpy_helper.from_array(rng.random((16384, 1024), dtype=np.float32), "E")  # 64 MiB
    head = numpy_helper.from_array(rng.random((1024, 16384), dtype=np.float32) * 0.01, "H")  # 64 MiB
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["E", "ids"], ["x"], name="embed"),
            helper.make_node("MatMul", ["x", "H"], ["y"], name="head"),
        ],
        "embed",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 16384])],
        initializer=[table, head],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    prof = profile_model(model, roofline=levelled_roofline(), sessions=2, rounds=3, profile_iterations=5)
    embed = prof.layer("embed")
    assert embed.bytes < 1 * MIB and embed.memory_level == "L2", embed  # 2 x 128 KiB of rows and output
    assert prof.layer("head").memory_level == "DRAM"  # a 128 MiB model: the head's weight streams
