"""Analyzer and backends on real PyTorch exports (legacy TorchScript and dynamo exporters).

Make the exports first (in an environment with torch)::

    python benchmarks/export_models.py --out /tmp/roofline-exports

then, in an environment with pytest-roofline, onnxruntime and openvino::

    python benchmarks/real_exports.py /tmp/roofline-exports [--no-profile] [--no-openvino]

For every ``<model>_<exporter>.onnx`` it prints: conv + gemm + matmul GMACs at batch 1 (BERT at
seq 128) against the published figure and the independent onnxruntime-shape counter of
``tests/reference_macs.py``; the shape method; uncosted ops; then ``roofline profile --format
json`` (a subprocess: the CLI path users run) on onnxruntime at graph optimization levels basic
and all and on OpenVINO: attributed fraction (targets 0.99 and 0.95), compute layers without an
ONNX node, and the sum of the compute layers' FLOPs over the analyzer's total (target 1 +- 1 %).

``--corpus`` (issue 32) needs no torch. It builds the real-exports corpus of
``tests/_real_exports.py``: models made by other tools than this project's zoo builder, some of them
committed (torch.onnx legacy and dynamo exports made by ``benchmarks/export_real_corpus_torch.py``,
Hugging Face BERT and GPT-2 among them, and onnxruntime's transformer optimizer's output over those
two, made by ``benchmarks/optimize_real_corpus_transformers.py``), the rest made on the fly by
skl2onnx, onnxruntime's quantize_dynamic and QDQ quantize_static, onnxconverter-common's float16,
onnxruntime's offline optimizer and onnxslim, or hand-built in torch.onnx, Paddle2ONNX and tf2onnx
layouts (scalar inputs, unnamed and repeated dims, If and Loop with state). Each is profiled, with
the inputs a user would give and a roofline calibrated for each configuration, on onnxruntime
(default threads and one thread) and OpenVINO (default threads and one thread; a model it cannot
read is skipped with its one line). Printed per model: analyze, each profile's ``roofline_check``
and the highest layer fraction; then every layer above 100 % of its roof with what judges it (op,
time, FLOPs, bytes, bound, memory roof, dispatch floor); then the targets, one a line (100 %
analyze and profile on onnxruntime, OpenVINO ran or skipped, every check valid, no layer above
100 %).

``--predictions`` prints the precision and rewrite pairs (a 4-layer 1024-wide MLP and its int8
dynamic, QDQ, float16 and optimiser copies; exporter shape arithmetic and its onnxslim copy; the
zoo's MobileNetV2 and its int8 dynamic, float16, optimiser and onnxslim copies): the ``roofline
diff`` "why" line, then a table of predicted change, measured change with its 95 % interval
(paired and interleaved in fresh session pairs, sampled until the interval is within +-1.5 % or
60 pairs ran; one batch of 6 pairs where there is no prediction) and whether the line is within
target (x2 of the measured change, 3 points under 5 %, or "no prediction"; "not measurable here"
where the line itself says its measured interval is too wide to judge the prediction, which is
counted apart), and the worst judged line::

    python benchmarks/real_exports.py --corpus [--predictions] [--no-openvino]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from pytest_roofline.analysis import analyze, published_macs  # noqa: E402
from pytest_roofline.fmt import fmt_pct  # noqa: E402
from pytest_roofline.model import bind_input_shapes, load_model, make_inputs  # noqa: E402

PUBLISHED_GMACS = {"resnet50": 4.089, "mobilenet_v2": 0.301, "vit_b_16": 17.564, "bert_base": 11.17}
SEQ = 128
PROFILES = (  # column -> (backend, options)
    ("ort_basic", "onnxruntime", ("graph_optimization_level=basic",)),
    ("ort_all", "onnxruntime", ("graph_optimization_level=all",)),
    ("openvino", "openvino", ()),
)


def seq_dims(path: Path) -> dict[str, int]:
    """Every symbolic non-batch input dim bound to the sequence length (BERT's ``seq``)."""
    model = load_model(path)
    weights = {init.name for init in model.graph.initializer}
    dims: dict[str, int] = {}
    for vi in model.graph.input:
        if vi.name not in weights:
            for dim in list(vi.type.tensor_type.shape.dim)[1:]:
                if dim.dim_param:
                    dims[dim.dim_param] = SEQ
    return dims


def check_macs(path: Path, dims: dict[str, int], reference: bool) -> dict[str, Any]:
    """Analyzer MACs, the reference MACs, shape method, uncosted ops and analysis time."""
    start = time.perf_counter()
    result = analyze(path, batch=1, dims=dims)
    elapsed = time.perf_counter() - start
    row: dict[str, Any] = {
        "gmacs": published_macs(result) / 1e9,
        "shape_method": result.shape_method,
        "uncosted": dict(result.uncosted),
        "analyze_s": elapsed,
        "total_flops": result.total.flops,
        "ref_gmacs": None,
    }
    if reference:
        from reference_macs import reference_macs

        model = onnx_with_weights(path)
        feeds = make_inputs(model, bind_input_shapes(model, 1, dims))
        row["ref_gmacs"] = sum(reference_macs(model, feeds).values()) / 1e9
    return row


def onnx_with_weights(path: Path) -> Any:
    """The model with external data loaded (the reference counter runs it)."""
    import onnx

    return onnx.load(str(path), load_external_data=True)


def profile(path: Path, dims: dict[str, int], backend: str, options: tuple[str, ...]) -> dict[str, Any]:
    """``roofline profile --format json`` in a subprocess; the figures this benchmark reports."""
    cli = Path(sys.executable).parent / "roofline"
    command = [str(cli), "profile", str(path), "--batch", "1", "--backend", backend, "--format", "json"]
    command += ["--no-roofline", "--sessions", "2", "--rounds", "2", "--iterations", "3", "--quiet"]
    for name, value in dims.items():
        command += ["--dim", f"{name}={value}"]
    for option in options:
        command += ["--option", option]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:200]}
    data = json.loads(done.stdout)
    compute = [la for la in data["layers"] if la["kind"] == "compute"]
    return {
        "fraction": data["attributed_fraction"],
        "no_node": [la["name"] for la in data["layers"] if la["kind"] != "layout" and not la["onnx_nodes"]],
        "layer_flops": sum(la["flops"] for la in compute),
        "total_flops": data["total"]["flops"],
        "unattributed": [la["name"] for la in data["layers"] if la["kind"] == "unattributed"],
    }


