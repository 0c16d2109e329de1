"""How busy the machine was while we measured: other processes' CPU use, steal, load average.

A measurement is only as good as the quiet it was taken in.  :func:`snapshot` reads Linux's
``/proc/stat`` and ``/proc/loadavg`` and this process's CPU time (all its threads, so a backend's
own thread pool counts as ours); :func:`between` turns two snapshots into a :class:`MachineLoad`:
the share of the CPUs other processes used during the window, the share the hypervisor stole, the
share our control group's CPU quota withheld (``cpu.stat``'s throttled time: a container's or a CI
job's ``cpu.max``, which ``/proc/stat`` cannot show), and the load average.  Elsewhere (no ``/proc``)
the load is unknown and says so.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "LOAD_LIMITS",
    "LOAD_LIMIT_ENV",
    "LoadSnapshot",
    "MachineLoad",
    "between",
    "other_limit",
    "snapshot",
]

#: Shares above which a window counts as disturbed: other processes' CPU use and steal, as a
#: fraction of our CPUs.  One busy process beside us on 2 cores is 0.5; a quiet VM reads < 0.05.
#: ``ROOFLINE_LOAD_LIMIT`` overrides the first (a fraction, or ``off`` where other processes are
#: known not to disturb the measurement: then they neither widen the gate's interval nor count
#: here).  A disturbed window is noted in verdicts, dropped once quiet ones exist and makes a
#: pairing take one thread; the gate's noise model (:mod:`pytest_roofline.gate.noise`) widens
#: intervals by the load.
LOAD_LIMITS = {"other": 0.15, "steal": 0.05}
LOAD_LIMIT_ENV = "ROOFLINE_LOAD_LIMIT"


def other_limit() -> float:
    """The share of our CPUs other processes may use before a measurement counts as disturbed."""
    text = os.environ.get(LOAD_LIMIT_ENV, "").strip().lower()
    if text in ("off", "none", "inf"):
        return math.inf
    try:
        value = float(text)
    except ValueError:
        return LOAD_LIMITS["other"]
    return value if 0 < value <= 1 else LOAD_LIMITS["other"]


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
    throttled: float = 0.0  # seconds our control group was held back by its CPU quota, summed over CPUs


@dataclass(frozen=True)
class MachineLoad:
    """The load of the machine over one measuring window.

    ``other``, ``steal`` and ``throttled`` (time our control group's CPU quota withheld) are
    fractions of all CPUs' time in the window; ``loadavg`` is the 1-minute load average at its end.
    ``available`` is False where the counters cannot be read.
    """

    seconds: float
    other: float
    steal: float
    loadavg: float
    cores: int
    available: bool = True
    throttled: float = 0.0

    @property
    def disturbed(self) -> bool:
        """Whether other processes, the hypervisor or a CPU quota took a share of the CPUs worth noting."""
        return self.available and (
            self.other > other_limit()
            or self.steal > LOAD_LIMITS["steal"]
            or self.throttled > LOAD_LIMITS["steal"]
        )

    def describe(self) -> str:
        """One phrase for messages: ``other processes used 48 % of the 2 CPUs, steal 0.0 %``."""
        if not self.available:
            return "machine load unknown (no /proc/stat)"
        quota = f", CPU quota withheld {self.throttled:.0%}" if self.throttled >= 0.005 else ""
        return (
            f"other processes used {self.other:.0%} of the {self.cores} CPUs, steal {self.steal:.1%}"
            f"{quota}, load average {self.loadavg:.2f}"
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
            throttled=float(data.get("throttled", 0.0)),
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
            throttled=sum(load.throttled * load.seconds for load in known) / seconds,
        )


def _our_cpus() -> set[int] | None:
    """The CPUs this process may run on (None where the platform does not say)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used, 0 when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


#: Where the kernel mounts control groups.
CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_cpu_stats(proc_cgroup: str, root: Path = CGROUP_ROOT) -> list[Path]:
    """The ``cpu.stat`` files of our control group and its ancestors, from ``/proc/self/cgroup``'s
    text: cgroup v1's ``cpu`` controller (mounted as ``cpu`` or ``cpu,cpuacct``) or v2's unified
    tree.  A quota set on any ancestor (a container's, a CI job's) throttles us too."""
    found: list[Path] = []
    for line in proc_cgroup.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        controllers, relative = parts[1].split(","), parts[2].strip("/")
        if parts[0] == "0" and parts[1] == "":
            bases = [root] if (root / "cgroup.controllers").exists() else [root / "unified"]
        elif "cpu" in controllers:
            bases = [root / "cpu", root / "cpu,cpuacct", root / "cpuacct,cpu"]
        else:
            continue
        for base in bases:
            node = base / relative if relative else base
            while True:
                stat = node / "cpu.stat"
                if stat.is_file() and stat not in found:
                    found.append(stat)
                if node == base:
                    break
                node = node.parent
    return found


def throttled_seconds(stats: Iterable[Path]) -> float:
    """Seconds of CPU time the quotas behind ``stats`` withheld (v2 ``throttled_usec``, v1
    ``throttled_time`` in ns), summed; 0 where none can be read."""
    total = 0.0
    for path in stats:
        try:
            text = path.read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError):
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key in ("throttled_usec", "throttled_time") and value.strip().isdigit():
                total += int(value) / (1e6 if key == "throttled_usec" else 1e9)
    return total


def _own_throttled() -> float:
    try:
        with open("/proc/self/cgroup", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return 0.0
    return throttled_seconds(cgroup_cpu_stats(text))


def snapshot(helpers: Iterable[int] = ()) -> LoadSnapshot:
    """The counters now (cheap: a few small reads of ``/proc``).

    Only the CPUs this process may run on are counted (a container pinned to two CPUs of a large
    host is disturbed by what runs on those two, not by the rest of the host).  ``helpers`` are
    processes working for us (the gate's measuring helper): their CPU time counts as ours.
    """
    wall, own = time.monotonic(), time.process_time() + sum(_cpu_seconds(pid) for pid in helpers)
    ours = _our_cpus()
    busy = steal = cores = 0
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            for line in handle:
                name, _, rest = line.partition(" ")
                if not name.startswith("cpu"):
                    break  # the per-CPU lines come first
                if name == "cpu" or (ours is not None and int(name[3:]) not in ours):
                    continue
                user, nice, system, _idle, _iowait, irq, softirq, stolen = (
                    [int(v) for v in rest.split()[:8]] + [0] * 8
                )[:8]
                busy += user + nice + system + irq + softirq
                steal += stolen
                cores += 1
        with open("/proc/loadavg", encoding="ascii") as handle:
            loadavg = float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return LoadSnapshot(wall, 0, 0, own, 0.0, os.cpu_count() or 1, available=False)
    if not cores:
        return LoadSnapshot(wall, 0, 0, own, loadavg, os.cpu_count() or 1, available=False)
    return LoadSnapshot(wall, busy, steal, own, loadavg, cores, True, _own_throttled())


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
    throttled = max(end.throttled - start.throttled, 0.0) / capacity
    return MachineLoad(
        seconds, min(other, 1.0), min(steal, 1.0), end.loadavg, end.cores, throttled=min(throttled, 1.0)
    )
