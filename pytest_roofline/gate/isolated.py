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
"""

from __future__ import annotations

import atexit
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any

from pytest_roofline.errors import BackendError

if TYPE_CHECKING:
    from pytest_roofline.backends.base import Backend

__all__ = ["IsolatedSampler", "sampler_for"]

_SAMPLERS: dict[tuple[int, int], IsolatedSampler] = {}


def _init(intra_op_threads: int, inter_op_threads: int) -> None:
    """In the helper: every onnxruntime session shares one global pool of this size."""
    from pytest_roofline.backends.onnxruntime import use_global_pool

    use_global_pool(intra_op_threads, inter_op_threads)


def _ready() -> bool:
    """Imports what sampling needs, so the helper is warm before the first batch."""
    import pytest_roofline.backends.onnxruntime  # noqa: F401
    import pytest_roofline.measure  # noqa: F401

    return True


def _sample(openers: Sequence[Callable[[], Any]], kwargs: dict[str, Any]) -> list[list[list[float]]]:
    from pytest_roofline.measure import sample_interleaved

    return sample_interleaved(list(openers), **kwargs)


class IsolatedSampler:
    """A ``sampler`` for :func:`~pytest_roofline.gate.sampling.run_gate` that samples in the helper.

    The openers must be picklable (:class:`~pytest_roofline.measure.SessionOpener`).
    """

    def __init__(self, intra_op_threads: int, inter_op_threads: int = 0) -> None:
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no pool made yet
        self._pool = ProcessPoolExecutor(
            1, mp_context=context, initializer=_init, initargs=(intra_op_threads, inter_op_threads)
        )
        self._warm = self._pool.submit(_ready)  # starts the helper now, beside the profiling run
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
        from pytest_roofline.bounded import on_timeout

        on_timeout(self.kill)  # a bounded measurement past its timeout ends the helper
        kwargs = {"sessions": sessions, "rounds": rounds, "iterations": iterations, "warmup": warmup}
        try:
            return self._pool.submit(_sample, list(openers), kwargs).result()
        except BrokenProcessPool:
            self.broken = True
            raise BackendError(
                "the measuring helper process ended before it finished (stopped or crashed)"
            ) from None

    def pids(self) -> list[int]:
        """The helper's process ids (its CPU time is the measurement's own, not other load)."""
        return [p.pid for p in getattr(self._pool, "_processes", {}).values() if p.pid is not None]

    def kill(self) -> None:
        """End the helper now (its work is lost; the next measurement starts a new one)."""
        self.broken = True
        for process in list(getattr(self._pool, "_processes", {}).values()):
            process.kill()

    def close(self) -> None:
        """Stop the helper."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def sampler_for(backend: Backend) -> IsolatedSampler | None:
    """The helper sampler ``backend`` asks for (one per pool size, kept for the run), or None."""
    threads = backend.shared_pool_threads()
    if threads is None:
        return None
    inter = int(getattr(backend, "inter_op_threads", 0) or 0)
    key = (threads, inter)
    sampler = _SAMPLERS.get(key)
    if sampler is None or sampler.broken:
        sampler = _SAMPLERS[key] = IsolatedSampler(threads, inter)
    return sampler


@atexit.register
def _close_all() -> None:
    for sampler in _SAMPLERS.values():
        sampler.close()
    _SAMPLERS.clear()
