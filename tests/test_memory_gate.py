"""The memory verdict: decided exactly on one run, through the real plugin and onnxruntime."""

from __future__ import annotations

import json
import math
from pathlib import Path

import onnx
import pytest
from _baselines import make_entry, scale_stored_latency
from _plugin_helpers import fixed_calibration, matmul_chain
from onnx import TensorProto, helper

from pytest_roofline.assertions import assert_memory
from pytest_roofline.gate.baseline import BaselineEntry
from pytest_roofline.gate.memory import MemoryTolerance, grown_layers, memory_verdict
from pytest_roofline.memory import LayerMemory, MemoryProfile, MemoryRecord
from pytest_roofline.profile import ModelProfile
from pytest_roofline.pytest.options import parse_byte_count
from pytest_roofline.schema import SchemaError

ORT = ("--roofline-backend", "onnxruntime", "--roofline-option", "intra_op_threads=1")
SIZE, BATCH = 64, 4
BUFFER = SIZE * BATCH * 4  # one intermediate of the chain at batch 4, fp32


def keep_alive(path: Path, tensor: str) -> None:
    """The model at ``path`` with ``tensor`` also a graph output: kept alive to the end of the run."""
    model = onnx.load(str(path))
    model.graph.output.append(helper.make_tensor_value_info(tensor, TensorProto.FLOAT, ["N", SIZE]))
    onnx.save(model, str(path))


@pytest.fixture
def project(pytester, monkeypatch, tmp_path_factory):
    cache = fixed_calibration(tmp_path_factory.mktemp("calibration"), {"intra_op_threads": "1"})
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(cache))
    monkeypatch.setenv("ROOFLINE_LOAD_LIMIT", "off")
    matmul_chain(pytester.path / "mm.onnx", 3)
    pytester.makepyfile(
        test_perf=f'def test_mm(model_profile):\n    model_profile("mm.onnx", batch_size={BATCH})\n'
    )
    return pytester


def _memory_verdict(path: Path) -> dict:
    result = json.loads(path.read_text())["results"][0]
    found = [v for v in result["verdicts"] if v["metric"] == "memory"]
    assert len(found) == 1, result["verdicts"]
    return found[0]


def test_a_kept_alive_buffer_is_a_memory_regression_on_the_first_run(project):
    first = project.runpytest(*ORT, "--roofline-report", "r.json")
    first.assert_outcomes(passed=1)
    assert _memory_verdict(project.path / "r.json")["status"] == "new"
    stored = json.loads((project.path / ".roofline" / "test_perf.json").read_text())
    entry = next(iter(stored["entries"].values()))
    assert entry["memory"]["source"] == "onnxruntime profiler" and entry["memory"]["peak"] > 0
    assert entry["memory"]["layers"]["matmul0"]["allocated"] == BUFFER

    again = project.runpytest(*ORT, "--roofline-report", "r.json")  # nothing that runs changed
    again.assert_outcomes(passed=1)
    assert _memory_verdict(project.path / "r.json")["status"] == "unchanged"

    keep_alive(project.path / "mm.onnx", "m1")  # relu1 no longer frees matmul1's output
    changed = project.runpytest(*ORT, "--roofline-tolerance", "90", "--roofline-report", "r.json")
    changed.assert_outcomes(failed=1)
    verdict = _memory_verdict(project.path / "r.json")
    assert verdict["status"] == "regression" and verdict["current"] - verdict["baseline"] == BUFFER
    # the node whose output is kept is named, not the kernel whose allocation grew by it (ORT's
    # planner let relu1 work in place on matmul1's output; kept alive, that buffer is not reused and
    # a later kernel allocates anew): the two graphs' liveness, the baseline's from its entry's summary
    kept = f"+{BUFFER / 1000:.3g} kB at matmul1: a {BATCH}x{SIZE} buffer now kept alive to the end"
    assert verdict["message"].endswith(kept), verdict["message"]
    changed.stdout.fnmatch_lines([f"*memory: requested peak grew*{kept}*"])
    assert (
        "raw seconds" not in changed.stdout.str().split("memory: requested peak grew", 1)[1].split("\n\n")[0]
    )


def test_memory_tolerance_in_bytes_lets_the_growth_pass(project):
    project.runpytest(*ORT).assert_outcomes(passed=1)
    keep_alive(project.path / "mm.onnx", "m1")
    loose = project.runpytest(
        *ORT,
        "--roofline-tolerance",
        "90",
        "--roofline-memory-tolerance-bytes",
        "2k",
        "--roofline-report",
        "r.json",
    )
    loose.assert_outcomes(passed=1)
    assert _memory_verdict(project.path / "r.json")["status"] == "pass"


# --- the verdict and the record alone ---------------------------------------------------------


