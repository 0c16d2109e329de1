"""Where the history lives: the embedded JSON-lines store or PostgreSQL, behind one protocol.

* **Embedded** (the default; a folder, ``.roofline/history/`` at the rootdir unless given): asv's
  layout, one JSON-lines file per device class and commit (``<device class>/<commit>.jsonl``).
  Branches never touch the same file, so histories of two branches merge by copying folders
  (git, CI caches, artifacts); appends take a per-file lock and skip ids already in the file, so
  concurrent writers lose nothing and an import repeated adds nothing.
* **PostgreSQL** (``postgresql://...``) for a fleet of runners, through psycopg 3 (the ``history``
  extra), imported only here.  The schema is versioned (``roofline_schema_version``) and migrated
  forward under an advisory lock; points have a unique id and are inserted with
  ``ON CONFLICT DO NOTHING``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from pytest_roofline.errors import RooflineError
from pytest_roofline.history.points import HistoryPoint
from pytest_roofline.schema import SchemaError

__all__ = [
    "ENV",
    "EXTRA_HINT",
    "HistoryStore",
    "JsonLinesStore",
    "PostgresStore",
    "open_store",
]

ENV = "ROOFLINE_HISTORY"
EXTRA_HINT = "pip install 'pytest-roofline[history]'"
LOCK_TIMEOUT = 120.0
NO_COMMIT = "no-commit"


class HistoryStore(Protocol):
    """What the plugin and the ``roofline history`` command need of a store."""

    location: str

    def append(self, points: Sequence[HistoryPoint]) -> int:
        """Add ``points`` (ids already stored are skipped); returns how many were added."""
        ...

    def points(self, test: str | None = None, device_class: str | None = None) -> list[HistoryPoint]:
        """Every stored point (optionally of one test or device class), in time order."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...

    @property
    def notes(self) -> list[str]:
        """One line per stored point or file that could not be read and was skipped."""
        ...


def open_store(url: str | None, default_dir: Path) -> HistoryStore:
    """The store ``url`` names: ``postgresql://``/``postgres://`` → PostgreSQL; ``file://PATH`` or a
    path → the embedded store there; None or empty → the embedded store in ``default_dir``."""
    if url and re.match(r"postgres(ql)?://", url):
        return PostgresStore(url)
    if not url:
        return JsonLinesStore(default_dir)
    path = url[len("file://") :] if url.startswith("file://") else url
    return JsonLinesStore(Path(path).expanduser())


def _slug(text: str) -> str:
    """A file-name-safe form of a device class or commit (no separators, no dots first)."""
    cleaned = re.sub(r"[^A-Za-z0-9._+-]+", "_", text).lstrip(".") or "_"
    return cleaned[:120]


