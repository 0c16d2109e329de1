"""What every document this package writes is stamped with: the package's version and the time.

A leaf: it imports nothing of the package, so the gate, the results and the CLI all read it
without an import running back up to the package's ``__init__``.
"""

from __future__ import annotations

from datetime import datetime, timezone

__all__ = ["__version__", "now"]

__version__ = "0.1.0"


def now() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
