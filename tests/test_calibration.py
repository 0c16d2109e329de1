"""Calibration: real probes through onnxruntime/OpenVINO, the fingerprint cache, the CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from _calibration_helpers import Counting

from pytest_roofline.backends.base import Backend, get_backend
from pytest_roofline.cli import main
from pytest_roofline.device import CpuInfo
from pytest_roofline.device.load import MachineLoad
from pytest_roofline.errors import BackendError, OptionError
from pytest_roofline.roofline import CacheLevel, DeviceRoofline, Probe
from pytest_roofline.roofline import probes as cp
from pytest_roofline.roofline.calibrate import (
    CACHE_ENV,
    CACHE_UNSETTLED_ENV,
    cache_path,
    calibrate,
    calibration_fingerprint,
    default_cache_dir,
)
from pytest_roofline.roofline.progress import is_step

ROOFLINE = [sys.executable, "-c", "import sys; from pytest_roofline.cli import main; sys.exit(main())"]


Cached = tuple[DeviceRoofline, "Counting", Any]  # (roofline, its counting backend, its cache dir)


@pytest.fixture(scope="module", autouse=True)
def cache_unsettled() -> Iterator[None]:
    """These tests check the cache's mechanics, not the roofs: a calibration taken beside this busy
    machine's other work is cached all the same (test_calibration_steady checks that it is not)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_UNSETTLED_ENV, "1")
        yield


@pytest.fixture(scope="module")
def ort() -> Backend:
    return get_backend("onnxruntime")


@pytest.fixture(scope="module")
def cached(tmp_path_factory: pytest.TempPathFactory, ort: Backend) -> tuple[DeviceRoofline, Counting, Any]:
    """One real quick calibration on onnxruntime, cached in a module temp dir."""
    cache_dir = tmp_path_factory.mktemp("calibration-cache")
    backend = Counting(ort)
    lines: list[str] = []
    roofline = calibrate(backend, cache_dir=cache_dir, quick=True, progress=lines.append)
    steps = [line for line in lines if is_step(line)]
    notes = [line for line in lines if not is_step(line)]
    assert len(steps) >= len(cp.plan_probes(cp.DTYPES, "quick"))
    assert notes[0].startswith("calibrating onnxruntime on ") and "quick plan" in notes[0]
    assert notes[-1].startswith("calibrated in ") and "float32" in notes[-1] and "DRAM" in notes[-1]
    return roofline, backend, cache_dir


