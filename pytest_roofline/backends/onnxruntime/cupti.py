"""GPU-true layer times: CUPTI's kernel records mapped to onnxruntime's node events.

onnxruntime's profiler on the CUDA EP times each node on the host, around its kernel launches;
the kernels run later, on the GPU.  CUPTI (through ``cupti-python``, imported only here and only
when a GPU run is profiled) records every kernel, memcpy and memset with its GPU start and end,
and every runtime- and driver-API call with the host time it was made at; a launch call and the
work it launched share a correlation id.  onnxruntime's ``get_profiling_start_time_ns() + ts·1000``
and CUPTI's timestamps are one clock (wall-clock ns; measured on an H200, see
``shared/gpu/cupti_probe.py``), so each launch falls inside the host interval of the node that
issued it, and the GPU work it launched is that node's.  Driver-API records matter: cuDNN launches
its kernels through the driver API (runtime launches alone reached 77-82 % of GPU time there).

:func:`map_gpu_activity` is the pure mapping (tested on CUPTI-shaped records); :class:`CuptiRecorder`
collects the records on a machine with CUPTI.  GPU work launched inside a profiled run but outside
every node becomes one ``unattributed`` pseudo-node per run: reported, never dropped.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "UNATTRIBUTED",
    "ApiCall",
    "CuptiRecorder",
    "GpuActivity",
    "GpuTiming",
    "GpuTrace",
    "cupti_available",
    "map_gpu_activity",
    "run_device_seconds",
]

UNATTRIBUTED = "[GPU work outside ONNX nodes]"
_SUFFIX = "_kernel_time"
SLACK_NS = 2000  # profiler ts and dur are truncated to µs: a node's true end may be up to 2 µs later
SAME_CLOCK_NS = 1_000_000  # CUPTI and wall clock closer than this: one domain, no offset applied


@dataclass(frozen=True)
class GpuActivity:
    """Work the GPU did: a kernel, memcpy or memset, with its GPU start and end (ns)."""

    kind: str  # "kernel" | "memcpy" | "memset"
    name: str
    start: int
    end: int
    correlation_id: int


@dataclass(frozen=True)
class ApiCall:
    """A CUDA runtime- or driver-API call on the host (ns); its correlation id is the launch's."""

    start: int
    end: int
    correlation_id: int
    api: str = "runtime"  # "runtime" | "driver"


@dataclass(frozen=True)
class GpuTrace:
    """CUPTI records of one profiled stretch; ``clock_offset`` = CUPTI clock - wall clock (ns)."""

    activities: tuple[GpuActivity, ...]
    calls: tuple[ApiCall, ...]
    clock_offset: int = 0

    @property
    def applied_offset(self) -> int:
        """The offset to take out of CUPTI's timestamps: 0 where the two clocks are one domain."""
        return self.clock_offset if abs(self.clock_offset) > SAME_CLOCK_NS else 0


@dataclass(frozen=True)
class GpuTiming:
    """The profiler's events with GPU time in place of host time, and what the GPU did.

    Seconds are summed over the kept runs (``runs`` of them): ``busy`` is the union of the GPU
    activity intervals, ``activity_time`` their summed durations (equal on one stream),
    ``attributed`` the part launched inside a node.
    """

    events: list[dict[str, Any]] = field(repr=False)
    runs: int
    busy: float
    activity_time: float
    attributed: float
    activities: int
    outside_runs: int  # activities launched outside every profiled run (session set-up): ignored

    @property
    def attributed_share(self) -> float:
        """Share of the GPU activity time that maps to an ONNX node (the target: >= 0.95)."""
        return self.attributed / self.activity_time if self.activity_time > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        """Per-run figures for ``ModelProfile.extra["gpu"]`` (seconds per run)."""
        runs = max(self.runs, 1)
        return {
            "timing": "CUPTI",
            "busy_per_run": self.busy / runs,
            "activity_time_per_run": self.activity_time / runs,
            "attributed_share": self.attributed_share,
            "activities_per_run": self.activities / runs,
            "runs": self.runs,
        }


