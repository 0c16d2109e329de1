"""The first commit that made a model slower: paired runs in temporary git worktrees.

Each candidate commit is checked out in a temporary worktree (``git worktree add --detach``; the
user's tree is never touched), its model optionally built by ``--build CMD``, and timed paired
against GOOD's model (:func:`~pytest_roofline.gate.paired.measure_change`: both models
interleaved in fresh sessions, per-round ratios, the gate's paired decision rule) at the backend's
configured threads (``options``; the CLI defaults them to the threads the history recorded for the
test), the threads the history pairs a new model at (:mod:`~pytest_roofline.history.pairing`).
A verdict is ``same`` (a slowdown beyond the threshold is ruled out), ``different`` (slower beyond
it, or faster), or
``unknown`` (too noisy: measured again with twice the sessions until the budget is spent), as
Chromium's Pinpoint says.  A candidate whose model bytes equal GOOD's is ``same`` without timing.

Commit names reach git only as arguments (``--end-of-options``), never through a shell.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_roofline.errors import RooflineError
from pytest_roofline.gate.model_store import content_hash

__all__ = ["BisectResult", "CommitVerdict", "bisect", "build_command", "model_inside"]

BUILD_TIMEOUT = 1800
#: the paired gate's status → bisect's (an improvement is different, but not slower)
STATUS = {"regression": "different", "improved": "different", "pass": "same"}


@dataclass(frozen=True)
class CommitVerdict:
    """One candidate's verdict against GOOD: ``same``, ``different`` or ``unknown``."""

    commit: str
    status: str
    ratio: float
    ci: tuple[float, float] | None = None
    sessions: int = 0
    slower: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The contract's ``verdicts[]`` item (with the CI and sessions added)."""
        return {
            "commit": self.commit,
            "status": self.status,
            "ratio": self.ratio,
            "ci": list(self.ci) if self.ci else None,
            "sessions": self.sessions,
        }


@dataclass(frozen=True)
class BisectResult:
    """The culprit (None when BAD is not slower), each verdict, the explanation and a repro command."""

    culprit: str | None
    verdicts: tuple[CommitVerdict, ...]
    explanation: str
    repro: str
    good: str
    bad: str
    seconds: float = 0.0
    candidates: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def steps(self) -> int:
        """Commits measured or judged."""
        return len(self.verdicts)

    def to_dict(self) -> dict[str, Any]:
        """The contract of ``roofline bisect --format json``."""
        return {
            "culprit": self.culprit,
            "steps": self.steps,
            "verdicts": [v.to_dict() for v in self.verdicts],
            "explanation": self.explanation,
            "repro": self.repro,
            "good": self.good,
            "bad": self.bad,
            "candidates": self.candidates,
            "seconds": self.seconds,
            "notes": list(self.notes),
        }


def _git(args: Sequence[str], cwd: Path, timeout: float = 120) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError:
        raise RooflineError("git is not installed; roofline bisect needs git") from None
    except subprocess.TimeoutExpired:
        raise RooflineError(f"git {args[0]} timed out after {timeout} s") from None
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[0]
        raise RooflineError(f"git {args[0]} failed: {detail}")
    return done.stdout.strip()


def _resolve(root: Path, ref: str) -> str:
    try:
        return _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"], root)
    except RooflineError:
        raise RooflineError(f"git reference {ref!r} does not exist in {root}") from None


def repository(cwd: Path) -> Path:
    """The top folder of the repository at ``cwd``; a dirty tree is refused (one line)."""
    try:
        root = Path(_git(["rev-parse", "--show-toplevel"], cwd))
    except RooflineError:
        raise RooflineError(f"{cwd} is not in a git repository; roofline bisect needs one") from None
    if _git(["status", "--porcelain", "--untracked-files=no"], root):
        raise RooflineError("the working tree has uncommitted changes: commit or stash them before bisecting")
    return root


def candidates(root: Path, good: str, bad: str) -> list[str]:
    """Commits after GOOD up to BAD (oldest first, first parents, on the path from GOOD)."""
    try:
        _git(["merge-base", "--is-ancestor", "--end-of-options", good, bad], root)
    except RooflineError:
        raise RooflineError(f"GOOD {good[:12]} is not an ancestor of BAD {bad[:12]}") from None
    listed = _git(["rev-list", "--reverse", "--first-parent", "--ancestry-path", f"{good}..{bad}"], root)
    return listed.split()


