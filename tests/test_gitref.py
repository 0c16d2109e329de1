"""Paired mode's reference model comes out of git with its external data at the same reference, and a
Git LFS pointer is named as such (issue 14 item 8), in real git repositories.

Before, the reference was loaded from bytes: its external-data weights were looked up in the
current directory (or taken from the working tree), and an LFS pointer gave "not a valid ONNX
model" with no hint.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pytest_roofline.backends.base import get_backend
from pytest_roofline.errors import ModelError, RooflineError
from pytest_roofline.model import ModelSpec, load_model
from pytest_roofline.model.gitref import external_data_locations, model_at_ref

POINTER = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"ab" * 32 + b"\nsize 4096\n"


def git(cwd: Path, *args: str) -> bytes:
    done = subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True, capture_output=True
    )
    return done.stdout


def weighted_model(scale: float) -> onnx.ModelProto:
    """y = x @ W + b with W, b seeded and multiplied by ``scale`` (stored as external data)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((64, 32)) * scale).astype(np.float32), "W")
    b = numpy_helper.from_array((rng.standard_normal(32) * scale).astype(np.float32), "B")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
            helper.make_node("Add", ["h", "B"], ["y"]),
        ],
        "weighted",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def save_external(model: onnx.ModelProto, path: Path, location: str) -> None:
    (path.parent / location).parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, path, save_as_external_data=True, location=location, size_threshold=0)


def outputs(path: Path) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": np.ones((1, 64), np.float32)})[0]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    return root


def commit(root: Path, message: str = "models") -> None:
    git(root, "add", "-A")
    git(root, "commit", "-qm", message)


@pytest.mark.parametrize("location", ["weighted.data", "weights/weighted.bin"])
def test_reference_weights_come_from_the_reference(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, location: str
) -> None:
    model = repo / "models" / "weighted.onnx"
    save_external(weighted_model(1.0), model, location)
    commit(repo)
    expected = outputs(model)
    save_external(weighted_model(2.0), model, location)  # the working tree's weights changed
    decoy = tmp_path / "cwd"
    save_external(weighted_model(3.0), decoy / "weighted.onnx", location)  # and the cwd has others
    monkeypatch.chdir(decoy)

    at_ref = model_at_ref(model, "HEAD")
    assert at_ref.name == "weighted.onnx" and at_ref.parent != model.parent
    data = git(repo, "show", f"HEAD:models/{location}")
    assert (at_ref.parent / location).read_bytes() == data
    np.testing.assert_array_equal(outputs(at_ref), expected)
    assert not np.array_equal(outputs(model), expected)  # the working tree really differs
    assert oct((at_ref.parent).stat().st_mode & 0o777) == "0o700"


def test_what_session_gets_opens_in_a_backend(repo: Path) -> None:
    model = repo / "weighted.onnx"
    save_external(weighted_model(1.0), model, "weighted.data")
    commit(repo)
    spec = ModelSpec.create(str(model_at_ref(model, "HEAD")), 1, {})  # the call _reference_spec makes
    feeds = {"x": np.ones((1, 64), np.float32)}
    with get_backend("onnxruntime", {"intra_op_threads": "1"}).open(spec, feeds) as session:
        assert len(session.time(3)) == 3


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "sub/../../secret.bin", "C:/x.bin"])
def test_a_location_leaving_the_models_folder_is_refused(repo: Path, location: str) -> None:
    model = weighted_model(1.0)
    for tensor in model.graph.initializer:
        onnx.external_data_helper.set_external_data(tensor, location=location)
        tensor.data_location = TensorProto.EXTERNAL
        tensor.ClearField("raw_data")
    (repo / "m").mkdir()
    onnx.save(model, repo / "m" / "weighted.onnx")
    (repo / "secret.bin").write_bytes(b"\0" * 64 * 32 * 4)
    commit(repo)
    with pytest.raises(RooflineError) as info:
        model_at_ref(repo / "m" / "weighted.onnx", "HEAD")
    message = str(info.value)
    assert f"external data location {location!r} is not a relative path inside the model's folder" in message
    assert "\n" not in message


def test_an_lfs_pointer_model_says_so_with_the_hint(repo: Path) -> None:
    (repo / "model.onnx").write_bytes(POINTER)
    commit(repo)
    with pytest.raises(
        RooflineError, match=r"model.onnx at 'HEAD' is a Git LFS pointer, not the file; .*git lfs pull"
    ):
        model_at_ref(repo / "model.onnx", "HEAD")


def test_an_lfs_pointer_for_the_weights_says_so(repo: Path) -> None:
    model = repo / "weighted.onnx"
    save_external(weighted_model(1.0), model, "weighted.data")
    (repo / "weighted.data").write_bytes(POINTER)
    commit(repo)
    with pytest.raises(RooflineError) as info:
        model_at_ref(model, "HEAD")
    assert str(info.value).startswith(
        "weighted.data (external data of weighted.onnx) at 'HEAD' is a Git LFS pointer, not the file; "
        "fetch the LFS objects (git lfs install && git lfs pull"
    )


