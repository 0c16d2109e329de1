"""The model zoo: valid exporter-like graphs whose MACs equal the published figures."""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from pytest_roofline import zoo
from pytest_roofline.analysis import analyze, published_macs
from pytest_roofline.diff import diff_models
from pytest_roofline.errors import RooflineError
from pytest_roofline.model import bind_input_shapes, make_inputs, model_hash

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


# -- the zoo of issues 20 and 21 (pytest_roofline.zoo.suite) ------------------------------------

#: Models too big to build, check and run in the quick suite (100-440 MB of random weights).
LARGE = {entry.name for entry in zoo.ZOO if "large" in entry.tags}


@functools.cache
def built(name: str) -> onnx.ModelProto:
    """Each zoo model built once per test session."""
    return zoo.zoo_model(name).build()


def zoo_params(names: Iterable[str]) -> list[Any]:
    return [pytest.param(name, marks=pytest.mark.slow) if name in LARGE else name for name in names]


def run_onnxruntime(model: onnx.ModelProto, dims: Mapping[str, int]) -> list[np.ndarray]:
    import onnxruntime as ort

    feeds = make_inputs(model, bind_input_shapes(model, 1, dims))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_same_outputs(before: list[np.ndarray], after: list[np.ndarray], float16: bool = False) -> None:
    """Every float output within 1e-5 of its largest magnitude (fp16: 1e-3), the rest equal."""
    assert len(before) == len(after)
    for old, new in zip(before, after, strict=True):
        assert old.shape == new.shape and old.dtype == new.dtype
        if old.dtype.kind != "f":
            np.testing.assert_array_equal(old, new)
            continue
        scale = float(np.abs(old).max()) or 1.0
        error = float(np.abs(old.astype(np.float64) - new.astype(np.float64)).max())
        assert error <= (1e-3 if float16 else 1e-5) * scale


def test_zoo_is_varied_and_named_uniquely() -> None:
    names = [entry.name for entry in zoo.ZOO]
    assert len(names) >= 22 and len(set(names)) == len(names)
    tags = {tag for entry in zoo.ZOO for tag in entry.tags}
    for wanted in ("tiny", "large", "decoder", "kv-cache", "encoder-decoder", "rnn", "int8", "qdq", "fp16"):
        assert wanted in tags
    assert {"control-flow", "moe", "int4", "einsum", "conv1d"} <= tags
    assert sum("cnn" in entry.tags for entry in zoo.ZOO) < len(names) / 2  # not CNNs alone
    assert zoo.zoo_model("gpt2_kv").dims == {"past_sequence_length": 127}
    assert len({zoo.zoo_model("gpt2"), zoo.zoo_model("gpt2")}) == 1  # hashable, frozen


def test_unknown_zoo_name_is_one_line_error() -> None:
    with pytest.raises(RooflineError, match="no zoo model 'gpt3'; the zoo has: tiny_mlp, "):
        zoo.zoo_model("gpt3")


@pytest.mark.parametrize("name", zoo_params(entry.name for entry in zoo.ZOO))
def test_zoo_model_is_valid_costed_and_runs(name: str) -> None:
    entry = zoo.zoo_model(name)
    model = built(name)
    assert model.graph.name == name
    onnx.checker.check_model(model, full_check=name not in LARGE)  # strict shape inference too
    analysis = analyze(model, dims=entry.dims)
    assert analysis.uncosted == ()
    assert analysis.total.macs > 0
    outputs = run_onnxruntime(model, entry.dims)
    assert all(np.isfinite(out).all() for out in outputs if out.dtype.kind == "f")


def test_token_tables_are_read_by_gather() -> None:
    """The decoders keep real vocabularies: the embedding Gather reads a few rows of a big table."""
    for name, vocab in (("gpt2", 50257), ("gpt2_kv", 50257), ("llama", 32000), ("t5", 32128)):
        gathers = [n for n in built(name).graph.node if n.op_type == "Gather"]
        tables = {t.name: t for t in built(name).graph.initializer}
        assert any(n.input[0] in tables and tables[n.input[0]].dims[0] == vocab for n in gathers), name


def test_kv_cache_step_appends_one_token() -> None:
    model = built("gpt2_kv")
    outputs = dict(
        zip(
            [o.name for o in model.graph.output],
            run_onnxruntime(model, {"past_sequence_length": 9}),
            strict=True,
        )
    )
    assert outputs["present.0.key"].shape == (1, 4, 10, 64)
    assert outputs["logits"].shape == (1, 50257)


def test_quantized_and_int4_models_use_their_ops() -> None:
    ops = {
        name: {n.op_type for n in built(name).graph.node}
        for name in ("efficientnet_int8", "llama_int4", "moe")
    }
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops["efficientnet_int8"]
    assert "MatMulNBits" in ops["llama_int4"]
    assert {"TopK", "NonZero", "GatherND", "ScatterND"} <= ops["moe"]
    fp32 = run_onnxruntime(built("efficientnet"), {})[0].ravel()
    int8 = run_onnxruntime(built("efficientnet_int8"), {})[0].ravel()
    assert np.corrcoef(fp32, int8)[0, 1] > 0.99  # calibrated scales: int8 follows fp32


