"""Calibrate a device's roofline through a backend, cached per device fingerprint.

:func:`calibrate` runs the probes of :mod:`pytest_roofline.roofline.probes` (GEMM ladders and a
conv per dtype, a stream ladder from cache-sized to far beyond the last-level cache) through the
given backend and returns a :class:`~pytest_roofline.roofline.DeviceRoofline`.  The result is
cached as JSON in the user's cache directory, one file per fingerprint (CPU model, flag hash,
cores, backend name/version/provider/threads, dtypes, probe plan), so later runs and other
processes reuse it; the cached path reads one small file and imports nothing heavy.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.device import cpu_info
from pytest_roofline.errors import BackendError, OptionError, RooflineError
from pytest_roofline.files import atomic_write_json
from pytest_roofline.roofline.roofs import DeviceRoofline, Probe

if TYPE_CHECKING:
    from pytest_roofline.backends.base import Backend
    from pytest_roofline.roofline.probes import ProbeSpec

__all__ = [
    "CACHE_ENV",
    "CALIBRATION_VERSION",
    "cache_path",
    "cached_roofline",
    "calibrate",
    "calibration_fingerprint",
    "default_cache_dir",
]

CACHE_ENV = "ROOFLINE_CACHE_DIR"
CALIBRATION_VERSION = 1  # bump when probes change meaning: old cache files then miss
LOCK_TIMEOUT = 600.0  # seconds to wait for another process's calibration

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
        dtypes=list(_dtypes(dtypes)),
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
) -> DeviceRoofline:
    """The device's roofline through ``backend``: from the cache, or measured and cached.

    Args:
        backend: any :class:`~pytest_roofline.backends.base.Backend`; probes run through
            ``backend.open(spec, inputs).time(n)`` like user models.
        force: measure even when a cached calibration exists, and replace it.
        cache_dir: where calibrations are cached (default ``$ROOFLINE_CACHE_DIR`` or the user's
            cache dir).  An unwritable directory means calibrating in memory (said once).
        progress: called with one line per step (probe figures, cache notes); without it cache
            problems are reported with :func:`warnings.warn`.
        dtypes: dtypes to calibrate; ``float32`` is always included.  Default: every dtype the
            probes know (float32, float16, int8); those the backend cannot run are skipped.
        quick: the same probes on fewer sizes (for tests and smoke runs); cached separately.

    Raises:
        OptionError: an unknown dtype.
        BackendError: a float32 probe failed on the backend.
    """
    wanted = _dtypes(dtypes)
    fingerprint = calibration_fingerprint(backend, wanted, quick)
    path = cache_path(fingerprint, cache_dir)
    if not force:
        cached, problem = _read_cache(path, fingerprint)
        if cached is not None:
            return cached
        if problem:
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
            roofline = _measure(backend, fingerprint, wanted, quick, progress)
            try:
                cached = {"fingerprint": fingerprint, "roofline": roofline.to_dict()}
                atomic_write_json(path, cached, indent=1)
            except OSError as exc:
                _say_once(
                    f"write:{path.parent}",
                    f"cannot write calibration cache in {path.parent} "
                    f"({exc.strerror or exc}); calibrated in memory only",
                    progress,
                )
            return roofline
    except filelock.Timeout:
        _say(
            f"calibration cache {path} stayed locked for {LOCK_TIMEOUT:.0f} s; calibrating in memory",
            progress,
        )
        return _measure(backend, fingerprint, wanted, quick, progress)


def cached_roofline(
    backend: Backend,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    dtypes: Iterable[str] | None = None,
    quick: bool = False,
) -> DeviceRoofline | None:
    """The calibration of ``backend`` on this device if one is cached, else None; never measures."""
    fingerprint = calibration_fingerprint(backend, _dtypes(dtypes), quick)
    return _read_cache(cache_path(fingerprint, cache_dir), fingerprint)[0]


# --- measuring ----------------------------------------------------------------------------------


def _measure(
    backend: Backend,
    fingerprint: dict[str, Any],
    dtypes: tuple[str, ...],
    quick: bool,
    progress: Progress | None,
) -> DeviceRoofline:
    from pytest_roofline.roofline import probes as cp

    plan = "quick" if quick else "full"
    specs = cp.plan_probes(dtypes, plan)
    started = time.perf_counter()
    probes: list[Probe] = []
    for index, spec in enumerate(specs, 1):
        probe = _run(backend, spec, plan, f"calibrate [{index}/{len(specs)}] {spec.name}", progress)
        if probe is not None:
            probes.append(probe)
    on_cpu = _runs_on_cpu(fingerprint)
    caches = cp.system_caches() if on_cpu else []  # host caches say nothing about a GPU's
    last_level = caches[-1][1] if caches else 0
    # A second session for the probes that set the float32 and DRAM roofs: a shared machine slows
    # a whole session at a time (cp.combine_sessions keeps the undisturbed figure).
    for spec in cp.confirmation_specs(specs, probes, last_level):
        again = _run(backend, spec, plan, f"calibrate [confirm] {spec.name}", progress)
        index = next(i for i, p in enumerate(probes) if p.name == spec.name)
        if again is not None:
            probes[index] = cp.combine_sessions(probes[index], again)

    compute = [p for p in probes if p.kind == "compute"]
    peak_flops = {
        dtype: max(p.value for p in compute if p.dtype == dtype)
        for dtype in dtypes
        if any(p.dtype == dtype for p in compute)
    }
    bandwidth = cp.dram_bandwidth(probes, last_level)
    levels = cp.cache_levels(probes, caches, dram=bandwidth)
    info = cpu_info()
    threads = _threads(fingerprint, info.cores)
    theoretical = cp.theoretical_peak_flops(info, threads, cp.clock_hz()) if on_cpu else {}
    return DeviceRoofline(
        peak_flops=peak_flops,
        peak_bandwidth=bandwidth,
        fingerprint=fingerprint,
        cache_levels=levels,
        probes=tuple(probes),
        theoretical_peak_flops={k: v for k, v in theoretical.items() if k in peak_flops},
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        duration=time.perf_counter() - started,
    )


def _run(backend: Backend, spec: ProbeSpec, plan: str, step: str, progress: Progress | None) -> Probe | None:
    """One probe; an optional probe the backend cannot run is skipped (None), others raise."""
    from pytest_roofline.roofline.probes import SECONDS_PER_PROBE, run_probe

    try:
        probe = run_probe(backend, spec, SECONDS_PER_PROBE[plan][spec.kind])
    except Exception as exc:  # a backend's own error types differ; optional kernels may be absent
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
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


def _dtypes(dtypes: Iterable[str] | None) -> tuple[str, ...]:
    from pytest_roofline.roofline.probes import DTYPES

    if dtypes is None:
        return DTYPES
    chosen = {"float32", *dtypes}
    unknown = sorted(chosen - set(DTYPES))
    if unknown:
        raise OptionError(f"cannot calibrate dtype {unknown[0]!r}; choose from: {', '.join(DTYPES)}")
    return tuple(d for d in DTYPES if d in chosen)


def _runs_on_cpu(fingerprint: dict[str, Any]) -> bool:
    """Whether the backend computes on the host CPU (the CPU's caches and peak then apply)."""
    providers = fingerprint.get("providers")
    if isinstance(providers, list) and providers:
        return providers[0] == "CPUExecutionProvider"
    device = fingerprint.get("device")
    if isinstance(device, str):
        return device.upper() == "CPU"
    return fingerprint.get("backend") != "trtexec"


def _threads(fingerprint: dict[str, Any], cores: int) -> int:
    config = fingerprint.get("config")
    nested = config if isinstance(config, dict) else {}
    for key in ("threads", "intra_op_threads", "num_threads", "INFERENCE_NUM_THREADS"):
        try:
            value = int(fingerprint.get(key) or nested.get(key) or 0)
        except (TypeError, ValueError):
            continue
        if value > 0:
            return value
    return cores


# --- cache files --------------------------------------------------------------------------------


def _read_cache(path: Path, fingerprint: dict[str, Any]) -> tuple[DeviceRoofline | None, str | None]:
    """(roofline, None) on a hit; (None, reason) for a corrupt file; (None, None) on a miss."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None, None
    try:
        data = json.loads(text)
        if data["fingerprint"] != fingerprint:
            return None, None  # a hash collision or an older layout: measure anew
        return DeviceRoofline.from_dict(data["roofline"]), None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
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
