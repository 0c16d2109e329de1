"""Chrome trace (``chrome://tracing``, Perfetto) export of a profiled run, with ONNX node names.

The backend's own trace events are kept when it has them (onnxruntime's profile is already a
Chrome trace); each kernel event gains ``onnx_nodes``, ``kind`` and ``layer`` in its ``args``.  A
backend without events gets one synthetic event per kernel per iteration, laid end to end.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_roofline.backends.base import KernelProfile, KernelRecord

__all__ = ["trace_events", "write_trace"]

_SUFFIX = "_kernel_time"


def trace_events(kernels: KernelProfile) -> list[dict[str, Any]]:
    """Chrome trace events of ``kernels`` with ONNX node names in each kernel event's args."""
    by_name = {k.name: k for k in kernels.kernels}
    events: list[dict[str, Any]] = []
    if kernels.trace_events:
        for raw in kernels.trace_events:
            event = dict(raw)
            name = str(event.get("name", ""))
            record = by_name.get(name[: -len(_SUFFIX)] if name.endswith(_SUFFIX) else name)
            if record is not None and event.get("cat") != "Session":
                event["args"] = {**(event.get("args") or {}), **_annotation(record)}
            events.append(event)
        return events
    clock = 0.0
    for iteration in range(max((len(k.times) for k in kernels.kernels), default=0)):
        start = clock
        for record in kernels.kernels:
            if iteration >= len(record.times):
                continue
            duration = record.times[iteration] * 1e6
            events.append(
                {
                    "name": record.name,
                    "cat": "Node",
                    "ph": "X",
                    "pid": 0,
                    "tid": 0,
                    "ts": clock,
                    "dur": duration,
                    "args": {"op_name": record.op_type, **_annotation(record)},
                }
            )
            clock += duration
        events.append(
            {
                "name": f"iteration {iteration}",
                "cat": "Session",
                "ph": "X",
                "pid": 0,
                "tid": 1,
                "ts": start,
                "dur": clock - start,
                "args": {},
            }
        )
    return events


def _annotation(record: KernelRecord) -> dict[str, Any]:
    data: dict[str, Any] = {"layer": record.name, "onnx_nodes": list(record.onnx_nodes), "kind": record.kind}
    if record.serves:
        data["serves"] = record.serves
    if record.kind == "compute" and not record.onnx_nodes:
        data["kind"] = "unattributed"
    return data


def write_trace(
    kernels: KernelProfile, path: str | os.PathLike, metadata: dict[str, Any] | None = None
) -> None:
    """Write the trace of ``kernels`` as a Chrome trace JSON object file at ``path``."""
    document = {
        "traceEvents": trace_events(kernels),
        "displayTimeUnit": "ms",
        "metadata": {"folded_onnx_nodes": list(kernels.folded), **(metadata or {})},
    }
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(document, handle)
    os.replace(tmp, path)