def test_weights_missing_or_a_link_at_the_reference(repo: Path) -> None:
    model = repo / "weighted.onnx"
    save_external(weighted_model(1.0), model, "weighted.data")
    git(repo, "add", "weighted.onnx")
    git(repo, "commit", "-qm", "model without its data")
    with pytest.raises(
        RooflineError, match=r"weighted.data \(external data of weighted.onnx\) does not exist at"
    ):
        model_at_ref(model, "HEAD")
    (repo / "weighted.data").rename(repo / "real.data")
    (repo / "weighted.data").symlink_to("real.data")
    commit(repo)
    with pytest.raises(RooflineError, match="is not a regular file .a symbolic link."):
        model_at_ref(model, "HEAD")


def test_a_working_tree_lfs_pointer_is_named(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(POINTER)
    with pytest.raises(
        ModelError, match="model.onnx: a Git LFS pointer, not the model; fetch the LFS objects"
    ):
        load_model(tmp_path / "model.onnx")


def test_the_private_folder_is_removed_at_exit(repo: Path) -> None:
    save_external(weighted_model(1.0), repo / "weighted.onnx", "weighted.data")
    commit(repo)
    script = (
        "import sys; from pytest_roofline.model.gitref import model_at_ref as at; "
        "print(at(sys.argv[1], 'HEAD'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(repo / "weighted.onnx")],
        capture_output=True,
        text=True,
        check=True,
    )
    folder = Path(done.stdout.strip()).parent
    assert folder.name.startswith("roofline-ref-") and not folder.exists()


def test_locations_are_found_in_subgraphs_and_attributes() -> None:
    inner = numpy_helper.from_array(np.ones(4, np.float32), "k")
    onnx.external_data_helper.set_external_data(inner, location="inner.bin")
    inner.data_location = TensorProto.EXTERNAL
    const = numpy_helper.from_array(np.ones(2, np.float32), "c")
    onnx.external_data_helper.set_external_data(const, location="const.bin")
    const.data_location = TensorProto.EXTERNAL
    body = helper.make_graph(
        [helper.make_node("Identity", ["k"], ["o"])],
        "b",
        [],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, [4])],
        [inner],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Constant", [], ["c"], value=const),
            helper.make_node("If", ["cond"], ["y"], then_branch=body, else_branch=body),
        ],
        "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    assert external_data_locations(helper.make_model(graph)) == {"inner.bin", "const.bin"}


def test_dubious_ownership_passes_gits_reason_and_the_fix(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = repo / "weighted.onnx"
    save_external(weighted_model(1.0), model, "weighted.data")
    commit(repo)
    monkeypatch.setenv("GIT_TEST_ASSUME_DIFFERENT_OWNER", "1")  # git's own switch for this refusal
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")  # no safe.directory of this machine's
    with pytest.raises(RooflineError) as caught:
        model_at_ref(model, "HEAD")
    text = str(caught.value)
    assert "detected dubious ownership in repository" in text and "not in a git repository" not in text
    assert f"git config --global --add safe.directory {repo}" in text and "\n" not in text


def test_a_model_in_a_submodule_is_read_at_the_commit_the_superproject_pins(tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    git(sub, "init", "-q")
    versions, commits = [], []
    for scale in (1.0, 2.0, 3.0):  # the submodule's own history: three versions of the model
        save_external(weighted_model(scale), sub / "m.onnx", "m.data")
        commit(sub, f"v{scale}")
        versions.append(outputs(sub / "m.onnx"))
        commits.append(git(sub, "rev-parse", "HEAD").decode().strip())
    top = tmp_path / "top"
    top.mkdir()
    git(top, "init", "-q")
    git(top, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "models")
    git(top, "-C", "models", "checkout", "-q", commits[0])  # the superproject first pins the oldest
    commit(top, "pin v1")
    git(top, "tag", "release")  # a name only the superproject has
    git(top, "-C", "models", "checkout", "-q", commits[2])
    commit(top, "pin v3")
    model = top / "models" / "m.onnx"
    # HEAD~1 of the superproject pins v1; HEAD~1 of the submodule's own history is v2
    np.testing.assert_array_equal(outputs(model_at_ref(model, "HEAD~1")), versions[0])
    np.testing.assert_array_equal(outputs(model_at_ref(model, "release")), versions[0])
    np.testing.assert_array_equal(outputs(model_at_ref(model, "HEAD")), versions[2])


def test_a_submodule_commit_its_clone_lacks_is_refused_in_one_line(tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    git(sub, "init", "-q")
    save_external(weighted_model(1.0), sub / "m.onnx", "m.data")
    commit(sub, "v1")
    top = tmp_path / "top"
    top.mkdir()
    git(top, "init", "-q")
    git(top, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "models")
    commit(top, "pin v1")
    clone = top / "models"
    save_external(weighted_model(2.0), clone / "m.onnx", "m.data")
    commit(clone, "v2, never pushed")
    commit(top, "pin v2")
    git(clone, "reset", "-q", "--hard", "HEAD~1")
    git(clone, "reflog", "expire", "--expire=now", "--all")
    git(clone, "gc", "-q", "--prune=now")  # the pinned commit is gone from the clone
    with pytest.raises(RooflineError) as caught:
        model_at_ref(clone / "m.onnx", "HEAD")
    text = str(caught.value)
    assert "submodule models is pinned to" in text and "a commit its clone lacks" in text and "\n" not in text
