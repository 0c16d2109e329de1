"""Application spans: time the pre/post-processing around a model, one LatencyStats per name.

>>> spans = Spans()
>>> for _ in range(3):
...     with spans("preprocess"):
...         pass
>>> spans.stats()["preprocess"].n
3
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_roofline.measure.stats import LatencyStats

__all__ = ["Spans"]


class Spans:
    """Named wall-clock spans; ``with spans("name"): ...`` records one sample per entry."""

    def __init__(self) -> None:
        self._samples: dict[str, list[float]] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        """Time the block under ``name`` (recorded even when the block raises)."""
        if not isinstance(name, str) or not name:
            raise ValueError("a span needs a non-empty name")
        start = time.perf_counter()
        try:
            yield
        finally:
            self._samples.setdefault(name, []).append(time.perf_counter() - start)

    def record(self, name: str, seconds: float) -> None:
        """Add one sample measured elsewhere."""
        self._samples.setdefault(name, []).append(float(seconds))

    def __bool__(self) -> bool:
        return bool(self._samples)

    def stats(self) -> dict[str, LatencyStats]:
        """Statistics per span name, in the order the spans first ran."""
        from pytest_roofline.measure.stats import LatencyStats

        return {name: LatencyStats.from_samples(values) for name, values in self._samples.items() if values}
