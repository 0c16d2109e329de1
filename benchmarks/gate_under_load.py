"""The gate under load (issue 31): A/A, slower and neutral verdicts per load condition, the noise
model's fit, each figure printed.

For each load condition (``quiet``; ``busy1``/``busy2``: one or two ``while True: pass`` processes;
``bursty``: a sibling that spins 0.3 s in every 0.5 s, what an xdist worker or a parallel CI job
does between its own measurements — the plugin's measure lock keeps two workers from timing at
once; ``quota``: this process in a cgroup with half the machine's CPU time, a VM's steal that
``/proc/stat`` cannot see: the gate reads it from the cgroup's ``cpu.stat`` throttled time), every
model of the chosen zoo is put through the gate's own pieces, at default options:

* ``aa-paired``: the model against a copy of itself, paired (``gate.paired.paired_run``, on the
  engine the gate picks under that load: one intra-op thread when others share the CPUs);
* ``aa-stored``: the model at one thread against the control probe (``gate.sampling.run_gate``
  with ``stored_decider``), each run judged against the previous run's figures as its baseline —
  a baseline recorded under the same condition, its load kept;
* ``slower``: its slower variant (``zoo.variants.slower_variant``, ~7 % more MACs, or x2 work),
  paired against the model; the true slowdown is measured in the same process by bare
  interleaved onnxruntime sessions at the same threads;
* ``neutral``: the model against onnxruntime's offline-optimised copy (the same work, another
  graph), paired.

Each verdict is one JSON line in ``--record DIR`` (records.jsonl): its figures, ratio, interval,
noise, floor, status and the load it ran under.  ``--refit`` fits the noise model from the A/A
records of ``--runs DIR`` (``gate.noise.fit_floors``) and writes ``pytest_roofline/gate/
noise_model.json``; the report (default) prints, per condition: false regressions among A/A
verdicts and their 95 % upper bound, the share of A/A ratios outside their own 99 % interval,
slower variants caught / called pass, every >= 2x caught, neutral changes called regression, and
the median seconds a changed model took to decide.

Usage::

    python benchmarks/gate_under_load.py --record benchmarks/data/gate-under-load --models fast
    python benchmarks/gate_under_load.py --runs benchmarks/data/gate-under-load --refit
    python benchmarks/gate_under_load.py --runs benchmarks/data/gate-under-load      # the report
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx

CONDITIONS = ("quiet", "busy1", "busy2", "bursty", "quota")
#: Conditions the report also prints: ``agents`` is a recording made as ``quiet`` while other
#: developers' test runs shared the machine (pressure 0.5-0.9: not quiet, so relabelled);
#: ``quota-unseen`` a ``quota`` recording made before the load read the cgroup's throttled time
#: (its pressure leaves the quota out); ``busy1-stretched`` a ``busy1`` recording made after the
#: budget began to stretch with the load (``gate.sampling.stretched``).  Round three (``clock``
#: ``thread``: pairings timed by CPU time): ``busy1-r3-pre`` per-session figures paired afterwards,
#: ``busy1-r3-shared`` balanced figures with the inputs shared by a pairing's sessions,
#: ``busy1-r3`` inputs copied per session, 4-session batches; ``busy1-r3b`` 8 sessions x 5 rounds
#: a batch (today's design); ``agents-r3b`` the same without a spinner of ours, beside the other
#: developers' jobs (not quiet); ``agents-r3b-same`` GPT-2 KV against an identical file
#: (``gate.paired.paired_run`` from a /tmp script), beside the developers' jobs.
REPORTED = (
    *CONDITIONS,
    "agents",
    "quota-unseen",
    "busy1-stretched",
    "busy1-r3-pre",
    "busy1-r3-shared",
    "busy1-r3",
    "busy1-r3b",
    "agents-r3b",
    "agents-r3b-same",
)
#: The zoo's models that run in under ~25 ms at default threads here (the A/A volume comes from them).
#: A dozen of them, one per family, for a recording that fits an hour.
SMALL = (
    "tiny_mlp",
    "tiny_cnn",
    "mobilenet_v2",
    "efficientnet_int8",
    "convnext_fp16",
    "gpt2_kv",
    "llama",
    "t5",
    "whisper_tiny",
    "moe",
    "lstm_gru",
    "loop",
)
FAST = (
    "tiny_mlp",
    "tiny_cnn",
    "mobilenet_v2",
    "efficientnet",
    "efficientnet_int8",
    "convnext_fp16",
    "unet",
    "tcn",
    "gpt2_kv",
    "llama",
    "llama_fp16",
    "llama_int4",
    "t5",
    "whisper_tiny",
    "einsum_attention",
    "moe",
    "lstm_gru",
    "scan",
    "loop",
    "convnext",
)
TOLERANCE = 0.05
CATCH_FROM = 0.065
#: Stored verdicts: A/A against the previous run, and the slower variants against the first baseline.
STORED_KINDS = ("aa-stored", "stored-slower", "stored-x2")
CGROUP = Path("/sys/fs/cgroup/cpu/roofline-gate-under-load")


@contextlib.contextmanager
def load_condition(name: str) -> Iterator[None]:
    """Start the load of condition ``name`` beside this process, and stop it after."""
    spin = [sys.executable, "-c", "while True: pass"]
    bursty = [
        sys.executable,
        "-c",
        "import time\nwhile True:\n    end = time.monotonic() + 0.3\n"
        "    while time.monotonic() < end: pass\n    time.sleep(0.2)",
    ]
    procs: list[subprocess.Popen[bytes]] = []
    if name == "busy1":
        procs = [subprocess.Popen(spin)]
    elif name == "busy2":
        procs = [subprocess.Popen(spin), subprocess.Popen(spin)]
    elif name == "bursty":
        procs = [subprocess.Popen(bursty)]
    quota = name == "quota" and _enter_quota()
    try:
        time.sleep(0.5)
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        if quota:
            _leave_quota()


def _enter_quota() -> bool:
    try:
        CGROUP.mkdir(exist_ok=True)
        (CGROUP / "cpu.cfs_period_us").write_text("100000")
        (CGROUP / "cpu.cfs_quota_us").write_text(str(int(100000 * (os.cpu_count() or 2) / 2)))
        (CGROUP / "cgroup.procs").write_text(str(os.getpid()))
        return True
    except OSError as exc:
        print(f"  quota: cannot use a cgroup here ({exc}); measured without it", flush=True)
        return False


def _leave_quota() -> None:
    with contextlib.suppress(OSError):
        Path("/sys/fs/cgroup/cpu/cgroup.procs").write_text(str(os.getpid()))
    # the helper processes the gate started inside the group stay there: leave the group itself


def _opener(engine, path: Path, dims: dict[str, int]):
    from pytest_roofline.measure.rounds import SessionOpener
    from pytest_roofline.model import ModelSpec, bind_input_shapes, load_model, make_inputs

    model = load_model(str(path))
    feeds = make_inputs(model, bind_input_shapes(model, None, dims or None), seed=0)
    return SessionOpener(engine, ModelSpec.create(str(path), dims=dims or None), feeds)


def _quick_p25(opener) -> float:
    with opener() as session:
        session.time(2)
        return float(np.percentile(session.time(7), 25))


def _load_now(seconds: float = 0.3):
    from pytest_roofline.device.load import between, snapshot

    start = snapshot()
    time.sleep(seconds)
    return between(start, snapshot())


def _record(kind: str, run, started: float, **extra) -> dict:
    from pytest_roofline.gate.noise import pressure

    verdict = run.verdict
    return {
        "kind": kind,
        "status": verdict.status if verdict else None,
        "ratio": verdict.ratio if verdict else None,
        "ci": list(verdict.ci) if verdict and verdict.ci else None,
        "noise": verdict.noise if verdict else None,
        "floor": verdict.floor if verdict else None,
        "figures": list(run.figures),
        "pressure": pressure(run.load),
        "other": run.load.other,
        "steal": run.load.steal,
        "throttled": run.load.throttled,
        "seconds": time.perf_counter() - started,
        "reasons": list(verdict.reasons) if verdict else [],
        **extra,
    }


def paired(engine, new: Path, old: Path, dims: dict[str, int], kind: str, **extra) -> dict:
    """The gate's paired verdict of ``new`` against ``old`` on the engine it picks under the load."""
    from pytest_roofline.gate.isolated import sampler_for
    from pytest_roofline.gate.paired import paired_run
    from pytest_roofline.gate.runner import paired_engine
    from pytest_roofline.gate.sampling import GateDesign

    pick = paired_engine(engine, _load_now()) or engine
    if kind != "aa-paired":  # the true change, at the threads the gate picked, just before it
        extra["true"] = round(true_slowdown(pick, new, old, dims), 4)
    started = time.perf_counter()
    openers = [_opener(pick, new, dims), _opener(pick, old, dims)]
    # a run's wall time sizes the budget, as the gate's profiled run does (a thread-timed run's
    # CPU time is a fraction of it under load: the first batch would overrun the budget)
    wall = (engine.single_thread() or engine) if pick.thread_timed else pick
    design = GateDesign(budget=10.0, run_estimate=_quick_p25(_opener(wall, new, dims)))
    run = paired_run(openers, design, TOLERANCE, sampler=sampler_for(pick))
    threads = pick.options.get("intra_op_threads", "default")
    clock = "thread" if pick.thread_timed else "wall"  # the gate's clock under this load
    # each session binds its own copy of the inputs (gate.paired.FreshInputs): the fit reads only
    # such thread-clock records (before, a pairing's sessions shared the arrays and its bias)
    # round four: each session also loads the model from its own copy of the file's bytes
    extra["model_bytes"] = "per-session"
    return _record(kind, run, started, threads=str(threads), clock=clock, inputs="per-session", **extra)


