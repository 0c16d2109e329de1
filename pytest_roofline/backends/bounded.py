"""Bounded measurements: a backend call that cannot outlive its timeout, and a clean exit when one
could not be stopped.

A backend runs native code that Python cannot interrupt.  :func:`run_bounded` runs the work in a
daemon thread; past the timeout it asks the backend to stop (each backend session registers how
with :func:`on_timeout`; onnxruntime sets ``RunOptions.terminate``, which ends even a Loop with a
huge trip count between two nodes) and raises :class:`~pytest_roofline.errors.BackendError`.

A thread that still runs after that is abandoned.  Left alone it would crash the process at exit:
``exit()`` destroys the native library's static state under the running call, which then fails
and tries to re-enter the finalized interpreter, and C++ aborts ("terminate called without an
active exception", status 134) after pytest has already reported a plain test failure.  So the
first abandoned thread registers an exit handler that, if the thread is still alive, runs the
other exit handlers, flushes stdout and stderr and ends the process with ``os._exit`` and the
status the run earned (:func:`set_exit_status`; 1 by default: a timed-out test failed), skipping
only the native libraries' teardown.

An interrupt (Ctrl-C, or the SIGINT of a cancelled CI job) reaches the waiting caller, never the
measuring thread: the work is stopped the same way before the ``KeyboardInterrupt`` goes on, its
frames are dropped, and the process exits past native teardown as above (onnxruntime's thread pool
torn down at exit after a signal aborted it too), so pytest ends with its interrupted status (2) and
the CLI with 130, never with the abort.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from pytest_roofline.errors import BackendError

__all__ = ["abandoned_threads", "on_timeout", "run_bounded", "set_exit_status"]

T = TypeVar("T")

#: Seconds a stopped backend gets to return after its cancel callbacks ran.
STOP_GRACE = 3.0
DEFAULT_HINT = "raise --roofline-timeout if the model is that slow"

_local = threading.local()
_abandoned: list[threading.Thread] = []
_exit_status = 1
_interrupted = False  # an interrupt stopped a measurement: exit past native teardown


def on_timeout(cancel: Callable[[], None]) -> None:
    """Register how to stop the calling thread's backend work when its bounded run times out.

    Backends call it when they create a session (onnxruntime: ``RunOptions.terminate = True``).
    Outside :func:`run_bounded` it does nothing.
    """
    callbacks = getattr(_local, "cancels", None)
    if callbacks is not None:
        callbacks.append(cancel)


def set_exit_status(status: int) -> None:
    """The exit status the process ends with if an abandoned measurement is still running at exit
    (the pytest plugin passes the session's status; the CLI 2)."""
    global _exit_status
    _exit_status = int(status)


def abandoned_threads() -> list[threading.Thread]:
    """Measurement threads that did not stop after their timeout and are still running."""
    return [thread for thread in _abandoned if thread.is_alive()]


def run_bounded(work: Callable[[], T], timeout: float, what: str, *, hint: str = DEFAULT_HINT) -> T:
    """``work()`` in a daemon thread; past ``timeout`` seconds stop it and raise :class:`BackendError`.

    Args:
        work: the measurement; its exception is re-raised in the caller's thread.
        timeout: seconds before the work is stopped.
        what: what is measured, for the message (``model.onnx (batch 1)``).
        hint: what the user can do about it, for the message.

    Raises:
        BackendError: the work did not finish in time (stopped, or abandoned when it could not be).
    """
    outcome: dict[str, Any] = {}
    cancels: list[Callable[[], None]] = []

    def target() -> None:
        _local.cancels = cancels
        try:
            outcome["value"] = work()
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc
        finally:
            _local.cancels = None

    thread = threading.Thread(target=target, name=f"roofline-measure {what}", daemon=True)
    thread.start()
    try:
        thread.join(timeout)
    except BaseException:  # Ctrl-C / SIGINT: stop the backend before the interrupt ends the run
        _stop(thread, cancels)
        outcome.clear()  # the stopped work's error and its frames (sessions) are not kept to exit
        _skip_native_teardown()
        raise
    if thread.is_alive():
        ended = "stopped" if _stop(thread, cancels) else "abandoned"
        head = f"backend did not finish within {timeout:g} s measuring {what}"
        raise BackendError(f"{head}; the measurement was {ended} ({hint})")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _stop(thread: threading.Thread, cancels: list[Callable[[], None]]) -> bool:
    """Ask the backend work of ``thread`` to stop; True when it did, else it is abandoned."""
    for cancel in list(cancels):
        with contextlib.suppress(Exception):
            cancel()
    thread.join(STOP_GRACE if cancels else 0.1)
    if thread.is_alive():
        _abandon(thread)
        return False
    return True


def _abandon(thread: threading.Thread) -> None:
    if not _abandoned and not _interrupted:
        atexit.register(_exit_past_native_teardown)
    _abandoned.append(thread)


def _skip_native_teardown() -> None:
    """An interrupt stopped a measurement: its native state (a session torn down under a signal,
    its thread pool) must not be destroyed at exit either; exit as with an abandoned thread."""
    global _interrupted, _exit_status
    if not _interrupted and not _abandoned:
        atexit.register(_exit_past_native_teardown)
    if not _interrupted:
        _exit_status = 2  # pytest's interrupted status, until the session says otherwise
    _interrupted = True


def _exit_past_native_teardown() -> None:
    """At exit, with a measurement still running or one stopped by an interrupt: end the process
    before native teardown."""
    if not abandoned_threads() and not _interrupted:
        return
    atexit.unregister(_exit_past_native_teardown)
    atexit._run_exitfuncs()  # the handlers registered before this one (coverage, logging, ...)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(_exit_status)