def main() -> int:
    """Print the table; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default="/tmp/roofline-exports", help="export folder")
    parser.add_argument("--no-profile", action="store_true", help="static analysis only")
    parser.add_argument("--no-openvino", action="store_true", help="skip the OpenVINO profile")
    parser.add_argument("--no-reference", action="store_true", help="skip the onnxruntime MAC reference")
    parser.add_argument("--details", action="store_true", help="list layers without ONNX nodes")
    parser.add_argument("--corpus", action="store_true", help="the real-exports corpus (issue 32), no torch")
    parser.add_argument("--predictions", action="store_true", help="precision/rewrite predictions (issue 32)")
    args = parser.parse_args()
    if args.corpus or args.predictions:
        import tempfile

        missed = corpus_main(not args.no_openvino) if args.corpus else 0
        if args.predictions:
            missed += prediction_pairs(Path(tempfile.mkdtemp(prefix="roofline-predictions-")))
        print(f"targets missed: {missed}")
        return 1 if missed else 0
    paths = sorted(Path(args.folder).glob("*_*.onnx"))
    if not paths:
        print(f"no exports in {args.folder}: run benchmarks/export_models.py first")
        return 1
    print("GMACs: Conv + Gemm + MatMul at batch 1 (BERT seq 128). Attribution: attributed_fraction")
    print("[compute layers without ONNX node]; flops: sum of compute layers' FLOPs / analyzer total")
    header = (
        f"{'model':<13}{'exporter':<9}{'GMACs':>9}{'publ.':>8}{'rel.err':>9}{'ref.err':>9}  {'shapes':<18}"
        f"{'ORT basic':>13}{'ORT all':>13}{'flops b/a':>15}{'OpenVINO':>13}{'flops ov':>9}"
    )
    print(header)
    missed = 0
    details: list[str] = []
    for path in paths:
        model, _, exporter = path.stem.rpartition("_")
        dims = seq_dims(path)
        row = check_macs(path, dims, not args.no_reference)
        published = PUBLISHED_GMACS.get(model)
        err = abs(row["gmacs"] - published) / published if published else None
        ref_err = abs(row["gmacs"] - row["ref_gmacs"]) / row["ref_gmacs"] if row["ref_gmacs"] else None
        missed += int(err is not None and err > 1e-3) + int(ref_err is not None and ref_err > 1e-3)
        missed += int(bool(row["uncosted"]))
        line = (
            f"{model:<13}{exporter:<9}{row['gmacs']:>9.4f}{published or 0:>8.3f}"
            f"{_pct(err):>9}{_pct(ref_err):>9}  {row['shape_method']:<18}"
        )
        if row["uncosted"]:
            details.append(f"{path.name}: uncosted {row['uncosted']}")
        cells: dict[str, dict[str, Any]] = {}
        if not args.no_profile:
            for column, backend, options in PROFILES:
                if backend == "openvino" and args.no_openvino:
                    continue
                cells[column] = profile(path, dims, backend, options)
        for column in ("ort_basic", "ort_all"):
            line += f"{_attribution(cells.get(column)):>13}"
        line += f"{_flops(cells.get('ort_basic')) + '/' + _flops(cells.get('ort_all')):>15}"
        line += f"{_attribution(cells.get('openvino')):>13}{_flops(cells.get('openvino')):>9}"
        print(line, flush=True)
        for column, cell in cells.items():
            target = 0.95 if column == "openvino" else 0.99
            if "error" in cell:
                missed += 1
                details.append(f"{path.name} {column}: {cell['error']}")
                continue
            ratio = cell["layer_flops"] / cell["total_flops"] if cell["total_flops"] else 1.0
            missed += int(cell["fraction"] < target) + int(abs(ratio - 1) > 0.01) + int(bool(cell["no_node"]))
            if cell["no_node"] and args.details:
                details.append(f"{path.name} {column}: no ONNX node: {cell['no_node'][:8]}")
    for line in details:
        print(line)
    print(f"targets missed: {missed}")
    return 1 if missed else 0


def _pct(value: float | None) -> str:
    return fmt_pct(value, 3, missing="-")


def _attribution(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return "-"
    if "error" in cell:
        return "ERROR"
    return f"{cell['fraction']:.4f}[{len(cell['no_node'])}]"


def _flops(cell: dict[str, Any] | None) -> str:
    if cell is None or "error" in cell or not cell["total_flops"]:
        return "-"
    return f"{cell['layer_flops'] / cell['total_flops']:.4f}"


CORPUS_FAST = {"sessions": 2, "rounds": 5, "profile_iterations": 3}
#: the corpus's profiling configurations: (column, backend, options)
ENGINES = (
    ("ORT def", "onnxruntime", {}),
    ("ORT 1t", "onnxruntime", {"intra_op_threads": "1"}),
    ("OV def", "openvino", {}),
    ("OV 1t", "openvino", {"threads": "1"}),
)


def corpus_main(openvino: bool) -> int:
    """The corpus table and its target figures; returns the number of targets missed."""
    import tempfile
    import warnings

    from _real_exports import corpus

    from pytest_roofline.backends.base import get_backend
    from pytest_roofline.errors import ModelUnsupported, RooflineError
    from pytest_roofline.profile.sanity import layers_above_roof, unresolved_layers
    from pytest_roofline.roofline.calibrate import calibrate

    folder = Path(tempfile.mkdtemp(prefix="roofline-corpus-"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        entries = corpus(folder)
    columns = [(c, b, o) for c, b, o in ENGINES if openvino or b != "openvino"]
    engines = {column: get_backend(backend, options) for column, backend, options in columns}
    roofs = {}
    for column, engine in engines.items():
        roof = calibrate(engine)
        roofs[column] = roof
        floor = f"{roof.dispatch_floor * 1e6:.2f} us" if roof.dispatch_floor else "none"
        levels = ", ".join(
            f"{lvl.name} {lvl.bandwidth / 1e9:.0f} GB/s" for lvl in roof.cache_levels if lvl.name != "DRAM"
        )
        print(
            f"roofline {column}: float32 {roof.peak_flops.get('float32', 0) / 1e9:.0f} GFLOP/s, "
            f"{levels or 'DRAM'}, DRAM {roof.peak_bandwidth / 1e9:.1f} GB/s, floor {floor}"
            f"{'; ' + '; '.join(roof.warnings) if roof.warnings else ''}"
        )
    print(f"real-exports corpus: {len(entries)} models by {len({tool for _, tool, _, _ in entries})} tools")
    print(f"{'model':<20}{'made by':<38}{'analyze':>8}" + "".join(f"{c:>9}" for c in engines) + "  max frac")
    notes: list[str] = []
    ran = {column: 0 for column in engines}
    skipped: dict[str, list[str]] = {column: [] for column in engines}
    counts = {"analyze": 0, "valid": 0, "profiles": 0, "above": 0, "unresolved": 0, "failed": 0}
    worst_seen: tuple[float, str] = (0.0, "-")
    for name, tool, model, call in entries:
        cells: dict[str, str] = {}
        try:
            analyze(model, **_analysis_call(model, call))
            cells["analyze"], counts["analyze"] = "ok", counts["analyze"] + 1
        except RooflineError as exc:
            cells["analyze"] = "FAIL"
            notes.append(f"{name} analyze: {exc}")
        worst = 0.0
        for column, engine in engines.items():
            try:
                prof = _corpus_profile(model, engine, roofs[column], call)
            except ModelUnsupported as exc:
                cells[column] = "skip"
                skipped[column].append(f"{name}: {exc}")
                continue
            except RooflineError as exc:
                cells[column] = "FAIL"
                counts["failed"] += 1
                notes.append(f"{name} {column}: {exc}")
                continue
            ran[column] += 1
            counts["profiles"] += 1
            check = prof.roofline_check
            counts["valid"] += int(check.valid)
            cells[column] = "valid" if check.valid else check.status
            if not check.valid:
                notes.append(f"{name} {column}: {check.message()}")
            for layer in prof.layers:
                fraction = layer.roofline_fraction
                if not isinstance(fraction, float) or math.isnan(fraction) or layer.kind == "folded":
                    continue
                worst = max(worst, fraction)
                if fraction > worst_seen[0]:
                    worst_seen = (fraction, f"{name} {column} {layer.name!r}")
            # above its roof on its timer's interval (profile.sanity), as the guard judges; a
            # layer above 100 % only on the point is too short for its timer to tell: counted apart
            for layer in layers_above_roof(prof):
                counts["above"] += 1
                notes.append(f"{name} {column}: {_layer_line(layer, roofs[column])}")
            for layer in unresolved_layers(prof):
                counts["unresolved"] += 1
                notes.append(f"{name} {column} (within one timer step): {_layer_line(layer, roofs[column])}")
        print(
            f"{name[:19]:<20}{tool[:37]:<38}{cells['analyze']:>8}"
            + "".join(f"{cells[c]:>9}" for c in engines)
            + f"  {worst:.1%}",
            flush=True,
        )
    for line in notes:
        print(f"  {line}")
    total = len(entries)
    rows = [
        ("analyze", f"{counts['analyze']}/{total}", counts["analyze"] == total),
        *[
            (f"profile, {_column_name(c)}", f"{ran[c]}/{total}", ran[c] == total)
            for c in engines
            if not c.startswith("OV")
        ],
        *[
            (
                f"profile, {_column_name(c)}",
                f"{ran[c]} ran, {len(skipped[c])} skipped in one line",
                ran[c] + len(skipped[c]) == total,
            )
            for c in engines
            if c.startswith("OV")
        ],
        (
            "roofline_check valid",
            f"{counts['valid']}/{counts['profiles']} profiles",
            counts["valid"] == counts["profiles"],
        ),
        (
            "layers above 100 % of their roof (timer interval)",
            f"{counts['above']}; {counts['unresolved']} more above only on the point "
            f"(highest {worst_seen[0]:.1%}: {worst_seen[1]})",
            counts["above"] == 0,
        ),
    ]
    for column in engines:
        for line in skipped[column]:
            print(f"  {column} skipped {line}")
    return _print_targets("corpus targets", rows)


def _corpus_profile(model: Any, engine: Any, roofline: Any, call: dict[str, Any]) -> Any:
    from pytest_roofline.api import profile_model

    return profile_model(model, backend=engine, roofline=roofline, **CORPUS_FAST, **call)


def _column_name(column: str) -> str:
    backend = "onnxruntime" if column.startswith("ORT") else "OpenVINO"
    return f"{backend} {'one thread' if column.endswith('1t') else 'default threads'}"


def _layer_line(layer: Any, roofline: Any) -> str:
    """A layer above its roof, with what judges it: cost, time, bound, the roof it is held to."""
    roof = f"{layer.memory_level} {layer.memory_bandwidth / 1e9:.1f} GB/s" if layer.memory_bandwidth else "-"
    return (
        f"layer {layer.name!r} ({layer.op_type}, {layer.kind}) at {layer.roofline_fraction:.1%}: "
        f"{layer.time * 1e6:.1f} us, {layer.flops} FLOPs, {layer.bytes} B, bound {layer.bound}, "
        f"memory roof {roof}, floor {roofline.dispatch_floor * 1e6:.2f} us"
    )


def _print_targets(title: str, rows: list[tuple[str, str, bool]]) -> int:
    """The issue's target figures, one a line; returns how many were missed."""
    print(f"\n{title}:")
    for label, figure, met in rows:
        print(f"  {label:<44}{figure:<60} {'met' if met else 'MISSED'}")
    return sum(not met for _, _, met in rows)