class _Worktrees:
    """Temporary detached worktrees, removed at the end (``git worktree remove --force``)."""

    def __init__(self, root: Path, build: str | None, progress: Callable[[str], None]) -> None:
        self.root = root
        self.build = build_command(build)
        self.progress = progress
        self.folder = Path(tempfile.mkdtemp(prefix="roofline-bisect-"))
        self.made: list[Path] = []

    def checkout(self, sha: str) -> Path:
        tree = self.folder / sha[:12]
        if tree.exists():
            return tree
        _git(["worktree", "add", "--detach", "--quiet", str(tree), sha], self.root, timeout=600)
        self.made.append(tree)
        if self.build:
            self.progress(f"building at {sha[:12]}: {shlex.join(self.build)}")
            env = {**os.environ, "ROOFLINE_BISECT_COMMIT": sha}
            try:
                returncode, stderr = _run_build(self.build, tree, env)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise RooflineError(f"--build at {sha[:12]} could not run ({exc})") from None
            if returncode != 0:
                tail = (stderr.strip().splitlines() or [f"exit status {returncode}"])[-1]
                raise RooflineError(f"--build failed at {sha[:12]}: {tail}")
        return tree

    def close(self) -> None:
        for tree in self.made:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(tree)],
                cwd=self.root,
                capture_output=True,
                check=False,
            )
        shutil.rmtree(self.folder, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=self.root, capture_output=True, check=False)


def build_command(build: str | None) -> list[str] | None:
    """The ``--build`` string as the argument list it runs (never through a shell).

    Raises:
        RooflineError: the string cannot be split (an unterminated quote, a trailing backslash).
    """
    if not build:
        return None
    try:
        argv = shlex.split(build)
    except ValueError as exc:
        raise RooflineError(f"--build {build!r} cannot be split into a command ({exc})") from None
    if not argv:
        raise RooflineError("--build names no command")
    return argv


