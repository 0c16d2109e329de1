"""How well are OpenVINO CPU primitives attributed to ONNX nodes on zoo models?

For each model (tiny_cnn, tiny_transformer, resnet50, mobilenet_v2, bert_base, vit_b16) profiles
a few inferences with OpenVINO (precision f32 and the device default) and prints:
- attributed_fraction from ``build_layers`` (share of primitive time mapped to ONNX nodes or
  layout work; target >= 0.95);
- compute layers naming >= 1 ONNX node / all compute layers, unattributed primitives by name;
- sum of the layers' FLOPs vs the analyzer's total, FLOPs of nodes reported folded, precision.

Usage: ``python benchmarks/openvino_attribution.py [--models tiny_cnn,bert_base] [--iterations 5]``
"""

from __future__ import annotations

import argparse
import sys
import time

from pytest_roofline.analysis import analyze
from pytest_roofline.backends.base import get_backend
from pytest_roofline.model import ModelSpec, bind_input_shapes, make_inputs
from pytest_roofline.profile import build_layers

MODELS = {  # builder name -> named dims to bind (batch is 1)
    "tiny_cnn": {}, "tiny_transformer": {"seq": 16}, "resnet50": {}, "mobilenet_v2": {},
    "bert_base": {}, "vit_b16": {},
}


def measure(name: str, precision: str | None, iterations: int) -> str:
    from pytest_roofline import zoo

    model = getattr(zoo, name)()
    batch, dims = 1, MODELS[name]
    shapes = bind_input_shapes(model, batch, dims)
    start = time.perf_counter()
    options = {"precision": precision} if precision else {}
    backend = get_backend("openvino", options)
    with backend.open(ModelSpec.create(model, batch, dims), make_inputs(model, shapes)) as session:
        kernels = session.profile(iterations)
    analysis = analyze(model, batch=batch, dims=dims)
    layers, fraction = build_layers(analysis, kernels)
    compute = [la for la in layers if la.kind == "compute"]
    named = sum(1 for la in compute if la.onnx_nodes)
    unattributed = [la.name for la in layers if la.kind == "unattributed"]
    total = analysis.total.flops
    summed = sum(la.flops for la in compute)
    known = {node.name for node in analysis.nodes}
    folded_flops = sum(analysis.node(n).flops for n in kernels.folded if n in known)
    return (
        f"{name:<16} {precision or 'default':<7} attributed_fraction {fraction:.4f}"
        f"  layers with ONNX nodes {named}/{len(compute)}"
        f"  FLOPs layers/total {summed / total if total else 0:.4f}"
        f"  folded {len(kernels.folded)} ({folded_flops / 1e6:.2f} MFLOP)  precision {kernels.precision}"
        f"  unattributed {len(unattributed)} {unattributed[:3]}  [{time.perf_counter() - start:.1f} s]"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--precisions", default="f32,default")
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args(argv)
    for name in args.models.split(","):
        for precision in args.precisions.split(","):
            print(measure(name, None if precision == "default" else precision, args.iterations), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