def test_real_calibration_measures_every_roof(cached: Cached) -> None:
    roofline, backend, _ = cached
    plan = cp.plan_probes(cp.DTYPES, "quick")
    names = {p.name for p in roofline.probes}
    assert {s.name for s in plan if not s.optional} <= names
    # every probe once, then a second session for the float32 winner, the DRAM probes and each cache
    # level's setting probe (and a third when the machine was busy: this shared machine often is), one
    # more where sessions disagree, and up to LADDER_RETRIES for a cache-sized stream slower than DRAM
    assert set(backend.opened) == {s.name for s in plan} | set(cp.DISPATCH_MODELS)  # + the dispatch floor
    # the float32 winner is the first pass's: combining its sessions can leave another probe the
    # best of the final figures (a busy moment; batchmatmul once), so it is read from the openings
    dram = {p.name for p in cp.dram_points(list(roofline.probes), _llc())}
    fp32 = {s.name for s in plan if s.kind == "compute" and s.dtype == "float32"}
    winner = {name for name in fp32 if backend.opened.count(name) >= 2}
    assert len(winner) == 1 and dram, (winner, dram)
    confirmed = dram | winner
    for spec in plan:
        runs = backend.opened.count(spec.name)
        if spec.name in confirmed:
            assert 2 <= runs <= cp.AGREEMENT_WINDOWS + 2, (spec.name, runs)  # + windows until they agree
        elif spec.kind == "memory":  # a cache level's setter (first pass) is confirmed and windowed too
            assert runs <= 2 + cp.AGREEMENT_WINDOWS + cp.LADDER_RETRIES, (spec.name, runs)
        else:
            assert runs == 1, (spec.name, runs)
    load = MachineLoad.from_dict(roofline.load or {})
    # a calibration measured under load warns; a quiet load reading does not promise no warning
    # (probes can disagree on a VM whose speed moves without other processes: 8 % apart once)
    assert load.seconds > 0 and (roofline.warnings or not cp.crowded(load, roofline.threads))
    assert set(roofline.spread) == {"float32", "dram", "dispatch"}
    assert all(0 <= v < 1 for v in roofline.spread.values())
    # the dispatch floor: the least time one kernel takes, recorded as its probe (kernels per second)
    (floor,) = [p for p in roofline.probes if p.kind == "dispatch"]
    assert floor.name == cp.DISPATCH_PROBE and floor.seconds == roofline.dispatch_floor > 0
    assert floor.value == pytest.approx(1 / floor.seconds)
    assert roofline.dispatch_floor < 50e-6  # a Relu of one float: microseconds at most, never a GEMM's time
    compute = [p for p in roofline.probes if p.kind == "compute"]
    memory = [p for p in roofline.probes if p.kind == "memory"]
    assert any(p.name.startswith("conv3x3") for p in compute)
    # two kinds of memory traffic: the stream (2 reads, 1 write) and the read-dominated matrix-vector chain
    assert sorted(p.name for p in memory) == sorted(
        [*(f"stream-{cp.size_label(n)}" for n in cp.STREAM_SIZES["quick"])]
        + [f"{cp.READ_PREFIX}{cp.size_label(n)}" for n in cp.READ_SIZES["quick"]]
    )
    # roofs are the best sustained probe per dtype; figures are work / median seconds per run
    work = {s.name: s.work for s in plan}
    for probe in (*compute, *memory):
        assert probe.value > 0 and probe.seconds > 0
        assert probe.value == pytest.approx(work[probe.name] / probe.seconds)
    best = max(p.value for p in compute if p.dtype == "float32")
    assert roofline.peak_flops["float32"] == max(best, roofline.theoretical_peak_flops.get("float32", 0.0))
    assert roofline.peak_bandwidth in {p.value for p in memory}
    assert roofline.ridge_point == pytest.approx(roofline.peak / roofline.peak_bandwidth)
    dram = roofline.cache_levels[-1]
    assert dram.name == "DRAM" and dram.bandwidth == roofline.peak_bandwidth
    # each memory roof is the best either kind of traffic sustains at its working sets
    at_1mib = [p for p in memory if p.size == cp.MIB]
    assert {p.name[: p.name.index("-")] for p in at_1mib} == {"stream", "read"}
    assert roofline.bandwidth_for(cp.MIB) >= max(p.value for p in at_1mib)
    assert roofline.duration > 0 and roofline.measured_at
    fp = roofline.fingerprint
    assert fp["backend"] == "onnxruntime" and fp["version"] == backend.version()
    assert fp["cpu_cores"] >= 1 and fp["probe_plan"] == "quick" and fp["dtypes"][0] == "float32"
    if cp.clock_hz():
        assert roofline.theoretical_peak_flops["float32"] > 0
    assert DeviceRoofline.from_dict(json.loads(json.dumps(roofline.to_dict()))) == roofline


def test_cache_hit_returns_identical_roofline_without_probing(cached: Cached, ort: Backend) -> None:
    roofline, _, cache_dir = cached
    again = Counting(ort)
    lines: list[str] = []
    assert calibrate(again, cache_dir=cache_dir, quick=True, progress=lines.append) == roofline
    assert again.opened == [] and lines == []
    path = cache_path(calibration_fingerprint(again, quick=True), cache_dir)
    assert json.loads(path.read_text())["roofline"]["measured_at"] == roofline.measured_at


