"""How busy the machine was while we measured: other processes' CPU use, steal, load average.

A measurement is only as good as the quiet it was taken in.  :func:`snapshot` reads Linux's
``/proc/stat`` and ``/proc/loadavg`` and this process's CPU time (all its threads, so a backend's
own thread pool counts as ours); :func:`between` turns two snapshots into a :class:`MachineLoad`:
the share of the CPUs other processes used during the window, the share the hypervisor stole, and
the load average.  Elsewhere (no ``/proc``) the load is unknown and says so.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["LOAD_LIMITS", "LoadSnapshot", "MachineLoad", "between", "snapshot"]

#: Shares above which a window counts as disturbed: other processes' CPU use and steal, as a
#: fraction of all CPUs.  One busy process beside us on 2 cores is 0.5; a quiet VM reads < 0.05.
LOAD_LIMITS = {"other": 0.15, "steal": 0.05}


@dataclass(frozen=True)
class LoadSnapshot:
    """Raw counters at one moment (jiffies are the kernel's USER_HZ ticks)."""

    wall: float
    busy_jiffies: int
    steal_jiffies: int
    own_cpu: float
    loadavg: float
    cores: int
    available: bool


@dataclass(frozen=True)
class MachineLoad:
    """The load of the machine over one measuring window.

    ``other`` and ``steal`` are fractions of all CPUs' time in the window; ``loadavg`` is the
    1-minute load average at its end.  ``available`` is False where the counters cannot be read.
    """

    seconds: float
    other: float
    steal: float
    loadavg: float
    cores: int
    available: bool = True

    @property
    def disturbed(self) -> bool:
        """Whether other processes or the hypervisor took a share of the CPUs worth noting."""
        return self.available and (self.other > LOAD_LIMITS["other"] or self.steal > LOAD_LIMITS["steal"])

    def describe(self) -> str:
        """One phrase for messages: ``other processes used 48 % of the 2 CPUs, steal 0.0 %``."""
        if not self.available:
            return "machine load unknown (no /proc/stat)"
        return (
            f"other processes used {self.other:.0%} of the {self.cores} CPUs, steal {self.steal:.1%}, "
            f"load average {self.loadavg:.2f}"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MachineLoad:
        """Inverse of :meth:`to_dict`."""
        return cls(
            seconds=float(data["seconds"]),
            other=float(data["other"]),
            steal=float(data["steal"]),
            loadavg=float(data["loadavg"]),
            cores=int(data["cores"]),
            available=bool(data.get("available", True)),
        )

    @classmethod
    def combine(cls, loads: list[MachineLoad]) -> MachineLoad:
        """Several windows as one: time-weighted shares, the highest load average."""
        known = [load for load in loads if load.available and load.seconds > 0]
        if not known:
            return cls(0.0, 0.0, 0.0, 0.0, os.cpu_count() or 1, available=False)
        seconds = sum(load.seconds for load in known)
        return cls(
            seconds=seconds,
            other=sum(load.other * load.seconds for load in known) / seconds,
            steal=sum(load.steal * load.seconds for load in known) / seconds,
            loadavg=max(load.loadavg for load in known),
            cores=known[-1].cores,
        )


def snapshot() -> LoadSnapshot:
    """The counters now (cheap: two small reads of ``/proc``)."""
    wall, own = time.monotonic(), time.process_time()
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = [int(v) for v in handle.readline().split()[1:9]]
        with open("/proc/loadavg", encoding="ascii") as handle:
            loadavg = float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return LoadSnapshot(wall, 0, 0, own, 0.0, os.cpu_count() or 1, available=False)
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    # counted over the whole machine: /proc/stat's first line sums every CPU, not just ours
    return LoadSnapshot(
        wall, user + nice + system + irq + softirq, steal, own, loadavg, os.cpu_count() or 1, True
    )


def between(start: LoadSnapshot, end: LoadSnapshot) -> MachineLoad:
    """The load during the window from ``start`` to ``end``.

    Other processes' share = (CPU time the whole machine was busy − this process's CPU time) over
    the window's wall time × the machine's CPUs; clock-tick granularity (10 ms) makes windows under
    about half a second coarse.
    """
    seconds = end.wall - start.wall
    if not (start.available and end.available) or seconds <= 0:
        return MachineLoad(max(seconds, 0.0), 0.0, 0.0, end.loadavg, end.cores, available=False)
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    capacity = seconds * end.cores
    busy = (end.busy_jiffies - start.busy_jiffies) / tick
    own = end.own_cpu - start.own_cpu
    other = max(busy - own, 0.0) / capacity
    steal = max(end.steal_jiffies - start.steal_jiffies, 0) / tick / capacity
    return MachineLoad(seconds, min(other, 1.0), min(steal, 1.0), end.loadavg, end.cores)
