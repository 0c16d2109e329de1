"""Stored baselines: schema, atomic locked store, merge, bounded history.

One JSON file per test module under the baseline directory (``.roofline/`` at the rootdir), e.g.
``.roofline/tests/test_perf.json`` for ``tests/test_perf.py``.  Keys are logical identities
(test, model, batch and dims, backend, device class), never the full device fingerprint, so a
baseline survives a kernel update or a new CI runner of the same class.  Files are written with
sorted keys and indentation (diff-friendly), atomically (temp file + ``os.replace``) under a file
lock, merged with what is on disk at write time.  A corrupt file or one of an unknown schema is
reported (:class:`~pytest_roofline.errors.BaselineError` naming the file) and never rewritten
unless the caller forces it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import filelock

from pytest_roofline.errors import BaselineError
from pytest_roofline.files import atomic_write_json, lock_path

__all__ = [
    "HISTORY_LIMIT",
    "SCHEMA_VERSION",
    "BaselineEntry",
    "BaselineStore",
    "atomic_write_json",
    "entry_key",
]

SCHEMA_VERSION = 1
HISTORY_LIMIT = 50
LOCK_TIMEOUT = 120.0


def entry_key(test: str, model: str, batch: int, dims: Mapping[str, int], backend: str, device: str) -> str:
    """The logical identity of a baseline entry."""
    shape = f"b{batch}" + "".join(f",{k}={v}" for k, v in sorted(dims.items()))
    return f"{test}|{model}|{shape}|{backend}|{device}"


@dataclass(frozen=True)
class BaselineEntry:
    """One accepted measurement of one model in one test, and its history.

    ``figure`` is the probe-normalized figure (median over ``sessions``), the gate's stored
    currency; ``latency`` keeps the raw statistics beside it.
    """

    key: str
    test: str
    model: str
    batch: int
    backend: str
    device_class: str
    figure: float
    sessions: tuple[float, ...]
    dims: dict[str, int] = field(default_factory=dict, hash=False)
    probe: dict[str, Any] = field(default_factory=dict, hash=False)
    latency: dict[str, Any] = field(default_factory=dict, hash=False)
    layers: dict[str, dict[str, float | None]] = field(default_factory=dict, hash=False)
    fingerprint: dict[str, Any] = field(default_factory=dict, hash=False)
    backend_version: str = ""
    options: dict[str, str] = field(default_factory=dict, hash=False)
    model_hash: str = ""
    commit: str | None = None
    time: str = ""
    history: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "key": self.key,
            "test": self.test,
            "model": self.model,
            "batch": self.batch,
            "dims": dict(self.dims),
            "backend": self.backend,
            "device_class": self.device_class,
            "figure": self.figure,
            "sessions": list(self.sessions),
            "probe": dict(self.probe),
            "latency": dict(self.latency),
            "layers": {k: dict(v) for k, v in self.layers.items()},
            "fingerprint": dict(self.fingerprint),
            "backend_version": self.backend_version,
            "options": dict(self.options),
            "model_hash": self.model_hash,
            "commit": self.commit,
            "time": self.time,
            "history": [dict(h) for h in self.history],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BaselineEntry:
        """Inverse of :meth:`to_dict`."""
        return cls(
            key=data["key"],
            test=data["test"],
            model=data["model"],
            batch=int(data["batch"]),
            backend=data["backend"],
            device_class=data["device_class"],
            figure=float(data["figure"]),
            sessions=tuple(float(x) for x in data.get("sessions", ())),
            dims=dict(data.get("dims", {})),
            probe=dict(data.get("probe", {})),
            latency=dict(data.get("latency", {})),
            layers={k: dict(v) for k, v in data.get("layers", {}).items()},
            fingerprint=dict(data.get("fingerprint", {})),
            backend_version=data.get("backend_version", ""),
            options=dict(data.get("options", {})),
            model_hash=data.get("model_hash", ""),
            commit=data.get("commit"),
            time=data.get("time", ""),
            history=tuple(dict(h) for h in data.get("history", ())),
        )

    def history_point(self) -> dict[str, Any]:
        """This entry as one point of a later entry's history."""
        return {
            "commit": self.commit,
            "time": self.time,
            "value": self.figure,
            "median": self.latency.get("median"),
        }

    def succeed(self, previous: BaselineEntry | None, limit: int = HISTORY_LIMIT) -> BaselineEntry:
        """This entry replacing ``previous``: previous's history plus previous itself, bounded."""
        if previous is None:
            return self
        history = (*previous.history, previous.history_point())[-limit:]
        return replace(self, history=history)


def module_of(test: str) -> str:
    """The module path of a node id (``tests/test_x.py::test_y[a]`` → ``tests/test_x.py``)."""
    return test.split("::", 1)[0]


