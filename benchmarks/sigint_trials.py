"""SIGINT at random moments of a gated pytest run: exits, aborts, orphaned helpers, baseline bytes.

A cancelled CI job sends SIGINT.  One project (a real onnxruntime MatMul model, its baseline
written by a first run), then ``--trials`` runs of ``pytest --roofline-retime`` (every run times
the model against its baseline, in the measuring helper process), each interrupted at a random
moment between start and its usual end.  Per trial: the exit status (1 or 2 expected: failed or
interrupted, never 134 = abort; 0 when the run ended first; -2 when the signal came while Python
was still importing pytest, which is Python's own default and counted apart), whether "terminate
called" was printed, helper processes left running whose parent was that pytest, and whether the
baseline files are byte-identical.

Usage::

    python benchmarks/sigint_trials.py                # 20 trials
    python benchmarks/sigint_trials.py --trials 5 --seed 3
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


def build_project(folder: Path) -> None:
    """A project of one MatMul model and one test (the model is written by tests/_plugin_helpers)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from _plugin_helpers import matmul_chain

    matmul_chain(folder / "model.onnx", blocks=8, size=1024)
    (folder / "test_model.py").write_text(TEST)
    (folder / "pytest.ini").write_text("[pytest]\n")


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


def pytest_command(*extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--roofline-budget=4", *extra]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--window", type=float, nargs=2, metavar=("FROM", "TO"), help="seconds after start")
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
        start = time.monotonic()
        timed = subprocess.run(pytest_command("--roofline-retime"), cwd=folder, env=env, capture_output=True)
        span = time.monotonic() - start
        before = baseline_digest(folder)
        print(f"a gated run takes {span:.1f} s here (exit {timed.returncode}); baselines {before}")
        print("trial  after_s  exit  abort  orphans  baselines")
        bad = startup = 0
        for trial in range(args.trials):
            delay = rng.uniform(*(args.window or (0.2, span)))
            proc = subprocess.Popen(
                pytest_command("--roofline-retime"),
                cwd=folder,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            time.sleep(delay)
            proc.send_signal(signal.SIGINT)
            output, _ = proc.communicate(timeout=120)
            time.sleep(0.5)  # a helper ends within its watchdog period once its parent is gone
            orphans = helpers_of(proc.pid)
            aborted = proc.returncode in (134, -6) or b"terminate called" in output
            same = baseline_digest(folder) == before
            # -2: the signal came while Python was still importing pytest (its default handler)
            ok = proc.returncode in (0, 1, 2, -2) and not aborted and not orphans and same
            bad += not ok
            startup += proc.returncode == -2
            print(
                f"{trial:5d}  {delay:7.2f}  {proc.returncode:4d}  {'yes' if aborted else 'no':5s}  "
                f"{len(orphans):7d}  {'identical' if same else 'CHANGED'}"
            )
            if not ok:
                print("    | " + "\n    | ".join(output.decode(errors="replace").splitlines()[-25:]))
            for pid in orphans:
                os.kill(pid, signal.SIGKILL)
        clean = "exit 0/1/2, no abort, no orphan, baselines identical"
        print(f"{args.trials - bad}/{args.trials} trials clean ({clean}); {startup} before pytest started")
        return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
