"""SIGINT at random moments of a gated pytest run: exits, aborts, orphaned helpers, baseline bytes.

A cancelled CI job sends SIGINT.  One project (a real onnxruntime MatMul model, its baseline
written by a first run), then ``--trials`` runs of ``pytest --roofline-retime
--roofline-recalibrate`` (every run calibrates the device roofline, nothing cached, in the
measuring thread, then times the model against its baseline in the measuring helper process), each
interrupted at a random moment between start and its usual end: collection, the calibration, the
measurement, the report and the baseline write all get their share.  Per trial: the exit status (1
or 2 expected: failed or interrupted, never 134 = abort; 0 only when the run had ended first; -2 when the
signal came while Python was still importing pytest, which is Python's own default and counted
apart), where the signal landed (the project's conftest only watches: it logs when the calibration
starts and ends), whether "terminate called" was printed, helper processes left running whose
parent was that pytest, and whether the baseline files are byte-identical.

Usage::

    python benchmarks/sigint_trials.py                # 20 trials, every run calibrating
    python benchmarks/sigint_trials.py --trials 5 --seed 3
    python benchmarks/sigint_trials.py --cached-calibration   # the calibration cached: no calibration
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST = """
def test_model(model_profile):
    model_profile("model.onnx")
"""
HELPER_MARK = "pytest_roofline.gate.isolated import serve"
#: Watches (never signals): appends "<phase> <time.time()>" to ``phases.log`` when pytest starts,
#: when a thread enters the calibration (``calibrate._measure``), when it leaves it, and at the end.
CONFTEST = """
import sys, threading, time

def _calibrating():
    for frame in list(sys._current_frames().values()):
        while frame is not None:
            code = frame.f_code
            if code.co_name == "_measure" and code.co_filename.endswith("calibrate.py"):
                return True
            frame = frame.f_back
    return False

def _watch(log):
    while not _calibrating():
        time.sleep(0.005)
    log.write(f"calibration {time.time()}\\n"); log.flush()
    while _calibrating():
        time.sleep(0.005)
    log.write(f"calibrated {time.time()}\\n"); log.flush()

def pytest_sessionstart(session):
    log = open("phases.log", "a")
    log.write(f"start {time.time()}\\n"); log.flush()
    threading.Thread(target=_watch, args=(log,), daemon=True).start()

def pytest_unconfigure(config):
    with open("phases.log", "a") as log:
        log.write(f"end {time.time()}\\n")
"""


def build_project(folder: Path) -> None:
    """A project of one MatMul model and one test (the model is written by tests/_plugin_helpers)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from _plugin_helpers import matmul_chain

    matmul_chain(folder / "model.onnx", blocks=8, size=1024)
    (folder / "test_model.py").write_text(TEST)
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "pytest.ini").write_text("[pytest]\n")


def landed(folder: Path, moment: float) -> str:
    """Where a signal sent at ``moment`` (time.time()) landed, from the run's ``phases.log``."""
    try:
        lines = (folder / "phases.log").read_text().split("\n")
    except OSError:
        lines = []
    phases = {name: float(value) for name, _, value in (line.partition(" ") for line in lines) if value}
    if "end" in phases and moment >= phases["end"]:
        return "after the end"
    if "start" not in phases or moment < phases["start"]:
        return "startup"
    if "calibration" not in phases or moment < phases["calibration"]:
        return "setup"  # collection, the test's setup, the wait for the machine's measure lock
    if "calibrated" not in phases or moment < phases["calibrated"]:
        return "calibration"
    return "measurement"  # the gate's measurement, the report and the baseline write


