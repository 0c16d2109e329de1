"""Writing files so that nothing is ever lost or half-written (temp file + ``os.replace``, every
byte counted), and locks between every process of the machine that leave no file behind."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_DOCUMENT_ENV",
    "FileLock",
    "UnreadableFile",
    "atomic_write_json",
    "atomic_write_text",
    "file_lock",
    "machine_temp_dir",
    "parse_size",
    "read_descriptor",
    "read_document",
    "write_all",
]

#: Environment variable raising (or lowering) the largest JSON document read: bytes or ``0`` (no limit).
MAX_DOCUMENT_ENV = "ROOFLINE_MAX_FILE_BYTES"
#: The largest baseline, results or calibration file read by default (a 150 MB results file reads).
MAX_DOCUMENT = 1 << 30
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_UNITS.update({"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40})


def parse_size(text: str) -> int | None:
    """Bytes from ``8G``, ``512MiB``, ``2e9`` or ``0``; None when ``text`` is not a size."""
    match = re.fullmatch(r"([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([kKmMgGtT]i?)?[bB]?", text.strip())
    if match is None:
        return None
    return int(float(match[1]) * _UNITS[(match[2] or "").lower()])


class UnreadableFile(OSError):
    """A file roofline will not read: not a regular file, or beyond the size limit (says which)."""


_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}
_KINDS.update({stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"})


def read_document(path: Path, *, follow_symlinks: bool = True) -> str:
    """The UTF-8 text of the regular file ``path``, at most ``$ROOFLINE_MAX_FILE_BYTES`` (1 GiB).

    A FIFO, device or socket is never read (opened non-blocking, so a FIFO does not hang); with
    ``follow_symlinks=False`` neither is a symlink (``OSError(ELOOP)``).

    Raises:
        FileNotFoundError: no such file.
        UnreadableFile: not a regular file, or too large (the message says how to raise the limit).
        OSError, UnicodeDecodeError: it cannot be read.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags | (0 if follow_symlinks else getattr(os, "O_NOFOLLOW", 0)))
    try:
        return read_descriptor(fd).decode("utf-8")
    finally:
        os.close(fd)


def read_descriptor(fd: int) -> bytes:
    """Every byte of the open regular file ``fd`` from its start, bounded as :func:`read_document` is."""
    text = os.environ.get(MAX_DOCUMENT_ENV, "").strip()
    limit = parse_size(text) if text else MAX_DOCUMENT
    if limit is None:
        raise UnreadableFile(f"{MAX_DOCUMENT_ENV}={text!r} is not a size such as 2G or 512MiB (0: no limit)")
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        kind = _KINDS.get(stat.S_IFMT(info.st_mode), "an unknown kind of file")
        raise UnreadableFile(f"{kind}, not a regular file; roofline reads only regular files")
    chunks, size, offset = [], 0, 0
    while not limit or size <= limit:
        chunk = os.pread(fd, 1 << 20 if not limit else min(1 << 20, limit + 1 - size), offset)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        offset += len(chunk)
    if limit and size > limit:
        from pytest_roofline.fmt import fmt_bytes

        raise UnreadableFile(
            f"larger than the {fmt_bytes(limit)} roofline reads from one file; "
            f"raise the limit with {MAX_DOCUMENT_ENV}=SIZE (e.g. 4G; 0: no limit)"
        )
    return b"".join(chunks)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str, newline: str | None = None) -> None:
    """Write ``text`` to ``path`` atomically: a reader (or a SIGKILL) sees the old or the new file.

    The file gets the permissions an ordinary write would (0666 minus the umask), not the
    temp file's 0600: baselines are committed and read by others.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as handle:
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


def machine_temp_dir() -> Path:
    """The machine's shared temp folder (``/tmp`` where there is one), whatever ``$TMPDIR`` says:
    a lock meant for every process of the machine must not move with one user's environment."""
    shared = Path("/tmp")  # noqa: S108 - the one folder every user of a POSIX machine shares
    return shared if os.name == "posix" and shared.is_dir() else Path(tempfile.gettempdir())


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd``: a short count (a full disk) is written on from where
    it stopped, and a write that makes no progress raises ``OSError(ENOSPC)``."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


