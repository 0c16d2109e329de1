"""Machine load over a measuring window: real /proc counters and the arithmetic on them."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from pytest_roofline.device.load import LoadSnapshot, MachineLoad, between, snapshot

pytestmark = pytest.mark.skipif(not snapshot().available, reason="needs Linux /proc/stat")


def test_a_busy_process_beside_us_is_seen_and_our_own_work_is_not() -> None:
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        start = snapshot()
        end_at = time.monotonic() + 1.0
        while time.monotonic() < end_at:  # our own busy loop must not count as "other"
            pass
        load = between(start, snapshot())
    finally:
        spinner.kill()
        spinner.wait()
    # one spinning process is one CPU's worth: 1/cores of the machine, whatever else runs here
    assert load.other >= 0.8 / load.cores
    assert load.disturbed
    assert "other processes used" in load.describe()


def test_between_subtracts_our_own_cpu_time_and_counts_steal() -> None:
    tick = os.sysconf("SC_CLK_TCK")
    start = LoadSnapshot(
        0.0, busy_jiffies=0, steal_jiffies=0, own_cpu=0.0, loadavg=0.1, cores=2, available=True
    )
    # 2 s on 2 CPUs = 4 CPU-seconds; machine busy 1.5 s, of which 1.0 s was ours; 0.2 s stolen
    end = LoadSnapshot(
        2.0,
        busy_jiffies=int(1.5 * tick),
        steal_jiffies=int(0.2 * tick),
        own_cpu=1.0,
        loadavg=0.7,
        cores=2,
        available=True,
    )
    load = between(start, end)
    assert load.other == pytest.approx(0.5 / 4, abs=0.01)
    assert load.steal == pytest.approx(0.2 / 4, abs=0.01)
    assert load.loadavg == 0.7
    assert not load.disturbed  # 12.5 % other, 5 % steal: at the limits, not past them
    assert MachineLoad.from_dict(load.to_dict()) == load


def test_unknown_load_is_said_and_never_disturbed() -> None:
    start = LoadSnapshot(0.0, 0, 0, 0.0, 0.0, 2, available=False)
    load = between(start, LoadSnapshot(1.0, 0, 0, 0.0, 0.0, 2, available=False))
    assert not load.available and not load.disturbed
    assert "unknown" in load.describe()


def test_combine_weights_windows_by_time() -> None:
    quiet = MachineLoad(3.0, other=0.0, steal=0.0, loadavg=0.2, cores=2)
    busy = MachineLoad(1.0, other=0.4, steal=0.0, loadavg=1.5, cores=2)
    both = MachineLoad.combine([quiet, busy])
    assert both.seconds == 4.0 and both.other == pytest.approx(0.1) and both.loadavg == 1.5
    assert not MachineLoad.combine([]).available