def _intervals(
    events: Sequence[dict[str, Any]], start_ns: int, name: str | None
) -> list[tuple[int, int, int]]:
    """(start ns, end ns, event index) of Session ``name`` events, or of Node kernel events."""
    found = []
    for index, event in enumerate(events):
        label = str(event.get("name", ""))
        if name is not None:
            wanted = event.get("cat") == "Session" and label == name
        else:
            wanted = event.get("cat") == "Node" and label.endswith(_SUFFIX)
        if wanted:
            ts, dur = float(event.get("ts", 0)), float(event.get("dur", 0))
            found.append((start_ns + int(ts * 1000), start_ns + int((ts + dur) * 1000) + SLACK_NS, index))
    return sorted(found)


def run_device_seconds(trace: GpuTrace, runs: Sequence[tuple[int, int]]) -> list[float]:
    """Each run's GPU work in seconds: the summed durations of the activities that ran inside it.

    ``runs``: each run's (start, end) on the host's wall clock (ns), the run synchronized before
    its end, so all the work it launched ran between the two.  An activity is placed by its GPU
    start (CUPTI's clock less the trace's offset); work outside every run is left out.  [] when a
    run got no work (the recording missed it: no device time to give)."""
    offset = trace.applied_offset
    starts = [begin for begin, _ in runs]
    totals = [0] * len(runs)
    for activity in trace.activities:
        moment = activity.start - offset
        index = bisect.bisect_right(starts, moment) - 1
        if index >= 0 and moment <= runs[index][1]:
            totals[index] += max(activity.end - activity.start, 0)
    if not totals or min(totals) <= 0:
        return []
    return [total * 1e-9 for total in totals]


def _union(spans: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for begin, end in sorted(spans):
        if reach is None or begin > reach:
            total += end - begin
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def map_gpu_activity(
    events: Sequence[dict[str, Any]], start_ns: int, trace: GpuTrace, skip_runs: int = 0
) -> GpuTiming:
    """Give each GPU activity to the node whose host interval holds its launch; returns new events.

    Args:
        events: onnxruntime's profiler events (``Session`` ``model_run`` and ``Node``
            ``<name>_kernel_time`` events, ``ts``/``dur`` in µs since profiling start).
        start_ns: ``InferenceSession.get_profiling_start_time_ns()``.
        trace: the CUPTI records of the same stretch.
        skip_runs: warm-up runs left out of the figures (their events are mapped all the same).

    Node events of the CUDA EP get ``dur`` = the GPU time (µs) of the work they launched, and
    ``args["timing"] = "gpu"``; nodes of another provider (the CPU EP's shape nodes) keep their
    host time, which is their device's own.  Activities launched in a run outside every node
    become an :data:`UNATTRIBUTED` node event of that run; those launched outside every run
    (session set-up) are ignored.
    """
    runs = _intervals(events, start_ns, "model_run")
    run_starts = [begin for begin, _, _ in runs]
    nodes = _intervals(events, start_ns, None)
    node_starts = [begin for begin, _, _ in nodes]
    launches: dict[int, ApiCall] = {}
    for api_call in trace.calls:
        known = launches.get(api_call.correlation_id)
        if known is None or api_call.start < known.start:
            launches[api_call.correlation_id] = api_call
    offset = trace.applied_offset

    def run_of(moment: int) -> int | None:
        index = bisect.bisect_right(run_starts, moment) - 1
        if index >= 0 and moment <= runs[index][1]:
            return index
        return None if runs else 0

    gpu_ns: dict[int, int] = {}  # node event index -> GPU ns
    loose: dict[int, int] = {}  # run -> GPU ns outside nodes
    spans: dict[int, list[tuple[int, int]]] = {}
    attributed: dict[int, int] = {}
    counted: dict[int, int] = {}
    outside = 0
    for activity in trace.activities:
        duration = max(activity.end - activity.start, 0)
        call = launches.get(activity.correlation_id)
        launch = call.start - offset if call is not None else None
        run = run_of(launch if launch is not None else activity.start - offset)
        if run is None:
            outside += 1
            continue
        spans.setdefault(run, []).append((activity.start, activity.end))
        counted[run] = counted.get(run, 0) + 1
        node = None
        if launch is not None:
            index = bisect.bisect_right(node_starts, launch) - 1
            if index >= 0 and launch <= nodes[index][1]:
                node = nodes[index][2]
        if node is None:
            loose[run] = loose.get(run, 0) + duration
        else:
            gpu_ns[node] = gpu_ns.get(node, 0) + duration
            attributed[run] = attributed.get(run, 0) + duration
    mapped: list[dict[str, Any]] = []
    for index, event in enumerate(events):
        label = str(event.get("name", ""))
        raw = event.get("args")
        args: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if event.get("cat") == "Node" and label.endswith(_SUFFIX) and _on_gpu(args):
            event = {**event, "dur": gpu_ns.get(index, 0) / 1000, "args": {**args, "timing": "gpu"}}
        mapped.append(event)
    for run, nanoseconds in sorted(loose.items()):
        ts = (runs[run][0] - start_ns) / 1000 if runs else 0.0
        mapped.append(
            {
                "cat": "Node",
                "name": UNATTRIBUTED + _SUFFIX,
                "ts": ts,
                "dur": nanoseconds / 1000,
                "ph": "X",
                "args": {"op_name": "", "provider": "CUDAExecutionProvider", "timing": "gpu"},
            }
        )
    kept = [run for run in spans if run >= skip_runs]
    return GpuTiming(
        events=mapped,
        runs=max(len(runs) - skip_runs, 0) if runs else len(kept),
        busy=sum(_union(spans[run]) for run in kept) * 1e-9,
        activity_time=sum(end - begin for run in kept for begin, end in spans[run]) * 1e-9,
        attributed=sum(attributed.get(run, 0) for run in kept) * 1e-9,
        activities=sum(counted[run] for run in kept),
        outside_runs=outside,
    )


def _on_gpu(args: dict[str, Any]) -> bool:
    provider = str(args.get("provider", ""))
    return provider != "CPUExecutionProvider"


# --- recording (needs cupti-python and the CUPTI library: a GPU machine) ------------------------


def cupti_available() -> bool:
    """Whether ``cupti`` imports with its library (cupti-python on a machine with CUPTI)."""
    try:
        from cupti import cupti  # noqa: F401
    except Exception:  # ImportError, or an OSError/RuntimeError when libcupti cannot be loaded
        return False
    return True


_KINDS = ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "RUNTIME", "DRIVER")
_activities: list[GpuActivity] = []
_calls: list[ApiCall] = []
_registered = False


