"""The content-addressed model store behind auto-paired mode: hashes over the model and its external
data, atomic deduplicated entries, LRU eviction, hash checks on read, concurrent writers, and a
cache dir that cannot be written costing only the copy."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pytest_roofline.errors import ModelError, OptionError
from pytest_roofline.gate.model_store import (
    DEFAULT_MAX_BYTES,
    MANIFEST,
    MAX_BYTES_ENV,
    ModelStore,
    content_hash,
    default_model_store,
)
from pytest_roofline.model import model_hash
from pytest_roofline.model.gitref import LFS_POINTER
from tests._peak_rss import peak_rss_of


def linear(scale: float, features: int = 64) -> onnx.ModelProto:
    """y = x @ W + b, W and b seeded and scaled by ``scale``."""
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((features, features)) * scale).astype(np.float32)
    bias = (rng.standard_normal(features) * scale).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
            helper.make_node("Add", ["h", "b"], ["y"], name="add"),
        ],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, features])],
        [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def save(model: onnx.ModelProto, path: Path, location: str | None = None) -> Path:
    """Save ``model`` at ``path``; with ``location``, every tensor goes to that external file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if location is None:
        onnx.save_model(model, path)
    else:
        onnx.save_model(model, path, save_as_external_data=True, location=location, size_threshold=0)
    return path


def run(path: Path) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": np.ones((1, 64), np.float32)})[0]


def leftovers(root: Path) -> list[str]:
    """What a finished writer must not leave: temp and trash folders, the lock file."""
    return sorted(p.name for p in root.iterdir() if p.name.startswith((".tmp-", ".trash-", ".lock")))


# --- content_hash -------------------------------------------------------------------------------


def test_a_model_without_external_data_hashes_like_its_file(tmp_path: Path) -> None:
    path = save(linear(1.0), tmp_path / "m.onnx")
    assert content_hash(path) == hashlib.sha256(path.read_bytes()).hexdigest() == model_hash(path)


def test_the_hash_covers_external_data_in_sorted_location_order(tmp_path: Path) -> None:
    model = linear(1.0)
    onnx.external_data_helper.convert_model_to_external_data(
        model, all_tensors_to_one_file=False, size_threshold=0
    )
    for tensor in model.graph.initializer:  # two files, one in a subfolder
        onnx.external_data_helper.set_external_data(
            tensor, location={"W": "z/w.bin", "b": "a.bin"}[tensor.name]
        )
    path = tmp_path / "m.onnx"
    (tmp_path / "z").mkdir()
    onnx.save_model(model, path)  # writes the raw data to each tensor's location
    expected = hashlib.sha256(path.read_bytes())
    for location in ("a.bin", "z/w.bin"):
        expected.update(b"\0" + location.encode() + b"\0" + (tmp_path / location).read_bytes())
    assert content_hash(path) == expected.hexdigest()

    before = content_hash(path)
    data = bytearray((tmp_path / "z/w.bin").read_bytes())
    data[-1] ^= 1  # the weights changed, the model file did not
    (tmp_path / "z/w.bin").write_bytes(bytes(data))
    assert model_hash(path) == model_hash(path) and content_hash(path) != before


def test_hashing_streams_external_data_instead_of_loading_it(tmp_path: Path) -> None:
    big = 400 * 2**20
    graph = helper.make_graph(
        [helper.make_node("Identity", ["W"], ["y"])],
        "big",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [big // 4])],
        [],
    )
    tensor = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[big // 4])
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "big.data"), ("offset", "0"), ("length", str(big))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    graph.initializer.append(tensor)
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
        tmp_path / "big.onnx",
    )
    with open(tmp_path / "big.data", "wb") as handle:
        handle.truncate(big)  # sparse: reads as zeros, occupies nothing
    script = "from pytest_roofline.gate.model_store import content_hash; print(content_hash('big.onnx'))"
    status, out, err, rss = peak_rss_of(script, [], tmp_path)
    assert status == 0, err
    assert len(out.strip()) == 64
    assert rss < 300 * 2**20, f"peak RSS {rss / 2**20:.0f} MiB while hashing 400 MiB of weights"


