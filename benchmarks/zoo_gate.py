"""The gate on a model zoo, as a new user meets it: issue 20's targets, each figure printed.

One generated project holds one parametrized test per zoo model (``model_profile(path, dims=...)``
and a latency assertion), every run its own pytest process at default options:

1. the baselines are recorded with ``--roofline-update`` (the calibration is cached before);
2. ``--runs`` unchanged runs on a quiet machine, and as many with one busy process beside pytest
   (``python -c 'while True: pass'``): verdict counts per run and in total;
3. every model swapped for its slower variant (a duplicated heavy MatMul/Conv added back x1e-9,
   ``zoo.suite.slower_variant``), whose true slowdown is measured first at one thread with an
   interleaved A/B in onnxruntime: those at >= 6.5 % should be caught as ``regression``;
4. every model swapped for a re-saved copy (same graph, other bytes): never a regression;
5. wall times: each test's (JUnit), the suite's, one test alone from process start (a model of at
   most 10 ms, unchanged and changed);
6. the same suite under pytest-benchmark (``benchmark(session.run, ...)``, default options, saved,
   then compared with ``--benchmark-compare-fail=median:5%``): wall time and false alarms.

Usage::

    python benchmarks/zoo_gate.py                       # the whole zoo, 2 runs each
    python benchmarks/zoo_gate.py --models bert,resnet50 --runs 3
    python benchmarks/zoo_gate.py --quick               # 3 models, 1 run each: a smoke run
    python benchmarks/zoo_gate.py --models vit_b16,bert_base,whisper_tiny --runs 1 --changed-runs 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gate_quality import paired_slowdown  # noqa: E402
from gate_quality import pytest_run as run  # noqa: E402
from gate_trials import busy_neighbour  # noqa: E402

STATUSES = ("unchanged", "pass", "inconclusive", "regression", "improved")
CATCH_FROM = 0.065  # a variant this much slower at one thread should be caught
QUICK_MODELS = 3
#: A slower variant duplicates the heaviest weight-fed nodes until the copies add this share of the MACs.
SLOWER_MACS = 0.07


def models_json_test(assertion: str) -> str:
    """A test file that profiles every model ``models.json`` names (``{name: [path, dims]}``), one
    test each, then checks ``assertion`` on ``prof``."""
    return f"""
import json
import pytest

MODELS = json.loads(open("models.json").read())

@pytest.mark.parametrize("name", sorted(MODELS))
def test_model(model_profile, name):
    path, dims = MODELS[name]
    prof = model_profile(path, dims=dims or None)
    {assertion}
"""


ROOFLINE_TEST = models_json_test(
    "assert prof.latency.median < 30.0  # seconds: the test's own assertion, never the one that fails"
)

BENCHMARK_TEST = """
import json
import onnxruntime as ort
import pytest
from pytest_roofline.model import bind_input_shapes, load_model, make_inputs

MODELS = json.loads(open("models.json").read())

@pytest.mark.parametrize("name", sorted(MODELS))
def test_model(benchmark, name):
    path, dims = MODELS[name]
    model = load_model(path)
    feeds = make_inputs(model, bind_input_shapes(model, None, dims))
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    benchmark(session.run, None, feeds)
"""


@dataclass(frozen=True)
class Zoo:
    """The models and the transformations the benchmark needs (``pytest_roofline.zoo.suite``)."""

    dims: dict[str, dict[str, int]]  # name -> dims to bind
    write: Callable[[Path, Sequence[str]], dict[str, Path]]
    slower: Callable[[onnx.ModelProto], onnx.ModelProto]
    resaved: Callable[[onnx.ModelProto], onnx.ModelProto]
    source: str


@dataclass(frozen=True)
class Run:
    """One pytest run of the suite: verdict status and JUnit seconds per model, wall seconds."""

    statuses: dict[str, str]
    seconds: dict[str, float]
    medians: dict[str, float]  # the profile's median latency per model
    wall: float
    code: int
    output: str
    details: dict[str, str] = field(default_factory=dict)  # ratio, CI, sessions, message per model


def load_zoo(names: Sequence[str], quick: bool) -> Zoo:
    """The zoo of ``pytest_roofline.zoo.suite`` restricted to ``names`` (or 3 in quick mode)."""
    from pytest_roofline.zoo import suite

    entries = {model.name: model for model in suite.ZOO}
    chosen = _choose(list(entries), names, quick)
    return Zoo(
        dims={name: dict(entries[name].dims) for name in chosen},
        write=lambda out, which: suite.write_zoo(out, names=list(which)),
        slower=lambda model: suite.slower_variant(model, at_least=SLOWER_MACS),
        resaved=suite.resaved_copy,
        source="pytest_roofline.zoo.suite",
    )


def _choose(available: list[str], names: Sequence[str], quick: bool) -> list[str]:
    unknown = sorted(set(names) - set(available))
    if unknown:
        raise SystemExit(f"unknown models {', '.join(unknown)}; the zoo has {', '.join(available)}")
    chosen = list(names) or available
    return chosen[:QUICK_MODELS] if quick else chosen


def save_like(model: onnx.ModelProto, path: Path) -> None:
    """Save ``model`` at ``path``, its weights in ``<name>.data`` beside it when over 1.5 GB."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if model.ByteSize() > 1_500_000_000:
        onnx.save(model, str(path), save_as_external_data=True, location=f"{path.name}.data")
    else:
        onnx.save(model, str(path))


