"""Calibrate a device's roofline through a backend, cached per device fingerprint.

:func:`calibrate` runs the probes of :mod:`pytest_roofline.roofline.probes` (GEMM ladders and a
conv per dtype, a stream ladder from cache-sized to far beyond the last-level cache; on an NVIDIA
GPU the GPU plan, buffers bound on the device) through the given backend and returns a
:class:`~pytest_roofline.roofline.DeviceRoofline`.  The result is cached as JSON in the user's
cache directory, one file per fingerprint (CPU model, flag hash, cores, GPU identity, backend
name/version/provider/threads, dtypes, probe plan), so later runs and other processes reuse it;
the cached path reads one small file and imports nothing heavy.

Validity: a calibration records the spread of its two sessions per roof and the machine load it
was measured under (:mod:`pytest_roofline.device.load`); measured under load, its roof-setting
probes get one more session and the roofline carries a warning.  Unsteady figures are measured
again (:func:`~pytest_roofline.roofline.probes.steady_sessions`); a roof that stays unsteady is an
``unsteady roof`` warning the guard names.  A calibration whose roof probes' windows never agree, or
whose every kept window ran beside other work (``not cached`` warnings), is never written as the
device's roof: it is kept :data:`UNSETTLED_SECONDS` apart (``unsettled-<hash>.json``) so later
processes do not pay for it again, each reuse saying so in the roofline's warnings.  Cached values
are checked on read (a zero, negative, NaN or non-numeric roof is a corrupt cache: said,
re-measured, replaced).
``spot_check=True`` re-runs one or two cheap probes against a cached roofline (about 0.5 s) and
re-measures it when they are off by more than :data:`SPOT_TOLERANCE`; a spot check that kept the
file stands for :data:`SPOT_FRESH_SECONDS` (a stamp beside it), so a test re-run alone does not pay
it at every start.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.device import CpuInfo, cpu_info
from pytest_roofline.errors import BackendError, OptionError, RooflineError
from pytest_roofline.files import atomic_write_json, read_document
from pytest_roofline.roofline.roofs import CacheLevel, DeviceRoofline, Probe, roofline_data_problem

if TYPE_CHECKING:
    from pytest_roofline.backends.base import Backend
    from pytest_roofline.device.load import MachineLoad
    from pytest_roofline.roofline.probes import DispatchFloor, ProbeSpec

__all__ = [
    "CACHE_ENV",
    "CACHE_UNSETTLED_ENV",
    "CALIBRATION_VERSION",
    "cache_path",
    "cached_roofline",
    "calibrate",
    "calibration_fingerprint",
    "default_cache_dir",
    "not_cacheable",
    "spot_check",
    "unsettled_path",
]

CACHE_ENV = "ROOFLINE_CACHE_DIR"
#: Set to 1, a calibration whose roofs did not settle (a busy machine) is cached all the same: for a
#: runner that is never quiet, where measuring again in every process costs more than low roofs.
CACHE_UNSETTLED_ENV = "ROOFLINE_CACHE_UNSETTLED"
#: An unsettled calibration (its roofs did not agree across windows: a busy machine, or on a VM
#: memory traffic its CPU load cannot see) is not the device's roof, but measuring it again in every
#: process cost 45 s a pytest process at load 12: it
#: is kept this long in its own file (``unsettled-<hash>.json``, never read as a settled cache), each
#: reuse says so in the roofline's warnings, and a settled calibration removes it.
UNSETTLED_SECONDS = 1800.0
UNSETTLED_REUSED = "unsettled calibration reused"  # how the reuse's warning begins
CALIBRATION_VERSION = 11  # bump when probes change meaning: old cache files then miss
# 11: a roof whose every kept window saw other processes on any CPU is not cached, a one-thread probe's
#    spare core included, and the dispatch floor is judged so too (beside one busy process a one-thread
#    calibration's roofs read faster or slower than quiet's by as much as quiet ones differ)
# 10: each cache level's setting probe is confirmed in windows that agree (one window set it; beside
#    one busy process a one-thread L3 read 0.888 of the quiet one), and no read probe runs in DRAM
# 9: a GPU timed by CUPTI times its memory probes on the device (its L2 roof was a launch rate)
#    and records a dispatch floor (a kernel's least device time)
# 8: each memory level is the best of the 2-read-1-write stream and a read-dominated probe (read-SIZE,
#    matrix-vector products); OpenVINO's small streams timed against their chain twice as long; a
#    window is busy only where others crowd the CPUs the probe ran on (a one-thread roof beside one
#    busy process on two cores is the device's)
# 7: a compute probe is a roof of the precision the backend says it ran in (OpenVINO's float32
#    probes run bf16 on AVX512-BF16 CPUs: a bfloat16 roof, the FMA peak at twice float32's)
# 6: the dispatch floor (a chain of the cheapest kernels; CPU backends), roof probes measured until
#    their best two windows agree within WINDOW_AGREEMENT, a calibration that cannot is not cached
# 5: unsteady probes re-measured (sessions apart, a cache-sized stream slower than DRAM), spread is
#    the best session's distance to the nearest other one, `unsteady roof` warnings; OpenVINO's
#    stream probes timed by its kernel counters over 2-D views
# 3: a CPU's compute roof is the higher of the best probe and the FMA peak at the measured clock
# 2: model-shaped probes (weights prepacked), 2048 only on >= 8 threads, threads in the key,
#    measured boost clock, cache levels with their capacity (issue 21)
CALIBRATION_KIND = "calibration"  # the cache file's `kind` (files written before it have none)
LOCK_TIMEOUT = 600.0  # seconds to wait for another process's calibration
SPOT_TOLERANCE = 0.15  # a spot-checked probe further than this from its cached figure: re-measure
SPOT_SECONDS = 0.04  # timed budget of each spot-check probe (MIN_SAMPLES runs at least)
#: A spot check that kept a cache file stands this long for later processes (its stamp beside the
#: file): a test re-run alone paid the spot check (two probe sessions, ~0.3 s) at every start.
SPOT_FRESH_SECONDS = 600.0

Progress = Callable[[str], None]

_said: set[str] = set()  # messages already given in this process (each is said once)


def default_cache_dir() -> Path:
    """``$ROOFLINE_CACHE_DIR`` if set, else the user's cache dir for pytest-roofline."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("pytest-roofline"))


