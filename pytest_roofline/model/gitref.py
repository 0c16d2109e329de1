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

from pytest_roofline.errors import RooflineError

if TYPE_CHECKING:
    from collections.abc import Iterator

    import onnx

__all__ = [
    "LFS_POINTER",
    "GitInfo",
    "NotAtRef",
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


class NotAtRef(RooflineError):
    """The model does not exist at the reference (new there, and no rename found): nothing to compare."""


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


SAFE_DIRECTORY_HINT = "git config --global --add safe.directory"


def _refused(result: subprocess.CompletedProcess[bytes], folder: Path) -> str:
    """Why git refused to work in ``folder``: its own reason, with the fix for "dubious ownership"."""
    reason = _first_line(result.stderr)
    text = result.stderr.decode("utf-8", "replace")
    if "dubious ownership" in text:
        match = re.search(r"safe\.directory\s+(\S+)", text)
        directory = match.group(1) if match else str(folder)
        reason = reason.removeprefix("fatal: ")
        fix = f"{SAFE_DIRECTORY_HINT} {directory}"
        return f"git refuses the repository at {folder}: {reason}; if you trust it, run {fix}"
    return ""


def _top(folder: Path) -> Path:
    """The top folder of the git working tree holding ``folder``."""
    top = _git(["rev-parse", "--show-toplevel"], folder)
    if top.returncode != 0:
        refused = _refused(top, folder)
        raise RooflineError(
            refused or f"{folder} is not in a git repository; --roofline-compare-ref needs one"
        )
    return Path(_first_line(top.stdout)).resolve()


def _verify(root: Path, ref: str) -> str:
    """The commit ``ref`` names in the repository at ``root``."""
    verify = _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], root)
    if verify.returncode != 0:
        raise RooflineError(f"git reference {ref!r} does not exist in {root}")
    return _first_line(verify.stdout)


def _repository(path: Path, ref: str) -> tuple[Path, str, str]:
    """The repository's top folder, ``path`` relative to it (posix) and the commit to read it at.

    In a submodule, ``ref`` is the superproject's (the repository the user runs in): it is resolved
    there and the commit the superproject pins for the submodule at ``ref`` is read, down through
    nested submodules.
    """
    root = _top(path.parent)
    chain = [root]
    while True:  # the superprojects, innermost first
        above = _git(["rev-parse", "--show-superproject-working-tree"], chain[-1])
        superproject = _first_line(above.stdout) if above.returncode == 0 else ""
        if not superproject:
            break
        chain.append(Path(superproject).resolve())
    commit = _verify(chain[-1], ref)
    outward = list(reversed(chain))
    for outer, inner in zip(outward, outward[1:], strict=False):
        sub = inner.relative_to(outer).as_posix()
        listed = _git(["ls-tree", "-z", commit, "--", sub], outer)
        entry = listed.stdout.split(b"\0", 1)[0].decode("utf-8", "replace")
        mode_kind_sha = entry.split("\t", 1)[0].split(" ")
        if listed.returncode != 0 or len(mode_kind_sha) != 3 or mode_kind_sha[1] != "commit":
            raise NotAtRef(f"submodule {sub} does not exist at git reference {ref!r} of {outer}")
        pinned = mode_kind_sha[2]
        present = _git(["cat-file", "-e", f"{pinned}^{{commit}}"], inner)
        if present.returncode != 0:
            raise RooflineError(
                f"submodule {sub} is pinned to {pinned[:12]} at git reference {ref!r}, a commit its clone "
                f"lacks; fetch it (git -C {inner} fetch origin {pinned}, or git submodule update --init)"
            )
        commit = pinned
    return root, path.relative_to(root).as_posix(), commit


def _renamed_from(root: Path, commit: str, relative: str) -> str | None:
    """The path ``relative`` had at ``commit`` when git's rename detection finds it renamed since."""
    diff = _git(["diff", "-M", "--name-status", "-z", "--diff-filter=R", commit, "--"], root)
    if diff.returncode != 0:
        return None
    fields = diff.stdout.decode("utf-8", "replace").split("\0")
    for index in range(0, len(fields) - 2, 3):
        if fields[index].startswith("R") and fields[index + 2] == relative:
            return fields[index + 1]
    return None


def _at_ref(root: Path, commit: str, relative: str, ref: str) -> str:
    """The path of ``relative`` at ``commit``: itself, or its name before a rename; else NotAtRef."""
    listed = _git(["ls-tree", "-z", commit, "--", relative], root)
    if listed.returncode == 0 and listed.stdout:
        return relative
    renamed = _renamed_from(root, commit, relative)
    if renamed is not None:
        return renamed
    raise NotAtRef(
        f"{relative} is new at git reference {ref!r} (absent there, no rename found): nothing to compare"
    )


def read_at_ref(path: str | os.PathLike[str], ref: str) -> bytes:
    """The content of ``path`` (a file in a git working tree) as it is at ``ref``.

    Raises:
        RooflineError: not in a git repository, unknown reference, or the file is absent there.
    """
    root, relative, commit = _repository(Path(path).resolve(), ref)
    shown = _git(["show", f"{commit}:{relative}"], root)
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
    root, relative, commit = _repository(source, ref)
    relative = _at_ref(root, commit, relative, ref)
    folder = Path(tempfile.mkdtemp(prefix="roofline-ref-"))  # 0700
    atexit.register(shutil.rmtree, folder, True)
    model_file = folder / source.name
    _copy_blob(root, commit, relative, model_file, what=relative, shown=ref)
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
        what = f"{data_path} (external data of {relative})"
        _copy_blob(root, commit, data_path, folder / location, what=what, shown=ref)
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


def _copy_blob(root: Path, commit: str, relative: str, target: Path, what: str, shown: str) -> None:
    """Copy the regular file ``relative`` at ``commit`` (the user's ref ``shown``) to ``target``
    through git's checkout filters."""
    ref = shown
    listed = _git(["ls-tree", "-z", commit, "--", relative], root)
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
                ["git", "cat-file", "--filters", f"{commit}:{relative}"],
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