def helpers_of(parent: int) -> list[int]:
    """Running helper processes started by pytest ``parent`` (its pid is the helper's last argument)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        argv = [a.decode(errors="replace") for a in argv if a]
        if any(HELPER_MARK in a for a in argv) and argv[-1] == str(parent):
            found.append(int(entry.name))
    return found


def baseline_digest(folder: Path) -> str:
    """One hash of every baseline file's name and bytes."""
    digest = hashlib.sha256()
    for path in sorted((folder / ".roofline").glob("*.json")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def pytest_command(*extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--roofline-budget=4", *extra]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--window", type=float, nargs=2, metavar=("FROM", "TO"), help="seconds after start")
    parser.add_argument(
        "--cached-calibration",
        action="store_true",
        help="calibrate once, not in every run (no calibration moments)",
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    # ROOFLINE_LOAD_LIMIT=off: the first run records its baseline on a busy machine too
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "ROOFLINE_LOAD_LIMIT": "off"}
    with tempfile.TemporaryDirectory(prefix="sigint-") as tmp:
        folder = Path(tmp)
        env["ROOFLINE_CACHE_DIR"] = str(folder / "cache")
        build_project(folder)
        first = subprocess.run(pytest_command(), cwd=folder, env=env, capture_output=True, text=True)
        if first.returncode != 0:
            print(first.stdout[-2000:], first.stderr[-2000:])
            return 1
        gated = (
            ("--roofline-retime",)
            if args.cached_calibration
            else ("--roofline-retime", "--roofline-recalibrate")
        )
        start = time.monotonic()
        (folder / "phases.log").unlink(missing_ok=True)
        timed = subprocess.run(pytest_command(*gated), cwd=folder, env=env, capture_output=True)
        span = time.monotonic() - start
        before = baseline_digest(folder)
        load = os.getloadavg()[0]
        print(f"a gated run takes {span:.1f} s here (exit {timed.returncode}, load {load:.1f})")
        print(f"baselines {before}")
        print("trial  after_s  landed in    exit  abort  orphans  baselines  load")
        bad = startup = 0
        places: dict[str, int] = {}
        for trial in range(args.trials):
            delay = rng.uniform(*(args.window or (0.2, span)))
            (folder / "phases.log").unlink(missing_ok=True)
            proc = subprocess.Popen(
                pytest_command(*gated),
                cwd=folder,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                # SIGINT handled as in a terminal or a CI runner, even when this script was started
                # in the background (where the shell makes children ignore it: every trial exit 0)
                preexec_fn=_default_sigint,
            )
            time.sleep(delay)
            moment = time.time()
            proc.send_signal(signal.SIGINT)
            output, _ = proc.communicate(timeout=600)
            time.sleep(0.5)  # a helper ends within its watchdog period once its parent is gone
            orphans = helpers_of(proc.pid)
            aborted = proc.returncode in (134, -6) or b"terminate called" in output
            same = baseline_digest(folder) == before
            place = landed(folder, moment)
            # -2: the signal came while Python was still importing pytest (its default handler);
            # 0 only when the run had ended first (else the interrupt was lost)
            ok = proc.returncode in (1, 2, -2) or (proc.returncode == 0 and place == "after the end")
            ok = ok and not aborted and not orphans and same
            bad += not ok
            startup += proc.returncode == -2
            places[place] = places.get(place, 0) + 1
            print(
                f"{trial:5d}  {delay:7.2f}  {place:11s}  {proc.returncode:4d}  "
                f"{'yes' if aborted else 'no':5s}  "
                f"{len(orphans):7d}  {'identical' if same else 'CHANGED':9s}  {os.getloadavg()[0]:4.1f}"
            )
            if not ok:
                print("    | " + "\n    | ".join(output.decode(errors="replace").splitlines()[-25:]))
            for pid in orphans:
                os.kill(pid, signal.SIGKILL)
        clean = "exit 1/2 (0 after the end), no abort, no orphan, baselines identical"
        print(f"{args.trials - bad}/{args.trials} trials clean ({clean}); {startup} before pytest started")
        print("landed: " + ", ".join(f"{count} in {place}" for place, count in sorted(places.items())))
        return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
