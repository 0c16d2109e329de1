"""Analyzer MACs vs published figures and vs an independent onnxruntime-shape count.

Run: ``python benchmarks/analysis_accuracy.py [--skip-reference-transformers]``.
Published figures are torchvision's ``_ops`` (conv + linear GMACs, attention matmuls included
for ViT) and 11.17 GMACs for BERT-base at seq 128 (all MatMul/Gemm).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from reference_macs import reference_macs  # noqa: E402

from pytest_roofline import zoo  # noqa: E402
from pytest_roofline.analysis import analyze, published_macs  # noqa: E402
from pytest_roofline.model import bind_input_shapes, make_inputs  # noqa: E402

MODELS = {
    "resnet50": (zoo.resnet50, {"batch": 1}, True),
    "mobilenet_v2": (zoo.mobilenet_v2, {"batch": 1}, True),
    "vit_b16": (zoo.vit_b16, {"batch": 1}, False),
    "bert_base": (zoo.bert_base, {"batch": 1}, False),
}


def main() -> int:
    """Print one row per model; exit 1 when a relative error exceeds 0.1 %."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--skip-reference-transformers", action="store_true", help="run the reference on CNNs only"
    )
    args = parser.parse_args()
    header = f"{'model':<14}{'published':>10}{'analyzer':>10}{'rel.err':>10}{'reference':>11}{'ref.err':>10}"
    header += "  shape_method   analyze_s"
    print("GMACs of Conv + Gemm + MatMul nodes at batch 1 (1 MAC = 2 FLOPs)")
    print(header)
    worst = 0.0
    for name, (builder, kwargs, is_cnn) in MODELS.items():
        model = builder()
        start = time.perf_counter()
        result = analyze(model, **kwargs)
        elapsed = time.perf_counter() - start
        ours = published_macs(result) / 1e9
        published = zoo.PUBLISHED_GMACS[name]
        err = abs(ours - published) / published
        ref_text, ref_err_text = "-", "-"
        if is_cnn or not args.skip_reference_transformers:
            feeds = make_inputs(model, bind_input_shapes(model, kwargs["batch"]))
            reference = sum(reference_macs(model, feeds).values()) / 1e9
            ref_err = abs(ours - reference) / reference
            ref_text, ref_err_text = f"{reference:.4f}", f"{100 * ref_err:.4f}%"
            worst = max(worst, ref_err)
        worst = max(worst, err)
        print(
            f"{name:<14}{published:>10.3f}{ours:>10.4f}{100 * err:>9.3f}%{ref_text:>11}{ref_err_text:>10}"
            f"  {result.shape_method:<13}  {elapsed:.3f}"
        )
        del model
    print(f"worst relative error: {100 * worst:.3f}%")
    return 0 if worst <= 1e-3 else 1


if __name__ == "__main__":
    raise SystemExit(main())