def test_cache_is_reused_by_another_process(cached: Cached) -> None:
    roofline, _, cache_dir = cached
    run = subprocess.run(
        [*ROOFLINE, "calibrate", "--quick", "--format", "json", "--cache-dir", str(cache_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "calibrate [" not in run.stderr  # nothing measured
    assert json.loads(run.stdout) == json.loads(json.dumps(roofline.to_dict()))


def test_fingerprint_change_measures_again(cached: Cached, ort: Backend) -> None:
    roofline, _, cache_dir = cached
    changed = Counting(ort, extra={"intra_op_threads": 1})
    other = calibrate(changed, cache_dir=cache_dir, quick=True, dtypes=["float32"])
    assert changed.opened
    assert other.fingerprint["intra_op_threads"] == 1 and other.fingerprint != roofline.fingerprint
    assert set(other.peak_flops) == {"float32"}
    first = cache_path(roofline.fingerprint, cache_dir)
    assert cache_path(other.fingerprint, cache_dir) != first and first.exists()


def test_force_measures_again_and_replaces_the_file(tmp_path: Any, ort: Backend) -> None:
    backend = Counting(ort)
    first = calibrate(backend, cache_dir=tmp_path, quick=True, dtypes=["float32"])
    count = len(backend.opened)
    second = calibrate(backend, cache_dir=tmp_path, quick=True, dtypes=["float32"], force=True)
    plan = {s.name for s in cp.plan_probes(("float32",), "quick")} | set(cp.DISPATCH_MODELS)
    assert set(backend.opened[count:]) == plan  # the same plan again: nothing read from the cache
    stored = json.loads(cache_path(first.fingerprint, tmp_path).read_text())
    assert DeviceRoofline.from_dict(stored["roofline"]) == second
    assert list(tmp_path.glob("*.tmp")) == []  # atomic write left no temp file


def test_corrupt_cache_is_measured_again_and_replaced(tmp_path: Any, ort: Backend) -> None:
    backend = Counting(ort)
    path = cache_path(calibration_fingerprint(backend, ["float32"], quick=True), tmp_path)
    path.write_text('{"fingerprint": {"backend": "onnx')
    lines: list[str] = []
    roofline = calibrate(backend, cache_dir=tmp_path, quick=True, dtypes=["float32"], progress=lines.append)
    said = [line for line in lines if "corrupt" in line]
    assert len(said) == 1 and str(path) in said[0] and "\n" not in said[0]
    assert backend.opened
    assert DeviceRoofline.from_dict(json.loads(path.read_text())["roofline"]) == roofline


def test_unwritable_cache_dir_calibrates_in_memory_and_says_so_once(tmp_path: Any, ort: Backend) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache dir should be")
    cache_dir = blocker / "cache"
    backend = Counting(ort)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = calibrate(backend, cache_dir=cache_dir, quick=True, dtypes=["float32"])
        second = calibrate(backend, cache_dir=cache_dir, quick=True, dtypes=["float32"])
    messages = [str(w.message) for w in caught if "not writable" in str(w.message)]
    assert len(messages) == 1 and str(cache_dir) in messages[0]
    assert first.peak > 0 and second.peak > 0
    assert len(set(backend.opened)) == len(cp.plan_probes(("float32",), "quick")) + len(cp.DISPATCH_MODELS)
    assert len(backend.opened) > 2 * len(set(backend.opened))  # measured twice: nothing cached
    assert blocker.read_text().startswith("a file")


def test_concurrent_processes_measure_once(tmp_path: Any) -> None:
    command = [
        *ROOFLINE,
        "calibrate",
        "--quick",
        "--dtype",
        "float32",
        "--format",
        "json",
        "--cache-dir",
        str(tmp_path),
    ]
    pipe = subprocess.PIPE
    procs = [subprocess.Popen(command, stdout=pipe, stderr=pipe, text=True) for _ in range(2)]
    results = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], results
    measured = sorted(err.count("calibrate [") for _, err in results)
    assert measured[0] == 0 and measured[1] > len(cp.plan_probes(("float32",), "quick"))
    assert json.loads(results[0][0]) == json.loads(results[1][0])


def test_missing_optional_kernel_is_skipped_but_float32_failure_raises(tmp_path: Any, ort: Backend) -> None:
    backend = Counting(ort, refuse="qlinearmatmul")
    lines: list[str] = []
    roofline = calibrate(backend, cache_dir=tmp_path, quick=True, dtypes=["int8"], progress=lines.append)
    assert any("skipped" in line and "qlinearmatmul" in line for line in lines)
    assert "int8" in roofline.peak_flops  # MatMulInteger still ran
    assert not any(p.name.startswith("qlinearmatmul") for p in roofline.probes)
    broken = Counting(ort, refuse="gemm-512-float32")
    with pytest.raises(BackendError, match="gemm-512-float32"):
        calibrate(broken, cache_dir=tmp_path / "b", quick=True, dtypes=["float32"])


def test_unknown_dtype_is_an_option_error(ort: Backend, tmp_path: Any) -> None:
    with pytest.raises(OptionError, match="bfloat7"):
        calibrate(ort, cache_dir=tmp_path, dtypes=["bfloat7"])


def test_cache_dir_comes_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any, ort: Backend) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    assert default_cache_dir() == tmp_path
    path = cache_path(calibration_fingerprint(ort))
    assert path.parent == tmp_path and path.name.startswith("calibration-") and path.suffix == ".json"
    monkeypatch.delenv(CACHE_ENV)
    assert default_cache_dir().name == "pytest-roofline"


def test_openvino_calibrates_through_the_same_protocol(tmp_path: Any) -> None:
    pytest.importorskip("openvino")
    backend = Counting(get_backend("openvino"))
    roofline = calibrate(backend, cache_dir=tmp_path, quick=True, dtypes=["float32"])
    assert roofline.fingerprint["backend"] == "openvino"
    assert bool(roofline.theoretical_peak_flops) == bool(cp.clock_hz())  # OpenVINO on CPU: host peak applies
    assert roofline.peak > 0 and roofline.peak_bandwidth > 0
    plan = cp.plan_probes(("float32",), "quick", separate_streams=True)
    # the small streams are timed against their chain twice as long (cp.marginal_seconds)
    longer = {name for name in backend.opened if name.endswith("-x2")}
    assert longer and all(name.removesuffix("-x2") in {s.name for s in plan} for name in longer)
    assert len(set(backend.opened) - longer) == len(plan) + len(cp.DISPATCH_MODELS)
    # a read probe whose weights OpenVINO kept in bf16 is no float32 memory roof: dropped
    assert all(p.dtype == "float32" for p in roofline.probes if p.kind == "memory")
    # OpenVINO's dispatch floor: its Adds over alternating views stay separate kernels (not one fused
    # Subgraph, whose floor would be a 32nd of a kernel)
    assert 0 < roofline.dispatch_floor < 50e-6
    assert [p.name for p in roofline.probes if p.kind == "dispatch"] == [cp.DISPATCH_PROBE]


def test_host_peak_and_threads_only_where_the_backend_computes_on_the_cpu() -> None:
    from pytest_roofline.roofline.calibrate import _runs_on_cpu, _threads

    assert _runs_on_cpu({"providers": ["CPUExecutionProvider"]})
    assert not _runs_on_cpu({"providers": ["CUDAExecutionProvider", "CPUExecutionProvider"]})
    assert _runs_on_cpu({"device": "CPU"}) and not _runs_on_cpu({"device": "GPU"})
    assert not _runs_on_cpu({"backend": "trtexec"})
    eight = CpuInfo("x", frozenset(), 8, "x86_64", physical_cores=4)  # 4 cores with 2 threads each
    assert _threads({"intra_op_threads": 0}, eight) == 4  # the runtimes' default: one per physical core
    assert _threads({"intra_op_threads": 3}, eight) == 3
    assert _threads({"config": {"INFERENCE_NUM_THREADS": "2"}}, eight) == 2
    assert _threads({}, CpuInfo("x", frozenset(), 8, "x86_64")) == 8  # physical cores unknown: logical


# --- roofs from figures: the arithmetic -----------------------------------------------------------


def _llc() -> int:
    caches = cp.system_caches()
    return caches[-1][1] if caches else 0


def _roofline() -> DeviceRoofline:
    return DeviceRoofline(peak_flops={"float32": 100e9, "int8": 400e9}, peak_bandwidth=20e9, fingerprint={})


def test_roofline_arithmetic() -> None:
    roof = _roofline()
    assert roof.ridge_point == 5.0
    assert roof.attainable(1.0) == 20e9 and roof.attainable(5.0) == 100e9 and roof.attainable(50.0) == 100e9
    assert roof.attainable(50.0, "int8") == 400e9 and roof.attainable(50.0, "float16") == 100e9
    assert roof.bound(4.99) == "memory" and roof.bound(5.0) == "compute"
    # 1 GFLOP over 1 GB in 0.1 s: 10 GFLOP/s achieved of 20 attainable at intensity 1
    assert roof.fraction(1e9, 1e9, 0.1) == pytest.approx(0.5)
    assert roof.fraction(0, 1e9, 0.1) == pytest.approx(0.5)  # no FLOPs: judged on bandwidth
    assert roof.fraction(1e9, 1e9, 0.0) == 0.0


def _stream(size: int, gbs: float) -> Probe:
    return Probe(f"stream-{size}", "memory", "float32", size, gbs * 1e9, 1e-3)


def test_cache_levels_from_plateaus() -> None:
    kib, mib = cp.KIB, cp.MIB
    curve = [
        (32 * kib, 60),
        (64 * kib, 90),
        (256 * kib, 95),
        (1 * mib, 50),
        (4 * mib, 48),
        (64 * mib, 20),
        (256 * mib, 19),
    ]
    points = [_stream(size, gbs) for size, gbs in curve]
    caches = [("L1", 48 * kib), ("L2", 1 * mib), ("L3", 32 * mib)]
    levels = cp.cache_levels(points, caches)
    assert [(lv.name, lv.size) for lv in levels] == [("L2", 256 * kib), ("L3", 4 * mib), ("DRAM", 0)]
    assert [lv.bandwidth for lv in levels] == [95e9, 50e9, 19e9]  # 64 MiB: transition, no level
    assert [lv.name for lv in cp.cache_levels(points)] == ["L1", "L2", "DRAM"]
    assert cp.dram_bandwidth(points, 32 * mib) == 19e9  # working sets >= 4 x LLC only: 256 MiB
    assert cp.dram_bandwidth(points) == 20e9  # two largest without a known LLC
    assert cp.cache_levels(points, caches, dram=19.5e9)[-1].bandwidth == 19.5e9
    assert cp.cache_levels(points[-2:], caches) == (CacheLevel("DRAM", 0, 19e9),)  # 64 MiB: transition


def test_each_memory_roof_is_the_best_of_both_kinds_of_traffic_at_its_sizes() -> None:
    """Issue 33: a matrix-vector Gemm reads its weights and writes a vector; against a roof of the
    2-read-1-write stream alone it read 124 %.  A read-dominated probe at the same working sets sets
    the level where it is faster, and never lowers one where the stream is."""
    kib, mib = cp.KIB, cp.MIB
    streams = [_stream(256 * kib, 70), _stream(4 * mib, 60), _stream(128 * mib, 13)]
    reads = [
        Probe("read-256KiB", "memory", "float32", 256 * kib, 90e9, 1e-3),
        Probe("read-4MiB", "memory", "float32", 4 * mib, 55e9, 1e-3),  # slower here: the stream's stays
        Probe("read-128MiB", "memory", "float32", 128 * mib, 17e9, 1e-3),
    ]
    caches = [("L1", 48 * kib), ("L2", 1 * mib), ("L3", 32 * mib)]
    levels = cp.cache_levels([*streams, *reads], caches)
    assert [(lv.name, lv.bandwidth) for lv in levels] == [("L2", 90e9), ("L3", 60e9), ("DRAM", 17e9)]
    assert cp.dram_bandwidth([*streams, *reads], 32 * mib) == 17e9
    assert [p.name for p in cp.best_per_size([*streams, *reads])] == [
        "read-256KiB",
        f"stream-{4 * mib}",  # this file's _stream names by bytes
        "read-128MiB",
    ]
    # without a known last-level cache the two largest working sets count, every kind at them
    assert cp.dram_bandwidth([*streams, *reads]) == 60e9
    # the plan measures both kinds; a read probe is a chain of matrix-vector products over one weight
    plan = {s.name: s for s in cp.plan_probes(("float32",), "full")}
    assert {f"{cp.READ_PREFIX}{cp.size_label(n)}" for n in cp.READ_SIZES["full"]} <= set(plan)
    model, inputs = plan["read-1MiB"].build()
    assert {n.op_type for n in model.graph.node} == {"MatMul"} and inputs["X"].shape[0] == 1
    weight = model.graph.initializer[0]
    assert 4 * weight.dims[0] * weight.dims[1] == pytest.approx(cp.MIB, rel=0.05)
    assert plan["read-1MiB"].work == len(model.graph.node) * 4 * (
        weight.dims[0] * weight.dims[1] + 2 * weight.dims[0]
    )
    # a read probe whose weights the backend kept in bf16 is a bf16 figure, never a float32 roof
    assert cp.ran_dtype(plan["read-1MiB"], "bf16") == "bfloat16"
    assert cp.ran_dtype(plan["stream-1MiB"], "bf16") == "float32"  # an Add chain has no weights


def test_confirmation_reruns_the_float32_winner_and_the_dram_probes() -> None:
    specs = cp.plan_probes(("float32", "int8"), "full", cores=8)  # 8 threads: the ladder reaches 2048
    probes = [Probe(s.name, s.kind, s.dtype, s.size, float(s.size), 1.0) for s in specs]  # biggest wins
    names = [s.name for s in cp.confirmation_specs(specs, probes, 32 * cp.MIB)]
    assert names == ["gemm-2048-float32", "stream-128MiB", "stream-256MiB"]


def test_the_probe_that_sets_each_cache_level_gets_a_second_window() -> None:
    """Issue 33: a cache level's roof was one window of one probe.  Beside one busy process a
    one-thread OpenVINO calibration (cached: the probe has a core of its own) read its L3 at 0.888
    of the quiet one.  The probe that sets each level is confirmed like the DRAM and compute roofs,
    so its windows must agree before the calibration is cached; the other ladder points are not."""
    kib, mib = cp.KIB, cp.MIB
    caches = [("L1", 32 * kib), ("L2", mib), ("L3", 32 * mib)]
    specs = cp.plan_probes(("float32",), "full")
    ladder = {32 * kib: 200, 512 * kib: 120, 4 * mib: 80, 16 * mib: 70, 128 * mib: 34, 256 * mib: 33}
    probes = [
        Probe(f"stream-{cp.size_label(size)}", "memory", "float32", size, gbs * 1e9, 1e-3)
        for size, gbs in ladder.items()
    ]
    assert cp.level_setters(probes, caches) == ["stream-32KiB", "stream-512KiB", "stream-4MiB"]
    named = [Probe(s.name, s.kind, s.dtype, s.size, 1e9, 1.0) for s in specs if s.kind == "compute"]
    names = [s.name for s in cp.confirmation_specs(specs, [*named, *probes], 32 * mib, caches)]
    assert names[-5:] == ["stream-32KiB", "stream-512KiB", "stream-4MiB", "stream-128MiB", "stream-256MiB"]
    assert "stream-16MiB" not in names
    assert "stream-32KiB" not in [s.name for s in cp.confirmation_specs(specs, [*named, *probes], 32 * mib)]


def test_read_probes_run_only_where_a_cache_holds_their_weight() -> None:
    """Issue 33: a read probe in DRAM never set a roof (quiet: read-128MiB 22.1 against the stream's
    27.6 GB/s at one thread, 42.8 against 53.0 at two; under load 3.6-4.2 against 5.2-6.3) and cost
    a 128 MiB weight in up to 6 windows.  No read probe of the full plan is a DRAM probe, so none is
    confirmed or windowed, and every one fits the last-level cache of this project's EPYC VMs."""
    llc = 32 * cp.MIB
    specs = cp.plan_probes(("float32",), "full")
    reads = [s for s in specs if s.name.startswith(cp.READ_PREFIX)]
    assert reads and all(s.size <= llc for s in reads)
    probes = [Probe(s.name, s.kind, s.dtype, s.size, float(s.size), 1.0) for s in specs]
    assert not [p.name for p in cp.dram_points(probes, llc) if p.name.startswith(cp.READ_PREFIX)]


def test_theoretical_peak_from_flags() -> None:
    clock = 2.0e9
    avx512 = CpuInfo("x", frozenset({"avx", "avx2", "fma", "avx512f", "avx512_vnni"}), 4, "x86_64")
    peaks = cp.theoretical_peak_flops(avx512, threads=2, clock=clock)
    assert peaks["float32"] == 2 * clock * 16 * 2 * 2  # 2 cores x 16 lanes x FMA x 2 units
    assert peaks["float16"] == peaks["float32"] and peaks["int8"] == 4 * peaks["float32"]
    avx2 = CpuInfo("y", frozenset({"avx", "avx2", "fma"}), 4, "x86_64")
    assert cp.theoretical_peak_flops(avx2, threads=0, clock=clock)["float32"] == 4 * clock * 8 * 2 * 2
    assert cp.theoretical_peak_flops(avx2, threads=0, clock=0.0) == {}
    assert "bfloat16" not in peaks and "bfloat16" not in cp.theoretical_peak_flops(avx2, 0, clock)
    # a bf16 dot product multiplies two pairs per fp32 lane where an FMA multiplies one (issue 33:
    # OpenVINO's bf16 FullyConnected read 176 % of the float32 FMA peak on this AVX512-BF16 EPYC)
    bf16 = CpuInfo("z", frozenset({"avx", "avx2", "fma", "avx512f", "avx512_bf16"}), 4, "x86_64")
    with_bf16 = cp.theoretical_peak_flops(bf16, threads=2, clock=clock)
    assert with_bf16["bfloat16"] == 2 * with_bf16["float32"]
    amx = CpuInfo("a", frozenset({"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}), 4, "x86_64")
    assert cp.theoretical_peak_flops(amx, threads=2, clock=clock)["bfloat16"] == 2 * clock * 1024


def test_a_compute_probe_is_a_roof_of_the_precision_it_ran_in() -> None:
    gemm = next(s for s in cp.plan_probes(("float32",), "quick") if s.kind == "compute")
    stream = next(s for s in cp.plan_probes(("float32",), "quick") if s.kind == "memory")
    assert cp.ran_dtype(gemm, "bf16") == "bfloat16" and cp.ran_dtype(gemm, "fp32") == "float32"
    assert cp.ran_dtype(gemm, "") == cp.ran_dtype(gemm, "mixed") == "float32"  # unknown: its model's
    assert cp.ran_dtype(stream, "bf16") == "float32"  # bytes are bytes: only compute roofs move
    # the float32 plan's winner is confirmed per precision it ran in (bf16 GEMMs, an f32 conv)
    specs = cp.plan_probes(("float32",), "quick")
    probes = [
        Probe(
            s.name, s.kind, "bfloat16" if s.name.startswith("gemm") else s.dtype, s.size, float(s.size), 1.0
        )
        for s in specs
    ]
    names = {s.name for s in cp.confirmation_specs(specs, probes, 32 * cp.MIB) if s.kind == "compute"}
    assert names == {
        "gemm-1024-float32",
        max(
            (s for s in specs if s.kind == "compute" and not s.name.startswith("gemm")), key=lambda s: s.size
        ).name,
    }


@pytest.mark.parametrize("precision", ["f32", "bf16"])
def test_openvino_probes_record_the_precision_its_runtime_model_ran(precision: str) -> None:
    """OpenVINO 2026.4 runs a float32 MatMul in bf16 on CPUs with AVX512-BF16 (its default there):
    the probe's figure is a bf16 figure, and the runtime model's runtimePrecision says so."""
    pytest.importorskip("openvino")
    from pytest_roofline.model import ModelSpec

    backend = get_backend("openvino", {"precision": precision, "threads": "1"})
    spec = next(s for s in cp.plan_probes(("float32",), "quick") if s.name.startswith("matmul-"))
    model, inputs = spec.build()
    with backend.open(ModelSpec.create(model), inputs) as session:
        ran = session.compute_precision()
    if precision == "bf16" and ran != "bf16":
        pytest.skip(f"this CPU runs no bf16 (OpenVINO computes {ran})")
    assert ran == {"f32": "fp32", "bf16": "bf16"}[precision]
    probe = cp.run_probe(backend, spec, 0.01)
    assert probe.dtype == {"f32": "float32", "bf16": "bfloat16"}[precision]


def test_stream_probe_counts_inputs_read_and_outputs_written() -> None:
    spec = next(s for s in cp.plan_probes(("float32",), "quick") if s.kind == "memory")
    model, inputs = spec.build()
    elements = inputs["X"].size
    assert all(node.op_type == "Add" for node in model.graph.node)
    assert spec.work == len(model.graph.node) * 3 * 4 * elements  # 2 read + 1 written per node
    assert spec.size == pytest.approx(3 * 4 * elements, rel=0.01)


# --- CLI ------------------------------------------------------------------------------------------


def test_cli_json_and_table(cached: Cached, capsys: pytest.CaptureFixture[str]) -> None:
    roofline, _, cache_dir = cached
    assert main(["calibrate", "--quick", "--format", "json", "--cache-dir", str(cache_dir)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"peak_flops", "peak_bandwidth", "ridge_point", "fingerprint", "probes"} <= set(data)
    assert data["peak_flops"] == roofline.peak and math.isclose(data["ridge_point"], roofline.ridge_point)
    assert data["dispatch_floor"] == roofline.dispatch_floor > 0  # the third roof joins the contract
    assert main(["calibrate", "--quick", "--cache-dir", str(cache_dir)]) == 0
    table = capsys.readouterr().out
    assert "compute roof float32" in table and "ridge point" in table and "DRAM" in table
    assert f"the least time of one kernel ({cp.DISPATCH_PROBE})" in table
    assert "stream-" in table and "gemm-512-float32" in table


@pytest.mark.parametrize(
    "argv",
    [
        ["calibrate", "--backend", "nope"],
        ["calibrate", "--option", "bogus=1"],
        ["calibrate", "--dtype", "bfloat7"],
    ],
)
def test_cli_errors_exit_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err and len(err.splitlines()) == 1


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse usage errors
        return int(exc.code or 0)


def test_cached_path_loads_no_runtime(cached: Cached) -> None:
    _, _, cache_dir = cached
    code = (
        "import sys; from pytest_roofline.roofline.calibrate import calibrate\n"
        "class B:\n"
        "    name = 'onnxruntime'\n"
        f"    def fingerprint(self): return {_fingerprint_literal(cached)}\n"
        f"r = calibrate(B(), cache_dir={str(cache_dir)!r}, quick=True)\n"
        "print(r.peak > 0, 'onnxruntime' in sys.modules, 'openvino' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert out.stdout.split() == ["True", "False", "False"], out.stderr


def _fingerprint_literal(cached: Cached) -> str:
    roofline, backend, _ = cached
    return repr(backend.fingerprint())


def test_two_close_sessions_are_averaged_and_a_disturbed_one_is_dropped():
    from pytest_roofline.roofline import Probe
    from pytest_roofline.roofline.probes import combine_sessions

    a = Probe("conv", "compute", "float32", 1, 200e6 / 2e-3, 2e-3)
    b = Probe("conv", "compute", "float32", 1, 200e6 / 1.9e-3, 1.9e-3)
    slow = Probe("conv", "compute", "float32", 1, 200e6 / 3.3e-3, 3.3e-3)
    both = combine_sessions(a, b)
    assert both.seconds == pytest.approx(1.95e-3) and both.value == pytest.approx(200e6 / 1.95e-3)
    assert combine_sessions(slow, b) == b
    assert combine_sessions(b, slow) == b


def test_a_gpu_timed_on_its_device_times_its_memory_probes_by_kernel_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A backend whose layers are timed on the device (CUPTI on a GPU) times its memory probes by
    the session's device time, as its layers are, not end to end: host-timed, the H200's
    L2-resident streams read the launch floor (7 µs a kernel) and layers beat that "L2" roof.
    Compute probes stay timed end to end; off such a device nothing changes."""
    import statistics

    from pytest_roofline.backends.onnxruntime.runner import OnnxRuntimeBackend, OnnxRuntimeSession

    calls: dict[str, list[Any]] = {"time": [], "device": []}
    real_time = OnnxRuntimeSession.time

    def spy_time(self: Any, iterations: int) -> list[float]:
        calls["time"].append(iterations)
        return real_time(self, iterations)

    def device_time(self: Any, iterations: int) -> list[float]:
        calls["device"].append(iterations)
        return [1e-3 * (1 + i % 3) for i in range(iterations)]  # stand-in GPU times

    monkeypatch.setattr(OnnxRuntimeSession, "time", spy_time)
    backend = OnnxRuntimeBackend({"intra_op_threads": "1"})
    specs = {s.name: s for s in cp.plan_probes(("float32",), "quick", cores=1)}
    stream = next(s for s in specs.values() if s.kind == "memory" and s.size >= 2**20)
    gemm = next(s for s in specs.values() if s.kind == "compute")

    host = cp.run_probe(backend, stream, 0.02)  # this backend on the CPU: end to end
    assert not backend.device_kernel_times() and host.seconds > 0
    assert OnnxRuntimeSession.device_time is not None  # the real one, off a GPU: no device timer
    calls["time"].clear()

    monkeypatch.setattr(OnnxRuntimeSession, "device_time", device_time)
    monkeypatch.setattr(OnnxRuntimeBackend, "device_kernel_times", lambda self: True)
    probe = cp.run_probe(backend, stream, 0.02)
    assert calls["time"] == [1, 2]  # warm-up and estimate: the figure is the device's
    (count,) = calls["device"]
    assert count >= cp.MIN_SAMPLES
    assert probe.seconds == statistics.median(1e-3 * (1 + i % 3) for i in range(count))
    assert probe.value == stream.work / probe.seconds

    calls["time"].clear()
    calls["device"].clear()
    cp.run_probe(backend, gemm, 0.02)  # a compute probe: end to end even so
    assert len(calls["time"]) == 3 and not calls["device"]


def test_the_real_device_time_is_empty_off_a_gpu() -> None:
    """onnxruntime on the CPU has no device timer: ``device_time`` gives nothing to use."""
    from pytest_roofline.model import ModelSpec

    backend = get_backend("onnxruntime", {"intra_op_threads": "1"})
    spec = next(s for s in cp.plan_probes(("float32",), "quick", cores=1) if s.kind == "memory")
    model, inputs = spec.build()
    with backend.open(ModelSpec.create(model), inputs) as session:
        assert session.device_time(3) == []


def test_a_device_timed_gpu_floor_is_its_least_kernel_device_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a GPU timed by CUPTI the dispatch floor is the least device time of one kernel of the
    chain (its layers are device times), per profiled window, and the calibration records it
    instead of leaving the GPU without a floor.  onnxruntime on the CPU stands in; its profile's
    kernel times are replaced by known device times."""
    from pytest_roofline.backends.base import KernelProfile, KernelRecord
    from pytest_roofline.backends.onnxruntime.runner import OnnxRuntimeBackend, OnnxRuntimeSession
    from pytest_roofline.roofline.calibrate import _floor

    windows = iter([(2.0e-6, 1.1e-6), (0.0, 0.93e-6), (1.5e-6, 1.2e-6)])

    def device_profile(self: Any, iterations: int, warmup: int = 1) -> KernelProfile:
        times = next(windows)
        kernels = tuple(KernelRecord(f"Relu_{i}", "Relu", (f"Relu_{i}",), (t,)) for i, t in enumerate(times))
        return KernelProfile(kernels=kernels, iterations=iterations, timing="device", timer_resolution=1e-9)

    monkeypatch.setattr(OnnxRuntimeSession, "profile", device_profile)
    backend = OnnxRuntimeBackend({"intra_op_threads": "1"})
    floor = cp.device_floor(backend)
    assert floor.windows == (1.1e-6, 0.93e-6, 1.2e-6) and floor.seconds == 0.93e-6

    loads: list[MachineLoad] = []
    gpu = {"gpu": {"name": "stand-in"}, "providers": ["CUDAExecutionProvider"]}
    assert _floor(backend, gpu, True, None, loads) is None  # no device timer: no floor for a GPU
    monkeypatch.setattr(OnnxRuntimeBackend, "device_kernel_times", lambda self: True)
    windows = iter([(3e-6,), (2e-6,), (4e-6,)])
    recorded = _floor(backend, gpu, True, None, loads)
    assert recorded is not None and recorded.seconds == 2e-6 and len(loads) == 1
