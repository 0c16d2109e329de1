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
frames are dropped, and the process exits past native teardown as above, so pytest ends with its
interrupted status (2) and the CLI with 130, never with the abort.  A thread still inside
onnxruntime when the interpreter finalizes is ended by ``pthread_exit`` as it takes the GIL back;
that unwinds through onnxruntime's ``noexcept`` frames and aborts ("terminate called without an
active exception"), whatever the thread was doing (a calibration probe as much as a measurement).

Three things make the interrupt reach the caller at once, wherever it lands:

* the caller waits in slices of :data:`WAIT_SLICE` seconds and runs pending signal handlers after
  each.  Linux may hand a process-directed SIGINT to any thread; CPython 3.11 runs the handler
  only in the main thread, which a lock wait does not wake, and a thread running Python code (a
  calibration between its probes) clears the flag that would tell the main thread later: the
  interrupt waited until the whole measurement had ended (a calibration ran all its probes);
* the caller waits on an event the work sets, not on ``Thread.join``: an interrupted ``join``
  marks a thread that is still running as stopped in CPython 3.11;
* the thread is started inside the guarded block (an interrupt while it starts stops it too), and
  a stop is sticky: a session the work opens after it (the calibration's next probe) is stopped
  when it registers, and :func:`stopping` tells the work to end.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pytest_roofline.errors import BackendError

__all__ = ["abandoned_threads", "on_timeout", "run_bounded", "set_exit_status", "stopping"]

T = TypeVar("T")

#: Seconds a stopped backend gets to return after its cancel callbacks ran.
STOP_GRACE = 3.0
#: Seconds the caller waits at a time before it runs pending signal handlers.
WAIT_SLICE = 0.1
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
    run = getattr(_local, "run", None)
    if run is not None:
        run.cancels.append(cancel)
        if run.stopped:  # opened after the stop (the next probe of a calibration): stopped at once
            with contextlib.suppress(Exception):
                cancel()


def stopping() -> bool:
    """Whether the calling thread's bounded run was asked to stop (timeout or interrupt): work
    that goes on from step to step (a calibration's probes) ends instead of taking the next one."""
    run = getattr(_local, "run", None)
    return run is not None and run.stopped


class _Run:
    """One bounded run as both threads see it: how to stop its backend work, whether it was asked
    to, and when it ended."""

    def __init__(self) -> None:
        self.cancels: list[Callable[[], None]] = []
        self.stopped = False
        self.done = threading.Event()


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
    run = _Run()

    def target() -> None:
        _local.run = run
        try:
            outcome["value"] = work()
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc
        finally:
            _local.run = None
            run.done.set()

    thread = threading.Thread(target=target, name=f"roofline-measure {what}", daemon=True)
    try:
        thread.start()
        finished = _wait(run.done, timeout)
    except BaseException:  # Ctrl-C / SIGINT: stop the backend before the interrupt ends the run
        _skip_native_teardown()  # first: a second Ctrl-C while it stops must not skip it
        _stop(thread, run)
        outcome.clear()  # the stopped work's error and its frames (sessions) are not kept to exit
        raise
    if not finished:
        ended = "stopped" if _stop(thread, run) else "abandoned"
        head = f"backend did not finish within {timeout:g} s measuring {what}"
        raise BackendError(f"{head}; the measurement was {ended} ({hint})")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _wait(done: threading.Event, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``done``, running pending signal handlers every
    :data:`WAIT_SLICE` (a KeyboardInterrupt is raised here); True when it was set."""
    end = time.monotonic() + timeout
    while not done.wait(max(0.0, min(WAIT_SLICE, end - time.monotonic()))):
        _run_signal_handlers()
        if time.monotonic() >= end:
            return done.is_set()
    return True


def _run_signal_handlers() -> None:
    """Run the handlers of signals that arrived on any thread (CPython checks only when told)."""
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, ())  # changes nothing; runs PyErr_CheckSignals


def _stop(thread: threading.Thread, run: _Run) -> bool:
    """Ask the backend work of ``run`` to stop; True when it did, else its thread is abandoned."""
    run.stopped = True
    for cancel in list(run.cancels):
        with contextlib.suppress(Exception):
            cancel()
    if not run.done.wait(STOP_GRACE if run.cancels else 0.1):
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