def _profile(peak: int, layers: dict[str, int], source: str = "onnxruntime profiler") -> ModelProfile:
    from pytest_roofline.measure.stats import LatencyStats
    from pytest_roofline.profile import Layer

    memory = MemoryProfile(
        peak=peak, arena_held=peak, weights=100, peak_activations=peak - 100, source=source
    )
    return ModelProfile(
        model_name="m",
        model_path=None,
        model_hash="",
        backend="onnxruntime",
        backend_version="1.32.0",
        options={},
        batch=1,
        input_shapes={},
        latency=LatencyStats.from_samples([1e-3, 1e-3]),
        layers=tuple(
            Layer(name, "Relu", (name,), 1e-4, 0, 0, memory=LayerMemory(size, peak))
            for name, size in layers.items()
        ),
        attributed_fraction=1.0,
        total_flops=0,
        total_macs=0,
        total_bytes=0,
        memory=memory,
    )


def _record(prof: ModelProfile) -> MemoryRecord:
    assert prof.memory is not None
    return MemoryRecord(prof.memory, {la.name: la.memory for la in prof.layers if la.memory is not None})


def test_the_tolerance_is_the_larger_of_share_and_bytes():
    before = _record(_profile(10_000, {"a": 100, "b": 0}))
    grown = _profile(10_150, {"a": 100, "b": 150})
    assert memory_verdict(grown, before, MemoryTolerance(0.01, 0)).status == "regression"  # type: ignore[union-attr]
    assert memory_verdict(grown, before, MemoryTolerance(0.02, 0)).status == "pass"  # type: ignore[union-attr]
    assert memory_verdict(grown, before, MemoryTolerance(0.01, 200)).status == "pass"  # type: ignore[union-attr]
    shrunk = _profile(9_000, {"a": 100, "b": -1000})
    assert memory_verdict(shrunk, before, MemoryTolerance()).status == "improved"  # type: ignore[union-attr]
    assert grown_layers(before.layers, _record(grown).layers) == [("b", 150)]


def test_a_peak_rss_figure_is_judged_with_at_least_five_percent():
    before = MemoryRecord(MemoryProfile(10_000, 0, 100, 9_900, "peak RSS", exact=False), {})
    now = _profile(10_400, {}, source="peak RSS")
    now = ModelProfile.from_dict(
        {**now.to_dict(), "memory": MemoryProfile(10_400, 0, 100, 10_300, "peak RSS", exact=False).to_dict()}
    )
    assert memory_verdict(now, before, MemoryTolerance(0.01, 0)).status == "pass"  # type: ignore[union-attr]
    other = _profile(10_000, {})  # onnxruntime's arena against a peak RSS: not the same figure
    assert memory_verdict(other, before, MemoryTolerance()).status == "incomparable"  # type: ignore[union-attr]


def test_no_memory_gives_no_verdict_unless_asked_for():
    prof = _profile(1_000, {})
    bare = ModelProfile.from_dict({**prof.to_dict(), "memory": None})
    assert memory_verdict(bare, None, MemoryTolerance()) is None
    asked = memory_verdict(bare, None, MemoryTolerance(), explicit=True)
    assert asked is not None and asked.status == "not-compared" and math.isnan(asked.current)


def test_baseline_entries_without_memory_still_read_and_bad_memory_is_refused():
    old = make_entry().to_dict()
    assert "memory" not in old  # entries without memory are written as before
    assert BaselineEntry.from_dict(old).memory is None
    record = _record(_profile(10_000, {"a": -200, "b": 300}))
    entry = BaselineEntry.from_dict({**old, "memory": record.to_dict()})
    assert entry.memory == record
    assert BaselineEntry.from_dict(json.loads(json.dumps(entry.to_dict()))).memory == record
    bad = {**record.to_dict(), "peak": -1}
    with pytest.raises(SchemaError, match="peak"):
        BaselineEntry.from_dict({**old, "memory": bad})
    with pytest.raises(SchemaError, match="unknown source"):
        BaselineEntry.from_dict({**old, "memory": {**record.to_dict(), "source": "guess"}})


def test_assert_memory_names_the_figure_and_the_largest_allocations():
    prof = _profile(5_000, {"big": 3_000, "small": 10})
    assert_memory(prof, below=5_001)
    with pytest.raises(
        AssertionError, match=r"memory peak of m .* is 5 kB \(5000 B\), not below .*allocations: big"
    ):
        assert_memory(prof, below=5_000)
    bare = ModelProfile.from_dict({**prof.to_dict(), "memory": None})
    with pytest.raises(AssertionError, match="no memory figures"):
        assert_memory(bare, below=1)


def test_byte_counts_parse_with_binary_multiples():
    assert parse_byte_count("65536") == 65536
    assert parse_byte_count("64k") == 64 * 1024
    assert parse_byte_count("1.5M") == 3 * 512 * 1024
    assert parse_byte_count("2GiB") == 2 << 30
    with pytest.raises(Exception, match="expected bytes"):
        parse_byte_count("lots")


