"""Cost-model coverage: ONNX's node test suite and the graphs people ship now, against independent counts.

Run: ``python benchmarks/cost_model_coverage.py [--no-suite] [--no-models] [--torch-exports DIR]``.

1. Every node test model of the installed ``onnx`` (``onnx.backend.test.case.node``, about 1,884)
   is analyzed: crashes (an exception that is not a one-line ``RooflineError``), false refusals for
   zero-size dims, nodes reported "no cost rule" although a rule exists, bytes onnxruntime wrote
   to stderr, refusals by kind (each names why: the data, an input's values), and the MACs of each
   fused op against its ``_expanded`` twin executed by the independent counter (LinearAttention's
   expansion is a Scan).
2. The models of issue 13 (control flow, decode-time attention with a KV cache, quantized RNNs
   and pools, DeformConv, onnxruntime's transformer optimizer) against
   ``tests/reference_runtime.py``, which executes the graph, unrolling Loop/Scan/If from real trip
   counts and conditions. Target: every model within 0.5 %, complete coverage where the graph
   fixes everything.
3. With ``--torch-exports DIR``: the same graphs as PyTorch makes them (make them with
   ``benchmarks/export_issue13_models.py --out DIR`` where torch is installed): a scripted Loop
   (constant and shape-driven trip count), ``torch.cond``, LSTMs as exported and after
   ``quantize_dynamic``, a GPT-2-like decoder with past keys/values (as exported, quantized, and
   through onnxruntime's transformer optimizer), the fp16 ConvNeXt- and Llama-like models from
   both exporters. Same target: within 0.5 %, complete coverage (an If on data: assumed and said).
Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from reference_runtime import reference_run_macs  # noqa: E402

from pytest_roofline import zoo  # noqa: E402
from pytest_roofline.analysis import analyze  # noqa: E402
from pytest_roofline.analysis.costs import lookup  # noqa: E402
from pytest_roofline.analysis.types import NO_RULE  # noqa: E402
from pytest_roofline.errors import RooflineError  # noqa: E402
from pytest_roofline.model import bind_input_shapes, make_inputs  # noqa: E402
from pytest_roofline.zoo import control_flow, decode  # noqa: E402

TOLERANCE = 0.005
_VALUE_WORDS = ("depends on the data", "depends on the values", "trip count")


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[int]]:
    """Count the bytes written to file descriptor 2 (native code included) inside the block."""
    sink = tempfile.TemporaryFile()
    saved = os.dup(2)
    os.dup2(sink.fileno(), 2)
    box = [0]
    try:
        yield box
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        sink.seek(0, os.SEEK_END)
        box[0] = sink.tell()
        sink.close()


def node_suite() -> int:
    """Analyze every node test model; print the figures; the number of missed targets."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)
    counts: Counter[str] = Counter()
    refusals: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    problems: list[str] = []
    start = time.perf_counter()
    with captured_stderr() as leaked:
        for case in cases:
            zero = _has_zero_dim(case.model)
            try:
                result = analyze(case.model)
            except RooflineError as exc:
                counts["refused"] += 1
                text = str(exc)
                kind = "values/data" if any(w in text for w in _VALUE_WORDS) else "other"
                refusals[kind] += 1
                if zero and kind == "other":
                    counts["false refusal (zero-size dim)"] += 1
                    problems.append(f"{case.name}: {text[:160]}")
                if "--dim" in text and not text.startswith(
                    "input '"
                ):  # only a symbolic input dim takes --dim
                    counts["--dim hint where no dim helps"] += 1
                continue
            except Exception as exc:  # noqa: BLE001 - a crash is what this counts
                counts["crash"] += 1
                problems.append(f"{case.name}: CRASH {type(exc).__name__}: {str(exc)[:120]}")
                continue
            counts["analyzed"] += 1
            counts["analyzed with a zero-size dim"] += int(zero)
            for item in result.nodes:
                if not item.costed:
                    reasons[item.reason] += 1
                    if item.reason == NO_RULE and lookup(item.domain, item.op_type) is not None:
                        counts["misreported no cost rule"] += 1
                        problems.append(f"{case.name}: {item.name} reported without a rule")
    elapsed = time.perf_counter() - start
    print(f"ONNX node test suite (onnx {onnx.__version__}): {len(cases)} models in {elapsed:.1f} s")
    for key in (
        "analyzed",
        "analyzed with a zero-size dim",
        "refused",
        "crash",
        "false refusal (zero-size dim)",
        "misreported no cost rule",
        "--dim hint where no dim helps",
    ):
        print(f"  {key:<34}{counts[key]:>6}")
    print(f"  refusals by cause: {dict(refusals)}")
    print(f"  uncosted nodes by reason: {dict(reasons)}")
    print(f"  bytes written to stderr (onnxruntime log): {leaked[0]}")
    pairs = expanded_pairs(cases)
    for line in problems[:20]:
        print("  " + line)
    return (
        counts["crash"]
        + counts["false refusal (zero-size dim)"]
        + counts["misreported no cost rule"]
        + counts["--dim hint where no dim helps"]
        + int(leaked[0] > 0)
        + pairs
    )


