"""Reading the project's JSON documents strictly, and migrating old schema versions forward.

Baseline files and run-results files are read by code that trusts their values: a NaN session
figure once silenced the gate.  So every document is parsed with :func:`loads` (no NaN, no
Infinity, no nesting deep enough to blow the stack), and every field is taken with a typed reader
of this module that raises :class:`SchemaError` naming the field.

Old documents keep working as asv's results do: each format has a list of steps (``data ->
data``, one per version) in the one registry :data:`MIGRATIONS`, which :func:`migrate` applies in
order, so a file written by an older pytest-roofline is read through its migration and rewritten
only when asked to.  A step is written beside the type it knows (``@migration(BASELINE_FILE, 2)``
in gate/baseline.py) and registered when that module is imported, as the module that reads the
format does.

Each format's version constant is named after the format (``*_SCHEMA``) and kept here, in one
table.  Three formats are versioned beside their only reader, as their own kind of step: the
calibration cache (``roofline.calibrate.CALIBRATION_VERSION``: an old cache misses), the history
points (``history.points.POINT_VERSION``) and the PostgreSQL history store's tables
(``history.store.HISTORY_STORE_SCHEMA``, the last of its SQL ``MIGRATIONS``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "BASELINE_FILE",
    "BASELINE_FILE_SCHEMA",
    "CURRENT",
    "MAX_DEPTH",
    "MIGRATIONS",
    "MODEL_SUMMARY_SCHEMA",
    "PROFILE_SCHEMA",
    "RESULTS",
    "RESULTS_SCHEMA",
    "NewerSchema",
    "SchemaError",
    "as_mapping",
    "check_kind",
    "dumps",
    "loads",
    "migrate",
    "migration",
    "read_bool",
    "read_float",
    "read_floats",
    "read_int",
    "read_list",
    "read_mapping",
    "read_optional_float",
    "read_str",
    "read_str_map",
]

#: Deepest nesting a document may have; ours are under 10 deep.
MAX_DEPTH = 64

Migration = Callable[[dict[str, Any]], dict[str, Any]]

# --- the formats' versions (each the version this pytest-roofline writes and reads up to) --------

#: Baseline files (gate/store.py; entries typed by gate/baseline.py).
BASELINE_FILE_SCHEMA = 2
#: Run-results documents (results.py; ``--roofline-report=PATH.json``, ``roofline report``).
#: 3: each result's profile and its layers carry ``memory`` (null where the backend reports none).
RESULTS_SCHEMA = 3
#: A ModelProfile's dictionary (``profile.ModelProfile.to_dict``, ``roofline profile --json``).
PROFILE_SCHEMA = 1
#: The structural model summary a baseline keeps (diff/summary.py).
MODEL_SUMMARY_SCHEMA = 1

# --- the one migration registry ------------------------------------------------------------------

#: The formats whose old documents are migrated forward (names of :data:`MIGRATIONS`' keys).
BASELINE_FILE = "baseline file"
RESULTS = "results"

#: format → {schema version → the step that produces it from the version before}.
MIGRATIONS: dict[str, dict[int, Migration]] = {BASELINE_FILE: {}, RESULTS: {}}
#: format → the version :func:`migrate` brings its documents to.
CURRENT = {BASELINE_FILE: BASELINE_FILE_SCHEMA, RESULTS: RESULTS_SCHEMA}


def migration(fmt: str, version: int) -> Callable[[Migration], Migration]:
    """Register the decorated function as ``fmt``'s step to ``version`` in :data:`MIGRATIONS`."""

    def register(step: Migration) -> Migration:
        steps = MIGRATIONS[fmt]
        known = steps.get(version)
        name = (step.__module__, step.__qualname__)  # the same step again: its module imported anew
        if known is not None and (known.__module__, known.__qualname__) != name:
            raise ValueError(f"two migrations of {fmt} to schema_version {version}")
        steps[version] = step
        return step

    return register


class SchemaError(ValueError):
    """A document or field that is not what its schema says; the message names the field."""


class NewerSchema(SchemaError):
    """A document written by a newer pytest-roofline: never rewritten by this one."""


def _reject_constant(name: str) -> float:
    raise SchemaError(f"{name} is not a number JSON allows")


#: Everything but brackets and quotes, deleted by ``str.translate`` (none of it nests).
_NOT_STRUCTURE = str.maketrans("", "", "".join(chr(c) for c in range(128) if chr(c) not in '[]{}"'))


def _depth(text: str) -> int:
    """Deepest bracket nesting of a JSON text (strings skipped), without recursion.

    Escaped backslashes and quotes go first, then every character but brackets and quotes (all in
    C), so Python walks only those: ~3 ms for a 650 kB baseline file of 24 models, not ~40 ms.
    """
    structure = text.replace("\\\\", "").replace('\\"', "").translate(_NOT_STRUCTURE)
    depth = deepest = 0
    in_string = False
    for char in structure:
        if char == '"':
            in_string = not in_string
        elif in_string:
            continue
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        else:
            depth -= 1
    return deepest


def loads(text: str) -> Any:
    """Parse JSON strictly: NaN/Infinity and nesting beyond :data:`MAX_DEPTH` are errors.

    Raises:
        SchemaError: what is wrong, in one line.
    """
    if _depth(text) > MAX_DEPTH:
        raise SchemaError(f"nested more than {MAX_DEPTH} levels deep")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None