def model_files(path: Path) -> list[str]:
    """The model's file name and its external-data locations (relative to its folder)."""
    from pytest_roofline.model.gitref import external_data_locations

    model = onnx.load(str(path), load_external_data=False)
    return [path.name, *sorted(external_data_locations(model))]


def put_models(project: Path, sources: Mapping[str, Path]) -> None:
    """Copy each model of ``sources`` (with its external data) over the project's copy of it."""
    for name, source in sources.items():
        target = project / "models" / name
        shutil.rmtree(target, ignore_errors=True)
        for relative in model_files(source):
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source.parent / relative, target / relative)


def test_name(node_id: str) -> str:
    """The model of a parametrized test: ``test_model[bert]`` -> ``bert``."""
    return node_id.rsplit("[", 1)[-1].rstrip("]")


def suite_run(project: Path, *args: str) -> Run:
    """One pytest-roofline run of the project: verdicts from the results JSON, times from JUnit."""
    junit = project / "junit.xml"
    code, data, wall, out = run(project, "--roofline-report=results.json", f"--junitxml={junit}", *args)
    statuses: dict[str, str] = {}
    medians: dict[str, float] = {}
    details: dict[str, str] = {}
    for result in (data or {}).get("results", []):
        name = test_name(result["test"])
        statuses[name] = result["verdict"]["status"]
        medians[name] = result["profile"]["latency"]["median"]
        details[name] = verdict_detail(result["verdict"])
    seconds = junit_seconds(junit)
    for name in seconds:
        statuses.setdefault(name, "error")
    if not data:
        sys.stderr.write(out[-2000:])
    return Run(statuses, seconds, medians, wall, code, out, details)


def verdict_detail(verdict: Mapping[str, object]) -> str:
    """One line of a verdict's figures: ratio, CI, noise, sessions, message and reasons."""
    ci = verdict.get("ci")
    interval = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if isinstance(ci, list) and len(ci) == 2 else "-"
    ratio, noise = verdict.get("ratio"), verdict.get("noise")
    figures = f"ratio {ratio:.3f}" if isinstance(ratio, float) else "ratio -"
    figures += f", CI {interval}, noise {noise:.3f}" if isinstance(noise, float) else f", CI {interval}"
    reasons = "; ".join(str(r) for r in verdict.get("reasons") or [])  # type: ignore[attr-defined]
    return f"{figures}, {verdict.get('sessions')} sessions: {verdict.get('message')} [{reasons}]"


def junit_seconds(path: Path) -> dict[str, float]:
    """Seconds per parametrized test (setup + call + teardown) from a JUnit XML file."""
    if not path.exists():
        return {}
    cases = ET.parse(path).getroot().iter("testcase")
    return {test_name(case.get("name", "")): float(case.get("time", 0)) for case in cases}


def counts(runs: Sequence[Run]) -> Counter[str]:
    return Counter(status for r in runs for status in r.statuses.values())


def fmt_counts(counter: Counter[str]) -> str:
    shown = [f"{s} {counter[s]}" for s in STATUSES]
    shown += [f"{s} {n}" for s, n in sorted(counter.items()) if s not in STATUSES]
    return ", ".join(shown)


