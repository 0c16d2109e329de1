"""Writing files so that nothing is ever lost or half-written (temp file + ``os.replace``), and
locks between processes that leave no file behind."""

from __future__ import annotations

import contextlib
import errno
import hashlib
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
    "lock_dir",
    "lock_path",
    "parse_size",
    "read_document",
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


def read_document(path: Path) -> str:
    """The UTF-8 text of the regular file ``path``, at most ``$ROOFLINE_MAX_FILE_BYTES`` (1 GiB).

    A FIFO, device or socket is never read (opened non-blocking, so a FIFO does not hang).

    Raises:
        FileNotFoundError: no such file.
        UnreadableFile: not a regular file, or too large (the message says how to raise the limit).
        OSError, UnicodeDecodeError: it cannot be read.
    """
    text = os.environ.get(MAX_DOCUMENT_ENV, "").strip()
    limit = parse_size(text) if text else MAX_DOCUMENT
    if limit is None:
        raise UnreadableFile(f"{MAX_DOCUMENT_ENV}={text!r} is not a size such as 2G or 512MiB (0: no limit)")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = _KINDS.get(stat.S_IFMT(info.st_mode), "an unknown kind of file")
            raise UnreadableFile(f"{kind}, not a regular file; roofline reads only regular files")
        data = handle.read(limit + 1) if limit else handle.read()
    if limit and len(data) > limit:
        from pytest_roofline.fmt import fmt_bytes

        raise UnreadableFile(
            f"larger than the {fmt_bytes(limit)} roofline reads from one file; "
            f"raise the limit with {MAX_DOCUMENT_ENV}=SIZE (e.g. 4G; 0: no limit)"
        )
    return data.decode("utf-8")


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


def lock_dir() -> Path:
    """The one folder for lock files of directories that must not hold one (a repository's
    ``.roofline/``): ``<temp dir>/pytest-roofline-locks-<uid>``, private to the user, so another
    user's lock file can neither block nor be replaced."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"pytest-roofline-locks-{uid}"


def lock_path(directory: Path, purpose: str) -> Path:
    """The lock file for ``directory`` (in :func:`lock_dir`), so that no lock file lands in a repository."""
    digest = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:16]
    return lock_dir() / f"{purpose}-{digest}.lock"


class FileLock:
    """An exclusive lock between processes whose file is removed on release (see :func:`file_lock`).

    Reusable (``with lock: ...`` again later), not reentrant: a second ``with`` on a held lock in
    the same process waits like any other holder would.
    """

    def __init__(self, path: Path, timeout: float | None) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self._fd: int | None = None
        self._fallback: Any = None

    def __enter__(self) -> FileLock:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: filelock does the work, its file stays
            import filelock

            wait = -1 if self.timeout is None else self.timeout
            self._fallback = filelock.FileLock(str(self.path), timeout=wait)
            self._fallback.acquire()
            return self
        _make_lock_folder(self.path.parent)
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        pause = 0.005
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
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
            try:
                current: os.stat_result | None = os.stat(self.path)
            except FileNotFoundError:
                current = None
            if current is not None and os.path.samestat(os.fstat(fd), current):
                self._fd = fd
                return self
            os.close(fd)  # the previous holder removed this file: lock the one at ``path`` now

    def __exit__(self, *exc: object) -> None:
        if self._fallback is not None:  # pragma: no cover - Windows
            self._fallback.release()
            self._fallback = None
            return
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)  # still holding the lock: waiters on this inode will start over
        os.close(fd)


def file_lock(path: Path, timeout: float | None) -> FileLock:
    """An exclusive lock on ``path`` between processes; the file is removed on release.

    ``filelock`` leaves its zero-byte files behind (one per locked directory: hundreds in the temp
    dir after a test suite); this lock does not.  On POSIX the holder unlinks the file while it
    still holds the ``flock``, and a waiter that then gets the lock checks that its descriptor is
    still the file at ``path`` (same inode) and starts over otherwise, so two processes never hold
    the lock at once.  Elsewhere ``filelock`` does the work (its file stays).

    Args:
        path: the lock file; its folder is created (``0700`` for :func:`lock_dir`).
        timeout: seconds to wait; None waits forever.

    Returns:
        A :class:`FileLock` to use as ``with file_lock(path, 30): ...`` (``filelock.Timeout`` when
        another process held it past ``timeout``; ``OSError`` when the file cannot be created).
    """
    return FileLock(path, timeout)


def _make_lock_folder(folder: Path) -> None:
    """Create ``folder``; :func:`lock_dir` must be a real folder of this user that no one else can
    write (in a shared temp dir anyone could have made it first)."""
    if folder != lock_dir():
        folder.mkdir(parents=True, exist_ok=True)
        return
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise PermissionError(
            errno.EPERM, "the lock folder is not a private folder of this user; remove it", str(folder)
        )
