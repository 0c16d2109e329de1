"""A serving run decides within its time budget for a model slower than ~14 ms a query (issue 37).

Per zoo model (default ``resnet50``; one query's time printed first, at one intra-op thread):

1. ``roofline load MODEL --scenario server --qps Q --budget B`` at half the workers' capacity
   (the default 2 s run) and at twice it for ``--duration`` 20 s (a queue that outgrows the
   budget): the command's wall time against ``B``, the queries LoadGen counted and the samples
   answered unrun past the budget;
2. **the paired gate**: a pytest project whose test calls ``model_load(MODEL, "server", qps=Q,
   budget=B)``; a first run records the entry (its latency measured first, ``--roofline-budget``
   bounded, not counted), then the model changes (a node renamed: the same work) and the call runs
   paired: the call's wall time (timed inside the test) against ``B``, the plan (one query's time,
   the queries of each side) and the verdicts.

The load average is printed with each figure (the runs are child processes, whose CPU time
``device.load`` would count as others': run it under the machine's exclusive lock for a quiet
figure).

Usage::

    python benchmarks/serving_budget.py [--models resnet50] [--budget 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _plugin_helpers import fixed_calibration  # noqa: E402

from pytest_roofline.pipeline import ModelCall, prepare  # noqa: E402
from pytest_roofline.zoo import write_zoo  # noqa: E402

OPTION = "intra_op_threads=1"
ROOT = Path(__file__).resolve().parent.parent
TEST = """
import json, time

def test_serve(model_load):
    began = time.monotonic()
    model_load("model.onnx", "server", qps={qps}, budget={budget})
    with open("took.json", "w") as out:
        json.dump(time.monotonic() - began, out)
"""


def _load() -> str:
    return f"load average {os.getloadavg()[0]:.1f}"


def query_time(path: Path) -> float:
    """The median of 8 inferences at one intra-op thread, seconds."""
    session = prepare(ModelCall(str(path), options={"intra_op_threads": "1"})).open()
    try:
        session.time(2)
        return statistics.median(session.time(8))
    finally:
        session.close()


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def cli_run(path: Path, qps: float, budget: float, duration: float) -> None:
    command = [
        str(Path(sys.executable).parent / "roofline"), "load", str(path), "--scenario", "server",
        "--qps", f"{qps:.3f}", "--budget", f"{budget:g}", "--duration", f"{duration:g}",
        "--option", OPTION, "--format", "json",
    ]  # fmt: skip
    began = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=_env(), check=False)
    wall = time.monotonic() - began
    if done.returncode:
        print(f"   roofline load failed ({done.returncode}): {done.stderr.strip()[-300:]}")
        return
    result = json.loads(done.stdout)
    print(
        f"   roofline load --qps {qps:.1f} --duration {duration:g} --budget {budget:g}: {wall:.1f} s"
        f" (the process, Python and the model's load included), {result['query_count']} queries,"
        f" {result['unrun_samples']} answered unrun, p99 {result['p99'] * 1e3:.1f} ms"
        f" ({_load()})"
    )


def _retrain(model: onnx.ModelProto) -> None:
    """Nudge the first float weight of ``model``: a changed model (its bytes) doing the same work."""
    for index, weight in enumerate(model.graph.initializer):
        values = numpy_helper.to_array(weight)
        if values.dtype.kind == "f" and values.size > 1:
            values = values.copy()
            values.flat[0] += 1e-3
            model.graph.initializer[index].CopyFrom(numpy_helper.from_array(values, weight.name))
            return


def gate_run(path: Path, qps: float, budget: float, work: Path) -> None:
    project = work / "project"
    project.mkdir(parents=True)
    model = onnx.load(str(path))
    onnx.save(model, str(project / "model.onnx"))
    (project / "test_serving_budget_bench.py").write_text(TEST.format(qps=f"{qps:.3f}", budget=budget))
    (work / "calibration").mkdir(parents=True)
    cache = fixed_calibration(work / "calibration", {"intra_op_threads": "1"})
    env = {**_env(), "ROOFLINE_CACHE_DIR": str(cache)}
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--roofline-backend", "onnxruntime",
        "--roofline-option", OPTION, "--roofline-budget", "5", "--roofline-report", "r.json",
    ]  # fmt: skip
    for run in ("first (records)", "changed (paired)"):
        if run.startswith("changed"):
            _retrain(model)  # new weights, the same work
            onnx.save(model, str(project / "model.onnx"))
        done = subprocess.run(command, cwd=project, capture_output=True, text=True, env=env, check=False)
        took = json.loads((project / "took.json").read_text())
        note = " (its latency measured first, outside the budget)" if run.startswith("first") else ""
        (record,) = json.loads((project / "r.json").read_text())["serving"]
        statuses = ", ".join(f"{v['metric']} {v['status']}" for v in record["verdicts"])
        print(
            f"   gate, {run}: model_load took {took:.1f} s{note}, budget {budget:g} s; {statuses}"
            f" (pytest exit {done.returncode}; {_load()})"
        )
        comparison = record.get("comparison")
        if comparison and comparison.get("plan"):
            plan = comparison["plan"]
            answered = [sum(f["queries"] for f in comparison[side]) for side in ("old", "new")]
            print(
                f"     plan: {plan['query_seconds'] * 1e3:.1f} ms a query, {plan['window_queries']} queries"
                f" a window of {plan['window_seconds']:.2f} s, {plan['spent']:.1f} s spent before the"
                f" windows; {len(comparison['windows'])} windows ran, {answered[0]} / {answered[1]}"
                " queries answered (old / new)"
            )
            for verdict in record["verdicts"]:
                print(f"     {verdict['metric']}: {verdict['message']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="resnet50")
    parser.add_argument("--budget", type=float, default=30.0)
    parser.add_argument("--gate-only", action="store_true", help="part 2 only")
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="serving-budget-"))
    names = args.models.split(",")
    paths = write_zoo(out / "zoo", names)
    print(f"start: {_load()} (2-core VM shared with other work)")
    for name in names:
        per_query = query_time(paths[name])
        capacity = 1.0 / per_query
        print(f"{name}: {per_query * 1e3:.1f} ms a query at one intra-op thread ({_load()})")
        if not args.gate_only:
            cli_run(paths[name], 0.5 * capacity, args.budget, 2.0)
            cli_run(paths[name], 2.0 * capacity, args.budget, 20.0)
        gate_run(paths[name], 0.5 * capacity, args.budget, out / name)
    print(f"end: {_load()}; logs under {out}")


if __name__ == "__main__":
    main()
