"""Git helpers: a file as it is at a reference, a model with its external data at a reference,
and the commit a run measured."""

from __future__ import annotations

import atexit
import os
import posixpath
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import RooflineError

if TYPE_CHECKING:
    from collections.abc import Iterator

    import onnx

__all__ = [
    "LFS_POINTER",
    "GitInfo",
    "external_data_locations",
    "git_info",
    "is_safe_location",
    "model_at_ref",
    "read_at_ref",
]

GIT_TIMEOUT = 30
BLOB_TIMEOUT = 600  # seconds to copy one file out of git (external data can be gigabytes)
#: The first line of a Git LFS pointer file: what a checkout without LFS leaves instead of the file.
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"
LFS_HINT = (
    "fetch the LFS objects (git lfs install && git lfs pull; in CI enable LFS in the checkout step, "
    "e.g. actions/checkout with lfs: true, and fetch the reference's objects: git lfs fetch origin REF)"
)


@dataclass(frozen=True)
class GitInfo:
    """The commit, branch and dirtiness of a working tree (None outside a repository)."""

    commit: str | None = None
    branch: str | None = None
    dirty: bool = False


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=GIT_TIMEOUT, check=False)
    except FileNotFoundError:
        raise RooflineError("git is not installed; --roofline-compare-ref needs git") from None
    except subprocess.TimeoutExpired:
        raise RooflineError(f"git {' '.join(args)} timed out after {GIT_TIMEOUT} s") from None


def _first_line(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    return text.splitlines()[0] if text else ""


def git_info(cwd: str | os.PathLike[str]) -> GitInfo:
    """Commit, branch and dirty flag of the repository at ``cwd`` (empty outside one)."""
    cwd = Path(cwd)
    try:
        head = _git(["rev-parse", "HEAD"], cwd)
    except RooflineError:
        return GitInfo()
    if head.returncode != 0:
        return GitInfo()
    branch = _git(["rev-parse", "--abbrev-ref", "HEAD"], cwd)
    status = _git(["status", "--porcelain", "--untracked-files=no"], cwd)
    name = _first_line(branch.stdout) if branch.returncode == 0 else ""
    return GitInfo(
        commit=_first_line(head.stdout),
        branch=name if name and name != "HEAD" else None,
        dirty=bool(status.stdout.strip()),
    )


def _repository(path: Path, ref: str) -> tuple[Path, str]:
    """The repository's top folder and ``path`` relative to it (posix); ``ref`` must exist."""
    top = _git(["rev-parse", "--show-toplevel"], path.parent)
    if top.returncode != 0:
        raise RooflineError(f"{path.parent} is not in a git repository; --roofline-compare-ref needs one")
    root = Path(_first_line(top.stdout)).resolve()
    verify = _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], root)
    if verify.returncode != 0:
        raise RooflineError(f"git reference {ref!r} does not exist in {root}")
    return root, path.relative_to(root).as_posix()


def read_at_ref(path: str | os.PathLike[str], ref: str) -> bytes:
    """The content of ``path`` (a file in a git working tree) as it is at ``ref``.

    Raises:
        RooflineError: not in a git repository, unknown reference, or the file is absent there.
    """
    root, relative = _repository(Path(path).resolve(), ref)
    shown = _git(["show", f"{ref}:{relative}"], root)
    if shown.returncode != 0:
        raise RooflineError(f"{relative} does not exist at git reference {ref!r}")
    return shown.stdout


