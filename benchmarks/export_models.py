"""Export real PyTorch models to ONNX with both exporters, for the analyzer and backend checks.

Exports torchvision ResNet-50, MobileNetV2 and ViT-B/16 at 224x224 and a HF ``BertModel``
(``BertConfig()``: bert-base) at seq 128, each with the legacy TorchScript exporter
(``dynamo=False``) and the dynamo exporter (``dynamo=True``), batch (and BERT's seq) dynamic.
Weights are random (no hub download). Files: ``<out>/<model>_<exporter>.onnx``.

Needs an environment with torch, torchvision, transformers, onnx and onnxscript::

    python benchmarks/export_models.py --out /tmp/roofline-exports [--models resnet50,bert_base]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

MODELS = ("resnet50", "mobilenet_v2", "vit_b_16", "bert_base")
EXPORTERS = ("legacy", "dynamo")
OPSET = 18  # the dynamo exporter's lowest; the legacy exporter supports it as well


def _import_torchvision() -> Any:
    """torchvision, whose C-op registration fails on some torch builds: skip the fake kernels."""
    import torch

    try:
        import torchvision
    except Exception:  # noqa: BLE001 - registration errors vary between versions
        for name in [m for m in sys.modules if m.startswith("torchvision")]:
            del sys.modules[name]
        torch.library.register_fake = lambda *a, **k: lambda f: f  # type: ignore[assignment]
        import torchvision
    return torchvision


def build(name: str) -> tuple[Any, tuple[Any, ...], list[str], dict[str, dict[int, str]]]:
    """Model in eval mode, example inputs, input names and dynamic axes (legacy-exporter form)."""
    import torch

    torch.manual_seed(0)
    if name == "bert_base":
        from transformers import BertConfig, BertModel

        model = BertModel(BertConfig()).eval()
        ids = torch.randint(0, 30522, (2, 128), dtype=torch.int64)
        mask = torch.ones(2, 128, dtype=torch.int64)
        axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
        return model, (ids, mask), ["input_ids", "attention_mask"], axes
    torchvision = _import_torchvision()
    model = getattr(torchvision.models, name)(weights=None).eval()
    return model, (torch.randn(2, 3, 224, 224),), ["input"], {"input": {0: "batch"}}


def _tuple_outputs(model: Any, name: str) -> Any:
    """BERT with plain-tensor outputs (the dynamo exporter prefers tuples to ModelOutput)."""
    import torch

    if name != "bert_base":
        return model

    class Bert(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask)
            return out.last_hidden_state, out.pooler_output

    return Bert(model).eval()


def export(name: str, exporter: str, out: Path, opset: int = OPSET, external_data: bool = False) -> Path:
    """Export one model with one exporter; returns the file written."""
    import torch

    model, args, names, axes = build(name)
    model = _tuple_outputs(model, name)
    path = out / f"{name}_{exporter}.onnx"
    outputs = ["last_hidden_state", "pooler_output"] if name == "bert_base" else ["logits"]
    # grad stays on: under no_grad, nn.MultiheadAttention takes a fused fast path that the
    # legacy exporter cannot export (aten::_native_multi_head_attention)
    if exporter == "legacy":
        out_axes = {"last_hidden_state": {0: "batch", 1: "seq"}, "pooler_output": {0: "batch"}}
        torch.onnx.export(
            model,
            args,
            str(path),
            input_names=names,
            output_names=outputs,
            opset_version=opset,
            dynamic_axes={**axes, **(out_axes if name == "bert_base" else {"logits": {0: "batch"}})},
            dynamo=False,
        )
    else:
        dim = torch.export.Dim
        batch = dim("batch", min=1, max=1024)
        axes_of: dict[int, Any] = {0: batch}
        if name == "bert_base":
            axes_of[1] = dim("seq", min=2, max=512)
        shapes = tuple(dict(axes_of) for _ in names)  # positional: forward's names differ
        program = torch.onnx.export(
            model,
            args,
            input_names=names,
            output_names=outputs,
            opset_version=opset,
            dynamic_shapes=shapes,
            dynamo=True,
        )
        program.save(str(path), external_data=external_data)
    return path


def main() -> int:
    """Export every requested model with every requested exporter."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/roofline-exports", help="output folder")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(MODELS)}")
    parser.add_argument("--exporters", default=",".join(EXPORTERS), help="legacy,dynamo")
    parser.add_argument(
        "--opset", type=int, default=OPSET, help=f"opset (default {OPSET}; 23 makes Attention ops)"
    )
    parser.add_argument(
        "--external-data", action="store_true", help="dynamo exports keep weights in a .data file"
    )
    args = parser.parse_args()
    missing = [m for m in ("torch", "onnx") if importlib.util.find_spec(m) is None]
    if missing:
        print(
            f"export_models.py needs {', '.join(missing)}: run it in an environment with torch, "
            "torchvision, transformers, onnx and onnxscript installed"
        )
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.models.split(","):
        for exporter in args.exporters.split(","):
            start = time.perf_counter()
            try:
                path = export(name, exporter, out, args.opset, args.external_data)
            except Exception as exc:  # noqa: BLE001 - report every export, keep going
                failed += 1
                print(f"{name:<13} {exporter:<7} FAILED: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                continue
            size = sum(p.stat().st_size for p in out.glob(f"{path.name}*")) / 1e6
            print(
                f"{name:<13} {exporter:<7} {path}  {size:.1f} MB  {time.perf_counter() - start:.1f} s",
                flush=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
