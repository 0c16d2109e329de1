"""The history under load (issue 31, issue 22's history targets): A/A pairings quiet and beside one
busy process, injected steps, and ``roofline bisect`` of the 20-commit scenario beside a busy process.

What is timed is the history's own pairing at a model change
(:func:`pytest_roofline.history.pairing.time_pairing`: the gate's paired run at the configured
threads, per-round ratios, fresh session pairs, the pairing's tolerance, budget and step pairs, the
load it ran under), not a whole pytest run per point: a plugin run adds its gate and layer profile
around the same pairing and costs several times more, and 300 pairings per condition must fit
an hour.  Each zoo model of ``--models`` (default the ``small`` dozen of ``gate_under_load.py``, one
per family) is paired with a retrained copy of itself (``history_quality.retrained_copy``: one
weight nudged, the same work), alternating which is new, round robin over the models, until
``--pairings`` per condition.  Conditions: ``quiet`` (nothing started; other users of the machine
are not stopped: the load is recorded and printed) and ``busy1`` (one ``python3 -c 'while True:
pass'`` beside it, started and stopped by this script).

Every pairing is one JSON line in ``--record DIR``/records.jsonl (figures, pressure, seconds, load
average), so the report re-judges them with the current detector without re-measuring:

* per condition: A/A pairings, false change points (the history's detector,
  ``changepoints.detect``, calls the pairing a step), and the exact 95 % upper bound of that rate;
* per model and condition: the A/A pairings' median ±99 % half-width; a 5 % step found within 5
  runs (the pairing's figures times 1.05: at a model change a pairing of at least ``MIN_PAIRS``
  session pairs is the detector's only evidence, so found within 5 runs is found at the first; a
  shorter pairing leaves it to the absolute figures, which are not recorded here: counted as
  missed); a 3 % step the same way where the model's ±99 % half-width is <= 1 %;
* ``--bisect``: the 20-commit scenario of ``history_quality.py`` (MobileNetV2, blocks adding about
  +4 % at commit 6 and +7 % at commit 13, sized quiet), then ``roofline bisect first last
  --threshold 3`` with one busy process beside it; its answer is a JSON line too.

Usage::

    python benchmarks/history_under_load.py --record benchmarks/data/history-under-load \\
        --conditions quiet,busy1 --pairings 300
    python benchmarks/history_under_load.py --record benchmarks/data/history-under-load --bisect
    python benchmarks/history_under_load.py                # the report of the recorded lines
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

DEFAULT_RUNS = HERE / "data" / "history-under-load"
#: The steps the targets inject, and the ±99 % half-width up to which a model must find a 3 % step.
STEP = 0.05
SMALL_STEP = 0.03
SHARP = 0.01
#: The 20-commit scenario's first slower commit (``history_quality.scenario_repo``: commits // 3).
COMMITS = 20


def _spec_and_arrays(path: Path, dims: dict[str, int]) -> tuple[Any, dict[str, Any]]:
    from pytest_roofline.model import ModelSpec, bind_input_shapes, load_model, make_inputs

    model = load_model(str(path))
    arrays = make_inputs(model, bind_input_shapes(model, None, dims or None), seed=0)
    return ModelSpec.create(str(path), dims=dims or None), arrays


def _quick_p25(engine: Any, spec: Any, arrays: dict[str, Any]) -> float:
    """One session's p25 (the run estimate the plugin hands the pairing: its profile's p25)."""
    with engine.open(spec, arrays) as session:
        session.time(2)
        return float(np.percentile(session.time(7), 25))


def record(args: argparse.Namespace) -> None:
    """``--pairings`` A/A pairings per condition into ``args.runs``/records.jsonl."""
    from gate_under_load import SMALL, load_condition
    from history_quality import retrained_copy

    from pytest_roofline.backends.base import get_backend
    from pytest_roofline.history.pairing import time_pairing
    from pytest_roofline.zoo.suite import zoo_model

    names = list(SMALL) if args.models == "small" else args.models.split(",")
    engine = get_backend("onnxruntime", {})
    work = Path(tempfile.mkdtemp(prefix="history-under-load-"))
    models: dict[str, dict[str, Any]] = {}
    for name in names:
        entry = zoo_model(name)
        base = entry.build()
        paths = {"a": work / f"{name}.onnx", "a2": work / f"{name}.retrained.onnx"}
        onnx.save(base, str(paths["a"]))
        onnx.save(retrained_copy(base), str(paths["a2"]))
        dims = dict(entry.dims)
        models[name] = {kind: _spec_and_arrays(path, dims) for kind, path in paths.items()}
    args.runs.mkdir(parents=True, exist_ok=True)
    with (args.runs / "records.jsonl").open("a", encoding="utf-8") as sink:
        for condition in args.conditions.split(","):
            print(f"== {condition}: {args.pairings} pairings over {len(names)} models", flush=True)
            deadline = time.monotonic() + args.minutes * 60
            with load_condition(condition):
                estimates = {n: _quick_p25(engine, *models[n]["a"]) for n in names}
                for index in range(args.pairings):
                    if time.monotonic() > deadline:
                        print(f"  stopped at the {args.minutes:g} min limit: {index} pairings", flush=True)
                        break
                    name = names[index % len(names)]
                    new, old = ("a2", "a") if (index // len(names)) % 2 == 0 else ("a", "a2")
                    (spec, arrays), (reference, _) = models[name][new], models[name][old]
                    load1 = os.getloadavg()[0]
                    started = time.perf_counter()
                    estimate = estimates[name]
                    figures, busy, mode = time_pairing(engine, spec, reference, arrays, run_estimate=estimate)
                    line = {
                        "kind": "aa",
                        "condition": condition,
                        "model": name,
                        "new": new,
                        "figures": list(figures),
                        "pressure": busy,
                        "mode": mode,
                        "seconds": time.perf_counter() - started,
                        "load1": load1,
                        "run_estimate": estimates[name],
                        "time": time.time(),
                    }
                    sink.write(json.dumps(line) + "\n")
                    sink.flush()
                    ratio = float(np.median(figures)) if figures else math.nan
                    print(
                        f"  {index + 1:3d} {name:18s} {len(figures):2d} pairs ratio {ratio:.4f} "
                        f"pressure {busy:.2f} load1 {load1:.1f} {line['seconds']:.1f}s",
                        flush=True,
                    )


def bisect_busy(args: argparse.Namespace) -> None:
    """The 20-commit scenario built quiet, then ``roofline bisect`` beside one busy process."""
    from gate_under_load import load_condition
    from history_quality import run_bisect, scenario_repo

    with tempfile.TemporaryDirectory(prefix="history-bisect-") as tmp:
        work, repo = Path(tmp) / "work", Path(tmp) / "repo"
        work.mkdir()
        repo.mkdir()
        print(f"== bisect: building the {COMMITS}-commit scenario (quiet)", flush=True)
        shas, steps_at = scenario_repo(work, repo, COMMITS, quick=False)
        env = {**os.environ, "ROOFLINE_CACHE_DIR": str(work / "cache")}
        env.pop("ROOFLINE_HISTORY", None)
        with load_condition("busy1"):
            load1 = os.getloadavg()[0]
            result, took, error = run_bisect(repo, env, shas[0], shas[-1], "--model", "model.onnx")
        line = {
            "kind": "bisect",
            "condition": "busy1",
            "commits": COMMITS,
            "expected": min(steps_at),
            "culprit": shas.index(result["culprit"]) if result.get("culprit") in shas else None,
            "verdicts": [
                {**v, "index": shas.index(v["commit"]) if v["commit"] in shas else None}
                for v in result.get("verdicts", [])
            ],
            "steps": result.get("steps"),
            "seconds": took,
            "load1": load1,
            "error": error,
            "time": time.time(),
        }
        args.runs.mkdir(parents=True, exist_ok=True)
        with (args.runs / "records.jsonl").open("a", encoding="utf-8") as sink:
            sink.write(json.dumps(line) + "\n")
        _print_bisect(line)


def _print_bisect(line: dict[str, Any]) -> None:
    found = line["culprit"]
    limit = math.ceil(math.log2(line["commits"])) + 2
    print(
        f"roofline bisect first last --threshold 3 beside one busy process (load1 {line['load1']:.1f}): "
        f"culprit at commit {found} (expected {line['expected']}: "
        f"{'right' if found == line['expected'] else 'WRONG'}), {line['steps']} steps (limit {limit}), "
        f"{line['seconds']:.0f} s" + (f"; error: {line['error']}" if line["error"] else "")
    )
    for verdict in line["verdicts"]:
        ci = verdict.get("ci") or [math.nan, math.nan]
        print(
            f"  commit {verdict['index']}: {verdict['status']} ratio {verdict['ratio']:.4f} "
            f"(95 % {ci[0]:.4f}-{ci[1]:.4f}, {verdict.get('sessions')} sessions)"
        )


def _pairing(line: dict[str, Any]) -> Any:
    from pytest_roofline.history.points import Paired

    mode = line.get("mode") or "paired"  # recorded before round four: judged as it was then
    return Paired(tuple(line["figures"]), "previous", pressure=float(line["pressure"]), mode=mode)


def _outside(pair: Any) -> bool:
    low, high = pair.ci(0.99)
    return not low <= 1.0 <= high


def _needed_floor(pairs: list[Any]) -> float:
    """The smallest paired floor that keeps all but 1 % of these A/A pairings' ratios inside their
    own 99 % interval (``gate.noise.NoiseRecord.needed_floor``, each pairing's sampled noise
    without a floor): what the noise model would need for the history's pairings."""
    from pytest_roofline.gate.noise import NoiseRecord
    from pytest_roofline.gate.verdict import compare

    needed = []
    for pair in pairs:
        if len(pair.figures) < 2:
            continue
        bare = compare(pair.judged, None, tolerance=0.0, mode="paired", drift=0.0)
        sigma = (bare.noise or 0.0) / 1.96
        needed.append(NoiseRecord("paired", pair.pressure, math.log(pair.ratio), sigma).needed_floor())
    return float(np.percentile(needed, 99)) if needed else math.nan


