"""What the real-exports corpus scripts share: an exported file's ``manifest.json`` entry (under
the corpus's size cap) and the manifest's write.

Imported by ``benchmarks/export_real_corpus_torch.py`` and
``benchmarks/optimize_real_corpus_transformers.py`` (run as scripts, so this folder is on
``sys.path``); standard library only, as both run in a side environment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["MAX_BYTES", "corpus_entry", "write_manifest"]

MAX_BYTES = 2 << 20  # every file of the corpus stays under 2 MB


def corpus_entry(path: Path, exporter: str, call: Any, **extra: Any) -> dict[str, Any]:
    """``path``'s manifest entry: who wrote it, the inputs a user gives, its size (asserted under
    :data:`MAX_BYTES`) and ``extra``."""
    size = path.stat().st_size
    assert size <= MAX_BYTES, f"{path.name} is {size} bytes, over 2 MB"
    return {"exporter": exporter, "call": call, "bytes": size, **extra}


def write_manifest(out: Path, manifest: dict[str, Any]) -> None:
    """``out/manifest.json``: indented, keys sorted, one newline at the end."""
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
