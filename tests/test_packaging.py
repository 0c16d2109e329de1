"""pyproject.toml's extras: ``[all]`` installs everything a CPU machine can use."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _resolve(extras: dict[str, list[str]], name: str) -> set[str]:
    """The requirements of extra ``name``, self-references (``pytest-roofline[a,b]``) expanded."""
    out: set[str] = set()
    for requirement in extras[name]:
        if requirement.startswith("pytest-roofline["):
            for inner in requirement[len("pytest-roofline[") : requirement.index("]")].split(","):
                out |= _resolve(extras, inner.strip())
        else:
            out.add(requirement)
    return out


def test_all_extra_covers_every_cpu_extra_including_the_history() -> None:
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    everything = _resolve(extras, "all")
    for cpu_extra in ("openvino", "reports", "history"):
        assert set(extras[cpu_extra]) <= everything, f"[all] leaves out [{cpu_extra}]"