def model_at_ref(path: str | os.PathLike[str], ref: str) -> Path:
    """The model ``path`` as it is at git ``ref``, with its external-data files at the same ``ref``.

    The model and every file its tensors' ``location`` names (relative to the model's folder) are
    copied out of git into a private temporary folder (``0700``, removed when the process exits),
    keeping their relative layout, so a backend that opens the returned path reads the
    reference's weights, never the working tree's or the current directory's.  Files go through
    git's checkout filters (``git cat-file --filters``), so Git LFS content is used when LFS is
    installed and the objects are fetched.

    A ``location`` must be a relative path inside the model's folder: not absolute, no ``..``, not
    a symbolic link at ``ref`` (the rules onnx and onnxruntime apply to external data).

    Raises:
        RooflineError: not in a repository, unknown reference, a file absent at ``ref``, a Git LFS
            pointer instead of the file (with how to fetch LFS objects), not an ONNX model, or an
            external-data location that leaves the model's folder.  One line each.
    """
    import onnx

    source = Path(path).resolve()
    root, relative = _repository(source, ref)
    folder = Path(tempfile.mkdtemp(prefix="roofline-ref-"))  # 0700
    atexit.register(shutil.rmtree, folder, True)
    model_file = folder / source.name
    _copy_blob(root, ref, relative, model_file, what=relative)
    try:
        model = onnx.load(str(model_file), load_external_data=False)
    except Exception:
        raise RooflineError(f"{source.name} at {ref!r} is not a valid ONNX model") from None
    base = posixpath.dirname(relative)
    for location in sorted(external_data_locations(model)):
        if not is_safe_location(location):
            raise RooflineError(
                f"{relative} at {ref!r}: external data location {location!r} is not a relative path "
                "inside the model's folder; re-export the model with its data next to it"
            )
        data_path = posixpath.join(base, location) if base else location
        _copy_blob(root, ref, data_path, folder / location, what=f"{data_path} (external data of {relative})")
    return model_file


def is_safe_location(location: str) -> bool:
    """Whether an external-data ``location`` stays inside the model's folder: relative (no leading
    ``/`` or ``\\``, no drive letter), no ``..`` component, not empty."""
    parts = location.replace("\\", "/").split("/")
    return bool(location) and parts[0] != "" and not re.match(r"[A-Za-z]:", location) and ".." not in parts


def external_data_locations(model: onnx.ModelProto) -> set[str]:
    """The ``location`` of every tensor stored as external data: initializers, sparse
    initializers and tensor attributes, in the main graph, subgraphs and local functions."""
    import onnx

    locations = set()
    for tensor in _tensors(model):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            entries = {entry.key: entry.value for entry in tensor.external_data}
            locations.add(entries.get("location", ""))
    return locations


def _tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    graphs = [model.graph]
    nodes = [node for function in model.functions for node in function.node]
    while graphs or nodes:
        if graphs:
            graph = graphs.pop()
            yield from graph.initializer
            for sparse in graph.sparse_initializer:
                yield from (sparse.values, sparse.indices)
            nodes.extend(graph.node)
            continue
        for attribute in nodes.pop().attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                graphs.append(attribute.g)
            graphs.extend(attribute.graphs)


def _copy_blob(root: Path, ref: str, relative: str, target: Path, what: str) -> None:
    """Copy the regular file ``relative`` at ``ref`` to ``target`` through git's checkout filters."""
    listed = _git(["ls-tree", "-z", ref, "--", relative], root)
    entry = listed.stdout.split(b"\0", 1)[0].decode("utf-8", "replace")
    if listed.returncode != 0 or not entry:
        raise RooflineError(f"{what} does not exist at git reference {ref!r}")
    mode, kind = entry.split(" ", 2)[:2]
    if kind != "blob" or mode == "120000":
        raise RooflineError(
            f"{what} at {ref!r} is not a regular file (a {'symbolic link' if mode == '120000' else kind})"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(target, "wb") as handle:
            done = subprocess.run(
                ["git", "cat-file", "--filters", f"{ref}:{relative}"],
                cwd=root,
                stdout=handle,
                stderr=subprocess.PIPE,
                timeout=BLOB_TIMEOUT,
                check=False,
            )
    except subprocess.TimeoutExpired:
        raise RooflineError(f"git took more than {BLOB_TIMEOUT} s to copy {what} at {ref!r}") from None
    if done.returncode != 0:
        detail = _first_line(done.stderr) or f"exit status {done.returncode}"
        lfs = f"; if it is stored with Git LFS, {LFS_HINT}" if b"lfs" in done.stderr.lower() else ""
        raise RooflineError(f"git cannot copy {what} at {ref!r}: {detail}{lfs}")
    with open(target, "rb") as handle:
        head = handle.read(len(LFS_POINTER))
    if head == LFS_POINTER:
        raise RooflineError(f"{what} at {ref!r} is a Git LFS pointer, not the file; {LFS_HINT}")
