"""Machine load over a measuring window: real /proc counters and the arithmetic on them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

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


def test_cpu_quota_throttling_is_read_from_our_cgroups_cpu_stat(tmp_path) -> None:
    from pytest_roofline.device.load import cgroup_cpu_stats, throttled_seconds

    # cgroup v1: the cpu controller mounted as cpu,cpuacct; a quota on the job's group and its parent
    job = tmp_path / "cpu,cpuacct" / "ci" / "job-7"
    job.mkdir(parents=True)
    (job / "cpu.stat").write_text("nr_periods 40\nnr_throttled 20\nthrottled_time 1500000000\n")
    (job.parent / "cpu.stat").write_text("nr_periods 5\nnr_throttled 1\nthrottled_time 500000000\n")
    text = "9:name=systemd:/\n4:memory:/ci/job-7\n2:cpu,cpuacct:/ci/job-7\n"
    stats = cgroup_cpu_stats(text, root=tmp_path)
    assert stats == [job / "cpu.stat", job.parent / "cpu.stat"]
    assert throttled_seconds(stats) == pytest.approx(2.0)
    # cgroup v2: the unified tree, microseconds
    v2 = tmp_path / "v2"
    (v2 / "runner").mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    (v2 / "runner" / "cpu.stat").write_text("usage_usec 90\nthrottled_usec 250000\n")
    assert throttled_seconds(cgroup_cpu_stats("0::/runner\n", root=v2)) == pytest.approx(0.25)
    # no cpu controller listed, unreadable or garbled files: nothing withheld, no error
    assert cgroup_cpu_stats("4:memory:/x\n", root=tmp_path) == []
    (v2 / "runner" / "cpu.stat").write_text("throttled_usec lots\n")
    assert throttled_seconds([v2 / "runner" / "cpu.stat", tmp_path / "missing"]) == 0.0


def test_a_quota_share_counts_as_pressure_and_is_said() -> None:
    from pytest_roofline.gate.noise import pressure

    start = LoadSnapshot(0.0, 0, 0, 0.0, 0.1, cores=2, available=True, throttled=3.0)
    end = LoadSnapshot(2.0, 0, 0, 0.0, 0.1, cores=2, available=True, throttled=5.0)
    load = between(start, end)  # 2 s of 4 CPU-seconds withheld
    assert load.throttled == pytest.approx(0.5)
    assert load.other == 0.0 and load.disturbed
    assert pressure(load) == pytest.approx(0.5)
    assert "CPU quota withheld 50%" in load.describe()
    assert MachineLoad.from_dict(load.to_dict()) == load
    legacy = {k: v for k, v in load.to_dict().items() if k != "throttled"}
    assert MachineLoad.from_dict(legacy).throttled == 0.0


def test_a_real_cpu_quota_is_seen_by_the_process_it_throttles(tmp_path) -> None:
    group = Path("/sys/fs/cgroup/cpu") / f"roofline-test-{os.getpid()}"
    try:
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text("20000")  # a fifth of one CPU
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup v1 cpu group here: {exc}")
    script = (
        "import sys, time\n"
        f"open({str(group / 'cgroup.procs')!r}, 'w').write(str(__import__('os').getpid()))\n"
        "from pytest_roofline.device.load import snapshot, between\n"
        "from pytest_roofline.gate.noise import pressure\n"
        "start = snapshot(); end = time.monotonic() + 1.0\n"
        "while time.monotonic() < end: pass\n"
        "load = between(start, snapshot()); print(load.throttled, pressure(load))\n"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
        ).stdout.split()
    finally:
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    throttled, felt = float(out[0]), float(out[1])
    # a spinning thread held to 0.2 CPU for 1 s is withheld ~0.8 CPU-s of the machine's capacity
    assert throttled >= 0.2 / os.cpu_count()
    assert felt >= throttled
