"""A deterministic fake backend for testing plugin logic (never for measuring anything).

Each inference "takes" ``unit`` seconds per ONNX node of the model, so a model with more nodes
is slower by a known factor and the gate's verdicts can be tested exactly.  ``jitter`` adds
seeded per-session noise.  Nothing sleeps, unless ``hang=S`` makes ``time()`` sleep S seconds, or
``sleep=S`` makes each inference sleep S seconds and report what it slept (a fixed query time).
Enable it with ``-p pytest_roofline.backends.fake``
(it registers the backends ``fake`` and ``fake-missing``, the latter never available).
"""

from __future__ import annotations

import itertools
import os
import time
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from pytest_roofline.errors import BackendError
from pytest_roofline.model import load_model

from .base import BUILTIN_BACKENDS, Backend, BackendSession, KernelProfile, KernelRecord

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pytest_roofline.model import ModelSpec

__all__ = ["FakeBackend", "FakeMissingBackend", "FakeSession", "register"]

_SESSION_SEED = itertools.count()


class FakeSession(BackendSession):
    """A fake opened model: times derive from the node count."""

    def __init__(
        self, nodes: list[tuple[str, str]], unit: float, jitter: float, seed: int, log: str | None = None
    ) -> None:
        self.nodes = nodes
        self.log = log
        self.unit = unit
        rng = np.random.default_rng(seed)
        self.factor = 1.0 + (jitter * float(rng.standard_normal()) if jitter else 0.0)
        self._rng = rng
        self.jitter = jitter
        self.hang = 0.0
        self.sleep = 0.0

    def time(self, iterations: int) -> list[float]:
        """Seconds per inference: ``unit × nodes × session factor`` (± small jitter); with ``sleep``,
        each inference sleeps that long, times it and reports it."""
        if self.hang:
            time.sleep(self.hang)
        if self.sleep:
            return [self._slept() for _ in range(iterations)]
        if self.log:
            start = time.time()
            time.sleep(0.001)
            with open(self.log, "a", encoding="utf-8") as handle:
                handle.write(f"{os.getpid()} {start} {time.time()}\n")
        base = self.unit * max(len(self.nodes), 1) * max(self.factor, 0.05)
        if not self.jitter:
            return [base] * iterations
        noise = 1.0 + 0.1 * self.jitter * np.abs(self._rng.standard_normal(iterations))
        return [float(base * x) for x in noise]

    def _slept(self) -> float:
        began = time.perf_counter()
        time.sleep(self.sleep)
        return time.perf_counter() - began

    def profile(self, iterations: int) -> KernelProfile:
        """One kernel per node, each taking ``unit`` seconds."""
        kernels = tuple(
            KernelRecord(name, op, (name,), tuple([self.unit] * iterations)) for name, op in self.nodes
        )
        return KernelProfile(kernels=kernels, iterations=iterations)

    def outputs(self) -> dict[str, np.ndarray]:
        """No outputs: the fake computes nothing."""
        return {}


class FakeBackend(Backend):
    """Deterministic fake backend (tests of plugin logic only)."""

    name: ClassVar[str] = "fake"
    extra: ClassVar[str] = "test"
    options_help: ClassVar[dict[str, str]] = {
        "unit": "seconds per ONNX node per inference (default 1e-4)",
        "jitter": "relative per-session noise (default 0)",
        "fail": "raise a BackendError when opening a model (any value)",
        "device": "device class reported in the fingerprint",
        "log": "append 'pid start end' of every time() call to this file",
        "hang": "time() sleeps this many seconds (a backend that hangs)",
        "sleep": "each inference sleeps this many seconds and reports them (a fixed real query time)",
        "wall_clock": "measure under the machine-wide measure lock, as a real backend (any value)",
    }

    @property
    def wall_clock(self) -> bool:  # type: ignore[override]
        """False: its times are synthetic, load cannot disturb them, and it neither waits for nor
        holds the machine's measure lock; ``wall_clock=1`` makes it take part (tests of the lock)."""
        return "wall_clock" in self.options

    @classmethod
    def available(cls) -> bool:
        """Always available."""
        return True

    def version(self) -> str:
        """A fixed version."""
        return "fake-1.0"

    def fingerprint(self) -> dict[str, Any]:
        """A fixed fingerprint (device class from the ``device`` option)."""
        return {"backend": "fake", "device_name": self.options.get("device", "fake-device")}

    def open(self, spec: ModelSpec, inputs: Mapping[str, np.ndarray]) -> FakeSession:
        """Read the node list of the model."""
        if "fail" in self.options:
            raise BackendError(f"fake backend cannot open {spec.name}: fail option set")
        model = load_model(spec.source)
        nodes = [
            (node.name or f"{node.op_type}_{i}", node.op_type) for i, node in enumerate(model.graph.node)
        ]
        unit = float(self.options.get("unit", 1e-4))
        jitter = float(self.options.get("jitter", 0.0))
        session = FakeSession(nodes, unit, jitter, next(_SESSION_SEED), self.options.get("log"))
        session.hang = float(self.options.get("hang", 0.0))
        session.sleep = float(self.options.get("sleep", 0.0))
        return session


class FakeMissingBackend(FakeBackend):
    """A fake backend that is never installed (tests the skip path)."""

    name: ClassVar[str] = "fake-missing"

    @classmethod
    def available(cls) -> bool:
        """Never available."""
        return False


def register() -> None:
    """Make ``fake`` and ``fake-missing`` known to :func:`~pytest_roofline.backends.base.get_backend`."""
    BUILTIN_BACKENDS.setdefault("fake", f"{__name__}:FakeBackend")
    BUILTIN_BACKENDS.setdefault("fake-missing", f"{__name__}:FakeMissingBackend")


def pytest_configure(config: Any) -> None:
    """pytest hook: register the fake backends when loaded with ``-p pytest_roofline.backends.fake``."""
    register()
