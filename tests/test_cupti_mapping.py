"""GPU-true layer times: CUPTI-shaped records mapped onto onnxruntime's CUDA-EP node events.

The node events are the real ones recorded on an H200 (tests/data/gpu-h200/ort-cuda-*.json.gz);
the CUPTI records are derived from them as CUPTI reports a run (see ``cupti_shaped``): each CUDA
node launches its kernels inside its host interval, through the runtime API, or through the driver
API as cuDNN does for convolutions; the GPU runs them later, one after another on one stream; a
run also holds a copy launched outside every node, and the session set-up launches work before
the first run.  What is tested is our mapping, not CUPTI.
"""

from __future__ import annotations

import gzip
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from pytest_roofline.backends.base import KernelProfile
from pytest_roofline.backends.onnxruntime.attribution import attribute, kernel_events
from pytest_roofline.backends.onnxruntime.cupti import (
    UNATTRIBUTED,
    ApiCall,
    GpuActivity,
    GpuTrace,
    map_gpu_activity,
)

DATA = Path(__file__).resolve().parent / "data" / "gpu-h200"
START_NS = 1_795_658_903_281_829_491  # a profiling start as onnxruntime reports it (wall-clock ns)
SETUP, LOOSE, ORPHAN = 3, 1, 1  # per recording: set-up activities; per run: loose copies, orphans


def recorded(name: str) -> list[dict[str, Any]]:
    with gzip.open(DATA / f"ort-cuda-{name}.json.gz", "rt") as handle:
        return json.load(handle)


@dataclass
class Synthetic:
    trace: GpuTrace
    node_ns: dict[int, int]  # event index -> GPU ns it launched
    loose_ns: dict[int, int]  # run index -> GPU ns launched outside nodes
    driver_only: set[int]  # correlation ids launched through the driver API only


