"""Peak memory of a Python child process, read from its own ``/proc/self/status``.

``os.wait4``'s ``ru_maxrss`` is no measure of the child alone: Linux carries the parent's
high-water mark across fork and exec, so a child of a pytest process that has grown past 1 GiB
reports over 1 GiB however little it allocated.  ``VmHWM`` belongs to the child's own address
space, which exec starts afresh."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CLI = "from pytest_roofline.cli import entry_point; entry_point()"

_WRAPPER = """\
import atexit, sys
def _report(path=sys.argv[1]):
    with open('/proc/self/status') as status:
        kib = next(line.split()[1] for line in status if line.startswith('VmHWM:'))
    with open(path, 'w') as out:
        out.write(kib)
atexit.register(_report)
code, sys.argv = sys.argv[2], ['-c', *sys.argv[3:]]
exec(compile(code, '<peak_rss>', 'exec'), {'__name__': '__main__'})
"""


def peak_rss_of(code: str, args: list[str], cwd: Path) -> tuple[int, str, str, int]:
    """Run ``python -c code args...`` in ``cwd``: exit status, stdout, stderr and peak RSS in bytes."""
    report = cwd / ".peak_rss"
    argv = [sys.executable, "-c", _WRAPPER, str(report), code, *args]
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300)
    peak = int(report.read_text()) * 1024
    report.unlink()
    return proc.returncode, proc.stdout, proc.stderr, peak
