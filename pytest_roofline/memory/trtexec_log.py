"""trtexec's memory, from the lines TensorRT logs when it builds an engine and creates a context.

trtexec's exported JSON files carry no memory (``--exportLayerInfo`` has tensor shapes and weight
counts, ``--exportProfile`` times); TensorRT's log says what it allocated.  The lines read, in the
formats TensorRT 8.x-10.x print (the ``[I] [TRT]`` / ``[TRT] [V]`` prefixes and timestamps vary):

* creating an execution context, at ``--verbose``, in bytes (exact)::

      Total per-runner device persistent memory is 5632
      Allocated activation device memory of size 3613184

* building an engine, in bytes: ``Total Activation Memory: N``, ``Total Weights Memory: N``
  (TensorRT 8.6 and later), ``Total Device Persistent Memory: N``;
* at INFO, in whole MiB (not exact), ``[MemUsageChange] TensorRT-managed allocation in engine
  deserialization: CPU +0, GPU +13, now: CPU 0, GPU 13 (MiB)`` and the same line ``in
  IExecutionContext creation``.

The weights are the deserialized engine's allocation (or ``Total Weights Memory``); the peak is
weights + the context's activation memory + its persistent memory: what TensorRT holds on the
device for one inference.  ``arena_held`` is TensorRT's managed GPU total after the context.
"""

from __future__ import annotations

import re

from pytest_roofline.memory import MemoryProfile

__all__ = ["SOURCE", "log_memory"]

SOURCE = "trtexec-log"
MIB = 1 << 20

_BYTES = {
    "activations": (
        re.compile(r"Allocated activation device memory of size (\d+)"),
        re.compile(r"Total Activation Memory: (\d+)"),
    ),
    "weights": (re.compile(r"Total Weights Memory: (\d+)"),),
    "persistent": (
        re.compile(r"Total per-runner device persistent memory is (\d+)"),
        re.compile(r"Total Device Persistent Memory: (\d+)"),
    ),
}
#: The MiB line a figure falls back on when no byte line reports it.
_MIB_FALLBACK = {"weights": "engine deserialization", "activations": "IExecutionContext creation"}
_MIB_CHANGE = re.compile(
    r"\[MemUsageChange\] TensorRT-managed allocation in (engine deserialization|IExecutionContext creation): "
    r"CPU [+-]?\d+, GPU \+?(-?\d+), now: CPU -?\d+, GPU (\d+) \(MiB\)"
)


def _last(patterns: tuple[re.Pattern[str], ...], text: str) -> int | None:
    """The last figure the first pattern that matches reports, in bytes, or None."""
    for pattern in patterns:
        found = pattern.findall(text)
        if found:
            return int(found[-1])
    return None


def log_memory(text: str) -> MemoryProfile | None:
    """The memory of one inference from trtexec's log ``text``, or None where it reports none.

    Byte figures win over the MiB lines; a figure read only in MiB makes the profile inexact.
    """
    changes: dict[str, tuple[int, int]] = {}
    for what, grown, now in _MIB_CHANGE.findall(text):
        changes[what] = (int(grown) * MIB, int(now) * MIB)  # the last context created wins
    exact = True
    figures: dict[str, int] = {}
    for name, patterns in _BYTES.items():
        value = _last(patterns, text)
        if value is None:
            fallback = {"weights": "engine deserialization", "activations": "IExecutionContext creation"}.get(
                name
            )
            if fallback is None or fallback not in changes:
                continue
            value, exact = changes[fallback][0], False
        figures[name] = value
    if "activations" not in figures and "weights" not in figures:
        return None
    weights = figures.get("weights", 0)
    peak = weights + figures.get("activations", 0) + figures.get("persistent", 0)
    held = max((now for _, now in changes.values()), default=0)
    return MemoryProfile(
        peak=peak,
        arena_held=held,
        weights=weights,
        peak_activations=peak - weights,
        source=SOURCE,
        exact=exact,
    )
