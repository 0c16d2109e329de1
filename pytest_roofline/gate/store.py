"""The baseline files: one JSON file per test module, read strictly, written atomically under a lock.

``.roofline/tests/test_perf.json`` holds the entries of ``tests/test_perf.py``.  Files are written
with sorted keys and indentation (diff-friendly), atomically (temp file + ``os.replace``) under a
file lock, merged with what is on disk at write time.  Nothing is lost on a write: an entry this
version cannot read is kept exactly as it was unless the run replaces it, a file of a newer schema
is never rewritten, and an unreadable file that ``--roofline-update`` replaces is kept beside it
as ``<name>.corrupt``.  A schema-1 file is read through its migration and rewritten as the
current schema only when something is written to it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_roofline.errors import BaselineError, RooflineError
from pytest_roofline.files import atomic_write_text, file_lock, read_document
from pytest_roofline.gate.baseline import BaselineEntry, module_of
from pytest_roofline.schema import (
    BASELINE_FILE,
    BASELINE_FILE_SCHEMA,
    NewerSchema,
    SchemaError,
    check_kind,
    dumps,
    loads,
    migrate,
)

if TYPE_CHECKING:
    from pytest_roofline.gate.types import ModelStoreLike
    from pytest_roofline.gate.verdict import Verdict

__all__ = [
    "BASELINE_KIND",
    "BaselineFile",
    "BaselineStore",
    "RunRecord",
    "Written",
    "find_stale",
    "write_baselines",
]

#: The ``kind`` of a baseline file (beside its ``schema_version``).
BASELINE_KIND = "baseline"

LOCK_TIMEOUT = 120.0
CORRUPT_SUFFIX = ".corrupt"


@dataclass(frozen=True)
class BaselineFile:
    """One baseline file as read: its valid entries, and the entries it holds that are malformed.

    ``malformed`` maps a key to (the entry's JSON exactly as found, the reason); ``version`` is
    the schema version the file was written with (0 when the file does not exist).
    """

    path: Path
    entries: dict[str, BaselineEntry] = field(default_factory=dict)
    malformed: dict[str, tuple[Any, str]] = field(default_factory=dict)
    version: int = 0

    def problem(self, key: str) -> str | None:
        """The one-line reason entry ``key`` cannot be used, or None."""
        if key not in self.malformed:
            return None
        return (
            f"baseline file {self.path} has a malformed entry {key!r} ({self.malformed[key][1]}); "
            "rewrite it with --roofline-update"
        )


class BaselineStore:
    """The baseline files under one directory."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.notes: list[str] = []  # what a write kept or moved aside, for the run's summary
        self._documents: dict[Path, dict[str, Any]] = {}  # each file's entries as JSON

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

    def read_file(self, path: Path) -> BaselineFile:
        """One file, entry by entry.

        Raises:
            BaselineError: the file is unreadable, not JSON, not a baseline file, or of a newer
                schema (a malformed *entry* is reported in :attr:`BaselineFile.malformed` instead).
        """
        entries, version = self._read_document(path)
        good, bad = {}, {}
        for key, raw in entries.items():
            parsed = _parse_entry(key, raw)
            if isinstance(parsed, BaselineEntry):
                good[key] = parsed
            else:
                bad[key] = (raw, parsed)
        return BaselineFile(path, good, bad, version)

    def _read_document(self, path: Path) -> tuple[dict[str, Any], int]:
        """A file's entries as JSON (after any migration) and its schema version ({} and 0 when
        the file does not exist).  Raises :class:`BaselineError` as :meth:`read_file` does."""
        self.check_directory()
        try:
            text = read_document(path)
        except FileNotFoundError:
            return {}, 0
        except (OSError, UnicodeDecodeError) as exc:
            raise BaselineError(f"baseline file {path} cannot be read ({exc})") from None
        try:
            data = loads(text)
            if not isinstance(data, dict):
                raise SchemaError(f"the document is a {type(data).__name__}, not an object")
            check_kind(data, BASELINE_KIND, "a baseline file")
            data, version = migrate(data, BASELINE_FILE, f"baseline file {path}")
            entries = data.get("entries", {})
            if not isinstance(entries, dict):
                raise SchemaError(f"'entries' is a {type(entries).__name__}, not an object")
        except NewerSchema as exc:
            raise BaselineError(str(exc)) from None
        except SchemaError as exc:
            raise BaselineError(
                f"baseline file {path} is corrupt ({exc}); "
                "fix or delete it, or rewrite it with --roofline-update"
            ) from None
        return entries, version

    def _document(self, path: Path) -> dict[str, Any]:
        """:meth:`_read_document`'s entries, cached for the life of this store (until a write)."""
        if path not in self._documents:
            self._documents[path] = self._read_document(path)[0]
        return self._documents[path]

    def read(self, path: Path) -> dict[str, BaselineEntry]:
        """The entries of one file ({} if it does not exist); raises on any malformed entry."""
        file = self.read_file(path)
        for key in file.malformed:
            raise BaselineError(file.problem(key) or key)
        return file.entries

    def get(self, key: str, test: str) -> BaselineEntry | None:
        """The entry ``key`` of ``test``'s module file, or None.

        Only that entry is parsed: one test of a module of many models reads its own figures,
        not every entry's layers (the file's JSON is parsed once per run).

        Raises:
            BaselineError: the file is not usable, or this entry in it is malformed.
        """
        path = self.file_for(test)
        raw = self._document(path).get(key)
        if raw is None:
            return None
        parsed = _parse_entry(key, raw)
        if not isinstance(parsed, BaselineEntry):
            raise BaselineError(BaselineFile(path, malformed={key: (raw, parsed)}).problem(key) or key)
        return parsed

    def owners(self, path: Path) -> dict[str, tuple[str, str, str]]:
        """Each entry's (test, backend, device class) by key, read from the file's JSON without
        parsing the entries (entries without those three strings are left out)."""
        owners = {}
        for key, raw in self._document(path).items():
            if not isinstance(raw, dict):
                continue
            test, backend, device = raw.get("test"), raw.get("backend"), raw.get("device_class")
            if isinstance(test, str) and isinstance(backend, str) and isinstance(device, str):
                owners[key] = (test, backend, device)
        return owners

    def all_entries(self) -> dict[str, BaselineEntry]:
        """Every entry of every file (raises on an unusable file or entry)."""
        entries: dict[str, BaselineEntry] = {}
        for path in self.files():
            entries.update(self.read(path))
        return entries

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """The directory's write lock; file-system failures become one-line BaselineErrors."""
        import filelock

        self.check_directory()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with file_lock(self.directory, LOCK_TIMEOUT):  # the folder itself: every user, no file
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

    def _current(self, path: Path, force: bool) -> BaselineFile:
        """What is on disk before a write; an unreadable file is moved aside only when forced."""
        try:
            return self.read_file(path)
        except BaselineError:
            if not force or self._newer(path):
                raise
        aside = path.with_name(path.name + CORRUPT_SUFFIX)
        os.replace(path, aside)
        self.notes.append(f"unreadable baseline file {path} was replaced; its old content is in {aside}")
        return BaselineFile(path)

    @staticmethod
    def _newer(path: Path) -> bool:
        """Whether ``path`` was written by a newer pytest-roofline (never rewritten by this one)."""
        try:
            data = loads(read_document(path))
            version = data.get("schema_version") if isinstance(data, dict) else None
            return isinstance(version, int) and version > BASELINE_FILE_SCHEMA
        except (OSError, UnicodeDecodeError, SchemaError):
            return False

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
            force: replace an unreadable file (kept aside as ``<name>.corrupt``) and malformed
                entries of the same keys; a file of a newer schema is never rewritten.
        """
        by_file: dict[Path, list[BaselineEntry]] = {}
        for entry in entries:
            by_file.setdefault(self.file_for(entry.test), []).append(entry)
        written = []
        with self._lock():
            for path, group in sorted(by_file.items()):
                current = self._current(path, force)
                merged: dict[str, Any] = {k: raw for k, (raw, _) in current.malformed.items()}
                merged.update(current.entries)
                changed = False
                for entry in group:
                    if entry.key in current.malformed and not force:
                        continue  # never overwrite what we could not read unless asked to
                    if entry.key in merged and not replace_existing:
                        continue
                    merged[entry.key] = entry.succeed(current.entries.get(entry.key))
                    changed = True
                kept = sorted(k for k in current.malformed if not isinstance(merged[k], BaselineEntry))
                if changed:
                    self._dump(path, merged)
                    written.append(path)
                    self.notes.extend(f"kept malformed entry {k!r} of {path} as it was" for k in kept)
                self._forget(path)
        return written

    def remove(self, keys: Iterable[str]) -> list[str]:
        """Delete entries by key from every file; returns the keys removed."""
        wanted = set(keys)
        removed: list[str] = []
        with self._lock():
            for path in self.files():
                current = self.read_file(path)
                merged: dict[str, Any] = {k: raw for k, (raw, _) in current.malformed.items()}
                merged.update(current.entries)
                gone = sorted(set(merged) & wanted)
                if not gone:
                    continue
                for key in gone:
                    del merged[key]
                removed.extend(gone)
                if merged:
                    self._dump(path, merged)
                else:
                    path.unlink()
                self._forget(path)
        return sorted(removed)

    def _forget(self, path: Path) -> None:
        """Drop what was cached of ``path`` (it was just written)."""
        self._documents.pop(path, None)

    @staticmethod
    def _dump(path: Path, entries: Mapping[str, Any]) -> None:
        data = {
            "kind": BASELINE_KIND,
            "schema_version": BASELINE_FILE_SCHEMA,
            "tool": "pytest-roofline",
            "entries": {
                key: value.to_dict() if isinstance(value, BaselineEntry) else value
                for key, value in sorted(entries.items())
            },
        }
        atomic_write_text(path, _one_line_layers(data) + "\n")


def _parse_entry(key: str, raw: Any) -> BaselineEntry | str:
    """The entry ``raw`` stored under ``key``, or why it is malformed (one line)."""
    try:
        entry = BaselineEntry.from_dict(raw)
    except SchemaError as exc:
        return str(exc)
    return entry if entry.key == key else f"its 'key' is {entry.key!r}"


# --- the store's policy at the end of a run --------------------------------------------------------


class RunRecord(Protocol):
    """What the store's policy reads of a run's record (:class:`~pytest_roofline.results.ProfileRecord`)."""

    @property
    def test(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def entry(self) -> BaselineEntry | None: ...
    @property
    def outcome(self) -> str: ...
    @property
    def verdict(self) -> Verdict: ...


@dataclass
class Written:
    """What :func:`write_baselines` wrote: files, the entries in them, the files it could not write."""

    paths: list[Path] = field(default_factory=list)
    entries: list[BaselineEntry] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def write_baselines(
    store: BaselineStore,
    records: Sequence[RunRecord],
    *,
    update: bool,
    models: Callable[[], ModelStoreLike | None],
    rootdir: Path,
) -> Written:
    """Write the run's baselines once, at the end: under ``update`` every entry the tests that ran
    produced, else only first baselines (new here, or of another device class than those recorded).
    The models of the entries written go to the model store (``models()``, asked only then): a later
    changed model is timed against them."""
    ran = [r for r in records if r.entry is not None and r.outcome != "skipped"]
    chosen: Sequence[BaselineEntry]
    if update:
        chosen, replace = [r.entry for r in ran if r.entry], True
    else:
        firsts = ("new", "incomparable")
        chosen, replace = [r.entry for r in ran if r.entry and r.verdict.status in firsts], False
    by_file: dict[Path, list[BaselineEntry]] = {}
    for entry in chosen:
        by_file.setdefault(store.file_for(entry.test), []).append(entry)
    done = Written()
    for path, entries in sorted(by_file.items()):
        try:
            written = store.write(entries, replace_existing=replace, force=update)
        except (BaselineError, OSError) as exc:
            done.errors.append(f"baselines not written to {path}: {exc}")
            continue
        done.paths.extend(written)
        if written:
            done.entries.extend(entries)
            keep_models(store, models(), entries, rootdir)
    return done


def keep_models(
    store: BaselineStore, models: ModelStoreLike | None, entries: Sequence[BaselineEntry], rootdir: Path
) -> None:
    """Put the recorded models in the model store: a later changed model is timed against them."""
    if models is None:
        return
    for model in sorted({e.model for e in entries if e.identity is not None}):
        path = Path(model) if Path(model).is_absolute() else rootdir / model
        try:
            models.put(path)
        except (RooflineError, OSError) as exc:
            store.notes.append(
                f"{model} not kept in the model store ({exc}); a changed model will be compared "
                "with the stored figures"
            )


def find_stale(
    store: BaselineStore,
    records: Sequence[RunRecord],
    collected: set[str],
    backends_used: set[tuple[str, str]],
    narrowed: Collection[str] = (),
) -> list[str]:
    """Entries this run could have produced and did not: same backend and device class as a
    measurement of this run, test module run, test selected (or gone from the module).

    ``narrowed``: modules collected in part (named by node id, ``test_x.py::test_y[a]``): a test of
    theirs that was not collected was not asked for, not gone, so only the tests that ran count.
    """
    if not collected or not backends_used:
        return []
    produced = {r.key for r in records}
    producing_tests = {r.test for r in records}
    modules = {module_of(t) for t in collected}
    stale = []
    for path in {store.file_for(t) for t in collected}:
        try:
            owners = store.owners(path)  # read already by this run's requests
        except BaselineError:
            continue
        for key, (test, backend, device_class) in owners.items():
            module = module_of(test)
            if module not in modules or key in produced:
                continue
            if (backend, device_class) not in backends_used:
                continue  # another backend's or device's baseline: this run says nothing of it
            gone = test not in collected and module not in narrowed
            if gone or test in producing_tests:
                stale.append(key)
    return sorted(stale)


def _one_line_layers(data: dict[str, Any]) -> str:
    """Sorted, indented JSON with each stored layer on one line.

    Per-layer records are most of a baseline file (40-60 % of the example suite's; a 222-layer
    encoder's layers alone are 4 000 lines indented): one line each makes a re-recorded baseline's
    diff one line per layer that moved.  Any JSON reader reads it as before.
    """
    import json
    import re
    import secrets

    nonce = secrets.token_hex(8)  # no stored name can spell a placeholder it does not know
    one_line = json.JSONEncoder(sort_keys=True, allow_nan=False).encode  # dumps(indent=None), built once
    name_of = json.encoder.encode_basestring_ascii  # a key as dumps writes it
    blocks: list[str] = []  # each entry's layers object, as dumps(indent=2) would nest it
    entries = dict(data.get("entries", {}))
    for key, entry in entries.items():
        layers = entry.get("layers") if isinstance(entry, dict) else None
        if not isinstance(layers, dict) or not all(isinstance(v, dict) for v in layers.values()):
            continue  # a malformed entry is written as it was
        if not layers:
            continue  # "{}", as dumps writes it
        rows = ",\n".join(f"        {name_of(name)}: {one_line(layers[name])}" for name in sorted(layers))
        blocks.append("{\n" + rows + "\n      }")
        entries[key] = {**entry, "layers": f"\x00layers {nonce} {len(blocks) - 1}\x00"}
    text = dumps({**data, "entries": entries})
    placeholder = re.compile(rf'(?<=: )"\\u0000layers {nonce} (\d+)\\u0000"')
    return placeholder.sub(lambda match: blocks[int(match[1])], text)  # one pass: linear in the file
