"""The model zoo: valid exporter-like graphs whose MACs equal the published figures."""

from __future__ import annotations

import onnx
import pytest

from pytest_roofline import zoo
from pytest_roofline.analysis import analyze, published_macs

FULL_SIZE = {
    "resnet50": (zoo.resnet50, {"batch": 1}),
    "mobilenet_v2": (zoo.mobilenet_v2, {"batch": 1}),
    "vit_b16": (zoo.vit_b16, {"batch": 1}),
    "bert_base": (zoo.bert_base, {"batch": 1}),
}


@pytest.mark.parametrize("name", sorted(FULL_SIZE))
def test_full_size_models_match_published_macs(name: str) -> None:
    builder, kwargs = FULL_SIZE[name]
    result = analyze(builder(external_data=True), **kwargs)  # weightless: no 100 MB in memory
    gmacs = published_macs(result) / 1e9
    assert gmacs == pytest.approx(zoo.PUBLISHED_GMACS[name], rel=1e-3)
    assert result.uncosted == ()


def test_published_parameter_counts() -> None:
    assert analyze(zoo.vit_b16(external_data=True), batch=1).total.params == 86_567_656  # torchvision
    bert = analyze(zoo.bert_base(external_data=True), batch=1)
    assert bert.total.params == 109_482_240  # Hugging Face bert-base-uncased with pooler


@pytest.mark.parametrize("builder", [zoo.tiny_cnn, zoo.tiny_transformer, zoo.mobilenet_v2])
def test_models_pass_the_onnx_checker(builder) -> None:  # noqa: ANN001
    onnx.checker.check_model(builder(), full_check=True)


def test_legacy_export_naming_and_symbolic_dims() -> None:
    model = zoo.tiny_cnn()
    assert [n.name for n in model.graph.node[:4]] == ["Conv_0", "Relu_1", "MaxPool_2", "Conv_3"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    dims = [d.dim_param for d in zoo.tiny_transformer().graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "seq"]
    assert zoo.tiny_cnn(batch=4).graph.input[0].type.tensor_type.shape.dim[0].dim_value == 4


def test_external_data_builders_hold_no_weights() -> None:
    model = zoo.resnet50(external_data=True)
    assert model.ByteSize() < 1_000_000
    assert all(
        t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer if len(t.dims) > 1
    )


def test_synthetic_chain_size() -> None:
    model = zoo.synthetic_chain(1000)
    assert len(model.graph.node) == 1001  # the chain plus the Identity naming the output
    assert analyze(model, batch=1).node("MatMul_0").macs == 16 * 16
