"""Git helpers: a file as it is at a reference, and the commit a run measured."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import RooflineError

__all__ = ["GitInfo", "git_info", "read_at_ref"]

GIT_TIMEOUT = 30


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


def read_at_ref(path: str | os.PathLike[str], ref: str) -> bytes:
    """The content of ``path`` (a file in a git working tree) as it is at ``ref``.

    Raises:
        RooflineError: not in a git repository, unknown reference, or the file is absent there.
    """
    path = Path(path).resolve()
    top = _git(["rev-parse", "--show-toplevel"], path.parent)
    if top.returncode != 0:
        raise RooflineError(f"{path.parent} is not in a git repository; --roofline-compare-ref needs one")
    root = Path(_first_line(top.stdout)).resolve()
    verify = _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], root)
    if verify.returncode != 0:
        raise RooflineError(f"git reference {ref!r} does not exist in {root}")
    relative = path.relative_to(root).as_posix()
    shown = _git(["show", f"{ref}:{relative}"], root)
    if shown.returncode != 0:
        raise RooflineError(f"{relative} does not exist at git reference {ref!r}")
    return shown.stdout
