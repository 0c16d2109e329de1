"""Serving scenarios under MLPerf LoadGen (issue 37): each figure printed, under the load it ran at.

1. **Figures equal LoadGen's own summary.**  Every zoo model chosen runs every scenario
   (``serving.runner.run_scenario``, short runs); each reported figure — p50/p90/p99/p99.9 and mean
   latency, QPS, the early-stopping estimate, validity — is checked against the line LoadGen wrote
   in that run's ``mlperf_log_summary.txt``.
2. **Offline throughput vs a bare onnxruntime loop** at the same concurrency: LoadGen's Offline
   samples/s against threads that each call the same backend session back to back for the same
   wall time (``BackendSession.time``), interleaved, the median of ``--repeats`` each.
3. **Paired A/A tail comparisons** (``serving.compare.compare_models``, a model against itself in
   single-stream): false ``regression`` verdicts among p50/p99/QPS verdicts, with the 95 % upper
   bound; and the slower zoo variant (``zoo.slower_variant``, the heaviest layer computed twice)
   caught.
4. **A Server QPS search decides within its budget**: the wall time of ``--budget`` s searches.
5. **A tail regression and a throughput loss**: a MatMul chain against its *tail variant* (an
   ``If`` on ``RandomUniform`` runs a 2x-longer chain on ``--slow-share`` of the queries: p99
   worse, median the same up to the If's few microseconds), paired in single-stream — p99 caught,
   p50 called regression; and against a chain one block longer (+12.5 % work), paired in Offline —
   QPS caught.

The machine's load around each part is printed (others' share of our CPUs, ``device.load``): on a
shared machine every figure here was measured beside whatever else ran.

Usage::

    python benchmarks/load_quality.py [--models tiny_mlp,tiny_cnn,...] [--duration 0.5] [--aa 10]
"""

from __future__ import annotations

import argparse
import dataclasses
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
from pytest_roofline.serving.compare import compare_models
from pytest_roofline.serving.logs import read_summary
from pytest_roofline.serving.runner import QPS_LINES, run_scenario
from pytest_roofline.serving.types import SCENARIOS, ScenarioResult, ScenarioSettings
from pytest_roofline.zoo import slower_variant, write_zoo, zoo_model

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


def part_offline(models: dict[str, PreparedModel], duration: float, repeats: int, out: Path) -> None:
    print("2. Offline throughput vs a bare onnxruntime loop at the same concurrency (medians, interleaved)")
    for name, prepared in models.items():
        for concurrency in (1, 2):
            start, loadgen, bare = snapshot(), [], []
            for repeat in range(repeats):
                settings = ScenarioSettings("offline", min_duration=duration, concurrency=concurrency)
                result = run_scenario(prepared, settings, out / f"{name}-c{concurrency}-{repeat}")
                loadgen.append(result.achieved_qps or 0.0)
                bare.append(_bare_loop(prepared, concurrency, duration))
            load = pressure(between(start, snapshot()))
            offline, loop = statistics.median(loadgen), statistics.median(bare)
            print(
                f"   {name:16s} concurrency {concurrency}: Offline {offline:10.1f}/s,"
                f" bare loop {loop:10.1f}/s, ratio {offline / loop:.3f} (load: others {load:.0%} of CPUs)"
            )


