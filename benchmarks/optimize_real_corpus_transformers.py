"""onnxruntime's transformer optimizer over the corpus's Hugging Face exports (issue 32).

Run after ``benchmarks/export_real_corpus_torch.py`` made ``bert_hf_legacy`` and
``gpt2_hf_legacy``, in the side environment with torch and onnxruntime (the optimizer's onnxruntime
pass, its default for BERT and GPT-2, imports torch for its version)::

    TORCH_ENV/bin/python benchmarks/optimize_real_corpus_transformers.py [--out tests/data/real_exports]

For each, ``onnxruntime.transformers.optimizer.optimize_model`` with the model type, heads and
hidden size (its defaults otherwise: onnxruntime's basic graph optimizations first, then its
Python fusions) writes ``<name>_ort_transformers.onnx``: com.microsoft ``Attention``,
``SkipLayerNormalization``, ``BiasGelu``/``FastGelu``, ``EmbedLayerNormalization`` where the
patterns match. ``manifest.json`` records the optimizer's version, the fused op counts and the
inputs a user gives.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

from _corpus_manifest import corpus_entry, write_manifest

#: export -> (model_type, heads, hidden size), as export_real_corpus_torch.py configures them
SOURCES = {"bert_hf_legacy": ("bert", 4, 64), "gpt2_hf_legacy": ("gpt2", 4, 64)}


def main() -> int:
    import onnxruntime
    from onnxruntime.transformers.optimizer import optimize_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", default=str(Path(__file__).resolve().parent.parent / "tests/data/real_exports")
    )
    out = Path(parser.parse_args().out)
    manifest = json.loads((out / "manifest.json").read_text())
    for source, (model_type, heads, hidden) in SOURCES.items():
        if source not in manifest["models"]:
            print(f"{source}: not exported (run export_real_corpus_torch.py with transformers)")
            continue
        optimized = optimize_model(
            str(out / f"{source}.onnx"), model_type=model_type, num_heads=heads, hidden_size=hidden
        )
        name = source.replace("_legacy", "_ort_transformers")
        path = out / f"{name}.onnx"
        optimized.save_model_to_file(str(path))
        ops = collections.Counter(
            f"{node.domain}:{node.op_type}" if node.domain else node.op_type
            for node in optimized.model.graph.node
        )
        fused = {op: n for op, n in sorted(ops.items()) if op.startswith("com.microsoft:")}
        optimizer = f"onnxruntime.transformers optimizer {onnxruntime.__version__}"
        exporter = f"{optimizer} (model_type={model_type}) over {source}"
        entry = corpus_entry(path, exporter, manifest["models"][source]["call"], fused=fused)
        manifest["models"][name] = entry
        print(f"{path.name}: {entry['bytes']} bytes, {fused}")
    write_manifest(out, manifest)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
