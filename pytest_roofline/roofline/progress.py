"""Progress of a calibration, for places where 40 probe lines would be too many (pytest).

:func:`~pytest_roofline.roofline.calibrate.calibrate` calls its ``progress`` callback with two
kinds of line: *steps* (``calibrate [3/40] gemm-2048-float32: 412.0 GFLOP/s``, one per probe;
``calibrate [spot check] ...``) and *notes* (what starts, what is done, and anything the user
must know: a corrupt cache replaced, a spot check that sent the roofline back to be measured, a
calibration measured under load).  The CLI prints both.  :func:`terminal_progress` prints the
notes only (steps too when verbose), so the first calibration inside pytest reads::

    roofline: calibrating onnxruntime on AMD EPYC 7B13 (full plan, 27 probes; once per device, then cached)
    roofline: calibrated in 7.1 s: float32 118 GFLOP/s, DRAM 19.2 GB/s
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["STEP_PREFIX", "is_step", "terminal_progress"]

STEP_PREFIX = "calibrate ["


def is_step(message: str) -> bool:
    """Whether ``message`` is a per-probe step (else a note worth showing on its own)."""
    return message.startswith(STEP_PREFIX)


def terminal_progress(
    write_line: Callable[[str], None], verbose: bool = False, prefix: str = "roofline: "
) -> Callable[[str], None]:
    """A ``progress`` callback that writes notes (and, if ``verbose``, steps) through ``write_line``.

    Args:
        write_line: writes one line, e.g. pytest's ``terminalreporter.write_line``.
        verbose: also write each probe step (pytest ``-v``).
        prefix: put before every line.
    """

    def progress(message: str) -> None:
        if verbose or not is_step(message):
            write_line(f"{prefix}{message}")

    return progress
