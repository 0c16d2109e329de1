"""Small graphs in the patterns real exporters write, built here with onnx.helper.

Each reproduces a trait of a model shipped on the registry that this project's zoo builder never
writes: Silero-VAD's scalar ``sr`` input, recurrent ``state`` ``[2, ?, H]`` and an ``If`` on the
sample rate (torch.onnx); Paddle2ONNX's ``?`` naming every dynamic axis, so H and W share one name
(PP-OCR's recognizer, 1x3x48x192); tf2onnx / jax2tf's unnamed dynamic dims (``dim_param`` empty),
``:0`` tensor names and ``unk__`` dims.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 18)]


def _weight(name: str, shape: tuple[int, ...], seed: int) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)


def _save(model: onnx.ModelProto, path: Path | None) -> onnx.ModelProto:
    model.ir_version = 8
    onnx.checker.check_model(model)
    if path is not None:
        onnx.save(model, str(path))
    return model


def vad_like(path: Path | None = None, hidden: int = 16, frame: int = 64) -> onnx.ModelProto:
    """Silero-VAD's interface: ``input [?, frame]``, ``state [2, ?, hidden]``, ``sr`` a 0-d int64.

    The sample rate picks a branch (``If sr == 16000``): the 16 kHz branch is one MatMul of
    ``frame x hidden``, the other resamples first (a ``frame x frame`` MatMul more), so the
    branch taken changes the work. Output ``prob`` is declared ``[?, 1]``.
    """
    w16 = _weight("w16", (frame, hidden), 1)
    w8 = _weight("w8", (frame, hidden), 2)
    resample = _weight("resample", (frame, frame), 3)

    def branch(name: str, nodes: list[onnx.NodeProto], out: str) -> onnx.GraphProto:
        return helper.make_graph(
            nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)]
        )

    then_graph = branch("at_16k", [helper.make_node("MatMul", ["input", "w16"], ["h16"])], "h16")
    else_graph = branch(
        "at_8k",
        [
            helper.make_node("MatMul", ["input", "resample"], ["up"]),
            helper.make_node("MatMul", ["up", "w8"], ["h8"]),
        ],
        "h8",
    )
    nodes = [
        helper.make_node("Equal", ["sr", "k16000"], ["is16k"]),
        helper.make_node("If", ["is16k"], ["features"], then_branch=then_graph, else_branch=else_graph),
        helper.make_node("ReduceMean", ["state", "axes0"], ["state_mean"], keepdims=0),  # [?, hidden]
        helper.make_node("Add", ["features", "state_mean"], ["mixed"]),
        helper.make_node("Tanh", ["mixed"], ["h"]),
        helper.make_node("Unsqueeze", ["h", "axes0"], ["h1"]),
        helper.make_node("Concat", ["h1", "h1"], ["stateN"], axis=0),
        helper.make_node("ReduceMean", ["h", "axes1"], ["prob"], keepdims=1),
    ]
    graph = helper.make_graph(
        nodes,
        "vad",
        [
            helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, frame]),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, None, hidden]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [
            helper.make_tensor_value_info("prob", TensorProto.FLOAT, [None, 1]),
            helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, None, hidden]),
        ],
        [
            w16,
            w8,
            resample,
            numpy_helper.from_array(np.array(16000, np.int64), "k16000"),
            numpy_helper.from_array(np.array([0], np.int64), "axes0"),
            numpy_helper.from_array(np.array([1], np.int64), "axes1"),
        ],
    )
    model = helper.make_model(graph, opset_imports=OPSET, producer_name="pytorch", producer_version="2.1.0")
    return _save(model, path)


def vad_inputs(batch: int = 1, hidden: int = 16, frame: int = 64, sr: int = 16000) -> dict[str, np.ndarray]:
    """What a user feeds the VAD: one frame, a zero state, the sample rate as a 0-d array."""
    rng = np.random.default_rng(0)
    return {
        "input": rng.standard_normal((batch, frame)).astype(np.float32),
        "state": np.zeros((2, batch, hidden), np.float32),
        "sr": np.array(sr, np.int64),
    }


def ocr_like(path: Path | None = None, channels: int = 8) -> onnx.ModelProto:
    """Paddle2ONNX's naming: ``x [?, 3, ?, ?]`` (every dynamic axis ``?``), a Conv, a pool over
    H, then a MatMul over W's positions, as PP-OCR's recognizer reads a 48 x W text line."""
    nodes = [
        helper.make_node("Conv", ["x", "conv_w"], ["conv"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("ReduceMean", ["relu", "axes2"], ["pooled"], keepdims=0),  # [?, C, W/2]
        helper.make_node("Transpose", ["pooled"], ["seq"], perm=[0, 2, 1]),  # [?, W/2, C]
        helper.make_node("MatMul", ["seq", "fc_w"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["softmax_0.tmp_0"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "paddle_ocr_rec",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["?", 3, "?", "?"])],
        [helper.make_tensor_value_info("softmax_0.tmp_0", TensorProto.FLOAT, ["?", "?", 10])],
        [
            _weight("conv_w", (channels, 3, 3, 3), 4),
            _weight("fc_w", (channels, 10), 5),
            numpy_helper.from_array(np.array([2], np.int64), "axes2"),
        ],
    )
    model = helper.make_model(
        graph, opset_imports=OPSET, producer_name="PaddlePaddle", producer_version="2.5"
    )
    return _save(model, path)


def tf_like(path: Path | None = None, features: int = 12) -> onnx.ModelProto:
    """tf2onnx / jax2tf's habits: unnamed dynamic dims (``dim_param`` empty, no value) on both
    axes of ``serving_default_x:0``, ``unk__`` names on the output, ``:0`` tensor names."""
    nodes = [
        helper.make_node("MatMul", ["serving_default_x:0", "dense/kernel:0"], ["dense/MatMul:0"]),
        helper.make_node("Add", ["dense/MatMul:0", "dense/bias:0"], ["dense/BiasAdd:0"]),
        helper.make_node("Relu", ["dense/BiasAdd:0"], ["StatefulPartitionedCall:0"]),
    ]
    x = helper.make_tensor_value_info("serving_default_x:0", TensorProto.FLOAT, [None, None, features])
    out = helper.make_tensor_value_info(
        "StatefulPartitionedCall:0", TensorProto.FLOAT, ["unk__7", "unk__8", 4]
    )
    graph = helper.make_graph(
        nodes,
        "tf2onnx",
        [x],
        [out],
        [_weight("dense/kernel:0", (features, 4), 6), _weight("dense/bias:0", (4,), 7)],
    )
    model = helper.make_model(graph, opset_imports=OPSET, producer_name="tf2onnx", producer_version="1.16.1")
    return _save(model, path)


def sklearn_like(path: Path | None = None, zipmap: bool = True) -> onnx.ModelProto:
    """skl2onnx's classifier layout: ``LinearClassifier`` then ``ZipMap`` (ai.onnx.ml), whose
    output is a sequence of maps (``output_probability``), the declared type OpenVINO refuses."""
    nodes = [
        helper.make_node(
            "LinearClassifier",
            ["float_input"],
            ["label", "probabilities"],
            domain="ai.onnx.ml",
            coefficients=[0.1] * 8,
            intercepts=[0.0, 0.1],
            classlabels_ints=[0, 1],
            post_transform="LOGISTIC",
        )
    ]
    outputs = [helper.make_tensor_value_info("label", TensorProto.INT64, [None])]
    if zipmap:
        nodes.append(
            helper.make_node(
                "ZipMap",
                ["probabilities"],
                ["output_probability"],
                domain="ai.onnx.ml",
                classlabels_int64s=[0, 1],
            )
        )
        scalar = helper.make_tensor_type_proto(TensorProto.FLOAT, [])
        seq_of_maps = helper.make_sequence_type_proto(helper.make_map_type_proto(TensorProto.INT64, scalar))
        outputs.append(helper.make_value_info("output_probability", seq_of_maps))
    else:
        outputs.append(helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None, 2]))
    features = helper.make_tensor_value_info("float_input", TensorProto.FLOAT, [None, 4])
    graph = helper.make_graph(nodes, "sklearn", [features], outputs)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="skl2onnx")
    return _save(model, path)


def stale_value_info(path: Path | None = None, width: int = 4) -> onnx.ModelProto:
    """An exporter's stale shape annotations: ``value_info`` declares a Squeeze output ``[width]``
    (as if the batch axis were squeezed too) where the kernels keep ``[1, width]``, so the graph
    output ``y`` is declared rank 1 and produced rank 2.  Bare onnxruntime warns and runs it."""
    nodes = [
        helper.make_node("Squeeze", ["x", "axes2"], ["squeezed"], name="/Squeeze"),
        helper.make_node("Add", ["squeezed", "bias"], ["y"], name="/Add"),
    ]
    graph = helper.make_graph(
        nodes,
        "main_graph",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [width])],
        [numpy_helper.from_array(np.array([2], np.int64), "axes2"), _weight("bias", (width,), 80)],
        value_info=[helper.make_tensor_value_info("squeezed", TensorProto.FLOAT, [width])],
    )
    model = helper.make_model(graph, opset_imports=OPSET, producer_name="pytorch")
    return _save(model, path)  # the checker's full shape inference would refuse it; onnxruntime runs it


def random_mask_indices(path: Path | None = None) -> onnx.ModelProto:
    """An output whose shape changes from run to run: ``NonZero`` of a random mask (a sampling or
    dropout-style export), declared ``[2, ?]``."""
    nodes = [
        helper.make_node("RandomUniformLike", ["x"], ["noise"]),
        helper.make_node("Greater", ["noise", "half"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["indices"]),
    ]
    graph = helper.make_graph(
        nodes,
        "sampler",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("indices", TensorProto.INT64, [2, "kept"])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "half")],
    )
    return _save(helper.make_model(graph, opset_imports=OPSET), path)


# --- made by the tools people use (each imported here, lazily) -------------------------------------


def torch_like_mlp(path: Path | None = None, width: int = 256, depth: int = 3) -> onnx.ModelProto:
    """torch.onnx's layout of an ``nn.Sequential`` of ``Linear``/``ReLU``: ``Gemm`` with
    ``transB=1``, ``/fc1/Gemm`` names, ``onnx::Gemm_12`` weight names, a dynamic ``batch_size``.
    The base the precision and rewrite tools below transform."""
    nodes, inits, x = [], [], "input"
    for layer in range(depth):
        weight, bias = f"onnx::Gemm_{10 + 2 * layer}", f"onnx::Gemm_{11 + 2 * layer}"
        inits += [_weight(weight, (width, width), 20 + layer), _weight(bias, (width,), 40 + layer)]
        gemm = f"/fc{layer + 1}/Gemm_output_0"
        nodes.append(
            helper.make_node("Gemm", [x, weight, bias], [gemm], name=f"/fc{layer + 1}/Gemm", transB=1)
        )
        x = f"/act{layer + 1}/Relu_output_0" if layer < depth - 1 else "output"
        nodes.append(helper.make_node("Relu", [gemm], [x], name=f"/act{layer + 1}/Relu"))
    graph = helper.make_graph(
        nodes,
        "main_graph",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch_size", width])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch_size", width])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytorch")
    return _save(model, path)


def sklearn_models() -> dict[str, onnx.ModelProto]:
    """Real skl2onnx conversions of small fitted scikit-learn models (seeded data, ~1 s)."""
    from skl2onnx import to_onnx
    from sklearn.decomposition import PCA
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    features = rng.standard_normal((64, 8)).astype(np.float32)
    labels = (features[:, 0] + features[:, 1] > 0).astype(np.int64)
    fitted = {
        "skl_logreg": LogisticRegression().fit(features, labels),
        "skl_forest": RandomForestClassifier(n_estimators=4, max_depth=3, random_state=0).fit(
            features, labels
        ),
        "skl_mlp": MLPClassifier(hidden_layer_sizes=(32,), max_iter=50, random_state=0).fit(features, labels),
        "skl_scaler_pca": make_pipeline(StandardScaler(), PCA(n_components=4)).fit(features),
    }
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {name: to_onnx(model, features[:1], target_opset=17) for name, model in fitted.items()}


def quantized_dynamic(model: onnx.ModelProto, folder: Path) -> onnx.ModelProto:
    """``onnxruntime.quantization.quantize_dynamic`` (int8 weights, DynamicQuantizeLinear)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source, target = folder / "fp32_for_dynamic.onnx", folder / "int8_dynamic.onnx"
    onnx.save(model, str(source))
    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)
    return onnx.load(str(target))