def benchmark_run(project: Path, *args: str) -> tuple[dict[str, float], float, int]:
    """One pytest-benchmark run: median seconds per model, wall seconds, exit code."""
    out = project / "bench.json"
    code, _, wall, text = run(
        project, f"--benchmark-storage=file://{project / '.benchmarks'}", f"--benchmark-json={out}", *args
    )
    if not out.exists():
        sys.stderr.write(text[-2000:])
        return {}, wall, code
    data = json.loads(out.read_text())
    medians = {test_name(b["name"]): b["stats"]["median"] for b in data["benchmarks"]}
    return medians, wall, code


@dataclass
class Trial:
    """The generated project, the zoo's files and the figures gathered so far."""

    zoo: Zoo
    work: Path
    project: Path
    originals: dict[str, Path]
    failures: list[str]
    record: Run | None = None
    quiet: tuple[Run, ...] = ()

    def fail_if(self, condition: bool, message: str) -> None:
        if condition:
            self.failures.append(message)


def set_up(zoo: Zoo, work: Path) -> Trial:
    """Write the zoo and a project with one test per model; calibrate once."""
    originals = zoo.write(work / "zoo", list(zoo.dims))
    project = work / "project"
    (project / "models").mkdir(parents=True)
    put_models(project, originals)
    models = {n: [f"models/{n}/{p.name}", zoo.dims[n]] for n, p in originals.items()}
    (project / "models.json").write_text(json.dumps(models, indent=1))
    (project / "test_zoo.py").write_text(ROOFLINE_TEST)
    start = time.perf_counter()
    cli = "from pytest_roofline.cli import entry_point; entry_point()"
    subprocess.run([sys.executable, "-c", cli, "calibrate"], capture_output=True, check=False)
    print(f"calibration (cached for every run after): {time.perf_counter() - start:.1f} s", flush=True)
    return Trial(zoo, work, project, originals, [])


def unchanged_runs(trial: Trial, runs: int) -> None:
    """Record, then ``runs`` unchanged runs quiet and as many beside a busy process."""
    trial.record = suite_run(trial.project, "--roofline-update")
    print(f"recording: {fmt_counts(counts([trial.record]))}; wall {trial.record.wall:.1f} s", flush=True)
    recorded = sum(
        len(json.loads(f.read_text())["entries"]) for f in (trial.project / ".roofline").rglob("*.json")
    )
    if recorded < len(trial.zoo.dims):
        why = [line.strip() for line in trial.record.output.splitlines() if "not recorded" in line]
        print(
            f"  baselines recorded for {recorded} of {len(trial.zoo.dims)} models: {why[0] if why else '?'}"
        )
        trial.failures.append("recording: not every baseline was written (a later run reads 'new')")
    trial.quiet = tuple(suite_run(trial.project) for _ in range(runs))
    with busy_neighbour():
        busy = [suite_run(trial.project) for _ in range(runs)]
    print("\nunchanged runs (verdicts per test)")
    for label, group in (("quiet", trial.quiet), ("busy", tuple(busy))):
        for i, r in enumerate(group, 1):
            print(f"  {label} run {i}: {fmt_counts(counts([r]))}  [wall {r.wall:.1f} s, exit {r.code}]")
        print(f"  {label} total: {fmt_counts(counts(group))}")
    every = counts([*trial.quiet, *busy])
    decided, total = every["unchanged"] + every["pass"], sum(every.values())
    print(
        f"  all unchanged runs: {decided}/{total} unchanged or pass ({decided / max(total, 1):.1%}, "
        f"target >= 95%), {every['regression']} regression, {every['improved']} improved (target 0, 0)"
    )
    trial.fail_if(
        decided < 0.95 * total or every["regression"] > 0 or every["improved"] > 0,
        "unchanged runs: < 95 % unchanged/pass, or a regression or improved verdict",
    )
    for name in sorted(trial.zoo.dims):
        seen = [r.statuses.get(name, "-") for r in (*trial.quiet, *busy)]
        if any(s not in ("unchanged", "pass") for s in seen):
            print(f"    {name}: {' '.join(seen)}")


