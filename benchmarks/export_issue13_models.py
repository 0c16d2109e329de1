"""Export the PyTorch models of issue 13: fp16 CNN and transformer, control flow, a KV-cache decoder.

Random weights, no downloads. Each model is exported with the exporters it supports:

- ``convnext_fp16``: ConvNeXt-like blocks (depthwise 7x7 conv, channels-last LayerNorm, 1x1
  convs as Linear, GELU, layer scale, residual), ``model.half()``; legacy and dynamo.
- ``llama_fp16``: Llama-like decoder (RMSNorm, rotary embedding, grouped-query attention with a
  causal mask and Softmax, SwiGLU MLP), ``model.half()``; legacy and dynamo.
- ``loop`` / ``loop_shape``: a ``torch.jit.script`` loop over ``range(steps.size(0))``: a Loop
  node whose trip count is a constant 5, or (``steps`` dynamic) computed from a shape; legacy.
- ``cond``: ``torch.cond`` on the data (an If node); dynamo.
- ``lstm``: ``nn.LSTM`` (fp32, to be quantized with onnxruntime's ``quantize_dynamic`` by the
  measuring script); legacy and dynamo.
- ``gpt2_past``: a GPT-2-like decoder step taking and returning past keys/values; legacy.

Files: ``<out>/<model>_<exporter>.onnx``. Needs an environment with torch, onnx and onnxscript::

    python benchmarks/export_issue13_models.py --out /tmp/roofline-issue13
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OPSET = 18
EXPORTERS = ("legacy", "dynamo")


def _torch() -> Any:
    import torch

    return torch


def convnext(dims: tuple[int, ...] = (64, 128, 256), depths: tuple[int, ...] = (1, 1, 2)) -> Any:
    """ConvNeXt-like: patchify stem, stages of blocks, downsampling between stages, a head."""
    torch = _torch()
    nn = torch.nn

    class LayerNorm2d(nn.LayerNorm):  # channels-first LayerNorm as ConvNeXt writes it
        def forward(self, x: Any) -> Any:
            return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    class Block(nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.pwconv1 = nn.Linear(dim, 4 * dim)
            self.act = nn.GELU()
            self.pwconv2 = nn.Linear(4 * dim, dim)
            self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

        def forward(self, x: Any) -> Any:
            y = self.dwconv(x).permute(0, 2, 3, 1)
            y = self.pwconv2(self.act(self.pwconv1(self.norm(y))))
            return x + (self.gamma * y).permute(0, 3, 1, 2)

    class ConvNeXt(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers: list[Any] = [nn.Conv2d(3, dims[0], 4, stride=4), LayerNorm2d(dims[0], eps=1e-6)]
            for stage, (dim, depth) in enumerate(zip(dims, depths, strict=True)):
                if stage:
                    layers += [LayerNorm2d(dims[stage - 1], eps=1e-6), nn.Conv2d(dims[stage - 1], dim, 2, 2)]
                layers += [Block(dim) for _ in range(depth)]
            self.features = nn.Sequential(*layers)
            self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
            self.head = nn.Linear(dims[-1], 100)

        def forward(self, x: Any) -> Any:
            return self.head(self.norm(self.features(x).mean(dim=(2, 3))))

    return ConvNeXt().eval()


def llama(hidden: int = 256, heads: int = 8, kv_heads: int = 2, layers: int = 2, vocab: int = 1000) -> Any:
    """Llama-like decoder over a prompt: RMSNorm, rotary, GQA attention with Softmax, SwiGLU."""
    torch = _torch()
    nn = torch.nn
    head_dim = hidden // heads

    class RMSNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden))

        def forward(self, x: Any) -> Any:
            variance = x.float().pow(2).mean(-1, keepdim=True)
            return self.weight * (x.float() * torch.rsqrt(variance + 1e-6)).to(x.dtype)

    def rotate_half(x: Any) -> Any:
        a, b = x.chunk(2, dim=-1)
        return torch.cat((-b, a), dim=-1)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.input_norm = RMSNorm()
            self.q = nn.Linear(hidden, heads * head_dim, bias=False)
            self.k = nn.Linear(hidden, kv_heads * head_dim, bias=False)
            self.v = nn.Linear(hidden, kv_heads * head_dim, bias=False)
            self.o = nn.Linear(heads * head_dim, hidden, bias=False)
            self.post_norm = RMSNorm()
            self.gate = nn.Linear(hidden, 2 * hidden, bias=False)
            self.up = nn.Linear(hidden, 2 * hidden, bias=False)
            self.down = nn.Linear(2 * hidden, hidden, bias=False)

        def forward(self, x: Any, cos: Any, sin: Any, mask: Any) -> Any:
            b, s, _ = x.shape
            h = self.input_norm(x)
            q = self.q(h).view(b, s, heads, head_dim).transpose(1, 2)
            k = self.k(h).view(b, s, kv_heads, head_dim).transpose(1, 2)
            v = self.v(h).view(b, s, kv_heads, head_dim).transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k = k.repeat_interleave(heads // kv_heads, dim=1)
            v = v.repeat_interleave(heads // kv_heads, dim=1)
            scores = q @ k.transpose(2, 3) / math.sqrt(head_dim) + mask
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)  # as HF Llama
            x = x + self.o((probs @ v).transpose(1, 2).reshape(b, s, hidden))
            h = self.post_norm(x)
            return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))

    class Llama(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.norm = RMSNorm()
            self.lm_head = nn.Linear(hidden, vocab, bias=False)
            inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
            self.register_buffer("inv_freq", inv, persistent=False)

        def forward(self, input_ids: Any) -> Any:
            s = input_ids.shape[1]
            x = self.embed(input_ids)
            t = torch.arange(s, device=input_ids.device).float()
            freqs = torch.outer(t, self.inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
            mask = torch.full((s, s), -1e4, dtype=x.dtype).triu(1)
            for layer in self.layers:
                x = layer(x, cos, sin, mask)
            return self.lm_head(self.norm(x))

    return Llama().eval()


def gpt2_past(hidden: int = 128, heads: int = 4, layers: int = 2, vocab: int = 500) -> Any:
    """GPT-2-like decoder step: new tokens attend to past keys/values, presents returned."""
    torch = _torch()
    nn = torch.nn
    head_dim = hidden // heads

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1 = nn.LayerNorm(hidden)
            self.c_attn = nn.Linear(hidden, 3 * hidden)
            self.c_proj = nn.Linear(hidden, hidden)
            self.ln_2 = nn.LayerNorm(hidden)
            self.fc = nn.Linear(hidden, 4 * hidden)
            self.proj = nn.Linear(4 * hidden, hidden)

        def forward(self, x: Any, past: Any) -> tuple[Any, Any]:
            b, s, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(hidden, dim=2)
            q, k, v = (t.view(b, s, heads, head_dim).transpose(1, 2) for t in (q, k, v))
            k = torch.cat((past[0], k), dim=-2)
            v = torch.cat((past[1], v), dim=-2)
            present = torch.stack((k, v))
            scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim)
            y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, hidden)
            x = x + self.c_proj(y)
            return x + self.proj(nn.functional.gelu(self.fc(self.ln_2(x)))), present

    class GPT2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(vocab, hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(hidden)

        def forward(self, input_ids: Any, past_0: Any, past_1: Any) -> tuple[Any, ...]:
            x = self.wte(input_ids)
            presents = []
            for block, past in zip(self.blocks, (past_0, past_1), strict=True):
                x, present = block(x, past)
                presents.append(present)
            return (self.ln_f(x) @ self.wte.weight.T, *presents)

    return GPT2().eval()


def loop_module(width: int = 64) -> Any:
    """A scripted loop running once per element of ``steps``: a Loop node (5 steps when exported)."""
    torch = _torch()

    class Looped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(width, width)

        def forward(self, x, steps):  # noqa: ANN001, ANN201 - TorchScript reads unannotated args as Tensors
            for _ in range(steps.size(0)):
                x = torch.relu(self.linear(x))
            return x

    return torch.jit.script(Looped().eval())


def cond_module(width: int = 64) -> Any:
    """``torch.cond`` on the data: one matmul branch, one cheaper branch (an If node)."""
    torch = _torch()

    class Cond(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w1 = torch.nn.Parameter(torch.randn(width, width))
            self.w2 = torch.nn.Parameter(torch.randn(width, width))

        def forward(self, x: Any) -> Any:
            def heavy(x: Any) -> Any:
                return (x @ self.w1) @ self.w2

            def light(x: Any) -> Any:
                return x @ self.w1

            return torch.cond(x.sum() > 0, heavy, light, (x,))

    return Cond().eval()


def lstm_module(input_size: int = 32, hidden: int = 64) -> Any:
    """One LSTM layer returning its sequence output."""
    torch = _torch()

    class Lstm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(input_size, hidden, batch_first=False)

        def forward(self, x: Any) -> Any:
            return self.lstm(x)[0]

    return Lstm().eval()


@dataclass(frozen=True)
class Export:
    """What one model needs for ``torch.onnx.export``."""

    model: Any
    args: tuple[Any, ...]
    inputs: list[str]
    outputs: list[str]
    exporters: tuple[str, ...] = EXPORTERS
    dynamic_axes: dict[str, dict[int, str]] | None = None  # legacy exporter only


def save(spec: Export, path: Path, exporter: str) -> None:
    """Export ``spec`` to ``path`` with the legacy (TorchScript) or the dynamo exporter."""
    torch = _torch()
    names = {"input_names": spec.inputs, "output_names": spec.outputs, "opset_version": OPSET}
    if exporter == "legacy":
        torch.onnx.export(
            spec.model, spec.args, str(path), dynamic_axes=spec.dynamic_axes, dynamo=False, **names
        )
    else:
        torch.onnx.export(spec.model, spec.args, dynamo=True, **names).save(str(path))


def build(name: str) -> Export:
    """The model called ``name`` with its example inputs, names and exporters."""
    torch = _torch()
    torch.manual_seed(0)
    if name == "convnext_fp16":
        return Export(convnext().half(), (torch.randn(1, 3, 128, 128).half(),), ["pixels"], ["logits"])
    if name == "llama_fp16":
        return Export(llama().half(), (torch.randint(0, 1000, (1, 64)),), ["input_ids"], ["logits"])
    if name == "gpt2_past":
        past = torch.randn(2, 1, 4, 31, 32)
        args = (torch.randint(0, 500, (1, 1)), past, past.clone())
        outputs = ["logits", "present_0", "present_1"]
        return Export(gpt2_past(), args, ["input_ids", "past_0", "past_1"], outputs, ("legacy",))
    if name in ("loop", "loop_shape"):  # the trip count: a constant 5, or the length of `steps`
        axes = {"steps": {0: "steps"}} if name == "loop_shape" else None
        args = (torch.randn(4, 64), torch.zeros(5))
        return Export(loop_module(), args, ["x", "steps"], ["y"], ("legacy",), axes)
    if name == "cond":
        return Export(cond_module(), (torch.randn(4, 64),), ["x"], ["y"], ("dynamo",))
    if name == "lstm":
        return Export(lstm_module(), (torch.randn(16, 2, 32),), ["x"], ["y"])
    raise KeyError(name)


MODELS = ("convnext_fp16", "llama_fp16", "loop", "loop_shape", "cond", "lstm", "gpt2_past")


def main() -> int:
    """Export every requested model with every exporter it supports."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/roofline-issue13", help="output folder")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(MODELS)}")
    args = parser.parse_args()
    missing = [m for m in ("torch", "onnx", "onnxscript") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"export_issue13_models.py needs {', '.join(missing)}: run it where torch is installed")
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.models.split(","):
        try:
            spec = build(name)
        except Exception as exc:  # noqa: BLE001 - report every model, keep going
            failed += 1
            print(f"{name:<14} FAILED to build: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            continue
        for exporter in spec.exporters:
            start = time.perf_counter()
            path = out / f"{name}_{exporter}.onnx"
            try:
                save(spec, path, exporter)
            except Exception as exc:  # noqa: BLE001 - report every export, keep going
                failed += 1
                print(f"{name:<14} {exporter:<7} FAILED: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                continue
            print(f"{name:<14} {exporter:<7} {path}  {time.perf_counter() - start:.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
