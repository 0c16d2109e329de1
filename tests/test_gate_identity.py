"""The identity of what runs: content and graph hashes, inputs, env vars, and the entry's block."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import onnx
import pytest
from _baselines import make_entry
from _plugin_helpers import matmul_chain

from pytest_roofline.errors import ModelError
from pytest_roofline.gate.baseline import BaselineEntry
from pytest_roofline.gate.identity import (
    RunIdentity,
    backend_env,
    content_hash,
    graph_hash,
    inputs_identity,
)
from pytest_roofline.gate.verdict import compare


def _external(source, target):
    """``source`` saved again with its weights in an external-data file beside ``target``."""
    model = onnx.load(str(source))
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target), save_as_external_data=True, location="weights.bin", size_threshold=0)
    return target


def test_content_hash_covers_the_model_then_its_external_data(tmp_path):
    inline = matmul_chain(tmp_path / "a" / "m.onnx", 2, size=16)
    assert content_hash(inline) == hashlib.sha256(inline.read_bytes()).hexdigest()
    external = _external(inline, tmp_path / "b" / "m.onnx")
    data = tmp_path / "b" / "weights.bin"
    expected = hashlib.sha256(external.read_bytes() + b"\0weights.bin\0" + data.read_bytes()).hexdigest()
    assert content_hash(external) == expected
    data.write_bytes(data.read_bytes()[:-4] + b"\0\0\0\1")  # other weights, same model file
    assert content_hash(external) != expected
    data.unlink()
    with pytest.raises(ModelError, match="weights.bin"):
        content_hash(external)


def test_graph_hash_ignores_how_a_model_was_saved_but_not_its_weights(tmp_path):
    path = matmul_chain(tmp_path / "m.onnx", 2, size=16)
    model = onnx.load(str(path))
    model.producer_name, model.doc_string = "another exporter", "re-saved"
    model.graph.node[0].name = "renamed"
    onnx.save(model, str(tmp_path / "resaved.onnx"))
    external = _external(path, tmp_path / "ext" / "m.onnx")
    assert content_hash(tmp_path / "resaved.onnx") != content_hash(path)
    assert graph_hash(tmp_path / "resaved.onnx") == graph_hash(path) == graph_hash(external)
    other = matmul_chain(tmp_path / "o.onnx", 2, size=16)
    weights = onnx.load(str(other))
    weights.graph.initializer[0].raw_data = np.ones((16, 16), np.float32).tobytes()
    onnx.save(weights, str(other))
    assert graph_hash(other) != graph_hash(path)


def test_inputs_are_named_by_shape_and_dtype_and_given_values_by_hash():
    arrays = {"x": np.zeros((2, 8), np.float32)}
    assert inputs_identity(arrays, given=False) == ({"x": "float32[2, 8]"}, "seed=0")
    _, given = inputs_identity(arrays, given=True)
    _, other = inputs_identity({"x": np.ones((2, 8), np.float32)}, given=True)
    assert given.startswith("sha256:") and given != other


def test_backend_env_keeps_only_what_backends_read():
    env = {
        "OMP_NUM_THREADS": "2",
        "KMP_AFFINITY": "x",
        "ORT_X": "1",
        "OV_CACHE": "c",
        "HOME": "/h",
        "PATH": "p",
    }
    assert backend_env(env) == {"KMP_AFFINITY": "x", "OMP_NUM_THREADS": "2", "ORT_X": "1", "OV_CACHE": "c"}


def test_changes_name_each_kind():
    base = RunIdentity(
        "a" * 64, "g", {"x": "float32[1, 8]"}, "seed=0", "onnxruntime", "1.32.0", {"t": "1"}, {}, "cpu"
    )
    now = RunIdentity(
        "b" * 64,
        "g",
        {"x": "float32[1, 8]"},
        "seed=0",
        "onnxruntime",
        "1.32.1",
        {"t": "2"},
        {"OMP_X": "1"},
        "gpu",
    )
    assert [(c.kind, c.text) for c in base.changes(now)] == [
        ("model", f"model {'a' * 12} → {'b' * 12}"),
        ("backend", "backend onnxruntime 1.32.0 → onnxruntime 1.32.1"),
        ("options", "t 1 → 2"),
        ("env", "OMP_X (unset) → 1"),
        ("device", "device class cpu → gpu"),
    ]
    assert base.changes(base) == []


def test_an_entry_keeps_its_identity_and_older_entries_read_without_one():
    identity = RunIdentity("a" * 64, "g", {"x": "float32[1, 8]"}, "seed=0", "onnxruntime", "1.32.0")
    entry = make_entry()
    old = json.loads(json.dumps(entry.to_dict()))
    del old["identity"]  # an entry written before identities
    assert BaselineEntry.from_dict(old).identity is None
    import dataclasses

    with_id = dataclasses.replace(entry, identity=identity)
    assert BaselineEntry.from_dict(json.loads(json.dumps(with_id.to_dict()))) == with_id


@pytest.mark.parametrize("tolerance", [0.02, 0.05, 0.1])
def test_an_improvement_is_claimed_only_where_the_mirrored_slowdown_is_a_regression(tolerance):
    """No false ``improved``: figures faster by a factor are ``improved`` only when the same
    figures slower by that factor would be a ``regression`` (the rules are symmetric or stricter)."""
    rng = np.random.default_rng(1)
    baseline = list(1.0 + 0.01 * rng.standard_normal(7))
    middle = float(np.median(baseline))
    for shift in np.linspace(0.0, 0.2, 41):
        for spread in (0.001, 0.01, 0.03, 0.08):
            factors = (1.0 - shift) * (1.0 + spread * rng.standard_normal(7))
            faster = list(middle * factors)
            slower = list(middle / factors)  # the same run mirrored: every ratio inverted
            if compare(faster, baseline, tolerance=tolerance).status == "improved":
                assert compare(slower, baseline, tolerance=tolerance).status == "regression", (shift, spread)
