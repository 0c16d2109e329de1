"""Explain a change point by the graph diff between the models either side of it.

The models come from the model store by their content hash
(:mod:`pytest_roofline.gate.model_store`: every baseline's model), else from git at the recorded
commits (:func:`~pytest_roofline.model.gitref.model_at_ref`; the point records the model's path relative
to the rootdir).  When either is unreachable (not a
repository, the commit not fetched, the model exported by a script and not committed), the
explanation says so instead of guessing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pytest_roofline.errors import RooflineError
from pytest_roofline.history.changepoints import ChangePoint, SeriesChanges, with_explanation
from pytest_roofline.history.points import HistoryPoint

__all__ = ["NOT_REACHABLE", "explain_change", "explain_series"]

NOT_REACHABLE = "models not reachable"


def _model(point: HistoryPoint, rootdir: Path | None) -> Path:
    """``point``'s model: from the model store by its hash, else from git at its commit.

    Raises:
        RooflineError: neither has it (the message says what was missing).
    """
    missing = []
    if point.model_hash:
        from pytest_roofline.gate.model_store import default_model_store

        try:
            found = default_model_store().get(point.model_hash)
        except (OSError, RooflineError):
            found = None
        if found is not None:
            return found
        missing.append("not in the model store")
    if rootdir is None or not point.commit or not point.model:
        raise RooflineError("; ".join([*missing, "no commit or repository recorded"]))
    from pytest_roofline.model.gitref import model_at_ref

    return model_at_ref(rootdir / point.model, point.commit)


def explain_change(before: HistoryPoint, after: HistoryPoint, rootdir: Path | None) -> str:
    """The graph-diff headline between ``before``'s model and ``after``'s (or why there is none)."""
    if before.model_hash and before.model_hash == after.model_hash:
        return "same model bytes both sides: the machine or the backend, not the model"
    from pytest_roofline.diff import diff_models

    try:
        old, new = _model(before, rootdir), _model(after, rootdir)
        diff = diff_models(str(old), str(new), batch=after.batch)
    except RooflineError as exc:
        return f"{NOT_REACHABLE} ({exc})"
    except Exception as exc:  # a model the diff cannot summarize: say so, never fail the listing
        return f"{NOT_REACHABLE} ({type(exc).__name__}: {exc})"
    return diff.headline()


def explain_series(found: SeriesChanges, rootdir: Path | None) -> SeriesChanges:
    """``found`` with an explanation on each change point of its model figure."""
    from dataclasses import replace

    points: Sequence[HistoryPoint] = found.points
    explained: list[ChangePoint] = []
    for change in found.changes:
        text = explain_change(points[change.index - 1], points[change.index], rootdir)
        explained.append(with_explanation(change, text))
    return replace(found, changes=tuple(explained))
