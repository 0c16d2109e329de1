"""Is a calibration measured under load caught later by the spot check? (issue 12 item 3)

Prints, in one run:
- a calibration measured while ``--busy`` processes spin (``python3 -c 'while True: pass'``): its
  roofs, the load it recorded and its warning;
- the busy processes stopped, ``calibrate(spot_check=True)`` on that cache: the spot check's
  ratios and wall time (target <= 0.5 s) and whether it re-measured (target: caught);
- ``--quiet-rounds`` control rounds: a quiet calibration spot-checked right after must be kept
  (each re-measure there is a false alarm; reported, on a shared machine it happens).

Usage: ``python benchmarks/calibration_spot_check.py [--busy 1] [--quiet-rounds 3] [--option K=V]...``
Run it on a quiet machine: on a shared one the "quiet" phases are not quiet either.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time
from pytest_roofline.backends.base import get_backend
from pytest_roofline.roofline.calibrate import calibrate
backend = get_backend("onnxruntime", json.loads(sys.argv[1]))
lines = []
start = time.perf_counter()
mode = sys.argv[3]
roof = calibrate(backend, cache_dir=sys.argv[2], force=mode == "force", spot_check=mode == "spot",
                 progress=lines.append)
print(json.dumps({"peak": roof.peak, "bandwidth": roof.peak_bandwidth, "measured_at": roof.measured_at,
                  "warnings": list(roof.warnings), "load": roof.load, "seconds": time.perf_counter() - start,
                  "spot": [l for l in lines if "spot check" in l]}))
"""


def child(options: dict[str, str], cache: str, mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(options), cache, mode],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if out.returncode:
        raise SystemExit(f"child failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def describe(run: dict) -> str:
    load = run.get("load") or {}
    return (
        f"float32 {run['peak'] / 1e9:.1f} GFLOP/s, DRAM {run['bandwidth'] / 1e9:.1f} GB/s, "
        f"other processes {load.get('other', 0):.0%} of the CPUs, warning: {run['warnings'] or 'none'}"
    )


def spot_seconds(run: dict) -> float | None:
    """The spot check's own wall time, from its progress line ("(0.31 s)")."""
    for line in run["spot"]:
        if " s)" in line:
            return float(line.rsplit("(", 1)[1].split(" s)")[0])
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=1, help="busy processes while calibrating (default 1)")
    parser.add_argument("--quiet-rounds", type=int, default=3, help="control rounds on the quiet machine")
    parser.add_argument("--option", action="append", default=[], metavar="K=V")
    args = parser.parse_args()
    options = dict(item.split("=", 1) for item in args.option)
    with tempfile.TemporaryDirectory(prefix="roofline-spot-") as cache:
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
        try:
            time.sleep(1.0)
            busy = child(options, cache, "force")
        finally:
            for proc in spinners:
                proc.kill()
                proc.wait()
        print(f"calibrated under {args.busy} busy process(es): {describe(busy)}", flush=True)
        time.sleep(2.0)
        later = child(options, cache, "spot")
        caught = later["measured_at"] != busy["measured_at"]
        seconds = spot_seconds(later)
        print(f"spot check on the quiet machine: {'; '.join(later['spot'])}")
        mark = "OK  " if caught else "MISS"
        print(f"  {mark} busy cache caught and re-measured: {caught} -> {describe(later)}")
        if seconds is not None:
            mark = "OK  " if seconds <= 0.5 else "MISS"
            print(f"  {mark} spot check wall time {seconds:.2f} s (target <= 0.5 s)")
        false_alarms = 0
        for index in range(args.quiet_rounds):
            fresh = child(options, cache, "force")
            again = child(options, cache, "spot")
            remeasured = again["measured_at"] != fresh["measured_at"]
            false_alarms += remeasured
            print(f"quiet round {index + 1}: {describe(fresh)}; spot check: {'; '.join(again['spot'])}")
        print(
            f"  {'OK  ' if false_alarms == 0 else 'MISS'} quiet caches re-measured by the spot check: "
            f"{false_alarms} of {args.quiet_rounds} (target 0)"
        )


if __name__ == "__main__":
    main()