def cupti_shaped(events: list[dict[str, Any]], start_ns: int = START_NS) -> Synthetic:
    """CUPTI-like records for ``events``: what CUPTI would report had it watched those runs."""
    runs = sorted(
        (start_ns + int(e["ts"]) * 1000, start_ns + int(e["ts"] + e["dur"]) * 1000)
        for e in events
        if e.get("cat") == "Session" and e["name"] == "model_run"
    )
    activities: list[GpuActivity] = []
    calls: list[ApiCall] = []
    node_ns: dict[int, int] = {}
    loose_ns: dict[int, int] = {}
    driver_only: set[int] = set()
    cid = 100
    gpu = runs[0][0] - 50_000_000
    for _ in range(SETUP):  # weights uploaded at session set-up: before the first run, ignored
        cid += 1
        calls.append(ApiCall(gpu, gpu + 2_000, cid))
        activities.append(GpuActivity("memcpy", "memcpy HtoD", gpu + 5_000, gpu + 900_000, cid))
        gpu += 1_000_000
    for run, (run_start, _) in enumerate(runs):
        for _ in range(LOOSE):  # a copy launched by the run but outside every node
            cid += 1
            calls.append(ApiCall(run_start + 1_000, run_start + 3_000, cid))
            begin = max(gpu, run_start + 4_000)
            activities.append(GpuActivity("memcpy", "memcpy HtoD", begin, begin + 7_000, cid))
            loose_ns[run] = loose_ns.get(run, 0) + 7_000
            gpu = begin + 7_000
        for _ in range(ORPHAN):  # work whose launch record is missing: counted, not attributed
            cid += 1
            begin = max(gpu, run_start + 10_000)
            activities.append(GpuActivity("kernel", "orphan", begin, begin + 1_500, cid))
            loose_ns[run] = loose_ns.get(run, 0) + 1_500
            gpu = begin + 1_500
        run_end = runs[run][1]
        for index, event in enumerate(events):
            if event.get("cat") != "Node" or event["args"].get("provider") != "CUDAExecutionProvider":
                continue
            begin_ns, dur_ns = start_ns + int(event["ts"]) * 1000, int(event["dur"]) * 1000
            if not run_start <= begin_ns <= run_end:
                continue
            conv = event["args"].get("op_name") in ("Conv", "FusedConv")
            launches = 2 if conv else 1
            for k in range(launches):
                cid += 1
                at = begin_ns + (k + 1) * dur_ns // (launches + 1)
                via_driver = conv and k == 1  # cuDNN launches its conv kernel through the driver API
                calls.append(ApiCall(at, at + 800, cid, "driver" if via_driver else "runtime"))
                if via_driver:
                    driver_only.add(cid)
                length = 2_000 + (dur_ns * 37 // 100) % 40_000  # deterministic, 2-42 µs
                begin = max(gpu, at + 3_000)
                activities.append(GpuActivity("kernel", f"k{cid}", begin, begin + length, cid))
                node_ns[index] = node_ns.get(index, 0) + length
                gpu = begin + length
    return Synthetic(GpuTrace(tuple(activities), tuple(calls)), node_ns, loose_ns, driver_only)


@pytest.mark.parametrize("name", ["encoder_seq128", "resnet50_fp16_b8", "resnet50_b1"])
def test_each_kernel_goes_to_the_node_that_launched_it(name: str) -> None:
    events = recorded(name)
    synthetic = cupti_shaped(events)
    timing = map_gpu_activity(events, START_NS, synthetic.trace, skip_runs=1)
    by_position = {i: e for i, e in enumerate(timing.events)}
    for index, event in enumerate(events):
        if event.get("cat") != "Node":
            continue
        mapped = by_position[index]
        if event["args"].get("provider") == "CUDAExecutionProvider":
            assert mapped["dur"] == pytest.approx(synthetic.node_ns.get(index, 0) / 1000)
            assert mapped["args"]["timing"] == "gpu"
        else:  # CPU-provider nodes (shape arithmetic) keep their own host time
            assert mapped["dur"] == event["dur"] and "timing" not in mapped["args"]
    loose = [e for e in timing.events if e["name"] == UNATTRIBUTED + "_kernel_time"]
    assert [round(e["dur"] * 1000) for e in loose] == [
        synthetic.loose_ns[r] for r in sorted(synthetic.loose_ns)
    ]
    runs = len(synthetic.loose_ns)
    assert timing.runs == runs - 1 and timing.outside_runs == SETUP
    kept_loose = sum(ns for run, ns in synthetic.loose_ns.items() if run >= 1)
    assert timing.activity_time - timing.attributed == pytest.approx(kept_loose * 1e-9)
    assert timing.busy == pytest.approx(timing.activity_time)  # one stream: no overlap
    assert timing.attributed_share >= 0.95
    summary = timing.summary()
    assert summary["timing"] == "CUPTI" and summary["busy_per_run"] == pytest.approx(timing.busy / (runs - 1))


def test_driver_api_records_are_what_attributes_cudnn_kernels() -> None:
    events = recorded("resnet50_fp16_b8")
    synthetic = cupti_shaped(events)
    with_driver = map_gpu_activity(events, START_NS, synthetic.trace, skip_runs=1)
    runtime_only = GpuTrace(
        synthetic.trace.activities, tuple(c for c in synthetic.trace.calls if c.api == "runtime")
    )
    without = map_gpu_activity(events, START_NS, runtime_only, skip_runs=1)
    assert with_driver.attributed_share >= 0.95
    assert without.attributed_share < with_driver.attributed_share - 0.1  # conv kernels lost


def test_launch_just_past_a_node_end_within_the_profilers_truncation_counts() -> None:
    events = [
        {"cat": "Session", "name": "model_run", "ts": 0, "dur": 100, "ph": "X", "args": {}},
        {
            "cat": "Node",
            "name": "a_kernel_time",
            "ts": 10,
            "dur": 5,
            "args": {"provider": "CUDAExecutionProvider"},
        },
        {
            "cat": "Node",
            "name": "b_kernel_time",
            "ts": 40,
            "dur": 5,
            "args": {"provider": "CUDAExecutionProvider"},
        },
    ]
    calls = (
        ApiCall(START_NS + 15_900, START_NS + 16_500, 1),
        ApiCall(START_NS + 30_000, START_NS + 30_500, 2),
    )
    work = (
        GpuActivity("kernel", "x", START_NS + 17_000, START_NS + 19_000, 1),
        GpuActivity("kernel", "y", START_NS + 31_000, START_NS + 32_000, 2),
    )
    timing = map_gpu_activity(events, START_NS, GpuTrace(work, calls))
    assert timing.events[1]["dur"] == pytest.approx(2.0)  # 900 ns past a's truncated end: a's
    assert timing.events[2]["dur"] == 0.0
    assert timing.events[-1]["name"].startswith(UNATTRIBUTED) and timing.events[-1]["dur"] == pytest.approx(
        1.0
    )


def test_a_cupti_clock_offset_is_taken_out() -> None:
    events = recorded("encoder_seq128")
    synthetic = cupti_shaped(events)
    shift = 5_000_000_000
    shifted = GpuTrace(
        tuple(replace(a, start=a.start + shift, end=a.end + shift) for a in synthetic.trace.activities),
        tuple(replace(c, start=c.start + shift, end=c.end + shift) for c in synthetic.trace.calls),
        clock_offset=shift,
    )
    same = map_gpu_activity(events, START_NS, synthetic.trace, skip_runs=1)
    assert map_gpu_activity(events, START_NS, shifted, skip_runs=1).events == same.events


def test_gpu_times_become_layers_summing_to_the_gpu_busy_time() -> None:
    """The whole path: mapped events -> kernel_events -> attribution to the encoder's ONNX nodes ->
    layers.  The encoder is the example suite's, the model that was profiled on the H200."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    try:
        import build_models
    finally:
        sys.path.pop(0)
    from pytest_roofline.analysis import analyze
    from pytest_roofline.analysis.views import RUNTIME_VIEW_OPS
    from pytest_roofline.profile import build_layers
    from pytest_roofline.roofline import DeviceRoofline

    events = recorded("encoder_seq128")
    timing = map_gpu_activity(events, START_NS, cupti_shaped(events).trace, skip_runs=1)
    model = build_models.encoder()
    attributed = attribute(model, None, kernel_events(timing.events, skip_runs=1), timing.runs)
    kernels = KernelProfile(
        kernels=attributed.kernels,
        folded=attributed.folded,
        iterations=timing.runs,
        timing="device",
        timing_source="CUPTI",
        timer_resolution=1e-9,
    )
    from pytest_roofline.roofline import CacheLevel

    l2 = json.loads((DATA / "identity.txt").read_text())["l2_bytes"]  # 60 MiB
    # the H200's levels: its 60 MiB L2 (a GPU calibration's capacity) and HBM as DRAM (4.8 TB/s paper)
    roof = DeviceRoofline(
        {"float32": 400e12}, 4e12, {}, cache_levels=(CacheLevel("L2", 32 << 20, 8e12, capacity=l2),)
    )
    layers, fraction = build_layers(analyze(model, batch=1, dims={"seq": 128}), kernels, roof)
    # the encoder's weights and activations (a few MiB) stay in the L2 between runs
    placed = {la.memory_level for la in layers if la.kind == "compute" and la.time > 0}
    assert placed == {"L2"}, placed
    busy_per_run = timing.busy / timing.runs
    gpu_layers = sum(la.time for la in layers if la.kind != "folded")
    cpu_nodes = sum(  # CPU-provider shape nodes keep their (tiny) host time
        la.time
        for la in layers
        if any(
            k.name == la.name and k.extra.get("provider") == "CPUExecutionProvider" for k in kernels.kernels
        )
    )
    assert abs(gpu_layers - cpu_nodes - busy_per_run) <= 0.10 * busy_per_run
    assert fraction >= 0.95
    judged = [
        la for la in layers if la.kind == "compute" and la.time > 0 and la.op_type not in RUNTIME_VIEW_OPS
    ]
    assert judged and all(la.roofline_fraction is not None for la in judged)  # a view has none


def test_each_runs_device_time_is_the_work_that_ran_inside_it() -> None:
    """A probe's device time per run (``session.device_time``): CUPTI's activities placed by their
    GPU start (less the clock offset) into the host's run intervals, summed; work outside every
    run (set-up) left out; a run with no work means the recording missed it: no figure."""
    from pytest_roofline.backends.onnxruntime.cupti import GpuActivity, GpuTrace, run_device_seconds

    offset = 5_000_000_000  # CUPTI's clock ahead of the wall clock
    runs = [(1_000, 9_000), (10_000, 19_000)]

    def work(start: int, end: int) -> GpuActivity:
        return GpuActivity("kernel", "Add", start + offset, end + offset, 0)

    trace = GpuTrace(
        (work(500, 900), work(2_000, 3_000), work(3_000, 3_500), work(12_000, 14_000)), (), offset
    )
    assert run_device_seconds(trace, runs) == pytest.approx([1_500e-9, 2_000e-9], rel=1e-12)
    missed = GpuTrace((work(2_000, 3_000),), (), offset)
    assert run_device_seconds(missed, runs) == []
