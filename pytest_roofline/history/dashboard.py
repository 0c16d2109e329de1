"""``roofline history html OUT``: one self-contained page (inline JS and SVG, no network)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["render", "write"]


def render(view: dict[str, Any]) -> str:
    """The dashboard page of a :func:`~pytest_roofline.history.view.build_view` view."""
    template = (
        resources.files("pytest_roofline.history").joinpath("templates/dashboard.html").read_text("utf-8")
    )
    from pytest_roofline.report import finite

    payload = json.dumps(finite(view), sort_keys=True, allow_nan=False)
    # inside <script>: no "</" may close the element early, no "<!--" may open a comment
    payload = payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return template.replace("/*HISTORY_DATA*/", payload)


def write(view: dict[str, Any], path: Path) -> None:
    """Write the dashboard atomically."""
    from pytest_roofline.files import atomic_write_text

    atomic_write_text(Path(path), render(view))
