"""Memory from a helper process's peak RSS over a fixed load-and-run.

For backends whose profiler reports no memory (OpenVINO, a third party's): a fresh Python process
imports the backend, reads its resident set, loads the model, runs it a fixed number of times and
reads its high-water mark (``VmHWM`` of its own ``/proc/self/status``: ``ru_maxrss`` of a child
carries the parent's mark across fork).  ``peak`` is the mark less the resident set before the
load: the model's weights as loaded, the compiled form and the activations of one inference,
to a page.  Pages make it inexact: ``exact`` is False and the gate uses its tolerance.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_roofline.errors import BackendError
from pytest_roofline.memory import MemoryProfile

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy as np

__all__ = ["RUNS", "peak_rss_memory"]

#: Inferences the helper runs after the load (the first allocates, the rest reuse).
RUNS = 3

_HELPER = """\
import json, sys
import numpy as np
from pytest_roofline.backends.base import get_backend
from pytest_roofline.model import ModelSpec

def kib(key):
    with open('/proc/self/status') as status:
        return int(next(line.split()[1] for line in status if line.startswith(key + ':'))) * 1024

request = json.loads(sys.argv[1])
backend = get_backend(request['backend'], request['options'])
inputs = dict(np.load(request['inputs']))
spec = ModelSpec.create(request['model'], request['batch'], request['dims'])
before = kib('VmRSS')
with backend.open(spec, inputs) as session:
    for _ in range(request['runs']):
        session.outputs()
print(json.dumps({'before': before, 'peak': kib('VmHWM')}))
"""


def peak_rss_memory(
    model_path: str,
    backend: str,
    options: Mapping[str, str],
    inputs: Mapping[str, np.ndarray],
    batch: int | None,
    dims: Mapping[str, int],
    weights: int,
    timeout: float = 300.0,
) -> MemoryProfile:
    """The helper's peak RSS over loading ``model_path`` and running it :data:`RUNS` times.

    Raises:
        BackendError: the helper failed (its last line says why).
    """
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="roofline-rss-") as tmp:
        feeds = Path(tmp) / "inputs.npz"
        np.savez(feeds, **dict(inputs))  # type: ignore[arg-type]
        request = {
            "backend": backend,
            "options": dict(options),
            "inputs": str(feeds),
            "model": model_path,
            "batch": batch,
            "dims": dict(dims),
            "runs": RUNS,
        }
        argv = [sys.executable, "-c", _HELPER, json.dumps(request)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BackendError(f"the peak-RSS helper for {backend} failed: {last}")
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    peak = max(int(figures["peak"]) - int(figures["before"]), 0)
    return MemoryProfile(
        peak=peak,
        arena_held=0,
        weights=weights,
        peak_activations=max(peak - weights, 0),
        source="peak RSS",
        exact=False,
    )
