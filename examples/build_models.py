"""Build the example suite's models: a small CNN and a small transformer, as ONNX files.

    python examples/build_models.py              # writes examples/models/{edgenet,encoder}.onnx
    python examples/build_models.py --regress    # an EdgeNet with one extra stage: ~8-10 % slower

The CNN mimics a mobile classifier (inverted residual blocks on 160x160 images); the transformer a
4-layer BERT-style encoder exported by PyTorch's legacy exporter (symbolic batch and seq dims).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import onnx

from pytest_roofline.zoo import GraphBuilder, tiny_transformer
from pytest_roofline.zoo.layers import classifier_head, conv, inverted_residuals

HERE = Path(__file__).resolve().parent
MODELS = HERE / "models"

# (expand ratio, output channels, repeats, stride) per stage, MobileNetV2-like but smaller.
STAGES = ((1, 16, 1, 1), (4, 24, 2, 2), (4, 32, 2, 2), (4, 64, 3, 2), (4, 96, 2, 1))
EXTRA_STAGE = (4, 96, 2, 1)


def edgenet(regress: bool = False) -> onnx.ModelProto:
    """A small inverted-residual CNN with a symbolic batch dim ``N``; ``regress`` adds a stage."""
    b = GraphBuilder("edgenet", weights="random")
    x = b.input("image", ["N", 3, 160, 160])
    x = conv(b, x, 3, 16, 3, stride=2, act="relu6")
    stages = STAGES + ((EXTRA_STAGE,) if regress else ())
    x, cin = inverted_residuals(b, x, 16, stages)
    x = conv(b, x, cin, 320, 1, act="relu6")
    classifier_head(b, x, 320, 10, None, output="logits")
    return b.build()


def encoder() -> onnx.ModelProto:
    """A 4-layer, 256-wide BERT-style encoder; bind ``batch`` and ``seq`` (seq <= 128)."""
    return tiny_transformer(seq=128, hidden=256, heads=4, layers=4)


def build(regress: bool = False, out: Path = MODELS) -> list[Path]:
    """Write the models; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, model in (("edgenet", edgenet(regress)), ("encoder", encoder())):
        path = out / f"{name}.onnx"
        onnx.save(model, str(path))
        written.append(path)
    return written


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regress", action="store_true", help="add a stage to EdgeNet (a known slowdown)")
    parser.add_argument("--out", type=Path, default=MODELS, help="output folder (default examples/models)")
    args = parser.parse_args()
    for path in build(args.regress, args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
