"""``roofline diff OLD NEW``: what changed between two models, and what it should cost.

Without timing by default: the structural diff, FLOPs and bytes before and after, and the
roofline's prediction from the cached calibration of the backend (unavailable when none is
cached) at default efficiencies.  ``--profile`` calibrates if needed, profiles the old model for
its per-layer efficiencies, measures both models paired and interleaved, and reports the
measured change beside the prediction.  ``--format json`` keys: ``added``, ``removed``,
``changed``, ``flops_change``, ``bytes_change``, ``predicted_time_change`` (fractions of the old
model), ``assumptions``, ``prediction``, ``measured``, ``explanation``, ``memory`` (the estimated
peaks, over the models' graphs or under ``--profile`` the graphs the backend ran, and the buffers
kept alive longer; docs/memory.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from pytest_roofline.cli.common import (
    add_backend_arguments,
    add_format_argument,
    add_shape_arguments,
    batch_or_default,
    model_dims,
)
from pytest_roofline.errors import BackendUnavailable, OptionError
from pytest_roofline.report.tables import diff_table

if TYPE_CHECKING:
    from pytest_roofline.diff import Explanation, GraphDiff, Prediction
    from pytest_roofline.gate.verdict import Verdict
    from pytest_roofline.memory.change import MemoryChange
    from pytest_roofline.roofline import DeviceRoofline

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``diff``."""
    parser = subparsers.add_parser(
        "diff",
        help="what changed between two models and what the roofline says it costs",
        description="Structural diff of two ONNX models (nodes added, removed, changed; blocks; FLOPs and "
        "bytes before and after) and the roofline's prediction of the latency change. --profile also "
        "measures both models paired and compares the measurement with the prediction.",
    )
    parser.add_argument("old", metavar="OLD", help="the old .onnx model")
    parser.add_argument("new", metavar="NEW", help="the new .onnx model")
    add_shape_arguments(parser, "bind the first dim of inputs whose first dim is symbolic")
    add_format_argument(parser)
    parser.add_argument(
        "--profile", action="store_true", help="measure both models (paired) and the old profile"
    )
    add_backend_arguments(
        parser,
        backend_help="backend whose roofline prices the change and that --profile runs (default onnxruntime)",
        option_help="backend option (repeatable), e.g. intra_op_threads=1",
    )
    parser.add_argument("--sessions", type=int, default=5, help="--profile: fresh session pairs (default 5)")
    parser.add_argument(
        "--rounds", type=int, default=20, help="--profile: rounds per session pair (default 20)"
    )
    parser.add_argument(
        "--top", type=int, default=12, metavar="K", help="nodes listed in the table (default 12)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Diff ``args.old`` and ``args.new``; predict, and with ``--profile`` measure, the change."""
    from pytest_roofline.diff import diff_summaries, explain_verdict, predict, summarize

    batch = batch_or_default(args.batch, [args.old, args.new], model_dims(args))
    for name, value in (
        ("--top", args.top),
        ("--sessions", args.sessions - 1),
        ("--rounds", args.rounds - 1),
    ):
        if value < 0:
            raise OptionError(f"{name} is too small")
    dims = model_dims(args)

    def say(message: str) -> None:
        if not args.quiet:
            sys.stderr.write(f"roofline: {message}\n")
            sys.stderr.flush()

    old = summarize(args.old, batch=batch, dims=dims or None)
    new = summarize(args.new, batch=batch, dims=dims or None)
    diff = diff_summaries(old, new)
    roofline, why_not, engine = _roofline(args, say)
    profile = verdict = None
    if args.profile and engine is not None:
        from pytest_roofline import pipeline
        from pytest_roofline.gate.paired import measure_change

        say(f"profiling {old.model_name} on {engine.name} for its per-layer efficiencies")
        call = pipeline.ModelCall(args.old, batch=batch, dims=dims or None, backend=engine, roofline=roofline)
        profile = pipeline.run(call).profile
        say(f"timing {old.model_name} and {new.model_name} interleaved: {args.sessions} session pairs")
        verdict = measure_change(
            args.old,
            args.new,
            engine,
            batch=batch,
            dims=dims or None,
            sessions=args.sessions,
            rounds=args.rounds,
        )
    prediction = predict(diff, roofline, profile)
    if not prediction.available and why_not:
        from pytest_roofline.diff import Prediction

        prediction = Prediction(False, reason=why_not)
    explanation = explain_verdict(
        diff,
        prediction,
        ratio=verdict.ratio if verdict is not None else None,
        ci=verdict.ci if verdict is not None else None,
        status=verdict.status if verdict is not None else "not-compared",
    )
    memory = _memory_change(args.old, args.new, batch, dims, engine if args.profile else None, say)
    if args.format == "json":
        data = document(diff, prediction, verdict, explanation)
        data["memory"] = memory.to_dict() if memory is not None else None
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        sys.stdout.write(diff_table(diff, prediction, verdict, explanation, args.top))
        if memory is not None:
            sys.stdout.write("\n".join(["", *memory.lines()]) + "\n")
    return 0


def _memory_change(
    old: str, new: str, batch: int | None, dims: dict[str, int], engine: Any, say: Any
) -> MemoryChange | None:
    """The estimated memory of both models and the buffers the new one keeps alive longer: over the
    models' graphs, or under --profile over the graphs ``engine`` ran (onnxruntime's optimized
    graph, as a profile's estimate), with the requested peaks it measured beside them."""
    from pytest_roofline.analysis import analyze
    from pytest_roofline.errors import RooflineError
    from pytest_roofline.memory.change import memory_change

    try:
        if engine is not None:
            return _planned_change(old, new, batch, dims, engine, say)
        return memory_change(
            analyze(old, batch=batch, dims=dims or None), analyze(new, batch=batch, dims=dims or None)
        )
    except RooflineError:  # the diff above stands without it
        return None


def _planned_change(
    old: str, new: str, batch: int | None, dims: dict[str, int], engine: Any, say: Any
) -> MemoryChange:
    """:func:`_memory_change` over the graphs ``engine`` ran: each model profiled for a few runs; the
    models' graphs where the backend reports no graph or no memory (e.g. OpenVINO)."""
    import dataclasses

    from pytest_roofline import pipeline
    from pytest_roofline.memory.change import memory_change
    from pytest_roofline.memory.measure import profiled_memory

    runs = []
    for path in (old, new):
        say(f"profiling {path} for the memory its backend plans")
        prepared = pipeline.prepare(pipeline.ModelCall(path, batch=batch, dims=dims or None, backend=engine))
        runs.append(pipeline.profile_layers(prepared, iterations=MEMORY_RUNS))
    change = memory_change(runs[0].analysis, runs[1].analysis)
    memories = [profiled_memory(run.kernels, run.analysis)[0] for run in runs]
    if any(run.kernels.executed is None for run in runs) or any(m is None for m in memories):
        return change
    before, after = (m for m in memories if m is not None)
    return dataclasses.replace(
        change,
        old_peak=before.predicted_peak,
        new_peak=after.predicted_peak,
        basis=f"the graphs {engine.name} ran",
        old_measured=before.requested_peak or before.peak,
        new_measured=after.requested_peak or after.peak,
    )


#: Profiled runs read for a model's memory under --profile: the first (buffer by buffer) and one
#: on the memory pattern planned from it (memory.trace).
MEMORY_RUNS = 2


def _roofline(args: argparse.Namespace, say: Any) -> tuple[DeviceRoofline | None, str, Any]:
    """(roofline, why there is none, backend): calibrated under --profile, else only if cached."""
    from pytest_roofline.backends.base import get_backend

    try:
        engine = get_backend(args.backend, dict(args.option))
    except BackendUnavailable as exc:
        if args.profile:
            raise
        return None, f"backend {args.backend} unavailable: {exc}", None
    if args.profile:
        from pytest_roofline.roofline.calibrate import calibrate

        say(f"device roofline through {engine.name} (cached after the first calibration)")
        return calibrate(engine, progress=say), "", engine
    from pytest_roofline.roofline.calibrate import cached_roofline

    roofline = cached_roofline(engine)
    if roofline is None:
        return (
            None,
            f"no calibration of {engine.name} cached on this device: "
            "run `roofline calibrate` or add --profile",
            engine,
        )
    return roofline, "", engine


def document(
    diff: GraphDiff, prediction: Prediction, verdict: Verdict | None, explanation: Explanation
) -> dict[str, Any]:
    """The JSON document: the diff, ``predicted_time_change``, assumptions, measurement, explanation."""
    data = diff.to_dict()
    data["predicted_time_change"] = prediction.fraction
    data["assumptions"] = list(prediction.assumptions)
    data["prediction"] = prediction.to_dict()
    data["measured"] = _measured(verdict)
    data["explanation"] = explanation.to_dict()
    return data


def _measured(verdict: Verdict | None) -> dict[str, Any] | None:
    if verdict is None:
        return None
    ci = [verdict.ci[0] - 1, verdict.ci[1] - 1] if verdict.ci else None
    return {
        "time_change": verdict.ratio - 1 if verdict.ratio is not None else None,
        "ci": ci,
        "ratio": verdict.ratio,
        "status": verdict.status,
        "mode": verdict.mode,
        "sessions": verdict.sessions,
        "old_p25": verdict.raw.get("baseline"),
        "new_p25": verdict.raw.get("current"),
    }
