"""``roofline profile`` and the Python API behind it, on real onnxruntime runs of small models."""

from __future__ import annotations

import csv
import io
import json
import re

import numpy as np
import onnx
import pytest

from pytest_roofline import profile_model, profile_sweep, zoo
from pytest_roofline.api import parse_batches
from pytest_roofline.cli import main
from pytest_roofline.errors import OptionError, ShapeError
from pytest_roofline.profile import ModelProfile
from pytest_roofline.roofline import DeviceRoofline

FAST = [
    "--no-roofline",
    "--sessions",
    "2",
    "--rounds",
    "3",
    "--iterations",
    "2",
    "--quiet",
    "--option",
    "intra_op_threads=1",
]
FAST_API = {"sessions": 2, "rounds": 3, "profile_iterations": 2, "options": {"intra_op_threads": "1"}}


@pytest.fixture(scope="module")
def cnn_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "tiny_cnn.onnx"
    onnx.save(zoo.tiny_cnn(), path)
    return str(path)


def run_cli(capsys, *argv):
    code = main(["profile", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_contract(capsys, cnn_path):
    code, out, _ = run_cli(capsys, cnn_path, "--batch", "2", "--format", "json", *FAST)
    assert code == 0
    data = json.loads(out)
    assert set(data["latency"]) >= {"median", "p90", "p99", "mean", "min", "std"}
    assert data["throughput"] == pytest.approx(2 / data["latency"]["median"])
    assert data["attributed_fraction"] >= 0.99
    assert data["roofline"] is None  # --no-roofline
    keys = {
        "name",
        "op_type",
        "onnx_nodes",
        "time",
        "flops",
        "bytes",
        "achieved_flops",
        "achieved_bandwidth",
        "roofline_fraction",
        "bound",
    }
    assert data["layers"] and all(keys <= set(layer) for layer in data["layers"])
    compute = [la for la in data["layers"] if la["kind"] == "compute"]
    assert sum(la["flops"] for la in compute) == pytest.approx(data["total"]["flops"], rel=0.01)
    assert ModelProfile.from_dict(data).batch == 2


def test_table_sorted_with_cumulative_share_and_by_type(capsys, cnn_path):
    code, out, _ = run_cli(capsys, cnn_path, "--batch", "1", "--top", "3", "--sort", "flops", *FAST)
    assert code == 0
    lines = out.splitlines()
    assert lines[1].startswith("latency: median") and "attributed 100.0%" in out
    header = next(i for i, line in enumerate(lines) if line.startswith("layer "))
    assert lines[header - 1] == "top 3 layers by flops"
    rows = lines[header + 1 :]
    assert len(rows) == 3
    flops = [float(re.split(r"\s{2,}", row)[6]) for row in rows]  # columns: 2+ spaces apart
    assert flops == sorted(flops, reverse=True)
    code, out, _ = run_cli(capsys, cnn_path, "--batch", "1", "--by-type", *FAST)
    assert code == 0 and "by op type" in out and "Conv" in out


def test_csv_and_sweep_json(capsys, cnn_path):
    code, out, _ = run_cli(capsys, cnn_path, "--batch", "1,2", "--format", "csv", *FAST)
    assert code == 0
    header = out.splitlines()[0]
    assert header.startswith("test,model,batch,backend,precision,layer,op_type,onnx_nodes,kind,time_s")
    assert {row["batch"] for row in csv.DictReader(io.StringIO(out))} == {"1", "2"}
    code, out, _ = run_cli(capsys, cnn_path, "--batch", "1-2", "--format", "json", *FAST)
    assert [p["batch"] for p in json.loads(out)["profiles"]] == [1, 2]


def test_trace_carries_onnx_node_names(capsys, cnn_path, tmp_path):
    trace = tmp_path / "trace.json"
    code, _, _ = run_cli(capsys, cnn_path, "--batch", "1", "--trace", str(trace), *FAST)
    assert code == 0
    events = json.loads(trace.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "Node"]
    assert kernels and all("onnx_nodes" in e["args"] and "layer" in e["args"] for e in kernels)
    assert any("Conv_0" in e["args"]["onnx_nodes"] for e in kernels)


def test_html_report(capsys, cnn_path, tmp_path):
    pytest.importorskip("jinja2")
    page = tmp_path / "report.html"
    code, _, _ = run_cli(capsys, cnn_path, "--batch", "1", "--html", str(page), *FAST)
    assert code == 0 and "<html" in page.read_text().lower()


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--backend", "nosuch"], "unknown backend 'nosuch'"),
        (["--option", "graph_optimization_level=max"], "graph_optimization_level='max'"),
        (["--option", "bogus=1"], "no option 'bogus'"),
        (["--batch", "0"], "batch sizes must be between"),
        (["--batch", "x"], "must be N, N1,N2,... or LOW-HIGH"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, cnn_path, argv, fragment):
    code, out, err = run_cli(capsys, cnn_path, *FAST, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and fragment in err


def test_mismatched_inputs_file_and_rejected_model(capsys, cnn_path, tmp_path):
    npy = tmp_path / "x.npy"
    np.save(npy, np.zeros((1, 3, 16, 16), np.float32))
    code, _, err = run_cli(capsys, cnn_path, "--inputs", str(npy), *FAST)
    assert code == 2 and "input 'input'" in err and "[1, 3, 16, 16]" in err and err.count("\n") == 1
    broken = tmp_path / "broken.onnx"
    model = zoo.tiny_cnn(batch=1)
    model.graph.node[0].op_type = "NoSuchOp"
    onnx.save(model, broken)
    code, _, err = run_cli(capsys, str(broken), *FAST)
    assert code == 2 and err.count("\n") == 1 and "NoSuchOp" in err


def test_api_with_npz_inputs_roofline_and_sweep(tmp_path):
    model = zoo.tiny_cnn()
    npz = tmp_path / "in.npz"
    np.savez(npz, input=np.ones((3, 3, 32, 32), np.float32))
    roof = DeviceRoofline(peak_flops={"float32": 1e11}, peak_bandwidth=2e10, fingerprint={"test": True})
    prof = profile_model(model, inputs=str(npz), roofline=roof, **FAST_API)
    assert prof.batch == 3 and prof.input_shapes == {"input": (3, 3, 32, 32)}
    data = prof.to_dict()
    assert data["roofline"]["ridge_point"] == pytest.approx(5.0)
    conv = prof.layer("Conv_0")
    assert conv.roofline_fraction is not None and conv.bound in ("compute", "memory")
    sweep = profile_sweep(model, "1,2", **FAST_API)
    assert [p.batch for p in sweep] == [1, 2]
    with pytest.raises(ShapeError, match="no input 'nope'"):
        profile_model(model, inputs={"nope": np.ones(1)}, **FAST_API)


def test_parse_batches():
    assert parse_batches("1-64") == [1, 2, 4, 8, 16, 32, 64]
    assert parse_batches("3-20") == [3, 4, 8, 16, 20]
    assert parse_batches("16,1,4") == [1, 4, 16]
    assert parse_batches(8) == [8]
    for bad in ("", "4-2", "0", "a,b"):
        with pytest.raises(OptionError):
            parse_batches(bad)


def test_batch_on_a_static_model_is_an_error(capsys, tmp_path):
    path = tmp_path / "static.onnx"
    onnx.save(zoo.tiny_cnn(batch=1), path)
    code, _, err = run_cli(capsys, str(path), "--batch", "4", *FAST)
    assert code == 2 and "batch 4 binds nothing" in err and "input[1x3x32x32]" in err


def test_trace_without_backend_events_is_synthesized(tmp_path):
    from pytest_roofline.backends.base import KernelProfile, KernelRecord
    from pytest_roofline.report.trace import write_trace

    kernels = KernelProfile(
        kernels=(
            KernelRecord("conv", "Conv", ("Conv_0", "Relu_1"), (2e-6, 3e-6)),
            KernelRecord("mystery", "X", (), (1e-6, 1e-6)),
        ),
        folded=("Shape_5",),
        iterations=2,
    )
    path = tmp_path / "t.json"
    write_trace(kernels, path)
    document = json.loads(path.read_text())
    nodes = [e for e in document["traceEvents"] if e["cat"] == "Node"]
    assert [e["name"] for e in nodes] == ["conv", "mystery", "conv", "mystery"]
    assert [e["ts"] for e in nodes] == pytest.approx([0, 2, 3, 6])  # laid end to end, µs
    assert [e["dur"] for e in nodes] == pytest.approx([2, 1, 3, 1])
    assert nodes[0]["args"]["onnx_nodes"] == ["Conv_0", "Relu_1"]
    assert nodes[1]["args"]["kind"] == "unattributed"
    assert document["metadata"]["folded_onnx_nodes"] == ["Shape_5"]


def test_npy_for_a_multi_input_model_is_refused(tmp_path):
    from pytest_roofline.model.inputs import load_inputs

    np.save(tmp_path / "a.npy", np.zeros(3))
    with pytest.raises(ShapeError, match="holds one array but the model has 2 inputs"):
        load_inputs(str(tmp_path / "a.npy"), ["input_ids", "attention_mask"])
    with pytest.raises(ShapeError, match="no such inputs file"):
        load_inputs(str(tmp_path / "missing.npz"), ["x"])


def test_api_says_its_progress_and_why_efficiency_is_missing(cnn_path, capsys):
    """``profile_model`` ran minutes on BERT with no word; a sweep without a roofline printed
    ``efficiency=-`` without saying why."""
    steps: list[str] = []
    prof = profile_model(cnn_path, progress=steps.append, **FAST_API)
    assert [s.split(" ")[0] for s in steps] == ["batch", "profiling", "analyzing", "timing"]
    profile_sweep(cnn_path, "1,2", progress=True, **FAST_API)
    err = capsys.readouterr().err
    assert err.count("roofline: profiling tiny_cnn") == 2 and err.count("roofline: timing tiny_cnn") == 2
    assert "efficiency=- (no roofline: roofline='auto' calibrates one)" in repr(prof)
    roof = DeviceRoofline(peak_flops={"float32": 1e11}, peak_bandwidth=2e10, fingerprint={"test": True})
    assert "(no roofline" not in repr(profile_model(cnn_path, roofline=roof, **FAST_API))
