"""Serving scenarios under MLPerf LoadGen (issue 37): each figure printed, under the load it ran at.

1. **Figures equal LoadGen's own summary.**  Every zoo model chosen runs every scenario
   (``serving.runner.run_scenario``, short runs); each reported figure — p50/p90/p99/p99.9 and mean
   latency, QPS, the early-stopping estimate, validity — is checked against the line LoadGen wrote
   in that run's ``mlperf_log_summary.txt``.
2. **Offline throughput vs a bare onnxruntime loop** at the same concurrency, on every model:
   LoadGen's Offline samples/s against threads that each call the same backend session back to
   back for the same wall time (``BackendSession.time``), in alternating order, the median of
   ``--repeats`` each; the ratio per model and concurrency, and the worst.
3. **Paired comparisons per zoo model** (``serving.compare.compare_models``, the gate's paired
   serving comparison, at ``--tolerance``): A/A (the model against itself: single-stream p99 and
   QPS, Offline QPS) — false ``regression`` verdicts with their 95 % upper bound; a *tail variant*
   (an ``If`` on ``RandomUniform`` runs the whole graph a second time on ``--tail-share`` of the
   queries: p99 about twice, median the model's own plus the draw) in single-stream — caught on
   p99?; a *throughput variant* (the same on ``--loss-share`` of the samples: ~13 % fewer samples/s)
   in Offline — caught on QPS?
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
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import onnx
from gate_under_load import _upper95
from onnx import TensorProto, helper, numpy_helper

from pytest_roofline.device.load import between, snapshot
from pytest_roofline.gate.noise import pressure
from pytest_roofline.pipeline import ModelCall, PreparedModel, prepare
from pytest_roofline.serving.compare import DEFAULT_WINDOWS, compare_models
from pytest_roofline.serving.logs import read_summary
from pytest_roofline.serving.runner import QPS_LINES, run_scenario
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


def _bare_loop(prepared: PreparedModel, concurrency: int, seconds: float) -> float:
    """Samples per second of ``concurrency`` threads running the session back to back."""
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
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    for session in sessions:
        session.close()
    return sum(counts) / elapsed


def _offline_vs_bare(
    prepared: PreparedModel, concurrency: int, duration: float, repeats: int, out: Path
) -> tuple[float, float]:
    """Medians of ``repeats`` Offline runs and bare loops, interleaved in alternating order."""
    loadgen: list[float] = []
    bare: list[float] = []
    settings = ScenarioSettings("offline", min_duration=duration, concurrency=concurrency)
    for repeat in range(repeats):
        for step in ("offline", "bare") if repeat % 2 == 0 else ("bare", "offline"):
            if step == "offline":
                result = run_scenario(prepared, settings, out / f"c{concurrency}-{repeat}")
                loadgen.append(result.achieved_qps or 0.0)
            else:
                bare.append(_bare_loop(prepared, concurrency, duration))
    return statistics.median(loadgen), statistics.median(bare)


def part_offline(models: dict[str, PreparedModel], duration: float, repeats: int, out: Path) -> None:
    print("2. Offline throughput vs a bare onnxruntime loop at the same concurrency (medians, alternated)")
    worst: tuple[float, str] = (float("inf"), "")
    for name, prepared in models.items():
        for concurrency in (1, 2):
            start = snapshot()
            offline_qps, loop_qps = _offline_vs_bare(prepared, concurrency, duration, repeats, out / name)
            load = pressure(between(start, snapshot()))
            ratio = offline_qps / loop_qps
            worst = min(worst, (ratio, f"{name} concurrency {concurrency}"))
            print(
                f"   {name:16s} concurrency {concurrency}: Offline {offline_qps:10.1f}/s,"
                f" bare loop {loop_qps:10.1f}/s, ratio {ratio:.3f} (load: others {load:.0%} of CPUs)"
            )
    print(f"   worst: {worst[1]} at {worst[0]:.3f} of the bare loop (target: >= 0.95)")


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
    duration: float,
    tolerance: float,
    out: Path,
) -> None:
    from pytest_roofline.serving.gate import WINDOW_QUERIES  # the gate's paired windows ask as many

    tail_share, loss_share = shares
    print(
        f"3. per zoo model, {runs} run(s) each, tolerance {tolerance:.0%}, {DEFAULT_WINDOWS} window pairs of"
        f" >= {duration:g} s: A/A (single-stream p99 + QPS, Offline QPS); a tail variant"
        f" ({tail_share:.0%} of queries run the model twice) in single-stream; a throughput variant"
        f" ({loss_share:.0%} of samples run it twice) in Offline"
    )
    single = ScenarioSettings("single-stream", min_duration=duration, min_query_count=WINDOW_QUERIES)
    offline = ScenarioSettings("offline", min_duration=duration)
    totals = {"aa": 0, "aa_false": 0, "tail": 0, "tail_caught": 0, "loss": 0, "loss_caught": 0}
    out.mkdir(parents=True, exist_ok=True)
    start = snapshot()
    for name, prepared in models.items():
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
        for run in range(runs):
            seed = 1000 * run
            at, off = dataclasses.replace(single, seed=seed), dataclasses.replace(offline, seed=seed)
            same = compare_models(prepared, prepared, at, out / f"{name}-aa-{run}", tolerance=tolerance)
            same_off = compare_models(prepared, prepared, off, out / f"{name}-aao-{run}", tolerance=tolerance)
            aa = [same.verdict("p99"), same.verdict("qps"), same_off.verdict("qps")]
            tail = compare_models(
                prepared, variants["tail"], at, out / f"{name}-tail-{run}", tolerance=tolerance
            )
            loss = compare_models(
                prepared, variants["loss"], off, out / f"{name}-loss-{run}", tolerance=tolerance
            )
            p99, p50, qps = tail.verdict("p99"), tail.verdict("p50"), loss.verdict("qps")
            totals["aa"] += len(aa)
            totals["aa_false"] += sum(v.status == "regression" for v in aa)
            totals["tail"] += 1
            totals["tail_caught"] += p99.status == "regression"
            totals["loss"] += 1
            totals["loss_caught"] += qps.status == "regression"
            print(
                f"   {name:16s} run {run}: A/A "
                + " ".join(f"{v.ratio:.3f} {v.status}" for v in aa)
                + f" | tail p99 {p99.ratio:.3f} [{p99.low:.3f}, {p99.high:.3f}] {p99.status}"
                f" (p50 {p50.ratio:.3f} {p50.status}) | Offline QPS {qps.ratio:.3f}"
                f" [{qps.low:.3f}, {qps.high:.3f}] {qps.status}"
            )
        load = pressure(between(model_start, snapshot()))
        print(f"   {name:16s} (load: others {load:.0%} of CPUs)")
    load = pressure(between(start, snapshot()))
    print(
        f"   A/A: {totals['aa_false']} false regression in {totals['aa']} verdicts (95 % upper bound"
        f" {_upper95(totals['aa_false'], totals['aa']):.1%}; the target asks for >= 300)"
    )
    print(
        f"   tail variant caught on p99 in {totals['tail_caught']}/{totals['tail']}; Offline throughput"
        f" variant caught in {totals['loss_caught']}/{totals['loss']} (load: others {load:.0%} of CPUs)"
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
    parser.add_argument("--repeats", type=int, default=3, help="part 2: Offline/bare pairs per model")
    parser.add_argument("--budget", type=float, default=10.0, help="part 4: a search's budget, s")
    parser.add_argument("--search-models", default="tiny_cnn,mobilenet_v2")
    parser.add_argument("--parts", default="1234")
    parser.add_argument("--runs", type=int, default=2, help="part 3: comparisons of each kind per model")
    parser.add_argument("--window", type=float, default=0.25, help="part 3: a window's min duration, s")
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
        part_offline(models, args.duration, args.repeats, out / "offline")
    if "3" in args.parts:
        shares = (args.tail_share, args.loss_share)
        part_variants(models, paths, args.runs, shares, args.window, args.tolerance / 100, out / "variants")
    if "4" in args.parts:
        part_search(searched, args.budget, out / "search")
    print(
        f"(all parts: {time.perf_counter() - started:.0f} s; load average at end {os.getloadavg()[0]:.1f};"
        f" LoadGen logs under {out})"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
