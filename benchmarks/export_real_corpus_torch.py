"""Export the torch part of the real-exports corpus (issue 32) into ``tests/data/real_exports``.

Run in a side environment with torch (never the project's venv)::

    /work/venv-torch/bin/python benchmarks/export_real_corpus_torch.py [--out tests/data/real_exports]

Random weights (seeded), no downloads. Each file stays under 2 MB; ``manifest.json`` records the
exporter, torch version and the inputs a user gives (shapes, or arrays for 0-d inputs):

* ``resblock_cnn_{legacy,dynamo}``: a torchvision-style residual CNN (Conv-BN-ReLU, a residual
  add, adaptive pool, Linear), dynamic batch;
* ``encoder_{legacy,dynamo}``: a ``nn.TransformerEncoder`` (2 layers, 4 heads) with dynamic batch
  and sequence axes, as HF-style encoders export;
* ``gru_state_legacy``: a GRU with an explicit state input and output (a streaming model's
  interface, like Silero VAD's);
* ``scripted_loop_legacy``: a ``torch.jit.script`` loop over a 0-d ``steps`` input carrying a
  hidden state (an ``onnx::Loop`` with state and a scalar input);
* ``bert_hf_legacy``, ``gpt2_hf_legacy`` (with ``transformers`` installed beside torch): Hugging
  Face ``BertModel`` and ``GPT2Model`` built from a small config (random weights, no download),
  exported as HF's own ONNX export does; ``benchmarks/optimize_real_corpus_transformers.py`` then
  runs onnxruntime's transformer optimizer over them.

``--only NAME`` (repeatable) exports those models alone and keeps the manifest's other entries.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from _corpus_manifest import corpus_entry, write_manifest
from torch import nn

OPSET = 17


class ResBlockCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.body = nn.Sequential(
            nn.Conv2d(16, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 16, 3, 1, 1)
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        h = torch.relu(h + self.body(h))
        return self.fc(torch.flatten(self.pool(h), 1))


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 32)
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.embed(input_ids))


class GRUState(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(16, 24, batch_first=True)
        self.head = nn.Linear(24, 1)

    def forward(self, frames: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, new_state = self.gru(frames, state)
        return torch.sigmoid(self.head(out[:, -1])), new_state


class ScriptedLoop(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.Linear(32, 32)

    def forward(self, h: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        for _ in range(int(steps)):
            h = torch.tanh(self.cell(h))
        return h


def hf_models() -> list[tuple]:
    """Hugging Face BERT and GPT-2 from small configs (eager attention, the pattern onnxruntime's
    transformer optimizer fuses), or none where transformers is not installed."""
    try:
        import transformers
    except ImportError:
        print("transformers is not installed: no bert_hf/gpt2_hf exports")
        return []
    small = {"vocab_size": 512, "max_position_embeddings": 64, "attn_implementation": "eager"}
    bert = transformers.BertModel(
        transformers.BertConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, **small
        ),
        add_pooling_layer=False,
    )
    gpt2 = transformers.GPT2Model(
        transformers.GPT2Config(
            n_embd=64,
            n_layer=2,
            n_head=4,
            vocab_size=small["vocab_size"],
            n_positions=small["max_position_embeddings"],
            use_cache=False,
            attn_implementation="eager",
            bos_token_id=0,  # GPT-2's 50256 lies outside the small vocabulary
            eos_token_id=0,
        )
    )
    ids = torch.randint(0, small["vocab_size"], (1, 16))
    mask = torch.ones(1, 16, dtype=torch.int64)
    axes = {0: "batch_size", 1: "sequence_length"}
    version = f"transformers {transformers.__version__}"
    return [
        (
            "bert_hf",
            HFWrapper(bert, ("input_ids", "attention_mask", "token_type_ids")),
            (ids, mask, torch.zeros_like(ids)),
            {
                "inputs": ["input_ids", "attention_mask", "token_type_ids"],
                "outputs": ["last_hidden_state"],
                "dynamic_axes": {name: axes for name in ("input_ids", "attention_mask", "token_type_ids")},
            },
            {"shapes": {"input_ids": [1, 16], "attention_mask": [1, 16], "token_type_ids": [1, 16]}},
            ("legacy",),
            version,
        ),
        (
            "gpt2_hf",
            HFWrapper(gpt2, ("input_ids", "attention_mask")),
            (ids, mask),
            {
                "inputs": ["input_ids", "attention_mask"],
                "outputs": ["last_hidden_state"],
                "dynamic_axes": {name: axes for name in ("input_ids", "attention_mask")},
            },
            {"shapes": {"input_ids": [1, 16], "attention_mask": [1, 16]}},
            ("legacy",),
            version,
        ),
    ]


class HFWrapper(nn.Module):
    """A transformers model called with keyword inputs, returning its last hidden state."""

    def __init__(self, model: nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.names, inputs, strict=True)), return_dict=True).last_hidden_state


def export(model: nn.Module, args: tuple, path: Path, names: dict, dynamo: bool) -> None:
    model.eval()
    kwargs = {"input_names": names["inputs"], "output_names": names["outputs"], "opset_version": OPSET}
    if dynamo:
        torch.onnx.export(
            model, args, str(path), dynamo=True, dynamic_shapes=names.get("dynamic_shapes"), **kwargs
        )
    else:
        torch.onnx.export(
            model, args, str(path), dynamo=False, dynamic_axes=names.get("dynamic_axes"), **kwargs
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", default=str(Path(__file__).resolve().parent.parent / "tests/data/real_exports")
    )
    parser.add_argument("--only", action="append", default=[], help="export these models alone (repeatable)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    manifest: dict = {"torch": torch.__version__, "opset": OPSET, "models": {}}
    if args.only and (out / "manifest.json").exists():
        manifest = json.loads((out / "manifest.json").read_text())
    batch = torch.export.Dim("batch", min=1, max=64)
    seq = torch.export.Dim("seq", min=2, max=512)
    cases = [
        (
            "resblock_cnn",
            ResBlockCNN(),
            (torch.randn(1, 3, 32, 32),),
            {
                "inputs": ["images"],
                "outputs": ["logits"],
                "dynamic_axes": {"images": {0: "batch"}},
                "dynamic_shapes": ({0: batch},),
            },
            {"shapes": {"images": [1, 3, 32, 32]}},
            ("legacy", "dynamo"),
        ),
        (
            "encoder",
            Encoder(),
            (torch.randint(0, 100, (1, 16)),),
            {
                "inputs": ["input_ids"],
                "outputs": ["last_hidden_state"],
                "dynamic_axes": {"input_ids": {0: "batch", 1: "sequence"}},
                "dynamic_shapes": ({0: batch, 1: seq},),
            },
            {"shapes": {"input_ids": [1, 16]}},
            ("legacy", "dynamo"),
        ),
        (
            "gru_state",
            GRUState(),
            (torch.randn(1, 8, 16), torch.zeros(1, 1, 24)),
            {
                "inputs": ["frames", "state"],
                "outputs": ["prob", "new_state"],
                "dynamic_axes": {"frames": {0: "batch", 1: "frames"}, "state": {1: "batch"}},
            },
            {"shapes": {"frames": [1, 8, 16], "state": [1, 1, 24]}},
            ("legacy",),
        ),
        (
            "scripted_loop",
            torch.jit.script(ScriptedLoop()),
            (torch.randn(1, 32), torch.tensor(4)),
            {"inputs": ["h", "steps"], "outputs": ["h_out"], "dynamic_axes": {"h": {0: "batch"}}},
            {"scalars": {"steps": 4}, "shapes": {"h": [1, 32]}},
            ("legacy",),
        ),
    ]
    cases = [(*case, "") for case in cases] + hf_models()
    for name, model, inputs, names, call, exporters, library in cases:
        for exporter in exporters:
            path = out / f"{name}_{exporter}.onnx"
            if args.only and path.stem not in args.only and name not in args.only:
                continue
            try:
                export(model, inputs, path, names, exporter == "dynamo")
            except Exception as exc:  # a failed exporter is reported, the others still run
                print(f"{path.name}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                continue
            entry = corpus_entry(path, f"torch.onnx {exporter}" + (f", {library}" if library else ""), call)
            manifest["models"][path.stem] = entry
            print(f"{path.name}: {entry['bytes']} bytes")
    write_manifest(out, manifest)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
