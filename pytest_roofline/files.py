"""Writing files so that nothing is ever lost or half-written: temp file + ``os.replace``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_json", "atomic_write_text", "lock_path"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a reader (or a SIGKILL) sees the old or the new file.

    The file gets the permissions an ordinary write would (0666 minus the umask), not the
    temp file's 0600: baselines are committed and read by others.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, data: Any, indent: int = 2) -> None:
    """Write ``data`` as sorted, indented JSON (diff-friendly) to ``path`` atomically."""
    atomic_write_text(path, json.dumps(data, indent=indent, sort_keys=True, allow_nan=False) + "\n")


def lock_path(directory: Path, purpose: str) -> Path:
    """A lock file for ``directory`` in the temp dir, so that no lock file lands in a repository."""
    digest = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"pytest-roofline-{purpose}-{digest}.lock"