class JsonLinesStore:
    """The embedded store: ``<root>/<device class>/<commit>.jsonl``, one point per line.

    Every file is read bounded and only when it is a regular file inside the store (never through
    a symlink); a line that cannot be read is skipped and named in :attr:`notes`.
    ``lock_timeout`` is how long an append waits for another process's lock on its file (None:
    as long as it takes) before it raises.
    """

    def __init__(self, root: Path, lock_timeout: float | None = LOCK_TIMEOUT) -> None:
        self.root = Path(root)
        self.lock_timeout = lock_timeout
        self.location = str(self.root)
        self.notes: list[str] = []

    def file_for(self, point: HistoryPoint) -> Path:
        """The file that holds ``point``."""
        return (
            self.root / _slug(point.device_class or "unknown") / f"{_slug(point.commit or NO_COMMIT)}.jsonl"
        )

    def append(self, points: Sequence[HistoryPoint]) -> int:
        """Append under the file's own lock (every process of the machine), skipping ids the file
        already holds; every byte is written and fsync'd, or the append raises."""
        import filelock

        from pytest_roofline.files import file_lock

        by_file: dict[Path, list[HistoryPoint]] = {}
        for point in points:
            by_file.setdefault(self.file_for(point), []).append(point)
        added = 0
        for path, items in sorted(by_file.items()):
            try:
                self._folder(path.parent)
                with file_lock(path, self.lock_timeout, keep=True) as lock:
                    known = {p.id for p in self._parse(path, self._text(lock.fd, path))}
                    lines = []
                    for point in items:
                        if point.id not in known:
                            known.add(point.id)
                            lines.append(json.dumps(point.to_dict(), sort_keys=True, allow_nan=False))
                    if lines:
                        self._append_lines(lock.fd, lines)
                        added += len(lines)
            except filelock.Timeout:
                raise RooflineError(
                    f"history {path} stayed locked for {self.lock_timeout:g} s by another process; "
                    f"{added} of {len(points)} points added"
                ) from None
            except OSError as exc:
                why = "a symlink, never written through" if exc.errno == errno.ELOOP else exc.strerror or exc
                raise RooflineError(
                    f"history {path} cannot be written ({why}); {added} of {len(points)} points added"
                ) from None
        return added

    def _folder(self, folder: Path) -> None:
        """Create a device class's folder; it must be a real folder inside the store."""
        folder.mkdir(parents=True, exist_ok=True)
        if folder.is_symlink() or not folder.resolve().is_relative_to(self.root.resolve()):
            raise OSError(errno.ELOOP, "a symlink", str(folder))

    @staticmethod
    def _append_lines(fd: int, lines: list[str]) -> None:
        from pytest_roofline.files import write_all

        data = ("\n".join(lines) + "\n").encode()
        # a line torn by a crash mid-write ends without "\n": cut it (we hold the lock; the
        # write it belonged to never completed, and its writer's retry appends it again)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            tail = os.pread(fd, min(size, 1 << 20), max(size - (1 << 20), 0))
            cut = tail.rfind(b"\n")
            size = size - len(tail) + cut + 1  # cut = -1: the whole tail
            os.ftruncate(fd, size)
        os.lseek(fd, size, os.SEEK_SET)
        try:
            write_all(fd, data)
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)  # the file as it was: no torn line left for a reader
            raise

    @staticmethod
    def _text(fd: int, path: Path) -> str:
        from pytest_roofline.files import read_descriptor

        try:
            return read_descriptor(fd).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise RooflineError(f"history file {path} cannot be read ({exc})") from None

    def _parse(self, path: Path, text: str) -> list[HistoryPoint]:
        """The points of one file's ``text``; a line that is not a point is named in :attr:`notes`."""
        points = []
        lines = text.splitlines()
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                points.append(HistoryPoint.from_dict(json.loads(line)))
            except json.JSONDecodeError:
                if number == len(lines) and not text.endswith("\n"):
                    continue  # a line torn by a crash: the write it belonged to never completed
                self.notes.append(f"history file {path}, line {number}: not JSON; skipped")
            except (SchemaError, KeyError, TypeError, ValueError) as exc:
                self.notes.append(f"history file {path}, line {number}: {exc}; skipped")
        return points

    def _read(self, path: Path) -> list[HistoryPoint]:
        """The points of ``path``; a file that is not a regular file of the store is named and skipped."""
        from pytest_roofline.files import read_document

        try:
            return self._parse(path, read_document(path, follow_symlinks=False))
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as exc:
            why = "a symlink" if isinstance(exc, OSError) and exc.errno == errno.ELOOP else exc
            self.notes.append(f"history file {path} cannot be read ({why}); skipped")
            return []

    def points(self, test: str | None = None, device_class: str | None = None) -> list[HistoryPoint]:
        """Every point in the folder (one device class's folder when asked), in time order."""
        if not self.root.is_dir():
            return []
        folders = [self.root / _slug(device_class)] if device_class else sorted(self.root.iterdir())
        found: dict[str, HistoryPoint] = {}
        for folder in folders:
            if folder.is_symlink() or not folder.is_dir():
                if folder.is_symlink():
                    self.notes.append(f"history folder {folder} is a symlink; skipped")
                continue
            for path in sorted(folder.glob("*.jsonl")):
                for point in self._read(path):
                    if test is None or point.test == test:
                        found.setdefault(point.id, point)
        return sorted(found.values(), key=lambda p: p.order)

    def close(self) -> None:
        """Nothing to release."""


