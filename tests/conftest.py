"""The tests decide with a fixed noise model (``tests/data/noise_model_flat.json``: the former quiet
floors, flat in load), so a verdict a test checks never depends on how busy the machine is while it
runs, nor on the packaged model's latest refit.  Tests of the load widening build their own models;
``test_gate_noise`` checks the packaged file itself."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("ROOFLINE_NOISE_MODEL", str(Path(__file__).parent / "data" / "noise_model_flat.json"))
