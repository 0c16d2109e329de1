"""What a model change does to memory, from the two graphs alone: the static peak before and
after, and the buffers the new graph keeps alive longer (``roofline diff``'s memory section)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_roofline.fmt import fmt_bytes
from pytest_roofline.memory.estimate import Lifetime, lifetimes, static_memory

if TYPE_CHECKING:
    from pytest_roofline.analysis.types import ModelAnalysis

__all__ = ["MemoryChange", "memory_change"]


@dataclass(frozen=True)
class MemoryChange:
    """The static peaks of two models and the buffers kept alive longer, largest first."""

    old_peak: int
    new_peak: int
    kept_alive: tuple[Lifetime, ...] = ()

    @property
    def growth(self) -> int:
        """Bytes the static peak grew by (negative: shrank)."""
        return self.new_peak - self.old_peak

    def lines(self) -> list[str]:
        """One line for the peak, one per buffer kept alive longer."""
        sign = "+" if self.growth >= 0 else "-"
        head = (
            f"memory (static): peak {fmt_bytes(self.old_peak)} → {fmt_bytes(self.new_peak)} "
            f"({sign}{fmt_bytes(abs(self.growth))})"
        )
        kept = [
            f"+{fmt_bytes(life.bytes)} at {life.producer}: a {'x'.join(map(str, life.shape)) or 'scalar'} "
            f"buffer now kept alive {'to the end' if not life.last_reader else 'until ' + life.last_reader}"
            for life in self.kept_alive
        ]
        return [head, *kept]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``roofline diff --format json``'s ``memory``)."""
        return {
            "old_peak": self.old_peak,
            "new_peak": self.new_peak,
            "peak_change": self.growth,
            "kept_alive": [
                {
                    "tensor": life.tensor,
                    "producer": life.producer,
                    "last_reader": life.last_reader or None,
                    "bytes": life.bytes,
                    "shape": list(life.shape),
                }
                for life in self.kept_alive
            ],
        }


def memory_change(old: ModelAnalysis, new: ModelAnalysis, limit: int = 5) -> MemoryChange:
    """The static memory of ``old`` and ``new`` and the activations ``new`` keeps alive longer: a
    tensor of the same name and producer whose last reader comes later in the schedule (relative
    to the schedule's length), or that became a graph output."""
    before, after = lifetimes(old), lifetimes(new)
    old_length = max((life.end for life in before.values()), default=1) or 1
    new_length = max((life.end for life in after.values()), default=1) or 1
    longer = [
        life
        for name, life in after.items()
        if name in before
        and before[name].producer == life.producer
        and (
            (not life.last_reader and before[name].last_reader)
            or life.end / new_length > before[name].end / old_length + 1e-9
        )
    ]
    longer.sort(key=lambda life: -life.bytes)
    return MemoryChange(static_memory(old).peak, static_memory(new).peak, tuple(longer[:limit]))
