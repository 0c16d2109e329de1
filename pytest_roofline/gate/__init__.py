"""The regression gate, free of pytest: verdict statistics, the control probe and sampling loop,
and the baseline store.
"""

from __future__ import annotations

from pytest_roofline.gate.verdict import (
    DEFAULT_DRIFT,
    LayerDelta,
    Verdict,
    bootstrap_ratio_ci,
    compare,
    judge_ratio,
    needs_more,
    new_verdict,
    session_ratios,
    verdict_table,
)

__all__ = [
    "DEFAULT_DRIFT",
    "LayerDelta",
    "Verdict",
    "bootstrap_ratio_ci",
    "compare",
    "judge_ratio",
    "needs_more",
    "new_verdict",
    "session_ratios",
    "verdict_table",
]