def changed_runs(trial: Trial, repeats: int = 1) -> tuple[Run, dict[str, Path]]:
    """Slower variants (true slowdown measured first; ``repeats`` suite runs) and re-saved copies
    (one suite run).  Returns the first slower run and the slower variants' paths."""
    assert trial.record is not None
    slower: dict[str, Path] = {}
    resaved: dict[str, Path] = {}
    for name, path in trial.originals.items():
        model = onnx.load(str(path))
        slower[name] = trial.work / "slower" / name / path.name
        save_like(trial.zoo.slower(model), slower[name])
        resaved[name] = trial.work / "resaved" / name / path.name
        save_like(trial.zoo.resaved(model), resaved[name])
    print("\ntrue slowdown of each slower variant (1 thread, interleaved A/B in onnxruntime)", flush=True)
    truth: dict[str, float] = {}
    for name, path in trial.originals.items():
        median = trial.record.medians.get(name, 0.01)
        rounds = int(min(40, max(8, 2.0 / max(median, 1e-4))))
        dims = trial.zoo.dims[name]
        truth[name] = paired_slowdown(path, slower[name], rounds=rounds, threads="1", dims=dims) - 1
        print(f"  {name:<28} {truth[name]:+.2%}  (baseline median {median * 1e3:.2f} ms)", flush=True)

    put_models(trial.project, slower)
    slow_runs = [suite_run(trial.project) for _ in range(repeats)]
    slow = slow_runs[0]
    put_models(trial.project, resaved)
    same_graph = suite_run(trial.project)
    put_models(trial.project, trial.originals)

    should = sorted(n for n, t in truth.items() if t >= CATCH_FROM)
    caught = Counter(r.statuses.get(n, "error") for r in slow_runs for n in should)
    passed = caught["pass"] + caught["unchanged"]
    other = len(should) * repeats - caught["regression"] - caught["inconclusive"] - passed
    print(
        f"\nslower variants with a true slowdown >= {CATCH_FROM:.1%}: {len(should)} of {len(truth)}"
        f" ({repeats} suite run{'s' if repeats > 1 else ''})"
    )
    print(
        f"  caught as regression {caught['regression']}, inconclusive {caught['inconclusive']}, "
        f"pass {passed}, other {other}  (target >= 95 % regression, none pass)"
    )
    for name in sorted(truth):
        mark = "" if name in should else "  (below the bar: not counted)"
        seen = " ".join(r.statuses.get(name, "error") for r in slow_runs)
        walls = " ".join(f"{r.seconds.get(name, float('nan')):.1f}" for r in slow_runs)
        print(f"    {name:<28} {truth[name]:+.2%}  {seen}  ({walls} s){mark}")
        for r in slow_runs:  # why a counted variant was not caught: the verdict's own figures
            if name in should and r.statuses.get(name) != "regression" and name in r.details:
                print(f"        {r.details[name]}")
    trial.fail_if(
        bool(should) and (caught["regression"] < 0.95 * len(should) * repeats or passed > 0),
        "slower variants: < 95 % caught as regression, or one called pass",
    )
    resaved_counts = Counter(same_graph.statuses.values())
    print(f"re-saved copies: {fmt_counts(resaved_counts)}  (target: regression 0)")
    trial.fail_if(resaved_counts["regression"] > 0, "a re-saved copy was called a regression")
    return slow, slower


def wall_times(trial: Trial, slow: Run, slower: Mapping[str, Path]) -> float:
    """Per-test and suite wall times; one test alone from process start.  Returns the suite's."""
    assert trial.record is not None
    record, quiet = trial.record, trial.quiet
    per_test = [s for r in quiet for s in r.seconds.values()]
    print("\nwall time")
    print(
        f"  per test (JUnit: setup + call + teardown): unchanged median {np.median(per_test):.2f} s, max "
        f"{max(per_test):.2f} s; recording median {np.median(list(record.seconds.values())):.2f} s; "
        f"changed median {np.median(list(slow.seconds.values())):.2f} s"
    )
    nan = float("nan")
    for name in sorted(trial.zoo.dims):
        print(
            f"    {name:<28} unchanged {quiet[0].seconds.get(name, nan):6.2f} s   changed "
            f"{slow.seconds.get(name, nan):6.2f} s   median latency "
            f"{record.medians.get(name, nan) * 1e3:8.2f} ms"
        )
    small = [n for n, m in record.medians.items() if m <= 0.010]
    if small:
        name = max(small, key=lambda n: record.medians[n])  # the slowest model within 10 ms
        node = f"test_zoo.py::test_model[{name}]"
        alone = sorted(run(trial.project, node)[2] for _ in range(3))
        # Python's own default writes bytecode caches (this workplace sets PYTHONDONTWRITEBYTECODE=1,
        # so every run above compiled each module and pytest re-rewrote every plugin's asserts)
        cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        run(trial.project, node, env=cached)  # writes the caches
        alone_cached = sorted(run(trial.project, node, env=cached)[2] for _ in range(3))
        put_models(trial.project, {name: slower[name]})
        changed = run(trial.project, node)[2]
        put_models(trial.project, {name: trial.originals[name]})
        print(
            f"  one test alone from process start ({name}, {record.medians[name] * 1e3:.2f} ms): "
            f"unchanged median {alone[1]:.2f} s (target <= 2 s), changed {changed:.2f} s (target <= 6 s)"
        )
        print(
            f"    with Python's default bytecode caching (PYTHONDONTWRITEBYTECODE unset here: "
            f"{'set' if 'PYTHONDONTWRITEBYTECODE' in os.environ else 'already unset'}): unchanged median "
            f"{alone_cached[1]:.2f} s"
        )
        trial.fail_if(alone[1] > 2.0 or changed > 6.0, "one test alone: over 2 s unchanged or 6 s changed")
    suite_wall = float(np.median([r.wall for r in quiet]))
    print(f"  suite, unchanged run: {suite_wall:.1f} s for {len(trial.zoo.dims)} tests")
    return suite_wall


