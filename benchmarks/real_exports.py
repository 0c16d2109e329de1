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
"""

from __future__ import annotations

import argparse
import json
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
    args = parser.parse_args()
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


if __name__ == "__main__":
    raise SystemExit(main())
