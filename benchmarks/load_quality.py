"""Serving scenarios under MLPerf LoadGen (issue 37): each figure printed, under the load it ran at.

1. **Figures equal LoadGen's own summary.**  Every zoo model chosen runs every scenario
   (``serving.runner.run_scenario``, short runs); each reported figure — p50/p90/p99/p99.9 and mean
   latency, QPS, the early-stopping estimate, validity — is checked against the line LoadGen wrote
   in that run's ``mlperf_log_summary.txt``.
2. **Offline throughput vs a bare onnxruntime loop** at the same concurrency, on every model:
   ``--repeats`` pairs (order alternating) of an Offline LoadGen test and threads that each call
   the same backend session back to back for ``--pair-duration`` s; per pair the ratio of samples
   per second of wall time, and of samples per second of this process's CPU time (LoadGen's
   threads included: the runner's own cost, which other processes' time slices do not enter);
   the median ratio and its sign-test interval per model and concurrency: ``within`` 5 % shown
   (interval above 0.95), ``short`` (below), or ``unresolved``.
3. **Paired comparisons per zoo model** (``serving.compare.compare_models``, the gate's paired
   serving comparison: both models answer each of 20 LoadGen windows in turn, at ``--tolerance``):
   A/A (the model against itself: single-stream p99 and QPS, Offline QPS) — false ``regression``
   verdicts with their 95 % upper bound; a *tail variant* (an ``If`` on ``RandomUniform`` runs the
   whole graph a second time on ``--tail-share`` of the queries: its slowest queries twice as
   long, the median the model's own plus the draw) in single-stream — caught on p99?; a
   *throughput variant* (the same on ``--loss-share`` of the samples) in Offline — caught on QPS?
   The clock each comparison judged (``wall``, or ``cpu`` where the CPUs were shared) is printed.
   ``--aa-only`` runs the A/A comparisons alone; ``--deadline`` starts no model past it.
4. **A Server QPS search decides within its budget**: the wall time of ``--budget`` s searches.

The machine's load around each part is printed (others' share of our CPUs, ``device.load``): on a
shared machine every figure here was measured beside whatever else ran.

Usage::

    python benchmarks/load_quality.py [--models tiny_mlp,tiny_cnn,...] [--parts 1234] [--runs 2]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import os
import statistics
import sys
import tempfile
import threading
import time
import timeit
from pathlib import Path

import numpy as np
import onnx
from gate_under_load import _upper95
from onnx import TensorProto, helper, numpy_helper

from pytest_roofline.device.load import between, snapshot
from pytest_roofline.gate.noise import pressure
from pytest_roofline.pipeline import ModelCall, PreparedModel, prepare
from pytest_roofline.serving.budget import TAIL_QUERIES
from pytest_roofline.serving.compare import (
    DEFAULT_WINDOWS,
    ScenarioComparison,
    compare_models,
    order_interval,
)
from pytest_roofline.serving.logs import read_summary
from pytest_roofline.serving.runner import (
    MAX_CHUNK,
    QPS_LINES,
    Workers,
    load_loadgen,
    run_scenario,
    run_window,
)
from pytest_roofline.serving.types import SCENARIOS, ScenarioResult, ScenarioSettings
from pytest_roofline.zoo import write_zoo, zoo_model

MODELS = "tiny_mlp,tiny_cnn,mobilenet_v2,efficientnet,tcn,einsum_attention,moe,lstm_gru"
OPTIONS = {"intra_op_threads": "1"}


def _prepared(path: Path, name: str) -> PreparedModel:
    return prepare(ModelCall(str(path), dims=dict(zoo_model(name).dims), options=OPTIONS))


def _mismatches(result: ScenarioResult) -> list[str]:
    """The figures of ``result`` that differ from its run's summary log."""
    summary = read_summary(Path(result.summary_log))
    wrong = []
    for name, line in (("p50", "50.00"), ("p90", "90.00"), ("p99", "99.00"), ("p999", "99.90")):
        if getattr(result, name) != int(summary[f"{line} percentile latency (ns)"]) * 1e-9:
            wrong.append(name)
    if result.mean != int(summary["Mean latency (ns)"]) * 1e-9:
        wrong.append("mean")
    qps_line = QPS_LINES.get(result.scenario)
    if (float(summary[qps_line]) if qps_line else None) != result.achieved_qps:
        wrong.append("qps")
    if result.tail_percentile is not None:
        key = f"Early stopping {result.tail_percentile * 100:.1f}th percentile estimate"
        expected = int(summary[key]) * 1e-9 if key in summary else None
        if expected != result.early_stopping_estimate:
            wrong.append("early-stopping")
    if result.valid != (summary["Result is"] == "VALID"):
        wrong.append("validity")
    return wrong