def benchmark_comparison(trial: Trial, runs: int, suite_wall: float) -> None:
    """The same suite under pytest-benchmark: its wall time and its false alarms at median:5%."""
    bench = trial.work / "bench"
    shutil.copytree(trial.project / "models", bench / "models")
    shutil.copy(trial.project / "models.json", bench / "models.json")
    (bench / "test_bench.py").write_text(BENCHMARK_TEST)
    base, base_wall, _ = benchmark_run(bench, "--benchmark-save=base")
    compare = ("--benchmark-compare", "--benchmark-compare-fail=median:5%")
    alarms: list[int] = []
    walls: list[float] = []
    for busy in [False] * runs + [True] * runs:  # as pytest-roofline's unchanged runs
        with busy_neighbour() if busy else contextlib.nullcontext():
            now, wall, _ = benchmark_run(bench, *compare)
        alarms.append(sum(1 for n, m in now.items() if n in base and m / base[n] - 1 > 0.05))
        if not busy:
            walls.append(wall)
    bench_wall = float(np.median(walls))
    print(
        f"\npytest-benchmark (median:5%, default options): suite wall {bench_wall:.1f} s (saving "
        f"{base_wall:.1f} s); false alarms {sum(alarms)}/{len(alarms) * len(base)} "
        f"({' + '.join(map(str, alarms[:runs]))} quiet, {' + '.join(map(str, alarms[runs:]))} busy)"
    )
    print(
        f"pytest-roofline's unchanged suite / pytest-benchmark's: {suite_wall / bench_wall:.2f}x "
        "(target <= 3x)"
    )
    trial.fail_if(
        suite_wall > 3 * bench_wall, "the unchanged suite takes over 3x pytest-benchmark's wall time"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="", help="comma-separated zoo names (default: all)")
    parser.add_argument("--runs", type=int, default=2, help="unchanged runs, quiet and busy each (2)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_MODELS} models, 1 run: a smoke run")
    parser.add_argument("--skip-benchmark", action="store_true", help="leave pytest-benchmark out")
    parser.add_argument("--changed-runs", type=int, default=1, help="suite runs of the slower variants (1)")
    args = parser.parse_args(argv)
    runs = max(1, 1 if args.quick and args.runs == 2 else args.runs)
    zoo = load_zoo([n for n in args.models.split(",") if n], args.quick)
    with tempfile.TemporaryDirectory(prefix="zoo-gate-") as tmp:
        work = Path(tmp)
        os.environ["ROOFLINE_CACHE_DIR"] = str(work / "cache")  # calibration and model store, fresh
        print(f"zoo: {len(zoo.dims)} models from {zoo.source}: {', '.join(zoo.dims)}", flush=True)
        trial = set_up(zoo, work)
        unchanged_runs(trial, runs)
        slow, slower = changed_runs(trial, max(1, args.changed_runs))
        suite_wall = wall_times(trial, slow, slower)
        if not args.skip_benchmark:
            benchmark_comparison(trial, runs, suite_wall)
    for line in trial.failures:
        print(f"FAIL {line}")
    return 1 if trial.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
