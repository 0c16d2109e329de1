"""What a model change does to memory, from the two graphs alone: the static peak before and
after, and the buffers the new graph keeps alive longer (``roofline diff``'s memory section)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_roofline.fmt import fmt_bytes
from pytest_roofline.memory.estimate import Lifetime, lifetimes, main_steps, static_memory

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pytest_roofline.analysis.types import ModelAnalysis

#: A schedule's node names in order and each activation's life over it, by tensor.
Lives = tuple["Sequence[str]", "Mapping[str, Lifetime]"]

__all__ = [
    "MODEL_GRAPH",
    "Lives",
    "MemoryChange",
    "accounting_for",
    "byte_change",
    "describe_kept",
    "kept_longer",
    "memory_change",
]


#: What a :class:`MemoryChange`'s peaks are estimated over when no backend ran the models.
MODEL_GRAPH = "the model's graph"


@dataclass(frozen=True)
class MemoryChange:
    """The estimated peaks of two models and the buffers kept alive longer, largest first.

    ``basis``: the graphs the peaks are planned over (:data:`MODEL_GRAPH`, or the graphs a backend
    ran, whose layouts and fusions the model's graph does not show); ``old_measured`` and
    ``new_measured``: the requested peaks a profiled run measured beside them (0: none ran)."""

    old_peak: int
    new_peak: int
    kept_alive: tuple[Lifetime, ...] = ()
    basis: str = MODEL_GRAPH
    old_measured: int = 0
    new_measured: int = 0

    @property
    def growth(self) -> int:
        """Bytes the static peak grew by (negative: shrank)."""
        return self.new_peak - self.old_peak

    def lines(self) -> list[str]:
        """One line for the peak, one per buffer kept alive longer."""
        head = f"memory (estimated over {self.basis}): peak {byte_change(self.old_peak, self.new_peak)}"
        if self.old_measured and self.new_measured:
            head += f"; measured requested peak {byte_change(self.old_measured, self.new_measured)}"
        return [head, *map(describe_kept, self.kept_alive)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``roofline diff --format json``'s ``memory``)."""
        return {
            "old_peak": self.old_peak,
            "new_peak": self.new_peak,
            "peak_change": self.growth,
            "basis": self.basis,
            "old_measured": self.old_measured or None,
            "new_measured": self.new_measured or None,
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


def byte_change(old: int, new: int) -> str:
    """The change from ``old`` to ``new`` bytes: "1.00 MB → 1.50 MB (+500 kB)"."""
    return f"{fmt_bytes(old)} → {fmt_bytes(new)} ({'+' if new >= old else '-'}{fmt_bytes(abs(new - old))})"


def describe_kept(life: Lifetime) -> str:
    """One buffer kept alive longer: "+65.5 kB at mm1: a 64x256 buffer now kept alive to the end"
    (or "until <its last reader>")."""
    shape = "x".join(map(str, life.shape)) or "scalar"
    until = "to the end" if not life.last_reader else f"until {life.last_reader}"
    return f"+{fmt_bytes(life.bytes)} at {life.producer}: a {shape} buffer now kept alive {until}"


def accounting_for(kept: Sequence[Lifetime], growth: int, limit: int = 2) -> list[Lifetime]:
    """The buffers of ``kept`` (:func:`kept_longer`) that may account for ``growth`` bytes more at
    the peak: at least a quarter of it (a buffer kept longer elsewhere in the schedule adds less
    than its bytes, or nothing, at the peak), the closest to it in size first."""
    if growth <= 0:
        return []
    near = [life for life in kept if life.bytes * 4 >= growth]
    near.sort(key=lambda life: abs(math.log(life.bytes / growth)))
    return near[:limit]


def kept_longer(old: Lives, new: Lives) -> list[Lifetime]:
    """The tensors of the ``new`` schedule that stay live across a node the ``old`` one ran only
    after freeing them: the same tensor of the same producer, now read later or made a graph
    output, or a new graph output of a node the old schedule ran; largest first.

    This is where a kept-alive buffer's bytes appear: across the nodes between its old last reader
    and its new one (the first of them is the first whose live bytes grew), not at its producer,
    which allocates it as before."""
    (before_order, before), (after_order, after) = old, new
    was_at = {name: position for position, name in enumerate(before_order)}
    found = []
    for tensor, life in after.items():
        was = before.get(tensor)
        if was is None:  # a new output of a node the old graph ran, kept to the end (a Loop's scan output)
            if not life.last_reader and life.producer in was_at:
                found.append(life)
            continue
        if was.producer != life.producer:
            continue
        across = after_order[life.start + 1 : life.end + 1]
        freed_before = any(was_at.get(name, -1) > was.end for name in across)
        if freed_before or (not life.last_reader and was.last_reader):
            found.append(life)
    return sorted(found, key=lambda life: -life.bytes)


def memory_change(old: ModelAnalysis, new: ModelAnalysis, limit: int = 5) -> MemoryChange:
    """The static memory of ``old`` and ``new`` and the activations ``new`` keeps alive longer
    (:func:`kept_longer` over the two graphs' topological schedules)."""
    longer = kept_longer(_lives(old), _lives(new))
    return MemoryChange(static_memory(old).peak, static_memory(new).peak, tuple(longer[:limit]))


def _lives(analysis: ModelAnalysis) -> Lives:
    return [step.name for step in main_steps(analysis)], lifetimes(analysis)
