"""pytest-benchmark-compatible JSON, so its dashboards read our results.

github-action-benchmark (``tool: pytest``), ``pytest-benchmark compare`` and other tools that read
``--benchmark-json`` files see one benchmark per result: the end-to-end latency samples, with the
statistics computed by pytest-benchmark's own definitions (Tukey quartiles, 1.5 IQR fences), and
the roofline figures in ``extra_info``.
"""

from __future__ import annotations

import bisect
import json
import platform
import statistics
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_roofline.measure.stats import LatencyStats
    from pytest_roofline.results import ProfileRecord, RunResults

__all__ = ["benchmark_entry", "benchmark_stats", "render", "to_benchmark_json", "write"]


def _quartiles(data: list[float]) -> tuple[float, float]:
    """Q1 and Q3 as pytest-benchmark computes them (Wikipedia methods 2 and 3)."""
    n = len(data)
    if n == 1:
        return data[0], data[0]
    if n % 2 == 0:
        return statistics.median(data[: n // 2]), statistics.median(data[n // 2 :])
    k, q = n // 4, n % 4
    if q == 1:
        return 0.25 * data[k - 1] + 0.75 * data[k], 0.75 * data[3 * k] + 0.25 * data[3 * k + 1]
    return 0.75 * data[k] + 0.25 * data[k + 1], 0.25 * data[3 * k + 1] + 0.75 * data[3 * k + 2]


def benchmark_stats(samples: list[float], iterations: int = 1) -> dict[str, Any]:
    """pytest-benchmark's ``stats`` block of ``samples`` (seconds per round)."""
    data = sorted(float(s) for s in samples)
    if not data:
        raise ValueError("no samples")
    mean = statistics.fmean(data)
    stddev = statistics.stdev(data) if len(data) > 1 else 0.0
    q1, q3 = _quartiles(data)
    iqr = q3 - q1
    low, high = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    iqr_outliers = sum(1 for v in data if v < low or v > high)
    stddev_outliers = sum(1 for v in data if v < mean - stddev or v > mean + stddev)
    total = sum(data)
    return {
        "min": data[0],
        "max": data[-1],
        "mean": mean,
        "stddev": stddev,
        "rounds": len(data),
        "median": statistics.median(data),
        "iqr": iqr,
        "q1": q1,
        "q3": q3,
        "iqr_outliers": iqr_outliers,
        "stddev_outliers": stddev_outliers,
        "outliers": f"{stddev_outliers};{iqr_outliers}",
        "ld15iqr": data[0] if len(data) == 1 else data[bisect.bisect_left(data, low)],
        "hd15iqr": data[bisect.bisect_right(data, high) - 1],
        "ops": len(data) / total if total else 0,
        "total": total,
        "data": list(samples),
        "iterations": iterations,
    }


def _summary_stats(latency: LatencyStats) -> dict[str, Any]:
    """Stats from a summary when the samples were not saved (``data`` stays empty)."""
    median = latency.median
    return {
        "min": latency.min,
        "max": latency.max,
        "mean": latency.mean,
        "stddev": latency.std,
        "rounds": latency.n,
        "median": median,
        "iqr": latency.p75 - latency.p25,
        "q1": latency.p25,
        "q3": latency.p75,
        "iqr_outliers": 0,
        "stddev_outliers": 0,
        "outliers": "0;0",
        "ld15iqr": latency.min,
        "hd15iqr": latency.max,
        "ops": 1 / latency.mean if latency.mean else 0,
        "total": latency.mean * latency.n,
        "data": [],
        "iterations": 1,
    }


def benchmark_entry(record: ProfileRecord) -> dict[str, Any]:
    """One ``benchmarks[]`` item of a profiled model (name, fullname, group, params, extra_info, stats)."""
    from pytest_roofline.profile import known_fraction

    profile, verdict = record.profile, record.verdict
    latency = profile.latency
    model, batch, backend = profile.model_name, profile.batch, profile.backend
    test = record.test or model
    param = f"{model}-b{batch}"
    samples = list(latency.samples)
    return {
        "group": model,
        "name": f"{test.rsplit('::', 1)[-1]}[{param}]",
        "fullname": f"{test}::{param}",
        "params": {"model": model, "batch": batch, "backend": backend},
        "param": param,
        "extra_info": {
            "backend": backend,
            "backend_version": profile.backend_version,
            "precision": profile.precision,
            "batch": batch,
            "flops": profile.total_flops,
            "macs": profile.total_macs,
            "bytes": profile.total_bytes,
            "throughput": profile.throughput,
            "achieved_flops": profile.achieved_flops,
            "efficiency": known_fraction(profile.efficiency),
            "attributed_fraction": profile.attributed_fraction,
            "verdict": verdict.status,
            "ratio": verdict.ratio,
            "ratio_ci": list(verdict.ci) if verdict.ci else None,
            "key": record.key,
        },
        "options": {
            "disable_gc": False,
            "timer": "perf_counter",
            "min_rounds": len(samples) or latency.n,
            "max_time": 0,
            "min_time": 0,
            "warmup": True,
        },
        "stats": benchmark_stats(samples) if samples else _summary_stats(latency),
    }


def _machine_info(results: RunResults) -> dict[str, Any]:
    """pytest-benchmark's machine_info keys; the device fingerprint of the run goes alongside."""
    uname = platform.uname()
    fingerprint = results.roofline.fingerprint if results.roofline else {}
    return {
        "node": uname.node,
        "processor": uname.processor,
        "machine": uname.machine,
        "python_compiler": platform.python_compiler(),
        "python_implementation": platform.python_implementation(),
        "python_implementation_version": platform.python_version(),
        "python_version": platform.python_version(),
        "python_build": list(platform.python_build()),
        "release": uname.release,
        "system": uname.system,
        "cpu": {"arch": uname.machine, "brand_raw": str(fingerprint.get("cpu", uname.processor))},
        "roofline_fingerprint": fingerprint,
        "rendered_by": f"pytest-roofline on Python {sys.version.split()[0]}",
    }


def to_benchmark_json(results: RunResults) -> dict[str, Any]:
    """The pytest-benchmark document of a run."""
    return {
        "machine_info": _machine_info(results),
        "commit_info": {
            "id": results.commit or "unversioned",
            "time": results.created,
            "author_time": results.created,
            "dirty": results.dirty,
            "project": results.project or "unknown",
            "branch": results.branch or "(unknown)",
        },
        "benchmarks": [benchmark_entry(record) for record in results.records],
        "datetime": results.created,
        "version": results.version or "0",
    }


def render(results: RunResults) -> str:
    """The pytest-benchmark JSON text."""
    from pytest_roofline.report import finite

    return json.dumps(finite(to_benchmark_json(results)), indent=4, allow_nan=False)


def write(results: RunResults, path: Path) -> None:
    """Write the pytest-benchmark JSON to ``path``."""
    from pytest_roofline.report import save_report

    save_report(Path(path), render(results), "benchmark_json")
