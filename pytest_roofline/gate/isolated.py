"""The gate's interleaved sampling in a helper process whose sessions share one thread pool.

The gate times the model interleaved with its control (probe or reference model), so two sessions
are alive at once.  onnxruntime gives each session its own intra-op thread pool, and two pools on
the same cores fight: measured on this project's 2-core machine at onnxruntime's default threads
(MobileNetV2, 5 sessions x 20 rounds, 6 processes), the probe-normalized figure's process medians
spread 24 % and the same model in two sessions read +-20 % apart; with one pool shared by both
sessions, 0.7 % between processes (``benchmarks/gate_trials.py`` measures the gate built on it).

onnxruntime shares a pool only process-wide (``set_global_thread_pool_sizes``, after which no
session of the process may have a pool of its own), so that cannot happen in the pytest process,
where the user's tests open sessions of their own.  A backend that wants it says so
(:meth:`~pytest_roofline.backends.base.Backend.shared_pool_threads`) and its sampling runs in one
helper process per thread count, started on first use and kept for the run.  The helper does
nothing but open sessions, time them and send the samples back; decisions stay in this process.

The helper is a plain ``python -I -c`` child that imports only this package (never the user's
``__main__``: ``multiprocessing``'s spawn re-ran a script that calls ``pytest.main()`` without an
``if __name__ == "__main__"`` guard, and the second pytest session waited for the measure lock the
first one held).  It talks over its stdin and a copy of its stdout, and dies with its parent: a
closed stdin (the parent ended) or a watchdog that sees another parent pid ends it, so a pytest
killed by SIGKILL or CI cancellation leaves no helper behind.  No resource tracker is started.
"""

from __future__ import annotations

import atexit
import os
import pickle
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any

from pytest_roofline.errors import BackendError

if TYPE_CHECKING:
    from pytest_roofline.backends.base import Backend

__all__ = ["IsolatedSampler", "sampler_for"]

_SAMPLERS: dict[tuple[int, int], IsolatedSampler] = {}
#: Seconds between the helper's checks that its parent is still alive.
WATCHDOG_PERIOD = 0.5
_HEADER = struct.Struct("!Q")
_BOOT = "import sys; sys.path[:0] = {path!r}; from pytest_roofline.gate.isolated import serve; serve()"


def _send(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    """The next message, or raises EOFError when the other side has gone."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    size = _HEADER.unpack(header)[0]
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


def _watch_parent(parent: int) -> None:
    """In the helper: end the process as soon as its parent is gone (reparented: another ppid)."""
    import time

    while os.getppid() == parent:
        time.sleep(WATCHDOG_PERIOD)
    os._exit(1)


def serve() -> None:
    """The helper's main loop: ``argv`` = intra-op threads, inter-op threads, parent pid."""
    import signal

    intra, inter, parent = (int(a) for a in sys.argv[1:4])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it ends us
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="roofline-watchdog").start()
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what native code prints cannot corrupt the replies
    requests = sys.stdin.buffer
    from pytest_roofline.backends.onnxruntime.runner import use_global_pool
    from pytest_roofline.measure.rounds import sample_interleaved

    use_global_pool(intra, inter)  # every onnxruntime session of the helper shares one pool
    _send(replies, ("ready", None))
    while True:
        try:
            openers, kwargs = _receive(requests)
        except EOFError:
            os._exit(0)
        try:
            reply: tuple[str, Any] = ("ok", sample_interleaved(list(openers), **kwargs))
        except BaseException as exc:  # noqa: BLE001 - sent back to be raised in the parent
            reply = ("error", _portable(exc))
        _send(replies, reply)


def _portable(exc: BaseException) -> BaseException:
    """``exc`` when it pickles, else a RuntimeError with its message."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


class IsolatedSampler:
    """A ``sampler`` for :func:`~pytest_roofline.gate.sampling.run_gate` that samples in the helper.

    The openers must be picklable (:class:`~pytest_roofline.measure.SessionOpener`).
    """

    def __init__(self, intra_op_threads: int, inter_op_threads: int = 0) -> None:
        path = [p for p in sys.path if isinstance(p, str)]
        command = [sys.executable, "-I", "-c", _BOOT.format(path=path)]
        command += [str(intra_op_threads), str(inter_op_threads), str(os.getpid())]
        # starts the helper now, beside the profiling run; -I: no cwd, no PYTHON* variables
        self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._lock = threading.Lock()
        self._ready = False
        self.broken = False

    def __call__(
        self,
        openers: Sequence[Callable[[], Any]],
        *,
        sessions: int,
        rounds: int,
        iterations: int,
        warmup: int,
    ) -> list[list[list[float]]]:
        from pytest_roofline.backends.bounded import on_timeout

        on_timeout(self.kill)  # a bounded measurement past its timeout ends the helper
        kwargs = {"sessions": sessions, "rounds": rounds, "iterations": iterations, "warmup": warmup}
        process = self._process
        assert process.stdin is not None and process.stdout is not None
        with self._lock:
            try:
                if not self._ready:
                    _receive(process.stdout)
                    self._ready = True
                _send(process.stdin, (list(openers), kwargs))
                status, value = _receive(process.stdout)
            except (EOFError, OSError):
                self.broken = True
                raise BackendError(
                    "the measuring helper process ended before it finished (stopped or crashed)"
                ) from None
        if status == "error":
            raise value
        return value

    def pids(self) -> list[int]:
        """The helper's process ids (its CPU time is the measurement's own, not other load)."""
        return [self._process.pid] if self._process.poll() is None else []

    def kill(self) -> None:
        """End the helper now (its work is lost; the next measurement starts a new one)."""
        self.broken = True
        self._process.kill()

    def close(self) -> None:
        """Stop the helper: its stdin closes and it exits."""
        self.broken = True
        try:
            if self._process.stdin is not None:
                self._process.stdin.close()
            self._process.wait(2)
        except (OSError, subprocess.TimeoutExpired):
            self._process.kill()
            self._process.wait(2)


def sampler_for(backend: Backend) -> IsolatedSampler | None:
    """The helper sampler ``backend`` asks for (one per pool size, kept for the run), or None."""
    threads = backend.shared_pool_threads()
    if threads is None:
        return None
    inter = int(getattr(backend, "inter_op_threads", 0) or 0)
    key = (threads, inter)
    sampler = _SAMPLERS.get(key)
    if sampler is None or sampler.broken:
        if sampler is not None:
            sampler.close()
        sampler = _SAMPLERS[key] = IsolatedSampler(threads, inter)
    return sampler


@atexit.register
def _close_all() -> None:
    for sampler in _SAMPLERS.values():
        sampler.close()
    _SAMPLERS.clear()