def stored(
    engine,
    path: Path,
    dims: dict[str, int],
    before: dict | None,
    clock: str = "wall",
    kind: str = "aa-stored",
) -> dict:
    """The gate's stored verdict of ``path`` at one thread against ``before`` (None: a baseline),
    each run timed by ``clock``: ``wall``, or ``thread`` (its thread's CPU time, as the gate times a
    one-thread stored figure since issue 35's false alarm: ``gate.runner.stored_figure_engine``)."""
    from pytest_roofline.device.load import MachineLoad
    from pytest_roofline.gate.control_probe import fit_probe, probe_opener
    from pytest_roofline.gate.noise import pressure
    from pytest_roofline.gate.sampling import GateDesign, run_gate, stored_decider

    started = time.perf_counter()
    wall = engine.single_thread() or engine
    one = (wall.thread_timed_copy() or wall) if clock == "thread" else wall
    subject = _opener(one, path, dims)
    estimate = _quick_p25(_opener(wall, path, dims))  # the budget is wall time
    blocks = before["blocks"] if before else fit_probe(one, estimate, 0.3)
    decide = stored_decider(
        before["figures"] if before else None,
        None,
        TOLERANCE,
        before["control_p25"] if before else None,
        pressure(MachineLoad.from_dict(before["load"])) if before else 0.0,
    )
    run = run_gate(
        [subject, probe_opener(one, **blocks)], decide, GateDesign(budget=10.0, run_estimate=estimate)
    )
    record = _record(kind if before else "baseline", run, started, clock=clock)
    record.update(blocks=blocks, control_p25=run.control_p25, load=run.load.to_dict())
    if before:  # what it was judged against, for the re-judgement
        record["base"] = {k: before[k] for k in ("figures", "pressure", "control_p25")}
    return record


