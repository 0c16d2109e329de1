"""Is a paired A/A ratio's bias a property of the copy's bytes, or of the pairing?  (issue 31)

For each zoo model, ``REPS`` times: pairings of the re-saved copy against the model and of an
identical file against the model, 8 sessions x 10 rounds at one intra-op thread, in this process
(``inproc``) and each in a fresh process (``fresh``); one JSON line per pairing in
``OUT/records.jsonl`` (session figures, their mean log ratio and its standard error).  A
pairing-level effect shows as pairing means that differ by more than their standard errors.
``CONDITION`` ``busy1`` runs one ``while True: pass`` beside it.  ``CLOCK`` ``thread`` times each
run by its thread's CPU time, as the gate's pairings under load do (``Backend.thread_timed_copy``);
``wall`` (the default) by the wall clock.

``loads`` (round four): where a pairing's sessions load the model from.  One model against an
identical file at one thread, timed by CPU time, 8 sessions x 5 rounds a pairing (the gate's
batch, balanced figures), ``CYCLES`` times each way in turn: ``path`` (each session loads the
file's path, the design before round four) and ``bytes`` (``gate.paired``'s openers: each session
its own read of the file's bytes).  Per way it prints the pairing means' range and chi^2/df of the
means against their standard errors: ~1 when the pairing adds no effect of its own.

Usage::

    python benchmarks/aa_pairings.py busy1 gpt2_kv,lstm_gru,convnext_fp16,moe,mobilenet_v2 3 OUT [CLOCK]
    python benchmarks/aa_pairings.py loads busy1 gpt2_kv 8 OUT
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_roofline.gate.verdict import balanced_ratios  # noqa: E402
from pytest_roofline.zoo.suite import zoo_model  # noqa: E402
from pytest_roofline.zoo.variants import resaved_copy  # noqa: E402


def pairing(new: str, old: str, dims: dict[str, int], clock: str = "wall") -> list[float]:
    """Session figures (median per-round ratio new / old) of one 8-session pairing at one thread."""
    from pytest_roofline.backends.base import get_backend
    from pytest_roofline.gate.verdict import round_ratios
    from pytest_roofline.measure.rounds import SessionOpener, sample_interleaved
    from pytest_roofline.model import ModelSpec, bind_input_shapes, load_model, make_inputs

    engine = get_backend("onnxruntime", {}).single_thread()
    if clock == "thread":
        engine = engine.thread_timed_copy() or engine

    def opener(path: str) -> SessionOpener:
        model = load_model(path)
        feeds = make_inputs(model, bind_input_shapes(model, None, dims or None), seed=0)
        return SessionOpener(engine, ModelSpec.create(path, dims=dims or None), feeds)

    samples = sample_interleaved([opener(new), opener(old)], sessions=8, rounds=10, iterations=1, warmup=3)
    return round_ratios(samples[0], samples[1])


def main(condition: str, models: list[str], reps: int, out: Path, clock: str = "wall") -> None:
    out.mkdir(parents=True, exist_ok=True)
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"])] if condition == "busy1" else []
    sink = (out / "records.jsonl").open("a", encoding="utf-8")
    try:
        for name in models:
            entry = zoo_model(name)
            model, dims = entry.build(), dict(entry.dims)
            base, same, copy = (out / f"{name}{tail}.onnx" for tail in ("", ".same", ".copy"))
            onnx.save(model, str(base))
            onnx.save(model, str(same))
            onnx.save(resaved_copy(model), str(copy))
            for rep in range(reps):
                for kind, new in (("copy", copy), ("same", same)):
                    for where in ("inproc", "fresh"):
                        started = time.time()
                        if where == "inproc":
                            figures = pairing(str(new), str(base), dims, clock)
                        else:
                            command = [
                                sys.executable,
                                __file__,
                                "one",
                                str(new),
                                str(base),
                                json.dumps(dims),
                                clock,
                            ]
                            done = subprocess.run(command, capture_output=True, text=True, check=True)
                            figures = json.loads(done.stdout)
                        logs = np.log(figures)
                        record = {
                            "model": name,
                            "cond": condition,
                            "clock": clock,
                            "kind": kind,
                            "where": where,
                            "rep": rep,
                            "figures": figures,
                            "mean": float(logs.mean()),
                            "se": float(logs.std(ddof=1) / math.sqrt(len(logs))),
                            "sec": time.time() - started,
                            "load": os.getloadavg()[0],
                        }
                        sink.write(json.dumps(record) + "\n")
                        sink.flush()
                        print(
                            f"{name:14s} {kind:4s} {where:6s} {math.exp(record['mean']):.3f} "
                            f"se {record['se']:.3f} load {record['load']:.1f}",
                            flush=True,
                        )
    finally:
        for proc in spin:
            proc.kill()


def loads(condition: str, name: str, cycles: int, out: Path) -> None:
    """Pairings of ``name`` against an identical file, its sessions loading the path or their own
    bytes in turn; one JSON line each in ``OUT/loads.jsonl`` and a summary per way."""
    from pytest_roofline.backends.base import get_backend
    from pytest_roofline.gate.paired import FreshInputs, _fresh_inputs
    from pytest_roofline.measure.rounds import SessionOpener, sample_interleaved
    from pytest_roofline.model import ModelSpec, bind_input_shapes, load_model, make_inputs

    out.mkdir(parents=True, exist_ok=True)
    entry = zoo_model(name)
    dims = dict(entry.dims)
    model = entry.build()
    paths = [out / f"{name}.same.onnx", out / f"{name}.onnx"]
    for path in paths:
        onnx.save(model, str(path))
    engine = get_backend("onnxruntime", {}).single_thread()
    engine = (engine.thread_timed_copy() or engine) if engine is not None else None
    assert engine is not None, "onnxruntime at one thread"

    def opener(path: Path) -> SessionOpener:
        proto = load_model(str(path))
        feeds = make_inputs(proto, bind_input_shapes(proto, None, dims or None), seed=0)
        return SessionOpener(engine, ModelSpec.create(str(path), dims=dims or None), feeds)

    ways = {
        "path": [FreshInputs(o.backend, o.spec, o.feeds) for o in map(opener, paths)],
        "bytes": _fresh_inputs([opener(p) for p in paths]),
    }
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"])] if condition == "busy1" else []
    means: dict[str, list[tuple[float, float]]] = {way: [] for way in ways}
    try:
        with (out / "loads.jsonl").open("a", encoding="utf-8") as sink:
            for cycle in range(cycles):
                for way, openers in ways.items():
                    samples = sample_interleaved(openers, sessions=8, rounds=5, iterations=1, warmup=3)
                    figures = balanced_ratios(samples[0], samples[1])
                    logs = np.log(figures)
                    mean, se = float(logs.mean()), float(logs.std(ddof=1) / math.sqrt(len(logs)))
                    means[way].append((mean, se))
                    load = os.getloadavg()[0]
                    record = {
                        "model": name,
                        "cond": condition,
                        "way": way,
                        "cycle": cycle,
                        "figures": figures,
                    }
                    sink.write(json.dumps({**record, "mean": mean, "se": se, "load": load}) + "\n")
                    print(f"{way:5s} {cycle} {math.exp(mean):.3f} se {se:.3f} load {load:.2f}", flush=True)
    finally:
        for proc in spin:
            proc.kill()
    for way, pairs in means.items():
        chi2 = sum((m / se) ** 2 for m, se in pairs if se > 0) / len(pairs)
        low, high = (math.exp(f(m for m, _ in pairs)) for f in (min, max))
        print(f"{condition} {name} {way}: {len(pairs)} pairings {low:.3f}-{high:.3f}, chi^2/df {chi2:.1f}")


if __name__ == "__main__":
    if sys.argv[1] == "loads":
        loads(sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5]))
    elif sys.argv[1] == "one":
        print(json.dumps(pairing(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), sys.argv[5])))
    else:
        clock = sys.argv[5] if len(sys.argv) > 5 else "wall"
        main(sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), Path(sys.argv[4]), clock)
