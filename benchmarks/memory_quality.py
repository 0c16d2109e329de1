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
  against the unchanged model's record at the default tolerance (1 %): target: a ``regression`` on
  the first run, the layers named beside the bytes they grew by; the unchanged model against
  itself (a second session): ``pass`` on every model;
* **overhead**: the seconds reading memory adds (the trace is the layer profile's own; the work is
  reading its counters and the liveness estimate) against the seconds of the profiled run it
  rides on; target: at most 2 %.

Timings on a shared machine are noisy; the memory figures are counters and are not.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from pytest_roofline.gate.memory import MemoryTolerance, memory_verdict
from pytest_roofline.memory import MemoryRecord
from pytest_roofline.memory.estimate import lifetimes
from pytest_roofline.memory.measure import profiled_memory
from pytest_roofline.pipeline import ModelCall, prepare, profile_layers
from pytest_roofline.zoo.suite import ZOO, write_zoo, zoo_model

PROFILE_RUNS = 2
KEEP_SHARE = 0.05  # the variant: one intermediate of at least 5 % of the peak kept alive
SMALLEST_SHARE = 0.015  # below 5 %, a variant is still judged when the buffer clears the 1 % tolerance


def measure(path: Path, dims: dict[str, int], threads: str | None) -> tuple[Any, ...]:
    """(memory, per-layer memory, seconds of the profiled run, seconds reading memory, analysis) of
    one fresh session, profiled and analyzed as the plugin does (``pipeline.profile_layers``)."""
    options = {"intra_op_threads": threads} if threads else None
    prepared = prepare(ModelCall(str(path), dims=dims or None, options=options))
    start = time.perf_counter()
    run = profile_layers(prepared, iterations=PROFILE_RUNS)
    profiled = time.perf_counter() - start
    start = time.perf_counter()
    memory, layers = profiled_memory(run.kernels, run.analysis)
    reading = time.perf_counter() - start
    return memory, layers, profiled, reading, run.analysis


def keep_alive_variant(path: Path, analysis: Any, peak: int, out: Path) -> tuple[Path, str, int] | None:
    """The model with its largest intermediate (at least :data:`SMALLEST_SHARE` of ``peak``) made a
    graph output: (path, the tensor's producer, its bytes), or None when none is that large."""
    outputs = set(analysis.graph_outputs)
    candidates = [
        life for life in lifetimes(analysis).values() if life.tensor not in outputs and life.last_reader
    ]
    if not candidates:
        return None
    largest = max(candidates, key=lambda life: life.bytes)
    if largest.bytes < SMALLEST_SHARE * peak:
        return None
    model = onnx.load(str(path))
    dtype = helper.np_dtype_to_tensor_dtype(np.dtype(analysis.tensors[largest.tensor].dtype))
    model.graph.output.append(helper.make_tensor_value_info(largest.tensor, dtype, None))
    target = out / f"{path.stem}__keep.onnx"
    onnx.save(model, str(target))
    return target, largest.producer, largest.bytes


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
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n] or [entry.name for entry in ZOO]
    paths = write_zoo(args.out, names)
    rows, errors, not_repeatable, caught, unchanged_ok, overheads = [], [], [], [], [], []
    readings: list[tuple[float, str]] = []
    caught_small: list[tuple[str, bool, str, str]] = []
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
        overheads.extend(reading / profiled for _, _, profiled, reading, _ in default)
        readings.extend((reading, name) for _, _, _, reading, _ in default)
        record = MemoryRecord(memory, default[0][1])
        again = _Profile(*(default[1] if len(default) > 1 else single[0])[:2], name)
        same = memory_verdict(again, record, MemoryTolerance())  # type: ignore[arg-type]
        unchanged_ok.append((name, same.status if same else "none"))
        variant = keep_alive_variant(path, default[0][4], memory.peak, args.out)
        keep = "-"
        if variant is None:
            keep = f"no intermediate >= {SMALLEST_SHARE * 100:.1f} % of the peak"
        else:
            vpath, producer, size = variant
            vmem, vlayers, *_ = measure(vpath, dims, None)
            verdict = memory_verdict(_Profile(vmem, vlayers, name), record, MemoryTolerance())  # type: ignore[arg-type]
            status = verdict.status if verdict else "none"
            named = verdict.explanation if verdict else ""
            large = size >= KEEP_SHARE * memory.peak
            (caught if large else caught_small).append((name, status == "regression", producer, named))
            share = f"{size / memory.peak * 100:.1f} % of the peak"
            keep = f"{status}: kept {size / 1e6:.3g} MB ({share}) of {producer}; {named or 'no layer named'}"
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
        f"{sum(c for _, c, _, _ in caught)}/"
        f"{len(caught)} with an intermediate >= 5 % of the peak (of {len(errors)} models); "
        f"{sum(c for _, c, _, _ in caught_small)}/{len(caught_small)} more whose largest is "
        f"{SMALLEST_SHARE * 100:.1f}-5 % of it"
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