def quantized_qdq(model: onnx.ModelProto, folder: Path, width: int = 256) -> onnx.ModelProto:
    """``quantize_static`` in QDQ format (QuantizeLinear/DequantizeLinear pairs), calibrated on
    eight seeded batches."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(1)
            self.feeds = iter(
                [{"input": rng.standard_normal((1, width)).astype(np.float32)} for _ in range(8)]
            )

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.feeds, None)

    source, target = folder / "fp32_for_qdq.onnx", folder / "int8_qdq.onnx"
    onnx.save(model, str(source))
    quantize_static(str(source), str(target), Reader(), quant_format=QuantFormat.QDQ)
    return onnx.load(str(target))


def float16_converted(model: onnx.ModelProto, keep_io_types: bool = True) -> onnx.ModelProto:
    """onnxconverter-common's ``convert_float_to_float16`` (float32 inputs/outputs kept: Casts)."""
    from onnxconverter_common import float16

    return float16.convert_float_to_float16(model, keep_io_types=keep_io_types)


def ort_optimized(model: onnx.ModelProto, folder: Path) -> onnx.ModelProto:
    """onnxruntime's offline-optimised copy (``SessionOptions.optimized_model_filepath``, extended
    level: the same work, Gemm+Relu fused into com.microsoft FusedGemm)."""
    import onnxruntime as ort

    source, target = folder / "for_ort_opt.onnx", folder / "ort_optimized.onnx"
    onnx.save(model, str(source))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(target)
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    return onnx.load(str(target))