def true_slowdown(engine, new: Path, old: Path, dims: dict[str, int]) -> float:
    """Bare interleaved onnxruntime sessions on ``engine``: the median over sessions of per-round
    ratios new / old.  Sampled where the gate samples at those threads (its helper, whose sessions
    share one pool: two pools of 2 threads in one process fight, and a tiny CNN's "true" change read
    +2 % there against +25 % in the gate's helper, its optimised copy +52 %)."""
    from pytest_roofline.gate.isolated import sampler_for
    from pytest_roofline.gate.verdict import round_ratios
    from pytest_roofline.measure.rounds import sample_interleaved

    sampler = sampler_for(engine) or sample_interleaved  # as benchmarks/gate_quality.py samples
    result = sampler(
        [_opener(engine, new, dims), _opener(engine, old, dims)],
        sessions=5,
        rounds=20,
        iterations=1,
        warmup=3,
    )
    return float(np.median(round_ratios(result[0], result[1])))


def optimised_copy(path: Path, out: Path) -> Path:
    """onnxruntime's offline-optimised copy (basic level: folding and fusions, the same work)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(out)
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return out


def record(args: argparse.Namespace) -> int:
    from pytest_roofline.backends.base import get_backend
    from pytest_roofline.zoo.suite import zoo_model
    from pytest_roofline.zoo.variants import resaved_copy, slower_variant

    out = Path(args.record)
    out.mkdir(parents=True, exist_ok=True)
    names = (
        SMALL
        if args.models == "small"
        else FAST
        if args.models == "fast"
        else [m.name for m in _zoo()]
        if args.models == "zoo"
        else args.models.split(",")
    )
    work = Path(tempfile.mkdtemp(prefix="gate-under-load-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)  # ~2 GB of zoo copies a run
    engine = get_backend("onnxruntime", {})
    files: dict[str, dict[str, Path]] = {}
    for name in names:
        entry = zoo_model(name)
        model = entry.build()
        base = work / f"{name}.onnx"
        onnx.save(model, str(base))
        copy = work / f"{name}.copy.onnx"
        onnx.save(resaved_copy(model), str(copy))
        slow = work / f"{name}.slower.onnx"
        onnx.save(slower_variant(model, dims=dict(entry.dims), at_least=0.07), str(slow))
        double = work / f"{name}.x2.onnx"
        onnx.save(slower_variant(model, dims=dict(entry.dims), at_least=1.0), str(double))
        files[name] = {"base": base, "copy": copy, "slower": slow, "x2": double}
        with contextlib.suppress(Exception):
            files[name]["optimised"] = optimised_copy(base, work / f"{name}.opt.onnx")
    sink = (out / "records.jsonl").open("a", encoding="utf-8")
    for condition in args.conditions.split(","):
        print(f"== {condition}", flush=True)
        with load_condition(condition):
            for name in names:
                dims = dict(zoo_model(name).dims)
                paths = files[name]

                def keep(item: dict, name: str = name, condition: str = condition) -> None:
                    item.update(model=name, condition=condition, time=time.time())
                    sink.write(json.dumps(item) + "\n")
                    sink.flush()
                    ratio = item["ratio"]
                    print(
                        f"  {name:18s} {item['kind']:10s} {item['status'] or '-':12s} "
                        f"{'-' if ratio is None else f'{ratio:.3f}'} load {item['pressure']:.2f} "
                        f"{item['seconds']:.1f}s {item.get('true', '')}",
                        flush=True,
                    )

                try:
                    for _ in range(args.aa):
                        keep(paired(engine, paths["copy"], paths["base"], dims, "aa-paired"))
                    stored_aa = args.aa if args.aa_stored is None else args.aa_stored
                    for clock in args.stored_clocks.split(",") if stored_aa else ():
                        before = first = stored(engine, paths["base"], dims, None, clock)
                        keep(before)
                        for _ in range(stored_aa):
                            now = stored(engine, paths["copy"], dims, before, clock)
                            keep(now)
                            before = now
                        for kind in ("slower", "x2") if args.stored_changed else ():
                            one = engine.single_thread() or engine  # the true change at one thread
                            true = round(true_slowdown(one, paths[kind], paths["base"], dims), 4)
                            item = stored(engine, paths[kind], dims, first, clock, f"stored-{kind}")
                            keep({**item, "true": true})
                    if args.aa_only:
                        continue
                    for kind in ("slower", "x2"):
                        keep(paired(engine, paths[kind], paths["base"], dims, kind))
                    if "optimised" in paths:
                        keep(paired(engine, paths["optimised"], paths["base"], dims, "neutral"))
                except Exception as exc:  # one model's failure is printed, the rest go on
                    print(f"  {name}: {type(exc).__name__}: {exc}", flush=True)
    sink.close()
    return 0


def _zoo():
    from pytest_roofline.zoo.suite import ZOO

    return ZOO


def _records(runs: Path) -> list[dict]:
    path = runs / "records.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _noise_records(records: list[dict]):
    """The A/A records as the fit reads them: the sigma of each interval without its floor."""
    from pytest_roofline.gate.noise import NoiseRecord
    from pytest_roofline.gate.verdict import bootstrap_ratio_ci, small_sample_half

    out, previous = [], {}
    for item in records:
        key = (item["model"], item["condition"], item.get("clock", "wall"))
        if item["kind"] == "baseline":
            previous[key] = item
            continue
        if item["kind"] not in ("aa-paired", "aa-stored") or len(item["figures"]) < 2:
            continue
        if item.get("clock") == "thread" and item.get("inputs") != "per-session":
            continue  # recorded before the sessions' inputs were copied per session: not today's design
        figures = item["figures"]
        if item["kind"] == "aa-paired":
            low, high = bootstrap_ratio_ci(figures, None)
            ratio, mode, busy = float(np.median(figures)), _paired_mode(item), item["pressure"]
        else:
            base = item.get("base") or previous.get(key)
            if base is None or len(base["figures"]) < 2:
                previous[key] = item
                continue
            low, high = bootstrap_ratio_ci(figures, base["figures"])
            ratio = float(np.median(figures) / np.median(base["figures"]))
            mode, busy = "stored", max(item["pressure"], base["pressure"])
            previous[key] = item
        base_figures = None if item["kind"] == "aa-paired" else base["figures"]
        sampled = max(math.log(high / low) / 2, small_sample_half(figures, base_figures))  # as compare()
        sigma = sampled / 1.96 if low > 0 and high > 0 else 0.0
        out.append(NoiseRecord(mode, busy, math.log(ratio), sigma))
    return out


def _paired_mode(item: dict) -> str:
    """The noise model's mode of a paired record: ``paired-thread`` when it was timed by the
    threads' CPU time (records before that clock existed carry no ``clock``: wall)."""
    return "paired-thread" if item.get("clock") == "thread" else "paired"


