"""The trtexec backend end to end against tests/fake_trtexec.py (real exports replayed, no GPU)."""

from __future__ import annotations

import gzip
import json
import os
import stat
import sys
import time
from pathlib import Path

import fake_trtexec
import pytest
from _calibration_helpers import use_fake_nvml

from pytest_roofline.backends.attribution import GraphIndex, attributed_fraction
from pytest_roofline.backends.base import get_backend
from pytest_roofline.backends.trtexec.runner import TrtexecBackend, engine_cache_dir
from pytest_roofline.errors import BackendError, BackendUnavailable, OptionError
from pytest_roofline.memory import MemoryProfile
from pytest_roofline.memory.measure import profiled_memory
from pytest_roofline.memory.trtexec_log import log_memory
from pytest_roofline.model import ModelSpec, bind_input_shapes, load_model, make_inputs

HERE = Path(__file__).parent
DATA = HERE / "data" / "trtexec"
RECORDED = [f"resnet.onnx.engine.{n}.json" for n in ("profile", "graph", "timing.first20")]


@pytest.fixture(scope="module")
def resnet18(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded engine's ONNX model, decompressed (46 MB of zero weights)."""
    path = tmp_path_factory.mktemp("model") / "resnet18.onnx"
    path.write_bytes(gzip.decompress((DATA / "resnet18.onnx.gz").read_bytes()))
    return path


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Install the fake trtexec; returns a configure(version, mode) → path function."""
    script = tmp_path / "bin" / "trtexec"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "fake_trtexec.py"}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_TRT_LOG", str(log))
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")

    def configure(version: str = "8601", mode: str = "ok") -> Path:
        monkeypatch.setenv("FAKE_TRT_VERSION", version)
        monkeypatch.setenv("FAKE_TRT_MODE", mode)
        return script

    configure.calls = lambda: [json.loads(line) for line in log.read_text().splitlines()]  # type: ignore[attr-defined]
    return configure


def _session(backend: TrtexecBackend, path: Path, batch: int = 32):
    spec = ModelSpec.create(path, batch=batch)
    model = load_model(path)
    return backend.open(spec, make_inputs(model, bind_input_shapes(model, batch)))


@pytest.mark.parametrize("version", ["7103", "8001", "8601", "100300", "110100"])
def test_profile_and_time_every_version(fake, resnet18: Path, version: str) -> None:
    fake(version)
    backend = get_backend("trtexec", {"precision": "fp32"})
    assert backend.version().startswith("TensorRT ")
    with _session(backend, resnet18) as session:
        samples = session.time(7)
        profile = session.profile(3)
    assert len(samples) == 7 and samples[0] == pytest.approx(0.873472e-3)
    index = GraphIndex.from_model(load_model(resnet18))
    assert attributed_fraction(profile, index.order) >= 0.95
    assert len({n for k in profile.kernels for n in k.onnx_nodes}) >= 47
    statistic = {k.extra["statistic"] for k in profile.kernels}
    assert statistic == ({"median"} if version not in ("7103", "8001") else {"average"})


def test_engine_is_built_once_and_cached(fake, resnet18: Path) -> None:
    fake("8601")
    backend = get_backend("trtexec", {"precision": "fp16", "workspace": "256"})
    with _session(backend, resnet18) as session:
        session.time(3)
        session.profile(2)
    with _session(get_backend("trtexec", {"precision": "fp16", "workspace": "256"}), resnet18) as session:
        session.time(3)
    runs = [c for c in fake.calls() if "--help" not in c]
    assert [any(a.startswith("--onnx=") for a in c) for c in runs] == [True, False, False]
    build = runs[0]
    assert "--fp16" in build and "--profilingVerbosity=detailed" in build
    assert "--minShapes=input.1:32x3x224x224" in build and "--memPoolSize=workspace:256" in build
    assert "--separateProfileRun" in runs[1] and "--separateProfileRun" not in runs[0]
    assert len(list(engine_cache_dir().glob("resnet18-*.engine"))) == 1
    with _session(get_backend("trtexec", {"precision": "fp16"}), resnet18, batch=8) as session:
        session.time(1)  # another batch: another engine
    assert len(list(engine_cache_dir().glob("resnet18-*.engine"))) == 2


@pytest.mark.parametrize("name", ["../../escaped/evil", "ABSOLUTE/x/evil", "..", "模型/../x"])
def test_a_hostile_graph_name_keeps_the_engine_and_its_lock_in_the_cache(
    fake, resnet18: Path, tmp_path: Path, name: str
) -> None:
    """A model given as a proto (paired mode's reference, the Python API) is named by its graph."""
    fake("8601")
    name = name.replace("ABSOLUTE", str(tmp_path / "outside"))
    proto = load_model(resnet18)
    proto.graph.name = name
    before = set(tmp_path.rglob("*"))
    spec = ModelSpec.create(proto, batch=32)
    with get_backend("trtexec").open(spec, make_inputs(proto, bind_input_shapes(proto, 32))) as session:
        assert len(session.time(2)) == 2
    created = {p for p in set(tmp_path.rglob("*")) - before if p.is_file() and p.name != "calls.jsonl"}
    cache = engine_cache_dir()
    assert created and all(p.parent == cache for p in created), sorted(map(str, created))
    (engine,) = [p for p in created if p.name.endswith(".engine")]
    # the engine and its build's log (its memory lines) only: the lock went away with the build
    assert created == {engine, engine.with_name(engine.name + ".build.log")}
    assert not engine.name.startswith(".")
    readable = {"../../escaped/evil": "escaped_evil-", "..": "model-", "模型/../x": "模型_.._x-"}
    assert engine.name.startswith(readable.get(name, "tmp_"))


def test_one_trtexec_run_serves_many_small_time_calls(fake, resnet18: Path) -> None:
    fake("8601")
    backend = get_backend("trtexec", {"chunk": "30"})
    with _session(backend, resnet18) as session:
        samples = [session.time(1)[0] for _ in range(45)]
    runs = [c for c in fake.calls() if "--help" not in c]
    assert len(runs) == 2 and all("--iterations=30" in c for c in runs)  # 30 + 30 >= 45
    recorded = [r["computeMs"] * 1e-3 for r in json.loads((DATA / RECORDED[2]).read_text())]
    # the fake cycles its 20 records; the second run starts over
    assert samples == pytest.approx(recorded + recorded[:10] + recorded[:15])


def test_trt11_precision_is_ignored_with_a_warning(fake, resnet18: Path) -> None:
    fake("110100")
    backend = get_backend("trtexec", {"precision": "fp16"})
    with pytest.warns(UserWarning, match="strongly typed"):
        session = _session(backend, resnet18)
    with session:
        session.profile(1)
    (call,) = [c for c in fake.calls() if "--help" not in c]
    assert not {"--fp16", "--separateProfileRun", "--useCudaGraph"} & set(call)


def test_failure_reports_the_error_lines_and_keeps_no_engine(fake, resnet18: Path) -> None:
    fake("8601", "fail")
    backend = get_backend("trtexec")
    with _session(backend, resnet18) as session, pytest.raises(BackendError) as info:
        session.time(2)
    message = str(info.value)
    assert "exit status 1" in message and "no optimization profile" in message
    assert "stderr: Segmentation fault in the fake" in message
    assert "\n" not in message
    assert not list(engine_cache_dir().glob("*.engine"))


def test_hang_is_killed_after_the_timeout(fake, resnet18: Path) -> None:
    fake("8601", "hang")
    backend = get_backend("trtexec", {"timeout": "1"})
    start = time.monotonic()
    with _session(backend, resnet18) as session, pytest.raises(BackendError, match="killed"):
        session.time(2)
    assert time.monotonic() - start < 30


def test_missing_exports_are_an_error(fake, resnet18: Path) -> None:
    fake("8601", "nofiles")
    with _session(get_backend("trtexec"), resnet18) as session:
        with pytest.raises(BackendError, match="exportTimes"):
            session.time(2)


def test_temporary_files_are_removed(fake, resnet18: Path) -> None:
    fake("8601")
    session = _session(get_backend("trtexec"), resnet18)
    session.profile(1)
    workdir = session._workdir
    assert workdir.exists()
    session.close()
    assert not workdir.exists()


def test_import_mode_needs_no_trtexec(resnet18: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    options = {
        "profile": str(DATA / RECORDED[0]),
        "layer_info": str(DATA / RECORDED[1]),
        "times": str(DATA / RECORDED[2]),
    }
    backend = get_backend("trtexec", options)
    assert backend.version() == "imported"
    recorded = backend.imported_times(0)
    assert len(recorded) == 20
    with _session(backend, resnet18) as session:
        assert session.time(15) == recorded[:15]
        assert session.time(10) == recorded[15:] + recorded[:5]  # replayed in order, cycling
        profile = session.profile(1)
    index = GraphIndex.from_model(load_model(resnet18))
    assert attributed_fraction(profile, index.order) >= 0.95
    assert profile.precision == "fp16"


def test_import_mode_profile_only(resnet18: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    backend = get_backend("trtexec", {"profile": str(DATA / RECORDED[0])})
    with _session(backend, resnet18) as session:
        profile = session.profile(1)
        with pytest.raises(BackendError, match="times=FILE"):
            session.time(1)
    # without layer info: names alone still attribute the layers
    assert attributed_fraction(profile) >= 0.95


def test_unavailable_messages(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert not TrtexecBackend.available()
    with pytest.raises(BackendUnavailable, match="trtexec is not on PATH"):
        get_backend("trtexec")
    with pytest.raises(BackendUnavailable, match="/opt/none/trtexec is not an executable"):
        get_backend("trtexec", {"trtexec": "/opt/none/trtexec"})


def test_explicit_trtexec_path(fake, resnet18: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = fake("100300")
    monkeypatch.setenv("PATH", "/nonexistent")
    backend = get_backend("trtexec", {"trtexec": str(script)})
    assert backend.version() == "TensorRT 10.3.0"


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"precision": "fp8"}, "precision"),
        ({"timeout": "-1"}, "timeout"),
        ({"metric": "gpu"}, "metric"),
        ({"chunk": "0"}, "chunk"),
        ({"layer_info": "x.json"}, "import mode"),
        ({"args": "'unclosed"}, "args"),
    ],
)
def test_bad_options(options: dict[str, str], match: str) -> None:
    with pytest.raises(OptionError, match=match):
        TrtexecBackend(options)


def test_a_trtexec_run_is_identified_by_the_gpu_of_its_device_option(
    fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVML answers from the FAKE pynvml (tests/fake_pynvml, the recorded H200): logic only."""
    from pytest_roofline.device import device_class
    from pytest_roofline.device.gpu import gpu_info

    fake()
    use_fake_nvml(monkeypatch)
    try:
        backend = get_backend("trtexec", {"args": "--device=0 --useSpinWait"})
        assert backend.device_index() == 0
        fingerprint = backend.fingerprint()
        assert (
            fingerprint["gpu"]["name"] == "NVIDIA H200" and device_class(fingerprint) == "NVIDIA H200 140GiB"
        )
        other = get_backend("trtexec", {"args": "--device 1"})
        assert (
            other.device_index() == 1 and "nvidia-ml-py" in other.fingerprint()["gpu"]["name"]
        )  # no device 1
        imported = get_backend("trtexec", {"profile": str(DATA / RECORDED[0])})
        assert "gpu" not in imported.fingerprint()  # exports made elsewhere: no GPU of ours to name
    finally:
        gpu_info.cache_clear()


# --- memory: what TensorRT logs it allocated (issue 34 item 5) ------------------------------------


def _memory(profile) -> MemoryProfile | None:
    """The profile's memory as the pipeline reads it (the trtexec path needs no analysis)."""
    memory, layers = profiled_memory(profile, None)  # type: ignore[arg-type]
    assert layers == {}  # TensorRT logs no per-layer allocations
    return memory


@pytest.mark.parametrize("version", ["8401", "8601", "100300"])
def test_a_profiled_run_reads_its_memory_from_trtexecs_log(fake, resnet18: Path, version: str) -> None:
    """The profiled run runs at --verbose: the context's activation and persistent bytes; the weights
    from the build's log, kept beside the cached engine (TensorRT 8.6 on), else its MiB line."""
    fake(version)
    backend = get_backend("trtexec", {"precision": "fp16"})
    with _session(backend, resnet18) as session:
        built = _memory(session.profile(1))  # this run built the engine
    with _session(backend, resnet18) as session:
        loaded = _memory(session.profile(1))  # this one loaded the cached engine: no build lines
    profiled = [call for call in fake.calls() if any(a.startswith("--exportProfile") for a in call)]
    assert len(profiled) == 2 and all("--verbose" in call for call in profiled)
    weights = fake_trtexec.weight_bytes()
    assert 23_000_000 < weights < 23_500_000  # the recorded ResNet-18's 11.7 M parameters in fp16
    exact = version != "8401"  # TensorRT logs the weights in bytes from 8.6
    expected = weights if exact else -(-weights // (1 << 20)) * (1 << 20)
    for memory in (built, loaded):
        assert memory is not None and memory.source == "trtexec-log" and memory.exact is exact
        assert memory.weights == expected
        assert memory.peak_activations == fake_trtexec.ACTIVATION_BYTES + fake_trtexec.PERSISTENT_BYTES
        assert memory.peak == memory.weights + memory.peak_activations
        assert memory.arena_held % (1 << 20) == 0 and memory.arena_held >= memory.peak


def test_trtexec_log_lines_in_each_form(tmp_path: Path) -> None:
    """The byte lines win over the MiB lines; MiB alone is not exact; no memory line: None."""
    stamp = "[11/27/2026-10:00:00]"
    build = [
        f"{stamp} [I] [TRT] Total Host Persistent Memory: 30784",
        f"{stamp} [I] [TRT] Total Device Persistent Memory: 61892096",
        f"{stamp} [I] [TRT] Total Activation Memory: 22118400",
        f"{stamp} [I] [TRT] Total Weights Memory: 194000000",
    ]
    memory = log_memory("\n".join(build))
    assert memory is not None and memory.exact
    assert (memory.weights, memory.peak) == (194000000, 194000000 + 22118400 + 61892096)
    info = [
        "[TRT] [MemUsageChange] TensorRT-managed allocation in engine deserialization: "
        "CPU +0, GPU +13, now: CPU 0, GPU 13 (MiB)",
        "[TRT] [MemUsageChange] TensorRT-managed allocation in IExecutionContext creation: "
        "CPU +0, GPU +3, now: CPU 0, GPU 16 (MiB)",
    ]
    memory = log_memory("\n".join(info))
    assert memory is not None and not memory.exact
    assert (memory.weights, memory.peak, memory.arena_held) == (13 << 20, 16 << 20, 16 << 20)
    verbose = [*info[:1], "[TRT] Allocated activation device memory of size 3613184", info[1]]
    memory = log_memory("\n".join(verbose))
    assert memory is not None and memory.peak_activations == 3613184 and not memory.exact  # weights in MiB
    assert log_memory("&&&& PASSED TensorRT.trtexec") is None


def test_import_mode_reads_memory_from_a_log_and_none_without(resnet18: Path, tmp_path: Path) -> None:
    """The recorded exports carry no memory (shared/data's trtexec files have no console log)."""
    options = {"profile": str(DATA / RECORDED[0]), "layer_info": str(DATA / RECORDED[1])}
    with _session(get_backend("trtexec", options), resnet18) as session:
        assert _memory(session.profile(1)) is None
    log = tmp_path / "trtexec.log"
    log.write_text("\n".join(fake_trtexec._memory_lines((8, 6, 1), {"--verbose": ""})))
    with _session(get_backend("trtexec", {**options, "log": str(log)}), resnet18) as session:
        memory = _memory(session.profile(1))
    assert memory is not None and memory.peak_activations == fake_trtexec.ACTIVATION_BYTES + 5632
    with pytest.raises(BackendError, match="no such file"):
        with _session(
            get_backend("trtexec", {**options, "log": str(tmp_path / "none")}), resnet18
        ) as session:
            session.profile(1)