def calibration_fingerprint(
    backend: Backend, dtypes: Iterable[str] | None = None, quick: bool = False
) -> dict[str, Any]:
    """What a calibration depends on: CPU, backend configuration, dtypes and probe plan.

    Cheap by design (reads ``/proc/cpuinfo`` once per process and asks the backend for its own
    fingerprint); normalized through JSON so it compares equal to a stored copy.
    """
    info = cpu_info()
    from pytest_roofline.roofline.probes import flags_hash

    data: dict[str, Any] = dict(backend.fingerprint())
    data.update(
        backend=backend.name,
        cpu_model=info.model,
        cpu_flags_hash=flags_hash(info.flags),
        cpu_cores=info.cores,
        machine=info.machine,
        dtypes=list(_dtypes(dtypes, _on_gpu(data))),
        threads=_threads(data, info),
        probe_plan="quick" if quick else "full",
        calibration_version=CALIBRATION_VERSION,
    )
    return json.loads(json.dumps(data, sort_keys=True, default=str))


def cache_path(fingerprint: dict[str, Any], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache file of ``fingerprint``: ``<cache dir>/calibration-<hash>.json``."""
    digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:20]
    directory = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return directory / f"calibration-{digest}.json"


def calibrate(
    backend: Backend,
    *,
    force: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    dtypes: Iterable[str] | None = None,
    quick: bool = False,
    spot_check: bool = False,
) -> DeviceRoofline:
    """The device's roofline through ``backend``: from the cache, or measured and cached.

    Args:
        backend: any :class:`~pytest_roofline.backends.base.Backend`; probes run through
            ``backend.open(spec, inputs).time(n)`` like user models.
        force: measure even when a cached calibration exists, and replace it.
        cache_dir: where calibrations are cached (default ``$ROOFLINE_CACHE_DIR`` or the user's
            cache dir).  An unwritable directory means calibrating in memory (said once).
        progress: called with one line per step: probe figures (``calibrate [i/n] ...``) and
            notes (start, done, cache and spot-check notes; see
            :func:`pytest_roofline.roofline.progress.terminal_progress`); without it cache
            problems are reported with :func:`warnings.warn`.
        dtypes: dtypes to calibrate; ``float32`` is always included.  Default: every dtype the
            device's plan knows (CPU: float32, float16, int8; GPU: also bfloat16); those the
            backend cannot run are skipped.
        quick: the same probes on fewer sizes (for tests and smoke runs); cached separately.
        spot_check: re-run one or two cheap probes against a cached roofline (about 0.5 s) and
            re-measure when they differ by more than 15 % (see :func:`spot_check`); skipped when
            one kept the same file within :data:`SPOT_FRESH_SECONDS`.

    Raises:
        OptionError: an unknown dtype.
        BackendError: a float32 probe failed on the backend.
    """
    fingerprint = calibration_fingerprint(backend, dtypes, quick)
    wanted = tuple(fingerprint["dtypes"])
    path = cache_path(fingerprint, cache_dir)
    if not force:
        cached, problem = _read_cache(path, fingerprint)
        if cached is None and problem is None:
            cached = _read_unsettled(path, fingerprint, progress)
            if cached is not None:
                return cached
        if cached is not None:
            if not spot_check or _spot_fresh(path):
                return cached
            checked, settled = _spot_verdict(backend, cached, progress)
            if checked is not None:
                if checked is not cached:  # a faster DRAM reading raised the roof: keep it
                    _write_cache(path, fingerprint, checked, progress)
                if settled:
                    _stamp_spot(path)
                return checked
            force = True  # measure again and replace the file
        elif problem:
            _say(f"calibration cache {path} is corrupt ({problem}); re-measuring and replacing it", progress)

    lock = _lock(path, progress)
    if lock is None:
        return _measure(backend, fingerprint, wanted, quick, progress)
    import filelock

    try:
        with lock:
            if not force:  # another process may have calibrated while we waited for the lock
                cached, _ = _read_cache(path, fingerprint)
                if cached is not None:
                    return cached
                unsettled = _read_unsettled(path, fingerprint, progress)
                if unsettled is not None:
                    return unsettled
            roofline = _measure(backend, fingerprint, wanted, quick, progress)
            if force:  # the file it replaces is gone, even when this one is not cached: measured next time
                _remove(path)
            _write_cache(path, fingerprint, roofline, progress)
            return roofline
    except filelock.Timeout:
        _say(
            f"calibration cache {path} stayed locked for {LOCK_TIMEOUT:.0f} s; calibrating in memory",
            progress,
        )
        return _measure(backend, fingerprint, wanted, quick, progress)


def spot_check(backend: Backend, roofline: DeviceRoofline) -> dict[str, Any]:
    """Re-run one or two cheap probes of ``roofline`` through ``backend``; compare with the cache.

    The probes are a mid-size float32 GEMM and the smallest DRAM-range stream of the roofline's
    own plan (:func:`~pytest_roofline.roofline.probes.spot_check_specs`), each timed for a few
    runs: about 0.1-0.5 s.  A reading off by more than 15 % is taken again and the closer of the
    two kept (a short reading can catch a passing hiccup; a cache measured under load stays off in
    both).  Returns ``{"ratios": {probe: now / cached}, "seconds": wall, "load": MachineLoad dict,
    "off": bool}``; ``off`` when a ratio leaves 1 ± 15 %.
    """
    from pytest_roofline.device import load as machine
    from pytest_roofline.roofline import probes as cp

    fingerprint = roofline.fingerprint
    plan = str(fingerprint.get("probe_plan", "full"))
    dtypes = tuple(fingerprint.get("dtypes") or ("float32",))
    specs = _plan(fingerprint, dtypes, plan)
    cached = {p.name: p for p in roofline.probes}
    chosen = cp.spot_check_specs(specs, list(roofline.probes), _last_level_cache(fingerprint))
    started, before = time.perf_counter(), machine.snapshot()
    ratios: dict[str, float] = {}
    for spec in chosen:
        probe = cp.run_probe(backend, spec, SPOT_SECONDS)
        ratios[spec.name] = probe.value / cached[spec.name].value
        if _off(ratios[spec.name]):  # one short reading can be a passing hiccup: read it again
            again = cp.run_probe(backend, spec, SPOT_SECONDS).value / cached[spec.name].value
            ratios[spec.name] = min(
                ratios[spec.name], again, key=lambda r: abs(math.log(r)) if r > 0 else math.inf
            )
    load = machine.between(before, machine.snapshot())
    off = any(_off(r) for r in ratios.values())
    return {"ratios": ratios, "seconds": time.perf_counter() - started, "load": load.to_dict(), "off": off}


def not_cacheable(roofline: DeviceRoofline) -> str:
    """Why ``roofline`` must not be cached (its ``not cached`` warning), or ``""``."""
    from pytest_roofline.roofline.probes import NOT_CACHED

    return next((w for w in roofline.warnings if w.startswith(NOT_CACHED)), "")


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def unsettled_path(path: Path) -> Path:
    """Where the unsettled calibration of the cache file ``path`` is kept (:data:`UNSETTLED_SECONDS`)."""
    return path.with_name(path.name.replace("calibration-", "unsettled-", 1))


def _read_unsettled(
    path: Path, fingerprint: dict[str, Any], progress: Progress | None
) -> DeviceRoofline | None:
    """The unsettled calibration kept beside ``path`` when it is younger than :data:`UNSETTLED_SECONDS`,
    with a warning that says it is reused (its own ``not cached`` warning stays first); else None."""
    unsettled = unsettled_path(path)
    roofline, _ = _read_cache(unsettled, fingerprint)
    if roofline is None:
        return None
    try:
        written = float(json.loads(read_document(unsettled))["unsettled"]["written"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    age = time.time() - written
    if not 0 <= age < UNSETTLED_SECONDS:
        return None
    note = (
        f"{UNSETTLED_REUSED} ({age / 60:.0f} min old, {unsettled.name}): not the device's roof; "
        "a settled calibration replaces it (`roofline calibrate --force` when quiet)"
    )
    _say_once(f"unsettled:{unsettled}", note, progress)
    return replace(roofline, warnings=(*roofline.warnings, note))


def _spot_path(path: Path) -> Path:
    return path.with_name(f"{path.stem}.spot.json")


def _file_state(path: Path) -> str | None:
    """The cache file's content digest (a few KB): another calibration's file has another one."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _stamp_spot(path: Path) -> None:
    """Note beside the cache file ``path`` that a spot check kept it now (best effort)."""
    state = _file_state(path)
    if state is None:
        return
    try:
        atomic_write_json(_spot_path(path), {"checked": time.time(), "file": state})
    except (OSError, ValueError):
        pass


def _spot_fresh(path: Path) -> bool:
    """Whether a spot check kept the cache file ``path``, as it is now, within
    :data:`SPOT_FRESH_SECONDS` (a rewritten or replaced file has another state: checked again)."""
    try:
        stamp = json.loads(_spot_path(path).read_text(encoding="utf-8"))
        age = time.time() - float(stamp["checked"])
        same = stamp["file"] == _file_state(path)
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return same and 0 <= age < SPOT_FRESH_SECONDS


def _off(ratio: float) -> bool:
    """Whether a spot-check reading (now / cached) leaves 1 ± :data:`SPOT_TOLERANCE`."""
    return ratio > 0 and abs(math.log(ratio)) > math.log(1 + SPOT_TOLERANCE)


def _write_cache(
    path: Path, fingerprint: dict[str, Any], roofline: DeviceRoofline, progress: Progress | None
) -> None:
    """Write ``roofline`` as the calibration cache ``path`` (atomically); a failure is one note.

    A calibration whose roofs did not agree across windows (:func:`not_cacheable`) is not written,
    and says so: a busy calibration must never become the device's roof for later runs."""
    reason = not_cacheable(roofline)
    unsettled = bool(reason) and os.environ.get(CACHE_UNSETTLED_ENV, "") not in ("1", "true", "yes")
    if unsettled:
        _say(
            f"calibration {reason}; not cached as the device's roof: kept {UNSETTLED_SECONDS / 60:.0f} min "
            f"as unsettled for later runs, which say so ({CACHE_UNSETTLED_ENV}=1 caches it as settled)",
            progress,
        )
    target = unsettled_path(path) if unsettled else path
    document: dict[str, Any] = {
        "kind": CALIBRATION_KIND,
        "fingerprint": fingerprint,
        "roofline": roofline.to_dict(),
    }
    if unsettled:
        document["unsettled"] = {"written": time.time(), "reason": reason}
    try:
        atomic_write_json(target, document, indent=1)
        if not unsettled:  # a settled calibration replaces an unsettled one
            _remove(unsettled_path(path))
    except OSError as exc:
        _say_once(
            f"write:{path.parent}",
            f"cannot write calibration cache in {path.parent} ({exc.strerror or exc}); "
            "calibrated in memory only",
            progress,
        )


def _spot_check_passes(backend: Backend, roofline: DeviceRoofline, progress: Progress | None) -> bool:
    """Whether the cached ``roofline`` stands (maybe with a raised DRAM roof) after a spot check."""
    return _spot_checked(backend, roofline, progress) is not None


def _spot_checked(
    backend: Backend, roofline: DeviceRoofline, progress: Progress | None
) -> DeviceRoofline | None:
    """The cached ``roofline`` after a spot check (see :func:`spot_check`): kept, or with its DRAM
    roof raised to a faster reading; None to re-measure."""
    return _spot_verdict(backend, roofline, progress)[0]


def _spot_verdict(
    backend: Backend, roofline: DeviceRoofline, progress: Progress | None
) -> tuple[DeviceRoofline | None, bool]:
    """:func:`_spot_checked`'s roofline, and whether the reading settled the cache (it agreed, or
    set a roof, on a quiet machine): False when it was kept only because the device read slower
    now, the machine was busy (a cache calibrated beside the same neighbours agrees with them), or
    the check could not run — a later process checks again rather than trust that reading.

    Figures now above the cache mean the cache was measured slow (busy, or stale) and would make
    layers read above their roofs: re-measure.  Figures now below it mean a slower moment (a busy
    machine, shared memory bandwidth): re-measuring would record that moment, and a cache from a
    faster one only understates fractions, so the cache is kept and the note says why.
    A probe that fails here leaves the cache as it is (the full calibration would fail the same).
    """
    from pytest_roofline.device.load import MachineLoad

    try:
        result = spot_check(backend, roofline)
    except Exception as exc:  # a spot check must never break a cached roofline
        _say(f"calibration spot check could not run ({type(exc).__name__}: {exc}); using the cache", progress)
        return roofline, False
    ratios = result["ratios"]
    shown = ", ".join(f"{name} {ratio:.2f}x" for name, ratio in ratios.items()) or "no probe to compare"
    figures = f"{shown} of the cached figures ({result['seconds']:.2f} s)"
    load = MachineLoad.from_dict(result["load"])
    quiet = not load.disturbed  # a reading beside busy neighbours settles nothing for later runs
    if not result["off"]:
        _notify(f"calibrate [spot check] {figures}: cache kept", progress)
        return roofline, quiet
    if all(r < 1 for r in ratios.values() if _off(r)):
        # Slower now than the cache: a busy moment, or a memory system shared with other machines
        # (this VM's DRAM figure moves by ±30 % between minutes).  A cache measured in a faster
        # moment only understates fractions; re-measuring now would record the slow moment.
        busy = (
            f"the machine is busy now ({load.describe()})"
            if load.disturbed
            else "the device reads slower now"
        )
        _say(
            f"calibration spot check: {figures}: {busy}; keeping the cache "
            "(`roofline calibrate --force` re-measures it if that lasts)",
            progress,
        )
        return roofline, False
    if roofline is not None and not _beats_a_roof(roofline, ratios):
        # a probe faster now, yet under the roof it informs (a CPU's compute roof is the FMA peak
        # when higher): the cached roofs still hold, and this VM's two speed states would otherwise
        # re-measure (8 s) at every session start
        _notify(
            f"calibrate [spot check] {figures}: faster now, still under the cached roofs; cache kept",
            progress,
        )
        return roofline, quiet
    raised = _with_faster_dram(roofline, ratios) if roofline is not None else None
    if raised is not None:  # this VM's DRAM reads ±30 % by the minute: the fastest reading is the roof
        _notify(
            f"calibrate [spot check] {figures}: DRAM reads faster now; its roof raised to "
            f"{raised.peak_bandwidth / 1e9:.3g} GB/s, the rest of the cache kept",
            progress,
        )
        return raised, quiet
    _say(
        f"calibration spot check: {figures}, off by more than {SPOT_TOLERANCE:.0%}; re-measuring",
        progress,
    )
    return None, False


def _beats_a_roof(roofline: DeviceRoofline, ratios: dict[str, float]) -> bool:
    """Whether a spot-check reading (``ratios``: now / cached probe figure) is above the roof its
    probe sets by more than :data:`SPOT_TOLERANCE`: a compute probe against its dtype's compute
    roof, a memory probe against the DRAM roof."""
    cached = {p.name: p for p in roofline.probes}
    for name, ratio in ratios.items():
        probe = cached.get(name)
        if probe is None:
            return True
        roof = (
            roofline.peak_flops.get(probe.dtype, roofline.peak)
            if probe.kind == "compute"
            else roofline.peak_bandwidth
        )
        if probe.value * ratio > roof * (1 + SPOT_TOLERANCE):
            return True
    return False


def cached_roofline(
    backend: Backend,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    dtypes: Iterable[str] | None = None,
    quick: bool = False,
) -> DeviceRoofline | None:
    """The calibration of ``backend`` on this device if one is cached, else None; never measures."""
    fingerprint = calibration_fingerprint(backend, dtypes, quick)
    return _read_cache(cache_path(fingerprint, cache_dir), fingerprint)[0]


# --- measuring ----------------------------------------------------------------------------------


def _plan(fingerprint: dict[str, Any], dtypes: tuple[str, ...], plan: str) -> list[ProbeSpec]:
    """The probes for this device: the GPU plan on an NVIDIA GPU, else the CPU plan."""
    from pytest_roofline.roofline import probes as cp

    if _on_gpu(fingerprint):
        return cp.plan_gpu_probes(dtypes, plan)
    separate = fingerprint.get("backend") in cp.FUSING_BACKENDS
    return cp.plan_probes(dtypes, plan, cores=_threads(fingerprint, cpu_info()), separate_streams=separate)


def _last_level_cache(fingerprint: dict[str, Any]) -> int:
    """Bytes of the last cache before DRAM: the GPU's L2, or the host's last-level cache."""
    caches = _caches(fingerprint)
    return caches[-1][1] if caches else 0


def _caches(fingerprint: dict[str, Any]) -> list[tuple[str, int]]:
    from pytest_roofline.roofline import probes as cp

    if _on_gpu(fingerprint):
        info = _gpu(fingerprint)
        return [("L2", info.l2_bytes)] if info is not None and info.l2_bytes else []
    return cp.system_caches() if _runs_on_cpu(fingerprint) else []  # host caches say nothing of a GPU


def _measure(
    backend: Backend,
    fingerprint: dict[str, Any],
    dtypes: tuple[str, ...],
    quick: bool,
    progress: Progress | None,
) -> DeviceRoofline:
    from pytest_roofline.device import load as machine
    from pytest_roofline.roofline import probes as cp

    plan = "quick" if quick else "full"
    specs = _plan(fingerprint, dtypes, plan)
    on_gpu = _on_gpu(fingerprint)
    if "bfloat16" in dtypes and not on_gpu:
        _notify("calibrate: bfloat16 has no probe on this device; skipped", progress)
    _notify(
        f"calibrating {backend.name} on {_device_label(fingerprint)} ({plan} plan, {len(specs)} probes; "
        "once per device, then cached)",
        progress,
    )
    started, before = time.perf_counter(), machine.snapshot()
    # the boost clock moves with the host's load (3.00-3.14 GHz in consecutive readings here): read
    # it before the probes too, and the theoretical peak takes the faster reading (~40 ms)
    first_clock = cp.clock_hz(measure=True) if not on_gpu and _runs_on_cpu(fingerprint) else 0.0
    windows: dict[str, list[MachineLoad]] = {}  # each probe session's machine load, as its sessions
    probes = _first_sessions(backend, specs, plan, progress, windows)
    caches = _caches(fingerprint)
    last_level = caches[-1][1] if caches else 0
    # A second session for the probes that set the float32 and DRAM roofs: a shared machine slows
    # a whole session at a time (cp.combine_sessions keeps the undisturbed figure).
    loads = [machine.between(before, machine.snapshot())]
    sessions = {p.name: [p] for p in probes}
    confirm = cp.confirmation_specs(specs, probes, last_level, caches if not on_gpu else None)
    _confirm(backend, confirm, sessions, plan, "confirm", progress, loads, windows)
    threads = _threads(fingerprint, cpu_info())
    busy = [load for load in (loads[0], loads[-1]) if cp.crowded(load, 0 if on_gpu else threads)]
    if busy:  # measured under load on the probes' CPUs: one more session for the roofs
        _notify(f"calibrate: measured under load ({busy[-1].describe()}); one more session", progress)
        _confirm(backend, confirm, sessions, plan, "retry under load", progress, loads, windows)
    # A busy calibration is never the device's roof: more windows until the best two agree; then
    # unsteady figures (sessions apart, a cache-sized stream slower than DRAM) are measured again
    by_name, steadied = {s.name: s for s in specs}, machine.snapshot()
    counts = {name: len(runs) for name, runs in sessions.items()}
    sessions, not_cached = cp.agreed_sessions(
        sessions,
        [s.name for s in confirm],
        lambda name: _run(backend, by_name[name], plan, f"calibrate [window] {name}", progress, windows),
        one_roof={p.name for p in cp.dram_points(probes, last_level)},
        loads=windows,
    )
    sessions, unsteady = cp.steady_sessions(
        sessions,
        caches,
        lambda name: _run(backend, by_name[name], plan, f"calibrate [steady] {name}", progress, windows),
        ladder=not on_gpu,
    )
    if any(len(sessions[name]) > count for name, count in counts.items()):
        loads.append(machine.between(steadied, machine.snapshot()))
    probes = [cp.combine_sessions(*sessions[p.name]) for p in probes]
    floor = _floor(backend, fingerprint, on_gpu, progress, loads)
    if floor is not None:  # its window's load, beside the probes' (judged for caching as they are)
        windows[cp.DISPATCH_PROBE] = [loads[-1]]
    if floor is not None and floor.seconds > 0:
        probes.append(floor.probe())
    load = _combined(loads)

    compute = [p for p in probes if p.kind == "compute"]
    peak_flops = {  # per dtype the probes ran in (cp.ran_dtype: OpenVINO's float32 probes may run bf16)
        dtype: max(p.value for p in compute if p.dtype == dtype)
        for dtype in cp.ALL_DTYPES
        if any(p.dtype == dtype for p in compute)
    }
    bandwidth = cp.dram_bandwidth(probes, last_level)
    levels = _with_capacity(cp.cache_levels(probes, caches, dram=bandwidth), fingerprint, threads)
    confirmed_compute = {s.name for s in confirm if s.kind == "compute"}
    spread = {  # how far the best session of each roof-setting probe is from the nearest other one
        "float32": max((cp.session_spread(sessions[n]) for n in confirmed_compute), default=0.0),
        "dram": max(
            (cp.session_spread(sessions[s.name]) for s in confirm if s.name not in confirmed_compute),
            default=0.0,
        ),
    }
    if floor is not None and floor.seconds > 0:
        spread["dispatch"] = floor.spread
    theoretical, theoretical_bandwidth, float32_mode, clock = _theory(
        backend, fingerprint, on_gpu, first_clock
    )
    if not on_gpu:  # a roof no kernel beats: the runtime's own convs outrun every GEMM probe
        peak_flops = {dtype: max(peak, theoretical.get(dtype, 0.0)) for dtype, peak in peak_flops.items()}
        if "float32" not in peak_flops and theoretical.get("float32"):  # every probe ran in bf16
            peak_flops = {"float32": theoretical["float32"], **peak_flops}
        # a neighbour in every window moves them alike: they agree, and are still busy.  The roofs a
        # load can move: the memory levels, the dispatch floor, and a compute roof its probe (not the
        # FMA peak) sets; judged on every CPU, a one-thread probe's spare core included (issue 33)
        confirmed = {s.name for s in confirm}
        judged = [
            p.name
            for p in probes
            if p.kind in ("memory", "dispatch")
            or (p.kind == "compute" and p.name in confirmed and theoretical.get(p.dtype, 0.0) < p.value)
        ]
        timed = {**sessions, **({cp.DISPATCH_PROBE: [floor.probe()]} if floor is not None else {})}
        not_cached = (*not_cached, *cp.busy_windows(timed, windows, judged, caches))
    warnings_: tuple[str, ...] = (*not_cached, *unsteady)
    if cp.crowded(load, 0 if on_gpu else threads):  # a one-thread probe beside one busy process: quiet
        warnings_ = (f"measured under load: {load.describe()}", *warnings_)
    roofline = DeviceRoofline(
        peak_flops=peak_flops,
        peak_bandwidth=bandwidth,
        fingerprint=fingerprint,
        cache_levels=levels,
        probes=tuple(probes),
        theoretical_peak_flops=theoretical
        if on_gpu
        else {k: v for k, v in theoretical.items() if k in peak_flops},
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        duration=time.perf_counter() - started,
        theoretical_peak_bandwidth=theoretical_bandwidth,
        float32_mode=float32_mode,
        spread=spread,
        load=load.to_dict(),
        warnings=warnings_,
        threads=0 if on_gpu else threads,
        clock=clock,
        dispatch_floor=floor.seconds if floor is not None else 0.0,
    )
    unit = "TFLOP/s" if roofline.peak >= 1e12 else "GFLOP/s"
    scale = 1e12 if unit == "TFLOP/s" else 1e9
    _notify(
        f"calibrated in {roofline.duration:.1f} s: float32{f' ({float32_mode})' if float32_mode else ''} "
        f"{roofline.peak / scale:.3g} {unit}, DRAM {bandwidth / 1e9:.4g} GB/s"
        + (f", dispatch floor {roofline.dispatch_floor * 1e6:.3g} µs" if roofline.dispatch_floor else "")
        + (f"; {warnings_[0]}" if warnings_ else ""),
        progress,
    )
    return roofline


def _floor(
    backend: Backend,
    fingerprint: dict[str, Any],
    on_gpu: bool,
    progress: Progress | None,
    loads: list[MachineLoad],
) -> DispatchFloor | None:
    """The dispatch floor of a backend computing on the host CPU, or of a GPU whose kernels are
    timed on the device (CUPTI: a kernel's least device time, :func:`~.probes.device_floor`); None
    elsewhere (a host-timed chain is a launch cost, no floor for a GPU's kernel times).  A backend
    that cannot run the chain has no floor (said once), never a failed calibration."""
    from pytest_roofline.device import load as machine
    from pytest_roofline.roofline import probes as cp

    on_device = on_gpu and backend.device_kernel_times()
    if not on_device and (on_gpu or not _runs_on_cpu(fingerprint)):
        return None
    before = machine.snapshot()
    try:
        floor = (
            cp.device_floor(backend)
            if on_device
            else cp.dispatch_floor(backend, separate=fingerprint.get("backend") in cp.FUSING_BACKENDS)
        )
    except Exception as exc:  # a backend's own error types differ
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        _notify(f"calibrate [dispatch floor]: skipped, {backend.name} cannot run it ({reason})", progress)
        return None
    loads.append(machine.between(before, machine.snapshot()))
    shown = f"{floor.seconds * 1e6:.3g} µs a kernel" if floor.seconds > 0 else "not resolved (noise)"
    _notify(f"calibrate [dispatch floor] {cp.DISPATCH_PROBE}: {shown}", progress)
    return floor


def _confirm(
    backend: Backend,
    specs: list[ProbeSpec],
    sessions: dict[str, list[Probe]],
    plan: str,
    label: str,
    progress: Progress | None,
    loads: list[MachineLoad],
    windows: dict[str, list[MachineLoad]],
) -> None:
    """Another session of ``specs``, added to each probe's ``sessions`` in place."""
    from pytest_roofline.device import load as machine

    before = machine.snapshot()
    for spec in specs:
        again = _run(backend, spec, plan, f"calibrate [{label}] {spec.name}", progress, windows)
        if again is not None:
            sessions[spec.name].append(again)
    loads.append(machine.between(before, machine.snapshot()))


def _combined(loads: list[MachineLoad]) -> MachineLoad:
    from pytest_roofline.device.load import MachineLoad

    return MachineLoad.combine(loads)


def _with_capacity(
    levels: Iterable[CacheLevel], fingerprint: dict[str, Any], threads: int
) -> tuple[CacheLevel, ...]:
    """``levels`` with the bytes each cache holds for ``threads`` threads (GPU: its L2)."""
    from pytest_roofline.roofline import probes as cp

    if _on_gpu(fingerprint):
        info = _gpu(fingerprint)
        capacities = {"L2": info.l2_bytes} if info is not None and info.l2_bytes else {}
    else:
        capacities = cp.cache_capacities(threads) if _runs_on_cpu(fingerprint) else {}
    return tuple(replace(level, capacity=capacities.get(level.name, 0)) for level in levels)


def _theory(
    backend: Backend, fingerprint: dict[str, Any], on_gpu: bool, earlier_clock: float = 0.0
) -> tuple[dict[str, float], float, str, float]:
    """(theoretical peaks, theoretical bandwidth, float32 mode, CPU clock) of the device on paper;
    the CPU clock is the faster of a reading now and ``earlier_clock`` (Hz, 0: none)."""
    from pytest_roofline.roofline import probes as cp

    if on_gpu:
        info = _gpu(fingerprint)
        mode_of = getattr(backend, "float32_mode", None)
        mode = mode_of() if callable(mode_of) else ("tf32" if info is None or info.tf32_default else "fp32")
        if info is None:
            return {}, 0.0, str(mode), 0.0
        return info.theoretical_flops(), info.theoretical_bandwidth(), str(mode), 0.0
    if not _runs_on_cpu(fingerprint):
        return {}, 0.0, "", 0.0
    info = cpu_info()
    clock = max(cp.clock_hz(measure=True), earlier_clock)  # the max boost clock: cpufreq, else measured
    return cp.theoretical_peak_flops(info, _threads(fingerprint, info), clock), 0.0, "", clock


def _gpu(fingerprint: dict[str, Any]) -> Any:
    """The :class:`~pytest_roofline.device.gpu.GpuInfo` of the fingerprint's GPU, or None."""
    from pytest_roofline.device.gpu import gpu_info

    gpu = fingerprint.get("gpu")
    index = gpu.get("index", 0) if isinstance(gpu, dict) else 0
    return gpu_info(int(index) if isinstance(index, int) else 0)


def _device_label(fingerprint: dict[str, Any]) -> str:
    from pytest_roofline.device import device_name

    return device_name(fingerprint)


def _first_sessions(
    backend: Backend,
    specs: list[ProbeSpec],
    plan: str,
    progress: Progress | None,
    windows: dict[str, list[MachineLoad]],
) -> list[Probe]:
    """One session of each probe of ``specs``, in the plan's order: the figures.

    A read probe the backend runs in another precision (OpenVINO 2026.4 keeps a float32 MatMul's
    weights in bf16 on AVX512-BF16 CPUs: half the bytes counted) is no float32 memory roof: it is
    opened but not timed (:class:`~pytest_roofline.roofline.probes.OtherPrecision`), and the larger
    read probes after it are not built (round four: at one thread read-1MiB and every larger one ran
    in bf16, at two threads from read-256KiB up; each was built, run, then dropped)."""
    from pytest_roofline.roofline.probes import READ_PREFIX, OtherPrecision

    probes: list[Probe] = []
    other: OtherPrecision | None = None  # the first read probe that ran in another precision
    for index, spec in enumerate(specs, 1):
        step = f"calibrate [{index}/{len(specs)}] {spec.name}"
        if other is not None and spec.name.startswith(READ_PREFIX):
            _notify(f"{step}: not run, {other.name} ran in {other.dtype} on {backend.name}", progress)
            continue
        try:
            probe = _run(backend, spec, plan, step, progress, windows)
        except OtherPrecision as exc:
            _notify(f"{step}: runs in {exc.dtype}, not a {spec.dtype} memory roof; not timed", progress)
            other = exc
            continue
        if probe is not None:
            probes.append(probe)
    return probes


def _run(
    backend: Backend,
    spec: ProbeSpec,
    plan: str,
    step: str,
    progress: Progress | None,
    windows: dict[str, list[MachineLoad]] | None = None,
) -> Probe | None:
    """One probe; an optional probe the backend cannot run is skipped (None), others raise.
    ``windows``: each session's machine load is appended under the probe's name (one per figure).

    A bounded run that was stopped (timeout, Ctrl-C) takes no further probe: its next probe's
    session would be stopped at once, and an optional one's failure would be skipped like any
    other, probe after probe, while the interrupted run waits for the calibration to end."""
    from pytest_roofline.backends.bounded import stopping
    from pytest_roofline.device import load as machine
    from pytest_roofline.roofline.probes import SECONDS_PER_PROBE, OtherPrecision, run_probe

    if stopping():
        raise BackendError(f"calibration stopped before probe {spec.name}")
    try:
        before = machine.snapshot()
        probe = run_probe(backend, spec, SECONDS_PER_PROBE[plan][spec.kind])
        if windows is not None:
            windows.setdefault(spec.name, []).append(machine.between(before, machine.snapshot()))
    except OtherPrecision:  # no figure of its dtype: the caller says so and plans around it
        raise
    except Exception as exc:  # a backend's own error types differ; optional kernels may be absent
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        if stopping():  # the probe failed because the run was stopped: not a kernel the backend lacks
            raise
        if not spec.optional:
            if isinstance(exc, RooflineError):
                raise
            message = f"calibration probe {spec.name} failed on {backend.name}: {reason}"
            raise BackendError(message) from exc
        _notify(f"{step}: skipped, {backend.name} cannot run it ({reason})", progress)
        return None
    unit = "B/s" if probe.kind == "memory" else "OP/s" if probe.dtype == "int8" else "FLOP/s"
    _notify(f"{step}: {probe.value / 1e9:.1f} G{unit}", progress)
    return probe


def _dtypes(dtypes: Iterable[str] | None, gpu: bool = False) -> tuple[str, ...]:
    from pytest_roofline.roofline.probes import ALL_DTYPES, DTYPES, GPU_DTYPES

    if dtypes is None:
        return GPU_DTYPES if gpu else DTYPES
    chosen = {"float32", *dtypes}
    unknown = sorted(chosen - set(ALL_DTYPES))
    if unknown:
        raise OptionError(f"cannot calibrate dtype {unknown[0]!r}; choose from: {', '.join(ALL_DTYPES)}")
    return tuple(d for d in ALL_DTYPES if d in chosen)


def _on_gpu(fingerprint: dict[str, Any]) -> bool:
    """Whether the backend computes on an NVIDIA GPU (its fingerprint names one)."""
    return isinstance(fingerprint.get("gpu"), dict) and not _runs_on_cpu(fingerprint)


def _runs_on_cpu(fingerprint: dict[str, Any]) -> bool:
    """Whether the backend computes on the host CPU (the CPU's caches and peak then apply)."""
    providers = fingerprint.get("providers")
    if isinstance(providers, list) and providers:
        return providers[0] == "CPUExecutionProvider"
    device = fingerprint.get("device")
    if isinstance(device, str):
        return device.upper() == "CPU"
    return fingerprint.get("backend") != "trtexec"


def _threads(fingerprint: dict[str, Any], info: CpuInfo) -> int:
    """Threads the backend's sessions compute with: its setting, else the runtime's default.

    onnxruntime's ``intra_op_threads=0`` and OpenVINO's default run one thread per physical core
    of the process's CPUs; the calibration runs through the same options, so its probes use the
    same pool, and this count keys the cache and sets the theoretical peak.
    """
    config = fingerprint.get("config")
    nested = config if isinstance(config, dict) else {}
    for key in ("threads", "intra_op_threads", "num_threads", "INFERENCE_NUM_THREADS"):
        try:
            value = int(fingerprint.get(key) or nested.get(key) or 0)
        except (TypeError, ValueError):
            continue
        if value > 0:
            return min(value, info.cores) if info.cores else value
    return info.physical_cores or info.cores


# --- cache files --------------------------------------------------------------------------------


def _read_cache(path: Path, fingerprint: dict[str, Any]) -> tuple[DeviceRoofline | None, str | None]:
    """(roofline, None) on a hit; (None, reason) for a corrupt file; (None, None) on a miss.

    Values are checked before use (:func:`~pytest_roofline.roofline.roofs.roofline_data_problem`):
    a zero, negative, NaN or string roof, or a missing key, makes the file corrupt.
    """
    try:
        text = read_document(path)
    except OSError:
        return None, None
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("fingerprint"), dict):
            return None, "no fingerprint"
        if data.get("kind", CALIBRATION_KIND) != CALIBRATION_KIND:  # files before `kind` have none
            return None, f"a {str(data['kind'])[:40]} document, not a calibration"
        if data["fingerprint"] != fingerprint:
            return None, None  # a hash collision or an older layout: measure anew
        problem = roofline_data_problem(data.get("roofline"))
        if problem:
            return None, problem[:120]
        return DeviceRoofline.from_dict(data["roofline"]), None
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        return None, f"{type(exc).__name__}: {str(exc)[:80]}" if str(exc) else type(exc).__name__