def refit(args: argparse.Namespace) -> int:
    from pytest_roofline.gate.noise import NOISE_MODEL_FILE, fit_floors

    records = _noise_records(_records(Path(args.runs)))
    model = fit_floors(
        records, source=f"benchmarks/gate_under_load.py --refit on {args.runs} ({len(records)} A/A verdicts)"
    )
    packaged = json.loads(NOISE_MODEL_FILE.read_text(encoding="utf-8"))
    fitted = model.to_dict()
    for mode, knots in packaged.get("modes", {}).items():  # a mode without records keeps its knots
        if mode not in {r.mode for r in records}:
            fitted["modes"][mode] = knots
    NOISE_MODEL_FILE.write_text(json.dumps(fitted, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {NOISE_MODEL_FILE} from {len(records)} A/A verdicts:")
    for mode, knots in fitted["modes"].items():
        print(f"  {mode:7s} " + "  ".join(f"load {x:.2f}: ±{y:.2%}" for x, y in knots))
    return 0


def _upper95(failures: int, total: int) -> float:
    """One-sided 95 % Clopper-Pearson upper bound of a rate."""
    if total == 0:
        return float("nan")
    if failures == 0:
        return 1 - 0.05 ** (1 / total)
    from statistics import NormalDist

    # Wilson score bound: close to Clopper-Pearson at these counts, no SciPy needed
    z, p = NormalDist().inv_cdf(0.95), failures / total
    centre = p + z * z / (2 * total)
    spread = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total))
    return (centre + spread) / (1 + z * z / total)