def dumps(data: Any, indent: int | None = 2) -> str:
    """Sorted, strict JSON (diff-friendly; NaN refused rather than written)."""
    return json.dumps(data, indent=indent, sort_keys=True, allow_nan=False)


def migrate(data: dict[str, Any], fmt: str, what: str) -> tuple[dict[str, Any], int]:
    """Bring ``data`` (with its ``schema_version``) up to ``fmt``'s version through its steps.

    ``MIGRATIONS[fmt][n]`` turns a version ``n - 1`` document into version ``n``.  Returns the
    migrated document and the version it was read as.

    Raises:
        SchemaError: no version, a version newer than ``fmt``'s, or a missing step.
    """
    steps, current = MIGRATIONS[fmt], CURRENT[fmt]
    version = data.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise SchemaError(f"{what} has no valid schema_version ({version!r})")
    if version > current:
        raise NewerSchema(
            f"{what} has schema_version {version}, newer than the {current} this pytest-roofline "
            "reads; upgrade pytest-roofline"
        )
    original = version
    while version < current:
        version += 1
        if version not in steps:
            raise SchemaError(f"{what}: no migration to schema_version {version}")
        data = steps[version](dict(data))
        data["schema_version"] = version
    return data, original


def check_kind(data: Mapping[str, Any], kind: str, what: str) -> None:
    """Raise SchemaError when ``data`` is another kind of this tool's documents than ``kind``.

    Documents written before ``kind`` existed are told apart by their keys (a baseline file has
    ``entries``, a results file a ``results`` list).
    """
    found = data.get("kind")
    if found is None:
        found = (
            "baseline" if "entries" in data else "results" if isinstance(data.get("results"), list) else None
        )
    if found is not None and found != kind:
        raise SchemaError(f"it is a {found} document of pytest-roofline, not {what}")


# --- typed field readers ------------------------------------------------------------------------


def as_mapping(value: Any, what: str) -> dict[str, Any]:
    """``value`` as a dict, or a SchemaError naming ``what``."""
    if not isinstance(value, Mapping):
        raise SchemaError(f"{what} must be an object, got {type(value).__name__}")
    return dict(value)


def read_list(data: Mapping[str, Any], key: str) -> list[Any]:
    """``data[key]`` as a list (empty when absent)."""
    value = data.get(key, [])
    if not isinstance(value, list):
        raise SchemaError(f"{key!r} must be a list, got {type(value).__name__}")
    return value


def read_mapping(data: Any, key: str, default: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``data[key]`` as a dict (``default`` when absent)."""
    value = data.get(key, default) if isinstance(data, Mapping) else None
    if value is None and default is not None:
        return dict(default)
    if not isinstance(value, Mapping):
        raise SchemaError(f"{key!r} must be an object, got {type(value).__name__}")
    return dict(value)


def read_str(data: Mapping[str, Any], key: str, default: str | None = None) -> str:
    """``data[key]`` as a string."""
    value = data.get(key, default)
    if not isinstance(value, str):
        raise SchemaError(f"{key!r} must be a string, got {type(value).__name__}")
    return value


def read_bool(data: Mapping[str, Any], key: str, default: bool = False) -> bool:
    """``data[key]`` as a boolean."""
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise SchemaError(f"{key!r} must be true or false, got {value!r}")
    return value


def read_int(data: Mapping[str, Any], key: str, *, minimum: int = 0, maximum: int = 1 << 40) -> int:
    """``data[key]`` as an integer in ``[minimum, maximum]``."""
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise SchemaError(f"{key!r} must be an integer from {minimum} to {maximum}, got {value!r}")
    return value


def _number(value: Any, what: str, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SchemaError(f"{what} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise SchemaError(f"{what} must be a finite {'positive' if positive else 'non-negative'} number")
    return number


def read_float(data: Mapping[str, Any], key: str, *, positive: bool = False) -> float:
    """``data[key]`` as a finite, non-negative (or ``positive``) float."""
    return _number(data.get(key), repr(key), positive)


def read_optional_float(data: Mapping[str, Any], key: str, *, positive: bool = False) -> float | None:
    """``data[key]`` as :func:`read_float`, or None when absent or null."""
    value = data.get(key)
    return None if value is None else _number(value, repr(key), positive)


def read_floats(data: Mapping[str, Any], key: str, *, positive: bool = False) -> tuple[float, ...]:
    """``data[key]`` as a list of finite non-negative (or ``positive``) floats."""
    value = data.get(key, [])
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise SchemaError(f"{key!r} must be a list of numbers, got {type(value).__name__}")
    return tuple(_number(v, f"{key!r}[{i}]", positive) for i, v in enumerate(value))


def read_str_map(data: Mapping[str, Any], key: str) -> dict[str, str]:
    """``data[key]`` as a dict of strings (values stringified only when numbers)."""
    mapping = read_mapping(data, key, {})
    out = {}
    for name, value in mapping.items():
        if isinstance(value, (dict, list)) or value is None:
            raise SchemaError(f"{key!r}[{name!r}] must be a string, got {type(value).__name__}")
        out[str(name)] = str(value)
    return out