def written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda d: d / "absent.onnx", "absent.onnx: no such file"),
        (lambda d: d, "cannot read it (Is a directory)"),
        (lambda d: written(d / "empty.onnx", b""), "the file is empty"),
        (
            lambda d: written(d / "lfs.onnx", LFS_POINTER + b"\noid sha256:00\nsize 12\n"),
            "a Git LFS pointer, not the file; fetch the LFS objects",
        ),
    ],
    ids=["missing", "directory", "empty", "lfs-pointer"],
)
def test_an_unreadable_model_is_a_one_line_error(tmp_path: Path, make, expected: str) -> None:
    path = make(tmp_path)
    for call in (content_hash, ModelStore(tmp_path / "store").put):
        with pytest.raises(ModelError) as info:
            call(path)
        assert expected in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "store").exists() or not leftovers(tmp_path / "store")


def test_missing_or_lfs_pointer_external_data_is_a_one_line_error(tmp_path: Path) -> None:
    path = save(linear(1.0), tmp_path / "m.onnx", location="m.data")
    (tmp_path / "m.data").write_bytes(LFS_POINTER + b"\noid sha256:11\nsize 99\n")
    with pytest.raises(ModelError, match=r"m.data \(external data of .*m.onnx\): a Git LFS pointer"):
        content_hash(path)
    (tmp_path / "m.data").unlink()
    with pytest.raises(ModelError, match=r"m.data \(external data of .*m.onnx\): no such file"):
        content_hash(path)


