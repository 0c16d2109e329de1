"""Memory per inference: onnxruntime's arena counters, the static estimate, the peak-RSS helper."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pytest_roofline.analysis import analyze
from pytest_roofline.api import profile_model
from pytest_roofline.backends.base import ExecutedGraph, ExecutedNode
from pytest_roofline.memory import LayerMemory, MemoryProfile
from pytest_roofline.memory.estimate import planned_memory, static_memory
from pytest_roofline.memory.trace import has_memory_fields, trace_memory
from pytest_roofline.profile import ModelProfile

DATA = Path("/work/shared/data/onnxruntime-1.32-cpu")
CUDA_DATA = Path("/work/shared/data/onnxruntime-1.31-cuda-h200")
WIDTH, ROWS = 256, 64
ACTIVATION = WIDTH * ROWS * 4  # one fp32 intermediate of the chain
WEIGHT = WIDTH * WIDTH * 4


def matmul_chain(keep_alive: bool = False) -> onnx.ModelProto:
    """MatMul-Relu-MatMul-Relu-MatMul sharing one 256x256 weight; ``keep_alive`` also outputs the
    first MatMul's result, so it lives to the end instead of being freed after ``relu1``."""
    weight = numpy_helper.from_array(np.random.default_rng(0).random((WIDTH, WIDTH), np.float32), "W")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"], name="mm1"),
        helper.make_node("Relu", ["a"], ["b"], name="relu1"),
        helper.make_node("MatMul", ["b", "W"], ["c"], name="mm2"),
        helper.make_node("Relu", ["c"], ["d"], name="relu2"),
        helper.make_node("MatMul", ["d", "W"], ["y"], name="mm3"),
    ]
    return _fp32_model(
        nodes, [weight], [ROWS, WIDTH], {"y": [ROWS, WIDTH]} | ({"a": [ROWS, WIDTH]} if keep_alive else {})
    )


def _fp32_model(
    nodes: list[onnx.NodeProto], weights: list[onnx.TensorProto], x: list[int], outputs: dict[str, list[int]]
) -> onnx.ModelProto:
    """A float32 model of ``nodes`` reading one input ``x`` of that shape, writing ``outputs``."""
    graph = helper.make_graph(
        nodes,
        "model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in outputs.items()],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _profile(model: onnx.ModelProto, tmp_path: Path, name: str, **options: str) -> ModelProfile:
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return profile_model(path, sessions=1, rounds=2, profile_iterations=3, options=options or None)


@pytest.fixture(scope="module")
def chain_profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModelProfile]:
    tmp = tmp_path_factory.mktemp("chain")
    return {
        "plain": _profile(matmul_chain(), tmp, "plain"),
        "again": _profile(matmul_chain(), tmp, "again"),
        "one_thread": _profile(matmul_chain(), tmp, "one", intra_op_threads="1"),
        "keep": _profile(matmul_chain(keep_alive=True), tmp, "keep"),
    }


def test_onnxruntime_memory_reads_the_arena_exactly(chain_profiles: dict[str, ModelProfile]) -> None:
    memory = chain_profiles["plain"].memory
    assert memory is not None and memory.source == "onnxruntime profiler" and memory.exact
    assert memory.weights == WEIGHT  # the one initializer, held in the same arena
    # two intermediates planned into one block for the run, and the output beside it
    assert memory.peak == WEIGHT + 3 * ACTIVATION
    assert memory.peak_activations == 3 * ACTIVATION
    assert memory.arena_held >= memory.peak
    assert memory.predicted_peak == memory.peak  # the static estimate, to the byte on this chain
    assert memory.requested_peak == memory.peak  # 64 KiB tensors: nothing for the arena to round


def test_repeated_sessions_and_threads_read_the_same_bytes(chain_profiles: dict[str, ModelProfile]) -> None:
    plain, again, one = (chain_profiles[k] for k in ("plain", "again", "one_thread"))
    assert plain.memory == again.memory == one.memory
    layers = [{la.name: la.memory for la in prof.layers} for prof in (plain, again, one)]
    assert layers[0] == layers[1] == layers[2]


