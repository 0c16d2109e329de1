"""SIGINT during a measurement or a calibration (Ctrl-C, a cancelled CI job): pytest's interrupted
exit, no abort.

A real pytest process times a real onnxruntime model against its baseline; its conftest sends the
process a real SIGINT a set time after a bounded measurement thread started (so the signal lands
inside a measurement, at several moments of it), or a set time into the calibration of the device
roofline (``--roofline-recalibrate``: every run calibrates, in the measuring thread, in-process).
Before the fix the measuring thread went on in native code while pytest exited: "terminate called
without an active exception", status 134.  Inside a calibration the interrupt was also held back
until the whole measurement had ended: Linux may hand a process-directed signal to
any thread, and CPython 3.11 runs its handler only when the main thread looks, which a thread
waiting on a lock does not do.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _plugin_helpers import matmul_chain

ROOT = Path(__file__).resolve().parents[1]
TEST = """
def test_model(model_profile):
    model_profile("model.onnx", batch_size=256)  # tens of ms a run: the measurement outlasts 1 s
"""
#: In the project: SIGINT the process ``ROOFLINE_TEST_SIGINT_AFTER`` seconds into its first
#: bounded measurement (a thread named "roofline-measure ...").
CONFTEST = """
import os, signal, threading, time

def _interrupt(delay):
    while not any(t.name.startswith("roofline-measure") for t in threading.enumerate()):
        time.sleep(0.005)
    time.sleep(delay)
    os.kill(os.getpid(), signal.SIGINT)

def pytest_sessionstart(session):
    delay = os.environ.get("ROOFLINE_TEST_SIGINT_AFTER")
    if delay:
        threading.Thread(target=_interrupt, args=(float(delay),), daemon=True).start()
"""
#: In the project: SIGINT ``ROOFLINE_TEST_SIGINT_AFTER`` seconds into the calibration, sent to the
#: process (the kernel picks the thread) or, with ``ROOFLINE_TEST_SIGINT_TO=thread``, to the
#: calibrating thread (a thread other than the main one takes it, as the kernel may choose); the file
#: ``signalled`` says whether the calibration was still running when the signal went, then names
#: each calibration probe that started after it.
CALIBRATION_CONFTEST = """
import os, signal, sys, threading, time
from pathlib import Path

def _calibrating():
    # (thread, the probe it runs) while a thread is inside the calibration, else (None, None)
    for ident, frame in sys._current_frames().items():
        probe = None
        while frame is not None:
            code = frame.f_code
            if code.co_name == "_run" and code.co_filename.endswith("calibrate.py"):
                probe = frame.f_locals.get("step")
            if code.co_name == "_measure" and code.co_filename.endswith("calibrate.py"):
                return ident, probe
            frame = frame.f_back
    return None, None

def _interrupt(delay, target):
    while _calibrating()[0] is None:
        time.sleep(0.002)
    time.sleep(delay)
    thread, running = _calibrating()
    with open("signalled", "w") as out:
        out.write(("in the calibration" if thread else "after the calibration") + "\\n")
        out.flush()
        if target == "thread" and thread:
            signal.pthread_kill(thread, signal.SIGINT)
        else:
            os.kill(os.getpid(), signal.SIGINT)
        while thread is not None:  # each probe that starts after the signal, until it ends
            thread, probe = _calibrating()
            if probe is not None and probe != running:
                out.write(probe + "\\n")
                out.flush()
                running = probe
            time.sleep(0.002)

def pytest_sessionstart(session):
    delay = os.environ.get("ROOFLINE_TEST_SIGINT_AFTER")
    if delay:
        target = os.environ.get("ROOFLINE_TEST_SIGINT_TO", "process")
        threading.Thread(target=_interrupt, args=(float(delay), target), daemon=True).start()
"""
HELPER_MARK = "pytest_roofline.gate.isolated import serve"


def _helpers_of(parent: int) -> list[int]:
    """Measuring helper processes whose parent was pytest ``parent`` (its last argument)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            continue
        if argv and any(HELPER_MARK in a for a in argv) and argv[-1] == str(parent):
            found.append(int(entry.name))
    return found