def test_openvino_memory_metric_reads_the_helpers_peak_rss(project):
    """OpenVINO's profile has no allocator counters: asked for, the memory comes from peak RSS."""
    pytest.importorskip("openvino")
    project.makepyfile(
        test_perf=(
            "import pytest\n"
            "@pytest.mark.roofline(metrics=['latency', 'memory'])\n"
            f"def test_mm(model_profile):\n    model_profile('mm.onnx', batch_size={BATCH})\n"
        )
    )
    first = project.runpytest("--roofline-backend", "openvino", "--roofline-report", "r.json")
    first.assert_outcomes(passed=1)
    verdict = _memory_verdict(project.path / "r.json")
    assert verdict["status"] == "new", verdict
    memory = json.loads((project.path / "r.json").read_text())["results"][0]["profile"]["memory"]
    assert memory["source"] == "peak RSS" and not memory["exact"] and memory["peak"] > 0


def test_a_baseline_recorded_before_memory_is_no_missing_baseline(project):
    project.runpytest(*ORT).assert_outcomes(passed=1)
    path = project.path / ".roofline" / "test_perf.json"
    stored = json.loads(path.read_text())
    for entry in stored["entries"].values():
        del entry["memory"]  # as written before memory was measured
    path.write_text(json.dumps(stored))
    # the stored latency 20x slower: the strict run's latency verdict is decided whatever this
    # machine's load (a live 5 us model on a busy runner read noise +-39 %, inconclusive)
    scale_stored_latency(path, 20)
    strict = project.runpytest(
        *ORT,
        "--roofline-retime",
        "--roofline-tolerance",
        "90",
        "--roofline-strict",
        "--roofline-report",
        "r.json",
    )
    strict.assert_outcomes(passed=1)
    assert "IMPROVED" in strict.stdout.str()  # latency decided; memory's not-compared fails nothing
    verdict = _memory_verdict(project.path / "r.json")
    assert verdict["status"] == "not-compared" and "--roofline-update adds them" in verdict["message"]


def test_baseline_diff_shows_and_rejudges_memory_beside_latency(project, monkeypatch, capsys):
    """Issue 34 item 4: `roofline baseline diff` shows the run's memory verdict and re-judges the
    recorded peak against the stored one, at the run's memory tolerance or the one given."""
    from pytest_roofline.cli import main

    monkeypatch.setenv("ROOFLINE_MODEL_STORE_MAX_BYTES", "0")  # stored figures, not a paired run
    project.runpytest(*ORT).assert_outcomes(passed=1)
    keep_alive(project.path / "mm.onnx", "m1")
    project.runpytest(*ORT, "--roofline-tolerance", "90", "--roofline-report", "r.json").assert_outcomes(
        failed=1
    )
    monkeypatch.chdir(project.path)

    assert main(["baseline", "diff", "r.json"]) == 1
    recorded, rejudged = capsys.readouterr().out.split("re-judged against the baselines in", 1)
    rows = [line.split() for line in recorded.splitlines() + rejudged.splitlines()]
    memory_rows = [row for row in rows if len(row) > 5 and row[4] == "memory"]  # the model is "mm.onnx b4"
    assert [row[0] for row in memory_rows] == ["regression", "regression"], memory_rows
    assert all(row[5] == "x1.020" and row[-1] == "1%" for row in memory_rows), memory_rows
    assert "memory: requested peak grew" in rejudged and "kB at " in rejudged

    assert main(["baseline", "diff", "r.json", "--memory-tolerance-bytes", "2k"]) in (0, 1)  # latency's own
    rejudged = capsys.readouterr().out.split("re-judged against the baselines in", 1)[1]
    rows = [line.split() for line in rejudged.splitlines()]
    assert [row[0] for row in rows if len(row) > 5 and row[4] == "memory"] == ["pass"]


def test_the_requested_peak_is_judged_where_both_sides_have_one():
    """The arena's in-use peak can fall while the bytes the tensors ask for grow (a BFC chunk up to
    twice a request's size): the verdict follows the requested bytes when both records have them."""
    from pytest_roofline.gate.memory import compare_memory

    def record(peak: int, requested: int) -> MemoryRecord:
        memory = MemoryProfile(
            peak=peak,
            arena_held=peak,
            weights=4_194_304,
            peak_activations=peak - 4_194_304,
            source="onnxruntime profiler",
            requested_peak=requested,
        )
        return MemoryRecord(memory, {})

    before, kept = record(9_437_188, 6_684_676), record(7_733_252, 7_208_964)  # +524 kB requested
    verdict = compare_memory(kept, before, MemoryTolerance())
    assert verdict.status == "regression" and verdict.baseline == 6_684_676 and verdict.current == 7_208_964
    assert "requested peak grew" in verdict.message
    unknown = record(9_437_188, 0)  # a baseline written without the requested peak: the peaks compare
    assert compare_memory(kept, unknown, MemoryTolerance()).status == "improved"