def test_per_layer_memory_names_the_buffer_kept_alive(chain_profiles: dict[str, ModelProfile]) -> None:
    plain, keep = chain_profiles["plain"], chain_profiles["keep"]
    assert plain.memory is not None and keep.memory is not None
    assert keep.memory.peak - plain.memory.peak == ACTIVATION
    # the first run allocates node by node: mm1 writes ``a``; relu1 frees it in the plain chain
    assert plain.layer("mm1").memory == LayerMemory(allocated=ACTIVATION, live=WEIGHT + ACTIVATION)
    assert plain.layer("relu1").memory == LayerMemory(allocated=0, live=WEIGHT + ACTIVATION)
    grew = {
        la.name: keep.layer(la.name).memory.allocated - la.memory.allocated  # type: ignore[union-attr]
        for la in plain.layers
        if la.memory is not None
    }
    assert max(grew, key=lambda name: grew[name]) == "relu1" and grew["relu1"] == ACTIVATION


def test_memory_round_trips_through_json(chain_profiles: dict[str, ModelProfile]) -> None:
    prof = chain_profiles["plain"]
    data = json.loads(json.dumps(prof.to_dict()))
    assert data["memory"]["peak"] == WEIGHT + 3 * ACTIVATION
    assert data["layers"][0]["memory"] == {"allocated": ACTIVATION, "live": WEIGHT + ACTIVATION}
    back = ModelProfile.from_dict(data)
    assert back.memory == prof.memory
    assert [la.memory for la in back.layers] == [la.memory for la in prof.layers]


def test_recorded_onnxruntime_132_cpu_trace_has_the_fields() -> None:
    from pytest_roofline.backends.onnxruntime.attribution import load_trace

    events = load_trace(str(next(DATA.glob("prof_all_*.json"))))
    measured = trace_memory(events)
    assert measured is not None
    memory, layers, _ = measured
    first = next(e for e in events if str(e.get("name", "")).endswith("_kernel_time"))
    args = first["args"]
    assert memory.weights == int(args["mem_bytes_in_use"]) - int(args["mem_in_use_delta"])
    in_use = [int(e["args"]["mem_bytes_in_use"]) for e in events if "mem_bytes_in_use" in e.get("args", {})]
    assert memory.peak == max(in_use)
    asked = [
        int(e["args"]["mem_bytes_requested_in_use"])
        for e in events
        if "mem_bytes_in_use" in e.get("args", {})
    ]
    assert memory.requested_peak == max(asked) <= memory.peak  # the arena rounds requests up
    assert set(layers) >= {"r1_nchwc", "c2_nchwc", "MatMul_7/MatMulAddFusion"}


def test_recorded_cuda_trace_reads_the_cuda_arena() -> None:
    from pytest_roofline.backends.onnxruntime.attribution import load_trace

    events = load_trace(str(CUDA_DATA / "ort-cuda-resnet50_b1.json"))
    assert has_memory_fields(events)
    measured = trace_memory(events)
    assert measured is not None
    memory, layers, _ = measured
    assert memory.source == "onnxruntime profiler (CUDA arena)"
    assert memory.weights >= 25_557_032 * 4  # torchvision ResNet-50's parameters, fp32, on the device
    assert memory.weights < memory.peak <= memory.arena_held
    assert "/conv1/Conv" in layers and layers["/conv1/Conv"].allocated == 3_211_264  # 64x112x112 fp32


def test_a_trace_without_the_counters_has_no_memory() -> None:
    events = [{"cat": "Node", "name": "n_kernel_time", "ts": 1, "args": {"op_name": "Relu"}}]
    assert not has_memory_fields(events) and trace_memory(events) is None