def part_summary(models: dict[str, PreparedModel], duration: float, out: Path) -> None:
    print("1. reported figures vs LoadGen's own summary (every scenario, every model)")
    start, checked, wrong = snapshot(), 0, 0
    for name, prepared in models.items():
        for scenario in SCENARIOS:
            extra = {"target_qps": 50.0} if scenario == "server" else {}
            settings = ScenarioSettings(scenario, min_duration=duration, min_query_count=16, **extra)
            result = run_scenario(prepared, settings, out / name / scenario)
            bad = _mismatches(result)
            checked, wrong = checked + 1, wrong + bool(bad)
            qps = f"{result.achieved_qps:10.1f}" if result.achieved_qps is not None else f"{'-':>10}"
            same = "equal" if not bad else "DIFFERS: " + ",".join(bad)
            print(
                f"   {name:16s} {scenario:13s} {result.query_count:6d} queries"
                f"  p50 {result.p50 * 1e3:9.3f} ms  p99 {result.p99 * 1e3:9.3f} ms  QPS {qps}  {same}"
            )
    load = pressure(between(start, snapshot()))
    print(
        f"   {checked} runs, {wrong} with any figure differing from the summary"
        f" (load: others {load:.0%} of CPUs)"
    )


def _bare_loop(prepared: PreparedModel, concurrency: int, seconds: float) -> tuple[float, float]:
    """Samples per second of ``concurrency`` threads running the session back to back, and samples
    per second of this process's CPU time over the same stretch."""
    sessions = [prepared.open() for _ in range(concurrency)]
    counts = [0] * concurrency
    for session in sessions:
        session.time(3)
    barrier = threading.Barrier(concurrency + 1)

    def work(index: int) -> None:
        barrier.wait()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            sessions[index].time(8)
            counts[index] += 8

    threads = [threading.Thread(target=work, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    barrier.wait()
    began, cpu = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.join()
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    for session in sessions:
        session.close()
    return sum(counts) / elapsed, sum(counts) / cpu


def _offline(prepared: PreparedModel, settings: ScenarioSettings, out: Path) -> tuple[float, float]:
    """LoadGen's Offline samples per second, and samples per second of this process's CPU time
    over its test (LoadGen's threads included; the sessions are opened and warmed before)."""
    with Workers(prepared, settings.concurrency, load_loadgen()) as workers:
        latency = workers.expected_latency()
        cpu = time.process_time()
        result = run_window(workers, prepared, settings, out, latency)
        cpu = time.process_time() - cpu
        samples = sum(count for _, _, count in workers.timings)
    return result.achieved_qps or 0.0, samples / cpu


def _offline_vs_bare(
    prepared: PreparedModel, concurrency: int, duration: float, repeats: int, out: Path
) -> tuple[list[float], list[float]]:
    """``repeats`` pairs of an Offline run and a bare loop back to back, the order alternating:
    each pair's ratios (LoadGen's Offline over the loop's) of samples per second of wall time and
    of this process's CPU time."""
    walls: list[float] = []
    cpus: list[float] = []
    settings = ScenarioSettings("offline", min_duration=duration, min_query_count=16, concurrency=concurrency)
    for repeat in range(repeats):
        figures: dict[str, tuple[float, float]] = {}
        for step in ("offline", "bare") if repeat % 2 == 0 else ("bare", "offline"):
            if step == "offline":
                figures[step] = _offline(prepared, settings, out / f"c{concurrency}-{repeat}")
            else:
                figures[step] = _bare_loop(prepared, concurrency, duration)
        walls.append(figures["offline"][0] / figures["bare"][0])
        cpus.append(figures["offline"][1] / figures["bare"][1])
    return walls, cpus


def response_cost(chunk: int = MAX_CHUNK, rounds: int = 2000) -> float:
    """Seconds a sample's completion costs in LoadGen's Python API alone: ``chunk`` ``QuerySampleResponse``
    objects made and converted to LoadGen's vector (what ``QuerySamplesComplete`` does with its list),
    the fastest of 5 repeats of ``rounds`` chunks, per sample.  The API has no call that completes a
    chunk of samples without one response object each (``VectorQuerySampleResponse`` is built from
    them; ``QuerySamplesComplete``'s ``response_cb`` is called per response)."""
    lg = load_loadgen()
    response, vector, ids = lg.QuerySampleResponse, lg.VectorQuerySampleResponse, list(range(chunk))

    def complete() -> None:
        vector([response(sample_id, 0, 0) for sample_id in ids])

    return min(timeit.repeat(complete, number=rounds, repeat=5)) / (rounds * chunk)


def _within(ratios: list[float]) -> tuple[str, str, float]:
    """A ratio set's median and sign-test interval as text, its verdict against 0.95, its low end."""
    low, high, _ = order_interval(ratios)
    verdict = "within" if low >= 0.95 else "short" if high < 0.95 else "unresolved"
    if low > 1.05:  # LoadGen cannot run the same sessions faster than a bare loop does
        verdict = "FASTER THAN THE BARE LOOP: not physical, the load's noise"
    return f"{statistics.median(ratios):.3f} [{low:.3f}, {high:.3f}]", verdict, low


def part_offline(models: dict[str, PreparedModel], duration: float, repeats: int, out: Path) -> None:
    print(
        f"2. Offline throughput vs a bare onnxruntime loop at the same concurrency: {repeats} alternated"
        f" pairs of {duration:g} s, the median ratio and its sign-test interval (target: within 5 %),"
        " of wall-clock samples/s and of samples per CPU-second of this process (LoadGen's threads"
        " included: the runner's own cost, which other processes' time slices do not enter)"
    )
    worst: dict[str, tuple[float, str]] = {}
    verdicts: dict[str, dict[str, int]] = {}
    per_sample = response_cost()
    for name, prepared in models.items():
        with prepared.open() as session:
            inference = statistics.median(session.time(200))
        print(
            f"   {name:16s} one inference {inference * 1e6:9.1f} us; LoadGen's response object alone"
            f" {per_sample * 1e6:.2f} us a sample: Offline/bare at most"
            f" {inference / (inference + per_sample):.3f} in CPU time from it"
        )
        for concurrency in (1, 2):
            start = snapshot()
            walls, cpus = _offline_vs_bare(prepared, concurrency, duration, repeats, out / name)
            load = pressure(between(start, snapshot()))
            line = []
            for clock, ratios in (("wall", walls), ("cpu", cpus)):
                text, verdict, low = _within(ratios)
                tally = verdicts.setdefault(
                    clock, {"within": 0, "short": 0, "unresolved": 0, "not physical": 0}
                )
                tally[verdict if verdict in tally else "not physical"] += 1
                worst[clock] = min(
                    worst.get(clock, (math.inf, "")), (low, f"{name} concurrency {concurrency}")
                )
                line.append(f"{clock} {text} {verdict}")
            print(
                f"   {name:16s} concurrency {concurrency}: Offline/bare "
                + "; ".join(line)
                + f" (load: others {load:.0%} of CPUs, load average {os.getloadavg()[0]:.1f})"
            )
    for clock, tally in verdicts.items():
        low, where = worst[clock]
        print(
            f"   {clock}: within 5 % shown {tally['within']}, short of it shown {tally['short']},"
            f" unresolved {tally['unresolved']}, not physical {tally['not physical']};"
            f" lowest interval end {low:.3f} ({where})"
        )


def tail_variant(proto: onnx.ModelProto, share: float) -> onnx.ModelProto:
    """``proto`` with an input-independent slow branch: on ``share`` of the runs (``RandomUniform``
    drawn at each run) an ``If`` runs the whole graph a second time, its sum an extra output.  The
    median run is the model's own plus a few microseconds of the draw and the If; ``share`` 0.03
    makes the p99 about twice the model's, ``share`` 0.15 costs about 15 % of the throughput."""
    model = copy.deepcopy(proto)
    graph = model.graph
    produced = {o for n in graph.node for o in n.output if o} | {t.name for t in graph.initializer}
    rename = {name: f"tail_{name}" for name in produced}
    nodes = []
    for node in graph.node:
        twin = copy.deepcopy(node)
        twin.name = f"tail_{node.name}"
        twin.input[:] = [rename.get(i, i) for i in node.input]
        twin.output[:] = [rename.get(o, o) for o in node.output]
        nodes.append(twin)
    inits = []
    for tensor in graph.initializer:
        twin = copy.deepcopy(tensor)
        twin.name = rename[tensor.name]
        inits.append(twin)
    nodes.append(helper.make_node("Cast", [rename[graph.output[0].name]], ["tail_f"], to=TensorProto.FLOAT))
    nodes.append(helper.make_node("ReduceSum", ["tail_f"], ["tail_t"], keepdims=0))
    scalar = [helper.make_tensor_value_info("tail_t", TensorProto.FLOAT, [])]
    zero = numpy_helper.from_array(np.array(0.0, np.float32))
    graph.initializer.append(numpy_helper.from_array(np.array([share], np.float32), "tail_share"))
    graph.node.extend(
        [
            helper.make_node("RandomUniform", [], ["tail_u"], shape=[1], dtype=TensorProto.FLOAT),
            helper.make_node("Less", ["tail_u", "tail_share"], ["tail_c1"]),
            helper.make_node("Squeeze", ["tail_c1"], ["tail_c"]),
            helper.make_node(
                "If",
                ["tail_c"],
                ["tail_z"],
                then_branch=helper.make_graph(nodes, "slow", [], scalar, inits),
                else_branch=helper.make_graph(
                    [helper.make_node("Constant", [], ["tail_t"], value=zero)], "fast", [], scalar
                ),
            ),
        ]
    )
    graph.output.append(helper.make_tensor_value_info("tail_z", TensorProto.FLOAT, []))
    return model


def _has_subgraphs(proto: onnx.ModelProto) -> bool:
    graphs = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    return any(a.type in graphs for n in proto.graph.node for a in n.attribute)


def part_variants(
    models: dict[str, PreparedModel],
    paths: dict[str, Path],
    runs: int,
    shares: tuple[float, float],
    window: tuple[float, int],
    tolerance: float,
    out: Path,
    deadline: float,
    aa_only: bool = False,
) -> None:
    tail_share, loss_share = shares
    duration, queries = window
    print(
        f"3. per zoo model, {runs} run(s) each, tolerance {tolerance:.0%}, {DEFAULT_WINDOWS} shared"
        f" windows of >= {duration:g} s and >= {queries} queries (both models in turn):"
        f" A/A (single-stream p99 + QPS,"
        f" Offline QPS); a tail variant ({tail_share:.0%} of queries run the model twice) in single-stream;"
        f" a throughput variant ({loss_share:.0%} of samples run it twice) in Offline"
    )
    single = ScenarioSettings("single-stream", min_duration=duration, min_query_count=queries)
    offline = ScenarioSettings("offline", min_duration=duration, min_query_count=queries)
    totals = {"aa": 0, "aa_false": 0, "aa_pass": 0, "tail": 0, "tail_caught": 0, "loss": 0, "loss_caught": 0}
    per_model: dict[str, list[int]] = {}
    median_moved = 0
    out.mkdir(parents=True, exist_ok=True)
    start = snapshot()
    for name, prepared in models.items():
        if time.monotonic() > deadline:
            print(f"   {name:16s} not run: the run's --deadline passed")
            continue
        proto = onnx.load(str(paths[name]))
        if _has_subgraphs(proto):
            print(f"   {name:16s} skipped: its graph has subgraphs, which the variant's copy does not rename")
            continue
        dims = dict(zoo_model(name).dims)
        variants = {}
        for kind, share in (("tail", tail_share), ("loss", loss_share)):
            path = out / f"{name}-{kind}.onnx"
            onnx.save(tail_variant(proto, share), str(path))
            variants[kind] = prepare(ModelCall(str(path), dims=dims, options=OPTIONS))
        model_start = snapshot()
        caught = per_model.setdefault(name, [0, 0])
        for run in range(runs):

            def compare(new: PreparedModel, settings: ScenarioSettings, label: str) -> ScenarioComparison:
                at = dataclasses.replace(settings, seed=1000 * run)  # noqa: B023 - called in this run
                where = out / f"{name}-{label}-{run}"  # noqa: B023
                return compare_models(prepared, new, at, where, tolerance=tolerance, alone=False)  # noqa: B023

            same, same_off = compare(prepared, single, "aa"), compare(prepared, offline, "aao")
            aa = [same.verdict("p99"), same.verdict("qps"), same_off.verdict("qps")]
            totals["aa"] += len(aa)
            totals["aa_false"] += sum(v.status == "regression" for v in aa)
            totals["aa_pass"] += sum(v.status == "pass" for v in aa)
            if aa_only:
                print(
                    f"   {name:16s} run {run} ({same.clock} clock): A/A "
                    + " ".join(f"{v.metric} {v.ratio:.3f} [{v.low:.3f}, {v.high:.3f}] {v.status}" for v in aa)
                )
                continue
            tail, loss = compare(variants["tail"], single, "tail"), compare(variants["loss"], offline, "loss")
            p99, p50, qps = tail.verdict("p99"), tail.verdict("p50"), loss.verdict("qps")
            totals["tail"] += 1
            totals["tail_caught"] += p99.status == "regression"
            totals["loss"] += 1
            totals["loss_caught"] += qps.status == "regression"
            caught[0] += (p99.status == "regression") + (qps.status == "regression")
            caught[1] += 2
            median_moved += p50.ratio > 1 + tolerance
            print(
                f"   {name:16s} run {run} ({tail.clock} clock): A/A "
                + " ".join(f"{v.ratio:.3f} {v.status}" for v in aa)
                + f" | tail p99 {p99.ratio:.3f} [{p99.low:.3f}, {p99.high:.3f}] {p99.status}"
                f" (p50 {p50.ratio:.3f}; {tail.old[0].queries} queries a side a window)"
                f" | Offline QPS {qps.ratio:.3f} [{qps.low:.3f}, {qps.high:.3f}] {qps.status}"
            )
        load = pressure(between(model_start, snapshot()))
        print(f"   {name:16s} (load: others {load:.0%} of CPUs, load average {os.getloadavg()[0]:.1f})")
    load = pressure(between(start, snapshot()))
    print(
        f"   A/A: {totals['aa_false']} false regression in {totals['aa']} verdicts (95 % upper bound"
        f" {_upper95(totals['aa_false'], totals['aa']):.1%}; the target asks for >= 300),"
        f" {totals['aa_pass']} pass"
    )
    worst = min(per_model.items(), key=lambda item: item[1][0] / max(item[1][1], 1), default=("-", [0, 0]))
    print(
        f"   tail variant caught on p99 in {totals['tail_caught']}/{totals['tail']} (its p50 moved past the"
        f" tolerance in {median_moved}); Offline throughput variant caught in"
        f" {totals['loss_caught']}/{totals['loss']}; worst model {worst[0]} ({worst[1][0]}/{worst[1][1]})"
        f" (load: others {load:.0%} of CPUs)"
    )


def part_search(models: dict[str, PreparedModel], budget: float, out: Path) -> None:
    print(f"4. Server QPS search under a p99 bound of 50 ms, budget {budget:g} s")
    for name, prepared in models.items():
        start, began = snapshot(), time.perf_counter()
        settings = ScenarioSettings("server", p99_bound=0.05, min_duration=0.5, min_query_count=16)
        result = run_scenario(prepared, settings, out / f"{name}-search", budget=budget)
        wall = time.perf_counter() - began
        load = pressure(between(start, snapshot()))
        best = max((q for q, met in result.searched if met), default=None)
        print(
            f"   {name:16s} decided in {wall:5.1f} s ({len(result.searched)} LoadGen runs):"
            f" highest QPS meeting the bound {best if best is not None else 'none'}"
            f" (load: others {load:.0%} of CPUs)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--duration", type=float, default=0.5, help="LoadGen's min duration, s")
    parser.add_argument("--repeats", type=int, default=12, help="part 2: Offline/bare pairs per model")
    parser.add_argument("--pair-duration", type=float, default=0.3, help="part 2: each run of a pair, s")
    parser.add_argument("--budget", type=float, default=10.0, help="part 4: a search's budget, s")
    parser.add_argument("--search-models", default="tiny_cnn,mobilenet_v2")
    parser.add_argument("--parts", default="1234")
    parser.add_argument("--aa-only", action="store_true", help="part 3: the A/A comparisons only")
    parser.add_argument(
        "--deadline", type=float, default=480.0, help="part 3: start no model after this many seconds"
    )
    parser.add_argument("--runs", type=int, default=2, help="part 3: comparisons of each kind per model")
    parser.add_argument("--window", type=float, default=0.25, help="part 3: a window's min duration, s")
    parser.add_argument(
        "--window-queries",
        type=int,
        default=2 * math.ceil(TAIL_QUERIES / DEFAULT_WINDOWS),
        help="part 3: a window's min query count, both models (default: the gate's, %(default)s)",
    )
    parser.add_argument("--tolerance", type=float, default=5.0, help="part 3: the gate's tolerance, %%")
    parser.add_argument(
        "--tail-share", type=float, default=0.03, help="part 3: queries the tail variant slows"
    )
    parser.add_argument(
        "--loss-share", type=float, default=0.15, help="part 3: samples the Offline variant slows"
    )
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="load-quality-"))
    names = args.models.split(",")
    paths = write_zoo(out / "zoo", names)
    models = {name: _prepared(paths[name], name) for name in names}
    searched = {name: models[name] for name in args.search_models.split(",") if name in models}
    started = time.perf_counter()
    print(f"load average at start: {os.getloadavg()[0]:.1f} (2-core VM shared with other work)")
    if "1" in args.parts:
        part_summary(models, args.duration, out / "summary")
    if "2" in args.parts:
        part_offline(models, args.pair_duration, args.repeats, out / "offline")
    if "3" in args.parts:
        shares = (args.tail_share, args.loss_share)
        window = (args.window, args.window_queries)
        deadline = time.monotonic() + args.deadline
        tolerance = args.tolerance / 100
        part_variants(
            models, paths, args.runs, shares, window, tolerance, out / "variants", deadline, args.aa_only
        )
    if "4" in args.parts:
        part_search(searched, args.budget, out / "search")
    print(
        f"(all parts: {time.perf_counter() - started:.0f} s; load average at end {os.getloadavg()[0]:.1f};"
        f" LoadGen logs under {out})"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
