"""The gate's helper process in real runs: it dies with a killed pytest and never re-runs the
user's ``__main__``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _plugin_helpers import fixed_calibration, matmul_chain

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

TEST_FILE = """
def test_mm(model_profile):
    model_profile("mm.onnx", batch_size=4)
"""


def _children(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (zombies count as gone)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _project(tmp_path: Path, size: int = 64) -> dict[str, str]:
    matmul_chain(tmp_path / "mm.onnx", 4, size=size)
    (tmp_path / "test_mm.py").write_text(TEST_FILE)
    (tmp_path / "cache").mkdir()
    env = dict(os.environ)
    env["ROOFLINE_CACHE_DIR"] = str(fixed_calibration(tmp_path / "cache"))
    env["ROOFLINE_LOAD_LIMIT"] = "off"
    return env


def test_a_killed_pytest_takes_its_helper_processes_with_it(tmp_path: Path) -> None:
    env = _project(tmp_path, size=1024)  # about 1 s a run: still measuring when killed
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--roofline-budget=120"]
    run = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 90
        helpers: set[int] = set()
        while not helpers and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.2)
            helpers = seen = _children(run.pid)
        assert helpers, "pytest never started a helper process"
        time.sleep(0.5)  # mid-measure: the helper is sampling (a new baseline's batch can end in 2 s)
        helpers = seen = _children(run.pid)
        assert run.poll() is None, "pytest finished before it could be killed mid-measure"
        run.send_signal(signal.SIGKILL)
        run.wait(10)
        deadline = time.monotonic() + 8
        while any(_alive(pid) for pid in helpers) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [pid for pid in helpers if _alive(pid)]
        assert not left, f"helper processes outlived pytest: {left}"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(10)
        for pid in [pid for pid in seen if _alive(pid)]:
            os.kill(pid, signal.SIGKILL)  # a failed check must not leave them running either


def test_pytest_main_from_a_script_without_a_main_guard_finishes(tmp_path: Path) -> None:
    env = _project(tmp_path)
    (tmp_path / "run.py").write_text(
        "import pytest\nprint('SCRIPT START')\n"
        "pytest.main(['-q', '-p', 'no:cacheprovider', '--roofline-timeout=60', 'test_mm.py'])\n"
    )
    done = subprocess.run(
        [sys.executable, "run.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("SCRIPT START") == 1 and "1 passed" in done.stdout, done.stdout + done.stderr


def _bfloat16_model(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT),
            helper.make_node("MatMul", ["f", "f"], ["y"]),
        ],
        "bf16",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_bfloat16_input_model_is_gated_at_the_default_threads(pytester, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("ROOFLINE_LOAD_LIMIT", "off")
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(fixed_calibration(tmp_path)))
    _bfloat16_model(pytester.path / "bf.onnx")
    pytester.makepyfile(test_bf="def test_bf(model_profile):\n    model_profile('bf.onnx')\n")
    result = pytester.runpytest("--roofline-budget=2")
    result.assert_outcomes(passed=1)