def expanded_pairs(cases: list[Any]) -> int:
    """Fused attention ops vs their ``_expanded`` twins run by the independent counter."""
    by_name = {c.name: c for c in cases}
    missed = 0
    print("  fused op vs its executed expansion (MACs):")
    for case in cases:
        if not case.name.startswith("test_linear_attention") or case.name.endswith("_expanded"):
            continue
        twin = by_name.get(case.name + "_expanded")
        if twin is None or not twin.data_sets:
            continue
        inputs = twin.data_sets[0][0]
        feeds = dict(zip([i.name for i in twin.model.graph.input], inputs, strict=False))
        ours = analyze(case.model).total.macs
        try:
            reference = reference_run_macs(twin.model, feeds)
        except Exception as exc:  # noqa: BLE001 - report and count
            print(f"    {case.name:<52} reference failed: {str(exc)[:80]}")
            missed += 1
            continue
        err = abs(ours - reference) / reference if reference else float(ours != 0)
        missed += int(err > TOLERANCE)
        print(f"    {case.name:<52}{ours:>10}{reference:>10}{100 * err:>9.2f}%")
    return missed


def _has_zero_dim(model: onnx.ModelProto) -> bool:
    for vi in model.graph.input:
        if vi.type.HasField("tensor_type"):
            dims = vi.type.tensor_type.shape.dim
            if any(d.HasField("dim_value") and d.dim_value == 0 for d in dims):
                return True
    return False


# -- the models of the issue ------------------------------------------------------------------


def _quantized_lstm() -> onnx.ModelProto:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "lstm.onnx", Path(tmp) / "lstm_q.onnx"
        onnx.save(decode.lstm_model(), src)
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, op_types_to_quantize=["LSTM"])
        return onnx.load(str(dst))


