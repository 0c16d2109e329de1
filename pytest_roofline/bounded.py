"""Backend calls with a time limit: a hung measurement fails its test instead of hanging CI."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from pytest_roofline.errors import BackendError

__all__ = ["run_bounded"]

T = TypeVar("T")


def run_bounded(work: Callable[[], T], timeout: float, what: str) -> T:
    """``work()`` in a daemon thread; past ``timeout`` seconds raise :class:`BackendError`.

    A backend call cannot be interrupted from Python, so a hung one is abandoned: its thread keeps
    running (and may keep a core busy) until the process exits, which it does not delay.
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, name=f"roofline-measure {what}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise BackendError(
            f"backend did not finish within {timeout:g} s measuring {what}; the measurement was "
            "abandoned (raise --roofline-timeout if the model is that slow)"
        )
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