def rejudged(records: list[dict]) -> list[dict]:
    """Each verdict judged again from its recorded figures and load with the packaged noise model
    (the recording's own statuses came from the model in force when it ran; the sampling's stopping
    points are the recording's)."""
    from pytest_roofline.gate.noise import noise_model
    from pytest_roofline.gate.sampling import control_drift_noise
    from pytest_roofline.gate.verdict import compare

    model, previous, out = noise_model(), {}, []
    for item in records:
        key = (item["model"], item["condition"], item.get("clock", "wall"))
        if item["kind"] == "baseline" or not item["figures"]:
            previous[key] = item
            out.append(item)
            continue
        if item["kind"] in STORED_KINDS:
            base = item.get("base") or previous.get(key)
            if item["kind"] == "aa-stored":
                previous[key] = item
            if base is None:
                continue
            verdict = compare(
                item["figures"],
                base["figures"],
                tolerance=TOLERANCE,
                mode="stored",
                drift=model.floor("stored", max(item["pressure"], base["pressure"])),
                extra_noise=control_drift_noise(item["control_p25"], base["control_p25"]),
            )
        else:
            verdict = compare(
                item["figures"],
                None,
                tolerance=TOLERANCE,
                mode="paired",
                drift=model.floor(_paired_mode(item), item["pressure"]),
            )
        out.append({**item, "status": verdict.status, "ratio": verdict.ratio, "noise": verdict.noise})
    return out