def _lock(path: Path, progress: Progress | None) -> Any:
    """A file lock next to ``path`` (removed when released), or None when the directory cannot be
    created/written."""
    from pytest_roofline.files import file_lock

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = file_lock(path.with_name(path.name + ".lock"), LOCK_TIMEOUT)
        with lock:  # probe that the lock file can be created here
            pass
        return lock
    except OSError as exc:
        _say_once(
            f"write:{path.parent}",
            f"calibration cache dir {path.parent} is not writable "
            f"({exc.strerror or type(exc).__name__}); calibrating in memory",
            progress,
        )
        return None


# --- messages -----------------------------------------------------------------------------------


def _notify(message: str, progress: Progress | None) -> None:
    if progress is not None:
        progress(message)


def _say(message: str, progress: Progress | None) -> None:
    """A cache problem: to the progress callback, else as a warning."""
    if progress is not None:
        progress(message)
    else:
        warnings.warn(f"pytest-roofline: {message}", RuntimeWarning, stacklevel=4)


def _say_once(key: str, message: str, progress: Progress | None) -> None:
    if key not in _said:
        _said.add(key)
        _say(message, progress)


def _with_faster_dram(roofline: DeviceRoofline, ratios: dict[str, float]) -> DeviceRoofline | None:
    """``roofline`` with its DRAM roof raised to the spot check's faster stream reading, when that
    stream is the only roof a reading beats; None otherwise (a compute roof beaten: re-measure)."""
    import dataclasses

    cached = {p.name: p for p in roofline.probes}
    faster: dict[str, float] = {}
    for name, ratio in ratios.items():
        probe = cached.get(name)
        if probe is None:
            return None
        if _beats_a_roof(roofline, {name: ratio}):
            if probe.kind != "memory":
                return None
            faster[name] = probe.value * ratio
    if not faster:
        return None
    probes = tuple(
        dataclasses.replace(p, value=faster[p.name], seconds=p.seconds * p.value / faster[p.name])
        if p.name in faster
        else p
        for p in roofline.probes
    )
    return dataclasses.replace(
        roofline, peak_bandwidth=max(roofline.peak_bandwidth, *faster.values()), probes=probes
    )
