"""How well are onnxruntime kernels attributed to ONNX nodes on real-size models?

For each zoo model present (resnet50, mobilenet_v2, bert_base, vit_b16) at graph optimization
levels basic and all, profiles a few inferences and prints:
- attributed_fraction (share of kernel time mapped to ONNX nodes or layout work; target >= 0.99);
- compute layers naming >= 1 ONNX node / all compute layers (target: all);
- sum of the layers' FLOPs vs the analyzer's model total (target: within 1 %), and the FLOPs of
  nodes folded at load time (shape subgraphs, Identity: ~0);
- kernels, layout kernels, folded nodes, unattributed kernels.

Usage: ``python benchmarks/ort_attribution.py [--models resnet50,bert_base] [--levels basic,all]``
"""

from __future__ import annotations

import argparse
import sys

from _common import profile_attribution

MODELS = {  # builder name -> (batch, dims)
    "resnet50": (1, {}),
    "mobilenet_v2": (1, {}),
    "bert_base": (1, {}),  # seq 128 is static in the builder
    "vit_b16": (1, {}),
}


def measure(name: str, level: str, iterations: int) -> str:
    batch, dims = MODELS[name]
    options = {"graph_optimization_level": level}
    run = profile_attribution(name, "onnxruntime", options, batch, dims, iterations)
    total, summed, kernels = run.total_flops, run.summed_flops, run.kernels
    return (
        f"{name:<13} {level:<6} attributed_fraction {run.fraction:.4f}"
        f"  layers with ONNX nodes {run.named}/{len(run.compute)}"
        f"  FLOPs layers/total {summed / total if total else 0:.5f} ({summed / 1e9:.3f}/{total / 1e9:.3f} G)"
        f"  folded {len(kernels.folded)} nodes ({run.folded_flops} FLOPs)  kernels {len(kernels.kernels)}"
        f"  layout {len(run.kind('layout'))}  unattributed {len(run.kind('unattributed'))}"
        f"  [{run.seconds:.1f} s]"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--levels", default="basic,all")
    parser.add_argument("--iterations", type=int, default=3)
    args = parser.parse_args()
    try:
        from pytest_roofline import zoo
    except ImportError:
        print("pytest_roofline.zoo is not installed; nothing to measure")
        return 1
    for name in args.models.split(","):
        if not hasattr(zoo, name):
            print(f"{name}: not in this zoo, skipped")
            continue
        for level in args.levels.split(","):
            print(measure(name, level, args.iterations), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
