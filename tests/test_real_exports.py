"""Models as real exporters write them (tests/_real_exports.py): scalar inputs, one symbolic name on
two axes, unnamed dims, recurrent state, profiled on real onnxruntime as a user would call it."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from _plugin_helpers import FAKE
from _real_exports import ocr_like, sklearn_like, tf_like, vad_inputs, vad_like

from pytest_roofline import profile_model
from pytest_roofline.analysis import analyze
from pytest_roofline.cli import main
from pytest_roofline.errors import ShapeError
from pytest_roofline.model import bind_input_shapes, with_shapes
from pytest_roofline.model.inputs import dims_from_inputs, load_inputs

FAST = {"sessions": 2, "rounds": 3, "profile_iterations": 2, "options": {"intra_op_threads": "1"}}
CLI_FAST = ["--no-roofline", "--sessions", "2", "--rounds", "3", "--iterations", "2", "--quiet"]
OCR_X = (1, 3, 48, 192)


def _conv_macs(height: int, width: int) -> int:
    """ocr_like's Conv (8 filters of 3x3x3, stride 2, pad 1) at an H x W input."""
    return 8 * 3 * 3 * 3 * ((height + 1) // 2) * ((width + 1) // 2)


# --- 0-d inputs ---------------------------------------------------------------------------------


def test_a_scalar_input_stays_0d_from_the_arrays_to_the_session() -> None:
    arrays = load_inputs(vad_inputs(), ["input", "state", "sr"])
    assert arrays["sr"].shape == () and arrays["sr"].flags.c_contiguous
    prof = profile_model(vad_like(), inputs=vad_inputs(), **FAST)
    assert prof.input_shapes["sr"] == () and prof.input_shapes["state"] == (2, 1, 16)


def test_a_scalar_given_as_one_element_array_is_refused_in_one_line() -> None:
    feeds = {**vad_inputs(), "sr": np.array([16000], np.int64)}
    with pytest.raises(ShapeError, match=r"input 'sr' expects shape \[\], got \[1\]"):
        profile_model(vad_like(), inputs=feeds, **FAST)


# --- per axis, not per name ----------------------------------------------------------------------


def test_one_symbolic_name_on_two_axes_that_differ_binds_axis_by_axis() -> None:
    model = ocr_like()
    batch, dims = dims_from_inputs(model, {"x": np.zeros(OCR_X, np.float32)})
    assert dims == {"x[0]": 1, "x[2]": 48, "x[3]": 192}  # '?' gave 1, 48 and 192: no name binds
    assert bind_input_shapes(model, batch, dims) == {"x": OCR_X}
    prof = profile_model(model, inputs={"x": np.ones(OCR_X, np.float32)}, **FAST)
    assert prof.input_shapes == {"x": OCR_X}
    assert analyze(model, dims=dims).node("Conv_0").macs == _conv_macs(48, 192)


def test_shapes_bind_what_trtexec_shapes_bind(capsys, tmp_path) -> None:
    path = tmp_path / "rec.onnx"
    ocr_like(path)
    prof = profile_model(str(path), shapes={"x": OCR_X}, **FAST)
    assert prof.input_shapes == {"x": OCR_X}
    assert main(["profile", str(path), "--shape", "x=1x3x48x192", "--format", "json", *CLI_FAST]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["input_shapes"] == {"x": list(OCR_X)}
    assert main(["analyze", str(path), "--shape", "x=1x3x48x192", "--format", "json"]) == 0
    nodes = json.loads(capsys.readouterr().out)["nodes"]
    assert next(n for n in nodes if n["name"] == "Conv_0")["macs"] == _conv_macs(48, 192)


def test_a_shape_that_contradicts_the_model_is_one_line(capsys, tmp_path) -> None:
    path = tmp_path / "rec.onnx"
    ocr_like(path)
    code = main(["analyze", str(path), "--shape", "x=1x4x48x192"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "axis 1 is fixed at 3" in err
    with pytest.raises(ShapeError, match="has 4 axes, so no axis 7"):
        bind_input_shapes(ocr_like(), dims={"x[7]": 2, **with_shapes(None, {"x": OCR_X})})
    with pytest.raises(ShapeError, match="no input 'y'"):
        bind_input_shapes(ocr_like(), dims={"y[0]": 2})
    with pytest.raises(ShapeError, match="whole numbers"):
        with_shapes(None, {"x": "1x3"})  # type: ignore[dict-item]


# --- unnamed dims --------------------------------------------------------------------------------


def test_unnamed_dims_bind_from_shapes_or_arrays_without_renaming() -> None:
    model = tf_like()
    name = "serving_default_x:0"
    with pytest.raises(ShapeError) as info:
        bind_input_shapes(model, batch=1)
    assert "rename" not in str(info.value) and f"--shape {name}=" in str(info.value)
    assert f"shapes={{'{name}'" in info.value.for_pytest() and "re-export" not in info.value.for_pytest()
    prof = profile_model(model, shapes={name: (2, 5, 12)}, **FAST)
    assert prof.input_shapes == {name: (2, 5, 12)}
    prof = profile_model(model, inputs={name: np.ones((3, 7, 12), np.float32)}, **FAST)
    assert prof.input_shapes == {name: (3, 7, 12)} and prof.dims == {f"{name}[1]": 7}
    assert analyze(model, batch=3, dims=prof.dims).node("MatMul_0").macs == 3 * 7 * 12 * 4


def test_batch_binds_the_batch_axis_of_a_state_input() -> None:
    model = vad_like()
    assert bind_input_shapes(model, batch=4) == {"input": (4, 64), "state": (2, 4, 16), "sr": ()}
    prof = profile_model(model, batch=2, **FAST)
    assert prof.input_shapes["state"] == (2, 2, 16)


def test_the_fixture_takes_shapes(pytester: pytest.Pytester, monkeypatch, tmp_path_factory) -> None:
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    onnx.save(ocr_like(), str(pytester.path / "rec.onnx"))
    pytester.makepyfile(
        """
        def test_rec(model_profile):
            prof = model_profile("rec.onnx", shapes={"x": (1, 3, 48, 192)})
            assert prof.input_shapes == {"x": (1, 3, 48, 192)}
        """
    )
    pytester.runpytest(*FAKE).assert_outcomes(passed=1)


def test_an_analysis_only_run_binds_what_the_arrays_give(
    pytester: pytest.Pytester, monkeypatch, tmp_path_factory
) -> None:
    """``--roofline-disable`` times nothing, but the ``inputs=`` arrays still bind every axis they
    cover (tf2onnx's unnamed dims, the VAD's batch on its state input) and decide the If."""
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    onnx.save(tf_like(), str(pytester.path / "tf.onnx"))
    onnx.save(vad_like(), str(pytester.path / "vad.onnx"))
    at_8k = analyze(vad_like(), batch=2, input_values=vad_inputs(batch=2, sr=8000)).total.macs
    assert at_8k != analyze(vad_like(), batch=2, input_values=vad_inputs(batch=2)).total.macs
    pytester.makepyfile(
        f"""
        import numpy as np

        def test_unnamed_dims(model_profile):
            x = np.ones((3, 7, 12), np.float32)
            prof = model_profile("tf.onnx", inputs={{"serving_default_x:0": x}})
            assert prof.extra["analysis_only"] and prof.batch == 3
            assert prof.input_shapes == {{"serving_default_x:0": (3, 7, 12)}}
            assert prof.dims == {{"serving_default_x:0[1]": 7}} and prof.total_macs == 3 * 7 * 12 * 4

        def test_state_batch_and_branch(model_profile):
            feeds = {{"input": np.ones((2, 64), np.float32), "state": np.zeros((2, 2, 16), np.float32),
                      "sr": np.array(8000, np.int64)}}
            prof = model_profile("vad.onnx", inputs=feeds)
            assert prof.batch == 2 and prof.input_shapes["state"] == (2, 2, 16)
            assert prof.total_macs == {at_8k}
        """
    )
    pytester.runpytest(*FAKE, "--roofline-disable").assert_outcomes(passed=2)


# --- a backend that cannot read the model ------------------------------------------------------


@pytest.mark.parametrize("zipmap", [True, False], ids=["zipmap-output", "ml-op"])
def test_openvino_names_the_op_it_cannot_read_and_onnxruntime_runs_it(zipmap: bool) -> None:
    pytest.importorskip("openvino")
    from pytest_roofline.errors import BackendUnavailable, ModelUnsupported

    model = sklearn_like(zipmap=zipmap)
    with pytest.raises(ModelUnsupported) as info:
        profile_model(model, backend="openvino", **{**FAST, "options": None})
    message = str(info.value)
    assert isinstance(info.value, BackendUnavailable)  # the fixture skips it like a missing backend
    assert "LinearClassifier (domain ai.onnx.ml)" in message and "onnxruntime can run it" in message
    assert ("1 more op types" in message) == zipmap and "\n" not in message
    assert profile_model(model, **FAST).input_shapes == {"float_input": (1, 4)}


# --- an If the inputs decide ---------------------------------------------------------------------


@pytest.mark.parametrize(("rate", "branch"), [(16000, "then_branch"), (8000, "else_branch")])
def test_an_if_on_a_given_input_is_costed_by_the_branch_taken(rate: int, branch: str) -> None:
    prof = profile_model(vad_like(), inputs=vad_inputs(sr=rate), **FAST)
    at_16k, at_8k = 64 * 16, 64 * 64 + 64 * 16  # the branches' MatMul MACs at batch 1
    matmuls = at_16k if rate == 16000 else at_8k
    analysis = analyze(vad_like(), batch=1, input_values=vad_inputs(sr=rate))
    (flow,) = analysis.control_flow
    assert flow.branch == branch and flow.source == "folded" and not flow.assumed
    assert sum(n.macs * n.executions for n in analysis.nodes if n.op_type == "MatMul") == matmuls
    assert prof.total_macs == analysis.total.macs


def test_an_if_nothing_decides_is_assumed_costlier() -> None:
    (flow,) = analyze(vad_like(), batch=1).control_flow
    assert flow.assumed and flow.branch == "else_branch" and "condition unknown" in flow.note


# --- the corpus: made by other tools, profiled as a user would -------------------------------------


@pytest.fixture(scope="module")
def real_corpus(tmp_path_factory):
    pytest.importorskip("skl2onnx")
    pytest.importorskip("onnxconverter_common")
    pytest.importorskip("onnxslim")
    import warnings

    from _real_exports import corpus

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return corpus(tmp_path_factory.mktemp("corpus"))


def _huge_roof():
    from pytest_roofline.roofline import DeviceRoofline

    return DeviceRoofline(
        peak_flops={"float32": 1e15, "int8": 4e15, "float16": 2e15}, peak_bandwidth=1e13, fingerprint={}
    )


def test_the_corpus_profiles_on_onnxruntime_with_a_valid_roofline(real_corpus) -> None:
    assert len(real_corpus) >= 27 and len({tool for _, tool, _, _ in real_corpus}) >= 15
    for name, _, model, call in real_corpus:
        prof = profile_model(model, roofline=_huge_roof(), **FAST, **call)
        check = prof.roofline_check
        assert check.status == "valid", (name, check.message())
        assert all(la.roofline_fraction is None or la.roofline_fraction <= 1 for la in prof.layers), name
        assert prof.attributed_fraction > 0.5, name


def test_openvino_reads_the_corpus_or_says_which_op_in_one_line(real_corpus) -> None:
    pytest.importorskip("openvino")
    from pytest_roofline.errors import ModelUnsupported

    skipped = {}
    for name, _, model, call in real_corpus:
        try:
            profile_model(model, backend="openvino", **{**FAST, "options": None}, **call)
        except ModelUnsupported as exc:
            skipped[name] = str(exc)
    assert set(skipped) == {"skl_layout", "skl_logreg", "skl_forest", "skl_mlp", "skl_scaler_pca"}
    assert all("(domain ai.onnx.ml)" in line and "\n" not in line for line in skipped.values())


# --- predictions on precision changes and rewrites -------------------------------------------------


def _roof(**peaks: float):
    from pytest_roofline.roofline import DeviceRoofline

    return DeviceRoofline(peak_flops={"float32": 1e11, **peaks}, peak_bandwidth=2e10, fingerprint={})


def _prediction(old: onnx.ModelProto, new: onnx.ModelProto, roofline):
    from pytest_roofline.diff import diff_summaries, predict, summarize

    base = profile_model(old, roofline=roofline, **FAST)
    diff = diff_summaries(summarize(old, batch=1), summarize(new, batch=1))
    return predict(diff, roofline, base)


def test_float16_on_a_device_without_a_faster_float16_roof_has_no_prediction() -> None:
    pytest.importorskip("onnxconverter_common")
    from _real_exports import float16_converted, torch_like_mlp

    base = torch_like_mlp(width=64)
    same = _prediction(base, float16_converted(base), _roof(float16=1e11))
    assert not same.available and same.reason.startswith("float16 nodes run in float32 after inserted Casts")
    faster = _prediction(base, float16_converted(base), _roof(float16=4e11))
    assert faster.available and faster.fraction is not None and faster.fraction < 0  # half the bytes


def test_a_precision_without_a_roof_or_a_qdq_graph_has_no_prediction_and_says_why(tmp_path) -> None:
    pytest.importorskip("onnxruntime.quantization")
    from _real_exports import quantized_dynamic, quantized_qdq, torch_like_mlp

    from pytest_roofline.diff import explain_verdict

    base = torch_like_mlp(width=64)
    dynamic = quantized_dynamic(base, tmp_path)
    unroofed = _prediction(base, dynamic, _roof())
    assert not unroofed.available and "no int8 roof" in unroofed.reason
    assert _prediction(base, dynamic, _roof(int8=4e11)).available
    qdq = _prediction(base, quantized_qdq(base, tmp_path, width=64), _roof(int8=4e11))
    assert not qdq.available and "QDQ graph" in qdq.reason
    from pytest_roofline.diff import diff_summaries, summarize

    diff = diff_summaries(summarize(base, batch=1), summarize(dynamic, batch=1))
    text = explain_verdict(diff, unroofed, ratio=None, status="not-compared").text
    assert "no prediction (the new graph computes in int8" in text


def test_a_rewrite_into_unmeasured_ops_with_the_same_work_costs_what_it_cost() -> None:
    from onnx import TensorProto, helper

    def mlp(fused: bool) -> onnx.ModelProto:
        weight = onnx.numpy_helper.from_array(np.full((256, 256), 0.01, np.float32), "w")
        bias = onnx.numpy_helper.from_array(np.zeros(256, np.float32), "b")
        if fused:  # what an optimiser writes: one Gemm for MatMul + Add
            nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="fc")]
        else:
            nodes = [
                helper.make_node("MatMul", ["x", "w"], ["m"], name="fc_matmul"),
                helper.make_node("Add", ["m", "b"], ["h"], name="fc_add"),
            ]
        nodes.append(helper.make_node("Relu", ["h"], ["y"], name="relu"))
        graph = helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])],
            [weight, bias],
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    prediction = _prediction(mlp(False), mlp(True), _roof())
    (gemm,) = [n for n in prediction.nodes if n.op_type == "Gemm"]
    assert gemm.basis == "same work"
    assert prediction.time_change == pytest.approx(0.0, abs=1e-12)


