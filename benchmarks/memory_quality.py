"""Memory per inference on the zoo: repeatability, the static estimate, a kept-alive buffer, overhead.

Run: ``python benchmarks/memory_quality.py [--models a,b] [--sessions 5] [--out DIR]``.  Every figure
comes from onnxruntime's CPU arena counters (``pytest_roofline.memory.trace``) on the zoo
(``pytest_roofline.zoo.suite``, written to ``--out``); per model it prints:

* **repeat**: the measured peak over ``--sessions`` fresh sessions at default threads and as many at
  one thread (``intra_op_threads=1``): the spread (max - min) / max within each thread setting;
  target: the same bytes, or within 0.1 %, on every model (those that are not are named); whether
  one thread reads other bytes than the default is printed beside it (threads are a condition of
  the gate: a baseline at other threads is incomparable);
* **estimate**: the static estimate (weights as the arena holds them + the peak of live
  activations over the graph's schedule) against the measured requested peak (what the tensors
  asked for; the arena's in-use peak, rounded to its bins, is printed beside it); target: within
  10 % on at least 90 % of the zoo (the worst is printed);
* **keep-alive**: the model with its largest intermediate that is at least 5 % of the measured peak
  made a graph output (kept alive to the end of the run), judged by the gate's memory verdict
  against the unchanged model's record at the default tolerance (1 %), given the buffers the
  variant's graph keeps alive longer than the model's (memory.change.kept_longer over the two
  graphs' summaries, as the gate does with the summary a baseline entry keeps): target: a
  ``regression`` on the first run with the ONNX node writing the kept buffer named ("named": the
  verdict's explanation reads "at <that node>:"; for ``loop``, the Loop node whose body's buffer is
  scanned out); the unchanged model against itself (a second session): ``pass`` on every model;
* **overhead**: the seconds reading memory adds (the trace is the layer profile's own; the work is
  reading its counters and the liveness estimate) against the seconds of the profiled run it
  rides on; target: at most 2 %.

Timings on a shared machine are noisy; the memory figures are counters and are not.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from pytest_roofline.diff import summarize
from pytest_roofline.gate.memory import MemoryTolerance, memory_verdict
from pytest_roofline.memory import MemoryRecord
from pytest_roofline.memory.change import kept_longer
from pytest_roofline.memory.estimate import lifetimes
from pytest_roofline.memory.measure import profiled_memory
from pytest_roofline.pipeline import ModelCall, prepare, profile_layers
from pytest_roofline.zoo.suite import ZOO, write_zoo, zoo_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo_gate import models_json_test  # noqa: E402

PROFILE_RUNS = 2
KEEP_SHARE = 0.05  # the variant: one intermediate of at least 5 % of the peak kept alive
SMALLEST_SHARE = 0.015  # below 5 %, a variant is still judged when the buffer clears the 1 % tolerance


def measure(path: Path, dims: dict[str, int], threads: str | None) -> tuple[Any, ...]:
    """(memory, per-layer memory, seconds of the profiled run, seconds reading memory, analysis, the
    graph the backend ran) of one fresh session, profiled and analyzed as the plugin does
    (``pipeline.profile_layers``)."""
    options = {"intra_op_threads": threads} if threads else None
    prepared = prepare(ModelCall(str(path), dims=dims or None, options=options))
    start = time.perf_counter()
    run = profile_layers(prepared, iterations=PROFILE_RUNS)
    profiled = time.perf_counter() - start
    start = time.perf_counter()
    memory, layers = profiled_memory(run.kernels, run.analysis)
    reading = time.perf_counter() - start
    return memory, layers, profiled, reading, run.analysis, run.kernels


def keep_alive_variant(
    path: Path, analysis: Any, kernels: Any, peak: int, out: Path
) -> tuple[Path, str, str, int] | None:
    """The model with one large intermediate kept alive to the end of the run, so that the peak
    grows by at least :data:`KEEP_SHARE` of ``peak`` (else :data:`SMALLEST_SHARE`): (path, the ONNX
    node a verdict should name, what was kept, its bytes), or None when no intermediate does.

    Candidates are the intermediates the backend's own graph still writes (``kernels.executed``:
    onnxruntime's optimized graph; one inside a kernel it fuses would end the fusion when kept),
    largest first; each is tried on the planner model (memory.estimate.planned_memory, over the
    profiled run's order and shapes) as a graph output, and the first whose predicted growth is
    large enough is made one.  A tensor that is live at the peak already adds nothing kept longer
    (einsum_attention's largest MLP activation).  A main graph whose only node is a Loop keeps
    nothing longer that way (its outputs already live to the run's end): the Loop body's largest
    intermediate is then scanned out, one copy per iteration kept to the end (:func:`_keep_loop_body`).
    """
    import dataclasses

    from pytest_roofline.memory.estimate import planned_memory

    model = onnx.load(str(path))
    main = [node for node in model.graph.node if node.op_type != "Constant"]
    if len(main) == 1 and main[0].op_type == "Loop":
        return _keep_loop_body(model, main[0], analysis, peak, out / f"{path.stem}__keep.onnx")
    executed, events = kernels.executed, kernels.trace_events
    outputs = set(analysis.graph_outputs)
    written = {t for node in executed.nodes for t in node.outputs} if executed is not None else set()
    candidates = sorted(
        (life for life in lifetimes(analysis).values() if life.tensor not in outputs and life.last_reader),
        key=lambda life: -life.bytes,
    )
    base = planned_memory(executed, events) if executed is not None else None

    def growth(life: Any) -> int:
        """The predicted growth of the requested peak with ``life`` kept; a tensor the backend's
        graph no longer writes (relaid, fused) is materialized anew when kept: its bytes."""
        if base is None or life.tensor not in written:
            return life.bytes
        kept = planned_memory(dataclasses.replace(executed, outputs=(*executed.outputs, life.tensor)), events)
        return kept.peak_activations - base.peak_activations if kept is not None else 0

    chosen = next((life for life in candidates[:40] if growth(life) >= KEEP_SHARE * peak), None)
    if chosen is None:
        chosen = next((life for life in candidates[:40] if growth(life) >= SMALLEST_SHARE * peak), None)
    if chosen is None:
        return None
    dtype = helper.np_dtype_to_tensor_dtype(np.dtype(analysis.tensors[chosen.tensor].dtype))
    model.graph.output.append(helper.make_tensor_value_info(chosen.tensor, dtype, None))
    target = out / f"{path.stem}__keep.onnx"
    onnx.save(model, str(target))
    return target, chosen.producer, f"{chosen.producer}'s {chosen.tensor}", chosen.bytes


def _keep_loop_body(
    model: onnx.ModelProto, loop: onnx.NodeProto, analysis: Any, peak: int, target: Path
) -> tuple[Path, str, str, int] | None:
    """``model`` whose Loop scans out its body's largest intermediate (one copy per iteration,
    kept to the end as a graph output): (path, the Loop node, what was kept, its bytes), or None."""
    body = next(a.g for a in loop.attribute if a.name == "body")
    body_outputs = {o.name for o in body.output}
    sized = [
        (info.nbytes, tensor, info)
        for node in body.node
        for tensor in node.output
        if tensor not in body_outputs
        for info in [analysis.tensors.get(tensor) or analysis.tensors.get(f"{loop.name}/{tensor}")]
        if info is not None
    ]
    if not sized:
        return None
    per_trip, tensor, info = max(sized, key=lambda item: item[0])
    trips = _loop_trips(model, loop)
    if trips is None or per_trip * trips < SMALLEST_SHARE * peak:
        return None
    dtype = helper.np_dtype_to_tensor_dtype(np.dtype(info.dtype))
    body.node.append(helper.make_node("Identity", [tensor], [f"{tensor}__kept"], name=f"{tensor}__keep"))
    body.output.append(helper.make_tensor_value_info(f"{tensor}__kept", dtype, None))
    loop.output.append(f"{loop.name}__{tensor}__kept")
    model.graph.output.append(helper.make_tensor_value_info(f"{loop.name}__{tensor}__kept", dtype, None))
    onnx.save(model, str(target))
    return target, loop.name, f"{loop.name} body's {tensor} (x{trips} iterations)", per_trip * trips


def _loop_trips(model: onnx.ModelProto, loop: onnx.NodeProto) -> int | None:
    """A Loop's constant trip count (an initializer), else None."""
    from onnx import numpy_helper

    initializers = {init.name: init for init in model.graph.initializer}
    trips = initializers.get(loop.input[0]) if loop.input and loop.input[0] else None
    return int(numpy_helper.to_array(trips)) if trips is not None else None


OVERHEAD_TEST = models_json_test("assert prof.memory is not None")

#: Times every call into the memory code of a gated test (the executed graph and the shapes ONNX
#: inference declares, which only the estimate uses; the trace's counters, the estimate, the
#: verdict beside latency and the record a baseline keeps) and each test's call, per test.
OVERHEAD_CONFTEST = """
import functools, json, time
import pytest
import pytest_roofline.gate.memory as gate_memory
import pytest_roofline.gate.runner as runner
import pytest_roofline.memory.measure as measure
import pytest_roofline.backends.onnxruntime.runner as ort_runner

SPENT, CPU, CALLS, CALLS_CPU, CURRENT = {}, {}, {}, {}, [None]

def _timed(module, name):
    original = getattr(module, name)
    @functools.wraps(original)
    def timed(*args, **kwargs):
        start, cpu = time.perf_counter(), time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            if CURRENT[0] is not None:
                SPENT[CURRENT[0]] = SPENT.get(CURRENT[0], 0.0) + time.perf_counter() - start
                CPU[CURRENT[0]] = CPU.get(CURRENT[0], 0.0) + time.process_time() - cpu
    setattr(module, name, timed)

for module, name in ((measure, "profiled_memory"), (runner, "_memory_verdicts"),
                     (runner, "_memory_unchanged"), (gate_memory, "memory_record"),
                     (ort_runner, "_executed_graph")):  # the executed graph and its declared shapes
    _timed(module, name)

@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    CURRENT[0] = item.callspec.params["name"]
    start, cpu = time.perf_counter(), time.process_time()
    try:
        return (yield)
    finally:
        CALLS[CURRENT[0]] = time.perf_counter() - start
        CALLS_CPU[CURRENT[0]] = time.process_time() - cpu
        CURRENT[0] = None

def pytest_sessionfinish(session):
    with open("overhead.json", "w") as handle:
        json.dump({"memory": SPENT, "memory_cpu": CPU, "test": CALLS, "test_cpu": CALLS_CPU}, handle)
"""


def gated_overhead(
    names: list[str], paths: dict[str, Path], work: Path, dims: dict[str, dict[str, int]]
) -> None:
    """The seconds the memory code takes in a gated test (a new baseline: profiled, gated,
    recorded) against that test's own seconds, per model, in one pytest process."""
    project = work / "overhead-project"
    shutil.rmtree(project, ignore_errors=True)
    project.mkdir(parents=True)
    models = {n: [str(paths[n]), dims[n]] for n in names}
    (project / "models.json").write_text(json.dumps(models))
    (project / "test_memory_overhead.py").write_text(OVERHEAD_TEST)
    (project / "conftest.py").write_text(OVERHEAD_CONFTEST)
    # the calibration is cached even on a busy machine, so no test pays for one
    env = {**os.environ, "ROOFLINE_CACHE_DIR": str(work / "overhead-cache"), "ROOFLINE_CACHE_UNSETTLED": "1"}
    cli = "from pytest_roofline.cli import entry_point; entry_point()"
    subprocess.run([sys.executable, "-c", cli, "calibrate"], capture_output=True, check=False, env=env)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
        check=False,
    )
    spent_file = project / "overhead.json"
    if not spent_file.exists():
        print(f"overhead run failed: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
        return
    spent = json.loads(spent_file.read_text())
    shares = []
    for name in names:
        test, memory = spent["test"].get(name), spent["memory"].get(name, 0.0)
        test_cpu, memory_cpu = spent["test_cpu"].get(name), spent["memory_cpu"].get(name, 0.0)
        if not test or not test_cpu:
            print(f"  {name:18} no gated test time recorded")
            continue
        shares.append((memory / test, memory_cpu / test_cpu, name))
        print(
            f"  {name:18} gated test {test:7.3f} s wall, {test_cpu:7.3f} s CPU; memory code "
            f"{memory * 1e3:7.2f} ms wall ({memory / test * 100:.3f} %), {memory_cpu * 1e3:7.2f} ms CPU "
            f"({memory_cpu / test_cpu * 100:.3f} %)"
        )
    if shares:
        wall, cpu = max(shares), max(shares, key=lambda item: item[1])
        print(
            f"overhead of memory in a gated test (new baseline): worst {wall[0] * 100:.3f} % of the wall "
            f"time ({wall[2]}), worst {cpu[1] * 100:.3f} % of the CPU time ({cpu[2]}) (target <= 2 %); "
            f"pytest exit {proc.returncode}"
        )


def _spread(values: list[int]) -> float:
    """(max - min) / max of a list of peaks."""
    return (max(values) - min(values)) / max(values) if values and max(values) > 0 else 0.0


class _Profile:
    """What :func:`memory_verdict` reads of a profile: its memory, layers, backend and name."""

    def __init__(self, memory: Any, layers: dict[str, Any], name: str) -> None:
        from pytest_roofline.profile import Layer

        self.memory, self.model_name, self.backend = memory, name, "onnxruntime"
        self.layers = [Layer(n, "", (), 0.0, 0, 0, memory=m) for n, m in layers.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated zoo names (default: all)")
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("/tmp/roofline-zoo"))
    parser.add_argument(
        "--gated-overhead",
        default="tiny_mlp,tiny_cnn,scan,loop,tcn",
        help="zoo models whose gated tests (new baselines, one pytest run) time the memory code ('' to skip)",
    )
    parser.add_argument("--skip-quality", action="store_true", help="only the gated-test overhead")
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n] or [entry.name for entry in ZOO]
    gated = [n for n in args.gated_overhead.split(",") if n]
    if gated:
        print(f"memory code in gated tests ({', '.join(gated)}), one pytest run:", flush=True)
        gated_paths = write_zoo(args.out, gated)
        gated_overhead(gated, gated_paths, args.out, {n: dict(zoo_model(n).dims) for n in gated})
    if args.skip_quality:
        return
    paths = write_zoo(args.out, names)
    rows, errors, not_repeatable, caught, unchanged_ok, overheads = [], [], [], [], [], []
    readings: list[tuple[float, str]] = []
    caught_small: list[tuple[str, bool, bool]] = []
    started = time.perf_counter()
    for name in names:
        entry, path = zoo_model(name), paths[name]
        dims = dict(entry.dims)
        try:
            default = [measure(path, dims, None) for _ in range(args.sessions)]
            single = [measure(path, dims, "1") for _ in range(args.sessions)]
        except Exception as error:  # noqa: BLE001 - one row says why
            print(f"{name:18} cannot run: {str(error).splitlines()[0][:80]}")
            continue
        if default[0][0] is None:
            print(f"{name:18} no memory counters in the trace")
            continue
        peaks = [m.peak for m, *_ in default + single]
        spread = max(_spread([m.peak for m, *_ in default]), _spread([m.peak for m, *_ in single]))
        if spread > 0.001:
            not_repeatable.append((name, spread, sorted(set(peaks))))
        threads = "same at 1 thread" if len(set(peaks)) == 1 else f"1 thread {_spread(peaks) * 100:+.2f} %"
        memory = default[0][0]
        error = memory.predicted_error or 0.0
        errors.append((name, error))
        overheads.extend(reading / profiled for _, _, profiled, reading, *_ in default)
        readings.extend((reading, name) for _, _, _, reading, *_ in default)
        record = MemoryRecord(memory, default[0][1])
        again = _Profile(*(default[1] if len(default) > 1 else single[0])[:2], name)
        same = memory_verdict(again, record, MemoryTolerance())  # type: ignore[arg-type]
        unchanged_ok.append((name, same.status if same else "none"))
        variant = keep_alive_variant(path, default[0][4], default[0][5], memory.peak, args.out)
        keep = "-"
        if variant is None:
            keep = f"no intermediate >= {SMALLEST_SHARE * 100:.1f} % of the peak"
        else:
            vpath, producer, kept_what, size = variant
            vmem, vlayers, _, _, vanalysis, _ = measure(vpath, dims, None)
            kept = kept_longer(
                summarize(path, dims=dims or None, analysis=default[0][4]).lifetimes(),
                summarize(vpath, dims=dims or None, analysis=vanalysis).lifetimes(),
            )
            verdict = memory_verdict(_Profile(vmem, vlayers, name), record, MemoryTolerance(), kept=kept)  # type: ignore[arg-type]
            status = verdict.status if verdict else "none"
            explained = verdict.explanation if verdict else ""
            large = size >= KEEP_SHARE * memory.peak
            named = f" at {producer}:" in f" {explained}"
            (caught if large else caught_small).append((name, status == "regression", named))
            share = f"{size / memory.peak * 100:.1f} % of the peak"
            keep = (
                f"{status}: kept {size / 1e6:.3g} MB ({share}) of {kept_what}; "
                f"{'named' if named else 'NOT named'}: {explained or 'no layer named'}"
            )
        rows.append(
            f"{name:18} peak {memory.peak / 1e6:9.3f} MB (requested {memory.requested_peak / 1e6:9.3f})  "
            f"weights {memory.weights / 1e6:8.3f} MB  "
            f"estimate {memory.predicted_peak / 1e6:9.3f} MB ({error * 100:+6.1f} %)  "
            f"repeat spread {spread * 100:.3f} % over {args.sessions}+{args.sessions} sessions "
            f"({threads})  | {keep}"
        )
        print(rows[-1], flush=True)
    print()
    within = [n for n, e in errors if abs(e) <= 0.10]
    if errors:
        worst = max(errors, key=lambda item: abs(item[1]))
        print(
            f"estimate within 10 %: {len(within)}/{len(errors)} models "
            f"({len(within) / len(errors) * 100:.0f} %; "
            f"target >= 90 %); worst {worst[0]} {worst[1] * 100:+.1f} %"
        )
    print(
        f"repeatable (same bytes or within 0.1 % over {args.sessions} sessions, "
        "at default threads and at 1): "
        f"{len(errors) - len(not_repeatable)}/{len(errors)}"
        + "".join(f"\n  not: {n} spread {s * 100:.3f} %, peaks {p}" for n, s, p in not_repeatable)
    )
    print(
        "kept-alive variant caught as a memory regression on the first run: "
        f"{sum(c for _, c, _ in caught)}/"
        f"{len(caught)} with an intermediate >= 5 % of the peak (of {len(errors)} models); "
        f"{sum(c for _, c, _ in caught_small)}/{len(caught_small)} more whose largest is "
        f"{SMALLEST_SHARE * 100:.1f}-5 % of it"
    )
    variants = caught + caught_small
    print(
        f"...with the kept buffer's ONNX producer named: {sum(c and n for _, c, n in variants)}/"
        f"{len(variants)}" + "".join(f"\n  not named: {n}" for n, c, named in variants if not (c and named))
    )
    bad = [(n, s) for n, s in unchanged_ok if s not in ("pass", "unchanged")]
    print(
        "unchanged models, second session vs first: "
        f"{len(unchanged_ok) - len(bad)}/{len(unchanged_ok)} pass {bad}"
    )
    if overheads:
        print(
            f"overhead: reading memory adds median {sorted(overheads)[len(overheads) // 2] * 100:.2f} %, "
            f"max {max(overheads) * 100:.2f} % to the profiled run it reads (target <= 2 % of a gated "
            f"test, which times far more than this one profiled run); "
            f"longest {max(readings)[0] * 1e3:.1f} ms ({max(readings)[1]})"
        )
    print(f"took {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