def _run_build(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run the build in its own process group; on a timeout, SIGTERM or any interruption the whole
    group (the build and every child it started) is killed before the exception goes on."""
    import signal

    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            _, stderr = process.communicate(timeout=BUILD_TIMEOUT)
        except BaseException:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
        return process.returncode, stderr


def model_inside(tree: Path, model: str) -> Path:
    """``tree / model``, refused unless it stays inside ``tree`` (symlinks resolved): bisect times
    the repository's model at each commit, never a file outside it that would read the same at
    every commit.

    Raises:
        RooflineError: an absolute path, or one that leaves the repository (``..``, a symlink).
    """
    if not model or Path(model).is_absolute():
        raise RooflineError(f"--model {model!r}: give a path inside the repository, relative to its top")
    path = tree / model
    if not path.resolve().is_relative_to(tree.resolve()):
        raise RooflineError(f"--model {model!r} leaves the repository; give a path inside it")
    return path


class _Terminated(SystemExit):
    """SIGTERM during a bisect: raised in the main thread so that every ``finally`` (worktrees,
    temp folder, the build's process group) runs before the process exits with 143."""


@contextlib.contextmanager
def _terminate_cleanly() -> Iterator[None]:
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, _frame: object) -> None:
        raise _Terminated(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def bisect(
    good: str,
    bad: str,
    *,
    test: str,
    model: str,
    cwd: Path,
    threshold: float = 0.02,
    build: str | None = None,
    backend: str = "onnxruntime",
    options: dict[str, str] | None = None,
    batch: int | None = None,
    budget: float = 60.0,
    sessions: int = 5,
    progress: Callable[[str], None] = lambda _line: None,
) -> BisectResult:
    """The first commit in GOOD..BAD whose model is slower than GOOD's by more than ``threshold``.

    Raises:
        RooflineError: not a repository, a dirty tree, an unknown ref, GOOD not before BAD, a
            failed build, a model missing at a commit or outside the repository.  One line each.
        SystemExit: 143 on SIGTERM, once the worktrees, the temp folder and the build are gone.
    """
    settings: dict[str, Any] = {"threshold": threshold, "build": build, "backend": backend}
    settings |= {"options": options, "batch": batch, "budget": budget, "sessions": sessions}
    with _terminate_cleanly():
        return _bisect(good, bad, test=test, model=model, cwd=cwd, progress=progress, **settings)


def _bisect(
    good: str,
    bad: str,
    *,
    test: str,
    model: str,
    cwd: Path,
    threshold: float,
    build: str | None,
    backend: str,
    options: dict[str, str] | None,
    batch: int | None,
    budget: float,
    sessions: int,
    progress: Callable[[str], None],
) -> BisectResult:
    from pytest_roofline.backends.base import get_backend
    from pytest_roofline.gate.paired import measure_change
    from pytest_roofline.history.pairing import pairing_engine

    started = time.monotonic()
    build_command(build)  # a bad --build string is one line before anything is checked out
    root = repository(cwd)
    model_inside(root, model)
    good_sha, bad_sha = _resolve(root, good), _resolve(root, bad)
    commits = candidates(root, good_sha, bad_sha)
    if not commits:
        raise RooflineError(f"no commits between GOOD {good_sha[:12]} and BAD {bad_sha[:12]}")
    engine = get_backend(backend, options)
    trees = _Worktrees(root, build, progress)
    verdicts: list[CommitVerdict] = []
    shared: set[str] = set()  # candidates timed at one thread: others shared the CPUs
    try:
        good_model = model_inside(trees.checkout(good_sha), model)
        if not good_model.is_file():
            raise RooflineError(
                f"{model} does not exist at GOOD {good_sha[:12]} (pass --build CMD to make it)"
            )
        good_hash = content_hash(good_model)
        if batch is None:  # 1 for a symbolic batch dim, the model's own when it is static
            from pytest_roofline.model import default_batch, load_model

            batch = default_batch(load_model(str(good_model)), None)

        def judge(sha: str) -> CommitVerdict:
            path = model_inside(trees.checkout(sha), model)
            if not path.is_file():
                raise RooflineError(f"{model} does not exist at {sha[:12]}")
            if content_hash(path) == good_hash:
                verdict = CommitVerdict(sha, "same", 1.0, (1.0, 1.0), 0)
            else:
                count, deadline = sessions, time.monotonic() + budget
                while True:
                    pick, one = pairing_engine(engine)  # one thread while others share the CPUs
                    if one:
                        shared.add(sha)
                    began = time.monotonic()
                    measured = measure_change(
                        good_model, path, pick, batch=batch, sessions=count, tolerance=threshold
                    )
                    took = time.monotonic() - began
                    ratio = measured.ratio if measured.ratio is not None else float("nan")
                    status = STATUS.get(measured.status, "unknown")
                    if status != "unknown" or count >= 8 * sessions or time.monotonic() + 2 * took > deadline:
                        break
                    count *= 2  # more repeats when unknown, within the budget
                slower = ratio > 1.0 + threshold if status == "unknown" else measured.status == "regression"
                verdict = CommitVerdict(sha, status, ratio, measured.ci, count, slower)
            progress(f"{sha[:12]}: {verdict.status} (ratio {verdict.ratio:.3f})")
            verdicts.append(verdict)
            return verdict

        def result(culprit: str | None, explanation: str, before: str | None = None) -> BisectResult:
            timed = sum(1 for v in verdicts if v.sessions)
            notes = (
                (
                    f"{len(shared)} of {timed} timed commits ran at one intra-op thread per session: "
                    "other processes shared the CPUs (as the gate's paired mode)",
                )
                if shared
                else ()
            )
            return _result(
                notes,
                culprit,
                verdicts,
                explanation,
                good_sha,
                bad_sha,
                test,
                model,
                threshold,
                build,
                started,
                len(commits),
                before,
                options,
                backend,
                batch,
            )

        last = judge(bad_sha)
        if not last.slower:
            return result(
                None, f"BAD {bad_sha[:12]} is not slower than GOOD by more than {threshold * 100:g} %"
            )
        low, high = -1, len(commits) - 1  # commits[high] is slower; everything <= low is not
        while high - low > 1:
            middle = (low + high) // 2
            if judge(commits[middle]).slower:
                high = middle
            else:
                low = middle
        culprit = commits[high]
        before = good_sha if high == 0 else commits[high - 1]
        old, new = model_inside(trees.checkout(before), model), model_inside(trees.checkout(culprit), model)
        explanation = _explain(old, new, batch)
        ratio = next(v.ratio for v in verdicts if v.commit == culprit)
        text = f"{culprit[:12]} is {(ratio - 1) * 100:+.1f} % against GOOD; {explanation}"
        return result(culprit, text, before)
    finally:
        trees.close()


def _explain(old: Path, new: Path, batch: int | None) -> str:
    from pytest_roofline.diff import diff_models

    try:
        return diff_models(str(old), str(new), batch=batch).headline()
    except Exception as exc:  # the diff cannot read a model: say so, keep the verdict
        return f"no graph diff ({type(exc).__name__}: {exc})"


def _result(
    notes: tuple[str, ...],
    culprit: str | None,
    verdicts: list[CommitVerdict],
    explanation: str,
    good: str,
    bad: str,
    test: str,
    model: str,
    threshold: float,
    build: str | None,
    started: float,
    count: int,
    before: str | None = None,
    options: dict[str, str] | None = None,
    backend: str = "onnxruntime",
    batch: int | None = None,
) -> BisectResult:
    args = [
        "roofline",
        "bisect",
        before or good,
        culprit or bad,
        "--test",
        test,
        "--model",
        model,
        "--threshold",
        f"{threshold * 100:g}",
    ]
    if build:
        args += ["--build", build]
    args += ["--backend", backend]  # the setup it was timed on: the same backend and batch
    if batch is not None:
        args += ["--batch", str(batch)]
    for key, value in sorted((options or {}).items()):  # the threads it was timed at
        args += ["--option", f"{key}={value}"]
    return BisectResult(
        culprit=culprit,
        verdicts=tuple(verdicts),
        explanation=explanation,
        repro=shlex.join(args),
        good=good,
        bad=bad,
        seconds=time.monotonic() - started,
        candidates=count,
        notes=notes,
    )
