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

from _common import profile_attribution

MODELS = {  # builder name -> named dims to bind (batch is 1)
    "tiny_cnn": {},
    "tiny_transformer": {"seq": 16},
    "resnet50": {},
    "mobilenet_v2": {},
    "bert_base": {},
    "vit_b16": {},
}


def measure(name: str, precision: str | None, iterations: int) -> str:
    options = {"precision": precision} if precision else {}
    run = profile_attribution(name, "openvino", options, 1, MODELS[name], iterations)
    total, summed, unattributed = run.total_flops, run.summed_flops, run.kind("unattributed")
    return (
        f"{name:<16} {precision or 'default':<7} attributed_fraction {run.fraction:.4f}"
        f"  layers with ONNX nodes {run.named}/{len(run.compute)}"
        f"  FLOPs layers/total {summed / total if total else 0:.4f}"
        f"  folded {len(run.kernels.folded)} ({run.folded_flops / 1e6:.2f} MFLOP)"
        f"  precision {run.kernels.precision}"
        f"  unattributed {len(unattributed)} {unattributed[:3]}  [{run.seconds:.1f} s]"
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
