"""Explain a change of model: what differs in the graph, what the roofline says it costs, and
whether a measured change matches.

* :func:`summarize` — a compact :class:`ModelSummary` of a model (stored in baseline entries);
* :func:`diff_summaries` / :func:`diff_models` — the :class:`GraphDiff`: nodes added, removed,
  changed, grouped into blocks, with FLOPs and bytes before and after;
* :func:`predict` — the :class:`Prediction` of the latency change, priced on the roofline at the
  efficiencies of the baseline's profile;
* :func:`explain_verdict` — the one-line :class:`Explanation` of a gate verdict.

Details: docs/diff.md.
"""

from __future__ import annotations

from .changes import Block, GraphDiff, NodeChange, diff_models, diff_summaries
from .explain import AGREEMENT_ABS, AGREEMENT_REL, Explanation, agreement, explain_verdict
from .match import Matching, match_nodes
from .predict import DEFAULT_EFFICIENCY, EfficiencyTable, NodePrediction, Prediction, predict, roof_time
from .summary import ModelSummary, NodeSummary, summarize

__all__ = [
    "AGREEMENT_ABS",
    "AGREEMENT_REL",
    "DEFAULT_EFFICIENCY",
    "Block",
    "EfficiencyTable",
    "Explanation",
    "GraphDiff",
    "Matching",
    "ModelSummary",
    "NodeChange",
    "NodePrediction",
    "NodeSummary",
    "Prediction",
    "agreement",
    "diff_models",
    "diff_summaries",
    "explain_verdict",
    "match_nodes",
    "predict",
    "roof_time",
    "summarize",
]