#: schema version → the statements that produce it from the version before.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE IF NOT EXISTS roofline_points (
            id text PRIMARY KEY,
            test text NOT NULL,
            key text NOT NULL,
            device_class text NOT NULL,
            series text NOT NULL,
            commit_sha text,
            time text NOT NULL,
            value double precision NOT NULL,
            data jsonb NOT NULL,
            inserted timestamptz NOT NULL DEFAULT now()
        )""",
        "CREATE INDEX IF NOT EXISTS roofline_points_series ON roofline_points (series, time)",
        "CREATE INDEX IF NOT EXISTS roofline_points_test ON roofline_points (test)",
    ),
}
HISTORY_STORE_SCHEMA = max(MIGRATIONS)
MIGRATION_LOCK = 0x726F6F66  # the advisory lock every migrating writer takes ("roof")


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise RooflineError(f"a PostgreSQL history needs psycopg 3: {EXTRA_HINT}") from None
    return psycopg


#: Seconds a connection may take (the server that never answers: the whole run waits this once).
CONNECT_TIMEOUT = 2
#: Milliseconds one statement may run on the server.
STATEMENT_TIMEOUT_MS = 30_000
#: URLs that could not be connected to in this process, with the one line that said why.
_UNREACHABLE: dict[str, str] = {}
_SECRET_KEYS = ("password", "passfile", "sslpassword", "sslkey")


def mask_url(url: str) -> str:
    """``url`` with every secret masked: the userinfo password and the query's ``password=``,
    ``passfile=``, ``sslpassword=`` and ``sslkey=`` values."""
    masked = re.sub(r"(//[^:/@?#]*):[^@/?#]*@", r"\1:***@", url)
    keys = "|".join(_SECRET_KEYS)
    return re.sub(rf"(?i)([?&](?:{keys})=)[^&#]*", r"\1***", masked)


def _secrets(url: str) -> list[str]:
    """The secret values ``url`` and the environment (``PGPASSWORD``) hold, longest first."""
    from urllib.parse import parse_qsl, unquote, urlsplit

    found = [os.environ.get("PGPASSWORD", "")]
    with contextlib.suppress(ValueError):
        parts = urlsplit(url)
        found += [parts.password or "", unquote(parts.password or "")]
        found += [value for key, value in parse_qsl(parts.query) if key.lower() in _SECRET_KEYS]
    return sorted({s for s in found if len(s) >= 3}, key=len, reverse=True)


class PostgresStore:
    """The PostgreSQL store (psycopg 3), migrated to :data:`HISTORY_STORE_SCHEMA` when opened.

    A connection takes at most :data:`CONNECT_TIMEOUT` seconds (unless the URL sets its own
    ``connect_timeout``) and a statement :data:`STATEMENT_TIMEOUT_MS`; a URL that could not be
    reached is not tried again in the same process.  No secret of the URL is ever printed.
    """

    def __init__(self, url: str) -> None:
        self.location = mask_url(url)
        self.notes: list[str] = []
        self._secrets = _secrets(url)
        if url in _UNREACHABLE:
            raise RooflineError(_UNREACHABLE[url])
        psycopg = _psycopg()
        settings: dict[str, Any] = {} if "connect_timeout=" in url else {"connect_timeout": CONNECT_TIMEOUT}
        try:
            self._conn: Any = psycopg.connect(url, **settings)
            # a session setting, not a startup option: a pooler such as PgBouncer refuses those
            timeout = f"{STATEMENT_TIMEOUT_MS}ms"
            self._conn.execute("SELECT set_config('statement_timeout', %s, false)", (timeout,))
            self._conn.commit()
        except Exception as exc:  # noqa: BLE001 - psycopg.Error, by module (see _is_psycopg)
            if not _is_psycopg(exc):
                raise
            _UNREACHABLE[url] = f"history {self.location}: cannot connect ({self._first(exc)})"
            raise RooflineError(_UNREACHABLE[url]) from None
        self.migrate()

    def _first(self, exc: BaseException) -> str:
        """The first line of ``exc``, its secrets masked."""
        text = _first(exc)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def migrate(self) -> int:
        """Bring the schema to :data:`HISTORY_STORE_SCHEMA` (one writer at a time); returns the version."""
        _psycopg()
        try:
            with self._conn.transaction():
                self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                self._conn.execute(
                    "CREATE TABLE IF NOT EXISTS roofline_schema_version (version integer NOT NULL)"
                )
                row = self._conn.execute("SELECT max(version) FROM roofline_schema_version").fetchone()
                current = int(row[0]) if row and row[0] is not None else 0
                if current > HISTORY_STORE_SCHEMA:
                    raise RooflineError(
                        f"history {self.location} has schema {current}, newer than this version's "
                        f"{HISTORY_STORE_SCHEMA}; upgrade pytest-roofline"
                    )
                for version in range(current + 1, HISTORY_STORE_SCHEMA + 1):
                    for statement in MIGRATIONS[version]:
                        self._conn.execute(statement)
                    self._conn.execute(
                        "INSERT INTO roofline_schema_version (version) VALUES (%s)", (version,)
                    )
        except Exception as exc:  # noqa: BLE001 - psycopg.Error, by module (see _is_psycopg)
            if not _is_psycopg(exc):
                raise
            raise RooflineError(
                f"history {self.location}: cannot migrate the schema ({self._first(exc)})"
            ) from None
        return HISTORY_STORE_SCHEMA

    def append(self, points: Sequence[HistoryPoint]) -> int:
        """Insert in one transaction; an id already stored is skipped (ON CONFLICT DO NOTHING)."""
        _psycopg()
        from psycopg.types.json import Jsonb

        added = 0
        try:
            with self._conn.transaction(), self._conn.cursor() as cursor:
                for point in points:
                    cursor.execute(
                        "INSERT INTO roofline_points (id, test, key, device_class, series, commit_sha, time, "
                        "value, data) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
                        "ON CONFLICT (id) DO NOTHING",
                        (
                            point.id,
                            point.test,
                            point.key,
                            point.device_class,
                            point.series,
                            point.commit,
                            point.time,
                            point.value,
                            Jsonb(point.to_dict()),
                        ),
                    )
                    added += max(cursor.rowcount, 0)
        except Exception as exc:  # noqa: BLE001 - psycopg.Error, by module (see _is_psycopg)
            if not _is_psycopg(exc):
                raise
            raise RooflineError(f"history {self.location}: cannot write ({self._first(exc)})") from None
        return added

    def points(self, test: str | None = None, device_class: str | None = None) -> list[HistoryPoint]:
        """Every stored point (filtered in SQL), in time order."""
        _psycopg()
        clauses, params = [], []
        if test is not None:
            clauses.append("test = %s")
            params.append(test)
        if device_class is not None:
            clauses.append("device_class = %s")
            params.append(device_class)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        try:
            rows = self._conn.execute(
                f"SELECT data FROM roofline_points{where} ORDER BY time, id",  # noqa: S608 - fixed clauses
                params,
            ).fetchall()
            self._conn.commit()
        except Exception as exc:  # noqa: BLE001 - psycopg.Error, by module (see _is_psycopg)
            if not _is_psycopg(exc):
                raise
            raise RooflineError(f"history {self.location}: cannot read ({self._first(exc)})") from None
        return sorted(self._parse(row[0] for row in rows), key=lambda p: p.order)

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def _parse(self, items: Iterable[Any]) -> Iterable[HistoryPoint]:
        """The points of the rows; a row that is not a point is named in :attr:`notes` and skipped."""
        for item in items:
            data = item
            try:
                data = json.loads(item) if isinstance(item, str) else item
                yield HistoryPoint.from_dict(data)
            except (SchemaError, KeyError, TypeError, ValueError) as exc:
                name = data.get("id") if isinstance(data, dict) else None
                self.notes.append(f"history {self.location}: point {name or '?'!r} {exc}; skipped")


def _first(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _is_psycopg(exc: BaseException) -> bool:
    """Whether ``exc`` is psycopg's: matched by module, not by class, because a psycopg imported
    again (a test that hid it from ``sys.modules``) raises classes of its first import."""
    return type(exc).__module__.split(".")[0] in ("psycopg", "psycopg_binary", "psycopg_c")