def test_a_location_outside_the_models_folder_is_refused(tmp_path: Path) -> None:
    path = save(linear(1.0), tmp_path / "m.onnx", location="m.data")
    model = onnx.load(str(path), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../m.data"
    onnx.save_model(model, path)
    with pytest.raises(ModelError, match="is not a relative path inside the model's folder"):
        content_hash(path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_a_model_without_read_permission_is_a_one_line_error(tmp_path: Path) -> None:
    path = save(linear(1.0), tmp_path / "m.onnx")
    path.chmod(0)
    with pytest.raises(ModelError, match="cannot read it \\(Permission denied\\)"):
        content_hash(path)


# --- put / get ----------------------------------------------------------------------------------


def test_put_keeps_the_model_and_its_data_runnable_under_its_hash(tmp_path: Path) -> None:
    path = save(linear(0.5), tmp_path / "src" / "net.onnx", location="net.onnx.data")
    store = ModelStore(tmp_path / "store")
    digest = store.put(path)
    assert digest == content_hash(path) and digest in store
    stored = store.get(digest)
    assert stored == tmp_path / "store" / digest / "net.onnx"
    assert sorted(p.name for p in stored.parent.iterdir()) == sorted([MANIFEST, "net.onnx", "net.onnx.data"])
    np.testing.assert_array_equal(run(stored), run(path))  # onnxruntime reads the stored weights
    assert leftovers(tmp_path / "store") == [] and store.notes == []


def test_the_same_content_is_stored_once_and_only_touched(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "store")
    first = save(linear(1.0), tmp_path / "a" / "model.onnx")
    digest = store.put(first)
    stored = tmp_path / "store" / digest / "model.onnx"
    inode = stored.stat().st_ino
    manifest = tmp_path / "store" / digest / MANIFEST
    os.utime(manifest, (1_000_000, 1_000_000))
    copy = tmp_path / "b" / "copy.onnx"
    copy.parent.mkdir()
    copy.write_bytes(first.read_bytes())
    assert store.put(copy) == digest
    assert stored.stat().st_ino == inode  # not copied again
    assert manifest.stat().st_mtime > 1_000_000  # but most recently used
    assert [p.name for p in (tmp_path / "store").iterdir()] == [digest]


def test_least_recently_used_entries_are_evicted_with_a_note(tmp_path: Path) -> None:
    paths = [save(linear(scale), tmp_path / f"m{scale}.onnx") for scale in (1.0, 2.0, 3.0)]
    size = paths[0].stat().st_size
    notes: list[str] = []
    store = ModelStore(tmp_path / "store", max_bytes=2 * size + size // 2, note=notes.append)
    a, b = store.put(paths[0]), store.put(paths[1])
    assert store.get(a) is not None  # a is now more recently used than b
    c = store.put(paths[2])
    assert a in store and c in store and b not in store
    assert len(notes) == 1 and notes[0].startswith(f"model store: evicted {b[:12]} (")
    assert MAX_BYTES_ENV in notes[0] and "\n" not in notes[0]


def test_a_held_store_evicts_at_release_only_what_its_run_did_not_use(tmp_path: Path) -> None:
    """A session's store: the previous run's models stay while this run's tests still pair against
    them (an eviction at each put dropped the next test's model in a suite filling half the bound);
    at release the models this run neither put nor read go, least recently used first."""
    paths = [save(linear(scale), tmp_path / f"m{scale}.onnx") for scale in (1.0, 2.0, 3.0, 4.0, 5.0)]
    size = paths[0].stat().st_size
    bound = 3 * size + size // 2
    earlier = ModelStore(tmp_path / "store", max_bytes=bound)
    old = [earlier.put(path) for path in paths[:3]]  # the previous run: three models
    notes: list[str] = []
    store = ModelStore(tmp_path / "store", max_bytes=bound, note=notes.append, hold=True)
    new = store.put(paths[3])  # this run's first test: its new model ...
    assert store.get(old[0]) is not None  # ... timed beside the previous run's
    store.put(paths[4])
    assert all(digest in store for digest in old), "a held store evicted a model the run still needs"
    assert notes == []
    store.release()
    assert old[0] in store and new in store  # read and put by this run
    assert old[1] not in store and old[2] not in store  # neither: the least recently used go
    assert len(notes) == 1 and notes[0].startswith("model store: evicted 2 models (")
    assert "did not use" in notes[0] and MAX_BYTES_ENV in notes[0]


def test_a_held_store_keeps_what_its_run_used_even_over_the_bound_with_a_note(tmp_path: Path) -> None:
    paths = [save(linear(scale), tmp_path / f"m{scale}.onnx") for scale in (1.0, 2.0, 3.0)]
    size = paths[0].stat().st_size
    notes: list[str] = []
    store = ModelStore(tmp_path / "store", max_bytes=size + size // 2, note=notes.append, hold=True)
    digests = [store.put(path) for path in paths]
    store.release()
    assert all(digest in store for digest in digests)
    assert len(notes) == 1 and "over its bound" in notes[0] and "the 3 models this run used" in notes[0]
    assert MAX_BYTES_ENV in notes[0] and "\n" not in notes[0]


def test_a_model_larger_than_the_bound_is_not_kept(tmp_path: Path) -> None:
    path = save(linear(1.0), tmp_path / "m.onnx")
    store = ModelStore(tmp_path / "store", max_bytes=100)
    digest = store.put(path)
    assert digest == content_hash(path) and digest not in store
    assert len(store.notes) == 1 and "is larger than its bound" in store.notes[0]


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete-data"])
def test_a_damaged_entry_fails_its_hash_check_and_is_removed(tmp_path: Path, damage: str) -> None:
    path = save(linear(1.0), tmp_path / "m.onnx", location="m.data")
    notes: list[str] = []
    store = ModelStore(tmp_path / "store", note=notes.append)
    digest = store.put(path)
    entry = tmp_path / "store" / digest
    if damage == "truncate":
        model = entry / "m.onnx"
        model.write_bytes(model.read_bytes()[:-7])
    elif damage == "flip":
        data = bytearray((entry / "m.data").read_bytes())
        data[3] ^= 0x40
        (entry / "m.data").write_bytes(bytes(data))
    else:
        (entry / "m.data").unlink()
    assert store.get(digest) is None
    assert notes == [f"model store: {digest[:12]} failed its hash check; ignored"]
    assert not entry.exists() and digest not in store
    assert store.put(path) == digest and store.get(digest) is not None  # stored again whole


def test_get_of_an_unknown_or_malformed_digest_is_none(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "store")
    assert store.get("0" * 64) is None and store.get("../etc") is None and "../etc" not in store
    assert store.notes == []


def test_a_store_that_cannot_be_created_costs_only_the_copy(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    path = save(linear(1.0), tmp_path / "m.onnx")
    notes: list[str] = []
    store = ModelStore(tmp_path / "file" / "models", note=notes.append)
    assert store.put(path) == content_hash(path)
    assert len(notes) == 1 and notes[0].startswith(f"model store: cannot keep {content_hash(path)[:12]} in ")
    assert "Not a directory" in notes[0]
    assert store.get(content_hash(path)) is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_store_costs_only_the_copy(tmp_path: Path) -> None:
    path = save(linear(1.0), tmp_path / "m.onnx")
    (tmp_path / "store").mkdir()
    (tmp_path / "store").chmod(0o555)
    store = ModelStore(tmp_path / "store")
    assert store.put(path) == content_hash(path)
    assert "Permission denied" in store.notes[0]


def _put_with_a_full_disk(root: str, model: str, queue: multiprocessing.Queue) -> None:
    """In a child whose files may not grow past 4 kB (RLIMIT_FSIZE): what a full disk does to writes."""
    import resource

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    store = ModelStore(Path(root))
    queue.put((store.put(Path(model)), store.notes))


def test_a_full_disk_costs_only_the_copy_and_leaves_no_temp_folder(tmp_path: Path) -> None:
    path = save(linear(1.0), tmp_path / "m.onnx")  # ~17 kB
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_put_with_a_full_disk, args=(str(tmp_path / "store"), str(path), queue))
    child.start()
    digest, notes = queue.get(timeout=60)
    child.join(60)
    assert child.exitcode == 0 and digest == content_hash(path)
    assert len(notes) == 1 and "File too large" in notes[0]
    assert leftovers(tmp_path / "store") == [] and digest not in ModelStore(tmp_path / "store")


def test_a_lock_held_too_long_costs_only_the_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_roofline.files import file_lock
    from pytest_roofline.gate import model_store

    monkeypatch.setattr(model_store, "LOCK_TIMEOUT", 0.2)
    path = save(linear(1.0), tmp_path / "m.onnx")
    store = ModelStore(tmp_path / "store")
    (tmp_path / "store").mkdir()
    with file_lock(tmp_path / "store" / ".lock", None):  # another writer holds it
        assert store.put(path) == content_hash(path)
    assert store.notes == [
        f"model store: {tmp_path / 'store'} stayed locked for 0.2 s; {content_hash(path)[:12]} not kept"
    ]
    assert leftovers(tmp_path / "store") == [] and content_hash(path) not in store


# --- concurrency --------------------------------------------------------------------------------


def _put_many(root: str, models: list[str], rounds: int) -> None:
    store = ModelStore(Path(root))
    for _ in range(rounds):
        for model in models:
            store.put(Path(model))


def test_eight_concurrent_writers_lose_nothing_and_leave_no_temp_folders(tmp_path: Path) -> None:
    models = [
        save(linear(float(k)), tmp_path / f"src{k}" / "net.onnx", location="net.data") for k in range(1, 5)
    ]
    models += [save(linear(float(k)), tmp_path / f"inline{k}.onnx") for k in range(5, 7)]
    context = multiprocessing.get_context("fork")
    workers = [
        # every worker puts a model all the others put too, and one or two of its own
        context.Process(
            target=_put_many, args=(str(tmp_path / "store"), [str(models[0]), str(models[1 + w % 5])], 3)
        )
        for w in range(8)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [w.exitcode for w in workers] == [0] * 8
    store = ModelStore(tmp_path / "store")
    for model in models:
        stored = store.get(content_hash(model))
        assert stored is not None, model
        np.testing.assert_array_equal(run(stored), run(model))
    assert store.notes == [] and leftovers(tmp_path / "store") == []
    assert len(list((tmp_path / "store").iterdir())) == len(models)


# --- configuration ------------------------------------------------------------------------------


def test_default_store_lives_in_the_cache_dir_and_reads_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(MAX_BYTES_ENV, raising=False)
    store = default_model_store()
    assert store.root == tmp_path / "cache" / "models" and store.max_bytes == DEFAULT_MAX_BYTES
    monkeypatch.setenv(MAX_BYTES_ENV, "500MiB")
    assert default_model_store().max_bytes == 500 * 2**20
    monkeypatch.setenv(MAX_BYTES_ENV, "off")
    assert default_model_store().max_bytes is None
    monkeypatch.setenv(MAX_BYTES_ENV, "lots")
    with pytest.raises(OptionError, match=f"{MAX_BYTES_ENV}='lots': expected bytes"):
        default_model_store()


def test_an_unbounded_store_evicts_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_BYTES_ENV, "off")
    store = ModelStore(tmp_path / "store")
    digests = [store.put(save(linear(float(k)), tmp_path / f"m{k}.onnx")) for k in range(3)]
    assert all(d in store for d in digests) and store.notes == []


if sys.platform == "win32":  # pragma: no cover
    pytestmark = pytest.mark.skip("fork and RLIMIT_FSIZE are POSIX")
