"""Helpers of the history tests: synthetic history points and a real PostgreSQL server."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from pytest_roofline.history.points import HistoryPoint


def point(
    index: int,
    value: float,
    *,
    commit: str | None = None,
    model_hash: str = "m0",
    layers: dict[str, float] | None = None,
    test: str = "tests/test_m.py::test_model",
    device_class: str = "CPU x2",
    writer: str = "",
) -> HistoryPoint:
    """The ``index``-th run of a series (times ordered by index)."""
    return HistoryPoint(
        id=f"{writer}{test}-{index}",
        test=test,
        key=f"{test}|model.onnx|b1|onnxruntime|{device_class}",
        device_class=device_class,
        conditions="c0ffee",
        commit=commit if commit is not None else f"{index:04d}" + "a" * 36,
        time=f"2026-01-01T00:{index // 60:02d}:{index % 60:02d}+00:00",
        value=value,
        ci=(value * 0.99, value * 1.01),
        median=value * 1e-3,
        sessions=(value,),
        scale=1.0,
        layers=dict(layers or {}),
        verdict="pass",
        mode="stored",
        model="model.onnx",
        model_hash=model_hash,
        backend="onnxruntime",
    )


def series(values: Sequence[float], hashes: Sequence[str], **kwargs: object) -> list[HistoryPoint]:
    """Points of one series from values and model hashes."""
    return [point(i, v, model_hash=h, **kwargs) for i, (v, h) in enumerate(zip(values, hashes, strict=True))]  # type: ignore[arg-type]


def _as_unprivileged(command: list[str]) -> list[str]:
    """initdb refuses to run as root: run it as ``nobody`` then (CI runs as root)."""
    if os.geteuid() != 0:
        return command
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.skip("PostgreSQL's initdb refuses root and runuser is missing")
    return [runuser, "-u", "nobody", "--", *command]


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL server for the session: initdb + pg_ctl on a temp dir, Unix socket only."""
    # on PATH, else where Debian's postgresql package puts them
    debian = ":".join(sorted(str(p) for p in Path("/usr/lib/postgresql").glob("*/bin")))
    initdb = shutil.which("initdb") or shutil.which("initdb", path=debian)
    pg_ctl = shutil.which("pg_ctl") or shutil.which("pg_ctl", path=debian)
    if initdb is None or pg_ctl is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not on PATH")
    pytest.importorskip("psycopg", reason="psycopg 3 is not installed (the history extra)")
    folder = Path(tempfile.mkdtemp(prefix="roofline-pg-"))
    folder.chmod(0o777)
    if os.geteuid() == 0:
        shutil.chown(folder, "nobody")
    data = folder / "data"
    init = subprocess.run(
        _as_unprivileged([initdb, "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"]),
        capture_output=True,
        text=True,
        check=False,
    )
    if init.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        pytest.skip(f"initdb failed: {init.stderr.strip().splitlines()[-1:]}")
    options = f"-k {folder} -c listen_addresses='' -c fsync=off -c max_connections=50"
    start = subprocess.run(
        _as_unprivileged([pg_ctl, "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w", "start"]),
        capture_output=True,
        text=True,
        check=False,
    )
    if start.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        pytest.skip(f"pg_ctl start failed: {start.stderr.strip()}")
    try:
        yield f"postgresql://postgres@/postgres?host={folder}"
    finally:
        subprocess.run(
            _as_unprivileged([pg_ctl, "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True,
            check=False,
        )
        shutil.rmtree(folder, ignore_errors=True)