# --- a declared output shape the kernels disagree with ------------------------------------------


def test_a_stale_declared_output_shape_is_a_note_not_a_failure() -> None:
    from onnx import TensorProto, helper

    nodes = [  # the kernels produce [1, 2, 3]; the exporter declared rank 2
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Concat", ["one", "s"], ["s2"], axis=0),
        helper.make_node("Reshape", ["x", "s2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "stale",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("one", TensorProto.INT64, [1], [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    prof = profile_model(model, **FAST)
    (note,) = prof.extra["notes"]
    assert "output 'y' is declared [2, 3] but the kernels produce [1, 2, 3]" in note
    assert profile_model(vad_like(), inputs=vad_inputs(), **FAST).extra.get("notes") is None


def test_a_stale_value_info_rank_runs_with_a_note_where_bare_onnxruntime_runs() -> None:
    """The declared rank of an output disagrees with the kernels' (a Squeeze output declared rank 1
    in value_info, produced rank 2): bare onnxruntime warns and runs it; the tool ran its timed
    loop on pre-allocated outputs, which onnxruntime checks against the declaration, and failed
    every run with "Invalid rank for output"."""
    import onnxruntime as ort
    from _real_exports import stale_value_info

    model = stale_value_info()
    options = ort.SessionOptions()
    options.log_severity_level = 4
    bare = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {"x": np.ones((1, 4, 1), np.float32)}
    assert [bare.run(None, feeds)[0].shape for _ in range(3)] == [(1, 4)] * 3
    prof = profile_model(model, **FAST)
    (note,) = prof.extra["notes"]
    assert "output 'y' is declared [4] but the kernels produce [1, 4]" in note
    assert prof.latency.median > 0 and prof.input_shapes == {"x": (1, 4, 1)}


def test_an_output_whose_shape_changes_every_run_is_timed() -> None:
    """NonZero of a random mask: each run's output has another shape, which a pre-allocated output
    refuses ("The output OrtValue provided ... has shape {2,18} but the computed output shape for
    this run is {2,16}"); bare onnxruntime allocates per run, and so does the tool's timed loop."""
    from _real_exports import random_mask_indices

    prof = profile_model(random_mask_indices(), **{**FAST, "rounds": 10})
    assert prof.latency.median > 0 and prof.latency.n >= 10


def test_int8_convolutions_the_roofline_never_probed_have_no_prediction(tmp_path) -> None:
    pytest.importorskip("onnxruntime.quantization")
    from _real_exports import quantized_dynamic

    from pytest_roofline import zoo

    base = zoo.tiny_cnn(batch=1)
    prediction = _prediction(base, quantized_dynamic(base, tmp_path), _roof(int8=4e11))
    assert not prediction.available and prediction.reason.startswith("ConvInteger runs int8 kernels")


def test_shape_option_parses_trtexec_spelling() -> None:
    import argparse

    from pytest_roofline.cli.common import parse_shape

    assert parse_shape("x=1x3x48x192") == ("x", (1, 3, 48, 192))
    assert parse_shape("serving_default_x:0=2x5x12") == ("serving_default_x:0", (2, 5, 12))
    assert parse_shape("sr=") == ("sr", ())  # a 0-d input
    for bad in ("x", "=1x2", "x=1xa", "x=-1"):
        with pytest.raises(argparse.ArgumentTypeError, match="--shape needs NAME=AxBxC"):
            parse_shape(bad)


def test_committed_torch_exports_profile_as_a_user_calls_them() -> None:
    """torch.onnx's own files (legacy and dynamo, external data included): a scripted loop whose
    trip count is a 0-d input runs it 4 times, a GRU's state input binds its ``batch`` axis."""
    from _real_exports import torch_exports

    found = {name: (path, call) for name, _, path, call in torch_exports()}
    assert {"resblock_cnn_dynamo", "encoder_legacy", "gru_state_legacy", "scripted_loop_legacy"} <= set(found)
    path, call = found["scripted_loop_legacy"]
    prof = profile_model(path, **FAST, **call)
    assert prof.input_shapes["steps"] == () and prof.total_macs == 4 * 32 * 32
    path, _ = found["gru_state_legacy"]
    prof = profile_model(path, batch=3, dims={"frames": 8}, **FAST)
    assert prof.input_shapes == {"frames": (3, 8, 16), "state": (1, 3, 24)}


@pytest.mark.parametrize(("export", "fused"), [("bert_hf", "Attention"), ("gpt2_hf", "FastGelu")])
def test_onnxruntime_transformer_optimizer_output_costs_what_the_export_cost(export: str, fused: str) -> None:
    """onnxruntime.transformers' optimize_model over a Hugging Face export (committed with
    benchmarks/optimize_real_corpus_transformers.py): its com.microsoft Attention,
    SkipLayerNormalization, BiasGelu/FastGelu and EmbedLayerNormalization are costed, and the same
    work as the export they were fused from; onnxruntime profiles it as a user calls it."""
    from _real_exports import TORCH_EXPORTS, torch_exports

    found = {name: (path, call) for name, _, path, call in torch_exports()}
    optimized, call = found[f"{export}_ort_transformers"]
    proto = onnx.load(optimized, load_external_data=False)
    ops = {node.op_type for node in proto.graph.node if node.domain == "com.microsoft"}
    assert {fused, "SkipLayerNormalization"} <= ops
    dims = {"sequence_length": 16}
    fused_analysis = analyze(optimized, batch=1, dims=dims)
    export_analysis = analyze(str(TORCH_EXPORTS / f"{export}_legacy.onnx"), batch=1, dims=dims)
    assert not fused_analysis.uncosted and fused_analysis.total.macs == export_analysis.total.macs
    prof = profile_model(optimized, **FAST, **call)
    assert prof.input_shapes["input_ids"] == (1, 16) and prof.total_macs == export_analysis.total.macs