def test_static_estimate_liveness_frees_after_the_last_reader() -> None:
    plain = static_memory(analyze(matmul_chain()))
    keep = static_memory(analyze(matmul_chain(keep_alive=True)))
    assert plain.weights == WEIGHT
    assert plain.peak_activations == 3 * ACTIVATION  # two live intermediates + the output
    assert keep.peak_activations - plain.peak_activations == ACTIVATION
    # relu1 writes in place into a's buffer (onnxruntime's planner: relu1's allocation reads 0), so
    # the peak falls at mm2, with b and c live at once
    assert dict(plain.live_after)["relu1"] == ACTIVATION
    assert plain.peak_node == "mm2"
    with_inputs = static_memory(analyze(matmul_chain()), count_inputs=True)
    assert with_inputs.peak_node == "mm1"  # the caller's x beside a, freed after its last reader
    assert with_inputs.peak_activations == plain.peak_activations


def test_memory_profile_refuses_an_unknown_source() -> None:
    with pytest.raises(ValueError, match="unknown memory source"):
        MemoryProfile(peak=1, arena_held=0, weights=0, peak_activations=1, source="guess")


def test_openvino_memory_from_the_helpers_peak_rss(tmp_path: Path) -> None:
    pytest.importorskip("openvino")
    from pytest_roofline.memory.rss import peak_rss_memory

    path = tmp_path / "chain.onnx"
    onnx.save(matmul_chain(), path)
    inputs = {"x": np.ones((ROWS, WIDTH), np.float32)}
    memory = peak_rss_memory(str(path), "openvino", {}, inputs, None, {}, weights=WEIGHT)
    assert memory.source == "peak RSS" and not memory.exact
    assert memory.peak > 0 and memory.peak_activations == max(memory.peak - WEIGHT, 0)


