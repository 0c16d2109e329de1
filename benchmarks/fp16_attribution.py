"""Attribution of onnxruntime's precision substitutions on fp16 models (issue 13, item 5).

onnxruntime's CPU provider runs most fp16 ops in fp32: it inserts Casts, renames the widened
tensors, names NCHWc convolutions after them, reorders, and inlines a fp16 Softmax from its
function body. For the fp16 zoo models (``pytest_roofline.zoo.precision``) and, when a folder of
torch exports is given, ``convnext_fp16`` and ``llama_fp16`` from both exporters, at each graph
optimization level it prints:

- attributed_fraction (target >= 0.99);
- FLOPs of all layers (compute and folded) / the analyzer's total (target 1.00000: each node's
  FLOPs counted once, none lost) and the compute layers' share alone;
- unattributed kernels (target 0);
- what the substitutions cost: precision Casts (count, share of kernel time), kernels ORT ran in
  fp32, helper kernels (inlined Softmax bodies, Gemm reshapes), layout kernels.

Make the exports first, in an environment with torch (``/work/venv-torch-a`` here)::

    python benchmarks/export_issue13_models.py --out /tmp/roofline-issue13 --models convnext_fp16,llama_fp16

then::

    python benchmarks/fp16_attribution.py [--exports /tmp/roofline-issue13] [--levels basic,all]

Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import onnx
from _common import Attribution, profile_attribution

from pytest_roofline.zoo.precision import convnext_fp16, llama_fp16

EXPORTS = ("convnext_fp16_legacy", "convnext_fp16_dynamo", "llama_fp16_legacy", "llama_fp16_dynamo")


def models(folder: str | None) -> dict[str, onnx.ModelProto]:
    """The zoo's fp16 models, and the torch exports found in ``folder``."""
    found = {"zoo convnext_fp16": convnext_fp16(), "zoo llama_fp16": llama_fp16()}
    if folder:
        for name in EXPORTS:
            path = Path(folder) / f"{name}.onnx"
            if path.exists():
                found[name] = onnx.load(str(path))
            else:
                print(f"{path}: missing, skipped (run benchmarks/export_issue13_models.py)")
    return found


def row(name: str, level: str, run: Attribution) -> tuple[str, int]:
    """One printed line and the number of targets it misses."""
    extra = {k.name: k.extra for k in run.kernels.kernels}
    ran = [la for la in run.layers if la.kind == "compute"]
    total_time = sum(la.time for la in run.layers) or 1.0
    casts = [la for la in ran if extra[la.name].get("substitution") == "precision"]
    widened = [la for la in ran if extra[la.name].get("precision")]
    helpers = [  # every node shared: an inlined Softmax body, a Gemm reshape
        la for la in ran if la not in casts and set(la.onnx_nodes) <= set(extra[la.name].get("shared", ()))
    ]
    unattributed = run.kind("unattributed")
    ratio = run.layer_flops / run.total_flops if run.total_flops else 1.0
    compute_ratio = run.summed_flops / run.total_flops if run.total_flops else 1.0
    missed = int(run.fraction < 0.99) + int(run.layer_flops != run.total_flops) + int(bool(unattributed))
    line = (
        f"{name:<22}{level:<9}{run.fraction:>9.4f}{ratio:>10.5f}{compute_ratio:>10.5f}{len(unattributed):>7}"
        f"{len(casts):>7}{sum(la.time for la in casts) / total_time:>8.1%}{len(widened):>7}{len(helpers):>8}"
        f"{len(run.kind('layout')):>7}{len(run.layers):>8}  [{run.seconds:.1f} s]"
    )
    if unattributed:
        line += f"\n    unattributed: {', '.join(unattributed[:8])}"
    return line, missed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exports", default=None, help="folder of export_issue13_models.py's files")
    parser.add_argument("--levels", default="disable,basic,extended,all")
    parser.add_argument("--iterations", type=int, default=3)
    args = parser.parse_args()
    print(
        f"{'model':<22}{'level':<9}{'attrib.':>9}{'FLOPs':>10}{'compute':>10}{'unattr':>7}"
        f"{'casts':>7}{'time':>8}{'fp32':>7}{'helpers':>8}{'layout':>7}{'layers':>8}"
    )
    missed = 0
    for name, model in models(args.exports).items():
        for level in args.levels.split(","):
            options = {"graph_optimization_level": level, "intra_op_threads": "1"}
            run = profile_attribution(name, "onnxruntime", options, 1, {}, args.iterations, model=model)
            line, misses = row(name, level, run)
            missed += misses
            print(line, flush=True)
    print("FLOPs: all layers (compute + folded) / analyzer total; compute: compute layers alone")
    print(f"targets missed: {missed}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