@pytest.mark.parametrize(
    "name", ["tiny_cnn", "efficientnet_int8", "convnext_fp16", "lstm_gru", "scan", "gpt2_kv"]
)
def test_slower_variant_adds_work_and_keeps_outputs(name: str) -> None:
    entry = zoo.zoo_model(name)
    model = built(name)
    slower = zoo.slower_variant(model)
    onnx.checker.check_model(slower)
    assert len(slower.graph.initializer) > len(model.graph.initializer)
    before, after = analyze(model, dims=entry.dims), analyze(slower, dims=entry.dims)
    assert after.total.macs > before.total.macs
    assert_same_outputs(
        run_onnxruntime(model, entry.dims), run_onnxruntime(slower, entry.dims), "fp16" in entry.tags
    )
    assert model.SerializeToString() == built(name).SerializeToString()  # the input is left alone


def test_slower_variant_takes_the_heaviest_or_the_named_node() -> None:
    model = built("tiny_cnn")
    analysis = analyze(model, dims={})
    heaviest = max((n for n in analysis.nodes if n.op_type in ("Conv", "Gemm")), key=lambda n: n.macs)
    added = {n.name for n in zoo.slower_variant(model).graph.node} - {n.name for n in model.graph.node}
    assert f"{heaviest.name}_slower" in added
    named = zoo.slower_variant(model, node="Gemm_12", seed=3)
    assert "Gemm_12_slower" in {n.name for n in named.graph.node}
    with pytest.raises(RooflineError, match="node 'Relu_1' is not a weight-fed MatMul, Gemm or Conv"):
        zoo.slower_variant(model, node="Relu_1")


def test_slower_variant_duplicates_more_nodes_until_it_adds_the_share_asked() -> None:
    entry = zoo.zoo_model("mobilenet_v2")
    model = built("mobilenet_v2")
    before = analyze(model, dims=entry.dims).total.macs
    one = analyze(zoo.slower_variant(model), dims=entry.dims).total.macs
    assert one / before - 1 < 0.07  # the heaviest node alone adds less than 7 %
    several = zoo.slower_variant(model, at_least=0.07)
    assert analyze(several, dims=entry.dims).total.macs / before - 1 >= 0.07
    assert sum(n.name.endswith("_slower") for n in several.graph.node) > 1
    assert_same_outputs(run_onnxruntime(model, entry.dims), run_onnxruntime(several, entry.dims), False)


@pytest.mark.parametrize("name", ["tiny_cnn", "efficientnet_int8", "convnext_fp16", "moe", "loop"])
def test_resaved_copy_is_other_bytes_of_the_same_graph(name: str) -> None:
    entry = zoo.zoo_model(name)
    model = built(name)
    resaved = zoo.resaved_copy(model)
    onnx.checker.check_model(resaved)
    assert model_hash(resaved) != model_hash(model)
    assert diff_models(model, resaved, dims=entry.dims).is_unchanged
    stored = {t.name: t.HasField("raw_data") for t in resaved.graph.initializer}
    assert not all(stored.values())  # small tensors moved to the typed fields
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for tensor in resaved.graph.initializer:
        np.testing.assert_array_equal(numpy_helper.to_array(tensor), values[tensor.name])
    assert_same_outputs(run_onnxruntime(model, entry.dims), run_onnxruntime(resaved, entry.dims))


def test_write_zoo_writes_each_model_once(tmp_path: Path) -> None:
    paths = zoo.write_zoo(tmp_path, ["tiny_mlp", "scan"])
    assert sorted(paths) == ["scan", "tiny_mlp"]
    assert paths["tiny_mlp"] == tmp_path / "tiny_mlp.onnx"
    assert onnx.load(paths["scan"]).SerializeToString() == built("scan").SerializeToString()
    stamp = paths["tiny_mlp"].stat().st_mtime_ns
    paths["scan"].write_bytes(b"stale")
    again = zoo.write_zoo(tmp_path, ["tiny_mlp", "scan"])
    assert again == paths
    assert paths["tiny_mlp"].stat().st_mtime_ns == stamp  # identical bytes: left alone
    assert paths["scan"].read_bytes() == built("scan").SerializeToString()  # changed: rewritten
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scan.onnx", "tiny_mlp.onnx"]


def test_build_zoo_prints_the_smoke_table(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "build_zoo.py"
    result = subprocess.run(
        [
            sys.executable,
            str(script),
            "--out",
            str(tmp_path),
            "--models",
            "tiny_mlp,lstm_gru",
            "--seconds",
            "0.05",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()}
    assert rows["tiny_mlp"][1] == "tiny,mlp" and rows["tiny_mlp"][-1] == "ms"
    assert float(rows["lstm_gru"][3]) == pytest.approx(analyze(built("lstm_gru")).total.macs / 1e9, abs=1e-3)
    assert "zoo of 2 models written" in result.stdout


@pytest.mark.parametrize("name", ["efficientnet_int8", "llama_int4", "moe", "gpt2_kv", "loop"])
def test_zoo_models_run_on_openvino(name: str) -> None:
    """OpenVINO runs the zoo's unusual ops too (QDQ, MatMulNBits, NonZero routing, KV cache, Loop);
    benchmarks/build_zoo.py --openvino runs every model."""
    ov = pytest.importorskip("openvino")
    entry = zoo.zoo_model(name)
    model = built(name)
    feeds = make_inputs(model, bind_input_shapes(model, 1, entry.dims))
    request = ov.Core().compile_model(ov.Core().read_model(model.SerializeToString(), b""), "CPU")
    results = request(feeds)
    reference = run_onnxruntime(model, entry.dims)
    assert len(results) == len(reference)
    first = np.asarray(results[0])
    assert first.shape == reference[0].shape and np.isfinite(first).all()