def test_roofline_diff_names_the_buffer_now_kept_alive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_roofline.cli import main

    onnx.save(matmul_chain(), tmp_path / "old.onnx")
    onnx.save(matmul_chain(keep_alive=True), tmp_path / "new.onnx")
    old, new = str(tmp_path / "old.onnx"), str(tmp_path / "new.onnx")
    assert main(["diff", old, new, "--format", "json", "--quiet"]) == 0
    memory = json.loads(capsys.readouterr().out)["memory"]
    assert memory["peak_change"] == ACTIVATION
    assert memory["kept_alive"] == [
        {"tensor": "a", "producer": "mm1", "last_reader": None, "bytes": ACTIVATION, "shape": [ROWS, WIDTH]}
    ]
    assert main(["diff", old, new, "--quiet"]) == 0
    assert "+65.5 kB at mm1: a 64x256 buffer now kept alive to the end" in capsys.readouterr().out
    assert main(["diff", old, old, "--format", "json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["memory"]["kept_alive"] == []


def test_the_profile_table_shows_predicted_beside_measured(chain_profiles: dict[str, ModelProfile]) -> None:
    from pytest_roofline.report.tables import profile_table

    line = next(x for x in profile_table(chain_profiles["plain"]).splitlines() if x.startswith("memory:"))
    peak = f"{(WEIGHT + 3 * ACTIVATION) / 1000:.3g} kB"
    assert line.startswith(f"memory: peak {peak} (weights {WEIGHT / 1000:.3g} kB, activations")
    assert f"static estimate {peak} (+0.0 %); from the onnxruntime profiler" in line


def gap_model() -> onnx.ModelProto:
    """a (400 B) and b (200 B) live; d (40 B) read from a frees a; c (480 B) then fits no gap; e
    (200 B) does."""
    rng = np.random.default_rng(0)
    shapes = {"Wa": (64, 100), "Wb": (64, 50), "Wd": (100, 10), "Wc": (10, 120), "Wy": (120, 50)}
    weights = [numpy_helper.from_array(rng.random(s, np.float32), n) for n, s in shapes.items()]
    nodes = [
        helper.make_node("MatMul", ["x", "Wa"], ["a"], name="n1"),
        helper.make_node("MatMul", ["x", "Wb"], ["b"], name="n2"),
        helper.make_node("MatMul", ["a", "Wd"], ["d"], name="n3"),
        helper.make_node("MatMul", ["d", "Wc"], ["c"], name="n4"),
        helper.make_node("MatMul", ["c", "Wy"], ["e"], name="n5"),
        helper.make_node("Add", ["e", "b"], ["y"], name="n6"),
    ]
    source = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 50])
    graph = helper.make_graph(nodes, "gap", [source], [output], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_static_estimate_packs_buffers_as_the_memory_pattern_does() -> None:
    static = static_memory(analyze(gap_model()))
    output = 50 * 4
    # live at once at most: b, c and e at n5 (200 + 480 + 200 B); y is allocated only at n6
    assert static.live_peak == 880 and static.peak_node == "n5"
    # packed: a at 0, b at 400, d at 600; a freed leaves a 400 B gap, too small for c: c at 640;
    # e then takes the gap (0-200)
    assert static.peak_activations - output == 640 + 480


# --- the planner over the graph onnxruntime ran (issue 34 item 1) ---------------------------------


def fp16_chain(rows: int = 64, width: int = 256) -> onnx.ModelProto:
    """An fp16 MatMul chain with a residual Add: onnxruntime's CPU EP runs it in float32 between
    the Casts it inserts, buffers the model's graph does not show."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array((rng.random((width, width)) * 0.01).astype(np.float16), f"W{i}")
        for i in range(3)
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W0"], ["a"], name="mm0"),
        helper.make_node("Relu", ["a"], ["b"], name="relu0"),
        helper.make_node("MatMul", ["b", "W1"], ["c"], name="mm1"),
        helper.make_node("Add", ["c", "x"], ["d"], name="add"),
        helper.make_node("MatMul", ["d", "W2"], ["y"], name="mm2"),
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT16, [rows, width]) for n in ("x", "y")]
    graph = helper.make_graph(nodes, "fp16_chain", io[:1], io[1:], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_estimate_over_the_graph_onnxruntime_ran_meets_the_requested_peak(tmp_path: Path) -> None:
    """The inserted float32 copies are planned too: the estimate reads the arena's requested peak
    to the byte, where the model's own graph (fp16 only) falls short."""
    from pytest_roofline.pipeline import ModelCall, prepare, profile_layers

    path = tmp_path / "fp16_chain.onnx"
    onnx.save(fp16_chain(), path)
    run = profile_layers(prepare(ModelCall(str(path))), iterations=2)
    assert run.kernels.executed is not None
    assert "Cast" in {node.op_type for node in run.kernels.executed.nodes}  # what the CPU EP inserted
    measured = trace_memory(run.kernels.trace_events)
    assert measured is not None
    memory, _, weights = measured
    prof = profile_model(path, sessions=1, rounds=2, profile_iterations=2)
    assert prof.memory is not None and prof.memory.requested_peak == memory.requested_peak
    assert prof.memory.predicted_peak == memory.requested_peak and prof.memory.predicted_error == 0.0
    assert weights + static_memory(run.analysis).peak_activations < memory.requested_peak  # the fp16 graph


def _executed(*nodes: tuple[str, str, tuple[str, ...], tuple[str, ...]], declared=None) -> ExecutedGraph:
    weights = frozenset(t for _, _, inputs, _ in nodes for t in inputs if t.startswith("W"))
    return ExecutedGraph(
        nodes=tuple(ExecutedNode(*node) for node in nodes),
        inputs=frozenset({"x"}),
        outputs=("y",),
        initializers=weights,
        declared=declared or {},
    )


def _trace(*outputs: tuple[str, tuple[int, ...]]) -> list[dict]:
    """A one-run profiler trace: one kernel event per (node, fp32 output shape), in order."""
    counters = {f: "0" for f in ("mem_bytes_in_use", "mem_in_use_delta", "mem_in_use_peak", "mem_arena_held")}
    run = [{"cat": "Session", "name": "model_run", "ts": 0}]
    return run + [
        {
            "cat": "Node",
            "name": f"{node}_kernel_time",
            "ts": index + 1,
            "args": {**counters, "output_type_shape": [{"float": list(shape)}]},
        }
        for index, (node, shape) in enumerate(outputs)
    ]


def test_the_planner_reuses_a_freed_buffer_of_the_same_shape_and_holds_it() -> None:
    """onnxruntime's rules (allocation_planner.cc): Relu writes in place; d takes a's freed buffer
    (same shape), which is then held across e's life instead of freed; a shape the planner cannot
    know before the run (a dim inference left open) is never reused."""
    nodes = (
        ("n1", "MatMul", ("x", "W1"), ("a",)),
        ("n2", "Relu", ("a",), ("b",)),
        ("n3", "MatMul", ("b", "W2"), ("c",)),
        ("n4", "MatMul", ("c", "W3"), ("e",)),
        ("n5", "MatMul", ("e", "W4"), ("d",)),
        ("n6", "MatMul", ("d", "W5"), ("y",)),
    )
    shapes = {"n1": (1, 100), "n2": (1, 100), "n3": (1, 50), "n4": (1, 60), "n5": (1, 100), "n6": (1, 50)}
    trace = _trace(*shapes.items())
    reused = planned_memory(_executed(*nodes), trace)
    assert reused is not None
    # a (400 B, b in place) and c (200) live; e (240) goes after them; d reuses a's block: 840 B + y
    assert reused.live_peak == 840 and reused.peak_activations == 840 + 200
    unknown = {"d": (1, None), "a": (1, 100), "b": (1, 100)}
    fresh = planned_memory(_executed(*nodes, declared=unknown), trace)
    assert fresh is not None
    # a is freed after n3: e takes its place (0-240), d goes after e (240-640): 640 B + y
    assert fresh.live_peak == 640 and fresh.peak_activations == 640 + 200


SEQ, DIM = 128, 32
SCORES = SEQ * SEQ * 4  # the attention's fp32 scores


def attention_block(keep_scores: bool = False) -> onnx.ModelProto:
    """One self-attention block named as torch's exporter names it; ``keep_scores`` also outputs
    the scores (q·kᵀ), so they live to the end instead of being freed by the Softmax."""
    rng = np.random.default_rng(1)
    weights = [
        numpy_helper.from_array(rng.random((DIM, DIM), np.float32), name) for name in ("Wq", "Wk", "Wv", "Wo")
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "Wq"], ["q"], name="/enc/attn/q/MatMul"),
        helper.make_node("MatMul", ["x", "Wk"], ["k"], name="/enc/attn/k/MatMul"),
        helper.make_node("MatMul", ["x", "Wv"], ["v"], name="/enc/attn/v/MatMul"),
        helper.make_node("Transpose", ["k"], ["kt"], name="/enc/attn/Transpose", perm=[1, 0]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="/enc/attn/MatMul"),
        helper.make_node("Softmax", ["scores"], ["probs"], name="/enc/attn/Softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["context"], name="/enc/attn/MatMul_1"),
        helper.make_node("MatMul", ["context", "Wo"], ["projected"], name="/enc/attn/o/MatMul"),
        helper.make_node("Add", ["projected", "x"], ["residual"], name="/enc/Add"),
        helper.make_node("Relu", ["residual"], ["y"], name="/enc/Relu"),
    ]
    return _fp32_model(
        nodes, weights, [SEQ, DIM], {"y": [SEQ, DIM]} | ({"scores": [SEQ, SEQ]} if keep_scores else {})
    )


