"""trtexec export parsers, version logic, command lines and attribution on the real A100 exports."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import fake_trtexec
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pytest_roofline.analysis.types import ModelAnalysis, NodeCost, TensorInfo
from pytest_roofline.backends.attribution import GraphIndex, attributed_fraction, group_cost_at_precision
from pytest_roofline.backends.trtexec.formats import (
    LayerTime,
    TrtVersion,
    attribute_layers,
    build_command,
    parse_banner,
    parse_layer_info,
    parse_profile,
    parse_times,
    read_json,
)
from pytest_roofline.errors import BackendError
from pytest_roofline.model.precision import precision_itemsize

DATA = Path(__file__).parent / "data" / "trtexec"


@pytest.fixture(scope="module")
def resnet18() -> onnx.ModelProto:
    """The zero-weight ResNet-18 matching the recorded engine (committed gzip-compressed)."""
    return onnx.load_from_string(gzip.decompress((DATA / "resnet18.onnx.gz").read_bytes()))


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("&&&& RUNNING TensorRT.trtexec [TensorRT v8601] # trtexec --help", TrtVersion(8, 6, 1)),
        ("&&&& PASSED TensorRT.trtexec [TensorRT v100300] # trtexec", TrtVersion(10, 3, 0)),
        ("[TensorRT v7103]", TrtVersion(7, 1, 3)),
        ("[TensorRT v110100]", TrtVersion(11, 1, 0)),
    ],
)
def test_parse_banner(text: str, version: TrtVersion) -> None:
    assert parse_banner(text) == version


def test_parse_banner_without_banner() -> None:
    with pytest.raises(BackendError, match="banner"):
        parse_banner("usage: something else")


def test_version_capabilities() -> None:
    assert TrtVersion(11, 0).strongly_typed and not TrtVersion(10, 16).strongly_typed
    assert TrtVersion(8, 4).has_layer_info and not TrtVersion(8, 2).has_layer_info
    assert TrtVersion(10, 3).needs_separate_profile_run and not TrtVersion(11, 1).needs_separate_profile_run


def test_parse_times_real_file() -> None:
    data = read_json(DATA / "resnet.onnx.engine.timing.first20.json", "--exportTimes")
    samples = parse_times(data)
    assert len(samples) == 20
    assert samples[0] == pytest.approx(0.873472e-3)
    assert parse_times(data, "latency") == pytest.approx(samples)  # --noDataTransfers: equal


@pytest.mark.parametrize("version", [(7, 1, 3), (8, 0, 1), (8, 6, 1)])
def test_parse_times_every_key_flavour(version: tuple[int, int, int]) -> None:
    records = fake_trtexec._times(version, 5)
    recorded = parse_times(read_json(DATA / "resnet.onnx.engine.timing.first20.json", "x"))[:5]
    assert parse_times(records) == pytest.approx(recorded)
    assert parse_times(records, "latency") == pytest.approx(recorded)


def test_parse_times_from_stamps_only_and_unknown_keys() -> None:
    assert parse_times([{"startComputeMs": 1.0, "endComputeMs": 1.5}]) == pytest.approx([0.5e-3])
    with pytest.raises(BackendError, match="no compute time"):
        parse_times([{"gpuMs": 1.0}])
    with pytest.raises(BackendError, match="JSON list"):
        parse_times({"computeMs": 1.0})


def test_parse_profile_median_and_average() -> None:
    count, layers = parse_profile(read_json(DATA / "resnet.onnx.engine.profile.json", "x"))
    assert count == 1 and len(layers) == 36
    assert layers[1] == LayerTime(
        "Conv_0 + Relu_1",
        pytest.approx(0.111616e-3),
        "median",
        pytest.approx(0.111616e-3),
        pytest.approx(10.9768),
    )
    count, old = parse_profile(fake_trtexec._profile((8, 2, 1)))
    assert {layer.statistic for layer in old} == {"average"}
    assert [layer.time for layer in old] == pytest.approx([layer.time for layer in layers])
    count, no_average = parse_profile([{"count": 4}, {"name": "L", "timeMs": 2.0}])
    assert (count, no_average[0].time) == (4, pytest.approx(0.5e-3))


def test_read_json_errors(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="no such file"):
        read_json(tmp_path / "missing.json", "--exportProfile")
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    with pytest.raises(BackendError, match="not valid JSON"):
        read_json(bad, "--exportProfile")


def test_parse_layer_info_strings_and_metadata() -> None:
    plain = parse_layer_info({"Layers": ["Conv_0 + Relu_1", "MaxPool_2"], "Bindings": ["in", "out"]})
    assert [layer.name for layer in plain] == ["Conv_0 + Relu_1", "MaxPool_2"]
    rich = parse_layer_info(
        {
            "Layers": [
                {
                    "Name": "/m/conv/Conv + /m/act/Relu",
                    "LayerType": "CaskConvolution",
                    "Inputs": [
                        {"Name": "x", "Dimensions": [1, 3, 8, 8], "Format/Datatype": "Row major linear FP32"}
                    ],
                    "Outputs": [
                        {
                            "Name": "y",
                            "Dimensions": [1, 8, 8, 8],
                            "Format/Datatype": "Channel major FP16 format",
                        }
                    ],
                    "Metadata": (
                        "[ONNX Layer: /m/conv/Conv | Local Function: blk]\x1f[ONNX Layer: /m/act/Relu]"
                    ),
                }
            ]
        }
    )
    assert rich[0].onnx_layers == ("/m/conv/Conv", "/m/act/Relu")
    assert rich[0].precision == "fp16"
    assert rich[0].nbytes == 1 * 3 * 8 * 8 * 4 + 1 * 8 * 8 * 8 * 2
    with pytest.raises(BackendError, match="Layers"):
        parse_layer_info({"layers": []})


def test_real_resnet18_attribution(resnet18: onnx.ModelProto) -> None:
    index = GraphIndex.from_model(resnet18)
    count, rows = parse_profile(read_json(DATA / "resnet.onnx.engine.profile.json", "x"))
    layers = parse_layer_info(read_json(DATA / "resnet.onnx.engine.graph.json", "x"))
    profile = attribute_layers(rows, layers, index, count)
    assert len(index.order) == 49
    assert attributed_fraction(profile, index.order) >= 0.95
    named = {n for k in profile.kernels for n in k.onnx_nodes}
    assert len(named) >= 47
    kernels = {k.name: k for k in profile.kernels}
    assert kernels["Conv_5 + Add_6 + Relu_7"].onnx_nodes == ("Conv_5", "Add_6", "Relu_7")
    first = kernels["Reformatting CopyNode for Input Tensor 0 to Conv_0 + Relu_1"]
    assert (first.kind, first.serves, first.onnx_nodes) == ("layout", "Conv_0 + Relu_1", ())
    assert first.extra["bytes"] == 32 * 3 * 224 * 224 * (4 + 2)  # fp32 in, fp16 out
    # TensorRT's inserted reshape and the reformat around it serve the Gemm
    assert kernels["reshape_after_Gemm_48"].serves == "Gemm_48"
    assert kernels["Reformatting CopyNode for Output Tensor 0 to reshape_after_Gemm_48"].serves == "Gemm_48"
    # the Gemm layer reads GlobalAveragePool's output directly: Flatten_47 runs inside it
    assert kernels["Gemm_48"].onnx_nodes == ("Flatten_47", "Gemm_48")
    assert profile.precision == "fp16" and profile.folded == ()


def test_metadata_attribution_when_names_carry_nothing(resnet18: onnx.ModelProto) -> None:
    index = GraphIndex.from_model(resnet18)
    info = fake_trtexec._layer_info((10, 3, 0), detailed=True)
    layers = parse_layer_info(info)
    rows = [LayerTime(layer.name, 1e-4, "median", 1e-4, 1.0) for layer in layers]
    kernels = {k.name: k for k in attribute_layers(rows, layers, index, 1).kernels}
    assert kernels["/fused/3/Conv_5"].onnx_nodes == ("Conv_5", "Add_6", "Relu_7")


def test_myelin_foreign_node_is_a_node_range(resnet18: onnx.ModelProto) -> None:
    index = GraphIndex.from_model(resnet18)
    rows = [
        LayerTime("{ForeignNode[Conv_3...Relu_9]}", 1e-3, "median", 1e-3, 100.0),
        LayerTime("Unknown layer [profile 1]", 1e-5, "median", 1e-5, 1.0),
    ]
    profile = attribute_layers(rows, [], index, 1)
    assert profile.kernels[0].onnx_nodes == (
        "Conv_3",
        "Relu_4",
        "Conv_5",
        "Add_6",
        "Relu_7",
        "Conv_8",
        "Relu_9",
    )
    assert profile.kernels[1].onnx_nodes == ()  # reported, not dropped
    assert attributed_fraction(profile) == pytest.approx(1e-3 / (1e-3 + 1e-5))


def test_graph_index_resolves_frontend_names() -> None:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Add", ["m", "b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [
            onnx.numpy_helper.from_array(np.ones((4, 4), np.float32), "w"),
            onnx.numpy_helper.from_array(np.ones(4, np.float32), "b"),
        ],
    )
    index = GraphIndex.from_model(helper.make_model(graph))
    assert index.order == ("mm", "Add_1")
    assert index.resolve("mm/WithoutBiases") == "mm"
    assert index.resolve("mm/MatMulAddFusion_token_3") == "mm"
    assert index.resolve("node_of_y") == "Add_1"
    assert index.resolve("y") == "Add_1"
    assert index.resolve("nothing") is None
    assert index.between(["x"], ["y"]) == ("mm", "Add_1")
    assert index.between(["m"], ["y"]) == ("Add_1",)


def _analysis() -> ModelAnalysis:
    tensors = {
        "x": TensorInfo("x", "float32", (1, 256), 4),
        "w": TensorInfo("w", "float32", (256, 256), 4, is_weight=True),
        "y": TensorInfo("y", "float32", (1, 256), 4),
        "shape": TensorInfo("shape", "int64", (2,), 8, is_weight=True),
        "z": TensorInfo("z", "float32", (1, 256), 4),
    }
    nodes = (
        NodeCost(
            "mm",
            "MatMul",
            "",
            2 * 256 * 256,
            256 * 256,
            (256 + 256 * 256) * 4,
            256 * 4,
            256 * 256,
            ("x", "w"),
            ("y",),
        ),
        NodeCost("r", "Reshape", "", 0, 0, 256 * 4 + 16, 256 * 4, 0, ("y", "shape"), ("z",)),
    )
    return ModelAnalysis("m", {"x": (1, 256)}, nodes, tensors, "test", (), ("z",))


def test_precision_rescales_bytes() -> None:
    analysis = _analysis()
    fp32 = analysis.group(["mm", "r"])
    fp16 = group_cost_at_precision(analysis, ["mm", "r"], "fp16")
    assert fp32.bytes == (256 + 256 * 256 + 256) * 4 + 16
    assert fp16.bytes == (256 + 256 * 256 + 256) * 2 + 16  # the int64 shape keeps its size
    assert fp16.flops == fp32.flops
    assert group_cost_at_precision(analysis, ["mm"], "mixed") == analysis.group(["mm"])
    int8 = group_cost_at_precision(analysis, ["mm", "r"], "int8")
    assert int8.bytes == (256 + 256 * 256 + 256) + 16
    assert precision_itemsize("bf16") == 2 and precision_itemsize("mixed") is None


@pytest.mark.parametrize(
    ("code", "present", "absent"),
    [
        (
            "7103",
            ["--fp16", "--separateProfileRun", "--workspace=512"],
            ["--exportLayerInfo=l.json", "--profilingVerbosity=detailed"],
        ),
        (
            "8601",
            [
                "--fp16",
                "--separateProfileRun",
                "--exportLayerInfo=l.json",
                "--profilingVerbosity=detailed",
                "--memPoolSize=workspace:512",
            ],
            ["--useCudaGraph"],
        ),
        ("100300", ["--fp16", "--separateProfileRun", "--exportLayerInfo=l.json"], ["--useCudaGraph"]),
        (
            "110100",
            ["--exportLayerInfo=l.json", "--profilingVerbosity=detailed"],
            ["--fp16", "--separateProfileRun", "--useCudaGraph"],
        ),
    ],
)
def test_build_command_per_version(code: str, present: list[str], absent: list[str]) -> None:
    version = parse_banner(f"[TensorRT v{code}]")
    cmd = build_command(
        "trtexec",
        version,
        onnx="m.onnx",
        engine="e.engine",
        build=True,
        shapes={"input.1": (8, 3, 224, 224), "ids:0": (8, 128)},
        precision="fp16",
        workspace_mib=512,
        iterations=20,
        profile="p.json",
        layer_info="l.json",
        extra_args=["--verbose"],
    )
    for flag in present:
        assert flag in cmd
    for flag in absent:
        assert flag not in cmd
    assert "--shapes=input.1:8x3x224x224,'ids:0':8x128" in cmd
    assert "--minShapes=input.1:8x3x224x224,'ids:0':8x128" in cmd
    assert cmd[-1] == "--verbose" and "--iterations=20" in cmd


def test_load_command_times_only() -> None:
    cmd = build_command(
        "trtexec",
        TrtVersion(8, 6, 1),
        onnx=None,
        engine="e.engine",
        build=False,
        iterations=5,
        times="t.json",
    )
    assert cmd[:2] == ["trtexec", "--loadEngine=e.engine"]
    assert "--exportTimes=t.json" in cmd
    assert not any(a.startswith(("--exportProfile", "--separateProfileRun", "--onnx")) for a in cmd)


def test_recorded_files_are_the_real_ones() -> None:
    """The copied exports keep their provenance (see tests/data/trtexec/README.md)."""
    info = json.loads((DATA / "resnet.onnx.engine.graph.json").read_text())
    assert info["Bindings"] == ["input.1", "191"] and len(info["Layers"]) == 36
