"""The analyzer's conv/gemm/matmul MACs equal an independent count from onnxruntime's real shapes."""

from __future__ import annotations

import pytest
from reference_macs import reference_macs

from pytest_roofline import zoo
from pytest_roofline.analysis import analyze
from pytest_roofline.model import bind_input_shapes, make_inputs

CASES = {
    "tiny_cnn": (zoo.tiny_cnn, {"batch": 2}),
    "tiny_transformer": (zoo.tiny_transformer, {"batch": 2, "dims": {"seq": 12}}),
    "tiny_transformer_wide": (
        lambda: zoo.tiny_transformer(seq=32, hidden=96, heads=6, layers=3),
        {"batch": 1, "dims": {"seq": 32}},
    ),
    "mobilenet_v2": (zoo.mobilenet_v2, {"batch": 1}),
    "resnet50": (zoo.resnet50, {"batch": 1}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_macs_match_independent_runtime_count(name: str) -> None:
    builder, kwargs = CASES[name]
    model = builder()
    feeds = make_inputs(model, bind_input_shapes(model, kwargs.get("batch"), kwargs.get("dims")))
    expected = reference_macs(model, feeds)
    result = analyze(model, **kwargs)
    for op_type, macs in expected.items():
        got = sum(n.macs for n in result.nodes if n.op_type == op_type)
        assert got == pytest.approx(macs, rel=1e-3, abs=0), op_type
    assert sum(expected.values()) > 0
