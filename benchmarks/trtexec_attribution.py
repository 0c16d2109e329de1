"""Attribution of real TensorRT exports (A100, fp16, ResNet-18 at batch 32) to the ONNX graph.

Reads tests/data/trtexec (the recorded --exportProfile / --exportLayerInfo / --exportTimes of a
TensorRT 8.x engine, see its README) through the trtexec backend's import mode and prints:
- attributed_fraction (share of layer time mapped to ONNX nodes or layout; target >= 0.95);
- ONNX nodes named by layer names / attributed in all (target >= 47 of 49: Flatten_47 has no
  layer of its own) and the nodes left folded;
- the engine's precision and the model's bytes counted at fp32 vs at the precision that ran;
- the latency statistics of the recorded --exportTimes.

Usage: ``python benchmarks/trtexec_attribution.py``
"""

from __future__ import annotations

import gzip
import statistics
import sys
import tempfile
from pathlib import Path

import onnx

from pytest_roofline.analysis import analyze
from pytest_roofline.backends.attribution import GraphIndex, attributed_fraction, group_cost_at_precision
from pytest_roofline.backends.base import get_backend
from pytest_roofline.model import ModelSpec, bind_input_shapes, make_inputs
from pytest_roofline.profile import build_layers

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "trtexec"
BATCH = 32


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "resnet18.onnx"
        path.write_bytes(gzip.decompress((DATA / "resnet18.onnx.gz").read_bytes()))
        model = onnx.load(path)
        backend = get_backend(
            "trtexec",
            {
                "profile": str(DATA / "resnet.onnx.engine.profile.json"),
                "layer_info": str(DATA / "resnet.onnx.engine.graph.json"),
                "times": str(DATA / "resnet.onnx.engine.timing.first20.json"),
            },
        )
        inputs = make_inputs(model, bind_input_shapes(model, BATCH))
        with backend.open(ModelSpec.create(path, BATCH), inputs) as session:
            kernels = session.profile(1)
            samples = session.time(0)
        index = GraphIndex.from_model(model)
        by_name = {n for k in kernels.kernels for n in index.resolve_all(k.name.split(" + "))}
        attributed = {n for k in kernels.kernels for n in k.onnx_nodes}
        print(
            f"layers {len(kernels.kernels)} (layout {sum(k.kind == 'layout' for k in kernels.kernels)})"
            f"  attributed_fraction {attributed_fraction(kernels, index.order):.4f}"
        )
        print(
            f"ONNX nodes named by layer names {len(by_name)}/{len(index.order)}"
            f"  attributed (names + tensor boundaries) {len(attributed)}/{len(index.order)}"
            f"  not named: {sorted(set(index.order) - by_name)}  folded: {list(kernels.folded)}"
        )
        analysis = analyze(model, batch=BATCH)
        layers, fraction = build_layers(analysis, kernels)
        groups = [la.onnx_nodes for la in layers if la.kind == "compute"]
        fp32 = sum(analysis.group(g).bytes for g in groups)
        run = sum(group_cost_at_precision(analysis, g, kernels.precision).bytes for g in groups)
        print(
            f"build_layers attributed_fraction {fraction:.4f}  engine precision {kernels.precision}"
            f"  layer bytes at fp32 {fp32 / 1e6:.1f} MB, at {kernels.precision} {run / 1e6:.1f} MB"
        )
        median = statistics.median(samples)
        print(
            f"recorded GPU compute per batch-{BATCH} inference: median {median * 1e3:.4f} ms"
            f"  min {min(samples) * 1e3:.4f} ms  over {len(samples)} records;"
            f"  sum of layer medians {sum(k.times[0] for k in kernels.kernels) * 1e3:.4f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
