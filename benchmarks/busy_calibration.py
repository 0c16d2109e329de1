"""Is a calibration beside one busy process further from quiet than quiet is from quiet? (issue 33)

Per backend and thread setting, calibrates ``--pairs`` times alternately alone and beside one busy
process (a Python spin loop on one core), each ``roofline calibrate --force`` into its own empty
cache directory, and prints every roof (compute per dtype, each memory level, the dispatch floor):

* quiet vs quiet: the quiet calibrations' range (max / min), the repeatability any reference has;
* busy vs quiet: each busy calibration's roof over the mean of the quiet ones, both ways (a roof
  that reads faster beside the spinner is as far from the device's as one that reads slower);
* whether each calibration was cached as the device's roof, or kept unsettled, and why;
* the load its record saw (others' share of the CPUs, load average) and its measured clock.

Target (issue 33): every cached busy roof within 5 % of the quiet calibration's, or the busy one not
cached; quiet calibrations stay cacheable.  Run it alone on the machine (the spinner is the only
neighbour wanted): ``python benchmarks/busy_calibration.py --backends onnxruntime --pairs 2``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo_roofline import BUSY_ROOF_TOLERANCE, _roof, _spin, calibrate_json, roofs_of  # noqa: E402


def one(backend: str, threads: str, cache_dir: Path, busy: bool, timeout: float) -> dict[str, Any] | str:
    """One forced calibration, beside a spinner when ``busy``; its JSON plus ``cached``/``unsettled``."""
    spinner = multiprocessing.Process(target=_spin, args=(timeout,), daemon=True) if busy else None
    if spinner is not None:
        spinner.start()
    try:
        data = calibrate_json(backend, threads, cache_dir, timeout)
    finally:
        if spinner is not None:
            spinner.terminate()
            spinner.join()
    if isinstance(data, str):
        return data
    data["cached"] = any(cache_dir.glob("calibration-*.json"))
    data["unsettled"] = any(cache_dir.glob("unsettled-*.json"))
    return data


def _state(data: dict[str, Any]) -> str:
    return "cached" if data["cached"] else "unsettled" if data["unsettled"] else "not kept"


def _far(ratio: float) -> float:
    return abs(math.log(ratio)) if ratio > 0 else math.inf


def report(
    backend: str, threads: str, quiet: list[dict[str, Any]], busy: list[dict[str, Any]]
) -> dict[str, Any]:
    """Print one setting's table; its summary for the JSON."""
    roofs = [roofs_of(d) for d in quiet + busy]
    keys = [k for k in roofs_of(quiet[0]) if all(k in r for r in roofs[: len(quiet)])]
    print(f"\n{backend} threads={threads}: {len(quiet)} quiet and {len(busy)} busy calibrations, alternated")
    print(f"  {'roof':<18} {'quiet':>34} {'q/q range':>9} {'beside spinner':>34} {'busy/quiet':>18}")
    summary: dict[str, Any] = {"backend": backend, "threads": threads, "roofs": {}}
    for key in keys:
        q = [roofs_of(d)[key] for d in quiet]
        b = [roofs_of(d).get(key, 0.0) for d in busy]
        mean = statistics.fmean(q)
        qq = max(q) / min(q)
        ratios = [v / mean for v in b]
        print(
            f"  {key:<18} {', '.join(_roof(key, v) for v in q):>34} {qq:>9.3f} "
            f"{', '.join(_roof(key, v) for v in b):>34} {', '.join(f'{r:.3f}' for r in ratios):>18}"
        )
        summary["roofs"][key] = {"quiet": q, "busy": b, "quiet_range": qq, "busy_over_quiet": ratios}
    for label, runs in (("quiet", quiet), ("busy", busy)):
        for i, data in enumerate(runs, 1):
            load = data.get("load") or {}
            print(
                f"  {label} {i}: {_state(data)}; others {float(load.get('other', 0)):.0%} of the CPUs, "
                f"load average {float(load.get('loadavg', 0)):.2f}, "
                f"clock {float(data.get('clock', 0)) / 1e9:.2f} GHz, {float(data.get('duration', 0)):.1f} s"
            )
            for warning in data.get("warnings") or []:
                print(f"      {warning[:300]}")
    cached_busy = [d for d in busy if d["cached"]]
    worst = [  # per cached busy calibration: its roof furthest from quiet, either way
        max((v["busy_over_quiet"][i] for v in summary["roofs"].values()), key=_far)
        for i, data in enumerate(busy)
        if data["cached"]
    ]
    missed = [w for w in worst if _far(w) > math.log(1 + BUSY_ROOF_TOLERANCE)]
    quiet_cached = sum(d["cached"] for d in quiet)
    verdict = "MISSED" if missed else "met"
    print(
        f"  target: {len(cached_busy)} of {len(busy)} busy calibrations cached"
        + (f" (worst cached roof {max(worst, key=_far):.3f} of quiet)" if worst else "")
        + f", every cached roof within {BUSY_ROOF_TOLERANCE:.0%}: {verdict}; "
        f"{quiet_cached} of {len(quiet)} quiet calibrations cached"
    )
    summary.update(busy_cached=len(cached_busy), quiet_cached=quiet_cached, verdict=verdict)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="onnxruntime,openvino")
    parser.add_argument("--threads", default="default,1")
    parser.add_argument("--pairs", type=int, default=2, help="quiet + busy calibrations per setting")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per calibration")
    parser.add_argument("--json", type=Path, help="write every calibration's record and the summaries here")
    args = parser.parse_args(argv)
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    everything: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        for backend in args.backends.split(","):
            for threads in args.threads.split(","):
                quiet: list[dict[str, Any]] = []
                busy: list[dict[str, Any]] = []
                for pair in range(args.pairs):
                    for is_busy, runs in ((False, quiet), (True, busy)):
                        label = "busy" if is_busy else "quiet"
                        cache = Path(scratch) / f"{backend}-{threads}-{label}-{pair}"
                        data = one(backend, threads, cache, is_busy, args.timeout)
                        if isinstance(data, str):
                            print(f"{backend} threads={threads} {label}: error: {data}")
                            continue
                        runs.append(data)
                if quiet and busy:
                    summary = report(backend, threads, quiet, busy)
                    everything.append({**summary, "quiet_records": quiet, "busy_records": busy})
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
