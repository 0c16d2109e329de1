"""A content-addressed copy of every baseline's model, so that a later run whose model changed can
time the baseline's model beside its own (auto-paired mode).

Layout under the root (``<cache dir>/models``)::

    <sha256>/                     one entry per content hash (model + external data)
        resnet50.onnx             the model, under the name it was recorded with
        resnet50.onnx.data        external data, named as the model references it
        .roofline-entry.json      manifest: model name, files and sizes; its mtime is the LRU clock
    .tmp-*/                       an entry being written (renamed into place when complete)
    .lock                         held while an entry is renamed in and while evicting

An entry appears whole or not at all (written in a temp folder, renamed under the lock); a reader
re-hashes what it finds, so a truncated or tampered entry is ignored and removed.  Nothing here
fails a test: a cache dir that cannot be written, a full disk or a lock held too long only cost the
copy, with a one-line note.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pytest_roofline.errors import ModelError, OptionError
from pytest_roofline.files import read_document
from pytest_roofline.fmt import fmt_bytes
from pytest_roofline.model.gitref import LFS_HINT, LFS_POINTER, external_data_locations, is_safe_location

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_BYTES_ENV",
    "ModelStore",
    "content_hash",
    "default_model_store",
    "store_limit",
]

#: Environment variable bounding the store: bytes (``2G``, ``500MiB``, ``0`` keeps nothing) or ``off``.
MAX_BYTES_ENV = "ROOFLINE_MODEL_STORE_MAX_BYTES"
DEFAULT_MAX_BYTES = 2 * 2**30
LOCK_TIMEOUT = 60.0  # seconds to wait for another writer; then this copy is skipped
STALE_SECONDS = 6 * 3600  # a temp folder this old was left by a killed writer
MANIFEST = ".roofline-entry.json"
CHUNK = 1 << 20
_MARKER = b"location"  # in every serialized external-data entry; absent: no proto parse needed
_DIGEST = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class _Content:
    """What a model's identity covers: its digest and files (model first, then external data)."""

    digest: str
    files: tuple[tuple[str, int], ...]  # (name relative to the model's folder, bytes)

    @property
    def size(self) -> int:
        return sum(size for _, size in self.files)


def content_hash(path: str | os.PathLike[str], *, cached: bool = True) -> str:
    """SHA-256 (hex) of the model file's bytes, then of each external-data file it references
    (sorted by ``location``; each as ``\\0location\\0`` and its bytes).

    Streams every file; the proto is parsed (without external data) only when the file mentions
    external data at all.  A model without external data hashes like the file alone, the same as
    :func:`pytest_roofline.model.model_hash`.  Cached per process while no file's inode, size,
    modification or change time changes (the identity check and :meth:`ModelStore.put` hash the
    same file; a tampered file, its mtime restored, is hashed again); ``cached=False`` always reads
    the bytes (a validity check: a file's timestamps tick coarser than a write can follow a read).

    Raises:
        ModelError: the model or a data file is missing or unreadable, a Git LFS pointer, not ONNX,
            or a data location that leaves the model's folder.  One line each.
    """
    model = Path(path).resolve()
    known = _HASHES.get(model) if cached else None
    if known is not None:
        with contextlib.suppress(OSError):
            if _stats(known[0]) == known[1]:
                return known[2]
    before = _stats([model]) if model.is_file() else None
    content = _scan(model)
    files = tuple(model.parent / name for name, _ in content.files)
    with contextlib.suppress(OSError):
        stats = _stats(files)
        if before is not None and stats[0] == before[0]:  # not rewritten while it was read
            _HASHES[model] = (files, stats, content.digest)
    return content.digest


#: Per-process cache of :func:`content_hash`: path → (files, their stat key, digest).
_HASHES: dict[Path, tuple[tuple[Path, ...], tuple[tuple[int, ...], ...], str]] = {}


def _stats(files: tuple[Path, ...] | list[Path]) -> tuple[tuple[int, ...], ...]:
    """Each file's stat key: inode, size, modification and change time (raises OSError when one is
    missing).  The change time is set by the kernel on every write and every ``utime``: a file
    rewritten in place with its size and modification time restored still misses the cache."""
    return tuple((s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns) for s in (f.stat() for f in files))