def slimmed(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxslim's simplification (constant folding, dead code, fusions)."""
    import onnxslim

    return onnxslim.slim(model)


def foldable_shape_graph(path: Path | None = None, width: int = 64) -> onnx.ModelProto:
    """An exporter's shape arithmetic around a MatMul (``Shape -> Gather -> Unsqueeze -> Concat ->
    Reshape`` on constants and a ``Constant`` weight): what simplifiers fold away."""
    nodes = [
        helper.make_node("Constant", [], ["w"], value=_weight("w_value", (width, width), 60)),
        helper.make_node("Shape", ["w"], ["w_shape"]),
        helper.make_node("Gather", ["w_shape", "zero"], ["rows"], axis=0),
        helper.make_node("Unsqueeze", ["rows", "zero1"], ["rows1"]),
        helper.make_node("Concat", ["minus1", "rows1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["y0"]),
        helper.make_node("Relu", ["y0"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "torch_jit",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])],
        [
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
            numpy_helper.from_array(np.array([0], np.int64), "zero1"),
            numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
        ],
    )
    return _save(helper.make_model(graph, opset_imports=OPSET, producer_name="pytorch"), path)


def loop_with_state(path: Path | None = None, width: int = 32, steps: int = 4) -> onnx.ModelProto:
    """A scripted loop as torch.jit / jax ``fori_loop`` export it: ``Loop`` with a trip count from
    an input scalar ``steps`` (0-d int64) and a carried state, an unnamed batch dim."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("MatMul", ["h_in", "loop_w"], ["h_mm"]),
            helper.make_node("Tanh", ["h_mm"], ["h_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_out", TensorProto.FLOAT, None),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["steps", "", "h0"], ["h"], body=body)],
        "jit_loop",
        [
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, [None, width]),
            helper.make_tensor_value_info("steps", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, [None, width])],
        [_weight("loop_w", (width, width), 70)],
    )
    model = helper.make_model(graph, opset_imports=OPSET, producer_name="pytorch")
    return _save(model, path)


#: Exports torch.onnx made (legacy and dynamo), committed with the script that made them:
#: ``benchmarks/export_real_corpus_torch.py`` (torch 2.13.0 CPU, in a side environment), and
#: onnxruntime's transformer optimizer's output over two of them
#: (``benchmarks/optimize_real_corpus_transformers.py``).
TORCH_EXPORTS = Path(__file__).resolve().parent / "data" / "real_exports"


def torch_exports() -> list[tuple[str, str, str, dict]]:
    """The committed torch.onnx exports: (name, exporter, path, what a user passes)."""
    import json

    manifest = json.loads((TORCH_EXPORTS / "manifest.json").read_text())
    entries = []
    for name, entry in sorted(manifest["models"].items()):
        call = entry["call"]
        given: dict = {}
        if "scalars" in call:  # a 0-d input is given as an array, with the other inputs
            rng = np.random.default_rng(3)
            arrays = {k: np.array(v, np.int64) for k, v in call["scalars"].items()}
            arrays.update({k: rng.standard_normal(s).astype(np.float32) for k, s in call["shapes"].items()})
            given["inputs"] = arrays
        else:
            given["shapes"] = {k: tuple(v) for k, v in call["shapes"].items()}
        entries.append(
            (
                name,
                f"{entry['exporter']} (torch {manifest['torch']})"
                if entry["exporter"].startswith("torch.onnx")
                else entry["exporter"],
                str(TORCH_EXPORTS / f"{name}.onnx"),
                given,
            )
        )
    return entries


def corpus(folder: Path) -> list[tuple[str, str, onnx.ModelProto | str, dict]]:
    """The real-exports corpus: (name, the tool that made it, model or its path, what a user passes
    to ``profile_model`` for it: ``inputs=``/``shapes=``/nothing). Made in about 5 s; needs
    scikit-learn, skl2onnx, onnxconverter-common and onnxslim (the ``test`` extra)."""
    base = torch_like_mlp()
    entries: list[tuple[str, str, onnx.ModelProto | str, dict]] = [
        ("vad", "hand: torch.onnx Silero-VAD layout", vad_like(), {"inputs": vad_inputs()}),
        ("ocr_rec", "hand: Paddle2ONNX naming", ocr_like(), {"shapes": {"x": (1, 3, 48, 192)}}),
        (
            "tf_dense",
            "hand: tf2onnx unnamed dims",
            tf_like(),
            {"shapes": {"serving_default_x:0": (1, 16, 12)}},
        ),
        ("skl_layout", "hand: skl2onnx LinearClassifier+ZipMap", sklearn_like(), {}),
        ("mlp", "hand: torch.onnx Linear/ReLU layout", base, {}),
        ("shape_math", "hand: exporter shape arithmetic", foldable_shape_graph(), {}),
        ("loop_state", "hand: scripted Loop with state", loop_with_state(), {"inputs": _loop_inputs()}),
        ("stale_shapes", "hand: stale value_info (rank 1, runs 2)", stale_value_info(), {}),
    ]
    entries += [(name, "skl2onnx", model, {}) for name, model in sklearn_models().items()]
    entries += [
        ("mlp_int8_dynamic", "onnxruntime quantize_dynamic", quantized_dynamic(base, folder), {}),
        ("mlp_int8_qdq", "onnxruntime quantize_static QDQ", quantized_qdq(base, folder), {}),
        ("mlp_fp16", "onnxconverter-common float16", float16_converted(base), {}),
        ("mlp_ort_optimized", "onnxruntime offline optimizer", ort_optimized(base, folder), {}),
        ("shape_math_slim", "onnxslim", slimmed(foldable_shape_graph()), {}),
    ]
    return entries + list(torch_exports())


def _loop_inputs(batch: int = 1, width: int = 32, steps: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2)
    return {"h0": rng.standard_normal((batch, width)).astype(np.float32), "steps": np.array(steps, np.int64)}