def _buffer_requested() -> tuple[int, int]:
    return 8 * 1024 * 1024, 0


def _buffer_completed(records: list[Any]) -> None:
    from cupti import cupti

    kind = cupti.ActivityKind
    for record in records:
        if record.kind in (kind.CONCURRENT_KERNEL, kind.KERNEL):
            _activities.append(
                GpuActivity("kernel", str(record.name), record.start, record.end, record.correlation_id)
            )
        elif record.kind == kind.MEMCPY:
            _activities.append(
                GpuActivity(
                    "memcpy", f"memcpy {record.copy_kind}", record.start, record.end, record.correlation_id
                )
            )
        elif record.kind == kind.MEMSET:
            _activities.append(
                GpuActivity("memset", "memset", record.start, record.end, record.correlation_id)
            )
        elif record.kind in (kind.RUNTIME, kind.DRIVER):
            api = "runtime" if record.kind == kind.RUNTIME else "driver"
            _calls.append(ApiCall(record.start, record.end, record.correlation_id, api))


class CuptiRecorder:
    """Records GPU activity and CUDA API calls while entered; :meth:`trace` gives them back.

    One recorder at a time per process (CUPTI's activity buffers are process-wide).
    """

    def __init__(self) -> None:
        from cupti import cupti

        self._cupti = cupti
        self._trace: GpuTrace | None = None
        self._offset = 0

    def __enter__(self) -> CuptiRecorder:
        global _registered
        cupti = self._cupti
        _activities.clear()
        _calls.clear()
        if not _registered:
            cupti.activity_register_callbacks(_buffer_requested, _buffer_completed)
            _registered = True
        for name in _KINDS:
            cupti.activity_enable(getattr(cupti.ActivityKind, name))
        self._offset = int(cupti.get_timestamp()) - time.time_ns()
        return self

    def __exit__(self, *exc_info: object) -> None:
        cupti = self._cupti
        cupti.activity_flush_all(1)
        for name in _KINDS:
            try:
                cupti.activity_disable(getattr(cupti.ActivityKind, name))
            except Exception:  # disabling what failed to enable: nothing to undo
                pass
        self._trace = GpuTrace(tuple(_activities), tuple(_calls), self._offset)
        _activities.clear()
        _calls.clear()

    def trace(self) -> GpuTrace:
        """The records of the stretch just recorded."""
        if self._trace is None:
            raise RuntimeError("CuptiRecorder.trace() before the recording ended")
        return self._trace