class BaselineStore:
    """The baseline files under one directory."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._cache: dict[Path, dict[str, BaselineEntry]] = {}

    def file_for(self, test: str) -> Path:
        """The file holding the entries of ``test``'s module."""
        module = Path(module_of(test))
        parts = [p for p in module.with_suffix(".json").parts if p not in ("..", ".", "/")]
        return self.directory.joinpath(*parts) if parts else self.directory / "baselines.json"

    def check_directory(self) -> None:
        """Raise :class:`BaselineError` when the baseline directory exists but is not a directory."""
        if self.directory.exists() and not self.directory.is_dir():
            raise BaselineError(
                f"baseline directory {self.directory} is a file, not a directory; "
                "move it away or choose another --roofline-baseline-dir"
            )

    def files(self) -> list[Path]:
        """Every baseline file under the directory, sorted."""
        self.check_directory()
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.rglob("*.json") if not p.name.startswith("."))

    def read(self, path: Path) -> dict[str, BaselineEntry]:
        """The entries of one file ({} if it does not exist).

        Raises:
            BaselineError: the file is not valid JSON or of an unknown schema.
        """
        self.check_directory()
        if not path.exists():
            return {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BaselineError(
                f"baseline file {path} is corrupt ({type(exc).__name__}: {exc}); "
                "fix or delete it, or rewrite it with --roofline-update"
            ) from None
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version != SCHEMA_VERSION:
            raise BaselineError(
                f"baseline file {path} has schema_version {version!r}, this pytest-roofline reads "
                f"{SCHEMA_VERSION}; upgrade pytest-roofline or rewrite it with --roofline-update"
            )
        try:
            return {k: BaselineEntry.from_dict(v) for k, v in data.get("entries", {}).items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise BaselineError(
                f"baseline file {path} has a malformed entry ({type(exc).__name__}: {exc}); "
                "rewrite it with --roofline-update"
            ) from None

    def load(self, path: Path) -> dict[str, BaselineEntry]:
        """:meth:`read`, cached for the life of this store."""
        if path not in self._cache:
            self._cache[path] = self.read(path)
        return self._cache[path]

    def get(self, key: str, test: str) -> BaselineEntry | None:
        """The entry ``key`` of ``test``'s module file, or None."""
        return self.load(self.file_for(test)).get(key)

    def all_entries(self) -> dict[str, BaselineEntry]:
        """Every entry of every file (raises on a corrupt file)."""
        entries: dict[str, BaselineEntry] = {}
        for path in self.files():
            entries.update(self.read(path))
        return entries

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """The directory's write lock; file-system failures become one-line BaselineErrors."""
        self.check_directory()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with filelock.FileLock(str(lock_path(self.directory, "baselines")), timeout=LOCK_TIMEOUT):
                yield
        except filelock.Timeout:
            raise BaselineError(
                f"baseline directory {self.directory} stayed locked for {LOCK_TIMEOUT:g} s by another "
                "process; nothing was written"
            ) from None
        except OSError as exc:
            raise BaselineError(
                f"cannot write baselines in {self.directory}: {exc.strerror or exc}"
                f"{f' ({exc.filename})' if exc.filename else ''}; no file was left half-written"
            ) from None

    def write(
        self,
        entries: Iterable[BaselineEntry],
        *,
        replace_existing: bool = True,
        force: bool = False,
    ) -> list[Path]:
        """Merge ``entries`` into their files under the lock; returns the files written.

        Args:
            entries: entries to store; each succeeds the entry on disk (history kept).
            replace_existing: False stores only keys absent on disk (first baselines).
            force: rewrite a corrupt or unknown-schema file from scratch.
        """
        by_file: dict[Path, list[BaselineEntry]] = {}
        for entry in entries:
            by_file.setdefault(self.file_for(entry.test), []).append(entry)
        written = []
        with self._lock():
            for path, group in sorted(by_file.items()):
                try:
                    current = self.read(path)
                except BaselineError:
                    if not force:
                        raise
                    current = {}
                changed = False
                for entry in group:
                    if entry.key in current and not replace_existing:
                        continue
                    current[entry.key] = entry.succeed(current.get(entry.key))
                    changed = True
                if changed:
                    self._dump(path, current)
                    written.append(path)
                self._cache.pop(path, None)
        return written

    def remove(self, keys: Iterable[str]) -> list[str]:
        """Delete entries by key from every file; returns the keys removed."""
        wanted = set(keys)
        removed: list[str] = []
        with self._lock():
            for path in self.files():
                current = self.read(path)
                gone = sorted(set(current) & wanted)
                if not gone:
                    continue
                for key in gone:
                    del current[key]
                removed.extend(gone)
                if current:
                    self._dump(path, current)
                else:
                    path.unlink()
                self._cache.pop(path, None)
        return sorted(removed)

    @staticmethod
    def _dump(path: Path, entries: Mapping[str, BaselineEntry]) -> None:
        data = {
            "schema_version": SCHEMA_VERSION,
            "tool": "pytest-roofline",
            "entries": {key: entries[key].to_dict() for key in sorted(entries)},
        }
        atomic_write_json(path, data)
