"""Attribution of onnxruntime's precision substitutions on fp16 models (issue 13, item 5).

onnxruntime's CPU provider runs fp16 nodes without an fp16 kernel in fp32: it inserts Casts
(``InsertedPrecisionFreeCast_*``) and renames the widened tensors with that prefix, names NCHWc
convolutions after such a tensor, inlines a fp16 Softmax from its function body, and reshapes
around a Gemm it made of an N-d MatMul+Add.  Live profiles of the fp16 zoo models check that
every kernel is attributed to the ONNX nodes it serves and that every FLOP is counted once;
hand-made optimized graphs pin each rule.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

from pytest_roofline.analysis import analyze
from pytest_roofline.backends.base import KernelProfile, KernelRecord, get_backend
from pytest_roofline.backends.onnxruntime.attribution import KernelEvents, attribute, original_tensor
from pytest_roofline.model import ModelSpec, bind_input_shapes, make_inputs
from pytest_roofline.profile import build_layers
from pytest_roofline.zoo.precision import convnext_fp16, llama_fp16

LEVELS = ("disable", "basic", "extended", "all")
P = "InsertedPrecisionFreeCast_"
SOFTMAX_BODY = ("ReduceMax", "Sub", "Exp", "ReduceSum")


def _live(model: onnx.ModelProto, level: str):
    backend = get_backend("onnxruntime", {"graph_optimization_level": level, "intra_op_threads": "1"})
    with backend.open(ModelSpec.create(model, 1), make_inputs(model, bind_input_shapes(model, 1))) as session:
        kernels = session.profile(2)
    analysis = analyze(model, batch=1)
    return analysis, kernels, *build_layers(analysis, kernels)


@pytest.fixture(scope="module", params=["convnext", "llama"])
def fp16_model(request):
    return convnext_fp16() if request.param == "convnext" else llama_fp16()


@pytest.mark.parametrize("level", LEVELS)
def test_fp16_models_attribute_every_kernel_and_count_every_flop_once(fp16_model, level):
    analysis, kernels, layers, fraction = _live(fp16_model, level)
    assert fraction == pytest.approx(1.0)
    assert not [la.name for la in layers if la.kind == "unattributed"]
    compute = [la for la in layers if la.kind == "compute"]
    assert all(la.onnx_nodes for la in compute)
    owners: dict[str, list[str]] = {}
    for kernel in kernels.kernels:
        for node in kernel.onnx_nodes:
            if node not in kernel.extra.get("shared", ()):
                owners.setdefault(node, []).append(kernel.name)
    assert all(len(names) == 1 for names in owners.values()), owners  # one owner per node
    counted = sum(la.flops for la in layers if la.kind in ("compute", "folded"))
    assert counted == analysis.total.flops  # nothing lost, nothing twice
    executed = {n for la in layers for n in la.onnx_nodes}
    assert executed | set(kernels.folded) == {n.name for n in analysis.nodes}


def test_precision_casts_serve_the_fp32_kernels_and_carry_no_flops():
    analysis, kernels, layers, _ = _live(llama_fp16(), "basic")
    by_name = {la.name: la for la in layers}
    casts = [k for k in kernels.kernels if k.extra.get("substitution") == "precision"]
    assert len(casts) >= 10  # the fp16 model runs in fp32 islands on CPU
    names = {k.name for k in kernels.kernels}
    for cast in casts:
        assert cast.op_type == "Cast" and cast.name.startswith(P)
        assert cast.onnx_nodes and cast.extra["shared"] == cast.onnx_nodes
        assert cast.serves in names and cast.serves != cast.name
        served = next(k for k in kernels.kernels if k.name == cast.serves)
        assert set(cast.onnx_nodes) & set(served.onnx_nodes)
        layer = by_name[cast.name]
        assert layer.flops == 0 and layer.bytes == cast.extra["bytes"] > 0  # the tensor it converts
    into_matmul = next(k for k in casts if k.name == f"{P}/layers.0/attn/Reshape_output_0")
    assert into_matmul.onnx_nodes == ("/layers.0.o/MatMul",)  # widens the o-projection's input
    back = next(k for k in casts if k.name == f"{P}/layers.0.q/MatMul_output_0")
    assert back.onnx_nodes == ("/layers.0.q/MatMul",)  # narrows the fp32 MatMul's output back
    widened = next(k for k in kernels.kernels if k.name == "/layers.0.o/MatMul")
    assert widened.extra["precision"] == "fp32"
    assert by_name["/layers.0.o/MatMul"].bytes == analysis.group(["/layers.0.o/MatMul"], 4).bytes
    assert analysis.group(["/layers.0.o/MatMul"], 4).bytes == 2 * analysis.group(["/layers.0.o/MatMul"]).bytes


@pytest.mark.parametrize("level", ["basic", "all"])
def test_softmax_inlined_from_its_function_body_shares_the_softmax_node(level):
    analysis, kernels, layers, _ = _live(llama_fp16(), level)
    softmax = "/layers.0/attn/Softmax"
    parts = [k for k in kernels.kernels if softmax in k.onnx_nodes]
    assert sorted(k.op_type for k in parts) == sorted((*SOFTMAX_BODY, "Div"))
    main = [k for k in parts if softmax not in k.extra.get("shared", ())]
    assert [k.op_type for k in main] == ["Div"]  # the kernel writing the Softmax's output
    flops = {la.name: la.flops for la in layers}
    assert flops[main[0].name] == analysis.node(softmax).flops > 0
    assert all(flops[k.name] == 0 for k in parts if k is not main[0])


def test_nchwc_convs_named_after_a_widened_tensor_run_their_conv():
    _, kernels, layers, _ = _live(convnext_fp16(), "all")
    convs = [k for k in kernels.kernels if k.name.startswith(P) and k.name.endswith("_nchwc")]
    assert len(convs) >= 3
    for kernel in convs:
        assert kernel.op_type == "Conv" and len(kernel.onnx_nodes) >= 1
        assert kernel.onnx_nodes[0].endswith("/Conv") and "shared" not in kernel.extra
    layout = [la for la in layers if la.kind == "layout"]
    assert layout and all(la.serves in {k.name for k in kernels.kernels} for la in layout)


def test_gemm_reshapes_help_the_gemm_and_the_bias_add_stays_with_it():
    _, kernels, _, _ = _live(convnext_fp16(), "all")
    by_name = {k.name: k for k in kernels.kernels}
    gemm = next(k for k in kernels.kernels if k.name == "/stage0.pwconv1/MatMul/MatMulAddFusion")
    assert gemm.onnx_nodes == ("/stage0.pwconv1/MatMul", "/stage0.pwconv1/Add")
    assert "shared" not in gemm.extra
    reshapes = [
        k for k in kernels.kernels if k.name.startswith(("gemm_input_reshape", "gemm_output_reshape"))
    ]
    assert reshapes
    for reshape in reshapes:
        assert reshape.onnx_nodes and reshape.extra["shared"] == reshape.onnx_nodes
    assert by_name["gemm_output_reshape"].onnx_nodes == ("/stage0.pwconv1/Add",)


# -- the rules on hand-made optimized graphs ---------------------------------------------------


def _original() -> onnx.ModelProto:
    """x(fp16) -> MatMul -> Softmax -> Relu -> y, one weight."""
    node = helper.make_node
    graph = helper.make_graph(
        [
            node("MatMul", ["x", "w"], ["h"], name="mm"),
            node("Softmax", ["h"], ["p"], name="softmax", axis=-1),
            node("Relu", ["p"], ["y"], name="relu"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 4])],
        [nh.from_array(np.ones((4, 4), np.float16), "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _optimized() -> onnx.ModelProto:
    """What ORT makes of :func:`_original`: widened MatMul, inlined Softmax, narrowed output."""
    node = helper.make_node
    nodes = [
        node("Cast", ["x"], [f"{P}x"], name=f"{P}x", to=TensorProto.FLOAT),
        node("MatMul", [f"{P}x", "FusedBack_w"], [f"{P}h"], name="mm"),
        node("ReduceMax", [f"{P}h"], ["_inlfunc_Softmax_X_ReduceMax"], name=""),
        node("Sub", [f"{P}h", "_inlfunc_Softmax_X_ReduceMax"], ["_inlfunc_Softmax_X_Sub"], name=""),
        node("Exp", ["_inlfunc_Softmax_X_Sub"], ["_inlfunc_Softmax_X_Exp"], name=""),
        node("ReduceSum", ["_inlfunc_Softmax_X_Exp"], ["_inlfunc_Softmax_X_ReduceSum"], name=""),
        node("Div", ["_inlfunc_Softmax_X_Exp", "_inlfunc_Softmax_X_ReduceSum"], [f"{P}p"], name=""),
        node("Cast", [f"{P}p"], ["p"], name=f"{P}p", to=TensorProto.FLOAT16),
        node("Relu", ["p"], ["y"], name="relu"),
    ]
    return helper.make_model(helper.make_graph(nodes, "opt", [], []))


def _events(optimized: onnx.ModelProto) -> list[KernelEvents]:
    names = [n.name or f"{n.op_type}_{i}" for i, n in enumerate(optimized.graph.node)]
    ops = [n.op_type for n in optimized.graph.node]
    return [
        KernelEvents(name, op, "CPUExecutionProvider", (1e-6,), i, 16)
        for i, (name, op) in enumerate(zip(names, ops, strict=True))
    ]


def test_original_tensor_strips_the_precision_prefix():
    assert original_tensor(f"{P}val_59") == "val_59"
    assert original_tensor(f"{P}{P}a") == "a"
    assert original_tensor("plain") == "plain"


def test_rules_on_an_inlined_widened_softmax():
    optimized = _optimized()
    profile = attribute(_original(), optimized, _events(optimized))
    kernels = {k.name: k for k in profile.kernels}
    widen, narrow = kernels[f"{P}x"], kernels[f"{P}p"]
    assert (widen.onnx_nodes, widen.serves) == (("mm",), "mm")  # serves the fp32 node reading it
    assert (narrow.onnx_nodes, narrow.serves) == (("softmax",), "Div_6")  # and the one writing it
    assert widen.extra["substitution"] == narrow.extra["substitution"] == "precision"
    assert kernels["mm"].onnx_nodes == ("mm",) and "shared" not in kernels["mm"].extra
    assert kernels["mm"].extra["precision"] == "fp32"
    assert kernels["Div_6"].onnx_nodes == ("softmax",) and "shared" not in kernels["Div_6"].extra
    for name in ("ReduceMax_2", "Sub_3", "Exp_4", "ReduceSum_5"):
        assert kernels[name].onnx_nodes == ("softmax",) and kernels[name].extra["shared"] == ("softmax",)
        assert kernels[name].extra["bytes"] == 16  # what the helper moved, not the Softmax's tensors
    assert kernels["relu"].onnx_nodes == ("relu",) and "precision" not in kernels["relu"].extra
    assert all(k.onnx_nodes for k in profile.kernels) and profile.folded == ()


def test_a_cast_of_the_model_itself_is_a_node_not_a_substitution():
    optimized = _optimized()
    optimized.graph.node[0].output[0] = "x32"  # a Cast between two different tensors
    optimized.graph.node[1].input[0] = "x32"
    profile = attribute(_original(), optimized, _events(optimized))
    cast = next(k for k in profile.kernels if k.name == f"{P}x")
    assert "substitution" not in cast.extra and cast.serves is None
    assert cast.onnx_nodes == ("mm",) and cast.extra["shared"] == ("mm",)  # a helper it encloses


def test_a_view_writing_an_arithmetic_nodes_output_does_not_run_it():
    """``gemm_output_reshape`` writes the bias Add's output; the Gemm runs MatMul and Add."""
    node = helper.make_node
    original = helper.make_model(
        helper.make_graph(
            [node("MatMul", ["x", "w"], ["m"], name="mm"), node("Add", ["m", "b"], ["y"], name="add")],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 4])],
            [nh.from_array(np.ones((4, 4), np.float32), "w"), nh.from_array(np.ones(4, np.float32), "b")],
        )
    )
    optimized = helper.make_model(
        helper.make_graph(
            [
                node("Reshape", ["x", "s_in"], ["gemm_input_reshape_arg"], name="gemm_input_reshape"),
                node("Gemm", ["gemm_input_reshape_arg", "w", "b"], ["gemm_out"], name="mm/MatMulAddFusion"),
                node("Reshape", ["gemm_out", "s_out"], ["y"], name="gemm_output_reshape"),
            ],
            "opt",
            [],
            [],
        )
    )
    profile = attribute(original, optimized, _events(optimized))
    kernels = {k.name: k for k in profile.kernels}
    assert kernels["mm/MatMulAddFusion"].onnx_nodes == ("mm", "add")
    assert "shared" not in kernels["mm/MatMulAddFusion"].extra
    assert kernels["gemm_output_reshape"].extra["shared"] == ("add",)
    assert kernels["gemm_input_reshape"].extra["shared"] == ("mm", "add")  # helps the single Gemm


def test_build_layers_counts_helpers_at_their_own_bytes_and_widened_kernels_at_fp32():
    model = _original()
    analysis = analyze(model)
    kernels = KernelProfile(
        kernels=(
            KernelRecord("cast", "Cast", ("mm",), (1e-6,), extra={"shared": ("mm",), "bytes": 48}),
            KernelRecord("mm", "MatMul", ("mm",), (2e-6,), extra={"precision": "fp32"}),
            KernelRecord("softmax", "Softmax", ("softmax",), (1e-6,)),
            KernelRecord("relu", "Relu", ("relu",), (1e-6,)),
        ),
        precision="fp16",
    )
    layers, fraction = build_layers(analysis, kernels)
    by_name = {la.name: la for la in layers}
    assert fraction == pytest.approx(1.0)
    assert (by_name["cast"].flops, by_name["cast"].bytes) == (0, 48)
    assert by_name["mm"].flops == analysis.node("mm").flops > 0
    assert by_name["mm"].bytes == analysis.group(["mm"], 4).bytes == 2 * analysis.group(["mm"], 2).bytes
    assert by_name["softmax"].bytes == analysis.group(["softmax"]).bytes  # ran at the model's fp16