def _welch_half(current, baseline=None) -> float:
    """``gate.verdict.small_sample_half`` before issue 35's fix: Welch's interval, each side at its
    own spread (a calm 4-session baseline narrowed a stored comparison)."""
    cur = np.log(np.asarray(current, dtype=float))
    if len(cur) < 2:
        return 0.0
    var_c = float(np.var(cur, ddof=1)) / len(cur)
    if baseline is None:
        return verdict_t975(len(cur) - 1) * math.sqrt(var_c)
    base = np.log(np.asarray(baseline, dtype=float))
    if len(base) < 2:
        return 0.0
    var_b = float(np.var(base, ddof=1)) / len(base)
    total = var_c + var_b
    if total <= 0:
        return 0.0
    df = total**2 / (var_c**2 / (len(cur) - 1) + var_b**2 / (len(base) - 1))
    return verdict_t975(df) * math.sqrt(total)


def verdict_t975(df: float) -> float:
    from pytest_roofline.gate.verdict import _t975

    return _t975(df)


def _stored_lines(items: list[dict]) -> None:
    """Stored verdicts per clock: A/A false regressions and statuses, slower variants caught."""
    for clock in sorted({i.get("clock", "wall") for i in items if i["kind"] in STORED_KINDS}):
        mine = [i for i in items if i.get("clock", "wall") == clock]
        aa = [i for i in mine if i["kind"] == "aa-stored"]
        if aa:
            false = sum(i["status"] == "regression" for i in aa)
            statuses: dict[str, int] = defaultdict(int)
            for i in aa:
                statuses[i["status"]] += 1
            ratios = [i["ratio"] for i in aa if i["ratio"]]
            worst = max(aa, key=lambda i: abs(math.log(i["ratio"] or 1)))
            print(
                f"  stored {clock:6s} A/A {len(aa):3d}: false regression {false} (95 % upper bound "
                f"{_upper95(false, len(aa)):.1%}), decided {len(aa) - statuses['inconclusive']}; "
                f"{dict(statuses)}; ratios {min(ratios):.3f}-{max(ratios):.3f}, worst {worst['model']} "
                f"x{worst['ratio']:.3f} ±{worst['noise'] or 0:.1%}"
            )
        changed = [i for i in mine if i["kind"] in ("stored-slower", "stored-x2")]
        if changed:
            due = [i for i in changed if (i.get("true") or 0) >= 1 + CATCH_FROM]
            doubled = [i for i in changed if (i.get("true") or 0) >= 2.0]
            x2 = [i for i in changed if i["kind"] == "stored-x2"]
            trues = [i.get("true") or float("nan") for i in x2]
            print(
                f"  stored {clock:6s} slower (true >= +{CATCH_FROM:.1%}, at one thread): caught "
                f"{sum(i['status'] == 'regression' for i in due)}/{len(due)}, called pass "
                f"{sum(i['status'] == 'pass' for i in due)}; >= 2x caught "
                f"{sum(i['status'] == 'regression' for i in doubled)}/{len(doubled)}; x2 variants (true "
                f"x{min(trues, default=float('nan')):.2f}-x{max(trues, default=float('nan')):.2f}) caught "
                f"{sum(i['status'] == 'regression' for i in x2)}/{len(x2)}"
            )
            _print_misses(due)


