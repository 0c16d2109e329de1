"""``roofline diff OLD NEW``: JSON contract, table, cached roofline, --profile, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from _diff_models import Variant, conv_net

from pytest_roofline.backends.base import get_backend
from pytest_roofline.cli import main
from pytest_roofline.files import atomic_write_json
from pytest_roofline.roofline import DeviceRoofline
from pytest_roofline.roofline.calibrate import CACHE_ENV, cache_path, cached_roofline, calibration_fingerprint

ROOF = DeviceRoofline(peak_flops={"float32": 5e10}, peak_bandwidth=1e10, fingerprint={})
ONE_THREAD = ["--option", "intra_op_threads=1"]


@pytest.fixture
def models(tmp_path: Path) -> tuple[str, str, str]:
    """Paths: base, base re-exported (other weights), base with one block added (scoped names)."""
    paths = []
    for name, model in (
        ("old", conv_net(scoped=True, seed=1)),
        ("again", conv_net(scoped=True, seed=2)),
        ("new", conv_net(Variant(blocks=(2, 3)), scoped=True)),
    ):
        path = tmp_path / f"{name}.onnx"
        onnx.save(model, str(path))
        paths.append(str(path))
    return paths[0], paths[1], paths[2]


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    return cache


@pytest.fixture
def cached(empty_cache: Path) -> Path:
    """A calibration of onnxruntime at one thread in the cache (so nothing is calibrated)."""
    fingerprint = calibration_fingerprint(get_backend("onnxruntime", {"intra_op_threads": "1"}))
    atomic_write_json(
        cache_path(fingerprint, empty_cache), {"fingerprint": fingerprint, "roofline": ROOF.to_dict()}
    )
    return empty_cache


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["diff", *argv, "--format", "json", "--quiet"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_contract_without_a_cached_roofline_has_no_prediction(
    models: tuple[str, str, str], empty_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, _, new = models
    data = _json(capsys, old, new, *ONE_THREAD)
    for key in ("added", "removed", "changed", "flops_change", "bytes_change", "predicted_time_change"):
        assert key in data
    assert len(data["added"]) == 5 and data["removed"] == [] and data["changed"] == []
    assert data["blocks"][0]["name"] == "stage1.2" and data["flops_change"] > 0
    assert data["predicted_time_change"] is None
    assert "roofline calibrate" in data["prediction"]["reason"]
    assert data["measured"] is None and data["explanation"]["agreement"] == "unpredicted"


def test_cached_roofline_prices_the_change_at_default_efficiencies(
    models: tuple[str, str, str], cached: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cached_roofline(get_backend("onnxruntime", {"intra_op_threads": "1"})) == ROOF
    assert cached_roofline(get_backend("onnxruntime", {"intra_op_threads": "2"})) is None
    old, _, new = models
    data = _json(capsys, old, new, *ONE_THREAD)
    assert 0 < data["predicted_time_change"] < 1
    assert data["prediction"]["efficiency_source"] == "default"
    assert data["assumptions"] and data["assumptions"] == data["prediction"]["assumptions"]


def test_profile_measures_both_models_paired_beside_the_prediction(
    models: tuple[str, str, str], cached: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, _, new = models
    data = _json(capsys, old, new, *ONE_THREAD, "--profile", "--sessions", "2", "--rounds", "3")
    measured = data["measured"]
    assert measured["mode"] == "paired" and measured["sessions"] == 2
    assert measured["ci"][0] <= measured["time_change"] <= measured["ci"][1]
    assert measured["old_p25"] > 0 and measured["new_p25"] > 0
    assert data["prediction"]["efficiency_source"] == "profile"
    assert data["explanation"]["agreement"] in ("consistent", "inconsistent", "unmeasurable")
    assert "measured" in data["explanation"]["text"]
    # memory planned over the graphs onnxruntime ran (NCHWc reorders, Conv+Add fused), as a profile's
    # estimate is: to the byte of the requested peaks measured beside it on these convnets, where
    # the models' graphs (no layouts, Add not in place) overstate both peaks and their change
    memory = data["memory"]
    assert memory["basis"] == "the graphs onnxruntime ran"
    assert (memory["old_peak"], memory["new_peak"]) == (memory["old_measured"], memory["new_measured"])
    static = _json(capsys, old, new, *ONE_THREAD)["memory"]
    assert static["basis"] == "the model's graph" and static["old_measured"] is None
    assert static["old_peak"] > memory["old_peak"] and static["peak_change"] > memory["peak_change"]


def test_table_fits_a_100_column_terminal(
    models: tuple[str, str, str], cached: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, again, new = models
    assert main(["diff", old, new, *ONE_THREAD]) == 0
    out = capsys.readouterr().out
    assert out.startswith("graph changed: +1 block (stage1.2)")
    assert "blocks" in out and "assumptions:" in out and "predicted: +" in out
    assert max(len(line) for line in out.splitlines()) <= 100
    assert main(["diff", old, again, *ONE_THREAD]) == 0
    assert capsys.readouterr().out.startswith("graph unchanged")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["{missing}", "{old}"], "no such file"),
        (["{old}", "{garbage}"], "not a valid ONNX model"),
        (["{old}", "{old}", "--batch", "zero"], "--batch needs a positive integer"),
        (["{old}", "{old}", "--sessions", "0"], "--sessions is too small"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    models: tuple[str, str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not onnx at all")
    paths = {"old": models[0], "missing": str(tmp_path / "missing.onnx"), "garbage": str(garbage)}
    assert main(["diff", *(arg.format(**paths) for arg in argv)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def _exported_names(model: onnx.ModelProto) -> onnx.ModelProto:
    """conv_net's scoped names as a long torch export writes them, no node directly in a block."""
    for node in model.graph.node:
        parts = node.name.strip("/").split("/")
        if node.name.startswith("/stage") and len(parts) == 3:
            parts.insert(2, "act" if "Relu" in parts[2] else "residual_add")
        if node.name.startswith("/stage"):
            module = parts[1].replace("stage", "features.")
            node.name = f"/features/{module}/{'/'.join(parts[2:])}_of_the_inverted_residual_block"
    return model


def test_node_names_are_never_cut_and_a_block_is_named_by_its_first_and_last_node(
    tmp_path: Path, empty_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24 item 8: names were cut in the middle to 30 characters; a block read only "features"."""
    old, new = tmp_path / "old.onnx", tmp_path / "new.onnx"
    onnx.save(_exported_names(conv_net(scoped=True)), str(old))
    onnx.save(_exported_names(conv_net(Variant(blocks=(2, 3)), scoped=True)), str(new))
    assert main(["diff", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    first = "/features/features.1.2/conv1/Conv_of_the_inverted_residual_block"
    last = "/features/features.1.2/act/Relu_1_of_the_inverted_residual_block"
    assert f"features.1.2 ({first}..{last})" in out
    assert "..." not in out.replace(f"{first}..{last}", "")  # nothing ellipsized in the middle
    for name in (first, last, "/features/features.1.2/residual_add/Add_of_the_inverted_residual_block"):
        assert f" {name} " in out