def part_paired(models: dict[str, PreparedModel], paths: dict[str, Path], runs: int, out: Path) -> None:
    print("3. paired comparisons in single-stream (6 window pairs each, 0.25 s windows)")
    settings = ScenarioSettings("single-stream", min_duration=0.25, min_query_count=16)
    aa_total = aa_false = slow_total = slow_caught = 0
    start = snapshot()
    out.mkdir(parents=True, exist_ok=True)
    for name, prepared in models.items():
        proto = onnx.load(str(paths[name]))
        slow_path = out / f"{name}-slower.onnx"
        onnx.save(slower_variant(proto, dims=dict(zoo_model(name).dims)), str(slow_path))
        slow = prepare(ModelCall(str(slow_path), dims=dict(zoo_model(name).dims), options=OPTIONS))
        for run in range(runs):
            at = dataclasses.replace(settings, seed=100 * run)
            same = compare_models(prepared, prepared, at, out / f"{name}-aa-{run}")
            aa_total += len(same.metrics)
            aa_false += sum(m.status == "regression" for m in same.metrics)
            slower = compare_models(prepared, slow, at, out / f"{name}-slow-{run}")
            p50 = slower.verdict("p50")
            slow_total, slow_caught = slow_total + 1, slow_caught + (p50.status == "regression")
            print(
                f"   {name:16s} run {run}: A/A "
                + " ".join(f"{m.metric} {m.ratio:.3f} {m.status}" for m in same.metrics)
                + f" | slower variant p50 {p50.ratio:.3f} [{p50.low:.3f}, {p50.high:.3f}] {p50.status}"
            )
    load = pressure(between(start, snapshot()))
    print(
        f"   A/A: {aa_false} false regression in {aa_total} verdicts (95 % upper bound "
        f"{_upper95(aa_false, aa_total):.1%}); slower variant caught on p50 in {slow_caught}/{slow_total} "
        f"(load: others {load:.0%} of CPUs)"
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


def _chain(nodes: list, inits: list, source: str, blocks: int, size: int, prefix: str, seed: int) -> str:
    """``blocks`` MatMul+Relu from ``source``; returns the last output's name."""
    rng, previous = np.random.default_rng(seed), source
    for i in range(blocks):
        weight = rng.standard_normal((size, size)).astype(np.float32) / size**0.5
        inits.append(numpy_helper.from_array(weight, f"{prefix}w{i}"))
        nodes.append(helper.make_node("MatMul", [previous, f"{prefix}w{i}"], [f"{prefix}m{i}"]))
        nodes.append(helper.make_node("Relu", [f"{prefix}m{i}"], [f"{prefix}r{i}"]))
        previous = f"{prefix}r{i}"
    return previous


def chain_model(blocks: int = 8, size: int = 512, slow_share: float = 0.0) -> onnx.ModelProto:
    """A MatMul chain; with ``slow_share`` its tail variant: on that share of the queries (drawn by
    ``RandomUniform`` at each run) an ``If`` also runs a chain twice as long, its sum added x 1e-9."""
    nodes: list = []
    inits: list = []
    out = _chain(nodes, inits, "x", blocks, size, "b", 0)
    scalar = [helper.make_tensor_value_info("t", TensorProto.FLOAT, [])]
    if slow_share:
        slow_nodes: list = []
        slow_inits: list = []
        heavy = _chain(slow_nodes, slow_inits, "x", 2 * blocks, size, "h", 1)
        slow_nodes.append(helper.make_node("ReduceSum", [heavy], ["t"], keepdims=0))
        zero = numpy_helper.from_array(np.array(0.0, np.float32))
        inits += [
            numpy_helper.from_array(np.array([slow_share], np.float32), "share"),
            numpy_helper.from_array(np.array(1e-9, np.float32), "tiny"),
        ]
        nodes += [
            helper.make_node("RandomUniform", [], ["u"], shape=[1], dtype=TensorProto.FLOAT),
            helper.make_node("Less", ["u", "share"], ["c1"]),
            helper.make_node("Squeeze", ["c1"], ["c"]),
            helper.make_node(
                "If",
                ["c"],
                ["z"],
                then_branch=helper.make_graph(slow_nodes, "slow", [], scalar, slow_inits),
                else_branch=helper.make_graph(
                    [helper.make_node("Constant", [], ["t"], value=zero)], "fast", [], scalar
                ),
            ),
            helper.make_node("Mul", ["z", "tiny"], ["zs"]),
            helper.make_node("Add", [out, "zs"], ["y"]),
        ]
    else:
        nodes.append(helper.make_node("Identity", [out], ["y"]))
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, size]) for n in ("x", "y")]
    graph = helper.make_graph(nodes, "chain", io[:1], io[1:], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def part_variants(runs: int, slow_share: float, out: Path) -> None:
    print(f"5. a tail variant ({slow_share:.0%} of queries 3x) in single-stream, +12.5 % work in Offline")
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, proto in (
        ("base", chain_model()),
        ("tail", chain_model(slow_share=slow_share)),
        ("longer", chain_model(blocks=9)),
    ):
        onnx.save(proto, str(out / f"{name}.onnx"))
        paths[name] = prepare(ModelCall(str(out / f"{name}.onnx"), options=OPTIONS))
    single = ScenarioSettings("single-stream", min_duration=0.5, min_query_count=200)
    offline = ScenarioSettings("offline", min_duration=0.5)
    start, tail_caught, median_flagged, qps_caught = snapshot(), 0, 0, 0
    for run in range(runs):
        at = dataclasses.replace(single, seed=100 * run)
        tail = compare_models(paths["base"], paths["tail"], at, out / f"tail-{run}")
        p99, p50 = tail.verdict("p99"), tail.verdict("p50")
        tail_caught += p99.status == "regression"
        median_flagged += p50.status == "regression"
        loss = compare_models(
            paths["base"], paths["longer"], dataclasses.replace(offline, seed=run), out / f"x-{run}"
        )
        qps = loss.verdict("qps")
        qps_caught += qps.status == "regression"
        print(
            f"   run {run}: tail p99 {p99.ratio:.3f} [{p99.low:.3f}, {p99.high:.3f}] {p99.status},"
            f" p50 {p50.ratio:.3f} {p50.status} | Offline +12.5 % QPS {qps.ratio:.3f}"
            f" [{qps.low:.3f}, {qps.high:.3f}] {qps.status}"
        )
    load = pressure(between(start, snapshot()))
    print(
        f"   tail variant caught on p99 in {tail_caught}/{runs}, its unchanged median called regression in"
        f" {median_flagged}/{runs}; Offline throughput loss caught in {qps_caught}/{runs}"
        f" (load: others {load:.0%} of CPUs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--duration", type=float, default=0.5, help="LoadGen's min duration, s")
    parser.add_argument("--repeats", type=int, default=3, help="Offline/bare pairs per model")
    parser.add_argument("--aa", type=int, default=4, help="A/A and slower comparisons per model")
    parser.add_argument("--paired-models", default="tiny_cnn,mobilenet_v2")
    parser.add_argument("--budget", type=float, default=10.0)
    parser.add_argument("--parts", default="12345")
    parser.add_argument("--variant-runs", type=int, default=4, help="part 5's comparisons of each kind")
    parser.add_argument(
        "--slow-share", type=float, default=0.03, help="part 5: queries the tail variant slows"
    )
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="load-quality-"))
    names = args.models.split(",")
    paths = write_zoo(out / "zoo", names)
    models = {name: _prepared(paths[name], name) for name in names}
    paired = {name: models[name] for name in args.paired_models.split(",") if name in models}
    started = time.perf_counter()
    if "1" in args.parts:
        part_summary(models, args.duration, out / "summary")
    if "2" in args.parts:
        part_offline(paired, args.duration, args.repeats, out / "offline")
    if "3" in args.parts:
        part_paired(paired, paths, args.aa, out / "paired")
    if "4" in args.parts:
        part_search(paired, args.budget, out / "search")
    if "5" in args.parts:
        part_variants(args.variant_runs, args.slow_share, out / "variants")
    print(f"(all parts: {time.perf_counter() - started:.0f} s; LoadGen logs under {out})")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