class FileLock:
    """An exclusive lock between every process of the machine (see :func:`file_lock`).

    Reusable (``with lock: ...`` again later), not reentrant: a second ``with`` on a held lock in
    the same process waits like any other holder would.  ``owner`` is the uid of the lock file's
    owner once taken (another user's file is locked read-only, never written).
    """

    def __init__(self, path: Path, timeout: float | None, keep: bool = False) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self.keep = keep
        self.owner: int | None = None
        self._fd: int | None = None
        self._unlink = False
        self._fallback: Any = None

    def __enter__(self) -> FileLock:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: filelock does the work, its file stays
            import filelock

            wait = -1 if self.timeout is None else self.timeout
            beside = self.path.with_name(self.path.name + ".lock") if self.keep else self.path
            self._fallback = filelock.FileLock(str(beside), timeout=wait)  # never the kept file itself
            self._fallback.acquire()
            if self.keep:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o666)
            return self
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        pause = 0.005
        while True:
            fd, self._unlink = _open_lock(self.path, self.keep)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                if deadline is not None and time.monotonic() >= deadline:
                    import filelock

                    raise filelock.Timeout(str(self.path)) from None
                time.sleep(pause)
                pause = min(2 * pause, 0.1)
                continue
            except BaseException:
                os.close(fd)
                raise
            if not self._unlink or self.keep or _still_at(fd, self.path):
                self._fd, self.owner = fd, os.fstat(fd).st_uid
                return self
            os.close(fd)  # the previous holder removed this file: lock the one at ``path`` now

    def __exit__(self, *exc: object) -> None:
        if self._fallback is not None:  # pragma: no cover - Windows
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._fallback.release()
            self._fallback = None
            return
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if self._unlink and not self.keep and os.fstat(fd).st_uid == os.geteuid():
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # still holding the lock: waiters on this inode will start over
        os.close(fd)

    @property
    def fd(self) -> int:
        """The held lock's descriptor (of the file itself with ``keep=True``)."""
        if self._fd is None:
            raise RuntimeError("the lock is not held")
        return self._fd


def _still_at(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.lstat(path))
    except FileNotFoundError:
        return False


def _open_lock(path: Path, keep: bool) -> tuple[int, bool]:
    """A descriptor to ``flock`` for ``path`` and whether the lock file goes on release.

    A directory is locked in place (nothing created).  Otherwise the lock file is created (its
    folder too) or opened as it is, read-only when it is another user's, never through a symlink,
    and only when it is a regular file: no one can crash or redirect another user's lock.
    """
    flags = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    if path.is_dir() and not keep:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), False
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o666 if keep else 0o644)  # a kept file: umask
    except PermissionError:
        fd = os.open(path, os.O_RDONLY | flags)  # another user's lock file: flock needs no write
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        kind = _KINDS.get(stat.S_IFMT(info.st_mode), "an unknown kind of file")
        raise UnreadableFile(errno.EINVAL, f"{kind}, not a regular file; remove it", str(path))
    return fd, True


def file_lock(path: Path, timeout: float | None, keep: bool = False) -> FileLock:
    """An exclusive lock on ``path`` between every process of the machine, whatever its user or
    ``$TMPDIR``; a lock file is removed on release.

    ``path`` is the guarded folder itself (locked in place: nothing is created in it, so no lock
    file ever lands in a repository) or a lock file.  ``filelock`` leaves its zero-byte files
    behind; this lock does not: on POSIX the holder unlinks the file while it still holds the
    ``flock``, and a waiter that then gets the lock checks that its descriptor is still the file at
    ``path`` (same inode) and starts over otherwise, so two processes never hold the lock at once.
    Another user's lock file is opened read-only (``flock`` needs no write permission); a symlink,
    FIFO or folder where a lock file should be is refused (:class:`UnreadableFile`).  Elsewhere
    ``filelock`` does the work (its file stays).

    Args:
        path: the folder to lock, or the lock file (its folder is created).
        timeout: seconds to wait; None waits forever.
        keep: ``path`` is the guarded file itself (a regular file, created when missing, never a
            symlink), kept on release; :attr:`FileLock.fd` reads and writes it under the lock.

    Returns:
        A :class:`FileLock` to use as ``with file_lock(path, 30): ...`` (``filelock.Timeout`` when
        another process held it past ``timeout``; ``OSError`` when the file cannot be opened).
    """
    return FileLock(path, timeout, keep)