def _analysis_call(model: Any, call: dict[str, Any]) -> dict[str, Any]:
    """``analyze`` keywords for what a user passes ``profile_model`` (inputs bind shapes and values)."""
    from pytest_roofline.model import load_model, with_shapes
    from pytest_roofline.model.inputs import dims_from_inputs

    if "inputs" in call:
        batch, dims = dims_from_inputs(load_model(model), call["inputs"])
        return {"batch": batch, "dims": dims, "input_values": call["inputs"]}
    return {"batch": 1, "dims": with_shapes(None, call.get("shapes"))}


#: the paired measurement of a change with a prediction: batches of 6 session pairs x 20 rounds
#: until the 95 % interval is within +-1.5 % (the 3-point rule needs it) or 60 pairs ran; a change
#: with no prediction is measured in one batch (there is nothing to hold it against)
PAIRED = {"sessions": 6, "rounds": 20, "precision": 0.015, "max_sessions": 60}


def prediction_pairs(folder: Path) -> int:
    """The "why" line of each precision or rewrite pair against its paired measurement; returns
    the number of lines off target."""
    import onnx
    from _real_exports import (
        float16_converted,
        foldable_shape_graph,
        ort_optimized,
        quantized_dynamic,
        quantized_qdq,
        slimmed,
        torch_like_mlp,
    )

    from pytest_roofline import zoo
    from pytest_roofline.api import profile_model
    from pytest_roofline.backends.base import get_backend
    from pytest_roofline.diff import diff_summaries, explain_verdict, predict, summarize
    from pytest_roofline.gate.paired import measure_change
    from pytest_roofline.roofline.calibrate import calibrate

    engine = get_backend("onnxruntime", {"intra_op_threads": "1"})
    roofline = calibrate(engine)
    base, shapes = torch_like_mlp(width=1024, depth=4), foldable_shape_graph(width=1024)
    cnn = zoo.mobilenet_v2(batch=1)  # the base only: each variant is the tool's output
    pairs = {
        "CNN int8 dyn": (cnn, quantized_dynamic(cnn, folder)),
        "CNN float16": (cnn, float16_converted(cnn)),
        "CNN ORT opt": (cnn, ort_optimized(cnn, folder)),
        "CNN onnxslim": (cnn, slimmed(cnn)),
        "int8 dynamic": (base, quantized_dynamic(base, folder)),
        "int8 QDQ": (base, quantized_qdq(base, folder, width=1024)),
        "float16": (base, float16_converted(base)),
        "ORT optimised": (base, ort_optimized(base, folder)),
        "onnxslim": (shapes, slimmed(shapes)),
    }
    print(
        "\nprecision and rewrite predictions (onnxruntime, 1 thread, batch 1). Measured: paired, "
        f"interleaved, batches of {PAIRED['sessions']} fresh session pairs x {PAIRED['rounds']} rounds "
        f"until the 95 % interval is within +-{PAIRED['precision']:.1%} or {PAIRED['max_sessions']} pairs "
        "ran (one batch where there is no prediction)"
    )
    rows: list[tuple[str, float | None, Any, bool]] = []
    unjudged: set[str] = set()  # "not measurable here": the measured interval is wider than the band
    for label, (old, new) in pairs.items():
        old_path = folder / f"{label.replace(' ', '_')}_old.onnx"
        new_path = folder / f"{label.replace(' ', '_')}_new.onnx"
        onnx.save(old, str(old_path))
        onnx.save(new, str(new_path))
        baseline = profile_model(str(old_path), backend=engine, roofline=roofline, **CORPUS_FAST)
        diff = diff_summaries(summarize(str(old_path), batch=1), summarize(str(new_path), batch=1))
        prediction = predict(diff, roofline, baseline)
        design = PAIRED if prediction.available else {**PAIRED, "precision": None}
        verdict = measure_change(str(old_path), str(new_path), engine, batch=1, **design)
        why = explain_verdict(diff, prediction, ratio=verdict.ratio, ci=verdict.ci, status=verdict.status)
        predicted = prediction.fraction if prediction.available else None
        if why.agreement == "unmeasurable":  # the interval cannot judge it: the line says so
            unjudged.add(label)
        ok = _within_target(predicted, verdict.ratio - 1 if verdict.ratio is not None else None)
        rows.append((label, predicted, verdict, ok or label in unjudged))
        print(f"  {label:<14} {why.text}", flush=True)
    print(f"\n  {'change':<15}{'predicted':>11}   {'measured [95 % CI]':<32}{'pairs':>6}  within target")
    for label, predicted, verdict, ok in rows:
        low, high = verdict.ci
        shown = f"{predicted:+.1%}" if predicted is not None else "none"
        measured = f"{verdict.ratio - 1:+.1%} [{low - 1:+.1%} .. {high - 1:+.1%}]"
        judged = "not measurable here" if label in unjudged else ("yes" if ok else "NO")
        print(f"  {label:<15}{shown:>11}   {measured:<32}{verdict.sessions:>6}  {judged}")
    scored = [(_miss_score(p, v.ratio - 1), label) for label, p, v, _ in rows if p is not None]
    scored = [(score, label) for score, label in scored if label not in unjudged]
    worst = max(scored) if scored else (0.0, "-")
    predicted_rows = [row for row in rows if row[1] is not None and row[0] not in unjudged]
    return _print_targets(
        "prediction targets",
        [
            (
                '"why" lines within x2 (3 points under 5 %)',
                f"{sum(ok for *_, ok in predicted_rows)}/{len(predicted_rows)} with a number, "
                f"{len(unjudged)} not measurable here, "
                f"{len(rows) - len(predicted_rows) - len(unjudged)} no prediction; worst {worst[1]} "
                f"({worst[0]:.2f} of its allowance)",
                all(ok for *_, ok in rows),
            )
        ],
    )


def _miss_score(predicted: float, measured: float) -> float:
    """How much of its allowance a prediction uses: 1 is at the edge (3 points, or x2)."""
    if abs(measured) < 0.05:
        return abs(predicted - measured) / 0.03
    if predicted * measured <= 0:
        return math.inf
    return math.log(max(predicted / measured, measured / predicted)) / math.log(2.0)


def _within_target(predicted: float | None, measured: float | None) -> bool:
    """No prediction, or within x2 of the measured change (3 points when it is under 5 %)."""
    if predicted is None:
        return True
    if measured is None:
        return False
    if abs(measured) < 0.05:
        return abs(predicted - measured) <= 0.03
    return predicted * measured > 0 and 0.5 <= predicted / measured <= 2.0


if __name__ == "__main__":
    raise SystemExit(main())