def _print_misses(due: list[dict]) -> None:
    """One line per variant due to be caught that was not: its true change, what it read, its noise."""
    for i in due:
        if i["status"] != "regression":
            print(
                f"    missed {i['model']} {i['kind']}: true x{i['true']:.3f}, read {i['status']} "
                f"x{i['ratio'] or float('nan'):.3f} noise ±{(i['noise'] or 0):.1%} "
                f"load {i['pressure']:.2f}"
            )


def report(args: argparse.Namespace) -> int:
    from pytest_roofline.gate.noise import Z99, noise_model

    records = rejudged(_records(Path(args.runs)))
    print(f"noise model: {noise_model().source}  (verdicts re-judged from their figures with it)")
    by_condition: dict[str, list[dict]] = defaultdict(list)
    for item in records:
        by_condition[item["condition"]].append(item)
    worst: dict[str, tuple[float, str]] = {}
    quiet_true = {  # each variant's true change measured with nothing of ours beside it
        (i["model"], i["kind"]): i["true"]
        for i in by_condition.get("quiet", [])
        if i["kind"] in ("slower", "x2") and i.get("true")
    }
    for condition in REPORTED:
        items = by_condition.get(condition)
        if not items:
            continue
        loads = [i["pressure"] for i in items]
        print(f"\n== {condition}: {len(items)} verdicts, load (others + steal) median {np.median(loads):.2f}")
        aa = [i for i in items if i["kind"] in ("aa-paired", "aa-stored")]
        _stored_lines(items)
        for kind in ("aa-paired", "aa-stored"):
            group = [i for i in aa if i["kind"] == kind]
            if not group:
                continue
            false = sum(i["status"] == "regression" for i in group)
            outside = sum(
                abs(math.log(i["ratio"])) > (i["noise"] or 0) / 1.96 * Z99 for i in group if i["ratio"]
            )
            statuses = defaultdict(int)
            for i in group:
                statuses[i["status"]] += 1
            print(
                f"  {kind:10s} {len(group):4d} verdicts: false regression {false} (95 % upper bound "
                f"{_upper95(false, len(group)):.1%}), outside their 99 % interval {outside} "
                f"({outside / len(group):.1%}); {dict(statuses)}"
            )
        changed = [i for i in items if i["kind"] in ("slower", "x2")]
        due = [i for i in changed if (i.get("true") or 0) >= 1 + CATCH_FROM]
        caught = [i for i in due if i["status"] == "regression"]
        passed = [i for i in changed if i["status"] == "pass" and (i.get("true") or 0) >= 1 + CATCH_FROM]
        doubled = [i for i in changed if (i.get("true") or 0) >= 2.0]
        print(
            f"  slower (true >= +{CATCH_FROM:.1%}): caught {len(caught)}/{len(due)}"
            f" ({len(caught) / max(len(due), 1):.0%}); called pass {len(passed)}; >= 2x caught "
            f"{sum(i['status'] == 'regression' for i in doubled)}/{len(doubled)}"
        )
        quiet_due = [i for i in changed if quiet_true.get((i["model"], i["kind"]), 0) >= 1 + CATCH_FROM]
        if condition != "quiet" and quiet_due:  # the same variants' true change on the quiet machine
            quiet_doubled = [i for i in quiet_due if quiet_true[(i["model"], i["kind"])] >= 2.0]
            print(
                f"  by the quiet recording's true change: caught "
                f"{sum(i['status'] == 'regression' for i in quiet_due)}/{len(quiet_due)}; called pass "
                f"{sum(i['status'] == 'pass' for i in quiet_due)}; >= 2x caught "
                f"{sum(i['status'] == 'regression' for i in quiet_doubled)}/{len(quiet_doubled)}"
            )
        _print_misses(due)
        neutral = [i for i in items if i["kind"] == "neutral"]
        flat = [i for i in neutral if abs((i.get("true") or 1) - 1) <= 0.02]
        print(
            f"  neutral rewrites (true within ±2 %): {len(flat)}, called regression "
            f"{sum(i['status'] == 'regression' for i in flat)}"
            f" (all neutral: {sum(i['status'] == 'regression' for i in neutral)}/{len(neutral)})"
        )
        seconds = [i["seconds"] for i in changed + neutral]
        if seconds:
            print(
                f"  a changed model decided in: median {np.median(seconds):.1f} s, max {max(seconds):.1f} s"
            )
        for i in aa:
            if i["status"] == "regression":
                worst.setdefault(condition, (i["ratio"], i["model"]))
    print(
        "\nfirst false A/A regression per condition: "
        + (", ".join(f"{c} {m} x{r:.3f}" for c, (r, m) in worst.items()) or "none")
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", help="record verdicts into this folder (records.jsonl, appended)")
    parser.add_argument(
        "--runs", default="benchmarks/data/gate-under-load", help="the recorded folder to read"
    )
    parser.add_argument("--refit", action="store_true", help="fit the noise model from --runs and write it")
    parser.add_argument("--models", default="fast", help="small | fast | zoo | a,b,c (zoo names)")
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument(
        "--aa",
        type=int,
        default=3,
        help="A/A verdicts per model, mode and condition (3; 0: changed models only)",
    )
    parser.add_argument(
        "--aa-stored", type=int, default=None, help="stored A/A verdicts per model and condition (--aa)"
    )
    parser.add_argument("--aa-only", action="store_true", help="A/A verdicts only: no changed models")
    parser.add_argument(
        "--stored-clocks", default="thread", help="clocks of the stored verdicts: wall, thread or wall,thread"
    )
    parser.add_argument(
        "--stored-changed",
        action="store_true",
        help="also judge the slower and x2 variants in stored mode, against the first baseline",
    )
    parser.add_argument(
        "--rule",
        choices=("worse", "welch"),
        default="worse",
        help="re-judge stored verdicts with each side as spread as the worse (today) or Welch's (before)",
    )
    args = parser.parse_args(argv)
    if args.rule == "welch":
        import pytest_roofline.gate.verdict as verdict_module

        verdict_module.small_sample_half = _welch_half  # the rule before issue 35's fix
    if args.record:
        return record(args)
    if args.refit:
        return refit(args)
    return report(args)


if __name__ == "__main__":
    sys.exit(main())