def _qlinear_pool() -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            self.batches = iter(
                [{"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(4)]
            )

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "cnn.onnx", Path(tmp) / "cnn_q.onnx"
        onnx.save(decode.conv_pool_model(), src)
        quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QOperator)
        return onnx.load(str(dst))


def _optimized_transformer() -> onnx.ModelProto:
    from onnxruntime.transformers.optimizer import optimize_model

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "bert.onnx"
        onnx.save(zoo.tiny_transformer(), src)
        with contextlib.redirect_stdout(sys.stderr):
            optimized = optimize_model(str(src), model_type="bert", num_heads=4, hidden_size=64, opt_level=0)
        return optimized.model


def _feeds_positive(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    feeds = make_inputs(model, bind_input_shapes(model))
    return {k: np.abs(v) for k, v in feeds.items()}  # the predicate ReduceSum(x) > 0 holds: costlier branch


def _feeds_trips(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    feeds = make_inputs(model, bind_input_shapes(model))
    feeds["max_trips"] = np.array(5, np.int64)  # what the --trip binding says
    return feeds


def _feeds_mask(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    feeds = make_inputs(model, bind_input_shapes(model))
    feeds["attention_mask"] = np.ones_like(feeds["attention_mask"])
    return feeds


MODELS: dict[str, tuple[Callable[[], onnx.ModelProto], dict[str, Any], Callable[..., Any] | None]] = {
    "Loop, constant trip count 5": (lambda: control_flow.loop_model(5, "constant"), {}, None),
    "Loop, trip count from shapes": (lambda: control_flow.loop_model(5, "shape"), {}, None),
    "Loop, trip count bound (--trip)": (
        lambda: control_flow.loop_model(5, "input"),
        {"trips": {"loop": 5}},
        _feeds_trips,
    ),
    "Loop nested 3 x 4": (control_flow.nested_loop_model, {}, None),
    "Scan over 10 steps": (lambda: control_flow.scan_model(10), {}, None),
    "If (torch.cond on data)": (lambda: control_flow.if_model("data"), {}, _feeds_positive),
    "If, folded condition": (lambda: control_flow.if_model("constant"), {}, None),
    "com.microsoft Attention + past": (decode.ms_attention_decode_model, {}, None),
    "MultiHeadAttention + past_key/value": (decode.mha_decode_model, {}, None),
    "GroupQueryAttention + past": (decode.gqa_decode_model, {}, _feeds_mask),
    "quantize_dynamic LSTM": (_quantized_lstm, {}, None),
    "quantize_static QLinearGlobalAvgPool": (_qlinear_pool, {}, None),
    "DeformConv": (decode.deform_conv_model, {}, None),
    "transformer optimizer (BERT-like)": (_optimized_transformer, {"batch": 1, "dims": {"seq": 16}}, None),
}


def compare(name: str, model: onnx.ModelProto, kwargs: dict[str, Any], feeds: dict[str, np.ndarray]) -> int:
    """Print the analyzer's MACs against the executed count for one model; missed targets."""
    result = analyze(model, **kwargs)
    reference = reference_run_macs(model, feeds)
    err = abs(result.total.macs - reference) / reference if reference else float(result.total.macs != 0)
    special = sorted({n.op_type for n in result.nodes if n.domain == "com.microsoft" or n.graph})[:4]
    coverage = result.coverage
    has_if = any(n.op_type == "If" for n in model.graph.node)
    complete = coverage.complete or (coverage.assumed_nodes and has_if)  # an If on data: assumed, said
    print(
        f"{name:<40}{result.total.macs:>12,}{reference:>12,}{100 * err:>8.2f}%  "
        f"{','.join(special) or '-'} / {'complete' if coverage.complete else coverage.describe()[:70]}"
    )
    return int(err > TOLERANCE) + int(not complete)


def _header(title: str) -> None:
    print(f"\n{title}")
    print(f"{'model':<40}{'analyzer':>12}{'reference':>12}{'error':>9}  ops / coverage")


def issue_models() -> int:
    """One row per model; the number of missed targets."""
    _header("models of issue 13: analyzer total MACs vs an independent count that executes the graph")
    missed = 0
    for name, (build, kwargs, feeder) in MODELS.items():
        model = build()
        shapes = bind_input_shapes(model, kwargs.get("batch"), kwargs.get("dims"))
        feeds = feeder(model) if feeder else make_inputs(model, shapes)
        missed += compare(name, model, kwargs, feeds)
    rotary = analyze(decode.rotary_model())
    print(f"{'RotaryEmbedding (FLOPs, 3/rotated elem)':<40}{rotary.total.flops:>12,}{3 * 8 * 64:>12,}")
    missed += int(rotary.total.flops != 3 * 8 * 64 or not rotary.coverage.complete)
    return missed


def _quantized(path: Path) -> onnx.ModelProto:
    """``quantize_dynamic`` (int8 weights) of the model at ``path``."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):
        quantize_dynamic(str(path), str(Path(tmp) / "q.onnx"), weight_type=QuantType.QInt8)
        return onnx.load(str(Path(tmp) / "q.onnx"))


def _gpt2_optimized(path: Path) -> onnx.ModelProto:
    from onnxruntime.transformers.optimizer import optimize_model

    with contextlib.redirect_stdout(sys.stderr):
        return optimize_model(str(path), model_type="gpt2", num_heads=4, hidden_size=128, opt_level=0).model


# file stem -> (row name, how to make the model from the file, analyze() kwargs, feeds)
TORCH_EXPORTS: dict[
    str, list[tuple[str, Callable[[Path], onnx.ModelProto], dict[str, Any], Callable[..., Any] | None]]
] = {
    "loop_legacy": [("Loop, constant 5 (torch.jit.script)", onnx.load, {}, None)],
    "loop_shape_legacy": [("Loop, trips from shape (jit.script)", onnx.load, {"dims": {"steps": 5}}, None)],
    "cond_dynamo": [("If (torch.cond, dynamo)", onnx.load, {}, _feeds_positive)],
    "lstm_legacy": [
        ("LSTM (legacy)", onnx.load, {}, None),
        ("LSTM (legacy) + quantize_dynamic", _quantized, {}, None),
    ],
    "lstm_dynamo": [
        ("LSTM (dynamo)", onnx.load, {}, None),
        ("LSTM (dynamo) + quantize_dynamic", _quantized, {}, None),
    ],
    "gpt2_past_legacy": [
        ("GPT-2-like + past KV (legacy)", onnx.load, {}, None),
        ("  + quantize_dynamic", _quantized, {}, None),
        ("  + transformer optimizer (gpt2)", _gpt2_optimized, {}, None),
    ],
    **{
        f"{model}_fp16_{exporter}": [(f"{model} fp16 ({exporter})", onnx.load, {}, None)]
        for model in ("convnext", "llama")
        for exporter in ("legacy", "dynamo")
    },
}


def torch_exports(folder: Path) -> int:
    """The issue's graphs as torch makes them (benchmarks/export_issue13_models.py); missed targets."""
    _header(f"torch exports in {folder}: analyzer total MACs vs the executed count")
    missed = 0
    for stem, rows in TORCH_EXPORTS.items():
        path = folder / f"{stem}.onnx"
        if not path.exists():
            print(f"{stem:<40}missing: run benchmarks/export_issue13_models.py --out {folder}")
            missed += 1
            continue
        for name, load, kwargs, feeder in rows:
            model = load(path)
            shapes = bind_input_shapes(model, kwargs.get("batch"), kwargs.get("dims"))
            feeds = feeder(model) if feeder else make_inputs(model, shapes)
            missed += compare(name, model, kwargs, feeds)
    return missed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-suite", action="store_true", help="skip the ONNX node test suite")
    parser.add_argument("--no-models", action="store_true", help="skip the issue's models")
    parser.add_argument(
        "--torch-exports",
        type=Path,
        default=None,
        help="folder of benchmarks/export_issue13_models.py's files",
    )
    args = parser.parse_args()
    missed = 0
    if not args.no_suite:
        missed += node_suite()
    if not args.no_models:
        missed += issue_models()
    if args.torch_exports is not None:
        missed += torch_exports(args.torch_exports)
    print(f"targets missed: {missed}")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