TRIPS, LOOP_BATCH, LOOP_WIDTH = 8, 16, 64
PRODUCTS = TRIPS * LOOP_BATCH * LOOP_WIDTH * 4  # every iteration's fp32 product, scanned out


def loop_scanning_out(keep_products: bool = False) -> onnx.ModelProto:
    """A Loop of MatMul+Tanh; ``keep_products`` scans its body's MatMul product out as one more
    graph output, so every iteration's product is kept to the end."""
    from pytest_roofline.zoo.control_flow import loop_model

    model = loop_model(TRIPS, batch=LOOP_BATCH, width=LOOP_WIDTH)
    if keep_products:
        loop = model.graph.node[-1]
        body = next(attribute.g for attribute in loop.attribute if attribute.name == "body")
        body.node.append(helper.make_node("Identity", ["product"], ["product_kept"], name="keep_product"))
        body.output.append(helper.make_tensor_value_info("product_kept", TensorProto.FLOAT, None))
        loop.output.append("products")
        model.graph.output.append(helper.make_tensor_value_info("products", TensorProto.FLOAT, None))
    return model


@pytest.mark.parametrize(
    ("build", "named"),
    [
        (attention_block, f"+{SCORES / 1000:.3g} kB at /enc/attn/MatMul: a {SEQ}x{SEQ} buffer"),
        (loop_scanning_out, f"+{PRODUCTS / 1000:.3g} kB at loop: a {TRIPS}x{LOOP_BATCH}x{LOOP_WIDTH} buffer"),
    ],
    ids=["attention", "loop"],
)
def test_the_memory_verdict_names_the_node_whose_output_is_kept_alive(
    tmp_path: Path, build: Callable[[bool], onnx.ModelProto], named: str
) -> None:
    """The kept buffer's bytes show in the kernels' counters where it is no longer freed (a later
    kernel: the Softmax that read the scores); the verdict names its producer from the two graphs'
    liveness, a Loop for its new scan output."""
    from pytest_roofline.diff import summarize
    from pytest_roofline.gate.memory import MemoryTolerance, compare_memory, grown_layers, memory_record
    from pytest_roofline.memory.change import kept_longer

    old, new = _profile(build(False), tmp_path, "old"), _profile(build(True), tmp_path, "new")
    before, after = memory_record(old), memory_record(new)
    assert before is not None and after is not None
    if build is attention_block:  # what the kernels alone say: the Softmax no longer frees the scores
        assert grown_layers(before.layers, after.layers) == [("/enc/attn/Softmax", SCORES)]
    kept = kept_longer(
        summarize(tmp_path / "old.onnx").lifetimes(), summarize(tmp_path / "new.onnx").lifetimes()
    )
    verdict = compare_memory(after, before, MemoryTolerance(), kept)
    assert verdict.status == "regression"
    named += " now kept alive to the end"
    assert verdict.explanation == named and verdict.message.endswith(named), verdict.message
    # the same graph on both sides keeps nothing longer: the kernels' growth is named, as before
    assert (
        kept_longer(
            summarize(tmp_path / "old.onnx").lifetimes(), summarize(tmp_path / "old.onnx").lifetimes()
        )
        == []
    )


@pytest.mark.parametrize("trips_from", ["constant", "while"])
def test_a_loops_per_iteration_outputs_are_in_the_estimate(tmp_path: Path, trips_from: str) -> None:
    """onnxruntime's Loop keeps every iteration's scan output until the loop ends, then allocates
    the concatenated output and copies them in: one more copy of its outputs at its end (before, the
    estimate read 32 % low on these loops and 47 % on a 32-trip one)."""
    from pytest_roofline.zoo.control_flow import loop_model

    model = loop_model(16, trips_from, batch=8, width=64)  # type: ignore[arg-type]
    memory = _profile(model, tmp_path, trips_from).memory
    assert memory is not None and memory.requested_peak > 0 and memory.predicted_error is not None
    # a few bytes apart: the iteration counter and condition scalars the Loop keeps are not planned
    assert abs(memory.predicted_error) < 1e-3, (memory.predicted_peak, memory.requested_peak)