def report(args: argparse.Namespace) -> None:
    """The figures of the recorded lines, judged by the current detector."""
    from history_quality import false_bound, half_width, paired_step

    from pytest_roofline.history.changepoints import MIN_PAIRS

    path = args.runs / "records.jsonl"
    if not path.is_file():
        raise SystemExit(f"nothing recorded in {path}: run with --record DIR first")
    lines = [json.loads(text) for text in path.read_text(encoding="utf-8").splitlines() if text.strip()]
    pairings = [line for line in lines if line["kind"] == "aa" and line["figures"]]
    print(f"recorded in {path}: {len(pairings)} A/A pairings, judged by the current history detector")
    conditions = sorted({line["condition"] for line in pairings}, key=lambda c: (c != "quiet", c))
    for condition in conditions:
        mine = [line for line in pairings if line["condition"] == condition]
        pairs = [_pairing(line) for line in mine]
        flagged = [(line, pair) for line, pair in zip(mine, pairs, strict=True) if paired_step(pair)]
        pressures = [line["pressure"] for line in mine]
        loads = [line["load1"] for line in mine]
        seconds = [line["seconds"] for line in mine]
        print(
            f"\n== {condition}: {len(mine)} A/A pairings of {len({x['model'] for x in mine})} models; "
            f"pressure median {np.median(pressures):.2f} (p10-p90 {np.percentile(pressures, 10):.2f}-"
            f"{np.percentile(pressures, 90):.2f}), load average 1 min {min(loads):.1f}-{max(loads):.1f}; "
            f"a pairing took {np.median(seconds):.1f} s (median)"
        )
        print(
            f"false change points: {len(flagged)} of {len(mine)} "
            f"(95 % upper bound of the rate: {false_bound(len(flagged), len(mine)) * 100:.2f} %)"
        )
        outside = sum(1 for pair in pairs if len(pair.figures) >= 2 and _outside(pair))
        print(
            f"A/A ratios outside their own 99 % interval: {outside} of {len(pairs)} "
            f"({outside / len(pairs) * 100:.1f} %); the floor they need for <= 1 % outside: "
            f"{_needed_floor(pairs) * 100:.2f} % (the noise model's at their median pressure: "
            f"{np.median([p.floor for p in pairs]) * 100:.2f} %)"
        )
        for line, pair in flagged:
            low, high = pair.ci(0.99) or (math.nan, math.nan)
            print(
                f"  called a step: {line['model']} ratio {pair.ratio:.4f} (99 % {low:.4f}-{high:.4f}, "
                f"{len(pair.figures)} pairs, pressure {pair.pressure:.2f})"
            )
        print(
            f"{'model':<18} {'A/A':>4} {'pairs':>5} {'press':>5} {'floor':>6} {'±99%':>6} "
            f"{'5% in 5':>8} {'3% in 5':>8}"
        )
        worst5: tuple[float, str] = (2.0, "")
        worst3: tuple[float, str] = (2.0, "")
        for model in sorted({x["model"] for x in mine}):
            group = [_pairing(x) for x in mine if x["model"] == model]
            half = float(np.median([half_width(p) for p in group if len(p.figures) >= 2]))
            short = sum(len(p.figures) < MIN_PAIRS for p in group)
            found5 = sum(len(p.figures) >= MIN_PAIRS and paired_step(p.scaled(1 + STEP)) for p in group)
            share5 = found5 / len(group)
            worst5 = min(worst5, (share5, model))
            text3 = "-"
            if half <= SHARP:
                found3 = sum(
                    len(p.figures) >= MIN_PAIRS and paired_step(p.scaled(1 + SMALL_STEP)) for p in group
                )
                worst3 = min(worst3, (found3 / len(group), model))
                text3 = f"{found3 / len(group) * 100:.0f} %"
            print(
                f"{model:<18} {len(group):>4} {np.median([len(p.figures) for p in group]):>5.0f} "
                f"{np.median([p.pressure for p in group]):>5.2f} "
                f"{np.median([p.floor for p in group]) * 100:>5.2f}% {half * 100:>5.2f}% "
                f"{share5 * 100:>7.0f}% {text3:>8}"
                + (f"  ({short} under {MIN_PAIRS} pairs)" if short else "")
            )
        print(
            f"5 % step found within 5 runs: worst model {worst5[1]} {worst5[0] * 100:.0f} % of its series "
            f"(target >= 90 % for every model)"
        )
        sharp = f"worst model {worst3[1]} {worst3[0] * 100:.0f} %" if worst3[1] else "no model qualifies"
        print(
            f"3 % step found within 5 runs where the A/A ±99 % half-width <= {SHARP * 100:g} %: {sharp} "
            "(target >= 90 %)"
        )
    for line in lines:
        if line["kind"] == "bisect":
            print()
            _print_bisect(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", type=Path, default=None, metavar="DIR", help="record pairings into DIR")
    parser.add_argument("--runs", type=Path, default=None, help=f"recorded lines (default {DEFAULT_RUNS})")
    parser.add_argument("--conditions", default="quiet,busy1", help="quiet,busy1 (the default)")
    parser.add_argument("--pairings", type=int, default=300, help="A/A pairings per condition (default 300)")
    parser.add_argument("--minutes", type=float, default=30.0, help="most minutes per condition (default 30)")
    parser.add_argument("--models", default="small", help="small (default), or zoo names, comma separated")
    parser.add_argument("--bisect", action="store_true", help="the 20-commit bisect beside one busy process")
    args = parser.parse_args(argv)
    args.runs = (args.record or args.runs or DEFAULT_RUNS).resolve()
    if args.record and args.pairings > 0 and not args.bisect:
        record(args)
    if args.bisect:
        bisect_busy(args)
    report(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
