"""Export the model pairs of ``benchmarks/diff_quality.py`` with PyTorch (run in a torch venv).

Two small networks, a residual CNN and a transformer encoder, each exported as a base, the
same base again (a second, separate export), and three variants: one block added, one layer
widened, one block computed in float16.  Every file is its own export (fresh model, fresh
trace), with both exporters (legacy TorchScript ``dynamo=False`` and ``dynamo=True``), so names
shift between files as they do in practice.  ``manifest.json`` lists the files and the blocks a
diff against the base must name.

Needs torch, onnx, onnxscript and numpy::

    /work/venv-torch-b/bin/python benchmarks/diff_exports.py --out /tmp/roofline-diff
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path
from typing import Any

OPSET = 18
EXPORTERS = ("legacy", "dynamo")
#: variant -> the (kind, block) a diff against the base must report, per family
EXPECTED = {
    "cnn": {
        "again": [],
        "added": [["added", "layer2.2"]],
        "widened": [["changed", "layer3.0"]],
        "fp16": [["changed", "layer1.1"]],
    },
    "transformer": {
        "again": [],
        "added": [["added", "layers.4"]],
        "widened": [["changed", "layers.1.ffn"]],
        "fp16": [["changed", "layers.2.ffn"]],
    },
}


def cnn(variant: str) -> tuple[Any, Any]:
    """A residual CNN on 1x3x64x64: stem, three stages of two blocks (32, 64, 128 channels), head."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, channels: int, width: int | None = None) -> None:
            super().__init__()
            width = width or channels
            self.conv1 = nn.Conv2d(channels, width, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, channels, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(channels)

        def forward(self, x: Any) -> Any:
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(x + self.bn2(self.conv2(y)))

    class Half(nn.Module):
        """A block computed in float16 between casts."""

        def __init__(self, block: nn.Module) -> None:
            super().__init__()
            self.block = block.half()

        def forward(self, x: Any) -> Any:
            return self.block(x.half()).float()

    def stage(channels: int, count: int, widen: bool = False, half: bool = False) -> nn.Sequential:
        blocks: list[nn.Module] = [
            Block(channels, channels * 3 // 2 if widen and i == 0 else None) for i in range(count)
        ]
        if half:
            blocks[1] = Half(blocks[1])
        return nn.Sequential(*blocks)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU())
            self.layer1 = stage(32, 2, half=variant == "fp16")
            self.down1 = nn.Sequential(nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU())
            self.layer2 = stage(64, 3 if variant == "added" else 2)
            self.down2 = nn.Sequential(nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.ReLU())
            self.layer3 = stage(128, 2, widen=variant == "widened")
            self.fc = nn.Linear(128, 10)

        def forward(self, x: Any) -> Any:
            x = self.layer3(self.down2(self.layer2(self.down1(self.layer1(self.stem(x))))))
            return self.fc(x.mean((2, 3)))

    return Net(), torch.randn(1, 3, 64, 64)


def transformer(variant: str) -> tuple[Any, Any]:
    """A 4-layer post-norm encoder on 1x128x256 features: 4 heads, FFN 1024."""
    import math

    import torch
    from torch import nn

    hidden, heads, seq = 256, 4, 128

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
            self.out = nn.Linear(hidden, hidden)

        def forward(self, x: Any) -> Any:
            b, s, _ = x.shape
            split = lambda t: t.view(b, s, heads, hidden // heads).transpose(1, 2)  # noqa: E731
            q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
            scores = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hidden // heads), dim=-1)
            return self.out((scores @ v).transpose(1, 2).reshape(b, s, hidden))

    class Ffn(nn.Module):
        def __init__(self, width: int, half: bool = False) -> None:
            super().__init__()
            self.fc1 = nn.Linear(hidden, width)
            self.fc2 = nn.Linear(width, hidden)
            self.half_precision = half
            if half:
                self.fc1.half()
                self.fc2.half()

        def forward(self, x: Any) -> Any:
            if self.half_precision:
                return self.fc2(torch.nn.functional.gelu(self.fc1(x.half()))).float()
            return self.fc2(torch.nn.functional.gelu(self.fc1(x)))

    class Layer(nn.Module):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.attn = Attention()
            self.norm1 = nn.LayerNorm(hidden)
            self.ffn = Ffn(
                1536 if variant == "widened" and index == 1 else 1024, variant == "fp16" and index == 2
            )
            self.norm2 = nn.LayerNorm(hidden)

        def forward(self, x: Any) -> Any:
            x = self.norm1(x + self.attn(x))
            return self.norm2(x + self.ffn(x))

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.Sequential(*[Layer(i) for i in range(5 if variant == "added" else 4)])

        def forward(self, x: Any) -> Any:
            return self.layers(x)

    return Encoder(), torch.randn(1, seq, hidden)


def export(family: str, variant: str, exporter: str, out: Path) -> Path:
    """Build a fresh model and export it; returns the file."""
    import torch

    torch.manual_seed(0)
    model, example = (cnn if family == "cnn" else transformer)(variant)
    model = model.eval()
    path = out / f"{family}_{variant}_{exporter}.onnx"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "legacy":
            torch.onnx.export(
                model,
                (example,),
                str(path),
                opset_version=OPSET,
                dynamo=False,
                input_names=["input"],
                output_names=["output"],
            )
        else:
            program = torch.onnx.export(
                model,
                (example,),
                opset_version=OPSET,
                dynamo=True,
                input_names=["input"],
                output_names=["output"],
                verbose=False,
            )
            program.save(str(path), external_data=False)
    return path


def main() -> int:
    """Export every family x variant x exporter; write the manifest."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/roofline-diff", help="output folder")
    parser.add_argument("--exporters", default=",".join(EXPORTERS), help="legacy,dynamo")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"opset": OPSET, "pairs": []}
    failed = []
    for exporter in args.exporters.split(","):
        for family, variants in EXPECTED.items():
            try:
                base = export(family, "base", exporter, out)
            except Exception as exc:  # noqa: BLE001 - report every export, keep going
                failed.append(f"{family} base {exporter}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            for variant, expected in variants.items():
                try:
                    path = export(family, variant, exporter, out)
                except Exception as exc:  # noqa: BLE001
                    failed.append(f"{family} {variant} {exporter}: {type(exc).__name__}: {str(exc)[:200]}")
                    continue
                manifest["pairs"].append(
                    {
                        "family": family,
                        "variant": variant,
                        "exporter": exporter,
                        "old": str(base),
                        "new": str(path),
                        "expected": expected,
                    }
                )
    manifest["failed"] = failed
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(json.dumps({"pairs": len(manifest["pairs"]), "failed": failed}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