def _scan(path: Path, copy_to: Path | None = None) -> _Content:
    """Hash ``path`` and its external data; with ``copy_to``, copy each file there while reading it
    (the proto parsed is then the copy, so the digest always describes the bytes copied)."""
    digest = hashlib.sha256()
    with _open(path, f"{path}") as source:
        target = None if copy_to is None else copy_to / path.name
        size, mentions_data = _stream(source, digest, target, f"{path}")
    if size == 0:
        raise ModelError(f"{path}: the file is empty; re-export the model")
    files = [(path.name, size)]
    if mentions_data:
        for location in _locations(path if copy_to is None else copy_to / path.name, path):
            if location == path.name or location == MANIFEST:
                raise ModelError(f"{path}: external data location {location!r} is the model's own name")
            digest.update(b"\0" + location.encode("utf-8") + b"\0")
            what = f"{location} (external data of {path})"
            with _open(path.parent / location, what) as source:
                target = None if copy_to is None else copy_to / location
                files.append((location, _stream(source, digest, target, what)[0]))
    return _Content(digest.hexdigest(), tuple(files))


@contextlib.contextmanager
def _open(path: Path, what: str) -> Iterator[IO[bytes]]:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # a FIFO or device would hang or never end
            os.close(fd)
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
            raise ModelError(f"{what}: not a regular file; pass the path of an .onnx model file")
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except FileNotFoundError:
        raise ModelError(f"{what}: no such file; pass the path of an .onnx model with its data") from None
    except OSError as exc:
        raise ModelError(f"{what}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    with handle:
        yield handle


def _stream(source: IO[bytes], digest: hashlib._Hash, target: Path | None, what: str) -> tuple[int, bool]:
    """Feed ``source`` to ``digest`` (and ``target``); (bytes read, whether it mentions external data)."""
    size, found, tail = 0, False, b""
    out = None
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        out = open(target, "wb")  # noqa: SIM115 - closed below
    try:
        while chunk := _read(source, what):
            if size == 0 and chunk.startswith(LFS_POINTER):
                raise ModelError(f"{what}: a Git LFS pointer, not the file; {LFS_HINT}")
            digest.update(chunk)
            if out is not None:
                out.write(chunk)
            if not found:
                found = _MARKER in chunk or _MARKER in tail + chunk[: len(_MARKER) - 1]
                tail = chunk[-(len(_MARKER) - 1) :]
            size += len(chunk)
    finally:
        if out is not None:
            out.close()
    return size, found


def _read(source: IO[bytes], what: str) -> bytes:
    try:
        return source.read(CHUNK)
    except OSError as exc:
        raise ModelError(f"{what}: cannot read it ({exc.strerror or type(exc).__name__})") from None


def _locations(parse: Path, shown: Path) -> list[str]:
    """The external-data locations of the model at ``parse`` (named ``shown`` in errors), sorted."""
    import onnx

    try:
        model = onnx.load(str(parse), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError and friends
        raise ModelError(
            f"{shown}: not a valid ONNX model (truncated or not ONNX: {type(exc).__name__}); "
            "re-export the model"
        ) from None
    locations = sorted(external_data_locations(model))
    for location in locations:
        if not is_safe_location(location):
            raise ModelError(
                f"{shown}: external data location {location!r} is not a relative path inside the model's "
                "folder; re-export the model with its data next to it"
            )
    return locations


def store_limit() -> int | None:
    """The store's size bound: ``$ROOFLINE_MODEL_STORE_MAX_BYTES`` (``off``: none), else 2 GiB.

    Raises:
        OptionError: the variable is neither a size nor ``off``.
    """
    from pytest_roofline.files import parse_size

    text = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    if text.lower() in ("off", "none", "unlimited"):
        return None
    limit = parse_size(text)
    if limit is None:
        raise OptionError(
            f"{MAX_BYTES_ENV}={text!r}: expected bytes such as 2G, 500MiB or 0, or off (no bound)"
        )
    return limit


class ModelStore:
    """Models (with their external data) by content hash, bounded in size by LRU eviction.

    Args:
        root: the store's folder (created on the first :meth:`put`).
        max_bytes: the bound on the stored bytes; None reads :func:`store_limit`.
        note: receives each one-line note (evictions, failed hash checks, copies skipped); the
            notes are also kept in :attr:`notes`.
        hold: evict nothing until :meth:`release` (a pytest session's store).  A session puts each
            test's model while later tests still need the previous run's models (the history pairs
            against them, the gate against the baselines'): evicting at each put would drop exactly
            those in a suite whose models fill more than half the bound.

    :meth:`release` never evicts an entry this store put or read: a session keeps what it used,
    even over the bound (with a note), so the next run finds its models.
    """

    def __init__(
        self,
        root: Path,
        max_bytes: int | None = None,
        note: Callable[[str], None] | None = None,
        *,
        hold: bool = False,
    ) -> None:
        self.root = Path(root)
        self.max_bytes = store_limit() if max_bytes is None else max_bytes
        self.notes: list[str] = []
        self.hold = hold
        self._note = note
        self._used: set[str] = set()  # digests put or read through this store

    def __repr__(self) -> str:
        return f"ModelStore({str(self.root)!r}, max_bytes={self.max_bytes})"

    def __contains__(self, digest: object) -> bool:
        return isinstance(digest, str) and self._manifest(digest) is not None

    def put(self, model_path: Path) -> str:
        """Keep a copy of ``model_path`` (and its external data); return its :func:`content_hash`.

        Already stored: only its LRU clock moves.  Otherwise the files are copied into a temp
        folder, renamed into place under the store's lock, and least-recently-used entries are
        evicted beyond :attr:`max_bytes` (a note each).  A store that cannot be written (read-only,
        full, locked too long) costs the copy and a note, never an exception.

        Raises:
            ModelError: the model cannot be read (see :func:`content_hash`).
        """
        path = Path(model_path)
        content = _scan(path)
        digest = content.digest
        if digest in self:
            self._touch(digest)
            self._used.add(digest)
            return digest
        if self.max_bytes is not None and content.size > self.max_bytes:
            self._say(
                f"model store: {digest[:12]} ({fmt_bytes(content.size)}) is larger than its bound "
                f"({fmt_bytes(self.max_bytes)}); not kept (raise {MAX_BYTES_ENV})"
            )
            return digest
        temp: Path | None = None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            temp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.root))
            copied = _scan(path, copy_to=temp)  # the digest of the bytes copied, should the file change
            manifest = {"model": path.name, "files": [list(f) for f in copied.files], "bytes": copied.size}
            (temp / MANIFEST).write_text(json.dumps(manifest, sort_keys=True) + "\n", encoding="utf-8")
            digest = copied.digest
            with self._locked():
                if digest in self:
                    self._touch(digest)
                else:
                    self._remove(self.root / digest)  # a folder without a valid manifest is debris
                    os.rename(temp, self.root / digest)
                    temp = None
                    self._touch(digest)
                self._used.add(digest)
                if not self.hold:
                    for gone, size in self._evict(spare={digest})[1]:
                        self._say(
                            f"model store: evicted {gone[:12]} ({fmt_bytes(size)}), the least recently "
                            f"used, {self._keeping()}"
                        )
        except _LockTimeout:
            self._say(
                f"model store: {self.root} stayed locked for {LOCK_TIMEOUT:g} s; {digest[:12]} not kept"
            )
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            self._say(
                f"model store: cannot keep {digest[:12]} in {self.root} ({why}); "
                "a changed model will be compared through git or the stored figures"
            )
        finally:
            if temp is not None:
                shutil.rmtree(temp, ignore_errors=True)
        return digest

    def get(self, digest: str) -> Path | None:
        """The stored model file (external data beside it) of ``digest``, or None.

        The entry is re-hashed first: one that fails (truncated, tampered) is noted, removed and
        not returned.  A returned entry becomes the most recently used.
        """
        manifest = self._manifest(digest)
        if manifest is None:
            return None
        model = self.root / digest / manifest["model"]
        try:
            actual: str | None = content_hash(model, cached=False)  # validity: never a stat cache
        except ModelError:
            if not (self.root / digest).exists():
                return None  # evicted by another process meanwhile
            actual = None
        if actual != digest:
            self._say(f"model store: {digest[:12]} failed its hash check; ignored")
            self._remove(self.root / digest)
            return None
        self._touch(digest)
        self._used.add(digest)
        return model

    def release(self) -> None:
        """The end of a held store's session: evict least-recently-used entries that it neither put
        nor read until the store is within its bound; a note when what it used alone exceeds it."""
        self.hold = False
        if not self.root.is_dir():
            return
        try:
            with self._locked():
                total, evicted = self._evict(spare=self._used)
        except _LockTimeout:
            self._say(f"model store: {self.root} stayed locked for {LOCK_TIMEOUT:g} s; nothing evicted")
            return
        except OSError:
            return  # a store that cannot be written keeps what it holds
        if evicted:
            self._say(
                f"model store: evicted {len(evicted)} model{'s' if len(evicted) != 1 else ''} "
                f"({fmt_bytes(sum(size for _, size in evicted))}) that this run did not use, the least "
                f"recently used, {self._keeping()}"
            )
        if self.max_bytes is not None and total > self.max_bytes:
            self._say(
                f"model store: {self.root} holds {fmt_bytes(total)}, over its bound of "
                f"{fmt_bytes(self.max_bytes)}: the {len(self._used)} models this run used are kept for "
                f"the next run to time beside (raise {MAX_BYTES_ENV})"
            )

    # --- internals ------------------------------------------------------------------------------

    def _keeping(self) -> str:
        return f"to keep {self.root} under {fmt_bytes(self.max_bytes or 0)} ({MAX_BYTES_ENV})"

    def _say(self, message: str) -> None:
        self.notes.append(message)
        if self._note is not None:
            self._note(message)

    def _manifest(self, digest: str) -> dict | None:
        """The entry's manifest when it is well formed (its model a plain file name), else None."""
        if not _DIGEST.fullmatch(digest):
            return None
        try:
            text = read_document(self.root / digest / MANIFEST, follow_symlinks=False)  # bounded, regular
            data = json.loads(text)
            name, size = data["model"], int(data["bytes"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(name, str) or name in ("", ".", "..", MANIFEST) or "/" in name or "\\" in name:
            return None
        return {"model": name, "bytes": size}

    def _touch(self, digest: str) -> None:
        now = time.time_ns()  # not the kernel's clock: two touches within a tick must stay ordered
        with contextlib.suppress(OSError):  # a read-only store keeps its old order
            os.utime(self.root / digest / MANIFEST, ns=(now, now))

    def _remove(self, entry: Path) -> None:
        """Remove ``entry`` at once (renamed aside, then deleted): readers see it whole or gone."""
        if not entry.exists():
            return
        try:
            aside = Path(tempfile.mkdtemp(prefix=".trash-", dir=self.root))
            os.rename(entry, aside / "entry")
        except OSError:
            shutil.rmtree(entry, ignore_errors=True)
            return
        shutil.rmtree(aside, ignore_errors=True)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        import filelock

        from pytest_roofline.files import file_lock

        try:
            with file_lock(self.root / ".lock", LOCK_TIMEOUT):
                yield
        except filelock.Timeout:
            raise _LockTimeout from None

    def _evict(self, spare: set[str]) -> tuple[int, list[tuple[str, int]]]:
        """Under the lock: drop least-recently-used entries but those in ``spare`` while the store
        exceeds its bound, and the debris of writers that were killed.  Returns the bytes left and
        the (digest, bytes) evicted."""
        now = time.time()
        entries: list[tuple[float, int, str]] = []
        for child in self.root.iterdir():
            name = child.name
            if name.startswith((".tmp-", ".trash-")):
                with contextlib.suppress(OSError):
                    if now - child.stat().st_mtime > STALE_SECONDS:
                        shutil.rmtree(child, ignore_errors=True)
                continue
            manifest = self._manifest(name)
            if manifest is not None:
                with contextlib.suppress(OSError):
                    entries.append(((child / MANIFEST).stat().st_mtime, manifest["bytes"], name))
        total = sum(size for _, size, _ in entries)
        evicted: list[tuple[str, int]] = []
        if self.max_bytes is None:
            return total, evicted
        for _, size, digest in sorted(entries):
            if total <= self.max_bytes:
                break
            if digest in spare:
                continue
            self._remove(self.root / digest)
            total -= size
            evicted.append((digest, size))
        return total, evicted


class _LockTimeout(Exception):
    """Another process held the store's lock past :data:`LOCK_TIMEOUT`."""


def default_model_store(note: Callable[[str], None] | None = None, *, hold: bool = False) -> ModelStore:
    """The store under the calibration cache dir (``$ROOFLINE_CACHE_DIR`` honoured): ``<cache>/models``."""
    from pytest_roofline.roofline.calibrate import default_cache_dir

    return ModelStore(default_cache_dir() / "models", note=note, hold=hold)
