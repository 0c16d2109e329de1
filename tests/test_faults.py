"""Fault injection: every bad input is one clear line, a crashing or hanging backend fails only its
test, no baseline is lost or half-written, and huge models are analyzed without their weights.

CLI faults: exit status 2, exactly one stderr line, no traceback.  Plugin faults: the test fails
with a ``roofline: ...`` line naming the problem and no internal frames.  Every fault scenario also
checks that no model or baseline file changed (bytes and mtime).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import stat
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import onnx
import pytest
from _baselines import make_entry as baseline_entry
from _peak_rss import CLI, peak_rss_of
from _plugin_helpers import FAKE, relu_chain
from _report_data import model_profile, result, run_results
from onnx import TensorProto, helper, numpy_helper

from pytest_roofline.cli import main
from pytest_roofline.gate.baseline import BaselineEntry
from pytest_roofline.gate.store import BaselineStore
from pytest_roofline.schema import BASELINE_FILE_SCHEMA

HERE = Path(__file__).parent
ROOFLINE = [sys.executable, "-c", "from pytest_roofline.cli import entry_point; entry_point()"]


# --- fixtures: a directory of good and bad inputs -------------------------------------------------


def seq_model(path: Path) -> Path:
    """Relu over [N, seq]: ``seq`` stays unbound unless given."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "seq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "seq"])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def bad_reshape_model(path: Path) -> Path:
    """Loads and passes the checker, fails at run time: Reshape [1, 8] to [3, 5]."""
    shape = numpy_helper.from_array(np.array([3, 5], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="bad_reshape")],
        "bad_reshape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [shape],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def make_inputs_dir(root: Path) -> Path:
    relu_chain(root / "good.onnx", 3)
    data = (root / "good.onnx").read_bytes()
    (root / "empty.onnx").write_bytes(b"")
    (root / "truncated.onnx").write_bytes(data[: len(data) // 2])
    (root / "text.onnx").write_text("this is not a model\n")
    (root / "adir.onnx").mkdir()
    seq_model(root / "seq.onnx")
    bad_reshape_model(root / "bad_reshape.onnx")
    np.save(root / "wrong_shape.npy", np.zeros((3,), np.float32))
    np.save(root / "wrong_dtype.npy", np.zeros((1, 8), np.int64))
    return root


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Bytes and mtime of every file under ``root`` (caches excluded)."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".pytest_cache" not in p.parts and "__pycache__" not in p.parts
    }


def make_entry(test: str = "test_m.py::test_a", figure: float = 1.0) -> BaselineEntry:
    return baseline_entry(test, figure, "good.onnx", backend="fake", device="fake-device", sessions=(figure,))


@pytest.fixture
def inputs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return make_inputs_dir(tmp_path)


def one_line_error(capfd: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> str:
    """Run the CLI in-process; assert exit 2, one stderr line (fd level: native logs count too)."""
    status = main(argv)
    err = capfd.readouterr().err
    assert status == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("roofline: error: ") and "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


# --- CLI: bad inputs --------------------------------------------------------------------------------

CLI_INPUT_FAULTS = {
    "missing-model": (["analyze", "missing.onnx"], ["missing.onnx", "no such file"]),
    "empty-model": (["analyze", "empty.onnx"], ["empty.onnx", "empty"]),
    "truncated-model": (["analyze", "truncated.onnx"], ["truncated.onnx", "not a valid ONNX model"]),
    "non-onnx-model": (["analyze", "text.onnx"], ["text.onnx", "not a valid ONNX model"]),
    "directory": (["analyze", "adir.onnx"], ["adir.onnx", "directory"]),
    "unbound-dim": (["analyze", "seq.onnx", "--batch", "1"], ["'seq'", "--dim seq="]),
    "profile-truncated": (["profile", "truncated.onnx"], ["not a valid ONNX model"]),
    "profile-directory": (["profile", "adir.onnx"], ["directory"]),
    "unknown-backend": (["profile", "good.onnx", "--backend", "nope"], ["unknown backend 'nope'"]),
    "unknown-option": (["profile", "good.onnx", "--option", "bogus=1"], ["no option 'bogus'"]),
    "npy-wrong-shape": (
        ["profile", "--no-roofline", "good.onnx", "--inputs", "wrong_shape.npy"],
        ["input 'x' expects shape", "got [3]"],
    ),
    "npy-wrong-dtype": (
        ["profile", "--no-roofline", "good.onnx", "--inputs", "wrong_dtype.npy"],
        ["input 'x' expects float32", "got int64"],
    ),
    "check-npy-wrong-dtype": (
        ["check", "good.onnx", "--backends", "onnxruntime,openvino", "--inputs", "wrong_dtype.npy"],
        ["expects float32", "int64"],
    ),
    # --quiet: without it the progress line "profiling bad_reshape ..." precedes the error
    "backend-fails-at-run": (
        ["profile", "--quiet", "--no-roofline", "bad_reshape.onnx"],
        ["onnxruntime failed to run bad_reshape", "Reshape"],
    ),
}


@pytest.mark.parametrize("case", sorted(CLI_INPUT_FAULTS))
def test_cli_bad_input_is_one_line_and_changes_nothing(case, inputs_dir, capfd):
    argv, needles = CLI_INPUT_FAULTS[case]
    before = snapshot(inputs_dir)
    one_line_error(capfd, argv, *needles)
    assert snapshot(inputs_dir) == before


# --- CLI: baseline directory faults ------------------------------------------------------------------


@pytest.fixture
def stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A baseline dir with one valid file, and a results JSON holding one new entry."""
    monkeypatch.chdir(tmp_path)
    BaselineStore(tmp_path / "bl").write([make_entry()])
    entry = make_entry("test_m.py::test_b").to_dict()
    item = {**result(model_profile(4), "pass", test="test_m.py::test_b"), "key": entry["key"], "entry": entry}
    results = run_results(item)
    (tmp_path / "results.json").write_text(json.dumps(results))
    return tmp_path


BROKEN_FILES = {
    "corrupt-json": ('{"schema_version": 1, "entries": {', ["corrupt", "test_m.json"]),
    "future-schema": (json.dumps({"schema_version": 99, "entries": {}}), ["schema_version 99", "upgrade"]),
}


@pytest.mark.parametrize("case", sorted(BROKEN_FILES))
@pytest.mark.parametrize("verb", ["show", "update", "prune"])
def test_cli_broken_baseline_file_is_one_line_and_not_rewritten(case, verb, stored, capfd):
    content, needles = BROKEN_FILES[case]
    (stored / "bl" / "test_m.json").write_text(content)
    before = snapshot(stored)
    argv = {
        "show": ["baseline", "show", "--baseline-dir", "bl"],
        "update": ["baseline", "update", "results.json", "--baseline-dir", "bl"],
        "prune": ["baseline", "prune", "--keys", "k", "--baseline-dir", "bl"],
    }[verb]
    one_line_error(capfd, argv, *needles)
    assert snapshot(stored) == before


@pytest.mark.parametrize("verb", ["show", "update"])
def test_cli_baseline_dir_that_is_a_file(verb, stored, capfd):
    (stored / "blfile").write_text("not a directory\n")
    before = snapshot(stored)
    argv = ["baseline", verb, *(["results.json"] if verb == "update" else []), "--baseline-dir", "blfile"]
    one_line_error(capfd, argv, "blfile", "is a file")
    assert snapshot(stored) == before


def test_cli_unwritable_baseline_dir(stored, capfd, monkeypatch):
    """Root ignores permission bits, so the refusal is injected where the rename happens."""

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied", str(dst))

    monkeypatch.setattr("pytest_roofline.gate.store.os.replace", refuse)
    before = snapshot(stored)
    one_line_error(capfd, ["baseline", "update", "results.json", "--baseline-dir", "bl"], "Permission denied")
    assert snapshot(stored) == before  # the temp file was removed, the old file kept


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permission bits; see the os.replace variant")
def test_cli_unwritable_baseline_dir_by_mode(stored, capfd):
    (stored / "bl").chmod(0o500)
    try:
        before = snapshot(stored)
        one_line_error(capfd, ["baseline", "update", "results.json", "--baseline-dir", "bl"], "bl")
        assert snapshot(stored) == before
    finally:
        (stored / "bl").chmod(0o700)


def test_cli_error_as_a_real_process_has_no_traceback(inputs_dir):
    proc = subprocess.run(
        [*ROOFLINE, "profile", "truncated.onnx"], capture_output=True, text=True, timeout=120, cwd=inputs_dir
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [proc.stderr.strip()] and "Traceback" not in proc.stderr


# --- plugin: bad inputs and crashing or hanging backends in one session ------------------------------

#: The session's --roofline-timeout: every measurement of it must finish within it, the first one
#: with the plugin's imports and the device calibration (8.7 s at load 13 on 2 CPUs; 3 s failed the
#: suite there), while the hang is stopped at it.
HANG_TIMEOUT = 30
#: How long the hanging backend would take: far past the timeout.
HANG_SECONDS = 600

PLUGIN_MODULE = f"""
import pytest

def test_missing(model_profile):
    model_profile("missing.onnx")

def test_empty(model_profile):
    model_profile("empty.onnx")

def test_truncated(model_profile):
    model_profile("truncated.onnx")

def test_not_onnx(model_profile):
    model_profile("text.onnx")

def test_directory(model_profile):
    model_profile("adir.onnx")

def test_unbound_dim(model_profile):
    model_profile("seq.onnx")

def test_unknown_backend(model_profile):
    model_profile("good.onnx", backend="nope")

def test_unknown_option(model_profile):
    model_profile("good.onnx", options={{"bogus": "1"}})

def test_npy_wrong_shape(model_profile):
    model_profile("good.onnx", inputs="wrong_shape.npy")

def test_npy_wrong_dtype(model_profile):
    model_profile("good.onnx", inputs="wrong_dtype.npy")

@pytest.mark.roofline(metrics=["latency", "layer:no_such_layer"])
def test_marker_names_missing_layer(model_profile):
    model_profile("good.onnx")

def test_backend_crash(model_profile):
    model_profile("good.onnx", options={{"fail": "1"}})

def test_backend_hang(model_profile):
    model_profile("good.onnx", options={{"hang": "{HANG_SECONDS}"}})

def test_ok_first(model_profile):
    model_profile("good.onnx")

def test_ok_second(model_profile):
    model_profile("good.onnx", batch_size=2)
"""

PLUGIN_FAULTS = {
    "test_missing": "missing.onnx: no such file",
    "test_empty": "empty.onnx: the file is empty",
    "test_truncated": "truncated.onnx: not a valid ONNX model",
    "test_not_onnx": "text.onnx: not a valid ONNX model",
    "test_directory": "adir.onnx: is a directory",
    "test_unbound_dim": "'seq' is unknown",
    "test_unknown_backend": "unknown backend 'nope'",
    "test_unknown_option": "no option 'bogus'",
    "test_npy_wrong_shape": "input 'x' expects shape",
    "test_npy_wrong_dtype": "input 'x' expects float32",
    "test_marker_names_missing_layer": "'layer:no_such_layer'",
    "test_backend_crash": "fail option set",
    "test_backend_hang": f"backend did not finish within {HANG_TIMEOUT} s",
}


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    return {**env, **extra}


def run_pytest(cwd: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *FAKE, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(ROOFLINE_CACHE_DIR=str(cwd.with_name(cwd.name + "-cache"))),
    )


@pytest.fixture(scope="module")
def plugin_run(tmp_path_factory: pytest.TempPathFactory):
    """One pytest session over every plugin fault, a hang bounded by --roofline-timeout."""
    root = make_inputs_dir(tmp_path_factory.mktemp("faults"))
    (root / "test_faults_project.py").write_text(PLUGIN_MODULE)
    before = snapshot(root)
    timeout = f"--roofline-timeout={HANG_TIMEOUT}"
    proc = run_pytest(root, timeout, "--junitxml=junit.xml", "--roofline-report=r.json")
    cases = {case.get("name"): case for case in ET.parse(root / "junit.xml").getroot().iter("testcase")}
    return root, before, proc, cases


@pytest.mark.parametrize("test", sorted(PLUGIN_FAULTS))
def test_plugin_fault_fails_that_test_with_one_clear_line(plugin_run, test):
    _root, _before, proc, cases = plugin_run
    failure = cases[test].find("failure")
    assert failure is not None, proc.stdout[-3000:]
    message = failure.get("message") or ""
    assert PLUGIN_FAULTS[test] in message, message
    text = failure.text or ""
    assert "Traceback" not in text and "pytest_roofline/" not in text, text  # no internal frames
    assert "roofline: " in text and len(text.strip().splitlines()) == 1, text


def test_plugin_session_goes_on_and_keeps_every_other_baseline(plugin_run):
    root, before, proc, cases = plugin_run
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert cases["test_ok_first"].find("failure") is None
    assert cases["test_ok_second"].find("failure") is None
    entries = json.loads((root / ".roofline" / "test_faults_project.json").read_text())["entries"]
    assert sorted(e["test"] for e in entries.values()) == [
        "test_faults_project.py::test_ok_first",
        "test_faults_project.py::test_ok_second",
    ]
    results = json.loads((root / "r.json").read_text())["results"]
    assert {r["test"].split("::")[1] for r in results} == {"test_ok_first", "test_ok_second"}
    after = snapshot(root)
    assert {k: v for k, v in after.items() if k in before} == before  # no input file touched


def test_plugin_hang_is_bounded_by_the_timeout(plugin_run):
    _root, _before, _proc, cases = plugin_run
    # it waited the timeout, and was stopped there, long before the hang would have ended
    assert HANG_TIMEOUT <= float(cases["test_backend_hang"].get("time")) < HANG_SECONDS / 2


def test_timeout_option_is_validated(tmp_path):
    relu_chain(tmp_path / "good.onnx", 1)
    (tmp_path / "test_p.py").write_text("def test_a(model_profile):\n    model_profile('good.onnx')\n")
    proc = run_pytest(tmp_path, "--roofline-timeout=-1")
    assert proc.returncode == 4 and "timeout must be a positive number" in proc.stderr


# --- plugin: baseline file faults ---------------------------------------------------------------------

ONE_TEST = "def test_a(model_profile):\n    model_profile('good.onnx')\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    relu_chain(tmp_path / "good.onnx", 3)
    (tmp_path / "test_p.py").write_text(ONE_TEST)
    return tmp_path


@pytest.mark.parametrize("case", sorted(BROKEN_FILES))
def test_plugin_broken_baseline_file_fails_the_test_and_is_not_rewritten(case, project):
    content, needles = BROKEN_FILES[case]
    (project / ".roofline").mkdir()
    (project / ".roofline" / "test_p.json").write_text(content)
    before = snapshot(project)
    proc = run_pytest(project)
    assert proc.returncode == 1
    needles = [n.replace("test_m.json", "test_p.json") for n in needles]
    assert all(n in proc.stdout for n in needles), proc.stdout
    assert "Traceback" not in proc.stdout
    assert snapshot(project) == before


def test_plugin_baseline_dir_that_is_a_file(project):
    (project / "blfile").write_text("x\n")
    before = snapshot(project)
    proc = run_pytest(project, "--roofline-baseline-dir=blfile")
    assert proc.returncode == 1
    assert "roofline: baseline directory" in proc.stdout and "is a file" in proc.stdout, proc.stdout
    assert snapshot(project) == before


def test_plugin_unwritable_baseline_dir_fails_the_run_and_keeps_the_old_file(project):
    """Root ignores mode bits, so the rename is refused in the pytest process (a read-only dir)."""
    (project / "test_p.py").write_text(ONE_TEST + ONE_TEST.replace("test_a", "test_b"))
    BaselineStore(project / ".roofline").write([make_entry("test_p.py::test_other")])
    (project / "conftest.py").write_text(
        textwrap.dedent("""
        import pytest_roofline.gate.store as b

        def refuse(src, dst):
            raise PermissionError(13, "Permission denied", str(dst))

        def pytest_configure(config):
            b.os.replace = refuse
        """)
    )
    before = snapshot(project)
    proc = run_pytest(project)
    assert "2 passed" in proc.stdout, proc.stdout
    assert proc.returncode == 1  # green tests, but the gate could not record what it measured
    assert "roofline error: baselines not written" in proc.stdout and "Permission denied" in proc.stdout
    assert "Traceback" not in proc.stdout
    assert snapshot(project) == before  # old file intact, no temp file left behind


def test_plugin_nonexistent_compare_ref(project):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run([*git, "add", "good.onnx", "test_p.py"], cwd=project, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "m"], cwd=project, check=True)
    before = snapshot(project)
    proc = run_pytest(project, "--roofline-compare-ref=no-such-ref")
    assert proc.returncode == 1
    assert "roofline: git reference 'no-such-ref' does not exist" in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stdout
    assert {k: v for k, v in snapshot(project).items() if not k.startswith(".git")} == {
        k: v for k, v in before.items() if not k.startswith(".git")
    }


# --- subprocess backends killed or hung ----------------------------------------------------------------


@pytest.fixture
def fake_trtexec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    script = tmp_path / "bin" / "trtexec"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "fake_trtexec.py"}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_TRT_VERSION", "8601")
    return monkeypatch


@pytest.mark.parametrize(
    ("mode", "options", "needle"),
    [
        ("kill", {}, "trtexec was killed by signal SIGKILL"),
        ("hang", {"timeout": "1"}, "did not finish within 1 s and was killed"),
    ],
)
def test_trtexec_killed_or_hung_is_one_backend_error(fake_trtexec, tmp_path, mode, options, needle):
    from pytest_roofline.backends.base import get_backend
    from pytest_roofline.errors import BackendError
    from pytest_roofline.model import ModelSpec, bind_input_shapes, load_model, make_inputs

    fake_trtexec.setenv("FAKE_TRT_MODE", mode)
    model_path = relu_chain(tmp_path / "m.onnx", 2)
    model = load_model(model_path)
    spec = ModelSpec.create(model_path, batch=1)
    with pytest.raises(BackendError) as info:
        with get_backend("trtexec", options).open(spec, make_inputs(model, bind_input_shapes(model, 1))) as s:
            s.time(2)
    assert needle in str(info.value) and "\n" not in str(info.value)


# --- huge model: analyzed without reading its weights ---------------------------------------------------

HUGE_BYTES = 50 * 10**9


def huge_model(root: Path) -> Path:
    """Two MatMuls whose float32 weights (50 GB) live in a sparse, never-written data file."""
    k, m = 100_000, 62_500  # 2 x (100000 x 62500 x 4 B) = 50 GB
    inits = []
    for i, shape in enumerate([(k, m), (m, k)]):
        tensor = TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=shape)
        tensor.data_location = TensorProto.EXTERNAL
        where = {"location": "huge.data", "offset": str(i * k * m * 4), "length": str(k * m * 4)}
        for key, value in where.items():
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        inits.append(tensor)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w0"], ["h"], name="up"),
            helper.make_node("MatMul", ["h", "w1"], ["y"], name="down"),
        ],
        "huge",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", k])],
        inits,
    )
    path = root / "huge.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    with open(root / "huge.data", "wb") as handle:
        handle.truncate(HUGE_BYTES)  # sparse: claims 50 GB, occupies nothing
    return path


def test_huge_external_data_model_is_analyzed_without_loading_weights(tmp_path):
    huge_model(tmp_path)
    assert (tmp_path / "huge.data").stat().st_size == HUGE_BYTES
    args = ["analyze", "huge.onnx", "--batch", "2", "--format", "json"]
    status, out, _err, rss = peak_rss_of(CLI, args, tmp_path)
    assert status == 0, out
    data = json.loads(out)
    assert data["total"]["macs"] == 2 * 2 * 100_000 * 62_500
    assert rss < 1.5 * 2**30, f"peak RSS {rss / 2**20:.0f} MiB"  # the weights alone would be 50 GB
    script = (
        "import pytest_roofline as rl; a = rl.analyze('huge.onnx', batch=2); "
        "print(a.total.macs, a.total.bytes)"
    )
    status, out, _err, rss = peak_rss_of(script, [], tmp_path)
    assert status == 0, out
    macs, nbytes = (int(float(v)) for v in out.split())
    assert macs == 2 * 2 * 100_000 * 62_500 and nbytes >= HUGE_BYTES  # weights are counted, not read
    assert rss < 1.5 * 2**30, f"peak RSS {rss / 2**20:.0f} MiB"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 < 8 * 2**30


def test_sigkill_of_a_real_pytest_run_while_writing_baselines_leaves_the_old_file(project):
    """The whole pytest process is SIGKILLed between the temp file's write and its rename."""
    proc = run_pytest(project)
    assert proc.returncode == 0, proc.stdout
    path = project / ".roofline" / "test_p.json"
    before = path.read_bytes()
    (project / "conftest.py").write_text(
        textwrap.dedent("""
        import os, signal
        import pytest_roofline.gate.store as b

        replace = os.replace

        def die(src, dst):  # at the baseline file's rename; other files (a calibration stamp) go on
            if not str(dst).endswith("test_p.json"):
                return replace(src, dst)
            print("TEMP", src, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

        def pytest_configure(config):
            b.os.replace = die
        """)
    )
    proc = run_pytest(project, "--roofline-update", "-s")
    assert proc.returncode == -signal.SIGKILL, proc.stdout
    temp = Path(proc.stdout.split("TEMP", 1)[1].split()[0])
    assert temp.exists() and json.loads(temp.read_text())["entries"]  # fully written, never renamed
    assert path.read_bytes() == before
    assert json.loads(path.read_text())["schema_version"] == BASELINE_FILE_SCHEMA


# --- concurrent writers: pytest processes and xdist workers at the same moment ---------------------------

BARRIER = """
import os, pathlib, time
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    # every controller reaches its baseline write together (workers only hand over their records)
    if hasattr(session.config, "workerinput"):
        return
    barrier = pathlib.Path(os.environ["BARRIER_DIR"])
    (barrier / str(os.getpid())).touch()
    deadline = time.monotonic() + 60
    while len(list(barrier.iterdir())) < int(os.environ["BARRIER_N"]) and time.monotonic() < deadline:
        time.sleep(0.005)
"""

CONCURRENT_MODULE = """
import pytest

@pytest.mark.parametrize("batch", range(1, 9))
def test_model(model_profile, batch):
    model_profile("good.onnx", batch_size=batch)
"""


def test_concurrent_pytest_processes_and_xdist_workers_lose_no_entry(tmp_path):
    """Three pytest processes (one with -n 2) update the same baseline file at the same instant."""
    pytest.importorskip("xdist")
    relu_chain(tmp_path / "good.onnx", 3)
    (tmp_path / "test_c.py").write_text(CONCURRENT_MODULE)
    (tmp_path / "conftest.py").write_text(BARRIER)
    barrier = tmp_path.with_name(tmp_path.name + "-barrier")
    barrier.mkdir()
    BaselineStore(tmp_path / ".roofline").write([make_entry("test_c.py::test_earlier")])
    ids = [f"test_c.py::test_model[{b}]" for b in range(1, 9)]
    groups = [ids[:2], ids[2:5], ["-n", "2", *ids[5:]]]
    env = clean_env(
        ROOFLINE_CACHE_DIR=str(tmp_path.with_name(tmp_path.name + "-cache")),
        BARRIER_DIR=str(barrier),
        BARRIER_N=str(len(groups)),
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *FAKE, "--roofline-update", *args],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for args in groups
    ]
    outputs = [proc.communicate(timeout=240)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], outputs
    assert [out.count(" new ") for out in outputs] == [2, 3, 3], outputs  # each ran its share
    assert len(list(barrier.iterdir())) == len(groups)  # all three were writing at once
    data = json.loads((tmp_path / ".roofline" / "test_c.json").read_text())
    tests = sorted(entry["test"] for entry in data["entries"].values())
    assert tests == sorted(["test_c.py::test_earlier", *(f"test_c.py::test_model[{b}]" for b in range(1, 9))])
    assert {entry["batch"] for entry in data["entries"].values()} == set(range(1, 9))
    assert not list((tmp_path / ".roofline").glob(".*.tmp"))


def test_plugin_real_onnxruntime_failure_at_run_fails_only_that_test(tmp_path):
    """A model that loads but fails inside onnxruntime at run time; the other test still records."""
    from _plugin_helpers import fixed_calibration, matmul_chain

    cache = tmp_path.with_name(tmp_path.name + "-cache")
    cache.mkdir()
    fixed_calibration(cache, {"intra_op_threads": "1"})
    bad_reshape_model(tmp_path / "bad_reshape.onnx")
    matmul_chain(tmp_path / "mm.onnx", 2, size=32)
    (tmp_path / "test_r.py").write_text(
        "def test_bad(model_profile):\n    model_profile('bad_reshape.onnx')\n\n"
        "def test_good(model_profile):\n    model_profile('mm.onnx')\n"
    )
    before = snapshot(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--roofline-option=intra_op_threads=1",
            "--roofline-budget=2",
            "-rf",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        env=clean_env(ROOFLINE_CACHE_DIR=str(cache), ROOFLINE_LOAD_LIMIT="off"),
    )
    assert proc.returncode == 1 and "1 failed, 1 passed" in proc.stdout, proc.stdout
    assert "roofline: onnxruntime failed to run bad_reshape" in proc.stdout and "Traceback" not in proc.stdout
    assert "[E:onnxruntime" not in proc.stdout + proc.stderr  # no native log beside the one line
    entries = json.loads((tmp_path / ".roofline" / "test_r.json").read_text())["entries"]
    assert [e["test"] for e in entries.values()] == ["test_r.py::test_good"]
    assert {k: v for k, v in snapshot(tmp_path).items() if k in before} == before


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process group")
def test_ctrl_c_while_baselines_are_written_is_one_line_and_tears_nothing(tmp_path):
    relu_chain(tmp_path / "m.onnx", 3)
    (tmp_path / "test_c.py").write_text("def test_c(model_profile):\n    model_profile('m.onnx')\n")
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent("""
        import os, time
        import pytest_roofline.gate.store as b

        real = os.replace

        def slow(src, dst):  # the baseline's rename waits, so Ctrl-C lands in the middle of the write
            if ".roofline" in str(dst):
                print("WRITING", flush=True)
                time.sleep(30)
            real(src, dst)

        def pytest_configure(config):
            b.os.replace = slow
        """)
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *FAKE, "--roofline-update", "-s"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=clean_env(ROOFLINE_CACHE_DIR=str(tmp_path / "cache")),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "WRITING" in line:
            proc.send_signal(signal.SIGINT)
            break
    out = line + proc.stdout.read()
    assert proc.wait(timeout=60) == 2  # pytest's "interrupted"
    assert "roofline: interrupted while writing baselines and reports" in out
    assert "Traceback" not in out and "KeyboardInterrupt" not in out
    assert not list((tmp_path / ".roofline").glob("*")) or json.loads(
        (tmp_path / ".roofline" / "test_c.json").read_text()
    )
    assert not list(tmp_path.rglob("*.tmp"))  # the half-made temp file is gone