def _baselines(project: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((project / ".roofline").glob("*"))
    }


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A project whose baseline a first run wrote."""
    folder = tmp_path_factory.mktemp("interrupted")
    matmul_chain(folder / "model.onnx", blocks=8, size=512)
    (folder / "test_model.py").write_text(TEST)
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "pytest.ini").write_text("[pytest]\n")
    first = subprocess.run(
        _command(), cwd=folder, env=_env(folder), capture_output=True, text=True, timeout=600
    )
    assert first.returncode == 0, first.stdout[-3000:]
    return folder, _baselines(folder)


def _env(folder: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROOFLINE_", "PYTEST_"))}
    env.update(
        PYTHONPATH=str(ROOT),
        ROOFLINE_CACHE_DIR=str(folder / "cache"),
        ROOFLINE_LOAD_LIMIT="off",
        # the first run's calibration is cached even on a busy machine, so that the measurement
        # tests' signal lands in the measurement (the calibration tests recalibrate every run)
        ROOFLINE_CACHE_UNSETTLED="1",
        **extra,
    )
    return env


def _default_sigint() -> None:
    """SIGINT handled as in a terminal or a CI runner, even when this suite was started in the
    background (where the shell makes every child ignore it, and no signal would interrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run_interrupted(command: list[str], folder: Path, env: dict[str, str]) -> tuple[int, str, list[int]]:
    """Run ``command`` in ``folder`` (its conftest sends the signal): its status, its output (stdout
    and stderr), and the measuring helpers it left running (killed here, after they are counted)."""
    proc = subprocess.Popen(
        command,
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=_default_sigint,
    )
    output = proc.communicate(timeout=300)[0].decode(errors="replace")
    time.sleep(0.2)
    leftover = _helpers_of(proc.pid)
    for pid in leftover:
        os.kill(pid, 9)
    return proc.returncode, output, leftover


def _command() -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--roofline-budget=3",
        "--roofline-retime",
    ]


@pytest.mark.parametrize("after", [0.0, 0.05, 0.3, 1.0])
def test_sigint_during_a_measurement_exits_interrupted(
    project: tuple[Path, dict[str, str]], after: float
) -> None:
    folder, before = project
    env = _env(folder, ROOFLINE_TEST_SIGINT_AFTER=str(after))
    returncode, output, leftover = _run_interrupted(_command(), folder, env)
    assert "terminate called" not in output, output[-2000:]
    assert returncode == pytest.ExitCode.INTERRUPTED, output[-2000:]
    assert "KeyboardInterrupt" in output
    assert leftover == []
    assert _baselines(folder) == before


def test_sigint_during_a_cli_measurement_exits_130(project: tuple[Path, dict[str, str]]) -> None:
    """``roofline profile`` interrupted inside its bounded measurement: its own status 130, no abort."""
    folder, _ = project
    interrupter = CONFTEST.split("def pytest_sessionstart")[0]
    start = "threading.Thread(target=_interrupt, args=(0.2,), daemon=True).start()"
    boot = f"{interrupter}\nimport threading\n{start}\n"
    boot += "import sys\nfrom pytest_roofline.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    command = [
        sys.executable,
        "-c",
        boot,
        "profile",
        "model.onnx",
        "--sessions",
        "50",
        "--rounds",
        "50",
        "--quiet",
    ]
    done = subprocess.run(
        command,
        cwd=folder,
        env=_env(folder),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_default_sigint,
    )
    assert "terminate called" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 130 and "roofline: interrupted" in done.stderr, (
        done.returncode,
        done.stderr[-2000:],
    )


@pytest.mark.parametrize(("target", "after"), [("process", 0.0), ("process", 0.5), ("thread", 0.2)])
def test_sigint_during_a_calibration_stops_it_and_exits_interrupted(
    project: tuple[Path, dict[str, str]], target: str, after: float
) -> None:
    """No calibration is cached (``--roofline-recalibrate``, no ROOFLINE_CACHE_UNSETTLED): the
    signal lands in the calibration, which takes no further probe (before the fix it went on to
    the end, the measurement after it, and the interrupt came after both or never)."""
    folder, before = project
    (folder / "conftest.py").write_text(CALIBRATION_CONFTEST)
    (folder / "signalled").unlink(missing_ok=True)
    env = _env(folder, ROOFLINE_TEST_SIGINT_AFTER=str(after), ROOFLINE_TEST_SIGINT_TO=target)
    del env["ROOFLINE_CACHE_UNSETTLED"]
    try:
        returncode, output, leftover = _run_interrupted([*_command(), "--roofline-recalibrate"], folder, env)
    finally:
        (folder / "conftest.py").write_text(CONFTEST)
    landed, *later_probes = (folder / "signalled").read_text().splitlines()
    assert landed == "in the calibration", output[-2000:]
    assert "terminate called" not in output, output[-2000:]
    assert returncode == pytest.ExitCode.INTERRUPTED, output[-2000:]
    assert "KeyboardInterrupt" in output
    # the signal is seen within one wait slice: at most the probe starting in it, none after
    assert len(later_probes) <= 1, later_probes
    assert leftover == []
    assert _baselines(folder) == before
